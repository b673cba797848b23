//! The CG family: one file per method, the [`Method`] enum as registry, shared setup here.
//!
//! Every method iterates on the scaled system `Â x̂ = b̂` with `Â = S A S`, `b̂ = S b`,
//! `x = S x̂` (`S = D^-1/2` for Jacobi, `I` without preconditioning) and measures residuals in
//! the ORIGINAL system's norm: `||b - A x|| = ||S^-1 (b̂ - Â x̂)||`, i.e. the weighted norm
//! with weights `w = 1/s^2`. The weighted sum is fused into the same reduction as the
//! method's own dot products, so monitoring the original residual costs no extra message.
//! Convergence is declared only after a true residual `b̂ - Â x̂` has been recomputed and
//! meets the tolerance; when it misses, the recurrence residual is replaced by it (counted
//! in `residual_replacements`) and the iteration goes on.
//!
//! See `README.md` in this folder for the family and its stability trade-offs.

use castack_collectives::Communicator;
use serde::{Deserialize, Serialize};

use crate::basis::SStepBasis;
use crate::config::{Precond, SolverConfig};
use crate::count::{Bucket, Phase, SolverComm};
use crate::device::{work, Cpu, Device};
use crate::dist::{DistCsr, DistVec, MatrixPowers};
use crate::ops::Ops;
use crate::report::{SolveReport, StopReason, SCHEMA_VERSION};
use crate::KrylovError;

// The method `cg` of the family `cg`: the file name follows the registry name.
mod cacg;
mod cbcg;
mod cbcgr;
mod ccg;
#[allow(clippy::module_inception)]
mod cg;
mod pipecg;
mod smoothing;
mod sstep;

/// The method registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Hestenes-Stiefel CG: 1 SpMV, 2 reductions per iteration.
    #[default]
    Cg,
    /// Chronopoulos-Gear CG: 1 SpMV, 1 fused reduction per iteration.
    Ccg,
    /// Pipelined CG (Ghysels-Vanroose): 1 SpMV, 1 reduction overlapped with it.
    Pipecg,
    /// Block CG on an s-step basis: k SpMVs, 2 reductions per k steps.
    Cbcg,
    /// Block CG on an s-step basis, Gram matrix updated: k SpMVs, 1 reduction per k steps.
    Cbcgr,
    /// Communication-avoiding CG (Hoemmen/Carson): 2s-1 SpMVs, 1 reduction per s steps.
    Cacg,
}

impl Method {
    /// Every method.
    pub const ALL: &'static [Method] = &[
        Method::Cg,
        Method::Ccg,
        Method::Pipecg,
        Method::Cbcg,
        Method::Cbcgr,
        Method::Cacg,
    ];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Cg => "cg",
            Method::Ccg => "ccg",
            Method::Pipecg => "pipecg",
            Method::Cbcg => "cbcg",
            Method::Cbcgr => "cbcgr",
            Method::Cacg => "cacg",
        }
    }

    /// Whether the method works in blocks of `k` CG-equivalent steps with a basis (its
    /// report carries `k` and `basis`).
    pub fn is_s_step(self) -> bool {
        match self {
            Method::Cg | Method::Ccg | Method::Pipecg => false,
            Method::Cbcg | Method::Cbcgr | Method::Cacg => true,
        }
    }

    /// One line on the method.
    pub fn description(self) -> &'static str {
        match self {
            Method::Cg => cg::DESCRIPTION,
            Method::Ccg => ccg::DESCRIPTION,
            Method::Pipecg => pipecg::DESCRIPTION,
            Method::Cbcg => cbcg::DESCRIPTION,
            Method::Cbcgr => cbcgr::DESCRIPTION,
            Method::Cacg => cacg::DESCRIPTION,
        }
    }
}

castack_collectives::impl_registry!(Method, "method");

