//! `krylov compare`: one solve per method item on the same problem, a table (or JSON rows)
//! of iterations, communication and time per CG-equivalent iteration, and an optional SVG
//! plot of the residual histories.

use std::path::Path;
use std::process::ExitCode;

use castack_krylov::{Basis, Method, SolveReport};

use crate::args::CompareArgs;
use crate::exit::{bad, CliError};
use crate::output::out;
use crate::plot;
use crate::settings::{read_config, resolve};
use crate::solve::{load, solve_problem};

/// One item of `--methods`: `NAME[:K][:BASIS][:mpk]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MethodItem {
    pub(crate) label: String,
    pub(crate) method: Method,
    pub(crate) k: Option<usize>,
    pub(crate) basis: Option<Basis>,
    pub(crate) mpk: bool,
}

impl std::str::FromStr for MethodItem {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let method: Method = parts
            .next()
            .unwrap_or_default()
            .parse()
            .map_err(|e: castack_collectives::UnknownAlgorithm| e.to_string())?;
        let mut item = MethodItem {
            label: s.to_string(),
            method,
            k: None,
            basis: None,
            mpk: false,
        };
        for part in parts {
            if let Ok(k) = part.parse::<usize>() {
                item.k = Some(k);
            } else if part == "mpk" {
                item.mpk = true;
            } else if let Ok(b) = part.parse::<Basis>() {
                item.basis = Some(b);
            } else {
                return Err(format!(
                    "'{part}' in '{s}' is not a k, a basis ({}) or 'mpk'",
                    Basis::ALL
                        .iter()
                        .map(|b| b.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Ok(item)
    }
}

/// Run `krylov compare`.
pub(crate) fn run(args: Box<CompareArgs>) -> Result<ExitCode, CliError> {
    let args = *args;
    let file = match &args.config {
        Some(p) => read_config(p)?,
        None => Default::default(),
    };
    // Resolve once without the items to load the problem and catch bad shared flags.
    let base = resolve(args.settings.clone(), file.clone())?;
    let problem = load(&args.matrix, &base)?;
    let mut rows = Vec::with_capacity(args.methods.len());
    for item in &args.methods {
        let mut flags = args.settings.clone();
        flags.method = Some(item.method);
        flags.k = item.k.or(flags.k);
        flags.basis = item.basis.or(flags.basis);
        flags.mpk = Some(item.mpk);
        if args.plot.is_some() {
            flags.history = Some(true);
        }
        let s = resolve(flags, file.clone())?;
        let (_, report) = solve_problem(&problem, &s)?;
        rows.push((item.label.clone(), report));
    }
    if let Some(path) = &args.plot {
        plot(path, &problem.name, &rows)?;
    }
    if args.json {
        for (label, r) in &rows {
            out!("{}", json_row(label, r).map_err(CliError::failed)?);
        }
    } else {
        print_table(&problem.name, &rows);
    }
    Ok(ExitCode::SUCCESS)
}

fn per_eq(r: &SolveReport) -> f64 {
    r.equivalent_iterations.max(1) as f64
}

/// The report's fields plus `label`, `s_per_eq_iteration` and `per_eq_iteration`.
fn json_row(label: &str, r: &SolveReport) -> serde_json::Result<String> {
    let mut v = serde_json::to_value(r)?;
    let eq = per_eq(r);
    let t = &r.time_breakdown;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("label".into(), label.into());
        obj.insert("s_per_eq_iteration".into(), (r.time_s / eq).into());
        obj.insert(
            "per_eq_iteration".into(),
            serde_json::json!({
                "spmv": t.spmv / eq, "blas": t.blas / eq, "allreduce": t.allreduce / eq,
                "halo": t.halo / eq, "transfer": t.transfer / eq, "other": t.other / eq,
            }),
        );
    }
    serde_json::to_string(&v)
}

fn print_table(name: &str, rows: &[(String, SolveReport)]) {
    out!("{name}: time per CG-equivalent iteration in microseconds");
    out!(
        "{:<24} {:>5} {:>7} {:>7} {:>6} {:>6} {:>10} {:>8} {:>7} {:>7} {:>9} {:>7} {:>8} {:>7}",
        "method",
        "conv",
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
        "other"
    );
    for (label, r) in rows {
        let eq = per_eq(r);
        let t = &r.time_breakdown;
        let us = |s: f64| s / eq * 1e6;
        out!(
            "{:<24} {:>5} {:>7} {:>7} {:>6} {:>6} {:>10.2e} {:>8.1} {:>7.1} {:>7.1} {:>9.1} {:>7.1} {:>8.1} {:>7.1}",
            label,
            if r.converged { "yes" } else { "NO" },
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
            us(t.other)
        );
    }
}

/// Relative residual (log scale) against CG-equivalent iteration, one line per item.
fn plot(path: &Path, name: &str, rows: &[(String, SolveReport)]) -> Result<(), CliError> {
    // Block methods record one residual per outer step: place entry j at CG-equivalent
    // iteration (j + 1) * equivalent_iterations / entries.
    let series: plot::Series = rows
        .iter()
        .map(|(label, r)| {
            let h = r.history.as_deref().unwrap_or(&[]);
            let step = (r.equivalent_iterations as f64 / h.len().max(1) as f64).max(1.0);
            let pts = h
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 0.0 && v.is_finite())
                .map(|(j, v)| ((j + 1) as f64 * step, *v))
                .collect();
            (label.clone(), pts)
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_parse_in_any_order() {
        let it: MethodItem = "cg".parse().unwrap();
        assert_eq!(
            (it.method, it.k, it.basis, it.mpk),
            (Method::Cg, None, None, false)
        );
        let it: MethodItem = "cg:8:monomial:mpk".parse().unwrap();
        assert_eq!(it.k, Some(8));
        assert_eq!(it.basis, Some(Basis::Monomial));
        assert!(it.mpk);
        assert!("cg:eight"
            .parse::<MethodItem>()
            .unwrap_err()
            .contains("eight"));
        assert!("nope".parse::<MethodItem>().unwrap_err().contains("nope"));
    }
}
