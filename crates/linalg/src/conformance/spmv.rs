//! SpMV against the reference: `spmv` over all rows and over a row prefix (the rows past
//! it untouched), the fused `spmv_dot` (its `y`, its `x . y` within the bound of the
//! dot of two vectors whose rows agree to rounding, the slots around it, and the same bits
//! when repeated), and the true residual with its error bound, `residual_bound` (its `y`
//! and norms against the reference as `spmv_dot`'s, its bound against an independent
//! evaluation of the formula).

use super::{abs_dot, random_vec, sum_bound, Kit};
use crate::device::{Cpu, Device, HostCsr, UNIT_ROUNDOFF};
use crate::LinalgError;

/// The value the rows past an SpMV's row prefix hold before and after it.
const SENTINEL: f64 = 7.0;

/// One matrix, its input vector, and the reference's results with the bounds a device's
/// must meet.
pub(super) struct SpmvCase<'m> {
    /// The matrix's name in the labels (`poisson3d`, `random_irregular`).
    pub(super) name: &'m str,
    /// The matrix.
    pub(super) m: &'m HostCsr,
    /// The input vector.
    pub(super) x: Vec<f64>,
    /// `A x` on the reference.
    want: Vec<f64>,
    /// `x . A x` on the reference.
    want_dot: f64,
    /// The rounding bound of each row of `A x`.
    row_bound: Vec<f64>,
    /// How far `x . y` may move when `y`'s rows move within `row_bound`.
    spread: f64,
    /// The rounding bound of `x . y` for the same `y`.
    dot_bound: f64,
    /// Rows of the prefix SpMV.
    prefix: usize,
    /// The true residual's right-hand side `b` and positive weights `w`.
    b: Vec<f64>,
    w: Vec<f64>,
    /// `b - A x` on the reference, and its rounding bound per row.
    want_res: Vec<f64>,
    res_bound: Vec<f64>,
    /// `[y.y, sum y_i^2 w_i]` of `b - A x` on the reference, and the bound each may move by
    /// (rounding, and rows that agree to rounding only).
    want_norms: [f64; 2],
    norms_bound: [f64; 2],
    /// `sum_i w_i e_i^2` with `e_i = (m_i + 6) 2^-53 (|b_i| + sum_j |a_ij x_j|)`, evaluated
    /// here from the formula (not by a device), and its rounding bound.
    want_bound: f64,
    bound_bound: f64,
}

