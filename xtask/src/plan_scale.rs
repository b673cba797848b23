//! `cargo xtask plan-scale`: `krylov plan` at thousands of ranks with its default flags
//! (issue 48 item 4: 3-D Poisson 64^3 at 4,096 ranks on `ito`, every default candidate
//! priced, in at most 60 s on 2 cores). Builds the release binary, generates the matrix,
//! runs the plan without stored probes (the cold, first-plan case) and again with them,
//! and prints the wall times, the rows priced and unpriced and the recommendation beside
//! the load average seen. Exits 1 when a candidate is unpriced or the cold plan takes
//! longer than `--max-s`. A speed target, so checked here rather than by a timed test.

use crate::flags::Flags;
use crate::workspace::{self, cargo, Metadata};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

pub(crate) const USAGE: &str = "\
usage: cargo xtask plan-scale [--n 64] [--ranks 4096] [--fabric ito] [--max-s 60]

Builds `krylov` in release, generates the 7-point Poisson matrix on an N^3 grid, runs
`krylov plan M --ranks P --fabric F --json` with every other flag at its default, first
with --no-probe-cache (timed: the target) and then with a fresh probe folder twice (the
second plan reuses the first's instrumented runs), and prints wall times, rows priced and
not priced, and the recommended candidate, with the load average before each run. Exits 1
when a row is not priced or the cold plan takes more than --max-s seconds.

  --n N        grid size (default 64)
  --ranks P    rank count (default 4096)
  --fabric F   fabric preset (default ito)
  --max-s S    the cold plan's wall-time target in seconds (default 60)";

/// Flags of `cargo xtask plan-scale`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    n: usize,
    ranks: usize,
    fabric: String,
    max_s: f64,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let n = flags.positive("--n", 64)?;
        let ranks = flags.positive("--ranks", 4096)?;
        let fabric = flags.value("--fabric")?.unwrap_or_else(|| "ito".into());
        let max_s = match flags.value("--max-s")? {
            Some(s) => s
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .with_context(|| format!("--max-s: not a positive number: `{s}`"))?,
            None => 60.0,
        };
        flags.finish()?;
        Ok(Args {
            n,
            ranks,
            fabric,
            max_s,
        })
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// One plan: wall seconds and its JSON rows.
fn plan(krylov: &Path, m: &Path, a: &Args, probes: Option<&Path>) -> Result<(f64, Vec<Value>)> {
    let mut cmd = Command::new(krylov);
    cmd.arg("plan").arg(m);
    cmd.args([
        "--ranks",
        &a.ranks.to_string(),
        "--fabric",
        &a.fabric,
        "--json",
    ]);
    match probes {
        Some(dir) => cmd.arg("--probe-cache").arg(dir),
        None => cmd.arg("--no-probe-cache"),
    };
    let t0 = Instant::now();
    let out = cmd.output().with_context(|| workspace::describe(&cmd))?;
    let s = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            workspace::describe(&cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let rows = String::from_utf8(out.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<Vec<Value>, _>>()?;
    Ok((s, rows))
}

fn label(r: &Value) -> String {
    let mut s = r["method"].as_str().unwrap_or("?").to_string();
    if let Some(k) = r["k"].as_u64() {
        s.push_str(&format!(":{k}"));
    }
    if r["mpk"] == Value::Bool(true) {
        s.push_str(":mpk");
    }
    s
}

pub(crate) fn run(a: &Args) -> Result<()> {
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let target = Metadata::load()?.target_directory;
    let krylov = target.join("release").join("krylov");
    let dir = target.join("plan-scale");
    std::fs::create_dir_all(&dir)?;
    let m = dir.join(format!("poisson3d-{}.mtx", a.n));
    if !m.exists() {
        let mut gen = Command::new(&krylov);
        gen.args(["gen", "poisson3d", "--n", &a.n.to_string(), "-o"]);
        workspace::run(gen.arg(&m))?;
    }
    let probes = dir.join("probes");
    // A fresh folder: the second plan below finds the first's runs, nothing older.
    let _ = std::fs::remove_dir_all(&probes);
    println!(
        "krylov plan poisson3d n={} --ranks {} --fabric {} (default flags)",
        a.n, a.ranks, a.fabric
    );
    println!("| run | load avg before | wall s | rows | not priced | recommended |");
    println!("|---|---|---|---|---|---|");
    let mut cold = None;
    let mut unpriced_any = 0;
    for (name, store) in [
        ("cold (--no-probe-cache)", None),
        ("first, storing probes", Some(probes.as_path())),
        ("again, stored probes", Some(probes.as_path())),
    ] {
        let load = loadavg();
        let (s, rows) = plan(&krylov, &m, a, store)?;
        let unpriced: Vec<&Value> = rows.iter().filter(|r| !r["unpriced"].is_null()).collect();
        unpriced_any += unpriced.len();
        let best = rows
            .iter()
            .find(|r| r["recommended"] == Value::Bool(true))
            .map_or("none".into(), label);
        println!(
            "| {name} | {load} | {s:.1} | {} | {} | {best} |",
            rows.len(),
            unpriced.len()
        );
        for r in unpriced {
            println!("    not priced: {} ({})", label(r), r["unpriced"]);
        }
        cold.get_or_insert(s);
    }
    let cold = cold.unwrap_or_default();
    if unpriced_any > 0 {
        bail!("{unpriced_any} rows not priced");
    }
    if cold > a.max_s {
        bail!(
            "the cold plan took {cold:.1} s, over the target of {} s",
            a.max_s
        );
    }
    println!(
        "ok: every row priced; the cold plan took {cold:.1} s (target {} s)",
        a.max_s
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_defaults_and_flags() {
        let d = Args::parse(&[]).unwrap();
        assert_eq!(
            (d.n, d.ranks, d.fabric.as_str(), d.max_s),
            (64, 4096, "ito", 60.0)
        );
        let a = Args::parse(&strings(&["--n", "32", "--ranks", "512", "--max-s", "5"])).unwrap();
        assert_eq!((a.n, a.ranks, a.max_s), (32, 512, 5.0));
        assert!(Args::parse(&strings(&["--max-s", "-1"])).is_err());
        assert!(Args::parse(&strings(&["--bogus"])).is_err());
    }
}
