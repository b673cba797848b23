//! Reduce: the element-wise reduction of every rank's buffer ends on the root.
//!
//! Every rank passes a buffer of the same length; on exit the root's holds the result and
//! every other rank's is unchanged (partial results are formed in scratch).
//!
//! Results equal the sequential reference up to floating-point reassociation. They are
//! deterministic (the same inputs, p and root give the same bits) but NOT bit-identical to
//! any allreduce algorithm's result: the association order differs (and depends on the
//! root). Code that needs agreement with an allreduce must broadcast the reduced value.

use crate::schedule::Reduction;
use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod binomial;

/// The reduce registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReduceAlgo {
    /// Binomial tree: each rank reduces its children's whole buffers and sends one up.
    #[default]
    Binomial,
    /// Automatic: picked from MPICH's table (Thakur et al. 2005), see [`auto`].
    Auto,
}

impl ReduceAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [ReduceAlgo] = &[ReduceAlgo::Binomial, ReduceAlgo::Auto];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ReduceAlgo::Binomial => "binomial",
            ReduceAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            ReduceAlgo::Binomial => binomial::DESCRIPTION,
            ReduceAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Rank `rank`'s schedule for a reduction of `bytes` bytes to `root` over `p` ranks.
    ///
    /// # Panics
    /// If `rank >= p` or `root >= p` (a caller bug: [`crate::Collectives::reduce_f64_with`]
    /// checks the root first).
    #[track_caller]
    pub fn rank_schedule(
        self,
        p: usize,
        rank: usize,
        root: usize,
        bytes: usize,
        red: Reduction,
    ) -> RankSchedule {
        assert!(
            rank < p && root < p,
            "reduce schedule for rank {rank}, root {root} of {p} ranks"
        );
        match self {
            ReduceAlgo::Binomial => binomial::build(p, rank, root, bytes, red),
            ReduceAlgo::Auto => auto::select(p, bytes).rank_schedule(p, rank, root, bytes, red),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    ///
    /// # Panics
    /// If `root >= p`.
    #[track_caller]
    pub fn schedule(self, p: usize, root: usize, bytes: usize, red: Reduction) -> Schedule {
        super::whole(vec![bytes; p], |r| {
            self.rank_schedule(p, r, root, bytes, red)
        })
    }
}

crate::impl_registry!(ReduceAlgo, "reduce algorithm");
