//! The work of every device operation: bytes moved through memory, flops, kernel launches
//! and host-device copies, as the `sim` backend charges it and the planner prices it (ONE
//! set of formulas: [`crate::Ops`] meters each call with these, `castack_plan::cost` adds them up).
//!
//! Conventions: 8-byte values, 4-byte column and halo indices, 8-byte row pointers; every
//! vector element read or written once from memory per operation (a fused operation reads
//! each operand once), the SpMV input read once per input slot; one launch per operation.
//! `n` is the number of values an operation works on.
//!
//! | operation | bytes | flops |
//! |---|---|---|
//! | [`spmv`] (`rows`, `nnz`, input slots `m`) | `12 nnz + 8 (rows + 1) + 8 rows + 8 min(m, nnz)` | `2 nnz` |
//! | [`spmv_dot`] | as [`spmv`] | `2 nnz + 2 rows` |
//! | [`residual_bound`] (the true residual with its norms and error bound) | [`spmv`] `+ 16 rows` (`b`, `w`) | `3 nnz + 12 rows` |
//! | [`gram`] (`nx`, `ny` vectors; `w`: weighted) | `8 n (nx + ny + w)` (`8 n (nx + w)` over one list) | `2 n` per pair (`3 n` weighted) |
//! | [`axpy`], `xpay` | `24 n` | `2 n` |
//! | [`scale`] / [`mul`], [`div`] / [`representable`] | `16 n` / `24 n` / `24 n` | `n` / `n` / `2 n` |
//! | [`cg_update`] (`x += a p; p = r + b p`) | `40 n` | `4 n` |
//! | [`ccg_update`] (with the residual update and its norms) | `80 n` | `13 n` |
//! | [`ccg_update_dot`] (the same with `r.r` only) | `72 n` | `10 n` |
//! | [`pipecg_update`] | `112 n` | `29 n` |
//! | [`axpy_dot`] | `24 n` | `4 n` |
//! | [`axpy_norms`] | `32 n` | `7 n` |
//! | [`residual_norms`] | `32 n` | `6 n` |
//! | [`wnorm`] | `16 n` | `3 n` |
//! | [`lincomb`] (`t` nonzero terms) | `8 n (t + 2)` | `2 t n` |
//! | [`lincomb_norms`] | `8 n (t + 3)` | `(2 t + 5) n` |
//! | [`lincomb_block`] (`s` sources used, `d` destinations, `t` terms) | `8 n (s + 2 d)` | `2 t n` |
//! | [`basis_step`] | `8 n (reads + 1)` | Newton 2, Chebyshev 2 (first) or 4 per value |
//! | `smooth_update` / `smooth_rescale` | `48 n` / `40 n` | `6 n` / `4 n` |
//! | [`gather`] / scatter (`m` values) | `20 m` | 0 |
//! | [`transfer`] (a host-device copy of `m` values) | `8 m` over the host link | 0 |
//!
//! Chains (`chain`, the dependent additions of fixed-order sums, for a device model's
//! latency bound): `rows / 4` for [`spmv_dot`]'s dot and `n / 4` per pair of an unweighted
//! [`gram`] (four accumulators), `n` per pair of a weighted one; `n` for the fused updates
//! with norms ([`axpy_dot`], [`axpy_norms`], [`residual_norms`], [`residual_bound`], [`wnorm`],
//! [`ccg_update`], [`ccg_update_dot`], [`pipecg_update`], [`lincomb_norms`]: one accumulator per sum, in index
//! order); none elsewhere.
//!
//! The work of one timing interval is priced as one piece (the roofline of the sum): all
//! these operations are memory-bound on the modeled devices (at most 0.25 flop per byte),
//! so that equals the sum of per-operation prices.

use std::cell::Cell;

use castack_collectives::ComputeWork;

use super::{BasisStep, GramShape};

/// A CSR SpMV over `rows` rows with `nnz` entries reading an input of `input` slots.
pub fn spmv(rows: usize, nnz: usize, input: usize) -> ComputeWork {
    let (rows, nnz, input) = (rows as u64, nnz as u64, input as u64);
    ComputeWork {
        bytes: 12 * nnz + 8 * (rows + 1) + 8 * rows + 8 * input.min(nnz),
        flops: 2 * nnz,
        launches: 1,
        spmv_bytes: 12 * nnz + 8 * (rows + 1) + 8 * rows + 8 * input.min(nnz),
        ..ComputeWork::default()
    }
}

/// An SpMV fused with the dot product of its owned input and its output.
pub fn spmv_dot(rows: usize, nnz: usize, input: usize) -> ComputeWork {
    let mut w = spmv(rows, nnz, input);
    w.flops += 2 * rows as u64;
    w.chain = dot_chain(rows);
    w
}

