//! Minimal-residual smoothing of the s-step methods' iterates (`cbcg`, `cbcgr`, `cacg`).
//!
//! References: W. Schönauer, "Scientific Computing on Vector Computers", North-Holland,
//! 1987; R. Weiss, "Properties of generalized conjugate gradient methods", Numer. Linear
//! Algebra Appl. 1, 1994; L. Zhou and H. F. Walker, "Residual smoothing techniques for
//! iterative methods", SIAM J. Sci. Comput. 15, 1994.
//!
//! Beside the iterate `x` and its residual `r`, keep a smoothed pair `y`, `s = b - A y`:
//! after every outer step
//!
//! ```text
//! eta = (s, s - r)_w / ||s - r||_w^2       (minimises ||(1 - eta) s + eta r||_w)
//! s  <- s + eta (r - s);   y <- y + eta (x - y)
//! ||s||_w^2 <- (1 - eta)^2 ||s||_w^2 + 2 eta (1 - eta) (s, r)_w + eta^2 ||r||_w^2
//! ```
//!
//! in the norm the convergence test uses (`W` the weights of the original system). `||s||`
//! never exceeds the smallest block-end residual seen, and as the block-end residuals of
//! block CG are mutually orthogonal in exact arithmetic, `||s||^-2` is the sum of their
//! `||r||^-2` (for CG this is the MINRES residual, Cullum and Greenbaum 1996). So when CG's
//! residual hovers near the tolerance, `s` gets below it (measured: `README.md` here,
//! *Measured*).
//!
//! Cost per outer step: `(s, r)_w` rides in the reduction the method makes anyway (one
//! value more, no message), 2 passes over local vectors (the weighted dot, and one fused
//! update of `s` and `y`), 2 work vectors. When `||s||` meets
//! the tolerance, the method takes `y` as its iterate and makes the true-residual check it
//! makes when its own residual claims convergence (same cost, same counters): `y` passes
//! and is the answer, or the check replaces `r` by the true residual of `y` (a residual
//! replacement) and the method goes on from `y`, keeping its directions, with the smoothing
//! restarted there. Until then the method's own iterates are untouched. A miss needs the
//! recurrences to have drifted by about the tolerance, i.e. a tolerance at the limit of
//! the attainable accuracy (measured: `README.md` here, *Measured*).
//!
//! With a loop preconditioner the smoothing is unchanged: it reads the iterate and the
//! scaled system's own residual `r` (the methods' preconditioned forms keep `r` and let
//! `z = M^-1 r` ride beside it), never the basis or `z`. The block-end residuals are then
//! `M^-1`-orthogonal rather than orthogonal, so the `||s||^-2` sum above is no longer
//! exact, but each step still minimises `||s||_w` on its line and never exceeds the
//! smallest block-end residual seen, which is all the methods rely on.
//!
//! `cacg` smooths its outer-step iterates, `(s, r)_w` riding in its Gram reduction, and
//! near the target every inner iterate, in the coordinates of its basis ([`Coords`]: the
//! same step on numbers, from `Y^T W Y` and `(s, Y)_w`, the pair formed once per outer
//! step by [`Smoother::absorb`]).

use castack_collectives::Communicator;

use super::System;
use crate::KrylovError;
use castack_linalg::device::{Device, GramShape, VecList};
use castack_linalg::dist::DistVec;

/// One smoothing step from `||s||_w^2 = ssw`, `(s, r)_w = sr` and `||r||_w^2 = rw`: the
/// weight `eta` and the new `||s||_w^2`, or `None` when `||s - r||_w^2` is zero (or NaN) and
/// there is nothing to smooth.
fn step(ssw: f64, sr: f64, rw: f64) -> Option<(f64, f64)> {
    let den = ssw - 2.0 * sr + rw;
    if den.is_nan() || den <= 0.0 {
        return None;
    }
    let eta = (ssw - sr) / den;
    let new = (1.0 - eta) * (1.0 - eta) * ssw + 2.0 * eta * (1.0 - eta) * sr + eta * eta * rw;
    Some((eta, new.max(0.0)))
}

