//! Ritz-value estimates of the extreme eigenvalues of the operator a solve iterated on, from
//! the solve's own CG coefficients (`SolverConfig::eigs`; PETSc's
//! `-ksp_compute_eigenvalues`).
//!
//! CG is Lanczos in disguise: its step lengths `alpha_j` and direction updates `beta_j`
//! (`p_{j+1} = r_{j+1} + beta_j p_j`) give the Lanczos tridiagonal matrix
//!
//! ```text
//! T[j, j]     = 1/alpha_j + beta_{j-1}/alpha_{j-1}   (beta_{-1} = 0)
//! T[j, j + 1] = sqrt(beta_j) / alpha_j
//! ```
//!
//! (Saad, Iterative Methods for Sparse Linear Systems, 2nd ed., section 6.7.3), whose
//! extreme eigenvalues (Ritz values) converge to the operator's extreme eigenvalues first.
//! The operator is the one the method iterates on: `S A S` with Jacobi scaling
//! (`S = D^-1/2`), `A` itself with `precond = none`; the condition number is
//! `lambda_max / lambda_min` of that operator. In finite precision the Lanczos vectors lose
//! orthogonality and converged Ritz values repeat, but the extreme ones stay accurate
//! approximations from inside the spectrum (Paige's analysis): `lambda_min` is an upper and
//! `lambda_max` a lower estimate of the true values.
//!
//! The relation holds along one unbroken run of CG directions. When a method restarts its
//! directions from the residual (`p = r` after a missed convergence check, or a periodic
//! replacement that restarts them, as `cacg`'s does), a new Lanczos run begins; the
//! estimate comes from the LONGEST run of the solve (the first when they tie). Replacements
//! that keep the directions (`cg`, `ccg` and `pipecg` with `replace_every`) continue the run.
//!
//! Which methods: those with scalar CG coefficients, `cg`, `ccg`, `pipecg` (their own
//! alpha and beta) and `cacg` (its inner iterations' alpha and beta, computed in basis
//! coordinates, which are CG's in exact arithmetic; a step's coefficients are kept only
//! when its inner iterations are accepted, not when a breakdown discards them). The block
//! methods `cbcg` and `cbcgr` have no scalar coefficients (their block Lanczos relation
//! would need more reductions): asking them for the estimate is a configuration error.
//!
//! Cost: two `f64` per CG-equivalent iteration in a buffer reserved before the loop
//! (capped, as `history`, at `min(max_iter, 2^20)` steps: beyond it a run stops growing), no
//! communication (every rank computes the same values from the same reduced scalars), and
//! after the solve `O(m)` per bisection step for the two extreme eigenvalues of the
//! `m x m` tridiagonal matrix ([`castack_linalg::dense::tridiagonal_extremes`]).

use serde::{Deserialize, Serialize};

use crate::eig::lanczos_tridiagonal;
use castack_linalg::dense::tridiagonal_extremes;

/// The Ritz-value estimates of a solve (`SolveReport::eigs`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Eigs {
    /// Smallest Ritz value: estimates the smallest eigenvalue of the operator iterated on
    /// (`S A S` with Jacobi scaling, `A` without), from above.
    pub lambda_min: f64,
    /// Largest Ritz value: estimates the largest eigenvalue, from below.
    pub lambda_max: f64,
    /// `lambda_max / lambda_min`.
    pub condition: f64,
    /// CG steps in the Lanczos run the estimate comes from (the longest unbroken run).
    pub steps: usize,
}

/// The CG coefficients of a solve, kept as the longest Lanczos run so far followed by the
/// current run, in buffers reserved before the loop.
#[derive(Debug, Default)]
pub(crate) struct RitzRecord {
    /// Whether the solve records (`SolverConfig::eigs`).
    on: bool,
    /// Step lengths: the best run in `..best`, the current run from `start`.
    alphas: Vec<f64>,
    /// `betas[j]` belongs to `alphas[j]` (one fewer while a step awaits its beta).
    betas: Vec<f64>,
    /// Length of the best run kept at the front.
    best: usize,
    /// Where the current run starts (`best`).
    start: usize,
    /// Most steps held.
    cap: usize,
}

impl RitzRecord {
    /// Start a solve: record when `on`, up to `cap` steps (reserved here, not in the loop).
    pub(crate) fn reset(&mut self, on: bool, cap: usize) {
        self.on = on;
        self.alphas.clear();
        self.betas.clear();
        (self.best, self.start) = (0, 0);
        self.cap = if on { cap } else { 0 };
        self.alphas.reserve(self.cap);
        self.betas.reserve(self.cap);
    }

    /// The directions restart from the residual: the current run ends (kept when it is the
    /// longest so far) and a new one begins.
    pub(crate) fn restart(&mut self) {
        if !self.on {
            return;
        }
        // Align: a run's last step may lack its beta (not used by its T).
        if self.betas.len() < self.alphas.len() {
            self.betas.push(0.0);
        }
        let cur = self.alphas.len() - self.start;
        if cur > self.best {
            self.alphas.copy_within(self.start.., 0);
            self.betas.copy_within(self.start.., 0);
            self.best = cur;
        }
        self.alphas.truncate(self.best);
        self.betas.truncate(self.best);
        self.start = self.best;
    }

    /// The step length `alpha_j` of the next CG step. A step whose previous one lacks its
    /// beta begins a new run; an unusable `alpha` (not finite and positive) ends the run.
    pub(crate) fn alpha(&mut self, alpha: f64) {
        if !self.on {
            return;
        }
        if self.betas.len() < self.alphas.len() {
            self.restart();
        }
        if !(alpha.is_finite() && alpha > 0.0) {
            self.restart();
            return;
        }
        if self.alphas.len() < self.cap {
            self.alphas.push(alpha);
        }
    }

