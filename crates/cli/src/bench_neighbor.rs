//! `krylov bench neighbor`: one neighbour exchange of `--sizes` bytes to each of
//! `--neighbors` N ranks with the naive and the segmented strategy (ALGORITHMS.md section 2),
//! on threads (wall time), mpi (wall time, one rank per process of `mpirun -np P`) or sim
//! (modeled time). Every backend runs the same measurement, [`case_time`], generic over the
//! communicator: build the persistent [`Exchange`], one untimed exchange (measured backends),
//! a barrier, `--iters` timed exchanges, then the slowest rank's time (one allreduce).
//!
//! Ranks and pattern: for N in {2, 4, 6} a periodic grid of 3^(N/2) ranks (a ring of 3, a
//! 3 x 3 torus, a 3 x 3 x 3 torus; N = 6 is the 3-D torus of the Tofu case), each rank
//! exchanging with its 2 neighbours per dimension, all distinct; any other N: N + 1 ranks,
//! each exchanging with all the others. Every message is `bytes` long (a multiple of 8: the
//! exchange moves f64 values).
//!
//! On sim, with a torus fabric of as many dimensions as the rank grid, the fabric's torus is
//! resized to the rank grid (a job gets a torus partition of its own shape, as on Tofu), so
//! every neighbour is one hop away and each message has a link of its own; elsewhere rank r
//! runs on node r. Rows also carry `analytic_us`: D_naive / D_seg of the model
//! (`castack_neighbor::model::time`) with L = the fabric's DMA descriptor cost and B = its
//! DMA device bandwidth (null on threads and mpi).
//!
//! On mpi, P is the job's size and must be the rank count of the layout above (27 for
//! N = 6), else exit 2 naming the P needed; rank 0 prints the rows. `--mode` on threads and
//! mpi: both modes move data as buffered tagged sends matched by receives (on mpi
//! `MPI_Isend` of a copy, `MPI_Mprobe`/`MPI_Mrecv`); there is no remote-memory access, so
//! `put` differs from `two_sided` only in completion (per step by arrival, sends completed
//! at the end; see `castack_neighbor::mode`).

use std::process::ExitCode;
use std::time::Instant;

use castack_collectives::fabric_sim::config::TopologyConfig;
use castack_collectives::fabric_sim::{Fabric, MemBudget};
use castack_collectives::{AllreduceAlgo, Collectives, CommError, Communicator, Op, SimMechanism};
use castack_neighbor::grid::ProcessGrid;
use castack_neighbor::{model, Exchange, ExchangePattern, Mode, NeighborError, Strategy};
use serde::Serialize;

use crate::args::{Backend, BenchNeighborArgs, Memory, ModeArg, StrategyArg};
use crate::budget::check_buffers;
use crate::exit::{bad, run_error, CliError};
use crate::fabric::{fabric_error, sim_backend};
use crate::launch::{Job, Ranks};
use crate::output::out;
use crate::plot;
use crate::table::parse_sizes;

/// One output row (CLI.md "bench neighbor", plus `backend`, `fabric`, `ranks`,
/// `analytic_us`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    schema_version: u32,
    strategy: &'static str,
    mode: &'static str,
    neighbors: usize,
    devices: usize,
    bytes: usize,
    time_us: f64,
    effective_gbs: f64,
    modeled: bool,
    backend: &'static str,
    fabric: Option<String>,
    ranks: usize,
    analytic_us: Option<f64>,
}

/// The rank grid of `n` neighbours: `Some(grid)` for the tori, `None` for all-to-all
/// (`n + 1` ranks; `None` ranks where that overflows, which no run can have).
fn layout(n: usize) -> (Option<usize>, Option<ProcessGrid>) {
    match n {
        2 | 4 | 6 => {
            let dims = n / 2;
            let procs = std::array::from_fn(|d| if d < dims { 3 } else { 1 });
            let grid = ProcessGrid {
                procs,
                periodic: [true; 3],
            };
            (Some(grid.size()), Some(grid))
        }
        _ => (n.checked_add(1), None),
    }
}