/// The smoothed iterate `y`, its residual `s` and `||s||_w^2`.
pub(crate) struct Smoother<D: Device> {
    y: DistVec<D>,
    s: DistVec<D>,
    ssw: f64,
}

impl<D: Device> Smoother<D> {
    /// A smoother started from the iterate `x` with residual `r` (`||r||_w^2 = rw`).
    pub(crate) fn new<C: Communicator + ?Sized>(
        sys: &mut System<'_, C, D>,
        x: &DistVec<D>,
        r: &DistVec<D>,
        rw: f64,
    ) -> Result<Self, KrylovError> {
        let mut sm = Self {
            y: sys.new_vec()?,
            s: sys.new_vec()?,
            ssw: rw,
        };
        sm.start(sys, x, r, rw)?;
        Ok(sm)
    }

    /// Start again from the iterate `x` with residual `r` (`||r||_w^2 = rw`).
    pub(crate) fn start<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &DistVec<D>,
        r: &DistVec<D>,
        rw: f64,
    ) -> Result<(), KrylovError> {
        sys.ops.copy(x, &mut self.y)?;
        sys.ops.copy(r, &mut self.s)?;
        self.ssw = rw;
        Ok(())
    }

    /// This rank's `(s, r)_w` into the reduction slot `at`, for the method's next
    /// reduction.
    pub(crate) fn local_sr<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        r: &DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        let (ss, rs) = ([&self.s], [r]);
        Ok(sys
            .ops
            .gram(&ss[..], &rs[..], GramShape::Full, Some(&sys.w), at)?)
    }

    /// This rank's `(s, y_c)_w` for every column `y_c` of `ys` into the slots
    /// `at..at + ys.count()`.
    pub(crate) fn local_sy<C, L>(
        &self,
        sys: &mut System<'_, C, D>,
        ys: &L,
        at: usize,
    ) -> Result<(), KrylovError>
    where
        C: Communicator + ?Sized,
        L: VecList<D::Vector> + ?Sized,
    {
        let ss = [&self.s];
        Ok(sys
            .ops
            .gram(&ss[..], ys, GramShape::Full, Some(&sys.w), at)?)
    }

    /// Smooth with the new iterate `x`, residual `r` (`||r||_w^2 = rw`) and the reduced
    /// `(s, r)_w = sr`.
    pub(crate) fn update<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C, D>,
        x: &DistVec<D>,
        r: &DistVec<D>,
        sr: f64,
        rw: f64,
    ) -> Result<(), KrylovError> {
        let Some((eta, ssw)) = step(self.ssw, sr, rw) else {
            return Ok(());
        };
        sys.ops.smooth_update(eta, r, x, &mut self.s, &mut self.y)?;
        self.ssw = ssw;
        Ok(())
    }

    /// When `||s||` meets the tolerance: `x = y` (the method goes on from the smoothed
    /// iterate and checks it as it checks a convergence claim). Returns whether it did; a
    /// method then drops whatever it had built on the old `x` (the block methods' pending
    /// minimal-residual candidate).
    pub(crate) fn take_over<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C, D>,
        x: &mut DistVec<D>,
    ) -> Result<bool, KrylovError> {
        let due = sys.meets(self.ssw.sqrt());
        if due {
            sys.ops.copy(&self.y, x)?;
        }
        Ok(due)
    }

    /// `||s||_w`, the smoothed residual's norm by the recurrence.
    pub(crate) fn norm(&self) -> f64 {
        self.ssw.sqrt()
    }

    /// `||s||_w^2` by the recurrence.
    pub(crate) fn norm_sq(&self) -> f64 {
        self.ssw
    }

    /// Set the pair to the one a method smoothed in the coordinates `co` of the columns
    /// `xcols` (`cacg`'s inner iterations, see [`Coords`]): `s <- gamma s + Y c`,
    /// `y <- gamma y + (1 - gamma) x0 + Y d`, `||s||_w^2 <- ssw`, where `x0` is the iterate
    /// the coordinates start from: one pass over `s` and `y`, then one block linear
    /// combination reading every column once. Where the iterate and the residual are
    /// combinations of different columns (`cacg` with a preconditioner: `x = x0 + Y x'`,
    /// `r = Ỹ r'`), `rcols` are the residual's: `s <- gamma s + rcols c` (two linear
    /// combinations).
    pub(crate) fn absorb<C, L>(
        &mut self,
        sys: &mut System<'_, C, D>,
        co: &mut Coords,
        x0: &DistVec<D>,
        xcols: &L,
        rcols: Option<&L>,
    ) -> Result<(), KrylovError>
    where
        C: Communicator + ?Sized,
        L: VecList<D::Vector> + ?Sized,
    {
        sys.ops
            .smooth_rescale(co.gamma, x0, &mut self.s, &mut self.y)?;
        if let Some(rcols) = rcols {
            let ny = rcols.count();
            sys.ops.lincomb(&co.c[..ny], rcols, &mut self.s)?;
            sys.ops.lincomb(&co.d[..ny], xcols, &mut self.y)?;
        } else {
            let ny = xcols.count();
            for (i, (&c, &d)) in co.c.iter().zip(&co.d).enumerate().take(ny) {
                co.cd[2 * i] = c;
                co.cd[2 * i + 1] = d;
            }
            let mut dsts = [&mut self.s, &mut self.y];
            sys.ops
                .lincomb_block(&co.cd[..2 * ny], xcols, &mut dsts[..])?;
        }
        self.ssw = co.ssw;
        Ok(())
    }
}

