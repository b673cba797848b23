//! A Matrix Market file read by all the ranks of a communicator together, each holding about
//! its share: no rank ever holds the global matrix.
//!
//! 1. Every rank reads the header ([`crate::io::range::read_coordinate_header`]) and its
//!    line-aligned byte range of the entries ([`crate::io::range::part_range`]), and parses
//!    that range alone. A file without byte ranges (`.gz`, a pipe) is read by rank 0 alone
//!    ([`crate::io::range::CoordinateStream`]), which sends its header and then its entries
//!    in batches; its first error is every rank's.
//! 2. One reduction of `2P` words gives every rank the lines and entry lines of the ranges
//!    before its own, so each rank knows the exact line numbers of its range: the first error
//!    in file order (the lowest rank with one) is the whole-file reader's, message for
//!    message, and every rank returns it ([`LinalgError::Input`]).
//! 3. Each entry goes to the rank owning its row (and, in symmetric storage, its mirror to
//!    the owner of its column): rows split evenly, `from_counts`-style. Each rank receives
//!    its rows' entries from the ranks in order, so they arrive in file order, and sums
//!    duplicates in file order after a stable sort by column: the rows are those of
//!    [`crate::io::MtxMatrix::to_csr_full`] bit for bit (both use
//!    [`crate::io::range::assemble_row`]). Duplicates whose sum is not finite (`2 1 1e308`
//!    twice) are its error too, the same message on every rank: the first such position in
//!    row-major order, which the lowest rank holding one reports (the rows are split in
//!    rank order). It names the position, not a line: the triples carry no line numbers.
//! 4. [`PartitionKind::Nnz`] then moves whole rows to the ranks that the nonzero-balanced
//!    split of the assembled matrix gives them ([`Partition::nnz`]'s rule, found with one
//!    reduction of `P` words and one of `P - 1`).
//! 5. A `general` file is checked for symmetry as `castack_sparse::check::check_symmetric` checks
//!    the global matrix: each rank sends every off-diagonal entry to the owner of its
//!    mirror, which compares, and the ranks agree on the first offending entry in row-major
//!    order. (Symmetric storage is symmetric by construction.)
//!
//! Memory per rank: the entries it sends and receives (24 bytes each, parsed straight into
//! pieces of 1.5 MiB per destination and exchanged in pairwise rounds with at most a few
//! pieces in flight, each freed once sent), then its rows (16 bytes per entry); a `general`
//! file's symmetry check holds its off-diagonal entries' mirrors for a while besides. The
//! message passing is our own (an all-to-all of counts, then point-to-point pieces) rather
//! than an `MPI_Alltoallv`: it runs on every castack communicator (threads, sim, MPI) and
//! bounds what is in flight. Collective: every
//! rank of the communicator calls it with the same arguments; every check is agreed, so no
//! rank is left waiting in a collective.

use std::fs::File;
use std::ops::Range;
use std::path::Path;

use castack_collectives::{Collectives, CommError, Communicator, Op, PointToPoint};

use crate::io::range::{
    assemble_row, part_range, read_coordinate_header, read_range, too_few, CoordinateHeader,
    CoordinateStream, Triple,
};
use crate::io::{MtxError, Symmetry};
use crate::{LinalgError, LocalRows, MatrixError, MemBudget, Partition, PartitionKind};

/// One rank's rows of a matrix read by [`read_matrix_market_dist`]: CSR with global column
/// indices, each row's columns strictly increasing, duplicates summed.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalMatrix {
    /// Row offsets from 0, one more than the rank's rows.
    pub indptr: Vec<usize>,
    /// Global column of each entry.
    pub cols: Vec<usize>,
    /// Value of each entry.
    pub vals: Vec<f64>,
    /// The row partition over the ranks (this rank's rows are `part.range(rank)`).
    pub part: Partition,
    /// Entries of the assembled global matrix (both triangles, duplicates summed).
    pub nnz: usize,
}

impl LocalMatrix {
    /// The rows as [`crate::DistCsr::from_local_rows`] and
    /// [`crate::MatrixPowers::from_local_rows`] take them.
    pub fn rows(&self) -> LocalRows<'_> {
        LocalRows {
            indptr: &self.indptr,
            cols: &self.cols,
            vals: &self.vals,
        }
    }
}

