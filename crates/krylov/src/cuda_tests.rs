//! The whole solver on the GPU against the CPU (feature `cuda`; every method, both
//! preconditioners that run on a GPU, 1 and 2 ranks). Runs where a CUDA driver answers:
//! a GPU (`cargo xtask test-gpu`) or the emulated driver (`cargo xtask test-gpu-emu`).

use castack_linalg::cuda::{self, CudaDevice};

/// Every method on the GPU, where there is one: on 1 and 2 thread ranks sharing it
/// (halo SpMV; allgather too; cbcgr and cacg through the matrix powers kernel), the
/// GPU run converges on the true residual within max(1, 2%) of the CPU's
/// CG-equivalent iterations, and its solution agrees with the CPU's to the tolerance.
/// Without a driver it says so and checks nothing else (`cargo xtask test-gpu-emu`
/// runs it on the emulated driver, `cargo xtask test-gpu` where there is a GPU).
#[test]
fn every_method_on_the_gpu_converges_like_the_cpu() {
    use castack_collectives::{Communicator, ThreadUniverse};

    use crate::sparse::gen;
    use crate::{DistCsr, MatrixPowers, Method, Partition, Solver, SolverConfig};
    use crate::{Precond, SolveReport, SpmvMode};

    let gpus = cuda::device_count().unwrap_or(0);
    if gpus == 0 {
        eprintln!("\n!!! no CUDA device: the GPU solves were NOT run\n");
        return;
    }
    // Small: on the emulated driver (`cargo xtask test-gpu-emu`) every reduction runs
    // 1024 x 256 GPU threads on the host.
    let a = gen::poisson3d(10).expect("poisson");
    let n = a.rows();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64 * 0.25).collect();
    let solve = |p: usize, cfg: &SolverConfig, mode: SpmvMode, gpu: bool| {
        let part = Partition::rows(n, p);
        ThreadUniverse::new(p)
            .expect("universe")
            .run(
                |comm| -> Result<(Vec<f64>, SolveReport), crate::KrylovError> {
                    let dist = DistCsr::from_global(comm, a.view(), &part, mode)?;
                    let mpk = cfg
                        .mpk
                        .then(|| MatrixPowers::from_global(comm, a.view(), &part, cfg.k))
                        .transpose()?;
                    let range = part.range(comm.rank());
                    let sol =
                        if gpu {
                            let dev = CudaDevice::new(0)?;
                            match mpk {
                                Some(m) => Solver::with_mpk(comm, dist, m, cfg.clone(), dev)?
                                    .solve(&b[range], None)?,
                                None => Solver::new(comm, dist, cfg.clone(), dev)?
                                    .solve(&b[range], None)?,
                            }
                        } else {
                            let dev = crate::Cpu::sequential();
                            match mpk {
                                Some(m) => Solver::with_mpk(comm, dist, m, cfg.clone(), dev)?
                                    .solve(&b[range], None)?,
                                None => Solver::new(comm, dist, cfg.clone(), dev)?
                                    .solve(&b[range], None)?,
                            }
                        };
                    Ok((sol.x, sol.report))
                },
            )
            .expect("run")
            .into_iter()
            .map(|r| r.expect("solve"))
            .fold((Vec::new(), None), |(mut x, rep), (xr, r)| {
                x.extend(xr);
                (x, rep.or(Some(r)))
            })
    };
    // The Chebyshev preconditioner (SpMVs and vector operations only) runs on the GPU
    // too; IC(0)'s triangular solves do not (refused at set-up, tested on the CPU's
    // GPU model in `tests/it/precond.rs`).
    for (&method, precond) in Method::ALL
        .iter()
        .flat_map(|m| [(m, Precond::Jacobi), (m, Precond::Chebyshev)])
    {
        for p in [1, 2] {
            let mpk = p == 2
                && matches!(method, Method::Cbcgr | Method::Cacg)
                && precond == Precond::Jacobi;
            let cfg = SolverConfig {
                method,
                mpk,
                precond,
                ..SolverConfig::default()
            };
            let modes: &[SpmvMode] = if method == Method::Cg {
                &[SpmvMode::Halo, SpmvMode::Allgather]
            } else {
                &[SpmvMode::Halo]
            };
            for &mode in modes {
                let what = format!("{method:?} {precond:?} p={p} mpk={mpk} {mode:?}");
                let (xc, rc) = solve(p, &cfg, mode, false);
                let (xg, rg) = solve(p, &cfg, mode, true);
                let (rc, rg) = (rc.expect("report"), rg.expect("report"));
                assert_eq!(rg.device, "cuda", "{what}");
                assert!(rg.converged && rg.relres_true <= cfg.tol, "{what}: {rg:?}");
                let (ec, eg) = (rc.equivalent_iterations, rg.equivalent_iterations);
                let slack = (ec as f64 * 0.02).ceil().max(1.0) as usize;
                assert!(ec.abs_diff(eg) <= slack, "{what}: CPU {ec}, GPU {eg}");
                let scale = xc.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                let diff = xc
                    .iter()
                    .zip(&xg)
                    .fold(0.0f64, |m, (u, v)| m.max((u - v).abs()));
                assert!(diff <= 1e-5 * scale, "{what}: solutions differ by {diff:e}");
                // Every reduction's results cross to the host: the copies are timed.
                let t = &rg.time_breakdown;
                assert!(t.transfer > 0.0 && t.spmv > 0.0, "{what}: {t:?}");
                if precond == Precond::Chebyshev {
                    assert!(t.precond > 0.0 && rg.precond_applies > 0, "{what}: {t:?}");
                }
            }
        }
    }
}
