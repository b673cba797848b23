//! Matrix Market (`.mtx`, `.mtx.gz`) reader and writers.
//!
//! Supported on input:
//!
//! * `%%MatrixMarket matrix coordinate real|integer|pattern general|symmetric`
//!   (a sparse matrix, [`MtxMatrix`]);
//! * `%%MatrixMarket matrix array real|integer general` (a dense column-major
//!   matrix, [`DenseMatrix`], used for right-hand sides and initial guesses).
//!
//! Banner keywords are case-insensitive (as the format specifies), `%` comment
//! lines and blank lines are skipped anywhere after the banner, indices are
//! 1-based in the file and 0-based in memory, `\r\n` line endings are
//! accepted, and real values may use a Fortran `D` exponent (`1.0D+00`).
//! Non-UTF-8 bytes are tolerated in comments (old files carry Latin-1 names).
//!
//! Checked: the banner; the size line's field count and numbers; every entry's
//! field count, indices (`1..=M`, `1..=N`) and value (numeric, finite; an
//! integer for `integer` files); symmetric files are square and store the
//! lower triangle only; the number of entries equals the declared one. Every
//! error is an [`MtxError`] whose one-line `Display` starts with
//! `source:line:`, e.g. `p.mtx:17: expected 3 fields (row col value), found 2`.
//! Checked when the matrix is assembled ([`MtxMatrix::to_csr_full`]): duplicate
//! entries, each finite, whose sum in file order is not (`2 1 1e308` twice) are
//! an [`MtxError::NonFiniteSum`] naming the source, the position and the values
//! but no line: the stored entries keep no line numbers (an entry's index gives
//! its line only where no comment or blank line comes between entries).
//!
//! Memory: at most [`MAX_LINE_BYTES`] per line. Before anything is stored, the
//! size line is checked against the input and a memory budget ([`ReadLimits`]):
//! the declared entries must fit the input's byte size where it is known (an
//! entry line takes at least [`MIN_ENTRY_BYTES`] bytes, 4 for a pattern file, an
//! array value 2), and what the declared sizes make the reader and
//! [`MtxMatrix::to_csr_full`] allocate (the triplets, then the row pointer of M
//! rows and the expanded entries) must fit the budget, so a 60-byte file
//! declaring 3e9 rows is an [`MtxError::OverBudget`] at its size line, not a
//! 24 GB row pointer. The reader checks only what holds for every matrix;
//! what a solver needs of it (a diagonal entry in every row of an SPD matrix)
//! is `crate::check`'s. Entry storage is still reserved up to a small cap and
//! grows as entries arrive, and the CSR conversion allocates with
//! `try_reserve`, reporting a matrix too large for memory as an error.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::ops::Range;
use std::path::Path;

use castack_base::{BudgetError, MemBudget};
use flate2::read::MultiGzDecoder;
use sprs::CsMat;

/// Longest accepted line in bytes (excluding the line terminator); longer
/// lines are an [`MtxError::LineTooLong`].
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Most entries reserved up front from a declared count; beyond this, storage
/// grows only as entries actually arrive.
const RESERVE_CAP: usize = 1 << 16;

/// Fewest bytes of a coordinate entry line with a value (`1 1 1` and its line
/// end); a pattern entry (`1 1`) takes 4, an array value (`1`) 2.
pub const MIN_ENTRY_BYTES: u64 = 6;

/// What a read may allocate: the declared sizes are checked against these
/// before anything is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Budget for what the declared sizes make the reader and
    /// [`MtxMatrix::to_csr_full`] allocate.
    pub budget: MemBudget,
    /// The input's size in bytes, when known (an uncompressed file): the
    /// declared entries must fit in it.
    pub input_bytes: Option<u64>,
}

impl ReadLimits {
    /// Within `budget`, the input's size unknown.
    pub fn new(budget: MemBudget) -> Self {
        Self {
            budget,
            input_bytes: None,
        }
    }

    /// No budget and no input size: only the file's own consistency and
    /// 64-bit overflow are checked.
    pub fn unlimited() -> Self {
        Self::new(MemBudget::unlimited())
    }

    /// The same limits for an input of `bytes` bytes.
    pub fn with_input_bytes(self, bytes: u64) -> Self {
        Self {
            input_bytes: Some(bytes),
            ..self
        }
    }
}

impl Default for ReadLimits {
    /// [`MemBudget::system_default`], the input's size unknown.
    fn default() -> Self {
        Self::new(MemBudget::system_default())
    }
}

/// The value field of a Matrix Market file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Floating-point values.
    Real,
    /// Integer values (stored as `f64`).
    Integer,
    /// No values: every stored entry is `1.0`.
    Pattern,
}

/// The symmetry (storage scheme) of a Matrix Market coordinate file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Symmetry {
    /// Every entry is stored.
    General,
    /// Square and symmetric: only the lower triangle (row >= col) is stored.
    Symmetric,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Coordinate,
    Array,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Header {
    pub(super) format: Format,
    pub(super) field: Field,
    pub(super) symmetry: Symmetry,
}

/// Error reading a Matrix Market file.
///
/// Every variant names the source (file name or the name the caller passed)
/// and, where a line is involved, its 1-based line number; `Display` is one
/// line of the form `source:line: message`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MtxError {
    /// Opening, reading or decompressing the input failed.
    #[error("{}: {error}", location(.source_name, *.line))]
    Io {
        /// The file or source name.
        source_name: String,
        /// The line being read when the error happened (`None` when opening).
        line: Option<usize>,
        /// The underlying I/O error.
        error: io::Error,
    },
    /// The `%%MatrixMarket` banner is missing, malformed or unsupported.
    #[error("{source_name}:{line}: {message}")]
    Header {
        /// The file or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The size line is missing or malformed.
    #[error("{source_name}:{line}: {message}")]
    SizeLine {
        /// The file or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An entry line is malformed (fields, indices, value, triangle).
    #[error("{source_name}:{line}: {message}")]
    Entry {
        /// The file or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The input ended before the declared number of entries.
    #[error("{source_name}:{line}: file ends after {found} of {declared} declared entries")]
    TooFewEntries {
        /// The file or source name.
        source_name: String,
        /// 1-based number of the last line read.
        line: usize,
        /// Entries declared in the size line.
        declared: u64,
        /// Entries actually read.
        found: u64,
    },
    /// An entry follows the declared number of entries.
    #[error("{source_name}:{line}: more entries than the {declared} declared in the size line")]
    TooManyEntries {
        /// The file or source name.
        source_name: String,
        /// 1-based line number of the first surplus entry.
        line: usize,
        /// Entries declared in the size line.
        declared: u64,
    },
    /// A line is longer than [`MAX_LINE_BYTES`].
    #[error("{source_name}:{line}: line longer than {max} bytes", max = MAX_LINE_BYTES)]
    LineTooLong {
        /// The file or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
    },
    /// The file is valid but not the kind asked for (e.g. an array where a
    /// sparse matrix is expected, or a matrix where a vector is expected).
    #[error("{source_name}: {message}")]
    Kind {
        /// The file or source name.
        source_name: String,
        /// What was expected and found.
        message: String,
    },
    /// The declared sizes would need more memory than the budget allows
    /// (checked at the size line, before anything is stored).
    #[error("{source_name}:{line}: {error}")]
    OverBudget {
        /// The file or source name.
        source_name: String,
        /// 1-based line number of the size line.
        line: usize,
        /// What was asked and the budget.
        error: BudgetError,
    },
    /// Duplicate entries of one position, each finite, sum (in file order, as
    /// [`MtxMatrix::to_csr_full`] sums them) to a value that is not: the partial sum
    /// overflows to `inf` or `-inf`. Found when the matrix is assembled, which keeps no
    /// line numbers, so the error names the position instead: the first such position in
    /// row-major order (of the stored lower triangle, for symmetric storage).
    #[error(
        "{source_name}: duplicate entries at ({row}, {col}) sum to {sum}: the {} of them in file order adds {value:e} to {before:e}",
        ordinal(*.nth)
    )]
    NonFiniteSum {
        /// The file or source name.
        source_name: String,
        /// 1-based row of the position, as in the file.
        row: usize,
        /// 1-based column of the position, as in the file.
        col: usize,
        /// 1-based rank, in file order among the position's entries, of the entry whose
        /// addition made the sum non-finite (at least 2).
        nth: usize,
        /// The (finite) sum of the position's entries before it.
        before: f64,
        /// Its (finite) value.
        value: f64,
        /// `before + value`: not finite.
        sum: f64,
    },
    /// The matrix is valid but its CSR form does not fit in memory.
    #[error("{source_name}: matrix too large: {message}")]
    TooLarge {
        /// The file or source name.
        source_name: String,
        /// What could not be allocated.
        message: String,
    },
}

/// `n` as an English ordinal: `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`, ...
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn location(source_name: &str, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("{source_name}:{line}"),
        None => source_name.to_owned(),
    }
}

impl MtxError {
    /// The file or source name the error refers to.
    pub fn source_name(&self) -> &str {
        match self {
            Self::Io { source_name, .. }
            | Self::Header { source_name, .. }
            | Self::SizeLine { source_name, .. }
            | Self::Entry { source_name, .. }
            | Self::TooFewEntries { source_name, .. }
            | Self::TooManyEntries { source_name, .. }
            | Self::LineTooLong { source_name, .. }
            | Self::Kind { source_name, .. }
            | Self::OverBudget { source_name, .. }
            | Self::NonFiniteSum { source_name, .. }
            | Self::TooLarge { source_name, .. } => source_name,
        }
    }

    /// The 1-based line number the error refers to, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Io { line, .. } => *line,
            Self::Header { line, .. }
            | Self::SizeLine { line, .. }
            | Self::Entry { line, .. }
            | Self::TooFewEntries { line, .. }
            | Self::TooManyEntries { line, .. }
            | Self::LineTooLong { line, .. }
            | Self::OverBudget { line, .. } => Some(*line),
            Self::Kind { .. } | Self::NonFiniteSum { .. } | Self::TooLarge { .. } => None,
        }
    }

    /// The same error with its line number moved on by `offset` lines (an error found in
    /// a part of the file whose first line is `offset + 1`).
    pub(super) fn after_lines(mut self, offset: usize) -> Self {
        match &mut self {
            Self::Io { line, .. } => {
                if let Some(line) = line {
                    *line += offset;
                }
            }
            Self::Header { line, .. }
            | Self::SizeLine { line, .. }
            | Self::Entry { line, .. }
            | Self::TooFewEntries { line, .. }
            | Self::TooManyEntries { line, .. }
            | Self::LineTooLong { line, .. }
            | Self::OverBudget { line, .. } => *line += offset,
            Self::Kind { .. } | Self::NonFiniteSum { .. } | Self::TooLarge { .. } => {}
        }
        self
    }
}

