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
//!   reduced in ONE message `[rt.rt, rt.A rt, ||rt||_w^2]` with the bound on its rounding
//!   error (`super`'s *Certified convergence*). If `rt` misses the tolerance,
//!   r and w are replaced by `rt` and `A rt` and the directions restart from them, with the
//!   scalars just reduced (no further reduction).
//! - `replace_every = R`: every R iterations r, w and the auxiliary vectors are recomputed
//!   from their definitions, `r = b - A x`, `w = A r`, `s = A p`, `z = A s` (four SpMVs,
//!   no reduction: the next iteration's reduction measures them), keeping the directions
//!   (Cools, Yetkin, Agullo, Giraud and Vanroose, "Analyzing the effect of local rounding
//!   error propagation on the maximal attainable accuracy of the pipelined Conjugate
//!   Gradient method", SIMAX 39(1), 2018). Restarting the directions instead loses CG's
//!   superlinear convergence (measured: `README.md` here, *Measured*).
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
//! ONE loop runs both forms: the recurrence is Ghysels and Vanroose's Alg. 3 WITH the
//! preconditioner, and the plain form above is its identity case (`u = r`, `m = w`,
//! `q = s`, `n` the plain form's `q`: no vector, no copy). What `M^-1` changes is a
//! [`Flavor`]'s: the identity fuses the six updates with the next reduction's sums into
//! `pipecg_update` and keeps its gap estimate and curvature test as above; an applied
//! `M^-1` (`bjacobi_ic0`, `chebyshev`, an embedder's; `sys.pc`) runs Alg. 3 with the
//! preconditioner (same paper), on the scaled system; in exact arithmetic `u = M^-1 r`,
//! `w = Â u`, `m = M^-1 w`, `n = Â m`, `s = Â p`, `q = M^-1 s`, `z = Â q`:
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
//!   one application) and reduces `[rt.ut, ||rt||_w^2, wt.ut]` and the bound in ONE message; a miss
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

    /// The check's one reduction of the true residual's sums and, after them, the bound on
    /// its rounding error (this rank's in the slots `0..=N`) and its verdict at the
    /// recurrence's norm `rnorm`: the end of the loop, or go on with the true residual's
    /// norm and sums.
    fn check<C: Communicator + ?Sized, D: Device>(
        &self,
        sys: &mut System<'_, C, D>,
        rnorm: f64,
    ) -> Result<ControlFlow<LoopEnd, (f64, [f64; N])>, KrylovError> {
        let mut all = [0.0; CHECK_SLOTS];
        sys.ops.reduce(&mut all[..=N])?;
        let mut t_sums = [0.0; N];
        t_sums.copy_from_slice(&all[..N]);
        Ok(
            match sys.verdict(NAME, t_sums[1], all[N], rnorm, self.it)? {
                ControlFlow::Break(end) => ControlFlow::Break(end),
                ControlFlow::Continue(tnorm) => ControlFlow::Continue((tnorm, t_sums)),
            },
        )
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

/// The loop, plain or preconditioned (module doc): the identity's fused pass where there
/// is no loop preconditioner, an applied `M^-1` with its own `u`, `m`, `q` where there is
/// one.
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    if sys.pc.is_some() {
        let [u, m, q, ut] = sys.vecs()?;
        let applied = Applied {
            u,
            m,
            q,
            ut,
            anorm: 0.0,
            drift: None,
            drift_best: f64::INFINITY,
        };
        iterate::<C, D, PC_SUMS, _>(sys, x, x0_given, applied)
    } else {
        iterate::<C, D, PIPECG_SUMS, _>(sys, x, x0_given, Identity)
    }
}

/// The vectors of the one recurrence (module doc): `n = Â m` (the plain form's `q`), and
/// the check's `rt`, `wt`.
struct Vecs<D: Device> {
    r: DistVec<D>,
    w: DistVec<D>,
    n: DistVec<D>,
    z: DistVec<D>,
    s: DistVec<D>,
    p: DistVec<D>,
    rt: DistVec<D>,
    wt: DistVec<D>,
}

