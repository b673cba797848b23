//! `cargo xtask test-gpu-emu`: the GPU path on the emulated CUDA driver (castack-cuda-emu),
//! no GPU needed; `cargo xtask ci` runs it in its cuda step.
//!
//! It builds the emulator, copies it to `target/cuda-emu/libcuda.so` and runs every part
//! with that folder first on `LD_LIBRARY_PATH` and `CASTACK_CUDA_EMU=1` (only those
//! commands: nothing else finds the emulator):
//!
//! - `unit`: the `cuda` tests that run where a driver answers (castack-krylov's device tests,
//!   every method on the GPU against the CPU among them; castack-cli's `device` test);
//! - `check`: `krylov gpu-check` (every `Device` operation against `Cpu`: bits, or the
//!   rounding bound of reductions) on a Poisson matrix of 68,921 rows;
//! - `methods`: every method, CPU against emulated GPU, with `krylov compare` on 1, 2 and 3
//!   thread ranks sharing the GPU: bases, `--mpk`, `--spmv allgather`, the loop
//!   preconditioners, on 3-D Poisson and small shared matrices ([`CASES`]); each GPU run
//!   converges with `relres_true <= tol` and the CPU's CG-equivalent iterations within
//!   max(1, 2%);
//! - `costs`: the `gpu_costs` example (kernel launches, host-blocking calls and host-device
//!   bytes per iteration for every method; it fails when a method blocks the host more
//!   often than its reductions and staged exchanges);
//! - `mpi` (where `mpirun` runs): `mpirun -np 2 krylov solve --backend mpi --device cuda`
//!   for a few methods, each process with its own emulated driver of two GPUs (the device
//!   picked by node-local rank), against `--device cpu`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::flags::{parse_list, Flags};
use crate::mpi_test;
use crate::workspace::{self, cargo, root, timed};

pub(crate) const USAGE: &str = "\
usage: cargo xtask test-gpu-emu [--parts unit,check,methods,costs,mpi]

Builds the emulated CUDA driver (crates/cuda-emu) into target/cuda-emu/libcuda.so and runs,
with LD_LIBRARY_PATH=target/cuda-emu:... and CASTACK_CUDA_EMU=1:
  unit     cargo test -p castack-linalg|castack-krylov --features cuda --lib -- cuda, and
           cargo test -p castack-cli --features cuda --test device
  check    krylov gpu-check --n 41 --reps 1 (every Device operation against the CPU)
  methods  every method, bases, --mpk, --spmv allgather and preconditioners on 1, 2 and 3
           thread ranks: krylov compare --device cuda against --device cpu (converged,
           relres_true <= tol, CG-equivalent iterations within max(1, 2%) of the CPU's)
  costs    the gpu_costs example: launches, host-blocking calls and bytes per iteration
  mpi      (where mpirun runs) mpirun -np 2 krylov solve --backend mpi --device cuda
The emulator is a test double: its times are the host's, never a GPU's.

  --parts LIST  the parts to run (default: all)";

const PARTS: [&str; 5] = ["unit", "check", "methods", "costs", "mpi"];

/// Flags of `cargo xtask test-gpu-emu`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    parts: Vec<String>,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            parts: PARTS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let parts = match flags.value("--parts")? {
            Some(list) => parse_list::<String>("--parts", &list)?,
            None => Args::default().parts,
        };
        flags.finish()?;
        if let Some(bad) = parts.iter().find(|p| !PARTS.contains(&p.as_str())) {
            bail!(
                "--parts: unknown part `{bad}` (parts: {})",
                PARTS.join(", ")
            );
        }
        Ok(Args { parts })
    }

    fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

/// The folder cudarc finds the emulator in, as `libcuda.so`.
const EMU_DIR: &str = "target/cuda-emu";

