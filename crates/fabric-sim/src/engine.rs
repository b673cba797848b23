//! The pricing engine: an event-driven fluid model with max-min fair sharing.
//!
//! [`Fabric::price`], defined here above the fabric, prices a set of transfers with one engine.
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
//! recomputed; the others keep their rates. Within it, only the flows at least as fast as
//! the slowest that left can change, and those below the level at which a starting flow's
//! resources would saturate cannot; only the others are re-rated, on the capacity the
//! slower ones leave (`Engine::recompute_ends`, exact up to rounding;
//! [`Fabric::with_whole_recomputation`] re-rates whole components, the reference): an
//! exchange of many equal messages, which end in waves of falling rate, then costs about
//! its flows times their resources' list lengths instead of its flows times its distinct
//! instants. Each flow keeps the bytes left at its last rate
//! change, so its end is `updated + remaining / rate`; an end made stale by a later rate
//! change is recognised by a version number and dropped.
//!
//! Events at the same instant are handled together before rates are recomputed; events are
//! ordered by (time, posting sequence), so a run is deterministic: the same input gives the
//! same bits.
//!
//! # Layout (what makes it fast)
//!
//! - Each fabric resource has a 32-byte record at the fabric's own index (no translation
//!   table), kept with the engine's buffers from run to run: a run resets a record when it
//!   first activates a flow through it (its stamp is below the run's first one), so a run
//!   on kept buffers pays only for the resources it uses, not for the fabric's size (the
//!   old table was reset at every run: pricing 64 transfers on a 40^3 torus took 0.27 ms,
//!   now 0.07 ms after the first run). The fabric numbers a node's resources so that the ones a host-memory
//!   DMA transfer crosses share two cache lines (`Slots` in `fabric.rs`). The flows in data
//!   phase on each resource live in one shared arena (no allocation per resource), each
//!   list after a slot holding its room. On `price_allreduce` (2026-11-27, against
//!   first-use dense indices and 40-byte records): 29% fewer simulated L2 misses, about 4%
//!   less time, the same bits.
//! - Handling the events of an instant, the engine asks the CPU to fetch the flow record
//!   of the event 16 places ahead and the resource records of the one 8 ahead
//!   (`Engine::prefetch_ahead`): a collective step's thousands of simultaneous activations
//!   and ends each touch records scattered over megabytes, and fetched ahead their cache
//!   misses overlap. On `price_allreduce` about 3% less time (interleaved runs, noisy
//!   host), though 6% more instructions; fetching the active lists too cost more than it
//!   saved.
//! - Events are grouped by their exact time: a heap orders the distinct times, and each
//!   time has a bucket of events in posting order. Posting order within one time is the
//!   sequence order, so handling a bucket front to back is handling (time, sequence)
//!   order, and simultaneous events (the common case in collective schedules) cost no
//!   heap operation.
//! - A filling round visits only the component's resources that still have unfrozen flows
//!   (a shrinking list kept in component order), not the whole component: on the large
//!   components of a depth-8 matrix-powers exchange of 1024 ranks on the Tofu torus (about
//!   20 rounds over thousands of resources) this cut the rounds' resource visits from 210 M
//!   to 89 M, with bit-identical results.
//! - On components of 128 resources or more the rounds do not visit every such resource:
//!   a min-heap of `cap_left / count` gives each round's share and the resources saturated
//!   at its start, and only those, plus the resources a freeze touched later in component
//!   order, are visited, in component order, with the scan's own check (`Engine::fill_heap`).
//!   The cost follows the freezes, not rounds times resources, and every round freezes the
//!   same flows with the same share as the scan (`Engine::fill_scan`, which small components
//!   and the corner cases of zero or NaN shares still use): planning a 1138-row matrix on
//!   4096 ranks of `ito` went from 31.6 s to 10.8 s, with bit-identical results.
//! - DMA queues are intrusive FIFO lists through the flows; scratch vectors are reused,
//!   within a run and across runs: a dropped engine leaves its buffers to the next engine on
//!   the same fabric (`Buffers`), so a run no larger than an earlier one reuses that run's
//!   memory instead of faulting in fresh pages (`price_allreduce`: 39,500 page faults down
//!   to 5,800, most of those now from building its schedules; 0.80 of the time).
//! - A re-rated flow's old end stays pending until it surfaces (stale, dropped by its
//!   version). On a large component re-rated at each of its many events these piled up
//!   quadratically (11.7 GB planning a 32^3 Poisson on 1024 ranks of `ofp`); once there are
//!   more stale ends than flows (and at least `COMPACT_MIN`) they are dropped all at once
//!   between two instants (`Engine::compact`), with bit-identical results.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::buffers::{Buffers, Event, Flow, FlowMeta, Kind, Queue, QueueKey, ResState, NONE};
use crate::error::FabricError;
use crate::fabric::{Fabric, FlowSpec, Mechanism, SimTime, Transfer};

/// Components with fewer resources than this are filled by scanning ([`Engine::fill_scan`]):
/// there a heap costs more than the rounds' visits it saves. Measured 2026-11-27 (callgrind,
/// the same bits either way): `price_allreduce`'s ring components of 16 flows over about 100
/// resources cost 5.5% fewer instructions in all scanned than with the heap from 32
/// resources; 128, 256 and 512 cost the same, and `krylov plan 1138_bus.mtx --ranks 4096
/// --fabric ito` took the same time at 32, 128 and 256 (about 3 times longer scanning all).
const FILL_HEAP_MIN: usize = 128;

/// How far ahead in a bucket [`Engine::prefetch_ahead`] fetches an event's flow record, and
/// its resource records.
const PREFETCH_FLOW: usize = 16;
const PREFETCH_RES: usize = 8;

/// Hint the CPU to bring the cache line holding `x` into its caches (no effect but on
/// timing).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch<T>(x: &T) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch is a hint that never faults, and `x` is a valid reference; SSE is
    // part of every x86_64 target.
    unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast()) }
}

/// Hint the CPU to bring the cache line holding `x` into its caches (no effect but on
/// timing; none on this architecture).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn prefetch<T>(_x: &T) {}

/// Slower flows a partial re-rating visits ([`Engine::recompute_ends`]: reading a rate off
/// a resource's list) per flow rate update of [`Engine::rate_updates`]. Measured 2026-11-29
/// (`krylov plan` of 64^3 Poisson at 4096 ranks on `ito`, cbcgr k 8 with the matrix powers
/// kernel, with and without it): its depth-8 exchange re-rated 0.54 M flows in one whole
/// recomputation and 1,398 in 1,217 partial ones, which visited 18.9 M slower flows, in
/// about 2.4 s of one core, against about 2.2 M whole-recomputation updates a second
/// (`castack_plan::DEFAULT_PRICE_LIMIT`): a visit costs about a quarter of an update.
const SLOW_VISITS_PER_UPDATE: u64 = 4;

