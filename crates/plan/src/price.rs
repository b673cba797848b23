//! Communication priced on the fabric model without data: the real schedules, one rank per
//! fabric node (rank r on node r, as the `sim` backend places ranks by default; on a fabric
//! with `[intra_node]` a fabric node is one device of a machine, so consecutive ranks share
//! a machine), every rank entering at time 0, the slowest rank's completion counted.
//!
//! - Allreduce: the solver's algorithm (`SolverConfig::allreduce`, default recursive
//!   doubling, bit-identical) builds its [`Schedule`] for the method's payload
//!   (`8 * values` bytes of f64 sums), priced by [`SimUniverse::price`].
//! - Halo / matrix powers exchange: the schedule the neighbor crate's naive strategy in
//!   two-sided mode (what [`crate::DistCsr`] and [`crate::MatrixPowers`] build) hands to a
//!   modeling backend: per rank, one step of zero-byte receive-address notifications from
//!   each receiver to its senders, then one step with every data put (8 bytes per value
//!   per start vector) and every arrival. The receive lists are the partition's ghost
//!   levels ([`super::graph`]); sends are their transpose.
//!
//! - A reduction that a pipelined method overlaps with its SpMV is priced together with
//!   that SpMV's exchange, in one run ([`overlapped_s`]), so each slows the other where
//!   they share links, as in a modeled solve.
//!
//! - On a fabric with noise (`[noise]`) every call is priced at [`NOISE_SAMPLES`] start
//!   times spread over the detour period and its time averaged: which ranks a call meets in
//!   a detour depends on when it runs, and a solve's calls run at every phase.
//!
//! Cost: one [`Fabric::price_schedule`] per distinct (payload) or (depth, vectors), one
//! [`Fabric::price_concurrent`] per distinct overlapped pair; the caller prices the distinct
//! ones of a rank count in parallel and caches them.
//!
//! - Work limit: every engine run here stops after `limit` flow rate updates
//!   ([`castack_collectives::fabric_sim::Engine::rate_updates`]) with
//!   [`castack_collectives::fabric_sim::FabricError::WorkLimit`]. The exact fluid model
//!   re-rates, at each distinct instant, the flows its starts and ends can change, so an
//!   exchange of many messages at one common rate starting at many different instants
//!   costs about their product
//!   (see [`super::DEFAULT_PRICE_LIMIT`] for measured figures).

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::schedule::{Datatype, Reduction, Step};
use castack_collectives::{AllreduceAlgo, Op, RankSchedule, Schedule, SimOptions, SimUniverse};

use super::graph::RankGraph;
use super::PlanError;

/// A universe of `p` ranks on `fabric`, one per node (errors when the fabric is too small).
pub fn universe(fabric: &Fabric, p: usize) -> Result<SimUniverse, PlanError> {
    Ok(SimUniverse::new(p, fabric.clone(), SimOptions::default())?)
}

/// Seconds of one blocking allreduce of `values` doubles (sum) with `algo`: the slowest
/// rank's completion, within `limit` rate updates per engine run.
pub fn allreduce_s(
    u: &SimUniverse,
    algo: AllreduceAlgo,
    values: usize,
    limit: u64,
) -> Result<f64, PlanError> {
    let red = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    let sched = algo.schedule(u.size(), 8 * values, red);
    Ok(mean_over_noise(u, &[&sched], limit)?[0])
}

