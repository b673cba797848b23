//! Dissemination allreduce (Hensgen, Finkel and Manber's dissemination pattern, as used for
//! allreduce in the seed TCA CG paper), for any p.
//!
//! The classic form (step s: send to rank + 2^s, receive from rank - 2^s, mod p) sums some
//! ranks twice when p is not a power of two, so the e = p - q extra ranks (q the largest power
//! of two `<= p`) are folded in first and handed the result last, as in recursive doubling.
//! Each core rank accumulates its window in its own order, so results may differ in the last
//! bits between ranks: **not bit-identical**.
//!
//! Cost for m bytes: log2 q steps, plus 2 when e > 0; one message of m bytes per core rank per step.

use crate::schedule::{Reduction, Step};
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "send to rank+2^s, receive from rank-2^s; extra ranks folded in; NOT bit-identical";

/// Rank `rank`'s schedule.
pub fn build(p: usize, rank: usize, bytes: usize, red: Reduction) -> RankSchedule {
    super::folded(p, rank, bytes, red, |rs, q| {
        let mut dist = 1;
        while dist < q {
            let to = (rank + dist) % q;
            let from = (rank + q - dist) % q;
            rs.push(
                Step::new()
                    .put(to, 0..bytes, 0)
                    .arrive_reduce(from, 0, bytes, red),
            );
            dist <<= 1;
        }
    })
}
