//! The planner's instrumented runs: the tracked strategy's iteration counts against full
//! runs of every candidate (the independent reference), the store's reuse, and the
//! helpers' arithmetic against hand-computed values.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use castack_collectives::fabric_sim::{Fabric, MemoryKind};
use castack_collectives::AllreduceAlgo;
use castack_krylov::{sparse::gen, Basis, Method};
use castack_plan::probe::{
    crossing, probe_all, smoothed_end, ProbeKey, ProbeMode, ProbeOptions, ProbeSource, ProbeStore,
    ProbeStrategy, StoredProbe,
};
use castack_plan::{self as plan, Candidate, PlanConfig, PlanRow};

use super::plan::unit_rhs;

fn opts(strategy: ProbeStrategy) -> ProbeOptions {
    ProbeOptions {
        ranks: 2,
        tol: 1e-10,
        strategy,
        ..ProbeOptions::default()
    }
}

/// Every method, k 2..=5 for the s-step ones, chebyshev basis.
fn keys() -> Vec<(Method, usize, Basis)> {
    let mut keys = vec![
        (Method::Cg, 1, Basis::Chebyshev),
        (Method::Ccg, 1, Basis::Chebyshev),
        (Method::Pipecg, 1, Basis::Chebyshev),
    ];
    for m in [Method::Cacg, Method::Cbcg, Method::Cbcgr] {
        keys.extend((2..=5).map(|k| (m, k, Basis::Chebyshev)));
    }
    keys
}

#[test]
fn tracked_iterations_are_within_ten_percent_of_full_runs() {
    // The study's matrix kind (heterogeneous 3-D Poisson, contrast 1e3), small.
    let a = gen::poisson3d_heterogeneous(14, 1e3, 1).unwrap();
    let b = unit_rhs(&a);
    let full = probe_all(
        a.view(),
        &b,
        &keys(),
        &opts(ProbeStrategy::Full),
        None,
        &|| {},
    )
    .unwrap();
    let tracked = probe_all(
        a.view(),
        &b,
        &keys(),
        &opts(ProbeStrategy::Tracked),
        None,
        &|| {},
    )
    .unwrap();
    let mut windows = 0;
    for (m, k, basis) in keys() {
        let id = (m, k, basis.name());
        let f = full[&id].as_ref().expect("every candidate converges here");
        assert!(f.converged(), "{m} k={k}: the full run converges");
        let t = tracked[&id].as_ref().unwrap();
        let err = t.eq_iters / f.eq_iters - 1.0;
        assert!(
            err.abs() <= 0.10,
            "{m} k={k}: tracked {} vs full {} ({err:+.3})",
            t.eq_iters,
            f.eq_iters
        );
        if t.source == ProbeSource::Tracked {
            windows += 1;
            assert!(
                t.ran_eq_iters < f.ran_eq_iters,
                "{m} k={k}: a window is shorter"
            );
        }
    }
    // The reference is measured; most others ran windows (not a vacuous comparison; a
    // window whose lag is out of bounds runs to the end instead).
    assert_eq!(
        tracked[&(Method::Cg, 1, "chebyshev")],
        full[&(Method::Cg, 1, "chebyshev")]
    );
    assert!(windows >= keys().len() / 2, "{windows} windows");
    let ran = |p: &castack_plan::probe::Probes| -> usize {
        p.values().flatten().map(|p| p.ran_eq_iters).sum()
    };
    assert!(
        2 * ran(&tracked) < ran(&full),
        "{} vs {}",
        ran(&tracked),
        ran(&full)
    );
}

/// A store in memory counting what it is asked.
#[derive(Default)]
struct Memory {
    entries: Mutex<HashMap<String, StoredProbe>>,
    hits: AtomicUsize,
    stores: AtomicUsize,
}

impl ProbeStore for Memory {
    fn load(&self, key: &ProbeKey) -> Option<StoredProbe> {
        let e = self.entries.lock().unwrap().get(&key.id()).cloned();
        if e.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        e
    }

    fn store(&self, key: &ProbeKey, entry: &StoredProbe) {
        self.stores.fetch_add(1, Ordering::Relaxed);
        self.entries.lock().unwrap().insert(key.id(), entry.clone());
    }
}

fn config(tol: f64, strategy: ProbeStrategy) -> PlanConfig {
    PlanConfig {
        ranks: vec![4, 16],
        candidates: Candidate::grid(
            &[
                (Method::Cg, Basis::Chebyshev),
                (Method::Pipecg, Basis::Chebyshev),
                (Method::Cbcgr, Basis::Chebyshev),
            ],
            2..=4,
            true,
        ),
        probe: ProbeOptions {
            tol,
            ..opts(strategy)
        },
        allreduce: AllreduceAlgo::default(),
        price_limit: plan::DEFAULT_PRICE_LIMIT,
        device: MemoryKind::Host,
    }
}

