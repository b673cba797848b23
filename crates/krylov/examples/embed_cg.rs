//! How another Rust HPC application embeds castack-krylov: it assembles its OWN matrix (a
//! 1-D diffusion operator with a variable coefficient, as sprs triplets), brings its own
//! communicator (here thread ranks; an MPI communicator implements the same trait), solves
//! with CG + Jacobi, and checks the answer against a solution it knows.
//!
//! Run: `cargo run -p castack-krylov --example embed_cg`

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{Cpu, DistCsr, Partition, Solver, SolverConfig, SpmvMode};
use sprs::TriMat;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // -(k u')' = f on (0, 1), u(0) = u(1) = 0, n interior points, k(x) = 1 + x.
    let n = 2000;
    let h = 1.0 / (n + 1) as f64;
    let k = |x: f64| 1.0 + x;
    let mut t = TriMat::new((n, n));
    for i in 0..n {
        let (xl, xr) = ((i as f64 + 0.5) * h, (i as f64 + 1.5) * h);
        t.add_triplet(i, i, (k(xl) + k(xr)) / (h * h));
        if i > 0 {
            t.add_triplet(i, i - 1, -k(xl) / (h * h));
        }
        if i + 1 < n {
            t.add_triplet(i, i + 1, -k(xr) / (h * h));
        }
    }
    let a = t.to_csr();
    // Manufacture b from a known discrete solution u_i = sin(pi x_i).
    let u: Vec<f64> = (0..n)
        .map(|i| (std::f64::consts::PI * (i + 1) as f64 * h).sin())
        .collect();
    let b: Vec<f64> = a
        .outer_iterator()
        .map(|row| row.iter().map(|(j, v)| v * u[j]).sum())
        .collect();

    let ranks = 4;
    let part = Partition::rows(n, ranks);
    // 1e-8: b = A u is small beside |A| |u| here (||b|| ~ 15 ||u||, |A| |u| ~ 4 |u| / h^2),
    // so the residual's own rounding is about 1e-10 of ||b||; a claim of convergence must
    // clear the rigorous bound on it (the solver certifies its claim for the x it returns),
    // which puts the certifiable tolerance near 1e-9 for this system.
    let tol = 1e-8;
    let cfg = SolverConfig {
        tol,
        ..SolverConfig::default()
    };
    let results = ThreadUniverse::new(ranks)?.run(|comm| {
        let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
        let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
        let range = part.range(comm.rank());
        let sol = solver.solve(&b[range.clone()], None)?;
        Ok::<_, castack_krylov::KrylovError>((range, sol))
    })?;

    let mut max_err = 0.0f64;
    for r in results {
        let (range, sol) = r?;
        assert!(sol.report.converged, "not converged: {:?}", sol.report);
        assert!(sol.report.relres_true <= tol);
        // CG issues exactly 2 reductions per iteration, plus one true-residual check at the
        // end and one per residual replacement.
        let r = &sol.report;
        assert_eq!(
            r.reductions,
            2 * r.iterations as u64 + 1 + r.residual_replacements
        );
        for (xi, ui) in sol.x.iter().zip(&u[range]) {
            max_err = max_err.max((xi - ui).abs());
        }
        if sol.report.iterations > 0 {
            println!(
                "rank block done: {} iterations, relres_true {:.2e}",
                sol.report.iterations, sol.report.relres_true
            );
        }
    }
    println!("max |x - u| = {max_err:.3e}");
    assert!(max_err < 1e-6, "solution error {max_err}");
    Ok(())
}
