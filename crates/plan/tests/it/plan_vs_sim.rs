//! `plan` against the simulator it models (issue 9 "Done when", small case): for 3-D
//! Poisson 12^3 at P = 4 and 8 on `fx100`, every candidate's predicted total is within 15%
//! of the modeled time of the real solve on the `sim` backend (the SLOWEST rank's clock,
//! which is what the plan predicts), and the planned best is within 10% of the simulated
//! best. The per-outer-iteration compute of a 1-rank modeled solve equals the planner's
//! compute per outer iteration (one set of work formulas, `device::work`).
//!
//! The same on a GPU (issue 48, item 3): `plan --device cuda` on `dgx-h100` (8 GPUs a
//! node: P = 8 is one node, P = 16 two) against `solve --backend sim --device cuda` (the
//! CPU kernels metered as a GPU's, `Cpu::modeling_gpu`, priced by `[compute.gpu]` with
//! the host-device staging of every exchange and reduction).

use castack_collectives::fabric_sim::{Fabric, MemoryKind};
use castack_collectives::{AllreduceAlgo, Communicator, SimMemory, SimOptions, SimUniverse};
use castack_krylov::{
    sparse::gen, Basis, Cpu, DistCsr, MatrixPowers, Method, Partition, SolveReport, Solver,
    SolverConfig, SpmvMode,
};
use castack_plan::probe::{ProbeOptions, ProbeStrategy};
use castack_plan::{self as plan, Candidate, PlanConfig};
use sprs::CsMat;

const FABRIC: &str = "fx100";
const GPU_FABRIC: &str = "dgx-h100";
const TOL: f64 = 1e-8;

/// Where a modeled solve computes: the fabric, and the device.
#[derive(Clone, Copy)]
struct On {
    fabric: &'static str,
    device: MemoryKind,
}

const CPU: On = On {
    fabric: FABRIC,
    device: MemoryKind::Host,
};
const GPU: On = On {
    fabric: GPU_FABRIC,
    device: MemoryKind::Gpu,
};

fn candidates() -> Vec<Candidate> {
    let c = |method, k| Candidate {
        method,
        k,
        basis: Basis::Chebyshev,
        mpk: false,
    };
    vec![
        c(Method::Cg, 1),
        c(Method::Ccg, 1),
        c(Method::Pipecg, 1),
        c(Method::Cbcg, 4),
        c(Method::Cbcgr, 4),
        c(Method::Cacg, 4),
    ]
}

/// Every rank's report of a modeled solve of `c` at `p` ranks.
fn sim_reports(
    on: On,
    a: &CsMat<f64>,
    b: &[f64],
    p: usize,
    c: &Candidate,
    max_iter: usize,
) -> Vec<SolveReport> {
    let part = Partition::rows(a.rows(), p);
    let cfg = SolverConfig {
        method: c.method,
        k: c.k,
        basis: c.basis,
        mpk: c.mpk,
        tol: TOL,
        max_iter,
        ..SolverConfig::default()
    };
    let fabric = Fabric::preset(on.fabric).unwrap();
    // As `krylov solve --backend sim --device cuda`: host buffers for messages, compute on
    // the GPU model, the kernels metered as a GPU's (staging copies included).
    let gpu = on.device == MemoryKind::Gpu;
    let options = SimOptions {
        compute: gpu.then_some(SimMemory::Gpu),
        ..SimOptions::default()
    };
    let device = || {
        let cpu = Cpu::sequential();
        if gpu {
            cpu.modeling_gpu()
        } else {
            cpu
        }
    };
    SimUniverse::new(p, fabric, options)
        .unwrap()
        .run(|comm| {
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo).unwrap();
            let mut solver = if cfg.mpk {
                let mpk = MatrixPowers::from_global(comm, a.view(), &part, cfg.k).unwrap();
                Solver::with_mpk(comm, dist, mpk, cfg.clone(), device()).unwrap()
            } else {
                Solver::new(comm, dist, cfg.clone(), device()).unwrap()
            };
            solver
                .solve(&b[part.range(comm.rank())], None)
                .unwrap()
                .report
        })
        .unwrap()
}

fn problem() -> (CsMat<f64>, Vec<f64>) {
    let a = gen::poisson3d(12).unwrap();
    let b = (0..a.rows())
        .map(|i| ((i * 37) % 11) as f64 - 5.0)
        .collect();
    (a, b)
}