fn plan_with(store: &Memory, cfg: &PlanConfig, fabric: &str) -> Vec<PlanRow> {
    let a = gen::poisson3d_heterogeneous(10, 1e3, 1).unwrap();
    let b = unit_rhs(&a);
    let f = Fabric::preset(fabric).unwrap();
    plan::plan_stored(a.view(), &b, &f, cfg, Some(store), &|_, _| {}).unwrap()
}

#[test]
fn a_second_plan_reuses_every_probe_and_gives_the_same_iterations() {
    let store = Memory::default();
    let cfg = config(1e-10, ProbeStrategy::Tracked);
    let stores = || store.stores.load(Ordering::Relaxed);
    let first = plan_with(&store, &cfg, "fx100");
    // One stored entry per probe that ran: the reference (cg) and each other (method, k)
    // that was not interpolated (interpolated ones run nothing and are not kept).
    let ran = |rows: &[PlanRow]| {
        1 + rows
            .iter()
            .filter(|r| r.ranks == 4 && !r.mpk && r.method != "cg")
            .filter(|r| r.probe_source.as_deref() != Some("interpolated"))
            .count()
    };
    let kept = stores();
    assert_eq!(kept, ran(&first));
    assert!(first
        .iter()
        .any(|r| r.probe_source.as_deref() == Some("tracked")));
    let without = {
        let a = gen::poisson3d_heterogeneous(10, 1e3, 1).unwrap();
        let f = Fabric::preset("fx100").unwrap();
        plan::plan(a.view(), &unit_rhs(&a), &f, &cfg).unwrap()
    };
    assert_eq!(first, without, "a store changes no row");
    // Another fabric: every probe from the store (one hit each), none run or kept.
    let hits = || store.hits.load(Ordering::Relaxed);
    let before_hits = hits();
    let second = plan_with(&store, &cfg, "ito");
    assert_eq!(stores(), kept);
    assert_eq!(hits() - before_hits, kept);
    let iters = |rows: &[PlanRow]| -> Vec<_> {
        rows.iter()
            .map(|r| (r.method.clone(), r.k, r.predicted_eq_iterations))
            .collect()
    };
    assert_eq!(iters(&first), iters(&second));
    // Another tolerance is another key: run and kept anew.
    let other = plan_with(&store, &config(1e-8, ProbeStrategy::Tracked), "fx100");
    assert_eq!(stores(), kept + ran(&other));
    // Full runs are kept under their own keys (cg's too: the reference records its
    // history, a full run does not) and then serve a tracked plan, which prefers them
    // where they converged: it runs nothing more and gives their counts.
    // (A candidate whose window departed from cg already ran to the end and was kept
    // under its full key: the full plan finds it.)
    let before = stores();
    let full = plan_with(&store, &config(1e-10, ProbeStrategy::Full), "fx100");
    let after_full = stores();
    assert!(after_full > before, "cg's full run at least");
    let again = plan_with(&store, &cfg, "fx100");
    assert_eq!(stores(), after_full);
    let measured = |rows: &[PlanRow]| -> Vec<_> {
        rows.iter()
            .filter(|r| r.method != "cg")
            .map(|r| (r.method.clone(), r.k, r.predicted_eq_iterations))
            .collect()
    };
    assert_eq!(measured(&again), measured(&full));
}

#[test]
fn keys_tell_apart_every_setting_they_name() {
    let base = ProbeKey {
        matrix: 1,
        method: Method::Cbcg,
        k: 4,
        basis: "chebyshev",
        tol: 1e-12,
        precond: castack_krylov::Precond::Jacobi,
        ranks: 2,
        max_eq_iters: 20_000,
        mode: ProbeMode::Window,
    };
    let variants = [
        ProbeKey {
            matrix: 2,
            ..base.clone()
        },
        ProbeKey {
            method: Method::Cbcgr,
            ..base.clone()
        },
        ProbeKey {
            k: 5,
            ..base.clone()
        },
        ProbeKey {
            basis: "newton",
            ..base.clone()
        },
        ProbeKey {
            tol: 1e-11,
            ..base.clone()
        },
        ProbeKey {
            precond: castack_krylov::Precond::None,
            ..base.clone()
        },
        ProbeKey {
            ranks: 3,
            ..base.clone()
        },
        ProbeKey {
            max_eq_iters: 100,
            ..base.clone()
        },
        ProbeKey {
            mode: ProbeMode::Full,
            ..base.clone()
        },
        ProbeKey {
            mode: ProbeMode::Reference,
            ..base.clone()
        },
    ];
    for v in &variants {
        assert_ne!(v.describe(), base.describe());
        assert_ne!(v.id(), base.id());
    }
    let line = base.describe();
    assert!(line.contains(&format!("numerics={}", castack_krylov::NUMERICS_VERSION)));
    assert!(line.contains(&format!(
        "model={}",
        castack_plan::probe::PROBE_MODEL_VERSION
    )));
    // The tracking constants belong to windows only: a run to the tolerance does not
    // depend on them.
    assert!(line.contains("track="));
    let full = ProbeKey {
        mode: ProbeMode::Full,
        ..base.clone()
    };
    assert!(!full.describe().contains("track="));
    assert_eq!(base.id().len(), 16);
}

