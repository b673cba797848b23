//! `krylov`: solve SPD systems with the CG family, generate test matrices.
//!
//! `main` only parses and dispatches; each subcommand lives in its own file.

mod args;
mod bench;
mod bench_neighbor;
mod budget;
mod calibrate;
mod calibrate_net;
mod clock;
mod compare;
#[cfg(feature = "cuda")]
mod cuda_cli;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_unavailable.rs"]
mod cuda_cli;
mod exit;
mod fabric;
mod gen;
mod gpu_check;
mod launch;
// `--backend mpi`: the real launcher glue with feature `mpi`, else a clear error.
#[cfg(feature = "mpi")]
mod mpi_cli;
#[cfg(not(feature = "mpi"))]
#[path = "mpi_unavailable.rs"]
mod mpi_cli;
mod output;
mod pingpong;
mod plan;
mod plot;
mod probe_cache;
mod settings;
mod solve;
mod table;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return exit::clap_error(e),
    };
    let result = match cli.command {
        Command::Solve(a) => solve::run(a),
        Command::Gen(a) => gen::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Plan(a) => plan::run(*a),
        Command::Bench(a) => match a.kind {
            args::BenchKind::Collectives(b) => bench::run(*b),
            args::BenchKind::Pingpong(b) => pingpong::run(*b),
            args::BenchKind::Neighbor(b) => bench_neighbor::run(*b),
        },
        Command::GpuCheck(a) => gpu_check::run(a),
        Command::Calibrate(a) => calibrate_net::run(&a),
    };
    match result {
        Ok(code) => code,
        Err(e) => e.report(),
    }
}
