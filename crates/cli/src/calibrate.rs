//! `krylov calibrate`: measure this machine and write a fabric preset whose device model
//! (`[compute.host]` with its cache levels) and thread-to-thread messages describe it, so
//! that `krylov solve --backend sim --fabric local.toml` predicts this machine's solves.
//!
//! What is measured, on one core (the `--ranks 1 --threads 1` setting the preset models):
//! - cache sizes from the operating system (`/sys/devices/system/cpu/cpu0/cache`): the
//!   private levels of one core and the shared ones whole;
//! - streaming bandwidth (STREAM triad `a = b + s c`, 24 bytes per element as STREAM
//!   counts them) and SpMV bandwidth (the solvers' own CSR kernel, [`Cpu`], on the 7-point
//!   3-D Poisson matrix, bytes as [`work::spmv`] counts them) on working sets from below
//!   the second-level cache to several times the last one, each a matrix and five vectors
//!   cycled through as a solve's loop does ([`level_gbs`]): every point up to the last
//!   cache becomes a `[[compute.host.caches]]` level, the largest gives memory bandwidth;
//! - one core's flop rate: a multiply-add loop with eight independent accumulators on
//!   L1-resident data, compiled as the solvers' kernels are; and the latency of an
//!   addition that waits for the one before (a sum in index order, as the solvers'
//!   reproducible reductions add): the device model's bound on fixed-order sums;
//! - the thread-to-thread latency: half the round trip of a flag passed between two
//!   threads through shared memory (the threads backend's message start);
//! - the host's `launch_us`: what one device operation costs beyond its bytes in the
//!   solvers' operation layer (the call, its metering and timing, the loop's bookkeeping
//!   around it): cg on the 144-row 2-D Poisson matrix, whose kernels take almost no time,
//!   measured per iteration, less the kernels' modeled time, over the operations per
//!   iteration its own work meter counts ([`op_overhead_us`]).
//!
//! Each figure is the median of five timed runs (see [`median_times`] for why not the
//! best), each run long enough to dwarf the clock's resolution. A preset is written only
//! after it parses and validates as every preset does; the file is written atomically.
//!
//! Why hand-written: the kernels measured are the solvers' own or STREAM's, and the
//! output is a castack preset; no crate measures these.
//!
//! Memory: the largest working set is at most 1 GiB and an eighth of the memory budget
//! (half the memory the process may use by default); nothing else grows with the machine.

use std::hint::black_box;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use castack_collectives::fabric_sim::{Fabric, FabricConfig, MemBudget};
use castack_collectives::{CommError, Communicator, SimOptions, SimUniverse, ThreadUniverse};
use castack_krylov::{work, Cpu, Device, HostCsr};
use castack_krylov::{DistCsr, KrylovError, Partition, Solver, SolverConfig, SpmvMode};

use crate::args::{Backend, CalibrateArgs};
use crate::exit::{bad, CliError};
use crate::output::write_atomic;

/// One cache level reported by the operating system.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OsCache {
    /// Level (1, 2, 3).
    pub(crate) level: u32,
    /// Bytes of one instance.
    pub(crate) size: u64,
    /// CPUs sharing one instance.
    pub(crate) shared_by: usize,
}

/// One measured point of the bandwidth curve.
#[derive(Debug, Clone, Copy)]
struct Point {
    bytes: u64,
    triad_gbs: f64,
    spmv_gbs: f64,
}

/// The measurements.
pub(crate) struct Measured {
    caches: Vec<OsCache>,
    points: Vec<Point>,
    memory: Point,
    gflops: f64,
    latency_us: f64,
    /// Per-operation cost of the solvers' operation layer (us).
    pub(crate) launch_us: f64,
    /// Latency of one dependent floating-point addition (ns).
    add_latency_ns: f64,
    cores: usize,
}

impl Measured {
    /// How many of [`Measured::figures`], at its end, are costs (the greater the slower):
    /// the addition latency and the per-operation cost; the others are rates.
    pub(crate) const COSTS: usize = 2;

    /// The measured figures that [`Measured::set_figures`] takes back, in a fixed order
    /// (the same length on every process measuring the same [`Plan`]): to average them over
    /// the ranks of a job.
    pub(crate) fn figures(&self) -> Vec<f64> {
        let mut v = Vec::with_capacity(2 * self.points.len() + 6);
        for p in self.points.iter().chain([&self.memory]) {
            v.extend([p.triad_gbs, p.spmv_gbs]);
        }
        v.extend([self.gflops, self.add_latency_ns, self.launch_us]);
        v
    }

