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

/// An upper bound on the EXACT relative residual `||b - A x|| / ||b||` of the given
/// doubles (the rounding of any evaluation removed), for claims at the rounding floor
/// where a floating-point residual is itself mostly rounding.
///
/// Each row `b_i - sum_k a_ik x_k` is formed exactly as a floating-point expansion
/// (Shewchuk, "Adaptive precision floating-point arithmetic and fast robust geometric
/// predicates", Discrete Comput. Geom. 18, 1997: `TwoProduct` by fused multiply-add,
/// `Grow-Expansion` by `TwoSum`), then rounded to double-double; the squares of the rows
/// and of `b` are summed in double-double. What is left is a relative error near
/// `1e-30 (sum |terms|) / |r_i|` per row and a few `2^-53` in the final square root and
/// quotient, which the factor `1 + 1e-14` covers for any residual above `1e-300`.
/// Independent of the solver's arithmetic (no fused sums, no scaling).
///
/// # Panics
/// If a product or sum overflows, or `b` is zero.
pub fn relres_exact_upper(a: CsrRef<'_>, b: &[f64], x: &[f64]) -> f64 {
    let mut rr = Dd::ZERO;
    let mut bb = Dd::ZERO;
    let mut e: Vec<f64> = Vec::new();
    for (i, &bi) in b.iter().enumerate().take(a.n()) {
        e.clear();
        grow(&mut e, bi);
        for k in a.indptr[i]..a.indptr[i + 1] {
            let (p, q) = two_prod(a.data[k], x[a.indices[k]]);
            grow(&mut e, -p);
            grow(&mut e, -q);
        }
        let r = e.iter().fold(Dd::ZERO, |s, &c| s.add(c));
        rr = rr.add_dd(r.square());
        bb = bb.add_dd(Dd { hi: bi, lo: 0.0 }.square());
    }
    assert!(rr.hi.is_finite() && bb.hi.is_finite() && bb.hi > 0.0);
    ((rr.hi + rr.lo) / (bb.hi + bb.lo)).sqrt() * (1.0 + 1e-14)
}

/// `a b = p + q` exactly (`q` by a fused multiply-add).
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    (p, a.mul_add(b, -p))
}

/// `a + b = s + t` exactly (Knuth's TwoSum).
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// Add `b` to the nonoverlapping expansion `e` (components in increasing magnitude),
/// exactly (Shewchuk's Grow-Expansion, zero components dropped).
fn grow(e: &mut Vec<f64>, b: f64) {
    let mut q = b;
    let mut out = 0;
    for j in 0..e.len() {
        let (s, h) = two_sum(q, e[j]);
        q = s;
        if h != 0.0 {
            e[out] = h;
            out += 1;
        }
    }
    e.truncate(out);
    if q != 0.0 || e.is_empty() {
        e.push(q);
    }
}

/// A double-double number `hi + lo`, `|lo| <= ulp(hi) / 2`.
#[derive(Debug, Clone, Copy)]
struct Dd {
    hi: f64,
    lo: f64,
}

impl Dd {
    const ZERO: Dd = Dd { hi: 0.0, lo: 0.0 };

    fn renorm(hi: f64, lo: f64) -> Dd {
        let (hi, lo) = two_sum(hi, lo);
        Dd { hi, lo }
    }

    /// `self + c` for a double `c`.
    fn add(self, c: f64) -> Dd {
        let (s, t) = two_sum(self.hi, c);
        Dd::renorm(s, t + self.lo)
    }

    /// `self + o`.
    fn add_dd(self, o: Dd) -> Dd {
        let (s, t) = two_sum(self.hi, o.hi);
        Dd::renorm(s, t + self.lo + o.lo)
    }

    /// `self^2`.
    fn square(self) -> Dd {
        let (p, q) = two_prod(self.hi, self.hi);
        Dd::renorm(p, q + 2.0 * self.hi * self.lo + self.lo * self.lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_residual_sees_what_rounding_hides() {
        // 3 fl(1/3) = 1 - 2^-54 exactly, which a double evaluation rounds to 1.
        let third = 1.0 / 3.0;
        let (indptr, indices, data) = ([0, 1], [0], [3.0]);
        let a = CsrRef {
            indptr: &indptr,
            indices: &indices,
            data: &data,
        };
        assert_eq!(relres(a, &[1.0], &[third]), 0.0);
        let got = relres_exact_upper(a, &[1.0], &[third]);
        let want = 2f64.powi(-54);
        assert!(got >= want && got <= want * (1.0 + 2e-14), "{got:e}");
        // Two rows, the second's residual lost to cancellation in doubles:
        // r = [2^-52, -x_1] exactly.
        let (indptr, indices) = ([0, 1, 3], [0, 0, 1]);
        let data = [1.0, 1e20, 1.0];
        let a = CsrRef {
            indptr: &indptr,
            indices: &indices,
            data: &data,
        };
        let x = [1.0, 1e-20 + 2f64.powi(-70)];
        let b = [1.0 + 2f64.powi(-52), 1e20];
        let r = [2f64.powi(-52), -x[1]];
        let want = ((r[0] * r[0] + r[1] * r[1]) / (b[0] * b[0] + b[1] * b[1])).sqrt();
        let got = relres_exact_upper(a, &b, &x);
        assert!(
            got >= want * (1.0 - 1e-15) && got <= want * (1.0 + 2e-14),
            "{got:e} {want:e}"
        );
    }
}
