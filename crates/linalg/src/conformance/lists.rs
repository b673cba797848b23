//! The operations on lists of vectors against the reference: Gram blocks (full and upper,
//! weighted or not, within their rounding bounds, and the same bits when repeated) and
//! linear combinations (single, fused with norms, and block; a zero coefficient skips its
//! vector, which holds a NaN to prove it).

use super::{abs_dot, abs_wdot, sum_bound, Both, Kit, Operands};
use crate::device::{Concat, Device, GramShape, Refs, RefsMut};
use crate::gen::SplitMix64;
use crate::LinalgError;

/// Random vectors of the lists; the operand after them ([`POISONED`]) is a copy of vector 8
/// with a NaN.
const VECTORS: usize = 12;
/// The operand with a NaN, read only with zero coefficients.
const POISONED: usize = VECTORS;

/// Every list operation on `n` values of vectors 5 values longer, from the random streams
/// of `seed`.
pub(super) fn check<D: Device>(
    kit: &mut Kit<'_, D>,
    n: usize,
    seed: u64,
) -> Result<(), LinalgError> {
    let mut host = Operands::random(VECTORS as u64, n + 5, seed + 300, seed + 399, 0.5);
    let mut poisoned = host.v[8].clone();
    poisoned[n.min(17).saturating_sub(1)] = f64::NAN;
    host.v.push(poisoned);
    let ops = kit.upload(host)?;
    for weighted in [false, true] {
        gram_full(kit, &ops, n, weighted)?;
    }
    gram_dot(kit, &ops, n)?;
    for weighted in [false, true] {
        gram_upper(kit, &ops, n, weighted)?;
    }
    gram_repeated(kit, &ops, n)?;
    lincombs(kit, &ops, n)?;
    lincomb_block(kit, &ops, n, seed)
}

/// `" weighted"` or nothing, for the labels.
fn weighted_label(weighted: bool) -> &'static str {
    if weighted {
        " weighted"
    } else {
        ""
    }
}

/// The rounding bound of `x . y` (or `x . W y`) on `n` values.
fn dot_bound(n: usize, x: &[f64], y: &[f64], w: Option<&[f64]>) -> f64 {
    let abs = match w {
        Some(w) => abs_wdot(n, x, w, y),
        None => abs_dot(n, x, y),
    };
    sum_bound(n, abs)
}

/// A full 3 x 10 Gram block (three tiles of Y).
fn gram_full<D: Device>(
    kit: &mut Kit<'_, D>,
    ops: &Both<D>,
    n: usize,
    weighted: bool,
) -> Result<(), LinalgError> {
    let label = format!("gram full 3 x 10{}", weighted_label(weighted));
    let r = both!(kit, &label, ([], []), 30, ops, |d, o, [], out| {
        let xs: Vec<&_> = o.v[..3].iter().collect();
        let ys: Vec<&_> = o.v[2..VECTORS].iter().collect();
        let w = weighted.then_some(&o.w);
        d.gram(n, &Refs(&xs), &Refs(&ys), GramShape::Full, w, out, 1)
    })?;
    let (h, w) = (&ops.cpu.v, weighted.then_some(&ops.cpu.w[..]));
    let bounds: Vec<f64> = h[..3]
        .iter()
        .flat_map(|x| h[2..VECTORS].iter().map(move |y| dot_bound(n, x, y, w)))
        .collect();
    kit.bound(&format!("{label} (values)"), &r.got, &r.want, &bounds);
    Ok(())
}

/// A 1 x 1 Gram block: a dot product.
fn gram_dot<D: Device>(kit: &mut Kit<'_, D>, ops: &Both<D>, n: usize) -> Result<(), LinalgError> {
    let what = "gram 1 x 1 (dot)";
    let r = both!(kit, what, ([], []), 1, ops, |d, o, [], out| {
        let (x, y) = (Refs(&[&o.v[0]]), Refs(&[&o.v[1]]));
        d.gram(n, &x, &y, GramShape::Full, None, out, 1)
    })?;
    let h = &ops.cpu.v;
    let bound = [dot_bound(n, &h[0], &h[1], None)];
    kit.bound("gram 1 x 1 (dot) (value)", &r.got, &r.want, &bound);
    Ok(())
}

