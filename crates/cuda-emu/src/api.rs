//! The driver API entry points, as the CUDA Driver API reference defines them (each
//! function's contract is NVIDIA's; the notes here say what the emulation adds or leaves
//! out). Every entry point catches panics (an internal error becomes
//! `CUDA_ERROR_UNKNOWN` with a message) and, but for `cuInit`, `cuDriverGetVersion` and
//! the error-string functions, answers `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
//!
//! # Safety
//!
//! Every entry point is `unsafe` with the driver's own contract: each pointer argument is
//! valid for what the reference says the function reads or writes through it.
#![allow(non_snake_case, missing_docs, clippy::missing_safety_doc)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_void, CStr};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream, CUuuid,
};

use crate::driver::{
    count, lock, Context, Event, Function, Handles, Kind, Module, Op, Stream, COUNTERS,
};
use crate::exec::{self, Launch, MAX_BLOCK, MAX_GRID, MAX_SHARED, MAX_THREADS};
use crate::{attrs, fail, last_message, memory, memory_mut, ptx, report, Fail};

use CUresult::*;

type Res = Result<(), Fail>;

static HANDLES: OnceLock<Mutex<Handles>> = OnceLock::new();

fn handles() -> std::sync::MutexGuard<'static, Handles> {
    lock(HANDLES.get_or_init(Default::default))
}

/// Devices emulated, once `cuInit` succeeded.
static INIT: OnceLock<Result<i32, Fail>> = OnceLock::new();

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// Run an entry point's body: its error is reported, a panic becomes an error.
fn run(name: &str, body: impl FnOnce() -> Res) -> CUresult {
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(f)) => report(&f),
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            report(&fail(
                CUDA_ERROR_UNKNOWN,
                format!("{name}: internal error of the emulator: {what}"),
            ))
        }
    }
}

/// The device count, or why the driver is not initialised.
fn initialized() -> Result<i32, Fail> {
    match INIT.get() {
        Some(r) => r.clone(),
        None => Err(fail(
            CUDA_ERROR_NOT_INITIALIZED,
            "the driver is not initialised (cuInit was not called)",
        )),
    }
}

fn check_device(dev: CUdevice) -> Result<(), Fail> {
    let n = initialized()?;
    if (0..n).contains(&dev) {
        Ok(())
    } else {
        Err(fail(
            CUDA_ERROR_INVALID_DEVICE,
            format!("device {dev}: the emulator has {n} (CASTACK_CUDA_EMU_DEVICES)"),
        ))
    }
}

/// Write `v` through an out-pointer.
fn put<T>(p: *mut T, v: T, what: &str) -> Res {
    if p.is_null() {
        return Err(fail(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what}: null output pointer"),
        ));
    }
    // SAFETY: non-null; the caller passes a valid out-pointer (the API's contract).
    unsafe { p.write(v) };
    Ok(())
}

fn current() -> Result<Arc<Context>, Fail> {
    initialized()?;
    let h = CURRENT.with(Cell::get);
    let ctx = handles().contexts.get(&h).cloned();
    let ctx = ctx.ok_or_else(|| {
        fail(
            CUDA_ERROR_INVALID_CONTEXT,
            "no current context on this thread (cuCtxSetCurrent)",
        )
    })?;
    ctx.check()?;
    Ok(ctx)
}

fn stream_of(s: CUstream) -> Result<Arc<Stream>, Fail> {
    let h = s as usize;
    // The null stream, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2): the context's
    // null stream (legacy synchronisation with blocking streams is not modelled: castack's
    // streams are non-blocking).
    if h <= 2 {
        return Ok(current()?.null_stream.clone());
    }
    initialized()?;
    let s = handles().streams.get(&h).cloned();
    let s = s.ok_or_else(|| {
        fail(
            CUDA_ERROR_INVALID_HANDLE,
            format!("{h:#x} is not a live stream"),
        )
    })?;
    s.context()?.check()?;
    Ok(s)
}

fn event_of(e: CUevent) -> Result<Arc<Event>, Fail> {
    initialized()?;
    let h = e as usize;
    let ev = handles().events.get(&h).cloned();
    ev.ok_or_else(|| {
        fail(
            CUDA_ERROR_INVALID_HANDLE,
            format!("{h:#x} is not a live event"),
        )
    })
}

