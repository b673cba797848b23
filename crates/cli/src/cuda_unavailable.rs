//! `--device cuda` in a binary built without feature `cuda`: a clear error (exit 2). The
//! same items as `cuda_cli.rs`, so callers name them without `#[cfg]`.

use castack_collectives::Communicator;
use castack_krylov::{KrylovError, SolveReport};

use crate::exit::{bad, CliError};
use crate::solve::Prepared;

/// The one-line reason.
pub(crate) const NOT_BUILT: &str = "built without the cuda feature; rebuild with --features cuda";

/// `--device cuda` cannot run in this build: one line, exit 2.
pub(crate) fn check() -> Result<(), CliError> {
    Err(bad(format!("--device cuda: {NOT_BUILT}")))
}

/// Unreachable in practice ([`check`] refuses first); an error value all the same.
pub(crate) fn solve_rank<C: Communicator + ?Sized>(
    _comm: &C,
    _prep: &Prepared<'_>,
    _local_rank: usize,
) -> Result<(Vec<f64>, SolveReport, f64), KrylovError> {
    Err(KrylovError::InvalidConfig(format!(
        "--device cuda: {NOT_BUILT}"
    )))
}
