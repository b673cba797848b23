//! `krylov plan` end to end: rows as CLI.md defines them (one recommended per rank count),
//! the human table, the plot, `--device-model`, and bad input exiting 2 with one line.

use std::path::PathBuf;

use crate::common::{krylov, rows};

/// A 3-D Poisson matrix of 8^3 rows written by `krylov gen`.
fn matrix(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("p3.mtx");
    let out = krylov(&["gen", "poisson3d", "--n", "8", "-o", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

const FIELDS: &[&str] = &[
    "schema_version",
    "ranks",
    "method",
    "k",
    "basis",
    "mpk",
    "predicted_eq_iterations",
    "predicted_s_per_eq_iter",
    "compute_s",
    "allreduce_s",
    "halo_s",
    "predicted_total_s",
    "unpriced",
    "recommended",
];

#[test]
fn json_rows_carry_the_contract_fields_and_one_recommendation_per_p() {
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let plot = dir.path().join("plan.svg");
    let rows = rows(&[
        "plan",
        m.to_str().unwrap(),
        "--ranks",
        "4,8",
        "--fabric",
        "ofp",
        "--methods",
        "cg,ccg,cacg:chebyshev",
        "--k",
        "2..3",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    // cg, ccg, cacg x k {2, 3} x mpk {no, yes}, at two rank counts.
    assert_eq!(rows.len(), 2 * 6);
    for r in &rows {
        for f in FIELDS {
            assert!(r.get(f).is_some(), "{f} missing in {r}");
        }
        assert_eq!(r["schema_version"], 2);
        assert!(r["unpriced"].is_null(), "{r}");
    }
    for p in [4, 8] {
        let n = rows
            .iter()
            .filter(|r| r["ranks"] == p && r["recommended"] == true)
            .count();
        assert_eq!(n, 1, "P {p}");
    }
    let cg = rows.iter().find(|r| r["method"] == "cg").unwrap();
    assert!(cg["k"].is_null() && cg["basis"].is_null());
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("cacg:3:chebyshev:mpk"));
    // Six candidates: every one named (issue 47: the plot greys the rest only of many), the
    // recommended marked.
    assert!(!svg.contains("other candidate"), "none greyed");
    assert!(svg.contains("(recommended at P = "));
}

#[test]
fn device_model_swaps_the_compute_section() {
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let run = |extra: &[&str]| {
        let mut a = vec![
            "plan",
            m.to_str().unwrap(),
            "--ranks",
            "2",
            "--fabric",
            "ofp",
        ];
        a.extend_from_slice(&["--methods", "cg", "--json"]);
        a.extend_from_slice(extra);
        rows(&a).remove(0)
    };
    let compute = |v: &serde_json::Value| v["compute_s"].as_f64().unwrap();
    let ofp = run(&[]);
    let fx100_nodes = run(&["--device-model", "fx100"]);
    // OFP's MCDRAM (495 GB/s) against FX100's HMC (105 GB/s), neither with cache levels:
    // memory-bound CG compute 4.7x slower, the network unchanged.
    let ratio = compute(&fx100_nodes) / compute(&ofp);
    assert!((ratio - 495.0 / 105.0).abs() < 1e-6, "{ratio}");
    assert_eq!(ofp["halo_s"], fx100_nodes["halo_s"]);
    // ITO's model brings its cache levels along: this small matrix's rank working set
    // lives in its L2 (2808 GB/s).
    let ito_nodes = run(&["--device-model", "ito"]);
    let ratio = compute(&ofp) / compute(&ito_nodes);
    assert!((ratio - 2808.0 / 495.0).abs() < 1e-6, "{ratio}");
    assert_eq!(ofp["halo_s"], ito_nodes["halo_s"]);
    // A preset file serves as well as a name (issue 47, item 8: a file was refused as
    // "not a preset", so `krylov calibrate`'s model of this machine could not be used).
    let file = dir.path().join("my-fx100.toml");
    let preset = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/fabrics/fx100.toml"
    );
    std::fs::copy(preset, &file).unwrap();
    let from_file = run(&["--device-model", file.to_str().unwrap()]);
    assert_eq!(from_file["compute_s"], fx100_nodes["compute_s"]);
    assert_eq!(from_file["halo_s"], ofp["halo_s"]);
}

#[test]
fn device_cuda_prices_the_gpu_model_with_host_device_staging() {
    // dgx-h100, 16 ranks = two nodes of 8 GPUs. cg's step has two reductions (1 value,
    // then 2): on a GPU each first copies its local results to the host over PCIe Gen5
    // (5.0 us + 8 B per value / 63.0 GB/s, the preset's host link); the network and the
    // reduction itself are the same. Hand-computed: the difference in allreduce_s.
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let run = |device: &str, fabric: &str, extra: &[&str]| {
        let mut a = vec![
            "plan",
            m.to_str().unwrap(),
            "--ranks",
            "16",
            "--fabric",
            fabric,
            "--methods",
            "cg",
            "--device",
            device,
            "--json",
        ];
        a.extend_from_slice(extra);
        rows(&a).remove(0)
    };
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    let cpu = run("cpu", "dgx-h100", &[]);
    let gpu = run("cuda", "dgx-h100", &[]);
    let staging = 2.0 * 5.0e-6 + 24.0 / 63.0e9;
    let diff = f(&gpu, "allreduce_s") - f(&cpu, "allreduce_s");
    assert!((diff - staging).abs() < 1e-12, "{diff:e} vs {staging:e}");
    // Each exchange copies out and back in (two more copies, 10 us at least), and the
    // GPU's kernels each pay a 5 us launch: both dearer than the CPU's on this small matrix.
    assert!(
        f(&gpu, "halo_s") >= f(&cpu, "halo_s") + 10e-6,
        "{gpu} {cpu}"
    );
    assert!(f(&gpu, "compute_s") > f(&cpu, "compute_s"));
    // The device model comes with --device-model as well: dgx-h100's GPU on ib-qdr's
    // network (a fabric that reaches GPU memory; one that does not is refused on load).
    let swapped = run("cuda", "ib-qdr", &["--device-model", "dgx-h100"]);
    assert_eq!(swapped["compute_s"], gpu["compute_s"]);
}

#[test]
fn table_names_the_recommendation() {
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let out = krylov(&[
        "plan",
        m.to_str().unwrap(),
        "--ranks",
        "4",
        "--fabric",
        "fx100",
        "--methods",
        "cg,pipecg",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("recommended at P = 4: "), "{text}");
    // Why: the winner's terms, the runner-up's, and where the allreduce cost would flip
    // the recommendation (or that nothing overtakes it on that side).
    let line = |start: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no '{start}' line in {text}"))
            .to_string()
    };
    assert!(line("why: ").contains("eq. iterations x ("), "{text}");
    // The runner-up is the other of the two methods, with its total over the winner's.
    let best = line("recommended at P = 4: ");
    let other = if best.ends_with(": cg") {
        "pipecg"
    } else {
        "cg"
    };
    let next = line("next: ").trim_start().to_string();
    assert!(next.starts_with(&format!("next: {other} ")), "{text}");
    let ratio: f64 = next
        .rsplit_once('(')
        .and_then(|(_, r)| r.strip_suffix("x)"))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {next}"));
    assert!(ratio >= 1.0, "{next}");
    let sides = text
        .lines()
        .filter(|l| l.contains("flips to ") || l.contains("no candidate overtakes it"))
        .count();
    assert_eq!(sides, 2, "{text}");
}

#[test]
fn probe_results_are_kept_and_reused_across_fabrics() {
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let cache = dir.path().join("cache");
    let plan = |fabric: &str, extra: &[&str]| {
        let mut a = vec![
            "plan",
            m.to_str().unwrap(),
            "--ranks",
            "4",
            "--fabric",
            fabric,
            "--methods",
            "cg,pipecg,cbcgr",
            "--k",
            "2..3",
            "--json",
        ];
        a.extend_from_slice(extra);
        rows(&a)
    };
    let files = || -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
        let mut v: Vec<_> = std::fs::read_dir(&cache)
            .map(|d| {
                d.map(|e| {
                    let e = e.unwrap();
                    (e.path(), e.metadata().unwrap().modified().unwrap())
                })
                .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let c = cache.to_str().unwrap();
    let first = plan("fx100", &["--probe-cache", c]);
    let kept = files();
    // cg (the reference), pipecg, cbcgr at k = 2 and 3: one file each.
    assert_eq!(kept.len(), 4, "{kept:?}");
    let second = plan("ito", &["--probe-cache", c]);
    assert_eq!(files(), kept, "nothing run or written again");
    let iters = |rows: &[serde_json::Value]| -> Vec<_> {
        rows.iter()
            .map(|r| {
                (
                    r["method"].clone(),
                    r["k"].clone(),
                    r["predicted_eq_iterations"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(iters(&first), iters(&second));
    for r in &first {
        assert!(
            ["converged", "tracked", "extrapolated"].contains(&r["probe_source"].as_str().unwrap()),
            "{r}"
        );
    }
    // The default folder follows XDG_CACHE_HOME; --no-probe-cache reads and writes none.
    let xdg = dir.path().join("xdg");
    let with_env = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_krylov"))
            .args([
                "plan",
                m.to_str().unwrap(),
                "--ranks",
                "4",
                "--fabric",
                "fx100",
            ])
            .args(["--methods", "cg,pipecg", "--json"])
            .args(extra)
            .env("XDG_CACHE_HOME", &xdg)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    with_env(&["--no-probe-cache"]);
    assert!(!xdg.exists());
    with_env(&[]);
    assert_eq!(
        std::fs::read_dir(xdg.join("castack/probes"))
            .unwrap()
            .count(),
        2
    );
    // --probe full runs every candidate to the tolerance: each row converged.
    let full = plan("fx100", &["--no-probe-cache", "--probe", "full"]);
    assert!(full.iter().all(|r| r["probe_source"] == "converged"));
}

#[test]
fn a_price_limit_leaves_rows_unpriced_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let args = |json: bool| {
        let mut a = vec![
            "plan",
            m.to_str().unwrap(),
            "--ranks",
            "1,4",
            "--fabric",
            "fx100",
            "--methods",
            "cg,cbcg",
            "--k",
            "2",
            "--price-limit",
            "1",
            "--no-probe-cache",
        ];
        if json {
            a.push("--json");
        }
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let a = args(true);
    let rows = rows(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(rows.len(), 2 * 3);
    for r in &rows {
        if r["ranks"] == 1 {
            // One rank communicates nothing: no engine work, priced under any limit.
            assert!(
                r["unpriced"].is_null() && r["predicted_total_s"].is_number(),
                "{r}"
            );
            continue;
        }
        // Four ranks: every allreduce and exchange needs more than one rate update.
        let why = r["unpriced"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert!(
            why.contains("at P = 4 passed the work limit of 1 flow"),
            "{why}"
        );
        for f in [
            "predicted_s_per_eq_iter",
            "allreduce_s",
            "halo_s",
            "setup_s",
            "predicted_total_s",
        ] {
            assert!(r[f].is_null(), "{f} in {r}");
        }
        assert!(r["compute_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["recommended"], false);
    }
    assert_eq!(rows.iter().filter(|r| r["recommended"] == true).count(), 1);
    let a = args(false);
    let out = krylov(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("not priced").count(), 3 + 1, "{text}");
    assert!(text.contains("a larger --price-limit prices it"), "{text}");
    assert!(text.contains("recommended at P = 4: none"), "{text}");
    // P = 1 has every row priced: a plain recommendation.
    let one = text
        .lines()
        .find(|l| l.contains("recommended at P = 1: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!one.contains("not priced"), "{one}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let m = m.to_str().unwrap();
    for (args, needle) in [
        (vec!["--ranks", "4", "--fabric", "nosuch"], "nosuch"),
        (
            vec!["--ranks", "4", "--fabric", "fx100", "--k", "2..21"],
            "1..=20",
        ),
        (
            vec!["--ranks", "4", "--fabric", "fx100", "--k", "0..3"],
            "1..=20",
        ),
        (vec!["--ranks", "4,5000", "--fabric", "fx100"], "5000"),
        (vec!["--ranks", "0", "--fabric", "ito"], "at least 1"),
        (
            vec!["--ranks", "4", "--fabric", "ito", "--device-model", "x"],
            "x",
        ),
        (
            vec!["--ranks", "4", "--fabric", "ito", "--methods", "cgx"],
            "cgx",
        ),
        (
            vec!["--ranks", "4", "--fabric", "ito", "--probe", "fast"],
            "fast",
        ),
        (
            vec!["--ranks", "4", "--fabric", "ito", "--price-limit", "0"],
            "at least 1",
        ),
        // A CPU cluster has no GPU model to price --device cuda with.
        (
            vec!["--ranks", "4", "--fabric", "genoa-ndr", "--device", "cuda"],
            "fabric `genoa-ndr` has no GPU device model ([compute.gpu])",
        ),
        (
            vec!["--ranks", "4", "--fabric", "dgx-h100", "--device", "gpu"],
            "gpu",
        ),
    ] {
        let mut a = vec!["plan", m];
        a.extend_from_slice(&args);
        let out = krylov(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = krylov(&[
        "plan",
        "/nonexistent.mtx",
        "--ranks",
        "2",
        "--fabric",
        "ito",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

/// `--ranks 4,4,4` plans P = 4 once (it printed each row three times), and `--help` states
/// the default tolerance as written (`1e-12`, not `0.000000000001`).
#[test]
fn repeated_rank_counts_are_planned_once_and_help_shows_the_tolerance() {
    let dir = tempfile::tempdir().unwrap();
    let m = matrix(&dir);
    let rows = rows(&[
        "plan",
        m.to_str().unwrap(),
        "--ranks",
        "4,4,4",
        "--fabric",
        "ofp",
        "--methods",
        "cg",
        "--json",
    ]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let help = krylov(&["plan", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("[default: 1e-12]"), "{help}");
}
