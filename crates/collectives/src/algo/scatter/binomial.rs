//! Binomial-tree scatter (`MPIR_Scatter_intra_binomial` in MPICH; Thakur, Rabenseifner and
//! Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005,
//! section 4.3), for any p and any root.
//!
//! Ranks are numbered relative to the root, v = (rank - root) mod p, on the tree of
//! `bcast/binomial.rs`: the subtree of v is the relative ranks v .. v + n_v. A non-root rank
//! receives its subtree's blocks, in relative order, from its parent in one message (a leaf
//! straight into its buffer; an inner rank into scratch), then, in ONE chained step, copies
//! its own block out of scratch and puts each child's subtree blocks to that child, largest
//! subtree first. The root puts each child's subtree blocks straight from its buffer, which
//! is in absolute order, so a subtree that wraps past rank p - 1 goes as two puts; all the
//! root's puts are one step (no rotation copy at the root, unlike MPICH).
//!
//! Cost for blocks of b bytes: ceil(log2 p) rounds on the critical path, at most 2 steps per
//! rank; p - 1 messages (plus at most one more where a root child's subtree wraps), and
//! b * sum_v n_v (v > 0) bytes, about (p/2) log2 p * b for p a power of two: each block
//! travels its depth in the tree. Latency-optimal for small b; the root issues
//! ceil(log2 p) puts instead of p - 1. Inner ranks need n_v * b scratch bytes.

use crate::algo::tree::Tree;
use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "binomial tree on relative ranks; children's subtree blocks forwarded in one chained step";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, block: usize) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || block == 0 {
        return rs;
    }
    let t = Tree::new(p, root);
    // Where relative rank c keeps its subtree's blocks: a leaf in its buffer, an inner rank
    // in scratch (after its one-block buffer).
    let landing = |c: usize| if t.subtree(c) == 1 { 0 } else { block };
    let v = t.rel(rank);
    if v == 0 {
        let mut step = Step::new();
        for c in t.children(0) {
            for run in t.runs(c, t.subtree(c)) {
                step = step.put(
                    t.abs(c),
                    run.abs * block..(run.abs + run.len) * block,
                    landing(c) + run.rel * block,
                );
            }
        }
        rs.push(step);
        return rs;
    }
    let n = t.subtree(v);
    let parent = t.parent(v);
    let base = landing(v);
    let mut recv = Step::new();
    if parent == 0 {
        for run in t.runs(v, n) {
            recv = recv.arrive(t.abs(0), base + run.rel * block, run.len * block);
        }
    } else {
        recv = recv.arrive(t.abs(parent), base, n * block);
    }
    rs.push(recv);
    if n > 1 {
        rs.scratch_bytes = n * block;
        let mut step = Step::new().copy(block..2 * block, 0);
        for c in t.children(v) {
            let off = block + (c - v) * block;
            step = step.put(t.abs(c), off..off + t.subtree(c) * block, landing(c));
        }
        rs.push(step);
    }
    rs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_sends_log_p_messages_unless_a_subtree_wraps() {
        for p in 1..=17usize {
            let sched = crate::ScatterAlgo::Binomial.schedule(p, 0, 8);
            sched.validate().unwrap();
            let root_msgs = sched.ranks[0]
                .steps
                .iter()
                .map(|s| s.puts.len())
                .sum::<usize>();
            assert_eq!(root_msgs, p.next_power_of_two().trailing_zeros() as usize);
            assert!(sched.ranks.iter().all(|r| r.steps.len() <= 2));
            assert_eq!(sched.totals().0, p - 1, "p={p}");
        }
    }

    #[test]
    fn wrapping_subtree_goes_as_two_puts() {
        // p = 6, root 3: the root's children are relative 4, 2, 1 = absolute 1, 5, 4.
        let sched = crate::ScatterAlgo::Binomial.schedule(6, 3, 8);
        sched.validate().unwrap();
        // Relative 4..6 = absolute 1, 2: one put; relative 2..4 = absolute 5, 0: two.
        let root_puts: Vec<_> = sched.ranks[3].steps[0].puts.iter().map(|p| p.to).collect();
        assert_eq!(root_puts, vec![1, 5, 5, 4]);
        let rs = build(6, 5, 3, 8);
        assert_eq!(rs.steps[0].arrivals.len(), 2);
        assert_eq!(rs.scratch_bytes, 16);
    }
}
