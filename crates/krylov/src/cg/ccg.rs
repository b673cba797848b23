//! `ccg` — Chronopoulos-Gear conjugate gradients: one global reduction per iteration.
//!
//! Reference: A. T. Chronopoulos and C. W. Gear, "s-step iterative methods for symmetric
//! linear systems", J. Comput. Appl. Math. 25(2), 1989 (the s = 1 case); recurrence as
//! corrected in the project's ALGORITHMS.md.
//!
//! ```text
//! r = b - A x0;  Ar = A r;  [g = r.r, d = r.Ar];  a = g / d;  beta = 0
//! loop: p = r + beta p;  Ap = Ar + beta Ap;  x += a p;  r -= a Ap;  Ar = A r
//!       [ONE reduction: g' = r.r, ||r||_w^2 (near the target only), d = r.Ar]
//!       beta = g' / g;  a = g' / (d - beta g' / a);  g = g'
//! ```
//!
//! Per iteration: 1 SpMV (one halo exchange), **1 global reduction** of 3 values (`r.r`,
//! the original-norm residual `||r||_w^2`, computed near the target only, and `r.Ar`,
//! fused), two fused passes (all four updates use only the scalars of the previous reduction, so
//! they share one pass):
//!
//! | pass | reads | writes | bytes (n rows, nnz entries, m input slots) |
//! |---|---|---|---|
//! | `p = r + beta p; Ap = Ar + beta Ap; x += a p; r -= a Ap` with `r.r` (`ccg_update` without weights) | r, Ar, p, Ap, x | r, p, Ap, x | `72 n` |
//! | near the target instead: with `r.r`, `r.W r` (`ccg_update`) | r, Ar, p, Ap, x, w | r, p, Ap, x | `80 n` |
//! | `Ar = A r` with `r.Ar` (`spmv_dot`) | A, r (input slots) | Ar | `12 nnz + 16 n + 8 + 8 min(m, nnz)` |
//!
//! about `12 nnz + 96 n` bytes with `m ~ n` (`12 nnz + 104 n` near the target), against
//! [`super::cg`]'s `12 nnz + 88 n`: on 3-D Poisson (7 entries per row) `180 n` against
//! `172 n`, a byte ratio of 1.05 (the unfused sequence, four updates, the fused residual
//! update, an SpMV and a separate dot, moved `12 nnz + 144 n`); `cargo bench -p benches
//! --bench spmv` (`iteration`) reports an iteration's throughput with these bytes. The
//! iterates are the bits of the unfused sequence.
//!
//! The original-norm sum is skipped as in [`super::cg`] (see there): while its floor
//! `wmin r.r` stays more than tenfold (in norm) above the target, the update leaves it out
//! and the floor stands in. After a skipped sum whose new `r.r` no longer misses for
//! certain, the next pass is the true-residual check, whose one reduction also carries the
//! recurrence's sum (a fourth value): when that meets the target, the check is the one
//! computing the sum would have led to (same counts); when it misses (`early`: rare, where
//! the weights are unequal or the sum lands within the floor's slack of the target), the
//! check was not due and the loop goes on from the recurrence. The loop's reduction keeps
//! three places and a check's four whether or not a sum rides in them (a skipped one's
//! place is stale and unread), so every allreduce algorithm (the ring's blocks depend on
//! places and length) sums each value in the same order. A check after a skipped sum (a
//! rounding-level curvature) carries the recurrence's sum in its fourth place. Iterates,
//! iteration counts, message counts (but for `early`) and the norms a check reports are
//! those of always computing the sum (`history` does); only a breakdown report after a
//! skipped sum states its floor as the recurrence norm.
//! Compared with [`super::cg`] it saves one reduction per iteration at the price of one more
//! vector update (`Ap`) and somewhat weaker finite-precision stability.
//! Work vectors: x, r, Ar, p, Ap, and two for the true residual check.
//! Options: `tol`, `atol`, `max_iter`, `history`, `replace_every`.
//!
//! Periodic residual replacement (`replace_every = Some(R)`): in iterations R, 2R, ...
//! `r = b - A x` and `Ap = A p` are recomputed instead of updated (two more SpMVs; the
//! sums ride in the iteration's own reduction, so no extra reduction) and the directions
//! are kept, counted in `residual_replacements`; `halo_exchanges` grows by 2 per periodic
//! replacement, `reductions` not at all.
//!
//! Before declaring convergence the true residual `rt = b - A x` AND `A rt` are computed
//! (two SpMVs) and reduced in ONE message `[rt.rt, rt.A rt, ||rt||_w^2]` with the bound on
//! its rounding error (`super`'s *Certified convergence*). If it misses the
//! tolerance, `r` is replaced by `rt` (counted in `residual_replacements`) and the method
//! restarts from it (`beta = 0`, `p = r`) with the scalars already reduced, so a
//! replacement costs no further reduction.
//!
//! Counting (exact): `setup_reductions` = 2 (`||b||`; the initial `[g, d, ||r||_w^2]`);
//! `reductions = iterations + 1 + C + early` (one per iteration, one per true residual
//! check; C = replacements after a missed check, `residual_replacements` without
//! `replace_every`; `early` the checks made for an undecided sum that then missed the
//! target, rare); `halo_exchanges = iterations + 2 (1 +
//! residual_replacements + early)`, plus the setup exchanges (one for `A r0`, one more for
//! `A x0` when `x0` is given).
//!
//! Breakdowns (typed [`crate::KrylovError::Breakdown`]; the caller gets a report with
//! [`crate::StopReason::Breakdown`] and the last iterate, see [`crate::Solver::solve`]): `r^T A r <= 0` at a (re)start,
//! `p^T A p = d - beta g' / a <= 0`, or a NaN/Inf among the reduced values.
//!
//! ## Preconditioned form
//!
//! ONE loop runs both forms: the recurrence is the preconditioned one below, and the
//! plain form above is its identity case (`u = r`, `w = Ar`, `s = Ap`: no vector, no
//! copy). What `M^-1` changes is a [`Flavor`]'s: the identity fuses the four updates with
//! the residual's sums into `ccg_update`; an applied `M^-1` (`sys.pc`, `bjacobi_ic0`,
//! `chebyshev`, an embedder's) runs the preconditioned Chronopoulos-Gear CG (Chronopoulos
//! and Gear 1989, above; written out as Alg. 2 of P. Ghysels and W. Vanroose, "Hiding
//! global synchronization latency in the preconditioned Conjugate Gradient algorithm",
//! Parallel Computing 40(7), 2014), on the scaled system with `u = M^-1 r`, `w = Â u`,
//! `s = Â p`:
//!
//! ```text
//! r = b̂ - Â x0;  u = M^-1 r;  w = Â u;  [g = r.u, ||r||_w^2, d = w.u];  beta = 0
//! loop: a = g / (d - beta g / a_old)   (g / d at a (re)start)
//!       p = u + beta p;  s = w + beta s;  x += a p;  r -= a s
//!       u = M^-1 r;  w = Â u  [ONE reduction: g' = r.u, ||r||_w^2, d = w.u]
//!       beta = g' / g;  g = g'
//! ```
//!
//! `r` stays the scaled system's own residual, so the stopping test, the checks and every
//! reported norm are those of the unpreconditioned loop; the original-norm sum rides in
//! the iteration's one reduction. The same Krylov method as cg's preconditioned form in
//! exact arithmetic (the Ritz values, `eigs`, are those of `M^-1 Â`).
//!
//! Per iteration: 1 SpMV, 1 application of `M^-1`, **1 reduction** of 3 values; vector
//! passes `xpay` twice, `axpy` twice, the preconditioner's, `spmv_dot` (`w = Â u` with
//! `u.w`), `dot` and `wnorm`. Work vectors: x, r, u, w, p, s and three (rt, ut, wt) for
//! the check. The check before declaring convergence computes `rt = b̂ - Â x`,
//! `ut = M^-1 rt`, `wt = Â ut` (two SpMVs, one application) and reduces
//! `[rt.ut, ||rt||_w^2, wt.ut]` and the bound in ONE message; a miss continues from them with
//! restarted directions and no further reduction. Periodic replacement (`replace_every`)
//! recomputes `r = b̂ - Â x` and `s = Â p` (two SpMVs, no reduction, no extra application:
//! `u`, `w` follow from the new `r` as in every iteration), keeping the directions.
//!
//! Counting (exact; C = replacements after a failed check, P = periodic replacements,
//! `residual_replacements = C + P`; `D` = the Chebyshev degree, 0 for `bjacobi_ic0`):
//! `reductions = iterations + 1 + C`; `halo_exchanges = (1 + D) iterations + (2 + D)
//! (1 + C) + 2 P`; `precond_applies = iterations + 2 + C` (one in the setup, one per
//! iteration, one per check). The setup (in `setup_*`) adds one reduction, `D + 1`
//! exchanges (`M^-1 r0`, `Â u0`) and one more for `Â x0` when `x0` is given: one exchange
//! more than cg's preconditioned setup.
//!
//! Breakdowns as above, with `u^T Â u <= 0` at a (re)start, `d - beta g' / a <= 0`, and
//! `r^T M^-1 r <= 0` for a residual that misses the target (`M` not positive definite).

