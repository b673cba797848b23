//! Automatic selection: an algorithm picked from a table (no conditional rows: one choice).
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
use crate::algo::auto_table::Table;

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str =
    "MPICH's table (Thakur et al. 2005): binomial tree at every size (no Rabenseifner reduce here)";

/// The selection: no conditional rows, one algorithm for every size and p.
pub(crate) const TABLE: Table<ReduceAlgo> = Table {
    rows: &[],
    // Every size and p: binomial tree (the paper's Rabenseifner for long messages is absent).
    otherwise: ReduceAlgo::Binomial,
};

/// The algorithm `auto` runs for a reduce of `bytes` bytes over `p` ranks (never
/// [`ReduceAlgo::Auto`]).
pub fn select(p: usize, bytes: usize) -> ReduceAlgo {
    TABLE.select(p, bytes)
}
