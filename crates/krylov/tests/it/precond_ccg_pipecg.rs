//! The preconditioned forms of C-CG and pipelined CG (`bjacobi_ic0`, `chebyshev`): converged
//! by the true residual (recomputed here), close to an independently known solution and a
//! sequential reference solve, within 1.1x (+2) of preconditioned cg's iterations (the
//! same Krylov method in exact arithmetic) and below Jacobi's; the same bits on the sim
//! backend as on threads; EXACT reductions, halo exchanges and preconditioner applications
//! as the module docs (`cg/ccg.rs`, `cg/pipecg.rs`, "Preconditioned form") state them.

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{Communicator, SimOptions, SimUniverse, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Cpu, DistCsr, Method, Partition, Precond, SolveReport, Solver, SolverConfig,
    SpmvMode,
};
use castack_test_support::reference::{jacobi_pcg, relres, relres_exact_upper, CsrRef};
use sprs::CsMat;

const METHODS: &[Method] = &[Method::Ccg, Method::Pipecg];
const PRECONDS: &[Precond] = &[Precond::BjacobiIc0, Precond::Chebyshev];
const RANKS: &[usize] = &[1, 3];
const TOL: f64 = 1e-8;

/// What one rank returns: its x and history as bits, and its report.
type RankOut = (Vec<u64>, Vec<u64>, SolveReport);

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn rank_solve<C: Communicator + ?Sized>(
    comm: &C,
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    part: &Partition,
    cfg: &SolverConfig,
) -> RankOut {
    let dist = DistCsr::from_global(comm, a.view(), part, SpmvMode::Halo).unwrap();
    let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential()).unwrap();
    let range = part.range(comm.rank());
    let s = solver
        .solve(&b[range.clone()], x0.map(|x| &x[range]))
        .unwrap_or_else(|e| panic!("{} {}: {e}", cfg.method, cfg.precond));
    let history = bits(s.report.history.as_deref().unwrap_or(&[]));
    (bits(&s.x), history, s.report)
}

/// Every rank's output on `p` thread ranks (`fabric: None`) or simulated ranks.
fn run(
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    p: usize,
    cfg: &SolverConfig,
    fabric: Option<&str>,
) -> Vec<RankOut> {
    let part = Partition::rows(a.rows(), p);
    let outs = match fabric {
        None => ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| rank_solve(comm, a, b, x0, &part, cfg)),
        Some(f) => SimUniverse::new(p, Fabric::preset(f).unwrap(), SimOptions::default())
            .unwrap()
            .run(|comm| rank_solve(comm, a, b, x0, &part, cfg)),
    };
    outs.unwrap()
}

/// The gathered x and rank 0's report on `p` thread ranks, after checking that every rank
/// counted the same.
fn solve_x0(
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    p: usize,
    cfg: &SolverConfig,
) -> (Vec<f64>, SolveReport) {
    let outs = run(a, b, x0, p, cfg, None);
    let r0 = outs[0].2.clone();
    let mut x = Vec::with_capacity(a.rows());
    for (xb, _, r) in outs {
        let key = |r: &SolveReport| {
            (
                r.iterations,
                r.reductions,
                r.halo_exchanges,
                r.precond_applies,
                r.residual_replacements,
            )
        };
        assert_eq!(key(&r), key(&r0), "every rank counts the same");
        x.extend(xb.into_iter().map(f64::from_bits));
    }
    (x, r0)
}

fn solve(a: &CsMat<f64>, b: &[f64], p: usize, cfg: &SolverConfig) -> (Vec<f64>, SolveReport) {
    solve_x0(a, b, None, p, cfg)
}

/// The recurrences as their module docs count them: pipecg's automatic replacement off
/// (its replacements are tested on their own, below).
fn config(method: Method, precond: Precond) -> SolverConfig {
    SolverConfig {
        method,
        precond,
        tol: TOL,
        auto_replace: false,
        ..SolverConfig::default()
    }
}

/// A known solution with entries of both signs and varied size.
fn x_true(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 1.0 + 0.5 * ((i * 7919) % 101) as f64 / 101.0 - 0.7 * (i % 3) as f64)
        .collect()
}

