//! The device (compute) model and two-sided messages over puts, against the calibration facts
//! they were built from and against the closed forms in their module docs.

use castack_fabric_sim::{
    ComputeCost, Endpoint, Fabric, FabricConfig, FabricError, Mechanism, MemoryKind, Transfer,
    TwoSidedMessage, PRESETS,
};

use crate::common::within_5pct;

fn preset_text(name: &str) -> &'static str {
    PRESETS.iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn every_preset_has_a_host_device_model() {
    for (name, _) in PRESETS {
        let f = Fabric::preset(name).unwrap();
        let host = f.device_model(MemoryKind::Host);
        assert!(host.is_some(), "{name} has no [compute.host]");
        // A GPU compute model exactly where the fabric reaches GPU memory.
        assert_eq!(
            f.device_model(MemoryKind::Gpu).is_some(),
            f.config().memory.gpu.is_some(),
            "{name}"
        );
    }
}

#[test]
fn k20x_launch_and_peak_flops_match_the_facts() {
    let f = Fabric::preset("peach2").unwrap();
    // "a CUDA kernel launch costs about 14 us": an empty kernel.
    let empty = ComputeCost {
        bytes: 0,
        flops: 0,
        launches: 1,
        ..ComputeCost::default()
    };
    within_5pct(
        "K20X launch",
        f.compute_time(MemoryKind::Gpu, empty).unwrap(),
        14e-6,
    );
    // "1.31 TFlop/s peak": 1.31e12 flops of pure arithmetic take one second.
    let flops = ComputeCost {
        bytes: 0,
        flops: 1_310_000_000_000,
        launches: 0,
        ..ComputeCost::default()
    };
    within_5pct(
        "K20X 1.31 TF",
        f.compute_time(MemoryKind::Gpu, flops).unwrap(),
        1.0,
    );
}

#[test]
fn compute_is_a_roofline_plus_launches() {
    let f = Fabric::preset("peach2").unwrap();
    let d = f.device_model(MemoryKind::Host).unwrap().clone();
    let (bw, fl) = (d.mem_bandwidth_gbs * 1e9, d.gflops * 1e9);
    // Memory-bound (an axpy-like kernel: 24 bytes per 2 flops).
    let axpy = ComputeCost {
        bytes: 24_000_000,
        flops: 2_000_000,
        launches: 1,
        ..ComputeCost::default()
    };
    let t = f.compute_time(MemoryKind::Host, axpy).unwrap();
    assert!((t - (24e6 / bw + d.launch_us * 1e-6)).abs() < 1e-15);
    // Flop-bound.
    let gemm = ComputeCost {
        bytes: 1000,
        flops: 10_000_000_000,
        launches: 0,
        ..ComputeCost::default()
    };
    let t = f.compute_time(MemoryKind::Host, gemm).unwrap();
    assert!((t - 1e10 / fl).abs() < 1e-15);
    // Monotone in every component.
    let base = f.compute_time(MemoryKind::Host, axpy).unwrap();
    for more in [
        ComputeCost {
            bytes: axpy.bytes * 2,
            ..axpy
        },
        ComputeCost {
            launches: 3,
            ..axpy
        },
        ComputeCost {
            flops: u64::MAX / 2,
            ..axpy
        },
    ] {
        assert!(f.compute_time(MemoryKind::Host, more).unwrap() >= base);
    }
    // GPU bandwidth beats the host's, but a small GPU kernel loses to its launch.
    let small = ComputeCost {
        bytes: 8000,
        flops: 1000,
        launches: 1,
        ..ComputeCost::default()
    };
    assert!(
        f.compute_time(MemoryKind::Gpu, small).unwrap()
            > f.compute_time(MemoryKind::Host, small).unwrap()
    );
}

#[test]
fn compute_on_a_kind_without_a_model_is_an_error() {
    let tofu = Fabric::preset("tofu-fx10").unwrap();
    let e = tofu
        .compute_time(MemoryKind::Gpu, ComputeCost::default())
        .unwrap_err();
    assert!(matches!(e, FabricError::NoComputeModel { .. }), "{e}");
    assert!(e.to_string().contains("compute.gpu"), "{e}");
    let mut cfg = FabricConfig::preset("peach2").unwrap();
    cfg.compute = None;
    let f = Fabric::new(cfg).unwrap();
    assert!(f
        .compute_time(MemoryKind::Host, ComputeCost::default())
        .is_err());
}

