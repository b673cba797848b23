//! Fabric configuration: the serde model of `configs/fabrics/*.toml`, its validation, and the
//! embedded presets.
//!
//! Units are spelled in the field names: `_us` microseconds, `_gbs` GB/s (10^9 bytes per
//! second), `_bytes` bytes. A config is checked completely when it is loaded
//! ([`FabricConfig::from_toml_str`], [`FabricConfig::preset`], [`FabricConfig::validate`]):
//! every problem is reported as one line naming the field, and the topology is built once to
//! prove that every node reaches every other.

use serde::{Deserialize, Serialize};

use crate::budget::MemBudget;
use crate::compute::ComputeConfig;
use crate::error::FabricError;
use crate::fabric::MemoryKind;
use crate::software::{NoiseConfig, SoftwareConfig};
use crate::topology::{Counts, Topology};
use crate::two_sided::TwoSidedConfig;

/// The presets embedded in the crate, by name, with their TOML text.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "peach2",
        include_str!("../../../configs/fabrics/peach2.toml"),
    ),
    (
        "ib-qdr",
        include_str!("../../../configs/fabrics/ib-qdr.toml"),
    ),
    (
        "tofu-fx10",
        include_str!("../../../configs/fabrics/tofu-fx10.toml"),
    ),
    ("fx100", include_str!("../../../configs/fabrics/fx100.toml")),
    ("ito", include_str!("../../../configs/fabrics/ito.toml")),
    ("ofp", include_str!("../../../configs/fabrics/ofp.toml")),
];

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

impl FabricConfig {
    /// Parse and validate a config from TOML text, within the default memory budget
    /// ([`MemBudget::system_default`]).
    pub fn from_toml_str(text: &str) -> Result<Self, FabricError> {
        Self::from_toml_str_within(text, MemBudget::system_default())
    }

