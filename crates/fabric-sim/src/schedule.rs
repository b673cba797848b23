//! Pricing a whole communication schedule without data and without threads.
//!
//! [`PriceSchedule`] is the data-free shape of a collective's schedule (the same semantics as
//! `castack-collectives`' `Schedule`, which this crate does not know): per rank an ordered
//! list of [`PriceStep`]s; a step is the puts a rank issues together plus the arrivals it
//! waits for.
//!
//! # Semantics
//!
//! - A rank enters its first step at its start time (or when it is placed, whichever is
//!   later) and issues all the step's puts at that instant.
//! - Puts have put-with-completion-notification semantics: a put is complete when its data
//!   has landed at the destination, which is notified at that moment. The issuing rank
//!   learns of it at the same moment (as the threads backend, whose puts are synchronous
//!   copies, and as a TCA sender that polls its DMA completion before reusing the buffer).
//! - A rank leaves step s, and enters step s+1, when all its puts of step s are complete AND
//!   all the arrivals step s waits for have landed. Its finish time is when it leaves its
//!   last step (its start time if it has none).
//! - The k-th put from rank a to rank b satisfies the k-th arrival from a that b lists (in
//!   step order), as in `Schedule::validate`. An arrival may land before its rank reaches
//!   the step that waits for it.
//! - Mechanism: every put uses the `mechanism` given to [`Fabric::price_schedule`]
//!   (`Auto`: PIO where it is faster, else DMA; `Dma { .. }`: DMA, the device and channel
//!   assigned as follows). DMA puts of a step are spread round-robin
//!   over the node's devices; on a fabric with `dma.chaining` the puts a step gives one
//!   device are ONE chain on channel 0 (one chained-DMA start), else each is its own command,
//!   on channels round-robin.
//! - Landing memory: a put lands in the destination's `placement.memory`, unless the step of
//!   the destination that waits for it names another memory ([`PriceStep::arrival_memory`],
//!   e.g. a gather into host staging buffers while the ranks' buffers live on the GPU).
//! - Local work: once a rank's puts of step s are complete and its arrivals have landed, it
//!   does the step's [`PriceStep::local`] work, one item after the other, on its own node
//!   (no contention with transfers), and only then enters step s+1. A compute item costs
//!   [`Fabric::compute_time`] on the device owning its memory; a copy between two memories
//!   of the node costs [`Fabric::estimate`] of a DMA transfer between them alone (the
//!   node's communication device copying over PCIe, as TCA copies host to GPU memory
//!   locally). Steps without local work are priced exactly as before (`tests/it/reference.rs`).
//! - Software cost and noise ([`crate::software`], only where the config sets `[software]`
//!   or `[noise]`): a rank spends `software.call_us` of CPU on entering its first step and
//!   `software.step_us` on entering every step, before the step's puts are issued; that CPU
//!   work and the step's local work are stretched by its node's noise detours.
//!
//! # Calls in flight together
//!
//! [`Fabric::price_concurrent`] prices several schedules over the same ranks in one engine
//! run: rank r of every call is its own chain of steps on `placement.nodes[r]` (the
//! semantics above, per call), and all their transfers share the fabric's injection caps,
//! DMA queues, ports and links. The DMA puts of call k start their round-robin at device
//! `k mod devices` (call 0, and a call priced alone, at device 0), as a runtime spreading
//! concurrent operations over a node's engines. [`Fabric::price_schedule`] is the run of
//! one call. Cost: that of one schedule holding every call's puts (the engine is
//! O(events x flows sharing a resource)); building the run is linear in steps and puts.

use crate::compute::ComputeCost;
use crate::engine::Engine;
use crate::error::FabricError;
use crate::fabric::{Endpoint, Fabric, Mechanism, MemoryKind, SimTime, Transfer};
use crate::software::Noise;

/// One put of a step: `bytes` to rank `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PricePut {
    /// Destination rank.
    pub to: usize,
    /// Payload size.
    pub bytes: u64,
}

/// The puts a rank issues together and the ranks whose puts it then waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceStep {
    /// Puts issued together.
    pub puts: Vec<PricePut>,
    /// One entry per expected arrival: its source rank.
    pub waits_for: Vec<usize>,
    /// Where this step's arrivals land; `None`: the placement's memory.
    pub arrival_memory: Option<MemoryKind>,
    /// Local work done after the step's puts and arrivals, before the next step.
    pub local: Vec<LocalWork>,
}

