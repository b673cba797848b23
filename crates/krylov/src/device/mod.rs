//! Compute devices: the kernels a solver runs on one rank's data, behind one trait.
//!
//! [`Device`] is what the CG family needs from a rank's memory and processor: device
//! vectors (allocate, upload, download, copy), CSR SpMV, fused reductions whose results come
//! back to the host (a set of dot products, or a whole Gram block `X^T Y`, in one kernel),
//! the axpy family (including the fused CG residual update with its two norms), linear
//! combinations with small host coefficients (the s-step updates `x += S a`), and the
//! Chebyshev three-term basis step. [`Cpu`] implements it by delegating to its existing
//! kernels (same bits as calling them directly); `CudaDevice` (feature `cuda`, module
//! `cuda`) implements it with NVRTC-compiled kernels through cudarc.
//!
//! # How a solver uses it (phase 2; the solvers still call [`Cpu`] directly today)
//!
//! A solver is generic over `D: Device`. At set-up it uploads the scaled CSR block once
//! ([`Device::upload_csr`]), allocates every work vector with [`Device::zeros`] (solver loops
//! never allocate), and uploads `b` and the Jacobi weights. In the loop it only launches
//! kernels; the halo exchange downloads the owned send values and uploads the received ghost
//! values between [`Device::spmv`] calls (a rank with one block and no ghosts exchanges
//! nothing). The small k x k work (Cholesky of the Gram block, change of basis, the
//! coefficient recurrences) stays on the host in `dense.rs`; its results go back as the
//! `coef` of [`Device::lincomb`].
//!
//! # Synchronisation policy
//!
//! - Scalars stay device-side or travel as kernel arguments: `alpha`, `beta`, `eta`, `zeta`
//!   and the `lincomb` coefficients are passed by value (or copied host-to-device
//!   asynchronously), so launching never waits for the GPU.
//! - The only blocking device-to-host copies are the results of reductions, and each
//!   reduction is ONE kernel plus ONE copy of its few results: [`Device::dots`] returns a set of
//!   dot products, [`Device::gram`] a whole reduced Gram block, [`Device::axpy_dots`] the two
//!   norms of the CG update. An s-step method therefore synchronises once per outer step
//!   (the Gram block it must reduce across ranks anyway), classic CG twice per iteration
//!   (`p^T A p` and `r^T r`, which the global allreduce needs on the host in any case).
//! - [`Device::download`] and [`Device::synchronize`] wait for all queued work.
//!
//! # Determinism
//!
//! Every reduction is deterministic: the CPU sums fixed chunks in order
//! ([`crate::cpu::CHUNK`]); the GPU sums fixed block partials in a fixed order. Elementwise
//! kernels give the same bits on both (the GPU kernels are compiled without FMA
//! contraction); reductions and multi-lane SpMV rows agree to rounding.
//!
//! Cost model (n values per vector, nnz entries): SpMV reads `12 nnz + 8 (rows + 1)` bytes
//! of the matrix plus `x` and writes `8 rows`; `dots` with m pairs reads `16 m n` bytes,
//! `gram` with `nx x ny` vectors reads `8 n nx (1 + ny)` bytes on the GPU (each X vector
//! once, the Y vectors once per X vector; a tiled kernel reading each vector once is not
//! written yet).

mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod sell;

use thiserror::Error;

#[cfg(doc)]
use crate::Cpu;

/// Whether this build of the crate includes the CUDA device (feature `cuda`).
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

/// What can go wrong on a device.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// No CUDA driver library on this machine.
    #[error("no NVIDIA driver: the CUDA driver library (libcuda.so) was not found, so --device cuda cannot run on this machine")]
    NoDriver,
    /// The driver found no usable CUDA device.
    #[error("the NVIDIA driver reports no CUDA device with ordinal {ordinal} ({found} found)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        found: usize,
    },
    /// NVRTC (the runtime compiler) is not installed.
    #[error("NVRTC (libnvrtc.so.13) was not found: install it with `pip install nvidia-cuda-nvrtc==13.0.88` and put its nvidia/cu13/lib on LD_LIBRARY_PATH")]
    NoNvrtc,
    /// NVRTC rejected a kernel source.
    #[error("NVRTC failed to compile the CUDA kernels: {log}")]
    Compile {
        /// The compiler's log.
        log: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error in {op}: {detail}")]
    Driver {
        /// The operation.
        op: &'static str,
        /// The driver's error.
        detail: String,
    },
    /// Operands of an operation have inconsistent lengths.
    #[error("device {op}: operand has {got} values, expected {expected}")]
    LengthMismatch {
        /// The operation.
        op: &'static str,
        /// The expected length.
        expected: usize,
        /// The actual length.
        got: usize,
    },
    /// A CSR block that is not well formed (checked before any kernel reads it).
    #[error("invalid CSR block: {0}")]
    InvalidCsr(String),
}

