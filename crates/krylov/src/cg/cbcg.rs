//! `cbcg` — block CG on an s-step basis (Chebyshev-basis block CG; with the monomial basis
//! this is Chronopoulos-Gear s-step CG).
//!
//! References: A. T. Chronopoulos and C. W. Gear, "s-step iterative methods for symmetric
//! linear systems", J. Comput. Appl. Math. 25, 1989; Y. Kumagai, A. Fujii, T. Tanaka et
//! al., "Chebyshev basis conjugate gradient method" (CBCG).
//!
//! ```text
//! S = basis(r0); Q = S; AQ = AS
//! loop:  [reduction 1: Q^T A Q, Q^T r]          (k(k+1)/2 + k values)
//!        a = (Q^T A Q)^-1 Q^T r;  x += Q a;  r -= AQ a
//!        S = basis(r)                            (k SpMVs)
//!        [reduction 2: (AQ)^T S, Q^T (AS), r.r, ||r||_w^2, S^T A S, (s, r)_w
//!                      (2k^2 + 3 + k(k+1)/2 values; near convergence also
//!                      (AY)^T W AY, (AY)^T W r for Y = [Q | S]: k(2k+1) + 2k more)]
//!        smoothing: y, s <- minimal-residual combination with x, r
//!        B = (Q^T A Q)^-1 Q^T (AS);  G' = S^T A S - ((AQ)^T S)^T B
//!        Q = S - Q B;  AQ = AS - AQ B
//! ```
//!
//! Per outer iteration: k SpMVs (k halo exchanges), 2 reductions, `outer * k`
//! CG-equivalent iterations. Work vectors: x, r, t (true residual), the candidate
//! `x + Q c`, the smoothed `y` and `s`, k + 1 basis vectors, k images `A S`, k directions
//! `Q`, k images `A Q`.
//!
//! Setup (counted as setup): `||r0||` (1 reduction; with `x0` also 1 SpMV) and, for the
//! Newton and Chebyshev bases, the spectral estimate of [`crate::eig`] (warm-up CG: 2m
//! reductions, m SpMVs). The first basis `S = basis(r0)` is loop work (k exchanges).
//!
//! Stability: the recurrence `AQ = AS - AQ B` amplifies its rounding errors by `B`
//! every outer step (measured: `README.md` here, *Measured*). Reduction 2 also carries
//! `Q^T (AS)` (the fresh SpMV outputs), equal to `(AQ)^T S` in exact arithmetic; when they
//! differ by more than `sstep::DRIFT_TOL` relative, when the recurrence residual meets the
//! tolerance, when the budget is spent, or every `replace_every` CG-equivalent iterations,
//! the true residual is computed (1 SpMV, 1 reduction): it stops the solve, or replaces r
//! (counted in `residual_replacements`) and `AQ = A Q` is recomputed (k SpMVs), keeping the
//! directions Q (restarting the block from r would throw away conjugacy and stall).
//!
//! Conjugation: `B` comes from `Q^T (AS)`, whose `AS` are this step's SpMV outputs, so the
//! new directions `S - Q B` are A-conjugate to `Q` up to one step's rounding; from the
//! recurrence's `(AQ)^T S` (equal in exact arithmetic) they were conjugate only under the
//! drifting `AQ`. With `G = Q^T (AQ)` and this `B`, the next reduction's `Q'^T (AQ')`
//! equals `S^T A S - ((AQ)^T S)^T B` in exact arithmetic: the Gram drift check below. This
//! `B` removed the runs over 1.1 x CG + k, with fewer SpMVs (measured: `README.md` here,
//! *Measured*).
//!
//! Gram drift: reduction 1 forms `Q^T A Q` with the recurrence `AQ`; reduction 2 also
//! carries `S^T A S` (fresh SpMV outputs), from which the next Gram matrix follows by the
//! update `G' = S^T A S - W^T B` (as `cbcgr` forms it). When the reduced `Q^T (AQ)` and `G'`
//! differ by more than `GRAM_DRIFT_TOL` = 1e-8 relative, the step is not taken: the
//! refresh of `sstep::Outer::refresh` follows (true residual, `AQ` recomputed, one reduction in
//! place of reduction 1; a replacement). It ends stalls at a few percent more SpMVs; a
//! looser threshold left one, a tighter one cost more (measured: `README.md` here,
//! *Measured*).
//!
//! Minimal-residual candidate (`sstep::MR_WINDOW`): CG's residual is not monotone and
//! often dips below the tolerance inside a block; near convergence reduction 2 also
//! carries the block least-squares problem `min_c ||r - AY c||_w` over `Y = [Q | S]`, the
//! block just used and the next basis, and when its predicted
//! minimum meets the tolerance the next true-residual check is made on `x + Y c` instead
//! of `x` (same cost: 1 SpMV, 1 reduction). It passes (that point is returned), or `r`
//! becomes the true residual of `x` and the check counts as a replacement.
//!
//! Minimal-residual smoothing (`cg/smoothing.rs`): the block-end iterates are smoothed
//! (`(s, r)_w` rides in reduction 2); when the smoothed residual meets the tolerance the
//! method goes on from the smoothed iterate, whose true residual is checked as above.
//! It ends the hovering of the residual near the tolerance that rounding causes on
//! ill-conditioned matrices (measured: `README.md` here, *Measured*).
//!
//! Counting in the loop, with R = `residual_replacements` (Gram-drift refreshes included)
//! and no block-size fallback:
//! `reductions = 2 * outer + 1 + R`, `halo_exchanges = k * (outer + 1) + 1 + (k + 1) R`.
//! Convergence is declared only on the true residual.
//!
//! Preconditioned form (a loop preconditioner `M^-1`: `bjacobi_ic0`, `chebyshev` or an
//! embedder's; left preconditioning, s-step PCG of Chronopoulos and Gear 1989 on the
//! bases of E. Carson's thesis, UC Berkeley 2015): the block Krylov space is that of
//! `M^-1 Â` from `z = M^-1 r`,
//!
//! ```text
//! S = basis_{M^-1 A}(z), z = M^-1 r:  s_0 = z, s_{j+1} from M^-1 (A s_j), AS = [A s_j]
//! ```
//!
//! and the rest is the loop above word for word: the Gram matrices `Q^T A Q`, `Q^T (AS)`,
//! `S^T A S` use the kept images `A S`, `A Q`; the Galerkin right-hand side `Q^T r` and
//! the update `x += Q a`, `r -= AQ a` use the scaled system's own residual `r` (so the
//! stopping test, the true-residual checks and replacements, the weighted norms, the
//! smoothing of `x`, `r` and the minimal-residual candidate over `[Q | S]` are unchanged),
//! and `B = G^-1 Q^T (AS)` makes `S - Q B` A-conjugate to `Q`, hence (as `r` is orthogonal
//! to every earlier block and `M^-1 A` is A-self-adjoint) to all earlier blocks. A
//! replacement keeps `Q` and recomputes `AQ` (no `M^-1`); only a new basis (each outer
//! step, the first one, a block-size fallback's restart) applies `M^-1`. The Newton and
//! Chebyshev bases take their parameters from the spectrum of `M^-1 Â`, estimated by
//! preconditioned CG from `z` in setup (`sstep::setup_basis`, [`crate::eig::pcg_lanczos`]).
//! Per outer iteration: k SpMVs, k applications of `M^-1` (`z`, then `k - 1` in the basis:
//! `sstep::Block::build_basis` forms no unused `s_k`), 2 reductions of the sizes above.
//! Counting, with `P` the exchanges of one application (`chebyshev`: its degree `D`;
//! `bjacobi_ic0`: 0) and no block-size fallback:
//! `reductions = 2 * outer + 1 + R`,
//! `halo_exchanges = (1 + P) k (outer + 1) + 1 + (k + 1) R`,
//! `precond_applies = k (outer + 1) + m`, `m` the warm-up's applications (setup: Newton or
//! Chebyshev basis, `sstep::warmup_steps(k)` unless the warm-up converges first; 0 with
//! the monomial basis), whose `2m` reductions, `m` SpMVs and `P m` exchanges are setup's.
//!
//! Breakdown: a Gram matrix `Q^T A Q` whose Cholesky factorisation fails (not positive
//! definite, or numerically singular: the basis lost rank) first triggers the refresh
//! above (a replacement); if it fails again right after one, the step goes on with the
//! directions that are not numerically dependent (`sstep::Block::keep_independent`: the
//! residual's Krylov space can hold fewer than k new directions, and halving k there cost
//! iterations). With the monomial basis only in the last few outer steps
//! (`sstep::MR_WINDOW`): earlier its loss of rank is the basis's conditioning, not a small
//! Krylov space, where keeping k with fewer directions costs far more (both measured:
//! `README.md` here, *Measured*). Otherwise, with none left, or with a clearly negative
//! pivot, the solve restarts the outer step from r with half the block size for the rest
//! of the solve (`k/2` exchanges for the new
//! basis; `equivalent_iterations` then sums the block sizes used); at k = 1 it is a
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

