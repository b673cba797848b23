//! Compute devices: the kernels a solver runs on one rank's data, behind one trait.
//!
//! [`Device`] is everything the CG family does to one rank's vectors and matrix block: the
//! NAMED fused operations below, each with ONE meaning on every device (the formulas in
//! its documentation), chosen so that an iteration moves the fewest bytes (an SpMV fused
//! with the dot product of its input and output, the CG residual update fused with its two
//! norms, the x and p updates of CG in one pass, Gram blocks and block linear combinations
//! that read each vector once). [`Cpu`] implements them with rayon; `CudaDevice` (feature
//! `cuda`, module `cuda`) with NVRTC-compiled kernels through cudarc. Solvers never call a
//! device directly: they go through [`crate::Ops`], which counts, meters and times every
//! call in one place.
//!
//! # Vectors and lengths
//!
//! A device vector ([`Device::Vector`]) is a buffer of `f64`; an operation works on the
//! first `n` values of its operands (a [`crate::DistVec`] keeps its owned values first and
//! its ghost slots after them, so `n` is the number of owned values) and checks that every
//! operand holds at least `n`, returning [`DeviceError::LengthMismatch`] instead of
//! reading out of bounds. Reductions write their LOCAL results into a device vector of
//! results at a given offset (`out[at..]`); [`crate::Ops::reduce`] copies a whole
//! reduction's results to the host at once and sums them over the ranks.
//!
//! # Synchronisation policy
//!
//! - Scalars travel as kernel arguments (`alpha`, `beta`, coefficients of linear
//!   combinations, copied host-to-device asynchronously), so launching never waits for
//!   the device.
//! - The only blocking copies are [`Device::read`] (device to host: a reduction's local
//!   results, or the packed halo values to send), so a rank synchronises once per global
//!   reduction and once per halo exchange that has values to send, and never for timing:
//!   devices whose kernels run asynchronously ([`Device::event_timed`]) time them with
//!   device events that are read at those synchronisation points.
//!
//! # Determinism
//!
//! Every reduction sums in an order fixed by the vector length alone: the CPU cuts vectors
//! into chunks of [`cpu::CHUNK`] values and adds the chunk partials in order (dot products
//! with four interleaved accumulators per chunk, every other sum with one), the GPU uses a
//! fixed grid, a fixed block tree and block partials summed in order. Elementwise results
//! are the same bits on every device (the GPU kernels are compiled without FMA
//! contraction); reductions and multi-lane SpMV rows agree to rounding.
//!
//! # Cost
//!
//! The bytes, flops and launches of every operation are the formulas of [`work`], which
//! [`crate::Ops`] meters for the simulator and the planner prices.

pub(crate) mod cpu;
mod cpu_block;
#[cfg(feature = "cuda")]
pub mod cuda;
pub(crate) mod error;
#[cfg(any(feature = "cuda", test))]
pub(crate) mod sell;
pub mod work;

pub use cpu::Cpu;
pub use error::DeviceError;

use crate::count::{Bucket, TimeBreakdown};

/// Whether this build of the crate includes the CUDA device (feature `cuda`).
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

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

    /// Rows of the block.
    pub fn rows(&self) -> usize {
        self.indptr.len().saturating_sub(1)
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

/// An ordered list of device vectors, addressed by index: how multi-vector operations
/// (Gram blocks, linear combinations) take their operands without building a list (the
/// solver loops do not allocate). Implemented for slices of [`crate::DistVec`], for slices
/// of references to vectors, and for the concatenation of two lists ([`Concat`]).
pub trait VecList<V>: Sync {
    /// Number of vectors.
    fn count(&self) -> usize;
    /// Vector `i` (`i < count()`).
    fn get(&self, i: usize) -> &V;
}

/// A list of device vectors to write, addressed by index (the destinations of
/// [`Device::lincomb_block`]); every vector is distinct.
pub trait VecListMut<V> {
    /// Number of vectors.
    fn count(&self) -> usize;
    /// Vector `i` (`i < count()`).
    fn get_mut(&mut self, i: usize) -> &mut V;
}

/// A list of references to device vectors (for code that holds plain device vectors).
#[derive(Debug, Clone, Copy)]
pub struct Refs<'a, V>(pub &'a [&'a V]);

impl<V: Sync> VecList<V> for Refs<'_, V> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> &V {
        self.0[i]
    }
}

