//! `krylov bench collectives` end to end: every operation and algorithm verified against a
//! sequential reference on the threads backend, rows as the CLI contract defines them.

use crate::common::{krylov, OPS};

#[test]
fn every_op_and_algorithm_verifies_on_threads() {
    for op in OPS {
        for root in ["0", "2"] {
            let out = krylov(&[
                "bench",
                "collectives",
                "--op",
                op,
                "--algo",
                "all",
                "--ranks",
                "3,5,8",
                "--sizes",
                "0,8,1000",
                "--iters",
                "3",
                "--warmup",
                "1",
                "--root",
                root,
                "--verify",
                "--json",
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{op}: {stderr}");
            let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert!(!rows.is_empty(), "{op}");
            for r in &rows {
                assert_eq!(r["schema_version"], 1);
                assert_eq!(r["op"], op);
                assert_eq!(r["verified"], true, "{r}");
                assert_eq!(r["modeled"], false);
                // avg of equal values may differ from them in the last bit.
                let (min, avg, max) = (
                    r["min_us"].as_f64().unwrap(),
                    r["avg_us"].as_f64().unwrap(),
                    r["max_us"].as_f64().unwrap(),
                );
                assert!(
                    min <= avg * (1.0 + 1e-12) && avg <= max * (1.0 + 1e-12),
                    "{r}"
                );
                for field in [
                    "algo",
                    "backend",
                    "fabric",
                    "memory",
                    "ranks",
                    "bytes",
                    "bandwidth_gbs",
                    "busbw_gbs",
                ] {
                    assert!(r.get(field).is_some(), "{field}");
                }
            }
            // One row per (ranks, algorithm, size); barrier has one size.
            let sizes = if op == "barrier" { 1 } else { 3 };
            let algos: std::collections::BTreeSet<_> =
                rows.iter().map(|r| r["algo"].to_string()).collect();
            assert_eq!(rows.len(), 3 * algos.len() * sizes, "{op}");
        }
    }
}

#[test]
fn bad_bench_flags_exit_2_with_one_line() {
    for args in [
        vec!["--op", "allreduce", "--sizes", "12"],
        vec!["--op", "allreduce", "--algo", "nope"],
        vec!["--op", "bcast", "--ranks", "2", "--root", "2"],
        vec!["--op", "bcast", "--backend", "sim", "--ranks", "17"],
        vec!["--op", "bcast", "--backend", "sim", "--fabric", "nope"],
        vec!["--op", "bcast", "--memory", "device"],
        vec!["--op", "bcast", "--price-only"],
        vec!["--op", "bcast", "--ranks", "0"],
        vec!["--op", "bcast", "--sizes", "64..8"],
        vec!["--op", "allgather", "--mapping", "bit_reversal"],
        vec!["--op", "allgather", "--backend", "sim", "--mapping", "nope"],
        // warmup + iters wrapped around (an unrelated allgatherv error; MPI_Abort on mpi).
        vec![
            "--op",
            "allreduce",
            "--warmup",
            "18446744073709551615",
            "--iters",
            "2",
        ],
    ] {
        let mut full = vec!["bench", "collectives"];
        full.extend(&args);
        let out = krylov(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            out.stdout.is_empty() || !String::from_utf8_lossy(&out.stdout).contains("verified")
        );
    }
}

/// `--mapping bit_reversal` on sim puts recursive doubling's large late allgather steps on
/// neighbouring torus nodes: the modeled time drops at 1 MiB blocks on peach2's 16 nodes,
/// for the threaded sim and for `--price-only` alike.
#[test]
fn bit_reversal_mapping_speeds_up_recursive_doubling_allgather_on_sim() {
    let time = |mapping: &str, price_only: bool| -> f64 {
        let mut args = vec![
            "bench",
            "collectives",
            "--op",
            "allgather",
            "--algo",
            "recursive_doubling",
            "--backend",
            "sim",
            "--ranks",
            "16",
            "--sizes",
            "256K",
            "--mapping",
            mapping,
            "--csv",
        ];
        if price_only {
            args.push("--price-only");
        }
        let out = krylov(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let row = text.lines().nth(1).expect("one row after the header");
        row.split(',')
            .nth(8)
            .and_then(|v| v.parse().ok())
            .expect("avg_us")
    };
    for price_only in [false, true] {
        let (id, br) = (
            time("identity", price_only),
            time("bit_reversal", price_only),
        );
        assert!(
            br < 0.95 * id,
            "price_only {price_only}: identity {id} us, bit_reversal {br} us"
        );
    }
}

/// `--price-only` on a fabric file with `[software]` and `[noise]`: one sample per start
/// time over the detour period, so min < avg < max; the same file without `[noise]` prices
/// once (min = max), and the software cost alone adds `call + 3 * step` (recursive doubling
/// on 8 ranks) to the quiet time.
#[test]
fn price_only_samples_the_noise_period() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/fabrics/ib-qdr.toml"
    ))
    .unwrap();
    let sw = format!("{base}\n[software]\ncall_us = 2.0\nstep_us = 1.0\n");
    let noisy = format!("{sw}\n[noise]\nperiod_us = 50.0\ndetour_us = 10.0\nseed = 3\n");
    let stats = |name: &str, text: &str| -> (f64, f64, f64) {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = krylov(&[
            "bench",
            "collectives",
            "--op",
            "allreduce",
            "--algo",
            "recursive_doubling",
            "--backend",
            "sim",
            "--fabric",
            path.to_str().unwrap(),
            "--ranks",
            "8",
            "--sizes",
            "8",
            "--price-only",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let row: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap())
                .unwrap();
        let f = |k: &str| row[k].as_f64().unwrap();
        (f("min_us"), f("avg_us"), f("max_us"))
    };
    let quiet = stats("quiet.toml", &base);
    let soft = stats("sw.toml", &sw);
    let noise = stats("noisy.toml", &noisy);
    assert_eq!(quiet.0, quiet.2);
    assert_eq!(soft.0, soft.2);
    assert!((soft.1 - quiet.1 - 5.0).abs() < 1e-6, "{quiet:?} {soft:?}");
    assert!(noise.0 < noise.1 && noise.1 < noise.2, "{noise:?}");
    assert!(
        noise.0 >= soft.0 - 1e-9,
        "noise cannot speed a call up: {noise:?} {soft:?}"
    );
}
