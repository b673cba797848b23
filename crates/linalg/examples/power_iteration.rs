//! A method of your own on castack-linalg: power iteration for the largest eigenvalue of
//! the 2-D Poisson matrix on 4 thread ranks, written against `Ops` (the layer the CG
//! family uses), so every halo exchange and reduction is counted.
//!
//! Each iteration: `y = A x` fused with `x.y` (one halo exchange), `y.y` in the same
//! reduction (one allreduce of two values), `x = y / ||y||`. The Rayleigh quotient
//! `x.Ax` converges to `lambda_max = 4 + 4 cos(pi / (n + 1))` (the 5-point Laplacian on an
//! n x n grid), which the example asserts, with the counts.
//!
//! Run: `cargo run -p castack-linalg --example power_iteration`.

use castack_collectives::{AllreduceAlgo, Communicator, ThreadUniverse};
use castack_linalg::count::Phase;
use castack_linalg::sparse::gen;
use castack_linalg::{Cpu, DistCsr, LinalgError, Ops, Partition, SpmvMode};

const GRID: usize = 8;
const ITERATIONS: u64 = 400;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = gen::poisson2d(GRID)?;
    let n = a.rows();
    let part = Partition::rows(n, 4);
    let results = ThreadUniverse::new(4)?.run(|comm| -> Result<_, LinalgError> {
        let mut dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
        let (nl, ne) = (dist.n_local(), dist.n_ext());
        let mut ops = Ops::new(comm, AllreduceAlgo::default(), Cpu::sequential(), nl)?;
        ops.prepare(2)?;
        // y: an irregular start (a symmetric one can miss the top eigenvector).
        let mut y = ops.new_vec(nl, ne)?;
        let start = part.range(comm.rank()).start;
        for (k, v) in y.local_mut().iter_mut().enumerate() {
            *v = ((start + k) * 7919 % 101) as f64 / 101.0 - 0.5;
        }
        let mut x = ops.new_vec(nl, ne)?;
        ops.dot(&y, &y, 0)?;
        let mut s = [0.0; 2];
        ops.reduce(&mut s[..1])?;
        let (mut lambda, mut norm) = (0.0, s[0].sqrt());
        ops.set_phase(Phase::Loop);
        for _ in 0..ITERATIONS {
            ops.scale(1.0 / norm, &y, &mut x)?;
            dist.spmv_dot(&mut ops, &mut x, &mut y, 0)?;
            ops.dot(&y, &y, 1)?;
            ops.reduce(&mut s)?;
            (lambda, norm) = (s[0], s[1].sqrt());
        }
        Ok((lambda, ops.counters()))
    })?;
    let exact = 4.0 + 4.0 * (std::f64::consts::PI / (GRID + 1) as f64).cos();
    for r in results {
        let (lambda, c) = r?;
        println!(
            "lambda_max ~ {lambda:.12} (exact {exact:.12}); {} halo exchanges, {} reductions in the loop",
            c.halo_exchanges, c.reductions
        );
        assert!(
            (lambda - exact).abs() <= 1e-9 * exact,
            "{lambda} vs {exact}"
        );
        assert_eq!((c.halo_exchanges, c.reductions), (ITERATIONS, ITERATIONS));
    }
    Ok(())
}
