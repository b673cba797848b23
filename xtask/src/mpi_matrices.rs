//! `cargo xtask mpi-matrices`: `krylov solve --backend mpi` under `mpirun -np P` against
//! `--backend threads --ranks P` on every matrix of a folder (the acceptance check):
//! same iterations and true residual, bit for bit.

use crate::flags::Flags;
use crate::mpi_test::{self, mpirun, output_with_timeout};
use crate::workspace;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) const USAGE: &str = "\
usage: cargo xtask mpi-matrices [--dir DIR] [--np P] [--method NAME] [--k K] [--timeout SECONDS]

Builds krylov (release, --features mpi) and solves every .mtx/.mtx.gz of DIR twice: under
`mpirun -np P` with --backend mpi, and with --backend threads --ranks P. Prints one row per
matrix and fails unless iterations and relres_true agree exactly on every matrix.

  --dir DIR          folder of matrices (default: ../shared/matrices beside the workspace)
  --np P             ranks (default 3)
  --method NAME      solver method (default cbcgr)
  --k K              block size of s-step methods (default 6)
  --timeout SECONDS  limit for one solve (default 600)";

/// Flags of `cargo xtask mpi-matrices`.
#[derive(Debug)]
pub(crate) struct Args {
    dir: PathBuf,
    np: usize,
    method: String,
    k: usize,
    timeout: Duration,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let dir = match flags.value("--dir")? {
            Some(d) => PathBuf::from(d),
            None => workspace::root().join("..").join("shared").join("matrices"),
        };
        let number = |name: &str, v: Option<String>, default: usize| -> Result<usize> {
            match v {
                None => Ok(default),
                Some(v) => match v.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => bail!("{name}: expected a positive integer, got `{v}`"),
                },
            }
        };
        let np = number("--np", flags.value("--np")?, 3)?;
        let method = flags.value("--method")?.unwrap_or_else(|| "cbcgr".into());
        let k = number("--k", flags.value("--k")?, 6)?;
        let timeout =
            Duration::from_secs(number("--timeout", flags.value("--timeout")?, 600)? as u64);
        flags.finish()?;
        Ok(Args {
            dir,
            np,
            method,
            k,
            timeout,
        })
    }
}

fn matrices(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            name.ends_with(".mtx") || name.ends_with(".mtx.gz")
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no .mtx or .mtx.gz files in {}", dir.display());
    }
    Ok(files)
}

fn report(cmd: &mut Command, timeout: Duration, what: &str) -> Result<Value> {
    let out = output_with_timeout(cmd, timeout)?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).with_context(|| format!("{what}: not one JSON object"))
}

pub(crate) fn run(args: &Args) -> Result<()> {
    mpi_test::check_mpirun()?;
    let files = matrices(&args.dir)?;
    let krylov = mpi_test::build_krylov(true)?;
    let (np, k) = (args.np.to_string(), args.k.to_string());
    let solve = ["solve", "--method", &args.method, "--k", &k, "--json"];
    let mut rows = Vec::new();
    let mut mismatches = 0;
    for m in &files {
        let name = m
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let threads = report(
            Command::new(&krylov)
                .args(solve)
                .arg(m)
                .args(["--backend", "threads", "--ranks", &np]),
            args.timeout,
            &format!("{name} on threads"),
        )?;
        let mpi = report(
            mpirun(args.np)
                .arg(&krylov)
                .args(solve)
                .arg(m)
                .args(["--backend", "mpi"]),
            args.timeout,
            &format!("{name} on mpi"),
        )?;
        let same = threads["iterations"] == mpi["iterations"]
            && threads["relres_true"] == mpi["relres_true"]
            && threads["converged"] == mpi["converged"];
        mismatches += usize::from(!same);
        rows.push(format!(
            "{name:<22} {:>8} {:>8} {:>24} {:>24} {:>9} {}",
            threads["n"],
            mpi["iterations"],
            mpi["relres_true"].to_string(),
            threads["relres_true"].to_string(),
            mpi["converged"],
            if same { "same" } else { "DIFFERENT" }
        ));
        eprintln!("{}", rows[rows.len() - 1]);
    }
    println!(
        "# krylov solve --method {} --k {}: mpirun -np {np} --backend mpi vs --backend threads --ranks {np}",
        args.method, args.k
    );
    println!(
        "{:<22} {:>8} {:>8} {:>24} {:>24} {:>9} result",
        "matrix", "n", "iters", "relres_true (mpi)", "relres_true (threads)", "converged"
    );
    for r in &rows {
        println!("{r}");
    }
    println!(
        "{} matrices, {} identical, {mismatches} different",
        files.len(),
        files.len() - mismatches
    );
    if mismatches > 0 {
        bail!("{mismatches} matrices differ between mpi and threads");
    }
    Ok(())
}
