//! The `krylov` binary built with `--features mpi`, checked end to end under mpirun (part of
//! `cargo xtask test-mpi`), at every rank count P of `--np`:
//!
//! - `solve --backend mpi` on a generated 2-D Poisson matrix with CBCGR (k = 6) gives the
//!   iteration count, true residual and solution file (`--output`, 17 significant digits) of
//!   `--backend threads --ranks P` exactly, and prints one JSON line (rank 0 only);
//! - bad input ends every rank with exit code 2 and one `error:` line, never a hang: a
//!   missing matrix (every rank fails) and an unwritable `--report` (rank 0 alone fails,
//!   after the solve);
//! - `bench collectives --backend mpi --algo all --verify` passes for every operation, with a
//!   `native` row (the MPI library's own collective), at root P-1.

use crate::mpi_test::{mpirun, output_with_timeout, Args};
use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The operations of `krylov bench collectives`.
const OPS: [&str; 8] = [
    "bcast",
    "scatter",
    "gather",
    "reduce",
    "allgather",
    "allreduce",
    "barrier",
    "alltoall",
];

/// A scratch folder removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs every check; returns the number of mpirun launches.
pub(crate) fn run(krylov: &Path, args: &Args) -> Result<usize> {
    let dir =
        Scratch(std::env::temp_dir().join(format!("castack-test-mpi-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).with_context(|| format!("creating {}", dir.0.display()))?;
    let matrix = dir.0.join("poisson2d.mtx");
    let gen = output_with_timeout(
        Command::new(krylov)
            .args(["gen", "poisson2d", "--n", "20", "--output"])
            .arg(&matrix),
        args.timeout(),
    )?;
    ensure!(
        gen.status.success(),
        "krylov gen failed: {}",
        text(&gen.stderr)
    );

    let mut launches = 0;
    for &np in args.np() {
        solve_matches_threads(krylov, &matrix, &dir.0, np, args)?;
        bad_input_one_line(krylov, &matrix, &dir.0, np, args)?;
        launches += 3;
        for op in OPS {
            bench_verifies(krylov, op, np, args)?;
            launches += 1;
        }
        eprintln!("   ok: krylov under mpirun with {np} rank(s)");
    }
    Ok(launches)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

fn json(out: &Output, what: &str) -> Result<Value> {
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    ensure!(
        stdout.lines().count() == 1,
        "{what}: expected one JSON line on stdout (rank 0 only), got:\n{stdout}"
    );
    serde_json::from_str(&stdout).with_context(|| format!("{what}: not JSON: {stdout}"))
}

fn solve_matches_threads(
    krylov: &Path,
    matrix: &Path,
    dir: &Path,
    np: usize,
    args: &Args,
) -> Result<()> {
    let common = [
        "solve", "--method", "cbcgr", "--k", "6", "--json", "--output",
    ];
    let x_threads = dir.join(format!("x-threads-{np}.mtx"));
    let x_mpi = dir.join(format!("x-mpi-{np}.mtx"));
    let threads = output_with_timeout(
        Command::new(krylov)
            .args(common)
            .arg(&x_threads)
            .arg(matrix)
            .args(["--backend", "threads", "--ranks", &np.to_string()]),
        args.timeout(),
    )?;
    let mpi = output_with_timeout(
        mpirun(np)
            .arg(krylov)
            .args(common)
            .arg(&x_mpi)
            .arg(matrix)
            .args(["--backend", "mpi"]),
        args.timeout(),
    )?;
    let (t, m) = (json(&threads, "threads solve")?, json(&mpi, "mpi solve")?);
    ensure!(m["backend"] == "mpi" && m["ranks"] == np, "mpi report: {m}");
    ensure!(m["converged"] == true, "mpi solve did not converge: {m}");
    for field in [
        "iterations",
        "relres_true",
        "relres_recurrence",
        "reductions",
    ] {
        ensure!(
            t[field] == m[field],
            "{np} rank(s): {field} is {} on threads, {} on mpi",
            t[field],
            m[field]
        );
    }
    let (xt, xm) = (std::fs::read(&x_threads)?, std::fs::read(&x_mpi)?);
    ensure!(
        !xt.is_empty() && xt == xm,
        "{np} rank(s): the solutions written by threads and mpi differ"
    );
    Ok(())
}

fn bad_input_one_line(
    krylov: &Path,
    matrix: &Path,
    dir: &Path,
    np: usize,
    args: &Args,
) -> Result<()> {
    let missing = dir.join("no-such-matrix.mtx");
    let unwritable = dir.join("no-such-dir").join("report.json");
    let cases: [(&str, Vec<&std::ffi::OsStr>); 2] = [
        ("a missing matrix", vec![missing.as_os_str()]),
        (
            "an unwritable --report (rank 0 alone fails)",
            vec![
                matrix.as_os_str(),
                "--report".as_ref(),
                unwritable.as_os_str(),
            ],
        ),
    ];
    for (what, extra) in cases {
        let out = output_with_timeout(
            mpirun(np)
                .arg(krylov)
                .arg("solve")
                .args(extra)
                .args(["--backend", "mpi", "--json"]),
            args.timeout(),
        )?;
        let stderr = text(&out.stderr);
        let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        if out.status.code() != Some(2) || ours.len() != 1 {
            bail!(
                "{np} rank(s), {what}: expected exit code 2 and one `error:` line, got {} and:\n{stderr}",
                out.status
            );
        }
    }
    Ok(())
}

fn bench_verifies(krylov: &Path, op: &str, np: usize, args: &Args) -> Result<()> {
    let root = (np - 1).to_string();
    let out = output_with_timeout(
        mpirun(np).arg(krylov).args([
            "bench",
            "collectives",
            "--backend",
            "mpi",
            "--op",
            op,
            "--algo",
            "all",
            "--verify",
            "--sizes",
            "8,4K",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--root",
            &root,
            "--json",
        ]),
        args.timeout(),
    )?;
    ensure!(
        out.status.success(),
        "bench {op} at {np} rank(s) failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    let rows: Vec<Value> = text(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("bench {op}: rows are not JSON"))?;
    ensure!(
        rows.iter().any(|r| r["algo"] == "native") && rows.iter().any(|r| r["algo"] != "native"),
        "bench {op}: expected registry rows and a native row, got {rows:?}"
    );
    for r in &rows {
        ensure!(
            r["verified"] == true && r["backend"] == "mpi" && r["ranks"] == np,
            "bench {op} at {np} rank(s): {r}"
        );
    }
    Ok(())
}
