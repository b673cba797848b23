//! Integration tests of castack-fabric-sim, one module per area, in one test binary: each test
//! binary links and instantiates the generic code anew, so one binary per crate keeps the
//! test build (CI's longest step) short. Run one area with
//! `cargo test -p castack-fabric-sim --test it AREA::`.

mod budget;
mod caches;
mod calibration;
mod common;
mod concurrent;
mod device_and_two_sided;
mod engine_bits;
mod intra_node;
mod local_work;
mod model;
mod presets_cpu;
mod reference;
mod software;
mod work_limit;
