//! # castack-plan
//!
//! `krylov plan`'s engine: predict, for a matrix, rank counts and a fabric, the time of every (method, k,
//! basis, mpk) candidate and pick the fastest (`krylov plan`; CLI.md "plan").
//!
//! Prediction per rank count P = (compute + allreduce + halo) per CG-equivalent iteration x
//! expected CG-equivalent iterations + setup:
//!
//! - compute ([`cost`], [`graph`]): the ACTUAL row partition at P ranks (rows, nnz, ghosts,
//!   and for the matrix powers kernel the ghost-zone levels and their nonzeros, computed
//!   from the global graph) gives each rank's bytes and flops per outer iteration: SpMVs,
//!   vector updates and dots, Gram blocks (O(n k^2)), MPK's redundant rows; each kernel is
//!   priced by the fabric's device model ([`Fabric::work_time`]: the CPU's, or with
//!   `--device cuda` ([`PlanConfig::device`]) the GPU's with the host-device staging of every
//!   exchange and reduction, as `krylov solve --backend sim --device cuda` charges it; the
//!   model `--device-model` may swap in), and the slowest rank counts;
//! - communication ([`price`]): the real schedules priced without data on the fabric with
//!   one rank per fabric node (per device on a preset of several devices per node): the solver's allreduce of each reduction's payload, the naive
//!   two-sided halo exchange of the partition, MPK's depth-k exchange;
//! - iterations ([`probe`]): the real solver on a few thread ranks: `cg` to the
//!   tolerance, every other (method, k, basis) a short window compared with it, the k
//!   between an s-step method's ends interpolated where the ends agree (or each to the
//!   tolerance, `ProbeStrategy::Full`), once per (method, k, basis) within one plan and,
//!   through a [`probe::ProbeStore`], across plans.
//!
//! The rank counts are planned in parallel, and each prices its distinct allreduce payloads
//! and exchanges in parallel (rayon's global pool): the engine runs are independent and
//! deterministic, so the rows are those of a sequential plan (`tests/it/plan.rs`). The slowest
//! job measured, the depth-8 matrix-powers exchange of a 128 x 128 Poisson matrix at 4096
//! ranks on `tofu-fx10` (464 K puts), takes about 13 s to price on this project's machines.
//!
//! The device model, the schedules and the placement are the ones the `sim` backend
//! charges, and [`cost`] counts each method's kernels with the same formulas the kernels
//! meter themselves with ([`castack_krylov::work`]), so a modeled solve (`krylov solve
//! --backend sim`, whose `modeled_max_time_s` is the slowest rank's clock, the figure
//! predicted here) agrees up to the iteration estimate and the loop extras
//! (`tests/it/plan_vs_sim.rs`; `cargo xtask plan-validate` for the 64^3 table).
//!
//! Calls in flight together: a pipelined method's reduction and the exchange of the SpMV it
//! overlaps are priced in one joint run (`Fabric::price_concurrent`, as the `sim` backend
//! prices calls that overlap in modeled time), so each slows the other where they share
//! links and devices.
//!
//! Caches: each rank's kernels are priced at the cache level of the device model holding
//! the rank's working set ([`cost::working_set`]: matrix, vectors, matrix powers data; what
//! the solver itself counts, [`castack_krylov::Solver::held_bytes`]), at memory bandwidth on a model
//! without levels.
//!
//! Not modeled: the O(k^3) dense work of the block methods (unmetered by the sim too), and
//! the Gram dots of refreshes (their SpMVs and reductions are counted).
//!
//! ```
//! use castack_collectives::fabric_sim::{Fabric, MemoryKind};
//! use castack_collectives::AllreduceAlgo;
//! use castack_krylov::sparse::gen;
//! use castack_krylov::{Basis, Method};
//! use castack_plan::probe::ProbeOptions;
//! use castack_plan::{plan, Candidate, PlanConfig, DEFAULT_PRICE_LIMIT};
//!
//! let a = gen::poisson2d(12)?;
//! let b: Vec<f64> = a.outer_iterator().map(|r| r.data().iter().sum()).collect();
//! let cfg = PlanConfig {
//!     ranks: vec![4, 16],
//!     candidates: Candidate::grid(&[(Method::Cg, Basis::Chebyshev), (Method::Cbcgr, Basis::Chebyshev)], 2..=3, false),
//!     probe: ProbeOptions { ranks: 2, tol: 1e-8, ..ProbeOptions::default() },
//!     allreduce: AllreduceAlgo::default(),
//!     price_limit: DEFAULT_PRICE_LIMIT,
//!     device: MemoryKind::Host,
//! };
//! let rows = plan(a.view(), &b, &Fabric::preset("fx100")?, &cfg)?;
//! // cg and cbcgr at k = 2 and 3, at each rank count; one recommendation per rank count.
//! assert_eq!(rows.len(), 2 * 3);
//! for p in [4, 16] {
//!     let at_p: Vec<_> = rows.iter().filter(|r| r.ranks == p).collect();
//!     assert_eq!(at_p.iter().filter(|r| r.recommended).count(), 1);
//!     assert!(at_p.iter().all(|r| r.predicted_total_s.is_some_and(|t| t > 0.0)));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cost;
pub mod graph;
pub mod price;
pub mod probe;

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

use castack_collectives::fabric_sim::{ComputeCost, Fabric, FabricError, MemoryKind};
use castack_collectives::{AllreduceAlgo, ComputeWork, SimError};
use rayon::prelude::*;
use serde::Serialize;
use sprs::CsMatView;

use castack_krylov::work;
use castack_krylov::KrylovError;
use castack_krylov::Method;
use castack_krylov::Partition;
use castack_krylov::{Basis, K_MAX};

use cost::{add, basis_step, kernels_work, mpk_build_copies, outer_step, times, HaloUse};
use graph::{rank_graphs, RankGraph};
use probe::{Probe, ProbeOptions, Probes};

/// JSON schema version of [`PlanRow`] (2: the communication terms are `null` on a row
/// that was not priced, and `unpriced` says why).
pub const SCHEMA_VERSION: u32 = 2;