    /// Replace the figures by `v` (as [`Measured::figures`] lists them); `false` when the
    /// length differs.
    pub(crate) fn set_figures(&mut self, v: &[f64]) -> bool {
        if v.len() != 2 * self.points.len() + 5 {
            return false;
        }
        let mut it = v.iter().copied();
        let mut next = || it.next().unwrap_or(f64::NAN);
        for p in self.points.iter_mut().chain([&mut self.memory]) {
            p.triad_gbs = next();
            p.spmv_gbs = next();
        }
        self.gflops = next();
        self.add_latency_ns = next();
        self.launch_us = next();
        true
    }
}

/// The working sets measured: the cache levels' sizes and memory's (bytes).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) sizes: Vec<u64>,
    pub(crate) memory: u64,
}

/// `krylov calibrate`.
pub(crate) fn run(a: &CalibrateArgs) -> Result<ExitCode, CliError> {
    // `--backend mpi` is `calibrate_net`'s, which calls this for the others.
    if a.backend != Backend::Threads {
        return Err(bad(
            "calibrate measures real hardware: --backend threads (this process) or mpi (under mpirun)",
        ));
    }
    if let Some(p) = mpirun_size().filter(|&p| p > 1) {
        // Every process would measure alone and write the same file.
        return Err(bad(format!(
            "this process is one of {p} started by mpirun: add --backend mpi to measure the network between them (rank 0 writes the preset)"
        )));
    }
    let plan = plan(a.quick);
    let mut m = measure(a.quick, &plan, true, &mut || Ok(()))?;
    m.launch_us = launch_us(&m, &a.name, a.quick)?;
    let text = checked(preset(&m, &a.name, None))?;
    write_preset(&text, a.output.as_deref())?;
    summary(&m, a.output.as_deref());
    Ok(ExitCode::SUCCESS)
}

/// The job size an MPI launcher announces to this process (Open MPI, MPICH/PMI), if any.
fn mpirun_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// The per-operation cost of the solvers' operation layer on this process, priced with the
/// kernels of `m` (see [`op_overhead_us`]).
pub(crate) fn launch_us(m: &Measured, name: &str, quick: bool) -> Result<f64, CliError> {
    // The operation overhead needs the preset's own kernel prices (to take them out).
    let kernels = checked(preset(m, name, None))?;
    let kernels = FabricConfig::from_toml_str(&kernels).map_err(|e| {
        CliError::failed(anyhow::anyhow!(
            "calibrate produced an invalid preset (a bug): {e}"
        ))
    })?;
    op_overhead_us(kernels, if quick { 3 } else { 15 })
}

/// `text` if it parses and validates as every preset does (never write one that would not
/// load).
pub(crate) fn checked(text: String) -> Result<String, CliError> {
    match FabricConfig::from_toml_str(&text).and_then(Fabric::new) {
        Ok(_) => Ok(text),
        Err(e) => Err(CliError::failed(anyhow::anyhow!(
            "calibrate produced an invalid preset (a bug): {e}"
        ))),
    }
}

