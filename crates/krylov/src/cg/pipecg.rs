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
//! x, r, w, and leaves the eight sums of the next reduction: `112 n` bytes against `168 n` for six updates, the fused residual update and a
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
//! - Automatic residual replacement (`auto_replace`, on by default; CLI
//!   `--auto-replace=false` turns it off): the pass also leaves `x.x, p.p, s.s, z.z, w.w`
//!   (no extra bytes, `PIPECG_SUMS` = 8 values in the one reduction), from which bounds on
//!   the gaps `f_r = (b - A x) - r`, `f_w = A r - w`, `f_s = A p - s`, `f_z = A s - z` are
//!   propagated through the recurrences with the local rounding errors of each update
//!   (`||A||` from below by the largest Rayleigh quotient `w.r / r.r`, the SpMV error as
//!   `mnz sqrt(n) ||A||`; the square-root form of PETSc's `KSPPIPECGRR`). Where the bound
//!   on `||f_r||` crosses `sqrt(eps) ||r||` (van der Vorst and Ye's criterion), r, w, s, z
//!   are recomputed as in the periodic replacement (four SpMVs, no reduction). Reference:
//!   Cools, Yetkin, Agullo, Giraud and Vanroose, SIMAX 39(1), 2018, section 5 (what it
//!   changed on shared matrices: `README.md` here, *Measured*). Other methods do not
//!   get it: cg and ccg recompute nothing from auxiliary recurrences, and the s-step
//!   methods have their own drift monitors and checks. The preconditioned form has its
//!   own version (below).
//! - A non-positive curvature at rounding level (`|p^T A p| <= 100 eps ||p||^2 ||A||`,
//!   `||p||^2` as `r.r + beta^2 p.p`) is no breakdown: the true residual is checked
//!   (converged if it passes, else replaced and the directions restarted).
//!
//! All count in `residual_replacements`.
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
//! Breakdowns (typed [`crate::KrylovError::Breakdown`]; the caller gets a report with
//! [`crate::StopReason::Breakdown`] and the last iterate, see [`crate::Solver::solve`]): `r^T A r <= 0` at a (re)start,
//! `p^T A p = d - beta g / a_old <= 0`, or a NaN/Inf among the reduced values.
//!
//! ## Preconditioned form
//!
//! With a loop preconditioner (`bjacobi_ic0`, `chebyshev`, an embedder's; `sys.pc`),
//! Ghysels and Vanroose's Alg. 3 WITH the preconditioner (same paper), on the scaled
//! system; in exact arithmetic `u = M^-1 r`, `w = Â u`, `m = M^-1 w`, `n = Â m`,
//! `s = Â p`, `q = M^-1 s`, `z = Â q`:
//!
//! ```text
//! r = b̂ - Â x0;  u = M^-1 r;  w = Â u
//! loop: begin [g = r.u, ||r||_w^2, d = w.u];  m = M^-1 w;  n = Â m (both overlapped);  finish
//!       beta = g / g_old (0 at a (re)start);  a = g / (d - beta g / a_old) (g / d at a restart)
//!       z = n + beta z;  q = m + beta q;  s = w + beta s;  p = u + beta p
//!       x += a p;  r -= a s;  u -= a q;  w -= a z
//! ```
//!
//! `r` stays the scaled system's own residual, so the stopping test, the checks and every
//! reported norm are those of the unpreconditioned loop; the original-norm sum rides in
//! the one reduction. The same Krylov method as cg's preconditioned form in exact
//! arithmetic (the Ritz values, `eigs`, are those of `M^-1 Â`).
//!
//! Per iteration: 1 SpMV and 1 application of `M^-1`, both overlapped with **1 reduction**
//! of 3 values (split-phase, [`crate::Ops::begin`] before them, [`crate::Ops::finish`]
//! after); vector passes: four `xpay`, four `axpy`, two `dot` and a `wnorm` (not fused).
//! Work vectors: x, r, u, w, m, n, z, q, s, p and three (rt, ut, wt) for the check.
//!
//! Safety, as above where it carries over:
//! - The check before declaring convergence (or at `max_iter`, or after a curvature at
//!   rounding level) recomputes `rt = b̂ - Â x`, `ut = M^-1 rt`, `wt = Â ut` (two SpMVs,
//!   one application) and reduces `[rt.ut, ||rt||_w^2, wt.ut]` in ONE message; a miss
//!   continues from them with restarted directions and the scalars just reduced.
//! - `replace_every = R`: every R iterations r, u, w and `s = Â p`, `q = M^-1 s`,
//!   `z = Â q` are recomputed from their definitions (four SpMVs, two applications, no
//!   reduction), keeping the directions (Cools et al., SIMAX 2018, for the preconditioned
//!   recurrences).
//! - Automatic replacement (`auto_replace`, on by default), as PETSc's KSPPIPECGRR does
//!   with a preconditioner: the same gap bounds as above, followed over the preconditioned
//!   recurrences (`f_w = Â u - w`, `f_s = Â p - s`, `f_z = Â q - z`, `f_r` as above), with
//!   the norms of `u`, `q` and `m` where the unpreconditioned bounds have `r`, `s` and `w`
//!   (`Norms`' roles); the reduction then also carries `[x.x, r.r, u.u, w.w, p.p, s.s,
//!   q.q, m.m, z.z]` (nine more passes, twelve values in the one message). The gaps of
//!   `u - M^-1 r` and `q - M^-1 s` would need `||M^-1||`, which neither IC(0) nor an
//!   embedder's `M` gives: like PETSc, the estimate leaves them out, so it is a heuristic
//!   here, not a bound. A replacement costs what a periodic one does (below); its measured
//!   effect: `README.md` here, *Measured*. `auto_replace = false` (`--auto-replace=false`)
//!   gives the plain recurrences.
//! - A non-positive curvature `d - beta g / a_old` after a step is, with `Â` and `M`
//!   positive definite, the recurrences' drift from their definitions rather than a
//!   property of the matrix (without the automatic replacement the gaps grow unchecked;
//!   *Measured* in `README.md` here): the true residual is checked as after
//!   a curvature at rounding level (converged if it passes, else replaced, the directions
//!   restarted; a failed check like any other in the counts). A breakdown is declared when
//!   such a check finds no smaller true residual than the previous one did, so an
//!   indefinite matrix or preconditioner still ends in one.
//! - Breakdowns: `u^T Â u <= 0` at a (re)start, a curvature after a step as just said,
//!   `r^T M^-1 r <= 0` for a residual that misses the target (`M` not positive definite),
//!   a NaN/Inf among the reduced values. The rounding level of a curvature is `100 eps`
//!   times `r.u` times the largest `1/a` so far (as in cg's preconditioned loop) plus the
//!   size of the two terms it is the difference of.
//!
//! Counting (exact; C = replacements after a failed check, P = periodic and automatic
//! replacements (each costs the same), `residual_replacements = C + P`; `D` = the Chebyshev degree, 0 for `bjacobi_ic0`):
//! `reductions = iterations + 1 + C` (the first one is in `setup_reductions`, as above);
//! `halo_exchanges = (1 + D) (iterations + 1 + C) + (2 + D) (1 + C) + (4 + 2 D) P`;
//! `precond_applies = iterations + 3 + 2 C + 2 P` (one in the setup, one per loop top
//! including the last, unused one, one per check, two per periodic or automatic
//! replacement). The setup
//! (in `setup_*`) adds `D + 1` exchanges (`M^-1 r0`, `Â u0`) and one more for `Â x0`
//! when `x0` is given: one exchange more than cg's preconditioned setup.

