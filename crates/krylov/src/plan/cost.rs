//! Work of one outer iteration of each method (ALGORITHMS.md section 3 and each method's
//! module doc in `cg/`), as counts a rank's compute and communication are priced from.
//!
//! Per outer iteration (covering `eq` CG-equivalent iterations), with n owned rows:
//!
//! | method | eq | SpMVs | reductions (values each) | halo | vector streams / flops per row |
//! |---|---|---|---|---|---|
//! | cg | 1 | 1 | 1 (`p.Ap`), 2 (`r.r`, `\|\|r\|\|_w^2`) | 1 depth-1 | 13 / 12 |
//! | ccg | 1 | 1 | 3 | 1 depth-1 | 15 / 14 |
//! | pipecg | 1 | 1 | 3, overlapped with the SpMV | 1 depth-1 | 21 / 18 |
//! | cbcg | k | k | k(k+1)/2 + k, 2k^2 + 2 | k depth-1, or 1 depth-k (mpk) | 3k basis + 15k + 4 / 2k^2 + ... (see [`OuterStep::gram_dots`]) |
//! | cbcgr | k | k | k(k+1) + 2k^2 + 2k + 2 | as cbcg | as cbcg |
//! | cacg (s = k) | k | 2k - 1 | (2k+1)(2k+2)/2 + 1 | 2k - 1 depth-1, or 1 depth-k pair (mpk) | Gram of 2k+1 columns, 3 (2k+1) axpys back |
//!
//! A vector "stream" is one pass over n doubles (8 n bytes); a basis recurrence
//! (`s_{j+1} = 2(eta A - zeta) s_j - s_{j-1}` and its Newton/monomial forms) reads two and
//! writes one per SpMV. Gram blocks are `dots` dot products over `cols` distinct vectors
//! (O(n k^2) flops, 8 n `cols` bytes: one pass, blocks held in cache). The small dense
//! work on k x k matrices is O(k^3) per rank, independent of n, and is neglected.
//!
//! Setup (initial norms, spectral estimate) and the final true-residual check are not
//! outer-step work; [`super::plan`] adds them from the instrumented run's counters.

use castack_collectives::fabric_sim::ComputeCost;

use crate::cg::Method;

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
    /// Vector passes of the updates and dot products (n doubles each), basis recurrences
    /// excluded.
    pub streams: usize,
    /// Flops per owned row of those updates and dots.
    pub flops_per_row: usize,
    /// Basis recurrence passes per basis vector (3: read `A s_j`, `s_{j-1}`, write
    /// `s_{j+1}`) and their flops per row (4); 0 for the single-vector methods.
    pub basis_streams: usize,
    /// Distinct vectors read by the Gram-block dot products.
    pub gram_cols: usize,
    /// Dot products of the Gram blocks (each 2 flops per row).
    pub gram_dots: usize,
}

/// Basis recurrence cost per row and basis vector: streams, flops.
pub const BASIS_STREAMS: usize = 3;
/// Flops per row of one basis recurrence step.
pub const BASIS_FLOPS: usize = 4;

fn tri(m: usize) -> usize {
    m * (m + 1) / 2
}

/// The outer step of `method` with block size / s `k` (ignored by cg, ccg, pipecg), with or
/// without the matrix powers kernel.
pub fn outer_step(method: Method, k: usize, mpk: bool) -> OuterStep {
    let k = k.max(1);
    let single = |reductions: Vec<usize>, overlapped, streams, flops_per_row| OuterStep {
        eq: 1,
        spmvs: 1,
        reductions,
        overlapped,
        halo: HaloUse::Depth1 { count: 1 },
        streams,
        flops_per_row,
        basis_streams: 0,
        gram_cols: 0,
        gram_dots: 0,
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
    match method {
        // 3 axpys (x, r, p: 9 passes, 6 flops), p.Ap (2, 2), r.r with ||r||_w^2 (2, 4).
        Method::Cg => single(vec![1, 2], false, 13, 12),
        // p, Ap, x, r updates (12, 8); r.r, r.Ar, ||r||_w^2 (3, 6).
        Method::Ccg => single(vec![3], false, 15, 14),
        // z, s, p, x, r, w updates (18, 12); r.r, w.r, ||r||_w^2 (3, 6).
        Method::Pipecg => single(vec![3], true, 21, 18),
        // x += Q a, r -= AQ a (2k + 4 passes, 4k flops); Q = S - Q B, AQ = AS - AQ B (6k
        // passes, 4k^2 flops); r.r, ||r||_w^2 (2, 4).
        Method::Cbcg => OuterStep {
            eq: k,
            spmvs: k,
            reductions: vec![tri(k) + k, 2 * k * k + 2],
            overlapped: false,
            halo: block_halo(1, vec![k], k),
            streams: 8 * k + 6,
            flops_per_row: 4 * k + 4 * k * k + 4,
            basis_streams: BASIS_STREAMS,
            // Q, AQ, r, S, AS.
            gram_cols: 4 * k + 1,
            gram_dots: tri(k) + k + 2 * k * k,
        },
        // As cbcg, the Gram blocks in one reduction: S^T A S, (AQ)^T S, S^T r, Q^T r, r.r,
        // ||r||_w^2, Q^T (AS), Q^T (AQ).
        Method::Cbcgr => OuterStep {
            eq: k,
            spmvs: k,
            reductions: vec![k * (k + 1) + 2 * k * k + 2 * k + 2],
            overlapped: false,
            halo: block_halo(1, vec![k], k),
            streams: 8 * k + 6,
            flops_per_row: 4 * k + 4 * k * k + 4,
            basis_streams: BASIS_STREAMS,
            gram_cols: 4 * k + 1,
            gram_dots: k * (k + 1) + 2 * k * k + 2 * k,
        },
        // Y = [P | R]: 2s + 1 columns and their images; G = Y^T Y (upper), ||r||_w^2;
        // x += Y x', r = Y r', p = Y p' (3 (2s + 2) passes, 6 (2s + 1) flops).
        Method::Cacg => {
            let ny = 2 * k + 1;
            OuterStep {
                eq: k,
                spmvs: 2 * k - 1,
                reductions: vec![tri(ny) + 1],
                overlapped: false,
                halo: block_halo(2, vec![k, k - 1], 2 * k - 1),
                streams: 3 * (ny + 1) + 1,
                flops_per_row: 6 * ny + 2,
                basis_streams: BASIS_STREAMS,
                gram_cols: ny,
                gram_dots: tri(ny),
            }
        }
    }
}

/// One SpMV over `rows` rows with `nnz` stored entries reading an input of `input`
/// values: CSR values (8 B) and 32-bit columns (4 B) per entry, row pointers (8 B), the
/// input once and the output once; 2 flops per entry; one kernel launch.
pub fn spmv_cost(rows: usize, nnz: usize, input: usize) -> ComputeCost {
    ComputeCost {
        bytes: (12 * nnz + 8 * (rows + 1) + 8 * input + 8 * rows) as u64,
        flops: 2 * nnz as u64,
        launches: 1,
    }
}

/// `passes` vector passes over `rows` rows with `flops_per_row` flops, as `launches`
/// kernels.
pub fn vector_cost(rows: usize, passes: usize, flops_per_row: usize, launches: u32) -> ComputeCost {
    ComputeCost {
        bytes: (8 * rows * passes) as u64,
        flops: (rows * flops_per_row) as u64,
        launches,
    }
}
