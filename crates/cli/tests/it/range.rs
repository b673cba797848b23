//! Honest stops at the edges of double precision (issue 47, items 3 and 4): a tolerance
//! below what double precision attains is `stagnated` with a line saying so (exit 0, not a
//! breakdown blaming the matrix); values that leave the double range are named as such,
//! never diagnosed as "not SPD"; a subnormal diagonal entry solves.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::krylov_in as krylov;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `name.mtx`: the 3-D Poisson matrix of side 10 (n = 1000).
fn poisson(dir: &Path) {
    let out = krylov(&["gen", "poisson3d", "--n", "10", "-o", "p.mtx"], dir);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A Matrix Market array file of `n` entries, each `v`.
fn constant_vector(dir: &Path, name: &str, n: usize, v: &str) {
    let mut text = format!("%%MatrixMarket matrix array real general\n{n} 1\n");
    for _ in 0..n {
        text.push_str(v);
        text.push('\n');
    }
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn a_tolerance_below_attainable_accuracy_is_a_stagnation_that_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    poisson(d);
    // pipecg at 1e-50 met a negative curvature at rounding level, cg at 1e-200 a NaN one
    // after its recurrence underflowed: both were "breakdowns" (exit 1) before.
    for (method, tol) in [("pipecg", "1e-50"), ("cg", "1e-200"), ("cacg", "1e-50")] {
        let what = format!("{method} --tol {tol}");
        let human = krylov(&["solve", "p.mtx", "--method", method, "--tol", tol], d);
        assert_eq!(human.status.code(), Some(0), "{what}: {}", stderr(&human));
        let text = stdout(&human);
        assert!(text.contains("NOT converged (Stagnated)"), "{what}: {text}");
        assert!(
            text.contains("below what double precision attains for this system"),
            "{what}: {text}"
        );
        let json = krylov(
            &["solve", "p.mtx", "--method", method, "--tol", tol, "--json"],
            d,
        );
        let r: Value = serde_json::from_str(stdout(&json).trim()).unwrap();
        assert_eq!(r["stop_reason"], "stagnated", "{what}: {r}");
        assert_eq!(r["breakdown"], Value::Null, "{what}: {r}");
        let rt = r["relres_true"].as_f64().unwrap();
        assert!(rt > 0.0 && rt < 1e-13, "{what}: {r}");
        // `--strict` makes the unmet tolerance a failed run, as for any non-convergence.
        let strict = krylov(
            &[
                "solve", "p.mtx", "--method", method, "--tol", tol, "--strict",
            ],
            d,
        );
        assert_eq!(strict.status.code(), Some(1), "{what}: {}", stderr(&strict));
    }
}

#[test]
fn an_x0_whose_residual_overflows_is_bad_input_not_an_spd_failure() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    poisson(d);
    constant_vector(d, "x0.mtx", 1000, "1e200");
    let out = krylov(&["solve", "p.mtx", "--x0", "x0.mtx"], d);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("b - A x0 overflows the double range"), "{err}");
    assert!(!err.contains("positive definite"), "{err}");
}

#[test]
fn a_solution_that_overflows_is_named_not_an_spd_failure() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    poisson(d);
    // ||A^-1|| > 4 on this matrix: x = A^-1 (5e307 ones) has entries above 1.8e308.
    constant_vector(d, "b.mtx", 1000, "5e307");
    for cmd in [
        vec!["solve", "p.mtx", "--rhs", "b.mtx"],
        vec![
            "compare",
            "p.mtx",
            "--methods",
            "cg,pipecg",
            "--rhs",
            "b.mtx",
        ],
    ] {
        let out = krylov(&cmd, d);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(
            err.contains("the solution overflows the double range"),
            "{cmd:?}: {err}"
        );
        assert!(!err.contains("positive definite"), "{cmd:?}: {err}");
        assert!(!err.contains("not SPD"), "{cmd:?}: {err}");
    }
}

