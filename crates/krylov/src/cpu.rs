//! CPU kernels of one rank: SpMV and the vector operations of the CG family, optionally
//! parallel over a rayon pool shared by the ranks of a process (`--threads`).
//!
//! Reductions are **deterministic**: vectors are cut into fixed chunks of [`CHUNK`] values,
//! each chunk is summed with the same four-accumulator pattern, and the chunk partials are
//! added in order, so a dot product gives the same bits whatever the thread count.
//!
//! # Work accounting (modeled time)
//!
//! Every kernel adds the memory traffic, flops and launches it performs to the rank's
//! [`WorkMeter`] ([`Cpu::meter`]); [`crate::SolverComm`]'s timing points drain it into
//! `Communicator::model_compute`, so on the `sim` backend the rank's clock advances by the
//! fabric's device model (`launches * L + max(bytes / B, flops / F)`) instead of host time.
//! The formulas (8-byte values, 4-byte column indices, 8-byte row pointers; every vector
//! element read or written once from memory, the SpMV input read once per input slot):
//!
//! | kernel | bytes | flops |
//! |---|---|---|
//! | [`Cpu::spmv`] (`rows`, `nnz`, input slots `m`) | `12 nnz + 8 (rows + 1) + 8 rows + 8 min(m, nnz)` | `2 nnz` |
//! | [`Cpu::dot`] (`n`) | `16 n` | `2 n` |
//! | [`Cpu::zip2`] (`n`; priced as an axpy) | `24 n` | `2 n` |
//! | [`Cpu::zip3_sum2`] (`n`; priced as the fused CG residual update with `r.r`, `r.W r`) | `32 n` | `7 n` |
//!
//! each one launch. Loops a solver runs outside these kernels account themselves through
//! [`Cpu::account`] with [`work::stream`]. The work of one timing interval is priced as one
//! piece (the roofline of the sum): all these kernels are memory-bound on the modeled
//! devices (at most 0.25 flop per byte), so that equals the sum of per-kernel prices.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use castack_collectives::ComputeWork;
use rayon::prelude::*;

/// Values per chunk of a deterministic reduction (and per parallel task of vector updates).
pub const CHUNK: usize = 8192;
/// Rows per parallel task of SpMV.
const ROW_CHUNK: usize = 2048;

/// The work formulas of the module doc, one function per kernel shape.
pub mod work {
    use castack_collectives::ComputeWork;

    /// A CSR SpMV over `rows` rows with `nnz` entries reading an input of `input` slots.
    pub fn spmv(rows: usize, nnz: usize, input: usize) -> ComputeWork {
        let (rows, nnz, input) = (rows as u64, nnz as u64, input as u64);
        ComputeWork {
            bytes: 12 * nnz + 8 * (rows + 1) + 8 * rows + 8 * input.min(nnz),
            flops: 2 * nnz,
            launches: 1,
        }
    }

    /// A dot product of two `n`-vectors.
    pub fn dot(n: usize) -> ComputeWork {
        stream(2, 0, 2, n)
    }

    /// An axpy-shaped update of one `n`-vector from another ([`super::Cpu::zip2`]).
    pub fn axpy(n: usize) -> ComputeWork {
        stream(2, 1, 2, n)
    }

    /// The fused residual update with `r.r` and `r.W r` ([`super::Cpu::zip3_sum2`]).
    pub fn fused_residual(n: usize) -> ComputeWork {
        stream(3, 1, 7, n)
    }

    /// An elementwise pass over `n` elements reading `reads` vectors, writing `writes`
    /// vectors (a vector both read and written counts in both) and doing `flops` flops per
    /// element: `8 (reads + writes) n` bytes, `flops n` flops, one launch.
    pub fn stream(reads: u64, writes: u64, flops: u64, n: usize) -> ComputeWork {
        let n = n as u64;
        ComputeWork {
            bytes: 8 * (reads + writes) * n,
            flops: flops * n,
            launches: 1,
        }
    }
}

