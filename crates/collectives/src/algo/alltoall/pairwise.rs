//! Pairwise-exchange alltoall (`MPIR_Alltoall_intra_pairwise` in MPICH; Thakur, Rabenseifner
//! and Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005,
//! section 4.5), for any p.
//!
//! p - 1 steps. At step s (1 <= s < p) a rank puts its block for `to` and receives the block
//! from `from`: when p is a power of two `to = from = rank xor s` (a true pairwise exchange,
//! each pair of ranks talks in exactly one step), otherwise `to = (rank + s) mod p` and
//! `from = (rank - s) mod p`. Blocks arrive in scratch at their final offsets; one last local
//! step copies them into the buffer (two copies around the own block, which never moves).
//!
//! Cost for blocks of b bytes: p - 1 steps (plus one local copy step); each rank sends p - 1
//! messages of b bytes: p (p - 1) messages and p (p - 1) b bytes in total, each byte sent
//! once. Bandwidth-optimal, latency linear in p; p * b scratch bytes per rank.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "p-1 steps, one block to rank xor s (power of two) or rank+s; each byte sent once";

/// Rank `rank`'s schedule (`rank < p`).
pub fn build(p: usize, rank: usize, block: usize) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || block == 0 {
        return rs;
    }
    let total = p * block;
    rs.scratch_bytes = total;
    let slot = |r: usize| r * block..(r + 1) * block;
    for s in 1..p {
        let (to, from) = if p.is_power_of_two() {
            (rank ^ s, rank ^ s)
        } else {
            ((rank + s) % p, (rank + p - s) % p)
        };
        rs.push(Step::new().put(to, slot(to), total + rank * block).arrive(
            from,
            total + from * block,
            block,
        ));
    }
    let mut done = Step::new();
    if rank > 0 {
        done = done.copy(total..total + rank * block, 0);
    }
    if rank + 1 < p {
        done = done.copy(total + (rank + 1) * block..2 * total, (rank + 1) * block);
    }
    rs.push(done);
    rs
}

#[cfg(test)]
mod tests {
    #[test]
    fn p_minus_one_exchange_steps() {
        for p in 1..=17 {
            let sched = crate::AlltoallAlgo::Pairwise.schedule(p, 8);
            sched.validate().unwrap();
            assert_eq!(sched.totals(), (p * (p - 1), 8 * p * (p - 1)), "p={p}");
            let steps = if p == 1 { 0 } else { p };
            assert!(sched.ranks.iter().all(|r| r.steps.len() == steps));
        }
    }

    #[test]
    fn power_of_two_partners_are_symmetric() {
        let rs = super::build(8, 5, 8);
        let partners: Vec<_> = rs.steps[..7].iter().map(|s| s.puts[0].to).collect();
        assert_eq!(partners, vec![4, 7, 6, 1, 0, 3, 2]);
        assert!(rs.steps[..7]
            .iter()
            .all(|s| s.puts[0].to == s.arrivals[0].from));
    }
}
