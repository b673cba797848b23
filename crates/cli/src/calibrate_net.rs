//! `mpirun -np P krylov calibrate --backend mpi -o cluster.toml`: the device model of
//! `krylov calibrate` plus the network between the ranks, as the solvers meet them.
//!
//! What is measured, all with the communicator the solvers use ([`Job::comm`], our
//! `Communicator` over MPI: buffered `MPI_Isend`, `MPI_Mprobe`/`MPI_Mrecv`, our allreduce
//! schedules over them):
//! - the device model, by every rank at the same time (the calibration of
//!   [`crate::calibrate`], each rank on the core the launcher gave it), in lock step (a
//!   barrier before each working set and figure): ranks that share a node share its memory
//!   bandwidth and, on SMT siblings, its core in a solve, so they share them here too. The preset's
//!   figures are the slowest rank's, figure by figure (the least bandwidth and flop rate,
//!   the greatest addition latency and per-operation cost): the simulator gives every rank
//!   one device model, and a solve's iteration waits for its slowest rank at every
//!   reduction, so the mean would describe no iteration's pace (on a shared machine one
//!   rank's core may be busier than the other's);
//! - the point-to-point curve: the half round trip of rank 0 with one peer, over message
//!   sizes from 8 B to 8 MiB (to 256 KiB with `--quick`), the median of 5 timed batches per
//!   size, for an intra-node peer (the first rank sharing rank 0's node, by
//!   `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`) and an inter-node one (the first rank on
//!   another node) where each exists. The preset's latency is the 8-byte time; its
//!   bandwidth is the one that, with that latency, fits the larger sizes best in relative
//!   error (least squares of `(L + m / B) / t - 1`, closed form). The curve, the fit and
//!   what the written preset then models for each size are listed in comments;
//! - the allreduce per call: `len` sums of f64 (8 B to 256 B) with the solvers' persistent
//!   plan and default (bit-identical) algorithm, back to back on every rank, rank 0's median
//!   of 5 timed batches. The simulator prices the same calls on the fitted fabric; what the
//!   measurement exceeds that by (median over the sizes) becomes `[software] call_us`, and
//!   nothing when it does not (a per-call cost the model does not need is not written).
//! - the topology: P ranks, N nodes as the shared-memory split finds them. The simulator
//!   places one rank per node, so the preset is a crossbar of P nodes whose every pair
//!   costs the inter-node curve where the job spans nodes (the slower class, which a solve
//!   across nodes waits for), else the intra-node one; the other curve is in the comments.
//!
//! Every value is written with a comment naming the measurement, the date and the command.
//! Rank 0 writes the preset, atomically, after it parses and validates; the job agrees on
//! the outcome ([`crate::launch::mpi`]).
//!
//! This module is also `krylov calibrate`'s entry ([`run`]): other backends go on to
//! [`calibrate::run`] (calibrate.rs does not import this module).
//!
//! Why hand-written: the figures are of our own communicator and solvers' reductions on
//! this job, and the output is a castack preset; no crate measures these.

use std::process::ExitCode;

use castack_collectives::fabric_sim::{Fabric, FabricConfig};
use castack_collectives::{
    AllreduceAlgo, BcastAlgo, Collectives, CommError, Communicator, Op, PersistentCollective,
    PointToPoint, SimOptions, SimUniverse,
};

use crate::args::{Backend, CalibrateArgs};
use crate::calibrate::{self, Measured, Network, Plan};
use crate::clock::BenchClock;
use crate::exit::{bad, CliError};
use crate::launch::{agree, Agreed, Job};

/// The tag of the ping-pong's messages (a user tag; collectives use their own).
const TAG: u64 = 11;

/// Message sizes of the point-to-point curve (bytes): powers of 2 from 8 B.
fn message_sizes(quick: bool) -> Vec<usize> {
    let top = if quick { 256 << 10 } else { 8 << 20 };
    std::iter::successors(Some(8usize), |s| Some(s * 2))
        .take_while(|&s| s <= top)
        .collect()
}

