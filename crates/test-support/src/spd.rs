//! Seeded test inputs: pseudo-random vectors by global index and dense SPD matrices with a
//! controlled spectrum.

use sprs::{CsMat, TriMat};

/// Deterministic pseudo-random values in [-1, 1) by global index `start..start + n`
/// (SplitMix64's finaliser on the index), so every rank can generate its own block of the
/// same global vector.
pub fn hash_vec(start: usize, n: usize, seed: u64) -> Vec<f64> {
    (start..start + n)
        .map(|i| {
            let mut z = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// The dense symmetric matrix `Q diag(lambdas) Q^T` as CSR (every entry stored), with `Q`
/// the product of three Householder reflections from seeded vectors: its eigenvalues are
/// `lambdas` to rounding, so its spectrum and condition number are controlled.
pub fn dense_spd(lambdas: &[f64], seed: u64) -> CsMat<f64> {
    let n = lambdas.len();
    let mut m = vec![0.0; n * n];
    for i in 0..n {
        m[i * n + i] = lambdas[i];
    }
    for r in 0..3 {
        let v = hash_vec(0, n, seed + r);
        let vv: f64 = v.iter().map(|x| x * x).sum();
        // M <- H M H with H = I - 2 v v^T / v^T v: rows first, then columns.
        for pass in 0..2 {
            for c in 0..n {
                let at = |i: usize| if pass == 0 { i * n + c } else { c * n + i };
                let dot: f64 = (0..n).map(|i| v[i] * m[at(i)]).sum();
                for (i, vi) in v.iter().enumerate() {
                    m[at(i)] -= 2.0 * vi * dot / vv;
                }
            }
        }
    }
    let mut tri = TriMat::new((n, n));
    for i in 0..n {
        for j in 0..n {
            tri.add_triplet(i, j, 0.5 * (m[i * n + j] + m[j * n + i]));
        }
    }
    tri.to_csr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_spd_is_symmetric_with_the_given_trace() {
        let lambdas = [1.0, 2.0, 5.0, 10.0];
        let a = dense_spd(&lambdas, 3);
        let d = a.to_dense();
        let trace: f64 = (0..4).map(|i| d[[i, i]]).sum();
        assert!((trace - 18.0).abs() < 1e-12);
        for i in 0..4 {
            for j in 0..4 {
                assert_eq!(d[[i, j]], d[[j, i]]);
            }
        }
        assert_eq!(hash_vec(2, 3, 9)[0], hash_vec(0, 5, 9)[2]);
    }
}
