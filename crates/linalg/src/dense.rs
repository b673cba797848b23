//! Small dense linear algebra for the s-step methods: matrices of order `k` (the block
//! size, at most a few dozen), row-major in caller-provided slices so solver loops never
//! allocate.
//!
//! - [`cholesky`]: `A = L L^T` in place, reporting the first pivot that is not safely
//!   positive (the s-step methods' test for a Gram matrix that lost definiteness or rank);
//!   [`cholesky_dropping`]: the same, leaving out numerically dependent columns.
//! - [`solve_lower`], [`solve_upper_t`], [`cholesky_solve`]: triangular solves with `L`
//!   and `L^T`, one or several right-hand sides.
//! - [`scaled_cholesky`] and [`condition_estimate`]: the condition numbers of the leading
//!   blocks of a Gram matrix scaled to unit diagonal (the adaptive s of `cacg`).
//! - [`tridiagonal_eigenvalues`]: all eigenvalues of a symmetric tridiagonal matrix by
//!   Sturm-sequence bisection (the Lanczos matrices of `castack_krylov`'s spectral estimates).
//!
//! Written out rather than taken from a LAPACK binding or faer, by measurement (2026-11-27,
//! this project's 2-core machine, faer 0.23 `Mat::llt` against [`cholesky`] on SPD Gram-like
//! matrices): at the orders the solvers factor, faer is slower (2.8 us against 0.05 us at
//! k = 4, 2.1 against 0.43 at 8, 5.6 against 1.7 at 16, 21.6 against 15.4 at 41, its
//! allocating form, as a solver loop must not call it), its factors differ in the last bit
//! (so every s-step solve's bits would change), it has no column-dropping form
//! ([`cholesky_dropping`]) or pivot report in the solvers' terms, and it adds about 2m50s of
//! CPU time to a clean build (CI's longest step is compilation). The code is short and its
//! failure detection is exactly what the solvers need.

/// A Cholesky factorisation failed at `index` (0-based) with this `pivot` value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NotPositiveDefinite {
    /// 0-based column where the pivot was not safely positive.
    pub index: usize,
    /// The pivot `a_jj - sum_l L_jl^2` (NaN when the input held NaN).
    pub pivot: f64,
}

/// Relative pivot threshold of [`cholesky`]: a pivot below `PIVOT_TOL * a_jj` means the
/// matrix is numerically singular (the basis lost rank) or not positive definite.
pub const PIVOT_TOL: f64 = 1e-14;

/// Factor the symmetric `n x n` row-major `a` as `L L^T`, overwriting its lower triangle
/// with `L` (the strict upper triangle is left as is and never read later).
///
/// A pivot that is not finite or `<= PIVOT_TOL * a_jj` (the original diagonal entry) is
/// reported as [`NotPositiveDefinite`].
///
/// # Panics
///
/// When `a.len() != n * n`.
#[track_caller]
pub fn cholesky(a: &mut [f64], n: usize) -> Result<(), NotPositiveDefinite> {
    assert_eq!(
        a.len(),
        n * n,
        "cholesky: matrix of order {n} needs n*n values"
    );
    for j in 0..n {
        let (ajj, d) = pivot(a, n, j);
        if !(d.is_finite() && ajj.is_finite() && d > PIVOT_TOL * ajj.abs()) {
            return Err(NotPositiveDefinite { index: j, pivot: d });
        }
        eliminate(a, n, j, d);
    }
    Ok(())
}

