//! `plcg` — p(l)-CG, conjugate gradients with a pipeline of depth `l`: ONE non-blocking
//! reduction per iteration, each finished `l` iterations after it was begun, so that it
//! travels while `l` SpMVs (and applications of `M^-1`) are computed.
//!
//! Reference: J. Cornelis, S. Cools and W. Vanroose, "The communication-hiding conjugate
//! gradient method with deep pipelines", SIAM J. Sci. Comput. 40(4), 2018 (Algorithm 2 there
//! with the preconditioned form of its section 3), as implemented in PETSc's `KSPPIPELCG`
//! (`src/ksp/ksp/impls/cg/pipelcg/pipelcg.c`). CG as the Lanczos process on `M^-1 Â` with an
//! LDL^T factorisation of the tridiagonal `T` (D-Lanczos, Saad, *Iterative Methods for Sparse
//! Linear Systems*, 2nd ed., alg. 6.17), where the Lanczos basis `V` (`M`-orthonormal) is not
//! computed by the SpMV but recovered `l` steps late from an auxiliary basis `Z` that runs
//! ahead of it: `z_{i+1} = (M^-1 Â - sigma_i) z_i` for `i < l` (shifted, like a Newton basis),
//! `z_{i+1} = M^-1 Â z_i` beyond, with `Z = V G` for a banded upper triangular `G` of
//! bandwidth `2l + 1`. The unpreconditioned vectors `u_i = M z_i` are kept alongside (`U`).
//!
//! Per pipeline step `i` (`c = i - l + 1`, the column of `G` completed in it):
//!
//! ```text
//! u_{i+1} = Â z_i - sigma_i u_i (i < l; Â z_i beyond);  z_{i+1} = M^-1 u_{i+1}
//! i >= l: finish the reduction begun at step i - l: column c of G, i.e.
//!         G(c - l, c) = u_c.v_{c-l}, G(j, c) = u_c.z_j (j > c - l); the rest by symmetry
//!         G(j, c) = (G(j, c) - sum_k G(k, j) G(k, c)) / G(j, j)   (j < c)
//!         G(c, c) = sqrt(G(c, c) - sum_k G(k, c)^2)               (restart if <= 0)
//!         gamma_{c-1}, delta_{c-1} (T's entries) from G, sigma and the gammas, deltas
//!           l steps back
//!         v_c = (z-or-q + (sigma_0 - gamma) v_{c-1} - delta' v_{c-2}) / delta   (and the
//!           l - 1 auxiliary bases Q between Z and V the same way), z_{i+1} and u_{i+1}
//!           likewise made columns of the new basis
//! begin [u_{i+1}.v_c, u_{i+1}.z_{i+1-l+1..=i+1}, ||v_c||_w^2 (plain form)]
//!         (finished at step i + l)
//! i >= l: D-Lanczos: eta = gamma - lambda delta', zeta = -lambda zeta,
//!         p = (v - delta' p) / eta,  x += zeta p
//! ```
//!
//! The plain form is its identity case: `u_i = z_i` (no `U` vectors, no copies). The loop
//! preconditioner (`bjacobi_ic0`, `chebyshev`, an embedder's) is applied once per step,
//! after the SpMV, so a reduction hides behind `l` SpMVs AND `l` applications.
//!
//! Shifts: `sigma_i = (lo + hi)/2 + (hi - lo)/2 cos(pi (2i + 1) / (2l))`, the Chebyshev
//! points of the interval `[lo, hi]` that the Chebyshev basis of the s-step methods uses
//! ([`crate::SpectralEstimate::interval`]: `[0, max Ritz]` as a rule), from the same
//! warm-up: [`crate::eig::cg_lanczos`] (with `M^-1`: `pcg_lanczos`) for
//! `warmup_steps(depth)` = 10 CG steps from the initial residual, setup communication that
//! leaves `x` untouched. The paper's (and PETSc's) default interval is a user's `[lmin,
//! lmax]`; an underestimated `hi` makes `G` lose positive definiteness (square-root
//! breakdowns, each a restart), an overestimated one slows convergence; the Ritz estimate is
//! 6-10% low, which depths 1-3 take without a breakdown on 3-D Poisson (the family sweep,
//! `cg/README.md` *Measured*; a safety factor of 1.05 or 1.1 on `hi` helped no depth).
//!
//! Per iteration (after the start-up): 1 SpMV (one halo exchange), 1 application of
//! `M^-1`, **1 global reduction** of `l + 1` values, split-phase ([`crate::Ops::begin`] in
//! iteration `i`, [`crate::Ops::finish`] in iteration `i + l`; `l + 2` values in the plain
//! form, with `||v||_w^2`; up to `l + 1` in flight on
//! the lanes of [`castack_linalg::SolverComm::prepare_split_lanes`]). Vector passes (plain
//! form): `l + 1` dots and a `wnorm` (`16 n` each), the `V`, `Z` and `l - 1` `Q`
//! recurrences (a `scale`, `16 n`, and a two-term `lincomb`, `32 n`, each; `Z`'s result
//! lands in the spare vector and the two swap places), the direction (`xpay`, `24 n`) and
//! the iterate (`axpy`, `24 n`): about `12 nnz + (16 (l + 2) + 48 (l + 1) + 48) n = 12 nnz
//! + (64 l + 128) n` bytes (l = 1: `12 nnz + 192 n`); with `M^-1` no `wnorm` and the `U`
//! recurrence, `48 n` more. Unfused: no kernel of its own.
//! Work vectors: `Z` (`max(l, 2) + 1`), `V` (3), `Q` (`3 (l - 1)`), `p` and one spare (the
//! out-of-place half of the in-place updates; the true-residual check's `t`); with `M^-1`
//! also `U` (3). `G` is kept as a ring of its last `l + 1` columns of `2l + 1` rows, the
//! Lanczos coefficients as rings of `l + 1`: memory independent of the iterations.
//! Options: `depth` (`l`, 1..=8, default 1), `tol`, `atol`, `max_iter`, `history`, `eigs`
//! (from `T`'s LDL^T factors: `alpha = 1/eta`, `beta = lambda^2`), `replace_every`.
//!
//! Default depth 1, as PETSc's (`-ksp_pipelcg_pipel`): p(1)-CG keeps cg's iterations
//! (55 of the family sweep's 56 runs within 1.1 x cg + 4, mean 1.007 x), the shortest
//! start-up and the fewest vectors; a deeper pipeline pays only where one reduction costs
//! more than one SpMV (many ranks, `krylov plan`), and its bases lose orthogonality sooner:
//! depths 2 and 3 pass 43 and 41 of 56 (mean 1.19 and 1.23 x cg's iterations), 5 and 8
//! only 31 and 24 (`cg/README.md` *Measured*), a price a user should choose knowingly.
//!
//! Stopping: the Lanczos process gives the residual's natural norm `||r_{k+1}||_{M^-1} =
//! |delta_k zeta_k / eta_k|` for free (no vector equals the residual here), and the
//! original norm is estimated from it by a ratio: `||r_0||_w / ||r_0||_{M^-1}` of the
//! cycle's start (both reduced in its first message); in the plain form, where the residual
//! is parallel to the Lanczos vector `v` (`r_j = +-||r_j|| v_j`), each reduction also
//! carries `||v_c||_w^2` (one value, a `wnorm` pass), so the ratio is that of the newest
//! Lanczos vector reduced, `l` iterations old: exact for `precond none` and a constant
//! diagonal, close where the residual's distribution changes slowly; with `M^-1` the
//! cycle start's (no vector `M v` is kept). The estimate only decides WHEN the true
//! residual is checked: convergence is certified by the check as
//! in every method of the family (`super`'s *Certified convergence*,
//! [`super::control::Control`]; `t = b̂ - Â x` with its rounding bound, one SpMV and one
//! blocking reduction); a miss restarts the pipeline from `t`.
//!
//! Restarts (each from the true residual of the current `x`, a new cycle: `l` start-up steps
//! again, counted in `residual_replacements`): after a check that missed (C of them);
//! after a breakdown of the pipeline (the report's `pipeline_breakdowns`, B of them): a
//! square-root breakdown `G(c, c) - sum <= 0` in column `c` (the bases lost orthogonality
//! in rounding; at `c = 1` an invariant Krylov space) still takes its step's update, which
//! needs no `G(c, c)`, and skips the step's recurrences and reduction; a pivot `eta <= 0` of
//! `T` after the cycle's first step takes no update and computes the step's direction's
//! curvature `p^T Â p` directly (one SpMV, one blocking reduction; B_e of them): `<= 0` is a
//! breakdown of the solve, else `T` lost positive definiteness in rounding. Either is
//! followed by a true-residual check (as any: converged, or at `max_iter`; stagnated after
//! three breakdowns in a row whose checks found the true residual within 100 times its own
//! rounding bound or exactly the last one's, which is how a solve at its attainable
//! accuracy ends), and unless that ends the solve by a restart from it (E = 1 when the last
//! check was a breakdown's, else 0). With `replace_every = R`: a restart after iterations
//! R, 2R, ... (P of them; `r = b̂ - Â x`, one SpMV). Every cycle takes at least one
//! iteration.
//!
//! Counting (exact; I = iterations, K = C + (B - E) + P + 1 cycles (`residual_replacements
//! + 1`), H = C + B + 1 - E = K - P checks unless the solve breaks down; each cycle's first
//! reduction `[r.M^-1 r, ||r||_w^2]`, padded to the reductions' length like the start-up's
//! `2..=l+1` values):
//! the pipeline steps (one SpMV each) are `S = I + K l + B_e`; `setup_reductions` = 1
//! (`||b||`) + 2 m (the warm-up's `m` <= 10 steps) + 1 (the first cycle's first reduction);
//! `reductions = S - B + B_e + (K - 1) + H`; `halo_exchanges = S + B_e + H + P`, plus the
//! setup exchanges (`m` for the warm-up, one for `Â x0` when `x0` is given). With `M^-1`
//! (`D` = the Chebyshev degree, 0 for `bjacobi_ic0`): `precond_applies = S + K`, the first
//! cycle's start in setup, plus the warm-up's `m` (setup), and `D` more exchanges per
//! application. A solve whose `x0` solves the system: `l` start-up steps and the check
//! (`l + 1` reductions and exchanges), no iteration.
//!
//! Breakdowns (typed [`crate::KrylovError::Breakdown`], the report still left): `r^T M^-1 r
//! <= 0` at a (re)start for a residual that misses the target, `r^T A r <= 0` (the first
//! pivot of a cycle: the operator is not positive definite), `p^T A p <= 0` computed
//! directly after a later pivot `<= 0`, a NaN/Inf among the reduced values; and the
//! warm-up's (a Ritz value `<= 0`).