/// The default work limit of one pricing run ([`PlanConfig::price_limit`], CLI
/// `--price-limit`), in flow rate updates of the fabric engine
/// ([`castack_collectives::fabric_sim::Engine::rate_updates`]): at most about 4 s of
/// pricing on this project's 2-core machine, which does 2.1-2.3 M updates a second
/// re-rating whole components (and about 4 times as many where it re-rates only the flows
/// an end can change).
///
/// The exact fluid model re-rates, at each distinct instant, the flows in flight that the
/// instant's starts and ends can change: those at least as fast as the slowest that ended
/// and as the level at which a start's resources would saturate. So an exchange whose many
/// messages start together and end in waves costs about its messages times their
/// resources' loads, while one whose messages run at one common rate and start and end at
/// many different instants (DMA queues starting the next message at each end:
/// `tofu-fx10`, `fx100`) still costs about the product of its messages and instants. Measured here (`ito`, 2026-11-29, messages
/// counted with their zero-byte receive-address notices): the depth-3 exchange of 64^3
/// Poisson on 4,096 ranks (189,480 messages) is 0.13 M updates (3.1 M when every instant
/// re-rated whole components), its depth-8 one (1,076,880) 5.3 M and about 2.4 s; the
/// depth-4 exchange of a 494-row power network on 256 ranks (18,676) 0.61 M (5.6 M), its
/// depth-6 one (42,856) 2.5 M (19.8 M). So every default candidate of the 64^3 problem is
/// priced at 4,096 ranks of `ito` (about 20 s for the whole plan), and every communication
/// of the 128^3 study problem at 16 and 128 ranks is far below the limit.
pub const DEFAULT_PRICE_LIMIT: u64 = 8_000_000;

/// The pipeline depths of `plcg` a plan prices (in a candidate's `k`): 1 to 4. Each
/// candidate's probe counts its own iterations on the problem, so a depth whose pipeline
/// breaks down and restarts is priced with the iterations it takes; the family sweep
/// (`cg/README.md`) finds depth 1 within cg's iterations on 55 of 56 runs, 2 and 3 on 43
/// and 41, and depths 5 and 8 at 2 and 4.7 times cg's iterations, so they are left out.
pub const PLCG_DEPTHS: std::ops::RangeInclusive<usize> = 1..=4;

/// What can go wrong planning.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// No rank counts.
    #[error("no rank counts given (--ranks P[,P...])")]
    NoRanks,
    /// A rank count of 0.
    #[error("a rank count must be at least 1 (got 0)")]
    ZeroRanks,
    /// k outside `1..=K_MAX`.
    #[error("k = {k} is outside the allowed range 1..={K_MAX}")]
    KOutOfRange {
        /// The offending k.
        k: usize,
    },
    /// Probe thread ranks outside `1..=MAX_PROBE_RANKS`.
    #[error(
        "{ranks} probe ranks are outside 1..={max}: the instrumented runs measure iteration \
         counts on thread ranks of this machine, which hardly depend on the rank count"
    )]
    ProbeRanks {
        /// The rank count asked for.
        ranks: usize,
        /// [`MAX_PROBE_RANKS`].
        max: usize,
    },
    /// No candidate to plan.
    #[error("no candidate methods to plan")]
    NoCandidates,
    /// No candidate meets the tolerance, and a probe run's true residual stagnated above
    /// it: the tolerance is below what double precision attains for the system.
    #[error(
        "no candidate can meet tol {tol:e}: the probe runs' true residual stopped \
         decreasing at relres_true {reached:.3e}, so the tolerance is below what double \
         precision attains for this system; plan with a --tol above that"
    )]
    Unattainable {
        /// The tolerance asked for.
        tol: f64,
        /// The least true relative residual a stagnated probe run reached.
        reached: f64,
    },
    /// A loop preconditioner, whose work the cost model does not price.
    #[error(
        "precond {0} is applied in the loop, which the plan's cost model does not price yet; \
         plan with a scaling (none or jacobi)"
    )]
    UnpricedPrecond(&'static str),
    /// The right-hand side does not match the matrix.
    #[error("right-hand side has {got} entries, the matrix has {n} rows")]
    RhsLength {
        /// Entries given.
        got: usize,
        /// Matrix rows.
        n: usize,
    },
    /// `--device cuda` on a fabric without a GPU device model.
    #[error(
        "fabric `{fabric}` has no GPU device model ([compute.gpu]), which --device cuda \
         prices compute with; plan it with --device cpu, or on a preset with one ({with})"
    )]
    NoGpuModel {
        /// The fabric's name.
        fabric: String,
        /// The presets that have one.
        with: String,
    },
    /// A rank count the fabric cannot hold, or another simulated-universe error.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The fabric model rejected something (no device model, bad schedule).
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// An instrumented run failed (other than a breakdown, which marks the candidate
    /// infeasible).
    #[error("instrumented run: {0}")]
    Probe(#[from] KrylovError),
    /// A communication was not priced: its engine run passed [`PlanConfig::price_limit`],
    /// or a communication it contains did. Rows that need it are reported unpriced
    /// ([`PlanRow::unpriced`]); [`outer_cost_at`] returns it.
    #[error("{0}")]
    OverPriceLimit(String),
}

/// One candidate: a method with its block size / s, basis and matrix powers choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The method.
    pub method: Method,
    /// Block size / s (1 for the single-vector methods).
    pub k: usize,
    /// Basis of the s-step methods.
    pub basis: Basis,
    /// Matrix powers kernel (s-step methods only).
    pub mpk: bool,
}

