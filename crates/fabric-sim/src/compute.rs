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

use crate::error::FabricError;
use crate::fabric::{Fabric, MemoryKind, SimTime};

pub use crate::spec::{CacheLevel, ComputeConfig, DeviceModel};

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

    /// Time of local work on the device that owns `memory` together with `copies`
    /// host-device copies of `copy_bytes` in all by that device ([`Fabric::compute_time`]
    /// plus [`Fabric::transfer_time`]), seconds: what a rank's clock advances by for a piece
    /// of metered work, on the `sim` backend and in `krylov plan` alike (the one place that
    /// adds the two).
    ///
    /// # Errors
    /// As [`Fabric::compute_time`] and [`Fabric::transfer_time`].
    pub fn work_time(
        &self,
        memory: MemoryKind,
        work: ComputeCost,
        copies: u32,
        copy_bytes: u64,
    ) -> Result<SimTime, FabricError> {
        let t = self.compute_time(memory, work)?;
        Ok(t + self.transfer_time(memory, copies, copy_bytes)?)
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