use std::ops::ControlFlow;

use castack_collectives::Communicator;

use super::control::{check_alone, Control, Due};
use super::{periodic_due, LoopEnd, System, STAGNATION_CHECKS};
use crate::breakdown::{breakdown, finite_or};
use crate::config::DEPTH_MAX;
use crate::eig::{cg_lanczos, warmup_steps};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::{Pending, Phase};
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;

const NAME: &str = "plcg";

/// Whether `v` is positive (NaN is not).
fn positive(v: f64) -> bool {
    v > 0.0
}

/// Two distinct elements of `v`, the first mutable.
fn pair<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &T) {
    assert_ne!(a, b, "pair: one element twice");
    if a < b {
        let (lo, hi) = v.split_at_mut(b);
        (&mut lo[a], &hi[0])
    } else {
        let (lo, hi) = v.split_at_mut(a);
        (&mut hi[0], &lo[b])
    }
}

/// How a cycle of the pipeline ended.
enum Cycle {
    /// The loop ends.
    End(LoopEnd),
    /// A check missed: the true residual is in `spare`.
    Missed,
    /// Restart from the true residual (periodic replacement).
    Restart,
}

/// The pipeline's state.
struct Pipe<D: Device> {
    l: usize,
    /// Values per reduction: `l + 1`, and `||v||_w^2` in the plain form.
    len: usize,
    /// The auxiliary basis, `z[0]` the newest once the start-up is over (`max(l, 2) + 1`).
    z: Vec<DistVec<D>>,
    /// `u = M z` (with `M^-1` only; else `z` itself): `u[0]` the newest.
    u: Option<Vec<DistVec<D>>>,
    /// The Lanczos basis: `v[0]` the newest.
    v: Vec<DistVec<D>>,
    /// The `l - 1` bases between `Z` and `V`, three vectors each.
    q: Vec<DistVec<D>>,
    /// `eta p` (the scaled direction); `M^-1 r` at a cycle's start.
    p: DistVec<D>,
    /// The out-of-place half of in-place updates; the check's true residual.
    spare: DistVec<D>,
    /// The last `l + 1` columns of `G`, `2l + 1` rows each (column `j` in slot
    /// `j % (l + 1)`, row `i` at `i - max(j - 2l, 0)`).
    g: Vec<f64>,
    /// `T`'s diagonal and off-diagonal, the last `l + 1` of each.
    gamma: Vec<f64>,
    delta: Vec<f64>,
    sigma: [f64; DEPTH_MAX],
    /// The reductions in flight, by column (slot `col % (l + 2)`).
    pending: Vec<Option<Pending>>,
    /// The true residual the last breakdown's check found, and the breakdowns in a row
    /// at the attainable accuracy ([`after_breakdown`]).
    stalls: (f64, u32),
}

