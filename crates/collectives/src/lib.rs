//! # castack-collectives
//!
//! The communication layer of castack: an object-safe communicator base trait
//! ([`Communicator`]: rank, size, nonblocking point-to-point), collectives as an extension
//! trait with a blanket implementation ([`Collectives`]), collective algorithms written once
//! as data ([`Schedule`]s, one file per algorithm under [`algo`], one registry enum per
//! operation), and backends that interpret them:
//!
//! - [`threads`]: P ranks as OS threads of one process (the embedded default);
//! - `mpi` (feature `mpi`): ranks are MPI processes (`mpi::MpiComm` over a communicator the
//!   application hands in, plus the MPI library's own collectives as `native`);
//! - [`sim`]: thread ranks that move real data while virtual clocks advance by the
//!   `castack-fabric-sim` model of a fabric (collectives priced whole, two-sided messages
//!   over puts, compute by a device model).
//!
//! Operations and their registries (each enum's `ALL` lists its algorithms; `Default` is the
//! recommended one): allreduce [`AllreduceAlgo`], allgatherv [`AllgathervAlgo`], broadcast
//! [`BcastAlgo`], barrier [`BarrierAlgo`], scatter [`ScatterAlgo`], gather [`GatherAlgo`],
//! reduce [`ReduceAlgo`], alltoall [`AlltoallAlgo`]. Hot loops build a [`PersistentCollective`]
//! once.
//! `examples/embed_allreduce.rs` shows an application embedding the crate with its own
//! buffers.
//!
//! ```
//! use castack_collectives::{Collectives, Communicator, ThreadUniverse};
//!
//! let sums = ThreadUniverse::new(3)?.run(|comm| {
//!     let mut x = [comm.rank() as f64, 1.0];
//!     comm.allreduce_sum(&mut x)?;
//!     Ok::<_, castack_collectives::CommError>(x)
//! })?;
//! for s in sums {
//!     assert_eq!(s?, [3.0, 3.0]);
//! }
//! # Ok::<(), castack_collectives::CommError>(())
//! ```

pub mod algo;
pub mod bench_case;
mod comm;
mod error;
mod exec;
mod ext;
pub mod mapping;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod schedule;
pub mod sim;
pub mod threads;

pub use algo::allgatherv::AllgathervAlgo;
pub use algo::allreduce::AllreduceAlgo;
pub use algo::alltoall::AlltoallAlgo;
pub use algo::barrier::BarrierAlgo;
pub use algo::bcast::BcastAlgo;
pub use algo::gather::GatherAlgo;
pub use algo::reduce::ReduceAlgo;
pub use algo::scatter::ScatterAlgo;
/// The registry-enum error and its macro (crate `castack-base`), re-exported for the crates above.
pub use castack_base::{impl_registry, registry, UnknownAlgorithm};
/// The fabric model the `sim` backend prices with (re-exported for embedding applications).
pub use castack_fabric_sim as fabric_sim;
pub use comm::{
    Communicator, ComputeWork, PointToPoint, RecvRequest, SendRequest, Tag, COLLECTIVE_TAG_BASE,
};
pub use error::CommError;
pub use exec::{execute, ExecWorkspace};
pub use ext::{AllreduceRequest, Collectives, PersistentCollective};
pub use mapping::{Mapping, MappingError};
#[cfg(feature = "mpi")]
pub use mpi::MpiComm;
pub use schedule::{Datatype, Op, RankSchedule, Reduction, Schedule, Step};
pub use sim::{SimComm, SimError, SimMechanism, SimMemory, SimOptions, SimUniverse};
pub use threads::{ThreadComm, ThreadUniverse, MAX_THREAD_RANKS};