/// A breakdown of `method` at `iteration`: `quantity` took the unusable `value`.
pub(crate) fn breakdown(
    method: &'static str,
    iteration: usize,
    quantity: &'static str,
    value: f64,
) -> KrylovError {
    KrylovError::Breakdown {
        method,
        iteration,
        quantity,
        value,
    }
}

/// `value` if finite, else a breakdown (NaN/Inf detected at once).
pub(crate) fn finite_or(
    method: &'static str,
    value: f64,
    iteration: usize,
    quantity: &'static str,
) -> Result<f64, KrylovError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(breakdown(method, iteration, quantity, value))
    }
}

/// `value` if finite and positive (a curvature or a squared norm), else a breakdown.
pub(crate) fn positive_or(
    method: &'static str,
    value: f64,
    iteration: usize,
    quantity: &'static str,
) -> Result<f64, KrylovError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(breakdown(method, iteration, quantity, value))
    }
}

/// This rank's `[r.r, ||r||_w^2]` (the initial norms every method reduces) into the
/// reduction slots `at`, `at + 1`.
pub(crate) fn norm_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    at: usize,
) -> Result<(), KrylovError> {
    sys.ops.dot(r, r, at)?;
    sys.ops.wnorm(r, &sys.w, at + 1)
}

/// This rank's `[r.r, ||r||_w^2, x.r]` into the reduction slots `at..at + 3`: the three
/// quantities the single-reduction methods (ccg: x = A r; pipecg: x = w) fuse into one
/// message.
pub(crate) fn residual_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    x: &DistVec<D>,
    at: usize,
) -> Result<(), KrylovError> {
    sys.ops.dot(r, r, at)?;
    sys.ops.wnorm(r, &sys.w, at + 1)?;
    sys.ops.dot(x, r, at + 2)
}

/// Whether a periodic residual replacement (`replace_every = Some(n)`) is due after `done`
/// (CG-equivalent) iterations: `done` is a positive multiple of `n`.
pub(crate) fn periodic_due(every: Option<usize>, done: usize) -> bool {
    every.is_some_and(|n| done > 0 && done.is_multiple_of(n))
}

/// The result of a solve on one rank: its block of `x` and the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// This rank's block of the solution of the ORIGINAL system.
    pub x: Vec<f64>,
    /// The report (identical counters on every rank).
    pub report: SolveReport,
}

/// State shared by the methods: the operation layer, the scaled system and the residual
/// bookkeeping.
pub(crate) struct System<'c, C: Communicator + ?Sized, D: Device> {
    pub(crate) ops: Ops<'c, C, D>,
    pub(crate) a: DistCsr<D>,
    /// Matrix powers plan (scaled like `a`) when `cfg.mpk`.
    pub(crate) mpk: Option<MatrixPowers<D>>,
    /// Scale factors `s` (owned values).
    pub(crate) s: DistVec<D>,
    /// Weights `1/s^2` of the original-system norm (owned values).
    pub(crate) w: DistVec<D>,
    /// `b̂ = S b`.
    pub(crate) bhat: DistVec<D>,
    /// Scratch for host vectors on their way in and out (`b`, `x0`, `x`).
    pub(crate) scratch: DistVec<D>,
    /// `||b||` of the original system.
    pub(crate) bnorm: f64,
    pub(crate) cfg: SolverConfig,
    pub(crate) history: Vec<f64>,
    pub(crate) replacements: u64,
}

/// Outcome of a method's iteration loop.
pub(crate) struct LoopEnd {
    pub(crate) iterations: usize,
    pub(crate) equivalent: usize,
    pub(crate) converged: bool,
    pub(crate) relres_recurrence: f64,
    pub(crate) relres_true: f64,
}

