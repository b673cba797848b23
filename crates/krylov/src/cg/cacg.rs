//! `cacg` — communication-avoiding CG (s-step CG with coordinate recurrences).
//!
//! References: M. Hoemmen, "Communication-avoiding Krylov subspace methods", PhD thesis,
//! UC Berkeley, 2010, ch. 5; E. Carson, "Communication-avoiding Krylov subspace methods in
//! theory and practice", PhD thesis, UC Berkeley, 2015, Alg. 2. Same iterates as CG in
//! exact arithmetic.
//!
//! ```text
//! r0 = b - A x0;  p = r0
//! outer step (s = cfg.k):
//!   P = basis(p, s)   (s + 1 columns, s SpMVs)      R = basis(r, s - 1)  (s columns, s - 1 SpMVs)
//!   Y = [P | R];  A Y' = Y Bm, Bm = diag(T_P, T_R) padded by a zero column per block
//!   [ONE reduction: G = Y^T Y (upper triangle), ||r||_w^2, (s, r)_w of the smoothing
//!                   (near the target also Gw = Y^T W Y (upper triangle), (s, Y)_w)]
//!   s' = the largest s' <= s with kappa([P_0..P_s' | R_0..R_s'-1]) <= 1e6 (from G);
//!        s := s' for this step (G, Bm restricted to those columns)
//!   p' = e_1;  r' = e_{s+2};  x' = 0                (coordinates of length 2s + 1)
//!   s times:  a = (r'^T G r') / (p'^T G Bm p');  x' += a p';  r' -= a Bm p'
//!             beta = (r'^T G r')_new / (r'^T G r');  p' = r' + beta p'
//!             (near the target: ||r||_w = sqrt(r'^T Gw r'); smooth x + Y x', Y r')
//!   x += Y x';  r = Y r';  p = Y p'
//! ```
//!
//! Per outer step: 2s - 1 SpMVs (each one depth-1 halo exchange; with `mpk` the two bases
//! go through the matrix powers kernel with ONE depth-s exchange: the ghost values of p and
//! r travel together, one message per neighbour, see
//! [`castack_linalg::dist::MatrixPowers::apply_pair`]; bit-identical to exchanging them apart),
//! ONE reduction of `(2s + 1)(2s + 2)/2 + 2` values (near the target
//! `(2s + 1)(2s + 2) + 2s + 3`),
//! s CG-equivalent iterations, `O(s^2)` dense work per inner iteration on coordinates and
//! `3 (2s + 1)` axpys to map back. Work vectors: x, r, p, t (true residual), s + 1 columns
//! of `P` and their s images, s columns of `R` and their s - 1 images (the images are the
//! SpMV outputs; the change of basis `T` comes from [`crate::basis::SStepBasis`]).
//!
//! Residual monitoring: `r'^T G r'` estimates `||r||^2` in the scaled norm after each
//! inner iteration. Far from the target the original-norm estimate is that times
//! `||r||_w^2 / ||r||^2` of the outer step's starting residual (exact when
//! unpreconditioned). Near it (the residual within `WIDE_WINDOW` = 10 times the last
//! step's reduction factor of the target) the reduction also carries `Gw = Y^T W Y`, `W`
//! the weights of the original norm, and the estimate is `sqrt(r'^T Gw r')`, exact in
//! exact arithmetic. With Jacobi the ratio drifts within a step where the diagonal varies
//! by orders of magnitude, enough to miss a check (measured: `README.md` here, *Measured*).
//! `history` gets one entry per CG-equivalent iteration from the estimates. When the
//! estimate meets the tolerance the outer step ends there (x, r, p formed from the
//! coordinates so far) and the true
//! residual is checked (one SpMV, one reduction): convergence is declared only on it. When
//! it misses, r is replaced by the true residual and the directions restart (p = r),
//! counted in `residual_replacements`. The exact `||r||_w^2` of the starting residual
//! rides in every Gram reduction; when it already meets the tolerance (the estimate
//! missed), the step does no inner iterations and goes to the check.
//!
//! Minimal-residual smoothing (`cg/smoothing.rs`, as in `cbcg` and `cbcgr`). Far from the
//! target the outer-step iterates are smoothed, `(s, r)_w` riding in the Gram reduction
//! (one value more, no message; one pass for the dot and two for the updates per outer
//! step); when the smoothed residual meets the tolerance, the step's inner iterations are
//! skipped. Near the target (the steps that carry `Gw`) every inner iterate is smoothed,
//! in coordinates ([`super::smoothing::Coords`]: the smoothed residual is
//! `gamma s + Y c`, needing `Gw` and the `2s + 1` values `(s, Y)_w`), and the step ends
//! at the first inner iterate where the smoothed residual meets the tolerance; the pair
//! is formed once per step (`2 (2s + 1)` axpys and two passes). Either way the method goes
//! on from the smoothed iterate, checked like a convergence claim: it passes, or counts as
//! a missed check (r replaced, p = r, the smoothing restarted there). It ends the hovering
//! of the residual near the tolerance where CG's own residual hovers; against smoothing
//! the outer-step iterates only with the ratio estimate it removed the missed checks and
//! shortened most runs (measured: `README.md` here, *Measured*).
//!
//! Adaptive s (`BASIS_COND_MAX`): each outer step runs its inner iterations on the leading
//! columns of the bases whose condition number (columns scaled to unit length) is at most
//! 1e6, `s' <= s` of them, found from the Gram matrix the step reduces anyway: one
//! Cholesky factorisation of `G` scaled to unit diagonal, columns ordered `P0, P1, R0, P2,
//! R1, ...` so that each candidate is a leading block, and a power/inverse-iteration
//! estimate per candidate (`O(s^2)` flops each; no message, no allocation). The basis is
//! still built with s (its unused columns are wasted SpMVs), so the message counts below
//! do not change; a step contributes at most s' CG-equivalent iterations. In the spirit of
//! Carson's adaptive s-step CG (SIAM J. Matrix Anal. Appl. 39(3), 2018), which bounds
//! `kappa(Y)` per block for accuracy; here a fixed bound against the convergence delay
//! that rounding amplified by `kappa(Y)` causes. 1e6 is the largest power of ten that ends
//! that delay, and elsewhere it changes little (measured: `README.md` here, *Measured*).
//!
//! Setup as `cbcg`: `||r0||` (1 reduction; with `x0` also 1 SpMV) and, for the Newton and
//! Chebyshev bases, the spectral estimate of [`crate::eig`] (2m reductions, m SpMVs).
//!
//! Counting in the loop (exact): `iterations` = outer steps begun = Gram reductions;
//! `reductions = iterations + checks`, `checks = residual_replacements + 1` (a check of a
//! smoothed iterate included; without
//! `replace_every`; with it see below: each periodic replacement adds one exchange);
//! `halo_exchanges = sum over outer steps of (2 s_i - 1) + checks`, i.e.
//! `(2s - 1) iterations + checks` without fallback (with `mpk`: 1 per outer step instead
//! of 2s - 1, so `halo_exchanges = iterations + checks` for every s, fallback or not);
//! `equivalent_iterations` = inner
//! iterations accepted (at most `s * iterations`).
//!
//! Breakdown: an inner `p'^T G Bm p' <= 0`, a negative `r'^T G r'`, or NaN/Inf (the basis
//! lost too much accuracy, or A is not SPD) discards the step's inner iterations and
//! retries the outer step from the same x, r, p with the step's s' halved as s for the
//! rest of the solve;
//! at s = 1 (plain CG with one reduction) it is a [`crate::KrylovError::Breakdown`] naming
//! `cacg`, the outer step and the quantity. NaN/Inf in the reduced values is a breakdown
//! at once. Options: `k` (= s), `basis`, `tol`, `atol`, `max_iter` (CG-equivalent),
//! `history`, `replace_every`.
//!
//! Periodic residual replacement (`replace_every = Some(R)`): at the first outer-step
//! boundary where at least R CG-equivalent iterations were accepted since the last
//! replacement (periodic, or after a missed check; a step that ends in a check resets the
//! count instead), r is recomputed as the true residual `b̂ - Â x̂` and the directions
//! restart (p = r), counted in `residual_replacements`. Cost: ONE SpMV (one halo exchange)
//! and NO reduction: the exact `||r||_w^2` of the new r rides in the step's Gram reduction
//! anyway. So with `q` periodic replacements: `halo_exchanges` grows by `q` and
//! `residual_replacements = q + (checks - 1)`, `reductions = iterations + checks` as
//! before.
//!
//! The reduction goes through the split-phase pair (begun and finished at once: one
//! counted, blocking reduction), whose persistent plan is cached for every length, so the
//! loop never allocates even where the fused length exceeds the blocking plans' cache.
//!
//! ## With a preconditioner (`bjacobi_ic0`, `chebyshev`, an embedder's)
//!
//! When the loop applies `M^-1` (`sys.pc`), the method runs left-preconditioned CA-CG
//! (Carson's thesis above: preconditioned CA-CG, whose Gram matrix `Ỹ^T Y` couples a
//! basis of the preconditioned operator `M^-1 Â` with its `M`-side counterpart, a basis
//! of `Â M^-1`; Hoemmen's thesis, ch. 5, treats left-preconditioned CA-CG likewise): the
//! coordinate form of preconditioned CG (Saad, Alg. 9.1; `Applied` in `cg.rs`).
//! As there, `r` stays the scaled system's own residual, so the stopping tests, the
//! true-residual checks and replacements, the weighted norms, the smoothing and what is
//! recorded are those above; `z = M^-1 r` and `M p` ride beside it.
//!
//! ```text
//! r0 = b̂ - Â x0;  z = M^-1 r0;  p = z;  p̃ = r0                     (p̃ = M p)
//! outer step:
//!   P = basis(M^-1 Â; p, s)   Z = basis(M^-1 Â; z, s - 1)   (2s - 1 SpMVs, 2s - 1 M^-1;
//!                                                           the images Â y_j are kept)
//!   P̃ = the same recurrence from p̃, R̃ = from r, each step fed Â y_j in place of
//!       M^-1 Â y_j                                           (no SpMV, no M^-1)
//!   Y = [P | Z], Ỹ = [P̃ | R̃] = M Y;  M^-1 Â Y' = Y Bm  and  Â Y' = Ỹ Bm
//!   [ONE reduction: G = Ỹ^T Y = Y^T M Y (upper triangle), ||r||_w^2, (s, r)_w
//!                   (near the target also Gw = Ỹ^T W Ỹ (upper triangle), (s, Ỹ)_w)]
//!   p' = e_1;  c' = e_{s+2};  x' = 0          (z = Y c' and r = Ỹ c': ONE coordinate vector)
//!   s times:  a = (c'^T G c') / (p'^T G Bm p');  x' += a p';  c' -= a Bm p'
//!             beta = (c'^T G c')_new / (c'^T G c');  p' = c' + beta p'
//!   x += Y x';  z = Y c';  p = Y p';  r = Ỹ c';  p̃ = Ỹ p'
//! ```
//!
//! Derivation: the basis recurrence is linear, so if `y_{j+1}` comes from `M^-1 Â y_j`,
//! `y_j`, `y_{j-1}`, then the same coefficients applied to `Â y_j = M (M^-1 Â y_j)`,
//! `M y_j`, `M y_{j-1}` give `M y_{j+1}`: the `M`-side basis costs `2s - 1` vector passes
//! from the images the SpMVs of `Y` left (`System::build_basis` keeps `Â y_j`),
//! where building it as a basis of `Â M^-1` would cost another `2s - 1` applications of
//! `M^-1`. Then `c'^T G c' = (Ỹ c')^T (Y c') = r^T z` and `p'^T G Bm p' = (M p)^T M^-1 Â p
//! = p^T Â p`: PCG's `alpha` and `beta`. `G = Y^T M Y` is symmetric in exact arithmetic
//! and only its upper triangle is reduced, so the reduction has the same length as
//! without a preconditioner. The estimates carry over with `r^T z` in place of `r^T r`
//! (far from the target `||r||_w^2 / r^T z` of the step's start converts; near it `Gw`
//! is exact); the adaptive s bounds the condition number of `M^{1/2} Y` (that of `G`), and
//! the smoothing combines `x` from `Y` and its residual from `Ỹ`
//! ([`super::smoothing::Smoother::absorb`]). A replacement (a missed check, or
//! periodic) sets `r` to the true residual, `z = M^-1 r` (one application), `p = z`,
//! `p̃ = r`. The Newton and Chebyshev parameters come from the spectrum of `M^-1 Â`:
//! `sstep::setup_basis_from` runs the warm-up as preconditioned CG from the `z` it has. Without a
//! preconditioner nothing above runs: the unpreconditioned method is unchanged (the same
//! operations in the same order).
//!
//! Per outer step with a preconditioner: 2s - 1 SpMVs (depth-1 exchanges; no `mpk`,
//! which the configuration refuses with a preconditioner), 2s - 1 applications of `M^-1`
//! (`chebyshev`: `D` SpMVs and exchanges each, `D` the degree; `bjacobi_ic0`: none), ONE
//! reduction of the length above, `2s - 1` basis passes and 2 copies for `Ỹ`, the Gram
//! block of two lists instead of one, and two block linear combinations (`3 (2s + 1)` and
//! `2 (2s + 1)` terms) to map back. Work vectors besides the ones above: `z`, `p̃`, the
//! `2s + 1` columns of `Ỹ`, `System::pc_tmp` and the preconditioner's own.
//!
//! Counting with a preconditioner (`m` warm-up steps: `max(s, 10)` for Newton and
//! Chebyshev, fewer only when the warm-up converges first; 0 for monomial; `q` periodic
//! replacements; without a fallback of s, else `(2s - 1) iterations` is the sum of
//! `2 s_i - 1` over the outer steps): `reductions = iterations + checks` as above;
//! `precond_applies = 1 + (m - 1)^+ + (2s - 1) iterations + residual_replacements` (setup:
//! `z0`, then one per warm-up step but the last); `halo_exchanges = (2s - 1) iterations +
//! checks + q + D ((2s - 1) iterations + residual_replacements)`; setup: the warm-up's
//! `m` SpMVs, `2m` reductions and `(m - 1)^+` applications (`D` exchanges each) on top of
//! `||r0||`, `z0` and the preconditioner's own construction.
//!
//! With either preconditioner cacg stays within 1.1 x preconditioned cg + s
//! (`tests/it/precond_cacg.rs`; measured: `README.md` here, *Measured*).

