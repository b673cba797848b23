//! The plain data of a fabric config: the serde types of the `configs/fabrics/*.toml`
//! sections (and [`MemoryKind`], which names their memories), below the topology and the
//! mechanisms that read them; they depend on nothing in the crate but the error type.
//!
//! Each is re-exported by the module that documents it: [`crate::config`] (the fabric and
//! its ports, topology, memories, PIO, DMA and protocols), [`crate::compute`],
//! [`crate::two_sided`], [`crate::software`] and [`crate::fabric`] ([`MemoryKind`]).

use serde::{Deserialize, Serialize};

use crate::error::FabricError;

/// A whole fabric: ports, topology, memories, mechanisms and message protocols.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricConfig {
    /// Short name (`peach2`).
    pub name: String,
    /// One line saying what is modeled.
    pub description: String,
    /// The ports of a node (and of a switch, for switched topologies).
    pub ports: Vec<PortConfig>,
    /// The port that connects a node's host (CPU and GPU memory) to its network chip; all
    /// traffic to and from memory crosses it. Omitted: the host side is no bottleneck of its
    /// own beyond the memory bandwidths.
    #[serde(default)]
    pub host_port: Option<String>,
    /// How nodes are wired.
    pub topology: TopologyConfig,
    /// Cost of forwarding a packet through an intermediate node or switch (added once per
    /// vertex a route passes through, not at its ends).
    pub forward_us: f64,
    /// Memory bandwidths as seen by the network side of a node.
    pub memory: MemoryConfig,
    /// Programmed I/O (CPU stores to remote memory); omitted when the fabric has none.
    #[serde(default)]
    pub pio: Option<PioConfig>,
    /// DMA engines (communication devices).
    pub dma: DmaConfig,
    /// A node's total injection limit over all its devices; omitted: none beyond the
    /// devices and ports.
    #[serde(default)]
    pub injection_gbs: Option<f64>,
    /// Size-dependent message protocols for transfers that touch GPU memory (eager vs
    /// rendezvous, GDRCopy, GPUDirect RDMA, ...), ordered by `max_bytes`. Empty: DMA
    /// `start_us` applies to every size.
    #[serde(default)]
    pub gpu_protocols: Vec<ProtocolConfig>,
    /// The device (compute) model of a node: how long local work takes (see
    /// [`crate::compute`]); omitted: compute cannot be priced on this fabric.
    #[serde(default)]
    pub compute: Option<ComputeConfig>,
    /// Two-sided messages over one-sided puts (see [`crate::two_sided`]); omitted: a 64 B
    /// address notification with no extra overhead.
    #[serde(default)]
    pub two_sided: TwoSidedConfig,
    /// The communication library's per-call and per-step CPU costs (see
    /// [`crate::software`]); omitted: none.
    #[serde(default)]
    pub software: Option<SoftwareConfig>,
    /// System noise: periodic CPU detours per node (see [`crate::software`]); omitted: none.
    #[serde(default)]
    pub noise: Option<NoiseConfig>,
    /// Several devices per node, joined inside the node by a switch of their own (see
    /// [`crate::topology`], "Several devices per node"); omitted: every fabric node is a
    /// node of its own.
    #[serde(default)]
    pub intra_node: Option<IntraNodeConfig>,
}

/// The `[intra_node]` table: nodes of several devices (GPUs, or sockets), each device a
/// node of the fabric (an endpoint with its own memories, network interface and DMA
/// devices, and one rank), joined inside their node by a switch per memory kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntraNodeConfig {
    /// Devices per node (at least 2): fabric nodes `g * devices .. (g + 1) * devices` are
    /// the devices of node g. The topology's node count must be a multiple of it.
    pub devices: usize,
    /// The path between host memories of two devices of one node (MPI's shared-memory
    /// path, a CPU copy).
    pub host: IntraLinkConfig,
    /// The path of transfers touching GPU memory between two devices of one node (NVLink
    /// through NVSwitch); omitted: `host`'s.
    #[serde(default)]
    pub gpu: Option<IntraLinkConfig>,
}

/// One intra-node path: every device's link to the node's switch (a port: bandwidth per
/// direction and latency), the switch's forwarding cost and the start cost of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntraLinkConfig {
    /// The port of each device's link to the node's switch (an entry of `ports`).
    pub port: String,
    /// Cost of starting one message on this path (in place of `dma.start_us` and the
    /// `gpu_protocols` entries, which describe the network's stack).
    pub start_us: f64,
    /// Cost of forwarding through the node's switch (in place of `forward_us`).
    pub switch_us: f64,
}

/// One named port of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Port name, referenced by the topology (`E`).
    pub name: String,
    /// Bandwidth per direction.
    pub bandwidth_gbs: f64,
    /// Latency of the link leaving this port, per direction.
    pub latency_us: f64,
}