impl<'m> SpmvCase<'m> {
    /// The reference's SpMV of `m` with the random `x` of stream `seed ^ 0x5eed`.
    pub(super) fn new(
        cpu: &mut Cpu,
        name: &'m str,
        m: &'m HostCsr,
        seed: u64,
    ) -> Result<Self, LinalgError> {
        let rows = m.rows();
        let x = random_vec(m.ncols.max(rows), seed ^ 0x5eed);
        let a = cpu.upload_csr(m.clone())?;
        let mut want = vec![0.0; rows];
        cpu.spmv(&a, rows, &x, &mut want)?;
        let (mut y, mut dot) = (vec![0.0; rows], vec![0.0]);
        cpu.spmv_dot(&a, &x, &mut y, &mut dot, 0)?;
        let row_bound: Vec<f64> = m
            .indptr
            .windows(2)
            .map(|w| {
                let s: f64 = (w[0]..w[1])
                    .map(|k| (m.vals[k] * x[m.cols[k] as usize]).abs())
                    .sum();
                sum_bound(w[1] - w[0], s)
            })
            .collect();
        let spread = (0..rows).map(|i| x[i].abs() * row_bound[i]).sum();
        let dot_bound = sum_bound(rows, abs_dot(rows, &x, &want));
        let b = random_vec(rows, seed ^ 0xb0b);
        let w: Vec<f64> = random_vec(rows, seed ^ 0x3e1)
            .iter()
            .map(|u| u.abs() + 0.25)
            .collect();
        let (mut want_res, mut out) = (vec![0.0; rows], vec![0.0; 3]);
        cpu.residual_bound(&a, &x, &b, &mut want_res, &w, &mut out, 0, 2)?;
        let res_bound: Vec<f64> = (0..rows)
            .map(|i| row_bound[i] + sum_bound(2, b[i].abs() + want[i].abs()))
            .collect();
        let norm_bound = |wi: &dyn Fn(usize) -> f64| -> f64 {
            let abs: f64 = (0..rows).map(|i| want_res[i] * wi(i) * want_res[i]).sum();
            let moved: f64 = (0..rows)
                .map(|i| (2.0 * want_res[i].abs() + res_bound[i]) * res_bound[i] * wi(i))
                .sum();
            sum_bound(rows, abs) + moved
        };
        let norms_bound = [norm_bound(&|_| 1.0), norm_bound(&|i| w[i])];
        // The bound from its definition, row by row in CSR order.
        let (mut want_bound, mut longest) = (0.0, 0);
        for (i, r) in m.indptr.windows(2).enumerate() {
            let abs: f64 = (r[0]..r[1])
                .map(|k| (m.vals[k] * x[m.cols[k] as usize]).abs())
                .sum();
            let e = (r[1] - r[0] + 6) as f64 * UNIT_ROUNDOFF * (b[i].abs() + abs);
            want_bound += w[i] * e * e;
            longest = longest.max(r[1] - r[0]);
        }
        // Each term's sum of |a_ij x_j| may differ by rounding (any order), then its square
        // and weight, then the sum over the rows.
        let bound_bound = sum_bound(rows + 2 * longest + 8, want_bound);
        Ok(Self {
            name,
            m,
            x,
            want,
            want_dot: dot[0],
            row_bound,
            spread,
            dot_bound,
            prefix: (rows / 2 + 3).min(rows),
            b,
            w,
            want_res,
            res_bound,
            want_norms: [out[0], out[1]],
            norms_bound,
            want_bound,
            bound_bound,
        })
    }
}

/// The SpMV checks of one upload `a` of `case.m` (input `x`, on the device) whose
/// kernel is named `kernel` in the labels: the reference's bits when `exact` (the kernel
/// sums every row in CSR order), else each row within its rounding bound.
pub(super) fn check_matrix<D: Device>(
    kit: &mut Kit<'_, D>,
    case: &SpmvCase<'_>,
    kernel: &str,
    a: &D::Matrix,
    x: &D::Vector,
    exact: bool,
) -> Result<(), LinalgError> {
    rows(kit, case, kernel, a, x, exact)?;
    fused_dot(kit, case, kernel, a, x, exact)?;
    residual_bound(kit, case, kernel, a, x, exact)
}

/// `spmv` over all rows, then over the prefix (the rest keeps its sentinel).
fn rows<D: Device>(
    kit: &mut Kit<'_, D>,
    case: &SpmvCase<'_>,
    kernel: &str,
    a: &D::Matrix,
    x: &D::Vector,
    exact: bool,
) -> Result<(), LinalgError> {
    let (rows, prefix) = (case.m.rows(), case.prefix);
    let label = format!("{}: spmv {kernel}", case.name);
    let mut y = kit.up(&vec![SENTINEL; rows])?;
    kit.dev.spmv(a, rows, x, &mut y)?;
    let got = kit.get(&y)?;
    agree(kit, exact, &label, &got, &case.want, &case.row_bound);
    let mut y = kit.up(&vec![SENTINEL; rows])?;
    kit.dev.spmv(a, prefix, x, &mut y)?;
    let got = kit.get(&y)?;
    let what = format!("{label} (first {prefix} rows)");
    let (want, bound) = (&case.want[..prefix], &case.row_bound[..prefix]);
    agree(kit, exact, &what, &got[..prefix], want, bound);
    kit.bits(
        &format!("{label} (rows past the prefix untouched)"),
        &got[prefix..],
        &vec![SENTINEL; rows - prefix],
    );
    Ok(())
}