impl Candidate {
    /// Every candidate for `methods` x k in `ks` x (mpk off, and on when `with_mpk`): one
    /// per single-vector method, one per k (and mpk) per s-step method, in the given order.
    pub fn grid(
        methods: &[(Method, Basis)],
        ks: std::ops::RangeInclusive<usize>,
        with_mpk: bool,
    ) -> Vec<Candidate> {
        let mut out = Vec::new();
        for &(method, basis) in methods {
            if method == Method::Plcg {
                // The pipeline depth in `k`: the depths the family sweep finds within
                // cg's iterations (`cg/plcg.rs`), whatever the s-step range.
                for k in PLCG_DEPTHS {
                    out.push(Candidate {
                        method,
                        k,
                        basis,
                        mpk: false,
                    });
                }
                continue;
            }
            if !method.is_s_step() {
                out.push(Candidate {
                    method,
                    k: 1,
                    basis,
                    mpk: false,
                });
                continue;
            }
            for k in ks.clone() {
                for mpk in [false, true] {
                    if mpk && !with_mpk {
                        continue;
                    }
                    out.push(Candidate {
                        method,
                        k,
                        basis,
                        mpk,
                    });
                }
            }
        }
        out
    }
}

/// Settings of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanConfig {
    /// Rank counts to plan for.
    pub ranks: Vec<usize>,
    /// Candidates.
    pub candidates: Vec<Candidate>,
    /// The instrumented runs.
    pub probe: ProbeOptions,
    /// The solvers' allreduce algorithm (must be bit-identical).
    pub allreduce: AllreduceAlgo,
    /// Work limit of each pricing run, in flow rate updates ([`DEFAULT_PRICE_LIMIT`]): a
    /// communication whose pricing passes it is not priced, and the rows that need it are
    /// reported unpriced.
    pub price_limit: u64,
    /// The device the ranks compute on: [`MemoryKind::Host`], the fabric's CPU model
    /// (`[compute.host]`); [`MemoryKind::Gpu`], its GPU model (`[compute.gpu]`) with the
    /// host-device staging of every exchange and reduction (`krylov plan --device cuda`,
    /// as `krylov solve --backend sim --device cuda` charges it). Messages travel from host
    /// buffers either way.
    pub device: MemoryKind,
}

/// One row of a plan (CLI.md "plan"): times in seconds per CG-equivalent iteration except
/// `predicted_total_s` and `setup_s`. `None` (JSON null) where the candidate is infeasible
/// (its instrumented run broke down or did not reduce the residual) or, for the
/// communication terms, where it was not priced (`unpriced`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRow {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Rank count P.
    pub ranks: usize,
    /// Method name.
    pub method: String,
    /// Block size / s (s-step methods).
    pub k: Option<usize>,
    /// Basis name (s-step methods).
    pub basis: Option<String>,
    /// Pipeline depth (plcg), else `None`.
    pub depth: Option<usize>,
    /// Matrix powers kernel.
    pub mpk: bool,
    /// CG-equivalent iterations expected to the tolerance.
    pub predicted_eq_iterations: Option<f64>,
    /// compute_s + allreduce_s + halo_s (`None`: not priced).
    pub predicted_s_per_eq_iter: Option<f64>,
    /// Slowest rank's compute per CG-equivalent iteration.
    pub compute_s: f64,
    /// Allreduce time per CG-equivalent iteration (pipecg: the part not hidden behind
    /// the SpMV; `None`: not priced).
    pub allreduce_s: Option<f64>,
    /// Halo (or matrix powers) exchange time per CG-equivalent iteration (`None`: not
    /// priced).
    pub halo_s: Option<f64>,
    /// Setup (initial norms, spectral estimate) and the loop's work beyond its outer steps
    /// (first Gram matrix, refreshes, final true-residual check), from the probe's
    /// counters, each reduction and SpMV with its exchange priced alike.
    pub setup_s: Option<f64>,
    /// predicted_s_per_eq_iter x predicted_eq_iterations + setup_s.
    pub predicted_total_s: Option<f64>,
    /// Whether the instrumented run converged within its cap (else extrapolated, tracked
    /// or interpolated).
    pub probe_converged: Option<bool>,
    /// Where `predicted_eq_iterations` comes from: `converged` (a run to the tolerance),
    /// `extrapolated` (a run capped at `--probe-max-iter`), `tracked` (a window compared
    /// with the `cg` reference), `interpolated` (an s-step k between two tracked ones;
    /// [`probe`]).
    pub probe_source: Option<String>,
    /// Why the communication was not priced (`None`: it was): the exchange or allreduce
    /// whose pricing passed the work limit ([`PlanConfig::price_limit`]), the one the
    /// row's communication contains when not its own.
    pub unpriced: Option<String>,
    /// The best row for this rank count.
    pub recommended: bool,
}

/// Per-rank-count caches of priced communication.
struct Priced<'a> {
    universe: castack_collectives::SimUniverse,
    graphs: &'a [RankGraph],
    /// The device the ranks compute on (staging is priced on a GPU only).
    device: MemoryKind,
    algo: AllreduceAlgo,
    /// Rate updates per engine run.
    limit: u64,
    /// Jobs priced: (allreduce or exchange seconds, the same; an overlapped pair: the
    /// allreduce's, the exchange's).
    done: HashMap<Job, (f64, f64)>,
    /// Jobs not priced, with the reason.
    refused: HashMap<Job, String>,
}

/// One pricing job of a rank count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Job {
    /// An allreduce of this many doubles.
    Allreduce(usize),
    /// An exchange of ghost levels `1..=depth` carrying this many vectors.
    Exchange(usize, usize),
    /// An allreduce of this many doubles in flight with such an exchange.
    Overlapped(usize, usize, usize),
}

/// The distinct pricing jobs of `candidates` at one rank count, with the setup's (an
/// allreduce of 2 values and a depth-1 exchange): overlapped (allreduce, exchange) pairs and
/// exchanges deepest (slowest to price) first, then allreduces by payload.
fn pricing_jobs(candidates: &[Candidate]) -> Vec<Job> {
    let mut exchanges = std::collections::BTreeSet::from([(Reverse(1), 1)]);
    let mut allreduces = std::collections::BTreeSet::from([2]);
    let mut overlapped = std::collections::BTreeSet::new();
    for c in candidates {
        let step = outer_step(c.method, c.k, c.mpk);
        let (d, v) = step.halo.exchange();
        exchanges.insert((Reverse(d), v));
        match (step.overlapped, &step.reductions[..]) {
            (true, &[ref blocking @ .., r]) => {
                overlapped.insert((Reverse(d), v, r));
                allreduces.extend(blocking);
            }
            _ => allreduces.extend(step.reductions),
        }
    }
    overlapped
        .into_iter()
        .map(|(Reverse(d), v, r)| Job::Overlapped(r, d, v))
        .chain(
            exchanges
                .into_iter()
                .map(|(Reverse(d), v)| Job::Exchange(d, v)),
        )
        .chain(allreduces.into_iter().map(Job::Allreduce))
        .collect()
}

