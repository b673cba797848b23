//! Batched copies: a list of (destination offset, source offset, length) between two
//! buffers, executed concurrently ([`copy_many`], rayon; one call, many pairs in parallel),
//! or one after another through a staging buffer ([`copy_staged`], the host-staged path a
//! GPU code takes when each face is copied device -> host -> device by itself).
//!
//! Reference: ALGORITHMS.md section 2 (halo exchange: batched copies), after the DS-CUDA
//! halo exchange. Cost: the same bytes either way (twice for staged); `copy_many` splits the
//! list recursively (`rayon::join`, no allocation) so independent copies run on different
//! workers; its benefit is concurrency, which on a CPU shows only for copies large enough to
//! outweigh the fork/join cost (about a microsecond).

use crate::error::NeighborError;

/// One copy of `len` values from `src` offset `src` to `dst` offset `dst` (in values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyOp {
    /// Offset in the destination buffer.
    pub dst: usize,
    /// Offset in the source buffer.
    pub src: usize,
    /// Values to copy.
    pub len: usize,
}

/// Below this many values a sub-list is copied sequentially (fork/join costs more).
const SEQUENTIAL_BELOW: usize = 1 << 14;

/// Check a copy list for buffers of `dst_len` and `src_len` values: every range in bounds,
/// destinations in increasing order and disjoint (what [`copy_many`] needs to split the
/// destination safely).
pub fn check_copies(
    copies: &[CopyOp],
    dst_len: usize,
    src_len: usize,
) -> Result<(), NeighborError> {
    let mut end = 0;
    for (index, c) in copies.iter().enumerate() {
        let ok = c.dst >= end
            && c.dst.checked_add(c.len).is_some_and(|e| e <= dst_len)
            && c.src.checked_add(c.len).is_some_and(|e| e <= src_len);
        if !ok {
            return Err(NeighborError::BadCopy { index });
        }
        end = c.dst + c.len;
    }
    Ok(())
}

/// Execute every copy of `copies` from `src` into `dst` concurrently.
///
/// Errors: [`NeighborError::BadCopy`] if the list fails [`check_copies`] (nothing is
/// copied then).
pub fn copy_many(dst: &mut [f64], src: &[f64], copies: &[CopyOp]) -> Result<(), NeighborError> {
    check_copies(copies, dst.len(), src.len())?;
    split(dst, 0, src, copies);
    Ok(())
}

/// Copy `copies` (checked, sorted by destination) into `dst`, which starts at offset
/// `base` of the whole destination.
fn split(dst: &mut [f64], base: usize, src: &[f64], copies: &[CopyOp]) {
    let total: usize = copies.iter().map(|c| c.len).sum();
    if copies.len() <= 1 || total < SEQUENTIAL_BELOW {
        for c in copies {
            dst[c.dst - base..c.dst - base + c.len].copy_from_slice(&src[c.src..c.src + c.len]);
        }
        return;
    }
    let mid = copies.len() / 2;
    let (lo, hi) = dst.split_at_mut(copies[mid].dst - base);
    let hi_base = copies[mid].dst;
    rayon::join(
        || split(lo, base, src, &copies[..mid]),
        || split(hi, hi_base, src, &copies[mid..]),
    );
}

/// Execute the copies one after another, each through `stage` (source -> stage ->
/// destination), which must hold the longest copy.
///
/// Errors: [`NeighborError::BadCopy`] if the list fails [`check_copies`] or a copy is
/// longer than `stage`.
pub fn copy_staged(
    dst: &mut [f64],
    src: &[f64],
    copies: &[CopyOp],
    stage: &mut [f64],
) -> Result<(), NeighborError> {
    check_copies(copies, dst.len(), src.len())?;
    if let Some(index) = copies.iter().position(|c| c.len > stage.len()) {
        return Err(NeighborError::BadCopy { index });
    }
    for c in copies {
        let s = &mut stage[..c.len];
        s.copy_from_slice(&src[c.src..c.src + c.len]);
        dst[c.dst..c.dst + c.len].copy_from_slice(s);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_and_staged_equal_a_plain_loop() {
        let src: Vec<f64> = (0..100_000).map(|i| i as f64 * 0.5).collect();
        // Many copies, some big enough to be split across workers, gaps between them.
        let mut copies = Vec::new();
        let (mut d, mut s) = (3, 7);
        for k in 0..40 {
            let len = if k % 5 == 0 { 20_000 } else { k * 3 };
            copies.push(CopyOp {
                dst: d,
                src: s % 50_000,
                len,
            });
            d += len + k % 4;
            s += 977;
        }
        let mut want = vec![-1.0; d + 5];
        for c in &copies {
            for i in 0..c.len {
                want[c.dst + i] = src[c.src + i];
            }
        }
        let mut a = vec![-1.0; d + 5];
        copy_many(&mut a, &src, &copies).unwrap();
        assert_eq!(a, want);
        let mut b = vec![-1.0; d + 5];
        let mut stage = vec![0.0; 20_000];
        copy_staged(&mut b, &src, &copies, &mut stage).unwrap();
        assert_eq!(b, want);
    }

    #[test]
    fn bad_lists_are_errors_and_copy_nothing() {
        let src = [1.0; 10];
        let mut dst = [0.0; 10];
        let overlap = [
            CopyOp {
                dst: 0,
                src: 0,
                len: 4,
            },
            CopyOp {
                dst: 3,
                src: 0,
                len: 2,
            },
        ];
        assert_eq!(
            copy_many(&mut dst, &src, &overlap),
            Err(NeighborError::BadCopy { index: 1 })
        );
        let out = [CopyOp {
            dst: 8,
            src: 0,
            len: 3,
        }];
        assert_eq!(
            copy_many(&mut dst, &src, &out),
            Err(NeighborError::BadCopy { index: 0 })
        );
        let out = [CopyOp {
            dst: 0,
            src: usize::MAX,
            len: 3,
        }];
        assert_eq!(
            copy_many(&mut dst, &src, &out),
            Err(NeighborError::BadCopy { index: 0 })
        );
        let ok = [CopyOp {
            dst: 0,
            src: 0,
            len: 4,
        }];
        assert_eq!(
            copy_staged(&mut dst, &src, &ok, &mut [0.0; 3]),
            Err(NeighborError::BadCopy { index: 0 })
        );
        assert_eq!(dst, [0.0; 10]);
    }
}
