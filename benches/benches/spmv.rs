//! SpMV and one CG iteration on 3-D Poisson with 1M rows, next to a STREAM triad as the
//! memory-bandwidth reference of the same run.
//!
//! Inputs: `gen::poisson3d(100)` (1,000,000 rows, 6,940,000 entries, ranks 1, halo mode,
//! built through `DistCsr::from_global` on a one-rank `ThreadUniverse`); triad vectors of
//! `2^24` f64 (128 MiB each). Threads {1, 2}: 1 is `Cpu::sequential`, 2 a rayon pool of 2.
//! All setup is outside the timed closures.
//!
//! Groups (criterion reports GiB/s from `Throughput::Bytes`; `bandwidth_ratio` prints GB/s):
//! - `triad/<threads>`: `a[i] = b[i] + s * c[i]` in fixed chunks over the pool; 24 B per
//!   element, as STREAM counts (no write-allocate).
//! - `spmv/<threads>`: the CPU device's SpMV kernel on the local CSR block; effective bytes
//!   `8 nnz + 4 nnz + 8 (n + 1) + 8 n (x) + 8 n (y)`, whatever the kernel stores.
//! - `iteration/<method>/<threads>`: one iteration of `cg`, `ccg` and `pipecg`
//!   (Jacobi-scaled, the default settings). Measured as a DIFFERENCE: each criterion
//!   iteration times `solve(b)` with `max_iter = 10` and with `max_iter = 0` on two
//!   identical solvers and adds `(t10 - t0) / 10`, so the per-solve setup (scaling `b`,
//!   allocating and first-touching the work vectors, `||b||`, the initial residual and
//!   image) and the final true-residual check cancel out and only the 10 loop iterations
//!   remain. Setup checks that the first solve really stops after 10 iterations.
//!   Throughput counts the bytes of the method's module doc, as the planner adds them up
//!   from the device work formulas ([`castack_plan::cost::outer_step`]): the SpMV's
//!   bytes plus its fused vector passes (cg `12 nnz + 88 n`, ccg `12 nnz + 96 n`, pipecg
//!   `12 nnz + 136 n` with 8-byte row pointers), so its GiB/s next to `triad` says how
//!   close an iteration runs to the memory bandwidth, and a GiB/s above `triad` would say
//!   the count misses bytes the iteration moves.
//!
//! The ratio SpMV / triad is printed by the `bandwidth_ratio` bench
//! (`cargo bench -p benches --bench bandwidth_ratio`), which times both interleaved with
//! best-of-N; this file gives criterion's statistics for the same kernels.
//!
//! Run: `cargo bench -p benches --bench spmv` (about a minute on 2 cores, after the build).

use std::hint::black_box;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use benches::{cpu, pool, LocalSpmv, Triad, POISSON_N, THREADS};
use castack_collectives::{ThreadComm, ThreadUniverse};
use castack_krylov::sparse::gen;
use castack_krylov::work;
use castack_krylov::{DistCsr, Method, Partition, Solver, SolverConfig, SpmvMode, StopReason};
use castack_plan::cost;
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};

/// Iterations per timed solve of `iteration`.
const CG_ITERS: usize = 10;

/// The methods `iteration` times.
const METHODS: &[Method] = &[Method::Cg, Method::Ccg, Method::Pipecg];

fn triad(c: &mut Criterion) {
    let mut group = c.benchmark_group("triad");
    for &threads in THREADS {
        let mut t = Triad::new(pool(threads));
        group.throughput(Throughput::Bytes(t.bytes()));
        group.bench_function(BenchmarkId::from_parameter(threads), |bch| {
            bch.iter(|| {
                t.run(black_box(3.0));
                black_box(t.probe())
            })
        });
    }
    group.finish();
}

fn spmv(c: &mut Criterion) {
    let mut m = LocalSpmv::poisson3d(POISSON_N).expect("cannot build the Poisson matrix");
    let mut group = c.benchmark_group("spmv");
    group.throughput(Throughput::Bytes(m.bytes()));
    for &threads in THREADS {
        let mut cpu = cpu(pool(threads).as_ref());
        group.bench_function(BenchmarkId::from_parameter(threads), |bch| {
            bch.iter(|| {
                m.run(&mut cpu);
                black_box(m.probe())
            })
        });
    }
    group.finish();
}