/// Builds the emulator and puts it where [`with_emulator`] points the loader.
pub(crate) fn prepare() -> Result<PathBuf> {
    workspace::run(&mut cargo(["build", "-p", "castack-cuda-emu"]))?;
    let target = crate::workspace::Metadata::load()?.target_directory;
    let built = target.join("debug/libcastack_cuda_emu.so");
    let dir = root().join(EMU_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let tmp = dir.join(".libcuda.so.tmp");
    std::fs::copy(&built, &tmp)
        .with_context(|| format!("copy {} to {}", built.display(), tmp.display()))?;
    std::fs::rename(&tmp, dir.join("libcuda.so")).context("rename libcuda.so")?;
    Ok(dir)
}

/// `cmd` with the emulator first on the loader's path (what is already there stays after
/// it: CI's NVRTC folder).
pub(crate) fn with_emulator<'a>(cmd: &'a mut Command, dir: &Path) -> &'a mut Command {
    let mut path = dir.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        path.push(":");
        path.push(old);
    }
    cmd.env("LD_LIBRARY_PATH", path)
        .env("CASTACK_CUDA_EMU", "1")
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let dir = timed("test-gpu-emu: build the emulator", prepare)?;
    if args.runs("unit") {
        timed("test-gpu-emu: unit", || unit(&dir))?;
    }
    let needs_krylov = ["check", "methods"].iter().any(|p| args.runs(p));
    let krylov = if needs_krylov {
        Some(build_krylov(&["cuda"])?)
    } else {
        None
    };
    if let Some(krylov) = &krylov {
        if args.runs("check") {
            timed("test-gpu-emu: check", || gpu_check(krylov, &dir))?;
        }
        if args.runs("methods") {
            timed("test-gpu-emu: methods", || methods(krylov, &dir))?;
        }
    }
    if args.runs("costs") {
        timed("test-gpu-emu: costs", || {
            workspace::run(with_emulator(
                &mut cargo([
                    "run",
                    "-q",
                    "-p",
                    "castack-krylov",
                    "--features",
                    "cuda",
                    "--example",
                    "gpu_costs",
                ]),
                &dir,
            ))
        })?;
    }
    if args.runs("mpi") {
        if mpi_test::has_mpirun() {
            timed("test-gpu-emu: mpi", || mpi(&dir))?;
        } else {
            eprintln!("== test-gpu-emu: mpi skipped (`mpirun` not found)");
        }
    }
    Ok(())
}

fn unit(dir: &Path) -> Result<()> {
    for package in ["castack-linalg", "castack-krylov"] {
        workspace::run(with_emulator(
            &mut cargo([
                "test",
                "-p",
                package,
                "--features",
                "cuda",
                "--lib",
                "--",
                "cuda",
            ]),
            dir,
        ))?;
    }
    workspace::run(with_emulator(
        &mut cargo([
            "test",
            "-p",
            "castack-cli",
            "--features",
            "cuda",
            "--test",
            "device",
        ]),
        dir,
    ))
}

/// `cargo build -p castack-cli --features LIST` (dev profile); the binary's path.
fn build_krylov(features: &[&str]) -> Result<PathBuf> {
    let features = features.join(",");
    workspace::run(&mut cargo([
        "build",
        "-p",
        "castack-cli",
        "--features",
        features.as_str(),
    ]))?;
    let target = crate::workspace::Metadata::load()?.target_directory;
    Ok(target.join("debug/krylov"))
}

