//! Linear broadcast (the flat tree; Thakur, Rabenseifner and Gropp, "Optimization of
//! collective communication operations in MPICH", IJHPCA 2005, compare it with the binomial
//! tree), for any p and any root.
//!
//! The root puts the buffer to every other rank in ONE step (one chained-DMA start of p - 1
//! descriptors on TCA), in rank order starting after the root; every other rank has one step
//! receiving from the root.
//!
//! Cost for m bytes: 1 step per rank; the root issues p - 1 messages, (p - 1) m bytes in
//! total, all through the root's injection port. Best for small p or very small m where a
//! chained start is cheap.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "root puts to every rank in one chained step; p-1 messages from the root";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, bytes: usize) -> RankSchedule {
    super::super::flat_tree(
        p,
        rank,
        root,
        bytes,
        |step, to| step.put(to, 0..bytes, 0),
        || Step::new().arrive(root, 0, bytes),
    )
}
