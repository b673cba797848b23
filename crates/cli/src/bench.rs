//! `krylov bench collectives`: OSU-style latency tables of every collective algorithm on
//! the threads backend. Every algorithm runs from its persistent schedule (built once, as
//! the TCA collectives prepare their descriptors once); each timed iteration starts after a
//! barrier, and the reported time of an iteration is the slowest rank's.

use std::process::ExitCode;
use std::time::Instant;

use castack_collectives::schedule::{Datatype, Reduction};
use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, AlltoallAlgo, BarrierAlgo, BcastAlgo, Collectives, Communicator,
    GatherAlgo, Op, PersistentCollective, RankSchedule, ReduceAlgo, ScatterAlgo, ThreadUniverse,
};
use clap::ValueEnum;
use plotters::prelude::*;
use serde::Serialize;

use crate::args::{Backend, BenchCollectivesArgs, Memory};
use crate::exit::{bad, CliError};
use crate::output::{out, write_atomic};

/// Operations `bench collectives` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum BenchOp {
    /// Broadcast from `--root`.
    Bcast,
    /// Scatter of equal blocks from `--root`.
    Scatter,
    /// Gather of equal blocks to `--root`.
    Gather,
    /// Sum reduction over f64 to `--root`.
    Reduce,
    /// Allgather of equal blocks.
    Allgather,
    /// Sum allreduce over f64.
    Allreduce,
    /// Barrier (size ignored).
    Barrier,
    /// All-to-all of equal blocks.
    Alltoall,
}