fn gpu_check(krylov: &Path, dir: &Path) -> Result<()> {
    let mut cmd = Command::new(krylov);
    cmd.args(["gpu-check", "--n", "41", "--reps", "1"]);
    let out = mpi_test::output_with_timeout(with_emulator(&mut cmd, dir), TIMEOUT)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).with_context(|| {
        format!(
            "gpu-check printed no JSON report; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let checks = report["checks"].as_array().map_or(0, Vec::len);
    let failed: Vec<String> = report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["ok"] != true)
        .map(|c| c.to_string())
        .collect();
    if report["all_ok"] != true || !out.status.success() || !failed.is_empty() {
        bail!(
            "gpu-check on the emulator failed ({}): {}\nstderr: {}",
            out.status,
            failed.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "   gpu-check: {checks} checks passed on {}",
        report["device"]
    );
    Ok(())
}

/// Limit of one command.
const TIMEOUT: Duration = Duration::from_secs(900);

/// One `krylov compare` of the sweep, run on the CPU and on the emulated GPU.
struct Case {
    /// `p10` (generated 3-D Poisson, 1,000 rows) or a file of `../shared/matrices`.
    matrix: &'static str,
    ranks: usize,
    methods: &'static str,
    extra: &'static [&'static str],
}

const ALL: &str = "cg,ccg,pipecg,prcg,pipeprcg,groppcg,plcg,cacg,cbcg,cbcgr";

/// The sweep, sized for CI (an emulated solve costs seconds: every reduction launches
/// 1024 x 256 GPU threads). The `unit` part already runs every method at 1 and 2 ranks with
/// the Jacobi and Chebyshev preconditioners (castack-krylov's device test); this adds, through
/// the command line: 3 ranks; every basis, with and without the matrix powers kernel;
/// allgather SpMV; no preconditioner (on a matrix whose diagonal varies); two shared
/// matrices.
const CASES: &[Case] = &[
    Case {
        matrix: "p10",
        ranks: 3,
        methods: "cg,ccg,pipecg,cbcgr",
        extra: &[],
    },
    Case {
        matrix: "p10",
        ranks: 1,
        methods: "cacg:4:newton,cbcg:4:monomial,cbcgr:4:monomial,cbcgr:4:newton",
        extra: &[],
    },
    Case {
        matrix: "p10",
        ranks: 3,
        methods: "cacg:4:chebyshev:mpk,cbcg:4:monomial:mpk,cbcgr:4:newton:mpk",
        extra: &[],
    },
    Case {
        matrix: "p10",
        ranks: 3,
        methods: "cg,pipecg,cbcgr",
        extra: &["--spmv", "allgather"],
    },
    Case {
        matrix: "crystm01.mtx",
        ranks: 2,
        methods: "cg,ccg,pipecg,cbcgr",
        extra: &["--precond", "none"],
    },
    Case {
        matrix: "crystm01.mtx",
        ranks: 1,
        methods: ALL,
        extra: &[],
    },
    Case {
        matrix: "gr_30_30.mtx",
        ranks: 2,
        methods: "cg,ccg,pipecg,cbcgr",
        extra: &["--precond", "chebyshev"],
    },
];

/// `krylov compare` rows, one per method item, in order.
fn compare(
    krylov: &Path,
    dir: &Path,
    matrix: &Path,
    case: &Case,
    device: &str,
) -> Result<Vec<Value>> {
    let mut cmd = Command::new(krylov);
    cmd.arg("compare")
        .arg(matrix)
        .args(["--methods", case.methods, "--ranks"])
        .arg(case.ranks.to_string())
        .args(["--device", device, "--json"])
        .args(case.extra);
    if device == "cuda" {
        with_emulator(&mut cmd, dir);
    }
    let out = mpi_test::output_with_timeout(&mut cmd, TIMEOUT)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("compare printed a line that is not JSON: {stdout}"))?;
    let want = case.methods.split(',').count();
    if !out.status.success() || rows.len() != want {
        bail!(
            "krylov compare --device {device} ({}) gave {} of {want} rows; stderr: {}",
            out.status,
            rows.len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(rows)
}

/// Why a GPU row does not pass against its CPU row, if it does not.
fn judge(cpu: &Value, gpu: &Value) -> Option<String> {
    let eq = |r: &Value| r["equivalent_iterations"].as_u64().unwrap_or(u64::MAX);
    let (ec, eg) = (eq(cpu), eq(gpu));
    let tol = gpu["tol"].as_f64().unwrap_or(0.0);
    let relres = gpu["relres_true"].as_f64().unwrap_or(f64::INFINITY);
    if gpu["device"] != "cuda" {
        return Some(format!("ran on device {}", gpu["device"]));
    }
    if gpu["converged"] != true || relres > tol {
        return Some(format!(
            "not converged: relres_true {relres:e} against tol {tol:e} (stop: {})",
            gpu["stop_reason"]
        ));
    }
    let slack = ((ec as f64) * 0.02).ceil().max(1.0) as u64;
    if ec.abs_diff(eg) > slack {
        return Some(format!(
            "{eg} CG-equivalent iterations, the CPU {ec} (allowed: +-{slack})"
        ));
    }
    None
}

fn methods(krylov: &Path, dir: &Path) -> Result<()> {
    let work = root().join(EMU_DIR);
    let p10 = work.join("p10.mtx");
    workspace::run(
        Command::new(krylov)
            .args(["gen", "poisson3d", "--n", "10", "-o"])
            .arg(&p10),
    )?;
    let shared = root().join("../shared/matrices");
    let mut failures = Vec::new();
    let mut pairs = 0;
    eprintln!(
        "   | matrix | ranks | flags | method | CPU eq. it. | GPU eq. it. | GPU relres_true | ok |"
    );
    for case in CASES {
        let matrix = if case.matrix == "p10" {
            p10.clone()
        } else {
            let m = shared.join(case.matrix);
            if !m.exists() {
                bail!("{} not found (the shared matrices)", m.display());
            }
            m
        };
        let cpu = compare(krylov, dir, &matrix, case, "cpu")?;
        let gpu = compare(krylov, dir, &matrix, case, "cuda")?;
        for (item, (c, g)) in case.methods.split(',').zip(cpu.iter().zip(&gpu)) {
            pairs += 1;
            let verdict = judge(c, g);
            eprintln!(
                "   | {} | {} | {} | {item} | {} | {} | {:.2e} | {} |",
                case.matrix,
                case.ranks,
                case.extra.join(" "),
                c["equivalent_iterations"],
                g["equivalent_iterations"],
                g["relres_true"].as_f64().unwrap_or(f64::NAN),
                if verdict.is_none() { "yes" } else { "NO" }
            );
            if let Some(why) = verdict {
                failures.push(format!(
                    "{} --ranks {} {} {item}: {why}",
                    case.matrix,
                    case.ranks,
                    case.extra.join(" ")
                ));
            }
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} of {pairs} GPU solves on the emulator disagree with the CPU:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    eprintln!("   {pairs} GPU solves on the emulator agree with the CPU");
    Ok(())
}

/// `mpirun -np 2 krylov solve --backend mpi --device cuda` against `--device cpu`.
fn mpi(dir: &Path) -> Result<()> {
    let krylov = build_krylov(&["mpi", "cuda"])?;
    let p10 = root().join(EMU_DIR).join("p10.mtx");
    if !p10.exists() {
        workspace::run(
            Command::new(&krylov)
                .args(["gen", "poisson3d", "--n", "10", "-o"])
                .arg(&p10),
        )?;
    }
    let mut failures = Vec::new();
    for method in ["cg", "pipecg", "cbcgr"] {
        let mut rows = Vec::new();
        for device in ["cpu", "cuda"] {
            let mut cmd = mpi_test::mpirun(2);
            // Every process loads its own emulator, with two GPUs: rank r takes GPU r.
            cmd.args(["-x", "LD_LIBRARY_PATH", "-x", "CASTACK_CUDA_EMU", "-x"])
                .arg("CASTACK_CUDA_EMU_DEVICES")
                .arg(&krylov)
                .arg("solve")
                .arg(&p10)
                .args([
                    "--backend",
                    "mpi",
                    "--method",
                    method,
                    "--device",
                    device,
                    "--json",
                ]);
            with_emulator(&mut cmd, dir).env("CASTACK_CUDA_EMU_DEVICES", "2");
            let out = mpi_test::output_with_timeout(&mut cmd, TIMEOUT)?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let row: Value = stdout
                .lines()
                .find_map(|l| serde_json::from_str(l).ok())
                .with_context(|| {
                    format!(
                        "mpirun krylov solve --device {device} ({}) printed no report; stderr: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    )
                })?;
            rows.push(row);
        }
        let verdict = judge(&rows[0], &rows[1]);
        eprintln!(
            "   mpi -np 2 {method}: CPU {} GPU {} CG-equivalent iterations, GPU relres_true {}: {}",
            rows[0]["equivalent_iterations"],
            rows[1]["equivalent_iterations"],
            rows[1]["relres_true"],
            verdict.as_deref().unwrap_or("ok")
        );
        if let Some(why) = verdict {
            failures.push(format!("{method}: {why}"));
        }
    }
    if !failures.is_empty() {
        bail!("mpirun on the emulator:\n{}", failures.join("\n"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_parts() {
        let a = Args::parse(&["--parts".into(), "unit,mpi".into()]).unwrap();
        assert!(a.runs("unit") && a.runs("mpi") && !a.runs("methods"));
        assert!(Args::parse(&["--parts".into(), "gpu".into()]).is_err());
        assert!(Args::parse(&[]).unwrap().runs("costs"));
    }

    #[test]
    fn judges_iterations_and_convergence() {
        let row = |dev: &str, it: u64, conv: bool, rr: f64| {
            json!({"device": dev, "equivalent_iterations": it, "converged": conv,
                   "relres_true": rr, "tol": 1e-8, "stop_reason": "converged"})
        };
        let cpu = row("cpu", 100, true, 1e-9);
        assert_eq!(judge(&cpu, &row("cuda", 102, true, 1e-9)), None);
        assert!(judge(&cpu, &row("cuda", 103, true, 1e-9)).is_some());
        assert!(judge(&cpu, &row("cuda", 100, true, 2e-8)).is_some());
        assert!(judge(&cpu, &row("cuda", 100, false, 1e-9)).is_some());
        assert!(judge(&cpu, &row("cpu", 100, true, 1e-9)).is_some());
        let small = row("cpu", 10, true, 1e-9);
        assert_eq!(judge(&small, &row("cuda", 11, true, 1e-9)), None);
        assert!(judge(&small, &row("cuda", 12, true, 1e-9)).is_some());
    }
}
