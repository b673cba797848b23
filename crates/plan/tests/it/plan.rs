//! The planner's per-rank quantities against independent counts (a hand-countable 2-D
//! Poisson partition, and what `DistCsr` / `MatrixPowers` report), its exchange schedules
//! against `Schedule::validate`, its per-method counts against real solves' counters, and a
//! small plan's monotone properties and errors.

use castack_collectives::fabric_sim::{Fabric, MemoryKind};
use castack_collectives::{AllreduceAlgo, Communicator, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Basis, Cpu, DistCsr, MatrixPowers, Method, Partition, Solver, SolverConfig,
    SpmvMode,
};
use castack_plan::cost::{outer_step, working_set, HaloUse};
use castack_plan::graph::rank_graphs;
use castack_plan::price::exchange_schedule;
use castack_plan::probe::ProbeOptions;
use castack_plan::{self as plan, Candidate, PlanConfig, PlanError};

#[test]
fn poisson2d_partition_counts_by_hand() {
    // 6 x 6 grid, 3 ranks: two grid lines each. 5-point stencil row lengths: corners 3,
    // edges 4, interior 5. Line y = 0: 2 * 3 + 4 * 4 = 22; line y = 1: 2 * 4 + 4 * 5 = 28.
    let a = gen::poisson2d(6).unwrap();
    let g = rank_graphs(a.view(), &Partition::rows(36, 3), 3);
    assert_eq!(
        g.iter()
            .map(|r| (r.rows(), r.nnz(), r.ghosts()))
            .collect::<Vec<_>>(),
        vec![(12, 50, 6), (12, 56, 12), (12, 50, 6)]
    );
    // Rank 0: level 1 = line 2 (rank 1), level 2 = line 3 (rank 1), level 3 = line 4
    // (rank 2).
    let sizes: Vec<usize> = g[0].levels[1..].iter().map(|l| l.rows).collect();
    assert_eq!(sizes, vec![6, 6, 6]);
    assert_eq!(g[0].recvs(1), vec![(1, 6)]);
    assert_eq!(g[0].recvs(3), vec![(1, 12), (2, 6)]);
    assert_eq!(g[1].recvs(1), vec![(0, 6), (2, 6)]);
    // Redundant flops of a size-2 build on rank 0: step 0 computes level 1 (line 2, 28
    // nonzeros), step 1 owned rows only: 2 * 28.
    assert_eq!(g[0].redundant_flops(2), 56);
}

#[test]
fn graph_matches_dist_csr_and_matrix_powers() {
    let a = gen::poisson3d(7).unwrap();
    let n = a.rows();
    for p in [1, 3, 5] {
        let part = Partition::rows(n, p);
        let depth = 4;
        let g = rank_graphs(a.view(), &part, depth);
        let got = ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| {
                let d = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo).unwrap();
                let m = MatrixPowers::from_global(comm, a.view(), &part, depth).unwrap();
                let flops: Vec<u64> = (1..=depth)
                    .map(|k| m.local_redundant_flops_per_build(k))
                    .collect();
                (
                    d.n_local(),
                    d.nnz_local(),
                    d.ghost_count(),
                    m.level_sizes(),
                    flops,
                    m.send_values(),
                )
            })
            .unwrap();
        for (r, (rows, nnz, ghosts, levels, flops, sends)) in got.into_iter().enumerate() {
            let gr = &g[r];
            assert_eq!(
                (gr.rows(), gr.nnz(), gr.ghosts()),
                (rows, nnz, ghosts),
                "p {p} r {r}"
            );
            let mine: Vec<usize> = gr.levels[1..].iter().map(|l| l.rows).collect();
            assert_eq!(mine, levels, "p {p} r {r}");
            let mine: Vec<u64> = (1..=depth).map(|k| gr.redundant_flops(k)).collect();
            assert_eq!(mine, flops, "p {p} r {r}");
            // What r sends in the depth-4 exchange = what the others receive from r.
            let sent: usize = g
                .iter()
                .flat_map(|o| o.recvs(depth))
                .filter(|&(q, _)| q == r)
                .map(|(_, c)| c)
                .sum();
            assert_eq!(sent, sends, "p {p} r {r}");
        }
    }
}