use std::ops::ControlFlow;

use castack_collectives::Communicator;

use super::{LoopEnd, System};
use crate::breakdown::Curvature;
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::{Device, PipecgVecs, PIPECG_SUMS};
use castack_linalg::dist::DistVec;

const NAME: &str = "pipecg";

/// This rank's `[x.x, p.p, s.s, z.z, w.w]` into the reduction slots `3..8` (the gap
/// estimate's norms, as [`Device::pipecg_update`] leaves them), after a setup, a check or
/// a replacement: five passes outside the iteration's fused one.
fn gap_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    [x, p, s, z, w]: [&DistVec<D>; 5],
) -> Result<(), KrylovError> {
    for (k, v) in [x, p, s, z, w].into_iter().enumerate() {
        sys.ops.dot(v, v, 3 + k)?;
    }
    Ok(())
}

/// The 2-norms of the vectors the gap estimate follows, from one reduction. Roles: `u` is
/// the vector whose image is `w` (`w = A u`), `q` the one whose image is `z`, `m` the one
/// whose image `n` entered the last update; without a preconditioner `u = r`, `q = s`,
/// `m = w`.
#[derive(Debug, Clone, Copy, Default)]
struct Norms {
    x: f64,
    r: f64,
    u: f64,
    w: f64,
    p: f64,
    s: f64,
    q: f64,
    m: f64,
    z: f64,
}

