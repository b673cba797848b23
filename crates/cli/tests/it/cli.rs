//! End-to-end tests of the `krylov` binary: the CLI contract's exit codes, one-line errors,
//! JSON report and atomic outputs.

use crate::common::krylov_in as krylov;
use std::path::{Path, PathBuf};
use std::process::Output;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Exit code 2, exactly one line on stderr naming `needle`, nothing on stdout, no output.
fn assert_bad_input(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.contains(needle), "'{needle}' not in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

fn json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    serde_json::from_str(&stdout).expect("valid JSON")
}

const GOOD: &str =
    "%%MatrixMarket matrix coordinate real symmetric\n3 3 5\n1 1 4\n2 1 -1\n2 2 4\n3 2 -1\n3 3 4\n";

#[test]
fn gen_then_solve_converges_with_every_report_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = krylov(
        &["gen", "poisson3d", "--n", "12", "-o", "p.mtx"],
        dir.path(),
    );
    assert!(out.status.success());
    let out = krylov(
        &[
            "solve",
            "p.mtx",
            "--ranks",
            "4",
            "--json",
            "--output",
            "x.mtx",
            "--report",
            "r.json",
            "--history",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&out);
    for field in [
        "schema_version",
        "method",
        "k",
        "basis",
        "mpk",
        "precond",
        "reorder",
        "backend",
        "fabric",
        "device",
        "ranks",
        "threads",
        "n",
        "nnz",
        "converged",
        "iterations",
        "equivalent_iterations",
        "reductions",
        "setup_reductions",
        "halo_exchanges",
        "residual_replacements",
        "redundant_flops",
        "relres_recurrence",
        "relres_true",
        "error_vs_ones",
        "setup_s",
        "time_s",
        "time_breakdown",
        "modeled",
        "history",
    ] {
        assert!(r.get(field).is_some(), "missing {field}");
    }
    assert_eq!(r["schema_version"], 1);
    assert_eq!(r["converged"], true);
    assert!(r["relres_true"].as_f64().unwrap() < 1e-8);
    assert!(r["error_vs_ones"].as_f64().unwrap() < 1e-6);
    assert_eq!(r["n"], 1728);
    assert!(r["k"].is_null() && r["fabric"].is_null());
    let tb = &r["time_breakdown"];
    let sum: f64 = ["spmv", "blas", "allreduce", "halo", "other"]
        .iter()
        .map(|k| tb[k].as_f64().unwrap())
        .sum();
    assert!((sum - r["time_s"].as_f64().unwrap()).abs() <= 1e-9 + 1e-6 * sum);
    assert_eq!(
        r["history"].as_array().unwrap().len(),
        r["equivalent_iterations"].as_u64().unwrap() as usize
    );
    // The solution file: an array of n values close to one.
    let x = std::fs::read_to_string(dir.path().join("x.mtx")).unwrap();
    assert!(x.starts_with("%%MatrixMarket matrix array real general"));
    let values: Vec<f64> = x
        .lines()
        .filter(|l| !l.starts_with('%'))
        .skip(1)
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(values.len(), 1728);
    assert!(values.iter().all(|v| (v - 1.0).abs() < 1e-6));
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(rep["iterations"], r["iterations"]);
    // No temporary files left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn more_ranks_than_rows_still_solves() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.mtx", GOOD);
    let out = krylov(&["solve", "a.mtx", "--ranks", "7", "--json"], dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["converged"], true);
}

#[test]
fn default_threads_share_the_cores_among_the_ranks() {
    // CLI.md: `--threads` is per rank, default max(1, cores / ranks on this node).
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.mtx", GOOD);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for ranks in [1, 2, 3, cores + 1] {
        let p = ranks.to_string();
        for backend in ["threads", "sim"] {
            let args = [
                "solve",
                "a.mtx",
                "--ranks",
                &p,
                "--backend",
                backend,
                "--json",
            ];
            let out = krylov(&args, dir.path());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r = json(&out);
            assert_eq!(r["ranks"], ranks, "{backend}");
            assert_eq!(
                r["threads"],
                (cores / ranks).max(1),
                "{backend}, {ranks} ranks"
            );
            assert_eq!(r["converged"], true);
        }
    }
    // An explicit count is every rank's, whatever the cores.
    let args = ["solve", "a.mtx", "--ranks", "2", "--threads", "3", "--json"];
    let out = krylov(&args, dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["threads"], 3);
}