impl Job {
    /// Depth of its exchange (0: none).
    fn depth(self) -> usize {
        match self {
            Job::Allreduce(_) => 0,
            Job::Exchange(d, _) | Job::Overlapped(_, d, _) => d,
        }
    }

    /// What it prices, for messages.
    fn describe(self) -> String {
        let exchange = |d: usize, v: usize| {
            format!(
                "depth-{d} exchange of {v} vector{}",
                if v == 1 { "" } else { "s" }
            )
        };
        match self {
            Job::Allreduce(v) => format!("allreduce of {v} values"),
            Job::Exchange(d, v) => exchange(d, v),
            Job::Overlapped(r, d, v) => {
                format!(
                    "allreduce of {r} values in flight with the {}",
                    exchange(d, v)
                )
            }
        }
    }
}

/// Whether `e` is a pricing run stopped at its work limit.
fn is_work_limit(e: &PlanError) -> bool {
    matches!(
        e,
        PlanError::Sim(SimError::Fabric(FabricError::WorkLimit { .. }))
            | PlanError::Fabric(FabricError::WorkLimit { .. })
    )
}

impl Priced<'_> {
    /// Price `job` (no cache).
    fn run(&self, job: Job) -> Result<(f64, f64), PlanError> {
        let (u, graphs, algo, limit) = (&self.universe, self.graphs, self.algo, self.limit);
        match job {
            Job::Allreduce(v) => price::allreduce_s(u, algo, v, limit).map(|t| (t, t)),
            Job::Exchange(d, v) => price::exchange_s(u, graphs, d, v, limit).map(|t| (t, t)),
            Job::Overlapped(r, d, v) => price::overlapped_s(u, algo, r, graphs, d, v, limit),
        }
    }

    /// Keep the outcome of pricing `job`: its times, or its refusal when the run passed
    /// the work limit; other errors are returned.
    fn keep(&mut self, job: Job, t: Result<(f64, f64), PlanError>) -> Result<(), PlanError> {
        match t {
            Ok(t) => {
                self.done.insert(job, t);
            }
            Err(e) if is_work_limit(&e) => {
                let why = format!(
                    "pricing the {} at P = {} passed the work limit of {} flow rate updates",
                    job.describe(),
                    self.universe.size(),
                    self.limit
                );
                self.refused.insert(job, why);
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// The reason of a refused exchange that `job`'s exchange contains (ghost levels
    /// `1..=d0` of `v0` vectors are part of levels `1..=d` of `v >= v0` vectors: the same
    /// sender-receiver pairs and more, each message at least as long). Such a job is
    /// refused without running, for that reason: its engine run holds those transfers and
    /// more, by the measurements of [`DEFAULT_PRICE_LIMIT`] at least that work.
    fn contains_refused(&self, job: Job) -> Option<String> {
        let (d, v) = match job {
            Job::Allreduce(_) => return None,
            Job::Exchange(d, v) | Job::Overlapped(_, d, v) => (d, v),
        };
        self.refused
            .iter()
            .filter_map(|(j, why)| match *j {
                Job::Exchange(d0, v0) if d0 <= d && v0 <= v && *j != job => Some(((d0, v0), why)),
                _ => None,
            })
            .min_by_key(|x| x.0)
            .map(|(_, why)| why.clone())
    }

    /// Price `jobs` in parallel into the cache, calling `tick` as each finishes: each is
    /// an independent, deterministic run of the engine, so the results are those of
    /// pricing them one by one. Waves by exchange depth (allreduces with depth 1), so that
    /// a job containing a refused exchange is refused without running
    /// ([`Priced::contains_refused`]).
    fn prefetch(&mut self, jobs: &[Job], tick: &(dyn Fn() + Sync)) -> Result<(), PlanError> {
        let deepest = jobs.iter().map(|j| j.depth().max(1)).max().unwrap_or(1);
        for depth in 1..=deepest {
            let mut wave = Vec::new();
            for &job in jobs.iter().filter(|j| j.depth().max(1) == depth) {
                match self.contains_refused(job) {
                    Some(why) => {
                        self.refused.insert(job, why);
                        tick();
                    }
                    None => wave.push(job),
                }
            }
            let this = &*self;
            let priced: Vec<Result<(f64, f64), PlanError>> = wave
                .par_iter()
                .map(|&job| {
                    let t = this.run(job);
                    tick();
                    t
                })
                .collect();
            for (job, t) in wave.into_iter().zip(priced) {
                self.keep(job, t)?;
            }
        }
        Ok(())
    }

    /// The times of `job`, priced now if not yet; [`PlanError::OverPriceLimit`] when it was
    /// refused.
    fn get(&mut self, job: Job) -> Result<(f64, f64), PlanError> {
        if let Some(&t) = self.done.get(&job) {
            return Ok(t);
        }
        if !self.refused.contains_key(&job) {
            match self.contains_refused(job) {
                Some(why) => {
                    self.refused.insert(job, why);
                }
                None => {
                    let t = self.run(job);
                    self.keep(job, t)?;
                    if let Some(&t) = self.done.get(&job) {
                        return Ok(t);
                    }
                }
            }
        }
        Err(PlanError::OverPriceLimit(
            self.refused.get(&job).cloned().unwrap_or_default(),
        ))
    }

    /// An allreduce of `values` doubles and an exchange `(depth, vectors)` in flight
    /// together: (allreduce seconds, exchange seconds).
    fn overlapped(
        &mut self,
        values: usize,
        depth: usize,
        vectors: usize,
    ) -> Result<(f64, f64), PlanError> {
        self.get(Job::Overlapped(values, depth, vectors))
    }

    fn allreduce(&mut self, values: usize) -> Result<f64, PlanError> {
        Ok(self.get(Job::Allreduce(values))?.0)
    }

    /// The slowest rank's host-device staging of one exchange of ghost levels
    /// `1..=depth` carrying `vectors` vectors, for candidate `c`'s working set
    /// ([`cost::exchange_staging`]): 0 on the CPU, whose packing the plan leaves out.
    fn exchange_staging(
        &self,
        c: &Candidate,
        depth: usize,
        vectors: usize,
    ) -> Result<f64, PlanError> {
        if self.device == MemoryKind::Host {
            return Ok(0.0);
        }
        let sends = graph::send_counts(self.graphs, depth);
        let mut worst = 0.0f64;
        for (g, &out) in self.graphs.iter().zip(&sends) {
            let into: usize = g.recvs(depth).iter().map(|x| x.1).sum();
            let w = cost::exchange_staging(vectors * out, vectors * into, depth > 1);
            let ws = cost::working_set(c.method, c.k, c.mpk, g);
            worst = worst.max(work_time(self.universe.fabric(), self.device, w, ws)?);
        }
        Ok(worst)
    }

    /// The host-device staging of one reduction of `values` values (the copy of the local
    /// results to the host; [`work::transfer`]): 0 on the CPU.
    fn reduction_staging(&self, values: usize) -> Result<f64, PlanError> {
        if self.device == MemoryKind::Host || values == 0 {
            return Ok(0.0);
        }
        work_time(
            self.universe.fabric(),
            self.device,
            work::transfer(values),
            0,
        )
    }

    fn exchange(&mut self, depth: usize, vectors: usize) -> Result<f64, PlanError> {
        Ok(self.get(Job::Exchange(depth, vectors))?.0)
    }
}

/// The predicted per-outer-iteration cost of one candidate at one rank count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OuterCost {
    /// CG-equivalent iterations per outer iteration.
    pub eq: usize,
    /// Slowest rank's compute (seconds per outer iteration).
    pub compute_s: f64,
    /// Slowest rank's SpMV compute (the part a pipelined reduction hides behind).
    pub spmv_s: f64,
    /// Allreduce seconds per outer iteration (visible part).
    pub allreduce_s: f64,
    /// Exchange seconds per outer iteration.
    pub halo_s: f64,
}

/// Seconds of metered work `w` in a working set of `ws` bytes on the device that owns
/// `device` memory, its host-device copies included ([`Fabric::work_time`], what the `sim`
/// backend advances a rank's clock by).
fn work_time(
    fabric: &Fabric,
    device: MemoryKind,
    w: ComputeWork,
    ws: u64,
) -> Result<f64, PlanError> {
    Ok(fabric.work_time(device, cost::cost(w, ws), w.transfers, w.transfer_bytes)?)
}

/// A rank's compute for one outer iteration of `c` on the device that owns `device`
/// memory: (total, SpMV part), the kernels' work summed with the
/// [`castack_krylov::work`] formulas the `sim` backend charges and priced by the device
/// model (the SpMVs with their basis recurrence steps as one piece, the vector kernels as
/// another: all memory-bound, so this equals the per-kernel sum).
pub fn rank_compute(
    fabric: &Fabric,
    device: MemoryKind,
    g: &RankGraph,
    c: &Candidate,
) -> Result<(f64, f64), FabricError> {
    let step = outer_step(c.method, c.k, c.mpk);
    let ws = cost::working_set(c.method, c.k, c.mpk, g);
    let t = |w: ComputeWork| fabric.compute_time(device, cost::cost(w, ws));
    let rows = g.rows();
    let mut spmv = ComputeWork::default();
    match &step.halo {
        HaloUse::Depth1 { count } => {
            let input = rows + g.ghosts();
            let one = if step.spmv_dot {
                work::spmv_dot(rows, g.nnz(), input)
            } else {
                work::spmv(rows, g.nnz(), input)
            };
            spmv = times(one, *count);
            for &b in &step.builds {
                for j in 0..b {
                    spmv = add(spmv, basis_step(c.basis, j, rows));
                }
            }
        }
        HaloUse::Mpk { depth, builds, .. } => {
            // The work vectors hold the ghost zone of the plan's depth.
            let input = g.rows_through(*depth);
            for &b in builds {
                spmv = add(spmv, mpk_build_copies(b, rows));
                for j in 0..b {
                    let lvl = b - 1 - j;
                    let (r, z) = (g.rows_through(lvl), g.nnz_through(lvl));
                    spmv = add(spmv, work::spmv(r, z, input));
                    spmv = add(spmv, basis_step(c.basis, j, r));
                }
            }
        }
    }
    let other = kernels_work(&step.kernels, rows);
    let spmv = t(spmv)?;
    Ok((spmv + t(other)?, spmv))
}

fn outer_cost(
    fabric: &Fabric,
    priced: &mut Priced<'_>,
    c: &Candidate,
) -> Result<OuterCost, PlanError> {
    let (compute, spmv) = slowest_compute(fabric, priced.device, priced.graphs, c)?;
    let (allreduce, halo) = communication(priced, c, spmv)?;
    Ok(OuterCost {
        eq: outer_step(c.method, c.k, c.mpk).eq,
        compute_s: compute,
        spmv_s: spmv,
        allreduce_s: allreduce,
        halo_s: halo,
    })
}

/// The slowest rank's compute of one outer iteration of `c`: (total, SpMV part).
fn slowest_compute(
    fabric: &Fabric,
    device: MemoryKind,
    graphs: &[RankGraph],
    c: &Candidate,
) -> Result<(f64, f64), PlanError> {
    let (mut compute, mut spmv) = (0.0f64, 0.0f64);
    for g in graphs {
        let (all, sp) = rank_compute(fabric, device, g, c)?;
        compute = compute.max(all);
        spmv = spmv.max(sp);
    }
    Ok((compute, spmv))
}

/// The communication of one outer iteration of `c`, `spmv` its slowest SpMV compute:
/// (visible allreduce seconds, exchange seconds).
fn communication(
    priced: &mut Priced<'_>,
    c: &Candidate,
    spmv: f64,
) -> Result<(f64, f64), PlanError> {
    let step = outer_step(c.method, c.k, c.mpk);
    let (depth, vectors) = step.halo.exchange();
    let count = match &step.halo {
        HaloUse::Depth1 { count } => *count,
        HaloUse::Mpk { .. } => 1,
    };
    // On a GPU every exchange is packed and copied out and in, and every reduction's local
    // results copied to the host first, on the rank's clock (0 on the CPU).
    let staging = priced.exchange_staging(c, depth, vectors)?;
    let (halo, allreduce) = match (step.overlapped, &step.reductions[..]) {
        (true, &[ref blocking @ .., values]) => {
            // The last reduction is started before the SpMV and its exchange, waited for
            // after them; priced in flight with that exchange (the method's other
            // exchanges, if any, alone). The copy of the local results comes before the
            // start: never hidden. The reductions before it block (groppcg's first).
            let (reduce, joint) = priced.overlapped(values, depth, vectors)?;
            let rest = count.saturating_sub(1) as f64 * priced.exchange(depth, vectors)?;
            let halo = joint + rest + count as f64 * staging;
            // A reduction in flight for l iterations (plcg: l of them at once, one begun
            // and one finished per iteration) needs l iterations to last as long as it:
            // in the steady state an iteration takes max(its work, reduction / l), so
            // what each one waits is (reduction - l x its SpMV and exchange) / l. The
            // sim's modeled p(l)-CG at 4,096 ranks of ito (64^3) agrees within 0.2 us per
            // iteration at l = 1..4 (issue 49); before, the whole excess was charged to
            // every iteration (l = 2: 10.4 us against the sim's 6.8).
            let l = step.pipeline.max(1) as f64;
            let hidden = l * (spmv + joint + staging);
            let mut allreduce =
                ((reduce - hidden) / l).max(0.0) + priced.reduction_staging(values)?;
            for &v in blocking {
                allreduce += priced.allreduce(v)? + priced.reduction_staging(v)?;
            }
            (halo, allreduce)
        }
        _ => {
            let halo = count as f64 * (priced.exchange(depth, vectors)? + staging);
            let mut allreduce = 0.0;
            for &v in &step.reductions {
                allreduce += priced.allreduce(v)? + priced.reduction_staging(v)?;
            }
            (halo, allreduce)
        }
    };
    Ok((allreduce, halo))
}

/// Check the settings and that every rank count fits the fabric (one rank per fabric node:
/// per device where a machine holds several, `[intra_node]`).
///
/// # Errors
/// [`PlanError`] naming the first problem.
pub fn validate(fabric: &Fabric, cfg: &PlanConfig) -> Result<(), PlanError> {
    if cfg.ranks.is_empty() {
        return Err(PlanError::NoRanks);
    }
    if cfg.candidates.is_empty() {
        return Err(PlanError::NoCandidates);
    }
    if cfg.probe.precond.applies() {
        return Err(PlanError::UnpricedPrecond(cfg.probe.precond.name()));
    }
    if let Some(c) = cfg.candidates.iter().find(|c| c.k == 0 || c.k > K_MAX) {
        return Err(PlanError::KOutOfRange { k: c.k });
    }
    if !(1..=MAX_PROBE_RANKS).contains(&cfg.probe.ranks) {
        return Err(PlanError::ProbeRanks {
            ranks: cfg.probe.ranks,
            max: MAX_PROBE_RANKS,
        });
    }
    for &p in &cfg.ranks {
        if p == 0 {
            return Err(PlanError::ZeroRanks);
        }
        price::universe(fabric, p)?;
    }
    if cfg.device == MemoryKind::Gpu && fabric.device_model(MemoryKind::Gpu).is_none() {
        return Err(PlanError::NoGpuModel {
            fabric: fabric.config().name.clone(),
            with: gpu_presets(),
        });
    }
    // The device model, and on a GPU its host link (staging is priced by it).
    fabric.work_time(
        cfg.device,
        ComputeCost::default(),
        u32::from(cfg.device == MemoryKind::Gpu),
        0,
    )?;
    Ok(())
}

/// The embedded presets with a GPU device model, comma-separated.
fn gpu_presets() -> String {
    castack_collectives::fabric_sim::PRESETS
        .iter()
        .filter(|(name, _)| {
            castack_collectives::fabric_sim::FabricConfig::preset(name)
                .is_ok_and(|c| c.compute.is_some_and(|c| c.gpu.is_some()))
        })
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The most thread ranks an instrumented run ([`probe`]) may use: iteration counts hardly
/// depend on the rank count (only through the reductions' summation order), while every
/// probe runs all its ranks on this machine's cores, so more ranks only oversubscribe them
/// (`--probe-ranks 685` on 2 cores took minutes where 2 ranks take a second). 64 is a
/// documented choice: room for a node's worth of cores.
pub const MAX_PROBE_RANKS: usize = 64;

/// Plan `a x = b` on `fabric`: one row per (rank count, candidate), the fastest feasible
/// row of each rank count marked `recommended`.
///
/// # Errors
/// [`PlanError`] for bad settings, a rank count the fabric cannot hold, a fabric without a
/// host device model, or an instrumented run that fails other than by breakdown.
pub fn plan(
    a: CsMatView<'_, f64>,
    b: &[f64],
    fabric: &Fabric,
    cfg: &PlanConfig,
) -> Result<Vec<PlanRow>, PlanError> {
    plan_with_progress(a, b, fabric, cfg, &|_, _| {})
}

/// [`plan`], calling `progress(done, total)` each time one of its `total` units of work
/// (an instrumented run, a pricing job of a rank count) is done; `done` counts up to
/// `total` (from several threads: the calls may come in any order, each with a distinct
/// `done`).
///
/// # Errors
/// As [`plan`].
pub fn plan_with_progress(
    a: CsMatView<'_, f64>,
    b: &[f64],
    fabric: &Fabric,
    cfg: &PlanConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<PlanRow>, PlanError> {
    plan_stored(a, b, fabric, cfg, None, progress)
}

/// [`plan_with_progress`], the instrumented runs looked up in and kept in `store` when
/// given ([`probe::ProbeStore`]: a second plan of the same matrix with the same probe
/// settings runs no solver).
///
/// # Errors
/// As [`plan`].
pub fn plan_stored(
    a: CsMatView<'_, f64>,
    b: &[f64],
    fabric: &Fabric,
    cfg: &PlanConfig,
    store: Option<&dyn probe::ProbeStore>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<PlanRow>, PlanError> {
    validate(fabric, cfg)?;
    let n = a.rows();
    if b.len() != n {
        return Err(PlanError::RhsLength { got: b.len(), n });
    }
    let jobs = pricing_jobs(&cfg.candidates);
    let total = work_units(cfg);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let tick = || progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
    // Instrumented runs, once per (method, k, basis).
    let keys: Vec<_> = cfg
        .candidates
        .iter()
        .map(|c| (c.method, c.k, c.basis))
        .collect();
    let probes = probe::probe_all(a, b, &keys, &cfg.probe, store, &tick)?;
    let depth = cfg
        .candidates
        .iter()
        .filter(|c| c.mpk)
        .map(|c| c.k)
        .max()
        .unwrap_or(1)
        .max(1);
    // Rank counts in parallel, each pricing its communication in parallel too; rows and
    // the first error in the given order of rank counts.
    let per_rank: Vec<Result<Vec<PlanRow>, PlanError>> = cfg
        .ranks
        .par_iter()
        .map(|&p| rows_at(a, fabric, cfg, (&probes, &jobs), depth, p, &tick))
        .collect();
    let mut rows = Vec::new();
    for r in per_rank {
        rows.extend(r?);
    }
    Ok(rows)
}

/// The units of work of a plan with `cfg` (the `total` that [`plan_with_progress`] reports):
/// one instrumented run per distinct (method, k, basis), and per rank count one pricing job
/// per distinct allreduce payload and exchange.
pub fn work_units(cfg: &PlanConfig) -> usize {
    let probes: std::collections::HashSet<_> = cfg
        .candidates
        .iter()
        .map(|c| (c.method, c.k, c.basis.name()))
        .collect();
    probes.len() + cfg.ranks.len() * pricing_jobs(&cfg.candidates).len()
}

/// Setup of candidate `c` with instrumented run `pr` (initial norms, spectral estimate,
/// and the loop's work beyond its outer steps: first Gram matrix, refreshes, the final
/// true-residual check), each reduction and SpMV with its exchange priced alike.
fn setup_s(
    fabric: &Fabric,
    priced: &mut Priced<'_>,
    c: &Candidate,
    pr: &Probe,
) -> Result<f64, PlanError> {
    let spmv = priced
        .graphs
        .iter()
        .map(|g| {
            fabric.compute_time(
                priced.device,
                cost::cost(
                    work::spmv(g.rows(), g.nnz(), g.rows() + g.ghosts()),
                    cost::working_set(c.method, c.k, c.mpk, g),
                ),
            )
        })
        .try_fold(0.0f64, |m, t| t.map(|t| m.max(t)))?;
    // Loop work beyond the outer steps: the probe's loop counters less what its outer
    // steps issued (the probe runs the depth-1 path).
    let (extra_reds, extra_halo) = cost::loop_extras(
        c.method,
        c.k,
        pr.outer_iters,
        pr.reductions,
        pr.halo_exchanges,
    );
    let (reds, halos) = (
        pr.setup_reductions + extra_reds,
        pr.setup_halo_exchanges + extra_halo,
    );
    let reduce = priced.allreduce(2)? + priced.reduction_staging(2)?;
    let exchange = priced.exchange(1, 1)? + priced.exchange_staging(c, 1, 1)?;
    Ok(reds as f64 * reduce + halos as f64 * (exchange + spmv))
}

/// The rows of rank count `p` (the fastest feasible one marked `recommended`), with ghost
/// levels up to `depth` in the rank graphs, after pricing `jobs` (calling `tick` for each).
fn rows_at(
    a: CsMatView<'_, f64>,
    fabric: &Fabric,
    cfg: &PlanConfig,
    (probes, jobs): (&Probes, &[Job]),
    depth: usize,
    p: usize,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<PlanRow>, PlanError> {
    let part = Partition::rows(a.rows(), p);
    let graphs = rank_graphs(a, &part, depth);
    let mut priced = Priced {
        universe: price::universe(fabric, p)?,
        graphs: &graphs,
        device: cfg.device,
        algo: cfg.allreduce,
        limit: cfg.price_limit,
        done: HashMap::new(),
        refused: HashMap::new(),
    };
    priced.prefetch(jobs, tick)?;
    let mut rows = Vec::with_capacity(cfg.candidates.len());
    for c in &cfg.candidates {
        let (compute, spmv) = slowest_compute(fabric, cfg.device, &graphs, c)?;
        let eq = outer_step(c.method, c.k, c.mpk).eq as f64;
        let probe = probes
            .get(&(c.method, c.k, c.basis.name()))
            .cloned()
            .flatten();
        // A communication refused by the work limit leaves the row unpriced.
        let mut priced_terms = || -> Result<_, PlanError> {
            let comm = communication(&mut priced, c, spmv)?;
            let setup = match &probe {
                Some(pr) => Some(setup_s(fabric, &mut priced, c, pr)?),
                None => None,
            };
            Ok((comm, setup))
        };
        let (comm, setup, unpriced) = match priced_terms() {
            Ok((comm, setup)) => (Some(comm), setup, None),
            Err(PlanError::OverPriceLimit(why)) => (None, None, Some(why)),
            Err(e) => return Err(e),
        };
        let per = comm.map(|(allreduce, halo)| (compute + allreduce + halo) / eq);
        let s_step = c.method.is_s_step();
        rows.push(PlanRow {
            schema_version: SCHEMA_VERSION,
            ranks: p,
            method: c.method.name().to_string(),
            k: s_step.then_some(c.k),
            depth: (c.method == Method::Plcg).then_some(c.k),
            basis: s_step.then(|| c.basis.name().to_string()),
            mpk: c.mpk,
            predicted_eq_iterations: probe.as_ref().map(|pr| pr.eq_iters),
            predicted_s_per_eq_iter: per,
            compute_s: compute / eq,
            allreduce_s: comm.map(|(allreduce, _)| allreduce / eq),
            halo_s: comm.map(|(_, halo)| halo / eq),
            setup_s: setup,
            predicted_total_s: probe
                .as_ref()
                .zip(setup)
                .zip(per)
                .map(|((pr, s), per)| per * pr.eq_iters + s),
            probe_converged: probe.as_ref().map(Probe::converged),
            probe_source: probe.as_ref().map(|pr| pr.source.name().to_string()),
            unpriced,
            recommended: false,
        });
    }
    let best = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.predicted_total_s.map(|t| (i, t)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .map(|(i, _)| i);
    if let Some(i) = best {
        rows[i].recommended = true;
    }
    Ok(rows)
}

/// The per-outer-iteration cost of candidate `c` at `p` ranks (for tests and embedding
/// applications that price without the instrumented runs), each pricing run within
/// [`DEFAULT_PRICE_LIMIT`].
///
/// # Errors
/// As [`plan`], and [`PlanError::OverPriceLimit`] when a communication of `c` passes the
/// limit.
pub fn outer_cost_at(
    a: CsMatView<'_, f64>,
    fabric: &Fabric,
    p: usize,
    c: &Candidate,
    algo: AllreduceAlgo,
) -> Result<OuterCost, PlanError> {
    outer_cost_on(a, fabric, MemoryKind::Host, p, c, algo)
}

/// [`outer_cost_at`] on the device that owns `device` memory ([`PlanConfig::device`]).
///
/// # Errors
/// As [`outer_cost_at`].
pub fn outer_cost_on(
    a: CsMatView<'_, f64>,
    fabric: &Fabric,
    device: MemoryKind,
    p: usize,
    c: &Candidate,
    algo: AllreduceAlgo,
) -> Result<OuterCost, PlanError> {
    let part = Partition::rows(a.rows(), p);
    let graphs = rank_graphs(a, &part, if c.mpk { c.k } else { 1 });
    let mut priced = Priced {
        universe: price::universe(fabric, p)?,
        graphs: &graphs,
        device,
        algo,
        limit: DEFAULT_PRICE_LIMIT,
        done: HashMap::new(),
        refused: HashMap::new(),
    };
    outer_cost(fabric, &mut priced, c)
}

/// A change of recommendation under a scaled allreduce cost ([`why`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flip {
    /// Index (into the rows given to [`why`]) of the row that would be recommended.
    pub to: usize,
    /// The factor on every row's allreduce time at which it would be.
    pub factor: f64,
}

/// Why the recommended row of one rank count wins ([`why`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Why {
    /// Index of the recommended row.
    pub best: usize,
    /// Index of the feasible row with the next least predicted total, if any.
    pub runner_up: Option<usize>,
    /// The largest factor below 1 on the allreduce time at which another row would win
    /// (cheaper reductions favour it), if any.
    pub lower: Option<Flip>,
    /// The smallest factor above 1 at which another row would win (dearer reductions
    /// favour it), if any.
    pub upper: Option<Flip>,
}

/// Why the recommended row of rank count `p` in `rows` wins: the runner-up, and the
/// allreduce cost at which the recommendation would flip. Each row's predicted total is
/// `A + f R`, `R` its allreduce time over the iterations (`allreduce_s x
/// predicted_eq_iterations`), `A` the rest (compute, halo, setup), `f` a factor on every
/// allreduce (the setup's few reductions stay in `A`). A row `j` overtakes the best row `w`
/// where `A_j + f R_j < A_w + f R_w`, a bound on `f` below 1 when `R_j > R_w`, above 1 when
/// `R_j < R_w`. `None` when no row of `p` is recommended. A pipelined row's `allreduce_s`
/// is the part its overlapped work does not hide, and is held fixed: linear in `f` only
/// while the reduction stays hidden (or stays exposed).
pub fn why(rows: &[PlanRow], p: usize) -> Option<Why> {
    let feasible = |r: &&PlanRow| r.ranks == p && r.predicted_total_s.is_some();
    let terms = |r: &PlanRow| {
        let total = r.predicted_total_s.unwrap_or(f64::NAN);
        let red = r.allreduce_s.unwrap_or(0.0) * r.predicted_eq_iterations.unwrap_or(0.0);
        (total - red, red)
    };
    let best = rows.iter().position(|r| r.ranks == p && r.recommended)?;
    let (a_w, r_w) = terms(&rows[best]);
    let mut why = Why {
        best,
        runner_up: None,
        lower: None,
        upper: None,
    };
    for (j, r) in rows.iter().enumerate() {
        if j == best || !feasible(&r) {
            continue;
        }
        let t = r.predicted_total_s.unwrap_or(f64::INFINITY);
        if why
            .runner_up
            .is_none_or(|u| t < rows[u].predicted_total_s.unwrap_or(f64::INFINITY))
        {
            why.runner_up = Some(j);
        }
        let (a_j, r_j) = terms(r);
        let f = (a_w - a_j) / (r_j - r_w);
        if !f.is_finite() {
            continue;
        }
        if r_j > r_w && f > 0.0 && f < 1.0 && why.lower.is_none_or(|l| f > l.factor) {
            why.lower = Some(Flip { to: j, factor: f });
        }
        if r_j < r_w && f > 1.0 && why.upper.is_none_or(|u| f < u.factor) {
            why.upper = Some(Flip { to: j, factor: f });
        }
    }
    Some(why)
}
