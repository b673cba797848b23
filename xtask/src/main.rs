//! `cargo xtask <command>`: project automation, written in Rust so it runs wherever cargo does.
//!
//! This file only parses the command name and dispatches; each command lives in its own
//! module (`ci.rs`, `mpi_test.rs`, `sweep.rs`, `test_gpu.rs`, ...) with its flags and usage text.

mod bench_report;
mod busy;
mod calibrate_validate;
mod ci;
mod device_validate;
mod family_sweep;
mod flags;
mod fuzz;
mod latency;
mod mpi_cli_checks;
mod mpi_matrices;
mod mpi_test;
mod plan_probes;
mod plan_scale;
mod plan_validate;
mod sweep;
mod test_gpu;
mod test_gpu_emu;
mod vs_petsc;
mod workspace;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [flags]

commands:
  ci         fmt check, clippy, tests, examples, then the mpi and cuda steps where a package
             declares those features (what .ci/run calls)
  test-mpi   build the MPI test binaries and run each under mpirun with 1..4 ranks, then check
             the krylov binary under mpirun (alias: mpi-test)
  mpi-matrices
             krylov solve --backend mpi vs --backend threads on every shared matrix
  family-sweep
             cg against prcg, pipeprcg, groppcg and plcg (depths 1-3) on the shared
             matrices with condition number <= 1e8 and 3-D Poisson: relres_true,
             iterations vs 1.1 x cg + 2 (+ 2l for plcg)
  sweep      solve every matrix of a folder (or the generated Poisson set) with the krylov
             binary over rank counts, orderings and methods
  test-gpu   where nvidia-smi runs: the cuda-feature tests and `krylov gpu-check`; else skip;
             --prepare [DIR]: build the GPU check folder for a GPU machine without Rust
  test-gpu-emu
             the GPU path on the emulated CUDA driver, no GPU needed: cuda unit tests,
             gpu-check, every method CPU vs GPU, host costs per iteration, mpirun
  bench-report
             modeled collective latency, peach2 vs ib-qdr: CSV and SVG under reports/, and
             where the model says TCA stops beating InfiniBand per operation
  plan-validate
             krylov plan against krylov solve --backend sim per candidate and rank count:
             planned vs simulated best and worst prediction ratio (issue 9)
  plan-scale krylov plan of 3-D Poisson 64^3 at 4,096 ranks on ito with its default flags:
             wall time (target 60 s) and whether any candidate is left unpriced
  plan-probes
             krylov plan's tracked iteration counts against full runs of every candidate on
             the heterogeneous 3-D Poisson matrix, with both plans' wall times
  latency    the threads backend's 8-byte allreduce at 2 ranks against Open MPI's
             MPI_Allreduce in one run, beside the floor of a bare cache-line exchange
  busy       krylov solve with 1 and 2 thread ranks, idle and beside a busy process, and
             the idle 8-byte allreduce: how waiting ranks give way on a shared machine
  fuzz       seeded mutations of Matrix Market files, TOML configs and flags against the
             release krylov binary under memory and time limits; panics, aborts, hangs, bad
             exit codes and false convergence claims saved under target/fuzz/
  vs-petsc   castack's CG (default flags and explicit threads; ccg, pipecg) against PETSc
             KSPCG on the 1M-row Poisson matrix, interleaved: ms/iteration and ratios
  device-validate
             krylov solve --backend sim with a calibrated preset (krylov calibrate) against
             measured solves of 3-D Poisson n = 16, 32, 64, 100: predicted / measured
  calibrate-validate
             mpirun -np 2 krylov calibrate --backend mpi, then krylov plan with that preset
             against measured mpirun -np 2 krylov solve --backend mpi of 3-D Poisson n = 32,
             64, 100 for cg, ccg, pipecg, cbcgr:4: predicted / measured per iteration
  help       this text; `cargo xtask <command> --help` for a command's flags";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: &[String]) -> anyhow::Result<()> {
    let Some((command, rest)) = args.split_first() else {
        println!("{USAGE}");
        anyhow::bail!("no command given");
    };
    let wants_help = rest.iter().any(|a| a == "-h" || a == "--help");
    match command.as_str() {
        "ci" if wants_help => print_usage(ci::USAGE),
        "ci" => ci::run(ci::Args::parse(rest)?),
        "test-mpi" | "mpi-test" if wants_help => print_usage(mpi_test::USAGE),
        "test-mpi" | "mpi-test" => mpi_test::run(&mpi_test::Args::parse(rest)?),
        "mpi-matrices" if wants_help => print_usage(mpi_matrices::USAGE),
        "mpi-matrices" => mpi_matrices::run(&mpi_matrices::Args::parse(rest)?),
        "family-sweep" if wants_help => print_usage(family_sweep::USAGE),
        "family-sweep" => family_sweep::run(&family_sweep::Args::parse(rest)?),
        "sweep" if wants_help => print_usage(sweep::USAGE),
        "sweep" => sweep::run(&sweep::Args::parse(rest)?),
        "test-gpu" if wants_help => print_usage(test_gpu::USAGE),
        "test-gpu" => test_gpu::run(&test_gpu::Args::parse(rest)?),
        "test-gpu-emu" if wants_help => print_usage(test_gpu_emu::USAGE),
        "test-gpu-emu" => test_gpu_emu::run(&test_gpu_emu::Args::parse(rest)?),
        "bench-report" if wants_help => print_usage(bench_report::USAGE),
        "bench-report" => bench_report::run(&bench_report::Args::parse(rest)?),
        "plan-probes" if wants_help => print_usage(plan_probes::USAGE),
        "plan-probes" => plan_probes::run(&plan_probes::Args::parse(rest)?),
        "plan-scale" if wants_help => print_usage(plan_scale::USAGE),
        "plan-scale" => plan_scale::run(&plan_scale::Args::parse(rest)?),
        "plan-validate" if wants_help => print_usage(plan_validate::USAGE),
        "plan-validate" => plan_validate::run(&plan_validate::Args::parse(rest)?),
        "busy" if wants_help => print_usage(busy::USAGE),
        "busy" => busy::run(&busy::Args::parse(rest)?),
        "latency" if wants_help => print_usage(latency::USAGE),
        "latency" => latency::run(&latency::Args::parse(rest)?),
        "fuzz" if wants_help => print_usage(fuzz::USAGE),
        "fuzz" => fuzz::run(&fuzz::Args::parse(rest)?),
        "device-validate" if wants_help => print_usage(device_validate::USAGE),
        "device-validate" => device_validate::run(&device_validate::Args::parse(rest)?),
        "calibrate-validate" if wants_help => print_usage(calibrate_validate::USAGE),
        "calibrate-validate" => calibrate_validate::run(&calibrate_validate::Args::parse(rest)?),
        "vs-petsc" if wants_help => print_usage(vs_petsc::USAGE),
        "vs-petsc" => vs_petsc::run(&vs_petsc::Args::parse(rest)?),
        "help" | "-h" | "--help" => print_usage(USAGE),
        other => {
            println!("{USAGE}");
            anyhow::bail!("unknown command `{other}`")
        }
    }
}

fn print_usage(text: &str) -> anyhow::Result<()> {
    println!("{text}");
    Ok(())
}