    /// Parse and validate a config from TOML text; the fabric it describes must fit
    /// `budget` ([`FabricConfig::validate_within`]).
    pub fn from_toml_str_within(text: &str, budget: MemBudget) -> Result<Self, FabricError> {
        let cfg: FabricConfig = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            FabricError::Parse(format!("{}{at}", e.message().replace('\n', " ")))
        })?;
        cfg.validate_within(budget)?;
        Ok(cfg)
    }

    /// An embedded preset by name (see [`PRESETS`]).
    pub fn preset(name: &str) -> Result<Self, FabricError> {
        let (_, text) =
            PRESETS
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| FabricError::UnknownPreset {
                    name: name.to_string(),
                    known: PRESETS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        Self::from_toml_str(text)
    }

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

    /// Check every field and that the topology is connected, within the default memory
    /// budget ([`MemBudget::system_default`]).
    pub fn validate(&self) -> Result<(), FabricError> {
        self.validate_within(MemBudget::system_default())
    }

    /// Bytes a [`crate::Fabric`] of this config and a pricing [`crate::Engine`] on it
    /// allocate by the config's sizes (topology, per-node resources and DMA queues),
    /// counted before anything is built; `None` when the count overflows 64 bits.
    pub fn memory_bytes(&self) -> Option<u64> {
        let counts = Counts::of(&self.topology)?;
        let devices = u64::from(self.dma.devices);
        let channels = u64::from(self.dma.channels);
        // Per resource: its capacity (f64), the engine's record of it (32 bytes) and its
        // place in a component being filled (u32). Per node: one resource per fixed slot,
        // per device and per rated protocol (padded to an even count), and the engine's DMA
        // queue slots (u32).
        let per_resource = 8 + 32 + 4;
        let rated = self.rated_gpu_protocols() as u64;
        let resources = devices
            .checked_add(crate::fabric::PER_NODE_FIXED as u64)?
            .checked_add(rated)?
            .checked_add(1)?;
        let per_node = resources
            .checked_mul(per_resource)?
            .checked_add(devices.checked_mul(channels)?.checked_mul(4)?)?;
        // Per link: its latency (f64) and what every resource has, besides the topology's
        // own link record.
        counts
            .bytes()?
            .checked_add(counts.links.checked_mul(8 + per_resource)?)?
            .checked_add(counts.nodes.checked_mul(per_node)?)
    }

    /// Check every field, that the fabric's structures fit `budget`
    /// ([`FabricConfig::memory_bytes`]) and the 32-bit link and slot ids, then that the
    /// topology is connected (building it).
    ///
    /// # Errors
    /// [`FabricError::Invalid`] for a bad field or a topology too large for 32-bit ids,
    /// [`FabricError::OverBudget`] when the fabric would not fit `budget`.
    pub fn validate_within(&self, budget: MemBudget) -> Result<(), FabricError> {
        if self.ports.is_empty() {
            return Err(self.invalid("ports", "at least one port is needed"));
        }
        for (i, p) in self.ports.iter().enumerate() {
            positive(self, &format!("ports[{i}].bandwidth_gbs"), p.bandwidth_gbs)?;
            non_negative(self, &format!("ports[{i}].latency_us"), p.latency_us)?;
            if self.ports[..i].iter().any(|q| q.name == p.name) {
                return Err(self.invalid(
                    &format!("ports[{i}].name"),
                    format!("duplicate port `{}`", p.name),
                ));
            }
        }
        if let Some(h) = &self.host_port {
            self.port_index("host_port", h)?;
        }
        non_negative(self, "forward_us", self.forward_us)?;
        positive(self, "memory.host.read_gbs", self.memory.host.read_gbs)?;
        positive(self, "memory.host.write_gbs", self.memory.host.write_gbs)?;
        if let Some(g) = &self.memory.gpu {
            positive(self, "memory.gpu.read_gbs", g.read_gbs)?;
            positive(self, "memory.gpu.write_gbs", g.write_gbs)?;
        }
        if let Some(p) = &self.pio {
            non_negative(self, "pio.start_us", p.start_us)?;
            positive(self, "pio.bandwidth_gbs", p.bandwidth_gbs)?;
        }
        let d = &self.dma;
        if d.devices == 0 {
            return Err(self.invalid("dma.devices", "must be at least 1"));
        }
        if d.channels == 0 {
            return Err(self.invalid("dma.channels", "must be at least 1"));
        }
        if let Some(b) = d.device_gbs {
            positive(self, "dma.device_gbs", b)?;
        }
        non_negative(self, "dma.start_us", d.start_us)?;
        non_negative(self, "dma.descriptor_us", d.descriptor_us)?;
        non_negative(self, "dma.descriptor_fetch_us", d.descriptor_fetch_us)?;
        if d.descriptors_in_registers > d.register_slots {
            return Err(self.invalid(
                "dma.descriptors_in_registers",
                format!(
                    "{} descriptors exceed the register limit of {} per channel (dma.register_slots)",
                    d.descriptors_in_registers, d.register_slots
                ),
            ));
        }
        if let Some(b) = self.injection_gbs {
            positive(self, "injection_gbs", b)?;
        }
        if let Some(sw) = &self.software {
            non_negative(self, "software.call_us", sw.call_us)?;
            non_negative(self, "software.step_us", sw.step_us)?;
        }
        if let Some(n) = &self.noise {
            positive(self, "noise.period_us", n.period_us)?;
            non_negative(self, "noise.detour_us", n.detour_us)?;
            if n.detour_us >= n.period_us {
                return Err(self.invalid(
                    "noise.detour_us",
                    format!(
                        "a detour of {} us leaves no CPU time in a period of {} us",
                        n.detour_us, n.period_us
                    ),
                ));
            }
        }
        let n = self.gpu_protocols.len();
        for (i, p) in self.gpu_protocols.iter().enumerate() {
            let field = format!("gpu_protocols[{i}]");
            non_negative(self, &format!("{field}.start_us"), p.start_us)?;
            if let Some(r) = p.gpu_read_gbs {
                positive(self, &format!("{field}.gpu_read_gbs"), r)?;
            }
            match (p.max_bytes, i + 1 == n) {
                (None, false) => {
                    return Err(self.invalid(
                        &format!("{field}.max_bytes"),
                        "only the last protocol may omit max_bytes",
                    ))
                }
                (Some(m), true) => {
                    return Err(self.invalid(
                        &format!("{field}.max_bytes"),
                        format!("the last protocol must omit max_bytes (messages above {m} bytes would have none)"),
                    ))
                }
                _ => {}
            }
            if i > 0 && p.max_bytes.is_some() && p.max_bytes <= self.gpu_protocols[i - 1].max_bytes
            {
                return Err(self.invalid(
                    &format!("{field}.max_bytes"),
                    "must be larger than the previous protocol's",
                ));
            }
        }
        if n > 0 && self.memory.gpu.is_none() {
            return Err(self.invalid("gpu_protocols", "given but memory.gpu is absent"));
        }
        if let Some(c) = &self.compute {
            let invalid = |field: &str, reason: String| self.invalid(field, reason);
            c.host.validate("compute.host", &invalid)?;
            if let Some(g) = &c.gpu {
                if self.memory.gpu.is_none() {
                    return Err(self.invalid("compute.gpu", "given but memory.gpu is absent"));
                }
                g.validate("compute.gpu", &invalid)?;
            }
        }
        let ts = &self.two_sided;
        non_negative(self, "two_sided.notify_overhead_us", ts.notify_overhead_us)?;
        // Sizes before anything is built: a 60-byte TOML can declare a billion nodes.
        let counts = Counts::of(&self.topology);
        let nodes = counts.map_or_else(|| "more than 2^64".to_owned(), |c| c.nodes.to_string());
        budget
            .check_opt(format!("the fabric of {nodes} nodes"), self.memory_bytes())
            .map_err(|error| FabricError::OverBudget {
                config: self.name.clone(),
                error,
            })?;
        if let Some(c) = counts {
            // Link and slot ids are u32, `u32::MAX` marking an absent slot.
            if c.links >= u64::from(u32::MAX) || c.slots >= u64::from(u32::MAX) {
                return Err(self.invalid(
                    "topology",
                    format!(
                        "{} nodes need {} links, more than 32-bit link ids can number",
                        c.nodes, c.links
                    ),
                ));
            }
        }
        Topology::build(self)?;
        Ok(())
    }

    /// The protocol (its index and entry) of a message of `bytes` touching GPU memory, if
    /// the config has protocols.
    pub(crate) fn gpu_protocol(&self, bytes: u64) -> Option<(usize, &ProtocolConfig)> {
        self.gpu_protocols
            .iter()
            .enumerate()
            .find(|(_, p)| p.max_bytes.is_none_or(|m| bytes <= m))
    }

    /// How many `gpu_protocols` entries read GPU memory at their own rate (each is a
    /// resource of every node).
    pub(crate) fn rated_gpu_protocols(&self) -> usize {
        self.gpu_protocols
            .iter()
            .filter(|p| p.gpu_read_gbs.is_some())
            .count()
    }

    /// Bandwidths of a memory kind, if the fabric reaches it.
    pub(crate) fn memory_of(&self, kind: MemoryKind) -> Option<&MemoryBandwidth> {
        match kind {
            MemoryKind::Host => Some(&self.memory.host),
            MemoryKind::Gpu => self.memory.gpu.as_ref(),
        }
    }
}

fn positive(cfg: &FabricConfig, field: &str, v: f64) -> Result<(), FabricError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(cfg.invalid(field, format!("must be a positive finite number, got {v}")))
    }
}

fn non_negative(cfg: &FabricConfig, field: &str, v: f64) -> Result<(), FabricError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(cfg.invalid(field, format!("must be a finite number >= 0, got {v}")))
    }
}