impl<C: Communicator + ?Sized, D: Device> System<'_, C, D> {
    /// Whether a residual of original-norm `rnorm` meets the tolerances.
    pub(crate) fn meets(&self, rnorm: f64) -> bool {
        rnorm <= self.cfg.tol * self.bnorm || rnorm <= self.cfg.atol
    }

    /// A zero vector laid out for the matrix (owned values and input slots).
    pub(crate) fn new_vec(&mut self) -> Result<DistVec<D>, KrylovError> {
        let (nl, ne) = (self.a.n_local(), self.a.n_ext());
        self.ops.new_vec(nl, ne)
    }

    /// `count` zero vectors laid out for the matrix.
    pub(crate) fn new_vecs(&mut self, count: usize) -> Result<Vec<DistVec<D>>, KrylovError> {
        (0..count).map(|_| self.new_vec()).collect()
    }

    /// `r = b̂ - Â x` (one counted exchange) and, in ONE counted reduction, `[r.r, ||r||_w^2]`.
    pub(crate) fn true_residual(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
    ) -> Result<[f64; 2], KrylovError> {
        self.true_residual_local(x, r, 0)?;
        let mut sums = [0.0; 2];
        self.ops.reduce(&mut sums)?;
        Ok(sums)
    }

    /// `r = b̂ - Â x` (one counted exchange) and this rank's `[r.r, ||r||_w^2]` into the
    /// reduction slots `at`, `at + 1`, left for the caller to fuse into a reduction of its
    /// own.
    pub(crate) fn true_residual_local(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        self.a.spmv(&mut self.ops, x, r)?;
        self.ops.residual_norms(&self.bhat, r, &self.w, at)
    }

    /// `r = b̂ - Â x` (one counted exchange), no sums.
    pub(crate) fn residual(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        self.a.spmv(&mut self.ops, x, r)?;
        self.ops.xpay(&self.bhat, -1.0, r)
    }

    /// `basis` of size `k` from `s[0]` (see [`SStepBasis::build`]): `k` depth-1 exchanges,
    /// or ONE depth-`k` exchange through the matrix powers plan when there is one.
    pub(crate) fn build_basis(
        &mut self,
        basis: &SStepBasis,
        k: usize,
        s: &mut [DistVec<D>],
        a_s: &mut [DistVec<D>],
    ) -> Result<(), KrylovError> {
        match &mut self.mpk {
            Some(m) => basis.build_mpk(m, &mut self.ops, k, s, a_s),
            None => basis.build(&mut self.a, &mut self.ops, k, s, a_s),
        }
    }

    /// CA-CG's two bases: `basis` of size `k` from `pv[0]` (into `pv`, `pa`) and of size
    /// `k - 1` from `rv[0]` (into `rv`, `ra`; nothing at `k = 1`). Without a matrix powers
    /// plan: [`System::build_basis`] twice (`2k - 1` depth-1 exchanges). With one: ONE
    /// depth-`k` exchange carrying both start vectors
    /// ([`MatrixPowers::apply_pair_with`]), bit-identical to two [`System::build_basis`]
    /// calls, which would cost two exchanges (one at `k = 1`, where only `pv[0]` is
    /// exchanged).
    pub(crate) fn build_basis_pair(
        &mut self,
        basis: &SStepBasis,
        k: usize,
        pv: &mut [DistVec<D>],
        pa: &mut [DistVec<D>],
        rv: &mut [DistVec<D>],
        ra: &mut [DistVec<D>],
    ) -> Result<(), KrylovError> {
        if let (Some(m), true) = (&mut self.mpk, k > 1) {
            return m.apply_pair_with(&mut self.ops, pv, rv, |m, ops, pv, rv| {
                basis.build_mpk(m, ops, k, pv, pa)?;
                basis.build_mpk(m, ops, k - 1, rv, ra)
            });
        }
        self.build_basis(basis, k, pv, pa)?;
        if k > 1 {
            self.build_basis(basis, k - 1, rv, ra)?;
        }
        Ok(())
    }

    /// Record the relative recurrence residual of one CG-equivalent iteration.
    pub(crate) fn record(&mut self, rnorm: f64) {
        if self.cfg.history {
            self.history.push(rnorm / self.bnorm);
        }
    }
}

