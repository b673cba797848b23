//! Shared machinery of the s-step (block) methods `cbcg` and `cbcgr`: the block workspace
//! (basis `S`, `A S`, directions `Q`, `A Q`, small dense matrices, the reduction buffer),
//! basis set-up from the spectral estimate, the local parts of the block inner products,
//! the block updates, and the true-residual check.
//!
//! Everything is allocated in [`Block::new`]; the iteration loop never allocates. Block
//! matrices are row-major with stride `k` (the current block size, which a breakdown
//! fallback may halve).

use castack_collectives::Communicator;

use super::{LoopEnd, System};
use crate::basis::SStepBasis;
use crate::config::Basis;
use crate::count::Bucket;
use crate::cpu::work;
use crate::dense::{cholesky, NotPositiveDefinite};
use crate::dist::{DistCsr, DistVec};
use crate::eig::{cg_lanczos, warmup_steps, SpectralEstimate};
use crate::KrylovError;

pub(crate) use super::breakdown;

/// First non-finite value of `vals` as a breakdown of `quantity`.
pub(crate) fn check_finite(
    method: &'static str,
    iteration: usize,
    quantity: &'static str,
    vals: &[f64],
) -> Result<(), KrylovError> {
    match vals.iter().find(|v| !v.is_finite()) {
        Some(&v) => Err(breakdown(method, iteration, quantity, v)),
        None => Ok(()),
    }
}

/// The configured basis with its parameters; a Newton or Chebyshev basis first runs
/// [`warmup_steps`] CG steps from `r` for the spectral estimate (setup communication).
pub(crate) fn setup_basis<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    r: &DistVec,
    method: &'static str,
) -> Result<SStepBasis, KrylovError> {
    let est = match sys.cfg.basis {
        Basis::Monomial => SpectralEstimate {
            ritz: Vec::new(),
            steps: 0,
        },
        Basis::Newton | Basis::Chebyshev => cg_lanczos(
            &mut sys.a,
            &mut sys.sc,
            &mut sys.cpu,
            r,
            warmup_steps(sys.cfg.k),
            method,
        )?,
    };
    SStepBasis::from_estimate(sys.cfg.basis, &est)
}

/// Number of values in the upper triangle of a `k x k` matrix.
pub(crate) fn tri(k: usize) -> usize {
    k * (k + 1) / 2
}

/// The block workspace.
pub(crate) struct Block {
    /// Current block size.
    pub(crate) k: usize,
    basis: SStepBasis,
    s: Vec<DistVec>,
    a_s: Vec<DistVec>,
    q: Vec<DistVec>,
    aq: Vec<DistVec>,
    /// `Q^T A Q` (k x k).
    pub(crate) g: Vec<f64>,
    /// Cholesky factor of `g`.
    pub(crate) l: Vec<f64>,
    /// `Q^T A S`, then `B` in place (k x k).
    pub(crate) w: Vec<f64>,
    /// Step coefficients `a` (k).
    pub(crate) coef: Vec<f64>,
    /// `Q^T r` (k).
    pub(crate) qr: Vec<f64>,
    /// Scratch column (k).
    pub(crate) col: Vec<f64>,
    /// Reduction buffer.
    pub(crate) pack: Vec<f64>,
}

impl Block {
    pub(crate) fn new(a: &DistCsr, basis: SStepBasis, k: usize, pack_len: usize) -> Self {
        let vecs = |m: usize| (0..m).map(|_| a.new_vec()).collect::<Vec<_>>();
        Self {
            k,
            basis,
            s: vecs(k + 1),
            a_s: vecs(k),
            q: vecs(k),
            aq: vecs(k),
            g: vec![0.0; k * k],
            l: vec![0.0; k * k],
            w: vec![0.0; k * k],
            coef: vec![0.0; k],
            qr: vec![0.0; k],
            col: vec![0.0; k],
            pack: vec![0.0; pack_len],
        }
    }