/// A sparse matrix read from a Matrix Market `coordinate` file, as stored in
/// the file: triplets with 0-based indices, in file order, duplicates kept,
/// and for [`Symmetry::Symmetric`] only the lower triangle.
///
/// Invariant (upheld by the reader, the only constructor): every row index is
/// `< nrows`, every column index `< ncols`, values are finite, and symmetric
/// matrices are square with `col <= row` for every entry.
#[derive(Debug, Clone, PartialEq)]
pub struct MtxMatrix {
    source_name: String,
    nrows: usize,
    ncols: usize,
    symmetry: Symmetry,
    field: Field,
    row: Vec<usize>,
    col: Vec<usize>,
    val: Vec<f64>,
}

impl MtxMatrix {
    /// The source name the matrix was read from.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// Number of rows (M).
    pub fn nrows(&self) -> usize {
        self.nrows
    }

    /// Number of columns (N).
    pub fn ncols(&self) -> usize {
        self.ncols
    }

    /// The storage symmetry declared in the banner.
    pub fn symmetry(&self) -> Symmetry {
        self.symmetry
    }

    /// The value field declared in the banner.
    pub fn field(&self) -> Field {
        self.field
    }

    /// Number of stored entries (as in the file: one triangle for symmetric
    /// storage, duplicates counted separately).
    pub fn nnz_stored(&self) -> usize {
        self.val.len()
    }

    /// 0-based row index of each stored entry.
    pub fn rows(&self) -> &[usize] {
        &self.row
    }

    /// 0-based column index of each stored entry.
    pub fn cols(&self) -> &[usize] {
        &self.col
    }

    /// Value of each stored entry (`1.0` for pattern files).
    pub fn values(&self) -> &[f64] {
        &self.val
    }

    /// The full matrix in CSR form: symmetric storage is expanded to both
    /// triangles, duplicate entries are summed (in file order), and column
    /// indices are sorted within each row. Explicit zeros are kept.
    ///
    /// # Errors
    ///
    /// [`MtxError::TooLarge`] when the row pointer or entry arrays cannot be
    /// allocated (a file can declare a huge `M` with few entries). What this
    /// allocates was checked against the reader's budget ([`ReadLimits`]) at the
    /// size line, so under any finite budget it stays within it.
    ///
    /// [`MtxError::NonFiniteSum`] when the duplicates of a position, each finite,
    /// sum to `inf` or `-inf` (`2 1 1e308` twice): the first such position in
    /// row-major order (of the lower triangle for symmetric storage), see
    /// [`assemble_row`].
    pub fn to_csr_full(&self) -> Result<CsMat<f64>, MtxError> {
        let too_large = |what: &str, count: usize| MtxError::TooLarge {
            source_name: self.source_name.clone(),
            message: format!("cannot allocate {what} of {count} elements"),
        };
        let n = self.nrows;
        let symmetric = self.symmetry == Symmetry::Symmetric;

        let ptr_len = n
            .checked_add(1)
            .ok_or_else(|| too_large("the row pointer", n))?;
        let mut indptr: Vec<usize> = Vec::new();
        indptr
            .try_reserve_exact(ptr_len)
            .map_err(|_| too_large("the row pointer", ptr_len))?;
        indptr.resize(ptr_len, 0);
        for (&r, &c) in self.row.iter().zip(&self.col) {
            indptr[r + 1] += 1;
            if symmetric && r != c {
                indptr[c + 1] += 1;
            }
        }
        for i in 0..n {
            indptr[i + 1] += indptr[i];
        }
        let total = indptr[n];

        // Scatter (col, val) pairs into row buckets; indptr[i] is the cursor
        // of row i and ends as the start of row i + 1.
        let mut pairs: Vec<(usize, f64)> = Vec::new();
        pairs
            .try_reserve_exact(total)
            .map_err(|_| too_large("the entries", total))?;
        pairs.resize(total, (0, 0.0));
        for ((&r, &c), &v) in self.row.iter().zip(&self.col).zip(&self.val) {
            pairs[indptr[r]] = (c, v);
            indptr[r] += 1;
            if symmetric && r != c {
                pairs[indptr[c]] = (r, v);
                indptr[c] += 1;
            }
        }
        for i in (1..=n).rev() {
            indptr[i] = indptr[i - 1];
        }
        indptr[0] = 0;

        let mut indices: Vec<usize> = Vec::new();
        let mut data: Vec<f64> = Vec::new();
        indices
            .try_reserve_exact(total)
            .map_err(|_| too_large("the column indices", total))?;
        data.try_reserve_exact(total)
            .map_err(|_| too_large("the values", total))?;
        let mut start = 0;
        for i in 0..n {
            let end = indptr[i + 1];
            assemble_row(
                &self.source_name,
                (i, self.symmetry),
                &mut pairs[start..end],
                (&mut indices, &mut data),
            )?;
            indptr[i + 1] = indices.len();
            start = end;
        }
        // The structure is valid by construction (sorted, in-range, unique
        // column indices), so `new`'s check cannot fail on any input.
        Ok(CsMat::new((self.nrows, self.ncols), indptr, indices, data))
    }
}

/// Append row `row` (0-based) of an assembled matrix to `cols` and `vals`, from its
/// `(column, value)` pairs in file order (symmetric storage's mirrors included): the pairs
/// are sorted by column, stably, and each column's duplicates summed in file order. This is
/// how [`MtxMatrix::to_csr_full`] builds each row, and how a distributed read (castack-linalg)
/// builds its rows the same, bit for bit and error for error.
///
/// # Errors
///
/// [`MtxError::NonFiniteSum`], named `source_name`, for the first column of the row whose
/// duplicates' running sum stops being finite; `cols` and `vals` are then left part-filled.
/// In [`Symmetry::Symmetric`] storage only the columns up to the diagonal are checked: a
/// column past it holds the mirrors of the stored entries of a later row, whose sum is the
/// same, so that row reports it, under the position the file has.
pub fn assemble_row(
    source_name: &str,
    (row, symmetry): (usize, Symmetry),
    pairs: &mut [(usize, f64)],
    (cols, vals): (&mut Vec<usize>, &mut Vec<f64>),
) -> Result<(), MtxError> {
    // Stable, so duplicates are summed in file order.
    pairs.sort_by_key(|&(c, _)| c);
    let start = cols.len();
    // The running sum's entries so far, for the error.
    let mut nth = 0usize;
    for &(c, v) in pairs.iter() {
        let dup = cols.len() > start && cols.last() == Some(&c);
        match vals.last_mut().filter(|_| dup) {
            Some(last) => {
                let before = *last;
                *last += v;
                nth += 1;
                if !last.is_finite() && (symmetry == Symmetry::General || c <= row) {
                    return Err(MtxError::NonFiniteSum {
                        source_name: source_name.to_owned(),
                        row: row + 1,
                        col: c + 1,
                        nth,
                        before,
                        value: v,
                        sum: *last,
                    });
                }
            }
            None => {
                cols.push(c);
                vals.push(v);
                nth = 1;
            }
        }
    }
    Ok(())
}

/// A dense matrix read from a Matrix Market `array` file, column-major.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseMatrix {
    nrows: usize,
    ncols: usize,
    values: Vec<f64>,
}

impl DenseMatrix {
    /// Number of rows (M).
    pub fn nrows(&self) -> usize {
        self.nrows
    }

    /// Number of columns (N).
    pub fn ncols(&self) -> usize {
        self.ncols
    }

    /// The `M * N` values in column-major order.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The values in column-major order, by value.
    pub fn into_values(self) -> Vec<f64> {
        self.values
    }
}

/// What a Matrix Market file holds.
#[derive(Debug, Clone, PartialEq)]
pub enum MtxData {
    /// A `coordinate` (sparse) matrix.
    Coordinate(MtxMatrix),
    /// An `array` (dense) matrix.
    Array(DenseMatrix),
}

/// Reads lines with a length cap, counting them (1-based).
pub(super) struct Lines<R> {
    inner: R,
    buf: Vec<u8>,
    line: usize,
    /// Bytes read so far (terminators included).
    bytes: u64,
}

impl<R: BufRead> Lines<R> {
    pub(super) fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            line: 0,
            bytes: 0,
        }
    }

    /// Bytes read so far, line terminators included: where the next line starts.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Lines read so far.
    pub(super) fn count(&self) -> usize {
        self.line
    }

    /// The next line without its terminator, with its number; `None` at end.
    pub(super) fn next_line(
        &mut self,
        source_name: &str,
    ) -> Result<Option<(usize, Cow<'_, str>)>, MtxError> {
        self.buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut self.inner)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|error| MtxError::Io {
                source_name: source_name.to_owned(),
                line: Some(self.line + 1),
                error,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        self.bytes += n as u64;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if n as u64 >= limit {
            return Err(MtxError::LineTooLong {
                source_name: source_name.to_owned(),
                line: self.line,
            });
        }
        Ok(Some((self.line, String::from_utf8_lossy(&self.buf))))
    }

    /// Number of the last line read (at least 1, for messages about the end).
    pub(super) fn last_line(&self) -> usize {
        self.line.max(1)
    }
}

pub(super) fn is_skippable(text: &str) -> bool {
    let t = text.trim_start();
    t.is_empty() || t.starts_with('%')
}

pub(super) fn header_err(source_name: &str, line: usize, message: String) -> MtxError {
    MtxError::Header {
        source_name: source_name.to_owned(),
        line,
        message,
    }
}

pub(super) fn size_err(source_name: &str, line: usize, message: String) -> MtxError {
    MtxError::SizeLine {
        source_name: source_name.to_owned(),
        line,
        message,
    }
}

pub(super) fn entry_err(source_name: &str, line: usize, message: String) -> MtxError {
    MtxError::Entry {
        source_name: source_name.to_owned(),
        line,
        message,
    }
}

