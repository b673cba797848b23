//! The pricing engine: an event-driven fluid model with max-min fair sharing.
//!
//! # Model
//!
//! Every transfer in its data phase is a fluid flow through a fixed set of resources (links,
//! memories, host ports, devices, injection caps; see [`crate::fabric`]). At any instant the
//! rates are the **max-min fair** allocation (progressive filling, as in SimGrid's default
//! network model without its TCP corrections): all unfrozen flows grow together; when a
//! resource is saturated its flows freeze at their current rate; repeat until every flow is
//! frozen. Two flows sharing one link of bandwidth B get B/2 each; flows with disjoint
//! resources do not interact.
//!
//! Rates only change when a flow enters or leaves its data phase. At such an event only the
//! connected component of the flow-resource graph that contains the changed resources is
//! recomputed; the others keep their rates. Each flow keeps the bytes left at its last rate
//! change, so its end is `updated + remaining / rate`; an end made stale by a later rate
//! change is recognised by a version number and dropped.
//!
//! Events at the same instant are handled together before rates are recomputed; events are
//! ordered by (time, posting sequence), so a run is deterministic: the same input gives the
//! same bits.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::FabricError;
use crate::fabric::{Fabric, FlowSpec, QueueKey, Transfer};

const NONE: u32 = u32::MAX;

