//! The registry sweep: EVERY algorithm of EVERY registry (iterating `ALL`, so a new algorithm
//! cannot go untested) x ranks {1, 2, 3, 4, 5, 7, 8, 16, 17} x lengths {0, 1, 7, 1000}
//! (elements per rank; uneven counts with zeros for allgatherv; roots 0, p - 1 and p / 2 for
//! broadcast) against sequential references, on the threads backend. Also: every whole
//! schedule validates, the bit-identical guarantee holds where an allreduce claims it, and a
//! barrier lets no rank out before all have entered.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, AlltoallAlgo, BarrierAlgo, BcastAlgo, Collectives, CommError,
    Communicator, Datatype, GatherAlgo, Op, PersistentCollective, ReduceAlgo, Reduction,
    ScatterAlgo,
};
use castack_test_support::collectives::{
    allgatherv_reference, check_bit_identical, check_close, first_disagreement, reduce_reference,
    sum_tolerance, SeededRng,
};
use proptest::prelude::*;

use crate::common::run_ranks;

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

// ---- Rooted operations (scatter, gather, reduce) and alltoall ----

/// Bitwise equality of f64 slices (NaN-safe, unlike `==`).
fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Sequential reference of an alltoall: rank r receives block r of every rank's send
/// buffer, in rank order.
fn alltoall_reference(sends: &[Vec<f64>], rank: usize) -> Vec<f64> {
    let p = sends.len();
    sends
        .iter()
        .flat_map(|s| {
            let count = s.len() / p;
            s[rank * count..(rank + 1) * count].iter().copied()
        })
        .collect()
}

#[test]
fn scatter_every_algorithm_and_root_matches_reference() {
    for &p in RANKS {
        let send = |len: usize, root: usize| f64_input(400 + root as u64, p, p * len, root);
        let per_rank = run_ranks(p, |c| {
            let mut calls = Vec::new();
            for &algo in ScatterAlgo::ALL {
                for &len in LENS {
                    for root in roots(p) {
                        let s = if c.rank() == root {
                            send(len, root)
                        } else {
                            Vec::new()
                        };
                        let mut recv = vec![f64::NAN; len];
                        c.scatter_f64_with(root, &s, &mut recv, algo)?;
                        calls.push(recv);
                    }
                }
            }
            let s = if c.rank() == p / 2 {
                send(7, p / 2)
            } else {
                Vec::new()
            };
            let mut recv = vec![f64::NAN; 7];
            c.scatter_f64(p / 2, &s, &mut recv)?;
            calls.push(recv);
            Ok(calls)
        });
        let mut k = 0;
        let mut check = |what: String, len: usize, root: usize| {
            let s = send(len, root);
            for (r, got) in column(&per_rank, k).iter().enumerate() {
                assert!(
                    same_bits(got, &s[r * len..(r + 1) * len]),
                    "{what} rank {r}"
                );
            }
            k += 1;
        };
        for &algo in ScatterAlgo::ALL {
            for &len in LENS {
                for root in roots(p) {
                    check(
                        format!("scatter {algo} p={p} len={len} root={root}"),
                        len,
                        root,
                    );
                }
            }
        }
        check(format!("scatter default p={p}"), 7, p / 2);
    }
}

#[test]
fn gather_every_algorithm_and_root_matches_reference() {
    for &p in RANKS {
        let send = |len: usize, r: usize| f64_input(500, p, len, r);
        let per_rank = run_ranks(p, |c| {
            let mut calls = Vec::new();
            let mut call = |root: usize, len: usize, algo: Option<GatherAlgo>| {
                let s = send(len, c.rank());
                let mut recv = if c.rank() == root {
                    vec![f64::NAN; p * len]
                } else {
                    Vec::new()
                };
                match algo {
                    Some(algo) => c.gather_f64_with(root, &s, &mut recv, algo)?,
                    None => c.gather_f64(root, &s, &mut recv)?,
                }
                calls.push(recv);
                Ok::<_, CommError>(())
            };
            for &algo in GatherAlgo::ALL {
                for &len in LENS {
                    for root in roots(p) {
                        call(root, len, Some(algo))?;
                    }
                }
            }
            call(p / 2, 7, None)?;
            Ok(calls)
        });
        let mut k = 0;
        let mut check = |what: String, len: usize, root: usize| {
            let blocks: Vec<_> = (0..p).map(|r| send(len, r)).collect();
            let got = &per_rank[root][k];
            assert!(same_bits(got, &allgatherv_reference(&blocks)), "{what}");
            k += 1;
        };
        for &algo in GatherAlgo::ALL {
            for &len in LENS {
                for root in roots(p) {
                    check(
                        format!("gather {algo} p={p} len={len} root={root}"),
                        len,
                        root,
                    );
                }
            }
        }
        check(format!("gather default p={p}"), 7, p / 2);
    }
}

