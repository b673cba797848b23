//! `cargo xtask calibrate-validate`: a preset from `mpirun -np P krylov calibrate --backend
//! mpi` against measured MPI solves (issue 48, item 2).
//!
//! Steps:
//! 1. Build `krylov` in release with `--features mpi`; the 3-D Poisson matrices
//!    `target/calibrate-validate/p{N}.mtx` (`krylov gen poisson3d --n N`) unless they exist.
//! 2. `--rounds R` rounds. Each round, without `--fabric`, first calibrates (`mpirun -np P
//!    krylov calibrate --backend mpi -o target/calibrate-validate/cal-R.toml`: the shared
//!    machine's speed drifts from minute to minute, so each prediction is made from a
//!    calibration taken beside the solves it is compared with); then per matrix and method,
//!    interleaved, the prediction `krylov plan pN.mtx --ranks P --fabric F --methods M --tol T
//!    --json` (a k method: `--methods M:chebyshev --k K..K --no-mpk`, as plan-validate) and
//!    the measured `mpirun -np P krylov solve pN.mtx --backend mpi --method M [--k K --basis
//!    chebyshev] --tol T --json`, with the 1-minute load average before it.
//! 3. The table: predicted and measured CG-equivalent iterations, predicted and measured
//!    (median [min, max]) microseconds per CG-equivalent iteration, the median [min, max]
//!    over rounds of the per-round ratio predicted / measured, whether its median is within
//!    the tolerance (default 20%), and the medians of the local work and the communication
//!    per iteration, predicted (plan's `compute_s`; `allreduce_s + halo_s`) and measured
//!    (rank 0's time breakdown: spmv, blas, precond, transfer, other; allreduce and halo,
//!    waiting for the other ranks included): where a prediction misses.
//!
//! A measurement for notes: it fails when a run fails, and with `--strict` also when a
//! ratio is outside the tolerance.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::flags::Flags;
use crate::mpi_test::{build_krylov, check_mpirun, mpirun};
use crate::vs_petsc::{load_average, median, min_max};
use crate::workspace::{self, root};

pub(crate) const USAGE: &str = "\
usage: cargo xtask calibrate-validate [--np 2] [--sizes 32,64,100] [--methods cg,ccg,pipecg,cbcgr:4]
                                      [--rounds 2] [--tol 1e-12] [--tolerance 0.2] [--fabric FILE]
                                      [--strict]

krylov plan --ranks P --fabric FILE (the prediction) against the measured mpirun -np P krylov
solve --backend mpi of the n^3-row 3-D Poisson matrix for each size and method, interleaved
over rounds, with FILE from mpirun -np P krylov calibrate --backend mpi in every round; prints
predicted and measured us per CG-equivalent iteration and their ratio, with the load seen.

  --np P            MPI ranks (default 2)
  --sizes LIST      grid points per direction (default 32,64,100)
  --methods LIST    NAME or NAME:K (default cg,ccg,pipecg,cbcgr:4)
  --rounds R        rounds (default 2; the table gives medians)
  --tol T           relative tolerance of plan and solve (default 1e-12, plan's default)
  --tolerance X     allowed |predicted / measured - 1| (default 0.2)
  --fabric FILE     the preset to check (default: calibrate in every round, beside the solves)
  --strict          fail when a ratio is outside the tolerance";

pub(crate) struct Args {
    np: usize,
    sizes: Vec<usize>,
    methods: Vec<(String, Option<usize>)>,
    rounds: usize,
    tol: f64,
    tolerance: f64,
    fabric: Option<PathBuf>,
    strict: bool,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut f = Flags::new(args);
        let np = match f.value("--np")? {
            Some(v) => v.parse().context("--np needs an integer")?,
            None => 2,
        };
        let sizes = match f.value("--sizes")? {
            Some(v) => v
                .split(',')
                .map(|s| s.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .context("--sizes needs a comma-separated list of integers")?,
            None => vec![32, 64, 100],
        };
        let list = f
            .value("--methods")?
            .unwrap_or_else(|| "cg,ccg,pipecg,cbcgr:4".into());
        let mut methods = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            methods.push(match item.split_once(':') {
                Some((m, k)) => (
                    m.to_string(),
                    Some(
                        k.parse()
                            .with_context(|| format!("--methods: bad k in {item}"))?,
                    ),
                ),
                None => (item.to_string(), None),
            });
        }
        let rounds = match f.value("--rounds")? {
            Some(v) => v.parse().context("--rounds needs a positive integer")?,
            None => 2,
        };
        let tol: f64 = match f.value("--tol")? {
            Some(v) => v.parse().context("--tol needs a number")?,
            None => 1e-12,
        };
        let tolerance: f64 = match f.value("--tolerance")? {
            Some(v) => v.parse().context("--tolerance needs a number")?,
            None => 0.2,
        };
        let fabric = f.value("--fabric")?.map(PathBuf::from);
        let strict = f.switch("--strict");
        f.finish()?;
        if np < 2 {
            bail!("--np must be at least 2 (the network between ranks)");
        }
        if sizes.is_empty() || sizes.iter().any(|&n| !(2..=400).contains(&n)) {
            bail!("--sizes must list sizes in 2..=400");
        }
        if methods.is_empty() {
            bail!("--methods lists no method");
        }
        if rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        if !(tol > 0.0 && tol < 1.0) {
            bail!("--tol must be in (0, 1)");
        }
        if !(tolerance.is_finite() && tolerance > 0.0) {
            bail!("--tolerance must be a positive number");
        }
        Ok(Self {
            np,
            sizes,
            methods,
            rounds,
            tol,
            tolerance,
            fabric,
            strict,
        })
    }
}

