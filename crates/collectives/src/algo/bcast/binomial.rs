//! Binomial-tree broadcast (Thakur, Rabenseifner and Gropp, "Optimization of collective
//! communication operations in MPICH", IJHPCA 2005, section 4.2), for any p and any root.
//!
//! Ranks are numbered relative to the root, v = (rank - root) mod p. In round k the 2^k
//! holders v < 2^k put the buffer to v + 2^k (where that is < p), so the number of holders
//! doubles each round. As the specification asks, a holder issues ALL its sends of the
//! remaining rounds as ONE chained step: a non-root rank has one step receiving from its
//! parent (v with its lowest set bit cleared) and then one step with all puts to its
//! children v + 2^k (2^k below v's lowest set bit), largest subtree first; the root has one
//! step with all its puts. On a fabric without chaining the puts of a step still leave in
//! that order, which is the classic binomial schedule.
//!
//! Cost for m bytes: ceil(log2 p) rounds on the critical path; the root issues ceil(log2 p)
//! puts, every other rank receives exactly one message: p - 1 messages and (p - 1) m bytes
//! in total; at most 2 steps per rank.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "binomial tree, holders double each round; all of a holder's puts in one chained step";

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, bytes: usize) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || bytes == 0 {
        return rs;
    }
    let v = (rank + p - root) % p;
    let abs = |rel: usize| (rel + root) % p;
    // Children are v + 2^k for 2^k below v's lowest set bit (every power of two for the root).
    let limit = if v == 0 {
        p.next_power_of_two()
    } else {
        let low = v & v.wrapping_neg();
        rs.push(Step::new().arrive(abs(v - low), 0, bytes));
        low
    };
    let mut sends = Step::new();
    let mut k = limit >> 1;
    while k >= 1 {
        if v + k < p {
            sends = sends.put(abs(v + k), 0..bytes, 0);
        }
        k >>= 1;
    }
    rs.push(sends);
    rs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_two_steps_and_p_minus_one_messages() {
        for p in 1..=17 {
            for root in [0, p / 2, p - 1] {
                let sched = crate::BcastAlgo::Binomial.schedule(p, root, 8);
                sched.validate().unwrap();
                assert_eq!(sched.totals(), (p - 1, 8 * (p - 1)), "p={p} root={root}");
                assert!(sched.ranks[root].steps.len() <= 1);
                assert!(sched.ranks.iter().all(|r| r.steps.len() <= 2));
            }
        }
    }

    #[test]
    fn largest_subtree_first() {
        // p = 8, root 0: the root puts to 4, 2, 1; rank 4 (subtree 4..8) to 6, 5.
        let to = |rank: usize| -> Vec<usize> {
            build(8, rank, 0, 8)
                .steps
                .last()
                .map(|s| s.puts.iter().map(|p| p.to).collect())
                .unwrap_or_default()
        };
        assert_eq!(to(0), vec![4, 2, 1]);
        assert_eq!(to(4), vec![6, 5]);
        // Root 3: relative rank 1 is rank 4, a leaf.
        let rs = build(8, 4, 3, 8);
        assert_eq!(rs.steps.len(), 1);
        assert!(rs.steps[0].puts.is_empty());
    }
}
