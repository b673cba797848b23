//! Classifying a finished case (the CLI contract, ../shared/CLI.md: one clear line on
//! stderr, exit 2 for bad input, 1 for a failed run, never a panic or an abort), and the
//! false-success check: a solve that claims convergence must meet its tolerance, both by its
//! own report's `relres_true` and by `||b - A x|| / ||b||` recomputed here from the matrix,
//! the right-hand side and the `--output` solution ([`super::residual`]).

use super::case::{Case, Check};
use super::child::{Ending, Finished};
use super::residual::{self, Unchecked};
use serde_json::Value;
use std::path::Path;

/// The outcome classes, in the order the summary lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Class {
    /// Exit 0, 1 or 2 with the contract's output.
    Ok,
    /// Exit 101 or `panicked` on stderr.
    Panic,
    /// Killed by a signal: SIGABRT (an allocation over the memory limit aborts), SIGSEGV, ...
    Abort,
    /// No exit within the hang limit.
    Hang,
    /// An exit code other than 0, 1, 2 and 101.
    BadExit,
    /// Exit 1 or 2 without one clean `error: ...` line on stderr.
    UncleanError,
    /// Exit 0 with output that breaks the contract (JSON, the generated matrix).
    BadOutput,
    /// An error that blames the matrix (not SPD) for a value outside the double range: a
    /// breakdown on inf or NaN says nothing about A (issue 47, item 4).
    Misdiagnosed,
    /// A convergence claim the residual does not back.
    FalseSuccess,
}

/// Every class, in summary order.
pub(crate) const CLASSES: [Class; 9] = [
    Class::Ok,
    Class::Panic,
    Class::Abort,
    Class::Hang,
    Class::BadExit,
    Class::UncleanError,
    Class::BadOutput,
    Class::Misdiagnosed,
    Class::FalseSuccess,
];

impl Class {
    /// The folder name under `target/fuzz/`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Panic => "panic",
            Class::Abort => "abort",
            Class::Hang => "hang",
            Class::BadExit => "bad_exit",
            Class::UncleanError => "unclean_error",
            Class::BadOutput => "bad_output",
            Class::Misdiagnosed => "misdiagnosed",
            Class::FalseSuccess => "false_success",
        }
    }
}

/// Whether the independent residual check ran.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Residual {
    /// Not a converged solve with a solution file.
    NotApplicable,
    /// Recomputed and compared.
    Checked,
    /// Why it could not be recomputed.
    Unchecked(String),
}

/// A case's verdict.
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    pub(crate) class: Class,
    /// One line saying what happened.
    pub(crate) detail: String,
    /// What failures of the same cause share (digits and case paths normalised).
    pub(crate) signature: String,
    pub(crate) residual: Residual,
}

/// Classifies a finished case run in `dir`.
pub(crate) fn classify(case: &Case, run: &Finished, dir: &Path, hang_s: f64) -> Verdict {
    let stderr = String::from_utf8_lossy(&run.stderr);
    let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let verdict = |class: Class, detail: String, key: String| Verdict {
        class,
        detail: one_spaced(&detail),
        signature: one_spaced(&format!(
            "{}: {} {}",
            class.name(),
            case.command,
            normalize(&key)
        )),
        residual: Residual::NotApplicable,
    };
    if stderr.contains("panicked") || run.ending == Ending::Exited(101) {
        let (place, message) = panic_site(&stderr);
        return verdict(
            Class::Panic,
            format!("panicked at {place}: {message}"),
            format!("at {place}: {message}"),
        );
    }
    // Hangs and aborts carry no location: the flags given extreme values tell them apart.
    let extremes = extreme_flags(&case.args);
    match run.ending {
        Ending::TimedOut(cpu) => verdict(
            Class::Hang,
            format!(
                "no exit within {hang_s} s (process group killed; {} of CPU)",
                cpu.map_or("unknown".into(), |c| format!("{c:.1} s"))
            ),
            extremes,
        ),
        Ending::Signaled(sig) => {
            let what = if stderr.contains("memory allocation of") {
                "allocation failure under the memory limit"
            } else {
                ""
            };
            let frame =
                workspace_frame(stderr.lines()).map_or(String::new(), |f| format!("in {f}"));
            verdict(
                Class::Abort,
                format!("killed by {} {what} {first} {frame}", signal_name(sig)),
                format!("{} {what} {frame} {extremes}", signal_name(sig)),
            )
        }
        Ending::Exited(code @ (1 | 2)) => {
            let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            let clean = lines.len() == 1
                && lines[0].starts_with("error: ")
                && lines[0].len() > "error: ".len()
                && !lines[0].ends_with('.');
            if clean && blames_spd_for_range(first) {
                verdict(
                    Class::Misdiagnosed,
                    format!("exit {code}: {first}"),
                    format!("exit {code}: {first}"),
                )
            } else if clean {
                verdict(
                    Class::Ok,
                    format!("exit {code}: {first}"),
                    format!("exit {code}: {first}"),
                )
            } else {
                verdict(
                    Class::UncleanError,
                    format!("exit {code} with {} stderr line(s): {first}", lines.len()),
                    format!("exit {code}: {first}"),
                )
            }
        }
        Ending::Exited(0) => success(case, run, dir),
        Ending::Exited(code) => verdict(
            Class::BadExit,
            format!("exit {code}: {first}"),
            format!("exit {code}: {first}"),
        ),
    }
}

