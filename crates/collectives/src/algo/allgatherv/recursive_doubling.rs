//! Recursive-doubling allgatherv (Thakur, Rabenseifner and Gropp, "Optimization of collective
//! communication operations in MPICH", IJHPCA 2005, section 4.1), for any p.
//!
//! Let q be the largest power of two `<= p` and e = p - q. First each extra rank r >= q puts
//! its block to core rank r - q. Then the q core ranks run log2 q steps: at step s, core
//! rank c and partner c xor 2^s exchange everything they hold, which is the blocks of the
//! 2^s core ranks of c's aligned group plus the blocks of those ranks' extra partners. The
//! core blocks of a group are one contiguous byte range and so are its extras' blocks, so a
//! step carries at most two puts to the partner (one when the extras' part is empty or
//! touches the core part), and the exchanged set doubles every step. Finally core rank
//! c < e puts the whole buffer to c + q. Zero-length ranges are not sent.
//!
//! Cost for blocks totalling n bytes, of which n_e belong to extra ranks: log2 q steps, plus
//! 2 when e > 0; a core rank sends at most 2 log2 q messages (log2 q when p is a power of
//! two), plus one when it serves an extra rank; (q - 1) n + n_e + e n bytes in total. Latency-
//! optimal for small n; on a mesh or torus the late, large steps travel far.

use std::ops::Range;

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "exchange held blocks with rank xor 2^s (sets double); extra ranks folded in; ~log2 p steps";

/// Rank `rank`'s schedule for blocks of `blocks[r]` bytes (`rank < blocks.len()`).
pub fn build(rank: usize, blocks: &[usize]) -> RankSchedule {
    let Some(displ) = super::layout(blocks) else {
        return RankSchedule::default();
    };
    let p = blocks.len();
    let total = displ[p];
    let q = super::super::pof2_floor(p);
    let extra = p - q;
    let range = |first: usize, end: usize| displ[first]..displ[end];
    let mut rs = RankSchedule::default();
    if rank >= q {
        let core = rank - q;
        let own = range(rank, rank + 1);
        rs.push(super::exchange(Step::new(), core, &[own], core, &[]));
        let all = everything_but_own(total, blocks[rank]);
        rs.push(super::exchange(Step::new(), core, &[], core, &[all]));
        return rs;
    }
    if rank < extra {
        let x = rank + q;
        let theirs = range(x, x + 1);
        rs.push(super::exchange(Step::new(), x, &[], x, &[theirs]));
    }
    // What core group `[base, base + m)` holds: its core blocks and its extras' blocks.
    let held = |base: usize, m: usize| -> [Range<usize>; 2] {
        let extras = if base < extra {
            range(base + q, (base + m).min(extra) + q)
        } else {
            0..0
        };
        [range(base, base + m), extras]
    };
    let mut m = 1;
    while m < q {
        let partner = rank ^ m;
        let base = rank & !(m - 1);
        rs.push(super::exchange(
            Step::new(),
            partner,
            &held(base, m),
            partner,
            &held(base ^ m, m),
        ));
        m <<= 1;
    }
    if rank < extra {
        let x = rank + q;
        let all = everything_but_own(total, blocks[x]);
        rs.push(super::exchange(Step::new(), x, &[all], x, &[]));
    }
    rs
}

/// The whole buffer, or nothing when the receiver's own block is all there is to it.
fn everything_but_own(total: usize, own: usize) -> Range<usize> {
    if total > own {
        0..total
    } else {
        0..0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::one_put_one_arrival;

    #[test]
    fn power_of_two_one_message_per_step() {
        let blocks = [2, 3, 5, 7, 11, 13, 17, 19];
        for r in 0..8 {
            let rs = build(r, &blocks);
            assert_eq!(rs.steps.len(), 3);
            assert!(rs.steps.iter().all(one_put_one_arrival));
        }
    }

    #[test]
    fn extra_ranks_fold_in_and_out() {
        // p = 5: q = 4, one extra rank (4) served by rank 0.
        let blocks = [1, 1, 1, 1, 1];
        assert_eq!(build(4, &blocks).steps.len(), 2);
        assert_eq!(build(0, &blocks).steps.len(), 4);
        assert_eq!(build(3, &blocks).steps.len(), 2);
        let sched = crate::AllgathervAlgo::RecursiveDoubling.schedule(&blocks);
        sched.validate().unwrap();
        // Fold-in 1; step 0: rank 0 sends blocks 0 and 4 (2 puts), ranks 1-3 one each;
        // step 1: ranks 0 and 1 send {0,1} and {4} (2 puts each), ranks 2, 3 one; fold-out 1.
        assert_eq!(sched.totals(), (1 + 5 + 6 + 1, 3 * 5 + 1 + 5));
    }
}
