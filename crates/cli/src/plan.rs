//! `krylov plan`: predict the time of every (method, k, basis, mpk) candidate at each rank
//! count on a fabric and recommend the fastest (CLI.md "plan"; the model is
//! `castack_plan`). A table per rank count (or one JSON row per candidate and rank
//! count) and an optional log-log SVG plot of predicted time vs P per method.

use std::path::Path;
use std::process::ExitCode;

use castack_collectives::fabric_sim::{Fabric, MemBudget};
use castack_collectives::AllreduceAlgo;
use castack_krylov::{Basis, Method};
use castack_plan::probe::{ProbeOptions, ProbeStore};
use castack_plan::{self as plan, Candidate, PlanConfig, PlanError, PlanRow};

use crate::args::PlanArgs;
use crate::exit::{bad, CliError};
use crate::fabric::{load_fabric, load_fabric_for};
use crate::output::out;
use crate::plot;
use crate::probe_cache::FolderStore;

/// Run `krylov plan`.
pub(crate) fn run(args: PlanArgs) -> Result<ExitCode, CliError> {
    if let Some(path) = &args.plot {
        crate::output::target(path)?;
    }
    let budget = args.budget.resolve()?;
    let fabric = fabric_with_device(&args.fabric, args.device_model.as_deref(), budget)?;
    let methods: Vec<(Method, Basis)> = match &args.methods {
        Some(list) => list.iter().map(|m| (m.method, m.basis)).collect(),
        None => Method::ALL.iter().map(|&m| (m, Basis::default())).collect(),
    };
    // Each rank count once, in the order given (`--ranks 4,4,4` planned P = 4 thrice).
    let mut ranks: Vec<usize> = Vec::with_capacity(args.ranks.len());
    for &p in &args.ranks {
        if !ranks.contains(&p) {
            ranks.push(p);
        }
    }
    let cfg = PlanConfig {
        ranks,
        candidates: Candidate::grid(&methods, args.k.min..=args.k.max, !args.no_mpk),
        probe: ProbeOptions {
            ranks: args.probe_ranks,
            tol: args.tol,
            precond: args.precond,
            max_eq_iters: args.probe_max_iter,
            strategy: args.probe,
        },
        allreduce: AllreduceAlgo::default(),
        price_limit: args.price_limit as u64,
    };
    if !(args.tol.is_finite() && args.tol > 0.0 && args.tol < 1.0) {
        return Err(bad(format!("--tol must be in (0, 1), got {}", args.tol)));
    }
    // Settings and rank counts first: a bad --ranks fails before the matrix is read.
    plan::validate(&fabric, &cfg).map_err(plan_error)?;
    let name = args.matrix.display().to_string();
    let a = crate::solve::read_spd_csr(&args.matrix, budget)?;
    // The right-hand side of `krylov solve`'s default (unit solution: b = A * ones).
    let indptr = a.indptr();
    let indptr = indptr.raw_storage();
    let b: Vec<f64> = (0..a.rows())
        .map(|i| a.data()[indptr[i]..indptr[i + 1]].iter().sum())
        .collect();
    // Plans at thousands of ranks take a while (pricing deep exchanges): a progress bar on
    // a terminal, over the instrumented runs and the pricing jobs.
    let units = plan::work_units(&cfg);
    let bar = crate::output::progress_bar(true, units, "runs and pricing jobs", args.json);
    let store = match (&args.probe_cache, args.no_probe_cache) {
        (_, true) => None,
        (Some(dir), false) => Some(FolderStore::new(dir.clone())),
        (None, false) => FolderStore::default_dir().map(FolderStore::new),
    };
    let store = store.as_ref().map(|s| s as &dyn ProbeStore);
    let rows = plan::plan_stored(a.view(), &b, &fabric, &cfg, store, &|_, _| bar.inc(1));
    bar.finish_and_clear();
    let rows = rows.map_err(plan_error)?;
    if args.json {
        for r in &rows {
            let line =
                serde_json::to_string(r).map_err(|e| CliError::failed(anyhow::anyhow!(e)))?;
            out!("{line}");
        }
    } else {
        print_table(&name, &fabric, &rows);
    }
    if let Some(path) = &args.plot {
        plot(path, &name, &fabric.config().name, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Bad settings, ranks the fabric cannot hold and fabrics without a device model are bad
/// input (exit 2); a failed instrumented run is a failed run (exit 1).
fn plan_error(e: PlanError) -> CliError {
    match e {
        PlanError::Probe(_) => CliError::failed(anyhow::anyhow!("{e}")),
        _ => bad(e),
    }
}

/// `--fabric`, with its `[compute]` section replaced by `--device-model NAME|PATH`'s (a
/// preset, or a preset file such as `krylov calibrate` writes).
fn fabric_with_device(
    spec: &str,
    device: Option<&str>,
    budget: MemBudget,
) -> Result<Fabric, CliError> {
    let fabric = load_fabric(Some(spec), budget)?;
    let Some(dev) = device else {
        return Ok(fabric);
    };
    let other = load_fabric_for("--device-model", dev, budget)?;
    let mut cfg = fabric.config().clone();
    cfg.compute = other.config().compute.clone();
    if cfg.compute.is_none() {
        return Err(bad(format!(
            "--device-model {dev}: the preset has no [compute] section"
        )));
    }
    Fabric::new_within(cfg, budget).map_err(|e| bad(format!("--device-model {dev}: {e}")))
}

fn label(r: &PlanRow) -> String {
    let mut s = r.method.clone();
    if let Some(k) = r.k {
        s.push_str(&format!(":{k}"));
    }
    if let Some(b) = &r.basis {
        s.push_str(&format!(":{b}"));
    }
    if r.mpk {
        s.push_str(":mpk");
    }
    s
}

fn print_table(name: &str, fabric: &Fabric, rows: &[PlanRow]) {
    let us = |s: f64| s * 1e6;
    let mut ranks: Vec<usize> = rows.iter().map(|r| r.ranks).collect();
    ranks.dedup();
    out!(
        "{name} on {}: predicted time per CG-equivalent iteration (us)",
        fabric.config().name
    );
    for p in ranks {
        out!("");
        out!(
            "P = {p}\n  {:<26} {:>9} {:>10} {:>10} {:>10} {:>10} {:>12}",
            "candidate",
            "eq_iters",
            "compute",
            "allreduce",
            "halo",
            "per_iter",
            "total_s"
        );
        let time = |t: Option<f64>| t.map_or("-".into(), |t| format!("{:.2}", us(t)));
        // Each reason a candidate was not priced, once, with how many it left unpriced.
        let mut unpriced: Vec<(&str, usize)> = Vec::new();
        for r in rows.iter().filter(|r| r.ranks == p) {
            let total = match (&r.unpriced, r.predicted_total_s) {
                (Some(why), _) => {
                    match unpriced.iter_mut().find(|(w, _)| w == why) {
                        Some((_, n)) => *n += 1,
                        None => unpriced.push((why, 1)),
                    }
                    "not priced".into()
                }
                (None, Some(v)) => format!("{v:.4e}"),
                (None, None) => "infeasible".into(),
            };
            out!(
                "{} {:<26} {:>9} {:>10.2} {:>10} {:>10} {:>10} {:>12}",
                if r.recommended { "*" } else { " " },
                label(r),
                r.predicted_eq_iterations
                    .map_or("-".into(), |v| format!("{v:.0}")),
                us(r.compute_s),
                time(r.allreduce_s),
                time(r.halo_s),
                time(r.predicted_s_per_eq_iter),
                total,
            );
        }
        for (why, n) in &unpriced {
            out!(
                "  not priced ({n} candidate{} whose communication contains it): {why}; a \
                 larger --price-limit prices it, taking longer",
                if *n == 1 { "" } else { "s" }
            );
        }
        match plan::why(rows, p) {
            Some(w) => print_why(rows, &w, unpriced.iter().map(|x| x.1).sum()),
            None => out!("  recommended at P = {p}: none (no candidate both feasible and priced)"),
        }
    }
}

/// The recommended row's terms against the runner-up's, and the allreduce cost at which
/// the recommendation would flip ([`plan::why`]); `unpriced` candidates of its rank count
/// were not priced (the recommendation is among the others).
fn print_why(rows: &[PlanRow], w: &plan::Why, unpriced: usize) {
    let us = |s: f64| s * 1e6;
    let terms = |r: &PlanRow| {
        format!(
            "{:.0} eq. iterations x ({:.2} compute + {:.2} allreduce + {:.2} halo us) \
             + {:.3} ms setup = {:.4e} s",
            r.predicted_eq_iterations.unwrap_or(f64::NAN),
            us(r.compute_s),
            us(r.allreduce_s.unwrap_or(f64::NAN)),
            us(r.halo_s.unwrap_or(f64::NAN)),
            r.setup_s.unwrap_or(f64::NAN) * 1e3,
            r.predicted_total_s.unwrap_or(f64::NAN),
        )
    };
    let best = &rows[w.best];
    if unpriced == 0 {
        out!("  recommended at P = {}: {}", best.ranks, label(best));
    } else {
        // A candidate not priced may be faster: say so where the choice is made.
        out!(
            "  recommended at P = {}: {} (among the priced candidates; {unpriced} not priced)",
            best.ranks,
            label(best)
        );
    }
    out!("    why: {}", terms(best));
    if let Some(u) = w.runner_up {
        let r = &rows[u];
        let ratio =
            r.predicted_total_s.unwrap_or(f64::NAN) / best.predicted_total_s.unwrap_or(f64::NAN);
        out!("    next: {} {} ({ratio:.3}x)", label(r), terms(r));
    }
    let flip = |f: Option<plan::Flip>, side: &str| match f {
        Some(f) => {
            // Per CG-equivalent iteration, on whichever of the two rows pays a visible
            // allreduce (a pipelined one may hide its reduction).
            let other = &rows[f.to];
            let allreduce = |r: &PlanRow| r.allreduce_s.unwrap_or(f64::NAN);
            let shown = if allreduce(best) > 0.0 { best } else { other };
            out!(
                "    flips to {} if every allreduce took {:.3}x its modeled time \
                 ({}'s allreduce {:.2} instead of {:.2} us per eq. iteration)",
                label(other),
                f.factor,
                label(shown),
                us(allreduce(shown) * f.factor),
                us(allreduce(shown)),
            )
        }
        None => out!("    no candidate overtakes it at any {side} allreduce cost"),
    };
    flip(w.lower, "lower");
    flip(w.upper, "higher");
}

/// Predicted total time vs P (log-log), one line per method label (the best k of each
/// method name at each P is a separate concern; every candidate gets its line).
fn plot(path: &Path, name: &str, fabric: &str, rows: &[PlanRow]) -> Result<(), CliError> {
    let mut series = plot::Series::new();
    for r in rows {
        if let Some(t) = r.predicted_total_s.filter(|t| *t > 0.0 && t.is_finite()) {
            plot::push(&mut series, label(r), (r.ranks as f64, t));
        }
    }
    let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let (Some(x), Some(y)) = (
        plot::span(pts().map(|p| p.0), true, 1.5),
        plot::span(pts().map(|p| p.1), true, 2.0),
    ) else {
        return Err(bad("nothing to plot: every candidate is infeasible"));
    };
    let caption = format!("{name} on {fabric}: predicted time");
    let chart = plot::Chart {
        caption: &caption,
        x: plot::Axis {
            desc: "ranks P (one per node)",
            log: true,
        },
        y: plot::Axis {
            desc: "predicted time to tolerance",
            log: true,
        },
    };
    let units = plot::Units {
        x: plot::Unit::Ranks,
        y: plot::Unit::Seconds,
    };
    plot::write_svg_in(path, chart, units, &series, (x, y))
}