impl BenchOp {
    fn name(self) -> &'static str {
        match self {
            BenchOp::Bcast => "bcast",
            BenchOp::Scatter => "scatter",
            BenchOp::Gather => "gather",
            BenchOp::Reduce => "reduce",
            BenchOp::Alltoall => "alltoall",
            BenchOp::Allgather => "allgather",
            BenchOp::Allreduce => "allreduce",
            BenchOp::Barrier => "barrier",
        }
    }

    /// Every algorithm of the operation's registry.
    fn algos(self) -> Vec<&'static str> {
        match self {
            BenchOp::Bcast => BcastAlgo::ALL.iter().map(|a| a.name()).collect(),
            BenchOp::Scatter => ScatterAlgo::ALL.iter().map(|a| a.name()).collect(),
            BenchOp::Gather => GatherAlgo::ALL.iter().map(|a| a.name()).collect(),
            BenchOp::Reduce => ReduceAlgo::ALL.iter().map(|a| a.name()).collect(),
            BenchOp::Alltoall => AlltoallAlgo::ALL.iter().map(|a| a.name()).collect(),
            BenchOp::Allgather => AllgathervAlgo::ALL.iter().map(|a| a.name()).collect(),
            BenchOp::Allreduce => AllreduceAlgo::ALL.iter().map(|a| a.name()).collect(),
            BenchOp::Barrier => BarrierAlgo::ALL.iter().map(|a| a.name()).collect(),
        }
    }

    fn is_reduction(self) -> bool {
        matches!(self, BenchOp::Allreduce | BenchOp::Reduce)
    }

    /// nccl-tests' bus bandwidth factor.
    fn busbw_factor(self, p: usize) -> f64 {
        let p = p as f64;
        match self {
            BenchOp::Allreduce => 2.0 * (p - 1.0) / p,
            BenchOp::Allgather | BenchOp::Scatter | BenchOp::Gather | BenchOp::Alltoall => {
                (p - 1.0) / p
            }
            BenchOp::Bcast | BenchOp::Reduce => 1.0,
            BenchOp::Barrier => 0.0,
        }
    }

    /// Rank `rank`'s caller buffer length for `bytes` per rank (the CLI contract: the whole
    /// vector for bcast/reduce/allreduce, each rank's block for scatter/gather/allgather,
    /// each destination's block for alltoall).
    fn buffer_bytes(self, p: usize, rank: usize, bytes: usize, root: usize) -> usize {
        match self {
            BenchOp::Allgather | BenchOp::Alltoall => p * bytes,
            BenchOp::Scatter | BenchOp::Gather if rank == root => p * bytes,
            BenchOp::Scatter | BenchOp::Gather => bytes,
            BenchOp::Barrier => 0,
            BenchOp::Bcast | BenchOp::Allreduce | BenchOp::Reduce => bytes,
        }
    }

    /// Rank `rank`'s schedule.
    fn plan(self, algo: &str, p: usize, rank: usize, bytes: usize, root: usize) -> RankSchedule {
        let sum = Reduction {
            op: Op::Sum,
            datatype: Datatype::F64,
        };
        // `algo` comes from the registry's own names, so the parse cannot fail.
        match self {
            BenchOp::Bcast => parse::<BcastAlgo>(algo).rank_schedule(p, rank, root, bytes),
            BenchOp::Scatter => parse::<ScatterAlgo>(algo).rank_schedule(p, rank, root, bytes),
            BenchOp::Gather => parse::<GatherAlgo>(algo).rank_schedule(p, rank, root, bytes),
            BenchOp::Reduce => parse::<ReduceAlgo>(algo).rank_schedule(p, rank, root, bytes, sum),
            BenchOp::Alltoall => parse::<AlltoallAlgo>(algo).rank_schedule(p, rank, bytes),
            BenchOp::Allgather => {
                parse::<AllgathervAlgo>(algo).rank_schedule(rank, &vec![bytes; p])
            }
            BenchOp::Allreduce => parse::<AllreduceAlgo>(algo).rank_schedule(p, rank, bytes, sum),
            BenchOp::Barrier => parse::<BarrierAlgo>(algo).rank_schedule(p, rank),
        }
    }

    /// Initial contents of rank `rank`'s buffer.
    fn fill(self, p: usize, rank: usize, bytes: usize, root: usize, buf: &mut [u8]) {
        match self {
            BenchOp::Bcast => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = if rank == root { byte(root, i) } else { 0 };
                }
            }
            // The root holds block j for rank j; the others receive into zeros.
            BenchOp::Scatter => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = if rank == root {
                        byte(i / bytes.max(1), i % bytes.max(1))
                    } else {
                        0
                    };
                }
            }
            // Every rank sends its own block; the root's own block is already in place.
            BenchOp::Gather if rank == root => {
                buf.fill(0);
                for i in 0..bytes {
                    buf[root * bytes + i] = byte(root, i);
                }
            }
            BenchOp::Gather => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = byte(rank, i);
                }
            }
            BenchOp::Allgather => {
                buf.fill(0);
                let own = &mut buf[rank * bytes..(rank + 1) * bytes];
                for (i, b) in own.iter_mut().enumerate() {
                    *b = byte(rank, i);
                }
            }
            // Block j of rank r's buffer is what r sends to j.
            BenchOp::Alltoall => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = byte(rank * p + i / bytes.max(1), i % bytes.max(1));
                }
            }
            BenchOp::Allreduce | BenchOp::Reduce => {
                for (i, c) in buf.chunks_exact_mut(8).enumerate() {
                    c.copy_from_slice(&value(rank, i).to_ne_bytes());
                }
            }
            BenchOp::Barrier => {}
        }
    }

    /// The sequential reference of rank `rank`'s buffer after the operation.
    fn expected(self, p: usize, rank: usize, bytes: usize, root: usize) -> Vec<u8> {
        // Values are multiples of 1/2 below 2^20: every summation order is exact.
        let sums = || -> Vec<u8> {
            (0..bytes / 8)
                .flat_map(|i| (0..p).map(|r| value(r, i)).sum::<f64>().to_ne_bytes())
                .collect()
        };
        let all_blocks = || -> Vec<u8> {
            (0..p)
                .flat_map(|r| (0..bytes).map(move |i| byte(r, i)))
                .collect()
        };
        let len = self.buffer_bytes(p, rank, bytes, root);
        let mut unchanged = vec![0u8; len];
        self.fill(p, rank, bytes, root, &mut unchanged);
        match self {
            BenchOp::Bcast => (0..bytes).map(|i| byte(root, i)).collect(),
            BenchOp::Scatter if rank == root => unchanged,
            BenchOp::Scatter => (0..bytes).map(|i| byte(rank, i)).collect(),
            BenchOp::Allgather => all_blocks(),
            BenchOp::Gather if rank == root => all_blocks(),
            BenchOp::Gather => unchanged,
            BenchOp::Alltoall => (0..p)
                .flat_map(|j| (0..bytes).map(move |i| byte(j * p + rank, i)))
                .collect(),
            BenchOp::Allreduce => sums(),
            BenchOp::Reduce if rank == root => sums(),
            BenchOp::Reduce => unchanged,
            BenchOp::Barrier => Vec::new(),
        }
    }
}

fn parse<T: std::str::FromStr>(name: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    match name.parse() {
        Ok(a) => a,
        Err(e) => unreachable!("registry name {name} does not parse: {e:?}"),
    }
}

fn byte(block: usize, i: usize) -> u8 {
    ((block * 31 + i * 7) % 251) as u8
}