/// Stale events that may pile up before [`Engine::compact`] drops them (at least; or one per
/// flow posted, whichever is more, so that compacting costs O(1) per dropped event).
const COMPACT_MIN: usize = 1 << 20;

/// A `u64` whose unsigned order is `f64::total_cmp`'s order.
fn time_key(t: f64) -> u64 {
    let b = t.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

fn key_time(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

impl Drop for Engine<'_> {
    fn drop(&mut self) {
        self.b.stamp = self.stamp;
        self.fab.give_buffers(std::mem::take(&mut self.b));
    }
}

/// An event-driven pricing engine on one fabric. Post transfers (each at its release time),
/// then pull completions in time order; a completion handler may post more transfers released
/// at or after the completion it saw.
#[derive(Debug)]
pub struct Engine<'f> {
    fab: &'f Fabric,
    now: f64,
    /// Flows, resources, events, queues and scratch: everything whose size grows with the
    /// run, handed on to the next engine on the fabric when this one is dropped.
    b: Buffers,
    /// The bucket being handled (`NONE`: none), its key and the next event's place in it.
    cur: u32,
    cur_key: u64,
    cur_pos: usize,
    /// The last bucket pushed to and its key (a cache in front of `Buffers::bucket_of`).
    last_bucket: u32,
    last_key: u64,
    /// Pending `DataEnd` events made stale by a later rate change of their flow (they are
    /// dropped when they surface, or all at once by [`Engine::compact`]).
    stale: usize,
    stamp: u32,
    /// The run's first stamp: a resource record marked below it has not been used in this
    /// run yet.
    run_base: u32,
    /// Components of at least this many resources are filled with the heap
    /// ([`FILL_HEAP_MIN`]; tests set `usize::MAX` to fill every one by scanning, the
    /// reference).
    fill_heap_min: usize,
    /// Stale events that may pile up before a compaction ([`COMPACT_MIN`]; tests set it
    /// low to compact at every instant, or `usize::MAX` never to).
    compact_min: usize,
    /// Flow rate updates so far: every flow of every component recomputed counts one
    /// ([`Engine::rate_updates`]).
    updates: u64,
    /// Slower flows visited (not re-rated) by partial re-ratings.
    slow_visits: u64,
    /// The flows that entered their data phase since the last recomputation.
    started: Vec<u32>,
    /// Flows in their data phase.
    active: usize,
    /// Scratch: the rates on one resource ([`Engine::start_level`]).
    level_rates: Vec<f64>,
    /// The least rate of a flow whose data phase ended since the last recomputation
    /// (infinite: none): without activations only flows at least this fast can change
    /// ([`Engine::recompute`]).
    end_floor: f64,
    /// Recompute an instant of ends only from its ended flows' level up
    /// ([`Engine::recompute_ends`]); cleared on a fabric made by
    /// [`Fabric::with_whole_recomputation`], the reference.
    partial_ends: bool,
}

impl<'f> Engine<'f> {
    /// An idle engine at time 0.
    ///
    /// Its buffers are ones an engine dropped on this fabric left (see `Buffers`), cleared
    /// (the per-resource records are reset lazily, at a run's first use of each): pricing
    /// schedules one after another on one fabric reuses the memory of the earlier runs,
    /// and allocates only where a run is larger than those. An engine with fresh buffers
    /// (the first on a fabric, or one beside others in use) first makes a record per
    /// resource of the fabric: less work than building the fabric (measured 2026-11-27 on a
    /// 40^3 torus: a first `Fabric::price` of 64 transfers took 27 ms, later ones 0.07 ms,
    /// against 0.27 ms each with the old per-run table; `Fabric::new` took 54 ms).
    pub fn new(fab: &'f Fabric) -> Self {
        let mut b = fab.take_buffers();
        b.clear();
        let dma = &fab.config().dma;
        if !dma.queue_per_peer {
            let slots = fab.nodes() * dma.devices as usize * dma.channels as usize;
            b.queue_slots.resize(slots, NONE);
        }
        // Arena slot 0 is no list's: `act_off == 0` means no room.
        b.act.push(0);
        let capacity = fab.capacity();
        if b.rs.len() != capacity.len() || b.stamp >= u32::MAX / 2 {
            // Fresh records (a fabric hands back only its own buffers, so a size that
            // differs means none yet), or stamps that would soon wrap: start over at 0.
            b.rs.clear();
            b.rs.extend(capacity.iter().map(|&c| ResState {
                capacity: c,
                ..ResState::default()
            }));
            b.stamp = 0;
        }
        // Also after a panic in the heap filling, which had taken it out.
        b.fill_pos.resize(capacity.len(), 0);
        let run_base = b.stamp + 1;
        Self {
            fab,
            now: 0.0,
            b,
            cur: NONE,
            cur_key: 0,
            cur_pos: 0,
            last_bucket: NONE,
            last_key: 0,
            stale: 0,
            stamp: run_base,
            run_base,
            fill_heap_min: FILL_HEAP_MIN,
            compact_min: COMPACT_MIN,
            updates: 0,
            slow_visits: 0,
            started: Vec::new(),
            active: 0,
            level_rates: Vec::new(),
            end_floor: f64::INFINITY,
            partial_ends: !fab.recomputes_whole(),
        }
    }

    /// Make room for `transfers` more transfers.
    pub(crate) fn reserve(&mut self, transfers: usize) {
        self.b.flows.reserve(transfers);
        self.b.meta.reserve(transfers);
        self.b.res.reserve(transfers * 8);
        self.b.act.reserve(transfers * 4);
    }