#[test]
fn reduce_every_algorithm_op_and_root_matches_reference() {
    for &p in RANKS {
        let input = |oi: usize, len: usize, r: usize| f64_input(600 + oi as u64, p, len, r);
        let per_rank = run_ranks(p, |c| {
            let mut calls = Vec::new();
            for &algo in ReduceAlgo::ALL {
                for (oi, &op) in OPS.iter().enumerate() {
                    for &len in LENS {
                        for root in roots(p) {
                            let mut x = input(oi, len, c.rank());
                            c.reduce_f64_with(root, &mut x, op, algo)?;
                            calls.push(x);
                        }
                    }
                }
            }
            let mut x = input(0, 7, c.rank());
            c.reduce_f64(p / 2, &mut x, Op::Sum)?;
            calls.push(x);
            Ok(calls)
        });
        let mut k = 0;
        let mut check = |what: String, oi: usize, op: Op, len: usize, root: usize| {
            let inputs: Vec<_> = (0..p).map(|r| input(oi, len, r)).collect();
            let want = reduce_reference(&inputs, combine_f64(op));
            let tol = match op {
                Op::Sum => sum_tolerance(&inputs),
                Op::Max | Op::Min => vec![0.0; len],
            };
            for (r, got) in column(&per_rank, k).iter().enumerate() {
                if r == root {
                    check_close(&what, got, &want, &tol);
                } else {
                    assert!(
                        same_bits(got, &inputs[r]),
                        "{what}: rank {r}'s buffer changed"
                    );
                }
            }
            k += 1;
        };
        for &algo in ReduceAlgo::ALL {
            for (oi, &op) in OPS.iter().enumerate() {
                for &len in LENS {
                    for root in roots(p) {
                        let what = format!("reduce {algo} {op:?} p={p} len={len} root={root}");
                        check(what, oi, op, len, root);
                    }
                }
            }
        }
        check(format!("reduce default p={p}"), 0, Op::Sum, 7, p / 2);
    }
}

#[test]
fn alltoall_every_algorithm_matches_reference() {
    for &p in RANKS {
        let send = |len: usize, r: usize| f64_input(700, p, p * len, r);
        let per_rank = run_ranks(p, |c| {
            let mut calls = Vec::new();
            for &algo in AlltoallAlgo::ALL {
                for &len in LENS {
                    let mut recv = vec![f64::NAN; p * len];
                    c.alltoall_f64_with(&send(len, c.rank()), &mut recv, algo)?;
                    calls.push(recv);
                }
            }
            let mut recv = vec![f64::NAN; p * 7];
            c.alltoall_f64(&send(7, c.rank()), &mut recv)?;
            calls.push(recv);
            Ok(calls)
        });
        let mut k = 0;
        let mut check = |what: String, len: usize| {
            let sends: Vec<_> = (0..p).map(|r| send(len, r)).collect();
            for (r, got) in column(&per_rank, k).iter().enumerate() {
                let want = alltoall_reference(&sends, r);
                assert!(same_bits(got, &want), "{what} rank {r}");
            }
            k += 1;
        };
        for &algo in AlltoallAlgo::ALL {
            for &len in LENS {
                check(format!("alltoall {algo} p={p} len={len}"), len);
            }
        }
        check(format!("alltoall default p={p}"), 7);
    }
}

#[test]
fn rooted_and_alltoall_schedules_validate() {
    for &p in RANKS {
        for &len in LENS {
            let bytes = len * 8;
            for root in roots(p) {
                for &algo in ScatterAlgo::ALL {
                    algo.schedule(p, root, bytes)
                        .validate()
                        .unwrap_or_else(|e| panic!("scatter {algo} p={p} root={root}: {e}"));
                }
                for &algo in GatherAlgo::ALL {
                    algo.schedule(p, root, bytes)
                        .validate()
                        .unwrap_or_else(|e| panic!("gather {algo} p={p} root={root}: {e}"));
                }
                for &algo in ReduceAlgo::ALL {
                    for &op in OPS {
                        let red = Reduction {
                            op,
                            datatype: Datatype::F64,
                        };
                        algo.schedule(p, root, bytes, red)
                            .validate()
                            .unwrap_or_else(|e| panic!("reduce {algo} p={p} root={root}: {e}"));
                    }
                }
            }
            for &algo in AlltoallAlgo::ALL {
                algo.schedule(p, bytes)
                    .validate()
                    .unwrap_or_else(|e| panic!("alltoall {algo} p={p} len={len}: {e}"));
            }
        }
    }
}