/// Local work of a rank between two steps (see the module docs for how it is priced).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LocalWork {
    /// Kernels or a CPU loop on the device that owns `memory` ([`Fabric::compute_time`]).
    Compute {
        /// The memory the work runs on (host: the CPU; GPU: the GPU).
        memory: MemoryKind,
        /// Bytes, flops and launches.
        cost: ComputeCost,
    },
    /// A copy of `bytes` between two memories of the rank's node.
    Copy {
        /// Source memory.
        from: MemoryKind,
        /// Destination memory.
        to: MemoryKind,
        /// Bytes copied.
        bytes: u64,
    },
}

impl Eq for LocalWork {}

impl Fabric {
    /// Time of one item of local work on `node`, alone (seconds).
    ///
    /// # Errors
    /// [`FabricError::NoComputeModel`] for compute on a memory kind the config has no device
    /// model for; [`FabricError::Transfer`] for a copy the fabric cannot make (a memory the
    /// node does not have, a node out of range).
    pub fn local_time(&self, node: usize, work: &LocalWork) -> Result<SimTime, FabricError> {
        match *work {
            LocalWork::Compute { memory, cost } => self.compute_time(memory, cost),
            LocalWork::Copy { bytes: 0, .. } => Ok(0.0),
            LocalWork::Copy { from, to, bytes } => self.estimate(&Transfer::new(
                Endpoint { node, memory: from },
                Endpoint { node, memory: to },
                bytes,
                Mechanism::Dma {
                    device: 0,
                    channel: 0,
                },
            )),
        }
    }
}

/// A data-free schedule: per rank, ordered steps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceSchedule {
    /// Steps of each rank, indexed by rank.
    pub ranks: Vec<Vec<PriceStep>>,
}

impl PriceSchedule {
    /// Total number of puts (transfers priced).
    pub fn transfers(&self) -> usize {
        self.ranks
            .iter()
            .flat_map(|steps| steps.iter().map(|s| s.puts.len()))
            .sum()
    }
}

/// Where ranks live: rank r on node `nodes[r]`, its buffers in `memory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Node of each rank.
    pub nodes: Vec<usize>,
    /// Memory kind of every rank's buffers.
    pub memory: MemoryKind,
}

impl Placement {
    /// Rank r on node r, buffers in `memory`.
    pub fn one_per_node(ranks: usize, memory: MemoryKind) -> Self {
        Self {
            nodes: (0..ranks).collect(),
            memory,
        }
    }
}

/// A schedule flattened for pricing: steps and puts in arrays indexed by a global step index
/// (rank by rank, step by step) and by put id (rank, step, put order), so that pricing reads
/// compact arrays instead of following the schedule's nested vectors.
struct Run<'f> {
    /// Per (virtual) rank: its node, and when it starts.
    nodes: Vec<usize>,
    memory: MemoryKind,
    start: Vec<SimTime>,
    /// Per (virtual) rank: the device its steps' DMA round-robin starts at (its call's
    /// index in the run, modulo the node's devices).
    first_device: Vec<u32>,
    mechanism: Mechanism,
    engine: Engine<'f>,
    /// Per rank: the global index of its first step (ranks + 1 entries).
    rank_step: Vec<u32>,
    /// Per global step: the id of its first put (steps + 1 entries).
    put_base: Vec<u32>,
    /// Per put id: destination rank and payload.
    put_to: Vec<u32>,
    put_bytes: Vec<u64>,
    /// Per put id: the global step of its destination that it satisfies.
    target: Vec<u32>,
    /// Per global step: arrivals not yet landed.
    need: Vec<u32>,
    /// Per global step: its local work's time, and where its arrivals land.
    delay: Vec<SimTime>,
    land: Vec<MemoryKind>,
    /// Per rank: its current step, when it entered it, and its puts of that step not yet
    /// complete.
    cur: Vec<u32>,
    entered: Vec<SimTime>,
    out: Vec<u32>,
    /// Per flow id: (source rank, put id).
    flow_put: Vec<(u32, u32)>,
    finish: Vec<SimTime>,
    chain: u64,
    /// The library's CPU cost of entering a call and a step (seconds; 0 without
    /// `[software]`), and the noise that stretches CPU work (`None` without `[noise]`).
    call_cost: SimTime,
    step_cost: SimTime,
    noise: Option<Noise>,
}

