//! [`Cpu`]: one rank's [`Device`] on host memory, its kernels parallel over a rayon pool of
//! its own (`--threads`) or sequential.
//!
//! Every kernel cuts its vectors into chunks of [`CHUNK`] values (SpMV: rows); a pool runs
//! the chunks in parallel, and reductions add the chunk partials in chunk order, so every
//! result is the same bits for any thread count. Within a chunk, dot products use four
//! interleaved accumulators ([`chunk_dot`]); the other sums (norms with weights, fused
//! residual norms) one accumulator in index order.
//!
//! Kernels that update several vectors in one pass hand each parallel task raw pointers to
//! its own chunk of every vector (`Chunked`): the tasks' ranges are disjoint, and the
//! borrow rules of the callers (`&mut` destinations, `&` sources) keep destinations apart
//! from each other and from the sources.

use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;

use super::{
    check_len, check_list, BasisStep, CcgVecs, CsrRef, Device, DeviceError, GramShape, HostCsr,
    PipecgVecs, VecList, VecListMut, PIPECG_SUMS,
};

/// Values per chunk of a deterministic reduction (and per parallel task of vector updates
/// and of the fused SpMV-dot).
pub const CHUNK: usize = 8192;
/// Fewest and most rows per parallel task of SpMV (see [`Cpu::row_chunk`]).
const ROW_CHUNK: (usize, usize) = (2048, 65536);

/// How far ahead of the row being multiplied, in matrix entries, the SpMV prefetches the
/// lines of `vals` and `cols` (4 KiB of values, 2 KiB of columns). The hardware prefetchers
/// of the hosts measured do not keep one core's CSR streams in flight: on 1M-row 3-D
/// Poisson at one thread (an Intel Xeon VM, 2026-11-27, `/tmp/spmvab`, 41 interleaved
/// rounds) SpMV moved 11.4 GB/s without and 14.9-16.3 GB/s with a distance of 256 to 2048
/// entries (STREAM triad 16.9 GB/s by the same count); 512 was among the best and keeps
/// the lead short for small blocks. Every line is prefetched once, in order, whatever the
/// row lengths. A prefetch is a hint: results are unchanged.
const PREFETCH_AHEAD: usize = 512;

/// Hint that the cache line holding `s[i]` is about to be read (`i` may lie past the end:
/// a prefetch never faults). A no-op where no prefetch instruction is exposed on stable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch<T>(s: &[T], i: usize) {
    // SAFETY: `prefetcht0` is a hint that reads no data into registers and never faults,
    // whatever the address; the pointer is formed with `wrapping_add` and not dereferenced.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            s.as_ptr().wrapping_add(i).cast(),
        )
    }
}

/// See the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn prefetch<T>(_s: &[T], _i: usize) {}

/// A mutable base pointer handed to parallel chunk tasks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ptr(*mut f64);

// SAFETY: a `Ptr` is only dereferenced through `Ptr::chunk` by tasks working on disjoint
// ranges of a vector that the kernel borrows mutably for its whole run.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

impl Ptr {
    pub(crate) fn of(v: &mut [f64]) -> Self {
        Ptr(v.as_mut_ptr())
    }

    /// # Safety
    /// `r` lies within the vector this pointer came from, and no other live reference
    /// overlaps it.
    pub(crate) unsafe fn chunk<'a>(self, r: Range<usize>) -> &'a mut [f64] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(r.start), r.len()) }
    }
}

/// One rank's CPU kernels.
#[derive(Debug)]
pub struct Cpu {
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Chunk partials of reductions.
    partials: Vec<f64>,
    /// Destination pointers of [`Device::lincomb_block`].
    ptrs: Vec<Ptr>,
    /// Whether to present vectors as device memory (a modeled GPU: `sim --device cuda`).
    gpu_model: bool,
    /// Buffers allocated so far (each one's spare room, [`stagger`], follows it).
    allocs: std::cell::Cell<usize>,
}

/// Spare room, in bytes, after the `k`-th buffer a [`Cpu`] allocates: 1 to 15 cache lines
/// and a half, varying from buffer to buffer.
///
/// Why: vectors of one length allocated one after another from the heap otherwise sit a
/// power of two apart when the length is one (a rank's 2^17 rows of 64^3 Poisson on two
/// ranks: 1 MiB each), so the same index of every vector maps to the same cache sets and
/// the fused kernels that stream eight of them at once (pipecg's update) thrash. Measured
/// 2026-11-29, `krylov solve p64.mtx --ranks 2 --method pipecg`: 2,743 us of vector work
/// per iteration against 717 us with the heap's growth padded by 12,345 bytes
/// (`MALLOC_TOP_PAD_`), and 434 and 649 us at n = 63 and 65 (not powers of two). The
/// room is never used: the values are the same, bit for bit.
fn stagger(k: usize) -> usize {
    64 * (1 + (k * 7) % 15) + 32
}

impl Default for Cpu {
    fn default() -> Self {
        Self::sequential()
    }
}

impl Cpu {
    /// Sequential kernels.
    pub fn sequential() -> Self {
        Self {
            pool: None,
            partials: Vec::new(),
            ptrs: Vec::new(),
            gpu_model: false,
            allocs: std::cell::Cell::new(0),
        }
    }

    /// Kernels parallel over `pool` (this rank's workers).
    pub fn with_pool(pool: Arc<rayon::ThreadPool>) -> Self {
        Self {
            pool: Some(pool),
            ..Self::sequential()
        }
    }