/// Write the preset atomically to `path`, or print it.
pub(crate) fn write_preset(text: &str, path: Option<&Path>) -> Result<(), CliError> {
    match path {
        Some(path) => {
            write_atomic(path, |w| Ok(w.write_all(text.as_bytes())?))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// A few lines on stderr: what was measured.
pub(crate) fn summary(m: &Measured, path: Option<&Path>) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for p in &m.points {
        eprintln!(
            "  {:>9.3} MiB  triad {:>7.1} GB/s  spmv {:>7.1} GB/s",
            mib(p.bytes),
            p.triad_gbs,
            p.spmv_gbs
        );
    }
    eprintln!(
        "  memory ({:.0} MiB): triad {:.1} GB/s, spmv {:.1} GB/s; {:.2} GFlop/s per core; {:.3} ns per dependent add; thread-to-thread {:.3} us (0: not measured); {:.3} us per operation",
        mib(m.memory.bytes),
        m.memory.triad_gbs,
        m.memory.spmv_gbs,
        m.gflops,
        m.add_latency_ns,
        m.latency_us,
        m.launch_us
    );
    if let Some(p) = path {
        eprintln!(
            "use it: krylov solve M.mtx --backend sim --fabric {} --ranks 1 --threads 1",
            p.display()
        );
    }
}

/// The memory point's working set: 8 times the last cache, at least 256 MiB, at most
/// 1 GiB and an eighth of the memory budget (the matrix is built once more on the way).
fn memory_bytes(last_cache: u64, budget: MemBudget) -> u64 {
    (8 * last_cache)
        .clamp(256 << 20, 1 << 30)
        .min(budget.bytes() / 8)
        .max(16 << 20)
}

/// The working sets to measure, from the caches of CPU 0 as the OS lists them.
pub(crate) fn plan(quick: bool) -> Plan {
    let caches = os_caches(Path::new("/sys/devices/system/cpu/cpu0/cache"));
    let last = caches.iter().map(|c| c.size).max();
    // From about half the second level (where the solvers' small problems live) to the
    // whole last level; memory well beyond it.
    let l2 = caches
        .iter()
        .find(|c| c.level == 2)
        .map_or(256 << 10, |c| c.size);
    let (lo, hi) = if quick {
        (64 << 10, 4 << 20)
    } else {
        (
            (l2 / 2).clamp(32 << 10, 64 << 20),
            last.unwrap_or(32 << 20).min(512 << 20),
        )
    };
    let memory = if quick {
        16 << 20
    } else {
        memory_bytes(hi, MemBudget::system_default())
    };
    let mut sizes = Vec::new();
    let mut s = lo.next_power_of_two();
    while s <= hi && s < memory {
        sizes.push(s);
        s *= 2;
    }
    Plan { sizes, memory }
}

/// Measure the working sets of `plan`, the flop rate, the addition latency and, `solo`
/// (this process alone: `krylov calibrate` without MPI), pinned to CPU 0 and with the
/// thread-to-thread latency; not `solo` (one rank of an MPI job measuring beside the
/// others) on the core the launcher gave it, without the thread latency (0), which the
/// network measurement replaces.
///
/// `sync` runs before each measurement (every working set, the memory, the flop rate, the
/// addition latency), as many times on every rank whatever fails: an MPI job's barrier, so
/// that its ranks measure the same thing at the same time, as they run the same phase of
/// an iteration together in a solve (without it their sequences drift apart, and one
/// rank's memory figure was measured beside another's cache-resident one).
pub(crate) fn measure(
    quick: bool,
    plan: &Plan,
    solo: bool,
    sync: &mut dyn FnMut() -> Result<(), CliError>,
) -> Result<Measured, CliError> {
    // The cores this process may use, counted before the pinning below narrows its
    // affinity to one (after it, every machine would count 1 core).
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    // Measure on CPU 0, whose caches the OS lists (a thread that migrated to another kind
    // of core would see other caches); where pinning is refused, measure unpinned.
    if solo {
        pin_to_cpu(0);
    }
    let caches = os_caches(Path::new("/sys/devices/system/cpu/cpu0/cache"));
    let budget = if quick { 0.002 } else { 0.1 };
    let (sizes, memory) = (plan.sizes.clone(), plan.memory);
    let point = |bytes: u64| -> Result<Point, CliError> {
        let (triad_gbs, spmv_gbs) = level_gbs(bytes, budget)?;
        Ok(Point {
            bytes,
            triad_gbs,
            spmv_gbs,
        })
    };
    // Every step synchronised, even after a failure (the others still wait for it).
    let mut failure: Option<CliError> = None;
    let mut step = |f: &mut dyn FnMut() -> Result<(), CliError>| {
        let done = sync().and_then(|()| match failure {
            None => f(),
            Some(_) => Ok(()),
        });
        if let Err(e) = done {
            failure.get_or_insert(e);
        }
    };
    let mut points = Vec::new();
    for bytes in sizes.into_iter().chain([memory]) {
        step(&mut || {
            points.push(point(bytes)?);
            Ok(())
        });
    }
    let (mut gflops, mut add_ns) = (0.0, 0.0);
    step(&mut || {
        gflops = flop_rate(budget);
        Ok(())
    });
    step(&mut || {
        add_ns = add_latency_ns(budget);
        Ok(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let memory = points.pop().expect("the memory point is measured last");
    let add_latency_ns = add_ns;
    let latency_us = if solo {
        thread_latency_us(if quick { 2_000 } else { 20_000 })?
    } else {
        0.0
    };
    for (what, v) in [
        ("flop rate", gflops),
        ("addition latency", add_latency_ns),
        (
            "thread-to-thread latency",
            if solo { latency_us } else { 1.0 },
        ),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(failed(format!("the {what} measured {v}")));
        }
    }
    Ok(Measured {
        caches,
        points,
        memory,
        gflops,
        latency_us,
        launch_us: 0.0,
        add_latency_ns,
        cores,
    })
}

/// Pin the calling thread to `cpu` where the OS allows it (Linux); otherwise nothing.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: `set` is a plain bit set owned here; sched_setaffinity reads it and changes
    // only the calling thread's affinity (pid 0); a refusal leaves it as it was.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A failed measurement (exit 1), one line.
fn failed(msg: String) -> CliError {
    CliError::failed(anyhow::anyhow!("calibrate: {msg}"))
}

/// The caches of one CPU as the OS lists them under `dir` (`index*/{level,type,size,
/// shared_cpu_list}`); data and unified caches only, ascending by level; empty where the
/// OS says nothing.
pub(crate) fn os_caches(dir: &Path) -> Vec<OsCache> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let read = |p: &Path, f: &str| std::fs::read_to_string(p.join(f)).ok();
    let mut out: Vec<OsCache> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("index"))
        })
        .filter_map(|p| {
            let kind = read(&p, "type")?;
            if !matches!(kind.trim(), "Data" | "Unified") {
                return None;
            }
            let level = read(&p, "level")?.trim().parse().ok()?;
            let size = parse_size(read(&p, "size")?.trim())?;
            let shared_by = read(&p, "shared_cpu_list").map_or(1, |l| cpu_count(l.trim()));
            Some(OsCache {
                level,
                size,
                shared_by,
            })
        })
        .collect();
    out.sort_by_key(|c| (c.level, c.size));
    out
}

