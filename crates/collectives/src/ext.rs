//! Collective operations on any [`Communicator`], and persistent collectives for hot loops.

use crate::algo::allgatherv::AllgathervAlgo;
use crate::algo::allreduce::AllreduceAlgo;
use crate::algo::alltoall::AlltoallAlgo;
use crate::algo::barrier::BarrierAlgo;
use crate::algo::bcast::BcastAlgo;
use crate::algo::gather::GatherAlgo;
use crate::algo::reduce::ReduceAlgo;
use crate::algo::scatter::ScatterAlgo;
use crate::comm::Tag;
use crate::comm::{check_rank, Communicator};
use crate::exec::{execute, finish_tagged, start_tagged, ExecWorkspace, Resume};
use crate::schedule::{Datatype, Op, Reduction};
use crate::{CommError, RankSchedule};

/// A schedule built once and executed many times (as TCA descriptor chains and MPI-4
/// persistent collectives are): no schedule building and, once warm, no allocation per call.
///
/// Execute it blocking ([`PersistentCollective::execute_bytes`]) or split in two halves
/// ([`PersistentCollective::start_bytes`] ... [`PersistentCollective::finish_bytes`], as
/// `MPI_Start` ... `MPI_Wait` on a persistent `MPI_Allreduce_init`), so local work overlaps
/// the collective. Dropping a plan with a started, unfinished execution is a bug (debug
/// builds assert it), as dropping an unwaited [`crate::SendRequest`] is.
#[derive(Debug)]
pub struct PersistentCollective {
    schedule: RankSchedule,
    buffer_bytes: usize,
    workspace: ExecWorkspace,
    /// The tag and resume point of a started, unfinished execution.
    in_flight: Option<(Tag, Resume)>,
}

impl Drop for PersistentCollective {
    fn drop(&mut self) {
        debug_assert!(
            self.in_flight.is_none() || std::thread::panicking(),
            "a PersistentCollective was dropped with a started, unfinished execution"
        );
    }
}

impl PersistentCollective {
    /// Wrap one rank's schedule for a caller buffer of `buffer_bytes` bytes.
    pub fn new(schedule: RankSchedule, buffer_bytes: usize) -> Self {
        Self {
            schedule,
            buffer_bytes,
            workspace: ExecWorkspace::new(),
            in_flight: None,
        }
    }

    /// A persistent `f64` allreduce of `len` values with operator `op`.
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

    /// A persistent in-place `f64` allgatherv of `counts[r]` values from rank `r` (one count
    /// per rank), for a hot loop such as the SpMV input of a row-partitioned solver.
    ///
    /// Execute it with [`PersistentCollective::execute_f64`] on the whole output vector
    /// (`counts.iter().sum()` values) with this rank's own values already in place at their
    /// displacement (the sum of the counts of lower ranks): no staging copy and, once warm,
    /// no allocation per call.
    ///
    /// ```
    /// use castack_collectives::{
    ///     AllgathervAlgo, CommError, Communicator, PersistentCollective, ThreadUniverse,
    /// };
    ///
    /// let counts = [2, 0, 3];
    /// let per_rank = ThreadUniverse::new(3)?.run(|comm| {
    ///     let algo = AllgathervAlgo::default();
    ///     let mut gather = PersistentCollective::allgatherv_f64(comm, &counts, algo)?;
    ///     let start: usize = counts[..comm.rank()].iter().sum();
    ///     let mine = start..start + counts[comm.rank()];
    ///     let mut x = vec![0.0; 5];
    ///     for it in 0..3 {
    ///         // This rank's part of the vector, written in place.
    ///         x[mine.clone()].fill((10 * it + comm.rank()) as f64);
    ///         gather.execute_f64(comm, &mut x)?;
    ///         let (a, c) = ((10 * it) as f64, (10 * it + 2) as f64);
    ///         assert_eq!(x, [a, a, c, c, c]);
    ///     }
    ///     Ok::<_, CommError>(())
    /// })?;
    /// per_rank.into_iter().collect::<Result<Vec<()>, _>>()?;
    /// # Ok::<(), castack_collectives::CommError>(())
    /// ```
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `counts.len()` is not the communicator size or
    /// the total overflows.
    pub fn allgatherv_f64<C: Communicator + ?Sized>(
        comm: &C,
        counts: &[usize],
        algo: AllgathervAlgo,
    ) -> Result<Self, CommError> {
        let blocks = allgatherv_blocks(comm.size(), counts)?;
        let total = blocks.iter().sum();
        Ok(Self::new(algo.rank_schedule(comm.rank(), &blocks), total))
    }

