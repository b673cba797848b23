//! Every operation of `Cpu` as a `Device` against independent sequential loops (the
//! formulas of the trait's documentation), sequential and on a pool (the same bits for any
//! thread count); the CUDA kernels' compilation (NVRTC, no GPU needed) and the no-driver
//! error path.

use std::sync::Arc;

use super::cpu::CHUNK;
use super::{
    BasisStep, CcgVecs, Concat, CsrRef, Device, DeviceError, GramShape, HostCsr, PipecgVecs, Refs,
    RefsMut,
};
use crate::gen::{poisson3d, SplitMix64};
use crate::Cpu;

fn random_vec(n: usize, seed: u64) -> Vec<f64> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| 2.0 * r.next_f64() - 1.0).collect()
}

fn pooled() -> Cpu {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .expect("a 3-thread pool");
    Cpu::with_pool(Arc::new(pool))
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `|got - want| <= 64 n eps sum |terms|` (a rigorous bound for any summation order).
fn close(got: f64, want: f64, abs_sum: f64, n: usize, what: &str) {
    let bound = 64.0 * n as f64 * f64::EPSILON * abs_sum + f64::MIN_POSITIVE;
    assert!(
        (got - want).abs() <= bound,
        "{what}: {got:e} vs {want:e} (bound {bound:e})"
    );
}

fn dot(a: &[f64], b: &[f64]) -> (f64, f64) {
    let s = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let abs = a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum();
    (s, abs)
}

/// SpMV and the fused SpMV-dot give the bits of a plain CSR row loop, over all rows and a
/// prefix of them.
#[test]
fn spmv_kernels_match_a_plain_row_loop() {
    let a = HostCsr::from_csmat(&poisson3d(14).expect("poisson")).expect("32-bit columns");
    let irr = HostCsr::random_irregular(40_000, 40_000, 60, 7);
    for mut dev in [Cpu::sequential(), pooled()] {
        for (m, seed) in [(&a, 1u64), (&irr, 2)] {
            let (rows, ncols) = (m.rows(), m.ncols);
            let xh = random_vec(ncols, seed);
            let naive: Vec<f64> = m
                .indptr
                .windows(2)
                .map(|w| (w[0]..w[1]).fold(0.0, |s, k| s + m.vals[k] * xh[m.cols[k] as usize]))
                .collect();
            // Uploads are copies (first touched in the kernels' tasks on a pool).
            let da = dev.upload_csr(m.clone()).expect("valid CSR");
            assert_eq!(&da, m);
            let x = dev.upload(&xh).expect("upload");
            assert_eq!(bits(&x), bits(&xh));
            let mut y = dev.zeros(rows).expect("zeros");
            assert!(y.iter().all(|v| v.to_bits() == 0));
            dev.spmv(&da, rows, &x, &mut y).expect("spmv");
            assert_eq!(bits(&y), bits(&naive));
            // A prefix of the rows leaves the rest alone.
            let mut yp = vec![7.0; rows];
            let half = rows / 2 + 3;
            dev.spmv(&da, half, &x, &mut yp).expect("prefix spmv");
            assert_eq!(bits(&yp[..half]), bits(&naive[..half]));
            assert!(yp[half..].iter().all(|&v| v == 7.0));
            // Fused with x[..rows] . y (square blocks).
            if rows == ncols {
                let mut y2 = dev.zeros(rows).unwrap();
                let mut out = dev.zeros(3).unwrap();
                dev.spmv_dot(&da, &x, &mut y2, &mut out, 1)
                    .expect("spmv_dot");
                assert_eq!(bits(&y2), bits(&naive));
                let (want, abs) = dot(&xh, &naive);
                close(out[1], want, abs, rows, "spmv_dot");
                assert_eq!(out[0], 0.0);
                assert_eq!(out[2], 0.0);
            }
        }
    }
}

/// The true residual with its error bound: `y = b - A x` and its norms the bits of `spmv`
/// followed by `residual_norms`, the bound within rounding of its formula evaluated by a
/// plain loop (`sum_i w_i e_i^2`, `e_i = (m_i + 6) 2^-53 (|b_i| + sum_j |a_ij x_j|)`), the
/// same bits on a pool; a bound slot on the norms and short operands are errors.
#[test]
fn residual_bound_gives_the_residual_norms_bits_and_its_formula() {
    let a = HostCsr::from_csmat(&poisson3d(26).expect("poisson")).expect("32-bit columns");
    let irr = HostCsr::random_irregular(3 * CHUNK + 7, 3 * CHUNK + 7, 60, 9);
    let mut seen: Vec<Vec<u64>> = Vec::new();
    for mut dev in [Cpu::sequential(), pooled()] {
        for (mi, m) in [&a, &irr].into_iter().enumerate() {
            let rows = m.rows();
            assert!(rows > 2 * CHUNK, "several reduction chunks");
            let x = random_vec(m.ncols, 31);
            let b = random_vec(rows, 32);
            let w: Vec<f64> = random_vec(rows, 33).iter().map(|v| v.abs() + 0.5).collect();
            // The reference sequence: spmv, then residual_norms.
            let mut want = vec![0.0; rows];
            let mut sums = vec![0.0; 2];
            dev.spmv(m, rows, &x, &mut want).unwrap();
            dev.residual_norms(rows, &b, &mut want, &w, &mut sums, 0)
                .unwrap();
            let mut y = vec![f64::NAN; rows];
            let mut out = vec![0.0; 6];
            dev.residual_bound(m, &x, &b, &mut y, &w, &mut out, 1, 4)
                .unwrap();
            assert_eq!(bits(&y), bits(&want), "y = b - A x");
            assert_eq!(bits(&out[1..3]), bits(&sums), "norms");
            assert_eq!([out[0], out[3], out[5]], [0.0; 3], "slots around");
            // The bound from its formula.
            let (mut bound, mut longest) = (0.0, 0);
            for (i, r) in m.indptr.windows(2).enumerate() {
                let abs: f64 = (r[0]..r[1])
                    .map(|k| (m.vals[k] * x[m.cols[k] as usize]).abs())
                    .sum();
                let e = (r[1] - r[0] + 6) as f64 * 2f64.powi(-53) * (b[i].abs() + abs);
                bound += w[i] * e * e;
                longest = longest.max(r[1] - r[0]);
            }
            assert!(bound > 0.0);
            close(out[4], bound, bound, rows + 2 * longest + 8, "bound");
            if seen.len() < 2 {
                seen.push(bits(&out));
            } else {
                assert_eq!(bits(&out), seen[mi], "the same bits on a pool");
            }
            let bad = dev.residual_bound(m, &x, &b, &mut y, &w, &mut out, 1, 2);
            assert!(matches!(bad, Err(DeviceError::LengthMismatch { .. })));
            let bad =
                dev.residual_bound(m, &x, &b[..rows - 1].to_vec(), &mut y, &w, &mut out, 1, 4);
            assert!(matches!(bad, Err(DeviceError::LengthMismatch { .. })));
            let bad = dev.residual_bound(m, &x, &b, &mut y, &w, &mut out, 5, 1);
            assert!(matches!(bad, Err(DeviceError::LengthMismatch { .. })));
        }
    }
}

/// The elementwise operations give the bits of their formulas written as plain loops.
#[test]
fn elementwise_operations_match_their_formulas_bit_for_bit() {
    let n = 3 * CHUNK + 11;
    let v: Vec<Vec<f64>> = (0..9).map(|s| random_vec(n + 5, 100 + s)).collect();
    let (a, b) = (0.37, -1.25);
    for mut dev in [Cpu::sequential(), pooled()] {
        // axpy, xpay, scale, mul, div on the first n values; the tail untouched.
        let mut y = v[1].clone();
        dev.axpy(n, a, &v[0], &mut y).unwrap();
        let want: Vec<f64> = (0..n + 5)
            .map(|i| {
                if i < n {
                    v[1][i] + a * v[0][i]
                } else {
                    v[1][i]
                }
            })
            .collect();
        assert_eq!(bits(&y), bits(&want), "axpy");
        let mut y = v[1].clone();
        dev.xpay(n, &v[0], b, &mut y).unwrap();
        let want: Vec<f64> = (0..n).map(|i| v[0][i] + b * v[1][i]).collect();
        assert_eq!(bits(&y[..n]), bits(&want), "xpay");
        let mut y = v[1].clone();
        dev.scale(n, a, &v[0], &mut y).unwrap();
        let want: Vec<f64> = (0..n).map(|i| v[0][i] * a).collect();
        assert_eq!(bits(&y[..n]), bits(&want), "scale");
        let mut y = v[2].clone();
        dev.mul(n, &v[0], &v[1], &mut y).unwrap();
        let want: Vec<f64> = (0..n).map(|i| v[0][i] * v[1][i]).collect();
        assert_eq!(bits(&y[..n]), bits(&want), "mul");
        dev.div(n, &v[0], &v[1], &mut y).unwrap();
        let want: Vec<f64> = (0..n).map(|i| v[0][i] / v[1][i]).collect();
        assert_eq!(bits(&y[..n]), bits(&want), "div");
        // representable: with scale 2^1021 the entries whose x s is below 1/2 in magnitude
        // leave the normal range on the way out; the others stay bit for bit.
        let scale = 2f64.powi(1021);
        let mut y = v[2].clone();
        dev.representable(n, &v[1], scale, &mut y).unwrap();
        let want: Vec<f64> = (0..n)
            .map(|i| super::representable_value(v[2][i], v[1][i], scale))
            .collect();
        assert_eq!(bits(&y[..n]), bits(&want), "representable");
        let (kept, moved) = (0..n).fold((0, 0), |(k, m), i| {
            let lossy = (v[2][i] * v[1][i]).abs() < 0.5;
            if !lossy {
                assert_eq!(y[i].to_bits(), v[2][i].to_bits(), "representable {i}");
            }
            (k + usize::from(!lossy), m + usize::from(lossy))
        });
        assert!(
            kept > 0 && moved > 0,
            "representable: {kept} kept, {moved} moved"
        );

        // cg_update: x += alpha p, then p = r + beta p.
        let (mut p, mut x) = (v[1].clone(), v[2].clone());
        dev.cg_update(n, a, b, &v[0], &mut p, &mut x).unwrap();
        for i in 0..n {
            assert_eq!(x[i].to_bits(), (v[2][i] + a * v[1][i]).to_bits(), "cg x");
            assert_eq!(p[i].to_bits(), (v[0][i] + b * v[1][i]).to_bits(), "cg p");
        }

        // basis steps.
        let mut out = vec![0.0; n];
        let steps = BasisStep::each_kind(0.3, 0.7, 1.1);
        for step in steps {
            dev.basis_step(n, step, &v[0], &v[1], Some(&v[2]), &mut out)
                .unwrap();
            for i in 0..n {
                let (ai, si, pi) = (v[0][i], v[1][i], v[2][i]);
                let want = match step {
                    BasisStep::Copy => ai,
                    BasisStep::Shift(th) => ai - th * si,
                    BasisStep::ChebyshevFirst { eta, zeta } => eta * ai - zeta * si,
                    BasisStep::Chebyshev { eta, zeta } => 2.0 * (eta * ai - zeta * si) - pi,
                };
                assert_eq!(out[i].to_bits(), want.to_bits(), "{step:?}");
            }
        }
        assert!(dev
            .basis_step(n, steps[3], &v[0], &v[1], None, &mut out)
            .is_err());

        // smoothing.
        let (mut s, mut y) = (v[2].clone(), v[3].clone());
        dev.smooth_update(n, a, &v[0], &v[1], &mut s, &mut y)
            .unwrap();
        for i in 0..n {
            assert_eq!(
                s[i].to_bits(),
                (v[2][i] + a * (v[0][i] - v[2][i])).to_bits()
            );
            assert_eq!(
                y[i].to_bits(),
                (v[3][i] + a * (v[1][i] - v[3][i])).to_bits()
            );
        }
        let (mut s, mut y) = (v[2].clone(), v[3].clone());
        dev.smooth_rescale(n, a, &v[0], &mut s, &mut y).unwrap();
        for i in 0..n {
            assert_eq!(s[i].to_bits(), (v[2][i] * a).to_bits());
            assert_eq!(
                y[i].to_bits(),
                (a * v[3][i] + (1.0 - a) * v[0][i]).to_bits()
            );
        }

        // copy, fill, gather, scatter, read, write.
        let mut y = v[1].clone();
        dev.copy(7, &v[0], 3, &mut y, 10).unwrap();
        assert_eq!(bits(&y[10..17]), bits(&v[0][3..10]));
        dev.fill(5, 2.5, &mut y, 1).unwrap();
        assert!(y[1..6].iter().all(|&x| x == 2.5) && y[0] == v[1][0]);
        let idx: Vec<u32> = (0..50u32).map(|i| i * 37 % n as u32).collect();
        let di = dev.upload_index(&idx).unwrap();
        let mut packed = vec![0.0; 50];
        dev.gather(&v[0], &di, &mut packed).unwrap();
        assert!(packed
            .iter()
            .zip(&idx)
            .all(|(p, &i)| *p == v[0][i as usize]));
        let mut dst = v[1].clone();
        dev.scatter(&packed, &di, &mut dst).unwrap();
        assert!(idx.iter().all(|&i| dst[i as usize] == v[0][i as usize]));
        let mut host = vec![0.0; 9];
        dev.read(&v[0], 4, &mut host).unwrap();
        assert_eq!(bits(&host), bits(&v[0][4..13]));
        let mut y = v[1].clone();
        dev.write(&host, &mut y, 20).unwrap();
        assert_eq!(bits(&y[20..29]), bits(&host));
    }
}

/// The fused updates with sums: exact updates, sums within a rounding bound of the plain
/// sums, and the same bits sequential and on a pool.
#[test]
fn fused_updates_with_sums_are_exact_and_deterministic() {
    let n = 4 * CHUNK + 29;
    let v: Vec<Vec<f64>> = (0..10).map(|s| random_vec(n, 200 + s)).collect();
    let w: Vec<f64> = random_vec(n, 299).iter().map(|x| x.abs() + 0.1).collect();
    let (a, b) = (0.61, 0.83);
    let mut seen: Option<Vec<u64>> = None;
    for mut dev in [Cpu::sequential(), pooled()] {
        let mut sums = vec![0.0; 16];
        // axpy_norms: y += a x, [y.y, y.W y].
        let mut y = v[1].clone();
        dev.axpy_norms(n, -a, &v[0], &mut y, &w, &mut sums, 0)
            .unwrap();
        let yn: Vec<f64> = (0..n).map(|i| v[1][i] - a * v[0][i]).collect();
        assert_eq!(bits(&y), bits(&yn), "axpy_norms update");
        let (yy, yya) = dot(&yn, &yn);
        close(sums[0], yy, yya, n, "axpy_norms y.y");
        let yw: Vec<f64> = (0..n).map(|i| yn[i] * w[i]).collect();
        let (ywy, ywya) = dot(&yw, &yn);
        close(sums[1], ywy, ywya, n, "axpy_norms y.W y");
        // axpy_dot: the same update and the same y.y bits, without the weights.
        let mut y2 = v[1].clone();
        dev.axpy_dot(n, -a, &v[0], &mut y2, &mut sums, 14).unwrap();
        assert_eq!(bits(&y2), bits(&yn), "axpy_dot update");
        assert_eq!(sums[14].to_bits(), sums[0].to_bits(), "axpy_dot y.y");

        // residual_norms: y = b - y, norms.
        let mut y = v[1].clone();
        dev.residual_norms(n, &v[0], &mut y, &w, &mut sums, 2)
            .unwrap();
        let rn: Vec<f64> = (0..n).map(|i| v[0][i] - v[1][i]).collect();
        assert_eq!(bits(&y), bits(&rn), "residual_norms update");
        let (rr, rra) = dot(&rn, &rn);
        close(sums[2], rr, rra, n, "residual_norms");

        // wnorm.
        dev.wnorm(n, &rn, &w, &mut sums, 4).unwrap();
        let rw: Vec<f64> = (0..n).map(|i| rn[i] * w[i]).collect();
        let (want, abs) = dot(&rw, &rn);
        close(sums[4], want, abs, n, "wnorm");

        // ccg_update: p = r + beta p; ap = ar + beta ap; x += a p; r -= a ap; norms (with
        // weights) into `sums[at..]`; the updated [r, p, ap, x].
        let ccg = |dev: &mut Cpu, w: Option<&Vec<f64>>, sums: &mut Vec<f64>, at| {
            let [mut r, mut p, mut ap, mut x] = [1, 2, 3, 4].map(|i| v[i].clone());
            let vecs = CcgVecs {
                r: &mut r,
                p: &mut p,
                ap: &mut ap,
                x: &mut x,
            };
            dev.ccg_update(n, a, b, &v[0], vecs, w, sums, at).unwrap();
            [r, p, ap, x]
        };
        let [r, p, ap, x] = ccg(&mut dev, Some(&w), &mut sums, 12);
        for i in 0..n {
            let pi = v[1][i] + b * v[2][i];
            let api = v[0][i] + b * v[3][i];
            let xi = v[4][i] + a * pi;
            let ri = v[1][i] - a * api;
            assert_eq!(
                [p[i], ap[i], x[i], r[i]].map(f64::to_bits),
                [pi, api, xi, ri].map(f64::to_bits),
                "ccg row {i}"
            );
        }
        let (rr, rra) = dot(&r, &r);
        close(sums[12], rr, rra, n, "ccg_update r.r");
        let rw: Vec<f64> = (0..n).map(|i| r[i] * w[i]).collect();
        let (want, abs) = dot(&rw, &r);
        close(sums[13], want, abs, n, "ccg_update r.W r");
        // The same update without weights: the same vectors and the same r.r bits (ccg
        // switches between the two), and the weighted sum of wnorm's bits.
        sums[15] = f64::NAN;
        let unweighted = ccg(&mut dev, None, &mut sums, 14);
        assert_eq!(
            unweighted.each_ref().map(|v| bits(v)),
            [&r, &p, &ap, &x].map(|v| bits(v)),
            "ccg_update without weights: vectors"
        );
        assert_eq!(sums[14].to_bits(), sums[12].to_bits(), "ccg_update r.r");
        assert!(
            sums[15].is_nan(),
            "ccg_update without weights writes one sum"
        );
        dev.wnorm(n, &r, &w, &mut sums, 15).unwrap();
        assert_eq!(
            sums[15].to_bits(),
            sums[13].to_bits(),
            "wnorm = ccg_update r.W r"
        );

        // pipecg_update.
        let (mut wv, mut r, mut z, mut s, mut p, mut x) = (
            v[1].clone(),
            v[2].clone(),
            v[3].clone(),
            v[4].clone(),
            v[5].clone(),
            v[6].clone(),
        );
        let vecs = PipecgVecs {
            w: &mut wv,
            r: &mut r,
            z: &mut z,
            s: &mut s,
            p: &mut p,
            x: &mut x,
        };
        dev.pipecg_update(n, a, b, &v[0], vecs, &w, &mut sums, 5)
            .unwrap();
        for i in 0..n {
            let zi = v[0][i] + b * v[3][i];
            let si = v[1][i] + b * v[4][i];
            let pi = v[2][i] + b * v[5][i];
            let xi = v[6][i] + a * pi;
            let ri = v[2][i] - a * si;
            let wi = v[1][i] - a * zi;
            assert_eq!(
                [z[i], s[i], p[i], x[i], r[i], wv[i]].map(f64::to_bits),
                [zi, si, pi, xi, ri, wi].map(f64::to_bits),
                "pipecg row {i}"
            );
        }
        let (rr, rra) = dot(&r, &r);
        close(sums[5], rr, rra, n, "pipecg r.r");
        let (wr, wra) = dot(&wv, &r);
        close(sums[7], wr, wra, n, "pipecg w.r");
        for (k, (v, what)) in [
            (&x, "x.x"),
            (&p, "p.p"),
            (&s, "s.s"),
            (&z, "z.z"),
            (&wv, "w.w"),
        ]
        .into_iter()
        .enumerate()
        {
            let (want, abs) = dot(v, v);
            close(sums[8 + k], want, abs, n, what);
        }

        // lincomb (zero coefficients skip their vector) and lincomb_norms.
        let coef = [0.5, 0.0, -1.5, 2.0];
        let mut poisoned = v[8].clone();
        poisoned[17] = f64::NAN;
        let cols = [&v[0], &poisoned, &v[2], &v[3]];
        let mut y = v[4].clone();
        dev.lincomb(n, &coef, &Refs(&cols), &mut y).unwrap();
        let lin: Vec<f64> = (0..n)
            .map(|i| ((v[4][i] + 0.5 * v[0][i]) + -1.5 * v[2][i]) + 2.0 * v[3][i])
            .collect();
        assert_eq!(bits(&y), bits(&lin), "lincomb skips the zero coefficient");
        let mut y = v[4].clone();
        dev.lincomb_norms(n, &coef, &Refs(&cols), &mut y, &w, &mut sums, 8)
            .unwrap();
        assert_eq!(bits(&y), bits(&lin), "lincomb_norms update");
        let (ll, lla) = dot(&lin, &lin);
        close(sums[8], ll, lla, n, "lincomb_norms");

        // lincomb_block: each destination as a lincomb with its column of coefficients.
        let srcs = [&v[0], &v[1], &v[2]];
        let c = [1.0, -2.0, 0.0, 0.5, 0.25, 3.0]; // 3 sources x 2 destinations
        let (mut d0, mut d1) = (v[5].clone(), v[6].clone());
        {
            let mut dsts = [&mut d0, &mut d1];
            dev.lincomb_block(n, &c, &Refs(&srcs), &mut RefsMut(&mut dsts))
                .unwrap();
        }
        let (mut e0, mut e1) = (v[5].clone(), v[6].clone());
        dev.lincomb(n, &[c[0], c[2], c[4]], &Refs(&srcs), &mut e0)
            .unwrap();
        dev.lincomb(n, &[c[1], c[3], c[5]], &Refs(&srcs), &mut e1)
            .unwrap();
        assert_eq!(bits(&d0), bits(&e0));
        assert_eq!(bits(&d1), bits(&e1));

        let now: Vec<u64> = bits(&sums);
        match &seen {
            None => seen = Some(now),
            Some(prev) => assert_eq!(prev, &now, "sums differ between thread counts"),
        }
    }
}

/// Gram blocks, full and upper, weighted or not, over lists and concatenated lists: within
/// a rounding bound of plain dot products, and the same bits for any thread count.
#[test]
fn gram_blocks_match_dot_products() {
    let n = 2 * CHUNK + 301;
    let xs: Vec<Vec<f64>> = (0..4).map(|s| random_vec(n, 300 + s)).collect();
    let ys: Vec<Vec<f64>> = (0..3).map(|s| random_vec(n, 400 + s)).collect();
    let w: Vec<f64> = random_vec(n, 499).iter().map(|x| x.abs() + 0.5).collect();
    let xr: Vec<&Vec<f64>> = xs.iter().collect();
    let yr: Vec<&Vec<f64>> = ys.iter().collect();
    let mut seen: Option<Vec<u64>> = None;
    for mut dev in [Cpu::sequential(), pooled()] {
        let mut out = vec![0.0; 64];
        // Full 4 x 3, then weighted.
        dev.gram(
            n,
            &Refs(&xr),
            &Refs(&yr),
            GramShape::Full,
            None,
            &mut out,
            0,
        )
        .unwrap();
        dev.gram(
            n,
            &Refs(&xr),
            &Refs(&yr),
            GramShape::Full,
            Some(&w),
            &mut out,
            12,
        )
        .unwrap();
        for i in 0..4 {
            for j in 0..3 {
                let (d, da) = dot(&xs[i], &ys[j]);
                close(out[i * 3 + j], d, da, n, "gram full");
                let xw: Vec<f64> = (0..n).map(|k| xs[i][k] * w[k]).collect();
                let (d, da) = dot(&xw, &ys[j]);
                close(out[12 + i * 3 + j], d, da, n, "gram weighted");
            }
        }
        // Upper triangle of [x0 x1 | y0] with itself (a concatenated list).
        let (left, right) = ([xr[0], xr[1]], [yr[0]]);
        let cat = Concat(&Refs(&left), &Refs(&right));
        dev.gram(n, &cat, &cat, GramShape::Upper, None, &mut out, 30)
            .unwrap();
        let all = [&xs[0], &xs[1], &ys[0]];
        let mut idx = 30;
        for i in 0..3 {
            for j in i..3 {
                let (d, da) = dot(all[i], all[j]);
                close(out[idx], d, da, n, "gram upper");
                idx += 1;
            }
        }
        assert_eq!(idx, 36);
        let now = bits(&out);
        match &seen {
            None => seen = Some(now),
            Some(prev) => assert_eq!(prev, &now, "gram differs between thread counts"),
        }
    }
    // An upper triangle needs a square block.
    let mut out = vec![0.0; 16];
    assert!(Cpu::sequential()
        .gram(
            n,
            &Refs(&xr),
            &Refs(&yr),
            GramShape::Upper,
            None,
            &mut out,
            0
        )
        .is_err());
}

/// Operand lengths, indices and CSR structure are checked before any kernel runs.
#[test]
fn bad_operands_are_errors_not_panics() {
    let mut dev = Cpu::sequential();
    let (x, mut y) = (dev.zeros(4).unwrap(), dev.zeros(5).unwrap());
    assert!(matches!(
        dev.axpy(5, 1.0, &x, &mut y),
        Err(DeviceError::LengthMismatch {
            expected: 5,
            got: 4,
            ..
        })
    ));
    let mut out = vec![0.0; 1];
    assert!(matches!(
        dev.gram(
            5,
            &Refs(&[&x]),
            &Refs(&[&y]),
            GramShape::Full,
            None,
            &mut out,
            0
        ),
        Err(DeviceError::LengthMismatch { .. })
    ));
    assert!(matches!(
        dev.gram(
            4,
            &Refs(&[&x]),
            &Refs(&[&x]),
            GramShape::Full,
            None,
            &mut out,
            1
        ),
        Err(DeviceError::LengthMismatch { .. })
    ));
    let idx = dev.upload_index(&[0, 9]).unwrap();
    let mut packed = vec![0.0; 2];
    assert!(matches!(
        dev.gather(&x, &idx, &mut packed),
        Err(DeviceError::IndexOutOfRange { index: 9, .. })
    ));
    let bad = |indptr: Vec<usize>, cols: Vec<u32>| HostCsr {
        vals: vec![1.0; cols.len()],
        indptr,
        cols,
        ncols: 3,
    };
    assert!(matches!(
        dev.upload_csr(bad(vec![0, 1, 2], vec![0, 7])),
        Err(DeviceError::InvalidCsr(_))
    ));
    assert!(matches!(
        dev.upload_csr(bad(vec![0, 2, 1], vec![0, 1])),
        Err(DeviceError::InvalidCsr(_))
    ));
    let a = dev.upload_csr(bad(vec![0, 1], vec![0])).unwrap();
    assert!(matches!(
        dev.spmv(&a, 2, &x, &mut y),
        Err(DeviceError::LengthMismatch { .. })
    ));
    let short = CsrRef {
        indptr: &[0, 1],
        cols: &[0],
        vals: &[1.0],
        ncols: 1,
    };
    assert!(short.validate().is_ok());
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::super::cuda::{
        compile_ptx, driver_present, lanes_for, nvrtc_present, CudaDevice, SpmvKernel, KERNELS_PTX,
        KERNEL_NAMES,
    };
    use super::DeviceError;

    /// The default SpMV kernel gives each lane at least four entries of an average row:
    /// one lane per row on the 7-point stencil (the kernel the H200 measured fastest there,
    /// and the one that sums rows in the CPU's order), more lanes only for longer rows,
    /// never more than a warp.
    #[test]
    fn default_spmv_lanes_follow_the_mean_row_length() {
        let rows = 1000;
        for (mean, lanes) in [
            (0, 1),
            (1, 1),
            (7, 1),
            (8, 2),
            (14, 2),
            (16, 4),
            (31, 4),
            (32, 8),
            (64, 16),
            (128, 32),
            (10_000, 32),
        ] {
            assert_eq!(
                lanes_for(rows, rows * mean),
                lanes,
                "mean row length {mean}"
            );
        }
        // Empty blocks and rows-only blocks get the scalar kernel.
        assert_eq!(lanes_for(0, 0), 1);
        let a = crate::gen::poisson3d(8).expect("poisson3d(8)");
        let kernel = SpmvKernel::auto(a.rows(), a.nnz());
        assert_eq!(kernel, SpmvKernel::CsrVector(1));
        assert!(kernel.bit_identical_to_cpu());
    }

    /// Every kernel compiles to PTX for compute_90. Without NVRTC the test says so loudly,
    /// and fails when `CASTACK_REQUIRE_NVRTC=1` (CI sets it after installing NVRTC).
    #[test]
    fn kernels_compile_to_ptx_for_compute_90() {
        if !nvrtc_present() {
            let required = std::env::var("CASTACK_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            eprintln!(
                "\n!!! NVRTC (libnvrtc.so.13) NOT FOUND: the CUDA kernels were NOT compile-checked.\n\
                 !!! pip install nvidia-cuda-nvrtc==13.0.88 and put its nvidia/cu13/lib on LD_LIBRARY_PATH.\n"
            );
            assert!(
                !required,
                "CASTACK_REQUIRE_NVRTC=1 but NVRTC is not loadable"
            );
            return;
        }
        let ptx = match compile_ptx() {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert!(ptx.contains(".target sm_90"), "PTX is not for sm_90");
        for name in KERNEL_NAMES {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "kernel {name} missing from the PTX"
            );
        }
        // Compiled without FMA contraction (the bit-compatibility with the CPU relies on it).
        assert!(
            !ptx.contains("fma.rn.f64"),
            "PTX contains fused multiply-adds"
        );
        // The embedded PTX is what NVRTC makes of the current source.
        if ptx != KERNELS_PTX {
            if std::env::var("CASTACK_WRITE_PTX").is_ok_and(|v| v == "1") {
                let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/device/kernels.ptx");
                std::fs::write(path, &ptx).expect("write kernels.ptx");
                eprintln!("rewrote {path}; rebuild to embed it");
            } else {
                panic!(
                    "src/device/kernels.ptx is stale (or from another NVRTC than 13.0.88): \
                     rerun this test with CASTACK_WRITE_PTX=1"
                );
            }
        }
    }

    /// Without a driver, opening a device is an error value, not a panic; with one, any
    /// failure is an error value too.
    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        match CudaDevice::new(0) {
            Err(DeviceError::NoDriver) => assert!(!driver_present()),
            Err(e) => assert!(driver_present(), "unexpected error without a driver: {e}"),
            Ok(dev) => assert!(driver_present() && !dev.gpu_name().is_empty()),
        }
        assert!(matches!(
            CudaDevice::new(usize::MAX),
            Err(DeviceError::NoDriver | DeviceError::NoDevice { .. })
        ));
    }
}

