//! Naive neighbour exchange (ALGORITHMS.md section 2; what MPI implementations do): `start`
//! packs every outgoing message and posts all sends at once; `finish` receives every
//! incoming message and unpacks it straight from the received bytes into the destination
//! slice, then completes the sends.
//!
//! Cost per exchange, for a rank with N neighbours of m bytes each on a node with C
//! communication devices of bandwidth B and per-message cost L: N messages and N*m bytes out
//! and in; devices carry whole messages, so ceil(N/C) rounds:
//! D_naive = L*ceil(N/C) + ceil(N/C)*m/B.

use castack_collectives::{CommError, Communicator, SendRequest, Tag};

use crate::exchange::{Plan, Workspace};

/// One line for help text and reports.
pub(crate) const DESCRIPTION: &str =
    "post all sends, then wait all receives; D = L*ceil(N/C) + ceil(N/C)*m/B";

/// Pack `src` and post every send with `tag`. On error, the sends already posted are
/// completed before returning.
pub(crate) fn start<C: Communicator + ?Sized>(
    plan: &Plan,
    ws: &mut Workspace,
    comm: &C,
    src: &[f64],
    tag: Tag,
) -> Result<(), CommError> {
    for (slot, &i) in ws.pack.chunks_exact_mut(8).zip(&plan.send_index) {
        slot.copy_from_slice(&src[i].to_ne_bytes());
    }
    for peer in &plan.sends {
        let bytes = &ws.pack[8 * peer.values.start..8 * peer.values.end];
        match comm.isend(peer.rank, tag, bytes) {
            Ok(req) => ws.sends.push(req),
            Err(e) => {
                // The first error wins; completing the others can only add noise.
                let _ = wait_sends(comm, &mut ws.sends);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Receive every message of the exchange with `tag` into `dst`, do the local copy, and
/// complete the sends posted by [`start`] (also on the error path).
pub(crate) fn finish<C: Communicator + ?Sized>(
    plan: &Plan,
    ws: &mut Workspace,
    comm: &C,
    dst: &mut [f64],
    tag: Tag,
) -> Result<(), CommError> {
    let rank = plan.rank;
    let mut result = Ok(());
    for peer in &plan.recvs {
        let idx = &plan.recv_index[peer.values.clone()];
        let from = peer.rank;
        let received = comm
            .irecv(from, tag)
            .and_then(|req| comm.wait_recv_with(req, &mut |msg| unpack(msg, idx, dst, rank, from)));
        if let Err(e) = received {
            result = Err(e);
            break;
        }
    }
    if let (Some(local), true) = (&plan.local, result.is_ok()) {
        let bytes = &ws.pack[8 * local.send.start..8 * local.send.end];
        let idx = &plan.recv_index[local.recv.clone()];
        result = unpack(bytes, idx, dst, rank, rank);
    }
    let waited = wait_sends(comm, &mut ws.sends);
    result.and(waited)
}

/// Unpack the `f64` values of `msg` into `dst` at `idx`, in order.
fn unpack(
    msg: &[u8],
    idx: &[usize],
    dst: &mut [f64],
    rank: usize,
    from: usize,
) -> Result<(), CommError> {
    if msg.len() != 8 * idx.len() {
        return Err(CommError::LengthMismatch {
            rank,
            from,
            expected: 8 * idx.len(),
            got: msg.len(),
        });
    }
    for (chunk, &i) in msg.chunks_exact(8).zip(idx) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        dst[i] = f64::from_ne_bytes(b);
    }
    Ok(())
}

/// Complete every posted send; the first error is returned.
fn wait_sends<C: Communicator + ?Sized>(
    comm: &C,
    sends: &mut Vec<SendRequest>,
) -> Result<(), CommError> {
    let mut result = Ok(());
    for req in sends.drain(..) {
        let waited = comm.wait_send(req);
        if result.is_ok() {
            result = waited;
        }
    }
    result
}
