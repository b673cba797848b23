//! `cbcgr` — block CG on an s-step basis with ONE reduction per outer iteration.
//!
//! Reference: the CBCG of Kumagai, Fujii, Tanaka et al. with the two reductions fused by
//! updating the next Gram matrix instead of recomputing it (as in Chronopoulos-Gear).
//!
//! ```text
//! S = basis(r0); [S^T A S, S^T r]; Q = S; AQ = AS; G = S^T A S; g = S^T r
//! loop:  a = G^-1 g;  x += Q a;  r -= AQ a
//!        S = basis(r)                                       (k SpMVs)
//!        [ONE reduction: S^T A S, (AQ)^T S, S^T r, Q^T r, r.r, ||r||_w^2,
//!                        Q^T (AS), Q^T (AQ), (s, r)_w
//!                        (near convergence also (AY)^T W AY, (AY)^T W r, Y = [Q | S])]
//!        smoothing: y, s <- minimal-residual combination with x, r
//!        B = G^-1 (AQ)^T S
//!        G = S^T A S - ((AQ)^T S)^T B;  g = S^T r - B^T Q^T r
//!        Q = S - Q B;  AQ = AS - AQ B
//! ```
//!
//! (`Q^T r` is zero in exact arithmetic after the update; reducing it costs nothing and
//! keeps `g` accurate.) Per outer iteration: k SpMVs, 1 reduction of
//! `k(k+1) + 2k^2 + 2k + 3` values (`k(2k+1) + 2k` more near convergence), `outer * k`
//! CG-equivalent iterations. Work vectors as `cbcg`.
//!
//! Stability: the recurrence `AQ = AS - AQ B` amplifies its rounding errors by `B` every
//! outer step, and the updated Gram matrix loses accuracy by cancellation; left alone the
//! residual gap grows with the drift and the Gram matrix stops being positive definite
//! (measured: `README.md` here, *Measured*). Two
//! drift measures ride in the one reduction at no extra message: `(AQ)^T S` against
//! `Q^T (AS)` (equal in exact arithmetic; `AS` are fresh SpMV outputs) and the Gram
//! matrix just used against `Q^T (AQ)` computed directly. When either exceeds
//! `sstep::DRIFT_TOL` relative, when a Cholesky factorisation of the updated `G` fails,
//! when the recurrence residual meets the tolerance, when the budget is spent, or every
//! `replace_every` CG-equivalent iterations, a refresh follows: `t = b - A x` (1 SpMV),
//! `AQ = A Q` recomputed (k SpMVs) and ONE reduction `[Q^T A Q, Q^T t, t.t, ||t||_w^2]`.
//! It stops on the true residual or replaces r by t (counted in `residual_replacements`)
//! and `G`, `g` by their recomputed values, keeping the directions Q (restarting the block
//! from r instead would throw away conjugacy and stall).
//!
//! Minimal-residual candidate (`sstep::MR_WINDOW`), as in `cbcg`: near convergence the
//! reduction also carries `min_c ||r - AY c||_w` over `Y = [Q | S]`, the block just used
//! and the next basis; when its predicted minimum meets the tolerance the next refresh
//! checks `x + Y c` instead of `x` (same cost). It passes, or the refresh continues from
//! `x` with `r = (b - A(x + Y c)) + AY c` (a replacement).
//!
//! Minimal-residual smoothing (`cg/smoothing.rs`), as in `cbcg`: when the smoothed residual
//! meets the tolerance, the next refresh is made from the smoothed iterate (measured:
//! `README.md` here, *Measured*).
//!
//! Setup as `cbcg` (`||r0||`, spectral estimate for Newton/Chebyshev). Counting in the
//! loop, with R = `residual_replacements` and no block-size fallback:
//! `reductions = outer + 2 + R` (the first Gram matrix of `basis(r0)`, one per refresh,
//! the last refresh being the final check), `halo_exchanges = k (outer + 1) + (k + 1)(R + 1)`.
//! Convergence is declared only on the true residual.
//!
//! Preconditioned form (a loop preconditioner `M^-1`; left preconditioning, as `cbcg`'s,
//! whose module doc gives the derivation): `S = basis_{M^-1 A}(z)` from `z = M^-1 r`
//! (`s_0 = z`, `s_{j+1}` from `M^-1 (A s_j)`, `AS = [A s_j]` kept), the spectral estimate
//! that of `M^-1 Â` (preconditioned CG from `z` in setup), and the loop above unchanged:
//! `G`, `(AQ)^T S`, `Q^T (AS)`, `Q^T (AQ)` from the kept images, `S^T r`, `Q^T r` and the
//! update `g = S^T r - B^T Q^T r` from the scaled system's own residual `r`, which the
//! stopping test, the refreshes, the smoothing and the minimal-residual candidate read as
//! before. A refresh recomputes `AQ` without `M^-1`. Per outer iteration: k SpMVs, k
//! applications of `M^-1` (`z`, then `k - 1` in the basis), 1 reduction. Counting, with
//! `P` the exchanges of one application (`chebyshev`: its degree; `bjacobi_ic0`: 0) and no
//! block-size fallback: `reductions = outer + 2 + R`,
//! `halo_exchanges = (1 + P) k (outer + 1) + (k + 1)(R + 1)`,
//! `precond_applies = k (outer + 1) + m`, `m` the warm-up's applications as in `cbcg`
//! (setup, like the warm-up's `2m` reductions, `m` SpMVs and `P m` exchanges).
//!
//! Breakdown: when the Cholesky factorisation of `G` fails right after a refresh (with the
//! monomial basis: in the last few outer steps only), the step goes on with the directions
//! that are not numerically dependent, as in `cbcg`; otherwise (the basis lost rank) or
//! when none is left, the outer
//! step restarts from r with half the block size and a freshly
//! reduced Gram matrix (k/2 SpMVs, 1 reduction); at k = 1 it is a
//! [`crate::KrylovError::Breakdown`] naming `Q^T A Q`. NaN/Inf in any reduced value is a
//! breakdown at once. Options: `k`, `basis`, `tol`, `atol`, `max_iter` (CG-equivalent),
//! `history` (one entry per outer iteration), `replace_every`.