impl Norms {
    /// From the reduced `[r.r, r.W r, w.r, x.x, p.p, s.s, z.z, w.w]`.
    fn of(sums: &[f64; PIPECG_SUMS]) -> Self {
        let n = |v: f64| v.max(0.0).sqrt();
        let (r, s, w) = (n(sums[0]), n(sums[5]), n(sums[7]));
        Self {
            r,
            u: r,
            x: n(sums[3]),
            p: n(sums[4]),
            s,
            q: s,
            z: n(sums[6]),
            w,
            m: w,
        }
    }

    /// From the preconditioned loop's reduced `[r.u, r.W r, w.u, x.x, r.r, u.u, w.w, p.p,
    /// s.s, q.q, m.m, z.z]` (`m` the one the last update used).
    fn of_pc(sums: &[f64; PC_SUMS]) -> Self {
        let n = |v: f64| v.max(0.0).sqrt();
        Self {
            x: n(sums[3]),
            r: n(sums[4]),
            u: n(sums[5]),
            w: n(sums[6]),
            p: n(sums[7]),
            s: n(sums[8]),
            q: n(sums[9]),
            m: n(sums[10]),
            z: n(sums[11]),
        }
    }
}

/// How the vectors were last set from their definitions.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fresh {
    /// Not since the last update: the estimate follows the recurrences.
    No,
    /// r and w recomputed (setup, check), directions restarted from them.
    Restart,
    /// r, w, s = A p and z = A s recomputed, directions kept (a replacement).
    Replaced,
}

/// Bounds on the gaps `f_r = (b - A x) - r`, `f_w = A r - w`, `f_s = A p - s` and
/// `f_z = A s - z` built up by local rounding errors, and the automatic replacement
/// decision (module doc, "Automatic residual replacement").
struct Gap {
    /// `eps`, machine precision.
    eps: f64,
    /// The SpMV's rounding factor `mnz sqrt(n)` (`mnz`: stored entries per row, rounded up).
    spmv: f64,
    /// The largest Rayleigh quotient `w.r / r.r` seen: a lower bound on `||Â||` (no
    /// message; Lanczos finds the top of the spectrum in a few dozen iterations).
    anorm: f64,
    fr: f64,
    fw: f64,
    fs: f64,
    fz: f64,
    /// Whether the last `fr` was within `sqrt(eps) ||r||`.
    fr_small: bool,
    /// The last iteration's norms, `alpha`, `beta` (of the update since), if any.
    last: Option<(Norms, f64, f64)>,
    fresh: Fresh,
    /// Updates followed since the vectors were last fresh.
    steps: usize,
    /// The preconditioned loop's estimate (`Norms` roles, module doc).
    precond: bool,
}

impl Gap {
    fn new(n: usize, nnz: usize, precond: bool) -> Self {
        let mnz = if n == 0 { 1.0 } else { nnz.div_ceil(n) as f64 };
        Self {
            precond,
            eps: f64::EPSILON,
            spmv: mnz * (n as f64).sqrt(),
            anorm: 0.0,
            fr: 0.0,
            fw: 0.0,
            fs: 0.0,
            fz: 0.0,
            fr_small: false,
            last: None,
            fresh: Fresh::Restart,
            steps: 0,
        }
    }

