//! `cargo xtask family-sweep`: the CG family's communication-hiding variants against cg on
//! the shared matrices with condition number <= 1e8 and on generated 3-D Poisson (issue
//! 49's acceptance sweep): each method must reach `relres_true <= tol` within 1.1 x cg's
//! iterations + 2 (+ 2l for plcg of depth l, whose report gives `depth`), or say honestly
//! that it did not.
//!
//! It relies only on the documented command line (`../shared/CLI.md`): `krylov solve FILE
//! --method M --ranks R --json --max-iter CAP --tol T`. A run that does not converge, breaks
//! down or is over the bound is reported as a miss, not a failure; bad input, a panic, a
//! crash or output that breaks the JSON contract make the sweep exit 1.

use crate::flags::{parse_list, parse_positive_list, Flags};
use crate::workspace::{self, cargo, Metadata};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(crate) const USAGE: &str = "\
usage: cargo xtask family-sweep [--matrices DIR] [--max-cond 1e8] [--only NAME,...]
                                [--poisson 16,24,32] [--methods LIST]
                                [--ranks 1,4] [--tol 1e-8] [--max-iter 20000]
                                [--out family-sweep.json]

Builds `krylov` in release, then for every shared matrix whose condition number in the
folder's README.md is at most --max-cond (and generated 3-D Poisson of each --poisson
order) and every rank count runs `krylov solve FILE --method cg` and each --methods item,
and reports per run relres_true, iterations against cg's and the bound 1.1 x cg + 2 (plcg of
depth l: + 2l), and
pass (converged, relres_true <= tol, within the bound) or the reason it missed. Writes every
run as one JSON line to --out. Exits 1 only when a run reports bad input (exit 2), panics
(101), crashes or breaks the JSON contract.

  --matrices DIR  matrix folder with its README.md (default ../shared/matrices)
  --max-cond K    the largest condition number (README's kappa estimate) swept (default 1e8)
  --only LIST     only these matrix names (of those under --max-cond)
  --poisson LIST  orders n of generated 3-D Poisson (n^3 rows; default 16,24,32; `none`)
  --methods LIST  the methods compared with cg (default prcg,pipeprcg,groppcg,plcg,
                  plcg --depth 2,plcg --depth 3); an item may carry solve flags after the
                  name, e.g. `pipecg --auto-replace=false`
  --ranks LIST    rank counts (default 1,4)
  --tol T         relative tolerance (default 1e-8)
  --max-iter N    iteration cap (default 20000)
  --out FILE      JSON lines output (default family-sweep.json)";

/// The methods compared with cg by default: issue 49's, plcg at the depths it keeps cg's
/// iterations at (deeper ones on request: `--methods 'plcg --depth 5'`).
const DEFAULT_METHODS: [&str; 6] = [
    "prcg",
    "pipeprcg",
    "groppcg",
    "plcg",
    "plcg --depth 2",
    "plcg --depth 3",
];

/// Flags of `cargo xtask family-sweep`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    matrices: Option<PathBuf>,
    max_cond: f64,
    only: Option<Vec<String>>,
    poisson: Vec<usize>,
    methods: Vec<String>,
    ranks: Vec<usize>,
    tol: f64,
    max_iter: u64,
    out: PathBuf,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let matrices = flags.value("--matrices")?.map(PathBuf::from);
        let number = |flag: &str, v: Option<String>, default: f64| -> Result<f64> {
            match v {
                None => Ok(default),
                Some(t) => {
                    let x: f64 = t
                        .parse()
                        .with_context(|| format!("{flag}: not a number: `{t}`"))?;
                    if !(x.is_finite() && x > 0.0) {
                        bail!("{flag} must be a positive number");
                    }
                    Ok(x)
                }
            }
        };
        let max_cond = number("--max-cond", flags.value("--max-cond")?, 1e8)?;
        let only = match flags.value("--only")? {
            Some(list) => Some(parse_list::<String>("--only", &list)?),
            None => None,
        };
        let poisson = match flags.value("--poisson")?.as_deref() {
            Some("none") => Vec::new(),
            Some(list) => parse_positive_list("--poisson", list)?,
            None => vec![16, 24, 32],
        };
        let methods = match flags.value("--methods")? {
            Some(list) => parse_list::<String>("--methods", &list)?,
            None => DEFAULT_METHODS.map(String::from).to_vec(),
        };
        let ranks = match flags.value("--ranks")? {
            Some(list) => parse_positive_list("--ranks", &list)?,
            None => vec![1, 4],
        };
        let tol = number("--tol", flags.value("--tol")?, 1e-8)?;
        let max_iter = number("--max-iter", flags.value("--max-iter")?, 20_000.0)? as u64;
        let out = flags
            .value("--out")?
            .map_or_else(|| PathBuf::from("family-sweep.json"), PathBuf::from);
        flags.finish()?;
        Ok(Args {
            matrices,
            max_cond,
            only,
            poisson,
            methods,
            ranks,
            tol,
            max_iter,
            out,
        })
    }
}

