//! `groppcg` — Gropp's asynchronous conjugate gradients: two non-blocking reductions per
//! iteration, the first overlapped with the preconditioner, the second with the SpMV.
//!
//! Reference: W. Gropp, "Update on libraries for Blue Waters", Bordeaux, 2010, and
//! "Scaling to 1M cores and beyond" (ICERM 2012 slides); as implemented in PETSc's
//! `KSPGROPPCG` (P. Ghysels). HS-CG with `s = A p` carried by recurrence
//! (`s = A z + beta s`), so that `p.s` can be reduced while `M^-1 s` is applied and
//! `r.z` while `A z` is computed.
//!
//! Preconditioned form (the recurrence of the loop), on the scaled system with
//! `z = M^-1 r`, `S = M^-1 s`, `Z = Â z`:
//!
//! ```text
//! r = b̂ - Â x0;  z = M^-1 r;  p = z;  begin [gamma = r.z, ||r||_w^2];  s = Â p;  finish
//! loop: begin [t = p.s];  S = M^-1 s (overlapped);  finish;  a = gamma / t
//!       x += a p;  r -= a s;  z -= a S
//!       begin [gamma' = r.z, ||r||_w^2];  Z = Â z (overlapped);  finish
//!       beta = gamma' / gamma;  p = z + beta p;  s = Z + beta s
//! ```
//!
//! The plain form is its identity case (`z = r`, `S = s`: no vector, no copy); there the
//! first reduction has no preconditioner to hide behind (it is begun and finished with
//! nothing between) and only the second is overlapped, with the SpMV. Every loop
//! preconditioner (`bjacobi_ic0`, `chebyshev`, an embedder's) gives both their work.
//!
//! Per iteration: 1 SpMV (one halo exchange), 1 application of `M^-1`, **2 global
//! reductions** (1 and 2 values), each split-phase ([`crate::Ops::begin`] before the work
//! it hides behind, [`crate::Ops::finish`] after); vector passes (plain form) `axpy`
//! twice, `xpay` twice, `dot` twice and a `wnorm`: `12 nnz + 16 n + 8 + 8 min(m, nnz)`
//! for the SpMV and `4 * 24 n + 2 * 16 n + 16 n = 144 n` for the rest, about
//! `12 nnz + 168 n` bytes with `m ~ n` (unfused; one `axpy` more with `M^-1`).
//! Work vectors: x, r, p, s, Z and one (t) for the true-residual check; with `M^-1` also
//! z and S.
//! Options: `tol`, `atol`, `max_iter`, `history`, `eigs`, `replace_every`.
//!
//! Periodic residual replacement (`replace_every = R`): in iterations R, 2R, ... `r = b̂ -
//! Â x` (with `M^-1`: and `z = M^-1 r`) is recomputed instead of updated and the new
//! direction's image `s = Â p` computed instead of `Z + beta s` (two SpMVs, one
//! application), `p` kept; counted in `residual_replacements` (P of them):
//! `halo_exchanges` grows by `(2 + D) P`, `precond_applies` by `P`, `reductions` not at
//! all.
//!
//! `s` is a recurrence (as pipecg's), so the residual gap can grow more than CG's; the
//! true-residual check before convergence guards the verdict as in every method of the
//! family (`super`'s *Certified convergence*, [`super::control::Control`]): when the
//! recurrence's original norm meets the target, at `max_iter`, or after a curvature at
//! rounding level, `t = b̂ - Â x` is computed (one SpMV) and reduced with the bound on its
//! rounding error in ONE message; a miss replaces `r` by `t` and restarts from it as in
//! the setup (`z = M^-1 r`, `p = z`, `s = Â p`: one SpMV and one reduction), counted in
//! `residual_replacements`.
//!
//! Counting (exact; C = the replacements after a failed check, `residual_replacements`
//! without `replace_every`; checks = C + 1 unless the solve breaks down; R = curvatures at rounding level, each followed by a check, usually 0):
//! `setup_reductions` = 2 (`||b||`; the initial `[gamma, ||r||_w^2]`), `reductions = 2
//! iterations + 1 + 2 C + R`; `halo_exchanges = iterations + 1 + 2 C`, plus the setup
//! exchanges (one for `Â p0`, one more for `Â x0` when `x0` is given). With `M^-1`
//! (`D` = the Chebyshev degree, 0 for `bjacobi_ic0`): `halo_exchanges = (1 + D)
//! iterations + 1 + (2 + D) C + D R`, `precond_applies = iterations + 1 + C + R` (one in
//! the setup).
//!
//! Breakdowns (typed [`crate::KrylovError::Breakdown`], the report still left): `p^T A p
//! <= 0` (`r^T A r` at a (re)start) above rounding level, `r^T M^-1 r <= 0` for a residual
//! that misses the target, a NaN/Inf among the reduced values.

use castack_collectives::Communicator;

use super::control::{check_alone, Control, Due};
use super::{periodic_due, LoopEnd, System};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;

const NAME: &str = "groppcg";

/// The preconditioned vectors `z = M^-1 r`, `S = M^-1 s` (none without a loop
/// preconditioner: they are `r` and `s` themselves).
struct Pre<D: Device> {
    z: DistVec<D>,
    s: DistVec<D>,
}

