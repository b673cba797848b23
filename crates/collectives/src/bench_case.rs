//! Benchmark cases of the collectives: for each operation the buffer each rank passes, the
//! schedule of any registry algorithm, the initial contents and the sequential reference of
//! every rank's buffer afterwards. Shared by `krylov bench collectives` and the criterion
//! benches (`benches/benches/collectives.rs`), so both measure and verify the same thing.
//!
//! Sizes follow the CLI contract (CLI.md "bench collectives"): `bytes` is the whole vector
//! for bcast, reduce and allreduce; each rank's block for scatter, gather and allgather;
//! each destination's block for alltoall; ignored for barrier. Reductions are sums over
//! f64, so their `bytes` must be a multiple of 8. Values are multiples of 1/2 below 2^20,
//! so every summation order gives the reference exactly.
//!
//! ```
//! use castack_collectives::bench_case::OpCase;
//!
//! let (p, root, bytes) = (3, 1, 16);
//! let sched = OpCase::Allreduce.schedule("ring", p, bytes, root)?;
//! sched.validate().expect("valid");
//! assert_eq!(OpCase::Allreduce.expected(p, 0, bytes, root).len(), 16);
//!
//! // The same algorithm as a typed value: parsed once, planned without parsing.
//! let ring = OpCase::Allreduce.algorithm("ring")?;
//! assert_eq!(ring.op(), OpCase::Allreduce);
//! assert_eq!(ring.plan(p, 0, bytes, root), sched.ranks[0]);
//! # Ok::<(), castack_collectives::UnknownAlgorithm>(())
//! ```

use crate::schedule::{Datatype, Op, Reduction};
use crate::{
    AllgathervAlgo, AllreduceAlgo, AlltoallAlgo, BarrierAlgo, BcastAlgo, GatherAlgo, RankSchedule,
    ReduceAlgo, ScatterAlgo, Schedule, UnknownAlgorithm,
};

/// An operation as a benchmark case (a registry enum over the operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpCase {
    /// Broadcast from the root.
    Bcast,
    /// Scatter of equal blocks from the root.
    Scatter,
    /// Gather of equal blocks to the root.
    Gather,
    /// Sum reduction over f64 to the root.
    Reduce,
    /// Allgather of equal blocks.
    Allgather,
    /// Sum allreduce over f64.
    Allreduce,
    /// Barrier (size ignored).
    Barrier,
    /// All-to-all of equal blocks.
    Alltoall,
}

/// One algorithm of one operation's registry: the typed value of a registry name for an
/// operation ([`OpCase::algorithm`]), planned without parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaseAlgo {
    /// A broadcast algorithm.
    Bcast(BcastAlgo),
    /// A scatter algorithm.
    Scatter(ScatterAlgo),
    /// A gather algorithm.
    Gather(GatherAlgo),
    /// A reduce algorithm.
    Reduce(ReduceAlgo),
    /// An allgather (allgatherv) algorithm.
    Allgather(AllgathervAlgo),
    /// An allreduce algorithm.
    Allreduce(AllreduceAlgo),
    /// A barrier algorithm.
    Barrier(BarrierAlgo),
    /// An all-to-all algorithm.
    Alltoall(AlltoallAlgo),
}

impl CaseAlgo {
    /// The operation the algorithm belongs to.
    pub fn op(self) -> OpCase {
        match self {
            CaseAlgo::Bcast(_) => OpCase::Bcast,
            CaseAlgo::Scatter(_) => OpCase::Scatter,
            CaseAlgo::Gather(_) => OpCase::Gather,
            CaseAlgo::Reduce(_) => OpCase::Reduce,
            CaseAlgo::Allgather(_) => OpCase::Allgather,
            CaseAlgo::Allreduce(_) => OpCase::Allreduce,
            CaseAlgo::Barrier(_) => OpCase::Barrier,
            CaseAlgo::Alltoall(_) => OpCase::Alltoall,
        }
    }

