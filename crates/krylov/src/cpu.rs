//! CPU kernels of one rank: SpMV and the vector operations of the CG family, optionally
//! parallel over a rayon pool shared by the ranks of a process (`--threads`).
//!
//! Reductions are **deterministic**: vectors are cut into fixed chunks of [`CHUNK`] values,
//! each chunk is summed with the same four-accumulator pattern, and the chunk partials are
//! added in order, so a dot product gives the same bits whatever the thread count.

use std::sync::Arc;

use rayon::prelude::*;

/// Values per chunk of a deterministic reduction (and per parallel task of vector updates).
pub const CHUNK: usize = 8192;
/// Rows per parallel task of SpMV.
const ROW_CHUNK: usize = 2048;

/// One rank's CPU kernels.
#[derive(Debug, Default)]
pub struct Cpu {
    pool: Option<Arc<rayon::ThreadPool>>,
    partials: Vec<f64>,
    partials2: Vec<f64>,
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
            partials: Vec::new(),
            partials2: Vec::new(),
        }
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
