//! The independent check of a convergence claim: reads the Matrix Market matrix, the
//! right-hand side and the `--output` solution with a reader of its own (not the binary's),
//! and computes `||b - A x|| / ||b||` with a bound on the rounding of that computation.
//!
//! Only what is cheap is checked: coordinate `real|integer|pattern` `general|symmetric`
//! matrices of at most [`MAX_ENTRIES`] entries, uncompressed. A file this reader does not
//! take (or takes differently from the format) makes the check "unchecked", never a verdict.

/// Most stored entries the check reads (the fuzzer's inputs are far smaller).
pub(crate) const MAX_ENTRIES: usize = 2_000_000;

/// A coordinate matrix as stored: entries summed when repeated (`y = A x` adds each one),
/// the strict lower triangle mirrored when symmetric.
#[derive(Debug)]
pub(crate) struct Coo {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    symmetric: bool,
    entries: Vec<(usize, usize, f64)>,
}

impl Coo {
    /// `A x` and `|A| |x|` (the latter bounds the rounding), and each row's stored-entry
    /// count (after mirroring).
    fn apply(&self, x: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<usize>) {
        let mut y = vec![0.0; self.rows];
        let mut abs = vec![0.0; self.rows];
        let mut count = vec![0usize; self.rows];
        for &(i, j, v) in &self.entries {
            y[i] += v * x[j];
            abs[i] += (v * x[j]).abs();
            count[i] += 1;
            if self.symmetric && i != j {
                y[j] += v * x[i];
                abs[j] += (v * x[i]).abs();
                count[j] += 1;
            }
        }
        (y, abs, count)
    }
}

/// The lines of a Matrix Market file that carry data (comments and blank lines dropped) and
/// the lowercased banner tokens.
fn data_lines(text: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut lines = text.lines();
    let banner: Vec<String> = lines
        .next()?
        .split_ascii_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    if banner.len() != 5 || banner[0] != "%%matrixmarket" || banner[1] != "matrix" {
        return None;
    }
    let data = lines
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('%'))
        .map(str::to_string)
        .collect();
    Some((banner, data))
}

fn real(tok: &str) -> Option<f64> {
    let v = tok
        .parse::<f64>()
        .ok()
        .or_else(|| tok.replace(['d', 'D'], "e").parse::<f64>().ok())?;
    v.is_finite().then_some(v)
}

/// Reads a coordinate matrix; `None` for anything this reader does not take.
pub(crate) fn read_coo(text: &[u8]) -> Option<Coo> {
    let (banner, data) = data_lines(text)?;
    if banner[2] != "coordinate" {
        return None;
    }
    let field = banner[3].as_str();
    let symmetric = match banner[4].as_str() {
        "general" => false,
        "symmetric" => true,
        _ => return None,
    };
    let mut lines = data.iter();
    let size: Vec<usize> = lines
        .next()?
        .split_ascii_whitespace()
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    let [rows, cols, nnz] = size[..] else {
        return None;
    };
    if nnz > MAX_ENTRIES || rows > MAX_ENTRIES || cols > MAX_ENTRIES || data.len() != nnz + 1 {
        return None;
    }
    let mut entries = Vec::with_capacity(nnz);
    for line in lines {
        let t: Vec<&str> = line.split_ascii_whitespace().collect();
        let (want, v) = match field {
            "pattern" => (2, Some(1.0)),
            "real" => (3, t.get(2).and_then(|s| real(s))),
            "integer" => (
                3,
                t.get(2)
                    .and_then(|s| s.parse::<i64>().ok().map(|i| i as f64)),
            ),
            _ => return None,
        };
        if t.len() != want {
            return None;
        }
        let i: usize = t[0].parse().ok()?;
        let j: usize = t[1].parse().ok()?;
        if i == 0 || j == 0 || i > rows || j > cols || (symmetric && j > i) {
            return None;
        }
        entries.push((i - 1, j - 1, v?));
    }
    Some(Coo {
        rows,
        cols,
        symmetric,
        entries,
    })
}