/// Whether an error line reports a breakdown on a non-finite value (`... = inf`, `-inf`,
/// `NaN`) and blames the matrix for it ("positive definite", "not SPD") in that
/// breakdown's own remedy: `solve`'s `broke down at iteration N: Q = V; REMEDY`, or each of
/// `compare`'s `broke down at iteration N: Q = V (REMEDY)`.
fn blames_spd_for_range(line: &str) -> bool {
    line.split("broke down at iteration").skip(1).any(|part| {
        let end = part.find(['(', ';']).unwrap_or(part.len());
        let (value, remedy) = part.split_at(end);
        let value = value.trim_end();
        let non_finite = ["= inf", "= -inf", "= NaN"]
            .iter()
            .any(|v| value.ends_with(v));
        non_finite && (remedy.contains("positive definite") || remedy.contains("not SPD"))
    })
}

/// The checks of an exit 0.
fn success(case: &Case, run: &Finished, dir: &Path) -> Verdict {
    let stdout = String::from_utf8_lossy(&run.stdout);
    let mut v = Verdict {
        class: Class::Ok,
        detail: "exit 0".into(),
        signature: format!("ok: {} exit 0", case.command),
        residual: Residual::NotApplicable,
    };
    let fail = |class: Class, detail: String, key: &str| Verdict {
        class,
        signature: format!("{}: {} {key}", class.name(), case.command),
        detail,
        residual: Residual::NotApplicable,
    };
    match &case.check {
        Check::Exit => v,
        Check::Solve {
            matrix,
            rhs,
            output,
        } => {
            let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
            let report = match (lines.len(), lines.first().map(|l| serde_json::from_str(l))) {
                (1, Some(Ok(Value::Object(o)))) => Value::Object(o),
                _ => {
                    return fail(
                        Class::BadOutput,
                        format!(
                            "--json printed {} line(s), not one JSON object",
                            lines.len()
                        ),
                        "--json is not one object",
                    )
                }
            };
            if report["converged"] != Value::Bool(true) {
                v.detail = "exit 0, not converged".into();
                return v;
            }
            let method = report["method"].as_str().unwrap_or("?").to_string();
            // False claims are signed by the stop reason (`zero_rhs` on every method is one
            // defect) and, for a claimed convergence, by the method that made it.
            let stop = report["stop_reason"].as_str().unwrap_or("?");
            let who = if stop == "converged" {
                format!("stop_reason={stop} method={method}")
            } else {
                format!("stop_reason={stop}")
            };
            let tol = report["tol"].as_f64().unwrap_or(f64::NAN);
            let atol = report["atol"].as_f64().unwrap_or(0.0);
            let claimed = report["relres_true"].as_f64();
            // The independent residual, where the inputs allow it.
            let mut b_norm = None;
            let independent = recompute(case, matrix, rhs.as_ref(), output.as_deref(), dir);
            match independent {
                Ok(r) => {
                    b_norm = Some(r.b_norm);
                    v.residual = Residual::Checked;
                    if !r.meets(tol, atol) {
                        let mut f = fail(
                            Class::FalseSuccess,
                            format!(
                                "{method} claims convergence, recomputed ||b - A x|| / ||b|| = {:.3e} > tol {tol:e} (atol {atol:e}; report relres_true {})",
                                r.norm / r.b_norm,
                                claimed.map_or("null".into(), |c| format!("{c:.3e}"))
                            ),
                            &format!("{who} recomputed residual above tol"),
                        );
                        f.residual = Residual::Checked;
                        return f;
                    }
                }
                Err(Unchecked::NonFinite) => {
                    return fail(
                        Class::FalseSuccess,
                        format!("{method} claims convergence with a non-finite solution"),
                        &format!("{who} non-finite solution"),
                    )
                }
                Err(why) => v.residual = Residual::Unchecked(format!("{why:?}")),
            }
            let backed = match claimed {
                Some(c) => {
                    c <= tol || (atol > 0.0 && b_norm.is_none_or(|b| c * b <= atol * (1.0 + 1e-9)))
                }
                None => false,
            };
            if !backed {
                return fail(
                    Class::FalseSuccess,
                    format!(
                        "{method} claims convergence with report relres_true {} > tol {tol:e} (atol {atol:e})",
                        claimed.map_or("null".into(), |c| format!("{c:.3e}"))
                    ),
                    &format!("{who} report relres_true above tol"),
                );
            }
            v.detail = "exit 0, converged".into();
            v
        }
        Check::Rows => {
            for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
                let Ok(row) = serde_json::from_str::<Value>(line) else {
                    return fail(
                        Class::BadOutput,
                        format!("--json line is not JSON: {}", truncate(line)),
                        "--json line is not JSON",
                    );
                };
                if row["converged"] != Value::Bool(true) {
                    continue;
                }
                let method = row["method"].as_str().unwrap_or("?");
                let tol = row["tol"].as_f64().unwrap_or(f64::NAN);
                let atol = row["atol"].as_f64().unwrap_or(0.0);
                let claimed = row["relres_true"].as_f64();
                if !claimed.is_some_and(|c| c <= tol || atol > 0.0) {
                    return fail(
                        Class::FalseSuccess,
                        format!(
                            "{method} row claims convergence with relres_true {} > tol {tol:e}",
                            claimed.map_or("null".into(), |c| format!("{c:.3e}"))
                        ),
                        &format!("method={method} report relres_true above tol"),
                    );
                }
            }
            v
        }
        Check::Plot { path } => {
            let svg = std::fs::read_to_string(dir.join(path)).unwrap_or_default();
            if svg.contains("<svg") && svg.trim_end().ends_with("</svg>") {
                v
            } else {
                fail(
                    Class::BadOutput,
                    format!("exit 0 with stdout closed but no complete plot in {path}"),
                    "--plot not written with stdout closed",
                )
            }
        }
        Check::Gen { output, rows } => {
            let bytes = match output {
                Some(name) => std::fs::read(dir.join(name)).unwrap_or_default(),
                None => run.stdout.clone(),
            };
            match residual::read_coo(&bytes) {
                Some(a) if a.rows as u128 == *rows && a.cols as u128 == *rows => v,
                Some(a) => fail(
                    Class::BadOutput,
                    format!(
                        "generated {} x {} matrix, expected {rows} rows",
                        a.rows, a.cols
                    ),
                    "generated matrix has the wrong size",
                ),
                None => fail(
                    Class::BadOutput,
                    format!(
                        "exit 0 but the generated matrix ({} bytes) is not readable",
                        bytes.len()
                    ),
                    "generated matrix unreadable",
                ),
            }
        }
    }
}

