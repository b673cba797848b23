//! The CPU's block kernels on one chunk: the Gram block ([`chunk_gram`], unweighted) and the
//! block linear combination ([`chunk_lincomb_block`]) of the s-step and block methods.
//!
//! Both give the bits of the plain loops they replace (one dot product per pair with four
//! interleaved accumulators, [`super::cpu::chunk_dot`]; one `d += c s` pass per nonzero
//! coefficient in source order): every value sees the same operations in the same order.
//! What changes is the order in which values are visited, so that each is read from memory
//! once:
//!
//! - **Gram**: a chunk ([`super::cpu::CHUNK`] values, 64 KiB per vector) is swept in
//!   sub-blocks of [`SUB`] values (1 KiB per vector, all of a block's vectors in L1). Every
//!   pair's four accumulators carry over from one sub-block to the next, and pairs sharing
//!   their left vector go two at a time ([`dot2`]: its loads of `x_i` serve both, and the
//!   two dependent-add chains overlap). Pairs are processed in groups of at most [`GROUP`]
//!   (their accumulators on the stack); a group sweeps the chunk once.
//! - **Block combination**: tiles of [`TILE`] values of up to [`DEST_GROUP`] destinations
//!   stay in registers while every source passes once, then are stored.
//!
//! Measured on 3-D Poisson 64^3 (262,144 values per vector, one thread, an AMD EPYC VM,
//! 2026-11-29, best of 30, interleaved with the plain loops): the 4 x 4 Gram block of
//! cbcgr (k = 4) 1,642 -> 602 us, the 4 x 4 upper block 560 -> 350 us, 9 x 9 upper (cacg,
//! s = 4) 3,698 -> 2,721 us; the 4 -> 4 block combination 1,410-1,620 -> 1,130 us, 9 -> 3
//! 2,630 -> 1,400 us. The plain loops re-read each pair's or each destination's chunk from
//! L2 or L3, and their time ran 1.4-2.3x the device model's bytes and flops
//! ([`super::work::gram`], [`super::work::lincomb_block`]); these run at 0.5-1.1x of it.

use std::ops::Range;

use super::cpu::Ptr;
use super::{GramShape, VecList};

/// Values per sub-block of a Gram sweep (a multiple of 4: the accumulators' lanes stay
/// those of one sweep over the whole chunk). 128 rather than 256: the 4 x 4 block on
/// 500,000 values took 1,115-1,348 us against 1,424-1,755 us, alone and beside its
/// sibling hyperthread running the same (3 interleaved rounds each, 2026-11-29; 64: as
/// 128).
const SUB: usize = 128;
/// Pairs whose accumulators a Gram sweep keeps (on the stack; even, so that a two-pair
/// step never straddles two groups).
const GROUP: usize = 32;
/// Values per register tile of the block combination.
const TILE: usize = 8;
/// Destinations per register tile of the block combination.
const DEST_GROUP: usize = 4;

/// Pair steps of one Gram sweep: `(i, j, two)`, `two` when `(i, j + 1)` rides along.
fn steps(nx: usize, ny: usize, shape: GramShape) -> impl Iterator<Item = (usize, usize, bool)> {
    (0..nx).flat_map(move |i| {
        let first = match shape {
            GramShape::Full => 0,
            GramShape::Upper => i,
        };
        (first..ny).step_by(2).map(move |j| (i, j, j + 1 < ny))
    })
}

/// The number of dependent-add chains a Gram block of `nx x ny` in `shape` runs one after
/// another: pairs sharing their left vector go two at a time.
pub(super) fn gram_chains(nx: usize, ny: usize, shape: GramShape) -> usize {
    steps(nx, ny, shape).count()
}

/// `a += x . y` lane by lane (four interleaved accumulators) over a multiple of 4 values.
#[inline(always)]
fn dot1(x: &[f64], y: &[f64], a: &mut [f64; 4]) {
    let mut p = *a;
    for (x, y) in x.chunks_exact(4).zip(y.chunks_exact(4)) {
        p[0] += x[0] * y[0];
        p[1] += x[1] * y[1];
        p[2] += x[2] * y[2];
        p[3] += x[3] * y[3];
    }
    *a = p;
}

/// [`dot1`] of `x` with `y` into `a` and with `z` into `b`, in one pass.
#[inline(always)]
fn dot2(x: &[f64], y: &[f64], z: &[f64], a: &mut [f64; 4], b: &mut [f64; 4]) {
    let (mut p, mut q) = (*a, *b);
    for ((x, y), z) in x
        .chunks_exact(4)
        .zip(y.chunks_exact(4))
        .zip(z.chunks_exact(4))
    {
        p[0] += x[0] * y[0];
        p[1] += x[1] * y[1];
        p[2] += x[2] * y[2];
        p[3] += x[3] * y[3];
        q[0] += x[0] * z[0];
        q[1] += x[1] * z[1];
        q[2] += x[2] * z[2];
        q[3] += x[3] * z[3];
    }
    (*a, *b) = (p, q);
}

