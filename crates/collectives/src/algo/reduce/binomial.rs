//! Binomial-tree reduce (`MPIR_Reduce_intra_binomial` in MPICH; Thakur, Rabenseifner and
//! Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005,
//! section 4.4), for any p and any root, combining WHOLE buffers (no reduce-scatter).
//!
//! Ranks are numbered relative to the root, v = (rank - root) mod p, on the tree of
//! `bcast/binomial.rs`. An inner non-root rank copies its buffer into scratch and, in one
//! step, reduces its children's partial results into it as they arrive (smallest subtree
//! first, in that fixed order, so results are deterministic); then it puts the partial
//! result to its parent. A leaf puts its buffer directly. The root reduces its children's
//! partial results straight into its buffer. Non-root buffers are never written.
//!
//! Results are NOT bit-identical to any allreduce algorithm's: the association follows this
//! tree (and so the root), not the allreduce's exchange pattern. They match the sequential
//! reference within reassociation tolerance and are deterministic for given inputs, p and
//! root.
//!
//! Cost for m bytes: ceil(log2 p) rounds on the critical path, at most 2 steps per rank;
//! p - 1 messages, (p - 1) m bytes, and (p - 1) m/8 element operations in total, at most
//! ceil(log2 p) m/8 on one rank. Latency-optimal for small m; for large m a reduce-scatter
//! followed by a gather (Rabenseifner) moves less per rank. Inner ranks need m bytes of
//! scratch.

use crate::algo::tree::Tree;
use crate::schedule::{Reduction, Step};
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "binomial tree on relative ranks, whole buffers reduced on the way up; ~log2 p rounds";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, bytes: usize, red: Reduction) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || bytes == 0 {
        return rs;
    }
    let t = Tree::new(p, root);
    let v = t.rel(rank);
    if v == 0 {
        let mut step = Step::new();
        for c in t.children(0).rev() {
            step = step.arrive_reduce(t.abs(c), 0, bytes, red);
        }
        rs.push(step);
        return rs;
    }
    // Where relative rank c holds its partial result: a leaf its buffer, an inner rank
    // scratch (after its buffer).
    let held = |c: usize| if t.subtree(c) == 1 { 0 } else { bytes };
    if t.subtree(v) > 1 {
        rs.scratch_bytes = bytes;
        let mut step = Step::new().copy(0..bytes, bytes);
        for c in t.children(v).rev() {
            step = step.arrive_reduce(t.abs(c), bytes, bytes, red);
        }
        rs.push(step);
    }
    let parent = t.parent(v);
    let src = held(v);
    // The root reduces into its buffer; an inner parent into its scratch.
    let dst = if parent == 0 { 0 } else { bytes };
    rs.push(Step::new().put(t.abs(parent), src..src + bytes, dst));
    rs
}

#[cfg(test)]
mod tests {
    #[test]
    fn p_minus_one_messages_at_most_two_steps() {
        let red = crate::algo::SUM;
        for p in 1..=17 {
            for root in [0, p / 2, p - 1] {
                let sched = crate::ReduceAlgo::Binomial.schedule(p, root, 16, red);
                sched.validate().unwrap();
                assert_eq!(sched.totals(), (p - 1, 16 * (p - 1)), "p={p} root={root}");
                assert!(sched.ranks.iter().all(|r| r.steps.len() <= 2));
            }
        }
    }
}