/// [`cholesky`] that leaves out numerically dependent columns instead of failing: a column
/// whose pivot is not finite or `<= tol * a_jj` but `>= -neg_tol * a_jj` (zero up to
/// rounding: the column depends on the ones before it) gets the unit vector as its row and
/// column of the factor and `dropped[j] = true`, so that [`cholesky_solve`] of a right-hand
/// side zeroed there returns 0 there and the solution of the kept columns' system
/// elsewhere. Returns the number of kept columns; a pivot below `-neg_tol * a_jj` (the
/// matrix is not positive semidefinite) is [`NotPositiveDefinite`].
///
/// # Panics
///
/// When `a.len() != n * n` or `dropped.len() != n`.
#[track_caller]
pub fn cholesky_dropping(
    a: &mut [f64],
    n: usize,
    tol: f64,
    neg_tol: f64,
    dropped: &mut [bool],
) -> Result<usize, NotPositiveDefinite> {
    assert_eq!(
        a.len(),
        n * n,
        "cholesky_dropping: matrix of order {n} needs n*n values"
    );
    assert_eq!(dropped.len(), n, "cholesky_dropping: mask length");
    let mut kept = 0;
    for j in 0..n {
        let (ajj, d) = pivot(a, n, j);
        if d.is_finite() && ajj.is_finite() && d < -neg_tol * ajj.abs() {
            return Err(NotPositiveDefinite { index: j, pivot: d });
        }
        dropped[j] = !(d.is_finite() && ajj.is_finite() && d > tol * ajj.abs());
        if dropped[j] {
            for l in 0..n {
                a[j * n + l] = 0.0;
                a[l * n + j] = 0.0;
            }
            a[j * n + j] = 1.0;
            continue;
        }
        kept += 1;
        eliminate(a, n, j, d);
    }
    Ok(kept)
}

/// Column `j`'s diagonal entry `a_jj` and pivot `a_jj - sum_l L_jl^2` (columns before `j`
/// factored in place).
fn pivot(a: &[f64], n: usize, j: usize) -> (f64, f64) {
    let ajj = a[j * n + j];
    let d = (0..j).fold(ajj, |d, l| d - a[j * n + l] * a[j * n + l]);
    (ajj, d)
}

/// Column `j` of the factor from its positive pivot `d`: `L_jj = sqrt(d)` and the entries
/// below it.
fn eliminate(a: &mut [f64], n: usize, j: usize, d: f64) {
    let djj = d.sqrt();
    a[j * n + j] = djj;
    for i in j + 1..n {
        let mut s = a[i * n + j];
        for l in 0..j {
            s -= a[i * n + l] * a[j * n + l];
        }
        a[i * n + j] = s / djj;
    }
}

/// Solve `L y = b` in place (`L` the lower triangle of the row-major `n x n` `l`).
///
/// # Panics
///
/// On length mismatches.
#[track_caller]
pub fn solve_lower(l: &[f64], n: usize, b: &mut [f64]) {
    assert_eq!(l.len(), n * n, "solve_lower: matrix size");
    assert_eq!(b.len(), n, "solve_lower: right-hand side length");
    lower_strided(l, n, b);
}

/// `L y = b` in place for the leading `b.len()` rows of `L`, row stride `stride`.
fn lower_strided(l: &[f64], stride: usize, b: &mut [f64]) {
    for i in 0..b.len() {
        let mut s = b[i];
        for j in 0..i {
            s -= l[i * stride + j] * b[j];
        }
        b[i] = s / l[i * stride + i];
    }
}

/// `L^T y = b` in place for the leading `b.len()` rows of `L`, row stride `stride`.
fn upper_t_strided(l: &[f64], stride: usize, b: &mut [f64]) {
    let n = b.len();
    for i in (0..n).rev() {
        let mut s = b[i];
        for j in i + 1..n {
            s -= l[j * stride + i] * b[j];
        }
        b[i] = s / l[i * stride + i];
    }
}

/// Solve `L^T y = b` in place (`L` the lower triangle of the row-major `n x n` `l`).
///
/// # Panics
///
/// On length mismatches.
#[track_caller]
pub fn solve_upper_t(l: &[f64], n: usize, b: &mut [f64]) {
    assert_eq!(l.len(), n * n, "solve_upper_t: matrix size");
    assert_eq!(b.len(), n, "solve_upper_t: right-hand side length");
    upper_t_strided(l, n, b);
}

/// Solve `(L L^T) x = b` in place for one right-hand side.
///
/// # Panics
///
/// On length mismatches.
#[track_caller]
pub fn cholesky_solve(l: &[f64], n: usize, b: &mut [f64]) {
    solve_lower(l, n, b);
    solve_upper_t(l, n, b);
}

