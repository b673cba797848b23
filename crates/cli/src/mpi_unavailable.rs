//! `--backend mpi` in a binary built without feature `mpi`: a clear error (exit 2). The
//! same items as `mpi_cli.rs`, so callers name them without `#[cfg]`.

use std::process::ExitCode;

use castack_neighbor::grid::ProcessGrid;

use crate::args::{BenchCollectivesArgs, SolveArgs};
use crate::bench::{Case, Run};
use crate::bench_neighbor::{BenchNeighborArgs, Case as NeighborCase};
use crate::exit::{bad, CliError};
use crate::pingpong::{BenchPingpongArgs, Mode as PingMode};
use crate::settings::Resolved;
use crate::table::Row;

/// The error every `--backend mpi` entry point returns in this build.
fn unavailable() -> CliError {
    bad("--backend mpi needs a krylov built with MPI support: `cargo build --release --features mpi` (Open MPI and libclang installed), then run it under `mpirun -np P`")
}

/// `krylov solve --backend mpi`: not in this build.
pub(crate) fn solve(
    _args: &SolveArgs,
    _s: Resolved,
    _ranks_given: Option<usize>,
) -> Result<ExitCode, CliError> {
    Err(unavailable())
}

/// `krylov bench collectives --backend mpi`: not in this build.
pub(crate) fn bench(_args: BenchCollectivesArgs) -> Result<ExitCode, CliError> {
    Err(unavailable())
}

/// `krylov bench neighbor --backend mpi`: not in this build.
pub(crate) fn bench_neighbor(_args: BenchNeighborArgs) -> Result<ExitCode, CliError> {
    Err(unavailable())
}

/// `krylov bench pingpong --backend mpi`: not in this build.
pub(crate) fn bench_pingpong(_args: BenchPingpongArgs) -> Result<ExitCode, CliError> {
    Err(unavailable())
}

/// This rank's MPI job; it cannot exist in this build (no value of it can be made).
pub(crate) enum MpiBench {}

impl MpiBench {
    pub(crate) fn size(&self) -> usize {
        match *self {}
    }

    pub(crate) fn neighbor_case(&self, _grid: Option<&ProcessGrid>, _case: NeighborCase) -> f64 {
        match *self {}
    }

    pub(crate) fn pingpong(
        &self,
        _bytes: usize,
        _iters: usize,
        _warmup: usize,
        _mode: PingMode,
    ) -> Vec<f64> {
        match *self {}
    }

    pub(crate) fn ranks(&self, _given: Option<&[usize]>) -> Result<Vec<usize>, CliError> {
        match *self {}
    }

    pub(crate) fn rank(&self) -> usize {
        match *self {}
    }

    pub(crate) fn measure(&self, _case: Case, _run: &Run<'_>) -> Result<Row, CliError> {
        match *self {}
    }
}