impl<D: Device> Pipe<D> {
    fn gi(&self, i: usize, j: usize) -> usize {
        let l = self.l;
        let off = j.saturating_sub(2 * l);
        debug_assert!(i >= off && i - off <= 2 * l, "G({i}, {j}) outside the band");
        (j % (l + 1)) * (2 * l + 1) + (i - off)
    }

    fn get(&self, i: usize, j: usize) -> f64 {
        self.g[self.gi(i, j)]
    }

    fn set(&mut self, i: usize, j: usize, x: f64) {
        let k = self.gi(i, j);
        self.g[k] = x;
    }

    fn gam(&self, k: usize) -> f64 {
        self.gamma[k % (self.l + 1)]
    }

    fn del(&self, k: usize) -> f64 {
        self.delta[k % (self.l + 1)]
    }

    /// Where a cycle's residual goes: `u[0]` with `M^-1`, else `z[l]`.
    fn residual_mut(&mut self) -> &mut DistVec<D> {
        match self.u.as_mut() {
            Some(u) => &mut u[0],
            None => &mut self.z[self.l],
        }
    }

    /// Begin the reduction of this rank's first `len` slots for column `col`.
    fn begin<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        col: usize,
    ) -> Result<(), KrylovError> {
        let pending = sys.ops.begin(self.len)?;
        let slot = col % (self.l + 2);
        debug_assert!(self.pending[slot].is_none(), "column {col}: lane in use");
        self.pending[slot] = Some(pending);
        Ok(())
    }

    /// Finish the reduction of column `col` into `out` (`len` values).
    fn finish<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        col: usize,
        out: &mut [f64],
    ) -> Result<(), KrylovError> {
        let pending = self.pending[col % (self.l + 2)]
            .take()
            .expect("plcg: a column's reduction is pending when it is due");
        sys.ops.finish(pending, out)?;
        Ok(())
    }

    /// Finish every reduction still in flight (before a restart or the end; their values
    /// are not needed).
    fn drain<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
    ) -> Result<(), KrylovError> {
        let mut sums = [0.0; DEPTH_MAX + 2];
        let mut first = Ok(());
        for slot in 0..self.pending.len() {
            if let Some(p) = self.pending[slot].take() {
                let done = sys.ops.finish(p, &mut sums[..self.len]);
                if first.is_ok() {
                    first = done;
                }
            }
        }
        Ok(first?)
    }

    /// A cycle's start from the residual in [`Pipe::residual_mut`]: `p = M^-1 r`, `z_0 = p`
    /// and the reduction of `[r.p, ||r||_w^2]` (column 0) begun.
    fn start<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
    ) -> Result<(), KrylovError> {
        let l = self.l;
        match self.u.as_ref() {
            Some(u) => {
                sys.precondition(&u[0], &mut self.p)?;
                sys.ops.copy(&self.p, &mut self.z[l])?;
            }
            None => sys.ops.copy(&self.z[l], &mut self.p)?,
        }
        let r = self.u.as_ref().map_or(&self.z[l], |u| &u[0]);
        sys.ops.dot(r, &self.p, 0)?;
        sys.ops.wnorm(r, &sys.w, 1)?;
        for at in 2..self.len {
            sys.ops.set_slot(at, 0.0)?;
        }
        self.begin(sys, 0)
    }

    /// `x = s x` in place, through the spare vector.
    fn rescale<C: Communicator + ?Sized>(
        sys: &mut System<'_, C, D>,
        s: f64,
        x: &mut DistVec<D>,
        spare: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        sys.ops.scale(s, x, spare)?;
        std::mem::swap(x, spare);
        Ok(())
    }

    /// The pipeline step's SpMV (and `M^-1`): `u_{i+1} = Â z_i - sigma_i u_i` during the
    /// start-up (`it < l`), `Â z_i` beyond; `z_{i+1} = M^-1 u_{i+1}`.
    fn advance<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        it: usize,
    ) -> Result<(), KrylovError> {
        let l = self.l;
        if let Some(u) = self.u.as_mut() {
            u.rotate_right(1);
        }
        if it < l {
            let (src, dst) = (l - it, l - it - 1);
            match self.u.as_mut() {
                Some(u) => {
                    let (u0, u1) = pair(u, 0, 1);
                    sys.a.spmv(&mut sys.ops, &mut self.z[src], u0)?;
                    sys.ops.axpy(-self.sigma[it], u1, u0)?;
                    sys.precondition(&u[0], &mut self.z[dst])?;
                }
                None => {
                    let (lo, hi) = self.z.split_at_mut(src);
                    sys.a.spmv(&mut sys.ops, &mut hi[0], &mut lo[dst])?;
                    sys.ops.axpy(-self.sigma[it], &hi[0], &mut lo[dst])?;
                }
            }
            if it + 1 < l {
                sys.ops.copy(&self.z[dst], &mut self.q[3 * it])?;
            }
        } else {
            self.z.rotate_right(1);
            match self.u.as_mut() {
                Some(u) => {
                    sys.a.spmv(&mut sys.ops, &mut self.z[1], &mut u[0])?;
                    sys.precondition(&u[0], &mut self.z[0])?;
                }
                None => {
                    let (lo, hi) = self.z.split_at_mut(1);
                    sys.a.spmv(&mut sys.ops, &mut hi[0], &mut lo[0])?;
                }
            }
        }
        Ok(())
    }

    /// At step `l`, before its SpMV: every basis vector scaled by `1 / beta`, `beta =
    /// ||r||_{M^-1}` (the vectors the step's SpMV makes are then scaled already), and
    /// `v_0 = p / beta`.
    fn normalize<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        beta: f64,
    ) -> Result<(), KrylovError> {
        let s = 1.0 / beta;
        sys.ops.scale(s, &self.p, &mut self.v[0])?;
        for j in 0..self.z.len() {
            Self::rescale(sys, s, &mut self.z[j], &mut self.spare)?;
        }
        if let Some(u) = self.u.as_mut() {
            for v in u.iter_mut() {
                Self::rescale(sys, s, v, &mut self.spare)?;
            }
        }
        for j in 0..self.l - 1 {
            Self::rescale(sys, s, &mut self.q[3 * j], &mut self.spare)?;
        }
        Ok(())
    }

    /// Column `c` of `G` from its reduced values `vals` and the columns before it, then
    /// `gamma_{c-1}`, `delta_{c-1}`; `Err(tmp)` on a square-root breakdown (`gamma_{c-1}`
    /// still set).
    fn column(&mut self, it: usize, beta: f64, vals: &[f64]) -> Result<(), f64> {
        let l = self.l;
        let c = it + 1 - l;
        let base = (c % (l + 1)) * (2 * l + 1);
        self.g[base..base + 2 * l + 1].fill(0.0);
        let row0 = c.saturating_sub(l);
        for (s, &val) in vals.iter().take(c.min(l) + 1).enumerate() {
            self.set(row0 + s, c, val);
        }
        let lo = (it + 1).saturating_sub(3 * l);
        if it >= 2 * l {
            for j in lo..=it - 2 * l {
                let s = self.get(c - l, j + l);
                self.set(j, c, s);
            }
        }
        if it < 2 * l {
            let ib2 = 1.0 / (beta * beta);
            for j in lo..=c {
                let s = self.get(j, c) * ib2;
                self.set(j, c, s);
            }
        }
        for j in (it + 2).saturating_sub(2 * l)..c {
            let mut sum = 0.0;
            for k in lo..j {
                sum += self.get(k, j) * self.get(k, c);
            }
            let val = (self.get(j, c) - sum) / self.get(j, j);
            self.set(j, c, val);
        }
        let mut sum = 0.0;
        for k in lo..c {
            sum += self.get(k, c) * self.get(k, c);
        }
        let tmp = self.get(c, c) - sum;
        // gamma_{c-1} needs no G(c, c); delta_{c-1} does.
        let k0 = c - 1;
        let gkk = self.get(k0, k0);
        let g = if it < 2 * l {
            let mut g = self.get(k0, c) + self.sigma[k0] * gkk;
            if it > l {
                g -= self.del(k0 - 1) * self.get(k0 - 1, k0);
            }
            g / gkk
        } else {
            (gkk * self.gam(k0 - l) + self.get(k0, c) * self.del(k0 - l)
                - self.get(k0 - 1, k0) * self.del(k0 - 1))
                / gkk
        };
        self.gamma[k0 % (l + 1)] = g;
        if !positive(tmp) {
            return Err(tmp);
        }
        let gcc = tmp.sqrt();
        self.set(c, c, gcc);
        let d = if it < 2 * l {
            gcc / gkk
        } else {
            gcc * self.del(k0 - l) / gkk
        };
        self.delta[k0 % (l + 1)] = d;
        Ok(())
    }

    /// The bases `V`, `Q`, `Z` (and `U`) extended by the column `c = it - l + 1`.
    fn recur<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        it: usize,
    ) -> Result<(), KrylovError> {
        let l = self.l;
        let k0 = it - l;
        let (g, d) = (self.gam(k0), self.del(k0));
        let dp = if it > l { self.del(k0 - 1) } else { 0.0 };
        let inv = 1.0 / d;
        let terms = if it > l { 2 } else { 1 };
        // v_c = (q_0 or z_1 + (sigma_0 - gamma) v_{c-1} - delta' v_{c-2}) / delta.
        self.v.rotate_right(1);
        let src = if l == 1 { &self.z[1] } else { &self.q[0] };
        sys.ops.scale(inv, src, &mut self.v[0])?;
        let coef = [(self.sigma[0] - g) * inv, -dp * inv];
        let (v0, rest) = self.v.split_at_mut(1);
        sys.ops
            .lincomb(&coef[..terms], &[&rest[0], &rest[1]][..terms], &mut v0[0])?;
        for j in 0..l.saturating_sub(1) {
            self.q[3 * j..3 * j + 3].rotate_right(1);
            let (lo, hi) = self.q.split_at_mut(3 * j + 1);
            let src = if j + 2 < l { &hi[2] } else { &self.z[1] };
            sys.ops.scale(inv, src, &mut lo[3 * j])?;
            let coef = [(self.sigma[j + 1] - g) * inv, -dp * inv];
            sys.ops
                .lincomb(&coef[..terms], &[&hi[0], &hi[1]][..terms], &mut lo[3 * j])?;
        }
        let coef = [-g * inv, -dp * inv];
        sys.ops.scale(inv, &self.z[0], &mut self.spare)?;
        sys.ops.lincomb(
            &coef[..terms],
            &[&self.z[1], &self.z[2]][..terms],
            &mut self.spare,
        )?;
        std::mem::swap(&mut self.z[0], &mut self.spare);
        if let Some(u) = self.u.as_mut() {
            sys.ops.scale(inv, &u[0], &mut self.spare)?;
            sys.ops
                .lincomb(&coef[..terms], &[&u[1], &u[2]][..terms], &mut self.spare)?;
            std::mem::swap(&mut u[0], &mut self.spare);
        }
        Ok(())
    }

    /// This step's dot products into the slots and their reduction (column `it + 1`) begun.
    fn dots<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        it: usize,
    ) -> Result<(), KrylovError> {
        let l = self.l;
        let newest = if it < l { l - it - 1 } else { 0 };
        let u0 = self.u.as_ref().map_or(&self.z[newest], |u| &u[0]);
        if it < l {
            for j in 0..it + 2 {
                sys.ops.dot(u0, &self.z[l - j], j)?;
            }
            for at in it + 2..self.len {
                sys.ops.set_slot(at, 0.0)?;
            }
        } else {
            sys.ops.dot(u0, &self.v[0], 0)?;
            for m in 1..=l {
                sys.ops.dot(u0, &self.z[l - m], m)?;
            }
            if self.u.is_none() {
                // The plain form's residual is parallel to v: its original norm's ratio.
                sys.ops.wnorm(&self.v[0], &sys.w, l + 1)?;
            }
        }
        self.begin(sys, it + 1)
    }
}

