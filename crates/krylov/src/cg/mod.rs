//! The CG family: one file per method (the registry is [`crate::Method`]), shared setup here.
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
//! # Certified convergence
//!
//! Near the rounding floor a computed true residual is itself mostly rounding: it may meet
//! the tolerance while the exact residual of the returned x does not. So every
//! true-residual check also computes, in the same pass over the matrix and the same
//! reduction message (no extra message or exchange: [`System::checked_residual_local`],
//! `castack_linalg`'s `Device::residual_bound`), a rigorous bound on that evaluation
//! error, and convergence is declared only when it is certified ([`System::certified`]):
//! `(||r̂||_w + sqrt(sum w_i e_i^2)) (1 + (2N + 16) u) <= max(tol ||b||, atol)`, with
//! `u = 2^-53`, `N` the rows and, for each row `i` of `m_i` entries,
//! `e_i = (m_i + 6) u (|b̂_i| + sum_j |â_ij x̂_j|)`.
//!
//! Derivation (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM
//! 2002, ch. 3: the model `fl(a op b) = (a op b)(1 + d)`, `|d| <= u`, products of `k` such
//! factors `1 + theta_k` with `|theta_k| <= gamma_k = k u / (1 - k u)`, Lemma 3.1, and the
//! inner-product bound (3.4), valid for any summation order). The caller receives
//! `x = fl(S x̂)` and the system holds `b̂ = fl(S b)`, `â_ij = fl(a_ij fl(s_i s_j))`, so the
//! exact scaled residual of that x is `rho_i = b̂_i (1 + theta_1) - sum_j â_ij x̂_j
//! (1 + theta_3)`, while the computed row is `r̂_i = b̂_i (1 + d) - sum_j â_ij x̂_j
//! (1 + theta_{m_i + 1})`; hence `|r̂_i - rho_i| <= gamma_{m_i + 4} (|b̂_i| +
//! sum_j |â_ij x̂_j|)`, and the computed `|b̂_i| + sum_j |â_ij x̂_j|` (low by at most
//! `gamma_{m_i + 1}`) times `(m_i + 6) u` still bounds it for rows of fewer than `10^7`
//! entries. In the original norm `||b - A x|| = ||S^-1 rho|| <= ||S^-1 r̂|| +
//! ||S^-1 (r̂ - rho)||`, each side from a computed weighted sum of squares whose
//! `N + 4` roundings per term (weights `w = fl(1 / fl(s^2))` included), like those of
//! `||b||` and of the test itself, the factor `1 + (2N + 16) u` covers. The bound assumes
//! no underflow or overflow in these operations, and for an embedder's operator
//! ([`crate::Operator`]), whose rounding is unknown here, it is 0.
//!
//! A check whose computed residual meets the target while the certified one does not is a
//! failed check like any other (the residual is replaced, the method goes on): from then
//! on the recurrence must reach the target less that check's bound before the next check
//! (`System::margin`), and where the bound alone exceeds the target the solve ends as
//! `stagnated` at once. Reports keep the computed `relres_true`. Solves whose checks meet
//! the target by more than the bound (every ordinary tolerance) are unchanged, bit for
//! bit, except for the bound's own work: its slot in each check's reduction (one value
//! more) and its flops in the check's pass.
//!
//! A method that breaks down returns [`KrylovError::Breakdown`] from its loop (built by
//! `breakdown`, `finite_or`, `curvature`) and leaves its last iterate in `x`; every
//! such test is on globally reduced values (bit-identical on all ranks, as the allreduce
//! the configuration requires guarantees), so all ranks return it at the same iteration.
//! [`crate::Solver::solve`] turns it into a report ([`crate::StopReason::Breakdown`]) with
//! that iterate and its recomputed true residual.
//!
//! See `README.md` in this folder for the family and its stability trade-offs.

use castack_collectives::Communicator;

use crate::basis::SStepBasis;
use crate::config::SolverConfig;
use crate::method::Method;
use crate::operator::{LinearOperator, SysMat};
use crate::precond::Pc;
use crate::ritz::RitzRecord;
use crate::KrylovError;
use castack_linalg::device::{Device, UNIT_ROUNDOFF};
use castack_linalg::dist::{DistVec, MatrixPowers};
use castack_linalg::ops::Ops;

