//! The sim backend end to end: `bench pingpong --backend sim` against the calibration facts
//! (within 5%), `bench collectives --backend sim --verify` for every operation, and
//! `--price-only` at 4096 ranks.

use crate::common::{json_lines as json_rows, krylov, OPS};

fn within_5pct(what: &str, got: f64, want: f64) {
    let rel = (got - want).abs() / want;
    assert!(
        rel <= 0.05,
        "{what}: model {got:.4}, fact {want:.4} ({:.1}% off)",
        rel * 100.0
    );
}

/// Rows of a sim ping-pong: (algo, bytes, avg_us, bandwidth_gbs).
fn pingpong(extra: &[&str]) -> Vec<(String, u64, f64, f64)> {
    let mut args = vec!["bench", "pingpong", "--backend", "sim", "--json"];
    args.extend_from_slice(extra);
    json_rows(&krylov(&args))
        .into_iter()
        .map(|r| {
            assert_eq!(r["op"], "pingpong");
            assert_eq!(r["backend"], "sim");
            assert_eq!(r["modeled"], true);
            assert_eq!(r["ranks"], 2);
            assert_eq!(r["schema_version"], 1);
            assert!(r["verified"].is_null());
            (
                r["algo"].as_str().unwrap().to_string(),
                r["bytes"].as_u64().unwrap(),
                r["avg_us"].as_f64().unwrap(),
                r["bandwidth_gbs"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn pingpong_sim_matches_the_calibration_facts() {
    // peach2, adjacent nodes, put mode: "PIO latency 1.0 us"; "DMA latency 1.9 us at small
    // sizes, CPU-to-CPU and GPU-to-GPU alike"; peaks "GPU-to-GPU 2.8 GB/s; CPU-to-CPU 3.5 GB/s".
    let pio = pingpong(&["--mechanism", "pio", "--sizes", "8"]);
    assert_eq!(pio[0].0, "pio");
    within_5pct("peach2 PIO 8 B", pio[0].2, 1.0);
    let auto = pingpong(&["--sizes", "8,4M"]);
    assert_eq!(auto[0].0, "pio", "auto picks PIO for 8 B");
    assert_eq!(auto[1].0, "dma", "auto picks DMA for 4 MB");
    within_5pct("peach2 auto 8 B", auto[0].2, 1.0);
    within_5pct("peach2 CPU peak", auto[1].3, 3.5);
    let dma = pingpong(&["--mechanism", "dma", "--sizes", "8"]);
    within_5pct("peach2 DMA 8 B", dma[0].2, 1.9);
    let gpu = pingpong(&["--memory", "device", "--sizes", "8,4M"]);
    assert_eq!(gpu[0].0, "dma");
    within_5pct("peach2 GPU 8 B", gpu[0].2, 1.9);
    within_5pct("peach2 GPU peak", gpu[1].3, 2.8);
    // Two-sided: "a 64 B CPU PIO notification about 2 us" + the 1.0 us put.
    let two = pingpong(&["--mode", "two_sided", "--sizes", "8"]);
    within_5pct("peach2 two-sided 8 B", two[0].2, 3.0);
    // ib-qdr: "GPU-to-GPU ... 2.4 us at 8 B"; "CPU-to-CPU: latency about the same as TCA
    // DMA", 1.9 us; two-sided is what those figures measured (no extra notification).
    let ib = pingpong(&["--fabric", "ib-qdr", "--sizes", "8"]);
    within_5pct("ib-qdr CPU 8 B", ib[0].2, 1.9);
    let ib2 = pingpong(&["--fabric", "ib-qdr", "--mode", "two_sided", "--sizes", "8"]);
    within_5pct("ib-qdr two-sided CPU 8 B", ib2[0].2, 1.9);
    let ibg = pingpong(&["--fabric", "ib-qdr", "--memory", "device", "--sizes", "8"]);
    within_5pct("ib-qdr GPU 8 B", ibg[0].2, 2.4);
    // tofu: "per-message latency + software overhead about 1 us".
    let tofu = pingpong(&["--fabric", "tofu-fx10", "--sizes", "8"]);
    within_5pct("tofu 8 B", tofu[0].2, 1.0);
}

#[test]
fn pingpong_hops_cost_forwarding() {
    // peach2 forwards at 0.2 us per intermediate node (a documented preset choice).
    let one = pingpong(&["--mechanism", "dma", "--sizes", "8", "--hops", "1"]);
    let three = pingpong(&["--mechanism", "dma", "--sizes", "8", "--hops", "3"]);
    assert!(
        (three[0].2 - one[0].2 - 0.4).abs() < 1e-3,
        "{} vs {}",
        three[0].2,
        one[0].2
    );
    let out = krylov(&[
        "bench",
        "pingpong",
        "--backend",
        "sim",
        "--hops",
        "40",
        "--sizes",
        "8",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--hops 40") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn pingpong_on_dgx_h100_takes_the_node_path_or_the_network() {
    // The nearest pair is two GPUs of one node: host buffers take the shared-memory path
    // (0.3 us start), GPU buffers NVLink (5.0 us start, 450 GB/s). `--hops 2` is two
    // nodes under one leaf: the NDR network (0.9 us + the 0.1 us switch; 50 GB/s).
    let dgx = |extra: &[&str]| {
        let mut a = vec!["--fabric", "dgx-h100", "--sizes", "8,4M"];
        a.extend_from_slice(extra);
        pingpong(&a)
    };
    let shm = dgx(&[]);
    within_5pct("dgx-h100 shared memory 8 B", shm[0].2, 0.3);
    within_5pct("dgx-h100 shared memory peak", shm[1].3, 38.4);
    let nvlink = dgx(&["--memory", "device"]);
    within_5pct("dgx-h100 NVLink 8 B", nvlink[0].2, 5.0);
    let net = dgx(&["--hops", "2"]);
    within_5pct("dgx-h100 NDR 8 B", net[0].2, 1.0);
    within_5pct("dgx-h100 NDR peak", net[1].3, 50.0);
}

#[test]
fn pingpong_threads_runs_and_sim_only_flags_are_errors() {
    let rows = json_rows(&krylov(&[
        "bench", "pingpong", "--sizes", "8,1K", "--iters", "20", "--warmup", "2", "--json",
    ]));
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["backend"], "threads");
        assert_eq!(r["modeled"], false);
        assert!(r["avg_us"].as_f64().unwrap() > 0.0);
    }
    for bad in [
        &["--memory", "device"][..],
        &["--fabric", "peach2"],
        &["--hops", "2"],
        &[
            "--backend",
            "sim",
            "--memory",
            "device",
            "--mechanism",
            "pio",
        ],
        &["--backend", "sim", "--fabric", "no-such-fabric"],
        &["--backend", "mpi"],
    ] {
        let mut args = vec!["bench", "pingpong", "--sizes", "8"];
        args.extend_from_slice(bad);
        let out = krylov(&args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    }
}

#[test]
fn collectives_sim_verify_every_op() {
    for op in OPS {
        let rows = json_rows(&krylov(&[
            "bench",
            "collectives",
            "--backend",
            "sim",
            "--op",
            op,
            "--ranks",
            "1,3,8",
            "--sizes",
            "0,8,1000",
            "--root",
            "0",
            "--verify",
            "--json",
        ]));
        assert!(!rows.is_empty(), "{op}");
        for r in &rows {
            assert_eq!(r["verified"], true, "{op}: {r}");
            assert_eq!(r["modeled"], true);
            assert_eq!(r["backend"], "sim");
            assert_eq!(r["fabric"], "peach2");
            assert_eq!(r["memory"], "host");
            let t = r["avg_us"].as_f64().unwrap();
            // One rank or nothing to move costs nothing; anything else costs time.
            let ranks = r["ranks"].as_u64().unwrap();
            if ranks == 1 {
                assert_eq!(t, 0.0, "{r}");
            } else if op != "barrier" && r["bytes"].as_u64().unwrap() > 0 {
                assert!(t > 0.5, "{r}");
            }
            // Deterministic: one iteration, so min = avg = max.
            assert_eq!(r["min_us"], r["max_us"]);
        }
    }
}

#[test]
fn collectives_sim_repeats_and_device_memory_works() {
    let args = [
        "bench",
        "collectives",
        "--backend",
        "sim",
        "--op",
        "allreduce",
        "--ranks",
        "8",
        "--sizes",
        "8,64K",
        "--memory",
        "device",
        "--json",
    ];
    let a = json_rows(&krylov(&args));
    let b = json_rows(&krylov(&args));
    assert_eq!(a, b, "modeled rows must repeat exactly");
    assert!(a.iter().all(|r| r["memory"] == "device"));
}

#[test]
fn price_only_prices_4096_ranks_on_tofu() {
    let rows = json_rows(&krylov(&[
        "bench",
        "collectives",
        "--backend",
        "sim",
        "--price-only",
        "--fabric",
        "tofu-fx10",
        "--op",
        "allreduce",
        "--algo",
        "dissemination",
        "--ranks",
        "4096",
        "--sizes",
        "8",
        "--json",
    ]));
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["ranks"], 4096);
    assert_eq!(r["modeled"], true);
    assert!(r["verified"].is_null());
    // 12 rounds of about 1 us messages at least.
    let t = r["avg_us"].as_f64().unwrap();
    assert!(t > 12.0 && t < 1000.0, "{t}");
}

#[test]
fn sim_collectives_bad_combinations_exit_2() {
    for bad in [
        &["--backend", "threads", "--memory", "device"][..],
        &["--backend", "threads", "--price-only"],
        &["--backend", "sim", "--price-only", "--verify"],
        &["--backend", "sim", "--ranks", "17"],
        &[
            "--backend",
            "sim",
            "--fabric",
            "tofu-fx10",
            "--memory",
            "device",
        ],
        &["--backend", "sim", "--fabric", "/nonexistent/fabric.toml"],
    ] {
        let mut args = vec!["bench", "collectives", "--op", "allreduce", "--sizes", "8"];
        args.extend_from_slice(bad);
        let out = krylov(&args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