/// Reads a dense `array` file with one column (a vector), non-finite values included;
/// `None` otherwise.
pub(crate) fn read_vector(text: &[u8]) -> Option<Vec<f64>> {
    let (banner, data) = data_lines(text)?;
    if banner[2] != "array" || banner[4] != "general" {
        return None;
    }
    let integer = match banner[3].as_str() {
        "real" => false,
        "integer" => true,
        _ => return None,
    };
    let mut lines = data.iter();
    let size: Vec<usize> = lines
        .next()?
        .split_ascii_whitespace()
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    let [n, 1] = size[..] else {
        return None;
    };
    if n > MAX_ENTRIES || data.len() != n + 1 {
        return None;
    }
    lines
        .map(|l| {
            let t: Vec<&str> = l.split_ascii_whitespace().collect();
            match (t.len(), integer) {
                // Non-finite values too: a solution file may hold them (a false claim the
                // residual check reports); the binary rejects them in inputs.
                (1, false) => t[0].parse::<f64>().ok().or_else(|| real(t[0])),
                (1, true) => t[0].parse::<i64>().ok().map(|i| i as f64),
                _ => None,
            }
        })
        .collect()
}

/// 2-norm without overflow or underflow for finite input (scaled by the largest entry).
pub(crate) fn norm2(v: &[f64]) -> f64 {
    let m = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    if m == 0.0 || !m.is_finite() {
        return m;
    }
    m * v.iter().map(|x| (x / m) * (x / m)).sum::<f64>().sqrt()
}

/// The right-hand side the binary solved with, as far as the case knows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rhs {
    /// `b = A * ones`.
    UnitSolution,
    /// `b = ones`.
    Ones,
    /// `2 u - 1` with `u` from SplitMix64 seeded so.
    Random(u64),
    /// The vector in this file of the case.
    File(String),
}

/// The independently computed residual of a claimed solution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Residual {
    /// `||b - A x||`.
    pub(crate) norm: f64,
    /// `||b||`.
    pub(crate) b_norm: f64,
    /// A bound on the rounding error of `norm` (and of the binary's own evaluation).
    pub(crate) slack: f64,
}

impl Residual {
    /// Whether `x` meets `||b - A x|| <= max(tol ||b||, atol)` within the rounding slack.
    pub(crate) fn meets(&self, tol: f64, atol: f64) -> bool {
        let target = (tol * self.b_norm).max(atol);
        self.norm <= target + self.slack
    }
}

/// Why a residual could not be computed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Unchecked {
    /// An input this reader does not take (or one it reads differently).
    Unreadable(&'static str),
    /// The solution is not finite (a false claim in itself, reported by the caller).
    NonFinite,
    /// The check itself overflowed on finite input.
    Overflow,
}

/// `||b - A x||`, `||b||` and the rounding slack: `4 sum_i eps (k_i + 2) (|b_i| + (|A||x|)_i)`
/// as a vector norm, k_i the entries of row i; twice a standard bound on the error of one
/// evaluation, so it covers this one and the binary's.
pub(crate) fn residual(a: &Coo, b: &[f64], x: &[f64]) -> Result<Residual, Unchecked> {
    if a.rows != a.cols || b.len() != a.rows || x.len() != a.cols {
        return Err(Unchecked::Unreadable("sizes do not match"));
    }
    if x.iter().any(|v| !v.is_finite()) {
        return Err(Unchecked::NonFinite);
    }
    let (ax, abs, count) = a.apply(x);
    let r: Vec<f64> = b.iter().zip(&ax).map(|(b, y)| b - y).collect();
    let e: Vec<f64> = (0..a.rows)
        .map(|i| 4.0 * f64::EPSILON * (count[i] + 2) as f64 * (b[i].abs() + abs[i]))
        .collect();
    let out = Residual {
        norm: norm2(&r),
        b_norm: norm2(b),
        slack: norm2(&e),
    };
    if out.norm.is_finite() && out.b_norm.is_finite() && out.slack.is_finite() {
        Ok(out)
    } else {
        Err(Unchecked::Overflow)
    }
}

