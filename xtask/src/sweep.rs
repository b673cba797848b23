//! `cargo xtask sweep`: solve every matrix of a folder with the release `krylov` binary for
//! every rank count, ordering and method, print a table, and write one JSON line per run.
//!
//! It relies only on the documented command line (`../shared/CLI.md`): `krylov solve FILE
//! --ranks R --method M --json --max-iter CAP` prints one JSON object on stdout; exit code 2
//! means bad input, 1 a failed run (breakdown), 101 a panic. A run that does not converge is
//! reported, not a failure; bad input, a panic, a crash or output that breaks the JSON
//! contract make the sweep exit 1 (after all runs and the output file).

use crate::flags::{parse_list, parse_positive_list, Flags};
use crate::workspace::{self, cargo, Metadata};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(crate) const USAGE: &str = "\
usage: cargo xtask sweep [--matrices DIR | --generated] [--ranks 1,2,3,4,7] [--methods cg]
                         [--max-iter 20000] [--tol T] [--reorder none] [--out sweep.json]

Builds `krylov` in release, then runs `krylov solve FILE --ranks R --method M --json
--max-iter CAP [--reorder rcm]` for every *.mtx and *.mtx.gz in DIR (or every generated
matrix), every rank count, every ordering and every method, one at a time. Prints a table and, per matrix, the largest relative
spread (max-min)/min of iterations across rank counts and orderings; with `cg` among the
methods, the runs of Newton/Chebyshev items NAME:K:BASIS over issue 3's bound of 1.1 x CG's
iterations + K (CG-equivalent iterations, CG at the same matrix, rank count and ordering; a
run that did not converge counts as over). Rank counts and orderings both change the rounding
of a solve, so sweeping several shows how robustly a method meets the bound. Writes every run
as one JSON line to --out. Exits 1 when a run reports bad input (exit 2), panics (101) or
crashes; non-convergence and runs over the bound are only reported.

  --matrices DIR  matrix folder (default: ../shared/matrices next to the workspace root)
  --generated     instead, issue 3's generated Poisson set, made by `krylov gen` into
                  target/sweep-generated: 2-D n = 32, 64, 100, 128; 3-D and heterogeneous
                  3-D n = 8, 12, 16, 20, 24, 32 (use with --tol 1e-12)
  --ranks LIST    rank counts (default 1,2,3,4,7)
  --methods LIST  items NAME[:K][:BASIS], e.g. cg,cbcgr:8:chebyshev (default cg)
  --max-iter N    iteration cap handed to krylov (default 20000)
  --tol T         relative tolerance handed to krylov (default: krylov's, 1e-8)
  --reorder LIST  orderings, each none or rcm (default none)
  --out FILE      JSON lines output (default sweep.json), written to a temporary file first";

/// Flags of `cargo xtask sweep`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    matrices: Option<PathBuf>,
    /// Sweep the generated Poisson set ([`generated_cases`]) instead of a folder.
    generated: bool,
    ranks: Vec<usize>,
    methods: Vec<String>,
    max_iter: u64,
    tol: Option<f64>,
    reorders: Vec<String>,
    out: PathBuf,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let matrices = flags.value("--matrices")?.map(PathBuf::from);
        let generated = flags.switch("--generated");
        if generated && matrices.is_some() {
            bail!("--matrices and --generated exclude each other");
        }
        let ranks = match flags.value("--ranks")? {
            Some(list) => parse_positive_list("--ranks", &list)?,
            None => vec![1, 2, 3, 4, 7],
        };
        let methods = match flags.value("--methods")? {
            Some(list) => parse_list::<String>("--methods", &list)?,
            None => vec!["cg".to_string()],
        };
        let max_iter = match flags.value("--max-iter")? {
            Some(n) => {
                let n: u64 = n
                    .parse()
                    .with_context(|| format!("--max-iter: not a count: `{n}`"))?;
                if n == 0 {
                    bail!("--max-iter must be at least 1");
                }
                n
            }
            None => 20_000,
        };
        let tol = match flags.value("--tol")? {
            Some(t) => {
                let t: f64 = t
                    .parse()
                    .with_context(|| format!("--tol: not a number: `{t}`"))?;
                if !(t.is_finite() && t > 0.0) {
                    bail!("--tol must be a positive number");
                }
                Some(t)
            }
            None => None,
        };
        let reorders = match flags.value("--reorder")? {
            Some(list) => parse_list::<String>("--reorder", &list)?,
            None => vec!["none".to_string()],
        };
        if let Some(bad) = reorders
            .iter()
            .find(|r| !matches!(r.as_str(), "none" | "rcm"))
        {
            bail!("--reorder: `{bad}` is not an ordering (none, rcm)");
        }
        let out = flags
            .value("--out")?
            .map_or_else(|| PathBuf::from("sweep.json"), PathBuf::from);
        flags.finish()?;
        Ok(Args {
            matrices,
            generated,
            ranks,
            methods,
            max_iter,
            tol,
            reorders,
            out,
        })
    }
}

