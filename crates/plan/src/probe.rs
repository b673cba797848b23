//! Iterations from instrumented runs at small scale: the real solver on the `threads`
//! backend with a few ranks, on the same matrix and right-hand side. Basis degradation per
//! k is measured, not assumed: a candidate whose basis loses accuracy needs more
//! CG-equivalent iterations (or breaks down) in these runs exactly as it would at scale
//! (iterates depend on the rank count only through rounding).
//!
//! # Strategies ([`ProbeStrategy`])
//!
//! **`full`**: every (method, k, basis) is run to the tolerance, capped at `max_eq_iters`
//! CG-equivalent iterations. A run that converges reports its CG-equivalent iterations. A
//! capped run is extrapolated log-linearly from the true relative residual it reached:
//! `eq * ln(tol) / ln(relres)`, the average convergence rate so far held to the
//! tolerance. Jacobi-CG on heterogeneous Poisson drops fastest early, so this errs LOW.
//!
//! **`tracked`** (the default): every method of the family is CG in exact arithmetic
//! (the s-step methods compute CG's iterates from other recurrences; Chronopoulos and Gear
//! 1989, Hoemmen 2010, Carson 2015), and in floating point each deviates from CG by its own
//! rounding: a basis that loses accuracy delays convergence from the first outer steps on.
//! So one run of `cg` to the tolerance serves as the REFERENCE (its residual history
//! kept), and every other candidate runs only a short window: [`TRACK_FRACTION`] of the
//! reference's iterations, at least [`TRACK_MIN_EQ`]. Its TRUE relative residual `v` at the
//! end of the window, after `m` CG-equivalent iterations, is found on the reference's
//! history (at `m_ref`, interpolated log-linearly between neighbours): the candidate
//! tracks the reference with the lag ratio `m / m_ref` it showed in the window, and is
//! predicted to need that ratio times the iterations at which the reference meets the
//! tolerance BY THE CANDIDATE'S OWN CRITERION:
//! - `ccg`, `pipecg`: the reference's own count (they test the residual as `cg` does);
//! - the s-step methods smooth their iterates (minimal-residual smoothing,
//!   `cg/smoothing.rs`), which meets the tolerance before the plain residual does where
//!   it oscillates near it: the count is where the reference's residuals, smoothed the same
//!   way ([`smoothed_end`]), meet it: over the ends of blocks of k for `cbcg` and `cbcgr`,
//!   over every iterate for `cacg` (which smooths every inner iterate near the target).
//!
//! The prediction is taken only when the lag ratio lies within
//! `[1 / (1 + TRACK_SPREAD), 1 + TRACK_SPREAD]` ([`TRACK_SPREAD`]): a candidate that already
//! departs from CG by more has a course of its own, which the window cannot foretell, and
//! runs to the tolerance as under `full`. A window that converges, or a run that breaks
//! down, is measured as it is.
//!
//! **Interpolation in k.** An s-step (method, basis) planned at three or more k runs
//! windows at its smallest and largest k only. Where both track the reference and their
//! lag ratios differ by at most [`INTERP_SPREAD`], each k between is predicted with the
//! lag interpolated linearly in k, times the reference's end by that k's criterion, and
//! runs nothing: the basis's condition, the cause of an s-step method's departure from
//! CG, grows with k (Hoemmen 2010, Carson, Knight and Demmel 2013), so the lags between
//! lie between the ends'. Otherwise each k runs its own window.
//!
//! What the window cannot see: a departure from CG that starts only after it, such as a
//! late loss of attainable accuracy (the residual gap of Greenbaum 1997; Carson and
//! Demmel 2014 for s-step methods). The solvers check the true residual before they claim
//! convergence and replace the residual when the check fails, so such a candidate still
//! converges, later than predicted. `--probe full` measures it. Measured on the 64^3
//! heterogeneous Poisson matrix to 1e-12 (`cargo xtask plan-probes`), every default
//! candidate's tracked prediction is within 10% of its full run (the note of issue 24
//! gives the table).
//!
//! The matrix powers kernel gives bit-identical bases ([`crate::MatrixPowers`]), so one
//! run serves a candidate with and without MPK.
//!
//! # Reuse across plans ([`ProbeStore`])
//!
//! A probe depends on the matrix, the right-hand side, the method, k, basis, tolerance,
//! preconditioner, probe ranks, cap, what was run ([`ProbeMode`]: a run to the tolerance,
//! the reference with its history, a window with the tracking constants), the solvers'
//! arithmetic ([`castack_krylov::NUMERICS_VERSION`]) and the way runs become counts
//! ([`PROBE_MODEL_VERSION`]); not on the fabric or the rank counts planned. A
//! [`ProbeStore`] (the CLI's is a folder of JSON files) keeps results under a [`ProbeKey`]
//! of those, so a second plan of the same matrix with the same settings (another fabric,
//! other rank counts) runs no solver. A run to the tolerance that converged (or found the
//! candidate infeasible) serves a `tracked` plan too, in place of a window: it measured.
//! Interpolated probes are not kept: the ends they come from are.