use castack_collectives::Communicator;

use super::control::{Checked, Control, Due};
use super::{periodic_due, LoopEnd, System};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::{CcgVecs, Device};
use castack_linalg::dist::DistVec;

const NAME: &str = "ccg";

/// The loop, plain or preconditioned (module doc): the identity's fused pass where there
/// is no loop preconditioner, an applied `M^-1` with its own `u` where there is one.
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    if sys.pc.is_some() {
        let [u, ut] = sys.vecs()?;
        iterate(sys, x, x0_given, Applied { u, ut })
    } else {
        iterate(sys, x, x0_given, Identity)
    }
}

/// The one recurrence (module doc) on `r`, `w = Â u`, `p`, `s = Â p` and the check's
/// `rt`, `wt`; `m` decides the passes that `M^-1` changes.
fn iterate<C: Communicator + ?Sized, D: Device, M: Flavor<C, D>>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
    mut m: M,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut w, mut p, mut s, mut rt, mut wt] = sys.vecs()?;
    for &len in M::REDUCTIONS {
        sys.ops.prepare(len)?;
    }

    // Setup: r0, u0 = M^-1 r0, w0 = Â u0 and ONE reduction of [g, ||r0||_w^2, d].
    let [mut g, mut rw, d] = m.start(sys, x, [&mut r, &mut w], x0_given)?;
    sys.ops.set_phase(Phase::Loop);
    // `denom` is the step's denominator: u^T Â u at a (re)start (beta = 0), else
    // d - beta g' / a (= p^T Â p in exact arithmetic). It is checked only when a step is
    // taken, so rounding at an already converged iterate is no breakdown.
    let mut denom = d;
    // The size of the two terms whose difference `denom` is (0 at a (re)start).
    let mut cancelled = 0.0;
    let mut beta = 0.0;
    let mut ctl = Control::new();

    let mut it = 0;
    loop {
        let due = ctl.check(sys, NAME, &mut rw, it, |sys, with_sum| {
            m.check(sys, x, [&mut rt, &mut wt], &r, with_sum)
        })?;
        match due {
            Due::Step => {}
            Due::End(end) => return Ok(end),
            Due::Missed([tg, tw, td]) => {
                // The recurrence drifted: continue from the true residual (and its
                // preconditioned residual and image) and restart the directions from it,
                // with the scalars just reduced.
                std::mem::swap(&mut r, &mut rt);
                std::mem::swap(&mut w, &mut wt);
                m.swap_checked();
                (g, denom, cancelled, rw, beta) = (tg, td, 0.0, tw, 0.0);
                ctl.restarted(sys);
                continue;
            }
        }
        crate::breakdown::finite_or(NAME, g, it, M::RZ)?;
        m.guard(sys, g, rw, it)?;
        // The rounding level: g times the largest `1/a` so far (a lower bound on the
        // largest eigenvalue of M^-1 Â), plus the size of the terms `denom` is the
        // difference of.
        let Some(a) = ctl.step(NAME, denom, it, M::UAU, g, cancelled)? else {
            continue;
        };
        let periodic = periodic_due(sys.cfg.replace_every, it + 1);
        let vecs = [&mut r, &mut w, &mut p, &mut s];
        let (sums, skipped) = m.update(sys, [a, beta], vecs, x, g, it, periodic)?;
        it += 1;
        let g_new = crate::breakdown::finite_or(NAME, sums[0], it, M::RZ)?;
        let d = crate::breakdown::finite_or(NAME, sums[2], it, M::UAU)?;
        rw = ctl.wnorm_after(sys, skipped, sums[1], g_new);
        beta = g_new / g;
        sys.ritz_step(a, beta);
        let term = beta * g_new / a;
        denom = d - term;
        cancelled = M::cancelled(d, term);
        g = g_new;
        sys.record(it, rw.max(0.0).sqrt());
    }
}

