//! Routing, contention, determinism, chaining, config validation and schedule pricing.

use castack_fabric_sim::{
    Endpoint, Fabric, FabricConfig, FabricError, Mechanism, MemoryKind, Placement, PricePut,
    PriceSchedule, PriceStep, Transfer,
};

const DMA: Mechanism = Mechanism::Dma {
    device: 0,
    channel: 0,
};

fn dma(device: u32, channel: u32) -> Mechanism {
    Mechanism::Dma { device, channel }
}

/// A preset's TOML with its topology table replaced.
fn with_topology(preset: &str, topology: &str) -> Fabric {
    let text = FabricConfig::preset(preset).unwrap();
    let mut cfg = text;
    cfg.topology = toml::from_str::<Wrap>(topology).unwrap().topology;
    Fabric::new(cfg).unwrap()
}

#[derive(serde::Deserialize)]
struct Wrap {
    topology: castack_fabric_sim::config::TopologyConfig,
}

/// Every route is a connected walk from src to dst.
fn check_walk(f: &Fabric, s: usize, d: usize) -> usize {
    let path = f.route(s, d);
    let links = f.topology().links();
    let mut at = s as u32;
    for &l in &path.links {
        assert_eq!(links[l as usize].from, at, "route {s}->{d} is not a walk");
        at = links[l as usize].to;
    }
    assert_eq!(at as usize, d);
    path.hops()
}

fn ring_dist(a: usize, b: usize, n: usize) -> usize {
    let d = (b + n - a) % n;
    d.min(n - d)
}

#[test]
fn ring_routes_are_minimal() {
    for n in [2, 3, 5, 8] {
        let f = with_topology(
            "peach2",
            &format!("[topology]\nkind = \"ring\"\nnodes = {n}\nnext = \"E\"\nprev = \"W\""),
        );
        for s in 0..n {
            for d in 0..n {
                assert_eq!(check_walk(&f, s, d), ring_dist(s, d, n));
            }
        }
    }
}

#[test]
fn torus_2x8_routes_are_minimal_ring_first_then_south() {
    let f = Fabric::preset("peach2").unwrap();
    let links = f.topology().links();
    let port = |l: u32| {
        f.config().ports[links[l as usize].port as usize]
            .name
            .clone()
    };
    for s in 0..16 {
        for d in 0..16 {
            let want = ring_dist(s % 8, d % 8, 8) + usize::from(s / 8 != d / 8);
            assert_eq!(check_walk(&f, s, d), want, "{s}->{d}");
            let ports: Vec<String> = f.route(s, d).links.iter().map(|&l| port(l)).collect();
            if s / 8 != d / 8 {
                assert_eq!(ports.last().unwrap(), "S", "{s}->{d} ends with the S hop");
            }
            assert!(ports.iter().filter(|p| *p == "S").count() <= 1);
        }
    }
    // The tie (4 columns away) goes east.
    let ports: Vec<String> = f.route(0, 4).links.iter().map(|&l| port(l)).collect();
    assert_eq!(ports, ["E", "E", "E", "E"]);
    // 2 hops west, then south.
    let ports: Vec<String> = f.route(0, 14).links.iter().map(|&l| port(l)).collect();
    assert_eq!(ports, ["W", "W", "S"]);
}

