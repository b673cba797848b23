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
//!        [reduction 2: Q^T A S = (AQ)^T S, r.r, ||r||_w^2]   (k^2 + 2 values)
//!        B = (Q^T A Q)^-1 Q^T A S;  Q = S - Q B;  AQ = AS - AQ B
//! ```
//!
//! Per outer iteration: k SpMVs (k halo exchanges), 2 reductions, `outer * k`
//! CG-equivalent iterations. Work vectors: x, r, t (true residual), k + 1 basis vectors,
//! k images `A S`, k directions `Q`, k images `A Q`.
//!
//! Setup (counted as setup): `||r0||` (1 reduction; with `x0` also 1 SpMV) and, for the
//! Newton and Chebyshev bases, the spectral estimate of [`crate::eig`] (warm-up CG: 2m
//! reductions, m SpMVs). The first basis `S = basis(r0)` is loop work (k exchanges).
//!
//! Counting in the loop: `reductions = 2 * outer + checks`, `halo_exchanges =
//! k * (outer + 1) + checks + k * replacements`, where a check (true residual, one SpMV,
//! one reduction) happens when the recurrence residual (fused into reduction 2) meets the
//! tolerance or the budget is spent; when it misses, r is replaced by the true residual
//! and the block restarts from it (`Q = basis(r)`). Convergence is declared only on the
//! true residual.
//!
//! Breakdown: a Gram matrix `Q^T A Q` whose Cholesky factorisation fails (not positive
//! definite, or numerically singular: the basis lost rank) restarts the outer step from
//! r with half the block size for the rest of the solve (`k/2` exchanges for the new
//! basis; `equivalent_iterations` then sums the block sizes used); at k = 1 it is a
//! [`crate::KrylovError::Breakdown`] naming `Q^T A Q`. NaN/Inf in any reduced value is a
//! breakdown at once. Options: `k`, `basis`, `tol`, `atol`, `max_iter` (CG-equivalent),
//! `history` (one entry per outer iteration).

use castack_collectives::Communicator;

use super::sstep::{self, breakdown, check_finite, tri, Block, Check};
use super::{LoopEnd, System};
use crate::count::Phase;
use crate::dist::DistVec;
use crate::KrylovError;

/// One-line description for the registry.
pub(crate) const DESCRIPTION: &str =
    "block CG on an s-step basis (Chronopoulos-Gear with monomial): k SpMVs and 2 reductions per k steps";

const NAME: &str = "cbcg";

pub(crate) fn run<C: Communicator + ?Sized>(
    sys: &mut System<'_, C>,
    x: &mut DistVec,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let k = sys.cfg.k;
    let mut r = sys.a.new_vec();
    let mut t = sys.a.new_vec();
    let [_, mut rw] = if x0_given {
        sys.true_residual(x, &mut r)?
    } else {
        r.copy_from(&sys.bhat);
        let mut s = super::norm_sums(sys, &r);
        sys.sc.allreduce_sum(&mut s)?;
        s
    };
    let basis = sstep::setup_basis(sys, &r, NAME)?;
    let (len1, len2) = (tri(k) + k, k * k + 2);
    let mut blk = Block::new(&sys.a, basis, k, len1.max(len2));
    for kk in (0..).map(|i| k >> i).take_while(|&kk| kk > 0) {
        sys.sc.prepare(tri(kk) + kk);
        sys.sc.prepare(kk * kk + 2);
    }
    sys.sc.prepare(2);
    sys.sc.set_phase(Phase::Loop);

    blk.restart(sys, &r)?;
    let (mut outer, mut equivalent) = (0, 0);
    loop {
        check_finite(NAME, outer, "||r||", &[rw])?;
        let rnorm = rw.max(0.0).sqrt();
        if sys.meets(rnorm) || equivalent >= sys.cfg.max_iter {
            match sstep::check_true(sys, x, &mut r, &mut t, NAME, outer, equivalent, rnorm)? {
                Check::Done(end) => return Ok(end),
                Check::Replaced([_, w]) => {
                    rw = w;
                    blk.restart(sys, &r)?;
                    continue;
                }
            }
        }
        // Reduction 1: Q^T A Q (upper triangle) and Q^T r.
        let kk = blk.k;
        let (n1, n2) = (tri(kk), tri(kk) + kk);
        let mut pack = std::mem::take(&mut blk.pack);
        blk.local_qaq(sys, &mut pack[..n1]);
        blk.local_qr(sys, &r, &mut pack[n1..n2]);
        sys.sc.allreduce_sum(&mut pack[..n2])?;
        check_finite(NAME, outer, "Q^T A Q, Q^T r", &pack[..n2])?;
        blk.set_gram(&pack[..n1]);
        blk.qr[..kk].copy_from_slice(&pack[n1..n2]);
        if let Err(e) = blk.factor() {
            blk.pack = pack;
            if blk.halve() {
                blk.restart(sys, &r)?;
                continue;
            }
            return Err(breakdown(NAME, outer, "Q^T A Q (Cholesky pivot)", e.pivot));
        }
        blk.solve_coef();
        let local = blk.step(sys, x, &mut r);
        blk.build_basis(sys, &r)?;
        // Reduction 2: Q^T A S, r.r, ||r||_w^2.
        let m = kk * kk;
        blk.local_qas(sys, &mut pack[..m]);
        pack[m..m + 2].copy_from_slice(&local);
        sys.sc.allreduce_sum(&mut pack[..m + 2])?;
        check_finite(NAME, outer, "Q^T A S, r^T r", &pack[..m + 2])?;
        blk.w[..m].copy_from_slice(&pack[..m]);
        rw = pack[m + 1];
        blk.pack = pack;
        blk.solve_b();
        blk.new_directions(sys);
        outer += 1;
        equivalent += kk;
        sys.record(rw.max(0.0).sqrt());
    }
}
