//! C-CG and pipelined CG end to end on the threads backend: converged by the true residual,
//! close to an independent sequential Jacobi-PCG, iteration counts close to CG's, EXACT
//! communication counts (as each module doc states them), and clean breakdowns on an
//! indefinite matrix. Also the split-phase reductions of `SolverComm` they rely on.

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{AllreduceAlgo, Communicator, SimOptions, SimUniverse, ThreadUniverse};
use castack_krylov::Phase;
use castack_krylov::{
    sparse::gen, Cpu, DistCsr, KrylovError, Method, Partition, Precond, SolveReport, Solver,
    SolverComm, SolverConfig, SpmvMode, StopReason,
};
use castack_test_support::reference::{jacobi_pcg, relres, CsrRef};
use castack_test_support::spd::dense_spd;
use sprs::{CsMat, TriMat};

const METHODS: &[Method] = &[Method::Ccg, Method::Pipecg];
const RANKS: &[usize] = &[1, 3, 4];

/// Solve `a x = b` on `p` thread ranks (x0 optional, global); the gathered x and rank 0's
/// report, or the first rank's error after checking every rank agrees on it.
fn solve_with(
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    p: usize,
    cfg: &SolverConfig,
) -> Result<(Vec<f64>, SolveReport), KrylovError> {
    let n = a.rows();
    let part = Partition::rows(n, p);
    let out = ThreadUniverse::new(p)?.run(|comm| {
        let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
        let range = part.range(comm.rank());
        let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
        solver.solve(&b[range.clone()], x0.map(|x| &x[range]))
    })?;
    let mut x = Vec::with_capacity(n);
    let mut report: Option<SolveReport> = None;
    let first_err = out.iter().find_map(|s| s.as_ref().err().cloned());
    if let Some(e) = first_err {
        for s in &out {
            assert_eq!(
                s.as_ref().err(),
                Some(&e),
                "every rank reports the same error"
            );
        }
        return Err(e);
    }
    for s in out {
        let s = s?;
        x.extend_from_slice(&s.x);
        match &report {
            None => report = Some(s.report),
            Some(r0) => {
                assert_eq!(
                    (r0.iterations, r0.reductions, r0.halo_exchanges),
                    (
                        s.report.iterations,
                        s.report.reductions,
                        s.report.halo_exchanges
                    ),
                    "counters agree on every rank"
                );
                assert_eq!(
                    (r0.stop_reason, &r0.breakdown),
                    (s.report.stop_reason, &s.report.breakdown),
                    "every rank stops for the same reason"
                );
            }
        }
    }
    Ok((x, report.expect("at least one rank")))
}

fn solve(a: &CsMat<f64>, p: usize, cfg: &SolverConfig) -> (Vec<f64>, SolveReport) {
    let b = CsrRef::of(a).matvec(&vec![1.0; a.rows()]);
    solve_with(a, &b, None, p, cfg).unwrap_or_else(|e| panic!("{} p={p}: {e}", cfg.method.name()))
}

/// `method` with the defaults, pipecg without its automatic replacement: the exact counts
/// below are those of the plain recurrences (the automatic one has its own test).
fn with_method(method: Method) -> SolverConfig {
    SolverConfig {
        method,
        auto_replace: false,
        ..SolverConfig::default()
    }
}