/// The unweighted Gram block of chunk `c` into `part` (`shape.len(nx, ny)` values in the
/// order of [`super::Device::gram`]): each the bits of `chunk_dot(x_i[c], y_j[c])`.
pub(crate) fn chunk_gram<X, Y>(xs: &X, ys: &Y, c: Range<usize>, shape: GramShape, part: &mut [f64])
where
    X: VecList<Vec<f64>> + ?Sized,
    Y: VecList<Vec<f64>> + ?Sized,
{
    let (nx, ny) = (xs.count(), ys.count());
    let len4 = c.len() - c.len() % 4;
    // The group: its steps, and the accumulators of its pairs (two per two-pair step).
    let mut group = [(0usize, 0usize, false); GROUP];
    let mut acc = [[0.0f64; 4]; GROUP];
    let (mut g, mut pairs, mut out) = (0, 0, 0);
    let sweep = |group: &[(usize, usize, bool)], acc: &mut [[f64; 4]], part: &mut [f64]| {
        acc.iter_mut().for_each(|a| *a = [0.0; 4]);
        let mut s = c.start;
        while s < c.start + len4 {
            let r = s..(s + SUB).min(c.start + len4);
            let mut a = 0;
            for &(i, j, two) in group {
                let x = &xs.get(i)[r.clone()];
                if two {
                    let (p, q) = acc[a..].split_at_mut(1);
                    let (y, z) = (&ys.get(j)[r.clone()], &ys.get(j + 1)[r.clone()]);
                    dot2(x, y, z, &mut p[0], &mut q[0]);
                    a += 2;
                } else {
                    dot1(x, &ys.get(j)[r.clone()], &mut acc[a]);
                    a += 1;
                }
            }
            s = r.end;
        }
        // Each pair's lanes summed as `chunk_dot` sums them, then its tail in index order.
        let mut a = 0;
        for &(i, j, two) in group {
            for jj in j..j + 1 + usize::from(two) {
                let (x, y, s) = (xs.get(i), ys.get(jj), acc[a]);
                let mut t = (s[0] + s[1]) + (s[2] + s[3]);
                for l in c.start + len4..c.end {
                    t += x[l] * y[l];
                }
                part[a] = t;
                a += 1;
            }
        }
    };
    for step in steps(nx, ny, shape) {
        let width = 1 + usize::from(step.2);
        if pairs + width > GROUP {
            sweep(&group[..g], &mut acc[..pairs], &mut part[out..out + pairs]);
            (out, g, pairs) = (out + pairs, 0, 0);
        }
        group[g] = step;
        (g, pairs) = (g + 1, pairs + width);
    }
    if g > 0 {
        sweep(&group[..g], &mut acc[..pairs], &mut part[out..out + pairs]);
    }
}

