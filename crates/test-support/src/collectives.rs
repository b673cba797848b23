//! Sequential references for collective operations, a seeded input generator and
//! `check_*` helpers, so a collective test states what it expects rather than how to
//! compute it. Knows nothing about communicators: inputs and results are plain vectors
//! indexed by rank.

/// A small seeded generator (SplitMix64): the same seed gives the same inputs on every
/// rank, in the reference and on every platform.
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator for a tuple of parameters (e.g. test case, ranks, length, rank), mixed so
    /// neighbouring tuples give unrelated streams.
    pub fn for_case(parts: &[u64]) -> Self {
        let mut rng = Self::new(0x5eed_c011_ec71_7e55);
        for &x in parts {
            rng.0 ^= x;
            rng.0 = rng.next_u64();
        }
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform `f64` in `[-1, 1)`, with full 53-bit mantissas so sums round.
    pub fn next_f64(&mut self) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        2.0 * unit - 1.0
    }

    /// A uniform `i64` in `-bound..bound` (`bound > 0`).
    pub fn next_i64(&mut self, bound: u64) -> i64 {
        let span = 2 * bound.max(1);
        (self.next_u64() % span) as i64 - bound.max(1) as i64
    }

    /// `n` values from [`SeededRng::next_f64`].
    pub fn f64_vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next_f64()).collect()
    }
}

/// Element-wise fold of the per-rank `inputs` in rank order with `combine`: the sequential
/// reference of a reduction. All inputs must have the same length; no ranks gives an empty
/// result.
///
/// # Panics
/// If the inputs differ in length (a bug in the test).
#[track_caller]
pub fn reduce_reference<T: Copy>(inputs: &[Vec<T>], combine: impl Fn(T, T) -> T) -> Vec<T> {
    let Some((first, rest)) = inputs.split_first() else {
        return Vec::new();
    };
    let mut acc = first.clone();
    for (r, x) in rest.iter().enumerate() {
        assert_eq!(
            x.len(),
            acc.len(),
            "input of rank {} has another length",
            r + 1
        );
        for (a, &b) in acc.iter_mut().zip(x) {
            *a = combine(*a, b);
        }
    }
    acc
}

/// Per element, a bound on the difference between any summation order of the inputs and
/// the sequential sum: `2 p eps sum_r |x_r|` (p ranks), plus the smallest normal number so
/// zero sums compare.
pub fn sum_tolerance(inputs: &[Vec<f64>]) -> Vec<f64> {
    let p = inputs.len() as f64;
    let abs = reduce_reference(
        &inputs
            .iter()
            .map(|x| x.iter().map(|v| v.abs()).collect())
            .collect::<Vec<Vec<f64>>>(),
        |a, b| a + b,
    );
    abs.iter()
        .map(|s| 2.0 * p * f64::EPSILON * s + f64::MIN_POSITIVE)
        .collect()
}

/// The blocks of every rank concatenated in rank order: the sequential reference of an
/// allgather(v).
pub fn allgatherv_reference<T: Clone>(blocks: &[Vec<T>]) -> Vec<T> {
    blocks.concat()
}

/// Check `got` against `want` element-wise within `tol` (one tolerance per element).
///
/// # Panics
/// With `what`, the element and the values when a difference exceeds its tolerance or the
/// lengths differ.
#[track_caller]
pub fn check_close(what: &str, got: &[f64], want: &[f64], tol: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((g, w), t)) in got.iter().zip(want).zip(tol).enumerate() {
        assert!(
            (g - w).abs() <= *t,
            "{what}: element {i} is {g:e}, reference {w:e} (tolerance {t:e})"
        );
    }
}

/// Check that every rank's result has the same bits as rank 0's.
///
/// # Panics
/// With `what` and the first rank and element that differ.
#[track_caller]
pub fn check_bit_identical(what: &str, per_rank: &[Vec<f64>]) {
    if let Some(i) = first_disagreement(per_rank) {
        panic!("{what}: ranks disagree at (rank, element) = {i:?}");
    }
}

/// The first (rank, element) whose bits differ from rank 0's, if any.
pub fn first_disagreement(per_rank: &[Vec<f64>]) -> Option<(usize, usize)> {
    let (first, rest) = per_rank.split_first()?;
    rest.iter().enumerate().find_map(|(r, x)| {
        x.iter()
            .zip(first)
            .position(|(a, b)| a.to_bits() != b.to_bits())
            .map(|i| (r + 1, i))
            .or(if x.len() != first.len() {
                Some((r + 1, x.len().min(first.len())))
            } else {
                None
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let x = vec![vec![1.0, 5.0], vec![2.0, -1.0], vec![4.0, 0.5]];
        assert_eq!(reduce_reference(&x, |a, b| a + b), vec![7.0, 4.5]);
        assert_eq!(reduce_reference(&x, f64::max), vec![4.0, 5.0]);
        assert_eq!(
            allgatherv_reference(&[vec![1], vec![], vec![2, 3]]),
            vec![1, 2, 3]
        );
        assert_eq!(first_disagreement(&x), Some((1, 0)));
        assert_eq!(first_disagreement(&[vec![1.0], vec![1.0]]), None);
    }

    #[test]
    fn seeded_rng_is_deterministic_and_in_range() {
        let a = SeededRng::for_case(&[1, 2, 3]).f64_vec(100);
        assert_eq!(a, SeededRng::for_case(&[1, 2, 3]).f64_vec(100));
        assert_ne!(a, SeededRng::for_case(&[1, 2, 4]).f64_vec(100));
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
        let mut rng = SeededRng::new(7);
        assert!((0..100).all(|_| (-5..5).contains(&rng.next_i64(5))));
    }
}
