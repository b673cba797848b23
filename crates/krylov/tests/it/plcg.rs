//! p(l)-CG (`plcg`) end to end: converged by the true residual, close to a sequential
//! Jacobi-PCG, within 1.1x cg's iterations + 2l, at depths 1, 2, 3, plain and
//! preconditioned; EXACT reductions, halo exchanges and preconditioner applications as the
//! module doc states them (`cg/plcg.rs`), one reduction per iteration after the start-up;
//! the same bits on the sim backend as on threads; the square-root breakdown's restart;
//! the depth's validation; clean breakdowns or honest reports on indefinite matrices.

use castack_krylov::{
    sparse::gen, Method, Precond, SolveReport, SolverConfig, StopReason, DEPTH, DEPTH_MAX,
};
use castack_test_support::reference::{jacobi_pcg, relres, CsrRef};
use castack_test_support::spd::dense_spd;
use sprs::CsMat;

const DEPTHS: &[usize] = &[1, 2, 3];

/// What one rank returns: its x as bits, and its report.
use crate::family::{run, solve_with};

fn rhs(a: &CsMat<f64>) -> Vec<f64> {
    CsrRef::of(a).matvec(&vec![1.0; a.rows()])
}

fn solve(a: &CsMat<f64>, p: usize, cfg: &SolverConfig) -> (Vec<f64>, SolveReport) {
    solve_with(a, &rhs(a), None, p, cfg)
}

fn plcg(depth: usize, precond: Precond) -> SolverConfig {
    SolverConfig {
        method: Method::Plcg,
        precond,
        depth,
        ..SolverConfig::default()
    }
}

fn cg_with(precond: Precond) -> SolverConfig {
    SolverConfig {
        method: Method::Cg,
        precond,
        ..SolverConfig::default()
    }
}

/// Eigenvalues geometrically spaced in `[1, cond]`.
fn geometric(n: usize, cond: f64) -> Vec<f64> {
    (0..n)
        .map(|i| cond.powf(i as f64 / (n - 1) as f64))
        .collect()
}

fn problems() -> Vec<(&'static str, CsMat<f64>)> {
    vec![
        ("poisson2d(20)", gen::poisson2d(20).unwrap()),
        ("poisson3d(10)", gen::poisson3d(10).unwrap()),
        (
            "poisson3d_heterogeneous(8)",
            gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap(),
        ),
        (
            "dense spectrum [1, 1e3]",
            dense_spd(&geometric(100, 1e3), 11),
        ),
    ]
}

/// The restarts of a solve that ended at a check, from its report (module doc,
/// *Counting*): `(C, B)`, the failed checks (at least; one more where the last check was
/// a breakdown's, which the counters do not tell) and the pipeline's breakdowns, `l` its
/// depth, `periodic` the restarts of `replace_every`, `d` the Chebyshev degree (0 for
/// `bjacobi_ic0` and without a loop preconditioner). Asserts the loop's reductions, halo
/// exchanges and preconditioner applications (10 warm-up steps) exactly, the breakdowns
/// at a pivot (B_e) being what the reductions leave.
fn restarts(rep: &SolveReport, l: u64, periodic: u64, d: u64, pc: bool) -> (u64, u64) {
    let (i, rp) = (rep.iterations as u64, rep.residual_replacements);
    let b = rep
        .pipeline_breakdowns
        .expect("plcg reports its breakdowns");
    // K = C + (B - E) + P + 1 cycles, H = C + B + 1 - E checks: H = K - P.
    let k = rp + 1;
    let h = k - periodic;
    // reductions = S - B + B_e + (K - 1) + H, S = I + K l + B_e.
    let two_b_e = (rep.reductions + b + 1)
        .checked_sub(i + k * l + k + h)
        .unwrap_or_else(|| panic!("reductions below the formula's: {rep:?}"));
    assert_eq!(two_b_e % 2, 0, "{rep:?}");
    let b_e = two_b_e / 2;
    assert!(b_e <= b, "{b_e} pivot breakdowns of {b}: {rep:?}");
    let s = i + k * l + b_e;
    // The loop's applications: every step's, every cycle's start but the first.
    let loop_applies = if pc { s + k - 1 } else { 0 };
    assert_eq!(
        rep.halo_exchanges,
        s + b_e + h + periodic + d * loop_applies,
        "halo exchanges: {rep:?}"
    );
    let applies = if pc { 10 + loop_applies + 1 } else { 0 };
    assert_eq!(rep.precond_applies, applies, "applications: {rep:?}");
    (rp.saturating_sub(b + periodic), b)
}

