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
//! above; rare). The second reduction always carries two values and a check four (the
//! fourth the bound on the true residual's rounding error, `super`'s *Certified
//! convergence*), the places of the sums that may be skipped kept (stale and unread then): every allreduce
//! algorithm (the ring's blocks depend on places and length) then sums each value in the
//! order it would with the sums computed. A check after a skipped sum (a rounding-level
//! curvature) carries the recurrence's sum in its third place, so the norms a check
//! reports are exact; only a breakdown report after a skipped sum states its floor as the
//! recurrence norm.
//!
//! When the recurrence residual meets the tolerance, the true residual is recomputed (one
//! SpMV, one reduction); convergence is declared only if it also meets it, certified for
//! the returned x (the computed norm plus the bound on its rounding error). Otherwise r is
//! replaced by the true residual, CG restarts from it (p = r) and the iteration continues
//! until the tolerance or `max_iter`: a tolerance below the attainable accuracy
//! (about eps * || |A| |x| || / ||b||) ends as an honest non-convergence.
//!
//! ## Preconditioned form
//!
//! ONE loop runs both forms: the recurrence is preconditioned CG (Saad, "Iterative Methods
//! for Sparse Linear Systems", 2nd ed., Alg. 9.1) on the scaled system, and the plain form
//! above is its identity case, `z = M^-1 r` being `r` itself (no copy, no vector).
//! What `M^-1` changes is a [`Flavor`]'s: the identity fuses the residual update with its
//! sums and the x update with the direction's (the passes above); an applied `M^-1`
//! (`sys.pc`) runs
//!
//! ```text
//! r = b̂ - Â x; z = M^-1 r; p = z;  [reduction: r.z, ||r||_w^2]
//! loop:  q = Â p  [reduction: p.q];  alpha = r.z / p.q
//!        x += alpha p;  r -= alpha q;  z = M^-1 r  [reduction: r.z, ||r||_w^2]
//!        beta = r.z' / r.z;  p = z + beta p
//! ```
//!
//! `r` is the scaled system's residual, so the stopping test, the true-residual checks and
//! their replacements (which restart `p = z`), periodic replacement and the rounding-level
//! curvature are those of the plain form; the original-norm sum rides in the `r.z`
//! reduction of every iteration (no skipping: its floor would need `r.r`). The Ritz values
//! (`eigs`) are those of `M^-1 Â`. `r.z <= 0` for a residual that misses the target is a
//! breakdown (`M` not positive definite). Per iteration: 1 SpMV, 1 application of `M^-1`,
//! 2 reductions; vector passes `spmv_dot`, two `axpy`, `dot` + `wnorm` and `xpay`.
//! Counting: `reductions = 2 * iterations + checks + replacements` (a replacement's new
//! `r.z` is one more reduction), `halo_exchanges = iterations + checks + periodic` plus the
//! preconditioner's own in the loop (Chebyshev: `D` per application); applications
//! (`precond_applies`) = 1 + iterations + replacements, the first in set-up (its exchanges
//! are set-up exchanges).

use castack_collectives::Communicator;

use super::control::{Checked, Control, Due};
use super::{periodic_due, LoopEnd, System};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;

const NAME: &str = "cg";

/// The loop, plain or preconditioned (module doc): the identity's fused passes where there
/// is no loop preconditioner, an applied `M^-1` with its own `z` where there is one.
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    if sys.pc.is_some() {
        let z = sys.new_vec()?;
        iterate(sys, x, x0_given, Applied { z })
    } else {
        iterate(sys, x, x0_given, Identity)
    }
}

