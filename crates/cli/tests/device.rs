//! `--device cuda` and `krylov gpu-check` on the paths testable without a GPU: a build
//! without the `cuda` feature, and (with it) a machine without the NVIDIA driver or
//! without a GPU. On a machine with a GPU the feature build solves on it and runs the
//! self-check on a small grid.

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test: `KRYLOV_BIN` when set (the GPU check folder of `cargo xtask
/// test-gpu --prepare` runs this test's executable beside a prebuilt `krylov`), else the
/// one Cargo built.
fn krylov(args: &[&str], dir: &Path) -> Output {
    let bin = std::env::var_os("KRYLOV_BIN").map_or_else(
        || env!("CARGO_BIN_EXE_krylov").into(),
        std::path::PathBuf::from,
    );
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the krylov binary runs")
}

/// Exit code 2, exactly one line on stderr containing every needle, nothing on stdout.
fn assert_refused(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "'{needle}' not in: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

const SPD: &str =
    "%%MatrixMarket matrix coordinate real symmetric\n3 3 5\n1 1 4\n2 1 -1\n2 2 4\n3 2 -1\n3 3 4\n";

/// The solve invocations that ask for the GPU: by flag, by config file, and via compare.
fn cuda_requests(dir: &Path) -> Vec<Output> {
    std::fs::write(dir.join("a.mtx"), SPD).unwrap();
    std::fs::write(dir.join("c.toml"), "device = \"cuda\"\n").unwrap();
    vec![
        krylov(&["solve", "a.mtx", "--device", "cuda"], dir),
        krylov(&["solve", "a.mtx", "--config", "c.toml"], dir),
        krylov(
            &[
                "compare",
                "a.mtx",
                "--methods",
                "cg,ccg",
                "--device",
                "cuda",
            ],
            dir,
        ),
    ]
}

#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_feature_cuda_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let rebuild = "built without the cuda feature; rebuild with --features cuda";
    for out in cuda_requests(dir.path()) {
        assert_refused(&out, &["--device cuda", rebuild]);
    }
    assert_refused(&krylov(&["gpu-check"], dir.path()), &["gpu-check", rebuild]);
    // The CPU device still works.
    let ok = krylov(&["solve", "a.mtx", "--device", "cpu"], dir.path());
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[cfg(feature = "cuda")]
#[test]
fn with_the_feature_cuda_fails_cleanly_without_driver_or_port() {
    let dir = tempfile::tempdir().unwrap();
    let driver = castack_krylov::cuda::driver_present();
    let gpus = castack_krylov::cuda::device_count().unwrap_or(0);
    for out in cuda_requests(dir.path()) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !driver {
            assert_refused(&out, &["--device cuda", "no NVIDIA driver", "libcuda.so"]);
        } else if gpus == 0 {
            assert_refused(&out, &["--device cuda", "no CUDA device"]);
        } else {
            // A GPU machine: the solve runs there.
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
    let check = krylov(&["gpu-check", "--n", "12", "--reps", "2"], dir.path());
    if driver {
        let stdout = String::from_utf8_lossy(&check.stdout);
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
        assert_eq!(report["all_ok"], true, "{stdout}");
        assert_eq!(check.status.code(), Some(0));
    } else {
        assert_refused(&check, &["gpu-check", "no NVIDIA driver"]);
    }
}

#[test]
fn gpu_check_rejects_a_zero_grid_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = krylov(&["gpu-check", "--n", "0"], dir.path());
    // The flag's range is checked when flags are parsed, before any device is opened
    // (with or without the feature).
    assert_refused(&out, &["--n", "at least 1"]);
}
