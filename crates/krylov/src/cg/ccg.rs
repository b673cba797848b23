//! `ccg` — Chronopoulos-Gear conjugate gradients: one global reduction per iteration.
//!
//! Reference: A. T. Chronopoulos and C. W. Gear, "s-step iterative methods for symmetric
//! linear systems", J. Comput. Appl. Math. 25(2), 1989 (the s = 1 case); recurrence as
//! corrected in the project's ALGORITHMS.md.
//!
//! ```text
//! r = b - A x0;  Ar = A r;  [g = r.r, d = r.Ar];  a = g / d;  beta = 0
//! loop: p = r + beta p;  Ap = Ar + beta Ap;  x += a p;  r -= a Ap;  Ar = A r
//!       [ONE reduction: g' = r.r, d = r.Ar, ||r||_w^2]
//!       beta = g' / g;  a = g' / (d - beta g' / a);  g = g'
//! ```
//!
//! Per iteration: 1 SpMV (one halo exchange), **1 global reduction** of 3 values (`r.r`,
//! `r.Ar` and the original-norm residual `||r||_w^2`, fused), two fused passes (all four
//! updates use only the scalars of the previous reduction, so they share one pass):
//!
//! | pass | reads | writes | bytes (n rows, nnz entries, m input slots) |
//! |---|---|---|---|
//! | `p = r + beta p; Ap = Ar + beta Ap; x += a p; r -= a Ap` with `r.r`, `r.W r` (`ccg_update`) | r, Ar, p, Ap, x, w | r, p, Ap, x | `80 n` |
//! | `Ar = A r` with `r.Ar` (`spmv_dot`) | A, r (input slots) | Ar | `12 nnz + 16 n + 8 + 8 min(m, nnz)` |
//!
//! about `12 nnz + 104 n` bytes with `m ~ n`, against [`super::cg`]'s `12 nnz + 96 n`:
//! on 3-D Poisson (7 entries per row) `188 n` against `180 n`, a byte ratio of 1.04 (the
//! unfused sequence, four updates, the fused residual update, an SpMV and a separate dot,
//! moved `12 nnz + 144 n`); `cargo bench -p benches --bench spmv` (`iteration`) reports
//! an iteration's throughput with these bytes. The iterates are the bits of the unfused
//! sequence.
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
//! `reductions = iterations + 1 + C` (one per iteration, one per true residual check;
//! C = replacements after a missed check, `residual_replacements` without
//! `replace_every`); `halo_exchanges = iterations + 2 (1 + residual_replacements)`, plus
//! the setup exchanges (one for `A r0`, one more for `A x0` when `x0` is given).
//!
//! Breakdowns (typed [`crate::KrylovError::Breakdown`]; the caller gets a report with
//! [`crate::StopReason::Breakdown`] and the last iterate, see [`crate::Solver::solve`]): `r^T A r <= 0` at a (re)start,
//! `p^T A p = d - beta g' / a <= 0`, or a NaN/Inf among the reduced values.

use castack_collectives::Communicator;

use super::{periodic_due, Curvature, LoopEnd, System};
use crate::count::Phase;
use crate::device::{CcgVecs, Device};
use crate::dist::DistVec;
use crate::KrylovError;

/// One-line description for the registry.
pub(crate) const DESCRIPTION: &str =
    "Chronopoulos-Gear CG: 1 SpMV and 1 fused reduction (r.r, r.Ar) per iteration";

const NAME: &str = "ccg";

/// `rt = b̂ - Â x`, `art = Â rt` (two counted exchanges) and, in ONE counted reduction,
/// `[rt.rt, ||rt||_w^2, rt.art]`.
fn residual_and_image<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    rt: &mut DistVec<D>,
    art: &mut DistVec<D>,
) -> Result<[f64; 3], KrylovError> {
    sys.residual(x, rt)?;
    sys.a.spmv_dot(&mut sys.ops, rt, art, 2)?;
    sys.ops.dot(rt, rt, 0)?;
    sys.ops.wnorm(rt, &sys.w, 1)?;
    let mut sums = [0.0; 3];
    sys.ops.reduce(&mut sums)?;
    Ok(sums)
}

pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let mut r = sys.new_vec()?;
    let mut ar = sys.new_vec()?;
    let mut p = sys.new_vec()?;
    let mut ap = sys.new_vec()?;
    let mut rt = sys.new_vec()?;
    let mut art = sys.new_vec()?;
    sys.ops.prepare(3)?;

    // Setup: r0, A r0 and ONE reduction of [g, ||r0||_w^2, d].
    let [mut g, mut rw, d] = if x0_given {
        residual_and_image(sys, x, &mut r, &mut ar)?
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
    let mut restart = true;

    // A rounding-level curvature asks for a true-residual check; `anorm`: the largest
    // `1/a` so far, a Lanczos lower bound on ||A|| (no message), scaling the rounding level.
    let (mut rounding, mut anorm) = (false, 0.0f64);

    let mut it = 0;
    loop {
        let rnorm = super::finite_or(NAME, rw, it, "||r||")?.sqrt();
        if std::mem::take(&mut rounding) || sys.meets(rnorm) || it >= sys.cfg.max_iter {
            let [tg, tw, td] = residual_and_image(sys, x, &mut rt, &mut art)?;
            let tnorm = super::finite_or(NAME, tw, it, "||b - A x||")?.sqrt();
            if let Some(end) = sys.check_end(tnorm, rnorm, it, it) {
                return Ok(end);
            }
            // The recurrence drifted: continue from the true residual and restart the
            // directions from it (as cg does), with the scalars just reduced.
            std::mem::swap(&mut r, &mut rt);
            std::mem::swap(&mut ar, &mut art);
            g = tg;
            denom = td;
            rw = tw;
            beta = 0.0;
            restart = true;
            sys.ritz_restart();
            sys.replacements += 1;
            continue;
        }
        let quantity = if restart { "r^T A r" } else { "p^T A p" };
        super::finite_or(NAME, g, it, "r^T r")?;
        // ||p||^2 >= r.r in CG: g stands in for it in the rounding level (smaller).
        let den = match super::curvature(NAME, denom, it, quantity, g * anorm, restart)? {
            Curvature::Step(v) => v,
            Curvature::Rounding => {
                rounding = true;
                continue;
            }
        };
        restart = false;
        anorm = anorm.max(den / g);
        let a = g / den;
        // p = r + beta p, Ap = Ar + beta Ap, x += a p, r -= a Ap with r.r and the
        // original-norm ||r||_w^2, in one pass.
        let v = CcgVecs {
            r: &mut r,
            p: &mut p,
            ap: &mut ap,
            x,
        };
        sys.ops.ccg_update(a, beta, &ar, v, &sys.w, 0)?;
        if periodic_due(sys.cfg.replace_every, it + 1) {
            // Periodic residual replacement: r = b - A x and Ap = A p from scratch (two
            // SpMVs; their sums replace the pass's in this iteration's reduction: no extra
            // reduction).
            sys.replacements += 1;
            sys.a.spmv(&mut sys.ops, &mut p, &mut ap)?;
            sys.true_residual_local(x, &mut r, 0)?;
        }
        // Ar = A r fused with r.Ar.
        sys.a.spmv_dot(&mut sys.ops, &mut r, &mut ar, 2)?;
        let mut sums = [0.0; 3];
        sys.ops.reduce(&mut sums)?;
        it += 1;
        let g_new = super::finite_or(NAME, sums[0], it, "r^T r")?;
        let d = super::finite_or(NAME, sums[2], it, "r^T A r")?;
        rw = sums[1];
        beta = g_new / g;
        sys.ritz_step(a, beta);
        denom = d - beta * g_new / a;
        g = g_new;
        sys.record(it, rw.max(0.0).sqrt());
    }
}