/// The upper triangle of a 9-vector concatenated list with itself.
fn gram_upper<D: Device>(
    kit: &mut Kit<'_, D>,
    ops: &Both<D>,
    n: usize,
    weighted: bool,
) -> Result<(), LinalgError> {
    let label = format!("gram upper 9 x 9{}", weighted_label(weighted));
    let r = both!(kit, &label, ([], []), 45, ops, |d, o, [], out| {
        let left: Vec<&_> = o.v[..4].iter().collect();
        let right: Vec<&_> = o.v[4..9].iter().collect();
        let (l, r) = (Refs(&left), Refs(&right));
        let cat = Concat(&l, &r);
        let w = weighted.then_some(&o.w);
        d.gram(n, &cat, &cat, GramShape::Upper, w, out, 1)
    })?;
    let (h, w) = (&ops.cpu.v, weighted.then_some(&ops.cpu.w[..]));
    let bounds: Vec<f64> = (0..9)
        .flat_map(|i| (i..9).map(move |j| dot_bound(n, &h[i], &h[j], w)))
        .collect();
    kit.bound(&format!("{label} (values)"), &r.got, &r.want, &bounds);
    Ok(())
}

/// A weighted full Gram block computed twice on the device: the same bits.
fn gram_repeated<D: Device>(
    kit: &mut Kit<'_, D>,
    ops: &Both<D>,
    n: usize,
) -> Result<(), LinalgError> {
    let xs: Vec<&D::Vector> = ops.dev.v[..3].iter().collect();
    let ys: Vec<&D::Vector> = ops.dev.v[2..VECTORS].iter().collect();
    let mut first = kit.dev.zeros(30)?;
    let mut second = kit.dev.zeros(30)?;
    for r in [&mut first, &mut second] {
        let w = Some(&ops.dev.w);
        kit.dev
            .gram(n, &Refs(&xs), &Refs(&ys), GramShape::Full, w, r, 0)?;
    }
    let (first, second) = (kit.get(&first)?, kit.get(&second)?);
    kit.bits(
        "gram full 3 x 10 weighted (repeated: same bits)",
        &second,
        &first,
    );
    Ok(())
}

/// Single linear combinations, with a zero coefficient on the poisoned vector.
fn lincombs<D: Device>(kit: &mut Kit<'_, D>, ops: &Both<D>, n: usize) -> Result<(), LinalgError> {
    let (h, w) = (&ops.cpu.v, &ops.cpu.w);
    let coef = [0.5, 0.0, -1.5, 2.0];
    let cols = [0, POISONED, 2, 3];
    let y = (["y"], [&h[4][..]]);
    both!(kit, "lincomb", y, 0, ops, |d, o, [y], _| {
        let vs = cols.map(|j| &o.v[j]);
        d.lincomb(n, &coef, &Refs(&vs), y)
    })?;
    let r = both!(kit, "lincomb_norms", y, 2, ops, |d, o, [y], out| {
        let vs = cols.map(|j| &o.v[j]);
        d.lincomb_norms(n, &coef, &Refs(&vs), y, &o.w, out, 1)
    })?;
    let y = &r.vecs[0];
    let bounds = [
        sum_bound(n, abs_dot(n, y, y)),
        sum_bound(n, abs_wdot(n, y, w, y)),
    ];
    kit.bound("lincomb_norms (y.y, y.W y)", &r.got, &r.want, &bounds);
    Ok(())
}

/// The block linear combination: 5 sources (the poisoned one with only zero
/// coefficients) into 10 destinations (two groups of the kernel).
fn lincomb_block<D: Device>(
    kit: &mut Kit<'_, D>,
    ops: &Both<D>,
    n: usize,
    seed: u64,
) -> Result<(), LinalgError> {
    let h = &ops.cpu.v;
    let nd = 10;
    let mut rng = SplitMix64::new(seed ^ 0xb10c);
    let coef: Vec<f64> = (0..5 * nd)
        .map(|k| {
            let v = 2.0 * rng.next_f64() - 1.0;
            if k / nd == 2 || k % 3 == 0 {
                0.0
            } else {
                v
            }
        })
        .collect();
    let srcs = [0, 1, POISONED, 2, 3];
    let names = ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"];
    let init: [&[f64]; 10] = std::array::from_fn(|j| &h[4 + j % 8][..]);
    let what = "lincomb_block 5 x 10";
    both!(kit, what, (names, init), 0, ops, |d, o, dsts, _| {
        let ss = srcs.map(|j| &o.v[j]);
        let mut ds: Vec<&mut _> = dsts.iter_mut().collect();
        d.lincomb_block(n, &coef, &Refs(&ss), &mut RefsMut(&mut ds))
    })?;
    Ok(())
}
