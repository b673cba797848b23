//! `cargo xtask vs-petsc`: castack's CG family against PETSc's KSPCG on the same matrix, in
//! one run, interleaved (issue 23's yardstick).
//!
//! Steps:
//! 1. `bash PEERS/setup.sh target/peers` (idempotent: Debian's PETSc 3.18, petsc4py, Open MPI;
//!    builds `stream`), then the 3-D Poisson matrix `target/peers/p{N}.mtx` with
//!    `PEERS/gen_poisson.py N` unless it exists, and `cargo build --release -p castack-cli`.
//! 2. STREAM (1 and 2 threads) for the bandwidth of the machine in this run.
//! 3. `--rounds R` rounds; each runs every configuration once, in a fixed order, so slow
//!    phases of the shared machine hit all of them alike: PETSc `KSPCG` + Jacobi under
//!    `mpirun -np 1` and `-np 2` (`PEERS/petsc_solve.py`, rtol 1e-8 on the unpreconditioned
//!    norm), and `krylov solve --rhs ones --tol 1e-8 --json` with the DEFAULT flags
//!    (`--ranks 1`, `--ranks 2`; threads per rank = cores / ranks), with explicit threads
//!    (`--ranks 1 --threads 1`, `--ranks 1 --threads 2`, `--ranks 2 --threads 1`), and
//!    ccg and pipecg at `--ranks 2`.
//! 4. The table: median [min, max] ms per iteration of each configuration, the ratios
//!    castack / PETSc at equal core counts, ccg / cg and pipecg / cg at 2 ranks, and the
//!    1-minute load average seen before each run (the machine is shared: compare only
//!    ratios of one run).
//!
//! Every run's JSON line goes to `target/peers/vs-petsc.jsonl`. This is a measurement
//! for notes, not a test: it fails only when a run fails or the iteration counts of castack
//! and PETSc disagree by more than one.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::flags::Flags;
use crate::workspace::{self, cargo, root};

pub(crate) const USAGE: &str = "\
usage: cargo xtask vs-petsc [--peers DIR] [--n 100] [--rounds 3]

castack's `krylov solve` (cg with the default flags and with explicit threads; ccg and pipecg
at 2 ranks) against PETSc KSPCG + Jacobi (mpirun -np 1 and 2) on the n^3-row 3-D Poisson
matrix, b = ones, rtol 1e-8, interleaved round-robin; prints median ms per iteration, the
ratios at equal core counts and the load seen. Installs the peers first with DIR/setup.sh
(idempotent; Debian packages, so root or sudo-free apt is needed once).

  --peers DIR   the peer harness (default ../shared/peers, next to the repository)
  --n N         grid points per direction (default 100: 1,000,000 rows)
  --rounds R    interleaved rounds (default 3; the table gives medians)";

pub(crate) struct Args {
    peers: PathBuf,
    n: usize,
    rounds: usize,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut f = Flags::new(args);
        let peers = f
            .value("--peers")?
            .map_or_else(|| root().join("../shared/peers"), PathBuf::from);
        let n = match f.value("--n")? {
            Some(v) => v.parse().context("--n needs a positive integer")?,
            None => 100,
        };
        let rounds = match f.value("--rounds")? {
            Some(v) => v.parse().context("--rounds needs a positive integer")?,
            None => 3,
        };
        f.finish()?;
        if n < 2 {
            bail!("--n must be at least 2 (got {n})");
        }
        if rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        Ok(Self { peers, n, rounds })
    }
}

/// One configuration: a label and how to run it.
struct Config {
    label: &'static str,
    kind: Kind,
}

enum Kind {
    /// PETSc KSPCG under `mpirun -np P`.
    Petsc(usize),
    /// `krylov solve` with these extra flags.
    Castack(&'static [&'static str]),
}

