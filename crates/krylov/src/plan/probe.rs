//! Iterations from a short instrumented run at small scale: the real solver on the
//! `threads` backend with a few ranks, for CG and for each (method, k, basis) candidate,
//! on the same matrix and right-hand side. Basis degradation per k is measured, not
//! assumed: a candidate whose basis loses accuracy needs more CG-equivalent iterations (or
//! breaks down) in this run exactly as it would at scale (iterates depend on the rank count
//! only through rounding).
//!
//! Each run is capped at `max_eq_iters` CG-equivalent iterations. A run that converges
//! reports its CG-equivalent iterations. A capped run is extrapolated log-linearly from the
//! true relative residual it reached: `eq * ln(tol) / ln(relres)`, i.e. the average
//! convergence rate so far held to the tolerance. Jacobi-CG on heterogeneous Poisson drops
//! fastest early, so this errs LOW: on the 64^3 heterogeneous matrix to 1e-12 a cap of 600
//! predicts 1296 CG iterations where the full run takes 1482 (-12.5%). Every candidate is
//! extrapolated alike, so rankings suffer less than totals; raise the cap when it matters.
//! A run that does not reduce the residual (relres >= 1) or breaks down is infeasible.
//!
//! The matrix powers kernel gives bit-identical bases ([`crate::MatrixPowers`]), so one
//! run serves a candidate with and without MPK.

use castack_collectives::{Communicator, ThreadUniverse};
use sprs::CsMatView;

use crate::cg::Method;
use crate::config::{Basis, Precond, SolverConfig};
use crate::dist::{DistCsr, SpmvMode};
use crate::partition::Partition;
use crate::{Cpu, KrylovError, Solver, StopReason};

use super::PlanError;

/// Settings of the instrumented runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// Thread ranks of each run.
    pub ranks: usize,
    /// Relative tolerance on the true residual.
    pub tol: f64,
    /// Preconditioner.
    pub precond: Precond,
    /// Cap on CG-equivalent iterations per run.
    pub max_eq_iters: usize,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            ranks: 2,
            tol: 1e-12,
            precond: Precond::Jacobi,
            max_eq_iters: 20_000,
        }
    }
}

/// What one instrumented run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// CG-equivalent iterations to the tolerance (measured, or extrapolated when capped).
    pub eq_iters: f64,
    /// Whether the run converged within the cap (`eq_iters` is measured, not extrapolated).
    pub converged: bool,
    /// CG-equivalent iterations actually run.
    pub ran_eq_iters: usize,
    /// Outer iterations actually run.
    pub outer_iters: usize,
    /// Reductions in the loop (checks included).
    pub reductions: u64,
    /// Halo exchanges in the loop.
    pub halo_exchanges: u64,
    /// Setup reductions (norms, spectral estimate).
    pub setup_reductions: u64,
    /// Setup halo exchanges (one SpMV each).
    pub setup_halo_exchanges: u64,
}

/// Run `method` (with `k`, `basis`) on `a` x = `b` with the probe settings. `Ok(None)`: the
/// candidate is infeasible (breakdown, or no residual reduction).
///
/// # Errors
/// [`PlanError::Probe`] for failures other than a breakdown (bad matrix, communication).
pub fn probe(
    a: CsMatView<'_, f64>,
    b: &[f64],
    method: Method,
    k: usize,
    basis: Basis,
    opts: &ProbeOptions,
) -> Result<Option<Probe>, PlanError> {
    let n = a.rows();
    let ranks = opts.ranks.clamp(1, n.max(1));
    let part = Partition::rows(n, ranks);
    let cfg = SolverConfig {
        method,
        k,
        basis,
        tol: opts.tol,
        precond: opts.precond,
        max_iter: opts.max_eq_iters,
        ..SolverConfig::default()
    };
    let universe = ThreadUniverse::new(ranks).map_err(KrylovError::from)?;
    let outs = universe
        .run(|comm| -> Result<_, KrylovError> {
            let dist = DistCsr::from_global(comm, a, &part, SpmvMode::Halo)?;
            let range = part.range(comm.rank());
            let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
            Ok(solver.solve(&b[range], None)?.report)
        })
        .map_err(KrylovError::from)?;
    let mut report = None;
    for out in outs {
        match out {
            Ok(r) => {
                report.get_or_insert(r);
            }
            // A right-hand side whose norm is not finite.
            Err(KrylovError::Breakdown { .. }) => return Ok(None),
            Err(e) => return Err(PlanError::Probe(e)),
        }
    }
    let r = report.ok_or_else(|| PlanError::Probe(KrylovError::InvalidConfig("no rank".into())))?;
    // A method that breaks down on the matrix is infeasible, whatever it got to.
    if r.stop_reason == StopReason::Breakdown {
        return Ok(None);
    }
    let ran = r.equivalent_iterations;
    let eq_iters = if r.converged {
        ran as f64
    } else if r.relres_true > 0.0 && r.relres_true < 1.0 && ran > 0 {
        ran as f64 * opts.tol.ln() / r.relres_true.ln()
    } else {
        return Ok(None);
    };
    Ok(Some(Probe {
        eq_iters,
        converged: r.converged,
        ran_eq_iters: ran,
        outer_iters: r.iterations,
        reductions: r.reductions,
        halo_exchanges: r.halo_exchanges,
        setup_reductions: r.setup_reductions,
        setup_halo_exchanges: r.setup_halo_exchanges,
    }))
}
