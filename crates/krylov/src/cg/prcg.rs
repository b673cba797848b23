//! `prcg` — predict-and-recompute conjugate gradients (Chen and Carson): one global
//! reduction per iteration, every vector quantity of Hestenes-Stiefel CG computed
//! directly.
//!
//! Reference: T. Chen and E. Carson, "Predict-and-recompute conjugate gradient variants",
//! SIAM J. Sci. Comput. 42(5), A3084-A3108, 2020 (pr-CG, after Meurant's single-reduction
//! CG): the next `nu = r.r` is PREDICTED from the sums of the current reduction,
//! `nu' = nu - 2 alpha (r.s) + alpha^2 (s.s)` (exact for `r' = r - alpha s`), and used only
//! for `beta`; the same `nu'` is RECOMPUTED as `r'.r'` in the next iteration's reduction and
//! that value gives the next step length. `s = A p` is an SpMV every iteration, never a
//! recurrence, so the residual gap grows as in HS-CG and the attainable accuracy stays
//! close to HS-CG's (the paper's claim: `cargo xtask family-sweep`, `README.md` here).
//!
//! ```text
//! r = b - A x0;  p = r;  s = A p;  [nu = r.r, mu = p.s, delta = r.s, gamma = s.s, ||r||_w^2]
//! loop: a = nu / mu;  nu' = nu - 2 a delta + a^2 gamma (predicted);  beta = nu' / nu
//!       x += a p;  r -= a s;  p = r + beta p
//!       s = A p  [ONE reduction: nu = r.r (recomputed), mu = p.s, delta = r.s, gamma = s.s,
//!                 ||r||_w^2]
//! ```
//!
//! Per iteration: 1 SpMV (one halo exchange, fused with `p.s`), **1 global reduction** of
//! 5 values (blocking: pr-CG's point is one synchronisation, its pipelined form
//! [`super::pipeprcg`] hides it), vector passes `axpy` twice, `xpay`, three `dot`s and a
//! `wnorm`: `12 nnz + 16 n + 8 + 8 min(m, nnz)` for the SpMV and `3 * 24 n + 3 * 16 n + 16 n`
//! = `136 n` for the rest, about `12 nnz + 160 n` bytes with `m ~ n` (unfused).
//! Work vectors: x, r, p, s and one (t) for the true-residual check.
//! Options: `tol`, `atol`, `max_iter`, `history`, `eigs`, `replace_every`.
//!
//! Periodic residual replacement (`replace_every = R`): in iterations R, 2R, ... `r = b -
//! A x` is recomputed instead of updated (one more SpMV; `rt = M^-1 r` with it, one more
//! application; its sums ride in the iteration's own reduction), `p` kept (van der Vorst
//! and Ye), counted in `residual_replacements` (P of them): `halo_exchanges` grows by
//! `(1 + D) P`, `precond_applies` by `P`, `reductions` not at all.
//!
//! The true residual is checked as in every method of the family (`super`'s *Certified
//! convergence*, [`super::control::Control`]): when the recurrence's original norm meets the
//! target, at `max_iter`, or after a curvature at rounding level, `t = b - A x` is
//! computed (one SpMV) and reduced with the bound on its rounding error in ONE message
//! `[t.t, ||t||_w^2, bound]`; a miss replaces `r` by `t` and restarts the directions from it
//! (`p = r`, `s = A p`: one SpMV and one reduction of the sums above), counted in
//! `residual_replacements`.
//!
//! Counting (exact; C = the replacements after a failed check, `residual_replacements`
//! without `replace_every`; checks = C + 1 unless the solve breaks down): `setup_reductions` = 2 (`||b||`; the initial sums), `reductions = iterations +
//! 1 + 2 C`; `halo_exchanges = iterations + 1 + 2 C`, plus the setup exchanges (one for
//! `A p0`, one more for `A x0` when `x0` is given).
//!
//! Breakdowns (typed [`crate::KrylovError::Breakdown`], the report still left): `p^T A p
//! <= 0` (`r^T A r` at a (re)start) above rounding level, a NaN/Inf among the reduced values.
//!
//! ## Preconditioned form
//!
//! ONE loop runs both forms; the plain one above is the identity case (`rt = r`,
//! `st = s`: no vector, no copy). With a loop preconditioner `M^-1` (`sys.pc`), Chen and
//! Carson's preconditioned pr-CG on the scaled system, `rt = M^-1 r`, `st = M^-1 s`:
//!
//! ```text
//! r = b̂ - Â x0;  rt = M^-1 r;  p = rt;  s = Â p;  st = M^-1 s
//!     [nu = rt.r, mu = p.s, delta = rt.s, gamma = st.s, ||r||_w^2]
//! loop: a = nu / mu;  nu' = nu - 2 a delta + a^2 gamma;  beta = nu' / nu
//!       x += a p;  r -= a s;  rt -= a st;  p = rt + beta p
//!       s = Â p;  st = M^-1 s  [ONE reduction of the five sums]
//! ```
//!
//! (`M` symmetric: `st.r = s.rt`, so the prediction is exact for `rt'.r'`.) `r` stays the
//! scaled system's residual: the stopping test, checks and reported norms are the
//! unpreconditioned loop's. Per iteration 1 SpMV, 1 application of `M^-1`, 1 reduction of
//! 5 values; one more `axpy` (`rt`). Work vectors: x, r, rt, p, s, st, t. A failed check
//! restarts with `rt = M^-1 r`, `p = rt`, `s = Â p`, `st = M^-1 s` (one SpMV, two
//! applications, one reduction). Counting (`D` = the Chebyshev degree, 0 for
//! `bjacobi_ic0`): `reductions = iterations + 1 + 2 C`; `halo_exchanges = (1 + D)
//! iterations + 1 + 2 C + 2 D C`; `precond_applies = iterations + 2 + 2 C` (two in the
//! setup). Breakdowns as above, and `r^T M^-1 r <= 0` for a residual that misses the target.