/// Solve `(L L^T) X = B` in place for the `n x m` row-major `b` (m right-hand sides as
/// columns); `col` is scratch of length `n`.
///
/// # Panics
///
/// On length mismatches.
#[track_caller]
pub fn cholesky_solve_many(l: &[f64], n: usize, b: &mut [f64], m: usize, col: &mut [f64]) {
    assert_eq!(b.len(), n * m, "cholesky_solve_many: right-hand side size");
    assert_eq!(col.len(), n, "cholesky_solve_many: scratch length");
    for c in 0..m {
        for i in 0..n {
            col[i] = b[i * m + c];
        }
        cholesky_solve(l, n, col);
        for i in 0..n {
            b[i * m + c] = col[i];
        }
    }
}

/// Scale the Gram matrix `g` (row-major `n x n`, `g = Y^T Y` for `n` columns of some `Y`)
/// to unit diagonal, `c_ij = g_ij / sqrt(g_ii g_jj)` (the Gram matrix of `Y` with its
/// columns scaled to unit length), take its rows and columns in the order `col(0),
/// col(1), ..., col(m - 1)` into the row-major `m x m` `l`, and factor that in place as
/// `L L^T` up to the first pivot that is not finite or `<= floor` (or the first column of
/// zero length). Returns the number of columns factored: every leading block of order at
/// most that is in `l` as its Cholesky factor, and every larger leading block has a
/// condition number above `1 / floor` (its smallest eigenvalue is at most the pivot, its
/// largest at least 1).
///
/// # Panics
///
/// When `g.len() != n * n`, `l.len() != m * m` or `col` maps outside `0..n`.
#[track_caller]
pub fn scaled_cholesky(
    g: &[f64],
    n: usize,
    col: impl Fn(usize) -> usize,
    m: usize,
    l: &mut [f64],
    floor: f64,
) -> usize {
    assert_eq!(g.len(), n * n, "scaled_cholesky: matrix of order {n}");
    assert_eq!(l.len(), m * m, "scaled_cholesky: factor of order {m}");
    for i in 0..m {
        let ci = col(i);
        for j in 0..=i {
            let cj = col(j);
            l[i * m + j] = g[ci * n + cj] / (g[ci * n + ci] * g[cj * n + cj]).sqrt();
        }
    }
    for j in 0..m {
        let (_, d) = pivot(l, m, j);
        if !(d.is_finite() && d > floor) {
            return j;
        }
        eliminate(l, m, j, d);
    }
    m
}

/// Estimate of the 2-norm condition number of `C = L L^T` for the leading `m x m` block of
/// the lower-triangular factor in `l` (row-major, row stride `stride`), from `iters` steps
/// of power iteration for the largest eigenvalue and of inverse iteration (two triangular
/// solves a step) for the smallest. Both Rayleigh quotients lie inside the spectrum, so
/// the estimate is at most the true condition number, and close to it after a few steps
/// when it is large (then the smallest eigenvalue stands apart). `v` and `w` are scratch
/// of length at least `m`; `O(iters m^2)` flops.
///
/// # Panics
///
/// When `l` is shorter than `m` rows of `stride` or the scratch shorter than `m`.
#[track_caller]
pub fn condition_estimate(
    l: &[f64],
    stride: usize,
    m: usize,
    iters: usize,
    v: &mut [f64],
    w: &mut [f64],
) -> f64 {
    assert!(
        m <= stride && l.len() >= m * stride,
        "condition_estimate: factor size"
    );
    assert!(
        v.len() >= m && w.len() >= m,
        "condition_estimate: scratch length"
    );
    let (v, w) = (&mut v[..m], &mut w[..m]);
    let normalize = |v: &mut [f64]| {
        let nv = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        v.iter_mut().for_each(|a| *a /= nv);
    };
    let sq = |w: &[f64]| w.iter().map(|a| a * a).sum::<f64>();
    // Power iteration from the all-ones vector (the columns of a Krylov basis correlate):
    // for a unit v, v^T C v = ||L^T v||^2; the next v is L (L^T v).
    v.fill(1.0);
    let mut lmax: f64 = 0.0;
    for _ in 0..iters.max(1) {
        normalize(v);
        for i in 0..m {
            w[i] = (i..m).map(|k| l[k * stride + i] * v[k]).sum();
        }
        lmax = lmax.max(sq(w));
        for i in 0..m {
            v[i] = (0..=i).map(|k| l[i * stride + k] * w[k]).sum();
        }
    }
    // Inverse iteration from alternating signs: for a unit v, v^T C^-1 v = ||L^-1 v||^2
    // (at most 1 / lambda_min); the next v is L^-T (L^-1 v).
    for (i, a) in v.iter_mut().enumerate() {
        *a = if i % 2 == 0 { 1.0 } else { -1.0 } * (1.0 + i as f64 / m as f64);
    }
    let mut inv_min: f64 = 0.0;
    for _ in 0..iters.max(1) {
        normalize(v);
        w.copy_from_slice(v);
        lower_strided(l, stride, w);
        inv_min = inv_min.max(sq(w));
        v.copy_from_slice(w);
        upper_t_strided(l, stride, v);
    }
    lmax * inv_min
}

