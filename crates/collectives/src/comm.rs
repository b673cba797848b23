//! The object-safe communicator base trait: rank, size and nonblocking point-to-point.
//!
//! Shaped like rsmpi's: a small base trait every backend implements, collectives as an
//! extension trait ([`crate::Collectives`]) with a blanket implementation, so an algorithm
//! is written once over this trait and run by every backend.

use crate::{CommError, RankSchedule};

/// A message tag. Tags with the top bit set are reserved for collectives
/// (see [`Communicator::next_collective_tag`]).
pub type Tag = u64;

/// The first tag reserved for collectives; user point-to-point tags must stay below it.
pub const COLLECTIVE_TAG_BASE: Tag = 1 << 63;

/// A posted send. Must be passed to [`Communicator::wait_send`]; dropping it unfinished is a
/// bug (debug builds assert it).
#[must_use = "a send request must be waited"]
#[derive(Debug)]
pub struct SendRequest {
    pub(crate) dest: usize,
    pub(crate) done: bool,
}

impl SendRequest {
    /// A request for a send to `dest`; backends create these in `isend`.
    pub fn new(dest: usize) -> Self {
        Self { dest, done: false }
    }

    /// The destination rank.
    pub fn dest(&self) -> usize {
        self.dest
    }
}

impl Drop for SendRequest {
    fn drop(&mut self) {
        debug_assert!(
            self.done || std::thread::panicking(),
            "a SendRequest to rank {} was dropped without wait_send",
            self.dest
        );
    }
}

/// A posted receive. Must be passed to [`Communicator::wait_recv_with`] (or
/// [`PointToPoint::wait_recv`]).
#[must_use = "a receive request must be waited"]
#[derive(Debug)]
pub struct RecvRequest {
    pub(crate) source: usize,
    pub(crate) tag: Tag,
    pub(crate) done: bool,
}

impl RecvRequest {
    /// A receive request matching messages from `source` with `tag`.
    pub fn new(source: usize, tag: Tag) -> Self {
        Self {
            source,
            tag,
            done: false,
        }
    }

    /// The source rank.
    pub fn source(&self) -> usize {
        self.source
    }

    /// The tag this receive matches.
    pub fn tag(&self) -> Tag {
        self.tag
    }
}

impl Drop for RecvRequest {
    fn drop(&mut self) {
        debug_assert!(
            self.done || std::thread::panicking(),
            "a RecvRequest from rank {} was dropped without wait_recv",
            self.source
        );
    }
}