/// The `(name, file, condition number)` rows of the matrices README's tables: a row whose
/// second cell is a backquoted file name and that states `κ ≈ X`.
fn conditioned(readme: &str) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let Some(file) = cells[2].strip_prefix('`').and_then(|c| c.strip_suffix('`')) else {
            continue;
        };
        let Some(kappa) = line.split("κ ≈").nth(1).and_then(|rest| {
            let num: String = rest
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
                .collect();
            num.parse::<f64>().ok()
        }) else {
            continue;
        };
        out.push((cells[1].to_string(), file.to_string(), kappa));
    }
    out
}

/// What one `krylov solve` gave.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    matrix: String,
    ranks: usize,
    method: String,
    exit_code: Option<i32>,
    report: Option<Value>,
    message: String,
}

impl Run {
    fn iterations(&self) -> Option<u64> {
        self.report.as_ref()?["iterations"].as_u64()
    }

    fn relres_true(&self) -> Option<f64> {
        self.report.as_ref()?["relres_true"].as_f64()
    }

    /// The iterations allowed beyond 1.1 x cg's: 2, and 2l more for a pipeline of depth
    /// l (plcg: its start-up and its restarts' start-up).
    fn slack(&self) -> u64 {
        2 + 2 * self
            .report
            .as_ref()
            .and_then(|r| r["depth"].as_u64())
            .unwrap_or(0)
    }

    fn converged(&self) -> bool {
        self.report
            .as_ref()
            .and_then(|r| r["converged"].as_bool())
            .unwrap_or(false)
    }

    /// Bad input, a panic, a crash or output that is not one JSON object.
    fn is_failure(&self) -> bool {
        !matches!(self.exit_code, Some(0 | 1))
            || (self.exit_code == Some(0) && self.report.is_none())
    }
}

