//! Shared helpers for castack's criterion benches.
//!
//! The SpMV benches compare the CPU device's SpMV kernel with a STREAM-like triad measured in the same run
//! ([`Triad`], [`LocalSpmv`]); both use the same thread setting ([`cpu`], [`pool`]): one
//! thread runs sequentially, more threads run on a rayon pool of that many threads in fixed
//! chunks, as the solver's kernels do.

use std::error::Error;
use std::sync::Arc;

use castack_collectives::ThreadUniverse;
use castack_krylov::sparse::gen;
use castack_krylov::CPU_CHUNK as CHUNK;
use castack_krylov::{Cpu, DistCsr, Partition, SpmvMode};
use rayon::prelude::*;

/// Setup errors of the benches.
pub type SetupError = Box<dyn Error + Send + Sync>;

/// Grid points per side of the 3-D Poisson bench matrix: `100^3` = 1,000,000 rows,
/// 6,940,000 stored entries.
pub const POISSON_N: usize = 100;

/// Values per triad vector: `2^24` f64 = 128 MiB each, 384 MiB in all, far beyond any
/// cache of the machines the benches run on.
pub const TRIAD_LEN: usize = 1 << 24;

/// Thread counts the SpMV benches sweep (ranks 1).
pub const THREADS: &[usize] = &[1, 2];

/// A rayon pool of `threads` threads, or `None` for 1 (sequential).
///
/// # Panics
///
/// If the pool cannot be built.
pub fn pool(threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    (threads > 1).then(|| {
        Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("cannot build the rayon pool"),
        )
    })
}

/// The CPU kernels for a thread count: [`Cpu::sequential`] for 1, else [`Cpu::with_pool`].
pub fn cpu(pool: Option<&Arc<rayon::ThreadPool>>) -> Cpu {
    match pool {
        Some(p) => Cpu::with_pool(Arc::clone(p)),
        None => Cpu::sequential(),
    }
}

/// STREAM triad `a[i] = b[i] + s * c[i]` on three vectors of [`TRIAD_LEN`] values.
pub struct Triad {
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl Triad {
    /// The triad for `pool` (`None`: sequential); the vectors are written once here so no
    /// page fault lands in a timed run.
    pub fn new(pool: Option<Arc<rayon::ThreadPool>>) -> Self {
        Self {
            a: vec![0.5; TRIAD_LEN],
            b: vec![1.0; TRIAD_LEN],
            c: vec![2.0; TRIAD_LEN],
            pool,
        }
    }

    /// Bytes STREAM counts per run: 3 x 8 B per element (two reads, one write; no
    /// write-allocate traffic).
    pub fn bytes(&self) -> u64 {
        3 * 8 * self.a.len() as u64
    }

    /// One triad, parallel over the pool in chunks of [`CHUNK`] values.
    pub fn run(&mut self, s: f64) {
        let kernel = |a: &mut [f64], b: &[f64], c: &[f64]| {
            for ((ai, bi), ci) in a.iter_mut().zip(b).zip(c) {
                *ai = bi + s * ci;
            }
        };
        let (a, b, c) = (&mut self.a, &self.b, &self.c);
        match &self.pool {
            Some(pool) => pool.install(|| {
                a.par_chunks_mut(CHUNK)
                    .zip(b.par_chunks(CHUNK))
                    .zip(c.par_chunks(CHUNK))
                    .for_each(|((a, b), c)| kernel(a, b, c))
            }),
            None => kernel(a, b, c),
        }
    }

    /// One value of the output, so the optimiser cannot drop the runs.
    pub fn probe(&self) -> f64 {
        self.a[self.a.len() / 2]
    }
}

/// Effective bytes of one CSR SpMV, whatever the kernel stores or caches: 8 B per value,
/// 4 B per column index, 8 B per row pointer, `x` read once and `y` written once.
pub fn spmv_bytes(rows: usize, x_len: usize, nnz: usize) -> u64 {
    (8 * nnz + 4 * nnz + 8 * (rows + 1) + 8 * x_len + 8 * rows) as u64
}

/// The rank-0 block of a 1-rank [`DistCsr`] of `poisson3d(n)` (halo mode), built through
/// the real distributed path on a one-rank [`ThreadUniverse`], with its SpMV vectors.
pub fn poisson_dist(n: usize) -> Result<DistCsr, SetupError> {
    let a = gen::poisson3d(n)?;
    let part = Partition::rows(a.rows(), 1);
    let mut blocks = ThreadUniverse::new(1)?
        .run(|comm| DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo))?;
    Ok(blocks.pop().ok_or("the universe returned no rank")??)
}

/// SpMV on one rank's local CSR block with its input and output vectors.
pub struct LocalSpmv {
    dist: DistCsr,
    x: Vec<f64>,
    y: Vec<f64>,
}

impl LocalSpmv {
    /// The local SpMV of `poisson3d(n)` on one rank; `x` is filled with a seeded pattern
    /// and `y` is written once so no page fault lands in a timed run.
    pub fn poisson3d(n: usize) -> Result<Self, SetupError> {
        let dist = poisson_dist(n)?;
        let x_len = dist.new_vec().ext().len();
        // Fixed pattern (a 64-bit LCG), so every run multiplies the same values.
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let x = (0..x_len)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 11) as f64 / (1u64 << 53) as f64 + 0.5
            })
            .collect();
        let y = vec![0.0; dist.n_local()];
        Ok(Self { dist, x, y })
    }

    /// Rows of the block.
    pub fn rows(&self) -> usize {
        self.y.len()
    }

    /// Stored entries of the block.
    pub fn nnz(&self) -> usize {
        self.dist.nnz_local()
    }

    /// Effective bytes of one product ([`spmv_bytes`]).
    pub fn bytes(&self) -> u64 {
        spmv_bytes(self.rows(), self.x.len(), self.nnz())
    }

    /// `y = A x` with `cpu` (its SpMV kernel on host slices, [`Cpu::spmv_host`]).
    pub fn run(&mut self, cpu: &mut Cpu) {
        let (indptr, cols, vals) = self.dist.local_csr();
        let a = castack_krylov::CsrRef {
            indptr,
            cols,
            vals,
            ncols: self.x.len(),
        };
        cpu.spmv_host(a, &self.x, &mut self.y);
    }

    /// One value of the output, so the optimiser cannot drop the runs.
    pub fn probe(&self) -> f64 {
        self.y[self.y.len() / 2]
    }
}
