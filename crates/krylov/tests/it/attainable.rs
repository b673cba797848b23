//! A tolerance below what double precision attains: every method ends `stagnated` with the
//! true residual of the iterate it returns, never a breakdown that blames the matrix
//! (issue 47, item 3), while an indefinite matrix still breaks down (`ccg_pipecg.rs`).

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Cpu, DistCsr, Method, Partition, SolveReport, Solver, SolverConfig, SpmvMode,
    StopReason,
};
use castack_test_support::reference::{relres, CsrRef};
use sprs::CsMat;

/// Solve `a x = A ones` on `p` thread ranks: the gathered x and rank 0's report.
fn solve(a: &CsMat<f64>, p: usize, cfg: &SolverConfig) -> (Vec<f64>, SolveReport) {
    let n = a.rows();
    let b = CsrRef::of(a).matvec(&vec![1.0; n]);
    let part = Partition::rows(n, p);
    let out = ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| {
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let range = part.range(comm.rank());
            let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
            solver.solve(&b[range], None)
        })
        .unwrap();
    let mut x = Vec::with_capacity(n);
    let mut report = None;
    for s in out {
        let s = s.unwrap_or_else(|e| panic!("{}: {e}", cfg.method.name()));
        x.extend_from_slice(&s.x);
        report.get_or_insert(s.report);
    }
    (x, report.unwrap())
}

#[test]
fn a_tolerance_below_attainable_accuracy_stagnates_in_every_method() {
    let a = gen::poisson3d(10).unwrap();
    let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
    // 1e-50: pipecg's curvature turned negative at rounding level (a breakdown before);
    // 1e-200: cg's recurrence underflowed into a NaN curvature (a breakdown before).
    for tol in [1e-50, 1e-200] {
        for &method in Method::ALL {
            for p in [1, 2] {
                let cfg = SolverConfig {
                    method,
                    tol,
                    max_iter: 20_000,
                    ..SolverConfig::default()
                };
                let (x, rep) = solve(&a, p, &cfg);
                let what = format!("{} p={p} tol={tol:e}", method.name());
                assert_eq!(rep.stop_reason, StopReason::Stagnated, "{what}: {rep:?}");
                assert!(!rep.converged && rep.breakdown.is_none(), "{what}");
                assert!(rep.equivalent_iterations < cfg.max_iter, "{what}");
                // The iterate is the solution to rounding, and its reported true residual
                // is that of the x returned (an independent sequential evaluation).
                let independent = relres(CsrRef::of(&a), &b, &x);
                assert!(independent < 1e-13, "{what}: relres {independent:e}");
                assert!(
                    (rep.relres_true - independent).abs() <= 1e-15,
                    "{what}: reported {:e}, independent {independent:e}",
                    rep.relres_true
                );
            }
        }
    }
}
