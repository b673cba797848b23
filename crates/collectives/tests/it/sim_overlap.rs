//! The `sim` backend prices calls in flight at the same time together (link sharing
//! across calls): references are fabric-sim's own pricing of the calls' schedules, alone
//! (`price_schedule`) or together (`price_concurrent`), from the entry clocks the ranks
//! record themselves.

use castack_test_support::watchdog::watchdog;

use castack_collectives::fabric_sim::{
    ComputeCost, Fabric, Mechanism, MemoryKind, Placement, PriceSchedule, SimTime,
};
use castack_collectives::schedule::{Arrival, Combine, Put};
use castack_collectives::sim::{price_schedule, SimOptions, SimUniverse};
use castack_collectives::{
    AllreduceAlgo, CommError, Communicator, ComputeWork, Datatype, Op, PersistentCollective,
    RankSchedule, Reduction, Schedule, Step,
};

fn peach2() -> Fabric {
    Fabric::preset("peach2").unwrap()
}

const SUM: Reduction = Reduction {
    op: Op::Sum,
    datatype: Datatype::F64,
};

/// Values per allreduce: 512 KiB, long enough for the links to be the bottleneck.
const LEN: usize = 1 << 16;

/// Compute before the second call, per rank: `r * 3 us` of host streaming.
fn skew(r: usize) -> ComputeWork {
    ComputeWork {
        bytes: 179_100 * r as u64,
        flops: 0,
        launches: 0,
        ..ComputeWork::default()
    }
}

fn sched(p: usize, algo: AllreduceAlgo) -> PriceSchedule {
    price_schedule(&algo.schedule(p, LEN * 8, SUM), MemoryKind::Host)
}

fn alone(p: usize, algo: AllreduceAlgo, start: &[SimTime]) -> Vec<SimTime> {
    peach2()
        .price_schedule(
            &sched(p, algo),
            &Placement::one_per_node(p, MemoryKind::Host),
            start,
            Mechanism::Auto,
        )
        .unwrap()
}

fn joint(p: usize, calls: &[(AllreduceAlgo, &[SimTime])]) -> Vec<Vec<SimTime>> {
    let scheds: Vec<PriceSchedule> = calls.iter().map(|(a, _)| sched(p, *a)).collect();
    let runs: Vec<(&PriceSchedule, &[SimTime])> = scheds
        .iter()
        .zip(calls)
        .map(|(s, (_, start))| (s, *start))
        .collect();
    peach2()
        .price_concurrent(
            &runs,
            &Placement::one_per_node(p, MemoryKind::Host),
            Mechanism::Auto,
        )
        .unwrap()
}

/// What each rank records: (entry clock of the second call, clock after it, final clock).
type Clocks = (SimTime, SimTime, SimTime);

/// Nonblocking allreduce A in flight; `second`: a blocking allreduce B (nested in A), or a
/// nonblocking one started after A and finished after A (interleaved); `leave_first`: the
/// ranks that finish A before entering B.
fn program(
    p: usize,
    a: AllreduceAlgo,
    b: AllreduceAlgo,
    interleaved: bool,
    leave_first: &[usize],
) -> Vec<Clocks> {
    let u = SimUniverse::new(p, peach2(), SimOptions::default()).unwrap();
    let out = watchdog("overlap", || {
        u.run(|c| -> Result<Clocks, CommError> {
            let r = c.rank();
            let mut xa = vec![1.0; LEN];
            let mut xb = vec![2.0; LEN];
            let mut pa = PersistentCollective::allreduce_f64(c, LEN, Op::Sum, a);
            let mut pb = PersistentCollective::allreduce_f64(c, LEN, Op::Sum, b);
            pa.start_f64(c, &mut xa)?;
            let left = leave_first.contains(&r);
            if left {
                pa.finish_f64(c, &mut xa)?;
            }
            c.model_compute(skew(r));
            let entry = c.clock();
            let after_b;
            if interleaved {
                pb.start_f64(c, &mut xb)?;
                if !left {
                    pa.finish_f64(c, &mut xa)?;
                }
                pb.finish_f64(c, &mut xb)?;
                after_b = c.clock();
            } else {
                pb.execute_f64(c, &mut xb)?;
                after_b = c.clock();
                if !left {
                    pa.finish_f64(c, &mut xa)?;
                }
            }
            // The data is right whatever the model says.
            assert!(xa.iter().all(|&v| v == p as f64));
            assert!(xb.iter().all(|&v| v == 2.0 * p as f64));
            Ok((entry, after_b, c.clock()))
        })
    });
    out.unwrap().into_iter().map(Result::unwrap).collect()
}

