//! Sequential textbook references, written independently of the crates under test.

/// A plain CSR matrix (row pointers, column indices, values), as references take it.
#[derive(Debug, Clone, Copy)]
pub struct CsrRef<'a> {
    /// Row pointers, `n + 1` entries.
    pub indptr: &'a [usize],
    /// Column indices.
    pub indices: &'a [usize],
    /// Values.
    pub data: &'a [f64],
}

impl<'a> CsrRef<'a> {
    /// The arrays of an `sprs` matrix in compressed-row storage.
    ///
    /// # Panics
    /// If `a` is stored by columns (its pointers would be column pointers).
    pub fn of(a: &'a sprs::CsMat<f64>) -> Self {
        assert!(a.is_csr(), "CsrRef::of needs a matrix in CSR storage");
        CsrRef {
            indptr: a.indptr().into_raw_storage(),
            indices: a.indices(),
            data: a.data(),
        }
    }
}

impl CsrRef<'_> {
    /// Number of rows.
    pub fn n(&self) -> usize {
        self.indptr.len() - 1
    }

    /// `y = A x`.
    pub fn matvec(&self, x: &[f64]) -> Vec<f64> {
        (0..self.n())
            .map(|i| {
                (self.indptr[i]..self.indptr[i + 1])
                    .map(|k| self.data[k] * x[self.indices[k]])
                    .sum()
            })
            .collect()
    }

    /// The diagonal.
    pub fn diagonal(&self) -> Vec<f64> {
        (0..self.n())
            .map(|i| {
                (self.indptr[i]..self.indptr[i + 1])
                    .filter(|&k| self.indices[k] == i)
                    .map(|k| self.data[k])
                    .sum()
            })
            .collect()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Textbook preconditioned CG with `M = diag(A)` (Saad, "Iterative Methods for Sparse
/// Linear Systems", Alg. 9.1), x0 = 0, stopping when `||r|| <= tol ||b||` on the
/// recurrence residual (as `scipy.sparse.linalg.cg(A, b, rtol=tol, M=diag^-1)` does).
/// Returns the solution and the iteration count.
pub fn jacobi_pcg(a: CsrRef<'_>, b: &[f64], tol: f64, max_iter: usize) -> (Vec<f64>, usize) {
    let n = a.n();
    let d = a.diagonal();
    let mut x = vec![0.0; n];
    let mut r = b.to_vec();
    let mut z: Vec<f64> = r.iter().zip(&d).map(|(r, d)| r / d).collect();
    let mut p = z.clone();
    let mut rz = dot(&r, &z);
    let bnorm = dot(b, b).sqrt();
    for it in 0..max_iter {
        if dot(&r, &r).sqrt() <= tol * bnorm {
            return (x, it);
        }
        let q = a.matvec(&p);
        let alpha = rz / dot(&p, &q);
        for i in 0..n {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        z = r.iter().zip(&d).map(|(r, d)| r / d).collect();
        let rz_new = dot(&r, &z);
        let beta = rz_new / rz;
        rz = rz_new;
        for i in 0..n {
            p[i] = z[i] + beta * p[i];
        }
    }
    (x, max_iter)
}

/// `||b - A x|| / ||b||`.
pub fn relres(a: CsrRef<'_>, b: &[f64], x: &[f64]) -> f64 {
    let ax = a.matvec(x);
    let r: Vec<f64> = b.iter().zip(&ax).map(|(b, y)| b - y).collect();
    dot(&r, &r).sqrt() / dot(b, b).sqrt()
}