#[test]
fn config_file_is_overridden_by_flags() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.mtx", GOOD);
    write(
        dir.path(),
        "s.toml",
        "ranks = 2\nprecond = \"none\"\nmax_iter = 1\n",
    );
    let out = krylov(
        &[
            "solve",
            "a.mtx",
            "--config",
            "s.toml",
            "--max-iter",
            "50",
            "--json",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&out);
    assert_eq!(r["ranks"], 2);
    assert_eq!(r["precond"], "none");
    assert_eq!(r["max_iter"], 50);
    write(dir.path(), "bad.toml", "rankz = 2\n");
    let out = krylov(&["solve", "a.mtx", "--config", "bad.toml"], dir.path());
    assert_bad_input(&out, "rankz");
}

#[test]
fn strict_turns_non_convergence_into_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = krylov(
        &["gen", "poisson2d", "--n", "20", "-o", "p.mtx"],
        dir.path(),
    );
    assert!(out.status.success());
    let out = krylov(&["solve", "p.mtx", "--max-iter", "3", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["converged"], false);
    let out = krylov(
        &["solve", "p.mtx", "--max-iter", "3", "--strict"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn bad_inputs_exit_2_with_one_line_and_no_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "a.mtx", GOOD);
    let cases: Vec<(String, &str)> = vec![
        (
            "%%MatrixMarket matrix coordinate real symmetric\n3 3 5\n1 1 4\n".into(),
            ":3",
        ),
        (GOOD.replace("%%MatrixMarket", "%%MatrixMarkt"), ":1"),
        (
            GOOD.replace("%%MatrixMarket matrix coordinate real symmetric\n", ""),
            ":1",
        ),
        (format!("{GOOD}1 1 4\n"), ":8"),
        (GOOD.replace("3 3 4", "4 3 4"), ":7"),
        (GOOD.replace("2 2 4", "2 2 four"), ":5"),
        (GOOD.replace("3 3 5", "3 4 5"), "3 x 4"),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 2\n1 2 -1\n2 2 2\n".into(),
            "not symmetric",
        ),
        (GOOD.replace("2 2 4", "2 2 0"), "row 2"),
        (GOOD.replace("2 2 4", "2 2 -3"), "row 2"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let name = format!("bad{i}.mtx");
        write(d, &name, text);
        let out = krylov(
            &["solve", &name, "--output", "x.mtx", "--report", "r.json"],
            d,
        );
        assert_bad_input(&out, needle);
        assert!(out.status.code() == Some(2), "case {i}");
        assert!(
            !d.join("x.mtx").exists() && !d.join("r.json").exists(),
            "case {i}"
        );
    }
    assert_bad_input(&krylov(&["solve", "missing.mtx"], d), "missing.mtx");
    assert_bad_input(&krylov(&["solve", "a.mtx", "--ranks", "0"], d), "--ranks");
    assert_bad_input(&krylov(&["solve", "a.mtx", "--method", "nope"], d), "nope");
    assert_bad_input(
        &krylov(&["solve", "a.mtx", "--allreduce", "dissemination"], d),
        "bit-identical",
    );
    assert_bad_input(
        &krylov(&["solve", "a.mtx", "--backend", "sim", "--ranks", "17"], d),
        "16 nodes",
    );
    assert_bad_input(&krylov(&["solve", "a.mtx", "--rhs", "b.mtx"], d), "b.mtx");
    assert_bad_input(&krylov(&["gen", "poisson3d", "--n", "0"], d), "");
}

#[test]
fn nnz_partition_and_allgather_spmv_give_the_same_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let out = krylov(
        &[
            "gen",
            "poisson3d",
            "--n",
            "10",
            "--heterogeneous",
            "--seed",
            "3",
            "-o",
            "h.mtx",
        ],
        dir.path(),
    );
    assert!(out.status.success());
    let base = json(&krylov(&["solve", "h.mtx", "--json"], dir.path()));
    for extra in [
        ["--partition", "nnz", "--spmv", "halo"],
        ["--partition", "rows", "--spmv", "allgather"],
        ["--partition", "nnz", "--spmv", "allgather"],
    ] {
        let mut args = vec!["solve", "h.mtx", "--json", "--ranks", "3"];
        args.extend(extra);
        let out = krylov(&args, dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = json(&out);
        assert_eq!(r["converged"], true, "{extra:?}");
        assert_eq!(r["partition"], extra[1]);
        assert_eq!(r["spmv"], extra[3]);
        let (a, b) = (
            r["iterations"].as_i64().unwrap(),
            base["iterations"].as_i64().unwrap(),
        );
        assert!((a - b).abs() <= 1, "{extra:?}: {a} vs {b}");
    }
}

#[test]
fn compare_prints_one_row_per_item_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    assert!(krylov(
        &["gen", "poisson2d", "--n", "16", "-o", "p.mtx"],
        dir.path()
    )
    .status
    .success());
    let out = krylov(
        &[
            "compare",
            "p.mtx",
            "--methods",
            "cg,cg:precond_ignored",
            "--json",
        ],
        dir.path(),
    );
    assert_bad_input(&out, "precond_ignored");
    let out = krylov(
        &[
            "compare",
            "p.mtx",
            "--methods",
            "cg,cacg:8",
            "--ranks",
            "2",
            "--json",
            "--plot",
            "c.svg",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    for (row, label) in rows.iter().zip(["cg", "cacg(k=8,chebyshev)"]) {
        assert_eq!(row["label"], label);
        assert_eq!(row["converged"], true);
        let eq = row["equivalent_iterations"].as_f64().unwrap();
        let per = row["s_per_eq_iteration"].as_f64().unwrap();
        assert!((per * eq - row["time_s"].as_f64().unwrap()).abs() < 1e-9);
        assert!(row["per_eq_iteration"]["allreduce"].is_number());
    }
    let svg = std::fs::read_to_string(dir.path().join("c.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("cacg(k=8,chebyshev)"));
}

#[cfg(unix)]
#[test]
fn output_files_are_ordinary_readable_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    assert!(
        krylov(&["gen", "poisson2d", "--n", "4", "-o", "p.mtx"], dir.path())
            .status
            .success()
    );
    let out = krylov(
        &["solve", "p.mtx", "--output", "x.mtx", "--report", "r.json"],
        dir.path(),
    );
    assert!(out.status.success());
    for f in ["p.mtx", "x.mtx", "r.json"] {
        let mode = std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644, "{f}");
    }
}

#[test]
fn every_method_solves_from_the_command_line_with_its_promised_reductions() {
    let dir = tempfile::tempdir().unwrap();
    assert!(krylov(
        &["gen", "poisson3d", "--n", "10", "-o", "p.mtx"],
        dir.path()
    )
    .status
    .success());
    let cg = json(&krylov(
        &["solve", "p.mtx", "--ranks", "3", "--json"],
        dir.path(),
    ));
    let cg_iters = cg["iterations"].as_u64().unwrap();
    for method in ["ccg", "pipecg"] {
        let r = json(&krylov(
            &[
                "solve", "p.mtx", "--ranks", "3", "--json", "--method", method,
            ],
            dir.path(),
        ));
        assert_eq!(r["converged"], true, "{method}");
        assert!(r["relres_true"].as_f64().unwrap() <= 1e-8);
        let (it, rep) = (
            r["iterations"].as_u64().unwrap(),
            r["residual_replacements"].as_u64().unwrap(),
        );
        // One reduction per iteration, plus the final check and one per replacement
        // after a failed check (pipecg's automatic replacements cost none).
        let red = r["reductions"].as_u64().unwrap();
        if method == "pipecg" {
            assert!(red > it && red <= it + 1 + rep, "{method}: {r}");
        } else {
            assert_eq!(red, it + 1 + rep, "{method}");
        }
        assert!(
            it.abs_diff(cg_iters) <= cg_iters / 10 + 2,
            "{method}: {it} vs cg {cg_iters}"
        );
        assert!(r["k"].is_null() && r["basis"].is_null());
    }
    for method in ["cbcg", "cbcgr"] {
        for basis in ["chebyshev", "newton", "monomial"] {
            let r = json(&krylov(
                &[
                    "solve", "p.mtx", "--ranks", "3", "--json", "--method", method, "--k", "4",
                    "--basis", basis,
                ],
                dir.path(),
            ));
            assert_eq!(r["converged"], true, "{method} {basis}");
            assert!(r["relres_true"].as_f64().unwrap() <= 1e-8);
            assert_eq!(r["k"], 4);
            assert_eq!(r["basis"], basis);
            let (outer, eq) = (
                r["iterations"].as_u64().unwrap(),
                r["equivalent_iterations"].as_u64().unwrap(),
            );
            assert_eq!(eq, 4 * outer);
            // Far fewer reductions than CG's two per iteration.
            assert!(r["reductions"].as_u64().unwrap() < cg["reductions"].as_u64().unwrap() / 2);
            // Chebyshev and Newton need a spectral estimate (warm-up reductions in setup).
            if basis != "monomial" {
                let (setup, cg_setup) = (&r["setup_reductions"], &cg["setup_reductions"]);
                assert!(
                    setup.as_u64().unwrap() > cg_setup.as_u64().unwrap(),
                    "{method} {basis}"
                );
            }
        }
    }
}

#[test]
fn mpk_cuts_halo_exchanges_without_changing_the_iterates() {
    let dir = tempfile::tempdir().unwrap();
    assert!(krylov(
        &["gen", "poisson2d", "--n", "30", "-o", "p.mtx"],
        dir.path()
    )
    .status
    .success());
    for method in ["cbcg", "cbcgr", "cacg"] {
        let base = [
            "solve", "p.mtx", "--ranks", "4", "--json", "--method", method, "--k", "4",
        ];
        let plain = json(&krylov(&base, dir.path()));
        let mut with = base.to_vec();
        with.push("--mpk");
        let mpk = json(&krylov(&with, dir.path()));
        assert_eq!(mpk["converged"], true, "{method}");
        assert_eq!(mpk["mpk"], true);
        assert_eq!(mpk["iterations"], plain["iterations"], "{method}");
        assert_eq!(mpk["reductions"], plain["reductions"], "{method}");
        let (h_mpk, h_plain) = (
            mpk["halo_exchanges"].as_u64().unwrap(),
            plain["halo_exchanges"].as_u64().unwrap(),
        );
        assert!(2 * h_mpk < h_plain, "{method}: {h_mpk} vs {h_plain}");
        assert!(mpk["redundant_flops"].as_u64().unwrap() > 0);
        assert_eq!(plain["redundant_flops"], 0);
    }
    let out = krylov(&["solve", "p.mtx", "--mpk"], dir.path());
    assert_bad_input(&out, "mpk");
}

#[test]
fn thread_ranks_above_the_cap_are_bad_input_and_hundreds_of_ranks_solve() {
    // castack_collectives::MAX_THREAD_RANKS: one process runs at most 4096 thread ranks;
    // more is one line naming the cap, exit 2 (it aborted allocating a P x P channel table).
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.mtx", GOOD);
    let out = krylov(&["solve", "a.mtx", "--ranks", "4097"], dir.path());
    assert_bad_input(&out, "4096 thread ranks");
    let out = krylov(
        &["compare", "a.mtx", "--methods", "cg", "--ranks", "9000"],
        dir.path(),
    );
    assert_bad_input(&out, "4096 thread ranks");
    // Many more ranks than rows, each talking only to its partners.
    let out = krylov(&["gen", "poisson2d", "--n", "4", "-o", "p.mtx"], dir.path());
    assert!(out.status.success());
    let out = krylov(&["solve", "p.mtx", "--ranks", "256", "--json"], dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    assert_eq!(report["converged"], true);
    assert_eq!(report["ranks"], 256);
}