fn sync_count() {
    count(&COUNTERS.blocking_calls, 1);
}

// ---------------------------------------------------------------------------------------
// Initialisation, version, errors.

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    run("cuInit", || {
        if flags != 0 {
            return Err(fail(CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0"));
        }
        INIT.get_or_init(|| {
            if std::env::var("CASTACK_CUDA_EMU").as_deref() != Ok("1") {
                return Err(fail(
                    CUDA_ERROR_NOT_INITIALIZED,
                    "castack's emulated CUDA driver was loaded (a folder on LD_LIBRARY_PATH \
                     holds it as libcuda.so) but CASTACK_CUDA_EMU=1 is not set: set it to run \
                     on the emulator, or take that folder off LD_LIBRARY_PATH to use the real \
                     driver",
                ));
            }
            let devices = match std::env::var("CASTACK_CUDA_EMU_DEVICES") {
                Ok(v) => v
                    .trim()
                    .parse::<i32>()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| {
                        fail(
                            CUDA_ERROR_INVALID_VALUE,
                            format!("CASTACK_CUDA_EMU_DEVICES: `{v}` is not a count in 1..=16"),
                        )
                    })?,
                Err(_) => 1,
            };
            handles().primary = vec![None; devices as usize];
            Ok(devices)
        })
        .clone()
        .map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    run("cuDriverGetVersion", || {
        put(version, attrs::DRIVER_VERSION, "cuDriverGetVersion")
    })
}

/// The names of the codes the emulator returns (others: `CUDA_ERROR_INVALID_VALUE`, as
/// the driver answers an unknown code).
fn code_name(code: u32) -> Option<(&'static CStr, &'static CStr)> {
    Some(match code {
        0 => (c"CUDA_SUCCESS", c"no error"),
        1 => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        2 => (c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
        3 => (c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        100 => (
            c"CUDA_ERROR_NO_DEVICE",
            c"no CUDA-capable device is detected",
        ),
        101 => (c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        200 => (
            c"CUDA_ERROR_INVALID_IMAGE",
            c"device kernel image is invalid",
        ),
        201 => (c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
        209 => (
            c"CUDA_ERROR_NO_BINARY_FOR_GPU",
            c"no kernel image is available for execution on the device",
        ),
        218 => (c"CUDA_ERROR_INVALID_PTX", c"a PTX JIT compilation failed"),
        222 => (
            c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            c"the provided PTX was compiled with an unsupported toolchain.",
        ),
        400 => (c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
        500 => (c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
        600 => (c"CUDA_ERROR_NOT_READY", c"device not ready"),
        700 => (
            c"CUDA_ERROR_ILLEGAL_ADDRESS",
            c"an illegal memory access was encountered",
        ),
        701 => (
            c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            c"too many resources requested for launch",
        ),
        709 => (c"CUDA_ERROR_CONTEXT_IS_DESTROYED", c"context is destroyed"),
        719 => (c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure"),
        801 => (c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
        999 => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: c_uint, out: *mut *const c_char) -> CUresult {
    run("cuGetErrorName", || match code_name(error) {
        Some((name, _)) => put(out, name.as_ptr(), "cuGetErrorName"),
        None => Err(fail(CUDA_ERROR_INVALID_VALUE, "")),
    })
}

/// The emulator's message for the calling thread's last error when it had this code,
/// else the driver's generic description.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: c_uint, out: *mut *const c_char) -> CUresult {
    run("cuGetErrorString", || {
        if let Some(m) = last_message(error) {
            return put(out, m, "cuGetErrorString");
        }
        match code_name(error) {
            Some((_, text)) => put(out, text.as_ptr(), "cuGetErrorString"),
            None => Err(fail(CUDA_ERROR_INVALID_VALUE, "")),
        }
    })
}

// ---------------------------------------------------------------------------------------
// Devices.

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    run("cuDeviceGetCount", || {
        put(count, initialized()?, "cuDeviceGetCount")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    run("cuDeviceGet", || {
        check_device(ordinal)?;
        put(device, ordinal, "cuDeviceGet")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    run("cuDeviceGetName", || {
        check_device(dev)?;
        if name.is_null() || len <= 0 {
            return Err(fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName: no buffer"));
        }
        let bytes = attrs::NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name as *mut u8, n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

fn uuid(dev: CUdevice) -> CUuuid {
    let mut bytes = *b"castack-emu-h200";
    bytes[15] = b'0' + dev as u8;
    CUuuid {
        bytes: bytes.map(|b| b as c_char),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(out: *mut CUuuid, dev: CUdevice) -> CUresult {
    run("cuDeviceGetUuid", || {
        check_device(dev)?;
        put(out, uuid(dev), "cuDeviceGetUuid")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(out: *mut CUuuid, dev: CUdevice) -> CUresult {
    // SAFETY: the same contract.
    unsafe { cuDeviceGetUuid(out, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    run("cuDeviceTotalMem_v2", || {
        check_device(dev)?;
        put(bytes, attrs::TOTAL_MEMORY, "cuDeviceTotalMem")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    run("cuDeviceGetAttribute", || {
        check_device(dev)?;
        let v = attrs::value(attrib).ok_or_else(|| {
            fail(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "cuDeviceGetAttribute: attribute {attrib} is not emulated (src/attrs.rs \
                     lists those that are, with their sources)"
                ),
            )
        })?;
        put(value, v, "cuDeviceGetAttribute")
    })
}

// ---------------------------------------------------------------------------------------
// Contexts (primary contexts only: one per device, retained and released).

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(out: *mut CUcontext, dev: CUdevice) -> CUresult {
    run("cuDevicePrimaryCtxRetain", || {
        check_device(dev)?;
        let mut h = handles();
        let slot = dev as usize;
        let ctx = match h.primary[slot] {
            Some((c, n)) => {
                h.primary[slot] = Some((c, n + 1));
                c
            }
            None => {
                let c = h.new_context(dev).handle;
                h.primary[slot] = Some((c, 1));
                c
            }
        };
        put(out, ctx as CUcontext, "cuDevicePrimaryCtxRetain")
    })
}

/// The last release destroys the primary context: its queued work runs, then its
/// streams, events and modules are gone (a later retain makes a fresh one, without the
/// old one's sticky error).
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    run("cuDevicePrimaryCtxRelease_v2", || {
        check_device(dev)?;
        let slot = dev as usize;
        let last = {
            let mut h = handles();
            match h.primary[slot] {
                Some((c, 1)) => {
                    h.primary[slot] = None;
                    h.contexts.get(&c).cloned()
                }
                Some((c, n)) => {
                    h.primary[slot] = Some((c, n - 1));
                    None
                }
                None => {
                    return Err(fail(
                        CUDA_ERROR_INVALID_CONTEXT,
                        format!("cuDevicePrimaryCtxRelease: device {dev} has no primary context"),
                    ))
                }
            }
        };
        if let Some(ctx) = last {
            // The device finishes the context's work; an error of it is the context's,
            // gone with it.
            ctx.drain_unobserved();
            handles().forget_context(ctx.handle);
            CURRENT.with(|c| {
                if c.get() == ctx.handle {
                    c.set(0);
                }
            });
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    run("cuCtxSetCurrent", || {
        initialized()?;
        let h = ctx as usize;
        if h != 0 && !handles().contexts.contains_key(&h) {
            return Err(fail(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("cuCtxSetCurrent: {h:#x} is not a live context"),
            ));
        }
        CURRENT.with(|c| c.set(h));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(out: *mut CUcontext) -> CUresult {
    run("cuCtxGetCurrent", || {
        initialized()?;
        let h = CURRENT.with(Cell::get);
        let h = if handles().contexts.contains_key(&h) {
            h
        } else {
            0
        };
        put(out, h as CUcontext, "cuCtxGetCurrent")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(out: *mut CUdevice) -> CUresult {
    run("cuCtxGetDevice", || {
        let ctx = current()?;
        put(out, ctx.device, "cuCtxGetDevice")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    run("cuCtxSynchronize", || {
        sync_count();
        current()?.drain_all()
    })
}

// ---------------------------------------------------------------------------------------
// Streams.

fn create_stream(out: *mut CUstream) -> Res {
    let ctx = current()?;
    let s = handles().new_stream(&ctx);
    put(out, s.handle as CUstream, "cuStreamCreate")
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut CUstream, _flags: c_uint) -> CUresult {
    run("cuStreamCreate", || create_stream(out))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    out: *mut CUstream,
    _flags: c_uint,
    _priority: c_int,
) -> CUresult {
    run("cuStreamCreateWithPriority", || create_stream(out))
}

/// The stream's queued work still runs (as the device would finish it), then the handle
/// is gone.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    run("cuStreamDestroy_v2", || {
        let s = stream_of(stream)?;
        if (stream as usize) <= 2 {
            return Err(fail(
                CUDA_ERROR_INVALID_HANDLE,
                "cuStreamDestroy: the null stream cannot be destroyed",
            ));
        }
        handles().streams.remove(&s.handle);
        s.drain_unobserved()
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    run("cuStreamSynchronize", || {
        sync_count();
        let s = stream_of(stream)?;
        s.drain()?;
        s.context()?.check()
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: CUstream) -> CUresult {
    run("cuStreamQuery", || {
        let s = stream_of(stream)?;
        if s.query()? {
            Ok(())
        } else {
            Err(fail(CUDA_ERROR_NOT_READY, ""))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    stream: CUstream,
    event: CUevent,
    _flags: c_uint,
) -> CUresult {
    run("cuStreamWaitEvent", || {
        let s = stream_of(stream)?;
        let e = event_of(event)?;
        // The record the event names now (a later record does not change what this waits
        // for).
        if let Some((stream, seq)) = e.last_record() {
            s.push(Op::Wait { stream, seq });
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Events.

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut CUevent, flags: c_uint) -> CUresult {
    run("cuEventCreate", || {
        let ctx = current()?;
        let e = handles().new_event(&ctx, flags);
        put(out, e.handle as CUevent, "cuEventCreate")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    run("cuEventDestroy_v2", || {
        let e = event_of(event)?;
        handles().events.remove(&e.handle);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    run("cuEventRecord", || {
        let e = event_of(event)?;
        let s = stream_of(stream)?;
        e.record(&s);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: CUevent) -> CUresult {
    run("cuEventQuery", || {
        if event_of(event)?.query()? {
            Ok(())
        } else {
            Err(fail(CUDA_ERROR_NOT_READY, ""))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: CUevent) -> CUresult {
    run("cuEventSynchronize", || {
        sync_count();
        let e = event_of(event)?;
        e.synchronize()?;
        match e.ctx.upgrade() {
            Some(c) => c.check(),
            None => Ok(()),
        }
    })
}

/// Milliseconds between two complete events: the host's time between the points where
/// the emulator ran them (no GPU time).
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    run("cuEventElapsedTime", || {
        let (a, b) = (event_of(start)?, event_of(end)?);
        if !a.timing || !b.timing {
            return Err(fail(
                CUDA_ERROR_INVALID_HANDLE,
                "cuEventElapsedTime: an event created with CU_EVENT_DISABLE_TIMING",
            ));
        }
        if !a.recorded() || !b.recorded() {
            return Err(fail(
                CUDA_ERROR_INVALID_HANDLE,
                "cuEventElapsedTime: an event that was never recorded",
            ));
        }
        match (a.time(), b.time()) {
            (Some(t0), Some(t1)) => {
                let d = if t1 >= t0 {
                    (t1 - t0).as_secs_f64()
                } else {
                    -(t0 - t1).as_secs_f64()
                };
                put(ms, (d * 1e3) as f32, "cuEventElapsedTime")
            }
            _ => Err(fail(
                CUDA_ERROR_NOT_READY,
                "cuEventElapsedTime: an event is not complete yet (its stream was not \
                 synchronised since it was recorded)",
            )),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    // SAFETY: the same contract.
    unsafe { cuEventElapsedTime(ms, start, end) }
}

// ---------------------------------------------------------------------------------------
// Memory.

fn alloc(out: *mut CUdeviceptr, bytes: usize, what: &str) -> Res {
    current()?;
    if bytes == 0 {
        return Err(fail(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what}: an allocation of 0 bytes"),
        ));
    }
    let p = memory_mut()
        .alloc(bytes)
        .map_err(|e| fail(CUDA_ERROR_OUT_OF_MEMORY, format!("{what}: {e}")))?;
    count(&COUNTERS.allocations, 1);
    put(out, p as CUdeviceptr, what)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(out: *mut CUdeviceptr, bytes: usize) -> CUresult {
    run("cuMemAlloc_v2", || alloc(out, bytes, "cuMemAlloc"))
}

/// The address is usable in stream order; it is allocated at once (never reused).
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    out: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    run("cuMemAllocAsync", || {
        stream_of(stream)?;
        alloc(out, bytes, "cuMemAllocAsync")
    })
}

fn check_free(ptr: CUdeviceptr, what: &str) -> Res {
    let m = memory();
    let p = ptr as usize;
    if m.is_live(p, 1) && m.live_range(p, 1).is_some_and(|(s, _)| s == p) {
        Ok(())
    } else {
        Err(fail(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "{what}: {:#x} is not the start of a live allocation: {}",
                p,
                m.describe(p, 1)
            ),
        ))
    }
}

/// Synchronous: the context's queued work runs first (a host-blocking call).
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(ptr: CUdeviceptr) -> CUresult {
    run("cuMemFree_v2", || {
        sync_count();
        current()?.drain_all()?;
        check_free(ptr, "cuMemFree")?;
        memory_mut()
            .free(ptr as usize)
            .map_err(|e| fail(CUDA_ERROR_INVALID_VALUE, format!("cuMemFree: {e}")))?;
        count(&COUNTERS.frees, 1);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(ptr: CUdeviceptr, stream: CUstream) -> CUresult {
    run("cuMemFreeAsync", || {
        let s = stream_of(stream)?;
        check_free(ptr, "cuMemFreeAsync")?;
        s.push(Op::Free { ptr: ptr as usize });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    run("cuMemGetInfo_v2", || {
        current()?;
        let used = memory().live_bytes();
        put(
            free,
            attrs::TOTAL_MEMORY.saturating_sub(used),
            "cuMemGetInfo",
        )?;
        put(total, attrs::TOTAL_MEMORY, "cuMemGetInfo")
    })
}

/// `Err` unless `[ptr, ptr + len)` is one live device allocation.
fn device_range(ptr: CUdeviceptr, len: usize, what: &str) -> Res {
    let m = memory();
    if len == 0 || m.is_live(ptr as usize, len) {
        Ok(())
    } else {
        Err(fail(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what}: {}", m.describe(ptr as usize, len)),
        ))
    }
}

/// `Err` when `[ptr, ptr + len)` is device memory (a host pointer was expected).
fn host_range(ptr: *const c_void, len: usize, what: &str) -> Res {
    if len > 0 && ptr.is_null() {
        return Err(fail(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what}: null host pointer"),
        ));
    }
    if memory().in_arena(ptr as usize) {
        return Err(fail(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "{what}: {:#x} is a device address, not host memory",
                ptr as usize
            ),
        ));
    }
    Ok(())
}

fn htod(dst: CUdeviceptr, src: *const c_void, len: usize, s: &Stream, what: &str) -> Res {
    device_range(dst, len, what)?;
    host_range(src, len, what)?;
    // Staged now: the host buffer may be reused at once (pageable memory, as the driver).
    // SAFETY: the caller's buffer holds `len` bytes.
    let data = unsafe { std::slice::from_raw_parts(src as *const u8, len) }.to_vec();
    count(&COUNTERS.htod_bytes, len as u64);
    count(&COUNTERS.htod_copies, 1);
    s.push(Op::HtoD {
        dst: dst as usize,
        data,
    });
    Ok(())
}

fn dtoh(dst: *mut c_void, src: CUdeviceptr, len: usize, s: &Stream, what: &str) -> Res {
    device_range(src, len, what)?;
    host_range(dst, len, what)?;
    // Until the copy lands the buffer holds no data: poisoned now (a NaN as f64), so a host
    // that reads it before synchronising reads NaNs, not stale values.
    // SAFETY: the caller's buffer holds `len` bytes (the API's contract).
    unsafe { std::ptr::write_bytes(dst as *mut u8, crate::memory::POISON, len) };
    count(&COUNTERS.dtoh_bytes, len as u64);
    count(&COUNTERS.dtoh_copies, 1);
    s.push(Op::DtoH {
        dst: dst as usize,
        src: src as usize,
        len,
    });
    Ok(())
}

fn dtod(dst: CUdeviceptr, src: CUdeviceptr, len: usize, s: &Stream, what: &str) -> Res {
    device_range(src, len, what)?;
    device_range(dst, len, what)?;
    count(&COUNTERS.dtod_bytes, len as u64);
    s.push(Op::DtoD {
        dst: dst as usize,
        src: src as usize,
        len,
    });
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    run("cuMemcpyHtoDAsync_v2", || {
        htod(dst, src, bytes, &*stream_of(stream)?, "cuMemcpyHtoDAsync")
    })
}

/// Lands in host memory when the host synchronises on the stream (see [`crate::driver`]).
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    run("cuMemcpyDtoHAsync_v2", || {
        dtoh(dst, src, bytes, &*stream_of(stream)?, "cuMemcpyDtoHAsync")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    run("cuMemcpyDtoDAsync_v2", || {
        dtod(dst, src, bytes, &*stream_of(stream)?, "cuMemcpyDtoDAsync")
    })
}

/// A synchronous copy on the null stream: queued, then the null stream runs (a
/// host-blocking call).
fn sync_copy(push: impl FnOnce(&Stream) -> Res) -> Res {
    sync_count();
    let s = current()?.null_stream.clone();
    push(&s)?;
    s.drain()
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CUresult {
    run("cuMemcpyHtoD_v2", || {
        sync_copy(|s| htod(dst, src, bytes, s, "cuMemcpyHtoD"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    run("cuMemcpyDtoH_v2", || {
        sync_copy(|s| dtoh(dst, src, bytes, s, "cuMemcpyDtoH"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    run("cuMemcpyDtoD_v2", || {
        sync_copy(|s| dtod(dst, src, bytes, s, "cuMemcpyDtoD"))
    })
}

fn memset(dst: CUdeviceptr, value: u32, elem: usize, n: usize, s: &Stream, what: &str) -> Res {
    let len = n
        .checked_mul(elem)
        .ok_or_else(|| fail(CUDA_ERROR_INVALID_VALUE, format!("{what}: size overflows")))?;
    device_range(dst, len, what)?;
    if elem == 4 && !dst.is_multiple_of(4) {
        return Err(fail(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what}: {dst:#x} is not 4-byte aligned"),
        ));
    }
    s.push(Op::Memset {
        dst: dst as usize,
        value,
        elem,
        count: n,
    });
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    uc: c_uchar,
    n: usize,
    stream: CUstream,
) -> CUresult {
    run("cuMemsetD8Async", || {
        memset(
            dst,
            u32::from(uc),
            1,
            n,
            &*stream_of(stream)?,
            "cuMemsetD8Async",
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    ui: c_uint,
    n: usize,
    stream: CUstream,
) -> CUresult {
    run("cuMemsetD32Async", || {
        memset(dst, ui, 4, n, &*stream_of(stream)?, "cuMemsetD32Async")
    })
}

// ---------------------------------------------------------------------------------------
// Modules and launches.

/// The highest PTX ISA version and target the emulated driver (580, CUDA 13.0) loads for
/// an H200: a newer NVRTC's PTX would fail there.
const MAX_PTX_ISA: (u32, u32) = (9, 0);
const MAX_SM: u32 = 90;

/// Check a PTX image's version and target, and match every entry with a host kernel.
fn load_ptx(text: &str) -> Result<std::collections::HashMap<String, usize>, Fail> {
    let bad = |code, why: String| fail(code, format!("cuModuleLoadData: {why}"));
    let directive = |name: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    let version = directive(".version").ok_or_else(|| {
        bad(
            CUDA_ERROR_INVALID_IMAGE,
            "not a PTX image (no .version)".into(),
        )
    })?;
    let (maj, min) = version
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| bad(CUDA_ERROR_INVALID_PTX, format!("bad .version `{version}`")))?;
    if (maj, min) > MAX_PTX_ISA {
        return Err(bad(
            CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
            format!(
                "PTX ISA {maj}.{min} is newer than {}.{} (driver 580, CUDA 13.0): compile with \
                 NVRTC 13.0",
                MAX_PTX_ISA.0, MAX_PTX_ISA.1
            ),
        ));
    }
    let target = directive(".target").unwrap_or_default();
    let sm = target
        .split(|c: char| c == ',' || c.is_whitespace())
        .find_map(|t| t.strip_prefix("sm_"))
        .and_then(|v| {
            v.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse::<u32>()
                .ok()
        })
        .ok_or_else(|| bad(CUDA_ERROR_INVALID_PTX, format!("bad .target `{target}`")))?;
    if sm > MAX_SM {
        return Err(bad(
            CUDA_ERROR_NO_BINARY_FOR_GPU,
            format!("PTX for sm_{sm} cannot run on an H200 (sm_{MAX_SM})"),
        ));
    }
    let entries = ptx::entries(text).map_err(|e| bad(CUDA_ERROR_INVALID_PTX, e))?;
    let kernels = exec::kernels();
    let mut map = std::collections::HashMap::new();
    for e in entries {
        let Some(i) = kernels.iter().position(|k| k.name == e.name) else {
            return Err(bad(
                CUDA_ERROR_NOT_FOUND,
                format!(
                    "PTX entry `{}` has no host kernel of that name (the emulator's kernels \
                     are built from crates/linalg/src/device/kernels.cu)",
                    e.name
                ),
            ));
        };
        let k = &kernels[i];
        if k.sizes != e.params {
            return Err(bad(
                CUDA_ERROR_INVALID_PTX,
                format!(
                    "PTX entry `{}` takes parameters of {:?} bytes, its host kernel {:?}: \
                     the PTX is not what kernels.cu compiles to (regenerate kernels.ptx)",
                    e.name, e.params, k.sizes
                ),
            ));
        }
        map.insert(e.name, i);
    }
    Ok(map)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(out: *mut CUmodule, image: *const c_void) -> CUresult {
    run("cuModuleLoadData", || {
        let ctx = current()?;
        if image.is_null() {
            return Err(fail(
                CUDA_ERROR_INVALID_VALUE,
                "cuModuleLoadData: null image",
            ));
        }
        // SAFETY: a PTX image is a NUL-terminated text (the API's contract for PTX).
        let text = unsafe { CStr::from_ptr(image as *const c_char) }.to_string_lossy();
        let entries = load_ptx(&text)?;
        let mut h = handles();
        let handle = h.new_handle(Kind::Module);
        h.modules.insert(
            handle,
            Arc::new(Module {
                ctx: Arc::downgrade(&ctx),
                entries,
                functions: Mutex::new(Default::default()),
            }),
        );
        put(out, handle as CUmodule, "cuModuleLoadData")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: CUmodule) -> CUresult {
    run("cuModuleUnload", || {
        initialized()?;
        let mut h = handles();
        if h.modules.remove(&(module as usize)).is_none() {
            return Err(fail(
                CUDA_ERROR_INVALID_HANDLE,
                format!(
                    "cuModuleUnload: {:#x} is not a loaded module",
                    module as usize
                ),
            ));
        }
        h.functions.retain(|_, f| f.module.strong_count() > 0);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    out: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    run("cuModuleGetFunction", || {
        initialized()?;
        if name.is_null() {
            return Err(fail(
                CUDA_ERROR_INVALID_VALUE,
                "cuModuleGetFunction: null name",
            ));
        }
        // SAFETY: a NUL-terminated name (the API's contract).
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let mut h = handles();
        let m = h.modules.get(&(module as usize)).cloned().ok_or_else(|| {
            fail(
                CUDA_ERROR_INVALID_HANDLE,
                format!(
                    "cuModuleGetFunction: {:#x} is not a loaded module",
                    module as usize
                ),
            )
        })?;
        let kernel = *m.entries.get(&name).ok_or_else(|| {
            fail(
                CUDA_ERROR_NOT_FOUND,
                format!("cuModuleGetFunction: the module has no entry `{name}`"),
            )
        })?;
        let known = lock(&m.functions).get(&name).copied();
        let f = match known {
            Some(f) => f,
            None => {
                let f = h.new_handle(Kind::Function);
                h.functions.insert(
                    f,
                    Arc::new(Function {
                        module: Arc::downgrade(&m),
                        kernel,
                    }),
                );
                lock(&m.functions).insert(name, f);
                f
            }
        };
        put(out, f as CUfunction, "cuModuleGetFunction")
    })
}

/// The seed of the block orders (`CASTACK_CUDA_EMU_SEED`, default 0x5eed).
fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        std::env::var("CASTACK_CUDA_EMU_SEED")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0x5eed)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    run("cuLaunchKernel", || {
        let s = stream_of(stream)?;
        let func = handles()
            .functions
            .get(&(f as usize))
            .cloned()
            .ok_or_else(|| {
                fail(
                    CUDA_ERROR_INVALID_HANDLE,
                    format!("cuLaunchKernel: {:#x} is not a loaded function", f as usize),
                )
            })?;
        let kernel = &exec::kernels()[func.kernel];
        let name = &kernel.name;
        let (grid, block) = ([grid_x, grid_y, grid_z], [block_x, block_y, block_z]);
        let bad = |why: String| fail(CUDA_ERROR_INVALID_VALUE, format!("kernel `{name}`: {why}"));
        let dims = |g: [u32; 3]| format!("({}, {}, {})", g[0], g[1], g[2]);
        if grid.contains(&0) || block.contains(&0) {
            return Err(bad(format!(
                "grid {} or block {} has a zero dimension",
                dims(grid),
                dims(block)
            )));
        }
        for (d, axis) in ["x", "y", "z"].iter().enumerate() {
            if grid[d] > MAX_GRID[d] {
                return Err(bad(format!(
                    "grid {}: {axis} must be at most {} on an H200",
                    dims(grid),
                    MAX_GRID[d]
                )));
            }
            if block[d] > MAX_BLOCK[d] {
                return Err(bad(format!(
                    "block {}: {axis} must be at most {}",
                    dims(block),
                    MAX_BLOCK[d]
                )));
            }
        }
        let threads = block.iter().map(|&b| u64::from(b)).product::<u64>();
        if threads > u64::from(MAX_THREADS) {
            return Err(fail(
                CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
                format!(
                    "kernel `{name}`: block {} has {threads} threads, more than {MAX_THREADS}",
                    dims(block)
                ),
            ));
        }
        if shared > MAX_SHARED {
            return Err(fail(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "kernel `{name}`: {shared} bytes of dynamic shared memory, more than \
                     {MAX_SHARED} per block without opting in"
                ),
            ));
        }
        if !extra.is_null() {
            return Err(fail(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("kernel `{name}`: parameters through `extra` are not emulated"),
            ));
        }
        let n = kernel.sizes.len();
        if n > 0 && params.is_null() {
            return Err(bad(format!(
                "{n} parameters expected, kernelParams is null"
            )));
        }
        // Copy the parameters now (the caller's storage may go away on return).
        let mut words = Vec::new();
        let mut offsets = Vec::with_capacity(n);
        for (i, &size) in kernel.sizes.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter, each to `size` bytes
            // (the API's contract; the sizes are the kernel's, checked against the PTX).
            let src = unsafe { *params.add(i) } as *const u8;
            if src.is_null() {
                return Err(bad(format!("kernelParams[{i}] is null")));
            }
            offsets.push(words.len());
            let at = words.len();
            words.resize(at + size.div_ceil(8).max(1), 0u64);
            // SAFETY: `src` holds `size` bytes; the words hold at least that many.
            unsafe {
                std::ptr::copy_nonoverlapping(src, words[at..].as_mut_ptr() as *mut u8, size)
            };
        }
        // Numbered per stream: a rank's launches get the same numbers (and block orders)
        // whatever the other ranks do at the same time.
        let number = s.launches.fetch_add(1, Ordering::Relaxed) + 1;
        let launch = Launch {
            kernel,
            grid,
            block,
            words,
            offsets,
            seed: seed() ^ number.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            number,
        };
        // Pointer arguments: device addresses of live allocations.
        {
            let m = memory();
            for i in (0..n).filter(|&i| kernel.pointer[i]) {
                let p = launch.pointer_arg(i);
                if p != 0 && m.live_range(p, 1).is_none() {
                    return Err(bad(format!(
                        "argument {i} (a pointer) {} (launch #{number} of its stream)",
                        m.describe_pointer(p)
                    )));
                }
            }
        }
        count(&COUNTERS.launches, 1);
        s.push(Op::Launch(Box::new(launch)));
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Every other entry point cudarc can load: an error that names it.

macro_rules! unemulated {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name() -> CUresult {
            report(&fail(
                CUDA_ERROR_NOT_SUPPORTED,
                concat!(
                    stringify!($name),
                    " is not emulated (castack-cuda-emu implements the entry points castack's \
                     use of cudarc reaches)"
                ),
            ))
        }
    };
}

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