use castack_collectives::Communicator;

use super::sstep::{self, check_finite, tri, Block, BlockMethod, Check, Outcome, Outer, Product};
use super::System;
use crate::basis::SStepBasis;
use crate::KrylovError;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;

const NAME: &str = "cbcgr";

fn fused_len(k: usize) -> usize {
    2 * tri(k) + 2 * k * k + 2 * k + 3
}

/// The fused reduction with the minimal-residual block (`sstep::MR_WINDOW`).
fn fused_mr_len(k: usize) -> usize {
    fused_len(k) + tri(2 * k) + 2 * k
}

/// cbcgr's own state in the block methods' outer loop ([`sstep::run`]): host scratch for
/// the Gram matrix just used (packed upper) and `S^T r`.
pub(crate) struct Cbcgr {
    sas: Vec<f64>,
    sr: Vec<f64>,
}

impl<C: Communicator + ?Sized, D: Device> BlockMethod<C, D> for Cbcgr {
    const NAME: &'static str = NAME;
    // Its one reduction per step has no room for them.
    const GRAM_AT_RESTART: bool = true;

    fn setup(
        sys: &mut System<'_, C, D>,
        basis: SStepBasis,
    ) -> Result<(Self, Block<D>), KrylovError> {
        let k = sys.cfg.k;
        let blk = Block::new(sys, basis, k, fused_mr_len(k))?;
        let cbcgr = Self {
            sas: vec![0.0; tri(k)],
            sr: vec![0.0; k],
        };
        for kk in (0..).map(|i| k >> i).take_while(|&kk| kk > 0) {
            sys.ops.prepare(tri(kk) + kk)?;
            sys.ops.prepare(fused_len(kk))?;
            sys.ops.prepare(fused_mr_len(kk))?;
            sys.ops.prepare(tri(kk) + kk + 3)?;
        }
        Ok((cbcgr, blk))
    }

