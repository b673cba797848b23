//! Fuzz-like property tests of the Matrix Market reader: valid small files,
//! randomly mutated (bytes deleted, inserted, replaced; truncation; lines
//! duplicated or deleted; tokens swapped; huge or odd numbers inserted), must
//! yield `Ok` or a one-line `Err` naming the source, never a panic, and
//! quickly. Seeded, so every run tests the same cases.

use std::time::{Duration, Instant};

use castack_sparse::io::{read_matrix_market, read_mtx, read_vector, MtxData, MtxError, Symmetry};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;

const NAME: &str = "fuzz.mtx";

/// Per-case time limit: inputs are tiny, so anything slow means an
/// allocation or loop sized by a declared count.
const CASE_LIMIT: Duration = Duration::from_secs(2);

/// Largest row count for which `to_csr_full` is exercised (it allocates a
/// row pointer of that size, legitimately).
const CSR_ROWS_LIMIT: usize = 1 << 20;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x6d74_785f_667a_7a31),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A valid file: `(text, expected stored entries)`.
#[derive(Debug, Clone)]
struct Valid {
    text: String,
    entries: usize,
}

fn value_token() -> impl Strategy<Value = String> {
    prop_oneof![
        (-1000i64..1000).prop_map(|i| i.to_string()),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| format!("{v:e}")),
        (-1e6f64..1e6).prop_map(|v| format!("{v}")),
    ]
}

fn coordinate_file() -> impl Strategy<Value = Valid> {
    (
        1usize..6,
        1usize..6,
        any::<bool>(),
        0u8..3,
        prop::collection::vec((any::<Index>(), any::<Index>(), value_token()), 0..12),
        any::<bool>(),
    )
        .prop_map(|(m, n, symmetric, field, raw, comments)| {
            let n = if symmetric { m } else { n };
            let (field_name, pattern, integer) = match field {
                0 => ("real", false, false),
                1 => ("integer", false, true),
                _ => ("pattern", true, false),
            };
            let sym = if symmetric { "symmetric" } else { "general" };
            let mut text = format!("%%MatrixMarket matrix coordinate {field_name} {sym}\n");
            if comments {
                text.push_str("% generated\n%\n\n");
            }
            text.push_str(&format!("{m} {n} {}\n", raw.len()));
            for (i, j, v) in &raw {
                let mut r = i.index(m) + 1;
                let mut c = j.index(n) + 1;
                if symmetric && c > r {
                    std::mem::swap(&mut r, &mut c);
                }
                if pattern {
                    text.push_str(&format!("{r} {c}\n"));
                } else if integer {
                    let iv: i64 = v.parse::<f64>().map(|f| f as i64).unwrap_or(1);
                    text.push_str(&format!("{r} {c} {iv}\n"));
                } else {
                    text.push_str(&format!("{r} {c} {v}\n"));
                }
            }
            Valid {
                text,
                entries: raw.len(),
            }
        })
}

fn array_file() -> impl Strategy<Value = Valid> {
    (1usize..5, 1usize..4)
        .prop_flat_map(|(m, n)| {
            (
                Just(m),
                Just(n),
                prop::collection::vec(value_token(), m * n..=m * n),
            )
        })
        .prop_map(|(m, n, vals)| {
            let mut text = format!("%%MatrixMarket matrix array real general\n{m} {n}\n");
            for v in &vals {
                text.push_str(v);
                text.push('\n');
            }
            Valid {
                text,
                entries: m * n,
            }
        })
}

fn valid_file() -> impl Strategy<Value = Valid> {
    prop_oneof![3 => coordinate_file(), 1 => array_file()]
}

const ODD_TOKENS: &[&str] = &[
    "999999999999999999999",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "4294967296",
    "1000000000000",
    "-1",
    "0",
    "-0",
    "1e308",
    "1e400",
    "-1e-400",
    "nan",
    "inf",
    "1.0D+00",
    "0x10",
    "%%MatrixMarket matrix coordinate real general",
    "%%MatrixMarket matrix array real general",
    "\n",
    "\r\n",
    "%",
    " ",
    "\t",
    "\u{feff}",
    "\u{e9}",
];