#[test]
fn exchange_schedules_validate_and_move_every_ghost() {
    let a = gen::poisson3d(6).unwrap();
    for (p, depth, vectors) in [(4, 1, 1), (5, 3, 2), (2, 2, 1)] {
        let g = rank_graphs(a.view(), &Partition::rows(a.rows(), p), depth);
        let s = exchange_schedule(&g, depth, vectors);
        s.validate().unwrap();
        let ghosts: usize = g.iter().map(|r| r.rows_through(depth) - r.rows()).sum();
        let (_, bytes) = s.totals();
        assert_eq!(bytes, 8 * vectors * ghosts);
    }
}

/// The model's reductions and exchanges per outer iteration against a real solve's
/// counters: the loop adds only a few (first Gram, checks, refreshes).
/// A solver for `cfg` on this rank's rows of `a` (with matrix powers data of depth `cfg.k`
/// when `cfg.mpk`) and a right-hand side of ones.
fn solver<'c, C: Communicator + ?Sized>(
    comm: &'c C,
    a: &sprs::CsMat<f64>,
    part: &Partition,
    cfg: &SolverConfig,
) -> (Solver<'c, C>, Vec<f64>) {
    let d = DistCsr::from_global(comm, a.view(), part, SpmvMode::Halo).unwrap();
    let b = vec![1.0; d.n_local()];
    let s = if cfg.mpk {
        let m = MatrixPowers::from_global(comm, a.view(), part, cfg.k).unwrap();
        Solver::with_mpk(comm, d, m, cfg.clone(), Cpu::sequential()).unwrap()
    } else {
        Solver::new(comm, d, cfg.clone(), Cpu::sequential()).unwrap()
    };
    (s, b)
}

#[test]
fn outer_step_counts_match_solver_counters() {
    let a = gen::poisson2d(20).unwrap();
    let n = a.rows();
    let part = Partition::rows(n, 2);
    for &method in Method::ALL {
        for mpk in [false, true] {
            if mpk && !method.is_s_step() {
                continue;
            }
            let k = 4;
            // plcg's depth is the model's k (the candidate's; ignored by the others).
            let cfg = SolverConfig {
                method,
                k,
                depth: k,
                mpk,
                tol: 1e-8,
                ..SolverConfig::default()
            };
            let r = ThreadUniverse::new(2)
                .unwrap()
                .run(|comm| {
                    let (mut s, b) = solver(comm, &a, &part, &cfg);
                    s.solve(&b, None).unwrap().report
                })
                .unwrap()
                .remove(0);
            assert!(r.converged, "{method:?}");
            let step = outer_step(method, k, mpk);
            let outer = r.iterations as u64;
            // plcg: its start-up's l steps (an SpMV and a reduction each) per cycle.
            let startup = match method {
                Method::Plcg => (k as u64 + 1) * (1 + r.residual_replacements),
                _ => 0,
            };
            let extra = 3 + 2 * r.residual_replacements + startup;
            let reds = outer * step.reductions.len() as u64;
            assert!(
                r.reductions >= reds.saturating_sub(step.reductions.len() as u64)
                    && r.reductions <= reds + extra,
                "{method:?} mpk {mpk}: {} reductions, model {reds} for {outer} outer",
                r.reductions
            );
            let per = match step.halo {
                HaloUse::Depth1 { count } => count as u64,
                HaloUse::Mpk { .. } => 1,
            };
            let halos = outer * per;
            let slack = (k as u64 + 2) * (2 + r.residual_replacements);
            assert!(
                r.halo_exchanges + per >= halos && r.halo_exchanges <= halos + slack,
                "{method:?} mpk {mpk}: {} exchanges, model {halos} for {outer} outer",
                r.halo_exchanges
            );
            assert!(
                r.equivalent_iterations as u64 <= outer * step.eq as u64,
                "{method:?}"
            );
        }
    }
}