/// Read the Matrix Market coordinate file `path` over the ranks of `comm`, each rank keeping
/// the rows `kind` gives it, and check what the whole-file path checks before a solve: the
/// file (the reader's errors, line for line), a square matrix with at least as many entries
/// as rows (`castack_sparse::check::check_spd_storage`) and symmetry
/// (`castack_sparse::check::check_symmetric`). The rows and the partition are those of
/// [`crate::DistCsr::from_global_with`] on the whole-file reader's matrix with
/// [`Partition::rows`] or [`Partition::nnz`], bit for bit. `budget` bounds what one rank
/// allocates ([`crate::io::range::part_bytes`] of the declared sizes).
///
/// # Errors
/// The same on every rank: [`LinalgError::Input`] (the file: the first error in file order;
/// a compressed file or one that is not a regular file, which has no byte ranges;
/// duplicates whose sum is not finite, as `MtxMatrix::to_csr_full` reports them),
/// [`LinalgError::Matrix`] ([`MatrixError::NotSquare`], [`MatrixError::MissingDiagonals`],
/// [`MatrixError::NotSymmetric`]); communication errors.
pub fn read_matrix_market_dist<C: Communicator + ?Sized>(
    comm: &C,
    path: &Path,
    kind: PartitionKind,
    budget: MemBudget,
) -> Result<LocalMatrix, LinalgError> {
    read_batched(comm, path, kind, (budget, BATCH))
}

/// [`read_matrix_market_dist`] streaming `batch` entries at a time.
fn read_batched<C: Communicator + ?Sized>(
    comm: &C,
    path: &Path,
    kind: PartitionKind,
    (budget, batch): (MemBudget, usize),
) -> Result<LocalMatrix, LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    // Byte ranges where every rank sees a plain regular file; a stream from rank 0 otherwise.
    let mut ranged = [i64::from(has_ranges(path))];
    comm.allreduce_i64(&mut ranged, Op::Min)?;
    let (h, got) = if ranged[0] == 1 {
        read_ranges(comm, path, budget)?
    } else {
        read_stream(comm, path, budget, batch)?
    };
    // What check_spd_storage asks of the matrix as read.
    if h.nrows != h.ncols {
        return Err(MatrixError::NotSquare {
            rows: h.nrows,
            cols: h.ncols,
        }
        .into());
    }
    if h.declared < h.nrows as u64 {
        return Err(MatrixError::MissingDiagonals {
            rows: h.nrows,
            entries: h.declared as usize,
        }
        .into());
    }
    let even = Partition::rows(h.nrows, p);
    let symmetric = h.symmetry == Symmetry::Symmetric;
    // Duplicates whose sum is not finite: the first such row's error (the lowest rank's,
    // rows being in rank order), as the whole-file path's `to_csr_full` reports it.
    let mut local = agree_input(comm, assemble(&h, even.range(me), got))?;
    // 4. Rows balanced by nonzeros.
    let part = match kind {
        PartitionKind::Rows => even,
        PartitionKind::Nnz => {
            let part = nnz_partition(comm, &even, &local.0)?;
            local = move_rows(comm, &even, &part, local)?;
            part
        }
    };
    let (indptr, cols, vals) = local;
    let mut nnz = [cols.len() as i64];
    comm.allreduce_i64(&mut nnz, Op::Sum)?;
    let m = LocalMatrix {
        indptr,
        cols,
        vals,
        part,
        nnz: nnz[0] as usize,
    };
    // 5. Symmetry of a general file.
    if !symmetric {
        check_symmetric_dist(comm, &m)?;
    }
    Ok(m)
}

