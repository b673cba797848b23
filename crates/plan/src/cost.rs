//! Work of one outer iteration of each method, counted operation by operation as the
//! solvers in `cg/` call them on their device, each operation's bytes and flops from
//! [`castack_krylov::work`]: the ONE set of formulas [`crate::Ops`] meters for the `sim`
//! backend, so a prediction and a modeled solve price the same work. Reference: each
//! method's module doc in `cg/` (ALGORITHMS.md section 3).
//!
//! Per outer iteration (covering `eq` CG-equivalent iterations), with n owned rows:
//!
//! | method | eq | SpMVs | reductions (values each) | halo | vector operations over n rows |
//! |---|---|---|---|---|---|
//! | cg | 1 | 1, fused with `p.Ap` | 1 (`p.Ap`), 2 (`r.r`, `\|\|r\|\|_w^2`: computed near the target only, its place kept) | 1 depth-1 | `axpy_dot` (`axpy_norms` near the target), `cg_update` |
//! | ccg | 1 | 1, fused with `r.Ar` | 3 (`\|\|r\|\|_w^2` computed near the target only, its place kept) | 1 depth-1 | `ccg_update` without weights (with them near the target) |
//! | pipecg | 1 | 1 | 3, overlapped with the SpMV | 1 depth-1 | `pipecg_update` |
//! | prcg | 1 | 1, fused with `p.s` | 5 | 1 depth-1 | 2 `axpy`, `xpay`, 3 `dot`, `wnorm` |
//! | pipeprcg | 1 | 2 | 5, overlapped with both SpMVs | 2 depth-1 | 3 `axpy`, 2 `xpay`, 4 `dot`, `wnorm` |
//! | groppcg | 1 | 1 | 1 (blocking without `M^-1`), 2 overlapped with the SpMV | 1 depth-1 | 2 `axpy`, 2 `xpay`, 2 `dot`, `wnorm` |
//! | plcg (l = k) | 1 | 1 | l + 2, in flight for l iterations (overlapped with l SpMVs) | 1 depth-1 | l + 1 `dot`, `wnorm`, l + 1 `scale` and l + 1 two-term `lincomb` (the V, Q, Z recurrences), `axpy`, `xpay` |
//! | cbcg | k | k | k(k+1)/2 + k, 2k^2 + k(k+1)/2 + 3 | k depth-1, or 1 depth-k (mpk) | Gram blocks `Q^T AQ`, `Q^T r`, `(AQ)^T S`, `Q^T AS`, `S^T AS`; the step (2 combinations of k), the new directions (2 block combinations), smoothing, 1 copy |
//! | cbcgr | k | k | k(k+1) + 2k^2 + 2k + 3 | as cbcg | Gram blocks `S^T AS`, `(AQ)^T S`, `S^T r`, `Q^T r`, `Q^T AS`, `Q^T AQ`; as cbcg otherwise |
//! | cacg (s = k) | k | 2k - 1 | (2k+1)(2k+2)/2 + 2 | 2k - 1 depth-1, or 1 depth-k pair (mpk) | `Y^T Y` (one list), `\|\|r\|\|_w^2`, smoothing, 2 copies, 2 fills, one block combination of `2k + 1` columns into x, r, p |
//!
//! "smoothing": the minimal-residual smoothing's `(s, r)_w` (a 1 x 1 weighted Gram block,
//! riding in the step's last reduction) and its fused update (`cg/smoothing.rs`).
//!
//! Every SpMV of an s-step basis is followed by one basis recurrence step
//! ([`work::basis_step`]), included in [`basis_step`]; through the matrix powers kernel each
//! build also copies its start vector in and each step's owned image and column out
//! ([`mpk_build_copies`]). cacg's combination skips zero coefficients: after s inner steps
//! x' has 2s - 1 nonzero coordinates, r' and p' 2s + 1 each. The small dense work on k x k
//! matrices is O(k^3) per rank, independent of n, unmetered by the solvers and neglected
//! here alike.
//!
//! Setup (initial norms, spectral estimate), the first Gram matrix, refreshes and the final
//! true-residual check are not outer-step work; [`super::plan`] adds them from the
//! instrumented run's counters. The table prices the steady state: the extra values and
//! local work of the last outer steps near the target (cbcg/cbcgr's minimal-residual
//! block, cacg's `Y^T W Y`, `(s, Y)_w` and inner smoothing) are left out, and so is the
//! packing of halo values (a gather and two copies of the ghost values per exchange, on
//! every device), which the `sim` backend meters with the exchange.

