//! Automatic selection: an algorithm picked from a table by message size and rank count.
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's bcast defaults): the binomial tree
//! for short messages (< 12 KiB) or fewer than 8 ranks; otherwise van de Geijn's scatter
//! followed by an allgather.
//!
//! SUBSTITUTION: this registry has no scatter + allgather broadcast, so the long-message
//! rows use the pipelined chain (`pipeline`), our large-message broadcast, in its place.
//! The thresholds are the paper's; they were not re-tuned for the substitute.
//!
//! `bytes` is the broadcast vector's length in bytes. The root does not affect the choice.
//!
//! Cost: that of the algorithm selected.

use super::BcastAlgo;
use crate::algo::auto_table::{Row, Table, KIB};

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str = "MPICH's table (Thakur et al. 2005): binomial below 12 KiB or \
     for p < 8, else pipeline (in place of scatter + allgather)";

/// The selection: first matching row, else `otherwise`.
pub(crate) const TABLE: Table<BcastAlgo> = Table {
    rows: &[
        // Short messages (< 12 KiB): binomial tree.
        Row::bytes_below(12 * KIB, BcastAlgo::Binomial),
        // Fewer than 8 ranks, any size: binomial tree.
        Row::ranks_below(8, BcastAlgo::Binomial),
    ],
    // Long messages, p >= 8: the paper's scatter + allgather; we substitute pipeline.
    otherwise: BcastAlgo::Pipeline,
};

/// The algorithm `auto` runs for a broadcast of `bytes` bytes over `p` ranks (never
/// [`BcastAlgo::Auto`]).
pub fn select(p: usize, bytes: usize) -> BcastAlgo {
    TABLE.select(p, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_follows_the_table_at_its_thresholds() {
        for p in 1..=17 {
            assert_eq!(select(p, 0), BcastAlgo::Binomial, "p {p}");
            assert_eq!(select(p, 12 * KIB - 1), BcastAlgo::Binomial, "p {p}");
            let long = if p < 8 {
                BcastAlgo::Binomial
            } else {
                BcastAlgo::Pipeline
            };
            assert_eq!(select(p, 12 * KIB), long, "p {p}");
            assert_eq!(select(p, usize::MAX), long, "p {p}");
        }
    }
}
