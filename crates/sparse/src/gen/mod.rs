//! Test-matrix generators (`krylov gen`).
//!
//! * [`poisson2d`]: 5-point Laplacian on an `n x n` grid, Dirichlet.
//! * [`poisson3d`]: 7-point Laplacian on an `n x n x n` grid, Dirichlet.
//! * [`poisson3d_heterogeneous`]: 7-point finite-volume diffusion with random
//!   two-valued conductivity, harmonic-mean face coefficients.
//!
//! All are symmetric positive definite, in natural (lexicographic) ordering
//! with `x` fastest, built directly as CSR with sorted column indices.
//! Randomness comes only from [`SplitMix64`], a generator fixed in this crate,
//! so a seed gives the same matrix forever.

mod poisson;
mod rng;

pub use poisson::{
    poisson2d, poisson3d, poisson3d_heterogeneous, GenError, DEFAULT_CONTRAST, DEFAULT_SEED,
    HIGH_PROBABILITY,
};
pub use rng::SplitMix64;
