//! The one schedule interpreter for point-to-point backends (`threads`, `mpi`): each put is
//! a matched send/receive pair, each arrival is received and copied or reduced in place.

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
    fn slice(&self, start: usize, len: usize) -> &[u8] {
        let u = self.user.len();
        if start >= u {
            &self.scratch[start - u..start - u + len]
        } else {
            &self.user[start..start + len]
        }
    }

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
    if ws.scratch.len() < sched.scratch_bytes {
        ws.scratch.resize(sched.scratch_bytes, 0);
    }
    let mut work = Work {
        user: buf,
        scratch: &mut ws.scratch[..sched.scratch_bytes],
    };
    let rank = comm.rank();
    for step in &sched.steps {
        for c in &step.copies {
            work.copy(c.src.clone(), c.dst_offset);
        }
        let mut result = Ok(());
        for put in &step.puts {
            let data = work.slice(put.src.start, put.src.len());
            match comm.isend(put.to, tag, data) {
                Ok(req) => ws.sends.push(req),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            result = receive_arrivals(comm, step, &mut work, rank, tag);
        }
        // Complete every posted send, also on the error path (requests must be waited).
        for req in ws.sends.drain(..) {
            let waited = comm.wait_send(req);
            if result.is_ok() {
                result = waited;
            }
        }
        result?;
    }
    Ok(())
}

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
