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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
}

impl DeviceModel {
    /// Time of `work` on this device, seconds.
    pub fn time(&self, work: ComputeCost) -> SimTime {
        let memory = work.bytes as f64 / (self.mem_bandwidth_gbs * 1e9);
        let arithmetic = work.flops as f64 / (self.gflops * 1e9);
        work.launches as f64 * self.launch_us * 1e-6 + memory.max(arithmetic)
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