fn entries(clocks: &[Clocks]) -> Vec<SimTime> {
    clocks.iter().map(|c| c.0).collect()
}

#[test]
fn a_call_started_while_another_is_in_flight_shares_its_links() {
    for (p, a, b) in [
        (4, AllreduceAlgo::Ring, AllreduceAlgo::Ring),
        (
            6,
            AllreduceAlgo::Rabenseifner,
            AllreduceAlgo::RecursiveDoubling,
        ),
    ] {
        let got = program(p, a, b, false, &[]);
        let zero = vec![0.0; p];
        let entry = entries(&got);
        let want = joint(p, &[(a, &zero), (b, &entry)]);
        let (a_alone, b_alone) = (alone(p, a, &zero), alone(p, b, &entry));
        for r in 0..p {
            // B is priced with A: exactly the joint run's completion.
            assert_eq!(got[r].1, want[1][r].max(entry[r]), "p={p} rank {r}: B");
            // Every rank was inside A when it entered B: A's completion moves to the later
            // of alone and joint.
            let a_done = a_alone[r].max(want[0][r]);
            assert_eq!(got[r].2, got[r].1.max(a_done), "p={p} rank {r}: A");
        }
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        assert!(
            max(&want[1]) > max(&b_alone) * 1.05,
            "p={p}: B shares links with A, so it finishes later than alone ({} vs {})",
            max(&want[1]),
            max(&b_alone)
        );
        assert!(max(&want[0]) > max(&a_alone), "p={p}: A is slowed by B too");
    }
}

#[test]
fn interleaved_calls_are_priced_together_and_repeat_to_the_bit() {
    // start A, start B, finish A, finish B: leaving A waits until B is priced, so the result
    // does not depend on which thread gets there first.
    let (p, a, b) = (5, AllreduceAlgo::Ring, AllreduceAlgo::Rabenseifner);
    let runs: Vec<Vec<Clocks>> = (0..4).map(|_| program(p, a, b, true, &[])).collect();
    let bits = |v: &Vec<Clocks>| -> Vec<[u64; 3]> {
        v.iter()
            .map(|c| [c.0.to_bits(), c.1.to_bits(), c.2.to_bits()])
            .collect()
    };
    for run in &runs[1..] {
        assert_eq!(bits(run), bits(&runs[0]), "clocks differ between runs");
    }
    let got = &runs[0];
    let zero = vec![0.0; p];
    let entry = entries(got);
    let want = joint(p, &[(a, &zero), (b, &entry)]);
    let a_alone = alone(p, a, &zero);
    for r in 0..p {
        let a_done = a_alone[r].max(want[0][r]);
        assert_eq!(got[r].2, a_done.max(entry[r]).max(want[1][r]), "rank {r}");
    }
}

/// One `bytes`-long put from rank `from` to rank `to` of `p`; the other ranks do nothing.
fn stream(p: usize, from: usize, to: usize, bytes: usize) -> Schedule {
    let mut ranks = vec![RankSchedule::default(); p];
    ranks[from].steps.push(Step {
        puts: vec![Put {
            to,
            src: 0..bytes,
            dst_offset: 0,
        }],
        ..Step::default()
    });
    ranks[to].steps.push(Step {
        arrivals: vec![Arrival {
            from,
            dst_offset: 0,
            len: bytes,
            combine: Combine::Copy,
        }],
        ..Step::default()
    });
    let sched = Schedule {
        ranks,
        buffer_bytes: vec![bytes; p],
    };
    sched.validate().unwrap();
    sched
}

