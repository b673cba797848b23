//! # castack-fabric-sim
//!
//! A model of an HPC interconnect that answers one question: *when does this transfer
//! finish?* It knows nothing about data or buffers and depends on no other castack crate.
//!
//! - [`FabricConfig`]: the whole model as configuration (ports, topology, memories, PIO, DMA
//!   engines, message protocols), parsed from TOML ([`FabricConfig::from_toml_str`]) and
//!   validated on load with one-line [`FabricError`]s. Presets ([`PRESETS`],
//!   [`FabricConfig::preset`]) are embedded from `configs/fabrics/*.toml`: `peach2`
//!   (HA-PACS/TCA 2 x 8 torus), `ib-qdr` (the same cluster's InfiniBand with MVAPICH2-GDR
//!   protocols), `tofu-fx10` (virtual 16 x 16 x 16 torus, 4 devices per node), the CA-CG
//!   study machines `fx100`, `ito`, `ofp`, and two current clusters: `dgx-h100` (8 H100
//!   GPUs a node, each with its own NDR HCA, NVLink inside the node) and `genoa-ndr` (AMD
//!   EPYC 9654 nodes on NDR). Each number carries a comment naming the CALIBRATION.md fact,
//!   vendor data sheet or cited measurement it encodes, or saying it is a documented
//!   choice, and `tests/it/calibration.rs` pins the presets to the point-to-point facts.
//! - [`Topology`] and [`Path`] ([`topology`]): ring, 2 x N torus, n-D torus and mesh,
//!   two-level fat tree, crossbar; fixed minimal-hop, dimension-ordered routes; nodes of
//!   several devices (`[intra_node]`: a device per fabric node, joined inside its node by a
//!   host and a GPU path of their own).
//! - [`Fabric`] ([`fabric`]): routes ([`Fabric::route`]), the cost model of PIO, chained DMA
//!   with descriptor fetch vs register mode, memory kinds ([`Endpoint`], [`MemoryKind`]),
//!   devices, injection caps and protocols; [`Fabric::estimate`] prices one transfer alone,
//!   [`Fabric::price`] a set of [`Transfer`]s with contention.
//! - [`Engine`] ([`engine`]): the event-driven fluid engine with max-min fair sharing of
//!   every link, memory, port and device, deterministic to the bit.
//! - [`PriceSchedule`] ([`schedule`]): a data-free per-rank schedule of steps (puts issued
//!   together, arrivals waited for), priced by [`Fabric::price_schedule`] for thousands of
//!   ranks without threads (`examples/price_allreduce.rs` measures the speed), and several
//!   calls in flight at once, sharing the fabric, by [`Fabric::price_concurrent`].
//! - [`compute`]: the device model of a node (`[compute.host]`, `[compute.gpu]`: memory
//!   bandwidth, flop rate, kernel launch latency); [`Fabric::compute_time`] prices local work.
//! - [`software`]: the communication library's per-call and per-step CPU costs and system
//!   noise (seeded periodic detours per node), charged on the ranks' CPUs while a schedule
//!   is priced; off unless a config sets `[software]` or `[noise]`.
//! - [`two_sided`]: send/receive pairs built from puts (the receiver notifies its address,
//!   the sender puts data and flag); [`Fabric::price_two_sided`].
//!
//! - [`budget`]: the memory budget ([`MemBudget`]) that every allocation sized by an input is
//!   checked against first, in this crate and in every crate above it; a fabric's own size
//!   ([`FabricConfig::memory_bytes`]) is checked on load.
//!
//! Times are [`SimTime`] seconds (`f64`); config fields carry their unit in their names.
//!
//! ```
//! use castack_fabric_sim::{Endpoint, Fabric, Mechanism, Transfer};
//!
//! let fabric = Fabric::preset("peach2")?;
//! let put = Transfer::new(Endpoint::host(0), Endpoint::host(1), 8, Mechanism::Pio);
//! let t = fabric.estimate(&put)?;
//! assert!((t - 1.0e-6).abs() < 0.05e-6); // "PIO latency 1.0 us"
//! // Two 1 MB DMA puts over the same link share it.
//! let dma = Mechanism::Dma { device: 0, channel: 0 };
//! let a = Transfer::new(Endpoint::host(0), Endpoint::host(1), 1 << 20, dma);
//! let b = Transfer::new(Endpoint::host(8), Endpoint::host(1), 1 << 20, Mechanism::Dma { device: 0, channel: 1 });
//! let done = fabric.price(&[a, b])?;
//! assert!(done[0] > fabric.estimate(&a)?);
//! # Ok::<(), castack_fabric_sim::FabricError>(())
//! ```

/// The memory budget (from crate `castack-base`, re-exported so that every crate above sees one type).
pub use castack_base::budget;
mod buffers;
pub mod compute;
pub mod config;
pub mod engine;
mod error;
pub mod fabric;
pub mod schedule;
pub mod software;
mod spec;
pub mod topology;
pub mod two_sided;

pub use budget::{BudgetError, MemBudget};
pub use compute::{CacheLevel, ComputeConfig, ComputeCost, DeviceModel};
pub use config::{
    FabricConfig, IntraLinkConfig, IntraNodeConfig, MAX_TIME_US, PRESETS, RATE_RANGE,
};
pub use engine::Engine;
pub use error::FabricError;
pub use fabric::{Endpoint, Fabric, Mechanism, MemoryKind, SimTime, Transfer};
pub use schedule::{LocalWork, Placement, PricePut, PriceSchedule, PriceStep};
pub use software::{Noise, NoiseConfig, SoftwareConfig};
pub use topology::{IntraPath, Link, LinkId, Path, Topology};
pub use two_sided::{TwoSidedConfig, TwoSidedMessage, TwoSidedTiming};
