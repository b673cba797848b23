//! Shared machinery of the s-step (block) methods `cbcg` and `cbcgr`: their outer loop
//! ([`run`], with each method's own parts behind [`BlockMethod`]), the block workspace
//! (basis `S`, `A S`, directions `Q`, `A Q`, small dense matrices, the reduction buffer),
//! basis set-up from the spectral estimate, the local parts of the block inner products,
//! the block updates, and the true-residual checks.
//!
//! With a loop preconditioner `M^-1` (`sys.pc`) the same machinery runs the preconditioned
//! block methods (left preconditioning): [`Block::build_basis`] starts the basis at
//! `z = M^-1 r` and builds it for `M^-1 Â`, [`setup_basis`] estimates the spectrum of
//! `M^-1 Â` ([`precond_estimate`]); everything else reads `r`, the scaled system's own
//! residual, and the kept images `Â S`, `Â Q`, so the Gram matrices, `Q^T r`, the step,
//! the drift measures, the refresh, the true-residual checks and the minimal-residual
//! candidate need no change.
//!
//! Everything is allocated in [`Block::new`]; the iteration loop never allocates. Block
//! matrices are row-major with stride `k` (the current block size, which a breakdown
//! fallback may halve).

use castack_collectives::Communicator;

use super::smoothing::Smoother;
use super::{LoopEnd, System};
use crate::basis::SStepBasis;
use crate::config::Basis;
use crate::eig::{cg_lanczos, pcg_lanczos, warmup_steps, SpectralEstimate};
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::dense::{cholesky, NotPositiveDefinite};
use castack_linalg::device::{Concat, Device, GramShape};
use castack_linalg::dist::DistVec;

pub(crate) use crate::breakdown::breakdown;

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
/// With a loop preconditioner (`sys.pc`) the bases are of `M^-1 Â`
/// ([`System::build_basis`]) and the warm-up is preconditioned CG from `z = M^-1 r`
/// ([`precond_estimate`]); without one the estimate is [`cg_lanczos`]'s, as before.
pub(crate) fn setup_basis<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    method: &'static str,
) -> Result<SStepBasis, KrylovError> {
    setup_basis_from(sys, r, None, method)
}

/// [`setup_basis`] where the caller has `z0 = M^-1 r` already (cacg's preconditioned
/// form): the preconditioned warm-up starts from it, one application fewer.
pub(crate) fn setup_basis_from<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    z0: Option<&DistVec<D>>,
    method: &'static str,
) -> Result<SStepBasis, KrylovError> {
    let est = match sys.cfg.basis {
        Basis::Monomial => SpectralEstimate {
            ritz: Vec::new(),
            steps: 0,
            reduction: 1.0,
        },
        Basis::Newton | Basis::Chebyshev if sys.pc.is_some() => {
            precond_estimate(sys, r, z0, warmup_steps(sys.cfg.k), method)?
        }
        Basis::Newton | Basis::Chebyshev => {
            cg_lanczos(&mut sys.a, &mut sys.ops, r, warmup_steps(sys.cfg.k), method)?
        }
    };
    SStepBasis::from_estimate(sys.cfg.basis, &est)
}

/// The spectral estimate of the preconditioned operator `M^-1 Â` with the loop's
/// preconditioner: [`pcg_lanczos`] for `steps` steps from `r` (not modified), every
/// application through [`System::precondition`] (counted in `precond_applies`; its
/// exchanges, like the warm-up's SpMVs and `2 * steps` reductions, in the current phase,
/// setup for the block methods). Without a preconditioner it is [`cg_lanczos`]'s estimate
/// with a copy for `M^-1` (same coefficients; the solvers call [`cg_lanczos`] there).
pub(crate) fn precond_estimate<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    r: &DistVec<D>,
    z0: Option<&DistVec<D>>,
    steps: usize,
    method: &'static str,
) -> Result<SpectralEstimate, KrylovError> {
    let (pc, applies) = (&mut sys.pc, &mut sys.precond_applies);
    pcg_lanczos(
        &mut sys.a,
        &mut sys.ops,
        r,
        z0,
        steps,
        method,
        |a, ops, r, z| match pc.as_mut() {
            Some(pc) => {
                *applies += 1;
                pc.apply(a, ops, r, z)
            }
            None => Ok(ops.copy(r, z)?),
        },
    )
}

/// Number of values in the upper triangle of a `k x k` matrix.
pub(crate) fn tri(k: usize) -> usize {
    k * (k + 1) / 2
}

