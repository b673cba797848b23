//! Integration tests of castack-krylov, one module per area, in one test binary: each test
//! binary links and instantiates the generic code anew, so one binary per crate keeps the
//! test build (CI's longest step) short. Run one area with
//! `cargo test -p castack-krylov --test it AREA::`.

mod assembly;
mod attainable;
mod cacg;
mod ccg_pipecg;
mod cg_solve;
mod exchange;
mod family;
mod floor;
mod monitor;
mod mpk;
mod operator;
mod plcg;
mod prcg_groppcg;
mod precond;
mod precond_block;
mod precond_cacg;
mod precond_ccg_pipecg;
mod sim_solve;
mod sstep;

/// Whether a solve reached its tolerance: converged (certified for the returned x), or
/// stopped `stagnated` at a check whose computed true residual met the tolerance while the
/// bound on its rounding error kept it from being certified: a tolerance within the
/// rounding floor of the residual's own evaluation (`cg/mod.rs`, *Certified
/// convergence*; issue 47, item 5), where a claim of convergence would rest on rounding.
pub(crate) fn at_tolerance(rep: &castack_krylov::SolveReport) -> bool {
    rep.converged
        || (rep.stop_reason == castack_krylov::StopReason::Stagnated && rep.relres_true <= rep.tol)
}