/// Heterogeneous SPD matrices (variable-coefficient 3-D Poisson, coefficient contrast
/// 1e3 and 1e4): Jacobi leaves much for a real preconditioner to do.
fn problems() -> Vec<(&'static str, CsMat<f64>)> {
    vec![
        (
            "poisson3d_heterogeneous(8, 1e3)",
            gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap(),
        ),
        (
            "poisson3d_heterogeneous(10, 1e4)",
            gen::poisson3d_heterogeneous(10, 1e4, 3).unwrap(),
        ),
    ]
}

fn rel_err(x: &[f64], y: &[f64]) -> f64 {
    let d: f64 = x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum();
    let n: f64 = y.iter().map(|v| v * v).sum();
    (d / n).sqrt()
}

#[test]
fn preconditioned_ccg_and_pipecg_converge_like_preconditioned_cg() {
    for (name, a) in problems() {
        let n = a.rows();
        let xt = x_true(n);
        let b = CsrRef::of(&a).matvec(&xt);
        // An independent sequential solve, far below the tolerance.
        let (x_ref, _) = jacobi_pcg(CsrRef::of(&a), &b, 1e-13, 20_000);
        assert!(rel_err(&x_ref, &xt) <= 1e-8, "{name}: reference");
        for &p in RANKS {
            for &precond in PRECONDS {
                let (xc, cg) = solve(&a, &b, p, &config(Method::Cg, precond));
                assert!(cg.converged && cg.precond_applies > 0, "{name} cg: {cg:?}");
                for &method in METHODS {
                    let what = format!("{name} {method} {precond} p={p}");
                    let (_, jac) = solve(&a, &b, p, &config(method, Precond::Jacobi));
                    assert!(jac.converged, "{what} jacobi");
                    let (x, rep) = solve(&a, &b, p, &config(method, precond));
                    assert!(rep.converged, "{what}: {rep:?}");
                    assert_eq!(rep.precond, precond.name(), "{what}");
                    // The true residual, recomputed here on the global matrix.
                    let tr = relres(CsrRef::of(&a), &b, &x);
                    assert!(tr <= TOL && rep.relres_true <= TOL, "{what}: {tr:e}");
                    assert!(
                        (tr - rep.relres_true).abs() <= 1e-3 * tr + 1e-15,
                        "{what}: reported {:e}, recomputed {tr:e}",
                        rep.relres_true
                    );
                    // Close to the reference and to preconditioned cg's solution: the
                    // error is at most cond(A) times the residual (measured below 1e-5).
                    let err = rel_err(&x, &x_ref);
                    assert!(err <= 1e-4, "{what}: error {err:e} vs the reference");
                    assert!(rel_err(&x, &xc) <= 1e-4, "{what}: vs cg");
                    let (it, cg_it) = (rep.iterations, cg.iterations);
                    eprintln!(
                        "{what}: {it} iterations (cg {cg_it}, {method} jacobi {}), {} reductions (cg {})",
                        jac.iterations, rep.reductions, cg.reductions
                    );
                    assert!(
                        it.abs_diff(cg_it) as f64 <= 0.1 * cg_it as f64 + 2.0,
                        "{what}: {it} iterations vs preconditioned cg {cg_it}"
                    );
                    assert!(
                        it < jac.iterations,
                        "{what}: {it} iterations vs jacobi {}",
                        jac.iterations
                    );
                    // One reduction per iteration against cg's two.
                    assert!(rep.reductions < cg.reductions, "{what}");
                }
            }
        }
    }
}

/// The counts each module doc states for its preconditioned form: `(reductions,
/// halo_exchanges, precond_applies)` after `it` iterations with `c` replacements after a
/// failed check, `periodic` periodic ones and Chebyshev degree `d` (0: `bjacobi_ic0`).
fn expected(method: Method, it: u64, c: u64, periodic: u64, d: u64) -> (u64, u64, u64) {
    match method {
        Method::Ccg => (
            it + 1 + c,
            (1 + d) * it + (2 + d) * (1 + c) + 2 * periodic,
            it + 2 + c,
        ),
        Method::Pipecg => (
            it + 1 + c,
            (1 + d) * (it + 1 + c) + (2 + d) * (1 + c) + (4 + 2 * d) * periodic,
            it + 3 + 2 * c + 2 * periodic,
        ),
        _ => unreachable!(),
    }
}

