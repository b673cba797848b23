//! `native`: the MPI library's own collectives, on the buffer conventions of our schedules.
//!
//! Reference: the MPI 4.0 standard, chapter 6 (collective communication); the algorithm the
//! library picks is its own (Open MPI's `coll/tuned` decision tables), so the cost is
//! whatever that choice costs, plus one local copy of the caller's buffer for the operations
//! whose MPI form needs distinct send and receive buffers (allreduce, reduce at the root,
//! allgather, gather at the root, alltoall). See the [parent module](super) for why `native`
//! is not a registry algorithm.

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::PartitionMut;
use mpi::topology::Communicator as MpiCommunicator;

use super::{mpi_rank, MpiComm};
use crate::comm::{check_rank, Communicator};
use crate::ext::allgatherv_args;
use crate::schedule::{Datatype, Op, Reduction};
use crate::CommError;

/// An operation the MPI library runs natively, with the buffer convention of our schedules
/// (each rank passes one buffer; `block` below is the per-rank size given to
/// [`NativeCollective::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeOp {
    /// `MPI_Bcast`: the root's buffer (`block` bytes) ends in every rank's.
    Bcast {
        /// The root rank.
        root: usize,
    },
    /// `MPI_Scatter`: the root holds p blocks (left unchanged); rank i's buffer (one block)
    /// receives block i.
    Scatter {
        /// The root rank.
        root: usize,
    },
    /// `MPI_Gather`: every rank's block (its whole buffer; at the root, block `root` of its
    /// p-block buffer) ends as block `rank` of the root's buffer; the others' are unchanged.
    Gather {
        /// The root rank.
        root: usize,
    },
    /// `MPI_Reduce`: element-wise reduction of every rank's buffer into the root's; the
    /// others' are unchanged.
    Reduce {
        /// The root rank.
        root: usize,
        /// Operator and element type.
        reduction: Reduction,
    },
    /// `MPI_Allgather`: every rank's buffer holds p blocks, its own block in place; all blocks
    /// end in every rank's buffer.
    Allgather,
    /// `MPI_Allreduce`: element-wise reduction of every rank's buffer, result in every rank's.
    Allreduce {
        /// Operator and element type.
        reduction: Reduction,
    },
    /// `MPI_Alltoall`: block j of rank r's p-block buffer ends as block r of rank j's.
    Alltoall,
    /// `MPI_Barrier` (empty buffer).
    Barrier,
}

impl NativeOp {
    fn root(self) -> Option<usize> {
        match self {
            NativeOp::Bcast { root }
            | NativeOp::Scatter { root }
            | NativeOp::Gather { root }
            | NativeOp::Reduce { root, .. } => Some(root),
            _ => None,
        }
    }

    /// Rank `rank`'s buffer length for blocks of `block` bytes on `p` ranks.
    pub fn buffer_bytes(self, p: usize, rank: usize, block: usize) -> usize {
        match self {
            NativeOp::Allgather | NativeOp::Alltoall => p * block,
            NativeOp::Scatter { root } | NativeOp::Gather { root } if rank == root => p * block,
            NativeOp::Barrier => 0,
            _ => block,
        }
    }
}

/// A native collective prepared once (its staging buffers allocated) and executed many
/// times, the counterpart of [`crate::PersistentCollective`] for the MPI library's own
/// collectives.
#[derive(Debug)]
pub struct NativeCollective {
    op: NativeOp,
    block: usize,
    buffer_bytes: usize,
    /// The send copy of operations whose MPI form needs distinct buffers (8-byte aligned).
    send: Vec<u64>,
    /// The receive side of a reduction when the caller's buffer is not 8-byte aligned.
    recv: Vec<u64>,
}

