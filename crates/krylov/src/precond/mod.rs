//! Preconditioners applied inside the methods' loops: `z = M^-1 r` with `M` symmetric
//! positive definite, on the Jacobi-scaled system `Â = S A S` (see `cg/`).
//!
//! The registry is [`crate::Precond`]: `none` and `jacobi` are scalings of the system and
//! apply nothing in the loop; `bjacobi_ic0` ([`ic0`]) and `chebyshev` ([`chebyshev`]) are
//! built here in setup, after the Jacobi scaling; an embedder hands in its own through the
//! [`Preconditioner`] trait ([`crate::Solver::set_preconditioner`]).
//!
//! Every method then runs its preconditioned form, left preconditioning written so that
//! the recurrence residual `r` stays the (scaled) system's own residual and `z = M^-1 r`
//! rides beside it (Saad, "Iterative Methods for Sparse Linear Systems", 2nd ed., Alg.
//! 9.1, for CG): the stopping test, the true-residual checks and every reported norm are
//! those of the original system, as without a preconditioner. Each method's module doc
//! gives its preconditioned recurrence, its reference and its counts.
//!
//! Counting: an application's exchanges and reductions go through the same
//! [`crate::SolverComm`] as the method's (Chebyshev: `D` exchanges per application, in
//! the loop's `halo_exchanges`); its local work is timed into `time_breakdown.precond`;
//! `precond_applies` in the report counts applications.

pub(crate) mod chebyshev;
pub(crate) mod ic0;

use castack_collectives::Communicator;

pub(crate) use chebyshev::ChebyshevPc;
pub(crate) use ic0::{Ic0Factor, LowerBlock};

use crate::operator::{LinearOperator, SysMat};
use crate::KrylovError;
use castack_linalg::count::SolverComm;
use castack_linalg::device::Device;
use castack_linalg::dist::{DistCsr, DistVec};
use castack_linalg::ops::Ops;

/// A preconditioner an embedder implements: `z = M^-1 r` for a symmetric positive definite
/// `M` approximating the Jacobi-scaled matrix `Â = S A S` the solver iterates on
/// ([`crate::Solver::matrix`]; `S = I` with `precond = none`).
///
/// `apply` works on the solver's own vectors on its device and gets the operator and the
/// operation layer: [`Ops`] runs device operations (metered and timed into
/// `time_breakdown.precond`), [`LinearOperator::spmv`] multiplies by `Â` (counted),
/// and `ops.sc_mut()` is the counted communicator for a reduction of its own
/// ([`crate::SolverComm::allreduce_sum`]) or, through `comm()`, for exchanges it counts
/// itself ([`crate::SolverComm::halo_since`]). It must be collective in the same way on
/// every rank (the same reductions and exchanges in the same order), and must not
/// allocate per call if the solve is to stay allocation-free. Its own reductions go
/// through `ops.sc_mut()` on host values, not through the device's reduction slots
/// (`Ops::dot` ... `Ops::reduce`): a true-residual check keeps values there across the
/// application.
pub trait Preconditioner<C: Communicator + ?Sized, D: Device>: Send {
    /// `z = M^-1 r` on this rank's owned values (`z`'s input slots are free scratch).
    fn apply(
        &mut self,
        a: &mut dyn LinearOperator<C, D>,
        ops: &mut Ops<'_, C, D>,
        r: &DistVec<D>,
        z: &mut DistVec<D>,
    ) -> Result<(), KrylovError>;
}

/// The preconditioner a solver applies in its loop.
pub(crate) enum Pc<'c, C: Communicator + ?Sized, D: Device> {
    /// Block Jacobi with IC(0) blocks.
    Ic0(Ic0Factor),
    /// A Chebyshev polynomial in `Â`.
    Chebyshev(ChebyshevPc<D>),
    /// An embedder's.
    User(Box<dyn Preconditioner<C, D> + 'c>),
}

impl<C: Communicator + ?Sized, D: Device> Pc<'_, C, D> {
    /// `z = M^-1 r`; local work is charged to `precond`.
    pub(crate) fn apply(
        &mut self,
        a: &mut SysMat<'_, C, D>,
        ops: &mut Ops<'_, C, D>,
        r: &DistVec<D>,
        z: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        ops.sc_mut().set_in_precond(true);
        let res = match self {
            Pc::Ic0(f) => ops.ic0_solve(f, r, z).map_err(KrylovError::from),
            Pc::Chebyshev(c) => c.apply(a, ops, r, z),
            Pc::User(u) => u.apply(a, ops, r, z),
        };
        ops.sc_mut().set_in_precond(false);
        res
    }
}

/// The largest Gershgorin row sum `max_i sum_j |a_ij|` over all ranks' rows of `a` (host):
/// an upper bound of the spectrum of a symmetric `a`. One setup reduction.
pub(crate) fn gershgorin_upper<C: Communicator + ?Sized>(
    sc: &mut SolverComm<'_, C>,
    a: &DistCsr,
) -> Result<f64, KrylovError> {
    let (indptr, _, vals) = a.local_csr();
    let mine = (0..a.n_local())
        .map(|i| {
            vals[indptr[i]..indptr[i + 1]]
                .iter()
                .map(|v| v.abs())
                .sum::<f64>()
        })
        .fold(0.0f64, f64::max);
    agree_max(sc, mine)
}

/// The largest of the ranks' `mine` (each rank fills its own slot, so the sum is exact and
/// the result bit-identical on every rank). One setup reduction.
pub(crate) fn agree_max<C: Communicator + ?Sized>(
    sc: &mut SolverComm<'_, C>,
    mine: f64,
) -> Result<f64, KrylovError> {
    let mut slots = vec![0.0; sc.size()];
    slots[sc.rank()] = mine;
    sc.allreduce_sum(&mut slots)?;
    Ok(slots.into_iter().fold(0.0, f64::max))
}

/// Factor this rank's block of the scaled `a` with IC(0) at the least shift every rank can
/// use (module doc of [`ic0`]): rounds of two setup reductions (the agreed shift, then
/// whether every rank factors at it), usually one round.
pub(crate) fn factor_ic0<C: Communicator + ?Sized>(
    sc: &mut SolverComm<'_, C>,
    a: &DistCsr,
) -> Result<Ic0Factor, KrylovError> {
    let block = LowerBlock::of(a);
    let mut from = 0.0f64;
    loop {
        let mine = block.least_shift_from(from);
        // A rank that finds no shift (non-finite entries) asks for an infinite one.
        let agreed = agree_max(sc, mine.as_ref().map_or(f64::INFINITY, Ic0Factor::shift))?;
        if !agreed.is_finite() {
            return Err(KrylovError::InvalidConfig(format!(
                "bjacobi_ic0: no diagonal shift makes the incomplete Cholesky factorization of every rank's block exist (from {from:e}); are the matrix entries finite?"
            )));
        }
        let f = match mine {
            Some(f) if f.shift() == agreed => Some(f),
            _ => block.factor(agreed),
        };
        let fails = agree_max(sc, if f.is_some() { 0.0 } else { 1.0 })?;
        match f {
            Some(f) if fails == 0.0 => return Ok(f),
            _ => from = 2.0 * agreed.max(ic0::FIRST_SHIFT),
        }
    }
}
