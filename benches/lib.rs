//! Shared helpers for castack's criterion benches.