/// Quotes a token for an error message: control characters escaped and long
/// tokens shortened, so the message stays one short printable line.
fn shown(tok: &str) -> String {
    const MAX: usize = 40;
    let head: String = tok.chars().take(MAX).collect();
    let more = if tok.chars().nth(MAX).is_some() {
        "..."
    } else {
        ""
    };
    format!("'{}{more}'", head.escape_debug())
}

pub(super) fn parse_banner(text: &str, source_name: &str, line: usize) -> Result<Header, MtxError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut toks = text.split_whitespace();
    let first = toks.next().unwrap_or("");
    if !first.eq_ignore_ascii_case("%%MatrixMarket") {
        return Err(header_err(
            source_name,
            line,
            "missing %%MatrixMarket banner on the first line".to_owned(),
        ));
    }
    let rest: Vec<&str> = toks.by_ref().take(5).collect();
    if rest.len() != 4 {
        return Err(header_err(
            source_name,
            line,
            format!(
                "banner needs 4 keywords (matrix FORMAT FIELD SYMMETRY), found {}",
                rest.len()
            ),
        ));
    }
    let lower: Vec<String> = rest.iter().map(|t| t.to_ascii_lowercase()).collect();
    if lower[0] != "matrix" {
        return Err(header_err(
            source_name,
            line,
            format!("unsupported object {} (expected matrix)", shown(rest[0])),
        ));
    }
    let format = match lower[1].as_str() {
        "coordinate" => Format::Coordinate,
        "array" => Format::Array,
        _ => {
            return Err(header_err(
                source_name,
                line,
                format!(
                    "unsupported format {} (expected coordinate or array)",
                    shown(rest[1])
                ),
            ))
        }
    };
    let field = match lower[2].as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" => Field::Pattern,
        _ => {
            return Err(header_err(
                source_name,
                line,
                format!(
                    "unsupported field {} (expected real, integer or pattern)",
                    shown(rest[2])
                ),
            ))
        }
    };
    let symmetry = match lower[3].as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        _ => {
            return Err(header_err(
                source_name,
                line,
                format!(
                    "unsupported symmetry {} (expected general or symmetric)",
                    shown(rest[3])
                ),
            ))
        }
    };
    if format == Format::Array && field == Field::Pattern {
        return Err(header_err(
            source_name,
            line,
            "array format cannot have a pattern field".to_owned(),
        ));
    }
    if format == Format::Array && symmetry == Symmetry::Symmetric {
        return Err(header_err(
            source_name,
            line,
            "array symmetric is not supported (use array general)".to_owned(),
        ));
    }
    Ok(Header {
        format,
        field,
        symmetry,
    })
}

/// Splits into at most `N` tokens, returning them with the total token count.
fn fields<const N: usize>(text: &str) -> ([&str; N], usize) {
    let mut out = [""; N];
    let mut count = 0usize;
    for tok in text.split_whitespace() {
        if let Some(slot) = out.get_mut(count) {
            *slot = tok;
        }
        count += 1;
    }
    (out, count)
}

fn parse_real(tok: &str) -> Option<f64> {
    tok.parse::<f64>().ok().or_else(|| {
        // Fortran-style exponent, e.g. 1.0D+00.
        if tok.contains(['d', 'D']) {
            tok.replace(['d', 'D'], "e").parse::<f64>().ok()
        } else {
            None
        }
    })
}

/// Parses a value token of the given field (not `Pattern`).
fn parse_value(tok: &str, field: Field) -> Result<f64, String> {
    let v = match field {
        Field::Integer => tok
            .parse::<i64>()
            .map(|i| i as f64)
            .map_err(|_| format!("invalid integer value {}", shown(tok)))?,
        Field::Real | Field::Pattern => {
            parse_real(tok).ok_or_else(|| format!("invalid value {}", shown(tok)))?
        }
    };
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("non-finite value {}", shown(tok)))
    }
}

/// Parses a 1-based index and checks it lies in `1..=bound`; returns it 0-based.
fn parse_index(tok: &str, what: &str, bound: usize) -> Result<usize, String> {
    let i: usize = tok
        .parse()
        .map_err(|_| format!("invalid {what} index {}", shown(tok)))?;
    if i == 0 || i > bound {
        return Err(format!("{what} index {i} out of range 1..={bound}"));
    }
    Ok(i - 1)
}

fn parse_dim(tok: &str, what: &str) -> Result<usize, String> {
    tok.parse()
        .map_err(|_| format!("invalid {what} {} in the size line", shown(tok)))
}

/// Reads a Matrix Market file (coordinate or array) from `reader`.
///
/// `source_name` (usually the file name) prefixes every error message.
///
/// # Errors
///
/// Any malformed, unsupported or truncated input, or a read error, as an
/// [`MtxError`] carrying `source_name` and the line number.
pub fn read_mtx<R: BufRead>(reader: R, source_name: &str) -> Result<MtxData, MtxError> {
    read_mtx_with(reader, source_name, ReadLimits::default())
}

/// [`read_mtx`] within `limits`: the size line is checked against the input's
/// size and the memory budget before anything is stored.
///
/// # Errors
///
/// As [`read_mtx`], plus [`MtxError::SizeLine`] when the declared entries
/// cannot fit in `limits.input_bytes` and [`MtxError::OverBudget`] when the
/// declared sizes would need more than `limits.budget`.
pub fn read_mtx_with<R: BufRead>(
    reader: R,
    source_name: &str,
    limits: ReadLimits,
) -> Result<MtxData, MtxError> {
    read_mtx_keeping(reader, source_name, limits, None)
}

/// [`read_mtx_with`], keeping of an array only the values whose (column-major) index lies
/// in `keep` (all of them when `None`); every line is still read and checked.
fn read_mtx_keeping<R: BufRead>(
    reader: R,
    source_name: &str,
    limits: ReadLimits,
    keep: Option<&Range<usize>>,
) -> Result<MtxData, MtxError> {
    let mut lines = Lines::new(reader);
    let header = match lines.next_line(source_name)? {
        Some((line, text)) => parse_banner(&text, source_name, line)?,
        None => {
            return Err(header_err(
                source_name,
                1,
                "empty file: missing %%MatrixMarket banner".to_owned(),
            ))
        }
    };

    let (size_line_no, size_line) = loop {
        match lines.next_line(source_name)? {
            Some((line, text)) => {
                if !is_skippable(&text) {
                    break (line, text.into_owned());
                }
            }
            None => {
                return Err(size_err(
                    source_name,
                    lines.last_line(),
                    "file ends before the size line".to_owned(),
                ))
            }
        }
    };

    match header.format {
        Format::Coordinate => {
            let size = (size_line_no, size_line.as_str());
            read_coordinate(&mut lines, source_name, header, size, limits).map(MtxData::Coordinate)
        }
        Format::Array => {
            let size = (size_line_no, size_line.as_str());
            read_array(&mut lines, source_name, header, size, (limits, keep)).map(MtxData::Array)
        }
    }
}

/// Checks declared sizes before anything is stored: `items` entry lines of at
/// least `min_line` bytes each must fit the input (the last line may lack its
/// terminator), and `bytes` (what reading and converting allocate; `None`:
/// it overflows 64 bits) must fit the budget.
fn check_declared(
    source_name: &str,
    line: usize,
    limits: ReadLimits,
    (items, min_line, noun): (u64, u64, &str),
    (what, bytes): (String, Option<u64>),
) -> Result<(), MtxError> {
    if let Some(input) = limits.input_bytes {
        let fits = input.saturating_add(1) / min_line;
        if items > fits {
            return Err(size_err(
                source_name,
                line,
                format!(
                    "size line declares {items} {noun} but the {input}-byte input holds at most {fits} (each takes at least {min_line} bytes)"
                ),
            ));
        }
    }
    limits
        .budget
        .check_opt(what, bytes)
        .map_err(|error| MtxError::OverBudget {
            source_name: source_name.to_owned(),
            line,
            error,
        })
}

/// Bytes that reading a coordinate file of `declared` entries and converting
/// it to CSR allocate: the triplets (row, column, value), then the row pointer
/// of `nrows + 1` and, per expanded entry (both triangles of symmetric
/// storage), the scatter pair and the column index and value.
pub(super) fn coordinate_bytes(nrows: usize, declared: u64, symmetric: bool) -> Option<u64> {
    let triplets = declared.checked_mul(8 + 8 + 8)?;
    let expanded = declared.checked_mul(if symmetric { 2 } else { 1 })?;
    let indptr = (nrows as u64).checked_add(1)?.checked_mul(8)?;
    triplets
        .checked_add(indptr)?
        .checked_add(expanded.checked_mul(16 + 8 + 8)?)
}

/// The sizes a coordinate file's size line declares.
#[derive(Debug, Clone, Copy)]
pub(super) struct Declared {
    pub(super) nrows: usize,
    pub(super) ncols: usize,
    pub(super) entries: u64,
}

/// Parse a coordinate file's size line and check it (square when symmetric, the entries
/// against the input's size) and `bytes` (what the reader will allocate, from the declared
/// sizes: `what` names it) against the budget.
pub(super) fn parse_coordinate_size(
    source_name: &str,
    header: Header,
    (size_line_no, size_line): (usize, &str),
    limits: ReadLimits,
    bytes: impl FnOnce(Declared) -> (String, Option<u64>),
) -> Result<Declared, MtxError> {
    let (toks, count) = fields::<3>(size_line);
    if count != 3 {
        return Err(size_err(
            source_name,
            size_line_no,
            format!("expected 3 fields (rows cols entries) in the size line, found {count}"),
        ));
    }
    let se = |m: String| size_err(source_name, size_line_no, m);
    let nrows = parse_dim(toks[0], "row count").map_err(se)?;
    let ncols = parse_dim(toks[1], "column count").map_err(se)?;
    let declared: u64 = toks[2].parse().map_err(|_| {
        se(format!(
            "invalid entry count {} in the size line",
            shown(toks[2])
        ))
    })?;
    if header.symmetry == Symmetry::Symmetric && nrows != ncols {
        return Err(se(format!(
            "symmetric matrix must be square, size line says {nrows} x {ncols}"
        )));
    }
    let min_line = if header.field == Field::Pattern {
        4
    } else {
        MIN_ENTRY_BYTES
    };
    let d = Declared {
        nrows,
        ncols,
        entries: declared,
    };
    check_declared(
        source_name,
        size_line_no,
        limits,
        (declared, min_line, "entries"),
        bytes(d),
    )?;
    Ok(d)
}

