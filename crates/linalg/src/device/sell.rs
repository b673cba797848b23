//! SELL-C-sigma: the sliced ELLPACK layout of a CSR block for GPU SpMV.
//!
//! Reference: Kreutzer, Hager, Wellein, Fehske, Bishop, *A unified sparse matrix data format
//! for efficient general sparse matrix-vector multiplication on modern processors with wide
//! SIMD units*, SIAM J. Sci. Comput. 36(5), 2014.
//!
//! Rows are sorted by decreasing length within windows of `sigma` rows, then cut into
//! slices of `C` consecutive (sorted) rows. A slice is stored column-major and padded to its
//! longest row, so the `C` threads of a slice read consecutive addresses at every step.
//! Each row keeps its own length, so a kernel loops over the row's real entries only, in
//! the CSR order: the same summation order as the CPU kernel, hence the same bits. The
//! sorted position `p` holds original row `perm[p]`.
//!
//! Cost: building is O(rows log sigma + C * sum of slice widths); storage is
//! `12 * padded + 8 * rows` bytes (`padded >= nnz`, see [`Sell::fill`]). An SpMV reads the
//! real entries, the row lengths and the permutation: `12 nnz + 8 rows + 8 (rows / C)`
//! bytes of matrix data.

use super::{CsrRef, DeviceError};

/// A CSR block in SELL-C-sigma layout (host memory).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sell {
    /// Rows per slice.
    pub c: usize,
    /// Sorting window in rows.
    pub sigma: usize,
    /// Rows of the block.
    pub rows: usize,
    /// Length of the input vector.
    pub ncols: usize,
    /// Offset of each slice's first value, `slices + 1` of them.
    pub slice_ptr: Vec<u64>,
    /// Length of the row at each sorted position (padding positions: 0).
    pub row_len: Vec<u32>,
    /// Original row at each sorted position (`rows` of them; padding positions absent).
    pub perm: Vec<u32>,
    /// Columns, column-major per slice (padding: 0, never read).
    pub cols: Vec<u32>,
    /// Values, laid out like `cols` (padding: 0, never read).
    pub vals: Vec<f64>,
}

impl Sell {
    /// Convert a validated CSR block; `c` and `sigma` must be at least 1, `sigma` a
    /// multiple of `c` or 1 (no sorting).
    pub(crate) fn from_csr(a: CsrRef<'_>, c: usize, sigma: usize) -> Result<Self, DeviceError> {
        a.validate()?;
        if c == 0 || sigma == 0 || (sigma > 1 && !sigma.is_multiple_of(c)) {
            return Err(DeviceError::InvalidCsr(format!(
                "SELL-C-sigma needs C >= 1 and sigma = 1 or a multiple of C (got C = {c}, sigma = {sigma})"
            )));
        }
        let rows = a.rows();
        let len = |r: usize| a.indptr[r + 1] - a.indptr[r];
        let mut perm: Vec<u32> = (0..rows as u32).collect();
        if sigma > 1 {
            for w in perm.chunks_mut(sigma) {
                // Stable: equal lengths keep their original order.
                w.sort_by_key(|&r| std::cmp::Reverse(len(r as usize)));
            }
        }
        let slices = rows.div_ceil(c);
        let mut slice_ptr = Vec::with_capacity(slices + 1);
        slice_ptr.push(0u64);
        let mut row_len = vec![0u32; slices * c];
        for (s, chunk) in perm.chunks(c).enumerate() {
            let mut width = 0;
            for (lane, &r) in chunk.iter().enumerate() {
                let l = len(r as usize);
                row_len[s * c + lane] = l as u32;
                width = width.max(l);
            }
            slice_ptr.push(slice_ptr[s] + (width * c) as u64);
        }
        let total = slice_ptr[slices] as usize;
        let (mut cols, mut vals) = (vec![0u32; total], vec![0.0; total]);
        for (p, &r) in perm.iter().enumerate() {
            let (s, lane) = (p / c, p % c);
            let base = slice_ptr[s] as usize + lane;
            for (j, k) in (a.indptr[r as usize]..a.indptr[r as usize + 1]).enumerate() {
                cols[base + j * c] = a.cols[k];
                vals[base + j * c] = a.vals[k];
            }
        }
        Ok(Self {
            c,
            sigma,
            rows,
            ncols: a.ncols,
            slice_ptr,
            row_len,
            perm,
            cols,
            vals,
        })
    }

    /// Stored values over real entries (1 = no padding).
    #[cfg(test)]
    pub(crate) fn fill(&self) -> f64 {
        let nnz: u64 = self.row_len.iter().map(|&l| u64::from(l)).sum();
        self.vals.len() as f64 / nnz.max(1) as f64
    }

    /// `y = A x` on the host, with the GPU kernel's loop (one sorted row at a time, its
    /// entries in order): the reference the layout is tested against. Cost O(nnz).
    #[cfg(test)]
    pub(crate) fn spmv_host(&self, x: &[f64], y: &mut [f64]) {
        for (p, &r) in self.perm.iter().enumerate() {
            let (s, lane) = (p / self.c, p % self.c);
            let base = self.slice_ptr[s] as usize + lane;
            let mut acc = 0.0;
            for j in 0..self.row_len[p] as usize {
                let k = base + j * self.c;
                acc += self.vals[k] * x[self.cols[k] as usize];
            }
            y[r as usize] = acc;
        }
    }
}
