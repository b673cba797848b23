//! # castack-sparse
//!
//! Sparse matrices without the solvers: what a Rust HPC code needs to get a symmetric
//! positive definite matrix in, ordered and split, on top of [`sprs`]. It knows no
//! communicator (castack-krylov's distributed read runs [`io::range`] on every rank and
//! agrees on the result) and depends on no castack crate except `castack-base` (the memory
//! budget every input-sized allocation is checked against).
//!
//! - [`io`]: a safe streaming Matrix Market reader, of a whole file (`.gz` too) or of one
//!   line-aligned byte range of it, with line-numbered errors and a memory budget, and a
//!   writer.
//! - [`gen`]: 2-D and 3-D Poisson test matrices, homogeneous and with seeded random
//!   conductivity (`krylov gen`).
//! - [`reorder`]: reverse Cuthill-McKee and symmetric permutations.
//! - [`partition`]: contiguous row blocks by rows or by stored entries.
//! - [`check`]: what an SPD solver needs of a matrix (square, symmetric, a diagonal entry
//!   per row), checked before anything is allocated by its size.
//!
//! ```
//! use castack_sparse::{check, gen, io, reorder, Partition};
//!
//! // Generate, write and read back a 3-D Poisson matrix.
//! let a = gen::poisson3d(6)?;
//! let mut text = Vec::new();
//! io::write_coordinate_symmetric_lower(&mut text, &a)?;
//! let m = io::read_matrix_market(&text[..], "p6.mtx")?;
//! check::check_spd_storage(&m)?;
//! let b = m.to_csr_full()?;
//! assert_eq!(b, a);
//! check::check_symmetric(b.view())?;
//!
//! // Reorder, then split the rows over 4 ranks by stored entries.
//! let perm = reorder::rcm(b.view());
//! let c = reorder::permute_symmetric(b.view(), &perm);
//! assert_eq!(c.nnz(), a.nnz());
//! let part = Partition::nnz(c.indptr().raw_storage(), 4);
//! assert_eq!(part.ranks(), 4);
//! assert_eq!(part.n(), 216);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod check;
mod error;
pub mod gen;
pub mod io;
pub mod partition;
pub mod reorder;

pub use castack_base::{BudgetError, MemBudget};
pub use error::MatrixError;
pub use partition::{Partition, PartitionKind};
pub use reorder::{Permutation, Reorder};
