//! Integration tests of castack-plan, one module per area, in one test binary (one binary
//! per crate keeps the test build short). Run one area with
//! `cargo test -p castack-plan --test it AREA::`.

mod plan;
mod plan_vs_sim;
mod probe;
