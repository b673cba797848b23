//! `krylov bench neighbor` end to end: rows as CLI.md defines them, the sim backend against
//! the analytic model on tofu-fx10 (N = 6, C = 4), the plot, and bad input exiting 2.

use crate::common::{krylov, rows};

#[test]
fn threads_rows_carry_the_contract_fields() {
    let rows = rows(&[
        "bench",
        "neighbor",
        "--neighbors",
        "5",
        "--devices",
        "2",
        "--sizes",
        "0,8,4K",
        "--iters",
        "2",
        "--json",
    ]);
    assert_eq!(rows.len(), 6);
    for (i, r) in rows.iter().enumerate() {
        for key in [
            "schema_version",
            "strategy",
            "mode",
            "neighbors",
            "devices",
            "bytes",
            "time_us",
            "effective_gbs",
            "modeled",
        ] {
            assert!(r.get(key).is_some(), "row {i} lacks {key}: {r}");
        }
        assert_eq!(r["schema_version"], 1);
        assert_eq!(r["strategy"], if i < 3 { "naive" } else { "segmented" });
        assert_eq!(r["mode"], "put");
        assert_eq!(
            (r["neighbors"].as_u64(), r["devices"].as_u64()),
            (Some(5), Some(2))
        );
        assert_eq!(r["modeled"], false);
        assert!(r["analytic_us"].is_null());
        let (t, bytes) = (r["time_us"].as_f64().unwrap(), r["bytes"].as_f64().unwrap());
        assert!(t > 0.0);
        let eff = r["effective_gbs"].as_f64().unwrap();
        assert!((eff - 5.0 * bytes / (t * 1e-6) / 1e9).abs() <= 1e-9 * eff.max(1.0));
    }
}

#[test]
fn sim_on_tofu_segmented_beats_naive_for_large_messages_and_tracks_the_model() {
    let rows = rows(&[
        "bench",
        "neighbor",
        "--neighbors",
        "6",
        "--devices",
        "4",
        "--backend",
        "sim",
        "--fabric",
        "tofu-fx10",
        "--sizes",
        "1K,256K",
        "--json",
    ]);
    let get = |s: &str, b: u64| {
        rows.iter()
            .find(|r| r["strategy"] == s && r["bytes"].as_u64() == Some(b))
            .unwrap_or_else(|| panic!("no {s} {b} row"))
    };
    for r in &rows {
        assert_eq!(r["modeled"], true);
        assert_eq!(r["fabric"], "tofu-fx10");
        // The 15 GB/s node injection cap and the 0.1 us hop make the fabric slower than the
        // model, never faster (and by less than the cap's 20/15).
        let (t, a) = (
            r["time_us"].as_f64().unwrap(),
            r["analytic_us"].as_f64().unwrap(),
        );
        assert!(t >= a * 0.999 && t <= a * 1.4, "{r}");
    }
    let t = |s: &str, b: u64| get(s, b)["time_us"].as_f64().unwrap();
    // Latency-bound: segmented's 3 steps cost more than naive's 2 rounds.
    assert!(t("segmented", 1024) > t("naive", 1024));
    // Bandwidth-bound: segmented wins, by less than the model's 4/3 (injection cap).
    let speedup = t("naive", 262_144) / t("segmented", 262_144);
    assert!(speedup > 1.1 && speedup < 4.0 / 3.0, "{speedup}");
}

#[test]
fn plot_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("nb.svg");
    let out = krylov(&[
        "bench",
        "neighbor",
        "--neighbors",
        "2",
        "--devices",
        "2",
        "--sizes",
        "8..64",
        "--iters",
        "1",
        "--csv",
        "--mode",
        "two_sided",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with(
        "schema_version,strategy,mode,neighbors,devices,bytes,time_us,effective_gbs,modeled"
    ));
    assert_eq!(lines.count(), 8);
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains("<svg") && svg.contains("naive") && svg.contains("segmented"));
}

#[test]
fn bad_input_exits_2_with_one_line() {
    for args in [
        &["bench", "neighbor", "--backend", "mpi"][..],
        &["bench", "neighbor", "--sizes", "12"],
        &["bench", "neighbor", "--devices", "0"],
        &["bench", "neighbor", "--fabric", "tofu-fx10"],
        &["bench", "neighbor", "--strategy", "segmentd"],
        // Its all-to-all layout's N + 1 ranks overflowed (a panic in the dev profile,
        // found by `cargo xtask fuzz`).
        &["bench", "neighbor", "--neighbors", "18446744073709551615"],
        &["bench", "neighbor", "--neighbors", "18446744073709551614"],
    ] {
        let out = krylov(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
}
