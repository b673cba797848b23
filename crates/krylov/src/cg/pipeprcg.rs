//! `pipeprcg` — pipelined predict-and-recompute conjugate gradients (Chen and Carson): the
//! one reduction of an iteration overlaps its SpMVs.
//!
//! Reference: T. Chen and E. Carson, "Predict-and-recompute conjugate gradient variants",
//! SIAM J. Sci. Comput. 42(5), A3084-A3108, 2020 (pipe-pr-CG; as in PETSc's `KSPPIPEPRCG`
//! with its default `-recompute_w`). Like [`super::pipecg`] it carries `s = A p` and
//! `u = A s` by recurrence so that the reduction can start before the SpMV, but it
//! PREDICTS `nu = r.r` for `beta` (`nu' = nu - 2 alpha (r.s) + alpha^2 (s.s)`) and
//! RECOMPUTES both `nu` (in the next reduction) and `w = A r` (an SpMV, not a recurrence),
//! which keeps its attainable accuracy close to HS-CG's where pipecg without replacement
//! stalls (the paper's claim; measured in `README.md` here, `cargo xtask family-sweep`).
//!
//! ```text
//! r = b - A x0;  w = A r;  p = r;  s = w;  u = A s
//!     [nu = r.r, mu = p.s, delta = r.s, gamma = s.s, ||r||_w^2]
//! loop: a = nu / mu;  nu' = nu - 2 a delta + a^2 gamma (predicted);  beta = nu' / nu
//!       x += a p;  r -= a s;  p = r + beta p;  s = w - a u + beta s
//!       begin [nu = r.r (recomputed), mu = p.s, delta = r.s, gamma = s.s, ||r||_w^2]
//!       u = A s;  w = A r  (both overlapped);  finish
//! ```
//!
//! (`s = w - a u + beta s` as PETSc computes it: `w -= a u; s = w + beta s`, the updated
//! `w` then recomputed.)
//!
//! Per iteration: **2 SpMVs** (two halo exchanges: `u = A s` and the recomputed `w = A r`;
//! the paper notes they could share one exchange as a block SpMV, not done here) and **1
//! global reduction** of 5 values, begun with [`crate::Ops::begin`] before both SpMVs and
//! finished after them, so its latency hides behind them; vector passes `axpy` three
//! times, `xpay` twice, four `dot`s and a `wnorm`: `2 (12 nnz + 16 n + 8 + 8 min(m, nnz))`
//! for the SpMVs and `3 * 24 n + 2 * 24 n + 4 * 16 n + 16 n = 200 n` for the rest, about
//! `24 nnz + 248 n` bytes with `m ~ n` (unfused). The last iteration's overlapped SpMVs are
//! computed and unused, as in every pipelined CG.
//! Work vectors: x, r, w, p, s, u and one (t) for the true-residual check.
//! Options: `tol`, `atol`, `max_iter`, `history`, `eigs`, `replace_every`.
//!
//! Periodic residual replacement (`replace_every = R`): after the updates of iterations R,
//! 2R, ... `r = b - A x` and `s = A p` are recomputed from their definitions (two SpMVs;
//! with `M^-1` also `rt` and `st`, two applications), the directions kept; `w` and `u`
//! follow from them in the overlapped SpMVs as in every iteration, and the sums ride in
//! the iteration's own reduction. Counted in `residual_replacements` (P of them):
//! `halo_exchanges` grows by `(2 + 2 D) P`, `precond_applies` by `2 P`, `reductions` not
//! at all.
//!
//! The true residual is checked as in every method of the family (`super`'s *Certified
//! convergence*, [`super::control::Control`]): when the recurrence's original norm meets
//! the target, at `max_iter`, or after a curvature at rounding level, `t = b - A x` is
//! computed (one SpMV) and reduced with the bound on its rounding error in ONE message; a
//! miss replaces `r` by `t` and restarts from it as in the setup (`w = A r`, `p = r`,
//! `s = w`, `u = A s`: two SpMVs and one blocking reduction), counted in
//! `residual_replacements`.
//!
//! Counting (exact; C = the replacements after a failed check, `residual_replacements`
//! without `replace_every`; checks = C + 1 unless the solve breaks down): `setup_reductions` = 2 (`||b||`; the initial sums), `reductions = iterations +
//! 1 + 2 C` (one per iteration, overlapped); `halo_exchanges = 2 iterations + 1 + 3 C`,
//! plus the setup exchanges (two, `A r0` and `A s0`; one more for `A x0` when `x0` is
//! given).
//!
//! Breakdowns (typed [`crate::KrylovError::Breakdown`], the report still left): `p^T A p
//! <= 0` (`r^T A r` at a (re)start) above rounding level, a NaN/Inf among the reduced values.
//!
//! ## Preconditioned form
//!
//! ONE loop runs both forms; the plain one above is the identity case (`rt = r`,
//! `wt = w`, `st = s`, `ut = u`: no vector, no copy). With a loop preconditioner `M^-1`
//! (`sys.pc`), PETSc's `KSPPIPEPRCG` on the scaled system, `rt = M^-1 r`, `w = Â rt`,
//! `wt = M^-1 w`, `st = M^-1 s`, `u = Â st`, `ut = M^-1 u`:
//!
//! ```text
//! r = b̂ - Â x0;  rt = M^-1 r;  w = Â rt;  wt = M^-1 w;  p = rt;  s = w;  st = wt
//! u = Â st;  ut = M^-1 u;  [nu = rt.r, mu = p.s, delta = rt.s, gamma = st.s, ||r||_w^2]
//! loop: a = nu / mu;  nu' = nu - 2 a delta + a^2 gamma;  beta = nu' / nu
//!       x += a p;  r -= a s;  rt -= a st;  p = rt + beta p
//!       s = w - a u + beta s;  st = wt - a ut + beta st
//!       begin [the five sums];  u = Â st;  ut = M^-1 u;  w = Â rt;  wt = M^-1 w;  finish
//! ```
//!
//! Per iteration 2 SpMVs and 2 applications of `M^-1`, all four overlapped with **1
//! reduction** of 5 values; three more vector passes (`rt`, `st`). Work vectors: x, r, rt,
//! w, wt, p, s, st, u, ut, t. A failed check restarts as the setup (two SpMVs, three
//! applications, one reduction). Counting (`D` = the Chebyshev degree, 0 for
//! `bjacobi_ic0`): `reductions = iterations + 1 + 2 C`; `halo_exchanges = (2 + 2 D)
//! iterations + 1 + (3 + 3 D) C`; `precond_applies = 2 iterations + 3 + 3 C` (three in the
//! setup). Breakdowns as above, and `r^T M^-1 r <= 0` for a residual that misses the
//! target.

