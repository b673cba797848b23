//! Every collective operation x every algorithm of its registry (`OpCase::algos`, i.e. the
//! registry's `ALL`: a new algorithm is benched without touching this file) x a few sizes
//! (8 B, 64 KiB, 1 MiB per rank buffer, as `krylov bench collectives` counts them):
//!
//! - `collectives_threads/OP/ALGO/pP/BYTES`: wall time on the threads backend, p = 2 and 4.
//!   Each iteration starts after a barrier (not timed); the reported time is the slowest
//!   rank's sum over the batch, as in `krylov bench collectives`.
//! - `collectives_sim/OP/ALGO/p4/BYTES`: MODELED time on the sim backend (peach2, host
//!   memory) through the [`ModeledTime`] measurement: per iteration the slowest rank's modeled
//!   time, the quantity `krylov bench collectives --backend sim` reports. Every iteration of
//!   a batch really runs (so wall time grows with the batch, which criterion plans its
//!   iteration counts from); the batch's value is the slowest rank's modeled total.
//!
//! - `threads_software/send_recv_self` and `threads_software/allreduce_step_self`: the
//!   threads backend's own cost per message, without a cache-line transfer: one rank sending
//!   8 bytes to itself and receiving them (`isend`, `irecv`, `wait_recv_with`, `wait_send`),
//!   and one persistent schedule step that does the same with a reduction (the step of a
//!   2-rank recursive-doubling allreduce, addressed to itself).
//!
//! Cases come from `castack_collectives::bench_case::OpCase` (the CLI's own case logic); each
//! is verified against its sequential reference once before it is timed.
//!
//! Run: `cargo bench -p benches --bench collectives -- --quick` (a filter after `--` selects
//! cases, e.g. `allreduce`). Warm-up and measurement times are short by default.

use std::cell::Cell;
use std::hint::black_box;
use std::time::{Duration, Instant};

use castack_collectives::bench_case::OpCase;
use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{
    Collectives, CommError, Communicator, Datatype, Op, PersistentCollective, RankSchedule,
    Reduction, SimOptions, SimUniverse, Step, ThreadUniverse,
};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Per-rank buffer sizes benched.
const SIZES: &[usize] = &[8, 64 << 10, 1 << 20];
/// Rank counts on the threads backend.
const THREAD_RANKS: &[usize] = &[2, 4];
/// Ranks on the sim backend.
const SIM_RANKS: usize = 4;
/// The fabric of the sim benches.
const SIM_FABRIC: &str = "peach2";
const ROOT: usize = 0;

fn sizes(op: OpCase) -> &'static [usize] {
    if op == OpCase::Barrier {
        &[0]
    } else {
        SIZES
    }
}

/// One rank: build the persistent plan, run `iters` iterations each after a barrier, and
/// return the time `now` says they took in total, and the buffer afterwards.
fn rank_loop<C: Communicator>(
    comm: &C,
    (op, algo, p, bytes): (OpCase, &str, usize, usize),
    iters: u64,
    now: &dyn Fn() -> f64,
) -> Result<(f64, Vec<u8>), CommError> {
    let rank = comm.rank();
    let len = op.buffer_bytes(p, rank, bytes, ROOT);
    let sched = op
        .plan(algo, p, rank, bytes, ROOT)
        .map_err(|e| CommError::InvalidArgument(e.to_string()))?;
    let mut plan = PersistentCollective::new(sched, len);
    let mut buf = vec![0u8; len];
    op.fill(p, rank, bytes, ROOT, &mut buf);
    let mut total = 0.0;
    for _ in 0..iters {
        comm.barrier()?;
        let t = now();
        plan.execute_bytes(comm, black_box(&mut buf))?;
        total += now() - t;
    }
    Ok((total, buf))
}

/// What a universe run of [`rank_loop`] returns: per rank its total time and buffer.
type Ranks = Result<Vec<Result<(f64, Vec<u8>), CommError>>, CommError>;

/// The slowest rank's total, after checking every rank succeeded.
fn slowest(what: &str, out: Ranks) -> f64 {
    let ranks = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    ranks
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: {e}")).0)
        .fold(0.0, f64::max)
}

