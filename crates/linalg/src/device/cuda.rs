//! The CUDA device (feature `cuda`): every [`Device`] operation as an NVRTC-compiled kernel
//! launched through cudarc (dynamic loading: the crate builds without a CUDA toolkit).
//!
//! # Kernels
//!
//! The kernels (`kernels.cu`) are compiled by NVRTC 13.0 for `compute_90` with FMA
//! contraction off ([`compile_ptx`]); the PTX is checked in (`kernels.ptx`) and embedded
//! ([`KERNELS_PTX`]), and a test fails when it is not what NVRTC makes of the current source
//! (`CASTACK_WRITE_PTX=1` rewrites it). A GPU machine needs only the driver, which
//! JIT-compiles the PTX for its GPU. [`KERNEL_NAMES`] lists every entry point. Every
//! launch goes through one helper, which checks its argument list against the kernel's
//! parameters in the PTX ([`DeviceError::KernelArguments`] when this file and `kernels.cu`
//! disagree: a launch never reads an argument of the wrong size).
//!
//! | family | kernels | bytes moved |
//! |---|---|---|
//! | SpMV, vector CSR: Bell and Garland, *Implementing sparse matrix-vector multiplication on throughput-oriented processors*, SC 2009 | `spmv_csr_t{T}`, `spmv_dot_csr_t{T}`, `T` lanes per row, `T` in 1..=32 ([`lanes_for`]) | `12 nnz + 8 (rows + 1) + 8 rows` plus the reads of `x` (at least `8 ncols`) |
//! | SpMV, SELL-C-sigma: Kreutzer, Hager, Wellein, Fehske, Bishop, SIAM J. Sci. Comput. 36(5), 2014 (`device/sell.rs`, C = [`SELL_C`]) | `spmv_sell`, `spmv_dot_sell` | `12 nnz + 8 rows + 8 rows / C` (lengths, permutation, slice offsets) `+ 8 rows` plus the reads of `x` |
//! | elementwise updates | `axpy`, `xpay`, `scale`, `mul`, `divide`, `representable`, `cg_update`, `basis_step`, `smooth_update`, `smooth_rescale`, `lincomb`, `fill` | `8 (reads + writes) n`: the formulas of [`super::work`] |
//! | block linear combination | `lincomb_block` | every used source read once per group of 8 destinations: `8 n (s ceil(d / 8) + 2 d)` |
//! | fused reductions | `ccg_update`, `pipecg_update`, `axpy_dot`, `axpy_norms`, `residual_norms`, `wnorm`, `lincomb_norms`, `spmv_dot_*` | as the update or SpMV, plus `8 RED_BLOCKS` bytes of partials per result, written once and read once by `finish_sums` |
//! | Gram blocks | `gram` | tiles of 4 x 4 pairs, each reading its `<= 4 + 4` vectors (and the weights): `8 n (nx + ny + w)` from DRAM when the tiles of one stretch of values share it through L2 (they run side by side), at most `8 n (tx + ty + w)` per tile |
//! | halo packing | `gather`, `scatter` | `20 m` |
//!
//! Reductions run on a FIXED grid of [`RED_BLOCKS`] blocks of [`RED_THREADS`] threads with
//! grid-stride loops, a fixed tree within each block and, in `finish_sums` (one block per
//! result), a fixed tree over the block partials: results depend only on the data and the
//! lengths. Elementwise kernels follow the CPU's expression order (`device/cpu.rs`) and, with
//! FMA contraction off, give its bits; so do `spmv_csr_t1` and SELL, which sum each row in
//! CSR order ([`SpmvKernel::bit_identical_to_cpu`]).
//!
//! # Synchronisation policy
//!
//! Every [`CudaDevice`] owns a stream of its own (several thread ranks can share one GPU),
//! and every operation is queued on it. Only [`Device::read`] (device to host) and
//! [`Device::synchronize`] wait for the device. Scalars travel as kernel arguments; the
//! coefficients of linear combinations and the tables of vector addresses are copied
//! host-to-device asynchronously into preallocated device buffers (skipped when unchanged),
//! and [`Device::write`] is an asynchronous host-to-device copy. These copies are from
//! pageable host memory, which the driver stages before the call returns, so the host
//! slice is reusable at once and nothing waits for the device; stream order keeps each
//! table's contents valid for the kernel that reads it.
//!
//! # Timing
//!
//! [`Device::event_timed`] is true: [`crate::Ops`] brackets each operation with
//! [`Device::event_begin`] / [`Device::event_end`], which record CUDA events from a
//! preallocated pool of [`EVENT_PAIRS`] start/end pairs (an operation charged to the same
//! bucket as the interval just before it extends that interval; when the pool is full of
//! intervals not yet known to be complete, the last interval is extended). The elapsed
//! times are read only for intervals that ended before a synchronisation point (or whose
//! end event a non-blocking query reports complete), so timing never waits for the device.
//!
//! # Without a GPU
//!
//! With no driver library cudarc would panic on its first call, so [`CudaDevice::new`] and
//! [`device_count`] check for the library first and return [`DeviceError::NoDriver`] (or
//! [`DeviceError::NoDevice`]); [`compile_ptx`] returns [`DeviceError::NoNvrtc`] without the
//! compiler.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use super::sell::Sell;
use super::{
    check_len, check_list, BasisStep, CcgVecs, CsrRef, Device, DeviceError, GramShape, HostCsr,
    PipecgVecs, VecList, VecListMut, PIPECG_SUMS,
};
use crate::count::{Bucket, TimeBreakdown};
use Arg::{Partials, Ptr, F64, I32, I64};

/// The kernel source.
pub const KERNELS_CU: &str = include_str!("kernels.cu");
/// [`KERNELS_CU`] compiled by NVRTC 13.0.88 for [`ARCH`] (checked against the source by a
/// test when NVRTC is available).
pub const KERNELS_PTX: &str = include_str!("kernels.ptx");
/// The virtual architecture the kernels are compiled for (Hopper; the driver JIT-compiles
/// the PTX for newer GPUs).
pub const ARCH: &str = "compute_90";
/// Every kernel entry point in [`KERNELS_CU`]: the SpMV kernels first (plain, then fused
/// with the dot product, in the order of [`SPMV_LANES`], then SELL), then one per operation,
/// then the SpMVs fused with the true residual's error bound (CSR in the order of
/// [`SPMV_LANES`], then SELL).
pub const KERNEL_NAMES: [&str; 46] = [
    "spmv_csr_t1",
    "spmv_csr_t2",
    "spmv_csr_t4",
    "spmv_csr_t8",
    "spmv_csr_t16",
    "spmv_csr_t32",
    "spmv_dot_csr_t1",
    "spmv_dot_csr_t2",
    "spmv_dot_csr_t4",
    "spmv_dot_csr_t8",
    "spmv_dot_csr_t16",
    "spmv_dot_csr_t32",
    "spmv_sell",
    "spmv_dot_sell",
    "fill",
    "gather",
    "scatter",
    "axpy",
    "xpay",
    "scale",
    "mul",
    "divide",
    "representable",
    "cg_update",
    "ccg_update",
    "ccg_update_dot",
    "basis_step",
    "smooth_update",
    "smooth_rescale",
    "lincomb",
    "lincomb_block",
    "pipecg_update",
    "axpy_dot",
    "axpy_norms",
    "residual_norms",
    "wnorm",
    "lincomb_norms",
    "gram",
    "finish_sums",
    "spmv_bound_csr_t1",
    "spmv_bound_csr_t2",
    "spmv_bound_csr_t4",
    "spmv_bound_csr_t8",
    "spmv_bound_csr_t16",
    "spmv_bound_csr_t32",
    "spmv_bound_sell",
];
/// Lane counts of the vector-CSR SpMV kernels, in the order of [`KERNEL_NAMES`].
pub const SPMV_LANES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Blocks of every reduction (fixed: part of the summation order).
pub const RED_BLOCKS: u32 = 1024;
/// Threads per reduction block (`RED_THREADS` in the source; also the block size of every
/// other kernel).
pub const RED_THREADS: u32 = 256;
/// Start/end event pairs of the timing pool.
pub const EVENT_PAIRS: usize = 128;
/// Vectors per side of a Gram tile (`GRAM_TILE` in the source).
const GRAM_TILE: usize = 4;
/// Destinations per block of `lincomb_block` (`LINCOMB_DSTS` in the source).
const LINCOMB_DSTS: usize = 8;
/// Most blocks of a grid-stride elementwise launch.
const MAX_BLOCKS: usize = 65_535;
/// Most blocks of a plain (grid-stride) SpMV launch.
const MAX_SPMV_BLOCKS: u64 = 1 << 20;

/// Whether the CUDA driver library can be loaded (without it cudarc panics).
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the shared library by its candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether NVRTC can be loaded (without it cudarc panics).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the shared library by its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compile [`KERNELS_CU`] to PTX text for [`ARCH`] (no GPU needed, only NVRTC).
pub fn compile_ptx() -> Result<String, DeviceError> {
    if !nvrtc_present() {
        return Err(DeviceError::NoNvrtc);
    }
    let opts = CompileOptions {
        arch: Some(ARCH),
        fmad: Some(false),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNELS_CU, opts)
        .map(|p| p.to_src())
        .map_err(|e| DeviceError::Compile {
            log: match e {
                CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                other => format!("{other:?}"),
            },
        })
}