/// The block inner products whose local parts [`Block::local`] leaves in the reduction
/// slots (row i of a full block: the i-th vector of the left factor).
pub(crate) enum Product<'r, D: Device> {
    /// `Q^T A Q`, its upper triangle (`tri(k)` values): the Gram matrix.
    Qaq,
    /// `S^T A S`, its upper triangle (`tri(k)`).
    Sas,
    /// `(A Q)^T S = Q^T A S` with the recurrence `A Q` (`k * k`, row i: `aq_i`).
    Qas,
    /// `Q^T (A S)` from the SpMV outputs `A S` (`k * k`, row i: `q_i`): the block of
    /// [`Product::Qas`] in exact arithmetic; their difference measures how far `A Q` has
    /// drifted from `A` times `Q` ([`drift`]).
    QasExact,
    /// `Q^T r` (`k`).
    Qr(&'r DistVec<D>),
    /// `S^T r` (`k`).
    Sr(&'r DistVec<D>),
}

/// The block workspace.
pub(crate) struct Block<D: Device> {
    /// Current block size.
    pub(crate) k: usize,
    basis: SStepBasis,
    s: Vec<DistVec<D>>,
    a_s: Vec<DistVec<D>>,
    q: Vec<DistVec<D>>,
    aq: Vec<DistVec<D>>,
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
    /// Scratch column (2k).
    pub(crate) col: Vec<f64>,
    /// Directions left out by the last [`Block::keep_independent`] (k).
    dropped: Vec<bool>,
    /// Columns left out of the block least-squares problem (2k).
    mr_dropped: Vec<bool>,
    /// Cholesky factor of the block least-squares matrix `(A Y)^T W (A Y)`, `Y = [Q | S]`
    /// (2k x 2k).
    mr_m: Vec<f64>,
    /// Minimal-residual coefficients `c` on `[Q | S]`, the block just used and the next
    /// basis; after [`Block::new_directions`] on `[Q_prev | Q]` (2k).
    mr_c: Vec<f64>,
    /// Reduction results (host).
    pub(crate) pack: Vec<f64>,
    /// Scratch coefficients for the device's linear combinations (k * k).
    negc: Vec<f64>,
}

impl<D: Device> Block<D> {
    /// The workspace for block size `k` with a reduction of up to `pack_len` values
    /// (allocated here, before the loop).
    pub(crate) fn new<C: Communicator + ?Sized>(
        sys: &mut System<'_, C, D>,
        basis: SStepBasis,
        k: usize,
        pack_len: usize,
    ) -> Result<Self, KrylovError> {
        sys.ops.reserve(pack_len, 2 * k + 1)?;
        Ok(Self {
            k,
            basis,
            s: sys.new_vecs(k + 1)?,
            a_s: sys.new_vecs(k)?,
            q: sys.new_vecs(k)?,
            aq: sys.new_vecs(k)?,
            g: vec![0.0; k * k],
            l: vec![0.0; k * k],
            w: vec![0.0; k * k],
            coef: vec![0.0; k],
            qr: vec![0.0; k],
            col: vec![0.0; 2 * k],
            dropped: vec![false; k],
            mr_dropped: vec![false; 2 * k],
            mr_m: vec![0.0; 4 * k * k],
            mr_c: vec![0.0; 2 * k],
            pack: vec![0.0; pack_len],
            negc: vec![0.0; k * k],
        })
    }

    /// `S = basis(r)` (k SpMVs: k exchanges, or one through the matrix powers plan).
    ///
    /// With a loop preconditioner (`sys.pc`) the basis is that of the preconditioned
    /// operator from the preconditioned residual: `s_0 = z = M^-1 r`, `s_{j+1}` from
    /// `M^-1 Â s_j` ([`System::build_basis`]) and `a_s[j] = Â s_j`, the images the Gram
    /// matrices and the residual update use. Only the `k` columns `S[:, :k]` and their
    /// images are formed (the block methods never read `s_k`): `k - 1` columns by
    /// [`System::build_basis`], then the last image by one SpMV, so `k` SpMVs and `k`
    /// applications of `M^-1` (the one for `z` included) per basis, as `k` steps of
    /// preconditioned CG cost, where a basis of size `k` would apply `M^-1` once more
    /// for the unused `s_k`.
    pub(crate) fn build_basis<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
    ) -> Result<(), KrylovError> {
        if sys.pc.is_none() {
            sys.ops.copy(r, &mut self.s[0])?;
            return sys.build_basis(&self.basis, self.k, &mut self.s, &mut self.a_s);
        }
        let k = self.k;
        sys.precondition(r, &mut self.s[0])?;
        sys.build_basis(&self.basis, k - 1, &mut self.s, &mut self.a_s)?;
        sys.a
            .spmv(&mut sys.ops, &mut self.s[k - 1], &mut self.a_s[k - 1])
    }

    /// `Q = S[:, :k]`, `A Q = A S` (swaps, no copies).
    pub(crate) fn adopt_basis(&mut self) {
        for j in 0..self.k {
            std::mem::swap(&mut self.q[j], &mut self.s[j]);
            std::mem::swap(&mut self.aq[j], &mut self.a_s[j]);
        }
    }

    /// Restart the block from `r`: `Q = basis(r)` (k SpMVs; with a loop preconditioner the
    /// basis starts from `M^-1 r`, see [`Block::build_basis`]).
    pub(crate) fn restart<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
    ) -> Result<(), KrylovError> {
        self.build_basis(sys, r)?;
        self.adopt_basis();
        Ok(())
    }

    /// ONE reduction of `Q^T A Q` (upper) and `Q^T r` into `g` and `qr`, with `extra`
    /// values this rank left after them in the slots (a refresh's `[t.t, ||t||_w^2]`, then
    /// in `pack[tri(k) + k..]`); a non-finite value is a breakdown of `method` at `outer`
    /// naming `what`.
    pub(crate) fn reduce_gram<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
        extra: usize,
        method: &'static str,
        outer: usize,
        what: &'static str,
    ) -> Result<(), KrylovError> {
        let kk = self.k;
        let (n1, n2) = (tri(kk), tri(kk) + kk);
        let mut pack = std::mem::take(&mut self.pack);
        let ok = self
            .local(sys, Product::Qaq, 0)
            .and_then(|()| self.local(sys, Product::Qr(r), n1))
            .and_then(|()| Ok(sys.ops.reduce(&mut pack[..n2 + extra])?))
            .and_then(|()| check_finite(method, outer, what, &pack[..n2 + extra]));
        self.set_gram(&pack[..n1]);
        self.qr[..kk].copy_from_slice(&pack[n1..n2]);
        self.pack = pack;
        ok
    }

    /// This rank's part of the block inner product `product` into the reduction slots
    /// from `at` (as many as [`Product`] says).
    pub(crate) fn local<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        product: Product<'_, D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        let k = self.k;
        let (q, aq, s, a_s) = (&self.q[..k], &self.aq[..k], &self.s[..k], &self.a_s[..k]);
        let (upper, full) = (GramShape::Upper, GramShape::Full);
        Ok(match product {
            Product::Qaq => sys.ops.gram(q, aq, upper, None, at),
            Product::Sas => sys.ops.gram(s, a_s, upper, None, at),
            Product::Qas => sys.ops.gram(aq, s, full, None, at),
            Product::QasExact => sys.ops.gram(q, a_s, full, None, at),
            Product::Qr(r) => sys.ops.gram(q, &[r][..], full, None, at),
            Product::Sr(r) => sys.ops.gram(s, &[r][..], full, None, at),
        }?)
    }

    /// `A Q = A` times `Q` from scratch (k SpMVs, k counted depth-1 exchanges): ends the
    /// drift of the recurrence `A Q = A S - A Q B`.
    pub(crate) fn recompute_aq<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
    ) -> Result<(), KrylovError> {
        for j in 0..self.k {
            sys.a.spmv(&mut sys.ops, &mut self.q[j], &mut self.aq[j])?;
        }
        Ok(())
    }

    /// `g` (k x k, full) from its upper triangle `up`.
    pub(crate) fn set_gram(&mut self, up: &[f64]) {
        unpack_upper(up, self.k, &mut self.g);
    }

    /// Factor `g` into `l`.
    pub(crate) fn factor(&mut self) -> Result<(), NotPositiveDefinite> {
        let k = self.k;
        self.dropped[..k].fill(false);
        self.l[..k * k].copy_from_slice(&self.g[..k * k]);
        cholesky(&mut self.l[..k * k], k)
    }

    /// For a Gram matrix that is singular right after a refresh: factor `g` into `l` leaving
    /// out the directions that are numerically dependent on the ones before them
    /// ([`BLOCK_DEPENDENT`]). The Krylov space of the residual can hold fewer than `k` new
    /// directions (on generated 3-D Poisson of order 512, CG ends at step 20 with a residual
    /// of 1e-16: a third block of 8 has 4, a second block of 12 has 8); the step and `B`
    /// then use the kept directions (zero coefficients for the others). With the Newton and
    /// Chebyshev bases, built to stay well conditioned, a lost rank means exactly that. With
    /// the monomial basis it usually means the basis's own conditioning, so there only in
    /// the last few outer steps (`rnorm` and `rate` as in [`mr_wanted`]): earlier, keeping k
    /// with fewer directions doubled its iterations, and the caller halves k instead. True
    /// when the step can go on; false for the monomial basis earlier or with no direction
    /// kept; the pivot that proves `g` is not positive semidefinite.
    pub(crate) fn keep_independent<C: Communicator + ?Sized>(
        &mut self,
        sys: &System<'_, C, D>,
        rnorm: f64,
        rate: f64,
    ) -> Result<bool, NotPositiveDefinite> {
        if sys.cfg.basis == Basis::Monomial && !mr_wanted(sys, rnorm, rate) {
            return Ok(false);
        }
        let k = self.k;
        self.l[..k * k].copy_from_slice(&self.g[..k * k]);
        let kept = castack_linalg::dense::cholesky_dropping(
            &mut self.l[..k * k],
            k,
            castack_linalg::dense::PIVOT_TOL,
            BLOCK_DEPENDENT,
            &mut self.dropped[..k],
        )?;
        Ok(kept > 0)
    }

    /// `coef = g^-1 qr` with the factor in `l` (0 for dropped directions).
    pub(crate) fn solve_coef(&mut self) {
        let k = self.k;
        self.coef[..k].copy_from_slice(&self.qr[..k]);
        zero_dropped(&self.dropped[..k], &mut self.coef[..k], 1);
        castack_linalg::dense::cholesky_solve(&self.l[..k * k], k, &mut self.coef[..k]);
    }

    /// `w <- g^-1 w` (`B = (Q^T A Q)^-1 Q^T A S`) with the factor in `l` (rows of dropped
    /// directions 0).
    pub(crate) fn solve_b(&mut self) {
        let k = self.k;
        zero_dropped(&self.dropped[..k], &mut self.w[..k * k], k);
        castack_linalg::dense::cholesky_solve_many(
            &self.l[..k * k],
            k,
            &mut self.w[..k * k],
            k,
            &mut self.col[..k],
        );
    }

    /// `x += Q coef`, `r -= A Q coef` (two passes: a linear combination, and one fused
    /// with the new r's `[r.r, ||r||_w^2]`, written to the slots `at`, `at + 1`).
    pub(crate) fn step<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        let k = self.k;
        sys.ops.lincomb(&self.coef[..k], &self.q[..k], x)?;
        for (n, c) in self.negc[..k].iter_mut().zip(&self.coef[..k]) {
            *n = -c;
        }
        let w = &sys.w;
        Ok(sys
            .ops
            .lincomb_norms(&self.negc[..k], &self.aq[..k], r, w, at)?)
    }

    /// `Q = S - Q B`, `A Q = A S - A Q B` with `B` in `w` (two block linear combinations,
    /// each reading its k sources once).
    pub(crate) fn new_directions<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
    ) -> Result<(), KrylovError> {
        let k = self.k;
        let b = &self.w[..k * k];
        for (n, v) in self.negc[..k * k].iter_mut().zip(b) {
            *n = -v;
        }
        let coef = &self.negc[..k * k];
        sys.ops
            .lincomb_block(coef, &self.q[..k], &mut self.s[..k])?;
        sys.ops
            .lincomb_block(coef, &self.aq[..k], &mut self.a_s[..k])?;
        // The minimal-residual coefficients on [Q, S] in terms of [Q, S - Q B]:
        // S c2 = (S - Q B) c2 + Q (B c2).
        let (c1, c2) = self.mr_c[..2 * k].split_at_mut(k);
        for (l, c1l) in c1.iter_mut().enumerate() {
            *c1l += (0..k).map(|j| b[l * k + j] * c2[j]).sum::<f64>();
        }
        self.adopt_basis();
        Ok(())
    }

    /// Local parts of the block minimal-residual problem into the slots
    /// `at..at + tri(2k) + 2k`: the upper triangle of `M = (A Y)^T W (A Y)` and
    /// `v = (A Y)^T W r` for `Y = [Q | S]`, the block just used and the next basis
    /// `S = basis(r)` (call after [`Block::build_basis`], before
    /// [`Block::new_directions`]), `W` the weights of the original-system norm (see
    /// [`MR_WINDOW`]).
    pub(crate) fn local_mr<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        let k = self.k;
        let cols = Concat(&self.aq[..k], &self.a_s[..k]);
        let w = Some(&sys.w);
        sys.ops.gram_self(&cols, GramShape::Upper, w, at)?;
        let rs = [r];
        Ok(sys
            .ops
            .gram(&cols, &rs[..], GramShape::Full, w, at + tri(2 * k))?)
    }

    /// From the reduced `[M (upper) | v]` of [`Block::local_mr`] and `rw = ||r||_w^2`:
    /// `c = M^-1 v` (kept for [`Block::mr_point`]) and the predicted `||r - A Y c||_w^2 =
    /// rw - v^T c`. `M` is a normal-equations matrix (condition number squared): columns
    /// whose Cholesky pivot falls below [`MR_DROP`] relative are left out (`c_j = 0`), so
    /// the minimum is taken over the numerically independent columns. `None` when nothing
    /// is left or a value is not finite.
    pub(crate) fn mr_predict(&mut self, up: &[f64], rw: f64) -> Option<f64> {
        let k = 2 * self.k;
        let t = tri(k);
        unpack_upper(&up[..t], k, &mut self.mr_m[..k * k]);
        self.mr_c[..k].copy_from_slice(&up[t..t + k]);
        let kept = castack_linalg::dense::cholesky_dropping(
            &mut self.mr_m[..k * k],
            k,
            MR_DROP,
            f64::INFINITY,
            &mut self.mr_dropped[..k],
        );
        if kept.unwrap_or(0) == 0 {
            return None;
        }
        zero_dropped(&self.mr_dropped[..k], &mut self.mr_c[..k], 1);
        // mr_c holds v with the dropped entries zeroed: v^T c over the kept columns.
        self.col[..k].copy_from_slice(&self.mr_c[..k]);
        castack_linalg::dense::cholesky_solve(&self.mr_m[..k * k], k, &mut self.mr_c[..k]);
        let vc: f64 = self.col[..k]
            .iter()
            .zip(&self.mr_c[..k])
            .map(|(v, c)| v * c)
            .sum();
        let pred = rw - vc;
        pred.is_finite().then_some(pred.max(0.0))
    }

    /// `xc = x + Y c = x + Q c1 + S c2` with the coefficients of [`Block::mr_predict`]
    /// (`Q` the block just used, `S` the next basis: call before
    /// [`Block::new_directions`], which then rewrites `c` for [`Block::mr_residual`]).
    pub(crate) fn mr_point<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        x: &DistVec<D>,
        xc: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        let k = self.k;
        sys.ops.copy(x, xc)?;
        let cols = Concat(&self.q[..k], &self.s[..k]);
        Ok(sys.ops.lincomb(&self.mr_c[..2 * k], &cols, xc)?)
    }

    /// `r = t + (A Q_prev) c1' + (A Q) c2`: the residual of `x = xc - Y c` from the true
    /// residual `t` of the candidate `xc` of [`Block::mr_point`]. [`Block::new_directions`]
    /// turned `S c2` into `(S - Q_prev B) c2 + Q_prev (B c2)`, i.e. `c1' = c1 + B c2` on the
    /// previous block, whose images it leaves in the basis images (valid until the next
    /// [`Block::build_basis`]), and `c2` on the new directions `Q`.
    pub(crate) fn mr_residual<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        t: &DistVec<D>,
        r: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        let k = self.k;
        sys.ops.copy(t, r)?;
        let cols = Concat(&self.a_s[..k], &self.aq[..k]);
        Ok(sys.ops.lincomb(&self.mr_c[..2 * k], &cols, r)?)
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

