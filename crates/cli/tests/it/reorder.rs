//! End-to-end tests of `krylov solve --reorder`: the solve runs on the reordered system,
//! the solution comes back in the file's order.

use crate::common::krylov_in as krylov;
use std::path::Path;
use std::process::Output;

fn json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    serde_json::from_str(&stdout).expect("valid JSON")
}

fn gen_poisson2d(dir: &Path, n: usize) {
    let out = krylov(
        &["gen", "poisson2d", "--n", &n.to_string(), "-o", "p.mtx"],
        dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rcm_solves_and_returns_x_in_the_original_order() {
    let dir = tempfile::tempdir().unwrap();
    gen_poisson2d(dir.path(), 30);
    let base = ["solve", "p.mtx", "--ranks", "3", "--json"];

    let plain = json(&krylov(&base, dir.path()));
    assert_eq!(plain["reorder"], "none");

    let mut args = base.to_vec();
    args.extend(["--reorder", "rcm", "--output", "x.mtx"]);
    let rcm = json(&krylov(&args, dir.path()));
    assert_eq!(rcm["reorder"], "rcm");
    assert_eq!(rcm["converged"], true);
    assert_eq!(rcm["n"], 900);
    assert!(rcm["relres_true"].as_f64().unwrap() <= 1e-8, "{rcm}");
    assert!(rcm["error_vs_ones"].as_f64().unwrap() <= 1e-6, "{rcm}");
    assert!(rcm["setup_s"].as_f64().unwrap() > 0.0);

    let x = castack_sparse::io::read_vector_path(&dir.path().join("x.mtx")).unwrap();
    assert_eq!(x.len(), 900);
    for (i, v) in x.iter().enumerate() {
        assert!((v - 1.0).abs() <= 1e-6, "x[{i}] = {v}");
    }

    // Jacobi CG is invariant under symmetric permutations in exact arithmetic.
    let (it_plain, it_rcm) = (
        plain["iterations"].as_i64().unwrap(),
        rcm["iterations"].as_i64().unwrap(),
    );
    assert!(
        (it_plain - it_rcm).abs() <= 2,
        "iterations: none {it_plain}, rcm {it_rcm}"
    );
}

#[test]
fn rcm_keeps_a_file_rhs_and_x0_in_the_original_order() {
    // A non-constant right-hand side and its solution from an unreordered run, given as
    // x0 to a reordered run: converged before the first iteration only when b and x0 are
    // permuted consistently with A, and returned unchanged in the file's order.
    let dir = tempfile::tempdir().unwrap();
    gen_poisson2d(dir.path(), 7);
    let mut b = String::from("%%MatrixMarket matrix array real general\n49 1\n");
    for i in 0..49 {
        b.push_str(&format!("{}\n", i as f64 - 20.0));
    }
    std::fs::write(dir.path().join("b.mtx"), b).unwrap();
    let ref_out = krylov(
        &[
            "solve", "p.mtx", "--rhs", "b.mtx", "--json", "--output", "ref.mtx",
        ],
        dir.path(),
    );
    let _ = json(&ref_out);
    let reference = castack_sparse::io::read_vector_path(&dir.path().join("ref.mtx")).unwrap();
    let rcm = json(&krylov(
        &[
            "solve",
            "p.mtx",
            "--rhs",
            "b.mtx",
            "--x0",
            "ref.mtx",
            "--reorder",
            "rcm",
            "--ranks",
            "2",
            "--json",
            "--output",
            "y.mtx",
        ],
        dir.path(),
    ));
    assert_eq!(rcm["converged"], true);
    assert_eq!(rcm["iterations"], 0, "x0 is already the solution: {rcm}");
    let y = castack_sparse::io::read_vector_path(&dir.path().join("y.mtx")).unwrap();
    for (r, v) in reference.iter().zip(&y) {
        assert!((r - v).abs() <= 1e-12 * r.abs().max(1.0), "{r} vs {v}");
    }
}

#[test]
fn reorder_from_config_and_bad_names() {
    let dir = tempfile::tempdir().unwrap();
    gen_poisson2d(dir.path(), 5);
    std::fs::write(dir.path().join("s.toml"), "reorder = \"rcm\"\n").unwrap();
    let r = json(&krylov(
        &["solve", "p.mtx", "--config", "s.toml", "--json"],
        dir.path(),
    ));
    assert_eq!(r["reorder"], "rcm");
    let r = json(&krylov(
        &[
            "solve",
            "p.mtx",
            "--config",
            "s.toml",
            "--reorder",
            "none",
            "--json",
        ],
        dir.path(),
    ));
    assert_eq!(r["reorder"], "none");

    let out = krylov(&["solve", "p.mtx", "--reorder", "amd"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("rcm"), "{stderr}");
    std::fs::write(dir.path().join("bad.toml"), "reorder = \"amd\"\n").unwrap();
    let out = krylov(&["solve", "p.mtx", "--config", "bad.toml"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("rcm"), "{stderr}");
}