fn small_config(ranks: Vec<usize>) -> PlanConfig {
    PlanConfig {
        ranks,
        candidates: Candidate::grid(
            &[
                (Method::Cg, Basis::Chebyshev),
                (Method::Pipecg, Basis::Chebyshev),
                (Method::Cbcgr, Basis::Chebyshev),
            ],
            2..=3,
            true,
        ),
        probe: ProbeOptions {
            ranks: 2,
            tol: 1e-10,
            ..ProbeOptions::default()
        },
        allreduce: AllreduceAlgo::default(),
        price_limit: plan::DEFAULT_PRICE_LIMIT,
        device: MemoryKind::Host,
    }
}

pub(crate) fn unit_rhs(a: &sprs::CsMat<f64>) -> Vec<f64> {
    a.outer_iterator().map(|r| r.data().iter().sum()).collect()
}

#[test]
fn small_plan_recommends_one_row_per_rank_count_with_monotone_parts() {
    let a = gen::poisson3d(10).unwrap();
    let b = unit_rhs(&a);
    let f = Fabric::preset("fx100").unwrap();
    let rows = plan::plan(a.view(), &b, &f, &small_config(vec![1, 4, 8])).unwrap();
    // cg, pipecg, cbcgr x k {2, 3} x mpk {no, yes}: 6 rows per rank count.
    assert_eq!(rows.len(), 3 * 6);
    for p in [1, 4, 8] {
        let at: Vec<_> = rows.iter().filter(|r| r.ranks == p).collect();
        assert_eq!(at.iter().filter(|r| r.recommended).count(), 1, "P {p}");
        let best = at.iter().find(|r| r.recommended).unwrap();
        for r in &at {
            assert_eq!(r.unpriced, None);
            let (allreduce, halo) = (r.allreduce_s.unwrap(), r.halo_s.unwrap());
            let per = r.predicted_s_per_eq_iter.unwrap();
            let sum = r.compute_s + allreduce + halo;
            assert!((per - sum).abs() <= 1e-12 * sum);
            let total = r.predicted_total_s.unwrap();
            let want = per * r.predicted_eq_iterations.unwrap() + r.setup_s.unwrap();
            assert!((total - want).abs() <= 1e-9 * want);
            assert!(best.predicted_total_s.unwrap() <= total);
            if p == 1 {
                // One rank: nothing to exchange or reduce across nodes.
                assert_eq!((halo, allreduce), (0.0, 0.0), "{r:?}");
            } else {
                assert!(halo > 0.0 && r.compute_s > 0.0, "{r:?}");
            }
        }
    }
    // CG at 4 and 8 ranks: the allreduce grows with P on the torus (one more recursive
    // doubling step), compute shrinks with the slowest rank's rows; iterations do not
    // depend on P.
    let cg = |p: usize| {
        rows.iter()
            .find(|r| r.ranks == p && r.method == "cg")
            .unwrap()
            .clone()
    };
    assert!(cg(8).allreduce_s > cg(4).allreduce_s);
    assert!(cg(8).compute_s < cg(4).compute_s && cg(4).compute_s < cg(1).compute_s);
    assert_eq!(cg(1).predicted_eq_iterations, cg(8).predicted_eq_iterations);
    // Block methods reduce less often per CG-equivalent iteration than CG.
    let cbcgr = rows
        .iter()
        .find(|r| r.ranks == 8 && r.method == "cbcgr" && r.k == Some(3) && !r.mpk)
        .unwrap();
    assert!(cbcgr.allreduce_s < cg(8).allreduce_s);
}

#[test]
fn rank_counts_plan_independently_in_the_given_order() {
    // Rank counts (and their pricing jobs) run in parallel: the rows must be those of one
    // plan per rank count, in the order given, with each row's parts those priced on
    // demand, one call at a time (`outer_cost_at`).
    let a = gen::poisson2d(24).unwrap();
    let b = unit_rhs(&a);
    let f = Fabric::preset("fx100").unwrap();
    let ranks = vec![8, 2, 5];
    let cfg = small_config(ranks.clone());
    let rows = plan::plan(a.view(), &b, &f, &cfg).unwrap();
    let alone: Vec<_> = ranks
        .iter()
        .flat_map(|&p| plan::plan(a.view(), &b, &f, &small_config(vec![p])).unwrap())
        .collect();
    assert_eq!(rows, alone);
    for r in &rows {
        let c = cfg
            .candidates
            .iter()
            .find(|c| c.method.name() == r.method && r.k.is_none_or(|k| k == c.k) && c.mpk == r.mpk)
            .unwrap();
        let oc = plan::outer_cost_at(a.view(), &f, r.ranks, c, AllreduceAlgo::default()).unwrap();
        let eq = oc.eq as f64;
        assert_eq!(
            (r.compute_s, r.allreduce_s, r.halo_s),
            (
                oc.compute_s / eq,
                Some(oc.allreduce_s / eq),
                Some(oc.halo_s / eq)
            ),
            "{r:?}"
        );
    }
}

