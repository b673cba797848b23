//! `cargo xtask test-mpi` (alias `mpi-test`): multi-process MPI tests, which cannot live in
//! `cargo test` (`mpi::initialize()` works once per process).
//!
//! 1. An MPI test binary is an example or a `harness = false` test target, of a package that
//!    declares the `mpi` feature, with `required-features = ["mpi"]` in its `[[example]]` /
//!    `[[test]]` section. It asserts its own results and exits non-zero on a failure. All of
//!    them are built in one `cargo build --workspace --features mpi` call (the feature
//!    resolution of CI's mpi build, so nothing is compiled twice), and each one is run under
//!    `mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca pml ob1
//!    --mca oob_tcp_if_include lo -np N` for every N of `--np` (default 1,2,3,4).
//! 2. When the `castack-cli` package declares `mpi`, the `krylov` binary built with it is
//!    checked end to end under mpirun at the same rank counts ([`crate::mpi_cli_checks`]).

use crate::flags::{parse_positive_list, Flags};
use crate::workspace::{self, cargo, Metadata, Package};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) const USAGE: &str = "\
usage: cargo xtask test-mpi [--np 1,2,3,4] [--timeout SECONDS]     (alias: mpi-test)

Builds every example and test target with required-features = [\"mpi\"] of the packages that
declare feature `mpi` (with --features mpi) and runs each under mpirun (Open MPI, loopback,
oversubscribed, root allowed) for every rank count of --np. Then checks the krylov binary
built with --features mpi under mpirun at the same rank counts: `solve --backend mpi` against
`--backend threads --ranks P` (same iterations, residual and solution bits), its one-line
abort on bad input, and `bench collectives --backend mpi --algo all --verify` for every
operation. Succeeds with a message when no package declares `mpi` yet.

  --np LIST          rank counts (default 1,2,3,4)
  --timeout SECONDS  limit for one mpirun (default 300); past it the run is killed and fails";

/// Open MPI as root, oversubscribed, loopback only (STACK.md).
pub(crate) const MPIRUN_FLAGS: [&str; 11] = [
    "--allow-run-as-root",
    "--oversubscribe",
    "--mca",
    "btl",
    "self,vader",
    "--mca",
    "pml",
    "ob1",
    "--mca",
    "oob_tcp_if_include",
    "lo",
];

/// Flags of `cargo xtask mpi-test`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    np: Vec<usize>,
    timeout: Duration,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            np: vec![1, 2, 3, 4],
            timeout: Duration::from_secs(300),
        }
    }
}

impl Args {
    /// The rank counts.
    pub(crate) fn np(&self) -> &[usize] {
        &self.np
    }

    /// The limit for one mpirun.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let mut parsed = Args::default();
        if let Some(list) = flags.value("--np")? {
            parsed.np = parse_positive_list("--np", &list)?;
        }
        if let Some(secs) = flags.value("--timeout")? {
            let secs: u64 = secs
                .parse()
                .with_context(|| format!("--timeout: not a number of seconds: `{secs}`"))?;
            if secs == 0 {
                bail!("--timeout must be at least 1 second");
            }
            parsed.timeout = Duration::from_secs(secs);
        }
        flags.finish()?;
        Ok(parsed)
    }
}

pub(crate) fn run(args: &Args) -> Result<()> {
    run_with(&Metadata::load()?, args)
}

/// One MPI test binary to build: package, target kind (`example` or `test`), target name.
#[derive(Debug, PartialEq)]
struct MpiTarget {
    package: String,
    kind: &'static str,
    name: String,
}