/// Relative Cholesky pivot below which [`Block::mr_predict`] leaves a column out.
pub(crate) const MR_DROP: f64 = 1e-12;

/// Relative size `-d / a_jj` up to which a negative Cholesky pivot of a block's Gram matrix
/// counts as rounding of a dependent direction in [`Block::keep_independent`]; a more
/// negative pivot proves the matrix indefinite (a breakdown).
pub(crate) const BLOCK_DEPENDENT: f64 = 1e-8;

/// Zero the rows `j` (of `width` values each) of `m` whose `dropped[j]` is set.
fn zero_dropped(dropped: &[bool], m: &mut [f64], width: usize) {
    for (row, &d) in m.chunks_exact_mut(width).zip(dropped) {
        if d {
            row.fill(0.0);
        }
    }
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
/// CG's; with 1e-8 the worst there is 1.2x at zero to three replacements per solve. With
/// the minimal-residual candidate ([`MR_WINDOW`]; 900 runs: cbcg/cbcgr x k x basis x
/// ranks on 25 matrices): 1e-8 left 14 runs over 1.1 x CG + k at 450 replacements in all,
/// 1e-10 left 9 at 957 (SpMVs 1.104 -> 1.111 x CG's), 1e-12 (on the four worst matrices)
/// 12 replacements per solve and 6% more SpMVs for two fewer runs over.
pub(crate) const DRIFT_TOL: f64 = 1e-10;

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

/// The block minimal-residual candidate (both block methods).
///
/// The CG iterates inside an outer step lie in `x + span(Q)` (in exact arithmetic the
/// block's directions span CG's `k` directions of those steps), so the point of that
/// affine space with the least residual in the original-system norm is at least as good
/// as every one of them. CG's residual is not monotone: on the shared matrices it often
/// dips below the tolerance inside a block and is back above it at the block's end, which
/// cost up to `k` extra steps for every dip missed. Near convergence the methods therefore
/// add `M = (A Y)^T W (A Y)` (upper) and `v = (A Y)^T W r` (`W` the weights of the
/// original-system norm, `r` the new residual, `Y = [Q | S]` the block just used and the
/// next basis `S = basis(r)`, both at hand when the reduction after the step is made) to
/// that reduction, solve `M c = v` (Cholesky of `2k x 2k`, numerically dependent columns
/// left out) and predict `||r - A Y c||_w^2 = ||r||_w^2 - v^T c`. When the prediction
/// meets the tolerance, `xc = x + Y c` replaces `x` in the next true-residual check (1
/// SpMV, 1 reduction: the check the recurrence's own claim would cost). If the check
/// passes, `xc` is the answer; if not, `r` becomes the true residual of `x` as
/// `(b - A xc) + A Y c` and the check counts as a residual replacement, as a failed claim
/// does.
/// Reduction and exchange counts are those without the candidate (`S` is built in every
/// outer step anyway); the message grows by `k(2k+1) + 2k` values and each rank does as
/// many weighted dot products more in the steps where it is on.
///
/// Why `S` too: over `Q` alone the candidate cannot remove what the block's own step left
/// outside its span. Where the Krylov space is exhausted (3-D Poisson of order 512 with
/// `b = A 1`: CG reaches 2e-16 at step 20), cbcgr with k = 8 and the Newton basis ended its
/// third block at 1.4e-12 against a tolerance of 1e-12 (rounding leaves the residual
/// partly along earlier blocks), the candidate over `Q` predicted the same 1.4e-12 and a
/// fourth block followed (32 CG-equivalent iterations against CG's 20: over 1.1 x CG + k);
/// over `[Q | S]` it predicts 2e-14 and the solve ends after the third (24). The final
/// iterate then lies in the Krylov space of dimension `(outer + 1) k` that the SpMVs
/// counted so far span (each outer step builds the next basis; the first one is loop work
/// too), where over `Q` alone the last basis's k SpMVs were wasted. Measured with `cargo
/// xtask sweep --ranks 1,3,4`, cbcg/cbcgr x k = 4, 8, 12 x Chebyshev/Newton, against the
/// candidate over `Q`: on the 25 shared matrices (1e-8, 900 runs) 776 runs took fewer
/// CG-equivalent iterations (mostly one block) and none more, mean 1.030 -> 0.951 x CG's,
/// reductions -2.0% and halo exchanges -2.4% in all; on generated Poisson at 1e-12 (576
/// runs) 475 fewer, none more, runs over 1.1 x CG + k 1 -> 0. Measured with `cargo xtask sweep --ranks 1,3,4` on
/// the 25 shared matrices with condition number <= 1e8, cbcg/cbcgr x k = 4, 8, 12 x
/// Chebyshev/Newton (900 runs): runs over 1.1 x CG + k fell from 68 to 9 (with
/// [`DRIFT_TOL`] 1e-10; 14 with 1e-8), the mean CG-equivalent iterations from 1.093 to
/// 1.036 x CG's; on msc04515, bcsstk10 and nasa2910 at k = 8, 12 from 1.03-1.29 x (mean
/// 1.13) to 1.00-1.09 x (mean 1.04).
///
/// It is on in an outer step when the residual before it is within `MR_WINDOW` times the
/// last step's reduction factor of the target ([`mr_wanted`]), i.e. in the last few outer
/// steps only.
pub(crate) const MR_WINDOW: f64 = 100.0;

/// Whether the next outer step carries the minimal-residual candidate ([`MR_WINDOW`]):
/// `rnorm` is the current residual norm, `rate` the last outer step's reduction factor
/// `||r_old|| / ||r_new||` (1 before the first).
pub(crate) fn mr_wanted<C: Communicator + ?Sized, D: Device>(
    sys: &System<'_, C, D>,
    rnorm: f64,
    rate: f64,
) -> bool {
    near_target(sys, rnorm, rate, MR_WINDOW)
}

/// Whether the residual norm `rnorm` is within `window` times `rate` (the last outer
/// step's reduction factor `||r_old|| / ||r_new||`, taken as 1 when below 1 or not
/// finite) of the target `max(tol ||b||, atol)`.
pub(crate) fn near_target<C: Communicator + ?Sized, D: Device>(
    sys: &System<'_, C, D>,
    rnorm: f64,
    rate: f64,
    window: f64,
) -> bool {
    let target = (sys.cfg.tol * sys.bnorm).max(sys.cfg.atol);
    let rate = if rate.is_finite() { rate.max(1.0) } else { 1.0 };
    rnorm <= window * rate * target
}

/// Whether the periodic replacement (`replace_every` CG-equivalent iterations) is due
/// after `since` CG-equivalent iterations without a replacement.
pub(crate) fn replacement_due(every: Option<usize>, since: usize) -> bool {
    every.is_some_and(|n| since >= n)
}

/// The Gram matrix of the next block `Q' = S - Q B` by the update
/// `Q'^T A Q' = S^T A S - W^T B` (the cross terms cancel by the conjugacy `B` imposes),
/// symmetrised: `sas` the packed upper triangle of `S^T A S`, `w = (A Q)^T S` and `b = B`
/// row-major `k x k`; the full matrix goes to `g[..k*k]`.
pub(crate) fn gram_update(sas: &[f64], w: &[f64], b: &[f64], k: usize, g: &mut [f64]) {
    let mut idx = 0;
    for i in 0..k {
        for j in i..k {
            // (W^T B)_{ij} = sum_l W_{li} B_{lj}, symmetrised.
            let (mut wb, mut bw) = (0.0, 0.0);
            for l in 0..k {
                wb += w[l * k + i] * b[l * k + j];
                bw += w[l * k + j] * b[l * k + i];
            }
            let v = sas[idx] - 0.5 * (wb + bw);
            g[i * k + j] = v;
            g[j * k + i] = v;
            idx += 1;
        }
    }
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

/// The end of the loop if the true residual `sums` (`[., ||b - A x||_w^2, sum w e^2]` as
/// [`System::checked_residual`] returns) meets the tolerance, certified, the budget is
/// spent or the iterate stagnates ([`System::check_end`]).
fn verdict<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    sums: &[f64; 3],
    method: &'static str,
    outer: usize,
    equivalent: usize,
    rnorm: f64,
) -> Result<Option<LoopEnd>, KrylovError> {
    check_finite(method, outer, "||b - A x||", sums)?;
    let [tnorm, enorm] = [sums[1], sums[2]].map(|v| v.max(0.0).sqrt());
    Ok(sys.check_end(tnorm, enorm, rnorm, outer, equivalent))
}

/// The true-residual check when the recurrence claims convergence or the iteration
/// budget is spent (one SpMV into `t`, one reduction): stop, or replace `r` by the true
/// residual.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_true<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    r: &mut DistVec<D>,
    t: &mut DistVec<D>,
    method: &'static str,
    outer: usize,
    equivalent: usize,
    rnorm: f64,
) -> Result<Check, KrylovError> {
    let sums = sys.checked_residual(x, t)?;
    if let Some(end) = verdict(sys, &sums, method, outer, equivalent, rnorm)? {
        return Ok(Check::Done(end));
    }
    sys.ops.copy(t, r)?;
    sys.replacements += 1;
    Ok(Check::Replaced([sums[0], sums[1]]))
}

