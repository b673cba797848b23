//! The fabric: a validated config with its topology, the transfer type, and the cost model of
//! each mechanism.
//!
//! # Cost of one transfer
//!
//! A transfer of `m` bytes has three phases:
//!
//! 1. **overhead** (no bandwidth used): PIO: `pio.start_us`. DMA: the queue's costs when the
//!    descriptor is taken: `dma.start_us` once per chain (replaced by the matching
//!    `gpu_protocols` entry's `start_us` when an endpoint is GPU memory), plus
//!    `dma.descriptor_us` per descriptor, plus `dma.descriptor_fetch_us` per descriptor not
//!    held in registers (the first `dma.descriptors_in_registers` of each chain are). A DMA
//!    queue (one per device channel, or per destination with `queue_per_peer`) takes one
//!    descriptor at a time: the next one's overhead starts when the previous one's data has
//!    left.
//! 2. **data**: the bytes flow through every resource on their way, sharing each with the
//!    other transfers in their data phase (max-min fair, see [`crate::engine`]). Resources:
//!    the source memory's read bandwidth (DMA) or the CPU store rate (`pio.bandwidth_gbs`,
//!    PIO), the source's host port, the DMA device (`dma.device_gbs`), the node injection cap
//!    (`injection_gbs`, when the transfer leaves the node), every link of the route, the
//!    destination's host port and the destination memory's write bandwidth.
//! 3. **tail**: the route's latency, the sum of its links' latencies plus `forward_us` for
//!    every vertex it passes through (hops - 1).
//!
//! Between two devices of one node (`[intra_node]`, see [`crate::topology`]) a transfer takes
//! the node's path of its memory kind instead: overhead the path's `start_us` (no GPU
//! protocol), data through the source memory, the path's two links and the destination
//! memory (no DMA device, host port or injection cap: the network interface is not used),
//! tail the two links' latencies and the path's `switch_us`.
//!
//! Alone on the fabric a transfer therefore takes `overhead + m / min(bandwidths) + tail`:
//! the latency-bandwidth model the point-to-point calibration figures are stated in.
//! Mechanisms (CALIBRATION.md "TCA / PEACH2", "InfiniBand QDR", "Tofu"):
//!
//! - **PIO**: CPU stores to remote host memory; host memory at both ends only ("CPU to CPU
//!   only"); low fixed cost, small per-byte rate, so it loses above a crossover size. Where
//!   `pio.max_bytes` is given, the automatic choice sends nothing larger by PIO: a preset
//!   measured under MPI models the library's eager protocol as PIO up to its limit and the
//!   large-message protocol as DMA (`krylov calibrate --backend mpi`).
//! - **DMA**: engines with channels, descriptors chained and started by one command,
//!   descriptor fetch from host memory vs on-chip registers (at most `register_slots`);
//!   reaches GPU memory (GPUDirect RDMA), whose reads over PCIe are slower than host reads.
//!   Block-stride transfers are one descriptor moving `m` bytes: the model prices them like a
//!   contiguous descriptor of the same size.
//! - **protocols**: for stacks with size-dependent protocols on GPU memory (MVAPICH2-GDR:
//!   GDRCopy eager up to 16 KB, GPUDirect RDMA rendezvous up to 512 KB, host-staged
//!   rendezvous above) the entry matching the size sets the chain start cost, and may set
//!   how the GPU memory is reached: `gpu_read_gbs`, the rate of the agent that reads the
//!   source GPU in that protocol (a node resource of its own, shared by that protocol's
//!   messages in flight, in place of the memory's read bandwidth); `copy_via_host`, eager
//!   copies through host buffers: the source GPU's data is copied into host memory first
//!   (`m / read rate`, added to every message's overhead, chained or not), the data phase moves host memory to host
//!   memory, and a GPU destination copies it out (`m / memory.gpu.write_gbs`, added to the
//!   tail). Alone on the fabric an eager GPU-to-GPU message therefore takes
//!   `start + m / gpu read + m / min(host path) + m / gpu write + tail`: the copies are serial
//!   with the send (store and forward).

use crate::budget::MemBudget;
use crate::buffers::{Buffers, QueueKey};
use crate::config::FabricConfig;
use crate::error::FabricError;
use crate::topology::{IntraPath, LinkId, Path, Topology};

