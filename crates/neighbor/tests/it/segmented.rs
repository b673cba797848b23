//! Every strategy and mode delivers exactly the bytes of the naive exchange, and the values
//! an independent reference predicts, for N in 1..=12 neighbours and C in 1..=6 devices
//! (all 72 pairs with cheap sizes, a deterministic subset with 4096 values, a segmented
//! case with 1M+3 values, sizes that no segment count divides); messages of different
//! sizes per neighbour; duplicate neighbours (a periodic ring of 1 or 2 ranks); and the
//! modeled schedules of all ranks form one consistent `Schedule`.
//!
//! Sizes are in `f64` values (8 bytes each): the exchange moves `f64`s, and segments are
//! cut on value boundaries.

use castack_collectives::schedule::Schedule;
use castack_collectives::{Communicator, ThreadUniverse};
use castack_neighbor::{Exchange, ExchangePattern, Mode, Strategy};

/// The value rank `r` sends as its `k`-th value to its `d`-th destination: exact in f64 and
/// distinct for every (r, d, k) in these tests.
fn value(r: usize, dest: usize, k: usize) -> f64 {
    ((r * 64 + dest) * (1 << 22) + k) as f64 + 0.25
}

/// N + 1 ranks, every rank the neighbour of every other one (N distinct neighbours), the
/// message to `j` holding `size(r, j)` values. Source layout: messages end to end; the
/// destination: messages from each source in source-rank order.
fn all_pairs(r: usize, p: usize, size: &Size) -> (ExchangePattern, usize, usize) {
    let mut pat = ExchangePattern::new();
    let mut src_len = 0;
    // Declare destinations in a rank-dependent rotated order, so positions differ per rank.
    for d in 1..p {
        let j = (r + d) % p;
        let m = size(r, j);
        pat.sends.push((j, (src_len..src_len + m).collect()));
        src_len += m;
    }
    let mut dst_len = 0;
    for s in (0..p).filter(|&s| s != r) {
        let m = size(s, r);
        pat.recvs.push((s, (dst_len..dst_len + m).collect()));
        dst_len += m;
    }
    (pat, src_len, dst_len)
}

/// Source slice of rank `r`: the values of `value`, message by message.
fn source(r: usize, p: usize, size: &Size) -> Vec<f64> {
    let mut v = Vec::new();
    for d in 1..p {
        let j = (r + d) % p;
        v.extend((0..size(r, j)).map(|k| value(r, j, k)));
    }
    v
}

/// What rank `r` must hold after the exchange: independent of any strategy.
fn expected(r: usize, p: usize, size: &Size) -> Vec<f64> {
    let mut v = Vec::new();
    for s in (0..p).filter(|&s| s != r) {
        v.extend((0..size(s, r)).map(|k| value(s, r, k)));
    }
    v
}

type Size = dyn Fn(usize, usize) -> usize + Sync;

/// In one universe of `p` ranks, for every size function: run two exchanges (the second
/// with fresh data) with naive and with `segmented` in both modes, check each against the
/// reference and against naive bit for bit, and check that the ranks' modeled schedules
/// form one consistent `Schedule`.
fn check_all(p: usize, segmented: Strategy, sizes: &[&Size]) {
    let runs: Vec<(Strategy, Mode)> = std::iter::once((Strategy::Naive, Mode::TwoSided))
        .chain(Mode::ALL.iter().map(|&m| (segmented, m)))
        .collect();
    let out = ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| {
            let r = comm.rank();
            let mut per_size = Vec::new();
            for size in sizes {
                let mut naive_bits: Vec<u64> = Vec::new();
                let mut scheds = Vec::new();
                for &(strategy, mode) in &runs {
                    let (pat, src_len, dst_len) = all_pairs(r, p, *size);
                    let mut ex =
                        Exchange::with_mode(comm, pat, src_len, dst_len, strategy, mode).unwrap();
                    let src = source(r, p, *size);
                    let mut dst = vec![-1.0; dst_len];
                    ex.exchange(comm, &vec![0.5; src_len], &mut dst).unwrap();
                    ex.start(comm, &src).unwrap();
                    ex.finish(comm, &mut dst).unwrap();
                    assert!(
                        dst == expected(r, p, *size),
                        "rank {r} {strategy:?} {mode:?}"
                    );
                    let bits: Vec<u64> = dst.iter().map(|x| x.to_bits()).collect();
                    if strategy == Strategy::Naive {
                        naive_bits = bits;
                    } else {
                        assert!(bits == naive_bits, "rank {r} {strategy:?} {mode:?}");
                    }
                    scheds.push((ex.rank_schedule().clone(), 8 * dst_len));
                }
                per_size.push(scheds);
            }
            per_size
        })
        .unwrap();
    for k in 0..sizes.len() {
        for (i, run) in runs.iter().enumerate() {
            let mut sched = Schedule::new(out.iter().map(|o| o[k][i].1).collect());
            for (r, o) in out.iter().enumerate() {
                sched.ranks[r] = o[k][i].0.clone();
            }
            sched
                .validate()
                .unwrap_or_else(|e| panic!("{run:?} p={p}: {e}"));
        }
    }
}

