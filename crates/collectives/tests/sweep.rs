//! The registry sweep: EVERY algorithm of EVERY registry (iterating `ALL`, so a new algorithm
//! cannot go untested) x ranks {1, 2, 3, 4, 5, 7, 8, 16, 17} x lengths {0, 1, 7, 1000}
//! (elements per rank; uneven counts with zeros for allgatherv; roots 0, p - 1 and p / 2 for
//! broadcast) against sequential references, on the threads backend. Also: every whole
//! schedule validates, the bit-identical guarantee holds where an allreduce claims it, and a
//! barrier lets no rank out before all have entered.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, BarrierAlgo, BcastAlgo, Collectives, CommError, Communicator,
    Datatype, Op, PersistentCollective, Reduction, ThreadComm, ThreadUniverse,
};
use castack_test_support::collectives::{
    allgatherv_reference, check_bit_identical, check_close, first_disagreement, reduce_reference,
    sum_tolerance, SeededRng,
};
use proptest::prelude::*;

const RANKS: &[usize] = &[1, 2, 3, 4, 5, 7, 8, 16, 17];
const LENS: &[usize] = &[0, 1, 7, 1000];
const OPS: &[Op] = &[Op::Sum, Op::Max, Op::Min];

/// Roots 0, p - 1 and p / 2, without repeats.
fn roots(p: usize) -> Vec<usize> {
    let mut r = vec![0, p - 1, p / 2];
    r.sort_unstable();
    r.dedup();
    r
}

/// Even counts and uneven ones with zeros: `counts[r] = (len * (r + 1)) % (len + 3)`.
fn count_variants(p: usize, len: usize) -> [Vec<usize>; 2] {
    [
        vec![len; p],
        (0..p).map(|r| (len * (r + 1)) % (len + 3)).collect(),
    ]
}

/// A whole universe run longer than this is a deadlock (a put without its arrival).
const DEADLOCK: Duration = Duration::from_secs(60);

/// Run `f` on `p` thread ranks and return each rank's result, failing the test on any error
/// and ending the process when the ranks deadlock, so a broken schedule fails instead of
/// hanging the suite.
fn run_ranks<R: Send>(p: usize, f: impl Fn(&ThreadComm) -> Result<R, CommError> + Sync) -> Vec<R> {
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(DEADLOCK) {
            // Straight to stderr: the harness's output capture dies with the process.
            let _ = writeln!(
                std::io::stderr(),
                "p={p}: the ranks did not finish within {DEADLOCK:?}: deadlocked schedule?"
            );
            std::process::exit(3);
        }
    });
    let results = ThreadUniverse::new(p).and_then(|u| u.run(f));
    drop(done);
    let _ = watchdog.join();
    match results {
        Ok(per_rank) => per_rank
            .into_iter()
            .enumerate()
            .map(|(r, x)| x.unwrap_or_else(|e| panic!("p={p} rank {r}: {e}")))
            .collect(),
        Err(e) => panic!("p={p}: {e}"),
    }
}

/// Column `k` of per-rank result lists: every rank's result of the k-th call.
fn column<T: Clone>(per_rank: &[Vec<T>], k: usize) -> Vec<T> {
    per_rank.iter().map(|calls| calls[k].clone()).collect()
}

fn f64_input(case: u64, p: usize, len: usize, rank: usize) -> Vec<f64> {
    SeededRng::for_case(&[case, p as u64, len as u64, rank as u64]).f64_vec(len)
}

fn combine_f64(op: Op) -> impl Fn(f64, f64) -> f64 {
    move |a, b| op.apply_f64(a, b)
}