#[test]
fn converges_like_cg_at_depths_1_to_3_with_exact_counts() {
    for (name, a) in problems() {
        let b = rhs(&a);
        let (x_ref, _) = jacobi_pcg(CsrRef::of(&a), &b, 1e-10, 10_000);
        for p in [1, 3] {
            let (_, cg) = solve(&a, p, &cg_with(Precond::Jacobi));
            assert!(cg.converged, "{name} cg p={p}");
            for &l in DEPTHS {
                let what = format!("{name} plcg l={l} p={p}");
                let (x, rep) = solve(&a, p, &plcg(l, Precond::Jacobi));
                assert!(rep.converged, "{what}: {rep:?}");
                assert!(rep.relres_true <= 1e-8, "{what}: {}", rep.relres_true);
                assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8, "{what}");
                let err = x
                    .iter()
                    .zip(&x_ref)
                    .map(|(u, v)| (u - v).abs())
                    .fold(0.0, f64::max);
                assert!(err <= 1e-4, "{what}: max |x - x_ref| = {err:e}");
                assert_eq!(rep.equivalent_iterations, rep.iterations);
                assert_eq!(rep.depth, Some(l));
                // Setup: cg's, plus the warm-up's 10 SpMVs and 20 reductions.
                assert_eq!(rep.setup_halo_exchanges, cg.setup_halo_exchanges + 10);
                assert_eq!(rep.setup_reductions, cg.setup_reductions + 20, "{what}");
                let (_, breakdowns) = restarts(&rep, l as u64, 0, 0, false);
                let (it, cg_it) = (rep.iterations, cg.iterations);
                if name.starts_with("dense") {
                    // A spectrum of 100 geometric eigenvalues resolved almost to the last
                    // one: the bases lose orthogonality, G its positive definiteness, and
                    // the restarts take more iterations than cg (issue 49's bound missed,
                    // reported: cg/README.md). The restarts are what keeps it converging.
                    assert!(breakdowns >= 1, "{what}: {rep:?}");
                    continue;
                }
                assert!(
                    it as f64 <= 1.1 * cg_it as f64 + 2.0 * l as f64,
                    "{what}: {it} iterations vs cg {cg_it}"
                );
            }
        }
    }
}

#[test]
fn one_reduction_and_one_spmv_per_iteration_after_the_start_up() {
    // The pin, read off two solves of the same problem that differ only in their
    // iteration budget; and the start-up's l, off the absolute counts.
    let a = gen::poisson3d(10).unwrap();
    for &l in DEPTHS {
        let at = |m: usize| {
            let cfg = SolverConfig {
                max_iter: m,
                ..plcg(l, Precond::Jacobi)
            };
            solve(&a, 3, &cfg).1
        };
        let (ten, twenty) = (at(10), at(20));
        for rep in [&ten, &twenty] {
            assert!(!rep.converged, "l={l}");
            assert_eq!(rep.stop_reason, StopReason::MaxIterations);
            assert_eq!(rep.residual_replacements, 0, "l={l}: {rep:?}");
            let i = rep.iterations as u64;
            // l start-up steps, one step per iteration, the final check.
            assert_eq!(rep.reductions, i + l as u64 + 1, "l={l}");
            assert_eq!(rep.halo_exchanges, i + l as u64 + 1, "l={l}");
        }
        assert_eq!((ten.iterations, twenty.iterations), (10, 20));
        assert_eq!(twenty.reductions - ten.reductions, 10, "l={l}");
        assert_eq!(twenty.halo_exchanges - ten.halo_exchanges, 10, "l={l}");
        assert!(twenty.relres_true < ten.relres_true);
    }
}