use std::collections::HashMap;
use std::hash::Hasher;

use castack_collectives::{Communicator, ThreadUniverse};
use serde::{Deserialize, Serialize};
use sprs::CsMatView;

use castack_krylov::Method;
use castack_krylov::Partition;
use castack_krylov::{Basis, Precond, SolverConfig};
use castack_krylov::{Cpu, KrylovError, SolveReport, Solver, StopReason};
use castack_krylov::{DistCsr, SpmvMode};

use super::PlanError;

/// The share of the reference's iterations a tracked candidate runs (`tracked`): 5%, a
/// documented choice. On the 64^3 heterogeneous Poisson matrix to 1e-12, windows of 3%,
/// 5%, 10% and 20% (before the candidates' criteria were modeled) all predicted every
/// default candidate within 8% of its full run; 5% keeps several outer steps of the
/// largest default k in the window.
pub const TRACK_FRACTION: f64 = 0.05;

/// The fewest CG-equivalent iterations a tracked window runs: 32, a documented choice
/// (four outer steps at the largest default k of 8).
pub const TRACK_MIN_EQ: usize = 32;

/// How far a tracked candidate's lag ratio may depart from 1 before it runs to the
/// tolerance instead: 0.1, the accuracy the plan's iteration counts aim at.
pub const TRACK_SPREAD: f64 = 0.1;

/// How far apart the lag ratios of an s-step method's smallest and largest k may be for
/// the k between to be interpolated rather than tracked one by one: 0.05, a documented
/// choice (half the accuracy the plan's iteration counts aim at: with the lag monotone in
/// k, an interpolated lag is within it of the true one).
pub const INTERP_SPREAD: f64 = 0.05;

/// How the instrumented runs find each candidate's iterations (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStrategy {
    /// Every candidate runs to the tolerance (or the cap).
    Full,
    /// `cg` runs to the tolerance; the others a short window compared with it.
    #[default]
    Tracked,
}

impl ProbeStrategy {
    /// Every strategy.
    pub const ALL: &'static [ProbeStrategy] = &[ProbeStrategy::Full, ProbeStrategy::Tracked];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            ProbeStrategy::Full => "full",
            ProbeStrategy::Tracked => "tracked",
        }
    }
}

castack_collectives::impl_registry!(ProbeStrategy, "probe strategy");

/// Settings of the instrumented runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// Thread ranks of each run.
    pub ranks: usize,
    /// Relative tolerance on the true residual.
    pub tol: f64,
    /// Preconditioner.
    pub precond: Precond,
    /// Cap on CG-equivalent iterations per run.
    pub max_eq_iters: usize,
    /// How each candidate's iterations are found.
    pub strategy: ProbeStrategy,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            ranks: 2,
            tol: 1e-12,
            precond: Precond::Jacobi,
            max_eq_iters: 20_000,
            strategy: ProbeStrategy::default(),
        }
    }
}

