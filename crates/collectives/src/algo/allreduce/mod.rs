//! Allreduce: every rank ends with the element-wise reduction of all ranks' buffers.

use std::ops::Range;

use crate::schedule::{Combine, Reduction, Step};
use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod dissemination;
pub mod rabenseifner;
pub mod recursive_doubling;
pub mod ring;

/// The allreduce registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AllreduceAlgo {
    /// Recursive doubling with the extra ranks folded in: bit-identical on every rank.
    #[default]
    RecursiveDoubling,
    /// Dissemination (rank + 2^s), extra ranks folded in: each rank sums in its own order.
    Dissemination,
    /// Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather, extra
    /// ranks folded in: bit-identical on every rank (each block reduced by one owner).
    Rabenseifner,
    /// Ring reduce-scatter + ring allgather, 2 (p - 1) steps: bit-identical on every rank.
    Ring,
    /// Automatic: picked by size from MPICH's table (Thakur et al. 2005), see [`auto`].
    Auto,
}

impl AllreduceAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [AllreduceAlgo] = &[
        AllreduceAlgo::RecursiveDoubling,
        AllreduceAlgo::Dissemination,
        AllreduceAlgo::Rabenseifner,
        AllreduceAlgo::Ring,
        AllreduceAlgo::Auto,
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgo::RecursiveDoubling => "recursive_doubling",
            AllreduceAlgo::Dissemination => "dissemination",
            AllreduceAlgo::Rabenseifner => "rabenseifner",
            AllreduceAlgo::Ring => "ring",
            AllreduceAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            AllreduceAlgo::RecursiveDoubling => recursive_doubling::DESCRIPTION,
            AllreduceAlgo::Dissemination => dissemination::DESCRIPTION,
            AllreduceAlgo::Rabenseifner => rabenseifner::DESCRIPTION,
            AllreduceAlgo::Ring => ring::DESCRIPTION,
            AllreduceAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Whether every rank receives a bit-identical result (solvers require it).
    pub fn bit_identical(self) -> bool {
        match self {
            AllreduceAlgo::RecursiveDoubling => true,
            AllreduceAlgo::Dissemination => false,
            // Every block is reduced on exactly one rank and then only copied.
            AllreduceAlgo::Rabenseifner | AllreduceAlgo::Ring => true,
            // Only if every algorithm its table can pick is.
            AllreduceAlgo::Auto => auto::bit_identical(),
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
            AllreduceAlgo::Rabenseifner => rabenseifner::build(p, rank, bytes, red),
            AllreduceAlgo::Ring => ring::build(p, rank, bytes, red),
            AllreduceAlgo::Auto => auto::select(p, bytes).rank_schedule(p, rank, bytes, red),
        }
    }

    /// The whole schedule (every rank), for validation and pricing.
    pub fn schedule(self, p: usize, bytes: usize, red: Reduction) -> Schedule {
        super::whole(vec![bytes; p], |r| self.rank_schedule(p, r, bytes, red))
    }
}

crate::impl_registry!(AllreduceAlgo, "allreduce algorithm");

/// Fold the extra ranks of a non-power-of-two p in and out (Thakur, Rabenseifner and Gropp,
/// IJHPCA 2005) around the steps `core` adds for core rank `rank`. With q the largest power
/// of two `<= p` and e = p - q, each extra rank r >= q puts its buffer to r - q, which
/// reduces it in before its core steps and puts the result back after them; the extra rank
/// only waits for it. `core` gets q. Nothing for p <= 1 or an empty buffer.
///
/// Cost: 2 steps and 2 messages of the whole buffer more for each extra rank and its
/// partner.
fn folded(
    p: usize,
    rank: usize,
    bytes: usize,
    red: Reduction,
    core: impl FnOnce(&mut RankSchedule, usize),
) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || bytes == 0 {
        return rs;
    }
    let q = super::pof2_floor(p);
    let extra = p - q;
    if rank >= q {
        rs.push(Step::new().put(rank - q, 0..bytes, 0));
        rs.push(Step::new().arrive(rank - q, 0, bytes));
        return rs;
    }
    if rank < extra {
        rs.push(Step::new().arrive_reduce(rank + q, 0, bytes, red));
    }
    core(&mut rs, q);
    if rank < extra {
        rs.push(Step::new().put(rank + q, 0..bytes, 0));
    }
    rs
}

/// A step that puts the bytes `send` to `to` (at the same offset there) and waits for the
/// bytes `recv` from `from`, combined into place by `combine`; an empty range is left out.
fn block_step(
    to: usize,
    send: Range<usize>,
    from: usize,
    recv: Range<usize>,
    combine: Combine,
) -> Step {
    let mut step = Step::new();
    if !send.is_empty() {
        step = step.put(to, send.clone(), send.start);
    }
    if !recv.is_empty() {
        step = match combine {
            Combine::Copy => step.arrive(from, recv.start, recv.len()),
            Combine::Reduce(red) => step.arrive_reduce(from, recv.start, recv.len(), red),
        };
    }
    step
}

/// Byte offsets of `parts` blocks of whole `elem`-byte elements splitting `bytes` bytes, the
/// first `n mod parts` blocks one element longer (n = bytes / elem); the last entry is
/// `bytes`. `element_blocks(40, 3, 8) == [0, 16, 32, 40]`.
pub(crate) fn element_blocks(bytes: usize, parts: usize, elem: usize) -> Vec<usize> {
    let n = bytes / elem;
    let (base, longer) = (n / parts, n % parts);
    let mut displ: Vec<usize> = (0..parts)
        .map(|b| (b * base + b.min(longer)) * elem)
        .collect();
    displ.push(bytes);
    displ
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_blocks_split_unevenly_on_element_boundaries() {
        assert_eq!(element_blocks(40, 3, 8), [0, 16, 32, 40]);
        assert_eq!(element_blocks(16, 4, 8), [0, 8, 16, 16, 16]);
        assert_eq!(element_blocks(0, 2, 8), [0, 0, 0]);
    }
}
