//! Parallel input (issue #27): `read_matrix_market_dist` over 1 to 5 thread ranks against the
//! whole-file path (`read_matrix_market_path_within`, `check_spd_storage`, `to_csr_full`,
//! `check_symmetric`, then `Partition::rows` / `Partition::nnz`): the same rows bit for bit,
//! and on malformed files the same one-line error on every rank, line numbers included,
//! wherever the rank boundaries fall.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use castack_collectives::ThreadUniverse;
use castack_linalg::sparse::check::{check_spd_storage, check_symmetric};
use castack_linalg::sparse::gen::SplitMix64;
use castack_linalg::sparse::io::{
    read_matrix_market_path_within, read_vector_part_path_within, read_vector_path_within,
};
use castack_linalg::{read_matrix_market_dist, LocalMatrix};
use castack_linalg::{LinalgError, MemBudget, Partition, PartitionKind};
use sprs::CsMat;

/// A file in the temporary folder, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(text: &[u8]) -> Self {
        Self::named(text, "mtx")
    }

    /// `text` in a file of extension `ext` (`gz`: compressed).
    fn named(text: &[u8], ext: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "castack-dist-read-{}-{}.{ext}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if ext == "gz" {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(text).unwrap();
            std::fs::write(&path, gz.finish().unwrap()).unwrap();
        } else {
            std::fs::write(&path, text).unwrap();
        }
        Temp(path)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The whole-file path's matrix, or its error's message.
fn whole(path: &Path) -> Result<CsMat<f64>, String> {
    let mm =
        read_matrix_market_path_within(path, MemBudget::unlimited()).map_err(|e| e.to_string())?;
    check_spd_storage(&mm).map_err(|e| e.to_string())?;
    let a = mm.to_csr_full().map_err(|e| e.to_string())?;
    check_symmetric(a.view()).map_err(|e| e.to_string())?;
    Ok(a)
}

fn dist(path: &Path, p: usize, kind: PartitionKind) -> Vec<Result<LocalMatrix, LinalgError>> {
    ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| read_matrix_market_dist(comm, path, kind, MemBudget::unlimited()))
        .unwrap()
}

/// Every rank count 1..=5 and both partitions give the whole-file result: the same rows,
/// bits and partition, or the same message on every rank; read in byte ranges (a plain
/// file) and streamed by rank 0 (the same text compressed).
fn agrees(text: &[u8]) {
    agrees_as(text, "mtx");
    agrees_as(text, "gz");
}

fn agrees_as(text: &[u8], ext: &str) {
    let file = Temp::named(text, ext);
    let reference = whole(&file.0);
    for p in 1..=5 {
        for kind in [PartitionKind::Rows, PartitionKind::Nnz] {
            let got = dist(&file.0, p, kind);
            match &reference {
                Ok(a) => {
                    let part = match kind {
                        PartitionKind::Rows => Partition::rows(a.rows(), p),
                        PartitionKind::Nnz => Partition::nnz(a.indptr().raw_storage(), p),
                    };
                    let indptr = a.indptr();
                    let indptr = indptr.raw_storage();
                    for (rank, m) in got.into_iter().enumerate() {
                        let m = m.unwrap_or_else(|e| panic!("P = {p} rank {rank}: {e}"));
                        assert_eq!(m.part.counts(), part.counts(), "P = {p} {kind:?}");
                        assert_eq!(m.nnz, a.nnz());
                        let r = part.range(rank);
                        let (lo, hi) = (indptr[r.start], indptr[r.end]);
                        let want_ptr: Vec<usize> =
                            indptr[r.start..=r.end].iter().map(|k| k - lo).collect();
                        assert_eq!(m.indptr, want_ptr, "P = {p} rank {rank}");
                        assert_eq!(m.cols, &a.indices()[lo..hi], "P = {p} rank {rank}");
                        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&m.vals),
                            bits(&a.data()[lo..hi]),
                            "P = {p} rank {rank}"
                        );
                    }
                }
                Err(want) => {
                    for (rank, m) in got.into_iter().enumerate() {
                        let e = m.err().unwrap_or_else(|| {
                            panic!("P = {p} rank {rank}: read, whole-file path says {want}")
                        });
                        assert_eq!(&e.to_string(), want, "P = {p} {kind:?} rank {rank} {ext}");
                    }
                }
            }
        }
    }
}