    /// Kernels on `threads` worker threads of a pool of this rank's own (sequential on the
    /// calling thread for `threads <= 1`). The calling thread sleeps while its workers run
    /// a kernel, so a rank with `threads` workers keeps `threads` cores busy.
    ///
    /// # Errors
    /// [`DeviceError::Threads`] when the threads cannot be started.
    pub fn with_threads(threads: usize) -> Result<Self, DeviceError> {
        if threads <= 1 {
            return Ok(Self::sequential());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("kernel-{i}"))
            .build()
            .map_err(|e| DeviceError::Threads {
                threads,
                detail: e.to_string(),
            })?;
        Ok(Self::with_pool(Arc::new(pool)))
    }

    /// A copy of `src` (zeros for `None`, `n` values) whose pieces `range(0..tasks)` are
    /// first written by the workers that run the kernels' tasks on them, so its pages are
    /// placed by the threads that use them (first touch: on a multi-socket node, in their
    /// memory). Sequential kernels copy on the calling thread.
    fn first_touch<T, R>(&self, src: Option<&[T]>, n: usize, tasks: usize, range: R) -> Vec<T>
    where
        T: Copy + Default + Send + Sync,
        R: Fn(usize) -> Range<usize> + Sync + Send,
    {
        let k = self.allocs.get();
        self.allocs.set(k.wrapping_add(1));
        let room = n + stagger(k).div_ceil(std::mem::size_of::<T>().max(1));
        let Some(pool) = self.parallel(n) else {
            let mut v: Vec<T> = Vec::with_capacity(room);
            match src {
                Some(s) => v.extend_from_slice(&s[..n]),
                None => v.resize(n, T::default()),
            }
            return v;
        };
        let mut v: Vec<T> = Vec::with_capacity(room);
        let base = v.as_mut_ptr() as usize;
        pool.install(|| {
            (0..tasks).into_par_iter().for_each(|t| {
                let r = range(t);
                let dst = (base as *mut T).wrapping_add(r.start);
                match src {
                    // SAFETY: the tasks' ranges are disjoint, cover 0..n and lie within the
                    // allocation of `n` values (and within `src`, of length `n`).
                    Some(s) => unsafe {
                        std::ptr::copy_nonoverlapping(s[r.clone()].as_ptr(), dst, r.len())
                    },
                    None => {
                        for i in 0..r.len() {
                            // SAFETY: as above.
                            unsafe { dst.add(i).write(T::default()) };
                        }
                    }
                }
            })
        });
        // SAFETY: every value in 0..n was written by its task.
        unsafe { v.set_len(n) };
        v
    }

    /// [`Cpu::first_touch`] of a vector of `n` values in the chunks of the vector kernels.
    fn touch_vec(&self, src: Option<&[f64]>, n: usize) -> Vec<f64> {
        let range = move |c: usize| c * CHUNK..((c + 1) * CHUNK).min(n);
        self.first_touch(src, n, n.div_ceil(CHUNK), range)
    }

    /// The same kernels standing in for a GPU whose time is modeled (`krylov solve
    /// --backend sim --device cuda`): the results are this CPU's, bit for bit, but
    /// [`Device::host_memory`] is false and [`Device::name`] is `cuda`, so [`crate::Ops`]
    /// meters the host-device copies a GPU rank makes (halo staging, reduction results)
    /// and the simulator prices every kernel with the fabric's GPU model.
    pub fn modeling_gpu(mut self) -> Self {
        self.gpu_model = true;
        self
    }

    fn parallel(&self, n: usize) -> Option<&rayon::ThreadPool> {
        match &self.pool {
            Some(p) if n >= 2 * CHUNK && p.current_num_threads() > 1 => Some(p),
            _ => None,
        }
    }

    /// Run `f(range)` over the chunks of `0..n`, in parallel when worth it.
    fn each_chunk<F>(&self, n: usize, f: F)
    where
        F: Fn(Range<usize>) + Sync + Send,
    {
        let chunks = n.div_ceil(CHUNK);
        let range = |c: usize| c * CHUNK..((c + 1) * CHUNK).min(n);
        match self.parallel(n) {
            Some(pool) => pool.install(|| (0..chunks).into_par_iter().for_each(|c| f(range(c)))),
            None => (0..chunks).for_each(|c| f(range(c))),
        }
    }

    /// Run `f(range, partials)` over the chunks of `0..n` (in parallel when worth it), each
    /// writing `k` partial sums, then write their chunk-ordered sums to `out[..k]`.
    fn sum_chunks<F>(&mut self, n: usize, k: usize, out: &mut [f64], f: F)
    where
        F: Fn(Range<usize>, &mut [f64]) + Sync + Send,
    {
        let chunks = n.div_ceil(CHUNK);
        let range = |c: usize| c * CHUNK..((c + 1) * CHUNK).min(n);
        let mut partials = std::mem::take(&mut self.partials);
        partials.clear();
        partials.resize(chunks * k, 0.0);
        match self.parallel(n) {
            Some(pool) => pool.install(|| {
                partials
                    .par_chunks_mut(k.max(1))
                    .enumerate()
                    .for_each(|(c, p)| f(range(c), p))
            }),
            None => partials
                .chunks_mut(k.max(1))
                .enumerate()
                .for_each(|(c, p)| f(range(c), p)),
        }
        for (j, o) in out[..k].iter_mut().enumerate() {
            *o = (0..chunks).map(|c| partials[c * k + j]).sum();
        }
        self.partials = partials;
    }

