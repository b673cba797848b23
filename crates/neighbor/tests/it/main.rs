//! Integration tests of castack-neighbor, one module per area, in one test binary: each test
//! binary links and instantiates the generic code anew, so one binary per crate keeps the
//! test build (CI's longest step) short. Run one area with
//! `cargo test -p castack-neighbor --test it AREA::`.

mod exchange;
mod grid;
mod segmented;
mod sim_model;
mod stencil;