#[test]
fn torus_3d_routes_are_minimal_and_dimension_ordered() {
    let f = with_topology(
        "tofu-fx10",
        "[topology]\nkind = \"torus\"\ndims = [4, 3, 2]\nports = [[\"X+\", \"X-\"], [\"Y+\", \"Y-\"], [\"Z+\", \"Z-\"]]",
    );
    let dims = [4, 3, 2];
    let coord = |v: usize| [v % 4, (v / 4) % 3, v / 12];
    let links = f.topology().links();
    for s in 0..24 {
        for d in 0..24 {
            let (a, b) = (coord(s), coord(d));
            let want: usize = (0..3).map(|k| ring_dist(a[k], b[k], dims[k])).sum();
            assert_eq!(check_walk(&f, s, d), want);
            // Dimension order: the dimension a link moves in never decreases.
            let dim_of = |l: u32| links[l as usize].port as usize / 2;
            let ds: Vec<usize> = f.route(s, d).links.iter().map(|&l| dim_of(l)).collect();
            assert!(ds.windows(2).all(|w| w[0] <= w[1]), "{s}->{d}: {ds:?}");
        }
    }
    // The full preset: corner to corner of the 16^3 torus is 8 + 8 + 8 hops.
    let t = Fabric::preset("tofu-fx10").unwrap();
    assert_eq!(t.route(0, 8 + 8 * 16 + 8 * 256).hops(), 24);
    assert_eq!(t.route(0, 15 + 15 * 16 + 15 * 256).hops(), 3);
}

#[test]
fn mesh_routes_do_not_wrap() {
    let f = with_topology(
        "tofu-fx10",
        "[topology]\nkind = \"mesh\"\ndims = [5, 3]\nports = [[\"X+\", \"X-\"], [\"Y+\", \"Y-\"]]",
    );
    for s in 0..15usize {
        for d in 0..15 {
            let want = (s % 5).abs_diff(d % 5) + (s / 5).abs_diff(d / 5);
            assert_eq!(check_walk(&f, s, d), want);
        }
    }
}

#[test]
fn fat_tree_and_crossbar_routes() {
    // One switch: 2 links between any two nodes.
    let f = Fabric::preset("ib-qdr").unwrap();
    for (s, d) in [(0, 1), (5, 63), (63, 0)] {
        assert_eq!(check_walk(&f, s, d), 2);
    }
    // Two levels: 4-port switches, 2 nodes per leaf.
    let f = with_topology(
        "ib-qdr",
        "[topology]\nkind = \"fat-tree\"\nnodes = 8\nradix = 4\nport = \"ib\"",
    );
    for s in 0..8 {
        for d in 0..8 {
            let want = if s == d {
                0
            } else if s / 2 == d / 2 {
                2
            } else {
                4
            };
            assert_eq!(check_walk(&f, s, d), want, "{s}->{d}");
        }
    }
    let f = with_topology(
        "ib-qdr",
        "[topology]\nkind = \"crossbar\"\nnodes = 5\nport = \"ib\"",
    );
    for s in 0..5 {
        for d in 0..5 {
            assert_eq!(check_walk(&f, s, d), if s == d { 0 } else { 2 });
        }
    }
}

#[test]
fn two_transfers_on_one_link_get_half_the_bandwidth_each() {
    // Tofu, 8 x 1 ring in x: 0->2 and 1->2 both cross link 1->2 (5 GB/s, the links and
    // devices are the only bottlenecks under 15 GB/s).
    let f = Fabric::preset("tofu-fx10").unwrap();
    let bytes = 100_000_000u64;
    let a = Transfer::new(Endpoint::host(0), Endpoint::host(2), bytes, DMA);
    let b = Transfer::new(Endpoint::host(1), Endpoint::host(2), bytes, DMA);
    let both = f.price(&[a, b]).unwrap();
    let data_alone = bytes as f64 / 5e9;
    // Each gets 2.5 GB/s: the data phase doubles.
    for (t, x) in both.iter().zip([a, b]) {
        let extra = t - f.price(&[x]).unwrap()[0];
        assert!((extra - data_alone).abs() < 1e-12, "{extra}");
    }
}