/// Rank `r`'s pattern: `values` f64 to and from each neighbour, message k at
/// `k*values..(k+1)*values` in both slices.
fn pattern(r: usize, p: usize, grid: Option<&ProcessGrid>, values: usize) -> ExchangePattern {
    let peers: Vec<usize> = match grid {
        Some(g) => (0..3)
            .filter(|&d| g.procs[d] > 1)
            .flat_map(|d| [g.neighbor(r, d, false), g.neighbor(r, d, true)])
            .flatten()
            .collect(),
        None => (1..p).map(|k| (r + k) % p).collect(),
    };
    let mut pat = ExchangePattern::new();
    for (k, &q) in peers.iter().enumerate() {
        pat.sends
            .push((q, (k * values..(k + 1) * values).collect()));
        pat.recvs
            .push((q, (k * values..(k + 1) * values).collect()));
    }
    pat
}

/// One measured case: what every rank exchanges and how often.
#[derive(Debug, Clone, Copy)]
struct Case {
    strategy: Strategy,
    mode: Mode,
    /// f64 values per message.
    values: usize,
    /// Timed exchanges.
    iters: usize,
}

/// One rank of a case, on any backend: the slowest rank's time per exchange in seconds
/// (wall, or modeled where the backend has a clock), the same on every rank. Each rank times
/// its exchanges from its own start after a barrier; one allreduce takes the maximum.
fn case_time<C: Communicator + ?Sized>(
    comm: &C,
    grid: Option<&ProcessGrid>,
    case: Case,
) -> Result<f64, NeighborError> {
    let (r, p) = (comm.rank(), comm.size());
    let pat = pattern(r, p, grid, case.values);
    let len = pat.sends.len() * case.values;
    let mut ex = Exchange::with_mode(comm, pat, len, len, case.strategy, case.mode)?;
    let src: Vec<f64> = (0..len).map(|i| (r * len + i) as f64).collect();
    let mut dst = vec![0.0; len];
    if comm.model_clock().is_none() {
        ex.exchange(comm, &src, &mut dst)?; // warm-up
    }
    comm.barrier()?;
    let wall = Instant::now();
    let t0 = comm.model_clock().unwrap_or(0.0);
    for _ in 0..case.iters {
        ex.exchange(comm, &src, &mut dst)?;
    }
    let t1 = comm
        .model_clock()
        .unwrap_or_else(|| t0 + wall.elapsed().as_secs_f64());
    let mut slowest = [t1 - t0];
    comm.allreduce_f64_with(&mut slowest, Op::Max, AllreduceAlgo::default())?;
    Ok(slowest[0] / case.iters as f64)
}

/// Run `krylov bench neighbor`.
pub(crate) fn run(args: BenchNeighborArgs) -> Result<ExitCode, CliError> {
    if args.backend == Backend::Mpi {
        // One rank of an mpirun job.
        return crate::launch::mpi(|job| run_on(args, Some(job)));
    }
    if let Some(path) = &args.plot {
        crate::output::target(path)?;
    }
    run_on(args, None)
}