/// A host CSR block: `indptr` (rows + 1 offsets), `cols` (column of each entry, addressing
/// an input vector of `ncols` values) and `vals`.
#[derive(Debug, Clone, Copy)]
pub struct CsrRef<'a> {
    /// Row offsets, `rows + 1` of them, non-decreasing, starting at 0.
    pub indptr: &'a [usize],
    /// Column of each entry, `< ncols`.
    pub cols: &'a [u32],
    /// Value of each entry.
    pub vals: &'a [f64],
    /// Length of the input vector.
    pub ncols: usize,
}

impl CsrRef<'_> {
    /// Rows of the block.
    pub fn rows(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    /// Check the structure, so that no kernel can read out of bounds. Cost: O(rows + nnz).
    pub fn validate(&self) -> Result<(), DeviceError> {
        let bad = |m: String| Err(DeviceError::InvalidCsr(m));
        let Some((&first, _)) = self.indptr.split_first() else {
            return bad("indptr is empty (it needs rows + 1 offsets)".into());
        };
        let nnz = self.indptr[self.indptr.len() - 1];
        if first != 0 {
            return bad(format!("indptr starts at {first}, not 0"));
        }
        if let Some(r) = self.indptr.windows(2).position(|w| w[0] > w[1]) {
            return bad(format!("indptr decreases at row {r}"));
        }
        if self.cols.len() != nnz || self.vals.len() != nnz {
            return bad(format!(
                "indptr ends at {nnz} but there are {} columns and {} values",
                self.cols.len(),
                self.vals.len()
            ));
        }
        if let Some(k) = self.cols.iter().position(|&c| c as usize >= self.ncols) {
            return bad(format!(
                "entry {k} has column {} but the input vector has {} values",
                self.cols[k], self.ncols
            ));
        }
        if u32::try_from(self.rows()).is_err() || i32::try_from(self.rows()).is_err() {
            return bad(format!(
                "{} rows exceed the kernels' 31-bit row index",
                self.rows()
            ));
        }
        Ok(())
    }
}

/// An owned host CSR block.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCsr {
    /// Row offsets.
    pub indptr: Vec<usize>,
    /// Columns.
    pub cols: Vec<u32>,
    /// Values.
    pub vals: Vec<f64>,
    /// Length of the input vector.
    pub ncols: usize,
}

impl HostCsr {
    /// The block as a [`CsrRef`].
    pub fn as_csr_ref(&self) -> CsrRef<'_> {
        CsrRef {
            indptr: &self.indptr,
            cols: &self.cols,
            vals: &self.vals,
            ncols: self.ncols,
        }
    }

    /// A random irregular `rows x ncols` block for kernel checks: row lengths spread
    /// log-uniformly over `0..=max_row` (some rows empty, a few long ones), columns and
    /// values (in `[-1, 1)`) uniform, from the SplitMix64 stream `seed`. Not symmetric: it
    /// exercises SpMV load imbalance, not a solver. Cost: O(rows + nnz).
    pub fn random_irregular(rows: usize, ncols: usize, max_row: usize, seed: u64) -> Self {
        let mut rng = crate::gen::SplitMix64::new(seed);
        let ncols = ncols.max(1);
        let span = ((max_row + 1) as f64).log2();
        let mut indptr = Vec::with_capacity(rows + 1);
        indptr.push(0);
        let (mut cols, mut vals) = (Vec::new(), Vec::new());
        for _ in 0..rows {
            let len = ((span * rng.next_f64()).exp2() - 1.0).round() as usize;
            for _ in 0..len.min(max_row) {
                cols.push((rng.next_u64() % ncols as u64) as u32);
                vals.push(2.0 * rng.next_f64() - 1.0);
            }
            indptr.push(cols.len());
        }
        Self {
            indptr,
            cols,
            vals,
            ncols,
        }
    }

    /// The CSR arrays of a square sparse matrix (e.g. from [`crate::gen`]), with 32-bit
    /// columns; `None` when it has more than `u32::MAX` columns.
    pub fn from_csmat(a: &sprs::CsMat<f64>) -> Option<Self> {
        let a = a.to_csr();
        let cols = a
            .indices()
            .iter()
            .map(|&c| u32::try_from(c).ok())
            .collect::<Option<Vec<u32>>>()?;
        Some(Self {
            indptr: a.indptr().raw_storage().to_vec(),
            cols,
            vals: a.data().to_vec(),
            ncols: a.cols(),
        })
    }
}

/// Check that an operand of `op` has `expected` values.
pub(crate) fn check_len(op: &'static str, expected: usize, got: usize) -> Result<(), DeviceError> {
    if expected == got {
        Ok(())
    } else {
        Err(DeviceError::LengthMismatch { op, expected, got })
    }
}

/// The kernels of one rank's compute device. See the module documentation for the
/// synchronisation policy. Every operation checks its operands' lengths and returns
/// [`DeviceError::LengthMismatch`] instead of reading out of bounds.
pub trait Device {
    /// A vector of `f64` in the device's memory.
    type Vector;
    /// A CSR block in the device's memory.
    type Matrix;

    /// Short name (`cpu`, `cuda`).
    fn name(&self) -> &'static str;
    /// Values in a vector.
    fn vec_len(v: &Self::Vector) -> usize;
    /// `(rows, ncols)` of a matrix: `y` has `rows` values, `x` has `ncols`.
    fn shape(a: &Self::Matrix) -> (usize, usize);

