//! `--device cuda` and `krylov gpu-check` on the paths testable without a GPU: a build
//! without the `cuda` feature, and (with it) a machine without the NVIDIA driver. On a
//! machine with a GPU the feature build checks the refusal of unported solves and runs the
//! self-check on a small grid.

use std::path::Path;
use std::process::{Command, Output};

fn krylov(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krylov"))
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
    let driver = castack_krylov::device::cuda::driver_present();
    for out in cuda_requests(dir.path()) {
        if driver {
            // A GPU machine: no device, or a device the solvers are not ported to yet.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let why = ["not yet ported", "no CUDA device"];
            assert!(why.iter().any(|w| stderr.contains(w)), "{stderr}");
            assert_refused(&out, &["--device cuda"]);
        } else {
            assert_refused(&out, &["--device cuda", "no NVIDIA driver", "libcuda.so"]);
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
    // With the feature the sizes are checked before any device is opened.
    let needle = if cfg!(feature = "cuda") {
        "--n"
    } else {
        "--features cuda"
    };
    assert_refused(&out, &["gpu-check", needle]);
}
