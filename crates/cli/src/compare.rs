//! `krylov compare`: one solve per method item on the same problem, a table (or JSON rows)
//! of iterations, communication and time per CG-equivalent iteration, and an optional SVG
//! plot of the residual histories. Every item is solved and printed; one that broke down
//! (or did not converge with `--strict`) is marked, and `compare` then exits 1 with one
//! line naming them. Labels name what was solved: `cg`, `cacg(k=4,chebyshev)`.

use std::path::Path;
use std::process::ExitCode;

use castack_krylov::{SolveReport, StopReason};

use crate::args::{CompareArgs, X0};
use crate::exit::{bad, CliError};
use crate::output::out;
use crate::plot;
use crate::settings::{read_config, resolve};
use crate::solve::{checked_config, load, solve_problem};

/// One solved item: its label, report and how it ended.
struct Row {
    label: String,
    report: SolveReport,
    status: Status,
    /// The solution's first non-finite entry ([`crate::solve::first_non_finite`]).
    overflow: Option<(usize, f64)>,
    /// Whether the solve started from a given x0.
    x0_given: bool,
}

/// How an item's solve ended, as the table's `status` column shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Converged (or a zero right-hand side).
    Converged,
    /// Out of iterations, without `--strict`.
    NotConverged,
    /// Out of iterations with `--strict`: a failed run.
    Failed,
    /// The method broke down: a failed run.
    Breakdown,
}

impl Status {
    fn of(r: &SolveReport, strict: bool) -> Self {
        match (r.converged, r.stop_reason) {
            (true, _) => Status::Converged,
            (false, StopReason::Breakdown) => Status::Breakdown,
            (false, _) if strict => Status::Failed,
            (false, _) => Status::NotConverged,
        }
    }

    /// The table's word for it.
    fn word(self) -> &'static str {
        match self {
            Status::Converged => "yes",
            Status::NotConverged => "NO",
            Status::Failed => "FAILED",
            Status::Breakdown => "breakdown",
        }
    }

    /// Whether the row makes `compare` exit 1.
    fn failed(self) -> bool {
        matches!(self, Status::Failed | Status::Breakdown)
    }
}

/// A row's label from what was solved: the method, and for the s-step methods its k,
/// basis and matrix powers kernel (`cacg(k=4,chebyshev)`, `cbcgr(k=8,newton,mpk)`), for
/// plcg its depth (`plcg(l=2)`).
fn label(r: &SolveReport) -> String {
    match (r.k, &r.basis, r.depth) {
        (Some(k), Some(basis), _) => {
            let mpk = if r.mpk { ",mpk" } else { "" };
            format!("{}(k={k},{basis}{mpk})", r.method)
        }
        (_, _, Some(l)) => format!("{}(l={l})", r.method),
        _ => r.method.clone(),
    }
}

/// Run `krylov compare`: every item is solved, every row printed (a failed one marked),
/// then exit 1 with one line naming the failed items, if any.
pub(crate) fn run(args: Box<CompareArgs>) -> Result<ExitCode, CliError> {
    let args = *args;
    if let Some(m) = args.settings.method {
        return Err(bad(format!(
            "compare takes its methods from --methods NAME[:K][:BASIS][:mpk],... (plcg: NAME[:L], its depth; e.g. --methods {m}); --method is for `krylov solve`"
        )));
    }
    let file = match &args.config {
        Some(p) => read_config(p)?,
        None => Default::default(),
    };
    // An output that cannot be written is refused before anything is solved.
    if let Some(path) = &args.plot {
        crate::output::target(path)?;
    }
    // `--mpk` (or the file's) applies to every s-step item, as `--k` and `--basis` do.
    let mpk = args.settings.mpk.or(file.mpk) == Some(true);
    // Every item's settings, checked before the first solve (bad input is exit 2 with
    // nothing solved).
    let mut items = Vec::with_capacity(args.methods.len());
    for item in &args.methods {
        let mut flags = args.settings.clone();
        flags.method = Some(item.method);
        flags.k = item.k.or(flags.k);
        flags.depth = item.depth.or(flags.depth);
        flags.basis = item.basis.or(flags.basis);
        flags.mpk = Some(item.mpk || (mpk && item.method.is_s_step()));
        if args.plot.is_some() {
            flags.history = Some(true);
        }
        let s = resolve(flags, file.clone(), args.config.as_deref())
            .map_err(|e| e.context(format!("--methods item '{}'", item.label)))?;
        items.push(s);
    }
    // The items share every setting that loads the problem (clap requires one item).
    let problem = load(&args.matrix, &items[0])?;
    for (item, s) in args.methods.iter().zip(&items) {
        checked_config(&problem.name, (problem.a.rows(), problem.a.nnz()), s)
            .map_err(|e| e.context(format!("--methods item '{}'", item.label)))?;
    }
    let mut rows = Vec::with_capacity(items.len());
    for s in &items {
        let (x, report) = solve_problem(&problem, s)?;
        rows.push(Row {
            label: label(&report),
            status: Status::of(&report, s.strict),
            report,
            overflow: crate::solve::first_non_finite(&x),
            x0_given: s.x0 != X0::Zero,
        });
    }
    if args.json {
        for row in &rows {
            out!("{}", json_row(row).map_err(CliError::failed)?);
        }
    } else {
        print_table(&problem.name, &rows);
    }
    if let Some(path) = &args.plot {
        plot(path, &problem.name, &rows)?;
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.status.failed())
        .map(failure)
        .collect();
    if failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    Err(CliError::failed(anyhow::anyhow!(
        "{}: {} of {} methods failed: {}",
        problem.name,
        failed.len(),
        rows.len(),
        failed.join("; ")
    )))
}

