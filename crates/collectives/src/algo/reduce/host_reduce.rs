//! Host reduce: gather every rank's buffer into the root's HOST memory, reduce there on the
//! CPU, and copy the result to the root's buffer in device memory (ALGORITHMS.md section 1,
//! reduce (b); the TCA papers' "gather to host, reduce on CPU, copy to GPU" for small
//! vectors).
//!
//! Data (every backend): each non-root rank puts its whole buffer to the root in one step;
//! the root reduces the arrivals into its buffer in the fixed order of relative ranks
//! 1, 2, ..., p - 1, so the result is `x[p-1] + (... + (x[1] + x[root]))` (relative
//! ranks): deterministic for given inputs, p and root, equal to the sequential reference up
//! to reassociation, but NOT bit-identical to [`super::binomial`] (a tree order).
//!
//! Model (`sim`, [`crate::schedule::LocalWork`]): the root first copies its own buffer to
//! host memory (free when the buffers are in host memory); the arrivals land in host memory;
//! then one CPU pass reads the p blocks and writes the result ((p + 1) m bytes,
//! (p - 1) m / 8 flops, no launch) and the result is copied host -> device (free on host
//! buffers). With host buffers this is exactly [`super::device_reduce`] on the CPU.
//!
//! Cost for m bytes: 1 round of p - 1 concurrent puts into the root ((p - 1) m bytes
//! through its port), then (p + 1) m / B_cpu + a host->device copy of m bytes. No kernel
//! launch: this is why it beats `device_reduce` for small m (a launch costs ~14 us).

use crate::schedule::{LocalWork, Reduction, WorkMemory};
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "gather to host memory, reduce on the CPU, copy the result to the device; 1 round";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, bytes: usize, red: Reduction) -> RankSchedule {
    let copy = |from, to| LocalWork::Copy {
        from,
        to,
        bytes: bytes as u64,
    };
    let model = super::RootModel {
        land: WorkMemory::Host,
        before: &[copy(WorkMemory::Buffer, WorkMemory::Host)],
        after: &[
            super::reduce_pass(WorkMemory::Host, p, bytes, 0),
            copy(WorkMemory::Host, WorkMemory::Buffer),
        ],
    };
    super::gather_then_reduce(p, rank, root, bytes, red, model)
}
