//! Loop control of the one-step methods (`cg`, `ccg` and their preconditioned forms; `pipecg`
//! shares the verdict): when the true residual is checked, the check's verdict, the restart
//! after a failed one, and the step a curvature allows.
//!
//! A check is due when the recurrence's original norm meets the target, at `max_iter`, or
//! after a curvature at rounding level. After an update that skipped the original-norm sum
//! and whose floor could not decide the stopping test ([`System::wnorm_after`]), the check
//! comes at once and its one reduction also carries the recurrence's sum: when that misses
//! the target the check was not due (`early` in the methods' counts) and the loop goes on.
//! A check after a skipped sum that its floor did decide (a rounding-level curvature) also
//! carries the sum, so the norms a check reports are exact. A failed check replaces the
//! recurrence residual by the true one (the method's part) and restarts the directions from
//! it ([`Control::restarted`]).

use std::ops::ControlFlow;

use castack_collectives::Communicator;

use super::{LoopEnd, System};
use crate::breakdown::Curvature;
use crate::KrylovError;
use castack_linalg::device::Device;

/// What a method's true-residual check reduced.
pub(crate) struct Checked<T> {
    /// The method's sums of the true residual, for its restart after a miss.
    pub(crate) sums: T,
    /// The true residual's original norm `||b - A x||_w^2`.
    pub(crate) tw: f64,
    /// The bound `sum w_i e_i^2` on the true residual's rounding error
    /// ([`System::checked_residual_local`]).
    pub(crate) ew: f64,
    /// The recurrence's `||r||_w^2`, when the check was asked to carry it (else unread).
    pub(crate) rw: f64,
}

/// The true-residual check of a method that keeps no sums of it beyond its norms (prcg,
/// pipeprcg, groppcg: a miss restarts them from the true residual alone): `t = b̂ - Â x`
/// and ONE reduction of `[t.t, ||t||_w^2, bound]` ([`System::checked_residual`]).
pub(crate) fn check_alone<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut castack_linalg::dist::DistVec<D>,
    t: &mut castack_linalg::dist::DistVec<D>,
) -> Result<Checked<()>, KrylovError> {
    let s = sys.checked_residual(x, t)?;
    Ok(Checked {
        sums: (),
        tw: s[1],
        ew: s[2],
        rw: s[1],
    })
}

/// What [`Control::check`] decided.
pub(crate) enum Due<T> {
    /// No check due (or an early one that found it was not): take the step.
    Step,
    /// The loop ends here.
    End(LoopEnd),
    /// The check missed: the method replaces its residual by the true one (`sums`) and
    /// calls [`Control::restarted`].
    Missed(T),
}

/// The loop-control state of a one-step method.
#[derive(Debug)]
pub(crate) struct Control {
    /// The directions were just (re)started from the residual.
    restart: bool,
    /// A curvature at rounding level asks for a true-residual check.
    rounding: bool,
    /// The largest `1/alpha = p^T A p / r^T r` (`r^T M^-1 r` with a preconditioner) so far:
    /// a Lanczos lower bound on `||A||` (no message), scaling the rounding level.
    anorm: f64,
    /// The recurrence's original-norm sum is unknown: the last update skipped it and its
    /// floor did not decide the stopping test.
    undecided: bool,
    /// The recurrence's original-norm sum is the floor of a skipped one.
    floor: bool,
}

impl Control {
    /// The state at the start: directions from the residual, nothing skipped.
    pub(crate) fn new() -> Self {
        Self {
            restart: true,
            rounding: false,
            anorm: 0.0,
            undecided: false,
            floor: false,
        }
    }

    /// The original-norm sum after an update ([`System::wnorm_after`]; `skipped`: the
    /// update left it out), kept for the next [`Control::check`].
    pub(crate) fn wnorm_after<C: Communicator + ?Sized, D: Device>(
        &mut self,
        sys: &System<'_, C, D>,
        skipped: bool,
        reduced: f64,
        rr: f64,
    ) -> f64 {
        let rw;
        (rw, self.undecided) = sys.wnorm_after(skipped, reduced, rr);
        self.floor = skipped;
        rw
    }

    /// Whether the next pass checks the true residual for an undecided skipped sum.
    pub(crate) fn undecided(&self) -> bool {
        self.undecided
    }