    /// `y[i] = f(x[i], y[i])` for `i < n` (an update of one vector from another).
    fn update<F>(
        &self,
        op: &'static str,
        n: usize,
        x: &[f64],
        y: &mut [f64],
        f: F,
    ) -> Result<(), DeviceError>
    where
        F: Fn(f64, f64) -> f64 + Sync + Send,
    {
        check_len(op, n, x.len())?;
        check_len(op, n, y.len())?;
        let yp = Ptr::of(y);
        self.each_chunk(n, |r| {
            // SAFETY: chunk ranges are disjoint and within `y`.
            let yc = unsafe { yp.chunk(r.clone()) };
            for (yi, xi) in yc.iter_mut().zip(&x[r]) {
                *yi = f(*xi, *yi);
            }
        });
        Ok(())
    }

    /// `y[i] = f(x[i], y[i])` for `i < n`, then `out[at] = y.y` and, with weights `w`,
    /// `out[at + 1] = sum y_i^2 w_i` of the new values (one accumulator each, per chunk:
    /// `y.y` is the same bits with or without weights).
    #[allow(clippy::too_many_arguments)]
    fn update_norms<F>(
        &mut self,
        op: &'static str,
        n: usize,
        x: &[f64],
        y: &mut [f64],
        w: Option<&[f64]>,
        out: &mut [f64],
        at: usize,
        f: F,
    ) -> Result<(), DeviceError>
    where
        F: Fn(f64, f64) -> f64 + Sync + Send,
    {
        for len in [x.len(), y.len(), w.map_or(n, <[f64]>::len)] {
            check_len(op, n, len)?;
        }
        let k = 1 + usize::from(w.is_some());
        check_len(op, at + k, out.len())?;
        let yp = Ptr::of(y);
        let mut s = [0.0; 2];
        self.sum_chunks(n, k, &mut s[..k], |c, part| {
            // SAFETY: chunk ranges are disjoint and within `y`.
            let yc = unsafe { yp.chunk(c.clone()) };
            // One pass: each value's terms join the sums right after it is formed, in
            // index order (the bits of updating the chunk first and summing it after).
            match w {
                Some(w) => {
                    let mut s = (0.0, 0.0);
                    for ((yi, xi), wi) in yc.iter_mut().zip(&x[c.clone()]).zip(&w[c]) {
                        let v = f(*xi, *yi);
                        *yi = v;
                        s.0 += v * v;
                        s.1 += v * wi * v;
                    }
                    (part[0], part[1]) = s;
                }
                None => {
                    let mut s = 0.0;
                    for (yi, xi) in yc.iter_mut().zip(&x[c]) {
                        let v = f(*xi, *yi);
                        *yi = v;
                        s += v * v;
                    }
                    part[0] = s;
                }
            }
        });
        out[at..at + k].copy_from_slice(&s[..k]);
        Ok(())
    }

    /// `out[i] = f(a[i], b[i])` for `i < n`.
    fn map2<F>(
        &self,
        op: &'static str,
        n: usize,
        a: &[f64],
        b: &[f64],
        out: &mut [f64],
        f: F,
    ) -> Result<(), DeviceError>
    where
        F: Fn(f64, f64) -> f64 + Sync + Send,
    {
        check_len(op, n, a.len())?;
        check_len(op, n, b.len())?;
        check_len(op, n, out.len())?;
        let op = Ptr::of(out);
        self.each_chunk(n, |r| {
            // SAFETY: chunk ranges are disjoint and within `out`.
            let oc = unsafe { op.chunk(r.clone()) };
            for ((o, ai), bi) in oc.iter_mut().zip(&a[r.clone()]).zip(&b[r]) {
                *o = f(*ai, *bi);
            }
        });
        Ok(())
    }

    /// `y[i] = A[i] x` for the rows `first..first + y.len()` (CSR order).
    fn rows(a: CsrRef<'_>, x: &[f64], y: &mut [f64], first: usize) {
        // Cut `cols`/`vals` once and cap each row's end, so the inner loop's bounds checks
        // fold away (about 30% faster from cache; same bits as a plain loop).
        let ptr = &a.indptr[first..=first + y.len()];
        let end = ptr[y.len()];
        let (cols, vals) = (&a.cols[..end], &a.vals[..end]);
        // The next entries whose `vals` and `cols` lines are to be prefetched (8 values and
        // 16 columns a line).
        let (mut pv, mut pc) = (ptr[0] + PREFETCH_AHEAD, ptr[0] + PREFETCH_AHEAD);
        for (yi, w) in y.iter_mut().zip(ptr.windows(2)) {
            let (lo, hi) = (w[0], w[1].min(end));
            while pv < hi + PREFETCH_AHEAD {
                prefetch(vals, pv);
                pv += 8;
            }
            while pc < hi + PREFETCH_AHEAD {
                prefetch(cols, pc);
                pc += 16;
            }
            let mut acc = 0.0;
            for k in lo..hi {
                acc += vals[k] * x[cols[k] as usize];
            }
            *yi = acc;
        }
    }

    /// Rows per SpMV task over `rows` rows on `threads` workers: about 4 tasks per worker
    /// (work stealing evens out a slow core), within [`ROW_CHUNK`]. Long tasks keep each
    /// worker's matrix and vector streams contiguous: 16k-64k-row tasks measured 4-8%
    /// faster than 2k-row tasks at 2 threads on 1M-row Poisson (medians of 30, interleaved).
    /// Rows are independent, so the results do not depend on it.
    fn row_chunk(rows: usize, threads: usize) -> usize {
        rows.div_ceil(4 * threads.max(1))
            .clamp(ROW_CHUNK.0, ROW_CHUNK.1)
    }