#[derive(Debug, Clone)]
enum Mutation {
    DeleteByte(Index),
    InsertByte(Index, u8),
    ReplaceByte(Index, u8),
    Truncate(Index),
    DuplicateLine(Index),
    DeleteLine(Index),
    SwapTokens(Index, Index),
    InsertToken(Index, Index),
    ReplaceToken(Index, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::DeleteByte),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::InsertByte(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::ReplaceByte(i, b)),
        any::<Index>().prop_map(Mutation::Truncate),
        any::<Index>().prop_map(Mutation::DuplicateLine),
        any::<Index>().prop_map(Mutation::DeleteLine),
        (any::<Index>(), any::<Index>()).prop_map(|(i, j)| Mutation::SwapTokens(i, j)),
        (any::<Index>(), any::<Index>()).prop_map(|(i, t)| Mutation::InsertToken(i, t)),
        (any::<Index>(), any::<Index>()).prop_map(|(i, t)| Mutation::ReplaceToken(i, t)),
    ]
}

/// Byte ranges of the whitespace-separated tokens of `bytes`.
fn token_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, b) in bytes.iter().enumerate() {
        let ws = b.is_ascii_whitespace();
        match (start, ws) {
            (None, false) => start = Some(i),
            (Some(s), true) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, bytes.len()));
    }
    spans
}

/// Byte ranges of the lines of `bytes`, terminators included.
fn line_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < bytes.len() {
        spans.push((start, bytes.len()));
    }
    spans
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let len = bytes.len();
    match m {
        Mutation::DeleteByte(i) if len > 0 => {
            bytes.remove(i.index(len));
        }
        Mutation::InsertByte(i, b) => bytes.insert(i.index(len + 1), *b),
        Mutation::ReplaceByte(i, b) if len > 0 => bytes[i.index(len)] = *b,
        Mutation::Truncate(i) => bytes.truncate(i.index(len + 1)),
        Mutation::DuplicateLine(i) => {
            let lines = line_spans(bytes);
            if !lines.is_empty() {
                let (s, e) = lines[i.index(lines.len())];
                let copy = bytes[s..e].to_vec();
                bytes.splice(e..e, copy);
            }
        }
        Mutation::DeleteLine(i) => {
            let lines = line_spans(bytes);
            if !lines.is_empty() {
                let (s, e) = lines[i.index(lines.len())];
                bytes.drain(s..e);
            }
        }
        Mutation::SwapTokens(i, j) => {
            let toks = token_spans(bytes);
            if toks.len() >= 2 {
                let (a, b) = (i.index(toks.len()), j.index(toks.len()));
                let (first, second) = if a <= b { (a, b) } else { (b, a) };
                if first != second {
                    let (s1, e1) = toks[first];
                    let (s2, e2) = toks[second];
                    let t1 = bytes[s1..e1].to_vec();
                    let t2 = bytes[s2..e2].to_vec();
                    bytes.splice(s2..e2, t1);
                    bytes.splice(s1..e1, t2);
                }
            }
        }
        Mutation::InsertToken(i, t) => {
            let tok = ODD_TOKENS[t.index(ODD_TOKENS.len())].as_bytes();
            let at = i.index(len + 1);
            bytes.splice(at..at, tok.iter().copied());
        }
        Mutation::ReplaceToken(i, t) => {
            let toks = token_spans(bytes);
            if !toks.is_empty() {
                let (s, e) = toks[i.index(toks.len())];
                let tok = ODD_TOKENS[t.index(ODD_TOKENS.len())].as_bytes();
                bytes.splice(s..e, tok.iter().copied());
            }
        }
        _ => {}
    }
}