use castack_collectives::Communicator;

use super::smoothing::{Coords, Smoother};
use super::sstep::{self, breakdown, check_finite, tri, Check};
use super::{LoopEnd, System};
use crate::basis::SStepBasis;
use crate::KrylovError;
use castack_linalg::count::Phase;
use castack_linalg::device::{Concat, Device, GramShape};
use castack_linalg::dist::DistVec;

const NAME: &str = "cacg";

/// Values in the fused reduction for block size `s`: `G` upper triangle, `||r||_w^2` and
/// the smoothing's `(s, r)_w` (near the target [`fused_wide_len`]).
fn fused_len(s: usize) -> usize {
    tri(2 * s + 1) + 2
}

/// How near the target an outer step reduces `Gw` and `(s, Y)_w` too: when the residual
/// before it is within `WIDE_WINDOW` times the last step's reduction factor of the target
/// ([`sstep::near_target`]). Over the 25 shared matrices (s = 4, 8, 12; Newton and
/// Chebyshev; ranks 1, 3, 4; against the smoothing of outer-step iterates alone) a window
/// of 1 made 170 of 450 runs shorter, 10 made 335 and 100 made 351; a wide step costs
/// about twice the local memory traffic of a plain one, so the window is kept small.
const WIDE_WINDOW: f64 = 10.0;

