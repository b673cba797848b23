//! [`DeviceError`]: what can go wrong on a device (a leaf: every layer above names it).

use thiserror::Error;

/// What can go wrong on a device.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// No CUDA driver library on this machine.
    #[error("no NVIDIA driver: the CUDA driver library (libcuda.so) was not found, so --device cuda cannot run on this machine")]
    NoDriver,
    /// The driver found no usable CUDA device.
    #[error("the NVIDIA driver reports no CUDA device with ordinal {ordinal} ({found} found)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        found: usize,
    },
    /// NVRTC (the runtime compiler) is not installed.
    #[error("NVRTC (libnvrtc.so.13) was not found: install it with `pip install nvidia-cuda-nvrtc==13.0.88` and put its nvidia/cu13/lib on LD_LIBRARY_PATH")]
    NoNvrtc,
    /// NVRTC rejected a kernel source.
    #[error("NVRTC failed to compile the CUDA kernels: {log}")]
    Compile {
        /// The compiler's log.
        log: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error in {op}: {detail}")]
    Driver {
        /// The operation.
        op: &'static str,
        /// The driver's error.
        detail: String,
    },
    /// A kernel launched with arguments that do not fit its parameters (the argument list
    /// of `device/cuda.rs` and the kernel of `kernels.cu` disagree).
    #[error("{op}: kernel `{kernel}` takes parameters of {expected:?} bytes, launched with {got:?} (device/cuda.rs and kernels.cu disagree)")]
    KernelArguments {
        /// The operation.
        op: &'static str,
        /// The kernel.
        kernel: &'static str,
        /// The kernel's parameter sizes in bytes (from its PTX entry).
        expected: Vec<usize>,
        /// The sizes of the arguments given.
        got: Vec<usize>,
    },
    /// An operation the device has no kernel for.
    #[error("device {device} has no {op}")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The device's name.
        device: &'static str,
    },
    /// Operands of an operation have inconsistent lengths.
    #[error("device {op}: operand has {got} values, expected {expected}")]
    LengthMismatch {
        /// The operation.
        op: &'static str,
        /// The expected length.
        expected: usize,
        /// The actual length.
        got: usize,
    },
    /// An index list addresses a value outside its vector.
    #[error("device {op}: index {index} outside a vector of {len} values")]
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The offending index.
        index: usize,
        /// The vector's length.
        len: usize,
    },
    /// A CSR block that is not well formed (checked before any kernel reads it).
    #[error("invalid CSR block: {0}")]
    InvalidCsr(String),
    /// The operating system would not start a rank's kernel threads.
    #[error("cannot start {threads} kernel threads: {detail}")]
    Threads {
        /// Threads asked for.
        threads: usize,
        /// The reason.
        detail: String,
    },
}
