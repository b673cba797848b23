//! Automatic selection: an algorithm picked from a table (one row).
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's defaults). The paper uses the
//! dissemination algorithm for barrier.
//!
//! A barrier moves no data: the table is consulted with 0 bytes.
//!
//! Cost: that of the algorithm selected.

use super::BarrierAlgo;
use crate::algo::{select_from, RankClass, Rule};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str = "MPICH's table (Thakur et al. 2005): dissemination";

/// First matching row wins; the last row is a catch-all.
const TABLE: &[Rule<BarrierAlgo>] = &[
    // Every p: dissemination (Thakur et al. 2005).
    Rule {
        max_bytes: usize::MAX,
        ranks: RankClass::Any,
        max_ranks: usize::MAX,
        algo: BarrierAlgo::Dissemination,
    },
];

/// The algorithm `auto` runs for a barrier over `p` ranks (never [`BarrierAlgo::Auto`]).
pub fn select(p: usize) -> BarrierAlgo {
    select_from(TABLE, p, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ends_in_a_catch_all_and_never_names_auto() {
        assert!(TABLE.last().is_some_and(|r| r.is_catch_all()));
        assert!(TABLE.iter().all(|r| r.algo != BarrierAlgo::Auto));
    }

    #[test]
    fn select_never_returns_auto_and_follows_the_table() {
        for p in 1..=17 {
            assert_eq!(select(p), BarrierAlgo::Dissemination, "p {p}");
        }
        assert_eq!(select(usize::MAX), BarrierAlgo::Dissemination);
    }
}