/// The last JSON line `cmd` prints (fails on a failed run).
fn json_line(cmd: &mut Command) -> Result<Value> {
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
    serde_json::from_str(line).context("reading the run's JSON line")
}

fn number(v: &Value, key: &str) -> Result<f64> {
    v[key]
        .as_f64()
        .filter(|x| x.is_finite())
        .with_context(|| format!("no number `{key}` in {v}"))
}

/// One cell's figures over the rounds.
#[derive(Default, Clone)]
struct Cell {
    pred_it: f64,
    meas_it: f64,
    pred: Vec<f64>,
    meas: Vec<f64>,
    ratio: Vec<f64>,
    /// Per CG-equivalent iteration (us): local work (predicted `compute_s`; measured spmv,
    /// blas, precond, transfer, other) and communication (allreduce and halo, waiting
    /// included), predicted and measured.
    parts: Vec<[f64; 4]>,
}

/// (local work, communication) in us per CG-equivalent iteration of a solve's JSON row
/// with `eq` equivalent iterations.
fn measured_parts(s: &Value, eq: f64) -> Result<(f64, f64)> {
    let b = &s["time_breakdown"];
    let sum =
        |keys: &[&str]| -> Result<f64> { keys.iter().map(|k| number(b, k)).sum::<Result<f64>>() };
    Ok((
        1e6 * sum(&["spmv", "blas", "precond", "transfer", "other"])? / eq,
        1e6 * sum(&["allreduce", "halo"])? / eq,
    ))
}