    /// `y = A x` over the first `y.len()` rows, in row tasks over the pool when worth it.
    fn spmv_rows(&self, a: CsrRef<'_>, x: &[f64], y: &mut [f64]) {
        match self.parallel(y.len()) {
            Some(pool) => pool.install(|| {
                let rc = Self::row_chunk(y.len(), pool.current_num_threads());
                y.par_chunks_mut(rc)
                    .enumerate()
                    .for_each(|(c, yc)| Self::rows(a, x, yc, c * rc));
            }),
            None => Self::rows(a, x, y, 0),
        }
    }
}

/// Dot product of one chunk with four accumulators in a fixed order.
#[inline]
pub(crate) fn chunk_dot(a: &[f64], b: &[f64]) -> f64 {
    let mut s = [0.0f64; 4];
    let (a4, ar) = a.split_at(a.len() - a.len() % 4);
    let (b4, br) = b.split_at(a4.len());
    for (x, y) in a4.chunks_exact(4).zip(b4.chunks_exact(4)) {
        s[0] += x[0] * y[0];
        s[1] += x[1] * y[1];
        s[2] += x[2] * y[2];
        s[3] += x[3] * y[3];
    }
    let mut t = (s[0] + s[1]) + (s[2] + s[3]);
    for (x, y) in ar.iter().zip(br) {
        t += x * y;
    }
    t
}

/// `(y.y, sum y_i^2 w_i)` of one chunk, one accumulator each. Every weighted term is
/// formed as `(y_i w_i) y_i` (here and in every weighted sum, CUDA included): with a
/// weight `w_i = d_i` up to 1e300 and a scaled residual entry `y_i` near 1e-170 the
/// original-norm term `y_i^2 w_i ~ 1e-40` is in range, while `y_i^2` alone underflows.
#[inline]
fn chunk_norms(y: &[f64], w: &[f64]) -> (f64, f64) {
    let mut s = (0.0, 0.0);
    for (yi, wi) in y.iter().zip(w) {
        s.0 += yi * yi;
        s.1 += yi * wi * yi;
    }
    s
}

/// `y += sum_j coef[j] v_j[c]` on one chunk `c` of `y` (`yc`), over the `j` with
/// `coef[j] != 0` in increasing order, one vector at a time.
#[inline]
fn chunk_lincomb<L: VecList<Vec<f64>> + ?Sized>(
    yc: &mut [f64],
    coef: &[f64],
    vs: &L,
    c: Range<usize>,
) {
    for (j, &cj) in coef.iter().enumerate().take(vs.count()) {
        if cj != 0.0 {
            for (yi, vi) in yc.iter_mut().zip(&vs.get(j)[c.clone()]) {
                *yi += cj * vi;
            }
        }
    }
}

/// The checks of halo packing (`gather`) and unpacking (`scatter`): the packed vector holds
/// `idx.len()` values, and every index lies within the addressed one (else the first that
/// does not is the error).
fn check_indexed(
    op: &'static str,
    idx: &[u32],
    packed: usize,
    addressed: usize,
) -> Result<(), DeviceError> {
    check_len(op, idx.len(), packed)?;
    match idx.iter().find(|&&i| i as usize >= addressed) {
        Some(&bad) => Err(DeviceError::IndexOutOfRange {
            op,
            index: bad as usize,
            len: addressed,
        }),
        None => Ok(()),
    }
}

impl Device for Cpu {
    type Vector = Vec<f64>;
    type Matrix = HostCsr;
    type Index = Vec<u32>;

