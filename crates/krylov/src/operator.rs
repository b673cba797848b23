//! The operator a solver iterates on: a distributed CSR matrix ([`DistCsr`]) or an
//! embedder's own ([`Operator`]: matrix-free stencils, a matrix in the application's
//! own format, an operator with its own halo exchange).
//!
//! [`LinearOperator`] is what the methods, bases, spectral estimates and preconditioners
//! call (`y = A x`, with or without the fused dot); [`DistCsr`] implements it with its
//! counted halo exchange. An embedder implements [`Operator`] and hands it to
//! [`crate::Solver::with_operator`]; the solver applies it to the Jacobi-scaled system as
//! `S A S x = s ⊙ A(s ⊙ x)` (two more vector passes per application; `S = I` with
//! `precond = none`). Its vectors have no input slots (`n_ext = n_local`): the operator
//! exchanges what it needs itself, through the communicator it reaches from `ops`, and
//! reports each exchange round with [`crate::SolverComm::halo_since`] so `halo_exchanges`
//! stays exact; its device work is charged to `time_breakdown.spmv`.

use castack_collectives::Communicator;

use crate::KrylovError;
use castack_linalg::count::Bucket;
use castack_linalg::device::Device;
use castack_linalg::dist::{DistCsr, DistVec};
use castack_linalg::ops::Ops;

/// `y = A x` on distributed vectors: what the solvers call.
pub trait LinearOperator<C: Communicator + ?Sized, D: Device> {
    /// This rank's rows.
    fn n_local(&self) -> usize;
    /// Values of a vector laid out for the operator (owned values, then input slots).
    fn n_ext(&self) -> usize;
    /// `y = A x` (collective; `x`'s input slots may be filled).
    fn spmv(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), KrylovError>;
    /// `y = A x` and this rank's `x . y` into reduction slot `at`.
    fn spmv_dot(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError>;
}

impl<C: Communicator + ?Sized, D: Device> LinearOperator<C, D> for DistCsr<D> {
    fn n_local(&self) -> usize {
        DistCsr::n_local(self)
    }

    fn n_ext(&self) -> usize {
        DistCsr::n_ext(self)
    }

    fn spmv(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        Ok(DistCsr::spmv(self, ops, x, y)?)
    }

    fn spmv_dot(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        Ok(DistCsr::spmv_dot(self, ops, x, y, at)?)
    }
}

/// An operator an embedder implements: a symmetric positive definite `A` over contiguous
/// row blocks (rank `r` owns rows `row_start .. row_start + n_local`).
pub trait Operator<C: Communicator + ?Sized, D: Device> {
    /// Global rows.
    fn n(&self) -> usize;
    /// This rank's rows.
    fn n_local(&self) -> usize;
    /// This rank's first global row.
    fn row_start(&self) -> usize;
    /// This rank's diagonal entries (for the Jacobi scaling; positive for an SPD `A`).
    fn diagonal(&self) -> Vec<f64>;
    /// `y = A x` on this rank's owned values (collective: every rank applies together).
    /// Exchanges go through `ops.sc_mut().comm()`, each round reported with
    /// `ops.sc_mut().halo_since(values_sent, t)`; device work through `ops`.
    fn apply(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), KrylovError>;
}

/// An embedder's operator with the system's scaling.
pub(crate) struct UserOp<'c, C: Communicator + ?Sized, D: Device> {
    pub(crate) op: Box<dyn Operator<C, D> + 'c>,
    /// The scale factors `s` (`None`: no scaling).
    pub(crate) s: Option<DistVec<D>>,
    t1: DistVec<D>,
    t2: DistVec<D>,
}

impl<'c, C: Communicator + ?Sized, D: Device> UserOp<'c, C, D> {
    /// `op` scaled by `s` (on the device), with its two work vectors.
    pub(crate) fn new(
        ops: &mut Ops<'_, C, D>,
        op: Box<dyn Operator<C, D> + 'c>,
        s: Option<DistVec<D>>,
    ) -> Result<Self, KrylovError> {
        let nl = op.n_local();
        Ok(Self {
            t1: ops.new_vec(nl, nl)?,
            t2: ops.new_vec(nl, nl)?,
            op,
            s,
        })
    }
}

/// The operator of a solver's system.
pub(crate) enum SysMat<'c, C: Communicator + ?Sized, D: Device> {
    /// A distributed CSR matrix (scaled in place at set-up).
    Csr(DistCsr<D>),
    /// An embedder's operator.
    User(UserOp<'c, C, D>),
}

impl<C: Communicator + ?Sized, D: Device> SysMat<'_, C, D> {
    /// Global rows.
    pub(crate) fn n(&self) -> usize {
        match self {
            SysMat::Csr(a) => a.n(),
            SysMat::User(u) => u.op.n(),
        }
    }

    /// Global stored entries (0 for an embedder's operator: none stored here).
    pub(crate) fn nnz(&self) -> usize {
        match self {
            SysMat::Csr(a) => a.nnz(),
            SysMat::User(_) => 0,
        }
    }

    /// The SpMV mode's name (`operator` for an embedder's).
    pub(crate) fn mode_name(&self) -> &'static str {
        match self {
            SysMat::Csr(a) => a.mode().name(),
            SysMat::User(_) => "operator",
        }
    }

    /// The CSR matrix, if it is one.
    pub(crate) fn csr(&self) -> Option<&DistCsr<D>> {
        match self {
            SysMat::Csr(a) => Some(a),
            SysMat::User(_) => None,
        }
    }
}

impl<C: Communicator + ?Sized, D: Device> LinearOperator<C, D> for SysMat<'_, C, D> {
    fn n_local(&self) -> usize {
        match self {
            SysMat::Csr(a) => a.n_local(),
            SysMat::User(u) => u.op.n_local(),
        }
    }

    fn n_ext(&self) -> usize {
        match self {
            SysMat::Csr(a) => a.n_ext(),
            SysMat::User(u) => u.op.n_local(),
        }
    }

    fn spmv(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), KrylovError> {
        match self {
            SysMat::Csr(a) => Ok(a.spmv(ops, x, y)?),
            SysMat::User(u) => {
                // The embedder's work is SpMV work (unless inside a preconditioner).
                let before = ops.sc_mut().local_bucket();
                if before.is_none() {
                    ops.sc_mut().set_local_bucket(Some(Bucket::Spmv));
                }
                let res = match &u.s {
                    Some(s) => ops
                        .mul(x, s, &mut u.t1)
                        .map_err(KrylovError::from)
                        .and_then(|()| u.op.apply(ops, &u.t1, &mut u.t2))
                        .and_then(|()| Ok(ops.mul(&u.t2, s, y)?)),
                    None => u.op.apply(ops, x, y),
                };
                ops.sc_mut().set_local_bucket(before);
                res
            }
        }
    }

    fn spmv_dot(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), KrylovError> {
        match self {
            SysMat::Csr(a) => Ok(a.spmv_dot(ops, x, y, at)?),
            SysMat::User(_) => {
                self.spmv(ops, x, y)?;
                Ok(ops.dot(x, y, at)?)
            }
        }
    }
}