/// How nodes are wired. Port fields name entries of [`FabricConfig::ports`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TopologyConfig {
    /// `nodes` in a bidirectional ring: port `next` of node i is cabled to port `prev` of
    /// node i+1 (mod nodes).
    Ring {
        /// Number of nodes (at least 2).
        nodes: usize,
        /// Port towards node i+1.
        next: String,
        /// Port towards node i-1.
        prev: String,
    },
    /// The HA-PACS/TCA sub-cluster: two rings of `columns` nodes (node = row * columns +
    /// column); port `east` of (r, c) is cabled to port `west` of (r, c+1); port `south`, when
    /// present, pairs (0, c) with (1, c). Without `south` the two rings are not joined and the
    /// config is rejected as disconnected.
    Torus2xn {
        /// Nodes per ring (at least 2).
        columns: usize,
        /// Port towards column c+1.
        east: String,
        /// Port towards column c-1.
        west: String,
        /// Port to the other ring.
        #[serde(default)]
        south: Option<String>,
    },
    /// An n-D torus (every dimension wraps). Node id = x0 + d0 * (x1 + d1 * (x2 + ...)).
    Torus {
        /// Size of each dimension.
        dims: Vec<usize>,
        /// `[plus, minus]` port names per dimension; a dimension without an entry has no
        /// links (rejected as disconnected when its size is above 1).
        ports: Vec<[String; 2]>,
    },
    /// An n-D mesh (no wrap-around); otherwise as [`TopologyConfig::Torus`].
    Mesh {
        /// Size of each dimension.
        dims: Vec<usize>,
        /// `[plus, minus]` port names per dimension.
        ports: Vec<[String; 2]>,
    },
    /// A full-bisection two-level fat tree of `radix`-port switches (one switch when
    /// `nodes <= radix`): leaves with radix/2 nodes and radix/2 uplinks, one to each of
    /// radix/2 spines.
    FatTree {
        /// Number of nodes.
        nodes: usize,
        /// Ports per switch (even, at least 2).
        radix: usize,
        /// The node port (and the kind of every switch port).
        port: String,
    },
    /// One non-blocking switch with a link to every node.
    Crossbar {
        /// Number of nodes.
        nodes: usize,
        /// The node port.
        port: String,
    },
}

/// Memory bandwidths of both kinds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Host (CPU) memory.
    pub host: MemoryBandwidth,
    /// GPU memory; omitted when the nodes have no GPU reachable by the fabric.
    #[serde(default)]
    pub gpu: Option<MemoryBandwidth>,
}

/// How fast the network side reads and writes one memory of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryBandwidth {
    /// Read bandwidth (the source side of a DMA).
    pub read_gbs: f64,
    /// Write bandwidth (the destination side).
    pub write_gbs: f64,
}

/// Programmed I/O: the CPU stores the payload to remote memory itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PioConfig {
    /// Fixed cost of one PIO message between adjacent nodes, before its bytes.
    pub start_us: f64,
    /// Store rate of the CPU into remote memory (the per-byte cost).
    pub bandwidth_gbs: f64,
    /// Largest message the automatic mechanism choice sends by PIO (an MPI library's eager
    /// limit, where a preset models its small-message protocol as PIO); omitted: any size
    /// where PIO is the cheaper. An explicitly requested PIO transfer is not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

/// The DMA engines (communication devices) of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaConfig {
    /// Communication devices per node, each able to drive any link.
    pub devices: u32,
    /// Channels (independent descriptor queues) per device.
    pub channels: u32,
    /// Bandwidth of one device; omitted: the device is no bottleneck of its own.
    #[serde(default)]
    pub device_gbs: Option<f64>,
    /// Whether several puts issued together on one device form ONE chain started by one
    /// command (TCA chaining DMA). Without chaining each put is its own command.
    pub chaining: bool,
    /// Whether a device keeps one queue per destination node (InfiniBand reliable
    /// connections: messages to different peers proceed concurrently, to one peer in order)
    /// instead of one per channel.
    #[serde(default)]
    pub queue_per_peer: bool,
    /// Cost of starting a chain (one command), between adjacent nodes, before its first
    /// descriptor.
    pub start_us: f64,
    /// Fixed cost of processing each descriptor (message) on its queue.
    pub descriptor_us: f64,
    /// Extra cost of each descriptor fetched from host memory rather than held in registers.
    pub descriptor_fetch_us: f64,
    /// Descriptors per channel that fit in on-chip registers (hardware limit).
    #[serde(default)]
    pub register_slots: u32,
    /// How many descriptors of each chain the driver places in registers (0: all are fetched
    /// from host memory); at most `register_slots`.
    #[serde(default)]
    pub descriptors_in_registers: u32,
}