/// Modeled compute (SpMV + BLAS + other) of a 1-rank solve capped at `eq` CG-equivalent
/// iterations, and its outer iterations.
fn capped_compute(on: On, a: &CsMat<f64>, b: &[f64], c: &Candidate, eq: usize) -> (f64, usize) {
    let r = &sim_reports(on, a, b, 1, c, eq)[0];
    assert!(
        !r.converged && r.equivalent_iterations == eq,
        "{c:?}: cap not reached"
    );
    let tb = &r.time_breakdown;
    (tb.spmv + tb.blas + tb.other, r.iterations)
}

fn compute_per_outer_iteration_matches_the_meter(on: On) {
    // The difference of two capped solves cancels the setup, the first Gram matrix and the
    // final check: what remains is outer steps, metered kernel by kernel by the sim. The
    // planner's count must equal it (same formulas), not just come close. (On a GPU the
    // reductions' copies to the host are metered as transfers, outside this sum, and priced
    // with the allreduce by the plan.)
    let (a, b) = problem();
    let fabric = Fabric::preset(on.fabric).unwrap();
    for c in candidates() {
        let oc = plan::outer_cost_on(
            a.view(),
            &fabric,
            on.device,
            1,
            &c,
            AllreduceAlgo::default(),
        )
        .unwrap();
        let (t1, o1) = capped_compute(on, &a, &b, &c, 2 * c.k);
        let (t2, o2) = capped_compute(on, &a, &b, &c, 6 * c.k);
        let sim = (t2 - t1) / (o2 - o1) as f64;
        let rel = (oc.compute_s - sim).abs() / sim;
        assert!(
            rel < 1e-9,
            "{} {:?} k={}: planned compute per outer iteration {:.6e} s, metered {:.6e} s",
            on.fabric,
            c.method,
            c.k,
            oc.compute_s,
            sim
        );
    }
}

#[test]
fn one_rank_compute_per_outer_iteration_matches_the_meter() {
    compute_per_outer_iteration_matches_the_meter(CPU);
}

#[test]
fn one_gpu_rank_compute_per_outer_iteration_matches_the_meter() {
    compute_per_outer_iteration_matches_the_meter(GPU);
}

#[test]
fn predicted_totals_and_best_agree_with_modeled_solves() {
    totals_and_best_agree(CPU, vec![4, 8]);
}

#[test]
fn gpu_predicted_totals_and_best_agree_with_modeled_gpu_solves() {
    // P = 8: one DGX node (intra-node paths only); P = 16: two (the NDR network too).
    // Measured when written: the plan within 1-10% below the modeled solve on every
    // candidate (the near-target work the table leaves out costs kernel launches here).
    totals_and_best_agree(GPU, vec![8, 16]);
}

fn totals_and_best_agree(on: On, ranks: Vec<usize>) {
    let (a, b) = problem();
    let fabric = Fabric::preset(on.fabric).unwrap();
    let cands = candidates();
    let cfg = PlanConfig {
        ranks,
        candidates: cands.clone(),
        // Every candidate run to the tolerance: this test checks the pricing against the
        // sim given the iterations (the tracked strategy's counts: `tests/it/probe.rs`).
        probe: ProbeOptions {
            tol: TOL,
            strategy: ProbeStrategy::Full,
            ..ProbeOptions::default()
        },
        allreduce: AllreduceAlgo::default(),
        price_limit: plan::DEFAULT_PRICE_LIMIT,
        device: on.device,
    };
    let rows = plan::plan(a.view(), &b, &fabric, &cfg).unwrap();
    for &p in &cfg.ranks {
        let mut sims = Vec::new();
        let mut planned_best = None;
        for (c, row) in cands.iter().zip(rows.iter().filter(|r| r.ranks == p)) {
            assert_eq!(row.method, c.method.name());
            let reps = sim_reports(on, &a, &b, p, c, 100_000);
            assert!(reps.iter().all(|r| r.converged && r.modeled));
            // The plan predicts the slowest rank; every rank's clock ends the solve there
            // or before.
            let sim = reps.iter().map(|r| r.time_s).fold(0.0, f64::max);
            let pred = row.predicted_total_s.unwrap();
            assert!(
                (pred / sim - 1.0).abs() <= 0.15,
                "{} P={p} {:?} k={}: predicted {pred:.4e} s, simulated {sim:.4e} s",
                on.fabric,
                c.method,
                c.k
            );
            // Iterations: probed at 2 ranks, run at P: the same count to within one
            // outer step (rounding differs with the rank count).
            let eq_pred = row.predicted_eq_iterations.unwrap();
            let eq_sim = reps[0].equivalent_iterations as f64;
            assert!(
                (eq_pred - eq_sim).abs() <= c.k as f64,
                "P={p} {:?}: {eq_pred} predicted, {eq_sim} simulated iterations",
                c.method
            );
            if row.recommended {
                planned_best = Some(sim);
            }
            sims.push(sim);
        }
        let best = sims.iter().copied().fold(f64::INFINITY, f64::min);
        let planned = planned_best.expect("one recommended row per P");
        assert!(
            planned <= 1.10 * best,
            "P={p}: the planned best runs {planned:.4e} s, the simulated best {best:.4e} s"
        );
    }
}

