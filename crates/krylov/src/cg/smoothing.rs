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
//! residual hovers near the tolerance, `s` gets below it: on msc04515 (condition number
//! about 5e6, tolerance 1e-8) cbcg's residual at k = 4 sometimes hovered between 2e-8 and
//! 8e-8 for a thousand CG-equivalent iterations after where CG converges.
//!
//! Cost per outer step: `(s, r)_w` rides in the reduction the method makes anyway (one
//! value more, no message), 3 passes over local vectors, 2 work vectors. When `||s||` meets
//! the tolerance, the method takes `y` as its iterate and makes the true-residual check it
//! makes when its own residual claims convergence (same cost, same counters): `y` passes
//! and is the answer, or the check replaces `r` by the true residual of `y` (a residual
//! replacement) and the method goes on from `y`, keeping its directions, with the smoothing
//! restarted there. Until then the method's own iterates are untouched. A miss needs the
//! recurrences to have drifted by about the tolerance, i.e. a tolerance at the limit of
//! the attainable accuracy (494_bus at 1e-14, once per solve); none happened in the sweeps.
//!
//! Measured with the sweep of `cargo xtask sweep` (25 shared matrices with condition
//! number <= 1e8, k = 4, 8, 12, Chebyshev and Newton bases): see the module docs of
//! `cbcg`, `cbcgr` and `cacg` (which smooths its outer-step iterates, `(s, r)_w` riding in
//! its Gram reduction).

use castack_collectives::Communicator;

use super::System;
use crate::count::Bucket;
use crate::cpu::work;
use crate::dist::DistVec;

/// The smoothed iterate `y`, its residual `s` and `||s||_w^2`.
pub(crate) struct Smoother {
    y: DistVec,
    s: DistVec,
    ssw: f64,
}

impl Smoother {
    /// A smoother started from the iterate `x` with residual `r` (`||r||_w^2 = rw`).
    pub(crate) fn new(x: &DistVec, r: &DistVec, rw: f64) -> Self {
        Self {
            y: x.clone(),
            s: r.clone(),
            ssw: rw,
        }
    }

    /// Start again from the iterate `x` with residual `r` (`||r||_w^2 = rw`).
    pub(crate) fn start(&mut self, x: &DistVec, r: &DistVec, rw: f64) {
        self.y.copy_from(x);
        self.s.copy_from(r);
        self.ssw = rw;
    }

    /// This rank's `(s, r)_w`, for the method's next reduction.
    pub(crate) fn local_sr<C: Communicator + ?Sized>(
        &self,
        sys: &mut System<'_, C>,
        r: &DistVec,
    ) -> f64 {
        let t = sys.sc.now();
        let n = r.n_local();
        sys.cpu.account(work::stream(3, 0, 3, n));
        let d = self
            .s
            .local()
            .iter()
            .zip(r.local())
            .zip(&sys.w)
            .map(|((s, r), w)| s * w * r)
            .sum();
        sys.sc.charge_since(Bucket::Blas, t);
        d
    }

    /// Smooth with the new iterate `x`, residual `r` (`||r||_w^2 = rw`) and the reduced
    /// `(s, r)_w = sr`.
    pub(crate) fn update<C: Communicator + ?Sized>(
        &mut self,
        sys: &mut System<'_, C>,
        x: &DistVec,
        r: &DistVec,
        sr: f64,
        rw: f64,
    ) {
        // ||s - r||_w^2: zero (or NaN) leaves nothing to smooth.
        let den = self.ssw - 2.0 * sr + rw;
        if den.is_nan() || den <= 0.0 {
            return;
        }
        let eta = (self.ssw - sr) / den;
        let t = sys.sc.now();
        let n = r.n_local();
        sys.cpu.account(work::stream(2, 1, 3, n));
        sys.cpu.account(work::stream(2, 1, 3, n));
        for (si, ri) in self.s.local_mut().iter_mut().zip(r.local()) {
            *si += eta * (ri - *si);
        }
        for (yi, xi) in self.y.local_mut().iter_mut().zip(x.local()) {
            *yi += eta * (xi - *yi);
        }
        sys.sc.charge_since(Bucket::Blas, t);
        self.ssw =
            ((1.0 - eta) * (1.0 - eta) * self.ssw + 2.0 * eta * (1.0 - eta) * sr + eta * eta * rw)
                .max(0.0);
    }

    /// When `||s||` meets the tolerance: `x = y` (the method goes on from the smoothed
    /// iterate and checks it as it checks a convergence claim) and the method's pending
    /// minimal-residual candidate, built on the old `x`, is dropped. Returns whether it did.
    pub(crate) fn take_over<C: Communicator + ?Sized, T>(
        &self,
        sys: &System<'_, C>,
        x: &mut DistVec,
        cand: &mut Option<T>,
    ) -> bool {
        let due = sys.meets(self.ssw.sqrt());
        if due {
            x.copy_from(&self.y);
            *cand = None;
        }
        due
    }

    /// `||s||_w`, the smoothed residual's norm by the recurrence.
    pub(crate) fn norm(&self) -> f64 {
        self.ssw.sqrt()
    }
}
