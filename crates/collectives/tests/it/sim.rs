//! The `sim` backend: the same data as `threads` for every registry algorithm of every
//! operation (a seeded subset of rank counts and lengths), modeled time repeatable to the
//! bit, modeled time against independent references (fabric-sim's own pricing and the
//! calibration facts), and failures that do not hang.

use castack_collectives::fabric_sim::{Fabric, Mechanism, MemoryKind, Placement};
use castack_collectives::sim::{price_schedule, SimMechanism, SimMemory, SimOptions};
use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, AlltoallAlgo, BarrierAlgo, BcastAlgo, Collectives, CommError,
    Communicator, ComputeWork, Datatype, GatherAlgo, Op, PersistentCollective, PointToPoint,
    ReduceAlgo, Reduction, ScatterAlgo, SimError, SimUniverse, ThreadUniverse,
};
use castack_test_support::collectives::SeededRng;
use castack_test_support::watchdog::watchdog;

fn peach2() -> Fabric {
    Fabric::preset("peach2").unwrap()
}

fn sim(p: usize) -> SimUniverse {
    SimUniverse::new(p, peach2(), SimOptions::default()).unwrap()
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every algorithm of every registry on one rank: the results, as bits, in call order.
fn registry_program<C: Communicator>(
    c: &C,
    len: usize,
    root: usize,
    seed: u64,
) -> Result<Vec<Vec<u64>>, CommError> {
    let (p, r) = (c.size(), c.rank());
    let input = |case: u64, n: usize| {
        SeededRng::for_case(&[seed, case, p as u64, len as u64, r as u64]).f64_vec(n)
    };
    let mut out = Vec::new();
    for &algo in AllreduceAlgo::ALL {
        for (k, &op) in [Op::Sum, Op::Max].iter().enumerate() {
            let mut x = input(k as u64, len);
            c.allreduce_f64_with(&mut x, op, algo)?;
            out.push(bits(&x));
        }
        let mut x = input(7, len);
        let req = c.immediate_allreduce_f64_with(&mut x, Op::Sum, algo)?;
        req.wait(c)?;
        out.push(bits(&x));
        let mut n: Vec<i64> = (0..len as i64).map(|i| i * 3 + r as i64).collect();
        c.allreduce_i64_with(&mut n, Op::Sum, algo)?;
        out.push(n.iter().map(|&v| v as u64).collect());
    }
    let counts: Vec<usize> = (0..p).map(|q| (len * (q + 1)) % (len + 3)).collect();
    for &algo in AllgathervAlgo::ALL {
        let local = input(10, counts[r]);
        let mut all = vec![0.0; counts.iter().sum()];
        c.allgatherv_f64_with(&local, &counts, &mut all, algo)?;
        out.push(bits(&all));
    }
    for &algo in BcastAlgo::ALL {
        let mut x = if r == root {
            input(11, len)
        } else {
            vec![0.0; len]
        };
        c.bcast_f64_with(root, &mut x, algo)?;
        out.push(bits(&x));
    }
    for &algo in ScatterAlgo::ALL {
        let send = if r == root {
            input(12, p * len)
        } else {
            Vec::new()
        };
        let mut recv = vec![0.0; len];
        c.scatter_f64_with(root, &send, &mut recv, algo)?;
        out.push(bits(&recv));
    }
    for &algo in GatherAlgo::ALL {
        let send = input(13, len);
        let mut recv = vec![0.0; if r == root { p * len } else { 0 }];
        c.gather_f64_with(root, &send, &mut recv, algo)?;
        out.push(bits(&recv));
    }
    for &algo in ReduceAlgo::ALL {
        let mut x = input(14, len);
        c.reduce_f64_with(root, &mut x, Op::Sum, algo)?;
        out.push(bits(&x));
    }
    for &algo in AlltoallAlgo::ALL {
        let send = input(15, p * len);
        let mut recv = vec![0.0; p * len];
        c.alltoall_f64_with(&send, &mut recv, algo)?;
        out.push(bits(&recv));
    }
    for &algo in BarrierAlgo::ALL {
        c.barrier_with(algo)?;
    }
    Ok(out)
}

fn unwrap_ranks<R>(what: &str, res: Result<Vec<Result<R, CommError>>, CommError>) -> Vec<R> {
    res.unwrap_or_else(|e| panic!("{what}: {e}"))
        .into_iter()
        .enumerate()
        .map(|(r, x)| x.unwrap_or_else(|e| panic!("{what} rank {r}: {e}")))
        .collect()
}

#[test]
fn sim_data_equals_threads_for_every_registry_algorithm() {
    // A seeded subset of the sweep's rank counts and lengths (elements per rank).
    let mut rng = SeededRng::new(0x51A);
    for &p in &[1usize, 2, 3, 5, 8, 16] {
        for &len in &[0usize, 1, 7, 130] {
            if rng.next_u64().is_multiple_of(3) && p > 2 && len > 0 {
                continue; // the seeded subset
            }
            let root = (rng.next_u64() % p as u64) as usize;
            let what = format!("p={p} len={len} root={root}");
            let threads = watchdog(&what, || {
                unwrap_ranks(
                    &what,
                    ThreadUniverse::new(p)
                        .unwrap()
                        .run(|c| registry_program(c, len, root, 1)),
                )
            });
            let simulated = watchdog(&what, || {
                unwrap_ranks(&what, sim(p).run(|c| registry_program(c, len, root, 1)))
            });
            assert_eq!(simulated, threads, "{what}: sim data differs from threads");
        }
    }
}

/// A program mixing every kind of modeled time: collectives (blocking and nonblocking with
/// compute in between), point-to-point messages and compute.
fn mixed_program<C: Communicator>(c: &C) -> Result<Option<f64>, CommError> {
    let (p, r) = (c.size(), c.rank());
    let mut x = vec![r as f64; 64];
    for (i, &algo) in AllreduceAlgo::ALL.iter().enumerate() {
        c.model_compute(ComputeWork {
            bytes: 1000 * (r as u64 + 1) * (i as u64 + 1),
            flops: 500,
            launches: 0,
            ..ComputeWork::default()
        });
        c.allreduce_f64_with(&mut x, Op::Sum, algo)?;
    }
    let mut y = vec![1.0; 1024];
    let req = c.immediate_allreduce_sum(&mut y)?;
    c.model_compute(ComputeWork {
        bytes: 200_000 * (r as u64 % 3),
        flops: 0,
        launches: 0,
        ..ComputeWork::default()
    });
    req.wait(c)?;
    // A ring of point-to-point messages.
    let tag = 5;
    let send = c.isend((r + 1) % p, tag, &vec![r as u8; 100 * (r + 1)])?;
    let mut got = vec![0u8; 100 * ((r + p - 1) % p + 1)];
    c.recv((r + p - 1) % p, tag, &mut got)?;
    c.wait_send(send)?;
    let mut all = vec![0.0; p * 3];
    c.allgatherv_f64(&[r as f64; 3], &vec![3; p], &mut all)?;
    c.barrier()?;
    Ok(c.model_clock())
}

#[test]
fn modeled_time_repeats_to_the_bit() {
    for p in [3usize, 8, 16] {
        let runs: Vec<Vec<u64>> = (0..4)
            .map(|_| {
                watchdog("mixed", || unwrap_ranks("mixed", sim(p).run(mixed_program)))
                    .into_iter()
                    .map(|t| t.expect("sim has a clock").to_bits())
                    .collect()
            })
            .collect();
        for run in &runs[1..] {
            assert_eq!(run, &runs[0], "p={p}: clocks differ between runs");
        }
        // Time did advance, and the final barrier left no rank behind the slowest entry.
        assert!(runs[0].iter().all(|&t| f64::from_bits(t) > 1e-6));
    }
    // Threads has no clock.
    let t = unwrap_ranks(
        "threads",
        ThreadUniverse::new(2).unwrap().run(mixed_program),
    );
    assert_eq!(t, vec![None, None]);
}

#[test]
fn collective_clock_is_the_fabric_price_of_the_whole_schedule() {
    // Independent reference: fabric-sim prices the algorithm's whole schedule directly.
    let sum = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    for p in [2usize, 5, 16] {
        for &algo in AllreduceAlgo::ALL {
            for len in [1usize, 512] {
                let u = sim(p);
                let clocks = unwrap_ranks(
                    "allreduce",
                    u.run(|c| {
                        let mut x = vec![1.0; len];
                        c.allreduce_f64_with(&mut x, Op::Sum, algo)?;
                        Ok(c.clock())
                    }),
                );
                let sched = algo.schedule(p, len * 8, sum);
                let want = peach2()
                    .price_schedule(
                        &price_schedule(&sched, MemoryKind::Host),
                        &Placement::one_per_node(p, MemoryKind::Host),
                        &vec![0.0; p],
                        Mechanism::Auto,
                    )
                    .unwrap();
                assert_eq!(clocks, want, "{algo} p={p} len={len}");
                assert_eq!(u.price(&sched).unwrap(), want);
            }
        }
    }
}

#[test]
fn two_rank_8_byte_allreduce_is_one_pio_put() {
    // Dissemination on 2 adjacent peach2 nodes: one step, each rank puts 8 B to the other
    // over its own link direction: "PIO latency 1.0 us".
    let clocks = unwrap_ranks(
        "p=2",
        sim(2).run(|c| {
            let mut x = [1.0];
            c.allreduce_f64_with(&mut x, Op::Sum, AllreduceAlgo::Dissemination)?;
            Ok(c.clock())
        }),
    );
    for t in clocks {
        assert!((t - 1.0e-6).abs() < 0.05e-6, "{t}");
    }
    // By DMA: "1.9 us at small sizes".
    let u = SimUniverse::new(
        2,
        peach2(),
        SimOptions {
            mechanism: SimMechanism::Dma,
            ..SimOptions::default()
        },
    )
    .unwrap();
    let clocks = unwrap_ranks(
        "dma",
        u.run(|c| {
            let mut x = [1.0];
            c.allreduce_f64_with(&mut x, Op::Sum, AllreduceAlgo::Dissemination)?;
            Ok(c.clock())
        }),
    );
    for t in clocks {
        assert!((t - 1.9e-6).abs() < 0.095e-6, "{t}");
    }
}

#[test]
fn point_to_point_pays_the_notification_unless_preposted() {
    // 8 B from rank 0 to rank 1, receive posted at the same modeled time as the send:
    // "64 B CPU PIO notification about 2 us" + "PIO latency 1.0 us".
    let clocks = unwrap_ranks(
        "cold",
        sim(2).run(|c| {
            if c.rank() == 0 {
                c.send(1, 1, &[7u8; 8])?;
            } else {
                let mut b = [0u8; 8];
                c.recv(0, 1, &mut b)?;
                assert_eq!(b, [7u8; 8]);
            }
            Ok(c.clock())
        }),
    );
    assert_eq!(
        clocks[0], 0.0,
        "a buffered send does not move the sender's clock"
    );
    assert!((clocks[1] - 3.0e-6).abs() < 0.15e-6, "{}", clocks[1]);
    // Pre-posted: the receive is posted at 0, the sender computes 10 us first.
    let host = peach2().device_model(MemoryKind::Host).cloned().unwrap();
    let bytes = (10e-6 * host.mem_bandwidth_gbs * 1e9).round() as u64;
    let clocks = unwrap_ranks(
        "pre-posted",
        sim(2).run(|c| {
            if c.rank() == 0 {
                c.model_compute(ComputeWork {
                    bytes,
                    flops: 0,
                    launches: 0,
                    ..ComputeWork::default()
                });
                c.send(1, 1, &[7u8; 8])?;
            } else {
                let req = c.irecv(0, 1)?;
                let mut b = [0u8; 8];
                c.wait_recv(req, &mut b)?;
            }
            Ok(c.clock())
        }),
    );
    let sent = clocks[0];
    assert!((sent - 10e-6).abs() < 1e-9, "{sent}");
    assert!(
        (clocks[1] - sent - 1.0e-6).abs() < 0.05e-6,
        "{}",
        clocks[1] - sent
    );
}

#[test]
fn nonblocking_collective_overlaps_compute() {
    let work = ComputeWork {
        bytes: 59_700_000, // 1 ms on the peach2 host model
        flops: 0,
        launches: 0,
        ..ComputeWork::default()
    };
    let run = |overlap: bool| {
        unwrap_ranks(
            "overlap",
            sim(8).run(|c| {
                let mut x = vec![1.0; 4096];
                if overlap {
                    let req = c.immediate_allreduce_sum(&mut x)?;
                    c.model_compute(work);
                    req.wait(c)?;
                } else {
                    c.allreduce_sum(&mut x)?;
                    c.model_compute(work);
                }
                Ok(c.clock())
            }),
        )
    };
    let (blocking, overlapped) = (run(false), run(true));
    let compute = 1e-3;
    for (b, o) in blocking.iter().zip(&overlapped) {
        assert!(*b > compute + 1e-6, "{b}");
        assert!(
            (*o - compute).abs() < 1e-9,
            "overlapped {o} should be the compute alone"
        );
    }
}

#[test]
fn gpu_compute_pays_launches() {
    let u = SimUniverse::new(
        2,
        peach2(),
        SimOptions {
            memory: SimMemory::Gpu,
            ..SimOptions::default()
        },
    )
    .unwrap();
    let clocks = unwrap_ranks(
        "gpu",
        u.run(|c| {
            c.model_compute(ComputeWork {
                bytes: 0,
                flops: 0,
                launches: 3,
                ..ComputeWork::default()
            });
            let t = c.clock();
            let mut x = [1.0];
            c.allreduce_sum(&mut x)?;
            Ok((t, c.clock()))
        }),
    );
    for (t, after) in clocks {
        assert!((t - 42e-6).abs() < 1e-12, "{t}");
        // A GPU-to-GPU DMA put of 8 B ("one-sided GPU put of 8 B about 2.3 us"; the model
        // prices it at the DMA small-size latency, "1.9 us ... GPU-to-GPU alike").
        assert!(after - t > 1.8e-6 && after - t < 2.5e-6, "{}", after - t);
    }
}

#[test]
fn bad_universes_are_errors() {
    let too_many = SimUniverse::new(17, peach2(), SimOptions::default()).unwrap_err();
    assert!(matches!(too_many, SimError::TooManyRanks { nodes: 16, .. }));
    assert!(too_many.to_string().contains("16 nodes"), "{too_many}");
    assert!(matches!(
        SimUniverse::new(0, peach2(), SimOptions::default()),
        Err(SimError::NoRanks)
    ));
    let gpu = SimOptions {
        memory: SimMemory::Gpu,
        ..SimOptions::default()
    };
    let e = SimUniverse::new(2, Fabric::preset("tofu-fx10").unwrap(), gpu.clone()).unwrap_err();
    assert!(matches!(e, SimError::Unsupported { .. }), "{e}");
    let pio_gpu = SimOptions {
        mechanism: SimMechanism::Pio,
        ..gpu
    };
    assert!(SimUniverse::new(2, peach2(), pio_gpu).is_err());
    let pio = SimOptions {
        mechanism: SimMechanism::Pio,
        ..SimOptions::default()
    };
    assert!(SimUniverse::new(2, Fabric::preset("ib-qdr").unwrap(), pio).is_err());
    for nodes in [vec![0], vec![0, 0], vec![0, 99]] {
        let o = SimOptions {
            nodes: Some(nodes.clone()),
            ..SimOptions::default()
        };
        assert!(
            matches!(
                SimUniverse::new(2, peach2(), o),
                Err(SimError::Placement(_))
            ),
            "{nodes:?}"
        );
    }
    // A placement on far nodes is slower than on adjacent ones.
    let far = SimUniverse::new(
        2,
        peach2(),
        SimOptions {
            nodes: Some(vec![0, 12]),
            ..SimOptions::default()
        },
    )
    .unwrap();
    let sum = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    let sched = AllreduceAlgo::Dissemination.schedule(2, 8, sum);
    assert!(far.price(&sched).unwrap()[0] > sim(2).price(&sched).unwrap()[0]);
}

#[test]
fn a_panicking_rank_does_not_hang_the_others() {
    let res = watchdog("panic", || {
        sim(4).run(|c| {
            if c.rank() == 2 {
                panic!("rank 2 fails before the allreduce");
            }
            let mut x = [1.0];
            c.allreduce_sum(&mut x)
        })
    });
    match res {
        Err(CommError::RankPanicked { rank, message }) => {
            assert_eq!(rank, 2);
            assert!(message.contains("rank 2 fails"));
        }
        other => panic!("expected RankPanicked, got {other:?}"),
    }
}

#[test]
fn an_early_exit_does_not_hang_the_others() {
    let res = watchdog("exit", || {
        sim(4)
            .run(|c| {
                if c.rank() == 0 {
                    return Err(CommError::InvalidArgument("rank 0 gives up".into()));
                }
                let mut x = [1.0];
                c.allreduce_sum(&mut x)
            })
            .unwrap()
    });
    assert!(res[0].is_err());
    for (r, x) in res.iter().enumerate().skip(1) {
        assert!(
            matches!(x, Err(CommError::PeerExited { .. })),
            "rank {r}: {x:?}"
        );
    }
}

fn reduce_time(fabric: &str, p: usize, memory: SimMemory, algo: ReduceAlgo, bytes: usize) -> f64 {
    let options = SimOptions {
        memory,
        ..SimOptions::default()
    };
    let u = SimUniverse::new(p, Fabric::preset(fabric).unwrap(), options).unwrap();
    let sum = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    let done = u.price(&algo.schedule(p, 0, bytes, sum)).unwrap();
    done.into_iter().fold(0.0, f64::max)
}

/// host_reduce and device_reduce move the same data; the model tells them apart by their
/// local work. Checked against the device model's own numbers (a K20X launch is 14 us), not
/// against fitted results.
#[test]
fn host_and_device_reduce_differ_by_their_modeled_local_work() {
    let (host, dev) = (ReduceAlgo::HostReduce, ReduceAlgo::DeviceReduce);
    for fabric in ["peach2", "ib-qdr"] {
        // On host buffers both reduce on the CPU: the same schedule cost.
        for bytes in [8, 1 << 16] {
            assert_eq!(
                reduce_time(fabric, 4, SimMemory::Host, host, bytes),
                reduce_time(fabric, 4, SimMemory::Host, dev, bytes),
                "{fabric} {bytes}"
            );
        }
        // On GPU buffers the kernel launch dominates small vectors...
        let (h, d) = (
            reduce_time(fabric, 4, SimMemory::Gpu, host, 8),
            reduce_time(fabric, 4, SimMemory::Gpu, dev, 8),
        );
        assert!(h < d, "{fabric}: host {h} device {d}");
        assert!(
            d >= 14e-6,
            "{fabric}: a kernel launch is 14 us, device_reduce took {d}"
        );
        // ... and the host pass plus the host->device copy dominate large ones.
        let (h, d) = (
            reduce_time(fabric, 4, SimMemory::Gpu, host, 4 << 20),
            reduce_time(fabric, 4, SimMemory::Gpu, dev, 4 << 20),
        );
        assert!(d < h, "{fabric} 4 MB: host {h} device {d}");
    }
}

/// Both gather-and-reduce algorithms add the arrivals in the same documented order
/// (relative ranks 1..p-1 onto the root's buffer), on threads and on sim alike.
#[test]
fn host_and_device_reduce_add_in_the_documented_order() {
    let (p, root, len) = (5, 3, 33);
    let input = |r: usize| SeededRng::for_case(&[77, r as u64]).f64_vec(len);
    let mut want = input(root);
    for v in 1..p {
        let x = input((root + v) % p);
        // incoming + local (IEEE addition commutes, so `+=` gives the same bits).
        for (w, a) in want.iter_mut().zip(&x) {
            *w += a;
        }
    }
    for algo in [ReduceAlgo::HostReduce, ReduceAlgo::DeviceReduce] {
        let prog = |c: &dyn Communicator| {
            let mut x = input(c.rank());
            c.reduce_f64_with(root, &mut x, Op::Sum, algo).map(|()| x)
        };
        let threads = unwrap_ranks("threads", ThreadUniverse::new(p).unwrap().run(|c| prog(c)));
        let simulated = unwrap_ranks("sim", sim(p).run(|c| prog(c)));
        assert_eq!(bits(&threads[root]), bits(&want), "{algo} threads");
        assert_eq!(bits(&simulated[root]), bits(&want), "{algo} sim");
    }
}

#[test]
fn a_message_awaited_across_nested_calls_is_a_deadlock_error() {
    // The limit of the overlap rule (module docs of `sim`): rank 0 enters call B, then
    // finishes call A, which waits until B is priced; rank 1 waits, before entering B, for
    // a message rank 0 sends only after A. Neither can move: both get a deadlock error
    // naming what they wait for instead of hanging.
    let out = watchdog("nested calls", || {
        sim(2)
            .run(|c| {
                let rd = AllreduceAlgo::RecursiveDoubling;
                let mut a = PersistentCollective::allreduce_f64(c, 1, Op::Sum, rd);
                let mut b = PersistentCollective::allreduce_f64(c, 1, Op::Sum, rd);
                let (mut x, mut y) = ([1.0], [2.0]);
                a.start_f64(c, &mut x)?;
                if c.rank() == 0 {
                    b.start_f64(c, &mut y)?;
                    let r = a.finish_f64(c, &mut x).and_then(|()| c.send(1, 5, &[1]));
                    let _ = b.finish_f64(c, &mut y);
                    r
                } else {
                    let mut m = [0u8; 1];
                    let r = c.recv(0, 5, &mut m);
                    let _ = a.finish_f64(c, &mut x);
                    r
                }
            })
            .unwrap()
    });
    assert!(
        matches!(
            out[0],
            Err(CommError::Deadlock {
                rank: 0,
                peer: 1,
                ..
            })
        ),
        "{:?}",
        out[0]
    );
    assert_eq!(
        out[1],
        Err(CommError::Deadlock {
            rank: 1,
            peer: 0,
            tag: 5
        })
    );
}