#[test]
fn automatic_replacements_cost_four_exchanges_and_no_reduction() {
    // As periodic ones (module doc): C failed checks cost one reduction and three
    // exchanges each, the other replacements four exchanges each.
    for (name, a) in problems() {
        for &p in RANKS {
            let cfg = SolverConfig {
                method: Method::Pipecg,
                ..SolverConfig::default()
            };
            let (x, rep) = solve(&a, p, &cfg);
            let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
            assert!(
                rep.converged && relres(CsrRef::of(&a), &b, &x) <= 1e-8,
                "{name}"
            );
            let it = rep.iterations as u64;
            let checks = rep.reductions - (it + 1);
            let auto = rep.residual_replacements - checks;
            assert_eq!(
                rep.halo_exchanges,
                it + 3 + 3 * checks + 4 * auto,
                "{name} p={p}"
            );
        }
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

fn max_abs_diff(x: &[f64], y: &[f64]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

#[test]
fn ccg_and_pipecg_converge_like_cg_with_exact_counts() {
    for (name, a) in problems() {
        let n = a.rows();
        let b = CsrRef::of(&a).matvec(&vec![1.0; n]);
        let (x_ref, _) = jacobi_pcg(CsrRef::of(&a), &b, 1e-10, 10_000);
        for &p in RANKS {
            let (_, cg) = solve(&a, p, &with_method(Method::Cg));
            assert!(cg.converged, "{name} cg p={p}");
            for &method in METHODS {
                let what = format!("{name} {} p={p}", method.name());
                let (x, rep) = solve(&a, p, &with_method(method));
                assert!(rep.converged, "{what}: {rep:?}");
                assert!(rep.relres_true <= 1e-8, "{what}: {}", rep.relres_true);
                assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8, "{what}");
                let err = max_abs_diff(&x, &x_ref);
                assert!(err <= 1e-4, "{what}: max |x - x_ref| = {err:e}");
                let (it, cg_it) = (rep.iterations, cg.iterations);
                assert!(
                    it.abs_diff(cg_it) as f64 <= 0.1 * cg_it as f64 + 2.0,
                    "{what}: {it} iterations vs cg {cg_it}"
                );
                assert_eq!(rep.equivalent_iterations, it);
                // Exact accounting (module docs): 1 reduction per iteration, 1 per true
                // residual check, and the check after a failed one restarts with the
                // scalars it reduced.
                let repl = rep.residual_replacements;
                assert_eq!(rep.reductions, it as u64 + 1 + repl, "{what}");
                // Setup: as cg's (diagonal check, ||b||, initial norms), and one more
                // exchange (A r0) than cg's scaling exchange.
                assert_eq!(rep.setup_reductions, cg.setup_reductions, "{what}");
                assert_eq!(
                    rep.setup_halo_exchanges,
                    cg.setup_halo_exchanges + 1,
                    "{what}"
                );
                let halos = match method {
                    Method::Ccg => it as u64 + 2 * (1 + repl),
                    _ => it as u64 + 3 + 3 * repl,
                };
                assert_eq!(rep.halo_exchanges, halos, "{what}");
            }
        }
    }
}

#[test]
fn rounding_delays_the_pipelined_recurrences_where_cg_itself_runs_past_n() {
    // 60 rows, spectrum [1, 1e4]: CG needs ~107 iterations (loss of orthogonality), and
    // the longer recurrences of ccg and pipecg delay convergence further (measured on one
    // rank: cg 107, ccg 110, pipecg 124). Still converged by the true residual.
    let a = dense_spd(&geometric(60, 1e4), 11);
    for &p in RANKS {
        let (_, cg) = solve(&a, p, &with_method(Method::Cg));
        for &method in METHODS {
            let (_, rep) = solve(&a, p, &with_method(method));
            assert!(rep.converged && rep.relres_true <= 1e-8, "{rep:?}");
            assert!(
                rep.iterations as f64 <= 1.25 * cg.iterations as f64,
                "{} p={p}: {} vs cg {}",
                method.name(),
                rep.iterations,
                cg.iterations
            );
        }
    }
}

#[test]
fn history_has_one_entry_per_iteration_and_ends_below_tol() {
    let a = gen::poisson2d(16).unwrap();
    for &method in METHODS {
        let cfg = SolverConfig {
            history: true,
            ..with_method(method)
        };
        let (_, rep) = solve(&a, 3, &cfg);
        let h = rep.history.as_ref().expect("history requested");
        assert_eq!(h.len(), rep.iterations, "{}", method.name());
        assert!(*h.last().unwrap() <= 1e-8);
    }
}

#[test]
fn pipecg_periodic_replacement_keeps_the_iteration_and_costs_no_reduction() {
    let a = gen::poisson3d(12).unwrap();
    let (_, plain) = solve(&a, 3, &with_method(Method::Pipecg));
    for every in [5, 10] {
        let cfg = SolverConfig {
            replace_every: Some(every),
            ..with_method(Method::Pipecg)
        };
        let (_, rep) = solve(&a, 3, &cfg);
        assert!(rep.converged && rep.relres_true <= 1e-8, "{rep:?}");
        let it = rep.iterations as u64;
        // Directions are kept: the iteration is (nearly) unchanged.
        assert!(
            rep.iterations.abs_diff(plain.iterations) <= 2,
            "R={every}: {it} vs {}",
            plain.iterations
        );
        // One replacement at the top of every R-th pass (before iterations R, 2R, ...,
        // the last one included), four SpMVs each and no
        // reduction; no convergence check failed here.
        let repl = rep.residual_replacements;
        assert_eq!(repl, it / every as u64, "R={every}: {it} iterations");
        assert_eq!(rep.reductions, it + 1, "R={every}");
        assert_eq!(rep.halo_exchanges, it + 3 + 4 * repl, "R={every}");
    }
}

#[test]
fn ccg_periodic_replacement_keeps_the_iteration_and_costs_two_spmvs_and_no_reduction() {
    let a = gen::poisson3d(12).unwrap();
    let (_, plain) = solve(&a, 3, &with_method(Method::Ccg));
    assert_eq!(plain.residual_replacements, 0);
    for every in [5, 10] {
        let cfg = SolverConfig {
            replace_every: Some(every),
            ..with_method(Method::Ccg)
        };
        let (x, rep) = solve(&a, 3, &cfg);
        assert!(rep.converged && rep.relres_true <= 1e-8, "{rep:?}");
        let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
        assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8);
        let it = rep.iterations as u64;
        assert!(
            rep.iterations.abs_diff(plain.iterations) <= 2,
            "R={every}: {it} vs {}",
            plain.iterations
        );
        // Iterations R, 2R, ... recompute r and Ap (two SpMVs each) inside the
        // iteration's own reduction; no convergence check failed here.
        let repl = rep.residual_replacements;
        assert_eq!(repl, it / every as u64, "R={every}: {it} iterations");
        assert_eq!(rep.reductions, it + 1, "R={every}");
        assert_eq!(rep.halo_exchanges, it + 2 + 2 * repl, "R={every}");
    }
}

#[test]
fn a_failed_convergence_check_replaces_the_residual_once_and_costs_no_extra_reduction() {
    // A tolerance near the attainable accuracy: the pipelined recurrence claims
    // convergence before the true residual follows (measured: one replacement).
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let cfg = SolverConfig {
        tol: 1e-14,
        max_iter: 3000,
        ..with_method(Method::Pipecg)
    };
    let (_, rep) = solve(&a, 3, &cfg);
    assert!(rep.converged && rep.relres_true <= 1e-14, "{rep:?}");
    let (it, repl) = (rep.iterations as u64, rep.residual_replacements);
    assert!(repl >= 1, "{rep:?}");
    assert_eq!(rep.reductions, it + 1 + repl);
    assert_eq!(rep.halo_exchanges, it + 3 + 3 * repl);
}

#[test]
fn a_given_x0_costs_one_setup_exchange_more() {
    let a = gen::poisson2d(12).unwrap();
    let n = a.rows();
    let b = CsrRef::of(&a).matvec(&vec![1.0; n]);
    let x0: Vec<f64> = (0..n).map(|i| (i % 7) as f64 * 0.25).collect();
    for &method in METHODS {
        let cfg = with_method(method);
        let (_, zero) = solve_with(&a, &b, None, 3, &cfg).unwrap();
        let (x, rep) = solve_with(&a, &b, Some(&x0), 3, &cfg).unwrap();
        assert!(rep.converged && relres(CsrRef::of(&a), &b, &x) <= 1e-8);
        assert_eq!(rep.setup_halo_exchanges, zero.setup_halo_exchanges + 1);
        assert_eq!(rep.setup_reductions, zero.setup_reductions);
        assert_eq!(
            rep.reductions,
            rep.iterations as u64 + 1 + rep.residual_replacements
        );
    }
}

#[test]
fn exact_x0_converges_at_once() {
    let a = gen::poisson2d(8).unwrap();
    let n = a.rows();
    let b = CsrRef::of(&a).matvec(&vec![1.0; n]);
    let ones = vec![1.0; n];
    for &method in METHODS {
        let (_, rep) = solve_with(&a, &b, Some(&ones), 3, &with_method(method)).unwrap();
        assert!(rep.converged, "{}", method.name());
        assert_eq!(rep.iterations, 0);
        assert_eq!(rep.reductions, 1);
    }
}

#[test]
fn max_iter_ends_as_honest_non_convergence() {
    let a = gen::poisson3d(10).unwrap();
    for &method in METHODS {
        let cfg = SolverConfig {
            max_iter: 5,
            ..with_method(method)
        };
        let (_, rep) = solve(&a, 4, &cfg);
        assert!(!rep.converged);
        assert_eq!(rep.iterations, 5);
        assert!(rep.relres_true > 1e-8);
        assert_eq!(rep.reductions, 6);
    }
}

/// `diag(1, -1, 2, -2, ...) / 2` with `b = A ones`: `r0^T A r0 = sum lambda^3 / 8 = 0`
/// exactly, so the first step breaks down.
fn symmetric_pairs(k: usize) -> CsMat<f64> {
    let n = 2 * k;
    let mut tri = TriMat::new((n, n));
    for i in 0..k {
        let l = (i + 1) as f64 * 0.5;
        tri.add_triplet(2 * i, 2 * i, l);
        tri.add_triplet(2 * i + 1, 2 * i + 1, -l);
    }
    tri.to_csr()
}

#[test]
fn indefinite_matrix_is_a_clean_breakdown() {
    let a = symmetric_pairs(20);
    let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
    for &p in RANKS {
        for method in [Method::Cg, Method::Ccg, Method::Pipecg] {
            let cfg = SolverConfig {
                precond: Precond::None,
                ..with_method(method)
            };
            let name = method.name();
            let (x, rep) = solve_with(&a, &b, None, p, &cfg)
                .unwrap_or_else(|e| panic!("{name} p={p}: a breakdown is a report, got {e}"));
            assert_eq!(rep.stop_reason, StopReason::Breakdown, "{name} p={p}");
            assert!(!rep.converged);
            let bd = rep.breakdown.as_ref().expect("breakdown set");
            assert_eq!((bd.iteration, bd.quantity.as_str()), (0, "r^T A r"));
            assert!(bd.value <= 0.0);
            assert_eq!(rep.iterations, 0);
            // No step was taken: the last iterate is x0 = 0, its residual b.
            assert_eq!(x, vec![0.0; a.rows()]);
            assert!((rep.relres_true - 1.0).abs() < 1e-15, "{}", rep.relres_true);
            match rep.breakdown_error() {
                Some(KrylovError::Breakdown {
                    method: m,
                    iteration,
                    quantity,
                    value,
                }) => {
                    assert_eq!(m, name);
                    assert_eq!(iteration, 0);
                    assert_eq!(quantity, "r^T A r");
                    assert!(value <= 0.0);
                }
                other => panic!("{name} p={p}: expected a breakdown, got {other:?}"),
            }
        }
    }
}

/// `[[1, 2], [2, 1]]` (eigenvalues 3 and -1, unit diagonal: Jacobi scaling is the
/// identity) with `b = (1, 0)`: the first step has curvature `r^T A r = 1` and lands on
/// `x = (1, 0)` exactly, the second direction `(4, -2)` has `p^T A p = -12`.
fn two_by_two() -> (CsMat<f64>, Vec<f64>) {
    let mut tri = TriMat::new((2, 2));
    for (i, j, v) in [(0, 0, 1.0), (0, 1, 2.0), (1, 0, 2.0), (1, 1, 1.0)] {
        tri.add_triplet(i, j, v);
    }
    (tri.to_csr(), vec![1.0, 0.0])
}

#[test]
fn a_breakdown_after_a_step_reports_the_last_iterate_and_its_true_residual() {
    let (a, b) = two_by_two();
    for p in [1, 2] {
        for method in [Method::Cg, Method::Ccg, Method::Pipecg] {
            let name = method.name();
            let (x, rep) = solve_with(&a, &b, None, p, &with_method(method))
                .unwrap_or_else(|e| panic!("{name} p={p}: a breakdown is a report, got {e}"));
            assert_eq!(rep.stop_reason, StopReason::Breakdown, "{name} p={p}");
            assert!(!rep.converged);
            let bd = rep.breakdown.clone().expect("breakdown set");
            assert_eq!((bd.iteration, bd.quantity.as_str()), (1, "p^T A p"));
            assert!((bd.value + 12.0).abs() < 1e-12, "{name}: {}", bd.value);
            assert_eq!((rep.iterations, rep.equivalent_iterations), (1, 1));
            assert_eq!(x.len(), 2);
            assert!(
                (x[0] - 1.0).abs() < 1e-15 && x[1].abs() < 1e-15,
                "{name}: {x:?}"
            );
            // b - A x = (0, -2): recomputed from the last iterate, and checked here.
            assert!((rep.relres_true - 2.0).abs() < 1e-14, "{}", rep.relres_true);
            assert!((relres(CsrRef::of(&a), &b, &x) - rep.relres_true).abs() < 1e-14);
            assert!(rep.relres_recurrence.is_finite());
            // The report round-trips through its JSON shape.
            let json = serde_json::to_value(&rep).unwrap();
            assert_eq!(json["stop_reason"], "breakdown");
            assert_eq!(json["breakdown"]["quantity"], "p^T A p");
            assert_eq!(json["breakdown"]["iteration"], 1);
            let back: SolveReport = serde_json::from_value(json).unwrap();
            assert_eq!(back, rep);
        }
    }
}

#[test]
fn rotated_indefinite_matrix_never_converges_falsely() {
    // Q diag(+-lambda) Q^T: either a typed breakdown or an honest report.
    let lambda: Vec<f64> = (0..40)
        .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 } * (1.0 + i as f64))
        .collect();
    let a = dense_spd(&lambda, 5);
    let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
    for &method in METHODS {
        let cfg = SolverConfig {
            precond: Precond::None,
            max_iter: 200,
            ..with_method(method)
        };
        match solve_with(&a, &b, None, 3, &cfg) {
            Err(e) => panic!("{}: unexpected error {e}", method.name()),
            Ok((_, rep)) if rep.stop_reason == StopReason::Breakdown => {
                assert!(!rep.converged);
                assert!(rep.breakdown_error().is_some());
            }
            Ok((x, rep)) => {
                let true_res = relres(CsrRef::of(&a), &b, &x);
                assert!(!rep.converged || true_res <= 1e-8 * 1.01, "{rep:?}");
            }
        }
    }
}

