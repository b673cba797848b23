//! The engine's results pinned to the bit: finish times of contended schedules, hashed as
//! their `f64::to_bits`, as computed before the heap filling (`Engine::fill_heap`) came in. A
//! change of any modeled bit (order of freezes, rounding of shares) changes a hash. They
//! were computed re-rating whole components at every instant, so the pinned runs use
//! [`Fabric::with_whole_recomputation`] (the default engine's partial re-rating at instants
//! of ends gives the same rates up to rounding: `reference.rs`).

use castack_fabric_sim::{
    Fabric, Mechanism, MemoryKind, Placement, PricePut, PriceSchedule, PriceStep,
};

/// FNV-1a over the bits of every finish time.
fn hash(v: &[f64]) -> u64 {
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for t in v {
        x ^= t.to_bits();
        x = x.wrapping_mul(0x0100_0000_01b3);
    }
    x
}

/// `steps` steps in which every rank puts to `fan` random ranks (xorshift from `seed`).
fn random_schedule(p: usize, bytes: u64, seed: u64, fan: usize, steps: usize) -> PriceSchedule {
    let mut s = seed;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut ranks: Vec<Vec<PriceStep>> = vec![Vec::new(); p];
    for _ in 0..steps {
        let mut puts: Vec<Vec<PricePut>> = vec![Vec::new(); p];
        let mut waits: Vec<Vec<usize>> = vec![Vec::new(); p];
        for (r, mine) in puts.iter_mut().enumerate() {
            for _ in 0..fan {
                let to = (rnd() as usize) % p;
                if to == r {
                    continue;
                }
                let b = bytes + rnd() % (bytes + 1);
                mine.push(PricePut { to, bytes: b });
                waits[to].push(r);
            }
        }
        for (r, steps) in ranks.iter_mut().enumerate() {
            steps.push(PriceStep {
                puts: std::mem::take(&mut puts[r]),
                waits_for: std::mem::take(&mut waits[r]),
                ..Default::default()
            });
        }
    }
    PriceSchedule { ranks }
}

#[test]
fn contended_schedules_are_pinned_to_the_bit() {
    let cases: [(&str, u64, u64, usize, usize, u64); 6] = [
        ("peach2", 1, 8, 1, 3, 0x2cb8_f6cc_7ec0_a5ce),
        ("peach2", 7, 65_536, 3, 2, 0x1df8_0911_3c6b_1f79),
        ("peach2", 9, 1 << 20, 2, 2, 0x6528_a9a9_a8c2_a881),
        ("ib-qdr", 1, 8, 1, 3, 0x4f4f_87fd_5b05_51f4),
        ("ib-qdr", 7, 65_536, 3, 2, 0x7732_1917_f12c_af88),
        ("ib-qdr", 9, 1 << 20, 2, 2, 0x15ad_ff35_8d47_3086),
    ];
    for (name, seed, bytes, fan, steps, want) in cases {
        let fabric = Fabric::preset(name).unwrap().with_whole_recomputation();
        let p = fabric.nodes();
        let placement = Placement::one_per_node(p, MemoryKind::Host);
        let sched = random_schedule(p, bytes, seed, fan, steps);
        let fin = fabric
            .price_schedule(&sched, &placement, &vec![0.0; p], Mechanism::Auto)
            .unwrap();
        assert_eq!(hash(&fin), want, "{name} seed {seed} bytes {bytes}");
    }
}

/// Engines reuse the buffers engines dropped on their fabric left (`Engine::new`): a run
/// after other runs, one of them dropped half-way with events, queues and flows in data
/// phase still pending, prices to the same bits as on a fabric that never ran anything.
#[test]
fn a_run_on_reused_buffers_prices_the_bits_of_a_fresh_fabric() {
    use castack_fabric_sim::{Endpoint, Engine, Transfer};
    for name in ["peach2", "ib-qdr"] {
        let fabric = Fabric::preset(name).unwrap();
        let p = fabric.nodes();
        let placement = Placement::one_per_node(p, MemoryKind::Host);
        let start = vec![0.0; p];
        let big = random_schedule(p, 65_536, 3, 3, 3);
        let small = random_schedule(p, 8, 5, 1, 2);
        let price = |f: &Fabric, s: &PriceSchedule| {
            f.price_schedule(s, &placement, &start, Mechanism::Auto)
                .unwrap()
        };
        // References, each on a fabric of its own (a clone keeps no buffers).
        let want_small = hash(&price(&fabric.clone(), &small));
        let want_big = hash(&price(&fabric.clone(), &big));
        // A run left half-way: one small put completes while large puts from every node
        // are in their data phase, sharing links and memories (peach2: 15 of 32 flows, 15
        // more waiting on busy DMA queues; ib-qdr: 127 of 128, and an end made stale by a
        // re-rating still pending).
        {
            let mut e = Engine::new(&fabric);
            for i in 0..2 * p {
                let bytes = if i == 0 { 1 << 10 } else { 1 << 24 };
                let t = Transfer::new(
                    Endpoint::host(i % p),
                    Endpoint::host((i + 1 + i / p) % p),
                    bytes,
                    Mechanism::Auto,
                );
                e.post(&t, i, i as u64).unwrap();
            }
            let (first, _) = e.next_completion().unwrap();
            assert_eq!(first, 0, "{name}: the small put completes first");
        }
        assert_eq!(
            hash(&price(&fabric, &big)),
            want_big,
            "{name}: big after a dropped run"
        );
        assert_eq!(
            hash(&price(&fabric, &small)),
            want_small,
            "{name}: small after big"
        );
        assert_eq!(
            hash(&price(&fabric, &big)),
            want_big,
            "{name}: big after small"
        );
    }
}
