//! Neighbour exchanges on the threads backend against a sequential reference computed from
//! the same patterns, for every strategy and ranks {1, 2, 3, 4, 5, 7, 8, 16, 17}; and the
//! collective validation: every invalid pattern gives an error on every rank, never a hang.

use std::sync::mpsc;
use std::time::Duration;

use castack_collectives::{Collectives, Communicator, ThreadUniverse};
use castack_neighbor::{Exchange, ExchangePattern, NeighborError, Side, Strategy};
use proptest::prelude::*;

const RANKS: [usize; 9] = [1, 2, 3, 4, 5, 7, 8, 16, 17];

/// Run `f` on a thread and fail the test if it takes longer than `secs` (a hang).
fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("the run hung (or its closure panicked)")
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// Every rank's pattern and slice lengths.
#[derive(Debug, Clone)]
struct World {
    patterns: Vec<ExchangePattern>,
    src_len: Vec<usize>,
    dst_len: Vec<usize>,
}

/// Each ordered pair (i, j), self pairs included, communicates with probability 0.3, with
/// 0..=4 random (possibly repeated) source indices and distinct random destination slots;
/// list orders shuffled.
fn random_world(p: usize, seed: u64) -> World {
    let mut rng = Rng(seed);
    let src_len: Vec<usize> = (0..p).map(|_| rng.below(8)).collect();
    let mut patterns = vec![ExchangePattern::new(); p];
    let mut incoming: Vec<Vec<(usize, usize)>> = vec![Vec::new(); p]; // (source, count)
    for (i, pattern) in patterns.iter_mut().enumerate() {
        for (j, incoming) in incoming.iter_mut().enumerate() {
            if rng.chance(0.3) {
                let m = if src_len[i] == 0 { 0 } else { rng.below(5) };
                let idx = (0..m).map(|_| rng.below(src_len[i])).collect();
                pattern.sends.push((j, idx));
                incoming.push((i, m));
            }
        }
    }
    let mut dst_len = vec![0; p];
    for (j, incoming) in incoming.iter().enumerate() {
        let total: usize = incoming.iter().map(|&(_, m)| m).sum();
        dst_len[j] = total + rng.below(4);
        let mut slots: Vec<usize> = (0..dst_len[j]).collect();
        rng.shuffle(&mut slots);
        let mut next = 0;
        for &(i, m) in incoming {
            patterns[j].recvs.push((i, slots[next..next + m].to_vec()));
            next += m;
        }
    }
    for pat in &mut patterns {
        rng.shuffle(&mut pat.sends);
        rng.shuffle(&mut pat.recvs);
    }
    World {
        patterns,
        src_len,
        dst_len,
    }
}

/// The periodic 1-D halo: rank r owns `n_r` values at 1..=n_r of a buffer with a ghost cell
/// at each end; its first owned value goes to the left neighbour's right ghost and its last
/// to the right neighbour's left ghost. With p <= 2 both directions share one neighbour
/// (one message of two values), with p = 1 it is a local copy.
fn ring_pattern(r: usize, p: usize, n: usize) -> ExchangePattern {
    fn push(list: &mut Vec<(usize, Vec<usize>)>, peer: usize, i: usize) {
        match list.iter_mut().find(|(q, _)| *q == peer) {
            Some((_, idx)) => idx.push(i),
            None => list.push((peer, vec![i])),
        }
    }
    let (left, right) = ((r + p - 1) % p, (r + 1) % p);
    let mut pat = ExchangePattern::new();
    push(&mut pat.sends, left, 1);
    push(&mut pat.sends, right, n);
    // Same order as the senders: a rank lists its left destination first.
    push(&mut pat.recvs, right, n + 1);
    push(&mut pat.recvs, left, 0);
    pat
}

fn ring_len(r: usize) -> usize {
    1 + r % 3
}

fn src_value(rank: usize, i: usize, round: usize) -> f64 {
    (rank * 1000 + i) as f64 + 0.125 * round as f64
}

fn dst_init(rank: usize, i: usize) -> f64 {
    -((rank * 1000 + i) as f64) - 0.5
}

/// The sequential reference: every destination from the sender's declared indices.
fn reference(world: &World, round: usize) -> Vec<Vec<f64>> {
    let p = world.patterns.len();
    (0..p)
        .map(|j| {
            let mut dst: Vec<f64> = (0..world.dst_len[j]).map(|i| dst_init(j, i)).collect();
            for (i, slots) in &world.patterns[j].recvs {
                let (_, idx) = world.patterns[*i]
                    .sends
                    .iter()
                    .find(|(d, _)| *d == j)
                    .expect("a consistent world");
                for (&slot, &k) in slots.iter().zip(idx) {
                    dst[slot] = src_value(*i, k, round);
                }
            }
            dst
        })
        .collect()
}

