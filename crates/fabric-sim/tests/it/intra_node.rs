//! Several devices per node (`[intra_node]`, `topology.rs` "Several devices per node"): the
//! GPU-cluster preset `dgx-h100` and the CPU-cluster preset `genoa-ndr` load and validate,
//! transfers between devices of one node take the node's own path (hand-computed times),
//! transfers between nodes the network, and bad tables are one clear line.

use castack_fabric_sim::{
    Endpoint, Fabric, FabricConfig, Mechanism, MemoryKind, Transfer, PRESETS,
};

const DMA: Mechanism = Mechanism::Dma {
    device: 0,
    channel: 0,
};

fn close(what: &str, got: f64, want: f64) {
    let rel = (got - want).abs() / want;
    assert!(rel <= 1e-12, "{what}: model {got:.9e}, hand {want:.9e}");
}

fn alone(f: &Fabric, src: Endpoint, dst: Endpoint, bytes: u64) -> f64 {
    let t = Transfer::new(src, dst, bytes, DMA);
    let priced = f.price(&[t]).unwrap()[0];
    close("estimate = price alone", f.estimate(&t).unwrap(), priced);
    priced
}

#[test]
fn gpu_and_cpu_cluster_presets_load_and_validate() {
    for name in ["dgx-h100", "genoa-ndr"] {
        assert!(PRESETS.iter().any(|(n, _)| *n == name), "{name} missing");
        let cfg = FabricConfig::preset(name).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.name, name);
    }
    let dgx = Fabric::preset("dgx-h100").unwrap();
    assert_eq!(dgx.nodes(), 1024, "128 nodes x 8 GPUs");
    assert_eq!(dgx.topology().devices_per_node(), 8);
    assert!(dgx.device_model(MemoryKind::Gpu).is_some());
    assert!(dgx.topology().same_node(0, 7) && !dgx.topology().same_node(7, 8));
    let genoa = Fabric::preset("genoa-ndr").unwrap();
    assert_eq!(genoa.nodes(), 2048);
    assert_eq!(genoa.topology().devices_per_node(), 1);
    assert!(genoa.device_model(MemoryKind::Gpu).is_none(), "CPU only");
}

#[test]
fn dgx_h100_prices_each_path_by_hand() {
    let f = Fabric::preset("dgx-h100").unwrap();
    let m = 1u64 << 20;
    let mb = m as f64;
    // Two GPUs of one node, host buffers: the shared-memory path, 0.3 us + m / 38.4 GB/s,
    // no switch cost, no link latency.
    close(
        "host 0 -> 1",
        alone(&f, Endpoint::host(0), Endpoint::host(1), m),
        0.3e-6 + mb / 38.4e9,
    );
    // GPU memory: NVLink, 5.0 us + m / 450 GB/s.
    close(
        "gpu 0 -> 7",
        alone(&f, Endpoint::gpu(0), Endpoint::gpu(7), m),
        5.0e-6 + mb / 450e9,
    );
    // Another node under the same leaf: 0.9 us + m / 50 GB/s + one switch (0.1 us).
    close(
        "host 0 -> 8",
        alone(&f, Endpoint::host(0), Endpoint::host(8), m),
        0.9e-6 + mb / 50e9 + 0.1e-6,
    );
    // Another leaf (32 devices a leaf): leaf, spine, leaf: three switches.
    close(
        "gpu 0 -> 32",
        alone(&f, Endpoint::gpu(0), Endpoint::gpu(32), m),
        0.9e-6 + mb / 50e9 + 0.3e-6,
    );
    // Eight GPUs of a node sending to eight of another share nothing but the tree (one HCA
    // each): every message as fast as alone; inside a node the NVSwitch star likewise.
    let cross: Vec<Transfer> = (0..8)
        .map(|g| Transfer::new(Endpoint::gpu(g), Endpoint::gpu(8 + g), m, DMA))
        .collect();
    for t in f.price(&cross).unwrap() {
        close("8 HCAs in parallel", t, 0.9e-6 + mb / 50e9 + 0.1e-6);
    }
    // Two GPUs sending to one GPU of their node share its NVLink down link: 2 m at 450 GB/s.
    let two = [
        Transfer::new(Endpoint::gpu(1), Endpoint::gpu(0), m, DMA),
        Transfer::new(Endpoint::gpu(2), Endpoint::gpu(0), m, DMA),
    ];
    for t in f.price(&two).unwrap() {
        close("shared NVLink down link", t, 5.0e-6 + 2.0 * mb / 450e9);
    }
}

/// A small config: 4 devices on a crossbar, 2 per node, intra-node links with latency and
/// a switch cost, so that every term of an intra-node route is visible.
const SMALL: &str = r#"
name = "two-by-two"
description = "2 nodes of 2 devices"
forward_us = 0.25
[[ports]]
name = "net"
bandwidth_gbs = 10.0
latency_us = 0.5
[[ports]]
name = "shm"
bandwidth_gbs = 20.0
latency_us = 0.125
[topology]
kind = "crossbar"
nodes = 4
port = "net"
[intra_node]
devices = 2
[intra_node.host]
port = "shm"
start_us = 0.75
switch_us = 0.0625
[memory.host]
read_gbs = 100.0
write_gbs = 100.0
[dma]
devices = 1
channels = 1
chaining = false
start_us = 2.0
descriptor_us = 0.0
descriptor_fetch_us = 0.0
"#;