/// A list of mutable references to distinct device vectors.
#[derive(Debug)]
pub struct RefsMut<'a, 'b, V>(pub &'a mut [&'b mut V]);

impl<V> VecListMut<V> for RefsMut<'_, '_, V> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn get_mut(&mut self, i: usize) -> &mut V {
        self.0[i]
    }
}

/// The list `a` followed by the list `b` (e.g. CA-CG's `Y = [P | R]`).
#[derive(Debug, Clone, Copy)]
pub struct Concat<'a, A: ?Sized, B: ?Sized>(pub &'a A, pub &'a B);

impl<V, A, B> VecList<V> for Concat<'_, A, B>
where
    A: VecList<V> + ?Sized,
    B: VecList<V> + ?Sized,
{
    fn count(&self) -> usize {
        self.0.count() + self.1.count()
    }
    fn get(&self, i: usize) -> &V {
        let na = self.0.count();
        if i < na {
            self.0.get(i)
        } else {
            self.1.get(i - na)
        }
    }
}

/// Which pairs `(x_i, y_j)` a Gram block ([`Device::gram`]) holds, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GramShape {
    /// Every pair, row-major: `out[i * ny + j] = x_i . y_j`.
    Full,
    /// The upper triangle of a square block, row by row: `(i, j)` for `j >= i`
    /// (`nx * (nx + 1) / 2` values; needs `nx == ny`).
    Upper,
}

impl GramShape {
    /// Number of results for `nx x ny` vectors.
    pub fn len(self, nx: usize, ny: usize) -> usize {
        match self {
            GramShape::Full => nx * ny,
            GramShape::Upper => nx * (nx + 1) / 2,
        }
    }
}

/// One step of an s-step basis recurrence ([`Device::basis_step`]): the next column from
/// `a = A s_j`, `s = s_j` and `prev = s_{j-1}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BasisStep {
    /// Monomial: `out = a`.
    Copy,
    /// Newton: `out = a - theta s`.
    Shift(f64),
    /// First Chebyshev column: `out = eta a - zeta s`.
    ChebyshevFirst {
        /// Scale of the map to `[-1, 1]`.
        eta: f64,
        /// Shift of the map to `[-1, 1]`.
        zeta: f64,
    },
    /// Later Chebyshev columns: `out = 2 (eta a - zeta s) - prev`.
    Chebyshev {
        /// Scale of the map to `[-1, 1]`.
        eta: f64,
        /// Shift of the map to `[-1, 1]`.
        zeta: f64,
    },
}

impl BasisStep {
    /// One step of every kind, in declaration order: `Copy`, `Shift(theta)`, then the
    /// first and the later Chebyshev steps with `eta` and `zeta` (the kernel checks run
    /// each).
    pub fn each_kind(theta: f64, eta: f64, zeta: f64) -> [BasisStep; 4] {
        [
            BasisStep::Copy,
            BasisStep::Shift(theta),
            BasisStep::ChebyshevFirst { eta, zeta },
            BasisStep::Chebyshev { eta, zeta },
        ]
    }

    /// Whether the step reads `prev`.
    pub fn reads_prev(self) -> bool {
        matches!(self, BasisStep::Chebyshev { .. })
    }
}

/// The previous column of a basis step: required, and at least `n` long, when `step` reads
/// it; ignored otherwise (one check for every device).
pub(crate) fn basis_prev<V>(
    step: BasisStep,
    n: usize,
    prev: Option<&V>,
    len: impl Fn(&V) -> usize,
) -> Result<Option<&V>, DeviceError> {
    match (step.reads_prev(), prev) {
        (true, Some(p)) => {
            check_len("basis_step (previous column)", n, len(p))?;
            Ok(Some(p))
        }
        (true, None) => Err(DeviceError::LengthMismatch {
            op: "basis_step (previous column missing)",
            expected: n,
            got: 0,
        }),
        (false, _) => Ok(None),
    }
}