/// The work one rank's kernels did since the meter was last drained (module doc).
///
/// Written by the rank's own thread only (kernels add after their parallel part), so adds
/// are a plain load and store; [`WorkMeter::take`] drains it.
#[derive(Debug, Default)]
pub struct WorkMeter {
    bytes: AtomicU64,
    flops: AtomicU64,
    launches: AtomicU32,
}

impl WorkMeter {
    /// Add `w`.
    pub fn add(&self, w: ComputeWork) {
        let r = Ordering::Relaxed;
        self.bytes.store(self.bytes.load(r) + w.bytes, r);
        self.flops.store(self.flops.load(r) + w.flops, r);
        self.launches
            .store(self.launches.load(r).saturating_add(w.launches), r);
    }

    /// The work added since the last call, and reset to none.
    pub fn take(&self) -> ComputeWork {
        let r = Ordering::Relaxed;
        ComputeWork {
            bytes: self.bytes.swap(0, r),
            flops: self.flops.swap(0, r),
            launches: self.launches.swap(0, r),
        }
    }
}

/// One rank's CPU kernels.
#[derive(Debug, Default)]
pub struct Cpu {
    pool: Option<Arc<rayon::ThreadPool>>,
    partials: Vec<f64>,
    partials2: Vec<f64>,
    meter: Arc<WorkMeter>,
}

impl Cpu {
    /// Sequential kernels.
    pub fn sequential() -> Self {
        Self::default()
    }

    /// Kernels parallel over `pool` (which may be shared with other ranks).
    pub fn with_pool(pool: Arc<rayon::ThreadPool>) -> Self {
        Self {
            pool: Some(pool),
            ..Self::default()
        }
    }

    /// The meter every kernel of this `Cpu` adds its work to (shared: hand it to
    /// [`crate::SolverComm::set_meter`]).
    pub fn meter(&self) -> Arc<WorkMeter> {
        Arc::clone(&self.meter)
    }

    /// Account work done outside these kernels (see [`work::stream`]).
    pub fn account(&self, w: ComputeWork) {
        self.meter.add(w);
    }

