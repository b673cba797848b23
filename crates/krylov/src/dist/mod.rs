//! Distributed matrices and vectors over a row partition.

mod csr;
mod vec;

pub use csr::{DistCsr, SpmvMode};
pub use vec::DistVec;
