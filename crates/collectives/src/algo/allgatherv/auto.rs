//! Automatic selection: an algorithm picked from a table by total size and rank count.
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's allgather defaults): recursive
//! doubling for short and medium totals (< 512 KiB) when p is a power of two, Bruck for
//! short totals (< 80 KiB) when p is not, ring otherwise (long totals, or medium totals with
//! p not a power of two).
//!
//! `bytes` is the TOTAL gathered size (the sum of all blocks, the buffer every rank ends
//! with), as in the paper's thresholds, so uneven blocks are classified by their sum.
//!
//! Cost: that of the algorithm selected.

use super::AllgathervAlgo;
use crate::algo::auto_table::{Row, Table, KIB};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str = "MPICH's table (Thakur et al. 2005): recursive doubling (p = 2^k, \
     < 512 KiB total), Bruck (other p, < 80 KiB total), else ring";

/// The selection: first matching row, else `otherwise`. Sizes are total bytes.
pub(crate) const TABLE: Table<AllgathervAlgo> = Table {
    rows: &[
        // Short and medium totals (< 512 KiB), p a power of two: recursive doubling.
        Row::bytes_below(512 * KIB, AllgathervAlgo::RecursiveDoubling).power_of_two(),
        // Short totals (< 80 KiB), p not a power of two: Bruck.
        Row::bytes_below(80 * KIB, AllgathervAlgo::Bruck).not_power_of_two(),
    ],
    // Everything else (long totals; medium totals with p not a power of two): ring.
    otherwise: AllgathervAlgo::Ring,
};

/// The algorithm `auto` runs for an allgatherv of `total_bytes` bytes in all (the sum of
/// the blocks) over `p` ranks (never [`AllgathervAlgo::Auto`]).
pub fn select(p: usize, total_bytes: usize) -> AllgathervAlgo {
    TABLE.select(p, total_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_follows_the_table_at_its_thresholds() {
        use AllgathervAlgo::{Bruck, RecursiveDoubling, Ring};
        for p in [1, 2, 4, 8, 16] {
            assert_eq!(select(p, 0), RecursiveDoubling, "p {p}");
            assert_eq!(select(p, 80 * KIB), RecursiveDoubling, "p {p}");
            assert_eq!(select(p, 512 * KIB - 1), RecursiveDoubling, "p {p}");
            assert_eq!(select(p, 512 * KIB), Ring, "p {p}");
            assert_eq!(select(p, usize::MAX), Ring, "p {p}");
        }
        for p in [3, 5, 6, 7, 9, 12, 15, 17] {
            assert_eq!(select(p, 0), Bruck, "p {p}");
            assert_eq!(select(p, 80 * KIB - 1), Bruck, "p {p}");
            assert_eq!(select(p, 80 * KIB), Ring, "p {p}");
            assert_eq!(select(p, usize::MAX), Ring, "p {p}");
        }
    }
}