#[test]
fn counts_match_the_module_docs() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let b = CsrRef::of(&a).matvec(&x_true(a.rows()));
    for &p in RANKS {
        for (precond, degree) in [
            (Precond::BjacobiIc0, 0),
            (Precond::Chebyshev, 2),
            (Precond::Chebyshev, 5),
        ] {
            let base = SolverConfig {
                precond_degree: degree.max(1),
                ..config(Method::Cg, precond)
            };
            let (_, cg) = solve(&a, &b, p, &base);
            for &method in METHODS {
                let what = format!("{method} {precond} degree {degree} p={p}");
                // pipecg without automatic replacement: only check-driven ones.
                let cfg = SolverConfig {
                    method,
                    ..base.clone()
                };
                let (_, rep) = solve(&a, &b, p, &cfg);
                assert!(rep.converged, "{what}: {rep:?}");
                let (it, c) = (rep.iterations as u64, rep.residual_replacements);
                assert_eq!(
                    (rep.reductions, rep.halo_exchanges, rep.precond_applies),
                    expected(method, it, c, 0, degree as u64),
                    "{what}: {it} iterations, {c} replacements"
                );
                assert_eq!(
                    rep.precond_degree,
                    (precond == Precond::Chebyshev).then_some(degree)
                );
                // Setup: as cg's preconditioned setup (diagonal check, ||b||, initial
                // sums, the IC(0) shift or the Gershgorin bound) and one exchange more
                // (`Â u0`).
                assert_eq!(rep.setup_reductions, cg.setup_reductions, "{what}");
                assert_eq!(
                    rep.setup_halo_exchanges,
                    cg.setup_halo_exchanges + 1,
                    "{what}"
                );

                // Periodic replacement: P > 0 replacements keeping the directions.
                let every = 6;
                let cfg = SolverConfig {
                    replace_every: Some(every),
                    ..cfg
                };
                let (_, per) = solve(&a, &b, p, &cfg);
                assert!(per.converged && per.relres_true <= TOL, "{what}: {per:?}");
                let it_p = per.iterations as u64;
                let c = per.reductions - it_p - 1;
                let periodic = per.residual_replacements - c;
                assert!(periodic >= it_p / every as u64 - c, "{what}: {per:?}");
                assert!(periodic > 0, "{what}");
                assert_eq!(
                    (per.reductions, per.halo_exchanges, per.precond_applies),
                    expected(method, it_p, c, periodic, degree as u64),
                    "{what} R={every}: {it_p} iterations, {c} + {periodic} replacements"
                );
                // The directions are kept: (nearly) the same iteration.
                assert!(
                    per.iterations.abs_diff(rep.iterations) <= 2,
                    "{what} R={every}: {it_p} vs {it}"
                );
            }
        }
    }
}

#[test]
fn failed_checks_replace_the_residual_with_the_counted_costs() {
    // Tolerances near the attainable accuracy: the recurrences claim convergence before
    // the true residual follows, and each failed check costs one reduction (none more for
    // the restart from the true residual), its exchanges and one application.
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let b = CsrRef::of(&a).matvec(&x_true(a.rows()));
    let mut failed = 0;
    for &method in METHODS {
        for &precond in PRECONDS {
            for tol in [1e-13, 1e-14] {
                let cfg = SolverConfig {
                    tol,
                    max_iter: 400,
                    ..config(method, precond)
                };
                let (x, rep) = solve(&a, &b, 3, &cfg);
                let what = format!("{method} {precond} tol={tol:e}");
                eprintln!(
                    "{what}: {:?} after {} iterations, {} replacements, true {:e}",
                    rep.stop_reason, rep.iterations, rep.residual_replacements, rep.relres_true
                );
                assert!(rep.converged, "{what}: {rep:?}");
                let tr = relres(CsrRef::of(&a), &b, &x);
                assert!(tr <= tol, "{what}: {tr:e}");
                let (it, c) = (rep.iterations as u64, rep.residual_replacements);
                failed += c;
                let d = rep.precond_degree.unwrap_or(0) as u64;
                assert_eq!(
                    (rep.reductions, rep.halo_exchanges, rep.precond_applies),
                    expected(method, it, c, 0, d),
                    "{what}: {it} iterations, {c} replacements"
                );
            }
        }
    }
    assert!(
        failed > 0,
        "no check failed: the replacement path went untested"
    );
}