/// Values per allreduce call measured (8 B to 256 B).
const ALLREDUCE_LENS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// One point of the curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NetPoint {
    pub(crate) bytes: usize,
    /// Half the round trip, seconds.
    pub(crate) half_s: f64,
}

/// One latency-bandwidth line `t(m) = latency + m / bandwidth`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Line {
    /// Seconds.
    pub(crate) latency_s: f64,
    /// Bytes per second.
    pub(crate) bandwidth: f64,
}

impl Line {
    fn at(&self, bytes: usize) -> f64 {
        self.latency_s + bytes as f64 / self.bandwidth
    }
}

/// The fit of a curve: one line, or two: an MPI library's small-message protocol (eager
/// copies through shared buffers) up to a size, its large-message protocol above, as the
/// library switches protocols by size. Up to that size the cheaper of the two is taken, as
/// the simulator's automatic mechanism choice does (the small line is the preset's PIO with
/// `max_bytes`, the large one its DMA).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fit {
    /// The line of the small messages (of every message without `large`).
    pub(crate) small: Line,
    /// The line of the large messages and the largest size on the small line, where two
    /// fit better than one.
    pub(crate) large: Option<(Line, usize)>,
}

impl Fit {
    /// The fitted time of a message of `bytes`.
    pub(crate) fn at(&self, bytes: usize) -> f64 {
        let t = self.small.at(bytes);
        match self.large {
            None => t,
            Some((l, max)) if bytes <= max => t.min(l.at(bytes)),
            Some((l, _)) => l.at(bytes),
        }
    }

    /// Sum of squared relative errors over `points`.
    fn error(&self, points: &[NetPoint]) -> f64 {
        points
            .iter()
            .map(|p| (self.at(p.bytes) / p.half_s - 1.0).powi(2))
            .sum()
    }
}

/// The line through `points` with the least squared relative error (`(L + m u) / t - 1`,
/// linear in `L` and `u = 1 / B`: the 2 x 2 normal equations), its latency at least
/// `min_latency` (where the free fit has less, the best line with `L = min_latency`:
/// `u = sum b (1 - L a) / sum b^2`, `a = 1 / t`, `b = m / t`). `None` without a positive
/// bandwidth.
fn line(points: &[NetPoint], min_latency: f64) -> Option<Line> {
    let (mut aa, mut ab, mut bb, mut sa, mut sb) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for p in points {
        let (a, b) = (1.0 / p.half_s, p.bytes as f64 / p.half_s);
        aa += a * a;
        ab += a * b;
        bb += b * b;
        sa += a;
        sb += b;
    }
    let det = aa * bb - ab * ab;
    let (mut l, mut u) = ((sa * bb - sb * ab) / det, (aa * sb - ab * sa) / det);
    if !(det.is_finite() && det > 0.0 && l >= min_latency) {
        l = min_latency;
        u = points
            .iter()
            .map(|p| p.bytes as f64 / p.half_s * (1.0 - l / p.half_s))
            .sum::<f64>()
            / bb;
    }
    (l.is_finite() && u.is_finite() && u > 0.0).then(|| Line {
        latency_s: l,
        bandwidth: 1.0 / u,
    })
}

/// Fit the curve: one line through every point, or two lines through the points up to and
/// from each split (at least two points each side; the small line's largest size the
/// last below the split), whichever has the least squared relative error over all points
/// ([`Fit::at`]). `None` when no line has a positive bandwidth or the small line no
/// positive latency.
pub(crate) fn fit(points: &[NetPoint]) -> Option<Fit> {
    let mut pts = points.to_vec();
    pts.sort_by_key(|p| p.bytes);
    if pts.len() < 2
        || pts
            .iter()
            .any(|p| !(p.half_s.is_finite() && p.half_s > 0.0))
    {
        return None;
    }
    let mut best = line(&pts, 0.0).map(|small| Fit { small, large: None });
    for k in 2..pts.len().saturating_sub(1) {
        let Some(small) = line(&pts[..k], 0.0) else {
            continue;
        };
        let Some(large) = line(&pts[k..], 0.0) else {
            continue;
        };
        let f = Fit {
            small,
            large: Some((large, pts[k - 1].bytes)),
        };
        if best.is_none_or(|b| f.error(&pts) < b.error(&pts)) {
            best = Some(f);
        }
    }
    // A message costs something: the small line's latency must be positive.
    best.filter(|f| f.small.latency_s > 0.0)
}