/// Run `rounds` exchanges of `world` on `p` thread ranks; per rank the destination slices.
fn run_world(world: &World, strategy: Strategy, rounds: usize, split: bool) -> Vec<Vec<Vec<f64>>> {
    let p = world.patterns.len();
    ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| {
            let r = comm.rank();
            let mut ex = Exchange::new(
                comm,
                world.patterns[r].clone(),
                world.src_len[r],
                world.dst_len[r],
                strategy,
            )
            .unwrap();
            (0..rounds)
                .map(|round| {
                    let src: Vec<f64> = (0..world.src_len[r])
                        .map(|i| src_value(r, i, round))
                        .collect();
                    let mut dst: Vec<f64> = (0..world.dst_len[r]).map(|i| dst_init(r, i)).collect();
                    if split {
                        ex.start(comm, &src).unwrap();
                        // Something collective in between, as a solver would do.
                        let mut x = [1.0];
                        comm.allreduce_sum(&mut x).unwrap();
                        assert_eq!(x[0], p as f64);
                        ex.finish(comm, &mut dst).unwrap();
                    } else {
                        ex.exchange(comm, &src, &mut dst).unwrap();
                    }
                    dst
                })
                .collect()
        })
        .unwrap()
}

fn check_world(world: &World, strategy: Strategy, rounds: usize, split: bool) {
    let got = run_world(world, strategy, rounds, split);
    for round in 0..rounds {
        let want = reference(world, round);
        for (r, per_rank) in got.iter().enumerate() {
            assert_eq!(
                per_rank[round],
                want[r],
                "{strategy}, p = {}, rank {r}, round {round}",
                world.patterns.len()
            );
        }
    }
}

#[test]
fn random_patterns_match_the_sequential_reference() {
    for &strategy in Strategy::ALL {
        for p in RANKS {
            for seed in 0..3 {
                let world = random_world(p, 1000 * p as u64 + seed);
                check_world(&world, strategy, 3, seed == 1);
            }
        }
    }
}

#[test]
fn ring_halo_in_place_and_split_phase() {
    for &strategy in Strategy::ALL {
        for p in RANKS {
            let out = ThreadUniverse::new(p)
                .unwrap()
                .run(|comm| {
                    let (r, p) = (comm.rank(), comm.size());
                    let n = ring_len(r);
                    let mut ex =
                        Exchange::new(comm, ring_pattern(r, p, n), n + 2, n + 2, strategy).unwrap();
                    let mut rounds = Vec::new();
                    for round in 0..4 {
                        let mut u: Vec<f64> = (0..n + 2).map(|i| src_value(r, i, round)).collect();
                        if round % 2 == 0 {
                            ex.exchange_in_place(comm, &mut u).unwrap();
                        } else {
                            ex.start(comm, &u).unwrap();
                            ex.finish(comm, &mut u).unwrap();
                        }
                        rounds.push(u);
                    }
                    (rounds, ex.neighbors(), ex.send_values(), ex.local_values())
                })
                .unwrap();
            for (r, (rounds, neighbors, sent, local)) in out.iter().enumerate() {
                let (left, right) = ((r + p - 1) % p, (r + 1) % p);
                let n = ring_len(r);
                for (round, u) in rounds.iter().enumerate() {
                    assert_eq!(
                        u[0],
                        src_value(left, ring_len(left), round),
                        "p {p} rank {r}"
                    );
                    assert_eq!(u[n + 1], src_value(right, 1, round), "p {p} rank {r}");
                    let owned: Vec<f64> = (1..=n).map(|i| src_value(r, i, round)).collect();
                    assert_eq!(u[1..=n], owned[..]);
                }
                let expect_neighbors = match p {
                    1 => 0,
                    2 => 1,
                    _ => 2,
                };
                assert_eq!(*neighbors, expect_neighbors);
                assert_eq!((*sent, *local), if p == 1 { (0, 2) } else { (2, 0) });
            }
        }
    }
}

#[test]
fn interleaved_exchanges_keep_their_messages_apart() {
    for p in [2, 5, 17] {
        let a = random_world(p, 7);
        let b = random_world(p, 8);
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| {
                let r = comm.rank();
                let mk = |w: &World| {
                    Exchange::new(
                        comm,
                        w.patterns[r].clone(),
                        w.src_len[r],
                        w.dst_len[r],
                        Strategy::Naive,
                    )
                    .unwrap()
                };
                let (mut ea, mut eb) = (mk(&a), mk(&b));
                let src = |w: &World| -> Vec<f64> {
                    (0..w.src_len[r]).map(|i| src_value(r, i, 0)).collect()
                };
                let dst =
                    |w: &World| -> Vec<f64> { (0..w.dst_len[r]).map(|i| dst_init(r, i)).collect() };
                let (mut da, mut db) = (dst(&a), dst(&b));
                ea.start(comm, &src(&a)).unwrap();
                eb.start(comm, &src(&b)).unwrap();
                eb.finish(comm, &mut db).unwrap();
                ea.finish(comm, &mut da).unwrap();
                (da, db)
            })
            .unwrap();
        let (ra, rb) = (reference(&a, 0), reference(&b, 0));
        for (r, (da, db)) in out.iter().enumerate() {
            assert_eq!(da, &ra[r]);
            assert_eq!(db, &rb[r]);
        }
    }
}

