//! Naive neighbour exchange (ALGORITHMS.md section 2; what MPI implementations do): `start`
//! packs every outgoing message and posts all sends at once; `finish` receives every
//! incoming message and unpacks it straight from the received bytes into the destination
//! slice, then completes the sends. One step: all N puts, all N arrivals.
//!
//! Cost per exchange, for a rank with N neighbours of m bytes each on a node with C
//! communication devices of bandwidth B and per-message cost L: N messages and N*m bytes out
//! and in; devices carry whole messages, so ceil(N/C) rounds:
//! D_naive = L*ceil(N/C) + ceil(N/C)*m/B (see [`crate::model::time`]).

use super::Cut;

/// One line for help text and reports.
pub(crate) const DESCRIPTION: &str =
    "post all sends, then wait all receives; D = L*ceil(N/C) + ceil(N/C)*m/B";

/// Every message whole, all in one step (none without messages); whole messages are spread
/// round-robin over the devices by whoever prices it, so the device count is 1 here.
pub(crate) fn cut(n: usize) -> Cut {
    Cut {
        n,
        devices: 1,
        segments: 1,
        steps: usize::from(n > 0),
        whole: true,
    }
}
