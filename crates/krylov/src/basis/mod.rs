//! s-step bases: from a start vector `s_0` and a block size `k`, the columns
//! `s_0 .. s_k` and their images `A s_0 .. A s_{k-1}`, with
//! `A S[:, :k] = S T` for a `(k + 1) x k` change-of-basis matrix `T`
//! ([`SStepBasis::change_of_basis`]).
//!
//! One file per basis ([`crate::Basis`] is the registry): `monomial`, `newton` (Leja-ordered
//! Ritz values), `chebyshev` (on an estimated `[lmin, lmax]`, corrected recurrence).
//!
//! Cost of [`SStepBasis::build`]: exactly `k` SpMVs, each through [`crate::DistCsr::spmv`] (one
//! counted halo exchange), no reductions, no allocation. The images `A s_j` are the SpMV
//! outputs themselves, kept so the solvers need no product with `T` to form `A S`.
//! [`SStepBasis::build_mpk`] builds the same columns through the matrix powers kernel
//! ([`MatrixPowers`]): one counted exchange of depth `k`, `k` SpMVs on a shrinking ghost
//! zone.

mod chebyshev;
mod monomial;
mod newton;

use castack_collectives::Communicator;

pub use chebyshev::Chebyshev;
pub use newton::Newton;

use crate::eig::SpectralEstimate;
use crate::operator::LinearOperator;
use crate::{Basis, KrylovError};
use castack_linalg::device::{BasisStep, Device};
use castack_linalg::dist::{DistVec, MatrixPowers};
use castack_linalg::ops::Ops;

/// A basis with its parameters, ready to build.
#[derive(Debug, Clone, PartialEq)]
pub enum SStepBasis {
    /// `s_{j+1} = A s_j`.
    Monomial,
    /// `s_{j+1} = (A - theta_j) s_j`.
    Newton(Newton),
    /// `s_j = T_j(eta A - zeta) s_0`.
    Chebyshev(Chebyshev),
}

impl SStepBasis {
    /// The registry entry.
    pub fn kind(&self) -> Basis {
        match self {
            SStepBasis::Monomial => Basis::Monomial,
            SStepBasis::Newton(_) => Basis::Newton,
            SStepBasis::Chebyshev(_) => Basis::Chebyshev,
        }
    }

    /// The basis `kind` with parameters from `est`: Newton shifts are its Ritz values,
    /// Chebyshev uses [`SpectralEstimate::interval`].
    pub fn from_estimate(kind: Basis, est: &SpectralEstimate) -> Result<Self, KrylovError> {
        Ok(match kind {
            Basis::Monomial => SStepBasis::Monomial,
            Basis::Newton => SStepBasis::Newton(Newton::new(if est.ritz.is_empty() {
                &[0.0]
            } else {
                &est.ritz
            })),
            Basis::Chebyshev => {
                let (lo, hi) = est.interval();
                SStepBasis::Chebyshev(Chebyshev::new(lo, hi)?)
            }
        })
    }

    /// Write `T` (`(k + 1) x k`, row-major) into `t[..(k + 1) * k]`.
    ///
    /// # Panics
    ///
    /// When `t` is shorter than `(k + 1) * k`.
    #[track_caller]
    pub fn change_of_basis(&self, k: usize, t: &mut [f64]) {
        let t = &mut t[..(k + 1) * k];
        t.fill(0.0);
        for j in 0..k {
            match self {
                SStepBasis::Monomial => monomial::change_of_basis_column(j, k, t),
                SStepBasis::Newton(b) => b.change_of_basis_column(j, k, t),
                SStepBasis::Chebyshev(b) => b.change_of_basis_column(j, k, t),
            }
        }
    }

    /// The recurrence making `s_{j+1}` from `A s_j`, `s_j` and `s_{j-1}`: a device
    /// operation ([`crate::Device::basis_step`]).
    pub fn step(&self, j: usize) -> BasisStep {
        match self {
            SStepBasis::Monomial => BasisStep::Copy,
            SStepBasis::Newton(b) => BasisStep::Shift(b.shift(j)),
            SStepBasis::Chebyshev(b) => {
                let (eta, zeta) = b.map();
                if j == 0 {
                    BasisStep::ChebyshevFirst { eta, zeta }
                } else {
                    BasisStep::Chebyshev { eta, zeta }
                }
            }
        }
    }

    /// Given `s[0]`, fill `s[1..=k]` and `a_s[0..k]` (`a_s[j] = A s[j]`) with `k`
    /// SpMVs. Collective.
    ///
    /// # Panics
    ///
    /// When `s.len() < k + 1` or `a_s.len() < k`.
    #[track_caller]
    pub fn build<C: Communicator + ?Sized, D: Device, A: LinearOperator<C, D> + ?Sized>(
        &self,
        a: &mut A,
        ops: &mut Ops<'_, C, D>,
        k: usize,
        s: &mut [DistVec<D>],
        a_s: &mut [DistVec<D>],
    ) -> Result<(), KrylovError> {
        assert!(s.len() > k && a_s.len() >= k, "basis: too few work vectors");
        let n = ops.n();
        for j in 0..k {
            a.spmv(ops, &mut s[j], &mut a_s[j])?;
            let (done, rest) = s.split_at_mut(j + 1);
            let prev = j.checked_sub(1).map(|i| done[i].raw());
            ops.basis_step(
                n,
                self.step(j),
                a_s[j].raw(),
                done[j].raw(),
                prev,
                rest[0].raw_mut(),
            )?;
        }
        Ok(())
    }

    /// [`SStepBasis::build`] through the matrix powers kernel: the same columns and images
    /// (owned values) with ONE counted exchange of depth `k` and redundant computation on
    /// `mpk`'s ghost zone ([`MatrixPowers::apply`]). `mpk` must be built (and scaled) for
    /// the same matrix as the solver's, with depth `>= k`. Collective.
    ///
    /// # Panics
    ///
    /// When `s.len() < k + 1`, `a_s.len() < k` or `k` exceeds `mpk`'s depth.
    #[track_caller]
    pub fn build_mpk<C: Communicator + ?Sized, D: Device>(
        &self,
        mpk: &mut MatrixPowers<D>,
        ops: &mut Ops<'_, C, D>,
        k: usize,
        s: &mut [DistVec<D>],
        a_s: &mut [DistVec<D>],
    ) -> Result<(), KrylovError> {
        Ok(mpk.apply(ops, k, s, a_s, |j| self.step(j))?)
    }
}