pub(crate) fn run(args: &Args) -> Result<()> {
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let target = Metadata::load()?.target_directory;
    let krylov = target.join("release").join("krylov");
    if !krylov.is_file() {
        bail!(
            "{} is missing after the build: does castack-cli define the `krylov` binary?",
            krylov.display()
        );
    }
    let dir = match &args.matrices {
        Some(dir) => dir.clone(),
        None if args.generated => {
            let dir = target.join("sweep-generated");
            generate(&krylov, &dir)?;
            dir
        }
        None => default_matrix_dir(&workspace::root()),
    };
    let files = find_matrices(&dir)?;

    println!("{}", table_header());
    let mut rows = Vec::new();
    for file in &files {
        for &ranks in &args.ranks {
            for reorder in &args.reorders {
                for method in &args.methods {
                    let row = solve(&krylov, file, (ranks, reorder), method, args)?;
                    println!("{}", table_row(&row));
                    std::io::stdout().flush()?;
                    rows.push(row);
                }
            }
        }
    }

    println!();
    println!("{}", summary(&rows));
    write_json_lines(&args.out, &rows)?;
    eprintln!(
        "sweep: {} run(s) written to {}",
        rows.len(),
        args.out.display()
    );

    let bad: Vec<&Row> = rows.iter().filter(|r| r.status.is_failure()).collect();
    if !bad.is_empty() {
        for r in &bad {
            eprintln!(
                "  {} --ranks {}{} --method {}: {} {}",
                r.matrix,
                r.ranks,
                r.reorder_flag(),
                r.method,
                r.status.name(),
                r.message
            );
        }
        bail!(
            "{} of {} run(s) failed (bad input, panic, crash or bad output)",
            bad.len(),
            rows.len()
        );
    }
    Ok(())
}

/// Issue 3's generated Poisson set: `(file stem, krylov gen arguments)`. 2-D n = 32, 64,
/// 100, 128; 3-D and heterogeneous 3-D (contrast 1000, seed 1: `krylov gen`'s defaults)
/// n = 8, 12, 16, 20, 24, 32.
fn generated_cases() -> Vec<(String, Vec<String>)> {
    let case = |stem: String, args: &[&str]| (stem, args.iter().map(|a| a.to_string()).collect());
    let mut cases = Vec::new();
    for n in ["32", "64", "100", "128"] {
        cases.push(case(format!("p2d_{n}"), &["poisson2d", "--n", n]));
    }
    for n in ["8", "12", "16", "20", "24", "32"] {
        cases.push(case(format!("p3d_{n}"), &["poisson3d", "--n", n]));
        cases.push(case(
            format!("h3d_{n}"),
            &["poisson3d", "--n", n, "--heterogeneous"],
        ));
    }
    cases
}

/// Make the generated set in `dir` (emptied first, so no stale file joins the sweep) with
/// `krylov gen ARGS -o dir/STEM.mtx`.
fn generate(krylov: &Path, dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("could not empty {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    for (stem, gen_args) in generated_cases() {
        let mut cmd = Command::new(krylov);
        cmd.arg("gen")
            .args(&gen_args)
            .arg("-o")
            .arg(dir.join(format!("{stem}.mtx")))
            .stdin(Stdio::null());
        workspace::run(&mut cmd)?;
    }
    Ok(())
}

/// `<parent of the workspace root>/shared/matrices`.
fn default_matrix_dir(root: &Path) -> PathBuf {
    root.parent()
        .unwrap_or(root)
        .join("shared")
        .join("matrices")
}

/// The `*.mtx` and `*.mtx.gz` files of `dir`, sorted by name.
fn find_matrices(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("matrix folder {} cannot be read", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if path.is_file() && name.is_some_and(|n| n.ends_with(".mtx") || n.ends_with(".mtx.gz")) {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("no *.mtx or *.mtx.gz files in {}", dir.display());
    }
    Ok(files)
}

/// The matrix name: the file name without `.mtx` or `.mtx.gz`.
fn matrix_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_suffix(".mtx.gz")
        .or_else(|| name.strip_suffix(".mtx"))
        .unwrap_or(&name)
        .to_string()
}