/// Parse one entry line (not skippable) of a coordinate file: its 0-based row, column and
/// value, or what is wrong with it.
pub(super) fn parse_entry(
    text: &str,
    header: Header,
    d: Declared,
) -> Result<(usize, usize, f64), String> {
    let pattern = header.field == Field::Pattern;
    let (toks, count) = fields::<3>(text);
    let want = if pattern { 2 } else { 3 };
    if count != want {
        let what = if pattern {
            "2 fields (row col)"
        } else {
            "3 fields (row col value)"
        };
        return Err(format!("expected {what}, found {count}"));
    }
    let r = parse_index(toks[0], "row", d.nrows)?;
    let c = parse_index(toks[1], "column", d.ncols)?;
    let v = if pattern {
        1.0
    } else {
        parse_value(toks[2], header.field)?
    };
    if header.symmetry == Symmetry::Symmetric && c > r {
        return Err(format!(
            "entry ({}, {}) is above the diagonal in symmetric storage",
            r + 1,
            c + 1
        ));
    }
    Ok((r, c, v))
}

fn read_coordinate<R: BufRead>(
    lines: &mut Lines<R>,
    source_name: &str,
    header: Header,
    size: (usize, &str),
    limits: ReadLimits,
) -> Result<MtxMatrix, MtxError> {
    let symmetric = header.symmetry == Symmetry::Symmetric;
    let d = parse_coordinate_size(source_name, header, size, limits, |d| {
        (
            format!(
                "a {} x {} matrix of {} entries",
                d.nrows, d.ncols, d.entries
            ),
            coordinate_bytes(d.nrows, d.entries, symmetric),
        )
    })?;
    let declared = d.entries;
    let cap = usize::try_from(declared)
        .unwrap_or(usize::MAX)
        .min(RESERVE_CAP);
    let mut row = Vec::with_capacity(cap);
    let mut col = Vec::with_capacity(cap);
    let mut val = Vec::with_capacity(cap);
    read_entries(lines, source_name, declared, |_, line, text| {
        let (r, c, v) =
            parse_entry(text, header, d).map_err(|m| entry_err(source_name, line, m))?;
        row.push(r);
        col.push(c);
        val.push(v);
        Ok(())
    })?;
    Ok(MtxMatrix {
        source_name: source_name.to_owned(),
        nrows: d.nrows,
        ncols: d.ncols,
        symmetry: header.symmetry,
        field: header.field,
        row,
        col,
        val,
    })
}

pub(super) fn read_array<R: BufRead>(
    lines: &mut Lines<R>,
    source_name: &str,
    header: Header,
    (size_line_no, size_line): (usize, &str),
    (limits, keep): (ReadLimits, Option<&Range<usize>>),
) -> Result<DenseMatrix, MtxError> {
    let (toks, count) = fields::<2>(size_line);
    if count != 2 {
        return Err(size_err(
            source_name,
            size_line_no,
            format!("expected 2 fields (rows cols) in the size line of an array, found {count}"),
        ));
    }
    let se = |m: String| size_err(source_name, size_line_no, m);
    let nrows = parse_dim(toks[0], "row count").map_err(se)?;
    let ncols = parse_dim(toks[1], "column count").map_err(se)?;
    let total = nrows
        .checked_mul(ncols)
        .ok_or_else(|| se(format!("array size {nrows} x {ncols} overflows")))?;
    let declared = total as u64;
    let kept = keep.map_or(total, |k| k.end.min(total).saturating_sub(k.start));
    let what = match keep.filter(|k| kept < total || k.start > 0) {
        Some(k) => format!("values {}..{} of a {nrows} x {ncols} array", k.start, k.end),
        None => format!("a {nrows} x {ncols} array"),
    };
    check_declared(
        source_name,
        size_line_no,
        limits,
        (declared, 2, "values"),
        (what, (kept as u64).checked_mul(8)),
    )?;

    let mut values = Vec::with_capacity(kept.min(RESERVE_CAP));
    read_entries(lines, source_name, declared, |seen, line, text| {
        let ee = |m: String| entry_err(source_name, line, m);
        let (toks, count) = fields::<1>(text);
        if count != 1 {
            return Err(ee(format!("expected 1 field (value), found {count}")));
        }
        let v = parse_value(toks[0], header.field).map_err(ee)?;
        if keep.is_none_or(|k| k.contains(&(seen as usize))) {
            values.push(v);
        }
        Ok(())
    })?;
    Ok(DenseMatrix {
        nrows,
        ncols,
        values,
    })
}

/// Read the `declared` entry lines that follow the size line (comment and blank lines
/// skipped), handing `entry` each one's 0-based index, line number and text, then check that
/// nothing but comment and blank lines follows: the loop coordinate and array files share.
fn read_entries<R: BufRead>(
    lines: &mut Lines<R>,
    source_name: &str,
    declared: u64,
    mut entry: impl FnMut(u64, usize, &str) -> Result<(), MtxError>,
) -> Result<(), MtxError> {
    let mut found: u64 = 0;
    while found < declared {
        let Some((line, text)) = lines.next_line(source_name)? else {
            return Err(MtxError::TooFewEntries {
                source_name: source_name.to_owned(),
                line: lines.last_line(),
                declared,
                found,
            });
        };
        if is_skippable(&text) {
            continue;
        }
        entry(found, line, &text)?;
        found += 1;
    }
    check_no_more(lines, source_name, declared)
}

fn check_no_more<R: BufRead>(
    lines: &mut Lines<R>,
    source_name: &str,
    declared: u64,
) -> Result<(), MtxError> {
    while let Some((line, text)) = lines.next_line(source_name)? {
        if !is_skippable(&text) {
            return Err(MtxError::TooManyEntries {
                source_name: source_name.to_owned(),
                line,
                declared,
            });
        }
    }
    Ok(())
}

/// Reads a sparse (`coordinate`) Matrix Market matrix from `reader`.
///
/// # Errors
///
/// As [`read_mtx`], plus [`MtxError::Kind`] for an `array` file.
pub fn read_matrix_market<R: BufRead>(reader: R, source_name: &str) -> Result<MtxMatrix, MtxError> {
    read_matrix_market_with(reader, source_name, ReadLimits::default())
}

/// [`read_matrix_market`] within `limits` (see [`read_mtx_with`]).
///
/// # Errors
///
/// As [`read_mtx_with`], plus [`MtxError::Kind`] for an `array` file.
pub fn read_matrix_market_with<R: BufRead>(
    reader: R,
    source_name: &str,
    limits: ReadLimits,
) -> Result<MtxMatrix, MtxError> {
    match read_mtx_with(reader, source_name, limits)? {
        MtxData::Coordinate(m) => Ok(m),
        MtxData::Array(d) => Err(MtxError::Kind {
            source_name: source_name.to_owned(),
            message: format!(
                "expected a coordinate (sparse) matrix, found a {} x {} array",
                d.nrows, d.ncols
            ),
        }),
    }
}

/// Reads a dense vector (an `array` file with one column or one row).
///
/// # Errors
///
/// As [`read_mtx`], plus [`MtxError::Kind`] for a coordinate file or an array
/// with more than one row and more than one column.
pub fn read_vector<R: BufRead>(reader: R, source_name: &str) -> Result<Vec<f64>, MtxError> {
    read_vector_with(reader, source_name, ReadLimits::default())
}

/// [`read_vector`] within `limits` (see [`read_mtx_with`]).
///
/// # Errors
///
/// As [`read_vector`], plus the size checks of [`read_mtx_with`].
pub fn read_vector_with<R: BufRead>(
    reader: R,
    source_name: &str,
    limits: ReadLimits,
) -> Result<Vec<f64>, MtxError> {
    match read_mtx_with(reader, source_name, limits)? {
        MtxData::Array(d) if d.nrows == 1 || d.ncols == 1 => Ok(d.values),
        MtxData::Array(d) => Err(MtxError::Kind {
            source_name: source_name.to_owned(),
            message: format!(
                "expected a vector (one column or one row), found a {} x {} array",
                d.nrows, d.ncols
            ),
        }),
        MtxData::Coordinate(_) => Err(MtxError::Kind {
            source_name: source_name.to_owned(),
            message: "expected an array (dense vector), found a coordinate matrix".to_owned(),
        }),
    }
}

pub(super) fn is_gz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("gz"))
}

/// Opens `path` (decompressing when its name ends in `.gz`) and reads it
/// within the default memory budget ([`MemBudget::system_default`]).
///
/// # Errors
///
/// As [`read_mtx_path_within`].
pub fn read_mtx_path(path: &Path) -> Result<MtxData, MtxError> {
    read_mtx_path_within(path, MemBudget::system_default())
}

/// Opens `path` (decompressing when its name ends in `.gz`) and reads it within
/// `budget`; an uncompressed file's declared entries must also fit its size.
///
/// # Errors
///
/// As [`read_mtx_with`]; errors are named by the path.
pub fn read_mtx_path_within(path: &Path, budget: MemBudget) -> Result<MtxData, MtxError> {
    let name = path.display().to_string();
    let (file, limits) = open_within(path, &name, budget)?;
    if is_gz(path) {
        read_mtx_with(BufReader::new(MultiGzDecoder::new(file)), &name, limits)
    } else {
        read_mtx_with(BufReader::new(file), &name, limits)
    }
}

/// Opens and reads a sparse (`coordinate`) matrix file, `.gz` transparently,
/// within the default memory budget.
///
/// # Errors
///
/// As [`read_matrix_market_path_within`].
pub fn read_matrix_market_path(path: &Path) -> Result<MtxMatrix, MtxError> {
    read_matrix_market_path_within(path, MemBudget::system_default())
}

/// Opens and reads a sparse (`coordinate`) matrix file, `.gz` transparently,
/// within `budget` (see [`read_mtx_path_within`]).
///
/// # Errors
///
/// As [`read_mtx_path_within`], plus [`MtxError::Kind`] for an `array` file.
pub fn read_matrix_market_path_within(
    path: &Path,
    budget: MemBudget,
) -> Result<MtxMatrix, MtxError> {
    let name = path.display().to_string();
    match read_mtx_path_within(path, budget)? {
        MtxData::Coordinate(m) => Ok(m),
        MtxData::Array(d) => Err(MtxError::Kind {
            source_name: name,
            message: format!(
                "expected a coordinate (sparse) matrix, found a {} x {} array",
                d.nrows, d.ncols
            ),
        }),
    }
}