/// The residual of the case's `--output` solution, recomputed from its own files.
fn recompute(
    case: &Case,
    matrix: &str,
    rhs: Option<&residual::Rhs>,
    output: Option<&str>,
    dir: &Path,
) -> Result<residual::Residual, Unchecked> {
    let output = output.ok_or(Unchecked::Unreadable("no --output file"))?;
    let rhs = rhs.ok_or(Unchecked::Unreadable(
        "right-hand side set by a config file",
    ))?;
    let a = case
        .file(matrix)
        .and_then(residual::read_coo)
        .ok_or(Unchecked::Unreadable("matrix"))?;
    let x = std::fs::read(dir.join(output))
        .ok()
        .and_then(|t| residual::read_vector(&t))
        .ok_or(Unchecked::Unreadable("solution file"))?;
    let file = match rhs {
        residual::Rhs::File(name) => case.file(name),
        _ => None,
    };
    let b = residual::rhs(&a, rhs, file)?;
    residual::residual(&a, &b, &x)
}

/// `extremes=[--ranks,--sizes]`: the flags whose value has a huge number (at least 2^16 in
/// magnitude), a non-finite or overflowing real, a subnormal or a `G` size in it (list items
/// and `NAME:K` parts included); empty when none.
fn extreme_flags(args: &[String]) -> String {
    let odd = |token: &str| {
        matches!(
            token,
            "nan" | "inf" | "-inf" | "1e308" | "-1e308" | "1e-320" | "1G"
        ) || token.parse::<f64>().is_ok_and(|v| {
            v.abs() >= 65536.0 && token.bytes().all(|b| b.is_ascii_digit() || b == b'-')
        })
    };
    let flags: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0].starts_with("--") && w[1].split([',', ':', '.']).any(&odd))
        .map(|w| w[0].as_str())
        .collect();
    if flags.is_empty() {
        String::new()
    } else {
        format!("extremes=[{}]", flags.join(","))
    }
}

