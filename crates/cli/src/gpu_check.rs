//! `--device cuda` and `krylov gpu-check`: the GPU self-check of the CUDA kernels.
//!
//! `krylov gpu-check [--n N]` runs every kernel of the CUDA device against the CPU device on
//! a generated 3-D Poisson matrix (`N^3` rows) and a random irregular matrix of as many rows,
//! checks that they agree (the same bits for the SpMV kernels that sum rows in CSR order
//! and for the elementwise kernels; within a rigorous rounding bound for multi-lane SpMV
//! rows and for reductions), times every SpMV kernel of the registry against a
//! device-to-device copy of the same number of bytes in the same run, and prints one JSON
//! object. Exit 0 when every
//! check passed, 1 when one failed, 2 without the `cuda` feature, a driver or a GPU.
//!
//! Until the solvers are ported to the `Device` trait (issue 8, phase 2), `solve` and
//! `compare` refuse `--device cuda` with one line that says why.

use std::process::ExitCode;

use crate::args::GpuCheckArgs;
use crate::exit::{bad, CliError};

/// The one-line refusal of a build without the feature.
#[cfg(not(feature = "cuda"))]
const NOT_BUILT: &str = "built without the cuda feature; rebuild with --features cuda";

/// Refuse `--device cuda` for a solve, saying why in one line (exit 2).
#[cfg(not(feature = "cuda"))]
pub(crate) fn refuse_solve() -> CliError {
    bad(format!("--device cuda: {NOT_BUILT}"))
}

/// Refuse `--device cuda` for a solve, saying why in one line (exit 2): no driver, no
/// GPU, or (with a GPU) that the solvers are not yet ported to it.
#[cfg(feature = "cuda")]
pub(crate) fn refuse_solve() -> CliError {
    match castack_krylov::device::cuda::CudaDevice::new(0) {
        Err(e) => bad(format!("--device cuda: {e}")),
        Ok(dev) => bad(format!(
            "--device cuda: GPU '{}' found and its kernels load, but the solvers are not yet ported to the GPU device (issue 8, phase 2); use --device cpu (kernel self-check: krylov gpu-check)",
            dev.gpu_name()
        )),
    }
}

/// `krylov gpu-check` without the feature: one line, exit 2.
#[cfg(not(feature = "cuda"))]
pub(crate) fn run(_args: GpuCheckArgs) -> Result<ExitCode, CliError> {
    Err(bad(format!("gpu-check: {NOT_BUILT}")))
}

/// `krylov gpu-check`.
#[cfg(feature = "cuda")]
pub(crate) fn run(args: GpuCheckArgs) -> Result<ExitCode, CliError> {
    imp::run(args)
}

#[cfg(feature = "cuda")]
mod imp {
    use std::process::ExitCode;
    use std::time::Instant;

    use castack_krylov::device::cuda::{CudaDevice, CudaVector, SpmvKernel};
    use castack_krylov::device::{Device, HostCsr};
    use castack_krylov::gen::{poisson3d, SplitMix64};
    use castack_krylov::Cpu;
    use serde_json::{json, Value};

    use crate::args::GpuCheckArgs;
    use crate::exit::{bad, CliError};

    /// Unit roundoff of f64.
    const U: f64 = f64::EPSILON / 2.0;

    fn dev_err(e: castack_krylov::DeviceError) -> CliError {
        CliError::failed(anyhow::anyhow!("gpu-check: {e}"))
    }

    fn random_vec(n: usize, seed: u64) -> Vec<f64> {
        let mut r = SplitMix64::new(seed);
        (0..n).map(|_| 2.0 * r.next_f64() - 1.0).collect()
    }

    /// The checks and measurements so far.
    struct Run {
        gpu: CudaDevice,
        cpu: Cpu,
        checks: Vec<Value>,
        ok: bool,
    }

    impl Run {
        fn get(&mut self, v: &CudaVector) -> Result<Vec<f64>, CliError> {
            let mut h = vec![0.0; CudaDevice::vec_len(v)];
            self.gpu.download(v, &mut h).map_err(dev_err)?;
            Ok(h)
        }