/// Where a probe's iteration count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeSource {
    /// A run that converged: measured.
    Converged,
    /// A run capped at `max_eq_iters`: extrapolated log-linearly.
    Extrapolated,
    /// A short window that tracked the `cg` reference: its lag ratio times the
    /// reference's iterations.
    Tracked,
    /// An s-step k between two tracked ones of the same method and basis: their lag
    /// ratios interpolated in k.
    Interpolated,
}

impl ProbeSource {
    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            ProbeSource::Converged => "converged",
            ProbeSource::Extrapolated => "extrapolated",
            ProbeSource::Tracked => "tracked",
            ProbeSource::Interpolated => "interpolated",
        }
    }
}

/// What one instrumented run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// CG-equivalent iterations to the tolerance (measured, extrapolated or tracked).
    pub eq_iters: f64,
    /// Where `eq_iters` comes from.
    pub source: ProbeSource,
    /// The lag ratio against the reference (tracked and interpolated probes).
    #[serde(default)]
    pub lag: Option<f64>,
    /// CG-equivalent iterations actually run.
    pub ran_eq_iters: usize,
    /// Outer iterations actually run.
    pub outer_iters: usize,
    /// Reductions in the loop (checks included).
    pub reductions: u64,
    /// Halo exchanges in the loop.
    pub halo_exchanges: u64,
    /// Setup reductions (norms, spectral estimate).
    pub setup_reductions: u64,
    /// Setup halo exchanges (one SpMV each).
    pub setup_halo_exchanges: u64,
}

impl Probe {
    /// Whether the run converged: `eq_iters` is measured.
    pub fn converged(&self) -> bool {
        self.source == ProbeSource::Converged
    }
}

/// What a [`ProbeStore`] keeps per key: the probe (`None`: infeasible) and, for the `cg`
/// reference of a tracked plan, its residual history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredProbe {
    /// [`ProbeKey::describe`] of the key it was stored under (checked on load).
    pub key: String,
    /// The result.
    pub probe: Option<Probe>,
    /// Relative recurrence residual per CG-equivalent iteration (the reference only).
    pub history: Option<Vec<f64>>,
}

/// The most CG-equivalent iterations a kept probe may claim: extrapolations of capped runs
/// grow without bound as the tolerance falls, but past 1e12 iterations (days of even the
/// smallest matrix's CG) no plan means anything, and a value above it is a damaged or
/// edited file, not a measurement.
pub const MAX_PLAUSIBLE_EQ_ITERS: f64 = 1e12;

impl StoredProbe {
    /// Whether this entry, read back from a store, can be what a run under `key` kept: the
    /// key it names, and every number in the range a run produces: iterations finite,
    /// non-negative and at most [`MAX_PLAUSIBLE_EQ_ITERS`] (a converged count equal to the
    /// iterations run, which stay within `max_eq_iters` and one block of the largest k);
    /// a lag ratio finite and positive; counts of reductions and exchanges at most 64 per
    /// iteration run, plus 64; a residual history of finite non-negative values, at most one
    /// per iteration allowed. Anything else is a miss, and the probe runs again.
    pub fn plausible(&self, key: &ProbeKey) -> bool {
        if self.key != key.describe() {
            return false;
        }
        let cap = key.max_eq_iters.saturating_add(castack_krylov::K_MAX);
        let history_ok = self.history.as_ref().is_none_or(|h| {
            h.len() <= cap.saturating_add(1) && h.iter().all(|v| v.is_finite() && *v >= 0.0)
        });
        let probe_ok = self.probe.as_ref().is_none_or(|p| {
            let per_iteration = (p.ran_eq_iters as u64).saturating_add(1).saturating_mul(64);
            let counts = [
                p.reductions,
                p.halo_exchanges,
                p.setup_reductions,
                p.setup_halo_exchanges,
            ];
            p.eq_iters.is_finite()
                && (0.0..=MAX_PLAUSIBLE_EQ_ITERS).contains(&p.eq_iters)
                && p.ran_eq_iters <= cap
                && p.outer_iters <= p.ran_eq_iters.saturating_add(1)
                && (!p.converged() || p.eq_iters == p.ran_eq_iters as f64)
                && p.lag.is_none_or(|l| l.is_finite() && l > 0.0)
                && counts.iter().all(|&c| c <= per_iteration)
        });
        history_ok && probe_ok
    }
}

