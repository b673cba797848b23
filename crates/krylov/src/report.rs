//! The solve report: everything a paper plots about one solve.

use serde::{Deserialize, Serialize};

use castack_linalg::count::TimeBreakdown;

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
    /// The true residual stopped decreasing above the tolerance: three true-residual
    /// checks in a row, each after the recurrence claimed convergence, found none below
    /// the least before them (a solution below the double range, or the method's
    /// attainable accuracy above the tolerance); or a check whose computed true residual
    /// met the tolerance while the bound on its rounding error alone did not (the
    /// tolerance is below what double precision certifies for this x: a claim of
    /// convergence is made only when the computed residual plus that bound meets it); or a
    /// breakdown of the recurrences after their residual had fallen far below the true one,
    /// or after such a check (the attainable accuracy reached: what is left of the residual
    /// is rounding). `x` is the last iterate, `relres_true` its
    /// true residual; more iterations would repeat the same replacement until `max_iter`.
    Stagnated,
    /// The method broke down (a non-positive curvature or Gram matrix, a NaN or Inf among
    /// its reduced values): the report's [`SolveReport::breakdown`] says where, `x` is the
    /// last iterate and `relres_true` its true residual.
    Breakdown,
}

/// Where and how a solve broke down ([`StopReason::Breakdown`]). Every rank detects a
/// breakdown on the same globally reduced (bit-identical) values, so every rank's report
/// holds the same one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// The quantity that broke down, e.g. `p^T A p`, `Q^T A Q (Cholesky pivot)`,
    /// `p^T A p (spectral estimate)` (the s-step methods' warm-up CG steps).
    pub quantity: String,
    /// Its value. JSON has no NaN or infinity: a non-finite value is written as `null`
    /// (and read back as NaN); the error line of `krylov solve` names it exactly.
    #[serde(deserialize_with = "f64_or_nan")]
    pub value: f64,
    /// The method's (outer) iteration at which it broke down; for a breakdown in the
    /// spectral estimate, the warm-up step.
    pub iteration: usize,
}

/// An `f64` that JSON may hold as `null` (how `serde_json` writes NaN and infinities):
/// `null` reads as NaN.
fn f64_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
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
    /// Pipeline depth `l` (`plcg`), else `None`.
    #[serde(default)]
    pub depth: Option<usize>,
    /// Matrix powers kernel used.
    pub mpk: bool,
    /// Preconditioner (`user`: an embedder's, [`crate::Solver::set_preconditioner`]).
    pub precond: String,
    /// Degree of the Chebyshev preconditioner, else `None`.
    #[serde(default)]
    pub precond_degree: Option<usize>,
    /// The diagonal shift `alpha` the IC(0) factorization of `bjacobi_ic0` needed (the
    /// blocks factored are those of `Â + alpha I`; 0: none needed), else `None`.
    #[serde(default)]
    pub precond_shift: Option<f64>,
    /// Applications of the preconditioner `M^-1` in the solve (setup and loop; 0 for
    /// `none` and `jacobi`, which only scale).
    #[serde(default)]
    pub precond_applies: u64,
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
    /// With [`StopReason::Breakdown`]: what broke down, where; `None` (JSON `null`)
    /// otherwise.
    #[serde(default)]
    pub breakdown: Option<Breakdown>,
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
    /// plcg: the square-root or pivot breakdowns of its pipeline, each followed by a
    /// true-residual check and, unless that ends the solve, a restart (one of
    /// `residual_replacements`), else `None`.
    #[serde(default)]
    pub pipeline_breakdowns: Option<u64>,
    /// Redundant flops of the matrix powers kernel (0 otherwise).
    pub redundant_flops: u64,
    /// Relative residual from the recurrence, in the original system's norm. After a
    /// breakdown: the last one the method recorded (for cg far from the target, the
    /// certified lower bound it monitors), or `relres_true` when it recorded none. A
    /// non-finite value is JSON `null` (read back as NaN).
    #[serde(deserialize_with = "f64_or_nan")]
    pub relres_recurrence: f64,
    /// True relative residual `||b - A x|| / ||b||` of the original system as computed
    /// (after a breakdown: of the last iterate, recomputed; JSON `null` when not finite).
    /// With `converged`, the exact residual of the returned x is certified to meet the
    /// tolerance; near the rounding floor this computed value may differ from it by up to
    /// the bound on its rounding error.
    #[serde(deserialize_with = "f64_or_nan")]
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
    /// backend; see [`castack_linalg::count`]); `setup_s` is measured either way.
    pub modeled: bool,
    /// With `modeled`: the SLOWEST rank's modeled solve time (`time_s` is rank 0's), the
    /// figure `krylov plan` predicts; set by the caller that holds every rank's report
    /// (`krylov solve --backend sim`), `None` (JSON: `null`) otherwise.
    #[serde(default)]
    pub modeled_max_time_s: Option<f64>,
    /// Relative recurrence residual per iteration (with `history`): one entry per
    /// iteration of cg, ccg, pipecg and cacg (its inner iterates), one per outer step
    /// (block of k) of cbcg and cbcgr.
    pub history: Option<Vec<f64>>,
    /// Ritz-value estimates of the extreme eigenvalues and the condition number of the
    /// operator iterated on (`S A S` with Jacobi scaling, `A` without) from the solve's CG
    /// coefficients, with `eigs` ([`crate::ritz`]); `None` (JSON `null`) when not asked or
    /// when no CG step was taken.
    #[serde(default)]
    pub eigs: Option<crate::ritz::Eigs>,
}

impl SolveReport {
    /// The solve's breakdown as the typed error
    /// [`KrylovError::Breakdown`](crate::KrylovError::Breakdown), for callers that treat
    /// it as one (`let x = sol.report.breakdown_error().map_or(Ok(sol.x), Err)?`); `None`
    /// when the solve did not break down.
    pub fn breakdown_error(&self) -> Option<crate::KrylovError> {
        let b = self.breakdown.as_ref()?;
        Some(crate::KrylovError::Breakdown {
            method: self.method.clone().into(),
            iteration: b.iteration,
            quantity: b.quantity.clone().into(),
            value: b.value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_finite_breakdown_value_is_json_null_and_reads_back_as_nan() {
        let b = Breakdown {
            quantity: "r^T r".into(),
            value: f64::NAN,
            iteration: 3,
        };
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, r#"{"quantity":"r^T r","value":null,"iteration":3}"#);
        let back: Breakdown = serde_json::from_str(&json).unwrap();
        assert!(back.value.is_nan());
        assert_eq!((back.quantity.as_str(), back.iteration), ("r^T r", 3));
        let inf = Breakdown {
            value: f64::NEG_INFINITY,
            ..b
        };
        assert!(serde_json::to_string(&inf)
            .unwrap()
            .contains("\"value\":null"));
        assert_eq!(
            serde_json::to_string(&StopReason::Breakdown).unwrap(),
            "\"breakdown\""
        );
    }
}
