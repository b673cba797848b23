//! Distributed matrices and vectors over a row partition.

mod csr;
mod mpk;
mod read;
mod stage;
mod vec;

pub use csr::{DistCsr, LocalRows, SpmvMode};
pub use mpk::MatrixPowers;
pub use read::{read_matrix_market_dist, LocalMatrix};
pub use vec::DistVec;

/// The global matrix as a rank's block (of [`DistCsr`] or [`MatrixPowers`]) is built from
/// it: its order, this rank's rows and the CSR arrays (the pointers as stored).
struct GlobalRows<'a> {
    n: usize,
    range: std::ops::Range<usize>,
    indptr: &'a [usize],
    cols: &'a [usize],
    vals: &'a [f64],
}

/// The global matrix `a` after [`check_global`], with this rank's rows of `part`.
fn global_rows<'a, C: castack_collectives::Communicator + ?Sized>(
    comm: &C,
    a: sprs::CsMatView<'a, f64>,
    part: &crate::Partition,
) -> Result<GlobalRows<'a>, crate::LinalgError> {
    let n = check_global(comm, a, part)?;
    let (indptr, cols, vals) = a.into_raw_storage();
    Ok(GlobalRows {
        n,
        range: part.range(comm.rank()),
        indptr,
        cols,
        vals,
    })
}

/// Check what building a rank's block from the global matrix needs: square, CSR, and a
/// partition of its rows over exactly this communicator's ranks. Returns the order `n`.
fn check_global<C: castack_collectives::Communicator + ?Sized>(
    comm: &C,
    a: sprs::CsMatView<'_, f64>,
    part: &crate::Partition,
) -> Result<usize, crate::LinalgError> {
    let (rows, cols) = a.shape();
    if rows != cols {
        return Err(castack_sparse::MatrixError::NotSquare { rows, cols }.into());
    }
    if part.n() != rows || part.ranks() != comm.size() {
        return Err(crate::LinalgError::InvalidConfig(format!(
            "partition of {} rows over {} ranks does not fit a {rows}-row matrix on {} ranks",
            part.n(),
            part.ranks(),
            comm.size()
        )));
    }
    if !a.is_csr() {
        return Err(crate::LinalgError::InvalidConfig(
            "the global matrix must be in CSR storage".into(),
        ));
    }
    Ok(rows)
}