/// Whether `path` can be split into byte ranges: a regular file, not compressed (the ranks
/// agree: a stream read by rank 0 where any rank sees otherwise).
fn has_ranges(path: &Path) -> bool {
    let gz = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    !gz && std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Entries per batch of a streamed file (6 MB of triples on rank 0).
const BATCH: usize = 1 << 18;

/// Steps 1-3 on a file with byte ranges: the header, this rank's range, the agreed first
/// error, and the blocks of triples every rank sent here (each entry to the owner of its row
/// under an even split of the rows).
fn read_ranges<C: Communicator + ?Sized>(
    comm: &C,
    path: &Path,
    budget: MemBudget,
) -> Result<(CoordinateHeader, Vec<Pieces>), LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    let h = agree_input(comm, read_coordinate_header(path, p, budget))?;
    let io_err = |error| MtxError::Io {
        source_name: h.source_name.clone(),
        line: None,
        error,
    };
    // 1. This rank's range, its entries straight into the blocks for their rows' owners
    //    (sent once the ranks agree the file reads).
    let even = Partition::rows(h.nrows, p);
    let mut out: Vec<Pieces> = vec![Pieces::default(); p];
    let mut sink = |r, c, v| route(&mut out, &even, h.symmetry, (r, c, v));
    let mine = File::open(path).map_err(io_err).and_then(|mut file| {
        let range = part_range(&mut file, &h, me, p).map_err(io_err)?;
        let entries = read_range(&mut file, &h, range.clone(), &mut sink).map_err(io_err)?;
        Ok((file, range, entries))
    });
    let (mut file, range, mut entries) = agree_input(comm, mine)?;
    // 2. Lines and entry lines of every range, then the first error in file order.
    let mut counts = vec![0i64; 2 * p];
    counts[me] = entries.lines as i64;
    counts[p + me] = entries.found as i64;
    comm.allreduce_i64(&mut counts, Op::Sum)?;
    let lines_before = h.size_line + counts[..me].iter().sum::<i64>() as usize;
    let entries_before = counts[p..p + me].iter().sum::<i64>() as u64;
    let first = entries.first_error(&mut file, &h, &range, (lines_before, entries_before));
    drop(file);
    agree_input(comm, first.map_or(Ok(()), Err))?;
    let lines = h.size_line + counts[..p].iter().sum::<i64>() as usize;
    let found = counts[p..].iter().sum::<i64>() as u64;
    if let Some(e) = too_few(&h, lines, found) {
        return Err(input(e));
    }
    // 3. Entries to the owners of their rows.
    let got = exchange(comm, out)?;
    Ok((h, got))
}

/// Steps 1-3 on a file without byte ranges (`.gz`, a pipe): rank 0 reads it from the start
/// and sends each batch of [`BATCH`] entries to the owners of their rows; its first error
/// (the whole-file reader's) is every rank's.
fn read_stream<C: Communicator + ?Sized>(
    comm: &C,
    path: &Path,
    budget: MemBudget,
    batch_len: usize,
) -> Result<(CoordinateHeader, Vec<Pieces>), LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    // Rank 0 alone opens the file (a pipe can be read once) and sends the header.
    let opened = match me {
        0 => CoordinateStream::open(path, p, budget).map(Some),
        _ => Ok(None),
    };
    let mut stream = agree_input(comm, opened)?;
    let mut bytes = stream
        .as_ref()
        .map_or(Vec::new(), |s| s.header().to_bytes());
    let mut len = [bytes.len() as i64];
    comm.allreduce_i64(&mut len, Op::Max)?;
    bytes.resize(len[0] as usize, 0);
    comm.bcast_bytes_with(0, &mut bytes, Default::default())?;
    let h = CoordinateHeader::from_bytes(&bytes).ok_or(LinalgError::Comm(
        CommError::LengthMismatch {
            rank: me,
            from: 0,
            expected: 64,
            got: bytes.len(),
        },
    ))?;
    let even = Partition::rows(h.nrows, p);
    let mut got: Vec<Pieces> = Vec::new();
    loop {
        let batch = match &mut stream {
            Some(s) => s.next_batch(batch_len),
            None => Ok(None),
        };
        let batch = agree_input(comm, batch)?;
        let mut more = [i64::from(batch.is_some())];
        comm.allreduce_i64(&mut more, Op::Max)?;
        if more[0] == 0 {
            break;
        }
        let mut out: Vec<Pieces> = vec![Pieces::default(); p];
        for t in batch.unwrap_or_default() {
            route(&mut out, &even, h.symmetry, t);
        }
        got.extend(exchange(comm, out)?.into_iter().filter(|b| b.len > 0));
    }
    Ok((h, got))
}