#[test]
fn allreduce_f64_every_algorithm_matches_reference() {
    // Per non-bit-identical algorithm: (sum configurations where ranks disagreed, all).
    let mut disagreed: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for &p in RANKS {
        let per_rank = run_ranks(p, |c| {
            let mut calls = Vec::new();
            for &algo in AllreduceAlgo::ALL {
                for (oi, &op) in OPS.iter().enumerate() {
                    for &len in LENS {
                        let mut x = f64_input(oi as u64, p, len, c.rank());
                        c.allreduce_f64_with(&mut x, op, algo)?;
                        calls.push(x);
                    }
                }
            }
            Ok(calls)
        });
        let mut k = 0;
        for &algo in AllreduceAlgo::ALL {
            for (oi, &op) in OPS.iter().enumerate() {
                for &len in LENS {
                    let got = column(&per_rank, k);
                    k += 1;
                    let what = format!("allreduce {algo} {op:?} p={p} len={len}");
                    let inputs: Vec<_> = (0..p).map(|r| f64_input(oi as u64, p, len, r)).collect();
                    let want = reduce_reference(&inputs, combine_f64(op));
                    let tol = match op {
                        Op::Sum => sum_tolerance(&inputs),
                        Op::Max | Op::Min => vec![0.0; len],
                    };
                    for (r, g) in got.iter().enumerate() {
                        check_close(&format!("{what} rank {r}"), g, &want, &tol);
                    }
                    if algo.bit_identical() {
                        check_bit_identical(&what, &got);
                    } else if op == Op::Sum && len > 0 {
                        let entry = disagreed.entry(algo.name()).or_default();
                        entry.0 += usize::from(first_disagreement(&got).is_some());
                        entry.1 += 1;
                    }
                }
            }
        }
    }
    // Not asserted (it depends on the inputs): shows that the guarantee is not vacuous.
    for (algo, (differ, all)) in disagreed {
        eprintln!(
            "allreduce {algo} (not bit-identical): ranks disagreed in {differ} of {all} sum cases"
        );
    }
}