        fn record_bits(&mut self, matrix: &str, kernel: &str, got: &[f64], want: &[f64]) {
            let diff = got
                .iter()
                .zip(want)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            let ok = diff == 0 && got.len() == want.len();
            self.ok &= ok;
            self.checks.push(
                json!({"matrix": matrix, "kernel": kernel, "compare": "bits",
                "values": got.len(), "differing": diff, "ok": ok}),
            );
        }

        /// `|got - want| <= bound` elementwise; records the largest `|got - want| / bound`.
        fn record_bound(
            &mut self,
            matrix: &str,
            kernel: &str,
            got: &[f64],
            want: &[f64],
            bound: &[f64],
        ) {
            let worst = got
                .iter()
                .zip(want)
                .zip(bound)
                .map(|((g, w), b)| (g - w).abs() / b.max(f64::MIN_POSITIVE))
                .fold(
                    0.0f64,
                    |m, r| if r.is_nan() { f64::INFINITY } else { m.max(r) },
                );
            let ok = worst <= 1.0 && got.len() == want.len();
            self.ok &= ok;
            self.checks.push(json!({"matrix": matrix, "kernel": kernel,
                "compare": "rounding bound", "values": got.len(),
                "worst_error_over_bound": worst, "ok": ok}));
        }
    }

    /// Rounding bound of two differently ordered sums of `terms` products whose absolute
    /// values add up to `abs_sum`: each is within `terms * u * abs_sum` of the exact sum.
    fn sum_bound(terms: usize, abs_sum: f64) -> f64 {
        2.0 * terms.max(1) as f64 * U * abs_sum * 1.01
    }

    pub(super) fn run(args: GpuCheckArgs) -> Result<ExitCode, CliError> {
        if args.n == 0 || args.reps == 0 {
            return Err(bad("gpu-check: --n and --reps must be at least 1"));
        }
        let gpu = CudaDevice::new(args.ordinal).map_err(|e| bad(format!("gpu-check: {e}")))?;
        let mut run = Run {
            gpu,
            cpu: Cpu::sequential(),
            checks: Vec::new(),
            ok: true,
        };
        let poisson = poisson3d(args.n).map_err(|e| bad(format!("gpu-check: {e}")))?;
        let poisson = HostCsr::from_csmat(&poisson)
            .ok_or_else(|| bad("gpu-check: --n too large for 32-bit columns"))?;
        let rows = poisson.indptr.len() - 1;
        let irregular = HostCsr::random_irregular(rows, rows, 64, args.seed);
        let mut spmv = Vec::new();
        let copy = copy_bandwidth(&mut run, &poisson, args.reps)?;
        for (name, m) in [("poisson3d", &poisson), ("random_irregular", &irregular)] {
            spmv.extend(spmv_kernels(&mut run, name, m, args.seed, args.reps, copy)?);
        }
        check_vectors(&mut run, rows, args.seed)?;
        let report = json!({
            "schema_version": 1,
            "device": run.gpu.gpu_name(),
            "n": args.n,
            "rows": rows,
            "reps": args.reps,
            "all_ok": run.ok,
            "checks": run.checks,
            "copy_gbs": copy,
            "spmv": spmv,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(CliError::failed)?
        );
        Ok(if run.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(crate::exit::RUN_FAILED)
        })
    }

    /// Minimum bytes one SpMV moves: the matrix, `x` once, `y` once.
    fn spmv_bytes(m: &HostCsr) -> usize {
        let rows = m.indptr.len() - 1;
        8 * (rows + 1) + 12 * m.vals.len() + 8 * m.ncols + 8 * rows
    }

    /// GB/s of a device-to-device copy moving as many bytes (read + write) as one SpMV of `m`.
    fn copy_bandwidth(run: &mut Run, m: &HostCsr, reps: usize) -> Result<f64, CliError> {
        let n = spmv_bytes(m) / 16;
        let src = run.gpu.upload(&random_vec(n, 1)).map_err(dev_err)?;
        let mut dst = run.gpu.zeros(n).map_err(dev_err)?;
        run.gpu.copy_dtod(&src, &mut dst).map_err(dev_err)?;
        run.gpu.synchronize().map_err(dev_err)?;
        let t = Instant::now();
        for _ in 0..reps {
            run.gpu.copy_dtod(&src, &mut dst).map_err(dev_err)?;
        }
        run.gpu.synchronize().map_err(dev_err)?;
        let s = t.elapsed().as_secs_f64() / reps as f64;
        let got = run.get(&dst)?;
        let want = run.get(&src)?;
        run.record_bits("-", "copy", &got, &want);
        Ok((16 * n) as f64 / s / 1e9)
    }

