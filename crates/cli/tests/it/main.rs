//! Integration tests of the `krylov` command (the binary driven end to end), one module per area, in one test binary: each test
//! binary links and instantiates the generic code anew, so one binary per crate keeps the
//! test build (CI's longest step) short. Run one area with
//! `cargo test -p castack-cli --test it AREA::`.

mod bench;
mod bench_neighbor;
mod breakdown;
mod calibrate;
mod cli;
mod common;
mod exchange;
mod flags;
mod limits;
mod monitor;
mod mpi_unavailable;
mod numerics;
mod plan;
mod plots;
mod precond;
mod range;
mod reorder;
mod sim;
mod sim_solve;
mod writers;