/// ib-qdr's GPU protocols against their closed forms, computed from the config's own fields:
/// an eager message is copied through host buffers (the copies serial with the host-to-host
/// send), a GPUDirect message reads GPU memory at its protocol's rate, and protocols whose
/// agents differ do not share that rate.
#[test]
fn gpu_protocols_copy_through_host_and_read_at_their_own_rate() {
    let f = Fabric::preset("ib-qdr").unwrap();
    let cfg = f.config();
    let gbs = |x: f64| x * 1e9;
    let gpu = cfg.memory.gpu.as_ref().unwrap();
    let host = &cfg.memory.host;
    let port = gbs(cfg.ports[0].bandwidth_gbs);
    let proto = |name: &str| cfg.gpu_protocols.iter().find(|p| p.name == name).unwrap();
    let (eager, gdr, staged) = (
        proto("gdrcopy-eager"),
        proto("gpudirect-rdma-rendezvous"),
        proto("host-staged-rendezvous"),
    );
    assert!(eager.copy_via_host && !gdr.copy_via_host && !staged.copy_via_host);
    let tail = cfg.forward_us * 1e-6; // one switch between two nodes
    let alone = |src: Endpoint, dst: Endpoint, m: u64| {
        f.price(&[Transfer::new(src, dst, m, DMA)]).unwrap()[0]
    };
    let close = |what: &str, got: f64, want: f64| {
        assert!(
            (got - want).abs() <= 1e-12 * want.max(1e-6),
            "{what}: {got:e} != {want:e}"
        );
    };
    let m = 8192u64;
    let x = m as f64;
    let wire = x / gbs(host.read_gbs).min(port).min(gbs(host.write_gbs));
    close(
        "eager GPU to host",
        alone(Endpoint::gpu(0), Endpoint::host(1), m),
        eager.start_us * 1e-6 + x / gbs(gpu.read_gbs) + wire + tail,
    );
    close(
        "eager host to GPU",
        alone(Endpoint::host(0), Endpoint::gpu(1), m),
        eager.start_us * 1e-6 + wire + tail + x / gbs(gpu.write_gbs),
    );
    // Two eager messages to one peer released together share its queue (one chain, one
    // start): the second still copies its own data out, after the first's data has left.
    let copy_out = x / gbs(gpu.read_gbs);
    let copy_in = x / gbs(gpu.write_gbs);
    let two = [
        Transfer::new(Endpoint::gpu(0), Endpoint::gpu(1), m, DMA),
        Transfer::new(Endpoint::gpu(0), Endpoint::gpu(1), m, DMA),
    ];
    let got = f.price(&two).unwrap();
    let first = eager.start_us * 1e-6 + copy_out + wire + tail + copy_in;
    close("first eager of a chain", got[0].min(got[1]), first);
    close(
        "second eager of a chain",
        got[0].max(got[1]),
        first + copy_out + wire,
    );
    let m = 256u64 << 10;
    let x = m as f64;
    let r = gbs(gdr.gpu_read_gbs.unwrap());
    assert!(r < port && r < gbs(gpu.write_gbs));
    close(
        "GPUDirect GPU to GPU",
        alone(Endpoint::gpu(0), Endpoint::gpu(1), m),
        gdr.start_us * 1e-6 + x / r + tail,
    );
    // Two GPUDirect messages from one GPU share the HCA's read of it (r / 2 each, below
    // half the port): both end when 2m bytes have been read.
    let pair = [
        Transfer::new(Endpoint::gpu(0), Endpoint::gpu(1), m, DMA),
        Transfer::new(Endpoint::gpu(0), Endpoint::gpu(2), m, DMA),
    ];
    assert!(r / 2.0 < port / 2.0);
    for t in f.price(&pair).unwrap() {
        close(
            "two GPUDirect messages",
            t,
            gdr.start_us * 1e-6 + 2.0 * x / r + tail,
        );
    }
    // A GPUDirect and a host-staged message read the GPU through different agents: neither
    // slows the other while their rates fit the port together.
    let big = 2u64 << 20;
    assert!(r + gbs(gpu.read_gbs) <= port);
    let mixed = [
        Transfer::new(Endpoint::gpu(0), Endpoint::gpu(1), m, DMA),
        Transfer::new(Endpoint::gpu(0), Endpoint::gpu(2), big, DMA),
    ];
    let got = f.price(&mixed).unwrap();
    close(
        "GPUDirect beside staging",
        got[0],
        alone(Endpoint::gpu(0), Endpoint::gpu(1), m),
    );
    close(
        "staging beside GPUDirect",
        got[1],
        staged.start_us * 1e-6 + big as f64 / gbs(gpu.read_gbs) + tail,
    );
}

