//! The emulated driver through its C entry points, as cudarc calls them: what a GPU would
//! do (asynchrony, limits, PTX loading) and what it would fail on (bad arguments, accesses
//! outside allocations, use after free), each with the message that names the cause.
//!
//! Tests share the process's driver; each uses a device of its own (a fault is sticky for
//! its context, as on a GPU).

use std::ffi::{c_char, c_void, CStr, CString};

use castack_cuda_emu::api::*;
use castack_cuda_emu::{castack_emu_stats, EmuStats};
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};
use CUresult::*;

const PTX: &str = include_str!("../../linalg/src/device/kernels.ptx");

/// The calling thread's message for its last error with code `code`.
fn message(code: CUresult) -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: a valid out-pointer; the driver hands back a static string.
    let r = unsafe { cuGetErrorString(code as u32, &mut p) };
    assert_eq!(r, CUDA_SUCCESS);
    // SAFETY: a NUL-terminated string that lives as long as the process.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `call` succeeded.
#[track_caller]
fn ok(r: CUresult) {
    assert_eq!(r, CUDA_SUCCESS, "{}", message(r));
}

/// A context on device `dev`, current on this thread, with a stream and the kernels.
struct Gpu {
    stream: CUstream,
    module: CUmodule,
}

impl Gpu {
    fn new(dev: i32) -> Gpu {
        // SAFETY (every driver call in these tests): out-pointers are valid locals, host
        // buffers outlive the synchronisation that completes their copies, device
        // addresses come from the driver unless a test says otherwise on purpose.
        unsafe {
            std::env::set_var("CASTACK_CUDA_EMU", "1");
            std::env::set_var("CASTACK_CUDA_EMU_DEVICES", "16");
            ok(cuInit(0));
            let mut ctx: CUcontext = std::ptr::null_mut();
            ok(cuDevicePrimaryCtxRetain(&mut ctx, dev));
            ok(cuCtxSetCurrent(ctx));
            let mut stream: CUstream = std::ptr::null_mut();
            ok(cuStreamCreate(&mut stream, 1));
            let ptx = CString::new(PTX).expect("ptx");
            let mut module: CUmodule = std::ptr::null_mut();
            ok(cuModuleLoadData(&mut module, ptx.as_ptr() as *const c_void));
            Gpu { stream, module }
        }
    }

    fn func(&self, name: &str) -> CUfunction {
        let mut f: CUfunction = std::ptr::null_mut();
        let c = CString::new(name).expect("name");
        // SAFETY: see `new`.
        ok(unsafe { cuModuleGetFunction(&mut f, self.module, c.as_ptr()) });
        f
    }

    fn upload(&self, v: &[f64]) -> CUdeviceptr {
        let mut p: CUdeviceptr = 0;
        // SAFETY: see `new`.
        unsafe {
            ok(cuMemAllocAsync(&mut p, 8 * v.len(), self.stream));
            ok(cuMemcpyHtoDAsync_v2(
                p,
                v.as_ptr() as *const c_void,
                8 * v.len(),
                self.stream,
            ));
        }
        p
    }

    fn download(&self, p: CUdeviceptr, n: usize) -> Vec<f64> {
        let mut v = vec![0.0; n];
        // SAFETY: see `new`.
        unsafe {
            ok(cuMemcpyDtoHAsync_v2(
                v.as_mut_ptr() as *mut c_void,
                p,
                8 * n,
                self.stream,
            ));
            ok(cuStreamSynchronize(self.stream));
        }
        v
    }

