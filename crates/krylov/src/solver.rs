//! [`Solver`]: the embedding API of the CG family — set up once on a rank's device (scale
//! on the host, move the matrix to the device), solve for any number of right-hand sides.
//! The methods themselves are in `cg/`, written once over the communicator and the device.

use castack_collectives::Communicator;

use crate::cg::{drifted, run_method, LoopEnd, System};
use crate::config::{Precond, SolverConfig};
use crate::method::Method;
use crate::operator::{LinearOperator, Operator, SysMat, UserOp};
use crate::precond::{self, ChebyshevPc, Ic0Factor, Pc, Preconditioner};
use crate::report::{Breakdown, SolveReport, StopReason, SCHEMA_VERSION};
use crate::KrylovError;
use castack_linalg::count::{Bucket, Phase, SolverComm};
use castack_linalg::device::{work, Cpu, Device};
use castack_linalg::dist::{DistCsr, DistVec, MatrixPowers};
use castack_linalg::ops::Ops;

/// The result of a solve on one rank: its block of `x` and the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// This rank's block of the solution of the ORIGINAL system.
    pub x: Vec<f64>,
    /// The report (identical counters on every rank).
    pub report: SolveReport,
}

/// A solver set up for one matrix: scaled once, moved to its device once, solved for any
/// number of right-hand sides (PETSc's `KSPSetUp` / `KSPSolve`). Generic over the
/// communicator `C` and the device `D` ([`Cpu`] by default; a GPU with feature `cuda`).
/// Collective: every rank builds and calls it together.
pub struct Solver<'c, C: Communicator + ?Sized, D: Device = Cpu> {
    sys: System<'c, C, D>,
    /// Counters already reported: the first solve's report includes the set-up's own
    /// communication (diagonal check, scaling exchange).
    reported: castack_linalg::count::Counters,
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
        if cfg.precond == Precond::BjacobiIc0 && !dev.triangular_solves() {
            return Err(KrylovError::InvalidConfig(format!(
                "precond bjacobi_ic0 needs triangular solves, which device {} does not have (use precond chebyshev or jacobi there)",
                dev.name()
            )));
        }
        let mut mpk = mpk;
        let nl = a.n_local();
        let mut ops = Ops::new(comm, cfg.allreduce, dev, nl)?;
        let mut a = a;
        let mut s = a.new_vec();
        let diag = a.diagonal();
        // The weights `1/s^2` of the original norm; their global minimum bounds that norm
        // from below (`System::wnorm_floor`).
        let wmin = match cfg.precond {
            Precond::None => {
                s.local_mut().fill(1.0);
                1.0
            }
            Precond::Jacobi | Precond::BjacobiIc0 | Precond::Chebyshev => {
                for (si, d) in s.local_mut().iter_mut().zip(&diag) {
                    *si = 1.0 / d.sqrt();
                }
                let wmin = check_diagonal(ops.sc_mut(), a.row_start(), &diag, s.local())?;
                a.scale_symmetric(ops.sc_mut(), &mut s)?;
                if let Some(m) = &mut mpk {
                    m.scale_symmetric(ops.sc_mut(), s.local())?;
                }
                wmin
            }
        };
        // The preconditioner of the loop, built on the scaled matrix (host) where it needs
        // one: the IC(0) factor, or the Chebyshev interval's upper end.
        let ic0 = match cfg.precond {
            Precond::BjacobiIc0 => Some(precond::factor_ic0(ops.sc_mut(), &a)?),
            _ => None,
        };
        let cheb_upper = match cfg.precond {
            Precond::Chebyshev => Some(precond::gershgorin_upper(ops.sc_mut(), &a)?),
            _ => None,
        };
        let w: Vec<f64> = s.local().iter().map(|&si| weight(si)).collect();
        let dev = ops.dev_mut();
        let a = a.to_device(dev)?;
        let mpk = mpk.map(|m| m.to_device(dev)).transpose()?;
        let s = DistVec::from_raw(dev.upload(s.local())?, nl);
        let w = DistVec::from_raw(dev.upload(&w)?, nl);
        // The working set of the modeled device: matrix, matrix powers data, s and w (the
        // vectors from `new_vec` count themselves).
        ops.hold(
            a.held_bytes() + mpk.as_ref().map_or(0, MatrixPowers::held_bytes) + 16 * nl as u64,
        );
        let precond_shift = ic0.as_ref().map(Ic0Factor::shift);
        if let Some(f) = &ic0 {
            ops.hold(f.held_bytes());
        }
        let pc = match (ic0, cheb_upper) {
            (Some(f), _) => Some(Pc::Ic0(f)),
            (None, Some(upper)) => Some(Pc::Chebyshev(ChebyshevPc::new(
                &mut ops,
                &a,
                cfg.precond_degree,
                upper,
            )?)),
            (None, None) => None,
        };
        Self::finish(
            ops,
            SysMat::Csr(a),
            mpk,
            (s, w, wmin),
            pc,
            precond_shift,
            cfg,
        )
    }

    /// Set up on `dev` for an embedder's operator `op` ([`Operator`]: matrix-free, or a
    /// matrix in the application's own format, with its own exchanges), in place of a
    /// [`DistCsr`]: the diagonal check and Jacobi scaling come from `op.diagonal()`, and
    /// every method applies `S A S` as `s ⊙ A(s ⊙ x)`. Vectors have no input slots. The
    /// loop preconditioners built from matrix entries (`bjacobi_ic0`, `chebyshev`'s
    /// Gershgorin bound) and `mpk` need a [`DistCsr`] and are refused; an embedder's own
    /// preconditioner ([`Solver::set_preconditioner`]) works. Collective.
    ///
    /// # Errors
    /// Those of [`Solver::new`], a diagonal of the wrong length, and the refusals above.
    pub fn with_operator(
        comm: &'c C,
        op: Box<dyn Operator<C, D> + 'c>,
        cfg: SolverConfig,
        dev: D,
    ) -> Result<Self, KrylovError> {
        cfg.validate()?;
        let bad = |m: String| Err(KrylovError::InvalidConfig(m));
        if cfg.mpk {
            return bad(
                "mpk needs a DistCsr matrix (MatrixPowers); an embedder's operator has none".into(),
            );
        }
        if cfg.precond.applies() {
            return bad(format!(
                "precond {} is built from the matrix's entries; with an embedder's operator use jacobi or none, and Solver::set_preconditioner for a preconditioner of its own",
                cfg.precond.name()
            ));
        }
        let nl = op.n_local();
        let diag = op.diagonal();
        check_len("the operator's diagonal", diag.len(), nl)?;
        let mut ops = Ops::new(comm, cfg.allreduce, dev, nl)?;
        let (s, wmin) = match cfg.precond {
            Precond::Jacobi => {
                let s: Vec<f64> = diag.iter().map(|d| 1.0 / d.sqrt()).collect();
                let wmin = check_diagonal(ops.sc_mut(), op.row_start(), &diag, &s)?;
                (s, wmin)
            }
            _ => (vec![1.0; nl], 1.0),
        };
        let w: Vec<f64> = s.iter().map(|&si| weight(si)).collect();
        let dev = ops.dev_mut();
        let s_op = match cfg.precond {
            Precond::Jacobi => Some(DistVec::from_raw(dev.upload(&s)?, nl)),
            _ => None,
        };
        let s = DistVec::from_raw(dev.upload(&s)?, nl);
        let w = DistVec::from_raw(dev.upload(&w)?, nl);
        ops.hold(16 * nl as u64 + 8 * nl as u64 * u64::from(s_op.is_some()));
        let a = SysMat::User(UserOp::new(&mut ops, op, s_op)?);
        Self::finish(ops, a, None, (s, w, wmin), None, None, cfg)
    }

    /// The set-up's common end: work vectors, workspaces, the system.
    fn finish(
        mut ops: Ops<'c, C, D>,
        a: SysMat<'c, C, D>,
        mpk: Option<MatrixPowers<D>>,
        (s, w, wmin): (DistVec<D>, DistVec<D>, f64),
        pc: Option<Pc<'c, C, D>>,
        precond_shift: Option<f64>,
        cfg: SolverConfig,
    ) -> Result<Self, KrylovError> {
        let (nl, ne) = (a.n_local(), a.n_ext());
        // The s-step methods' preconditioned basis needs one more vector.
        let pc_tmp = match (&pc, cfg.method.is_s_step()) {
            (Some(_), true) => Some(ops.new_vec(nl, ne)?),
            _ => None,
        };
        let bhat = ops.new_vec(nl, ne)?;
        let scratch = ops.new_vec(nl, ne)?;
        ops.reserve(8, 8)?;
        ops.sc().meter().settle();
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
                out_scale: 1.0,
                wmin,
                cfg,
                history: Vec::new(),
                replacements: 0,
                pipeline_breakdowns: 0,
                monitor: None,
                monitor_exact: false,
                ritz: Default::default(),
                last: None,
                stagnation: (f64::INFINITY, 0),
                margin: 0.0,
                pc,
                precond_applies: 0,
                precond_shift,
                pc_tmp,
            },
            reported: castack_linalg::count::Counters::default(),
        })
    }

    /// Bytes of matrix, matrix powers data and vectors this rank's solver worked on in its
    /// last solve (after set-up: those of the set-up). It is the working set by which a
    /// modeled device (`sim` backend) picks the cache level its kernels stream from, and
    /// what `krylov plan` estimates per method (`castack_plan::cost::working_set`).
    pub fn held_bytes(&self) -> u64 {
        self.sys.ops.sc().meter().working_set()
    }

    /// Call `monitor(iteration, relres)` after every iteration (each outer step of the
    /// s-step methods cbcg, cbcgr, cacg) of every later solve, as PETSc's
    /// `KSPMonitorSet`: `iteration` counts CG-equivalent iterations done (as
    /// `max_iter` and `equivalent_iterations` do), `relres` is the relative recurrence
    /// residual `||r|| / ||b||` in the ORIGINAL system's norm (the value `history` records;
    /// cacg's is its estimate of the step's last inner iterate). Called on the rank's own
    /// thread inside the loop, which allocates nothing for it. Replaces an earlier monitor
    /// or progress callback.
    ///
    /// Collective: set it on every rank or on none (a rank that prints nothing sets a
    /// no-op), because cg then computes its original-norm sum in every iteration, which
    /// it otherwise leaves out far from the target: one more vector read (`8 n` bytes of
    /// about `12 nnz + 88 n`) and a one-value-longer reduction; iterates, counts and
    /// reported norms are unchanged.
    pub fn set_monitor<F: FnMut(usize, f64) + Send + 'c>(&mut self, monitor: F) {
        self.sys.monitor = Some(Box::new(monitor));
        self.sys.monitor_exact = true;
    }

    /// As [`Solver::set_monitor`] for a progress display that may see an estimate from
    /// below: where cg leaves its original-norm sum out (far from the target) `relres` is
    /// that sum's certified lower bound (see `cg.rs`), elsewhere the monitor's value.
    /// Costs nothing in the solve and changes nothing in its communication, so it may be
    /// set on one rank only (the one that draws).
    pub fn set_progress<F: FnMut(usize, f64) + Send + 'c>(&mut self, progress: F) {
        self.sys.monitor = Some(Box::new(progress));
        self.sys.monitor_exact = false;
    }

    /// Remove the monitor or progress callback (collective, as [`Solver::set_monitor`]).
    pub fn clear_monitor(&mut self) {
        self.sys.monitor = None;
        self.sys.monitor_exact = false;
    }

    /// Apply `pc` as the preconditioner `M^-1` in every later solve, in place of the
    /// configured one (the report's `precond` then reads `user`). `M` approximates the
    /// scaled matrix [`Solver::matrix`] (`S A S` with `precond` `jacobi`, `bjacobi_ic0`
    /// or `chebyshev`, `A` with `none`), which a preconditioner may read to build itself.
    /// Every method accepts it (its preconditioned form, see `cg/`); with `mpk` it is an
    /// error (the matrix powers kernel builds bases with the matrix alone). Collective:
    /// set it on every rank.
    ///
    /// # Errors
    /// [`KrylovError::InvalidConfig`] with a matrix powers plan.
    pub fn set_preconditioner(
        &mut self,
        pc: Box<dyn Preconditioner<C, D> + 'c>,
    ) -> Result<(), KrylovError> {
        if self.sys.mpk.is_some() {
            return Err(KrylovError::InvalidConfig(
                "a preconditioner is applied between the basis SpMVs and has no matrix powers kernel: drop mpk".into(),
            ));
        }
        if self.sys.pc_tmp.is_none() && self.sys.cfg.method.is_s_step() {
            self.sys.pc_tmp = Some(self.sys.new_vec()?);
        }
        self.sys.pc = Some(Pc::User(pc));
        self.sys.precond_shift = None;
        Ok(())
    }

    /// The (scaled) matrix, on its device; `None` for an embedder's operator
    /// ([`Solver::with_operator`]).
    pub fn matrix(&self) -> Option<&DistCsr<D>> {
        self.sys.a.csr()
    }

    /// The device.
    pub fn device(&self) -> &D {
        self.sys.ops.dev()
    }

    /// Solve `A x = b` for this rank's block `b` of the right-hand side, starting from
    /// `x0` (this rank's block) or zero.
    ///
    /// A numerical breakdown inside the method (a non-positive curvature or Gram matrix,
    /// a NaN or Inf among the reduced values) is an outcome, not an error: the solution
    /// holds the LAST iterate (in the original system, as a converged one) and a report
    /// with `converged: false`, [`StopReason::Breakdown`], `breakdown` (quantity, value,
    /// iteration), `iterations` the breakdown's iteration, `equivalent_iterations` the
    /// CG-equivalent iterations done, and `relres_true` recomputed from that iterate (one
    /// more exchange and reduction, counted in the loop's). Breakdowns are detected on
    /// globally reduced, bit-identical values, so every rank returns the same report.
    /// [`SolveReport::breakdown_error`] turns it into [`KrylovError::Breakdown`] for
    /// callers that want the error.
    ///
    /// # Errors
    /// A length mismatch of `b` or `x0`; [`KrylovError::Breakdown`] naming `||b||` for a
    /// right-hand side whose norm is not finite (no iterate exists yet; nothing is solved);
    /// communication and device failures.
    pub fn solve(&mut self, b: &[f64], x0: Option<&[f64]>) -> Result<Solution, KrylovError> {
        let sys = &mut self.sys;
        let n_local = sys.a.n_local();
        check_len("b", b.len(), n_local)?;
        if let Some(x0) = x0 {
            check_len("x0", x0.len(), n_local)?;
        }
        let start = sys.ops.now();
        sys.ops.sc().meter().restore();
        sys.ops.set_phase(Phase::Setup);
        sys.ops.reset_times()?;
        let before = self.reported;
        let flops_before = sys.mpk.as_ref().map_or(0, MatrixPowers::redundant_flops);
        sys.history.clear();
        sys.replacements = 0;
        sys.pipeline_breakdowns = 0;
        sys.precond_applies = 0;
        sys.last = None;
        sys.stagnation = (f64::INFINITY, 0);
        sys.margin = 0.0;
        if sys.cfg.history {
            sys.history.reserve(sys.cfg.max_iter.min(1 << 20) + 1);
        }
        sys.ritz.reset(sys.cfg.eigs, sys.cfg.max_iter.min(1 << 20));
        // ||b|| on the host, where b is, without overflow or underflow (`rhs_scale`); a b
        // whose norm leaves the comfortable range is scaled by a power of two (exact).
        let mut bsq = rhs_sums(b);
        sys.ops.allreduce_host(&mut bsq)?;
        let (bnorm, scale) = rhs_scale(&bsq);
        if !bnorm.is_finite() {
            return Err(KrylovError::Breakdown {
                method: sys.cfg.method.name().into(),
                iteration: 0,
                quantity: "||b||".into(),
                value: bnorm,
            });
        }
        // The scaled copies live only for this solve (an input outside the range).
        let scaled = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| x * scale).collect() };
        let (b_s, x0_s) = if scale == 1.0 {
            (None, None)
        } else {
            (Some(scaled(b)), x0.map(scaled))
        };
        let b = b_s.as_deref().unwrap_or(b);
        let x0 = x0_s.as_deref().or(x0);
        let atol = sys.cfg.atol;
        sys.cfg.atol = atol * scale;
        sys.bnorm = bnorm;
        sys.out_scale = scale;
        // b̂ = S b and x̂0 = S^-1 x0 on the device.
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
        // zero_rhs only for an exactly zero b (no nonzero entry anywhere).
        let end = if bsq[3] == 0.0 {
            sys.ops
                .fill(&mut xhat, 0.0)
                .map(|()| End::ZeroRhs)
                .map_err(KrylovError::from)
        } else {
            match run_method(sys, &mut xhat, x0.is_some()) {
                Ok(e) => Ok(End::Loop(e)),
                // Detected on reduced values: every rank is here at the same iteration.
                Err(KrylovError::Breakdown {
                    iteration,
                    quantity,
                    value,
                    ..
                }) => after_breakdown(sys, &mut xhat, iteration, quantity.into_owned(), value),
                Err(e) => Err(e),
            }
        };
        sys.cfg.atol = atol;
        let end = end?;
        // x = S x̂, back on the host.
        sys.ops.mul(&xhat, &sys.s, &mut sys.scratch)?;
        let mut x = vec![0.0; n_local];
        sys.ops
            .stage_out(sys.scratch.raw(), 0, &mut x, Bucket::Blas)?;
        if scale != 1.0 {
            x.iter_mut().for_each(|v| *v /= scale);
        }
        let time_s = sys.ops.now() - start;
        let c = sys.ops.counters();
        self.reported = c;
        let mut tb = sys.ops.times()?;
        tb.other = (time_s - tb.accounted()).max(0.0);
        let (e, reason, breakdown) = match end {
            End::ZeroRhs => {
                let e = LoopEnd {
                    iterations: 0,
                    equivalent: 0,
                    converged: true,
                    stagnated: false,
                    relres_recurrence: 0.0,
                    relres_true: 0.0,
                };
                (e, StopReason::ZeroRhs, None)
            }
            End::Loop(e) => {
                let reason = if e.converged {
                    StopReason::Converged
                } else if e.stagnated {
                    StopReason::Stagnated
                } else {
                    StopReason::MaxIterations
                };
                (e, reason, None)
            }
            End::Breakdown(e, b) => (e, StopReason::Breakdown, Some(b)),
        };
        let (iterations, equivalent, converged) = (e.iterations, e.equivalent, e.converged);
        let (rr, rt) = (e.relres_recurrence, e.relres_true);
        let report = SolveReport {
            schema_version: SCHEMA_VERSION,
            method: sys.cfg.method.name().into(),
            k: sys.cfg.method.is_s_step().then_some(sys.cfg.k),
            depth: (sys.cfg.method == Method::Plcg).then_some(sys.cfg.depth),
            basis: sys
                .cfg
                .method
                .is_s_step()
                .then(|| sys.cfg.basis.name().to_string()),
            mpk: sys.mpk.is_some(),
            precond: match &sys.pc {
                Some(Pc::User(_)) => "user".into(),
                _ => sys.cfg.precond.name().into(),
            },
            precond_degree: matches!(sys.pc, Some(Pc::Chebyshev(_)))
                .then_some(sys.cfg.precond_degree),
            precond_shift: sys.precond_shift,
            precond_applies: sys.precond_applies,
            reorder: "none".into(),
            backend: String::new(),
            fabric: None,
            device: sys.ops.dev().name().into(),
            spmv: sys.a.mode_name().into(),
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
            breakdown,
            iterations,
            equivalent_iterations: equivalent,
            reductions: c.reductions - before.reductions,
            setup_reductions: c.setup_reductions - before.setup_reductions,
            halo_exchanges: c.halo_exchanges - before.halo_exchanges,
            setup_halo_exchanges: c.setup_halo_exchanges - before.setup_halo_exchanges,
            residual_replacements: sys.replacements,
            pipeline_breakdowns: (sys.cfg.method == Method::Plcg)
                .then_some(sys.pipeline_breakdowns),
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
            eigs: sys.ritz.estimate(),
        };
        Ok(Solution { x, report })
    }
}

