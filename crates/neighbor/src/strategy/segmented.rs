//! Segmented multi-device neighbour exchange (ALGORITHMS.md section 2, segmented; the
//! Tofu-style schedule for nodes with C communication devices that can each drive any
//! link).
//!
//! For a rank with N > C > 1 destinations: k = gcd(N, C), N = k*N', C = k*C'. Every message
//! is cut into C' pieces; the exchange runs N' steps; in step i device j (0 <= j < C) sends
//! piece iseg = (j + i*C) div N to destination inbr = (j + i*C) mod N, using the same device
//! id on both ends, then waits for the step's C arrivals before the next step. Writing
//! t = j + i*C = iseg*N + inbr, two pieces of one message are N > C apart in t, so they fall
//! in different steps: no two transfers of a step go to one destination and no link is
//! shared. For N <= C or C == 1 it falls back to naive (every message whole, one step).
//!
//! Remainders: piece iseg of an m-value message holds values iseg*m/C' .. (iseg+1)*m/C', so
//! any m works (pieces differ by at most one value; empty pieces, m < C', are not sent).
//! Messages of different sizes (a general pattern) are each cut into C' pieces of their own
//! length; a step then lasts as long as its largest piece, so the model below with m = the
//! largest message is an upper bound.
//!
//! Cost: N*C' messages (C per step) and N*m bytes; D_seg = L*N' + N'*m/(C'*B) (see
//! [`crate::model::time`]); large-message speed-up over naive C'/N' * ceil(N/C).

use super::{gcd, naive, Cut};

/// One line for help text and reports.
pub(crate) const DESCRIPTION: &str =
    "gcd segmentation: N' steps of C pieces, one per device; D = L*N' + N'*m/(C'*B)";

/// The segmentation of `n` messages over `devices` devices (the naive cut, spread over the
/// devices, when `n <= devices` or `devices <= 1`).
pub(crate) fn cut(n: usize, devices: usize) -> Cut {
    let c = devices.max(1);
    if n <= c || c == 1 {
        return Cut {
            devices: c,
            ..naive::cut(n)
        };
    }
    let k = gcd(n, c);
    Cut {
        n,
        devices: c,
        segments: c / k,
        steps: n / k,
        whole: false,
    }
}

/// Step and device of piece `iseg` of the message to destination `inbr` (the inverse of
/// iseg = (j + i*C) div N, inbr = (j + i*C) mod N).
pub(crate) fn slot(cut: &Cut, inbr: usize, iseg: usize) -> (usize, usize) {
    let t = iseg * cut.n + inbr;
    (t / cut.devices, t % cut.devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The forward formula of ALGORITHMS.md, as written there.
    fn forward(n: usize, c: usize) -> Vec<Vec<(usize, usize, usize)>> {
        let cut = cut(n, c);
        (0..cut.steps)
            .map(|i| {
                (0..c)
                    .map(|j| (j, (j + i * c) / n, (j + i * c) % n))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_piece_once_and_no_destination_twice_in_a_step() {
        for n in 1..=16 {
            for c in 1..=8 {
                let cut = cut(n, c);
                if cut.whole {
                    assert!(n <= c || c == 1);
                    assert_eq!(cut.steps, 1);
                    continue;
                }
                let steps = forward(n, c);
                assert_eq!(steps.len() * c, n * cut.segments, "n={n} c={c}");
                let mut seen = vec![vec![false; cut.segments]; n];
                for (i, step) in steps.iter().enumerate() {
                    let mut dests: Vec<usize> = step.iter().map(|&(_, _, d)| d).collect();
                    dests.sort_unstable();
                    dests.dedup();
                    assert_eq!(dests.len(), c, "n={n} c={c} step {i}");
                    for &(j, iseg, inbr) in step {
                        assert!(!seen[inbr][iseg]);
                        seen[inbr][iseg] = true;
                        assert_eq!(slot(&cut, inbr, iseg), (i, j));
                    }
                }
                assert!(seen.iter().flatten().all(|&s| s));
            }
        }
    }

    #[test]
    fn tofu_case_six_neighbours_four_devices() {
        let cut = cut(6, 4);
        assert_eq!((cut.segments, cut.steps, cut.whole), (2, 3, false));
        let cut = cut_of(5, 4);
        assert_eq!((cut.segments, cut.steps), (4, 5));
    }

    fn cut_of(n: usize, c: usize) -> Cut {
        cut(n, c)
    }
}