#[test]
fn crossing_interpolates_log_linearly() {
    // Entry i is the residual after iteration i + 1.
    let h = [1e-1, 1e-2, 1e-4, 1e-5];
    assert_eq!(crossing(&h, 0.5), Some(1.0));
    assert_eq!(crossing(&h, 1e-2), Some(2.0));
    // 1e-3 lies halfway (in log) between iterations 2 (1e-2) and 3 (1e-4).
    assert!((crossing(&h, 1e-3).unwrap() - 2.5).abs() < 1e-12);
    assert_eq!(crossing(&h, 1e-6), None);
    assert_eq!(crossing(&h, 0.0), None);
    assert_eq!(crossing(&h, f64::NAN), None);
}

#[test]
fn smoothed_end_sums_inverse_squares_over_block_ends() {
    // Residuals 1e-3 at every iteration: after j block ends the smoothed norm is
    // 1e-3 / sqrt(j), so 1e-4 needs 100 block ends.
    let h = vec![1e-3; 1000];
    assert_eq!(smoothed_end(&h, 1, 1e-4), Some(100.0));
    assert_eq!(smoothed_end(&h, 4, 1e-4), Some(400.0));
    assert_eq!(smoothed_end(&h, 20, 1e-4), None);
    // Oscillating: only the block ends count (k = 2 sees the 1e-6 entries).
    let osc: Vec<f64> = (0..10)
        .map(|i| if i % 2 == 1 { 1e-6 } else { 1.0 })
        .collect();
    assert_eq!(smoothed_end(&osc, 2, 1e-6), Some(2.0));
    assert_eq!(smoothed_end(&osc, 1, 1e-6), Some(2.0));
    assert_eq!(smoothed_end(&osc, 3, 1e-6), Some(6.0));
}

fn row(method: &str, eq: f64, compute: f64, allreduce: f64, best: bool) -> PlanRow {
    let per = compute + allreduce;
    PlanRow {
        schema_version: plan::SCHEMA_VERSION,
        ranks: 8,
        method: method.into(),
        k: None,
        basis: None,
        depth: None,
        mpk: false,
        predicted_eq_iterations: Some(eq),
        predicted_s_per_eq_iter: Some(per),
        compute_s: compute,
        allreduce_s: Some(allreduce),
        halo_s: Some(0.0),
        setup_s: Some(0.0),
        predicted_total_s: Some(per * eq),
        probe_converged: Some(true),
        probe_source: Some("converged".into()),
        unpriced: None,
        recommended: best,
    }
}

#[test]
fn the_flip_factors_are_where_another_row_wins() {
    // Totals at factor f on the allreduce: a = 100 (2 + 3f), b = 100 (4 + 1f),
    // c = 100 (1 + 6f). At f = 1: a 500, b 500 + 1 (slightly worse), c 700.
    let rows = vec![
        row("a", 100.0, 2.0, 3.0, true),
        row("b", 100.0, 4.01, 1.0, false),
        row("c", 100.0, 1.0, 6.0, false),
        PlanRow {
            predicted_total_s: None,
            ..row("d", 1.0, 0.0, 0.0, false)
        },
    ];
    let w = plan::why(&rows, 8).unwrap();
    assert_eq!((w.best, w.runner_up), (0, Some(1)));
    // b overtakes a where 401 + 100 f < 200 + 300 f: f > 1.005.
    let up = w.upper.unwrap();
    assert_eq!(up.to, 1);
    assert!((up.factor - 201.0 / 200.0).abs() < 1e-12);
    // c overtakes a where 100 + 600 f < 200 + 300 f: f < 1/3.
    let low = w.lower.unwrap();
    assert_eq!(low.to, 2);
    assert!((low.factor - 1.0 / 3.0).abs() < 1e-12);
    // Brute force: the best row at factors around each flip.
    let best_at = |f: f64| {
        (0..3)
            .min_by(|&i, &j| {
                let t = |r: &PlanRow| r.compute_s * 100.0 + f * r.allreduce_s.unwrap() * 100.0;
                t(&rows[i]).total_cmp(&t(&rows[j]))
            })
            .unwrap()
    };
    assert_eq!(best_at(1.0), 0);
    assert_eq!(best_at(up.factor * 1.001), 1);
    assert_eq!(best_at(up.factor * 0.999), 0);
    assert_eq!(best_at(low.factor * 0.999), 2);
    assert_eq!(best_at(low.factor * 1.001), 0);
    assert!(plan::why(&rows, 9).is_none());
}