/// The smoothing carried on in the coordinates of an s-step basis `Y` (`cacg`'s inner
/// iterations): the smoothed residual is `gamma s0 + Y c` and the smoothed iterate
/// `gamma y0 + (1 - gamma) x0 + Y d`, with `s0`, `y0` the [`Smoother`]'s pair and `x0` the
/// iterate the coordinates start from. Needs `Gw = Y^T W Y` and `(s0, Y)_w`; the same
/// update as [`Smoother::update`], on numbers only.
#[derive(Debug, Clone)]
pub(crate) struct Coords {
    gamma: f64,
    c: Vec<f64>,
    d: Vec<f64>,
    /// `c` and `d` interleaved (the block linear combination's coefficients).
    cd: Vec<f64>,
    ssw: f64,
}

impl Coords {
    /// Room for `ny` coordinates.
    pub(crate) fn new(ny: usize) -> Self {
        Self {
            gamma: 1.0,
            c: vec![0.0; ny],
            d: vec![0.0; ny],
            cd: vec![0.0; 2 * ny],
            ssw: 0.0,
        }
    }

    /// Start at the smoother's pair (`||s0||_w^2 = ssw`) with `ny` coordinates.
    pub(crate) fn start(&mut self, ny: usize, ssw: f64) {
        self.gamma = 1.0;
        self.c.truncate(0);
        self.c.resize(ny, 0.0);
        self.d.truncate(0);
        self.d.resize(ny, 0.0);
        self.ssw = ssw;
    }

