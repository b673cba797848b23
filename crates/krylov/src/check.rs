//! Checks on a global matrix before it is distributed: what CG needs of its input.

use sprs::CsMatView;

use crate::io::MtxMatrix;
use crate::{KrylovError, MemBudget, SolverConfig};

/// Check what an SPD system needs of a matrix as read, before it is converted to CSR (which
/// allocates by its declared rows): square, and at least as many stored entries as rows,
/// since every row of an SPD matrix holds its positive diagonal entry. A file declaring 3e9
/// rows with 3 entries fails here, whatever the memory budget.
pub fn check_spd_storage(m: &MtxMatrix) -> Result<(), KrylovError> {
    let (rows, cols) = (m.nrows(), m.ncols());
    if rows != cols {
        return Err(KrylovError::NotSquare { rows, cols });
    }
    if m.nnz_stored() < rows {
        return Err(KrylovError::MissingDiagonals {
            rows,
            entries: m.nnz_stored(),
        });
    }
    Ok(())
}

/// Bytes a solve of an `n`-row matrix with `nnz` entries on `ranks` ranks allocates beyond
/// the global matrix and vectors it starts from (an estimate by the sizes the input sets,
/// `None` on 64-bit overflow): every rank's block of the distributed matrix (32-bit columns,
/// values, row pointers, ghost maps), the method's work vectors (s-step methods: four bases
/// of k + 1 columns besides the common ones), and with the matrix powers kernel its depth-k
/// ghost zones (up to a copy of the matrix per extra level, at most one per other rank).
pub fn solve_memory_bytes(n: usize, nnz: usize, ranks: usize, cfg: &SolverConfig) -> Option<u64> {
    let (n, nnz, ranks, k) = (n as u64, nnz as u64, ranks as u64, cfg.k as u64);
    // Column (u32) and value (f64) per entry, a ghost map entry per entry at most, a row
    // pointer per row and rank.
    let matrix = nnz
        .checked_mul(4 + 8 + 8)?
        .checked_add(n.checked_add(ranks)?.checked_mul(8)?)?;
    let vectors = if cfg.method.is_s_step() {
        k.checked_add(1)?.checked_mul(4)?.checked_add(16)?
    } else {
        16
    };
    let mut bytes = matrix.checked_add(n.checked_mul(8)?.checked_mul(vectors)?)?;
    if cfg.mpk {
        let levels = k.min(ranks.saturating_sub(1));
        let copy = nnz.checked_mul(4 + 8)?.checked_add(n.checked_mul(8)?)?;
        bytes = bytes.checked_add(copy.checked_mul(levels)?)?;
    }
    Some(bytes)
}

/// Check [`solve_memory_bytes`] against `budget` before any rank builds anything.
pub fn check_solve_budget(
    n: usize,
    nnz: usize,
    ranks: usize,
    cfg: &SolverConfig,
    budget: MemBudget,
) -> Result<(), KrylovError> {
    let what = format!(
        "solving with {} (k = {}) on {ranks} rank(s) for {n} rows and {nnz} entries",
        cfg.method.name(),
        cfg.k
    );
    budget
        .check_opt(what, solve_memory_bytes(n, nnz, ranks, cfg))
        .map_err(KrylovError::OverBudget)
}

/// Check that `a` (CSR) is square and symmetric: every stored off-diagonal `(i, j, v)` has
/// a `(j, i)` equal to `v` up to a relative `1e-12` (values read from text may differ in the
/// last bits; an entry not stored is 0). Returns the first offending entry in row-major
/// order. O(nnz log(row length)).
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
            // Both triangles: a lower entry whose upper mirror is missing is asymmetric too.
            if j == i {
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
            crate::io::ReadLimits::new(MemBudget::new(1 << 36)),
        )
        .unwrap();
        let e = check_spd_storage(&m).unwrap_err();
        assert_eq!(
            e,
            KrylovError::MissingDiagonals {
                rows: 3_000_000_000,
                entries: 3
            }
        );
        assert!(e.to_string().contains("3000000000 rows"), "{e}");
        let m = read("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1\n2 2 1\n");
        assert!(matches!(
            check_spd_storage(&m),
            Err(KrylovError::NotSquare { .. })
        ));
        let m = read("%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 2\n2 2 2\n");
        check_spd_storage(&m).unwrap();
    }

    #[test]
    fn solve_budget_grows_with_k_and_names_what_was_asked() {
        let cfg = |method, k, mpk| SolverConfig {
            method,
            k,
            mpk,
            ..SolverConfig::default()
        };
        let cg = solve_memory_bytes(1000, 5000, 4, &cfg(crate::Method::Cg, 4, false)).unwrap();
        let s4 = solve_memory_bytes(1000, 5000, 4, &cfg(crate::Method::Cacg, 4, false)).unwrap();
        let s8 = solve_memory_bytes(1000, 5000, 4, &cfg(crate::Method::Cacg, 8, false)).unwrap();
        let mpk = solve_memory_bytes(1000, 5000, 4, &cfg(crate::Method::Cacg, 8, true)).unwrap();
        assert!(cg < s4 && s4 < s8 && s8 < mpk, "{cg} {s4} {s8} {mpk}");
        // At least the matrix's entries and one vector per common work vector.
        assert!(cg >= 5000 * 12 + 1000 * 8 * 16);
        let c = cfg(crate::Method::Cacg, 8, false);
        check_solve_budget(1000, 5000, 4, &c, MemBudget::new(s8)).unwrap();
        let e = check_solve_budget(1000, 5000, 4, &c, MemBudget::new(s8 - 1)).unwrap_err();
        assert!(matches!(e, KrylovError::OverBudget(_)), "{e}");
        assert!(
            e.to_string().starts_with(
                "solving with cacg (k = 8) on 4 rank(s) for 1000 rows and 5000 entries needs"
            ),
            "{e}"
        );
        assert!(solve_memory_bytes(usize::MAX, usize::MAX, 1, &c).is_none());
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
        // A lower entry whose upper mirror is missing: named at its own place.
        let lower = csr(3, &[(0, 0, 2.0), (1, 1, 2.0), (2, 0, -1.0), (2, 2, 2.0)]);
        assert_eq!(
            check_symmetric(lower.view()).unwrap_err(),
            KrylovError::NotSymmetric {
                row: 3,
                col: 1,
                value: -1.0,
                mirror: 0.0
            }
        );
        let rect = sprs::CsMat::<f64>::zero((2, 3));
        assert!(matches!(
            check_symmetric(rect.view()),
            Err(KrylovError::NotSquare { rows: 2, cols: 3 })
        ));
    }
}