/// Opens and reads a dense vector file (`array`, one column or one row),
/// `.gz` transparently, within the default memory budget.
///
/// # Errors
///
/// As [`read_vector_path_within`].
pub fn read_vector_path(path: &Path) -> Result<Vec<f64>, MtxError> {
    read_vector_path_within(path, MemBudget::system_default())
}

/// Opens and reads a dense vector file within `budget` (see
/// [`read_mtx_path_within`]).
///
/// # Errors
///
/// As [`read_mtx_path_within`], plus [`MtxError::Kind`] for a coordinate file
/// or an array with more than one row and more than one column.
pub fn read_vector_path_within(path: &Path, budget: MemBudget) -> Result<Vec<f64>, MtxError> {
    let name = path.display().to_string();
    match read_mtx_path_within(path, budget)? {
        MtxData::Array(d) if d.nrows == 1 || d.ncols == 1 => Ok(d.values),
        MtxData::Array(d) => Err(MtxError::Kind {
            source_name: name,
            message: format!(
                "expected a vector (one column or one row), found a {} x {} array",
                d.nrows, d.ncols
            ),
        }),
        MtxData::Coordinate(_) => Err(MtxError::Kind {
            source_name: name,
            message: "expected an array (dense vector), found a coordinate matrix".to_owned(),
        }),
    }
}

/// The values `keep` of a dense vector file (as [`read_vector_path_within`] reads it), and
/// the vector's length: every line is read and checked, only those values are stored, and
/// only they count against `budget`. A distributed read gives each rank its own rows of a
/// right-hand side this way; `keep` past the end is cut at the length (the caller checks
/// the length).
///
/// # Errors
///
/// As [`read_vector_path_within`].
pub fn read_vector_part_path_within(
    path: &Path,
    keep: Range<usize>,
    budget: MemBudget,
) -> Result<(usize, Vec<f64>), MtxError> {
    let name = path.display().to_string();
    let (file, limits) = open_within(path, &name, budget)?;
    let data = if is_gz(path) {
        read_mtx_keeping(
            BufReader::new(MultiGzDecoder::new(file)),
            &name,
            limits,
            Some(&keep),
        )
    } else {
        read_mtx_keeping(BufReader::new(file), &name, limits, Some(&keep))
    }?;
    match data {
        MtxData::Array(d) if d.nrows == 1 || d.ncols == 1 => Ok((d.nrows * d.ncols, d.values)),
        MtxData::Array(d) => Err(MtxError::Kind {
            source_name: name,
            message: format!(
                "expected a vector (one column or one row), found a {} x {} array",
                d.nrows, d.ncols
            ),
        }),
        MtxData::Coordinate(_) => Err(MtxError::Kind {
            source_name: name,
            message: "expected an array (dense vector), found a coordinate matrix".to_owned(),
        }),
    }
}

/// Open `path` and the limits a read of it runs under: `budget`, and for a regular
/// uncompressed file its size.
pub(super) fn open_within(
    path: &Path,
    name: &str,
    budget: MemBudget,
) -> Result<(File, ReadLimits), MtxError> {
    let io_err = |error| MtxError::Io {
        source_name: name.to_owned(),
        line: None,
        error,
    };
    let file = File::open(path).map_err(io_err)?;
    let limits = ReadLimits::new(budget);
    if is_gz(path) {
        // The compressed size bounds nothing useful: the budget does.
        return Ok((file, limits));
    }
    let meta = file.metadata().map_err(io_err)?;
    // A FIFO or device has no size to hold the entries against.
    Ok(if meta.is_file() {
        (file, limits.with_input_bytes(meta.len()))
    } else {
        (file, limits)
    })
}

fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Writes the lower triangle (row >= col) of the square matrix `a` as
/// `%%MatrixMarket matrix coordinate real symmetric`, 1-based, one comment
/// line, values in the shortest form that reads back to the same `f64`.
///
/// Entries above the diagonal are not written: the caller guarantees `a` is
/// symmetric. Output is buffered internally; the caller handles atomic
/// replacement of files.
///
/// # Errors
///
/// `InvalidInput` (before anything is written) when `a` is not square or a
/// lower-triangle value is not finite (the reader would reject the file);
/// otherwise any error from `w`.
pub fn write_coordinate_symmetric_lower<W: Write>(w: W, a: &CsMat<f64>) -> io::Result<()> {
    if a.rows() != a.cols() {
        return Err(invalid_input(format!(
            "symmetric storage needs a square matrix, got {} x {}",
            a.rows(),
            a.cols()
        )));
    }
    let mut lower = 0usize;
    for (&v, (r, c)) in a.iter() {
        if c <= r {
            if !v.is_finite() {
                return Err(invalid_input(format!(
                    "non-finite value {v} at ({}, {})",
                    r + 1,
                    c + 1
                )));
            }
            lower += 1;
        }
    }
    let mut w = BufWriter::new(w);
    writeln!(w, "%%MatrixMarket matrix coordinate real symmetric")?;
    writeln!(w, "% lower triangle, 1-based; written by castack-krylov")?;
    writeln!(w, "{} {} {}", a.rows(), a.cols(), lower)?;
    for (&v, (r, c)) in a.iter() {
        if c <= r {
            writeln!(w, "{} {} {:e}", r + 1, c + 1, v)?;
        }
    }
    w.flush()
}