// The method `cg` of the family `cg`: the file name follows the registry name.
mod cacg;
mod cbcg;
mod cbcgr;
mod ccg;
#[allow(clippy::module_inception)]
mod cg;
mod control;
mod groppcg;
mod pipecg;
mod pipeprcg;
mod plcg;
mod prcg;
mod smoothing;
mod sstep;

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
    Ok(sys.ops.dot(x, r, at + 2)?)
}

/// Whether a periodic residual replacement (`replace_every = Some(n)`) is due after `done`
/// (CG-equivalent) iterations: `done` is a positive multiple of `n`.
pub(crate) fn periodic_due(every: Option<usize>, done: usize) -> bool {
    every.is_some_and(|n| done > 0 && done.is_multiple_of(n))
}

/// State shared by the methods: the operation layer, the scaled system and the residual
/// bookkeeping.
pub(crate) struct System<'c, C: Communicator + ?Sized, D: Device> {
    pub(crate) ops: Ops<'c, C, D>,
    pub(crate) a: SysMat<'c, C, D>,
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
    /// The power of two the right-hand side was scaled by for this solve (1 for ordinary
    /// inputs): the returned solution is `S x̂ / out_scale`.
    pub(crate) out_scale: f64,
    /// The least weight of the original norm over all rows (1 without preconditioning).
    pub(crate) wmin: f64,
    pub(crate) cfg: SolverConfig,
    pub(crate) history: Vec<f64>,
    pub(crate) replacements: u64,
    /// Breakdowns of plcg's pipeline (each a check, then a restart in `replacements`
    /// unless the check ends the solve).
    pub(crate) pipeline_breakdowns: u64,
    /// The embedder's monitor ([`crate::Solver::set_monitor`]).
    pub(crate) monitor: Option<Monitor<'c>>,
    /// Whether the monitor must see the exact recurrence residual (cg then computes its
    /// original-norm sum in every iteration); not for a progress callback.
    pub(crate) monitor_exact: bool,
    /// The CG coefficients for the Ritz-value estimates (`cfg.eigs`).
    pub(crate) ritz: RitzRecord,
    /// The last recorded (CG-equivalent iterations, relative recurrence residual)
    /// ([`System::record`], [`System::record_block`]): how far a solve that broke down got.
    pub(crate) last: Option<(usize, f64)>,
    /// Stagnation watch ([`System::check_end`]): the least true residual norm a failed
    /// check found after the recurrence claimed convergence, and how many such checks in a
    /// row found none below it.
    pub(crate) stagnation: (f64, u32),
    /// What the certified verdict asks of a residual beyond the target
    /// ([`System::check_end`]): 0 until a check's computed true residual met the target
    /// while its certified bound did not, then that check's error bound (and the
    /// certificate's relative slack), by which [`System::meets`] lowers the target a
    /// recurrence residual must reach before the next check.
    pub(crate) margin: f64,
    /// The preconditioner `M^-1` applied in the loop (`None`: the method's
    /// unpreconditioned form; `jacobi` and `none` only scale).
    pub(crate) pc: Option<Pc<'c, C, D>>,
    /// Applications of `pc` in this solve.
    pub(crate) precond_applies: u64,
    /// The agreed IC(0) shift (`bjacobi_ic0`).
    pub(crate) precond_shift: Option<f64>,
    /// Scratch for `M^-1 Â s_j` in a preconditioned basis (made on first use, then kept).
    pub(crate) pc_tmp: Option<DistVec<D>>,
}

/// A monitor: called with (CG-equivalent iterations done, relative recurrence residual in
/// the original system's norm) after each iteration, or each outer step of the s-step
/// methods.
pub(crate) type Monitor<'c> = Box<dyn FnMut(usize, f64) + Send + 'c>;

/// Outcome of a method's iteration loop.
pub(crate) struct LoopEnd {
    pub(crate) iterations: usize,
    pub(crate) equivalent: usize,
    pub(crate) converged: bool,
    /// Stopped early: the true residual no longer decreases ([`System::check_end`]).
    pub(crate) stagnated: bool,
    pub(crate) relres_recurrence: f64,
    pub(crate) relres_true: f64,
}

