//! Pipelined (segmented) chain broadcast (the pipelined chain of Träff and Ripke,
//! "Optimal broadcast for fully connected processor-node networks", JPDC 2008, section 2;
//! Open MPI's `coll_tuned` "pipeline" broadcast), for any p and any root, for large m.
//!
//! The buffer is cut into k segments of [`segment_bytes`]`(m)` bytes (the last one shorter)
//! that flow down the chain root -> root + 1 -> ... -> root + p - 1 (mod p). The root issues
//! all k puts to root + 1 as ONE chained step; a middle rank has k + 1 steps: step 0 waits
//! for segment 0, step j (1 <= j < k) forwards segment j - 1 and waits for segment j, step k
//! forwards the last; the last rank waits for all k segments in one step. While segment j
//! travels one link, segment j + 1 travels the previous one.
//!
//! Segment size: max(8 KiB, m / 16) rounded up to 8 bytes. At most 16 segments keeps the
//! per-segment start cost (about 2 us of address notification on TCA) a small share while
//! the chain fills in 1/16 of the transfer time; below 8 KiB per segment the start cost
//! dominates, so buffers up to 8 KiB go as one segment (the plain chain; prefer the binomial
//! tree there).
//!
//! Cost for m bytes and k segments: p - 1 + k - 1 segment transfers on the critical path
//! (against ceil(log2 p) whole-buffer transfers for the binomial tree); every rank but the
//! last sends k messages, (p - 1) k messages and (p - 1) m bytes in total; at most k + 1
//! steps per rank.

use crate::schedule::Step;
use crate::RankSchedule;

/// One-line description for the registry.
pub const DESCRIPTION: &str =
    "chain from the root, segments of max(8 KiB, m/16) pipelined; large m";

/// Smallest segment, in bytes.
pub const MIN_SEGMENT_BYTES: usize = 8 << 10;

/// Most segments a buffer is cut into (when its segments exceed [`MIN_SEGMENT_BYTES`]).
pub const MAX_SEGMENTS: usize = 16;

/// The segment size for a broadcast of `bytes` bytes: max(8 KiB, bytes / 16) rounded up to
/// a multiple of 8 bytes.
pub fn segment_bytes(bytes: usize) -> usize {
    MIN_SEGMENT_BYTES.max(bytes.div_ceil(MAX_SEGMENTS).next_multiple_of(8))
}

/// Rank `rank`'s schedule (`rank < p`, `root < p`).
pub fn build(p: usize, rank: usize, root: usize, bytes: usize) -> RankSchedule {
    build_segmented(p, rank, root, bytes, segment_bytes(bytes))
}

/// Rank `rank`'s schedule with segments of `segment` bytes (`segment >= 1`).
pub fn build_segmented(
    p: usize,
    rank: usize,
    root: usize,
    bytes: usize,
    segment: usize,
) -> RankSchedule {
    let mut rs = RankSchedule::default();
    if p <= 1 || bytes == 0 {
        return rs;
    }
    let v = (rank + p - root) % p;
    let next = (rank + 1) % p;
    let prev = (rank + p - 1) % p;
    let k = bytes.div_ceil(segment);
    let seg = |j: usize| j * segment..((j + 1) * segment).min(bytes);
    if v == 0 {
        let mut step = Step::new();
        for j in 0..k {
            step = step.put(next, seg(j), seg(j).start);
        }
        rs.push(step);
    } else if v == p - 1 {
        let mut step = Step::new();
        for j in 0..k {
            step = step.arrive(prev, seg(j).start, seg(j).len());
        }
        rs.push(step);
    } else {
        for j in 0..=k {
            let mut step = Step::new();
            if j > 0 {
                step = step.put(next, seg(j - 1), seg(j - 1).start);
            }
            if j < k {
                step = step.arrive(prev, seg(j).start, seg(j).len());
            }
            rs.push(step);
        }
    }
    rs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{execute, Communicator, ExecWorkspace, ThreadUniverse};

    #[test]
    fn segment_choice() {
        assert_eq!(segment_bytes(0), 8192);
        assert_eq!(segment_bytes(8000), 8192);
        assert_eq!(segment_bytes(16 * 8192), 8192);
        assert_eq!(segment_bytes(16 * 8192 + 1), 8192 + 8);
        assert_eq!(segment_bytes(1 << 30), (1 << 30) / 16);
    }

    #[test]
    fn k_segments_down_the_chain() {
        let bytes = 1 << 20; // 16 segments of 64 KiB.
        for p in [2, 3, 5, 17] {
            for root in [0, p / 2, p - 1] {
                let sched = crate::BcastAlgo::Pipeline.schedule(p, root, bytes);
                sched.validate().unwrap();
                assert_eq!(sched.totals(), ((p - 1) * 16, (p - 1) * bytes));
                for (r, rs) in sched.ranks.iter().enumerate() {
                    let v = (r + p - root) % p;
                    let want = if v == 0 || v == p - 1 { 1 } else { 17 };
                    assert_eq!(rs.steps.len(), want, "p={p} root={root} rank {r}");
                    let to: Vec<usize> = rs
                        .steps
                        .iter()
                        .flat_map(|s| s.puts.iter().map(|x| x.to))
                        .collect();
                    assert!(to.iter().all(|&t| t == (r + 1) % p));
                }
            }
        }
    }

    /// Segmenting checked against the unsegmented chain: uneven last segments, every root.
    #[test]
    fn segmented_equals_unsegmented() {
        for p in [1, 2, 3, 4, 7] {
            for root in 0..p {
                for (bytes, segment) in [(0, 8), (1, 8), (37, 8), (64, 8), (100, 1000), (57, 3)] {
                    let want: Vec<u8> = (0..bytes).map(|i| (i * 13 + root) as u8).collect();
                    let got = ThreadUniverse::new(p)
                        .unwrap()
                        .run(|c| {
                            let mut out = Vec::new();
                            for seg in [segment, bytes.max(1)] {
                                let rs = build_segmented(p, c.rank(), root, bytes, seg);
                                let mut buf = if c.rank() == root {
                                    want.clone()
                                } else {
                                    vec![0xEE; bytes]
                                };
                                execute(c, &rs, &mut buf, &mut ExecWorkspace::new())?;
                                out.push(buf);
                            }
                            Ok::<_, crate::CommError>(out)
                        })
                        .unwrap();
                    for (r, bufs) in got.into_iter().enumerate() {
                        let bufs = bufs.unwrap();
                        assert_eq!(bufs[0], bufs[1], "p={p} root={root} rank {r} m={bytes}");
                        assert_eq!(bufs[0], want, "p={p} root={root} rank {r} m={bytes}");
                    }
                }
            }
        }
    }
}