    /// A vector of `n` zeros.
    fn zeros(&mut self, n: usize) -> Result<Self::Vector, DeviceError>;
    /// A new vector holding `host`.
    fn upload(&mut self, host: &[f64]) -> Result<Self::Vector, DeviceError>;
    /// Overwrite `dst` with `host` (same length).
    fn write(&mut self, host: &[f64], dst: &mut Self::Vector) -> Result<(), DeviceError>;
    /// Copy `src` to `host` (same length); waits for queued work.
    fn download(&mut self, src: &Self::Vector, host: &mut [f64]) -> Result<(), DeviceError>;
    /// `dst = src`.
    fn copy(&mut self, src: &Self::Vector, dst: &mut Self::Vector) -> Result<(), DeviceError>;
    /// Upload a CSR block (validated first).
    fn upload_csr(&mut self, a: CsrRef<'_>) -> Result<Self::Matrix, DeviceError>;

    /// `y = A x`.
    fn spmv(
        &mut self,
        a: &Self::Matrix,
        x: &Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `y += alpha x`.
    fn axpy(
        &mut self,
        alpha: f64,
        x: &Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `y = x + beta y` (the search-direction update `p = r + beta p`).
    fn xpay(
        &mut self,
        x: &Self::Vector,
        beta: f64,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `y += alpha x`, returning `[y^T y, sum_i y_i^2 w_i]` (the fused CG residual update
    /// with its norm and weighted norm); one kernel, one copy of two values to the host.
    fn axpy_dots(
        &mut self,
        alpha: f64,
        x: &Self::Vector,
        y: &mut Self::Vector,
        w: &Self::Vector,
    ) -> Result<[f64; 2], DeviceError>;
    /// `y += sum_j coef[j] cols[j]`, accumulated in the order of `j`.
    fn lincomb(
        &mut self,
        coef: &[f64],
        cols: &[&Self::Vector],
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `out[p] = pairs[p].0 ^T pairs[p].1` for every pair, in one fused reduction.
    fn dots(
        &mut self,
        pairs: &[(&Self::Vector, &Self::Vector)],
        out: &mut [f64],
    ) -> Result<(), DeviceError>;
    /// The Gram block `out[i * y.len() + j] = x[i]^T y[j]` (row-major), in one fused
    /// reduction (`gram(ys, ys)` is `Y^T Y`).
    fn gram(
        &mut self,
        x: &[&Self::Vector],
        y: &[&Self::Vector],
        out: &mut [f64],
    ) -> Result<(), DeviceError>;
    /// The Chebyshev three-term step ([`crate::basis::Chebyshev`]): `out = eta a_sj - zeta
    /// sj` when `prev` is `None` (the first step), else `out = 2 (eta a_sj - zeta sj) - prev`.
    fn chebyshev_step(
        &mut self,
        eta: f64,
        zeta: f64,
        a_sj: &Self::Vector,
        sj: &Self::Vector,
        prev: Option<&Self::Vector>,
        out: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// Wait for all queued work.
    fn synchronize(&mut self) -> Result<(), DeviceError>;
}

/// The length checks every backend runs before an operation (one place, so backends agree).
pub(crate) mod checks {
    use super::{check_len, DeviceError};

    /// `dots`: every pair has equal lengths, `out` one slot per pair.
    pub(crate) fn dots(lens: &[(usize, usize)], out: usize) -> Result<(), DeviceError> {
        check_len("dots (results)", lens.len(), out)?;
        lens.iter().try_for_each(|&(a, b)| check_len("dots", a, b))
    }

    /// `gram`: all vectors of one length, `out` `nx * ny` slots.
    pub(crate) fn gram(x: &[usize], y: &[usize], out: usize) -> Result<(), DeviceError> {
        check_len("gram (results)", x.len() * y.len(), out)?;
        if let Some(&n) = x.first().or(y.first()) {
            x.iter()
                .chain(y)
                .try_for_each(|&m| check_len("gram", n, m))?;
        }
        Ok(())
    }

    /// `lincomb`: one coefficient per column, all columns as long as `y`.
    pub(crate) fn lincomb(coef: usize, cols: &[usize], y: usize) -> Result<(), DeviceError> {
        check_len("lincomb (coefficients)", cols.len(), coef)?;
        cols.iter().try_for_each(|&m| check_len("lincomb", y, m))
    }

    /// `spmv`: `x` has `ncols`, `y` has `rows` values.
    pub(crate) fn spmv(shape: (usize, usize), x: usize, y: usize) -> Result<(), DeviceError> {
        check_len("spmv (x)", shape.1, x)?;
        check_len("spmv (y)", shape.0, y)
    }

    /// Chebyshev step: every operand as long as `out`.
    pub(crate) fn chebyshev(
        a: usize,
        s: usize,
        prev: Option<usize>,
        out: usize,
    ) -> Result<(), DeviceError> {
        check_len("chebyshev_step", out, a)?;
        check_len("chebyshev_step", out, s)?;
        prev.map_or(Ok(()), |p| check_len("chebyshev_step", out, p))
    }
}

#[cfg(test)]
mod tests;
