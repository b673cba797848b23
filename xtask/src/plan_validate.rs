//! `cargo xtask plan-validate`: `krylov plan` against the simulator it models (issue 9
//! "Done when"). For every matrix, rank count and candidate it runs `krylov plan --json`
//! (one candidate per call, every rank count at once) and `krylov solve --backend sim
//! --json`, then prints per rank count the planned best (least predicted total among the
//! candidates), the simulated best (least modeled time of the slowest rank,
//! `modeled_max_time_s`), the simulated time of the planned best over the simulated best,
//! and the worst predicted/simulated ratio (the one furthest from 1). Exits 1 when a check
//! fails (planned best more than 10% slower than the simulated best, or a predicted total
//! off by more than 15%).

use crate::flags::{parse_list, parse_positive_list, Flags};
use crate::workspace::{self, cargo, Metadata};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) const USAGE: &str = "\
usage: cargo xtask plan-validate --matrices A.mtx[,B.mtx] [--ranks 4,8,16,32,64] [--fabric fx100]
                                 [--candidates cg,ccg,pipecg,cacg:4,cbcgr:4,cbcgr:8] [--tol 1e-12]

Builds `krylov` in release; for each matrix runs `krylov plan M --ranks LIST --fabric F
--methods NAME:chebyshev --k K..K --no-mpk --tol T --json` per candidate and `krylov solve M
--backend sim --fabric F --ranks P --method NAME [--k K --basis chebyshev] --tol T --json`
per candidate and rank count (Jacobi, b = A * ones, as both default to). Prints one row per
(matrix, P) and each candidate's predicted / simulated seconds; exits 1 when the planned best
runs more than 10% slower than the simulated best or a prediction is off by more than 15%.

  --matrices LIST    Matrix Market files (e.g. from `krylov gen poisson3d --n 64`)
  --ranks LIST       rank counts (default 4,8,16,32,64)
  --fabric NAME      fabric preset (default fx100)
  --candidates LIST  NAME or NAME:K (default cg,ccg,pipecg,cacg:4,cbcgr:4,cbcgr:8)
  --tol T            relative tolerance (default 1e-12)";

/// Flags of `cargo xtask plan-validate`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    matrices: Vec<PathBuf>,
    ranks: Vec<usize>,
    fabric: String,
    candidates: Vec<(String, Option<usize>)>,
    tol: f64,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let matrices = match flags.value("--matrices")? {
            Some(list) => parse_list::<PathBuf>("--matrices", &list)?,
            None => bail!("--matrices is required"),
        };
        let ranks = match flags.value("--ranks")? {
            Some(list) => parse_positive_list("--ranks", &list)?,
            None => vec![4, 8, 16, 32, 64],
        };
        let fabric = flags.value("--fabric")?.unwrap_or_else(|| "fx100".into());
        let list = flags
            .value("--candidates")?
            .unwrap_or_else(|| "cg,ccg,pipecg,cacg:4,cbcgr:4,cbcgr:8".into());
        let mut candidates = Vec::new();
        for item in parse_list::<String>("--candidates", &list)? {
            candidates.push(match item.split_once(':') {
                Some((m, k)) => {
                    let k: usize = k
                        .parse()
                        .with_context(|| format!("--candidates: bad k in `{item}`"))?;
                    (m.to_string(), Some(k))
                }
                None => (item, None),
            });
        }
        let tol = match flags.value("--tol")? {
            Some(t) => t
                .parse()
                .with_context(|| format!("--tol: not a number: `{t}`"))?,
            None => 1e-12,
        };
        flags.finish()?;
        Ok(Args {
            matrices,
            ranks,
            fabric,
            candidates,
            tol,
        })
    }
}

fn label(c: &(String, Option<usize>)) -> String {
    match c.1 {
        Some(k) => format!("{}:{k}", c.0),
        None => c.0.clone(),
    }
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| workspace::describe(cmd))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            workspace::describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Predicted totals of candidate `c` per rank count.
fn plan(krylov: &Path, m: &Path, a: &Args, c: &(String, Option<usize>)) -> Result<Vec<f64>> {
    let ranks: Vec<String> = a.ranks.iter().map(usize::to_string).collect();
    let mut cmd = Command::new(krylov);
    cmd.arg("plan").arg(m).args(["--ranks", &ranks.join(",")]);
    cmd.args(["--fabric", &a.fabric, "--tol", &a.tol.to_string(), "--json"]);
    match c.1 {
        Some(k) => cmd.args([
            "--methods",
            &format!("{}:chebyshev", c.0),
            "--k",
            &format!("{k}..{k}"),
            "--no-mpk",
        ]),
        None => cmd.args(["--methods", &c.0]),
    };
    let text = output(&mut cmd)?;
    let rows: Vec<Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    a.ranks
        .iter()
        .map(|&p| {
            rows.iter()
                .find(|r| r["ranks"].as_u64() == Some(p as u64))
                .and_then(|r| r["predicted_total_s"].as_f64())
                .with_context(|| format!("{}: no feasible plan row at P = {p}", label(c)))
        })
        .collect()
}