/// The entry `(r, c, v)` as a triple into the block for the owner of row `r` under `even`,
/// and in symmetric storage its mirror `(c, r, v)` into the block for the owner of row `c`.
fn route(out: &mut [Pieces], even: &Partition, symmetry: Symmetry, (r, c, v): Triple) {
    push_triple(&mut out[even.owner(r)], r, c, v);
    if symmetry == Symmetry::Symmetric && r != c {
        push_triple(&mut out[even.owner(c)], c, r, v);
    }
}

fn input(e: MtxError) -> LinalgError {
    LinalgError::Input {
        over_budget: matches!(e, MtxError::OverBudget { .. }),
        message: e.to_string(),
    }
}

/// Agree on a step each rank did alone: `Ok` everywhere, or on every rank the error of the
/// lowest rank that failed (its message sent to all).
fn agree_input<C: Communicator + ?Sized, T>(
    comm: &C,
    mine: Result<T, MtxError>,
) -> Result<T, LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    let mut first = [match &mine {
        Ok(_) => p as i64,
        Err(_) => me as i64,
    }];
    comm.allreduce_i64(&mut first, Op::Min)?;
    let first = first[0] as usize;
    if first == p {
        return mine.map_err(input);
    }
    // The failing rank's message and kind, in two steps: its length, then its bytes.
    let (mut message, mut over) = match mine {
        Err(e) if me == first => (
            e.to_string().into_bytes(),
            matches!(e, MtxError::OverBudget { .. }),
        ),
        _ => (Vec::new(), false),
    };
    let mut head = [message.len() as i64, i64::from(over)];
    comm.allreduce_i64(&mut head, Op::Max)?;
    message.resize(head[0] as usize, 0);
    over = head[1] != 0;
    comm.bcast_bytes_with(first, &mut message, Default::default())?;
    Err(LinalgError::Input {
        message: String::from_utf8_lossy(&message).into_owned(),
        over_budget: over,
    })
}

/// A rank's rows: row offsets from 0, global columns, values.
type Csr = (Vec<usize>, Vec<usize>, Vec<f64>);

/// Bytes of one piece of [`Pieces`]: a multiple of a triple's 24 bytes.
const PIECE: usize = 24 << 16;

/// A byte stream for one rank, kept as pieces of exactly `piece` bytes (the last one
/// shorter), each allocated at its full size: growing it never holds twice its length, as a
/// `Vec` grown by pushes may, and [`exchange`] sends it piece by piece.
#[derive(Debug, Clone, Default, PartialEq)]
struct Pieces {
    bufs: Vec<Vec<u8>>,
    len: usize,
}

impl Pieces {
    /// `bytes` in pieces of `piece` bytes (tests build streams of other piece sizes).
    #[cfg(test)]
    fn from_vec(bytes: &[u8], piece: usize) -> Self {
        Self {
            bufs: bytes.chunks(piece.max(1)).map(<[u8]>::to_vec).collect(),
            len: bytes.len(),
        }
    }

    /// Append `bytes` (at most [`PIECE`], dividing it), in pieces of [`PIECE`] bytes.
    fn push(&mut self, bytes: &[u8]) {
        match self.bufs.last_mut() {
            Some(last) if last.len() + bytes.len() <= PIECE => {
                // The first piece grows by doubling up to PIECE (a short stream stays
                // small); later ones are allocated whole.
                if last.len() + bytes.len() > last.capacity() {
                    let more = last.capacity().max(bytes.len()).min(PIECE - last.len());
                    last.reserve_exact(more);
                }
                last.extend_from_slice(bytes);
            }
            None => self.bufs.push(bytes.to_vec()),
            Some(_) => {
                let mut piece = Vec::with_capacity(PIECE);
                piece.extend_from_slice(bytes);
                self.bufs.push(piece);
            }
        }
        self.len += bytes.len();
    }

