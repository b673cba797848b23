//! Allgatherv: every rank contributes one block (of any length, 0 included) and every rank
//! ends with all blocks, concatenated in rank order.
//!
//! The buffer every rank passes is the concatenation of all blocks; block `r` lies at
//! `displacements(blocks)[r]` ([`crate::schedule::displacements`]). On entry each rank's own
//! block must be in place at its displacement (the rest of the buffer is ignored and
//! overwritten); on exit every rank holds all blocks.

use std::ops::Range;

use crate::schedule::{displacements, Step};
use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod bruck;
pub mod neighbor_exchange;
pub mod recursive_doubling;
pub mod ring;

/// The allgatherv registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AllgathervAlgo {
    /// Ring: p - 1 steps, each rank forwards one block to its right neighbour per step.
    Ring,
    /// Recursive doubling with the extra ranks folded in: log2 steps, exchanged sets double.
    #[default]
    RecursiveDoubling,
    /// Bruck: ceil(log2 p) steps for any p, held blocks kept rotated in scratch.
    Bruck,
    /// Neighbour exchange: p/2 steps between ring neighbours, two blocks per message.
    NeighborExchange,
    /// Automatic: picked by total size and p from MPICH's table (Thakur et al. 2005), see
    /// [`auto`].
    Auto,
}

impl AllgathervAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [AllgathervAlgo] = &[
        AllgathervAlgo::Ring,
        AllgathervAlgo::RecursiveDoubling,
        AllgathervAlgo::Bruck,
        AllgathervAlgo::NeighborExchange,
        AllgathervAlgo::Auto,
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            AllgathervAlgo::Ring => "ring",
            AllgathervAlgo::RecursiveDoubling => "recursive_doubling",
            AllgathervAlgo::Bruck => "bruck",
            AllgathervAlgo::NeighborExchange => "neighbor_exchange",
            AllgathervAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            AllgathervAlgo::Ring => ring::DESCRIPTION,
            AllgathervAlgo::RecursiveDoubling => recursive_doubling::DESCRIPTION,
            AllgathervAlgo::Bruck => bruck::DESCRIPTION,
            AllgathervAlgo::NeighborExchange => neighbor_exchange::DESCRIPTION,
            AllgathervAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Rank `rank`'s schedule for an allgatherv of blocks of `blocks[r]` bytes (one entry per
    /// rank, so p = `blocks.len()`). The buffer is `blocks.iter().sum()` bytes on every rank.
    ///
    /// # Panics
    /// If `rank >= blocks.len()` (a caller bug: the rank comes from the communicator, and
    /// [`crate::Collectives::allgatherv_f64_with`] checks the counts first).
    #[track_caller]
    pub fn rank_schedule(self, rank: usize, blocks: &[usize]) -> RankSchedule {
        assert!(
            rank < blocks.len(),
            "allgatherv schedule for rank {rank} of {} blocks",
            blocks.len()
        );
        match self {
            AllgathervAlgo::Ring => ring::build(rank, blocks),
            AllgathervAlgo::RecursiveDoubling => recursive_doubling::build(rank, blocks),
            AllgathervAlgo::Bruck => bruck::build(rank, blocks),
            AllgathervAlgo::NeighborExchange => neighbor_exchange::build(rank, blocks),
            // Selected by the total size, the same on every rank (all know all blocks).
            AllgathervAlgo::Auto => {
                let total = blocks.iter().sum();
                auto::select(blocks.len(), total).rank_schedule(rank, blocks)
            }
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    pub fn schedule(self, blocks: &[usize]) -> Schedule {
        let total = blocks.iter().sum();
        super::whole(vec![total; blocks.len()], |r| self.rank_schedule(r, blocks))
    }
}

crate::impl_registry!(AllgathervAlgo, "allgatherv algorithm");

/// The blocks' byte offsets ([`displacements`]: block `b` is `displ[b]..displ[b + 1]`, the
/// last entry is the total), or `None` when there is nothing to move: p <= 1 or every block
/// empty. Every algorithm then builds the empty schedule.
pub(crate) fn layout(blocks: &[usize]) -> Option<Vec<usize>> {
    let displ = displacements(blocks);
    (blocks.len() > 1 && displ[blocks.len()] > 0).then_some(displ)
}

/// Add puts of `ranges` (same offsets at the destination) to `to`, and the matching
/// arrivals from `from`, skipping empty ranges and merging adjacent ones so a step carries
/// as few messages as possible.
pub(crate) fn exchange(
    mut step: Step,
    to: usize,
    send: &[Range<usize>],
    from: usize,
    recv: &[Range<usize>],
) -> Step {
    for r in coalesce(send) {
        step = step.put(to, r.clone(), r.start);
    }
    for r in coalesce(recv) {
        step = step.arrive(from, r.start, r.len());
    }
    step
}

/// Drop empty ranges and merge ranges that touch (`a.end == b.start`), keeping the order.
fn coalesce(ranges: &[Range<usize>]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut it = ranges.iter().filter(|r| !r.is_empty()).peekable();
    std::iter::from_fn(move || {
        let mut cur = it.next()?.clone();
        while let Some(next) = it.peek() {
            if next.start != cur.end {
                break;
            }
            cur.end = next.end;
            it.next();
        }
        Some(cur)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_drops_empty_and_merges_touching() {
        let got: Vec<_> = coalesce(&[0..0, 0..3, 3..3, 3..5, 7..9, 9..9]).collect();
        assert_eq!(got, vec![0..5, 7..9]);
    }
}
