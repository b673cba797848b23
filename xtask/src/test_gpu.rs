//! `cargo xtask test-gpu`: the GPU checks, where a GPU is present.
//!
//! With `nvidia-smi` on the machine it runs the `cuda`-feature tests of the packages that
//! declare the feature (their driver-present paths: device open, refusal of unported
//! solves, a small `gpu-check`), builds the release binary with `--features cuda` and runs
//! `krylov gpu-check --n N`, whose JSON report (kernel agreement with the CPU, SpMV and copy
//! bandwidth) it prints. Without `nvidia-smi` it says it skipped and succeeds.

use anyhow::{bail, Context, Result};
use std::process::Command;

use crate::flags::Flags;
use crate::workspace::{self, cargo, root, timed};

pub(crate) const USAGE: &str = "\
usage: cargo xtask test-gpu [--n N]

Where `nvidia-smi` runs: cargo test --features cuda for the packages declaring `cuda`, then
cargo build --release -p castack-cli --features cuda and target/release/krylov gpu-check --n N
(exit 1 when a kernel disagrees with the CPU). Elsewhere: prints that it skipped, exit 0.

  --n N   grid points per direction of the gpu-check Poisson matrix (default 128)";

/// Flags of `cargo xtask test-gpu`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    n: usize,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let mut n = 128;
        if let Some(v) = flags.value("--n")? {
            n = v
                .parse()
                .with_context(|| format!("--n: not a positive integer: `{v}`"))?;
            if n == 0 {
                bail!("--n must be at least 1");
            }
        }
        flags.finish()?;
        Ok(Args { n })
    }
}

/// Whether `nvidia-smi` runs successfully (a driver and a GPU are present).
fn gpu_present() -> bool {
    Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .is_ok_and(|o| o.status.success())
}

pub(crate) fn run(args: &Args) -> Result<()> {
    if !gpu_present() {
        eprintln!("== test-gpu: skipped (nvidia-smi not found or failed: no GPU on this machine)");
        return Ok(());
    }
    let metadata = workspace::Metadata::load()?;
    let cuda = metadata.declaring("cuda");
    if cuda.is_empty() {
        bail!("no workspace package declares feature `cuda`");
    }
    timed("cuda tests", || {
        for package in &cuda {
            workspace::run(&mut cargo([
                "test",
                "-p",
                &package.name,
                "--features",
                "cuda",
            ]))?;
        }
        Ok(())
    })?;
    timed("gpu-check", || {
        workspace::run(&mut cargo([
            "build",
            "--release",
            "-p",
            "castack-cli",
            "--features",
            "cuda",
        ]))?;
        let bin = root().join("target/release/krylov");
        workspace::run(Command::new(bin).args(["gpu-check", "--n", &args.n.to_string()]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_n() {
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(Args::parse(&s(&[])).unwrap(), Args { n: 128 });
        assert_eq!(Args::parse(&s(&["--n", "64"])).unwrap(), Args { n: 64 });
        assert!(Args::parse(&s(&["--n", "0"])).is_err());
        assert!(Args::parse(&s(&["--m", "1"])).is_err());
    }
}
