//! `cg` — Hestenes-Stiefel conjugate gradients.
//!
//! Reference: M. R. Hestenes and E. Stiefel, "Methods of conjugate gradients for solving
//! linear systems", J. Res. NBS 49(6), 1952.
//!
//! Per iteration: 1 SpMV (one halo exchange), 2 global reductions (`p·Ap`; then `r·r`,
//! fused near the target with the original-norm residual `||r||_w^2`), and three passes
//! over the vectors, each a fused device operation:
//!
//! | pass | reads | writes | bytes (n rows, nnz entries, m input slots) |
//! |---|---|---|---|
//! | `q = A p` with `p.q` (`spmv_dot`) | A, p (input slots) | q | `12 nnz + 16 n + 8 + 8 min(m, nnz)` |
//! | `r -= alpha q` with `r.r` (`axpy_dot`) | r, q | r | `24 n` |
//! | near the target instead: with `r.r`, `r.W r` (`axpy_norms`) | r, q, w | r | `32 n` |
//! | `x += alpha p; p = r + beta p` (`cg_update`) | x, p, r | x, p | `40 n` |
//!
//! about `12 nnz + 88 n` bytes per iteration with `m ~ n` (`12 nnz + 96 n` near the
//! target; the unfused sequence, with a separate `p.q`, the weighted norm in every
//! iteration and separate x and p updates, moved `12 nnz + 120 n`); on 3-D Poisson (7
//! entries per row) `172 n` against `204 n`; `cargo bench -p benches --bench spmv`
//! (`iteration/cg`) times an iteration and reports its throughput with the bytes the
//! solver's work meter counted. The dot rides in the SpMV and the x update waits for
//! beta, so the iterates are the bits of the unfused sequence.
//!
//! The original-norm sum `||r||_w^2 = sum w_i r_i^2` (weights `w = 1/s^2`) only decides the
//! stopping test, and `wmin r.r` bounds it from below (`wmin`, the least weight, is agreed
//! in the setup's diagonal check; a slack of 1e-3 covers the rounding of both sums). While
//! that floor stays more than tenfold (in norm) above the target, the update leaves the
//! sum out and saves reading w; its floor stands in for it, certainly missing the target
//! as the sum itself would. After a skipped sum whose new `r.r` no longer misses for
//! certain (a hundredfold fall of `r.r` in one iteration), the next pass is the
//! true-residual check, whose one reduction also carries the recurrence's sum: when that
//! meets the target, the check is the one computing the sum would have led to (same
//! counts); when it misses (`early`: rare, where the weights are unequal or the sum lands
//! within the floor's slack of the target), the check was not due and the iteration goes
//! on. With `history`, and in the last iteration before
//! `max_iter`, the sum is always computed. Iterates, iteration counts and reported norms
//! are those of always computing it.
//! Work vectors: x, r, p, q = A p. Options: `tol`, `atol`, `max_iter`, `history`,
//! `replace_every`.
//!
//! Periodic residual replacement (`replace_every = Some(R)`): in iterations R, 2R, ... the
//! residual is recomputed as `r = b - A x` instead of `r -= alpha A p` (one more SpMV; its
//! sums travel in the iteration's own `r.r` reduction, so no extra reduction) and p is
//! kept (van der Vorst and Ye, "Residual replacement strategies for Krylov subspace
//! iterative methods", SIAM J. Sci. Comput. 22, 2000), counted in `residual_replacements`.
//! Counting: `reductions = 2 * iterations + checks + early`,
//! `halo_exchanges = iterations + checks + periodic + early`, with `checks` = 1 + the replacements after a missed check
//! and `early` the checks made for an undecided sum that then missed the target (see
//! above; rare). The second reduction always carries two values and a check three, the
//! places of the sums that may be skipped kept (stale and unread then): every allreduce
//! algorithm (the ring's blocks depend on places and length) then sums each value in the
//! order it would with the sums computed. A check after a skipped sum (a rounding-level
//! curvature) carries the recurrence's sum in its third place, so the norms a check
//! reports are exact; only a breakdown report after a skipped sum states its floor as the
//! recurrence norm.
//!
//! When the recurrence residual meets the tolerance, the true residual is recomputed (one
//! SpMV, one reduction); convergence is declared only if it also meets it. Otherwise r is
//! replaced by the true residual, CG restarts from it (p = r) and the iteration continues
//! until the tolerance or `max_iter`: a tolerance below the attainable accuracy
//! (about eps * || |A| |x| || / ||b||) ends as an honest non-convergence.

use castack_collectives::Communicator;

