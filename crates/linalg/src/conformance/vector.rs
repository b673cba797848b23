//! The single-vector operations against the reference: elementwise (the same bits, tails
//! past `n` included), fused with sums (the vectors to the bit, the sums within their
//! rounding bounds), and the moves (copies at offsets, fills, host-device copies, halo
//! gather and scatter).

use super::{abs_dot, abs_wdot, sum_bound, Both, Kit, Operands};
use crate::device::{BasisStep, CcgVecs, Device, PipecgVecs, PIPECG_SUMS};
use crate::gen::SplitMix64;
use crate::LinalgError;

/// The scalars of the updates.
const A: f64 = 0.37;
const B: f64 = -1.25;

/// Every single-vector operation on `n` values of vectors 5 values longer (the tails must
/// stay), from the random streams of `seed`.
pub(super) fn check<D: Device>(
    kit: &mut Kit<'_, D>,
    n: usize,
    seed: u64,
) -> Result<(), LinalgError> {
    let ops = kit.upload(Operands::random(10, n + 5, seed + 100, seed + 99, 0.1))?;
    elementwise(kit, &ops, n)?;
    updates(kit, &ops, n)?;
    fused_sums(kit, &ops, n)?;
    pipecg(kit, &ops, n)?;
    ccg(kit, &ops, n)?;
    moves(kit, &ops, n, seed)
}

/// The elementwise operations: the same bits.
fn elementwise<D: Device>(
    kit: &mut Kit<'_, D>,
    ops: &Both<D>,
    n: usize,
) -> Result<(), LinalgError> {
    let h = &ops.cpu.v;
    let y = (["y"], [&h[1][..]]);
    both!(kit, "axpy", y, 0, ops, |d, o, [y], _| {
        d.axpy(n, A, &o.v[0], y)
    })?;
    both!(kit, "xpay", y, 0, ops, |d, o, [y], _| {
        d.xpay(n, &o.v[0], B, y)
    })?;
    both!(kit, "scale", y, 0, ops, |d, o, [y], _| {
        d.scale(n, A, &o.v[0], y)
    })?;
    let out = (["out"], [&h[2][..]]);
    both!(kit, "mul", out, 0, ops, |d, o, [out], _| {
        d.mul(n, &o.v[0], &o.v[1], out)
    })?;
    both!(kit, "div", out, 0, ops, |d, o, [out], _| {
        d.div(n, &o.v[0], &o.v[1], out)
    })?;
    let up = 2f64.powi(1021);
    let x = (["x"], [&h[2][..]]);
    both!(kit, "representable", x, 0, ops, |d, o, [x], _| {
        d.representable(n, &o.v[1], up, x)
    })?;
    Ok(())
}

/// The solvers' updates without sums (CG's, the basis steps, the smoothing's): the same
/// bits.
fn updates<D: Device>(kit: &mut Kit<'_, D>, ops: &Both<D>, n: usize) -> Result<(), LinalgError> {
    let h = &ops.cpu.v;
    let vecs = (["p", "x"], [&h[1][..], &h[2]]);
    both!(kit, "cg_update", vecs, 0, ops, |d, o, [p, x], _| {
        d.cg_update(n, A, B, &o.v[0], p, x)
    })?;
    for step in BasisStep::each_kind(0.3, 0.7, 1.1) {
        let what = format!("basis_step {step:?}");
        both!(kit, &what, (["out"], [&h[3]]), 0, ops, |d, o, [out], _| {
            d.basis_step(n, step, &o.v[0], &o.v[1], Some(&o.v[2]), out)
        })?;
    }
    let vecs = (["s", "y"], [&h[2][..], &h[3]]);
    both!(kit, "smooth_update", vecs, 0, ops, |d, o, [s, y], _| {
        d.smooth_update(n, A, &o.v[0], &o.v[1], s, y)
    })?;
    both!(kit, "smooth_rescale", vecs, 0, ops, |d, o, [s, y], _| {
        d.smooth_rescale(n, A, &o.v[0], s, y)
    })?;
    Ok(())
}

