//! The device (compute) model: how long local work between communication calls takes on a
//! node, so that a simulated rank's clock advances by modeled compute rather than by host
//! wall time.
//!
//! # Cost of local work
//!
//! A piece of local work moves `bytes` through memory, performs `flops` floating-point
//! operations and issues `launches` kernels. On a device with memory bandwidth `B`, flop rate
//! `F` and launch latency `L` it takes
//!
//! ```text
//! launches * L + max(bytes / B, flops / F)
//! ```
//!
//! (a roofline: the kernel is bound by whichever of memory traffic and arithmetic is slower;
//! launches are serial). The device is chosen by memory kind: host work runs on the CPU
//! ([`ComputeConfig::host`]), GPU work on the GPU ([`ComputeConfig::gpu`]), configured in the
//! `[compute.host]` and `[compute.gpu]` tables of a fabric config.
//!
//! # Where the working set lives
//!
//! `B` depends on where the data lives. Work carries the per-rank working set it runs in
//! (`working_set`: the bytes of matrix and vectors a solver's loop touches over and over);
//! a device with cache levels (`[[compute.host.caches]]`, ascending `size_bytes`) streams
//! at the bandwidth of the smallest level that holds the working set, and at
//! `mem_bandwidth_gbs` when none does (or when the working set is unknown, 0). This is the
//! "data lives in the level that holds it" reading of the Execution-Cache-Memory model
//! (Treibig and Hager, "Introducing a performance model for bandwidth-limited loop
//! kernels", PPAM 2009; Stengel, Treibig, Hager and Wellein, ICS 2015), reduced to one
//! bandwidth per level: what a level delivers to one process's kernels is what the level's
//! measured or data-sheet bandwidth says, with no overlap model between levels.
//!
//! A sparse matrix-vector product reads its input through the column indices, which a
//! streaming figure (STREAM triad) does not measure. Its bytes (`spmv_bytes`, part of
//! `bytes`) are priced at the level's `spmv_bandwidth_gbs` where one is given (measured by
//! `krylov calibrate`; no data sheet gives one), at the streaming bandwidth otherwise:
//!
//! ```text
//! launches * L + max((bytes - spmv_bytes) / B(ws) + spmv_bytes / B_spmv(ws), flops / F,
//!                    chain * add_latency)
//! ```
//!
//! The last term is the latency bound of sums accumulated in a fixed order: `chain`
//! dependent additions, each waiting `add_latency` for the one before (a core cannot
//! overlap them, whatever its bandwidth). The solvers' reductions add in index order for
//! reproducible bits, so from cache they are latency-bound on a CPU core. Only a device
//! model with `add_latency_ns` (measured by `krylov calibrate` for one core) has the term.

use serde::{Deserialize, Serialize};

use crate::error::FabricError;
use crate::fabric::{Fabric, MemoryKind, SimTime};

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

/// Local work to price: the data-free shape of a kernel or a sequence of kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputeCost {
    /// Bytes read and written in memory.
    pub bytes: u64,
    /// Floating-point operations.
    pub flops: u64,
    /// Kernel launches.
    pub launches: u32,
    /// Of `bytes`, those a sparse matrix-vector product moves (priced at the SpMV
    /// bandwidth where the device model has one).
    pub spmv_bytes: u64,
    /// The per-rank working set the work runs in (bytes), which decides the cache level
    /// it streams from; 0: unknown (priced at memory bandwidth).
    pub working_set: u64,
    /// Dependent additions of the work's fixed-order sums, one after another (see the
    /// module doc).
    pub chain: u64,
}

impl DeviceModel {
    /// The streaming and SpMV bandwidths (GB/s) on a working set of `bytes` (0: unknown)
    /// and the name of the level that holds it (`memory` when no cache does).
    pub fn bandwidths(&self, working_set: u64) -> (f64, f64, &str) {
        let level = (working_set > 0)
            .then(|| self.caches.iter().find(|c| working_set <= c.size_bytes))
            .flatten();
        match level {
            Some(c) => (
                c.bandwidth_gbs,
                c.spmv_bandwidth_gbs.unwrap_or(c.bandwidth_gbs),
                &c.name,
            ),
            None => (
                self.mem_bandwidth_gbs,
                self.spmv_bandwidth_gbs.unwrap_or(self.mem_bandwidth_gbs),
                "memory",
            ),
        }
    }

    /// Time of `work` on this device, seconds.
    pub fn time(&self, work: ComputeCost) -> SimTime {
        let (stream, spmv, _) = self.bandwidths(work.working_set);
        let spmv_bytes = work.spmv_bytes.min(work.bytes);
        // One division where the level has no SpMV figure of its own (the same bits as
        // before SpMV bytes were told apart).
        let memory = if spmv == stream {
            work.bytes as f64 / (stream * 1e9)
        } else {
            (work.bytes - spmv_bytes) as f64 / (stream * 1e9) + spmv_bytes as f64 / (spmv * 1e9)
        };
        let arithmetic = work.flops as f64 / (self.gflops * 1e9);
        let latency = self
            .add_latency_ns
            .map_or(0.0, |ns| work.chain as f64 * ns * 1e-9);
        work.launches as f64 * self.launch_us * 1e-6 + memory.max(arithmetic).max(latency)
    }