/// One verified execution on threads: every rank's buffer equals the sequential reference.
fn verify(case: (OpCase, &str, usize, usize)) {
    let (op, algo, p, bytes) = case;
    let what = format!("{op} {algo} p={p} {bytes} B");
    let out = ThreadUniverse::new(p)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .run(|c| rank_loop(c, case, 1, &|| 0.0));
    for (rank, r) in out
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .into_iter()
        .enumerate()
    {
        let (_, buf) = r.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            buf == op.expected(p, rank, bytes, ROOT),
            "{what}: rank {rank} differs from the sequential reference"
        );
    }
}

fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("collectives_threads");
    for &op in OpCase::ALL {
        for algo in op.algos() {
            for &p in THREAD_RANKS {
                for &bytes in sizes(op) {
                    let case = (op, algo, p, bytes);
                    verify(case);
                    group.throughput(Throughput::Bytes(bytes as u64));
                    let id = BenchmarkId::new(format!("{op}/{algo}/p{p}"), bytes);
                    group.bench_function(id, |b| {
                        b.iter_custom(|iters| {
                            let epoch = Instant::now();
                            let now = || epoch.elapsed().as_secs_f64();
                            let u = ThreadUniverse::new(p).unwrap_or_else(|e| panic!("{e}"));
                            let total = slowest(
                                &format!("{op} {algo}"),
                                u.run(|c| rank_loop(c, case, iters, &now)),
                            );
                            Duration::from_secs_f64(total)
                        })
                    });
                }
            }
        }
    }
    group.finish();
}