#[test]
fn disjoint_transfers_do_not_interfere() {
    let f = Fabric::preset("tofu-fx10").unwrap();
    let bytes = 10_000_000u64;
    let a = Transfer::new(Endpoint::host(0), Endpoint::host(1), bytes, DMA);
    let b = Transfer::new(Endpoint::host(16), Endpoint::host(17), bytes, DMA);
    let c = Transfer::new(Endpoint::host(3), Endpoint::host(2), bytes, DMA);
    let alone = f.price(&[a]).unwrap()[0];
    for t in f.price(&[a, b, c]).unwrap() {
        assert_eq!(t, alone);
    }
}

#[test]
fn a_short_transfer_leaves_its_bandwidth_to_a_long_one() {
    // PEACH2 0->1: a 1 MB and a 3 MB DMA on two channels share link 0->1 (and the 3.5 GB/s
    // host read): 1.75 GB/s each until the short one ends, then 3.5 GB/s.
    let f = Fabric::preset("peach2").unwrap();
    let (s, d) = (Endpoint::host(0), Endpoint::host(1));
    let m = 1_000_000u64;
    let done = f
        .price(&[
            Transfer::new(s, d, m, dma(0, 0)),
            Transfer::new(s, d, 3 * m, dma(0, 1)),
        ])
        .unwrap();
    let pre = 1.9e-6;
    let r = 3.5e9;
    let short = pre + m as f64 / (r / 2.0);
    let long = short + 2.0 * m as f64 / r;
    assert!((done[0] - short).abs() < 1e-12, "{} vs {short}", done[0]);
    assert!((done[1] - long).abs() < 1e-12, "{} vs {long}", done[1]);
}

fn mixed_transfers() -> Vec<Transfer> {
    let mut ts = Vec::new();
    for i in 0..16usize {
        let mem = if i % 3 == 0 {
            MemoryKind::Gpu
        } else {
            MemoryKind::Host
        };
        let src = Endpoint {
            node: i,
            memory: mem,
        };
        let dst = Endpoint {
            node: (i * 5 + 3) % 16,
            memory: mem,
        };
        let mech = match i % 4 {
            0 => Mechanism::Auto,
            1 => dma(0, 1),
            2 if mem == MemoryKind::Host => Mechanism::Pio,
            _ => dma(0, (i % 4) as u32),
        };
        ts.push(
            Transfer::new(src, dst, 1000 * (i as u64 + 1) * (i as u64 + 1), mech)
                .at(i as f64 * 1e-6 % 3e-6),
        );
    }
    ts
}

#[test]
fn pricing_is_deterministic_and_independent_of_order() {
    let f = Fabric::preset("peach2").unwrap();
    let ts = mixed_transfers();
    let first = f.price(&ts).unwrap();
    assert_eq!(first, f.price(&ts).unwrap());
    let mut rev = ts.clone();
    rev.reverse();
    let mut back = f.price(&rev).unwrap();
    back.reverse();
    assert_eq!(first, back);
    for (t, done) in ts.iter().zip(&first) {
        assert!(*done > t.release);
    }
}

