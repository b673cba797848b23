//! `bjacobi_ic0`: block Jacobi with one block per rank, each block factored by incomplete
//! Cholesky without fill, `A_rr ~ L L^T` with `L` on the pattern of `tril(A_rr)`.
//!
//! Reference: J. A. Meijerink and H. A. van der Vorst, "An iterative solution method for
//! linear systems of which the coefficient matrix is a symmetric M-matrix", Math. Comp.
//! 31(137), 1977 (IC(0)); T. A. Manteuffel, "An incomplete factorization technique for
//! positive definite linear systems", Math. Comp. 34(150), 1980 (the diagonal shift).
//!
//! The block is this rank's rows and columns of the Jacobi-scaled matrix `Â = S A S`
//! (couplings to other ranks' rows are dropped: block Jacobi). The factorization runs on
//! the host in setup, row by row (the up-looking IC(0) of Saad, "Iterative Methods for
//! Sparse Linear Systems", 2nd ed., Alg. 10.4 restricted to the lower triangle). Where a
//! pivot is not positive (IC(0) exists for M- and H-matrices, not for every SPD matrix),
//! the block is factored again as `Â_rr + alpha I` (Manteuffel's shift; `Â`'s diagonal is
//! 1, so this is his `A + alpha diag(A)`), `alpha` = 1e-3, 2e-3, 4e-3, ... : once
//! `1 + alpha` exceeds every row's off-diagonal sum the shifted block is strictly
//! diagonally dominant, an H-matrix, whose IC(0) exists, so the search ends. The ranks
//! agree on the largest shift any of them needed (one setup reduction) and every rank
//! factors with it: the report's `precond_shift`.
//!
//! Cost: setup `O(sum over rows of (row entries)^2)` on the host; each application one
//! forward and one backward triangular solve on this rank's rows, no communication:
//! `24 nnz_L + 40 n + 16` bytes, `4 nnz_L` flops, a dependent chain of `2 nnz_L`
//! additions ([`LowerFactor::work`]). Sequential by nature: it runs on the host's memory
//! ([`castack_linalg::Device::ic0_solve`]; a GPU needs a triangular solve of its own, so
//! `--device cuda` refuses it).
//!
//! Why our own: sprs has no incomplete factorization, and the factor must be built from
//! the distributed block of the scaled matrix and applied through the device layer.

use castack_linalg::dist::{DistCsr, SpmvMode};
use castack_linalg::LowerFactor;

/// First shift tried after an unshifted factorization breaks down.
pub(crate) const FIRST_SHIFT: f64 = 1e-3;

/// An IC(0) factor `L` of one rank's diagonal block (the device layer's
/// [`LowerFactor`], applied by [`castack_linalg::Device::ic0_solve`]).
pub(crate) type Ic0Factor = LowerFactor;

/// The lower triangle of one rank's diagonal block, rows sorted by column, duplicates
/// summed: what the factorization reads.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LowerBlock {
    indptr: Vec<usize>,
    cols: Vec<u32>,
    vals: Vec<f64>,
    /// Per row, the sum of `|a_ij|` over the block's off-diagonal entries (both
    /// triangles): where a shift makes the block diagonally dominant.
    offsum: Vec<f64>,
}

impl LowerBlock {
    /// The block of this rank's rows and columns of `a` (host CSR, local numbering).
    pub(crate) fn of(a: &DistCsr) -> Self {
        let (indptr, cols, vals) = a.local_csr();
        let n = a.n_local();
        // The local column of an owned input slot, if it is one.
        let base = match a.mode() {
            SpmvMode::Halo => 0,
            SpmvMode::Allgather => n + a.row_start(),
        };
        let own = |c: u32| (c as usize).checked_sub(base).filter(|&j| j < n);
        let mut out_ptr = Vec::with_capacity(n + 1);
        out_ptr.push(0);
        let (mut out_cols, mut out_vals) = (Vec::new(), Vec::new());
        let mut offsum = vec![0.0; n];
        let mut row: Vec<(u32, f64)> = Vec::new();
        for i in 0..n {
            row.clear();
            for k in indptr[i]..indptr[i + 1] {
                if let Some(j) = own(cols[k]) {
                    if j != i {
                        offsum[i] += vals[k].abs();
                    }
                    if j <= i {
                        row.push((j as u32, vals[k]));
                    }
                }
            }
            // Stable: duplicates are summed in storage order.
            row.sort_by_key(|e| e.0);
            for &(j, v) in &row {
                if out_cols.len() > out_ptr[i] && out_cols.last() == Some(&j) {
                    *out_vals.last_mut().expect("a value per column") += v;
                } else {
                    out_cols.push(j);
                    out_vals.push(v);
                }
            }
            out_ptr.push(out_cols.len());
        }
        Self {
            indptr: out_ptr,
            cols: out_cols,
            vals: out_vals,
            offsum,
        }
    }

