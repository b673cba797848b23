//! Automatic selection: an algorithm picked from a table by message size.
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's defaults). The paper uses recursive
//! doubling for short messages (< 2 KiB) and Rabenseifner's algorithm (reduce-scatter +
//! allgather) for long ones. It does not depend on p.
//!
//! `bytes` is the vector length in bytes (the same on every rank). Every algorithm the table
//! can return is bit-identical, so `auto` is too (`AllreduceAlgo::Auto.bit_identical()`, tested below).
//!
//! Cost: that of the algorithm selected.

use super::AllreduceAlgo;
use crate::algo::auto_table::{Row, Table, KIB};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str =
    "MPICH's table (Thakur et al. 2005): recursive doubling below 2 KiB, Rabenseifner above";

/// The selection: first matching row, else `otherwise`.
pub(crate) const TABLE: Table<AllreduceAlgo> = Table {
    rows: &[
        // Short messages (< 2 KiB): recursive doubling (Thakur et al. 2005).
        Row::bytes_below(2 * KIB, AllreduceAlgo::RecursiveDoubling),
    ],
    // Long messages: Rabenseifner (Thakur et al. 2005).
    otherwise: AllreduceAlgo::Rabenseifner,
};

/// The algorithm `auto` runs for an allreduce of `bytes` bytes over `p` ranks (never
/// [`AllreduceAlgo::Auto`]).
pub fn select(p: usize, bytes: usize) -> AllreduceAlgo {
    TABLE.select(p, bytes)
}

/// True only if every algorithm the table can return is bit-identical.
pub(crate) fn bit_identical() -> bool {
    TABLE
        .algos()
        .all(|a| a != AllreduceAlgo::Auto && a.bit_identical())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_follows_the_table_at_its_thresholds() {
        for p in 1..=17 {
            assert_eq!(select(p, 0), AllreduceAlgo::RecursiveDoubling);
            assert_eq!(select(p, 2 * KIB - 1), AllreduceAlgo::RecursiveDoubling);
            assert_eq!(select(p, 2 * KIB), AllreduceAlgo::Rabenseifner);
            assert_eq!(select(p, usize::MAX), AllreduceAlgo::Rabenseifner);
        }
    }

    #[test]
    fn auto_is_bit_identical_exactly_when_every_row_is() {
        let every_row = TABLE.algos().all(|a| a.bit_identical());
        assert_eq!(AllreduceAlgo::Auto.bit_identical(), every_row);
        assert!(AllreduceAlgo::Auto.bit_identical());
    }
}