fn iteration(c: &mut Criterion) {
    let a = gen::poisson3d(POISSON_N).expect("cannot build the Poisson matrix");
    let part = Partition::rows(a.rows(), 1);
    let distribute = |comm: &ThreadComm| {
        DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)
            .expect("cannot distribute the matrix")
    };
    let mut group = c.benchmark_group("iteration");
    group.sampling_mode(SamplingMode::Flat);
    group.measurement_time(Duration::from_secs(6));
    for (&method, &threads) in METHODS
        .iter()
        .flat_map(|m| THREADS.iter().map(move |t| (m, t)))
    {
        // The solvers borrow the rank's communicator, so they live on the rank thread of a
        // one-rank universe and time themselves there; criterion (not `Send`) stays on this
        // thread and asks for `iters` iterations over a channel.
        let (ask, asked) = mpsc::channel::<u64>();
        let asked = Mutex::new(asked);
        let (reply, replies) = mpsc::channel::<Reply>();
        std::thread::scope(|s| {
            let rank = s.spawn(|| {
                ThreadUniverse::new(1)
                    .expect("cannot start a one-rank universe")
                    .run(|comm| serve_cg(comm, &distribute, method, threads, &asked, &reply))
                    .expect("the CG bench rank failed")
            });
            let Ok(Reply::Ready { bytes }) = replies.recv() else {
                panic!("the CG bench rank failed during setup")
            };
            group.throughput(Throughput::Bytes(bytes));
            group.bench_function(BenchmarkId::new(method.name(), threads), |bch| {
                bch.iter_custom(|iters| {
                    ask.send(iters).expect("the CG bench rank is gone");
                    match replies.recv() {
                        Ok(Reply::Timed(t)) => t,
                        _ => panic!("the CG bench rank failed"),
                    }
                })
            });
            drop(ask);
            rank.join().expect("the CG bench rank panicked");
        });
    }
    group.finish();
}

/// What the rank thread of `iteration` sends back.
enum Reply {
    /// Set up; throughput bytes of one iteration.
    Ready { bytes: u64 },
    /// Time of the asked number of CG iterations.
    Timed(Duration),
}

/// Set up the two solvers on `comm`, then time iterations until `asked` closes.
fn serve_cg(
    comm: &ThreadComm,
    distribute: &dyn Fn(&ThreadComm) -> DistCsr,
    method: Method,
    threads: usize,
    asked: &Mutex<mpsc::Receiver<u64>>,
    reply: &mpsc::Sender<Reply>,
) {
    let pool = pool(threads);
    let solver = |max_iter: usize| {
        let cfg = SolverConfig {
            method,
            max_iter,
            ..SolverConfig::default()
        };
        Solver::new(comm, distribute(comm), cfg, cpu(pool.as_ref())).expect("cannot set up CG")
    };
    let (mut full, mut empty) = (solver(CG_ITERS), solver(0));
    let a = full.matrix().expect("a CSR matrix");
    let (n, x_len, nnz) = (a.n_local(), a.n_ext(), a.nnz_local());
    let b = vec![1.0; n];
    let r = full.solve(&b, None).expect("CG failed").report;
    assert!(r.iterations == CG_ITERS && r.stop_reason == StopReason::MaxIterations);
    let r = empty.solve(&b, None).expect("CG failed").report;
    assert_eq!(r.iterations, 0);
    // The planner's count of one steady-state iteration (the method's module doc).
    let step = cost::outer_step(method, 1, false);
    let spmv = work::spmv_dot(n, nnz, x_len);
    let bytes = spmv.bytes * step.spmvs as u64 + cost::kernels_work(&step.kernels, n).bytes;
    if reply.send(Reply::Ready { bytes }).is_err() {
        return;
    }
    let asked = asked.lock().expect("channel lock poisoned");
    for iters in asked.iter() {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let t = Instant::now();
            black_box(full.solve(&b, None).expect("CG failed"));
            let t10 = t.elapsed();
            let t = Instant::now();
            black_box(empty.solve(&b, None).expect("CG failed"));
            let t0 = t.elapsed();
            total += t10.saturating_sub(t0) / CG_ITERS as u32;
        }
        if reply.send(Reply::Timed(total)).is_err() {
            return;
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = triad, spmv, iteration
}
criterion_main!(benches);
