//! The CUDA device (feature `cuda`): cudarc with dynamic loading, kernels compiled by NVRTC.
//!
//! The kernels (`kernels.cu`) are compiled by NVRTC 13.0 for `compute_90` with FMA
//! contraction off ([`compile_ptx`]); the resulting PTX is checked in (`kernels.ptx`) and
//! embedded ([`KERNELS_PTX`]), and a test fails when it is not what NVRTC makes of the
//! current source (`CASTACK_WRITE_PTX=1` rewrites it). So the crate builds without a CUDA
//! toolkit, and a GPU machine needs only the driver: it JIT-compiles the PTX for its GPU.
//!
//! - SpMV: vector CSR ("CSR-vector", Bell and Garland, *Implementing sparse matrix-vector
//!   multiplication on throughput-oriented processors*, SC 2009) with `T` lanes per row,
//!   `T` a power of two in `1..=32` picked from the mean row length ([`lanes_for`]);
//!   `T = 1` is the scalar kernel. Traffic: `12 nnz + 8 rows` bytes plus the reads of `x`.
//!   Or SELL-C-sigma ([`super::sell`], C = 32): one thread per row, coalesced slices. The
//!   registry is [`SpmvKernel`]; `krylov gpu-check` measures every entry.
//! - Reductions: a FIXED grid of [`RED_BLOCKS`] blocks, fixed per-thread index sets, a fixed
//!   block tree and block partials summed in index order: results depend on the data and
//!   the vector length only, never on scheduling. One kernel writes the partials of all
//!   results (a set of dot products, a Gram block `X^T Y`, or the two norms of the CG update),
//!   one small kernel sums them, one device-to-host copy returns them.
//! - Elementwise updates: grid-stride loops; with FMA contraction off they give the CPU's bits.
//!
//! On a machine without the driver library cudarc would panic on its first call, so
//! [`CudaDevice::new`] checks for the library first and returns [`DeviceError::NoDriver`]
//! (or [`DeviceError::NoDevice`]); likewise [`compile_ptx`] returns
//! [`DeviceError::NoNvrtc`] without the compiler.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use super::sell::Sell;
use super::{check_len, checks, CsrRef, Device, DeviceError};

/// The kernel source.
pub const KERNELS_CU: &str = include_str!("kernels.cu");
/// [`KERNELS_CU`] compiled by NVRTC 13.0.88 for [`ARCH`] (checked against the source by a
/// test when NVRTC is available).
pub const KERNELS_PTX: &str = include_str!("kernels.ptx");
/// The virtual architecture the kernels are compiled for (Hopper; the driver JIT-compiles
/// the PTX for newer GPUs).
pub const ARCH: &str = "compute_90";
/// Every kernel entry point in [`KERNELS_CU`].
pub const KERNEL_NAMES: [&str; 15] = [
    "spmv_csr_t1",
    "spmv_csr_t2",
    "spmv_csr_t4",
    "spmv_csr_t8",
    "spmv_csr_t16",
    "spmv_csr_t32",
    "axpy",
    "xpay",
    "lincomb",
    "chebyshev_step",
    "multidot",
    "gram",
    "axpy_dots",
    "sum_partials",
    "spmv_sell",
];
/// Lane counts of the SpMV kernels, in the order of [`KERNEL_NAMES`].
pub const SPMV_LANES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Blocks of every reduction (fixed: part of the summation order).
pub const RED_BLOCKS: u32 = 1024;
/// Threads per reduction block (`RED_THREADS` in the source).
const RED_THREADS: u32 = 256;
/// Y vectors per pass of the Gram kernel (`GRAM_MAXY` in the source).
const GRAM_MAXY: usize = 8;
/// Threads per block of the elementwise and SpMV kernels.
const THREADS: u32 = 256;

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

/// SpMV lanes per row for a mean row length: the largest power of two in `1..=32` not
/// above it (so each lane has at least one entry of an average row).
pub fn lanes_for(rows: usize, nnz: usize) -> u32 {
    let mean = nnz / rows.max(1);
    SPMV_LANES
        .iter()
        .copied()
        .rev()
        .find(|&t| t as usize <= mean)
        .unwrap_or(1)
}

fn drv(op: &'static str) -> impl Fn(DriverError) -> DeviceError {
    move |e| DeviceError::Driver {
        op,
        detail: e.to_string(),
    }
}

