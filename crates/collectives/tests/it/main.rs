//! Integration tests of castack-collectives, one module per area, in one test binary: each test
//! binary links and instantiates the generic code anew, so one binary per crate keeps the
//! test build (CI's longest step) short. Run one area with
//! `cargo test -p castack-collectives --test it AREA::`.

mod common;
mod mapping;
mod nonblocking;
mod registry;
mod scale;
mod sim;
mod sim_overlap;
mod sweep;
mod threads_smoke;