    /// Time of `copies` host-device copies moving `bytes` in all, seconds: `copies *
    /// host_link_us + bytes / host_link_gbs`; `None` when the model has no host link.
    pub fn transfer_time(&self, copies: u32, bytes: u64) -> Option<SimTime> {
        let (gbs, us) = (self.host_link_gbs?, self.host_link_us?);
        Some(copies as f64 * us * 1e-6 + bytes as f64 / (gbs * 1e9))
    }

    pub(crate) fn validate(
        &self,
        field: &str,
        invalid: &dyn Fn(&str, String) -> FabricError,
    ) -> Result<(), FabricError> {
        match (self.host_link_gbs, self.host_link_us) {
            (None, None) => {}
            (Some(gbs), Some(us)) => {
                if !(gbs.is_finite() && gbs > 0.0) {
                    return Err(invalid(
                        &format!("{field}.host_link_gbs"),
                        format!("must be a positive finite number, got {gbs}"),
                    ));
                }
                if !(us.is_finite() && us >= 0.0) {
                    return Err(invalid(
                        &format!("{field}.host_link_us"),
                        format!("must be a finite number >= 0, got {us}"),
                    ));
                }
            }
            _ => {
                return Err(invalid(
                    &format!("{field}.host_link_gbs"),
                    "host_link_gbs and host_link_us come together".into(),
                ))
            }
        }
        for (name, v) in [
            ("mem_bandwidth_gbs", self.mem_bandwidth_gbs),
            ("gflops", self.gflops),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(
                    &format!("{field}.{name}"),
                    format!("must be a positive finite number, got {v}"),
                ));
            }
        }
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(invalid(
                    name,
                    format!("must be a positive finite number, got {v}"),
                ))
            }
        };
        if let Some(v) = self.spmv_bandwidth_gbs {
            positive(&format!("{field}.spmv_bandwidth_gbs"), v)?;
        }
        if let Some(v) = self.add_latency_ns {
            positive(&format!("{field}.add_latency_ns"), v)?;
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
            positive(&format!("{at}.bandwidth_gbs"), c.bandwidth_gbs)?;
            if let Some(v) = c.spmv_bandwidth_gbs {
                positive(&format!("{at}.spmv_bandwidth_gbs"), v)?;
            }
        }
        if !(self.launch_us.is_finite() && self.launch_us >= 0.0) {
            return Err(invalid(
                &format!("{field}.launch_us"),
                format!("must be a finite number >= 0, got {}", self.launch_us),
            ));
        }
        Ok(())
    }
}

impl Fabric {
    /// The device model of a memory kind, if the fabric's config has one.
    pub fn device_model(&self, memory: MemoryKind) -> Option<&DeviceModel> {
        let c = self.config().compute.as_ref()?;
        match memory {
            MemoryKind::Host => Some(&c.host),
            MemoryKind::Gpu => c.gpu.as_ref(),
        }
    }

    /// Time of `copies` host-device copies of `bytes` in all by the device that owns
    /// `memory` (its host link; see [`DeviceModel::transfer_time`]), seconds; 0 without
    /// copies.
    ///
    /// # Errors
    /// [`FabricError::NoComputeModel`] without a device model for `memory`,
    /// [`FabricError::NoHostLink`] when it has no host link.
    pub fn transfer_time(
        &self,
        memory: MemoryKind,
        copies: u32,
        bytes: u64,
    ) -> Result<SimTime, FabricError> {
        if copies == 0 && bytes == 0 {
            return Ok(0.0);
        }
        let model = self
            .device_model(memory)
            .ok_or_else(|| FabricError::NoComputeModel {
                config: self.config().name.clone(),
                memory: memory_name(memory),
            })?;
        model
            .transfer_time(copies, bytes)
            .ok_or_else(|| FabricError::NoHostLink {
                config: self.config().name.clone(),
                memory: memory_name(memory),
            })
    }

    /// Time of local work on the device that owns `memory` (see the module docs), seconds.
    ///
    /// # Errors
    /// [`FabricError::NoComputeModel`] when the config has no `[compute]` table, or none for
    /// that memory kind.
    pub fn compute_time(
        &self,
        memory: MemoryKind,
        work: ComputeCost,
    ) -> Result<SimTime, FabricError> {
        self.device_model(memory)
            .map(|d| d.time(work))
            .ok_or_else(|| FabricError::NoComputeModel {
                config: self.config().name.clone(),
                memory: memory_name(memory),
            })
    }
}

fn memory_name(memory: MemoryKind) -> &'static str {
    match memory {
        MemoryKind::Host => "host",
        MemoryKind::Gpu => "gpu",
    }
}
