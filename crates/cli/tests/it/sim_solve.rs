//! `krylov solve|compare --backend sim`: modeled reports, one-line errors for bad fabrics
//! and rank counts; `--replace-every` in the report's `residual_replacements`.

use crate::common::{json_lines as ok_json_lines, krylov};
use std::path::{Path, PathBuf};
use std::process::Output;

fn poisson(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join(format!("poisson{n}.mtx"));
    let p = path.to_str().unwrap();
    let out = krylov(&["gen", "poisson3d", "--n", &n.to_string(), "-o", p]);
    assert!(out.status.success());
    path
}

/// Exit 2 with exactly one line on stderr containing `needle`, nothing on stdout.
fn bad_input(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(out.stdout.is_empty());
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn sim_solve_reports_modeled_times_with_every_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let m = poisson(dir.path(), 8);
    let m = m.to_str().unwrap();
    let rows = ok_json_lines(&krylov(&[
        "solve",
        m,
        "--backend",
        "sim",
        "--ranks",
        "4",
        "--json",
    ]));
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["modeled"], true);
    assert_eq!(r["backend"], "sim");
    assert_eq!(r["fabric"], "peach2");
    assert_eq!(r["converged"], true);
    let t = &r["time_breakdown"];
    for b in ["spmv", "allreduce", "halo", "blas"] {
        assert!(f(t, b) > 0.0, "{b}: {t}");
    }
    let sum: f64 = ["spmv", "blas", "allreduce", "halo", "transfer", "other"]
        .iter()
        .map(|b| f(t, b))
        .sum();
    assert!((sum - f(r, "time_s")).abs() <= 1e-12 * f(r, "time_s"));
    // The CPU's vectors are host memory: no host-device copies.
    assert_eq!(f(t, "transfer"), 0.0);
    assert_eq!(r["device"], "cpu");
    // Modeled: the same bits again, and another fabric prices it differently.
    let again = ok_json_lines(&krylov(&[
        "solve",
        m,
        "--backend",
        "sim",
        "--ranks",
        "4",
        "--json",
    ]));
    assert_eq!(r["time_s"], again[0]["time_s"]);
    assert_eq!(r["time_breakdown"], again[0]["time_breakdown"]);
    let ib = ok_json_lines(&krylov(&[
        "solve",
        m,
        "--backend",
        "sim",
        "--fabric",
        "ib-qdr",
        "--ranks",
        "4",
        "--json",
    ]));
    assert_eq!(ib[0]["fabric"], "ib-qdr");
    assert_eq!(ib[0]["iterations"], r["iterations"]);
    assert_ne!(ib[0]["time_breakdown"]["allreduce"], t["allreduce"]);
    // Threads: measured, no fabric.
    let th = ok_json_lines(&krylov(&["solve", m, "--ranks", "4", "--json"]));
    assert_eq!(th[0]["modeled"], false);
    assert!(th[0]["fabric"].is_null());
    assert_eq!(th[0]["iterations"], r["iterations"]);
}

#[test]
fn sim_compare_rows_are_modeled() {
    let dir = tempfile::tempdir().unwrap();
    let m = poisson(dir.path(), 6);
    let rows = ok_json_lines(&krylov(&[
        "compare",
        m.to_str().unwrap(),
        "--methods",
        "cg,pipecg,prcg,pipeprcg,groppcg,plcg,cbcgr:4:mpk",
        "--backend",
        "sim",
        "--ranks",
        "3",
        "--fabric",
        "ib-qdr",
        "--json",
    ]));
    assert_eq!(rows.len(), 7);
    for r in &rows {
        assert_eq!(r["modeled"], true, "{r}");
        assert_eq!(r["fabric"], "ib-qdr");
        assert!(f(&r["per_eq_iteration"], "allreduce") > 0.0, "{r}");
    }
}

#[test]
fn bad_fabric_and_rank_counts_exit_2_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let m = poisson(dir.path(), 4);
    let m = m.to_str().unwrap();
    let sim = |extra: &[&str]| {
        let mut args = vec!["solve", m, "--backend", "sim"];
        args.extend_from_slice(extra);
        krylov(&args)
    };
    bad_input(&sim(&["--ranks", "17"]), "16 nodes");
    bad_input(&sim(&["--fabric", "no-such-fabric"]), "no-such-fabric");
    bad_input(
        &krylov(&["solve", m, "--fabric", "peach2"]),
        "applies to --backend sim only",
    );
    // The GPU of a preset without a [compute.gpu] model cannot be priced.
    bad_input(
        &sim(&["--device", "cuda", "--fabric", "tofu-fx10"]),
        "[compute.gpu]",
    );
    bad_input(
        &krylov(&[
            "compare",
            m,
            "--methods",
            "cg",
            "--backend",
            "sim",
            "--ranks",
            "17",
        ]),
        "16 nodes",
    );
}