/// The loop's scalars of the current cycle.
struct Lanczos {
    beta: f64,
    eta: f64,
    zeta: f64,
    /// The ratio of the residual's original norm to its natural one: `||r_0||_w /
    /// ||r_0||_{M^-1}` at the cycle's start; in the plain form then `||v_j||_w` of the
    /// newest Lanczos vector reduced (`l` steps old).
    ratio: f64,
    /// The last estimate of the residual's original norm (the cycle start's until an
    /// iteration records one).
    rnorm: f64,
}

/// The loop, plain or preconditioned (module doc).
pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let l = sys.cfg.depth;
    assert!(
        (1..=DEPTH_MAX).contains(&l),
        "depth is checked by the config"
    );
    let z = sys.new_vecs(l.max(2) + 1)?;
    let u = match sys.pc.is_some() {
        true => Some(sys.new_vecs(3)?),
        false => None,
    };
    let v = sys.new_vecs(3)?;
    let q = sys.new_vecs(3 * (l - 1))?;
    let [p, spare] = sys.vecs()?;
    let len = l + 1 + usize::from(sys.pc.is_none());
    let mut pipe = Pipe {
        l,
        len,
        z,
        u,
        v,
        q,
        p,
        spare,
        g: vec![0.0; (l + 1) * (2 * l + 1)],
        gamma: vec![0.0; l + 1],
        delta: vec![0.0; l + 1],
        sigma: [0.0; DEPTH_MAX],
        pending: (0..l + 2).map(|_| None).collect(),
        stalls: (f64::INFINITY, 0),
    };
    sys.ops.prepare(1)?;
    sys.ops.prepare(3)?;
    sys.ops.prepare_split_lanes(len, l + 1)?;
    let out = solve(sys, &mut pipe, x, x0_given);
    let drained = pipe.drain(sys);
    let end = out?;
    drained?;
    Ok(end)
}

