//! `pipecg` — pipelined conjugate gradients (Ghysels-Vanroose): the one reduction of an
//! iteration overlaps its SpMV.
//!
//! Reference: P. Ghysels and W. Vanroose, "Hiding global synchronization latency in the
//! preconditioned Conjugate Gradient algorithm", Parallel Computing 40(7), 2014 (Alg. 3
//! without preconditioner, on the Jacobi-scaled system); recurrence as written in the
//! project's ALGORITHMS.md.
//!
//! ```text
//! r = b - A x0;  w = A r
//! loop: begin [g = r.r, d = w.r, ||r||_w^2];  q = A w (overlapped);  finish
//!       beta = g / g_old (0 at a (re)start);  a = g / (d - beta g / a_old) (g / d at a restart)
//!       z = q + beta z;  s = w + beta s;  p = r + beta p
//!       x += a p;  r -= a s;  w -= a z
//! ```
//!
//! Per iteration: 1 SpMV (one halo exchange), **1 global reduction** of 3 values started
//! with [`crate::Ops::begin`] before the SpMV and finished after it, so its latency
//! hides behind the SpMV; the six vector updates and the three sums of the next reduction
//! in ONE pass (`pipecg_update`: reads q, z, w, s, r, p, x and the weights, writes z, s, p,
//! x, r, w: `112 n` bytes against `168 n` for six updates, the fused residual update and a
//! dot; the SpMV adds `12 nnz + 16 n + 8 + 8 min(m, nnz)`). The iterates are the bits of
//! the unfused sequence. Work vectors: x, r, w, q, z, s, p, and two for the true residual
//! check.
//! Options: `tol`, `atol`, `max_iter`, `history`, `replace_every`.
//!
//! The recurrences for r and w drift from `b - A x` and `A r` in finite precision faster
//! than CG's (Cools et al., 2018). Two remedies:
//! - Before declaring convergence, `rt = b - A x` and `A rt` are computed (two SpMVs) and
//!   reduced in ONE message `[rt.rt, rt.A rt, ||rt||_w^2]`. If `rt` misses the tolerance,
//!   r and w are replaced by `rt` and `A rt` and the directions restart from them, with the
//!   scalars just reduced (no further reduction).
//! - `replace_every = R`: every R iterations r, w and the auxiliary vectors are recomputed
//!   from their definitions, `r = b - A x`, `w = A r`, `s = A p`, `z = A s` (four SpMVs,
//!   no reduction: the next iteration's reduction measures them), keeping the directions
//!   (Cools, Yetkin, Agullo, Giraud and Vanroose, "Analyzing the effect of local rounding
//!   error propagation on the maximal attainable accuracy of the pipelined Conjugate
//!   Gradient method", SIMAX 39(1), 2018). Restarting the directions instead loses CG's
//!   superlinear convergence (poisson3d(12), R = 10: 85 iterations instead of 30).
//!
//! Both count in `residual_replacements`.
//!
//! Counting (exact): `setup_reductions` = 2 (`||b||`; the first iteration's `[g0, d0,
//! ||r0||_w^2]`, issued at the top of the loop and overlapped with its SpMV, but the
//! initial norms as every method's setup). `reductions = iterations + 1 + C` where C is the
//! number of replacements after a failed convergence check (without `replace_every`,
//! `C = residual_replacements`); periodic replacements cost none.
//! `halo_exchanges = iterations + 3 + 3 C + 4 (residual_replacements - C)` plus the setup
//! exchanges (one for `A r0`, one more for `A x0` when `x0` is given); the last iteration's
//! overlapped SpMV is computed and unused, as in every pipelined CG.
//!
//! Breakdowns (typed [`crate::KrylovError::Breakdown`]): `r^T A r <= 0` at a (re)start,
//! `p^T A p = d - beta g / a_old <= 0`, or a NaN/Inf among the reduced values.

use castack_collectives::Communicator;

use super::{LoopEnd, System};
use crate::count::Phase;
use crate::device::{Device, PipecgVecs};
use crate::dist::DistVec;
use crate::KrylovError;

/// One-line description for the registry.
pub(crate) const DESCRIPTION: &str =
    "pipelined CG (Ghysels-Vanroose): 1 SpMV and 1 reduction per iteration, overlapped";

const NAME: &str = "pipecg";

/// `r = b̂ - Â x` and `w = Â r`: two counted exchanges, no reduction.
fn recompute<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    r: &mut DistVec<D>,
    w: &mut DistVec<D>,
) -> Result<(), KrylovError> {
    sys.residual(x, r)?;
    sys.a.spmv(&mut sys.ops, r, w)
}

pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let mut r = sys.new_vec()?;
    let mut w = sys.new_vec()?;
    let mut q = sys.new_vec()?;
    let mut z = sys.new_vec()?;
    let mut s = sys.new_vec()?;
    let mut p = sys.new_vec()?;
    let mut rt = sys.new_vec()?;
    let mut wt = sys.new_vec()?;
    sys.ops.prepare(3)?;
    sys.ops.prepare_split(3)?;

    // Setup: r0 and w0 = A r0 (no reduction yet: the loop's first one measures them).
    if x0_given {
        recompute(sys, x, &mut r, &mut w)?;
    } else {
        sys.ops.copy(&sys.bhat, &mut r)?;
        sys.a.spmv(&mut sys.ops, &mut r, &mut w)?;
    }
    // This rank's [g = r.r, ||r||_w^2, d = w.r] wait in the reduction slots.
    super::residual_sums(sys, &r, &w, 0)?;
    // Scalars already reduced (after a replacement at a failed check).
    let mut known: Option<[f64; 3]> = None;
    let mut restart = true;
    let (mut g_old, mut a_old) = (0.0, 0.0);
    let mut it = 0;
    let mut recorded = 0;
    let mut since_replacement = 0;
    loop {
        if known.is_none()
            && sys
                .cfg
                .replace_every
                .is_some_and(|k| since_replacement >= k)
        {
            // Periodic replacement keeping the directions (module doc).
            recompute(sys, x, &mut r, &mut w)?;
            sys.a.spmv(&mut sys.ops, &mut p, &mut s)?;
            sys.a.spmv(&mut sys.ops, &mut s, &mut z)?;
            super::residual_sums(sys, &r, &w, 0)?;
            since_replacement = 0;
            sys.replacements += 1;
        }
        let [g, rw, d] = match known.take() {
            Some(sums) => {
                sys.a.spmv(&mut sys.ops, &mut w, &mut q)?;
                sums
            }
            None => {
                let pending = sys.ops.begin(3)?;
                // The first reduction (initial norms) counts as setup; all else is loop.
                sys.ops.set_phase(Phase::Loop);
                // q = A w overlaps the reduction; finish it even when the SpMV fails.
                let spmv = sys.a.spmv(&mut sys.ops, &mut w, &mut q);
                let mut sums = [0.0; 3];
                let finished = sys.ops.finish(pending, &mut sums);
                spmv?;
                finished?;
                sums
            }
        };
        let rnorm = super::finite_or(NAME, rw, it, "||r||")?.sqrt();
        if it > recorded {
            sys.record(it, rnorm);
            recorded = it;
        }
        if sys.meets(rnorm) || it >= sys.cfg.max_iter {
            recompute(sys, x, &mut rt, &mut wt)?;
            super::residual_sums(sys, &rt, &wt, 0)?;
            let mut t_sums = [0.0; 3];
            sys.ops.reduce(&mut t_sums)?;
            let tnorm = super::finite_or(NAME, t_sums[1], it, "||b - A x||")?.sqrt();
            if sys.meets(tnorm) || it >= sys.cfg.max_iter {
                return Ok(LoopEnd {
                    iterations: it,
                    equivalent: it,
                    converged: sys.meets(tnorm),
                    relres_recurrence: rnorm / sys.bnorm,
                    relres_true: tnorm / sys.bnorm,
                });
            }
            // The recurrence drifted: continue from the true residual and its image and
            // restart the directions, with the scalars just reduced.
            std::mem::swap(&mut r, &mut rt);
            std::mem::swap(&mut w, &mut wt);
            known = Some(t_sums);
            restart = true;
            since_replacement = 0;
            sys.replacements += 1;
            continue;
        }
        super::finite_or(NAME, g, it, "r^T r")?;
        super::finite_or(NAME, d, it, "w^T r")?;
        let (beta, denom, quantity) = if restart {
            (0.0, d, "r^T A r")
        } else {
            let beta = g / g_old;
            (beta, d - beta * g / a_old, "p^T A p")
        };
        let a = g / super::positive_or(NAME, denom, it, quantity)?;
        sys.ritz_direction((!restart).then_some(beta), a);
        restart = false;

        // z = q + beta z, s = w + beta s, p = r + beta p, x += a p, r -= a s, w -= a z and
        // the next reduction's [r.r, ||r||_w^2, w.r], in one pass.
        let vecs = PipecgVecs {
            w: &mut w,
            r: &mut r,
            z: &mut z,
            s: &mut s,
            p: &mut p,
            x: &mut *x,
        };
        sys.ops.pipecg_update(a, beta, &q, vecs, &sys.w, 0)?;
        g_old = g;
        a_old = a;
        it += 1;
        since_replacement += 1;
    }
}