/// Everything a probe's result depends on (module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeKey {
    /// [`fingerprint`] of the matrix and right-hand side.
    pub matrix: u64,
    /// Method.
    pub method: Method,
    /// k (1 for the single-vector methods).
    pub k: usize,
    /// Basis name (s-step methods; "-" otherwise).
    pub basis: &'static str,
    /// Probe settings.
    pub tol: f64,
    /// Preconditioner.
    pub precond: Precond,
    /// Thread ranks.
    pub ranks: usize,
    /// Cap.
    pub max_eq_iters: usize,
    /// What was run.
    pub mode: ProbeMode,
}

/// What a stored probe ran ([`ProbeKey::mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeMode {
    /// To the tolerance (or the cap), as a user's solve runs (capped runs extrapolated).
    Full,
    /// The `cg` reference of a tracked plan: to the tolerance with its residual history (a
    /// solve that records its history checks its norm every iteration, so its counters
    /// differ slightly from a [`ProbeMode::Full`] run's; its iterates do not).
    Reference,
    /// A tracked window and its prediction.
    Window,
}

impl ProbeMode {
    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Full => "full",
            ProbeMode::Reference => "reference",
            ProbeMode::Window => "window",
        }
    }
}

/// The version of the way probes turn runs into iteration counts (the extrapolation of a
/// capped run, the window's lag and the candidates' criteria, the interpolation): bumped by
/// every change to them, and part of every [`ProbeKey`].
pub const PROBE_MODEL_VERSION: u32 = 1;

impl ProbeKey {
    /// A line naming every field, the solver's [`castack_krylov::NUMERICS_VERSION`], the
    /// [`PROBE_MODEL_VERSION`] and, for a window, the tracking constants: equal lines,
    /// equal results.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "matrix={:016x} method={} k={} basis={} tol={:e} precond={} ranks={} cap={} \
             mode={} numerics={} model={}",
            self.matrix,
            self.method.name(),
            self.k,
            self.basis,
            self.tol,
            self.precond.name(),
            self.ranks,
            self.max_eq_iters,
            self.mode.name(),
            castack_krylov::NUMERICS_VERSION,
            PROBE_MODEL_VERSION,
        );
        if self.mode == ProbeMode::Window {
            line.push_str(&format!(
                " track={TRACK_FRACTION}/{TRACK_MIN_EQ}/{TRACK_SPREAD}"
            ));
        }
        line
    }

    /// A file-name-safe id: 16 hex digits of the FNV-1a hash of [`ProbeKey::describe`].
    pub fn id(&self) -> String {
        let mut h = fnv::FnvHasher::default();
        h.write(self.describe().as_bytes());
        format!("{:016x}", h.finish())
    }
}

/// Keeps probe results across plans (module doc). Implementations decide where; a lookup
/// that fails for any reason is a miss, and a store that fails loses nothing but time.
pub trait ProbeStore: Sync {
    /// The entry stored under `key`, if any (its `key` field equal to `key.describe()`).
    fn load(&self, key: &ProbeKey) -> Option<StoredProbe>;
    /// Keep `entry` under `key`.
    fn store(&self, key: &ProbeKey, entry: &StoredProbe);
}

/// FNV-1a (64-bit) of the matrix's shape, structure and values and of `b`'s values: the
/// matrix part of a [`ProbeKey`]. Linear in the nonzeros (about a quarter of a second for
/// the 2M-row 3-D Poisson matrix).
pub fn fingerprint(a: CsMatView<'_, f64>, b: &[f64]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write_u64(a.rows() as u64);
    h.write_u64(a.cols() as u64);
    for &p in a.indptr().raw_storage() {
        h.write_u64(p as u64);
    }
    for &j in a.indices() {
        h.write_u64(j as u64);
    }
    for &v in a.data() {
        h.write_u64(v.to_bits());
    }
    for &v in b {
        h.write_u64(v.to_bits());
    }
    h.finish()
}

