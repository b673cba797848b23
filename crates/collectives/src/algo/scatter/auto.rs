//! Automatic selection: an algorithm picked from a table (one row).
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's defaults). The paper uses the
//! binomial tree for scatter at every message size and rank count.
//!
//! `bytes` is one block's length in bytes. The root does not affect the choice.
//!
//! Cost: that of the algorithm selected.

use super::ScatterAlgo;
use crate::algo::{select_from, RankClass, Rule};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str = "MPICH's table (Thakur et al. 2005): binomial tree at every size";

/// First matching row wins; the last row is a catch-all.
const TABLE: &[Rule<ScatterAlgo>] = &[
    // Every size and p: binomial tree (Thakur et al. 2005).
    Rule {
        max_bytes: usize::MAX,
        ranks: RankClass::Any,
        max_ranks: usize::MAX,
        algo: ScatterAlgo::Binomial,
    },
];

/// The algorithm `auto` runs for a scatter of `bytes` bytes over `p` ranks (never
/// [`ScatterAlgo::Auto`]).
pub fn select(p: usize, bytes: usize) -> ScatterAlgo {
    select_from(TABLE, p, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ends_in_a_catch_all_and_never_names_auto() {
        assert!(TABLE.last().is_some_and(|r| r.is_catch_all()));
        assert!(TABLE.iter().all(|r| r.algo != ScatterAlgo::Auto));
    }

    #[test]
    fn select_never_returns_auto_and_follows_the_table() {
        for p in 1..=17 {
            for bytes in [0, 1, 8, 2048, 1 << 20, usize::MAX] {
                assert_eq!(select(p, bytes), ScatterAlgo::Binomial, "p {p}, {bytes} B");
            }
        }
    }
}
