//! `krylov gpu-check`: the self-check of the CUDA device against the CPU device.
//!
//! `krylov gpu-check [--n N] [--reps R] [--seed S] [--ordinal I]` opens CUDA device `I` and
//! runs castack-linalg's conformance kit on it (`conformance::cuda::check`): EVERY
//! operation of the `Device` trait on `CudaDevice` and on `Cpu` with the same random
//! inputs, on a 3-D Poisson matrix of `N^3` rows and a random irregular matrix of as many
//! rows (the same bits for elementwise operations and the SpMV kernels that sum rows in CSR
//! order, the rounding bound `64 m eps sum |terms|` for reductions and multi-lane rows,
//! untouched tails, errors not panics), and times every SpMV kernel and the fused
//! `spmv_dot` over `R` calls against a device-to-device copy. The kit's module
//! documentation lists the checks.
//!
//! One JSON object goes to stdout (the kit's `Report`). Exit 0 when every check passed, 1
//! when one failed (or a CUDA call failed mid-run), 2 without the `cuda` feature, the
//! driver or a GPU.

use std::process::ExitCode;

use crate::args::GpuCheckArgs;
use crate::exit::{bad, CliError};

/// `krylov gpu-check` without the feature: one line, exit 2.
#[cfg(not(feature = "cuda"))]
pub(crate) fn run(_args: GpuCheckArgs) -> Result<ExitCode, CliError> {
    Err(bad(format!("gpu-check: {}", crate::cuda_cli::NOT_BUILT)))
}

/// `krylov gpu-check`.
#[cfg(feature = "cuda")]
pub(crate) fn run(args: GpuCheckArgs) -> Result<ExitCode, CliError> {
    use castack_krylov::cuda::CudaDevice;
    use castack_krylov::linalg::conformance;

    if args.n == 0 || args.reps == 0 {
        return Err(bad("gpu-check: --n and --reps must be at least 1"));
    }
    let mut gpu = CudaDevice::new(args.ordinal).map_err(|e| bad(format!("gpu-check: {e}")))?;
    let report =
        conformance::cuda::check(&mut gpu, args.n, args.seed, args.reps).map_err(kit_error)?;
    // Through a `Value`, whose keys are sorted: the layout gpu-check has always printed.
    let json = serde_json::to_value(&report)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .map_err(CliError::failed)?;
    println!("{json}");
    Ok(if report.all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::RUN_FAILED)
    })
}

/// A kit that could not run: a CUDA call that failed mid-run exits 1, a grid it cannot
/// build 2.
#[cfg(feature = "cuda")]
fn kit_error(e: castack_krylov::linalg::LinalgError) -> CliError {
    use castack_krylov::linalg::LinalgError;

    match e {
        LinalgError::Device(e) => CliError::failed(anyhow::anyhow!("gpu-check: {e}")),
        LinalgError::InvalidConfig(m) => bad(format!("gpu-check: {m}")),
        e => bad(format!("gpu-check: {e}")),
    }
}