/// The half round trips of rank 0 with `peer`.
struct Curve {
    peer: usize,
    intra: bool,
    points: Vec<NetPoint>,
    fit: Fit,
}

/// Median of a non-empty slice (sorted in place); NaN when empty.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Round trips per timed batch for a message of `bytes` (fewer for large ones: each batch
/// some milliseconds).
fn trips(bytes: usize, quick: bool) -> usize {
    let n = ((4usize << 20) / bytes.max(1)).clamp(10, 500);
    if quick {
        (n / 10).max(3)
    } else {
        n
    }
}

/// Half the round trip between ranks `a` and `b` for each size (median of 5 batches after
/// a warm-up batch), on `a`; empty elsewhere. Every rank calls it (the others only pass
/// the barrier).
pub(crate) fn pingpong<C: Communicator + ?Sized>(
    c: &C,
    a: usize,
    b: usize,
    sizes: &[usize],
    quick: bool,
) -> Result<Vec<NetPoint>, CommError> {
    c.barrier()?;
    let me = c.rank();
    let mut out = Vec::new();
    if me == a || me == b {
        let peer = if me == a { b } else { a };
        let clock = BenchClock::new(c);
        for &bytes in sizes {
            let mut buf = vec![me as u8; bytes];
            let n = trips(bytes, quick);
            let mut batches = Vec::with_capacity(5);
            for batch in 0..6 {
                let t = clock.now();
                for _ in 0..n {
                    if me == a {
                        c.send(peer, TAG, &buf)?;
                        let r = c.irecv(peer, TAG)?;
                        c.wait_recv(r, &mut buf)?;
                    } else {
                        let r = c.irecv(peer, TAG)?;
                        c.wait_recv(r, &mut buf)?;
                        c.send(peer, TAG, &buf)?;
                    }
                }
                // Batch 0 warms up (connections, buffers, caches).
                if batch > 0 {
                    batches.push((clock.now() - t) / (2 * n) as f64);
                }
            }
            if me == a {
                out.push(NetPoint {
                    bytes,
                    half_s: median(&mut batches),
                });
            }
        }
    }
    c.barrier()?;
    Ok(out)
}

/// Seconds per call of an allreduce of `len` f64 (the solvers' persistent plan, default
/// algorithm), back to back, each rank's median of 5 batches of `calls` after a warm-up
/// batch. Every rank calls it.
pub(crate) fn allreduce_s<C: Communicator + ?Sized>(
    c: &C,
    len: usize,
    calls: usize,
) -> Result<f64, CommError> {
    let mut plan = PersistentCollective::allreduce_f64(c, len, Op::Sum, AllreduceAlgo::default());
    let mut v = vec![1.0; len];
    c.barrier()?;
    let clock = BenchClock::new(c);
    let mut batches = Vec::with_capacity(5);
    for batch in 0..6 {
        let t = clock.now();
        for _ in 0..calls {
            v.fill(1.0);
            plan.execute_f64(c, &mut v)?;
        }
        if batch > 0 {
            batches.push((clock.now() - t) / calls as f64);
        }
    }
    Ok(median(&mut batches))
}

/// What the ranks measured, on rank 0.
struct NetMeasured {
    ranks: usize,
    nodes: usize,
    curves: Vec<Curve>,
    /// (values per call, seconds per call).
    allreduce: Vec<(usize, f64)>,
}