/// The software cost of one message on the threads backend (module docs): a 1-rank universe
/// sending to itself, so no cache line moves between cores.
fn threads_software(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads_software");
    let run = |iters: u64, step: &(dyn Fn(&castack_collectives::ThreadComm) + Sync)| {
        let u = ThreadUniverse::new(1).unwrap_or_else(|e| panic!("{e}"));
        let t = u.run(|comm| {
            let start = Instant::now();
            for _ in 0..iters {
                step(comm);
            }
            start.elapsed()
        });
        t.unwrap_or_else(|e| panic!("{e}"))[0]
    };
    group.bench_function("send_recv_self", |b| {
        b.iter_custom(|iters| {
            run(iters, &|comm| {
                let mut got = [0u8; 8];
                let s = comm.isend(0, 1, &black_box(1.0f64).to_ne_bytes());
                let s = s.unwrap_or_else(|e| panic!("{e}"));
                let r = comm.irecv(0, 1).unwrap_or_else(|e| panic!("{e}"));
                comm.wait_recv_with(r, &mut |d| {
                    got.copy_from_slice(d);
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{e}"));
                comm.wait_send(s).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(f64::from_ne_bytes(got), 1.0);
            })
        })
    });
    group.bench_function("allreduce_step_self", |b| {
        b.iter_custom(|iters| {
            let u = ThreadUniverse::new(1).unwrap_or_else(|e| panic!("{e}"));
            let t = u.run(|comm| {
                let red = Reduction {
                    op: Op::Sum,
                    datatype: Datatype::F64,
                };
                let mut sched = RankSchedule::default();
                sched.push(Step::new().put(0, 0..8, 0).arrive_reduce(0, 0, 8, red));
                let mut plan = PersistentCollective::new(sched, 8);
                let start = Instant::now();
                for _ in 0..iters {
                    let mut buf = [1.0f64];
                    plan.execute_f64(comm, black_box(&mut buf))
                        .unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(buf[0], 2.0);
                }
                start.elapsed()
            });
            t.unwrap_or_else(|e| panic!("{e}"))[0]
        })
    });
    group.finish();
}

thread_local! {
    /// The modeled clock [`ModeledTime`] reads (seconds): advanced by the benches by the
    /// modeled time of what they ran.
    static MODELED_CLOCK: Cell<f64> = const { Cell::new(0.0) };
}

/// Advance this thread's modeled clock by `seconds`.
fn charge(seconds: f64) {
    MODELED_CLOCK.with(|c| c.set(c.get() + seconds));
}

/// A criterion measurement of MODELED time (seconds of the fabric model), read from a
/// thread-local clock that the benchmark advances; reported in ns/us/ms with "(sim)".
struct ModeledTime;

impl Measurement for ModeledTime {
    type Intermediate = f64;
    type Value = f64;

    fn start(&self) -> f64 {
        MODELED_CLOCK.with(Cell::get)
    }

    fn end(&self, start: f64) -> f64 {
        MODELED_CLOCK.with(Cell::get) - start
    }

    fn add(&self, a: &f64, b: &f64) -> f64 {
        a + b
    }

    fn zero(&self) -> f64 {
        0.0
    }

    /// Nanoseconds, the unit criterion's analysis assumes.
    fn to_f64(&self, v: &f64) -> f64 {
        v * 1e9
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &ModeledFormatter
    }
}

struct ModeledFormatter;

impl ModeledFormatter {
    /// Scale per-second rates of `amount` units per iteration, values being ns per iteration.
    fn rate(
        amount: f64,
        typical: f64,
        values: &mut [f64],
        units: [&'static str; 4],
    ) -> &'static str {
        let per_s = amount * 1e9 / typical;
        let (div, unit) = if per_s < 1e3 {
            (1.0, units[0])
        } else if per_s < 1e6 {
            (1e3, units[1])
        } else if per_s < 1e9 {
            (1e6, units[2])
        } else {
            (1e9, units[3])
        };
        for v in values {
            *v = amount * 1e9 / *v / div;
        }
        unit
    }
}

impl ValueFormatter for ModeledFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical < 1e3 {
            (1.0, "ns(sim)")
        } else if typical < 1e6 {
            (1e3, "us(sim)")
        } else if typical < 1e9 {
            (1e6, "ms(sim)")
        } else {
            (1e9, "s(sim)")
        };
        for v in values {
            *v /= div;
        }
        unit
    }

    fn scale_throughputs(
        &self,
        typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        match *throughput {
            Throughput::Bits(n) => Self::rate(
                n as f64,
                typical,
                values,
                ["b/s(sim)", "Kb/s(sim)", "Mb/s(sim)", "Gb/s(sim)"],
            ),
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) => Self::rate(
                n as f64,
                typical,
                values,
                ["B/s(sim)", "KB/s(sim)", "MB/s(sim)", "GB/s(sim)"],
            ),
            Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => {
                Self::rate(
                    n as f64,
                    typical,
                    values,
                    [
                        "elem/s(sim)",
                        "Kelem/s(sim)",
                        "Melem/s(sim)",
                        "Gelem/s(sim)",
                    ],
                )
            }
        }
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns(sim)"
    }
}

fn sim(c: &mut Criterion<ModeledTime>) {
    let fabric = Fabric::preset(SIM_FABRIC).unwrap_or_else(|e| panic!("{e}"));
    let p = SIM_RANKS;
    let mut group = c.benchmark_group("collectives_sim");
    for &op in OpCase::ALL {
        for algo in op.algos() {
            for &bytes in sizes(op) {
                let case = (op, algo, p, bytes);
                group.throughput(Throughput::Bytes(bytes as u64));
                let id = BenchmarkId::new(format!("{op}/{algo}/p{p}"), bytes);
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let m = ModeledTime;
                        let start = m.start();
                        let u = SimUniverse::new(p, fabric.clone(), SimOptions::default())
                            .unwrap_or_else(|e| panic!("{e}"));
                        // Every iteration timed by the ranks' modeled clocks.
                        let total = slowest(
                            &format!("{op} {algo}"),
                            u.run(|c| {
                                let clock = || c.clock();
                                rank_loop(c, case, iters, &clock)
                            }),
                        );
                        charge(total);
                        m.end(start)
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group! {
    name = wall;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(20))
        .measurement_time(Duration::from_millis(100));
    targets = threads, threads_software
}
criterion_group! {
    name = modeled;
    config = Criterion::default()
        .with_measurement(ModeledTime)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(20))
        .measurement_time(Duration::from_millis(100));
    targets = sim
}
criterion_main!(wall, modeled);