/// A solver set up for one matrix: scaled once, moved to its device once, solved for any
/// number of right-hand sides (PETSc's `KSPSetUp` / `KSPSolve`). Generic over the
/// communicator `C` and the device `D` ([`Cpu`] by default; a GPU with feature `cuda`).
/// Collective: every rank builds and calls it together.
pub struct Solver<'c, C: Communicator + ?Sized, D: Device = Cpu> {
    sys: System<'c, C, D>,
    /// Counters already reported: the first solve's report includes the set-up's own
    /// communication (diagonal check, scaling exchange).
    reported: crate::count::Counters,
}

impl<'c, C: Communicator + ?Sized, D: Device> Solver<'c, C, D> {
    /// Set up on `dev`: validate the configuration, check the diagonal (Jacobi), scale the
    /// matrix (on the host), move it to the device. `cfg.mpk` needs a plan:
    /// [`Solver::with_mpk`].
    pub fn new(comm: &'c C, a: DistCsr, cfg: SolverConfig, dev: D) -> Result<Self, KrylovError> {
        Self::setup(comm, a, None, cfg, dev)
    }

    /// As [`Solver::new`], with a matrix powers plan for the s-step bases (`cfg.mpk` must
    /// be set): `mpk` is built from the same matrix and partition as `a`
    /// ([`MatrixPowers::from_global`]) with depth `>= cfg.k`, and scaled here like `a`
    /// (one more setup exchange).
    pub fn with_mpk(
        comm: &'c C,
        a: DistCsr,
        mpk: MatrixPowers,
        cfg: SolverConfig,
        dev: D,
    ) -> Result<Self, KrylovError> {
        Self::setup(comm, a, Some(mpk), cfg, dev)
    }

    fn setup(
        comm: &'c C,
        a: DistCsr,
        mpk: Option<MatrixPowers>,
        cfg: SolverConfig,
        dev: D,
    ) -> Result<Self, KrylovError> {
        cfg.validate()?;
        check_mpk(&a, mpk.as_ref(), &cfg)?;
        let mut mpk = mpk;
        let (nl, ne) = (a.n_local(), a.n_ext());
        let mut ops = Ops::new(comm, cfg.allreduce, dev, nl)?;
        let mut a = a;
        let mut s = a.new_vec();
        let diag = a.diagonal();
        match cfg.precond {
            Precond::None => s.local_mut().fill(1.0),
            Precond::Jacobi => {
                check_diagonal(ops.sc_mut(), &a, &diag)?;
                for (si, d) in s.local_mut().iter_mut().zip(&diag) {
                    *si = 1.0 / d.sqrt();
                }
                a.scale_symmetric(ops.sc_mut(), &mut s)?;
                if let Some(m) = &mut mpk {
                    m.scale_symmetric(ops.sc_mut(), s.local())?;
                }
            }
        }
        let w: Vec<f64> = s.local().iter().map(|si| 1.0 / (si * si)).collect();
        let dev = ops.dev_mut();
        let a = a.to_device(dev)?;
        let mpk = mpk.map(|m| m.to_device(dev)).transpose()?;
        let s = DistVec::from_raw(dev.upload(s.local())?, nl);
        let w = DistVec::from_raw(dev.upload(&w)?, nl);
        let bhat = ops.new_vec(nl, ne)?;
        let scratch = ops.new_vec(nl, ne)?;
        ops.reserve(8, 8)?;
        Ok(Self {
            sys: System {
                ops,
                a,
                mpk,
                s,
                w,
                bhat,
                scratch,
                bnorm: 0.0,
                cfg,
                history: Vec::new(),
                replacements: 0,
            },
            reported: crate::count::Counters::default(),
        })
    }

    /// The (scaled) matrix, on its device.
    pub fn matrix(&self) -> &DistCsr<D> {
        &self.sys.a
    }

    /// The device.
    pub fn device(&self) -> &D {
        self.sys.ops.dev()
    }