    /// `S = basis(r)` (k SpMVs: k exchanges, or one through the matrix powers plan).
    pub(crate) fn build_basis<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C>,
        r: &DistVec,
    ) -> Result<(), KrylovError> {
        self.s[0].copy_from(r);
        sys.build_basis(&self.basis, self.k, &mut self.s, &mut self.a_s)
    }

    /// `Q = S[:, :k]`, `A Q = A S` (swaps, no copies).
    pub(crate) fn adopt_basis(&mut self) {
        for j in 0..self.k {
            std::mem::swap(&mut self.q[j], &mut self.s[j]);
            std::mem::swap(&mut self.aq[j], &mut self.a_s[j]);
        }
    }

    /// Restart the block from `r`: `Q = basis(r)` (k SpMVs).
    pub(crate) fn restart<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C>,
        r: &DistVec,
    ) -> Result<(), KrylovError> {
        self.build_basis(sys, r)?;
        self.adopt_basis();
        Ok(())
    }

    /// Local upper triangle of `Q^T A Q` into `out[..tri(k)]`.
    pub(crate) fn local_qaq<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        out: &mut [f64],
    ) {
        upper(sys, &self.q[..self.k], &self.aq[..self.k], out);
    }

    /// Local upper triangle of `S^T A S` into `out[..tri(k)]`.
    pub(crate) fn local_sas<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        out: &mut [f64],
    ) {
        upper(sys, &self.s[..self.k], &self.a_s[..self.k], out);
    }

    /// Local `(A Q)^T S = Q^T A S` into `out[..k*k]` (row i: `aq_i`).
    pub(crate) fn local_qas<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        out: &mut [f64],
    ) {
        let k = self.k;
        let t = sys.sc.now();
        for i in 0..k {
            for j in 0..k {
                out[i * k + j] = sys.cpu.dot(self.aq[i].local(), self.s[j].local());
            }
        }
        sys.sc.charge_since(Bucket::Blas, t);
    }

    /// Local `Q^T (A S)` into `out[..k*k]` (row i: `q_i`): the same block as
    /// [`Block::local_qas`] from the SpMV outputs `A S` instead of the recurrence `A Q`.
    /// Their difference measures how far `A Q` has drifted from `A` times `Q`
    /// ([`drift`]).
    pub(crate) fn local_qas_exact<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        out: &mut [f64],
    ) {
        let k = self.k;
        let t = sys.sc.now();
        for i in 0..k {
            for j in 0..k {
                out[i * k + j] = sys.cpu.dot(self.q[i].local(), self.a_s[j].local());
            }
        }
        sys.sc.charge_since(Bucket::Blas, t);
    }

    /// `A Q = A` times `Q` from scratch (k SpMVs, k counted depth-1 exchanges): ends the
    /// drift of the recurrence `A Q = A S - A Q B`.
    pub(crate) fn recompute_aq<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C>,
    ) -> Result<(), KrylovError> {
        for j in 0..self.k {
            sys.a
                .spmv(&mut sys.sc, &sys.cpu, &mut self.q[j], &mut self.aq[j])?;
        }
        Ok(())
    }

    /// Local `Q^T r` into `out[..k]`.
    pub(crate) fn local_qr<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        r: &DistVec,
        out: &mut [f64],
    ) {
        proj(sys, &self.q[..self.k], r, out);
    }

    /// Local `S^T r` into `out[..k]`.
    pub(crate) fn local_sr<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        r: &DistVec,
        out: &mut [f64],
    ) {
        proj(sys, &self.s[..self.k], r, out);
    }

    /// `g` (k x k, full) from its upper triangle `up`.
    pub(crate) fn set_gram(&mut self, up: &[f64]) {
        unpack_upper(up, self.k, &mut self.g);
    }

    /// Factor `g` into `l`.
    pub(crate) fn factor(&mut self) -> Result<(), NotPositiveDefinite> {
        let kk = self.k * self.k;
        self.l[..kk].copy_from_slice(&self.g[..kk]);
        cholesky(&mut self.l[..kk], self.k)
    }

    /// `coef = g^-1 qr` with the factor in `l`.
    pub(crate) fn solve_coef(&mut self) {
        let k = self.k;
        self.coef[..k].copy_from_slice(&self.qr[..k]);
        crate::dense::cholesky_solve(&self.l[..k * k], k, &mut self.coef[..k]);
    }

    /// `w <- g^-1 w` (`B = (Q^T A Q)^-1 Q^T A S`) with the factor in `l`.
    pub(crate) fn solve_b(&mut self) {
        let k = self.k;
        crate::dense::cholesky_solve_many(
            &self.l[..k * k],
            k,
            &mut self.w[..k * k],
            k,
            &mut self.col[..k],
        );
    }

    /// `x += Q coef`, `r -= A Q coef`; returns this rank's `[r.r, ||r||_w^2]` of the new r.
    pub(crate) fn step<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        x: &mut DistVec,
        r: &mut DistVec,
    ) -> [f64; 2] {
        let t = sys.sc.now();
        let k = self.k;
        // 2k axpys and one pass for the sums.
        let n = r.n_local();
        for _ in 0..2 * k {
            sys.cpu.account(work::stream(2, 1, 2, n));
        }
        sys.cpu.account(work::stream(2, 0, 5, n));
        let a = &self.coef[..k];
        for (aj, qj) in a.iter().zip(&self.q[..k]) {
            for (xi, qi) in x.local_mut().iter_mut().zip(qj.local()) {
                *xi += aj * qi;
            }
        }
        for (aj, aqj) in a.iter().zip(&self.aq[..k]) {
            for (ri, qi) in r.local_mut().iter_mut().zip(aqj.local()) {
                *ri -= aj * qi;
            }
        }
        let mut sums = [0.0; 2];
        for (ri, wi) in r.local().iter().zip(&sys.w) {
            sums[0] += ri * ri;
            sums[1] += ri * ri * wi;
        }
        sys.sc.charge_since(Bucket::Blas, t);
        sums
    }

    /// `Q = S - Q B`, `A Q = A S - A Q B` with `B` in `w`.
    pub(crate) fn new_directions<C: Communicator + ?Sized>(&mut self, sys: &mut System<'_, C>) {
        let t = sys.sc.now();
        let k = self.k;
        // 2 k^2 axpys.
        let n = self.s[0].n_local();
        for _ in 0..2 * k * k {
            sys.cpu.account(work::stream(2, 1, 2, n));
        }
        let b = &self.w[..k * k];
        for (dst, src) in [(&mut self.s, &self.q), (&mut self.a_s, &self.aq)] {
            for j in 0..k {
                let d = dst[j].local_mut();
                for (l, v) in src.iter().enumerate().take(k) {
                    let c = b[l * k + j];
                    for (di, vi) in d.iter_mut().zip(v.local()) {
                        *di -= c * vi;
                    }
                }
            }
        }
        sys.sc.charge_since(Bucket::Blas, t);
        self.adopt_basis();
    }

    /// Halve the block size (after a breakdown of the Gram matrix); false at k = 1.
    pub(crate) fn halve(&mut self) -> bool {
        if self.k > 1 {
            self.k /= 2;
            true
        } else {
            false
        }
    }
}