pub use crate::spec::MemoryKind;

/// Simulated time in seconds.
pub type SimTime = f64;

/// One end of a transfer: a memory of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// Node index.
    pub node: usize,
    /// Which memory.
    pub memory: MemoryKind,
}

impl Endpoint {
    /// Host memory of `node`.
    pub fn host(node: usize) -> Self {
        Self {
            node,
            memory: MemoryKind::Host,
        }
    }

    /// GPU memory of `node`.
    pub fn gpu(node: usize) -> Self {
        Self {
            node,
            memory: MemoryKind::Gpu,
        }
    }
}

/// How a transfer is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// CPU stores (host memory at both ends).
    Pio,
    /// A DMA descriptor on `device`'s `channel` of the source node (with `queue_per_peer`
    /// the channel is ignored: the queue is the destination's).
    Dma {
        /// Communication device index.
        device: u32,
        /// Channel index on that device.
        channel: u32,
    },
    /// The faster of PIO (when possible, and the message no larger than `pio.max_bytes`
    /// where given) and DMA on device 0, channel 0, judged by the uncontended cost on this
    /// route.
    Auto,
}

/// One transfer to price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    /// Source memory.
    pub src: Endpoint,
    /// Destination memory.
    pub dst: Endpoint,
    /// Payload size.
    pub bytes: u64,
    /// Mechanism.
    pub mechanism: Mechanism,
    /// When the transfer is issued (seconds). DMA transfers released at the same time on the
    /// same queue form one chain (one start command), in the order of their sort key.
    pub release: SimTime,
}

impl Transfer {
    /// A transfer released at time 0.
    pub fn new(src: Endpoint, dst: Endpoint, bytes: u64, mechanism: Mechanism) -> Self {
        Self {
            src,
            dst,
            bytes,
            mechanism,
            release: 0.0,
        }
    }

    /// The same transfer released at `t`.
    pub fn at(mut self, t: SimTime) -> Self {
        self.release = t;
        self
    }
}

/// Where each resource of a node sits in the node's block of resources (after the links).
///
/// The ones a host-memory DMA transfer uses, the commonest kind, come first (memory read
/// and write, injection cap, the devices), so that their records in the engine (32 bytes
/// each) are adjacent: two or three cache lines for a transfer's four, where they were
/// spread over five. The block is padded to an even length, so every node's block starts at
/// the same place in a line pair.
#[derive(Debug, Clone, Copy)]
struct Slots {
    host_read: usize,
    host_write: usize,
    injection_cap: usize,
    device0: usize,
    inject: usize,
    eject: usize,
    gpu_read: usize,
    gpu_write: usize,
    pio: usize,
    /// The first slot of the rated GPU protocols' read rates.
    protocols: usize,
}

impl Slots {
    fn new(devices: usize) -> Self {
        let after = 3 + devices;
        Self {
            host_read: 0,
            host_write: 1,
            injection_cap: 2,
            device0: 3,
            inject: after,
            eject: after + 1,
            gpu_read: after + 2,
            gpu_write: after + 3,
            pio: after + 4,
            protocols: after + 5,
        }
    }

    /// Slots per node for `rated` protocol read rates: even.
    fn per_node(&self, rated: usize) -> usize {
        (self.protocols + rated).next_multiple_of(2)
    }

    /// The node slots of a memory's read (data leaving) and write (data landing)
    /// bandwidths.
    fn memory(&self, memory: MemoryKind) -> (usize, usize) {
        match memory {
            MemoryKind::Host => (self.host_read, self.host_write),
            MemoryKind::Gpu => (self.gpu_read, self.gpu_write),
        }
    }
}

/// A transfer resolved against the fabric: what the engine needs.
#[derive(Debug, Clone)]
pub(crate) struct FlowSpec {
    /// `Some(queue)` for DMA, `None` for PIO.
    pub(crate) queue: Option<QueueKey>,
    /// Chain start cost (DMA) or message cost (PIO), seconds.
    pub(crate) start: f64,
    /// Overhead of this message alone, paid by every descriptor of a chain (a protocol's
    /// copy out of GPU memory into a host buffer), seconds.
    pub(crate) copy: f64,
    /// Tail latency, seconds.
    pub(crate) tail: f64,
}