    /// Solve `A x = b` for this rank's block `b` of the right-hand side, starting from
    /// `x0` (this rank's block) or zero.
    pub fn solve(&mut self, b: &[f64], x0: Option<&[f64]>) -> Result<Solution, KrylovError> {
        let sys = &mut self.sys;
        let n_local = sys.a.n_local();
        check_len("b", b.len(), n_local)?;
        if let Some(x0) = x0 {
            check_len("x0", x0.len(), n_local)?;
        }
        let start = sys.ops.now();
        sys.ops.set_phase(Phase::Setup);
        sys.ops.reset_times()?;
        let before = self.reported;
        let flops_before = sys.mpk.as_ref().map_or(0, MatrixPowers::redundant_flops);
        sys.history.clear();
        sys.replacements = 0;
        if sys.cfg.history {
            sys.history.reserve(sys.cfg.max_iter.min(1 << 20) + 1);
        }
        // b̂ = S b and x̂0 = S^-1 x0 on the device; ||b||^2 on the host, where b is.
        sys.ops
            .stage_in(b, sys.scratch.raw_mut(), 0, Bucket::Blas)?;
        sys.ops.mul(&sys.scratch, &sys.s, &mut sys.bhat)?;
        let mut xhat = sys.new_vec()?;
        if let Some(x0) = x0 {
            sys.ops
                .stage_in(x0, sys.scratch.raw_mut(), 0, Bucket::Blas)?;
            sys.ops.div(&sys.scratch, &sys.s, &mut xhat)?;
        }
        sys.ops.sc().meter().add(work::stream(1, 0, 2, n_local));
        let mut bsq = [b.iter().map(|v| v * v).sum::<f64>()];
        sys.ops.allreduce_host(&mut bsq)?;
        sys.bnorm = bsq[0].sqrt();
        if !sys.bnorm.is_finite() {
            return Err(KrylovError::Breakdown {
                method: sys.cfg.method.name(),
                iteration: 0,
                quantity: "||b||",
                value: sys.bnorm,
            });
        }
        let end = if sys.bnorm == 0.0 {
            sys.ops.fill(&mut xhat, 0.0)?;
            None
        } else {
            Some(match sys.cfg.method {
                Method::Cg => cg::run(sys, &mut xhat, x0.is_some())?,
                Method::Ccg => ccg::run(sys, &mut xhat, x0.is_some())?,
                Method::Pipecg => pipecg::run(sys, &mut xhat, x0.is_some())?,
                Method::Cbcg => cbcg::run(sys, &mut xhat, x0.is_some())?,
                Method::Cbcgr => cbcgr::run(sys, &mut xhat, x0.is_some())?,
                Method::Cacg => cacg::run(sys, &mut xhat, x0.is_some())?,
            })
        };
        // x = S x̂, back on the host.
        sys.ops.mul(&xhat, &sys.s, &mut sys.scratch)?;
        let mut x = vec![0.0; n_local];
        sys.ops
            .stage_out(sys.scratch.raw(), 0, &mut x, Bucket::Blas)?;
        let time_s = sys.ops.now() - start;
        let c = sys.ops.counters();
        self.reported = c;
        let mut tb = sys.ops.times()?;
        tb.other = (time_s - tb.accounted()).max(0.0);
        let (iterations, equivalent, converged, rr, rt, reason) = match end {
            None => (0, 0, true, 0.0, 0.0, StopReason::ZeroRhs),
            Some(e) => {
                let reason = if e.converged {
                    StopReason::Converged
                } else {
                    StopReason::MaxIterations
                };
                let (ir, eq, cv) = (e.iterations, e.equivalent, e.converged);
                (ir, eq, cv, e.relres_recurrence, e.relres_true, reason)
            }
        };
        let report = SolveReport {
            schema_version: SCHEMA_VERSION,
            method: sys.cfg.method.name().into(),
            k: sys.cfg.method.is_s_step().then_some(sys.cfg.k),
            basis: sys
                .cfg
                .method
                .is_s_step()
                .then(|| sys.cfg.basis.name().to_string()),
            mpk: sys.mpk.is_some(),
            precond: sys.cfg.precond.name().into(),
            reorder: "none".into(),
            backend: String::new(),
            fabric: None,
            device: sys.ops.dev().name().into(),
            spmv: sys.a.mode().name().into(),
            allreduce: sys.cfg.allreduce.name().into(),
            partition: "rows".into(),
            ranks: sys.ops.size(),
            threads: sys.ops.dev().threads(),
            n: sys.a.n(),
            nnz: sys.a.nnz(),
            tol: sys.cfg.tol,
            atol: sys.cfg.atol,
            max_iter: sys.cfg.max_iter,
            converged,
            stop_reason: reason,
            iterations,
            equivalent_iterations: equivalent,
            reductions: c.reductions - before.reductions,
            setup_reductions: c.setup_reductions - before.setup_reductions,
            halo_exchanges: c.halo_exchanges - before.halo_exchanges,
            setup_halo_exchanges: c.setup_halo_exchanges - before.setup_halo_exchanges,
            residual_replacements: sys.replacements,
            redundant_flops: sys.mpk.as_ref().map_or(0, MatrixPowers::redundant_flops)
                - flops_before,
            relres_recurrence: rr,
            relres_true: rt,
            error_vs_ones: None,
            setup_s: 0.0,
            time_s,
            time_breakdown: tb,
            modeled: sys.ops.modeled(),
            modeled_max_time_s: None,
            history: sys.cfg.history.then(|| sys.history.clone()),
        };
        Ok(Solution { x, report })
    }
}

