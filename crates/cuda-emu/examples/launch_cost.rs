//! What a launch costs on the emulator (host time, no GPU claim), and that it computes what
//! the formulas say: `wnorm` (a fixed-grid reduction of 1024 x 256 threads with a block
//! shuffle tree and a barrier), `pipecg_update` (eight sums), `axpy` (elementwise), called
//! through the driver API as cudarc calls it.
//!
//! `cargo run --release -p castack-cuda-emu --example launch_cost [N] [REPS]`

use std::ffi::{c_void, CString};
use std::time::Instant;

use castack_cuda_emu::api::*;
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};

fn ok(r: CUresult, what: &str) {
    assert_eq!(r, CUresult::CUDA_SUCCESS, "{what}");
}

/// A driver call that must succeed. SAFETY (every use): the pointers handed to the driver
/// are valid for what the call reads or writes, device addresses come from its allocations.
macro_rules! cu {
    ($call:expr, $what:expr $(,)?) => {
        ok(unsafe { $call }, $what)
    };
}

fn upload(s: CUstream, v: &[f64]) -> CUdeviceptr {
    let mut p: CUdeviceptr = 0;
    cu!(cuMemAllocAsync(&mut p, 8 * v.len().max(1), s), "alloc");
    cu!(
        cuMemcpyHtoDAsync_v2(p, v.as_ptr() as *const c_void, 8 * v.len(), s),
        "htod",
    );
    p
}

fn download(s: CUstream, p: CUdeviceptr, n: usize) -> Vec<f64> {
    let mut v = vec![0.0; n];
    cu!(
        cuMemcpyDtoHAsync_v2(v.as_mut_ptr() as *mut c_void, p, 8 * n, s),
        "dtoh",
    );
    cu!(cuStreamSynchronize(s), "sync");
    v
}

/// Launch `f` with `args` (pointers to the values) and wait; the seconds it took.
fn launch(f: CUfunction, grid: u32, s: CUstream, args: &mut [*mut c_void]) -> f64 {
    let t = Instant::now();
    cu!(
        cuLaunchKernel(
            f,
            grid,
            1,
            1,
            256,
            1,
            1,
            0,
            s,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        ),
        "launch",
    );
    cu!(cuStreamSynchronize(s), "sync");
    t.elapsed().as_secs_f64()
}