/// The slowest rank's modeled seconds of a sim solve.
fn simulate(
    krylov: &Path,
    m: &Path,
    a: &Args,
    p: usize,
    c: &(String, Option<usize>),
) -> Result<f64> {
    let mut cmd = Command::new(krylov);
    cmd.arg("solve")
        .arg(m)
        .args(["--backend", "sim", "--fabric", &a.fabric]);
    cmd.args(["--ranks", &p.to_string(), "--method", &c.0]);
    cmd.args(["--tol", &a.tol.to_string(), "--json"]);
    if let Some(k) = c.1 {
        cmd.args(["--k", &k.to_string(), "--basis", "chebyshev"]);
    }
    let v: Value = serde_json::from_str(output(&mut cmd)?.trim())?;
    if v["converged"] != Value::Bool(true) {
        bail!("{} at P = {p} did not converge", label(c));
    }
    v["modeled_max_time_s"]
        .as_f64()
        .context("sim report without modeled_max_time_s")
}

pub(crate) fn run(a: &Args) -> Result<()> {
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let krylov = Metadata::load()?
        .target_directory
        .join("release")
        .join("krylov");
    let mut failed = false;
    println!(
        "| matrix | P | planned best | simulated best | planned/best (sim) | worst pred/sim |"
    );
    println!("|---|---|---|---|---|---|");
    let mut details = Vec::new();
    for m in &a.matrices {
        let preds: Vec<Vec<f64>> = a
            .candidates
            .iter()
            .map(|c| plan(&krylov, m, a, c))
            .collect::<Result<_>>()?;
        for (i, &p) in a.ranks.iter().enumerate() {
            let mut sims = Vec::new();
            for (j, c) in a.candidates.iter().enumerate() {
                let s = simulate(&krylov, m, a, p, c)?;
                details.push(format!(
                    "{} P={p} {}: predicted {:.4e} s, simulated {s:.4e} s, ratio {:.3}",
                    m.display(),
                    label(c),
                    preds[j][i],
                    preds[j][i] / s
                ));
                sims.push(s);
            }
            let argmin = |v: &mut dyn Iterator<Item = f64>| {
                v.enumerate()
                    .min_by(|x, y| x.1.total_cmp(&y.1))
                    .map_or(0, |(i, _)| i)
            };
            let planned = argmin(&mut preds.iter().map(|r| r[i]));
            let best = argmin(&mut sims.iter().copied());
            let ratio = sims[planned] / sims[best];
            let worst = (0..sims.len())
                .map(|j| preds[j][i] / sims[j])
                .max_by(|x, y| (x - 1.0).abs().total_cmp(&(y - 1.0).abs()))
                .unwrap_or(1.0);
            failed |= ratio > 1.10 || (worst - 1.0).abs() > 0.15;
            println!(
                "| {} | {p} | {} | {} | {ratio:.3} | {worst:.3} |",
                m.file_name().map_or_else(
                    || m.display().to_string(),
                    |f| f.to_string_lossy().into_owned()
                ),
                label(&a.candidates[planned]),
                label(&a.candidates[best]),
            );
        }
    }
    for d in &details {
        println!("{d}");
    }
    if failed {
        bail!("plan-validate: a check failed (planned best > 1.10 x simulated best, or |pred/sim - 1| > 0.15)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_candidates_and_defaults() {
        let a = Args::parse(&args(&[
            "--matrices",
            "a.mtx,b.mtx",
            "--candidates",
            "cg,cbcgr:8",
        ]))
        .unwrap();
        assert_eq!(a.matrices.len(), 2);
        assert_eq!(a.ranks, vec![4, 8, 16, 32, 64]);
        assert_eq!(a.fabric, "fx100");
        assert_eq!(
            a.candidates,
            vec![("cg".to_string(), None), ("cbcgr".to_string(), Some(8))]
        );
        assert_eq!(a.tol, 1e-12);
        assert_eq!(label(&a.candidates[1]), "cbcgr:8");
    }

    #[test]
    fn rejects_missing_matrices_and_bad_k() {
        assert!(Args::parse(&args(&[])).is_err());
        assert!(Args::parse(&args(&["--matrices", "a.mtx", "--candidates", "cacg:x"])).is_err());
    }
}