    /// Take in this iteration's reduced values (the norms of the vectors the last update
    /// made, `d = w.r`); `true` when the residual is due for a replacement: its gap bound
    /// crossed `sqrt(eps) ||r||` in the last update (van der Vorst and Ye; Cools et al.).
    fn measure(&mut self, now: Norms, d: f64) -> bool {
        if now.u > 0.0 && d.is_finite() {
            self.anorm = self.anorm.max(d / (now.u * now.u));
        }
        let (e, a, c) = (self.eps, self.anorm, self.spmv);
        let tau = e.sqrt();
        match (self.fresh, self.last) {
            (Fresh::Restart | Fresh::Replaced, _) | (_, None) => {
                // r = b - A x: the SpMV and the subtraction (||b|| <= ||r|| + ||A|| ||x||);
                // w = A r: the SpMV.
                self.fr = e * ((c + 2.0) * a * now.x + now.r).sqrt();
                self.fw = e * (c * a * now.u).sqrt();
                // After a restart beta = 0 drops them; after a replacement s = A p, z = A q.
                (self.fs, self.fz) = match self.fresh {
                    Fresh::Replaced => (e * (c * a * now.p).sqrt(), e * (c * a * now.q).sqrt()),
                    _ => (0.0, 0.0),
                };
                self.fr_small = self.fr <= tau * now.r;
                self.fresh = Fresh::No;
                self.steps = 0;
                false
            }
            (Fresh::No, Some((was, alpha, beta))) => {
                let (al, be) = (alpha.abs(), beta.abs());
                // Local rounding of the update from `was` to `now` (each `y + c v` errs by
                // at most eps (|y| + 2 |c| |v|) per entry, in norm; an SpMV by eps c ||A||).
                // `m`: the vector whose image entered the update (without a preconditioner
                // the last iteration's w; with one, the m reduced now, made after it).
                let m = if self.precond { now.m } else { was.m };
                let ncs = e * (a * was.u + 2.0 * a * be * was.p + was.w + 2.0 * be * was.s).sqrt();
                let ncz = e * ((c + 1.0) * a * m + 2.0 * be * was.z).sqrt();
                let ncr = e * (a * was.x + 2.0 * a * al * now.p + was.r + 2.0 * al * now.s).sqrt();
                let ncw = e * (a * was.u + 2.0 * a * al * now.q + was.w + 2.0 * al * now.z).sqrt();
                self.fs = self.fw + be * self.fs + ncs;
                self.fz = be * self.fz + ncz;
                self.fr += al * self.fs + ncr;
                self.fw += al * self.fz + ncw;
                self.steps += 1;
                let was_small = std::mem::replace(&mut self.fr_small, self.fr <= tau * now.r);
                self.steps > 1 && was_small && !self.fr_small
            }
        }
    }
}

/// The state of either loop beside its vectors and its reduction of `N` values.
struct Pipeline<const N: usize> {
    /// Scalars already reduced (after a replacement at a failed check).
    known: Option<[f64; N]>,
    /// The directions restart from the residual.
    restart: bool,
    /// The last step's `g` and `a`.
    g_old: f64,
    a_old: f64,
    it: usize,
    /// The last iteration recorded.
    recorded: usize,
    /// Iterations since the last replacement.
    since: usize,
    /// An automatic replacement is due (decided at the last iteration's top).
    auto_due: bool,
    gap: Gap,
}

impl<const N: usize> Pipeline<N> {
    fn new(gap: Gap) -> Self {
        Self {
            known: None,
            restart: true,
            g_old: 0.0,
            a_old: 0.0,
            it: 0,
            recorded: 0,
            since: 0,
            auto_due: false,
            gap,
        }
    }

    /// Whether a periodic (`every`) or automatic replacement keeping the directions is due
    /// at the loop's top (none right after a check).
    fn replacement_due(&mut self, every: Option<usize>) -> bool {
        let periodic = every.is_some_and(|k| self.since >= k);
        self.known.is_none() && (periodic || std::mem::take(&mut self.auto_due))
    }