    /// Worker threads used (1 when sequential).
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }

    /// Reserve the workspace for vectors of `n` values, so later calls never allocate.
    pub fn reserve(&mut self, n: usize) {
        let chunks = n.div_ceil(CHUNK);
        self.partials.reserve(chunks);
        self.partials2.reserve(chunks);
    }

    fn parallel(&self, n: usize) -> Option<&rayon::ThreadPool> {
        match &self.pool {
            Some(p) if n >= 2 * CHUNK && p.current_num_threads() > 1 => Some(p),
            _ => None,
        }
    }

    /// `y = A x` for a CSR block (`indptr`, `cols`, `vals`), `x` addressed by `cols`.
    pub fn spmv(&self, indptr: &[usize], cols: &[u32], vals: &[f64], x: &[f64], y: &mut [f64]) {
        let nnz = indptr[y.len()] - indptr[0];
        self.account(work::spmv(y.len(), nnz, x.len()));
        let rows = |y: &mut [f64], first: usize| {
            // Cut `cols`/`vals` once and cap each row's end, so the inner loop's bounds
            // checks fold away (about 30% faster from cache; same bits as a plain loop).
            let ptr = &indptr[first..=first + y.len()];
            let end = ptr[y.len()];
            let (cols, vals) = (&cols[..end], &vals[..end]);
            for (yi, w) in y.iter_mut().zip(ptr.windows(2)) {
                let (lo, hi) = (w[0], w[1].min(end));
                let mut acc = 0.0;
                for k in lo..hi {
                    acc += vals[k] * x[cols[k] as usize];
                }
                *yi = acc;
            }
        };
        match self.parallel(y.len()) {
            Some(pool) => pool.install(|| {
                y.par_chunks_mut(ROW_CHUNK)
                    .enumerate()
                    .for_each(|(c, yc)| rows(yc, c * ROW_CHUNK));
            }),
            None => rows(y, 0),
        }
    }

    /// Deterministic dot product.
    pub fn dot(&mut self, x: &[f64], y: &[f64]) -> f64 {
        self.account(work::dot(x.len()));
        match self
            .pool
            .clone()
            .filter(|_| self.parallel(x.len()).is_some())
        {
            Some(pool) => {
                let partials = &mut self.partials;
                pool.install(|| {
                    x.par_chunks(CHUNK)
                        .zip(y.par_chunks(CHUNK))
                        .map(|(a, b)| chunk_dot(a, b))
                        .collect_into_vec(partials)
                });
                self.partials.iter().sum()
            }
            None => x
                .chunks(CHUNK)
                .zip(y.chunks(CHUNK))
                .map(|(a, b)| chunk_dot(a, b))
                .sum(),
        }
    }

    /// Apply `f` to matching chunks of one mutable and two read-only vectors in parallel
    /// (or sequentially), and return the deterministic sums of the two values `f` returns
    /// per chunk (chunk partials added in order).
    pub fn zip3_sum2<F>(&mut self, a: &mut [f64], b: &[f64], c: &[f64], f: F) -> (f64, f64)
    where
        F: Fn(&mut [f64], &[f64], &[f64]) -> (f64, f64) + Sync,
    {
        self.account(work::fused_residual(a.len()));
        match self
            .pool
            .clone()
            .filter(|_| self.parallel(a.len()).is_some())
        {
            Some(pool) => {
                let mut pairs = std::mem::take(&mut self.partials2);
                let mut firsts = std::mem::take(&mut self.partials);
                pool.install(|| {
                    a.par_chunks_mut(CHUNK)
                        .zip(b.par_chunks(CHUNK))
                        .zip(c.par_chunks(CHUNK))
                        .map(|((a, b), c)| f(a, b, c))
                        .unzip_into_vecs(&mut firsts, &mut pairs)
                });
                let s = (firsts.iter().sum(), pairs.iter().sum());
                self.partials = firsts;
                self.partials2 = pairs;
                s
            }
            None => a
                .chunks_mut(CHUNK)
                .zip(b.chunks(CHUNK))
                .zip(c.chunks(CHUNK))
                .map(|((a, b), c)| f(a, b, c))
                .fold((0.0, 0.0), |acc, s| (acc.0 + s.0, acc.1 + s.1)),
        }
    }

    /// Apply `f` to matching chunks of two vectors in parallel (or sequentially).
    pub fn zip2<F>(&self, a: &mut [f64], b: &[f64], f: F)
    where
        F: Fn(&mut [f64], &[f64]) + Sync,
    {
        self.account(work::axpy(a.len()));
        match self.parallel(a.len()) {
            Some(pool) => pool.install(|| {
                a.par_chunks_mut(CHUNK)
                    .zip(b.par_chunks(CHUNK))
                    .for_each(|(a, b)| f(a, b))
            }),
            None => a
                .chunks_mut(CHUNK)
                .zip(b.chunks(CHUNK))
                .for_each(|(a, b)| f(a, b)),
        }
    }
}

/// Dot product of one chunk with four accumulators in a fixed order.
#[inline]
pub fn chunk_dot(a: &[f64], b: &[f64]) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_is_the_same_bits_for_any_thread_count() {
        let n = 5 * CHUNK + 17;
        let x: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 1013) as f64 * 1e-3 + 0.1)
            .collect();
        let y: Vec<f64> = (0..n)
            .map(|i| ((i * 104729) % 997) as f64 * 1e-2 - 3.0)
            .collect();
        let seq = Cpu::sequential().dot(&x, &y);
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .unwrap(),
        );
        let par = Cpu::with_pool(pool).dot(&x, &y);
        assert_eq!(seq.to_bits(), par.to_bits());
        let naive: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert!((seq - naive).abs() <= 1e-9 * naive.abs().max(1.0));
    }
}