use castack_collectives::fabric_sim::ComputeCost;
use castack_collectives::ComputeWork;

use super::graph::RankGraph;
use castack_krylov::Basis;
use castack_krylov::Method;
use castack_krylov::{work, BasisStep, GramShape};

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

impl HaloUse {
    /// The (depth, start vectors) of the exchange it runs: (1, 1) per SpMV, or the matrix
    /// powers' one exchange.
    pub fn exchange(&self) -> (usize, usize) {
        match *self {
            HaloUse::Depth1 { .. } => (1, 1),
            HaloUse::Mpk { depth, vectors, .. } => (depth, vectors),
        }
    }
}

/// A vector operation the solvers run, with its work from [`castack_krylov::work`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// [`work::axpy_norms`] (the residual update with its two norms).
    AxpyNorms,
    /// [`work::axpy_dot`] (the residual update with its own norm only).
    AxpyDot,
    /// [`work::cg_update`].
    CgUpdate,
    /// [`work::ccg_update`].
    CcgUpdate,
    /// [`work::ccg_update_dot`] (the update with `r.r` only).
    CcgUpdateDot,
    /// [`work::pipecg_update`].
    PipecgUpdate,
    /// [`work::axpy`] (also `xpay`: the same work).
    Axpy,
    /// [`work::copy`].
    Copy,
    /// [`work::scale`].
    Scale,
    /// [`work::fill`].
    Fill,
    /// [`work::wnorm`].
    WNorm,
    /// [`work::smooth_update`].
    SmoothUpdate,
    /// [`work::lincomb`] with this many nonzero terms.
    Lincomb(usize),
    /// [`work::lincomb_norms`] with this many nonzero terms.
    LincombNorms(usize),
    /// [`work::lincomb_block`]: sources read, destinations, nonzero terms.
    LincombBlock(usize, usize, usize),
    /// [`work::gram`]: `nx x ny` in `shape`, weighted or not, over one list or two.
    Gram {
        /// Vectors on the left.
        nx: usize,
        /// Vectors on the right.
        ny: usize,
        /// Full block or upper triangle.
        shape: GramShape,
        /// Weighted by the original-norm weights.
        weighted: bool,
        /// The right list is the left one.
        one_list: bool,
    },
}

impl Kernel {
    /// The work of one call over `n` rows.
    pub fn work(self, n: usize) -> ComputeWork {
        match self {
            Kernel::AxpyNorms => work::axpy_norms(n),
            Kernel::AxpyDot => work::axpy_dot(n),
            Kernel::CgUpdate => work::cg_update(n),
            Kernel::CcgUpdate => work::ccg_update(n),
            Kernel::CcgUpdateDot => work::ccg_update_dot(n),
            Kernel::PipecgUpdate => work::pipecg_update(n),
            Kernel::Axpy => work::axpy(n),
            Kernel::Copy => work::copy(n),
            Kernel::Scale => work::scale(n),
            Kernel::Fill => work::fill(n),
            Kernel::WNorm => work::wnorm(n),
            Kernel::SmoothUpdate => work::smooth_update(n),
            Kernel::Lincomb(t) => work::lincomb(n, t),
            Kernel::LincombNorms(t) => work::lincomb_norms(n, t),
            Kernel::LincombBlock(s, d, t) => work::lincomb_block(n, s, d, t),
            Kernel::Gram {
                nx,
                ny,
                shape,
                weighted,
                one_list,
            } => work::gram(n, nx, ny, shape, weighted, one_list),
        }
    }
}

/// A Gram block of two lists, unweighted.
const fn gram(nx: usize, ny: usize, shape: GramShape) -> Kernel {
    Kernel::Gram {
        nx,
        ny,
        shape,
        weighted: false,
        one_list: false,
    }
}

/// A dot product (`Ops::dot`): an unweighted 1 x 1 Gram block.
const DOT: Kernel = gram(1, 1, GramShape::Full);

/// The smoothing's `(s, r)_w`: a weighted 1 x 1 Gram block.
const SMOOTH_DOT: Kernel = Kernel::Gram {
    nx: 1,
    ny: 1,
    shape: GramShape::Full,
    weighted: true,
    one_list: false,
};