/// Setup (the residual, the shifts, the first cycle's start) and the cycles.
fn solve<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    pipe: &mut Pipe<D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let l = pipe.l;
    if x0_given {
        sys.residual(x, pipe.residual_mut())?;
    } else {
        sys.ops.copy(&sys.bhat, pipe.residual_mut())?;
    }
    // The shifts: Chebyshev points of the s-step bases' interval, from the same warm-up.
    let r = pipe.u.as_ref().map_or(&pipe.z[l], |u| &u[0]);
    let steps = warmup_steps(l);
    let est = match sys.pc.is_some() {
        true => super::sstep::precond_estimate(sys, r, None, steps, NAME)?,
        false => cg_lanczos(&mut sys.a, &mut sys.ops, r, steps, NAME)?,
    };
    let (lo, hi) = est.interval();
    for i in 0..l {
        let angle = std::f64::consts::PI * (2 * i + 1) as f64 / (2 * l) as f64;
        pipe.sigma[i] = 0.5 * (lo + hi) + 0.5 * (hi - lo) * angle.cos();
    }
    pipe.start(sys)?;
    sys.ops.set_phase(Phase::Loop);
    let mut ctl = Control::new();
    let mut iters = 0;
    loop {
        match cycle(sys, pipe, x, &mut ctl, &mut iters)? {
            Cycle::End(end) => return Ok(end),
            Cycle::Missed => {
                pipe.drain(sys)?;
                let r = match pipe.u.as_mut() {
                    Some(u) => &mut u[0],
                    None => &mut pipe.z[l],
                };
                std::mem::swap(r, &mut pipe.spare);
            }
            Cycle::Restart => {
                pipe.drain(sys)?;
                let r = match pipe.u.as_mut() {
                    Some(u) => &mut u[0],
                    None => &mut pipe.z[l],
                };
                sys.residual(x, r)?;
            }
        }
        ctl.restarted(sys);
        pipe.start(sys)?;
    }
}