fn upper<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    u: &[DistVec],
    v: &[DistVec],
    out: &mut [f64],
) {
    let t = sys.sc.now();
    let mut idx = 0;
    for (i, ui) in u.iter().enumerate() {
        for vj in &v[i..] {
            out[idx] = sys.cpu.dot(ui.local(), vj.local());
            idx += 1;
        }
    }
    sys.sc.charge_since(Bucket::Blas, t);
}

fn proj<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    u: &[DistVec],
    r: &DistVec,
    out: &mut [f64],
) {
    let t = sys.sc.now();
    for (o, ui) in out.iter_mut().zip(u) {
        *o = sys.cpu.dot(ui.local(), r.local());
    }
    sys.sc.charge_since(Bucket::Blas, t);
}

/// Full symmetric `k x k` matrix from its packed upper triangle.
pub(crate) fn unpack_upper(up: &[f64], k: usize, full: &mut [f64]) {
    let mut idx = 0;
    for i in 0..k {
        for j in i..k {
            full[i * k + j] = up[idx];
            full[j * k + i] = up[idx];
            idx += 1;
        }
    }
}

/// Relative drift of the recurrence `A Q` (and, in `cbcgr`, of the updated Gram matrix) at
/// which the block methods replace the residual and recompute `A Q` (measured by [`drift`]
/// each outer iteration, free: its values ride in a reduction the method makes anyway).
/// Measured (`cargo xtask sweep`, shared matrices with condition number <= 1e8, ranks
/// 1, 3, 4, Chebyshev and Newton, k = 4, 8, 12): without replacement the drift reaches 1e-3
/// within a few hundred iterations on msc04515 and CG-equivalent iterations grew to 2.8x
/// CG's; with 1e-8 the worst there is 1.2x at zero to three replacements per solve; 1e-10
/// gave the same number of runs over 1.1 x CG + k, 1e-12 tens of replacements per solve.
pub(crate) const DRIFT_TOL: f64 = 1e-8;