/// The one recurrence (module doc) with a reduction of `N` values; `m` decides the passes
/// that `M^-1` changes.
fn iterate<C, D, const N: usize, M>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
    mut m: M,
) -> Result<LoopEnd, KrylovError>
where
    C: Communicator + ?Sized,
    D: Device,
    M: Flavor<C, D, N>,
{
    let [r, w, n, z, s, p, rt, wt] = sys.vecs()?;
    let mut v = Vecs {
        r,
        w,
        n,
        z,
        s,
        p,
        rt,
        wt,
    };
    sys.ops.prepare(N)?;
    sys.ops.prepare(N + 1)?;
    sys.ops.prepare_split(N)?;

    // Setup: r0, u0 = M^-1 r0, w0 = Â u0 (no reduction yet: the loop's first one measures
    // them, its sums waiting in the slots).
    m.start(sys, x, &mut v, x0_given)?;
    let mut pl = Pipeline::<N>::new(Gap::new(sys.a.n(), sys.a.nnz(), M::PRECOND));
    loop {
        if pl.replacement_due(sys.cfg.replace_every) {
            // Periodic or automatic replacement keeping the directions (module doc).
            m.replace(sys, x, &mut v)?;
            pl.replaced(sys);
        }
        // n = Â M^-1 w overlaps the reduction.
        let sums = pl.sums(sys, |sys| m.overlap(sys, &mut v))?;
        let [g, rw, d] = [sums[0], sums[1], sums[2]];
        let now = M::norms(&sums);
        m.measure_first(sys, &mut pl, now, d);
        let (rnorm, done) = pl.record(sys, rw)?;
        // The step's curvature, unless the iteration ends here.
        let step = if done {
            None
        } else {
            m.curvature(sys, &mut pl, &sums, now)?
        };
        let Some((beta, den)) = step else {
            // Converged by the recurrence, out of iterations, or a curvature at rounding
            // level: check the true residual.
            m.check(sys, x, &mut v)?;
            let (tnorm, t_sums) = match pl.check(sys, rnorm)? {
                ControlFlow::Break(end) => return Ok(end),
                ControlFlow::Continue(checked) => checked,
            };
            m.checked(tnorm)?;
            // The recurrence drifted: continue from the true residual (its preconditioned
            // residual) and image and restart the directions, with the scalars just
            // reduced.
            std::mem::swap(&mut v.r, &mut v.rt);
            std::mem::swap(&mut v.w, &mut v.wt);
            m.swap_checked();
            pl.restarted(sys, t_sums);
            continue;
        };
        let a = g / den;
        m.took(g, den);
        pl.gap.last = Some((now, a, beta));
        sys.ritz_direction((!pl.restart).then_some(beta), a);
        pl.restart = false;
        m.update(sys, [a, beta], &mut v, x)?;
        pl.stepped(g, a);
    }
}

/// What the loop preconditioner changes in pipecg's recurrence (module doc): where `u`,
/// `m`, `q` live, which passes update the vectors and leave the next reduction's `N` sums,
/// the gap estimate's roles and the curvature test.
trait Flavor<C: Communicator + ?Sized, D: Device, const N: usize> {
    /// The gap estimate follows the preconditioned recurrences (`Norms` roles).
    const PRECOND: bool;

    /// Set-up: `r = b̂ - Â x` (`b̂` without `x0`), `u = M^-1 r`, `w = Â u`, this rank's
    /// sums in the slots.
    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
        x0_given: bool,
    ) -> Result<(), KrylovError>;

    /// A replacement keeping the directions: `r`, `u`, `w` and `s = Â p`, `q = M^-1 s`,
    /// `z = Â q` from their definitions, this rank's sums in the slots.
    fn replace(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
    ) -> Result<(), KrylovError>;

    /// The work the reduction's latency hides behind: `m = M^-1 w`, `n = Â m`.
    fn overlap(&mut self, sys: &mut System<'_, C, D>, v: &mut Vecs<D>) -> Result<(), KrylovError>;

    /// The gap estimate's norms from the reduced sums.
    fn norms(sums: &[f64; N]) -> Norms;

    /// Where the estimate takes in the reduced values before the recurrence's norm is
    /// recorded (the preconditioned loop; the plain one measures in [`Flavor::curvature`]).
    fn measure_first(&mut self, sys: &System<'_, C, D>, pl: &mut Pipeline<N>, now: Norms, d: f64);

    /// The step's `(beta, curvature)`, or `None` for a true-residual check (a curvature at
    /// rounding level, or the preconditioned loop's drift); breakdowns as the module doc.
    fn curvature(
        &mut self,
        sys: &System<'_, C, D>,
        pl: &mut Pipeline<N>,
        sums: &[f64; N],
        now: Norms,
    ) -> Result<Option<(f64, f64)>, KrylovError>;

    /// The check's vectors `rt = b̂ - Â x`, `ut = M^-1 rt`, `wt = Â ut` and this rank's
    /// sums in the slots.
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
    ) -> Result<(), KrylovError>;

    /// A check that missed, at true residual `tnorm`: a breakdown where a drift restart
    /// made no progress (the preconditioned loop).
    fn checked(&mut self, tnorm: f64) -> Result<(), KrylovError>;

    /// After a missed check the loop continues from the check's vectors: `u` from `ut`.
    fn swap_checked(&mut self);

    /// A step with `g` and curvature `den` is taken.
    fn took(&mut self, g: f64, den: f64);

    /// `z = n + beta z, q = m + beta q, s = w + beta s, p = u + beta p; x += a p,
    /// r -= a s, u -= a q, w -= a z` and this rank's sums of the next reduction.
    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        ab: [f64; 2],
        v: &mut Vecs<D>,
        x: &mut DistVec<D>,
    ) -> Result<(), KrylovError>;
}