fn main() {
    let mut a = std::env::args().skip(1);
    let n: usize = a.next().map_or(4096, |v| v.parse().expect("N"));
    let reps: usize = a.next().map_or(5, |v| v.parse().expect("REPS"));
    // SAFETY: set before any thread starts.
    unsafe { std::env::set_var("CASTACK_CUDA_EMU", "1") };
    cu!(cuInit(0), "init");
    let mut ctx: CUcontext = std::ptr::null_mut();
    cu!(cuDevicePrimaryCtxRetain(&mut ctx, 0), "retain");
    cu!(cuCtxSetCurrent(ctx), "current");
    let mut s: CUstream = std::ptr::null_mut();
    cu!(cuStreamCreate(&mut s, 1), "stream");
    let ptx = CString::new(include_str!("../../linalg/src/device/kernels.ptx")).expect("ptx");
    let mut m: CUmodule = std::ptr::null_mut();
    cu!(
        cuModuleLoadData(&mut m, ptx.as_ptr() as *const c_void),
        "load",
    );
    let func = |name: &str| {
        let mut f: CUfunction = std::ptr::null_mut();
        let c = CString::new(name).expect("name");
        cu!(cuModuleGetFunction(&mut f, m, c.as_ptr()), name);
        f
    };
    let (wnorm, pipe, axpy, finish, gram) = (
        func("wnorm"),
        func("pipecg_update"),
        func("axpy"),
        func("finish_sums"),
        func("gram"),
    );
    let x: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64 * 0.25).collect();
    let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 3) as f64).collect();
    let (dx, dw) = (upload(s, &x), upload(s, &w));
    let partial = upload(s, &vec![0.0; 16 * 1024]);
    let out = upload(s, &[0.0; 8]);
    let nn = n as i64;
    let (mut px, mut pw, mut pp, mut po) = (dx, dw, partial, out);
    let mut t_wnorm = f64::INFINITY;
    let mut t_finish = f64::INFINITY;
    for _ in 0..reps {
        let mut args = [
            &nn as *const i64 as *mut c_void,
            &mut px as *mut u64 as *mut c_void,
            &mut pw as *mut u64 as *mut c_void,
            &mut pp as *mut u64 as *mut c_void,
        ];
        t_wnorm = t_wnorm.min(launch(wnorm, 1024, s, &mut args));
        let nb = 1024i32;
        let mut args = [
            &nb as *const i32 as *mut c_void,
            &mut pp as *mut u64 as *mut c_void,
            &mut po as *mut u64 as *mut c_void,
        ];
        t_finish = t_finish.min(launch(finish, 1, s, &mut args));
    }
    let got = download(s, out, 1)[0];
    let want: f64 = x.iter().zip(&w).map(|(a, b)| a * b * a).sum();
    assert!((got - want).abs() <= 1e-12 * want, "wnorm {got} vs {want}");

    let vecs: Vec<CUdeviceptr> = (0..8)
        .map(|k| upload(s, &vec![0.01 * k as f64; n]))
        .collect();
    let mut ptrs = vecs.clone();
    let (alpha, beta) = (0.5f64, 0.25f64);
    let mut t_pipe = f64::INFINITY;
    for _ in 0..reps {
        let mut args: Vec<*mut c_void> = vec![
            &nn as *const i64 as *mut c_void,
            &alpha as *const f64 as *mut c_void,
            &beta as *const f64 as *mut c_void,
        ];
        args.extend(ptrs.iter_mut().map(|p| p as *mut u64 as *mut c_void));
        args.push(&mut pp as *mut u64 as *mut c_void);
        t_pipe = t_pipe.min(launch(pipe, 1024, s, &mut args));
    }
    let mut t_axpy = f64::INFINITY;
    for _ in 0..reps {
        let (mut a0, mut a1) = (dx, vecs[0]);
        let mut args = [
            &nn as *const i64 as *mut c_void,
            &alpha as *const f64 as *mut c_void,
            &mut a0 as *mut u64 as *mut c_void,
            &mut a1 as *mut u64 as *mut c_void,
        ];
        t_axpy = t_axpy.min(launch(axpy, n.div_ceil(256) as u32, s, &mut args));
    }
    // The Gram block of 5 vectors with themselves, upper triangle: 3 tiles of 4 x 4.
    let table = upload(s, &[0.0; 5]);
    let addrs: Vec<u64> = vecs[1..6].to_vec();
    cu!(
        cuMemcpyHtoDAsync_v2(table, addrs.as_ptr() as *const c_void, 40, s),
        "table",
    );
    let (nx, upper, weighted) = (5i32, 1i32, 0i32);
    let mut t_gram = f64::INFINITY;
    for _ in 0..reps {
        let (mut xt, mut yt, mut wp, mut pp2) = (table, table, dw, partial);
        let mut args = [
            &nn as *const i64 as *mut c_void,
            &nx as *const i32 as *mut c_void,
            &nx as *const i32 as *mut c_void,
            &upper as *const i32 as *mut c_void,
            &mut xt as *mut u64 as *mut c_void,
            &mut yt as *mut u64 as *mut c_void,
            &weighted as *const i32 as *mut c_void,
            &mut wp as *mut u64 as *mut c_void,
            &mut pp2 as *mut u64 as *mut c_void,
        ];
        let t = Instant::now();
        cu!(
            cuLaunchKernel(
                gram,
                3,
                1024,
                1,
                256,
                1,
                1,
                0,
                s,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
            "gram",
        );
        cu!(cuStreamSynchronize(s), "sync");
        t_gram = t_gram.min(t.elapsed().as_secs_f64());
    }
    let y = download(s, vecs[0], n);
    let y0 = 0.0 + reps as f64 * 0.5 * x[0];
    assert!(
        (y[0] - y0).abs() <= 1e-12 * y0.abs().max(1.0),
        "axpy {} vs {y0}",
        y[0]
    );
    println!(
        "n = {n}, best of {reps}: wnorm {:.2} ms (262,144 threads), finish_sums {:.3} ms, \
         pipecg_update {:.2} ms, gram {:.2} ms (786,432 threads), axpy {:.3} ms ({} threads)",
        t_wnorm * 1e3,
        t_finish * 1e3,
        t_pipe * 1e3,
        t_gram * 1e3,
        t_axpy * 1e3,
        n.div_ceil(256) * 256
    );
}