    /// A persistent broadcast of `len` `f64` values from `root`.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `root` is not a rank.
    pub fn bcast_f64<C: Communicator + ?Sized>(
        comm: &C,
        root: usize,
        len: usize,
        algo: BcastAlgo,
    ) -> Result<Self, CommError> {
        check_rank(root, comm.size())?;
        let bytes = f64_bytes(len)?;
        Ok(Self::new(
            algo.rank_schedule(comm.size(), comm.rank(), root, bytes),
            bytes,
        ))
    }

    /// The schedule this rank executes.
    pub fn schedule(&self) -> &RankSchedule {
        &self.schedule
    }

    /// Whether an execution has been started and not yet finished.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    #[inline]
    fn check_len(&self, buf: &[u8]) -> Result<(), CommError> {
        if buf.len() != self.buffer_bytes {
            return Err(CommError::InvalidArgument(format!(
                "persistent collective built for {} bytes, called with {}",
                self.buffer_bytes,
                buf.len()
            )));
        }
        Ok(())
    }

    #[inline]
    fn check_idle(&self, what: &str) -> Result<(), CommError> {
        if self.in_flight.is_some() {
            return Err(CommError::InvalidArgument(format!(
                "{what}: the persistent collective has a started, unfinished execution"
            )));
        }
        Ok(())
    }