#[test]
fn ranks_without_neighbours_still_take_part() {
    // Only ranks 0 and p-1 talk; every rank runs the exchange, then a collective.
    for p in RANKS {
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| {
                let (r, p) = (comm.rank(), comm.size());
                let mut pat = ExchangePattern::new();
                if r == 0 {
                    pat.sends.push((p - 1, vec![0]));
                }
                if r == p - 1 {
                    pat.recvs.push((0, vec![0]));
                }
                let mut ex = Exchange::new(comm, pat, 1, 1, Strategy::Naive).unwrap();
                let mut dst = [-1.0];
                for _ in 0..3 {
                    ex.exchange(comm, &[r as f64 + 10.0], &mut dst).unwrap();
                }
                let mut x = [dst[0]];
                comm.allreduce_sum(&mut x).unwrap();
                (dst[0], x[0])
            })
            .unwrap();
        let total = 10.0 - (p as f64 - 1.0);
        for (r, &(d, x)) in out.iter().enumerate() {
            assert_eq!(d, if r == p - 1 { 10.0 } else { -1.0 }, "p {p}");
            assert_eq!(x, total, "p {p}");
        }
    }
}

/// Build a ring exchange whose pattern `break_it` may alter on some ranks; return every
/// rank's `new` outcome, and check that the communicator is still in step afterwards.
fn build_ring_with(
    p: usize,
    break_it: fn(usize, usize, &mut ExchangePattern) -> (usize, usize),
) -> Vec<Result<(), NeighborError>> {
    within(30, move || {
        ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| {
                let (r, p) = (comm.rank(), comm.size());
                let n = ring_len(r);
                let mut pat = ring_pattern(r, p, n);
                let (src_len, dst_len) = break_it(r, p, &mut pat);
                let built = Exchange::new(
                    comm,
                    pat,
                    src_len.max(n + 2),
                    dst_len.max(n + 2),
                    Strategy::Naive,
                );
                // Every rank agrees, and the collective sequence is still in step.
                let mut ok = [if built.is_ok() { 1 } else { 0 }];
                comm.allreduce_i64(&mut ok, castack_collectives::Op::Sum)
                    .unwrap();
                assert!(
                    ok[0] == 0 || ok[0] == p as i64,
                    "ranks disagree on validity"
                );
                let mut good =
                    Exchange::new(comm, ring_pattern(r, p, n), n + 2, n + 2, Strategy::Naive)
                        .unwrap();
                let mut u = vec![0.0; n + 2];
                good.exchange_in_place(comm, &mut u).unwrap();
                built.map(|_| ())
            })
            .unwrap()
    })
}

#[test]
fn local_errors_are_errors_on_every_rank() {
    for p in [2, 3, 4, 7, 17] {
        // Out-of-range neighbour on the last rank.
        let out = build_ring_with(p, |r, p, pat| {
            if r == p - 1 {
                pat.sends.push((p + 3, vec![]));
            }
            (0, 0)
        });
        for (r, e) in out.iter().enumerate() {
            if r == p - 1 {
                assert_eq!(
                    e,
                    &Err(NeighborError::NeighborOutOfRange {
                        rank: r,
                        side: Side::Send,
                        neighbor: p + 3,
                        size: p
                    })
                );
            } else {
                assert_eq!(
                    e,
                    &Err(NeighborError::PeerInvalid {
                        rank: r,
                        peer: p - 1
                    })
                );
            }
        }
        // Send index out of range on rank 0.
        let out = build_ring_with(p, |r, _, pat| {
            if r == 0 {
                pat.sends[0].1.push(99);
            }
            (0, 0)
        });
        assert!(matches!(
            out[0],
            Err(NeighborError::IndexOutOfRange {
                rank: 0,
                side: Side::Send,
                index: 99,
                ..
            })
        ));
        assert!(out[1..]
            .iter()
            .all(|e| matches!(e, Err(NeighborError::PeerInvalid { peer: 0, .. }))));
        // Destination index written twice on rank 1 (its left ghost also receives into 1).
        let out = build_ring_with(p, |r, _, pat| {
            if r == 1 {
                let first = pat.recvs[0].1[0];
                let last = pat.recvs.len() - 1;
                if let Some(i) = pat.recvs[last].1.last_mut() {
                    *i = first;
                }
            }
            (0, 0)
        });
        assert!(
            matches!(
                out[1],
                Err(NeighborError::DuplicateDestination { rank: 1, .. })
            ),
            "{out:?}"
        );
        assert!(out
            .iter()
            .enumerate()
            .all(|(r, e)| r == 1 || matches!(e, Err(NeighborError::PeerInvalid { peer: 1, .. }))));
    }
}

