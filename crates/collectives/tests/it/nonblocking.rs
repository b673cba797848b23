//! The nonblocking (split-phase) allreduce: `PersistentCollective::start_f64` ...
//! `finish_f64` and `Collectives::immediate_allreduce_*`. Results must be bit-identical to
//! the blocking allreduce for EVERY algorithm of the registry; other collectives and
//! point-to-point traffic may run between start and finish; `start` really posts the first
//! puts (a schedule that only progressed in `finish` deadlocks the progress test).

use castack_collectives::{
    AllreduceAlgo, Collectives, CommError, Communicator, Op, PersistentCollective, PointToPoint,
};
use castack_test_support::collectives::SeededRng;

use crate::common::run_ranks;

const RANKS: &[usize] = &[1, 2, 3, 5, 8, 17];
const LENS: &[usize] = &[0, 1, 7, 1000];
const OPS: &[Op] = &[Op::Sum, Op::Max, Op::Min];

fn input(case: u64, p: usize, len: usize, rank: usize) -> Vec<f64> {
    SeededRng::for_case(&[case, p as u64, len as u64, rank as u64]).f64_vec(len)
}

fn bits(x: &[f64]) -> Vec<u64> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn split_phase_is_bitwise_the_blocking_allreduce_for_every_algorithm() {
    for &p in RANKS {
        for &algo in AllreduceAlgo::ALL {
            run_ranks(p, |c| {
                for (oi, &op) in OPS.iter().enumerate() {
                    for &len in LENS {
                        let x0 = input(oi as u64, p, len, c.rank());
                        let mut blocking = x0.clone();
                        c.allreduce_f64_with(&mut blocking, op, algo)?;
                        // Persistent plan, started and finished twice (reuse).
                        let mut plan = PersistentCollective::allreduce_f64(c, len, op, algo);
                        for round in 0..2 {
                            let mut split = x0.clone();
                            plan.start_f64(c, &mut split)?;
                            assert!(plan.in_flight());
                            plan.finish_f64(c, &mut split)?;
                            assert!(!plan.in_flight());
                            assert_eq!(
                                bits(&split),
                                bits(&blocking),
                                "{algo} p={p} rank {} {op:?} len={len} round {round}",
                                c.rank()
                            );
                        }
                        // The convenience request.
                        let mut imm = x0.clone();
                        let req = c.immediate_allreduce_f64_with(&mut imm, op, algo)?;
                        req.wait(c)?;
                        assert_eq!(bits(&imm), bits(&blocking), "{algo} p={p} immediate");
                    }
                }
                Ok(())
            });
        }
    }
}

#[test]
fn other_traffic_between_start_and_finish_does_not_mix() {
    for &p in RANKS {
        for &algo in AllreduceAlgo::ALL {
            run_ranks(p, |c| {
                let (me, size) = (c.rank(), c.size());
                let x0 = input(7, p, 5, me);
                let y0 = input(8, p, 3, me);
                let mut want_x = x0.clone();
                c.allreduce_f64_with(&mut want_x, Op::Sum, algo)?;
                let mut want_y = y0.clone();
                c.allreduce_f64_with(&mut want_y, Op::Max, algo)?;

                let mut plan = PersistentCollective::allreduce_f64(c, 5, Op::Sum, algo);
                let mut x = x0.clone();
                plan.start_f64(c, &mut x)?;
                // A blocking collective of another length and operator ...
                let mut y = y0.clone();
                c.allreduce_f64_with(&mut y, Op::Max, algo)?;
                // ... a second split-phase reduction, nested ...
                let mut z = y0.clone();
                let zreq = c.immediate_allreduce_f64_with(&mut z, Op::Max, algo)?;
                // ... and a point-to-point ring shift with a user tag.
                let right = (me + 1) % size;
                let left = (me + size - 1) % size;
                let sreq = c.isend_f64(right, 42, &[me as f64, 0.5])?;
                let mut got = [0.0; 2];
                c.recv_f64(left, 42, &mut got)?;
                c.wait_send(sreq)?;
                plan.finish_f64(c, &mut x)?;
                zreq.wait(c)?;

                assert_eq!(got, [left as f64, 0.5]);
                assert_eq!(bits(&x), bits(&want_x), "{algo} p={p} rank {me}: x");
                assert_eq!(bits(&y), bits(&want_y), "{algo} p={p} rank {me}: y");
                assert_eq!(bits(&z), bits(&want_y), "{algo} p={p} rank {me}: z");
                Ok(())
            });
        }
    }
}

#[test]
fn start_posts_the_first_puts_so_peers_progress_without_finish() {
    // Two ranks, one exchange step. Rank 1 starts and then waits for a message that rank
    // 0 sends only after ITS finish has completed: rank 0's finish needs rank 1's data,
    // which therefore must have left in rank 1's start. Without that, this deadlocks.
    for &algo in AllreduceAlgo::ALL {
        let out = run_ranks(2, |c| {
            let mut x = [c.rank() as f64 + 1.0, 10.0];
            let mut plan = PersistentCollective::allreduce_f64(c, 2, Op::Sum, algo);
            plan.start_f64(c, &mut x)?;
            if c.rank() == 0 {
                plan.finish_f64(c, &mut x)?;
                c.send(1, 9, &[1])?;
            } else {
                let mut token = [0u8];
                c.recv(0, 9, &mut token)?;
                plan.finish_f64(c, &mut x)?;
            }
            Ok(x)
        });
        assert_eq!(out, vec![[3.0, 20.0]; 2], "{algo}");
    }
}

#[test]
fn misuse_is_an_error_not_a_hang() {
    run_ranks(2, |c| {
        let mut plan = PersistentCollective::allreduce_f64(c, 1, Op::Sum, AllreduceAlgo::default());
        let mut x = [1.0];
        let not_started = plan.finish_f64(c, &mut x);
        assert!(matches!(not_started, Err(CommError::InvalidArgument(_))));
        let wrong_len = plan.start_f64(c, &mut [1.0, 2.0]);
        assert!(matches!(wrong_len, Err(CommError::InvalidArgument(_))));
        plan.start_f64(c, &mut x)?;
        assert!(matches!(
            plan.start_f64(c, &mut x),
            Err(CommError::InvalidArgument(_))
        ));
        assert!(matches!(
            plan.execute_f64(c, &mut x),
            Err(CommError::InvalidArgument(_))
        ));
        plan.finish_f64(c, &mut x)?;
        assert_eq!(x, [2.0]);
        Ok(())
    });
}
