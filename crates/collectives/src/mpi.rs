//! The `mpi` backend (feature `mpi`, rsmpi): ranks are MPI processes.
//!
//! [`MpiComm`] wraps an rsmpi communicator that the application hands in (the world
//! communicator or a split of it; the application calls `mpi::initialize()` itself, once per
//! process) and implements [`Communicator`], so every schedule of every algorithm runs over MPI
//! through the one interpreter (`exec.rs`), and so do the solvers and the neighbour exchange.
//!
//! # Point-to-point
//!
//! - **Own traffic.** `MpiComm::new` duplicates the communicator (`MPI_Comm_dup`), so our
//!   messages can never match the application's own receives on the communicator it handed
//!   in, whatever tags either side uses.
//! - **Buffered sends.** [`Communicator::isend`] copies the data into a recycled buffer owned by
//!   the communicator and posts `MPI_Isend` on it; [`Communicator::wait_send`] returns at once,
//!   as a buffered send (`MPI_Bsend`) does once the data is copied. The communicator keeps the
//!   MPI request and the copy until MPI completes it: every later call tests the pending
//!   sends and recycles finished buffers, and dropping the communicator waits for the rest.
//!   A rank therefore never blocks in a send, so schedules in which both partners send before
//!   they receive (recursive doubling, pairwise exchange) cannot deadlock on large
//!   (rendezvous) messages.
//! - **Receives.** [`Communicator::irecv`] records the (source, tag) pair; the receive itself is
//!   a matched probe (`MPI_Mprobe`, which learns the length the trait leaves open) followed by
//!   `MPI_Mrecv` into a recycled buffer in [`Communicator::wait_recv_with`]. MPI keeps messages
//!   of one (source, tag) pair in order, which is the trait's non-overtaking rule.
//! - **Tags.** Our tags are `u64` with the top bit reserved for collectives; MPI tags are
//!   `int`s in `0..=MPI_TAG_UB`, and the standard only guarantees `MPI_TAG_UB >= 32767`. So
//!   the backend uses 15 bits: a user tag `t < 2^14` is sent as `t` (larger ones are refused
//!   with [`CommError::InvalidArgument`]); the collective tag with sequence number `s` is sent
//!   as `2^14 + s mod 2^14`. Collective tags are drawn in the same order on every rank and a
//!   collective completes its receives before the 16384th later one is issued (in any real
//!   program, including the solvers' split-phase reductions), so a reused MPI tag never meets
//!   a message of the older call still in flight.
//!
//! # `native`
//!
//! [`NativeCollective`] and the `native_*` methods of [`MpiComm`] call the MPI library's own
//! collective for every operation (`MPI_Allreduce`, `MPI_Allgatherv`, `MPI_Bcast`,
//! `MPI_Scatter`, `MPI_Gather`, `MPI_Reduce`, `MPI_Alltoall`, `MPI_Barrier`, and
//! `MPI_Iallreduce` for the nonblocking allreduce), to compare our schedules against. `native`
//! is deliberately not a variant of the algorithm registries ([`crate::AllreduceAlgo`] and
//! the others): a registry entry is a pure function that builds a schedule every backend can
//! execute, while the MPI library's collective is not a schedule and exists on no other
//! backend. Keeping it here means no backend-specific branch inside the algorithms, the
//! interpreter or the solvers; a caller that offers `native` (the `krylov bench` command)
//! selects it on `--backend mpi` and reports a clear error on `threads` and `sim`.
//! Results of `native` reductions follow the MPI library's summation order, so they are not
//! bit-identical to our schedules' (use a registry algorithm for reproducible solves).
//!
//! # Threads
//!
//! rsmpi communicators are `!Send`, and so is [`MpiComm`]: every MPI call of a process stays
//! on the thread that owns the communicator (MPI initialized with `Threading::Single` or
//! above suffices).

mod native;

use std::cell::{Cell, RefCell};

use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator as MpiCommunicator, SimpleCommunicator};
use mpi::traits::Source;

use crate::comm::{check_rank, Communicator, RecvRequest, SendRequest, Tag, COLLECTIVE_TAG_BASE};
use crate::CommError;

pub use native::{NativeCollective, NativeOp};

/// Tags below this are user point-to-point tags on the wire.
const USER_TAGS: Tag = 1 << 14;

