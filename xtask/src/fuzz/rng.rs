//! SplitMix64, the fuzzer's one random stream: written here (not taken from a crate whose
//! stream may change between versions), so `--seed S` names the same cases forever. It is
//! also the stream `krylov solve --rhs random:SEED` draws from, which lets the residual
//! check rebuild that right-hand side.

/// A SplitMix64 generator (Steele, Lea and Flood 2014).
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose state starts at `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The generator of case `index` of a run seeded with `seed`: every case has a stream
    /// of its own, so a case is the same whichever worker runs it and however many ran before.
    pub(crate) fn for_case(seed: u64, index: u64) -> Self {
        let mut mix = Rng::new(index ^ 0x5851_f42d_4c95_7f2d);
        Rng::new(seed ^ mix.next_u64())
    }

    /// The next 64 uniformly distributed bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform `f64` in `[0, 1)`: the top 53 bits divided by 2^53 (as `krylov` draws it).
    pub(crate) fn next_f64(&mut self) -> f64 {
        const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
        (self.next_u64() >> 11) as f64 * SCALE
    }

    /// A uniform integer in `0..n` (`n > 0`; the modulo bias is irrelevant here).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "Rng::below(0)");
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `1 / n`.
    pub(crate) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One item of a non-empty slice.
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_stream() {
        // The values castack-krylov's SplitMix64 test pins: the rhs `random:SEED` rebuilt
        // by the residual check is the one the binary solved with.
        let mut g = Rng::new(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(g.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn cases_have_distinct_repeatable_streams() {
        let a: Vec<u64> = (0..4).map(|i| Rng::for_case(7, i).next_u64()).collect();
        let b: Vec<u64> = (0..4).map(|i| Rng::for_case(7, i).next_u64()).collect();
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4, "{a:x?}");
        assert_ne!(Rng::for_case(8, 0).next_u64(), a[0]);
    }

    #[test]
    fn below_stays_in_range() {
        let mut g = Rng::new(3);
        let mut seen = [false; 5];
        for _ in 0..200 {
            seen[g.below(5)] = true;
            let f = g.next_f64();
            assert!((0.0..1.0).contains(&f));
        }
        assert!(seen.iter().all(|&s| s));
    }
}