/// A validated fabric, ready to route and price.
///
/// Besides the config's own memory ([`FabricConfig::memory_bytes`], which counts one set of
/// an engine's per-resource records) a fabric keeps, between pricing runs, the buffers of
/// engines dropped on it for the next engines to reuse: at most 64 MiB besides the first
/// set's records, memory those runs held at their peak anyway.
#[derive(Debug, Clone)]
pub struct Fabric {
    config: FabricConfig,
    topology: Topology,
    /// Capacity of every resource in bytes per second (`INFINITY` = not modeled).
    capacity: Vec<f64>,
    /// Latency of every link in seconds (the topology's, packed for the tail sums).
    link_latency: Vec<f64>,
    per_node: usize,
    /// The layout of a node's resources.
    slots: Slots,
    /// Per node slot: whether its capacity is finite (the same on every node), so that
    /// resolving a transfer reads no per-resource capacity.
    slot_finite: Vec<bool>,
    /// The node slot of each `gpu_protocols` entry with its own GPU read rate.
    protocol_read: Vec<Option<usize>>,
    /// Per intra-node path (host, then GPU if given): its message start and switch
    /// forwarding costs, seconds.
    intra_costs: Vec<(f64, f64)>,
    /// The buffers dropped engines left for the next ones.
    buffers: BufferPool,
    /// Whether engines re-rate whole components at instants of ends only
    /// ([`Fabric::with_whole_recomputation`]).
    whole_recomputation: bool,
}

/// Engines' buffers kept between runs ([`Buffers`]), at most [`Buffers::KEEP_MAX_BYTES`]
/// in all. A clone of the fabric starts without any: they are scratch, not state.
#[derive(Default)]
struct BufferPool(std::sync::Mutex<Vec<Buffers>>);

impl Clone for BufferPool {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BufferPool")
    }
}

impl Fabric {
    /// Build a fabric from a config (validated again here, within the default memory
    /// budget, [`MemBudget::system_default`]).
    pub fn new(config: FabricConfig) -> Result<Self, FabricError> {
        Self::new_within(config, MemBudget::system_default())
    }

    /// Build a fabric from a config validated within `budget`
    /// ([`FabricConfig::validate_within`]): what the config's sizes make it allocate is
    /// checked before anything is.
    pub fn new_within(config: FabricConfig, budget: MemBudget) -> Result<Self, FabricError> {
        config.validate_within(budget)?;
        let topology = Topology::build(&config)?;
        let devices = config.dma.devices as usize;
        let slots = Slots::new(devices);
        let per_node = slots.per_node(config.rated_gpu_protocols());
        let mut capacity: Vec<f64> = topology.links().iter().map(|l| l.bandwidth).collect();
        let gbs = |x: Option<f64>| x.map_or(f64::INFINITY, |b| b * 1e9);
        let gpu = config.memory.gpu.as_ref();
        let host_port = config
            .host_port
            .as_ref()
            .map(|h| {
                config
                    .ports
                    .iter()
                    .find(|p| &p.name == h)
                    .map(|p| p.bandwidth_gbs)
            })
            .unwrap_or(None);
        let mut node = vec![f64::INFINITY; per_node];
        node[slots.host_read] = config.memory.host.read_gbs * 1e9;
        node[slots.host_write] = config.memory.host.write_gbs * 1e9;
        node[slots.gpu_read] = gbs(gpu.map(|g| g.read_gbs));
        node[slots.gpu_write] = gbs(gpu.map(|g| g.write_gbs));
        node[slots.inject] = gbs(host_port);
        node[slots.eject] = gbs(host_port);
        node[slots.pio] = gbs(config.pio.as_ref().map(|p| p.bandwidth_gbs));
        node[slots.injection_cap] = gbs(config.injection_gbs);
        for d in 0..devices {
            node[slots.device0 + d] = gbs(config.dma.device_gbs);
        }
        let mut next = slots.protocols;
        let protocol_read = config
            .gpu_protocols
            .iter()
            .map(|p| {
                p.gpu_read_gbs.map(|r| {
                    node[next] = r * 1e9;
                    next += 1;
                    next - 1
                })
            })
            .collect();
        let slot_finite = node.iter().map(|c| c.is_finite()).collect();
        for _ in 0..topology.nodes() {
            capacity.extend_from_slice(&node);
        }
        let link_latency = topology.links().iter().map(|l| l.latency).collect();
        let intra_costs = config
            .intra_node
            .iter()
            .flat_map(|c| std::iter::once(&c.host).chain(&c.gpu))
            .map(|p| (p.start_us * 1e-6, p.switch_us * 1e-6))
            .collect();
        Ok(Self {
            config,
            topology,
            capacity,
            link_latency,
            per_node,
            slots,
            slot_finite,
            protocol_read,
            intra_costs,
            buffers: BufferPool::default(),
            whole_recomputation: false,
        })
    }

