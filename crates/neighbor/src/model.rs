//! The analytic cost model of ALGORITHMS.md section 2 for one neighbour exchange.
//!
//! Setting: every rank sends `bytes` (m) to each of N neighbours; a node has C communication
//! devices, each able to drive any link; device and link bandwidth B; per-message cost L.
//!
//! - naive: devices carry whole messages, ceil(N/C) rounds:
//!   D_naive = L*ceil(N/C) + ceil(N/C)*m/B;
//! - segmented (N > C > 1): k = gcd(N, C), N' = N/k, C' = C/k:
//!   D_seg = L*N' + N'*m/(C'*B); otherwise it is naive.
//!
//! The model assumes no contention beyond the devices (every step's transfers use distinct
//! links) and no node-level injection cap; a fabric that caps a node's total injection
//! below C*B (Tofu FX10: about 15 GB/s for 4 x 5 GB/s devices) makes both strategies slower
//! for large messages and shrinks the segmented speed-up.

use crate::strategy::{gcd, Strategy};

/// Modeled seconds of one exchange with `strategy` for `n` neighbours of `bytes` each on a
/// node of `c` devices, with per-message latency `latency_s` and per-device bandwidth
/// `bandwidth_bps` (bytes per second). `n == 0` costs nothing; `c == 0` is treated as 1.
///
/// ```
/// use castack_neighbor::{model, Strategy};
/// let (l, b, m) = (1e-6, 5e9, 8.0 * 1024.0 * 1024.0);
/// let naive = model::time(Strategy::Naive, 6, 4, m, l, b);
/// let seg = model::time(Strategy::Segmented { devices: 4 }, 6, 4, m, l, b);
/// assert!((naive - (2.0 * l + 2.0 * m / b)).abs() < 1e-12);
/// assert!((seg - (3.0 * l + 3.0 * m / (2.0 * b))).abs() < 1e-12);
/// ```
pub fn time(
    strategy: Strategy,
    n: usize,
    c: usize,
    bytes: f64,
    latency_s: f64,
    bandwidth_bps: f64,
) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let c = c.max(1);
    let segmented = matches!(strategy, Strategy::Segmented { .. });
    if !segmented || n <= c || c == 1 {
        let rounds = n.div_ceil(c) as f64;
        return latency_s * rounds + rounds * bytes / bandwidth_bps;
    }
    let k = gcd(n, c);
    let (n1, c1) = ((n / k) as f64, (c / k) as f64);
    latency_s * n1 + n1 * bytes / (c1 * bandwidth_bps)
}

/// The large-message speed-up of segmented over naive, C'/N' * ceil(N/C) (1 where segmented
/// falls back to naive).
pub fn large_message_speedup(n: usize, c: usize) -> f64 {
    let c = c.max(1);
    if n <= c || c == 1 {
        return 1.0;
    }
    let k = gcd(n, c);
    (c / k) as f64 / (n / k) as f64 * n.div_ceil(c) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: Strategy = Strategy::Segmented { devices: 0 };

    #[test]
    fn formulas_of_the_spec() {
        let (l, b) = (1e-6, 5e9);
        // N = 6, C = 4: naive 2 rounds; k = 2, N' = 3, C' = 2.
        let m = 1e6;
        assert!((time(Strategy::Naive, 6, 4, m, l, b) - (2e-6 + 2.0 * m / b)).abs() < 1e-15);
        assert!((time(SEG, 6, 4, m, l, b) - (3e-6 + 3.0 * m / (2.0 * b))).abs() < 1e-15);
        // Fallbacks.
        for (n, c) in [(3, 4), (4, 4), (7, 1)] {
            assert_eq!(
                time(SEG, n, c, m, l, b),
                time(Strategy::Naive, n, c, m, l, b)
            );
        }
        assert_eq!(time(SEG, 0, 4, m, l, b), 0.0);
    }

    #[test]
    fn speedup_approaches_two_as_n_approaches_c_from_above() {
        assert!((large_message_speedup(6, 4) - 4.0 / 3.0).abs() < 1e-12);
        assert!((large_message_speedup(5, 4) - 4.0 / 5.0 * 2.0).abs() < 1e-12);
        assert!((large_message_speedup(9, 8) - 8.0 / 9.0 * 2.0).abs() < 1e-12);
        assert_eq!(large_message_speedup(4, 4), 1.0);
        // The model's ratio at huge m equals the closed form.
        let (l, b, m) = (1e-6, 5e9, 1e12);
        for n in 1..=12 {
            for c in 1..=6 {
                let r = time(Strategy::Naive, n, c, m, l, b) / time(SEG, n, c, m, l, b);
                assert!(
                    (r - large_message_speedup(n, c)).abs() < 1e-6,
                    "n={n} c={c}"
                );
            }
        }
    }
}
