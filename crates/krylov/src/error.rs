//! Errors of the solver crate.

use std::borrow::Cow;

use thiserror::Error;

/// What can go wrong building a distributed matrix or solving.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum KrylovError {
    /// A communication failure.
    #[error(transparent)]
    Comm(#[from] castack_collectives::CommError),
    /// A neighbour-exchange failure.
    #[error(transparent)]
    Neighbor(#[from] castack_neighbor::NeighborError),
    /// A matrix that an SPD solver cannot take: not square, not symmetric, or missing
    /// diagonal entries ([`castack_sparse::check`]).
    #[error(transparent)]
    Matrix(#[from] castack_sparse::MatrixError),
    /// A diagonal entry that Jacobi scaling cannot use.
    #[error("diagonal entry of row {row} (1-based) is {value:e}: Jacobi scaling needs a positive diagonal (the matrix is not SPD)")]
    BadDiagonal {
        /// 1-based row.
        row: usize,
        /// The diagonal value (0 when absent).
        value: f64,
    },
    /// Vector length does not match the matrix.
    #[error("{what} has {got} entries, the matrix has {expected} rows")]
    LengthMismatch {
        /// Which vector.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// The matrix is too large for 32-bit column indices.
    #[error("matrix with {n} columns exceeds the 32-bit column index range")]
    TooLarge {
        /// Number of columns.
        n: usize,
    },
    /// A numerical breakdown. [`crate::Solver::solve`] returns it as an error only where
    /// no iterate exists (a non-finite `||b||`); a breakdown inside a method's iteration
    /// ends the solve with a report ([`crate::StopReason::Breakdown`], the last iterate),
    /// from which [`crate::SolveReport::breakdown_error`] gives this value back.
    #[error("{method} broke down at iteration {iteration}: {quantity} = {value:e}")]
    Breakdown {
        /// The method name.
        method: Cow<'static, str>,
        /// The (outer) iteration.
        iteration: usize,
        /// The quantity that broke down, e.g. `p^T A p`.
        quantity: Cow<'static, str>,
        /// Its value.
        value: f64,
    },
    /// A compute-device failure (no driver, no GPU, a kernel or copy that failed).
    #[error(transparent)]
    Device(#[from] castack_linalg::device::DeviceError),
    /// A solve that would need more memory than the budget allows.
    #[error(transparent)]
    OverBudget(castack_collectives::fabric_sim::BudgetError),
    /// An invalid solver setting.
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

/// The linear-algebra layer's errors, each as the variant of the same name and message.
impl From<castack_linalg::LinalgError> for KrylovError {
    fn from(e: castack_linalg::LinalgError) -> Self {
        use castack_linalg::LinalgError as L;
        match e {
            L::Comm(e) => Self::Comm(e),
            L::Neighbor(e) => Self::Neighbor(e),
            L::Matrix(e) => Self::Matrix(e),
            L::TooLarge { n } => Self::TooLarge { n },
            L::Device(e) => Self::Device(e),
            L::InvalidConfig(m) => Self::InvalidConfig(m),
            L::Input {
                message,
                over_budget,
            } => Self::Input {
                message,
                over_budget,
            },
            // `LinalgError` is exhaustive on purpose: a new variant is a compile error
            // here, to be given its own variant above.
        }
    }
}