/// `krylov bench neighbor` in this process; `mpi` is this rank's MPI job under `--backend
/// mpi` (P from the job, which must fit the layout; rows printed by rank 0).
fn run_on(args: BenchNeighborArgs, mpi: Option<&Job>) -> Result<ExitCode, CliError> {
    if args.backend == Backend::Mpi && mpi.is_none() {
        return Err(bad("--backend mpi runs as one rank of `mpirun -np P`"));
    }
    if args.neighbors == 0 || args.devices == 0 {
        return Err(bad("--neighbors and --devices must be at least 1"));
    }
    if args.backend != Backend::Sim && args.fabric.is_some() {
        return Err(bad("--fabric needs --backend sim"));
    }
    if args.json && args.csv {
        return Err(bad("--json and --csv are exclusive"));
    }
    let budget = args.budget.resolve()?;
    let sizes = parse_sizes(&args.sizes).map_err(|e| bad(format!("--sizes: {e}")))?;
    if let Some(s) = sizes.iter().find(|&&s| !s.is_multiple_of(8)) {
        return Err(bad(format!(
            "--sizes: {s} is not a multiple of 8 (the exchange moves f64 values)"
        )));
    }
    let (p, grid) = layout(args.neighbors);
    let Some(p) = p else {
        return Err(bad(format!(
            "--neighbors {}: an all-to-all layout of that many neighbours needs more ranks \
             than a machine word counts",
            args.neighbors
        )));
    };
    // Sizes x neighbours x ranks against the budget before any rank or buffer exists.
    let peers = grid
        .as_ref()
        .map_or(p.saturating_sub(1), |_| args.neighbors);
    check_buffers(
        budget,
        &format!("{p} ranks exchanging with {peers} neighbours each"),
        sizes.iter().map(|&b| exchange_bytes(p, peers, b)),
    )?;
    if let Some(job) = mpi {
        if job.comm().size() != p {
            return Err(bad(format!(
                "--neighbors {} needs {p} ranks ({}): run it under `mpirun -np {p}` (this job has {})",
                args.neighbors,
                describe(args.neighbors, grid.as_ref()),
                job.comm().size()
            )));
        }
    }
    let leader = mpi.is_none_or(|job| job.comm().rank() == 0);
    let sim = match args.backend {
        Backend::Sim => {
            let spec = args.fabric.as_deref().unwrap_or("tofu-fx10");
            let mut s = sim_backend(Some(spec), Memory::Host, SimMechanism::Dma, budget)?;
            s.fabric = fit_torus(s.fabric, grid.as_ref(), budget)?;
            Some(s)
        }
        _ => None,
    };
    let iters = match (&sim, args.iters) {
        (_, Some(0)) => return Err(bad("--iters must be at least 1")),
        (None, i) => i.unwrap_or(20),
        (Some(_), i) => i.unwrap_or(1),
    };
    let ranks = match (mpi, &sim) {
        (Some(job), _) => Ranks::Mpi(job),
        (None, Some(s)) => Ranks::sim(p, s.fabric.clone(), s.options.clone())?,
        (None, None) => Ranks::threads(p)?,
    };
    let strategies: Vec<Strategy> = match args.strategy {
        StrategyArg::Naive => vec![Strategy::Naive],
        StrategyArg::Segmented => vec![Strategy::Segmented {
            devices: args.devices,
        }],
        StrategyArg::Both => vec![
            Strategy::Naive,
            Strategy::Segmented {
                devices: args.devices,
            },
        ],
    };
    let mode = match args.mode {
        ModeArg::TwoSided => Mode::TwoSided,
        ModeArg::Put => Mode::Put,
    };
    if !leader {
        // Other MPI ranks measure and print nothing.
    } else if args.csv {
        out!("schema_version,strategy,mode,neighbors,devices,bytes,time_us,effective_gbs,modeled,backend,fabric,ranks,analytic_us");
    } else if !args.json {
        out!(
            "{:<10} {:>10} {:>10} {:>12} {:>12} {:>12}",
            "strategy",
            "mode",
            "bytes",
            "time_us",
            "eff_GB/s",
            "analytic_us"
        );
    }
    let mut rows = Vec::new();
    for &strategy in &strategies {
        for &bytes in &sizes {
            let case = Case {
                strategy,
                mode,
                values: bytes / 8,
                iters,
            };
            let g = grid.as_ref();
            let time_s = match &ranks {
                // A failure on some ranks would leave the others waiting: it aborts the job.
                Ranks::Mpi(job) => case_time(job.comm(), g, case).unwrap_or_else(|e| {
                    job.fail(CliError::failed(anyhow::anyhow!("bench neighbor: {e}")))
                }),
                _ => slowest(ranks.run(|comm| case_time(comm, g, case)))?,
            };
            let analytic_us = sim.as_ref().and_then(|s| {
                let dma = &s.fabric.config().dma;
                let (l, b) = (dma.descriptor_us * 1e-6, dma.device_gbs? * 1e9);
                let t = model::time(strategy, args.neighbors, args.devices, bytes as f64, l, b);
                Some(t * 1e6)
            });
            let row = Row {
                schema_version: 1,
                strategy: strategy.name(),
                mode: mode.name(),
                neighbors: args.neighbors,
                devices: args.devices,
                bytes,
                time_us: time_s * 1e6,
                effective_gbs: if time_s > 0.0 {
                    (args.neighbors * bytes) as f64 / time_s / 1e9
                } else {
                    0.0
                },
                modeled: sim.is_some(),
                backend: args.backend.name(),
                fabric: sim.as_ref().map(|s| s.name.clone()),
                ranks: p,
                analytic_us,
            };
            if leader {
                print_row(&row, &args);
            }
            rows.push(row);
        }
    }
    if let Some(path) = args.plot.as_ref().filter(|_| leader) {
        plot(path, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The slowest rank's time of a case run on thread ranks (every rank returns it).
fn slowest(per_rank: Result<Vec<Result<f64, NeighborError>>, CommError>) -> Result<f64, CliError> {
    let failed = |e: &dyn std::fmt::Display| CliError::failed(anyhow::anyhow!("{e}"));
    per_rank
        .map_err(|e| run_error("bench neighbor", e))?
        .into_iter()
        .try_fold(0.0, |acc: f64, t| Ok(acc.max(t.map_err(|e| failed(&e))?)))
}

/// The layout of `n` neighbours in words, for errors.
fn describe(n: usize, grid: Option<&ProcessGrid>) -> String {
    match grid {
        Some(g) => {
            let dims: Vec<String> = g.procs.iter().take(n / 2).map(|d| d.to_string()).collect();
            format!("a {} periodic grid", dims.join(" x "))
        }
        None => format!("{} ranks exchanging all to all", n + 1),
    }
}

/// A torus fabric with as many dimensions as the rank grid is resized to the rank grid, so
/// every neighbour is one hop away; other fabrics are kept (rank r on node r).
/// Bytes `p` ranks hold at once exchanging `bytes` with each of `peers` neighbours: per
/// message byte the send and receive index lists (one 8-byte index per 8-byte value), the
/// source and destination vectors, the exchange's packed send and receive buffers and the
/// message in flight and its received copy; `None` on 64-bit overflow.
fn exchange_bytes(p: usize, peers: usize, bytes: usize) -> Option<u64> {
    (p as u64)
        .checked_mul(peers as u64)?
        .checked_mul(bytes as u64)?
        .checked_mul(8)
}

fn fit_torus(
    fabric: Fabric,
    grid: Option<&ProcessGrid>,
    budget: MemBudget,
) -> Result<Fabric, CliError> {
    let mut config = fabric.config().clone();
    if let (Some(g), TopologyConfig::Torus { dims, .. }) = (grid, &mut config.topology) {
        if dims.len() == 3 {
            *dims = g.procs.to_vec();
            return Fabric::new_within(config, budget)
                .map_err(|e| fabric_error("(resized to the rank grid)", e));
        }
    }
    Ok(fabric)
}

fn print_row(r: &Row, args: &BenchNeighborArgs) {
    let analytic = r.analytic_us.map_or(String::new(), |a| format!("{a}"));
    if args.json {
        if let Ok(line) = serde_json::to_string(r) {
            out!("{line}");
        }
    } else if args.csv {
        out!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.schema_version,
            r.strategy,
            r.mode,
            r.neighbors,
            r.devices,
            r.bytes,
            r.time_us,
            r.effective_gbs,
            r.modeled,
            r.backend,
            r.fabric.as_deref().unwrap_or(""),
            r.ranks,
            analytic
        );
    } else {
        out!(
            "{:<10} {:>10} {:>10} {:>12.2} {:>12.3} {:>12}",
            r.strategy,
            r.mode,
            r.bytes,
            r.time_us,
            r.effective_gbs,
            r.analytic_us.map_or("-".to_string(), |a| format!("{a:.2}"))
        );
    }
}

/// Effective GB/s against bytes per neighbour (log x), one line per strategy.
fn plot(path: &std::path::Path, rows: &[Row]) -> Result<(), CliError> {
    let mut series = plot::Series::new();
    for r in rows.iter().filter(|r| r.bytes > 0) {
        let point = (r.bytes as f64, r.effective_gbs);
        plot::push(&mut series, r.strategy.to_string(), point);
    }
    let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let (Some(x), Some(y)) = (
        plot::span(pts().map(|p| p.0), true, 1.0),
        plot::span(pts().map(|p| p.1), false, 1.0),
    ) else {
        return Err(bad("--plot needs at least two non-zero sizes"));
    };
    if x.start >= x.end {
        return Err(bad("--plot needs at least two non-zero sizes"));
    }
    let caption = match rows.first() {
        Some(r) => format!(
            "neighbour exchange, N={} C={} ({}{})",
            r.neighbors,
            r.devices,
            r.backend,
            r.fabric
                .as_deref()
                .map_or(String::new(), |f| format!(", {f}"))
        ),
        None => "neighbour exchange".to_string(),
    };
    let chart = plot::Chart {
        caption: &caption,
        x: plot::Axis {
            desc: "size per neighbour (bytes)",
            log: true,
        },
        y: plot::Axis {
            desc: "effective bandwidth (GB/s = N x bytes / time / 1e9)",
            log: false,
        },
    };
    let units = plot::Units {
        x: plot::Unit::Bytes,
        y: plot::Unit::Number,
    };
    plot::write_svg_in(path, chart, units, &series, (x, y))
}