/// The number of CUDA devices the driver reports: `Ok(0)` with a driver but no GPU,
/// [`DeviceError::NoDriver`] without the driver library.
pub fn device_count() -> Result<usize, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::NoDriver);
    }
    // cuInit itself fails with CUDA_ERROR_NO_DEVICE on a machine with a driver but no GPU.
    match CudaContext::device_count() {
        Ok(c) => Ok(usize::try_from(c).unwrap_or(0)),
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        Err(e) => Err(drv("device count")(e)),
    }
}

/// Rows per slice of the SELL-C-sigma kernel (a warp).
pub const SELL_C: usize = 32;
/// Sorting window of the SELL-C-sigma kernel.
pub const SELL_SIGMA: usize = 256;

/// The SpMV kernels (a registry: `krylov gpu-check` checks and times every entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpmvKernel {
    /// Vector CSR with this many lanes per row (one of [`SPMV_LANES`]).
    CsrVector(u32),
    /// SELL-C-sigma with C = [`SELL_C`], sigma = [`SELL_SIGMA`].
    Sell,
}

impl SpmvKernel {
    /// Every kernel.
    pub const ALL: [SpmvKernel; 7] = [
        SpmvKernel::CsrVector(1),
        SpmvKernel::CsrVector(2),
        SpmvKernel::CsrVector(4),
        SpmvKernel::CsrVector(8),
        SpmvKernel::CsrVector(16),
        SpmvKernel::CsrVector(32),
        SpmvKernel::Sell,
    ];

    /// The default for a block: vector CSR with [`lanes_for`] lanes.
    pub fn auto(rows: usize, nnz: usize) -> Self {
        SpmvKernel::CsrVector(lanes_for(rows, nnz))
    }

    /// Name, e.g. `csr_vector_t4`, `sell_32_256`.
    pub fn name(&self) -> String {
        match self {
            SpmvKernel::CsrVector(t) => format!("csr_vector_t{t}"),
            SpmvKernel::Sell => format!("sell_{SELL_C}_{SELL_SIGMA}"),
        }
    }

    /// Whether the kernel sums each row in CSR order (the CPU's bits).
    pub fn bit_identical_to_cpu(&self) -> bool {
        matches!(self, SpmvKernel::CsrVector(1) | SpmvKernel::Sell)
    }
}

/// Entries of an average row each lane of the default vector-CSR kernel sums at least.
///
/// Measured with `krylov gpu-check --n 128` on an NVIDIA H200 (driver 580.159, 2026-11-26),
/// as a fraction of a device-to-device copy, `spmv` / `spmv_dot`:
///
/// | matrix (mean row length) | 1 lane | 2 | 4 | 8 |
/// |---|---|---|---|---|
/// | poisson3d n = 128 (6.95) | **0.82 / 0.76** | 0.77 / 0.61 | 0.60 / 0.45 | 0.39 / 0.31 |
/// | random_irregular (14.3) | 0.22 / 0.25 | 0.31 / 0.29 | **0.35 / 0.29** | 0.35 / 0.25 |
///
/// One lane per entry (Bell and Garland's rule, the default before) wastes lanes and
/// shuffles on short rows: it took 1.7 times as long as one lane per row for the fused
/// `spmv_dot` that CG runs on the 7-point stencil. Four entries per lane picks the best
/// or nearly best (within 12%) kernel on both.
pub const SPMV_ENTRIES_PER_LANE: usize = 4;

/// SpMV lanes per row for a mean row length: the largest power of two in `1..=32` with
/// at least [`SPMV_ENTRIES_PER_LANE`] entries of an average row per lane (1 for shorter
/// rows).
pub fn lanes_for(rows: usize, nnz: usize) -> u32 {
    let per_lane = nnz / rows.max(1) / SPMV_ENTRIES_PER_LANE;
    SPMV_LANES
        .iter()
        .copied()
        .rev()
        .find(|&t| t as usize <= per_lane)
        .unwrap_or(1)
}

/// The device address of `buf` (with cudarc's event tracking off, taking it records
/// nothing).
fn addr<T>(buf: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (ptr, _record) = buf.device_ptr(stream);
    ptr
}

fn drv(op: &'static str) -> impl Fn(DriverError) -> DeviceError {
    move |e| DeviceError::Driver {
        op,
        detail: e.to_string(),
    }
}

/// A vector in GPU memory. Its buffer holds at least one value (the driver allocates no
/// empty buffers); [`Device::len`] is the length asked for.
#[derive(Debug)]
pub struct CudaVector {
    buf: CudaSlice<f64>,
    len: usize,
    /// Device address of value 0 (the buffer never moves).
    ptr: u64,
}

impl CudaVector {
    fn new(buf: CudaSlice<f64>, len: usize, stream: &CudaStream) -> Self {
        let ptr = addr(&buf, stream);
        Self { buf, len, ptr }
    }

    /// Values in the vector.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the vector holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Device address of value `at` (`at <= len`, checked by the callers).
    fn at(&self, at: usize) -> u64 {
        self.ptr + 8 * at as u64
    }
}

/// A list of `u32` indices in GPU memory, with its largest index (checked against the
/// vectors it addresses before any kernel reads them).
#[derive(Debug)]
pub struct CudaIndex {
    buf: CudaSlice<u32>,
    len: usize,
    max: Option<u32>,
}

/// A sparse block in GPU memory, in the layout of its SpMV kernel.
#[derive(Debug)]
pub struct CudaCsr {
    rows: usize,
    ncols: usize,
    nnz: usize,
    stored: Stored,
}

/// The arrays of each layout.
#[derive(Debug)]
enum Stored {
    /// Vector CSR with `SPMV_LANES[lanes]` lanes per row: offsets as `u64`, columns `u32`.
    Csr {
        lanes: usize,
        indptr: CudaSlice<u64>,
        cols: CudaSlice<u32>,
        vals: CudaSlice<f64>,
    },
    /// SELL-C-sigma ([`super::sell::Sell`]).
    Sell {
        slice_ptr: CudaSlice<u64>,
        row_len: CudaSlice<u32>,
        perm: CudaSlice<u32>,
        cols: CudaSlice<u32>,
        vals: CudaSlice<f64>,
    },
}

impl CudaCsr {
    /// Entries of the block.
    pub fn nnz(&self) -> usize {
        self.nnz
    }

    /// Rows of the block.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The SpMV kernel in use.
    pub fn kernel(&self) -> SpmvKernel {
        match self.stored {
            Stored::Csr { lanes, .. } => SpmvKernel::CsrVector(SPMV_LANES[lanes]),
            Stored::Sell { .. } => SpmvKernel::Sell,
        }
    }
}

/// The kernels, loaded once per device.
#[derive(Debug)]
struct Kernels {
    spmv: [CudaFunction; 6],
    spmv_dot: [CudaFunction; 6],
    spmv_sell: CudaFunction,
    spmv_dot_sell: CudaFunction,
    spmv_bound: [CudaFunction; 6],
    spmv_bound_sell: CudaFunction,
    fill: CudaFunction,
    gather: CudaFunction,
    scatter: CudaFunction,
    axpy: CudaFunction,
    xpay: CudaFunction,
    scale: CudaFunction,
    mul: CudaFunction,
    divide: CudaFunction,
    representable: CudaFunction,
    cg_update: CudaFunction,
    ccg_update: CudaFunction,
    ccg_update_dot: CudaFunction,
    basis_step: CudaFunction,
    smooth_update: CudaFunction,
    smooth_rescale: CudaFunction,
    lincomb: CudaFunction,
    lincomb_block: CudaFunction,
    pipecg_update: CudaFunction,
    axpy_dot: CudaFunction,
    axpy_norms: CudaFunction,
    residual_norms: CudaFunction,
    wnorm: CudaFunction,
    lincomb_norms: CudaFunction,
    gram: CudaFunction,
    finish_sums: CudaFunction,
    /// Each loaded function's name and parameter sizes, by its driver handle: every launch
    /// is checked against them ([`CudaDevice::launch`]).
    signatures: Vec<(usize, &'static str, Vec<usize>)>,
}

/// The parameter sizes in bytes of every `.entry` of a PTX text (`.param .u64 x`, `.param
/// .f64 x`, `.param .u32 x`, ...: the kernels take scalars and pointers only).
fn entry_signatures(ptx: &str) -> Vec<(&str, Vec<usize>)> {
    ptx.split(".entry ")
        .skip(1)
        .filter_map(|entry| {
            let (name, rest) = entry.split_once('(')?;
            let params = rest.split_once(')')?.0;
            let sizes = params
                .split(',')
                .filter_map(|p| {
                    let ty = p.split_whitespace().nth(1)?;
                    let bits: usize = ty.get(2..)?.parse().ok()?;
                    Some(bits / 8)
                })
                .collect();
            Some((name.trim(), sizes))
        })
        .collect()
}

impl Kernels {
    /// The name and parameter sizes of `f`.
    fn signature(&self, f: &CudaFunction) -> Option<(&'static str, &[usize])> {
        let h = f.cu_function() as usize;
        self.signatures
            .iter()
            .find(|(k, _, _)| *k == h)
            .map(|(_, n, s)| (*n, s.as_slice()))
    }