/// The largest condition number of the basis an outer step runs its inner iterations on:
/// `kappa(Y')` in the 2-norm, the columns of `Y' = [P' | R']` scaled to unit length, where
/// `P'` holds the first `s' + 1` columns of `P` and `R'` the first `s'` of `R` (with `p = r`,
/// at the start and after a replacement, `R` repeats `P` and `kappa(P')` counts). Each
/// step takes the largest `s' <= s` within it ([`Workspace::adapt`]), from the Gram
/// matrix it reduced anyway: no extra message, the same SpMVs (the unused columns are
/// wasted work), and `s'` CG-equivalent iterations at most.
///
/// Why: in finite precision s-step CG behaves like CG with its rounding errors amplified
/// by the basis condition number, which delays convergence (Carson, "The adaptive s-step
/// conjugate gradient method", SIAM J. Matrix Anal. Appl. 39(3), 2018, derives the same
/// kind of per-block constraint on `kappa(Y)` from the residual gap, for accuracy). With
/// s = 12 on bcsstk08 (condition number 2.6e7) `kappa(Y)` reaches 2e6-9e6 (Chebyshev) in
/// most steps and the runs took 136-168 CG-equivalent iterations against CG's 130 over
/// ranks 1, 3, 4 (Newton and Chebyshev), two of them over 1.1 x CG + s. With the cap the
/// six take 133-134 with 12-14 outer steps instead of 12-15.
const BASIS_COND_MAX: f64 = 1e6;

/// Power and inverse iteration steps of the condition estimate of [`BASIS_COND_MAX`].
const COND_ITERS: usize = 12;

/// The fused reduction near convergence: also `Gw = Y^T W Y` (upper triangle) and
/// `(s, Y)_w` (`W` the weights of the original-system norm, `s` the smoothed residual),
/// for exact residual estimates and the smoothing of every inner iterate.
fn fused_wide_len(s: usize) -> usize {
    fused_len(s) + tri(2 * s + 1) + 2 * s + 1
}