    /// The fabric it prices on.
    pub fn fabric(&self) -> &'f Fabric {
        self.fab
    }

    /// The time of the last event handled.
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Flow rate updates so far: each flow of each component recomputed counts one, and
    /// every 4 slower flows a partial re-rating visits on its
    /// resources count one more ([`Engine::recompute_ends`]). The engine's work grows
    /// with this count, so it bounds a run's cost deterministically: a component of `m`
    /// flows in flight together, re-rated whole at each of `e` distinct instants, costs
    /// `m * e` updates.
    pub fn rate_updates(&self) -> u64 {
        self.updates + self.slow_visits / SLOW_VISITS_PER_UPDATE
    }

    /// Post an event at `t`, after every event already posted at `t`.
    #[inline]
    fn push(&mut self, t: f64, kind: Kind, flow: u32, version: u32) {
        let ev = Event {
            kind,
            flow,
            version,
        };
        let key = time_key(t);
        if self.last_bucket != NONE && self.last_key == key {
            self.b.buckets[self.last_bucket as usize].push(ev);
            return;
        }
        let b = match self.b.bucket_of.get(&key) {
            Some(&b) => b,
            None => {
                let b = match self.b.free_buckets.pop() {
                    Some(b) => b,
                    None => {
                        self.b.buckets.push(Vec::new());
                        (self.b.buckets.len() - 1) as u32
                    }
                };
                self.b.bucket_of.insert(key, b);
                self.b.times.push(Reverse(key));
                b
            }
        };
        self.b.buckets[b as usize].push(ev);
        self.last_bucket = b;
        self.last_key = key;
    }

    /// The engine's queue id of a DMA queue.
    fn queue_id(&mut self, k: QueueKey) -> u32 {
        let next = self.b.queues.len() as u32;
        let q = if self.b.queue_slots.is_empty() {
            *self.b.queue_ids.entry(k).or_insert(next)
        } else {
            let dma = &self.fab.config().dma;
            let (node, device, channel) = (k.0 as usize, k.1 as usize, k.2 as usize);
            let i = (node * dma.devices as usize + device) * dma.channels as usize + channel;
            let slot = &mut self.b.queue_slots[i];
            if *slot == NONE {
                *slot = next;
            }
            *slot
        };
        if q == next {
            self.b.queues.push(Queue::default());
        }
        q
    }

    /// Post a transfer released at `t.release` (which must not be before [`Engine::now`]).
    /// DMA transfers on the same queue with the same `chain` tag that follow each other form
    /// one chain (one start command). `index` names the transfer in errors. Returns its id
    /// (ids count up from 0 in posting order).
    pub fn post(&mut self, t: &Transfer, index: usize, chain: u64) -> Result<u32, FabricError> {
        let mech = self.fab.check(t, index)?;
        self.post_checked(t, mech, index, chain)
    }

    /// [`Engine::post`] for a transfer already checked, `mech` its concrete mechanism.
    pub(crate) fn post_checked(
        &mut self,
        t: &Transfer,
        mech: Mechanism,
        index: usize,
        chain: u64,
    ) -> Result<u32, FabricError> {
        if t.release < self.now {
            return Err(FabricError::Transfer {
                index,
                reason: format!(
                    "released at {} s, before the engine's time {} s",
                    t.release, self.now
                ),
            });
        }
        let off = self.b.res.len();
        let FlowSpec {
            queue,
            start,
            copy,
            tail,
        } = self.fab.resolve(t, mech, &mut self.b.res);
        let queue = match queue {
            Some(k) => self.queue_id(k),
            None => NONE,
        };
        let id = self.b.flows.len() as u32;
        self.b.flows.push(Flow {
            remaining: t.bytes as f64,
            rate: 0.0,
            updated: 0.0,
            res_off: off as u32,
            res_len: (self.b.res.len() - off) as u32,
            version: 0,
            mark: 0,
            frozen: 0,
        });
        self.b.meta.push(FlowMeta {
            tail,
            start,
            copy,
            tag: chain,
            queue,
            next_waiting: NONE,
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
        let queue = &mut self.b.queues[q as usize];
        let f = queue.head;
        if f == NONE {
            queue.busy = false;
            return;
        }
        let flow = &self.b.meta[f as usize];
        queue.head = flow.next_waiting;
        if queue.head == NONE {
            queue.last = NONE;
        }
        let new_chain = !queue.started_any || queue.tag != flow.tag;
        if new_chain {
            queue.index = 0;
        }
        queue.started_any = true;
        queue.tag = flow.tag;
        queue.busy = true;
        let index = queue.index;
        queue.index += 1;
        let pre =
            if new_chain { flow.start } else { 0.0 } + self.fab.descriptor_cost(index) + flow.copy;
        self.push(t + pre, Kind::Activate, f, 0);
    }

    /// Issue flow `f` now: PIO starts its overhead, DMA joins its queue.
    fn release(&mut self, f: u32) {
        let q = self.b.meta[f as usize].queue;
        if q == NONE {
            let pre = self.b.meta[f as usize].start;
            self.push(self.now + pre, Kind::Activate, f, 0);
        } else {
            let queue = &mut self.b.queues[q as usize];
            if queue.last == NONE {
                queue.head = f;
            } else {
                self.b.meta[queue.last as usize].next_waiting = f;
            }
            queue.last = f;
            if !queue.busy {
                self.start_queue(q, self.now);
            }
        }
    }

    fn activate(&mut self, f: u32) {
        let flow = &mut self.b.flows[f as usize];
        // Before its data phase a flow's bytes left are all its bytes.
        if flow.remaining == 0.0 {
            self.data_end(f);
            return;
        }
        flow.updated = self.now;
        let (o, n) = (flow.res_off as usize, flow.res_len as usize);
        for &r in &self.b.res[o..o + n] {
            let st = &mut self.b.rs[r as usize];
            if st.mark < self.run_base {
                // First use in this run: its list is an earlier run's.
                st.mark = self.run_base;
                st.act_off = 0;
                st.act_len = 0;
            }
            let room = match st.act_off {
                0 => 0,
                a => self.b.act[a as usize - 1],
            };
            if st.act_len == room {
                // Move the list to the end of the arena with twice the room, after a slot
                // holding that room (the old room is abandoned: the arena stays within
                // about twice the peak).
                let cap = (2 * room).max(4);
                self.b.act.push(cap);
                let new_off = self.b.act.len();
                let old = st.act_off as usize..(st.act_off + st.act_len) as usize;
                self.b.act.extend_from_within(old);
                self.b.act.resize(new_off + cap as usize, NONE);
                st.act_off = new_off as u32;
            }
            self.b.act[(st.act_off + st.act_len) as usize] = f;
            st.act_len += 1;
        }
        // All of f's resources are now in one component, and its first resource comes first
        // among them in posting order: marking that one alone finds the same components, in
        // the same order, as marking them all.
        if n > 0 {
            self.b.dirty.push(self.b.res[o]);
            self.started.push(f);
            self.active += 1;
        }
    }

    fn data_end(&mut self, f: u32) {
        let now = self.now;
        let flow = &mut self.b.flows[f as usize];
        let was_active = flow.rate > 0.0;
        if was_active {
            self.end_floor = self.end_floor.min(flow.rate);
            self.active -= 1;
        }
        flow.remaining = 0.0;
        flow.rate = 0.0;
        flow.version += 1;
        let FlowMeta { tail, queue: q, .. } = self.b.meta[f as usize];
        if was_active {
            let (o, n) = (flow.res_off as usize, flow.res_len as usize);
            for &r in &self.b.res[o..o + n] {
                let st = &mut self.b.rs[r as usize];
                let list = &mut self.b.act[st.act_off as usize..(st.act_off + st.act_len) as usize];
                let pos = list
                    .iter()
                    .position(|&x| x == f)
                    .expect("active flow listed");
                // `Vec::swap_remove`: the order of the lists is part of the deterministic
                // order of rate updates.
                list[pos] = list[list.len() - 1];
                st.act_len -= 1;
                // A resource left without flows is a component without flows: nothing to
                // recompute there.
                if st.act_len > 0 {
                    self.b.dirty.push(r);
                }
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
            if self.cur != NONE {
                let bucket = &self.b.buckets[self.cur as usize];
                if let Some(&ev) = bucket.get(self.cur_pos) {
                    self.prefetch_ahead(self.cur as usize, self.cur_pos);
                    self.cur_pos += 1;
                    let f = ev.flow;
                    match ev.kind {
                        Kind::Release => self.release(f),
                        Kind::Activate => self.activate(f),
                        Kind::DataEnd => {
                            if ev.version == self.b.flows[f as usize].version {
                                self.data_end(f);
                            } else {
                                debug_assert!(self.stale > 0, "stale events counted");
                                self.stale = self.stale.saturating_sub(1);
                            }
                        }
                        Kind::Complete => return Some((f, self.now)),
                    }
                    continue;
                }
                // Every event at this instant is handled: settle the rates (which may post
                // more events at this instant), then retire the bucket.
                if !self.b.dirty.is_empty() {
                    self.recompute();
                    continue;
                }
                self.b.bucket_of.remove(&self.cur_key);
                self.b.buckets[self.cur as usize].clear();
                self.b.free_buckets.push(self.cur);
                if self.last_bucket == self.cur {
                    self.last_bucket = NONE;
                }
                self.cur = NONE;
            }
            if self.stale >= self.compact_min.max(self.b.flows.len()) {
                self.compact();
            }
            let Reverse(key) = self.b.times.pop()?;
            self.cur = self.b.bucket_of[&key];
            self.cur_key = key;
            self.cur_pos = 0;
            self.now = key_time(key);
        }
    }

    /// Ask the CPU to fetch what the events a few places after `pos` in bucket `b` will
    /// read: the flow record of the one [`PREFETCH_FLOW`] ahead, the resource records of
    /// the one [`PREFETCH_RES`] ahead (its flow record fetched by then). A bucket holds the
    /// events of one instant, often thousands (a collective step's activations and ends),
    /// each touching records scattered over megabytes; fetched ahead, their misses overlap
    /// instead of stalling one by one. Changes nothing but timing.
    #[inline]
    fn prefetch_ahead(&self, b: usize, pos: usize) {
        let bucket = &self.b.buckets[b];
        if let Some(ev) = bucket.get(pos + PREFETCH_FLOW) {
            if let Some(flow) = self.b.flows.get(ev.flow as usize) {
                prefetch(flow);
            }
        }
        if let Some(ev) = bucket.get(pos + PREFETCH_RES) {
            if ev.kind == Kind::Activate || ev.kind == Kind::DataEnd {
                if let Some(flow) = self.b.flows.get(ev.flow as usize) {
                    let (o, n) = (flow.res_off as usize, flow.res_len as usize);
                    for &r in self.b.res.get(o..o + n).unwrap_or_default() {
                        if let Some(st) = self.b.rs.get(r as usize) {
                            prefetch(st);
                        }
                    }
                }
            }
        }
    }

    /// Drop every stale `DataEnd` from the pending buckets, keeping the order of the rest,
    /// and forget the times left without events. Called between instants (no bucket being
    /// handled), it changes no modeled bit: a stale event does nothing when it surfaces, and
    /// a time holding only stale events handles nothing. It bounds the pending events by
    /// the live ones plus [`COMPACT_MIN`] or the flow count: without it a large component,
    /// re-rated at every one of its many events, piles up a stale end per flow per event
    /// (quadratic memory).
    fn compact(&mut self) {
        debug_assert_eq!(self.cur, NONE);
        let flows = &self.b.flows;
        let mut times = Vec::with_capacity(self.b.times.len());
        for Reverse(key) in self.b.times.drain() {
            let b = self.b.bucket_of[&key];
            let bucket = &mut self.b.buckets[b as usize];
            bucket.retain(|ev| {
                ev.kind != Kind::DataEnd || ev.version == flows[ev.flow as usize].version
            });
            if bucket.is_empty() {
                self.b.bucket_of.remove(&key);
                self.b.free_buckets.push(b);
            } else {
                times.push(Reverse(key));
            }
        }
        self.b.times = BinaryHeap::from(times);
        self.last_bucket = NONE;
        self.stale = 0;
    }

    /// A fresh stamp for marking records in one pass (when the stamps wrap, they start over
    /// and the records this run uses stay apart from those it does not).
    fn next_stamp(&mut self) -> u32 {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            let base = self.run_base;
            self.b
                .rs
                .iter_mut()
                .for_each(|r| r.mark = u32::from(r.mark >= base));
            self.b.flows.iter_mut().for_each(|f| {
                f.mark = 0;
                f.frozen = 0;
            });
            self.run_base = 1;
            self.stamp = 2;
        }
        self.stamp
    }

    /// The least [`Engine::saturation_level`] of the resources of the flows started since
    /// the last recomputation: no flow slower than it changes its rate by their start. 0
    /// (nothing to gain) when more than a quarter of the flows in their data phase are
    /// starting: the whole component is re-rated anyway, and the bound would cost about as
    /// much as that.
    fn start_floor(&mut self) -> f64 {
        if self.started.len() * 4 > self.active {
            return 0.0;
        }
        let stamp = self.next_stamp();
        let started = std::mem::take(&mut self.started);
        let mut level = f64::INFINITY;
        for &h in &started {
            let flow = &self.b.flows[h as usize];
            let (o, n) = (flow.res_off as usize, flow.res_len as usize);
            for i in o..o + n {
                let r = self.b.res[i];
                if self.b.rs[r as usize].mark == stamp {
                    continue;
                }
                self.b.rs[r as usize].mark = stamp;
                level = level.min(self.saturation_level(r));
            }
        }
        self.started = started;
        level
    }

    /// Recompute the rates of every component touched since the last recomputation.
    fn recompute(&mut self) {
        let dirty = std::mem::take(&mut self.b.dirty);
        let mut floor = std::mem::replace(&mut self.end_floor, f64::INFINITY);
        if self.partial_ends && !self.started.is_empty() {
            floor = floor.min(self.start_floor());
        }
        self.started.clear();
        self.next_stamp();
        if self.partial_ends && floor.is_finite() && floor > 0.0 {
            self.recompute_ends(&dirty, floor);
            self.b.dirty = dirty;
            self.b.dirty.clear();
            return;
        }
        let stamp = self.stamp;
        let now = self.now;
        for &r0 in &dirty {
            // A resource whose flows all left since it was marked dirty (the flows of a
            // step that end together) is a component without flows: nothing to recompute.
            let st0 = &self.b.rs[r0 as usize];
            if st0.mark == stamp || st0.act_len == 0 {
                continue;
            }
            // Collect r0's component, and set up its filling on the way: every resource
            // starts with its whole capacity shared by all its flows, every flow's bytes are
            // brought up to now at its old rate, and the first fair share is the least
            // capacity per flow.
            self.b.comp_flows.clear();
            self.b.comp_res.clear();
            self.b.old_rates.clear();
            let mut share = f64::INFINITY;
            let st = &mut self.b.rs[r0 as usize];
            st.mark = stamp;
            st.cap_left = st.capacity;
            st.count = st.act_len;
            if st.count > 0 {
                share = st.cap_left / st.count as f64;
            }
            self.b.comp_res.push(r0);
            let mut i = 0;
            while i < self.b.comp_res.len() {
                let r = self.b.comp_res[i] as usize;
                i += 1;
                let (a, n) = (self.b.rs[r].act_off as usize, self.b.rs[r].act_len as usize);
                if n == 1 && i > 1 {
                    // Its one flow is the one that brought it in (every resource after r0
                    // joins with a flow already collected): nothing new there.
                    continue;
                }
                for &f in &self.b.act[a..a + n] {
                    let flow = &mut self.b.flows[f as usize];
                    if flow.mark == stamp {
                        continue;
                    }
                    flow.mark = stamp;
                    flow.remaining -= flow.rate * (now - flow.updated);
                    flow.updated = now;
                    self.b.old_rates.push(flow.rate);
                    self.b.comp_flows.push(f);
                    let (o, n) = (flow.res_off as usize, flow.res_len as usize);
                    for &q in &self.b.res[o..o + n] {
                        let st = &mut self.b.rs[q as usize];
                        if st.mark != stamp {
                            st.mark = stamp;
                            st.cap_left = st.capacity;
                            // At least f.
                            st.count = st.act_len;
                            share = share.min(st.cap_left / st.count as f64);
                            self.b.comp_res.push(q);
                        }
                    }
                }
            }
            self.updates += self.b.comp_flows.len() as u64;
            self.fill(share);
        }
        self.b.dirty = dirty;
        self.b.dirty.clear();
    }

    /// The level at which resource `r` saturates if every flow on it without a rate (just
    /// started) runs at `t` and every other keeps `min(rate, t)`: below it, the starts do
    /// not saturate `r`. See [`Engine::recompute_ends`] for why that bounds what a start
    /// can change.
    fn saturation_level(&mut self, r: u32) -> f64 {
        let st = &self.b.rs[r as usize];
        let (a, len) = (st.act_off as usize, st.act_len as usize);
        self.level_rates.clear();
        let mut starting = 0usize;
        for &f in &self.b.act[a..a + len] {
            match self.b.flows[f as usize].rate {
                x if x > 0.0 => self.level_rates.push(x),
                _ => starting += 1,
            }
        }
        self.slow_visits += len as u64;
        if starting == 0 {
            return f64::INFINITY;
        }
        self.level_rates.sort_unstable_by(f64::total_cmp);
        // Walk up the sorted rates: between the j-th and the next, the j slowest hold their
        // rates and the rest (the starting ones among them) run at t.
        let m = self.level_rates.len();
        let mut held = 0.0;
        for j in 0..m {
            let t = (st.capacity - held) / (m - j + starting) as f64;
            if t <= self.level_rates[j] {
                return t.max(0.0);
            }
            held += self.level_rates[j];
        }
        ((st.capacity - held) / starting as f64).max(0.0)
    }

    /// [`Engine::recompute`] at an instant where the flows that left their data phase were
    /// at least `floor` fast and every flow that entered it starts at or above `floor`
    /// ([`Engine::start_level`]): only the flows at least that fast, and the starting
    /// ones, are re-rated, the slower ones keep their rates and the capacity they hold.
    ///
    /// Why that is exact: in the max-min fair allocation (progressive filling) a flow `f`
    /// freezes at its rate `s_f` when its first resource saturates, so every resource `f`
    /// crosses saturates at level `s_f` or later. Without `f` those resources carry less
    /// and saturate later or never; no other resource changes. The filling below level
    /// `s_f` therefore saturates the same resources at the same levels, and every flow
    /// slower than `s_f` freezes where it did (Bertsekas and Gallager, *Data Networks*,
    /// 2nd ed., section 6.5.2, the bottleneck characterization). With several ended flows
    /// the least of their rates bounds the change. A starting flow `h` adds load only on
    /// its own resources: below the level at which the first of them would saturate with
    /// `h` growing beside the flows already there (each of those at its rate, or the level
    /// if that is lower), the filling saturates the same resources at the same levels as
    /// before, so the flows slower than that level keep their rates too. The flows at
    /// least `floor` fast, with the starting ones (less a
    /// relative 1e-9, so that rounding never leaves out one that could change) then form
    /// a smaller max-min problem on the capacity the slower ones leave, split into its own
    /// connected components, of which only those holding a changed resource change:
    /// each is collected from those resources through the fast flows alone, and filled as
    /// a whole component is. A halo exchange whose many equal messages end in waves of
    /// falling rate re-rates each wave's survivors at that wave, not the whole exchange
    /// (the depth-6 matrix powers exchange of 64^3 Poisson on 4096 ranks of `ito`: see
    /// `castack_plan::DEFAULT_PRICE_LIMIT`). The rates equal the whole recomputation's up
    /// to rounding (the slower flows' capacity is subtracted rather than frozen in), so
    /// the same input still gives the same bits; tests compare the two on every preset.
    ///
    /// Work counted ([`Engine::rate_updates`]): the fast flows re-rated, and the slower
    /// flows visited on their resources at [`SLOW_VISITS_PER_UPDATE`] to an update.
    fn recompute_ends(&mut self, dirty: &[u32], floor: f64) {
        let stamp = self.stamp;
        let now = self.now;
        let fast = floor * (1.0 - 1e-9);
        for &r0 in dirty {
            let st0 = &mut self.b.rs[r0 as usize];
            if st0.mark == stamp || st0.act_len == 0 {
                continue;
            }
            st0.mark = stamp;
            self.b.comp_flows.clear();
            self.b.comp_res.clear();
            self.b.old_rates.clear();
            self.b.comp_res.push(r0);
            let mut slow = 0u64;
            let mut i = 0;
            while i < self.b.comp_res.len() {
                let r = self.b.comp_res[i] as usize;
                i += 1;
                let (a, n) = (self.b.rs[r].act_off as usize, self.b.rs[r].act_len as usize);
                let mut cap = self.b.rs[r].capacity;
                let mut count = 0;
                for &f in &self.b.act[a..a + n] {
                    let flow = &mut self.b.flows[f as usize];
                    if flow.rate < fast && flow.rate > 0.0 {
                        // Keeps its rate: frozen for this filling, holding its capacity (a
                        // flow without a rate has just started: it is re-rated).
                        cap -= flow.rate;
                        flow.frozen = stamp;
                        slow += 1;
                        continue;
                    }
                    count += 1;
                    if flow.mark == stamp {
                        continue;
                    }
                    flow.mark = stamp;
                    flow.remaining -= flow.rate * (now - flow.updated);
                    flow.updated = now;
                    self.b.old_rates.push(flow.rate);
                    self.b.comp_flows.push(f);
                    let (o, n) = (flow.res_off as usize, flow.res_len as usize);
                    for &q in &self.b.res[o..o + n] {
                        let st = &mut self.b.rs[q as usize];
                        if st.mark != stamp {
                            st.mark = stamp;
                            self.b.comp_res.push(q);
                        }
                    }
                }
                let st = &mut self.b.rs[r];
                st.cap_left = cap.max(0.0);
                st.count = count;
            }
            self.updates += self.b.comp_flows.len() as u64;
            self.slow_visits += slow;
            if self.b.comp_flows.is_empty() {
                continue;
            }
            let share = self
                .b
                .comp_res
                .iter()
                .map(|&r| &self.b.rs[r as usize])
                .filter(|st| st.count > 0)
                .map(|st| st.cap_left / st.count as f64)
                .fold(f64::INFINITY, f64::min);
            self.fill(share);
        }
    }

    /// Max-min fair rates for the component in `comp_flows`/`comp_res` (progressive
    /// filling), set up by [`Engine::recompute`] with `share` its first fair share.
    ///
    /// Each round gives every resource's unfrozen flows the round's share if the resource is
    /// saturated when its turn comes in component order (`cap_left / count` within
    /// `share * (1 + 1e-12)`, after the freezes earlier in the round), and the next round's
    /// share is the least `cap_left / count` left. [`Engine::fill_heap`] and
    /// [`Engine::fill_scan`] do exactly this, to the bit; the heap only skips the visits
    /// that cannot freeze anything.
    fn fill(&mut self, share: f64) {
        let now = self.now;
        if let [f] = self.b.comp_flows[..] {
            // One flow alone: the first share is its rate.
            let flow = &mut self.b.flows[f as usize];
            let old = flow.rate;
            flow.rate = share;
            if share != old {
                // A flow with a rate had its end posted at that rate: that event is stale.
                if old > 0.0 {
                    self.stale += 1;
                }
                flow.version += 1;
                let end = now + (flow.remaining.max(0.0) / share);
                let v = flow.version;
                self.push(end, Kind::DataEnd, f, v);
            }
            return;
        }
        let left = self.b.comp_flows.len();
        let heap = self.b.comp_res.len() >= self.fill_heap_min;
        let (left, share) = if heap {
            self.fill_heap(share, left)
        } else {
            (left, Some(share))
        };
        if left > 0 {
            self.fill_scan(share, left);
        }
        let comp = std::mem::take(&mut self.b.comp_flows);
        let old_rates = std::mem::take(&mut self.b.old_rates);
        for (k, &f) in comp.iter().enumerate() {
            let flow = &mut self.b.flows[f as usize];
            if flow.rate != old_rates[k] {
                if old_rates[k] > 0.0 {
                    self.stale += 1;
                }
                flow.version += 1;
                let end = now + (flow.remaining.max(0.0) / flow.rate);
                let v = flow.version;
                self.push(end, Kind::DataEnd, f, v);
            }
        }
        self.b.comp_flows = comp;
        self.b.old_rates = old_rates;
    }

    /// Freeze, at `share`, every flow through resource `r` not yet frozen in this filling:
    /// each resource such a flow crosses gives up `share` of its capacity and one flow, and
    /// `touched` then sees it. Returns how many flows froze. Shared by both fillings, so
    /// they change the same state in the same order.
    #[inline]
    fn freeze_through(
        &mut self,
        r: u32,
        share: f64,
        mut touched: impl FnMut(u32, &ResState),
    ) -> usize {
        let stamp = self.stamp;
        let st = &self.b.rs[r as usize];
        let (a, n) = (st.act_off as usize, st.act_len as usize);
        let mut frozen = 0;
        for &f in &self.b.act[a..a + n] {
            let flow = &mut self.b.flows[f as usize];
            if flow.frozen == stamp {
                continue;
            }
            flow.frozen = stamp;
            flow.rate = share;
            frozen += 1;
            let (o, n) = (flow.res_off as usize, flow.res_len as usize);
            for &q in &self.b.res[o..o + n] {
                let st = &mut self.b.rs[q as usize];
                st.cap_left -= share;
                st.count -= 1;
                touched(q, st);
            }
        }
        frozen
    }

    /// The filling rounds of [`Engine::fill`] by scanning: each round visits every resource
    /// that still has unfrozen flows, in component order. `first` is the first round's share
    /// (`None`: find it); `left` the flows not yet frozen.
    fn fill_scan(&mut self, first: Option<f64>, mut left: usize) {
        // The resources that still have unfrozen flows, in component order: a resource
        // drops out for good once its last flow is frozen, so each round visits only the
        // ones left (on a large component, most are done after the first rounds).
        let mut alive = std::mem::take(&mut self.b.fill_alive);
        alive.clear();
        let rs = &self.b.rs;
        alive.extend(
            self.b
                .comp_res
                .iter()
                .copied()
                .filter(|&r| rs[r as usize].count > 0),
        );
        let mut share = first.unwrap_or(f64::INFINITY);
        let mut known = first.is_some();
        while left > 0 {
            if !known {
                share = f64::INFINITY;
                let rs = &self.b.rs;
                alive.retain(|&r| {
                    let st = &rs[r as usize];
                    if st.count == 0 {
                        return false;
                    }
                    share = share.min(st.cap_left / st.count as f64);
                    true
                });
            }
            known = false;
            let limit = share * (1.0 + 1e-12);
            for &r in &alive {
                let st = &self.b.rs[r as usize];
                if st.count == 0 || st.cap_left / st.count as f64 > limit {
                    continue;
                }
                left -= self.freeze_through(r, share, |_, _| {});
            }
        }
        self.b.fill_alive = alive;
    }

    /// The filling rounds of [`Engine::fill`] with a heap, from the first round with share
    /// `share` and `left` flows not yet frozen: the same rounds as [`Engine::fill_scan`], to
    /// the bit, at a cost set by the freezes rather than by rounds times resources.
    ///
    /// A round of the scan visits every resource with unfrozen flows in component order,
    /// and freezes a resource's flows if it is saturated at its turn. A resource's
    /// `cap_left / count` changes only when a flow through it is frozen (it is *touched*),
    /// so the resources that can be saturated at their turn are those saturated at the
    /// round's start (taken off a min-heap of `cap_left / count`) and those touched earlier
    /// in the round that are saturated after that touch; these are visited in component
    /// order (a second heap), each checked again at its turn exactly as the scan checks it.
    /// A round's share is the least `cap_left / count` (the min-heap's least entry that is
    /// still current); after the round the touched resources get fresh entries.
    ///
    /// Where `f64::min` over the resources and the heap's total order could differ (a share
    /// of zero, a `NaN` ratio), it stops before the round and returns the flows left and the
    /// round's share if known, for [`Engine::fill_scan`] to finish; `(0, None)` when done.
    fn fill_heap(&mut self, mut share: f64, mut left: usize) -> (usize, Option<f64>) {
        let ratio = |st: &ResState| st.cap_left / st.count as f64;
        let mut entries = std::mem::take(&mut self.b.fill_heap).into_vec();
        entries.clear();
        for (p, &r) in self.b.comp_res.iter().enumerate() {
            self.b.fill_pos[r as usize] = p as u32;
            let st = &self.b.rs[r as usize];
            if st.count == 0 {
                continue;
            }
            let x = ratio(st);
            if x.is_nan() {
                self.b.fill_heap = BinaryHeap::from(entries);
                return (left, Some(share));
            }
            entries.push(Reverse((time_key(x), p as u32)));
        }
        let mut heap = BinaryHeap::from(entries);
        let mut due = std::mem::take(&mut self.b.fill_due);
        due.clear();
        let mut touched = std::mem::take(&mut self.b.fill_touched);
        touched.clear();
        let mut round_of = std::mem::take(&mut self.b.fill_round);
        let pos = std::mem::take(&mut self.b.fill_pos);
        round_of.clear();
        round_of.resize(self.b.comp_res.len(), (0, 0));
        let mut round = 0u32;
        let mut next = None;
        loop {
            round += 1;
            if round > 1 {
                // The least current entry; stale ones (the resource was touched or is done
                // since) are dropped on the way.
                share = f64::NAN;
                while let Some(&Reverse((key, p))) = heap.peek() {
                    let st = &self.b.rs[self.b.comp_res[p as usize] as usize];
                    if st.count > 0 && time_key(ratio(st)) == key {
                        share = key_time(key);
                        break;
                    }
                    heap.pop();
                }
            }
            if share == 0.0 || share.is_nan() {
                // `f64::min` may pick either zero; the scan decides.
                next = (round == 1).then_some(share);
                break;
            }
            let limit = share * (1.0 + 1e-12);
            // No ratio is NaN and `limit` is not zero: the total order of keys agrees with
            // `<=` against `limit`.
            let limit_key = time_key(limit);
            while let Some(&Reverse((key, p))) = heap.peek() {
                if key > limit_key {
                    break;
                }
                heap.pop();
                let st = &self.b.rs[self.b.comp_res[p as usize] as usize];
                let slot = &mut round_of[p as usize];
                if st.count > 0 && time_key(ratio(st)) == key && slot.0 != round {
                    slot.0 = round;
                    due.push(Reverse(p));
                }
            }
            while let Some(Reverse(p)) = due.pop() {
                let st = &self.b.rs[self.b.comp_res[p as usize] as usize];
                if st.count == 0 || ratio(st) > limit {
                    continue;
                }
                let r = self.b.comp_res[p as usize];
                left -= self.freeze_through(r, share, |q, st| {
                    let qp = pos[q as usize];
                    let slot = &mut round_of[qp as usize];
                    if slot.1 != round {
                        slot.1 = round;
                        touched.push(qp);
                    }
                    // Its turn is still to come this round: visit it if it is saturated
                    // now (a later touch may undo that; its turn checks again).
                    // Negated as the turn's check is (a NaN ratio counts as saturated).
                    #[allow(clippy::neg_cmp_op_on_partial_ord)]
                    let saturated = !(ratio(st) > limit);
                    if qp > p && slot.0 != round && st.count > 0 && saturated {
                        slot.0 = round;
                        due.push(Reverse(qp));
                    }
                });
            }
            if left == 0 {
                break;
            }
            let mut nan = false;
            for &p in &touched {
                let st = &self.b.rs[self.b.comp_res[p as usize] as usize];
                if st.count > 0 {
                    let x = ratio(st);
                    nan |= x.is_nan();
                    heap.push(Reverse((time_key(x), p)));
                }
            }
            touched.clear();
            if nan {
                break;
            }
        }
        self.b.fill_heap = heap;
        self.b.fill_due = due;
        self.b.fill_touched = touched;
        self.b.fill_round = round_of;
        self.b.fill_pos = pos;
        (left, next)
    }
}

impl Fabric {
    /// Price a set of transfers with contention: the completion time of each (data landed at
    /// the destination), in the order given. The result does not depend on the order of the
    /// list (transfers are posted in a canonical order).
    pub fn price(&self, transfers: &[Transfer]) -> Result<Vec<SimTime>, FabricError> {
        let mut order: Vec<usize> = (0..transfers.len()).collect();
        let key = |t: &Transfer| (t.src, t.dst, t.bytes, t.mechanism);
        order.sort_by(|&a, &b| {
            let (ta, tb) = (&transfers[a], &transfers[b]);
            ta.release
                .total_cmp(&tb.release)
                .then_with(|| key(ta).cmp(&key(tb)))
                .then(a.cmp(&b))
        });
        let mut engine = Engine::new(self);
        let mut ids = vec![0u32; transfers.len()];
        for &i in &order {
            let t = &transfers[i];
            ids[i] = engine.post(t, i, t.release.to_bits())?;
        }
        let mut done = vec![f64::NAN; transfers.len()];
        let mut back = vec![0usize; transfers.len()];
        for (i, &id) in ids.iter().enumerate() {
            back[id as usize] = i;
        }
        while let Some((id, t)) = engine.next_completion() {
            done[back[id as usize]] = t;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{Endpoint, Mechanism, Transfer};

    /// Engines run side by side each leave their buffers; the fabric keeps them (for
    /// engines run in parallel later) up to `KEEP_MAX_BYTES` in all, and hands them out.
    #[test]
    fn a_fabric_keeps_the_buffers_of_parallel_engines_within_its_bound() {
        let fab = Fabric::preset("peach2").unwrap();
        let kept = |f: &Fabric| -> (usize, usize) {
            let v = f.buffers_kept();
            (v.len(), v.iter().map(Buffers::bytes).sum())
        };
        fn busy(f: &Fabric) -> Engine<'_> {
            let mut e = Engine::new(f);
            for i in 0..64 {
                let t = Transfer::new(
                    Endpoint::host(i % 16),
                    Endpoint::host((i + 3) % 16),
                    4096,
                    Mechanism::Auto,
                );
                e.post(&t, i, i as u64).unwrap();
            }
            while e.next_completion().is_some() {}
            e
        }
        let (a, b, c) = (busy(&fab), busy(&fab), busy(&fab));
        assert_eq!(kept(&fab).0, 0);
        drop((a, b, c));
        let (n, bytes) = kept(&fab);
        assert_eq!(n, 3);
        assert!(bytes > 0 && bytes <= Buffers::KEEP_MAX_BYTES);
        // Taken back one by one.
        let (a, b) = (Engine::new(&fab), Engine::new(&fab));
        assert_eq!(kept(&fab).0, 1);
        drop((a, b));
        assert_eq!(kept(&fab).0, 3);
        // A set that does not fit beside the others is freed, not kept.
        let mut big = Buffers::default();
        big.res
            .reserve_exact(Buffers::KEEP_MAX_BYTES / 4 - bytes / 8);
        let big_bytes = big.bytes();
        assert!(
            big_bytes <= Buffers::KEEP_MAX_BYTES && big_bytes + bytes > Buffers::KEEP_MAX_BYTES
        );
        fab.give_buffers(big);
        assert_eq!(kept(&fab).0, 3);
        // Alone it fits.
        let fresh = fab.clone();
        assert_eq!(kept(&fresh).0, 0, "a clone keeps no buffers");
        let mut big = Buffers::default();
        big.res
            .reserve_exact(Buffers::KEEP_MAX_BYTES / 4 - bytes / 8);
        fresh.give_buffers(big);
        assert_eq!(kept(&fresh).0, 1);
        // The first set's per-resource records do not count: a fabric larger than the
        // bound keeps one set; a second such set does not fit.
        let huge = || {
            let mut b = Buffers::default();
            b.rs.reserve_exact(Buffers::KEEP_MAX_BYTES / std::mem::size_of::<ResState>() + 1);
            assert!(b.record_bytes() > Buffers::KEEP_MAX_BYTES);
            b
        };
        let other = fab.clone();
        other.give_buffers(huge());
        assert_eq!(kept(&other).0, 1);
        other.give_buffers(huge());
        assert_eq!(kept(&other).0, 1);
        other.give_buffers(Buffers::default());
        assert_eq!(kept(&other).0, 2, "small sets still fit beside it");
    }

    /// Every completion (flow, time bits) of `transfers` in order, every component of at
    /// least `fill_heap_min` resources filled by the heap (`usize::MAX`: all by scanning).
    fn run(fab: &Fabric, transfers: &[Transfer], fill_heap_min: usize) -> Vec<(u32, u64)> {
        run_with(fab, transfers, fill_heap_min, COMPACT_MIN).0
    }

    /// [`run`] with a compaction threshold; also returns the most events ever pending.
    fn run_with(
        fab: &Fabric,
        transfers: &[Transfer],
        fill_heap_min: usize,
        compact_min: usize,
    ) -> (Vec<(u32, u64)>, usize) {
        let mut e = Engine::new(fab);
        e.compact_min = compact_min;
        e.fill_heap_min = fill_heap_min;
        for (i, t) in transfers.iter().enumerate() {
            e.post(t, i, 0).expect("valid transfer");
        }
        let mut out = Vec::new();
        let mut peak = 0;
        while let Some((f, t)) = e.next_completion() {
            out.push((f, t.to_bits()));
            peak = peak.max(e.b.buckets.iter().map(Vec::len).sum::<usize>());
        }
        (out, peak)
    }

    /// Dropping stale ends changes no bit, and bounds what is pending: n flows of
    /// different sizes from one node share its injection link, so every end re-rates all
    /// the others (n^2 / 2 stale ends without compaction).
    #[test]
    fn compaction_changes_no_bit_and_bounds_pending_events() {
        let fab = Fabric::preset("ofp").expect("preset");
        let n = 400;
        let transfers: Vec<Transfer> = (0..n)
            .map(|i| {
                let mut t = Transfer::new(
                    Endpoint::host(0),
                    Endpoint::host(1 + i),
                    4096 + 64 * i as u64,
                    Mechanism::Auto,
                );
                t.release = 1e-7 * (i % 7) as f64;
                t
            })
            .collect();
        let (never, peak_never) = run_with(&fab, &transfers, FILL_HEAP_MIN, usize::MAX);
        let (always, peak_always) = run_with(&fab, &transfers, FILL_HEAP_MIN, 1);
        assert_eq!(never, always);
        assert!(
            peak_never > 20 * n,
            "the case piles up stale ends: {peak_never}"
        );
        assert!(
            peak_always <= 4 * n,
            "pending events {peak_always} for {n} flows"
        );
    }

    /// Stamps that wrap around in the middle of a run change no bit: the records the run
    /// uses keep their active lists, the ones it has not used yet (left over, with lists,
    /// from a run dropped half-way) are still reset at their first use.
    #[test]
    fn stamps_wrapping_mid_run_change_no_bit() {
        let fab = Fabric::preset("ofp").expect("preset");
        let host = Endpoint::host;
        // A long flow 0 -> 1 in flight when the stamps wrap, joined on node 1's resources
        // by a flow 4 -> 1 after the wrap; meanwhile small flows 2 -> 3.. end one by one (each
        // end a recomputation of their own component, not of the long flow's).
        let mut transfers = vec![
            Transfer::new(host(0), host(1), 64 << 20, Mechanism::Auto),
            Transfer::new(host(4), host(1), 1 << 20, Mechanism::Auto).at(5e-5),
        ];
        transfers.extend((0..200).map(|i| {
            Transfer::new(
                host(2),
                host(3 + i % 7),
                4096 + 64 * i as u64,
                Mechanism::Auto,
            )
            .at(1e-7 * i as f64)
        }));
        let n = transfers.len();
        let fresh = Fabric::preset("ofp").expect("preset");
        let (reference, _) = run_with(&fresh, &transfers, FILL_HEAP_MIN, COMPACT_MIN);
        // A run dropped with flows in their data phase leaves records with lists.
        {
            let mut e = Engine::new(&fab);
            for (i, t) in transfers.iter().enumerate() {
                e.post(t, i, 0).expect("valid transfer");
            }
            let mut seen = 0;
            while seen < n / 3 {
                e.next_completion().expect("not done yet");
                seen += 1;
            }
            assert!(e.b.rs.iter().any(|r| r.act_len > 0), "lists left over");
        }
        let mut e = Engine::new(&fab);
        assert!(
            e.b.rs.iter().any(|r| r.act_len > 0),
            "the records are reused"
        );
        e.stamp = u32::MAX - 4;
        e.run_base = e.stamp;
        for (i, t) in transfers.iter().enumerate() {
            e.post(t, i, 0).expect("valid transfer");
        }
        let mut out = Vec::new();
        while let Some((f, t)) = e.next_completion() {
            out.push((f, t.to_bits()));
        }
        assert!(e.stamp < 1000, "the stamps wrapped: {}", e.stamp);
        assert_eq!(out, reference);
    }

    /// The heap filling and the scanning filling give the same completions to the bit, on
    /// large contended components with simultaneous releases.
    #[test]
    fn fill_heap_is_fill_scan_to_the_bit() {
        let fab = Fabric::preset("tofu-fx10").expect("preset");
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for (n, nodes) in [(300usize, 64u64), (800, 256), (1500, 512)] {
            let transfers: Vec<Transfer> = (0..n)
                .map(|_| {
                    let a = (rnd() % nodes) as usize;
                    let b = ((a as u64 + 1 + rnd() % (nodes - 1)) % nodes) as usize;
                    let bytes = [8, 4096, 65_536, 1 << 20][(rnd() % 4) as usize] + rnd() % 977;
                    let mut t =
                        Transfer::new(Endpoint::host(a), Endpoint::host(b), bytes, Mechanism::Auto);
                    t.release = (rnd() % 4) as f64 * 1e-6;
                    t
                })
                .collect();
            let scan = run(&fab, &transfers, usize::MAX);
            assert_eq!(scan.len(), n);
            // The heap on every component of two resources or more, and from the default.
            for min in [2, FILL_HEAP_MIN] {
                assert_eq!(
                    run(&fab, &transfers, min),
                    scan,
                    "{n} transfers on {nodes} nodes, heap from {min} resources"
                );
            }
        }
    }
}