#[test]
fn a_chain_pays_one_start_and_a_fetch_per_descriptor() {
    // Three puts released together on one channel: one chain. Each descriptor after the first
    // starts when the previous one's data has left, paying its fetch (host-memory mode).
    let f = Fabric::preset("peach2").unwrap();
    let m = 1000u64;
    let ts: Vec<Transfer> = (1..4)
        .map(|d| Transfer::new(Endpoint::host(0), Endpoint::host(d), m, DMA))
        .collect();
    let done = f.price(&ts).unwrap();
    let data = m as f64 / 3.5e9;
    let (start, fetch, hop) = (1.45e-6, 0.45e-6, 0.2e-6);
    let expect = [
        start + fetch + data,
        start + 2.0 * (fetch + data) + hop,
        start + 3.0 * (fetch + data) + 2.0 * hop,
    ];
    for (got, want) in done.iter().zip(expect) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    // Register mode: the fetches vanish.
    let mut cfg = FabricConfig::preset("peach2").unwrap();
    cfg.dma.descriptors_in_registers = 16;
    let fr = Fabric::new(cfg).unwrap();
    let reg = fr.price(&ts).unwrap();
    assert!((reg[2] - (start + 3.0 * data + 2.0 * hop)).abs() < 1e-12);
}

#[test]
fn pio_from_gpu_and_bad_devices_are_errors() {
    let f = Fabric::preset("peach2").unwrap();
    let e = f
        .price(&[Transfer::new(
            Endpoint::gpu(0),
            Endpoint::host(1),
            8,
            Mechanism::Pio,
        )])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "transfer 0: PIO moves host memory to host memory only"
    );
    let e = f
        .estimate(&Transfer::new(
            Endpoint::host(0),
            Endpoint::host(99),
            8,
            DMA,
        ))
        .unwrap_err();
    assert!(e.to_string().contains("node 99 out of range"), "{e}");
    let e = f
        .estimate(&Transfer::new(
            Endpoint::host(0),
            Endpoint::host(1),
            8,
            dma(0, 4),
        ))
        .unwrap_err();
    assert!(e.to_string().contains("channel 4"), "{e}");
    let t = Fabric::preset("tofu-fx10").unwrap();
    let e = t
        .estimate(&Transfer::new(Endpoint::gpu(0), Endpoint::gpu(1), 8, DMA))
        .unwrap_err();
    assert!(e.to_string().contains("no GPU memory"), "{e}");
}

fn reject(edit: impl Fn(&str) -> String, want: &str) {
    let text = castack_fabric_sim::PRESETS
        .iter()
        .find(|(n, _)| *n == "peach2")
        .unwrap()
        .1;
    let e = FabricConfig::from_toml_str(&edit(text)).unwrap_err();
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.contains(want), "`{msg}` should contain `{want}`");
}