#[test]
fn bad_compute_tables_are_one_line_errors_naming_the_field() {
    let text = preset_text("peach2");
    for (from, to, field) in [
        (
            "mem_bandwidth_gbs = 59.7",
            "mem_bandwidth_gbs = 0.0",
            "compute.host.mem_bandwidth_gbs",
        ),
        ("gflops = 1310.0", "gflops = -1.0", "compute.gpu.gflops"),
        (
            "launch_us = 14.0",
            "launch_us = nan",
            "compute.gpu.launch_us",
        ),
        (
            "notify_overhead_us = 0.5625",
            "notify_overhead_us = -1.0",
            "two_sided.notify_overhead_us",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let e = FabricConfig::from_toml_str(&text.replacen(from, to, 1)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(field), "{field}: {msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
    // An unknown key in the table is a parse error naming it.
    let e = FabricConfig::from_toml_str(&text.replacen(
        "launch_us = 14.0",
        "launch_us = 14.0\nlaunch_ns = 1",
        1,
    ))
    .unwrap_err();
    assert!(e.to_string().contains("launch_ns"), "{e}");
    // A GPU device model on a fabric without GPU memory.
    let tofu = preset_text("tofu-fx10");
    let e = FabricConfig::from_toml_str(&format!(
        "{tofu}\n[compute.gpu]\nmem_bandwidth_gbs = 1.0\ngflops = 1.0\nlaunch_us = 0.0\n"
    ))
    .unwrap_err();
    assert!(e.to_string().contains("compute.gpu"), "{e}");
}

fn msg(bytes: u64, mechanism: Mechanism, send: f64, recv: f64) -> TwoSidedMessage {
    TwoSidedMessage {
        src: Endpoint::host(0),
        dst: Endpoint::host(1),
        bytes,
        mechanism,
        send_posted: send,
        recv_posted: recv,
    }
}

#[test]
fn peach2_address_notification_is_the_published_2_us() {
    let f = Fabric::preset("peach2").unwrap();
    // "a 64 B CPU PIO notification about 2 us" (adjacent nodes).
    within_5pct(
        "64 B notification",
        f.notification_time(1, 0).unwrap(),
        2.0e-6,
    );
    within_5pct(
        "64 B notification",
        f.notification_time(0, 1).unwrap(),
        2.0e-6,
    );
    // The notification is a PIO put: it is faster than the 1.9 us DMA plus the overhead.
    let dma = Transfer::new(
        Endpoint::host(1),
        Endpoint::host(0),
        64,
        Mechanism::Dma {
            device: 0,
            channel: 0,
        },
    );
    assert!(f.notification_time(1, 0).unwrap() < f.estimate(&dma).unwrap() + 0.5625e-6);
}

#[test]
fn two_sided_costs_notification_plus_put_unless_preposted() {
    let f = Fabric::preset("peach2").unwrap();
    // 8 B by PIO: "PIO latency 1.0 us" + "64 B ... notification about 2 us" = 3 us when the
    // receive is posted together with the send.
    let t = f
        .price_two_sided(&msg(8, Mechanism::Auto, 0.0, 0.0))
        .unwrap();
    assert_eq!(t.mechanism, Mechanism::Pio);
    within_5pct("8 B two-sided, not pre-posted", t.arrival, 3.0e-6);
    // Pre-posted (address posted 10 us before the send): the put alone, 1.0 us.
    let t = f
        .price_two_sided(&msg(8, Mechanism::Auto, 10e-6, 0.0))
        .unwrap();
    within_5pct("8 B two-sided, pre-posted", t.arrival - 10e-6, 1.0e-6);
    assert_eq!(t.data_start, 10e-6);
    // DMA at small sizes: "1.9 us" + 2 us.
    let dma = Mechanism::Dma {
        device: 0,
        channel: 0,
    };
    let t = f.price_two_sided(&msg(8, dma, 0.0, 0.0)).unwrap();
    within_5pct("8 B DMA two-sided", t.arrival, 3.9e-6);
    // Posted late: the send waits for the address; arrival moves with the receive post.
    let a = f.price_two_sided(&msg(8, dma, 0.0, 5e-6)).unwrap();
    assert!((a.data_start - (5e-6 + f.notification_time(1, 0).unwrap())).abs() < 1e-15);
    assert!((a.arrival - a.data_start - (t.arrival - t.data_start)).abs() < 1e-15);
    // Partly hidden: the address lands 0.5 us after the send is posted.
    let n = f.notification_time(1, 0).unwrap();
    let p = f.price_two_sided(&msg(8, dma, n - 0.5e-6, 0.0)).unwrap();
    assert!((p.data_start - n).abs() < 1e-15);
}

#[test]
fn two_sided_on_a_fabric_without_notification_is_the_put() {
    // ib-qdr's figures are MPI two-sided already: no separate notification.
    let f = Fabric::preset("ib-qdr").unwrap();
    assert_eq!(f.notification_time(1, 0).unwrap(), 0.0);
    let t = f
        .price_two_sided(&msg(8, Mechanism::Auto, 0.0, 0.0))
        .unwrap();
    within_5pct("ib-qdr CPU 8 B", t.arrival, 1.9e-6);
    // tofu: the notification is a put of the "about 1 us" message cost.
    let f = Fabric::preset("tofu-fx10").unwrap();
    within_5pct(
        "tofu notification",
        f.notification_time(1, 0).unwrap(),
        1.0e-6,
    );
}

#[test]
fn two_sided_rejects_bad_inputs() {
    let f = Fabric::preset("peach2").unwrap();
    assert!(f
        .price_two_sided(&msg(8, Mechanism::Auto, -1.0, 0.0))
        .is_err());
    assert!(f
        .price_two_sided(&msg(8, Mechanism::Auto, 0.0, f64::NAN))
        .is_err());
    let mut m = msg(8, Mechanism::Pio, 0.0, 0.0);
    m.src = Endpoint::gpu(0);
    assert!(f.price_two_sided(&m).is_err(), "PIO from GPU memory");
    let mut m = msg(8, Mechanism::Auto, 0.0, 0.0);
    m.dst = Endpoint::host(99);
    assert!(f.price_two_sided(&m).is_err());
}