/// A send posted with `MPI_Isend` on a buffer the communicator owns until MPI completes it.
struct PendingSend {
    request: ffi::MPI_Request,
    /// The copy of the data; its heap storage does not move while the request is pending.
    data: Vec<u8>,
}

/// A [`Communicator`] over an MPI communicator (see the [module documentation](self)).
///
/// ```no_run
/// use castack_collectives::mpi::MpiComm;
/// use castack_collectives::{Collectives, Communicator};
///
/// let universe = mpi::initialize().expect("MPI initialized once");
/// let comm = MpiComm::new(&universe.world());
/// let mut x = [comm.rank() as f64];
/// comm.allreduce_sum(&mut x)?;
/// assert_eq!(x[0], (0..comm.size()).sum::<usize>() as f64);
/// # Ok::<(), castack_collectives::CommError>(())
/// ```
pub struct MpiComm {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    tag_seq: Cell<u64>,
    pending: RefCell<Vec<PendingSend>>,
    /// Finished send buffers, reused by later sends.
    pool: RefCell<Vec<Vec<u8>>>,
    /// The receive buffer (taken out while a message is delivered).
    recv_buf: RefCell<Vec<u8>>,
}

impl std::fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("pending_sends", &self.pending.borrow().len())
            .finish()
    }
}

impl MpiComm {
    /// Wrap `comm` (the world communicator or a split of it). Collective over `comm`: every
    /// rank of it must call this (it duplicates the communicator, so our traffic never mixes
    /// with the application's own messages on `comm`).
    pub fn new<C: MpiCommunicator>(comm: &C) -> Self {
        let comm = comm.duplicate();
        // MPI guarantees 0 <= rank < size, both positive `int`s.
        let rank = usize::try_from(comm.rank()).unwrap_or(0);
        let size = usize::try_from(comm.size()).unwrap_or(1);
        Self {
            comm,
            rank,
            size,
            tag_seq: Cell::new(0),
            pending: RefCell::new(Vec::new()),
            pool: RefCell::new(Vec::new()),
            recv_buf: RefCell::new(Vec::new()),
        }
    }

