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
//! (two SpMVs) and reduced in ONE message `[rt.rt, rt.A rt, ||rt||_w^2]`. If it misses the
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
//! With a loop preconditioner (`bjacobi_ic0`, `chebyshev`, an embedder's; `sys.pc`), the
//! preconditioned Chronopoulos-Gear CG (Chronopoulos and Gear 1989, above; written out as
//! Alg. 2 of P. Ghysels and W. Vanroose, "Hiding global synchronization latency in the
//! preconditioned Conjugate Gradient algorithm", Parallel Computing 40(7), 2014), on the
//! scaled system with `u = M^-1 r`, `w = Â u`, `s = Â p`:
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
//! `[rt.ut, ||rt||_w^2, wt.ut]` in ONE message; a miss continues from them with
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

/// `rt = b̂ - Â x`, `art = Â rt` (two counted exchanges) and, in ONE counted reduction,
/// `[rt.rt, ||rt||_w^2, rt.art]`, and `||r||_w^2` of the recurrence's `r` when given
/// (the fourth value: a skipped original-norm sum that its floor could not decide).
/// The reduction always has four values (without `r` the fourth is a stale slot nobody
/// reads): every value keeps its place and the message its length, so under every
/// allreduce algorithm (the ring's blocks depend on both) each is summed in the same
/// order whether or not the sum rides along.
fn residual_and_image<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    rt: &mut DistVec<D>,
    art: &mut DistVec<D>,
    r: Option<&DistVec<D>>,
) -> Result<Checked<[f64; 3]>, KrylovError> {
    sys.residual_image(x, rt, art, Some(2))?;
    sys.ops.dot(rt, rt, 0)?;
    sys.ops.wnorm(rt, &sys.w, 1)?;
    if let Some(r) = r {
        sys.ops.wnorm(r, &sys.w, 3)?;
    }
    let mut s = [0.0; 4];
    sys.ops.reduce(&mut s)?;
    Ok(Checked {
        sums: [s[0], s[1], s[2]],
        tw: s[1],
        rw: s[3],
    })
}

/// The loop without a loop preconditioner (module doc).
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut ar, mut p, mut ap, mut rt, mut art] = sys.vecs()?;
    sys.ops.prepare(3)?;
    sys.ops.prepare(4)?;

    // Setup: r0, A r0 and ONE reduction of [g, ||r0||_w^2, d].
    let [mut g, mut rw, d] = if x0_given {
        residual_and_image(sys, x, &mut r, &mut ar, None)?.sums
    } else {
        sys.ops.copy(&sys.bhat, &mut r)?;
        sys.a.spmv_dot(&mut sys.ops, &mut r, &mut ar, 2)?;
        sys.ops.dot(&r, &r, 0)?;
        sys.ops.wnorm(&r, &sys.w, 1)?;
        let mut s = [0.0; 3];
        sys.ops.reduce(&mut s)?;
        s
    };
    sys.ops.set_phase(Phase::Loop);
    // `denom` is the step's denominator: r^T A r at a (re)start (beta = 0), else
    // d - beta g' / a (= p^T A p in exact arithmetic). It is checked only when a step is
    // taken, so rounding at an already converged iterate is no breakdown.
    let mut denom = d;
    let mut beta = 0.0;
    let mut ctl = Control::new();

    let mut it = 0;
    loop {
        // The check's sums `[rt.rt, ||rt||_w^2, rt.Art]` (its fourth value the
        // recurrence's sum when asked for: the norm a check reports is then exact).
        let due = ctl.check(sys, NAME, &mut rw, it, |sys, with_sum| {
            residual_and_image(sys, x, &mut rt, &mut art, with_sum.then_some(&r))
        })?;
        match due {
            Due::Step => {}
            Due::End(end) => return Ok(end),
            Due::Missed([tg, tw, td]) => {
                // The recurrence drifted: continue from the true residual and restart the
                // directions from it (as cg does), with the scalars just reduced.
                std::mem::swap(&mut r, &mut rt);
                std::mem::swap(&mut ar, &mut art);
                (g, denom, rw, beta) = (tg, td, tw, 0.0);
                ctl.restarted(sys);
                continue;
            }
        }
        crate::breakdown::finite_or(NAME, g, it, "r^T r")?;
        // ||p||^2 >= r.r in CG: g stands in for it in the rounding level (smaller).
        let Some(a) = ctl.step(NAME, denom, it, "r^T A r", g, 0.0)? else {
            continue;
        };
        // p = r + beta p, Ap = Ar + beta Ap, x += a p, r -= a Ap with r.r and, unless it
        // cannot decide the stopping test, the original-norm ||r||_w^2, in one pass (the
        // same r.r bits either way).
        let periodic = periodic_due(sys.cfg.replace_every, it + 1);
        let skip = !periodic && sys.may_skip_wnorm(g, it);
        let v = CcgVecs {
            r: &mut r,
            p: &mut p,
            ap: &mut ap,
            x,
        };
        sys.ops
            .ccg_update(a, beta, &ar, v, (!skip).then_some(&sys.w), 0)?;
        if periodic {
            // Periodic residual replacement: r = b - A x and Ap = A p from scratch (two
            // SpMVs; their sums replace the pass's in this iteration's reduction: no extra
            // reduction).
            sys.replacements += 1;
            sys.a.spmv(&mut sys.ops, &mut p, &mut ap)?;
            sys.true_residual_local(x, &mut r, 0)?;
        }
        // Ar = A r fused with r.Ar: the reduction is [r.r, ||r||_w^2, r.Ar], its middle
        // slot stale and unread when the sum was skipped (the same places and length
        // either way, so each value is summed in the same order by every algorithm).
        sys.a.spmv_dot(&mut sys.ops, &mut r, &mut ar, 2)?;
        let mut sums = [0.0; 3];
        sys.ops.reduce(&mut sums)?;
        it += 1;
        let g_new = crate::breakdown::finite_or(NAME, sums[0], it, "r^T r")?;
        let d = crate::breakdown::finite_or(NAME, sums[2], it, "r^T A r")?;
        rw = ctl.wnorm_after(sys, skip, sums[1], g_new);
        beta = g_new / g;
        sys.ritz_step(a, beta);
        denom = d - beta * g_new / a;
        g = g_new;
        sys.record(it, rw.max(0.0).sqrt());
    }
}

