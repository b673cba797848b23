//! Spectral bounds for the s-step bases.
//!
//! **Choice.** The solvers estimate the spectrum of the (scaled) operator by Lanczos run
//! through CG itself ([`cg_lanczos`]): a few warm-up CG steps from the initial residual
//! give `alpha_i`, `beta_i`, hence the Lanczos tridiagonal matrix
//!
//! ```text
//! T[i, i]     = 1/alpha_i + beta_{i-1}/alpha_{i-1}   (beta_{-1} = 0)
//! T[i, i + 1] = sqrt(beta_i) / alpha_i
//! ```
//!
//! whose eigenvalues (Ritz values, [`castack_linalg::dense::tridiagonal_eigenvalues`]) converge
//! fastest at the ends of the spectrum. The warm-up only reads `r`, `p`, `A p`: the
//! iterate `x` is left untouched, so the solve's iteration counts are honest. Its
//! reductions and SpMVs are counted as setup (the caller's [`crate::Ops`] is in
//! [`castack_linalg::count::Phase::Setup`]): `2 m` reductions and `m` halo exchanges for `m` steps.
//!
//! The interval used by the Chebyshev basis is `[0, max Ritz]`, with no safety factor on
//! the upper end. Ritz values lie inside the spectrum, so the largest one underestimates
//! `lmax` (by under 10% after 10 steps on the test matrices: 6-9% on generated 3-D Poisson
//! with Jacobi scaling); eigencomponents above it make the Chebyshev columns grow, at most
//! like `T_k(1 + 2 (lmax / hi - 1))`: about 10^2 for k = 12 and a 5% underestimate, 10^3
//! for 9%. Those components are small: CG resolves the top of the spectrum first. An interval
//! that reaches beyond `lmax` costs more: late in a solve the residual lives at the low end
//! of the spectrum, where the Chebyshev columns differ only through powers of
//! `lambda / hi`, so every percent of `hi` beyond the spectrum makes the basis resolve
//! that part worse, so the former safety factor 1.1 cost iterations (measured:
//! `cg/README.md`, *Measured*).
//!
//! `lmin = 0` is safe for an SPD matrix, whereas the smallest Ritz value overestimates
//! `lmin` and eigenvalues left of the interval would make the Chebyshev columns grow.
//! Exception ([`RELIABLE_REDUCTION`]): when the warm-up CG itself reduced the residual by
//! `1e-5` or more, the start vector has next to nothing left outside the explored part of
//! the spectrum, and the interval is `[min Ritz / LMIN_SAFETY, max Ritz]`. On such fast
//! matrices a block of `k` CG steps spans nearly the whole relevant Krylov space, and
//! `[0, lmax]` left the first Gram matrix nearly singular (measured: `cg/README.md`,
//! *Measured*). The Newton basis uses all Ritz values as shifts. A Ritz value `<= 0`
//! proves the operator is not positive definite and is reported as a breakdown.
//!
//! With a preconditioner `M^-1` in the loop the s-step bases are bases of `M^-1 A`, and
//! [`pcg_lanczos`] estimates its spectrum the same way from the coefficients of
//! preconditioned CG (`z = M^-1 r`; E. Carson, "Communication-avoiding Krylov subspace
//! methods in theory and practice", PhD thesis, UC Berkeley, 2015, for the
//! preconditioned s-step bases built from such estimates). The interval rule above is
//! applied unchanged to its Ritz values, the reduction being measured in the `M^-1`-norm.
//!
//! [`power_lmax`] (a few power iterations with Rayleigh quotients) is the alternative
//! estimate of `lmax` alone, kept for comparison and tests.

use castack_collectives::Communicator;

use crate::breakdown::breakdown;
use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::dense::tridiagonal_eigenvalues;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;
use castack_linalg::ops::Ops;

/// Safety factor on the smallest Ritz value where it bounds the Chebyshev interval (with
/// [`RELIABLE_REDUCTION`]): the interval starts at `min Ritz / LMIN_SAFETY`. The upper end
/// has none (module docs).
pub(crate) const LMIN_SAFETY: f64 = 1.1;

/// Warm-up residual reduction `||r_m|| / ||r_0||` at or below which the smallest Ritz
/// value is trusted as the Chebyshev interval's lower end (divided by [`LMIN_SAFETY`]); above
/// it the lower end is 0. Measured on the 25 shared matrices with condition number
/// <= 1e8 (warm-up 10-12 steps): it applies to crystm01, ted_B and the bodyy family only.
pub(crate) const RELIABLE_REDUCTION: f64 = 1e-5;