    /// The same fabric, its engines re-rating every flow of a component at every instant
    /// that changes it, the reference way.
    ///
    /// By default an instant at which flows only end (none start) re-rates only the flows
    /// at least as fast as the slowest that ended, the only ones the end can change in the
    /// max-min fair allocation (`Engine::recompute_ends` in `engine.rs`). Both give the same
    /// rates up to rounding (tests hold every preset to a relative 1e-12); the reference is
    /// far slower on exchanges of many messages in flight together, and is what the
    /// bit-pinning tests of the engine's results record.
    pub fn with_whole_recomputation(mut self) -> Self {
        self.whole_recomputation = true;
        self
    }

    /// Whether [`Fabric::with_whole_recomputation`] made this fabric.
    pub fn recomputes_whole(&self) -> bool {
        self.whole_recomputation
    }

    /// A fabric from an embedded preset.
    pub fn preset(name: &str) -> Result<Self, FabricError> {
        Self::new(FabricConfig::preset(name)?)
    }

    /// The config it was built from.
    pub fn config(&self) -> &FabricConfig {
        &self.config
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.topology.nodes()
    }

    /// The fixed route from node `src` to node `dst`.
    ///
    /// # Panics
    /// If a node is out of range.
    #[track_caller]
    pub fn route(&self, src: usize, dst: usize) -> Path {
        self.topology.route(src, dst)
    }

    /// Buffers an engine left on this fabric, the last kept first (none: fresh ones).
    pub(crate) fn take_buffers(&self) -> Buffers {
        // A thread that panicked while holding the lock left the list whole (a push or a
        // pop either happened or not), and buffers are cleared (resource records reset
        // lazily) before use.
        let mut kept = self.buffers.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.pop().unwrap_or_default()
    }

    /// Keep an engine's buffers for a later engine, if they fit within
    /// [`Buffers::KEEP_MAX_BYTES`] with the sets kept already; otherwise they are freed
    /// (after the lock is released).
    ///
    /// The per-resource records of the first set kept are not held against the bound:
    /// they are as large as the fabric (36 bytes a resource, counted in
    /// [`crate::FabricConfig::memory_bytes`]), and without them a fabric of more than
    /// about 1.9 million resources would build its records afresh at every run. Further
    /// sets, for engines run side by side, count whole.
    pub(crate) fn give_buffers(&self, b: Buffers) {
        let mut kept = self.buffers.0.lock().unwrap_or_else(|e| e.into_inner());
        let held = kept.iter().map(Buffers::bytes).sum::<usize>()
            - kept.first().map_or(0, Buffers::record_bytes);
        let bytes = b.bytes() - if kept.is_empty() { b.record_bytes() } else { 0 };
        if held.saturating_add(bytes) <= Buffers::KEEP_MAX_BYTES {
            kept.push(b);
        }
    }

    /// The buffers kept now (tests).
    #[cfg(test)]
    pub(crate) fn buffers_kept(&self) -> std::sync::MutexGuard<'_, Vec<Buffers>> {
        self.buffers.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn capacity(&self) -> &[f64] {
        &self.capacity
    }

    /// Tail latency of the route between two nodes, seconds: an intra-node route crosses
    /// its path's switch (`switch_us`), a network route `forward_us` per vertex passed.
    fn tail_of(&self, links: &[LinkId]) -> f64 {
        let lat: f64 = links.iter().map(|&l| self.link_latency[l as usize]).sum();
        match links.first().and_then(|&l| self.topology.intra_path_of(l)) {
            Some(k) => lat + self.intra_costs[k].1,
            None => lat + links.len().saturating_sub(1) as f64 * self.config.forward_us * 1e-6,
        }
    }

