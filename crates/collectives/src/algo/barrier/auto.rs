//! Automatic selection: an algorithm picked from a table (no conditional rows: one choice).
//!
//! Source: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 19(1), 2005 (MPICH's defaults). The paper uses the
//! dissemination algorithm for barrier.
//!
//! A barrier moves no data: the table is consulted with 0 bytes.
//!
//! Cost: that of the algorithm selected.

use super::BarrierAlgo;
use crate::algo::auto_table::Table;

/// One line on what the algorithm does and costs.
pub const DESCRIPTION: &str = "MPICH's table (Thakur et al. 2005): dissemination";

/// The selection: no conditional rows, one algorithm for every size and p.
pub(crate) const TABLE: Table<BarrierAlgo> = Table {
    rows: &[],
    // Every p: dissemination (Thakur et al. 2005).
    otherwise: BarrierAlgo::Dissemination,
};

/// The algorithm `auto` runs for a barrier over `p` ranks (never [`BarrierAlgo::Auto`]).
pub fn select(p: usize) -> BarrierAlgo {
    TABLE.select(p, 0)
}
