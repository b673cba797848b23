//! Smoke tests of the threads backend: point-to-point, allreduce, panic propagation.

use castack_collectives::{
    AllreduceAlgo, Collectives, CommError, Communicator, Op, PointToPoint, ThreadUniverse,
};

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
