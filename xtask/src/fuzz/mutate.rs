//! Deterministic mutations of text inputs (Matrix Market files, TOML configs): byte flips,
//! line deletions, duplications, swaps and insertions, numbers replaced by extreme values,
//! size lines declaring huge dimensions, fields swapped within a line, truncation.
//!
//! Each mutation returns a one-line description, saved beside a failing case's inputs so a
//! reproducer says what was done to the seed.

use super::rng::Rng;

/// Values a number may be replaced with: zero, signs, the ends of f64 (overflow, a
/// subnormal), non-finite spellings and the integer widths where indices and counts wrap.
pub(crate) const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1",
    "-0",
    "0.5",
    "1e308",
    "-1e308",
    "1e-320",
    "nan",
    "inf",
    "-inf",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775808",
    "18446744073709551615",
    "1e30",
];

/// Dimensions and entry counts a size line may declare (huge, wrapping, zero).
const HUGE_SIZES: &[&str] = &[
    "0",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "100000000000",
    "2000000000",
    "1000000",
];

/// Lines that may be inserted anywhere.
const INSERTED: &[&str] = &[
    "",
    "%",
    "% comment",
    "1 1 1",
    "0 0 0",
    "-1 -1 1",
    "1 1 nan",
    "2 1 1e308",
    "[compute]",
    "x = 1",
    "\u{0}",
    "\u{e9}\u{20ac}",
    "%%MatrixMarket matrix coordinate real general",
];

/// Bytes a flipped byte may become besides a one-bit flip.
const BYTES: &[u8] = b"\0\xff\n \t-+.e9D%#=[\"";

/// The kinds of mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    FlipByte,
    DeleteLine,
    DuplicateLine,
    SwapLines,
    InsertLine,
    ReplaceNumber,
    HugeSizeLine,
    SwapFields,
    Truncate,
}

/// Every kind, for the weighted pick in [`mutate`].
pub(crate) const KINDS: &[Kind] = &[
    Kind::FlipByte,
    Kind::DeleteLine,
    Kind::DuplicateLine,
    Kind::SwapLines,
    Kind::InsertLine,
    Kind::ReplaceNumber,
    Kind::ReplaceNumber,
    Kind::ReplaceNumber,
    Kind::HugeSizeLine,
    Kind::SwapFields,
    Kind::Truncate,
];

/// Applies `count` random mutations to `text`; returns the result and one description each.
pub(crate) fn mutate(rng: &mut Rng, text: &[u8], count: usize) -> (Vec<u8>, Vec<String>) {
    let mut out = text.to_vec();
    let mut notes = Vec::with_capacity(count);
    for _ in 0..count {
        let kind = *rng.pick(KINDS);
        let (next, note) = apply(rng, kind, &out);
        out = next;
        notes.push(note);
    }
    (out, notes)
}

/// Applies one mutation of the given kind.
pub(crate) fn apply(rng: &mut Rng, kind: Kind, text: &[u8]) -> (Vec<u8>, String) {
    let mut lines = split_lines(text);
    match kind {
        Kind::FlipByte => {
            if text.is_empty() {
                return (
                    vec![*rng.pick(BYTES)],
                    "byte inserted into empty file".into(),
                );
            }
            let mut out = text.to_vec();
            let at = rng.below(out.len());
            let old = out[at];
            out[at] = if rng.one_in(2) {
                old ^ (1 << rng.below(8))
            } else {
                *rng.pick(BYTES)
            };
            if out[at] == old {
                out[at] = old ^ 1;
            }
            let new = out[at];
            (out, format!("byte {at}: {old:#04x} -> {new:#04x}"))
        }
        Kind::DeleteLine => {
            if lines.is_empty() {
                return (Vec::new(), "nothing to delete".into());
            }
            let at = rng.below(lines.len());
            lines.remove(at);
            (join_lines(&lines), format!("line {} deleted", at + 1))
        }
        Kind::DuplicateLine => {
            if lines.is_empty() {
                return (text.to_vec(), "nothing to duplicate".into());
            }
            let at = rng.below(lines.len());
            let copies = if rng.one_in(4) { 100 } else { 1 };
            for _ in 0..copies {
                lines.insert(at, lines[at].clone());
            }
            (
                join_lines(&lines),
                format!("line {} duplicated {copies} time(s)", at + 1),
            )
        }
        Kind::SwapLines => {
            if lines.len() < 2 {
                return (text.to_vec(), "too few lines to swap".into());
            }
            let a = rng.below(lines.len());
            let b = rng.below(lines.len());
            lines.swap(a, b);
            (
                join_lines(&lines),
                format!("lines {} and {} swapped", a + 1, b + 1),
            )
        }
        Kind::InsertLine => {
            let at = rng.below(lines.len() + 1);
            let line = *rng.pick(INSERTED);
            lines.insert(at, line.as_bytes().to_vec());
            (
                join_lines(&lines),
                format!("line {:?} inserted at {}", line, at + 1),
            )
        }
        Kind::ReplaceNumber => {
            let numbers: Vec<(usize, usize)> = lines
                .iter()
                .enumerate()
                .flat_map(|(l, line)| {
                    fields(line)
                        .into_iter()
                        .enumerate()
                        .filter(|(_, f)| looks_numeric(f))
                        .map(move |(i, _)| (l, i))
                })
                .collect();
            if numbers.is_empty() {
                return apply(rng, Kind::FlipByte, text);
            }
            let (l, i) = *rng.pick(&numbers);
            let value = *rng.pick(EXTREMES);
            let mut f = fields(&lines[l]);
            let old = String::from_utf8_lossy(&f[i]).into_owned();
            f[i] = value.as_bytes().to_vec();
            lines[l] = f.join(&b' ');
            (
                join_lines(&lines),
                format!("line {} field {}: {old} -> {value}", l + 1, i + 1),
            )
        }
        Kind::HugeSizeLine => {
            // A Matrix Market size line: the first line after the banner that is not a comment.
            let size_line = lines.iter().enumerate().skip(1).find(|(_, l)| {
                let t = l.trim_ascii();
                !t.is_empty() && !t.starts_with(b"%")
            });
            let Some((at, _)) = size_line else {
                return apply(rng, Kind::ReplaceNumber, text);
            };
            let mut f = fields(&lines[at]);
            if f.is_empty() {
                return apply(rng, Kind::ReplaceNumber, text);
            }
            let i = rng.below(f.len());
            let value = *rng.pick(HUGE_SIZES);
            f[i] = value.as_bytes().to_vec();
            lines[at] = f.join(&b' ');
            (
                join_lines(&lines),
                format!("size line {} field {} -> {value}", at + 1, i + 1),
            )
        }
        Kind::SwapFields => {
            let candidates: Vec<usize> = (0..lines.len())
                .filter(|&l| fields(&lines[l]).len() >= 2)
                .collect();
            if candidates.is_empty() {
                return apply(rng, Kind::FlipByte, text);
            }
            let l = *rng.pick(&candidates);
            let mut f = fields(&lines[l]);
            let a = rng.below(f.len());
            let b = (a + 1 + rng.below(f.len() - 1)) % f.len();
            f.swap(a, b);
            lines[l] = f.join(&b' ');
            (
                join_lines(&lines),
                format!("line {} fields {} and {} swapped", l + 1, a + 1, b + 1),
            )
        }
        Kind::Truncate => {
            let at = rng.below(text.len() + 1);
            (text[..at].to_vec(), format!("truncated to {at} bytes"))
        }
    }
}