/// No loop preconditioner: `u = r`, `m = w`, `q = s`; the six updates and the next
/// reduction's eight sums in one pass (module doc).
struct Identity;

impl<C: Communicator + ?Sized, D: Device> Flavor<C, D, PIPECG_SUMS> for Identity {
    const PRECOND: bool = false;

    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
        x0_given: bool,
    ) -> Result<(), KrylovError> {
        if x0_given {
            sys.residual_image(x, &mut v.r, &mut v.w, None)?;
        } else {
            sys.ops.copy(&sys.bhat, &mut v.r)?;
            sys.a.spmv(&mut sys.ops, &mut v.r, &mut v.w)?;
        }
        // This rank's [g = r.r, ||r||_w^2, d = w.r] and the gap norms wait in the slots.
        super::residual_sums(sys, &v.r, &v.w, 0)?;
        gap_sums(sys, [&*x, &v.p, &v.s, &v.z, &v.w])
    }

    fn replace(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
    ) -> Result<(), KrylovError> {
        sys.residual_image(x, &mut v.r, &mut v.w, None)?;
        sys.a.spmv(&mut sys.ops, &mut v.p, &mut v.s)?;
        sys.a.spmv(&mut sys.ops, &mut v.s, &mut v.z)?;
        super::residual_sums(sys, &v.r, &v.w, 0)?;
        gap_sums(sys, [&*x, &v.p, &v.s, &v.z, &v.w])
    }

    fn overlap(&mut self, sys: &mut System<'_, C, D>, v: &mut Vecs<D>) -> Result<(), KrylovError> {
        sys.a.spmv(&mut sys.ops, &mut v.w, &mut v.n)
    }

    fn norms(sums: &[f64; PIPECG_SUMS]) -> Norms {
        Norms::of(sums)
    }

    fn measure_first(
        &mut self,
        _: &System<'_, C, D>,
        _: &mut Pipeline<PIPECG_SUMS>,
        _: Norms,
        _: f64,
    ) {
    }

    fn curvature(
        &mut self,
        sys: &System<'_, C, D>,
        pl: &mut Pipeline<PIPECG_SUMS>,
        sums: &[f64; PIPECG_SUMS],
        now: Norms,
    ) -> Result<Option<(f64, f64)>, KrylovError> {
        let (it, [g, _, d, ..]) = (pl.it, *sums);
        crate::breakdown::finite_or(NAME, g, it, "r^T r")?;
        crate::breakdown::finite_or(NAME, d, it, "w^T r")?;
        pl.auto_due = pl.gap.measure(now, d) && sys.cfg.auto_replace;
        let (beta, denom, quantity, _) = pl.coefficients(g, d, "r^T A r");
        // ||p_new||^2 = r.r + beta^2 p.p (r orthogonal to p in exact arithmetic).
        let scale = (g + beta * beta * sums[4]) * pl.gap.anorm;
        Ok(
            match crate::breakdown::curvature(NAME, denom, it, quantity, scale, pl.restart)? {
                Curvature::Step(den) => Some((beta, den)),
                Curvature::Rounding => None,
            },
        )
    }

    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
    ) -> Result<(), KrylovError> {
        // The bound waits after the loop's sums; the fused pass's own norms in 0 and 1
        // give way to the loop's (the sums every iteration reduces).
        sys.checked_residual_local(x, &mut v.rt, 0, PIPECG_SUMS)?;
        sys.a.spmv(&mut sys.ops, &mut v.rt, &mut v.wt)?;
        super::residual_sums(sys, &v.rt, &v.wt, 0)?;
        gap_sums(sys, [&*x, &v.p, &v.s, &v.z, &v.wt])
    }

    fn checked(&mut self, _: f64) -> Result<(), KrylovError> {
        Ok(())
    }

    fn swap_checked(&mut self) {}

    fn took(&mut self, _: f64, _: f64) {}

    /// `z = q + beta z, s = w + beta s, p = r + beta p, x += a p, r -= a s, w -= a z` and
    /// the next reduction's sums, in one pass.
    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        [a, beta]: [f64; 2],
        v: &mut Vecs<D>,
        x: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        let vecs = PipecgVecs {
            w: &mut v.w,
            r: &mut v.r,
            z: &mut v.z,
            s: &mut v.s,
            p: &mut v.p,
            x,
        };
        Ok(sys.ops.pipecg_update(a, beta, &v.n, vecs, &sys.w, 0)?)
    }
}