impl Run<'_> {
    fn steps(&self, r: usize) -> usize {
        (self.rank_step[r + 1] - self.rank_step[r]) as usize
    }

    /// When `work` seconds of rank r's CPU, ready at `t`, are done: `t + work`, stretched
    /// by the noise of r's node.
    fn cpu(&self, r: usize, t: SimTime, work: SimTime) -> SimTime {
        match &self.noise {
            None => t + work,
            Some(n) => n.finish(self.nodes[r], t, work),
        }
    }

    fn enter(&mut self, r: usize, mut s: usize, t: SimTime) -> Result<(), FabricError> {
        let mut t = t.max(self.start[r]);
        let steps = self.steps(r);
        let g0 = self.rank_step[r] as usize;
        let dma = &self.engine.fabric().config().dma;
        let (devices, channels, chaining) = (dma.devices, dma.channels, dma.chaining);
        let src = Endpoint {
            node: self.nodes[r],
            memory: self.memory,
        };
        while s < steps {
            let g = g0 + s;
            let software = if s == 0 { self.call_cost } else { 0.0 } + self.step_cost;
            if software > 0.0 || self.noise.is_some() {
                t = self.cpu(r, t, software);
            }
            let (p0, p1) = (self.put_base[g], self.put_base[g + 1]);
            let puts = p1 - p0;
            let chain0 = self.chain;
            self.chain += devices as u64 + puts as u64;
            let mut dma_index = 0u32;
            for pid in p0..p1 {
                let k = pid - p0;
                let dst = Endpoint {
                    node: self.nodes[self.put_to[pid as usize] as usize],
                    memory: self.land[self.target[pid as usize] as usize],
                };
                let mut tr = Transfer {
                    src,
                    dst,
                    bytes: self.put_bytes[pid as usize],
                    mechanism: self.mechanism,
                    release: t,
                };
                let index = pid as usize;
                let mech = self
                    .engine
                    .fabric()
                    .resolve_mechanism(&tr)
                    .map_err(|e| at(e, index))?;
                let tag = match mech {
                    Mechanism::Pio => {
                        tr.mechanism = Mechanism::Pio;
                        chain0
                    }
                    _ => {
                        let device = (dma_index + self.first_device[r]) % devices;
                        let j = dma_index / devices;
                        dma_index += 1;
                        if chaining {
                            tr.mechanism = Mechanism::Dma { device, channel: 0 };
                            chain0 + device as u64
                        } else {
                            tr.mechanism = Mechanism::Dma {
                                device,
                                channel: j % channels,
                            };
                            chain0 + devices as u64 + k as u64
                        }
                    }
                };
                // Checked above (the concrete device and channel are in range by
                // construction), so the engine need not check it again.
                let id = self.engine.post_checked(&tr, tr.mechanism, index, tag)?;
                debug_assert_eq!(id as usize, self.flow_put.len());
                self.flow_put.push((r as u32, pid));
            }
            self.out[r] = puts;
            if self.out[r] > 0 || self.need[g] > 0 {
                self.cur[r] = s as u32;
                self.entered[r] = t;
                return Ok(());
            }
            t = self.cpu(r, t, self.delay[g]);
            s += 1;
        }
        self.cur[r] = s as u32;
        self.finish[r] = t;
        Ok(())
    }

    fn try_advance(&mut self, r: usize, t: SimTime) -> Result<(), FabricError> {
        let s = self.cur[r] as usize;
        let g = self.rank_step[r] as usize + s;
        if s < self.steps(r) && self.out[r] == 0 && self.need[g] == 0 {
            // Early arrivals do not let the rank leave before it entered the step.
            let t = self.cpu(r, t.max(self.entered[r]), self.delay[g]);
            self.enter(r, s + 1, t)?;
        }
        Ok(())
    }
}

fn at(e: FabricError, put: usize) -> FabricError {
    match e {
        FabricError::Transfer { reason, .. } => FabricError::Transfer { index: put, reason },
        other => other,
    }
}

/// The calls of a joint run flattened into one: call `i`'s rank `r` is virtual rank
/// `i * p + r` (p ranks per call), on node `placement.nodes[r]`.
struct Flat {
    rank_step: Vec<u32>,
    need: Vec<u32>,
    delay: Vec<SimTime>,
    land: Vec<MemoryKind>,
    put_base: Vec<u32>,
    put_to: Vec<u32>,
    put_bytes: Vec<u64>,
    target: Vec<u32>,
}

