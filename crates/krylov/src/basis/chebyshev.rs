//! Chebyshev basis on `[lmin, lmax]`: `s_j = T_j(eta A - zeta) s_0`.
//!
//! With `eta = 2 / (lmax - lmin)` and `zeta = (lmax + lmin) / (lmax - lmin)` the map
//! `lambda -> eta lambda - zeta` sends `[lmin, lmax]` to `[-1, 1]`, and
//!
//! ```text
//! s_1 = (eta A - zeta) s_0
//! s_j = 2 (eta A - zeta) s_{j-1} - s_{j-2}
//! ```
//!
//! (`zeta`, not `2 eta`: a published listing has that typo; the step itself is the device
//! operation `BasisStep::ChebyshevFirst` / `BasisStep::Chebyshev`.) Change of basis:
//! `A s_0 = (s_1 + zeta s_0) / eta` and, for `j >= 1`,
//! `A s_j = (s_{j+1} + s_{j-1}) / (2 eta) + (zeta / eta) s_j` (tridiagonal `T`).

use crate::KrylovError;

/// The interval and its affine map to `[-1, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chebyshev {
    lmin: f64,
    lmax: f64,
    eta: f64,
    zeta: f64,
}

impl Chebyshev {
    /// The basis on `[lmin, lmax]`; needs finite `lmin < lmax`.
    pub fn new(lmin: f64, lmax: f64) -> Result<Self, KrylovError> {
        if !(lmin.is_finite() && lmax.is_finite() && lmin < lmax) {
            return Err(KrylovError::InvalidConfig(format!(
                "Chebyshev basis needs finite lmin < lmax (got [{lmin}, {lmax}])"
            )));
        }
        let w = lmax - lmin;
        Ok(Self {
            lmin,
            lmax,
            eta: 2.0 / w,
            zeta: (lmax + lmin) / w,
        })
    }

    /// `[lmin, lmax]`.
    pub fn interval(&self) -> (f64, f64) {
        (self.lmin, self.lmax)
    }

    /// `(eta, zeta)`.
    pub fn map(&self) -> (f64, f64) {
        (self.eta, self.zeta)
    }

    /// Column `j` of `T` (`k + 1` rows, stride `k`).
    pub(super) fn change_of_basis_column(&self, j: usize, k: usize, t: &mut [f64]) {
        let (eta, zeta) = (self.eta, self.zeta);
        t[j * k + j] = zeta / eta;
        if j == 0 {
            t[k] = 1.0 / eta;
        } else {
            t[(j - 1) * k + j] = 0.5 / eta;
            t[(j + 1) * k + j] = 0.5 / eta;
        }
    }
}
