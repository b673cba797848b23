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

use crate::engine::{Engine, IntMap};
use crate::error::FabricError;
use crate::fabric::{Endpoint, Fabric, Mechanism, MemoryKind, SimTime, Transfer};

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

struct Run<'a, 'f> {
    sched: &'a PriceSchedule,
    placement: &'a Placement,
    start: &'a [SimTime],
    mechanism: Mechanism,
    engine: Engine<'f>,
    /// Per put id: (destination rank, the step index there it satisfies).
    target: Vec<(u32, u32)>,
    /// Per rank, per step: the id of the step's first put (steps + 1 entries); put ids run
    /// rank by rank, step by step.
    step_base: Vec<Vec<u32>>,
    /// Per rank and step (flattened with `need_base`): arrivals not yet landed.
    need: Vec<u32>,
    need_base: Vec<u32>,
    /// Per rank: its current step, and its puts of that step not yet complete.
    cur: Vec<u32>,
    out: Vec<u32>,
    /// Per flow id: (source rank, put id).
    flow_put: Vec<(u32, u32)>,
    finish: Vec<SimTime>,
    chain: u64,
}

impl Run<'_, '_> {
    fn enter(&mut self, r: usize, mut s: usize, t: SimTime) -> Result<(), FabricError> {
        let t = t.max(self.start[r]);
        let steps = &self.sched.ranks[r];
        let dma = &self.engine.fabric().config().dma;
        let (devices, channels, chaining) = (dma.devices, dma.channels, dma.chaining);
        while s < steps.len() {
            let step = &steps[s];
            let chain0 = self.chain;
            self.chain += devices as u64 + step.puts.len() as u64;
            let src = Endpoint {
                node: self.placement.nodes[r],
                memory: self.placement.memory,
            };
            let mut dma_index = 0u32;
            for (k, put) in step.puts.iter().enumerate() {
                let dst = Endpoint {
                    node: self.placement.nodes[put.to],
                    memory: self.placement.memory,
                };
                let mut tr = Transfer {
                    src,
                    dst,
                    bytes: put.bytes,
                    mechanism: self.mechanism,
                    release: t,
                };
                let pid = self.step_base[r][s] + k as u32;
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
                        let device = dma_index % devices;
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
                let id = self.engine.post(&tr, index, tag)?;
                debug_assert_eq!(id as usize, self.flow_put.len());
                self.flow_put.push((r as u32, pid));
            }
            self.out[r] = step.puts.len() as u32;
            if self.out[r] > 0 || self.need[self.need_base[r] as usize + s] > 0 {
                self.cur[r] = s as u32;
                return Ok(());
            }
            s += 1;
        }
        self.cur[r] = s as u32;
        self.finish[r] = t;
        Ok(())
    }