#[test]
fn progress_counts_every_unit_once() {
    // cg, pipecg, cbcgr k {2, 3}: 4 instrumented runs. Per rank count: the distinct
    // exchanges (depth, vectors) and allreduce payloads of the method table, and the
    // setup's (a depth-1 exchange and a 2-value allreduce).
    let a = gen::poisson2d(16).unwrap();
    let b = unit_rhs(&a);
    let f = Fabric::preset("fx100").unwrap();
    let cfg = small_config(vec![2, 3]);
    let mut payloads: Vec<usize> = cfg
        .candidates
        .iter()
        .flat_map(|c| outer_step(c.method, c.k, c.mpk).reductions)
        .chain([2])
        .collect();
    payloads.sort_unstable();
    payloads.dedup();
    let mut exchanges: Vec<(usize, usize)> = cfg
        .candidates
        .iter()
        .map(|c| match outer_step(c.method, c.k, c.mpk).halo {
            HaloUse::Depth1 { .. } => (1, 1),
            HaloUse::Mpk { depth, vectors, .. } => (depth, vectors),
        })
        .chain([(1, 1)])
        .collect();
    exchanges.sort_unstable();
    exchanges.dedup();
    let want = 4 + 2 * (payloads.len() + exchanges.len());
    assert_eq!(plan::work_units(&cfg), want);
    let seen = std::sync::Mutex::new(Vec::new());
    let rows = plan::plan_with_progress(a.view(), &b, &f, &cfg, &|done, total| {
        seen.lock().unwrap().push((done, total));
    })
    .unwrap();
    let mut seen = seen.into_inner().unwrap();
    assert!(seen.iter().all(|&(_, total)| total == want));
    seen.sort_unstable();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=want).collect::<Vec<_>>()
    );
    assert_eq!(rows, plan::plan(a.view(), &b, &f, &cfg).unwrap());
}

#[test]
fn outer_cost_matches_the_device_model_on_one_rank() {
    // One rank, cg: compute = SpMV + vector passes, priced by the fx100 host model
    // (105 GB/s, 1 TF/s: memory-bound), nothing else.
    let a = gen::poisson2d(30).unwrap();
    let f = Fabric::preset("fx100").unwrap();
    let c = Candidate {
        method: Method::Cg,
        k: 1,
        basis: Basis::Chebyshev,
        mpk: false,
    };
    let oc = plan::outer_cost_at(a.view(), &f, 1, &c, AllreduceAlgo::default()).unwrap();
    let (n, nnz) = (a.rows(), a.nnz());
    // q = A p fused with p.q: the SpMV's bytes.
    let spmv = (12 * nnz + 8 * (n + 1) + 16 * n) as f64 / 105e9;
    // r -= alpha q fused with r.r (r, q read, r written; the steady state leaves the
    // weighted norm out far from the target, cg.rs), then x += alpha p with
    // p = r + beta p in one pass (x, p, r read, x, p written): 8 passes of 8 n bytes.
    let vec = (8 * 8 * n) as f64 / 105e9;
    assert!((oc.compute_s - (spmv + vec)).abs() <= 1e-15 + 1e-9 * oc.compute_s);
    assert_eq!((oc.allreduce_s, oc.halo_s), (0.0, 0.0));
}