/// A vector in GPU memory.
#[derive(Debug)]
pub struct CudaVector {
    buf: CudaSlice<f64>,
}

/// A sparse block in GPU memory, in the layout of its SpMV kernel.
#[derive(Debug)]
pub struct CudaCsr {
    rows: usize,
    ncols: usize,
    nnz: usize,
    kernel: SpmvKernel,
    stored: Stored,
}

/// The arrays of each layout.
#[derive(Debug)]
enum Stored {
    /// CSR: offsets as `u64`, columns `u32`.
    Csr {
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

    /// The SpMV kernel in use.
    pub fn kernel(&self) -> SpmvKernel {
        self.kernel
    }
}

/// The kernels, loaded once.
#[derive(Debug)]
struct Kernels {
    spmv: [CudaFunction; 6],
    spmv_sell: CudaFunction,
    axpy: CudaFunction,
    xpay: CudaFunction,
    lincomb: CudaFunction,
    chebyshev: CudaFunction,
    multidot: CudaFunction,
    gram: CudaFunction,
    axpy_dots: CudaFunction,
    sum_partials: CudaFunction,
}

/// One GPU, one stream, the loaded kernels and the reduction workspaces.
#[derive(Debug)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    k: Kernels,
    /// Block partials of reductions (`RED_BLOCKS` per result).
    partial: CudaSlice<f64>,
    /// Finished reduction results.
    results: CudaSlice<f64>,
    /// Pointer tables (device addresses of vectors) and coefficients.
    ptr_a: CudaSlice<u64>,
    ptr_b: CudaSlice<u64>,
    coef: CudaSlice<f64>,
    host_ptrs: Vec<u64>,
    name: String,
}

