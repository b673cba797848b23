//! What the modules share: running the `krylov` binary and reading its JSON lines.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Every operation of `krylov bench collectives --op` (../shared/CLI.md).
pub(crate) const OPS: [&str; 8] = [
    "bcast",
    "scatter",
    "gather",
    "reduce",
    "allgather",
    "allreduce",
    "barrier",
    "alltoall",
];

/// The `krylov` binary without a default probe cache (`krylov plan`: neither
/// `XDG_CACHE_HOME` nor `HOME` set), so no test reads what another run kept; the cache's
/// own tests name their folder.
fn binary() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_krylov"));
    cmd.env_remove("XDG_CACHE_HOME").env_remove("HOME");
    cmd
}

/// Runs the `krylov` binary with `args` in the current directory.
pub(crate) fn krylov(args: &[&str]) -> Output {
    binary()
        .args(args)
        .output()
        .expect("the krylov binary runs")
}

/// Runs the `krylov` binary with `args` in `dir`.
pub(crate) fn krylov_in(args: &[&str], dir: &Path) -> Output {
    binary()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the krylov binary runs")
}

/// The JSON objects of a successful run's stdout, one per line; fails the test with the
/// exit status and stderr when the run failed.
pub(crate) fn json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Runs the `krylov` binary with `args` and returns its JSON lines ([`json_lines`]).
pub(crate) fn rows(args: &[&str]) -> Vec<Value> {
    json_lines(&krylov(args))
}