/// The outer-step workspace, sized for the configured s (a fallback only shrinks it).
struct Workspace<D: Device> {
    /// Current s.
    s: usize,
    basis: SStepBasis,
    /// Columns of `P` (s + 1) and their images (s).
    pv: Vec<DistVec<D>>,
    pa: Vec<DistVec<D>>,
    /// Columns of `R` (s) and their images (s - 1, at least one slot). With a
    /// preconditioner (`pre`) the basis of `M^-1 Â` from `z = M^-1 r` instead.
    rv: Vec<DistVec<D>>,
    ra: Vec<DistVec<D>>,
    /// With a preconditioner: the M-side columns `Ỹ = [P̃ | R̃] = M Y`, `P̃` (s + 1) from
    /// `M p`, `R̃` (s) from `r = M z`, made from the images by the basis recurrence
    /// ([`Workspace::build_m_side`]). Empty without one.
    pt: Vec<DistVec<D>>,
    rt: Vec<DistVec<D>>,
    /// Whether the loop's preconditioner is applied (the preconditioned form).
    pre: bool,
    /// `G = Y^T Y`, full, stride `2s + 1`.
    g: Vec<f64>,
    /// `Gw = Y^T W Y`, full, stride `2s + 1`; reduced near convergence only (`wide`).
    gw: Vec<f64>,
    /// `r'^T Gw r'` of the last [`Workspace::estimate`] (with `wide`).
    rw: f64,
    /// Whether this step reduced `Gw` and `(s, Y)_w`.
    wide: bool,
    /// `(s, Y)_w`, the smoothed residual against the columns (with `wide`).
    sy: Vec<f64>,
    /// The smoothing in coordinates during the inner iterations (with `wide`).
    co: Coords,
    /// `Bm`, full, stride `2s + 1`.
    bm: Vec<f64>,
    /// Change-of-basis scratch, `(s + 1) s`.
    t: Vec<f64>,
    /// Coordinates and scratch (2s + 1 each).
    pc: Vec<f64>,
    rc: Vec<f64>,
    xc: Vec<f64>,
    bp: Vec<f64>,
    gv: Vec<f64>,
    /// Original-norm residual estimates of the step's inner iterations (s).
    est: Vec<f64>,
    /// The inner iterations' CG coefficients alpha and beta (s each; `crate::ritz`).
    ca: Vec<f64>,
    cb: Vec<f64>,
    /// Reduction results (host).
    pack: Vec<f64>,
    /// The coordinates `x'`, `r'`, `p'` interleaved per column (the block linear
    /// combination's coefficients, `3 (2s + 1)`).
    xrp: Vec<f64>,
    /// The scaled Gram matrix's factor and the estimate's scratch ([`Workspace::adapt`]).
    cl: Vec<f64>,
    cv: Vec<f64>,
    cw: Vec<f64>,
}

impl<D: Device> Workspace<D> {
    fn new<C: Communicator + ?Sized>(
        sys: &mut System<'_, C, D>,
        basis: SStepBasis,
        s: usize,
        pre: bool,
    ) -> Result<Self, KrylovError> {
        let ny = 2 * s + 1;
        let (npt, nrt) = if pre { (s + 1, s) } else { (0, 0) };
        // With a preconditioner a Gram block pairs two lists of ny columns.
        let lists = if pre { 2 * ny + 3 } else { ny + 3 };
        sys.ops.reserve(fused_wide_len(s), lists)?;
        let mut ws = Self {
            s,
            basis,
            pv: sys.new_vecs(s + 1)?,
            pa: sys.new_vecs(s)?,
            rv: sys.new_vecs(s)?,
            ra: sys.new_vecs(s.max(2) - 1)?,
            pt: sys.new_vecs(npt)?,
            rt: sys.new_vecs(nrt)?,
            pre,
            g: vec![0.0; ny * ny],
            gw: vec![0.0; ny * ny],
            rw: 0.0,
            wide: false,
            sy: vec![0.0; ny],
            co: Coords::new(ny),
            bm: vec![0.0; ny * ny],
            t: vec![0.0; (s + 1) * s],
            pc: vec![0.0; ny],
            rc: vec![0.0; ny],
            xc: vec![0.0; ny],
            bp: vec![0.0; ny],
            gv: vec![0.0; ny],
            est: vec![0.0; s],
            ca: vec![0.0; s],
            cb: vec![0.0; s],
            pack: vec![0.0; fused_wide_len(s)],
            xrp: vec![0.0; 3 * ny],
            cl: vec![0.0; ny * ny],
            cv: vec![0.0; ny],
            cw: vec![0.0; ny],
        };
        ws.set_bm();
        Ok(ws)
    }

    fn ny(&self) -> usize {
        2 * self.s + 1
    }

    /// `Bm = diag(T_P, T_R)` for the current s (each block padded by a zero last column:
    /// the last column of `P` and of `R` has no image).
    fn set_bm(&mut self) {
        let (s, ny) = (self.s, self.ny());
        let bm = &mut self.bm[..ny * ny];
        bm.fill(0.0);
        self.basis.change_of_basis(s, &mut self.t);
        for i in 0..=s {
            for j in 0..s {
                bm[i * ny + j] = self.t[i * s + j];
            }
        }
        let sr = s - 1;
        self.basis.change_of_basis(sr, &mut self.t);
        for i in 0..s {
            for j in 0..sr {
                bm[(s + 1 + i) * ny + s + 1 + j] = self.t[i * sr + j];
            }
        }
    }

