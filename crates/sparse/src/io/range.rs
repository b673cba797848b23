//! One part of a Matrix Market coordinate file, for a read split over processes: the header
//! alone ([`read_coordinate_header`]), the line-aligned byte range of part `i` of `parts`
//! ([`part_range`]), and the entries of a range ([`read_range`]), whose errors become those
//! of the whole-file reader ([`super::read_matrix_market_path_within`]), exact line numbers
//! included, once the parts before it have said how many lines and entries they hold
//! ([`RangeEntries::first_error`]). Nothing here communicates: castack-krylov's distributed read runs it
//! on every rank and agrees on the counts and the first error. Each process then builds its
//! rows with [`assemble_row`], as [`super::MtxMatrix::to_csr_full`] builds every row.
//!
//! The split: the bytes after the size line are cut into `parts` equal spans, and a part
//! holds the lines that START in its span. So every line lies in exactly one part, the
//! parts are in file order, and a part's reader never looks past its range except for the
//! one line that crosses its start (skipped: the part before holds it).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;

use castack_base::MemBudget;

use super::mtx::{
    entry_err, header_err, is_gz, is_skippable, open_within, parse_banner, parse_coordinate_size,
    parse_entry, read_array, size_err, Declared, Format, Header, Lines,
};
use super::{Field, MtxError, ReadLimits, Symmetry, MAX_LINE_BYTES};

pub use super::mtx::assemble_row;

/// What the header of a coordinate file declares, and where its entries start.
#[derive(Debug, Clone)]
pub struct CoordinateHeader {
    /// The name errors carry (the path as given).
    pub source_name: String,
    /// Declared rows.
    pub nrows: usize,
    /// Declared columns.
    pub ncols: usize,
    /// Declared entries.
    pub declared: u64,
    /// The value field.
    pub field: Field,
    /// The storage scheme.
    pub symmetry: Symmetry,
    /// 1-based number of the size line: the lines of the entries follow it.
    pub size_line: usize,
    /// Byte offset of the first line after the size line.
    pub data_start: u64,
    /// The file's length in bytes.
    pub len: u64,
    header: Header,
}

impl CoordinateHeader {
    /// The header as bytes, for a process that read it to send to the others
    /// ([`CoordinateHeader::from_bytes`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let field = match self.field {
            Field::Real => 0u64,
            Field::Integer => 1,
            Field::Pattern => 2,
        };
        let symmetric = u64::from(self.symmetry == Symmetry::Symmetric);
        let words = [
            self.nrows as u64,
            self.ncols as u64,
            self.declared,
            field,
            symmetric,
            self.size_line as u64,
            self.data_start,
            self.len,
        ];
        let mut out: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        out.extend_from_slice(self.source_name.as_bytes());
        out
    }

    /// A header from [`CoordinateHeader::to_bytes`]; `None` when `bytes` is not one.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (head, name) = bytes.split_at_checked(64)?;
        let w = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&head[8 * i..8 * i + 8]);
            u64::from_le_bytes(a)
        };
        let field = match w(3) {
            0 => Field::Real,
            1 => Field::Integer,
            2 => Field::Pattern,
            _ => return None,
        };
        let symmetry = match w(4) {
            0 => Symmetry::General,
            1 => Symmetry::Symmetric,
            _ => return None,
        };
        Some(Self {
            source_name: String::from_utf8_lossy(name).into_owned(),
            nrows: usize::try_from(w(0)).ok()?,
            ncols: usize::try_from(w(1)).ok()?,
            declared: w(2),
            field,
            symmetry,
            size_line: usize::try_from(w(5)).ok()?,
            data_start: w(6),
            len: w(7),
            header: Header {
                format: Format::Coordinate,
                field,
                symmetry,
            },
        })
    }
}

/// Bytes one of `parts` processes allocates reading its share of a coordinate file of
/// `declared` entries and `nrows` rows and assembling its rows (an estimate for an even
/// split, `None` on overflow): its range's triplets (24 bytes each), the expanded entries
/// (both triangles of symmetric storage) it sends and receives (24 bytes each way), its rows'
/// column indices and values (16 bytes each) and row pointers.
pub fn part_bytes(nrows: usize, declared: u64, symmetric: bool, parts: usize) -> Option<u64> {
    let parts = parts.max(1) as u64;
    let share = declared.div_ceil(parts);
    let expanded = share.checked_mul(if symmetric { 2 } else { 1 })?;
    let rows = (nrows as u64).div_ceil(parts).checked_add(1)?;
    share
        .checked_mul(24)?
        .checked_add(expanded.checked_mul(24 + 24 + 16)?)?
        .checked_add(rows.checked_mul(8)?)
}

