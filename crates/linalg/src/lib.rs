//! # castack-linalg
//!
//! The linear-algebra layer under castack's solvers, between the communication crates
//! (`castack-collectives`, `castack-neighbor`) and the methods (`castack-krylov`):
//!
//! - [`Device`]: every operation a solver runs on one rank's vectors and matrix block,
//!   named and fused, with one meaning on every device: [`Cpu`] (rayon) and, with feature
//!   `cuda`, `cuda::CudaDevice` (NVRTC-compiled kernels through cudarc);
//! - [`DistCsr`] (a block of rows per rank, owned and ghost columns, halo or allgather
//!   SpMV), [`DistVec`], the matrix powers kernel [`MatrixPowers`] and the distributed
//!   Matrix Market reader [`read_matrix_market_dist`];
//! - [`SolverComm`], the counted communicator, and [`Ops`], the one layer a solver calls:
//!   it runs every device operation, every global reduction and every SpMV-input exchange,
//!   counting, metering and timing them;
//! - [`dense`]: the small dense algebra of the s-step methods and spectral estimates;
//! - [`LowerFactor`]: a triangular factor that a preconditioner hands the device layer;
//! - [`conformance`]: the device conformance kit, every operation of a [`Device`] against
//!   [`Cpu`] (`krylov gpu-check` runs it on the CUDA device).
//!
//! How one operation travels from a method to a kernel, and which files a new fused
//! operation touches: `src/device/PLUMBING.md`.
//!
//! ```
//! use castack_collectives::{AllreduceAlgo, Communicator, ThreadUniverse};
//! use castack_linalg::sparse::gen;
//! use castack_linalg::{Cpu, DistCsr, Ops, Partition, SpmvMode};
//!
//! // ||A x||^2 for the 2-D Poisson matrix on 3 thread ranks: one halo exchange, one
//! // counted reduction; against a serial row loop.
//! let a = gen::poisson2d(16)?;
//! let n = a.rows();
//! let xg: Vec<f64> = (0..n).map(|i| (i % 5) as f64 - 2.0).collect();
//! let mut want = 0.0;
//! for row in a.outer_iterator() {
//!     let yi: f64 = row.iter().map(|(j, v)| v * xg[j]).sum();
//!     want += yi * yi;
//! }
//! let part = Partition::rows(n, 3);
//! let got = ThreadUniverse::new(3)?.run(|comm| -> Result<_, castack_linalg::LinalgError> {
//!     let mut dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
//!     let (nl, ne) = (dist.n_local(), dist.n_ext());
//!     let mut ops = Ops::new(comm, AllreduceAlgo::default(), Cpu::sequential(), nl)?;
//!     ops.prepare(1)?;
//!     let mut x = ops.new_vec(nl, ne)?;
//!     x.local_mut().copy_from_slice(&xg[part.range(comm.rank())]);
//!     let mut y = ops.new_vec(nl, ne)?;
//!     dist.spmv(&mut ops, &mut x, &mut y)?;
//!     ops.dot(&y, &y, 0)?;
//!     let mut sum = [0.0];
//!     ops.reduce(&mut sum)?;
//!     Ok((sum[0], ops.counters()))
//! })?;
//! for r in got {
//!     let (sum, counters) = r?;
//!     assert!((sum - want).abs() <= 1e-12 * want);
//!     // Outside a solver's loop both count as set-up communication.
//!     assert_eq!((counters.setup_halo_exchanges, counters.setup_reductions), (1, 1));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod conformance;
pub mod count;
pub mod dense;
pub mod device;
pub mod dist;
mod error;
pub mod ops;
mod triangular;

/// Matrix Market I/O, generators, reordering, partitioning and input checks (crate
/// `castack-sparse`), re-exported so that an embedder uses the version this crate uses.
pub use castack_sparse as sparse;
use castack_sparse::{gen, io};

pub use castack_sparse::{BudgetError, MatrixError, MemBudget, Partition, PartitionKind};

/// Largest basis depth `k` of the matrix powers kernel, and so the largest block size / s
/// of castack-krylov's s-step methods, for a solve and for a plan's k list.
///
/// Why 20: an s-step basis of `k` vectors is numerically useful only while it stays well
/// conditioned, and even the Chebyshev and Newton bases lose that within a few dozen
/// columns (the monomial one from k ~ 6-8; cacg's adaptive s already runs on the leading
/// columns whose condition number is at most 1e6); beyond that a larger k only costs: the
/// per-step Gram work grows as k^2 (the (2k+1)^2 block reduced each outer step) to k^3 (its
/// factorisation), the bases hold (2k+1) vectors of n per rank, and the matrix powers
/// kernel's ghost zone grows with depth k. 20 keeps every useful k (the CA-CG studies use
/// k <= 16) and turns `--k 4294967296` or `--k 1000` into an error instead of an abort or
/// minutes of useless work.
pub const K_MAX: usize = 20;

pub use count::{Bucket, Counters, Pending, Phase, SolverComm, TimeBreakdown};
/// The CPU kernels' reduction chunk: every dot and norm sums chunks of this many entries in
/// a fixed order, so results are the same bits for any thread count.
pub use device::cpu::CHUNK as CPU_CHUNK;
/// The CUDA device (feature `cuda`): `CudaDevice`, its vectors and kernels, `device_count`.
#[cfg(feature = "cuda")]
pub use device::cuda;
pub use device::{
    residual_row_bound, work, BasisStep, CcgVecs, Concat, Cpu, CsrRef, Device, DeviceError,
    GramShape, HostCsr, PipecgVecs, Refs, RefsMut, VecList, VecListMut, CUDA_BUILT, PIPECG_SUMS,
    RESIDUAL_BOUND_EXTRA, UNIT_ROUNDOFF,
};
pub use dist::{
    read_matrix_market_dist, DistCsr, DistVec, LocalMatrix, LocalRows, MatrixPowers, SpmvMode,
};
pub use error::LinalgError;
pub use ops::Ops;
pub use triangular::LowerFactor;