#[test]
fn split_phase_reductions_count_once_and_overlap_blocking_ones() {
    let out = ThreadUniverse::new(4)
        .unwrap()
        .run(|comm| -> Result<_, KrylovError> {
            let mut sc = SolverComm::new(comm, AllreduceAlgo::default())?;
            sc.prepare_split(2);
            let setup = sc.begin(&[1.0, 2.0])?;
            sc.set_phase(Phase::Loop);
            let mut s = [0.0; 2];
            sc.finish(setup, &mut s)?;
            assert_eq!(s, [4.0, 8.0]);
            let me = comm.rank() as f64;
            let pending = sc.begin(&[me, 1.0])?;
            // A blocking reduction of the same length in between.
            let mut blocking = [2.0 * me, 0.5];
            sc.allreduce_sum(&mut blocking)?;
            let mut sums = [0.0; 2];
            sc.finish(pending, &mut sums)?;
            assert_eq!(sums, [6.0, 4.0]);
            assert_eq!(blocking, [12.0, 2.0]);
            Ok(sc.counters())
        })
        .unwrap();
    for c in out {
        let c = c.unwrap();
        assert_eq!((c.setup_reductions, c.reductions), (1, 2));
        assert_eq!(c.reduced_values, 6);
    }
}

/// Several split-phase reductions of ONE length in flight at once (a deep pipeline, as
/// p(l)-CG needs: one begun per iteration, each finished `l` iterations later), on the
/// lanes `prepare_split_lanes` built: finished in any order, blocking reductions between
/// them, a begin with every lane busy refused (nothing pending, nothing counted), a lane
/// reused once finished; each counted once. On threads and on the simulated fabric.
#[test]
fn split_phase_reductions_of_one_length_pipeline_on_lanes() {
    fn body<C: Communicator + ?Sized>(comm: &C) -> Result<castack_krylov::Counters, KrylovError> {
        let mut sc = SolverComm::new(comm, AllreduceAlgo::default())?;
        sc.prepare_split_lanes(3, 3);
        sc.set_phase(Phase::Loop);
        let me = comm.rank() as f64;
        let first = sc.begin(&[me, 1.0, 0.0])?;
        let second = sc.begin(&[1.0, me, 2.0])?;
        let mut blocking = [me, me, me];
        sc.allreduce_sum(&mut blocking)?;
        let third = sc.begin(&[2.0, 0.0, me])?;
        // Every lane busy: refused, nothing begun.
        let refused = sc.begin(&[9.0, 9.0, 9.0]);
        assert!(refused.is_err());
        let mut s = [0.0; 3];
        sc.finish(second, &mut s)?;
        assert_eq!(s, [4.0, 6.0, 8.0]);
        // The freed lane takes the next one.
        let fourth = sc.begin(&[me * me, 0.5, 0.25])?;
        sc.finish(first, &mut s)?;
        assert_eq!(s, [6.0, 4.0, 0.0]);
        sc.finish(fourth, &mut s)?;
        assert_eq!(s, [14.0, 2.0, 1.0]);
        sc.finish(third, &mut s)?;
        assert_eq!(s, [8.0, 0.0, 6.0]);
        assert_eq!(blocking, [6.0, 6.0, 6.0]);
        Ok(sc.counters())
    }
    let threads = ThreadUniverse::new(4).unwrap().run(body).unwrap();
    let sim = SimUniverse::new(4, Fabric::preset("peach2").unwrap(), SimOptions::default())
        .unwrap()
        .run(body)
        .unwrap();
    for c in threads.into_iter().chain(sim) {
        let c = c.unwrap();
        assert_eq!((c.setup_reductions, c.reductions), (0, 5));
        assert_eq!(c.reduced_values, 15);
    }
}