/// Whether a field is a number to replace (integers, reals, Fortran `D` exponents).
fn looks_numeric(field: &[u8]) -> bool {
    let s = String::from_utf8_lossy(field);
    let s = s.trim_end_matches(',');
    s.parse::<f64>().is_ok() || s.replace(['d', 'D'], "e").parse::<f64>().is_ok()
}

fn split_lines(text: &[u8]) -> Vec<Vec<u8>> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    body.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect()
}

fn join_lines(lines: &[Vec<u8>]) -> Vec<u8> {
    let mut out = lines.join(&b'\n');
    if !lines.is_empty() {
        out.push(b'\n');
    }
    out
}

fn fields(line: &[u8]) -> Vec<Vec<u8>> {
    line.split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTX: &[u8] =
        b"%%MatrixMarket matrix coordinate real symmetric\n% c\n2 2 3\n1 1 4.0\n2 1 -1\n2 2 4.0\n";

    fn lines(t: &[u8]) -> usize {
        split_lines(t).len()
    }

    #[test]
    fn mutations_repeat_for_a_seed() {
        let a = mutate(&mut Rng::new(11), MTX, 3);
        let b = mutate(&mut Rng::new(11), MTX, 3);
        assert_eq!(a, b);
        assert_eq!(a.1.len(), 3);
        let differs = (0..20).any(|s| mutate(&mut Rng::new(s), MTX, 1).0 != a.0);
        assert!(differs);
    }

    #[test]
    fn line_mutations_change_the_line_count() {
        let mut rng = Rng::new(5);
        let (t, _) = apply(&mut rng, Kind::DeleteLine, MTX);
        assert_eq!(lines(&t), lines(MTX) - 1);
        let (t, note) = apply(&mut rng, Kind::DuplicateLine, MTX);
        assert!(lines(&t) > lines(MTX), "{note}");
        let (t, _) = apply(&mut rng, Kind::InsertLine, MTX);
        assert_eq!(lines(&t), lines(MTX) + 1);
        let (t, _) = apply(&mut rng, Kind::Truncate, MTX);
        assert!(t.len() <= MTX.len() && MTX.starts_with(&t));
    }

    #[test]
    fn number_replacement_puts_an_extreme_value() {
        for seed in 0..20 {
            let (t, note) = apply(&mut Rng::new(seed), Kind::ReplaceNumber, MTX);
            let text = String::from_utf8(t).unwrap();
            let value = note.rsplit(" -> ").next().unwrap();
            assert!(EXTREMES.contains(&value), "{note}");
            assert!(
                text.split_ascii_whitespace().any(|f| f == value),
                "{note}: {text}"
            );
            // The banner has no numbers and is left alone.
            assert!(text.starts_with("%%MatrixMarket matrix coordinate real symmetric\n"));
        }
    }

    #[test]
    fn huge_size_line_rewrites_the_size_line_only() {
        for seed in 0..20 {
            let (t, note) = apply(&mut Rng::new(seed), Kind::HugeSizeLine, MTX);
            let text = String::from_utf8(t).unwrap();
            let l: Vec<&str> = text.lines().collect();
            assert_eq!(l[3..], ["1 1 4.0", "2 1 -1", "2 2 4.0"], "{note}");
            assert_ne!(l[2], "2 2 3", "{note}");
            let value = note.rsplit(" -> ").next().unwrap();
            assert!(l[2].split(' ').any(|f| f == value), "{note}");
        }
    }

    #[test]
    fn field_swap_and_flip_keep_length() {
        let mut rng = Rng::new(9);
        let (t, note) = apply(&mut rng, Kind::FlipByte, MTX);
        assert_eq!(t.len(), MTX.len());
        assert_ne!(t, MTX, "{note}");
        let (t, note) = apply(&mut rng, Kind::SwapFields, b"1 2 3\n");
        assert_ne!(t, b"1 2 3\n", "{note}");
        let mut sorted = t.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, b"\n  123");
    }
}