/// All eigenvalues, ascending, of the symmetric tridiagonal matrix with diagonal `d` and
/// off-diagonal `e` (`e.len() + 1 == d.len()`), by Sturm-sequence bisection to full
/// precision inside the Gershgorin interval. `O(n^2)`: for the extreme eigenvalues of a
/// large matrix use [`tridiagonal_extremes`].
///
/// # Panics
///
/// When `e.len() + 1 != d.len()` (and `d` is not empty).
#[track_caller]
pub fn tridiagonal_eigenvalues(d: &[f64], e: &[f64]) -> Vec<f64> {
    match Sturm::new(d, e) {
        Some(st) => (0..d.len()).map(|j| st.eigenvalue(j)).collect(),
        None => Vec::new(),
    }
}

/// The smallest and the largest eigenvalue of the symmetric tridiagonal matrix with
/// diagonal `d` and off-diagonal `e` (`e.len() + 1 == d.len()`), by the bisection of
/// [`tridiagonal_eigenvalues`] (`O(n)` per bisection step, no allocation); `None` when
/// `d` is empty.
///
/// # Panics
///
/// When `e.len() + 1 != d.len()` (and `d` is not empty).
#[track_caller]
pub fn tridiagonal_extremes(d: &[f64], e: &[f64]) -> Option<(f64, f64)> {
    let st = Sturm::new(d, e)?;
    Some((st.eigenvalue(0), st.eigenvalue(d.len() - 1)))
}

/// Sturm-sequence bisection on a symmetric tridiagonal matrix.
struct Sturm<'a> {
    d: &'a [f64],
    e: &'a [f64],
    /// The Gershgorin interval, widened a little.
    lo: f64,
    hi: f64,
    span: f64,
}

impl<'a> Sturm<'a> {
    #[track_caller]
    fn new(d: &'a [f64], e: &'a [f64]) -> Option<Self> {
        let n = d.len();
        if n == 0 {
            return None;
        }
        assert_eq!(
            e.len() + 1,
            n,
            "tridiagonal_eigenvalues: off-diagonal length"
        );
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for i in 0..n {
            let r = e.get(i).map_or(0.0, |v| v.abs()) + if i > 0 { e[i - 1].abs() } else { 0.0 };
            lo = lo.min(d[i] - r);
            hi = hi.max(d[i] + r);
        }
        let span = (hi - lo).max(hi.abs().max(lo.abs())).max(f64::MIN_POSITIVE);
        lo -= 1e-12 * span;
        hi += 1e-12 * span;
        Some(Self { d, e, lo, hi, span })
    }

    /// Number of eigenvalues strictly below x (Sturm count of the LDL^T pivots).
    fn below(&self, x: f64) -> usize {
        let (d, e) = (self.d, self.e);
        let mut count = 0;
        let mut q = 1.0;
        for i in 0..d.len() {
            let e2 = if i > 0 { e[i - 1] * e[i - 1] } else { 0.0 };
            q = d[i] - x - if i > 0 { e2 / q } else { 0.0 };
            if q == 0.0 {
                q = -f64::EPSILON * self.span;
            }
            if q < 0.0 {
                count += 1;
            }
        }
        count
    }