/// ccg leaves the original-norm sum out of its update far from the target (its floor
/// `wmin r.r` decides the stopping test there): iterates, iteration counts, reported norms
/// and message counts are those of computing it in every iteration (`history` does), on
/// a heterogeneous Jacobi-scaled problem (unequal weights) and on one whose `r.r`
/// collapses in one iteration, below its floor's reach, so that the check's reduction
/// carries the sum. Also under the ring allreduce at 2 and 3 ranks, whose order of summation
/// depends on a value's place and the message's length.
#[test]
fn ccg_skipping_the_weighted_norm_far_from_the_target_changes_nothing_but_bytes() {
    let cfg = |history, precond, allreduce| SolverConfig {
        method: Method::Ccg,
        history,
        precond,
        allreduce,
        ..SolverConfig::default()
    };
    let het = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    // Two distinct eigenvalues, no scaling: C-CG is exact in two iterations.
    let n = 40;
    let mut tri = TriMat::new((n, n));
    for i in 0..n {
        tri.add_triplet(i, i, if i % 2 == 0 { 1.0 } else { 3.0 });
    }
    let two: CsMat<f64> = tri.to_csr();
    for (a, precond, iterations) in [
        (&het, Precond::Jacobi, None),
        (&two, Precond::None, Some(2)),
    ] {
        for (p, algo) in [
            (1, AllreduceAlgo::default()),
            (3, AllreduceAlgo::default()),
            (2, AllreduceAlgo::Ring),
            (3, AllreduceAlgo::Ring),
        ] {
            // b with many significant bits, so that the order of every sum shows.
            let b: Vec<f64> = (0..a.rows()).map(|i| 1.0 / (i as f64 + 1.7)).collect();
            let (x, rep) = solve_with(a, &b, None, p, &cfg(false, precond, algo)).unwrap();
            let (xe, repe) = solve_with(a, &b, None, p, &cfg(true, precond, algo)).unwrap();
            assert!(rep.converged, "{rep:?}");
            if let Some(it) = iterations {
                assert_eq!(rep.iterations, it, "{rep:?}");
            }
            assert_eq!(rep.iterations, repe.iterations);
            assert_eq!(rep.relres_true.to_bits(), repe.relres_true.to_bits());
            assert_eq!(
                rep.relres_recurrence.to_bits(),
                repe.relres_recurrence.to_bits()
            );
            assert!(x.iter().zip(&xe).all(|(u, v)| u.to_bits() == v.to_bits()));
            assert_eq!(
                (
                    rep.reductions,
                    rep.halo_exchanges,
                    rep.residual_replacements
                ),
                (
                    repe.reductions,
                    repe.halo_exchanges,
                    repe.residual_replacements
                )
            );
        }
    }
}
