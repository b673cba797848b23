//! Reduce: the element-wise reduction of every rank's buffer ends on the root.
//!
//! Every rank passes a buffer of the same length; on exit the root's holds the result and
//! every other rank's is unchanged (partial results are formed in scratch).
//!
//! Results equal the sequential reference up to floating-point reassociation. Every
//! algorithm here is deterministic ([`ReduceAlgo::deterministic`]: the same inputs, p and
//! root give the same bits) but none is bit-identical to any allreduce algorithm's result:
//! the association order differs (and depends on the root). `host_reduce` and
//! `device_reduce` share one order (relative ranks 1..p-1 added in turn to the root's
//! buffer), `binomial` another (its tree). Code that needs agreement with an allreduce must
//! broadcast the reduced value.

use crate::schedule::{LocalWork, Reduction, Step, WorkMemory};
use crate::{RankSchedule, Schedule};

pub mod auto;
pub mod binomial;
pub mod device_reduce;
pub mod host_reduce;

/// What the `sim` model adds to [`gather_then_reduce`]'s data movement at the root.
struct RootModel<'a> {
    /// Where the arrivals land.
    land: WorkMemory,
    /// Local work before the arrivals (a step of its own).
    before: &'a [LocalWork],
    /// Local work once every arrival is in.
    after: &'a [LocalWork],
}

/// The data schedule `host_reduce` and `device_reduce` share, with their model annotations:
/// every non-root rank puts its buffer to the root in one step; the root, after a step with
/// `model.before` local work, reduces the arrivals into its buffer in relative-rank order
/// (1, 2, ..., p - 1), the arrivals landing in `model.land`, then does `model.after`.
fn gather_then_reduce(
    p: usize,
    rank: usize,
    root: usize,
    bytes: usize,
    red: Reduction,
    model: RootModel<'_>,
) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || bytes == 0 {
        return rs;
    }
    if rank != root {
        rs.push(Step::new().put(root, 0..bytes, 0));
        return rs;
    }
    rs.push(model.before.iter().fold(Step::new(), |s, w| s.work(*w)));
    let mut gather = Step::new().arrivals_in(model.land);
    for v in 1..p {
        gather = gather.arrive_reduce((root + v) % p, 0, bytes, red);
    }
    rs.push(model.after.iter().fold(gather, |s, w| s.work(*w)));
    rs
}

/// One pass on the memory `on` that reads the p gathered blocks of `bytes` bytes and writes
/// their reduction: (p + 1) m bytes through memory and (p - 1) m / 8 flops for m = `bytes`,
/// in `launches` kernel launches (0 for a CPU loop).
fn reduce_pass(on: WorkMemory, p: usize, bytes: usize, launches: u32) -> LocalWork {
    let (m, blocks) = (bytes as u64, p as u64);
    LocalWork::Compute {
        on,
        bytes: (blocks + 1) * m,
        flops: (blocks - 1) * (m / 8),
        launches,
    }
}

/// The reduce registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReduceAlgo {
    /// Binomial tree: each rank reduces its children's whole buffers and sends one up.
    #[default]
    Binomial,
    /// Gather to host memory, reduce on the CPU, copy the result to the device.
    HostReduce,
    /// Gather into device memory, then one reduction kernel.
    DeviceReduce,
    /// Automatic: picked from MPICH's table (Thakur et al. 2005), see [`auto`].
    Auto,
}

impl ReduceAlgo {
    /// Every algorithm, for sweeps, help text and benches.
    pub const ALL: &'static [ReduceAlgo] = &[
        ReduceAlgo::Binomial,
        ReduceAlgo::HostReduce,
        ReduceAlgo::DeviceReduce,
        ReduceAlgo::Auto,
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ReduceAlgo::Binomial => "binomial",
            ReduceAlgo::HostReduce => "host_reduce",
            ReduceAlgo::DeviceReduce => "device_reduce",
            ReduceAlgo::Auto => "auto",
        }
    }

    /// One line on what the algorithm does and costs.
    pub fn description(self) -> &'static str {
        match self {
            ReduceAlgo::Binomial => binomial::DESCRIPTION,
            ReduceAlgo::HostReduce => host_reduce::DESCRIPTION,
            ReduceAlgo::DeviceReduce => device_reduce::DESCRIPTION,
            ReduceAlgo::Auto => auto::DESCRIPTION,
        }
    }

    /// Whether the result's bits depend only on the inputs, p and the root (not on timing):
    /// every reduce here fixes its summation order (see the module docs). Tested by
    /// `tests/it/sweep.rs`, which repeats every algorithm and compares the bits.
    pub fn deterministic(self) -> bool {
        match self {
            ReduceAlgo::Binomial | ReduceAlgo::HostReduce | ReduceAlgo::DeviceReduce => true,
            ReduceAlgo::Auto => true,
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
        super::assert_rooted("reduce", p, rank, root);
        match self {
            ReduceAlgo::Binomial => binomial::build(p, rank, root, bytes, red),
            ReduceAlgo::HostReduce => host_reduce::build(p, rank, root, bytes, red),
            ReduceAlgo::DeviceReduce => device_reduce::build(p, rank, root, bytes, red),
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
