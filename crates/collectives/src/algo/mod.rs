//! Collective algorithms, one file each, one registry enum per operation.
//!
//! Every algorithm is a pure function from (ranks, rank, sizes, root, ...) to that rank's
//! [`crate::RankSchedule`]; backends interpret the schedules. See `README.md` in this folder
//! for how to add one.

pub mod allgatherv;
pub mod allreduce;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod reduce;
pub mod scatter;
mod tree;

/// Largest power of two `<= p` (`p >= 1`).
pub(crate) fn pof2_floor(p: usize) -> usize {
    debug_assert!(p >= 1);
    1usize << (usize::BITS - 1 - p.leading_zeros())
}

/// `ceil(log2 p)` for `p >= 1`.
pub(crate) fn ceil_log2(p: usize) -> u32 {
    if p <= 1 {
        0
    } else {
        usize::BITS - (p - 1).leading_zeros()
    }
}

/// Which rank counts a selection [`Rule`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RankClass {
    /// Every p.
    Any,
    /// p a power of two (1 included).
    PowerOfTwo,
    /// p not a power of two.
    NotPowerOfTwo,
}

impl RankClass {
    fn admits(self, p: usize) -> bool {
        match self {
            RankClass::Any => true,
            RankClass::PowerOfTwo => p.is_power_of_two(),
            RankClass::NotPowerOfTwo => !p.is_power_of_two(),
        }
    }
}

/// One row of an operation's `auto` selection table (`algo/<op>/auto.rs`): `algo` applies
/// when the message size is at most `max_bytes` (inclusive; what "bytes" means is stated
/// per operation), p is in `ranks` and `p <= max_ranks`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rule<A> {
    pub max_bytes: usize,
    pub ranks: RankClass,
    pub max_ranks: usize,
    pub algo: A,
}

impl<A> Rule<A> {
    fn matches(&self, p: usize, bytes: usize) -> bool {
        bytes <= self.max_bytes && p <= self.max_ranks && self.ranks.admits(p)
    }

    /// Whether the row matches every (p, bytes): the required last row of a table.
    #[cfg(test)]
    pub(crate) fn is_catch_all(&self) -> bool {
        self.max_bytes == usize::MAX && self.max_ranks == usize::MAX && self.ranks == RankClass::Any
    }
}

/// The algorithm of the first row of `table` matching (p, bytes). Every table ends in a
/// catch-all row (each `auto.rs` tests it), so the last row answers when nothing else does.
pub(crate) fn select_from<A: Copy>(table: &[Rule<A>], p: usize, bytes: usize) -> A {
    let row = table.iter().find(|r| r.matches(p, bytes)).or(table.last());
    row.expect("selection tables are non-empty").algo
}

/// 1 KiB, for the selection tables.
pub(crate) const KIB: usize = 1024;

/// Build the whole [`crate::Schedule`] from a per-rank builder.
pub(crate) fn whole(
    buffer_bytes: Vec<usize>,
    build: impl Fn(usize) -> crate::RankSchedule,
) -> crate::Schedule {
    let ranks = (0..buffer_bytes.len()).map(build).collect();
    crate::Schedule {
        ranks,
        buffer_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pof2_and_log2() {
        let cases = [
            (1, 1, 0),
            (2, 2, 1),
            (3, 2, 2),
            (4, 4, 2),
            (5, 4, 3),
            (17, 16, 5),
        ];
        for (p, f, l) in cases {
            assert_eq!(pof2_floor(p), f, "pof2_floor({p})");
            assert_eq!(ceil_log2(p), l, "ceil_log2({p})");
        }
    }

    /// `auto` runs exactly the schedule of the algorithm its table selects, including at
    /// sizes the threads sweep does not reach (e.g. the pipeline broadcast above 12 KiB).
    #[test]
    fn auto_schedules_are_the_selected_algorithms_schedules() {
        use crate::schedule::{Datatype, Op, Reduction};
        let red = Reduction {
            op: Op::Sum,
            datatype: Datatype::F64,
        };
        for p in 1..=17 {
            let root = p / 2;
            for bytes in [0, 8, 2 * KIB, 12 * KIB, 96 * KIB, 600 * KIB] {
                let s = allreduce::AllreduceAlgo::Auto.schedule(p, bytes, red);
                assert_eq!(s, allreduce::auto::select(p, bytes).schedule(p, bytes, red));
                let blocks = vec![bytes / p; p];
                let total = blocks.iter().sum();
                let s = allgatherv::AllgathervAlgo::Auto.schedule(&blocks);
                assert_eq!(s, allgatherv::auto::select(p, total).schedule(&blocks));
                let s = bcast::BcastAlgo::Auto.schedule(p, root, bytes);
                assert_eq!(s, bcast::auto::select(p, bytes).schedule(p, root, bytes));
                let s = reduce::ReduceAlgo::Auto.schedule(p, root, bytes, red);
                assert_eq!(
                    s,
                    reduce::auto::select(p, bytes).schedule(p, root, bytes, red)
                );
                let block = bytes / p;
                let s = scatter::ScatterAlgo::Auto.schedule(p, root, block);
                assert_eq!(s, scatter::auto::select(p, block).schedule(p, root, block));
                let s = gather::GatherAlgo::Auto.schedule(p, root, block);
                assert_eq!(s, gather::auto::select(p, block).schedule(p, root, block));
                let s = alltoall::AlltoallAlgo::Auto.schedule(p, block);
                assert_eq!(s, alltoall::auto::select(p, block).schedule(p, block));
                for s in [
                    bcast::BcastAlgo::Auto.schedule(p, root, bytes),
                    allgatherv::AllgathervAlgo::Auto.schedule(&blocks),
                ] {
                    s.validate()
                        .unwrap_or_else(|e| panic!("p {p}, {bytes} B: {e}"));
                }
            }
            let s = barrier::BarrierAlgo::Auto.schedule(p);
            assert_eq!(s, barrier::auto::select(p).schedule(p));
        }
    }
}
