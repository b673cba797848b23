//! Alltoall: every rank holds p blocks of the same length, block j meant for rank j; every
//! rank ends with p blocks, block i the one rank i meant for it.
//!
//! Every rank's caller buffer is p blocks (`p * block` bytes). On entry it holds the blocks
//! to send (block j for rank j; [`crate::Collectives::alltoall_f64_with`] copies the send
//! buffer in), on exit the blocks received (block i from rank i). The own block stays in
//! place; arrivals land in scratch and are copied into place at the end, so no rank's put
//! ever reads a range another rank is writing.

use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod bruck;
pub mod pairwise;

/// The alltoall registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AlltoallAlgo {
    /// Pairwise exchange: p - 1 steps, one block to one partner each.
    #[default]
    Pairwise,
    /// Bruck: ceil(log2 p) steps of about p/2 packed blocks each, local rotations in scratch.
    Bruck,
    /// Automatic: picked by block size from MPICH's table (Thakur et al. 2005), see [`auto`].
    Auto,
}

impl AlltoallAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [AlltoallAlgo] = &[
        AlltoallAlgo::Pairwise,
        AlltoallAlgo::Bruck,
        AlltoallAlgo::Auto,
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            AlltoallAlgo::Pairwise => "pairwise",
            AlltoallAlgo::Bruck => "bruck",
            AlltoallAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            AlltoallAlgo::Pairwise => pairwise::DESCRIPTION,
            AlltoallAlgo::Bruck => bruck::DESCRIPTION,
            AlltoallAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Rank `rank`'s schedule for an alltoall of blocks of `block` bytes over `p` ranks (a
    /// caller buffer of `p * block` bytes on every rank).
    ///
    /// # Panics
    /// If `rank >= p` (a caller bug: the rank comes from the communicator).
    #[track_caller]
    pub fn rank_schedule(self, p: usize, rank: usize, block: usize) -> RankSchedule {
        assert!(rank < p, "alltoall schedule for rank {rank} of {p} ranks");
        match self {
            AlltoallAlgo::Pairwise => pairwise::build(p, rank, block),
            AlltoallAlgo::Bruck => bruck::build(p, rank, block),
            AlltoallAlgo::Auto => auto::select(p, block).rank_schedule(p, rank, block),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    pub fn schedule(self, p: usize, block: usize) -> Schedule {
        super::whole(vec![p * block; p], |r| self.rank_schedule(p, r, block))
    }
}

crate::impl_registry!(AlltoallAlgo, "alltoall algorithm");
