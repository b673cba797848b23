//! Work of one outer iteration of each method, counted kernel by kernel as the solvers in
//! `cg/` call them, each kernel's bytes and flops from [`crate::cpu::work`]: the ONE set
//! of formulas the `sim` backend charges (every `Cpu` kernel meters itself with them), so
//! a prediction and a modeled solve price the same work. Reference: each method's module
//! doc in `cg/` (ALGORITHMS.md section 3).
//!
//! Per outer iteration (covering `eq` CG-equivalent iterations), with n owned rows:
//!
//! | method | eq | SpMVs | reductions (values each) | halo | vector kernels over n rows |
//! |---|---|---|---|---|---|
//! | cg | 1 | 1 | 1 (`p.Ap`), 2 (`r.r`, `\|\|r\|\|_w^2`) | 1 depth-1 | 1 dot, 2 axpy, 1 fused residual |
//! | ccg | 1 | 1 | 3 | 1 depth-1 | 1 dot, 3 axpy, 1 fused residual |
//! | pipecg | 1 | 1 | 3, overlapped with the SpMV | 1 depth-1 | 1 dot, 5 axpy, 1 fused residual |
//! | cbcg | k | k | k(k+1)/2 + k, 2k^2 + k(k+1)/2 + 3 | k depth-1, or 1 depth-k (mpk) | k(k+1) + k + 2k^2 dots, 2k + 2k^2 axpy, 1 step-sums pass, smoothing |
//! | cbcgr | k | k | k(k+1) + 2k^2 + 2k + 3 | as cbcg | k(k+1) + 2k^2 + 2k dots, 2k + 2k^2 axpy, 1 step-sums pass, smoothing |
//! | cacg (s = k) | k | 2k - 1 | (2k+1)(2k+2)/2 + 2 | 2k - 1 depth-1, or 1 depth-k pair (mpk) | (2k+1)(2k+2)/2 dots, 1 weighted norm, 6k + 1 axpy, 2 fills, 1 double copy, smoothing |
//!
//! "smoothing": the minimal-residual smoothing's `(s, r)_w` (one weighted dot, riding in
//! the step's last reduction) and its two updates (`cg/smoothing.rs`).
//!
//! Every SpMV of an s-step basis is followed by one basis recurrence step (the formulas of
//! `SStepBasis::next_work`: monomial copies, Newton reads 2, Chebyshev reads 3 after its
//! first column), included in [`basis_step`]. The Gram blocks are what the solvers run:
//! separate dot products (one pass over two vectors each), the updates `Q = S - Q B` one
//! axpy per coefficient. cacg's `combine` skips zero coefficients: after s inner steps x'
//! has 2s - 1 nonzero coordinates, r' and p' 2s + 1 each. The small dense work on k x k
//! matrices is O(k^3) per rank, independent of n, unmetered by the solvers and neglected
//! here alike.
//!
//! Setup (initial norms, spectral estimate), the first Gram matrix, refreshes and the final
//! true-residual check are not outer-step work; [`super::plan`] adds them from the
//! instrumented run's counters. The table prices the steady state: the extra values and
//! local work of the last outer steps near the target (cbcg/cbcgr's minimal-residual
//! block, cacg's `Y^T W Y`, `(s, Y)_w` and inner smoothing) are left out.

use castack_collectives::fabric_sim::ComputeCost;
use castack_collectives::ComputeWork;

use crate::cg::Method;
use crate::config::Basis;
use crate::cpu::work;

/// How an outer step fills its SpMV inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaloUse {
    /// `count` depth-1 halo exchanges, one per SpMV (`values` vectors per message: 1).
    Depth1 {
        /// Exchanges per outer step.
        count: usize,
    },
    /// Matrix powers: one exchange of depth `depth` carrying `vectors` start vectors, then
    /// basis builds of the given sizes on the ghost zone.
    Mpk {
        /// Ghost-zone depth.
        depth: usize,
        /// Start vectors travelling in the one message round (cacg: p and r).
        vectors: usize,
        /// Sizes of the basis builds (cbcg: `[k]`; cacg: `[s, s - 1]`).
        builds: Vec<usize>,
    },
}

