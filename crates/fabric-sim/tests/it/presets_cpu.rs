//! The CA-CG study machines' presets (`fx100`, `ito`, `ofp`): they load, validate, hold
//! P = 4096 ranks one per node, carry the node compute of CALIBRATION.md "Newer CPU
//! clusters" (STREAM triad and HPL per socket), and price point-to-point messages at the
//! documented latencies and 100 Gb/s links.

use castack_fabric_sim::{
    ComputeCost, Endpoint, Fabric, FabricConfig, Mechanism, MemoryKind, Transfer, PRESETS,
};

const DMA: Mechanism = Mechanism::Dma {
    device: 0,
    channel: 0,
};

fn close(what: &str, got: f64, want: f64) {
    let rel = (got - want).abs() / want;
    assert!(rel <= 0.02, "{what}: model {got:.4e}, want {want:.4e}");
}

fn one(f: &Fabric, a: usize, b: usize, bytes: u64) -> f64 {
    let t = Transfer::new(Endpoint::host(a), Endpoint::host(b), bytes, DMA);
    f.price(&[t]).unwrap()[0]
}

#[test]
fn cpu_cluster_presets_are_registered_and_validate() {
    for name in ["fx100", "ito", "ofp"] {
        assert!(PRESETS.iter().any(|(n, _)| *n == name), "{name} missing");
        let cfg = FabricConfig::preset(name).unwrap();
        assert_eq!(cfg.name, name);
        let f = Fabric::new(cfg).unwrap();
        assert!(f.nodes() >= 4096, "{name}: {} nodes", f.nodes());
        assert!(
            f.device_model(MemoryKind::Gpu).is_none(),
            "{name}: CPU only"
        );
        assert!(f.config().pio.is_none(), "{name}: no PIO");
    }
}

#[test]
fn node_compute_is_stream_and_hpl_per_socket() {
    // (preset, STREAM triad GB/s, HPL GFlop/s) from CALIBRATION.md "Newer CPU clusters".
    for (name, stream, hpl) in [
        ("fx100", 105.0, 1000.0),
        ("ito", 95.0, 1100.0),
        ("ofp", 495.0, 1600.0),
    ] {
        let f = Fabric::preset(name).unwrap();
        let bw = ComputeCost {
            bytes: 1_000_000_000,
            flops: 0,
            launches: 1,
            ..ComputeCost::default()
        };
        let fl = ComputeCost {
            bytes: 0,
            flops: 1_000_000_000_000,
            launches: 0,
            ..ComputeCost::default()
        };
        close(
            name,
            f.compute_time(MemoryKind::Host, bw).unwrap(),
            1.0 / stream,
        );
        close(
            name,
            f.compute_time(MemoryKind::Host, fl).unwrap(),
            1000.0 / hpl,
        );
    }
}

#[test]
fn small_message_latency_and_link_peak() {
    // (preset, adjacent-node 8 B put latency as documented in the TOML, peak GB/s).
    for (name, latency, peak) in [
        ("fx100", 0.9e-6, 12.5e9),
        ("ito", 1.0e-6, 12.5e9),
        ("ofp", 1.6e-6, 12.5e9),
    ] {
        let f = Fabric::preset(name).unwrap();
        close(name, one(&f, 0, 1, 8), latency);
        let bytes = 64u64 << 20;
        close(name, bytes as f64 / one(&f, 0, 1, bytes), peak);
    }
}

#[test]
fn far_nodes_cost_more_hops_than_near_ones() {
    for name in ["fx100", "ito", "ofp"] {
        let f = Fabric::preset(name).unwrap();
        assert!(one(&f, 0, 4095, 8) >= one(&f, 0, 1, 8), "{name}");
        assert!(one(&f, 0, 2048, 8) > one(&f, 0, 1, 8), "{name}");
    }
}