#[test]
fn invalid_configs_are_rejected_with_one_clear_line() {
    reject(
        |t| t.replace("south = \"S\"\n", ""),
        "fabric config `peach2`: topology: disconnected: node 0 cannot reach node 8",
    );
    reject(
        |t| t.replacen("bandwidth_gbs = 4.0", "bandwidth_gbs = 0.0", 1),
        "ports[0].bandwidth_gbs: must be a positive finite number, got 0",
    );
    reject(
        |t| t.replace("read_gbs = 2.8", "read_gbs = 0"),
        "memory.gpu.read_gbs: must be a positive finite number",
    );
    reject(
        |t| t.replace("east = \"E\"", "east = \"Q\""),
        "topology.east: unknown port `Q` (ports: N, E, W, S)",
    );
    reject(
        |t| {
            t.replace(
                "descriptors_in_registers = 0",
                "descriptors_in_registers = 17",
            )
        },
        "dma.descriptors_in_registers: 17 descriptors exceed the register limit of 16 per channel",
    );
    reject(
        |t| t.replace("host_port = \"N\"", "host_port = \"X\""),
        "host_port: unknown port `X`",
    );
    reject(
        |t| t.replace("channels = 4", "channels = 0"),
        "dma.channels: must be at least 1",
    );
    reject(
        |t| t.replace("kind = \"torus2xn\"", "kind = \"hypercube\""),
        "fabric config does not parse: unknown variant `hypercube`",
    );
    reject(
        |t| t.replace("forward_us = 0.2", "forward_us = 0.2\nfoward_us = 1"),
        "unknown field `foward_us`",
    );
    // Physical ranges (issue 47, item 9: `latency_us = 1e308` was accepted and printed a
    // 300-digit time): times up to a second, rates from 1 KB/s to 1 PB/s.
    reject(
        |t| t.replace("forward_us = 0.2", "forward_us = 1e308"),
        "forward_us: must lie in [0e0, 1e6] us (a physical value), got 1e308",
    );
    reject(
        |t| t.replacen("bandwidth_gbs = 4.0", "bandwidth_gbs = 1e7", 1),
        "ports[0].bandwidth_gbs: must lie in [1e-6, 1e6] GB/s",
    );
    reject(
        |t| t.replacen("bandwidth_gbs = 4.0", "bandwidth_gbs = 1e-300", 1),
        "ports[0].bandwidth_gbs: must lie in [1e-6, 1e6] GB/s",
    );
    let edge = castack_fabric_sim::PRESETS
        .iter()
        .find(|(n, _)| *n == "peach2")
        .unwrap()
        .1
        .replace("forward_us = 0.2", "forward_us = 1e6");
    FabricConfig::from_toml_str(&edge).expect("a time of one second is in range");
    let ib = castack_fabric_sim::PRESETS
        .iter()
        .find(|(n, _)| *n == "ib-qdr")
        .unwrap()
        .1;
    let e = FabricConfig::from_toml_str(&ib.replace("gpu_read_gbs = 3.25", "gpu_read_gbs = -1"))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("gpu_protocols[1].gpu_read_gbs: must be a positive finite number"),
        "{e}"
    );
    let e = FabricConfig::preset("peach3").unwrap_err();
    let names: Vec<&str> = castack_fabric_sim::PRESETS
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert!(names.starts_with(&["peach2", "ib-qdr", "tofu-fx10"]));
    assert_eq!(
        e.to_string(),
        format!(
            "unknown fabric preset `peach3` (presets: {})",
            names.join(", ")
        )
    );
}

#[test]
fn every_preset_loads() {
    for (name, _) in castack_fabric_sim::PRESETS {
        let f = Fabric::preset(name).unwrap();
        assert_eq!(f.config().name, *name);
    }
}

fn put(to: usize, bytes: u64) -> PricePut {
    PricePut { to, bytes }
}

#[test]
fn schedule_ping_pong_is_two_transfers_in_sequence() {
    let f = Fabric::preset("peach2").unwrap();
    let sched = PriceSchedule {
        ranks: vec![
            vec![
                PriceStep {
                    puts: vec![put(1, 8)],
                    waits_for: vec![],
                    ..Default::default()
                },
                PriceStep {
                    puts: vec![],
                    waits_for: vec![1],
                    ..Default::default()
                },
            ],
            vec![
                PriceStep {
                    puts: vec![],
                    waits_for: vec![0],
                    ..Default::default()
                },
                PriceStep {
                    puts: vec![put(0, 8)],
                    waits_for: vec![],
                    ..Default::default()
                },
            ],
        ],
    };
    let place = Placement::one_per_node(2, MemoryKind::Host);
    let one = f
        .estimate(&Transfer::new(
            Endpoint::host(0),
            Endpoint::host(1),
            8,
            Mechanism::Pio,
        ))
        .unwrap();
    let fin = f
        .price_schedule(&sched, &place, &[0.0, 0.0], Mechanism::Auto)
        .unwrap();
    assert!((fin[0] - 2.0 * one).abs() < 1e-15, "{fin:?}");
    assert!((fin[1] - 2.0 * one).abs() < 1e-15);
    // A later start delays everything.
    let fin = f
        .price_schedule(&sched, &place, &[1e-6, 0.0], Mechanism::Auto)
        .unwrap();
    assert!((fin[0] - (1e-6 + 2.0 * one)).abs() < 1e-15);
}

