//! Ring allgatherv (the classic ring of Thakur, Rabenseifner and Gropp, "Optimization of
//! collective communication operations in MPICH", IJHPCA 2005, section 4.1), for any p.
//!
//! At step s (0 <= s < p - 1) rank r puts block (r - s) mod p to rank r + 1 and receives
//! block (r - 1 - s) mod p from rank r - 1 (mod p); the block it forwards at step s + 1 is
//! the one it has just received. Zero-length blocks are not sent (every rank knows the
//! lengths), so a step with nothing to move is left out.
//!
//! Cost for blocks totalling n bytes: p - 1 steps; each rank sends p - 1 messages (one per
//! non-empty block other than its right neighbour's), p (p - 1) messages and (p - 1) n bytes
//! in total. Bandwidth-optimal, latency linear in p.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "p-1 steps, rank r forwards block (r-s) mod p to r+1; bandwidth-optimal, latency ~ p";

/// Rank `rank`'s schedule for blocks of `blocks[r]` bytes (`rank < blocks.len()`).
pub fn build(rank: usize, blocks: &[usize]) -> RankSchedule {
    let Some(displ) = super::layout(blocks) else {
        return RankSchedule::default();
    };
    let p = blocks.len();
    let block = |b: usize| displ[b]..displ[b + 1];
    let right = (rank + 1) % p;
    let left = (rank + p - 1) % p;
    let mut rs = RankSchedule::default();
    for s in 0..p - 1 {
        let send = (rank + p - s) % p;
        let recv = (left + p - s) % p;
        rs.push(super::exchange(
            Step::new(),
            right,
            &[block(send)],
            left,
            &[block(recv)],
        ));
    }
    rs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::one_put_one_arrival;

    #[test]
    fn p_minus_one_steps_one_message_each() {
        let blocks = [3, 1, 4, 1, 5];
        for r in 0..5 {
            let rs = build(r, &blocks);
            assert_eq!(rs.steps.len(), 4);
            assert!(rs.steps.iter().all(one_put_one_arrival));
        }
    }

    #[test]
    fn empty_blocks_are_not_sent() {
        let sched = crate::AllgathervAlgo::Ring.schedule(&[0, 8, 0]);
        sched.validate().unwrap();
        // Only block 1 moves: to rank 2, then on to rank 0.
        assert_eq!(sched.totals(), (2, 16));
    }
}