/// Read the banner and size line of the coordinate file `path` and check them as the
/// whole-file reader does, against `budget` for what one of `parts` processes allocates
/// ([`part_bytes`]) and against the file's size.
///
/// # Errors
/// The whole-file reader's errors on the header and size line (an `array` file: its
/// [`MtxError::Kind`]); [`MtxError::Kind`] for a compressed file or one that is not a
/// regular file (no byte ranges to split: [`CoordinateStream`] reads those).
pub fn read_coordinate_header(
    path: &Path,
    parts: usize,
    budget: MemBudget,
) -> Result<CoordinateHeader, MtxError> {
    let name = path.display().to_string();
    let kind = |message: &str| MtxError::Kind {
        source_name: name.clone(),
        message: message.to_owned(),
    };
    if is_gz(path) {
        return Err(kind(
            "a compressed file cannot be split into byte ranges (read it as a stream)",
        ));
    }
    let (file, limits) = open_within(path, &name, budget)?;
    if limits.input_bytes.is_none() {
        return Err(kind(
            "not a regular file: it cannot be split into byte ranges (read it as a stream)",
        ));
    }
    let mut lines = Lines::new(BufReader::new(file));
    header_of(&mut lines, path, (parts, limits))
}

/// The header of the file `path` read through `lines`, checked (see
/// [`read_coordinate_header`]).
fn header_of<R: BufRead>(
    lines: &mut Lines<R>,
    path: &Path,
    (parts, limits): (usize, ReadLimits),
) -> Result<CoordinateHeader, MtxError> {
    let name = path.display().to_string();
    let header = match lines.next_line(&name)? {
        Some((line, text)) => parse_banner(&text, &name, line)?,
        None => {
            return Err(header_err(
                &name,
                1,
                "empty file: missing %%MatrixMarket banner".to_owned(),
            ))
        }
    };
    let (size_line, text) = loop {
        match lines.next_line(&name)? {
            Some((line, text)) if !is_skippable(&text) => break (line, text.into_owned()),
            Some(_) => {}
            None => {
                return Err(size_err(
                    &name,
                    lines.last_line(),
                    "file ends before the size line".to_owned(),
                ))
            }
        }
    };
    if header.format == Format::Array {
        // The whole-file reader's own outcome, read on from here (a pipe cannot be opened
        // again): the array's errors, else the message naming its sizes.
        let d = read_array(lines, &name, header, (size_line, &text), (limits, None))?;
        return Err(MtxError::Kind {
            source_name: name,
            message: format!(
                "expected a coordinate (sparse) matrix, found a {} x {} array",
                d.nrows(),
                d.ncols()
            ),
        });
    }
    let symmetric = header.symmetry == Symmetry::Symmetric;
    let Declared {
        nrows,
        ncols,
        entries,
    } = parse_coordinate_size(&name, header, (size_line, &text), limits, |d| {
        (
            format!(
                "a 1/{parts} share of a {} x {} matrix of {} entries",
                d.nrows, d.ncols, d.entries
            ),
            part_bytes(d.nrows, d.entries, symmetric, parts),
        )
    })?;
    Ok(CoordinateHeader {
        source_name: name,
        nrows,
        ncols,
        declared: entries,
        field: header.field,
        symmetry: header.symmetry,
        size_line,
        data_start: lines.bytes(),
        len: limits.input_bytes.unwrap_or(0),
        header,
    })
}

/// The first line start at or after byte `at` (`h.len` when none): the line crossing `at`
/// belongs to the part before. The scan stops after `MAX_LINE_BYTES + 2` bytes: a line that
/// long is an error the part holding its start reports first (so `h.len`, an empty range,
/// serves; later parts' ranges start on their own).
fn line_start_from(file: &mut File, h: &CoordinateHeader, at: u64) -> io::Result<u64> {
    if at <= h.data_start {
        return Ok(h.data_start);
    }
    // The byte before `at` ends a line (then `at` starts one) or lies inside the crossing one.
    file.seek(SeekFrom::Start(at - 1))?;
    let mut r = BufReader::new(file);
    let mut pos = at - 1;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(h.len);
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            return Ok(pos + i as u64 + 1);
        }
        let n = buf.len();
        pos += n as u64;
        r.consume(n);
        if pos - (at - 1) > MAX_LINE_BYTES as u64 + 2 {
            return Ok(h.len);
        }
    }
}

