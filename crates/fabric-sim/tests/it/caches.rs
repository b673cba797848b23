//! The device model's cache levels: a kernel streams from the smallest level holding its
//! working set, SpMV bytes at the level's SpMV bandwidth; without levels or a working set,
//! memory bandwidth, bit for bit as before levels existed; validation of the tables.

use castack_fabric_sim::{CacheLevel, ComputeCost, DeviceModel, FabricConfig, FabricError};

fn level(name: &str, size: u64, gbs: f64, spmv: Option<f64>) -> CacheLevel {
    CacheLevel {
        name: name.into(),
        size_bytes: size,
        bandwidth_gbs: gbs,
        spmv_bandwidth_gbs: spmv,
    }
}

fn model() -> DeviceModel {
    DeviceModel {
        mem_bandwidth_gbs: 10.0,
        gflops: 1e6,
        launch_us: 0.0,
        host_link_gbs: None,
        host_link_us: None,
        spmv_bandwidth_gbs: Some(5.0),
        add_latency_ns: None,
        caches: vec![
            level("L2", 1 << 20, 80.0, Some(20.0)),
            level("L3", 32 << 20, 40.0, None),
        ],
    }
}

fn work(bytes: u64, spmv_bytes: u64, working_set: u64) -> ComputeCost {
    ComputeCost {
        bytes,
        spmv_bytes,
        working_set,
        ..ComputeCost::default()
    }
}

#[test]
fn the_smallest_level_holding_the_working_set_prices_the_bytes() {
    let m = model();
    let gb = 1e9 as u64;
    // (working set, streaming GB/s, SpMV GB/s, level)
    let cases = [
        (1, 80.0, 20.0, "L2"),
        (1 << 20, 80.0, 20.0, "L2"),
        ((1 << 20) + 1, 40.0, 40.0, "L3"),
        (32 << 20, 40.0, 40.0, "L3"),
        ((32 << 20) + 1, 10.0, 5.0, "memory"),
        (0, 10.0, 5.0, "memory"),
    ];
    for (ws, stream, spmv, name) in cases {
        assert_eq!(m.bandwidths(ws), (stream, spmv, name), "working set {ws}");
        // 1 GB of streaming bytes and 1 GB of SpMV bytes.
        let t = m.time(work(2 * gb, gb, ws));
        let want = 1.0 / stream + 1.0 / spmv;
        assert!((t - want).abs() <= 1e-12 * want, "ws {ws}: {t} vs {want}");
    }
}

#[test]
fn without_levels_or_spmv_figures_the_price_is_bytes_over_memory_bandwidth() {
    let plain = DeviceModel {
        mem_bandwidth_gbs: 95.0,
        gflops: 1100.0,
        launch_us: 0.0,
        host_link_gbs: None,
        host_link_us: None,
        spmv_bandwidth_gbs: None,
        add_latency_ns: None,
        caches: Vec::new(),
    };
    for (bytes, spmv, ws) in [(12345, 0, 0), (987_654_321, 5_000_000, 1 << 20), (7, 7, 3)] {
        let t = plain.time(work(bytes, spmv, ws));
        // The very expression of the model before cache levels: same bits.
        assert_eq!(t.to_bits(), (bytes as f64 / (95.0 * 1e9)).to_bits());
    }
    // A level without an SpMV figure prices SpMV bytes like the others, in one division.
    let mut one = plain.clone();
    one.caches = vec![level("L2", 1 << 30, 400.0, None)];
    let t = one.time(work(1000, 600, 10));
    assert_eq!(t.to_bits(), (1000f64 / (400.0 * 1e9)).to_bits());
}

#[test]
fn the_roofline_still_takes_the_slower_of_memory_and_arithmetic() {
    let mut m = model();
    m.gflops = 1.0;
    // In L2 at 80 GB/s, 8e9 bytes take 0.1 s; 1e9 flops at 1 GF/s take 1 s.
    let w = ComputeCost {
        bytes: 8_000_000_000,
        flops: 1_000_000_000,
        working_set: 1000,
        ..ComputeCost::default()
    };
    assert!((m.time(w) - 1.0).abs() < 1e-12);
}

#[test]
fn fixed_order_sums_are_bound_by_the_addition_latency() {
    let mut m = model();
    let w = |bytes: u64, chain: u64| ComputeCost {
        bytes,
        chain,
        working_set: 1000,
        ..ComputeCost::default()
    };
    // Without a latency the chain is free.
    assert_eq!(
        m.time(w(8000, 1_000_000)).to_bits(),
        m.time(w(8000, 0)).to_bits()
    );
    m.add_latency_ns = Some(1.5);
    // 8000 bytes at 80 GB/s: 0.1 us; 1e6 dependent adds at 1.5 ns: 1.5 ms.
    assert!((m.time(w(8000, 1_000_000)) - 1.5e-3).abs() < 1e-15);
    // A short chain under the bytes' time changes nothing.
    assert_eq!(m.time(w(8_000_000, 10)), m.time(w(8_000_000, 0)));
    // Launches add to the bound.
    m.launch_us = 2.0;
    let mut one = w(8000, 1_000_000);
    one.launches = 1;
    assert!((m.time(one) - (1.5e-3 + 2e-6)).abs() < 1e-15);
}