fn value(rank: usize, i: usize) -> f64 {
    ((rank * 131 + i * 7) % 97) as f64 * 0.5
}

/// One row of the table (the CLI contract's columns).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    schema_version: u32,
    op: &'static str,
    algo: &'static str,
    backend: &'static str,
    fabric: Option<String>,
    memory: &'static str,
    ranks: usize,
    bytes: usize,
    avg_us: f64,
    min_us: f64,
    max_us: f64,
    bandwidth_gbs: f64,
    busbw_gbs: f64,
    modeled: bool,
    verified: Option<bool>,
}

/// Sizes `LIST` (`8,64,1K`) or `MIN..MAX` (powers of two), bytes with K/M/G suffixes.
pub(crate) fn parse_sizes(text: &str) -> Result<Vec<usize>, String> {
    if let Some((lo, hi)) = text.split_once("..") {
        let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
        if lo > hi {
            return Err(format!("empty range {text}"));
        }
        let mut s = if lo == 0 { vec![0] } else { Vec::new() };
        let mut v = lo.max(1).next_power_of_two();
        while v <= hi {
            s.push(v);
            v = v
                .checked_mul(2)
                .ok_or_else(|| format!("range {text} is too large"))?;
        }
        Ok(s)
    } else {
        text.split(',').map(parse_size).collect()
    }
}

fn parse_size(t: &str) -> Result<usize, String> {
    let t = t.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("'{t}' is not a size in bytes (e.g. 8, 64K, 4M)"))
}