#[test]
fn a_subnormal_diagonal_entry_solves_with_every_preconditioner() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // diag(1e-310, 1, 1): SPD; Jacobi's factor s_1 = 1e155 squared overflowed, so the
    // scaled entry a_11 s_1^2 was inf ("r^T A r = inf") and the norm weight 0.
    std::fs::write(
        d.join("a.mtx"),
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1e-310\n2 2 1\n3 3 1\n",
    )
    .unwrap();
    for precond in ["jacobi", "none", "chebyshev", "bjacobi_ic0"] {
        let out = krylov(&["solve", "a.mtx", "--precond", precond, "--json"], d);
        assert!(out.status.success(), "{precond}: {}", stderr(&out));
        let r: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(r["converged"], true, "{precond}: {r}");
        let rt = r["relres_true"].as_f64();
        assert!(rt.is_some_and(|v| v <= 1e-12), "{precond}: {r}");
    }
    // With the scaling, x_1 is exact: b = A ones, so the error against ones is rounding.
    let out = krylov(&["solve", "a.mtx", "--json"], d);
    let r: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert!(r["error_vs_ones"].as_f64().unwrap() < 1e-15, "{r}");
}

#[test]
fn plan_refuses_a_tolerance_no_candidate_can_meet() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    poisson(d);
    // Extrapolated to 387,796 iterations and "recommended" before; every probe run now
    // stagnates near 4e-16, and the plan says the tolerance is out of reach.
    for methods in ["cg", "cg,pipecg,cacg"] {
        let out = krylov(
            &[
                "plan",
                "p.mtx",
                "--ranks",
                "4",
                "--fabric",
                "fx100",
                "--tol",
                "1e-300",
                "--methods",
                methods,
                "--no-probe-cache",
            ],
            d,
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{methods}: {err}");
        assert!(
            err.contains("no candidate can meet tol 1e-300"),
            "{methods}: {err}"
        );
        assert!(
            err.contains("below what double precision attains"),
            "{methods}: {err}"
        );
        assert!(stdout(&out).is_empty(), "{methods}: no recommendation");
    }
}

/// Runs `krylov args` in `dir` with `input` on its standard input.
fn with_stdin(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_krylov"))
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn a_dash_reads_standard_input() {
    // Issue 47, item 9: `-` was taken as a file name.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    poisson(d);
    let matrix = std::fs::read(d.join("p.mtx")).unwrap();
    let from_file = krylov(&["solve", "p.mtx", "--json"], d);
    let from_stdin = with_stdin(d, &["solve", "-", "--json"], &matrix);
    assert!(from_stdin.status.success(), "{}", stderr(&from_stdin));
    let (f, s): (Value, Value) = (
        serde_json::from_str(stdout(&from_file).trim()).unwrap(),
        serde_json::from_str(stdout(&from_stdin).trim()).unwrap(),
    );
    assert_eq!(s["converged"], true, "{s}");
    assert_eq!(f["relres_true"], s["relres_true"]);
    assert_eq!(f["iterations"], s["iterations"]);
    // A right-hand side from standard input: b = 2 A ones, so x = 2 ones.
    let mut b = String::from("%%MatrixMarket matrix array real general\n1000 1\n");
    let ones = krylov(&["solve", "p.mtx", "--rhs", "ones", "--json"], d);
    assert!(ones.status.success());
    for _ in 0..1000 {
        b.push_str("1\n");
    }
    let rhs = with_stdin(d, &["solve", "p.mtx", "--rhs", "-", "--json"], b.as_bytes());
    assert!(rhs.status.success(), "{}", stderr(&rhs));
    let (o, r): (Value, Value) = (
        serde_json::from_str(stdout(&ones).trim()).unwrap(),
        serde_json::from_str(stdout(&rhs).trim()).unwrap(),
    );
    assert_eq!(
        o["relres_true"], r["relres_true"],
        "the same b, from a pipe"
    );
    // An empty standard input is one clear line, exit 2.
    let empty = with_stdin(d, &["solve", "-"], b"");
    assert_eq!(empty.status.code(), Some(2), "{}", stderr(&empty));
    assert_eq!(
        stderr(&empty).trim_end().lines().count(),
        1,
        "{}",
        stderr(&empty)
    );
}