pub(crate) fn run_with(metadata: &Metadata, args: &Args) -> Result<()> {
    let packages = metadata.declaring("mpi");
    if packages.is_empty() {
        eprintln!("test-mpi: no workspace package declares feature `mpi` yet; nothing to run");
        return Ok(());
    }
    let targets: Vec<MpiTarget> = packages.iter().flat_map(|p| mpi_targets(p)).collect();
    if targets.is_empty() {
        eprintln!(
            "test-mpi: warning: packages declare `mpi` but no example or test target has \
             required-features = [\"mpi\"]; nothing to run"
        );
        return Ok(());
    }
    if let Some(t) = targets.iter().enumerate().find_map(|(i, t)| {
        targets[..i]
            .iter()
            .any(|u| u.kind == t.kind && u.name == t.name)
            .then_some(t)
    }) {
        bail!(
            "test-mpi: two packages have an MPI {} target named `{}`; they are built in one \
             cargo call, where a target name must be unique",
            t.kind,
            t.name
        );
    }
    check_mpirun()?;

    // One cargo invocation for every target, with the workspace's feature resolution (the
    // one `cargo build --workspace --features mpi` uses): building per package (`-p`)
    // resolves the dependencies' features differently and recompiles the whole chain.
    let binaries = build(&targets.iter().collect::<Vec<_>>())?;

    let mut runs = 0;
    for (target, exe) in &binaries {
        for &np in &args.np {
            let mut cmd = mpirun(np);
            cmd.arg(exe);
            let label = format!(
                "{}/{} {} with {np} rank(s)",
                target.package, target.kind, target.name
            );
            let t = Instant::now();
            run_with_timeout(&mut cmd, args.timeout).with_context(|| format!("{label} failed"))?;
            eprintln!("   ok: {label} ({:.1} s)", t.elapsed().as_secs_f64());
            runs += 1;
        }
    }
    eprintln!(
        "test-mpi: {runs} run(s) of {} binaries passed",
        binaries.len()
    );
    if packages.iter().any(|p| p.name == CLI_PACKAGE) {
        let krylov = build_krylov(false)?;
        let checks = crate::mpi_cli_checks::run(&krylov, args)?;
        eprintln!("test-mpi: {checks} krylov run(s) under mpirun passed");
    }
    Ok(())
}

/// The package of the `krylov` binary.
pub(crate) const CLI_PACKAGE: &str = "castack-cli";

/// Builds the `krylov` binary with `--features mpi` (release or the dev profile) and returns
/// its path.
pub(crate) fn build_krylov(release: bool) -> Result<PathBuf> {
    let target = MpiTarget {
        package: CLI_PACKAGE.into(),
        kind: "bin",
        name: "krylov".into(),
    };
    let built = build_with(&[&target], release)?;
    built
        .into_iter()
        .next()
        .map(|(_, exe)| exe)
        .context("cargo built no krylov binary")
}

/// `mpirun` with [`MPIRUN_FLAGS`] and `-np np`, run in the workspace root.
pub(crate) fn mpirun(np: usize) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(MPIRUN_FLAGS)
        .arg("-np")
        .arg(np.to_string())
        .current_dir(workspace::root())
        .stdin(Stdio::null());
    cmd
}

/// The example and test targets of `package` that require the `mpi` feature.
fn mpi_targets(package: &Package) -> Vec<MpiTarget> {
    let mut out = Vec::new();
    for kind in ["example", "test"] {
        for target in package.targets_of_kind(kind) {
            if target.required_features.iter().any(|f| f == "mpi") {
                out.push(MpiTarget {
                    package: package.name.clone(),
                    kind,
                    name: target.name.clone(),
                });
            }
        }
    }
    out
}

/// Whether `mpirun --version` runs.
pub(crate) fn has_mpirun() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn check_mpirun() -> Result<()> {
    if !has_mpirun() {
        bail!(
            "`mpirun` not found: install Open MPI (`apt-get install -y openmpi-bin libopenmpi-dev \
             libclang-dev`, which .ci/run does)"
        );
    }
    Ok(())
}

/// Builds the targets with `--workspace --features mpi` and returns their executables.
fn build<'a>(targets: &[&'a MpiTarget]) -> Result<Vec<(&'a MpiTarget, PathBuf)>> {
    build_with(targets, false)
}

/// [`build`] in the release profile or the dev one. `--example NAME` / `--test NAME` /
/// `--bin NAME` select targets by name across the workspace: the MPI targets' names are
/// unique among them ([`run_with`] checks), and today no other target shares one.
fn build_with<'a>(
    targets: &[&'a MpiTarget],
    release: bool,
) -> Result<Vec<(&'a MpiTarget, PathBuf)>> {
    let mut args = vec![
        "build".to_string(),
        "--workspace".to_string(),
        "--features".to_string(),
        "mpi".to_string(),
        "--message-format=json-render-diagnostics".to_string(),
    ];
    if release {
        args.push("--release".to_string());
    }
    for t in targets {
        args.push(format!("--{}", t.kind));
        args.push(t.name.clone());
    }
    let mut cmd = cargo(&args);
    let line = workspace::describe(&cmd);
    eprintln!("$ {line}");
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({})", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    targets
        .iter()
        .map(|&t| {
            executable(&stdout, t).map(|exe| (t, exe)).with_context(|| {
                format!("cargo reported no executable for {} `{}`", t.kind, t.name)
            })
        })
        .collect()
}