/// A vector kernel the solvers call, with its work from [`crate::cpu::work`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// [`work::dot`] (`Cpu::dot`).
    Dot,
    /// [`work::axpy`] (`Cpu::zip2`, and the block methods' per-coefficient updates).
    Axpy,
    /// [`work::fused_residual`] (`Cpu::zip3_sum2`).
    FusedResidual,
    /// A pass through [`work::stream`] with these reads, writes and flops per row.
    Stream {
        /// Vectors read.
        reads: u64,
        /// Vectors written.
        writes: u64,
        /// Flops per row.
        flops: u64,
    },
}

impl Kernel {
    /// The work of one call over `n` rows.
    pub fn work(self, n: usize) -> ComputeWork {
        match self {
            Kernel::Dot => work::dot(n),
            Kernel::Axpy => work::axpy(n),
            Kernel::FusedResidual => work::fused_residual(n),
            Kernel::Stream {
                reads,
                writes,
                flops,
            } => work::stream(reads, writes, flops, n),
        }
    }
}

/// The block methods' `[r.r, ||r||_w^2]` pass after `x += Q a, r -= AQ a` (sstep `step`).
const STEP_SUMS: Kernel = Kernel::Stream {
    reads: 2,
    writes: 0,
    flops: 5,
};
/// `||r||_w^2` alone (`cg::weighted`).
const WEIGHTED: Kernel = Kernel::Stream {
    reads: 2,
    writes: 0,
    flops: 3,
};
/// Zeroing a vector (cacg `combine`).
const FILL: Kernel = Kernel::Stream {
    reads: 0,
    writes: 1,
    flops: 0,
};
/// The smoothing's `(s, r)_w` (`cg/smoothing.rs`).
const SMOOTH_DOT: Kernel = Kernel::Stream {
    reads: 3,
    writes: 0,
    flops: 3,
};
/// One of the smoothing's two updates `s += eta (r - s)`, `y += eta (x - y)`.
const SMOOTH_UPDATE: Kernel = Kernel::Stream {
    reads: 2,
    writes: 1,
    flops: 3,
};
/// cacg's copy of p and r into the first basis columns, metered as one pass over 2n.
const COPY2: Kernel = Kernel::Stream {
    reads: 2,
    writes: 2,
    flops: 0,
};

/// The work of one outer iteration of a method.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterStep {
    /// CG-equivalent iterations per outer iteration.
    pub eq: usize,
    /// SpMVs (depth-1 path; with MPK the builds replace them).
    pub spmvs: usize,
    /// Payload (doubles) of each global reduction, in issue order.
    pub reductions: Vec<usize>,
    /// The reduction is nonblocking and overlaps the SpMV and its halo (pipecg).
    pub overlapped: bool,
    /// How SpMV inputs are exchanged.
    pub halo: HaloUse,
    /// Basis builds (sizes; each column one SpMV and one [`basis_step`]); empty for the
    /// single-vector methods.
    pub builds: Vec<usize>,
    /// Vector kernels over the owned rows and how many times each is called.
    pub kernels: Vec<(Kernel, usize)>,
}

fn tri(m: usize) -> usize {
    m * (m + 1) / 2
}

/// The work of basis recurrence step `j` over `n` rows (`SStepBasis::next_work`).
pub fn basis_step(basis: Basis, j: usize, n: usize) -> ComputeWork {
    let (reads, flops) = match basis {
        Basis::Monomial => (1, 0),
        Basis::Newton => (2, 2),
        Basis::Chebyshev if j == 0 => (2, 2),
        Basis::Chebyshev => (3, 4),
    };
    work::stream(reads, 1, flops, n)
}

