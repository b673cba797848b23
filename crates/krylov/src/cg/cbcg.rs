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
//! every outer step (measured: 1e-3 relative drift within a few hundred iterations on
//! msc04515, CG-equivalent iterations up to 2x CG's). Reduction 2 also carries
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
//! equals `S^T A S - ((AQ)^T S)^T B` in exact arithmetic: the Gram drift check below. Over
//! 200 runs on the 25 shared matrices (k = 4, 8, ranks 2 and 5) runs over 1.1 x CG + k went
//! from 3 to 0 with it, with 5% fewer SpMVs.
//!
//! Gram drift: reduction 1 forms `Q^T A Q` with the recurrence `AQ`; reduction 2 also
//! carries `S^T A S` (fresh SpMV outputs), from which the next Gram matrix follows by the
//! update `G' = S^T A S - W^T B` (as `cbcgr` forms it). When the reduced `Q^T (AQ)` and `G'`
//! differ by more than `GRAM_DRIFT_TOL` = 1e-8 relative, the step is not taken: the
//! refresh of `sstep::refresh` follows (true residual, `AQ` recomputed, one reduction in
//! place of reduction 1; a replacement). Measured on the 25 shared matrices with
//! condition number <= 1e8 (ranks 1, 3, 4, k = 4, 8, 12, Chebyshev/Newton): bcsstk08 at k = 8, 12
//! on 3 and 4 ranks stalled near 1e-7 (1.22-1.29 x CG) without it and is within
//! 1.1 x CG + k with it, in all 18 cbcg runs; cbcg's SpMVs over the sweep went from 1.092
//! to 1.112 x CG's (threshold 1e-10: 1.163 x, no fewer runs over; 1e-6: 1.096 x, one
//! bcsstk08 run over).
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
//! ill-conditioned matrices: on msc04515 (CG: 3412-3414 iterations on 1-8 ranks, with or
//! without RCM) cbcg at k = 4 needed up to 5108 CG-equivalent iterations in 32 runs
//! (Chebyshev and Newton, ranks 1-8, RCM or not) and 8 of them were over 1.1 x CG + k;
//! with the `B` above 5, with the smoothing as well 1 (3992, Newton, 8 ranks, RCM).
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
//! residual's Krylov space can hold fewer than k new directions; on generated 3-D Poisson
//! of order 512 at 1e-12, where CG ends at step 20, k = 8 took 32 CG-equivalent iterations
//! with the halving below and takes 24; k = 12 with the Newton basis took 36 and takes 24). With the monomial
//! basis only in the last few outer steps (`sstep::MR_WINDOW`): earlier its loss of rank is
//! the basis's conditioning, not a small Krylov space, and keeping k with fewer directions
//! doubled the CG-equivalent iterations of the shared-matrix sweep, 1.10 -> 2.02 x CG's.
//! Otherwise, with none left, or with a clearly negative pivot, the solve
//! restarts the outer step from
//! r with half the block size for the rest of the solve (`k/2` exchanges for the new
//! basis; `equivalent_iterations` then sums the block sizes used); at k = 1 it is a
//! [`crate::KrylovError::Breakdown`] naming `Q^T A Q`. NaN/Inf in any reduced value is a
//! breakdown at once. Options: `k`, `basis`, `tol`, `atol`, `max_iter` (CG-equivalent),
//! `history` (one entry per outer iteration), `replace_every`.

use castack_collectives::Communicator;

use super::smoothing::Smoother;
use super::sstep::{self, breakdown, check_finite, tri, Block, Check};
use super::{LoopEnd, System};
use crate::count::Phase;
use crate::device::Device;
use crate::dist::DistVec;
use crate::KrylovError;

/// One-line description for the registry.
pub(crate) const DESCRIPTION: &str =
    "block CG on an s-step basis (Chronopoulos-Gear with monomial): k SpMVs and 2 reductions per k steps";

const NAME: &str = "cbcg";

/// Relative difference between the reduced `Q^T (A Q)` (recurrence `A Q`) and the Gram
/// matrix by the update `S^T A S - W^T B` at which `cbcg` refreshes (a replacement).
const GRAM_DRIFT_TOL: f64 = 1e-8;

pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let k = sys.cfg.k;
    let mut r = sys.new_vec()?;
    let mut t = sys.new_vec()?;
    sys.ops.prepare(2)?;
    let [_, mut rw] = if x0_given {
        sys.true_residual(x, &mut r)?
    } else {
        sys.ops.copy(&sys.bhat, &mut r)?;
        super::norm_sums(sys, &r, 0)?;
        let mut s = [0.0; 2];
        sys.ops.reduce(&mut s)?;
        s
    };
    let basis = sstep::setup_basis(sys, &r, NAME)?;
    let mut xc = sys.new_vec()?;
    let (len1, len2) = (tri(k) + k, 2 * k * k + 3 + tri(k) + tri(2 * k) + 2 * k);
    let mut blk = Block::new(sys, basis, k, len1.max(len2))?;
    // The Gram matrix of the next block by the update S^T A S - W^T B (full k x k) and
    // its packed upper triangle: compared with the reduced Q^T (A Q) (Gram drift).
    let mut gupd = vec![0.0; k * k];
    let mut gup = vec![0.0; tri(k)];
    for kk in (0..).map(|i| k >> i).take_while(|&kk| kk > 0) {
        sys.ops.prepare(tri(kk) + kk)?;
        // The refresh (sstep::refresh) after a Gram drift or a failed factorisation.
        sys.ops.prepare(tri(kk) + kk + 2)?;
        sys.ops.prepare(2 * kk * kk + 3 + tri(kk))?;
        sys.ops.prepare(2 * kk * kk + 3 + 2 * tri(kk) + kk)?;
    }
    sys.ops.set_phase(Phase::Loop);

    blk.restart(sys, &r)?;
    let (mut outer, mut equivalent) = (0, 0);
    // CG-equivalent iterations since the last replacement; drift seen by reduction 2.
    let (mut since, mut drifted) = (0, false);
    // Whether a refresh has just reduced the Gram matrix and Q^T r (reduction 1 skipped).
    let mut gram_ready = false;
    // Whether `gupd` holds the updated Gram matrix of the current directions.
    let mut upd_ready = false;
    // The minimal-residual candidate in `xc` (its predicted residual norm) and the last
    // outer step's residual reduction factor (sstep::MR_WINDOW).
    let (mut cand, mut rate): (Option<f64>, f64) = (None, 1.0);
    let mut smooth = Smoother::new(sys, x, &r, rw)?;
    loop {
        check_finite(NAME, outer, "||r||", &[rw])?;
        let rnorm = rw.max(0.0).sqrt();
        // Minimal-residual smoothing (cg/smoothing.rs): when the smoothed residual meets
        // the tolerance, go on from the smoothed iterate, checked like a convergence claim.
        let smoothed = smooth.take_over(sys, x)?;
        if smoothed {
            // The candidate was built on the old x.
            cand = None;
        }
        if smoothed
            || cand.is_some()
            || sys.meets(rnorm)
            || equivalent >= sys.cfg.max_iter
            || drifted
            || sstep::replacement_due(sys.cfg.replace_every, since)
        {
            let ev = match cand.take() {
                Some(pred) => sstep::check_candidate(
                    sys, &blk, x, &mut xc, &mut r, &mut t, NAME, outer, equivalent, pred,
                )?,
                None => {
                    let claimed = if smoothed { smooth.norm() } else { rnorm };
                    sstep::check_true(sys, x, &mut r, &mut t, NAME, outer, equivalent, claimed)?
                }
            };
            match ev {
                Check::Done(end) => return Ok(end),
                Check::Replaced([_, w]) => {
                    // r is the true residual now; keep the directions Q (their conjugacy
                    // is what makes the method converge) and make A Q exact again.
                    rw = w;
                    blk.recompute_aq(sys)?;
                    (since, drifted, upd_ready) = (0, false, false);
                    if smoothed {
                        smooth.start(sys, x, &r, rw)?;
                    }
                }
            }
        }
        // Reduction 1: Q^T A Q (upper triangle) and Q^T r (unless a refresh just
        // delivered them).
        let kk = blk.k;
        let mut pack = std::mem::take(&mut blk.pack);
        let mut gram_drifted = false;
        if !gram_ready {
            let (n1, n2) = (tri(kk), tri(kk) + kk);
            blk.local_qaq(sys, 0)?;
            blk.local_qr(sys, &r, n1)?;
            sys.ops.reduce(&mut pack[..n2])?;
            check_finite(NAME, outer, "Q^T A Q, Q^T r", &pack[..n2])?;
            blk.set_gram(&pack[..n1]);
            blk.qr[..kk].copy_from_slice(&pack[n1..n2]);
            if upd_ready && since > 0 {
                sstep::pack_upper(&gupd[..kk * kk], kk, &mut gup[..n1]);
                gram_drifted = sstep::drift(&gup[..n1], &pack[..n1]) > GRAM_DRIFT_TOL;
            }
        }
        (gram_ready, upd_ready) = (false, false);
        let factored = if gram_drifted {
            Err(None)
        } else {
            blk.factor().map_err(Some)
        };
        if let Err(e) = factored {
            blk.pack = pack;
            if since > 0 {
                // A drifted A Q can make Q^T A Q inaccurate or indefinite: refresh it with
                // the true residual (a replacement, one reduction in place of reduction 1)
                // and halve k only when the recomputed Gram matrix fails too.
                let rnorm = rw.max(0.0).sqrt();
                let ev = sstep::refresh(
                    sys, &mut blk, x, None, &mut r, &mut t, NAME, outer, equivalent, rnorm,
                )?;
                match ev {
                    Check::Done(end) => return Ok(end),
                    Check::Replaced([_, w]) => {
                        rw = w;
                        (since, drifted, gram_ready) = (0, false, true);
                    }
                }
                continue;
            }
            // Right after a refresh (monomial basis: in the last outer steps only): go on
            // with the directions that are not numerically dependent; else halve k.
            match blk.keep_independent(sys, rw.max(0.0).sqrt(), rate) {
                Ok(true) => pack = std::mem::take(&mut blk.pack),
                kept => {
                    if blk.halve() {
                        blk.restart(sys, &r)?;
                        continue;
                    }
                    let pivot = kept.err().or(e).map_or(f64::NAN, |e| e.pivot);
                    return Err(breakdown(NAME, outer, "Q^T A Q (Cholesky pivot)", pivot));
                }
            }
        }
        blk.solve_coef();
        let rw_old = rw;
        let mr = sstep::mr_wanted(sys, rw.max(0.0).sqrt(), rate);
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
        blk.step(sys, x, &mut r, 2 * m)?;
        blk.build_basis(sys, &r)?;
        blk.local_qas(sys, 0)?;
        blk.local_qas_exact(sys, m)?;
        blk.local_sas(sys, 2 * m + 2)?;
        smooth.local_sr(sys, &r, sas_end)?;
        if mr {
            blk.local_mr(sys, &r, base)?;
        }
        sys.ops.reduce(&mut pack[..end])?;
        check_finite(NAME, outer, "Q^T A S, r^T r", &pack[..end])?;
        drifted = sstep::drift(&pack[..m], &pack[m..2 * m]) > sstep::DRIFT_TOL;
        // B from Q^T (A S), the fresh SpMV outputs, not from the recurrence (A Q)^T S: the
        // new directions S - Q B are then conjugate to Q under A itself (module docs).
        blk.w[..m].copy_from_slice(&pack[m..2 * m]);
        rw = pack[2 * m + 1];
        rate = (rw_old / rw).sqrt();
        smooth.update(sys, x, &r, pack[sas_end], rw)?;
        if mr {
            if let Some(pred) = blk.mr_predict(&pack[base..end], rw) {
                if sys.meets(pred.sqrt()) {
                    blk.mr_point(sys, x, &mut xc)?;
                    cand = Some(pred.sqrt());
                }
            }
        }
        blk.solve_b();
        // The next Gram matrix by the update (S - Q B)^T A (S - Q B) = S^T A S - W^T B
        // (conjugacy of the new block to the old), W = (A Q)^T S: a check of the reduced
        // Q^T (A Q) of the next reduction 1, whose A Q is the drifting recurrence.
        sstep::gram_update(
            &pack[2 * m + 2..sas_end],
            &pack[..m],
            &blk.w[..m],
            kk,
            &mut gupd,
        );
        upd_ready = true;
        blk.pack = pack;
        blk.new_directions(sys)?;
        outer += 1;
        equivalent += kk;
        since += kk;
        sys.record(equivalent, rw.max(0.0).sqrt());
    }
}
