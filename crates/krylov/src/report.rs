//! The solve report: everything a paper plots about one solve.

use serde::{Deserialize, Serialize};

use crate::count::TimeBreakdown;

/// Version of the report's JSON shape.
pub const SCHEMA_VERSION: u32 = 1;

/// Why the iteration stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The true residual met the tolerance.
    Converged,
    /// `max_iter` CG-equivalent iterations were reached.
    MaxIterations,
    /// The right-hand side is zero: x = 0 is exact.
    ZeroRhs,
}

/// One solve, as reported by `krylov solve --json` (field meanings: the project's CLI
/// contract). Fields that do not apply are `None` (JSON `null`), never absent. Library
/// solves fill the solver fields; the command line fills the run fields (`backend`,
/// `threads`, `setup_s`, `error_vs_ones`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SolveReport {
    /// Report shape version.
    pub schema_version: u32,
    /// Method name.
    pub method: String,
    /// Block size / s (s-step methods), else `None`.
    pub k: Option<usize>,
    /// Basis (s-step methods), else `None`.
    pub basis: Option<String>,
    /// Matrix powers kernel used.
    pub mpk: bool,
    /// Preconditioner.
    pub precond: String,
    /// Reordering applied before partitioning.
    pub reorder: String,
    /// Backend (`threads`, `mpi`, `sim`).
    pub backend: String,
    /// Fabric preset (sim only).
    pub fabric: Option<String>,
    /// Device (`cpu`, `cuda`).
    pub device: String,
    /// SpMV input mode (`halo`, `allgather`).
    pub spmv: String,
    /// Allreduce algorithm.
    pub allreduce: String,
    /// Row partition (`rows`, `nnz`).
    pub partition: String,
    /// Number of ranks.
    pub ranks: usize,
    /// Worker threads for local kernels.
    pub threads: usize,
    /// Matrix rows.
    pub n: usize,
    /// Stored entries (both triangles).
    pub nnz: usize,
    /// Relative tolerance.
    pub tol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Iteration cap (CG-equivalent).
    pub max_iter: usize,
    /// True residual met the tolerance.
    pub converged: bool,
    /// Why the iteration stopped.
    pub stop_reason: StopReason,
    /// Outer iterations.
    pub iterations: usize,
    /// CG-equivalent iterations.
    pub equivalent_iterations: usize,
    /// Global reductions issued in the loop (final checks included).
    pub reductions: u64,
    /// Global reductions issued before the loop.
    pub setup_reductions: u64,
    /// SpMV-input exchanges in the loop.
    pub halo_exchanges: u64,
    /// SpMV-input exchanges before the loop (scaling, initial residual).
    pub setup_halo_exchanges: u64,
    /// Residual replacements.
    pub residual_replacements: u64,
    /// Redundant flops of the matrix powers kernel (0 otherwise).
    pub redundant_flops: u64,
    /// Relative residual from the recurrence, in the original system's norm.
    pub relres_recurrence: f64,
    /// True relative residual `||b - A x|| / ||b||` of the original system.
    pub relres_true: f64,
    /// `max |x_i - 1|` when the exact solution is all ones, else `None`.
    pub error_vs_ones: Option<f64>,
    /// Seconds for reading, partitioning and setup.
    pub setup_s: f64,
    /// Seconds of the solve.
    pub time_s: f64,
    /// Split of `time_s`.
    pub time_breakdown: TimeBreakdown,
    /// `time_s` and `time_breakdown` come from the simulator's modeled clock (the `sim`
    /// backend; see [`crate::count`]); `setup_s` is measured either way.
    pub modeled: bool,
    /// With `modeled`: the SLOWEST rank's modeled solve time (`time_s` is rank 0's), the
    /// figure `krylov plan` predicts; set by the caller that holds every rank's report
    /// (`krylov solve --backend sim`), `None` (JSON: `null`) otherwise.
    #[serde(default)]
    pub modeled_max_time_s: Option<f64>,
    /// Relative recurrence residual per CG-equivalent iteration (with `history`).
    pub history: Option<Vec<f64>>,
    /// Ritz-value estimates of the extreme eigenvalues and the condition number of the
    /// operator iterated on (`S A S` with Jacobi scaling, `A` without) from the solve's CG
    /// coefficients, with `eigs` ([`crate::ritz`]); `None` (JSON `null`) when not asked or
    /// when no CG step was taken.
    #[serde(default)]
    pub eigs: Option<crate::ritz::Eigs>,
}