/// The loop's vectors (`az` is `Z = Â z`).
struct Vecs<D: Device> {
    r: DistVec<D>,
    p: DistVec<D>,
    s: DistVec<D>,
    az: DistVec<D>,
    t: DistVec<D>,
    pre: Option<Pre<D>>,
}

/// This rank's `[r.z, ||r||_w^2]` in the reduction slots.
fn residual_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    v: &Vecs<D>,
) -> Result<(), KrylovError> {
    let z = v.pre.as_ref().map_or(&v.r, |q| &q.z);
    sys.ops.dot(&v.r, z, 0)?;
    Ok(sys.ops.wnorm(&v.r, &sys.w, 1)?)
}

/// A split-phase reduction of this rank's first `N` slots, begun before `work` and
/// finished after it (even when it fails).
fn overlapped<C, D, F, const N: usize>(
    sys: &mut System<'_, C, D>,
    work: F,
) -> Result<[f64; N], KrylovError>
where
    C: Communicator + ?Sized,
    D: Device,
    F: FnOnce(&mut System<'_, C, D>) -> Result<(), KrylovError>,
{
    let pending = sys.ops.begin(N)?;
    let done = work(sys);
    let mut sums = [0.0; N];
    let finished = sys.ops.finish(pending, &mut sums);
    done?;
    finished?;
    Ok(sums)
}

/// The directions (re)started from `r`: `z = M^-1 r`, `p = z` and `[r.z, ||r||_w^2]`
/// reduced while `s = Â p` is computed.
fn restart<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    v: &mut Vecs<D>,
) -> Result<[f64; 2], KrylovError> {
    if let Some(q) = v.pre.as_mut() {
        sys.precondition(&v.r, &mut q.z)?;
    }
    let z = v.pre.as_ref().map_or(&v.r, |q| &q.z);
    sys.ops.copy(z, &mut v.p)?;
    residual_sums(sys, v)?;
    overlapped(sys, |sys| sys.a.spmv(&mut sys.ops, &mut v.p, &mut v.s))
}

/// The loop, plain or preconditioned (module doc).
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [r, p, s, az, t] = sys.vecs()?;
    let pre = match sys.pc.is_some() {
        true => {
            let [z, s] = sys.vecs()?;
            Some(Pre { z, s })
        }
        false => None,
    };
    let mut v = Vecs {
        r,
        p,
        s,
        az,
        t,
        pre,
    };
    sys.ops.prepare(3)?;
    sys.ops.prepare_split(1)?;
    sys.ops.prepare_split(2)?;

    // Setup: r0 and the directions from it (one reduction, overlapped with s = Â p).
    if x0_given {
        sys.residual(x, &mut v.r)?;
    } else {
        sys.ops.copy(&sys.bhat, &mut v.r)?;
    }
    let [mut gamma, mut rw] = restart(sys, &mut v)?;
    sys.ops.set_phase(Phase::Loop);
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
                // restarted from it.
                std::mem::swap(&mut v.r, &mut v.t);
                [gamma, rw] = restart(sys, &mut v)?;
                ctl.restarted(sys);
                continue;
            }
        }
        let g = crate::breakdown::finite_or(NAME, gamma, it, "r^T M^-1 r")?;
        if v.pre.is_some() {
            sys.positive_ru(NAME, g, rw, it)?;
        }
        // Reduction 1: p.s, overlapped with S = M^-1 s.
        sys.ops.dot(&v.p, &v.s, 0)?;
        let [ps] = overlapped(sys, |sys| match v.pre.as_mut() {
            Some(q) => sys.precondition(&v.s, &mut q.s),
            None => Ok(()),
        })?;
        let Some(a) = ctl.step(NAME, ps, it, "r^T A r", g, 0.0)? else {
            continue;
        };
        sys.ops.axpy(a, &v.p, x)?;
        let periodic = periodic_due(sys.cfg.replace_every, it + 1);
        if periodic {
            // r = b̂ - Â x and z = M^-1 r from their definitions (s below).
            sys.residual(x, &mut v.r)?;
            if let Some(q) = v.pre.as_mut() {
                sys.precondition(&v.r, &mut q.z)?;
            }
            sys.replacements += 1;
        } else {
            sys.ops.axpy(-a, &v.s, &mut v.r)?;
            if let Some(q) = v.pre.as_mut() {
                sys.ops.axpy(-a, &q.s, &mut q.z)?;
            }
        }
        // Reduction 2: [r.z, ||r||_w^2], overlapped with Z = Â z.
        residual_sums(sys, &v)?;
        let [g_new, rw_new] = overlapped(sys, |sys| {
            let z = match v.pre.as_mut() {
                Some(q) => &mut q.z,
                None => &mut v.r,
            };
            sys.a.spmv(&mut sys.ops, z, &mut v.az)
        })?;
        it += 1;
        gamma = crate::breakdown::finite_or(NAME, g_new, it, "r^T M^-1 r")?;
        rw = crate::breakdown::finite_or(NAME, rw_new, it, "||r||")?;
        let beta = gamma / g;
        let z = v.pre.as_ref().map_or(&v.r, |q| &q.z);
        sys.ops.xpay(z, beta, &mut v.p)?;
        if periodic {
            sys.a.spmv(&mut sys.ops, &mut v.p, &mut v.s)?;
        } else {
            sys.ops.xpay(&v.az, beta, &mut v.s)?;
        }
        sys.ritz_step(a, beta);
        sys.record(it, rw.max(0.0).sqrt());
    }
}
