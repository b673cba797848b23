//! Allreduce: every rank ends with the element-wise reduction of all ranks' buffers.

use crate::schedule::Reduction;
use crate::{RankSchedule, Schedule};

pub mod dissemination;
pub mod recursive_doubling;

/// The allreduce registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AllreduceAlgo {
    /// Recursive doubling with the extra ranks folded in: bit-identical on every rank.
    #[default]
    RecursiveDoubling,
    /// Dissemination (rank + 2^s), extra ranks folded in: each rank sums in its own order.
    Dissemination,
}

impl AllreduceAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [AllreduceAlgo] = &[
        AllreduceAlgo::RecursiveDoubling,
        AllreduceAlgo::Dissemination,
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgo::RecursiveDoubling => "recursive_doubling",
            AllreduceAlgo::Dissemination => "dissemination",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            AllreduceAlgo::RecursiveDoubling => recursive_doubling::DESCRIPTION,
            AllreduceAlgo::Dissemination => dissemination::DESCRIPTION,
        }
    }

    /// Whether every rank receives a bit-identical result (solvers require it).
    pub fn bit_identical(self) -> bool {
        match self {
            AllreduceAlgo::RecursiveDoubling => true,
            AllreduceAlgo::Dissemination => false,
        }
    }

    /// Rank `rank`'s schedule for an allreduce of `bytes` bytes over `p` ranks.
    pub fn rank_schedule(
        self,
        p: usize,
        rank: usize,
        bytes: usize,
        red: Reduction,
    ) -> RankSchedule {
        match self {
            AllreduceAlgo::RecursiveDoubling => recursive_doubling::build(p, rank, bytes, red),
            AllreduceAlgo::Dissemination => dissemination::build(p, rank, bytes, red),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    pub fn schedule(self, p: usize, bytes: usize, red: Reduction) -> Schedule {
        super::whole(vec![bytes; p], |r| self.rank_schedule(p, r, bytes, red))
    }
}

crate::impl_registry!(AllreduceAlgo, "allreduce algorithm");