/// A matrix powers plan is given exactly when `cfg.mpk` asks for one, fits `a`'s rows and
/// is deep enough for `cfg.k`.
fn check_mpk(
    a: &DistCsr,
    mpk: Option<&MatrixPowers>,
    cfg: &SolverConfig,
) -> Result<(), KrylovError> {
    let bad = |m: String| Err(KrylovError::InvalidConfig(m));
    match mpk {
        None if cfg.mpk => bad(
            "mpk = true needs a matrix powers plan: build a MatrixPowers and use Solver::with_mpk"
                .into(),
        ),
        Some(_) if !cfg.mpk => bad("a matrix powers plan was given but mpk = false".into()),
        Some(m) if !m.fits(a) => bad(format!(
            "the matrix powers plan (rows {}..{} of {}) does not fit the matrix (rows {}..{} of {})",
            m.row_start(),
            m.row_start() + m.n_local(),
            m.n(),
            a.row_start(),
            a.row_start() + a.n_local(),
            a.n()
        )),
        Some(m) if m.depth() < cfg.k => bad(format!(
            "the matrix powers plan has depth {} < k = {}",
            m.depth(),
            cfg.k
        )),
        _ => Ok(()),
    }
}

fn check_len(what: &'static str, got: usize, expected: usize) -> Result<(), KrylovError> {
    if got == expected {
        Ok(())
    } else {
        Err(KrylovError::LengthMismatch {
            what,
            expected,
            got,
        })
    }
}

/// Agree on the first non-positive diagonal entry across ranks (one setup reduction), so
/// every rank returns the same error.
fn check_diagonal<C: Communicator + ?Sized>(
    sc: &mut SolverComm<'_, C>,
    a: &DistCsr,
    diag: &[f64],
) -> Result<(), KrylovError> {
    let (p, me) = (sc.size(), sc.rank());
    let mut found = vec![0.0; 2 * p];
    if let Some(i) = diag.iter().position(|d| !(d.is_finite() && *d > 0.0)) {
        found[2 * me] = (a.row_start() + i + 1) as f64;
        found[2 * me + 1] = diag[i];
    }
    sc.allreduce_sum(&mut found)?;
    match found.chunks_exact(2).find(|c| c[0] != 0.0) {
        Some(c) => Err(KrylovError::BadDiagonal {
            row: c[0] as usize,
            value: c[1],
        }),
        None => Ok(()),
    }
}