/// What the loop preconditioner changes in ccg's recurrence (module doc): where
/// `u = M^-1 r` lives and which passes update the vectors and reduce their sums.
trait Flavor<C: Communicator + ?Sized, D: Device> {
    /// `r.u` as a breakdown names it.
    const RZ: &'static str;
    /// `u^T Â u` as a breakdown names it (the curvature at a (re)start, and `d`).
    const UAU: &'static str;
    /// The reduction lengths the loop uses (prepared before it).
    const REDUCTIONS: &'static [usize];

    /// Set-up: `r = b̂ - Â x` (`b̂` without `x0`), `u = M^-1 r`, `w = Â u` and ONE reduction
    /// of `[r.u, ||r||_w^2, w.u]`.
    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        rw: [&mut DistVec<D>; 2],
        x0_given: bool,
    ) -> Result<[f64; 3], KrylovError>;

    /// The true-residual check: `rt = b̂ - Â x`, `ut = M^-1 rt`, `wt = Â ut` and, in ONE
    /// reduction, `[rt.ut, ||rt||_w^2, wt.ut]` and the bound on `rt`'s rounding error
    /// (with the recurrence's `||r||_w^2` when
    /// `with_sum`).
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        rtwt: [&mut DistVec<D>; 2],
        r: &DistVec<D>,
        with_sum: bool,
    ) -> Result<Checked<[f64; 3]>, KrylovError>;

    /// After a missed check the loop continues from the check's vectors: `u` from `ut`.
    fn swap_checked(&mut self);

    /// `r.u` must be positive for a residual that misses the target (`M` positive
    /// definite; [`System::positive_ru`]); `r.r` needs no such test.
    fn guard(&self, sys: &System<'_, C, D>, g: f64, rw: f64, it: usize) -> Result<(), KrylovError>;

    /// The iteration's passes with step `a` and the previous `beta`:
    /// `p = u + beta p; s = w + beta s; x += a p; r -= a s` (`r = b̂ - Â x`, `s = Â p` from
    /// scratch when `periodic`), `u = M^-1 r`, `w = Â u` and ONE reduction of
    /// `[r.u, ||r||_w^2, w.u]`; whether the original-norm sum was left out (its place
    /// stale).
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        ab: [f64; 2],
        vecs: [&mut DistVec<D>; 4],
        x: &mut DistVec<D>,
        g: f64,
        it: usize,
        periodic: bool,
    ) -> Result<([f64; 3], bool), KrylovError>;

    /// The rounding-level size of `denom = d - term` ([`Control::step`]'s `cancelled`).
    fn cancelled(d: f64, term: f64) -> f64;
}

