//! The one schedule interpreter for point-to-point backends (`threads`, `mpi`, `sim`): each
//! put is a matched send/receive pair, each arrival is received and copied or reduced in
//! place. Every execution is bracketed by the communicator's model hooks
//! ([`Communicator::model_enter`] / [`Communicator::model_leave`]), no-ops except on `sim`.

use crate::comm::{Communicator, SendRequest, Tag};
use crate::schedule::{Combine, Datatype, RankSchedule, Reduction};
use crate::CommError;

/// Reusable state of the interpreter, so executing a persistent schedule allocates nothing
/// once warmed up.
#[derive(Debug, Default)]
pub struct ExecWorkspace {
    sends: Vec<SendRequest>,
    scratch: Vec<u8>,
}

impl ExecWorkspace {
    /// An empty workspace.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The working buffer of a rank: the caller's buffer followed by scratch.
struct Work<'a> {
    user: &'a mut [u8],
    scratch: &'a mut [u8],
}

impl Work<'_> {
    #[inline]
    fn slice(&self, start: usize, len: usize) -> &[u8] {
        let u = self.user.len();
        if start >= u {
            &self.scratch[start - u..start - u + len]
        } else {
            &self.user[start..start + len]
        }
    }

    #[inline]
    fn slice_mut(&mut self, start: usize, len: usize) -> &mut [u8] {
        let u = self.user.len();
        if start >= u {
            &mut self.scratch[start - u..start - u + len]
        } else {
            &mut self.user[start..start + len]
        }
    }

    fn copy(&mut self, src: std::ops::Range<usize>, dst: usize) {
        let u = self.user.len();
        let len = src.len();
        match (src.start >= u, dst >= u) {
            (false, false) => self.user.copy_within(src, dst),
            (true, true) => self
                .scratch
                .copy_within(src.start - u..src.end - u, dst - u),
            (false, true) => self.scratch[dst - u..dst - u + len].copy_from_slice(&self.user[src]),
            (true, false) => {
                self.user[dst..dst + len].copy_from_slice(&self.scratch[src.start - u..src.end - u])
            }
        }
    }
}

/// Reduce `incoming` into `local` element-wise.
pub(crate) fn reduce_bytes(red: Reduction, incoming: &[u8], local: &mut [u8]) {
    let pairs = incoming.chunks_exact(8).zip(local.chunks_exact_mut(8));
    match red.datatype {
        Datatype::F64 => {
            for (a, b) in pairs {
                let x = f64::from_ne_bytes(a.try_into().unwrap_or([0; 8]));
                let y = f64::from_ne_bytes((&*b).try_into().unwrap_or([0; 8]));
                b.copy_from_slice(&red.op.apply_f64(x, y).to_ne_bytes());
            }
        }
        Datatype::I64 => {
            for (a, b) in pairs {
                let x = i64::from_ne_bytes(a.try_into().unwrap_or([0; 8]));
                let y = i64::from_ne_bytes((&*b).try_into().unwrap_or([0; 8]));
                b.copy_from_slice(&red.op.apply_i64(x, y).to_ne_bytes());
            }
        }
    }
}

/// Execute rank `comm.rank()`'s part of a schedule on `buf` (the caller's buffer), with a
/// fresh collective tag.
///
/// # Panics
/// If the schedule addresses bytes outside the working buffer (a bug in the algorithm; every
/// algorithm's schedules are checked by [`crate::Schedule::validate`] in tests).
pub fn execute<C: Communicator + ?Sized>(
    comm: &C,
    sched: &RankSchedule,
    buf: &mut [u8],
    ws: &mut ExecWorkspace,
) -> Result<(), CommError> {
    let tag = comm.next_collective_tag();
    execute_tagged(comm, sched, buf, ws, tag)
}

pub(crate) fn execute_tagged<C: Communicator + ?Sized>(
    comm: &C,
    sched: &RankSchedule,
    buf: &mut [u8],
    ws: &mut ExecWorkspace,
    tag: Tag,
) -> Result<(), CommError> {
    // One pass over the steps (not `start_tagged` then `finish_tagged`: the hand-over cost
    // a 2-rank allreduce step to self about 8 ns of its 48).
    let mut work = enter(comm, sched, buf, &mut ws.scratch, tag)?;
    let rank = comm.rank();
    for step in &sched.steps {
        post_step(comm, step, &mut work, &mut ws.sends, tag)?;
        complete_step(comm, step, &mut work, &mut ws.sends, rank, tag)?;
    }
    comm.model_leave(tag)
}

/// How far [`start_tagged`] got: the index of the step whose puts are posted and whose
/// arrivals are still due (`steps.len()` when the schedule already completed).
pub(crate) type Resume = usize;

/// Enter the communicator's model for `sched` under `tag` ([`Communicator::model_enter`]: a
/// modeling backend prices the call from the clocks at which the ranks started it) and
/// return the working buffer: `buf` followed by the schedule's scratch.
fn enter<'a, C: Communicator + ?Sized>(
    comm: &C,
    sched: &RankSchedule,
    buf: &'a mut [u8],
    scratch: &'a mut Vec<u8>,
    tag: Tag,
) -> Result<Work<'a>, CommError> {
    comm.model_enter(tag, sched)?;
    if scratch.len() < sched.scratch_bytes {
        scratch.resize(sched.scratch_bytes, 0);
    }
    Ok(Work {
        user: buf,
        scratch: &mut scratch[..sched.scratch_bytes],
    })
}