/// Finds the executable of `target` among cargo's `--message-format=json` lines.
fn executable(messages: &str, target: &MpiTarget) -> Option<PathBuf> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| m["target"]["name"] == target.name.as_str())
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == target.kind))
        })
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back()
}

/// Runs `cmd` with inherited output; fails on a non-zero exit or after `timeout`, when it
/// asks the process to stop (SIGTERM, so mpirun can stop its ranks) and then kills it.
pub(crate) fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<()> {
    let line = workspace::describe(cmd);
    eprintln!("$ {line}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start `{line}`"))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            bail!("`{line}` failed ({status})");
        }
        if start.elapsed() > timeout {
            stop(&mut child)?;
            bail!("`{line}` did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asks `child` to stop (SIGTERM, so mpirun can stop its ranks), then kills it.
fn stop(child: &mut std::process::Child) -> Result<()> {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let grace = Instant::now();
    while grace.elapsed() < Duration::from_secs(5) {
        if child.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

/// Runs `cmd` with its output captured (stdin closed); fails only when it cannot start or
/// runs past `timeout` (then it is stopped as in [`run_with_timeout`]). The exit status is
/// the caller's to judge.
pub(crate) fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let line = workspace::describe(cmd);
    eprintln!("$ {line}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{line}`"))?;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > timeout {
            stop(&mut child)?;
            bail!("`{line}` did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::SAMPLE;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_flags() {
        assert_eq!(Args::parse(&[]).unwrap(), Args::default());
        let a = Args::parse(&strings(&["--np", "2,4", "--timeout=10"])).unwrap();
        assert_eq!(a.np, [2, 4]);
        assert_eq!(a.timeout, Duration::from_secs(10));
        assert!(Args::parse(&strings(&["--np", "0"])).is_err());
        assert!(Args::parse(&strings(&["--timeout", "0"])).is_err());
        assert!(Args::parse(&strings(&["--timeout", "soon"])).is_err());
    }

    #[test]
    fn selects_targets_requiring_mpi() {
        let m = Metadata::parse(SAMPLE).unwrap();
        let t = mpi_targets(m.declaring("mpi")[0]);
        let got: Vec<_> = t.iter().map(|t| (t.kind, t.name.as_str())).collect();
        assert_eq!(got, [("example", "mpi_allreduce"), ("test", "mpi_sweep")]);
    }

    #[test]
    fn finds_executables_in_cargo_messages() {
        let messages = r#"{"reason":"compiler-artifact","target":{"name":"castack_collectives","kind":["lib"]},"executable":null}
not json
{"reason":"compiler-artifact","target":{"name":"mpi_sweep","kind":["test"]},"executable":"/t/debug/deps/mpi_sweep-1"}
{"reason":"compiler-artifact","target":{"name":"mpi_sweep","kind":["example"]},"executable":"/t/debug/examples/mpi_sweep"}
{"reason":"build-finished","success":true}"#;
        let test = MpiTarget {
            package: "p".into(),
            kind: "test",
            name: "mpi_sweep".into(),
        };
        assert_eq!(
            executable(messages, &test),
            Some(PathBuf::from("/t/debug/deps/mpi_sweep-1"))
        );
        let example = MpiTarget {
            kind: "example",
            ..test
        };
        assert_eq!(
            executable(messages, &example),
            Some(PathBuf::from("/t/debug/examples/mpi_sweep"))
        );
        let missing = MpiTarget {
            package: "p".into(),
            kind: "example",
            name: "nope".into(),
        };
        assert_eq!(executable(messages, &missing), None);
    }

    #[test]
    fn timeout_kills_and_fails() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let t = Instant::now();
        let err = run_with_timeout(&mut cmd, Duration::from_millis(200)).unwrap_err();
        assert!(err.to_string().contains("did not finish"), "{err}");
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(run_with_timeout(&mut Command::new("true"), Duration::from_secs(5)).is_ok());
        assert!(run_with_timeout(&mut Command::new("false"), Duration::from_secs(5)).is_err());
    }
}
