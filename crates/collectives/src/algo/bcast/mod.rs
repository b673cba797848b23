//! Broadcast: the root's buffer ends on every rank.
//!
//! Every rank passes a buffer of the same length; on entry only the root's contents matter,
//! on exit every rank holds them.

use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod binomial;
pub mod linear;
pub mod pipeline;

/// The broadcast registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BcastAlgo {
    /// Binomial tree: holders double each step; a holder's puts are one chained step.
    #[default]
    Binomial,
    /// Linear: the root puts to every other rank in one chained step.
    Linear,
    /// Pipelined chain: segments of max(8 KiB, m/16) flow root -> root + 1 -> ...
    Pipeline,
    /// Automatic: picked by size and p from MPICH's table (Thakur et al. 2005), see
    /// [`auto`].
    Auto,
}

impl BcastAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [BcastAlgo] = &[
        BcastAlgo::Binomial,
        BcastAlgo::Linear,
        BcastAlgo::Pipeline,
        BcastAlgo::Auto,
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BcastAlgo::Binomial => "binomial",
            BcastAlgo::Linear => "linear",
            BcastAlgo::Pipeline => "pipeline",
            BcastAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            BcastAlgo::Binomial => binomial::DESCRIPTION,
            BcastAlgo::Linear => linear::DESCRIPTION,
            BcastAlgo::Pipeline => pipeline::DESCRIPTION,
            BcastAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Rank `rank`'s schedule for a broadcast of `bytes` bytes from `root` over `p` ranks.
    ///
    /// # Panics
    /// If `rank >= p` or `root >= p` (a caller bug: [`crate::Collectives::bcast_bytes_with`]
    /// checks the root first).
    #[track_caller]
    pub fn rank_schedule(self, p: usize, rank: usize, root: usize, bytes: usize) -> RankSchedule {
        super::assert_rooted("bcast", p, rank, root);
        match self {
            BcastAlgo::Binomial => binomial::build(p, rank, root, bytes),
            BcastAlgo::Linear => linear::build(p, rank, root, bytes),
            BcastAlgo::Pipeline => pipeline::build(p, rank, root, bytes),
            BcastAlgo::Auto => auto::select(p, bytes).rank_schedule(p, rank, root, bytes),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    ///
    /// # Panics
    /// If `root >= p`.
    #[track_caller]
    pub fn schedule(self, p: usize, root: usize, bytes: usize) -> Schedule {
        super::whole(vec![bytes; p], |r| self.rank_schedule(p, r, root, bytes))
    }
}

crate::impl_registry!(BcastAlgo, "bcast algorithm");