    fn load(ctx: &Arc<CudaContext>) -> Result<Self, DeviceError> {
        let module = ctx
            .load_module(Ptx::from_src(KERNELS_PTX))
            .map_err(drv("load module"))?;
        let entries = entry_signatures(KERNELS_PTX);
        let signatures = std::cell::RefCell::new(Vec::new());
        let f = |n: &str| -> Result<CudaFunction, DeviceError> {
            let func = module.load_function(n).map_err(drv("load function"))?;
            if let Some((name, sizes)) = entries.iter().find(|(e, _)| *e == n) {
                signatures
                    .borrow_mut()
                    .push((func.cu_function() as usize, *name, sizes.clone()));
            }
            Ok(func)
        };
        let six = |first: usize| -> Result<[CudaFunction; 6], DeviceError> {
            Ok([
                f(KERNEL_NAMES[first])?,
                f(KERNEL_NAMES[first + 1])?,
                f(KERNEL_NAMES[first + 2])?,
                f(KERNEL_NAMES[first + 3])?,
                f(KERNEL_NAMES[first + 4])?,
                f(KERNEL_NAMES[first + 5])?,
            ])
        };
        Ok(Self {
            spmv: six(0)?,
            spmv_dot: six(6)?,
            spmv_sell: f("spmv_sell")?,
            spmv_dot_sell: f("spmv_dot_sell")?,
            spmv_bound: six(39)?,
            spmv_bound_sell: f("spmv_bound_sell")?,
            fill: f("fill")?,
            gather: f("gather")?,
            scatter: f("scatter")?,
            axpy: f("axpy")?,
            xpay: f("xpay")?,
            scale: f("scale")?,
            mul: f("mul")?,
            divide: f("divide")?,
            representable: f("representable")?,
            cg_update: f("cg_update")?,
            ccg_update: f("ccg_update")?,
            ccg_update_dot: f("ccg_update_dot")?,
            basis_step: f("basis_step")?,
            smooth_update: f("smooth_update")?,
            smooth_rescale: f("smooth_rescale")?,
            lincomb: f("lincomb")?,
            lincomb_block: f("lincomb_block")?,
            pipecg_update: f("pipecg_update")?,
            axpy_dot: f("axpy_dot")?,
            axpy_norms: f("axpy_norms")?,
            residual_norms: f("residual_norms")?,
            wnorm: f("wnorm")?,
            lincomb_norms: f("lincomb_norms")?,
            gram: f("gram")?,
            finish_sums: f("finish_sums")?,
            signatures: signatures.into_inner(),
        })
    }
}

/// A device buffer with a host mirror of what was last copied into it, so an unchanged
/// table or coefficient list is not copied again.
#[derive(Debug)]
struct Mirrored<T> {
    dev: CudaSlice<T>,
    /// Device address of value 0.
    ptr: u64,
    /// What the device buffer holds (its first `mirror.len()` values).
    mirror: Vec<T>,
    /// The values being prepared for the next copy.
    staged: Vec<T>,
}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + PartialEq>
    Mirrored<T>
{
    fn new(stream: &Arc<CudaStream>, len: usize) -> Result<Self, DeviceError> {
        let dev = stream.alloc_zeros::<T>(len.max(1)).map_err(drv("alloc"))?;
        let ptr = addr(&dev, stream);
        Ok(Self {
            dev,
            ptr,
            mirror: Vec::with_capacity(len),
            staged: Vec::with_capacity(len),
        })
    }

    /// Make room for `len` values (allocates only when too small; keeps `staged`).
    fn reserve(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<(), DeviceError> {
        if self.dev.len() < len {
            // Dropping the old buffer frees it in stream order, after the kernels that
            // read it.
            self.dev = stream.alloc_zeros::<T>(len).map_err(drv("alloc"))?;
            self.ptr = addr(&self.dev, stream);
            self.mirror.clear();
        }
        self.mirror.reserve(len.saturating_sub(self.mirror.len()));
        self.staged.reserve(len.saturating_sub(self.staged.len()));
        Ok(())
    }

    /// Copy `staged` to the device unless the device holds it already (asynchronous; the
    /// host vector is staged by the driver before the call returns).
    fn upload(&mut self, stream: &Arc<CudaStream>, op: &'static str) -> Result<(), DeviceError> {
        let n = self.staged.len();
        self.reserve(stream, n)?;
        if n == 0 || (self.mirror.len() >= n && self.mirror[..n] == self.staged[..]) {
            return Ok(());
        }
        let mut view = self.dev.slice_mut(..n);
        stream
            .memcpy_htod(&self.staged[..], &mut view)
            .map_err(drv(op))?;
        self.mirror.clear();
        self.mirror.extend_from_slice(&self.staged);
        Ok(())
    }
}

/// The timing pool: a ring of start/end event pairs, one per interval (see the module
/// documentation).
#[derive(Debug)]
struct Timer {
    starts: Vec<CudaEvent>,
    ends: Vec<CudaEvent>,
    buckets: Vec<Bucket>,
    /// Slot of the oldest interval.
    head: usize,
    /// Intervals in the ring, the open one included.
    len: usize,
    /// Whether the newest interval has begun and not ended.
    open: bool,
    /// The oldest `synced` intervals ended before the last synchronisation point.
    synced: usize,
    /// Times of the intervals read so far and not yet taken.
    done: TimeBreakdown,
}

impl Timer {
    fn new(ctx: &Arc<CudaContext>) -> Result<Self, DeviceError> {
        let ev = || {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(drv("create event"))
        };
        let starts = (0..EVENT_PAIRS).map(|_| ev()).collect::<Result<_, _>>()?;
        let ends = (0..EVENT_PAIRS).map(|_| ev()).collect::<Result<_, _>>()?;
        Ok(Self {
            starts,
            ends,
            buckets: vec![Bucket::Blas; EVENT_PAIRS],
            head: 0,
            len: 0,
            open: false,
            synced: 0,
            done: TimeBreakdown::default(),
        })
    }

    fn slot(&self, k: usize) -> usize {
        (self.head + k) % EVENT_PAIRS
    }

    fn begin(
        &mut self,
        ctx: &CudaContext,
        stream: &CudaStream,
        bucket: Bucket,
    ) -> Result<(), DeviceError> {
        if self.open {
            // Nested: the open interval covers it.
            return Ok(());
        }
        // The same bucket as the newest interval, which ended after the last sync: extend.
        if self.len > self.synced && self.buckets[self.slot(self.len - 1)] == bucket {
            self.open = true;
            return Ok(());
        }
        if self.len == EVENT_PAIRS {
            self.harvest(ctx)?;
        }
        if self.len == EVENT_PAIRS {
            // Every interval is still in flight: extend the newest rather than wait.
            self.open = true;
            return Ok(());
        }
        let s = self.slot(self.len);
        self.starts[s].record(stream).map_err(drv("record event"))?;
        self.buckets[s] = bucket;
        self.len += 1;
        self.open = true;
        Ok(())
    }

    fn end(&mut self, stream: &CudaStream) -> Result<(), DeviceError> {
        if !self.open {
            return Ok(());
        }
        let s = self.slot(self.len - 1);
        self.ends[s].record(stream).map_err(drv("record event"))?;
        self.open = false;
        Ok(())
    }

    /// The stream has been synchronised: every interval ended so far is complete.
    fn mark_synced(&mut self) {
        self.synced = self.len - usize::from(self.open);
    }

    /// Read and recycle the oldest interval (complete).
    fn pop(&mut self) -> Result<(), DeviceError> {
        let s = self.slot(0);
        // SAFETY: both events belong to this device's context (bound by the caller) and
        // were recorded on its stream, the end after the start; the interval is complete,
        // so the call does not wait.
        let ms = unsafe {
            cudarc::driver::result::event::elapsed(
                self.starts[s].cu_event(),
                self.ends[s].cu_event(),
            )
        }
        .map_err(drv("event elapsed time"))?;
        charge(&mut self.done, self.buckets[s], f64::from(ms) * 1e-3);
        self.head = (self.head + 1) % EVENT_PAIRS;
        self.len -= 1;
        self.synced = self.synced.saturating_sub(1);
        Ok(())
    }

    /// Read the intervals known complete by the last synchronisation point.
    fn harvest(&mut self, ctx: &CudaContext) -> Result<(), DeviceError> {
        if self.synced > 0 {
            ctx.bind_to_thread().map_err(drv("bind context"))?;
        }
        while self.synced > 0 {
            self.pop()?;
        }
        Ok(())
    }

    /// The times read so far, plus those of the ended intervals whose end events a
    /// non-blocking query reports complete (in order, up to the first one still running).
    fn take(&mut self, ctx: &CudaContext) -> Result<TimeBreakdown, DeviceError> {
        self.harvest(ctx)?;
        while self.len > usize::from(self.open) {
            let complete = self.ends[self.slot(0)]
                .try_is_complete()
                .map_err(drv("event query"))?;
            if !complete {
                break;
            }
            ctx.bind_to_thread().map_err(drv("bind context"))?;
            self.pop()?;
        }
        Ok(std::mem::take(&mut self.done))
    }
}

/// Add `secs` to `bucket` of `t`.
fn charge(t: &mut TimeBreakdown, bucket: Bucket, secs: f64) {
    match bucket {
        Bucket::Spmv => t.spmv += secs,
        Bucket::Blas => t.blas += secs,
        Bucket::Allreduce => t.allreduce += secs,
        Bucket::Halo => t.halo += secs,
        Bucket::Transfer => t.transfer += secs,
        Bucket::Precond => t.precond += secs,
    }
}

/// One GPU, one stream of its own, the loaded kernels, the workspaces and the timing pool.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    k: Kernels,
    /// Block partials of reductions (`RED_BLOCKS` per result).
    partial: CudaSlice<f64>,
    /// Device address of `partial`.
    partial_ptr: u64,
    /// Vector address tables: sources (Gram `xs`, linear combination sources) and
    /// destinations (Gram `ys`, block linear combination destinations).
    tables: [Mirrored<u64>; 2],
    /// Coefficients of linear combinations.
    coef: Mirrored<f64>,
    timer: Timer,
    name: String,
}

// Thread ranks each open a device (several may share one GPU, each on its own stream); a
// device, like its vectors, may move between threads.
const _: () = {
    const fn send<T: Send>() {}
    send::<CudaDevice>();
    send::<CudaVector>();
};

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("gpu", &self.name)
            .field("ordinal", &self.ctx.ordinal())
            .field(
                "partial_results",
                &(self.partial.len() / RED_BLOCKS as usize),
            )
            .finish()
    }
}