    /// The true-residual check at iteration `it` when one is due (module doc), `rw` the
    /// recurrence's `||r||_w^2` (set to the reduced one when the check carried it).
    /// `check(sys, with_sum)` computes the true residual and reduces its sums in ONE
    /// message, carrying the recurrence's sum when `with_sum`.
    pub(crate) fn check<C, D, T, F>(
        &mut self,
        sys: &mut System<'_, C, D>,
        method: &'static str,
        rw: &mut f64,
        it: usize,
        check: F,
    ) -> Result<Due<T>, KrylovError>
    where
        C: Communicator + ?Sized,
        D: Device,
        F: FnOnce(&mut System<'_, C, D>, bool) -> Result<Checked<T>, KrylovError>,
    {
        let checked = if std::mem::take(&mut self.undecided) {
            let checked = check(sys, true)?;
            (*rw, self.floor) = (checked.rw, false);
            let rnorm = crate::breakdown::finite_or(method, *rw, it, "||r||")?.sqrt();
            if !(sys.meets(rnorm) || it >= sys.cfg.max_iter) {
                return Ok(Due::Step);
            }
            checked
        } else {
            let rnorm = crate::breakdown::finite_or(method, *rw, it, "||r||")?.sqrt();
            if !(std::mem::take(&mut self.rounding) || sys.meets(rnorm) || it >= sys.cfg.max_iter) {
                return Ok(Due::Step);
            }
            let checked = check(sys, self.floor)?;
            if std::mem::take(&mut self.floor) {
                *rw = checked.rw;
            }
            checked
        };
        Ok(
            match sys.verdict(method, checked.tw, checked.ew, rw.sqrt(), it)? {
                ControlFlow::Break(end) => Due::End(end),
                ControlFlow::Continue(_) => Due::Missed(checked.sums),
            },
        )
    }

    /// After a missed check, the residual replaced: the directions restart from it (a new
    /// Lanczos run), counted in `residual_replacements`.
    pub(crate) fn restarted<C: Communicator + ?Sized, D: Device>(
        &mut self,
        sys: &mut System<'_, C, D>,
    ) {
        self.restart = true;
        sys.ritz_restart();
        sys.replacements += 1;
    }

    /// The step length `g / value` a curvature `value` allows at iteration `it` (`g` the
    /// reduced `r.r`, or `r.z`, of the step), or `None` after a curvature at rounding level
    /// (the next [`Control::check`] checks the true residual). The curvature is named
    /// `at_restart` right after a (re)start, else `p^T A p`; its rounding level is
    /// `g * anorm + cancelled` ([`crate::breakdown::curvature`]; `cancelled`: the size of the terms the
    /// curvature is the difference of, 0 where it is computed directly).
    pub(crate) fn step(
        &mut self,
        method: &'static str,
        value: f64,
        it: usize,
        at_restart: &'static str,
        g: f64,
        cancelled: f64,
    ) -> Result<Option<f64>, KrylovError> {
        let quantity = if self.restart { at_restart } else { "p^T A p" };
        let scale = g * self.anorm + cancelled;
        match crate::breakdown::curvature(method, value, it, quantity, scale, self.restart)? {
            Curvature::Step(v) => {
                self.restart = false;
                self.anorm = self.anorm.max(v / g);
                Ok(Some(g / v))
            }
            Curvature::Rounding => {
                self.rounding = true;
                Ok(None)
            }
        }
    }
}

impl<C: Communicator + ?Sized, D: Device> System<'_, C, D> {
    /// The verdict of a true-residual check at iteration `it` whose reduction brought
    /// `||b - A x||_w^2 = tw` (a breakdown of `method` when not finite) and the bound
    /// `ew = sum w_i e_i^2` on its rounding error, the recurrence's norm being `rnorm`
    /// ([`System::check_end`]): the end of the loop, or go on (with the true residual's
    /// norm).
    pub(crate) fn verdict(
        &mut self,
        method: &'static str,
        tw: f64,
        ew: f64,
        rnorm: f64,
        it: usize,
    ) -> Result<ControlFlow<LoopEnd, f64>, KrylovError> {
        let tnorm = crate::breakdown::finite_or(method, tw, it, "||b - A x||")?.sqrt();
        Ok(
            match self.check_end(tnorm, ew.max(0.0).sqrt(), rnorm, it, it) {
                Some(end) => ControlFlow::Break(end),
                None => ControlFlow::Continue(tnorm),
            },
        )
    }

    /// `r^T M^-1 r = ru` must be positive for a residual that misses the target (`M`
    /// positive definite); zero is allowed only with a zero residual (`rw`, its
    /// `||r||_w^2`), which the next check takes. Else a breakdown of `method` at `it`.
    pub(crate) fn positive_ru(
        &self,
        method: &'static str,
        ru: f64,
        rw: f64,
        it: usize,
    ) -> Result<(), KrylovError> {
        if ru > 0.0 || (ru == 0.0 && rw == 0.0) || self.meets(rw.max(0.0).sqrt()) {
            Ok(())
        } else {
            Err(crate::breakdown::breakdown(method, it, "r^T M^-1 r", ru))
        }
    }
}