    /// Every SpMV kernel of the registry: checked against the CPU (the same bits for the
    /// kernels that sum rows in CSR order, else within the rounding bound of each row), then
    /// timed; bandwidth from the minimum traffic and its fraction of the copy's.
    fn spmv_kernels(
        run: &mut Run,
        name: &str,
        m: &HostCsr,
        seed: u64,
        reps: usize,
        copy_gbs: f64,
    ) -> Result<Vec<Value>, CliError> {
        let rows = m.indptr.len() - 1;
        let xh = random_vec(m.ncols, seed ^ 0x5eed);
        let mut want = vec![0.0; rows];
        run.cpu.spmv(&m.indptr, &m.cols, &m.vals, &xh, &mut want);
        let bound: Vec<f64> = m
            .indptr
            .windows(2)
            .map(|w| {
                let s: f64 = (w[0]..w[1])
                    .map(|k| (m.vals[k] * xh[m.cols[k] as usize]).abs())
                    .sum();
                sum_bound(w[1] - w[0], s)
            })
            .collect();
        let x = run.gpu.upload(&xh).map_err(dev_err)?;
        let mut y = run.gpu.zeros(rows).map_err(dev_err)?;
        let chosen = SpmvKernel::auto(rows, m.vals.len());
        let mut out = Vec::new();
        for kernel in SpmvKernel::ALL {
            let a = run
                .gpu
                .upload_csr_with(m.as_csr_ref(), kernel)
                .map_err(dev_err)?;
            run.gpu.spmv(&a, &x, &mut y).map_err(dev_err)?;
            let got = run.get(&y)?;
            let label = format!("spmv {}", kernel.name());
            if kernel.bit_identical_to_cpu() {
                run.record_bits(name, &label, &got, &want);
            } else {
                run.record_bound(name, &label, &got, &want, &bound);
            }
            let t = Instant::now();
            for _ in 0..reps {
                run.gpu.spmv(&a, &x, &mut y).map_err(dev_err)?;
            }
            run.gpu.synchronize().map_err(dev_err)?;
            let s = t.elapsed().as_secs_f64() / reps as f64;
            let gbs = spmv_bytes(m) as f64 / s / 1e9;
            out.push(json!({"matrix": name, "rows": rows, "nnz": m.vals.len(),
                "kernel": kernel.name(), "default": kernel == chosen, "seconds": s,
                "gbs": gbs, "fraction_of_copy": gbs / copy_gbs}));
        }
        Ok(out)
    }

