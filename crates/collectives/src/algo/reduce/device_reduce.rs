//! Device reduce: gather every rank's buffer into the root's DEVICE memory, then reduce with
//! ONE kernel (ALGORITHMS.md section 1, reduce (a)).
//!
//! Data (every backend): each non-root rank puts its whole buffer to the root in one step;
//! the root reduces the arrivals into its buffer in the fixed order of relative ranks
//! 1, 2, ..., p - 1, so the result is `x[p-1] + (... + (x[1] + x[root]))` (relative
//! ranks): deterministic for given inputs, p and root, equal to the sequential reference up
//! to reassociation, the same bits as [`super::host_reduce`], NOT bit-identical to
//! [`super::binomial`] (a tree order). (On `threads` each arrival is reduced as it comes;
//! the kernel that reads all p gathered blocks at once exists in the model only.)
//!
//! Model (`sim`, [`crate::schedule::LocalWork`]): the arrivals land in the memory the buffers
//! live in (the GPU's with `--memory device`); then one kernel on that device reads the p
//! blocks and writes the result: launch latency + max((p + 1) m / B_dev, (p - 1) m / 8 /
//! F_dev), with the launch latency, bandwidth B_dev and flop rate F_dev from the fabric's
//! `[compute.gpu]` (`[compute.host]` for host buffers: a CPU loop, no launch).
//!
//! Cost for m bytes: 1 round of p - 1 concurrent puts into the root ((p - 1) m bytes
//! through its port), then one kernel launch (~14 us on the K20X presets) plus
//! (p + 1) m / B_dev. Wins over `host_reduce` once the host-side pass and the host->device
//! copy of large m outweigh the launch.

use crate::schedule::{Reduction, WorkMemory};
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "gather into device memory, then one reduction kernel (launch latency from the fabric's device model); 1 round";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, bytes: usize, red: Reduction) -> RankSchedule {
    let model = super::RootModel {
        land: WorkMemory::Buffer,
        before: &[],
        after: &[super::reduce_pass(WorkMemory::Buffer, p, bytes, 1)],
    };
    super::gather_then_reduce(p, rank, root, bytes, red, model)
}
