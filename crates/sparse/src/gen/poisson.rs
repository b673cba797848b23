//! Poisson (diffusion) matrices on regular grids, Dirichlet boundary.
//!
//! Grid points (cells) are numbered lexicographically with `x` fastest:
//! row `x + n*y` in 2-D, `x + n*y + n*n*z` in 3-D. Matrices are the
//! unscaled stencils (no `1/h^2` factor). Each row stores its columns in
//! increasing order: `-n*n`, `-n`, `-1`, diagonal, `+1`, `+n`, `+n*n`
//! (those that exist).
//!
//! Sizes: `poisson2d` has `n^2` rows and `5n^2 - 4n` nonzeros; `poisson3d`
//! and `poisson3d_heterogeneous` have `n^3` rows and `7n^3 - 6n^2` nonzeros.

use sprs::CsMat;

use super::rng::SplitMix64;

/// Default conductivity of the high-conductivity cells (`krylov gen --contrast`).
pub const DEFAULT_CONTRAST: f64 = 1e3;

/// Default seed of [`poisson3d_heterogeneous`] (`krylov gen --seed`).
pub const DEFAULT_SEED: u64 = 1;

/// Probability that a cell of [`poisson3d_heterogeneous`] has the high
/// conductivity.
pub const HIGH_PROBABILITY: f64 = 0.3;

/// Invalid generator arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GenError {
    /// The grid size is zero.
    #[error("grid size n must be at least 1")]
    ZeroSize,
    /// The matrix size overflows or cannot be allocated.
    #[error("grid size n = {n} is too large: the {dim}-D matrix does not fit in memory")]
    TooLarge {
        /// The requested grid size.
        n: usize,
        /// Grid dimension (2 or 3).
        dim: u32,
    },
    /// The conductivity contrast is not a usable positive finite number.
    #[error("contrast must be positive and finite (at most {max:e}), got {contrast}", max = MAX_CONTRAST)]
    InvalidContrast {
        /// The rejected value.
        contrast: f64,
    },
}

/// Largest accepted contrast: keeps the diagonal (a sum of six face
/// coefficients, each at most twice the contrast) finite.
const MAX_CONTRAST: f64 = f64::MAX / 16.0;

fn alloc<T>(len: usize, n: usize, dim: u32) -> Result<Vec<T>, GenError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| GenError::TooLarge { n, dim })?;
    Ok(v)
}

/// Rows and nonzeros of the `dim`-D stencil on an `n^dim` grid, checked.
fn sizes(n: usize, dim: u32) -> Result<(usize, usize), GenError> {
    if n == 0 {
        return Err(GenError::ZeroSize);
    }
    let too_large = GenError::TooLarge { n, dim };
    // rows = n^dim; nnz = (2*dim + 1) n^dim - 2 dim n^(dim-1).
    let face = n.checked_pow(dim - 1).ok_or(too_large.clone())?;
    let rows = face.checked_mul(n).ok_or(too_large.clone())?;
    let stencil = 2 * dim as usize + 1;
    let nnz = rows
        .checked_mul(stencil)
        .and_then(|full| full.checked_sub(2 * dim as usize * face))
        .ok_or(too_large.clone())?;
    rows.checked_add(1).ok_or(too_large)?;
    Ok((rows, nnz))
}

/// 5-point Laplacian on the `n x n` interior grid of the unit square with
/// Dirichlet boundary: `n^2` rows, diagonal 4, off-diagonals -1.
///
/// # Errors
///
/// [`GenError::ZeroSize`] for `n == 0`; [`GenError::TooLarge`] when the size
/// overflows or the arrays cannot be allocated.
pub fn poisson2d(n: usize) -> Result<CsMat<f64>, GenError> {
    let (rows, nnz) = sizes(n, 2)?;
    let mut indptr = alloc(rows + 1, n, 2)?;
    let mut indices = alloc(nnz, n, 2)?;
    let mut data = alloc(nnz, n, 2)?;
    indptr.push(0);
    for y in 0..n {
        for x in 0..n {
            let r = x + n * y;
            let mut push = |c: usize, v: f64| {
                indices.push(c);
                data.push(v);
            };
            if y > 0 {
                push(r - n, -1.0);
            }
            if x > 0 {
                push(r - 1, -1.0);
            }
            push(r, 4.0);
            if x + 1 < n {
                push(r + 1, -1.0);
            }
            if y + 1 < n {
                push(r + n, -1.0);
            }
            indptr.push(indices.len());
        }
    }
    // Valid CSR by construction (sorted, in-range, unique columns).
    Ok(CsMat::new((rows, rows), indptr, indices, data))
}

