//! `krylov bench collectives`: OSU-style latency tables of every collective algorithm on
//! the threads backend (wall time) or the sim backend (modeled time: the same program, timed
//! by each rank's virtual clock; `--price-only` prices the whole schedule without data or
//! threads). Every algorithm runs from its persistent schedule (built once, as the TCA
//! collectives prepare their descriptors once); each timed iteration starts after a barrier
//! (persistent as well), and the reported time of an iteration is the slowest rank's.

use std::process::ExitCode;

use castack_collectives::bench_case::{CaseAlgo, OpCase};
use castack_collectives::fabric_sim::MemBudget;
use castack_collectives::{
    BarrierAlgo, Collectives, CommError, Communicator, Mapping, Op, PersistentCollective, Schedule,
    SimUniverse,
};

use crate::args::{Backend, BenchCollectivesArgs, Memory};
use crate::budget::{check_buffers, over};
use crate::clock::BenchClock;
use crate::exit::{bad, run_error, CliError};
use crate::fabric::{sim_backend, SimBackend};
use crate::launch::{job_ranks, Job, Ranks};
use crate::output::out;
use crate::plot;
use crate::table::{parse_sizes, print_machine_row, Row, CSV_HEADER};

/// What one `--algo` value runs for the operation: an algorithm of its registry (the
/// case logic, buffers, schedules, inputs and references, lives in
/// [`castack_collectives::bench_case`], shared with the criterion benches), or the MPI
/// library's own collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BenchAlgo {
    /// A registry algorithm, run from its persistent schedule.
    Schedule(CaseAlgo),
    /// The MPI library's own collective (`--algo native`, `--backend mpi` only).
    Native,
}

impl BenchAlgo {
    /// The name in the rows: the registry name, or `native`.
    fn name(self) -> &'static str {
        match self {
            BenchAlgo::Schedule(a) => a.name(),
            BenchAlgo::Native => NATIVE,
        }
    }

    /// The registry algorithm, `None` for `native`.
    fn schedule(&self) -> Option<CaseAlgo> {
        match *self {
            BenchAlgo::Schedule(a) => Some(a),
            BenchAlgo::Native => None,
        }
    }
}

/// One case of the table: the operation, what runs it, the rank count and the bytes per
/// rank buffer (the CLI contract's size).
#[derive(Debug, Clone, Copy)]
struct Case {
    op: OpCase,
    algo: BenchAlgo,
    p: usize,
    bytes: usize,
}

/// The algorithms `--algo` names for `op`: `all` (the registry, and `native` under MPI),
/// one registry name, or `native` (MPI only).
fn chosen_algos(op: OpCase, algo: &str, mpi: bool) -> Result<Vec<BenchAlgo>, CliError> {
    let registry = || op.algorithms().into_iter().map(BenchAlgo::Schedule);
    match algo {
        "all" if mpi => Ok(registry().chain([BenchAlgo::Native]).collect()),
        "all" => Ok(registry().collect()),
        NATIVE if mpi => Ok(vec![BenchAlgo::Native]),
        NATIVE => Err(native_needs_mpi()),
        name => match op.algorithm(name) {
            Ok(a) => Ok(vec![BenchAlgo::Schedule(a)]),
            Err(_) => Err(bad(format!(
                "unknown {} algorithm '{name}' (valid: all, {})",
                op.name(),
                op.algos().join(", ")
            ))),
        },
    }
}

/// `--algo native` without `--backend mpi`.
fn native_needs_mpi() -> CliError {
    bad(format!(
        "--algo {NATIVE} calls the MPI library's own collective: it needs --backend mpi (run under mpirun)"
    ))
}

