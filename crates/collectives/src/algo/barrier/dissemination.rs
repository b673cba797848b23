//! Dissemination barrier (Hensgen, Finkel and Manber, "Two algorithms for barrier
//! synchronization", IJPP 1988), for any p.
//!
//! At step s (0 <= s < ceil(log2 p)) rank r puts zero bytes to (r + 2^s) mod p and waits for
//! the arrival from (r - 2^s) mod p. After step s a rank has heard, directly or through
//! others, from the 2^(s+1) - 1 ranks before it, so after ceil(log2 p) steps from all of them:
//! no rank leaves before every rank has entered. Unlike the reduction, a barrier needs no
//! folding for p not a power of two (hearing from a rank twice is harmless).
//!
//! Cost: ceil(log2 p) steps, one zero-byte message per rank per step, p ceil(log2 p)
//! messages and 0 bytes in total.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "ceil(log2 p) steps of zero-byte puts to rank+2^s, waiting for rank-2^s";

/// Rank `rank`'s schedule (`rank < p`).
pub fn build(p: usize, rank: usize) -> RankSchedule {
    let mut rs = RankSchedule::default();
    for s in 0..super::super::ceil_log2(p) {
        let dist = 1usize << s;
        rs.push(
            Step::new()
                .put((rank + dist) % p, 0..0, 0)
                .arrive((rank + p - dist) % p, 0, 0),
        );
    }
    rs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_steps_of_zero_bytes() {
        for p in 1..=17 {
            let sched = crate::BarrierAlgo::Dissemination.schedule(p);
            sched.validate().unwrap();
            let steps = crate::algo::ceil_log2(p) as usize;
            assert!(sched.ranks.iter().all(|r| r.steps.len() == steps), "p={p}");
            assert_eq!(sched.totals(), (p * steps, 0));
            assert_eq!(build(p, 0).steps.len(), steps);
        }
    }
}
