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
use crate::algo::{select_from, RankClass, Rule, KIB};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str =
    "MPICH's table (Thakur et al. 2005): recursive doubling below 2 KiB, Rabenseifner above";

/// First matching row wins; the last row is a catch-all.
const TABLE: &[Rule<AllreduceAlgo>] = &[
    // Short messages (< 2 KiB): recursive doubling (Thakur et al. 2005).
    Rule {
        max_bytes: 2 * KIB - 1,
        ranks: RankClass::Any,
        max_ranks: usize::MAX,
        algo: AllreduceAlgo::RecursiveDoubling,
    },
    // Long messages: Rabenseifner (Thakur et al. 2005).
    Rule {
        max_bytes: usize::MAX,
        ranks: RankClass::Any,
        max_ranks: usize::MAX,
        algo: AllreduceAlgo::Rabenseifner,
    },
];

/// The algorithm `auto` runs for an allreduce of `bytes` bytes over `p` ranks (never
/// [`AllreduceAlgo::Auto`]).
pub fn select(p: usize, bytes: usize) -> AllreduceAlgo {
    select_from(TABLE, p, bytes)
}

/// True only if every algorithm the table can return is bit-identical.
pub(crate) fn bit_identical() -> bool {
    TABLE
        .iter()
        .all(|r| r.algo != AllreduceAlgo::Auto && r.algo.bit_identical())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ends_in_a_catch_all_and_never_names_auto() {
        assert!(TABLE.last().is_some_and(|r| r.is_catch_all()));
        assert!(TABLE.iter().all(|r| r.algo != AllreduceAlgo::Auto));
    }

    #[test]
    fn select_never_returns_auto() {
        for p in 1..=17 {
            for bytes in [0, 1, 8, 2 * KIB - 1, 2 * KIB, 1 << 20, usize::MAX] {
                assert_ne!(select(p, bytes), AllreduceAlgo::Auto, "p {p}, {bytes} B");
            }
        }
    }

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
        let every_row = TABLE.iter().all(|r| r.algo.bit_identical());
        assert_eq!(AllreduceAlgo::Auto.bit_identical(), every_row);
        assert!(AllreduceAlgo::Auto.bit_identical());
    }
}
