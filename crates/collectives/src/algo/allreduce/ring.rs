//! Ring allreduce (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters
//! of workstations", JPDC 2009; the reduce-scatter + allgather ring of Thakur, Rabenseifner
//! and Gropp, IJHPCA 2005), for any p.
//!
//! The buffer of n elements is split into p blocks of n / p elements, the first n mod p blocks
//! one element longer (zero-length blocks when n < p are not sent). Reduce-scatter: at step
//! s (0 <= s < p - 1) rank r puts block (r - s) mod p to rank r + 1 and reduces block
//! (r - 1 - s) mod p arriving from rank r - 1 into place, so after p - 1 steps rank r holds
//! block (r + 1) mod p reduced over all ranks. Allgather: at step s rank r puts block
//! (r + 1 - s) mod p to r + 1 and receives block (r - s) mod p from r - 1, overwriting.
//!
//! At p = 2 the two rounds of m/2 bytes would move as many bytes as one exchange of the
//! whole buffer at twice the latency (and could not progress between a nonblocking start and
//! finish), so p = 2 is the recursive-doubling exchange (`super::recursive_doubling`).
//!
//! Every block is reduced on exactly one rank (its owner, along the ring) and then only
//! copied, so all ranks hold **bit-identical** results (checked by the registry tests).
//!
//! Cost for m bytes, p >= 3: 2 (p - 1) steps; each rank sends 2 (p - 1) messages of about m / p
//! bytes, 2 (p - 1) m / p bytes per rank and 2 (p - 1) m bytes in total; no scratch.
//! Bandwidth-optimal, latency linear in p: for large m.

use crate::schedule::{Combine, Reduction};
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "ring reduce-scatter + ring allgather, 2(p-1) steps of m/p; large m; bit-identical results";

/// Rank `rank`'s schedule.
pub fn build(p: usize, rank: usize, bytes: usize, red: Reduction) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || bytes == 0 {
        return rs;
    }
    if p == 2 {
        return super::recursive_doubling::build(p, rank, bytes, red);
    }
    let displ = super::element_blocks(bytes, p, red.datatype.size());
    let block = |b: usize| displ[b]..displ[b + 1];
    let right = (rank + 1) % p;
    let left = (rank + p - 1) % p;
    let (reduce, copy) = (Combine::Reduce(red), Combine::Copy);
    for s in 0..p - 1 {
        let send = block((rank + p - s) % p);
        let recv = block((left + p - s) % p);
        rs.push(super::block_step(right, send, left, recv, reduce));
    }
    for s in 0..p - 1 {
        let send = block((rank + 1 + p - s) % p);
        let recv = block((rank + p - s) % p);
        rs.push(super::block_step(right, send, left, recv, copy));
    }
    rs
}

#[cfg(test)]
mod tests {
    use crate::algo::SUM;

    #[test]
    fn two_p_minus_one_steps_of_m_over_p() {
        for p in [3, 5, 8, 17] {
            let bytes = 8 * 1000;
            let sched = crate::AllreduceAlgo::Ring.schedule(p, bytes, SUM);
            sched.validate().unwrap();
            for (r, rs) in sched.ranks.iter().enumerate() {
                assert_eq!(rs.steps.len(), 2 * (p - 1), "p={p} rank {r}");
                assert_eq!(rs.scratch_bytes, 0);
                for st in &rs.steps {
                    assert_eq!((st.puts.len(), st.arrivals.len()), (1, 1));
                    // About m / p: blocks differ by at most one element.
                    let len = st.puts[0].src.len();
                    assert!(len / 8 == 1000 / p || len / 8 == 1000 / p + 1);
                }
            }
            // Every block but one travels p - 1 hops in each phase: 2 (p - 1) m bytes.
            assert_eq!(
                sched.totals(),
                (2 * p * (p - 1), 2 * (p - 1) * bytes),
                "p={p}"
            );
        }
    }

    #[test]
    fn two_ranks_exchange_once() {
        let sched = crate::AllreduceAlgo::Ring.schedule(2, 8 * 7, SUM);
        assert_eq!(
            sched,
            crate::AllreduceAlgo::RecursiveDoubling.schedule(2, 8 * 7, SUM)
        );
        assert!(sched.ranks.iter().all(|rs| rs.steps.len() == 1));
    }

    #[test]
    fn empty_blocks_are_not_sent() {
        // 2 elements over 5 ranks: only blocks 0 and 1 are non-empty.
        let sched = crate::AllreduceAlgo::Ring.schedule(5, 16, SUM);
        sched.validate().unwrap();
        assert_eq!(sched.totals(), (2 * 2 * 4, 2 * 4 * 16));
    }
}
