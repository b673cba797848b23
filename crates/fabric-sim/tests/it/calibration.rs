//! The presets pinned to the point-to-point facts of CALIBRATION.md (put mode, adjacent
//! nodes, ping-pong half round trip), each within 5%. Every time here comes from the pricing
//! engine (`Fabric::price`), not from the closed-form estimate.

use castack_fabric_sim::{Endpoint, Fabric, Mechanism, MemoryKind, Transfer};

use crate::common::within_5pct;

const DMA: Mechanism = Mechanism::Dma {
    device: 0,
    channel: 0,
};

fn ep(node: usize, memory: MemoryKind) -> Endpoint {
    Endpoint { node, memory }
}

/// Time of one transfer alone, priced by the engine.
fn time(f: &Fabric, src: Endpoint, dst: Endpoint, bytes: u64, mech: Mechanism) -> f64 {
    let t = Transfer::new(src, dst, bytes, mech);
    let priced = f.price(&[t]).unwrap()[0];
    let closed = f.estimate(&t).unwrap();
    assert!(
        (priced - closed).abs() <= 1e-12,
        "engine {priced} vs estimate {closed}"
    );
    priced
}

/// Peak bandwidth: a 64 MiB put, where the fixed costs are below 0.01%.
fn peak(f: &Fabric, src: Endpoint, dst: Endpoint, mech: Mechanism) -> f64 {
    let bytes = 64u64 << 20;
    bytes as f64 / time(f, src, dst, bytes, mech)
}

#[test]
fn peach2_adjacent_nodes_are_one_hop() {
    let f = Fabric::preset("peach2").unwrap();
    assert_eq!(f.route(0, 1).hops(), 1);
}

#[test]
fn peach2_pio_8_bytes_is_1_0_us() {
    let f = Fabric::preset("peach2").unwrap();
    let t = time(&f, Endpoint::host(0), Endpoint::host(1), 8, Mechanism::Pio);
    within_5pct("PIO 8 B", t, 1.0e-6);
}

#[test]
fn peach2_dma_8_bytes_is_1_9_us_host_and_gpu() {
    let f = Fabric::preset("peach2").unwrap();
    for m in [MemoryKind::Host, MemoryKind::Gpu] {
        let t = time(&f, ep(0, m), ep(1, m), 8, DMA);
        within_5pct(&format!("DMA 8 B {m:?}"), t, 1.9e-6);
    }
}

#[test]
fn peach2_pio_loses_to_dma_above_128_bytes() {
    let f = Fabric::preset("peach2").unwrap();
    let (a, b) = (Endpoint::host(0), Endpoint::host(1));
    let pio_wins = |m: u64| time(&f, a, b, m, Mechanism::Pio) < time(&f, a, b, m, DMA);
    // The first size at which DMA is at least as fast, within 5% of 128 B.
    let crossover = (1..=4096).find(|&m| !pio_wins(m)).unwrap();
    within_5pct("PIO/DMA crossover", crossover as f64, 128.0);
    assert!((1..crossover).all(pio_wins));
    assert!((crossover..=4096).all(|m| !pio_wins(m)));
    // Auto follows the crossover.
    let pick = |m: u64| {
        f.resolve_mechanism(&Transfer::new(a, b, m, Mechanism::Auto))
            .unwrap()
    };
    assert_eq!(pick(8), Mechanism::Pio);
    assert_eq!(pick(256), DMA);
}

#[test]
fn peach2_dma_peaks_2_8_gpu_and_3_5_host() {
    let f = Fabric::preset("peach2").unwrap();
    within_5pct(
        "DMA peak GPU-GPU",
        peak(&f, Endpoint::gpu(0), Endpoint::gpu(1), DMA),
        2.8e9,
    );
    within_5pct(
        "DMA peak host-host",
        peak(&f, Endpoint::host(0), Endpoint::host(1), DMA),
        3.5e9,
    );
}