/// Run `krylov bench collectives`.
pub(crate) fn run(args: BenchCollectivesArgs) -> Result<ExitCode, CliError> {
    if args.backend != Backend::Threads {
        return Err(bad(format!(
            "--backend {} is not available in this build yet (available: threads)",
            args.backend.name()
        )));
    }
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
    if args.mapping != "identity" {
        return Err(bad(format!(
            "--mapping {} is not available (available: identity)",
            args.mapping
        )));
    }
    if args.json && args.csv {
        return Err(bad("--json and --csv are exclusive"));
    }
    let op = args.op;
    let algos: Vec<&'static str> = match args.algo.as_str() {
        "all" => op.algos(),
        name => match op.algos().into_iter().find(|a| *a == name) {
            Some(a) => vec![a],
            None => {
                return Err(bad(format!(
                    "unknown {} algorithm '{name}' (valid: all, {})",
                    op.name(),
                    op.algos().join(", ")
                )))
            }
        },
    };
    let sizes = if op == BenchOp::Barrier {
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
    if args.ranks.contains(&0) {
        return Err(bad("--ranks must be at least 1 (got 0)"));
    }
    if args.iters == 0 {
        return Err(bad("--iters must be at least 1"));
    }
    if let Some(p) = args.ranks.iter().find(|&&p| args.root >= p) {
        return Err(bad(format!("--root {} is not a rank of {p}", args.root)));
    }
    let mut rows = Vec::new();
    let mut failed = false;
    if args.csv {
        out!("schema_version,op,algo,backend,fabric,memory,ranks,bytes,avg_us,min_us,max_us,bandwidth_gbs,busbw_gbs,modeled,verified");
    } else if !args.json {
        out!(
            "# {} on threads; times per iteration of the slowest rank, {} iterations after {} warm-up",
            op.name(),
            args.iters,
            args.warmup
        );
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
    for &p in &args.ranks {
        for &algo in &algos {
            for &bytes in &sizes {
                let row = measure(op, algo, p, bytes, &args)?;
                failed |= row.verified == Some(false);
                print_row(&row, &args);
                rows.push(row);
            }
        }
    }
    if let Some(path) = &args.plot {
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
    if args.json {
        if let Ok(line) = serde_json::to_string(r) {
            out!("{line}");
        }
    } else if args.csv {
        out!(
            "{},{},{},{},,{},{},{},{},{},{},{},{},{},{}",
            r.schema_version,
            r.op,
            r.algo,
            r.backend,
            r.memory,
            r.ranks,
            r.bytes,
            r.avg_us,
            r.min_us,
            r.max_us,
            r.bandwidth_gbs,
            r.busbw_gbs,
            r.modeled,
            r.verified.map_or(String::new(), |v| v.to_string())
        );
    } else {
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

/// Time one (algorithm, ranks, size) case.
fn measure(
    op: BenchOp,
    algo: &'static str,
    p: usize,
    bytes: usize,
    args: &BenchCollectivesArgs,
) -> Result<Row, CliError> {
    let (iters, warmup, root, verify) = (args.iters, args.warmup, args.root, args.verify);

    let per_rank = ThreadUniverse::new(p)
        .map_err(CliError::bad)?
        .run(
            |comm| -> Result<(Vec<f64>, bool), castack_collectives::CommError> {
                let rank = comm.rank();
                let len = op.buffer_bytes(p, rank, bytes, root);
                let expected = verify.then(|| op.expected(p, rank, bytes, root));
                let mut plan = PersistentCollective::new(op.plan(algo, p, rank, bytes, root), len);
                let mut buf = vec![0u8; len];
                let mut times = Vec::with_capacity(iters);
                for it in 0..warmup + iters {
                    op.fill(p, rank, bytes, root, &mut buf);
                    comm.barrier()?;
                    let t = Instant::now();
                    plan.execute_bytes(comm, &mut buf)?;
                    let dt = t.elapsed().as_secs_f64();
                    if it >= warmup {
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
            },
        )
        .map_err(|e| CliError::failed(anyhow::anyhow!("{} {algo}: {e}", op.name())))?;
    let mut verified = true;
    let mut slowest = Vec::new();
    for r in per_rank {
        let (times, ok) =
            r.map_err(|e| CliError::failed(anyhow::anyhow!("{} {algo}: {e}", op.name())))?;
        verified &= ok;
        slowest = times;
    }
    let avg = slowest.iter().sum::<f64>() / slowest.len() as f64;
    let min = slowest.iter().copied().fold(f64::INFINITY, f64::min);
    let max = slowest.iter().copied().fold(0.0, f64::max);
    let bw = if avg > 0.0 {
        bytes as f64 / avg / 1e9
    } else {
        0.0
    };
    Ok(Row {
        schema_version: 1,
        op: op.name(),
        algo,
        backend: "threads",
        fabric: None,
        memory: "host",
        ranks: p,
        bytes,
        avg_us: avg * 1e6,
        min_us: min * 1e6,
        max_us: max * 1e6,
        bandwidth_gbs: bw,
        busbw_gbs: bw * op.busbw_factor(p),
        modeled: false,
        verified: verify.then_some(verified),
    })
}

/// Latency (log) against size (log), one line per (algorithm, ranks).
fn plot(path: &std::path::Path, op: BenchOp, rows: &[Row]) -> Result<(), CliError> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows.iter().filter(|r| r.bytes > 0 && r.avg_us > 0.0) {
        let label = format!("{} p={}", r.algo, r.ranks);
        match series.iter_mut().find(|(l, _)| *l == label) {
            Some((_, pts)) => pts.push((r.bytes as f64, r.avg_us)),
            None => series.push((label, vec![(r.bytes as f64, r.avg_us)])),
        }
    }
    let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let (xlo, xhi) = pts().fold((f64::MAX, 0.0f64), |(a, b), (x, _)| (a.min(x), b.max(x)));
    let (ylo, yhi) = pts().fold((f64::MAX, 0.0f64), |(a, b), (_, y)| (a.min(y), b.max(y)));
    if series.is_empty() || xlo >= xhi {
        return Err(bad("--plot needs at least two non-zero sizes"));
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 600)).into_drawing_area();
        let draw = || -> Result<(), Box<dyn std::error::Error>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("{} latency (threads)", op.name()),
                    ("sans-serif", 20),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d((xlo..xhi).log_scale(), (ylo / 1.5..yhi * 1.5).log_scale())?;
            chart
                .configure_mesh()
                .x_desc("bytes")
                .y_desc("latency (us)")
                .draw()?;
            for (i, (label, p)) in series.iter().enumerate() {
                let c = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))?
                    .label(label.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .draw()?;
            root.present()?;
            Ok(())
        };
        draw().map_err(|e| CliError::failed(anyhow::anyhow!("plot: {e}")))?;
    }
    write_atomic(path, |w| Ok(w.write_all(svg.as_bytes())?)).map_err(CliError::bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_lists_ranges_and_suffixes() {
        assert_eq!(parse_sizes("8,64,1K").unwrap(), vec![8, 64, 1024]);
        assert_eq!(parse_sizes("8..64").unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(parse_sizes("0..4").unwrap(), vec![0, 1, 2, 4]);
        assert_eq!(parse_sizes("1M").unwrap(), vec![1 << 20]);
        assert!(parse_sizes("8,x").is_err());
        assert!(parse_sizes("64..8").is_err());
    }

    #[test]
    fn every_operation_lists_its_registry() {
        for op in BenchOp::value_variants() {
            assert!(!op.algos().is_empty(), "{}", op.name());
        }
    }
}
