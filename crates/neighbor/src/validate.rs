//! Collective validation of exchange patterns: every rank joins the same collectives and
//! every rank returns an error when any rank's pattern is invalid, so nothing hangs.
//!
//! 1. One `i64` sum-allreduce of `5p` entries: a failure flag per rank (local validation),
//!    and per receiving rank `j` four net sums over the declarations naming `j` (sends add,
//!    `j`'s own receives subtract): the count of declarations, the sum of the peer ranks,
//!    the sum of the value counts, and the sum of a 64-bit hash of the peer ranks. All four
//!    are zero for every `j` iff (up to a 2^-64 hash collision) the ranks declaring sends to
//!    `j` are exactly the sources `j` declares. A single one-sided declaration is identified
//!    exactly (count +-1, rank sum = that peer, hash = its hash). Since every rank holds the
//!    same reduced vector, all ranks agree on the outcome and on the error.
//! 2. Only when that passes: each rank sends each (non-self) destination its value count
//!    (8 bytes), and compares what arrives with its own receive lists.
//! 3. A second sum-allreduce of `3p` entries carries every receiver's first count mismatch
//!    (lowest source rank), so every rank returns the same [`NeighborError::CountMismatch`].

use castack_collectives::{Collectives, CommError, Communicator, Op, SendRequest};

use crate::error::NeighborError;
use crate::pattern::ExchangePattern;

/// SplitMix64 finaliser: a 64-bit hash of a rank for the declaration fingerprint.
fn rank_hash(rank: usize) -> i64 {
    let mut z = (rank as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as i64
}

/// Validate `pattern` on every rank of `comm`. `local` is this rank's
/// [`ExchangePattern::validate_local`] outcome. Collective: every rank must call it.
pub(crate) fn validate_global<C: Communicator + ?Sized>(
    comm: &C,
    pattern: &ExchangePattern,
    local: Result<(), NeighborError>,
) -> Result<(), NeighborError> {
    let (rank, p) = (comm.rank(), comm.size());

    // Phase 1: failure flags and declaration fingerprints.
    let (flag, count, rsum, vsum, hsum) = (0, p, 2 * p, 3 * p, 4 * p);
    let mut v = vec![0i64; 5 * p];
    if local.is_err() {
        v[flag + rank] = 1;
    }
    // The declaration of `len` values from `from` to `to` joins `to`'s four sums: a send
    // adds them, the receiver's own declaration subtracts them (`wrapping_neg`).
    let mut declare = |to: usize, from: usize, len: usize, sign: fn(i64) -> i64| {
        let terms = [1, from as i64, len as i64, rank_hash(from)];
        for (at, x) in [count, rsum, vsum, hsum].into_iter().zip(terms) {
            v[at + to] = v[at + to].wrapping_add(sign(x));
        }
    };
    for (dest, idx) in &pattern.sends {
        if *dest < p && *dest != rank {
            declare(*dest, rank, idx.len(), |x| x);
        }
    }
    for (source, idx) in &pattern.recvs {
        if *source < p && *source != rank {
            declare(rank, *source, idx.len(), i64::wrapping_neg);
        }
    }
    comm.allreduce_i64(&mut v, Op::Sum)?;
    local?;
    if let Some(peer) = (0..p).find(|&r| v[flag + r] != 0) {
        return Err(NeighborError::PeerInvalid { rank, peer });
    }
    for j in 0..p {
        let (c, rs, vs, hs) = (v[count + j], v[rsum + j], v[vsum + j], v[hsum + j]);
        // Same senders but a different value total is a count mismatch: phase 2 names it.
        if c == 0 && rs == 0 && hs == 0 {
            continue;
        }
        return Err(diagnose(j, p, c, rs, vs, hs));
    }

    // Phase 2: pairwise value counts.
    let tag = comm.next_collective_tag();
    let mut sends: Vec<SendRequest> = Vec::with_capacity(pattern.sends.len());
    let mut result: Result<(), CommError> = Ok(());
    for (dest, idx) in pattern.sends.iter().filter(|(d, _)| *d != rank) {
        match comm.isend(*dest, tag, &(idx.len() as u64).to_ne_bytes()) {
            Ok(req) => sends.push(req),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    // This rank's first mismatch, lowest source rank first: (source, sent, expected).
    let mut mismatch: Option<(usize, u64, usize)> = None;
    if result.is_ok() {
        for (source, idx) in pattern.recvs.iter().filter(|(s, _)| *s != rank) {
            let (from, expected) = (*source, idx.len());
            let received = comm.irecv(from, tag).and_then(|req| {
                comm.wait_recv_with(req, &mut |msg| {
                    let bytes: [u8; 8] = msg.try_into().map_err(|_| CommError::LengthMismatch {
                        rank,
                        from,
                        expected: 8,
                        got: msg.len(),
                    })?;
                    let sent = u64::from_ne_bytes(bytes);
                    if sent != expected as u64 && mismatch.is_none_or(|(s, _, _)| from < s) {
                        mismatch = Some((from, sent, expected));
                    }
                    Ok(())
                })
            });
            if let Err(e) = received {
                result = Err(e);
                break;
            }
        }
    }
    for req in sends {
        let waited = comm.wait_send(req);
        if result.is_ok() {
            result = waited;
        }
    }
    result?;

    // Phase 3: agree on count mismatches.
    let mut m = vec![0i64; 3 * p];
    if let Some((from, sent, expected)) = mismatch {
        m[rank] = from as i64 + 1;
        m[p + rank] = sent as i64;
        m[2 * p + rank] = expected as i64;
    }
    comm.allreduce_i64(&mut m, Op::Sum)?;
    if let Some(j) = (0..p).find(|&j| m[j] != 0) {
        return Err(NeighborError::CountMismatch {
            sender: usize::try_from(m[j] - 1).unwrap_or(usize::MAX),
            receiver: j,
            sent: usize::try_from(m[p + j]).unwrap_or(usize::MAX),
            expected: usize::try_from(m[2 * p + j]).unwrap_or(usize::MAX),
        });
    }
    Ok(())
}

/// Name the one-sided declaration towards receiver `j` from its net sums, when it is a
/// single one; otherwise report the net count difference.
fn diagnose(j: usize, p: usize, c: i64, rs: i64, vs: i64, hs: i64) -> NeighborError {
    let single = |k: i64| usize::try_from(k).ok().filter(|&k| k < p && k != j);
    if c == 1 {
        if let (Some(k), Ok(values)) = (single(rs), usize::try_from(vs)) {
            if hs == rank_hash(k) {
                return NeighborError::UnmatchedSend {
                    sender: k,
                    receiver: j,
                    values,
                };
            }
        }
    } else if c == -1 {
        let k = single(rs.wrapping_neg());
        if let (Some(k), Ok(values)) = (k, usize::try_from(vs.wrapping_neg())) {
            if hs == rank_hash(k).wrapping_neg() {
                return NeighborError::UnmatchedRecv {
                    sender: k,
                    receiver: j,
                    values,
                };
            }
        }
    }
    NeighborError::UnmatchedDeclarations {
        receiver: j,
        excess: c,
    }
}