/// Relative slack of [`System::wnorm_floor`]: the computed `r.r` and `||r||_w^2` each carry
/// a relative rounding error below `N eps` (`N` values summed, 1e-4 at 10^12 rows).
const FLOOR_SLACK: f64 = 1e-3;

/// How far (in norm) above the target the floor must be before an iteration may skip the
/// original-norm sum: CG's residual rarely falls tenfold in one iteration.
const SKIP_MARGIN: f64 = 10.0;

/// Failed true-residual checks in a row, each after the recurrence claimed convergence
/// (finding no true residual below the least found before) or had [`drifted`] far below
/// the true residual (none below [`STAGNATION_GAIN`] times that least), after which a
/// solve stops as
/// stagnated: the iterate no longer improves (a solution below the double range, or the
/// attainable accuracy of the method reached above the tolerance), so more iterations
/// would only repeat the same replacement until `max_iter`.
pub(crate) const STAGNATION_CHECKS: u32 = 3;

/// The fraction of the least true residual so far that a check after a drift must find to
/// count as progress ([`STAGNATION_CHECKS`]): at the attainable accuracy the true residual of
/// successive iterates wanders within a small factor of its floor, and a new least by a
/// hair is rounding, not progress.
pub(crate) const STAGNATION_GAIN: f64 = 0.5;

/// How far below the true residual the recurrence residual must have fallen for the
/// method to be at its attainable accuracy ([`drifted`]).
const ATTAINABLE_DRIFT: f64 = 0.1;

/// Whether a recurrence residual `recurrence` has drifted far below the true residual
/// `truth` of the same iterate (norms or relative norms alike): `truth` is finite and
/// `recurrence` below `ATTAINABLE_DRIFT` of it, so at least 90% of the true residual is the
/// gap `b - A x - r` the recurrences accumulated in rounding (Greenbaum 1997,
/// Strakos-Tichy 2002). The method is then at its attainable accuracy: its updates no
/// longer reduce the true residual, and a curvature that comes out negative, NaN or
/// underflowed says nothing about A (a breakdown there is a stagnation,
/// `solver::after_breakdown`; an indefinite matrix breaks down while the two residuals
/// still agree).
pub(crate) fn drifted(recurrence: f64, truth: f64) -> bool {
    truth.is_finite() && recurrence.is_finite() && recurrence < ATTAINABLE_DRIFT * truth
}