/// The byte range of part `part` of `parts` (`part < parts`): the lines starting in its
/// equal span of the bytes after the size line. The ranges of `0..parts` tile those bytes in
/// order.
///
/// # Errors
/// Seeking or reading `file` (the file the header was read from).
pub fn part_range(
    file: &mut File,
    h: &CoordinateHeader,
    part: usize,
    parts: usize,
) -> io::Result<Range<u64>> {
    let span = h.len.saturating_sub(h.data_start);
    let at = |i: usize| h.data_start + (u128::from(span) * i as u128 / parts.max(1) as u128) as u64;
    let start = line_start_from(file, h, at(part))?;
    let end = if part + 1 >= parts {
        h.len
    } else {
        line_start_from(file, h, at(part + 1))?
    };
    Ok(start..end.max(start))
}

/// Where a range's reading stopped before its end.
#[derive(Debug)]
pub struct RangeStop {
    /// 1-based line number within the range.
    pub line: usize,
    /// Entry lines of the range before it.
    pub before: u64,
    /// Whether the line is an entry line the reader rejected (not a line too long to read
    /// or a read error).
    pub entry: bool,
    /// The error, its line numbered within the range.
    pub error: MtxError,
}

/// What reading one byte range found (its entries went to the caller's sink).
#[derive(Debug)]
pub struct RangeEntries {
    /// Lines read (all of the range's when it was read to its end).
    pub lines: usize,
    /// Entry lines read (non-blank, non-comment); at most `declared` of them went to the
    /// sink.
    pub found: u64,
    /// Where reading stopped early, if it did.
    pub stop: Option<RangeStop>,
}

/// Read the entry lines of `range` of `file` (from [`part_range`]): each checked as the
/// whole-file reader checks it and handed to `sink` as `(row, col, value)`, 0-based, in file
/// order; reading stops at the first line it rejects. At most `h.declared` entries go to the
/// sink (a range holding more is over the count in any case).
///
/// # Errors
/// Seeking to the range's start.
pub fn read_range(
    file: &mut File,
    h: &CoordinateHeader,
    range: Range<u64>,
    sink: &mut dyn FnMut(usize, usize, f64),
) -> io::Result<RangeEntries> {
    file.seek(SeekFrom::Start(range.start))?;
    let mut lines = Lines::new(BufReader::new(file.take(range.end - range.start)));
    let d = Declared {
        nrows: h.nrows,
        ncols: h.ncols,
        entries: h.declared,
    };
    let mut out = RangeEntries {
        lines: 0,
        found: 0,
        stop: None,
    };
    let name = &h.source_name;
    loop {
        let (line, parsed) = match lines.next_line(name) {
            Ok(None) => break,
            Ok(Some((line, text))) => {
                if is_skippable(&text) {
                    continue;
                }
                (line, parse_entry(&text, h.header, d))
            }
            Err(error) => {
                out.stop = Some(RangeStop {
                    line: error.line().unwrap_or(lines.count() + 1),
                    before: out.found,
                    entry: false,
                    error,
                });
                break;
            }
        };
        match parsed {
            Ok((r, c, v)) => {
                if out.found < h.declared {
                    sink(r, c, v);
                }
                out.found += 1;
            }
            Err(m) => {
                out.stop = Some(RangeStop {
                    line,
                    before: out.found,
                    entry: true,
                    error: entry_err(name, line, m),
                });
                break;
            }
        }
    }
    out.lines = match &out.stop {
        Some(stop) => stop.line,
        None => lines.count(),
    };
    Ok(out)
}

/// 1-based line number, within `range`, of its entry line of index `index` (0-based).
fn line_of_entry(
    file: &mut File,
    h: &CoordinateHeader,
    range: &Range<u64>,
    index: u64,
) -> Result<usize, MtxError> {
    let io_err = |error| MtxError::Io {
        source_name: h.source_name.clone(),
        line: None,
        error,
    };
    file.seek(SeekFrom::Start(range.start)).map_err(io_err)?;
    let mut lines = Lines::new(BufReader::new(file.take(range.end - range.start)));
    let mut seen = 0u64;
    while let Some((line, text)) = lines.next_line(&h.source_name)? {
        if !is_skippable(&text) {
            if seen == index {
                return Ok(line);
            }
            seen += 1;
        }
    }
    Err(io_err(io::Error::other(
        "the file changed while it was read",
    )))
}