    /// The stream in one buffer.
    fn concat(&self) -> Vec<u8> {
        self.bufs.concat()
    }
}

fn push_triple(buf: &mut Pieces, r: usize, c: usize, v: f64) {
    let mut t = [0u8; 24];
    t[..8].copy_from_slice(&(r as u64).to_le_bytes());
    t[8..16].copy_from_slice(&(c as u64).to_le_bytes());
    t[16..].copy_from_slice(&v.to_le_bytes());
    buf.push(&t);
}

fn word(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// The `(row, col, value)` triples of streams made by [`push_triple`], in order (every
/// piece holds whole triples).
fn triples(blocks: &[Pieces]) -> impl Iterator<Item = (usize, usize, f64)> + '_ {
    blocks.iter().flat_map(|b| &b.bufs).flat_map(|b| {
        b.chunks_exact(24).map(|t| {
            (
                word(&t[..8]) as usize,
                word(&t[8..16]) as usize,
                f64::from_bits(word(&t[16..])),
            )
        })
    })
}

/// Pieces a rank has in flight to one partner in [`exchange`].
const WINDOW: usize = 4;

/// Send `out[q]` to rank `q` (each may be empty, `out[me]` stays here) and return what each
/// rank sent here, in rank order. One all-to-all of `P` counts, then rounds `k = 1..P`: send
/// to `me + k`, receive from `me - k` (mod `P`; a round with nothing either way is skipped),
/// in steps of at most [`WINDOW`] pieces. In a step a rank posts its pieces, receives its
/// partner's, acknowledges them with an empty message (on a tag of its own), then waits for
/// its own pieces' acknowledgement: a credit, so at most a window is in flight whatever the
/// communicator buffers, and every wait is met (each rank posts before it waits). A rank
/// holds its streams plus a window, never a second copy of a stream (each piece is freed
/// once sent; messages between two ranks with one tag arrive in order).
fn exchange<C: Communicator + ?Sized>(
    comm: &C,
    out: Vec<Pieces>,
) -> Result<Vec<Pieces>, LinalgError> {
    exchange_in(comm, out, PIECE)
}

/// [`exchange`] of streams in pieces of `piece` bytes (all full but the last).
fn exchange_in<C: Communicator + ?Sized>(
    comm: &C,
    mut out: Vec<Pieces>,
    piece: usize,
) -> Result<Vec<Pieces>, LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    let lens: Vec<f64> = out.iter().map(|b| b.len as f64).collect();
    let mut from = vec![0.0; p];
    comm.alltoall_f64(&lens, &mut from)?;
    let tag = comm.next_collective_tag();
    let ack_tag = comm.next_collective_tag();
    let mut got: Vec<Pieces> = vec![Pieces::default(); p];
    got[me] = std::mem::take(&mut out[me]);
    for k in 1..p {
        let (dst, src) = ((me + k) % p, (me + p - k) % p);
        let mut sends = std::mem::take(&mut out[dst].bufs).into_iter();
        let len = from[src] as usize;
        let mut left = len.div_ceil(piece.max(1));
        let stream = &mut got[src];
        loop {
            let mut reqs = Vec::with_capacity(WINDOW);
            for buf in sends.by_ref().take(WINDOW) {
                // `isend` holds no borrow of the data past the call: the piece is freed.
                reqs.push(comm.isend(dst, tag, &buf)?);
            }
            let take = left.min(WINDOW);
            for _ in 0..take {
                let mut buf = Vec::new();
                comm.wait_recv_with(comm.irecv(src, tag)?, &mut |msg| {
                    buf.extend_from_slice(msg);
                    Ok(())
                })?;
                stream.len += buf.len();
                stream.bufs.push(buf);
            }
            left -= take;
            if take > 0 {
                comm.wait_send(comm.isend(src, ack_tag, &[])?)?;
            }
            let sent = reqs.len();
            if sent > 0 {
                comm.wait_recv(comm.irecv(dst, ack_tag)?, &mut [])?;
            }
            for req in reqs {
                comm.wait_send(req)?;
            }
            if sent == 0 && take == 0 {
                break;
            }
        }
        if stream.len != len {
            return Err(CommError::LengthMismatch {
                rank: me,
                from: src,
                expected: len,
                got: stream.len,
            }
            .into());
        }
    }
    Ok(got)
}