/// Slots of the preconditioned loop's one reduction: `[r.u, ||r||_w^2, w.u]` and, with
/// `auto_replace`, the gap estimate's `[x.x, r.r, u.u, w.w, p.p, s.s, q.q, m.m, z.z]`.
const PC_SUMS: usize = 12;

/// Room for a check's reduction: the loop's sums (at most [`PC_SUMS`]) and the bound on
/// the true residual's rounding error after them.
const CHECK_SLOTS: usize = PC_SUMS + 1;

/// A loop preconditioner `M^-1` (`sys.pc`): `u = M^-1 r`, `m = M^-1 w`, `q = M^-1 s` and
/// the check's `ut` are its own, with its curvature's scale and drift state.
struct Applied<D: Device> {
    u: DistVec<D>,
    m: DistVec<D>,
    q: DistVec<D>,
    ut: DistVec<D>,
    /// The largest `1/a = p^T Â p / r^T M^-1 r` so far, scaling the rounding level of the
    /// curvature as in cg's preconditioned loop.
    anorm: f64,
    /// A curvature breakdown after a step, taken for the recurrences' drift (module doc).
    drift: Option<KrylovError>,
    /// The least true residual such a check found so far.
    drift_best: f64,
}

impl<D: Device> Applied<D> {
    /// This rank's `[r.u, ||r||_w^2, w.u]` into the slots `0..3` and, with `auto_replace`,
    /// the squared norms of `[x, r, u, w, p, s, q, m, z]` into `3..12`; `rt`, `ut`, `wt`
    /// in place of `r`, `u`, `w` for a check.
    fn slots<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        x: &DistVec<D>,
        v: &Vecs<D>,
        check: bool,
    ) -> Result<(), KrylovError> {
        let (r, u, w) = if check {
            (&v.rt, &self.ut, &v.wt)
        } else {
            (&v.r, &self.u, &v.w)
        };
        sys.ops.dot(r, u, 0)?;
        sys.ops.wnorm(r, &sys.w, 1)?;
        sys.ops.dot(w, u, 2)?;
        if sys.cfg.auto_replace {
            let vs = [x, r, u, w, &v.p, &v.s, &self.q, &self.m, &v.z];
            for (k, v) in vs.into_iter().enumerate() {
                sys.ops.dot(v, v, 3 + k)?;
            }
        }
        Ok(())
    }
}

impl<C: Communicator + ?Sized, D: Device> Flavor<C, D, PC_SUMS> for Applied<D> {
    const PRECOND: bool = true;

    fn start(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
        x0_given: bool,
    ) -> Result<(), KrylovError> {
        if x0_given {
            sys.residual(x, &mut v.r)?;
        } else {
            sys.ops.copy(&sys.bhat, &mut v.r)?;
        }
        sys.precondition(&v.r, &mut self.u)?;
        sys.a.spmv(&mut sys.ops, &mut self.u, &mut v.w)?;
        self.slots(sys, x, v, false)
    }