/// `rt = b̂ - Â x`, `art = Â rt` (two counted exchanges) and, in ONE counted reduction,
/// `[rt.rt, ||rt||_w^2, rt.art]`, `||r||_w^2` of the recurrence's `r` when given
/// (the fourth value: a skipped original-norm sum that its floor could not decide) and
/// the bound on the true residual's rounding error (the fifth,
/// [`System::checked_residual_local`]). The reduction always has five values (without
/// `r` the fourth is a stale slot nobody reads): every value keeps its place and the
/// message its length, so under every allreduce algorithm (the ring's blocks depend on
/// both) each is summed in the same order whether or not the sum rides along.
fn residual_and_image<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    rt: &mut DistVec<D>,
    art: &mut DistVec<D>,
    r: Option<&DistVec<D>>,
) -> Result<Checked<[f64; 3]>, KrylovError> {
    // The fused pass's own norms in 0 and 1 give way to the sums every iteration forms.
    sys.checked_residual_local(x, rt, 0, 4)?;
    sys.a.spmv_dot(&mut sys.ops, rt, art, 2)?;
    sys.ops.dot(rt, rt, 0)?;
    sys.ops.wnorm(rt, &sys.w, 1)?;
    if let Some(r) = r {
        sys.ops.wnorm(r, &sys.w, 3)?;
    }
    let mut s = [0.0; 5];
    sys.ops.reduce(&mut s)?;
    Ok(Checked {
        sums: [s[0], s[1], s[2]],
        tw: s[1],
        ew: s[4],
        rw: s[3],
    })
}