    /// `beta_j` of the last step (`p_{j+1} = r_{j+1} + beta_j p_j`). An unusable `beta`
    /// (not finite and non-negative) breaks the run.
    pub(crate) fn beta(&mut self, beta: f64) {
        if !self.on || self.betas.len() >= self.alphas.len() {
            return;
        }
        if !(beta.is_finite() && beta >= 0.0) {
            self.restart();
            return;
        }
        self.betas.push(beta);
    }

    /// The estimate from the longest run, `None` when not recording or without a step.
    /// Allocates the tridiagonal matrix (after the loop).
    pub(crate) fn estimate(&self) -> Option<Eigs> {
        if !self.on {
            return None;
        }
        let cur = self.alphas.len() - self.start;
        let (from, m) = if cur > self.best {
            (self.start, cur)
        } else {
            (0, self.best)
        };
        if m == 0 {
            return None;
        }
        let alphas = &self.alphas[from..from + m];
        let betas = &self.betas[from..self.betas.len().min(from + m)];
        let (d, e) = lanczos_tridiagonal(alphas, &betas[..betas.len().min(m - 1)]);
        let (lambda_min, lambda_max) = tridiagonal_extremes(&d, &e)?;
        Some(Eigs {
            lambda_min,
            lambda_max,
            condition: lambda_max / lambda_min,
            steps: m,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CG's `(alpha_j, beta_j)` on `diag(d)` from the all-ones vector, by hand.
    fn cg_coefficients(d: &[f64], steps: usize) -> Vec<(f64, f64)> {
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let mut r = vec![1.0; d.len()];
        let mut p = r.clone();
        let mut out = Vec::new();
        for _ in 0..steps {
            let q: Vec<f64> = p.iter().zip(d).map(|(p, d)| p * d).collect();
            let rr = dot(&r, &r);
            let alpha = rr / dot(&p, &q);
            for (ri, qi) in r.iter_mut().zip(&q) {
                *ri -= alpha * qi;
            }
            let beta = dot(&r, &r) / rr;
            for (pi, ri) in p.iter_mut().zip(&r) {
                *pi = ri + beta * *pi;
            }
            out.push((alpha, beta));
        }
        out
    }

    fn feed(rec: &mut RitzRecord, steps: &[(f64, f64)]) {
        for &(a, b) in steps {
            rec.alpha(a);
            rec.beta(b);
        }
    }

    #[test]
    fn a_full_cg_run_on_a_diagonal_matrix_gives_its_extreme_eigenvalues() {
        let d: Vec<f64> = (1..=6).map(f64::from).collect();
        let mut rec = RitzRecord::default();
        rec.reset(true, 100);
        feed(&mut rec, &cg_coefficients(&d, 6));
        let e = rec.estimate().unwrap();
        assert_eq!(e.steps, 6);
        assert!((e.lambda_min - 1.0).abs() < 1e-9, "{e:?}");
        assert!((e.lambda_max - 6.0).abs() < 1e-9, "{e:?}");
        assert!((e.condition - 6.0).abs() < 1e-8, "{e:?}");
    }

    #[test]
    fn after_restarts_the_longest_run_gives_the_estimate() {
        let d: Vec<f64> = (1..=6).map(f64::from).collect();
        let full = cg_coefficients(&d, 6);
        // Garbage run of 2 (eigenvalues near 100), the full run of 6, another run of 3.
        let mut rec = RitzRecord::default();
        rec.reset(true, 100);
        feed(&mut rec, &[(0.01, 0.5), (0.01, 0.5)]);
        rec.restart();
        feed(&mut rec, &full);
        rec.restart();
        feed(&mut rec, &[(0.01, 0.5), (0.01, 0.5), (0.01, 0.5)]);
        let e = rec.estimate().unwrap();
        assert_eq!(e.steps, 6);
        assert!((e.lambda_min - 1.0).abs() < 1e-9, "{e:?}");
        assert!((e.lambda_max - 6.0).abs() < 1e-9, "{e:?}");
        // The current run wins once it is longer than the kept one.
        feed(&mut rec, &full[..4]);
        let e = rec.estimate().unwrap();
        assert_eq!(e.steps, 7);
        assert!(e.lambda_max > 50.0, "{e:?}");
    }

    #[test]
    fn the_cap_bounds_a_run_and_off_records_nothing() {
        let d: Vec<f64> = (1..=6).map(f64::from).collect();
        let mut rec = RitzRecord::default();
        rec.reset(true, 3);
        feed(&mut rec, &cg_coefficients(&d, 6));
        assert_eq!(rec.estimate().unwrap().steps, 3);
        assert!(rec.alphas.capacity() >= 3 && rec.alphas.len() == 3);
        rec.reset(false, 100);
        feed(&mut rec, &cg_coefficients(&d, 6));
        assert_eq!(rec.estimate(), None);
        assert!(rec.alphas.is_empty());
        // Recording with no step taken: no estimate.
        rec.reset(true, 100);
        assert_eq!(rec.estimate(), None);
    }

    #[test]
    fn an_unusable_coefficient_breaks_the_run() {
        let d: Vec<f64> = (1..=6).map(f64::from).collect();
        let full = cg_coefficients(&d, 6);
        let mut rec = RitzRecord::default();
        rec.reset(true, 100);
        feed(&mut rec, &full[..2]);
        rec.alpha(f64::NAN);
        feed(&mut rec, &full);
        let e = rec.estimate().unwrap();
        assert_eq!(e.steps, 6);
        assert!((e.lambda_max - 6.0).abs() < 1e-9, "{e:?}");
    }
}
