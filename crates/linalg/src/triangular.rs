//! A lower-triangular factor `L` in host memory and its solve `z = (L L^T)^-1 r`: what an
//! incomplete Cholesky preconditioner (`castack-krylov`'s `bjacobi_ic0`) hands the device
//! layer ([`crate::Device::ic0_solve`]). The factorization itself lives with the
//! preconditioner; this layer only stores and applies the factor.
//!
//! Cost of one solve: one forward and one backward substitution, `24 nnz_L + 40 n + 16`
//! bytes, `4 nnz_L` flops, a dependent chain of `2 nnz_L` additions ([`LowerFactor::work`]).
//! Sequential by nature: it runs on the host.

use castack_collectives::ComputeWork;

use crate::LinalgError;

/// A lower-triangular factor `L` (host memory, CSR): row `i` holds its entries left of the
/// diagonal in increasing column order, then the diagonal, which is positive and finite.
#[derive(Debug, Clone, PartialEq)]
pub struct LowerFactor {
    indptr: Vec<usize>,
    cols: Vec<u32>,
    vals: Vec<f64>,
    shift: f64,
}

impl LowerFactor {
    /// A factor from its CSR arrays and the diagonal shift it was computed with; an error
    /// unless `indptr` starts at 0 and never decreases, `cols` and `vals` hold
    /// `indptr[n]` entries, each row's columns increase strictly and end with the row's
    /// own (the diagonal), and every diagonal value is positive and finite.
    pub fn new(
        indptr: Vec<usize>,
        cols: Vec<u32>,
        vals: Vec<f64>,
        shift: f64,
    ) -> Result<Self, LinalgError> {
        let bad = |what: String| Err(LinalgError::InvalidConfig(format!("lower factor: {what}")));
        if indptr.first() != Some(&0) || indptr.last() != Some(&cols.len()) {
            return bad(format!(
                "row pointers must run from 0 to the {} stored entries",
                cols.len()
            ));
        }
        if vals.len() != cols.len() {
            return bad(format!("{} values for {} columns", vals.len(), cols.len()));
        }
        for i in 0..indptr.len() - 1 {
            let (lo, hi) = (indptr[i], indptr[i + 1]);
            if hi <= lo || hi > cols.len() {
                return bad(format!("row {i} has no diagonal entry"));
            }
            let row = &cols[lo..hi];
            if row.windows(2).any(|w| w[0] >= w[1]) || row[row.len() - 1] as usize != i {
                return bad(format!(
                    "row {i}: columns must increase and end with the diagonal"
                ));
            }
            let d = vals[hi - 1];
            if !(d.is_finite() && d > 0.0) {
                return bad(format!("row {i}: diagonal {d:e} is not positive"));
            }
        }
        Ok(Self {
            indptr,
            cols,
            vals,
            shift,
        })
    }

    /// The shift `alpha` it was factored with (0: none was needed).
    pub fn shift(&self) -> f64 {
        self.shift
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.indptr.len() - 1
    }

    /// Stored entries of `L`.
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }

    /// Row pointers, columns and values of `L`.
    pub fn csr(&self) -> (&[usize], &[u32], &[f64]) {
        (&self.indptr, &self.cols, &self.vals)
    }

    /// Bytes of the factor.
    pub fn held_bytes(&self) -> u64 {
        (12 * self.vals.len() + 8 * self.indptr.len()) as u64
    }

    /// The work of one application (`z = L^-T L^-1 r`).
    pub fn work(&self) -> ComputeWork {
        let (n, nnz) = (self.rows() as u64, self.nnz() as u64);
        ComputeWork {
            bytes: 24 * nnz + 16 * (n + 1) + 24 * n,
            flops: 4 * nnz,
            launches: 2,
            chain: 2 * nnz,
            ..ComputeWork::default()
        }
    }

    /// `z[..n] = (L L^T)^-1 r[..n]` on host slices of at least `n` values (the caller
    /// checks the lengths: [`crate::Device::ic0_solve`]).
    pub fn solve(&self, r: &[f64], z: &mut [f64]) {
        let n = self.rows();
        let (r, z) = (&r[..n], &mut z[..n]);
        // L y = r (y in z), row by row.
        for i in 0..n {
            let (lo, hi) = (self.indptr[i], self.indptr[i + 1]);
            let mut s = r[i];
            for k in lo..hi - 1 {
                s -= self.vals[k] * z[self.cols[k] as usize];
            }
            z[i] = s / self.vals[hi - 1];
        }
        // L^T z = y, by columns of L^T (rows of L) from the last.
        for i in (0..n).rev() {
            let (lo, hi) = (self.indptr[i], self.indptr[i + 1]);
            let zi = z[i] / self.vals[hi - 1];
            z[i] = zi;
            for k in lo..hi - 1 {
                z[self.cols[k] as usize] -= self.vals[k] * zi;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_factors_are_errors() {
        let ok = LowerFactor::new(vec![0, 1, 3], vec![0, 0, 1], vec![2.0, -1.0, 3.0], 0.0);
        assert!(ok.is_ok());
        let cases = [
            (vec![0, 1, 3], vec![0, 1, 0], vec![2.0, -1.0, 3.0]),
            (vec![0, 1, 2], vec![0, 0, 1], vec![2.0, -1.0, 3.0]),
            (vec![0, 1, 3], vec![0, 0, 1], vec![2.0, -1.0, -3.0]),
            (vec![0, 1, 3], vec![0, 0, 1], vec![2.0, -1.0]),
            (vec![0, 0, 2], vec![0, 1], vec![2.0, 3.0]),
        ];
        for (p, c, v) in cases {
            assert!(LowerFactor::new(p, c, v, 0.0).is_err());
        }
    }

    /// `L L^T z = r` holds for the solve of a small dense-checked factor.
    #[test]
    fn solve_inverts_l_lt() {
        // L = [[2, 0, 0], [-1, 3, 0], [0.5, -1, 4]]
        let f = LowerFactor::new(
            vec![0, 1, 3, 6],
            vec![0, 0, 1, 0, 1, 2],
            vec![2.0, -1.0, 3.0, 0.5, -1.0, 4.0],
            0.0,
        )
        .unwrap();
        let l = [[2.0, 0.0, 0.0], [-1.0, 3.0, 0.0], [0.5, -1.0, 4.0]];
        let r = [1.0, -2.0, 0.25];
        let mut z = [0.0; 3];
        f.solve(&r, &mut z);
        for i in 0..3 {
            let mut s = 0.0;
            for j in 0..3 {
                let llt: f64 = (0..3).map(|m| l[i][m] * l[j][m]).sum();
                s += llt * z[j];
            }
            assert!((s - r[i]).abs() < 1e-12, "row {i}: {s} vs {}", r[i]);
        }
    }
}