/// `spmv_dot` into `out[1]` of three slots, twice.
fn fused_dot<D: Device>(
    kit: &mut Kit<'_, D>,
    case: &SpmvCase<'_>,
    kernel: &str,
    a: &D::Matrix,
    x: &D::Vector,
    exact: bool,
) -> Result<(), LinalgError> {
    let mut y = kit.dev.zeros(case.m.rows())?;
    let mut res = kit.dev.zeros(3)?;
    kit.dev.spmv_dot(a, x, &mut y, &mut res, 1)?;
    let first = kit.get(&res)?;
    kit.dev.spmv_dot(a, x, &mut y, &mut res, 1)?;
    let second = kit.get(&res)?;
    let got = kit.get(&y)?;
    let label = format!("{}: spmv_dot {kernel}", case.name);
    let what = format!("{label} (y)");
    agree(kit, exact, &what, &got, &case.want, &case.row_bound);
    let bound = case.dot_bound + if exact { 0.0 } else { case.spread };
    let (got, want) = (&first[1..2], [case.want_dot]);
    kit.bound(&format!("{label} (x.y)"), got, &want, &[bound]);
    let edges = [first[0], first[2]];
    kit.bits(
        &format!("{label} (slots around the result)"),
        &edges,
        &[0.0; 2],
    );
    kit.bits(&format!("{label} (repeated: same bits)"), &second, &first);
    Ok(())
}

/// `residual_bound` with its norms in `out[1..3]` and its bound in `out[4]` of six slots,
/// twice (a bound slot overlapping the norms is refused in `errors.rs`).
fn residual_bound<D: Device>(
    kit: &mut Kit<'_, D>,
    case: &SpmvCase<'_>,
    kernel: &str,
    a: &D::Matrix,
    x: &D::Vector,
    exact: bool,
) -> Result<(), LinalgError> {
    let rows = case.m.rows();
    let (b, w) = (kit.up(&case.b)?, kit.up(&case.w)?);
    let mut y = kit.up(&vec![SENTINEL; rows])?;
    let mut res = kit.dev.zeros(6)?;
    kit.dev
        .residual_bound(a, x, &b, &mut y, &w, &mut res, 1, 4)?;
    let first = kit.get(&res)?;
    kit.dev
        .residual_bound(a, x, &b, &mut y, &w, &mut res, 1, 4)?;
    let second = kit.get(&res)?;
    let got = kit.get(&y)?;
    let label = format!("{}: residual_bound {kernel}", case.name);
    let what = format!("{label} (y = b - A x)");
    agree(kit, exact, &what, &got, &case.want_res, &case.res_bound);
    let what = format!("{label} (y.y, y.W y)");
    let nb = if exact {
        // Rows with the reference's bits: the norms' own rounding only.
        let f = |k: usize| sum_bound(rows, case.want_norms[k].abs());
        [f(0), f(1)]
    } else {
        case.norms_bound
    };
    kit.bound(&what, &first[1..3], &case.want_norms, &nb);
    let what = format!("{label} (sum w e^2 against its formula)");
    kit.bound(&what, &first[4..5], &[case.want_bound], &[case.bound_bound]);
    let edges = [first[0], first[3], first[5]];
    kit.bits(
        &format!("{label} (slots around the results)"),
        &edges,
        &[0.0; 3],
    );
    kit.bits(&format!("{label} (repeated: same bits)"), &second, &first);
    Ok(())
}

/// The same bits when `exact`, else within `bound`.
fn agree<D: Device>(
    kit: &mut Kit<'_, D>,
    exact: bool,
    check: &str,
    got: &[f64],
    want: &[f64],
    bound: &[f64],
) {
    if exact {
        kit.bits(check, got, want);
    } else {
        kit.bound(check, got, want, bound);
    }
}
