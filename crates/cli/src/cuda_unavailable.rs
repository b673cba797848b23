//! `--device cuda` in a binary built without feature `cuda`: a clear error (exit 2). The
//! same items as `cuda_cli.rs`, so callers name them without `#[cfg]`.

use castack_krylov::{Device, KrylovError};

use crate::exit::{bad, CliError};

/// The one-line reason.
pub(crate) const NOT_BUILT: &str = "built without the cuda feature; rebuild with --features cuda";

/// `--device cuda` cannot run in this build: one line, exit 2.
pub(crate) fn check() -> Result<(), CliError> {
    Err(bad(format!("--device cuda: {NOT_BUILT}")))
}

/// Work that runs on whichever solver device it is given (as in `cuda_cli.rs`).
pub(crate) trait OnDevice {
    /// What the work returns.
    type Out;
    /// Run on `dev`.
    #[allow(dead_code)] // no device to run on in this build
    fn run<D: Device>(self, dev: D) -> Result<Self::Out, KrylovError>;
}

/// Unreachable in practice ([`check`] refuses first); an error value all the same.
pub(crate) fn on_gpu<W: OnDevice>(_local_rank: usize, _work: W) -> Result<W::Out, KrylovError> {
    Err(KrylovError::InvalidConfig(format!(
        "--device cuda: {NOT_BUILT}"
    )))
}