    /// Rows of the block.
    pub(crate) fn rows(&self) -> usize {
        self.indptr.len() - 1
    }

    /// The factor at the least shift `alpha` of the sequence `from, 2 from, 4 from, ...`
    /// (`from = 0`: `0, FIRST_SHIFT, 2 FIRST_SHIFT, ...`) for which IC(0) of
    /// `block + alpha diag(block)` succeeds; `None` when even a shift past the
    /// diagonal-dominance bound fails (possible only with non-finite entries).
    pub(crate) fn least_shift_from(&self, from: f64) -> Option<Ic0Factor> {
        if from == 0.0 {
            if let Some(f) = self.factor(0.0) {
                return Some(f);
            }
        }
        let bound = 2.0 * self.dominant_shift().max(FIRST_SHIFT);
        let mut alpha = from.max(FIRST_SHIFT);
        while alpha.is_finite() && alpha <= bound * 2.0 {
            if let Some(f) = self.factor(alpha) {
                return Some(f);
            }
            alpha *= 2.0;
        }
        None
    }

    /// IC(0) of `block + alpha diag(block)`, or `None` where a pivot is not positive or
    /// not finite. A shift that makes every row strictly diagonally dominant always
    /// succeeds (`least_shift_from` relies on it; see the module doc).
    pub(crate) fn factor(&self, alpha: f64) -> Option<Ic0Factor> {
        let n = self.rows();
        let mut vals = self.vals.clone();
        // Position of column j in the row being factored (usize::MAX: not in its pattern).
        let mut pos = vec![usize::MAX; n];
        for i in 0..n {
            let (lo, hi) = (self.indptr[i], self.indptr[i + 1]);
            for k in lo..hi {
                pos[self.cols[k] as usize] = k;
            }
            let has_diag = hi > lo && self.cols[hi - 1] as usize == i;
            if !has_diag {
                return None;
            }
            // Off-diagonal entries, left to right: l_ij = (a_ij - sum_{m<j} l_im l_jm) / l_jj.
            for k in lo..hi - 1 {
                let j = self.cols[k] as usize;
                let (jlo, jhi) = (self.indptr[j], self.indptr[j + 1]);
                let mut s = vals[k];
                for m in jlo..jhi - 1 {
                    let p = pos[self.cols[m] as usize];
                    if p != usize::MAX {
                        s -= vals[p] * vals[m];
                    }
                }
                vals[k] = s / vals[jhi - 1];
            }
            let mut d = vals[hi - 1] * (1.0 + alpha);
            for v in &vals[lo..hi - 1] {
                d -= v * v;
            }
            for k in lo..hi {
                pos[self.cols[k] as usize] = usize::MAX;
            }
            if !(d.is_finite() && d > 0.0) {
                return None;
            }
            vals[hi - 1] = d.sqrt();
        }
        // The pattern is the block's lower triangle, each row ending with its diagonal,
        // and every pivot was checked positive and finite above, so this is a factor.
        LowerFactor::new(self.indptr.clone(), self.cols.clone(), vals, alpha).ok()
    }

