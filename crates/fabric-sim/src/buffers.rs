//! The records and scratch buffers of an [`Engine`](crate::engine::Engine): flows, resources,
//! events and DMA queues, kept by a fabric between runs.
//!
//! They depend on nothing above them, so a [`crate::Fabric`] can keep them
//! ([`Buffers`]) while the engine, which reads the fabric, sits above it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// An absent flow, queue or event bucket (`u32::MAX`).
pub(crate) const NONE: u32 = u32::MAX;

/// A DMA queue: (source node, device, channel or destination node).
pub(crate) type QueueKey = (u32, u32, u32);

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
pub(crate) enum Kind {
    /// The transfer is issued.
    Release,
    /// Its overhead is over: it enters the fluid.
    Activate,
    /// Its last byte has left (valid if the version matches).
    DataEnd,
    /// Its data has landed.
    Complete,
}

/// An event without its time (its bucket's) and sequence (its place in the bucket).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event {
    pub(crate) kind: Kind,
    pub(crate) flow: u32,
    pub(crate) version: u32,
}

/// What the rate computation reads and writes of a flow: one cache line.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub(crate) struct Flow {
    pub(crate) remaining: f64,
    pub(crate) rate: f64,
    pub(crate) updated: f64,
    pub(crate) res_off: u32,
    pub(crate) res_len: u32,
    pub(crate) version: u32,
    /// Component-search stamp.
    pub(crate) mark: u32,
    /// Filling stamp: frozen in the current filling when equal to the engine's stamp.
    pub(crate) frozen: u32,
}

/// The rest of a flow: its costs and its DMA queue.
#[derive(Debug, Clone)]
pub(crate) struct FlowMeta {
    pub(crate) tail: f64,
    pub(crate) start: f64,
    /// Overhead of this message alone, whether or not it starts a chain.
    pub(crate) copy: f64,
    pub(crate) tag: u64,
    pub(crate) queue: u32,
    /// Next flow waiting on the same DMA queue (`NONE`: last).
    pub(crate) next_waiting: u32,
}

/// The state of one fabric resource, indexed by the fabric's own resource index: 32 bytes,
/// aligned, so a visit touches one cache line and two records share none.
#[derive(Debug, Default, Clone)]
#[repr(C, align(32))]
pub(crate) struct ResState {
    /// Its capacity, bytes per second (the fabric's, set when the record is made).
    pub(crate) capacity: f64,
    /// Capacity not yet given out in the current filling.
    pub(crate) cap_left: f64,
    /// Unfrozen flows through it in the current filling.
    pub(crate) count: u32,
    /// Component-search stamp; below the run's first stamp
    /// ([`Engine::run_base`](crate::engine::Engine::run_base)) the record's active list is left over from
    /// an earlier run (reset at first activation).
    pub(crate) mark: u32,
    /// Flows in their data phase through this resource: `act[act_off..act_off + act_len]`,
    /// with room for `act[act_off - 1]` (`act_off == 0`: no room yet).
    pub(crate) act_off: u32,
    pub(crate) act_len: u32,
}

#[derive(Debug)]
pub(crate) struct Queue {
    /// First and last waiting flows (`NONE`: empty), linked by `FlowMeta::next_waiting`.
    pub(crate) head: u32,
    pub(crate) last: u32,
    pub(crate) busy: bool,
    pub(crate) started_any: bool,
    pub(crate) tag: u64,
    pub(crate) index: u32,
}

impl Default for Queue {
    fn default() -> Self {
        Self {
            head: NONE,
            last: NONE,
            busy: false,
            started_any: false,
            tag: 0,
            index: 0,
        }
    }
}