use super::control::{Checked, Control, Due};
use super::{periodic_due, LoopEnd, System};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;

const NAME: &str = "cg";

/// The loop without a loop preconditioner (module doc).
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut p, mut q] = sys.vecs()?;
    sys.ops.prepare(1)?;
    sys.ops.prepare(2)?;
    sys.ops.prepare(3)?;

    let [mut rr, mut rw] = sys.initial_residual(x, &mut r, x0_given)?;
    sys.ops.copy(&r, &mut p)?;
    sys.ops.set_phase(Phase::Loop);

    let mut it = 0;
    let mut ctl = Control::new();
    loop {
        // The check of the true residual (in q), with three places whether or not the
        // recurrence's sum rides in the third (the same length, so every allreduce
        // algorithm sums the check's values alike; stale and unread without it).
        let due = ctl.check(sys, NAME, &mut rw, it, |sys, with_sum| {
            sys.true_residual_local(x, &mut q, 0)?;
            if with_sum {
                sys.ops.wnorm(&r, &sys.w, 2)?;
            }
            let mut s = [0.0; 3];
            sys.ops.reduce(&mut s)?;
            let (sums, tw, rw) = ([s[0], s[1]], s[1], s[2]);
            Ok(Checked { sums, tw, rw })
        })?;
        match due {
            Due::Step => {}
            Due::End(end) => return Ok(end),
            Due::Missed([tr, tw]) => {
                // The recurrence drifted from the true residual: replace it and restart the
                // search direction from it (keeping the old p after a large replacement
                // loses conjugacy and the iteration diverges, as nos7 shows).
                sys.ops.copy(&q, &mut r)?;
                sys.ops.copy(&r, &mut p)?;
                (rr, rw) = (tr, tw);
                ctl.restarted(sys);
                continue;
            }
        }
        // q = A p fused with p.q.
        sys.a.spmv_dot(&mut sys.ops, &mut p, &mut q, 0)?;
        let mut pq = [0.0];
        sys.ops.reduce(&mut pq)?;
        // ||p||^2 >= r.r in CG: rr stands in for it in the rounding level (smaller).
        let Some(alpha) = ctl.step(NAME, pq[0], it, "r^T A r", rr, 0.0)? else {
            continue;
        };
        // r -= alpha q, fused with r.r and, unless it cannot decide the stopping test, the
        // original-norm ||r||_w^2 (same r.r bits either way); in a periodic residual
        // replacement r = b - A x instead (one SpMV, its sums in the same reduction: no
        // extra reduction; p is kept). The reduction keeps its two places either way (the
        // second stale and unread when skipped), so every allreduce algorithm sums r.r in
        // the same order.
        let periodic = periodic_due(sys.cfg.replace_every, it + 1);
        let skip = !periodic && sys.may_skip_wnorm(rr, it);
        let mut sums = [0.0; 2];
        if periodic {
            sys.ops.axpy(alpha, &p, x)?;
            sys.replacements += 1;
            sys.true_residual_local(x, &mut r, 0)?;
        } else if skip {
            sys.ops.axpy_dot(-alpha, &q, &mut r, 0)?;
        } else {
            sys.ops.axpy_norms(-alpha, &q, &mut r, &sys.w, 0)?;
        }
        sys.ops.reduce(&mut sums)?;
        let rr_new = crate::breakdown::finite_or(NAME, sums[0], it, "r^T r")?;
        let beta = rr_new / rr;
        sys.ritz_step(alpha, beta);
        rw = ctl.wnorm_after(sys, skip, sums[1], rr_new);
        rr = rr_new;
        if periodic {
            sys.ops.xpay(&r, beta, &mut p)?;
        } else if !ctl.undecided() && (sys.meets(rw.sqrt()) || it + 1 >= sys.cfg.max_iter) {
            // The next pass checks the true residual: x alone is due (a failed check
            // restarts p from the true residual).
            sys.ops.axpy(alpha, &p, x)?;
        } else {
            // x += alpha p and p = r + beta p in one pass.
            sys.ops.cg_update(alpha, beta, &r, &mut p, x)?;
        }
        it += 1;
        sys.record(it, rw.max(0.0).sqrt());
    }
}