const BASE: &str = r#"
name = "t"
description = "cache table checks"
forward_us = 0.0
[[ports]]
name = "p"
bandwidth_gbs = 10.0
latency_us = 0.0
[topology]
kind = "crossbar"
nodes = 2
port = "p"
[memory.host]
read_gbs = 10.0
write_gbs = 10.0
[dma]
devices = 1
channels = 1
chaining = false
start_us = 1.0
descriptor_us = 0.0
descriptor_fetch_us = 0.0
[compute.host]
mem_bandwidth_gbs = 10.0
gflops = 100.0
launch_us = 0.0
"#;

fn parse(extra: &str) -> Result<FabricConfig, FabricError> {
    FabricConfig::from_toml_str(&format!("{BASE}{extra}"))
}

#[test]
fn cache_tables_parse_and_validate_with_one_line_errors() {
    let ok = parse(
        "spmv_bandwidth_gbs = 6.0\n[[compute.host.caches]]\nname = \"L2\"\nsize_bytes = 1048576\nbandwidth_gbs = 60.0\nspmv_bandwidth_gbs = 20.0\n[[compute.host.caches]]\nname = \"L3\"\nsize_bytes = 33554432\nbandwidth_gbs = 30.0\n",
    )
    .unwrap();
    let host = &ok.compute.as_ref().unwrap().host;
    assert_eq!(host.spmv_bandwidth_gbs, Some(6.0));
    assert_eq!(
        host.caches,
        vec![
            level("L2", 1 << 20, 60.0, Some(20.0)),
            level("L3", 32 << 20, 30.0, None)
        ]
    );
    // A table written back parses to the same config.
    let text = toml::to_string(&ok).unwrap();
    assert_eq!(FabricConfig::from_toml_str(&text).unwrap(), ok);

    let bad = [
        (
            "[[compute.host.caches]]\nname = \"L3\"\nsize_bytes = 2000\nbandwidth_gbs = 30.0\n[[compute.host.caches]]\nname = \"L2\"\nsize_bytes = 1000\nbandwidth_gbs = 60.0\n",
            "caches[1].size_bytes",
        ),
        (
            "[[compute.host.caches]]\nname = \"L2\"\nsize_bytes = 0\nbandwidth_gbs = 60.0\n",
            "caches[0].size_bytes",
        ),
        (
            "[[compute.host.caches]]\nname = \"L2\"\nsize_bytes = 10\nbandwidth_gbs = -1.0\n",
            "caches[0].bandwidth_gbs",
        ),
        (
            "[[compute.host.caches]]\nname = \"L2\"\nsize_bytes = 10\nbandwidth_gbs = 1.0\nspmv_bandwidth_gbs = nan\n",
            "caches[0].spmv_bandwidth_gbs",
        ),
        ("spmv_bandwidth_gbs = 0.0\n", "spmv_bandwidth_gbs"),
        ("add_latency_ns = -1.0\n", "add_latency_ns"),
        (
            "[[compute.host.caches]]\nname = \"L2\"\nsize_bytes = 10\nbandwidth_gbs = 1.0\nlatency_ns = 4\n",
            "latency_ns",
        ),
    ];
    for (extra, field) in bad {
        let e = parse(extra).unwrap_err().to_string();
        assert!(e.contains(field), "{extra}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn ito_prices_a_working_set_by_the_level_that_holds_it() {
    let cfg = FabricConfig::preset("ito").unwrap();
    let host = &cfg.compute.as_ref().unwrap().host;
    // CALIBRATION.md sizes: 18 x 1 MB L2, + 24.75 MB (18 x 1.375 MiB) L3, non-inclusive.
    let sizes: Vec<u64> = host.caches.iter().map(|c| c.size_bytes).collect();
    assert_eq!(sizes, vec![18 << 20, (18 << 20) + 18 * (1375 << 20) / 1000]);
    assert_eq!(host.bandwidths(2 << 20).2, "L2");
    assert_eq!(host.bandwidths(30 << 20).2, "L3");
    assert_eq!(host.bandwidths(1 << 30), (95.0, 95.0, "memory"));
    // The study's other machines carry no levels (no published bandwidth).
    for name in ["fx100", "ofp"] {
        let c = FabricConfig::preset(name).unwrap();
        assert!(c.compute.unwrap().host.caches.is_empty(), "{name}");
    }
}