const CONFIGS: &[Config] = &[
    Config {
        label: "petsc cg np=1",
        kind: Kind::Petsc(1),
    },
    Config {
        label: "petsc cg np=2",
        kind: Kind::Petsc(2),
    },
    Config {
        label: "castack cg --ranks 1 (default threads)",
        kind: Kind::Castack(&["--ranks", "1"]),
    },
    Config {
        label: "castack cg --ranks 2 (default threads)",
        kind: Kind::Castack(&["--ranks", "2"]),
    },
    Config {
        label: "castack cg --ranks 1 --threads 1",
        kind: Kind::Castack(&["--ranks", "1", "--threads", "1"]),
    },
    Config {
        label: "castack cg --ranks 1 --threads 2",
        kind: Kind::Castack(&["--ranks", "1", "--threads", "2"]),
    },
    Config {
        label: "castack cg --ranks 2 --threads 1",
        kind: Kind::Castack(&["--ranks", "2", "--threads", "1"]),
    },
    Config {
        label: "castack ccg --ranks 2",
        kind: Kind::Castack(&["--ranks", "2", "--method", "ccg"]),
    },
    Config {
        label: "castack pipecg --ranks 2",
        kind: Kind::Castack(&["--ranks", "2", "--method", "pipecg"]),
    },
];

/// The ratios printed: (numerator, denominator, what it shows).
const RATIOS: &[(&str, &str, &str)] = &[
    (
        "castack cg --ranks 1 --threads 1",
        "petsc cg np=1",
        "1 core",
    ),
    (
        "castack cg --ranks 1 (default threads)",
        "petsc cg np=2",
        "2 cores, defaults",
    ),
    (
        "castack cg --ranks 2 (default threads)",
        "petsc cg np=2",
        "2 cores, defaults",
    ),
    (
        "castack cg --ranks 1 --threads 2",
        "petsc cg np=2",
        "2 cores",
    ),
    (
        "castack cg --ranks 2 --threads 1",
        "petsc cg np=2",
        "2 cores",
    ),
    (
        "castack ccg --ranks 2",
        "castack cg --ranks 2 (default threads)",
        "ccg / cg",
    ),
    (
        "castack pipecg --ranks 2",
        "castack cg --ranks 2 (default threads)",
        "pipecg / cg",
    ),
];

pub(crate) fn run(args: &Args) -> Result<()> {
    let peers = &args.peers;
    if !peers.join("setup.sh").is_file() || !peers.join("petsc_solve.py").is_file() {
        bail!(
            "no peer harness at {} (setup.sh and petsc_solve.py): pass --peers DIR, the folder \
             of the shared PETSc/STREAM harness",
            peers.display()
        );
    }
    let peers = peers
        .canonicalize()
        .with_context(|| format!("resolving {}", peers.display()))?;
    let out = root().join("target/peers");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    workspace::run(
        Command::new("bash")
            .arg(peers.join("setup.sh"))
            .arg(&out)
            .current_dir(root()),
    )?;
    let mtx = out.join(format!("p{}.mtx", args.n));
    if !mtx.is_file() {
        workspace::run(
            Command::new("/usr/bin/python3")
                .arg(peers.join("gen_poisson.py"))
                .arg(args.n.to_string())
                .arg("-o")
                .arg(&mtx),
        )?;
    }
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let krylov = root().join("target/release/krylov");

    println!("\nSTREAM on this machine now:");
    let stream = Command::new(out.join("stream"))
        .output()
        .context("running stream")?;
    for line in String::from_utf8_lossy(&stream.stdout).lines() {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            if v["kernel"] == "triad" {
                println!(
                    "  triad, {} thread(s): {} GB/s (best), {} GB/s (median)",
                    v["threads"], v["best_GBs"], v["median_GBs"]
                );
            }
        }
    }

    let log_path = out.join("vs-petsc.jsonl");
    let mut log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut ms: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
    let mut iters: Vec<Option<u64>> = vec![None; CONFIGS.len()];
    let mut loads = Vec::new();
    for round in 0..args.rounds {
        for (i, c) in CONFIGS.iter().enumerate() {
            let load = load_average();
            loads.push(load);
            let t = Instant::now();
            let (it, solve_s) = run_config(c, &krylov, &mtx, &peers)
                .with_context(|| format!("round {round}: {}", c.label))?;
            let per = 1e3 * solve_s / it as f64;
            ms[i].push(per);
            iters[i] = Some(it);
            let line = json!({"config": c.label, "round": round, "iterations": it,
                "solve_s": solve_s, "ms_per_iteration": per, "load": load,
                "wall_s": t.elapsed().as_secs_f64()});
            println!("{line}");
            writeln!(log, "{line}")?;
        }
    }

    let med: Vec<f64> = ms.iter_mut().map(|v| median(v)).collect();
    println!("\n| configuration | iterations | ms/iteration median [min, max] |\n|---|---|---|");
    for (i, c) in CONFIGS.iter().enumerate() {
        let (lo, hi) = min_max(&ms[i]);
        println!(
            "| {} | {} | {:.2} [{lo:.2}, {hi:.2}] |",
            c.label,
            iters[i].unwrap_or(0),
            med[i]
        );
    }
    println!("\n| ratio (medians) | what | value |\n|---|---|---|");
    let index = |label: &str| CONFIGS.iter().position(|c| c.label == label);
    for (a, b, what) in RATIOS {
        if let (Some(i), Some(j)) = (index(a), index(b)) {
            println!("| {a} / {b} | {what} | {:.3} |", med[i] / med[j]);
        }
    }
    let (lo, hi) = min_max(&loads);
    println!(
        "\nload average (1 min) before the runs: median {:.2} [{lo:.2}, {hi:.2}]; {} rounds; runs in {}",
        median(&mut loads),
        args.rounds,
        log_path.display()
    );
    // PETSc and castack stop on the same criterion: their iteration counts must agree.
    let iterations = |label| index(label).and_then(|i| iters[i]);
    let (petsc, ours) = (
        iterations("petsc cg np=1"),
        iterations("castack cg --ranks 1 --threads 1"),
    );
    if let (Some(p), Some(o)) = (petsc, ours) {
        if p.abs_diff(o) > 1 {
            bail!("PETSc took {p} iterations and castack cg {o}: they do not solve alike");
        }
    }
    Ok(())
}