/// How a solve's iteration ended.
enum End {
    /// b = 0: x = 0 is exact, no iteration.
    ZeroRhs,
    /// The method's loop ended (converged or out of iterations).
    Loop(LoopEnd),
    /// The method broke down; the loop's end describes the last iterate.
    Breakdown(LoopEnd, Breakdown),
}

/// After a breakdown at `iteration` of the method's loop: the true residual of the last
/// iterate `x` (one counted exchange and one counted reduction, in the loop's counts as a
/// final check is; every rank gets here together, see [`End::Breakdown`]) and how far the
/// method got (CG-equivalent iterations and the recurrence residual it last recorded).
/// A breakdown is the loop's end instead when that iterate meets the tolerance (converged:
/// the true residual decides, certified as at every check, `System::certified`) or the
/// method had reached its attainable accuracy (stagnated: [`drifted`], or a check had
/// found a computed true residual meeting the target that the rounding bound could not
/// certify, `System::margin`). Allocates one work vector: after the loop, once.
fn after_breakdown<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    iteration: usize,
    quantity: String,
    value: f64,
) -> Result<End, KrylovError> {
    sys.ops.set_phase(Phase::Loop);
    // The check's vector replaces the method's (dropped with its loop): the working set
    // stays the loop's.
    let held = sys.ops.held();
    let mut r = sys.new_vec()?;
    sys.ops.set_held(held);
    let [_, tw, ew] = sys.checked_residual(x, &mut r)?;
    // `tw` is a sum of non-negative terms: NaN stays NaN (no `max(0.0)` hiding it).
    let relres_true = tw.sqrt() / sys.bnorm;
    let (equivalent, relres_recurrence) = sys.last.unwrap_or((0, relres_true));
    let converged = sys.certified(tw.sqrt(), ew.max(0.0).sqrt());
    let floor = sys.margin > 0.0;
    let stagnated = !converged && (floor || drifted(relres_recurrence, relres_true));
    let end = LoopEnd {
        iterations: iteration,
        equivalent,
        converged,
        stagnated,
        relres_recurrence,
        relres_true,
    };
    if converged || stagnated {
        return Ok(End::Loop(end));
    }
    Ok(End::Breakdown(
        end,
        Breakdown {
            quantity,
            value,
            iteration,
        },
    ))
}