fn check(n: usize, c: usize, sizes: &[&Size]) {
    check_all(n + 1, Strategy::Segmented { devices: c }, sizes);
}

#[test]
fn every_n_and_c_with_small_sizes() {
    for n in 1..=12 {
        for c in 1..=6 {
            // Cheap sizes for every pair; 4096 for a deterministic third of them.
            let small: [&Size; 3] = [&|_, _| 0, &|_, _| 1, &|_, _| 7];
            let with_4096: [&Size; 4] = [&|_, _| 0, &|_, _| 1, &|_, _| 7, &|_, _| 4096];
            if (n + c) % 3 == 0 {
                check(n, c, &with_4096);
            } else {
                check(n, c, &small);
            }
        }
    }
}

#[test]
fn one_mebi_plus_three_values() {
    // C' = 2, not dividing 1M+3 (larger N x 8 MB cases cost seconds of page faults).
    check(3, 2, &[&|_, _| (1 << 20) + 3]);
}

#[test]
fn different_sizes_per_neighbour() {
    for (n, c) in [(5, 4), (6, 4), (7, 3), (9, 6)] {
        check(n, c, &[&|s, r| (s * 7 + r * 3) % 11]);
    }
}

#[test]
fn duplicate_neighbours_on_periodic_rings_of_one_and_two_ranks() {
    // A periodic 1-D ring with ghost width 2: left ghosts [0, 1], owned [2, 3, 4], right
    // ghosts [5, 6]. With one rank both neighbours are the rank itself (a local copy); with
    // two ranks both neighbours are the other rank (one merged list per direction).
    for p in [1, 2, 3] {
        for &strategy in &[
            Strategy::Naive,
            Strategy::Segmented { devices: 2 },
            Strategy::Segmented { devices: 1 },
        ] {
            let got = ThreadUniverse::new(p)
                .unwrap()
                .run(|comm| {
                    let (r, p) = (comm.rank(), comm.size());
                    let (left, right) = ((r + p - 1) % p, (r + 1) % p);
                    let mut sends: Vec<(usize, Vec<usize>)> = vec![(left, vec![2, 3])];
                    let mut recvs: Vec<(usize, Vec<usize>)> = vec![(right, vec![5, 6])];
                    // To the right: the last two owned; from the left: the left ghosts.
                    if let Some(e) = sends.iter_mut().find(|e| e.0 == right) {
                        e.1.extend([3, 4]);
                    } else {
                        sends.push((right, vec![3, 4]));
                    }
                    if let Some(e) = recvs.iter_mut().find(|e| e.0 == left) {
                        e.1.extend([0, 1]);
                    } else {
                        recvs.push((left, vec![0, 1]));
                    }
                    let pat = ExchangePattern { sends, recvs };
                    let mut ex = Exchange::new(comm, pat, 7, 7, strategy).unwrap();
                    let mut buf = [0.0; 7];
                    for (k, x) in buf[2..5].iter_mut().enumerate() {
                        *x = (10 * r + k) as f64;
                    }
                    ex.exchange_in_place(comm, &mut buf).unwrap();
                    buf
                })
                .unwrap();
            for (r, buf) in got.iter().enumerate() {
                let (left, right) = ((r + p - 1) % p, (r + 1) % p);
                let own = |q: usize, k: usize| (10 * q + k) as f64;
                assert_eq!(
                    buf,
                    &[
                        own(left, 1),
                        own(left, 2),
                        own(r, 0),
                        own(r, 1),
                        own(r, 2),
                        own(right, 0),
                        own(right, 1)
                    ],
                    "p={p} {strategy:?}"
                );
            }
        }
    }
}

#[test]
fn segmented_takes_n_prime_steps_of_c_pieces() {
    let steps = ThreadUniverse::new(7)
        .unwrap()
        .run(|comm| {
            let r = comm.rank();
            let size = |_: usize, _: usize| 10;
            let (pat, s, d) = all_pairs(r, 7, &size);
            let ex =
                Exchange::new(comm, pat.clone(), s, d, Strategy::Segmented { devices: 4 }).unwrap();
            let naive = Exchange::new(comm, pat, s, d, Strategy::Naive).unwrap();
            (
                ex.steps(),
                ex.send_pieces(),
                naive.steps(),
                naive.send_pieces(),
            )
        })
        .unwrap();
    // N = 6, C = 4: k = 2, N' = 3 steps, C' = 2 pieces per message.
    assert!(steps.iter().all(|&s| s == (3, 12, 1, 6)), "{steps:?}");
}