pub(crate) fn run(args: &Args) -> Result<()> {
    check_mpirun()?;
    let out = root().join("target/calibrate-validate");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let krylov = build_krylov(true)?;
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
    let tol = format!("{:e}", args.tol);
    let np = args.np.to_string();
    // As plan-validate: a k method with the Chebyshev basis and no matrix powers kernel in
    // both (the solve's default SpMV is the halo exchange).
    let predict = |m: &Path, fabric: &Path, method: &str, k: Option<usize>| -> Result<Value> {
        let mut cmd = Command::new(&krylov);
        cmd.arg("plan")
            .arg(m)
            .args(["--ranks", &np, "--fabric"])
            .arg(fabric)
            .args(["--tol", &tol, "--json"]);
        match k {
            Some(k) => cmd.args([
                "--methods",
                &format!("{method}:chebyshev"),
                "--k",
                &format!("{k}..{k}"),
                "--no-mpk",
            ]),
            None => cmd.args(["--methods", method]),
        };
        json_line(&mut cmd)
    };
    let measure = |m: &Path, method: &str, k: Option<usize>| -> Result<Value> {
        let mut cmd = mpirun(args.np);
        cmd.arg(&krylov).arg("solve").arg(m).args([
            "--backend",
            "mpi",
            "--method",
            method,
            "--tol",
            &tol,
            "--json",
        ]);
        if let Some(k) = k {
            cmd.args(["--k", &k.to_string(), "--basis", "chebyshev"]);
        }
        json_line(&mut cmd)
    };
    let label = |(m, k): &(String, Option<usize>)| match k {
        Some(k) => format!("{m}:{k}"),
        None => m.clone(),
    };
    let mut cells = vec![vec![Cell::default(); args.methods.len()]; mtx.len()];
    let mut loads = Vec::new();
    for round in 0..args.rounds {
        let fabric = match &args.fabric {
            Some(f) => f.clone(),
            None => {
                let f = out.join(format!("cal-{round}.toml"));
                loads.push(load_average());
                workspace::run(
                    mpirun(args.np)
                        .arg(&krylov)
                        .args(["calibrate", "--backend", "mpi", "-o"])
                        .arg(&f),
                )?;
                f
            }
        };
        for (i, m) in mtx.iter().enumerate() {
            for (j, (method, k)) in args.methods.iter().enumerate() {
                let p = predict(m, &fabric, method, *k)?;
                loads.push(load_average());
                let s = measure(m, method, *k).with_context(|| format!("round {round}"))?;
                let pred = 1e6 * number(&p, "predicted_s_per_eq_iter")?;
                let eq = number(&s, "equivalent_iterations")?;
                if eq <= 0.0 {
                    bail!("{}: no iterations measured", m.display());
                }
                let meas = 1e6 * number(&s, "time_s")? / eq;
                let (work, comm) = measured_parts(&s, eq)?;
                let parts = [
                    1e6 * number(&p, "compute_s")?,
                    1e6 * (number(&p, "allreduce_s")? + number(&p, "halo_s")?),
                    work,
                    comm,
                ];
                let c = &mut cells[i][j];
                c.parts.push(parts);
                c.pred_it = number(&p, "predicted_eq_iterations")?;
                c.meas_it = eq;
                c.pred.push(pred);
                c.meas.push(meas);
                c.ratio.push(pred / meas);
                println!(
                    "round {round}: n = {} {:<8} predicted {pred:>9.1} us/it ({:.0} it; work {:.1}, comm {:.1}), measured {meas:>9.1} us/it ({eq:.0} it; work {work:.1}, comm {comm:.1}), ratio {:.3}, load {:.2}",
                    args.sizes[i],
                    label(&args.methods[j]),
                    c.pred_it,
                    parts[0],
                    parts[1],
                    pred / meas,
                    loads.last().copied().unwrap_or(f64::NAN)
                );
            }
        }
    }
    println!(
        "\npreset: {}; {} ranks, tol {tol}\n\n| n | method | eq. iterations predicted / measured | predicted us/it median | measured us/it median [min, max] | predicted / measured, median [min, max] over rounds | within {:.0}% | local work us/it predicted / measured | communication us/it predicted / measured |\n|---|---|---|---|---|---|---|---|---|",
        args.fabric.as_ref().map_or_else(
            || "mpirun -np P krylov calibrate --backend mpi in every round (target/calibrate-validate/cal-R.toml)".to_string(),
            |f| f.display().to_string()
        ),
        args.np,
        100.0 * args.tolerance
    );
    let mut outside = Vec::new();
    for (i, &n) in args.sizes.iter().enumerate() {
        for (j, method) in args.methods.iter().enumerate() {
            let c = &mut cells[i][j];
            let (mlo, mhi) = min_max(&c.meas);
            let (rlo, rhi) = min_max(&c.ratio);
            let r = median(&mut c.ratio);
            let ok = (r - 1.0).abs() <= args.tolerance;
            if !ok {
                outside.push(format!("n = {n} {}", label(method)));
            }
            let part = |k: usize| median(&mut c.parts.iter().map(|p| p[k]).collect::<Vec<_>>());
            let parts = [part(0), part(1), part(2), part(3)];
            println!(
                "| {n} | {} | {:.0} / {:.0} | {:.1} | {:.1} [{mlo:.1}, {mhi:.1}] | {r:.3} [{rlo:.3}, {rhi:.3}] | {} | {:.1} / {:.1} | {:.1} / {:.1} |",
                label(method),
                c.pred_it,
                c.meas_it,
                median(&mut c.pred),
                median(&mut c.meas),
                if ok { "yes" } else { "no" },
                parts[0],
                parts[2],
                parts[1],
                parts[3]
            );
        }
    }
    let (lo, hi) = min_max(&loads);
    println!(
        "\nload average (1 min) before the calibrations and measured runs: median {:.2} [{lo:.2}, {hi:.2}]; {} rounds; {} CPUs",
        median(&mut loads),
        args.rounds,
        std::thread::available_parallelism().map_or(0, |c| c.get())
    );
    if args.strict && !outside.is_empty() {
        bail!("predictions outside the tolerance: {}", outside.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_flags() {
        let a = Args::parse(&[]).unwrap();
        assert_eq!((a.np, a.rounds, a.sizes.clone()), (2, 2, vec![32, 64, 100]));
        assert_eq!(a.methods.len(), 4);
        assert_eq!(a.methods[3], ("cbcgr".to_string(), Some(4)));
        let a = Args::parse(&strings(&["--methods", "cg,cacg:8", "--np", "3"])).unwrap();
        assert_eq!(a.methods[1], ("cacg".to_string(), Some(8)));
        assert_eq!(a.np, 3);
        assert!(Args::parse(&strings(&["--np", "1"])).is_err());
        assert!(Args::parse(&strings(&["--sizes", "1"])).is_err());
        assert!(Args::parse(&strings(&["--methods", "cg:x"])).is_err());
    }
}
