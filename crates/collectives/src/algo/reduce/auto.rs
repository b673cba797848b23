//! Automatic selection: an algorithm picked from a table (one row).
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's defaults). The paper uses the
//! binomial tree for short messages; for long messages (with predefined operations) it uses
//! Rabenseifner's reduce-scatter followed by a gather to the root.
//!
//! SUBSTITUTION: this registry has no Rabenseifner reduce, so the binomial tree is used at
//! every size, in place of Rabenseifner's algorithm for long messages. Add the long-message
//! row (with the paper's threshold) when that algorithm exists here. `host_reduce` and
//! `device_reduce` (gathers for GPU-resident buffers, ALGORITHMS.md) are not in MPICH's
//! table, which is about host memory; they are chosen by name.
//!
//! `bytes` is the reduced vector's length in bytes. The root does not affect the choice.
//!
//! Cost: that of the algorithm selected.

use super::ReduceAlgo;
use crate::algo::{select_from, RankClass, Rule};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str =
    "MPICH's table (Thakur et al. 2005): binomial tree at every size (no Rabenseifner reduce here)";

/// First matching row wins; the last row is a catch-all.
const TABLE: &[Rule<ReduceAlgo>] = &[
    // Every size and p: binomial tree (the paper's Rabenseifner for long messages is absent).
    Rule {
        max_bytes: usize::MAX,
        ranks: RankClass::Any,
        max_ranks: usize::MAX,
        algo: ReduceAlgo::Binomial,
    },
];

/// The algorithm `auto` runs for a reduce of `bytes` bytes over `p` ranks (never
/// [`ReduceAlgo::Auto`]).
pub fn select(p: usize, bytes: usize) -> ReduceAlgo {
    select_from(TABLE, p, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ends_in_a_catch_all_and_never_names_auto() {
        assert!(TABLE.last().is_some_and(|r| r.is_catch_all()));
        assert!(TABLE.iter().all(|r| r.algo != ReduceAlgo::Auto));
    }

    #[test]
    fn select_never_returns_auto_and_follows_the_table() {
        for p in 1..=17 {
            for bytes in [0, 1, 8, 2048, 1 << 20, usize::MAX] {
                assert_eq!(select(p, bytes), ReduceAlgo::Binomial, "p {p}, {bytes} B");
            }
        }
    }
}