#[test]
fn ib_gpu_8_bytes_2_4_us_and_peak_4_4() {
    let f = Fabric::preset("ib-qdr").unwrap();
    let (a, b) = (Endpoint::gpu(0), Endpoint::gpu(1));
    within_5pct("IB GPU 8 B", time(&f, a, b, 8, DMA), 2.4e-6);
    within_5pct("IB GPU peak", peak(&f, a, b, DMA), 4.4e9);
}

/// "GPU-to-GPU ping-pong, TCA vs this IB stack: TCA has the higher bandwidth up to 64 KB; IB
/// overtakes from 128 KB": adjacent nodes, every power of two from 1 B to 64 MiB, the
/// protocol limits (16 KB, 512 KB) and the sizes either side of them.
#[test]
fn ib_gpu_overtakes_tca_between_64_and_128_kb() {
    let tca = Fabric::preset("peach2").unwrap();
    let ib = Fabric::preset("ib-qdr").unwrap();
    let (a, b) = (Endpoint::gpu(0), Endpoint::gpu(1));
    let mut sizes: Vec<u64> = (0..=26).map(|e| 1u64 << e).collect();
    for limit in [16u64 << 10, 64 << 10, 128 << 10, 512 << 10] {
        sizes.extend([limit - 1, limit + 1, limit + limit / 2]);
    }
    for m in sizes {
        let (t, i) = (time(&tca, a, b, m, DMA), time(&ib, a, b, m, DMA));
        if m <= 64 << 10 {
            assert!(t < i, "{m} B: TCA {t:e} s should beat IB {i:e} s");
        } else if m >= 128 << 10 {
            assert!(i < t, "{m} B: IB {i:e} s should beat TCA {t:e} s");
        }
    }
}

/// "CPU-to-CPU latencies of the two are about equal at small sizes" (and TCA's DMA, not its
/// PIO, is the one meant: the IB figure is "about the same as TCA DMA").
#[test]
fn ib_and_tca_host_latencies_agree_at_small_sizes() {
    let tca = Fabric::preset("peach2").unwrap();
    let ib = Fabric::preset("ib-qdr").unwrap();
    let (a, b) = (Endpoint::host(0), Endpoint::host(1));
    for m in [8, 64, 128] {
        within_5pct(
            &format!("IB vs TCA DMA host {m} B"),
            time(&ib, a, b, m, DMA),
            time(&tca, a, b, m, DMA),
        );
    }
}

#[test]
fn ib_host_latency_like_tca_dma_and_peak_6_0() {
    let f = Fabric::preset("ib-qdr").unwrap();
    let (a, b) = (Endpoint::host(0), Endpoint::host(1));
    within_5pct("IB host 8 B", time(&f, a, b, 8, DMA), 1.9e-6);
    within_5pct("IB host peak", peak(&f, a, b, DMA), 6.0e9);
}

#[test]
fn tofu_message_costs_1_us_and_5_gbs_per_device() {
    let f = Fabric::preset("tofu-fx10").unwrap();
    let (a, b) = (Endpoint::host(0), Endpoint::host(1));
    within_5pct("Tofu 8 B", time(&f, a, b, 8, DMA), 1.0e-6);
    within_5pct("Tofu peak", peak(&f, a, b, DMA), 5.0e9);
}

#[test]
fn tofu_injection_is_capped_at_15_gbs() {
    // Four devices sending to four different neighbours at once: 4 x 5 GB/s of devices and
    // links, but "the CPU-side interface limits a node's total injection to about 15 GB/s".
    let f = Fabric::preset("tofu-fx10").unwrap();
    let bytes = 64u64 << 20;
    let src = 1 + 16 + 256; // (1, 1, 1)
    let dsts = [src + 1, src - 1, src + 16, src - 16];
    let ts: Vec<Transfer> = dsts
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            Transfer::new(
                Endpoint::host(src),
                Endpoint::host(n),
                bytes,
                Mechanism::Dma {
                    device: d as u32,
                    channel: 0,
                },
            )
        })
        .collect();
    let done = f.price(&ts).unwrap();
    let last = done.iter().cloned().fold(0.0, f64::max);
    within_5pct("Tofu node injection", 4.0 * bytes as f64 / last, 15.0e9);
}