use castack_collectives::Communicator;

use super::control::{check_alone, Control, Due};
use super::{periodic_due, LoopEnd, System};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;

const NAME: &str = "pipeprcg";

/// Values of the loop's one reduction: `[nu, mu, delta, gamma, ||r||_w^2]`.
const SUMS: usize = 5;

/// The preconditioned vectors (none without a loop preconditioner: they are `r`, `w`,
/// `s`, `u` themselves).
struct Pre<D: Device> {
    rt: DistVec<D>,
    wt: DistVec<D>,
    st: DistVec<D>,
    ut: DistVec<D>,
}

/// The loop's vectors.
struct Vecs<D: Device> {
    r: DistVec<D>,
    w: DistVec<D>,
    p: DistVec<D>,
    s: DistVec<D>,
    u: DistVec<D>,
    t: DistVec<D>,
    pre: Option<Pre<D>>,
}

/// This rank's `[nu = rt.r, mu = p.s, delta = rt.s, gamma = st.s, ||r||_w^2]` in the
/// reduction slots.
fn local_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    v: &Vecs<D>,
) -> Result<(), KrylovError> {
    let (rt, st) = match &v.pre {
        Some(q) => (&q.rt, &q.st),
        None => (&v.r, &v.s),
    };
    sys.ops.dot(rt, &v.r, 0)?;
    sys.ops.dot(&v.p, &v.s, 1)?;
    sys.ops.dot(rt, &v.s, 2)?;
    sys.ops.dot(st, &v.s, 3)?;
    Ok(sys.ops.wnorm(&v.r, &sys.w, 4)?)
}

/// `u = Â st`, `ut = M^-1 u`, `w = Â rt`, `wt = M^-1 w`: the work the reduction hides
/// behind.
fn images<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    v: &mut Vecs<D>,
) -> Result<(), KrylovError> {
    match v.pre.as_mut() {
        Some(q) => {
            sys.a.spmv(&mut sys.ops, &mut q.st, &mut v.u)?;
            sys.precondition(&v.u, &mut q.ut)?;
            sys.a.spmv(&mut sys.ops, &mut q.rt, &mut v.w)?;
            sys.precondition(&v.w, &mut q.wt)
        }
        None => {
            sys.a.spmv(&mut sys.ops, &mut v.s, &mut v.u)?;
            sys.a.spmv(&mut sys.ops, &mut v.r, &mut v.w)
        }
    }
}

