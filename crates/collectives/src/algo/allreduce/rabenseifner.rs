//! Rabenseifner's allreduce: reduce-scatter by recursive halving, then allgather by recursive
//! doubling (Rabenseifner, "Optimization of collective reduction operations", ICCS 2004;
//! Thakur, Rabenseifner and Gropp, "Optimization of collective communication operations in
//! MPICH", IJHPCA 2005, section 4.5), for any p.
//!
//! Let q be the largest power of two `<= p` and e = p - q. First the e extra ranks r >= q
//! put their buffers to r - q, which reduce them in (as in recursive doubling). The buffer of
//! n elements is split into q blocks of n / q elements, the first n mod q blocks one element
//! longer (uneven splits; zero-length ranges are not sent). Reduce-scatter, distances
//! d = q/2, q/4, ..., 1: core rank c holds the aligned window of 2d blocks that contains
//! block c; it puts the half of the window that does not contain block c to partner c xor d
//! and reduces the partner's copy of its own half into place. After log2 q steps rank c holds
//! block c reduced over all ranks. Allgather, d = 1, 2, ..., q/2: c and c xor d swap their
//! windows of d finished blocks (one contiguous range each), overwriting. Finally core rank
//! c < e puts the result to c + q.
//!
//! When q = 2 (p = 2, 3) the two core rounds of m/2 bytes would move as many bytes as one
//! exchange of the whole buffer at twice the latency (and could not progress between a
//! nonblocking start and finish), so those p use recursive doubling
//! (`super::recursive_doubling`), whose fold is the same.
//!
//! Every element is reduced along one binomial tree ending at the owner of its block and is
//! only copied afterwards, so all ranks hold **bit-identical** results (checked by the
//! registry tests).
//!
//! Cost for m bytes, q >= 4: 2 log2 q steps, plus 2 when e > 0; each core rank sends 2 log2 q
//! messages, of m/2, m/4, ..., m/q bytes and back, 2 m (q - 1) / q bytes (plus m when it
//! serves an extra rank); 2 m (q - 1) + 2 e m bytes in total. Bandwidth near the ring's with
//! logarithmic latency: for large m.

use crate::schedule::{Combine, Reduction};
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "recursive-halving reduce-scatter + recursive-doubling allgather; extra ranks folded in; bit-identical";

/// Rank `rank`'s schedule.
pub fn build(p: usize, rank: usize, bytes: usize, red: Reduction) -> RankSchedule {
    if p > 1 && super::super::pof2_floor(p) == 2 {
        return super::recursive_doubling::build(p, rank, bytes, red);
    }
    super::folded(p, rank, bytes, red, |rs, q| {
        let displ = super::element_blocks(bytes, q, red.datatype.size());
        // Byte range of the aligned window of `d` blocks that contains block `c`.
        let window = |c: usize, d: usize| {
            let lo = c & !(d - 1);
            displ[lo]..displ[lo + d]
        };
        let (reduce, copy) = (Combine::Reduce(red), Combine::Copy);
        let mut d = q / 2;
        while d >= 1 {
            let partner = rank ^ d;
            let (send, keep) = (window(partner, d), window(rank, d));
            rs.push(super::block_step(partner, send, partner, keep, reduce));
            d >>= 1;
        }
        let mut d = 1;
        while d < q {
            let partner = rank ^ d;
            let (send, recv) = (window(rank, d), window(partner, d));
            rs.push(super::block_step(partner, send, partner, recv, copy));
            d <<= 1;
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::algo::SUM;

    #[test]
    fn power_of_two_halves_then_doubles() {
        // p = 8, m = 8 * 1024 bytes: 6 steps per rank, messages of m/2, m/4, m/8, then back.
        let m = 8 * 1024;
        let sched = crate::AllreduceAlgo::Rabenseifner.schedule(8, m, SUM);
        sched.validate().unwrap();
        for rs in &sched.ranks {
            let lens: Vec<usize> = rs
                .steps
                .iter()
                .map(|s| {
                    assert_eq!((s.puts.len(), s.arrivals.len()), (1, 1));
                    s.puts[0].src.len()
                })
                .collect();
            assert_eq!(lens, [m / 2, m / 4, m / 8, m / 8, m / 4, m / 2]);
        }
        // 2 m (q - 1) bytes in total.
        assert_eq!(sched.totals(), (8 * 6, 2 * m * 7));
    }

    #[test]
    fn extra_ranks_fold_in_and_out() {
        // p = 7: q = 4, e = 3; uneven split of 1001 elements over 4 blocks.
        let m = 8 * 1001;
        let sched = crate::AllreduceAlgo::Rabenseifner.schedule(7, m, SUM);
        sched.validate().unwrap();
        for (r, rs) in sched.ranks.iter().enumerate() {
            let want = match r {
                0..=2 => 2 * 2 + 2,
                3 => 2 * 2,
                _ => 2,
            };
            assert_eq!(rs.steps.len(), want, "rank {r}");
        }
        assert_eq!(sched.totals(), (4 * 4 + 2 * 3, 2 * m * 3 + 2 * 3 * m));
    }

    #[test]
    fn two_core_ranks_exchange_once() {
        for p in [2, 3] {
            let sched = crate::AllreduceAlgo::Rabenseifner.schedule(p, 8 * 7, SUM);
            let rd = crate::AllreduceAlgo::RecursiveDoubling.schedule(p, 8 * 7, SUM);
            assert_eq!(sched, rd, "p={p}");
        }
    }

    #[test]
    fn fewer_elements_than_blocks() {
        // 3 elements over q = 16: most windows are empty and are not sent.
        for p in [16, 17] {
            let sched = crate::AllreduceAlgo::Rabenseifner.schedule(p, 24, SUM);
            sched.validate().unwrap();
            for st in sched.ranks.iter().flat_map(|rs| &rs.steps) {
                assert!(st.puts.len() <= 1 && st.puts.iter().all(|x| !x.src.is_empty()));
            }
        }
    }
}