/// How one `krylov solve` ended.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Status {
    /// Exit 0 with a report (converged or not: see `Row::converged`).
    Ok,
    /// Exit 1: the run failed (breakdown); reported, not a sweep failure.
    Failed,
    /// Exit 2: krylov rejected the input.
    BadInput,
    /// Exit 101: a Rust panic.
    Panic,
    /// Killed by a signal or an exit code the contract does not define.
    Crash,
    /// Exit 0 but stdout is not the one JSON object the contract promises.
    BadOutput,
}

impl Status {
    fn from_exit(code: Option<i32>) -> Status {
        match code {
            Some(0) => Status::Ok,
            Some(1) => Status::Failed,
            Some(2) => Status::BadInput,
            Some(101) => Status::Panic,
            _ => Status::Crash,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::BadInput => "bad_input",
            Status::Panic => "panic",
            Status::Crash => "crash",
            Status::BadOutput => "bad_output",
        }
    }

    fn is_failure(self) -> bool {
        !matches!(self, Status::Ok | Status::Failed)
    }
}

/// One run of the sweep; report fields are `None` where the report lacks them (or is null).
#[derive(Debug, PartialEq)]
struct Row {
    matrix: String,
    file: String,
    ranks: usize,
    /// `none` or `rcm`.
    reorder: String,
    method: String,
    status: Status,
    exit_code: Option<i32>,
    /// The last line krylov wrote on stderr, or why its stdout was rejected.
    message: String,
    n: Option<u64>,
    converged: Option<bool>,
    iterations: Option<u64>,
    equivalent_iterations: Option<u64>,
    relres_true: Option<f64>,
    error_vs_ones: Option<f64>,
    reductions: Option<u64>,
    halo_exchanges: Option<u64>,
    time_s: Option<f64>,
}

impl Row {
    /// Builds the row of one run from its exit code, stdout and stderr.
    fn from_run(
        file: &Path,
        (ranks, reorder): (usize, &str),
        method: &str,
        exit_code: Option<i32>,
        stdout: &str,
        stderr: &str,
    ) -> Row {
        let mut row = Row {
            matrix: matrix_name(file),
            file: file.display().to_string(),
            ranks,
            reorder: reorder.to_string(),
            method: method.to_string(),
            status: Status::from_exit(exit_code),
            exit_code,
            message: stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string(),
            n: None,
            converged: None,
            iterations: None,
            equivalent_iterations: None,
            relres_true: None,
            error_vs_ones: None,
            reductions: None,
            halo_exchanges: None,
            time_s: None,
        };
        match parse_report(stdout) {
            Ok(report) => row.fill(&report),
            // A failed run may print no report; a successful one must.
            Err(err) if row.status == Status::Ok => {
                row.status = Status::BadOutput;
                row.message = format!("{err:#}");
            }
            Err(_) => {}
        }
        row
    }

    fn fill(&mut self, r: &Value) {
        self.n = r["n"].as_u64();
        self.converged = r["converged"].as_bool();
        self.iterations = r["iterations"].as_u64();
        self.equivalent_iterations = r["equivalent_iterations"].as_u64();
        self.relres_true = r["relres_true"].as_f64();
        self.error_vs_ones = r["error_vs_ones"].as_f64();
        self.reductions = r["reductions"].as_u64();
        self.halo_exchanges = r["halo_exchanges"].as_u64();
        self.time_s = r["time_s"].as_f64();
        if self.status == Status::Ok && (self.converged.is_none() || self.iterations.is_none()) {
            self.status = Status::BadOutput;
            self.message = "report lacks `converged` or `iterations`".to_string();
        }
    }

    /// ` --reorder rcm` where the run used an ordering, else nothing (for messages).
    fn reorder_flag(&self) -> String {
        if self.reorder == "none" {
            String::new()
        } else {
            format!(" --reorder {}", self.reorder)
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "matrix": self.matrix,
            "file": self.file,
            "ranks": self.ranks,
            "reorder": self.reorder,
            "method": self.method,
            "status": self.status.name(),
            "exit_code": self.exit_code,
            "message": if self.message.is_empty() { Value::Null } else { json!(self.message) },
            "n": self.n,
            "converged": self.converged,
            "iterations": self.iterations,
            "equivalent_iterations": self.equivalent_iterations,
            "relres_true": self.relres_true,
            "error_vs_ones": self.error_vs_ones,
            "reductions": self.reductions,
            "halo_exchanges": self.halo_exchanges,
            "time_s": self.time_s,
        })
    }
}