impl<C: Communicator + ?Sized, D: Device> System<'_, C, D> {
    /// The end of the loop at a true-residual check finding the original norm `tnorm`
    /// with the bound `enorm` on its rounding error (the square root of the check's
    /// `sum w_i e_i^2`, see the module doc), after `iterations` (outer) and `equivalent`
    /// CG-equivalent iterations, the recurrence's norm being `rnorm`: converged when the
    /// certified norm meets the tolerance ([`System::certified`]), out of budget at
    /// `equivalent >= max_iter`, stagnated after [`STAGNATION_CHECKS`] failed checks in a
    /// row (counting only checks at which the recurrence met the tolerance or had
    /// [`drifted`], not periodic ones on track) without progress ([`STAGNATION_CHECKS`]);
    /// `None`: go on (the caller replaces its residual).
    ///
    /// A check whose computed `tnorm` meets the target while the certified norm does not
    /// is a failed check: from then on [`System::meets`] asks the recurrence for that much
    /// less (`System::margin`) before the next check, and where the bound alone misses
    /// the target (no iterate near this one can be certified) the solve ends as stagnated
    /// at once.
    pub(crate) fn check_end(
        &mut self,
        tnorm: f64,
        enorm: f64,
        rnorm: f64,
        iterations: usize,
        equivalent: usize,
    ) -> Option<LoopEnd> {
        let converged = self.certified(tnorm, enorm);
        let mut stagnated = false;
        let claimed = self.meets(rnorm);
        if !converged && (claimed || drifted(rnorm, tnorm)) {
            // Progress is any new least while the recurrence claims convergence (the true
            // residual closing in on the target), a real gain when it only drifted.
            let gain = if claimed { 1.0 } else { STAGNATION_GAIN };
            let (best, strikes) = &mut self.stagnation;
            if tnorm < gain * *best {
                *best = tnorm;
                *strikes = 0;
            } else {
                *strikes += 1;
                stagnated = *strikes >= STAGNATION_CHECKS;
            }
        }
        let target = self.target();
        if !converged && tnorm <= target {
            // Only the certificate failed: aim below the target by the bound; where the
            // bound alone misses it, no iterate near this one can be certified.
            self.margin = enorm + self.certificate_slack() * target;
            stagnated |= self.margin >= target || self.margin.is_nan();
        }
        (converged || stagnated || equivalent >= self.cfg.max_iter).then(|| LoopEnd {
            iterations,
            equivalent,
            converged,
            stagnated: stagnated && equivalent < self.cfg.max_iter,
            relres_recurrence: rnorm / self.bnorm,
            relres_true: tnorm / self.bnorm,
        })
    }

    /// Whether a recurrence (or estimated) residual of original norm `rnorm` meets the
    /// tolerances: `rnorm <= max(tol ||b||, atol)`, less `System::margin` once a check
    /// found the certificate wanting.
    pub(crate) fn meets(&self, rnorm: f64) -> bool {
        rnorm + self.margin <= self.cfg.tol * self.bnorm || rnorm + self.margin <= self.cfg.atol
    }

    /// Whether a computed true residual of original norm `tnorm`, whose evaluation error is
    /// at most `enorm` in that norm, certainly meets the tolerances for the solution the
    /// caller receives: `(tnorm + enorm) (1 + g) <= max(tol ||b||, atol)`, the slack `g`
    /// ([`System::certificate_slack`]) covering the rounding of the two reduced sums of
    /// squares, of `||b||` and of this test (module doc).
    pub(crate) fn certified(&self, tnorm: f64, enorm: f64) -> bool {
        (tnorm + enorm) * (1.0 + self.certificate_slack()) <= self.target()
    }

    /// The relative slack of [`System::certified`]: `(2 N + 16) u` for `N` rows in all.
    fn certificate_slack(&self) -> f64 {
        (2 * self.a.n() + 16) as f64 * UNIT_ROUNDOFF
    }

    /// The original norm a residual must reach: `max(tol ||b||, atol)`.
    fn target(&self) -> f64 {
        (self.cfg.tol * self.bnorm).max(self.cfg.atol)
    }

    /// A certified lower bound on the computed `||r||_w^2` of a residual whose reduced
    /// `r.r` is `rr`: `sum w_i r_i^2 >= wmin r.r`, less the rounding slack of both sums.
    pub(crate) fn wnorm_floor(&self, rr: f64) -> f64 {
        self.wmin * rr * (1.0 - FLOOR_SLACK)
    }

    /// Whether a residual with reduced `r.r = rr` misses the target for certain (whatever
    /// its weighted norm).
    pub(crate) fn misses_for_certain(&self, rr: f64) -> bool {
        self.wnorm_floor(rr).sqrt() > self.target()
    }

    /// The original-norm sum after an update whose reduction brought `reduced` in its place
    /// and `r.r = rr`, and whether it is undecided. When the update `skipped` the sum, its
    /// floor stands in: it misses the target for certain, as the sum itself would, or
    /// (r.r fell more than `SKIP_MARGIN^2`-fold in one iteration) the stopping test is
    /// undecided and the next check's reduction brings the sum (cg.rs, ccg.rs).
    pub(crate) fn wnorm_after(&self, skipped: bool, reduced: f64, rr: f64) -> (f64, bool) {
        if skipped {
            (self.wnorm_floor(rr), !self.misses_for_certain(rr))
        } else {
            (reduced, false)
        }
    }

    /// Whether iteration `it`, whose residual starts at `r.r = rr`, may leave the
    /// original-norm sum out of its residual update: far from the target (the floor
    /// [`SKIP_MARGIN`] times above it), no history or exact monitor asked for, and not the
    /// last iteration
    /// (whose norm is reported). Iterates do not depend on it; see `cg.rs`.
    pub(crate) fn may_skip_wnorm(&self, rr: f64, it: usize) -> bool {
        !self.cfg.history
            && !self.monitor_exact
            && it + 1 < self.cfg.max_iter
            && self.wnorm_floor(rr).sqrt() > SKIP_MARGIN * self.target()
    }

    /// `z = M^-1 r` with the loop's preconditioner (counted in `precond_applies`); a copy
    /// where there is none, so a method may call it unconditionally.
    pub(crate) fn precondition(
        &mut self,
        r: &DistVec<D>,
        z: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        match &mut self.pc {
            Some(pc) => {
                self.precond_applies += 1;
                pc.apply(&mut self.a, &mut self.ops, r, z)
            }
            None => Ok(self.ops.copy(r, z)?),
        }
    }

    /// A zero vector laid out for the matrix (owned values and input slots).
    pub(crate) fn new_vec(&mut self) -> Result<DistVec<D>, KrylovError> {
        let (nl, ne) = (self.a.n_local(), self.a.n_ext());
        Ok(self.ops.new_vec(nl, ne)?)
    }

    /// `count` zero vectors laid out for the matrix.
    pub(crate) fn new_vecs(&mut self, count: usize) -> Result<Vec<DistVec<D>>, KrylovError> {
        (0..count).map(|_| self.new_vec()).collect()
    }

    /// `N` zero vectors laid out for the matrix (a method's work vectors, made in order).
    pub(crate) fn vecs<const N: usize>(&mut self) -> Result<[DistVec<D>; N], KrylovError> {
        let made = self.new_vecs(N)?;
        Ok(made
            .try_into()
            .unwrap_or_else(|_: Vec<_>| unreachable!("new_vecs makes N vectors")))
    }

    /// The initial residual (setup) `r = b̂ - Â x` when `x0_given` (one counted exchange),
    /// else `b̂` (no SpMV needed), and, in ONE counted reduction, `[r.r, ||r||_w^2]`.
    pub(crate) fn initial_residual(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        x0_given: bool,
    ) -> Result<[f64; 2], KrylovError> {
        if x0_given {
            self.true_residual_local(x, r, 0)?;
        } else {
            self.ops.copy(&self.bhat, r)?;
            self.ops.dot(r, r, 0)?;
            self.ops.wnorm(r, &self.w, 1)?;
        }
        let mut sums = [0.0; 2];
        self.ops.reduce(&mut sums)?;
        Ok(sums)
    }

    /// The true-residual check's residual: `r = b̂ - Â x` (one counted exchange) with
    /// this rank's `[r.r, ||r||_w^2]` in the reduction slots `at`, `at + 1` (the bits of
    /// [`System::true_residual_local`]) and, in `bound_at`, its part of `sum w_i e_i^2`,
    /// the square of the bound on the original norm's rounding error (module doc,
    /// *Certified convergence*), from the same pass over the matrix; left for the caller
    /// to fuse into a reduction of its own. `x` is first made the iterate the caller will
    /// receive, as in [`System::true_residual_local`]. For an embedder's operator, whose
    /// rounding this crate cannot see, the bound is 0: the computed residual decides.
    pub(crate) fn checked_residual_local(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        at: usize,
        bound_at: usize,
    ) -> Result<(), KrylovError> {
        self.ops.representable(&self.s, self.out_scale, x)?;
        match &mut self.a {
            SysMat::Csr(a) => {
                let (b, w) = (&self.bhat, &self.w);
                Ok(a.residual_bound(&mut self.ops, x, b, w, r, at, bound_at)?)
            }
            SysMat::User(_) => {
                self.a.spmv(&mut self.ops, x, r)?;
                self.ops.residual_norms(&self.bhat, r, &self.w, at)?;
                Ok(self.ops.set_slot(bound_at, 0.0)?)
            }
        }
    }

    /// [`System::checked_residual_local`] in ONE counted reduction:
    /// `[r.r, ||r||_w^2, sum w_i e_i^2]`.
    pub(crate) fn checked_residual(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
    ) -> Result<[f64; 3], KrylovError> {
        self.checked_residual_local(x, r, 0, 2)?;
        let mut sums = [0.0; 3];
        self.ops.reduce(&mut sums)?;
        Ok(sums)
    }

    /// `r = b̂ - Â x` (one counted exchange) and this rank's `[r.r, ||r||_w^2]` into the
    /// reduction slots `at`, `at + 1`, left for the caller to fuse into a reduction of its
    /// own; `x` is first made the iterate the caller will receive
    /// ([`Ops::representable`]: unchanged unless an entry under- or overflows on the way
    /// out), so a convergence claim holds for the returned solution.
    pub(crate) fn true_residual_local(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        // The residual of the solution the caller receives: entries that under- or
        // overflow on the way out (an extreme scaling) are first made what they will be.
        self.ops.representable(&self.s, self.out_scale, x)?;
        self.a.spmv(&mut self.ops, x, r)?;
        Ok(self.ops.residual_norms(&self.bhat, r, &self.w, at)?)
    }

    /// `r = b̂ - Â x` (one counted exchange), no sums; `x` first made the iterate the
    /// caller will receive, as in [`System::true_residual_local`].
    pub(crate) fn residual(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        self.ops.representable(&self.s, self.out_scale, x)?;
        self.a.spmv(&mut self.ops, x, r)?;
        Ok(self.ops.xpay(&self.bhat, -1.0, r)?)
    }

    /// `r = b̂ - Â x` and its image `ar = Â r` (two counted exchanges), this rank's
    /// `r.ar` into the reduction slot `dot` when given (fused with the SpMV); `x` first
    /// made the iterate the caller will receive, as in [`System::true_residual_local`].
    pub(crate) fn residual_image(
        &mut self,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        ar: &mut DistVec<D>,
        dot: Option<usize>,
    ) -> Result<(), KrylovError> {
        self.residual(x, r)?;
        match dot {
            Some(at) => self.a.spmv_dot(&mut self.ops, r, ar, at),
            None => self.a.spmv(&mut self.ops, r, ar),
        }
    }

    /// `basis` of size `k` from `s[0]` (see [`SStepBasis::build`]): `k` depth-1 exchanges,
    /// or ONE depth-`k` exchange through the matrix powers plan when there is one.
    ///
    /// With a loop preconditioner (`self.pc`) the basis is that of the preconditioned
    /// operator `M^-1 Â`: `a_s[j] = Â s_j` (one counted exchange each) and `s_{j+1}` the
    /// basis recurrence applied to `M^-1 a_s[j]` in place of `Â s_j`, so
    /// `M^-1 Â S[:, :k] = S T` with the basis's own `T` (its parameters must then describe
    /// the spectrum of `M^-1 Â`). `k` SpMVs and `k` applications of `M^-1`; no matrix
    /// powers kernel (configurations with one are refused).
    pub(crate) fn build_basis(
        &mut self,
        basis: &SStepBasis,
        k: usize,
        s: &mut [DistVec<D>],
        a_s: &mut [DistVec<D>],
    ) -> Result<(), KrylovError> {
        if self.pc.is_none() {
            return match &mut self.mpk {
                Some(m) => basis.build_mpk(m, &mut self.ops, k, s, a_s),
                None => basis.build(&mut self.a, &mut self.ops, k, s, a_s),
            };
        }
        assert!(s.len() > k && a_s.len() >= k, "basis: too few work vectors");
        let mut t = match self.pc_tmp.take() {
            Some(t) => t,
            None => self.new_vec()?,
        };
        let res = (|| {
            let n = self.ops.n();
            for j in 0..k {
                self.a.spmv(&mut self.ops, &mut s[j], &mut a_s[j])?;
                self.precondition(&a_s[j], &mut t)?;
                let (done, rest) = s.split_at_mut(j + 1);
                let prev = j.checked_sub(1).map(|i| done[i].raw());
                self.ops.basis_step(
                    n,
                    basis.step(j),
                    t.raw(),
                    done[j].raw(),
                    prev,
                    rest[0].raw_mut(),
                )?;
            }
            Ok(())
        })();
        self.pc_tmp = Some(t);
        res
    }

    /// CA-CG's two bases, each given as its vectors and their images: `basis` of size `k`
    /// from `pv[0]` (into `pv`, `pa`) and of size `k - 1` from `rv[0]` (into `rv`, `ra`;
    /// nothing at `k = 1`). Without a matrix powers
    /// plan: [`System::build_basis`] twice (`2k - 1` depth-1 exchanges). With one: ONE
    /// depth-`k` exchange carrying both start vectors
    /// ([`MatrixPowers::apply_pair_with`]), bit-identical to two [`System::build_basis`]
    /// calls, which would cost two exchanges (one at `k = 1`, where only `pv[0]` is
    /// exchanged).
    pub(crate) fn build_basis_pair(
        &mut self,
        basis: &SStepBasis,
        k: usize,
        [pv, pa]: [&mut [DistVec<D>]; 2],
        [rv, ra]: [&mut [DistVec<D>]; 2],
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

    /// Record the original-norm recurrence residual `rnorm` of an iteration (an outer step
    /// of the s-step methods) that brought the CG-equivalent iterations to `equivalent`:
    /// into `history` (with `cfg.history`) and to the monitor (if any), relative to `||b||`.
    pub(crate) fn record(&mut self, equivalent: usize, rnorm: f64) {
        let rel = rnorm / self.bnorm;
        self.last = Some((equivalent, rel));
        if self.cfg.history {
            self.history.push(rel);
        }
        if let Some(m) = &mut self.monitor {
            m(equivalent, rel);
        }
    }

    /// Record the residuals `rnorms` of the inner iterations of one outer step that
    /// brought the CG-equivalent iterations to `equivalent` (`cacg`): each into `history`,
    /// the last to the monitor (one call per outer step; none when the step took none).
    pub(crate) fn record_block(&mut self, equivalent: usize, rnorms: &[f64]) {
        if let Some(r) = rnorms.last() {
            self.last = Some((equivalent, r / self.bnorm));
        }
        if self.cfg.history {
            let b = self.bnorm;
            self.history.extend(rnorms.iter().map(|r| r / b));
        }
        if let (Some(m), Some(r)) = (&mut self.monitor, rnorms.last()) {
            m(equivalent, r / self.bnorm);
        }
    }

    /// One CG step's coefficients for the Ritz values (`cfg.eigs`, [`crate::ritz`]): step
    /// length `alpha` and `beta` of the next direction `p' = r' + beta p`.
    pub(crate) fn ritz_step(&mut self, alpha: f64, beta: f64) {
        self.ritz.alpha(alpha);
        self.ritz.beta(beta);
    }

    /// One CG step on the direction `p = r + beta_prev p_old` (`None`: `p = r`, a
    /// (re)start, which begins a new Lanczos run) with step length `alpha`.
    pub(crate) fn ritz_direction(&mut self, beta_prev: Option<f64>, alpha: f64) {
        match beta_prev {
            Some(b) => self.ritz.beta(b),
            None => self.ritz.restart(),
        }
        self.ritz.alpha(alpha);
    }

    /// The coefficients of accepted steps, `alphas[j]` with `betas[j]` (`cacg`).
    pub(crate) fn ritz_steps(&mut self, alphas: &[f64], betas: &[f64]) {
        for (&a, &b) in alphas.iter().zip(betas) {
            self.ritz_step(a, b);
        }
    }

    /// The directions restart from the residual (`p = r`): a new Lanczos run begins.
    pub(crate) fn ritz_restart(&mut self) {
        self.ritz.restart();
    }
}

/// Run the configured method's iteration loop on `sys` from the iterate `x` (the solve's
/// scaled system is set; `x0_given`: `x` holds a start other than zero). The one-step
/// methods have a loop of their own for a loop preconditioner (`sys.pc`); the block
/// methods' machinery takes it in.
pub(crate) fn run_method<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    match sys.cfg.method {
        Method::Cg => cg::run(sys, x, x0_given),
        Method::Ccg => ccg::run(sys, x, x0_given),
        Method::Pipecg => pipecg::run(sys, x, x0_given),
        Method::Cbcg => sstep::run::<cbcg::Cbcg, _, _>(sys, x, x0_given),
        Method::Cbcgr => sstep::run::<cbcgr::Cbcgr, _, _>(sys, x, x0_given),
        Method::Cacg => cacg::run(sys, x, x0_given),
        Method::Prcg => prcg::run(sys, x, x0_given),
        Method::Pipeprcg => pipeprcg::run(sys, x, x0_given),
        Method::Groppcg => groppcg::run(sys, x, x0_given),
        Method::Plcg => plcg::run(sys, x, x0_given),
    }
}