/// Check that every vector of a list holds at least `n` values (one check for every
/// device).
pub(crate) fn check_list<D, L>(op: &'static str, n: usize, l: &L) -> Result<(), DeviceError>
where
    D: Device,
    L: VecList<D::Vector> + ?Sized,
{
    (0..l.count()).try_for_each(|i| check_len(op, n, D::len(l.get(i))))
}

/// The operand checks of [`Device::gram`] (one for every device): an upper block is
/// square, every vector (and the weights) holds `n` values, `out` holds the results from
/// `at`. Returns the number of results.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gram_results<D, X, Y>(
    n: usize,
    xs: &X,
    ys: &Y,
    shape: GramShape,
    w: Option<&D::Vector>,
    out: &D::Vector,
    at: usize,
) -> Result<usize, DeviceError>
where
    D: Device,
    X: VecList<D::Vector> + ?Sized,
    Y: VecList<D::Vector> + ?Sized,
{
    let (nx, ny) = (xs.count(), ys.count());
    if shape == GramShape::Upper {
        check_len("gram (upper: square block)", nx, ny)?;
        check_len("gram (upper: square block)", ny, nx)?;
    }
    check_list::<D, _>("gram", n, xs)?;
    check_list::<D, _>("gram", n, ys)?;
    if let Some(w) = w {
        check_len("gram (weights)", n, D::len(w))?;
    }
    let k = shape.len(nx, ny);
    check_len("gram (results)", at + k, D::len(out))?;
    Ok(k)
}

#[cfg(test)]
mod representable_tests {
    use super::representable_value;

    #[test]
    fn entries_that_leave_the_double_range_on_the_way_out_become_what_the_caller_gets() {
        let up = 2f64.powi(1000);
        // x s / 2^1000 ~ 1e-621 underflows to 0: the caller gets 0.
        assert_eq!(representable_value(2.4e-170, 1e-150, up), 0.0);
        // A subnormal result keeps only its representable bits.
        let x = 6.882142696441191e-20;
        let got = representable_value(x, 1.0, up);
        assert_ne!(got, x);
        assert_eq!(got / up, x / up);
        assert!(((got - x) / x).abs() < 1e-2);
        // Normal on the way out, zero, and with no scaling: untouched, bit for bit.
        for (x, s, scale) in [(0.3, 1e150, up), (0.0, 1e-150, up), (1e-170, 1e150, 1.0)] {
            assert_eq!(representable_value(x, s, scale).to_bits(), f64::to_bits(x));
        }
        // Overflow on the way out is what the caller gets: infinite.
        assert!(representable_value(1e300, 1e10, 2f64.powi(-1000)).is_infinite());
    }
}

/// One entry of [`Device::representable`]: `x` unchanged unless the value the caller
/// receives for it, `u = fl(fl(x s) / scale)`, or the intermediate `fl(x s)`, is not a
/// normal number while `x != 0`; then `fl(fl(u scale) / s)`. The CUDA kernel of the same
/// name computes the same expression.
pub(crate) fn representable_value(x: f64, s: f64, scale: f64) -> f64 {
    let y = x * s;
    let u = y / scale;
    if x != 0.0 && !(y.is_normal() && u.is_normal()) {
        (u * scale) / s
    } else {
        x
    }
}

/// The unit roundoff of `f64`, `u = 2^-53` (Higham, *Accuracy and Stability of Numerical
/// Algorithms*, 2nd ed., SIAM 2002, section 2.2).
pub const UNIT_ROUNDOFF: f64 = 1.1102230246251565e-16;

/// Roundings beyond a row's `m` entries that [`residual_row_bound`] covers: `gamma_{m+4}`
/// of the row's evaluation and of the scaled data it reads, and the rounding of the bound's
/// own `m + 2` operations (castack-krylov's `cg/mod.rs` derives it). `RESIDUAL_BOUND_EXTRA`
/// in `kernels.cu` is the same number.
pub const RESIDUAL_BOUND_EXTRA: usize = 6;

/// The bound [`Device::residual_bound`] puts on the rounding error of one row of a computed
/// residual `b - A x`: `(m + 6) u (|b| + abs)`, with `m` the row's entries and
/// `abs = sum_j |a_ij x_j|` as the row summed it (`u` = [`UNIT_ROUNDOFF`]). The CUDA kernels
/// compute the same expression.
pub fn residual_row_bound(m: usize, b: f64, abs: f64) -> f64 {
    ((m + RESIDUAL_BOUND_EXTRA) as f64 * UNIT_ROUNDOFF) * (b.abs() + abs)
}

