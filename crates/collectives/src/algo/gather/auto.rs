//! Automatic selection: an algorithm picked from a table (no conditional rows: one choice).
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's defaults). The paper uses the
//! binomial tree for gather at every message size and rank count.
//!
//! `bytes` is one block's length in bytes. The root does not affect the choice.
//!
//! Cost: that of the algorithm selected.

use super::GatherAlgo;
use crate::algo::auto_table::Table;

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str = "MPICH's table (Thakur et al. 2005): binomial tree at every size";

/// The selection: no conditional rows, one algorithm for every size and p.
pub(crate) const TABLE: Table<GatherAlgo> = Table {
    rows: &[],
    // Every size and p: binomial tree (Thakur et al. 2005).
    otherwise: GatherAlgo::Binomial,
};

/// The algorithm `auto` runs for a gather of `bytes` bytes over `p` ranks (never
/// [`GatherAlgo::Auto`]).
pub fn select(p: usize, bytes: usize) -> GatherAlgo {
    TABLE.select(p, bytes)
}