/// `48K`, `1024K`, `32M`, `1G` or plain bytes.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// CPUs in a list such as `0-3,8,10-11`.
pub(crate) fn cpu_count(list: &str) -> usize {
    list.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 1,
            },
            None => 1,
        })
        .sum::<usize>()
        .max(1)
}

/// Median of 5 timed runs, each at least `budget` seconds of `f`, of the seconds per call
/// of the two timed parts `f` reports (`f` returns the seconds of each part of one call).
///
/// The median, not STREAM's best: on a shared host the memory bandwidth a run gets varies
/// by tens of percent from one second to the next (10.5 to 16.4 GB/s triad within a
/// minute on the development machine), and the preset is to predict typical solves,
/// which are compared by their median times.
///
/// Each part's time has the cost of one clock reading taken off ([`clock_cost`]): a part of
/// a small working set lasts a few hundred nanoseconds, not much more than two readings.
fn median_times(budget: f64, mut f: impl FnMut() -> [f64; 2]) -> [f64; 2] {
    let clock = clock_cost();
    f(); // first touch, warm the level
    let mut runs = [[0.0f64; 5]; 2];
    for r in 0..5 {
        let t = Instant::now();
        let (mut calls, mut sum) = (0u64, [0.0; 2]);
        while t.elapsed().as_secs_f64() < budget || calls == 0 {
            let [a, b] = f();
            sum[0] += a;
            sum[1] += b;
            calls += 1;
        }
        for (part, s) in runs.iter_mut().zip(sum) {
            part[r] = s / calls as f64;
        }
    }
    runs.map(|mut part| {
        part.sort_by(f64::total_cmp);
        (part[2] - clock).max(part[2] * 0.5)
    })
}

/// Seconds between two back-to-back clock readings (median of 9 batches of 1000): what a
/// timed part's own two readings add to it.
fn clock_cost() -> f64 {
    let mut batches = [0.0f64; 9];
    for b in &mut batches {
        let t = Instant::now();
        let mut last = t;
        for _ in 0..1000 {
            last = black_box(Instant::now());
        }
        *b = (last - t).as_secs_f64() / 1000.0;
    }
    batches.sort_by(f64::total_cmp);
    batches[4]
}

/// Bytes per row of the working set [`level_gbs`] cycles through: the 7-point matrix as
/// its SpMV reads it (about 6.7 entries of 12 bytes and an 8-byte row pointer) and five
/// vectors (the SpMV's input and output, three triad operands).
const SET_BYTES_PER_ROW: u64 = 88 + 5 * 8;