/// The exchange schedule of ghost levels `1..=depth` with `vectors` start vectors per
/// message (naive strategy, two-sided mode).
pub fn exchange_schedule(graphs: &[RankGraph], depth: usize, vectors: usize) -> Schedule {
    let p = graphs.len();
    let recvs: Vec<Vec<(usize, usize)>> = graphs.iter().map(|g| g.recvs(depth)).collect();
    // sends[q]: (receiver r, values) ascending by r.
    let mut sends: Vec<Vec<(usize, usize)>> = vec![Vec::new(); p];
    for (r, list) in recvs.iter().enumerate() {
        for &(q, c) in list {
            sends[q].push((r, c));
        }
    }
    let recv_bytes: Vec<usize> = recvs
        .iter()
        .map(|l| 8 * vectors * l.iter().map(|x| x.1).sum::<usize>())
        .collect();
    let mut sched = Schedule::new(recv_bytes.clone());
    for r in 0..p {
        let (inc, out) = (&recvs[r], &sends[r]);
        if inc.is_empty() && out.is_empty() {
            continue;
        }
        let mut rs = RankSchedule {
            steps: Vec::with_capacity(2),
            scratch_bytes: 8 * vectors * out.iter().map(|x| x.1).sum::<usize>(),
        };
        let mut note = Step::new();
        for &(q, _) in inc {
            note = note.put(q, 0..0, 0);
        }
        for &(d, _) in out {
            note = note.arrive(d, 0, 0);
        }
        rs.push(note);
        let mut data = Step::new();
        let mut src = recv_bytes[r];
        for &(d, c) in out {
            let len = 8 * vectors * c;
            // Destination offset: where r's block sits in d's receive layout.
            let at = recvs[d]
                .iter()
                .take_while(|x| x.0 != r)
                .map(|x| 8 * vectors * x.1)
                .sum();
            data = data.put(d, src..src + len, at);
            src += len;
        }
        let mut at = 0;
        for &(q, c) in inc {
            data = data.arrive(q, at, 8 * vectors * c);
            at += 8 * vectors * c;
        }
        rs.push(data);
        sched.ranks[r] = rs;
    }
    sched
}

/// Seconds of one exchange of ghost levels `1..=depth` carrying `vectors` start vectors:
/// the slowest rank's completion (0 when no rank communicates).
pub fn exchange_s(
    u: &SimUniverse,
    graphs: &[RankGraph],
    depth: usize,
    vectors: usize,
    limit: u64,
) -> Result<f64, PlanError> {
    let sched = exchange_schedule(graphs, depth, vectors);
    if sched.ranks.iter().all(|r| r.steps.is_empty()) {
        return Ok(0.0);
    }
    Ok(mean_over_noise(u, &[&sched], limit)?[0])
}

/// Seconds of an allreduce of `values` doubles with `algo` and an exchange of ghost levels
/// `1..=depth` carrying `vectors` start vectors, both started at time 0 and in flight
/// together (a pipelined method's reduction overlapping its SpMV's exchange): each call's
/// slowest rank, from ONE engine run in which their transfers share the fabric, as the
/// `sim` backend prices calls that overlap in modeled time.
pub fn overlapped_s(
    u: &SimUniverse,
    algo: AllreduceAlgo,
    values: usize,
    graphs: &[RankGraph],
    depth: usize,
    vectors: usize,
    limit: u64,
) -> Result<(f64, f64), PlanError> {
    let red = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    let allreduce = algo.schedule(u.size(), 8 * values, red);
    let exchange = exchange_schedule(graphs, depth, vectors);
    let t = mean_over_noise(u, &[&allreduce, &exchange], limit)?;
    Ok((t[0], t[1]))
}

pub use castack_collectives::sim::NOISE_SAMPLES;

/// Per call of `scheds` (in flight together), the slowest rank's time from entry to
/// finish, averaged over [`SimUniverse::noise_starts`] (one run per start time: time 0
/// alone without noise), each run within `limit` rate updates.
fn mean_over_noise(
    u: &SimUniverse,
    scheds: &[&Schedule],
    limit: u64,
) -> Result<Vec<f64>, PlanError> {
    let starts = u.noise_starts();
    let mut sum = vec![0.0; scheds.len()];
    for &t0 in &starts {
        let done = u.price_concurrent_within(scheds, t0, limit)?;
        for (acc, call) in sum.iter_mut().zip(&done) {
            *acc += slowest(call) - t0;
        }
    }
    Ok(sum.into_iter().map(|x| x / starts.len() as f64).collect())
}

fn slowest(t: &[f64]) -> f64 {
    t.iter().copied().fold(0.0, f64::max)
}