/// This rank's rows `rows` in CSR from the triples received (in file order) of the file `h`:
/// as `MtxMatrix::to_csr_full` builds them ([`assemble_row`]: a stable sort by column,
/// duplicates summed in order), and with its error, for the first of these rows with
/// duplicates whose sum is not finite. The blocks are freed once scattered into rows.
fn assemble(h: &CoordinateHeader, rows: Range<usize>, got: Vec<Pieces>) -> Result<Csr, MtxError> {
    let n = rows.len();
    let mut indptr = vec![0usize; n + 1];
    for (r, _, _) in triples(&got) {
        indptr[r - rows.start + 1] += 1;
    }
    for i in 0..n {
        indptr[i + 1] += indptr[i];
    }
    let mut pairs = vec![(0usize, 0.0f64); indptr[n]];
    let mut cursor = indptr.clone();
    for (r, c, v) in triples(&got) {
        let i = r - rows.start;
        pairs[cursor[i]] = (c, v);
        cursor[i] += 1;
    }
    drop((cursor, got));
    let (mut cols, mut vals) = (
        Vec::with_capacity(pairs.len()),
        Vec::with_capacity(pairs.len()),
    );
    let mut out_ptr = vec![0usize; n + 1];
    for i in 0..n {
        assemble_row(
            &h.source_name,
            (rows.start + i, h.symmetry),
            &mut pairs[indptr[i]..indptr[i + 1]],
            (&mut cols, &mut vals),
        )?;
        out_ptr[i + 1] = cols.len();
    }
    Ok((out_ptr, cols, vals))
}

/// [`Partition::nnz`] of the assembled matrix, from each rank's rows of `even` (their row
/// pointer `indptr`): rank `r`'s block ends at the first row whose running nonzero count
/// reaches `r * nnz / P`, so the start of block `r` is the number of rows whose running
/// count ends at or below that target, counted by each rank over its own rows.
fn nnz_partition<C: Communicator + ?Sized>(
    comm: &C,
    even: &Partition,
    indptr: &[usize],
) -> Result<Partition, LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    let mut totals = vec![0i64; p];
    totals[me] = indptr.last().copied().unwrap_or(0) as i64;
    comm.allreduce_i64(&mut totals, Op::Sum)?;
    let offset = totals[..me].iter().sum::<i64>() as u128;
    let total = totals.iter().sum::<i64>() as u128;
    // starts[r - 1] for r in 1..p: my rows ending at or below the target.
    let mut starts = vec![0i64; p.saturating_sub(1)];
    for (r, s) in (1..p).zip(starts.iter_mut()) {
        let target = total * r as u128 / p as u128;
        *s = indptr[1..].partition_point(|&e| offset + e as u128 <= target) as i64;
    }
    comm.allreduce_i64(&mut starts, Op::Sum)?;
    let n = even.n();
    let mut counts = Vec::with_capacity(p);
    let mut prev = 0usize;
    for &s in &starts {
        let s = (s as usize).max(prev);
        counts.push(s - prev);
        prev = s;
    }
    counts.push(n - prev);
    Ok(Partition::from_counts(counts))
}