/// The true-residual check when [`Control::check`] finds one due (`rw` the estimated
/// `||r||_w^2` of the iterate after `iters` iterations).
fn check<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    pipe: &mut Pipe<D>,
    x: &mut DistVec<D>,
    ctl: &mut Control,
    rw: f64,
    iters: usize,
) -> Result<Option<Cycle>, KrylovError> {
    let mut rw = rw;
    let spare = &mut pipe.spare;
    let due = ctl.check(sys, NAME, &mut rw, iters, |sys, _| {
        check_alone(sys, x, spare)
    })?;
    Ok(match due {
        Due::Step => None,
        Due::End(end) => Some(Cycle::End(end)),
        Due::Missed(()) => Some(Cycle::Missed),
    })
}

/// How many times its own rounding bound a true residual may be and still be at the
/// attainable accuracy ([`after_breakdown`]): the residual of an iterate that no longer
/// improves is rounding, within a small factor of the bound on its evaluation error.
const ATTAINABLE_FLOOR: f64 = 100.0;

/// After a breakdown of the pipeline (`rnorm` the recurrence's last estimate, reported if
/// the solve ends here): the true residual checked, as any check (`t = b̂ - Â x` with its
/// rounding bound, one SpMV and one reduction): converged or at `max_iter`, the end; else a
/// restart from it, unless [`STAGNATION_CHECKS`] breakdowns in a row found the true
/// residual within [`ATTAINABLE_FLOOR`] of its rounding bound, or exactly the last one's:
/// the attainable accuracy, where the breakdowns are rounding (as a curvature at rounding
/// level in cg), and the solve ends `stagnated`. Restarts that mend bases which merely lost
/// orthogonality move the iterate between breakdowns, however slowly.
fn after_breakdown<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    pipe: &mut Pipe<D>,
    x: &mut DistVec<D>,
    rnorm: f64,
    iters: usize,
) -> Result<Cycle, KrylovError> {
    sys.pipeline_breakdowns += 1;
    let checked = check_alone(sys, x, &mut pipe.spare)?;
    let (tnorm, enorm) = (checked.tw.max(0.0).sqrt(), checked.ew.max(0.0).sqrt());
    // The verdict on the truth alone: the recurrence that broke down is no witness.
    if let ControlFlow::Break(end) = sys.verdict(NAME, checked.tw, checked.ew, tnorm, iters)? {
        return Ok(Cycle::End(end));
    }
    // Stalled: at the rounding floor, or not moved at all (the floor's bound underflows
    // where the iterate is made of subnormal quanta). Restarted CG's residual is not
    // monotone: a higher one than before is no stall.
    let (last, stalls) = &mut pipe.stalls;
    *stalls = match tnorm <= ATTAINABLE_FLOOR * enorm || tnorm.total_cmp(last).is_eq() {
        true => *stalls + 1,
        false => 0,
    };
    *last = tnorm;
    if *stalls >= STAGNATION_CHECKS {
        return Ok(Cycle::End(LoopEnd {
            iterations: iters,
            equivalent: iters,
            converged: false,
            stagnated: true,
            relres_recurrence: rnorm / sys.bnorm,
            relres_true: tnorm / sys.bnorm,
        }));
    }
    Ok(Cycle::Missed)
}

