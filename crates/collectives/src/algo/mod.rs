//! Collective algorithms, one file each, one registry enum per operation.
//!
//! Every algorithm is a pure function from (ranks, rank, sizes, root, ...) to that rank's
//! [`crate::RankSchedule`]; backends interpret the schedules. See `README.md` in this folder
//! for how to add one.

pub mod allgatherv;
pub mod allreduce;
pub mod alltoall;
mod auto_table;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod reduce;
pub mod scatter;
mod tree;

use crate::schedule::Step;
use crate::RankSchedule;

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

/// The flat tree of the linear rooted algorithms (bcast, scatter, gather): the root has ONE
/// step, `at_root` adding to it the transfer with each other rank in rank order starting
/// after the root (one chained-DMA start on TCA); every other rank has the one step
/// `elsewhere`. Nothing for p <= 1 or an empty block.
pub(crate) fn flat_tree(
    p: usize,
    rank: usize,
    root: usize,
    bytes: usize,
    at_root: impl Fn(Step, usize) -> Step,
    elsewhere: impl FnOnce() -> Step,
) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || bytes == 0 {
        return rs;
    }
    if rank == root {
        rs.push((1..p).map(|k| (root + k) % p).fold(Step::new(), at_root));
    } else {
        rs.push(elsewhere());
    }
    rs
}

/// The precondition of the rooted registries' `rank_schedule` (bcast, scatter, gather,
/// reduce): `rank` and `root` are ranks of `p`.
///
/// # Panics
/// Otherwise (a caller bug: the public entry points check the root first), naming `op`.
#[track_caller]
pub(crate) fn assert_rooted(op: &str, p: usize, rank: usize, root: usize) {
    assert!(
        rank < p && root < p,
        "{op} schedule for rank {rank}, root {root} of {p} ranks"
    );
}

/// The f64 sum, for the algorithms' tests.
#[cfg(test)]
pub(crate) const SUM: crate::schedule::Reduction = crate::schedule::Reduction {
    op: crate::schedule::Op::Sum,
    datatype: crate::schedule::Datatype::F64,
};

/// Whether `step` is one put and one arrival (the one message each way of many algorithms'
/// steps), for the algorithms' tests.
#[cfg(test)]
pub(crate) fn one_put_one_arrival(step: &Step) -> bool {
    step.puts.len() == 1 && step.arrivals.len() == 1
}

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
    use super::auto_table::KIB;
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
        let red = SUM;
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

    /// Assert that no operation's `auto` table names its registry's `Auto` (`auto` never
    /// runs itself).
    macro_rules! never_auto {
        ($($op:ident: $algo:ident),* $(,)?) => {$(
            let names_auto = $op::auto::TABLE.algos().any(|a| a == $op::$algo::Auto);
            assert!(!names_auto, "{}: the auto table names Auto", stringify!($op));
        )*};
    }

    #[test]
    fn no_table_names_auto() {
        never_auto!(
            allreduce: AllreduceAlgo,
            allgatherv: AllgathervAlgo,
            alltoall: AlltoallAlgo,
            barrier: BarrierAlgo,
            bcast: BcastAlgo,
            gather: GatherAlgo,
            reduce: ReduceAlgo,
            scatter: ScatterAlgo,
        );
    }

    /// The linear algorithms (the flat tree): one step per rank, p - 1 messages of one block.
    #[test]
    fn linear_algorithms_are_one_step_of_p_minus_one_messages() {
        for p in 1..=17 {
            for root in [0, p / 2, p - 1] {
                for sched in [
                    bcast::BcastAlgo::Linear.schedule(p, root, 8),
                    scatter::ScatterAlgo::Linear.schedule(p, root, 8),
                    gather::GatherAlgo::Linear.schedule(p, root, 8),
                ] {
                    sched.validate().unwrap();
                    assert_eq!(sched.totals(), (p - 1, 8 * (p - 1)), "p={p} root={root}");
                    assert!(sched.ranks.iter().all(|r| r.steps.len() <= 1));
                }
            }
        }
    }

    /// The tables without rows: one algorithm at every size and p.
    #[test]
    fn single_choice_tables() {
        for p in 1..=17 {
            assert_eq!(
                barrier::auto::select(p),
                barrier::BarrierAlgo::Dissemination
            );
            for bytes in [0, 1, 8, 2048, 1 << 20, usize::MAX] {
                let at = format!("p {p}, {bytes} B");
                assert_eq!(
                    gather::auto::select(p, bytes),
                    gather::GatherAlgo::Binomial,
                    "{at}"
                );
                assert_eq!(
                    reduce::auto::select(p, bytes),
                    reduce::ReduceAlgo::Binomial,
                    "{at}"
                );
                let scatter = scatter::auto::select(p, bytes);
                assert_eq!(scatter, scatter::ScatterAlgo::Binomial, "{at}");
            }
        }
        assert_eq!(
            barrier::auto::select(usize::MAX),
            barrier::BarrierAlgo::Dissemination
        );
    }
}