/// A 2-D Poisson-like matrix of order `n * n` in `storage` with `dups` duplicate-split
/// entries, comments and blank lines between entries, shuffled by `seed`.
fn matrix_text(n: usize, storage: &str, seed: u64, crlf: bool) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let mut entries: Vec<(usize, usize, String)> = Vec::new();
    let id = |i: usize, j: usize| i * n + j;
    for i in 0..n {
        for j in 0..n {
            let r = id(i, j);
            let d = 4.0 + rng.next_f64();
            // The diagonal split in three of unequal sizes: summed in file order, the
            // association decides the last bits.
            let (a, b) = (d * 0.1 * rng.next_f64(), d / 3.0);
            entries.push((r, r, format!("{a}")));
            entries.push((r, r, format!("{b}")));
            entries.push((r, r, format!("{}", d - a - b)));
            for (ii, jj) in [(i + 1, j), (i, j + 1)] {
                if ii < n && jj < n {
                    let c = id(ii, jj);
                    let v = -1.0 - 0.25 * rng.next_f64();
                    entries.push((c, r, format!("{v:e}")));
                    if storage == "general" {
                        entries.push((r, c, format!("{v:e}")));
                    }
                }
            }
        }
    }
    // Shuffle (Fisher-Yates) so rows are spread over the file.
    for k in (1..entries.len()).rev() {
        let m = (rng.next_u64() % (k as u64 + 1)) as usize;
        entries.swap(k, m);
    }
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut s = format!(
        "%%MatrixMarket matrix coordinate real {storage}{nl}% a comment{nl}{} {} {}{nl}",
        n * n,
        n * n,
        entries.len()
    );
    for (k, (r, c, v)) in entries.iter().enumerate() {
        if k % 7 == 3 {
            s.push_str(&format!("% comment between entries{nl}{nl}"));
        }
        s.push_str(&format!("{} {} {v}{nl}", r + 1, c + 1));
    }
    s.push_str(&format!("% trailing comment{nl}"));
    s.into_bytes()
}

#[test]
fn rows_are_the_whole_file_paths_bit_for_bit() {
    agrees(&matrix_text(5, "symmetric", 1, false));
    agrees(&matrix_text(4, "general", 2, true));
    agrees(&matrix_text(1, "symmetric", 3, false));
    // Pattern entries, and a file whose last line has no terminator.
    agrees(b"%%MatrixMarket matrix coordinate pattern symmetric\n3 3 4\n1 1\n2 2\n3 2\n3 3");
    // More ranks than rows, and more ranks than lines.
    agrees(b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.5\n2 2 3\n");
}

#[test]
fn malformed_files_fail_with_the_whole_file_message_on_every_rank() {
    let cases: [&[u8]; 16] = [
        b"",
        b"%%MatrixMarket matrix array real general\n2 1\n1\n2\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n% only comments\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n2 2 x\n3 3 1\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n2 2 2\n3 3 1 7\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n1 2 2\n3 3 1\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n4 2 2\n3 3 1\n",
        // Too many entries: an extra one, an extra malformed one, one after comments.
        b"%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n2 2 1\n2 1 1\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n2 2 1\nbad\n1 1 1\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n% c\n\n2 2 1\n%\n\n1 1 1\n",
        // Too few, with trailing comments.
        b"%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 1\n2 2 1\n% c\n3 3 1\n%\n",
        // Not square, too few entries for the diagonal.
        b"%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1\n2 2 1\n",
        b"%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n1 1 1\n3 3 1\n",
        // Asymmetric general files: a value mismatch, a lower entry without its mirror.
        b"%%MatrixMarket matrix coordinate real general\n3 3 5\n1 1 2\n2 2 2\n3 3 2\n1 3 -1\n3 1 -2\n",
        b"%%MatrixMarket matrix coordinate real general\n3 3 4\n3 2 -1\n1 1 2\n2 2 2\n3 3 2\n",
        // Size line problems.
        b"%%MatrixMarket matrix coordinate real symmetric\n3 3\n",
    ];
    for text in cases {
        agrees(text);
    }
    // A line longer than the reader takes, inside the entries.
    let mut long = b"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n".to_vec();
    long.extend(std::iter::repeat_n(
        b'7',
        castack_linalg::sparse::io::MAX_LINE_BYTES + 10,
    ));
    long.extend_from_slice(b"\n2 2 1\n3 3 1\n");
    agrees(&long);
    // One line of three times that after the size line, no terminator: the ranks whose
    // share starts inside it stop looking for its end.
    let mut huge = b"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n".to_vec();
    huge.extend(std::iter::repeat_n(
        b'1',
        3 * castack_linalg::sparse::io::MAX_LINE_BYTES,
    ));
    agrees(&huge);
}

/// A named pipe is streamed by rank 0 alone (it can be read once): an `array` file through
/// it fails with the whole-file reader's message, on every rank, without opening it again.
#[test]
fn a_pipe_is_read_once_by_rank_0() {
    let text: &[u8] = b"%%MatrixMarket matrix array real general\n2 1\n1\n2\n";
    let file = Temp::new(text);
    let want = read_matrix_market_path_within(&file.0, MemBudget::unlimited())
        .unwrap_err()
        .to_string()
        .replace(&file.0.display().to_string(), "PATH");
    let fifo = std::env::temp_dir().join(format!("castack-dist-read-{}.fifo", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("no mkfifo here: skipped");
        return;
    }
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(&fifo, text))
    };
    let got = dist(&fifo, 3, PartitionKind::Rows);
    writer.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&fifo);
    for (rank, r) in got.into_iter().enumerate() {
        let e = r
            .err()
            .unwrap_or_else(|| panic!("rank {rank}: read an array as a matrix"));
        assert_eq!(
            e.to_string().replace(&fifo.display().to_string(), "PATH"),
            want,
            "rank {rank}"
        );
    }
}

