//! Linear gather (the flat tree; `MPIR_Gather_intra_linear` in MPICH, compared with the
//! binomial tree in Thakur, Rabenseifner and Gropp, "Optimization of collective communication
//! operations in MPICH", IJHPCA 2005, section 4.3), for any p and any root.
//!
//! Every other rank puts its block into the root's buffer at `rank * block` in one step; the
//! root has one step waiting for the p - 1 arrivals (in rank order starting after the root).
//! On TCA this is p - 1 independent remote writes into one buffer, no forwarding.
//!
//! Cost for blocks of b bytes: 1 step per rank; p - 1 messages, (p - 1) b bytes in total,
//! each byte sent once, all through the root's ejection port. Best for small p and large b.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "every rank writes its block into the root's buffer; p-1 messages, each byte sent once";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, block: usize) -> RankSchedule {
    super::super::flat_tree(
        p,
        rank,
        root,
        block,
        |step, from| step.arrive(from, from * block, block),
        || Step::new().put(root, 0..block, rank * block),
    )
}
