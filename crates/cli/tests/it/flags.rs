//! Numeric flags and config keys: negative numbers reach the checks (no `-- -1` advice),
//! a value that means nothing (0 ranks, a negative tolerance) is one line naming the flag,
//! or the config file and its key, with exit 2.

use std::path::Path;
use std::process::Output;

use crate::common::krylov_in as krylov;

/// Exit 2, one line on stderr containing every `needle`, nothing on stdout.
fn assert_bad(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "stderr: {err}");
    for needle in needles {
        assert!(err.contains(needle), "'{needle}' not in: {err}");
    }
    assert!(!err.contains("-- -"), "advice that does not work: {err}");
    assert!(out.stdout.is_empty());
}

fn matrix(dir: &Path) {
    let out = krylov(&["gen", "poisson2d", "--n", "4", "-o", "p.mtx"], dir);
    assert!(out.status.success());
}

#[test]
fn negative_numbers_reach_the_range_checks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    let s = |args: &[&str]| {
        let mut all = vec!["solve", "p.mtx"];
        all.extend_from_slice(args);
        krylov(&all, d)
    };
    assert_bad(&s(&["--tol", "-1"]), &["--tol must be", ">= 0", "-1"]);
    assert_bad(&s(&["--tol", "-1e-3"]), &["--tol must be", ">= 0"]);
    assert_bad(&s(&["--atol", "-2"]), &["--atol must be", ">= 0"]);
    assert_bad(&s(&["--tol", "nan"]), &["--tol must be"]);
    assert_bad(&s(&["--ranks", "-1"]), &["--ranks", "at least 1", "-1"]);
    assert_bad(&s(&["--k", "-4"]), &["--k", "at least 1"]);
    assert_bad(&s(&["--max-iter", "-5"]), &["--max-iter", "at least 0"]);
    assert_bad(&s(&["--threads", "-2"]), &["--threads", "at least 1"]);
    assert_bad(
        &krylov(
            &[
                "gen",
                "poisson3d",
                "--n",
                "3",
                "--heterogeneous",
                "--contrast",
                "-1",
            ],
            d,
        ),
        &["contrast", "positive"],
    );
    assert_bad(
        &krylov(&["gen", "poisson2d", "--n", "-3"], d),
        &["--n", "at least 1"],
    );
    // A seed is unsigned: `--seed -1` says so (it was "unexpected argument '-1'").
    assert_bad(
        &krylov(
            &[
                "gen",
                "poisson3d",
                "--n",
                "3",
                "--heterogeneous",
                "--seed",
                "-1",
            ],
            d,
        ),
        &["invalid value '-1'", "--seed"],
    );
    let b = |args: &[&str]| {
        let mut all = vec!["bench", "collectives", "--op", "bcast", "--sizes", "8"];
        all.extend_from_slice(args);
        krylov(&all, d)
    };
    assert_bad(&b(&["--root", "-1"]), &["--root", "at least 0"]);
    assert_bad(&b(&["--warmup", "-1"]), &["--warmup", "at least 0"]);
    assert_bad(&b(&["--ranks", "2,-3"]), &["--ranks", "at least 1"]);
    // Sizes too (`--sizes -8` was an "unexpected argument"), in every bench.
    for bench in [
        &["collectives", "--op", "bcast"][..],
        &["pingpong"],
        &["neighbor"],
    ] {
        let mut args = vec!["bench"];
        args.extend_from_slice(bench);
        args.extend_from_slice(&["--sizes", "-8"]);
        let out = krylov(&args, d);
        assert_bad(&out, &["--sizes", "-8"]);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("unexpected argument"));
    }
    assert_bad(
        &krylov(
            &[
                "plan", "p.mtx", "--ranks", "2", "--fabric", "fx100", "--tol", "-1",
            ],
            d,
        ),
        &["--tol", "-1"],
    );
    // A negative number is still never taken for a flag's value when the flag needs none.
    let out = s(&["--tol", "1e-6", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn config_values_are_blamed_on_the_file_and_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    for (line, key) in [
        ("ranks = 0", "ranks"),
        ("threads = 0", "threads"),
        ("k = 0", "k"),
        ("replace_every = 0", "replace_every"),
        ("tol = -1.0", "tol"),
        ("atol = -1.0", "atol"),
    ] {
        std::fs::write(d.join("solve.toml"), format!("{line}\n")).unwrap();
        let out = krylov(&["solve", "p.mtx", "--config", "solve.toml"], d);
        assert_bad(&out, &["solve.toml", key]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains(&format!("--{}", key.replace('_', "-"))),
            "{err}"
        );
        // The same value as a flag names the flag.
        let flag = format!("--{}", key.replace('_', "-"));
        let value = line.split(" = ").nth(1).unwrap();
        let out = krylov(&["solve", "p.mtx", &flag, value], d);
        assert_bad(&out, &[&flag]);
    }
}

#[test]
fn plan_rejects_probe_settings_that_cannot_measure_anything() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    let p = |args: &[&str]| {
        let mut all = vec!["plan", "p.mtx", "--ranks", "2", "--fabric", "fx100"];
        all.extend_from_slice(args);
        krylov(&all, d)
    };
    assert_bad(
        &p(&["--probe-max-iter", "0"]),
        &["--probe-max-iter", "at least 1"],
    );
    assert_bad(
        &p(&["--probe-ranks", "0"]),
        &["--probe-ranks", "at least 1"],
    );
    assert_bad(
        &p(&["--probe-ranks", "-2"]),
        &["--probe-ranks", "at least 1"],
    );
    // 2^64 - 1 probe ranks ran the probes on as many thread ranks as rows (minutes on
    // two cores: a fuzz "hang"); above 64 is bad input.
    for ranks in ["65", "18446744073709551615"] {
        assert_bad(&p(&["--probe-ranks", ranks]), &["probe ranks", "1..=64"]);
    }
    let ok = p(&[
        "--probe-ranks",
        "64",
        "--probe-max-iter",
        "5",
        "--k",
        "2..2",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