/// A message protocol used up to a size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolConfig {
    /// Name (`gdrcopy-eager`).
    pub name: String,
    /// Largest message using it; omitted on the last entry (all larger sizes).
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Cost of starting one message with this protocol, replacing `dma.start_us`.
    pub start_us: f64,
    /// How fast this protocol's agent reads the source GPU memory (the HCA by GPUDirect
    /// RDMA, a CPU-driven copy, a copy engine: the agent differs by protocol); omitted:
    /// `memory.gpu.read_gbs`. A resource of the node shared by the messages of this
    /// protocol in flight.
    #[serde(default)]
    pub gpu_read_gbs: Option<f64>,
    /// Eager copies through a host buffer (MVAPICH2's eager protocol, GDRCopy's CPU-driven
    /// copies): a GPU source is first copied into host memory at this protocol's GPU read
    /// rate (part of the start cost), the message is then sent host to host, and a GPU
    /// destination copies it out of its host buffer at `memory.gpu.write_gbs` (part of the
    /// tail). Omitted: false, the message moves between the memories directly.
    #[serde(default)]
    pub copy_via_host: bool,
}

/// The compute devices of a node, by memory kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeConfig {
    /// The CPU side: work on host memory.
    pub host: DeviceModel,
    /// The GPU a rank drives: work on GPU memory; omitted when the nodes have no GPU.
    #[serde(default)]
    pub gpu: Option<DeviceModel>,
}

/// One compute device as a roofline with a launch latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceModel {
    /// Memory bandwidth the device's kernels reach (GB/s, 10^9 bytes per second).
    pub mem_bandwidth_gbs: f64,
    /// Floating-point rate (GFlop/s).
    pub gflops: f64,
    /// Cost of launching one kernel (microseconds); 0 for CPU code called directly.
    pub launch_us: f64,
    /// Bandwidth of the link between host and device memory (GB/s), for the copies a GPU
    /// rank makes (halo staging, reduction results); omitted for a CPU, whose memory is the
    /// host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link_gbs: Option<f64>,
    /// Cost of one host-device copy beyond its bytes (microseconds); with `host_link_gbs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link_us: Option<f64>,
    /// Latency of one floating-point addition that waits for the previous one (ns), for
    /// the fixed-order sums of the kernels run one after another on one core (see the
    /// module doc); omitted: sums are not latency-bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_latency_ns: Option<f64>,
    /// Bandwidth of a sparse matrix-vector product's indexed reads from memory (GB/s);
    /// omitted: `mem_bandwidth_gbs` (see the module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spmv_bandwidth_gbs: Option<f64>,
    /// Cache levels in ascending size (see the module doc); empty: every working set is
    /// priced at `mem_bandwidth_gbs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caches: Vec<CacheLevel>,
}

/// One level of a device's memory hierarchy, as one process's kernels see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheLevel {
    /// Name (`L2`), for messages and reports.
    pub name: String,
    /// The largest working set this level holds (bytes): a node's capacity of the level
    /// as one process uses it (private levels summed over the cores a process runs on).
    pub size_bytes: u64,
    /// Bandwidth of streaming kernels on a working set this level holds (GB/s).
    pub bandwidth_gbs: f64,
    /// Bandwidth of a sparse matrix-vector product on such a working set (GB/s); omitted:
    /// `bandwidth_gbs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spmv_bandwidth_gbs: Option<f64>,
}
/// The `[two_sided]` table of a fabric config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TwoSidedConfig {
    /// Whether a receive must notify its address to the sender before the data put
    /// (default true). False where the mechanism costs already include the handshake.
    pub notify: bool,
    /// Size of the address notification put (default 64 B).
    pub notify_bytes: u64,
    /// Software cost of a notification on top of its put: writing the slot, the sender's
    /// polling and matching (microseconds, default 0).
    pub notify_overhead_us: f64,
}

impl Default for TwoSidedConfig {
    fn default() -> Self {
        Self {
            notify: true,
            notify_bytes: 64,
            notify_overhead_us: 0.0,
        }
    }
}
/// Per-call and per-step CPU costs of the communication library, per rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftwareConfig {
    /// CPU time a rank spends entering a collective call, before its first step.
    #[serde(default)]
    pub call_us: f64,
    /// CPU time a rank spends entering each step, before the step's puts are issued.
    #[serde(default)]
    pub step_us: f64,
}

/// Periodic detours of each node's CPU at a seeded phase per node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoiseConfig {
    /// Time from one detour's start to the next, on one node.
    pub period_us: f64,
    /// Length of one detour (less than `period_us`).
    pub detour_us: f64,
    /// Seed of the per-node phases.
    #[serde(default)]
    pub seed: u64,
}

/// Kind of memory at an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    /// Host (CPU) memory.
    Host,
    /// GPU memory, reached by GPUDirect RDMA.
    Gpu,
}

impl FabricConfig {
    /// A [`FabricError::Invalid`] naming this config and `field`.
    pub(crate) fn invalid(&self, field: &str, reason: impl Into<String>) -> FabricError {
        FabricError::Invalid {
            config: self.name.clone(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// Index of a named port, or an error naming the field that referenced it.
    pub(crate) fn port_index(&self, field: &str, name: &str) -> Result<usize, FabricError> {
        self.ports
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.ports.iter().map(|p| p.name.as_str()).collect();
                self.invalid(
                    field,
                    format!("unknown port `{name}` (ports: {})", known.join(", ")),
                )
            })
    }
}