/// A multiply-rotate hasher for small integer keys (queue and pair lookups are on the hot
/// path; the keys are not attacker-controlled).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IntHasher(u64);

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` with [`IntHasher`].
pub(crate) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The transfer is issued.
    Release,
    /// Its overhead is over: it enters the fluid.
    Activate,
    /// Its last byte has left (valid if the version matches).
    DataEnd,
    /// Its data has landed.
    Complete,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    t: f64,
    seq: u64,
    kind: Kind,
    flow: u32,
    version: u32,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    /// Reversed, so that `BinaryHeap` pops the earliest event.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Clone)]
struct Flow {
    res_off: u32,
    res_len: u32,
    bytes: f64,
    remaining: f64,
    rate: f64,
    updated: f64,
    tail: f64,
    start: f64,
    queue: u32,
    tag: u64,
    version: u32,
    /// Component-search stamp.
    mark: u32,
    /// Filling stamp: frozen in the current filling when equal to the engine's stamp.
    frozen: u32,
}

#[derive(Debug, Default, Clone)]
struct ResState {
    /// Flows in their data phase through this resource.
    active: Vec<u32>,
    capacity: f64,
    /// Capacity not yet given out in the current filling.
    cap_left: f64,
    /// Unfrozen flows through it in the current filling.
    count: u32,
    /// Component-search stamp.
    mark: u32,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<u32>,
    busy: bool,
    started_any: bool,
    tag: u64,
    index: u32,
}

/// An event-driven pricing engine on one fabric. Post transfers (each at its release time),
/// then pull completions in time order; a completion handler may post more transfers released
/// at or after the completion it saw.
#[derive(Debug)]
pub struct Engine<'f> {
    fab: &'f Fabric,
    now: f64,
    seq: u64,
    flows: Vec<Flow>,
    res: Vec<u32>,
    /// Per resource: its state, in one record so that a visit touches one cache line.
    rs: Vec<ResState>,
    heap: BinaryHeap<Event>,
    queue_ids: IntMap<QueueKey, u32>,
    queues: Vec<Queue>,
    dirty: Vec<u32>,
    stamp: u32,
    comp_flows: Vec<u32>,
    comp_res: Vec<u32>,
    old_rates: Vec<f64>,
}

impl<'f> Engine<'f> {
    /// An idle engine at time 0.
    pub fn new(fab: &'f Fabric) -> Self {
        Self {
            fab,
            now: 0.0,
            seq: 0,
            flows: Vec::new(),
            res: Vec::new(),
            rs: fab
                .capacity()
                .iter()
                .map(|&capacity| ResState {
                    capacity,
                    ..ResState::default()
                })
                .collect(),
            heap: BinaryHeap::new(),
            queue_ids: IntMap::default(),
            queues: Vec::new(),
            dirty: Vec::new(),
            stamp: 0,
            comp_flows: Vec::new(),
            comp_res: Vec::new(),
            old_rates: Vec::new(),
        }
    }

    /// The fabric it prices on.
    pub fn fabric(&self) -> &'f Fabric {
        self.fab
    }

    /// The time of the last event handled.
    pub fn now(&self) -> f64 {
        self.now
    }

    fn push(&mut self, t: f64, kind: Kind, flow: u32, version: u32) {
        self.seq += 1;
        self.heap.push(Event {
            t,
            seq: self.seq,
            kind,
            flow,
            version,
        });
    }

    /// Post a transfer released at `t.release` (which must not be before [`Engine::now`]).
    /// DMA transfers on the same queue with the same `chain` tag that follow each other form
    /// one chain (one start command). `index` names the transfer in errors. Returns its id
    /// (ids count up from 0 in posting order).
    pub fn post(&mut self, t: &Transfer, index: usize, chain: u64) -> Result<u32, FabricError> {
        let mech = self.fab.check(t, index)?;
        if t.release < self.now {
            return Err(FabricError::Transfer {
                index,
                reason: format!(
                    "released at {} s, before the engine's time {} s",
                    t.release, self.now
                ),
            });
        }
        let off = self.res.len();
        let FlowSpec { queue, start, tail } = self.fab.resolve(t, mech, &mut self.res);
        let queue = match queue {
            Some(k) => {
                let next = self.queues.len() as u32;
                let q = *self.queue_ids.entry(k).or_insert(next);
                if q == next {
                    self.queues.push(Queue::default());
                }
                q
            }
            None => NONE,
        };
        let id = self.flows.len() as u32;
        self.flows.push(Flow {
            res_off: off as u32,
            res_len: (self.res.len() - off) as u32,
            bytes: t.bytes as f64,
            remaining: t.bytes as f64,
            rate: 0.0,
            updated: 0.0,
            tail,
            start,
            queue,
            tag: chain,
            version: 0,
            mark: 0,
            frozen: 0,
        });
        if t.release == self.now {
            self.release(id);
        } else {
            self.push(t.release, Kind::Release, id, 0);
        }
        Ok(id)
    }

    /// Take the next descriptor of queue `q` at time `t`.
    fn start_queue(&mut self, q: u32, t: f64) {
        let queue = &mut self.queues[q as usize];
        let Some(f) = queue.waiting.pop_front() else {
            queue.busy = false;
            return;
        };
        let flow = &self.flows[f as usize];
        let new_chain = !queue.started_any || queue.tag != flow.tag;
        if new_chain {
            queue.index = 0;
        }
        queue.started_any = true;
        queue.tag = flow.tag;
        queue.busy = true;
        let index = queue.index;
        queue.index += 1;
        let pre = if new_chain { flow.start } else { 0.0 } + self.fab.descriptor_cost(index);
        self.push(t + pre, Kind::Activate, f, 0);
    }

    /// Issue flow `f` now: PIO starts its overhead, DMA joins its queue.
    fn release(&mut self, f: u32) {
        let q = self.flows[f as usize].queue;
        if q == NONE {
            let pre = self.flows[f as usize].start;
            self.push(self.now + pre, Kind::Activate, f, 0);
        } else {
            let queue = &mut self.queues[q as usize];
            queue.waiting.push_back(f);
            if !queue.busy {
                self.start_queue(q, self.now);
            }
        }
    }

    fn activate(&mut self, f: u32) {
        let flow = &mut self.flows[f as usize];
        if flow.bytes == 0.0 {
            self.data_end(f);
            return;
        }
        flow.updated = self.now;
        let (o, n) = (flow.res_off as usize, flow.res_len as usize);
        for i in o..o + n {
            let r = self.res[i];
            self.rs[r as usize].active.push(f);
            self.dirty.push(r);
        }
    }

    fn data_end(&mut self, f: u32) {
        let now = self.now;
        let flow = &mut self.flows[f as usize];
        let was_active = flow.rate > 0.0;
        flow.remaining = 0.0;
        flow.rate = 0.0;
        flow.version += 1;
        let (tail, q) = (flow.tail, flow.queue);
        if was_active {
            let (o, n) = (flow.res_off as usize, flow.res_len as usize);
            for i in o..o + n {
                let r = self.res[i];
                let list = &mut self.rs[r as usize].active;
                let pos = list
                    .iter()
                    .position(|&x| x == f)
                    .expect("active flow listed");
                list.swap_remove(pos);
                self.dirty.push(r);
            }
        }
        self.push(now + tail, Kind::Complete, f, 0);
        if q != NONE {
            self.start_queue(q, now);
        }
    }

    /// Handle events until the next completion; `None` when nothing is left.
    pub fn next_completion(&mut self) -> Option<(u32, f64)> {
        loop {
            if !self.dirty.is_empty() && self.heap.peek().is_none_or(|e| e.t > self.now) {
                self.recompute();
                continue;
            }
            let ev = self.heap.pop()?;
            self.now = ev.t;
            let f = ev.flow;
            match ev.kind {
                Kind::Release => self.release(f),
                Kind::Activate => self.activate(f),
                Kind::DataEnd => {
                    if ev.version == self.flows[f as usize].version {
                        self.data_end(f);
                    }
                }
                Kind::Complete => return Some((f, ev.t)),
            }
        }
    }

    /// Recompute the rates of every component touched since the last recomputation.
    fn recompute(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.rs.iter_mut().for_each(|r| r.mark = 0);
            self.flows.iter_mut().for_each(|f| {
                f.mark = 0;
                f.frozen = 0;
            });
            self.stamp = 1;
        }
        let stamp = self.stamp;
        for &r0 in &dirty {
            if self.rs[r0 as usize].mark == stamp {
                continue;
            }
            // Collect r0's component.
            self.comp_flows.clear();
            self.comp_res.clear();
            self.rs[r0 as usize].mark = stamp;
            self.comp_res.push(r0);
            let mut i = 0;
            while i < self.comp_res.len() {
                let r = self.comp_res[i] as usize;
                i += 1;
                for j in 0..self.rs[r].active.len() {
                    let f = self.rs[r].active[j];
                    let flow = &mut self.flows[f as usize];
                    if flow.mark == stamp {
                        continue;
                    }
                    flow.mark = stamp;
                    self.comp_flows.push(f);
                    let (o, n) = (flow.res_off as usize, flow.res_len as usize);
                    for &q in &self.res[o..o + n] {
                        let st = &mut self.rs[q as usize];
                        if st.mark != stamp {
                            st.mark = stamp;
                            self.comp_res.push(q);
                        }
                    }
                }
            }
            self.fill();
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// Max-min fair rates for the component in `comp_flows`/`comp_res` (progressive filling).
    fn fill(&mut self) {
        let now = self.now;
        let stamp = self.stamp;
        for &r in &self.comp_res {
            let st = &mut self.rs[r as usize];
            st.cap_left = st.capacity;
            st.count = st.active.len() as u32;
        }
        let mut left = self.comp_flows.len();
        let mut old_rates = std::mem::take(&mut self.old_rates);
        old_rates.clear();
        for &f in &self.comp_flows {
            let flow = &mut self.flows[f as usize];
            flow.remaining -= flow.rate * (now - flow.updated);
            flow.updated = now;
            old_rates.push(flow.rate);
        }
        while left > 0 {
            let mut share = f64::INFINITY;
            for &r in &self.comp_res {
                let st = &self.rs[r as usize];
                if st.count > 0 {
                    share = share.min(st.cap_left / st.count as f64);
                }
            }
            let limit = share * (1.0 + 1e-12);
            for k in 0..self.comp_res.len() {
                let r = self.comp_res[k] as usize;
                let st = &self.rs[r];
                if st.count == 0 || st.cap_left / st.count as f64 > limit {
                    continue;
                }
                for j in 0..self.rs[r].active.len() {
                    let f = self.rs[r].active[j];
                    let flow = &mut self.flows[f as usize];
                    if flow.frozen == stamp {
                        continue;
                    }
                    flow.frozen = stamp;
                    flow.rate = share;
                    left -= 1;
                    let (o, n) = (flow.res_off as usize, flow.res_len as usize);
                    for &q in &self.res[o..o + n] {
                        let st = &mut self.rs[q as usize];
                        st.cap_left -= share;
                        st.count -= 1;
                    }
                }
            }
        }
        let comp = std::mem::take(&mut self.comp_flows);
        for (k, &f) in comp.iter().enumerate() {
            let flow = &mut self.flows[f as usize];
            if flow.rate != old_rates[k] {
                flow.version += 1;
                let end = now + (flow.remaining.max(0.0) / flow.rate);
                let v = flow.version;
                self.push(end, Kind::DataEnd, f, v);
            }
        }
        self.comp_flows = comp;
        self.old_rates = old_rates;
    }
}
