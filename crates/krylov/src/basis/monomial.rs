//! Monomial basis `s_{j+1} = A s_j` (Chronopoulos-Gear s-step CG).
//!
//! Change of basis: `A s_j = s_{j+1}`, so `T` has ones on its subdiagonal. No spectral
//! estimate needed; the columns align with the dominant eigenvector at the rate
//! `(lambda_2 / lambda_1)^j`, so the basis loses rank from k ~ 6-8 on hard problems.

/// Column `j` of `T` (`k + 1` rows, stride `k`).
pub(super) fn change_of_basis_column(j: usize, k: usize, t: &mut [f64]) {
    t[(j + 1) * k + j] = 1.0;
}
