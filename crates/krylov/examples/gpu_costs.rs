//! What a GPU solve costs the host, per CG-equivalent iteration, for every method: kernel
//! launches, host-blocking calls (stream, event and context synchronisations, synchronous
//! copies) and host-device bytes, counted by the emulated CUDA driver (castack-cuda-emu);
//! and the check that the blocking calls are exactly what each method's design allows: one
//! per global reduction (its partial sums come to the host for the allreduce) plus one per
//! staged halo exchange (the packed values come to the host for the neighbours), on every
//! rank. A hidden synchronisation in an iteration fails it.
//!
//! The counts come from a window of iterations: two solves stopped by `max_iter` at 4 and
//! at 8 CG-equivalent iterations (multiples of every method's block size), whose
//! difference leaves out the set-up and the final checks.
//!
//! Run under the emulator (`cargo xtask test-gpu-emu` does):
//! `LD_LIBRARY_PATH=target/cuda-emu CASTACK_CUDA_EMU=1 cargo run -p castack-krylov
//! --features cuda --example gpu_costs`. With another driver it says the counts need the
//! emulator and exits 0.

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::cuda::CudaDevice;
use castack_krylov::{DistCsr, Method, Partition, SolveReport, Solver, SolverConfig, SpmvMode};

/// `castack_emu_stats`'s layout (castack-cuda-emu `EmuStats`, version 1).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct EmuStats {
    launches: u64,
    blocking_calls: u64,
    htod_bytes: u64,
    htod_copies: u64,
    dtoh_bytes: u64,
    dtoh_copies: u64,
    dtod_bytes: u64,
    allocations: u64,
    frees: u64,
    threads_run: u64,
}

type StatsFn = unsafe extern "C" fn(*mut EmuStats) -> u32;

/// The emulator's counter function, when the driver cudarc loaded is the emulator.
fn stats_fn() -> Option<StatsFn> {
    // SAFETY: looks up a symbol in the already loaded driver library (NOLOAD: never loads
    // one); the symbol, when there, has the signature of `castack_emu_stats`.
    unsafe {
        let lib = libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if lib.is_null() {
            return None;
        }
        let f = libc::dlsym(lib, c"castack_emu_stats".as_ptr());
        (!f.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, StatsFn>(f))
    }
}

fn read(f: StatsFn) -> EmuStats {
    let mut s = EmuStats::default();
    // SAFETY: a valid out-pointer.
    let version = unsafe { f(&mut s) };
    assert_eq!(version, 1, "castack_emu_stats layout version");
    s
}

/// Solve `A x = b` on `p` thread ranks sharing GPU 0; rank 0's report.
fn solve(a: &sprs::CsMat<f64>, p: usize, cfg: &SolverConfig) -> SolveReport {
    let n = a.rows();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64 * 0.25).collect();
    let part = Partition::rows(n, p);
    let reports = ThreadUniverse::new(p)
        .expect("universe")
        .run(|comm| -> Result<SolveReport, castack_krylov::KrylovError> {
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let dev = CudaDevice::new(0)?;
            let range = part.range(comm.rank());
            Ok(Solver::new(comm, dist, cfg.clone(), dev)?
                .solve(&b[range], None)?
                .report)
        })
        .expect("run");
    reports
        .into_iter()
        .map(|r| r.expect("solve"))
        .next()
        .expect("rank 0")
}

fn main() {
    let a = castack_sparse::gen::poisson3d(10).expect("poisson3d");
    // Open the device once so the driver is loaded, then look for the emulator's counters.
    drop(CudaDevice::new(0).expect("a CUDA device (the emulated driver)"));
    let Some(stats) = stats_fn() else {
        println!("gpu_costs: the CUDA driver is not castack's emulator: no counts to show");
        return;
    };
    let (lo, hi) = (4, 8);
    println!(
        "| method | ranks | launches | host-blocking calls | reductions | staged exchanges | \
         H2D bytes | D2H bytes |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for &method in Method::ALL {
        for p in [1, 2] {
            let cfg = |max_iter| SolverConfig {
                method,
                max_iter,
                ..SolverConfig::default()
            };
            let s0 = read(stats);
            let r_lo = solve(&a, p, &cfg(lo));
            let s1 = read(stats);
            let r_hi = solve(&a, p, &cfg(hi));
            let s2 = read(stats);
            assert!(
                !r_hi.converged,
                "{method:?}: converged before {hi} iterations"
            );
            let iters = (r_hi.equivalent_iterations - r_lo.equivalent_iterations) as f64;
            assert_eq!(iters as usize, hi - lo, "{method:?}: iteration window");
            // Per rank and CG-equivalent iteration (every rank counts the same).
            let per = |f: fn(&EmuStats) -> u64| {
                ((f(&s2) - f(&s1)) as f64 - (f(&s1) - f(&s0)) as f64) / (p as f64 * iters)
            };
            let launches = per(|s| s.launches);
            let blocking = per(|s| s.blocking_calls);
            let reductions = (r_hi.reductions - r_lo.reductions) as f64 / iters;
            // At one rank there is no neighbour: nothing is staged.
            let exchanges = if p > 1 {
                (r_hi.halo_exchanges - r_lo.halo_exchanges) as f64 / iters
            } else {
                0.0
            };
            println!(
                "| {} | {p} | {launches:.2} | {blocking:.2} | {reductions:.2} | {exchanges:.2} | \
                 {:.0} | {:.0} |",
                r_hi.method,
                per(|s| s.htod_bytes),
                per(|s| s.dtoh_bytes)
            );
            if (blocking - (reductions + exchanges)).abs() > 1e-9 {
                failures.push(format!(
                    "{method:?} at {p} rank(s): {blocking:.3} host-blocking calls per \
                     iteration, the design allows {reductions:.3} reductions + {exchanges:.3} \
                     staged exchanges"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("gpu_costs: every method blocks the host once per reduction and staged exchange");
}
