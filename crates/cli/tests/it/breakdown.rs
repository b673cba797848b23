//! A breakdown loses nothing (issue 25, defect 3): `solve` still prints and writes the
//! report (`stop_reason: "breakdown"`, `breakdown: {quantity, value, iteration}`) and the
//! last iterate, then exits 1 with one line naming the remedy; `compare` prints every
//! row, marks the failed one and exits 1.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::krylov_in as krylov;

/// `[[1, 2], [2, 1]]` (eigenvalues 3 and -1; unit diagonal, so Jacobi scaling is the
/// identity and setup accepts it) and `b = (1, 0)`: cg, ccg and pipecg take one step to
/// `x = (1, 0)` exactly, then meet `p^T A p = -12`; the s-step methods' Chebyshev
/// spectral estimate meets it in its second warm-up step.
fn indefinite(dir: &Path) {
    std::fs::write(
        dir.join("a.mtx"),
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 1\n2 1 2\n2 2 1\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.mtx"),
        "%%MatrixMarket matrix array real general\n2 1\n1\n0\n",
    )
    .unwrap();
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit 1 and exactly one `error:` line on stderr containing every needle.
fn assert_failed(out: &Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    for n in needles {
        assert!(lines[0].contains(n), "'{n}' not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The values of a Matrix Market array file.
fn array_values(path: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('%'));
    let size = lines.next().expect("size line");
    assert_eq!(size.split_whitespace().nth(1), Some("1"), "{text}");
    lines.map(|l| l.trim().parse().unwrap()).collect()
}

fn assert_breakdown_report(r: &Value, method: &str) {
    assert_eq!(r["method"], method, "{r}");
    assert_eq!(r["converged"], false, "{r}");
    assert_eq!(r["stop_reason"], "breakdown", "{r}");
    assert_eq!(r["breakdown"]["quantity"], "p^T A p", "{r}");
    assert_eq!(r["breakdown"]["iteration"], 1, "{r}");
    assert_eq!(r["breakdown"]["value"].as_f64(), Some(-12.0), "{r}");
    assert_eq!(r["iterations"], 1, "{r}");
    // b - A x = (0, -2) for the last iterate x = (1, 0).
    let rel = r["relres_true"].as_f64().unwrap();
    assert!((rel - 2.0).abs() < 1e-14, "{r}");
}

#[test]
fn solve_writes_the_report_and_the_last_iterate_then_exits_1_naming_the_remedy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    indefinite(d);
    for (method, remedy) in [
        ("cg", "symmetric positive definite"),
        ("ccg", "--method cg"),
        ("pipecg", "--replace-every"),
        ("prcg", "--method cg"),
        ("pipeprcg", "--method cg"),
        ("groppcg", "--method cg"),
    ] {
        for ranks in ["1", "2"] {
            let (report, output) = (
                format!("r-{method}-{ranks}.json"),
                format!("x-{method}-{ranks}.mtx"),
            );
            let out = krylov(
                &[
                    "solve", "a.mtx", "--rhs", "b.mtx", "--method", method, "--ranks", ranks,
                    "--report", &report, "--output", &output, "--json",
                ],
                d,
            );
            assert_failed(
                &out,
                &[
                    method,
                    "broke down at iteration 1",
                    "p^T A p = -1.2e1",
                    remedy,
                ],
            );
            let printed = json_lines(&out);
            assert_eq!(printed.len(), 1, "one JSON object");
            assert_breakdown_report(&printed[0], method);
            let written: Value =
                serde_json::from_str(&std::fs::read_to_string(d.join(&report)).unwrap()).unwrap();
            assert_breakdown_report(&written, method);
            let x = array_values(&d.join(&output));
            assert_eq!(x.len(), 2, "{method}: n values");
            assert!((x[0] - 1.0).abs() < 1e-15 && x[1].abs() < 1e-15, "{x:?}");
        }
    }
    // Without --json: the human summary says so, and the run still fails.
    let out = krylov(
        &[
            "solve", "a.mtx", "--rhs", "b.mtx", "--method", "cacg", "--k", "2",
        ],
        d,
    );
    assert_failed(&out, &["cacg", "spectral estimate", "--k", "--basis"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("BREAKDOWN at iteration"), "{text}");
    // plcg's shifts come from the same warm-up, which finds the matrix indefinite.
    let out = krylov(
        &[
            "solve", "a.mtx", "--rhs", "b.mtx", "--method", "plcg", "--depth", "2",
        ],
        d,
    );
    assert_failed(&out, &["plcg", "spectral estimate", "= -1.2e1", "--depth"]);
}

#[test]
fn compare_prints_every_row_marks_the_breakdown_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    indefinite(d);
    // One iteration: cg stops out of iterations (no failure without --strict) before its
    // second step; cacg's spectral estimate breaks down.
    let args = [
        "compare",
        "a.mtx",
        "--rhs",
        "b.mtx",
        "--methods",
        "cg,cacg:2",
        "--max-iter",
        "1",
    ];
    let mut json_args = args.to_vec();
    json_args.extend(["--json", "--plot", "c.svg"]);
    let out = krylov(&json_args, d);
    assert_failed(
        &out,
        &[
            "1 of 2 methods failed",
            "cacg(k=2,chebyshev) broke down",
            "--k",
        ],
    );
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 2, "every row printed");
    assert_eq!(rows[0]["label"], "cg");
    assert_eq!(rows[0]["stop_reason"], "max_iterations");
    assert_eq!(rows[0]["failed"], false);
    assert!(rows[0]["breakdown"].is_null());
    assert_eq!(rows[1]["label"], "cacg(k=2,chebyshev)");
    assert_eq!(rows[1]["stop_reason"], "breakdown");
    assert_eq!(rows[1]["failed"], true);
    assert!(rows[1]["breakdown"]["quantity"]
        .as_str()
        .unwrap()
        .contains("spectral estimate"));
    assert!(d.join("c.svg").exists(), "the plot is written too");
    // The table marks the row.
    let out = krylov(&args, d);
    assert_failed(&out, &["cacg(k=2,chebyshev)"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("cacg(k=2,chebyshev)"))
        .unwrap_or_else(|| panic!("no cacg row: {table}"));
    assert!(row.contains("breakdown"), "{row}");
    assert!(table.lines().any(|l| l.starts_with("cg ")), "{table}");
    // --strict makes the non-converged cg row a failure too.
    let mut strict = args.to_vec();
    strict.push("--strict");
    let out = krylov(&strict, d);
    assert_failed(&out, &["2 of 2 methods failed", "cg did not converge"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAILED"));
}

#[test]
fn compare_refuses_method_and_an_unwritable_plot_before_solving() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    indefinite(d);
    for (extra, needle) in [
        (&["--method", "pipecg"][..], "--methods"),
        (&["--plot", "."][..], "cannot write"),
    ] {
        let mut args = vec!["compare", "a.mtx", "--methods", "cg"];
        args.extend_from_slice(extra);
        let out = krylov(&args, d);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "'{needle}' not in: {err}");
        assert!(out.stdout.is_empty(), "nothing solved");
    }
}

#[test]
fn compare_labels_name_k_basis_and_mpk() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(krylov(&["gen", "poisson2d", "--n", "8", "-o", "p.mtx"], d)
        .status
        .success());
    let out = krylov(
        &[
            "compare",
            "p.mtx",
            "--methods",
            "cg,cacg,cbcgr:3:newton,cbcg:2:monomial:mpk",
            "--k",
            "5",
            "--json",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let labels: Vec<Value> = json_lines(&out)
        .iter()
        .map(|r| r["label"].clone())
        .collect();
    assert_eq!(
        labels,
        [
            "cg",
            "cacg(k=5,chebyshev)",
            "cbcgr(k=3,newton)",
            "cbcg(k=2,monomial,mpk)"
        ]
    );
    // --mpk applies to every s-step item, as --k and --basis do.
    let out = krylov(
        &[
            "compare",
            "p.mtx",
            "--methods",
            "cg,cacg:2",
            "--mpk",
            "--json",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = json_lines(&out);
    assert_eq!(rows[0]["mpk"], false);
    assert_eq!(rows[1]["mpk"], true);
    assert_eq!(rows[1]["label"], "cacg(k=2,chebyshev,mpk)");
}
