//! An emulated CUDA driver for tests: castack's CUDA path, through cudarc, without a GPU.
//!
//! This crate builds `libcastack_cuda_emu.so`, a shared library that answers the CUDA
//! driver API entry points castack's use of cudarc reaches. cudarc loads the driver
//! dynamically by name (`libcuda.so` first), so a folder holding this library under that
//! name, first on `LD_LIBRARY_PATH`, puts it in place of the NVIDIA driver for that
//! process. `cargo xtask test-gpu-emu` makes the folder (`target/cuda-emu/`) and sets the
//! variables for the commands it runs; nothing else does, and the library refuses to start
//! unless `CASTACK_CUDA_EMU=1` is set too. It is a test double: its times are the host's,
//! never a claim of GPU speed.
//!
//! # What it does
//!
//! - **Kernels from the same source**: `crates/linalg/src/device/kernels.cu` is compiled
//!   for the host with a small CUDA prelude (`cxx/prelude.h`) and FP contraction off, as
//!   NVRTC compiles it with `--fmad=false`: elementwise results are the GPU's bits. A
//!   launch finds its host kernel by the PTX entry's name ([`exec`]): threads are fibers,
//!   barriers and warp shuffles keep CUDA's semantics, blocks run in a seeded, shuffled
//!   order (`CASTACK_CUDA_EMU_SEED`).
//! - **Checks a GPU would do, or fail on**: launch limits (grid y and z up to 65535, up to
//!   1024 threads per block, 48 KiB of shared memory); at module load, every `.entry` of the
//!   PTX has a host kernel with the same parameter count and sizes, and the PTX targets at
//!   most `sm_90` with ISA at most 9.0 (what driver 580 JIT-compiles for an H200); every
//!   pointer argument lies in a live device allocation; every load and store of a kernel
//!   lies in one, or is reported with the kernel, block, thread and address ([`memory`]:
//!   addresses are never reused, new and freed memory is poisoned).
//! - **Asynchrony as on a GPU** ([`driver`]): queued work runs when the host synchronises.
//! - **Counts**: kernel launches, host-blocking calls (stream, event and context
//!   synchronisations, synchronous copies and frees) and host-device bytes, read with
//!   `castack_emu_stats` ([`EmuStats`]).
//! - Device attributes are an H200's ([`attrs`]); `CASTACK_CUDA_EMU_DEVICES=N` (default 1)
//!   emulates N of them.
//!
//! # Environment
//!
//! `CASTACK_CUDA_EMU=1` (required), `CASTACK_CUDA_EMU_DEVICES` (GPUs, default 1),
//! `CASTACK_CUDA_EMU_SEED` (block and warp orders, default 0x5eed),
//! `CASTACK_CUDA_EMU_THREADS` (workers for the blocks of launches of at least 2^15 GPU
//! threads, default the host's parallelism: 2 workers ran `launch_cost` in 0.26 s against
//! 0.47 s with 1, on 2 cores), `CASTACK_CUDA_EMU_ARENA_GIB` (device address space reserved,
//! default 256 GiB, smaller where refused), `CASTACK_CUDA_EMU_PROFILE=1` (host seconds per
//! kernel, printed on stderr at exit).
//!
//! Every other entry point of the driver API that cudarc can load answers
//! `CUDA_ERROR_NOT_SUPPORTED` and names itself. Errors come back as CUDA error codes;
//! `cuGetErrorString` gives the emulator's own message for the calling thread's last error
//! (cudarc prints it with the code), and each is printed once on stderr.
//!
//! # What only a real GPU can show
//!
//! Speed; the PTX's own code generation (the host build compiles the `.cu`, not the PTX);
//! concurrency within a block's warps and between blocks as a GPU interleaves them (here a
//! warp's lanes run one after another between synchronisation points, and blocks run
//! whole, on a few host threads: a race that the seeded orders do not expose stays
//! hidden); the real driver's behaviour (JIT, memory limits, errors).

pub mod attrs;
pub mod driver;
pub mod exec;
pub mod memory;
pub mod ptx;

pub mod api;

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cudarc::driver::sys::CUresult;

use crate::driver::{lock, COUNTERS};
use crate::memory::Memory;

pub use crate::exec::Dim3;

/// An error of an entry point: its code and the emulator's message (empty for outcomes
/// that are not errors, such as `CUDA_ERROR_NOT_READY`).
#[derive(Debug, Clone)]
pub struct Fail {
    /// The CUDA error code.
    pub code: CUresult,
    /// What went wrong, in the emulator's words.
    pub message: String,
}

/// An error value.
pub(crate) fn fail(code: CUresult, message: impl Into<String>) -> Fail {
    Fail {
        code,
        message: message.into(),
    }
}