/// Move whole rows from partition `from` to partition `to` (contiguous blocks both): each
/// rank sends the part of its block that another rank owns under `to`.
fn move_rows<C: Communicator + ?Sized>(
    comm: &C,
    from: &Partition,
    to: &Partition,
    (indptr, cols, vals): Csr,
) -> Result<Csr, LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    let mine = from.range(me);
    let mut out: Vec<Pieces> = vec![Pieces::default(); p];
    for (q, buf) in out.iter_mut().enumerate() {
        let theirs = to.range(q);
        let (lo, hi) = (mine.start.max(theirs.start), mine.end.min(theirs.end));
        if lo >= hi {
            continue;
        }
        let (a, b) = (lo - mine.start, hi - mine.start);
        // Word by word: the pieces stay full (a piece is a multiple of 8 bytes).
        for i in a..b {
            buf.push(&((indptr[i + 1] - indptr[i]) as u64).to_le_bytes());
        }
        for k in indptr[a]..indptr[b] {
            buf.push(&(cols[k] as u64).to_le_bytes());
            buf.push(&vals[k].to_le_bytes());
        }
    }
    drop((indptr, cols, vals));
    let got = exchange(comm, out)?;
    // The blocks arrive in rank order, so their rows are in order; each holds
    // `hi - lo` row lengths, then the entries.
    let n = to.range(me).len();
    let mut indptr = Vec::with_capacity(n + 1);
    indptr.push(0);
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for (q, block) in got.iter().enumerate() {
        let theirs = from.range(q);
        let ours = to.range(me);
        let rows = ours
            .end
            .min(theirs.end)
            .saturating_sub(ours.start.max(theirs.start));
        if rows == 0 {
            continue;
        }
        let block = block.concat();
        let (lens, entries) = block.split_at(8 * rows);
        for len in lens.chunks_exact(8) {
            let last = indptr.last().copied().unwrap_or(0);
            indptr.push(last + word(len) as usize);
        }
        for e in entries.chunks_exact(16) {
            cols.push(word(&e[..8]) as usize);
            vals.push(f64::from_bits(word(&e[8..])));
        }
    }
    Ok((indptr, cols, vals))
}

