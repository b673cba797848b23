//! `cg` — Hestenes-Stiefel conjugate gradients.
//!
//! Reference: M. R. Hestenes and E. Stiefel, "Methods of conjugate gradients for solving
//! linear systems", J. Res. NBS 49(6), 1952.
//!
//! Per iteration: 1 SpMV (one halo exchange), 2 global reductions (`p·Ap`; then `r·r`
//! fused with the original-norm residual `||r||_w^2`), 3 vector updates.
//! Work vectors: x, r, p, q = A p. Options: `tol`, `atol`, `max_iter`, `history`,
//! `replace_every`.
//!
//! Periodic residual replacement (`replace_every = Some(R)`): in iterations R, 2R, ... the
//! residual is recomputed as `r = b - A x` instead of `r -= alpha A p` (one more SpMV; its
//! sums travel in the iteration's own `r.r` reduction, so no extra reduction) and p is
//! kept (van der Vorst and Ye, "Residual replacement strategies for Krylov subspace
//! iterative methods", SIAM J. Sci. Comput. 22, 2000), counted in `residual_replacements`.
//! Counting: `reductions = 2 * iterations + checks`, `halo_exchanges = iterations +
//! checks + periodic`, with `checks` = 1 + the replacements after a missed check.
//!
//! When the recurrence residual meets the tolerance, the true residual is recomputed (one
//! SpMV, one reduction); convergence is declared only if it also meets it. Otherwise r is
//! replaced by the true residual, CG restarts from it (p = r) and the iteration continues
//! until the tolerance or `max_iter`: a tolerance below the attainable accuracy
//! (about eps * || |A| |x| || / ||b||) ends as an honest non-convergence.

use castack_collectives::Communicator;

use super::{periodic_due, LoopEnd, System};
use crate::count::{Bucket, Phase};
use crate::dist::DistVec;
use crate::KrylovError;

/// One-line description for the registry.
pub(crate) const DESCRIPTION: &str = "Hestenes-Stiefel CG: 1 SpMV and 2 reductions per iteration";

const NAME: &str = "cg";

pub(crate) fn run<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    x: &mut DistVec,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let mut r = sys.a.new_vec();
    let mut p = sys.a.new_vec();
    let mut q = sys.a.new_vec();
    sys.sc.prepare(1);
    sys.sc.prepare(2);

    // Initial residual (setup): r = b̂ - Â x0 when x0 is given, else b̂ (no SpMV needed).
    let [mut rr, mut rw] = if !x0_given {
        r.copy_from(&sys.bhat);
        let mut s = super::norm_sums(sys, &r);
        sys.sc.allreduce_sum(&mut s)?;
        s
    } else {
        sys.true_residual(x, &mut r)?
    };
    p.copy_from(&r);
    sys.sc.set_phase(Phase::Loop);

    let mut it = 0;
    loop {
        let rnorm = super::finite_or(NAME, rw, it, "||r||")?.sqrt();
        if sys.meets(rnorm) || it >= sys.cfg.max_iter {
            // Final check of the true residual (counted in the loop).
            let [tr, tw] = sys.true_residual(x, &mut q)?;
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
            // The recurrence drifted from the true residual: replace it and restart the
            // search direction from it (keeping the old p after a large replacement loses
            // conjugacy and the iteration diverges, as nos7 shows).
            r.copy_from(&q);
            p.copy_from(&r);
            rr = tr;
            rw = tw;
            sys.replacements += 1;
            continue;
        }
        sys.a.spmv(&mut sys.sc, &sys.cpu, &mut p, &mut q)?;
        let t = sys.sc.now();
        let mut pq = [sys.cpu.dot(p.local(), q.local())];
        sys.sc.charge_since(Bucket::Blas, t);
        sys.sc.allreduce_sum(&mut pq)?;
        let pq = super::finite_or(NAME, pq[0], it, "p^T A p")?;
        if pq <= 0.0 {
            return Err(KrylovError::Breakdown {
                method: NAME,
                iteration: it,
                quantity: "p^T A p",
                value: pq,
            });
        }
        let alpha = rr / pq;
        let t = sys.sc.now();
        sys.cpu.zip2(x.local_mut(), p.local(), |x, p| {
            for (xi, pi) in x.iter_mut().zip(p) {
                *xi += alpha * pi;
            }
        });
        sys.sc.charge_since(Bucket::Blas, t);
        let mut sums = if periodic_due(sys.cfg.replace_every, it + 1) {
            // Periodic residual replacement: r = b - A x instead of the recurrence (one
            // SpMV, its sums in the reduction below: no extra reduction); p is kept.
            sys.replacements += 1;
            sys.true_residual_local(x, &mut r)?
        } else {
            // r -= alpha q, fused with r.r and the original-norm ||r||_w^2.
            let t = sys.sc.now();
            let (s0, s1) = sys
                .cpu
                .zip3_sum2(r.local_mut(), q.local(), &sys.w, |r, q, w| {
                    let mut s = (0.0, 0.0);
                    for ((ri, qi), wi) in r.iter_mut().zip(q).zip(w) {
                        *ri -= alpha * qi;
                        s.0 += *ri * *ri;
                        s.1 += *ri * *ri * wi;
                    }
                    s
                });
            sys.sc.charge_since(Bucket::Blas, t);
            [s0, s1]
        };
        sys.sc.allreduce_sum(&mut sums)?;
        let rr_new = super::finite_or(NAME, sums[0], it, "r^T r")?;
        rw = sums[1];
        let beta = rr_new / rr;
        rr = rr_new;
        let t = sys.sc.now();
        sys.cpu.zip2(p.local_mut(), r.local(), |p, r| {
            for (pi, ri) in p.iter_mut().zip(r) {
                *pi = ri + beta * *pi;
            }
        });
        sys.sc.charge_since(Bucket::Blas, t);
        it += 1;
        sys.record(rw.max(0.0).sqrt());
    }
}