    fn try_advance(&mut self, r: usize, t: SimTime) -> Result<(), FabricError> {
        let s = self.cur[r] as usize;
        if s < self.sched.ranks[r].len()
            && self.out[r] == 0
            && self.need[self.need_base[r] as usize + s] == 0
        {
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

impl Fabric {
    /// Price a schedule: the finish time of every rank (see the module docs for the
    /// semantics). `start[r]` is when rank r enters the schedule. Errors in transfers name the
    /// put by its index in rank-major, step-major, put order.
    pub fn price_schedule(
        &self,
        sched: &PriceSchedule,
        placement: &Placement,
        start: &[SimTime],
        mechanism: Mechanism,
    ) -> Result<Vec<SimTime>, FabricError> {
        let p = sched.ranks.len();
        let bad = |m: String| Err(FabricError::Schedule(m));
        if placement.nodes.len() != p {
            return bad(format!(
                "placement has {} ranks, schedule {p}",
                placement.nodes.len()
            ));
        }
        if start.len() != p {
            return bad(format!("{} start times for {p} ranks", start.len()));
        }
        if let Some(r) = (0..p).find(|&r| placement.nodes[r] >= self.nodes()) {
            return bad(format!(
                "rank {r} placed on node {} of {}",
                placement.nodes[r],
                self.nodes()
            ));
        }
        if let Some(r) = (0..p).find(|&r| !(start[r].is_finite() && start[r] >= 0.0)) {
            return bad(format!("rank {r} starts at {}", start[r]));
        }
        // Match puts to arrivals per ordered pair, in order.
        let mut expect: IntMap<(u32, u32), (Vec<u32>, usize)> = IntMap::default();
        let mut need = Vec::new();
        let mut need_base = Vec::with_capacity(p);
        for (r, steps) in sched.ranks.iter().enumerate() {
            need_base.push(need.len() as u32);
            for (s, step) in steps.iter().enumerate() {
                need.push(step.waits_for.len() as u32);
                for &from in &step.waits_for {
                    if from >= p {
                        return bad(format!("rank {r} step {s} waits for rank {from} of {p}"));
                    }
                    expect
                        .entry((from as u32, r as u32))
                        .or_default()
                        .0
                        .push(s as u32);
                }
            }
        }
        let mut target = Vec::with_capacity(sched.transfers());
        let mut step_base = Vec::with_capacity(p);
        for (r, steps) in sched.ranks.iter().enumerate() {
            let mut bases = Vec::with_capacity(steps.len() + 1);
            for (s, step) in steps.iter().enumerate() {
                bases.push(target.len() as u32);
                for put in &step.puts {
                    if put.to >= p {
                        return bad(format!("rank {r} step {s} puts to rank {} of {p}", put.to));
                    }
                    let slot = expect
                        .get_mut(&(r as u32, put.to as u32))
                        .and_then(|(v, i)| {
                            let x = v.get(*i).copied();
                            *i += 1;
                            x
                        });
                    match slot {
                        Some(sd) => target.push((put.to as u32, sd)),
                        None => {
                            return bad(format!(
                                "rank {r} step {s} puts to rank {} which waits for no more arrivals from {r}",
                                put.to
                            ))
                        }
                    }
                }
            }
            bases.push(target.len() as u32);
            step_base.push(bases);
        }
        let mut unmatched: Vec<_> = expect
            .iter()
            .filter(|(_, (v, i))| *i < v.len())
            .map(|(&(from, to), (v, i))| (to, v[*i], from))
            .collect();
        unmatched.sort_unstable();
        if let Some(&(to, s, from)) = unmatched.first() {
            return bad(format!(
                "rank {to} step {s} waits for an arrival from rank {from} that no put provides"
            ));
        }
        let mut run = Run {
            sched,
            placement,
            start,
            mechanism,
            engine: Engine::new(self),
            target,
            step_base,
            need,
            need_base,
            cur: vec![0; p],
            out: vec![0; p],
            flow_put: Vec::with_capacity(sched.transfers()),
            finish: vec![f64::NAN; p],
            chain: 0,
        };
        let mut order: Vec<usize> = (0..p).collect();
        order.sort_by(|&a, &b| start[a].total_cmp(&start[b]).then(a.cmp(&b)));
        for &r in &order {
            run.enter(r, 0, start[r])?;
        }
        while let Some((flow, t)) = run.engine.next_completion() {
            let (src, pid) = run.flow_put[flow as usize];
            let (dst, sd) = run.target[pid as usize];
            run.out[src as usize] -= 1;
            run.need[run.need_base[dst as usize] as usize + sd as usize] -= 1;
            run.try_advance(src as usize, t)?;
            if dst != src {
                run.try_advance(dst as usize, t)?;
            }
        }
        if let Some(r) = (0..p).find(|&r| (run.cur[r] as usize) < sched.ranks[r].len()) {
            return bad(format!(
                "deadlock: rank {r} never leaves step {} (a wait that is satisfied only later in the sender's order)",
                run.cur[r]
            ));
        }
        Ok(run.finish)
    }
}