#[test]
fn a_given_x0_costs_one_setup_exchange_more() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let n = a.rows();
    let b = CsrRef::of(&a).matvec(&x_true(n));
    let x0: Vec<f64> = (0..n).map(|i| (i % 7) as f64 * 0.25).collect();
    for &method in METHODS {
        for &precond in PRECONDS {
            let cfg = config(method, precond);
            let (_, zero) = solve(&a, &b, 3, &cfg);
            let (x, rep) = solve_x0(&a, &b, Some(&x0), 3, &cfg);
            assert!(rep.converged && relres(CsrRef::of(&a), &b, &x) <= TOL);
            assert_eq!(rep.setup_halo_exchanges, zero.setup_halo_exchanges + 1);
            assert_eq!(rep.setup_reductions, zero.setup_reductions);
            let d = rep.precond_degree.unwrap_or(0) as u64;
            let (it, c) = (rep.iterations as u64, rep.residual_replacements);
            assert_eq!(
                (rep.reductions, rep.halo_exchanges, rep.precond_applies),
                expected(method, it, c, 0, d),
                "{method} {precond}"
            );
        }
    }
}

#[test]
fn sim_iterates_are_bit_identical_to_threads() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let b = CsrRef::of(&a).matvec(&x_true(a.rows()));
    for &method in METHODS {
        for &precond in PRECONDS {
            for p in [1, 3] {
                let what = format!("{method} {precond} p={p}");
                let cfg = SolverConfig {
                    history: true,
                    ..config(method, precond)
                };
                let threads = run(&a, &b, None, p, &cfg, None);
                let sim = run(&a, &b, None, p, &cfg, Some("peach2"));
                assert!(threads[0].2.converged, "{what}");
                for (t, s) in threads.iter().zip(&sim) {
                    assert_eq!(t.0, s.0, "{what}: x");
                    assert_eq!(t.1, s.1, "{what}: history");
                    assert_eq!(t.1.len(), t.2.iterations, "{what}: history length");
                    let (tr, sr) = (&t.2, &s.2);
                    assert_eq!(tr.iterations, sr.iterations, "{what}");
                    assert_eq!(tr.relres_true.to_bits(), sr.relres_true.to_bits(), "{what}");
                    assert_eq!(
                        tr.relres_recurrence.to_bits(),
                        sr.relres_recurrence.to_bits(),
                        "{what}"
                    );
                    assert_eq!(tr.reductions, sr.reductions, "{what}");
                    assert_eq!(tr.halo_exchanges, sr.halo_exchanges, "{what}");
                    assert_eq!(tr.precond_applies, sr.precond_applies, "{what}");
                    assert!(!tr.modeled && sr.modeled, "{what}");
                    assert!(sr.time_breakdown.precond > 0.0, "{what}");
                }
            }
        }
    }
}

