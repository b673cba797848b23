//! Neighbour-exchange allgatherv (Chen, Zhang, Sun, Xu and Shi, "Performance evaluation of
//! Allgather algorithms on terascale Linux cluster with fast Ethernet", HPC Asia 2005; MPICH's
//! `allgather_neighbor_exchange`), for any p.
//!
//! For even p, ranks pair up alternately with their two ring neighbours: an even rank's
//! first neighbour is r + 1 and its second r - 1, an odd rank's first is r - 1 and its second
//! r + 1. Step 0: each rank swaps its own block with its first neighbour, so the pair
//! (2j, 2j + 1) holds blocks 2j and 2j + 1. Step i (1 <= i < p/2): each rank swaps with
//! neighbour i mod 2 the pair of blocks it received in step i - 1 (its own pair in step 1),
//! and receives two new adjacent blocks. Every message after the first carries two blocks
//! (2j, 2j + 1), one contiguous byte range. p/2 steps in all, half the ring's, each to a
//! nearest neighbour (short paths on a ring or torus).
//!
//! Odd p (the classic form needs even p): the last rank p - 1 is folded in. It first puts its
//! block to rank p - 2; the p - 1 core ranks (an even number) then run the exchange above
//! with rank p - 2's block extended by block p - 1 (adjacent in the buffer, so still one
//! range); finally rank p - 2 puts everything but block p - 1 back to rank p - 1. p = 1 or
//! an empty buffer does nothing; zero-length ranges are not sent.
//!
//! Cost for blocks totalling n bytes: p/2 steps for even p; for odd p, (p - 1)/2 steps plus 2
//! on ranks p - 2 and p - 1. Each core rank sends one message per step ((p - 1) n bytes in
//! total for even p, as for the ring).

use std::ops::Range;

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "p/2 steps alternating between ring neighbours, two blocks per message; odd p folds rank p-1 in";

/// Rank `rank`'s schedule for blocks of `blocks[r]` bytes (`rank < blocks.len()`).
pub fn build(rank: usize, blocks: &[usize]) -> RankSchedule {
    let Some(displ) = super::layout(blocks) else {
        return RankSchedule::default();
    };
    let p = blocks.len();
    // Core ranks: all of them for even p, all but the last (folded in) for odd p.
    let pc = p - p % 2;
    let odd = pc < p;
    // Byte range of core blocks first..end; the last core block absorbs the extra one.
    let range = |first: usize, end: usize| {
        let end = if odd && end == pc { p } else { end };
        displ[first]..displ[end]
    };
    let last = pc - 1;
    // One put of `send` to `to` and one arrival of `recv` from it (empty ranges left out).
    let swap = |to: usize, send: Range<usize>, recv: Range<usize>| {
        super::exchange(
            Step::new(),
            to,
            std::slice::from_ref(&send),
            to,
            std::slice::from_ref(&recv),
        )
    };
    let mut rs = RankSchedule::default();
    if rank == pc {
        rs.push(swap(last, displ[pc]..displ[p], 0..0));
        rs.push(swap(last, 0..0, 0..displ[pc]));
        return rs;
    }
    if odd && rank == last {
        rs.push(swap(pc, 0..0, displ[pc]..displ[p]));
    }
    let even = rank.is_multiple_of(2);
    let neighbor = if even {
        [(rank + 1) % pc, (rank + pc - 1) % pc]
    } else {
        [rank - 1, (rank + 1) % pc]
    };
    let offset: [isize; 2] = if even { [2, -2] } else { [-2, 2] };
    // The first block of the pair received from each neighbour most recently.
    let pair_start = rank - rank % 2;
    let mut recv_from = [pair_start; 2];
    rs.push(swap(
        neighbor[0],
        range(rank, rank + 1),
        range(neighbor[0], neighbor[0] + 1),
    ));
    for i in 1..pc / 2 {
        let ip = i % 2;
        recv_from[ip] = (recv_from[ip] as isize + offset[ip]).rem_euclid(pc as isize) as usize;
        let send_from = recv_from[1 - ip];
        rs.push(swap(
            neighbor[ip],
            range(send_from, send_from + 2),
            range(recv_from[ip], recv_from[ip] + 2),
        ));
    }
    if odd && rank == last {
        rs.push(swap(pc, 0..displ[pc], 0..0));
    }
    rs
}

#[cfg(test)]
mod tests {
    use crate::algo::one_put_one_arrival;

    #[test]
    fn even_p_half_the_steps_one_message_each() {
        for p in [2, 4, 6, 8, 16] {
            let blocks: Vec<usize> = (0..p).map(|r| 8 * (r + 1)).collect();
            let n: usize = blocks.iter().sum();
            let sched = crate::AllgathervAlgo::NeighborExchange.schedule(&blocks);
            sched.validate().unwrap();
            for (r, rs) in sched.ranks.iter().enumerate() {
                assert_eq!(rs.steps.len(), p / 2, "p={p} rank {r}");
                assert!(rs.steps.iter().all(one_put_one_arrival));
                // Nearest neighbours only.
                assert!(rs.steps.iter().all(|s| {
                    let to = s.puts[0].to;
                    to == (r + 1) % p || to == (r + p - 1) % p
                }));
            }
            assert_eq!(sched.totals(), (p * p / 2, (p - 1) * n), "p={p}");
        }
    }

    #[test]
    fn odd_p_folds_the_last_rank_in() {
        for p in [3, 5, 7, 17] {
            let blocks = vec![8; p];
            let sched = crate::AllgathervAlgo::NeighborExchange.schedule(&blocks);
            sched.validate().unwrap();
            let core = (p - 1) / 2;
            for (r, rs) in sched.ranks.iter().enumerate() {
                let want = match r {
                    _ if r == p - 1 => 2,
                    _ if r == p - 2 => core + 2,
                    _ => core,
                };
                assert_eq!(rs.steps.len(), want, "p={p} rank {r}");
            }
            // Core exchange: (p - 1) (p - 1) / 2 messages; fold in and out: 2.
            assert_eq!(sched.totals().0, (p - 1) * core + 2, "p={p}");
        }
    }
}