impl NativeCollective {
    /// Prepare `op` on `comm` for blocks of `block` bytes.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for a root that is not a rank;
    /// [`CommError::Misaligned`] when a reduction's `block` is not a whole number of 8-byte
    /// elements; [`CommError::InvalidArgument`] when a count exceeds MPI's `int`.
    pub fn new(comm: &MpiComm, op: NativeOp, block: usize) -> Result<Self, CommError> {
        let p = comm.size();
        if let Some(root) = op.root() {
            check_rank(root, p)?;
        }
        if matches!(op, NativeOp::Reduce { .. } | NativeOp::Allreduce { .. })
            && !block.is_multiple_of(8)
        {
            return Err(CommError::Misaligned {
                bytes: block,
                elem: 8,
            });
        }
        let buffer_bytes = op.buffer_bytes(p, comm.rank(), block);
        count(block.max(buffer_bytes))?;
        let words = buffer_bytes.div_ceil(8);
        let recv = if matches!(op, NativeOp::Reduce { .. } | NativeOp::Allreduce { .. }) {
            vec![0; words]
        } else {
            Vec::new()
        };
        Ok(Self {
            op,
            block,
            buffer_bytes,
            send: vec![0; words],
            recv,
        })
    }

    /// The operation.
    pub fn op(&self) -> NativeOp {
        self.op
    }

    /// Execute on `buf` (this rank's buffer, [`NativeOp::buffer_bytes`] long). Collective:
    /// every rank calls it with the same operation.
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `buf` has the wrong length.
    pub fn execute_bytes(&mut self, comm: &MpiComm, buf: &mut [u8]) -> Result<(), CommError> {
        if buf.len() != self.buffer_bytes {
            return Err(CommError::InvalidArgument(format!(
                "native collective built for {} bytes, called with {}",
                self.buffer_bytes,
                buf.len()
            )));
        }
        let raw = comm.raw();
        let rank = comm.rank();
        let (block, len) = (self.block, buf.len());
        let send = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.send)[..len];
        match self.op {
            NativeOp::Barrier => raw.barrier(),
            NativeOp::Bcast { root } => raw.process_at_rank(mpi_rank(root)).broadcast_into(buf),
            NativeOp::Scatter { root } if rank == root => {
                let own = &mut send[..block];
                raw.process_at_rank(mpi_rank(root))
                    .scatter_into_root(&buf[..], own);
            }
            NativeOp::Scatter { root } => raw.process_at_rank(mpi_rank(root)).scatter_into(buf),
            NativeOp::Gather { root } if rank == root => {
                let own = &mut send[..block];
                own.copy_from_slice(&buf[root * block..(root + 1) * block]);
                raw.process_at_rank(mpi_rank(root))
                    .gather_into_root(&own[..], buf);
            }
            NativeOp::Gather { root } => raw.process_at_rank(mpi_rank(root)).gather_into(&buf[..]),
            NativeOp::Allgather => {
                let own = &mut send[..block];
                own.copy_from_slice(&buf[rank * block..(rank + 1) * block]);
                raw.all_gather_into(&own[..], buf);
            }
            NativeOp::Alltoall => {
                send.copy_from_slice(buf);
                raw.all_to_all_into(&send[..], buf);
            }
            NativeOp::Allreduce { reduction } => {
                send.copy_from_slice(buf);
                let send = &self.send[..len / 8];
                with_words(buf, &mut self.recv, |recv| match reduction.datatype {
                    Datatype::F64 => {
                        raw.all_reduce_into(as_f64(send), as_f64_mut(recv), system_op(reduction.op))
                    }
                    Datatype::I64 => {
                        raw.all_reduce_into(as_i64(send), as_i64_mut(recv), system_op(reduction.op))
                    }
                });
            }
            NativeOp::Reduce { root, reduction } => {
                let process = raw.process_at_rank(mpi_rank(root));
                send.copy_from_slice(buf);
                let send = &self.send[..len / 8];
                let op = system_op(reduction.op);
                if rank != root {
                    match reduction.datatype {
                        Datatype::F64 => process.reduce_into(as_f64(send), op),
                        Datatype::I64 => process.reduce_into(as_i64(send), op),
                    }
                } else {
                    with_words(buf, &mut self.recv, |recv| match reduction.datatype {
                        Datatype::F64 => {
                            process.reduce_into_root(as_f64(send), as_f64_mut(recv), op)
                        }
                        Datatype::I64 => {
                            process.reduce_into_root(as_i64(send), as_i64_mut(recv), op)
                        }
                    });
                }
            }
        }
        Ok(())
    }
}