use castack_collectives::Communicator;

use super::control::{check_alone, Control, Due};
use super::{periodic_due, LoopEnd, System};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;

const NAME: &str = "prcg";

/// Values of the loop's one reduction: `[nu, mu, delta, gamma, ||r||_w^2]`.
const SUMS: usize = 5;

/// The preconditioned vectors `rt = M^-1 r`, `st = M^-1 s` (none without a loop
/// preconditioner: they are `r` and `s` themselves).
struct Pre<D: Device> {
    rt: DistVec<D>,
    st: DistVec<D>,
}

/// The loop's vectors.
struct Vecs<D: Device> {
    r: DistVec<D>,
    p: DistVec<D>,
    s: DistVec<D>,
    t: DistVec<D>,
    pre: Option<Pre<D>>,
}

/// `s = Â p` fused with `p.s`, `st = M^-1 s`, this rank's other sums and ONE reduction of
/// `[nu = rt.r, mu = p.s, delta = rt.s, gamma = st.s, ||r||_w^2]`.
fn direction_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    v: &mut Vecs<D>,
) -> Result<[f64; SUMS], KrylovError> {
    sys.a.spmv_dot(&mut sys.ops, &mut v.p, &mut v.s, 1)?;
    if let Some(q) = v.pre.as_mut() {
        sys.precondition(&v.s, &mut q.st)?;
    }
    let (rt, st) = match &v.pre {
        Some(q) => (&q.rt, &q.st),
        None => (&v.r, &v.s),
    };
    sys.ops.dot(rt, &v.r, 0)?;
    sys.ops.dot(rt, &v.s, 2)?;
    sys.ops.dot(st, &v.s, 3)?;
    sys.ops.wnorm(&v.r, &sys.w, 4)?;
    let mut sums = [0.0; SUMS];
    sys.ops.reduce(&mut sums)?;
    Ok(sums)
}

/// The directions (re)started from `r`: `rt = M^-1 r`, `p = rt` and [`direction_sums`].
fn restart<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    v: &mut Vecs<D>,
) -> Result<[f64; SUMS], KrylovError> {
    if let Some(q) = v.pre.as_mut() {
        sys.precondition(&v.r, &mut q.rt)?;
    }
    let rt = v.pre.as_ref().map_or(&v.r, |q| &q.rt);
    sys.ops.copy(rt, &mut v.p)?;
    direction_sums(sys, v)
}

/// The loop, plain or preconditioned (module doc).
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [r, p, s, t] = sys.vecs()?;
    let pre = match sys.pc.is_some() {
        true => {
            let [rt, st] = sys.vecs()?;
            Some(Pre { rt, st })
        }
        false => None,
    };
    let mut v = Vecs { r, p, s, t, pre };
    sys.ops.prepare(SUMS)?;
    sys.ops.prepare(3)?;

    // Setup: r0 and the directions from it (one reduction).
    if x0_given {
        sys.residual(x, &mut v.r)?;
    } else {
        sys.ops.copy(&sys.bhat, &mut v.r)?;
    }
    let mut sums = restart(sys, &mut v)?;
    sys.ops.set_phase(Phase::Loop);
    let mut rw = sums[4];
    let mut ctl = Control::new();
    let mut it = 0;
    loop {
        let due = ctl.check(sys, NAME, &mut rw, it, |sys, _| {
            check_alone(sys, x, &mut v.t)
        })?;
        match due {
            Due::Step => {}
            Due::End(end) => return Ok(end),
            Due::Missed(()) => {
                // The recurrence drifted: continue from the true residual, the directions
                // restarted from it (one SpMV, one reduction).
                std::mem::swap(&mut v.r, &mut v.t);
                sums = restart(sys, &mut v)?;
                rw = sums[4];
                ctl.restarted(sys);
                continue;
            }
        }
        let [nu, mu, delta, gamma, _] = sums;
        let nu = crate::breakdown::finite_or(NAME, nu, it, "r^T M^-1 r")?;
        crate::breakdown::finite_or(NAME, delta, it, "r^T A p")?;
        crate::breakdown::finite_or(NAME, gamma, it, "s^T M^-1 s")?;
        if v.pre.is_some() {
            sys.positive_ru(NAME, nu, rw, it)?;
        }
        let Some(a) = ctl.step(NAME, mu, it, "r^T A r", nu, 0.0)? else {
            continue;
        };
        // Predict r'.r' (used for beta only; the next reduction recomputes it).
        let predicted = nu - 2.0 * a * delta + a * a * gamma;
        let beta = predicted / nu;
        sys.ops.axpy(a, &v.p, x)?;
        if periodic_due(sys.cfg.replace_every, it + 1) {
            // r = b̂ - Â x and rt = M^-1 r from their definitions; p kept.
            sys.residual(x, &mut v.r)?;
            if let Some(q) = v.pre.as_mut() {
                sys.precondition(&v.r, &mut q.rt)?;
            }
            sys.replacements += 1;
        } else {
            sys.ops.axpy(-a, &v.s, &mut v.r)?;
            if let Some(q) = v.pre.as_mut() {
                sys.ops.axpy(-a, &q.st, &mut q.rt)?;
            }
        }
        let rt = v.pre.as_ref().map_or(&v.r, |q| &q.rt);
        sys.ops.xpay(rt, beta, &mut v.p)?;
        sums = direction_sums(sys, &mut v)?;
        sys.ritz_step(a, beta);
        it += 1;
        rw = crate::breakdown::finite_or(NAME, sums[4], it, "||r||")?;
        sys.record(it, rw.max(0.0).sqrt());
    }
}