/// The modeled time per iteration of the loop alone of `c` (plcg: depth `c.k`) at `p`
/// ranks on `fabric`: the slowest rank's modeled time of a solve capped at 13 iterations
/// minus one capped at 5, over the 8 iterations between (the setup, plcg's spectral
/// warm-up and its l-iteration start-up cancel).
fn loop_time_per_iteration(
    fabric: &str,
    a: &CsMat<f64>,
    b: &[f64],
    p: usize,
    c: &Candidate,
) -> f64 {
    let part = Partition::rows(a.rows(), p);
    let run = |max_iter: usize| -> f64 {
        let cfg = SolverConfig {
            method: c.method,
            depth: if c.method == Method::Plcg { c.k } else { 1 },
            tol: 1e-30,
            max_iter,
            ..SolverConfig::default()
        };
        let reps = SimUniverse::new(p, Fabric::preset(fabric).unwrap(), SimOptions::default())
            .unwrap()
            .run(|comm| {
                let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo).unwrap();
                let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential()).unwrap();
                solver
                    .solve(&b[part.range(comm.rank())], None)
                    .unwrap()
                    .report
            })
            .unwrap();
        assert!(reps.iter().all(|r| r.iterations == max_iter && r.modeled));
        reps.iter().map(|r| r.time_s).fold(0.0, f64::max)
    };
    (run(13) - run(5)) / 8.0
}

/// Issue 49: where an allreduce costs several SpMVs (3-D Poisson 12^3 at 256 ranks of
/// `ito`: 6-7 rows a rank), plcg's depth pays off, and the plan prices it as the simulator runs
/// it: l reductions in flight, one finished per iteration, so an iteration takes
/// max(its work, reduction / l). Every plan within 10% of the modeled loop, depth 2
/// well ahead of depth 1 in both, and the plan's pick the modeled best.
#[test]
fn plcg_depth_pays_off_in_the_plan_as_in_the_modeled_loop() {
    let (a, b) = problem();
    let (fabric, p) = ("ito", 256);
    let c = |method, k| Candidate {
        method,
        k,
        basis: Basis::Chebyshev,
        mpk: false,
    };
    let cands: Vec<Candidate> = std::iter::once(c(Method::Pipecg, 1))
        .chain((1..=4).map(|l| c(Method::Plcg, l)))
        .collect();
    let cfg = PlanConfig {
        ranks: vec![p],
        candidates: cands.clone(),
        probe: ProbeOptions {
            tol: TOL,
            strategy: ProbeStrategy::Full,
            ..ProbeOptions::default()
        },
        allreduce: AllreduceAlgo::default(),
        price_limit: plan::DEFAULT_PRICE_LIMIT,
        device: MemoryKind::Host,
    };
    let rows = plan::plan(a.view(), &b, &Fabric::preset(fabric).unwrap(), &cfg).unwrap();
    let (mut sims, mut recommended, mut depth1) = (Vec::new(), None, f64::NAN);
    for (c, row) in cands.iter().zip(&rows) {
        assert_eq!(row.method, c.method.name());
        let planned = row.predicted_s_per_eq_iter.unwrap();
        let sim = loop_time_per_iteration(fabric, &a, &b, p, c);
        assert!(
            (planned / sim - 1.0).abs() <= 0.10,
            "{:?} k={}: planned {:.3} us, modeled {:.3} us per iteration",
            c.method,
            c.k,
            planned * 1e6,
            sim * 1e6
        );
        if row.recommended {
            recommended = Some(sim);
        }
        sims.push(sim);
        if c.method == Method::Plcg && c.k == 1 {
            depth1 = sim;
        }
        if c.method == Method::Plcg && c.k == 2 {
            // Measured when written: 8.82 and 4.41 us, planned and modeled alike (depth 3
            // and 4: 3.12, the reduction hidden); charging each iteration the whole excess
            // of one reduction over l iterations' work, the plan said 5.7 at depth 2.
            assert!(
                sim < 0.6 * depth1 && planned < 0.6 * depth1,
                "depth 2 pays nothing"
            );
        }
    }
    let best = sims.iter().copied().fold(f64::INFINITY, f64::min);
    let recommended = recommended.expect("a recommended row");
    assert!(
        recommended <= 1.02 * best,
        "the plan's pick runs {recommended:.3e} s, the best {best:.3e} s"
    );
}