/// The one recurrence (module doc); `m` decides the passes that `M^-1` changes.
fn iterate<C: Communicator + ?Sized, D: Device, M: Flavor<C, D>>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
    mut m: M,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut p, mut q] = sys.vecs()?;
    sys.ops.prepare(1)?;
    sys.ops.prepare(2)?;
    sys.ops.prepare(3)?;
    sys.ops.prepare(4)?;

    let [mut rz, mut rw] = m.start(sys, x, &mut r, x0_given)?;
    sys.ops.copy(m.z(&r), &mut p)?;
    sys.ops.set_phase(Phase::Loop);

    let mut it = 0;
    let mut ctl = Control::new();
    loop {
        // The check of the true residual (in q).
        let due = ctl.check(sys, NAME, &mut rw, it, |sys, with_sum| {
            m.check(sys, x, &mut q, &r, with_sum)
        })?;
        match due {
            Due::Step => {}
            Due::End(end) => return Ok(end),
            Due::Missed(t) => {
                // The recurrence drifted from the true residual: replace it and restart the
                // search direction from it (keeping the old p after a large replacement
                // loses conjugacy and the iteration diverges, as nos7 shows).
                sys.ops.copy(&q, &mut r)?;
                [rz, rw] = m.restart(sys, &r, t)?;
                sys.ops.copy(m.z(&r), &mut p)?;
                ctl.restarted(sys);
                m.guard(sys, rz, rw, it)?;
                continue;
            }
        }
        // q = A p fused with p.q.
        sys.a.spmv_dot(&mut sys.ops, &mut p, &mut q, 0)?;
        let mut pq = [0.0];
        sys.ops.reduce(&mut pq)?;
        // ||p||^2 >= r.r in CG: rz stands in for it in the rounding level (smaller).
        let Some(alpha) = ctl.step(NAME, pq[0], it, M::AT_RESTART, rz, 0.0)? else {
            continue;
        };
        let periodic = periodic_due(sys.cfg.replace_every, it + 1);
        let (sums, skipped) = m.update(sys, alpha, [&p, &q], &mut r, x, rz, it, periodic)?;
        let rz_new = crate::breakdown::finite_or(NAME, sums[0], it, M::RZ)?;
        rw = ctl.wnorm_after(sys, skipped, sums[1], rz_new);
        m.guard(sys, rz_new, rw, it + 1)?;
        let beta = rz_new / rz;
        sys.ritz_step(alpha, beta);
        rz = rz_new;
        m.directions(sys, &ctl, [alpha, beta], &r, &mut p, x, rw, it, periodic)?;
        it += 1;
        sys.record(it, rw.max(0.0).sqrt());
    }
}

/// What the loop preconditioner changes in cg's recurrence (module doc): where
/// `z = M^-1 r` lives and which passes compute the residual, its sums and the directions.
trait Flavor<C: Communicator + ?Sized, D: Device> {
    /// `r.z` as a breakdown names it.
    const RZ: &'static str;
    /// The curvature right after a (re)start, as a breakdown names it.
    const AT_RESTART: &'static str;

    /// Set-up: `r = b̂ - Â x` (`b̂` without `x0`), `z = M^-1 r` and ONE reduction of
    /// `[r.z, ||r||_w^2]`.
    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        x0_given: bool,
    ) -> Result<[f64; 2], KrylovError>;

    /// `z = M^-1 r`, as it was last computed (the identity: `r` itself).
    fn z<'v>(&'v self, r: &'v DistVec<D>) -> &'v DistVec<D>;

    /// The true-residual check: `q = b̂ - Â x` and, in ONE reduction, its sums
    /// `[q.q, ||q||_w^2]`, the bound on its rounding error (with the recurrence's
    /// `||r||_w^2` when `with_sum`).
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        q: &mut DistVec<D>,
        r: &DistVec<D>,
        with_sum: bool,
    ) -> Result<Checked<[f64; 2]>, KrylovError>;

    /// After a missed check, `r` replaced by the true residual whose check reduced
    /// `sums`: `z = M^-1 r` and `[r.z, ||r||_w^2]`.
    fn restart(
        &mut self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
        sums: [f64; 2],
    ) -> Result<[f64; 2], KrylovError>;

    /// `r.z` must be positive for a residual that misses the target (`M` positive
    /// definite; [`System::positive_ru`]); `r.r` needs no such test.
    fn guard(&self, sys: &System<'_, C, D>, rz: f64, rw: f64, it: usize)
        -> Result<(), KrylovError>;

    /// The step's residual pass (x updated where the direction pass does not fuse it;
    /// `r = b̂ - Â x` when `periodic`): `r -= alpha q`, `z = M^-1 r` and ONE reduction of
    /// `[r.z, ||r||_w^2]`; whether the original-norm sum was left out (its place stale).
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        alpha: f64,
        pq: [&DistVec<D>; 2],
        r: &mut DistVec<D>,
        x: &mut DistVec<D>,
        rz: f64,
        it: usize,
        periodic: bool,
    ) -> Result<([f64; 2], bool), KrylovError>;

    /// The direction pass after the residual's: `p = z + beta p` (with `x += alpha p`
    /// where fused), `rw` the residual's original-norm sum.
    #[allow(clippy::too_many_arguments)]
    fn directions(
        &mut self,
        sys: &mut System<'_, C, D>,
        ctl: &Control,
        ab: [f64; 2],
        r: &DistVec<D>,
        p: &mut DistVec<D>,
        x: &mut DistVec<D>,
        rw: f64,
        it: usize,
        periodic: bool,
    ) -> Result<(), KrylovError>;
}