impl Fabric {
    /// Flatten call `call` (ranks `base..base + p`) onto `flat`, matching its puts to its
    /// arrivals. Errors name ranks and steps of the call; `prefix` names the call when the run
    /// has several.
    fn flatten(
        &self,
        flat: &mut Flat,
        sched: &PriceSchedule,
        placement: &Placement,
        base: usize,
        prefix: &str,
    ) -> Result<(), FabricError> {
        let p = sched.ranks.len();
        let bad = |m: String| Err(FabricError::Schedule(format!("{prefix}{m}")));
        // Match puts to arrivals per ordered pair, in order: per destination rank its
        // arrivals sorted by (source, step), each source's run with a cursor at its start.
        // The schedule (its steps scattered in memory) is read in one pass, which records
        // every step's waits, local work and puts; the puts are matched in a second pass
        // over the flat arrays.
        let mut arrivals: Vec<(u32, u32)> = Vec::new();
        let mut arr_base = Vec::with_capacity(p + 1);
        let put0 = flat.put_to.len();
        // The first put to a rank out of range, by put id: reported when the matching
        // reaches it, so errors come in the same order as checking put by put.
        let mut bad_to: Option<(usize, usize)> = None;
        for (r, steps) in sched.ranks.iter().enumerate() {
            flat.rank_step.push(flat.need.len() as u32);
            arr_base.push(arrivals.len() as u32);
            let first = arrivals.len();
            for (s, step) in steps.iter().enumerate() {
                let g = flat.need.len() as u32;
                flat.need.push(step.waits_for.len() as u32);
                flat.land
                    .push(step.arrival_memory.unwrap_or(placement.memory));
                let mut d = 0.0;
                for w in &step.local {
                    d += self
                        .local_time(placement.nodes[r], w)
                        .map_err(|e| match e {
                            FabricError::Transfer { reason, .. } => FabricError::Schedule(format!(
                                "{prefix}rank {r} step {s}: local copy: {reason}"
                            )),
                            other => other,
                        })?;
                }
                flat.delay.push(d);
                for &from in &step.waits_for {
                    if from >= p {
                        return bad(format!("rank {r} step {s} waits for rank {from} of {p}"));
                    }
                    arrivals.push((from as u32, g));
                }
                flat.put_base.push(flat.put_to.len() as u32);
                for put in &step.puts {
                    if put.to >= p && bad_to.is_none() {
                        bad_to = Some((flat.put_to.len(), put.to));
                    }
                    flat.put_to.push(put.to.min(p) as u32);
                    flat.put_bytes.push(put.bytes);
                }
            }
            arrivals[first..].sort_unstable();
        }
        arr_base.push(arrivals.len() as u32);
        let mut cursor = vec![0u32; arrivals.len()];
        flat.target.reserve(flat.put_to.len() - put0);
        for r in 0..p {
            let (s0, s1) = (
                flat.rank_step[base + r] as usize,
                if r + 1 < p {
                    flat.rank_step[base + r + 1] as usize
                } else {
                    flat.need.len()
                },
            );
            for g in s0..s1 {
                let s = g - s0;
                let (q0, q1) = (
                    flat.put_base[g] as usize,
                    flat.put_base
                        .get(g + 1)
                        .map_or(flat.put_to.len(), |&q| q as usize),
                );
                for pid in q0..q1 {
                    let to = flat.put_to[pid] as usize;
                    if let Some((_, bad_rank)) = bad_to.filter(|&(b, _)| b == pid) {
                        return bad(format!("rank {r} step {s} puts to rank {bad_rank} of {p}"));
                    }
                    let (lo, hi) = (arr_base[to] as usize, arr_base[to + 1] as usize);
                    let run = &arrivals[lo..hi];
                    let first = lo + run.partition_point(|&(from, _)| from < r as u32);
                    let k = match cursor.get(first) {
                        Some(&c) if first < hi => first + c as usize,
                        _ => hi,
                    };
                    match arrivals[..hi].get(k) {
                        Some(&(from, g)) if from == r as u32 => {
                            cursor[first] += 1;
                            flat.target.push(g);
                            flat.put_to[pid] = (base + to) as u32;
                        }
                        _ => {
                            return bad(format!(
                                "rank {r} step {s} puts to rank {to} which waits for no more arrivals from {r}"
                            ))
                        }
                    }
                }
            }
        }
        // The first arrival no put provides, by (rank, step, source).
        let mut unmatched: Option<(usize, u32, u32)> = None;
        for to in 0..p {
            let (lo, hi) = (arr_base[to] as usize, arr_base[to + 1] as usize);
            let mut i = lo;
            while i < hi {
                let from = arrivals[i].0;
                let end = i + arrivals[i..hi].partition_point(|&(f, _)| f == from);
                let k = i + cursor[i] as usize;
                if k < end {
                    let s = arrivals[k].1 - flat.rank_step[base + to];
                    let cand = (to, s, from);
                    if unmatched.is_none_or(|u| cand < u) {
                        unmatched = Some(cand);
                    }
                }
                i = end;
            }
        }
        if let Some((to, s, from)) = unmatched {
            return bad(format!(
                "rank {to} step {s} waits for an arrival from rank {from} that no put provides"
            ));
        }
        Ok(())
    }

