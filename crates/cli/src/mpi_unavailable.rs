//! `--backend mpi` in a binary built without feature `mpi`: a clear error (exit 2). The
//! same items as `mpi_cli.rs`, so callers name them without `#[cfg]`.

use castack_collectives::bench_case::OpCase;
use castack_collectives::{CommError, Communicator};

use crate::exit::{bad, CliError};

/// The error every `--backend mpi` run returns in this build.
fn unavailable() -> CliError {
    bad("--backend mpi needs a krylov built with MPI support: `cargo build --release --features mpi` (Open MPI and libclang installed), then run it under `mpirun -np P`")
}

/// This process's part of an MPI job; it cannot exist in this build (no value of it can be
/// made).
pub(crate) enum Job {}

impl Job {
    /// `--backend mpi`: not in this build.
    pub(crate) fn start() -> Result<Self, CliError> {
        Err(unavailable())
    }

    pub(crate) fn comm(&self) -> &dyn Communicator {
        match *self {}
    }

    pub(crate) fn local_rank(&self) -> usize {
        match *self {}
    }

    pub(crate) fn local_size(&self) -> usize {
        match *self {}
    }

    pub(crate) fn node_leader(&self) -> usize {
        match *self {}
    }

    pub(crate) fn fail(&self, _e: CliError) -> ! {
        match *self {}
    }

    pub(crate) fn with_native<R>(
        &self,
        _op: OpCase,
        _root: usize,
        _bytes: usize,
        _f: impl FnOnce(
            &dyn Communicator,
            &mut dyn FnMut(&mut [u8]) -> Result<(), CommError>,
        ) -> Result<R, CommError>,
    ) -> Result<R, CommError> {
        match *self {}
    }
}