    /// Smooth with the iterate of coordinates `xc` (`x0 + Y xc`) and residual `Y rc`, given
    /// `gw_rc = Gw rc`, `rw = rc^T Gw rc` and `sy = (s0, Y)_w`.
    pub(crate) fn update(&mut self, xc: &[f64], rc: &[f64], gw_rc: &[f64], rw: f64, sy: &[f64]) {
        let dot = |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(u, v)| u * v).sum() };
        let sr = self.gamma * dot(sy, rc) + dot(&self.c, gw_rc);
        let Some((eta, ssw)) = step(self.ssw, sr, rw) else {
            return;
        };
        self.gamma *= 1.0 - eta;
        for (ci, ri) in self.c.iter_mut().zip(rc) {
            *ci += eta * (ri - *ci);
        }
        for (di, xi) in self.d.iter_mut().zip(xc) {
            *di += eta * (xi - *di);
        }
        self.ssw = ssw;
    }

    /// `||s||_w` by the recurrence.
    pub(crate) fn norm(&self) -> f64 {
        self.ssw.sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sum_k u_k w_k v_k`.
    fn wdot(u: &[f64], v: &[f64], w: &[f64]) -> f64 {
        u.iter().zip(v).zip(w).map(|((a, b), c)| a * b * c).sum()
    }

    /// A deterministic pseudo-random value in [-1, 1).
    fn val(i: usize, j: usize) -> f64 {
        let h = (i as u64 * 2654435761 + j as u64 * 40503 + 17) % 1000;
        h as f64 / 500.0 - 1.0
    }

    /// The smoothing carried on in coordinates gives the pair that smoothing the vectors
    /// themselves gives (the formula written out on vectors here, iterate after iterate).
    #[test]
    fn coordinates_smooth_like_the_vectors() {
        let (n, ny) = (40, 5);
        let w: Vec<f64> = (0..n).map(|k| 0.1 + (k % 7) as f64).collect();
        let y_cols: Vec<Vec<f64>> = (0..ny)
            .map(|c| (0..n).map(|k| val(k, c + 1)).collect())
            .collect();
        let s0: Vec<f64> = (0..n).map(|k| val(k, 99)).collect();
        let y0: Vec<f64> = (0..n).map(|k| val(k, 98)).collect();
        let x0: Vec<f64> = (0..n).map(|k| val(k, 97)).collect();
        let gw: Vec<f64> = (0..ny * ny)
            .map(|ij| wdot(&y_cols[ij / ny], &y_cols[ij % ny], &w))
            .collect();
        let sy: Vec<f64> = y_cols.iter().map(|c| wdot(&s0, c, &w)).collect();
        let combine = |coef: &[f64]| -> Vec<f64> {
            (0..n)
                .map(|k| (0..ny).map(|c| coef[c] * y_cols[c][k]).sum())
                .collect()
        };

        let mut co = Coords::new(ny);
        co.start(ny, wdot(&s0, &s0, &w));
        let (mut s, mut y) = (s0.clone(), y0.clone());
        for it in 0..6 {
            let xc: Vec<f64> = (0..ny).map(|c| val(it, 50 + c)).collect();
            let rc: Vec<f64> = (0..ny).map(|c| val(it, 70 + c)).collect();
            let gw_rc: Vec<f64> = (0..ny)
                .map(|i| (0..ny).map(|j| gw[i * ny + j] * rc[j]).sum())
                .collect();
            let rw: f64 = rc.iter().zip(&gw_rc).map(|(a, b)| a * b).sum();
            co.update(&xc, &rc, &gw_rc, rw, &sy);
            // The same step on vectors: eta = (s, s - r)_w / ||s - r||_w^2.
            let r = combine(&rc);
            let x: Vec<f64> = x0.iter().zip(combine(&xc)).map(|(a, b)| a + b).collect();
            let d: Vec<f64> = s.iter().zip(&r).map(|(a, b)| a - b).collect();
            let eta = wdot(&s, &d, &w) / wdot(&d, &d, &w);
            s = s.iter().zip(&r).map(|(a, b)| a + eta * (b - a)).collect();
            y = y.iter().zip(&x).map(|(a, b)| a + eta * (b - a)).collect();

            let s_co: Vec<f64> = (0..n)
                .map(|k| co.gamma * s0[k] + combine(&co.c)[k])
                .collect();
            let y_co: Vec<f64> = (0..n)
                .map(|k| co.gamma * y0[k] + (1.0 - co.gamma) * x0[k] + combine(&co.d)[k])
                .collect();
            for k in 0..n {
                assert!((s_co[k] - s[k]).abs() <= 1e-12, "it {it} s[{k}]");
                assert!((y_co[k] - y[k]).abs() <= 1e-12, "it {it} y[{k}]");
            }
            let ssw = wdot(&s, &s, &w);
            assert!(
                (co.norm() - ssw.sqrt()).abs() <= 1e-12 * ssw.sqrt(),
                "it {it}"
            );
            // Minimal residual on the line through s and r: never above either.
            assert!(ssw <= wdot(&r, &r, &w) * (1.0 + 1e-12), "it {it}");
        }
    }
}