#[test]
fn errors_name_the_problem() {
    let a = gen::poisson2d(8).unwrap();
    let b = unit_rhs(&a);
    let f = Fabric::preset("ito").unwrap();
    let e = plan::plan(a.view(), &b, &f, &small_config(vec![4097])).unwrap_err();
    assert!(matches!(e, PlanError::Sim(_)), "{e}");
    assert!(e.to_string().contains("4097"), "{e}");
    let mut cfg = small_config(vec![2]);
    cfg.candidates[2].k = 21;
    let e = plan::plan(a.view(), &b, &f, &cfg).unwrap_err();
    assert!(matches!(e, PlanError::KOutOfRange { k: 21 }), "{e}");
    let e = plan::plan(a.view(), &b[1..], &f, &small_config(vec![2])).unwrap_err();
    assert!(matches!(e, PlanError::RhsLength { .. }), "{e}");
    let e = plan::plan(a.view(), &b, &f, &small_config(vec![])).unwrap_err();
    assert!(matches!(e, PlanError::NoRanks), "{e}");
    // More ranks than rows is allowed.
    let tiny = gen::poisson2d(2).unwrap();
    let rows = plan::plan(tiny.view(), &unit_rhs(&tiny), &f, &small_config(vec![6])).unwrap();
    assert_eq!(rows.iter().filter(|r| r.recommended).count(), 1);
}

/// pipecg's reduction is priced in flight with the exchange of the SpMV it overlaps (one
/// joint engine run, as a modeled solve prices overlapping calls): each call takes at least
/// as long as alone, the pair contends on the ranks' injection links, and the outer cost
/// charges the joint exchange and the part of the joint reduction the SpMV does not hide.
#[test]
fn pipecg_reduction_is_priced_in_flight_with_its_exchange() {
    use castack_collectives::fabric_sim::{Fabric as F, MemoryKind, Placement};
    use castack_collectives::schedule::{Datatype, Reduction};
    use castack_collectives::{sim, Op};
    let a = gen::poisson2d(64).unwrap();
    let f = F::preset("ib-qdr").unwrap();
    let p = 16;
    let c = Candidate {
        method: Method::Pipecg,
        k: 1,
        basis: Basis::Chebyshev,
        mpk: false,
    };
    let algo = AllreduceAlgo::default();
    let oc = plan::outer_cost_at(a.view(), &f, p, &c, algo).unwrap();
    // The same two calls priced by fabric-sim directly: alone, then together.
    let red = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    let reduce = sim::price_schedule(&algo.schedule(p, 8 * 3, red), MemoryKind::Host);
    let graphs = rank_graphs(a.view(), &Partition::rows(a.rows(), p), 1);
    let exchange = sim::price_schedule(&exchange_schedule(&graphs, 1, 1), MemoryKind::Host);
    let placement = Placement::one_per_node(p, MemoryKind::Host);
    let zero = vec![0.0; p];
    let slowest = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let mech = castack_collectives::SimMechanism::default().mechanism();
    let alone = |s| slowest(&f.price_schedule(s, &placement, &zero, mech).unwrap());
    let joint = f
        .price_concurrent(&[(&reduce, &zero), (&exchange, &zero)], &placement, mech)
        .unwrap();
    let (jr, jx) = (slowest(&joint[0]), slowest(&joint[1]));
    assert!(jr >= alone(&reduce) && jx >= alone(&exchange));
    assert!(
        jr + jx > alone(&reduce) + alone(&exchange),
        "no contention between the reduction and the exchange: {jr:e} {jx:e}"
    );
    assert_eq!(oc.halo_s, jx);
    assert_eq!(oc.allreduce_s, (jr - (oc.spmv_s + jx)).max(0.0));
}