    /// The largest `s' <= s` whose basis `Y'` has a condition number within
    /// [`BASIS_COND_MAX`] (at least 1), from `G`; `p_is_r`: `R` repeats `P` (the
    /// condition number of `P'` counts). One Cholesky factorisation of `G` scaled to unit
    /// diagonal, its columns ordered `P0, P1, R0, P2, R1, ...` so that every candidate is
    /// a leading block, then an estimate per candidate tried, largest first.
    fn adapt(&mut self, p_is_r: bool) -> usize {
        let (s, ny) = (self.s, self.ny());
        let m = if p_is_r { s + 1 } else { ny };
        let col = |k: usize| match k {
            _ if p_is_r || k == 0 => k,
            _ if k % 2 == 1 => k.div_ceil(2),
            _ => s + k / 2,
        };
        let floor = 1.0 / (BASIS_COND_MAX * BASIS_COND_MAX);
        let ok = castack_linalg::dense::scaled_cholesky(
            &self.g[..ny * ny],
            ny,
            col,
            m,
            &mut self.cl[..m * m],
            floor,
        );
        for sp in (2..=s).rev() {
            let mp = if p_is_r { sp + 1 } else { 2 * sp + 1 };
            if mp > ok {
                continue;
            }
            let c = castack_linalg::dense::condition_estimate(
                &self.cl[..m * m],
                m,
                mp,
                COND_ITERS,
                &mut self.cv,
                &mut self.cw,
            );
            if c.sqrt() <= BASIS_COND_MAX {
                return sp;
            }
        }
        1
    }

    /// Restrict the step to `sp < s`: `G` (and `Gw`, `(s, Y)_w` when `wide`) compacted in
    /// place to the columns `P0..P_sp, R0..R_{sp-1}`, `s = sp`, `Bm` for it (the leading
    /// block of the basis's change of basis: the first columns of a basis are the basis of
    /// that length).
    fn shrink(&mut self, sp: usize, smooth_norm_sq: f64) {
        let (s, ny) = (self.s, self.ny());
        let m = 2 * sp + 1;
        let col = |c: usize| if c <= sp { c } else { s + c - sp };
        // Old positions grow with new ones and are never below them: in place is safe.
        let compact = |g: &mut [f64]| {
            for i in 0..m {
                for j in 0..m {
                    g[i * m + j] = g[col(i) * ny + col(j)];
                }
            }
        };
        compact(&mut self.g);
        if self.wide {
            compact(&mut self.gw);
            for c in 0..m {
                self.sy[c] = self.sy[col(c)];
            }
            self.co.start(m, smooth_norm_sq);
        }
        self.s = sp;
        self.set_bm();
    }

    /// The columns `Y = [P_0..P_s | R_0..R_{s-1}]` of the current s.
    fn cols(&self) -> Concat<'_, [DistVec<D>], [DistVec<D>]> {
        let s = self.s;
        Concat(&self.pv[..=s], &self.rv[..s])
    }

    /// The columns the residual is a combination of: `Y` without a preconditioner, the
    /// M-side `Ỹ = [P̃_0..P̃_s | R̃_0..R̃_{s-1}]` with one.
    fn cols_r(&self) -> Concat<'_, [DistVec<D>], [DistVec<D>]> {
        let s = self.s;
        if self.pre {
            Concat(&self.pt[..=s], &self.rt[..s])
        } else {
            self.cols()
        }
    }

    /// With a preconditioner, after [`Workspace::build`] from `p` and `z`: the M-side
    /// columns `Ỹ = M Y` from `pm = M p` and `r = M z`. `M^-1 Â y_j = y_{j+1} T`-wise means
    /// `Â y_j = M y_{j+1} T`-wise: the basis recurrence applied to the image `Â y_j`
    /// (already in `pa`, `ra`) in place of `M^-1 Â y_j`, on the M-side columns, gives
    /// `M y_{j+1}` (every step is linear in its three inputs). No SpMV, no application of
    /// `M^-1`: `2s - 1` vector passes.
    fn build_m_side<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        pm: &DistVec<D>,
        r: &DistVec<D>,
    ) -> Result<(), KrylovError> {
        let s = self.s;
        sys.ops.copy(pm, &mut self.pt[0])?;
        sys.ops.copy(r, &mut self.rt[0])?;
        let n = sys.ops.n();
        for (cols, imgs, k) in [(&mut self.pt, &self.pa, s), (&mut self.rt, &self.ra, s - 1)] {
            for j in 0..k {
                let (done, rest) = cols.split_at_mut(j + 1);
                let prev = j.checked_sub(1).map(|i| done[i].raw());
                sys.ops.basis_step(
                    n,
                    self.basis.step(j),
                    imgs[j].raw(),
                    done[j].raw(),
                    prev,
                    rest[0].raw_mut(),
                )?;
            }
        }
        Ok(())
    }

    /// `P = basis(p, s)`, `R = basis(r, s - 1)`: 2s - 1 SpMVs (2s - 1 depth-1 exchanges,
    /// or with the matrix powers kernel ONE depth-s exchange carrying p and r together).
    fn build<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        p: &DistVec<D>,
        r: &DistVec<D>,
    ) -> Result<(), KrylovError> {
        sys.ops.copy(p, &mut self.pv[0])?;
        sys.ops.copy(r, &mut self.rv[0])?;
        let (p, r) = (
            [&mut self.pv[..], &mut self.pa],
            [&mut self.rv[..], &mut self.ra],
        );
        sys.build_basis_pair(&self.basis, self.s, p, r)
    }

    /// Local upper triangle of `Y^T Y` and `||r||_w^2` into the reduction slots; when
    /// `self.wide`, the upper triangle of `Y^T W Y` after them, from `fused_len(s)` on.
    fn local_gram<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
    ) -> Result<(), KrylovError> {
        let ny = self.ny();
        if self.pre {
            // G = Ỹ^T Y = Y^T M Y (symmetric in exact arithmetic: its upper triangle).
            sys.ops
                .gram(&self.cols_r(), &self.cols(), GramShape::Upper, None, 0)?;
            sys.ops.wnorm(&self.rt[0], &sys.w, tri(ny))?;
            if self.wide {
                let at = fused_len(self.s);
                sys.ops
                    .gram_self(&self.cols_r(), GramShape::Upper, Some(&sys.w), at)?;
            }
            return Ok(());
        }
        sys.ops.gram_self(&self.cols(), GramShape::Upper, None, 0)?;
        sys.ops.wnorm(&self.rv[0], &sys.w, tri(ny))?;
        if self.wide {
            let at = fused_len(self.s);
            sys.ops
                .gram_self(&self.cols(), GramShape::Upper, Some(&sys.w), at)?;
        }
        Ok(())
    }

    /// `r'^T G r'` (`weighted`: `r'^T Gw r'`).
    fn gram_norm_r(&mut self, weighted: bool) -> f64 {
        let ny = self.ny();
        let m = if weighted { &self.gw } else { &self.g };
        matvec(m, ny, &self.rc, &mut self.gv);
        self.rc[..ny]
            .iter()
            .zip(&self.gv[..ny])
            .map(|(a, b)| a * b)
            .sum()
    }

    /// The original-norm residual estimate of the coordinates `r'`: exact in exact
    /// arithmetic when the step reduced `Gw` (`r'^T Gw r'`, leaving `Gw r'` in `gv`), else
    /// `r'^T G r'` (`rr`) times `ratio`.
    fn estimate(&mut self, rr: f64, ratio: f64) -> f64 {
        if self.wide {
            self.rw = self.gram_norm_r(true);
            self.rw.max(0.0).sqrt()
        } else {
            (rr * ratio).max(0.0).sqrt()
        }
    }

    /// With `wide`: smooth with the inner iterate `x0 + Y x'`, `Y r'` (right after
    /// [`Workspace::estimate`]); whether the smoothed residual meets the tolerance.
    fn smooth_inner<C: Communicator + ?Sized>(&mut self, sys: &System<'_, C, D>) -> bool {
        if !self.wide {
            return false;
        }
        let ny = self.ny();
        self.co.update(
            &self.xc[..ny],
            &self.rc[..ny],
            &self.gv[..ny],
            self.rw,
            &self.sy[..ny],
        );
        sys.meets(self.co.norm())
    }

    /// `x += Y x'`, `r = Y r'`, `p = Y p'`: one block linear combination reading every
    /// column once (zero coefficients skip their column).
    fn combine<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        p: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        let ny = self.ny();
        for c in 0..ny {
            self.xrp[3 * c] = self.xc[c];
            self.xrp[3 * c + 1] = self.rc[c];
            self.xrp[3 * c + 2] = self.pc[c];
        }
        sys.ops.fill(r, 0.0)?;
        sys.ops.fill(p, 0.0)?;
        let mut dsts = [x, r, p];
        let s = self.s;
        let cols = Concat(&self.pv[..=s], &self.rv[..s]);
        Ok(sys
            .ops
            .lincomb_block(&self.xrp[..3 * ny], &cols, &mut dsts[..])?)
    }

    /// With a preconditioner: `x += Y x'`, `z = Y r'`, `p = Y p'` (one block linear
    /// combination over `Y`) and `r = Ỹ r'`, `pm = Ỹ p'` (one over `Ỹ`): `r` and `z` share
    /// their coordinates, as `p` and `M p` do.
    #[allow(clippy::too_many_arguments)]
    fn combine_pre<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
        r: &mut DistVec<D>,
        p: &mut DistVec<D>,
        z: &mut DistVec<D>,
        pm: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        let (s, ny) = (self.s, self.ny());
        for c in 0..ny {
            self.xrp[3 * c] = self.xc[c];
            self.xrp[3 * c + 1] = self.rc[c];
            self.xrp[3 * c + 2] = self.pc[c];
        }
        sys.ops.fill(z, 0.0)?;
        sys.ops.fill(p, 0.0)?;
        let cols = Concat(&self.pv[..=s], &self.rv[..s]);
        let mut dsts = [x, z, p];
        sys.ops
            .lincomb_block(&self.xrp[..3 * ny], &cols, &mut dsts[..])?;
        for c in 0..ny {
            self.xrp[2 * c] = self.rc[c];
            self.xrp[2 * c + 1] = self.pc[c];
        }
        sys.ops.fill(r, 0.0)?;
        sys.ops.fill(pm, 0.0)?;
        let cols = Concat(&self.pt[..=s], &self.rt[..s]);
        let mut dsts = [r, pm];
        Ok(sys
            .ops
            .lincomb_block(&self.xrp[..2 * ny], &cols, &mut dsts[..])?)
    }
}