#[test]
fn allreduce_i64_every_algorithm_matches_reference() {
    let input = |oi: usize, p: usize, len: usize, rank: usize| -> Vec<i64> {
        let mut rng = SeededRng::for_case(&[100 + oi as u64, p as u64, len as u64, rank as u64]);
        (0..len).map(|_| rng.next_i64(1 << 40)).collect()
    };
    for &p in RANKS {
        let per_rank = run_ranks(p, |c| {
            let mut calls = Vec::new();
            for &algo in AllreduceAlgo::ALL {
                for (oi, &op) in OPS.iter().enumerate() {
                    for &len in LENS {
                        let mut x = input(oi, p, len, c.rank());
                        c.allreduce_i64_with(&mut x, op, algo)?;
                        calls.push(x);
                    }
                }
            }
            Ok(calls)
        });
        let mut k = 0;
        for &algo in AllreduceAlgo::ALL {
            for (oi, &op) in OPS.iter().enumerate() {
                for &len in LENS {
                    let inputs: Vec<_> = (0..p).map(|r| input(oi, p, len, r)).collect();
                    let want = reduce_reference(&inputs, |a, b| op.apply_i64(a, b));
                    for (r, got) in column(&per_rank, k).iter().enumerate() {
                        assert_eq!(
                            got, &want,
                            "allreduce i64 {algo} {op:?} p={p} len={len} rank {r}"
                        );
                    }
                    k += 1;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random inputs and rank counts: every algorithm that claims bit-identical results
    /// delivers them, and every algorithm stays within the reassociation tolerance.
    #[test]
    fn allreduce_bit_identical_where_claimed(
        p in 1usize..=17,
        len in 0usize..40,
        seed in any::<u64>(),
        scale in prop::sample::select(vec![1e-300, 1e-3, 1.0, 1e12, 1e300]),
    ) {
        let input = |r: usize| -> Vec<f64> {
            let mut rng = SeededRng::for_case(&[seed, r as u64]);
            (0..len).map(|_| rng.next_f64() * scale).collect()
        };
        let inputs: Vec<_> = (0..p).map(input).collect();
        let want = reduce_reference(&inputs, |a, b| a + b);
        let tol = sum_tolerance(&inputs);
        for &algo in AllreduceAlgo::ALL {
            let got = run_ranks(p, |c| {
                let mut x = input(c.rank());
                c.allreduce_f64_with(&mut x, Op::Sum, algo)?;
                Ok(x)
            });
            for g in &got {
                check_close(&format!("{algo} p={p}"), g, &want, &tol);
            }
            if algo.bit_identical() {
                prop_assert_eq!(first_disagreement(&got), None, "{} p={}", algo, p);
            }
        }
    }

    /// Random counts (zeros likely) on random rank counts, every allgatherv algorithm.
    #[test]
    fn allgatherv_random_counts(
        counts in prop::collection::vec(prop_oneof![Just(0usize), 0usize..20], 1..=17),
        seed in any::<u64>(),
    ) {
        let p = counts.len();
        let blocks: Vec<Vec<f64>> = (0..p)
            .map(|r| SeededRng::for_case(&[seed, r as u64]).f64_vec(counts[r]))
            .collect();
        let want = allgatherv_reference(&blocks);
        for &algo in AllgathervAlgo::ALL {
            prop_assert!(algo.schedule(&counts.iter().map(|c| c * 8).collect::<Vec<_>>()).validate().is_ok());
            let got = run_ranks(p, |c| {
                let mut out = vec![f64::NAN; want.len()];
                c.allgatherv_f64_with(&blocks[c.rank()], &counts, &mut out, algo)?;
                Ok(out)
            });
            for g in &got {
                prop_assert!(g.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{}", algo);
            }
        }
    }
}

#[test]
fn allgatherv_every_algorithm_matches_reference() {
    for &p in RANKS {
        let block = |vi: usize, len: usize, counts: &[usize], r: usize| {
            SeededRng::for_case(&[200 + vi as u64, p as u64, len as u64, r as u64])
                .f64_vec(counts[r])
        };
        let per_rank = run_ranks(p, |c| {
            let mut calls = Vec::new();
            for &algo in AllgathervAlgo::ALL {
                for &len in LENS {
                    for (vi, counts) in count_variants(p, len).iter().enumerate() {
                        let local = block(vi, len, counts, c.rank());
                        let mut out = vec![f64::NAN; counts.iter().sum()];
                        c.allgatherv_f64_with(&local, counts, &mut out, algo)?;
                        calls.push(out);
                    }
                }
            }
            // The default-algorithm form once.
            let counts = &count_variants(p, 7)[1];
            let mut out = vec![f64::NAN; counts.iter().sum()];
            c.allgatherv_f64(&block(1, 7, counts, c.rank()), counts, &mut out)?;
            calls.push(out);
            Ok(calls)
        });
        let mut k = 0;
        let mut check = |what: String, counts: &[usize], vi: usize, len: usize| {
            let blocks: Vec<_> = (0..p).map(|r| block(vi, len, counts, r)).collect();
            let want = allgatherv_reference(&blocks);
            for (r, got) in column(&per_rank, k).iter().enumerate() {
                assert!(
                    got.len() == want.len()
                        && got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what} counts={counts:?} rank {r}"
                );
            }
            k += 1;
        };
        for &algo in AllgathervAlgo::ALL {
            for &len in LENS {
                for (vi, counts) in count_variants(p, len).iter().enumerate() {
                    check(
                        format!("allgatherv {algo} p={p} len={len}"),
                        counts,
                        vi,
                        len,
                    );
                }
            }
        }
        check(
            format!("allgatherv default p={p}"),
            &count_variants(p, 7)[1],
            1,
            7,
        );
    }
}

#[test]
fn persistent_allgatherv_repeats_without_rebuilding() {
    for &p in RANKS {
        for &algo in AllgathervAlgo::ALL {
            let counts = count_variants(p, 7)[1].clone();
            let total: usize = counts.iter().sum();
            let value = |it: usize, r: usize, i: usize| (1000 * it + 10 * r + i) as f64;
            let per_rank = run_ranks(p, |c| {
                let r = c.rank();
                let mut ag = PersistentCollective::allgatherv_f64(c, &counts, algo)?;
                let start: usize = counts[..r].iter().sum();
                let mut x = vec![f64::NAN; total];
                let mut calls = Vec::new();
                for it in 0..3 {
                    for i in 0..counts[r] {
                        x[start + i] = value(it, r, i);
                    }
                    ag.execute_f64(c, &mut x)?;
                    calls.push(x.clone());
                }
                Ok(calls)
            });
            for it in 0..3 {
                let want: Vec<f64> = (0..p)
                    .flat_map(|r| (0..counts[r]).map(move |i| value(it, r, i)))
                    .collect();
                for (r, got) in column(&per_rank, it).iter().enumerate() {
                    assert_eq!(
                        got, &want,
                        "persistent allgatherv {algo} p={p} iteration {it} rank {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn bcast_every_algorithm_and_root_matches_reference() {
    for &p in RANKS {
        let per_rank = run_ranks(p, |c| {
            let mut calls: Vec<(Vec<f64>, Vec<u8>)> = Vec::new();
            for &algo in BcastAlgo::ALL {
                for &len in LENS {
                    for root in roots(p) {
                        let mut x = if c.rank() == root {
                            f64_input(300 + root as u64, p, len, root)
                        } else {
                            vec![f64::NAN; len]
                        };
                        c.bcast_f64_with(root, &mut x, algo)?;
                        // The same length in bytes, through the byte interface.
                        let mut b: Vec<u8> = if c.rank() == root {
                            (0..len).map(|i| (i * 7 + root) as u8).collect()
                        } else {
                            vec![0xAA; len]
                        };
                        c.bcast_bytes_with(root, &mut b, algo)?;
                        calls.push((x, b));
                    }
                }
            }
            let mut x = if c.rank() == p / 2 {
                vec![4.25; 7]
            } else {
                vec![0.0; 7]
            };
            c.bcast_f64(p / 2, &mut x)?;
            calls.push((x, Vec::new()));
            Ok(calls)
        });
        let mut k = 0;
        for &algo in BcastAlgo::ALL {
            for &len in LENS {
                for root in roots(p) {
                    let want = f64_input(300 + root as u64, p, len, root);
                    let want_bytes: Vec<u8> = (0..len).map(|i| (i * 7 + root) as u8).collect();
                    for (r, (got, bytes)) in column(&per_rank, k).iter().enumerate() {
                        let what = format!("bcast {algo} p={p} len={len} root={root} rank {r}");
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{what}"
                        );
                        assert_eq!(bytes, &want_bytes, "{what} (bytes)");
                    }
                    k += 1;
                }
            }
        }
        for (got, _) in column(&per_rank, k) {
            assert_eq!(got, vec![4.25; 7], "bcast default p={p}");
        }
    }
}

#[test]
fn barrier_lets_no_rank_out_before_all_entered() {
    const ROUNDS: usize = 12;
    for &p in RANKS {
        for &algo in BarrierAlgo::ALL {
            let entered = AtomicUsize::new(0);
            run_ranks(p, |c| {
                for round in 0..ROUNDS {
                    // A late rank in every round, a different one each time.
                    if c.rank() == (round * 5) % p {
                        std::thread::sleep(Duration::from_micros(300));
                    }
                    entered.fetch_add(1, Ordering::SeqCst);
                    c.barrier_with(algo)?;
                    let seen = entered.load(Ordering::SeqCst);
                    assert!(
                        seen >= (round + 1) * p,
                        "{algo} p={p} round {round}: rank {} left after {seen} entries",
                        c.rank()
                    );
                }
                c.barrier()
            });
            assert_eq!(entered.into_inner(), ROUNDS * p);
        }
    }
}

#[test]
fn every_schedule_validates() {
    for &p in RANKS {
        for &len in LENS {
            let bytes = len * 8;
            for &algo in AllreduceAlgo::ALL {
                for &op in OPS {
                    for datatype in [Datatype::F64, Datatype::I64] {
                        let red = Reduction { op, datatype };
                        algo.schedule(p, bytes, red)
                            .validate()
                            .unwrap_or_else(|e| panic!("allreduce {algo} p={p} len={len}: {e}"));
                    }
                }
            }
            for &algo in AllgathervAlgo::ALL {
                for counts in count_variants(p, len) {
                    let blocks: Vec<usize> = counts.iter().map(|c| c * 8).collect();
                    algo.schedule(&blocks)
                        .validate()
                        .unwrap_or_else(|e| panic!("allgatherv {algo} {counts:?}: {e}"));
                }
            }
            for &algo in BcastAlgo::ALL {
                for root in roots(p) {
                    algo.schedule(p, root, bytes)
                        .validate()
                        .unwrap_or_else(|e| panic!("bcast {algo} p={p} root={root}: {e}"));
                }
            }
        }
        for &algo in BarrierAlgo::ALL {
            algo.schedule(p)
                .validate()
                .unwrap_or_else(|e| panic!("barrier {algo} p={p}: {e}"));
        }
    }
}

#[test]
fn invalid_arguments_are_errors_not_panics() {
    let per_rank = run_ranks(3, |c| {
        let mut out = [0.0; 3];
        let wrong_len = c.allgatherv_f64(&[1.0], &[1, 1], &mut out);
        let wrong_local = c.allgatherv_f64(&[1.0, 2.0], &[1, 1, 1], &mut out);
        let wrong_out = c.allgatherv_f64(&[1.0], &[1, 1, 1], &mut out[..2]);
        let overflow =
            PersistentCollective::allgatherv_f64(c, &[usize::MAX / 4, 1, 1], AllgathervAlgo::Ring)
                .map(|_| ());
        let bad_root = c.bcast_f64(3, &mut out);
        let bad_persistent_root =
            PersistentCollective::bcast_f64(c, 7, 1, BcastAlgo::Binomial).map(|_| ());
        // The communicator is still usable afterwards.
        c.allgatherv_f64(&[c.rank() as f64], &[1, 1, 1], &mut out)?;
        Ok((
            [wrong_len, wrong_local, wrong_out, overflow],
            [bad_root, bad_persistent_root],
            out,
        ))
    });
    for (invalid, out_of_range, out) in per_rank {
        for e in invalid {
            assert!(matches!(e, Err(CommError::InvalidArgument(_))), "{e:?}");
        }
        assert!(out_of_range
            .iter()
            .all(|e| matches!(e, Err(CommError::RankOutOfRange { .. }))));
        assert_eq!(out, [0.0, 1.0, 2.0]);
    }
}