    /// The intra-node path of a transfer between two devices of one node, with its start
    /// cost (seconds); `None` for a transfer over the network (or within one device).
    fn intra_path(&self, t: &Transfer) -> Option<(IntraPath, f64)> {
        if !self.topology.same_node(t.src.node, t.dst.node) {
            return None;
        }
        let touches_gpu = t.src.memory == MemoryKind::Gpu || t.dst.memory == MemoryKind::Gpu;
        let (path, k) = if touches_gpu && self.intra_costs.len() > 1 {
            (IntraPath::Gpu, 1)
        } else {
            (IntraPath::Host, 0)
        };
        Some((path, self.intra_costs[k].0))
    }

    /// Check a transfer and resolve `Auto`; `index` names it in errors.
    pub(crate) fn check(&self, t: &Transfer, index: usize) -> Result<Mechanism, FabricError> {
        let err = |reason: String| FabricError::Transfer { index, reason };
        let n = self.nodes();
        for e in [t.src, t.dst] {
            if e.node >= n {
                return Err(err(format!("node {} out of range ({n} nodes)", e.node)));
            }
            if self.config.memory_of(e.memory).is_none() {
                return Err(err(format!(
                    "node {} has no GPU memory on this fabric",
                    e.node
                )));
            }
        }
        if !(t.release.is_finite() && t.release >= 0.0) {
            return Err(err(format!("release time {} is not >= 0", t.release)));
        }
        let pio_ok = self.config.pio.is_some()
            && t.src.memory == MemoryKind::Host
            && t.dst.memory == MemoryKind::Host;
        match t.mechanism {
            Mechanism::Pio if self.config.pio.is_none() => {
                Err(err("this fabric has no PIO".to_string()))
            }
            Mechanism::Pio if !pio_ok => {
                Err(err("PIO moves host memory to host memory only".to_string()))
            }
            Mechanism::Dma { device, channel } => {
                let d = &self.config.dma;
                if device >= d.devices {
                    Err(err(format!(
                        "DMA device {device} (the fabric has {})",
                        d.devices
                    )))
                } else if channel >= d.channels {
                    Err(err(format!(
                        "DMA channel {channel} (a device has {})",
                        d.channels
                    )))
                } else {
                    Ok(t.mechanism)
                }
            }
            Mechanism::Auto => {
                let dma = Mechanism::Dma {
                    device: 0,
                    channel: 0,
                };
                let eager = self
                    .config
                    .pio
                    .as_ref()
                    .and_then(|p| p.max_bytes)
                    .is_none_or(|max| t.bytes <= max);
                if pio_ok && eager {
                    let mut scratch = Vec::new();
                    let tp = self.estimate_resolved(t, Mechanism::Pio, &mut scratch);
                    let td = self.estimate_resolved(t, dma, &mut scratch);
                    Ok(if tp < td { Mechanism::Pio } else { dma })
                } else {
                    Ok(dma)
                }
            }
            Mechanism::Pio => Ok(Mechanism::Pio),
        }
    }

