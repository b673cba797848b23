//! Distributed matrices and vectors over a row partition.

mod csr;
mod mpk;
mod vec;

pub use csr::{DistCsr, SpmvMode};
pub use mpk::MatrixPowers;
pub use vec::DistVec;
