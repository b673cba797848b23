//! `--device cuda` (feature `cuda`): the solver on the GPU through `CudaDevice`.
//!
//! - **Which GPU.** A rank opens device `local_rank mod count`, where `count` is the number
//!   of GPUs the driver reports and `local_rank` the rank's index among the ranks on its
//!   node: under `--backend threads` every rank is on this node (so with one GPU all
//!   ranks share it, each on its own stream), under `--backend mpi` the node-local rank of
//!   `MPI_COMM_TYPE_SHARED`.
//! - **Before anything is read.** [`check`] opens device 0 once, so a machine without the
//!   NVIDIA driver or without a GPU gets one line naming what is missing (exit 2) before the
//!   matrix is read.
//! - The solve itself is the caller's work ([`OnDevice`]: `solve`'s one rank, generic over
//!   the device), the same code as on the CPU.

use castack_krylov::cuda::{device_count, CudaDevice};
use castack_krylov::{Device, DeviceError, KrylovError};

use crate::exit::{bad, CliError};

/// Whether a GPU can be opened here: one line (exit 2) naming the driver or the device when
/// not.
pub(crate) fn check() -> Result<(), CliError> {
    CudaDevice::new(0)
        .map(drop)
        .map_err(|e| bad(format!("--device cuda: {e}")))
}

/// Work that runs on whichever solver device it is given (a rank's solve, generic over the
/// device).
pub(crate) trait OnDevice {
    /// What the work returns.
    type Out;
    /// Run on `dev`.
    fn run<D: Device>(self, dev: D) -> Result<Self::Out, KrylovError>;
}

/// Run `work` on GPU `local_rank mod count`.
pub(crate) fn on_gpu<W: OnDevice>(local_rank: usize, work: W) -> Result<W::Out, KrylovError> {
    let count = device_count()?;
    if count == 0 {
        return Err(DeviceError::NoDevice {
            ordinal: 0,
            found: 0,
        }
        .into());
    }
    let dev = CudaDevice::new(local_rank % count)?;
    work.run(dev)
}
