//! Collective algorithms, one file each, one registry enum per operation.
//!
//! Every algorithm is a pure function from (ranks, rank, sizes, root, ...) to that rank's
//! [`crate::RankSchedule`]; backends interpret the schedules. See `README.md` in this folder
//! for how to add one.

pub mod allgatherv;
pub mod allreduce;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod reduce;
pub mod scatter;
mod tree;

/// Largest power of two `<= p` (`p >= 1`).
pub(crate) fn pof2_floor(p: usize) -> usize {
    debug_assert!(p >= 1);
    1usize << (usize::BITS - 1 - p.leading_zeros())
}

/// `ceil(log2 p)` for `p >= 1`.
pub(crate) fn ceil_log2(p: usize) -> u32 {
    if p <= 1 {
        0
    } else {
        usize::BITS - (p - 1).leading_zeros()
    }
}

/// Build the whole [`crate::Schedule`] from a per-rank builder.
pub(crate) fn whole(
    buffer_bytes: Vec<usize>,
    build: impl Fn(usize) -> crate::RankSchedule,
) -> crate::Schedule {
    let ranks = (0..buffer_bytes.len()).map(build).collect();
    crate::Schedule {
        ranks,
        buffer_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pof2_and_log2() {
        let cases = [
            (1, 1, 0),
            (2, 2, 1),
            (3, 2, 2),
            (4, 4, 2),
            (5, 4, 3),
            (17, 16, 5),
        ];
        for (p, f, l) in cases {
            assert_eq!(pof2_floor(p), f, "pof2_floor({p})");
            assert_eq!(ceil_log2(p), l, "ceil_log2({p})");
        }
    }
}