/// The buffers of an [`Engine`](crate::engine::Engine), handed back to its fabric when the engine is
/// dropped and taken by the next [`Engine::new`](crate::engine::Engine::new) on that fabric.
///
/// A run of thousands of transfers fills megabytes of flows, resources and events. Freed at
/// the end of each run, that memory went back to the system and the next run faulted it in
/// again, page by page: on `price_allreduce` (15 runs of 49,152 transfers) 39,500 page
/// faults, about a seventh of its time. Only the capacity is reused: every buffer is
/// cleared before a run, except the per-resource records, whose left-over lists a run
/// resets at its first use of each (by stamp), so no bit of a result depends on an earlier
/// run (`stamps_wrapping_mid_run_change_no_bit`, and the integration test
/// `a_run_on_reused_buffers_prices_the_bits_of_a_fresh_fabric`). A
/// fabric keeps the sets of engines dropped on it (several, for engines run in parallel),
/// at most [`Buffers::KEEP_MAX_BYTES`] in all.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    pub(crate) flows: Vec<Flow>,
    pub(crate) meta: Vec<FlowMeta>,
    /// Resources of every flow (fabric resource indices), `res_off..res_off + res_len` per
    /// flow.
    pub(crate) res: Vec<u32>,
    /// Per fabric resource: its state. Kept across runs (only what a run touches is reset,
    /// lazily, see [`ResState::mark`]), so a run costs nothing per resource it does not use.
    pub(crate) rs: Vec<ResState>,
    /// The last stamp used on `rs` (the next run starts above it).
    pub(crate) stamp: u32,
    /// Arena of the per-resource active lists, each after a slot holding its room.
    pub(crate) act: Vec<u32>,
    /// Distinct pending event times (as `time_key`s of engine.rs), earliest first.
    pub(crate) times: BinaryHeap<Reverse<u64>>,
    /// Bucket of each pending time.
    pub(crate) bucket_of: IntMap<u64, u32>,
    /// Event buckets, by id; retired ones are kept empty for reuse.
    pub(crate) buckets: Vec<Vec<Event>>,
    pub(crate) free_buckets: Vec<u32>,
    /// DMA queue ids: by (node, device, channel) without `queue_per_peer`, else hashed.
    pub(crate) queue_slots: Vec<u32>,
    pub(crate) queue_ids: IntMap<QueueKey, u32>,
    pub(crate) queues: Vec<Queue>,
    pub(crate) dirty: Vec<u32>,
    pub(crate) comp_flows: Vec<u32>,
    pub(crate) comp_res: Vec<u32>,
    pub(crate) old_rates: Vec<f64>,
    /// Scratch of [`Engine::fill_scan`](crate::engine::Engine::fill_scan): the component's resources that
    /// still have unfrozen flows.
    pub(crate) fill_alive: Vec<u32>,
    /// Scratch of [`Engine::fill_heap`](crate::engine::Engine::fill_heap): (fair-share key, component
    /// place) of the resources with unfrozen flows, least first; entries whose key is no longer the
    /// resource's are stale and dropped when they surface.
    pub(crate) fill_heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Scratch of [`Engine::fill_heap`](crate::engine::Engine::fill_heap): the places to visit in the
    /// current round, least first.
    pub(crate) fill_due: BinaryHeap<Reverse<u32>>,
    /// Scratch of [`Engine::fill_heap`](crate::engine::Engine::fill_heap), per component place: the round
    /// it was queued for a visit in, and the round it was last touched in.
    pub(crate) fill_round: Vec<(u32, u32)>,
    /// Scratch of [`Engine::fill_heap`](crate::engine::Engine::fill_heap): the places touched in the
    /// current round.
    pub(crate) fill_touched: Vec<u32>,
    /// Scratch of [`Engine::fill_heap`](crate::engine::Engine::fill_heap), per fabric resource: its place
    /// in the component being filled (`comp_res`), valid for that component's resources only.
    pub(crate) fill_pos: Vec<u32>,
}

impl Buffers {
    /// The most a fabric keeps, all its sets together (bytes of capacity, [`Buffers::bytes`]):
    /// `price_allreduce`'s runs of 49,152 transfers leave 11.7 MB (about 240 bytes a
    /// transfer), so this keeps the buffers of runs up to about 280,000 transfers; what does
    /// not fit goes back to the system.
    pub(crate) const KEEP_MAX_BYTES: usize = 64 << 20;

    /// Bytes of capacity held: the vectors' and heaps' elements, and the hash maps' entries
    /// with their one control byte each (the allocators' own overhead is not counted).
    pub(crate) fn bytes(&self) -> usize {
        fn b<T>(v: &Vec<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        fn m<K, V>(v: &IntMap<K, V>) -> usize {
            v.capacity() * (std::mem::size_of::<(K, V)>() + 1)
        }
        fn h<T>(v: &BinaryHeap<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        b(&self.flows)
            + b(&self.meta)
            + b(&self.res)
            + b(&self.rs)
            + b(&self.act)
            + h(&self.times)
            + m(&self.bucket_of)
            + b(&self.buckets)
            + self.buckets.iter().map(b).sum::<usize>()
            + b(&self.free_buckets)
            + b(&self.queue_slots)
            + m(&self.queue_ids)
            + b(&self.queues)
            + b(&self.dirty)
            + b(&self.comp_flows)
            + b(&self.comp_res)
            + b(&self.old_rates)
            + b(&self.fill_alive)
            + h(&self.fill_heap)
            + h(&self.fill_due)
            + b(&self.fill_round)
            + b(&self.fill_touched)
            + b(&self.fill_pos)
    }

    /// Bytes of capacity held by the per-resource records (`rs`, `fill_pos`): the part of
    /// [`Buffers::bytes`] the size of the fabric, not of the runs.
    pub(crate) fn record_bytes(&self) -> usize {
        self.rs.capacity() * std::mem::size_of::<ResState>()
            + self.fill_pos.capacity() * std::mem::size_of::<u32>()
    }

    /// Empty every buffer, keeping its capacity; every event bucket is free. The resource
    /// records stay: a run resets those it uses (see [`ResState::mark`]).
    pub(crate) fn clear(&mut self) {
        self.flows.clear();
        self.meta.clear();
        self.res.clear();
        self.act.clear();
        self.times.clear();
        self.bucket_of.clear();
        self.buckets.iter_mut().for_each(Vec::clear);
        self.free_buckets.clear();
        self.free_buckets.extend(0..self.buckets.len() as u32);
        self.queue_slots.clear();
        self.queue_ids.clear();
        self.queues.clear();
        self.dirty.clear();
        self.comp_flows.clear();
        self.comp_res.clear();
        self.old_rates.clear();
        self.fill_alive.clear();
        self.fill_heap.clear();
        self.fill_due.clear();
        self.fill_round.clear();
        self.fill_touched.clear();
    }
}