/// The fingerprint of the solution and true residual of a small system by every method,
/// scaling preconditioner (what plans probe: `Precond::SCALINGS`) and basis, at two k, on
/// 2 thread ranks: what the probe store's keys trust [`castack_krylov::NUMERICS_VERSION`]
/// to stand for.
fn numerics_fingerprint() -> u64 {
    use castack_collectives::{Communicator, ThreadUniverse};
    use castack_krylov::{Cpu, DistCsr, Partition, Solver, SolverConfig, SpmvMode};
    let a = gen::poisson3d_heterogeneous(6, 1e3, 1).unwrap();
    let b = unit_rhs(&a);
    let part = Partition::rows(a.rows(), 2);
    let mut x_all = Vec::new();
    let mut settings = Vec::new();
    for &method in Method::ALL {
        for &precond in castack_krylov::Precond::SCALINGS {
            if method.is_s_step() {
                for &basis in Basis::ALL {
                    for k in [2, 5] {
                        settings.push((method, precond, basis, k));
                    }
                }
            } else {
                settings.push((method, precond, Basis::default(), 1));
            }
        }
    }
    for (method, precond, basis, k) in settings {
        let cfg = SolverConfig {
            method,
            k,
            basis,
            precond,
            tol: 1e-10,
            ..SolverConfig::default()
        };
        let xs = ThreadUniverse::new(2)
            .unwrap()
            .run(|comm| {
                let d = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo).unwrap();
                let mut s = Solver::new(comm, d, cfg.clone(), Cpu::sequential()).unwrap();
                let sol = s.solve(&b[part.range(comm.rank())], None).unwrap();
                (sol.x, sol.report.relres_true)
            })
            .unwrap();
        for (x, relres) in xs {
            x_all.extend(x);
            x_all.push(relres);
        }
    }
    castack_plan::probe::fingerprint(a.view(), &x_all)
}

/// A damaged or edited store is not trusted (issue 47: a tampered cache made a plan report
/// 18446744073709551616 iterations): every entry whose numbers no run produces is a miss,
/// run again and kept anew, and the plan gives the rows of a plan without a store.
#[test]
fn implausible_stored_probes_are_run_again() {
    let store = Memory::default();
    let cfg = config(1e-10, ProbeStrategy::Full);
    let first = plan_with(&store, &cfg, "fx100");
    let kept = store.stores.load(Ordering::Relaxed);
    assert!(kept > 0);
    let tamperings: [fn(&mut StoredProbe); 5] = [
        |e| e.probe.as_mut().unwrap().eq_iters = 18446744073709551616.0,
        |e| e.probe.as_mut().unwrap().eq_iters = f64::NAN,
        |e| e.probe.as_mut().unwrap().ran_eq_iters = usize::MAX,
        |e| e.probe.as_mut().unwrap().reductions = u64::MAX,
        |e| e.probe.as_mut().unwrap().lag = Some(-1.0),
    ];
    for tamper in tamperings {
        for e in store.entries.lock().unwrap().values_mut() {
            if e.probe.is_some() {
                tamper(e);
            }
        }
        let before = store.stores.load(Ordering::Relaxed);
        let again = plan_with(&store, &cfg, "fx100");
        assert_eq!(again, first, "a tampered store changed the plan");
        assert!(
            store.stores.load(Ordering::Relaxed) > before,
            "nothing ran again"
        );
    }
}

/// Recorded with NUMERICS_VERSION = 1; version 2 (cg's and ccg's reductions keep the places
/// of a skipped sum, which changes bits only under the ring allreduce at 3 or more ranks)
/// leaves this default-allreduce fingerprint as it was. Re-recorded at version 2 when
/// prcg, pipeprcg and groppcg joined `Method::ALL` (was `0x3ac8_6e97_865b_ad28`), and
/// again when plcg did (was `0x2af0_2552_9307_824a`): the older methods' bits are
/// unchanged, and no store held a probe of the new ones.
const NUMERICS_FINGERPRINT: u64 = 0xa9d7_1cdf_6f87_7177;

#[test]
fn numerics_version_pins_the_bits() {
    let got = numerics_fingerprint();
    assert_eq!(
        (castack_krylov::NUMERICS_VERSION, got),
        (2, NUMERICS_FINGERPRINT),
        "the solvers' results changed bits (fingerprint {got:#018x}): bump \
         castack_krylov::NUMERICS_VERSION (kept probe results are stale) and record the new \
         version and fingerprint here"
    );
}