/// The directions (re)started from `r`: `rt = M^-1 r`, `w = Â rt`, `wt = M^-1 w`,
/// `p = rt`, `s = w`, `st = wt`, `u = Â st`, `ut = M^-1 u` and ONE blocking reduction of
/// the five sums.
fn restart<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    v: &mut Vecs<D>,
) -> Result<[f64; SUMS], KrylovError> {
    match v.pre.as_mut() {
        Some(q) => {
            sys.precondition(&v.r, &mut q.rt)?;
            sys.a.spmv(&mut sys.ops, &mut q.rt, &mut v.w)?;
            sys.precondition(&v.w, &mut q.wt)?;
            sys.ops.copy(&q.rt, &mut v.p)?;
            sys.ops.copy(&q.wt, &mut q.st)?;
            sys.a.spmv(&mut sys.ops, &mut q.st, &mut v.u)?;
            sys.precondition(&v.u, &mut q.ut)?;
        }
        None => {
            sys.a.spmv(&mut sys.ops, &mut v.r, &mut v.w)?;
            sys.ops.copy(&v.r, &mut v.p)?;
        }
    }
    sys.ops.copy(&v.w, &mut v.s)?;
    if v.pre.is_none() {
        sys.a.spmv(&mut sys.ops, &mut v.s, &mut v.u)?;
    }
    local_sums(sys, v)?;
    let mut sums = [0.0; SUMS];
    sys.ops.reduce(&mut sums)?;
    Ok(sums)
}

/// The loop, plain or preconditioned (module doc).
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [r, w, p, s, u, t] = sys.vecs()?;
    let pre = match sys.pc.is_some() {
        true => {
            let [rt, wt, st, ut] = sys.vecs()?;
            Some(Pre { rt, wt, st, ut })
        }
        false => None,
    };
    let mut v = Vecs {
        r,
        w,
        p,
        s,
        u,
        t,
        pre,
    };
    sys.ops.prepare(SUMS)?;
    sys.ops.prepare(3)?;
    sys.ops.prepare_split(SUMS)?;

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
                // The recurrences drifted: continue from the true residual, the directions
                // and images restarted from it.
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
        let predicted = nu - 2.0 * a * delta + a * a * gamma;
        let beta = predicted / nu;
        sys.ops.axpy(a, &v.p, x)?;
        sys.ops.axpy(-a, &v.s, &mut v.r)?;
        // s = w - a u + beta s (w is recomputed below, so it is not updated itself).
        sys.ops.axpy(-a, &v.u, &mut v.w)?;
        sys.ops.xpay(&v.w, beta, &mut v.s)?;
        match v.pre.as_mut() {
            Some(q) => {
                sys.ops.axpy(-a, &q.st, &mut q.rt)?;
                sys.ops.xpay(&q.rt, beta, &mut v.p)?;
                sys.ops.axpy(-a, &q.ut, &mut q.wt)?;
                sys.ops.xpay(&q.wt, beta, &mut q.st)?;
            }
            None => sys.ops.xpay(&v.r, beta, &mut v.p)?,
        }
        if periodic_due(sys.cfg.replace_every, it + 1) {
            // r = b̂ - Â x, rt = M^-1 r, s = Â p, st = M^-1 s from their definitions, the
            // directions kept (w and u are recomputed from them below).
            sys.residual(x, &mut v.r)?;
            match v.pre.as_mut() {
                Some(q) => {
                    sys.precondition(&v.r, &mut q.rt)?;
                    sys.a.spmv(&mut sys.ops, &mut v.p, &mut v.s)?;
                    sys.precondition(&v.s, &mut q.st)?;
                }
                None => sys.a.spmv(&mut sys.ops, &mut v.p, &mut v.s)?,
            }
            sys.replacements += 1;
        }
        // The one reduction, begun before the SpMVs and finished after them even when
        // they fail.
        local_sums(sys, &v)?;
        let pending = sys.ops.begin(SUMS)?;
        let overlapped = images(sys, &mut v);
        let finished = sys.ops.finish(pending, &mut sums);
        overlapped?;
        finished?;
        sys.ritz_step(a, beta);
        it += 1;
        rw = crate::breakdown::finite_or(NAME, sums[4], it, "||r||")?;
        sys.record(it, rw.max(0.0).sqrt());
    }
}
