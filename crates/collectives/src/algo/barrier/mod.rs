//! Barrier: no rank leaves before every rank has entered.

use std::fmt;
use std::str::FromStr;

use crate::{RankSchedule, Schedule};

pub mod dissemination;

/// The barrier registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BarrierAlgo {
    /// Dissemination: ceil(log2 p) steps of zero-byte puts to rank + 2^s.
    #[default]
    Dissemination,
}

impl BarrierAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [BarrierAlgo] = &[BarrierAlgo::Dissemination];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BarrierAlgo::Dissemination => "dissemination",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            BarrierAlgo::Dissemination => dissemination::DESCRIPTION,
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
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    pub fn schedule(self, p: usize) -> Schedule {
        super::whole(vec![0; p], |r| self.rank_schedule(p, r))
    }
}

impl fmt::Display for BarrierAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BarrierAlgo {
    type Err = crate::UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                crate::UnknownAlgorithm::new("barrier", s, Self::ALL.iter().map(|a| a.name()))
            })
    }
}
