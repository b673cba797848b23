//! # castack-collectives
//!
//! The communication layer of castack: an object-safe communicator base trait
//! ([`Communicator`]: rank, size, nonblocking point-to-point), collectives as an extension
//! trait with a blanket implementation ([`Collectives`]), collective algorithms written once
//! as data ([`Schedule`]s, one file per algorithm under [`algo`], one registry enum per
//! operation), and backends that interpret them:
//!
//! - [`threads`]: P ranks as OS threads of one process (the embedded default);
//! - `mpi` and `sim` come with their own issues.
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
mod comm;
mod error;
mod exec;
mod ext;
mod registry;
pub mod schedule;
pub mod threads;

pub use algo::allgatherv::AllgathervAlgo;
pub use algo::allreduce::AllreduceAlgo;
pub use algo::alltoall::AlltoallAlgo;
pub use algo::barrier::BarrierAlgo;
pub use algo::bcast::BcastAlgo;
pub use algo::gather::GatherAlgo;
pub use algo::reduce::ReduceAlgo;
pub use algo::scatter::ScatterAlgo;
pub use comm::{
    Communicator, ComputeWork, PointToPoint, RecvRequest, SendRequest, Tag, COLLECTIVE_TAG_BASE,
};
pub use error::CommError;
pub use exec::{execute, ExecWorkspace};
pub use ext::{AllreduceRequest, Collectives, PersistentCollective};
pub use registry::UnknownAlgorithm;
pub use schedule::{Datatype, Op, RankSchedule, Reduction, Schedule, Step};
pub use threads::{ThreadComm, ThreadUniverse};
