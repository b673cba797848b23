//! Errors of the linear-algebra layer.

use thiserror::Error;

/// What can go wrong building or applying a distributed matrix, vector or device
/// operation. `castack-krylov` takes each variant into its own `LinalgError` one to one
/// (same message), so a solver's caller sees one error type.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LinalgError {
    /// A communication failure.
    #[error(transparent)]
    Comm(#[from] castack_collectives::CommError),
    /// A neighbour-exchange failure.
    #[error(transparent)]
    Neighbor(#[from] castack_neighbor::NeighborError),
    /// A matrix that the layer cannot take (not square, out-of-range columns, ...).
    #[error(transparent)]
    Matrix(#[from] castack_sparse::MatrixError),
    /// The matrix is too large for 32-bit column indices.
    #[error("matrix with {n} columns exceeds the 32-bit column index range")]
    TooLarge {
        /// Number of columns.
        n: usize,
    },
    /// A compute-device failure (no driver, no GPU, a kernel or copy that failed).
    #[error(transparent)]
    Device(#[from] crate::device::error::DeviceError),
    /// An argument outside what the operation accepts (a partition that does not match the
    /// communicator, a malformed block of rows, a depth outside `1..=K_MAX`); the same
    /// message on every rank.
    #[error("invalid solver setting: {0}")]
    InvalidConfig(String),
    /// An input file that does not read: the reader's one-line message (`file:line: ...`).
    /// A distributed read returns the same one on every rank: the first error in file order.
    #[error("{message}")]
    Input {
        /// The reader's message.
        message: String,
        /// Whether the declared sizes are over the memory budget (rather than the file
        /// being malformed).
        over_budget: bool,
    },
}