/// Run one configuration: (iterations, solve seconds).
fn run_config(c: &Config, krylov: &Path, mtx: &Path, peers: &Path) -> Result<(u64, f64)> {
    let mut cmd = match c.kind {
        Kind::Petsc(np) => {
            let mut cmd = Command::new("mpirun");
            cmd.args(["-np", &np.to_string(), "/usr/bin/python3"])
                .arg(peers.join("petsc_solve.py"))
                .arg(mtx)
                .args(["--ksp", "cg", "--pc", "jacobi", "--rtol", "1e-8"]);
            cmd
        }
        Kind::Castack(flags) => {
            let mut cmd = Command::new(krylov);
            cmd.arg("solve")
                .arg(mtx)
                .args(["--rhs", "ones", "--tol", "1e-8", "--json"])
                .args(flags);
            cmd
        }
    };
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OPENBLAS_NUM_THREADS", "1")
        .env("OMP_NUM_THREADS", "1");
    json_run(&mut cmd).with_context(|| c.label.to_string())
}

/// Run `cmd`, which prints a JSON object on its last `{` line (krylov's `--json`, the peer
/// harness): (iterations, solve seconds: `solve_s`, else `time_s`). Fails on a failed
/// run, a missing line or field, or zero iterations.
pub(crate) fn json_run(cmd: &mut Command) -> Result<(u64, f64)> {
    let out = cmd.output().with_context(|| workspace::describe(cmd))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let (true, Some(line)) = (out.status.success(), line) else {
        bail!(
            "{} failed: {}",
            workspace::describe(cmd),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    };
    let v: Value = serde_json::from_str(line).context("reading the run's JSON line")?;
    let it = v["iterations"].as_u64().context("no iterations")?;
    let s = v
        .get("solve_s")
        .or_else(|| v.get("time_s"))
        .and_then(Value::as_f64)
        .context("no solve time")?;
    if it == 0 {
        bail!("{}: zero iterations", workspace::describe(cmd));
    }
    Ok((it, s))
}

pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

pub(crate) fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}
