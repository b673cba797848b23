//! Linear scatter (the flat tree; `MPIR_Scatter_intra_linear` in MPICH, compared with the
//! binomial tree in Thakur, Rabenseifner and Gropp, "Optimization of collective communication
//! operations in MPICH", IJHPCA 2005, section 4.3), for any p and any root.
//!
//! The root puts block i to rank i for every other rank in ONE step (one chained-DMA start of
//! p - 1 descriptors on TCA), in rank order starting after the root; every other rank has one
//! step receiving its block from the root into its buffer.
//!
//! Cost for blocks of b bytes: 1 step per rank; the root issues p - 1 messages, (p - 1) b
//! bytes in total, all through the root's injection port and each byte sent once. Best for
//! small p, and for large b where the tree's forwarding of subtree blocks costs more than
//! the root's serialisation.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "root puts block i to rank i, all in one chained step; p-1 messages, each byte sent once";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, block: usize) -> RankSchedule {
    super::super::flat_tree(
        p,
        rank,
        root,
        block,
        |step, to| step.put(to, to * block..(to + 1) * block, 0),
        || Step::new().arrive(root, 0, block),
    )
}