/// Powers of two that bring a tiny or huge right-hand side's sums of squares into range.
const RHS_UP: f64 = 1.0715086071862673e301; // 2^1000
const RHS_DOWN: f64 = 9.332636185032189e-302; // 2^-1000

/// This rank's `[sum b_i^2, sum (b_i 2^-1000)^2, sum (b_i 2^1000)^2, nonzero entries]`:
/// one of the three sums is in range for any finite b; the first gives ordinary inputs
/// their bits of before.
fn rhs_sums(b: &[f64]) -> [f64; 4] {
    let mut s = [0.0; 4];
    for &v in b {
        s[0] += v * v;
        s[1] += (v * RHS_DOWN) * (v * RHS_DOWN);
        s[2] += (v * RHS_UP) * (v * RHS_UP);
        s[3] += f64::from(u8::from(v != 0.0));
    }
    s
}

/// `||S b||` and the power of two `S` the system is scaled by, from the reduced
/// [`rhs_sums`] (`S` = 1 for `||b||` within `[2^-400, 2^400]`: ordinary inputs solve the
/// very same system). Scaling b (and x0, atol) by a power of two is exact, so the iterates
/// are those of the original system up to that factor, and its norms neither overflow nor
/// underflow. The scaled norm is formed from the in-range sum directly, never through
/// `||b||` itself, which may be subnormal (b ~ 1e-321: a relative error of 1e-4).
fn rhs_scale(sums: &[f64; 4]) -> (f64, f64) {
    let lo = 2f64.powi(-400);
    // ||b|| = m 2^k with m from a sum in range.
    let (m, k) = if sums[0].is_finite() && sums[0] >= lo * lo {
        (sums[0].sqrt(), 0)
    } else if !sums[0].is_finite() || sums[0] > 1.0 {
        (sums[1].sqrt(), 1000)
    } else {
        (sums[2].sqrt(), -1000)
    };
    if m == 0.0 || !m.is_finite() {
        return (m, 1.0);
    }
    // ||b|| ~ 2^e: keep it when in [2^-400, 2^400], else scale by 2^-e.
    let e = (m.log2() + f64::from(k)).round() as i32;
    if k == 0 && (-400..=400).contains(&e) {
        return (m, 1.0);
    }
    let e = e.clamp(-1000, 1000);
    (m * 2f64.powi(k - e), 2f64.powi(-e))
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

/// The weight `1/s_i^2` of the original norm for a Jacobi factor `s_i = a_ii^-1/2`:
/// `1/(s_i s_i)` (the bits of every ordinary input), or where `s_i^2` leaves the normal
/// range (a subnormal or huge diagonal entry) `(1/s_i)^2`, which stays finite: about
/// `a_ii`, never the 0 or infinity the square's overflow or underflow would give.
fn weight(si: f64) -> f64 {
    let q = si * si;
    if q.is_normal() {
        1.0 / q
    } else {
        (1.0 / si) * (1.0 / si)
    }
}

/// Agree on the first non-positive diagonal entry across ranks, so every rank returns the
/// same error, and on the least weight `1/s^2` of the original norm over all rows, in ONE
/// setup reduction.
fn check_diagonal<C: Communicator + ?Sized>(
    sc: &mut SolverComm<'_, C>,
    row_start: usize,
    diag: &[f64],
    s: &[f64],
) -> Result<f64, KrylovError> {
    let (p, me) = (sc.size(), sc.rank());
    // Per rank: the first bad row (1-based, 0: none), its value, and the least weight
    // `1/s^2` of its rows (0: none); each rank fills its own slots, so the sum is exact.
    let mut found = vec![0.0; 3 * p];
    if let Some(i) = diag.iter().position(|d| !(d.is_finite() && *d > 0.0)) {
        found[3 * me] = (row_start + i + 1) as f64;
        found[3 * me + 1] = diag[i];
    }
    found[3 * me + 2] =
        s.iter()
            .map(|&si| weight(si))
            .fold(0.0, |m: f64, w| if m == 0.0 { w } else { m.min(w) });
    sc.allreduce_sum(&mut found)?;
    if let Some(c) = found.chunks_exact(3).find(|c| c[0] != 0.0) {
        return Err(KrylovError::BadDiagonal {
            row: c[0] as usize,
            value: c[1],
        });
    }
    let wmin = found
        .chunks_exact(3)
        .map(|c| c[2])
        .filter(|&w| w > 0.0)
        .fold(f64::INFINITY, f64::min);
    // No rows anywhere (an empty system): any positive floor will do.
    Ok(if wmin.is_finite() { wmin } else { 1.0 }.min(f64::MAX))
}