/// The communicator base trait: what a backend must provide.
///
/// Messages between a pair of ranks with the same tag are non-overtaking (FIFO), as in MPI.
/// Sends are buffered: the data is copied when the send is posted, so the caller may reuse
/// its buffer at once; the request must still be waited.
pub trait Communicator {
    /// This rank's index, `0..size()`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// Post a send of `data` to `dest` with `tag`.
    fn isend(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<SendRequest, CommError>;

    /// Post a receive of the next message from `source` with `tag`.
    fn irecv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError>;

    /// Complete a send.
    fn wait_send(&self, req: SendRequest) -> Result<(), CommError>;

    /// Complete a receive: block until the message has arrived and hand its bytes to
    /// `deliver`, which must consume them (copy or reduce into the caller's buffer).
    fn wait_recv_with(
        &self,
        req: RecvRequest,
        deliver: &mut dyn FnMut(&[u8]) -> Result<(), CommError>,
    ) -> Result<(), CommError>;

    /// A fresh tag for the next collective call. Every rank calls collectives in the same
    /// order, so the sequence agrees across ranks and concurrent collectives never mix.
    fn next_collective_tag(&self) -> Tag;

    /// Modeled time: this rank starts executing its part `sched` of a collective (or
    /// neighbour exchange) under `tag`, before its first put. A modeling backend (`sim`)
    /// records the entry clock; once every rank has entered the call under `tag`, the whole
    /// schedule is priced. Backends without a model ignore it (the default).
    fn model_enter(&self, tag: Tag, sched: &RankSchedule) -> Result<(), CommError> {
        let _ = (tag, sched);
        Ok(())
    }

    /// Modeled time: this rank has completed the execution it entered with
    /// [`Communicator::model_enter`] under `tag` (its data is in place). A modeling backend
    /// advances this rank's clock to the priced completion (waiting, if needed, until every
    /// rank has entered). Default: nothing.
    fn model_leave(&self, tag: Tag) -> Result<(), CommError> {
        let _ = tag;
        Ok(())
    }

    /// Modeled time: charge local work (memory traffic, flops, kernel launches) done between
    /// communication calls to this rank's clock, priced by the fabric's device model.
    /// Default: nothing (real backends measure wall time instead).
    fn model_compute(&self, work: ComputeWork) {
        let _ = work;
    }

    /// This rank's modeled clock in seconds, or `None` on a backend whose times are measured
    /// (threads, mpi).
    fn model_clock(&self) -> Option<f64> {
        None
    }
}

/// Local work between communication calls, as a device model prices it:
/// `launches * launch latency + max(bytes / bandwidth, flops / flop rate)`, the bandwidth
/// that of the cache level holding `working_set` (memory bandwidth without levels; SpMV
/// bytes at the level's SpMV figure where it has one: `fabric_sim::compute`), plus
/// `transfers * host link latency + transfer_bytes / host link bandwidth` for the copies
/// between host and device memory a GPU rank makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputeWork {
    /// Bytes read and written in memory.
    pub bytes: u64,
    /// Floating-point operations.
    pub flops: u64,
    /// Kernel launches (each pays the device's launch latency).
    pub launches: u32,
    /// Host-device copies (each pays the host link's latency).
    pub transfers: u32,
    /// Bytes copied between host and device memory.
    pub transfer_bytes: u64,
    /// Of `bytes`, those a sparse matrix-vector product moves (its indexed reads reach their
    /// own bandwidth where the device model gives one).
    pub spmv_bytes: u64,
    /// The per-rank working set the work runs in (bytes), which decides the cache level it
    /// streams from; 0: unknown (priced at memory bandwidth). Work added together keeps the
    /// largest.
    pub working_set: u64,
    /// Dependent additions of the work's fixed-order sums, one after another (the latency
    /// bound of a device model with an addition latency).
    pub chain: u64,
}

/// Convenience methods over any [`Communicator`].
pub trait PointToPoint: Communicator {
    /// Complete a receive into `buf`, whose length must equal the message length.
    fn wait_recv(&self, req: RecvRequest, buf: &mut [u8]) -> Result<(), CommError> {
        let (rank, from) = (self.rank(), req.source);
        self.wait_recv_with(req, &mut |msg| {
            if msg.len() != buf.len() {
                return Err(CommError::LengthMismatch {
                    rank,
                    from,
                    expected: buf.len(),
                    got: msg.len(),
                });
            }
            buf.copy_from_slice(msg);
            Ok(())
        })
    }

    /// Blocking send.
    fn send(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        let req = self.isend(dest, tag, data)?;
        self.wait_send(req)
    }

    /// Blocking receive into `buf`.
    fn recv(&self, source: usize, tag: Tag, buf: &mut [u8]) -> Result<(), CommError> {
        let req = self.irecv(source, tag)?;
        self.wait_recv(req, buf)
    }

    /// Post a send of `f64` values (buffered: `data` may be reused at once).
    fn isend_f64(&self, dest: usize, tag: Tag, data: &[f64]) -> Result<SendRequest, CommError> {
        self.isend(dest, tag, bytemuck::cast_slice(data))
    }

    /// Complete a receive into `f64` values; the message must hold exactly `buf.len()`.
    fn wait_recv_f64(&self, req: RecvRequest, buf: &mut [f64]) -> Result<(), CommError> {
        self.wait_recv(req, bytemuck::cast_slice_mut(buf))
    }

    /// Blocking send of `f64` values.
    fn send_f64(&self, dest: usize, tag: Tag, data: &[f64]) -> Result<(), CommError> {
        self.send(dest, tag, bytemuck::cast_slice(data))
    }

    /// Blocking receive of `f64` values into `buf`.
    fn recv_f64(&self, source: usize, tag: Tag, buf: &mut [f64]) -> Result<(), CommError> {
        self.recv(source, tag, bytemuck::cast_slice_mut(buf))
    }
}

impl<C: Communicator + ?Sized> PointToPoint for C {}

/// Check that `rank < size`.
pub(crate) fn check_rank(rank: usize, size: usize) -> Result<(), CommError> {
    if rank < size {
        Ok(())
    } else {
        Err(CommError::RankOutOfRange { rank, size })
    }
}
