//! A tolerance below what double precision attains: every method ends `stagnated` with the
//! true residual of the iterate it returns, never a breakdown that blames the matrix
//! (issue 47, item 3), while an indefinite matrix still breaks down (`ccg_pipecg.rs`).

use castack_krylov::{sparse::gen, Method, SolverConfig, StopReason};
use castack_test_support::reference::{relres, CsrRef};

use crate::floor::solve;

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
                let (x, rep) = solve(&a, &b, p, &cfg);
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