/// No loop preconditioner: `z` is `r`, and the passes fuse (module doc's table).
struct Identity;

impl<C: Communicator + ?Sized, D: Device> Flavor<C, D> for Identity {
    const RZ: &'static str = "r^T r";
    const AT_RESTART: &'static str = "r^T A r";

    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        x0_given: bool,
    ) -> Result<[f64; 2], KrylovError> {
        sys.initial_residual(x, r, x0_given)
    }

    fn z<'v>(&'v self, r: &'v DistVec<D>) -> &'v DistVec<D> {
        r
    }

    /// Four places, `[q.q, ||q||_w^2, rw, sum w e^2]`, whether or not the recurrence's sum
    /// rides in the third (the same length, so every allreduce algorithm sums the check's
    /// values alike; stale and unread without it).
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        q: &mut DistVec<D>,
        r: &DistVec<D>,
        with_sum: bool,
    ) -> Result<Checked<[f64; 2]>, KrylovError> {
        sys.checked_residual_local(x, q, 0, 3)?;
        if with_sum {
            sys.ops.wnorm(r, &sys.w, 2)?;
        }
        let mut s = [0.0; 4];
        sys.ops.reduce(&mut s)?;
        Ok(Checked {
            sums: [s[0], s[1]],
            tw: s[1],
            ew: s[3],
            rw: s[2],
        })
    }

    fn restart(
        &mut self,
        _: &mut System<'_, C, D>,
        _: &DistVec<D>,
        sums: [f64; 2],
    ) -> Result<[f64; 2], KrylovError> {
        Ok(sums)
    }

    fn guard(&self, _: &System<'_, C, D>, _: f64, _: f64, _: usize) -> Result<(), KrylovError> {
        Ok(())
    }

    /// `r -= alpha q` fused with `r.r` and, unless it cannot decide the stopping test, the
    /// original-norm `||r||_w^2` (same `r.r` bits either way); in a periodic replacement
    /// `x += alpha p` and `r = b - A x` instead (one SpMV, its sums in the same reduction:
    /// no extra reduction; p is kept). The reduction keeps its two places either way (the
    /// second stale and unread when skipped), so every allreduce algorithm sums `r.r` in
    /// the same order. Otherwise `x` waits for the direction pass.
    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        alpha: f64,
        [p, q]: [&DistVec<D>; 2],
        r: &mut DistVec<D>,
        x: &mut DistVec<D>,
        rr: f64,
        it: usize,
        periodic: bool,
    ) -> Result<([f64; 2], bool), KrylovError> {
        let skip = !periodic && sys.may_skip_wnorm(rr, it);
        if periodic {
            sys.ops.axpy(alpha, p, x)?;
            sys.replacements += 1;
            sys.true_residual_local(x, r, 0)?;
        } else if skip {
            sys.ops.axpy_dot(-alpha, q, r, 0)?;
        } else {
            sys.ops.axpy_norms(-alpha, q, r, &sys.w, 0)?;
        }
        let mut sums = [0.0; 2];
        sys.ops.reduce(&mut sums)?;
        Ok((sums, skip))
    }

    /// `x += alpha p; p = r + beta p` in one pass; `x` alone when the next pass checks the
    /// true residual (a failed check restarts p from it); `p` alone after a periodic
    /// replacement (x is updated).
    fn directions(
        &mut self,
        sys: &mut System<'_, C, D>,
        ctl: &Control,
        [alpha, beta]: [f64; 2],
        r: &DistVec<D>,
        p: &mut DistVec<D>,
        x: &mut DistVec<D>,
        rw: f64,
        it: usize,
        periodic: bool,
    ) -> Result<(), KrylovError> {
        if periodic {
            sys.ops.xpay(r, beta, p)?;
        } else if !ctl.undecided() && (sys.meets(rw.sqrt()) || it + 1 >= sys.cfg.max_iter) {
            sys.ops.axpy(alpha, p, x)?;
        } else {
            sys.ops.cg_update(alpha, beta, r, p, x)?;
        }
        Ok(())
    }
}