/// The outer step of `method` with block size / s `k` (ignored by cg, ccg, pipecg), with or
/// without the matrix powers kernel.
pub fn outer_step(method: Method, k: usize, mpk: bool) -> OuterStep {
    let k = k.max(1);
    let single = |reductions: Vec<usize>, overlapped, axpys| OuterStep {
        eq: 1,
        spmvs: 1,
        reductions,
        overlapped,
        halo: HaloUse::Depth1 { count: 1 },
        builds: Vec::new(),
        kernels: vec![
            (Kernel::Dot, 1),
            (Kernel::Axpy, axpys),
            (Kernel::FusedResidual, 1),
        ],
    };
    let block_halo = |vectors: usize, builds: Vec<usize>, spmvs: usize| {
        if mpk {
            HaloUse::Mpk {
                depth: k,
                vectors,
                builds,
            }
        } else {
            HaloUse::Depth1 { count: spmvs }
        }
    };
    // Block CG's step (`x += Q a`, `r -= AQ a`: 2k axpys and the sums) and new directions
    // (`Q = S - Q B`, `AQ = AS - AQ B`: 2k^2 axpys), then `dots` Gram dot products, and the
    // minimal-residual smoothing (one weighted dot, two updates).
    let block = |reductions: Vec<usize>, dots: usize| OuterStep {
        eq: k,
        spmvs: k,
        reductions,
        overlapped: false,
        halo: block_halo(1, vec![k], k),
        builds: vec![k],
        kernels: vec![
            (Kernel::Axpy, 2 * k + 2 * k * k),
            (STEP_SUMS, 1),
            (Kernel::Dot, dots),
            (SMOOTH_DOT, 1),
            (SMOOTH_UPDATE, 2),
        ],
    };
    match method {
        // p.Ap; x += alpha p; r -= alpha q with r.r, ||r||_w^2; p = r + beta p.
        Method::Cg => single(vec![1, 2], false, 2),
        // p, Ap, x updates; r -= a Ap fused; r.Ar.
        Method::Ccg => single(vec![3], false, 3),
        // z, s, p, x, w updates; r -= a s fused; w.r.
        Method::Pipecg => single(vec![3], true, 5),
        // Reduction 1: Q^T A Q (upper), Q^T r; reduction 2: (AQ)^T S, Q^T (AS), r.r,
        // ||r||_w^2, S^T A S (upper), (s, r)_w.
        Method::Cbcg => block(
            vec![tri(k) + k, 2 * k * k + 3 + tri(k)],
            tri(k) + k + 2 * k * k + tri(k),
        ),
        // One reduction: S^T A S, (AQ)^T S, S^T r, Q^T r, r.r, ||r||_w^2, Q^T (AS),
        // Q^T A Q, (s, r)_w.
        Method::Cbcgr => block(
            vec![k * (k + 1) + 2 * k * k + 2 * k + 3],
            k * (k + 1) + 2 * k * k + 2 * k,
        ),
        // Y = [P | R]: 2s + 1 columns; G = Y^T Y (upper), ||r||_w^2 and the smoothing's
        // (s, r)_w in one reduction; x += Y x', r = Y r', p = Y p' (zero coefficients
        // skipped); the smoothing's two updates.
        Method::Cacg => {
            let ny = 2 * k + 1;
            let builds = if k > 1 { vec![k, k - 1] } else { vec![k] };
            OuterStep {
                eq: k,
                spmvs: 2 * k - 1,
                reductions: vec![tri(ny) + 2],
                overlapped: false,
                halo: block_halo(2, builds.clone(), 2 * k - 1),
                builds,
                kernels: vec![
                    (COPY2, 1),
                    (Kernel::Dot, tri(ny)),
                    (WEIGHTED, 1),
                    (FILL, 2),
                    (Kernel::Axpy, (2 * k - 1) + 2 * ny),
                    (SMOOTH_DOT, 1),
                    (SMOOTH_UPDATE, 2),
                ],
            }
        }
    }
}

/// The summed work of `kernels` over `rows` rows.
pub fn kernels_work(kernels: &[(Kernel, usize)], rows: usize) -> ComputeWork {
    kernels
        .iter()
        .fold(ComputeWork::default(), |acc, &(kernel, count)| {
            add(acc, times(kernel.work(rows), count))
        })
}

/// `a + b`.
pub fn add(a: ComputeWork, b: ComputeWork) -> ComputeWork {
    ComputeWork {
        bytes: a.bytes + b.bytes,
        flops: a.flops + b.flops,
        launches: a.launches.saturating_add(b.launches),
    }
}

/// `count` times `w`.
pub fn times(w: ComputeWork, count: usize) -> ComputeWork {
    ComputeWork {
        bytes: w.bytes * count as u64,
        flops: w.flops * count as u64,
        launches: w
            .launches
            .saturating_mul(u32::try_from(count).unwrap_or(u32::MAX)),
    }
}

/// The same work in the fabric model's type.
pub fn cost(w: ComputeWork) -> ComputeCost {
    ComputeCost {
        bytes: w.bytes,
        flops: w.flops,
        launches: w.launches,
    }
}