impl RangeEntries {
    /// The error the whole-file reader meets first inside this range, if any, given the
    /// lines (`lines_before`, the size line's number plus the earlier ranges' lines) and
    /// entry lines (`entries_before`) of the file before it: a line it rejects, or the
    /// first entry line past the declared count ([`MtxError::TooManyEntries`], even when
    /// that line is malformed, as the whole-file reader reports it). Reading the range's
    /// lines again finds that line's number.
    ///
    /// The whole-file reader's first error is the first range's that has one; a file whose
    /// ranges have none but hold fewer entry lines than declared is its
    /// [`MtxError::TooFewEntries`] at the last line.
    pub fn first_error(
        &mut self,
        file: &mut File,
        h: &CoordinateHeader,
        range: &Range<u64>,
        (lines_before, entries_before): (usize, u64),
    ) -> Option<MtxError> {
        // Local index of the first entry line past the declared count.
        let cut = h.declared.saturating_sub(entries_before);
        let surplus = |file: &mut File| {
            Some(match line_of_entry(file, h, range, cut) {
                Ok(line) => MtxError::TooManyEntries {
                    source_name: h.source_name.clone(),
                    line: lines_before + line,
                    declared: h.declared,
                },
                Err(e) => e,
            })
        };
        match self.stop.take() {
            Some(stop) if cut < stop.before => surplus(file),
            Some(stop) if cut == stop.before && stop.entry => Some(MtxError::TooManyEntries {
                source_name: h.source_name.clone(),
                line: lines_before + stop.line,
                declared: h.declared,
            }),
            Some(stop) => Some(stop.error.after_lines(lines_before)),
            None if cut < self.found => surplus(file),
            None => None,
        }
    }
}

/// [`MtxError::TooFewEntries`] of a file of `lines` lines in all holding `found` entry lines,
/// when that is fewer than declared (and no range had an error).
pub fn too_few(h: &CoordinateHeader, lines: usize, found: u64) -> Option<MtxError> {
    (found < h.declared).then(|| MtxError::TooFewEntries {
        source_name: h.source_name.clone(),
        line: lines.max(1),
        declared: h.declared,
        found,
    })
}

/// One entry: 0-based row and column, and value.
pub type Triple = (usize, usize, f64);

/// A coordinate file read from its start, entries in batches: how one process reads a file
/// that has no byte ranges (a `.gz` stream, a pipe) for the others. The lines and errors
/// are the whole-file reader's, in the same order.
pub struct CoordinateStream {
    header: CoordinateHeader,
    lines: Lines<Box<dyn BufRead + Send>>,
    found: u64,
    ended: bool,
}

impl std::fmt::Debug for CoordinateStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinateStream")
            .field("header", &self.header)
            .field("found", &self.found)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl CoordinateStream {
    /// Open `path` (`.gz` decompressed) and read its header, checked as
    /// [`read_coordinate_header`] checks it (the file's size only where it has one).
    ///
    /// # Errors
    /// As [`read_coordinate_header`], a compressed file or a pipe included.
    pub fn open(path: &Path, parts: usize, budget: MemBudget) -> Result<Self, MtxError> {
        let name = path.display().to_string();
        let (file, limits) = open_within(path, &name, budget)?;
        let reader: Box<dyn BufRead + Send> = if is_gz(path) {
            Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
        } else {
            Box::new(BufReader::new(file))
        };
        let mut lines = Lines::new(reader);
        let header = header_of(&mut lines, path, (parts, limits))?;
        Ok(Self {
            header,
            lines,
            found: 0,
            ended: false,
        })
    }

    /// What the header declares.
    pub fn header(&self) -> &CoordinateHeader {
        &self.header
    }

    /// The next at most `max` entries (`max` at least 1) in file order, as `(row, col,
    /// value)`, 0-based; `None` once the file has ended with the declared count.
    ///
    /// # Errors
    /// The whole-file reader's, in its order: a rejected line, an entry past the declared
    /// count, the file ending before it.
    pub fn next_batch(&mut self, max: usize) -> Result<Option<Vec<Triple>>, MtxError> {
        if self.ended {
            return Ok(None);
        }
        let h = &self.header;
        let d = Declared {
            nrows: h.nrows,
            ncols: h.ncols,
            entries: h.declared,
        };
        let name = &h.source_name;
        let mut batch = Vec::with_capacity(max.clamp(1, 1 << 16));
        while batch.len() < max.max(1) {
            let Some((line, text)) = self.lines.next_line(name)? else {
                self.ended = true;
                if let Some(e) = too_few(h, self.lines.last_line(), self.found) {
                    return Err(e);
                }
                break;
            };
            if is_skippable(&text) {
                continue;
            }
            if self.found >= h.declared {
                return Err(MtxError::TooManyEntries {
                    source_name: name.clone(),
                    line,
                    declared: h.declared,
                });
            }
            batch.push(parse_entry(&text, h.header, d).map_err(|m| entry_err(name, line, m))?);
            self.found += 1;
        }
        Ok((!batch.is_empty() || !self.ended).then_some(batch))
    }
}
