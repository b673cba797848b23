//! Smoke tests of the threads backend: point-to-point, allreduce, panic propagation,
//! deadlock detection.

use castack_collectives::sim::{SimOptions, SimUniverse};
use castack_collectives::{
    AllreduceAlgo, Collectives, CommError, Communicator, Op, PointToPoint, ThreadUniverse,
};
use castack_test_support::watchdog::watchdog;

#[test]
fn ring_pass_of_bytes() {
    for p in [1, 2, 3, 7] {
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|c| {
                let r = c.rank();
                let n = c.size();
                c.send((r + 1) % n, 5, &[r as u8; 3]).unwrap();
                let mut b = [0u8; 3];
                c.recv((r + n - 1) % n, 5, &mut b).unwrap();
                b[0] as usize
            })
            .unwrap();
        for (r, got) in out.iter().enumerate() {
            assert_eq!(*got, (r + p - 1) % p);
        }
    }
}

#[test]
fn allreduce_matches_sequential_and_rd_is_bit_identical() {
    for &algo in AllreduceAlgo::ALL {
        for p in [1, 2, 3, 5, 8, 17] {
            let len = 13;
            let input = |r: usize, i: usize| ((r * 31 + i * 7) % 11) as f64 * 0.1 + 1e-3 * r as f64;
            let out = ThreadUniverse::new(p)
                .unwrap()
                .run(|c| {
                    let mut x: Vec<f64> = (0..len).map(|i| input(c.rank(), i)).collect();
                    c.allreduce_f64_with(&mut x, Op::Sum, algo).unwrap();
                    x
                })
                .unwrap();
            for i in 0..len {
                let reference: f64 = (0..p).map(|r| input(r, i)).sum();
                for x in &out {
                    assert!((x[i] - reference).abs() <= 1e-12 * p as f64, "{algo} p={p}");
                }
            }
            if algo.bit_identical() {
                assert!(out.iter().all(|x| x
                    .iter()
                    .zip(&out[0])
                    .all(|(a, b)| a.to_bits() == b.to_bits())));
            }
            algo.schedule(
                p,
                len * 8,
                castack_collectives::Reduction {
                    op: Op::Sum,
                    datatype: castack_collectives::Datatype::F64,
                },
            )
            .validate()
            .unwrap();
        }
    }
}

#[test]
fn a_panicking_rank_does_not_hang_the_others() {
    let err = ThreadUniverse::new(4)
        .unwrap()
        .run(|c| {
            if c.rank() == 2 {
                panic!("rank two fails");
            }
            let mut x = [1.0];
            // The others block in a collective that rank 2 never joins.
            c.allreduce_sum(&mut x)
        })
        .unwrap_err();
    assert_eq!(
        err,
        CommError::RankPanicked {
            rank: 2,
            message: "rank two fails".into()
        }
    );
}

#[test]
fn zero_ranks_is_an_error() {
    assert_eq!(ThreadUniverse::new(0).unwrap_err(), CommError::NoRanks);
}

#[test]
fn a_rank_that_returns_early_does_not_hang_the_others() {
    // Rank 1 "fails" locally and returns before a collective the others enter.
    let out = ThreadUniverse::new(5)
        .unwrap()
        .run(|c| {
            if c.rank() == 1 {
                return Err(CommError::InvalidArgument("local failure".into()));
            }
            let mut x = [1.0];
            c.allreduce_sum(&mut x)
        })
        .unwrap();
    assert!(matches!(out[1], Err(CommError::InvalidArgument(_))));
    // Every other rank gets an error, none hangs (recursive doubling: 0, 2, 3 and 4 all
    // depend on rank 1 directly or through a partner that gives up).
    for (r, o) in out.iter().enumerate() {
        assert!(o.is_err(), "rank {r} returned {o:?}");
    }
}

#[test]
fn nonblocking_f64_exchange_with_zero_length_messages() {
    for p in [1, 2, 3, 17] {
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|c| {
                let (r, n) = (c.rank(), c.size());
                let right = (r + 1) % n;
                let left = (r + n - 1) % n;
                let data = vec![r as f64; r % 3];
                let s = c.isend_f64(right, 9, &data).unwrap();
                let e = c.isend_f64(right, 10, &[]).unwrap();
                let rq = c.irecv(left, 9).unwrap();
                let re = c.irecv(left, 10).unwrap();
                let mut got = vec![0.0; left % 3];
                c.wait_recv_f64(rq, &mut got).unwrap();
                c.wait_recv_f64(re, &mut []).unwrap();
                c.wait_send(s).unwrap();
                c.wait_send(e).unwrap();
                got
            })
            .unwrap();
        for (r, got) in out.iter().enumerate() {
            let left = (r + p - 1) % p;
            assert_eq!(got, &vec![left as f64; left % 3]);
        }
    }
}

/// Bytes of message `i` from `from`: its length crosses the inline slot size (96 bytes).
fn message(from: usize, i: usize) -> Vec<u8> {
    (0..(i * 7) % 200)
        .map(|j| (from * 31 + i * 7 + j) as u8)
        .collect()
}