    /// Price a schedule: the finish time of every rank (see the module docs for the
    /// semantics). `start[r]` is when rank r enters the schedule. Errors in transfers name the
    /// put by its index in rank-major, step-major, put order.
    ///
    /// This is [`Fabric::price_concurrent`] of the one schedule (the same engine run).
    pub fn price_schedule(
        &self,
        sched: &PriceSchedule,
        placement: &Placement,
        start: &[SimTime],
        mechanism: Mechanism,
    ) -> Result<Vec<SimTime>, FabricError> {
        let mut done = self.price_concurrent(&[(sched, start)], placement, mechanism)?;
        Ok(done.pop().unwrap_or_default())
    }

    /// Price several calls in flight at the same time over the same ranks, in ONE engine
    /// run: the finish time of every rank of every call (`result[i][r]`).
    ///
    /// `calls[i] = (schedule, start)`: every schedule has `placement.nodes.len()` ranks and
    /// rank r of every call runs on `placement.nodes[r]`. Each call's rank is its own chain
    /// of steps with the semantics of the module docs, as if alone: a call's puts satisfy
    /// only its own arrivals, and a rank's step in one call never waits for another call.
    /// What the calls share is the fabric: their transfers contend for the same injection
    /// caps, DMA devices and channels, ports and links (max-min fair sharing, as the
    /// transfers of one call do). So a call in flight slows the calls that overlap it in
    /// time, and is slowed by them.
    ///
    /// With one call this is exactly [`Fabric::price_schedule`] (bit for bit: the same run).
    /// With several, ties in time are broken by call order, then rank (each call's ranks
    /// enter in start order). Cost: one engine run over the calls' transfers together, i.e.
    /// the cost of pricing one schedule with all their puts.
    ///
    /// # Errors
    /// As [`Fabric::price_schedule`], for each call; with more than one call, a schedule
    /// error starts with `call i: ` and ranks and steps are the call's own, while a transfer
    /// error's index counts the puts of all calls in call order.
    pub fn price_concurrent(
        &self,
        calls: &[(&PriceSchedule, &[SimTime])],
        placement: &Placement,
        mechanism: Mechanism,
    ) -> Result<Vec<Vec<SimTime>>, FabricError> {
        self.price_concurrent_within(calls, placement, mechanism, u64::MAX)
    }