    /// The j-th eigenvalue (0-based, ascending): the smallest x with `below(x) > j`.
    fn eigenvalue(&self, j: usize) -> f64 {
        let (mut a, mut b) = (self.lo, self.hi);
        for _ in 0..200 {
            let m = 0.5 * (a + b);
            if m <= a || m >= b {
                break;
            }
            if self.below(m) > j {
                b = m;
            } else {
                a = m;
            }
        }
        0.5 * (a + b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_solves_a_small_spd_system() {
        let a0 = [4.0, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
        let mut l = a0;
        cholesky(&mut l, 3).unwrap();
        let x = [1.0, -2.0, 0.5];
        let mut b: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| a0[i * 3 + j] * x[j]).sum())
            .collect();
        cholesky_solve(&l, 3, &mut b);
        for (bi, xi) in b.iter().zip(x) {
            assert!((bi - xi).abs() < 1e-14, "{bi} vs {xi}");
        }
        let mut bm = vec![0.0; 6];
        for i in 0..3 {
            bm[i * 2] = (0..3).map(|j| a0[i * 3 + j] * x[j]).sum();
            bm[i * 2 + 1] = a0[i * 3 + 1];
        }
        let mut col = [0.0; 3];
        cholesky_solve_many(&l, 3, &mut bm, 2, &mut col);
        for i in 0..3 {
            assert!((bm[i * 2] - x[i]).abs() < 1e-14);
            let e = if i == 1 { 1.0 } else { 0.0 };
            assert!((bm[i * 2 + 1] - e).abs() < 1e-14);
        }
    }

    #[test]
    fn cholesky_reports_indefinite_singular_and_nan() {
        let mut a = [1.0, 2.0, 2.0, 1.0];
        let e = cholesky(&mut a, 2).unwrap_err();
        assert_eq!(e.index, 1);
        assert!(e.pivot < 0.0);
        let mut s = [1.0, 1.0, 1.0, 1.0];
        assert_eq!(cholesky(&mut s, 2).unwrap_err().index, 1);
        let mut n = [f64::NAN, 0.0, 0.0, 1.0];
        assert_eq!(cholesky(&mut n, 2).unwrap_err().index, 0);
        let mut z = [-1.0];
        assert!(cholesky(&mut z, 1).is_err());
    }

    /// `Q diag(d) Q^T` with `Q = I - 2 u u^T / u^T u` (symmetric, orthogonal): its
    /// eigenvalues are exactly `d`.
    fn with_spectrum(d: &[f64]) -> Vec<f64> {
        let n = d.len();
        let u: Vec<f64> = (0..n).map(|i| 1.0 + 0.37 * i as f64).collect();
        let uu: f64 = u.iter().map(|a| a * a).sum();
        let q = |i: usize, j: usize| f64::from(u8::from(i == j)) - 2.0 * u[i] * u[j] / uu;
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n).map(|l| q(i, l) * d[l] * q(j, l)).sum();
            }
        }
        a
    }

    #[test]
    fn condition_estimate_brackets_known_spectra() {
        let (mut v, mut w) = ([0.0; 9], [0.0; 9]);
        for d in [
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
            vec![1e-8, 0.5, 1.0, 2.0, 3.0, 4.0, 4.5, 7.0, 9.0],
            vec![1e-3, 1e-2, 1.0],
            vec![2.0],
        ] {
            let n = d.len();
            let mut l = with_spectrum(&d);
            cholesky(&mut l, n).unwrap();
            let want =
                d.iter().cloned().fold(0.0, f64::max) / d.iter().cloned().fold(f64::MAX, f64::min);
            let got = condition_estimate(&l, n, n, 30, &mut v, &mut w);
            assert!(
                got <= want * (1.0 + 1e-9) && got >= 0.5 * want,
                "{d:?}: {got} vs {want}"
            );
        }
        // A leading block of a larger factor (row stride n): the estimate of its own
        // spectrum, here a diagonal matrix's.
        let n = 4;
        let mut l = vec![0.0; n * n];
        for (i, di) in [1.0, 1e-4, 4.0, 9.0].iter().enumerate() {
            l[i * n + i] = f64::sqrt(*di);
        }
        let got = condition_estimate(&l, n, 2, 30, &mut v, &mut w);
        assert!((got - 1e4).abs() < 1e-6 * 1e4, "{got}");
    }

    #[test]
    fn scaled_cholesky_factors_the_unit_diagonal_gram_in_the_given_order_up_to_a_dependent_column()
    {
        // Columns of Y (3 rows): y0, y1 = 2 y0 + 1e-3 e1, y2 independent; G = Y^T Y.
        let y = [[1.0, 0.0, 1.0], [2.0, 1e-3, 2.0], [0.0, 3.0, 1.0]];
        let mut g = [0.0; 9];
        for i in 0..3 {
            for j in 0..3 {
                g[i * 3 + j] = (0..3).map(|k| y[i][k] * y[j][k]).sum();
            }
        }
        // Order y2, y0: both factored, and L L^T is the unit-diagonal Gram of that order.
        let mut l = [0.0; 4];
        let order = [2, 0];
        assert_eq!(scaled_cholesky(&g, 3, |k| order[k], 2, &mut l, 1e-12), 2);
        let c = |i: usize, j: usize| g[i * 3 + j] / (g[i * 3 + i] * g[j * 3 + j]).sqrt();
        for i in 0..2 {
            for j in 0..=i {
                let lij: f64 = (0..=j).map(|k| l[i * 2 + k] * l[j * 2 + k]).sum();
                assert!((lij - c(order[i], order[j])).abs() < 1e-14, "{i} {j}");
            }
        }
        // Order y0, y1, y2: y1's scaled pivot (1e-6 / 8) is under a floor of 1e-5, so one
        // column is factored; over a floor of 1e-9, all three.
        let mut l = [0.0; 9];
        assert_eq!(scaled_cholesky(&g, 3, |k| k, 3, &mut l, 1e-5), 1);
        assert_eq!(scaled_cholesky(&g, 3, |k| k, 3, &mut l, 1e-9), 3);
        // A zero column stops at once.
        let z = [0.0, 0.0, 0.0, 1.0];
        let mut l = [0.0; 4];
        assert_eq!(scaled_cholesky(&z, 2, |k| k, 2, &mut l, 1e-12), 0);
    }

    #[test]
    fn tridiagonal_eigenvalues_of_the_1d_laplacian() {
        let n = 12;
        let d = vec![2.0; n];
        let e = vec![-1.0; n - 1];
        let ev = tridiagonal_eigenvalues(&d, &e);
        for (j, l) in ev.iter().enumerate() {
            let t = (j + 1) as f64 * std::f64::consts::PI / (2.0 * (n + 1) as f64);
            let want = 4.0 * t.sin().powi(2);
            assert!((l - want).abs() < 1e-12, "{j}: {l} vs {want}");
        }
        assert_eq!(tridiagonal_eigenvalues(&[3.0], &[]), vec![3.0]);
        assert!(tridiagonal_eigenvalues(&[], &[]).is_empty());
    }

    #[test]
    fn tridiagonal_extremes_of_a_large_1d_laplacian() {
        // n = 20000: the O(n^2) all-eigenvalue bisection would take minutes.
        let n = 20_000;
        let d = vec![2.0; n];
        let e = vec![-1.0; n - 1];
        let (lo, hi) = tridiagonal_extremes(&d, &e).unwrap();
        let t = |j: usize| j as f64 * std::f64::consts::PI / (2.0 * (n + 1) as f64);
        let (want_lo, want_hi) = (4.0 * t(1).sin().powi(2), 4.0 * t(n).sin().powi(2));
        assert!((lo - want_lo).abs() < 1e-12, "{lo} vs {want_lo}");
        assert!((hi - want_hi).abs() < 1e-12, "{hi} vs {want_hi}");
        assert_eq!(tridiagonal_extremes(&[3.0], &[]), Some((3.0, 3.0)));
        assert_eq!(tridiagonal_extremes(&[], &[]), None);
    }
}