    /// Execute on `buf` (bytes).
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `buf` has the wrong length or an execution
    /// started with [`PersistentCollective::start_bytes`] is unfinished; communication
    /// errors.
    pub fn execute_bytes<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [u8],
    ) -> Result<(), CommError> {
        self.check_len(buf)?;
        self.check_idle("execute")?;
        execute(comm, &self.schedule, buf, &mut self.workspace)
    }

    /// Start a nonblocking execution on `buf`: draw the collective's tag (so it counts, for
    /// tag order, where it is started) and execute every leading step that needs no
    /// arrival, then post the puts of the first step that does. With buffered sends that
    /// data is in flight when this returns; the peers can progress on it while this rank
    /// computes. Complete it with [`PersistentCollective::finish_bytes`] on the same buffer,
    /// unmodified in between. Other collectives and point-to-point traffic may run in
    /// between (their tags differ).
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `buf` has the wrong length or an execution is
    /// already in flight; communication errors (then nothing is in flight).
    pub fn start_bytes<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [u8],
    ) -> Result<(), CommError> {
        self.check_len(buf)?;
        self.check_idle("start")?;
        let tag = comm.next_collective_tag();
        let resume = start_tagged(comm, &self.schedule, buf, &mut self.workspace, tag)?;
        self.in_flight = Some((tag, resume));
        Ok(())
    }

    /// Finish the execution started by [`PersistentCollective::start_bytes`]: wait for the
    /// arrivals and execute the remaining steps. Afterwards nothing is in flight, also when
    /// it fails.
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `buf` has the wrong length or nothing was
    /// started; communication errors.
    pub fn finish_bytes<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [u8],
    ) -> Result<(), CommError> {
        self.check_len(buf)?;
        let Some((tag, resume)) = self.in_flight.take() else {
            return Err(CommError::InvalidArgument(
                "finish: the persistent collective was not started".into(),
            ));
        };
        finish_tagged(comm, &self.schedule, buf, &mut self.workspace, tag, resume)
    }

    /// [`PersistentCollective::start_bytes`] on an `f64` buffer.
    ///
    /// # Errors
    /// As [`PersistentCollective::start_bytes`].
    pub fn start_f64<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [f64],
    ) -> Result<(), CommError> {
        self.start_bytes(comm, bytemuck::cast_slice_mut(buf))
    }

    /// [`PersistentCollective::finish_bytes`] on an `f64` buffer.
    ///
    /// # Errors
    /// As [`PersistentCollective::finish_bytes`].
    pub fn finish_f64<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [f64],
    ) -> Result<(), CommError> {
        self.finish_bytes(comm, bytemuck::cast_slice_mut(buf))
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
        let sched = algo.rank_schedule(self.size(), self.rank(), buf.len() * 8, red);
        execute_once(self, &sched, buf)
    }

    /// Sum of `buf` over all ranks with the default (bit-identical) algorithm.
    fn allreduce_sum(&self, buf: &mut [f64]) -> Result<(), CommError> {
        self.allreduce_f64_with(buf, Op::Sum, AllreduceAlgo::default())
    }

    /// Start a nonblocking element-wise reduction of `buf` over all ranks with the given
    /// algorithm; the result is in `buf` after [`AllreduceRequest::wait`]. The request
    /// borrows `buf`, so it cannot be touched in between; dropping the request unwaited is
    /// a bug (debug builds assert it). Builds a schedule per call: hot loops keep a
    /// [`PersistentCollective`] and use its `start_f64` / `finish_f64` instead.
    ///
    /// ```
    /// use castack_collectives::{AllreduceAlgo, Collectives, Communicator, Op, ThreadUniverse};
    ///
    /// let sums = ThreadUniverse::new(3)?.run(|comm| {
    ///     let mut x = [comm.rank() as f64];
    ///     let req = comm.immediate_allreduce_f64_with(&mut x, Op::Sum, AllreduceAlgo::default())?;
    ///     // ... local work overlapping the reduction ...
    ///     req.wait(comm)?;
    ///     Ok::<_, castack_collectives::CommError>(x[0])
    /// })?;
    /// assert!(sums.into_iter().all(|s| s == Ok(3.0)));
    /// # Ok::<(), castack_collectives::CommError>(())
    /// ```
    ///
    /// # Errors
    /// As [`PersistentCollective::start_bytes`].
    fn immediate_allreduce_f64_with<'b>(
        &self,
        buf: &'b mut [f64],
        op: Op,
        algo: AllreduceAlgo,
    ) -> Result<AllreduceRequest<'b>, CommError> {
        let mut plan = PersistentCollective::allreduce_f64(self, buf.len(), op, algo);
        plan.start_f64(self, buf)?;
        Ok(AllreduceRequest { plan, buf })
    }

    /// [`Collectives::immediate_allreduce_f64_with`] summing with the default
    /// (bit-identical) algorithm.
    ///
    /// # Errors
    /// As [`PersistentCollective::start_bytes`].
    fn immediate_allreduce_sum<'b>(
        &self,
        buf: &'b mut [f64],
    ) -> Result<AllreduceRequest<'b>, CommError> {
        self.immediate_allreduce_f64_with(buf, Op::Sum, AllreduceAlgo::default())
    }

    /// Element-wise reduction of `i64` values (counts) over all ranks, with the given
    /// algorithm (the sum wraps on overflow).
    fn allreduce_i64_with(
        &self,
        buf: &mut [i64],
        op: Op,
        algo: AllreduceAlgo,
    ) -> Result<(), CommError> {
        let red = Reduction {
            op,
            datatype: Datatype::I64,
        };
        let sched = algo.rank_schedule(self.size(), self.rank(), buf.len() * 8, red);
        execute_once(self, &sched, buf)
    }

    /// Element-wise reduction of `i64` values (counts) over all ranks.
    fn allreduce_i64(&self, buf: &mut [i64], op: Op) -> Result<(), CommError> {
        self.allreduce_i64_with(buf, op, AllreduceAlgo::default())
    }

    /// Gather `local` (`counts[rank]` values) from every rank into `out` on every rank, in
    /// rank order, with the given algorithm. `counts` holds one count per rank (any may be 0)
    /// and must agree on every rank.
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `counts.len()` is not the communicator size,
    /// `local.len() != counts[rank]` or `out.len()` is not the sum of the counts.
    fn allgatherv_f64_with(
        &self,
        local: &[f64],
        counts: &[usize],
        out: &mut [f64],
        algo: AllgathervAlgo,
    ) -> Result<(), CommError> {
        let rank = self.rank();
        let blocks = allgatherv_args(self.size(), rank, local.len(), counts, out.len())?;
        let start: usize = counts[..rank].iter().sum();
        out[start..start + local.len()].copy_from_slice(local);
        execute_once(self, &algo.rank_schedule(rank, &blocks), out)
    }

    /// [`Collectives::allgatherv_f64_with`] with the default algorithm.
    ///
    /// # Errors
    /// As [`Collectives::allgatherv_f64_with`].
    fn allgatherv_f64(
        &self,
        local: &[f64],
        counts: &[usize],
        out: &mut [f64],
    ) -> Result<(), CommError> {
        self.allgatherv_f64_with(local, counts, out, AllgathervAlgo::default())
    }

    /// Broadcast `buf` from `root` to every rank with the given algorithm; `buf` has the same
    /// length on every rank.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `root` is not a rank.
    fn bcast_bytes_with(
        &self,
        root: usize,
        buf: &mut [u8],
        algo: BcastAlgo,
    ) -> Result<(), CommError> {
        check_rank(root, self.size())?;
        let sched = algo.rank_schedule(self.size(), self.rank(), root, buf.len());
        execute_once(self, &sched, buf)
    }

    /// Broadcast `f64` values from `root` with the given algorithm.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `root` is not a rank.
    fn bcast_f64_with(
        &self,
        root: usize,
        buf: &mut [f64],
        algo: BcastAlgo,
    ) -> Result<(), CommError> {
        self.bcast_bytes_with(root, bytemuck::cast_slice_mut(buf), algo)
    }

    /// Broadcast `f64` values from `root` with the default algorithm.
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `root` is not a rank.
    fn bcast_f64(&self, root: usize, buf: &mut [f64]) -> Result<(), CommError> {
        self.bcast_f64_with(root, buf, BcastAlgo::default())
    }

    /// Block until every rank has entered the barrier, with the given algorithm.
    fn barrier_with(&self, algo: BarrierAlgo) -> Result<(), CommError> {
        let sched = algo.rank_schedule(self.size(), self.rank());
        execute_once::<_, u8>(self, &sched, &mut [])
    }

    /// Block until every rank has entered the barrier (default algorithm).
    fn barrier(&self) -> Result<(), CommError> {
        self.barrier_with(BarrierAlgo::default())
    }

    /// Scatter from `root`: block i of the root's `send` (p blocks of `recv.len()` values,
    /// in rank order) ends in rank i's `recv`, with the given algorithm. `send` is read on
    /// the root only (pass `&[]` elsewhere); `recv` has the same length on every rank.
    ///
    /// The root stages `send` in a copy (schedules execute on a mutable working buffer).
    ///
    /// ```
    /// use castack_collectives::{Collectives, Communicator, ScatterAlgo, ThreadUniverse};
    ///
    /// let got = ThreadUniverse::new(3)?.run(|comm| {
    ///     // Only the root's send buffer is read.
    ///     let send: Vec<f64> = (0..6).map(f64::from).collect();
    ///     let mut recv = [0.0; 2];
    ///     comm.scatter_f64_with(1, &send, &mut recv, ScatterAlgo::Binomial)?;
    ///     Ok::<_, castack_collectives::CommError>(recv)
    /// })?;
    /// assert_eq!(got[2], Ok([4.0, 5.0]));
    /// # Ok::<(), castack_collectives::CommError>(())
    /// ```
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `root` is not a rank; [`CommError::InvalidArgument`]
    /// when, on the root, `send.len()` is not p times `recv.len()`; communication errors
    /// (a [`CommError::LengthMismatch`] when the ranks' `recv` lengths differ).
    fn scatter_f64_with(
        &self,
        root: usize,
        send: &[f64],
        recv: &mut [f64],
        algo: ScatterAlgo,
    ) -> Result<(), CommError> {
        let (p, rank) = (self.size(), self.rank());
        check_rank(root, p)?;
        let count = recv.len();
        let sched = algo.rank_schedule(p, rank, root, f64_bytes(count)?);
        if rank != root {
            return execute_once(self, &sched, recv);
        }
        if Some(send.len()) != count.checked_mul(p) {
            return Err(CommError::InvalidArgument(format!(
                "scatter: the root sends {} values, {p} ranks x {count} expected",
                send.len()
            )));
        }
        recv.copy_from_slice(&send[root * count..(root + 1) * count]);
        execute_once(self, &sched, &mut staged(&sched, send))
    }

    /// [`Collectives::scatter_f64_with`] with the default algorithm.
    ///
    /// # Errors
    /// As [`Collectives::scatter_f64_with`].
    fn scatter_f64(&self, root: usize, send: &[f64], recv: &mut [f64]) -> Result<(), CommError> {
        self.scatter_f64_with(root, send, recv, ScatterAlgo::default())
    }

    /// Gather to `root`: every rank's `send` (the same length on every rank) ends as block
    /// `rank` of the root's `recv` (p blocks in rank order), with the given algorithm. `recv`
    /// is written on the root only (pass `&mut []` elsewhere); `send` is never written.
    ///
    /// Non-root ranks stage `send` in a copy (schedules execute on a mutable working buffer).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `root` is not a rank; [`CommError::InvalidArgument`]
    /// when, on the root, `recv.len()` is not p times `send.len()`; communication errors
    /// (a [`CommError::LengthMismatch`] when the ranks' `send` lengths differ).
    fn gather_f64_with(
        &self,
        root: usize,
        send: &[f64],
        recv: &mut [f64],
        algo: GatherAlgo,
    ) -> Result<(), CommError> {
        let (p, rank) = (self.size(), self.rank());
        check_rank(root, p)?;
        let count = send.len();
        let sched = algo.rank_schedule(p, rank, root, f64_bytes(count)?);
        if rank != root {
            return execute_once(self, &sched, &mut staged(&sched, send));
        }
        if Some(recv.len()) != count.checked_mul(p) {
            return Err(CommError::InvalidArgument(format!(
                "gather: the root receives into {} values, {p} ranks x {count} expected",
                recv.len()
            )));
        }
        recv[root * count..(root + 1) * count].copy_from_slice(send);
        execute_once(self, &sched, recv)
    }

    /// [`Collectives::gather_f64_with`] with the default algorithm.
    ///
    /// # Errors
    /// As [`Collectives::gather_f64_with`].
    fn gather_f64(&self, root: usize, send: &[f64], recv: &mut [f64]) -> Result<(), CommError> {
        self.gather_f64_with(root, send, recv, GatherAlgo::default())
    }

    /// Element-wise reduction of `buf` over all ranks with operator `op`, result in the
    /// root's `buf`, with the given algorithm; `buf` has the same length on every rank and is
    /// left unchanged on the others. The result is deterministic but not bit-identical to an
    /// allreduce's (see [`ReduceAlgo`]).
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] when `root` is not a rank; communication errors (a
    /// [`CommError::LengthMismatch`] when the ranks' lengths differ).
    fn reduce_f64_with(
        &self,
        root: usize,
        buf: &mut [f64],
        op: Op,
        algo: ReduceAlgo,
    ) -> Result<(), CommError> {
        check_rank(root, self.size())?;
        let red = Reduction {
            op,
            datatype: Datatype::F64,
        };
        let sched = algo.rank_schedule(self.size(), self.rank(), root, buf.len() * 8, red);
        execute_once(self, &sched, buf)
    }

    /// [`Collectives::reduce_f64_with`] with the default algorithm.
    ///
    /// # Errors
    /// As [`Collectives::reduce_f64_with`].
    fn reduce_f64(&self, root: usize, buf: &mut [f64], op: Op) -> Result<(), CommError> {
        self.reduce_f64_with(root, buf, op, ReduceAlgo::default())
    }

    /// All-to-all exchange with the given algorithm: `send` and `recv` are p blocks of the
    /// same length (on every rank); block j of `send` ends as block `rank` of rank j's
    /// `recv`.
    ///
    /// ```
    /// use castack_collectives::{AlltoallAlgo, Collectives, Communicator, ThreadUniverse};
    ///
    /// let got = ThreadUniverse::new(3)?.run(|comm| {
    ///     let send: Vec<f64> = (0..3).map(|j| (10 * comm.rank() + j) as f64).collect();
    ///     let mut recv = [0.0; 3];
    ///     comm.alltoall_f64_with(&send, &mut recv, AlltoallAlgo::Bruck)?;
    ///     Ok::<_, castack_collectives::CommError>(recv)
    /// })?;
    /// assert_eq!(got[2], Ok([2.0, 12.0, 22.0]));
    /// # Ok::<(), castack_collectives::CommError>(())
    /// ```
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] when `send` and `recv` differ in length or the length
    /// is not a multiple of p; communication errors (a [`CommError::LengthMismatch`] when the
    /// ranks' lengths differ).
    fn alltoall_f64_with(
        &self,
        send: &[f64],
        recv: &mut [f64],
        algo: AlltoallAlgo,
    ) -> Result<(), CommError> {
        let p = self.size();
        if send.len() != recv.len() || !send.len().is_multiple_of(p) {
            return Err(CommError::InvalidArgument(format!(
                "alltoall: send holds {} values and recv {}, both must be {p} equal blocks",
                send.len(),
                recv.len()
            )));
        }
        recv.copy_from_slice(send);
        let sched = algo.rank_schedule(p, self.rank(), f64_bytes(send.len() / p)?);
        execute_once(self, &sched, recv)
    }

    /// [`Collectives::alltoall_f64_with`] with the default algorithm.
    ///
    /// # Errors
    /// As [`Collectives::alltoall_f64_with`].
    fn alltoall_f64(&self, send: &[f64], recv: &mut [f64]) -> Result<(), CommError> {
        self.alltoall_f64_with(send, recv, AlltoallAlgo::default())
    }
}

