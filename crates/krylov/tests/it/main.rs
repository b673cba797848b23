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
mod monitor;
mod mpk;
mod operator;
mod precond;
mod precond_block;
mod precond_cacg;
mod precond_ccg_pipecg;
mod sim_solve;
mod sstep;
