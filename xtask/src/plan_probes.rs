//! `cargo xtask plan-probes`: the planner's tracked iteration counts against full runs of
//! every candidate, and the time of each plan (issue 24, item 4).
//!
//! Steps: `cargo build --release -p castack-cli`; the heterogeneous 3-D Poisson matrix
//! `target/plan-probes/h{N}.mtx` (`krylov gen poisson3d --n N --heterogeneous`, the CA-CG
//! study's problem) unless it exists; then `krylov plan --json --no-probe-cache` with
//! `--probe full` (every candidate run to the tolerance: the reference) and with the
//! default `--probe tracked`, each timed; prints per (method, k) the full and tracked
//! iterations, the source of the tracked figure and the relative error, the recommended
//! rows of both plans and both wall times. Exits 1 when a tracked count is off by more than
//! the tolerance (default 10%).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::flags::{parse_positive_list, Flags};
use crate::workspace::{self, cargo, root};

pub(crate) const USAGE: &str = "\
usage: cargo xtask plan-probes [--n 64] [--ranks 16,128] [--fabric fx100] [--tol 1e-12]
                               [--tolerance 0.10]

krylov plan of the n^3 heterogeneous 3-D Poisson matrix with --probe full and --probe tracked
(no probe cache): per candidate the iterations of both and their relative difference, the
recommendation of both, and the wall time of each plan.

  --n N            grid points per direction (default 64; about 3.5 minutes for the full plan)
  --ranks LIST     rank counts to plan (default 16,128)
  --fabric NAME    fabric preset (default fx100)
  --tol T          relative tolerance (default 1e-12)
  --tolerance E    largest |tracked / full - 1| accepted (default 0.10)";

/// Flags of `cargo xtask plan-probes`.
pub(crate) struct Args {
    n: usize,
    ranks: Vec<usize>,
    fabric: String,
    tol: f64,
    tolerance: f64,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut f = Flags::new(args);
        let n = match f.value("--n")? {
            Some(v) => v.parse().context("--n needs a positive integer")?,
            None => 64,
        };
        let ranks = match f.value("--ranks")? {
            Some(list) => parse_positive_list("--ranks", &list)?,
            None => vec![16, 128],
        };
        let fabric = f.value("--fabric")?.unwrap_or_else(|| "fx100".into());
        let tol: f64 = match f.value("--tol")? {
            Some(v) => v.parse().context("--tol needs a number")?,
            None => 1e-12,
        };
        let tolerance: f64 = match f.value("--tolerance")? {
            Some(v) => v.parse().context("--tolerance needs a number")?,
            None => 0.10,
        };
        f.finish()?;
        if !(2..=400).contains(&n) {
            bail!("--n must be in 2..=400");
        }
        if !(tol > 0.0 && tol < 1.0) {
            bail!("--tol must be in (0, 1)");
        }
        if !(tolerance.is_finite() && tolerance > 0.0) {
            bail!("--tolerance must be a positive number");
        }
        Ok(Self {
            n,
            ranks,
            fabric,
            tol,
            tolerance,
        })
    }
}

/// One plan's rows by (ranks, label) and its wall time.
struct Plan {
    rows: BTreeMap<(u64, String), Value>,
    wall_s: f64,
}

fn label(r: &Value) -> String {
    let mut s = r["method"].as_str().unwrap_or("?").to_string();
    if let Some(k) = r["k"].as_u64() {
        s.push_str(&format!(":{k}"));
    }
    if r["mpk"].as_bool() == Some(true) {
        s.push_str(":mpk");
    }
    s
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let out = root().join("target/plan-probes");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let krylov = root().join("target/release/krylov");
    let m = out.join(format!("h{}.mtx", args.n));
    if !m.is_file() {
        workspace::run(
            Command::new(&krylov)
                .args([
                    "gen",
                    "poisson3d",
                    "--heterogeneous",
                    "--n",
                    &args.n.to_string(),
                ])
                .arg("-o")
                .arg(&m),
        )?;
    }
    let ranks: Vec<String> = args.ranks.iter().map(ToString::to_string).collect();
    let plan = |strategy: &str| -> Result<Plan> {
        let mut cmd = Command::new(&krylov);
        cmd.arg("plan")
            .arg(&m)
            .args(["--ranks", &ranks.join(","), "--fabric", &args.fabric])
            .args(["--tol", &args.tol.to_string(), "--probe", strategy])
            .args(["--no-probe-cache", "--json"]);
        let t = Instant::now();
        let o = cmd.output().with_context(|| workspace::describe(&cmd))?;
        let wall_s = t.elapsed().as_secs_f64();
        if !o.status.success() {
            bail!(
                "{} failed: {}",
                workspace::describe(&cmd),
                String::from_utf8_lossy(&o.stderr).trim_end()
            );
        }
        let mut rows = BTreeMap::new();
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let v: Value = serde_json::from_str(line).context("reading a plan row")?;
            let p = v["ranks"].as_u64().context("a row without ranks")?;
            rows.insert((p, label(&v)), v);
        }
        println!("krylov plan --probe {strategy}: {wall_s:.1} s wall");
        Ok(Plan { rows, wall_s })
    };
    let full = plan("full")?;
    let tracked = plan("tracked")?;
    let first = args.ranks[0] as u64;
    println!(
        "\n{} (n = {}, tol {:e}), probe ranks 2: CG-equivalent iterations\n\n| candidate | full | tracked | source | tracked / full - 1 |\n|---|---|---|---|---|",
        m.display(),
        args.n,
        args.tol
    );
    let mut worst: f64 = 0.0;
    for ((p, name), f) in &full.rows {
        if *p != first || name.ends_with(":mpk") {
            continue;
        }
        let t = tracked
            .rows
            .get(&(*p, name.clone()))
            .with_context(|| format!("{name}: no tracked row"))?;
        let (fe, te) = (
            f["predicted_eq_iterations"].as_f64(),
            t["predicted_eq_iterations"].as_f64(),
        );
        let err = match (fe, te) {
            (Some(a), Some(b)) => b / a - 1.0,
            (None, None) => 0.0,
            _ => f64::INFINITY,
        };
        worst = worst.max(err.abs());
        let show = |v: Option<f64>| v.map_or("infeasible".into(), |v| format!("{v:.1}"));
        println!(
            "| {name} | {} | {} | {} | {err:+.3} |",
            show(fe),
            show(te),
            t["probe_source"].as_str().unwrap_or("-")
        );
    }
    println!();
    for &p in &args.ranks {
        let best = |plan: &Plan| {
            plan.rows
                .iter()
                .find(|((q, _), v)| *q == p as u64 && v["recommended"].as_bool() == Some(true))
                .map_or("none".to_string(), |((_, n), v)| {
                    format!(
                        "{n} ({:.4e} s)",
                        v["predicted_total_s"].as_f64().unwrap_or(f64::NAN)
                    )
                })
        };
        println!(
            "P = {p}: recommended with full probes {}, with tracked probes {}",
            best(&full),
            best(&tracked)
        );
    }
    println!(
        "\nwall time: full {:.1} s, tracked {:.1} s ({:.1}x faster); worst |tracked / full - 1| = {worst:.3}",
        full.wall_s,
        tracked.wall_s,
        full.wall_s / tracked.wall_s
    );
    if worst > args.tolerance {
        bail!(
            "a tracked count is off by {worst:.3} (> {})",
            args.tolerance
        );
    }
    Ok(())
}
