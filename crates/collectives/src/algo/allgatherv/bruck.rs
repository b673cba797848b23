//! Bruck allgatherv (Bruck, Ho, Kipnis, Upfal and Weathersby, "Efficient algorithms for
//! all-to-all communications in multiport message-passing systems", IEEE TPDS 1997; the
//! allgather of Thakur, Rabenseifner and Gropp, IJHPCA 2005, section 4.1), for any p.
//!
//! Each rank r works in scratch, where it keeps the blocks it holds in rotated order
//! r, r + 1, ..., r + p - 1 (mod p), so that what it holds is always one contiguous prefix.
//! It first copies its own block to the start of scratch. At step k (distance d = 2^k,
//! 0 <= k < ceil(log2 p)) it puts its first min(d, p - d) rotated blocks to rank r - d, where
//! they are rotated blocks d, d + 1, ... of the receiver, and receives as many from r + d
//! behind its own prefix; the prefix doubles every step (the last step completes it). A
//! final local step rotates scratch back into the caller's buffer with two copies (blocks
//! r..p and 0..r). Zero-length ranges are not sent; p = 1 or an empty buffer does nothing.
//!
//! Cost for blocks totalling n bytes: ceil(log2 p) communication steps plus one local step;
//! each rank sends ceil(log2 p) messages (fewer when its blocks are empty), (p - 1) n bytes in
//! total as for the ring; n bytes of scratch plus 2n bytes of local copies per rank. Works
//! for any p without folding (no power-of-two restriction): latency-optimal for small n.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "ceil(log2 p) steps to rank r-2^k of the held prefix, rotated order in scratch; any p";

/// Rank `rank`'s schedule for blocks of `blocks[r]` bytes (`rank < blocks.len()`).
pub fn build(rank: usize, blocks: &[usize]) -> RankSchedule {
    let Some(displ) = super::layout(blocks) else {
        return RankSchedule::default();
    };
    let p = blocks.len();
    let total = displ[p];
    let mut rs = RankSchedule {
        scratch_bytes: total,
        ..RankSchedule::default()
    };
    // Offset in rank `owner`'s scratch of its rotated block `i` (block (owner + i) mod p):
    // the blocks owner..p come first, then 0..owner.
    let rotated = |owner: usize, i: usize| {
        let b = owner + i;
        if b <= p {
            displ[b] - displ[owner]
        } else {
            total - displ[owner] + displ[b - p]
        }
    };
    let mut first = Step::new();
    if blocks[rank] > 0 {
        first = first.copy(displ[rank]..displ[rank + 1], total);
    }
    let mut step = first;
    let mut d = 1;
    while d < p {
        let cnt = d.min(p - d);
        let to = (rank + p - d) % p;
        let from = (rank + d) % p;
        let send = rotated(rank, 0)..rotated(rank, cnt);
        if !send.is_empty() {
            // My rotated block i is the receiver's rotated block d + i.
            step = step.put(
                to,
                total + send.start..total + send.end,
                total + rotated(to, d),
            );
        }
        let recv = rotated(rank, d)..rotated(rank, d + cnt);
        if !recv.is_empty() {
            step = step.arrive(from, total + recv.start, recv.len());
        }
        rs.push(step);
        step = Step::new();
        d <<= 1;
    }
    // Rotate back: scratch holds blocks rank..p, then 0..rank.
    let (tail, head) = (total - displ[rank], displ[rank]);
    let mut back = Step::new();
    if tail > 0 {
        back = back.copy(total..total + tail, displ[rank]);
    }
    if head > 0 {
        back = back.copy(total + tail..total + total, 0);
    }
    rs.push(back);
    rs
}

#[cfg(test)]
mod tests {
    use crate::algo::one_put_one_arrival;

    #[test]
    fn ceil_log2_p_steps_one_message_each() {
        for p in [2, 3, 5, 8, 16, 17] {
            let blocks: Vec<usize> = (0..p).map(|r| 8 * (r + 1)).collect();
            let n: usize = blocks.iter().sum();
            let sched = crate::AllgathervAlgo::Bruck.schedule(&blocks);
            sched.validate().unwrap();
            let log = crate::algo::ceil_log2(p) as usize;
            for rs in &sched.ranks {
                assert_eq!(rs.steps.len(), log + 1, "p={p}");
                assert_eq!(rs.scratch_bytes, n);
                let comm = &rs.steps[..log];
                assert!(comm.iter().all(one_put_one_arrival));
                assert!(rs.steps[log].puts.is_empty() && rs.steps[log].arrivals.is_empty());
            }
            assert_eq!(sched.totals(), (p * log, (p - 1) * n), "p={p}");
        }
    }

    #[test]
    fn empty_blocks_are_not_sent() {
        let sched = crate::AllgathervAlgo::Bruck.schedule(&[0, 8, 0]);
        sched.validate().unwrap();
        // Block 1 reaches rank 0 at distance 1 and rank 2 at distance 2.
        assert_eq!(sched.totals(), (2, 16));
    }
}
