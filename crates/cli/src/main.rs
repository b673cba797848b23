//! `krylov`: solve SPD systems with the CG family, generate test matrices.
//!
//! `main` only parses and dispatches; each subcommand lives in its own file.

mod args;
mod bench;
mod compare;
mod exit;
mod gen;
mod output;
mod settings;
mod solve;

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
        Command::Bench(a) => match a.kind {
            args::BenchKind::Collectives(b) => bench::run(*b),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => e.report(),
    }
}