/// The candidates' probe results by (method, k, basis name); `None` where infeasible.
pub type Probes = HashMap<(Method, usize, &'static str), Option<Probe>>;

/// Probe every `(method, k, basis)` of `keys` with `opts` (module doc), through `store`
/// when given, calling `tick` once per key as its result is known.
///
/// # Errors
/// [`PlanError::Probe`] for failures other than a breakdown (bad matrix, communication).
pub fn probe_all(
    a: CsMatView<'_, f64>,
    b: &[f64],
    keys: &[(Method, usize, Basis)],
    opts: &ProbeOptions,
    store: Option<&dyn ProbeStore>,
    tick: &(dyn Fn() + Sync),
) -> Result<Probes, PlanError> {
    let matrix = fingerprint(a, b);
    let key = |method: Method, k: usize, basis: Basis, mode| ProbeKey {
        matrix,
        method,
        k,
        basis: if method.is_s_step() {
            basis.name()
        } else {
            "-"
        },
        tol: opts.tol,
        precond: opts.precond,
        ranks: opts.ranks,
        max_eq_iters: opts.max_eq_iters,
        mode,
    };
    // The least true residual of a run that stagnated above the tolerance: when no
    // candidate is feasible, the tolerance was out of reach ([`PlanError::Unattainable`]).
    let stagnated = std::cell::Cell::new(f64::INFINITY);
    let note_stagnation = |r: Option<&SolveReport>| {
        if let Some(r) = r.filter(|r| r.stop_reason == StopReason::Stagnated) {
            stagnated.set(stagnated.get().min(r.relres_true));
        }
    };
    // What a store gives back is checked, not trusted (`StoredProbe::plausible`).
    let cached = |k: &ProbeKey| store.and_then(|s| s.load(k)).filter(|e| e.plausible(k));
    let keep = |k: &ProbeKey, probe: &Option<Probe>, history: Option<Vec<f64>>| {
        if let Some(s) = store {
            let entry = StoredProbe {
                key: k.describe(),
                probe: probe.clone(),
                history,
            };
            s.store(k, &entry);
        }
    };
    // A run to the tolerance, from the store or run now (with its history when asked:
    // the reference, stored under its own mode).
    let full = |method, k, basis, history: bool| -> Result<StoredProbe, PlanError> {
        let mode = if history {
            ProbeMode::Reference
        } else {
            ProbeMode::Full
        };
        let fk = key(method, k, basis, mode);
        if let Some(e) = cached(&fk).filter(|e| !history || e.history.is_some()) {
            return Ok(e);
        }
        let report = run(a, b, (method, k, basis), opts, opts.max_eq_iters, history)?;
        note_stagnation(report.as_ref());
        let probe = report.as_ref().and_then(|r| from_report(r, opts.tol));
        let hist = report.and_then(|r| r.history);
        keep(&fk, &probe, hist.clone());
        Ok(StoredProbe {
            key: fk.describe(),
            probe,
            history: hist,
        })
    };
    let mut out = Probes::new();
    // The reference of a tracked plan: cg to the tolerance, with its history.
    let reference = match opts.strategy {
        ProbeStrategy::Full => None,
        ProbeStrategy::Tracked => {
            let r = full(Method::Cg, 1, Basis::default(), true)?;
            match (r.probe, r.history) {
                (Some(p), Some(h)) if p.converged() && !h.is_empty() => Some((p, h)),
                // No converged reference: nothing to track, every candidate runs out.
                _ => None,
            }
        }
    };
    // The k strictly between an s-step (method, basis)'s smallest and largest, when it
    // has at least three: interpolated from the two ends where both track alike.
    let ends = |method: Method, basis: Basis| {
        let ks = keys
            .iter()
            .filter(|&&(m, _, b)| m == method && b == basis)
            .map(|&(_, k, _)| k);
        (ks.clone().min().unwrap_or(1), ks.max().unwrap_or(1))
    };
    let between = |method: Method, k: usize, basis: Basis| {
        let (lo, hi) = ends(method, basis);
        method.is_s_step() && lo < k && k < hi
    };
    // One candidate tracked against the reference (or from the store).
    let tracked = |method, k, basis, p: &Probe, h: &[f64]| -> Result<Option<Probe>, PlanError> {
        // A stored run to the tolerance is preferred where it measured (converged, or
        // found the candidate infeasible), not where it only extrapolated.
        let fk = key(method, k, basis, ProbeMode::Full);
        let tk = key(method, k, basis, ProbeMode::Window);
        let measured = |e: &StoredProbe| e.probe.as_ref().is_none_or(Probe::converged);
        if let Some(e) = cached(&fk).filter(measured).or_else(|| cached(&tk)) {
            return Ok(e.probe);
        }
        Ok(match track(a, b, (method, k, basis), opts, p, h)? {
            Some(probe) => {
                keep(&tk, &probe, None);
                probe
            }
            None => full(method, k, basis, false)?.probe,
        })
    };
    let mut deferred = Vec::new();
    for &(method, k, basis) in keys {
        let id = (method, k, basis.name());
        if out.contains_key(&id) || deferred.contains(&(method, k, basis)) {
            continue;
        }
        let probe = match &reference {
            Some((p, _)) if method == Method::Cg => Some(p.clone()),
            Some(_) if between(method, k, basis) => {
                deferred.push((method, k, basis));
                continue;
            }
            Some((p, h)) => tracked(method, k, basis, p, h)?,
            None => full(method, k, basis, false)?.probe,
        };
        out.insert(id, probe);
        tick();
    }
    for (method, k, basis) in deferred {
        let Some((p, h)) = &reference else { break };
        let (lo, hi) = ends(method, basis);
        let end = |k: usize| out.get(&(method, k, basis.name())).cloned().flatten();
        let probe = match (end(lo), end(hi)) {
            (Some(l), Some(r)) => match (l.source, l.lag, r.source, r.lag) {
                (ProbeSource::Tracked, Some(ll), ProbeSource::Tracked, Some(lr))
                    if (ll - lr).abs() <= INTERP_SPREAD =>
                {
                    let t = (k - lo) as f64 / (hi - lo) as f64;
                    let near = if 2 * (k - lo) <= hi - lo {
                        (&l, lo)
                    } else {
                        (&r, hi)
                    };
                    interpolate(ll + t * (lr - ll), (method, k), near, h, opts.tol, p)
                }
                _ => tracked(method, k, basis, p, h)?,
            },
            _ => tracked(method, k, basis, p, h)?,
        };
        out.insert((method, k, basis.name()), probe);
        tick();
    }
    if out.values().all(Option::is_none) && stagnated.get().is_finite() {
        return Err(PlanError::Unattainable {
            tol: opts.tol,
            reached: stagnated.get(),
        });
    }
    Ok(out)
}

/// The probe of an s-step `(method, k)` between two tracked ends: `lag` times where the
/// reference meets the tolerance by the method's criterion at `k` (`criterion_end`), the
/// setup counters of the nearer end `near` (its probe and k), and as loop counters that
/// end's work beyond its outer steps (first Gram matrix, refreshes, final check) with no
/// outer step (the plan counts those from the iterations).
fn interpolate(
    lag: f64,
    (method, k): (Method, usize),
    (near, near_k): (&Probe, usize),
    history: &[f64],
    tol: f64,
    reference: &Probe,
) -> Option<Probe> {
    let end = criterion_end(method, k, history, tol, reference);
    let (reductions, halo_exchanges) = super::cost::loop_extras(
        method,
        near_k,
        near.outer_iters,
        near.reductions,
        near.halo_exchanges,
    );
    Some(Probe {
        eq_iters: lag * end,
        source: ProbeSource::Interpolated,
        lag: Some(lag),
        ran_eq_iters: 0,
        outer_iters: 0,
        reductions,
        halo_exchanges,
        setup_reductions: near.setup_reductions,
        setup_halo_exchanges: near.setup_halo_exchanges,
    })
}

/// The tracked window of one candidate against the reference `(reference, history)`:
/// `Some(result)` (a prediction, a converged window, or `None` inside for a breakdown), or
/// `None` when the window is not trustworthy and the candidate must run to the end.
fn track(
    a: CsMatView<'_, f64>,
    b: &[f64],
    (method, k, basis): (Method, usize, Basis),
    opts: &ProbeOptions,
    reference: &Probe,
    history: &[f64],
) -> Result<Option<Option<Probe>>, PlanError> {
    let window = ((TRACK_FRACTION * reference.eq_iters).ceil() as usize).max(TRACK_MIN_EQ);
    if window >= opts.max_eq_iters {
        return Ok(None);
    }
    let Some(r) = run(a, b, (method, k, basis), opts, window, false)? else {
        return Ok(Some(None));
    };
    if r.converged {
        return Ok(Some(from_report(&r, opts.tol)));
    }
    let ran = r.equivalent_iterations;
    let Some(m_ref) = crossing(history, r.relres_true).filter(|_| ran > 0) else {
        return Ok(None);
    };
    let lag = ran as f64 / m_ref;
    if !(lag.is_finite() && (1.0 / (1.0 + TRACK_SPREAD)..=1.0 + TRACK_SPREAD).contains(&lag)) {
        return Ok(None);
    }
    let end = criterion_end(method, k, history, opts.tol, reference);
    Ok(Some(Some(Probe {
        eq_iters: lag * end,
        source: ProbeSource::Tracked,
        lag: Some(lag),
        ..counters(&r)
    })))
}

/// Where the reference (`history`, converged at `reference.eq_iters`) meets `tol` by the
/// criterion of `(method, k)`:
/// - `ccg`, `pipecg` (and `cg`): its own count, testing the residual as `cg` does;
/// - `cbcg`, `cbcgr`: the residuals minimal-residual smoothed over the ends of blocks of
///   k ([`smoothed_end`]); where they never meet it, the reference's count rounded up to a
///   whole block;
/// - `cacg`: smoothed over every iterate ([`smoothed_end`] with k = 1): it smooths its outer
///   iterates far from the target and every inner iterate near it, where the smallest
///   residuals, which dominate the smoothed sum, lie (`cg/cacg.rs`).
fn criterion_end(method: Method, k: usize, history: &[f64], tol: f64, reference: &Probe) -> f64 {
    let whole = |k: usize| (reference.eq_iters / k as f64).ceil() * k as f64;
    match method {
        Method::Cacg => smoothed_end(history, 1, tol).unwrap_or(reference.eq_iters),
        m if m.is_s_step() => smoothed_end(history, k, tol).unwrap_or_else(|| whole(k)),
        _ => reference.eq_iters,
    }
}

/// Where the reference's residuals, minimal-residual smoothed over the ends of blocks of
/// `k` iterations as the s-step methods smooth theirs (`cg/smoothing.rs`: the
/// smoothed norm is `(sum ||r_j||^-2)^-1/2` over the block ends `j` so far), first reach
/// `tol`: the iteration (a multiple of `k`), or `None` when they never do.
pub fn smoothed_end(history: &[f64], k: usize, tol: f64) -> Option<f64> {
    let k = k.max(1);
    let mut inv = 0.0f64;
    for m in (k..=history.len()).step_by(k) {
        let r = history[m - 1];
        if r.is_nan() {
            return None;
        }
        if r <= 0.0 {
            return Some(m as f64);
        }
        inv += (r * r).recip();
        if inv.sqrt().recip() <= tol {
            return Some(m as f64);
        }
    }
    None
}

/// The CG-equivalent iteration (1-based, fractional) at which `history` (entry `i` after
/// iteration `i + 1`) first reaches `v`, interpolated log-linearly between the entries
/// around it; `None` when it never does or `v` is not a positive number.
pub fn crossing(history: &[f64], v: f64) -> Option<f64> {
    if !(v > 0.0 && v.is_finite()) {
        return None;
    }
    let i = history.iter().position(|&h| h <= v)?;
    if i == 0 {
        return Some(1.0);
    }
    let (hi, lo) = (history[i - 1], history[i]);
    if !(lo > 0.0 && hi > lo) {
        return Some((i + 1) as f64);
    }
    let t = (hi.ln() - v.ln()) / (hi.ln() - lo.ln());
    Some(i as f64 + t)
}

/// A run's loop and setup counters, as a probe measured in full.
fn counters(r: &SolveReport) -> Probe {
    Probe {
        eq_iters: r.equivalent_iterations as f64,
        source: ProbeSource::Converged,
        lag: None,
        ran_eq_iters: r.equivalent_iterations,
        outer_iters: r.iterations,
        reductions: r.reductions,
        halo_exchanges: r.halo_exchanges,
        setup_reductions: r.setup_reductions,
        setup_halo_exchanges: r.setup_halo_exchanges,
    }
}

/// The probe of a run to the tolerance or the cap (`None`: infeasible, it did not reduce
/// the residual, or its true residual stagnated above the tolerance: nothing to
/// extrapolate from a run that no longer improves).
fn from_report(r: &SolveReport, tol: f64) -> Option<Probe> {
    let ran = r.equivalent_iterations;
    if r.converged {
        return Some(counters(r));
    }
    if r.stop_reason == StopReason::Stagnated {
        return None;
    }
    if r.relres_true > 0.0 && r.relres_true < 1.0 && ran > 0 {
        return Some(Probe {
            eq_iters: ran as f64 * tol.ln() / r.relres_true.ln(),
            source: ProbeSource::Extrapolated,
            ..counters(r)
        });
    }
    None
}

/// Run `method` (with `k`, `basis`) on `a` x = `b` with the probe settings for at most
/// `cap` CG-equivalent iterations, keeping the residual history when `history`. `Ok(None)`:
/// the candidate is infeasible (breakdown, or a right-hand side whose norm is not finite).
///
/// # Errors
/// [`PlanError::Probe`] for failures other than a breakdown (bad matrix, communication).
fn run(
    a: CsMatView<'_, f64>,
    b: &[f64],
    (method, k, basis): (Method, usize, Basis),
    opts: &ProbeOptions,
    cap: usize,
    history: bool,
) -> Result<Option<SolveReport>, PlanError> {
    let n = a.rows();
    let ranks = opts.ranks.clamp(1, n.max(1));
    let part = Partition::rows(n, ranks);
    let cfg = SolverConfig {
        method,
        k,
        depth: if method == Method::Plcg {
            k
        } else {
            castack_krylov::DEPTH
        },
        basis,
        tol: opts.tol,
        precond: opts.precond,
        max_iter: cap,
        history,
        ..SolverConfig::default()
    };
    let universe = ThreadUniverse::new(ranks).map_err(KrylovError::from)?;
    let outs = universe
        .run(|comm| -> Result<_, KrylovError> {
            let dist = DistCsr::from_global(comm, a, &part, SpmvMode::Halo)?;
            let range = part.range(comm.rank());
            let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
            Ok(solver.solve(&b[range], None)?.report)
        })
        .map_err(KrylovError::from)?;
    let mut report = None;
    for out in outs {
        match out {
            Ok(r) => {
                report.get_or_insert(r);
            }
            // A right-hand side whose norm is not finite.
            Err(KrylovError::Breakdown { .. }) => return Ok(None),
            Err(e) => return Err(PlanError::Probe(e)),
        }
    }
    let r = report.ok_or_else(|| PlanError::Probe(KrylovError::InvalidConfig("no rank".into())))?;
    // A method that breaks down on the matrix is infeasible, whatever it got to.
    if r.stop_reason == StopReason::Breakdown {
        return Ok(None);
    }
    Ok(Some(r))
}

/// Run one candidate to the tolerance as the `full` strategy does (no store, no
/// reference): `Ok(None)` where it is infeasible.
///
/// # Errors
/// [`PlanError::Probe`] for failures other than a breakdown.
pub fn probe(
    a: CsMatView<'_, f64>,
    b: &[f64],
    method: Method,
    k: usize,
    basis: Basis,
    opts: &ProbeOptions,
) -> Result<Option<Probe>, PlanError> {
    Ok(
        run(a, b, (method, k, basis), opts, opts.max_eq_iters, false)?
            .and_then(|r| from_report(&r, opts.tol)),
    )
}