    /// [`Fabric::price_concurrent`] that gives up once the engine has done more than
    /// `max_updates` flow rate updates ([`crate::Engine::rate_updates`]): a bound on the
    /// run's work that, unlike a wall-clock timeout, stops every run of the same calls at
    /// the same point. The exact fluid model re-rates, at every distinct instant, the flows
    /// of a connected component that the instant's starts and ends can change, so calls
    /// with many transfers in flight together at one common rate, whose starts and ends do
    /// not coincide (DMA queues starting a message at each end), cost about the product of
    /// the two; this lets a caller refuse them instead of waiting.
    ///
    /// # Errors
    /// As [`Fabric::price_concurrent`], and [`FabricError::WorkLimit`] when the limit is
    /// passed.
    pub fn price_concurrent_within(
        &self,
        calls: &[(&PriceSchedule, &[SimTime])],
        placement: &Placement,
        mechanism: Mechanism,
        max_updates: u64,
    ) -> Result<Vec<Vec<SimTime>>, FabricError> {
        let p = placement.nodes.len();
        let k = calls.len();
        let prefix = |i: usize| {
            if k > 1 {
                format!("call {i}: ")
            } else {
                String::new()
            }
        };
        let bad = |i: usize, m: String| Err(FabricError::Schedule(format!("{}{m}", prefix(i))));
        for (i, (sched, start)) in calls.iter().enumerate() {
            if sched.ranks.len() != p {
                return bad(
                    i,
                    format!("placement has {p} ranks, schedule {}", sched.ranks.len()),
                );
            }
            if start.len() != p {
                return bad(i, format!("{} start times for {p} ranks", start.len()));
            }
        }
        if let Some(r) = (0..p).find(|&r| placement.nodes[r] >= self.nodes()) {
            return bad(
                0,
                format!(
                    "rank {r} placed on node {} of {}",
                    placement.nodes[r],
                    self.nodes()
                ),
            );
        }
        for (i, (_, start)) in calls.iter().enumerate() {
            if let Some(r) = (0..p).find(|&r| !(start[r].is_finite() && start[r] >= 0.0)) {
                return bad(i, format!("rank {r} starts at {}", start[r]));
            }
        }
        let total_steps: usize = calls
            .iter()
            .map(|(s, _)| s.ranks.iter().map(Vec::len).sum::<usize>())
            .sum();
        // Puts are counted as they are flattened (counting first would read every step
        // once more); a step has one on average in most collectives.
        let n = total_steps;
        let mut flat = Flat {
            rank_step: Vec::with_capacity(k * p + 1),
            need: Vec::with_capacity(total_steps),
            delay: Vec::with_capacity(total_steps),
            land: Vec::with_capacity(total_steps),
            put_base: Vec::with_capacity(total_steps + 1),
            put_to: Vec::with_capacity(n),
            put_bytes: Vec::with_capacity(n),
            target: Vec::with_capacity(n),
        };
        for (i, (sched, _)) in calls.iter().enumerate() {
            self.flatten(&mut flat, sched, placement, i * p, &prefix(i))?;
        }
        flat.rank_step.push(flat.need.len() as u32);
        flat.put_base.push(flat.target.len() as u32);
        let n = flat.target.len();
        let v = k * p;
        let devices = self.config().dma.devices.max(1);
        let start: Vec<SimTime> = calls.iter().flat_map(|(_, s)| s.iter().copied()).collect();
        let mut run = Run {
            nodes: (0..v).map(|u| placement.nodes[u % p.max(1)]).collect(),
            memory: placement.memory,
            start,
            first_device: (0..v).map(|u| ((u / p.max(1)) as u32) % devices).collect(),
            mechanism,
            engine: Engine::new(self),
            rank_step: flat.rank_step,
            put_base: flat.put_base,
            put_to: flat.put_to,
            put_bytes: flat.put_bytes,
            target: flat.target,
            need: flat.need,
            delay: flat.delay,
            land: flat.land,
            cur: vec![0; v],
            entered: vec![0.0; v],
            out: vec![0; v],
            flow_put: Vec::with_capacity(n),
            finish: vec![f64::NAN; v],
            chain: 0,
            call_cost: self
                .config()
                .software
                .as_ref()
                .map_or(0.0, |c| c.call_us * 1e-6),
            step_cost: self
                .config()
                .software
                .as_ref()
                .map_or(0.0, |c| c.step_us * 1e-6),
            noise: self.config().noise.as_ref().map(Noise::new),
        };
        run.engine.reserve(n);
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&a, &b| run.start[a].total_cmp(&run.start[b]).then(a.cmp(&b)));
        for &u in &order {
            run.enter(u, 0, run.start[u])?;
        }
        while let Some((flow, t)) = run.engine.next_completion() {
            let updates = run.engine.rate_updates();
            if updates > max_updates {
                return Err(FabricError::WorkLimit {
                    updates,
                    limit: max_updates,
                });
            }
            let (src, pid) = run.flow_put[flow as usize];
            let (dst, g) = (run.put_to[pid as usize], run.target[pid as usize]);
            run.out[src as usize] -= 1;
            run.need[g as usize] -= 1;
            run.try_advance(src as usize, t)?;
            if dst != src {
                run.try_advance(dst as usize, t)?;
            }
        }
        if let Some(u) = (0..v).find(|&u| (run.cur[u] as usize) < run.steps(u)) {
            return bad(
                u / p,
                format!(
                    "deadlock: rank {} never leaves step {} (a wait that is satisfied only later in the sender's order)",
                    u % p,
                    run.cur[u]
                ),
            );
        }
        let mut finish = run.finish;
        let mut out = Vec::with_capacity(k);
        for _ in 0..k {
            let rest = finish.split_off(p);
            out.push(std::mem::replace(&mut finish, rest));
        }
        Ok(out)
    }
}