    /// The duplicated rsmpi communicator our traffic runs on (for the MPI library's own
    /// collectives; see [`NativeCollective`]).
    pub fn raw(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Sends posted and not yet completed by MPI (their receivers have not taken them yet).
    pub fn pending_sends(&self) -> usize {
        self.reap();
        self.pending.borrow().len()
    }

    /// Abort every process of the job (`MPI_Abort` on this communicator) with `code` as the
    /// exit status `mpirun` reports: for a failure one rank sees while the others may be
    /// blocked in a collective, where returning would leave them waiting forever.
    pub fn abort(&self, code: i32) -> ! {
        self.comm.abort(code)
    }

    /// The MPI tag our tag `tag` travels with (see the module documentation).
    fn wire_tag(tag: Tag) -> Result<i32, CommError> {
        let wire = if tag & COLLECTIVE_TAG_BASE != 0 {
            USER_TAGS + (tag & (USER_TAGS - 1))
        } else if tag < USER_TAGS {
            tag
        } else {
            return Err(CommError::InvalidArgument(format!(
                "tag {tag} is outside the MPI backend's user tag range 0..{USER_TAGS}"
            )));
        };
        // wire < 2^15: fits an `int` and MPI's guaranteed tag range.
        Ok(wire as i32)
    }

    /// Test every pending send; recycle the buffers of those MPI has completed.
    fn reap(&self) {
        let mut pending = self.pending.borrow_mut();
        let mut pool = self.pool.borrow_mut();
        pending.retain_mut(|p| {
            let mut flag: std::os::raw::c_int = 0;
            // SAFETY: `p.request` is a live request from `MPI_Isend` (never freed: MPI_Test
            // sets it to MPI_REQUEST_NULL exactly when it completes, and we then drop it from
            // the list); the status is ignored.
            unsafe {
                ffi::MPI_Test(&mut p.request, &mut flag, ffi::RSMPI_STATUS_IGNORE);
            }
            if flag != 0 {
                // Keep a buffer for reuse only while the pool stays small: a burst of
                // large sends (a distributed read's exchange) must not stay allocated.
                let held: usize = pool.iter().map(Vec::capacity).sum();
                if held + p.data.capacity() <= POOL_BYTES {
                    pool.push(std::mem::take(&mut p.data));
                }
                false
            } else {
                true
            }
        });
    }
}

impl Drop for MpiComm {
    /// Waits for the sends still pending (their buffers must outlive MPI's use of them).
    fn drop(&mut self) {
        for p in self.pending.get_mut().iter_mut() {
            // SAFETY: a live request from `MPI_Isend` whose buffer `p.data` is still alive.
            unsafe {
                ffi::MPI_Wait(&mut p.request, ffi::RSMPI_STATUS_IGNORE);
            }
        }
    }
}

/// Most bytes of completed send buffers [`MpiComm`] keeps for reuse (a solver's halo and
/// reduction messages fit many times over).
const POOL_BYTES: usize = 8 << 20;

/// A rank as the `int` MPI uses (ranks come from an MPI communicator's size).
fn mpi_rank(rank: usize) -> i32 {
    i32::try_from(rank).unwrap_or(i32::MAX)
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn isend(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<SendRequest, CommError> {
        check_rank(dest, self.size)?;
        let wire = Self::wire_tag(tag)?;
        let count = i32::try_from(data.len()).map_err(|_| {
            CommError::InvalidArgument(format!(
                "a message of {} bytes exceeds MPI's int count",
                data.len()
            ))
        })?;
        self.reap();
        let mut buf = self.pool.borrow_mut().pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` holds `count` bytes and is kept (unmoved heap storage) in `pending`
        // until MPI_Test or MPI_Wait completes the request; the datatype matches u8; the
        // communicator is live for as long as `self`.
        unsafe {
            ffi::MPI_Isend(
                buf.as_ptr().cast(),
                count,
                u8::equivalent_datatype().as_raw(),
                mpi_rank(dest),
                wire,
                self.comm.as_raw(),
                &mut request,
            );
        }
        self.pending
            .borrow_mut()
            .push(PendingSend { request, data: buf });
        Ok(SendRequest::new(dest))
    }

    fn irecv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError> {
        check_rank(source, self.size)?;
        Self::wire_tag(tag)?;
        Ok(RecvRequest::new(source, tag))
    }

    fn wait_send(&self, mut req: SendRequest) -> Result<(), CommError> {
        // Buffered: the data was copied at isend; MPI completes the send in the background.
        req.done = true;
        self.reap();
        Ok(())
    }

    fn wait_recv_with(
        &self,
        mut req: RecvRequest,
        deliver: &mut dyn FnMut(&[u8]) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        req.done = true;
        let wire = Self::wire_tag(req.tag)?;
        let (message, status) = self
            .comm
            .process_at_rank(mpi_rank(req.source))
            .matched_probe_with_tag(wire);
        let len = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
        let mut buf = std::mem::take(&mut *self.recv_buf.borrow_mut());
        buf.resize(len, 0);
        message.matched_receive_into(&mut buf[..]);
        let delivered = deliver(&buf);
        *self.recv_buf.borrow_mut() = buf;
        self.reap();
        delivered
    }

    fn next_collective_tag(&self) -> Tag {
        let t = self.tag_seq.get();
        self.tag_seq.set(t.wrapping_add(1));
        COLLECTIVE_TAG_BASE | (t & (COLLECTIVE_TAG_BASE - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_map_into_mpis_guaranteed_range() {
        assert_eq!(MpiComm::wire_tag(0), Ok(0));
        assert_eq!(MpiComm::wire_tag(USER_TAGS - 1), Ok(16383));
        assert!(MpiComm::wire_tag(USER_TAGS).is_err());
        assert_eq!(MpiComm::wire_tag(COLLECTIVE_TAG_BASE), Ok(16384));
        assert_eq!(MpiComm::wire_tag(COLLECTIVE_TAG_BASE | 5), Ok(16389));
        // The collective sequence wraps within 2^14 wire tags.
        assert_eq!(
            MpiComm::wire_tag(COLLECTIVE_TAG_BASE | (USER_TAGS + 7)),
            Ok(16391)
        );
        assert_eq!(
            MpiComm::wire_tag(COLLECTIVE_TAG_BASE | (COLLECTIVE_TAG_BASE - 1)),
            Ok(32767)
        );
    }
}