/// Execute every leading step that needs no arrival, then the copies and puts of the first
/// step that does, and stop before its arrivals: the nonblocking half of a collective. The
/// posted sends stay in `ws` until [`finish_tagged`] completes them (they are buffered, so
/// the data is already in flight). On error every posted send has been completed.
///
/// It first enters the communicator's model (see `enter`; [`finish_tagged`] leaves it).
pub(crate) fn start_tagged<C: Communicator + ?Sized>(
    comm: &C,
    sched: &RankSchedule,
    buf: &mut [u8],
    ws: &mut ExecWorkspace,
    tag: Tag,
) -> Result<Resume, CommError> {
    let mut work = enter(comm, sched, buf, &mut ws.scratch, tag)?;
    let rank = comm.rank();
    for (i, step) in sched.steps.iter().enumerate() {
        post_step(comm, step, &mut work, &mut ws.sends, tag)?;
        if !step.arrivals.is_empty() {
            return Ok(i);
        }
        complete_step(comm, step, &mut work, &mut ws.sends, rank, tag)?;
    }
    Ok(sched.steps.len())
}

/// Complete an execution begun by [`start_tagged`] on the same (unmodified) buffer: the
/// arrivals of step `from`, then every later step, and finally leaves the model's call
/// ([`Communicator::model_leave`]: a modeling backend moves this rank's clock to the priced
/// completion). On error every posted send has been completed.
pub(crate) fn finish_tagged<C: Communicator + ?Sized>(
    comm: &C,
    sched: &RankSchedule,
    buf: &mut [u8],
    ws: &mut ExecWorkspace,
    tag: Tag,
    from: Resume,
) -> Result<(), CommError> {
    finish_steps(comm, sched, buf, ws, tag, from)?;
    comm.model_leave(tag)
}

fn finish_steps<C: Communicator + ?Sized>(
    comm: &C,
    sched: &RankSchedule,
    buf: &mut [u8],
    ws: &mut ExecWorkspace,
    tag: Tag,
    from: Resume,
) -> Result<(), CommError> {
    let Some(first) = sched.steps.get(from) else {
        return complete_sends(comm, &mut ws.sends);
    };
    let rank = comm.rank();
    let mut work = Work {
        user: buf,
        scratch: &mut ws.scratch[..sched.scratch_bytes],
    };
    complete_step(comm, first, &mut work, &mut ws.sends, rank, tag)?;
    for step in &sched.steps[from + 1..] {
        post_step(comm, step, &mut work, &mut ws.sends, tag)?;
        complete_step(comm, step, &mut work, &mut ws.sends, rank, tag)?;
    }
    Ok(())
}

/// A step's arrivals, then the completion of its posted sends (also when a receive failed);
/// the first error.
fn complete_step<C: Communicator + ?Sized>(
    comm: &C,
    step: &crate::schedule::Step,
    work: &mut Work<'_>,
    sends: &mut Vec<SendRequest>,
    rank: usize,
    tag: Tag,
) -> Result<(), CommError> {
    let received = receive_arrivals(comm, step, work, rank, tag);
    let completed = complete_sends(comm, sends);
    received?;
    completed
}

/// A step's local copies and puts; on a failed put, the sends already posted are completed.
#[inline]
fn post_step<C: Communicator + ?Sized>(
    comm: &C,
    step: &crate::schedule::Step,
    work: &mut Work<'_>,
    sends: &mut Vec<SendRequest>,
    tag: Tag,
) -> Result<(), CommError> {
    for c in &step.copies {
        work.copy(c.src.clone(), c.dst_offset);
    }
    for put in &step.puts {
        let data = work.slice(put.src.start, put.src.len());
        match comm.isend(put.to, tag, data) {
            Ok(req) => sends.push(req),
            Err(e) => {
                // The put's error is the one to report; the others' completions follow it.
                let _ = complete_sends(comm, sends);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Complete every posted send, also on the error path (requests must be waited), and return
/// the first error.
///
/// Callers keep their own result and check it after this (see `complete_step`): only
/// an error is ever moved. Copying a whole `Result<(), CommError>` that a callee wrote with
/// a narrower store stalls the store-to-load forwarding, which measurably slowed every
/// small collective.
#[inline]
fn complete_sends<C: Communicator + ?Sized>(
    comm: &C,
    sends: &mut Vec<SendRequest>,
) -> Result<(), CommError> {
    let mut first = Ok(());
    for req in sends.drain(..) {
        if let Err(e) = comm.wait_send(req) {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

#[inline]
fn receive_arrivals<C: Communicator + ?Sized>(
    comm: &C,
    step: &crate::schedule::Step,
    work: &mut Work<'_>,
    rank: usize,
    tag: Tag,
) -> Result<(), CommError> {
    for a in &step.arrivals {
        let req = comm.irecv(a.from, tag)?;
        let dst = work.slice_mut(a.dst_offset, a.len);
        let (from, expected) = (a.from, a.len);
        comm.wait_recv_with(req, &mut |msg| {
            if msg.len() != expected {
                return Err(CommError::LengthMismatch {
                    rank,
                    from,
                    expected,
                    got: msg.len(),
                });
            }
            match a.combine {
                Combine::Copy => dst.copy_from_slice(msg),
                Combine::Reduce(red) => reduce_bytes(red, msg, dst),
            }
            Ok(())
        })?;
    }
    Ok(())
}