/// `function (file:line:col)` of the first workspace (`castack_*`) frame of a backtrace
/// (`RUST_BACKTRACE=1`: the child runs with it, for panics and allocation failures alike).
fn workspace_frame<'a>(lines: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut function = "";
    for line in lines {
        let t = line.trim();
        if let Some((n, name)) = t.split_once(": ") {
            if n.chars().all(|c| c.is_ascii_digit()) {
                function = name;
                continue;
            }
        }
        if let Some(loc) = t.strip_prefix("at ") {
            if function.starts_with("castack_") {
                return Some(format!("{function} ({loc})"));
            }
        }
    }
    None
}

/// Where the first panic on stderr happened and its message. The place is `file:line:col`,
/// followed, when the backtrace has one, by the first workspace (`castack_*`) function on
/// it: a panic inside the standard library (`capacity overflow`) is told apart by its caller.
fn panic_site(stderr: &str) -> (String, String) {
    let mut lines = stderr.lines();
    while let Some(line) = lines.next() {
        if let Some(at) = line.find("panicked at ") {
            let rest = &line[at + "panicked at ".len()..];
            let mut place = rest.trim_end_matches(':').to_string();
            let message = lines.next().unwrap_or("").trim().to_string();
            if !place.contains("/crates/") && !place.starts_with("crates/") {
                if let Some(frame) = workspace_frame(lines) {
                    place = format!("{place} in {frame}");
                }
            }
            return (place, truncate(&message));
        }
    }
    ("?".into(), truncate(stderr.lines().next().unwrap_or("")))
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGFPE => "SIGFPE".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGXFSZ => "SIGXFSZ (file-size limit)".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        other => format!("signal {other}"),
    }
}