/// (streaming, SpMV) GB/s on a working set of about `bytes`: the 7-point 3-D Poisson
/// matrix and five vectors cycled through as a solve's loop does, each cycle an SpMV with
/// the solvers' own CSR kernel ([`Cpu`], one thread; bytes as [`work::spmv`] counts them)
/// and two STREAM triads (24 bytes per element) over the other vectors. Each part is timed
/// on its own within the cycle, so each meets the cache state the rest of the working set
/// leaves it, as the same kernel in a solve does.
fn level_gbs(bytes: u64, budget: f64) -> Result<(f64, f64), CliError> {
    let rows = (bytes / SET_BYTES_PER_ROW).max(8);
    let n = ((rows as f64).cbrt().round() as usize).max(2);
    let fail = |e: String| failed(format!("measuring a working set of {bytes} bytes: {e}"));
    let a = castack_sparse::gen::poisson3d(n).map_err(|e| fail(e.to_string()))?;
    let rows = a.rows();
    let host = HostCsr {
        indptr: a.indptr().raw_storage().to_vec(),
        cols: a.indices().iter().map(|&c| c as u32).collect(),
        vals: a.data().to_vec(),
        ncols: rows,
    };
    drop(a);
    let nnz = host.vals.len();
    let mut dev = Cpu::sequential();
    let dev_err = |e: castack_krylov::DeviceError| fail(e.to_string());
    let m = dev.upload_csr(host).map_err(dev_err)?;
    let x = dev.upload(&vec![1.0; rows]).map_err(dev_err)?;
    let mut y = dev.zeros(rows).map_err(dev_err)?;
    let (mut t1, t2, mut t3) = (vec![0.0f64; rows], vec![1.0f64; rows], vec![2.0f64; rows]);
    // The shapes agree by construction; a kernel error is kept and reported after timing.
    let mut error = None;
    let [spmv, stream] = median_times(budget, || {
        let t = Instant::now();
        if let Err(e) = dev.spmv(&m, rows, &x, &mut y) {
            error = Some(e);
        }
        black_box(&mut y);
        let spmv = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for ((o, b), c) in t1.iter_mut().zip(&t2).zip(&t3) {
            *o = b + 3.0 * c;
        }
        black_box(&mut t1);
        for ((o, b), c) in t3.iter_mut().zip(&y).zip(&x) {
            *o = b + 1e-3 * c;
        }
        black_box(&mut t3);
        [spmv, t.elapsed().as_secs_f64()]
    });
    if let Some(e) = error {
        return Err(dev_err(e));
    }
    let gbs = (
        2.0 * 24.0 * rows as f64 / stream / 1e9,
        work::spmv(rows, nnz, rows).bytes as f64 / spmv / 1e9,
    );
    if [gbs.0, gbs.1].iter().all(|g| g.is_finite() && *g > 0.0) {
        Ok(gbs)
    } else {
        Err(fail(format!("bandwidths {gbs:?} GB/s")))
    }
}