/// On a fabric with noise the planner prices a call at 16 start times spread over the
/// detour period and averages: here against fabric-sim's own pricing at those times.
#[test]
fn noisy_calls_are_priced_as_the_mean_over_the_detour_period() {
    use castack_collectives::fabric_sim::{
        FabricConfig, MemoryKind, NoiseConfig, Placement, SoftwareConfig,
    };
    use castack_collectives::schedule::{Datatype, Reduction};
    use castack_collectives::{sim, Op};
    use castack_plan::price::{allreduce_s, universe, NOISE_SAMPLES};
    let mut cfg = FabricConfig::preset("ib-qdr").unwrap();
    cfg.software = Some(SoftwareConfig {
        call_us: 1.0,
        step_us: 2.0,
    });
    let quiet = Fabric::new(cfg.clone()).unwrap();
    cfg.noise = Some(NoiseConfig {
        period_us: 100.0,
        detour_us: 10.0,
        seed: 5,
    });
    let noisy = Fabric::new(cfg).unwrap();
    let (p, algo) = (32, AllreduceAlgo::default());
    let red = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    let shape = sim::price_schedule(&algo.schedule(p, 16, red), MemoryKind::Host);
    let placement = Placement::one_per_node(p, MemoryKind::Host);
    let mech = castack_collectives::SimMechanism::default().mechanism();
    let mut want = 0.0;
    for j in 0..NOISE_SAMPLES {
        let t0 = 100e-6 * j as f64 / NOISE_SAMPLES as f64;
        let fin = noisy
            .price_schedule(&shape, &placement, &vec![t0; p], mech)
            .unwrap();
        want += fin.iter().copied().fold(0.0, f64::max) - t0;
    }
    want /= NOISE_SAMPLES as f64;
    let got = allreduce_s(&universe(&noisy, p).unwrap(), algo, 2, u64::MAX).unwrap();
    assert!((got - want).abs() <= 1e-15, "{got:e} vs {want:e}");
    let calm = allreduce_s(&universe(&quiet, p).unwrap(), algo, 2, u64::MAX).unwrap();
    // 32 ranks x 6 steps of 2 us CPU at a 10% duty cycle: detours are met.
    assert!(got > calm * 1.05, "noisy {got:e} vs quiet {calm:e}");
}

#[test]
fn working_set_is_what_each_rank_of_a_solve_holds() {
    // The planner's per-rank working set (the cache level its kernels are priced at)
    // against what the solver itself counts on every rank, for every method, with and
    // without the matrix powers kernel, on 3 ranks of an unevenly split matrix.
    let a = gen::poisson2d(17).unwrap();
    let n = a.rows();
    let ranks = 3;
    let part = Partition::rows(n, ranks);
    for &method in Method::ALL {
        for (k, mpk) in [(1, false), (3, false), (4, true)] {
            if mpk && !method.is_s_step() {
                continue;
            }
            // plcg's depth is the candidate's k (ignored by the others).
            let cfg = SolverConfig {
                method,
                k,
                depth: k,
                mpk,
                tol: 1e-8,
                ..SolverConfig::default()
            };
            let depth = if mpk { k } else { 1 };
            let graphs = rank_graphs(a.view(), &part, depth.max(1));
            let held = ThreadUniverse::new(ranks)
                .unwrap()
                .run(|comm| {
                    let (mut s, b) = solver(comm, &a, &part, &cfg);
                    let setup = s.held_bytes();
                    s.solve(&b, None).unwrap();
                    let first = s.held_bytes();
                    s.solve(&b, None).unwrap();
                    // A later solve holds the same: its vectors replace the last one's.
                    assert_eq!(s.held_bytes(), first, "{method:?}");
                    assert!(setup < first, "{method:?}");
                    first
                })
                .unwrap();
            for (rank, (&h, g)) in held.iter().zip(&graphs).enumerate() {
                assert_eq!(
                    h,
                    working_set(method, k, mpk, g),
                    "{method:?} k {k} mpk {mpk} rank {rank}"
                );
            }
        }
    }
}