/// Words separated by single spaces (parts of a message that are empty leave none).
fn one_spaced(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn truncate(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// A message with its numbers replaced by `#`, so failures differing only in sizes, lines
/// or values share a signature.
pub(crate) fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_number = false;
    for c in s.chars() {
        if c.is_ascii_digit() || (in_number && matches!(c, '.' | 'e' | '-' | '+')) {
            if !in_number {
                out.push('#');
                in_number = true;
            }
        } else {
            in_number = false;
            out.push(c);
        }
    }
    truncate(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::residual::Rhs;

    fn finished(ending: Ending, stdout: &str, stderr: &str) -> Finished {
        Finished {
            ending,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            seconds: 0.1,
        }
    }

    fn case(check: Check) -> Case {
        Case {
            index: 0,
            command: "solve".into(),
            args: vec![],
            files: vec![(
                "m.mtx".into(),
                b"%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 4\n2 1 -1\n2 2 4\n"
                    .to_vec(),
            )],
            fifos: vec![],
            stdout_closed: false,
            notes: vec![],
            check,
        }
    }

    fn class(c: &Case, f: &Finished, dir: &Path) -> Class {
        classify(c, f, dir, 60.0).class
    }

    #[test]
    fn a_breakdown_on_a_non_finite_value_blamed_on_the_matrix_is_misdiagnosed() {
        let c = case(Check::Exit);
        let dir = Path::new("/nonexistent");
        let f = |err: &str| finished(Ending::Exited(1), "", err);
        // The lines before issue 47's fix, and after.
        let before = "error: p.mtx: cg broke down at iteration 0: ||r|| = inf; CG needs a symmetric positive definite matrix: a non-positive curvature in cg means the matrix is indefinite\n";
        assert_eq!(class(&c, &f(before), dir), Class::Misdiagnosed);
        let compare = "error: p.mtx: 2 of 2 methods failed: cg broke down at iteration 23: ||b - A x|| = NaN (CG needs a symmetric positive definite matrix: ...); ccg broke down at iteration 4: p^T A p = -1e0 (try --replace-every N; if the matrix is not SPD no CG method applies)\n";
        assert_eq!(class(&c, &f(compare), dir), Class::Misdiagnosed);
        for ok in [
            "error: p.mtx: cg broke down at iteration 0: ||r|| = inf; the initial residual b - A x0 overflows the double range\n",
            "error: p.mtx: cg broke down at iteration 2: p^T A p = -5.9e-1; CG needs a symmetric positive definite matrix\n",
            "error: p.mtx: 1 of 2 methods failed: cg broke down at iteration 23: ||b - A x|| = NaN (the solution overflows the double range); ccg broke down at iteration 4: p^T A p = -1e0 (if the matrix is not SPD no CG method applies)\n",
        ] {
            assert_eq!(class(&c, &f(ok), dir), Class::Ok, "{ok}");
        }
    }

    #[test]
    fn exit_statuses() {
        let c = case(Check::Exit);
        let dir = Path::new("/nonexistent");
        let f = |e, err: &str| finished(e, "", err);
        assert_eq!(
            class(&c, &f(Ending::Exited(2), "error: bad k\n"), dir),
            Class::Ok
        );
        assert_eq!(
            class(&c, &f(Ending::Exited(1), "error: breakdown at 3\n"), dir),
            Class::Ok
        );
        assert_eq!(
            class(&c, &f(Ending::Exited(2), "error: two\nlines\n"), dir),
            Class::UncleanError
        );
        assert_eq!(
            class(&c, &f(Ending::Exited(2), ""), dir),
            Class::UncleanError
        );
        assert_eq!(
            class(
                &c,
                &f(Ending::Exited(2), "error: ends with a period.\n"),
                dir
            ),
            Class::UncleanError
        );
        let panic = "\nthread 'main' panicked at crates/x/src/a.rs:10:5:\nindex out of bounds: the len is 3 but the index is 7\nnote: run with `RUST_BACKTRACE=1`\n";
        let v = classify(&c, &f(Ending::Exited(101), panic), dir, 60.0);
        assert_eq!(v.class, Class::Panic);
        assert_eq!(
            v.signature,
            "panic: solve at crates/x/src/a.rs:#:#: index out of bounds: the len is # but the index is #"
        );
        let v = classify(
            &c,
            &f(
                Ending::Signaled(libc::SIGABRT),
                "memory allocation of 8 bytes failed\nstack backtrace:\n   0: std::alloc::rust_oom\n             at /rustc/a/library/std/src/alloc.rs:424:5\n   9: castack_krylov::partition::Partition::rows\n             at /w/crates/krylov/src/partition.rs:45:20\n",
            ),
            dir,
            60.0,
        );
        assert_eq!(v.class, Class::Abort);
        assert!(v.detail.contains("allocation failure"), "{}", v.detail);
        assert!(
            !v.signature.contains("  ") && !v.detail.ends_with(' '),
            "{v:?}"
        );
        assert!(
            v.signature
                .contains("in castack_krylov::partition::Partition::rows (/w/crates/krylov/src/partition.rs:#:#)"),
            "{}",
            v.signature
        );
        assert_eq!(
            class(&c, &f(Ending::Signaled(libc::SIGSEGV), ""), dir),
            Class::Abort
        );
        assert_eq!(
            class(&c, &f(Ending::TimedOut(Some(1.0)), ""), dir),
            Class::Hang
        );
        assert_eq!(
            class(&c, &f(Ending::Exited(3), "error: x\n"), dir),
            Class::BadExit
        );
        assert_eq!(class(&c, &f(Ending::Exited(0), ""), dir), Class::Ok);
    }

    fn solve_dir(x: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "xtask-fuzz-verdict-{}-{}",
            std::process::id(),
            x.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("x.mtx"),
            format!("%%MatrixMarket matrix array real general\n2 1\n{x}"),
        )
        .unwrap();
        dir
    }

    fn solve_case() -> Case {
        case(Check::Solve {
            matrix: "m.mtx".into(),
            rhs: Some(Rhs::UnitSolution),
            output: Some("x.mtx".into()),
        })
    }

    #[test]
    fn a_true_claim_passes_and_a_false_one_is_caught() {
        let c = solve_case();
        let report = |relres: &str| {
            format!("{{\"converged\":true,\"stop_reason\":\"converged\",\"method\":\"cg\",\"tol\":1e-8,\"atol\":0.0,\"relres_true\":{relres}}}\n")
        };
        let good = solve_dir("1\n1\n");
        let v = classify(
            &c,
            &finished(Ending::Exited(0), &report("0.0"), ""),
            &good,
            60.0,
        );
        assert_eq!((v.class, v.residual), (Class::Ok, Residual::Checked));
        // The report says converged and small, the solution file says otherwise.
        let wrong = solve_dir("1\n1.001\n");
        let v = classify(
            &c,
            &finished(Ending::Exited(0), &report("1e-9"), ""),
            &wrong,
            60.0,
        );
        assert_eq!(v.class, Class::FalseSuccess, "{}", v.detail);
        assert!(v.detail.contains("recomputed"), "{}", v.detail);
        assert_eq!(
            v.signature,
            "false_success: solve stop_reason=converged method=cg recomputed residual above tol"
        );
        // The report's own residual above the tolerance.
        let v = classify(
            &c,
            &finished(Ending::Exited(0), &report("1e-3"), ""),
            &good,
            60.0,
        );
        assert_eq!(v.class, Class::FalseSuccess, "{}", v.detail);
        let v = classify(
            &c,
            &finished(Ending::Exited(0), &report("null"), ""),
            &good,
            60.0,
        );
        assert_eq!(v.class, Class::FalseSuccess, "{}", v.detail);
        // A non-finite solution.
        let nan = solve_dir("1\nnan\n");
        let v = classify(
            &c,
            &finished(Ending::Exited(0), &report("0.0"), ""),
            &nan,
            60.0,
        );
        assert_eq!(v.class, Class::FalseSuccess, "{}", v.detail);
        // Not converged: nothing claimed.
        let not = "{\"converged\":false,\"relres_true\":1.0,\"tol\":1e-8}\n";
        assert_eq!(
            class(&c, &finished(Ending::Exited(0), not, ""), &wrong),
            Class::Ok
        );
        // Not one JSON object.
        assert_eq!(
            class(&c, &finished(Ending::Exited(0), "{}\n{}\n", ""), &good),
            Class::BadOutput
        );
        for d in [good, wrong, nan] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn compare_rows_are_checked() {
        let mut c = case(Check::Rows);
        c.command = "compare".into();
        let dir = Path::new("/nonexistent");
        let ok = "{\"converged\":true,\"method\":\"cg\",\"tol\":1e-8,\"relres_true\":1e-9}\n{\"converged\":false,\"tol\":1e-8,\"relres_true\":1.0}\n";
        assert_eq!(
            class(&c, &finished(Ending::Exited(0), ok, ""), dir),
            Class::Ok
        );
        let bad = "{\"converged\":true,\"method\":\"cacg\",\"tol\":1e-8,\"relres_true\":1e-7}\n";
        assert_eq!(
            class(&c, &finished(Ending::Exited(0), bad, ""), dir),
            Class::FalseSuccess
        );
    }

    #[test]
    fn a_library_panic_is_signed_by_its_workspace_caller() {
        let stderr = "thread 'main' (7) panicked at /rustc/abc/library/alloc/src/raw_vec/mod.rs:28:5:\ncapacity overflow\nstack backtrace:\n   0: __rustc::rust_begin_unwind\n             at /rustc/abc/library/std/src/panicking.rs:689:5\n   1: alloc::raw_vec::capacity_overflow\n             at /rustc/abc/library/alloc/src/raw_vec/mod.rs:28:5\n   2: castack_cli::bench::run\n             at ./src/bench.rs:120:9\n   3: castack_krylov::x\n             at ./src/x.rs:1:1\n";
        let (place, message) = panic_site(stderr);
        assert_eq!(message, "capacity overflow");
        assert_eq!(
            place,
            "/rustc/abc/library/alloc/src/raw_vec/mod.rs:28:5 in castack_cli::bench::run (./src/bench.rs:120:9)"
        );
        let (place, _) = panic_site("thread 'main' panicked at crates/cli/src/a.rs:3:4:\nboom\n");
        assert_eq!(place, "crates/cli/src/a.rs:3:4");
    }

    #[test]
    fn extreme_flags_are_named() {
        let args: Vec<String> = [
            "solve",
            "m.mtx",
            "--ranks",
            "4294967296",
            "--k",
            "4",
            "--methods",
            "cg,cbcg:65536",
            "--tol",
            "1e-320",
            "--sizes",
            "8..1K",
            "--rhs",
            "b.mtx",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(extreme_flags(&args), "extremes=[--ranks,--methods,--tol]");
        assert_eq!(extreme_flags(&args[..6]), "extremes=[--ranks]");
        assert_eq!(extreme_flags(&args[4..6]), "");
    }

    #[test]
    fn normalize_replaces_numbers() {
        assert_eq!(
            normalize("m.mtx:17: value 1e308 at 3.5"),
            "m.mtx:#: value # at #"
        );
    }
}