#[test]
fn replace_every_shows_in_residual_replacements() {
    let dir = tempfile::tempdir().unwrap();
    let m = poisson(dir.path(), 8);
    let m = m.to_str().unwrap();
    let solve = |method: &str, extra: &[&str]| {
        let mut args = vec!["solve", m, "--method", method, "--ranks", "2", "--json"];
        args.extend_from_slice(extra);
        ok_json_lines(&krylov(&args)).remove(0)
    };
    for (method, per_iteration) in [("cg", 2), ("ccg", 1)] {
        let plain = solve(method, &[]);
        assert_eq!(plain["residual_replacements"], 0, "{method}");
        let every = solve(method, &["--replace-every", "5"]);
        let it = every["iterations"].as_u64().unwrap();
        assert!(it >= 10, "{method}: {it}");
        // One replacement at every multiple of 5 iterations done.
        assert_eq!(
            every["residual_replacements"].as_u64().unwrap(),
            it / 5,
            "{method}"
        );
        // Each costs one SpMV more (ccg: two) and no reduction: the reductions are the
        // iterations' and one final check's.
        assert_eq!(
            every["reductions"].as_u64().unwrap(),
            per_iteration * it + 1,
            "{method}"
        );
        let spmvs = every["halo_exchanges"].as_u64().unwrap();
        assert!(spmvs > it + 1, "{method}: {spmvs}");
    }
    bad_input(
        &krylov(&["solve", m, "--replace-every", "0"]),
        "--replace-every",
    );
}

/// `--backend sim --device cuda` needs no GPU and no `cuda` feature: the CPU computes the
/// same bits (iterations, residual history, true residual), the fabric's GPU model prices
/// the kernels (launch latency, device bandwidth) and the host-device copies (`transfer`),
/// so the modeled time differs from the CPU model's.
#[test]
fn sim_device_cuda_models_the_gpu_with_the_cpu_bits() {
    let dir = tempfile::tempdir().unwrap();
    let m = poisson(dir.path(), 8);
    let m = m.to_str().unwrap();
    for method in ["cg", "pipecg", "cacg", "cbcgr"] {
        let run = |device: &str| {
            let out = krylov(&[
                "solve",
                m,
                "--backend",
                "sim",
                "--fabric",
                "peach2",
                "--ranks",
                "3",
                "--method",
                method,
                if method == "cbcgr" {
                    "--mpk=true"
                } else {
                    "--mpk=false"
                },
                "--history=true",
                "--device",
                device,
                "--json",
            ]);
            ok_json_lines(&out).remove(0)
        };
        let (cpu, gpu) = (run("cpu"), run("cuda"));
        assert_eq!(gpu["device"], "cuda", "{method}");
        assert_eq!(cpu["device"], "cpu", "{method}");
        assert_eq!(gpu["converged"], true, "{method}");
        for key in [
            "iterations",
            "equivalent_iterations",
            "reductions",
            "halo_exchanges",
        ] {
            assert_eq!(gpu[key], cpu[key], "{method} {key}");
        }
        // The same bits: the residuals and their history are equal as numbers.
        assert_eq!(gpu["relres_true"], cpu["relres_true"], "{method}");
        assert_eq!(gpu["history"], cpu["history"], "{method}");
        // Modeled differently: GPU kernels and copies; the buckets still sum to the time.
        assert_ne!(gpu["time_s"], cpu["time_s"], "{method}");
        let t = &gpu["time_breakdown"];
        assert!(f(t, "transfer") > 0.0, "{method}: {t}");
        let sum: f64 = ["spmv", "blas", "allreduce", "halo", "transfer", "other"]
            .iter()
            .map(|b| f(t, b))
            .sum();
        assert!((sum - f(&gpu, "time_s")).abs() <= 1e-12 * f(&gpu, "time_s"));
        // Each kernel pays the K20X's 14 us launch: at 512 rows per rank the GPU model
        // is slower per iteration than the host model.
        assert!(f(t, "blas") > f(&cpu["time_breakdown"], "blas"), "{method}");
    }
}
