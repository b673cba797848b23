//! Checks on a global matrix before it is distributed: what CG needs of its input.

use sprs::CsMatView;

use crate::KrylovError;

/// Check that `a` (CSR) is square and symmetric: every stored `(i, j, v)` has a stored
/// `(j, i)` equal to `v` up to a relative `1e-12` (values read from text may differ in the
/// last bits). Returns the first offending entry. O(nnz log(row length)).
pub fn check_symmetric(a: CsMatView<'_, f64>) -> Result<(), KrylovError> {
    let (rows, cols) = a.shape();
    if rows != cols {
        return Err(KrylovError::NotSquare { rows, cols });
    }
    if !a.is_csr() {
        return Err(KrylovError::InvalidConfig(
            "the global matrix must be in CSR storage".into(),
        ));
    }
    let indptr = a.indptr();
    let indptr = indptr.raw_storage();
    let (idx, val) = (a.indices(), a.data());
    let entry = |i: usize, j: usize| -> f64 {
        let (lo, hi) = (indptr[i], indptr[i + 1]);
        // Rows may hold duplicates only after summing; sprs CSR from triplets is sorted.
        let row = &idx[lo..hi];
        match row.binary_search(&j) {
            Ok(k) => val[lo + k],
            Err(_) => row
                .iter()
                .position(|&c| c == j)
                .map_or(0.0, |k| val[lo + k]),
        }
    };
    for i in 0..rows {
        for k in indptr[i]..indptr[i + 1] {
            let (j, v) = (idx[k], val[k]);
            if j <= i {
                continue;
            }
            let m = entry(j, i);
            if (v - m).abs() > 1e-12 * v.abs().max(m.abs()) {
                return Err(KrylovError::NotSymmetric {
                    row: i + 1,
                    col: j + 1,
                    value: v,
                    mirror: m,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprs::TriMat;

    fn csr(n: usize, entries: &[(usize, usize, f64)]) -> sprs::CsMat<f64> {
        let mut t = TriMat::new((n, n));
        for &(i, j, v) in entries {
            t.add_triplet(i, j, v);
        }
        t.to_csr()
    }

    #[test]
    fn symmetric_passes_and_asymmetric_is_named() {
        let ok = csr(2, &[(0, 0, 2.0), (0, 1, -1.0), (1, 0, -1.0), (1, 1, 2.0)]);
        assert!(check_symmetric(ok.view()).is_ok());
        let bad = csr(2, &[(0, 0, 2.0), (0, 1, -1.0), (1, 1, 2.0)]);
        let e = check_symmetric(bad.view()).unwrap_err();
        assert!(
            matches!(e, KrylovError::NotSymmetric { row: 1, col: 2, .. }),
            "{e}"
        );
        let rect = sprs::CsMat::<f64>::zero((2, 3));
        assert!(matches!(
            check_symmetric(rect.view()),
            Err(KrylovError::NotSquare { rows: 2, cols: 3 })
        ));
    }
}