const NAME: &str = "cbcg";

/// Relative difference between the reduced `Q^T (A Q)` (recurrence `A Q`) and the Gram
/// matrix by the update `S^T A S - W^T B` at which `cbcg` refreshes (a replacement).
const GRAM_DRIFT_TOL: f64 = 1e-8;

/// cbcg's own state in the block methods' outer loop ([`sstep::run`]).
pub(crate) struct Cbcg {
    /// The Gram matrix of the next block by the update `S^T A S - W^T B` (full k x k)...
    gupd: Vec<f64>,
    /// ...and its packed upper triangle: compared with the reduced `Q^T (A Q)` (Gram
    /// drift).
    gup: Vec<f64>,
    /// A refresh has just reduced the Gram matrix and `Q^T r` (reduction 1 skipped).
    gram_ready: bool,
    /// `gupd` holds the updated Gram matrix of the current directions.
    upd_ready: bool,
}

impl<C: Communicator + ?Sized, D: Device> BlockMethod<C, D> for Cbcg {
    const NAME: &'static str = NAME;
    // Reduction 1 of every step reduces them.
    const GRAM_AT_RESTART: bool = false;

    fn setup(
        sys: &mut System<'_, C, D>,
        basis: SStepBasis,
    ) -> Result<(Self, Block<D>), KrylovError> {
        let k = sys.cfg.k;
        let (len1, len2) = (tri(k) + k, 2 * k * k + 3 + tri(k) + tri(2 * k) + 2 * k);
        let blk = Block::new(sys, basis, k, len1.max(len2))?;
        let cbcg = Self {
            gupd: vec![0.0; k * k],
            gup: vec![0.0; tri(k)],
            gram_ready: false,
            upd_ready: false,
        };
        for kk in (0..).map(|i| k >> i).take_while(|&kk| kk > 0) {
            sys.ops.prepare(tri(kk) + kk)?;
            // The refresh (Outer::refresh) after a Gram drift or a failed factorisation.
            sys.ops.prepare(tri(kk) + kk + 3)?;
            sys.ops.prepare(2 * kk * kk + 3 + tri(kk))?;
            sys.ops.prepare(2 * kk * kk + 3 + 2 * tri(kk) + kk)?;
        }
        Ok((cbcg, blk))
    }