/// What a block method's outer step did ([`BlockMethod::step`]).
pub(crate) enum Outcome {
    /// The step was taken: the driver forms the new directions.
    Taken,
    /// Start the outer step over (a refresh, a halved block size).
    Again,
    /// Stop with this outcome (a refresh's check).
    End(LoopEnd),
}

/// A block method's own parts of the outer loop that [`run`] drives.
pub(crate) trait BlockMethod<C: Communicator + ?Sized, D: Device>: Sized {
    /// The method's registry name (in breakdowns).
    const NAME: &'static str;

    /// Whether a restart of the block from `r` (the first outer step, a halved block size)
    /// also reduces `Q^T A Q` and `Q^T r` ([`Block::reduce_gram`]): for a method whose step
    /// does not reduce them itself.
    const GRAM_AT_RESTART: bool;

    /// The method's state and its block workspace for `basis` (allocated here, with the
    /// reductions of every block size a fallback may halve to prepared).
    fn setup(
        sys: &mut System<'_, C, D>,
        basis: SStepBasis,
    ) -> Result<(Self, Block<D>), KrylovError>;

    /// The check of a convergence claim of norm `claimed` (of the minimal-residual
    /// candidate when `candidate`), a drift, a periodic replacement or the spent budget;
    /// after a replacement, whatever the method must make exact again.
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        st: &mut Outer<D>,
        x: &mut DistVec<D>,
        claimed: f64,
        candidate: bool,
    ) -> Result<Check, KrylovError>;

    /// The outer step from the Gram matrix's factorisation to `B`, the next basis in
    /// place (the driver then forms the new directions and counts the step).
    fn step(
        &mut self,
        sys: &mut System<'_, C, D>,
        st: &mut Outer<D>,
        x: &mut DistVec<D>,
    ) -> Result<Outcome, KrylovError>;
}

