//! Collective operations on any [`Communicator`], and persistent collectives for hot loops.

use crate::algo::allreduce::AllreduceAlgo;
use crate::comm::Communicator;
use crate::exec::{execute, ExecWorkspace};
use crate::schedule::{Datatype, Op, Reduction};
use crate::{CommError, RankSchedule};

/// A schedule built once and executed many times (as TCA descriptor chains and MPI-4
/// persistent collectives are): no schedule building and, once warm, no allocation per call.
#[derive(Debug)]
pub struct PersistentCollective {
    schedule: RankSchedule,
    buffer_bytes: usize,
    workspace: ExecWorkspace,
}

impl PersistentCollective {
    /// Wrap one rank's schedule for a caller buffer of `buffer_bytes` bytes.
    pub fn new(schedule: RankSchedule, buffer_bytes: usize) -> Self {
        Self {
            schedule,
            buffer_bytes,
            workspace: ExecWorkspace::new(),
        }
    }

    /// A persistent `f64` sum allreduce of `len` values.
    pub fn allreduce_f64<C: Communicator + ?Sized>(
        comm: &C,
        len: usize,
        op: Op,
        algo: AllreduceAlgo,
    ) -> Self {
        let red = Reduction {
            op,
            datatype: Datatype::F64,
        };
        let bytes = len * 8;
        Self::new(
            algo.rank_schedule(comm.size(), comm.rank(), bytes, red),
            bytes,
        )
    }

    /// The schedule this rank executes.
    pub fn schedule(&self) -> &RankSchedule {
        &self.schedule
    }

    /// Execute on `buf` (bytes).
    pub fn execute_bytes<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [u8],
    ) -> Result<(), CommError> {
        if buf.len() != self.buffer_bytes {
            return Err(CommError::InvalidArgument(format!(
                "persistent collective built for {} bytes, called with {}",
                self.buffer_bytes,
                buf.len()
            )));
        }
        execute(comm, &self.schedule, buf, &mut self.workspace)
    }

    /// Execute on an `f64` buffer.
    pub fn execute_f64<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [f64],
    ) -> Result<(), CommError> {
        self.execute_bytes(comm, bytemuck::cast_slice_mut(buf))
    }
}

/// Collective operations, available on every [`Communicator`].
///
/// Every rank must call the same collectives in the same order with consistent arguments.
pub trait Collectives: Communicator {
    /// Element-wise reduction of `buf` over all ranks, result on every rank, with the given
    /// algorithm.
    fn allreduce_f64_with(
        &self,
        buf: &mut [f64],
        op: Op,
        algo: AllreduceAlgo,
    ) -> Result<(), CommError> {
        let red = Reduction {
            op,
            datatype: Datatype::F64,
        };
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let sched = algo.rank_schedule(self.size(), self.rank(), bytes.len(), red);
        execute(self, &sched, bytes, &mut ExecWorkspace::new())
    }

    /// Sum of `buf` over all ranks with the default (bit-identical) algorithm.
    fn allreduce_sum(&self, buf: &mut [f64]) -> Result<(), CommError> {
        self.allreduce_f64_with(buf, Op::Sum, AllreduceAlgo::default())
    }

    /// Element-wise reduction of `i64` values (counts) over all ranks.
    fn allreduce_i64(&self, buf: &mut [i64], op: Op) -> Result<(), CommError> {
        let red = Reduction {
            op,
            datatype: Datatype::I64,
        };
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let sched =
            AllreduceAlgo::default().rank_schedule(self.size(), self.rank(), bytes.len(), red);
        execute(self, &sched, bytes, &mut ExecWorkspace::new())
    }
}

impl<C: Communicator + ?Sized> Collectives for C {}
