//! Bruck alltoall (J. Bruck, C.-T. Ho, S. Kipnis, E. Upfal, D. Weathersby, "Efficient
//! algorithms for all-to-all communications in multiport message-passing systems", IEEE
//! TPDS 8(11), 1997; `MPIR_Alltoall_intra_brucks` in MPICH), for any p.
//!
//! Three phases, the data movement between ranks in ceil(log2 p) steps:
//! 1. Local rotation into scratch T: `T[i] = buf[(rank + i) mod p]` (the block for the rank
//!    i places ahead).
//! 2. For k = 1, 2, 4, ... < p: pack every `T[i]` with bit k set in i into a pack area
//!    (contiguous runs of k indices, copied in index order), put the pack to rank
//!    (rank + k) mod p, receive the same indices' pack from (rank - k) mod p into an unpack
//!    area, and unpack it into T at the start of the next step. A block at index i moves
//!    forward once per set bit of i: i ranks in all.
//! 3. Inverse rotation: `buf[(rank - i) mod p] = T[i]` for i > 0 (index 0 is the own block,
//!    which never leaves the buffer).
//!
//! Each step is one message (the pack), so the copies are local and the network sees
//! log2 p puts per rank. The pack and unpack areas are separate, so no put reads a range a
//! peer is writing.
//!
//! Cost for blocks of b bytes: ceil(log2 p) steps (plus one local copy step); each rank
//! sends ceil(log2 p) messages, of n_k b bytes at step k where n_k = #{i < p : i & k != 0}
//! (p/2 for p a power of two): about (p/2) log2 p b bytes per rank, (log2 p)/2 times what
//! pairwise sends, but ceil(log2 p) instead of p - 1 message latencies, so it wins for small
//! b. Local copies: about p b for each rotation and n_k b twice per step. Scratch:
//! (p + 2 max_k n_k) b bytes per rank.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "ceil(log2 p) steps, blocks with bit k of their distance packed to rank+k; small blocks";

/// The runs of indices `i < p` with bit `k` set: `[k, 2k)`, `[3k, 4k)`, ... clipped to p.
fn runs(p: usize, k: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (k..p).step_by(2 * k).map(move |i| i..(i + k).min(p))
}

/// Rank `rank`'s schedule (`rank < p`).
pub fn build(p: usize, rank: usize, block: usize) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || block == 0 {
        return rs;
    }
    let total = p * block;
    let count = |k: usize| runs(p, k).map(|r| r.len()).sum::<usize>();
    // The distances k = 1, 2, 4, ... < p.
    let ks = || std::iter::successors(Some(1usize), |k| Some(k << 1)).take_while(|&k| k < p);
    let max_n = ks().map(count).max().unwrap_or(0);
    // Working-buffer offsets: T (the rotated blocks), the pack area, the unpack area.
    let t_off = total;
    let pack_off = 2 * total;
    let unpack_off = pack_off + max_n * block;
    rs.scratch_bytes = total + 2 * max_n * block;

    let unpack = |mut step: Step, k: usize| {
        let mut pos = unpack_off;
        for r in runs(p, k) {
            let len = r.len() * block;
            step = step.copy(pos..pos + len, t_off + r.start * block);
            pos += len;
        }
        step
    };
    let mut prev = None;
    for k in ks() {
        let mut step = Step::new();
        if let Some(pk) = prev {
            step = unpack(step, pk);
        } else {
            // Phase 1: T[i] = buf[(rank + i) mod p].
            step = step.copy(rank * block..total, t_off);
            if rank > 0 {
                step = step.copy(0..rank * block, t_off + (p - rank) * block);
            }
        }
        let mut pos = pack_off;
        for r in runs(p, k) {
            let len = r.len() * block;
            let src = t_off + r.start * block;
            step = step.copy(src..src + len, pos);
            pos += len;
        }
        let len = count(k) * block;
        rs.push(
            step.put((rank + k) % p, pack_off..pack_off + len, unpack_off)
                .arrive((rank + p - k) % p, unpack_off, len),
        );
        prev = Some(k);
    }
    // Phase 3: the last unpack, then buf[(rank - i) mod p] = T[i].
    let mut done = Step::new();
    if let Some(pk) = prev {
        done = unpack(done, pk);
    }
    for i in 1..p {
        let src = t_off + i * block;
        done = done.copy(src..src + block, ((rank + p - i) % p) * block);
    }
    rs.push(done);
    rs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_messages_per_rank() {
        for p in 1..=17usize {
            let sched = crate::AlltoallAlgo::Bruck.schedule(p, 8);
            sched.validate().unwrap();
            let log = crate::algo::ceil_log2(p) as usize;
            for rs in &sched.ranks {
                assert_eq!(rs.steps.iter().map(|s| s.puts.len()).sum::<usize>(), log);
            }
        }
    }

    #[test]
    fn runs_cover_the_indices_with_bit_k() {
        for p in 1..=17 {
            for k in [1, 2, 4, 8, 16] {
                let got: Vec<usize> = runs(p, k).flatten().collect();
                let want: Vec<usize> = (0..p).filter(|i| i & k != 0).collect();
                assert_eq!(got, want, "p={p} k={k}");
            }
        }
    }
}