impl CudaDevice {
    /// Open GPU `ordinal`: check for the driver (returning an error, never panicking, when
    /// it is absent), create the context and load the embedded kernels.
    pub fn new(ordinal: usize) -> Result<Self, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::NoDriver);
        }
        // cuInit itself fails with CUDA_ERROR_NO_DEVICE on a machine with a driver but no GPU.
        let found = match CudaContext::device_count() {
            Ok(c) => usize::try_from(c).unwrap_or(0),
            Err(DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE)) => 0,
            Err(e) => return Err(drv("device count")(e)),
        };
        if ordinal >= found {
            return Err(DeviceError::NoDevice { ordinal, found });
        }
        let ctx = CudaContext::new(ordinal).map_err(drv("context"))?;
        // SAFETY: every buffer of this device is used on its one stream only, so cudarc's
        // cross-stream event tracking is not needed.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(drv("device name"))?;
        let module = ctx
            .load_module(Ptx::from_src(KERNELS_PTX))
            .map_err(drv("load module"))?;
        let f = |n: &str| module.load_function(n).map_err(drv("load function"));
        let k = Kernels {
            spmv: [
                f(KERNEL_NAMES[0])?,
                f(KERNEL_NAMES[1])?,
                f(KERNEL_NAMES[2])?,
                f(KERNEL_NAMES[3])?,
                f(KERNEL_NAMES[4])?,
                f(KERNEL_NAMES[5])?,
            ],
            axpy: f("axpy")?,
            xpay: f("xpay")?,
            lincomb: f("lincomb")?,
            chebyshev: f("chebyshev_step")?,
            multidot: f("multidot")?,
            gram: f("gram")?,
            axpy_dots: f("axpy_dots")?,
            sum_partials: f("sum_partials")?,
            spmv_sell: f("spmv_sell")?,
        };
        let stream = ctx.default_stream();
        let a = |n| stream.alloc_zeros::<f64>(n).map_err(drv("alloc"));
        let (partial, results, coef) = (a(2 * RED_BLOCKS as usize)?, a(2)?, a(1)?);
        let u = |n| stream.alloc_zeros::<u64>(n).map_err(drv("alloc"));
        let (ptr_a, ptr_b) = (u(1)?, u(1)?);
        Ok(Self {
            ctx,
            stream,
            k,
            partial,
            results,
            ptr_a,
            ptr_b,
            coef,
            host_ptrs: Vec::new(),
            name,
        })
    }

    /// The GPU's name.
    pub fn gpu_name(&self) -> &str {
        &self.name
    }

    /// The context (for measurements outside the trait, e.g. timing events).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every kernel runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// `dst = src` as a device-to-device copy (the bandwidth reference).
    pub fn copy_dtod(&mut self, src: &CudaVector, dst: &mut CudaVector) -> Result<(), DeviceError> {
        check_len("copy", dst.buf.len(), src.buf.len())?;
        self.stream
            .memcpy_dtod(&src.buf, &mut dst.buf)
            .map_err(drv("copy"))
    }

    /// Upload a CSR block (validated first) in the layout of `kernel`.
    pub fn upload_csr_with(
        &mut self,
        a: CsrRef<'_>,
        kernel: SpmvKernel,
    ) -> Result<CudaCsr, DeviceError> {
        a.validate()?;
        let up = drv("upload matrix");
        let stored = match kernel {
            SpmvKernel::CsrVector(lanes) => {
                if !SPMV_LANES.contains(&lanes) {
                    return Err(DeviceError::InvalidCsr(format!(
                        "{lanes} SpMV lanes per row: use one of {SPMV_LANES:?}"
                    )));
                }
                let indptr: Vec<u64> = a.indptr.iter().map(|&p| p as u64).collect();
                Stored::Csr {
                    indptr: self.stream.clone_htod(&indptr).map_err(&up)?,
                    cols: self.stream.clone_htod(&*nonempty(a.cols)).map_err(&up)?,
                    vals: self.stream.clone_htod(&*nonempty(a.vals)).map_err(&up)?,
                }
            }
            SpmvKernel::Sell => {
                let s = Sell::from_csr(a, SELL_C, SELL_SIGMA)?;
                Stored::Sell {
                    slice_ptr: self.stream.clone_htod(&s.slice_ptr).map_err(&up)?,
                    row_len: self
                        .stream
                        .clone_htod(&*nonempty(&s.row_len))
                        .map_err(&up)?,
                    perm: self.stream.clone_htod(&*nonempty(&s.perm)).map_err(&up)?,
                    cols: self.stream.clone_htod(&*nonempty(&s.cols)).map_err(&up)?,
                    vals: self.stream.clone_htod(&*nonempty(&s.vals)).map_err(&up)?,
                }
            }
        };
        Ok(CudaCsr {
            rows: a.rows(),
            ncols: a.ncols,
            nnz: a.vals.len(),
            kernel,
            stored,
        })
    }

    /// Make sure the reduction workspaces hold `results` results and `ptrs` pointers.
    fn reserve(&mut self, results: usize, ptrs: usize) -> Result<(), DeviceError> {
        if self.partial.len() < results * RED_BLOCKS as usize {
            self.partial = self
                .stream
                .alloc_zeros(results * RED_BLOCKS as usize)
                .map_err(drv("alloc"))?;
        }
        if self.results.len() < results {
            self.results = self.stream.alloc_zeros(results).map_err(drv("alloc"))?;
        }
        if self.ptr_a.len() < ptrs {
            self.ptr_a = self.stream.alloc_zeros(ptrs).map_err(drv("alloc"))?;
            self.ptr_b = self.stream.alloc_zeros(ptrs).map_err(drv("alloc"))?;
            self.coef = self.stream.alloc_zeros(ptrs).map_err(drv("alloc"))?;
        }
        Ok(())
    }

    /// Write the device addresses of `vs` into pointer table `b` (0: `ptr_a`, 1: `ptr_b`).
    fn set_ptrs(&mut self, vs: &[&CudaVector], table: usize) -> Result<(), DeviceError> {
        self.host_ptrs.clear();
        for v in vs {
            let (p, _sync) = v.buf.device_ptr(&self.stream);
            self.host_ptrs.push(p);
        }
        let dst = if table == 0 {
            &mut self.ptr_a
        } else {
            &mut self.ptr_b
        };
        let mut view = dst.slice_mut(..vs.len());
        self.stream
            .memcpy_htod(&self.host_ptrs, &mut view)
            .map_err(drv("pointer table"))
    }

    /// Sum `results` x `RED_BLOCKS` partials and copy the results to `out` (waits).
    fn finish(&mut self, out: &mut [f64]) -> Result<(), DeviceError> {
        let results = out.len();
        if results == 0 {
            return Ok(());
        }
        let (r, nb) = (results as i32, RED_BLOCKS as i32);
        let cfg = LaunchConfig {
            grid_dim: ((results as u32).div_ceil(64), 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.k.sum_partials);
        b.arg(&r).arg(&nb).arg(&self.partial).arg(&mut self.results);
        // SAFETY: the kernel reads results * RED_BLOCKS partials and writes `results`
        // values; `reserve` sized both buffers.
        unsafe { b.launch(cfg) }.map_err(drv("sum_partials"))?;
        let view = self.results.slice(..results);
        self.stream
            .memcpy_dtoh(&view, out)
            .map_err(drv("reduction result"))?;
        self.stream.synchronize().map_err(drv("synchronize"))
    }

    fn red_cfg(ys: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (RED_BLOCKS, ys, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
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

/// Launch geometry of a row kernel with `lanes` threads per row.
fn row_cfg(rows: usize, lanes: u32) -> Result<LaunchConfig, DeviceError> {
    let threads = rows as u64 * u64::from(lanes);
    let blocks = u32::try_from(threads.div_ceil(u64::from(THREADS)))
        .map_err(|_| DeviceError::InvalidCsr(format!("{rows} rows are too many for one launch")))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Launch geometry of an elementwise kernel over `n` values (grid-stride beyond 65535
/// blocks' worth).
fn elem_cfg(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Device for CudaDevice {
    type Vector = CudaVector;
    type Matrix = CudaCsr;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn vec_len(v: &CudaVector) -> usize {
        v.buf.len()
    }

    fn shape(a: &CudaCsr) -> (usize, usize) {
        (a.rows, a.ncols)
    }

    fn zeros(&mut self, n: usize) -> Result<CudaVector, DeviceError> {
        let buf = self.stream.alloc_zeros(n).map_err(drv("alloc"))?;
        Ok(CudaVector { buf })
    }

    fn upload(&mut self, host: &[f64]) -> Result<CudaVector, DeviceError> {
        let buf = self.stream.clone_htod(host).map_err(drv("upload"))?;
        Ok(CudaVector { buf })
    }

    fn write(&mut self, host: &[f64], dst: &mut CudaVector) -> Result<(), DeviceError> {
        check_len("write", dst.buf.len(), host.len())?;
        self.stream
            .memcpy_htod(host, &mut dst.buf)
            .map_err(drv("write"))
    }

    fn download(&mut self, src: &CudaVector, host: &mut [f64]) -> Result<(), DeviceError> {
        check_len("download", src.buf.len(), host.len())?;
        self.stream
            .memcpy_dtoh(&src.buf, host)
            .map_err(drv("download"))?;
        self.stream.synchronize().map_err(drv("synchronize"))
    }

    fn copy(&mut self, src: &CudaVector, dst: &mut CudaVector) -> Result<(), DeviceError> {
        self.copy_dtod(src, dst)
    }

    fn upload_csr(&mut self, a: CsrRef<'_>) -> Result<CudaCsr, DeviceError> {
        self.upload_csr_with(a, SpmvKernel::auto(a.rows(), a.vals.len()))
    }

    fn spmv(&mut self, a: &CudaCsr, x: &CudaVector, y: &mut CudaVector) -> Result<(), DeviceError> {
        checks::spmv((a.rows, a.ncols), x.buf.len(), y.buf.len())?;
        if a.rows == 0 {
            return Ok(());
        }
        let rows = a.rows as i32;
        match (&a.stored, a.kernel) {
            (Stored::Csr { indptr, cols, vals }, SpmvKernel::CsrVector(lanes)) => {
                let li = SPMV_LANES.iter().position(|&l| l == lanes).unwrap_or(0);
                let cfg = row_cfg(a.rows, lanes)?;
                let mut b = self.stream.launch_builder(&self.k.spmv[li]);
                b.arg(&rows)
                    .arg(indptr)
                    .arg(cols)
                    .arg(vals)
                    .arg(&x.buf)
                    .arg(&mut y.buf);
                // SAFETY: `upload_csr_with` validated the block (offsets within nnz, columns
                // < ncols); the lengths of x (ncols) and y (rows) were checked above.
                unsafe { b.launch(cfg) }.map_err(drv("spmv"))?;
            }
            (
                Stored::Sell {
                    slice_ptr,
                    row_len,
                    perm,
                    cols,
                    vals,
                },
                _,
            ) => {
                let c = SELL_C as i32;
                let cfg = row_cfg(a.rows, 1)?;
                let mut b = self.stream.launch_builder(&self.k.spmv_sell);
                b.arg(&rows)
                    .arg(&c)
                    .arg(slice_ptr)
                    .arg(row_len)
                    .arg(perm)
                    .arg(cols)
                    .arg(vals)
                    .arg(&x.buf)
                    .arg(&mut y.buf);
                // SAFETY: built by `Sell::from_csr` from a validated block: every row reads
                // its own entries within its slice, columns < ncols, perm a permutation of
                // 0..rows; x and y lengths were checked above.
                unsafe { b.launch(cfg) }.map_err(drv("spmv"))?;
            }
            (Stored::Csr { .. }, SpmvKernel::Sell) => {
                return Err(DeviceError::InvalidCsr(
                    "block stored as CSR but marked SELL".into(),
                ))
            }
        }
        Ok(())
    }

    fn axpy(&mut self, alpha: f64, x: &CudaVector, y: &mut CudaVector) -> Result<(), DeviceError> {
        check_len("axpy", y.buf.len(), x.buf.len())?;
        let n = y.buf.len() as i64;
        let mut b = self.stream.launch_builder(&self.k.axpy);
        b.arg(&n).arg(&alpha).arg(&x.buf).arg(&mut y.buf);
        // SAFETY: both vectors have n values.
        unsafe { b.launch(elem_cfg(n as usize)) }.map_err(drv("axpy"))?;
        Ok(())
    }

    fn xpay(&mut self, x: &CudaVector, beta: f64, y: &mut CudaVector) -> Result<(), DeviceError> {
        check_len("xpay", y.buf.len(), x.buf.len())?;
        let n = y.buf.len() as i64;
        let mut b = self.stream.launch_builder(&self.k.xpay);
        b.arg(&n).arg(&x.buf).arg(&beta).arg(&mut y.buf);
        // SAFETY: both vectors have n values.
        unsafe { b.launch(elem_cfg(n as usize)) }.map_err(drv("xpay"))?;
        Ok(())
    }

    fn axpy_dots(
        &mut self,
        alpha: f64,
        x: &CudaVector,
        y: &mut CudaVector,
        w: &CudaVector,
    ) -> Result<[f64; 2], DeviceError> {
        check_len("axpy_dots", y.buf.len(), x.buf.len())?;
        check_len("axpy_dots (weights)", y.buf.len(), w.buf.len())?;
        self.reserve(2, 0)?;
        let n = y.buf.len() as i64;
        let mut b = self.stream.launch_builder(&self.k.axpy_dots);
        b.arg(&n)
            .arg(&alpha)
            .arg(&x.buf)
            .arg(&mut y.buf)
            .arg(&w.buf)
            .arg(&mut self.partial);
        // SAFETY: the vectors have n values; `partial` holds 2 * RED_BLOCKS values.
        unsafe { b.launch(Self::red_cfg(1)) }.map_err(drv("axpy_dots"))?;
        let mut out = [0.0; 2];
        self.finish(&mut out)?;
        Ok(out)
    }

    fn lincomb(
        &mut self,
        coef: &[f64],
        cols: &[&CudaVector],
        y: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        let lens: Vec<usize> = cols.iter().map(|c| c.buf.len()).collect();
        checks::lincomb(coef.len(), &lens, y.buf.len())?;
        if cols.is_empty() {
            return Ok(());
        }
        self.reserve(0, cols.len())?;
        self.set_ptrs(cols, 0)?;
        let mut cview = self.coef.slice_mut(..coef.len());
        self.stream
            .memcpy_htod(coef, &mut cview)
            .map_err(drv("coefficients"))?;
        let (n, m) = (y.buf.len() as i64, cols.len() as i32);
        let mut b = self.stream.launch_builder(&self.k.lincomb);
        b.arg(&n)
            .arg(&m)
            .arg(&self.ptr_a)
            .arg(&self.coef)
            .arg(&mut y.buf);
        // SAFETY: the pointer table holds m live vectors of n values (checked), the
        // coefficient buffer m values.
        unsafe { b.launch(elem_cfg(n as usize)) }.map_err(drv("lincomb"))?;
        Ok(())
    }

    fn dots(
        &mut self,
        pairs: &[(&CudaVector, &CudaVector)],
        out: &mut [f64],
    ) -> Result<(), DeviceError> {
        let lens: Vec<(usize, usize)> = pairs
            .iter()
            .map(|(a, b)| (a.buf.len(), b.buf.len()))
            .collect();
        checks::dots(&lens, out.len())?;
        if pairs.is_empty() {
            return Ok(());
        }
        if lens.windows(2).any(|w| w[0].0 != w[1].0) {
            return Err(DeviceError::LengthMismatch {
                op: "dots (all pairs must have one length)",
                expected: lens[0].0,
                got: lens
                    .iter()
                    .map(|l| l.0)
                    .find(|&l| l != lens[0].0)
                    .unwrap_or(0),
            });
        }
        self.reserve(pairs.len(), pairs.len())?;
        let xs: Vec<&CudaVector> = pairs.iter().map(|p| p.0).collect();
        let ys: Vec<&CudaVector> = pairs.iter().map(|p| p.1).collect();
        self.set_ptrs(&xs, 0)?;
        self.set_ptrs(&ys, 1)?;
        let n = lens[0].0 as i64;
        let mut b = self.stream.launch_builder(&self.k.multidot);
        b.arg(&n)
            .arg(&self.ptr_a)
            .arg(&self.ptr_b)
            .arg(&mut self.partial);
        // SAFETY: both pointer tables hold `pairs.len()` live vectors of n values; `partial`
        // holds pairs.len() * RED_BLOCKS values.
        unsafe { b.launch(Self::red_cfg(pairs.len() as u32)) }.map_err(drv("multidot"))?;
        self.finish(out)
    }

    fn gram(
        &mut self,
        x: &[&CudaVector],
        y: &[&CudaVector],
        out: &mut [f64],
    ) -> Result<(), DeviceError> {
        let lx: Vec<usize> = x.iter().map(|v| v.buf.len()).collect();
        let ly: Vec<usize> = y.iter().map(|v| v.buf.len()).collect();
        checks::gram(&lx, &ly, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.reserve(out.len(), x.len().max(y.len()))?;
        self.set_ptrs(x, 0)?;
        let n = lx[0] as i64;
        let ldy = y.len() as i32;
        for (c, chunk) in y.chunks(GRAM_MAXY).enumerate() {
            self.set_ptrs(chunk, 1)?;
            let (ny, j0) = (chunk.len() as i32, (c * GRAM_MAXY) as i32);
            let mut b = self.stream.launch_builder(&self.k.gram);
            b.arg(&n)
                .arg(&self.ptr_a)
                .arg(&ny)
                .arg(&self.ptr_b)
                .arg(&j0)
                .arg(&ldy)
                .arg(&mut self.partial);
            // SAFETY: the tables hold x.len() and ny live vectors of n values; `partial`
            // holds nx * ny_total * RED_BLOCKS values and this pass writes columns
            // j0..j0+ny. The next `set_ptrs` is stream-ordered after this launch.
            unsafe { b.launch(Self::red_cfg(x.len() as u32)) }.map_err(drv("gram"))?;
        }
        self.finish(out)
    }

    fn chebyshev_step(
        &mut self,
        eta: f64,
        zeta: f64,
        a_sj: &CudaVector,
        sj: &CudaVector,
        prev: Option<&CudaVector>,
        out: &mut CudaVector,
    ) -> Result<(), DeviceError> {
        checks::chebyshev(
            a_sj.buf.len(),
            sj.buf.len(),
            prev.map(|p| p.buf.len()),
            out.buf.len(),
        )?;
        let n = out.buf.len() as i64;
        let null = 0u64;
        let mut b = self.stream.launch_builder(&self.k.chebyshev);
        b.arg(&n).arg(&eta).arg(&zeta).arg(&a_sj.buf).arg(&sj.buf);
        match prev {
            Some(p) => b.arg(&p.buf),
            None => b.arg(&null),
        };
        b.arg(&mut out.buf);
        // SAFETY: every vector has n values; a null `prev` selects the first step.
        unsafe { b.launch(elem_cfg(n as usize)) }.map_err(drv("chebyshev_step"))?;
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.stream.synchronize().map_err(drv("synchronize"))
    }
}