/// `rt = b̂ - Â x`, `ut = M^-1 rt`, `wt = Â ut` (two counted exchanges and one application
/// of `M^-1`) and, in ONE counted reduction, `[rt.ut, ||rt||_w^2, wt.ut]`.
fn preconditioned_residual<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    [rt, ut, wt]: [&mut DistVec<D>; 3],
) -> Result<[f64; 3], KrylovError> {
    sys.residual(x, rt)?;
    preconditioned_sums(sys, rt, ut, wt)
}

/// `u = M^-1 r`, `w = Â u` (one counted exchange, one application of `M^-1`) and, in ONE
/// counted reduction, `[r.u, ||r||_w^2, w.u]`.
fn preconditioned_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    u: &mut DistVec<D>,
    w: &mut DistVec<D>,
) -> Result<[f64; 3], KrylovError> {
    sys.precondition(r, u)?;
    sys.a.spmv_dot(&mut sys.ops, u, w, 2)?;
    sys.ops.dot(r, u, 0)?;
    sys.ops.wnorm(r, &sys.w, 1)?;
    let mut sums = [0.0; 3];
    sys.ops.reduce(&mut sums)?;
    Ok(sums)
}

/// The preconditioned loop (module doc, "Preconditioned form").
pub(crate) fn run_preconditioned<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut u, mut w, mut p, mut s, mut rt, mut ut, mut wt] = sys.vecs()?;
    sys.ops.prepare(3)?;

    // Setup: r0, u0 = M^-1 r0, w0 = Â u0 and ONE reduction of [g, ||r0||_w^2, d].
    let [mut g, mut rw, d] = if x0_given {
        preconditioned_residual(sys, x, [&mut r, &mut u, &mut w])?
    } else {
        sys.ops.copy(&sys.bhat, &mut r)?;
        preconditioned_sums(sys, &r, &mut u, &mut w)?
    };
    sys.ops.set_phase(Phase::Loop);
    // As in the unpreconditioned loop: `denom` is u^T Â u at a (re)start, else
    // d - beta g' / a (= p^T Â p in exact arithmetic), checked only when a step is taken.
    let mut denom = d;
    // The size of the two terms whose difference `denom` is (0 at a (re)start).
    let mut cancelled = 0.0;
    let mut beta = 0.0;
    let mut ctl = Control::new();

    let mut it = 0;
    loop {
        let due = ctl.check(sys, NAME, &mut rw, it, |sys, _| {
            let sums = preconditioned_residual(sys, x, [&mut rt, &mut ut, &mut wt])?;
            let tw = sums[1];
            Ok(Checked { sums, tw, rw: tw })
        })?;
        match due {
            Due::Step => {}
            Due::End(end) => return Ok(end),
            Due::Missed([tg, tw, td]) => {
                // Continue from the true residual, its preconditioned residual and image,
                // and restart the directions from them, with the scalars just reduced.
                std::mem::swap(&mut r, &mut rt);
                std::mem::swap(&mut u, &mut ut);
                std::mem::swap(&mut w, &mut wt);
                (g, denom, cancelled, rw, beta) = (tg, td, 0.0, tw, 0.0);
                ctl.restarted(sys);
                continue;
            }
        }
        crate::breakdown::finite_or(NAME, g, it, "r^T M^-1 r")?;
        sys.positive_ru(NAME, g, rw, it)?;
        // The rounding level: `r.u` times the largest `1/a = p^T Â p / r^T M^-1 r` so far
        // (a lower bound on the largest eigenvalue of M^-1 Â, as in cg's preconditioned
        // loop), plus the size of the terms `denom` is the difference of.
        let Some(a) = ctl.step(NAME, denom, it, "u^T A u", g, cancelled)? else {
            continue;
        };
        // p = u + beta p, s = w + beta s (= Â p), x += a p, r -= a s.
        sys.ops.xpay(&u, beta, &mut p)?;
        sys.ops.xpay(&w, beta, &mut s)?;
        sys.ops.axpy(a, &p, x)?;
        if periodic_due(sys.cfg.replace_every, it + 1) {
            // Periodic residual replacement: r = b̂ - Â x and s = Â p from scratch (two
            // SpMVs, no extra reduction); the directions are kept.
            sys.replacements += 1;
            sys.a.spmv(&mut sys.ops, &mut p, &mut s)?;
            sys.residual(x, &mut r)?;
        } else {
            sys.ops.axpy(-a, &s, &mut r)?;
        }
        // u = M^-1 r, w = Â u and the iteration's ONE reduction.
        let sums = preconditioned_sums(sys, &r, &mut u, &mut w)?;
        it += 1;
        let g_new = crate::breakdown::finite_or(NAME, sums[0], it, "r^T M^-1 r")?;
        let d = crate::breakdown::finite_or(NAME, sums[2], it, "u^T A u")?;
        rw = sums[1];
        beta = g_new / g;
        sys.ritz_step(a, beta);
        let term = beta * g_new / a;
        denom = d - term;
        cancelled = d.abs() + term.abs();
        g = g_new;
        sys.record(it, rw.max(0.0).sqrt());
    }
}