/// `out = M v` for the `ny x ny` row-major `m`.
fn matvec(m: &[f64], ny: usize, v: &[f64], out: &mut [f64]) {
    for (i, o) in out[..ny].iter_mut().enumerate() {
        *o = m[i * ny..(i + 1) * ny]
            .iter()
            .zip(&v[..ny])
            .map(|(a, b)| a * b)
            .sum();
    }
}

/// The rounding level of the quadratic form `u^T G v` on coordinates:
/// [`crate::breakdown::ROUNDING_CURVATURE`] times `|u|^T |G| |v|`, the bound on its rounding error.
fn rounding(u: &[f64], g: &[f64], v: &[f64], ny: usize) -> f64 {
    let mut sum = 0.0;
    for i in 0..ny {
        let row: f64 = g[i * ny..(i + 1) * ny]
            .iter()
            .zip(&v[..ny])
            .map(|(a, b)| (a * b).abs())
            .sum();
        sum += u[i].abs() * row;
    }
    crate::breakdown::ROUNDING_CURVATURE * sum
}

/// How the inner iterations of one outer step ended.
enum Inner {
    /// `done` iterations; `stop`: the estimate (`smoothed`: the smoothed residual's) met
    /// the tolerance or the budget is spent.
    Steps {
        done: usize,
        stop: bool,
        rnorm: f64,
        smoothed: bool,
    },
    /// Breakdown of `quantity` with `value`.
    Breakdown { quantity: &'static str, value: f64 },
}

/// Up to s inner iterations on the coordinates (G, Bm set); `ratio` turns scaled-norm
/// squares into original-norm squares; `budget` CG-equivalent iterations remain.
fn inner<C: Communicator + ?Sized, D: Device>(
    ws: &mut Workspace<D>,
    sys: &System<'_, C, D>,
    ratio: f64,
    budget: usize,
) -> Inner {
    let (s, ny) = (ws.s, ws.ny());
    for v in [&mut ws.pc, &mut ws.rc, &mut ws.xc] {
        v[..ny].fill(0.0);
    }
    ws.pc[0] = 1.0;
    ws.rc[s + 1] = 1.0;
    let mut rr = ws.g[(s + 1) * ny + s + 1];
    let mut rnorm = ws.estimate(rr, ratio);
    if ws.smooth_inner(sys) {
        return Inner::Steps {
            done: 0,
            stop: true,
            rnorm,
            smoothed: true,
        };
    }
    for j in 0..s.min(budget) {
        matvec(&ws.bm, ny, &ws.pc, &mut ws.bp);
        matvec(&ws.g, ny, &ws.bp, &mut ws.gv);
        let den: f64 = ws.pc[..ny]
            .iter()
            .zip(&ws.gv[..ny])
            .map(|(a, b)| a * b)
            .sum();
        if j > 0
            && den.is_finite()
            && den <= 0.0
            && den.abs() <= rounding(&ws.pc, &ws.g, &ws.bp, ny)
        {
            // A curvature at rounding level: the direction vanished (the Krylov space is
            // exhausted); stop before this step and check the true residual.
            return Inner::Steps {
                done: j,
                stop: true,
                rnorm,
                smoothed: false,
            };
        }
        if !(den.is_finite() && den > 0.0) {
            return Inner::Breakdown {
                quantity: "p'^T G Bm p' (p^T A p)",
                value: den,
            };
        }
        let a = rr / den;
        ws.ca[j] = a;
        for c in 0..ny {
            ws.xc[c] += a * ws.pc[c];
            ws.rc[c] -= a * ws.bp[c];
        }
        let mut rr_new = ws.gram_norm_r(false);
        if rr_new.is_finite() && rr_new < 0.0 && -rr_new <= rounding(&ws.rc, &ws.g, &ws.rc, ny) {
            // r' G r' at rounding level: the residual vanished; the true residual decides.
            rr_new = 0.0;
        }
        if !(rr_new.is_finite() && rr_new >= 0.0) {
            return Inner::Breakdown {
                quantity: if ws.pre {
                    "r'^T G r' (r^T M^-1 r)"
                } else {
                    "r'^T G r' (r^T r)"
                },
                value: rr_new,
            };
        }
        let beta = rr_new / rr;
        ws.cb[j] = beta;
        for c in 0..ny {
            ws.pc[c] = ws.rc[c] + beta * ws.pc[c];
        }
        rr = rr_new;
        rnorm = ws.estimate(rr, ratio);
        ws.est[j] = rnorm;
        let smoothed = ws.smooth_inner(sys);
        if smoothed || sys.meets(rnorm) || rr == 0.0 || j + 1 == budget {
            return Inner::Steps {
                done: j + 1,
                stop: true,
                rnorm,
                smoothed,
            };
        }
    }
    Inner::Steps {
        done: s.min(budget),
        stop: budget <= s,
        rnorm,
        smoothed: false,
    }
}

/// The preconditioned form's vectors beside `r` and `p`: `z = M^-1 r` (the start of the
/// basis `R`) and `pm = M p` (the start of `P̃`).
struct MVecs<D: Device> {
    z: DistVec<D>,
    pm: DistVec<D>,
}

/// The directions (re)start from the residual `r`: `p = r`; with a preconditioner
/// (`mv`) `z = M^-1 r` (one application), `p = z`, `M p = r`.
fn restart_directions<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    mv: Option<&mut MVecs<D>>,
    r: &DistVec<D>,
    p: &mut DistVec<D>,
) -> Result<(), KrylovError> {
    match mv {
        Some(m) => {
            sys.precondition(r, &mut m.z)?;
            sys.ops.copy(&m.z, p)?;
            Ok(sys.ops.copy(r, &mut m.pm)?)
        }
        None => Ok(sys.ops.copy(r, p)?),
    }
}

