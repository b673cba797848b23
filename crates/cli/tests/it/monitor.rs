//! `krylov solve --monitor` (a line per iteration on stderr, the true residual at the end)
//! and `--eigs` (Ritz-value estimates in the text output and the report).

use crate::common::{json_lines, krylov_in as krylov};
use std::path::Path;

/// `diag(1..=n)` as a Matrix Market file in `dir`.
fn diagonal(dir: &Path, n: usize) {
    let mut text = format!("%%MatrixMarket matrix coordinate real symmetric\n{n} {n} {n}\n");
    for i in 1..=n {
        text.push_str(&format!("{i} {i} {i}\n"));
    }
    std::fs::write(dir.join("d.mtx"), text).unwrap();
}

fn poisson(dir: &Path) {
    let out = krylov(&["gen", "poisson3d", "--n", "8", "-o", "p.mtx"], dir);
    assert!(out.status.success());
}

/// The `(iteration, value)` of the monitor lines of `which` residual in `stderr`.
fn monitor_lines(stderr: &str, which: &str) -> Vec<(usize, f64)> {
    let tag = format!(" KSP {which} residual ||r||/||b|| (original system) ");
    stderr
        .lines()
        .filter(|l| l.contains(&tag))
        .map(|l| {
            let (it, rest) = l.split_once(&tag).unwrap();
            let value = rest.split(',').next().unwrap();
            (it.trim().parse().unwrap(), value.parse().unwrap())
        })
        .collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

#[test]
fn monitor_prints_each_iterations_recurrence_residual_and_the_true_one_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    poisson(dir.path());
    for (method, per_line) in [("cg", 1), ("pipecg", 1), ("cbcg", 4)] {
        let args = [
            "solve",
            "p.mtx",
            "--ranks",
            "3",
            "--method",
            method,
            "--k",
            "4",
            "--json",
            "--history",
            "--monitor",
        ];
        let out = krylov(&args, dir.path());
        let r = &json_lines(&out)[0];
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines = monitor_lines(&stderr, "recurrence");
        let history: Vec<f64> = r["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        // One line per iteration (outer step for cbcg) from rank 0 only, in CG-equivalent
        // iterations, each the history's value.
        assert_eq!(
            lines.len(),
            r["iterations"].as_u64().unwrap() as usize,
            "{stderr}"
        );
        assert_eq!(lines.len(), history.len(), "{method}");
        for (j, (&(it, v), h)) in lines.iter().zip(&history).enumerate() {
            assert_eq!(it, (j + 1) * per_line, "{method}: {stderr}");
            assert!(close(v, *h, 1e-6), "{method} {it}: {v} vs {h}");
        }
        let last = monitor_lines(&stderr, "true");
        assert_eq!(last.len(), 1, "{stderr}");
        assert_eq!(
            last[0].0 as u64,
            r["equivalent_iterations"].as_u64().unwrap()
        );
        assert!(close(last[0].1, r["relres_true"].as_f64().unwrap(), 1e-6));
        assert!(stderr.trim_end().ends_with(", converged"), "{stderr}");
        // Nothing else on stderr.
        assert_eq!(stderr.lines().count(), lines.len() + 1, "{stderr}");
    }
    // Without --monitor (stderr is not a terminal here: no progress bar), stderr is empty.
    let out = krylov(&["solve", "p.mtx", "--json"], dir.path());
    json_lines(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn eigs_reports_the_extreme_eigenvalues_of_the_operator_iterated_on() {
    let dir = tempfile::tempdir().unwrap();
    diagonal(dir.path(), 100);
    for method in ["cg", "ccg", "pipecg", "cacg"] {
        let args = [
            "solve",
            "d.mtx",
            "--rhs",
            "ones",
            "--precond",
            "none",
            "--method",
            method,
            "--eigs",
            "--json",
            "--ranks",
            "2",
        ];
        let r = &json_lines(&krylov(&args, dir.path()))[0];
        let e = &r["eigs"];
        let get = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{method}: {r}"));
        assert!(close(get("lambda_min"), 1.0, 1e-6), "{method}: {e}");
        assert!(close(get("lambda_max"), 100.0, 1e-6), "{method}: {e}");
        assert!(close(get("condition"), 100.0, 1e-5), "{method}: {e}");
    }
    // Not asked: null, never absent.
    let r = &json_lines(&krylov(&["solve", "d.mtx", "--json"], dir.path()))[0];
    assert!(r.get("eigs").is_some_and(|v| v.is_null()), "{r}");
    // The text output names the operator: with Jacobi a diagonal matrix becomes I.
    let out = krylov(&["solve", "d.mtx", "--rhs", "ones", "--eigs"], dir.path());
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("eigs of"))
        .expect("an eigs line");
    assert!(line.starts_with("eigs of S A S (Jacobi-scaled)"), "{line}");
    assert!(line.contains("lambda_max 1.000000e0"), "{line}");
}

#[test]
fn eigs_with_a_block_method_is_bad_input_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    poisson(dir.path());
    for method in ["cbcg", "cbcgr"] {
        let out = krylov(
            &["solve", "p.mtx", "--method", method, "--eigs"],
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("eigs") && stderr.contains(method),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}
