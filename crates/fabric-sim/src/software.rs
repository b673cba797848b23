//! The software side of a collective: the MPI library's per-call and per-step CPU costs, and
//! system noise that takes the CPU away from a rank now and then.
//!
//! # Model
//!
//! - **Software cost** (`[software]`): a rank spends `call_us` of CPU when it enters a
//!   collective call (argument checks, algorithm selection, buffer setup) and `step_us`
//!   whenever it enters a step of the schedule (posting the step's puts and progressing its
//!   arrivals), before the step's puts are issued. Both are per rank and paid on its own
//!   CPU, so they add along a schedule's critical path: a `p`-rank recursive-doubling
//!   allreduce of `log2 p` steps gains `call_us + log2(p) * step_us` when the ranks are in
//!   step. These are the `o` of LogP/LogGP applied per call and per step, as LogGOPSim
//!   charges the CPU overhead of each operation (Hoefler, Schneider, Lumsdaine, HPDC 2010).
//! - **Noise** (`[noise]`): on every node the CPU is taken away for `detour_us` once every
//!   `period_us`, at a phase of its own: node n is busy during
//!   `[phi_n + j * period, phi_n + j * period + detour)` for every integer j, with `phi_n`
//!   drawn uniformly in `[0, period)` from `seed` and n. This is the periodic, unsynchronised
//!   detour pattern with which Hoefler, Schneider and Lumsdaine ("Characterizing the
//!   Influence of System Noise on Large-Scale Applications by Simulation", SC10) show that a
//!   collective waits for the slowest rank and so amplifies noise with scale. CPU work
//!   (the software costs above and a step's local work) that meets a detour is suspended
//!   until it ends ([`Noise::finish`], closed form); data already handed to the network
//!   keeps moving. Work outside priced schedules (the solver's kernels between calls) is
//!   not stretched.
//!
//! Both are off when their sections are absent, and then nothing changes: schedules are
//! priced bit for bit as without the model. No preset sets them: CALIBRATION.md gives no
//! software cost or noise figure for any of the machines (see each preset's comment). The
//! phases depend only on the seed and the node, so a modeled run repeats to the bit.

use crate::fabric::SimTime;

pub use crate::spec::{NoiseConfig, SoftwareConfig};

/// A node's CPU availability under [`NoiseConfig`], in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise {
    period: f64,
    detour: f64,
    seed: u64,
}

/// SplitMix64 (Steele, Lea, Flood, OOPSLA 2014): a well-mixed 64-bit value of `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Noise {
    /// The noise of a validated config.
    pub fn new(c: &NoiseConfig) -> Self {
        Self {
            period: c.period_us * 1e-6,
            detour: c.detour_us * 1e-6,
            seed: c.seed,
        }
    }

    /// Start of node `node`'s detours within a period, in `[0, period)`.
    pub fn phase(&self, node: usize) -> SimTime {
        let u = splitmix64(self.seed ^ splitmix64(node as u64)) >> 11;
        // 53 random bits: u / 2^53 is uniform in [0, 1).
        self.period * (u as f64 / (1u64 << 53) as f64)
    }

    /// When `work` seconds of CPU that become ready at `t` on `node` are done, the CPU being
    /// away during the node's detours (`t` itself when there is no work).
    ///
    /// Closed form: wait out a detour `t` falls into, use what is left of that period, then
    /// every whole period gives `period - detour` of work.
    pub fn finish(&self, node: usize, t: SimTime, work: SimTime) -> SimTime {
        // No work, nothing to suspend (a rank that only waits is not delayed by a detour).
        if work <= 0.0 {
            return t;
        }
        let (period, detour) = (self.period, self.detour);
        let x = t - self.phase(node);
        let mut pos = x - (x / period).floor() * period;
        // Rounding can put x - floor(x / T) * T a hair outside [0, T).
        if !(0.0..period).contains(&pos) {
            pos = 0.0;
        }
        let mut now = t;
        if pos < detour {
            now += detour - pos;
            pos = detour;
        }
        let avail = period - pos;
        if work <= avail {
            return now + work;
        }
        // At the start of the next detour, with `left` still to do.
        let left = work - avail;
        now += avail;
        let usable = period - detour;
        let whole = (left / usable).floor();
        let rest = left - whole * usable;
        if rest <= 0.0 {
            now + whole * period
        } else {
            now + whole * period + detour + rest
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same question answered by walking the detours one by one.
    fn walk(n: &Noise, node: usize, t: f64, work: f64) -> f64 {
        let phi = n.phase(node);
        let mut j = ((t - phi) / n.period).floor() - 1.0;
        let (mut now, mut left) = (t, work);
        if left <= 0.0 {
            return now;
        }
        loop {
            let (a, b) = (phi + j * n.period, phi + j * n.period + n.detour);
            if now < a {
                // Free until a.
                if left <= a - now {
                    return now + left;
                }
                left -= a - now;
                now = a;
            }
            if now < b {
                now = b;
            }
            j += 1.0;
        }
    }

    #[test]
    fn the_closed_form_is_the_walk() {
        let mut s = 7u64;
        let mut u = move || {
            s = splitmix64(s);
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        for seed in 0..4 {
            let n = Noise::new(&NoiseConfig {
                period_us: 100.0 + 900.0 * u(),
                detour_us: 50.0 * u(),
                seed,
            });
            for node in 0..16 {
                for _ in 0..200 {
                    let t = 5e-3 * u();
                    let w = [0.0, 1e-7, 3e-5, 2e-3][(u() * 4.0) as usize] * u();
                    let (a, b) = (n.finish(node, t, w), walk(&n, node, t, w));
                    assert!((a - b).abs() <= 1e-15 + 1e-12 * b, "{a} vs {b}");
                    assert!(a >= t + w, "work cannot finish early");
                }
            }
        }
    }

    #[test]
    fn phases_follow_the_seed_and_spread_over_the_period() {
        let c = |seed| NoiseConfig {
            period_us: 1000.0,
            detour_us: 10.0,
            seed,
        };
        let (a, b) = (Noise::new(&c(1)), Noise::new(&c(2)));
        let pa: Vec<f64> = (0..1000).map(|n| a.phase(n)).collect();
        assert_eq!(pa, (0..1000).map(|n| a.phase(n)).collect::<Vec<_>>());
        assert!((0..1000).any(|n| a.phase(n) != b.phase(n)));
        assert!(pa.iter().all(|&p| (0.0..1e-3).contains(&p)));
        // Uniform: each tenth of the period holds about a tenth of the phases.
        for k in 0..10 {
            let lo = k as f64 * 1e-4;
            let count = pa.iter().filter(|&&p| p >= lo && p < lo + 1e-4).count();
            assert!((60..=140).contains(&count), "decile {k}: {count}");
        }
    }
}
