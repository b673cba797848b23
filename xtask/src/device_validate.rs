//! `cargo xtask device-validate`: the device model's prediction of this machine's CG against
//! measured solves (issue 24, item 2).
//!
//! Steps:
//! 1. `cargo build --release -p castack-cli`; the 3-D Poisson matrices
//!    `target/device-validate/p{N}.mtx` (`krylov gen poisson3d --n N`) unless they exist.
//! 2. `--rounds R` rounds. Each round, without `--fabric`, first measures this machine
//!    (`krylov calibrate -o target/device-validate/local-R.toml`: the shared machine's
//!    speed drifts by tens of percent from minute to minute, so each prediction is made
//!    from a calibration taken beside the solves it is compared with); then per size the
//!    prediction `krylov solve pN.mtx --backend sim --fabric F --ranks 1 --threads 1
//!    --json` and the measured `krylov solve pN.mtx --ranks 1 --threads 1 --json`, with the
//!    1-minute load average before it.
//! 3. The table: iterations (the sim runs the same iterations: it must agree exactly),
//!    predicted and measured (median [min, max]) microseconds per iteration, the median
//!    [min, max] over rounds of the per-round ratio, and whether its median is within the
//!    tolerance (default 15%).
//!
//! A measurement for notes: it fails when a run fails or the iterations differ, and with
//! `--strict` also when a ratio is outside the tolerance.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::flags::Flags;
use crate::vs_petsc::{json_run, load_average, median, min_max};
use crate::workspace::{self, cargo, root};

pub(crate) const USAGE: &str = "\
usage: cargo xtask device-validate [--fabric FILE] [--sizes 16,32,64,100] [--rounds 3]
                                   [--tolerance 0.15] [--strict]

krylov solve --backend sim --fabric FILE --ranks 1 --threads 1 (the device model's prediction)
against the measured krylov solve --ranks 1 --threads 1 of the n^3-row 3-D Poisson matrix for
each size, interleaved over rounds; prints predicted and measured us per iteration and their
ratio, with the load seen.

  --fabric FILE     the preset to check (default: `krylov calibrate` in every round, beside
                    the solves it predicts)
  --sizes LIST      grid points per direction (default 16,32,64,100)
  --rounds R        measured rounds (default 3; the table gives medians)
  --tolerance T     relative tolerance of |predicted / measured - 1| (default 0.15)
  --strict          fail when a ratio is outside the tolerance";

pub(crate) struct Args {
    fabric: Option<PathBuf>,
    sizes: Vec<usize>,
    rounds: usize,
    tolerance: f64,
    strict: bool,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut f = Flags::new(args);
        let fabric = f.value("--fabric")?.map(PathBuf::from);
        let sizes = match f.value("--sizes")? {
            Some(v) => v
                .split(',')
                .map(|s| s.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .context("--sizes needs a comma-separated list of integers")?,
            None => vec![16, 32, 64, 100],
        };
        let rounds = match f.value("--rounds")? {
            Some(v) => v.parse().context("--rounds needs a positive integer")?,
            None => 3,
        };
        let tolerance: f64 = match f.value("--tolerance")? {
            Some(v) => v.parse().context("--tolerance needs a number")?,
            None => 0.15,
        };
        let strict = f.switch("--strict");
        f.finish()?;
        if sizes.is_empty() || sizes.iter().any(|&n| !(2..=400).contains(&n)) {
            bail!("--sizes must list sizes in 2..=400");
        }
        if rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        if !(tolerance.is_finite() && tolerance > 0.0) {
            bail!("--tolerance must be a positive number");
        }
        Ok(Self {
            fabric,
            sizes,
            rounds,
            tolerance,
            strict,
        })
    }
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let out = root().join("target/device-validate");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let krylov = root().join("target/release/krylov");
    let mut mtx = Vec::new();
    for &n in &args.sizes {
        let p = out.join(format!("p{n}.mtx"));
        if !p.is_file() {
            workspace::run(
                Command::new(&krylov)
                    .args(["gen", "poisson3d", "--n", &n.to_string(), "-o"])
                    .arg(&p),
            )?;
        }
        mtx.push(p);
    }
    let solve = |m: &Path, fabric: Option<&Path>| -> Result<(u64, f64)> {
        let mut cmd = Command::new(&krylov);
        cmd.arg("solve")
            .arg(m)
            .args(["--ranks", "1", "--threads", "1", "--json"]);
        if let Some(f) = fabric {
            cmd.args(["--backend", "sim", "--fabric"]).arg(f);
        }
        json_run(&mut cmd)
    };
    // Per size: predicted and measured us per iteration and their ratio, one per round.
    let k = mtx.len();
    let (mut pred, mut meas, mut ratio) = (
        vec![Vec::new(); k],
        vec![Vec::new(); k],
        vec![Vec::new(); k],
    );
    let mut iters = vec![0u64; k];
    let mut loads = Vec::new();
    for round in 0..args.rounds {
        // The machine is shared and its speed drifts: without a given preset, calibrate
        // again in every round, so each prediction meets the solves measured beside it.
        let fabric = match &args.fabric {
            Some(f) => f.clone(),
            None => {
                let f = out.join(format!("local-{round}.toml"));
                workspace::run(Command::new(&krylov).arg("calibrate").arg("-o").arg(&f))?;
                f
            }
        };
        for (i, m) in mtx.iter().enumerate() {
            let (it_p, s_p) = solve(m, Some(&fabric))?;
            loads.push(load_average());
            let (it, s) = solve(m, None).with_context(|| format!("round {round}"))?;
            if it != it_p {
                bail!(
                    "{}: {it} iterations measured, {it_p} in the sim: the backends must agree",
                    m.display()
                );
            }
            iters[i] = it;
            let (p, q) = (1e6 * s_p / it as f64, 1e6 * s / it as f64);
            println!(
                "round {round}: n = {}: predicted {p:.1} us/it, measured {q:.1} us/it, ratio {:.3}",
                args.sizes[i],
                p / q
            );
            pred[i].push(p);
            meas[i].push(q);
            ratio[i].push(p / q);
        }
    }
    println!(
        "\npreset: {}\n\n| n | rows | iterations | predicted us/it | measured us/it median [min, max] | predicted / measured, median [min, max] over rounds | within {:.0}% |\n|---|---|---|---|---|---|---|",
        args.fabric.as_ref().map_or_else(
            || "krylov calibrate in every round (target/device-validate/local-R.toml)".to_string(),
            |f| f.display().to_string()
        ),
        100.0 * args.tolerance
    );
    let mut outside = Vec::new();
    for (i, &n) in args.sizes.iter().enumerate() {
        let (mlo, mhi) = min_max(&meas[i]);
        let (rlo, rhi) = min_max(&ratio[i]);
        let r = median(&mut ratio[i]);
        let ok = (r - 1.0).abs() <= args.tolerance;
        if !ok {
            outside.push(n);
        }
        println!(
            "| {n} | {} | {} | {:.1} | {:.1} [{mlo:.1}, {mhi:.1}] | {r:.3} [{rlo:.3}, {rhi:.3}] | {} |",
            n * n * n,
            iters[i],
            median(&mut pred[i]),
            median(&mut meas[i]),
            if ok { "yes" } else { "no" }
        );
    }
    let (lo, hi) = min_max(&loads);
    println!(
        "\nload average (1 min) before the measured runs: median {:.2} [{lo:.2}, {hi:.2}]; {} rounds",
        median(&mut loads),
        args.rounds
    );
    if args.strict && !outside.is_empty() {
        bail!("predictions outside the tolerance for n = {outside:?}");
    }
    Ok(())
}