/// Seeded mutations of valid files (a byte changed, a line dropped or doubled): every one
/// reads or fails as the whole file does, on 1 to 5 ranks. `CASTACK_DIST_READ_CASES` sets
/// the number of mutations (default 40; a longer sweep for a change to the reader).
#[test]
fn mutated_files_agree_with_the_whole_file_path() {
    let cases: usize = std::env::var("CASTACK_DIST_READ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let bases = [
        matrix_text(3, "general", 7, false),
        matrix_text(3, "symmetric", 8, true),
        b"%%MatrixMarket matrix coordinate pattern symmetric\n4 4 6\n1 1\n2 2\n3 3\n4 4\n2 1\n4 3\n"
            .to_vec(),
    ];
    let mut rng = SplitMix64::new(2711);
    for case in 0..cases {
        let mut text = bases[case % bases.len()].clone();
        let at = (rng.next_u64() % text.len() as u64) as usize;
        match rng.next_u64() % 3 {
            0 => text[at] = b"x 9-.\n%"[(rng.next_u64() % 7) as usize],
            1 => {
                let end = text[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(text.len(), |e| at + e + 1);
                text.drain(at..end);
            }
            _ => {
                let start = text[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |s| s + 1);
                let end = text[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(text.len(), |e| at + e + 1);
                let line = text[start..end].to_vec();
                text.splice(end..end, line);
            }
        }
        agrees(&text);
    }
}

#[test]
fn a_vector_part_is_its_slice_of_the_whole_vector() {
    let text = b"%%MatrixMarket matrix array real general\n% c\n5 1\n1\n2.5\n\n3\n-4e1\n5\n";
    let file = Temp::new(text);
    let all = read_vector_path_within(&file.0, MemBudget::unlimited()).unwrap();
    for (lo, hi) in [(0, 5), (1, 3), (4, 5), (2, 2), (3, 9)] {
        let (len, part) =
            read_vector_part_path_within(&file.0, lo..hi, MemBudget::unlimited()).unwrap();
        assert_eq!(len, 5);
        assert_eq!(part, all[lo..hi.min(5)]);
    }
    let bad = Temp::new(b"%%MatrixMarket matrix array real general\n3 1\n1\nx\n3\n");
    let whole = read_vector_path_within(&bad.0, MemBudget::unlimited()).unwrap_err();
    let part = read_vector_part_path_within(&bad.0, 0..1, MemBudget::unlimited()).unwrap_err();
    assert_eq!(whole.to_string(), part.to_string());
    // Only the kept values count against the budget.
    read_vector_part_path_within(&file.0, 0..2, MemBudget::new(16)).unwrap();
    assert!(read_vector_part_path_within(&file.0, 0..3, MemBudget::new(16)).is_err());
}

/// Issue 47, item 4: duplicates, each finite, whose sum in file order overflows are the
/// whole-file path's input error (`to_csr_full`'s: the first such position in row-major
/// order, of the lower triangle in symmetric storage, and its values), on every rank, on
/// one rank and more, however the rows fall; not a matrix of infinities that fails later as
/// a breakdown.
#[test]
fn duplicates_summing_past_the_largest_float_fail_on_every_rank() {
    let cases: [(&[u8], &str); 4] = [
        // The file.
        (
            b"%%MatrixMarket matrix coordinate real symmetric\n2 2 4\n1 1 4\n2 2 4\n\
              2 1 1e308\n2 1 1e308\n",
            "duplicate entries at (2, 1) sum to inf: the 2nd of them in file order adds 1e308 to 1e308",
        ),
        // A general (symmetric) file: (1, 2) comes first in row-major order.
        (
            b"%%MatrixMarket matrix coordinate real general\n2 2 6\n1 1 4\n2 2 4\n\
              2 1 -1e308\n2 1 -1e308\n1 2 -1e308\n1 2 -1e308\n",
            "duplicate entries at (1, 2) sum to -inf: the 2nd of them in file order adds -1e308 to -1e308",
        ),
        // Two positions in later rows, between comments: (5, 4), stored in row 5, is
        // named, not its mirror (4, 5) of row 4 (another rank's on 5 ranks), nor (6, 6)
        // (which comes first in the file).
        (
            b"%%MatrixMarket matrix coordinate real symmetric\n% c\n6 6 12\n\
              6 6 1e308\n% c\n\n6 6 1e308\n1 1 4\n2 2 4\n3 3 4\n4 4 4\n5 5 4\n\
              5 4 1.5e308\n% c\n5 4 -1e308\n5 4 1e308\n5 4 1e308\n2 1 -1\n",
            "duplicate entries at (5, 4) sum to inf: the 4th of them in file order adds 1e308 to 1.5e308",
        ),
        // The same in rows split over every rank: a 10 x 10 diagonal, (10, 1) overflows.
        (
            b"%%MatrixMarket matrix coordinate real symmetric\n10 10 12\n\
              1 1 1\n2 2 1\n3 3 1\n4 4 1\n5 5 1\n10 1 1.7976931348623157e308\n\
              6 6 1\n7 7 1\n8 8 1\n9 9 1\n10 10 1\n10 1 1e292\n",
            "duplicate entries at (10, 1) sum to inf: the 2nd of them in file order adds 1e292 to 1.7976931348623157e308",
        ),
    ];
    for (text, tail) in cases {
        let file = Temp::new(text);
        let want = format!("{}: {tail}", file.0.display());
        assert_eq!(whole(&file.0).err().as_deref(), Some(want.as_str()));
        for p in [1, 2, 3] {
            for (rank, r) in dist(&file.0, p, PartitionKind::Rows)
                .into_iter()
                .enumerate()
            {
                match r {
                    Err(LinalgError::Input {
                        message,
                        over_budget: false,
                    }) => assert_eq!(message, want, "P = {p} rank {rank}"),
                    other => panic!("P = {p} rank {rank}: {other:?}"),
                }
            }
        }
        // Every rank count and partition, byte ranges and a stream: the same message.
        agrees(text);
    }
    // At the edge: f64::MAX plus less than half its last place is f64::MAX, and reads.
    let edge = b"%%MatrixMarket matrix coordinate real symmetric\n2 2 4\n1 1 4\n2 2 4\n\
                 2 1 1.7976931348623157e308\n2 1 9e291\n";
    let file = Temp::new(edge);
    let a = whole(&file.0).unwrap();
    assert_eq!(
        (a.get(1, 0), a.get(0, 1)),
        (Some(&f64::MAX), Some(&f64::MAX))
    );
    agrees(edge);
}
