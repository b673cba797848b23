//! `krylov plan`: predict the time of every (method, k, basis, mpk) candidate at each rank
//! count on a fabric and recommend the fastest (CLI.md "plan"; the model is
//! `castack_plan`). A table per rank count (or one JSON row per candidate and rank
//! count) and an optional log-log SVG plot of predicted time vs P: the recommended
//! candidates and the nearest named, the rest grey ([`plot`]).

use std::path::Path;
use std::process::ExitCode;

use castack_collectives::fabric_sim::{Fabric, MemBudget, MemoryKind};
use castack_collectives::AllreduceAlgo;
use castack_krylov::{Basis, Method};
use castack_plan::probe::{ProbeOptions, ProbeStore};
use castack_plan::{self as plan, Candidate, PlanConfig, PlanError, PlanRow};

use crate::args::{Device, PlanArgs};
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
        device: match args.device {
            Device::Cpu => MemoryKind::Host,
            Device::Cuda => MemoryKind::Gpu,
        },
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
        print_table(&name, &fabric, args.device, &rows);
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
    if let Some(l) = r.depth {
        s.push_str(&format!(":{l}"));
    }
    s
}

fn print_table(name: &str, fabric: &Fabric, device: Device, rows: &[PlanRow]) {
    let us = |s: f64| s * 1e6;
    let mut ranks: Vec<usize> = rows.iter().map(|r| r.ranks).collect();
    ranks.dedup();
    out!(
        "{name} on {} ({}): predicted time per CG-equivalent iteration (us)",
        fabric.config().name,
        match device {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda: GPU model with host-device staging",
        }
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

/// At most this many candidates are named in the plan plot (more only where more are
/// recommended at some P); a plot of at most one more names them all.
const NAMED: usize = 6;

/// One candidate's line in the plan plot.
#[derive(Debug, Default)]
struct Line {
    /// The candidate, as the table names it.
    label: String,
    /// (P, predicted total) where it is feasible and priced.
    points: Vec<(f64, f64)>,
    /// Its predicted total over the recommended one's, at each of `points`.
    ratios: Vec<f64>,
    /// The rank counts where it is recommended.
    recommended_at: Vec<usize>,
    /// The rank counts where it is the runner-up (the next fastest after the recommended).
    next_at: Vec<usize>,
}

impl Line {
    /// Geometric mean of the ratios to the recommended time: how close the line runs to the
    /// best over the rank counts it was priced at (1: recommended everywhere).
    fn closeness(&self) -> f64 {
        if self.ratios.is_empty() {
            return f64::INFINITY;
        }
        let logs: f64 = self.ratios.iter().map(|r| r.ln()).sum();
        (logs / self.ratios.len() as f64).exp()
    }

    /// The ratio to the recommended time at P = `p`.
    fn ratio_at(&self, p: usize) -> f64 {
        self.points
            .iter()
            .zip(&self.ratios)
            .find(|((x, _), _)| *x == p as f64)
            .map_or(f64::INFINITY, |(_, r)| *r)
    }

    /// The legend label: `pipecg (recommended at P = 4, 16)`, `ccg (next best at P = 4;
    /// 1.05-1.62x the best)` or `cbcgr:6:chebyshev (1.02-1.31x the best)`.
    fn legend(&self) -> String {
        let list = |ps: &[usize]| {
            let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
            ps.join(", ")
        };
        if !self.recommended_at.is_empty() {
            return format!(
                "{} (recommended at P = {})",
                self.label,
                list(&self.recommended_at)
            );
        }
        let (lo, hi) = self
            .ratios
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), r| {
                (a.min(*r), b.max(*r))
            });
        let x = |r: f64| format!("{r:.2}");
        let range = if x(lo) == x(hi) {
            format!("{}x the best", x(lo))
        } else {
            format!("{}-{}x the best", x(lo), x(hi))
        };
        if self.next_at.is_empty() {
            format!("{} ({range})", self.label)
        } else {
            format!(
                "{} (next best at P = {}; {range})",
                self.label,
                list(&self.next_at)
            )
        }
    }
}