/// 7-point Laplacian on the `n x n x n` interior grid of the unit cube with
/// Dirichlet boundary: `n^3` rows, diagonal 6, off-diagonals -1.
///
/// # Errors
///
/// [`GenError::ZeroSize`] for `n == 0`; [`GenError::TooLarge`] when `n^3`
/// overflows or the arrays cannot be allocated.
pub fn poisson3d(n: usize) -> Result<CsMat<f64>, GenError> {
    build3d(n, |_, _| 1.0)
}

/// 7-point finite-volume diffusion on an `n x n x n` grid with random
/// two-valued conductivity, Dirichlet boundary.
///
/// Cells are visited in lexicographic order (`x` fastest) and each draws
/// `u = SplitMix64::new(seed).next_f64()` once: the cell's conductivity is
/// `contrast` if `u < 0.3` ([`HIGH_PROBABILITY`]), else 1.
///
/// Coefficients: between neighbouring cells `a`, `b` the face coefficient is
/// the harmonic mean `2 k_a k_b / (k_a + k_b)` (exactly `k` when equal). At a
/// boundary face the Dirichlet ghost cell is taken to have the cell's own
/// conductivity, so the face coefficient is `k_cell` (the harmonic mean of
/// `k_cell` with itself); with `contrast = 1` the matrix is exactly
/// [`poisson3d`]. Row `a` has `-c_f` for each interior face `f` and the sum
/// of all six face coefficients (boundary faces included) on the diagonal:
/// symmetric, weakly diagonally dominant with strict dominance on boundary
/// rows, irreducible, hence SPD.
///
/// # Errors
///
/// [`GenError::ZeroSize`] for `n == 0`; [`GenError::TooLarge`] when `n^3`
/// overflows or the arrays cannot be allocated;
/// [`GenError::InvalidContrast`] unless `0 < contrast <= f64::MAX / 16`.
pub fn poisson3d_heterogeneous(n: usize, contrast: f64, seed: u64) -> Result<CsMat<f64>, GenError> {
    // Written so that NaN fails.
    if !(contrast > 0.0 && contrast <= MAX_CONTRAST) {
        return Err(GenError::InvalidContrast { contrast });
    }
    let (rows, _) = sizes(n, 3)?;
    let mut k: Vec<f64> = alloc(rows, n, 3)?;
    let mut rng = SplitMix64::new(seed);
    for _ in 0..rows {
        k.push(if rng.next_f64() < HIGH_PROBABILITY {
            contrast
        } else {
            1.0
        });
    }
    build3d(n, |a, b| match b {
        Some(b) => harmonic_mean(k[a], k[b]),
        None => k[a],
    })
}

/// `2ab/(a+b)`, symmetric in its arguments bit for bit, exact for `a == b`,
/// and free of intermediate overflow for finite positive inputs.
fn harmonic_mean(a: f64, b: f64) -> f64 {
    if a == b {
        return a;
    }
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    2.0 * lo * (hi / (lo + hi))
}