#[test]
fn schedule_step_puts_form_one_chain() {
    // Rank 0 puts 1000 B to ranks 1..4 in one step: as the chain of
    // a_chain_pays_one_start_and_a_fetch_per_descriptor.
    let f = Fabric::preset("peach2").unwrap();
    let mut ranks = vec![vec![PriceStep {
        puts: (1..4).map(|d| put(d, 1000)).collect(),
        waits_for: vec![],
        ..Default::default()
    }]];
    for _ in 1..4 {
        ranks.push(vec![PriceStep {
            puts: vec![],
            waits_for: vec![0],
            ..Default::default()
        }]);
    }
    let sched = PriceSchedule { ranks };
    let place = Placement::one_per_node(4, MemoryKind::Gpu);
    let fin = f.price_schedule(&sched, &place, &[0.0; 4], DMA).unwrap();
    let ts: Vec<Transfer> = (1..4)
        .map(|d| Transfer::new(Endpoint::gpu(0), Endpoint::gpu(d), 1000, DMA))
        .collect();
    let priced = f.price(&ts).unwrap();
    assert_eq!(&fin[1..], &priced[..]);
    assert_eq!(fin[0], priced[2]);
}

#[test]
fn unmatched_and_deadlocked_schedules_are_errors() {
    let f = Fabric::preset("peach2").unwrap();
    let place = Placement::one_per_node(2, MemoryKind::Host);
    let lonely = PriceSchedule {
        ranks: vec![
            vec![PriceStep {
                puts: vec![put(1, 8)],
                waits_for: vec![],
                ..Default::default()
            }],
            vec![],
        ],
    };
    let e = f
        .price_schedule(&lonely, &place, &[0.0; 2], DMA)
        .unwrap_err();
    assert!(matches!(e, FabricError::Schedule(_)));
    assert!(e.to_string().contains("waits for no more arrivals"), "{e}");
    // Each waits for the other before putting.
    let step = |wait: usize, to: usize| {
        vec![
            PriceStep {
                puts: vec![],
                waits_for: vec![wait],
                ..Default::default()
            },
            PriceStep {
                puts: vec![put(to, 8)],
                waits_for: vec![],
                ..Default::default()
            },
        ]
    };
    let dead = PriceSchedule {
        ranks: vec![step(1, 1), step(0, 0)],
    };
    let e = f.price_schedule(&dead, &place, &[0.0; 2], DMA).unwrap_err();
    assert!(
        e.to_string()
            .contains("deadlock: rank 0 never leaves step 0"),
        "{e}"
    );
}

#[test]
fn pio_max_bytes_limits_the_automatic_choice_only() {
    // peach2: PIO wins at 8 B and 64 B; with an eager limit of 32 B, 64 B goes by DMA.
    let mut cfg = FabricConfig::preset("peach2").unwrap();
    let t =
        |bytes: u64, m: Mechanism| Transfer::new(Endpoint::host(0), Endpoint::host(1), bytes, m);
    let f = Fabric::new(cfg.clone()).unwrap();
    assert_eq!(
        f.resolve_mechanism(&t(64, Mechanism::Auto)).unwrap(),
        Mechanism::Pio
    );
    cfg.pio.as_mut().unwrap().max_bytes = Some(32);
    let f = Fabric::new(cfg).unwrap();
    assert_eq!(
        f.resolve_mechanism(&t(8, Mechanism::Auto)).unwrap(),
        Mechanism::Pio
    );
    assert_eq!(f.resolve_mechanism(&t(64, Mechanism::Auto)).unwrap(), DMA);
    // Asked for explicitly, PIO still carries it.
    assert_eq!(
        f.resolve_mechanism(&t(64, Mechanism::Pio)).unwrap(),
        Mechanism::Pio
    );
}