/// Bytes the `p` ranks of one case of `op` hold at once for `bytes` per rank: each rank's
/// buffer, the messages in flight and received into the schedule's staging (up to a buffer
/// each), and with `--verify` its reference result; `None` on 64-bit overflow.
fn case_bytes(op: OpCase, p: usize, bytes: usize, root: usize, verify: bool) -> Option<u64> {
    let copies = if verify { 4 } else { 3 };
    let mut total = 0u64;
    // Ranks other than the root hold the same buffer: count the root and one other.
    for (rank, count) in [(root, 1u64), ((root + 1) % p, p as u64 - 1)] {
        let len = match op {
            OpCase::Allgather | OpCase::Alltoall => (p as u64).checked_mul(bytes as u64)?,
            OpCase::Scatter | OpCase::Gather if rank == root => {
                (p as u64).checked_mul(bytes as u64)?
            }
            _ => op.buffer_bytes(1, 0, bytes, 0) as u64,
        };
        total = total.checked_add(len.checked_mul(copies)?.checked_mul(count)?)?;
    }
    Some(total)
}

/// Run `krylov bench collectives`.
pub(crate) fn run(args: BenchCollectivesArgs) -> Result<ExitCode, CliError> {
    if args.backend == Backend::Mpi {
        // One rank of an mpirun job.
        return crate::launch::mpi(|job| run_on(args, Some(job)));
    }
    if let Some(path) = &args.plot {
        crate::output::target(path)?;
    }
    run_on(args, None)
}

