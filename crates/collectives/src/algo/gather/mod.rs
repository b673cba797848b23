//! Gather: every rank contributes one block of the same length; the root ends with all
//! blocks in rank order.
//!
//! The root's caller buffer is the p blocks (`p * block` bytes), with the root's own block
//! already in place at `root * block` (put there by
//! [`crate::Collectives::gather_f64_with`]); every other rank's caller buffer is its block
//! (`block` bytes), left unchanged.

use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod binomial;
pub mod linear;

/// The gather registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GatherAlgo {
    /// Binomial tree: each rank collects its subtree's blocks and sends them up once.
    #[default]
    Binomial,
    /// Linear: every rank writes its block into the root's buffer.
    Linear,
    /// Automatic: picked from MPICH's table (Thakur et al. 2005), see [`auto`].
    Auto,
}

impl GatherAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [GatherAlgo] =
        &[GatherAlgo::Binomial, GatherAlgo::Linear, GatherAlgo::Auto];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            GatherAlgo::Binomial => "binomial",
            GatherAlgo::Linear => "linear",
            GatherAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            GatherAlgo::Binomial => binomial::DESCRIPTION,
            GatherAlgo::Linear => linear::DESCRIPTION,
            GatherAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Rank `rank`'s schedule for a gather of blocks of `block` bytes to `root` over `p`
    /// ranks. The caller buffer is `p * block` bytes on the root, `block` bytes elsewhere.
    ///
    /// # Panics
    /// If `rank >= p` or `root >= p` (a caller bug: [`crate::Collectives::gather_f64_with`]
    /// checks the root first).
    #[track_caller]
    pub fn rank_schedule(self, p: usize, rank: usize, root: usize, block: usize) -> RankSchedule {
        super::assert_rooted("gather", p, rank, root);
        match self {
            GatherAlgo::Binomial => binomial::build(p, rank, root, block),
            GatherAlgo::Linear => linear::build(p, rank, root, block),
            GatherAlgo::Auto => auto::select(p, block).rank_schedule(p, rank, root, block),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    ///
    /// # Panics
    /// If `root >= p`.
    #[track_caller]
    pub fn schedule(self, p: usize, root: usize, block: usize) -> Schedule {
        let buffers = super::scatter::rooted_buffers(p, root, block);
        super::whole(buffers, |r| self.rank_schedule(p, r, root, block))
    }
}

crate::impl_registry!(GatherAlgo, "gather algorithm");