/// What went wrong with a failed row, for the error line.
fn failure(row: &Row) -> String {
    let r = &row.report;
    match r.breakdown_error() {
        Some(e) => {
            let remedy = match crate::solve::out_of_range(r, row.x0_given, row.overflow) {
                Some((remedy, _)) => remedy,
                None => crate::solve::breakdown_remedy(&r.method).to_string(),
            };
            // The library's message starts with the method; the label says more.
            let what = e.to_string();
            let what = what.strip_prefix(r.method.as_str()).unwrap_or(&what);
            format!("{}{what} ({remedy})", row.label)
        }
        None => format!(
            "{} did not converge in {} iterations (relres_true {:.3e}, tol {:.1e})",
            row.label, r.equivalent_iterations, r.relres_true, r.tol
        ),
    }
}

fn per_eq(r: &SolveReport) -> f64 {
    r.equivalent_iterations.max(1) as f64
}

/// The report's fields plus `label`, `failed` (the row makes `compare` exit 1: a
/// breakdown, or no convergence with `--strict`), `s_per_eq_iteration` and
/// `per_eq_iteration`.
fn json_row(row: &Row) -> serde_json::Result<String> {
    let r = &row.report;
    let mut v = serde_json::to_value(r)?;
    let eq = per_eq(r);
    let t = &r.time_breakdown;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("label".into(), row.label.clone().into());
        obj.insert("failed".into(), row.status.failed().into());
        obj.insert("s_per_eq_iteration".into(), (r.time_s / eq).into());
        obj.insert(
            "per_eq_iteration".into(),
            serde_json::json!({
                "spmv": t.spmv / eq, "blas": t.blas / eq, "allreduce": t.allreduce / eq,
                "halo": t.halo / eq, "transfer": t.transfer / eq, "precond": t.precond / eq,
                "other": t.other / eq,
            }),
        );
    }
    serde_json::to_string(&v)
}

fn print_table(name: &str, rows: &[Row]) {
    out!("{name}: time per CG-equivalent iteration in microseconds");
    out!(
        "{:<24} {:>9} {:>7} {:>7} {:>6} {:>6} {:>10} {:>8} {:>7} {:>7} {:>9} {:>7} {:>8} {:>7} {:>7}",
        "method",
        "status",
        "iters",
        "eq_it",
        "reduc",
        "halo",
        "relres",
        "us/eq",
        "spmv",
        "blas",
        "allreduce",
        "halo",
        "transfer",
        "precond",
        "other"
    );
    for row in rows {
        let r = &row.report;
        let eq = per_eq(r);
        let t = &r.time_breakdown;
        let us = |s: f64| s / eq * 1e6;
        out!(
            "{:<24} {:>9} {:>7} {:>7} {:>6} {:>6} {:>10.2e} {:>8.1} {:>7.1} {:>7.1} {:>9.1} {:>7.1} {:>8.1} {:>7.1} {:>7.1}",
            row.label,
            row.status.word(),
            r.iterations,
            r.equivalent_iterations,
            r.reductions,
            r.halo_exchanges,
            r.relres_true,
            us(r.time_s),
            us(t.spmv),
            us(t.blas),
            us(t.allreduce),
            us(t.halo),
            us(t.transfer),
            us(t.precond),
            us(t.other)
        );
    }
}

/// Relative residual (log scale) against CG-equivalent iteration, one line per item.
fn plot(path: &Path, name: &str, rows: &[Row]) -> Result<(), CliError> {
    // Block methods record one residual per outer step: place entry j at CG-equivalent
    // iteration (j + 1) * equivalent_iterations / entries.
    let series: plot::Series = rows
        .iter()
        .map(
            |Row {
                 label, report: r, ..
             }| {
                let h = r.history.as_deref().unwrap_or(&[]);
                let step = (r.equivalent_iterations as f64 / h.len().max(1) as f64).max(1.0);
                let pts = h
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| **v > 0.0 && v.is_finite())
                    .map(|(j, v)| ((j + 1) as f64 * step, *v))
                    .collect();
                (label.clone(), pts)
            },
        )
        .collect();
    let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let Some(y) = plot::span(pts().map(|p| p.1), true, 2.0) else {
        return Err(bad(
            "nothing to plot: no method recorded a residual history",
        ));
    };
    let xmax = pts().map(|p| p.0).fold(1.0, f64::max);
    let caption = format!("{name}: convergence");
    let chart = plot::Chart {
        caption: &caption,
        x: plot::Axis {
            desc: "CG-equivalent iteration",
            log: false,
        },
        y: plot::Axis {
            desc: "relative residual (recurrence)",
            log: true,
        },
    };
    plot::write_svg(path, chart, &series, (0.0..xmax, y))
}
