//! Recursive-doubling allreduce (Thakur, Rabenseifner and Gropp, "Optimization of collective
//! communication operations in MPICH", IJHPCA 2005), for any p.
//!
//! Let q be the largest power of two `<= p` and e = p - q. First the e extra ranks
//! r >= q put their buffers to r - q, which reduce them in. Then the q core ranks run log2 q
//! exchange steps: at step s, rank r and partner r xor 2^s swap whole buffers and reduce.
//! Both partners combine the same two operands, and the operators are commutative in IEEE
//! arithmetic, so all ranks hold **bit-identical** results. Finally core rank r < e puts the
//! result back to r + q.
//!
//! Cost for m bytes: log2 q steps, plus 2 when e > 0; each core rank sends log2 q messages of m
//! bytes (plus one when it serves an extra rank); m * (q log2 q + 2e) bytes in total.

use crate::schedule::{Reduction, Step};
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "exchange whole buffers with rank xor 2^s; extra ranks folded in; bit-identical results";

/// Rank `rank`'s schedule.
pub fn build(p: usize, rank: usize, bytes: usize, red: Reduction) -> RankSchedule {
    super::folded(p, rank, bytes, red, |rs, q| {
        let mut mask = 1;
        while mask < q {
            let partner = rank ^ mask;
            rs.push(
                Step::new()
                    .put(partner, 0..bytes, 0)
                    .arrive_reduce(partner, 0, bytes, red),
            );
            mask <<= 1;
        }
    })
}
