//! Local work and landing memory in schedule pricing: a step's local work delays the rank's
//! next step by exactly its priced time, and an arrival can land in another memory than the
//! placement's.

use castack_fabric_sim::{
    ComputeCost, Endpoint, Fabric, LocalWork, Mechanism, MemoryKind, Placement, PricePut,
    PriceSchedule, PriceStep, Transfer,
};

fn put(to: usize, bytes: u64) -> PricePut {
    PricePut { to, bytes }
}

fn step(puts: Vec<PricePut>, waits_for: Vec<usize>) -> PriceStep {
    PriceStep {
        puts,
        waits_for,
        ..Default::default()
    }
}

const DMA: Mechanism = Mechanism::Dma {
    device: 0,
    channel: 0,
};

fn kernel() -> LocalWork {
    LocalWork::Compute {
        memory: MemoryKind::Gpu,
        cost: ComputeCost {
            bytes: 1 << 20,
            flops: 1 << 17,
            launches: 1,
            ..ComputeCost::default()
        },
    }
}

#[test]
fn local_work_after_a_gather_adds_its_priced_time() {
    let f = Fabric::preset("peach2").unwrap();
    let place = Placement::one_per_node(2, MemoryKind::Gpu);
    let mut root = step(vec![], vec![1]);
    root.local = vec![kernel()];
    let sched = PriceSchedule {
        ranks: vec![vec![root], vec![step(vec![put(0, 4096)], vec![])]],
    };
    let done = f.price_schedule(&sched, &place, &[0.0, 0.0], DMA).unwrap();
    let alone = f
        .estimate(&Transfer::new(
            Endpoint::gpu(1),
            Endpoint::gpu(0),
            4096,
            DMA,
        ))
        .unwrap();
    let kernel_s = f.local_time(0, &kernel()).unwrap();
    // 14 us launch + 1 MB at 250 GB/s.
    assert!((kernel_s - (14e-6 + (1 << 20) as f64 / 250e9)).abs() < 1e-12);
    assert_eq!(done[1], alone);
    assert!((done[0] - (alone + kernel_s)).abs() < 1e-15, "{done:?}");
}

#[test]
fn local_work_delays_the_next_steps_puts_even_when_arrivals_came_early() {
    let f = Fabric::preset("peach2").unwrap();
    let place = Placement::one_per_node(3, MemoryKind::Host);
    let work = LocalWork::Copy {
        from: MemoryKind::Host,
        to: MemoryKind::Gpu,
        bytes: 1 << 16,
    };
    let copy_s = f.local_time(0, &work).unwrap();
    let local_dma = f
        .estimate(&Transfer::new(
            Endpoint::host(0),
            Endpoint::gpu(0),
            1 << 16,
            DMA,
        ))
        .unwrap();
    assert_eq!(copy_s, local_dma);
    // Rank 0: local copy in step 0, then waits for rank 2 (whose 8 B lands long before the
    // copy ends) and puts to rank 1.
    let mut first = step(vec![], vec![]);
    first.local = vec![work];
    let sched = PriceSchedule {
        ranks: vec![
            vec![first, step(vec![], vec![2]), step(vec![put(1, 8)], vec![])],
            vec![step(vec![], vec![0])],
            vec![step(vec![put(0, 8)], vec![])],
        ],
    };
    let done = f.price_schedule(&sched, &place, &[0.0; 3], DMA).unwrap();
    let hop = |a, b| {
        f.estimate(&Transfer::new(Endpoint::host(a), Endpoint::host(b), 8, DMA))
            .unwrap()
    };
    assert!(hop(2, 0) < copy_s);
    assert!((done[0] - (copy_s + hop(0, 1))).abs() < 1e-15, "{done:?}");
    assert_eq!(done[1], done[0]);
}

#[test]
fn arrival_memory_overrides_where_a_put_lands() {
    // On ib-qdr a message touching GPU memory takes MVAPICH2-GDR's protocol costs.
    let f = Fabric::preset("ib-qdr").unwrap();
    let place = Placement::one_per_node(2, MemoryKind::Host);
    let mut root = step(vec![], vec![1]);
    root.arrival_memory = Some(MemoryKind::Gpu);
    let sched = PriceSchedule {
        ranks: vec![vec![root], vec![step(vec![put(0, 8)], vec![])]],
    };
    let done = f.price_schedule(&sched, &place, &[0.0; 2], DMA).unwrap();
    let to_gpu = Transfer::new(Endpoint::host(1), Endpoint::gpu(0), 8, DMA);
    let to_host = Transfer::new(Endpoint::host(1), Endpoint::host(0), 8, DMA);
    assert_eq!(done[0], f.estimate(&to_gpu).unwrap());
    assert_ne!(
        f.estimate(&to_host).unwrap(),
        f.estimate(&to_gpu).unwrap(),
        "the test needs memories that price differently"
    );
}

#[test]
fn local_work_the_fabric_cannot_price_is_an_error() {
    let f = Fabric::preset("tofu-fx10").unwrap();
    let place = Placement::one_per_node(1, MemoryKind::Host);
    let mut s = step(vec![], vec![]);
    s.local = vec![kernel()];
    let sched = PriceSchedule {
        ranks: vec![vec![s]],
    };
    assert!(f.price_schedule(&sched, &place, &[0.0], DMA).is_err());
}