/// `d_j[c] += sum_l coef[l * nd + j] s_l[c]` for the destinations' chunk `c` (`dsts[j]`
/// points at destination j; `nd = dsts.len()`), over the `l` with a nonzero coefficient in
/// increasing order: the bits of one `d_j += coef s_l` pass per term.
///
/// # Safety
/// Every destination holds `c`, the destinations are distinct, no source aliases one, and
/// no other task touches their chunk `c` meanwhile.
pub(crate) unsafe fn chunk_lincomb_block<S>(coef: &[f64], srcs: &S, dsts: &[Ptr], c: Range<usize>)
where
    S: VecList<Vec<f64>> + ?Sized,
{
    let (ns, nd) = (srcs.count(), dsts.len());
    let len = c.len();
    let lt = len - len % TILE;
    for j0 in (0..nd).step_by(DEST_GROUP) {
        let g = (nd - j0).min(DEST_GROUP);
        // SAFETY: as the caller promises.
        let mut d: [&mut [f64]; DEST_GROUP] = Default::default();
        for (jj, slot) in d.iter_mut().enumerate().take(g) {
            *slot = unsafe { dsts[j0 + jj].chunk(c.clone()) };
        }
        for i in (0..lt).step_by(TILE) {
            let mut t = [[0.0f64; TILE]; DEST_GROUP];
            for jj in 0..g {
                t[jj].copy_from_slice(&d[jj][i..i + TILE]);
            }
            for l in 0..ns {
                let s = &srcs.get(l)[c.start + i..c.start + i + TILE];
                for jj in 0..g {
                    let cl = coef[l * nd + j0 + jj];
                    if cl != 0.0 {
                        for (te, se) in t[jj].iter_mut().zip(s) {
                            *te += cl * se;
                        }
                    }
                }
            }
            for jj in 0..g {
                d[jj][i..i + TILE].copy_from_slice(&t[jj]);
            }
        }
        for (jj, dj) in d.iter_mut().enumerate().take(g) {
            for (i, di) in dj.iter_mut().enumerate().skip(lt) {
                for l in 0..ns {
                    let cl = coef[l * nd + j0 + jj];
                    if cl != 0.0 {
                        *di += cl * srcs.get(l)[c.start + i];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cpu::chunk_dot;
    use super::super::{Refs, VecList};
    use super::*;

    /// Deterministic values of mixed sign and scale (a few exact zeros among them).
    fn vector(seed: usize, n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| {
                let h = (i * 2_654_435_761 + seed * 40_503) % 1_000_003;
                match h % 17 {
                    0 => 0.0,
                    _ => (h as f64 / 1_000_003.0 - 0.37) * 10f64.powi((h % 7) as i32 - 3),
                }
            })
            .collect()
    }

    /// Every pair of every shape, group size and chunk tail: the bits of one `chunk_dot`
    /// per pair (the plain loop this kernel replaces).
    #[test]
    fn gram_gives_the_bits_of_one_dot_product_per_pair() {
        for (nx, ny) in [
            (1, 1),
            (1, 3),
            (4, 1),
            (4, 4),
            (5, 5),
            (9, 9),
            (7, 12),
            (12, 7),
        ] {
            for shape in [GramShape::Full, GramShape::Upper] {
                if shape == GramShape::Upper && nx != ny {
                    continue;
                }
                let xs: Vec<Vec<f64>> = (0..nx).map(|i| vector(i, 1_100)).collect();
                let ys: Vec<Vec<f64>> = (0..ny).map(|j| vector(100 + j, 1_100)).collect();
                let (xr, yr): (Vec<&Vec<f64>>, Vec<&Vec<f64>>) =
                    (xs.iter().collect(), ys.iter().collect());
                for c in [0..1_100, 3..1_027, 0..3, 5..5, 512..1_099] {
                    let mut part = vec![f64::NAN; shape.len(nx, ny)];
                    chunk_gram(&Refs(&xr), &Refs(&yr), c.clone(), shape, &mut part);
                    let mut idx = 0;
                    for (i, x) in xs.iter().enumerate() {
                        let first = if shape == GramShape::Upper { i } else { 0 };
                        for (j, y) in ys.iter().enumerate().skip(first) {
                            let want = chunk_dot(&x[c.clone()], &y[c.clone()]);
                            assert_eq!(
                                part[idx].to_bits(),
                                want.to_bits(),
                                "{nx}x{ny} {shape:?} chunk {c:?} pair ({i}, {j})"
                            );
                            idx += 1;
                        }
                    }
                }
                // One chain per pair, or per two pairs sharing the left vector.
                let chains = gram_chains(nx, ny, shape);
                let rows: usize = (0..nx)
                    .map(|i| match shape {
                        GramShape::Full => ny.div_ceil(2),
                        GramShape::Upper => (ny - i).div_ceil(2),
                    })
                    .sum();
                assert_eq!(chains, rows);
            }
        }
    }

    /// Every destination group and tile tail, zero coefficients skipped: the bits of one
    /// `d += c s` pass per nonzero term in source order.
    #[test]
    fn block_combination_gives_the_bits_of_one_pass_per_term() {
        for (ns, nd) in [(1, 1), (4, 4), (9, 3), (3, 9), (5, 6)] {
            let srcs: Vec<Vec<f64>> = (0..ns).map(|l| vector(l, 300)).collect();
            let sr: Vec<&Vec<f64>> = srcs.iter().collect();
            let coef: Vec<f64> = (0..ns * nd)
                .map(|t| match t % 5 {
                    2 => 0.0,
                    _ => (t as f64 * 0.731).sin() * 3.0,
                })
                .collect();
            for c in [0..300, 7..300, 0..5, 9..9, 1..298] {
                let mut dsts: Vec<Vec<f64>> = (0..nd).map(|j| vector(50 + j, 300)).collect();
                let mut want = dsts.clone();
                for (j, d) in want.iter_mut().enumerate() {
                    for l in 0..ns {
                        let cl = coef[l * nd + j];
                        if cl != 0.0 {
                            for i in c.clone() {
                                d[i] += cl * srcs[l][i];
                            }
                        }
                    }
                }
                let ptrs: Vec<Ptr> = dsts.iter_mut().map(|d| Ptr::of(d)).collect();
                // SAFETY: distinct destinations of 300 values each, no source among them.
                unsafe { chunk_lincomb_block(&coef, &Refs(&sr), &ptrs, c.clone()) };
                for (j, (got, want)) in dsts.iter().zip(&want).enumerate() {
                    for i in 0..300 {
                        assert_eq!(
                            got[i].to_bits(),
                            want[i].to_bits(),
                            "{ns} -> {nd} chunk {c:?} destination {j} value {i}"
                        );
                    }
                }
                assert_eq!(Refs(&sr).count(), ns);
            }
        }
    }
}