/// `[y.y, y.W y]` of `y`: the rounding bounds of the two norms.
fn norm_bounds(n: usize, y: &[f64], w: &[f64]) -> [f64; 2] {
    [
        sum_bound(n, abs_dot(n, y, y)),
        sum_bound(n, abs_wdot(n, y, w, y)),
    ]
}

/// The residual updates fused with their norms: the vectors to the bit, the sums within
/// their bounds, and CG's `y.y` the same bits whichever of the two ran.
fn fused_sums<D: Device>(kit: &mut Kit<'_, D>, ops: &Both<D>, n: usize) -> Result<(), LinalgError> {
    let (h, w) = (&ops.cpu.v, &ops.cpu.w);
    let y = (["y"], [&h[1][..]]);
    let r = both!(kit, "axpy_norms", y, 2, ops, |d, o, [y], out| {
        d.axpy_norms(n, -A, &o.v[0], y, &o.w, out, 1)
    })?;
    let bounds = norm_bounds(n, &r.vecs[0], w);
    kit.bound("axpy_norms (y.y, y.W y)", &r.got, &r.want, &bounds);
    let norms_yy = r.got[0];
    let r = both!(kit, "axpy_dot", y, 1, ops, |d, o, [y], out| {
        d.axpy_dot(n, -A, &o.v[0], y, out, 1)
    })?;
    kit.bound("axpy_dot (y.y)", &r.got, &r.want, &bounds[..1]);
    // CG switches between the two: its r.r must not depend on which ran.
    kit.bits("axpy_dot y.y = axpy_norms y.y", &r.got, &[norms_yy]);
    let r = both!(kit, "residual_norms", y, 2, ops, |d, o, [y], out| {
        d.residual_norms(n, &o.v[0], y, &o.w, out, 1)
    })?;
    let bounds = norm_bounds(n, &r.vecs[0], w);
    kit.bound("residual_norms (y.y, y.W y)", &r.got, &r.want, &bounds);
    let r = both!(kit, "wnorm", ([], []), 1, ops, |d, o, [], out| {
        d.wnorm(n, &o.v[0], &o.w, out, 1)
    })?;
    let bounds = [sum_bound(n, abs_wdot(n, &h[0], w, &h[0]))];
    kit.bound("wnorm", &r.got, &r.want, &bounds);
    Ok(())
}

/// Pipelined CG's six updates and eight sums.
fn pipecg<D: Device>(kit: &mut Kit<'_, D>, ops: &Both<D>, n: usize) -> Result<(), LinalgError> {
    let (h, w) = (&ops.cpu.v, &ops.cpu.w);
    let names = ["w", "r", "z", "s", "p", "x"];
    let init = [&h[1][..], &h[2], &h[3], &h[4], &h[5], &h[6]];
    let r = both!(
        kit,
        "pipecg_update",
        (names, init),
        PIPECG_SUMS,
        ops,
        |d, o, [w, r, z, s, p, x], out| {
            let vecs = PipecgVecs { w, r, z, s, p, x };
            d.pipecg_update(n, A, B, &o.v[0], vecs, &o.w, out, 1)
        }
    )?;
    let v = &r.vecs;
    let bounds = [
        sum_bound(n, abs_dot(n, &v[1], &v[1])),
        sum_bound(n, abs_wdot(n, &v[1], w, &v[1])),
        sum_bound(n, abs_dot(n, &v[0], &v[1])),
        sum_bound(n, abs_dot(n, &v[5], &v[5])),
        sum_bound(n, abs_dot(n, &v[4], &v[4])),
        sum_bound(n, abs_dot(n, &v[3], &v[3])),
        sum_bound(n, abs_dot(n, &v[2], &v[2])),
        sum_bound(n, abs_dot(n, &v[0], &v[0])),
    ];
    let what = "pipecg_update (r.r, r.W r, w.r, x.x, p.p, s.s, z.z, w.w)";
    kit.bound(what, &r.got, &r.want, &bounds);
    Ok(())
}

