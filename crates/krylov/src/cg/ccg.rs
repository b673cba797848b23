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
//! `r.Ar` and the original-norm residual `||r||_w^2`, fused), 4 vector updates and a dot.
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
//! Breakdowns (typed [`crate::KrylovError::Breakdown`]): `r^T A r <= 0` at a (re)start,
//! `p^T A p = d - beta g' / a <= 0`, or a NaN/Inf among the reduced values.

use castack_collectives::Communicator;

use super::{periodic_due, LoopEnd, System};
use crate::count::{Bucket, Phase};
use crate::dist::DistVec;
use crate::KrylovError;

/// One-line description for the registry.
pub(crate) const DESCRIPTION: &str =
    "Chronopoulos-Gear CG: 1 SpMV and 1 fused reduction (r.r, r.Ar) per iteration";

const NAME: &str = "ccg";

/// `rt = b̂ - Â x`, `art = Â rt` (two counted exchanges) and, in ONE counted reduction,
/// `[rt.rt, rt.art, ||rt||_w^2]`.
fn residual_and_image<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    x: &mut DistVec,
    rt: &mut DistVec,
    art: &mut DistVec,
) -> Result<[f64; 3], KrylovError> {
    sys.a.spmv(&mut sys.sc, &sys.cpu, x, rt)?;
    let t = sys.sc.now();
    sys.cpu.zip2(rt.local_mut(), sys.bhat.local(), |r, b| {
        for (ri, bi) in r.iter_mut().zip(b) {
            *ri = bi - *ri;
        }
    });
    sys.sc.charge_since(Bucket::Blas, t);
    sys.a.spmv(&mut sys.sc, &sys.cpu, rt, art)?;
    let mut sums = super::residual_sums(sys, rt, art);
    sys.sc.allreduce_sum(&mut sums)?;
    Ok(sums)
}

pub(crate) fn run<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    x: &mut DistVec,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let mut r = sys.a.new_vec();
    let mut ar = sys.a.new_vec();
    let mut p = sys.a.new_vec();
    let mut ap = sys.a.new_vec();
    let mut rt = sys.a.new_vec();
    let mut art = sys.a.new_vec();
    sys.sc.prepare(3);

    // Setup: r0, A r0 and ONE reduction of [g, d, ||r0||_w^2].
    let [mut g, d, mut rw] = if x0_given {
        residual_and_image(sys, x, &mut r, &mut ar)?
    } else {
        r.copy_from(&sys.bhat);
        sys.a.spmv(&mut sys.sc, &sys.cpu, &mut r, &mut ar)?;
        let mut s = super::residual_sums(sys, &r, &ar);
        sys.sc.allreduce_sum(&mut s)?;
        s
    };
    sys.sc.set_phase(Phase::Loop);
    // `denom` is the step's denominator: r^T A r at a (re)start (beta = 0), else
    // d - beta g' / a (= p^T A p in exact arithmetic). It is checked only when a step is
    // taken, so rounding at an already converged iterate is no breakdown.
    let mut denom = d;
    let mut beta = 0.0;
    let mut restart = true;

    let mut it = 0;
    loop {
        let rnorm = super::finite_or(NAME, rw, it, "||r||")?.sqrt();
        if sys.meets(rnorm) || it >= sys.cfg.max_iter {
            let [tg, td, tw] = residual_and_image(sys, x, &mut rt, &mut art)?;
            let tnorm = super::finite_or(NAME, tw, it, "||b - A x||")?.sqrt();
            if sys.meets(tnorm) || it >= sys.cfg.max_iter {
                return Ok(LoopEnd {
                    iterations: it,
                    equivalent: it,
                    converged: sys.meets(tnorm),
                    relres_recurrence: rnorm / sys.bnorm,
                    relres_true: tnorm / sys.bnorm,
                });
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
            sys.replacements += 1;
            continue;
        }
        let quantity = if restart { "r^T A r" } else { "p^T A p" };
        restart = false;
        let a = super::finite_or(NAME, g, it, "r^T r")?
            / super::positive_or(NAME, denom, it, quantity)?;
        let t = sys.sc.now();
        sys.cpu.zip2(p.local_mut(), r.local(), |p, r| {
            for (pi, ri) in p.iter_mut().zip(r) {
                *pi = ri + beta * *pi;
            }
        });
        sys.cpu.zip2(ap.local_mut(), ar.local(), |ap, ar| {
            for (api, ari) in ap.iter_mut().zip(ar) {
                *api = ari + beta * *api;
            }
        });
        sys.cpu.zip2(x.local_mut(), p.local(), |x, p| {
            for (xi, pi) in x.iter_mut().zip(p) {
                *xi += a * pi;
            }
        });
        sys.sc.charge_since(Bucket::Blas, t);
        let [rr, rwr] = if periodic_due(sys.cfg.replace_every, it + 1) {
            // Periodic residual replacement: r = b - A x and Ap = A p from scratch (two
            // SpMVs; the sums ride in this iteration's reduction: no extra reduction).
            sys.replacements += 1;
            sys.a.spmv(&mut sys.sc, &sys.cpu, &mut p, &mut ap)?;
            sys.true_residual_local(x, &mut r)?
        } else {
            // r -= a Ap, fused with r.r and the original-norm ||r||_w^2.
            let t = sys.sc.now();
            let (rr, rwr) = sys
                .cpu
                .zip3_sum2(r.local_mut(), ap.local(), &sys.w, |r, ap, w| {
                    let mut s = (0.0, 0.0);
                    for ((ri, api), wi) in r.iter_mut().zip(ap).zip(w) {
                        *ri -= a * api;
                        s.0 += *ri * *ri;
                        s.1 += *ri * *ri * wi;
                    }
                    s
                });
            sys.sc.charge_since(Bucket::Blas, t);
            [rr, rwr]
        };
        sys.a.spmv(&mut sys.sc, &sys.cpu, &mut r, &mut ar)?;
        let t = sys.sc.now();
        let rar = sys.cpu.dot(r.local(), ar.local());
        sys.sc.charge_since(Bucket::Blas, t);
        let mut sums = [rr, rar, rwr];
        sys.sc.allreduce_sum(&mut sums)?;
        it += 1;
        let g_new = super::finite_or(NAME, sums[0], it, "r^T r")?;
        let d = super::finite_or(NAME, sums[1], it, "r^T A r")?;
        rw = sums[2];
        beta = g_new / g;
        denom = d - beta * g_new / a;
        g = g_new;
        sys.record(rw.max(0.0).sqrt());
    }
}