    /// Every check is a refresh (module doc): it recomputes `A Q` and the Gram matrix.
    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        st: &mut Outer<D>,
        x: &mut DistVec<D>,
        claimed: f64,
        candidate: bool,
    ) -> Result<Check, KrylovError> {
        st.refresh(sys, x, candidate, NAME, claimed)
    }

    fn step(
        &mut self,
        sys: &mut System<'_, C, D>,
        st: &mut Outer<D>,
        x: &mut DistVec<D>,
    ) -> Result<Outcome, KrylovError> {
        let (outer, kk) = (st.outer, st.blk.k);
        if let Err(e) = st.blk.factor() {
            if st.since > 0 {
                // The updated Gram matrix may have lost accuracy: first recompute it
                // (a replacement), and halve k only when the recomputed one fails too.
                st.drifted = true;
                return Ok(Outcome::Again);
            }
            // Right after a refresh (monomial basis: in the last outer steps only): go on
            // with the directions that are not numerically dependent; else halve k.
            if !st.keep_or_halve::<C, Self>(sys, Some(e))? {
                return Ok(Outcome::Again);
            }
        }
        st.blk.solve_coef();
        let mr = st.mr_wanted(sys);
        // The one reduction:
        // [S^T A S (upper) | (A Q)^T S | S^T r | Q^T r | r.r, ||r||_w^2 | Q^T (A S) |
        //  Q^T A Q (upper, the Gram matrix just used, computed directly) | (s, r)_w of the
        //  smoothing | near convergence: (A Y)^T W (A Y) (upper), (A Y)^T W r, Y = [Q | S]].
        let m = kk * kk;
        let o1 = tri(kk);
        let (o2, o3) = (o1 + m, o1 + m + kk);
        let o4 = o3 + kk;
        let (o5, o6) = (o4 + 2, o4 + 2 + m);
        let o7 = o6 + o1;
        let o8 = o7 + 1;
        let end = if mr { o8 + tri(2 * kk) + 2 * kk } else { o8 };
        // x += Q a, r -= AQ a with this rank's [r.r, ||r||_w^2] into slots o4, o4 + 1.
        st.blk.step(sys, x, &mut st.r, o4)?;
        st.blk.build_basis(sys, &st.r)?;
        let mut pack = std::mem::take(&mut st.blk.pack);
        let (blk, r) = (&st.blk, &st.r);
        let locals = blk
            .local(sys, Product::Sas, 0)
            .and_then(|()| blk.local(sys, Product::Qas, o1))
            .and_then(|()| blk.local(sys, Product::Sr(r), o2))
            .and_then(|()| blk.local(sys, Product::Qr(r), o3))
            .and_then(|()| blk.local(sys, Product::QasExact, o5))
            .and_then(|()| blk.local(sys, Product::Qaq, o6))
            .and_then(|()| st.local_sr(sys, o7))
            .and_then(|()| if mr { blk.local_mr(sys, r, o8) } else { Ok(()) })
            .and_then(|()| Ok(sys.ops.reduce(&mut pack[..end])?));
        if let Err(e) = locals {
            st.blk.pack = pack;
            return Err(e);
        }
        check_finite(
            NAME,
            outer,
            "S^T A S, Q^T A S, S^T r, Q^T r, r^T r",
            &pack[..end],
        )?;
        // Two drifts: of the recurrence A Q, and of the updated Gram matrix against the
        // directly computed one.
        sstep::pack_upper(&st.blk.g[..m], kk, &mut self.sas[..o1]);
        st.drifted = sstep::drift(&pack[o1..o2], &pack[o5..o6]) > sstep::DRIFT_TOL
            || sstep::drift(&self.sas[..o1], &pack[o6..o7]) > sstep::DRIFT_TOL;
        st.absorb(sys, x, pack[o4 + 1], pack[o7], mr.then(|| &pack[o8..end]))?;
        let blk = &mut st.blk;
        blk.w[..m].copy_from_slice(&pack[o1..o2]);
        self.sr[..kk].copy_from_slice(&pack[o2..o3]);
        // B = G^-1 Q^T A S, with W = Q^T A S kept in `pack` for the Gram update.
        blk.solve_b();
        sstep::gram_update(&pack[..o1], &pack[o1..o2], &blk.w[..m], kk, &mut blk.g);
        let b = &blk.w[..m];
        for i in 0..kk {
            // g_i = (S^T r)_i - sum_l B_{li} (Q^T r)_l
            let mut acc = self.sr[i];
            for l in 0..kk {
                acc -= b[l * kk + i] * pack[o3 + l];
            }
            blk.col[i] = acc;
        }
        blk.qr[..kk].copy_from_slice(&blk.col[..kk]);
        blk.pack = pack;
        Ok(Outcome::Taken)
    }
}