#[test]
fn an_intra_node_route_is_up_and_down_through_the_node_switch() {
    let f = Fabric::new(FabricConfig::from_toml_str(SMALL).unwrap()).unwrap();
    assert_eq!(f.route(0, 1).hops(), 2);
    assert_eq!(f.route(2, 3).hops(), 2);
    assert_eq!(f.route(1, 2).hops(), 2, "crossbar: up and down");
    let m = 4000u64;
    // Inside: start 0.75 us + m / 20 GB/s + two link latencies (0.125 us each) + the
    // switch (0.0625 us).
    close(
        "inside",
        alone(&f, Endpoint::host(0), Endpoint::host(1), m),
        0.75e-6 + m as f64 / 20e9 + 0.25e-6 + 0.0625e-6,
    );
    // Between nodes: start 2.0 us + m / 10 GB/s + two latencies (0.5 us each) + forward.
    close(
        "between",
        alone(&f, Endpoint::host(1), Endpoint::host(2), m),
        2.0e-6 + m as f64 / 10e9 + 1.0e-6 + 0.25e-6,
    );
    // The intra links are a node's own: node 1's pair does not slow node 0's.
    let both = [
        Transfer::new(Endpoint::host(0), Endpoint::host(1), m, DMA),
        Transfer::new(Endpoint::host(2), Endpoint::host(3), m, DMA),
    ];
    for t in f.price(&both).unwrap() {
        close("two nodes", t, 0.75e-6 + m as f64 / 20e9 + 0.3125e-6);
    }
}

fn reject(edit: impl Fn(&str) -> String, want: &str) {
    let e = FabricConfig::from_toml_str(&edit(SMALL)).unwrap_err();
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.contains(want), "`{msg}` should contain `{want}`");
}

#[test]
fn bad_intra_node_tables_are_one_clear_line() {
    reject(
        |t| t.replace("devices = 2", "devices = 3"),
        "intra_node.devices: the topology's 4 fabric nodes (devices) are not a whole number of nodes of 3 devices",
    );
    reject(
        |t| t.replace("devices = 2", "devices = 1"),
        "intra_node.devices: must be at least 2, got 1",
    );
    reject(
        |t| t.replace("port = \"shm\"", "port = \"nvlink\""),
        "intra_node.host.port: unknown port `nvlink` (ports: net, shm)",
    );
    reject(
        |t| t.replace("start_us = 0.75", "start_us = -1"),
        "intra_node.host.start_us: must be a finite number >= 0",
    );
    reject(
        |t| format!("{t}[intra_node.gpu]\nport = \"shm\"\nstart_us = 1.0\nswitch_us = 0.0\n"),
        "intra_node.gpu: given but memory.gpu is absent",
    );
    reject(
        |t| t.replace("switch_us = 0.0625", "switch_us = 0.0625\nswitch_ns = 1"),
        "unknown field `switch_ns`",
    );
}

#[test]
fn the_new_presets_carry_their_data_sheet_device_models() {
    use castack_fabric_sim::ComputeCost;
    let gb = ComputeCost {
        bytes: 1_000_000_000,
        ..ComputeCost::default()
    };
    let tf = ComputeCost {
        flops: 1_000_000_000_000,
        ..ComputeCost::default()
    };
    let launch = ComputeCost {
        launches: 1,
        ..ComputeCost::default()
    };
    let dgx = Fabric::preset("dgx-h100").unwrap();
    // H100 SXM: "3.35 TB/s", "FP64 34 teraFLOPS"; launch 5 us (documented choice).
    close(
        "H100 bandwidth",
        dgx.compute_time(MemoryKind::Gpu, gb).unwrap(),
        1.0 / 3350.0,
    );
    close(
        "H100 FP64",
        dgx.compute_time(MemoryKind::Gpu, tf).unwrap(),
        1.0 / 34.0,
    );
    close(
        "H100 launch",
        dgx.compute_time(MemoryKind::Gpu, launch).unwrap(),
        5e-6,
    );
    // Its host link, PCIe Gen5 x16 (63.0 GB/s) and 5 us a copy, through the one sum the sim
    // backend and the planner charge a GPU rank's work with.
    close(
        "H100 copy",
        dgx.work_time(MemoryKind::Gpu, ComputeCost::default(), 2, 63_000_000)
            .unwrap(),
        2.0 * 5e-6 + 1e-3,
    );
    // A rank's eighth of the two Xeon 8480C: 76.8 GB/s, 896 GFlop/s.
    close(
        "8480C share",
        dgx.compute_time(MemoryKind::Host, gb).unwrap(),
        1.0 / 76.8,
    );
    close(
        "8480C flops",
        dgx.compute_time(MemoryKind::Host, tf).unwrap(),
        1000.0 / 896.0,
    );
    // Two EPYC 9654: 2 x 460.8 GB/s, 2 x 96 x 2.4 GHz x 16 flops.
    let genoa = Fabric::preset("genoa-ndr").unwrap();
    close(
        "9654 x2 bandwidth",
        genoa.compute_time(MemoryKind::Host, gb).unwrap(),
        1.0 / 921.6,
    );
    close(
        "9654 x2 flops",
        genoa.compute_time(MemoryKind::Host, tf).unwrap(),
        1000.0 / 7372.8,
    );
    // NDR between two nodes: 0.9 us + one 0.1 us switch at 8 B, 50 GB/s.
    close(
        "genoa 8 B",
        alone(&genoa, Endpoint::host(0), Endpoint::host(1), 8),
        1.0e-6 + 8.0 / 50e9,
    );
}