    /// Resolve a checked transfer with a concrete mechanism into its resources (appended to
    /// `res`) and costs.
    pub(crate) fn resolve(&self, t: &Transfer, mech: Mechanism, res: &mut Vec<u32>) -> FlowSpec {
        let base = self.topology.links().len();
        let node_res = |node: usize, slot: usize| (base + node * self.per_node + slot) as u32;
        let (s, d) = (t.src.node, t.dst.node);
        let sl = &self.slots;
        // A node slot's capacity is finite on every node or on none.
        let push = |res: &mut Vec<u32>, node: usize, slot: usize| {
            if self.slot_finite[slot] {
                res.push(node_res(node, slot));
            }
        };
        let start_len = res.len();
        let intra = self.intra_path(t);
        // The memory each end's data phase touches, and the copies of a protocol that goes
        // through host buffers (before the data phase at the source, after it at the
        // destination).
        let (mut src_slot, mut dst_slot) = (sl.memory(t.src.memory).0, sl.memory(t.dst.memory).1);
        let (mut copy_out, mut copy_in) = (0.0, 0.0);
        let (queue, start) = match mech {
            Mechanism::Pio => {
                push(res, s, sl.pio);
                let p = self.config.pio.as_ref().expect("checked: fabric has PIO");
                (None, p.start_us * 1e-6)
            }
            Mechanism::Dma { device, channel } => {
                let touches_gpu =
                    t.src.memory == MemoryKind::Gpu || t.dst.memory == MemoryKind::Gpu;
                // The network stack's protocols do not apply inside a node.
                let protocol = self
                    .config
                    .gpu_protocol(t.bytes)
                    .filter(|_| touches_gpu && intra.is_none());
                let start = protocol.map_or(self.config.dma.start_us, |(_, p)| p.start_us) * 1e-6;
                let start = intra.map_or(start, |(_, s)| s);
                if let Some((i, p)) = protocol {
                    let read = self.protocol_read[i];
                    if p.copy_via_host {
                        let copy = |node: usize, slot: usize| {
                            t.bytes as f64 / self.capacity[node_res(node, slot) as usize]
                        };
                        if t.src.memory == MemoryKind::Gpu {
                            copy_out = copy(s, read.unwrap_or(sl.gpu_read));
                            src_slot = sl.host_read;
                        }
                        if t.dst.memory == MemoryKind::Gpu {
                            copy_in = copy(d, sl.gpu_write);
                            dst_slot = sl.host_write;
                        }
                    } else if t.src.memory == MemoryKind::Gpu {
                        src_slot = read.unwrap_or(sl.gpu_read);
                    }
                }
                push(res, s, src_slot);
                if intra.is_none() {
                    push(res, s, sl.device0 + device as usize);
                }
                let lane = if self.config.dma.queue_per_peer {
                    d as u32
                } else {
                    channel
                };
                (Some((s as u32, device, lane)), start)
            }
            Mechanism::Auto => unreachable!("Auto is resolved by check"),
        };
        // A transfer inside a node crosses neither the network interface's host port nor
        // the injection cap.
        if intra.is_none() {
            push(res, s, sl.inject);
            if s != d {
                push(res, s, sl.injection_cap);
            }
        }
        let links_at = res.len();
        let path = intra.map_or(IntraPath::Host, |(p, _)| p);
        self.topology.route_path_into(s, d, path, res);
        let tail = self.tail_of(&res[links_at..]) + copy_in;
        if intra.is_none() {
            push(res, d, sl.eject);
        }
        push(res, d, dst_slot);
        debug_assert!(res.len() > start_len, "every flow has a memory resource");
        FlowSpec {
            queue,
            start,
            copy: copy_out,
            tail,
        }
    }

    /// Per-descriptor overhead of DMA descriptor `index` of a chain, seconds.
    pub(crate) fn descriptor_cost(&self, index: u32) -> f64 {
        let d = &self.config.dma;
        let fetch = if index < d.descriptors_in_registers {
            0.0
        } else {
            d.descriptor_fetch_us
        };
        (d.descriptor_us + fetch) * 1e-6
    }

    fn estimate_resolved(&self, t: &Transfer, mech: Mechanism, res: &mut Vec<u32>) -> f64 {
        res.clear();
        let spec = self.resolve(t, mech, res);
        let rate = res
            .iter()
            .map(|&r| self.capacity[r as usize])
            .fold(f64::INFINITY, f64::min);
        let pre = spec.start
            + match spec.queue {
                Some(_) => self.descriptor_cost(0),
                None => 0.0,
            }
            + spec.copy;
        let data = if t.bytes == 0 {
            0.0
        } else {
            t.bytes as f64 / rate
        };
        pre + data + spec.tail
    }

    /// Time a transfer takes alone on an idle fabric (seconds from its release to its
    /// completion), as a single-descriptor chain for DMA.
    pub fn estimate(&self, t: &Transfer) -> Result<SimTime, FabricError> {
        let mech = self.check(t, 0)?;
        Ok(self.estimate_resolved(t, mech, &mut Vec::new()))
    }

    /// The mechanism `Auto` picks for this transfer (or the given one, checked).
    pub fn resolve_mechanism(&self, t: &Transfer) -> Result<Mechanism, FabricError> {
        self.check(t, 0)
    }
}