    /// The vector kernels against the CPU device.
    fn check_vectors(run: &mut Run, n: usize, seed: u64) -> Result<(), CliError> {
        let hv: Vec<Vec<f64>> = (0..12).map(|j| random_vec(n, seed + 100 + j)).collect();
        let w: Vec<f64> = random_vec(n, seed + 99).iter().map(|v| v.abs()).collect();
        let gv = hv
            .iter()
            .map(|h| run.gpu.upload(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(dev_err)?;
        let gw = run.gpu.upload(&w).map_err(dev_err)?;
        let cpu = &mut run.cpu;
        let mut tmp = run.gpu.zeros(n).map_err(dev_err)?;

        // Elementwise: the same bits.
        let mut want = hv[1].clone();
        cpu.axpy(0.37, &hv[0], &mut want).map_err(dev_err)?;
        run.gpu.copy(&gv[1], &mut tmp).map_err(dev_err)?;
        run.gpu.axpy(0.37, &gv[0], &mut tmp).map_err(dev_err)?;
        let got = run.get(&tmp)?;
        run.record_bits("-", "axpy", &got, &want);

        let mut want = hv[1].clone();
        run.cpu.xpay(&hv[0], -1.25, &mut want).map_err(dev_err)?;
        run.gpu.copy(&gv[1], &mut tmp).map_err(dev_err)?;
        run.gpu.xpay(&gv[0], -1.25, &mut tmp).map_err(dev_err)?;
        let got = run.get(&tmp)?;
        run.record_bits("-", "xpay", &got, &want);

        let coef = [0.5, -2.0, 1e-3, 3.25, -0.75];
        let mut want = hv[1].clone();
        let hcols: Vec<&Vec<f64>> = hv[2..7].iter().collect();
        run.cpu.lincomb(&coef, &hcols, &mut want).map_err(dev_err)?;
        run.gpu.copy(&gv[1], &mut tmp).map_err(dev_err)?;
        let gcols: Vec<&CudaVector> = gv[2..7].iter().collect();
        run.gpu.lincomb(&coef, &gcols, &mut tmp).map_err(dev_err)?;
        let got = run.get(&tmp)?;
        run.record_bits("-", "lincomb", &got, &want);

        let (eta, zeta) = (0.17, 1.3);
        for prev in [None, Some(2)] {
            let mut want = vec![0.0; n];
            let hp = prev.map(|p| &hv[p]);
            run.cpu
                .chebyshev_step(eta, zeta, &hv[0], &hv[1], hp, &mut want)
                .map_err(dev_err)?;
            let gp = prev.map(|p| &gv[p]);
            run.gpu
                .chebyshev_step(eta, zeta, &gv[0], &gv[1], gp, &mut tmp)
                .map_err(dev_err)?;
            let got = run.get(&tmp)?;
            let kernel = if prev.is_none() {
                "chebyshev_step (first)"
            } else {
                "chebyshev_step"
            };
            run.record_bits("-", kernel, &got, &want);
        }

        // Fused CG update: the vector to the bit, the two sums within the bound.
        let mut want = hv[1].clone();
        let ws = run
            .cpu
            .axpy_dots(-0.5, &hv[0], &mut want, &w)
            .map_err(dev_err)?;
        run.gpu.copy(&gv[1], &mut tmp).map_err(dev_err)?;
        let gs = run
            .gpu
            .axpy_dots(-0.5, &gv[0], &mut tmp, &gw)
            .map_err(dev_err)?;
        let got = run.get(&tmp)?;
        run.record_bits("-", "axpy_dots (vector)", &got, &want);
        let rr: f64 = want.iter().map(|v| v * v).sum();
        let rw: f64 = want.iter().zip(&w).map(|(v, w)| v * v * w).sum();
        run.record_bound(
            "-",
            "axpy_dots (sums)",
            &gs,
            &ws,
            &[sum_bound(n, rr), sum_bound(n, rw)],
        );

        // Reductions: within the bound of two differently ordered sums.
        let abs_dot =
            |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum::<f64>();
        let pairs = [(0usize, 1usize), (2, 2), (3, 11)];
        let hp: Vec<(&Vec<f64>, &Vec<f64>)> =
            pairs.iter().map(|&(i, j)| (&hv[i], &hv[j])).collect();
        let gp: Vec<(&CudaVector, &CudaVector)> =
            pairs.iter().map(|&(i, j)| (&gv[i], &gv[j])).collect();
        let (mut want, mut got) = (vec![0.0; 3], vec![0.0; 3]);
        run.cpu.dots(&hp, &mut want).map_err(dev_err)?;
        run.gpu.dots(&gp, &mut got).map_err(dev_err)?;
        let bound: Vec<f64> = pairs
            .iter()
            .map(|&(i, j)| sum_bound(n, abs_dot(&hv[i], &hv[j])))
            .collect();
        run.record_bound("-", "multidot", &got, &want, &bound);

        // Gram block 3 x 10 (two passes of the kernel over Y).
        let (hx, hy): (Vec<&Vec<f64>>, Vec<&Vec<f64>>) =
            (hv[..3].iter().collect(), hv[2..].iter().collect());
        let (gx, gy): (Vec<&CudaVector>, Vec<&CudaVector>) =
            (gv[..3].iter().collect(), gv[2..].iter().collect());
        let (mut want, mut got) = (vec![0.0; 30], vec![0.0; 30]);
        run.cpu.gram(&hx, &hy, &mut want).map_err(dev_err)?;
        run.gpu.gram(&gx, &gy, &mut got).map_err(dev_err)?;
        let bound: Vec<f64> = hx
            .iter()
            .flat_map(|x| hy.iter().map(move |y| (x, y)))
            .map(|(x, y)| sum_bound(n, abs_dot(x, y)))
            .collect();
        run.record_bound("-", "gram", &got, &want, &bound);
        Ok(())
    }
}
