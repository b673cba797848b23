//! Errors of what this crate checks of a matrix and a permutation (the readers' own errors
//! are [`crate::io::MtxError`]; the generators', [`crate::gen::GenError`]).

use thiserror::Error;

/// A matrix that an SPD solver cannot take, or a permutation that is not one.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum MatrixError {
    /// The matrix is not square.
    #[error("matrix is {rows} x {cols}: CG needs a square (symmetric positive definite) matrix")]
    NotSquare {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// The matrix is not symmetric.
    #[error("matrix is not symmetric (entry ({row}, {col}) = {value:e} but ({col}, {row}) = {mirror:e}, 1-based): CG needs a symmetric positive definite matrix")]
    NotSymmetric {
        /// 1-based row.
        row: usize,
        /// 1-based column.
        col: usize,
        /// A(row, col).
        value: f64,
        /// A(col, row).
        mirror: f64,
    },
    /// A matrix with fewer stored entries than rows: an SPD matrix has a diagonal entry in
    /// every row.
    #[error("matrix declares {rows} rows but stores only {entries} entries: a symmetric positive definite matrix needs a diagonal entry in every row")]
    MissingDiagonals {
        /// Declared rows.
        rows: usize,
        /// Stored entries.
        entries: usize,
    },
    /// A matrix in CSC storage where CSR is needed.
    #[error("the global matrix must be in CSR storage")]
    NotCsr,
    /// A map that is not a bijection of `0..n`.
    #[error("invalid permutation: {0}")]
    InvalidPermutation(String),
}
