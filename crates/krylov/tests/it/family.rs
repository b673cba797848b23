//! Solves of the CG family's one-vector methods on thread or simulated ranks, every rank's
//! bits and report (shared by `plcg.rs` and `prcg_groppcg.rs`).

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{Communicator, SimOptions, SimUniverse, ThreadUniverse};
use castack_krylov::{Cpu, DistCsr, Partition, SolveReport, Solver, SolverConfig, SpmvMode};
use sprs::CsMat;

pub(crate) type RankOut = (Vec<u64>, SolveReport);

pub(crate) fn rank_solve<C: Communicator + ?Sized>(
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
        .unwrap_or_else(|e| panic!("{} {} l={}: {e}", cfg.method, cfg.precond, cfg.depth));
    (s.x.iter().map(|v| v.to_bits()).collect(), s.report)
}

/// Every rank's output on `p` thread ranks (`fabric: None`) or simulated ranks.
pub(crate) fn run(
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

/// The gathered x and rank 0's report on `p` thread ranks, every rank counting the same.
pub(crate) fn solve_with(
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    p: usize,
    cfg: &SolverConfig,
) -> (Vec<f64>, SolveReport) {
    let outs = run(a, b, x0, p, cfg, None);
    let r0 = outs[0].1.clone();
    let mut x = Vec::with_capacity(a.rows());
    for (xb, r) in outs {
        assert_eq!(
            (
                r.iterations,
                r.reductions,
                r.halo_exchanges,
                r.precond_applies
            ),
            (
                r0.iterations,
                r0.reductions,
                r0.halo_exchanges,
                r0.precond_applies
            ),
            "counters agree on every rank"
        );
        x.extend(xb.into_iter().map(f64::from_bits));
    }
    (x, r0)
}