/// No loop preconditioner: `u` is `r`, `w` is `Ar`, and the updates fuse with the sums
/// (module doc's table).
struct Identity;

impl<C: Communicator + ?Sized, D: Device> Flavor<C, D> for Identity {
    const RZ: &'static str = "r^T r";
    const UAU: &'static str = "r^T A r";
    const REDUCTIONS: &'static [usize] = &[3, 5];

    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        [r, ar]: [&mut DistVec<D>; 2],
        x0_given: bool,
    ) -> Result<[f64; 3], KrylovError> {
        if x0_given {
            return Ok(residual_and_image(sys, x, r, ar, None)?.sums);
        }
        sys.ops.copy(&sys.bhat, r)?;
        sys.a.spmv_dot(&mut sys.ops, r, ar, 2)?;
        sys.ops.dot(r, r, 0)?;
        sys.ops.wnorm(r, &sys.w, 1)?;
        let mut s = [0.0; 3];
        sys.ops.reduce(&mut s)?;
        Ok(s)
    }

    /// The check's sums `[rt.rt, ||rt||_w^2, rt.Art]`, its fourth value the recurrence's
    /// sum when asked for (the norm a check reports is then exact).
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        [rt, art]: [&mut DistVec<D>; 2],
        r: &DistVec<D>,
        with_sum: bool,
    ) -> Result<Checked<[f64; 3]>, KrylovError> {
        residual_and_image(sys, x, rt, art, with_sum.then_some(r))
    }

    fn swap_checked(&mut self) {}

    fn guard(&self, _: &System<'_, C, D>, _: f64, _: f64, _: usize) -> Result<(), KrylovError> {
        Ok(())
    }

    /// `p = r + beta p, Ap = Ar + beta Ap, x += a p, r -= a Ap` with `r.r` and, unless it
    /// cannot decide the stopping test, the original-norm `||r||_w^2`, in one pass (the
    /// same `r.r` bits either way); a periodic replacement then recomputes `r = b - A x`
    /// and `Ap = A p` (two SpMVs; their sums replace the pass's in this iteration's
    /// reduction: no extra reduction). `Ar = A r` fused with `r.Ar`: the reduction is
    /// `[r.r, ||r||_w^2, r.Ar]`, its middle slot stale and unread when the sum was skipped
    /// (the same places and length either way, so each value is summed in the same order
    /// by every algorithm).
    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        [a, beta]: [f64; 2],
        [r, ar, p, ap]: [&mut DistVec<D>; 4],
        x: &mut DistVec<D>,
        g: f64,
        it: usize,
        periodic: bool,
    ) -> Result<([f64; 3], bool), KrylovError> {
        let skip = !periodic && sys.may_skip_wnorm(g, it);
        let v = CcgVecs { r, p, ap, x };
        sys.ops
            .ccg_update(a, beta, ar, v, (!skip).then_some(&sys.w), 0)?;
        if periodic {
            sys.replacements += 1;
            sys.a.spmv(&mut sys.ops, p, ap)?;
            sys.true_residual_local(x, r, 0)?;
        }
        sys.a.spmv_dot(&mut sys.ops, r, ar, 2)?;
        let mut sums = [0.0; 3];
        sys.ops.reduce(&mut sums)?;
        Ok((sums, skip))
    }

    fn cancelled(_: f64, _: f64) -> f64 {
        0.0
    }
}