/// The outer loop's state (both block methods).
pub(crate) struct Outer<D: Device> {
    /// The block workspace.
    pub(crate) blk: Block<D>,
    /// The recurrence residual.
    pub(crate) r: DistVec<D>,
    /// The true residual of a check.
    t: DistVec<D>,
    /// The minimal-residual candidate ([`MR_WINDOW`]).
    xc: DistVec<D>,
    /// `||r||_w^2`.
    pub(crate) rw: f64,
    /// Outer steps taken.
    pub(crate) outer: usize,
    /// CG-equivalent iterations.
    equivalent: usize,
    /// CG-equivalent iterations since the last replacement.
    pub(crate) since: usize,
    /// A drift seen by the last reduction: a check (refresh) is due.
    pub(crate) drifted: bool,
    /// The candidate's predicted residual norm, when `xc` holds one.
    cand: Option<f64>,
    /// The last outer step's residual reduction factor ([`MR_WINDOW`]).
    rate: f64,
    /// Minimal-residual smoothing of the outer-step iterates (`cg/smoothing.rs`).
    smooth: Smoother<D>,
}

impl<D: Device> Outer<D> {
    /// The true-residual check (one SpMV into `t`, one reduction) of `x` ([`check_true`]),
    /// or with `candidate` of the minimal-residual candidate `xc` ([`MR_WINDOW`]; `cbcg`):
    /// that stops with `x = xc`, or sets `r = t + A Y c` (the residual of `x`, see
    /// [`Block::mr_residual`]) and counts a replacement. `rnorm` is the claimed norm (the
    /// candidate's predicted one).
    pub(crate) fn check_true<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        candidate: bool,
        method: &'static str,
        rnorm: f64,
    ) -> Result<Check, KrylovError> {
        let (outer, equivalent) = (self.outer, self.equivalent);
        let (r, t) = (&mut self.r, &mut self.t);
        if !candidate {
            return check_true(sys, x, r, t, method, outer, equivalent, rnorm);
        }
        let sums = sys.checked_residual(&mut self.xc, t)?;
        if let Some(end) = verdict(sys, &sums, method, outer, equivalent, rnorm)? {
            sys.ops.copy(&self.xc, x)?;
            return Ok(Check::Done(end));
        }
        self.blk.mr_residual(sys, t, r)?;
        sys.replacements += 1;
        Ok(Check::Replaced([sums[0], sums[1]]))
    }

    /// A refresh of the block methods (for `cbcgr` every true-residual event; for `cbcg`
    /// after a failed Cholesky factorisation): `t = b - A x` (1 SpMV), `A Q` recomputed (k
    /// SpMVs) and ONE reduction `[Q^T A Q, Q^T t, t.t, ||t||_w^2, sum w e^2]` (the last the
    /// bound on the true residual's rounding error, [`System::checked_residual_local`]).
    /// Stops on the true
    /// residual, or replaces `r` by it and the Gram matrix and `Q^T r` by their recomputed
    /// values, keeping the directions.
    ///
    /// With the minimal-residual candidate (`candidate`; [`MR_WINDOW`]) the true residual
    /// is that of `xc`: the refresh stops with `x = xc`, or continues from `x` with
    /// `r = t + A Y c` ([`Block::mr_residual`], no extra communication) and `Q^T r`.
    pub(crate) fn refresh<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        candidate: bool,
        method: &'static str,
        rnorm: f64,
    ) -> Result<Check, KrylovError> {
        let Self { blk, r, t, xc, .. } = self;
        let n2 = tri(blk.k) + blk.k;
        // [Q^T A Q (upper) | Q^T r | t.t, ||t||_w^2, sum w e^2] in the reduction slots.
        if candidate {
            sys.checked_residual_local(xc, t, n2, n2 + 2)?;
            blk.mr_residual(sys, t, r)?;
        } else {
            sys.checked_residual_local(x, t, n2, n2 + 2)?;
            sys.ops.copy(t, r)?;
        }
        blk.recompute_aq(sys)?;
        let what = "||b - A x||, Q^T A Q, Q^T r";
        blk.reduce_gram(sys, r, 3, method, self.outer, what)?;
        let sums = [blk.pack[n2], blk.pack[n2 + 1]];
        let [tnorm, enorm] = [sums[1], blk.pack[n2 + 2]].map(|v| v.max(0.0).sqrt());
        if let Some(end) = sys.check_end(tnorm, enorm, rnorm, self.outer, self.equivalent) {
            if candidate {
                sys.ops.copy(xc, x)?;
            }
            return Ok(Check::Done(end));
        }
        sys.replacements += 1;
        Ok(Check::Replaced(sums))
    }

    /// Whether this outer step carries the minimal-residual block ([`mr_wanted`]).
    pub(crate) fn mr_wanted<C: Communicator + ?Sized>(&self, sys: &System<'_, C, D>) -> bool {
        mr_wanted(sys, self.rw.max(0.0).sqrt(), self.rate)
    }

    /// This rank's `(s, r)_w` of the smoothing into the reduction slot `at`.
    pub(crate) fn local_sr<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        self.smooth.local_sr(sys, &self.r, at)
    }

    /// Take in the reduction after the step: the new residual's `||r||_w^2 = rw`, the
    /// smoothing's `(s, r)_w = sr` and, when the step carried it, the reduced
    /// minimal-residual block `mr` ([`Block::local_mr`]): the reduction factor, the
    /// smoothing step, and the candidate `xc` when its predicted norm meets the tolerance.
    pub(crate) fn absorb<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &DistVec<D>,
        rw: f64,
        sr: f64,
        mr: Option<&[f64]>,
    ) -> Result<(), KrylovError> {
        let rw_old = std::mem::replace(&mut self.rw, rw);
        self.rate = (rw_old / rw).sqrt();
        self.smooth.update(sys, x, &self.r, sr, rw)?;
        if let Some(pred) = mr.and_then(|mr| self.blk.mr_predict(mr, rw)) {
            if sys.meets(pred.sqrt()) {
                self.blk.mr_point(sys, x, &mut self.xc)?;
                self.cand = Some(pred.sqrt());
            }
        }
        Ok(())
    }

    /// After a failed factorisation right after a refresh (`failed`: its error, if any):
    /// go on with the directions that are not numerically dependent
    /// ([`Block::keep_independent`]; true), or halve the block size and restart the block
    /// from `r` (false); at `k = 1` a breakdown naming `Q^T A Q`.
    pub(crate) fn keep_or_halve<C: Communicator + ?Sized, M: BlockMethod<C, D>>(
        &mut self,
        sys: &mut System<'_, C, D>,
        failed: Option<NotPositiveDefinite>,
    ) -> Result<bool, KrylovError> {
        match self
            .blk
            .keep_independent(sys, self.rw.max(0.0).sqrt(), self.rate)
        {
            Ok(true) => Ok(true),
            kept => {
                if self.blk.halve() {
                    restart::<M, C, D>(sys, &mut self.blk, &self.r, self.outer)?;
                    return Ok(false);
                }
                let pivot = kept.err().or(failed).map_or(f64::NAN, |e| e.pivot);
                let what = "Q^T A Q (Cholesky pivot)";
                Err(breakdown(M::NAME, self.outer, what, pivot))
            }
        }
    }
}