/// One cycle of the pipeline from its start ([`Pipe::start`] done) to its end.
fn cycle<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    pipe: &mut Pipe<D>,
    x: &mut DistVec<D>,
    ctl: &mut Control,
    iters: &mut usize,
) -> Result<Cycle, KrylovError> {
    let l = pipe.l;
    let len = pipe.len;
    let mut sums = [0.0; DEPTH_MAX + 2];
    let mut lz = Lanczos {
        beta: 0.0,
        eta: 0.0,
        zeta: 0.0,
        ratio: 1.0,
        rnorm: f64::INFINITY,
    };
    let mut it = 0;
    loop {
        if it == l {
            // The start's reduction, begun l steps ago: the residual's norms (a check
            // when they meet the target), and the basis normalized by beta.
            pipe.finish(sys, 0, &mut sums[..len])?;
            let g00 = finite_or(NAME, sums[0], *iters, "r^T M^-1 r")?;
            let rw0 = finite_or(NAME, sums[1], *iters, "||r||")?;
            if let Some(end) = check(sys, pipe, x, ctl, rw0, *iters)? {
                return Ok(end);
            }
            if !positive(g00) {
                return Err(breakdown(NAME, *iters, "r^T M^-1 r", g00));
            }
            lz.beta = g00.sqrt();
            lz.ratio = (rw0.max(0.0) / g00).sqrt();
            lz.rnorm = rw0.max(0.0).sqrt();
            pipe.set(0, 0, 1.0);
            pipe.normalize(sys, lz.beta)?;
        }
        pipe.advance(sys, it)?;
        if it >= l {
            let c = it + 1 - l;
            pipe.finish(sys, c, &mut sums[..len])?;
            for &s in &sums[..len] {
                finite_or(NAME, s, *iters, "G (basis inner products)")?;
            }
            if len > l + 1 && c > l {
                // ||v_{c-l}||_w (its natural norm 1): the latest ratio of the original norm
                // to the natural one of the residual, which v_{c-l} is parallel to.
                lz.ratio = sums[l + 1].max(0.0).sqrt();
            }
            let broke = pipe.column(it, lz.beta, &sums[..l + 1]).is_err();
            // D-Lanczos: the pivot eta of T = L D L^T, before any vector work of the step.
            let k = it - l;
            let g = pipe.gam(k);
            let (eta, zeta, beta_prev, p_coef) = match k {
                0 => (g, lz.beta, None, 0.0),
                _ => {
                    let dp = pipe.del(k - 1);
                    let lambda = dp / lz.eta;
                    (
                        g - lambda * dp,
                        -lambda * lz.zeta,
                        Some(lambda * lambda),
                        -dp / lz.eta,
                    )
                }
            };
            if !positive(eta) {
                // At the cycle's first step eta = v_0^T M^-1 Â v_0: the operator is not
                // positive definite. Later, either it is not, or T lost its positive
                // definiteness in rounding (the bases' loss of orthogonality): restart.
                let eta = finite_or(NAME, eta, *iters, "eta (pivot of T)")?;
                if k == 0 {
                    return Err(breakdown(NAME, *iters, "r^T A r", eta));
                }
                // Which one: the step's direction's curvature computed directly (one SpMV,
                // one reduction), scaled as cg's p = zeta p (so the same value as cg's).
                // (The step's recurrences not run: v_k is still the newest, v[0].)
                sys.ops.xpay(&pipe.v[0], p_coef, &mut pipe.p)?;
                sys.a
                    .spmv_dot(&mut sys.ops, &mut pipe.p, &mut pipe.spare, 0)?;
                let mut pap = [0.0];
                sys.ops.reduce(&mut pap)?;
                let curvature = zeta * zeta * pap[0];
                if !positive(curvature) {
                    return Err(breakdown(NAME, *iters, "p^T A p", curvature));
                }
                return after_breakdown(sys, pipe, x, lz.rnorm, *iters);
            }
            if !broke {
                pipe.recur(sys, it)?;
                pipe.dots(sys, it)?;
            }
            // The direction p = eta p (scaled) and the iterate; v_k is v[1] after the
            // recurrences made v_{k+1}, still v[0] where a breakdown skipped them.
            let vk = &pipe.v[usize::from(!broke)];
            match k {
                0 => sys.ops.copy(vk, &mut pipe.p)?,
                _ => sys.ops.xpay(vk, p_coef, &mut pipe.p)?,
            }
            (lz.eta, lz.zeta) = (eta, zeta);
            // CG's coefficients from T = L D L^T: alpha = 1/eta, beta = lambda^2.
            sys.ritz_direction(beta_prev, 1.0 / eta);
            sys.ops.axpy(lz.zeta / eta, &pipe.p, x)?;
            *iters += 1;
            if broke {
                // G lost its positive definiteness in column c (the bases' loss of
                // orthogonality; at c = 1 an invariant Krylov space): the step above
                // needed none of G(c, c), the next ones do. Restart from the true
                // residual, whose norms the new cycle's first reduction brings (a check
                // when they meet the target). Recorded: ||r_k||, the last norm known.
                lz.rnorm = lz.ratio * zeta.abs();
                sys.record(*iters, lz.rnorm);
                return after_breakdown(sys, pipe, x, lz.rnorm, *iters);
            }
            let rnorm = lz.ratio * (pipe.del(k) * zeta / eta).abs();
            lz.rnorm = rnorm;
            sys.record(*iters, rnorm);
            if let Some(end) = check(sys, pipe, x, ctl, rnorm * rnorm, *iters)? {
                return Ok(end);
            }
            if periodic_due(sys.cfg.replace_every, *iters) {
                return Ok(Cycle::Restart);
            }
        } else {
            pipe.dots(sys, it)?;
        }
        it += 1;
    }
}