#[test]
fn many_messages_in_flight_match_by_source_and_tag_in_any_receive_order() {
    // 100 messages per pair outrun a channel's ring, so some go through its overflow queue;
    // receives by tag in reverse order set the others aside; with 17 ranks on this machine's
    // cores receivers park and are woken.
    const N: usize = 100;
    for p in [2, 3, 17] {
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|c| {
                let (r, n) = (c.rank(), c.size());
                let (right, left) = ((r + 1) % n, (r + n - 1) % n);
                for i in 0..N {
                    c.send(right, i as u64, &message(r, i)).unwrap();
                }
                let mut wrong = Vec::new();
                for i in (0..N).rev() {
                    let want = message(left, i);
                    let mut got = vec![0u8; want.len()];
                    c.recv(left, i as u64, &mut got).unwrap();
                    if got != want {
                        wrong.push(i);
                    }
                }
                // Same tag twice: received in the order sent.
                c.send(right, 7, &[1]).unwrap();
                c.send(right, 7, &[2, 2]).unwrap();
                let (mut a, mut b) = ([0u8; 1], [0u8; 2]);
                c.recv(left, 7, &mut a).unwrap();
                c.recv(left, 7, &mut b).unwrap();
                (wrong, a, b)
            })
            .unwrap();
        for (r, (wrong, a, b)) in out.into_iter().enumerate() {
            assert!(wrong.is_empty(), "p {p} rank {r}: wrong messages {wrong:?}");
            assert_eq!((a, b), ([1], [2, 2]), "p {p} rank {r}: same-tag order");
        }
    }
}

#[test]
fn a_receiver_parked_long_is_woken_by_the_send() {
    // Rank 1 waits while rank 0 sleeps well past every spin and yield phase, so rank 1 parks
    // and the message must reach a parked rank. (Wake-up latency is a benchmark matter: a
    // lost wake-up would still end at the park's timeout.)
    let out = ThreadUniverse::new(2)
        .unwrap()
        .run(|c| {
            if c.rank() == 0 {
                std::thread::sleep(std::time::Duration::from_millis(50));
                c.send(1, 3, &[42]).unwrap();
                0
            } else {
                let mut b = [0u8];
                c.recv(0, 3, &mut b).unwrap();
                b[0]
            }
        })
        .unwrap();
    assert_eq!(out, [0, 42]);
}

#[test]
fn crossed_receives_are_a_deadlock_error_not_a_hang() {
    // Both ranks receive before they send: no message can ever arrive. On `threads` and on
    // `sim` (which shares the rank machinery).
    fn crossed<C: Communicator>(c: &C) -> Result<(), CommError> {
        let peer = 1 - c.rank();
        let mut b = [0u8; 4];
        c.recv(peer, 3, &mut b)?;
        c.send(peer, 3, &b)
    }
    let threads = watchdog("crossed receives", || {
        ThreadUniverse::new(2).unwrap().run(crossed).unwrap()
    });
    let sim = watchdog("crossed receives on sim", || {
        let fabric = castack_collectives::fabric_sim::Fabric::preset("peach2").unwrap();
        SimUniverse::new(2, fabric, SimOptions::default())
            .unwrap()
            .run(crossed)
            .unwrap()
    });
    for out in [threads, sim] {
        for (rank, o) in out.into_iter().enumerate() {
            assert_eq!(
                o,
                Err(CommError::Deadlock {
                    rank,
                    peer: 1 - rank,
                    tag: 3
                })
            );
        }
    }
}

#[test]
fn a_receive_nobody_sends_deadlocks_a_collective() {
    // Rank 2 waits for a message rank 0 never sends, instead of joining the allreduce the
    // others wait in: every rank gets a deadlock error naming its own wait.
    let out = watchdog("receive without a send", || {
        ThreadUniverse::new(3)
            .unwrap()
            .run(|c| {
                if c.rank() == 2 {
                    let mut b = [0u8; 8];
                    return c.recv(0, 7, &mut b);
                }
                let mut x = [1.0];
                c.allreduce_sum(&mut x)
            })
            .unwrap()
    });
    assert_eq!(
        out[2],
        Err(CommError::Deadlock {
            rank: 2,
            peer: 0,
            tag: 7
        })
    );
    for (r, o) in out.iter().enumerate().take(2) {
        assert!(
            matches!(o, Err(CommError::Deadlock { rank, .. }) if *rank == r),
            "rank {r}: {o:?}"
        );
    }
}

#[test]
fn finished_ranks_do_not_count_in_a_deadlock() {
    // Rank 3 finishes at once (nobody waits for it); ranks 0, 1, 2 each receive from the
    // next before sending: a cycle of waits among the ranks still running.
    let out = watchdog("cycle of receives", || {
        ThreadUniverse::new(4)
            .unwrap()
            .run(|c| {
                let r = c.rank();
                if r == 3 {
                    return Ok(());
                }
                let mut b = [0u8; 1];
                c.recv((r + 1) % 3, 1, &mut b)?;
                c.send((r + 2) % 3, 1, &b)
            })
            .unwrap()
    });
    assert_eq!(out[3], Ok(()));
    for (rank, o) in out.into_iter().enumerate().take(3) {
        assert_eq!(
            o,
            Err(CommError::Deadlock {
                rank,
                peer: (rank + 1) % 3,
                tag: 1
            })
        );
    }
}

#[test]
fn a_slow_rank_is_not_a_deadlock() {
    // The others park (and time out several times) while rank 0 computes: a rank that is
    // not waiting in a receive can still send, so nothing is declared.
    for p in [2, 3, 9] {
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|c| {
                if c.rank() == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(120));
                }
                let mut x = [c.rank() as f64];
                c.allreduce_sum(&mut x)?;
                Ok::<_, CommError>(x[0])
            })
            .unwrap();
        let want = (p * (p - 1) / 2) as f64;
        assert!(out.iter().all(|o| *o == Ok(want)), "p {p}: {out:?}");
    }
}