    /// The algorithm's registry name.
    pub fn name(self) -> &'static str {
        match self {
            CaseAlgo::Bcast(a) => a.name(),
            CaseAlgo::Scatter(a) => a.name(),
            CaseAlgo::Gather(a) => a.name(),
            CaseAlgo::Reduce(a) => a.name(),
            CaseAlgo::Allgather(a) => a.name(),
            CaseAlgo::Allreduce(a) => a.name(),
            CaseAlgo::Barrier(a) => a.name(),
            CaseAlgo::Alltoall(a) => a.name(),
        }
    }

    /// Rank `rank`'s schedule for `bytes` (see the module docs) over `p` ranks.
    ///
    /// # Panics
    /// If `rank >= p` or `root >= p` (caller bugs, as for the registries' `rank_schedule`).
    pub fn plan(self, p: usize, rank: usize, bytes: usize, root: usize) -> RankSchedule {
        match self {
            CaseAlgo::Bcast(a) => a.rank_schedule(p, rank, root, bytes),
            CaseAlgo::Scatter(a) => a.rank_schedule(p, rank, root, bytes),
            CaseAlgo::Gather(a) => a.rank_schedule(p, rank, root, bytes),
            CaseAlgo::Reduce(a) => a.rank_schedule(p, rank, root, bytes, sum()),
            CaseAlgo::Alltoall(a) => a.rank_schedule(p, rank, bytes),
            CaseAlgo::Allgather(a) => a.rank_schedule(rank, &vec![bytes; p]),
            CaseAlgo::Allreduce(a) => a.rank_schedule(p, rank, bytes, sum()),
            CaseAlgo::Barrier(a) => a.rank_schedule(p, rank),
        }
    }
}

fn sum() -> Reduction {
    Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    }
}

/// Byte `i` of block `block` in the cases' inputs.
fn byte(block: usize, i: usize) -> u8 {
    ((block * 31 + i * 7) % 251) as u8
}

/// Element `i` of rank `rank`'s reduction input.
fn value(rank: usize, i: usize) -> f64 {
    ((rank * 131 + i * 7) % 97) as f64 * 0.5
}