/// Checks what any reader result must satisfy.
fn check_result(result: &Result<MtxData, MtxError>) {
    match result {
        Ok(MtxData::Coordinate(m)) => {
            let n = m.nnz_stored();
            assert_eq!(m.rows().len(), n);
            assert_eq!(m.cols().len(), n);
            assert_eq!(m.values().len(), n);
            for k in 0..n {
                let (r, c) = (m.rows()[k], m.cols()[k]);
                assert!(r < m.nrows() && c < m.ncols());
                assert!(m.values()[k].is_finite());
                if m.symmetry() == Symmetry::Symmetric {
                    assert!(c <= r);
                }
            }
            if m.nrows() <= CSR_ROWS_LIMIT {
                // A small matrix converts, unless duplicates sum past the largest float.
                match m.to_csr_full() {
                    Ok(a) => {
                        assert_eq!((a.rows(), a.cols()), (m.nrows(), m.ncols()));
                        assert!(a.nnz() <= 2 * n);
                        assert!(a.data().iter().all(|v| v.is_finite()));
                    }
                    Err(e @ MtxError::NonFiniteSum { .. }) => {
                        assert!(!e.to_string().contains('\n'), "{e}");
                    }
                    Err(e) => panic!("small matrix does not convert: {e}"),
                }
            } else {
                // Must be an error or a (legitimately large) matrix, never a
                // panic; only huge sizes that cannot be allocated are tried.
                if m.nrows() > usize::MAX / 16 {
                    assert!(m.to_csr_full().is_err());
                }
            }
        }
        Ok(MtxData::Array(d)) => {
            assert_eq!(Some(d.values().len()), d.nrows().checked_mul(d.ncols()));
            assert!(d.values().iter().all(|v| v.is_finite()));
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
            assert!(
                msg.starts_with(NAME),
                "error not naming the source: {msg:?}"
            );
            assert_eq!(e.source_name(), NAME);
            if let Some(line) = e.line() {
                assert!(line >= 1);
                assert!(msg.starts_with(&format!("{NAME}:{line}: ")), "{msg:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(config(4000))]

    #[test]
    fn mutated_files_never_panic(
        valid in valid_file(),
        mutations in prop::collection::vec(mutation(), 1..6),
        keep_banner in any::<bool>(),
    ) {
        // Half the cases leave the banner intact so that mutations reach the
        // size line and entries more often.
        let mut bytes = valid.text.into_bytes();
        let split = if keep_banner {
            bytes.iter().position(|&b| b == b'\n').map_or(0, |p| p + 1)
        } else {
            0
        };
        let mut body = bytes.split_off(split);
        for m in &mutations {
            apply(&mut body, m);
        }
        bytes.append(&mut body);
        let start = Instant::now();
        let result = read_mtx(&bytes[..], NAME);
        check_result(&result);
        // The narrower entry points agree with the general one.
        let sparse = read_matrix_market(&bytes[..], NAME);
        let vector = read_vector(&bytes[..], NAME);
        match &result {
            Ok(MtxData::Coordinate(m)) => {
                prop_assert_eq!(sparse.as_ref().ok(), Some(m));
                prop_assert!(vector.is_err());
            }
            Ok(MtxData::Array(d)) => {
                prop_assert!(sparse.is_err());
                prop_assert_eq!(vector.is_ok(), d.nrows() == 1 || d.ncols() == 1);
            }
            Err(_) => {
                prop_assert!(sparse.is_err());
                prop_assert!(vector.is_err());
            }
        }
        prop_assert!(start.elapsed() < CASE_LIMIT, "slow case: {:?}", start.elapsed());
    }
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn unmutated_files_read_back(valid in valid_file()) {
        let result = read_mtx(valid.text.as_bytes(), NAME);
        check_result(&result);
        match result {
            Ok(MtxData::Coordinate(m)) => prop_assert_eq!(m.nnz_stored(), valid.entries),
            Ok(MtxData::Array(d)) => prop_assert_eq!(d.values().len(), valid.entries),
            Err(e) => prop_assert!(false, "valid file rejected: {}\n{}", e, valid.text),
        }
    }
}