/// The cost of one device operation of the solvers beyond its bytes, microseconds: cg on
/// the 2-D Poisson matrix of 12 x 12 rows (its kernels move about 25 KB per iteration,
/// L1/L2-resident), the median over `solves` solves of the measured seconds per iteration,
/// less what `kernels` (the preset being written, with no launch cost) prices the same
/// iteration at, divided by the operations per iteration that a modeled solve with a
/// 1-microsecond launch and free kernels counts. At least 0.
fn op_overhead_us(kernels: FabricConfig, solves: usize) -> Result<f64, CliError> {
    let fail = |e: String| {
        CliError::failed(anyhow::anyhow!(
            "calibrate: measuring the operation overhead: {e}"
        ))
    };
    let a = castack_sparse::gen::poisson2d(12).map_err(|e| fail(e.to_string()))?;
    let cfg = SolverConfig {
        tol: 1e-12,
        ..SolverConfig::default()
    };
    let part = Partition::rows(a.rows(), 1);
    let b = vec![1.0; a.rows()];
    // Seconds per iteration of one solve on `comm`.
    let per_iteration = |comm: &dyn Communicator| -> Result<f64, KrylovError> {
        let d = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
        let mut s = Solver::new(comm, d, cfg.clone(), Cpu::sequential())?;
        let r = s.solve(&b, None)?.report;
        Ok(r.time_s / r.iterations.max(1) as f64)
    };
    let first = |r: Result<Vec<Result<f64, KrylovError>>, CommError>| -> Result<f64, CliError> {
        r.map_err(|e| fail(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| fail("no rank".into()))?
            .map_err(|e| fail(e.to_string()))
    };
    let threads = ThreadUniverse::new(1).map_err(|e| fail(e.to_string()))?;
    let mut measured = (0..solves.max(1))
        .map(|_| first(threads.run(|c| per_iteration(c))))
        .collect::<Result<Vec<_>, _>>()?;
    measured.sort_by(f64::total_cmp);
    let measured = measured[measured.len() / 2];
    let modeled = |cfg: FabricConfig| -> Result<f64, CliError> {
        let fabric = Fabric::new(cfg).map_err(|e| fail(e.to_string()))?;
        let sim =
            SimUniverse::new(1, fabric, SimOptions::default()).map_err(|e| fail(e.to_string()))?;
        first(sim.run(|c| per_iteration(c)))
    };
    let kernel_s = modeled(kernels.clone())?;
    // Kernels as fast as a preset may make them (the top of the rates' physical range,
    // `fabric_sim::RATE_RANGE`), 1 us per launch: the modeled seconds are 1e-6 times the
    // launches, plus the kernels' own time, which that range keeps below a nanosecond per
    // launch here (the solve's vectors have 144 entries).
    let mut unit = kernels;
    if let Some(c) = unit.compute.as_mut() {
        c.host.launch_us = 1.0;
        c.host.mem_bandwidth_gbs = castack_collectives::fabric_sim::RATE_RANGE.1;
        c.host.spmv_bandwidth_gbs = None;
        c.host.add_latency_ns = None;
        c.host.gflops = 10.0 * castack_collectives::fabric_sim::RATE_RANGE.1;
        c.host.caches.clear();
    }
    let launches = modeled(unit)? * 1e6;
    if launches.is_nan() || launches <= 0.0 {
        return Err(fail("the modeled solve counted no operation".into()));
    }
    Ok(((measured - kernel_s) * 1e6 / launches).max(0.0))
}

/// One core's latency of a floating-point addition that waits for the one before, ns: a
/// sum of an L1-resident array in index order (one accumulator, as the solvers' ordered
/// sums; the compiler may not reorder it).
fn add_latency_ns(budget: f64) -> f64 {
    let x: Vec<f64> = (0..1024).map(|i| 1.0 + i as f64 * 1e-9).collect();
    let mut sum = 0.0f64;
    let [t, _] = median_times(budget, || {
        let t = Instant::now();
        for _ in 0..16 {
            for v in black_box(&x) {
                sum += v;
            }
        }
        black_box(&mut sum);
        [t.elapsed().as_secs_f64(), 0.0]
    });
    t / (16.0 * x.len() as f64) * 1e9
}

/// One core's multiply-add rate, GFlop/s: eight independent accumulators over a 2 KiB
/// array (L1-resident), 2 flops per element.
fn flop_rate(budget: f64) -> f64 {
    let x: Vec<f64> = (0..256).map(|i| 1.0 + i as f64 * 1e-9).collect();
    let mut acc = [0.0f64; 8];
    // 64 passes per timed part: some microseconds, far above the clock's cost.
    let [t, _] = median_times(budget, || {
        let t = Instant::now();
        for _ in 0..64 {
            for c in black_box(&x).chunks_exact(8) {
                for (s, v) in acc.iter_mut().zip(c) {
                    *s = *s * 0.999_999 + v;
                }
            }
        }
        black_box(&mut acc);
        [t.elapsed().as_secs_f64(), 0.0]
    });
    64.0 * 2.0 * x.len() as f64 / t / 1e9
}

/// Half the round trip of a flag passed `trips` times between two threads (microseconds).
/// The waits spin, yielding now and then so that one core can run both threads.
fn thread_latency_us(trips: u64) -> Result<f64, CliError> {
    let flag = Arc::new(AtomicU64::new(0));
    let wait = |flag: &AtomicU64, want: u64| {
        let mut spins = 0u32;
        while flag.load(Ordering::Acquire) != want {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    };
    let other = Arc::clone(&flag);
    let echo = std::thread::Builder::new()
        .name("calibrate-echo".into())
        .spawn(move || {
            // The other core where there is one (the measuring thread is on CPU 0).
            pin_to_cpu(1);
            for i in 0..trips {
                wait(&other, 2 * i + 1);
                other.store(2 * i + 2, Ordering::Release);
            }
        })
        .map_err(|e| failed(format!("starting a thread for the latency: {e}")))?;
    let t = Instant::now();
    for i in 0..trips {
        flag.store(2 * i + 1, Ordering::Release);
        wait(&flag, 2 * i + 2);
    }
    let secs = t.elapsed().as_secs_f64();
    echo.join()
        .map_err(|_| failed("the latency thread failed".into()))?;
    Ok(secs / (2 * trips) as f64 * 1e6)
}

/// The OS level that holds a working set of `bytes` as one core sees it: "L<n>".
fn level_name(caches: &[OsCache], bytes: u64) -> String {
    caches
        .iter()
        .filter(|c| c.level >= 2)
        .find(|c| bytes <= c.size)
        .map_or_else(|| "memory".to_string(), |c| format!("L{}", c.level))
}

/// The network part of a preset measured under MPI (`calibrate_net.rs`).
pub(crate) struct Network {
    /// Comment lines for the preset's head (each starts with `# `): how and where the
    /// figures were measured.
    pub(crate) header: Vec<String>,
    /// The preset's description.
    pub(crate) description: String,
    /// TOML from `forward_us` through `[two_sided]` and `[software]`, every value commented.
    pub(crate) body: String,
}

/// The preset's TOML text, every value traced in a comment: `net` where the network was
/// measured under MPI, else this machine's threads exchanging through shared memory.
pub(crate) fn preset(m: &Measured, name: &str, net: Option<&Network>) -> String {
    let host = hostname();
    let when = utc_now();
    let cpu = cpu_model().unwrap_or_else(|| "unknown CPU".to_string());
    let caches = if m.caches.is_empty() {
        "the OS lists no caches".to_string()
    } else {
        m.caches
            .iter()
            .map(|c| {
                format!(
                    "L{} {} KiB (shared by {} CPUs)",
                    c.level,
                    c.size >> 10,
                    c.shared_by
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mem = m.memory;
    let mut s = String::new();
    let mut line = |l: String| {
        s.push_str(&l);
        s.push('\n');
    };
    line(format!(
        "# This machine, measured by `krylov calibrate` (castack {}) on host {host} at {when}.",
        env!("CARGO_PKG_VERSION")
    ));
    line(format!(
        "# CPU: {cpu}, {} cores; caches of CPU 0 (OS): {caches}.",
        m.cores
    ));
    for l in [
        "# Every figure below is a measurement of that run on one core (bandwidths and flop rate:",
        "# medians of 5 timed runs; launch_us: from a 144-row cg solve, see its comment), except",
        "# where a comment says \"documented choice\". Nothing is fitted to the solves it predicts.",
    ] {
        line(l.into());
    }
    if let Some(net) = net {
        for l in &net.header {
            line(l.clone());
        }
    }
    line(format!("name = {}", toml_str(name)));
    let description = match net {
        Some(net) => net.description.clone(),
        None => format!(
            "{cpu} ({} cores), measured by krylov calibrate on {host}",
            m.cores
        ),
    };
    line(format!("description = {}", toml_str(&description)));
    line(String::new());
    if let Some(net) = net {
        s.push_str(&net.body);
        compute_host(m, &mut s);
        return s;
    }
    line(
        "# Ranks of one machine exchange messages through shared memory: no switch to cross."
            .into(),
    );
    line("forward_us = 0.0".into());
    line(String::new());
    line(
        "# A message is a copy through memory: documented choice, the measured memory triad."
            .into(),
    );
    line("[[ports]]".into());
    line("name = \"shm\"".into());
    line(format!("bandwidth_gbs = {:.3}", mem.triad_gbs));
    line("latency_us = 0.0".into());
    line(String::new());
    line("# Every rank (thread) of this machine reaches every other directly.".into());
    line("[topology]".into());
    line("kind = \"crossbar\"".into());
    line(format!("nodes = {}", m.cores.max(2)));
    line("port = \"shm\"".into());
    line(String::new());
    line("[memory.host]".into());
    line(format!("read_gbs = {:.3}", mem.triad_gbs));
    line(format!("write_gbs = {:.3}", mem.triad_gbs));
    line(String::new());
    line("# start_us: measured thread-to-thread latency (half the round trip of a flag).".into());
    line("[dma]".into());
    line("devices = 1".into());
    line("channels = 1".into());
    line("chaining = false".into());
    line("queue_per_peer = true".into());
    line(format!("start_us = {:.4}", m.latency_us));
    line("descriptor_us = 0.0".into());
    line("descriptor_fetch_us = 0.0".into());
    line(String::new());
    line("[two_sided]".into());
    line("notify = false".into());
    line(String::new());
    compute_host(m, &mut s);
    s
}

/// The `[compute.host]` section with its cache levels.
fn compute_host(m: &Measured, s: &mut String) {
    let mem = m.memory;
    let mut line = |l: String| {
        s.push_str(&l);
        s.push('\n');
    };
    line(format!(
        "# Memory: a working set of {} MiB (beyond the caches, except with --quick), cycled through.",
        mem.bytes >> 20
    ));
    line(
        "# gflops: one core's multiply-add rate on L1-resident data. launch_us: the cost of one"
            .into(),
    );
    line("# device operation of the solvers beyond its bytes (cg on a 144-row matrix, per operation).".into());
    line(
        "# add_latency_ns: one addition waiting for the one before (a sum in index order, L1)."
            .into(),
    );
    line("[compute.host]".into());
    line(format!("mem_bandwidth_gbs = {:.3}", mem.triad_gbs));
    line(format!("spmv_bandwidth_gbs = {:.3}", mem.spmv_gbs));
    line(format!("gflops = {:.3}", m.gflops));
    line(format!("add_latency_ns = {:.4}", m.add_latency_ns));
    line(format!("launch_us = {:.4}", m.launch_us));
    for p in &m.points {
        line(String::new());
        line(format!(
            "# A working set of {} KiB (matrix and five vectors cycled through): triad and SpMV.",
            p.bytes >> 10
        ));
        line("[[compute.host.caches]]".into());
        line(format!(
            "name = {}",
            toml_str(&level_name(&m.caches, p.bytes))
        ));
        line(format!("size_bytes = {}", p.bytes));
        line(format!("bandwidth_gbs = {:.3}", p.triad_gbs));
        line(format!("spmv_bandwidth_gbs = {:.3}", p.spmv_gbs));
    }
}

/// A TOML basic string.
pub(crate) fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Now in UTC as `YYYY-MM-DDTHH:MM:SSZ` (civil date from days since 1970: H. Hinnant's
/// `civil_from_days`).
pub(crate) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

pub(crate) fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Made-up measurements for tests: two cache levels and memory, one core.
#[cfg(test)]
pub(crate) fn made_up() -> Measured {
    let point = |bytes: u64, t: f64, s: f64| Point {
        bytes,
        triad_gbs: t,
        spmv_gbs: s,
    };
    Measured {
        caches: Vec::new(),
        points: vec![point(1 << 18, 60.0, 20.0), point(1 << 20, 50.0, 18.0)],
        memory: point(256 << 20, 12.0, 8.0),
        gflops: 5.0,
        latency_us: 0.05,
        launch_us: 0.3,
        add_latency_ns: 1.2,
        cores: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_cpu_lists_parse() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(cpu_count("0-3,8,10-11"), 7);
        assert_eq!(cpu_count("5"), 1);
        assert_eq!(cpu_count(""), 1);
    }

    #[test]
    fn a_preset_of_made_up_measurements_loads_with_its_levels() {
        let point = |bytes: u64, t: f64, s: f64| Point {
            bytes,
            triad_gbs: t,
            spmv_gbs: s,
        };
        // No caches from the OS (an odd machine), a name that needs escaping.
        let m = Measured {
            caches: Vec::new(),
            points: vec![point(1 << 18, 60.0, 20.0), point(1 << 20, 50.0, 18.0)],
            memory: point(256 << 20, 12.0, 8.0),
            gflops: 5.0,
            latency_us: 0.05,
            launch_us: 0.3,
            add_latency_ns: 1.2,
            cores: 1,
        };
        let cfg = FabricConfig::from_toml_str(&preset(&m, "a \"b\"", None)).unwrap();
        assert_eq!(cfg.name, "a \"b\"");
        let host = &cfg.compute.as_ref().unwrap().host;
        assert_eq!(host.caches.len(), 2);
        assert_eq!(host.caches[1].size_bytes, 1 << 20);
        assert_eq!(host.caches[1].spmv_bandwidth_gbs, Some(18.0));
        assert_eq!(
            (host.mem_bandwidth_gbs, host.spmv_bandwidth_gbs),
            (12.0, Some(8.0))
        );
        assert_eq!((host.gflops, host.launch_us), (5.0, 0.3));
        assert_eq!(host.add_latency_ns, Some(1.2));
        // One core still makes a two-node crossbar (a fabric needs two nodes).
        let f = Fabric::new(cfg).unwrap();
        assert_eq!(f.nodes(), 2);
        // Without measured levels: memory only.
        let bare = Measured {
            points: Vec::new(),
            ..m
        };
        let cfg = FabricConfig::from_toml_str(&preset(&bare, "x", None)).unwrap();
        assert!(cfg.compute.unwrap().host.caches.is_empty());
    }

    #[test]
    fn the_memory_point_is_bounded() {
        let big = MemBudget::new(64 << 30);
        assert_eq!(memory_bytes(32 << 20, big), 256 << 20);
        assert_eq!(memory_bytes(100 << 20, big), 800 << 20);
        assert_eq!(memory_bytes(1 << 40, big), 1 << 30);
        // A small budget: an eighth of it, at least 16 MiB.
        assert_eq!(memory_bytes(32 << 20, MemBudget::new(1 << 30)), 128 << 20);
        assert_eq!(memory_bytes(32 << 20, MemBudget::new(1 << 20)), 16 << 20);
    }

    #[test]
    fn os_caches_read_a_sysfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |i: usize, level: &str, kind: &str, size: &str, shared: &str| {
            let d = dir.path().join(format!("index{i}"));
            std::fs::create_dir(&d).unwrap();
            for (f, v) in [
                ("level", level),
                ("type", kind),
                ("size", size),
                ("shared_cpu_list", shared),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        mk(0, "1", "Data", "32K", "0");
        mk(1, "1", "Instruction", "32K", "0");
        mk(2, "2", "Unified", "512K", "0");
        mk(3, "3", "Unified", "32768K", "0-7");
        let c = os_caches(dir.path());
        assert_eq!(
            c,
            vec![
                OsCache {
                    level: 1,
                    size: 32 << 10,
                    shared_by: 1
                },
                OsCache {
                    level: 2,
                    size: 512 << 10,
                    shared_by: 1
                },
                OsCache {
                    level: 3,
                    size: 32 << 20,
                    shared_by: 8
                },
            ]
        );
        assert_eq!(level_name(&c, 400 << 10), "L2");
        assert_eq!(level_name(&c, 1 << 20), "L3");
        assert_eq!(level_name(&c, 64 << 20), "memory");
        assert!(os_caches(&dir.path().join("none")).is_empty());
    }
}