/// `krylov bench collectives` in this process; `mpi` is this rank's MPI job under
/// `--backend mpi` (P from the job, output on rank 0, `native` offered).
fn run_on(args: BenchCollectivesArgs, mpi: Option<&Job>) -> Result<ExitCode, CliError> {
    let budget = args.budget.resolve()?;
    let sim = match args.backend {
        Backend::Threads | Backend::Mpi => {
            if args.memory == Memory::Device {
                return Err(bad(
                    "--memory device is a modeled GPU endpoint of the sim backend; the threads backend has host memory only",
                ));
            }
            if args.price_only {
                return Err(bad("--price-only needs --backend sim"));
            }
            if let Some(f) = &args.fabric {
                return Err(bad(format!("--fabric {f} applies to --backend sim only")));
            }
            None
        }
        Backend::Sim => Some(sim_backend(
            args.fabric.as_deref(),
            args.memory,
            castack_collectives::SimMechanism::Auto,
            budget,
        )?),
    };
    if args.price_only && args.verify {
        return Err(bad(
            "--verify checks data; --price-only prices the schedule without any",
        ));
    }
    let (iters, warmup) = match &sim {
        None => (args.iters.unwrap_or(100), args.warmup.unwrap_or(10)),
        Some(_) => (args.iters.unwrap_or(1), args.warmup.unwrap_or(0)),
    };
    let mapping: Mapping = args
        .mapping
        .parse()
        .map_err(|e| bad(format!("--mapping: {e}")))?;
    if sim.is_none() && mapping != Mapping::Identity {
        return Err(bad(format!(
            "--mapping {mapping} places ranks on modeled nodes: it needs --backend sim"
        )));
    }
    if args.json && args.csv {
        return Err(bad("--json and --csv are exclusive"));
    }
    let op = args.op;
    let algos = chosen_algos(op, &args.algo, mpi.is_some())?;
    let sizes = if op == OpCase::Barrier {
        vec![0]
    } else {
        parse_sizes(&args.sizes).map_err(|e| bad(format!("--sizes: {e}")))?
    };
    if op.is_reduction() {
        if let Some(s) = sizes.iter().find(|s| **s % 8 != 0) {
            return Err(bad(format!(
                "--sizes: {s} bytes is not a whole number of f64 values ({} reduces f64)",
                op.name()
            )));
        }
    }
    let ranks = match mpi {
        Some(job) => job_ranks(job, args.ranks.as_deref())?,
        None => args.ranks.clone().unwrap_or_else(|| vec![2]),
    };
    let leader = mpi.is_none_or(|job| job.comm().rank() == 0);
    if ranks.contains(&0) {
        return Err(bad("--ranks must be at least 1 (got 0)"));
    }
    if iters == 0 {
        return Err(bad("--iters must be at least 1"));
    }
    if warmup.checked_add(iters).is_none() {
        return Err(bad(format!(
            "--warmup {warmup} plus --iters {iters} exceeds the largest count of iterations ({})",
            usize::MAX
        )));
    }
    if let Some(p) = ranks.iter().find(|&&p| args.root >= p) {
        return Err(bad(format!("--root {} is not a rank of {p}", args.root)));
    }
    // Sizes x ranks x buffers against the budget before any universe or buffer exists
    // (priced schedules carry no data).
    if !args.price_only {
        for &p in &ranks {
            check_buffers(
                budget,
                &format!("{p} ranks"),
                sizes
                    .iter()
                    .map(|&b| case_bytes(op, p, b, args.root, args.verify)),
            )?;
        }
    }
    // Every rank count must fit the fabric before the first row is printed.
    if let Some(s) = &sim {
        for &p in &ranks {
            sim_universe(s, p, mapping)?;
        }
    }
    // A priced schedule's memory grows with its transfers (P^2 for alltoall): every case
    // against the budget before the first row, as the buffers of a run with data are.
    if args.price_only {
        for &p in &ranks {
            for algo in algos.iter().filter_map(BenchAlgo::schedule) {
                for &bytes in &sizes {
                    check_pricing(budget, algo, p, bytes, args.root)?;
                }
            }
        }
    }
    let mut rows = Vec::new();
    let mut failed = false;
    if !leader {
        // Other MPI ranks measure and print nothing.
    } else if args.csv {
        out!("{CSV_HEADER}");
    } else if !args.json {
        match &sim {
            Some(s) if args.price_only => out!(
                "# {} on sim (fabric {}), priced without data: modeled time of the slowest rank",
                op.name(),
                s.name
            ),
            Some(s) => out!(
                "# {} on sim (fabric {}); modeled time per iteration of the slowest rank, {iters} iterations after {warmup} warm-up",
                op.name(),
                s.name
            ),
            None => out!(
                "# {} on {}; times per iteration of the slowest rank, {iters} iterations after {warmup} warm-up",
                op.name(),
                args.backend.name()
            ),
        }
        out!(
            "{:<20} {:>6} {:>10} {:>12} {:>12} {:>12} {:>10} {:>10} {:>9}",
            "algo",
            "ranks",
            "bytes",
            "avg_us",
            "min_us",
            "max_us",
            "GB/s",
            "busbw",
            "verified"
        );
    }
    let bar = crate::output::progress_bar(
        leader,
        ranks.len() * algos.len() * sizes.len(),
        "cases",
        args.json || args.csv,
    );
    for &p in &ranks {
        for &algo in &algos {
            for &bytes in &sizes {
                bar.set_message(format!("{} p={p} {bytes} B", algo.name()));
                let run = Run {
                    iters,
                    warmup,
                    root: args.root,
                    verify: args.verify,
                    sim: sim.as_ref(),
                    mapping,
                };
                let row = match (mpi, algo) {
                    (Some(job), _) => measure_mpi(job, Case { op, algo, p, bytes }, &run),
                    (None, BenchAlgo::Schedule(a)) if args.price_only => {
                        price_only(a, p, bytes, &run)?
                    }
                    (None, BenchAlgo::Schedule(a)) => measure(a, p, bytes, &run)?,
                    (None, BenchAlgo::Native) => return Err(native_needs_mpi()),
                };
                failed |= row.verified == Some(false);
                if leader {
                    bar.suspend(|| print_row(&row, &args));
                }
                bar.inc(1);
                rows.push(row);
            }
        }
    }
    bar.finish_and_clear();
    if let Some(path) = args.plot.as_ref().filter(|_| leader) {
        plot(path, op, &rows)?;
    }
    if failed {
        return Err(CliError::failed(anyhow::anyhow!(
            "--verify: some results differ from the sequential reference"
        )));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_row(r: &Row, args: &BenchCollectivesArgs) {
    let verified = r.verified.map_or("-".to_string(), |v| v.to_string());
    if !print_machine_row(r, args.json, args.csv) {
        out!(
            "{:<20} {:>6} {:>10} {:>12.2} {:>12.2} {:>12.2} {:>10.3} {:>10.3} {:>9}",
            r.algo,
            r.ranks,
            r.bytes,
            r.avg_us,
            r.min_us,
            r.max_us,
            r.bandwidth_gbs,
            r.busbw_gbs,
            verified
        );
    }
}

/// How a case is run: iterations and, on the sim backend, the fabric.
struct Run<'a> {
    iters: usize,
    warmup: usize,
    root: usize,
    verify: bool,
    sim: Option<&'a SimBackend>,
    /// Rank-to-node mapping on `sim`.
    mapping: Mapping,
}

/// The simulated universe of `p` ranks for a case, ranks placed by `mapping`.
fn sim_universe(s: &SimBackend, p: usize, mapping: Mapping) -> Result<SimUniverse, CliError> {
    let mut options = s.options.clone();
    options.nodes = Some(mapping.nodes_on(p, &s.fabric).map_err(CliError::bad)?);
    SimUniverse::new(p, s.fabric.clone(), options).map_err(CliError::bad)
}

/// The `--algo` name of the MPI library's own collective (`--backend mpi` only).
const NATIVE: &str = "native";

/// One rank of a measured case, on any backend: per timed iteration the slowest rank's time
/// (wall time, or the modeled clock where the backend has one), and whether this rank's
/// result matched the reference.
fn rank_times<C: Communicator + ?Sized>(
    comm: &C,
    (algo, p, bytes): (CaseAlgo, usize, usize),
    run: &Run<'_>,
) -> Result<(Vec<f64>, bool), CommError> {
    let op = algo.op();
    let len = op.buffer_bytes(p, comm.rank(), bytes, run.root);
    let mut plan = PersistentCollective::new(algo.plan(p, comm.rank(), bytes, run.root), len);
    rank_times_with(comm, (op, p, bytes), run, &mut |buf| {
        plan.execute_bytes(comm, buf)
    })
}

/// [`rank_times`] with the collective executed by `execute` on this rank's buffer (a
/// persistent schedule, or the MPI library's own collective under `--backend mpi`).
fn rank_times_with<C: Communicator + ?Sized>(
    comm: &C,
    (op, p, bytes): (OpCase, usize, usize),
    run: &Run<'_>,
    execute: &mut dyn FnMut(&mut [u8]) -> Result<(), CommError>,
) -> Result<(Vec<f64>, bool), CommError> {
    let (iters, root) = (run.iters, run.root);
    let clock = BenchClock::new(comm);
    let now = || clock.now();
    let rank = comm.rank();
    let len = op.buffer_bytes(p, rank, bytes, root);
    let expected = run.verify.then(|| op.expected(p, rank, bytes, root));
    let mut buf = vec![0u8; len];
    let mut times = Vec::with_capacity(iters);
    // The barrier runs from a persistent schedule too: a barrier built per call frees its
    // schedule after its last arrival, on the path to the timed call (about 20 ns of an
    // 8-byte allreduce's 200 at 2 ranks).
    let mut barrier =
        PersistentCollective::new(BarrierAlgo::default().rank_schedule(comm.size(), rank), 0);
    for it in 0..run.warmup + iters {
        op.fill(p, rank, bytes, root, &mut buf);
        barrier.execute_bytes(comm, &mut [])?;
        let t = now();
        execute(&mut buf)?;
        let dt = now() - t;
        if it >= run.warmup {
            times.push(dt);
        }
    }
    let ok = expected.as_ref().is_none_or(|e| *e == buf);
    // Slowest rank per iteration: gather every rank's times (outside the timing).
    let mut all = vec![0.0; p * iters];
    comm.allgatherv_f64(&times, &vec![iters; p], &mut all)?;
    let slowest = (0..iters)
        .map(|it| (0..p).map(|r| all[r * iters + it]).fold(0.0, f64::max))
        .collect();
    Ok((slowest, ok))
}

/// Time one (algorithm, ranks, size) case.
fn measure(algo: CaseAlgo, p: usize, bytes: usize, run: &Run<'_>) -> Result<Row, CliError> {
    let (op, name) = (algo.op().name(), algo.name());
    let case = (algo, p, bytes);
    let ranks = match run.sim {
        None => Ranks::threads(p)?,
        Some(s) => Ranks::Sim(sim_universe(s, p, run.mapping)?),
    };
    let per_rank = ranks
        .run(|comm| rank_times(comm, case, run))
        .map_err(|e| run_error(format_args!("{op} {name}"), e))?;
    let mut verified = true;
    let mut slowest = Vec::new();
    for r in per_rank {
        let (times, ok) = r.map_err(|e| CliError::failed(anyhow::anyhow!("{op} {name}: {e}")))?;
        verified &= ok;
        slowest = times;
    }
    let case = Case {
        op: algo.op(),
        algo: BenchAlgo::Schedule(algo),
        p,
        bytes,
    };
    Ok(row(case, &slowest, run, run.verify.then_some(verified)))
}

/// Time one case on this rank of an MPI job (every rank calls it with the same case); a
/// communication failure aborts the job. `--verify` is agreed: the row is verified when
/// every rank's result matched its reference.
fn measure_mpi(job: &Job, case: Case, run: &Run<'_>) -> Row {
    let comm = job.comm();
    let Case { op, algo, p, bytes } = case;
    let failed = |e: CommError| -> ! {
        job.fail(CliError::failed(anyhow::anyhow!(
            "{op:?} {}: {e}",
            algo.name()
        )))
    };
    let measured = match algo {
        BenchAlgo::Native => job.with_native(op, run.root, bytes, |comm, execute| {
            rank_times_with(comm, (op, p, bytes), run, execute)
        }),
        BenchAlgo::Schedule(a) => rank_times(comm, (a, p, bytes), run),
    };
    let (slowest, ok) = measured.unwrap_or_else(|e| failed(e));
    let mut all_ok = [i64::from(ok)];
    comm.allreduce_i64(&mut all_ok, Op::Min)
        .unwrap_or_else(|e| failed(e));
    let mut row = row(case, &slowest, run, run.verify.then_some(all_ok[0] == 1));
    row.backend = "mpi";
    row
}

/// Price one case's whole schedule on the fabric, without data or threads (at each of the
/// universe's noise start times: once, at time 0, without noise).
/// The bytes pricing one transfer of a schedule holds at its peak: the rank schedules, their
/// data-free shapes and the engine's records together. Measured on this machine
/// (2026-11-29, `/usr/bin/time -f %M krylov bench collectives --op alltoall --backend sim
/// --price-only --sizes 8 --fabric tofu-fx10`): peak RSS 1.72 GB at 1536 ranks (2.36 M
/// transfers), 3.04 GB at 2048 (4.19 M), about 725 B per transfer whatever the message
/// size; 800 B keeps a margin.
const PRICE_BYTES_PER_TRANSFER: u64 = 800;

/// Refuse (over the budget, exit 2) a priced case whose schedule's transfers would need more
/// memory than `budget` ([`PRICE_BYTES_PER_TRANSFER`] each). The transfers are counted rank
/// by rank, each rank's plan built and dropped in turn, so the count itself holds one
/// rank's plan at a time (it costs about a fifth of the pricing's time).
fn check_pricing(
    budget: MemBudget,
    algo: CaseAlgo,
    p: usize,
    bytes: usize,
    root: usize,
) -> Result<(), CliError> {
    let transfers: u64 = (0..p)
        .map(|r| {
            let plan = algo.plan(p, r, bytes, root);
            plan.steps.iter().map(|s| s.puts.len() as u64).sum::<u64>()
        })
        .sum();
    budget
        .check_opt(
            format!(
                "pricing {} {} on {p} ranks ({transfers} transfers)",
                algo.op().name(),
                algo.name()
            ),
            transfers.checked_mul(PRICE_BYTES_PER_TRANSFER),
        )
        .map_err(over)
}

fn price_only(algo: CaseAlgo, p: usize, bytes: usize, run: &Run<'_>) -> Result<Row, CliError> {
    let Some(s) = run.sim else {
        return Err(bad("--price-only needs --backend sim"));
    };
    let (op, root) = (algo.op(), run.root);
    let sched = Schedule {
        ranks: (0..p).map(|r| algo.plan(p, r, bytes, root)).collect(),
        buffer_bytes: (0..p).map(|r| op.buffer_bytes(p, r, bytes, root)).collect(),
    };
    let universe = sim_universe(s, p, run.mapping)?;
    // One sample per start time: several over the period on a fabric with noise (the
    // row's avg, min and max are then over where in the period the call runs).
    let mut slowest = Vec::new();
    for t0 in universe.noise_starts() {
        let finish = universe
            .price_concurrent(&[&sched], t0)
            .map_err(|e| CliError::failed(anyhow::anyhow!("{op} {}: {e}", algo.name())))?;
        slowest.push(finish[0].iter().copied().fold(0.0, f64::max) - t0);
    }
    let algo = BenchAlgo::Schedule(algo);
    Ok(row(Case { op, algo, p, bytes }, &slowest, run, None))
}

/// A table row from the slowest rank's time per iteration.
fn row(
    Case { op, algo, p, bytes }: Case,
    slowest: &[f64],
    run: &Run<'_>,
    verified: Option<bool>,
) -> Row {
    let avg = slowest.iter().sum::<f64>() / slowest.len() as f64;
    let min = slowest.iter().copied().fold(f64::INFINITY, f64::min);
    let max = slowest.iter().copied().fold(0.0, f64::max);
    let bw = if avg > 0.0 {
        bytes as f64 / avg / 1e9
    } else {
        0.0
    };
    Row {
        schema_version: 1,
        op: op.name(),
        algo: algo.name(),
        backend: if run.sim.is_some() { "sim" } else { "threads" },
        fabric: run.sim.map(|s| s.name.clone()),
        memory: run.sim.map_or("host", |s| s.memory),
        ranks: p,
        bytes,
        avg_us: avg * 1e6,
        min_us: min * 1e6,
        max_us: max * 1e6,
        bandwidth_gbs: bw,
        busbw_gbs: bw * op.busbw_factor(p),
        modeled: run.sim.is_some(),
        verified,
    }
}

/// Latency (log) against size (log), one line per (algorithm, ranks).
fn plot(path: &std::path::Path, op: OpCase, rows: &[Row]) -> Result<(), CliError> {
    let mut series = plot::Series::new();
    for r in rows.iter().filter(|r| r.bytes > 0 && r.avg_us > 0.0) {
        let label = format!("{} p={}", r.algo, r.ranks);
        plot::push(&mut series, label, (r.bytes as f64, r.avg_us));
    }
    let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let (Some(x), Some(y)) = (
        plot::span(pts().map(|p| p.0), true, 1.0),
        plot::span(pts().map(|p| p.1), true, 1.5),
    ) else {
        return Err(bad("--plot needs at least two non-zero sizes"));
    };
    if x.start >= x.end {
        return Err(bad("--plot needs at least two non-zero sizes"));
    }
    let caption = format!(
        "{} latency ({})",
        op.name(),
        rows.first().map_or("threads", |r| r.backend)
    );
    let chart = plot::Chart {
        caption: &caption,
        x: plot::Axis {
            desc: "size per rank buffer (bytes)",
            log: true,
        },
        y: plot::Axis {
            desc: "latency (time per call, slowest rank)",
            log: true,
        },
    };
    let units = plot::Units {
        x: plot::Unit::Bytes,
        y: plot::Unit::Microseconds,
    };
    plot::write_svg_in(path, chart, units, &series, (x, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_lists_its_registry() {
        for &op in OpCase::ALL {
            assert!(!op.algos().is_empty(), "{}", op.name());
        }
    }

    #[test]
    fn algo_values_resolve_to_typed_algorithms() {
        let op = OpCase::Allreduce;
        let names = |v: Vec<BenchAlgo>| v.into_iter().map(BenchAlgo::name).collect::<Vec<_>>();
        assert_eq!(names(chosen_algos(op, "all", false).unwrap()), op.algos());
        let mut with_native = op.algos();
        with_native.push(NATIVE);
        assert_eq!(names(chosen_algos(op, "all", true).unwrap()), with_native);
        assert_eq!(names(chosen_algos(op, "ring", false).unwrap()), ["ring"]);
        assert_eq!(names(chosen_algos(op, NATIVE, true).unwrap()), [NATIVE]);
        assert!(chosen_algos(op, NATIVE, false).is_err());
        assert!(chosen_algos(op, "linear", false).is_err());
    }
}