    fn replace(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
    ) -> Result<(), KrylovError> {
        sys.residual(x, &mut v.r)?;
        sys.precondition(&v.r, &mut self.u)?;
        sys.a.spmv(&mut sys.ops, &mut self.u, &mut v.w)?;
        sys.a.spmv(&mut sys.ops, &mut v.p, &mut v.s)?;
        sys.precondition(&v.s, &mut self.q)?;
        sys.a.spmv(&mut sys.ops, &mut self.q, &mut v.z)?;
        self.slots(sys, x, v, false)
    }

    fn overlap(&mut self, sys: &mut System<'_, C, D>, v: &mut Vecs<D>) -> Result<(), KrylovError> {
        sys.precondition(&v.w, &mut self.m)?;
        sys.a.spmv(&mut sys.ops, &mut self.m, &mut v.n)
    }

    fn norms(sums: &[f64; PC_SUMS]) -> Norms {
        Norms::of_pc(sums)
    }

    fn measure_first(
        &mut self,
        sys: &System<'_, C, D>,
        pl: &mut Pipeline<PC_SUMS>,
        now: Norms,
        d: f64,
    ) {
        pl.auto_due = sys.cfg.auto_replace && pl.gap.measure(now, d);
    }

    fn curvature(
        &mut self,
        _: &System<'_, C, D>,
        pl: &mut Pipeline<PC_SUMS>,
        sums: &[f64; PC_SUMS],
        _: Norms,
    ) -> Result<Option<(f64, f64)>, KrylovError> {
        let (it, [g, rw, d]) = (pl.it, [sums[0], sums[1], sums[2]]);
        let g = crate::breakdown::finite_or(NAME, g, it, "r^T M^-1 r")?;
        crate::breakdown::finite_or(NAME, d, it, "w^T u")?;
        if g <= 0.0 && !(g == 0.0 && rw == 0.0) {
            // M not positive definite (a zero residual goes to the check).
            return Err(crate::breakdown::breakdown(NAME, it, "r^T M^-1 r", g));
        }
        let (beta, denom, quantity, cancelled) = pl.coefficients(g, d, "u^T A u");
        // The rounding level: `r.u` times the largest `1/a` (as cg's preconditioned
        // loop) plus the size of the two terms whose difference the curvature is.
        let scale = g * self.anorm + cancelled;
        match crate::breakdown::curvature(NAME, denom, it, quantity, scale, pl.restart) {
            Ok(Curvature::Step(den)) => Ok(Some((beta, den))),
            Ok(Curvature::Rounding) => Ok(None),
            // After a step, a finite non-positive curvature: the recurrences' drift
            // (with A and M positive definite), checked and replaced like a rounding
            // level one while each such check finds a smaller true residual.
            Err(e) if !pl.restart && denom.is_finite() => {
                self.drift = Some(e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        v: &mut Vecs<D>,
    ) -> Result<(), KrylovError> {
        // The bound waits after the loop's sums, which replace the fused pass's norms.
        sys.checked_residual_local(x, &mut v.rt, 0, PC_SUMS)?;
        sys.precondition(&v.rt, &mut self.ut)?;
        sys.a.spmv(&mut sys.ops, &mut self.ut, &mut v.wt)?;
        self.slots(sys, x, v, true)
    }

    fn checked(&mut self, tnorm: f64) -> Result<(), KrylovError> {
        if let Some(e) = self.drift.take() {
            if tnorm >= self.drift_best {
                // No progress since the last such restart: a breakdown after all.
                return Err(e);
            }
            self.drift_best = tnorm;
        }
        Ok(())
    }

    fn swap_checked(&mut self) {
        std::mem::swap(&mut self.u, &mut self.ut);
    }

    fn took(&mut self, g: f64, den: f64) {
        self.anorm = self.anorm.max(den / g);
    }

    fn update(
        &mut self,
        sys: &mut System<'_, C, D>,
        [a, beta]: [f64; 2],
        v: &mut Vecs<D>,
        x: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        sys.ops.xpay(&v.n, beta, &mut v.z)?;
        sys.ops.xpay(&self.m, beta, &mut self.q)?;
        sys.ops.xpay(&v.w, beta, &mut v.s)?;
        sys.ops.xpay(&self.u, beta, &mut v.p)?;
        sys.ops.axpy(a, &v.p, x)?;
        sys.ops.axpy(-a, &v.s, &mut v.r)?;
        sys.ops.axpy(-a, &self.q, &mut self.u)?;
        sys.ops.axpy(-a, &v.z, &mut v.w)?;
        self.slots(sys, x, v, false)
    }
}