    /// The replacement was made (its sums wait in the slots).
    fn replaced<C: Communicator + ?Sized, D: Device>(&mut self, sys: &mut System<'_, C, D>) {
        self.gap.fresh = Fresh::Replaced;
        self.since = 0;
        sys.replacements += 1;
    }

    /// This iteration's reduced sums: the loop's one reduction, started before `overlap`
    /// (the work its latency hides behind) and finished after it even when that fails; or,
    /// right after a failed check, the sums it reduced, `overlap` done alone. The first
    /// reduction (the initial norms) counts as setup; all else is loop.
    fn sums<C, D, F>(
        &mut self,
        sys: &mut System<'_, C, D>,
        overlap: F,
    ) -> Result<[f64; N], KrylovError>
    where
        C: Communicator + ?Sized,
        D: Device,
        F: FnOnce(&mut System<'_, C, D>) -> Result<(), KrylovError>,
    {
        if let Some(sums) = self.known.take() {
            overlap(sys)?;
            return Ok(sums);
        }
        let pending = sys.ops.begin(N)?;
        sys.ops.set_phase(Phase::Loop);
        let overlapped = overlap(sys);
        let mut sums = [0.0; N];
        let finished = sys.ops.finish(pending, &mut sums);
        overlapped?;
        finished?;
        Ok(sums)
    }

    /// The recurrence's norm from its reduced `||r||_w^2 = rw`, recorded once per
    /// iteration, and whether the iteration ends the loop (the norm meets the target, or
    /// the budget is spent).
    fn record<C: Communicator + ?Sized, D: Device>(
        &mut self,
        sys: &mut System<'_, C, D>,
        rw: f64,
    ) -> Result<(f64, bool), KrylovError> {
        let it = self.it;
        let rnorm = crate::breakdown::finite_or(NAME, rw, it, "||r||")?.sqrt();
        if it > self.recorded {
            sys.record(it, rnorm);
            self.recorded = it;
        }
        Ok((rnorm, sys.meets(rnorm) || it >= sys.cfg.max_iter))
    }

    /// The step's `beta` (0 at a (re)start), its curvature `d - beta g / a_old` (`d` at a
    /// (re)start, named `at_restart` there) with its name, and the size of the two terms
    /// the curvature is the difference of.
    fn coefficients(
        &self,
        g: f64,
        d: f64,
        at_restart: &'static str,
    ) -> (f64, f64, &'static str, f64) {
        if self.restart {
            (0.0, d, at_restart, 0.0)
        } else {
            let beta = g / self.g_old;
            let term = beta * g / self.a_old;
            (beta, d - term, "p^T A p", d.abs() + term.abs())
        }
    }

    /// The check's one reduction of the true residual's sums (this rank's in the slots)
    /// and its verdict at the recurrence's norm `rnorm`: the end of the loop, or go on with
    /// the true residual's norm and sums.
    fn check<C: Communicator + ?Sized, D: Device>(
        &self,
        sys: &mut System<'_, C, D>,
        rnorm: f64,
    ) -> Result<ControlFlow<LoopEnd, (f64, [f64; N])>, KrylovError> {
        let mut t_sums = [0.0; N];
        sys.ops.reduce(&mut t_sums)?;
        Ok(match sys.verdict(NAME, t_sums[1], rnorm, self.it)? {
            ControlFlow::Break(end) => ControlFlow::Break(end),
            ControlFlow::Continue(tnorm) => ControlFlow::Continue((tnorm, t_sums)),
        })
    }

    /// After a failed check, the vectors swapped for the true ones: go on from the check's
    /// sums with the directions restarted (a replacement).
    fn restarted<C: Communicator + ?Sized, D: Device>(
        &mut self,
        sys: &mut System<'_, C, D>,
        t_sums: [f64; N],
    ) {
        self.known = Some(t_sums);
        self.restart = true;
        self.gap.fresh = Fresh::Restart;
        self.auto_due = false;
        self.since = 0;
        sys.replacements += 1;
    }

    /// The step with `g` and step length `a` was taken.
    fn stepped(&mut self, g: f64, a: f64) {
        self.g_old = g;
        self.a_old = a;
        self.it += 1;
        self.since += 1;
    }
}

/// The loop without a loop preconditioner (module doc).
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut w, mut q, mut z, mut s, mut p, mut rt, mut wt] = sys.vecs()?;
    sys.ops.prepare(PIPECG_SUMS)?;
    sys.ops.prepare_split(PIPECG_SUMS)?;

    // Setup: r0 and w0 = A r0 (no reduction yet: the loop's first one measures them).
    if x0_given {
        sys.residual_image(x, &mut r, &mut w, None)?;
    } else {
        sys.ops.copy(&sys.bhat, &mut r)?;
        sys.a.spmv(&mut sys.ops, &mut r, &mut w)?;
    }
    // This rank's [g = r.r, ||r||_w^2, d = w.r] and the gap norms wait in the slots.
    super::residual_sums(sys, &r, &w, 0)?;
    gap_sums(sys, [&*x, &p, &s, &z, &w])?;
    let mut pl = Pipeline::<PIPECG_SUMS>::new(Gap::new(sys.a.n(), sys.a.nnz(), false));
    loop {
        if pl.replacement_due(sys.cfg.replace_every) {
            // Periodic or automatic replacement keeping the directions (module doc).
            sys.residual_image(x, &mut r, &mut w, None)?;
            sys.a.spmv(&mut sys.ops, &mut p, &mut s)?;
            sys.a.spmv(&mut sys.ops, &mut s, &mut z)?;
            super::residual_sums(sys, &r, &w, 0)?;
            gap_sums(sys, [&*x, &p, &s, &z, &w])?;
            pl.replaced(sys);
        }
        // q = A w overlaps the reduction.
        let sums = pl.sums(sys, |sys| sys.a.spmv(&mut sys.ops, &mut w, &mut q))?;
        let [g, rw, d, ..] = sums;
        let it = pl.it;
        let (rnorm, done) = pl.record(sys, rw)?;
        // The step's curvature, unless the iteration ends here.
        let step = if done {
            None
        } else {
            crate::breakdown::finite_or(NAME, g, it, "r^T r")?;
            crate::breakdown::finite_or(NAME, d, it, "w^T r")?;
            let now = Norms::of(&sums);
            pl.auto_due = pl.gap.measure(now, d) && sys.cfg.auto_replace;
            let (beta, denom, quantity, _) = pl.coefficients(g, d, "r^T A r");
            // ||p_new||^2 = r.r + beta^2 p.p (r orthogonal to p in exact arithmetic).
            let scale = (g + beta * beta * sums[4]) * pl.gap.anorm;
            match crate::breakdown::curvature(NAME, denom, it, quantity, scale, pl.restart)? {
                Curvature::Step(den) => Some((beta, den, now)),
                Curvature::Rounding => None,
            }
        };
        let Some((beta, den, now)) = step else {
            // Converged by the recurrence, out of iterations, or a curvature at rounding
            // level: check the true residual.
            sys.residual_image(x, &mut rt, &mut wt, None)?;
            super::residual_sums(sys, &rt, &wt, 0)?;
            gap_sums(sys, [&*x, &p, &s, &z, &wt])?;
            let t_sums = match pl.check(sys, rnorm)? {
                ControlFlow::Break(end) => return Ok(end),
                ControlFlow::Continue((_, t_sums)) => t_sums,
            };
            // The recurrence drifted: continue from the true residual and its image and
            // restart the directions, with the scalars just reduced.
            std::mem::swap(&mut r, &mut rt);
            std::mem::swap(&mut w, &mut wt);
            pl.restarted(sys, t_sums);
            continue;
        };
        let a = g / den;
        sys.ritz_direction((!pl.restart).then_some(beta), a);
        pl.restart = false;
        pl.gap.last = Some((now, a, beta));

        // z = q + beta z, s = w + beta s, p = r + beta p, x += a p, r -= a s, w -= a z and
        // the next reduction's sums, in one pass.
        let vecs = PipecgVecs {
            w: &mut w,
            r: &mut r,
            z: &mut z,
            s: &mut s,
            p: &mut p,
            x: &mut *x,
        };
        sys.ops.pipecg_update(a, beta, &q, vecs, &sys.w, 0)?;
        pl.stepped(g, a);
    }
}