#[test]
fn one_sided_declarations_are_errors_on_every_rank() {
    // Rank 2 is no ring neighbour of rank 0 from 4 ranks on.
    for p in [4, 5, 8, 16, 17] {
        // Rank 0 sends 3 values to rank 2, which does not expect them.
        let out = build_ring_with(p, |r, _, pat| {
            if r == 0 {
                pat.sends.push((2, vec![1, 1, 1]));
            }
            (0, 0)
        });
        let want = NeighborError::UnmatchedSend {
            sender: 0,
            receiver: 2,
            values: 3,
        };
        assert!(
            out.iter().all(|e| e == &Err(want.clone())),
            "p {p}: {out:?}"
        );
        // Rank 2 expects 2 values from rank 0, which sends none.
        let out = build_ring_with(p, |r, _, pat| {
            if r == 2 {
                pat.recvs.push((0, vec![5, 6]));
            }
            (0, 8)
        });
        let want = NeighborError::UnmatchedRecv {
            sender: 0,
            receiver: 2,
            values: 2,
        };
        assert!(
            out.iter().all(|e| e == &Err(want.clone())),
            "p {p}: {out:?}"
        );
        // Ranks 0 and 1 both send to rank 3 unexpectedly (not a neighbour of either).
        if p >= 5 {
            let out = build_ring_with(p, |r, _, pat| {
                if r <= 1 {
                    pat.sends.push((3, vec![1]));
                }
                (0, 0)
            });
            let want = NeighborError::UnmatchedDeclarations {
                receiver: 3,
                excess: 2,
            };
            assert!(
                out.iter().all(|e| e == &Err(want.clone())),
                "p {p}: {out:?}"
            );
        }
    }
    // Rank 0 sends to rank 1, which does not expect it (drops its receive from 0).
    for p in [2, 3, 4, 5, 7, 8, 16, 17] {
        let out = build_ring_with(p, |r, _, pat| {
            if r == 1 {
                pat.recvs.retain(|(s, _)| *s != 0);
            }
            (0, 0)
        });
        let values = if p == 2 { 2 } else { 1 };
        let want = NeighborError::UnmatchedSend {
            sender: 0,
            receiver: 1,
            values,
        };
        assert!(
            out.iter().all(|e| e == &Err(want.clone())),
            "p {p}: {out:?}"
        );
    }
}

#[test]
fn count_mismatch_is_an_error_on_every_rank() {
    for p in [2, 3, 5, 17] {
        // Rank 1 expects one more value from its left neighbour than it sends.
        let out = build_ring_with(p, |r, p, pat| {
            if r == 1 {
                let from_left = pat.recvs.iter_mut().find(|(s, _)| *s == 0).unwrap();
                from_left.1.push(4);
            }
            let _ = p;
            (0, 5)
        });
        let sent = if p == 2 { 2 } else { 1 };
        let want = NeighborError::CountMismatch {
            sender: 0,
            receiver: 1,
            sent,
            expected: sent + 1,
        };
        assert!(
            out.iter().all(|e| e == &Err(want.clone())),
            "p {p}: {out:?}"
        );
        assert!(want.to_string().contains("rank 0 sends"));
    }
}

#[test]
fn zero_length_messages_and_empty_slices() {
    for p in RANKS {
        let out = within(30, move || {
            ThreadUniverse::new(p)
                .unwrap()
                .run(|comm| {
                    let (r, p) = (comm.rank(), comm.size());
                    let pat = ExchangePattern {
                        sends: vec![((r + 1) % p, vec![])],
                        recvs: vec![((r + p - 1) % p, vec![])],
                    };
                    let mut ex = Exchange::new(comm, pat, 0, 0, Strategy::Naive).unwrap();
                    for _ in 0..3 {
                        ex.exchange(comm, &[], &mut []).unwrap();
                    }
                    (ex.send_messages(), ex.send_values())
                })
                .unwrap()
        });
        let msgs = if p == 1 { 0 } else { 1 };
        assert!(out.iter().all(|&m| m == (msgs, 0)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_seeded_world_matches_the_reference(p in 1usize..7, seed in any::<u64>(), split in any::<bool>()) {
        let world = random_world(p, seed);
        check_world(&world, Strategy::Naive, 2, split);
    }
}