impl<C: Communicator + ?Sized> Collectives for C {}

/// A started nonblocking allreduce ([`Collectives::immediate_allreduce_f64_with`]); it
/// holds the buffer until [`AllreduceRequest::wait`].
#[must_use = "an allreduce request must be waited"]
#[derive(Debug)]
pub struct AllreduceRequest<'b> {
    plan: PersistentCollective,
    buf: &'b mut [f64],
}

impl AllreduceRequest<'_> {
    /// Wait for the reduction to complete; the result is then in the buffer.
    ///
    /// # Errors
    /// Communication errors.
    pub fn wait<C: Communicator + ?Sized>(mut self, comm: &C) -> Result<(), CommError> {
        self.plan.finish_f64(comm, self.buf)
    }
}

/// Execute `sched` once on `buf`, with a workspace of its own (one-off calls; persistent
/// collectives keep theirs).
fn execute_once<C: Communicator + ?Sized, T: bytemuck::Pod>(
    comm: &C,
    sched: &RankSchedule,
    buf: &mut [T],
) -> Result<(), CommError> {
    execute(
        comm,
        sched,
        bytemuck::cast_slice_mut(buf),
        &mut ExecWorkspace::new(),
    )
}

/// A copy of `data` for `sched` to execute on (schedules work on a mutable buffer); empty
/// when the schedule has no step, so a rank with nothing to move allocates nothing.
fn staged(sched: &RankSchedule, data: &[f64]) -> Vec<f64> {
    if sched.steps.is_empty() {
        Vec::new()
    } else {
        data.to_vec()
    }
}

