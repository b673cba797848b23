//! `Fabric::price_concurrent`: several calls over the same ranks in one engine run. The
//! references are independent entry points: `Fabric::price` of the same transfers together
//! (the engine without schedules), `Fabric::price_schedule` of each call alone where the
//! calls cannot interfere, and the recorded reference cases of `tests/it/reference.rs` (which
//! pin `price_schedule`, now one call of `price_concurrent`).

use castack_fabric_sim::{
    Endpoint, Fabric, FabricError, Mechanism, MemoryKind, Placement, PricePut, PriceSchedule,
    PriceStep, Transfer,
};

const DMA: Mechanism = Mechanism::Dma {
    device: 0,
    channel: 0,
};

/// One put of `bytes` from rank `from` to rank `to` of `p`; the other ranks do nothing.
fn stream(p: usize, from: usize, to: usize, bytes: u64) -> PriceSchedule {
    let mut ranks = vec![Vec::new(); p];
    ranks[from].push(PriceStep {
        puts: vec![PricePut { to, bytes }],
        ..Default::default()
    });
    ranks[to].push(PriceStep {
        waits_for: vec![from],
        ..Default::default()
    });
    PriceSchedule { ranks }
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// A random bulk-synchronous schedule (every round's puts are waited for in that round).
fn random_schedule(rng: &mut Rng, p: usize, rounds: usize) -> PriceSchedule {
    let sizes = [0u64, 8, 4096, 65_536, 1 << 20];
    let mut ranks = vec![Vec::new(); p];
    for _ in 0..rounds {
        let mut steps = vec![PriceStep::default(); p];
        for r in 0..p {
            for _ in 0..rng.below(3) {
                let to = rng.below(p);
                steps[r].puts.push(PricePut {
                    to,
                    bytes: sizes[rng.below(sizes.len())],
                });
                steps[to].waits_for.push(r);
            }
        }
        for (r, s) in steps.into_iter().enumerate() {
            ranks[r].push(s);
        }
    }
    PriceSchedule { ranks }
}

#[test]
fn two_streams_over_one_link_are_the_engine_pricing_both_transfers() {
    // Tofu, 8 x 1 ring in x: 0->2 and 1->2 both cross link 1->2 and share it. Call X streams
    // 0->2 from t=0, call Y 1->2 from t=3 us: together they are exactly the two transfers
    // priced together by the engine, and each is later than alone.
    let f = Fabric::preset("tofu-fx10").unwrap();
    let p = 3;
    let bytes = 10_000_000u64;
    let place = Placement::one_per_node(p, MemoryKind::Host);
    let (x, y) = (stream(p, 0, 2, bytes), stream(p, 1, 2, bytes));
    let (sx, sy) = ([0.0; 3], [0.0, 3e-6, 0.0]);
    let joint = f
        .price_concurrent(&[(&x, &sx), (&y, &sy)], &place, DMA)
        .unwrap();
    let mut a = Transfer::new(Endpoint::host(0), Endpoint::host(2), bytes, DMA);
    let mut b = Transfer::new(Endpoint::host(1), Endpoint::host(2), bytes, DMA);
    a.release = 0.0;
    b.release = 3e-6;
    let both = f.price(&[a, b]).unwrap();
    assert_eq!(joint[0][0], both[0], "X's sender");
    assert_eq!(joint[0][2], both[0], "X's receiver");
    assert_eq!(joint[1][1], both[1], "Y's sender");
    assert_eq!(joint[1][2], both[1], "Y's receiver");
    // Ranks without steps in a call finish when they start it.
    assert_eq!((joint[0][1], joint[1][0]), (0.0, 0.0));
    let alone_x = f.price_schedule(&x, &place, &sx, DMA).unwrap();
    let alone_y = f.price_schedule(&y, &place, &sy, DMA).unwrap();
    assert_eq!(alone_x[2], f.price(&[a]).unwrap()[0]);
    assert!(joint[0][2] > alone_x[2] * 1.3 && joint[1][2] > alone_y[2] * 1.3);
}

#[test]
fn calls_on_disjoint_links_price_as_alone() {
    // Tofu: 0->1 and 16->17 share no link, device or memory: each call is priced as alone,
    // bit for bit, in either order.
    let f = Fabric::preset("tofu-fx10").unwrap();
    let place = Placement {
        nodes: vec![0, 1, 16, 17],
        memory: MemoryKind::Host,
    };
    let (x, y) = (stream(4, 0, 1, 4_000_000), stream(4, 2, 3, 7_000_000));
    let (sx, sy) = ([0.0, 1e-6, 0.0, 0.0], [0.0, 0.0, 2e-6, 0.5e-6]);
    let alone = [
        f.price_schedule(&x, &place, &sx, DMA).unwrap(),
        f.price_schedule(&y, &place, &sy, DMA).unwrap(),
    ];
    let xy = f
        .price_concurrent(&[(&x, &sx), (&y, &sy)], &place, DMA)
        .unwrap();
    let yx = f
        .price_concurrent(&[(&y, &sy), (&x, &sx)], &place, DMA)
        .unwrap();
    assert_eq!(xy, alone.to_vec());
    assert_eq!(yx, vec![alone[1].clone(), alone[0].clone()]);
}

#[test]
fn an_empty_call_changes_nothing_and_one_call_is_price_schedule() {
    let f = Fabric::preset("peach2").unwrap();
    let mut rng = Rng(7);
    for p in [2usize, 5, 8] {
        let sched = random_schedule(&mut rng, p, 4);
        let empty = PriceSchedule {
            ranks: vec![Vec::new(); p],
        };
        let place = Placement::one_per_node(p, MemoryKind::Host);
        let start: Vec<f64> = (0..p).map(|_| rng.below(4) as f64 * 0.5e-6).collect();
        let other: Vec<f64> = (0..p).map(|_| rng.below(4) as f64 * 0.3e-6).collect();
        let alone = f
            .price_schedule(&sched, &place, &start, Mechanism::Auto)
            .unwrap();
        let one = f
            .price_concurrent(&[(&sched, &start)], &place, Mechanism::Auto)
            .unwrap();
        assert_eq!(one, vec![alone.clone()]);
        let two = f
            .price_concurrent(
                &[(&empty, &other), (&sched, &start)],
                &place,
                Mechanism::Auto,
            )
            .unwrap();
        assert_eq!(two, vec![other.clone(), alone.clone()], "p={p}");
        // The same call twice at once: each is at least as late as alone, and the joint run
        // repeats to the bit.
        let twice = f
            .price_concurrent(
                &[(&sched, &start), (&sched, &start)],
                &place,
                Mechanism::Auto,
            )
            .unwrap();
        for call in &twice {
            assert!(call.iter().zip(&alone).all(|(j, a)| j >= a), "p={p}");
        }
        let again = f
            .price_concurrent(
                &[(&sched, &start), (&sched, &start)],
                &place,
                Mechanism::Auto,
            )
            .unwrap();
        assert_eq!(twice, again);
    }
}

#[test]
fn errors_name_the_call() {
    let f = Fabric::preset("peach2").unwrap();
    let place = Placement::one_per_node(2, MemoryKind::Host);
    let good = stream(2, 0, 1, 8);
    let mut bad = stream(2, 0, 1, 8);
    bad.ranks[1].clear();
    let zero = [0.0; 2];
    let err = f
        .price_concurrent(&[(&good, &zero), (&bad, &zero)], &place, Mechanism::Auto)
        .unwrap_err();
    assert!(
        matches!(&err, FabricError::Schedule(m) if m.starts_with("call 1: rank 0 step 0 puts to rank 1")),
        "{err}"
    );
    // Alone, the same error without the call's name (as price_schedule always said it).
    let err = f
        .price_schedule(&bad, &place, &zero, Mechanism::Auto)
        .unwrap_err();
    assert!(
        matches!(&err, FabricError::Schedule(m) if m.starts_with("rank 0 step 0 puts to rank 1")),
        "{err}"
    );
    let short = [0.0; 1];
    assert!(f
        .price_concurrent(&[(&good, &zero), (&good, &short)], &place, Mechanism::Auto)
        .is_err());
}

#[test]
fn each_call_starts_its_dma_round_robin_at_its_own_device() {
    // fx100: 4 DMA devices of one channel, no chaining. Two calls each put 1 MB from rank 0
    // to rank 1 at t=0: call 0's put on device 0 (as alone), call 1's on device 1, so they
    // are the engine's pricing of those two transfers together (sharing the link, not one
    // descriptor queue).
    let f = Fabric::preset("fx100").unwrap();
    let place = Placement::one_per_node(2, MemoryKind::Host);
    let x = stream(2, 0, 1, 1 << 20);
    let zero = [0.0; 2];
    let joint = f
        .price_concurrent(&[(&x, &zero), (&x, &zero)], &place, DMA)
        .unwrap();
    let on = |device| {
        Transfer::new(
            Endpoint::host(0),
            Endpoint::host(1),
            1 << 20,
            Mechanism::Dma { device, channel: 0 },
        )
    };
    let both = f.price(&[on(0), on(1)]).unwrap();
    assert_eq!((joint[0][1], joint[1][1]), (both[0], both[1]));
    let queued = f.price(&[on(0), on(0)]).unwrap();
    assert_ne!(both, queued, "one queue would serialize the descriptors");
}