/// The true residual `y = b - A x` of a square block with its two norms and the bound on
/// its rounding error ([`super::Device::residual_bound`]): an SpMV that also reads `b` and
/// the weights row by row (as it writes `y`: SpMV bytes, like those of [`spmv`]) and sums
/// `|a_ij x_j|` beside each row (one addition per entry; per row `b - y`, the norms' and
/// the bound's terms: 12 flops), its three sums in row order.
pub fn residual_bound(rows: usize, nnz: usize, input: usize) -> ComputeWork {
    let mut w = ordered(spmv(rows, nnz, input), rows);
    w.bytes += 16 * rows as u64;
    w.spmv_bytes += 16 * rows as u64;
    w.flops += nnz as u64 + 12 * rows as u64;
    w
}

/// The dependent additions of a dot product of `n` values with four interleaved
/// accumulators ([`super::cpu::chunk_dot`]).
fn dot_chain(n: usize) -> u64 {
    (n as u64).div_ceil(4)
}

/// `w` whose sums add its `n` values one after another (one accumulator per sum, the sums
/// side by side).
fn ordered(mut w: ComputeWork, n: usize) -> ComputeWork {
    w.chain = n as u64;
    w
}

/// A dot product of two `n`-vectors (a 1 x 1 [`gram`]).
pub fn dot(n: usize) -> ComputeWork {
    let mut w = stream(2, 0, 2, n);
    w.chain = dot_chain(n);
    w
}

/// A Gram block of `nx x ny` vectors in `shape`, optionally weighted; `one_list`: `ys`
/// is `xs` (each vector read once).
pub fn gram(
    n: usize,
    nx: usize,
    ny: usize,
    shape: GramShape,
    weighted: bool,
    one_list: bool,
) -> ComputeWork {
    let lists = if one_list { nx } else { nx + ny };
    let vectors = lists as u64 + u64::from(weighted);
    let pairs = shape.len(nx, ny) as u64;
    let per_pair = if weighted { 3 } else { 2 };
    // A weighted pair sums in index order, pair after pair; unweighted pairs sum with four
    // accumulators, and those sharing their left vector two at a time, their chains
    // overlapping (the CPU kernel: `cpu_block`).
    let chain = match weighted {
        true => pairs * n as u64,
        false => super::cpu_block::gram_chains(nx, ny, shape) as u64 * dot_chain(n),
    };
    ComputeWork {
        bytes: 8 * vectors * n as u64,
        flops: per_pair * pairs * n as u64,
        launches: 1,
        chain,
        ..ComputeWork::default()
    }
}

/// `pub fn name(n: usize) -> ComputeWork` for each row `name: reads, writes, flops`: one
/// elementwise pass over `n` values ([`stream`]); `ordered` rows also sum in index order
/// ([`ordered`]).
macro_rules! stream_formulas {
    ($($(#[$doc:meta])* $name:ident: $reads:expr, $writes:expr, $flops:expr $(, $ord:ident)?;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(n: usize) -> ComputeWork {
                stream_formulas!(@chain $($ord)? stream($reads, $writes, $flops, n), n)
            }
        )*
    };
    (@chain ordered $w:expr, $n:expr) => {
        ordered($w, $n)
    };
    (@chain $w:expr, $n:expr) => {
        $w
    };
}

stream_formulas! {
    /// `y += a x` (also `y = x + b y`).
    axpy: 2, 1, 2;
    /// `y = alpha x`.
    scale: 1, 1, 1;
    /// The iterate as the caller receives it ([`super::Device::representable`]).
    representable: 2, 1, 2;
    /// `out = a * b` elementwise.
    mul: 2, 1, 1;
    /// `out = a / b` elementwise.
    div: 2, 1, 1;
    /// CG's fused `x += alpha p; p = r + beta p`.
    cg_update: 3, 2, 4;
    /// C-CG's fused `p = r + beta p; ap = ar + beta ap; x += a p; r -= a ap` with `r.r` and
    /// `r.W r` (reads r, ar, p, ap, x, w; writes r, p, ap, x).
    ccg_update: 6, 4, 13, ordered;
    /// Chronopoulos-Gear CG's fused four updates with `r.r` only (the weights not read).
    ccg_update_dot: 5, 4, 10, ordered;
    /// Pipelined CG's fused six updates and eight sums (the gap estimate's five norms
    /// included).
    pipecg_update: 8, 6, 29, ordered;
    /// The residual update with `r.r` only.
    axpy_dot: 2, 1, 4, ordered;
    /// The residual update with `r.r` and `r.W r`.
    axpy_norms: 3, 1, 7, ordered;
    /// The true residual `y = b - y` with its two norms.
    residual_norms: 3, 1, 6, ordered;
    /// `sum r_i^2 w_i`.
    wnorm: 2, 0, 3, ordered;
    /// The smoothing's `s += eta (r - s); y += eta (x - y)`.
    smooth_update: 4, 2, 6;
    /// The smoothing's `s = g s; y = g y + (1 - g) x0`.
    smooth_rescale: 3, 2, 4;
    /// A copy of `n` values.
    copy: 1, 1, 0;
    /// A fill of `n` values.
    fill: 0, 1, 0;
}

/// A linear combination of `terms` vectors added to one.
pub fn lincomb(n: usize, terms: usize) -> ComputeWork {
    stream(terms as u64 + 1, 1, 2 * terms as u64, n)
}