/// Warm-up CG steps used by the solvers for block size `k` (at least 10, at least `k` so
/// the Newton basis gets `k` distinct shifts).
pub(crate) fn warmup_steps(k: usize) -> usize {
    k.max(10)
}

/// Ritz values and the interval derived from them.
#[derive(Debug, Clone, PartialEq)]
pub struct SpectralEstimate {
    /// Ritz values, ascending (empty when the start vector was zero).
    pub ritz: Vec<f64>,
    /// Lanczos steps taken (fewer than asked when CG converged first).
    pub steps: usize,
    /// Residual reduction `||r_m|| / ||r_0||` of the warm-up CG (1 without one).
    pub reduction: f64,
}

impl SpectralEstimate {
    /// Largest Ritz value (0 when none).
    pub fn lmax_ritz(&self) -> f64 {
        self.ritz.last().copied().unwrap_or(0.0)
    }

    /// Smallest Ritz value (0 when none).
    pub fn lmin_ritz(&self) -> f64 {
        self.ritz.first().copied().unwrap_or(0.0)
    }

    /// The Chebyshev interval `[0, lmax_ritz]` (`[0, 1]` without Ritz values);
    /// `[lmin_ritz / LMIN_SAFETY, lmax_ritz]` when the warm-up reduced the residual by
    /// [`RELIABLE_REDUCTION`] or more.
    pub fn interval(&self) -> (f64, f64) {
        let hi = self.lmax_ritz();
        if !(hi > 0.0 && hi.is_finite()) {
            return (0.0, 1.0);
        }
        let lo = self.lmin_ritz() / LMIN_SAFETY;
        if self.reduction <= RELIABLE_REDUCTION && lo > 0.0 && lo < hi {
            (lo, hi)
        } else {
            (0.0, hi)
        }
    }
}

/// Lanczos tridiagonal `(diagonal, off-diagonal)` from CG coefficients: `alphas` has `m`
/// entries, `betas` at least `m - 1` (`beta_i` from step `i`).
///
/// # Panics
///
/// When `betas` is too short.
#[track_caller]
pub(crate) fn lanczos_tridiagonal(alphas: &[f64], betas: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let m = alphas.len();
    assert!(betas.len() + 1 >= m, "lanczos_tridiagonal: too few betas");
    let d = (0..m)
        .map(|i| {
            1.0 / alphas[i]
                + if i > 0 {
                    betas[i - 1] / alphas[i - 1]
                } else {
                    0.0
                }
        })
        .collect();
    let e = (0..m.saturating_sub(1))
        .map(|i| betas[i].sqrt() / alphas[i])
        .collect();
    (d, e)
}

/// Ritz values (ascending) from CG coefficients.
pub fn ritz_values(alphas: &[f64], betas: &[f64]) -> Vec<f64> {
    let (d, e) = lanczos_tridiagonal(alphas, betas);
    tridiagonal_eigenvalues(&d, &e)
}

/// Up to `steps` CG steps on `A` from `r0` (not modified; `x` is not formed), and the
/// Ritz values of the resulting Lanczos matrix. Collective; `2 * steps` reductions (fewer
/// when CG converges first) and `steps` SpMVs, counted in `ops`' current phase.
/// Errors name `method`: `p^T A p <= 0` or a Ritz value `<= 0` (not positive definite),
/// NaN/Inf.
/// Its three work vectors live only for the call: they leave the working set after it.
pub fn cg_lanczos<C: Communicator + ?Sized, D: Device, A: LinearOperator<C, D> + ?Sized>(
    a: &mut A,
    ops: &mut Ops<'_, C, D>,
    r0: &DistVec<D>,
    steps: usize,
    method: &'static str,
) -> Result<SpectralEstimate, KrylovError> {
    let held = ops.held();
    let e = lanczos_in(a, ops, r0, steps, method, None);
    ops.set_held(held);
    e
}

