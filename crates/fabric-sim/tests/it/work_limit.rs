//! The engine's work count (`Engine::rate_updates`) against a hand count, and
//! `Fabric::price_concurrent_within`: the same bits as `price_concurrent` whenever it
//! finishes, a `WorkLimit` error exactly when the run needs more updates than allowed.

use castack_fabric_sim::{
    Endpoint, Engine, Fabric, FabricError, Mechanism, MemoryKind, Placement, PricePut,
    PriceSchedule, PriceStep, Transfer,
};

const DMA: Mechanism = Mechanism::Dma {
    device: 0,
    channel: 0,
};

#[test]
fn rate_updates_count_each_flow_of_each_recomputed_component() {
    // ito: one DMA queue per peer, so three puts from node 0 to nodes 1, 2, 3 start
    // together and share node 0's port: one component of 3 flows at their start. Their
    // sizes differ, so they end one at a time and the component is recomputed with the 2,
    // then the 1 left: 3 + 2 + 1 updates.
    let f = Fabric::preset("ito").unwrap();
    let mut e = Engine::new(&f);
    for (i, bytes) in [1_000_000u64, 2_000_000, 3_000_000].into_iter().enumerate() {
        let t = Transfer::new(Endpoint::host(0), Endpoint::host(i + 1), bytes, DMA);
        e.post(&t, i, 0).unwrap();
    }
    assert_eq!(
        e.rate_updates(),
        0,
        "nothing is rated before the first instant"
    );
    let mut ends = Vec::new();
    while let Some((_, t)) = e.next_completion() {
        ends.push(t);
    }
    assert_eq!(ends.len(), 3);
    assert!(ends[0] < ends[1] && ends[1] < ends[2], "{ends:?}");
    assert_eq!(e.rate_updates(), 6);
}

/// Every rank puts to `fan` others with sizes that differ (so ends do not coincide).
fn irregular_exchange(p: usize, fan: usize) -> PriceSchedule {
    let mut ranks = vec![Vec::new(); p];
    let mut steps = vec![PriceStep::default(); p];
    for r in 0..p {
        for j in 1..=fan {
            let to = (r + j) % p;
            steps[r].puts.push(PricePut {
                to,
                bytes: 64 * (1 + ((r * 7 + j * 13) % 29) as u64),
            });
            steps[to].waits_for.push(r);
        }
    }
    for (r, s) in steps.into_iter().enumerate() {
        ranks[r].push(s);
    }
    PriceSchedule { ranks }
}

#[test]
fn a_work_limit_stops_exactly_past_the_runs_updates_and_changes_no_bit_below_it() {
    let f = Fabric::preset("ito").unwrap();
    let p = 24;
    let sched = irregular_exchange(p, 5);
    let place = Placement::one_per_node(p, MemoryKind::Host);
    let start = vec![0.0; p];
    let calls = [(&sched, &start[..])];
    let full = f.price_concurrent(&calls, &place, Mechanism::Auto).unwrap();
    let within = |limit: u64| f.price_concurrent_within(&calls, &place, Mechanism::Auto, limit);
    let bits = |v: &[Vec<f64>]| -> Vec<u64> { v.iter().flatten().map(|t| t.to_bits()).collect() };
    assert_eq!(bits(&within(u64::MAX).unwrap()), bits(&full));
    match within(0) {
        Err(FabricError::WorkLimit { updates, limit: 0 }) => assert!(updates > 0),
        other => panic!("limit 0: {other:?}"),
    }
    // The least limit that lets the run finish: every limit below it stops, every one at or
    // above it gives the unlimited run's bits.
    let (mut lo, mut hi) = (0u64, 1u64 << 40);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if within(mid).is_ok() {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let need = hi;
    assert!(
        need > (p * 5) as u64,
        "every flow is rated at least once: {need}"
    );
    assert_eq!(bits(&within(need).unwrap()), bits(&full));
    assert_eq!(bits(&within(need + 1).unwrap()), bits(&full));
    match within(need - 1) {
        Err(FabricError::WorkLimit { updates, limit }) => {
            assert_eq!(limit, need - 1);
            assert!(updates > limit && updates <= need, "{updates} vs {need}");
        }
        other => panic!("limit {}: {other:?}", need - 1),
    }
    // The error is one line naming both numbers.
    let msg = within(need - 1).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("limit {}", need - 1)) && !msg.contains('\n'),
        "{msg}"
    );
}