impl MpiComm {
    /// Element-wise reduction of `buf` over all ranks with the MPI library's own
    /// `MPI_Allreduce` (its summation order: not bit-identical to our schedules').
    pub fn native_allreduce_f64(&self, buf: &mut [f64], op: Op) {
        let send = buf.to_vec();
        self.raw().all_reduce_into(&send[..], buf, system_op(op));
    }

    /// A nonblocking allreduce with the MPI library's own `MPI_Iallreduce`: starts the
    /// reduction of `buf`, runs `overlap` (local work, no MPI calls on this communicator's
    /// collectives in between), waits, and returns what `overlap` returned; the result is in
    /// `buf` afterwards. The request lives in an rsmpi scope, so it cannot outlive `buf`.
    pub fn native_immediate_allreduce_f64<R>(
        &self,
        buf: &mut [f64],
        op: Op,
        overlap: impl FnOnce() -> R,
    ) -> R {
        let send = buf.to_vec();
        mpi::request::scope(|scope| {
            let req = self
                .raw()
                .immediate_all_reduce_into(scope, &send[..], buf, system_op(op));
            let out = overlap();
            req.wait_without_status();
            out
        })
    }

    /// Gather `local` (`counts[rank]` values) from every rank into `out` on every rank, in
    /// rank order, with the MPI library's own `MPI_Allgatherv`.
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `counts.len()` is not the communicator size,
    /// `local.len() != counts[rank]`, `out.len()` is not the sum of the counts, a byte count
    /// overflows or a count exceeds MPI's `int` (the checks of
    /// [`crate::Collectives::allgatherv_f64_with`], then MPI's).
    pub fn native_allgatherv_f64(
        &self,
        local: &[f64],
        counts: &[usize],
        out: &mut [f64],
    ) -> Result<(), CommError> {
        allgatherv_args(self.size(), self.rank(), local.len(), counts, out.len())?;
        count(out.len())?;
        let counts: Vec<i32> = counts.iter().map(|&c| c as i32).collect();
        let displs: Vec<i32> = counts
            .iter()
            .scan(0, |acc, &c| {
                let d = *acc;
                *acc += c;
                Some(d)
            })
            .collect();
        let mut part = PartitionMut::new(out, &counts[..], &displs[..]);
        self.raw().all_gather_varcount_into(local, &mut part);
        Ok(())
    }
}

/// The MPI operator of `op`.
fn system_op(op: Op) -> SystemOperation {
    match op {
        Op::Sum => SystemOperation::sum(),
        Op::Max => SystemOperation::max(),
        Op::Min => SystemOperation::min(),
    }
}

/// `n` as MPI's `int` count.
fn count(n: usize) -> Result<i32, CommError> {
    i32::try_from(n)
        .map_err(|_| CommError::InvalidArgument(format!("a count of {n} exceeds MPI's int counts")))
}

/// Run `f` on `buf` as 8-byte words: in place when `buf` is 8-byte aligned, else through
/// `staging` (copied back afterwards).
fn with_words(buf: &mut [u8], staging: &mut [u64], f: impl FnOnce(&mut [u64])) {
    match bytemuck::try_cast_slice_mut::<u8, u64>(buf) {
        Ok(words) => f(words),
        Err(_) => {
            let words = &mut staging[..buf.len() / 8];
            f(words);
            buf.copy_from_slice(bytemuck::cast_slice(words));
        }
    }
}

fn as_f64(w: &[u64]) -> &[f64] {
    bytemuck::cast_slice(w)
}

fn as_f64_mut(w: &mut [u64]) -> &mut [f64] {
    bytemuck::cast_slice_mut(w)
}

fn as_i64(w: &[u64]) -> &[i64] {
    bytemuck::cast_slice(w)
}

fn as_i64_mut(w: &mut [u64]) -> &mut [i64] {
    bytemuck::cast_slice_mut(w)
}