/// The work of one outer iteration of a method.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterStep {
    /// CG-equivalent iterations per outer iteration.
    pub eq: usize,
    /// SpMVs (depth-1 path; with MPK the builds replace them).
    pub spmvs: usize,
    /// The SpMV is fused with a dot product of its input and output (`spmv_dot`).
    pub spmv_dot: bool,
    /// Payload (doubles) of each global reduction, in issue order.
    pub reductions: Vec<usize>,
    /// The LAST reduction is nonblocking and overlaps the SpMV and its halo (pipecg,
    /// pipeprcg, groppcg's second); the others block.
    pub overlapped: bool,
    /// Outer iterations an overlapped reduction stays in flight: it hides behind that many
    /// iterations' SpMVs and exchanges (1; plcg: its depth `l`).
    pub pipeline: usize,
    /// How SpMV inputs are exchanged.
    pub halo: HaloUse,
    /// Basis builds (sizes; each column one SpMV and one [`basis_step`]); empty for the
    /// single-vector methods.
    pub builds: Vec<usize>,
    /// Vector operations over the owned rows and how many times each is called.
    pub kernels: Vec<(Kernel, usize)>,
}

fn tri(m: usize) -> usize {
    m * (m + 1) / 2
}

/// The work of basis recurrence step `j` over `n` rows ([`work::basis_step`] of the
/// basis's step `j`).
pub fn basis_step(basis: Basis, j: usize, n: usize) -> ComputeWork {
    let step = match basis {
        Basis::Monomial => BasisStep::Copy,
        Basis::Newton => BasisStep::Shift(0.0),
        Basis::Chebyshev if j == 0 => BasisStep::ChebyshevFirst {
            eta: 1.0,
            zeta: 0.0,
        },
        Basis::Chebyshev => BasisStep::Chebyshev {
            eta: 1.0,
            zeta: 0.0,
        },
    };
    work::basis_step(step, n)
}

/// The copies of one basis build of size `k` through the matrix powers kernel over `n`
/// owned rows: the start vector in, and per step the owned image and column out.
pub fn mpk_build_copies(k: usize, n: usize) -> ComputeWork {
    times(work::copy(n), 1 + 2 * k)
}