/// [`cg_lanczos`] for the preconditioned operator `M^-1 A`: up to `steps` steps of
/// preconditioned CG (Saad, Alg. 9.1) from `r0` (not modified), `z = M^-1 r` by `precond`
/// (called as `precond(a, ops, r, z)`; `z0`, when the caller has `M^-1 r0` already, saves
/// the first call), and the Ritz values of the Lanczos matrix its
/// coefficients `alpha_i = r.z / p^T A p`, `beta_i = r'.z' / r.z` give: those of `M^-1 A`
/// (the same formula as in the module docs, the coefficients being those of CG on
/// `L^-1 A L^-T` for `M = L L^T`, from `L^-1 r0`). The reduction is measured in the
/// `M^-1`-norm, `sqrt(r_m.z_m / r_0.z_0)`: the residual norm of that equivalent CG.
/// Collective; `2 * steps` reductions (fewer when CG converges first), `steps` SpMVs and
/// `steps` applications of `precond` (`steps - 1` with `z0`; one more when it stopped
/// early), counted in `ops`' current phase. Errors name `method`: `r^T M^-1 r < 0` (`M` not positive definite),
/// `p^T A p <= 0` or a Ritz value `<= 0`, NaN/Inf. Four work vectors, for the call only.
pub fn pcg_lanczos<'o, C, D, A, P>(
    a: &mut A,
    ops: &mut Ops<'o, C, D>,
    r0: &DistVec<D>,
    z0: Option<&DistVec<D>>,
    steps: usize,
    method: &'static str,
    mut precond: P,
) -> Result<SpectralEstimate, KrylovError>
where
    C: Communicator + ?Sized,
    D: Device,
    A: LinearOperator<C, D> + ?Sized,
    P: FnMut(&mut A, &mut Ops<'o, C, D>, &DistVec<D>, &mut DistVec<D>) -> Result<(), KrylovError>,
{
    let held = ops.held();
    let pc = Precond {
        z0,
        apply: &mut precond,
    };
    let e = lanczos_in(a, ops, r0, steps, method, Some(pc));
    ops.set_held(held);
    e
}

/// [`lanczos_in`]'s preconditioner.
struct Precond<'p, 'o, C: Communicator + ?Sized, D: Device, A: ?Sized> {
    /// `M^-1 r0`, when the caller has it.
    z0: Option<&'p DistVec<D>>,
    /// The application `z = M^-1 r`, as [`pcg_lanczos`] takes it.
    #[allow(clippy::type_complexity)]
    apply: &'p mut dyn FnMut(
        &mut A,
        &mut Ops<'o, C, D>,
        &DistVec<D>,
        &mut DistVec<D>,
    ) -> Result<(), KrylovError>,
}

/// [`pcg_lanczos`] with the preconditioner `pc`, or [`cg_lanczos`] without one: `z` is
/// then `r` itself (no vector for it, no copies), the same CG.
fn lanczos_in<'o, C, D, A>(
    a: &mut A,
    ops: &mut Ops<'o, C, D>,
    r0: &DistVec<D>,
    steps: usize,
    method: &'static str,
    pc: Option<Precond<'_, 'o, C, D, A>>,
) -> Result<SpectralEstimate, KrylovError>
where
    C: Communicator + ?Sized,
    D: Device,
    A: LinearOperator<C, D> + ?Sized,
{
    let rz_name = match pc {
        Some(_) => "r^T M^-1 r (spectral estimate)",
        None => "r^T r (spectral estimate)",
    };
    let (nl, ne) = (a.n_local(), a.n_ext());
    let mut r = ops.new_vec(nl, ne)?;
    // z = M^-1 r with the application.
    let mut zm = match pc {
        Some(pc) => Some((ops.new_vec(nl, ne)?, pc.z0, pc.apply)),
        None => None,
    };
    let mut p = ops.new_vec(nl, ne)?;
    let mut q = ops.new_vec(nl, ne)?;
    ops.prepare(1)?;
    ops.copy(r0, &mut r)?;
    match &mut zm {
        Some((z, Some(z0), _)) => ops.copy(z0, z)?,
        Some((z, None, apply)) => apply(a, ops, &r, z)?,
        None => {}
    }
    ops.copy(zm.as_ref().map_or(&r, |(z, ..)| z), &mut p)?;
    let mut alphas = Vec::with_capacity(steps);
    let mut betas = Vec::with_capacity(steps);
    let mut rz = [0.0];
    ops.dot(&r, zm.as_ref().map_or(&r, |(z, ..)| z), 0)?;
    ops.reduce(&mut rz)?;
    let mut rz = rz[0];
    if !(rz.is_finite() && rz >= 0.0) {
        return Err(breakdown(method, 0, rz_name, rz));
    }
    let rz0 = rz;
    for i in 0..steps {
        if rz == 0.0 || rz <= 1e-28 * rz0 {
            break;
        }
        a.spmv_dot(ops, &mut p, &mut q, 0)?;
        let mut pq = [0.0];
        ops.reduce(&mut pq)?;
        let pq = pq[0];
        if !(pq.is_finite() && pq > 0.0) {
            return Err(breakdown(method, i, "p^T A p (spectral estimate)", pq));
        }
        let alpha = rz / pq;
        alphas.push(alpha);
        if i + 1 == steps {
            break;
        }
        ops.axpy(-alpha, &q, &mut r)?;
        if let Some((z, _, apply)) = &mut zm {
            apply(a, ops, &r, z)?;
        }
        ops.dot(&r, zm.as_ref().map_or(&r, |(z, ..)| z), 0)?;
        let mut s = [0.0];
        ops.reduce(&mut s)?;
        if !(s[0].is_finite() && s[0] >= 0.0) {
            return Err(breakdown(method, i, rz_name, s[0]));
        }
        let beta = s[0] / rz;
        betas.push(beta);
        rz = s[0];
        ops.xpay(zm.as_ref().map_or(&r, |(z, ..)| z), beta, &mut p)?;
    }
    let ritz = ritz_values(&alphas, &betas);
    if let Some(&lo) = ritz.first() {
        if !(lo.is_finite() && lo > 0.0) {
            return Err(breakdown(
                method,
                0,
                "smallest Ritz value (spectral estimate)",
                lo,
            ));
        }
    }
    Ok(SpectralEstimate {
        steps: alphas.len(),
        ritz,
        reduction: (rz / rz0).sqrt(),
    })
}