static MEMORY: OnceLock<Result<RwLock<Memory>, String>> = OnceLock::new();

fn memory_lock() -> &'static RwLock<Memory> {
    match MEMORY.get_or_init(|| Memory::reserve().map(RwLock::new)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("castack-cuda-emu: {e}");
            std::process::abort()
        }
    }
}

/// The device memory, for reading.
pub(crate) fn memory() -> RwLockReadGuard<'static, Memory> {
    memory_lock()
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The device memory, for allocating and freeing.
pub(crate) fn memory_mut() -> RwLockWriteGuard<'static, Memory> {
    memory_lock()
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The process's counters, as `castack_emu_stats` reports them (all since the library
/// was loaded; take differences around what you measure).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmuStats {
    /// Kernel launches queued.
    pub launches: u64,
    /// Calls that block the host until the device is done with work: stream, event and
    /// context synchronisations, synchronous copies and `cuMemFree`.
    pub blocking_calls: u64,
    /// Bytes copied host to device, and the copies.
    pub htod_bytes: u64,
    /// Copies host to device.
    pub htod_copies: u64,
    /// Bytes copied device to host.
    pub dtoh_bytes: u64,
    /// Copies device to host.
    pub dtoh_copies: u64,
    /// Bytes copied device to device.
    pub dtod_bytes: u64,
    /// Device allocations made.
    pub allocations: u64,
    /// Device allocations freed.
    pub frees: u64,
    /// GPU threads run (grid size times block size, summed over executed launches).
    pub threads_run: u64,
}

/// The layout version of [`EmuStats`] that `castack_emu_stats` returns.
pub const STATS_VERSION: u32 = 1;

/// The counters of this process ([`EmuStats`]); returns [`STATS_VERSION`]. The symbol by
/// which a test finds out that the driver it loaded is the emulator.
///
/// # Safety
/// `out` is null or valid for writing an [`EmuStats`].
#[no_mangle]
pub unsafe extern "C" fn castack_emu_stats(out: *mut EmuStats) -> u32 {
    use std::sync::atomic::Ordering::Relaxed;
    let c = &COUNTERS;
    let s = EmuStats {
        launches: c.launches.load(Relaxed),
        blocking_calls: c.blocking_calls.load(Relaxed),
        htod_bytes: c.htod_bytes.load(Relaxed),
        htod_copies: c.htod_copies.load(Relaxed),
        dtoh_bytes: c.dtoh_bytes.load(Relaxed),
        dtoh_copies: c.dtoh_copies.load(Relaxed),
        dtod_bytes: c.dtod_bytes.load(Relaxed),
        allocations: c.allocations.load(Relaxed),
        frees: c.frees.load(Relaxed),
        threads_run: c.threads_run.load(Relaxed),
    };
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(s) };
    }
    STATS_VERSION
}

thread_local! {
    /// The calling thread's last error and its message (for `cuGetErrorString`).
    static LAST: RefCell<Option<(u32, &'static CStr)>> = const { RefCell::new(None) };
}

/// Most distinct messages kept for `cuGetErrorString` (each lives until the process ends).
const MESSAGES_KEPT: usize = 4096;

/// `message` as a C string that lives as long as the process.
fn intern(message: &str) -> &'static CStr {
    static KEPT: OnceLock<Mutex<HashMap<String, &'static CStr>>> = OnceLock::new();
    let mut kept = lock(KEPT.get_or_init(Default::default));
    if let Some(c) = kept.get(message) {
        return c;
    }
    if kept.len() >= MESSAGES_KEPT {
        return c"castack-cuda-emu: see the message printed on stderr";
    }
    let text = format!("castack-cuda-emu: {message}").replace('\0', " ");
    let c: &'static CStr = Box::leak(CString::new(text).unwrap_or_default().into_boxed_c_str());
    kept.insert(message.to_owned(), c);
    c
}

/// Report `f` (remember it for `cuGetErrorString`, print it once) and return its code.
pub(crate) fn report(f: &Fail) -> CUresult {
    if !f.message.is_empty() {
        let c = intern(&f.message);
        LAST.with(|l| *l.borrow_mut() = Some((f.code as u32, c)));
        thread_local! {
            static PRINTED: RefCell<Option<String>> = const { RefCell::new(None) };
        }
        PRINTED.with(|p| {
            let mut p = p.borrow_mut();
            if p.as_deref() != Some(&f.message) {
                eprintln!("castack-cuda-emu: {}", f.message);
                *p = Some(f.message.clone());
            }
        });
    }
    f.code
}

/// The message of the calling thread's last error if it had code `code`.
pub(crate) fn last_message(code: u32) -> Option<*const c_char> {
    LAST.with(|l| match *l.borrow() {
        Some((c, m)) if c == code => Some(m.as_ptr()),
        _ => None,
    })
}