/// `krylov calibrate`: `--backend mpi` here, as one rank of the job; the others in
/// [`calibrate::run`].
pub(crate) fn run(a: &CalibrateArgs) -> Result<ExitCode, CliError> {
    match a.backend {
        Backend::Mpi => crate::launch::mpi(|job| run_mpi(a, job)),
        _ => calibrate::run(a),
    }
}

/// `mpirun -np P krylov calibrate --backend mpi`, on this rank.
fn run_mpi(a: &CalibrateArgs, job: &Job) -> Result<ExitCode, CliError> {
    let c = job.comm();
    let (p, rank) = (c.size(), c.rank());
    let fail = |what: &str, e: CommError| -> ! {
        job.fail(CliError::failed(anyhow::anyhow!("calibrate: {what}: {e}")))
    };
    let local = if p < 2 {
        Err(bad(
            "calibrate --backend mpi measures the network between ranks: run it under `mpirun -np P` with P >= 2",
        ))
    } else if rank == 0 {
        // Rank 0 writes: a path it cannot write ends the job before the measuring.
        a.output
            .as_deref()
            .map_or(Ok(()), |p| crate::output::target(p).map(|_| ()))
    } else {
        Ok(())
    };
    if let Agreed::Stop(code) = agree(job, local) {
        return Ok(code);
    }
    // Which node each rank is on.
    let mut leaders = vec![0.0; p];
    c.allgatherv_f64(&[job.node_leader() as f64], &vec![1; p], &mut leaders)
        .unwrap_or_else(|e| fail("finding the nodes", e));
    let node_of: Vec<usize> = leaders.iter().map(|&l| l as usize).collect();
    let mut nodes = node_of.clone();
    nodes.sort_unstable();
    nodes.dedup();

    // The device model: rank 0's working sets, measured by every rank at once.
    let plan = shared_plan(c, a.quick).unwrap_or_else(|e| fail("sharing the plan", e));
    // In lock step: every rank measures each working set while the others measure it.
    let mut sync = || {
        c.barrier()
            .map_err(|e| CliError::failed(anyhow::anyhow!("calibrate: a barrier failed: {e}")))
    };
    let measured = calibrate::measure(a.quick, &plan, false, &mut sync).and_then(|mut m| {
        m.launch_us = calibrate::launch_us(&m, &a.name, a.quick)?;
        Ok(m)
    });
    let mut m = match agree(job, measured) {
        Agreed::Go(m) => m,
        Agreed::Stop(code) => return Ok(code),
    };
    // The slowest rank's figures: the least rate, the greatest cost (negated, the least).
    let mut slowest = m.figures();
    let costs = Measured::COSTS;
    let n = slowest.len();
    for v in &mut slowest[n - costs..] {
        *v = -*v;
    }
    c.allreduce_f64_with(&mut slowest, Op::Min, AllreduceAlgo::default())
        .unwrap_or_else(|e| fail("combining the ranks' device models", e));
    for v in &mut slowest[n - costs..] {
        *v = -*v;
    }
    m.set_figures(&slowest);

    // The network.
    let sizes = message_sizes(a.quick);
    let intra = (1..p).find(|&r| node_of[r] == node_of[0]);
    let inter = (1..p).find(|&r| node_of[r] != node_of[0]);
    let mut curves = Vec::new();
    for (peer, is_intra) in [(intra, true), (inter, false)] {
        let Some(peer) = peer else { continue };
        let points = pingpong(c, 0, peer, &sizes, a.quick)
            .unwrap_or_else(|e| fail("measuring the ping-pong", e));
        curves.push((peer, is_intra, points));
    }
    let calls = if a.quick { 200 } else { 5000 };
    let mut allreduce = Vec::new();
    for len in ALLREDUCE_LENS {
        let s = allreduce_s(c, len, calls).unwrap_or_else(|e| fail("measuring the allreduce", e));
        allreduce.push((len, s));
    }
    if rank != 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let curves = curves
        .into_iter()
        .map(|(peer, intra, points)| {
            let fit = fit(&points).ok_or_else(|| {
                CliError::failed(anyhow::anyhow!(
                    "calibrate: the ping-pong with rank {peer} does not grow with message size: {points:?}"
                ))
            })?;
            Ok(Curve {
                peer,
                intra,
                points,
                fit,
            })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let net = NetMeasured {
        ranks: p,
        nodes: nodes.len(),
        curves,
        allreduce,
    };
    let text = write_up(&m, &net, a)?;
    calibrate::write_preset(&text, a.output.as_deref())?;
    calibrate::summary(&m, a.output.as_deref());
    for cv in &net.curves {
        let l = |x: &Line| {
            format!(
                "{:.3} us + m / {:.3} GB/s",
                x.latency_s * 1e6,
                x.bandwidth / 1e9
            )
        };
        eprintln!(
            "  rank 0 - rank {} ({}): {}{}",
            cv.peer,
            if cv.intra { "same node" } else { "other node" },
            l(&cv.fit.small),
            cv.fit.large.map_or(String::new(), |(x, max)| format!(
                " to {max} B, above: {}",
                l(&x)
            ))
        );
    }
    for (len, s) in &net.allreduce {
        eprintln!("  allreduce of {} B: {:.3} us per call", 8 * len, s * 1e6);
    }
    Ok(ExitCode::SUCCESS)
}

/// Rank 0's working sets, on every rank.
fn shared_plan(c: &dyn Communicator, quick: bool) -> Result<Plan, CommError> {
    let mine = calibrate::plan(quick);
    let mut n = [mine.sizes.len() as f64];
    c.bcast_f64_with(0, &mut n, BcastAlgo::default())?;
    let mut v: Vec<f64> = mine.sizes.iter().map(|&s| s as f64).collect();
    v.push(mine.memory as f64);
    v.resize(n[0] as usize + 1, 0.0);
    c.bcast_f64_with(0, &mut v, BcastAlgo::default())?;
    let memory = v.pop().unwrap_or(0.0) as u64;
    Ok(Plan {
        sizes: v.into_iter().map(|s| s as u64).collect(),
        memory,
    })
}

/// The network sections of the preset for the fitted curve `f` of rank 0 with `peer` on a
/// crossbar of `ranks` nodes, each value commented with `trace`.
fn network_toml(f: &Fit, peer: usize, ranks: usize, trace: &str) -> String {
    let mut body = String::new();
    let mut line = |l: String| {
        body.push_str(&l);
        body.push('\n');
    };
    let gbs = |l: &Line| l.bandwidth / 1e9;
    let top = f
        .large
        .map_or(gbs(&f.small), |(l, _)| gbs(&l).max(gbs(&f.small)));
    line("# No switch modeled between ranks: its cost is inside the measured latencies.".into());
    line("forward_us = 0.0".into());
    line(String::new());
    line(
        "# The port and memory writes never limit a message below the fitted lines (documented"
            .into(),
    );
    line(format!(
        "# choice: the larger fitted bandwidth of rank 0 - rank {peer}, {trace}), so the lines alone"
    ));
    line("# price a message.".into());
    line("[[ports]]".into());
    line("name = \"mpi\"".into());
    line(format!("bandwidth_gbs = {top:.4}"));
    line("latency_us = 0.0".into());
    line(String::new());
    line(format!(
        "# The simulator places one rank per node: one node per MPI rank ({ranks}), every pair direct."
    ));
    line("[topology]".into());
    line("kind = \"crossbar\"".into());
    line(format!("nodes = {}", ranks.max(2)));
    line("port = \"mpi\"".into());
    line(String::new());
    if let Some((_, max)) = f.large {
        line("# The small-message line of the fit (the MPI library's eager protocol) as PIO: start_us its".into());
        line(format!(
            "# latency, bandwidth_gbs its bandwidth, max_bytes the largest size fitted on it; {trace}."
        ));
        line(
            "# Up to max_bytes the simulator takes PIO or DMA, whichever is cheaper; above, DMA."
                .into(),
        );
        line("[pio]".into());
        line(format!("start_us = {:.4}", f.small.latency_s * 1e6));
        line(format!("bandwidth_gbs = {:.4}", gbs(&f.small)));
        line(format!("max_bytes = {max}"));
        line(String::new());
    }
    let dma = f.large.map_or(f.small, |(l, _)| l);
    line(format!(
        "# read_gbs: the bandwidth of the {} line of the fit, {trace}; write_gbs: as the port.",
        if f.large.is_some() {
            "large-message"
        } else {
            "one"
        }
    ));
    line("[memory.host]".into());
    line(format!("read_gbs = {:.4}", gbs(&dma)));
    line(format!("write_gbs = {top:.4}"));
    line(String::new());
    line(format!(
        "# start_us: the latency of the {} line of the fit, {trace}.",
        if f.large.is_some() {
            "large-message"
        } else {
            "one"
        }
    ));
    line("[dma]".into());
    line("devices = 1".into());
    line("channels = 1".into());
    line("chaining = false".into());
    line("queue_per_peer = true".into());
    line(format!("start_us = {:.4}", dma.latency_s * 1e6));
    line("descriptor_us = 0.0".into());
    line("descriptor_fetch_us = 0.0".into());
    line(String::new());
    line(
        "# The curve is of two-sided messages (MPI_Isend, MPI_Mprobe/MPI_Mrecv): their handshakes"
            .into(),
    );
    line("# are inside it, so no separate address notification.".into());
    line("[two_sided]".into());
    line("notify = false".into());
    line(String::new());
    body
}

/// The preset text: the network fitted, the allreduce's software cost from the measured
/// calls against the modeled ones, each with its trace.
fn write_up(m: &Measured, net: &NetMeasured, a: &CalibrateArgs) -> Result<String, CliError> {
    let when = calibrate::utc_now();
    let host = calibrate::hostname();
    let command = format!(
        "mpirun -np {} {}",
        net.ranks,
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    // The pair the model prices: inter-node where the job spans nodes.
    let used = net
        .curves
        .iter()
        .find(|c| !c.intra)
        .or_else(|| net.curves.first())
        .ok_or_else(|| CliError::failed(anyhow::anyhow!("calibrate: no pair measured")))?;
    let trace = format!("measured here {when} by `{command}`");
    let header = vec![
        format!("# Network: {trace}, on host {host} (rank 0)."),
        format!(
            "# {} MPI ranks on {} node(s) (MPI_Comm_split_type SHARED); the device model below is the",
            net.ranks, net.nodes
        ),
        "# slowest rank's, figure by figure, all ranks measuring at the same time, each on the core"
            .to_string(),
        "# mpirun gave it (a solve's iteration waits for its slowest rank).".to_string(),
    ];
    let draft = |body: String| Network {
        header: header.clone(),
        description: format!(
            "{} MPI ranks on {} node(s) of host {host}, measured by krylov calibrate --backend mpi",
            net.ranks, net.nodes
        ),
        body,
    };
    let network = network_toml(&used.fit, used.peer, net.ranks, &trace);
    // What the preset so far (no [software]) models: the ping-pong and the allreduce.
    let draft_text =
        calibrate::checked(calibrate::preset(m, &a.name, Some(&draft(network.clone()))))?;
    let sizes: Vec<usize> = used.points.iter().map(|p| p.bytes).collect();
    let modeled_ping: Vec<(usize, f64)> = modeled(&draft_text, 2, |c| {
        pingpong(c, 0, 1, &sizes, true)
            .map(|v| v.into_iter().map(|p| (p.bytes, p.half_s)).collect())
    })?;
    let modeled_ar: Vec<(usize, f64)> = modeled(&draft_text, net.ranks, |c| {
        ALLREDUCE_LENS
            .iter()
            .map(|&len| allreduce_s(c, len, 10).map(|s| (len, s)))
            .collect()
    })?;

    let mut body = String::new();
    let mut line = |l: String| {
        body.push_str(&l);
        body.push('\n');
    };
    for cv in &net.curves {
        let is_used = std::ptr::eq(cv, used);
        line(format!(
            "# Ping-pong rank 0 - rank {} ({}): half round trip of our MPI communicator (median of 5",
            cv.peer,
            if cv.intra { "same node, shared memory" } else { "another node" }
        ));
        line(format!("# batches), {trace}."));
        let l = |x: &Line| {
            format!(
                "{:.4} us + m / {:.4} GB/s",
                x.latency_s * 1e6,
                x.bandwidth / 1e9
            )
        };
        match cv.fit.large {
            Some((large, max)) => line(format!(
                "# Fit (least squared relative error): {} up to {max} B (or the other line where cheaper), {} above",
                l(&cv.fit.small),
                l(&large)
            )),
            None => line(format!("# Fit (least squared relative error): {}", l(&cv.fit.small))),
        }
        line(if is_used {
            "# (the model's; \"modeled\": this preset's simulated ping-pong):".to_string()
        } else {
            "# (in comments only: the simulator has one link class):".to_string()
        });
        for pt in &cv.points {
            let fitted = cv.fit.at(pt.bytes);
            let sim = modeled_ping
                .iter()
                .find(|(b, _)| *b == pt.bytes)
                .filter(|_| is_used)
                .map_or(String::new(), |(_, s)| {
                    format!("  modeled {:>10.3} us", s * 1e6)
                });
            line(format!(
                "#   {:>9} B  measured {:>10.3} us  fit {:>10.3} us ({:+6.1}%){sim}",
                pt.bytes,
                pt.half_s * 1e6,
                fitted * 1e6,
                100.0 * (fitted / pt.half_s - 1.0)
            ));
        }
    }
    line(String::new());
    let mut excess: Vec<f64> = net
        .allreduce
        .iter()
        .zip(&modeled_ar)
        .map(|((_, s), (_, ms))| s - ms)
        .collect();
    let call_s = median(&mut excess);
    let mut tail = String::new();
    let mut line = |l: String| {
        tail.push_str(&l);
        tail.push('\n');
    };
    line("# Allreduce per call (our default bit-identical algorithm, persistent plan, as the solvers".into());
    line(format!(
        "# call it; rank 0's median of 5 batches), {trace}; modeled: this preset without [software]:"
    ));
    for ((len, s), (_, ms)) in net.allreduce.iter().zip(&modeled_ar) {
        line(format!(
            "#   {:>4} B  measured {:>8.3} us  modeled {:>8.3} us  excess {:>+8.3} us",
            8 * len,
            s * 1e6,
            ms * 1e6,
            (s - ms) * 1e6
        ));
    }
    if call_s > 0.0 {
        line(
            "# call_us: the median excess above, a per-call cost (the library's and our schedule's"
                .into(),
        );
        line("# bookkeeping) that the messages alone do not model; step_us 0: one rank count measured".into());
        line("# cannot tell per-call from per-step costs (documented choice).".into());
        line("[software]".into());
        line(format!("call_us = {:.4}", call_s * 1e6));
        line("step_us = 0.0".into());
    } else {
        line("# The modeled calls take at least the measured time: no [software] cost.".into());
    }
    line(String::new());
    let text = calibrate::checked(calibrate::preset(
        m,
        &a.name,
        Some(&draft(format!("{body}{network}{tail}"))),
    ))?;
    Ok(text)
}

/// What rank 0 gets from `f` run on `ranks` simulated ranks of the preset `text`.
fn modeled<R: Send>(
    text: &str,
    ranks: usize,
    f: impl Fn(&dyn Communicator) -> Result<R, CommError> + Sync,
) -> Result<R, CliError> {
    let fail = |e: String| CliError::failed(anyhow::anyhow!("calibrate: modeling the preset: {e}"));
    let cfg = FabricConfig::from_toml_str(text).map_err(|e| fail(e.to_string()))?;
    let fabric = Fabric::new(cfg).map_err(|e| fail(e.to_string()))?;
    let sim =
        SimUniverse::new(ranks, fabric, SimOptions::default()).map_err(|e| fail(e.to_string()))?;
    sim.run(|c| f(c))
        .map_err(|e| fail(e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| fail("no rank".into()))?
        .map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use castack_collectives::ThreadUniverse;

    fn curve(f: impl Fn(f64) -> f64) -> Vec<NetPoint> {
        message_sizes(false)
            .into_iter()
            .map(|bytes| NetPoint {
                bytes,
                half_s: f(bytes as f64),
            })
            .collect()
    }

    #[test]
    fn the_fit_recovers_one_line_or_two_and_refuses_a_flat_curve() {
        let pts = curve(|m| 0.5e-6 + m / 4e9);
        let f = fit(&pts).unwrap();
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-6;
        assert!(close(f.small.latency_s, 0.5e-6) && close(f.small.bandwidth, 4e9));
        assert!(f.large.is_none_or(|(l, _)| close(l.bandwidth, 4e9)));
        // Eager to 2 KiB, then a protocol with a higher start and a lower rate.
        let pts = curve(|m| {
            if m <= 2048.0 {
                0.2e-6 + m / 8e9
            } else {
                5e-6 + m / 2e9
            }
        });
        let f = fit(&pts).unwrap();
        let (large, max) = f.large.unwrap();
        assert_eq!(max, 2048);
        assert!(close(f.small.latency_s, 0.2e-6) && close(f.small.bandwidth, 8e9));
        assert!(close(large.latency_s, 5e-6) && close(large.bandwidth, 2e9));
        for p in &pts {
            assert!(close(f.at(p.bytes), p.half_s), "{p:?}");
        }
        let flat = curve(|_| 1e-6);
        assert_eq!(fit(&flat), None);
        assert_eq!(fit(&[]), None);
    }

    #[test]
    fn the_preset_of_a_fit_prices_messages_as_fitted() {
        let pts = curve(|m| {
            if m <= 4096.0 {
                0.3e-6 + m / 6e9
            } else {
                4e-6 + m / 3e9
            }
        });
        let f = fit(&pts).unwrap();
        assert_eq!(f.large.map(|(_, max)| max), Some(4096));
        let net = Network {
            header: vec!["# test".into()],
            description: "test".into(),
            body: network_toml(&f, 1, 3, "made up"),
        };
        let text =
            calibrate::checked(calibrate::preset(&calibrate::made_up(), "t", Some(&net))).unwrap();
        let sizes: Vec<usize> = pts.iter().map(|p| p.bytes).collect();
        let sim: Vec<NetPoint> = modeled(&text, 3, |c| pingpong(c, 0, 1, &sizes, true)).unwrap();
        assert_eq!(sim.len(), pts.len());
        for (s, p) in sim.iter().zip(&pts) {
            assert!((s.half_s / p.half_s - 1.0).abs() < 1e-3, "{s:?} vs {p:?}");
        }
        // Three ranks: a crossbar of three nodes.
        assert!(text.contains("nodes = 3"));
    }

    #[test]
    fn pingpong_and_allreduce_run_on_thread_ranks() {
        let u = ThreadUniverse::new(3).unwrap();
        let out = u
            .run(|c| {
                let pts = pingpong(c, 0, 2, &[8, 4096], true)?;
                let ar = allreduce_s(c, 4, 20)?;
                Ok::<_, CommError>((pts, ar))
            })
            .unwrap();
        for (rank, r) in out.into_iter().enumerate() {
            let (pts, ar) = r.unwrap();
            assert_eq!(pts.len(), if rank == 0 { 2 } else { 0 });
            assert!(pts.iter().all(|p| p.half_s > 0.0 && p.half_s.is_finite()));
            assert!(ar > 0.0 && ar.is_finite());
        }
    }
}