/// The least work limit at which `fits` holds (it holds at 2^40 and is monotone).
fn least_limit(fits: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (0u64, 1u64 << 40);
    assert!(fits(hi));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

#[test]
fn a_price_limit_leaves_the_rows_that_need_more_unpriced_and_the_rest_bit_identical() {
    let a = gen::poisson3d(10).unwrap();
    let b = unit_rhs(&a);
    let f = Fabric::preset("ito").unwrap();
    let p = 16;
    let graphs = rank_graphs(a.view(), &Partition::rows(a.rows(), p), 3);
    let u = plan::price::universe(&f, p).unwrap();
    let need =
        |d: usize| least_limit(|limit| plan::price::exchange_s(&u, &graphs, d, 1, limit).is_ok());
    let (need1, need3) = (need(1), need(3));
    assert!(need1 < need3, "{need1} vs {need3}");
    let mut cfg = small_config(vec![p]);
    let full = plan::plan(a.view(), &b, &f, &cfg).unwrap();
    assert!(full.iter().all(|r| r.unpriced.is_none()));
    let limit = need3 - 1;
    cfg.price_limit = limit;
    let cut = plan::plan(a.view(), &b, &f, &cfg).unwrap();
    assert_eq!(cut.len(), cfg.candidates.len());
    let mut unpriced = 0;
    for ((c, x), y) in cfg.candidates.iter().zip(&full).zip(&cut) {
        assert_eq!(
            (x.method.as_str(), x.k, x.mpk),
            (y.method.as_str(), y.k, y.mpk)
        );
        // The compute and the iterations do not depend on the pricing.
        assert_eq!(x.compute_s.to_bits(), y.compute_s.to_bits());
        assert_eq!(x.predicted_eq_iterations, y.predicted_eq_iterations);
        let (depth, _) = outer_step(c.method, c.k, c.mpk).halo.exchange();
        match &y.unpriced {
            Some(why) => {
                unpriced += 1;
                assert!(
                    why.starts_with("pricing the ")
                        && why.contains(&format!("at P = {p} passed the work limit of {limit} "))
                        && !why.contains('\n'),
                    "{why}"
                );
                assert_eq!(
                    (
                        y.predicted_s_per_eq_iter,
                        y.allreduce_s,
                        y.halo_s,
                        y.setup_s
                    ),
                    (None, None, None, None),
                    "{y:?}"
                );
                assert_eq!((y.predicted_total_s, y.recommended), (None, false));
            }
            None => {
                // Priced: the unlimited plan's row, bit for bit (but for the mark, which
                // may have gone to a row now unpriced).
                assert!(depth < 3, "{y:?} needs the depth-{depth} exchange");
                let mut y = y.clone();
                y.recommended = x.recommended;
                assert_eq!(x, &y);
            }
        }
        if depth >= 3 {
            // It contains the depth-3 exchange of one vector: refused, at most after running
            // its own exchange up to the limit.
            assert!(y.unpriced.is_some(), "{y:?}");
        }
    }
    assert!(unpriced >= 1, "cbcgr:3:mpk needs the depth-3 exchange");
    let cg = cut.iter().find(|r| r.method == "cg").unwrap();
    assert!(cg.unpriced.is_none() && cg.predicted_total_s.is_some());
    // The mark goes to the least total among the priced rows.
    let best = cut
        .iter()
        .filter(|r| r.predicted_total_s.is_some())
        .min_by(|x, y| {
            x.predicted_total_s
                .unwrap()
                .total_cmp(&y.predicted_total_s.unwrap())
        })
        .unwrap();
    assert!(best.recommended);
    assert_eq!(cut.iter().filter(|r| r.recommended).count(), 1);
    // Deeper exchanges contain the refused depth-3 one: refused for its reason, unrun.
    cfg.candidates = Candidate::grid(&[(Method::Cbcgr, Basis::Chebyshev)], 3..=5, true);
    let deep = plan::plan(a.view(), &b, &f, &cfg).unwrap();
    let why: Vec<_> = deep
        .iter()
        .filter(|r| r.mpk)
        .map(|r| r.unpriced.clone())
        .collect();
    assert_eq!(why.len(), 3);
    let root = why[0].clone().unwrap();
    assert!(
        root.starts_with("pricing the depth-3 exchange of 1 vector at P = 16"),
        "{root}"
    );
    assert!(
        why.iter().all(|w| w.as_deref() == Some(root.as_str())),
        "{why:?}"
    );
    assert!(deep.iter().filter(|r| !r.mpk).all(|r| r.unpriced.is_none()));
}

#[test]
fn cuda_needs_a_gpu_model_and_names_the_presets_with_one() {
    let mut cfg = small_config(vec![4]);
    cfg.device = MemoryKind::Gpu;
    let e = plan::validate(&Fabric::preset("genoa-ndr").unwrap(), &cfg).unwrap_err();
    assert!(matches!(e, plan::PlanError::NoGpuModel { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("fabric `genoa-ndr` has no GPU device model ([compute.gpu])"),
        "{msg}"
    );
    for with in ["peach2", "ib-qdr", "dgx-h100"] {
        assert!(msg.contains(with), "{msg}");
    }
    plan::validate(&Fabric::preset("dgx-h100").unwrap(), &cfg).unwrap();
}