#[test]
fn nos7_converges_through_the_drift_checks() {
    // nos7 (condition ~4e9; b = A 1) when the shared matrices are present: without the
    // drift check (pipecg module doc) the preconditioned pipecg broke down at a negative
    // curvature on 1 and 3 ranks with both preconditioners (true residuals 8e-4 to 7e-8);
    // measured with it: 145, 68, 77, 58 iterations (cg 32, 34, 47, 36).
    let Some(dir) = castack_test_support::matrices::shared_dir() else {
        eprintln!("shared matrices absent: nos7 skipped");
        return;
    };
    let a = castack_krylov::sparse::io::read_matrix_market_path(&dir.join("nos7.mtx"))
        .and_then(|m| m.to_csr_full())
        .expect("nos7 reads");
    let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
    for &p in RANKS {
        for &precond in PRECONDS {
            for &method in METHODS {
                let cfg = SolverConfig {
                    max_iter: 2000,
                    ..config(method, precond)
                };
                let (x, rep) = solve(&a, &b, p, &cfg);
                let what = format!("nos7 {method} {precond} p={p}");
                // At 1e-8 the bound on a check's rounding error (3.3e-7 relative) exceeds
                // the tolerance: a solve stops `stagnated` at its first check whose computed
                // residual meets it. Claimed convergence there was false at times (ccg with
                // bjacobi_ic0 on one rank: computed 7.3e-9, exact 1.3e-8; issue 47, item 5).
                assert!(crate::at_tolerance(&rep), "{what}: {rep:?}");
                if rep.converged {
                    let exact = relres_exact_upper(CsrRef::of(&a), &b, &x);
                    assert!(exact <= TOL, "{what}: exact {exact:e}");
                }
                // Recomputed here in another order, the residual carries rounding of about
                // eps || |A| |x| || / ||b|| (per entry summed): on nos7 that is the 1e-8
                // level itself (cg with Jacobi alone reports 9.4e-9 where this sum gives
                // 2.2e-8), so the independent check allows 100 times that rounding.
                let independent = relres(CsrRef::of(&a), &b, &x);
                let mut absax = vec![0.0; a.rows()];
                for (v, (i, j)) in a.iter() {
                    absax[i] += v.abs() * x[j].abs();
                }
                let norm = |v: &[f64]| v.iter().map(|t| t * t).sum::<f64>().sqrt();
                let rounding = 100.0 * f64::EPSILON * norm(&absax) / norm(&b);
                assert!(
                    independent <= TOL + rounding,
                    "{what}: {independent:e} over {TOL:e} + {rounding:e}"
                );
            }
        }
    }
}

/// pipecg's automatic replacement in the preconditioned form (gap bounds of Cools et al.
/// over the preconditioned vectors, as PETSc's KSPPIPECGRR): on s3rmt3m3 with IC(0) the
/// recurrences drift and plain preconditioned pipecg needs 4.5x cg's iterations (2140
/// against 479 on 2 ranks); with the default automatic replacement it stays near cg.
#[test]
fn automatic_replacement_keeps_preconditioned_pipecg_near_cg() {
    let Some(dir) = castack_test_support::matrices::shared_dir() else {
        eprintln!("shared matrices absent: s3rmt3m3 skipped");
        return;
    };
    let a = castack_krylov::sparse::io::read_matrix_market_path(&dir.join("s3rmt3m3.mtx.gz"))
        .and_then(|m| m.to_csr_full())
        .expect("s3rmt3m3 reads");
    let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
    let (_, cg) = solve(&a, &b, 2, &config(Method::Cg, Precond::BjacobiIc0));
    let off = config(Method::Pipecg, Precond::BjacobiIc0);
    let on = SolverConfig {
        auto_replace: true,
        ..off.clone()
    };
    let (_, plain) = solve(&a, &b, 2, &off);
    let (x, auto) = solve(&a, &b, 2, &on);
    eprintln!(
        "s3rmt3m3 ic0 p=2: cg {}, pipecg {} plain, {} with {} automatic replacements",
        cg.iterations, plain.iterations, auto.iterations, auto.residual_replacements
    );
    assert!(auto.converged && relres(CsrRef::of(&a), &b, &x) <= 2.0 * TOL);
    assert!(auto.residual_replacements > 0);
    assert!(
        2 * auto.iterations < plain.iterations,
        "{} vs {}",
        auto.iterations,
        plain.iterations
    );
    assert!(
        auto.iterations as f64 <= 1.5 * cg.iterations as f64,
        "{} vs cg {}",
        auto.iterations,
        cg.iterations
    );
}