/// Chronopoulos-Gear CG's four updates with and without weights: the same `r.r` either
/// way.
fn ccg<D: Device>(kit: &mut Kit<'_, D>, ops: &Both<D>, n: usize) -> Result<(), LinalgError> {
    let (h, w) = (&ops.cpu.v, &ops.cpu.w);
    let vecs = (["r", "p", "ap", "x"], [&h[1][..], &h[2], &h[3], &h[4]]);
    let r = both!(
        kit,
        "ccg_update",
        vecs,
        2,
        ops,
        |d, o, [r, p, ap, x], out| {
            let vecs = CcgVecs { r, p, ap, x };
            d.ccg_update(n, A, B, &o.v[0], vecs, Some(&o.w), out, 1)
        }
    )?;
    let bounds = norm_bounds(n, &r.vecs[0], w);
    kit.bound("ccg_update (r.r, r.W r)", &r.got, &r.want, &bounds);
    let ccg_rr = r.got[0];
    let what = "ccg_update without weights";
    let r = both!(kit, what, vecs, 1, ops, |d, o, [r, p, ap, x], out| {
        let vecs = CcgVecs { r, p, ap, x };
        d.ccg_update(n, A, B, &o.v[0], vecs, None, out, 1)
    })?;
    kit.bound(
        "ccg_update without weights (r.r)",
        &r.got,
        &r.want,
        &bounds[..1],
    );
    // C-CG switches between the two: its r.r must not depend on which ran.
    let what = "ccg_update without weights r.r = ccg_update r.r";
    kit.bits(what, &r.got, &[ccg_rr]);
    Ok(())
}

/// Copies at offsets, fill, host-device copies, halo gather and scatter.
fn moves<D: Device>(
    kit: &mut Kit<'_, D>,
    ops: &Both<D>,
    n: usize,
    seed: u64,
) -> Result<(), LinalgError> {
    let h = &ops.cpu.v;
    let m = n.min(7);
    let dst = (["dst"], [&h[1][..]]);
    both!(kit, "copy (offsets)", dst, 0, ops, |d, o, [y], _| {
        d.copy(m, &o.v[0], 3, y, 5)
    })?;
    both!(kit, "fill (offset)", dst, 0, ops, |d, _, [y], _| {
        d.fill(m, 2.5, y, 4)
    })?;
    let part = &h[2][..m];
    both!(kit, "write (offset)", dst, 0, ops, |d, _, [y], _| {
        d.write(part, y, 5)
    })?;
    let mut got = vec![0.0; m];
    kit.dev.read(&ops.dev.v[3], 5, &mut got)?;
    kit.bits("read (offset)", &got, &h[3][5..5 + m]);
    halo(kit, ops, n, seed)
}

/// Halo packing and unpacking through a list of distinct indices: a prefix of a random
/// permutation of `0..n`.
fn halo<D: Device>(
    kit: &mut Kit<'_, D>,
    ops: &Both<D>,
    n: usize,
    seed: u64,
) -> Result<(), LinalgError> {
    let h = &ops.cpu.v;
    let mut perm: Vec<u32> = (0..n as u32).collect();
    let mut rng = SplitMix64::new(seed ^ 0x1d);
    for i in (1..perm.len()).rev() {
        perm.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    perm.truncate(n.min(1000));
    let ci = kit.cpu.upload_index(&perm)?;
    let di = kit.dev.upload_index(&perm)?;
    // The index lists differ in type: one closure per device.
    let packed_init = vec![-3.0; perm.len() + 2];
    let packed = kit.both(
        "gather",
        (["out"], [&packed_init]),
        0,
        ops,
        |c, o, [out], _| c.gather(&o.v[0], &ci, out),
        |d, o, [out], _| d.gather(&o.v[0], &di, out),
    )?;
    let [packed] = packed.vecs;
    let dev_packed = kit.up(&packed)?;
    kit.both(
        "scatter",
        (["out"], [&h[1]]),
        0,
        ops,
        |c, _, [out], _| c.scatter(&packed, &ci, out),
        |d, _, [out], _| d.scatter(&dev_packed, &di, out),
    )?;
    Ok(())
}