/// Slots of the preconditioned loop's one reduction: `[r.u, ||r||_w^2, w.u]` and, with
/// `auto_replace`, the gap estimate's `[x.x, r.r, u.u, w.w, p.p, s.s, q.q, m.m, z.z]`.
const PC_SUMS: usize = 12;

/// This rank's squared norms of `[x, r, u, w, p, s, q, m, z]` into the slots `3..12` (the
/// preconditioned gap estimate's, module doc): nine passes, made only with `auto_replace`.
fn pc_gap_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    vs: [&DistVec<D>; 9],
) -> Result<(), KrylovError> {
    if sys.cfg.auto_replace {
        for (k, v) in vs.into_iter().enumerate() {
            sys.ops.dot(v, v, 3 + k)?;
        }
    }
    Ok(())
}

/// This rank's `[r.u, ||r||_w^2, w.u]` into the reduction slots `0..3`.
fn pc_sums<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    u: &DistVec<D>,
    w: &DistVec<D>,
) -> Result<(), KrylovError> {
    sys.ops.dot(r, u, 0)?;
    sys.ops.wnorm(r, &sys.w, 1)?;
    Ok(sys.ops.dot(w, u, 2)?)
}

/// `r = b̂ - Â x`, `u = M^-1 r`, `w = Â u`: two counted exchanges and one application of
/// `M^-1`, no reduction.
fn pc_recompute<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    [r, u, w]: [&mut DistVec<D>; 3],
) -> Result<(), KrylovError> {
    sys.residual(x, r)?;
    sys.precondition(r, u)?;
    sys.a.spmv(&mut sys.ops, u, w)
}