/// `castack_sparse::check::check_symmetric` over the ranks: each off-diagonal entry `(i, j, v)`
/// goes to the owner of row `j`, which compares it with its own `(j, i)`; the ranks agree on
/// the first offending entry in row-major order.
fn check_symmetric_dist<C: Communicator + ?Sized>(
    comm: &C,
    m: &LocalMatrix,
) -> Result<(), LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    let rows = m.part.range(me);
    let mut out: Vec<Pieces> = vec![Pieces::default(); p];
    for i in 0..rows.len() {
        for k in m.indptr[i]..m.indptr[i + 1] {
            let (gi, j) = (rows.start + i, m.cols[k]);
            if j != gi {
                push_triple(&mut out[m.part.owner(j)], j, gi, m.vals[k]);
            }
        }
    }
    let got = exchange(comm, out)?;
    // Mirrors by row, then column (each (row, col) at most once: entries are summed).
    let mut mirrors: Vec<(usize, usize, f64)> = triples(&got).collect();
    drop(got);
    mirrors.sort_unstable_by_key(|&(r, c, _)| (r, c));
    let off = |v: f64, m: f64| (v - m).abs() > 1e-12 * v.abs().max(m.abs());
    // The first offence here: (row, col, value, mirror), 0-based, row-major.
    let mut worst: Option<(usize, usize, f64, f64)> = None;
    let mut note = |cand: (usize, usize, f64, f64)| {
        if worst.is_none_or(|w| (cand.0, cand.1) < (w.0, w.1)) {
            worst = Some(cand);
        }
    };
    let mut t = mirrors.iter().peekable();
    for i in 0..rows.len() {
        let gi = rows.start + i;
        for k in m.indptr[i]..m.indptr[i + 1] {
            let (j, v) = (m.cols[k], m.vals[k]);
            // Mirrors of this row before column j have no entry of ours: (j', gi) stored,
            // (gi, j') not.
            while let Some(&&(r, c, w)) = t.peek() {
                if r < gi || (r == gi && c < j) {
                    if off(w, 0.0) {
                        note((c, r, w, 0.0));
                    }
                    t.next();
                } else {
                    break;
                }
            }
            if j == gi {
                continue;
            }
            let mirror = match t.peek() {
                Some(&&(r, c, w)) if r == gi && c == j => {
                    t.next();
                    w
                }
                _ => 0.0,
            };
            if off(v, mirror) {
                note((gi, j, v, mirror));
            }
        }
    }
    for &(r, c, w) in t {
        if off(w, 0.0) {
            note((c, r, w, 0.0));
        }
    }
    // Agree on the first: its row, then its column, then the lowest rank holding it sends
    // its values.
    let none = i64::MAX;
    let mut key = [worst.map_or(none, |w| w.0 as i64)];
    comm.allreduce_i64(&mut key, Op::Min)?;
    if key[0] == none {
        return Ok(());
    }
    let row = key[0];
    let mut col = [worst
        .filter(|w| w.0 as i64 == row)
        .map_or(none, |w| w.1 as i64)];
    comm.allreduce_i64(&mut col, Op::Min)?;
    let holds = worst.is_some_and(|w| w.0 as i64 == row && w.1 as i64 == col[0]);
    let mut holder = [if holds { me as i64 } else { p as i64 }];
    comm.allreduce_i64(&mut holder, Op::Min)?;
    let mut vals = [0.0; 2];
    if let (true, Some(w)) = (holder[0] == me as i64, worst) {
        vals = [w.2, w.3];
    }
    comm.bcast_f64(holder[0] as usize, &mut vals)?;
    Err(MatrixError::NotSymmetric {
        row: row as usize + 1,
        col: col[0] as usize + 1,
        value: vals[0],
        mirror: vals[1],
    }
    .into())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use castack_collectives::ThreadUniverse;

    use super::*;

    /// Blocks of every length around the piece size arrive whole and in order, from every
    /// rank to every rank.
    #[test]
    fn an_exchange_in_pieces_delivers_every_block_whole() {
        for p in [1, 2, 3, 4] {
            let got = ThreadUniverse::new(p)
                .unwrap()
                .run(|comm| {
                    let me = comm.rank();
                    // Block for q: (7 me + 3 q) % 11 bytes, each naming its sender and place.
                    let block = |from: usize, to: usize| -> Vec<u8> {
                        (0..(7 * from + 3 * to) % 11)
                            .map(|i| (from * 64 + to * 16 + i) as u8)
                            .collect()
                    };
                    let out: Vec<Pieces> =
                        (0..p).map(|q| Pieces::from_vec(&block(me, q), 4)).collect();
                    let got = exchange_in(comm, out, 4).map_err(|e| e.to_string())?;
                    let want: Vec<Vec<u8>> = (0..p).map(|q| block(q, me)).collect();
                    let got: Vec<Vec<u8>> = got.iter().map(Pieces::concat).collect();
                    Ok::<_, String>(got == want)
                })
                .unwrap();
            assert!(got.iter().all(|r| r == &Ok(true)), "P = {p}: {got:?}");
        }
    }

    /// A compressed file streamed a few entries at a time (many batches, some ranks empty in
    /// each) gives the rows of one batch, and an error past the first batch is the same.
    #[test]
    fn small_batches_give_the_same_rows_and_errors() {
        let mut text =
            String::from("%%MatrixMarket matrix coordinate real symmetric\n% c\n6 6 11\n");
        for i in 1..=6 {
            text.push_str(&format!("{i} {i} 4\n"));
            if i > 1 {
                text.push_str(&format!("{i} {} -1\n", i - 1));
            }
        }
        let bad = text.replace("5 4 -1", "5 4 z");
        let dir = std::env::temp_dir();
        for (k, body) in [text, bad].iter().enumerate() {
            let path = dir.join(format!(
                "castack-read-batches-{}-{k}.mtx.gz",
                std::process::id()
            ));
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(body.as_bytes()).unwrap();
            std::fs::write(&path, gz.finish().unwrap()).unwrap();
            for p in [1, 2, 3, 4] {
                let run = |batch| {
                    ThreadUniverse::new(p)
                        .unwrap()
                        .run(|comm| {
                            read_batched(
                                comm,
                                &path,
                                PartitionKind::Nnz,
                                (MemBudget::unlimited(), batch),
                            )
                            .map_err(|e| e.to_string())
                        })
                        .unwrap()
                };
                let (one, small) = (run(BATCH), run(2));
                assert_eq!(one, small, "P = {p}");
                if k == 1 {
                    assert!(
                        one.iter().all(|r| r
                            .as_ref()
                            .is_err_and(|e| e.ends_with(":12: invalid value 'z'"))),
                        "{one:?}"
                    );
                } else {
                    assert!(one.iter().all(Result::is_ok), "{one:?}");
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
}