/// The SELL-C-sigma layout, run with the GPU kernel's loop on the host, gives the CPU
/// kernel's bits; padding, sorting windows and the permutation are consistent.
#[test]
fn sell_layout_gives_the_cpu_bits() {
    use super::sell::Sell;
    let a = HostCsr::from_csmat(&poisson3d(9).expect("poisson")).expect("32-bit columns");
    let irr = HostCsr::random_irregular(5_000, 4_000, 80, 11);
    let mut cpu = Cpu::sequential();
    for m in [&a, &irr] {
        let rows = m.indptr.len() - 1;
        let x = random_vec(m.ncols, 5);
        let mut want = vec![0.0; rows];
        cpu.spmv_host(m.as_csr_ref(), &x, &mut want);
        for (c, sigma) in [(32, 1), (32, 256), (7, 7), (1, 1)] {
            let s = Sell::from_csr(m.as_csr_ref(), c, sigma).expect("layout");
            let mut seen = vec![false; rows];
            s.perm.iter().for_each(|&r| seen[r as usize] = true);
            assert!(seen.iter().all(|&b| b), "perm is a permutation");
            assert!(s.fill() >= 1.0);
            let mut got = vec![f64::NAN; rows];
            s.spmv_host(&x, &mut got);
            assert_eq!(bits(&got), bits(&want), "C = {c}, sigma = {sigma}");
            if sigma > 1 {
                for w in s.perm.chunks(sigma) {
                    let lens: Vec<usize> = w
                        .iter()
                        .map(|&r| m.indptr[r as usize + 1] - m.indptr[r as usize])
                        .collect();
                    assert!(lens.windows(2).all(|p| p[0] >= p[1]), "sorted window");
                }
            }
        }
        // Sorting the irregular block cuts the padding.
        if std::ptr::eq(m, &irr) {
            let unsorted = Sell::from_csr(m.as_csr_ref(), 32, 1).unwrap().fill();
            let sorted = Sell::from_csr(m.as_csr_ref(), 32, 256).unwrap().fill();
            assert!(sorted < unsorted, "{sorted} vs {unsorted}");
        }
    }
    assert!(Sell::from_csr(a.as_csr_ref(), 32, 48).is_err());
    assert!(Sell::from_csr(a.as_csr_ref(), 0, 1).is_err());
}