/// `max |rec - exact| / max |exact|` over two `k x k` blocks: `rec = (A Q)^T S` with the
/// recurrence `A Q`, `exact = Q^T (A S)`, equal in exact arithmetic. NaN/Inf give
/// infinity (a replacement).
pub(crate) fn drift(rec: &[f64], exact: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in rec.iter().zip(exact) {
        num = num.max((a - b).abs());
        den = den.max(b.abs());
    }
    let d = num / den;
    if d.is_nan() {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        d
    }
}

/// Whether the periodic replacement (`replace_every` CG-equivalent iterations) is due
/// after `since` CG-equivalent iterations without a replacement.
pub(crate) fn replacement_due(every: Option<usize>, since: usize) -> bool {
    every.is_some_and(|n| since >= n)
}

/// The packed upper triangle of the full symmetric `k x k` matrix `full` into `up`.
pub(crate) fn pack_upper(full: &[f64], k: usize, up: &mut [f64]) {
    let mut idx = 0;
    for i in 0..k {
        for j in i..k {
            up[idx] = full[i * k + j];
            idx += 1;
        }
    }
}

/// What a true-residual check decided.
pub(crate) enum Check {
    /// Stop with this outcome.
    Done(LoopEnd),
    /// The recurrence residual was replaced by the true one (`[r.r, ||r||_w^2]`).
    Replaced([f64; 2]),
}

/// The true-residual check when the recurrence claims convergence or the iteration
/// budget is spent (one SpMV into `t`, one reduction): stop, or replace `r` by the true
/// residual.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_true<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    x: &mut DistVec,
    r: &mut DistVec,
    t: &mut DistVec,
    method: &'static str,
    outer: usize,
    equivalent: usize,
    rnorm: f64,
) -> Result<Check, KrylovError> {
    let sums = sys.true_residual(x, t)?;
    check_finite(method, outer, "||b - A x||", &sums)?;
    let tnorm = sums[1].max(0.0).sqrt();
    if sys.meets(tnorm) || equivalent >= sys.cfg.max_iter {
        return Ok(Check::Done(LoopEnd {
            iterations: outer,
            equivalent,
            converged: sys.meets(tnorm),
            relres_recurrence: rnorm / sys.bnorm,
            relres_true: tnorm / sys.bnorm,
        }));
    }
    r.copy_from(t);
    sys.replacements += 1;
    Ok(Check::Replaced(sums))
}

/// A refresh of the block methods (for `cbcgr` every true-residual event; for `cbcg`
/// after a failed Cholesky factorisation): `t = b - A x` (1 SpMV), `A Q` recomputed (k SpMVs) and ONE reduction
/// `[Q^T A Q, Q^T t, t.t, ||t||_w^2]`. Stops on the true residual, or replaces `r` by it
/// and the Gram matrix and `Q^T r` by their recomputed values, keeping the directions.
#[allow(clippy::too_many_arguments)]
pub(crate) fn refresh<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    blk: &mut Block,
    x: &mut DistVec,
    r: &mut DistVec,
    t: &mut DistVec,
    method: &'static str,
    outer: usize,
    equivalent: usize,
    rnorm: f64,
) -> Result<Check, KrylovError> {
    let local = sys.true_residual_local(x, t)?;
    blk.recompute_aq(sys)?;
    let kk = blk.k;
    let (n1, n2) = (tri(kk), tri(kk) + kk);
    let mut pack = std::mem::take(&mut blk.pack);
    blk.local_qaq(sys, &mut pack[..n1]);
    blk.local_qr(sys, t, &mut pack[n1..n2]);
    pack[n2..n2 + 2].copy_from_slice(&local);
    let res = sys.sc.allreduce_sum(&mut pack[..n2 + 2]);
    let sums = [pack[n2], pack[n2 + 1]];
    let ok = res.and_then(|()| {
        check_finite(
            method,
            outer,
            "||b - A x||, Q^T A Q, Q^T r",
            &pack[..n2 + 2],
        )
    });
    blk.set_gram(&pack[..n1]);
    blk.qr[..kk].copy_from_slice(&pack[n1..n2]);
    blk.pack = pack;
    ok?;
    let tnorm = sums[1].max(0.0).sqrt();
    if sys.meets(tnorm) || equivalent >= sys.cfg.max_iter {
        return Ok(Check::Done(LoopEnd {
            iterations: outer,
            equivalent,
            converged: sys.meets(tnorm),
            relres_recurrence: rnorm / sys.bnorm,
            relres_true: tnorm / sys.bnorm,
        }));
    }
    r.copy_from(t);
    sys.replacements += 1;
    Ok(Check::Replaced(sums))
}
