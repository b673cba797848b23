//! `cargo xtask ci`: the checks CI runs, in order, stopping at the first failure.
//!
//! 1. `fmt`: `cargo fmt --all -- --check`
//! 2. `clippy`: `cargo clippy --workspace --all-targets -- -D warnings`
//! 3. `test`: `cargo test --workspace`
//! 4. `examples`: `cargo build --workspace --examples`, then `cargo run -p PKG --example NAME`
//!    for every example whose required features are on by default (examples assert their
//!    results, so a non-zero exit fails CI)
//! 5. `fuzz`: what `cargo xtask fuzz --dev --cases 1200 --minutes 1` does with the default
//!    seed: the dev-profile `krylov` the test step built (`cargo test --workspace --no-run`,
//!    a no-op after the test step; no release build), the same 1200
//!    cases on every host that starts them within the minute (about 40 s on two cores); a
//!    case still running at the end may take up to the 60 s hang limit, so the step fuzzes
//!    for at most two minutes
//! 6. `mpi`, only if some package declares a `mpi` feature and `mpirun` runs: `cargo build
//!    --workspace --features mpi`, clippy with `--features mpi` on the declaring packages,
//!    then what `cargo xtask test-mpi` does
//! 7. `cuda`, only if some package declares a `cuda` feature: `cargo build --workspace
//!    --features cuda`, then `cargo test -p PKG --features cuda` on the targets the feature
//!    changes (krylov's unit tests, the CLI's `device` test; see `cuda_targets`) with no
//!    driver, then what `cargo xtask test-gpu-emu` does: the GPU path on the emulated CUDA
//!    driver (cuda tests, gpu-check, every method against the CPU, host costs per
//!    iteration, mpirun where it runs)
//!
//! Features are read from `cargo metadata` (each package's `[features]` table), so the steps
//! switch on by themselves when a crate gains the feature.

use crate::flags::{parse_list, Flags};
use crate::workspace::{self, cargo, timed, Metadata, Package};
use crate::{fuzz, mpi_test, test_gpu_emu};
use anyhow::{bail, Result};
use std::time::Instant;

pub(crate) const USAGE: &str = "\
usage: cargo xtask ci [--skip STEP[,STEP...]]

Runs, in order, stopping at the first failure:
  fmt       cargo fmt --all -- --check
  clippy    cargo clippy --workspace --all-targets -- -D warnings
  test      cargo test --workspace
  examples  cargo build --workspace --examples; cargo run -p PKG --example NAME for each
  fuzz      cargo xtask fuzz --dev --cases 1200 --minutes 1 (the dev-profile binary; default seed:
            panics, aborts, hangs, bad exit codes, false convergence claims fail the step)
  mpi       (if a package declares feature `mpi` and mpirun runs) cargo build --workspace
            --features mpi; cargo clippy --features mpi on those packages; cargo xtask test-mpi
  cuda      (if a package declares feature `cuda`) cargo build --workspace --features cuda;
            cargo test -p PKG --features cuda (krylov --lib, cli --test device) without a
            driver; then cargo xtask test-gpu-emu (the same on the emulated driver, gpu-check,
            every method CPU vs GPU, costs per iteration, mpirun -np 2 --device cuda)
Prints `== STEP: SECONDS s` after each step and the total at the end.

  --skip LIST   steps to leave out, e.g. --skip fmt,clippy";

const STEPS: [&str; 7] = ["fmt", "clippy", "test", "examples", "fuzz", "mpi", "cuda"];

/// Flags of `cargo xtask ci`.
#[derive(Debug, Default)]
pub(crate) struct Args {
    skip: Vec<String>,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let skip = match flags.value("--skip")? {
            Some(list) => parse_list::<String>("--skip", &list)?,
            None => Vec::new(),
        };
        flags.finish()?;
        if let Some(bad) = skip.iter().find(|s| !STEPS.contains(&s.as_str())) {
            bail!("--skip: unknown step `{bad}` (steps: {})", STEPS.join(", "));
        }
        Ok(Args { skip })
    }

    fn runs(&self, step: &str) -> bool {
        !self.skip.iter().any(|s| s == step)
    }
}

pub(crate) fn run(args: Args) -> Result<()> {
    let start = Instant::now();
    let result = run_steps(&args);
    let total = start.elapsed().as_secs_f64();
    match &result {
        Ok(()) => eprintln!("== total: {total:.1} s (ci passed)"),
        Err(_) => eprintln!("== total: {total:.1} s (ci FAILED)"),
    }
    result
}