/// A loop preconditioner `M^-1` (`sys.pc`), `z` its own vector.
struct Applied<D: Device> {
    z: DistVec<D>,
}

impl<D: Device> Applied<D> {
    /// `z = M^-1 r` and, in ONE reduction, `[r.z, ||r||_w^2]`.
    fn sums<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
    ) -> Result<[f64; 2], KrylovError> {
        sys.precondition(r, &mut self.z)?;
        sys.ops.dot(r, &self.z, 0)?;
        sys.ops.wnorm(r, &sys.w, 1)?;
        let mut sums = [0.0; 2];
        sys.ops.reduce(&mut sums)?;
        Ok(sums)
    }
}

impl<C: Communicator + ?Sized, D: Device> Flavor<C, D> for Applied<D> {
    const RZ: &'static str = "r^T M^-1 r";
    const AT_RESTART: &'static str = "z^T A z";

    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        x0_given: bool,
    ) -> Result<[f64; 2], KrylovError> {
        if x0_given {
            sys.residual(x, r)?;
        } else {
            sys.ops.copy(&sys.bhat, r)?;
        }
        self.sums(sys, r)
    }

    fn z<'v>(&'v self, _: &'v DistVec<D>) -> &'v DistVec<D> {
        &self.z
    }

    /// Two places: the recurrence's sum never needs carrying (no update skips it).
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        q: &mut DistVec<D>,
        _: &DistVec<D>,
        _: bool,
    ) -> Result<Checked<[f64; 2]>, KrylovError> {
        let [qq, tw, ew] = sys.checked_residual(x, q)?;
        Ok(Checked {
            sums: [qq, tw],
            tw,
            ew,
            rw: tw,
        })
    }

    /// `z = M^-1 r` of the replaced residual and its `r.z` (one more reduction); the
    /// original norm is the check's.
    fn restart(
        &mut self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
        [_, tw]: [f64; 2],
    ) -> Result<[f64; 2], KrylovError> {
        sys.precondition(r, &mut self.z)?;
        sys.ops.dot(r, &self.z, 0)?;
        let mut s = [0.0];
        sys.ops.reduce(&mut s)?;
        Ok([s[0], tw])
    }

    fn guard(
        &self,
        sys: &System<'_, C, D>,
        rz: f64,
        rw: f64,
        it: usize,
    ) -> Result<(), KrylovError> {
        sys.positive_ru(NAME, rz, rw, it)
    }

    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        alpha: f64,
        [p, q]: [&DistVec<D>; 2],
        r: &mut DistVec<D>,
        x: &mut DistVec<D>,
        _: f64,
        _: usize,
        periodic: bool,
    ) -> Result<([f64; 2], bool), KrylovError> {
        sys.ops.axpy(alpha, p, x)?;
        if periodic {
            // r = b̂ - Â x instead of the recurrence (one SpMV); p is kept.
            sys.replacements += 1;
            sys.residual(x, r)?;
        } else {
            sys.ops.axpy(-alpha, q, r)?;
        }
        Ok((self.sums(sys, r)?, false))
    }

    fn directions(
        &mut self,
        sys: &mut System<'_, C, D>,
        _: &Control,
        [_, beta]: [f64; 2],
        _: &DistVec<D>,
        p: &mut DistVec<D>,
        _: &mut DistVec<D>,
        _: f64,
        _: usize,
        _: bool,
    ) -> Result<(), KrylovError> {
        Ok(sys.ops.xpay(&self.z, beta, p)?)
    }
}
