//! Fabric configuration: the serde model of `configs/fabrics/*.toml`, its validation, and the
//! embedded presets.
//!
//! Units are spelled in the field names: `_us` microseconds, `_gbs` GB/s (10^9 bytes per
//! second), `_bytes` bytes. A config is checked completely when it is loaded
//! ([`FabricConfig::from_toml_str`], [`FabricConfig::preset`], [`FabricConfig::validate`]):
//! every problem is reported as one line naming the field, and the topology is built once to
//! prove that every node reaches every other.

use crate::budget::MemBudget;
use crate::error::FabricError;
use crate::spec::{DeviceModel, MemoryKind};
use crate::topology::{Counts, Topology};

// The model's types live in `spec.rs`, below the topology that validation builds.
pub use crate::spec::{
    DmaConfig, FabricConfig, IntraLinkConfig, IntraNodeConfig, MemoryBandwidth, MemoryConfig,
    PioConfig, PortConfig, ProtocolConfig, TopologyConfig,
};

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
    (
        "dgx-h100",
        include_str!("../../../configs/fabrics/dgx-h100.toml"),
    ),
    (
        "genoa-ndr",
        include_str!("../../../configs/fabrics/genoa-ndr.toml"),
    ),
];

/// Fixed resources per node besides its DMA devices (memory read and write for host and
/// GPU, host port in and out, PIO unit, injection cap: the fixed slots of a node's block in
/// the fabric, `Slots` in `fabric.rs`), for [`FabricConfig::memory_bytes`].
pub(crate) const PER_NODE_FIXED: usize = 8;

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

    /// Check every field and that the topology is connected, within the default memory
    /// budget ([`MemBudget::system_default`]).
    pub fn validate(&self) -> Result<(), FabricError> {
        self.validate_within(MemBudget::system_default())
    }

    /// Bytes a [`crate::Fabric`] of this config and a pricing [`crate::Engine`] on it
    /// allocate by the config's sizes (topology, per-node resources and DMA queues),
    /// counted before anything is built; `None` when the count overflows 64 bits.
    pub fn memory_bytes(&self) -> Option<u64> {
        let counts = Counts::of(&self.topology)?.with_intra(self.intra_node.as_ref())?;
        let devices = u64::from(self.dma.devices);
        let channels = u64::from(self.dma.channels);
        // Per resource: its capacity (f64), the engine's record of it (32 bytes) and its
        // place in a component being filled (u32). Per node: one resource per fixed slot,
        // per device and per rated protocol (padded to an even count), and the engine's DMA
        // queue slots (u32).
        let per_resource = 8 + 32 + 4;
        let rated = self.rated_gpu_protocols() as u64;
        let resources = devices
            .checked_add(PER_NODE_FIXED as u64)?
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
        if let Some(c) = &self.intra_node {
            let mut paths = vec![("intra_node.host", &c.host)];
            if let Some(g) = &c.gpu {
                paths.push(("intra_node.gpu", g));
            }
            for (field, p) in paths {
                non_negative(self, &format!("{field}.start_us"), p.start_us)?;
                non_negative(self, &format!("{field}.switch_us"), p.switch_us)?;
            }
            if c.gpu.is_some() && self.memory.gpu.is_none() {
                return Err(self.invalid("intra_node.gpu", "given but memory.gpu is absent"));
            }
        }
        let counts =
            Counts::of(&self.topology).and_then(|c| c.with_intra(self.intra_node.as_ref()));
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

impl DeviceModel {
    pub(crate) fn validate(
        &self,
        field: &str,
        invalid: &dyn Fn(&str, String) -> FabricError,
    ) -> Result<(), FabricError> {
        let check = |name: &str, v: f64, zero: bool| {
            in_range(name, v, zero).map_err(|why| invalid(&format!("{field}.{name}"), why))
        };
        match (self.host_link_gbs, self.host_link_us) {
            (None, None) => {}
            (Some(gbs), Some(us)) => {
                check("host_link_gbs", gbs, false)?;
                check("host_link_us", us, true)?;
            }
            _ => {
                return Err(invalid(
                    &format!("{field}.host_link_gbs"),
                    "host_link_gbs and host_link_us come together".into(),
                ))
            }
        }
        check("mem_bandwidth_gbs", self.mem_bandwidth_gbs, false)?;
        check("gflops", self.gflops, false)?;
        if let Some(v) = self.spmv_bandwidth_gbs {
            check("spmv_bandwidth_gbs", v, false)?;
        }
        if let Some(v) = self.add_latency_ns {
            check("add_latency_ns", v, false)?;
        }
        let mut below = 0u64;
        for (i, c) in self.caches.iter().enumerate() {
            let at = format!("{field}.caches[{i}]");
            if c.size_bytes <= below {
                return Err(invalid(
                    &format!("{at}.size_bytes"),
                    format!(
                        "must be above 0 and above the previous level's ({below}), got {}",
                        c.size_bytes
                    ),
                ));
            }
            below = c.size_bytes;
            check(
                &format!("caches[{i}].bandwidth_gbs"),
                c.bandwidth_gbs,
                false,
            )?;
            if let Some(v) = c.spmv_bandwidth_gbs {
                check(&format!("caches[{i}].spmv_bandwidth_gbs"), v, false)?;
            }
        }
        check("launch_us", self.launch_us, true)?;
        Ok(())
    }
}

/// The most a time of a preset may be, in microseconds (`..._us`): one second. A latency,
/// overhead or start-up beyond a second is no interconnect's or device's; bounding it keeps
/// every modeled time a printable number (`latency_us = 1e308` gave a 300-digit time).
/// A period (`noise.period_us`) may be 1000 times longer.
pub const MAX_TIME_US: f64 = 1e6;

/// The range of a rate of a preset: bandwidths (`..._gbs`, GB/s) and `gflops`, from
/// 1 KB/s (1e-6) to 1 PB/s (1e6), beyond any memory or link built; `add_latency_ns` from
/// 1e-6 ns to one second.
pub const RATE_RANGE: (f64, f64) = (1e-6, 1e6);

/// Whether the value `v` of the preset field `name` is in its range, by the unit its name
/// ends with ([`MAX_TIME_US`], [`RATE_RANGE`]): `zero` allows 0 (a time that may be
/// absent), else it must be positive. `Err`: why not, for the one-line error.
fn in_range(name: &str, v: f64, zero: bool) -> Result<(), String> {
    let (lo, hi, unit) = if name.ends_with("period_us") {
        (0.0, 1e3 * MAX_TIME_US, "us")
    } else if name.ends_with("_us") {
        (0.0, MAX_TIME_US, "us")
    } else if name.ends_with("_ns") {
        (RATE_RANGE.0, 1e3 * MAX_TIME_US, "ns")
    } else if name.ends_with("_gbs") {
        (RATE_RANGE.0, RATE_RANGE.1, "GB/s")
    } else if name.ends_with("gflops") {
        (RATE_RANGE.0, 10.0 * RATE_RANGE.1, "GFLOP/s")
    } else {
        (0.0, f64::MAX, "")
    };
    let finite = v.is_finite() && if zero { v >= 0.0 } else { v > 0.0 };
    if !finite {
        return Err(if zero {
            format!("must be a finite number >= 0, got {v}")
        } else {
            format!("must be a positive finite number, got {v}")
        });
    }
    if (v != 0.0 && v < lo) || v > hi {
        return Err(format!(
            "must lie in [{lo:e}, {hi:e}] {unit} (a physical value), got {v:e}"
        ));
    }
    Ok(())
}

fn positive(cfg: &FabricConfig, field: &str, v: f64) -> Result<(), FabricError> {
    in_range(field, v, false).map_err(|why| cfg.invalid(field, why))
}

fn non_negative(cfg: &FabricConfig, field: &str, v: f64) -> Result<(), FabricError> {
    in_range(field, v, true).map_err(|why| cfg.invalid(field, why))
}
