//! `cargo xtask busy`: thread ranks on a busy machine (issue 47's first defect), measured.
//!
//! A login node or CI runner is rarely idle: another process may take a core while a solve
//! runs. Each repetition times `krylov solve` on a 3-D Poisson matrix (`--n`, default 64:
//! 262,144 rows) with `--ranks 1` and `--ranks 2` (one kernel thread each), idle and beside
//! one busy process (`sh -c 'while :; do :; done'`), one after another, and the idle
//! 8-byte allreduce latency of 2 thread ranks (`krylov bench collectives`, as `cargo xtask
//! latency` measures it). On a two-core machine two ranks plus the busy process are three
//! runnable threads on two cores: the measure says how gracefully waiting ranks give way.
//!
//! The figures are per CG iteration (the report's solve time over its iterations), the
//! ratio `r2/r1` compares 2 ranks with 1 rank in the same state, and `busy/idle` each rank
//! count with itself; the summary gives medians over repetitions (the machine is shared:
//! compare within a run). `--bin PATH` measures another `krylov` binary (an older build,
//! for a before-and-after figure).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::flags::Flags;
use crate::mpi_test;
use crate::workspace;

pub(crate) const USAGE: &str = "\
usage: cargo xtask busy [--n 64] [--reps 3] [--bin PATH]

Times krylov solve (3-D Poisson n^3, default n = 64) with --ranks 1 and --ranks 2, idle and
beside one busy process, and the idle 8-byte allreduce of 2 thread ranks; per repetition
and as medians: us per CG iteration, r2/r1 (2 ranks against 1) and busy/idle.

  --n N         grid points per direction of the Poisson matrix (default 64)
  --reps N      repetitions (default 3)
  --bin PATH    the krylov binary to measure (default: a release build of this tree)";

/// Flags of `cargo xtask busy`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Args {
    n: usize,
    reps: usize,
    bin: Option<PathBuf>,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let n = flags.positive("--n", 64)?;
        let reps = flags.positive("--reps", 3)?;
        let bin = flags.value("--bin")?.map(PathBuf::from);
        flags.finish()?;
        if n > 200 {
            bail!("--n {n}: at most 200 (8M rows) for a measure that repeats");
        }
        Ok(Args { n, reps, bin })
    }
}

/// A busy process, stopped when dropped.
struct Hog(Child);

impl Hog {
    fn start() -> Result<Self> {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start the busy process (sh)")?;
        // Let the scheduler see it running before the measure starts.
        std::thread::sleep(Duration::from_millis(200));
        Ok(Hog(child))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Microseconds per CG iteration of one solve with `ranks` thread ranks.
fn solve_us(bin: &Path, matrix: &Path, ranks: usize) -> Result<f64> {
    let mut cmd = Command::new(bin);
    cmd.args(["solve"]).arg(matrix).args([
        "--ranks",
        &ranks.to_string(),
        "--threads",
        "1",
        "--json",
    ]);
    let out = mpi_test::output_with_timeout(&mut cmd, Duration::from_secs(600))?;
    let v: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "`{}` printed no JSON report: {}",
            workspace::describe(&cmd),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let (t, it) = (v["time_s"].as_f64(), v["iterations"].as_f64());
    match (t, it) {
        (Some(t), Some(it)) if it > 0.0 => Ok(1e6 * t / it),
        _ => bail!(
            "the report of `{}` has no time or iterations",
            workspace::describe(&cmd)
        ),
    }
}

/// The idle 8-byte allreduce of 2 thread ranks, average microseconds.
fn allreduce_us(bin: &Path) -> Result<f64> {
    let mut cmd = Command::new(bin);
    cmd.args(["bench", "collectives", "--op", "allreduce", "--ranks", "2"])
        .args(["--backend", "threads", "--sizes", "8", "--iters", "20000"])
        .args(["--warmup", "1000", "--json"]);
    let out = mpi_test::output_with_timeout(&mut cmd, Duration::from_secs(300))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok()?["avg_us"].as_f64())
        .with_context(|| format!("`{}` printed no JSON row", workspace::describe(&cmd)))
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => {
            workspace::run(&mut workspace::cargo([
                "build",
                "--release",
                "-p",
                "castack-cli",
            ]))?;
            workspace::root().join("target/release/krylov")
        }
    };
    let dir = workspace::root().join("target/xtask-busy");
    std::fs::create_dir_all(&dir)?;
    let matrix = dir.join(format!("poisson3d_{}.mtx", args.n));
    if !matrix.exists() {
        let text = Command::new(&bin)
            .args(["gen", "poisson3d", "--n", &args.n.to_string()])
            .output()
            .context("krylov gen")?;
        if !text.status.success() {
            bail!(
                "krylov gen failed: {}",
                String::from_utf8_lossy(&text.stderr)
            );
        }
        std::fs::write(&matrix, &text.stdout)?;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "busy: {} on poisson3d n = {} ({} rows), {cores} cores; us per CG iteration",
        bin.display(),
        args.n,
        args.n.pow(3)
    );
    println!("rep  r1_idle  r2_idle  r1_busy  r2_busy  r2/r1_idle  r2/r1_busy  allreduce_us");
    let mut rows = Vec::new();
    for rep in 0..args.reps {
        let idle = [solve_us(&bin, &matrix, 1)?, solve_us(&bin, &matrix, 2)?];
        let lat = allreduce_us(&bin)?;
        let busy = {
            let _hog = Hog::start()?;
            [solve_us(&bin, &matrix, 1)?, solve_us(&bin, &matrix, 2)?]
        };
        let row = [
            idle[0],
            idle[1],
            busy[0],
            busy[1],
            idle[1] / idle[0],
            busy[1] / busy[0],
            lat,
        ];
        println!(
            "{rep:>3}  {:>7.1}  {:>7.1}  {:>7.1}  {:>7.1}  {:>10.2}  {:>10.2}  {:>12.2}",
            row[0], row[1], row[2], row[3], row[4], row[5], row[6]
        );
        rows.push(row);
    }
    let col = |k: usize| crate::latency::median(rows.iter().map(|r| r[k]).collect());
    println!(
        "median: r2/r1 idle {:.2}, busy {:.2}; busy/idle r1 {:.2}, r2 {:.2}; idle allreduce {:.2} us",
        col(4),
        col(5),
        col(2) / col(0),
        col(3) / col(1),
        col(6)
    );
    Ok(())
}