/// The one JSON object `krylov solve --json` prints on stdout (and nothing else).
fn parse_report(stdout: &str) -> Result<Value> {
    let v: Value =
        serde_json::from_str(stdout.trim()).context("stdout is not exactly one JSON object")?;
    if !v.is_object() {
        bail!("stdout is JSON but not an object");
    }
    Ok(v)
}

fn solve(
    krylov: &Path,
    file: &Path,
    (ranks, reorder): (usize, &str),
    method: &str,
    args: &Args,
) -> Result<Row> {
    let mut cmd = Command::new(krylov);
    cmd.arg("solve")
        .arg(file)
        .args(["--ranks", &ranks.to_string()])
        .args(item_flags(method))
        .arg("--json")
        .args(["--max-iter", &args.max_iter.to_string()])
        .stdin(Stdio::null());
    if let Some(tol) = args.tol {
        cmd.args(["--tol", &format!("{tol:e}")]);
    }
    if reorder != "none" {
        cmd.args(["--reorder", reorder]);
    }
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{}`", workspace::describe(&cmd)))?;
    Ok(Row::from_run(
        file,
        (ranks, reorder),
        method,
        out.status.code(),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    ))
}

/// Flags for one `--methods` item `NAME[:K][:BASIS]`: `--method NAME [--k K] [--basis B]`.
fn item_flags(item: &str) -> Vec<String> {
    let mut parts = item.split(':');
    let mut flags = vec![
        "--method".to_string(),
        parts.next().unwrap_or_default().to_string(),
    ];
    for part in parts {
        let flag = if part.parse::<usize>().is_ok() {
            "--k"
        } else {
            "--basis"
        };
        flags.push(flag.to_string());
        flags.push(part.to_string());
    }
    flags
}

/// (max - min) / min of the iteration counts; `None` for no counts, infinite when the
/// minimum is 0 and the maximum is not.
fn spread(iterations: &[u64]) -> Option<f64> {
    let min = *iterations.iter().min()?;
    let max = *iterations.iter().max()?;
    if max == min {
        Some(0.0)
    } else if min == 0 {
        Some(f64::INFINITY)
    } else {
        Some((max - min) as f64 / min as f64)
    }
}

/// Per matrix: the largest spread over methods of the iterations across rank counts (and
/// orderings), with the method it came from. Runs without an iteration count are left out.
fn spreads(rows: &[Row]) -> BTreeMap<String, Option<(f64, String)>> {
    let mut by_method: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
    let mut out: BTreeMap<String, Option<(f64, String)>> = BTreeMap::new();
    for r in rows {
        out.entry(r.matrix.clone()).or_insert(None);
        if let Some(it) = r.iterations {
            by_method
                .entry((&r.matrix, &r.method))
                .or_default()
                .push(it);
        }
    }
    for ((matrix, method), its) in by_method {
        let Some(s) = spread(&its) else { continue };
        let best = out.entry(matrix.to_string()).or_insert(None);
        if best.as_ref().is_none_or(|(b, _)| s > *b) {
            *best = Some((s, method.to_string()));
        }
    }
    out
}

fn table_header() -> String {
    format!(
        "{:<16} {:>8} {:>5} {:<5} {:<8} {:>9} {:>10} {:>11}  {}",
        "matrix",
        "n",
        "ranks",
        "order",
        "method",
        "converged",
        "iterations",
        "relres_true",
        "status"
    )
}

fn table_row(r: &Row) -> String {
    let dash = || "-".to_string();
    let mut status = r.status.name().to_string();
    if r.status != Status::Ok && !r.message.is_empty() {
        let _ = write!(status, ": {}", r.message);
    }
    format!(
        "{:<16} {:>8} {:>5} {:<5} {:<8} {:>9} {:>10} {:>11}  {}",
        r.matrix,
        r.n.map_or_else(dash, |n| n.to_string()),
        r.ranks,
        r.reorder,
        r.method,
        r.converged
            .map_or_else(dash, |c| if c { "yes" } else { "NO" }.to_string()),
        r.iterations.map_or_else(dash, |i| i.to_string()),
        r.relres_true.map_or_else(dash, |x| format!("{x:.3e}")),
        status
    )
}

fn summary(rows: &[Row]) -> String {
    let mut text = format!(
        "{:<16} {:>12}  {}\n",
        "matrix",
        "max spread",
        "(method; (max-min)/min of iterations across rank counts and orderings)"
    );
    for (matrix, s) in spreads(rows) {
        let (value, method) = match s {
            Some((v, m)) => (format!("{:.1}%", 100.0 * v), m),
            None => ("-".to_string(), "no iteration counts".to_string()),
        };
        let _ = writeln!(text, "{matrix:<16} {value:>12}  {method}");
    }
    if let Some((checked, over)) = bound_misses(rows) {
        let _ = writeln!(
            text,
            "CG bound (1.1 x CG + K, Newton/Chebyshev items): {} of {checked} run(s) over",
            over.len()
        );
        for m in &over {
            let _ = writeln!(text, "  {m}");
        }
    }
    let not_converged = rows.iter().filter(|r| r.converged == Some(false)).count();
    let failed = rows.iter().filter(|r| r.status != Status::Ok).count();
    let _ = write!(
        text,
        "{} run(s): {} not converged, {} failed or rejected",
        rows.len(),
        not_converged,
        failed
    );
    text
}

/// The block size `K` of a Newton or Chebyshev item `NAME:K:BASIS` (the items issue 3's
/// bound applies to).
fn bounded_k(item: &str) -> Option<u64> {
    let parts: Vec<&str> = item.split(':').collect();
    match parts[..] {
        [_, k, "newton" | "chebyshev"] | [_, "newton" | "chebyshev", k] => k.parse().ok(),
        _ => None,
    }
}

/// With `cg` runs in `rows`: how many Newton/Chebyshev runs were checked against 1.1 x CG's
/// iterations + K (CG at the same matrix, rank count and ordering), and a line for each one
/// over it or not converged. `None` without `cg` runs.
fn bound_misses(rows: &[Row]) -> Option<(usize, Vec<String>)> {
    let key = |r: &Row| (r.matrix.clone(), r.ranks, r.reorder.clone());
    let cg: BTreeMap<(String, usize, String), u64> = rows
        .iter()
        .filter(|r| r.method == "cg" && r.converged == Some(true))
        .filter_map(|r| Some((key(r), r.equivalent_iterations?)))
        .collect();
    if cg.is_empty() {
        return None;
    }
    let (mut checked, mut over) = (0, Vec::new());
    for r in rows {
        let (Some(k), Some(&c)) = (bounded_k(&r.method), cg.get(&key(r))) else {
            continue;
        };
        checked += 1;
        let bound = 1.1 * c as f64 + k as f64;
        match (r.converged, r.equivalent_iterations) {
            (Some(true), Some(eq)) if eq as f64 <= bound => {}
            (Some(true), Some(eq)) => over.push(format!(
                "{} --ranks {}{} {}: {eq} CG-equivalent iterations, bound {bound:.1} (CG {c})",
                r.matrix,
                r.ranks,
                r.reorder_flag(),
                r.method
            )),
            _ => over.push(format!(
                "{} --ranks {}{} {}: not converged ({})",
                r.matrix,
                r.ranks,
                r.reorder_flag(),
                r.method,
                r.status.name()
            )),
        }
    }
    Some((checked, over))
}

/// Writes one JSON object per row, to a temporary file renamed over `out` at the end.
fn write_json_lines(out: &Path, rows: &[Row]) -> Result<()> {
    let mut text = String::new();
    for r in rows {
        text.push_str(&r.to_json().to_string());
        text.push('\n');
    }
    let name = out
        .file_name()
        .with_context(|| format!("--out {} is not a file name", out.display()))?;
    let tmp = out.with_file_name(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, out)
    };
    write()
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("cannot write {}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn scratch_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-sweep-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const REPORT: &str = r#"{"schema_version":1,"method":"cg","n":1138,"nnz":4054,
        "converged":true,"iterations":1200,"equivalent_iterations":1200,"reductions":2401,
        "halo_exchanges":1201,"relres_true":3.2e-9,"error_vs_ones":1.5e-6,"time_s":0.25}"#;

    #[test]
    fn items_become_solve_flags() {
        assert_eq!(item_flags("cg"), ["--method", "cg"]);
        assert_eq!(
            item_flags("cbcgr:8:newton"),
            ["--method", "cbcgr", "--k", "8", "--basis", "newton"]
        );
    }

    fn row(matrix: &str, method: &str, ranks: usize, iterations: Option<u64>) -> Row {
        let mut r = Row::from_run(
            Path::new(&format!("/m/{matrix}.mtx")),
            (ranks, "none"),
            method,
            Some(0),
            REPORT,
            "",
        );
        r.iterations = iterations;
        r
    }

    #[test]
    fn parses_flags_with_defaults() {
        let a = Args::parse(&[]).unwrap();
        assert_eq!(a.matrices, None);
        assert!(!a.generated);
        assert!(Args::parse(&strings(&["--generated"])).unwrap().generated);
        assert_eq!(a.ranks, [1, 2, 3, 4, 7]);
        assert_eq!(a.methods, ["cg"]);
        assert_eq!(a.max_iter, 20_000);
        assert_eq!(a.tol, None);
        assert_eq!(a.reorders, ["none"]);
        assert_eq!(a.out, PathBuf::from("sweep.json"));

        let a = Args::parse(&strings(&[
            "--matrices",
            "/m",
            "--ranks",
            "2,8",
            "--methods=cg,cacg",
            "--max-iter",
            "50",
            "--tol",
            "1e-12",
            "--reorder",
            "none,rcm",
            "--out",
            "x.json",
        ]))
        .unwrap();
        assert_eq!(a.tol, Some(1e-12));
        assert_eq!(a.reorders, ["none", "rcm"]);
        assert_eq!(a.matrices, Some(PathBuf::from("/m")));
        assert_eq!(a.ranks, [2, 8]);
        assert_eq!(a.methods, ["cg", "cacg"]);
        assert_eq!(a.max_iter, 50);
        assert_eq!(a.out, PathBuf::from("x.json"));

        for bad in [
            &["--ranks", "0"][..],
            &["--ranks", "1,,2"],
            &["--methods", ""],
            &["--max-iter", "0"],
            &["--max-iter", "many"],
            &["--tol", "0"],
            &["--tol", "-1e-8"],
            &["--tol", "tiny"],
            &["--reorder", "amd"],
            &["--reorder", ""],
            &["--matrix", "/m"],
            &["--out"],
            &["--generated", "--matrices", "/m"],
            &["--generated=yes"],
        ] {
            assert!(Args::parse(&strings(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn runs_over_the_cg_bound_are_listed() {
        let mut rows = vec![
            row("a", "cg", 1, Some(100)),
            row("a", "cbcg:4:chebyshev", 1, Some(28)),
            row("a", "cbcg:8:newton", 1, Some(15)),
            row("a", "cbcg:4:monomial", 1, Some(99)),
            row("b", "cbcgr:4:newton", 1, Some(10)),
        ];
        // CG-equivalent iterations: 1.1 * 100 + 4 = 114 is the bound at k = 4.
        rows[0].equivalent_iterations = Some(100);
        rows[1].equivalent_iterations = Some(114);
        rows[2].equivalent_iterations = Some(120);
        rows[3].equivalent_iterations = Some(400);
        rows[4].equivalent_iterations = Some(40);
        let (checked, over) = bound_misses(&rows).unwrap();
        // Monomial is not bounded; matrix b has no CG run.
        assert_eq!(checked, 2);
        assert_eq!(over.len(), 1, "{over:?}");
        assert!(over[0].contains("cbcg:8:newton") && over[0].contains("bound 118.0"));
        rows[1].converged = Some(false);
        assert_eq!(bound_misses(&rows).unwrap().1.len(), 2);
        assert_eq!(bound_misses(&rows[1..]), None);
        // CG at the same ordering: an rcm run is checked against the rcm CG run only.
        let mut rcm = vec![
            row("a", "cg", 1, Some(50)),
            row("a", "cbcg:4:chebyshev", 1, Some(20)),
        ];
        for r in &mut rcm {
            r.reorder = "rcm".into();
        }
        rcm[0].equivalent_iterations = Some(50);
        rcm[1].equivalent_iterations = Some(80);
        rows[1].converged = Some(true);
        rows.extend(rcm);
        let (checked, over) = bound_misses(&rows).unwrap();
        assert_eq!(checked, 3);
        assert_eq!(over.len(), 2, "{over:?}");
        assert!(over[1].contains("a --ranks 1 --reorder rcm cbcg:4:chebyshev: 80"));
        assert!(over[1].contains("bound 59.0 (CG 50)"));
        assert_eq!(bounded_k("cbcgr:12:chebyshev"), Some(12));
        assert_eq!(bounded_k("cacg:newton:8"), Some(8));
        assert_eq!(bounded_k("cacg:8"), None);
    }

    #[test]
    fn default_dir_is_next_to_the_workspace() {
        assert_eq!(
            default_matrix_dir(Path::new("/work/main")),
            PathBuf::from("/work/shared/matrices")
        );
    }

    #[test]
    fn finds_mtx_and_gz_sorted() {
        let dir = scratch_dir("find");
        for f in ["b.mtx", "a.mtx.gz", "README.md", "c.mtx.bak"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let names: Vec<_> = find_matrices(&dir)
            .unwrap()
            .iter()
            .map(|p| matrix_name(p))
            .collect();
        assert_eq!(names, ["a", "b"]);
        std::fs::remove_file(dir.join("a.mtx.gz")).unwrap();
        std::fs::remove_file(dir.join("b.mtx")).unwrap();
        assert!(find_matrices(&dir).is_err());
        assert!(find_matrices(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rows_from_runs() {
        let r = Row::from_run(
            Path::new("/m/bcsstk13.mtx.gz"),
            (4, "rcm"),
            "cg",
            Some(0),
            REPORT,
            "",
        );
        assert_eq!(r.matrix, "bcsstk13");
        assert_eq!(r.status, Status::Ok);
        assert_eq!(r.n, Some(1138));
        assert_eq!(r.converged, Some(true));
        assert_eq!(r.iterations, Some(1200));
        assert_eq!(r.reductions, Some(2401));
        assert_eq!(r.relres_true, Some(3.2e-9));
        let j = r.to_json();
        assert_eq!(j["status"], "ok");
        assert_eq!(j["ranks"], 4);
        assert_eq!(j["reorder"], "rcm");
        assert_eq!(j["message"], Value::Null);

        // error_vs_ones null (not unit_solution): allowed.
        let report = REPORT.replace("1.5e-6", "null");
        let r = Row::from_run(Path::new("a.mtx"), (1, "none"), "cg", Some(0), &report, "");
        assert_eq!((r.status, r.error_vs_ones), (Status::Ok, None));

        // Not converged: still ok.
        let report = REPORT.replace("\"converged\":true", "\"converged\":false");
        let r = Row::from_run(Path::new("a.mtx"), (1, "none"), "cg", Some(0), &report, "");
        assert_eq!((r.status, r.converged), (Status::Ok, Some(false)));
        assert!(!r.status.is_failure());

        // Exit 0 with extra text on stdout breaks the contract.
        let r = Row::from_run(
            Path::new("a.mtx"),
            (1, "none"),
            "cg",
            Some(0),
            &format!("hello\n{REPORT}"),
            "",
        );
        assert_eq!(r.status, Status::BadOutput);
        assert!(r.status.is_failure());
        let r = Row::from_run(Path::new("a.mtx"), (1, "none"), "cg", Some(0), "[1]", "");
        assert_eq!(r.status, Status::BadOutput);
        let r = Row::from_run(
            Path::new("a.mtx"),
            (1, "none"),
            "cg",
            Some(0),
            r#"{"n":3}"#,
            "",
        );
        assert_eq!(r.status, Status::BadOutput);

        // Breakdown: reported, not a failure; last stderr line kept.
        let r = Row::from_run(
            Path::new("a.mtx"),
            (1, "none"),
            "cg",
            Some(1),
            "",
            "warn\nerror: breakdown at iteration 7\n\n",
        );
        assert_eq!(r.status, Status::Failed);
        assert_eq!(r.message, "error: breakdown at iteration 7");
        assert!(!r.status.is_failure());

        for (code, status) in [
            (Some(2), Status::BadInput),
            (Some(101), Status::Panic),
            (None, Status::Crash),
            (Some(134), Status::Crash),
        ] {
            let r = Row::from_run(Path::new("a.mtx"), (1, "none"), "cg", code, "", "boom");
            assert_eq!(r.status, status);
            assert!(r.status.is_failure());
            assert_eq!(r.to_json()["n"], Value::Null);
        }
    }

    #[test]
    fn solve_runs_the_documented_command_line() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch_dir("solve");
        let fake = dir.join("krylov");
        let script = format!(
            "#!/bin/sh\necho \"$@\" >&2\n[ \"$4\" = 3 ] || exit 2\ncat <<'EOF'\n{REPORT}\nEOF\n"
        );
        std::fs::write(&fake, script).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();

        // Another test thread forking while the script was open for writing can make the
        // first exec fail with "text file busy"; retry briefly.
        let mut args = Args::parse(&strings(&["--max-iter", "9"])).unwrap();
        let run = |ranks, args: &Args| {
            for _ in 0..20 {
                if let Ok(r) = solve(&fake, Path::new("/m/a.mtx"), (ranks, "none"), "cg", args) {
                    return r;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            panic!("fake krylov could not be started");
        };
        let r = run(3, &args);
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.iterations, Some(1200));
        assert_eq!(
            r.message,
            "solve /m/a.mtx --ranks 3 --method cg --json --max-iter 9"
        );
        args.tol = Some(1e-12);
        let r = run(3, &args);
        assert_eq!(
            r.message,
            "solve /m/a.mtx --ranks 3 --method cg --json --max-iter 9 --tol 1e-12"
        );
        let r = solve(&fake, Path::new("/m/a.mtx"), (3, "rcm"), "cg", &args).unwrap();
        assert_eq!(
            r.message,
            "solve /m/a.mtx --ranks 3 --method cg --json --max-iter 9 --tol 1e-12 --reorder rcm"
        );

        let r = run(2, &args);
        assert_eq!(r.status, Status::BadInput);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_generated_set_is_issue_3s_poisson() {
        let cases = generated_cases();
        assert_eq!(cases.len(), 16);
        let stems: std::collections::BTreeSet<&str> =
            cases.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(stems.len(), 16, "stems repeat");
        let p2d: Vec<&str> = cases
            .iter()
            .filter(|(_, a)| a[0] == "poisson2d")
            .map(|(_, a)| a[2].as_str())
            .collect();
        assert_eq!(p2d, ["32", "64", "100", "128"]);
        let hetero = cases
            .iter()
            .filter(|(s, a)| s.starts_with("h3d_") && a.contains(&"--heterogeneous".to_string()))
            .count();
        assert_eq!(hetero, 6);
    }

    #[test]
    fn generate_empties_the_folder_and_runs_krylov_gen() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch_dir("generate");
        let fake = dir.join("krylov");
        // Writes its arguments into the file after -o (the last argument).
        let script = "#!/bin/sh\n[ \"$1\" = gen ] || exit 2\nfor a; do last=$a; done\necho \"$@\" > \"$last\"\n";
        std::fs::write(&fake, script).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = dir.join("set");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("stale.mtx"), "old").unwrap();
        // As in solve_runs_the_documented_command_line: retry a "text file busy" start.
        let mut made = false;
        for _ in 0..20 {
            if generate(&fake, &out).is_ok() {
                made = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(made, "fake krylov could not be started");
        let files = find_matrices(&out).unwrap();
        assert_eq!(files.len(), 16);
        assert!(!out.join("stale.mtx").exists());
        let h = std::fs::read_to_string(out.join("h3d_12.mtx")).unwrap();
        assert!(
            h.starts_with("gen poisson3d --n 12 --heterogeneous -o "),
            "{h}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn spread_of_iterations() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[7]), Some(0.0));
        assert_eq!(spread(&[100, 110, 105]), Some(0.1));
        assert_eq!(spread(&[0, 0]), Some(0.0));
        assert_eq!(spread(&[0, 3]), Some(f64::INFINITY));
    }

    #[test]
    fn spreads_per_matrix_take_the_worst_method() {
        let rows = vec![
            row("a", "cg", 1, Some(100)),
            row("a", "cg", 4, Some(120)),
            row("a", "cacg", 1, Some(100)),
            row("a", "cacg", 4, Some(150)),
            row("b", "cg", 1, Some(10)),
            row("b", "cg", 2, None),
            row("c", "cg", 1, None),
        ];
        let s = spreads(&rows);
        assert_eq!(s["a"], Some((0.5, "cacg".to_string())));
        assert_eq!(s["b"], Some((0.0, "cg".to_string())));
        assert_eq!(s["c"], None);
        let text = summary(&rows);
        assert!(text.contains("50.0%"), "{text}");
        assert!(text.contains("no iteration counts"), "{text}");
        assert!(
            table_row(&rows[0]).contains(" 100 "),
            "{}",
            table_row(&rows[0])
        );
        assert!(table_row(&rows[5]).contains(" - "));
    }

    #[test]
    fn writes_json_lines_atomically() {
        let dir = scratch_dir("out");
        let out = dir.join("sweep.json");
        std::fs::write(&out, "old").unwrap();
        let rows = vec![row("a", "cg", 1, Some(5)), row("b", "cg", 2, Some(6))];
        write_json_lines(&out, &rows).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["matrix"], "b");
        assert_eq!(lines[1]["iterations"], 6);
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "temporary file left behind");
        assert!(write_json_lines(&dir.join("no/such/dir/x.json"), &rows).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