fn solve(
    krylov: &Path,
    file: &Path,
    matrix: &str,
    ranks: usize,
    method: &str,
    args: &Args,
) -> Result<Run> {
    let mut cmd = Command::new(krylov);
    let mut item = method.split_whitespace();
    cmd.arg("solve")
        .arg(file)
        .args(["--method", item.next().unwrap_or_default()])
        .args(item)
        .args(["--ranks", &ranks.to_string()])
        .args(["--tol", &format!("{:e}", args.tol)])
        .args(["--max-iter", &args.max_iter.to_string()])
        .arg("--json")
        .stdin(Stdio::null());
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{}`", workspace::describe(&cmd)))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str::<Value>(stdout.trim())
        .ok()
        .filter(Value::is_object);
    let message = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    Ok(Run {
        matrix: matrix.to_string(),
        ranks,
        method: method.to_string(),
        exit_code: out.status.code(),
        report,
        message,
    })
}

/// The verdict on `run` against cg's `cg_it` iterations: `pass` or why it missed.
fn verdict(run: &Run, cg_it: Option<u64>, tol: f64) -> String {
    let Some(rel) = run.relres_true() else {
        return format!("miss: no report ({})", run.message);
    };
    if !run.converged() || rel > tol {
        let why = run
            .report
            .as_ref()
            .map_or(Value::Null, |r| r["stop_reason"].clone());
        return format!("miss: not converged ({why})");
    }
    let slack = run.slack();
    match (run.iterations(), cg_it) {
        (Some(it), Some(cg)) if it as f64 > 1.1 * cg as f64 + slack as f64 => {
            format!("miss: {it} > 1.1 x {cg} + {slack}")
        }
        (Some(_), Some(_)) => "pass".to_string(),
        _ => "pass (cg did not converge)".to_string(),
    }
}

pub(crate) fn run(args: &Args) -> Result<()> {
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let target = Metadata::load()?.target_directory;
    let krylov = target.join("release").join("krylov");
    if !krylov.is_file() {
        bail!("{} is missing after the build", krylov.display());
    }
    let root = workspace::root();
    let dir = args.matrices.clone().unwrap_or_else(|| {
        root.parent()
            .unwrap_or(&root)
            .join("shared")
            .join("matrices")
    });
    let readme = std::fs::read_to_string(dir.join("README.md"))
        .with_context(|| format!("{} has no readable README.md", dir.display()))?;
    let mut cases: Vec<(String, PathBuf, Option<f64>)> = conditioned(&readme)
        .into_iter()
        .filter(|(name, _, k)| {
            *k <= args.max_cond && args.only.as_ref().is_none_or(|o| o.contains(name))
        })
        .map(|(name, file, k)| (name, dir.join(file), Some(k)))
        .collect();
    if cases.is_empty() && args.poisson.is_empty() {
        bail!("no matrix of {} is under --max-cond", dir.display());
    }
    let gen_dir = target.join("family-sweep");
    std::fs::create_dir_all(&gen_dir)?;
    for &n in &args.poisson {
        let file = gen_dir.join(format!("poisson3d_{n}.mtx"));
        let mut cmd = Command::new(&krylov);
        cmd.args(["gen", "poisson3d", "--n", &n.to_string(), "-o"])
            .arg(&file)
            .stdin(Stdio::null());
        workspace::run(&mut cmd)?;
        cases.push((format!("poisson3d_{n}"), file, None));
    }

    println!(
        "{:<14} {:>9} {:>5} {:<9} {:>7} {:>7} {:>10}  verdict",
        "matrix", "kappa", "ranks", "method", "iters", "cg", "relres_true"
    );
    let mut lines = String::new();
    let mut failures = Vec::new();
    // Per method: (runs, passes, sum of iterations / cg's, runs with both counts).
    let mut tally: Vec<(String, usize, usize, f64, usize)> = args
        .methods
        .iter()
        .map(|m| (m.clone(), 0, 0, 0.0, 0))
        .collect();
    for (name, file, kappa) in &cases {
        for &ranks in &args.ranks {
            let cg = solve(&krylov, file, name, ranks, "cg", args)?;
            let cg_it = cg.converged().then(|| cg.iterations()).flatten();
            let mut runs = vec![cg];
            for m in &args.methods {
                runs.push(solve(&krylov, file, name, ranks, m, args)?);
            }
            for (i, r) in runs.iter().enumerate() {
                let v = if i == 0 {
                    match cg_it {
                        Some(_) if r.relres_true().is_some_and(|x| x <= args.tol) => {
                            "reference".to_string()
                        }
                        _ => "cg did not converge".to_string(),
                    }
                } else {
                    verdict(r, cg_it, args.tol)
                };
                let kappa_s = kappa.map_or("-".to_string(), |k| format!("{k:.2e}"));
                println!(
                    "{:<14} {:>9} {:>5} {:<9} {:>7} {:>7} {:>10}  {v}",
                    name,
                    kappa_s,
                    ranks,
                    r.method,
                    r.iterations().map_or("-".into(), |i| i.to_string()),
                    cg_it.map_or("-".into(), |i| i.to_string()),
                    r.relres_true().map_or("-".into(), |x| format!("{x:.2e}")),
                );
                std::io::stdout().flush()?;
                if r.is_failure() {
                    failures.push(format!(
                        "{name} --ranks {ranks} --method {}: {}",
                        r.method, r.message
                    ));
                }
                if i > 0 {
                    let t = &mut tally[i - 1];
                    t.1 += 1;
                    t.2 += usize::from(v == "pass");
                    if let (Some(it), Some(cg)) = (r.iterations(), cg_it) {
                        t.3 += it as f64 / cg.max(1) as f64;
                        t.4 += 1;
                    }
                }
                let row = json!({
                    "matrix": name,
                    "kappa": kappa,
                    "ranks": ranks,
                    "method": r.method,
                    "exit_code": r.exit_code,
                    "iterations": r.iterations(),
                    "cg_iterations": cg_it,
                    "relres_true": r.relres_true(),
                    "converged": r.converged(),
                    "verdict": v,
                    "report": r.report,
                });
                writeln!(lines, "{row}")?;
            }
        }
    }
    println!();
    for (m, runs, passes, ratio, counted) in &tally {
        println!(
            "{m}: {passes} of {runs} run(s) pass (relres_true <= {:e} within 1.1 x cg + 2 (+2l)); \
             mean iterations {:.3} x cg's (over the {counted} where cg converged)",
            args.tol,
            ratio / (*counted).max(1) as f64
        );
    }
    let tmp = args.out.with_extension("json.tmp");
    std::fs::write(&tmp, lines).with_context(|| format!("could not write {}", tmp.display()))?;
    std::fs::rename(&tmp, &args.out)?;
    eprintln!("family-sweep: runs written to {}", args.out.display());
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("  {f}");
        }
        bail!(
            "{} run(s) failed (bad input, panic, crash or bad output)",
            failures.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_rows_give_names_files_and_condition_numbers() {
        let readme = "| name | file | x |\n|---|---|---|\n\
            | bcsstk08 | `bcsstk08.mtx` | HB | SPD: ok; λmin ≈ 2.95e+03, κ ≈ 2.60e+07 | 3438 |\n\
            | nos7 | `nos7.mtx` | HB | SPD: ok; λmin ≈ 4.15e-03, κ ≈ 2.37e+09 | 4649 |\n\
            | other | no file | κ ≈ 1 |\n";
        let rows = conditioned(readme);
        assert_eq!(
            rows,
            vec![
                ("bcsstk08".into(), "bcsstk08.mtx".into(), 2.60e7),
                ("nos7".into(), "nos7.mtx".into(), 2.37e9),
            ]
        );
    }

    #[test]
    fn flags_have_defaults_and_are_checked() {
        let a = Args::parse(&[]).unwrap();
        assert_eq!(a.max_cond, 1e8);
        assert_eq!(a.methods, DEFAULT_METHODS.to_vec());
        assert_eq!(a.poisson, vec![16, 24, 32]);
        let none = Args::parse(&["--poisson".into(), "none".into()]).unwrap();
        assert!(none.poisson.is_empty());
        assert!(Args::parse(&["--tol".into(), "-1".into()]).is_err());
    }

    #[test]
    fn a_run_passes_only_converged_within_the_bound() {
        let run = |it: u64, conv: bool, rel: f64| Run {
            matrix: "m".into(),
            ranks: 1,
            method: "prcg".into(),
            exit_code: Some(0),
            report: Some(
                json!({"iterations": it, "converged": conv, "relres_true": rel,
                "stop_reason": if conv { "converged" } else { "max_iter" }}),
            ),
            message: String::new(),
        };
        assert_eq!(verdict(&run(112, true, 1e-9), Some(100), 1e-8), "pass");
        assert!(verdict(&run(113, true, 1e-9), Some(100), 1e-8).starts_with("miss"));
        assert!(verdict(&run(50, false, 1e-7), Some(100), 1e-8).starts_with("miss"));
        // plcg of depth l: 2l more.
        let deep = |it: u64, l: u64| Run {
            report: Some(
                json!({"iterations": it, "converged": true, "relres_true": 1e-9,
                "depth": l, "stop_reason": "converged"}),
            ),
            ..run(it, true, 1e-9)
        };
        assert_eq!(verdict(&deep(118, 3), Some(100), 1e-8), "pass");
        assert!(verdict(&deep(119, 3), Some(100), 1e-8).starts_with("miss: 119 > 1.1 x 100 + 8"));
    }
}
