//! Bad operands are errors, not panics (lengths, indices, row counts, missing operands,
//! result slots, malformed CSR blocks); empty vectors work.

use super::{Detail, Kit};
use crate::device::{BasisStep, Device, GramShape, HostCsr, Refs};
use crate::LinalgError;

/// Every refusal, then the empty vectors, on the device under test.
pub(super) fn check<D: Device>(kit: &mut Kit<'_, D>) -> Result<(), LinalgError> {
    let x = kit.dev.zeros(4)?;
    let mut y = kit.dev.zeros(5)?;
    operands(kit, &x, &mut y)?;
    shapes(kit, &x)?;
    empty(kit)
}

/// A CSR block of one row with one entry in column `col`, for an input of 4 values.
fn one_row(col: u32) -> HostCsr {
    HostCsr {
        indptr: vec![0, 1],
        cols: vec![col],
        vals: vec![1.0],
        ncols: 4,
    }
}

/// Operands an operation cannot take: lengths, indices and rows past the end, a missing
/// previous basis column.
fn operands<D: Device>(
    kit: &mut Kit<'_, D>,
    x: &D::Vector,
    y: &mut D::Vector,
) -> Result<(), LinalgError> {
    let r = kit.dev.axpy(5, 1.0, x, y);
    kit.refused("axpy past a vector's end", r);
    let idx = kit.dev.upload_index(&[0, 9])?;
    let mut packed = kit.dev.zeros(2)?;
    let r = kit.dev.gather(x, &idx, &mut packed);
    kit.refused("gather with an index out of range", r);
    let r = kit.dev.scatter(&packed, &idx, y);
    kit.refused("scatter with an index out of range", r);
    let a = kit.dev.upload_csr(one_row(0))?;
    let r = kit.dev.spmv(&a, 2, x, y);
    kit.refused("spmv of more rows than the matrix has", r);
    let mut out = kit.dev.zeros(3)?;
    let r = kit.dev.residual_bound(&a, x, x, y, x, &mut out, 0, 1);
    kit.refused("residual_bound with its bound on the norms' slots", r);
    let step = BasisStep::Chebyshev {
        eta: 1.0,
        zeta: 0.0,
    };
    let r = kit.dev.basis_step(4, step, x, x, None, y);
    kit.refused("Chebyshev step without the previous column", r);
    Ok(())
}

/// Shapes that do not fit: a non-square upper Gram block, results past the results
/// vector, a CSR column past the input vector.
fn shapes<D: Device>(kit: &mut Kit<'_, D>, x: &D::Vector) -> Result<(), LinalgError> {
    let mut out = kit.dev.zeros(16)?;
    let (one, two) = (Refs(&[x]), Refs(&[x, x]));
    let r = kit
        .dev
        .gram(4, &one, &two, GramShape::Upper, None, &mut out, 0);
    kit.refused("upper Gram block of a non-square block", r);
    let r = kit
        .dev
        .gram(4, &one, &one, GramShape::Full, None, &mut out, 16);
    kit.refused("Gram results past the results vector", r);
    let r = kit.dev.upload_csr(one_row(7)).map(drop);
    kit.refused("CSR block with a column out of range", r);
    Ok(())
}

/// Empty vectors: length 0, and every operation on 0 values is a no-op.
fn empty<D: Device>(kit: &mut Kit<'_, D>) -> Result<(), LinalgError> {
    let e = kit.dev.zeros(0)?;
    let mut f = kit.up(&[])?;
    let ok = D::len(&e) == 0 && D::len(&f) == 0;
    let r = kit
        .dev
        .axpy(0, 1.0, &e, &mut f)
        .and_then(|()| kit.dev.read(&e, 0, &mut []))
        .and_then(|()| kit.dev.write(&[], &mut f, 0));
    let error = r.as_ref().err().map(ToString::to_string);
    kit.record("empty vectors", ok && r.is_ok(), Detail::Outcome { error });
    Ok(())
}
