//! Barrier: no rank leaves before every rank has entered.

use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod dissemination;

/// The barrier registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BarrierAlgo {
    /// Dissemination: ceil(log2 p) steps of zero-byte puts to rank + 2^s.
    #[default]
    Dissemination,
    /// Automatic: picked from MPICH's table (Thakur et al. 2005), see [`auto`].
    Auto,
}

impl BarrierAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [BarrierAlgo] = &[BarrierAlgo::Dissemination, BarrierAlgo::Auto];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BarrierAlgo::Dissemination => "dissemination",
            BarrierAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            BarrierAlgo::Dissemination => dissemination::DESCRIPTION,
            BarrierAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Rank `rank`'s schedule for a barrier over `p` ranks (the buffer is empty).
    ///
    /// # Panics
    /// If `rank >= p` (a caller bug: the rank comes from the communicator).
    #[track_caller]
    pub fn rank_schedule(self, p: usize, rank: usize) -> RankSchedule {
        assert!(rank < p, "barrier schedule for rank {rank} of {p} ranks");
        match self {
            BarrierAlgo::Dissemination => dissemination::build(p, rank),
            BarrierAlgo::Auto => auto::select(p).rank_schedule(p, rank),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    pub fn schedule(self, p: usize) -> Schedule {
        super::whole(vec![0; p], |r| self.rank_schedule(p, r))
    }
}

crate::impl_registry!(BarrierAlgo, "barrier algorithm");