/// The checked arguments of an allgatherv on rank `rank` of `size` (`local_len` values from
/// this rank, `counts` one per rank, an output of `out_len` values): the blocks' byte
/// lengths. Shared with the MPI library's own allgatherv (`mpi/native.rs`).
///
/// # Errors
/// [`CommError::InvalidArgument`] when `counts.len()` is not `size`, a byte count
/// overflows, `local_len != counts[rank]` or `out_len` is not the sum of the counts.
pub(crate) fn allgatherv_args(
    size: usize,
    rank: usize,
    local_len: usize,
    counts: &[usize],
    out_len: usize,
) -> Result<Vec<usize>, CommError> {
    let blocks = allgatherv_blocks(size, counts)?;
    let own = counts[rank];
    if local_len != own {
        return Err(CommError::InvalidArgument(format!(
            "allgatherv: rank {rank} passes {local_len} values, counts[{rank}] = {own}"
        )));
    }
    let total: usize = counts.iter().sum();
    if out_len != total {
        return Err(CommError::InvalidArgument(format!(
            "allgatherv: output holds {out_len} values, the counts sum to {total}"
        )));
    }
    Ok(blocks)
}

/// Block byte lengths of an allgatherv of `f64` counts, checked against the communicator size
/// and for overflow.
fn allgatherv_blocks(size: usize, counts: &[usize]) -> Result<Vec<usize>, CommError> {
    if counts.len() != size {
        return Err(CommError::InvalidArgument(format!(
            "allgatherv: {} counts for a communicator of {size} ranks",
            counts.len()
        )));
    }
    let blocks = counts
        .iter()
        .map(|&c| f64_bytes(c))
        .collect::<Result<Vec<_>, _>>()?;
    blocks
        .iter()
        .try_fold(0usize, |acc, &b| acc.checked_add(b))
        .ok_or_else(|| CommError::InvalidArgument("allgatherv: total size overflows".into()))?;
    Ok(blocks)
}

/// Bytes of `len` `f64` values, or an error when that overflows.
fn f64_bytes(len: usize) -> Result<usize, CommError> {
    len.checked_mul(8)
        .ok_or_else(|| CommError::InvalidArgument(format!("{len} values overflow a byte count")))
}
