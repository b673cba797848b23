//! `chebyshev`: a Chebyshev polynomial preconditioner `M^-1 = p(Â)` of degree `D`
//! (`--precond-degree`, default [`crate::config::PRECOND_DEGREE`]) in the Jacobi-scaled
//! matrix `Â = S A S`.
//!
//! Reference: Y. Saad, "Iterative Methods for Sparse Linear Systems", 2nd ed., SIAM 2003,
//! Alg. 12.1 (the Chebyshev iteration) and §12.3 (polynomial preconditioning); as a CG
//! preconditioner in communication-avoiding studies: E. Carson, "Communication-avoiding
//! Krylov subspace methods in theory and practice", PhD thesis, UC Berkeley, 2015, ch. 6.
//!
//! `z = p(Â) r` is `D + 1` steps of the Chebyshev iteration for `Â z = r` from `z = 0`
//! on the interval `[b / RATIO, b]`, `b` the largest Gershgorin row sum of `Â`
//! (`max_i sum_j |Â_ij|`, agreed by one setup reduction), an upper bound of its spectrum.
//! On `(0, b]` the residual polynomial `1 - t p(t) = T_{D+1}(mu(t)) / T_{D+1}(mu(0))`, with
//! `mu` mapping the interval to `[-1, 1]`, lies in `(-1, 1)`, so `p(t) > 0`: `p(Â)` is
//! symmetric positive definite whatever the spectrum below `b / RATIO`, as CG's
//! preconditioner must be. The lower end trades the band `[b / RATIO, b]`, squeezed to
//! within `1 / T_{D+1}(mu(0))` of 1, against the small eigenvalues below it, scaled by about
//! `p(0) ~ 2 (D + 1)^2 / b`; [`RATIO`] says how it was chosen.
//!
//! Cost per application: `D` SpMVs (`D` halo exchanges, counted as the loop's), no
//! reduction, `4 D + 2` vector operations; no triangular solve, so it runs on every
//! device. Work vectors: 3 (`res`, `d`, `ad`).

use castack_collectives::Communicator;

use crate::operator::LinearOperator;
use crate::KrylovError;
use castack_linalg::device::Device;
use castack_linalg::dist::DistVec;
use castack_linalg::ops::Ops;

/// The interval's lower end is `b / RATIO`. Measured with cg on 2 ranks, tol 1e-8, on
/// nine shared matrices (1138_bus, bcsstk13, bcsstk15, bodyy6, gr_30_30, msc04515,
/// nasa2910, nos7, s3rmt3m3; 2026-11-27): SpMVs and reductions, each as the geometric mean
/// over the matrices relative to 30, were 1.06 / 1 / 1.13 / 1.30 for RATIO 10 / 30 / 100
/// / 300 at degree 3 (1.14 / 1 / 1.11 / 1.29 at degree 5, 1.00 / 1 / 1.12 / 1.32 at 2).
/// Larger ratios help the hardest matrices a little (s3rmt3m3: 3715 -> 3559 iterations at
/// 300) and cost the easy ones much (nos7: 33 -> 84).
pub(crate) const RATIO: f64 = 30.0;

/// The polynomial and its work vectors.
#[derive(Debug)]
pub(crate) struct ChebyshevPc<D: Device> {
    degree: usize,
    /// Centre and half-width of the interval.
    theta: f64,
    delta: f64,
    res: DistVec<D>,
    d: DistVec<D>,
    ad: DistVec<D>,
}

impl<D: Device> ChebyshevPc<D> {
    /// Degree `degree` on `[upper / RATIO, upper]`; work vectors laid out for `a` (from
    /// `ops`, so they count in the working set).
    pub(crate) fn new<C: Communicator + ?Sized, A: LinearOperator<C, D> + ?Sized>(
        ops: &mut Ops<'_, C, D>,
        a: &A,
        degree: usize,
        upper: f64,
    ) -> Result<Self, KrylovError> {
        let lower = upper / RATIO;
        let (nl, ne) = (a.n_local(), a.n_ext());
        Ok(Self {
            degree,
            theta: (upper + lower) / 2.0,
            delta: (upper - lower) / 2.0,
            res: ops.new_vec(nl, ne)?,
            d: ops.new_vec(nl, ne)?,
            ad: ops.new_vec(nl, ne)?,
        })
    }