    fn check(
        &mut self,
        sys: &mut System<'_, C, D>,
        st: &mut Outer<D>,
        x: &mut DistVec<D>,
        claimed: f64,
        candidate: bool,
    ) -> Result<Check, KrylovError> {
        let ev = st.check_true(sys, x, candidate, NAME, claimed)?;
        if let Check::Replaced(_) = ev {
            // r is the true residual now: make A Q exact again.
            st.blk.recompute_aq(sys)?;
            self.upd_ready = false;
        }
        Ok(ev)
    }

    fn step(
        &mut self,
        sys: &mut System<'_, C, D>,
        st: &mut Outer<D>,
        x: &mut DistVec<D>,
    ) -> Result<Outcome, KrylovError> {
        // Reduction 1: Q^T A Q (upper triangle) and Q^T r (unless a refresh just
        // delivered them).
        let (outer, kk) = (st.outer, st.blk.k);
        let mut gram_drifted = false;
        if !self.gram_ready {
            st.blk
                .reduce_gram(sys, &st.r, 0, NAME, outer, "Q^T A Q, Q^T r")?;
            if self.upd_ready && st.since > 0 {
                let n1 = tri(kk);
                sstep::pack_upper(&self.gupd[..kk * kk], kk, &mut self.gup[..n1]);
                let reduced = &st.blk.pack[..n1];
                gram_drifted = sstep::drift(&self.gup[..n1], reduced) > GRAM_DRIFT_TOL;
            }
        }
        (self.gram_ready, self.upd_ready) = (false, false);
        let factored = if gram_drifted {
            Err(None)
        } else {
            st.blk.factor().map_err(Some)
        };
        if let Err(e) = factored {
            if st.since > 0 {
                // A drifted A Q can make Q^T A Q inaccurate or indefinite: refresh it with
                // the true residual (a replacement, one reduction in place of reduction 1)
                // and halve k only when the recomputed Gram matrix fails too.
                let rnorm = st.rw.max(0.0).sqrt();
                match st.refresh(sys, x, false, NAME, rnorm)? {
                    Check::Done(end) => return Ok(Outcome::End(end)),
                    Check::Replaced([_, w]) => {
                        st.rw = w;
                        (st.since, st.drifted, self.gram_ready) = (0, false, true);
                    }
                }
                return Ok(Outcome::Again);
            }
            // Right after a refresh (monomial basis: in the last outer steps only): go on
            // with the directions that are not numerically dependent; else halve k.
            if !st.keep_or_halve::<C, Self>(sys, e)? {
                return Ok(Outcome::Again);
            }
        }
        let mut pack = std::mem::take(&mut st.blk.pack);
        st.blk.solve_coef();
        let mr = st.mr_wanted(sys);
        // Reduction 2: (A Q)^T S, Q^T (A S), r.r, ||r||_w^2, S^T A S (upper), (s, r)_w of
        // the smoothing [, (A Y)^T W (A Y), (A Y)^T W r near convergence, Y = [Q | S]].
        let m = kk * kk;
        let sas_end = 2 * m + 2 + tri(kk);
        let base = sas_end + 1;
        let end = if mr {
            base + tri(2 * kk) + 2 * kk
        } else {
            base
        };
        // x += Q a, r -= AQ a with this rank's [r.r, ||r||_w^2] into slots 2m, 2m + 1.
        st.blk.step(sys, x, &mut st.r, 2 * m)?;
        st.blk.build_basis(sys, &st.r)?;
        st.blk.local(sys, Product::Qas, 0)?;
        st.blk.local(sys, Product::QasExact, m)?;
        st.blk.local(sys, Product::Sas, 2 * m + 2)?;
        st.local_sr(sys, sas_end)?;
        if mr {
            st.blk.local_mr(sys, &st.r, base)?;
        }
        sys.ops.reduce(&mut pack[..end])?;
        check_finite(NAME, outer, "Q^T A S, r^T r", &pack[..end])?;
        st.drifted = sstep::drift(&pack[..m], &pack[m..2 * m]) > sstep::DRIFT_TOL;
        // B from Q^T (A S), the fresh SpMV outputs, not from the recurrence (A Q)^T S: the
        // new directions S - Q B are then conjugate to Q under A itself (module docs).
        st.blk.w[..m].copy_from_slice(&pack[m..2 * m]);
        st.absorb(
            sys,
            x,
            pack[2 * m + 1],
            pack[sas_end],
            mr.then(|| &pack[base..end]),
        )?;
        st.blk.solve_b();
        // The next Gram matrix by the update (S - Q B)^T A (S - Q B) = S^T A S - W^T B
        // (conjugacy of the new block to the old), W = (A Q)^T S: a check of the reduced
        // Q^T (A Q) of the next reduction 1, whose A Q is the drifting recurrence.
        sstep::gram_update(
            &pack[2 * m + 2..sas_end],
            &pack[..m],
            &st.blk.w[..m],
            kk,
            &mut self.gupd,
        );
        self.upd_ready = true;
        st.blk.pack = pack;
        Ok(Outcome::Taken)
    }
}