/// Restart the block from `r` ([`Block::restart`]), with its Gram matrix and `Q^T r`
/// reduced for a method `M` that wants them ([`BlockMethod::GRAM_AT_RESTART`]).
fn restart<M: BlockMethod<C, D>, C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    blk: &mut Block<D>,
    r: &DistVec<D>,
    outer: usize,
) -> Result<(), KrylovError> {
    blk.restart(sys, r)?;
    if M::GRAM_AT_RESTART {
        blk.reduce_gram(sys, r, 0, M::NAME, outer, "Q^T A Q, Q^T r")?;
    }
    Ok(())
}

/// The outer loop of the block methods `M` (their module docs): the initial residual, the
/// basis, then per outer step the smoothing's take-over, a true-residual check when the
/// recurrence (or the smoothed residual, or the candidate) claims convergence, a drift was
/// seen, a periodic replacement is due or the budget is spent, and the method's step.
pub(crate) fn run<M: BlockMethod<C, D>, C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let [mut r, t] = sys.vecs()?;
    sys.ops.prepare(2)?;
    let [_, rw] = sys.initial_residual(x, &mut r, x0_given)?;
    let basis = setup_basis(sys, &r, M::NAME)?;
    let xc = sys.new_vec()?;
    let (mut m, mut blk) = M::setup(sys, basis)?;
    sys.ops.set_phase(Phase::Loop);
    restart::<M, C, D>(sys, &mut blk, &r, 0)?;
    let smooth = Smoother::new(sys, x, &r, rw)?;
    let mut st = Outer {
        blk,
        r,
        t,
        xc,
        rw,
        outer: 0,
        equivalent: 0,
        since: 0,
        drifted: false,
        cand: None,
        rate: 1.0,
        smooth,
    };
    loop {
        check_finite(M::NAME, st.outer, "||r||", &[st.rw])?;
        let rnorm = st.rw.max(0.0).sqrt();
        // Minimal-residual smoothing (cg/smoothing.rs): when the smoothed residual meets
        // the tolerance, go on from the smoothed iterate, checked like a convergence claim.
        let smoothed = st.smooth.take_over(sys, x)?;
        if smoothed {
            // The candidate was built on the old x.
            st.cand = None;
        }
        if smoothed
            || st.cand.is_some()
            || sys.meets(rnorm)
            || st.equivalent >= sys.cfg.max_iter
            || st.drifted
            || replacement_due(sys.cfg.replace_every, st.since)
        {
            let cand = st.cand.take();
            let claimed = cand.unwrap_or(if smoothed { st.smooth.norm() } else { rnorm });
            match m.check(sys, &mut st, x, claimed, cand.is_some())? {
                Check::Done(end) => return Ok(end),
                Check::Replaced([_, w]) => {
                    // r is the true residual now; the directions Q are kept (their
                    // conjugacy is what makes the method converge).
                    st.rw = w;
                    (st.since, st.drifted) = (0, false);
                    if smoothed {
                        st.smooth.start(sys, x, &st.r, st.rw)?;
                    }
                }
            }
        }
        match m.step(sys, &mut st, x)? {
            Outcome::Taken => {}
            Outcome::Again => continue,
            Outcome::End(end) => return Ok(end),
        }
        st.blk.new_directions(sys)?;
        let kk = st.blk.k;
        st.outer += 1;
        st.equivalent += kk;
        st.since += kk;
        sys.record(st.equivalent, st.rw.max(0.0).sqrt());
    }
}