/// `iters` power iterations on `A` from `v0` (must be nonzero): the last Rayleigh
/// quotient `v^T A v / v^T v`, a lower bound of `lmax` converging to it. Collective; one
/// reduction and one SpMV per iteration.
/// Its two work vectors live only for the call: they leave the working set after it.
pub fn power_lmax<C: Communicator + ?Sized, D: Device, A: LinearOperator<C, D> + ?Sized>(
    a: &mut A,
    ops: &mut Ops<'_, C, D>,
    v0: &DistVec<D>,
    iters: usize,
) -> Result<f64, KrylovError> {
    let held = ops.held();
    let l = power_lmax_in(a, ops, v0, iters);
    ops.set_held(held);
    l
}

fn power_lmax_in<C: Communicator + ?Sized, D: Device, A: LinearOperator<C, D> + ?Sized>(
    a: &mut A,
    ops: &mut Ops<'_, C, D>,
    v0: &DistVec<D>,
    iters: usize,
) -> Result<f64, KrylovError> {
    let (nl, ne) = (a.n_local(), a.n_ext());
    let mut v = ops.new_vec(nl, ne)?;
    let mut w = ops.new_vec(nl, ne)?;
    ops.prepare(3)?;
    ops.copy(v0, &mut v)?;
    let mut lambda = 0.0;
    for i in 0..iters {
        a.spmv(ops, &mut v, &mut w)?;
        ops.dot(&v, &w, 0)?;
        ops.dot(&v, &v, 1)?;
        ops.dot(&w, &w, 2)?;
        let mut s = [0.0; 3];
        ops.reduce(&mut s)?;
        if !(s.iter().all(|x| x.is_finite()) && s[1] > 0.0) {
            return Err(breakdown("power", i, "v^T v", s[1]));
        }
        lambda = s[0] / s[1];
        let scale = 1.0 / s[2].sqrt();
        ops.scale(scale, &w, &mut v)?;
    }
    Ok(lambda)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ritz_values_of_cg_on_a_diagonal_matrix_are_exact_after_n_steps() {
        // CG on diag(1, 2, 3) from ones, by hand.
        let d = [1.0, 2.0, 3.0];
        let mut r = vec![1.0; 3];
        let mut p = r.clone();
        let (mut alphas, mut betas) = (vec![], vec![]);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        for _ in 0..3 {
            let q: Vec<f64> = p.iter().zip(&d).map(|(p, d)| p * d).collect();
            let rr = dot(&r, &r);
            let alpha = rr / dot(&p, &q);
            for (ri, qi) in r.iter_mut().zip(&q) {
                *ri -= alpha * qi;
            }
            let beta = dot(&r, &r) / rr;
            for (pi, ri) in p.iter_mut().zip(&r) {
                *pi = ri + beta * *pi;
            }
            alphas.push(alpha);
            betas.push(beta);
        }
        let ev = ritz_values(&alphas, &betas);
        for (l, want) in ev.iter().zip(d) {
            assert!((l - want).abs() < 1e-10, "{l} vs {want}");
        }
        let est = SpectralEstimate {
            ritz: ev.clone(),
            steps: 3,
            reduction: 0.5,
        };
        let (lo, hi) = est.interval();
        assert_eq!(lo, 0.0);
        assert!((hi - 3.0).abs() < 1e-9, "{hi}");
        // A warm-up that reduced the residual by RELIABLE_REDUCTION trusts min Ritz.
        let est = SpectralEstimate {
            ritz: ev,
            steps: 3,
            reduction: RELIABLE_REDUCTION,
        };
        let (lo, hi) = est.interval();
        assert!((lo - 1.0 / LMIN_SAFETY).abs() < 1e-9, "{lo}");
        assert!((hi - 3.0).abs() < 1e-9, "{hi}");
    }
}