fn run_steps(args: &Args) -> Result<()> {
    let metadata = Metadata::load()?;
    let mpi: Vec<&Package> = metadata.declaring("mpi");
    let cuda: Vec<&Package> = metadata.declaring("cuda");
    eprintln!(
        "ci: workspace {}; feature `mpi` declared by [{}]; feature `cuda` declared by [{}]",
        workspace::root().display(),
        names(&mpi),
        names(&cuda)
    );

    if args.runs("fmt") {
        timed("fmt", || {
            workspace::run(&mut cargo(["fmt", "--all", "--", "--check"]))
        })?;
    }
    if args.runs("clippy") {
        timed("clippy", || {
            workspace::run(&mut cargo([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]))
        })?;
    }
    if args.runs("test") {
        timed("test", || {
            workspace::run(&mut cargo(["test", "--workspace"]))
        })?;
    }
    if args.runs("examples") {
        timed("examples", || run_examples(&metadata))?;
    }
    if args.runs("fuzz") {
        timed("fuzz", || fuzz::run(&fuzz::Args::ci()))?;
    }
    if args.runs("mpi") {
        if mpi.is_empty() {
            eprintln!("== mpi: skipped (no workspace package declares feature `mpi`)");
        } else if !mpi_test::has_mpirun() {
            eprintln!(
                "== mpi: skipped (`mpirun` not found; .ci/run installs Open MPI, locally: \
                 apt-get install -y openmpi-bin libopenmpi-dev libclang-dev)"
            );
        } else {
            timed("mpi", || {
                workspace::run(&mut cargo(["build", "--workspace", "--features", "mpi"]))?;
                // The clippy step above builds default features only: lint the mpi code too.
                let mut clippy = vec!["clippy", "--all-targets", "--features", "mpi"];
                for package in &mpi {
                    clippy.extend(["-p", package.name.as_str()]);
                }
                clippy.extend(["--", "-D", "warnings"]);
                workspace::run(&mut cargo(clippy))?;
                mpi_test::run_with(&metadata, &mpi_test::Args::default())
            })?;
        }
    }
    if args.runs("cuda") {
        if cuda.is_empty() {
            eprintln!("== cuda: skipped (no workspace package declares feature `cuda`)");
        } else {
            timed("cuda", || {
                workspace::run(&mut cargo(["build", "--workspace", "--features", "cuda"]))?;
                // Only the targets whose code the feature changes: the rest of each suite
                // already ran in the test step, and rebuilding it with the feature would
                // double CI's test compile time.
                for package in &cuda {
                    let mut test = vec!["test", "-p", package.name.as_str(), "--features", "cuda"];
                    test.extend(cuda_targets(&package.name));
                    workspace::run(&mut cargo(test))?;
                }
                test_gpu_emu::run(&test_gpu_emu::Args::default())
            })?;
        }
    }
    Ok(())
}

/// The test targets the cuda step runs for a package declaring feature `cuda`: linalg's unit
/// tests (the device module: kernels compiled by NVRTC, embedded PTX current, no-driver
/// errors), krylov's (the whole solver on a GPU where a driver answers) and the CLI's
/// `device` test (the `--device cuda` error paths); every target of a
/// package not listed here.
fn cuda_targets(package: &str) -> &'static [&'static str] {
    match package {
        "castack-linalg" | "castack-krylov" => &["--lib"],
        "castack-cli" => &["--test", "device"],
        _ => &[],
    }
}

fn run_examples(metadata: &Metadata) -> Result<()> {
    workspace::run(&mut cargo(["build", "--workspace", "--examples"]))?;
    let (runnable, skipped) = examples(metadata);
    for (package, example, needs) in &skipped {
        eprintln!("   skipping example {package}/{example}: needs features {needs:?}");
    }
    if runnable.is_empty() {
        eprintln!("   no examples to run");
    }
    for (package, example) in &runnable {
        workspace::run(&mut cargo(["run", "-p", package, "--example", example]))?;
    }
    eprintln!("   {} example(s) ran and passed", runnable.len());
    Ok(())
}

type Skipped = (String, String, Vec<String>);

/// Every example of every workspace package, split into those a plain `cargo run --example`
/// can run (their required features are on by default) and those it cannot (with the
/// features they lack; the `mpi` examples are run by `mpi-test` instead).
fn examples(metadata: &Metadata) -> (Vec<(String, String)>, Vec<Skipped>) {
    let mut runnable = Vec::new();
    let mut skipped = Vec::new();
    for package in &metadata.packages {
        let defaults = package.default_features();
        for target in package.targets_of_kind("example") {
            let missing: Vec<String> = target
                .required_features
                .iter()
                .filter(|f| !defaults.contains(*f))
                .cloned()
                .collect();
            if missing.is_empty() {
                runnable.push((package.name.clone(), target.name.clone()));
            } else {
                skipped.push((package.name.clone(), target.name.clone(), missing));
            }
        }
    }
    (runnable, skipped)
}

fn names(packages: &[&Package]) -> String {
    packages
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::SAMPLE;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_skip() {
        let a = Args::parse(&strings(&["--skip", "fmt,clippy"])).unwrap();
        assert!(!a.runs("fmt") && !a.runs("clippy") && a.runs("test"));
        assert!(Args::parse(&strings(&["--skip", "lint"])).is_err());
        assert!(Args::parse(&strings(&["--fast"])).is_err());
        assert!(Args::parse(&[]).unwrap().runs("mpi"));
    }

    #[test]
    fn examples_needing_off_features_are_skipped() {
        let m = Metadata::parse(SAMPLE).unwrap();
        let (runnable, skipped) = examples(&m);
        let runnable: Vec<_> = runnable.iter().map(|(_, e)| e.as_str()).collect();
        assert_eq!(runnable, ["allreduce", "fast_demo"]);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].1, "mpi_allreduce");
        assert_eq!(skipped[0].2, ["mpi"]);
    }
}