    /// `axpy(n, alpha, x, y)` on `blocks` blocks of 256 threads.
    fn axpy(&self, n: i64, alpha: f64, x: CUdeviceptr, y: CUdeviceptr, blocks: u32) -> CUresult {
        let f = self.func("axpy");
        let (mut n, mut alpha, mut x, mut y) = (n, alpha, x, y);
        let mut args = [
            &mut n as *mut i64 as *mut c_void,
            &mut alpha as *mut f64 as *mut c_void,
            &mut x as *mut u64 as *mut c_void,
            &mut y as *mut u64 as *mut c_void,
        ];
        // SAFETY: see `new`.
        unsafe {
            cuLaunchKernel(
                f,
                blocks,
                1,
                1,
                256,
                1,
                1,
                0,
                self.stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    }

    fn sync(&self) -> CUresult {
        // SAFETY: see `new`.
        unsafe { cuStreamSynchronize(self.stream) }
    }
}

fn stats() -> EmuStats {
    let mut s = EmuStats::default();
    // SAFETY: a valid out-pointer.
    assert_eq!(
        unsafe { castack_emu_stats(&mut s) },
        castack_cuda_emu::STATS_VERSION
    );
    s
}

#[test]
fn kernels_compute_their_formulas_bit_for_bit() {
    let g = Gpu::new(0);
    let n = 1000;
    let x: Vec<f64> = (0..n).map(|i| 0.1 * i as f64 + 0.3).collect();
    let y: Vec<f64> = (0..n).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let (dx, dy) = (g.upload(&x), g.upload(&y));
    ok(g.axpy(n as i64, 0.7, dx, dy, 2));
    let got = g.download(dy, n);
    for i in 0..n {
        // With FP contraction off: the CPU's rounding of y + alpha x.
        assert_eq!(got[i].to_bits(), (y[i] + 0.7 * x[i]).to_bits(), "{i}");
    }
}

#[test]
fn queued_work_runs_only_when_the_host_synchronises() {
    let g = Gpu::new(1);
    let n = 256;
    let (dx, dy) = (g.upload(&vec![1.0; n]), g.upload(&vec![0.0; n]));
    ok(g.axpy(n as i64, 2.0, dx, dy, 1));
    let mut host = vec![-1.0f64; n];
    let before = stats();
    // SAFETY: see `Gpu::new`; `host` outlives the synchronisation below.
    unsafe {
        ok(cuMemcpyDtoHAsync_v2(
            host.as_mut_ptr() as *mut c_void,
            dy,
            8 * n,
            g.stream,
        ));
    }
    // Nothing ran yet: the copy lands at the synchronisation, after the kernel; until then
    // the buffer holds poison, never stale values.
    assert!(host.iter().all(|v| v.is_nan()));
    // SAFETY: see `Gpu::new`.
    unsafe {
        let mut ev = std::ptr::null_mut();
        ok(cuEventCreate(&mut ev, 0));
        ok(cuEventRecord(ev, g.stream));
        assert_eq!(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
        ok(cuEventSynchronize(ev));
        ok(cuEventQuery(ev));
    }
    assert!(host.iter().all(|&v| v == 2.0));
    let after = stats();
    assert!(after.blocking_calls > before.blocking_calls);
    assert!(after.dtoh_bytes >= before.dtoh_bytes + 8 * n as u64);
}

#[test]
fn an_access_past_an_allocation_is_a_fault_that_names_kernel_and_thread() {
    let g = Gpu::new(2);
    let (dx, dy) = (g.upload(&[1.0; 100]), g.upload(&[1.0; 100]));
    // n one past the allocations: a grid-stride bound off by one.
    ok(g.axpy(101, 1.0, dx, dy, 1));
    let r = g.sync();
    assert_eq!(r, CUDA_ERROR_ILLEGAL_ADDRESS);
    let m = message(r);
    assert!(m.contains("kernel `axpy`"), "{m}");
    assert!(m.contains("thread (100, 0, 0)"), "{m}");
    assert!(m.contains("0 bytes past the end of allocation"), "{m}");
    // Sticky, as on a GPU: the context is unusable.
    assert_eq!(g.axpy(1, 1.0, dx, dy, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
}

#[test]
fn a_host_pointer_as_a_kernel_argument_is_refused_at_launch() {
    let g = Gpu::new(3);
    let dy = g.upload(&[1.0; 8]);
    let host = [1.0f64; 8];
    let r = g.axpy(8, 1.0, host.as_ptr() as CUdeviceptr, dy, 1);
    assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
    let m = message(r);
    assert!(m.contains("kernel `axpy`: argument 2"), "{m}");
    assert!(m.contains("host address"), "{m}");
}

#[test]
fn launch_limits_are_an_h200s() {
    let g = Gpu::new(4);
    let f = g.func("fill");
    let (mut n, mut v, mut p) = (0i64, 0.0f64, g.upload(&[0.0]));
    let mut args = [
        &mut n as *mut i64 as *mut c_void,
        &mut v as *mut f64 as *mut c_void,
        &mut p as *mut u64 as *mut c_void,
    ];
    let launch = |gy: u32, bx: u32, args: &mut [*mut c_void]| {
        // SAFETY: see `Gpu::new`.
        unsafe {
            cuLaunchKernel(
                f,
                1,
                gy,
                1,
                bx,
                1,
                1,
                0,
                g.stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    };
    ok(launch(65_535, 1, &mut args));
    let r = launch(65_536, 1, &mut args);
    assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
    assert!(
        message(r).contains("y must be at most 65535"),
        "{}",
        message(r)
    );
    let r = launch(1, 1025, &mut args);
    assert_ne!(r, CUDA_SUCCESS);
    ok(g.sync());
}

#[test]
fn freed_memory_is_unusable_and_a_double_free_is_an_error() {
    let g = Gpu::new(5);
    let dx = g.upload(&[1.0; 16]);
    let dy = g.upload(&[1.0; 16]);
    // SAFETY: see `Gpu::new`.
    unsafe { ok(cuMemFreeAsync(dx, g.stream)) };
    ok(g.sync());
    // A launch with the freed address is refused; a copy from it too.
    let r = g.axpy(16, 1.0, dx, dy, 1);
    assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
    assert!(message(r).contains("use after free"), "{}", message(r));
    // SAFETY: see `Gpu::new`.
    let r = unsafe { cuMemFreeAsync(dx, g.stream) };
    assert_eq!(r, CUDA_ERROR_INVALID_VALUE);
}

#[test]
fn a_ptx_that_does_not_match_the_host_kernels_does_not_load() {
    let _g = Gpu::new(6);
    let load = |text: &str| {
        let c = CString::new(text).expect("ptx");
        let mut m: CUmodule = std::ptr::null_mut();
        // SAFETY: see `Gpu::new`.
        unsafe { cuModuleLoadData(&mut m, c.as_ptr() as *const c_void) }
    };
    // axpy with its count narrowed to 32 bits (a size mismatch with kernels.cu).
    let narrowed = PTX.replacen(".param .u64 axpy_param_0", ".param .u32 axpy_param_0", 1);
    let r = load(&narrowed);
    assert_eq!(r, CUDA_ERROR_INVALID_PTX);
    assert!(
        message(r).contains("`axpy` takes parameters of [4, 8, 8, 8] bytes"),
        "{}",
        message(r)
    );
    let unknown = PTX.replacen(".entry axpy(", ".entry axpy_v2(", 1);
    assert_eq!(load(&unknown), CUDA_ERROR_NOT_FOUND);
    assert!(message(CUDA_ERROR_NOT_FOUND).contains("`axpy_v2` has no host kernel"));
    let newer = PTX.replacen(".version 9.0", ".version 9.1", 1);
    assert_eq!(load(&newer), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    let sm100 = PTX.replacen(".target sm_90", ".target sm_100", 1);
    assert_eq!(load(&sm100), CUDA_ERROR_NO_BINARY_FOR_GPU);
}

#[test]
fn an_entry_point_not_emulated_names_itself() {
    let _g = Gpu::new(7);
    // SAFETY: the stub reads no argument.
    let r = unsafe { cuGraphCreate() };
    assert_eq!(r, CUDA_ERROR_NOT_SUPPORTED);
    assert!(
        message(r).contains("cuGraphCreate is not emulated"),
        "{}",
        message(r)
    );
}

impl Gpu {
    /// `wnorm(n, r, w) -> partial` on the fixed grid of 1024 x `threads`, then
    /// `finish_sums` into `out[0]`.
    fn wnorm(&self, n: i64, r: CUdeviceptr, w: CUdeviceptr, threads: u32) -> (CUresult, f64) {
        let (wn, fin) = (self.func("wnorm"), self.func("finish_sums"));
        let partial = self.upload(&[0.0; 1024]);
        let out = self.upload(&[0.0]);
        let (mut n, mut r, mut w, mut p, mut o) = (n, r, w, partial, out);
        let mut nb = 1024i32;
        let mut a1 = [
            &mut n as *mut i64 as *mut c_void,
            &mut r as *mut u64 as *mut c_void,
            &mut w as *mut u64 as *mut c_void,
            &mut p as *mut u64 as *mut c_void,
        ];
        let mut a2 = [
            &mut nb as *mut i32 as *mut c_void,
            &mut p as *mut u64 as *mut c_void,
            &mut o as *mut u64 as *mut c_void,
        ];
        // SAFETY: see `Gpu::new`.
        unsafe {
            let null = std::ptr::null_mut();
            ok(cuLaunchKernel(
                wn,
                1024,
                1,
                1,
                threads,
                1,
                1,
                0,
                self.stream,
                a1.as_mut_ptr(),
                null,
            ));
            ok(cuLaunchKernel(
                fin,
                1,
                1,
                1,
                256,
                1,
                1,
                0,
                self.stream,
                a2.as_mut_ptr(),
                null,
            ));
            let r = self.sync();
            if r != CUDA_SUCCESS {
                return (r, f64::NAN);
            }
        }
        (CUDA_SUCCESS, self.download(out, 1)[0])
    }
}

#[test]
fn a_block_reduction_with_barriers_and_shuffles_sums_like_the_host() {
    let g = Gpu::new(8);
    let n = 5000;
    let r: Vec<f64> = (0..n)
        .map(|i| ((i * 37) % 101) as f64 / 7.0 - 3.0)
        .collect();
    let w: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
    let (dr, dw) = (g.upload(&r), g.upload(&w));
    let exact: f64 = r.iter().zip(&w).map(|(a, b)| a * b * a).sum();
    let abs: f64 = r.iter().zip(&w).map(|(a, b)| (a * b * a).abs()).sum();
    let (code, first) = g.wnorm(n as i64, dr, dw, 256);
    assert_eq!(code, CUDA_SUCCESS);
    assert!(
        (first - exact).abs() <= 64.0 * n as f64 * f64::EPSILON * abs,
        "{first} vs {exact}"
    );
    // Fixed grid, fixed trees: the same bits again, whatever the block order.
    assert_eq!(g.wnorm(n as i64, dr, dw, 256).1.to_bits(), first.to_bits());
}

#[test]
fn a_full_mask_shuffle_in_a_partial_warp_is_a_launch_failure() {
    let g = Gpu::new(9);
    let (dr, dw) = (g.upload(&[1.0; 64]), g.upload(&[1.0; 64]));
    // Blocks of 48 threads: the second warp has 16 lanes, the kernel's shuffles name 32.
    let (code, _) = g.wnorm(64, dr, dw, 48);
    assert_eq!(code, CUDA_ERROR_LAUNCH_FAILED);
    let m = message(code);
    assert!(
        m.contains("kernel `wnorm`") && m.contains("not in the block"),
        "{m}"
    );
    // The thread that ran the failed kernel runs another one, on another context.
    let g2 = Gpu::new(10);
    let (dr, dw) = (g2.upload(&[2.0; 64]), g2.upload(&[1.0; 64]));
    assert_eq!(g2.wnorm(64, dr, dw, 256), (CUDA_SUCCESS, 256.0));
}

#[test]
fn a_wait_across_streams_synchronised_from_two_threads_sees_the_producer() {
    let g = Gpu::new(11);
    let n = 512;
    let (dx, dy) = (g.upload(&vec![1.0; n]), g.upload(&vec![0.0; n]));
    let mut other: CUstream = std::ptr::null_mut();
    let mut ev = std::ptr::null_mut();
    // SAFETY: see `Gpu::new`.
    unsafe {
        ok(cuStreamCreate(&mut other, 1));
        ok(cuEventCreate(&mut ev, 2)); // CU_EVENT_DISABLE_TIMING
    }
    ok(g.sync());
    // The producer: y += 3 x on `g.stream`, then the event. The consumer waits for it on
    // `other`, then the producer's event is recorded again (the wait keeps its record).
    ok(g.axpy(n as i64, 3.0, dx, dy, 2));
    let mut host = vec![0.0f64; n];
    // SAFETY: see `Gpu::new`; `host` outlives the synchronisations below.
    unsafe {
        ok(cuEventRecord(ev, g.stream));
        ok(cuStreamWaitEvent(other, ev, 0));
        ok(cuMemcpyDtoHAsync_v2(
            host.as_mut_ptr() as *mut c_void,
            dy,
            8 * n,
            other,
        ));
        ok(cuEventRecord(ev, g.stream));
    }
    let (a, b) = (g.stream as usize, other as usize);
    let ctx = {
        let mut c: CUcontext = std::ptr::null_mut();
        // SAFETY: see `Gpu::new`.
        ok(unsafe { cuCtxGetCurrent(&mut c) });
        c as usize
    };
    let sync_from_thread = |s: usize| {
        std::thread::spawn(move || {
            // SAFETY: see `Gpu::new`; the context and stream are live.
            unsafe {
                ok(cuCtxSetCurrent(ctx as CUcontext));
                cuStreamSynchronize(s as CUstream)
            }
        })
    };
    let (ta, tb) = (sync_from_thread(b), sync_from_thread(a));
    assert_eq!(ta.join().expect("thread"), CUDA_SUCCESS);
    assert_eq!(tb.join().expect("thread"), CUDA_SUCCESS);
    assert!(host.iter().all(|&v| v == 3.0), "{:?}", &host[..4]);
    // Timing was disabled at creation: no elapsed time, as on the driver.
    let mut ms = 0.0f32;
    // SAFETY: see `Gpu::new`.
    let r = unsafe { cuEventElapsedTime(&mut ms, ev, ev) };
    assert_eq!(r, CUDA_ERROR_INVALID_HANDLE);
}
