//! A matrix-free operator: an application that never forms its matrix hands the solver
//! `y = A x` itself (`castack_krylov::Operator`, `Solver::with_operator`).
//!
//! The operator is the 1-D Laplacian with a variable coefficient `-(k u')' + c u` on `N`
//! cells, split over 4 thread ranks; each application exchanges one value with each
//! neighbouring rank through the communicator (reported to the solver with
//! `SolverComm::halo_since`, so the report's `halo_exchanges` counts it) and applies the
//! stencil from the coefficient function. The example solves with cg and the
//! communication-avoiding cacg under Jacobi scaling (the diagonal comes from
//! `Operator::diagonal`) and asserts the solution against the known one.
//!
//! Run: `cargo run -p castack-krylov --example matrix_free`

use castack_collectives::{Communicator, PointToPoint, ThreadUniverse};
use castack_krylov::Bucket;
use castack_krylov::{
    Cpu, DistVec, KrylovError, Method, Operator, Ops, Partition, Solver, SolverConfig,
};

const N: usize = 2000;

/// Coupling between cells `i` and `i + 1`.
fn k(i: usize) -> f64 {
    1.0 + 0.5 * (i as f64 * 0.01).sin()
}

fn diag(i: usize) -> f64 {
    let left = if i > 0 { k(i - 1) } else { 1.0 };
    left + k(i) + 1e-2
}

/// The known solution.
fn exact(i: usize) -> f64 {
    (i as f64 / N as f64 * 3.0).cos()
}

/// `(A u)_i` from a callback for the neighbours' values.
fn stencil(i: usize, u: impl Fn(usize) -> f64) -> f64 {
    let mut v = diag(i) * u(i);
    if i > 0 {
        v -= k(i - 1) * u(i - 1);
    }
    if i + 1 < N {
        v -= k(i) * u(i + 1);
    }
    v
}

struct Laplacian<'c, C: ?Sized> {
    comm: &'c C,
    start: usize,
    n: usize,
    /// This rank's values with one ghost on each side.
    x: Vec<f64>,
    y: Vec<f64>,
}

impl<C: Communicator + ?Sized> Operator<C, Cpu> for Laplacian<'_, C> {
    fn n(&self) -> usize {
        N
    }
    fn n_local(&self) -> usize {
        self.n
    }
    fn row_start(&self) -> usize {
        self.start
    }
    fn diagonal(&self) -> Vec<f64> {
        (self.start..self.start + self.n).map(diag).collect()
    }
    fn apply(
        &mut self,
        ops: &mut Ops<'_, C, Cpu>,
        x: &DistVec<Cpu>,
        y: &mut DistVec<Cpu>,
    ) -> Result<(), KrylovError> {
        let (me, p, n) = (self.comm.rank(), self.comm.size(), self.n);
        ops.stage_out(x.raw(), 0, &mut self.x[1..=n], Bucket::Spmv)?;
        let t = ops.sc_mut().now();
        let tag = self.comm.next_collective_tag();
        let (left, right) = (me > 0, me + 1 < p);
        let mut sent = Vec::new();
        if left {
            sent.push(self.comm.isend_f64(me - 1, tag, &self.x[1..2])?);
            self.comm.recv_f64(me - 1, tag, &mut self.x[0..1])?;
        }
        if right {
            sent.push(self.comm.isend_f64(me + 1, tag, &self.x[n..=n])?);
            self.comm.recv_f64(me + 1, tag, &mut self.x[n + 1..n + 2])?;
        }
        for s in sent {
            self.comm.wait_send(s)?;
        }
        ops.sc_mut()
            .halo_since(usize::from(left) + usize::from(right), t);
        let (start, xs) = (self.start, &self.x);
        for j in 0..n {
            self.y[j] = stencil(start + j, |i| xs[i + 1 - start]);
        }
        Ok(ops.stage_in(&self.y, y.raw_mut(), 0, Bucket::Spmv)?)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let p = 4;
    let part = Partition::rows(N, p);
    let outs = ThreadUniverse::new(p)?.run(|comm| -> Result<_, KrylovError> {
        let range = part.range(comm.rank());
        let b: Vec<f64> = range.clone().map(|i| stencil(i, exact)).collect();
        let mut out = Vec::new();
        for method in [Method::Cg, Method::Cacg] {
            let n = range.len();
            let op = Laplacian {
                comm,
                start: range.start,
                n,
                x: vec![0.0; n + 2],
                y: vec![0.0; n],
            };
            let cfg = SolverConfig {
                method,
                tol: 1e-10,
                ..SolverConfig::default()
            };
            let mut solver = Solver::with_operator(comm, Box::new(op), cfg, Cpu::sequential())?;
            let sol = solver.solve(&b, None)?;
            let err = range
                .clone()
                .zip(&sol.x)
                .map(|(i, v)| (v - exact(i)).abs())
                .fold(0.0, f64::max);
            out.push((method, sol.report, err));
        }
        Ok(out)
    })?;
    for rank in outs {
        for (method, r, err) in rank? {
            assert!(r.converged, "{method}: {r:?}");
            assert!(err < 1e-6, "{method}: error {err:e}");
            assert_eq!(r.spmv, "operator");
            assert!(r.halo_exchanges >= r.equivalent_iterations as u64);
        }
    }
    println!("matrix-free cg and cacg on {p} ranks: converged, solution within 1e-6");
    Ok(())
}