/// Preconditioned CG (Saad, "Iterative Methods for Sparse Linear Systems", 2nd ed., Alg.
/// 9.1) on the scaled system with the loop's preconditioner `z = M^-1 r`:
///
/// ```text
/// r = b̂ - Â x; z = M^-1 r; p = z;  [reduction: r.z]
/// loop:  q = Â p  [reduction: p.q];  alpha = r.z / p.q
///        x += alpha p;  r -= alpha q;  z = M^-1 r  [reduction: r.z, ||r||_w^2]
///        beta = r.z' / r.z;  p = z + beta p
/// ```
///
/// `r` is the scaled system's residual, so the stopping test, the true-residual checks and
/// their replacements (which restart `p = z`), periodic replacement and the rounding-level
/// curvature are those of the unpreconditioned loop above; the original-norm sum rides in
/// the `r.z` reduction of every iteration (no skipping: its floor would need `r.r`). The
/// Ritz values (`eigs`) are those of `M^-1 Â`. `r.z <= 0` for a residual that misses the
/// target is a breakdown (`M` not positive definite).
///
/// Per iteration: 1 SpMV, 1 application of `M^-1`, 2 reductions; vector passes `spmv_dot`,
/// two `axpy`, `dot` + `wnorm` and `xpay`. Counting: `reductions = 2 * iterations +
/// checks + replacements` (a replacement's new `r.z` is one more reduction),
/// `halo_exchanges = iterations + checks + periodic` plus the preconditioner's own in the
/// loop (Chebyshev: `D` per application); applications (`precond_applies`) = 1 +
/// iterations + replacements, the first in set-up (its exchanges are set-up exchanges).
pub(crate) fn run_preconditioned<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut z, mut p, mut q] = sys.vecs()?;
    sys.ops.prepare(1)?;
    sys.ops.prepare(2)?;
    sys.ops.prepare(3)?;

    // Initial residual and z = M^-1 r (setup), with r.z and the original norm in one
    // reduction.
    if x0_given {
        sys.residual(x, &mut r)?;
    } else {
        sys.ops.copy(&sys.bhat, &mut r)?;
    }
    sys.precondition(&r, &mut z)?;
    let mut sums = [0.0; 2];
    sys.ops.dot(&r, &z, 0)?;
    sys.ops.wnorm(&r, &sys.w, 1)?;
    sys.ops.reduce(&mut sums)?;
    let [mut rz, mut rw] = sums;
    sys.ops.copy(&z, &mut p)?;
    sys.ops.set_phase(Phase::Loop);

    let mut it = 0;
    let mut ctl = Control::new();
    loop {
        // Check of the true residual (in q).
        let due = ctl.check(sys, NAME, &mut rw, it, |sys, _| {
            let [_, tw] = sys.true_residual(x, &mut q)?;
            Ok(Checked {
                sums: tw,
                tw,
                rw: tw,
            })
        })?;
        match due {
            Due::Step => {}
            Due::End(end) => return Ok(end),
            Due::Missed(tw) => {
                // Replace r by the true residual and restart p from its z.
                sys.ops.copy(&q, &mut r)?;
                sys.precondition(&r, &mut z)?;
                sys.ops.dot(&r, &z, 0)?;
                let mut s = [0.0];
                sys.ops.reduce(&mut s)?;
                (rz, rw) = (s[0], tw);
                sys.ops.copy(&z, &mut p)?;
                ctl.restarted(sys);
                sys.positive_ru(NAME, rz, rw, it)?;
                continue;
            }
        }
        sys.a.spmv_dot(&mut sys.ops, &mut p, &mut q, 0)?;
        let mut pq = [0.0];
        sys.ops.reduce(&mut pq)?;
        let Some(alpha) = ctl.step(NAME, pq[0], it, "z^T A z", rz, 0.0)? else {
            continue;
        };
        sys.ops.axpy(alpha, &p, x)?;
        if periodic_due(sys.cfg.replace_every, it + 1) {
            // r = b̂ - Â x instead of the recurrence (one SpMV); p is kept.
            sys.replacements += 1;
            sys.residual(x, &mut r)?;
        } else {
            sys.ops.axpy(-alpha, &q, &mut r)?;
        }
        sys.precondition(&r, &mut z)?;
        let mut s = [0.0; 2];
        sys.ops.dot(&r, &z, 0)?;
        sys.ops.wnorm(&r, &sys.w, 1)?;
        sys.ops.reduce(&mut s)?;
        let rz_new = crate::breakdown::finite_or(NAME, s[0], it, "r^T M^-1 r")?;
        rw = s[1];
        sys.positive_ru(NAME, rz_new, rw, it + 1)?;
        let beta = rz_new / rz;
        sys.ritz_step(alpha, beta);
        rz = rz_new;
        sys.ops.xpay(&z, beta, &mut p)?;
        it += 1;
        sys.record(it, rw.max(0.0).sqrt());
    }
}