impl OpCase {
    /// Every operation.
    pub const ALL: &'static [OpCase] = &[
        OpCase::Bcast,
        OpCase::Scatter,
        OpCase::Gather,
        OpCase::Reduce,
        OpCase::Allgather,
        OpCase::Allreduce,
        OpCase::Barrier,
        OpCase::Alltoall,
    ];

    /// The snake_case name (the CLI's `--op` value).
    pub fn name(self) -> &'static str {
        match self {
            OpCase::Bcast => "bcast",
            OpCase::Scatter => "scatter",
            OpCase::Gather => "gather",
            OpCase::Reduce => "reduce",
            OpCase::Alltoall => "alltoall",
            OpCase::Allgather => "allgather",
            OpCase::Allreduce => "allreduce",
            OpCase::Barrier => "barrier",
        }
    }

    /// One line on the operation (help text).
    pub fn description(self) -> &'static str {
        match self {
            OpCase::Bcast => "Broadcast from the root",
            OpCase::Scatter => "Scatter of equal blocks from the root",
            OpCase::Gather => "Gather of equal blocks to the root",
            OpCase::Reduce => "Sum reduction over f64 to the root",
            OpCase::Allgather => "Allgather of equal blocks",
            OpCase::Allreduce => "Sum allreduce over f64",
            OpCase::Barrier => "Barrier (size ignored)",
            OpCase::Alltoall => "All-to-all of equal blocks",
        }
    }

    /// Every algorithm of the operation's registry (its `ALL`, in order).
    pub fn algorithms(self) -> Vec<CaseAlgo> {
        fn all<A: Copy>(registry: &[A], case: fn(A) -> CaseAlgo) -> Vec<CaseAlgo> {
            registry.iter().map(|&a| case(a)).collect()
        }
        match self {
            OpCase::Bcast => all(BcastAlgo::ALL, CaseAlgo::Bcast),
            OpCase::Scatter => all(ScatterAlgo::ALL, CaseAlgo::Scatter),
            OpCase::Gather => all(GatherAlgo::ALL, CaseAlgo::Gather),
            OpCase::Reduce => all(ReduceAlgo::ALL, CaseAlgo::Reduce),
            OpCase::Alltoall => all(AlltoallAlgo::ALL, CaseAlgo::Alltoall),
            OpCase::Allgather => all(AllgathervAlgo::ALL, CaseAlgo::Allgather),
            OpCase::Allreduce => all(AllreduceAlgo::ALL, CaseAlgo::Allreduce),
            OpCase::Barrier => all(BarrierAlgo::ALL, CaseAlgo::Barrier),
        }
    }

    /// The names of every algorithm of the operation's registry (its `ALL`).
    pub fn algos(self) -> Vec<&'static str> {
        self.algorithms().into_iter().map(CaseAlgo::name).collect()
    }

    /// The algorithm of the operation's registry named `name`.
    ///
    /// # Errors
    /// [`UnknownAlgorithm`] (listing the registry's names) when `name` is not in it.
    pub fn algorithm(self, name: &str) -> Result<CaseAlgo, UnknownAlgorithm> {
        Ok(match self {
            OpCase::Bcast => CaseAlgo::Bcast(name.parse()?),
            OpCase::Scatter => CaseAlgo::Scatter(name.parse()?),
            OpCase::Gather => CaseAlgo::Gather(name.parse()?),
            OpCase::Reduce => CaseAlgo::Reduce(name.parse()?),
            OpCase::Alltoall => CaseAlgo::Alltoall(name.parse()?),
            OpCase::Allgather => CaseAlgo::Allgather(name.parse()?),
            OpCase::Allreduce => CaseAlgo::Allreduce(name.parse()?),
            OpCase::Barrier => CaseAlgo::Barrier(name.parse()?),
        })
    }

    /// Whether the operation reduces f64 (sizes must be multiples of 8).
    pub fn is_reduction(self) -> bool {
        matches!(self, OpCase::Allreduce | OpCase::Reduce)
    }

    /// nccl-tests' bus bandwidth factor for `p` ranks.
    pub fn busbw_factor(self, p: usize) -> f64 {
        let p = p as f64;
        match self {
            OpCase::Allreduce => 2.0 * (p - 1.0) / p,
            OpCase::Allgather | OpCase::Scatter | OpCase::Gather | OpCase::Alltoall => {
                (p - 1.0) / p
            }
            OpCase::Bcast | OpCase::Reduce => 1.0,
            OpCase::Barrier => 0.0,
        }
    }

    /// Rank `rank`'s caller buffer length for `bytes` (see the module docs).
    pub fn buffer_bytes(self, p: usize, rank: usize, bytes: usize, root: usize) -> usize {
        match self {
            OpCase::Allgather | OpCase::Alltoall => p * bytes,
            OpCase::Scatter | OpCase::Gather if rank == root => p * bytes,
            OpCase::Scatter | OpCase::Gather => bytes,
            OpCase::Barrier => 0,
            OpCase::Bcast | OpCase::Allreduce | OpCase::Reduce => bytes,
        }
    }

    /// Rank `rank`'s schedule of algorithm `algo` (a registry name; [`CaseAlgo::plan`] for
    /// a parsed one).
    ///
    /// # Errors
    /// [`UnknownAlgorithm`] when `algo` is not in the operation's registry.
    ///
    /// # Panics
    /// If `rank >= p` or `root >= p` (caller bugs, as for the registries' `rank_schedule`).
    pub fn plan(
        self,
        algo: &str,
        p: usize,
        rank: usize,
        bytes: usize,
        root: usize,
    ) -> Result<RankSchedule, UnknownAlgorithm> {
        Ok(self.algorithm(algo)?.plan(p, rank, bytes, root))
    }

    /// The whole schedule (every rank), for validation and pricing.
    ///
    /// # Errors
    /// [`UnknownAlgorithm`] when `algo` is not in the operation's registry.
    pub fn schedule(
        self,
        algo: &str,
        p: usize,
        bytes: usize,
        root: usize,
    ) -> Result<Schedule, UnknownAlgorithm> {
        Ok(Schedule {
            ranks: (0..p)
                .map(|r| self.plan(algo, p, r, bytes, root))
                .collect::<Result<_, _>>()?,
            buffer_bytes: (0..p)
                .map(|r| self.buffer_bytes(p, r, bytes, root))
                .collect(),
        })
    }

    /// Initial contents of rank `rank`'s buffer (`buf` of [`OpCase::buffer_bytes`]).
    pub fn fill(self, p: usize, rank: usize, bytes: usize, root: usize, buf: &mut [u8]) {
        match self {
            OpCase::Bcast => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = if rank == root { byte(root, i) } else { 0 };
                }
            }
            // The root holds block j for rank j; the others receive into zeros.
            OpCase::Scatter => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = if rank == root {
                        byte(i / bytes.max(1), i % bytes.max(1))
                    } else {
                        0
                    };
                }
            }
            // Every rank sends its own block; the root's own block is already in place.
            OpCase::Gather if rank == root => {
                buf.fill(0);
                for (i, b) in buf.iter_mut().skip(root * bytes).take(bytes).enumerate() {
                    *b = byte(root, i);
                }
            }
            OpCase::Gather => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = byte(rank, i);
                }
            }
            OpCase::Allgather => {
                buf.fill(0);
                for (i, b) in buf.iter_mut().skip(rank * bytes).take(bytes).enumerate() {
                    *b = byte(rank, i);
                }
            }
            // Block j of rank r's buffer is what r sends to j.
            OpCase::Alltoall => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = byte(rank * p + i / bytes.max(1), i % bytes.max(1));
                }
            }
            OpCase::Allreduce | OpCase::Reduce => {
                for (i, c) in buf.chunks_exact_mut(8).enumerate() {
                    c.copy_from_slice(&value(rank, i).to_ne_bytes());
                }
            }
            OpCase::Barrier => {}
        }
    }

    /// The sequential reference of rank `rank`'s buffer after the operation.
    pub fn expected(self, p: usize, rank: usize, bytes: usize, root: usize) -> Vec<u8> {
        let sums = || -> Vec<u8> {
            (0..bytes / 8)
                .flat_map(|i| (0..p).map(|r| value(r, i)).sum::<f64>().to_ne_bytes())
                .collect()
        };
        let all_blocks = || -> Vec<u8> {
            (0..p)
                .flat_map(|r| (0..bytes).map(move |i| byte(r, i)))
                .collect()
        };
        let len = self.buffer_bytes(p, rank, bytes, root);
        let mut unchanged = vec![0u8; len];
        self.fill(p, rank, bytes, root, &mut unchanged);
        match self {
            OpCase::Bcast => (0..bytes).map(|i| byte(root, i)).collect(),
            OpCase::Scatter if rank == root => unchanged,
            OpCase::Scatter => (0..bytes).map(|i| byte(rank, i)).collect(),
            OpCase::Allgather => all_blocks(),
            OpCase::Gather if rank == root => all_blocks(),
            OpCase::Gather => unchanged,
            OpCase::Alltoall => (0..p)
                .flat_map(|j| (0..bytes).map(move |i| byte(j * p + rank, i)))
                .collect(),
            OpCase::Allreduce => sums(),
            OpCase::Reduce if rank == root => sums(),
            OpCase::Reduce => unchanged,
            OpCase::Barrier => Vec::new(),
        }
    }
}

