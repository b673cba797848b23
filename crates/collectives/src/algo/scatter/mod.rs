//! Scatter: the root holds p blocks of the same length; block i ends on rank i.
//!
//! The root's caller buffer is the p blocks in rank order (`p * block` bytes); every other
//! rank's caller buffer is its block (`block` bytes), overwritten. The root's own block is
//! not part of the schedule: [`crate::Collectives::scatter_f64_with`] copies it.

use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod binomial;
pub mod linear;

/// The scatter registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScatterAlgo {
    /// Binomial tree: each rank receives its subtree's blocks once and splits them on.
    #[default]
    Binomial,
    /// Linear: the root puts every block in one chained step.
    Linear,
    /// Automatic: picked from MPICH's table (Thakur et al. 2005), see [`auto`].
    Auto,
}

impl ScatterAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [ScatterAlgo] = &[
        ScatterAlgo::Binomial,
        ScatterAlgo::Linear,
        ScatterAlgo::Auto,
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ScatterAlgo::Binomial => "binomial",
            ScatterAlgo::Linear => "linear",
            ScatterAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            ScatterAlgo::Binomial => binomial::DESCRIPTION,
            ScatterAlgo::Linear => linear::DESCRIPTION,
            ScatterAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Rank `rank`'s schedule for a scatter of blocks of `block` bytes from `root` over `p`
    /// ranks. The caller buffer is `p * block` bytes on the root, `block` bytes elsewhere.
    ///
    /// # Panics
    /// If `rank >= p` or `root >= p` (a caller bug: [`crate::Collectives::scatter_f64_with`]
    /// checks the root first).
    #[track_caller]
    pub fn rank_schedule(self, p: usize, rank: usize, root: usize, block: usize) -> RankSchedule {
        super::assert_rooted("scatter", p, rank, root);
        match self {
            ScatterAlgo::Binomial => binomial::build(p, rank, root, block),
            ScatterAlgo::Linear => linear::build(p, rank, root, block),
            ScatterAlgo::Auto => auto::select(p, block).rank_schedule(p, rank, root, block),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    ///
    /// # Panics
    /// If `root >= p`.
    #[track_caller]
    pub fn schedule(self, p: usize, root: usize, block: usize) -> Schedule {
        super::whole(rooted_buffers(p, root, block), |r| {
            self.rank_schedule(p, r, root, block)
        })
    }
}

crate::impl_registry!(ScatterAlgo, "scatter algorithm");

/// Caller buffer bytes of a rooted operation on blocks of `block` bytes: `p * block` on the
/// root, `block` elsewhere (scatter and gather).
pub(crate) fn rooted_buffers(p: usize, root: usize, block: usize) -> Vec<usize> {
    (0..p)
        .map(|r| if r == root { p * block } else { block })
        .collect()
}