/// The operand checks of [`Device::residual_bound`] on a block of `rows` rows and `ncols`
/// input slots (one check for every device).
pub(crate) fn residual_bound_operands(
    rows: usize,
    ncols: usize,
    [x, b, y, w, out]: [usize; 5],
    at: usize,
    bound_at: usize,
) -> Result<(), DeviceError> {
    check_len("residual_bound (x)", ncols, x)?;
    check_len("residual_bound (b)", rows, b)?;
    check_len("residual_bound (y)", rows, y)?;
    check_len("residual_bound (w)", rows, w)?;
    check_len("residual_bound (results)", (at + 2).max(bound_at + 1), out)?;
    if (at..at + 2).contains(&bound_at) {
        return Err(DeviceError::LengthMismatch {
            op: "residual_bound (the bound's slot overlaps the norms')",
            expected: at + 2,
            got: bound_at,
        });
    }
    Ok(())
}

/// Check that an operand of `op` has at least `need` values.
pub(crate) fn check_len(op: &'static str, need: usize, got: usize) -> Result<(), DeviceError> {
    if got >= need {
        Ok(())
    } else {
        Err(DeviceError::LengthMismatch {
            op,
            expected: need,
            got,
        })
    }
}

/// The kernels of one rank's compute device: every operation the CG family runs, each with
/// the one meaning written here (see the module documentation for lengths, synchronisation
/// and determinism). Every operation checks its operands' lengths and returns
/// [`DeviceError::LengthMismatch`] instead of reading out of bounds.
pub trait Device: Sized {
    /// A vector of `f64` in the device's memory.
    type Vector: Send + Sync + std::fmt::Debug;
    /// A CSR block in the device's memory.
    type Matrix: Send + Sync;
    /// A list of `u32` indices in the device's memory (halo packing and unpacking).
    type Index: Send + Sync + std::fmt::Debug;

    /// Short name (`cpu`, `cuda`), as the solve report prints it.
    fn name(&self) -> &'static str;
    /// Worker threads of the local kernels (1 for a GPU, whose parallelism is its own).
    fn threads(&self) -> usize;
    /// Whether vectors live in host memory. When false, [`Device::read`] and
    /// [`Device::write`] are host-device copies: [`crate::Ops`] charges them to the
    /// `transfer` bucket and meters them as copies.
    fn host_memory(&self) -> bool;

    /// Values in a vector.
    fn len(v: &Self::Vector) -> usize;
    /// `(rows, ncols)` of a matrix: `y` has `rows` values, `x` has `ncols`.
    fn shape(a: &Self::Matrix) -> (usize, usize);
    /// Entries of a matrix.
    fn nnz(a: &Self::Matrix) -> usize;

    /// Size the workspaces for reductions over `n` values with up to `results` results
    /// and for multi-vector operations over up to `lists` vectors, so that later calls do
    /// not allocate (call before a solver loop).
    fn reserve(&mut self, n: usize, results: usize, lists: usize) -> Result<(), DeviceError>;
    /// A vector of `n` zeros.
    fn zeros(&mut self, n: usize) -> Result<Self::Vector, DeviceError>;
    /// A new vector holding `host`.
    fn upload(&mut self, host: &[f64]) -> Result<Self::Vector, DeviceError>;
    /// Move a host CSR block to the device (validated first; the CPU keeps it as it is).
    fn upload_csr(&mut self, a: HostCsr) -> Result<Self::Matrix, DeviceError>;
    /// A device index list holding `idx`.
    fn upload_index(&mut self, idx: &[u32]) -> Result<Self::Index, DeviceError>;
    /// Entries of an index list.
    fn index_len(idx: &Self::Index) -> usize;