    fn name(&self) -> &'static str {
        if self.gpu_model {
            "cuda"
        } else {
            "cpu"
        }
    }

    fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }

    fn host_memory(&self) -> bool {
        !self.gpu_model
    }

    fn len(v: &Vec<f64>) -> usize {
        v.len()
    }

    fn shape(a: &HostCsr) -> (usize, usize) {
        (a.rows(), a.ncols)
    }

    fn nnz(a: &HostCsr) -> usize {
        a.vals.len()
    }

    fn reserve(&mut self, n: usize, results: usize, lists: usize) -> Result<(), DeviceError> {
        let want = n.div_ceil(CHUNK) * results.max(2);
        self.partials
            .reserve(want.saturating_sub(self.partials.len()));
        self.ptrs.reserve(lists.saturating_sub(self.ptrs.len()));
        Ok(())
    }

    fn zeros(&mut self, n: usize) -> Result<Vec<f64>, DeviceError> {
        Ok(self.touch_vec(None, n))
    }

    fn triangular_solves(&self) -> bool {
        !self.gpu_model
    }

    fn ic0_solve(
        &mut self,
        f: &crate::LowerFactor,
        r: &Vec<f64>,
        z: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        if self.gpu_model {
            return Err(DeviceError::Unsupported {
                op: "triangular solve (bjacobi_ic0)",
                device: self.name(),
            });
        }
        let n = f.rows();
        check_len("ic0_solve", n, r.len().min(z.len()))?;
        f.solve(r, z);
        Ok(())
    }

    fn upload(&mut self, host: &[f64]) -> Result<Vec<f64>, DeviceError> {
        Ok(self.touch_vec(Some(host), host.len()))
    }

    fn upload_csr(&mut self, a: HostCsr) -> Result<HostCsr, DeviceError> {
        a.as_csr_ref().validate()?;
        // The entries are first touched by the workers of the SpMV's row tasks.
        let rows = a.rows();
        let (ptr, nnz) = (&a.indptr, a.vals.len());
        let rc = Self::row_chunk(rows, self.threads());
        let range = |t: usize| ptr[t * rc]..ptr[((t + 1) * rc).min(rows)];
        let tasks = rows.div_ceil(rc);
        let cols = self.first_touch(Some(&a.cols), nnz, tasks, range);
        let vals = self.first_touch(Some(&a.vals), nnz, tasks, range);
        Ok(HostCsr { cols, vals, ..a })
    }

    fn upload_index(&mut self, idx: &[u32]) -> Result<Vec<u32>, DeviceError> {
        Ok(idx.to_vec())
    }

    fn index_len(idx: &Vec<u32>) -> usize {
        idx.len()
    }

    fn write(&mut self, host: &[f64], dst: &mut Vec<f64>, at: usize) -> Result<(), DeviceError> {
        check_len("write", at + host.len(), dst.len())?;
        dst[at..at + host.len()].copy_from_slice(host);
        Ok(())
    }

    fn read(&mut self, src: &Vec<f64>, at: usize, host: &mut [f64]) -> Result<(), DeviceError> {
        check_len("read", at + host.len(), src.len())?;
        host.copy_from_slice(&src[at..at + host.len()]);
        Ok(())
    }

    fn copy(
        &mut self,
        n: usize,
        src: &Vec<f64>,
        src_at: usize,
        dst: &mut Vec<f64>,
        dst_at: usize,
    ) -> Result<(), DeviceError> {
        check_len("copy", src_at + n, src.len())?;
        check_len("copy", dst_at + n, dst.len())?;
        dst[dst_at..dst_at + n].copy_from_slice(&src[src_at..src_at + n]);
        Ok(())
    }

    fn fill(
        &mut self,
        n: usize,
        value: f64,
        dst: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        check_len("fill", at + n, dst.len())?;
        dst[at..at + n].fill(value);
        Ok(())
    }

    fn gather(
        &mut self,
        src: &Vec<f64>,
        idx: &Vec<u32>,
        out: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        check_indexed("gather", idx, out.len(), src.len())?;
        for (o, &i) in out.iter_mut().zip(idx) {
            *o = src[i as usize];
        }
        Ok(())
    }

    fn scatter(
        &mut self,
        src: &Vec<f64>,
        idx: &Vec<u32>,
        out: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        check_indexed("scatter", idx, src.len(), out.len())?;
        for (s, &i) in src.iter().zip(idx) {
            out[i as usize] = *s;
        }
        Ok(())
    }

    fn spmv(
        &mut self,
        a: &HostCsr,
        rows: usize,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        check_len("spmv (rows)", rows, a.rows())?;
        check_len("spmv (x)", a.ncols, x.len())?;
        check_len("spmv (y)", rows, y.len())?;
        self.spmv_rows(a.as_csr_ref(), x, &mut y[..rows]);
        Ok(())
    }

    fn spmv_dot(
        &mut self,
        a: &HostCsr,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        let rows = a.rows();
        check_len("spmv_dot (x)", a.ncols.max(rows), x.len())?;
        check_len("spmv_dot (y)", rows, y.len())?;
        check_len("spmv_dot (results)", at + 1, out.len())?;
        let yp = Ptr::of(y);
        let mut s = [0.0];
        self.sum_chunks(rows, 1, &mut s, |r, p| {
            // SAFETY: chunk ranges are disjoint and within `y` (checked above).
            let yc = unsafe { yp.chunk(r.clone()) };
            Self::rows(a.as_csr_ref(), x, yc, r.start);
            p[0] = chunk_dot(&x[r], yc);
        });
        out[at] = s[0];
        Ok(())
    }

    fn axpy(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        self.update("axpy", n, x, y, |xi, yi| yi + alpha * xi)
    }

    fn xpay(
        &mut self,
        n: usize,
        x: &Vec<f64>,
        beta: f64,
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        self.update("xpay", n, x, y, |xi, yi| xi + beta * yi)
    }

    fn scale(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        self.update("scale", n, x, y, |xi, _| xi * alpha)
    }

    fn mul(
        &mut self,
        n: usize,
        a: &Vec<f64>,
        b: &Vec<f64>,
        out: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        self.map2("mul", n, a, b, out, |ai, bi| ai * bi)
    }

    fn div(
        &mut self,
        n: usize,
        a: &Vec<f64>,
        b: &Vec<f64>,
        out: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        self.map2("div", n, a, b, out, |ai, bi| ai / bi)
    }

    fn representable(
        &mut self,
        n: usize,
        s: &Vec<f64>,
        scale: f64,
        x: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        self.update("representable", n, s, x, |si, xi| {
            super::representable_value(xi, si, scale)
        })
    }

    fn cg_update(
        &mut self,
        n: usize,
        alpha: f64,
        beta: f64,
        r: &Vec<f64>,
        p: &mut Vec<f64>,
        x: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        for len in [r.len(), p.len(), x.len()] {
            check_len("cg_update", n, len)?;
        }
        let (pp, xp) = (Ptr::of(p), Ptr::of(x));
        self.each_chunk(n, |c| {
            // SAFETY: chunk ranges are disjoint and within `p` and `x`, distinct vectors.
            let (pc, xc) = unsafe { (pp.chunk(c.clone()), xp.chunk(c.clone())) };
            for ((xi, pi), ri) in xc.iter_mut().zip(pc.iter_mut()).zip(&r[c]) {
                *xi += alpha * *pi;
                *pi = ri + beta * *pi;
            }
        });
        Ok(())
    }

    fn ccg_update(
        &mut self,
        n: usize,
        a: f64,
        beta: f64,
        ar: &Vec<f64>,
        v: CcgVecs<'_, Vec<f64>>,
        w: Option<&Vec<f64>>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        for len in [
            ar.len(),
            w.map_or(n, Vec::len),
            v.r.len(),
            v.p.len(),
            v.ap.len(),
            v.x.len(),
        ] {
            check_len("ccg_update", n, len)?;
        }
        let k = 1 + usize::from(w.is_some());
        check_len("ccg_update (results)", at + k, out.len())?;
        let ptrs = [v.r, v.p, v.ap, v.x].map(|v| Ptr::of(v));
        let mut s = [0.0; 2];
        self.sum_chunks(n, k, &mut s[..k], |c, part| {
            // SAFETY: chunk ranges are disjoint and within the four distinct vectors.
            let [r, p, ap, x] = ptrs.map(|p| unsafe { p.chunk(c.clone()) });
            let arc = &ar[c.clone()];
            for i in 0..arc.len() {
                p[i] = r[i] + beta * p[i];
                ap[i] = arc[i] + beta * ap[i];
                x[i] += a * p[i];
                r[i] += -a * ap[i];
            }
            match w {
                Some(w) => (part[0], part[1]) = chunk_norms(r, &w[c]),
                // The first sum of `chunk_norms`, in the same order.
                None => part[0] = r.iter().fold(0.0, |s, ri| s + ri * ri),
            }
        });
        out[at..at + k].copy_from_slice(&s[..k]);
        Ok(())
    }

    fn pipecg_update(
        &mut self,
        n: usize,
        a: f64,
        beta: f64,
        q: &Vec<f64>,
        v: PipecgVecs<'_, Vec<f64>>,
        wt: &Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        for len in [q, wt, &*v.w, &*v.r, &*v.z, &*v.s, &*v.p, &*v.x].map(Vec::len) {
            check_len("pipecg_update", n, len)?;
        }
        check_len("pipecg_update (results)", at + PIPECG_SUMS, out.len())?;
        let ptrs = [v.w, v.r, v.z, v.s, v.p, v.x].map(|v| Ptr::of(v));
        let mut s = [0.0; PIPECG_SUMS];
        self.sum_chunks(n, PIPECG_SUMS, &mut s, |c, part| {
            // SAFETY: chunk ranges are disjoint and within the six distinct vectors.
            let [w, r, z, sv, p, x] = ptrs.map(|p| unsafe { p.chunk(c.clone()) });
            let (qc, wtc) = (&q[c.clone()], &wt[c]);
            let mut norms = (0.0, 0.0);
            // The gap estimate's norms: x.x, p.p, s.s, z.z, w.w.
            let mut gap = [0.0; 5];
            // Every operand is read before any result is written: the six chunks are
            // distinct, but through raw pointers the compiler cannot know it, and a store
            // followed by a load of another vector at the same index made the CPU wait on
            // a possible alias (this loop ran about 4x slower per entry beside a second
            // rank). The same operations in the same order: the same bits.
            for i in 0..qc.len() {
                let (wi, ri) = (w[i], r[i]);
                let zi = qc[i] + beta * z[i];
                let si = wi + beta * sv[i];
                let pi = ri + beta * p[i];
                let xi = x[i] + a * pi;
                let ri = ri - a * si;
                let wi = wi - a * zi;
                z[i] = zi;
                sv[i] = si;
                p[i] = pi;
                x[i] = xi;
                r[i] = ri;
                w[i] = wi;
                norms.0 += ri * ri;
                norms.1 += ri * wtc[i] * ri;
                gap[0] += xi * xi;
                gap[1] += pi * pi;
                gap[2] += si * si;
                gap[3] += zi * zi;
                gap[4] += wi * wi;
            }
            part[0] = norms.0;
            part[1] = norms.1;
            part[2] = chunk_dot(w, r);
            part[3..].copy_from_slice(&gap);
        });
        out[at..at + PIPECG_SUMS].copy_from_slice(&s);
        Ok(())
    }

    fn axpy_dot(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        self.update_norms("axpy_dot", n, x, y, None, &mut out[..], at, |xi, yi| {
            yi + alpha * xi
        })
    }

    fn axpy_norms(
        &mut self,
        n: usize,
        alpha: f64,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
        w: &Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        self.update_norms(
            "axpy_norms",
            n,
            x,
            y,
            Some(w),
            &mut out[..],
            at,
            |xi, yi| yi + alpha * xi,
        )
    }

    fn residual_norms(
        &mut self,
        n: usize,
        b: &Vec<f64>,
        y: &mut Vec<f64>,
        w: &Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        self.update_norms(
            "residual_norms",
            n,
            b,
            y,
            Some(w),
            &mut out[..],
            at,
            |bi, yi| bi - yi,
        )
    }

    fn residual_bound(
        &mut self,
        a: &HostCsr,
        x: &Vec<f64>,
        b: &Vec<f64>,
        y: &mut Vec<f64>,
        w: &Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
        bound_at: usize,
    ) -> Result<(), DeviceError> {
        let rows = a.rows();
        let lens = [x.len(), b.len(), y.len(), w.len(), out.len()];
        super::residual_bound_operands(rows, a.ncols, lens, at, bound_at)?;
        let a = a.as_csr_ref();
        let yp = Ptr::of(y);
        let mut s = [0.0; 3];
        self.sum_chunks(rows, 3, &mut s, |c, part| {
            // SAFETY: chunk ranges are disjoint and within `y` (checked above).
            let yc = unsafe { yp.chunk(c.clone()) };
            // Each row as `Cpu::rows` sums it, its residual and terms as `update_norms`
            // forms them, in index order: the bits of `spmv` then `residual_norms`.
            let mut acc = [0.0; 3];
            for (yi, i) in yc.iter_mut().zip(c) {
                let (lo, hi) = (a.indptr[i], a.indptr[i + 1]);
                let (mut ax, mut abs) = (0.0, 0.0);
                for k in lo..hi {
                    let p = a.vals[k] * x[a.cols[k] as usize];
                    ax += p;
                    abs += p.abs();
                }
                let v = b[i] - ax;
                *yi = v;
                acc[0] += v * v;
                acc[1] += v * w[i] * v;
                let e = super::residual_row_bound(hi - lo, b[i], abs);
                acc[2] += e * w[i] * e;
            }
            part.copy_from_slice(&acc);
        });
        (out[at], out[at + 1], out[bound_at]) = (s[0], s[1], s[2]);
        Ok(())
    }

    fn wnorm(
        &mut self,
        n: usize,
        r: &Vec<f64>,
        w: &Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError> {
        check_len("wnorm", n, r.len())?;
        check_len("wnorm", n, w.len())?;
        check_len("wnorm (results)", at + 1, out.len())?;
        let mut s = [0.0];
        self.sum_chunks(n, 1, &mut s, |c, part| {
            part[0] = r[c.clone()]
                .iter()
                .zip(&w[c])
                .map(|(ri, wi)| ri * wi * ri)
                .sum();
        });
        out[at] = s[0];
        Ok(())
    }

    fn gram<X, Y>(
        &mut self,
        n: usize,
        xs: &X,
        ys: &Y,
        shape: GramShape,
        w: Option<&Vec<f64>>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError>
    where
        X: VecList<Vec<f64>> + ?Sized,
        Y: VecList<Vec<f64>> + ?Sized,
    {
        let (nx, ny) = (xs.count(), ys.count());
        let k = super::gram_results::<Self, _, _>(n, xs, ys, shape, w, out, at)?;
        if k == 0 {
            return Ok(());
        }
        self.sum_chunks(n, k, &mut out[at..at + k], |c, part| match w {
            None => super::cpu_block::chunk_gram(xs, ys, c, shape, part),
            // Weighted blocks (near the target only) sum pair after pair in index order.
            Some(w) => {
                let mut idx = 0;
                for i in 0..nx {
                    let xi = &xs.get(i)[c.clone()];
                    let first = match shape {
                        GramShape::Full => 0,
                        GramShape::Upper => i,
                    };
                    for j in first..ny {
                        let yj = &ys.get(j)[c.clone()];
                        part[idx] = xi
                            .iter()
                            .zip(yj)
                            .zip(&w[c.clone()])
                            .map(|((a, b), wk)| a * wk * b)
                            .sum();
                        idx += 1;
                    }
                }
            }
        });
        Ok(())
    }

    fn lincomb<L>(
        &mut self,
        n: usize,
        coef: &[f64],
        vs: &L,
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError>
    where
        L: VecList<Vec<f64>> + ?Sized,
    {
        check_len("lincomb (coefficients)", vs.count(), coef.len())?;
        check_list::<Self, _>("lincomb", n, vs)?;
        check_len("lincomb", n, y.len())?;
        let yp = Ptr::of(y);
        self.each_chunk(n, |c| {
            // SAFETY: chunk ranges are disjoint and within `y`, which no source aliases.
            let yc = unsafe { yp.chunk(c.clone()) };
            chunk_lincomb(yc, coef, vs, c);
        });
        Ok(())
    }

    fn lincomb_norms<L>(
        &mut self,
        n: usize,
        coef: &[f64],
        vs: &L,
        y: &mut Vec<f64>,
        w: &Vec<f64>,
        out: &mut Vec<f64>,
        at: usize,
    ) -> Result<(), DeviceError>
    where
        L: VecList<Vec<f64>> + ?Sized,
    {
        check_len("lincomb_norms (coefficients)", vs.count(), coef.len())?;
        check_list::<Self, _>("lincomb_norms", n, vs)?;
        check_len("lincomb_norms", n, y.len())?;
        check_len("lincomb_norms (weights)", n, w.len())?;
        check_len("lincomb_norms (results)", at + 2, out.len())?;
        let yp = Ptr::of(y);
        let mut s = [0.0; 2];
        self.sum_chunks(n, 2, &mut s, |c, part| {
            // SAFETY: chunk ranges are disjoint and within `y`, which no source aliases.
            let yc = unsafe { yp.chunk(c.clone()) };
            chunk_lincomb(yc, coef, vs, c.clone());
            (part[0], part[1]) = chunk_norms(yc, &w[c]);
        });
        out[at..at + 2].copy_from_slice(&s);
        Ok(())
    }

    fn lincomb_block<S, T>(
        &mut self,
        n: usize,
        coef: &[f64],
        srcs: &S,
        dsts: &mut T,
    ) -> Result<(), DeviceError>
    where
        S: VecList<Vec<f64>> + ?Sized,
        T: VecListMut<Vec<f64>> + ?Sized,
    {
        let (ns, nd) = (srcs.count(), dsts.count());
        check_len("lincomb_block (coefficients)", ns * nd, coef.len())?;
        check_list::<Self, _>("lincomb_block", n, srcs)?;
        let mut ptrs = std::mem::take(&mut self.ptrs);
        ptrs.clear();
        for j in 0..nd {
            let d = dsts.get_mut(j);
            if let Err(e) = check_len("lincomb_block", n, d.len()) {
                self.ptrs = ptrs;
                return Err(e);
            }
            ptrs.push(Ptr::of(d));
        }
        let dp = &ptrs;
        self.each_chunk(n, |c| {
            // SAFETY: chunk ranges are disjoint and within every destination; the
            // destinations are distinct and alias no source (borrow rules of callers).
            unsafe { super::cpu_block::chunk_lincomb_block(coef, srcs, dp, c) }
        });
        self.ptrs = ptrs;
        Ok(())
    }

    fn basis_step(
        &mut self,
        n: usize,
        step: BasisStep,
        a: &Vec<f64>,
        s: &Vec<f64>,
        prev: Option<&Vec<f64>>,
        out: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        check_len("basis_step", n, a.len())?;
        check_len("basis_step", n, s.len())?;
        check_len("basis_step", n, out.len())?;
        let prev = super::basis_prev(step, n, prev, Vec::len)?;
        let op = Ptr::of(out);
        self.each_chunk(n, |c| {
            // SAFETY: chunk ranges are disjoint and within `out`.
            let o = unsafe { op.chunk(c.clone()) };
            let (ac, sc) = (&a[c.clone()], &s[c.clone()]);
            match step {
                BasisStep::Copy => o.copy_from_slice(ac),
                BasisStep::Shift(th) => {
                    for ((oi, ai), si) in o.iter_mut().zip(ac).zip(sc) {
                        *oi = ai - th * si;
                    }
                }
                BasisStep::ChebyshevFirst { eta, zeta } => {
                    for ((oi, ai), si) in o.iter_mut().zip(ac).zip(sc) {
                        *oi = eta * ai - zeta * si;
                    }
                }
                BasisStep::Chebyshev { eta, zeta } => {
                    let pc = &prev.map_or(&[][..], |p| &p[..])[c];
                    for (((oi, ai), si), pm) in o.iter_mut().zip(ac).zip(sc).zip(pc) {
                        *oi = 2.0 * (eta * ai - zeta * si) - pm;
                    }
                }
            }
        });
        Ok(())
    }

    fn smooth_update(
        &mut self,
        n: usize,
        eta: f64,
        r: &Vec<f64>,
        x: &Vec<f64>,
        s: &mut Vec<f64>,
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        for len in [r.len(), x.len(), s.len(), y.len()] {
            check_len("smooth_update", n, len)?;
        }
        let (sp, yp) = (Ptr::of(s), Ptr::of(y));
        self.each_chunk(n, |c| {
            // SAFETY: chunk ranges are disjoint and within `s` and `y`, distinct vectors.
            let (sc, yc) = unsafe { (sp.chunk(c.clone()), yp.chunk(c.clone())) };
            for (si, ri) in sc.iter_mut().zip(&r[c.clone()]) {
                *si += eta * (ri - *si);
            }
            for (yi, xi) in yc.iter_mut().zip(&x[c]) {
                *yi += eta * (xi - *yi);
            }
        });
        Ok(())
    }

    fn smooth_rescale(
        &mut self,
        n: usize,
        g: f64,
        x0: &Vec<f64>,
        s: &mut Vec<f64>,
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        for len in [x0.len(), s.len(), y.len()] {
            check_len("smooth_rescale", n, len)?;
        }
        let (sp, yp) = (Ptr::of(s), Ptr::of(y));
        self.each_chunk(n, |c| {
            // SAFETY: chunk ranges are disjoint and within `s` and `y`, distinct vectors.
            let (sc, yc) = unsafe { (sp.chunk(c.clone()), yp.chunk(c.clone())) };
            for si in sc.iter_mut() {
                *si *= g;
            }
            for (yi, xi) in yc.iter_mut().zip(&x0[c]) {
                *yi = g * *yi + (1.0 - g) * xi;
            }
        });
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
}

impl Cpu {
    /// `y = A x` over the whole block `a` on host slices (for benchmarks and checks: the
    /// kernel of [`Device::spmv`]).
    pub fn spmv_host(&mut self, a: CsrRef<'_>, x: &[f64], y: &mut [f64]) {
        let rows = a.rows().min(y.len());
        self.spmv_rows(a, x, &mut y[..rows]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Refs;

    #[test]
    fn dot_is_the_same_bits_for_any_thread_count() {
        let n = 5 * CHUNK + 17;
        let x: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 1013) as f64 * 1e-3 + 0.1)
            .collect();
        let y: Vec<f64> = (0..n)
            .map(|i| ((i * 104729) % 997) as f64 * 1e-2 - 3.0)
            .collect();
        let dot = |dev: &mut Cpu| {
            let mut out = vec![0.0];
            let (xs, ys) = ([&x], [&y]);
            dev.gram(
                n,
                &Refs(&xs),
                &Refs(&ys),
                GramShape::Full,
                None,
                &mut out,
                0,
            )
            .unwrap();
            out[0]
        };
        let seq = dot(&mut Cpu::sequential());
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .unwrap(),
        );
        let par = dot(&mut Cpu::with_pool(pool));
        assert_eq!(seq.to_bits(), par.to_bits());
        let naive: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert!((seq - naive).abs() <= 1e-9 * naive.abs().max(1.0));
    }
}