/// Builds the 7-point matrix; `face(cell, Some(neighbour))` is the
/// coefficient of an interior face (must be symmetric in its cells) and
/// `face(cell, None)` that of a boundary face.
fn build3d<F>(n: usize, face: F) -> Result<CsMat<f64>, GenError>
where
    F: Fn(usize, Option<usize>) -> f64,
{
    let (rows, nnz) = sizes(n, 3)?;
    let mut indptr = alloc(rows + 1, n, 3)?;
    let mut indices = alloc(nnz, n, 3)?;
    let mut data = alloc(nnz, n, 3)?;
    let nn = n * n;
    indptr.push(0);
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let r = x + n * y + nn * z;
                // Neighbours in increasing column order, diagonal between.
                let nb = [
                    (z > 0).then(|| r - nn),
                    (y > 0).then(|| r - n),
                    (x > 0).then(|| r - 1),
                    (x + 1 < n).then(|| r + 1),
                    (y + 1 < n).then(|| r + n),
                    (z + 1 < n).then(|| r + nn),
                ];
                let coef = nb.map(|b| face(r, b));
                let diag = coef.iter().sum::<f64>();
                for (i, (b, c)) in nb.iter().zip(coef).enumerate() {
                    if i == 3 {
                        indices.push(r);
                        data.push(diag);
                    }
                    if let Some(b) = b {
                        indices.push(*b);
                        data.push(-c);
                    }
                }
                indptr.push(indices.len());
            }
        }
    }
    // Valid CSR by construction (sorted, in-range, unique columns).
    Ok(CsMat::new((rows, rows), indptr, indices, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(a: &CsMat<f64>) -> Vec<Vec<f64>> {
        let mut d = vec![vec![0.0; a.cols()]; a.rows()];
        for (&v, (r, c)) in a.iter() {
            d[r][c] = v;
        }
        d
    }

    fn assert_symmetric(a: &CsMat<f64>) {
        let t: CsMat<f64> = a.transpose_view().to_csr();
        assert_eq!(a.indptr().raw_storage(), t.indptr().raw_storage());
        assert_eq!(a.indices(), t.indices());
        let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a.data()), bits(t.data()), "not bitwise symmetric");
    }

    /// Dense Cholesky `A = L L^T`; panics on a non-positive pivot.
    fn assert_spd_by_cholesky(a: &CsMat<f64>) {
        let n = a.rows();
        let mut l = dense(a);
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
        for j in 0..n {
            let d = l[j][j] - dot(&l[j][..j], &l[j][..j]);
            assert!(d > 0.0, "non-positive pivot {d} at {j}");
            let d = d.sqrt();
            l[j][j] = d;
            for i in j + 1..n {
                let s = l[i][j] - dot(&l[i][..j], &l[j][..j]);
                l[i][j] = s / d;
            }
        }
    }

    fn row_sums(a: &CsMat<f64>) -> Vec<f64> {
        a.outer_iterator()
            .map(|row| row.iter().map(|(_, &v)| v).sum())
            .collect()
    }

    /// Number of the cell's faces on the domain boundary.
    fn boundary_faces(coords: &[usize], n: usize) -> usize {
        coords
            .iter()
            .map(|&c| usize::from(c == 0) + usize::from(c + 1 == n))
            .sum()
    }

    #[test]
    fn poisson2d_nnz_values_and_row_sums() {
        for n in 1..=7 {
            let a = poisson2d(n).unwrap();
            assert_eq!(a.rows(), n * n);
            assert_eq!(a.nnz(), 5 * n * n - 4 * n, "n = {n}");
            assert_symmetric(&a);
            for (r, row) in a.outer_iterator().enumerate() {
                for (c, &v) in row.iter() {
                    assert_eq!(v, if c == r { 4.0 } else { -1.0 });
                }
            }
            let sums = row_sums(&a);
            for y in 0..n {
                for x in 0..n {
                    let expected = boundary_faces(&[x, y], n) as f64;
                    assert_eq!(sums[x + n * y], expected, "row ({x},{y}) n={n}");
                }
            }
        }
        let d = dense(&poisson2d(3).unwrap());
        assert_eq!(d[4][1], -1.0);
        assert_eq!(d[4][3], -1.0);
        assert_eq!(d[4][5], -1.0);
        assert_eq!(d[4][7], -1.0);
        assert_eq!(d[2][3], 0.0, "no wrap-around between grid rows");
    }

    #[test]
    fn poisson3d_nnz_values_and_row_sums() {
        for n in 1..=6 {
            let a = poisson3d(n).unwrap();
            assert_eq!(a.rows(), n * n * n);
            assert_eq!(a.nnz(), 7 * n * n * n - 6 * n * n, "n = {n}");
            assert_symmetric(&a);
            for (r, row) in a.outer_iterator().enumerate() {
                for (c, &v) in row.iter() {
                    assert_eq!(v, if c == r { 6.0 } else { -1.0 });
                }
            }
            let sums = row_sums(&a);
            for z in 0..n {
                for y in 0..n {
                    for x in 0..n {
                        let expected = boundary_faces(&[x, y, z], n) as f64;
                        let s = sums[x + n * y + n * n * z];
                        assert_eq!(s, expected);
                        let interior = expected == 0.0;
                        assert!(interior || s > 0.0);
                    }
                }
            }
        }
    }

    #[test]
    fn poisson3d_neighbours_are_lexicographic() {
        let n = 4;
        let d = dense(&poisson3d(n).unwrap());
        let r = 1 + n + n * n; // (1,1,1)
        for c in [r - n * n, r - n, r - 1, r + 1, r + n, r + n * n] {
            assert_eq!(d[r][c], -1.0);
        }
        assert_eq!(d[n - 1][n], 0.0, "no wrap-around in x");
        assert_eq!(d[n * n - 1][n * n - 1 + n], 0.0, "no wrap-around in y");
    }

    #[test]
    fn heterogeneous_with_contrast_1_is_poisson3d() {
        for n in 1..=5 {
            assert_eq!(
                poisson3d_heterogeneous(n, 1.0, 99).unwrap(),
                poisson3d(n).unwrap()
            );
        }
    }

    #[test]
    fn heterogeneous_matches_independent_reference() {
        let (n, c, seed) = (4, 250.0, 5);
        let a = poisson3d_heterogeneous(n, c, seed).unwrap();
        let mut rng = SplitMix64::new(seed);
        let k: Vec<f64> = (0..n * n * n)
            .map(|_| if rng.next_f64() < 0.3 { c } else { 1.0 })
            .collect();
        let high = k.iter().filter(|&&v| v == c).count();
        assert!(high > 0 && high < k.len());
        let d = dense(&a);
        let id = |x: usize, y: usize, z: usize| x + n * y + n * n * z;
        for z in 0..n {
            for y in 0..n {
                for x in 0..n {
                    let r = id(x, y, z);
                    let mut diag = 0.0;
                    let p = [x as isize, y as isize, z as isize];
                    for axis in 0..3 {
                        for step in [-1isize, 1] {
                            let mut q = p;
                            q[axis] += step;
                            if q.iter().any(|&v| v < 0 || v >= n as isize) {
                                diag += k[r];
                            } else {
                                let b = id(q[0] as usize, q[1] as usize, q[2] as usize);
                                let f = 2.0 * k[r] * k[b] / (k[r] + k[b]);
                                diag += f;
                                assert!((d[r][b] + f).abs() <= 1e-12 * f, "({r},{b})");
                            }
                        }
                    }
                    assert!((d[r][r] - diag).abs() <= 1e-12 * diag, "diag {r}");
                }
            }
        }
        assert_eq!(a.nnz(), 7 * n * n * n - 6 * n * n);
    }

    #[test]
    fn heterogeneous_symmetry_and_row_sums() {
        let n = 6;
        let a = poisson3d_heterogeneous(n, DEFAULT_CONTRAST, DEFAULT_SEED).unwrap();
        assert_symmetric(&a);
        let sums = row_sums(&a);
        for z in 0..n {
            for y in 0..n {
                for x in 0..n {
                    let r = x + n * y + n * n * z;
                    let diag = a.get(r, r).copied().unwrap_or(0.0);
                    if boundary_faces(&[x, y, z], n) == 0 {
                        assert!(sums[r].abs() <= 1e-12 * diag, "row {r}: {}", sums[r]);
                    } else {
                        assert!(sums[r] > 0.0, "row {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn heterogeneous_is_deterministic_per_seed() {
        let a = poisson3d_heterogeneous(5, 1e3, 1).unwrap();
        let b = poisson3d_heterogeneous(5, 1e3, 1).unwrap();
        let c = poisson3d_heterogeneous(5, 1e3, 2).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.indices(), c.indices(), "same structure");
        assert_ne!(a.data(), c.data(), "different seed, different values");
    }

    #[test]
    fn heterogeneous_seed_1_is_pinned() {
        // High cells of the 3x3x3 grid for the default seed (u < 0.3 on the
        // SplitMix64 stream of seed 1, computed independently): the matrix
        // for a seed never changes.
        let high = [8, 15, 20, 21, 23, 24, 25];
        let n = 3;
        let a = poisson3d_heterogeneous(n, 1e3, 1).unwrap();
        for z in 0..n {
            for y in 0..n {
                for x in 0..n {
                    let cell = x + n * y + n * n * z;
                    let bf = boundary_faces(&[x, y, z], n);
                    if bf == 0 {
                        continue;
                    }
                    // diag = (interior face coefficients) + bf * k_cell.
                    let offdiag: f64 = a
                        .outer_view(cell)
                        .map(|row| {
                            row.iter()
                                .filter(|&(c, _)| c != cell)
                                .map(|(_, v)| -v)
                                .sum()
                        })
                        .unwrap_or(0.0);
                    let diag = a.get(cell, cell).copied().unwrap_or(0.0);
                    let k = (diag - offdiag) / bf as f64;
                    let expected = if high.contains(&cell) { 1e3 } else { 1.0 };
                    assert!((k - expected).abs() <= 1e-9 * expected, "cell {cell}: {k}");
                }
            }
        }
    }

    #[test]
    fn all_generators_are_spd_by_cholesky() {
        assert_spd_by_cholesky(&poisson2d(3).unwrap());
        assert_spd_by_cholesky(&poisson3d(3).unwrap());
        assert_spd_by_cholesky(&poisson3d_heterogeneous(3, 1e3, 1).unwrap());
        assert_spd_by_cholesky(&poisson3d_heterogeneous(3, 1e6, 42).unwrap());
    }

    #[test]
    fn invalid_arguments_are_errors() {
        assert_eq!(poisson2d(0), Err(GenError::ZeroSize));
        assert_eq!(poisson3d(0), Err(GenError::ZeroSize));
        assert_eq!(poisson3d_heterogeneous(0, 1e3, 1), Err(GenError::ZeroSize));
        // n^3 (or n^2) overflows usize.
        assert_eq!(
            poisson3d(1 << 22),
            Err(GenError::TooLarge { n: 1 << 22, dim: 3 })
        );
        assert_eq!(
            poisson2d(1 << 33),
            Err(GenError::TooLarge { n: 1 << 33, dim: 2 })
        );
        // Representable sizes that cannot be allocated fail without aborting.
        assert!(matches!(poisson3d(1 << 20), Err(GenError::TooLarge { .. })));
        assert!(matches!(
            poisson3d_heterogeneous(1 << 20, 2.0, 1),
            Err(GenError::TooLarge { .. })
        ));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::MAX] {
            assert!(matches!(
                poisson3d_heterogeneous(2, bad, 1),
                Err(GenError::InvalidContrast { .. })
            ));
        }
        let msg = GenError::ZeroSize.to_string();
        assert!(!msg.ends_with('.'));
        let msg = GenError::InvalidContrast { contrast: -1.0 }.to_string();
        assert!(msg.contains("got -1"), "{msg}");
    }

    #[test]
    fn harmonic_mean_is_symmetric_and_exact_when_equal() {
        for (a, b) in [(1.0, 1e3), (3.0, 7.0), (1e-300, 1e300), (0.1, 0.3)] {
            assert_eq!(harmonic_mean(a, b).to_bits(), harmonic_mean(b, a).to_bits());
            let h = harmonic_mean(a, b);
            assert!(h >= a.min(b) && h <= 2.0 * a.min(b));
        }
        assert_eq!(harmonic_mean(1e3, 1e3), 1e3);
        assert_eq!(harmonic_mean(1.0, 1e3), 2e3 / 1001.0);
    }
}