/// The outer step of `method` with block size / s `k` (ignored by cg, ccg, pipecg), with or
/// without the matrix powers kernel.
pub fn outer_step(method: Method, k: usize, mpk: bool) -> OuterStep {
    let k = k.max(1);
    let single = |reductions: Vec<usize>, overlapped, spmv_dot, kernels| OuterStep {
        eq: 1,
        spmvs: 1,
        spmv_dot,
        reductions,
        overlapped,
        pipeline: 1,
        halo: HaloUse::Depth1 { count: 1 },
        builds: Vec::new(),
        kernels,
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
    // Block CG's step (`x += Q a`; `r -= AQ a` with its norms), the copy of r into the next
    // basis, the new directions (`Q = S - Q B`, `AQ = AS - AQ B`: two block combinations
    // of k sources into k destinations), the Gram blocks, and the smoothing.
    let block = |reductions: Vec<usize>, grams: Vec<(Kernel, usize)>| {
        let mut kernels = vec![
            (Kernel::Lincomb(k), 1),
            (Kernel::LincombNorms(k), 1),
            (Kernel::Copy, 1),
            (Kernel::LincombBlock(k, k, k * k), 2),
            (SMOOTH_DOT, 1),
            (Kernel::SmoothUpdate, 1),
        ];
        kernels.extend(grams);
        OuterStep {
            eq: k,
            spmvs: k,
            spmv_dot: false,
            reductions,
            overlapped: false,
            pipeline: 1,
            halo: block_halo(1, vec![k], k),
            builds: vec![k],
            kernels,
        }
    };
    match method {
        // q = A p with p.q; r -= alpha q with r.r (the weighted norm joins it only near the
        // target, see cg/cg.rs); x += alpha p, p = r + beta p.
        Method::Cg => single(
            vec![1, 2],
            false,
            true,
            vec![(Kernel::AxpyDot, 1), (Kernel::CgUpdate, 1)],
        ),
        // p, Ap, x and r -= a Ap with r.r in one pass (the weighted norm joins it only near
        // the target, see cg/ccg.rs); Ar = A r with r.Ar.
        Method::Ccg => single(vec![3], false, true, vec![(Kernel::CcgUpdateDot, 1)]),
        // q = A w; the six updates and three sums in one pass.
        Method::Pipecg => single(vec![3], true, false, vec![(Kernel::PipecgUpdate, 1)]),
        // s = A p with p.s; x += a p, r -= a s; p = r + beta p; r.r, r.s, s.s and
        // ||r||_w^2 (cg/prcg.rs): one blocking reduction of five values.
        Method::Prcg => single(
            vec![5],
            false,
            true,
            vec![(Kernel::Axpy, 3), (DOT, 3), (Kernel::WNorm, 1)],
        ),
        // u = A s and w = A r behind the one reduction of five values; x, r, w by axpy,
        // p, s by xpay (cg/pipeprcg.rs).
        Method::Pipeprcg => OuterStep {
            spmvs: 2,
            halo: HaloUse::Depth1 { count: 2 },
            ..single(
                vec![5],
                true,
                false,
                vec![(Kernel::Axpy, 5), (DOT, 4), (Kernel::WNorm, 1)],
            )
        },
        // p.s (blocking: no loop preconditioner to hide behind); x, r by axpy; [r.r,
        // ||r||_w^2] behind z = A r; p, s by xpay (cg/groppcg.rs).
        Method::Groppcg => single(
            vec![1, 2],
            true,
            false,
            vec![(Kernel::Axpy, 4), (DOT, 2), (Kernel::WNorm, 1)],
        ),
        // p(l)-CG with l = k: z = A z' behind the reductions of the last l iterations;
        // l + 1 dots of u and ||v||_w^2 into one reduction; v, the l - 1 q's and z each by
        // a scale and a two-term combination; p by xpay, x by axpy (cg/plcg.rs).
        Method::Plcg => OuterStep {
            pipeline: k,
            ..single(
                vec![k + 2],
                true,
                false,
                vec![
                    (DOT, k + 1),
                    (Kernel::WNorm, 1),
                    (Kernel::Scale, k + 1),
                    (Kernel::Lincomb(2), k + 1),
                    (Kernel::Axpy, 2),
                ],
            )
        },
        // Reduction 1: Q^T A Q (upper), Q^T r; reduction 2: (AQ)^T S, Q^T (AS), r.r,
        // ||r||_w^2, S^T A S (upper), (s, r)_w.
        Method::Cbcg => block(
            vec![tri(k) + k, 2 * k * k + 3 + tri(k)],
            vec![
                (gram(k, k, GramShape::Upper), 2),
                (gram(k, 1, GramShape::Full), 1),
                (gram(k, k, GramShape::Full), 2),
            ],
        ),
        // One reduction: S^T A S, (AQ)^T S, S^T r, Q^T r, r.r, ||r||_w^2, Q^T (AS),
        // Q^T A Q, (s, r)_w.
        Method::Cbcgr => block(
            vec![k * (k + 1) + 2 * k * k + 2 * k + 3],
            vec![
                (gram(k, k, GramShape::Upper), 2),
                (gram(k, 1, GramShape::Full), 2),
                (gram(k, k, GramShape::Full), 2),
            ],
        ),
        // Y = [P | R]: 2s + 1 columns; G = Y^T Y (upper, one list), ||r||_w^2 and the
        // smoothing's (s, r)_w in one reduction; x += Y x', r = Y r', p = Y p' in one block
        // combination (zero coefficients skipped); the smoothing's update.
        Method::Cacg => {
            let ny = 2 * k + 1;
            let builds = if k > 1 { vec![k, k - 1] } else { vec![k] };
            OuterStep {
                eq: k,
                spmvs: 2 * k - 1,
                spmv_dot: false,
                reductions: vec![tri(ny) + 2],
                overlapped: false,
                pipeline: 1,
                halo: block_halo(2, builds.clone(), 2 * k - 1),
                builds,
                kernels: vec![
                    (Kernel::Copy, 2),
                    (
                        Kernel::Gram {
                            nx: ny,
                            ny,
                            shape: GramShape::Upper,
                            weighted: false,
                            one_list: true,
                        },
                        1,
                    ),
                    (Kernel::WNorm, 1),
                    (SMOOTH_DOT, 1),
                    (Kernel::SmoothUpdate, 1),
                    (Kernel::Fill, 2),
                    (Kernel::LincombBlock(ny, 3, (2 * k - 1) + 2 * ny), 1),
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

pub use work::{add, times};

/// The vectors (each with the matrix's input slots) one solve of `method` with block
/// size / s `k` works on: the right-hand side, a scratch vector and the iterate of every
/// solve, the method's own work vectors, and the s-step methods' residual smoothing (y, s).
pub fn vectors(method: Method, k: usize) -> usize {
    3 + match method {
        Method::Cg => 3,
        Method::Ccg => 6,
        Method::Pipecg => 8,
        // r, p, s, t (cg/prcg.rs).
        Method::Prcg => 4,
        // r, w, p, s, u, t (cg/pipeprcg.rs).
        Method::Pipeprcg => 6,
        // r, p, s, Z, t (cg/groppcg.rs).
        Method::Groppcg => 5,
        // Z (max(l, 2) + 1), V (3), Q (3 (l - 1)), p and the spare, l = k (cg/plcg.rs).
        Method::Plcg => k.max(2) + 1 + 3 + 3 * (k - 1) + 2,
        // The block (s, AS, Q, AQ: 4k + 1), r, t, the correction x_c, smoothing.
        Method::Cbcg | Method::Cbcgr => 4 * k + 1 + 3 + 2,
        // The bases (P: s + 1, AP: s, R: s, AR: max(s, 2) - 1), r, p, t, smoothing.
        Method::Cacg => (k + 1) + k + k + (k.max(2) - 1) + 3 + 2,
    }
}

/// One rank's working set (bytes) for candidate `method`, `k`, `mpk` on its part `g` of
/// the matrix: the matrix as its SpMV reads it (12 bytes per entry, 8 per row pointer),
/// the scaling and weight vectors, [`vectors`] vectors with input slots, and with the
/// matrix powers kernel its local rows of every level and extended work vectors (the
/// vectors of a pair build's exchange left out, on both sides). It is what
/// [`castack_krylov::Solver::held_bytes`] counts on that rank for a solve on a `SpmvMode::Halo`
/// matrix with matrix powers data of depth k (tested per method), and decides the cache
/// level a device model with caches prices the rank's kernels at.
pub fn working_set(method: Method, k: usize, mpk: bool, g: &RankGraph) -> u64 {
    let (rows, ghosts, nnz) = (g.rows() as u64, g.ghosts() as u64, g.nnz() as u64);
    let matrix = 12 * nnz + 8 * (rows + 1);
    let vecs = 8 * (rows + ghosts) * vectors(method, k) as u64;
    let powers = match outer_step(method, k, mpk).halo {
        HaloUse::Mpk { depth, .. } => {
            let lower = depth.saturating_sub(1);
            let (r, z) = (g.rows_through(lower) as u64, g.nnz_through(lower) as u64);
            12 * z + 8 * (r + 1) + 8 * g.rows_through(depth) as u64 * (depth as u64 + 2)
        }
        HaloUse::Depth1 { .. } => 0,
    };
    matrix + 16 * rows + vecs + powers
}

/// The host-device staging of one exchange on a rank whose vectors live in device memory
/// (`dist/stage.rs` of castack-linalg): the `sends` values packed by one gather and copied to
/// the host, the exchange, the `recvs` values copied back ([`work::transfer`]) and, where
/// they do not land in one contiguous run (the matrix powers kernel's ghost zone,
/// `scattered`), scattered by one more gather. A side with no values does nothing. On the
/// CPU the plan leaves this packing out (module doc); `krylov plan --device cuda` prices it,
/// the copies' latency being the larger part.
pub fn exchange_staging(sends: usize, recvs: usize, scattered: bool) -> ComputeWork {
    let mut w = ComputeWork::default();
    if sends > 0 {
        w = add(add(w, work::gather(sends)), work::transfer(sends));
    }
    if recvs > 0 {
        w = add(w, work::transfer(recvs));
        if scattered {
            w = add(w, work::gather(recvs));
        }
    }
    w
}

/// `w` in the fabric model's type, run in a working set of `working_set` bytes.
pub fn cost(w: ComputeWork, working_set: u64) -> ComputeCost {
    ComputeCost {
        bytes: w.bytes,
        flops: w.flops,
        launches: w.launches,
        spmv_bytes: w.spmv_bytes,
        working_set,
        chain: w.chain,
    }
}

/// A solve's loop work beyond its outer steps (first Gram matrix, refreshes, the final
/// true-residual check): its `(reductions, halo exchanges)` in the loop less what
/// `outer_iters` outer steps of `(method, k)` issue on the depth-1 path (as the planner's
/// instrumented runs take it).
pub fn loop_extras(
    method: Method,
    k: usize,
    outer_iters: usize,
    reductions: u64,
    halo_exchanges: u64,
) -> (u64, u64) {
    let step = outer_step(method, k, false);
    let outer = outer_iters as u64;
    (
        reductions.saturating_sub(outer * step.reductions.len() as u64),
        halo_exchanges.saturating_sub(outer * step.spmvs as u64),
    )
}