/// The right-hand side `rhs` over `a` (`file`: the vector file's bytes).
pub(crate) fn rhs(a: &Coo, rhs: &Rhs, file: Option<&[u8]>) -> Result<Vec<f64>, Unchecked> {
    Ok(match rhs {
        Rhs::UnitSolution => a.apply(&vec![1.0; a.cols]).0,
        Rhs::Ones => vec![1.0; a.rows],
        Rhs::Random(seed) => {
            let mut rng = super::rng::Rng::new(*seed);
            (0..a.rows).map(|_| 2.0 * rng.next_f64() - 1.0).collect()
        }
        Rhs::File(_) => file
            .and_then(read_vector)
            .ok_or(Unchecked::Unreadable("right-hand side file"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYM: &[u8] = b"%%MatrixMarket matrix coordinate real symmetric\n% c\n\n2 2 3\n1 1 4.0\n2 1 -1D0\n2 2 4\n";

    #[test]
    fn reads_symmetric_storage_and_mirrors_it() {
        let a = read_coo(SYM).unwrap();
        let (y, abs, count) = a.apply(&[1.0, 2.0]);
        assert_eq!(y, [2.0, 7.0]);
        assert_eq!(abs, [6.0, 9.0]);
        assert_eq!(count, [2, 2]);
    }

    #[test]
    fn duplicates_add_and_pattern_is_one() {
        let a =
            read_coo(b"%%MatrixMarket matrix coordinate pattern general\n2 2 3\n1 1\n1 1\n2 2\n")
                .unwrap();
        assert_eq!(a.apply(&[1.0, 1.0]).0, [2.0, 1.0]);
    }

    #[test]
    fn rejects_what_it_does_not_take() {
        for bad in [
            &b"%%MatrixMarket matrix coordinate real symmetric\n2 2 1\n1 2 1\n"[..],
            b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n",
            b"%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1\n",
            b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 nan\n",
            b"%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
            b"%%MatrixMarket matrix coordinate real general\n18446744073709551615 2 1\n1 1 1\n",
            b"matrix\n",
        ] {
            assert!(read_coo(bad).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn reads_the_binarys_array_output() {
        let x = read_vector(b"%%MatrixMarket matrix array real general\n3 1\n1.0\n-2.5e-3\n7\n");
        assert_eq!(x.unwrap(), [1.0, -2.5e-3, 7.0]);
        assert!(read_vector(b"%%MatrixMarket matrix array real general\n3 1\n1.0\n").is_none());
    }

    #[test]
    fn norm_does_not_overflow() {
        assert_eq!(norm2(&[3e300, 4e300]), 5e300);
        assert_eq!(norm2(&[3e-320, 4e-320]), 5e-320);
        assert_eq!(norm2(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn residual_tells_a_solution_from_a_wrong_one() {
        let a = read_coo(SYM).unwrap();
        let b = rhs(&a, &Rhs::UnitSolution, None).unwrap();
        assert_eq!(b, [3.0, 3.0]);
        let good = residual(&a, &b, &[1.0, 1.0]).unwrap();
        assert_eq!(good.norm, 0.0);
        assert!(good.meets(1e-12, 0.0));
        let off = residual(&a, &b, &[1.0, 1.0 + 1e-6]).unwrap();
        assert!(!off.meets(1e-8, 0.0), "{off:?}");
        assert!(off.meets(1e-5, 0.0));
        assert!(off.meets(0.0, 1e-5), "atol alone");
        assert_eq!(
            residual(&a, &b, &[1.0, f64::NAN]),
            Err(Unchecked::NonFinite)
        );
        assert!(matches!(
            residual(&a, &b, &[1.0]),
            Err(Unchecked::Unreadable(_))
        ));
    }

    #[test]
    fn random_rhs_is_the_binarys_stream() {
        let a = read_coo(SYM).unwrap();
        let b = rhs(&a, &Rhs::Random(0), None).unwrap();
        // 2 u - 1 with u the top 53 bits of 0xe220a8397b1dcdaf over 2^53.
        let u = (0xe220_a839_7b1d_cdaf_u64 >> 11) as f64 / (1u64 << 53) as f64;
        assert_eq!(b[0], 2.0 * u - 1.0);
    }
}