pub(crate) fn run<C: Communicator + ?Sized, D: Device>(
    sys: &mut System<'_, C, D>,
    x: &mut DistVec<D>,
    x0_given: bool,
) -> Result<LoopEnd, KrylovError> {
    let s0 = sys.cfg.k;
    let mut r = sys.new_vec()?;
    let mut p = sys.new_vec()?;
    let mut t = sys.new_vec()?;
    sys.ops.prepare(2)?;
    let [_, rw0] = sys.initial_residual(x, &mut r, x0_given)?;
    check_finite(NAME, 0, "||r||", &[rw0])?;
    // The preconditioned form's z = M^-1 r and M p (none without a preconditioner).
    let mut mv = match sys.pc.is_some() {
        true => Some(MVecs {
            z: sys.new_vec()?,
            pm: sys.new_vec()?,
        }),
        false => None,
    };
    restart_directions(sys, mv.as_mut(), &r, &mut p)?;
    // Whether p = r (with a preconditioner p = z; the start, and after every
    // replacement): then `R` repeats `P`.
    let mut p_is_r = true;
    let basis = match &mv {
        Some(m) => sstep::setup_basis_from(sys, &r, Some(&m.z), NAME)?,
        None => sstep::setup_basis(sys, &r, NAME)?,
    };
    let mut ws = Workspace::new(sys, basis, s0, mv.is_some())?;
    for s in (0..).map(|i| s0 >> i).take_while(|&s| s > 0) {
        sys.ops.prepare_split(fused_len(s))?;
        sys.ops.prepare_split(fused_wide_len(s))?;
    }
    sys.ops.set_phase(Phase::Loop);

    let (mut outer, mut equivalent) = (0, 0);
    let mut rnorm = rw0.max(0.0).sqrt();
    // Check the true residual at the top of the loop (the estimate met the tolerance).
    let mut check = sys.meets(rnorm);
    // Just replaced: the exact norm of the new r is the true one that missed.
    let mut replaced = false;
    // CG-equivalent iterations at the last replacement (periodic or after a check).
    let mut last_replaced = 0;
    // Minimal-residual smoothing of the outer-step iterates (cg/smoothing.rs); whether the
    // pending check is of the smoothed iterate.
    let mut smooth = Smoother::new(sys, x, &r, rw0)?;
    let mut smoothed = false;
    // `||r||_w^2` at the last outer step's start and the reduction factor since (with
    // `WIDE_WINDOW` they decide when a step reduces `Gw` and `(s, Y)_w` too).
    let (mut rw_last, mut rate): (f64, f64) = (rw0, 1.0);
    loop {
        if check || equivalent >= sys.cfg.max_iter {
            match sstep::check_true(sys, x, &mut r, &mut t, NAME, outer, equivalent, rnorm)? {
                Check::Done(end) => return Ok(end),
                Check::Replaced([_, w]) => {
                    restart_directions(sys, mv.as_mut(), &r, &mut p)?;
                    p_is_r = true;
                    replaced = true;
                    if smoothed {
                        smooth.start(sys, x, &r, w)?;
                    }
                }
            }
        }
        smoothed = false;
        // Periodic residual replacement: every `replace_every` CG-equivalent iterations, at
        // this outer-step boundary, r = b - A x (one SpMV, no reduction of its own: its
        // exact ||r||_w^2 rides in the Gram reduction below) and p = r.
        if check {
            last_replaced = equivalent;
        } else if sys
            .cfg
            .replace_every
            .is_some_and(|every| equivalent - last_replaced >= every)
        {
            sys.residual(x, &mut r)?;
            restart_directions(sys, mv.as_mut(), &r, &mut p)?;
            p_is_r = true;
            sys.replacements += 1;
            last_replaced = equivalent;
        }
        check = false;
        // Basis (2s - 1 SpMVs) and the ONE reduction [G upper, ||r||_w^2, (s, r)_w]
        // (near the target also [Gw upper, (s, Y)_w], whose column r makes `(s, r)_w`).
        ws.wide = sstep::near_target(sys, rnorm, rate, WIDE_WINDOW);
        match &mv {
            Some(m) => {
                ws.build(sys, &p, &m.z)?;
                ws.build_m_side(sys, &m.pm, &r)?;
            }
            None => ws.build(sys, &p, &r)?,
        }
        ws.local_gram(sys)?;
        let (s, ny) = (ws.s, ws.ny());
        let len = fused_len(s);
        let end = if ws.wide { fused_wide_len(s) } else { len };
        if ws.wide {
            sys.ops.set_slot(len - 1, 0.0)?;
            smooth.local_sy(sys, &ws.cols_r(), len + tri(ny))?;
        } else {
            smooth.local_sr(sys, &r, len - 1)?;
        }
        let mut pack = std::mem::take(&mut ws.pack);
        let done = sys
            .ops
            .begin(end)
            .and_then(|pending| sys.ops.finish(pending, &mut pack[..end]));
        outer += 1;
        if let Err(e) = done {
            ws.pack = pack;
            return Err(e.into());
        }
        let fin = check_finite(NAME, outer, "Y^T Y, ||r||_w^2, (s, r)_w", &pack[..end]);
        sstep::unpack_upper(&pack[..len - 2], ny, &mut ws.g);
        if ws.wide {
            let o = len + tri(ny);
            sstep::unpack_upper(&pack[len..o], ny, &mut ws.gw);
            ws.sy[..ny].copy_from_slice(&pack[o..end]);
            ws.co.start(ny, smooth.norm_sq());
        }
        let (rw, sr) = (pack[len - 2], pack[len - 1]);
        ws.pack = pack;
        fin?;
        rate = (rw_last / rw).sqrt();
        rw_last = rw;
        rnorm = rw.max(0.0).sqrt();
        // The smoothed residual meets the tolerance: go on from the smoothed iterate,
        // checked like a convergence claim (this step's basis is not used). Near
        // convergence (`wide`) the inner iterations smooth every iterate instead.
        if !ws.wide {
            smooth.update(sys, x, &r, sr, rw)?;
            if smooth.take_over(sys, x)? {
                (check, smoothed) = (true, true);
                rnorm = smooth.norm();
                continue;
            }
        }
        if sys.meets(rnorm) && !replaced {
            check = true;
            continue;
        }
        replaced = false;
        // The adaptive s ([`BASIS_COND_MAX`]): this step's inner iterations use the first
        // s' columns of the bases; the basis is built with s again next step.
        let built = ws.s;
        let sp = ws.adapt(p_is_r);
        if sp < built {
            ws.shrink(sp, smooth.norm_sq());
        }
        let (s, ny) = (ws.s, ws.ny());
        let rr = ws.g[(s + 1) * ny + s + 1];
        let ratio = if rr > 0.0 { rw / rr } else { 1.0 };
        let budget = sys.cfg.max_iter - equivalent;
        match inner(&mut ws, sys, ratio, budget) {
            Inner::Breakdown { quantity, value } => {
                if ws.s == 1 {
                    return Err(breakdown(NAME, outer, quantity, value));
                }
                ws.s /= 2;
                ws.set_bm();
                continue;
            }
            Inner::Steps {
                done,
                stop,
                rnorm: est,
                smoothed: smoothed_stop,
            } => {
                if ws.wide {
                    let cols = Concat(&ws.pv[..=s], &ws.rv[..s]);
                    let rcols = ws.pre.then(|| Concat(&ws.pt[..=s], &ws.rt[..s]));
                    smooth.absorb(sys, &mut ws.co, x, &cols, rcols.as_ref())?;
                }
                match mv.as_mut() {
                    Some(m) => ws.combine_pre(sys, x, &mut r, &mut p, &mut m.z, &mut m.pm)?,
                    None => ws.combine(sys, x, &mut r, &mut p)?,
                }
                sys.record_block(equivalent + done, &ws.est[..done]);
                if p_is_r {
                    sys.ritz_restart();
                }
                sys.ritz_steps(&ws.ca[..done], &ws.cb[..done]);
                if ws.s != built {
                    ws.s = built;
                    ws.set_bm();
                }
                p_is_r &= done == 0;
                equivalent += done;
                rnorm = est;
                check = stop;
                if smoothed_stop && smooth.take_over(sys, x)? {
                    smoothed = true;
                    rnorm = smooth.norm();
                }
            }
        }
    }
}