/// The launch geometry of every reduction (fixed: part of the summation order).
fn red_cfg() -> LaunchConfig {
    LaunchConfig {
        grid_dim: (RED_BLOCKS, 1, 1),
        block_dim: (RED_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Blocks of a grid-stride launch over `n` items, at least 1 and at most `MAX_BLOCKS`.
fn blocks_for(n: usize) -> u32 {
    n.div_ceil(RED_THREADS as usize).clamp(1, MAX_BLOCKS) as u32
}

/// Launch geometry of an elementwise kernel over `n` values (grid-stride).
fn elem_cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks_for(n), 1, 1),
        block_dim: (RED_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Launch geometry of a plain SpMV over `rows` rows with `lanes` threads each (grid-stride
/// beyond `MAX_SPMV_BLOCKS` blocks).
fn spmv_cfg(rows: usize, lanes: u32) -> LaunchConfig {
    let threads = rows as u64 * u64::from(lanes);
    let blocks = threads
        .div_ceil(u64::from(RED_THREADS))
        .clamp(1, MAX_SPMV_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (RED_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `s`, or one zero when it is empty (so no device buffer has length 0); kernels never read
/// past the lengths they are given.
fn nonempty<T: Default + Copy>(s: &[T]) -> std::borrow::Cow<'_, [T]> {
    if s.is_empty() {
        std::borrow::Cow::Owned(vec![T::default()])
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// `n` as the kernels' 64-bit count.
fn count(n: usize) -> i64 {
    // Vector lengths are allocation sizes, below isize::MAX.
    n as i64
}

/// `n` as a kernel's 32-bit count (list lengths, result counts).
fn count32(op: &'static str, n: usize) -> Result<i32, DeviceError> {
    i32::try_from(n).map_err(|_| DeviceError::LengthMismatch {
        op,
        expected: i32::MAX as usize,
        got: n,
    })
}

/// A kernel argument of [`CudaDevice::launch`], passed by value.
#[derive(Debug, Clone, Copy)]
enum Arg {
    /// A 64-bit count ([`count`]).
    I64(i64),
    /// A 32-bit count, mode or flag.
    I32(i32),
    /// A scalar.
    F64(f64),
    /// A device address.
    Ptr(u64),
    /// The device address of the reduction partials, read at launch (after
    /// `ensure_partial`, which may move them).
    Partials,
}

impl Arg {
    /// Bytes of the parameter it fills.
    fn size(&self) -> usize {
        match self {
            Arg::I32(_) => 4,
            Arg::I64(_) | Arg::F64(_) | Arg::Ptr(_) | Arg::Partials => 8,
        }
    }
}

impl CudaDevice {
    /// Open GPU `ordinal` on a stream of its own: check for the driver (returning an
    /// error, never panicking, when it is absent), create the context and the stream, load
    /// the embedded kernels and allocate the workspaces and the timing pool.
    pub fn new(ordinal: usize) -> Result<Self, DeviceError> {
        let found = device_count()?;
        if ordinal >= found {
            return Err(DeviceError::NoDevice { ordinal, found });
        }
        let ctx = CudaContext::new(ordinal).map_err(drv("context"))?;
        // SAFETY: every buffer of this device is used on its one stream only (stream order
        // is the synchronisation), so cudarc's cross-stream event tracking is not needed;
        // disabled before any buffer or stream is created.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(drv("device name"))?;
        let stream = ctx.new_stream().map_err(drv("create stream"))?;
        let k = Kernels::load(&ctx)?;
        let partial = stream
            .alloc_zeros::<f64>(3 * RED_BLOCKS as usize)
            .map_err(drv("alloc"))?;
        let partial_ptr = addr(&partial, &stream);
        let tables = [Mirrored::new(&stream, 8)?, Mirrored::new(&stream, 8)?];
        let coef = Mirrored::new(&stream, 8)?;
        let timer = Timer::new(&ctx)?;
        Ok(Self {
            ctx,
            stream,
            k,
            partial,
            partial_ptr,
            tables,
            coef,
            timer,
            name,
        })
    }

    /// The GPU's name.
    pub fn gpu_name(&self) -> &str {
        &self.name
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every operation of this device runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// `dst[..len(src)] = src` as a device-to-device copy (the bandwidth reference).
    pub fn copy_dtod(&mut self, src: &CudaVector, dst: &mut CudaVector) -> Result<(), DeviceError> {
        let n = src.len;
        Device::copy(self, n, src, 0, dst, 0)
    }

    /// Upload a CSR block (validated first) in the layout of `kernel`.
    pub fn upload_csr_with(
        &mut self,
        a: CsrRef<'_>,
        kernel: SpmvKernel,
    ) -> Result<CudaCsr, DeviceError> {
        a.validate()?;
        let up = drv("upload matrix");
        let s = &self.stream;
        let stored = match kernel {
            SpmvKernel::CsrVector(t) => {
                let Some(lanes) = SPMV_LANES.iter().position(|&l| l == t) else {
                    return Err(DeviceError::InvalidCsr(format!(
                        "{t} SpMV lanes per row: use one of {SPMV_LANES:?}"
                    )));
                };
                let indptr: Vec<u64> = a.indptr.iter().map(|&p| p as u64).collect();
                Stored::Csr {
                    lanes,
                    indptr: s.clone_htod(&indptr).map_err(&up)?,
                    cols: s.clone_htod(&*nonempty(a.cols)).map_err(&up)?,
                    vals: s.clone_htod(&*nonempty(a.vals)).map_err(&up)?,
                }
            }
            SpmvKernel::Sell => {
                let m = Sell::from_csr(a, SELL_C, SELL_SIGMA)?;
                Stored::Sell {
                    slice_ptr: s.clone_htod(&m.slice_ptr).map_err(&up)?,
                    row_len: s.clone_htod(&*nonempty(&m.row_len)).map_err(&up)?,
                    perm: s.clone_htod(&*nonempty(&m.perm)).map_err(&up)?,
                    cols: s.clone_htod(&*nonempty(&m.cols)).map_err(&up)?,
                    vals: s.clone_htod(&*nonempty(&m.vals)).map_err(&up)?,
                }
            }
        };
        Ok(CudaCsr {
            rows: a.rows(),
            ncols: a.ncols,
            nnz: a.vals.len(),
            stored,
        })
    }

    /// Halo packing (`scatter` false: `out[i] = src[idx[i]]`) or unpacking (true:
    /// `out[idx[i]] = src[i]`), every index checked against the vector it addresses.
    fn indexed(
        &mut self,
        scatter: bool,
        src: &CudaVector,
        idx: &CudaIndex,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        let (op, dense, addressed) = if scatter {
            ("scatter", src.len, out.len)
        } else {
            ("gather", out.len, src.len)
        };
        check_len(op, idx.len, dense)?;
        if let Some(bad) = idx.max.filter(|&m| m as usize >= addressed) {
            return Err(DeviceError::IndexOutOfRange {
                op,
                index: bad as usize,
                len: addressed,
            });
        }
        let f = if scatter {
            &self.k.scatter
        } else {
            &self.k.gather
        };
        let ia = addr(&idx.buf, &self.stream);
        let args = [I64(count(idx.len)), Ptr(src.at(0)), Ptr(ia), Ptr(out.at(0))];
        // SAFETY: reads `idx[..len]` (its length); the packed side (`out` for gather, `src`
        // for scatter) holds len values, and the addressed side holds every index
        // (<= idx.max, checked).
        unsafe { self.elementwise(f, idx.len, op, &args) }
    }

    /// Queue kernel `f` on this device's stream over `cfg` with `args` in order; a driver
    /// error names `op`.
    ///
    /// # Safety
    /// `args` are the kernel's parameters, in order and type, and every address among them
    /// (the partials included) holds what the kernel reads and writes over `cfg`.
    unsafe fn launch(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        op: &'static str,
        args: &[Arg],
    ) -> Result<(), DeviceError> {
        // The argument list against the kernel's parameters in the PTX: a count or size
        // mismatch between this file and kernels.cu is an error, never a launch that reads
        // garbage.
        let fits = |want: &[usize]| {
            want.len() == args.len() && want.iter().zip(args).all(|(w, a)| *w == a.size())
        };
        match self.k.signature(f) {
            Some((_, want)) if fits(want) => {}
            found => {
                let (kernel, expected) = found.map_or(("?", Vec::new()), |(n, w)| (n, w.to_vec()));
                return Err(DeviceError::KernelArguments {
                    op,
                    kernel,
                    expected,
                    got: args.iter().map(Arg::size).collect(),
                });
            }
        }
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::I64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
                Arg::F64(v) => b.arg(v),
                Arg::Ptr(v) => b.arg(v),
                Arg::Partials => b.arg(&self.partial_ptr),
            };
        }
        // SAFETY: the caller's contract.
        unsafe { b.launch(cfg) }.map_err(drv(op))?;
        Ok(())
    }

    /// [`CudaDevice::launch`] of an elementwise kernel over `n` values ([`elem_cfg`]);
    /// nothing when `n == 0`.
    ///
    /// # Safety
    /// As [`CudaDevice::launch`].
    unsafe fn elementwise(
        &self,
        f: &CudaFunction,
        n: usize,
        op: &'static str,
        args: &[Arg],
    ) -> Result<(), DeviceError> {
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.launch(f, elem_cfg(n), op, args) }
    }

    /// `y = f(alpha, x, y)` on `n` values by an elementwise kernel `f` with the parameters
    /// `(n, alpha, x, y)` (`axpy`, `scale`).
    fn update(
        &self,
        f: &CudaFunction,
        op: &'static str,
        n: usize,
        alpha: f64,
        x: &CudaVector,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        check_len(op, n, x.len)?;
        check_len(op, n, y.len)?;
        let args = [I64(count(n)), F64(alpha), Ptr(x.at(0)), Ptr(y.at(0))];
        // SAFETY: x and y hold at least n values (checked).
        unsafe { self.elementwise(f, n, op, &args) }
    }

    /// `out = f(a, b)` on `n` values by an elementwise kernel `f` with the parameters
    /// `(n, a, b, out)` (`mul`, `divide`).
    fn map2(
        &self,
        f: &CudaFunction,
        op: &'static str,
        n: usize,
        a: &CudaVector,
        b: &CudaVector,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        check_len(op, n, a.len)?;
        check_len(op, n, b.len)?;
        check_len(op, n, out.len)?;
        let args = [I64(count(n)), Ptr(a.at(0)), Ptr(b.at(0)), Ptr(out.at(0))];
        // SAFETY: a, b and out hold at least n values (checked).
        unsafe { self.elementwise(f, n, op, &args) }
    }

    /// A reduction to `out[at..at + results]` (which the caller checked `out` holds): the
    /// kernel `f(kernels)` on the fixed grid writes `results` x RED_BLOCKS partials
    /// ([`Arg::Partials`], sized here), which `finish` sums.
    ///
    /// # Safety
    /// As [`CudaDevice::launch`], the partials aside.
    unsafe fn reduce(
        &mut self,
        f: fn(&Kernels) -> &CudaFunction,
        results: usize,
        op: &'static str,
        args: &[Arg],
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        self.ensure_partial(results)?;
        // SAFETY: the caller's contract; the partials hold `results` x RED_BLOCKS values.
        unsafe { self.launch(f(&self.k), red_cfg(), op, args) }?;
        self.finish(results, out, at)
    }

    /// Make sure the partials hold `results` results (allocates only when too small).
    fn ensure_partial(&mut self, results: usize) -> Result<(), DeviceError> {
        let need = results.max(1) * RED_BLOCKS as usize;
        if self.partial.len() < need {
            // The old buffer is freed in stream order, after the kernels that use it.
            self.partial = self.stream.alloc_zeros(need).map_err(drv("alloc"))?;
            self.partial_ptr = addr(&self.partial, &self.stream);
        }
        Ok(())
    }

    /// Stage the addresses of `vs` in table `t` and copy them to the device if changed.
    fn set_table<L: VecList<CudaVector> + ?Sized>(
        &mut self,
        t: usize,
        vs: &L,
    ) -> Result<(), DeviceError> {
        let table = &mut self.tables[t];
        table.staged.clear();
        table.staged.extend((0..vs.count()).map(|i| vs.get(i).ptr));
        table.upload(&self.stream, "vector table")
    }

    /// Stage `coef` and copy it to the device if changed (a zero of either sign skips its
    /// vector on the device, so comparing values, not bits, is enough).
    fn set_coef(&mut self, coef: &[f64]) -> Result<(), DeviceError> {
        self.coef.staged.clear();
        self.coef.staged.extend_from_slice(coef);
        self.coef.upload(&self.stream, "coefficients")
    }

    /// `out[at..at + results]` = the sums of the block partials of the last reduction.
    fn finish(
        &mut self,
        results: usize,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        let blocks = u32::try_from(results).map_err(|_| DeviceError::LengthMismatch {
            op: "reduction (results)",
            expected: u32::MAX as usize,
            got: results,
        })?;
        let nblocks = RED_BLOCKS as i32;
        let dst = out.at(at);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [I32(nblocks), Partials, Ptr(dst)];
        // SAFETY: the kernel reads `results * RED_BLOCKS` partials (`ensure_partial` sized
        // the buffer before the reduction that wrote them) and writes `results` values from
        // `out[at]`, which the caller checked to hold `at + results` values.
        unsafe { self.launch(&self.k.finish_sums, cfg, "finish_sums", &args) }
    }

    /// The SpMV of the first `rows` rows of `a`; fused ([`Fused`]) with `x . y` of all
    /// rows, or with the error bound of the true residual, into the partials (the caller
    /// finishes it).
    fn launch_spmv(
        &self,
        a: &CudaCsr,
        rows: usize,
        x: &CudaVector,
        y: &mut CudaVector,
        fused: Fused<'_>,
    ) -> Result<(), DeviceError> {
        let (xa, ya) = (Ptr(x.at(0)), Ptr(y.at(0)));
        let s = &self.stream;
        // The fused kernels take the partials last (the bound's after `b` and `w`); the
        // plain SELL kernel takes the row prefix after the position count.
        let (f, cfg, list, len): (_, _, [Arg; 12], usize) = match &a.stored {
            Stored::Csr {
                lanes,
                indptr,
                cols,
                vals,
            } => {
                let [ip, ci, va] = [addr(indptr, s), addr(cols, s), addr(vals, s)].map(Ptr);
                let head = [I64(count(rows)), ip, ci, va, xa, ya];
                match fused {
                    Fused::Plain => {
                        let cfg = spmv_cfg(rows, SPMV_LANES[*lanes]);
                        (&self.k.spmv[*lanes], cfg, pad(head), 6)
                    }
                    Fused::Dot => {
                        let list = pad([head[0], ip, ci, va, xa, ya, Partials]);
                        (&self.k.spmv_dot[*lanes], red_cfg(), list, 7)
                    }
                    Fused::Bound { b, w } => {
                        let (ba, wa) = (Ptr(b.at(0)), Ptr(w.at(0)));
                        let list = pad([head[0], ip, ci, va, xa, ya, ba, wa, Partials]);
                        (&self.k.spmv_bound[*lanes], red_cfg(), list, 9)
                    }
                }
            }
            Stored::Sell {
                slice_ptr,
                row_len,
                perm,
                cols,
                vals,
            } => {
                let [sp, rl, pe, ci, va] = [
                    addr(slice_ptr, s),
                    addr(row_len, s),
                    addr(perm, s),
                    addr(cols, s),
                    addr(vals, s),
                ]
                .map(Ptr);
                let (npos, c) = (I64(count(a.rows)), I32(SELL_C as i32));
                match fused {
                    Fused::Plain => {
                        let list = [npos, I64(count(rows)), c, sp, rl, pe, ci, va, xa, ya];
                        (&self.k.spmv_sell, spmv_cfg(a.rows, 1), pad(list), 10)
                    }
                    Fused::Dot => {
                        let list = [npos, c, sp, rl, pe, ci, va, xa, ya, Partials];
                        (&self.k.spmv_dot_sell, red_cfg(), pad(list), 10)
                    }
                    Fused::Bound { b, w } => {
                        let (ba, wa) = (Ptr(b.at(0)), Ptr(w.at(0)));
                        let list = [npos, c, sp, rl, pe, ci, va, xa, ya, ba, wa, Partials];
                        (&self.k.spmv_bound_sell, red_cfg(), list, 12)
                    }
                }
            }
        };
        let args = &list[..len];
        // SAFETY: `upload_csr_with` validated the block (offsets non-decreasing within nnz,
        // columns < ncols; SELL: every sorted position reads its own entries within its
        // slice, `perm` a permutation of 0..a.rows, positions whose row is >= `rows`
        // skipped) and `rows <= a.rows`; the callers checked that x holds ncols values (and
        // `rows` for the dot), y `rows` (and b and w `rows` for the bound); the fused
        // kernels run on the fixed grid and write RED_BLOCKS partials, which
        // `ensure_partial` sized.
        unsafe { self.launch(f, cfg, "spmv", args) }
    }
}

/// What an SpMV launch fuses with the product ([`CudaDevice::launch_spmv`]).
#[derive(Clone, Copy)]
enum Fused<'a> {
    /// Nothing: the plain SpMV.
    Plain,
    /// `x . y` of all rows.
    Dot,
    /// `sum w_i e_i^2` of the rows' residual error bounds, from `b` ([`Device::residual_bound`]).
    Bound {
        b: &'a CudaVector,
        w: &'a CudaVector,
    },
}

/// An argument list of fewer than 12 arguments, padded with unread ones (only the first
/// `len` are passed).
fn pad<const N: usize>(list: [Arg; N]) -> [Arg; 12] {
    std::array::from_fn(|i| list.get(i).copied().unwrap_or(I64(0)))
}

impl Device for CudaDevice {
    type Vector = CudaVector;
    type Matrix = CudaCsr;
    type Index = CudaIndex;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn threads(&self) -> usize {
        1
    }

    fn host_memory(&self) -> bool {
        false
    }

    fn len(v: &CudaVector) -> usize {
        v.len
    }

    fn shape(a: &CudaCsr) -> (usize, usize) {
        (a.rows, a.ncols)
    }

    fn nnz(a: &CudaCsr) -> usize {
        a.nnz
    }

    fn reserve(&mut self, _n: usize, results: usize, lists: usize) -> Result<(), DeviceError> {
        // Reductions use a fixed grid: their workspace depends on the result count only.
        self.ensure_partial(results.max(3))?;
        for t in &mut self.tables {
            t.reserve(&self.stream, lists)?;
        }
        // A block linear combination takes up to lists x lists coefficients.
        self.coef
            .reserve(&self.stream, lists.saturating_mul(lists).max(lists))
    }

    fn zeros(&mut self, n: usize) -> Result<CudaVector, DeviceError> {
        let buf = self
            .stream
            .alloc_zeros::<f64>(n.max(1))
            .map_err(drv("alloc"))?;
        Ok(CudaVector::new(buf, n, &self.stream))
    }

    fn upload(&mut self, host: &[f64]) -> Result<CudaVector, DeviceError> {
        let buf = self
            .stream
            .clone_htod(&*nonempty(host))
            .map_err(drv("upload"))?;
        Ok(CudaVector::new(buf, host.len(), &self.stream))
    }

    fn upload_csr(&mut self, a: HostCsr) -> Result<CudaCsr, DeviceError> {
        let kernel = SpmvKernel::auto(a.rows(), a.vals.len());
        self.upload_csr_with(a.as_csr_ref(), kernel)
    }

    fn upload_index(&mut self, idx: &[u32]) -> Result<CudaIndex, DeviceError> {
        let buf = self
            .stream
            .clone_htod(&*nonempty(idx))
            .map_err(drv("upload index"))?;
        Ok(CudaIndex {
            buf,
            len: idx.len(),
            max: idx.iter().copied().max(),
        })
    }

    fn index_len(idx: &CudaIndex) -> usize {
        idx.len
    }

    fn write(&mut self, host: &[f64], dst: &mut CudaVector, at: usize) -> Result<(), DeviceError> {
        check_len("write", at + host.len(), dst.len)?;
        if host.is_empty() {
            return Ok(());
        }
        let mut view = dst.buf.slice_mut(at..at + host.len());
        // Pageable host memory: the driver stages it before returning, so `host` may be
        // reused at once and the copy does not wait for the device.
        self.stream
            .memcpy_htod(host, &mut view)
            .map_err(drv("write"))
    }

    fn read(&mut self, src: &CudaVector, at: usize, host: &mut [f64]) -> Result<(), DeviceError> {
        check_len("read", at + host.len(), src.len)?;
        if !host.is_empty() {
            let view = src.buf.slice(at..at + host.len());
            self.stream.memcpy_dtoh(&view, host).map_err(drv("read"))?;
        }
        self.synchronize()
    }

    fn copy(
        &mut self,
        n: usize,
        src: &CudaVector,
        src_at: usize,
        dst: &mut CudaVector,
        dst_at: usize,
    ) -> Result<(), DeviceError> {
        check_len("copy", src_at + n, src.len)?;
        check_len("copy", dst_at + n, dst.len)?;
        if n == 0 {
            return Ok(());
        }
        let from = src.buf.slice(src_at..src_at + n);
        let mut to = dst.buf.slice_mut(dst_at..dst_at + n);
        self.stream.memcpy_dtod(&from, &mut to).map_err(drv("copy"))
    }

    fn fill(
        &mut self,
        n: usize,
        value: f64,
        dst: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        check_len("fill", at + n, dst.len)?;
        let args = [I64(count(n)), F64(value), Ptr(dst.at(at))];
        // SAFETY: writes `dst[at..at + n]`, within its length (checked).
        unsafe { self.elementwise(&self.k.fill, n, "fill", &args) }
    }

    fn gather(
        &mut self,
        src: &CudaVector,
        idx: &CudaIndex,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        self.indexed(false, src, idx, out)
    }

    fn scatter(
        &mut self,
        src: &CudaVector,
        idx: &CudaIndex,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        self.indexed(true, src, idx, out)
    }

    fn spmv(
        &mut self,
        a: &CudaCsr,
        rows: usize,
        x: &CudaVector,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        check_len("spmv (rows)", rows, a.rows)?;
        check_len("spmv (x)", a.ncols, x.len)?;
        check_len("spmv (y)", rows, y.len)?;
        if rows == 0 {
            return Ok(());
        }
        self.launch_spmv(a, rows, x, y, Fused::Plain)
    }

    fn spmv_dot(
        &mut self,
        a: &CudaCsr,
        x: &CudaVector,
        y: &mut CudaVector,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        let rows = a.rows;
        check_len("spmv_dot (x)", a.ncols.max(rows), x.len)?;
        check_len("spmv_dot (y)", rows, y.len)?;
        check_len("spmv_dot (results)", at + 1, out.len)?;
        self.ensure_partial(1)?;
        self.launch_spmv(a, rows, x, y, Fused::Dot)?;
        self.finish(1, out, at)
    }

    fn axpy(
        &mut self,
        n: usize,
        alpha: f64,
        x: &CudaVector,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        self.update(&self.k.axpy, "axpy", n, alpha, x, y)
    }

    fn xpay(
        &mut self,
        n: usize,
        x: &CudaVector,
        beta: f64,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        check_len("xpay", n, x.len)?;
        check_len("xpay", n, y.len)?;
        let args = [I64(count(n)), Ptr(x.at(0)), F64(beta), Ptr(y.at(0))];
        // SAFETY: x and y hold at least n values (checked).
        unsafe { self.elementwise(&self.k.xpay, n, "xpay", &args) }
    }

    fn scale(
        &mut self,
        n: usize,
        alpha: f64,
        x: &CudaVector,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        self.update(&self.k.scale, "scale", n, alpha, x, y)
    }

    fn mul(
        &mut self,
        n: usize,
        a: &CudaVector,
        b: &CudaVector,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        self.map2(&self.k.mul, "mul", n, a, b, out)
    }

    fn div(
        &mut self,
        n: usize,
        a: &CudaVector,
        b: &CudaVector,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        self.map2(&self.k.divide, "div", n, a, b, out)
    }

    fn representable(
        &mut self,
        n: usize,
        s: &CudaVector,
        scale: f64,
        x: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        check_len("representable", n, s.len)?;
        check_len("representable", n, x.len)?;
        let args = [I64(count(n)), Ptr(s.at(0)), F64(scale), Ptr(x.at(0))];
        // SAFETY: s and x hold at least n values (checked).
        unsafe { self.elementwise(&self.k.representable, n, "representable", &args) }
    }

    fn cg_update(
        &mut self,
        n: usize,
        alpha: f64,
        beta: f64,
        r: &CudaVector,
        p: &mut CudaVector,
        x: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        for len in [r.len, p.len, x.len] {
            check_len("cg_update", n, len)?;
        }
        let [ra, pa, xa] = [r, &*p, &*x].map(|v| Ptr(v.at(0)));
        let args = [I64(count(n)), F64(alpha), F64(beta), ra, pa, xa];
        // SAFETY: r, p and x hold at least n values (checked) and are distinct vectors.
        unsafe { self.elementwise(&self.k.cg_update, n, "cg_update", &args) }
    }

    fn ccg_update(
        &mut self,
        n: usize,
        a: f64,
        beta: f64,
        ar: &CudaVector,
        v: CcgVecs<'_, CudaVector>,
        w: Option<&CudaVector>,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        for len in [ar.len, v.r.len, v.p.len, v.ap.len, v.x.len] {
            check_len("ccg_update", n, len)?;
        }
        if let Some(w) = w {
            check_len("ccg_update", n, w.len)?;
        }
        let k = 1 + usize::from(w.is_some());
        check_len("ccg_update (results)", at + k, out.len)?;
        let [ara, ra, pa, apa, xa] = [ar, &*v.r, &*v.p, &*v.ap, &*v.x].map(|v| Ptr(v.at(0)));
        let (m, a, beta) = (I64(count(n)), F64(a), F64(beta));
        let mut list = [m, a, beta, ara, ra, pa, apa, xa, Partials, Partials];
        // `ccg_update` takes the weights before the partials, `ccg_update_dot` no weights.
        let (kernel, args): (fn(&Kernels) -> &CudaFunction, &[Arg]) = match w {
            Some(w) => {
                list[8] = Ptr(w.at(0));
                (|k| &k.ccg_update, &list)
            }
            None => (|k| &k.ccg_update_dot, &list[..9]),
        };
        // SAFETY: the vectors hold at least n values (checked); r, p, ap and x are
        // distinct from each other and from ar and w (borrows); the argument list is the
        // chosen kernel's (w only for `ccg_update`).
        unsafe { self.reduce(kernel, k, "ccg_update", args, out, at) }
    }

    fn pipecg_update(
        &mut self,
        n: usize,
        a: f64,
        beta: f64,
        q: &CudaVector,
        v: PipecgVecs<'_, CudaVector>,
        wt: &CudaVector,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        for len in [q, wt, &*v.w, &*v.r, &*v.z, &*v.s, &*v.p, &*v.x].map(|v| v.len) {
            check_len("pipecg_update", n, len)?;
        }
        check_len("pipecg_update (results)", at + PIPECG_SUMS, out.len)?;
        let [qa, wa, ra, za, sa, pa, xa, wta] =
            [q, &*v.w, &*v.r, &*v.z, &*v.s, &*v.p, &*v.x, wt].map(|v| Ptr(v.at(0)));
        let (m, a, beta) = (I64(count(n)), F64(a), F64(beta));
        let args = [m, a, beta, qa, wa, ra, za, sa, pa, xa, wta, Partials];
        let kernel: fn(&Kernels) -> &CudaFunction = |k| &k.pipecg_update;
        // SAFETY: the eight vectors hold at least n values (checked); the six updated ones
        // are distinct.
        unsafe { self.reduce(kernel, PIPECG_SUMS, "pipecg_update", &args, out, at) }
    }

    fn axpy_dot(
        &mut self,
        n: usize,
        alpha: f64,
        x: &CudaVector,
        y: &mut CudaVector,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        for len in [x.len, y.len] {
            check_len("axpy_dot", n, len)?;
        }
        check_len("axpy_dot (results)", at + 1, out.len)?;
        let [xa, ya] = [x, &*y].map(|v| Ptr(v.at(0)));
        let args = [I64(count(n)), F64(alpha), xa, ya, Partials];
        // SAFETY: x and y hold at least n values (checked).
        unsafe { self.reduce(|k| &k.axpy_dot, 1, "axpy_dot", &args, out, at) }
    }

    fn axpy_norms(
        &mut self,
        n: usize,
        alpha: f64,
        x: &CudaVector,
        y: &mut CudaVector,
        w: &CudaVector,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        for len in [x.len, y.len, w.len] {
            check_len("axpy_norms", n, len)?;
        }
        check_len("axpy_norms (results)", at + 2, out.len)?;
        let [xa, ya, wa] = [x, &*y, w].map(|v| Ptr(v.at(0)));
        let args = [I64(count(n)), F64(alpha), xa, ya, wa, Partials];
        // SAFETY: x, y and w hold at least n values (checked).
        unsafe { self.reduce(|k| &k.axpy_norms, 2, "axpy_norms", &args, out, at) }
    }

    fn residual_norms(
        &mut self,
        n: usize,
        b: &CudaVector,
        y: &mut CudaVector,
        w: &CudaVector,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        for len in [b.len, y.len, w.len] {
            check_len("residual_norms", n, len)?;
        }
        check_len("residual_norms (results)", at + 2, out.len)?;
        let [ba, ya, wa] = [b, &*y, w].map(|v| Ptr(v.at(0)));
        let args = [I64(count(n)), ba, ya, wa, Partials];
        // SAFETY: b, y and w hold at least n values (checked).
        unsafe { self.reduce(|k| &k.residual_norms, 2, "residual_norms", &args, out, at) }
    }

    fn residual_bound(
        &mut self,
        a: &CudaCsr,
        x: &CudaVector,
        b: &CudaVector,
        y: &mut CudaVector,
        w: &CudaVector,
        out: &mut CudaVector,
        at: usize,
        bound_at: usize,
    ) -> Result<(), DeviceError> {
        let rows = a.rows;
        let lens = [x.len, b.len, y.len, w.len, out.len];
        super::residual_bound_operands(rows, a.ncols, lens, at, bound_at)?;
        // y = A x (the bits of `spmv`) with the bound's partials, summed into
        // out[bound_at]; then y = b - y with its norms (the bits of `residual_norms`).
        self.ensure_partial(2)?;
        self.launch_spmv(a, rows, x, y, Fused::Bound { b, w })?;
        self.finish(1, out, bound_at)?;
        let [ba, ya, wa] = [b, &*y, w].map(|v| Ptr(v.at(0)));
        let args = [I64(count(rows)), ba, ya, wa, Partials];
        // SAFETY: b, y and w hold at least `rows` values (checked).
        unsafe { self.reduce(|k| &k.residual_norms, 2, "residual_bound", &args, out, at) }
    }

    fn wnorm(
        &mut self,
        n: usize,
        r: &CudaVector,
        w: &CudaVector,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError> {
        check_len("wnorm", n, r.len)?;
        check_len("wnorm", n, w.len)?;
        check_len("wnorm (results)", at + 1, out.len)?;
        let args = [I64(count(n)), Ptr(r.at(0)), Ptr(w.at(0)), Partials];
        // SAFETY: r and w hold at least n values (checked).
        unsafe { self.reduce(|k| &k.wnorm, 1, "wnorm", &args, out, at) }
    }

    fn gram<X, Y>(
        &mut self,
        n: usize,
        xs: &X,
        ys: &Y,
        shape: GramShape,
        w: Option<&CudaVector>,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError>
    where
        X: VecList<CudaVector> + ?Sized,
        Y: VecList<CudaVector> + ?Sized,
    {
        let (nx, ny) = (xs.count(), ys.count());
        let k = super::gram_results::<Self, _, _>(n, xs, ys, shape, w, out, at)?;
        if k == 0 {
            return Ok(());
        }
        let (nx32, ny32) = (count32("gram", nx)?, count32("gram", ny)?);
        let tiles = match shape {
            GramShape::Full => nx.div_ceil(GRAM_TILE) * ny.div_ceil(GRAM_TILE),
            GramShape::Upper => {
                let g = nx.div_ceil(GRAM_TILE);
                g * (g + 1) / 2
            }
        };
        let tiles = u32::try_from(tiles).map_err(|_| DeviceError::LengthMismatch {
            op: "gram (tiles)",
            expected: u32::MAX as usize,
            got: tiles,
        })?;
        self.ensure_partial(k)?;
        self.set_table(0, xs)?;
        self.set_table(1, ys)?;
        let upper = I32(i32::from(shape == GramShape::Upper));
        let weighted = I32(i32::from(w.is_some()));
        // Unweighted: any valid address (never read).
        let wa = w.map_or(Partials, |w| Ptr(w.at(0)));
        let (xt, yt) = (Ptr(self.tables[0].ptr), Ptr(self.tables[1].ptr));
        let cfg = LaunchConfig {
            grid_dim: (tiles, RED_BLOCKS, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (m, nx32, ny32) = (I64(count(n)), I32(nx32), I32(ny32));
        let args = [m, nx32, ny32, upper, xt, yt, weighted, wa, Partials];
        // SAFETY: the tables hold the addresses of nx and ny live vectors of at least n
        // values (checked; copied in stream order before this launch), w holds n values
        // when given; the tiles cover exactly the pairs of `shape`, whose k results have
        // k x RED_BLOCKS partials (`ensure_partial`).
        unsafe { self.launch(&self.k.gram, cfg, "gram", &args) }?;
        self.finish(k, out, at)
    }

    fn lincomb<L>(
        &mut self,
        n: usize,
        coef: &[f64],
        vs: &L,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError>
    where
        L: VecList<CudaVector> + ?Sized,
    {
        let count_v = vs.count();
        check_len("lincomb (coefficients)", count_v, coef.len())?;
        check_list::<Self, _>("lincomb", n, vs)?;
        check_len("lincomb", n, y.len)?;
        let coef = &coef[..count_v];
        if n == 0 || coef.iter().all(|&c| c == 0.0) {
            // Every vector skipped: y unchanged.
            return Ok(());
        }
        let m32 = count32("lincomb", count_v)?;
        self.set_table(0, vs)?;
        self.set_coef(coef)?;
        let (vt, ct) = (self.tables[0].ptr, self.coef.ptr);
        let args = [I64(count(n)), I32(m32), Ptr(vt), Ptr(ct), Ptr(y.at(0))];
        // SAFETY: the table holds the addresses of m32 live vectors of at least n values
        // (checked), the coefficient buffer m32 values (both copied in stream order before
        // this launch); y holds n values and is none of the sources.
        unsafe { self.elementwise(&self.k.lincomb, n, "lincomb", &args) }
    }

    fn lincomb_norms<L>(
        &mut self,
        n: usize,
        coef: &[f64],
        vs: &L,
        y: &mut CudaVector,
        w: &CudaVector,
        out: &mut CudaVector,
        at: usize,
    ) -> Result<(), DeviceError>
    where
        L: VecList<CudaVector> + ?Sized,
    {
        let count_v = vs.count();
        check_len("lincomb_norms (coefficients)", count_v, coef.len())?;
        check_list::<Self, _>("lincomb_norms", n, vs)?;
        check_len("lincomb_norms", n, y.len)?;
        check_len("lincomb_norms (weights)", n, w.len)?;
        check_len("lincomb_norms (results)", at + 2, out.len)?;
        let m32 = count32("lincomb_norms", count_v)?;
        self.set_table(0, vs)?;
        self.set_coef(&coef[..count_v])?;
        let (vt, ct) = (Ptr(self.tables[0].ptr), Ptr(self.coef.ptr));
        let (m, ya, wa) = (I64(count(n)), Ptr(y.at(0)), Ptr(w.at(0)));
        let args = [m, I32(m32), vt, ct, ya, wa, Partials];
        // SAFETY: as `lincomb` (with m32 = 0 the table is not read); w holds n values.
        unsafe { self.reduce(|k| &k.lincomb_norms, 2, "lincomb_norms", &args, out, at) }
    }

    fn lincomb_block<S, T>(
        &mut self,
        n: usize,
        coef: &[f64],
        srcs: &S,
        dsts: &mut T,
    ) -> Result<(), DeviceError>
    where
        S: VecList<CudaVector> + ?Sized,
        T: VecListMut<CudaVector> + ?Sized,
    {
        let (ns, nd) = (srcs.count(), dsts.count());
        check_len("lincomb_block (coefficients)", ns * nd, coef.len())?;
        check_list::<Self, _>("lincomb_block", n, srcs)?;
        for j in 0..nd {
            check_len("lincomb_block", n, dsts.get_mut(j).len)?;
        }
        let coef = &coef[..ns * nd];
        if n == 0 || coef.iter().all(|&c| c == 0.0) {
            // Every source skipped: the destinations are unchanged.
            return Ok(());
        }
        let (ns32, nd32) = (count32("lincomb_block", ns)?, count32("lincomb_block", nd)?);
        self.set_table(0, srcs)?;
        {
            let table = &mut self.tables[1];
            table.staged.clear();
            for j in 0..nd {
                table.staged.push(dsts.get_mut(j).ptr);
            }
            table.upload(&self.stream, "vector table")?;
        }
        self.set_coef(coef)?;
        let [st, ct, dt] = [self.tables[0].ptr, self.coef.ptr, self.tables[1].ptr].map(Ptr);
        let groups = nd.div_ceil(LINCOMB_DSTS) as u32;
        let cfg = LaunchConfig {
            grid_dim: (groups, blocks_for(n), 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [I64(count(n)), I32(ns32), I32(nd32), st, ct, dt];
        // SAFETY: the tables hold the addresses of ns sources and nd distinct destinations,
        // each of at least n values (checked), the coefficient buffer ns x nd values (all
        // copied in stream order before this launch); no destination is a source (the
        // borrow rules of the callers).
        unsafe { self.launch(&self.k.lincomb_block, cfg, "lincomb_block", &args) }
    }

    fn basis_step(
        &mut self,
        n: usize,
        step: BasisStep,
        a: &CudaVector,
        s: &CudaVector,
        prev: Option<&CudaVector>,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        check_len("basis_step", n, a.len)?;
        check_len("basis_step", n, s.len)?;
        check_len("basis_step", n, out.len)?;
        let prev = super::basis_prev(step, n, prev, |p: &CudaVector| p.len)?;
        let (mode, p1, p2): (i32, f64, f64) = match step {
            BasisStep::Copy => (0, 0.0, 0.0),
            BasisStep::Shift(theta) => (1, theta, 0.0),
            BasisStep::ChebyshevFirst { eta, zeta } => (2, eta, zeta),
            BasisStep::Chebyshev { eta, zeta } => (3, eta, zeta),
        };
        // Steps that do not read `prev` get `a` (a valid address, never read).
        let [aa, sa, pa, oa] = [a, s, prev.unwrap_or(a), &*out].map(|v| Ptr(v.at(0)));
        let args = [I64(count(n)), I32(mode), F64(p1), F64(p2), aa, sa, pa, oa];
        // SAFETY: a, s, out (and prev for mode 3) hold at least n values (checked); out is
        // distinct from the inputs.
        unsafe { self.elementwise(&self.k.basis_step, n, "basis_step", &args) }
    }

    fn smooth_update(
        &mut self,
        n: usize,
        eta: f64,
        r: &CudaVector,
        x: &CudaVector,
        s: &mut CudaVector,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        for len in [r.len, x.len, s.len, y.len] {
            check_len("smooth_update", n, len)?;
        }
        let [ra, xa, sa, ya] = [r, x, &*s, &*y].map(|v| Ptr(v.at(0)));
        let args = [I64(count(n)), F64(eta), ra, xa, sa, ya];
        // SAFETY: the four vectors hold at least n values (checked); s and y are distinct
        // from each other and from r and x.
        unsafe { self.elementwise(&self.k.smooth_update, n, "smooth_update", &args) }
    }

    fn smooth_rescale(
        &mut self,
        n: usize,
        g: f64,
        x0: &CudaVector,
        s: &mut CudaVector,
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        for len in [x0.len, s.len, y.len] {
            check_len("smooth_rescale", n, len)?;
        }
        let [xa, sa, ya] = [x0, &*s, &*y].map(|v| Ptr(v.at(0)));
        let args = [I64(count(n)), F64(g), xa, sa, ya];
        // SAFETY: the three vectors hold at least n values (checked); s and y are distinct
        // from each other and from x0.
        unsafe { self.elementwise(&self.k.smooth_rescale, n, "smooth_rescale", &args) }
    }

    fn event_timed(&self) -> bool {
        true
    }

    fn event_begin(&mut self, bucket: Bucket) -> Result<(), DeviceError> {
        self.timer.begin(&self.ctx, &self.stream, bucket)
    }

    fn event_end(&mut self) -> Result<(), DeviceError> {
        self.timer.end(&self.stream)
    }

    fn take_event_times(&mut self) -> Result<TimeBreakdown, DeviceError> {
        self.timer.take(&self.ctx)
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.stream.synchronize().map_err(drv("synchronize"))?;
        self.timer.mark_synced();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel's parameters, read from the PTX: scalars and pointers, as the argument
    /// lists of this file build them.
    #[test]
    fn every_kernel_has_a_signature() {
        let sig = entry_signatures(KERNELS_PTX);
        for name in KERNEL_NAMES {
            assert!(sig.iter().any(|(n, _)| *n == name), "{name}");
        }
        let of = |n: &str| sig.iter().find(|(e, _)| *e == n).map(|(_, s)| s.clone());
        assert_eq!(of("axpy"), Some(vec![8, 8, 8, 8]));
        assert_eq!(of("finish_sums"), Some(vec![4, 8, 8]));
        assert_eq!(of("spmv_sell"), Some(vec![8, 8, 4, 8, 8, 8, 8, 8, 8, 8]));
        assert_eq!(of("gram"), Some(vec![8, 4, 4, 4, 8, 8, 4, 8, 8]));
    }

    /// An argument list that does not fit its kernel (two arguments of different sizes
    /// swapped, one missing) is an error naming the kernel, on any driver; the right list
    /// launches. Where no driver loads, there is nothing to launch.
    #[test]
    fn a_launch_whose_arguments_do_not_fit_is_an_error() {
        let Ok(mut dev) = CudaDevice::new(0) else {
            eprintln!("\n!!! no CUDA device: the launch checks were NOT run\n");
            return;
        };
        let v = dev.upload(&[1.0; 4]).expect("upload");
        let cfg = elem_cfg(4);
        let good = [I32(4), Partials, Ptr(v.at(0))];
        let swapped = [Partials, I32(4), Ptr(v.at(0))];
        // SAFETY: finish_sums reads 4 x 1 partials (the workspace holds 3 x RED_BLOCKS) and
        // writes one value of `v`; the bad lists are refused before any launch.
        unsafe {
            for bad in [&swapped[..], &good[..2]] {
                let err = dev
                    .launch(&dev.k.finish_sums, cfg, "finish_sums", bad)
                    .expect_err("refused");
                let text = err.to_string();
                assert!(
                    matches!(
                        err,
                        DeviceError::KernelArguments {
                            kernel: "finish_sums",
                            ..
                        }
                    ),
                    "{text}"
                );
                assert!(
                    text.contains("takes parameters of [4, 8, 8] bytes"),
                    "{text}"
                );
            }
            dev.launch(&dev.k.finish_sums, cfg, "finish_sums", &good)
                .expect("launch");
        }
        dev.synchronize().expect("synchronize");
    }
}
