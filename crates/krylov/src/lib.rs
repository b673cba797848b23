//! # castack-krylov
//!
//! Distributed sparse linear algebra and the CG family for castack communicators:
//! [`DistCsr`] (a block of rows per rank, owned and ghost columns, halo or allgather SpMV),
//! [`DistVec`], symmetric Jacobi scaling, and solvers that report exactly what they
//! communicated ([`SolveReport`]). Solvers are written once, generic over the
//! [`castack_collectives::Communicator`] and the compute [`Device`] ([`Cpu`] with rayon;
//! an NVIDIA GPU with feature `cuda`), and run unchanged on every backend and device:
//! [`Ops`], the one layer they call, runs the named device operations and every counted
//! reduction and exchange.
//!
//! Matrix Market I/O, test-matrix generators, reordering and partitioning live in
//! `castack-sparse`, re-exported here as [`sparse`].
//!
//! ```
//! use castack_collectives::ThreadUniverse;
//! use castack_krylov::sparse::gen;
//! use castack_krylov::{Cpu, DistCsr, Partition, Solver, SolverConfig, SpmvMode};
//!
//! let a = gen::poisson2d(16)?;
//! let n = a.rows();
//! let part = Partition::rows(n, 3);
//! let reports = ThreadUniverse::new(3)?.run(|comm| -> Result<_, castack_krylov::KrylovError> {
//!     let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
//!     let b = vec![1.0; dist.n_local()];
//!     let mut solver = Solver::new(comm, dist, SolverConfig::default(), Cpu::sequential())?;
//!     Ok(solver.solve(&b, None)?.report)
//! })?;
//! for r in reports {
//!     let r = r?;
//!     assert!(r.converged && r.relres_true <= 1e-8);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod basis;
mod breakdown;
mod cg;
mod check;
mod config;
#[cfg(all(test, feature = "cuda"))]
mod cuda_tests;
mod eig;
mod error;
mod method;
mod operator;
mod precond;
mod report;
mod ritz;
mod solver;

/// Matrix Market I/O, generators, reordering, partitioning and input checks (crate
/// `castack-sparse`), re-exported so that an embedder uses the version this crate uses.
pub use castack_sparse as sparse;

/// The memory budget every input-sized allocation is checked against (`castack-base`'s).
pub use castack_sparse::{BudgetError, MemBudget};

/// The version of the solvers' arithmetic: bumped by every change that alters the bits of
/// any solve (an operation reordered, a kernel fused differently, a new default). Results
/// kept across runs (the planner's `castack_plan::probe::ProbeStore`) are keyed by it; the test
/// `numerics_version_pins_the_bits` (every method, preconditioner and basis at two k on a
/// small matrix) fails when their bits change and it was not bumped.
pub const NUMERICS_VERSION: u32 = 2;
pub use basis::{Chebyshev, Newton, SStepBasis};
/// The linear-algebra layer (crate `castack-linalg`): devices, distributed matrices and
/// vectors, the counted communicator and [`Ops`], re-exported so that an embedder uses the
/// version this crate uses; its main items are re-exported below by name.
pub use castack_linalg as linalg;
/// The CUDA device (feature `cuda`): `CudaDevice`, its vectors and kernels, `device_count`.
#[cfg(feature = "cuda")]
pub use castack_linalg::cuda;
pub use castack_linalg::{
    read_matrix_market_dist, work, BasisStep, Bucket, CcgVecs, Concat, Counters, Cpu, CsrRef,
    Device, DeviceError, DistCsr, DistVec, GramShape, HostCsr, LinalgError, LocalMatrix, LocalRows,
    MatrixPowers, Ops, Pending, Phase, PipecgVecs, Refs, RefsMut, SolverComm, SpmvMode,
    TimeBreakdown, CPU_CHUNK, CUDA_BUILT, K_MAX, PIPECG_SUMS,
};
pub use castack_sparse::{MatrixError, Partition, PartitionKind, Permutation, Reorder};
pub use check::{check_solve_budget, solve_memory_bytes};
pub use config::{
    Basis, InvalidSetting, Precond, SolverConfig, DEPTH, DEPTH_MAX, PRECOND_DEGREE,
    PRECOND_DEGREE_MAX,
};
pub use eig::{cg_lanczos, pcg_lanczos, power_lmax, ritz_values, SpectralEstimate};
pub use error::KrylovError;
pub use method::Method;
pub use operator::{LinearOperator, Operator};
pub use precond::Preconditioner;
pub use report::{Breakdown, SolveReport, StopReason, SCHEMA_VERSION as REPORT_SCHEMA_VERSION};
pub use ritz::Eigs;
pub use solver::{Solution, Solver};