#[test]
fn rooted_and_alltoall_invalid_arguments_are_errors_not_panics() {
    // Errors every rank detects (so the communicator stays consistent): a root out of range
    // and alltoall lengths.
    let per_rank = run_ranks(3, |c| {
        let mut buf = [0.0; 3];
        let out_of_range = [
            c.scatter_f64(3, &[0.0; 3], &mut buf[..1]),
            c.gather_f64(3, &buf[..1], &mut []),
            c.reduce_f64(7, &mut buf, Op::Sum),
        ];
        let invalid = [
            c.alltoall_f64(&[0.0; 3], &mut [0.0; 6]),
            c.alltoall_f64(&[0.0; 4], &mut [0.0; 4]),
        ];
        // Still usable afterwards.
        let send: Vec<f64> = (0..3).map(|j| (10 * c.rank() + j) as f64).collect();
        c.alltoall_f64(&send, &mut buf)?;
        Ok((out_of_range, invalid, buf))
    });
    for (r, (out_of_range, invalid, buf)) in per_rank.into_iter().enumerate() {
        for e in out_of_range {
            assert!(matches!(e, Err(CommError::RankOutOfRange { .. })), "{e:?}");
        }
        for e in invalid {
            assert!(matches!(e, Err(CommError::InvalidArgument(_))), "{e:?}");
        }
        let r = r as f64;
        assert_eq!(buf, [r, 10.0 + r, 20.0 + r]);
    }
    // Lengths only the root checks: on one rank, so no peer waits for it.
    let per_rank = run_ranks(1, |c| {
        let mut buf = [0.0; 2];
        Ok([
            c.scatter_f64(0, &[0.0; 3], &mut buf),
            c.gather_f64(0, &[0.0; 1], &mut buf),
        ])
    });
    for e in per_rank.into_iter().flatten() {
        assert!(matches!(e, Err(CommError::InvalidArgument(_))), "{e:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random rank counts, block lengths and roots: every scatter, gather, reduce and
    /// alltoall algorithm against its reference; reduce is deterministic (a repeat gives the
    /// same bits).
    #[test]
    fn rooted_and_alltoall_random_sizes(
        p in 1usize..=17,
        count in prop_oneof![Just(0usize), 0usize..20],
        root_pick in any::<usize>(),
        seed in any::<u64>(),
    ) {
        let root = root_pick % p;
        let data = |r: usize, n: usize| SeededRng::for_case(&[seed, r as u64]).f64_vec(n);
        let blocks: Vec<_> = (0..p).map(|r| data(r, count)).collect();
        let wide: Vec<_> = (0..p).map(|r| data(r, p * count)).collect();
        for &algo in ScatterAlgo::ALL {
            let got = run_ranks(p, |c| {
                let mut recv = vec![f64::NAN; count];
                c.scatter_f64_with(root, &wide[root], &mut recv, algo)?;
                Ok(recv)
            });
            for (r, g) in got.iter().enumerate() {
                prop_assert!(same_bits(g, &wide[root][r * count..(r + 1) * count]), "{}", algo);
            }
        }
        for &algo in GatherAlgo::ALL {
            let got = run_ranks(p, |c| {
                let mut recv = vec![f64::NAN; if c.rank() == root { p * count } else { 0 }];
                c.gather_f64_with(root, &blocks[c.rank()], &mut recv, algo)?;
                Ok(recv)
            });
            prop_assert!(same_bits(&got[root], &allgatherv_reference(&blocks)), "{}", algo);
        }
        let want = reduce_reference(&blocks, |a, b| a + b);
        let tol = sum_tolerance(&blocks);
        for &algo in ReduceAlgo::ALL {
            let got = run_ranks(p, |c| {
                let mut x = blocks[c.rank()].clone();
                c.reduce_f64_with(root, &mut x, Op::Sum, algo)?;
                let mut y = blocks[c.rank()].clone();
                c.reduce_f64_with(root, &mut y, Op::Sum, algo)?;
                Ok((x, y))
            });
            check_close(&format!("reduce {algo} p={p}"), &got[root].0, &want, &tol);
            if algo.deterministic() {
                prop_assert!(same_bits(&got[root].0, &got[root].1), "{} not deterministic", algo);
            }
        }
        for &algo in AlltoallAlgo::ALL {
            let got = run_ranks(p, |c| {
                let mut recv = vec![f64::NAN; p * count];
                c.alltoall_f64_with(&wide[c.rank()], &mut recv, algo)?;
                Ok(recv)
            });
            for (r, g) in got.iter().enumerate() {
                prop_assert!(same_bits(g, &alltoall_reference(&wide, r)), "{}", algo);
            }
        }
    }
}