    /// A shift that makes every row strictly diagonally dominant: an upper bound for the
    /// shift search.
    pub(crate) fn dominant_shift(&self) -> f64 {
        let mut worst = 0.0f64;
        for i in 0..self.rows() {
            let d = self.vals[self.indptr[i + 1] - 1];
            worst = worst.max(self.offsum[i] / d);
        }
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Partition;
    use castack_collectives::ThreadUniverse;

    /// This one rank's block of `g`.
    fn block_of(g: &sprs::CsMat<f64>) -> LowerBlock {
        let part = Partition::rows(g.rows(), 1);
        ThreadUniverse::new(1)
            .unwrap()
            .run(|comm| {
                let a = DistCsr::from_global(comm, g.view(), &part, SpmvMode::Halo).unwrap();
                LowerBlock::of(&a)
            })
            .unwrap()
            .remove(0)
    }

    fn dense_of(f: &Ic0Factor) -> Vec<Vec<f64>> {
        let n = f.rows();
        let (indptr, cols, vals) = f.csr();
        let mut l = vec![vec![0.0; n]; n];
        for (i, row) in l.iter_mut().enumerate() {
            for k in indptr[i]..indptr[i + 1] {
                row[cols[k] as usize] = vals[k];
            }
        }
        l
    }

    /// On a tridiagonal matrix IC(0) is the exact Cholesky factor (no fill exists), so
    /// `L L^T` reproduces the matrix and the solve inverts it.
    #[test]
    fn tridiagonal_factor_is_exact_cholesky() {
        let n = 9;
        let mut g = sprs::TriMat::new((n, n));
        for i in 0..n {
            g.add_triplet(i, i, 2.5);
            if i + 1 < n {
                g.add_triplet(i, i + 1, -1.0);
                g.add_triplet(i + 1, i, -1.0);
            }
        }
        let g = g.to_csr();
        let f = block_of(&g).least_shift_from(0.0).unwrap();
        assert_eq!(f.shift(), 0.0);
        let l = dense_of(&f);
        for i in 0..n {
            for j in 0..n {
                let llt: f64 = (0..n).map(|m| l[i][m] * l[j][m]).sum();
                let want = g.get(i, j).copied().unwrap_or(0.0);
                assert!((llt - want).abs() < 1e-14, "({i},{j}): {llt} vs {want}");
            }
        }
        let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).sin()).collect();
        let mut z = vec![0.0; n];
        f.solve(&b, &mut z);
        for (i, bi) in b.iter().enumerate() {
            let az: f64 = (0..n)
                .map(|j| g.get(i, j).copied().unwrap_or(0.0) * z[j])
                .sum();
            assert!((az - bi).abs() < 1e-13);
        }
    }

    /// A symmetric positive definite matrix that is not an H-matrix: its unshifted IC(0)
    /// meets a negative pivot, the search finds the least working shift of the doubling
    /// sequence, and that shift is below the diagonal-dominance bound.
    #[test]
    fn breakdown_is_shifted_to_the_least_working_shift() {
        // I + 0.6 C for a signed 4-cycle C (eigenvalues 1 +- 0.6 sqrt 2 > 0): the last
        // row's pivot is 1 - 0.36 - 0.823 < 0.
        let dense = [
            [1.0, 0.6, 0.0, 0.6],
            [0.6, 1.0, 0.6, 0.0],
            [0.0, 0.6, 1.0, -0.6],
            [0.6, 0.0, -0.6, 1.0],
        ];
        let n = 4;
        let mut g = sprs::TriMat::new((n, n));
        for (i, row) in dense.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                if v != 0.0 {
                    g.add_triplet(i, j, v);
                }
            }
        }
        let g = g.to_csr();
        let block = block_of(&g);
        assert!(block.factor(0.0).is_none());
        let f = block.least_shift_from(0.0).unwrap();
        assert!(f.shift() > 0.0);
        assert!(block.factor(f.shift() / 2.0).is_none() || f.shift() == FIRST_SHIFT);
        assert!(f.shift() <= 2.0 * block.dominant_shift());
        // The factor is the exact IC(0) of the shifted block: L L^T matches it on the
        // pattern.
        let l = dense_of(&f);
        for i in 0..n {
            for j in 0..n {
                if dense[i][j] != 0.0 {
                    let llt: f64 = (0..n).map(|m| l[i][m] * l[j][m]).sum();
                    let want = dense[i][j] * if i == j { 1.0 + f.shift() } else { 1.0 };
                    assert!((llt - want).abs() < 1e-12, "({i},{j})");
                }
            }
        }
    }
}
