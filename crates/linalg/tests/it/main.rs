//! Integration tests of castack-linalg, one module per area, in one test binary (each test
//! binary links and instantiates the generic code anew). Run one area with
//! `cargo test -p castack-linalg --test it AREA::`.

mod conformance;
mod dist_read;