#[cfg(test)]
mod dropping_tests {
    use super::*;

    /// `M = A^T A` for the row-major `m x n` `a`.
    fn normal(a: &[f64], m: usize, n: usize) -> Vec<f64> {
        let mut g = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                g[i * n + j] = (0..m).map(|l| a[l * n + i] * a[l * n + j]).sum();
            }
        }
        g
    }

    #[test]
    fn dropping_cholesky_solves_full_rank_systems_like_cholesky() {
        // Columns of a 5 x 3 matrix with independent columns.
        let a = [
            1.0, 0.5, -2.0, 0.0, 1.0, 1.0, 2.0, -1.0, 0.5, 1.0, 3.0, 0.0, -1.0, 0.0, 2.0,
        ];
        let m = normal(&a, 5, 3);
        let rhs = [1.0, -2.0, 0.5];
        let (mut l1, mut x1) = (m.clone(), rhs);
        cholesky(&mut l1, 3).unwrap();
        cholesky_solve(&l1, 3, &mut x1);
        let (mut l2, mut x2) = (m.clone(), rhs);
        let mut dropped = [true; 3];
        assert_eq!(
            cholesky_dropping(&mut l2, 3, 1e-12, f64::INFINITY, &mut dropped),
            Ok(3)
        );
        assert_eq!(dropped, [false; 3], "no column dropped");
        cholesky_solve(&l2, 3, &mut x2);
        for (u, v) in x1.iter().zip(&x2) {
            assert!(
                (u - v).abs() <= 1e-12 * u.abs().max(1.0),
                "{x1:?} vs {x2:?}"
            );
        }
    }

    #[test]
    fn dropping_cholesky_leaves_out_dependent_columns() {
        // Third column = first + second: M is singular; the minimum over the first two
        // columns is the least-squares solution, with c_3 = 0.
        let mut a = [0.0; 15];
        let cols = [[1.0, 0.0, 2.0, -1.0, 0.5], [0.0, 1.0, 1.0, 3.0, -2.0]];
        for l in 0..5 {
            a[l * 3] = cols[0][l];
            a[l * 3 + 1] = cols[1][l];
            a[l * 3 + 2] = cols[0][l] + cols[1][l];
        }
        let y = [1.0, 2.0, 0.0, -1.0, 0.5];
        let m = normal(&a, 5, 3);
        let mut v: Vec<f64> = (0..3)
            .map(|j| (0..5).map(|l| a[l * 3 + j] * y[l]).sum())
            .collect();
        let mut l = m.clone();
        let mut dropped = [false; 3];
        assert_eq!(
            cholesky_dropping(&mut l, 3, 1e-12, f64::INFINITY, &mut dropped),
            Ok(2)
        );
        assert_eq!(dropped, [false, false, true]);
        v[2] = 0.0;
        cholesky_solve(&l, 3, &mut v);
        assert_eq!(v[2], 0.0);
        // Reference: the 2 x 2 normal equations of the first two columns.
        let m2 = [m[0], m[1], m[3], m[4]];
        let det = m2[0] * m2[3] - m2[1] * m2[2];
        let g: Vec<f64> = (0..2)
            .map(|j| (0..5).map(|l| cols[j][l] * y[l]).sum())
            .collect();
        let c0 = (m2[3] * g[0] - m2[1] * g[1]) / det;
        let c1 = (m2[0] * g[1] - m2[2] * g[0]) / det;
        assert!(
            (v[0] - c0).abs() < 1e-12 && (v[1] - c1).abs() < 1e-12,
            "{v:?}"
        );
        // All columns dependent on nothing: a zero matrix keeps none.
        let mut z = [0.0; 4];
        let mut none = [false; 2];
        assert_eq!(
            cholesky_dropping(&mut z, 2, 1e-12, f64::INFINITY, &mut none),
            Ok(0)
        );
        assert_eq!(none, [true; 2]);
    }

    #[test]
    fn dropping_cholesky_still_rejects_an_indefinite_matrix() {
        // [[1, 2], [2, 1]]: the second pivot is 1 - 4 = -3, far below rounding.
        let mut a = [1.0, 2.0, 2.0, 1.0];
        let mut dropped = [false; 2];
        let e = cholesky_dropping(&mut a, 2, 1e-14, 1e-8, &mut dropped).unwrap_err();
        assert_eq!((e.index, e.pivot), (1, -3.0));
    }
}