#[test]
fn deep_pipelines_restart_at_their_counted_cost_and_converge() {
    // Depths 5 and 8 on 3-D Poisson: the shifts' interval (Ritz values, 6-10% short of
    // lmax) lets G lose positive definiteness; each square-root breakdown restarts from
    // the true residual, and the solve still converges by the true residual.
    let a = gen::poisson3d(10).unwrap();
    let b = rhs(&a);
    let (_, cg) = solve(&a, 3, &cg_with(Precond::Jacobi));
    let mut breakdowns = 0;
    for l in [5, 8] {
        let (x, rep) = solve(&a, 3, &plcg(l, Precond::Jacobi));
        assert!(rep.converged, "l={l}: {rep:?}");
        assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8, "l={l}");
        breakdowns += restarts(&rep, l as u64, 0, 0, false).1;
        assert!(rep.iterations < 2 * cg.iterations, "l={l}: {rep:?}");
    }
    assert!(breakdowns >= 1, "no restart at depths 5 and 8");
}

#[test]
fn preconditioned_forms_converge_like_preconditioned_cg_with_exact_counts() {
    let a = gen::poisson3d_heterogeneous(10, 1e4, 3).unwrap();
    let b = rhs(&a);
    for precond in [Precond::BjacobiIc0, Precond::Chebyshev] {
        let d = match precond {
            Precond::Chebyshev => SolverConfig::default().precond_degree as u64,
            _ => 0,
        };
        for p in [1, 3] {
            let (_, cg) = solve(&a, p, &cg_with(precond));
            let (_, jac) = solve(&a, p, &cg_with(Precond::Jacobi));
            assert!(cg.converged && cg.iterations < jac.iterations);
            for &l in DEPTHS {
                let what = format!("plcg l={l} {precond} p={p}");
                let (x, rep) = solve(&a, p, &plcg(l, precond));
                assert!(rep.converged, "{what}: {rep:?}");
                assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8, "{what}");
                // Depth 1 keeps preconditioned cg's iterations; deeper pipelines of M^-1 A
                // break down on this contrast (1e4) and restart: at 3 ranks with IC(0)
                // 99 (l = 2) and 144 (l = 3) iterations against 77, issue 49's bound missed
                // (cg/README.md, *Measured*), at most twice cg's.
                let slack = if l == 1 { 1.1 } else { 2.0 };
                assert!(
                    rep.iterations as f64 <= slack * cg.iterations as f64 + 2.0 * l as f64,
                    "{what}: {} vs cg {}",
                    rep.iterations,
                    cg.iterations
                );
                let (_, b) = restarts(&rep, l as u64, 0, d, true);
                if l == 1 {
                    assert_eq!(b, 0, "{what}: {rep:?}");
                }
                // Setup: the warm-up's 10 SpMVs and applications, the first start's one.
                assert_eq!(
                    rep.setup_halo_exchanges,
                    cg.setup_halo_exchanges + 10 + d * 10,
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn a_failed_check_restarts_from_the_true_residual_at_its_counted_cost() {
    // A tolerance near the attainable accuracy: the natural-norm estimate claims
    // convergence before the true residual follows.
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let mut failed = 0;
    for &l in DEPTHS {
        let cfg = SolverConfig {
            tol: 1e-14,
            max_iter: 3000,
            ..plcg(l, Precond::Jacobi)
        };
        let (_, rep) = solve(&a, 3, &cfg);
        assert!(crate::at_tolerance(&rep), "l={l}: {rep:?}");
        if rep.converged {
            failed += restarts(&rep, l as u64, 0, 0, false).0;
        }
    }
    assert!(failed >= 1, "no check failed at 1e-14");
}

#[test]
fn periodic_replacement_restarts_the_pipeline_at_its_counted_cost() {
    let a = gen::poisson3d(12).unwrap();
    for &l in DEPTHS {
        for every in [10, 25] {
            let cfg = SolverConfig {
                replace_every: Some(every),
                ..plcg(l, Precond::Jacobi)
            };
            let (_, rep) = solve(&a, 3, &cfg);
            let what = format!("plcg l={l} R={every}");
            assert!(rep.converged && rep.relres_true <= 1e-8, "{what}: {rep:?}");
            // After iterations R, 2R, ... before the last (whose check ended the solve).
            // After iterations R, 2R, ... before the last (whose check ended the solve),
            // less any that a breakdown restart took the place of.
            let it = rep.iterations as u64;
            let b = rep.pipeline_breakdowns.unwrap();
            let periodic = rep.residual_replacements - b;
            assert!(periodic <= (it - 1) / every as u64, "{what}: {rep:?}");
            assert!(periodic + b >= (it - 1) / every as u64, "{what}: {rep:?}");
            assert_eq!(restarts(&rep, l as u64, periodic, 0, false).0, 0, "{what}");
        }
    }
}

#[test]
fn a_given_x0_costs_one_setup_exchange_more_and_an_exact_one_no_iteration() {
    let a = gen::poisson2d(12).unwrap();
    let n = a.rows();
    let b = rhs(&a);
    let x0: Vec<f64> = (0..n).map(|i| (i % 7) as f64 * 0.25).collect();
    let ones = vec![1.0; n];
    for &l in DEPTHS {
        let cfg = plcg(l, Precond::Jacobi);
        let (_, zero) = solve_with(&a, &b, None, 3, &cfg);
        let (x, rep) = solve_with(&a, &b, Some(&x0), 3, &cfg);
        assert!(rep.converged && relres(CsrRef::of(&a), &b, &x) <= 1e-8);
        assert_eq!(rep.setup_halo_exchanges, zero.setup_halo_exchanges + 1);
        assert_eq!(rep.setup_reductions, zero.setup_reductions);
        let (x, exact) = solve_with(&a, &b, Some(&ones), 3, &cfg);
        assert!(exact.converged, "l={l}: {exact:?}");
        assert_eq!(x, ones);
        // The start-up's l steps and the check their first reduction asked for.
        let l = l as u64;
        assert_eq!((exact.iterations, exact.reductions), (0, l + 1));
    }
}

#[test]
fn sim_iterates_are_bit_identical_to_threads() {
    let a = gen::poisson3d(6).unwrap();
    let b: Vec<f64> = (0..a.rows())
        .map(|i| ((i * 37) % 11) as f64 - 5.0)
        .collect();
    for &l in DEPTHS {
        for precond in [Precond::Jacobi, Precond::BjacobiIc0] {
            let cfg = plcg(l, precond);
            for p in [1, 3, 4] {
                let threads = run(&a, &b, None, p, &cfg, None);
                let sim = run(&a, &b, None, p, &cfg, Some("peach2"));
                for (t, s) in threads.iter().zip(&sim) {
                    assert_eq!(t.0, s.0, "l={l} {precond} p={p}");
                    assert_eq!(t.1.iterations, s.1.iterations);
                    assert_eq!(t.1.relres_true.to_bits(), s.1.relres_true.to_bits());
                    assert_eq!(t.1.reductions, s.1.reductions);
                    assert!(s.1.converged && s.1.modeled);
                }
            }
        }
    }
}

#[test]
fn on_the_sim_backend_the_reductions_hide_behind_l_spmvs() {
    // 3-D Poisson, 15,625 rows on 4 simulated peach2 nodes: the allreduce wait per loop
    // reduction between two budgets (10 and 25 iterations), against cg's blocking ones.
    let a = gen::poisson3d(25).unwrap();
    let b = rhs(&a);
    let wait = |cfg: &SolverConfig| {
        let at = |max_iter| {
            let cfg = SolverConfig {
                max_iter,
                ..cfg.clone()
            };
            run(&a, &b, None, 4, &cfg, Some("peach2"))
        };
        let (short, long) = (at(10), at(25));
        short
            .iter()
            .zip(&long)
            .map(|(s, l)| {
                assert!(!l.1.converged && l.1.iterations == 25);
                let t = l.1.time_breakdown.allreduce - s.1.time_breakdown.allreduce;
                t / (l.1.reductions - s.1.reductions) as f64
            })
            .collect::<Vec<_>>()
    };
    let blocking = wait(&cg_with(Precond::Jacobi))
        .into_iter()
        .fold(f64::MAX, f64::min);
    assert!(blocking > 0.0);
    for &l in DEPTHS {
        for (rank, w) in wait(&plcg(l, Precond::Jacobi)).into_iter().enumerate() {
            assert!(
                w < 0.1 * blocking,
                "l={l} rank {rank}: {w:e} vs {blocking:e}"
            );
        }
    }
}

#[test]
fn the_depth_is_checked_in_one_place() {
    for depth in [0, DEPTH_MAX + 1, 100] {
        let e = plcg(depth, Precond::Jacobi).validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("invalid solver setting: depth must be within 1..={DEPTH_MAX} (got {depth})")
        );
    }
    for depth in 1..=DEPTH_MAX {
        plcg(depth, Precond::Jacobi).validate().unwrap();
    }
    // The other methods ignore it; the default is PETSc's.
    let cg = SolverConfig {
        depth: 0,
        ..cg_with(Precond::Jacobi)
    };
    cg.validate().unwrap();
    assert_eq!((SolverConfig::default().depth, DEPTH), (1, 1));
}

#[test]
fn the_eigenvalue_estimate_matches_cg_s() {
    // T's LDL^T factors give CG's coefficients: the same Ritz values as cg's.
    let a = gen::poisson3d(8).unwrap();
    let with_eigs = |cfg: SolverConfig| SolverConfig { eigs: true, ..cfg };
    let (_, cg) = solve(&a, 3, &with_eigs(cg_with(Precond::Jacobi)));
    for &l in DEPTHS {
        let (_, rep) = solve(&a, 3, &with_eigs(plcg(l, Precond::Jacobi)));
        let (e, c) = (rep.eigs.expect("eigs"), cg.eigs.expect("eigs"));
        assert!(
            (e.lambda_max - c.lambda_max).abs() <= 1e-6 * c.lambda_max,
            "l={l}: {e:?} vs {c:?}"
        );
        assert!(
            (e.lambda_min - c.lambda_min).abs() <= 1e-3 * c.lambda_min,
            "l={l}: {e:?} vs {c:?}"
        );
    }
}

#[test]
fn indefinite_matrices_are_clean_breakdowns_or_honest_reports() {
    // Q diag(+-lambda) Q^T: a typed breakdown or an honest report.
    let lambda: Vec<f64> = (0..40)
        .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 } * (1.0 + i as f64))
        .collect();
    let a = dense_spd(&lambda, 5);
    let b = rhs(&a);
    for &l in DEPTHS {
        let cfg = SolverConfig {
            max_iter: 200,
            ..plcg(l, Precond::None)
        };
        let (x, rep) = solve_with(&a, &b, None, 3, &cfg);
        if rep.stop_reason == StopReason::Breakdown {
            assert!(!rep.converged && rep.breakdown_error().is_some());
        } else {
            assert!(!rep.converged || relres(CsrRef::of(&a), &b, &x) <= 1e-8 * 1.01);
        }
    }
}

#[test]
fn an_invariant_krylov_space_breaks_down_after_its_exact_step_and_converges() {
    // diag(1..=50): with Jacobi scaling the operator is I, r_0 spans an invariant Krylov
    // space and G(1, 1) - G(0, 1)^2 is rounding: the square-root breakdown's step is exact,
    // and the check after it converges.
    let n = 50;
    let mut tri = sprs::TriMat::new((n, n));
    for i in 0..n {
        tri.add_triplet(i, i, (i + 1) as f64);
    }
    let a: CsMat<f64> = tri.to_csr();
    let b = vec![1.0; n];
    for &l in DEPTHS {
        let (x, rep) = solve_with(&a, &b, None, 2, &plcg(l, Precond::Jacobi));
        assert!(rep.converged, "l={l}: {rep:?}");
        assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-12, "l={l}: {rep:?}");
        assert_eq!(rep.iterations, 1, "l={l}: {rep:?}");
    }
}