crate::impl_registry!(OpCase, "operation");

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case's schedule validates, and executing it on the sequential model of the
    /// schedule (copies, then puts landing in order) is checked by `tests/it/sweep.rs`'s
    /// backends; here: shapes and references are self-consistent.
    #[test]
    fn every_case_validates_and_references_have_the_buffer_length() {
        for &op in OpCase::ALL {
            for algo in op.algos() {
                for p in [1, 3, 4] {
                    let root = p - 1;
                    let sched = op.schedule(algo, p, 16, root).unwrap();
                    sched
                        .validate()
                        .unwrap_or_else(|e| panic!("{op} {algo} p={p}: {e}"));
                    for r in 0..p {
                        assert_eq!(
                            op.expected(p, r, 16, root).len(),
                            op.buffer_bytes(p, r, 16, root),
                            "{op} {algo} p={p} rank {r}"
                        );
                    }
                }
            }
        }
        assert!(OpCase::Bcast.plan("nope", 2, 0, 8, 0).is_err());
    }

    #[test]
    fn typed_algorithms_round_trip_their_names() {
        for &op in OpCase::ALL {
            let algos = op.algorithms();
            assert_eq!(algos.len(), op.algos().len(), "{op}");
            for a in algos {
                assert_eq!(a.op(), op);
                assert_eq!(op.algorithm(a.name()), Ok(a));
            }
            let err = op.algorithm("nope").unwrap_err();
            assert!(err.to_string().contains(op.algos()[0]), "{err}");
        }
    }
}