/// The preconditioned loop (module doc, "Preconditioned form").
pub(crate) fn run_preconditioned<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, mut u, mut w, mut m, mut n, mut z, mut q, mut s, mut p] = sys.vecs()?;
    let [mut rt, mut ut, mut wt] = sys.vecs()?;
    sys.ops.prepare(PC_SUMS)?;
    sys.ops.prepare_split(PC_SUMS)?;

    // Setup: r0, u0 = M^-1 r0, w0 = Â u0 (no reduction yet: the loop's first one measures
    // them).
    if x0_given {
        pc_recompute(sys, x, [&mut r, &mut u, &mut w])?;
    } else {
        sys.ops.copy(&sys.bhat, &mut r)?;
        sys.precondition(&r, &mut u)?;
        sys.a.spmv(&mut sys.ops, &mut u, &mut w)?;
    }
    pc_sums(sys, &r, &u, &w)?;
    pc_gap_sums(sys, [&*x, &r, &u, &w, &p, &s, &q, &m, &z])?;
    let mut pl = Pipeline::<PC_SUMS>::new(Gap::new(sys.a.n(), sys.a.nnz(), true));
    // `anorm`: the largest `1/a = p^T Â p / r^T M^-1 r` so far, scaling the rounding level
    // of the curvature as in cg's preconditioned loop.
    let mut anorm = 0.0f64;
    // A curvature breakdown after a step, taken for the recurrences' drift (module doc),
    // and the least true residual such a check found so far.
    let mut drift: Option<KrylovError> = None;
    let mut drift_best = f64::INFINITY;
    loop {
        if pl.replacement_due(sys.cfg.replace_every) {
            // Periodic or automatic replacement keeping the directions (module doc): r, u,
            // w and s = Â p, q = M^-1 s, z = Â q from their definitions.
            pc_recompute(sys, x, [&mut r, &mut u, &mut w])?;
            sys.a.spmv(&mut sys.ops, &mut p, &mut s)?;
            sys.precondition(&s, &mut q)?;
            sys.a.spmv(&mut sys.ops, &mut q, &mut z)?;
            pc_sums(sys, &r, &u, &w)?;
            pc_gap_sums(sys, [&*x, &r, &u, &w, &p, &s, &q, &m, &z])?;
            pl.replaced(sys);
        }
        // m = M^-1 w and n = Â m overlap the reduction.
        let sums = pl.sums(sys, |sys| {
            sys.precondition(&w, &mut m)
                .and_then(|()| sys.a.spmv(&mut sys.ops, &mut m, &mut n))
        })?;
        let [g, rw, d] = [sums[0], sums[1], sums[2]];
        let now = Norms::of_pc(&sums);
        pl.auto_due = sys.cfg.auto_replace && pl.gap.measure(now, d);
        let it = pl.it;
        let (rnorm, done) = pl.record(sys, rw)?;
        // The step's curvature, unless the iteration ends here.
        let step = if done {
            None
        } else {
            let g = crate::breakdown::finite_or(NAME, g, it, "r^T M^-1 r")?;
            crate::breakdown::finite_or(NAME, d, it, "w^T u")?;
            if g <= 0.0 && !(g == 0.0 && rw == 0.0) {
                // M not positive definite (a zero residual goes to the check).
                return Err(crate::breakdown::breakdown(NAME, it, "r^T M^-1 r", g));
            }
            let (beta, denom, quantity, cancelled) = pl.coefficients(g, d, "u^T A u");
            // The rounding level: `r.u` times the largest `1/a` (as cg's preconditioned
            // loop) plus the size of the two terms whose difference the curvature is.
            let scale = g * anorm + cancelled;
            match crate::breakdown::curvature(NAME, denom, it, quantity, scale, pl.restart) {
                Ok(Curvature::Step(den)) => Some((beta, den)),
                Ok(Curvature::Rounding) => None,
                // After a step, a finite non-positive curvature: the recurrences' drift
                // (with A and M positive definite), checked and replaced like a rounding
                // level one while each such check finds a smaller true residual.
                Err(e) if !pl.restart && denom.is_finite() => {
                    drift = Some(e);
                    None
                }
                Err(e) => return Err(e),
            }
        };
        let Some((beta, den)) = step else {
            // Converged by the recurrence, out of iterations, or a curvature at rounding
            // level: check the true residual.
            pc_recompute(sys, x, [&mut rt, &mut ut, &mut wt])?;
            pc_sums(sys, &rt, &ut, &wt)?;
            pc_gap_sums(sys, [&*x, &rt, &ut, &wt, &p, &s, &q, &m, &z])?;
            let (tnorm, t_sums) = match pl.check(sys, rnorm)? {
                ControlFlow::Break(end) => return Ok(end),
                ControlFlow::Continue(checked) => checked,
            };
            if let Some(e) = drift.take() {
                if tnorm >= drift_best {
                    // No progress since the last such restart: a breakdown after all.
                    return Err(e);
                }
                drift_best = tnorm;
            }
            // The recurrence drifted: continue from the true residual, its preconditioned
            // residual and image, and restart the directions, with the scalars just reduced.
            std::mem::swap(&mut r, &mut rt);
            std::mem::swap(&mut u, &mut ut);
            std::mem::swap(&mut w, &mut wt);
            pl.restarted(sys, t_sums);
            continue;
        };
        let a = g / den;
        pl.gap.last = Some((now, a, beta));
        anorm = anorm.max(den / g);
        sys.ritz_direction((!pl.restart).then_some(beta), a);
        pl.restart = false;

        // z = n + beta z, q = m + beta q, s = w + beta s, p = u + beta p;
        // x += a p, r -= a s, u -= a q, w -= a z; the next reduction's sums.
        sys.ops.xpay(&n, beta, &mut z)?;
        sys.ops.xpay(&m, beta, &mut q)?;
        sys.ops.xpay(&w, beta, &mut s)?;
        sys.ops.xpay(&u, beta, &mut p)?;
        sys.ops.axpy(a, &p, x)?;
        sys.ops.axpy(-a, &s, &mut r)?;
        sys.ops.axpy(-a, &q, &mut u)?;
        sys.ops.axpy(-a, &z, &mut w)?;
        pc_sums(sys, &r, &u, &w)?;
        pc_gap_sums(sys, [&*x, &r, &u, &w, &p, &s, &q, &m, &z])?;
        pl.stepped(g, a);
    }
}