    /// `dst[at..at + host.len()] = host` (host to device; the host slice may be reused on
    /// return).
    fn write(&mut self, host: &[f64], dst: &mut Self::Vector, at: usize)
        -> Result<(), DeviceError>;
    /// `host = src[at..at + host.len()]` (device to host); waits for the queued work: a
    /// synchronisation point.
    fn read(&mut self, src: &Self::Vector, at: usize, host: &mut [f64]) -> Result<(), DeviceError>;
    /// `dst[dst_at..dst_at + n] = src[src_at..src_at + n]`.
    fn copy(
        &mut self,
        n: usize,
        src: &Self::Vector,
        src_at: usize,
        dst: &mut Self::Vector,
        dst_at: usize,
    ) -> Result<(), DeviceError>;
    /// `dst[at..at + n] = value`.
    fn fill(
        &mut self,
        n: usize,
        value: f64,
        dst: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;
    /// Halo packing: `out[i] = src[idx[i]]` for every `i < len(idx)`.
    fn gather(
        &mut self,
        src: &Self::Vector,
        idx: &Self::Index,
        out: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// Halo unpacking: `out[idx[i]] = src[i]` for every `i < len(idx)` (indices distinct).
    fn scatter(
        &mut self,
        src: &Self::Vector,
        idx: &Self::Index,
        out: &mut Self::Vector,
    ) -> Result<(), DeviceError>;

    /// `y[..rows] = A[..rows] x`: the first `rows` rows of `a` (all of them, or a prefix:
    /// the matrix powers kernel's shrinking ghost zone), each summed in CSR order on the
    /// CPU.
    fn spmv(
        &mut self,
        a: &Self::Matrix,
        rows: usize,
        x: &Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `y = A x` over all rows of a square block whose first `rows` input slots are the
    /// owned ones, fused with `out[at] = x[..rows] . y[..rows]` (CG's `p^T A p`): one pass
    /// over `x` and `y` instead of two.
    fn spmv_dot(
        &mut self,
        a: &Self::Matrix,
        x: &Self::Vector,
        y: &mut Self::Vector,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;

    /// `y += alpha x` on `n` values.
    fn axpy(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `y = x + beta y` on `n` values.
    fn xpay(
        &mut self,
        n: usize,
        x: &Self::Vector,
        beta: f64,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `y = alpha x` on `n` values.
    fn scale(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `out = a * b` elementwise on `n` values.
    fn mul(
        &mut self,
        n: usize,
        a: &Self::Vector,
        b: &Self::Vector,
        out: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// `out = a / b` elementwise on `n` values.
    fn div(
        &mut self,
        n: usize,
        a: &Self::Vector,
        b: &Self::Vector,
        out: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// The iterate as the caller will receive it, on `n` values: where `u = fl(fl(x_i s_i) /
    /// scale)` (the solution handed back: `s` the symmetric scaling, `scale` the
    /// right-hand side's power of two) or `fl(x_i s_i)` is not a normal number while
    /// `x_i != 0` (it underflowed or overflowed), `x_i` becomes what `u` maps back to,
    /// `fl(fl(u scale) / s_i)`; every other entry is left untouched, bit for bit
    /// (`representable_value`).
    fn representable(
        &mut self,
        n: usize,
        s: &Self::Vector,
        scale: f64,
        x: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// CG's update of the iterate and the direction in one pass, on `n` values:
    /// `x += alpha p`, then `p = r + beta p`.
    #[allow(clippy::too_many_arguments)]
    fn cg_update(
        &mut self,
        n: usize,
        alpha: f64,
        beta: f64,
        r: &Self::Vector,
        p: &mut Self::Vector,
        x: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// Chronopoulos-Gear CG's four updates and their local sums in one pass, on `n` values:
    /// `p = r + beta p`, `ap = ar + beta ap`, `x += a p`, `r += (-a) ap` (the new p and
    /// ap); then `out[at] = r.r` and, with weights `w`, `out[at + 1] = sum r_i^2 w_i` of
    /// the new r. Without `w` the weights are not read and `out[at]` is the same bits
    /// (CG far from the target, see `cg/ccg.rs`).
    #[allow(clippy::too_many_arguments)]
    fn ccg_update(
        &mut self,
        n: usize,
        a: f64,
        beta: f64,
        ar: &Self::Vector,
        vecs: CcgVecs<'_, Self::Vector>,
        w: Option<&Self::Vector>,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;
    /// Pipelined CG's six updates and [`PIPECG_SUMS`] local sums in one pass, on `n`
    /// values: `z = q + beta z`, `s = w + beta s`, `p = r + beta p`, `x += a p`,
    /// `r -= a s`, `w -= a z`; then `out[at] = r.r`, `out[at + 1] = sum r_i^2 wt_i`,
    /// `out[at + 2] = w.r`, and the squared norms of the residual-gap estimate
    /// `out[at + 3..at + 8] = [x.x, p.p, s.s, z.z, w.w]`, all of the new vectors.
    #[allow(clippy::too_many_arguments)]
    fn pipecg_update(
        &mut self,
        n: usize,
        a: f64,
        beta: f64,
        q: &Self::Vector,
        vecs: PipecgVecs<'_, Self::Vector>,
        wt: &Self::Vector,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;
    /// The residual update with its own norm only, on `n` values: `y += alpha x`, then
    /// `out[at] = y.y`, the same bits as `out[at]` of [`Device::axpy_norms`] (CG when the
    /// original-norm residual cannot decide the stopping test, see `cg/cg.rs`).
    fn axpy_dot(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Self::Vector,
        y: &mut Self::Vector,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;
    /// The residual update with its two norms, on `n` values: `y += alpha x`, then
    /// `out[at] = y.y`, `out[at + 1] = sum y_i^2 w_i`.
    #[allow(clippy::too_many_arguments)]
    fn axpy_norms(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Self::Vector,
        y: &mut Self::Vector,
        w: &Self::Vector,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;
    /// The true residual from an SpMV output with its two norms, on `n` values:
    /// `y = b - y`, then `out[at] = y.y`, `out[at + 1] = sum y_i^2 w_i`.
    fn residual_norms(
        &mut self,
        n: usize,
        b: &Self::Vector,
        y: &mut Self::Vector,
        w: &Self::Vector,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;
    /// The true residual of a square block with its two norms and a bound on its rounding
    /// error, in one pass over the matrix, on all rows (`x`'s input slots filled):
    /// `y = b - A x` (the bits of [`Device::spmv`] followed by [`Device::residual_norms`]),
    /// `out[at] = y.y`, `out[at + 1] = sum y_i^2 w_i` (the bits of `residual_norms`) and
    /// `out[bound_at] = sum_i w_i e_i^2` (`bound_at` outside `at..at + 2`), where
    /// `e_i` = [`residual_row_bound`]`(m_i, b_i, sum_j |a_ij x_j|)` bounds the rounding error
    /// of `y_i` (`m_i` the entries of row `i`; the sum as the row computes it).
    #[allow(clippy::too_many_arguments)]
    fn residual_bound(
        &mut self,
        a: &Self::Matrix,
        x: &Self::Vector,
        b: &Self::Vector,
        y: &mut Self::Vector,
        w: &Self::Vector,
        out: &mut Self::Vector,
        at: usize,
        bound_at: usize,
    ) -> Result<(), DeviceError>;
    /// `out[at] = sum r_i^2 w_i` on `n` values (the squared norm in the original system).
    fn wnorm(
        &mut self,
        n: usize,
        r: &Self::Vector,
        w: &Self::Vector,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>;
    /// The Gram block of `xs` and `ys` on `n` values, into `out[at..]` in the order of
    /// `shape`: `x_i . y_j`, or with weights `sum_k (x_ik w_k) y_jk`. One pass reads every
    /// vector once (the CPU per chunk of values, the GPU per group of `y` vectors).
    #[allow(clippy::too_many_arguments)]
    fn gram<X, Y>(
        &mut self,
        n: usize,
        xs: &X,
        ys: &Y,
        shape: GramShape,
        w: Option<&Self::Vector>,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>
    where
        X: VecList<Self::Vector> + ?Sized,
        Y: VecList<Self::Vector> + ?Sized;
    /// `y += sum_j coef[j] v_j` on `n` values, over the `j` with `coef[j] != 0` in
    /// increasing order (a zero coefficient skips its vector).
    fn lincomb<L>(
        &mut self,
        n: usize,
        coef: &[f64],
        vs: &L,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>
    where
        L: VecList<Self::Vector> + ?Sized;
    /// [`Device::lincomb`] fused with the two norms of the result:
    /// `out[at] = y.y`, `out[at + 1] = sum y_i^2 w_i`.
    #[allow(clippy::too_many_arguments)]
    fn lincomb_norms<L>(
        &mut self,
        n: usize,
        coef: &[f64],
        vs: &L,
        y: &mut Self::Vector,
        w: &Self::Vector,
        out: &mut Self::Vector,
        at: usize,
    ) -> Result<(), DeviceError>
    where
        L: VecList<Self::Vector> + ?Sized;
    /// The block linear combination `dst_j += sum_l coef[l * nd + j] src_l` for every
    /// destination `j < nd` (`nd = dsts.count()`), on `n` values: each destination as
    /// [`Device::lincomb`] with column `j` of the row-major `ns x nd` matrix `coef`, but
    /// every source vector read once.
    fn lincomb_block<S, T>(
        &mut self,
        n: usize,
        coef: &[f64],
        srcs: &S,
        dsts: &mut T,
    ) -> Result<(), DeviceError>
    where
        S: VecList<Self::Vector> + ?Sized,
        T: VecListMut<Self::Vector> + ?Sized;
    /// One s-step basis column on `n` values ([`BasisStep`]); `prev` must be given when
    /// the step reads it.
    fn basis_step(
        &mut self,
        n: usize,
        step: BasisStep,
        a: &Self::Vector,
        s: &Self::Vector,
        prev: Option<&Self::Vector>,
        out: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// The minimal-residual smoothing's update on `n` values:
    /// `s += eta (r - s)`, `y += eta (x - y)`.
    #[allow(clippy::too_many_arguments)]
    fn smooth_update(
        &mut self,
        n: usize,
        eta: f64,
        r: &Self::Vector,
        x: &Self::Vector,
        s: &mut Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;
    /// The smoothing's restart from coordinates, on `n` values: `s = g s`,
    /// `y = g y + (1 - g) x0`.
    fn smooth_rescale(
        &mut self,
        n: usize,
        g: f64,
        x0: &Self::Vector,
        s: &mut Self::Vector,
        y: &mut Self::Vector,
    ) -> Result<(), DeviceError>;

    /// Whether [`Device::ic0_solve`] runs here (sequential triangular solves on vectors in
    /// host memory).
    fn triangular_solves(&self) -> bool {
        false
    }
    /// `z = (L L^T)^-1 r` on the factor's rows (`bjacobi_ic0`); devices without
    /// [`Device::triangular_solves`] return [`DeviceError::Unsupported`].
    fn ic0_solve(
        &mut self,
        f: &crate::LowerFactor,
        r: &Self::Vector,
        z: &mut Self::Vector,
    ) -> Result<(), DeviceError> {
        let _ = (f, r, z);
        Err(DeviceError::Unsupported {
            op: "triangular solve (bjacobi_ic0)",
            device: self.name(),
        })
    }

    /// Whether kernels run asynchronously to the host, so that [`crate::Ops`] times them
    /// with [`Device::event_begin`] / [`Device::event_end`] instead of the host clock.
    fn event_timed(&self) -> bool {
        false
    }
    /// Mark the start of work charged to `bucket` (asynchronous devices).
    fn event_begin(&mut self, bucket: Bucket) -> Result<(), DeviceError> {
        let _ = bucket;
        Ok(())
    }
    /// Mark the end of the work begun by [`Device::event_begin`].
    fn event_end(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
    /// The device time of the completed marked work since the last call, by bucket
    /// (read after a synchronisation point; zero for host-timed devices).
    fn take_event_times(&mut self) -> Result<TimeBreakdown, DeviceError> {
        Ok(TimeBreakdown::default())
    }
    /// Wait for all queued work.
    fn synchronize(&mut self) -> Result<(), DeviceError>;
}

/// The vectors Chronopoulos-Gear CG updates in one pass ([`Device::ccg_update`]).
#[derive(Debug)]
pub struct CcgVecs<'a, V> {
    /// The residual (read and updated).
    pub r: &'a mut V,
    /// The direction.
    pub p: &'a mut V,
    /// `ap = A p`, by its recurrence.
    pub ap: &'a mut V,
    /// The iterate.
    pub x: &'a mut V,
}

/// Sums [`Device::pipecg_update`] leaves: `[r.r, r.W r, w.r, x.x, p.p, s.s, z.z, w.w]`.
pub const PIPECG_SUMS: usize = 8;

/// The vectors pipelined CG updates in one pass ([`Device::pipecg_update`]).
#[derive(Debug)]
pub struct PipecgVecs<'a, V> {
    /// `w = A r` (read and updated).
    pub w: &'a mut V,
    /// The residual (read and updated).
    pub r: &'a mut V,
    /// `z = A s`.
    pub z: &'a mut V,
    /// `s = A p`.
    pub s: &'a mut V,
    /// The direction.
    pub p: &'a mut V,
    /// The iterate.
    pub x: &'a mut V,
}

#[cfg(test)]
mod tests;