/// Writes `x` as a column vector: `%%MatrixMarket matrix array real general`,
/// size line `n 1`, one value per line with 17 significant digits (exact
/// round trip).
///
/// # Errors
///
/// `InvalidInput` (before anything is written) when a value is not finite;
/// otherwise any error from `w`.
pub fn write_array<W: Write>(w: W, x: &[f64]) -> io::Result<()> {
    if let Some((i, v)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(invalid_input(format!(
            "non-finite value {v} at index {}",
            i + 1
        )));
    }
    let mut w = BufWriter::new(w);
    writeln!(w, "%%MatrixMarket matrix array real general")?;
    writeln!(w, "{} 1", x.len())?;
    for v in x {
        writeln!(w, "{v:.16e}")?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprs::TriMat;

    const NAME: &str = "p.mtx";

    fn read(text: &str) -> Result<MtxMatrix, MtxError> {
        read_matrix_market(text.as_bytes(), NAME)
    }

    /// Reads `text`, expects an error, checks its Display is one line that
    /// starts with `p.mtx:LINE:` and contains `needle`; returns the error.
    fn check_err(text: &str, line: Option<usize>, needle: &str) -> MtxError {
        let err = match read_mtx(text.as_bytes(), NAME) {
            Ok(data) => panic!("expected an error containing {needle:?}, got {data:?}"),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "multi-line message: {msg}");
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
        match line {
            Some(l) => {
                assert!(msg.starts_with(&format!("{NAME}:{l}: ")), "{msg:?}");
                assert_eq!(err.line(), Some(l));
            }
            None => assert!(msg.starts_with(&format!("{NAME}: ")), "{msg:?}"),
        }
        assert_eq!(err.source_name(), NAME);
        err
    }

    const GENERAL: &str = "%%MatrixMarket matrix coordinate real general\n\
                           % a comment\n\
                           3 4 4\n\
                           1 1 1.5\n\
                           3 4 -2e3\n\
                           2 1 7\n\
                           1 1 0.5\n";

    const SYMMETRIC: &str = "%%MatrixMarket matrix coordinate real symmetric\n\
                             3 3 4\n\
                             1 1 4\n\
                             2 1 -1\n\
                             2 2 4\n\
                             3 3 2\n";

    #[test]
    fn reads_general_real_coordinate() {
        let m = read(GENERAL).unwrap();
        assert_eq!((m.nrows(), m.ncols(), m.nnz_stored()), (3, 4, 4));
        assert_eq!(m.symmetry(), Symmetry::General);
        assert_eq!(m.field(), Field::Real);
        assert_eq!(m.rows(), &[0, 2, 1, 0]);
        assert_eq!(m.cols(), &[0, 3, 0, 0]);
        assert_eq!(m.values(), &[1.5, -2e3, 7.0, 0.5]);
        let a = m.to_csr_full().unwrap();
        assert_eq!(a.nnz(), 3, "duplicate (1,1) summed");
        assert_eq!(a.get(0, 0), Some(&2.0));
        assert_eq!(a.get(2, 3), Some(&-2e3));
        assert_eq!(a.get(1, 0), Some(&7.0));
    }

    #[test]
    fn reads_symmetric_and_expands_to_both_triangles() {
        let m = read(SYMMETRIC).unwrap();
        assert_eq!(m.symmetry(), Symmetry::Symmetric);
        let a = m.to_csr_full().unwrap();
        assert_eq!(a.nnz(), 5);
        assert_eq!(a.get(0, 1), Some(&-1.0));
        assert_eq!(a.get(1, 0), Some(&-1.0));
        assert_eq!(a.get(1, 1), Some(&4.0));
        assert_eq!(a.indptr().raw_storage(), &[0, 2, 4, 5]);
    }

    #[test]
    fn reads_pattern_and_integer_fields() {
        let p =
            read("%%MatrixMarket matrix coordinate pattern symmetric\n2 2 2\n1 1\n2 1\n").unwrap();
        assert_eq!(p.field(), Field::Pattern);
        assert_eq!(p.values(), &[1.0, 1.0]);
        let i = read("%%MatrixMarket matrix coordinate integer general\n2 2 1\n2 2 -7\n").unwrap();
        assert_eq!(i.field(), Field::Integer);
        assert_eq!(i.values(), &[-7.0]);
        check_err(
            "%%MatrixMarket matrix coordinate integer general\n2 2 1\n2 2 1.5\n",
            Some(3),
            "invalid integer value '1.5'",
        );
    }

    #[test]
    fn banner_is_case_insensitive_and_tolerates_crlf_bom_and_blank_lines() {
        let text = "\u{feff}%%matrixmarket MATRIX Coordinate REAL Symmetric\r\n\
                    %comment\r\n\r\n   \r\n\
                    2 2 2\r\n\
                    \r\n\
                    1 1 1.0D+00\r\n\
                    2 1 -2.5d-1\r\n\
                    % trailing comment\r\n\r\n";
        let m = read(text).unwrap();
        assert_eq!(m.values(), &[1.0, -0.25]);
        assert_eq!(m.rows(), &[0, 1]);
    }

    #[test]
    fn non_utf8_comment_is_tolerated() {
        let mut bytes = b"%%MatrixMarket matrix coordinate real general\n% Author: ".to_vec();
        bytes.extend_from_slice(&[0xe9, 0xff, b'\n']);
        bytes.extend_from_slice(b"1 1 1\n1 1 3\n");
        let m = read_matrix_market(&bytes[..], NAME).unwrap();
        assert_eq!(m.values(), &[3.0]);
    }

    #[test]
    fn empty_matrix_is_valid() {
        let m = read("%%MatrixMarket matrix coordinate real general\n0 0 0\n").unwrap();
        let a = m.to_csr_full().unwrap();
        assert_eq!((a.rows(), a.cols(), a.nnz()), (0, 0, 0));
    }

    #[test]
    fn reads_array_vector_row_and_column() {
        let col = "%%MatrixMarket matrix array real general\n% x0\n3 1\n1\n-2.5\n3e-300\n";
        assert_eq!(
            read_vector(col.as_bytes(), NAME).unwrap(),
            vec![1.0, -2.5, 3e-300]
        );
        let row = "%%MatrixMarket matrix array integer general\n1 2\n4\n5\n";
        assert_eq!(read_vector(row.as_bytes(), NAME).unwrap(), vec![4.0, 5.0]);
        let dense = "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n";
        match read_mtx(dense.as_bytes(), NAME).unwrap() {
            MtxData::Array(d) => {
                assert_eq!((d.nrows(), d.ncols()), (2, 2));
                assert_eq!(d.values(), &[1.0, 2.0, 3.0, 4.0]);
            }
            other => panic!("expected array, got {other:?}"),
        }
    }

    #[test]
    fn kind_mismatches_are_errors() {
        let dense = "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n";
        let e = read_vector(dense.as_bytes(), NAME).unwrap_err();
        assert!(e.to_string().contains("expected a vector"), "{e}");
        let e = read_matrix_market(dense.as_bytes(), NAME).unwrap_err();
        assert!(e.to_string().contains("expected a coordinate"), "{e}");
        let e = read_vector(GENERAL.as_bytes(), NAME).unwrap_err();
        assert!(e.to_string().starts_with("p.mtx: expected an array"), "{e}");
    }

    // ---- one test per bad-input class ----

    #[test]
    fn err_empty_file() {
        check_err("", Some(1), "empty file");
    }

    #[test]
    fn err_missing_banner() {
        check_err("3 3 1\n1 1 1\n", Some(1), "missing %%MatrixMarket banner");
        check_err(
            "% just a comment\n3 3 1\n1 1 1\n",
            Some(1),
            "missing %%MatrixMarket",
        );
    }

    #[test]
    fn err_wrong_banner() {
        let e = check_err(
            "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
            Some(1),
            "unsupported field 'complex'",
        );
        assert!(matches!(e, MtxError::Header { .. }));
        check_err(
            "%%MatrixMarket matrix coordinate real hermitian\n",
            Some(1),
            "unsupported symmetry 'hermitian'",
        );
        check_err(
            "%%MatrixMarket vector coordinate real general\n",
            Some(1),
            "unsupported object 'vector'",
        );
        check_err(
            "%%MatrixMarket matrix sparse real general\n",
            Some(1),
            "unsupported format 'sparse'",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real\n",
            Some(1),
            "banner needs 4 keywords",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real general extra\n",
            Some(1),
            "found 5",
        );
        check_err(
            "%%MatrixMarket matrix array pattern general\n",
            Some(1),
            "pattern",
        );
        check_err(
            "%%MatrixMarket matrix array real symmetric\n",
            Some(1),
            "array symmetric",
        );
    }

    #[test]
    fn err_header_only() {
        let e = check_err(
            "%%MatrixMarket matrix coordinate real general\n% comment\n\n",
            Some(3),
            "file ends before the size line",
        );
        assert!(matches!(e, MtxError::SizeLine { .. }));
        check_err(
            "%%MatrixMarket matrix coordinate real general",
            Some(1),
            "file ends before the size line",
        );
    }

    #[test]
    fn err_bad_size_line() {
        let banner = "%%MatrixMarket matrix coordinate real general\n";
        check_err(
            &format!("{banner}% c\n3 3\n"),
            Some(3),
            "expected 3 fields (rows cols entries)",
        );
        check_err(&format!("{banner}3 3 1 1\n"), Some(2), "found 4");
        check_err(
            &format!("{banner}3 x 1\n1 1 1\n"),
            Some(2),
            "invalid column count 'x'",
        );
        check_err(
            &format!("{banner}-3 3 1\n"),
            Some(2),
            "invalid row count '-3'",
        );
        check_err(
            &format!("{banner}3 3 1.5\n"),
            Some(2),
            "invalid entry count '1.5'",
        );
        check_err(
            &format!("{banner}99999999999999999999999 3 1\n"),
            Some(2),
            "invalid row count",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real symmetric\n3 4 0\n",
            Some(2),
            "must be square",
        );
        check_err(
            "%%MatrixMarket matrix array real general\n3\n",
            Some(2),
            "expected 2 fields (rows cols)",
        );
    }

    #[test]
    fn err_array_size_overflow() {
        let e = check_err(
            &format!(
                "%%MatrixMarket matrix array real general\n{} 3\n1\n",
                usize::MAX / 2
            ),
            Some(2),
            "overflows",
        );
        assert!(matches!(e, MtxError::SizeLine { .. }));
    }

    #[test]
    fn err_fewer_entries_than_declared() {
        let e = check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n2 2 1\n",
            Some(4),
            "file ends after 2 of 3 declared entries",
        );
        assert!(matches!(
            e,
            MtxError::TooFewEntries {
                declared: 3,
                found: 2,
                ..
            }
        ));
        check_err(
            "%%MatrixMarket matrix array real general\n3 1\n1\n",
            Some(3),
            "file ends after 1 of 3 declared entries",
        );
    }

    #[test]
    fn err_more_entries_than_declared() {
        let e = check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1\n% c\n2 2 1\n",
            Some(5),
            "more entries than the 1 declared",
        );
        assert!(matches!(e, MtxError::TooManyEntries { .. }));
        check_err(
            "%%MatrixMarket matrix array real general\n1 1\n1\n2\n",
            Some(4),
            "more entries than the 1 declared",
        );
    }

    #[test]
    fn err_index_zero() {
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1\n0 1 1\n",
            Some(4),
            "row index 0 out of range 1..=3",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 0 1\n",
            Some(3),
            "column index 0 out of range 1..=3",
        );
    }

    #[test]
    fn err_index_greater_than_dimension() {
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 4 1\n4 1 1\n",
            Some(3),
            "row index 4 out of range 1..=3",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 4 1\n1 5 1\n",
            Some(3),
            "column index 5 out of range 1..=4",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 4 1\n-1 1 1\n",
            Some(3),
            "invalid row index '-1'",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 4 1\n99999999999999999999999 1 1\n",
            Some(3),
            "invalid row index",
        );
    }

    #[test]
    fn err_non_numeric_value() {
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 abc\n",
            Some(3),
            "invalid value 'abc'",
        );
        check_err(
            "%%MatrixMarket matrix array real general\n2 1\n1\nx1\n",
            Some(4),
            "invalid value 'x1'",
        );
    }

    #[test]
    fn err_token_is_escaped_and_shortened() {
        let e = check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 4\u{1b}[2J\n",
            Some(3),
            "invalid value '4\\u{1b}[2J'",
        );
        assert!(!e.to_string().contains('\u{1b}'));
        let long = "9".repeat(100);
        check_err(
            &format!("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 x{long}\n"),
            Some(3),
            "...'",
        );
    }

    #[test]
    fn err_missing_and_extra_fields() {
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1\n2 2\n",
            Some(4),
            "expected 3 fields (row col value), found 2",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1 0\n",
            Some(3),
            "expected 3 fields (row col value), found 4",
        );
        check_err(
            "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 1 1\n",
            Some(3),
            "expected 2 fields (row col), found 3",
        );
        check_err(
            "%%MatrixMarket matrix array real general\n1 1\n1 2\n",
            Some(3),
            "expected 1 field (value), found 2",
        );
    }

    #[test]
    fn err_above_diagonal_in_symmetric() {
        check_err(
            "%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n1 1 1\n1 2 1\n",
            Some(4),
            "entry (1, 2) is above the diagonal in symmetric storage",
        );
    }

    #[test]
    fn err_non_finite_value() {
        for bad in ["nan", "NaN", "inf", "-inf", "infinity", "1e400"] {
            check_err(
                &format!("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 {bad}\n"),
                Some(3),
                "non-finite value",
            );
        }
        check_err(
            "%%MatrixMarket matrix array real general\n1 1\nNaN\n",
            Some(3),
            "non-finite value 'NaN'",
        );
    }

    /// `to_csr_full`'s error on `text` (which must read), checked to be one line that
    /// names the source and no line.
    fn sum_err(text: &str) -> MtxError {
        let m = read(text).unwrap_or_else(|e| panic!("reads: {e}"));
        let e = m.to_csr_full().unwrap_err();
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "multi-line message: {msg}");
        assert!(
            msg.starts_with(&format!("{NAME}: duplicate entries at (")),
            "{msg}"
        );
        assert_eq!((e.source_name(), e.line()), (NAME, None));
        e
    }

    /// Issue 47, item 4: duplicates, each finite, whose sum in file order overflows were
    /// summed to `inf` and failed later as a solver breakdown.
    #[test]
    fn err_duplicates_summing_to_inf_name_the_position_and_values() {
        // The file: the stored (2, 1) and its mirror (1, 2) sum to inf.
        let e = sum_err(
            "%%MatrixMarket matrix coordinate real symmetric\n2 2 4\n1 1 4\n2 2 4\n\
             2 1 1e308\n2 1 1e308\n",
        );
        assert_eq!(
            e.to_string(),
            "p.mtx: duplicate entries at (2, 1) sum to inf: the 2nd of them in file order adds 1e308 to 1e308"
        );
        let MtxError::NonFiniteSum {
            row,
            col,
            nth,
            before,
            value,
            sum,
            ..
        } = e
        else {
            panic!("expected NonFiniteSum, got {e}");
        };
        assert_eq!((row, col, nth), (2, 1, 2));
        assert_eq!((before, value, sum), (1e308, 1e308, f64::INFINITY));
        // Towards -inf, in a general file.
        assert_eq!(
            sum_err(
                "%%MatrixMarket matrix coordinate real general\n2 2 4\n1 1 4\n2 2 4\n\
                 2 1 -1e308\n2 1 -1.5e308\n"
            )
            .to_string(),
            "p.mtx: duplicate entries at (2, 1) sum to -inf: the 2nd of them in file order adds -1.5e308 to -1e308"
        );
        // The sum in file order, not the exact one: 1e308 + 1e308 - 1e308 is 1e308, but
        // the running sum overflows first; and one that comes back to 0 before it does.
        // Comments and blank lines between the entries change nothing.
        assert!(sum_err(
            "%%MatrixMarket matrix coordinate real general\n1 1 3\n1 1 1e308\n\
             % c\n\n1 1 1e308\n1 1 -1e308\n"
        )
        .to_string()
        .ends_with("at (1, 1) sum to inf: the 2nd of them in file order adds 1e308 to 1e308"));
        assert!(sum_err(
            "%%MatrixMarket matrix coordinate real general\n1 1 4\n1 1 1e308\n\
             1 1 -1e308\n1 1 1e308\n1 1 1.5e308\n"
        )
        .to_string()
        .ends_with("the 4th of them in file order adds 1.5e308 to 1e308"));
        // At the edge: f64::MAX plus less than half its last place rounds to f64::MAX.
        let edge = |add: &str| {
            format!(
                "%%MatrixMarket matrix coordinate real general\n1 1 2\n\
                 1 1 1.7976931348623157e308\n1 1 {add}\n"
            )
        };
        let a = read(&edge("9e291")).unwrap().to_csr_full().unwrap();
        assert_eq!(a.get(0, 0), Some(&f64::MAX));
        assert!(matches!(
            read(&edge("1e292")).unwrap().to_csr_full(),
            Err(MtxError::NonFiniteSum { nth: 2, .. })
        ));
        // A literal infinity or NaN is the reader's error at its line, before any sum: the
        // new check is for sums of finite entries (which never reach NaN: their running
        // sum is an infinity first).
        for bad in ["-inf", "inf", "nan", "1e309"] {
            check_err(
                &format!(
                    "%%MatrixMarket matrix coordinate real symmetric\n2 2 4\n1 1 4\n2 2 4\n\
                     2 1 1e308\n2 1 {bad}\n"
                ),
                Some(6),
                &format!("non-finite value '{bad}'"),
            );
        }
    }

    /// Which position is named: the first in row-major order, of the stored lower triangle
    /// in symmetric storage (never the mirror above it, though its row comes first), of the
    /// whole matrix in a general file.
    #[test]
    fn err_duplicates_summing_to_inf_name_the_first_position_row_major() {
        let sym = |entries: &str, count: usize| {
            sum_err(&format!(
                "%%MatrixMarket matrix coordinate real symmetric\n3 3 {count}\n{entries}"
            ))
            .to_string()
        };
        // (3, 1) alone: named as stored, not as its mirror (1, 3) of row 1.
        let e = sym("1 1 1\n3 1 1e308\n2 2 1\n3 1 1e308\n3 3 1\n", 5);
        assert!(e.contains("at (3, 1) sum to inf"), "{e}");
        // (3, 1) and, later in the file but in an earlier row, (2, 2): (2, 2).
        let e = sym("3 1 1e308\n3 1 1e308\n2 2 -1e308\n2 2 -1e308\n", 4);
        assert!(e.contains("at (2, 2) sum to -inf"), "{e}");
        // A general file: (1, 2) comes before (2, 1) in row-major order, whatever the
        // file's order.
        let e = sum_err(
            "%%MatrixMarket matrix coordinate real general\n2 2 4\n2 1 1e308\n2 1 1e308\n\
             1 2 1e308\n1 2 1e308\n",
        );
        assert!(e.to_string().contains("at (1, 2) sum to inf"), "{e}");
        // Large entries that do not share a position are fine, as are duplicates whose
        // running sum stays finite.
        let a = read(
            "%%MatrixMarket matrix coordinate real symmetric\n2 2 5\n1 1 1e308\n\
             2 1 1e308\n2 2 1e308\n2 1 -1e308\n2 1 1e308\n",
        )
        .unwrap()
        .to_csr_full()
        .unwrap();
        assert_eq!((a.get(1, 0), a.get(0, 1)), (Some(&1e308), Some(&1e308)));
    }

    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd",
                "101st", "111th", "112th"
            ]
        );
    }

    #[test]
    fn err_huge_declared_count_fails_fast() {
        // Declared counts whose storage no budget holds fail at the size line,
        // before any entry is read or stored.
        let start = std::time::Instant::now();
        check_err(
            "%%MatrixMarket matrix coordinate real general\n3 3 999999999999\n1 1 1\n2 2 1\n",
            Some(2),
            "a 3 x 3 matrix of 999999999999 entries needs",
        );
        check_err(
            "%%MatrixMarket matrix coordinate real general\n\
             18446744073709551615 18446744073709551615 18446744073709551615\n1 1 1\n",
            Some(2),
            "needs more than 16 EiB, over the memory budget",
        );
        check_err(
            "%%MatrixMarket matrix array real general\n4000000000 4000000000\n1\n",
            Some(2),
            "a 4000000000 x 4000000000 array needs",
        );
        // Without a budget the count is still bounded by the entries that arrive.
        let e = read_mtx_with(
            "%%MatrixMarket matrix coordinate real general\n3 3 999999999\n1 1 1\n".as_bytes(),
            NAME,
            ReadLimits::unlimited(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("file ends after 1 of 999999999 declared entries"),
            "{e}"
        );
        assert!(start.elapsed().as_secs() < 2, "took {:?}", start.elapsed());
    }

    /// The 60-byte file: 3e9 rows declared, 3 entries.
    const HUGE_ROWS: &str = "%%MatrixMarket matrix coordinate real general\n\
                             3000000000 3 3\n1 1 1\n2 2 1\n3 3 1\n";

    #[test]
    fn err_declared_rows_over_the_budget_fail_at_the_size_line() {
        // The CSR row pointer of 3e9 rows is 24 GB: over a 1 GiB budget, the
        // reader says so at the size line. The entry lines after it are not
        // even valid: the error comes before anything past the size line is
        // read, so nothing sized by the declared rows was allocated.
        let text = "%%MatrixMarket matrix coordinate real general\n3000000000 3 3\nnot an entry\n";
        let budget = MemBudget::new(1 << 30);
        let e =
            read_matrix_market_with(text.as_bytes(), NAME, ReadLimits::new(budget)).unwrap_err();
        let MtxError::OverBudget { line, error, .. } = &e else {
            panic!("expected OverBudget, got {e}");
        };
        assert_eq!(*line, 2);
        assert!(error.needed >= 3_000_000_001 * 8, "{e}");
        assert_eq!(error.budget, 1 << 30);
        assert_eq!(
            e.to_string(),
            "p.mtx:2: a 3000000000 x 3 matrix of 3 entries needs 22.4 GiB, over the memory budget of 1.0 GiB"
        );
        // The same with the real entries and the input's size known.
        let limits = ReadLimits::new(budget).with_input_bytes(HUGE_ROWS.len() as u64);
        let e = read_matrix_market_with(HUGE_ROWS.as_bytes(), NAME, limits).unwrap_err();
        assert!(matches!(e, MtxError::OverBudget { line: 2, .. }), "{e}");
        // Within a budget that holds the row pointer, the file reads.
        let m = read_matrix_market_with(
            HUGE_ROWS.as_bytes(),
            NAME,
            ReadLimits::new(MemBudget::new(1 << 36)),
        )
        .unwrap();
        assert_eq!((m.nrows(), m.nnz_stored()), (3_000_000_000, 3));
    }

    #[test]
    fn err_rows_no_machine_holds_are_over_the_default_budget() {
        // 3e15 rows: a 24 PB row pointer, over the default budget of any
        // machine (half its memory). Before the budget the file read fine and
        // `to_csr_full` tried to allocate it.
        let e =
            read("%%MatrixMarket matrix coordinate real general\n3000000000000000 3 1\n1 1 1\n")
                .unwrap_err();
        assert!(matches!(e, MtxError::OverBudget { line: 2, .. }), "{e}");
        assert_eq!(e.source_name(), NAME);
    }

    #[test]
    fn err_declared_entries_beyond_the_input_size() {
        // 1000 entries of at least 6 bytes cannot be in a 60-byte file.
        let text = "%%MatrixMarket matrix coordinate real general\n3 3 1000\n1 1 1\n";
        let limits = ReadLimits::default().with_input_bytes(text.len() as u64);
        let e = read_mtx_with(text.as_bytes(), NAME, limits).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, MtxError::SizeLine { line: 2, .. }), "{msg}");
        let (len, fits) = (text.len(), (text.len() + 1) / 6);
        assert!(
            msg.contains(&format!("size line declares 1000 entries but the {len}-byte input holds at most {fits} (each takes at least 6 bytes)")),
            "{msg}"
        );
        // Pattern entries take 4 bytes, array values 2.
        let text = "%%MatrixMarket matrix coordinate pattern general\n3 3 100\n1 1\n";
        let limits = ReadLimits::default().with_input_bytes(text.len() as u64);
        let e = read_mtx_with(text.as_bytes(), NAME, limits).unwrap_err();
        assert!(e.to_string().contains("each takes at least 4 bytes"), "{e}");
        let text = "%%MatrixMarket matrix array real general\n100 1\n1\n";
        let limits = ReadLimits::default().with_input_bytes(text.len() as u64);
        let e = read_mtx_with(text.as_bytes(), NAME, limits).unwrap_err();
        assert!(e.to_string().contains("declares 100 values"), "{e}");
        // A file exactly as dense as the bound allows reads, the last line
        // without its terminator included.
        let text = "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n2 2 1";
        let entries = "1 1 1\n2 2 1".len() as u64;
        let limits = ReadLimits::default().with_input_bytes(entries);
        assert_eq!(
            read_mtx_with(text.as_bytes(), NAME, limits)
                .map(|_| ())
                .ok(),
            Some(())
        );
    }

    #[test]
    fn a_small_budget_rejects_a_modest_matrix_the_default_accepts_it() {
        let e = read_matrix_market_with(
            SYMMETRIC.as_bytes(),
            NAME,
            ReadLimits::new(MemBudget::new(100)),
        )
        .unwrap_err();
        assert!(matches!(e, MtxError::OverBudget { line: 2, .. }), "{e}");
        assert!(
            e.to_string().ends_with("over the memory budget of 100 B"),
            "{e}"
        );
        // The check is exact at the boundary: 4 triplets, 4 row pointers and
        // up to 8 expanded entries (symmetric storage counted twice).
        let need = coordinate_bytes(3, 4, true).unwrap();
        assert_eq!(need, 4 * 24 + 4 * 8 + 8 * 32);
        assert!(read_matrix_market_with(
            SYMMETRIC.as_bytes(),
            NAME,
            ReadLimits::new(MemBudget::new(need))
        )
        .is_ok());
        assert!(read_matrix_market_with(
            SYMMETRIC.as_bytes(),
            NAME,
            ReadLimits::new(MemBudget::new(need - 1))
        )
        .is_err());
        assert!(read(SYMMETRIC).is_ok());
    }

    #[test]
    fn err_huge_dimension_reads_but_csr_is_an_error() {
        // Valid file, absurd M, no budget: reading is cheap; the CSR
        // conversion reports that the row pointer cannot be allocated instead
        // of aborting.
        let m = read_matrix_market_with(
            format!(
                "%%MatrixMarket matrix coordinate real general\n{} 1 1\n1 1 1\n",
                usize::MAX / 16
            )
            .as_bytes(),
            NAME,
            ReadLimits::unlimited(),
        )
        .unwrap();
        let e = m.to_csr_full().unwrap_err();
        assert!(matches!(e, MtxError::TooLarge { .. }));
        assert!(e.to_string().starts_with("p.mtx: matrix too large"), "{e}");
        // A row pointer whose size overflows 64 bits is over any budget.
        let e = read_matrix_market_with(
            format!(
                "%%MatrixMarket matrix coordinate real general\n{} 1 1\n1 1 1\n",
                usize::MAX
            )
            .as_bytes(),
            NAME,
            ReadLimits::unlimited(),
        )
        .unwrap_err();
        assert!(matches!(e, MtxError::OverBudget { .. }), "{e}");
    }

    #[test]
    fn err_line_too_long() {
        let mut text = String::from("%%MatrixMarket matrix coordinate real general\n% ");
        text.push_str(&"x".repeat(MAX_LINE_BYTES + 10));
        text.push('\n');
        let e = check_err(&text, Some(2), "line longer than");
        assert!(matches!(e, MtxError::LineTooLong { .. }));
    }

    /// A reader that yields `data` and then fails.
    struct FailAfter<'a>(&'a [u8]);

    impl Read for FailAfter<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::other("disk on fire"));
            }
            let n = self.0.len().min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn err_io_error_carries_line() {
        let data = b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n";
        let e = read_mtx(BufReader::new(FailAfter(data)), NAME).unwrap_err();
        assert!(matches!(e, MtxError::Io { .. }));
        assert_eq!(e.to_string(), "p.mtx:4: disk on fire");
    }

    #[test]
    fn err_missing_file_names_the_path() {
        let path = Path::new("/nonexistent/dir/a.mtx.gz");
        let e = read_matrix_market_path(path).unwrap_err();
        assert!(matches!(e, MtxError::Io { line: None, .. }));
        assert!(
            e.to_string().starts_with("/nonexistent/dir/a.mtx.gz: "),
            "{e}"
        );
        assert!(read_vector_path(path).is_err());
    }

    // ---- writers and round trips ----

    fn sample_spd() -> CsMat<f64> {
        let mut t = TriMat::new((4, 4));
        let vals = [4.0, 0.1, 1.0 / 3.0, 1e-300, 6.02214076e23, -0.0, 2.5];
        let pos = [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 0), (3, 3)];
        for (&(r, c), &v) in pos.iter().zip(&vals) {
            t.add_triplet(r, c, v);
            if r != c {
                t.add_triplet(c, r, v);
            }
        }
        t.to_csr()
    }

    #[test]
    fn roundtrip_symmetric_lower_is_exact() {
        let a = sample_spd();
        let mut out = Vec::new();
        write_coordinate_symmetric_lower(&mut out, &a).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with("%%MatrixMarket matrix coordinate real symmetric\n% "));
        assert_eq!(text.lines().nth(2), Some("4 4 7"));
        let m = read_matrix_market(&out[..], NAME).unwrap();
        assert_eq!(m.symmetry(), Symmetry::Symmetric);
        let b = m.to_csr_full().unwrap();
        assert_eq!(a.indptr().raw_storage(), b.indptr().raw_storage());
        assert_eq!(a.indices(), b.indices());
        let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a.data()), bits(b.data()));
    }

    #[test]
    fn roundtrip_array_is_exact() {
        let x = [
            1.0,
            -1.0 / 3.0,
            1e-310,
            f64::MAX,
            f64::MIN_POSITIVE,
            0.1 + 0.2,
        ];
        let mut out = Vec::new();
        write_array(&mut out, &x).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with("%%MatrixMarket matrix array real general\n6 1\n"));
        assert_eq!(text.lines().nth(2), Some("1.0000000000000000e0"));
        let y = read_vector(&out[..], NAME).unwrap();
        assert_eq!(x.len(), y.len());
        for (a, b) in x.iter().zip(&y) {
            assert_eq!(a.to_bits(), b.to_bits());
        }
    }

    #[test]
    fn writers_reject_non_finite_and_non_square() {
        let mut out = Vec::new();
        let e = write_array(&mut out, &[1.0, f64::NAN]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(out.is_empty());
        let mut t = TriMat::new((2, 3));
        t.add_triplet(0, 0, 1.0);
        let e = write_coordinate_symmetric_lower(&mut out, &t.to_csr()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let mut t = TriMat::new((2, 2));
        t.add_triplet(1, 0, f64::INFINITY);
        let e = write_coordinate_symmetric_lower(&mut out, &t.to_csr()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(out.is_empty());
    }

    #[test]
    fn to_csr_full_matches_sprs_trimat_with_duplicates() {
        // Deterministic pseudo-random symmetric lower storage with duplicates.
        let n = 37;
        let mut s: u64 = 12345;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as usize
        };
        let mut text = String::new();
        let mut t = TriMat::new((n, n));
        let mut entries = Vec::new();
        for _ in 0..400 {
            let r = next() % n;
            let c = next() % (r + 1);
            let v = (next() % 1000) as f64 / 8.0 - 60.0;
            entries.push((r, c, v));
            t.add_triplet(r, c, v);
            if r != c {
                t.add_triplet(c, r, v);
            }
        }
        text.push_str("%%MatrixMarket matrix coordinate real symmetric\n");
        text.push_str(&format!("{n} {n} {}\n", entries.len()));
        for (r, c, v) in &entries {
            text.push_str(&format!("{} {} {v}\n", r + 1, c + 1));
        }
        let ours = read(&text).unwrap().to_csr_full().unwrap();
        let reference: CsMat<f64> = t.to_csr();
        assert_eq!(
            ours.indptr().raw_storage(),
            reference.indptr().raw_storage()
        );
        assert_eq!(ours.indices(), reference.indices());
        for (a, b) in ours.data().iter().zip(reference.data()) {
            assert!((a - b).abs() <= 1e-12 * a.abs().max(1.0), "{a} vs {b}");
        }
    }

    // ---- gzip ----

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gzip_in_memory_roundtrip() {
        let a = sample_spd();
        let mut plain = Vec::new();
        write_coordinate_symmetric_lower(&mut plain, &a).unwrap();
        let gz = gzip(&plain);
        let m = read_matrix_market(BufReader::new(MultiGzDecoder::new(&gz[..])), NAME).unwrap();
        assert_eq!(m.to_csr_full().unwrap(), a);
        // Corrupt compressed data is an I/O error with a line, not a panic.
        let mut bad = gz.clone();
        let mid = bad.len() / 2;
        bad.truncate(mid);
        let e = read_mtx(BufReader::new(MultiGzDecoder::new(&bad[..])), NAME).unwrap_err();
        assert!(e.to_string().starts_with("p.mtx:"), "{e}");
    }

    #[test]
    fn gzip_path_roundtrip() {
        let dir = std::env::temp_dir();
        let pid = std::process::id();
        let gz_path = dir.join(format!("castack-mtx-test-{pid}.mtx.gz"));
        let vec_path = dir.join(format!("castack-mtx-test-{pid}-x.mtx"));
        let a = sample_spd();
        let mut plain = Vec::new();
        write_coordinate_symmetric_lower(&mut plain, &a).unwrap();
        std::fs::write(&gz_path, gzip(&plain)).unwrap();
        let mut xs = Vec::new();
        write_array(&mut xs, &[1.0, 2.0]).unwrap();
        std::fs::write(&vec_path, &xs).unwrap();
        let m = read_matrix_market_path(&gz_path);
        let x = read_vector_path(&vec_path);
        let e = read_vector_path(&gz_path);
        let _ = std::fs::remove_file(&gz_path);
        let _ = std::fs::remove_file(&vec_path);
        let m = m.unwrap();
        assert_eq!(m.source_name(), gz_path.display().to_string());
        assert_eq!(m.to_csr_full().unwrap(), a);
        assert_eq!(x.unwrap(), vec![1.0, 2.0]);
        assert_eq!(e.unwrap_err().source_name(), gz_path.display().to_string());
    }

    #[test]
    fn bcsstk16_gz_if_present() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/matrices/bcsstk16.mtx.gz");
        if !path.exists() {
            eprintln!("skipping: {} not present", path.display());
            return;
        }
        let m = read_matrix_market_path(&path).unwrap();
        assert_eq!(m.symmetry(), Symmetry::Symmetric);
        assert_eq!((m.nrows(), m.ncols()), (4884, 4884));
        let a = m.to_csr_full().unwrap();
        assert_eq!(a.nnz(), 290378);
    }
}
