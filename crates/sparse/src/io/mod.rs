//! Reading and writing matrices and vectors.
//!
//! The Matrix Market reader here is our own small streaming parser, not
//! `sprs::io::read_matrix_market`: sprs panics, hangs or aborts on malformed
//! files and its errors carry no line numbers (see `shared/STACK.md`, "sprs
//! Matrix Market reader"). sprs is still used for the sparse structures.
//!
//! Architecture Invariant: nothing in this module panics on file contents,
//! and no allocation is sized by a count the file declares before that count
//! has been validated: the size line is checked against the input's size and a
//! memory budget (`ReadLimits`) first, and capacity is reserved up to a small
//! cap and grows as entries actually arrive.

mod mtx;
pub mod range;

pub use mtx::{
    read_matrix_market, read_matrix_market_path, read_matrix_market_path_within,
    read_matrix_market_with, read_mtx, read_mtx_path, read_mtx_path_within, read_mtx_with,
    read_vector, read_vector_part_path_within, read_vector_path, read_vector_path_within,
    read_vector_with, write_array, write_coordinate_symmetric_lower, DenseMatrix, Field, MtxData,
    MtxError, MtxMatrix, ReadLimits, Symmetry, MAX_LINE_BYTES, MIN_ENTRY_BYTES,
};
