//! Binomial-tree gather (`MPIR_Gather_intra_binomial` in MPICH; Thakur, Rabenseifner and
//! Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005,
//! section 4.3), for any p and any root: the scatter tree of `scatter/binomial.rs` run
//! backwards.
//!
//! Ranks are numbered relative to the root, v = (rank - root) mod p; the subtree of v is the
//! relative ranks v .. v + n_v. An inner non-root rank copies its block into scratch and
//! waits, in one step, for each child's subtree blocks (smallest subtree first, as they
//! finish first), landing at their relative places; then it puts its whole subtree to its
//! parent in one message. A leaf puts its block straight from its buffer. The root receives
//! each child's subtree straight into its buffer, which is in absolute order, so a subtree
//! that wraps past rank p - 1 arrives as two puts (no rotation copy at the root, unlike
//! MPICH). Callers' send buffers are never written.
//!
//! Cost for blocks of b bytes: ceil(log2 p) rounds on the critical path, at most 2 steps per
//! rank; p - 1 messages (plus at most one where a root child's subtree wraps) and
//! b * sum_v n_v (v > 0) bytes, about (p/2) log2 p * b for p a power of two. Latency-optimal
//! for small b; the root waits for ceil(log2 p) messages instead of p - 1. Inner ranks need
//! n_v * b scratch bytes.

use crate::algo::tree::Tree;
use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "binomial tree on relative ranks; a rank sends its whole subtree's blocks up in one message";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, block: usize) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || block == 0 {
        return rs;
    }
    let t = Tree::new(p, root);
    // Where relative rank c holds its subtree's blocks: a leaf in its buffer, an inner rank
    // in scratch (after its one-block buffer).
    let held = |c: usize| if t.subtree(c) == 1 { 0 } else { block };
    let v = t.rel(rank);
    if v == 0 {
        let mut step = Step::new();
        for c in t.children(0).rev() {
            for run in t.runs(c, t.subtree(c)) {
                step = step.arrive(t.abs(c), run.abs * block, run.len * block);
            }
        }
        rs.push(step);
        return rs;
    }
    let n = t.subtree(v);
    let src = held(v);
    if n > 1 {
        rs.scratch_bytes = n * block;
        let mut step = Step::new().copy(0..block, block);
        for c in t.children(v).rev() {
            step = step.arrive(t.abs(c), block + (c - v) * block, t.subtree(c) * block);
        }
        rs.push(step);
    }
    let parent = t.parent(v);
    let mut up = Step::new();
    if parent == 0 {
        for run in t.runs(v, n) {
            let from = src + run.rel * block;
            up = up.put(t.abs(0), from..from + run.len * block, run.abs * block);
        }
    } else {
        let dst = block + (v - parent) * block;
        up = up.put(t.abs(parent), src..src + n * block, dst);
    }
    rs.push(up);
    rs
}

#[cfg(test)]
mod tests {
    #[test]
    fn mirrors_the_scatter_tree() {
        for p in 1..=17 {
            for root in [0, p / 2, p - 1] {
                let gather = crate::GatherAlgo::Binomial.schedule(p, root, 8);
                gather.validate().unwrap();
                let scatter = crate::ScatterAlgo::Binomial.schedule(p, root, 8);
                assert_eq!(gather.totals(), scatter.totals(), "p={p} root={root}");
                assert!(gather.ranks.iter().all(|r| r.steps.len() <= 2));
            }
        }
    }
}
