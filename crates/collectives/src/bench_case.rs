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

    /// The names of every algorithm of the operation's registry (its `ALL`).
    pub fn algos(self) -> Vec<&'static str> {
        match self {
            OpCase::Bcast => BcastAlgo::ALL.iter().map(|a| a.name()).collect(),
            OpCase::Scatter => ScatterAlgo::ALL.iter().map(|a| a.name()).collect(),
            OpCase::Gather => GatherAlgo::ALL.iter().map(|a| a.name()).collect(),
            OpCase::Reduce => ReduceAlgo::ALL.iter().map(|a| a.name()).collect(),
            OpCase::Alltoall => AlltoallAlgo::ALL.iter().map(|a| a.name()).collect(),
            OpCase::Allgather => AllgathervAlgo::ALL.iter().map(|a| a.name()).collect(),
            OpCase::Allreduce => AllreduceAlgo::ALL.iter().map(|a| a.name()).collect(),
            OpCase::Barrier => BarrierAlgo::ALL.iter().map(|a| a.name()).collect(),
        }
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

    /// Rank `rank`'s schedule of algorithm `algo` (a registry name).
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
        Ok(match self {
            OpCase::Bcast => algo
                .parse::<BcastAlgo>()?
                .rank_schedule(p, rank, root, bytes),
            OpCase::Scatter => algo
                .parse::<ScatterAlgo>()?
                .rank_schedule(p, rank, root, bytes),
            OpCase::Gather => algo
                .parse::<GatherAlgo>()?
                .rank_schedule(p, rank, root, bytes),
            OpCase::Reduce => {
                algo.parse::<ReduceAlgo>()?
                    .rank_schedule(p, rank, root, bytes, sum())
            }
            OpCase::Alltoall => algo.parse::<AlltoallAlgo>()?.rank_schedule(p, rank, bytes),
            OpCase::Allgather => algo
                .parse::<AllgathervAlgo>()?
                .rank_schedule(rank, &vec![bytes; p]),
            OpCase::Allreduce => {
                algo.parse::<AllreduceAlgo>()?
                    .rank_schedule(p, rank, bytes, sum())
            }
            OpCase::Barrier => algo.parse::<BarrierAlgo>()?.rank_schedule(p, rank),
        })
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
}