/// A loop preconditioner `M^-1` (`sys.pc`): `u = M^-1 r` and the check's `ut` are its own.
struct Applied<D: Device> {
    u: DistVec<D>,
    ut: DistVec<D>,
}

/// `u = M^-1 r`, `w = Â u` (one counted exchange, one application of `M^-1`) and, in ONE
/// counted reduction of `N >= 3` values, `[r.u, ||r||_w^2, w.u]` and the slots after them
/// as the caller left them (a check's bound on its rounding error).
fn preconditioned_sums<C: Communicator + ?Sized, D: Device, const N: usize>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    u: &mut DistVec<D>,
    w: &mut DistVec<D>,
) -> Result<[f64; N], KrylovError> {
    sys.precondition(r, u)?;
    sys.a.spmv_dot(&mut sys.ops, u, w, 2)?;
    sys.ops.dot(r, u, 0)?;
    sys.ops.wnorm(r, &sys.w, 1)?;
    let mut sums = [0.0; N];
    sys.ops.reduce(&mut sums)?;
    Ok(sums)
}

impl<C: Communicator + ?Sized, D: Device> Flavor<C, D> for Applied<D> {
    const RZ: &'static str = "r^T M^-1 r";
    const UAU: &'static str = "u^T A u";
    const REDUCTIONS: &'static [usize] = &[3, 4];

    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        [r, w]: [&mut DistVec<D>; 2],
        x0_given: bool,
    ) -> Result<[f64; 3], KrylovError> {
        if x0_given {
            sys.residual(x, r)?;
        } else {
            sys.ops.copy(&sys.bhat, r)?;
        }
        preconditioned_sums(sys, r, &mut self.u, w)
    }

    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        [rt, wt]: [&mut DistVec<D>; 2],
        _: &DistVec<D>,
        _: bool,
    ) -> Result<Checked<[f64; 3]>, KrylovError> {
        // The bound after the loop's three sums, which replace the fused pass's norms.
        sys.checked_residual_local(x, rt, 0, 3)?;
        let s: [f64; 4] = preconditioned_sums(sys, rt, &mut self.ut, wt)?;
        Ok(Checked {
            sums: [s[0], s[1], s[2]],
            tw: s[1],
            ew: s[3],
            rw: s[1],
        })
    }

    fn swap_checked(&mut self) {
        std::mem::swap(&mut self.u, &mut self.ut);
    }

    fn guard(&self, sys: &System<'_, C, D>, g: f64, rw: f64, it: usize) -> Result<(), KrylovError> {
        sys.positive_ru(NAME, g, rw, it)
    }

    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        [a, beta]: [f64; 2],
        [r, w, p, s]: [&mut DistVec<D>; 4],
        x: &mut DistVec<D>,
        _: f64,
        _: usize,
        periodic: bool,
    ) -> Result<([f64; 3], bool), KrylovError> {
        sys.ops.xpay(&self.u, beta, p)?;
        sys.ops.xpay(w, beta, s)?;
        sys.ops.axpy(a, p, x)?;
        if periodic {
            // r = b̂ - Â x and s = Â p from scratch (two SpMVs, no extra reduction); the
            // directions are kept.
            sys.replacements += 1;
            sys.a.spmv(&mut sys.ops, p, s)?;
            sys.residual(x, r)?;
        } else {
            sys.ops.axpy(-a, s, r)?;
        }
        Ok((preconditioned_sums(sys, r, &mut self.u, w)?, false))
    }

    fn cancelled(d: f64, term: f64) -> f64 {
        d.abs() + term.abs()
    }
}
