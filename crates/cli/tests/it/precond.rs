//! `--precond bjacobi_ic0|chebyshev` and `--precond-degree` from the command line: the
//! report's preconditioner fields, fewer iterations than Jacobi on a heterogeneous
//! matrix, the text output, and the refusals (exit 2, one line).

use crate::common::{json_lines, krylov_in as krylov};

fn gen(dir: &std::path::Path) {
    let out = krylov(
        &[
            "gen",
            "poisson3d",
            "--n",
            "10",
            "--heterogeneous",
            "--contrast",
            "1e4",
            "-o",
            "h.mtx",
        ],
        dir,
    );
    assert!(out.status.success());
}

fn solve(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["solve", "h.mtx", "--ranks", "2", "--json"];
    args.extend_from_slice(extra);
    json_lines(&krylov(&args, dir)).remove(0)
}

#[test]
fn preconditioners_report_themselves_and_cut_iterations() {
    let dir = tempfile::tempdir().unwrap();
    gen(dir.path());
    let jac = solve(dir.path(), &[]);
    assert_eq!(jac["precond"], "jacobi");
    assert_eq!(jac["precond_applies"], 0);
    assert!(jac["precond_degree"].is_null() && jac["precond_shift"].is_null());
    let jac_it = jac["iterations"].as_u64().unwrap();

    let ic = solve(dir.path(), &["--precond", "bjacobi_ic0"]);
    assert_eq!(ic["converged"], true);
    assert_eq!(ic["precond"], "bjacobi_ic0");
    assert!(ic["precond_shift"].as_f64().unwrap() >= 0.0);
    let it = ic["iterations"].as_u64().unwrap();
    assert!(it * 10 < jac_it * 8, "{it} vs {jac_it}");
    assert_eq!(ic["precond_applies"].as_u64().unwrap(), it + 1);
    assert!(ic["time_breakdown"]["precond"].as_f64().unwrap() > 0.0);

    let ch = solve(
        dir.path(),
        &["--precond", "chebyshev", "--precond-degree", "4"],
    );
    assert_eq!(ch["converged"], true);
    assert_eq!(ch["precond_degree"], 4);
    let it = ch["iterations"].as_u64().unwrap();
    assert!(it * 10 < jac_it * 8, "{it} vs {jac_it}");
    // 4 exchanges per application in the loop, one per iteration, one for the check.
    assert_eq!(ch["halo_exchanges"].as_u64().unwrap(), it + 1 + 4 * it);

    let text = krylov(&["solve", "h.mtx", "--precond", "chebyshev"], dir.path());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(chebyshev precond)"), "{text}");
    assert!(
        text.contains("preconditioner chebyshev of degree 3:"),
        "{text}"
    );
}

#[test]
fn refusals_are_one_line_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    gen(dir.path());
    let bad = |args: &[&str], needle: &str| {
        let mut a = vec!["solve", "h.mtx"];
        a.extend_from_slice(args);
        let out = krylov(&a, dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(needle), "'{needle}' not in {stderr}");
    };
    bad(
        &["--precond", "chebyshev", "--precond-degree", "0"],
        "precond-degree",
    );
    bad(
        &["--precond", "chebyshev", "--precond-degree", "65"],
        "--precond-degree must be within 1..=64 (got 65)",
    );
    bad(&["--precond", "ilu"], "ilu");
    bad(
        &["--precond", "chebyshev", "--method", "cacg", "--mpk"],
        "mpk",
    );
    bad(
        &[
            "--precond",
            "bjacobi_ic0",
            "--backend",
            "sim",
            "--device",
            "cuda",
        ],
        "bjacobi_ic0",
    );
    let out = krylov(
        &["plan", "h.mtx", "--ranks", "4", "--precond", "chebyshev"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
}