    /// `z = p(Â) r` (owned values): `degree` SpMVs through `a` (each one counted
    /// exchange).
    pub(crate) fn apply<C: Communicator + ?Sized, A: LinearOperator<C, D> + ?Sized>(
        &mut self,
        a: &mut A,
        ops: &mut Ops<'_, C, D>,
        r: &DistVec<D>,
        z: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        let (theta, delta) = (self.theta, self.delta);
        let sigma = theta / delta;
        let mut rho = 1.0 / sigma;
        // d_0 = r / theta; z = x_1 = d_0; res = r_0 = r.
        ops.scale(1.0 / theta, r, &mut self.d)?;
        ops.copy(&self.d, z)?;
        ops.copy(r, &mut self.res)?;
        for _ in 0..self.degree {
            // r_{k+1} = r_k - Â d_k
            a.spmv(ops, &mut self.d, &mut self.ad)?;
            ops.axpy(-1.0, &self.ad, &mut self.res)?;
            // d_{k+1} = rho_{k+1} rho_k d_k + (2 rho_{k+1} / delta) r_{k+1} (built in `ad`,
            // then swapped in); x_{k+2} = x_{k+1} + d_{k+1}.
            let rho_next = 1.0 / (2.0 * sigma - rho);
            ops.scale(rho_next * rho, &self.d, &mut self.ad)?;
            ops.axpy(2.0 * rho_next / delta, &self.res, &mut self.ad)?;
            std::mem::swap(&mut self.d, &mut self.ad);
            ops.axpy(1.0, &self.d, z)?;
            rho = rho_next;
        }
        Ok(())
    }
}

/// The residual polynomial `1 - t p(t)` of degree `D` on `[upper / RATIO, upper]` at `t`
/// (scalar, for tests and the module doc's claims): the same recurrence on numbers.
#[cfg(test)]
fn residual_polynomial(degree: usize, upper: f64, t: f64) -> f64 {
    let lower = upper / RATIO;
    let (theta, delta) = ((upper + lower) / 2.0, (upper - lower) / 2.0);
    let sigma = theta / delta;
    let mut rho = 1.0 / sigma;
    let mut d = 1.0 / theta;
    let (mut x, mut res) = (d, 1.0);
    for _ in 0..degree {
        res -= t * d;
        let rho_next = 1.0 / (2.0 * sigma - rho);
        d = rho_next * rho * d + 2.0 * rho_next / delta * res;
        x += d;
        rho = rho_next;
    }
    1.0 - t * x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The residual polynomial of degree `D + 1` is the scaled Chebyshev polynomial
    /// `T_{D+1}(mu(t)) / T_{D+1}(mu(0))`, and lies in (-1, 1) on (0, upper]: `p > 0` there.
    #[test]
    fn residual_polynomial_is_scaled_chebyshev_and_p_is_positive() {
        let upper = 2.0;
        let lower = upper / RATIO;
        let mu = |t: f64| (upper + lower - 2.0 * t) / (upper - lower);
        let cheb = |d: usize, x: f64| {
            let (mut t0, mut t1) = (1.0, x);
            if d == 0 {
                return t0;
            }
            for _ in 1..d {
                (t0, t1) = (t1, 2.0 * x * t1 - t0);
            }
            t1
        };
        for degree in 1..=8 {
            for i in 1..=400 {
                let t = upper * i as f64 / 400.0;
                let got = residual_polynomial(degree, upper, t);
                let want = cheb(degree + 1, mu(t)) / cheb(degree + 1, mu(0.0));
                assert!(
                    (got - want).abs() < 1e-12,
                    "D={degree} t={t}: {got} vs {want}"
                );
                assert!(got.abs() < 1.0, "D={degree} t={t}: {got}");
                // p(t) = (1 - residual) / t > 0.
                assert!((1.0 - got) / t > 0.0);
            }
        }
    }
}
