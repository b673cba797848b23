//! Checks before a solve is set up: whether its memory fits the budget. (What a matrix
//! itself must satisfy, square, symmetric, a diagonal entry per row, is checked by
//! [`castack_sparse::check`].)

use crate::{KrylovError, MemBudget, SolverConfig};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