/// The plan plot's lines, one per candidate with a predicted total at some P, and the
/// recommended (P, time) points.
fn lines(rows: &[PlanRow]) -> (Vec<Line>, Vec<(f64, f64)>) {
    let time = |r: &PlanRow| r.predicted_total_s.filter(|t| *t > 0.0 && t.is_finite());
    let mut lines: Vec<Line> = Vec::new();
    let mut best = Vec::new();
    // Each rank count once, in the order of the rows.
    let mut ranks: Vec<usize> = Vec::new();
    for r in rows {
        if !ranks.contains(&r.ranks) {
            ranks.push(r.ranks);
        }
    }
    for p in ranks {
        let at_p = || rows.iter().filter(move |r| r.ranks == p);
        // The recommended time at P (the least one where none is marked), circled.
        let recommended = at_p().filter(|r| r.recommended).find_map(time);
        let Some(t_best) = recommended.or_else(|| at_p().filter_map(time).min_by(f64::total_cmp))
        else {
            continue;
        };
        if recommended.is_some() {
            best.push((p as f64, t_best));
        }
        let mut runner_up: Option<(usize, f64)> = None;
        for r in at_p() {
            let Some(t) = time(r) else { continue };
            let label = label(r);
            let at = match lines.iter().position(|l| l.label == label) {
                Some(at) => at,
                None => {
                    lines.push(Line {
                        label,
                        ..Line::default()
                    });
                    lines.len() - 1
                }
            };
            let line = &mut lines[at];
            line.points.push((p as f64, t));
            line.ratios.push(t / t_best);
            if r.recommended {
                line.recommended_at.push(p);
            } else if runner_up.is_none_or(|(_, u)| t < u) {
                runner_up = Some((at, t));
            }
        }
        if let Some((at, _)) = runner_up {
            lines[at].next_at.push(p);
        }
    }
    (lines, best)
}

/// Which of `lines` the plan plot names, in legend order: every one recommended at some P
/// (by its first such P), then the runner-up at each P (the nearest first), then the
/// nearest over all P ([`Line::closeness`]), [`NAMED`] in all (all of them when there are
/// at most one more).
fn named(lines: &[Line]) -> Vec<usize> {
    if lines.len() <= NAMED + 1 {
        return (0..lines.len()).collect();
    }
    let first = |i: &usize| lines[*i].recommended_at.first().copied();
    let mut named: Vec<usize> = (0..lines.len()).filter(|i| first(i).is_some()).collect();
    named.sort_by_key(first);
    let mut next: Vec<(f64, usize)> = (0..lines.len())
        .filter(|i| !named.contains(i))
        .flat_map(|i| {
            lines[i]
                .next_at
                .iter()
                .map(move |p| (lines[i].ratio_at(*p), i))
        })
        .collect();
    next.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut near: Vec<usize> = (0..lines.len()).collect();
    near.sort_by(|a, b| lines[*a].closeness().total_cmp(&lines[*b].closeness()));
    for i in next.into_iter().map(|(_, i)| i).chain(near) {
        if named.len() >= NAMED {
            break;
        }
        if !named.contains(&i) {
            named.push(i);
        }
    }
    named
}

/// Predicted total time vs P (log-log). Of many candidates (every method and k: about 45)
/// only those a reader needs are named ([`named`]), each with its own colour and marker:
/// those recommended at some P (bold, the recommended point at each P circled), the
/// runner-up at each P and the nearest to the recommended time; the rest are thin grey
/// lines with one legend entry that counts them.
fn plot(path: &Path, name: &str, fabric: &str, rows: &[PlanRow]) -> Result<(), CliError> {
    let (lines, rings) = lines(rows);
    if lines.is_empty() {
        return Err(bad("nothing to plot: every candidate is infeasible"));
    }
    let named = named(&lines);
    let others = lines.len() - named.len();
    // Grey lines first, then the named in legend order.
    let mut series = plot::Series::new();
    let mut looks = Vec::new();
    let grey = (0..lines.len()).filter(|i| !named.contains(i));
    for i in grey.chain(named.iter().copied()) {
        let l = &lines[i];
        looks.push(if !named.contains(&i) {
            plot::Look::Grey
        } else if l.recommended_at.is_empty() {
            plot::Look::Normal
        } else {
            plot::Look::Bold
        });
        series.push((l.legend(), l.points.clone()));
    }
    let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let (Some(x), Some(y)) = (
        plot::span(pts().map(|p| p.0), true, 1.5),
        plot::span(pts().map(|p| p.1), true, 1.3),
    ) else {
        return Err(bad("nothing to plot: every candidate is infeasible"));
    };
    // At least a factor 4 on the time axis, so that it carries two labelled ticks.
    let widen = (4.0 * y.start / y.end).sqrt().max(1.0);
    let y = y.start / widen..y.end * widen;
    let caption = if others == 0 {
        format!("{name} on {fabric}: predicted time of each candidate")
    } else {
        format!(
            "{name} on {fabric}: predicted time, {} of {} candidates named",
            named.len(),
            lines.len()
        )
    };
    let grey = format!(
        "{others} other candidate{} (grey)",
        if others == 1 { "" } else { "s" }
    );
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
    let emphasis = plot::Emphasis {
        looks: &looks,
        grey_label: Some(&grey),
        rings: &rings,
        ring_label: Some("recommended at each P (circled)"),
    };
    plot::write_svg_with(path, chart, units, &series, (x, y), emphasis)
}
