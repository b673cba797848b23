//! Checks on a global matrix before it is distributed: what an SPD solver needs of its input.

use sprs::CsMatView;

use crate::io::MtxMatrix;
use crate::MatrixError;

/// Check what an SPD system needs of a matrix as read, before it is converted to CSR (which
/// allocates by its declared rows): square, and at least as many stored entries as rows,
/// since every row of an SPD matrix holds its positive diagonal entry. A file declaring 3e9
/// rows with 3 entries fails here, whatever the memory budget.
///
/// # Errors
/// [`MatrixError::NotSquare`] or [`MatrixError::MissingDiagonals`].
pub fn check_spd_storage(m: &MtxMatrix) -> Result<(), MatrixError> {
    let (rows, cols) = (m.nrows(), m.ncols());
    if rows != cols {
        return Err(MatrixError::NotSquare { rows, cols });
    }
    if m.nnz_stored() < rows {
        return Err(MatrixError::MissingDiagonals {
            rows,
            entries: m.nnz_stored(),
        });
    }
    Ok(())
}

/// Check that `a` (CSR) is square and symmetric: every stored off-diagonal `(i, j, v)` has
/// a `(j, i)` equal to `v` up to a relative `1e-12` (values read from text may differ in the
/// last bits; an entry not stored is 0). Returns the first offending entry in row-major
/// order. O(nnz log(row length)).
///
/// # Errors
/// [`MatrixError::NotSquare`], [`MatrixError::NotCsr`], or [`MatrixError::NotSymmetric`]
/// naming the first offending entry.
pub fn check_symmetric(a: CsMatView<'_, f64>) -> Result<(), MatrixError> {
    let (rows, cols) = a.shape();
    if rows != cols {
        return Err(MatrixError::NotSquare { rows, cols });
    }
    if !a.is_csr() {
        return Err(MatrixError::NotCsr);
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
            // Both triangles: a lower entry whose upper mirror is missing is asymmetric too.
            if j == i {
                continue;
            }
            let m = entry(j, i);
            if (v - m).abs() > 1e-12 * v.abs().max(m.abs()) {
                return Err(MatrixError::NotSymmetric {
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

    fn read(text: &str) -> MtxMatrix {
        crate::io::read_matrix_market(text.as_bytes(), "m.mtx").unwrap()
    }

    #[test]
    fn spd_storage_needs_an_entry_per_row_before_any_row_is_allocated() {
        // The file: 3e9 rows, 3 entries (within a budget that lets it be read).
        let m = crate::io::read_matrix_market_with(
            "%%MatrixMarket matrix coordinate real symmetric\n3000000000 3000000000 3\n1 1 1\n2 2 1\n3 3 1\n"
                .as_bytes(),
            "m.mtx",
            crate::io::ReadLimits::new(castack_base::MemBudget::new(1 << 36)),
        )
        .unwrap();
        let e = check_spd_storage(&m).unwrap_err();
        assert_eq!(
            e,
            MatrixError::MissingDiagonals {
                rows: 3_000_000_000,
                entries: 3
            }
        );
        assert!(e.to_string().contains("3000000000 rows"), "{e}");
        let m = read("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1\n2 2 1\n");
        assert!(matches!(
            check_spd_storage(&m),
            Err(MatrixError::NotSquare { .. })
        ));
        let m = read("%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 2\n2 2 2\n");
        check_spd_storage(&m).unwrap();
    }

    #[test]
    fn symmetric_passes_and_asymmetric_is_named() {
        let ok = csr(2, &[(0, 0, 2.0), (0, 1, -1.0), (1, 0, -1.0), (1, 1, 2.0)]);
        assert!(check_symmetric(ok.view()).is_ok());
        let bad = csr(2, &[(0, 0, 2.0), (0, 1, -1.0), (1, 1, 2.0)]);
        let e = check_symmetric(bad.view()).unwrap_err();
        assert!(
            matches!(e, MatrixError::NotSymmetric { row: 1, col: 2, .. }),
            "{e}"
        );
        // A lower entry whose upper mirror is missing: named at its own place.
        let lower = csr(3, &[(0, 0, 2.0), (1, 1, 2.0), (2, 0, -1.0), (2, 2, 2.0)]);
        assert_eq!(
            check_symmetric(lower.view()).unwrap_err(),
            MatrixError::NotSymmetric {
                row: 3,
                col: 1,
                value: -1.0,
                mirror: 0.0
            }
        );
        let rect = sprs::CsMat::<f64>::zero((2, 3));
        assert!(matches!(
            check_symmetric(rect.view()),
            Err(MatrixError::NotSquare { rows: 2, cols: 3 })
        ));
    }
}