/// [`lincomb`] with the two norms of the result.
pub fn lincomb_norms(n: usize, terms: usize) -> ComputeWork {
    ordered(stream(terms as u64 + 2, 1, 2 * terms as u64 + 5, n), n)
}

/// A block linear combination reading `sources` vectors (those with a nonzero
/// coefficient) into `dsts` destinations with `terms` nonzero coefficients in all.
pub fn lincomb_block(n: usize, sources: usize, dsts: usize, terms: usize) -> ComputeWork {
    stream((sources + dsts) as u64, dsts as u64, 2 * terms as u64, n)
}

/// One basis recurrence step: monomial copies `A s_j` (1 read, 1 write); Newton reads
/// `A s_j` and `s_j` (2 flops per value); Chebyshev reads `A s_j`, `s_j` and, from the
/// second column on, `s_{j-1}` (2, then 4 flops per value).
pub fn basis_step(step: BasisStep, n: usize) -> ComputeWork {
    let (reads, flops) = match step {
        BasisStep::Copy => (1, 0),
        BasisStep::Shift(_) | BasisStep::ChebyshevFirst { .. } => (2, 2),
        BasisStep::Chebyshev { .. } => (3, 4),
    };
    stream(reads, 1, flops, n)
}

/// Packing (gather) or unpacking (scatter) `m` halo values by a 4-byte index list.
pub fn gather(m: usize) -> ComputeWork {
    ComputeWork {
        bytes: 20 * m as u64,
        launches: 1,
        ..ComputeWork::default()
    }
}

/// A host-device copy of `m` values (priced by the device model's host link).
pub fn transfer(m: usize) -> ComputeWork {
    ComputeWork {
        transfers: 1,
        transfer_bytes: 8 * m as u64,
        ..ComputeWork::default()
    }
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
        ..ComputeWork::default()
    }
}

/// `a + b`.
pub fn add(a: ComputeWork, b: ComputeWork) -> ComputeWork {
    ComputeWork {
        bytes: a.bytes + b.bytes,
        flops: a.flops + b.flops,
        launches: a.launches.saturating_add(b.launches),
        transfers: a.transfers.saturating_add(b.transfers),
        transfer_bytes: a.transfer_bytes + b.transfer_bytes,
        spmv_bytes: a.spmv_bytes + b.spmv_bytes,
        working_set: a.working_set.max(b.working_set),
        chain: a.chain + b.chain,
    }
}

/// `count` times `w`.
pub fn times(w: ComputeWork, count: usize) -> ComputeWork {
    let c32 = u32::try_from(count).unwrap_or(u32::MAX);
    ComputeWork {
        bytes: w.bytes * count as u64,
        flops: w.flops * count as u64,
        launches: w.launches.saturating_mul(c32),
        transfers: w.transfers.saturating_mul(c32),
        transfer_bytes: w.transfer_bytes * count as u64,
        spmv_bytes: w.spmv_bytes * count as u64,
        working_set: w.working_set,
        chain: w.chain * count as u64,
    }
}

/// The work one rank's operations did since the meter was last drained (see the module
/// doc): [`crate::Ops`] adds every operation's work, [`crate::SolverComm::now`] drains it
/// into the communicator's model at every clock reading. One rank's thread only.
#[derive(Debug, Default)]
pub struct WorkMeter {
    work: Cell<ComputeWork>,
    /// The rank's working set (bytes of matrix and vectors it holds), stamped on the work
    /// it drains: the device model prices work at the cache level that holds it.
    working_set: Cell<u64>,
    /// The part of it that outlives a solve ([`WorkMeter::settle`]).
    settled: Cell<u64>,
}

impl WorkMeter {
    /// Add `w`.
    pub fn add(&self, w: ComputeWork) {
        self.work.set(add(self.work.get(), w));
    }

    /// Count `bytes` more of data the rank's kernels keep working on (a matrix, a vector).
    pub fn hold(&self, bytes: u64) {
        self.working_set
            .set(self.working_set.get().saturating_add(bytes));
    }

    /// Set the working set to `bytes` (vectors of a finished step leave it).
    pub fn set_working_set(&self, bytes: u64) {
        self.working_set.set(bytes);
    }

    /// Mark the working set counted so far as lasting (a solver's set-up): a later
    /// [`WorkMeter::restore`] returns to it.
    pub fn settle(&self) {
        self.settled.set(self.working_set.get());
    }

    /// Forget what was held since [`WorkMeter::settle`] (the vectors of a finished solve).
    pub fn restore(&self) {
        self.working_set.set(self.settled.get());
    }

    /// The working set counted by [`WorkMeter::hold`] so far.
    pub fn working_set(&self) -> u64 {
        self.working_set.get()
    }

    /// The work added since the last call, with the working set, and reset to none.
    pub fn take(&self) -> ComputeWork {
        let mut w = self.work.take();
        if w != ComputeWork::default() {
            w.working_set = w.working_set.max(self.working_set.get());
        }
        w
    }
}