#[test]
fn a_call_some_rank_has_left_is_background_with_its_completions_kept() {
    // A and B each stream 512 KiB from rank 1 to rank 2. Rank 0, which has nothing to do in
    // A, finishes A before entering B; ranks 1 and 2 enter B with A in flight. A still loads
    // the link in B's run, but its published completions stay those of A alone.
    let (p, bytes) = (3, LEN * 8);
    let sched = stream(p, 1, 2, bytes);
    let program = || {
        let u = SimUniverse::new(p, peach2(), SimOptions::default()).unwrap();
        let out = watchdog("background", || {
            u.run(|c| -> Result<Clocks, CommError> {
                let r = c.rank();
                let mut xa = vec![r as u8 + 1; bytes];
                let mut xb = vec![r as u8 + 11; bytes];
                let mut pa = PersistentCollective::new(sched.ranks[r].clone(), bytes);
                let mut pb = PersistentCollective::new(sched.ranks[r].clone(), bytes);
                pa.start_bytes(c, &mut xa)?;
                if r == 0 {
                    pa.finish_bytes(c, &mut xa)?;
                }
                c.model_compute(skew(r));
                let entry = c.clock();
                pb.execute_bytes(c, &mut xb)?;
                let after_b = c.clock();
                if r != 0 {
                    pa.finish_bytes(c, &mut xa)?;
                }
                if r == 2 {
                    assert!(xa.iter().all(|&v| v == 2) && xb.iter().all(|&v| v == 12));
                }
                Ok((entry, after_b, c.clock()))
            })
        });
        out.unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<Clocks>>()
    };
    let runs: Vec<Vec<Clocks>> = (0..3).map(|_| program()).collect();
    for run in &runs[1..] {
        assert_eq!(run, &runs[0], "clocks differ between runs");
    }
    let got = &runs[0];
    let (zero, entry) = (vec![0.0; p], entries(got));
    let fabric = peach2();
    let place = Placement::one_per_node(p, MemoryKind::Host);
    let ps = price_schedule(&sched, MemoryKind::Host);
    let a_alone = fabric
        .price_schedule(&ps, &place, &zero, Mechanism::Auto)
        .unwrap();
    let b_alone = fabric
        .price_schedule(&ps, &place, &entry, Mechanism::Auto)
        .unwrap();
    let want = fabric
        .price_concurrent(&[(&ps, &zero), (&ps, &entry)], &place, Mechanism::Auto)
        .unwrap();
    for r in 0..p {
        assert_eq!(got[r].1, want[1][r].max(entry[r]), "rank {r}: B");
        assert_eq!(got[r].2, got[r].1.max(a_alone[r]), "rank {r}: A kept");
    }
    // Rank 1's DMA engine and link are shared: B's stream, posted 3 us after A's, lands
    // only after A's (about twice as late as alone); A is not made earlier.
    assert!(
        want[1][2] > b_alone[2] * 1.5,
        "{} vs {}",
        want[1][2],
        b_alone[2]
    );
    assert!(want[0][2] >= a_alone[2]);
}

#[test]
fn calls_that_do_not_overlap_in_modeled_time_are_priced_alone() {
    // Blocking A, a long compute, then nonblocking B started while a tiny nonblocking C
    // that ended long before is still open on every rank: C does not overlap B in modeled
    // time, so B is priced alone, bit for bit.
    let p = 4;
    let a = AllreduceAlgo::Ring;
    let u = SimUniverse::new(p, peach2(), SimOptions::default()).unwrap();
    let got = watchdog("alone", || {
        u.run(|c| -> Result<(SimTime, SimTime), CommError> {
            let mut x = vec![1.0; LEN];
            let mut y = [1.0];
            let mut pc =
                PersistentCollective::allreduce_f64(c, 1, Op::Sum, AllreduceAlgo::Dissemination);
            let mut pb = PersistentCollective::allreduce_f64(c, LEN, Op::Sum, a);
            pc.start_f64(c, &mut y)?;
            c.model_compute(ComputeWork {
                bytes: 59_700_000,
                flops: 0,
                launches: 0,
                ..ComputeWork::default()
            });
            let entry = c.clock();
            pb.start_f64(c, &mut x)?;
            pc.finish_f64(c, &mut y)?;
            pb.finish_f64(c, &mut x)?;
            Ok((entry, c.clock()))
        })
    })
    .unwrap();
    let got: Vec<(SimTime, SimTime)> = got.into_iter().map(Result::unwrap).collect();
    let entry: Vec<SimTime> = got.iter().map(|g| g.0).collect();
    let want = alone(p, a, &entry);
    let host = peach2()
        .compute_time(
            MemoryKind::Host,
            ComputeCost {
                bytes: 59_700_000,
                flops: 0,
                launches: 0,
                ..ComputeCost::default()
            },
        )
        .unwrap();
    for r in 0..p {
        assert_eq!(entry[r], host, "rank {r}");
        assert_eq!(got[r].1, want[r], "rank {r}");
    }
}
