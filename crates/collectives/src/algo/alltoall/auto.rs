//! Automatic selection: an algorithm picked from a table by per-message size.
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's alltoall defaults): Bruck's algorithm
//! for short messages (<= 256 bytes per message) and pairwise exchange for long ones.
//!
//! SUBSTITUTION: for medium-size messages the paper posts all nonblocking receives and
//! sends at once, an algorithm this registry lacks; pairwise exchange is used in its place
//! for every size above 256 bytes.
//!
//! `bytes` is one block's length in bytes (the paper's "per message" size), not the
//! `p * block` buffer.
//!
//! Cost: that of the algorithm selected.

use super::AlltoallAlgo;
use crate::algo::auto_table::{Row, Table};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str =
    "MPICH's table (Thakur et al. 2005): Bruck for blocks <= 256 B, else pairwise";

/// The selection: first matching row, else `otherwise`. Sizes are bytes per block.
pub(crate) const TABLE: Table<AlltoallAlgo> = Table {
    rows: &[
        // Short messages (<= 256 bytes per message): Bruck.
        Row::bytes_at_most(256, AlltoallAlgo::Bruck),
    ],
    // Longer messages: pairwise exchange (also standing in for the paper's medium-size
    // all-at-once nonblocking exchange).
    otherwise: AlltoallAlgo::Pairwise,
};

/// The algorithm `auto` runs for an alltoall of blocks of `block` bytes over `p` ranks
/// (never [`AlltoallAlgo::Auto`]).
pub fn select(p: usize, block: usize) -> AlltoallAlgo {
    TABLE.select(p, block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_follows_the_table_at_its_thresholds() {
        for p in 1..=17 {
            assert_eq!(select(p, 0), AlltoallAlgo::Bruck, "p {p}");
            assert_eq!(select(p, 256), AlltoallAlgo::Bruck, "p {p}");
            assert_eq!(select(p, 257), AlltoallAlgo::Pairwise, "p {p}");
            assert_eq!(select(p, usize::MAX), AlltoallAlgo::Pairwise, "p {p}");
        }
    }
}
