//! `krylov gpu-check`: the self-check of the CUDA device against the CPU device.
//!
//! `krylov gpu-check [--n N]` runs EVERY operation of the `Device` trait on `CudaDevice`
//! and on `Cpu` with the same random inputs and checks that they agree:
//!
//! - the same bits for the elementwise operations (`axpy`, `xpay`, `scale`, `mul`, `div`,
//!   the CG, C-CG and pipelined-CG updates, basis steps, smoothing, linear combinations,
//!   copies, fills, halo gather and scatter, host-device copies at offsets) and for the
//!   SpMV kernels that sum each row in CSR order (`csr_vector_t1`, SELL-C-sigma);
//! - within the rigorous rounding bound `64 m eps sum |terms|` of two differently ordered
//!   sums of `m` terms for every reduction (the fused norms, Gram blocks full and upper,
//!   weighted or not, the fused SpMV dot product) and for multi-lane SpMV rows;
//! - the untouched values: vector tails past `n`, the rows past an SpMV row prefix, the
//!   result slots around `out[at..]`; reductions that repeat give the same bits; bad
//!   lengths and indices are errors, not panics; device-event timing is positive and
//!   within the host's wall time.
//!
//! The matrices are a generated 3-D Poisson matrix (`N^3` rows) and a random irregular
//! matrix of as many rows. Every SpMV kernel of the registry and the fused `spmv_dot` are
//! timed (device events over `--reps` calls) against a device-to-device copy of as many
//! bytes as the SpMV's minimum traffic, in the same run: the report gives effective GB/s
//! and the fraction of the copy's. One JSON object goes to stdout. Exit 0 when every check
//! passed, 1 when one failed (or a CUDA call failed mid-run), 2 without the `cuda`
//! feature, the driver or a GPU.

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
    if args.n == 0 || args.reps == 0 {
        return Err(bad("gpu-check: --n and --reps must be at least 1"));
    }
    imp::run(args)
}

#[cfg(feature = "cuda")]
mod imp {
    use std::process::ExitCode;
    use std::time::Instant;

    use castack_krylov::cuda::{CudaDevice, CudaVector, SpmvKernel, KERNEL_NAMES};
    use castack_krylov::{
        BasisStep, CcgVecs, Concat, Device, GramShape, HostCsr, PipecgVecs, Refs, RefsMut,
        PIPECG_SUMS,
    };
    use castack_krylov::{Bucket, TimeBreakdown};
    use castack_krylov::{Cpu, DeviceError};
    use castack_sparse::gen::{poisson3d, SplitMix64};
    use serde_json::{json, Value};

    use crate::args::GpuCheckArgs;
    use crate::exit::{bad, CliError};

    fn dev_err(e: DeviceError) -> CliError {
        CliError::failed(anyhow::anyhow!("gpu-check: {e}"))
    }

    fn random_vec(n: usize, seed: u64) -> Vec<f64> {
        let mut r = SplitMix64::new(seed);
        (0..n).map(|_| 2.0 * r.next_f64() - 1.0).collect()
    }

    /// The rigorous bound on the difference of two sums of `m` terms, in any orders, whose
    /// absolute values add up to `abs`: each is within `(m - 1) eps/2 abs` of the exact
    /// sum to first order; `64 m eps abs` leaves room for the second-order terms.
    fn sum_bound(m: usize, abs: f64) -> f64 {
        64.0 * m.max(1) as f64 * f64::EPSILON * abs + f64::MIN_POSITIVE
    }

    /// `sum |a_k b_k|` over the first `n` values.
    fn abs_dot(n: usize, a: &[f64], b: &[f64]) -> f64 {
        a[..n].iter().zip(&b[..n]).map(|(x, y)| (x * y).abs()).sum()
    }

    /// `sum |a_k w_k b_k|` over the first `n` values.
    fn abs_wdot(n: usize, a: &[f64], w: &[f64], b: &[f64]) -> f64 {
        (0..n).map(|k| (a[k] * w[k] * b[k]).abs()).sum()
    }

    /// Device time per call from events and host wall time per call.
    struct Timing {
        device: f64,
        host: f64,
        /// Device time charged to other buckets (should be none).
        stray: f64,
    }

    /// The checks and measurements so far.
    struct Run {
        gpu: CudaDevice,
        cpu: Cpu,
        checks: Vec<Value>,
        ok: bool,
    }

    impl Run {
        fn up(&mut self, h: &[f64]) -> Result<CudaVector, CliError> {
            self.gpu.upload(h).map_err(dev_err)
        }

        fn get(&mut self, v: &CudaVector) -> Result<Vec<f64>, CliError> {
            let mut h = vec![0.0; CudaDevice::len(v)];
            self.gpu.read(v, 0, &mut h).map_err(dev_err)?;
            Ok(h)
        }

        fn record(&mut self, check: &str, ok: bool, detail: Value) {
            self.ok &= ok;
            let mut entry = json!({"check": check, "ok": ok});
            if let (Some(e), Value::Object(d)) = (entry.as_object_mut(), detail) {
                e.extend(d);
            }
            self.checks.push(entry);
        }

        /// The same bits, value for value.
        fn bits(&mut self, check: &str, got: &[f64], want: &[f64]) {
            let first = got
                .iter()
                .zip(want)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            let differing = got
                .iter()
                .zip(want)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            let ok = differing == 0 && got.len() == want.len();
            self.record(
                check,
                ok,
                json!({"compare": "bits", "values": want.len(), "differing": differing,
                       "first_differing": first}),
            );
        }

        /// `|got - want| <= bound` value for value; records the largest ratio.
        fn bound(&mut self, check: &str, got: &[f64], want: &[f64], bound: &[f64]) {
            let worst = got
                .iter()
                .zip(want)
                .zip(bound)
                .map(|((g, w), b)| (g - w).abs() / b.max(f64::MIN_POSITIVE))
                .fold(
                    0.0f64,
                    |m, r| if r.is_nan() { f64::INFINITY } else { m.max(r) },
                );
            let ok = worst <= 1.0 && got.len() == want.len() && bound.len() == want.len();
            self.record(
                check,
                ok,
                json!({"compare": "rounding bound", "values": want.len(),
                       "worst_error_over_bound": worst}),
            );
        }

        /// An operation that must fail with a device error, not succeed or panic.
        fn refused(&mut self, check: &str, r: Result<(), DeviceError>) {
            let detail = match &r {
                Ok(()) => json!({"error": null}),
                Err(e) => json!({"error": e.to_string()}),
            };
            self.record(check, r.is_err(), detail);
        }

        /// Run one operation on both devices from the same `K` starting vectors (each
        /// `len` long) and the same results vector (`results + 2` zeros; the operation
        /// writes `out[1..1 + results]`): checks every updated vector for the CPU's bits
        /// (tails included) and the result slots around `out[1..]` for zeros. Returns the
        /// CPU's vectors and results and the GPU's results.
        #[allow(clippy::type_complexity)]
        fn both<const K: usize>(
            &mut self,
            what: &str,
            names: [&str; K],
            init: [&[f64]; K],
            results: usize,
            cpu: impl FnOnce(&mut Cpu, &mut [Vec<f64>; K], &mut Vec<f64>) -> Result<(), DeviceError>,
            gpu: impl FnOnce(
                &mut CudaDevice,
                &mut [CudaVector; K],
                &mut CudaVector,
            ) -> Result<(), DeviceError>,
        ) -> Result<([Vec<f64>; K], Vec<f64>, Vec<f64>), CliError> {
            let mut hv: [Vec<f64>; K] = init.map(<[f64]>::to_vec);
            let mut hout = vec![0.0; results + 2];
            cpu(&mut self.cpu, &mut hv, &mut hout).map_err(dev_err)?;
            let mut gs = Vec::with_capacity(K);
            for h in init {
                gs.push(self.up(h)?);
            }
            let mut gv: [CudaVector; K] = gs
                .try_into()
                .map_err(|_| CliError::failed(anyhow::anyhow!("gpu-check: {what}: K vectors")))?;
            let mut gout = self.gpu.zeros(results + 2).map_err(dev_err)?;
            gpu(&mut self.gpu, &mut gv, &mut gout).map_err(dev_err)?;
            for (k, name) in names.iter().enumerate() {
                let got = self.get(&gv[k])?;
                self.bits(&format!("{what} ({name})"), &got, &hv[k]);
            }
            let got_out = self.get(&gout)?;
            if results > 0 {
                let edges = [got_out[0], got_out[results + 1]];
                self.bits(
                    &format!("{what} (slots around the results)"),
                    &edges,
                    &[0.0; 2],
                );
            }
            Ok((
                hv,
                hout[1..=results].to_vec(),
                got_out[1..=results].to_vec(),
            ))
        }

        /// Time `reps` calls of `op`, each bracketed by device events charged to `bucket`,
        /// after one untimed call.
        fn time(
            &mut self,
            reps: usize,
            bucket: Bucket,
            mut op: impl FnMut(&mut CudaDevice) -> Result<(), DeviceError>,
        ) -> Result<Timing, CliError> {
            let g = &mut self.gpu;
            op(g).map_err(dev_err)?;
            g.synchronize().map_err(dev_err)?;
            g.take_event_times().map_err(dev_err)?;
            let t = Instant::now();
            for _ in 0..reps {
                g.event_begin(bucket).map_err(dev_err)?;
                op(g).map_err(dev_err)?;
                g.event_end().map_err(dev_err)?;
            }
            g.synchronize().map_err(dev_err)?;
            let host = t.elapsed().as_secs_f64();
            let ev = g.take_event_times().map_err(dev_err)?;
            let device = in_bucket(&ev, bucket);
            let stray = ev.accounted() - device;
            Ok(Timing {
                device: device / reps as f64,
                host: host / reps as f64,
                stray,
            })
        }

        /// Event timing is positive, charged to its bucket only, and within the host's
        /// wall time (which brackets it) up to clock slack.
        fn check_timing(&mut self, what: &str, t: &Timing) {
            let ok = t.device > 0.0 && t.stray == 0.0 && t.device <= 1.05 * t.host + 1e-5;
            self.record(
                &format!("event timing: {what}"),
                ok,
                json!({"device_seconds": t.device, "host_seconds": t.host,
                       "other_buckets_seconds": t.stray}),
            );
        }
    }

    fn in_bucket(t: &TimeBreakdown, b: Bucket) -> f64 {
        match b {
            Bucket::Spmv => t.spmv,
            Bucket::Blas => t.blas,
            Bucket::Allreduce => t.allreduce,
            Bucket::Halo => t.halo,
            Bucket::Transfer => t.transfer,
            Bucket::Precond => t.precond,
        }
    }

    pub(super) fn run(args: GpuCheckArgs) -> Result<ExitCode, CliError> {
        let gpu = CudaDevice::new(args.ordinal).map_err(|e| bad(format!("gpu-check: {e}")))?;
        let poisson = poisson3d(args.n).map_err(|e| bad(format!("gpu-check: {e}")))?;
        let poisson = HostCsr::from_csmat(&poisson)
            .ok_or_else(|| bad("gpu-check: --n too large for 32-bit columns"))?;
        let mut run = Run {
            gpu,
            cpu: Cpu::sequential(),
            checks: Vec::new(),
            ok: true,
        };
        let rows = poisson.rows();
        let irregular = HostCsr::random_irregular(rows, rows, 64, args.seed);
        let mut spmv = Vec::new();
        let mut copies = Vec::new();
        for (name, m) in [("poisson3d", &poisson), ("random_irregular", &irregular)] {
            let (timings, copy) = spmv_kernels(&mut run, name, m, args.seed, args.reps)?;
            spmv.extend(timings);
            copies.push(copy);
        }
        check_vector_ops(&mut run, rows, args.seed)?;
        check_lists(&mut run, rows, args.seed)?;
        check_errors(&mut run)?;
        let failed: Vec<&Value> = run.checks.iter().filter(|c| c["ok"] != true).collect();
        let report = json!({
            "schema_version": 2,
            "device": run.gpu.gpu_name(),
            "n": args.n,
            "rows": rows,
            "reps": args.reps,
            "kernels": KERNEL_NAMES.len(),
            "all_ok": run.ok,
            "checks_run": run.checks.len(),
            "failed": failed,
            "checks": run.checks,
            "copy": copies,
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

    /// Minimum bytes one SpMV moves: the row offsets, the entries (value and column), `x`
    /// once and `y` once.
    fn spmv_bytes(m: &HostCsr) -> usize {
        8 * (m.rows() + 1) + 12 * m.vals.len() + 8 * m.ncols + 8 * m.rows()
    }

    /// Every SpMV kernel of the registry on `m`: `spmv` over all rows and over a row prefix
    /// and the fused `spmv_dot`, checked against the CPU (the same bits for the kernels
    /// that sum rows in CSR order, else within the rounding bound of each row; the dot
    /// within its bound, and the same bits when repeated), then timed against a
    /// device-to-device copy of the SpMV's minimum traffic.
    fn spmv_kernels(
        run: &mut Run,
        name: &str,
        m: &HostCsr,
        seed: u64,
        reps: usize,
    ) -> Result<(Vec<Value>, Value), CliError> {
        let (rows, nnz) = (m.rows(), m.vals.len());
        let xh = random_vec(m.ncols.max(rows), seed ^ 0x5eed);
        let ca = run.cpu.upload_csr(m.clone()).map_err(dev_err)?;
        let mut want = vec![0.0; rows];
        run.cpu.spmv(&ca, rows, &xh, &mut want).map_err(dev_err)?;
        let mut want_dot = [0.0];
        {
            let mut y = vec![0.0; rows];
            let mut out = vec![0.0; 1];
            run.cpu
                .spmv_dot(&ca, &xh, &mut y, &mut out, 0)
                .map_err(dev_err)?;
            want_dot[0] = out[0];
        }
        let row_bound: Vec<f64> = m
            .indptr
            .windows(2)
            .map(|w| {
                let s: f64 = (w[0]..w[1])
                    .map(|k| (m.vals[k] * xh[m.cols[k] as usize]).abs())
                    .sum();
                sum_bound(w[1] - w[0], s)
            })
            .collect();
        // The dot of x with a y whose rows agree within `row_bound`.
        let spread: f64 = (0..rows).map(|i| xh[i].abs() * row_bound[i]).sum();
        let dot_exact_bound = sum_bound(rows, abs_dot(rows, &xh, &want));
        let prefix = (rows / 2 + 3).min(rows);

        // The bandwidth reference: a copy reading and writing the SpMV's minimum bytes.
        let bytes = spmv_bytes(m);
        let values = (bytes / 16).max(1);
        let src = run.up(&random_vec(values, seed ^ 0xc0b7))?;
        let mut dst = run.gpu.zeros(values).map_err(dev_err)?;
        let copy = run.time(reps, Bucket::Transfer, |g| g.copy_dtod(&src, &mut dst))?;
        run.check_timing(&format!("{name}: device copy"), &copy);
        let (got, host_src) = (run.get(&dst)?, run.get(&src)?);
        run.bits(&format!("{name}: device copy"), &got, &host_src);
        drop((src, dst));
        let copy_gbs = (16 * values) as f64 / copy.device / 1e9;

        let x = run.up(&xh)?;
        let chosen = SpmvKernel::auto(rows, nnz);
        let mut out = Vec::new();
        for kernel in SpmvKernel::ALL {
            let label = format!("{name}: spmv {}", kernel.name());
            let exact = kernel.bit_identical_to_cpu();
            let a = run
                .gpu
                .upload_csr_with(m.as_csr_ref(), kernel)
                .map_err(dev_err)?;
            // All rows, then a prefix (the rest keeps its sentinel).
            let mut y = run.up(&vec![7.0; rows])?;
            run.gpu.spmv(&a, rows, &x, &mut y).map_err(dev_err)?;
            let got = run.get(&y)?;
            if exact {
                run.bits(&label, &got, &want);
            } else {
                run.bound(&label, &got, &want, &row_bound);
            }
            let mut yp = run.up(&vec![7.0; rows])?;
            run.gpu.spmv(&a, prefix, &x, &mut yp).map_err(dev_err)?;
            let got = run.get(&yp)?;
            let what = format!("{label} (first {prefix} rows)");
            if exact {
                run.bits(&what, &got[..prefix], &want[..prefix]);
            } else {
                run.bound(&what, &got[..prefix], &want[..prefix], &row_bound[..prefix]);
            }
            run.bits(
                &format!("{label} (rows past the prefix untouched)"),
                &got[prefix..],
                &vec![7.0; rows - prefix],
            );
            // Fused with x . y into out[1] of three slots, twice.
            let mut yd = run.gpu.zeros(rows).map_err(dev_err)?;
            let mut res = run.gpu.zeros(3).map_err(dev_err)?;
            run.gpu
                .spmv_dot(&a, &x, &mut yd, &mut res, 1)
                .map_err(dev_err)?;
            let first = run.get(&res)?;
            run.gpu
                .spmv_dot(&a, &x, &mut yd, &mut res, 1)
                .map_err(dev_err)?;
            let second = run.get(&res)?;
            let got = run.get(&yd)?;
            let dl = format!("{name}: spmv_dot {}", kernel.name());
            if exact {
                run.bits(&format!("{dl} (y)"), &got, &want);
            } else {
                run.bound(&format!("{dl} (y)"), &got, &want, &row_bound);
            }
            let dot_bound = dot_exact_bound + if exact { 0.0 } else { spread };
            run.bound(
                &format!("{dl} (x.y)"),
                &first[1..2],
                &want_dot,
                &[dot_bound],
            );
            run.bits(
                &format!("{dl} (slots around the result)"),
                &[first[0], first[2]],
                &[0.0, 0.0],
            );
            run.bits(&format!("{dl} (repeated: same bits)"), &second, &first);

            let t = run.time(reps, Bucket::Spmv, |g| g.spmv(&a, rows, &x, &mut y))?;
            run.check_timing(&label, &t);
            let td = run.time(reps, Bucket::Spmv, |g| {
                g.spmv_dot(&a, &x, &mut yd, &mut res, 1)
            })?;
            run.check_timing(&dl, &td);
            for (op, t) in [("spmv", &t), ("spmv_dot", &td)] {
                let gbs = bytes as f64 / t.device / 1e9;
                out.push(json!({"matrix": name, "rows": rows, "nnz": nnz,
                    "kernel": kernel.name(), "op": op, "default": kernel == chosen,
                    "seconds": t.device, "host_seconds": t.host, "bytes": bytes,
                    "gbs": gbs, "copy_gbs": copy_gbs, "fraction_of_copy": gbs / copy_gbs}));
            }
        }
        let copy = json!({"matrix": name, "bytes": 16 * values, "seconds": copy.device,
            "host_seconds": copy.host, "gbs": copy_gbs});
        Ok((out, copy))
    }

    /// The single-vector operations, elementwise and fused with sums, against the CPU.
    fn check_vector_ops(run: &mut Run, n: usize, seed: u64) -> Result<(), CliError> {
        // Vectors are 5 values longer than the operations' length: the tails must stay.
        let len = n + 5;
        let h: Vec<Vec<f64>> = (0..10).map(|j| random_vec(len, seed + 100 + j)).collect();
        let w: Vec<f64> = random_vec(len, seed + 99)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        let g = h.iter().map(|v| run.up(v)).collect::<Result<Vec<_>, _>>()?;
        let gw = run.up(&w)?;
        let (a, b) = (0.37, -1.25);

        run.both(
            "axpy",
            ["y"],
            [&h[1]],
            0,
            |c, [y], _| c.axpy(n, a, &h[0], y),
            |d, [y], _| d.axpy(n, a, &g[0], y),
        )?;
        run.both(
            "xpay",
            ["y"],
            [&h[1]],
            0,
            |c, [y], _| c.xpay(n, &h[0], b, y),
            |d, [y], _| d.xpay(n, &g[0], b, y),
        )?;
        run.both(
            "scale",
            ["y"],
            [&h[1]],
            0,
            |c, [y], _| c.scale(n, a, &h[0], y),
            |d, [y], _| d.scale(n, a, &g[0], y),
        )?;
        run.both(
            "mul",
            ["out"],
            [&h[2]],
            0,
            |c, [o], _| c.mul(n, &h[0], &h[1], o),
            |d, [o], _| d.mul(n, &g[0], &g[1], o),
        )?;
        run.both(
            "div",
            ["out"],
            [&h[2]],
            0,
            |c, [o], _| c.div(n, &h[0], &h[1], o),
            |d, [o], _| d.div(n, &g[0], &g[1], o),
        )?;
        let up = 2f64.powi(1021);
        run.both(
            "representable",
            ["x"],
            [&h[2]],
            0,
            |c, [x], _| c.representable(n, &h[1], up, x),
            |d, [x], _| d.representable(n, &g[1], up, x),
        )?;
        run.both(
            "cg_update",
            ["p", "x"],
            [&h[1], &h[2]],
            0,
            |c, [p, x], _| c.cg_update(n, a, b, &h[0], p, x),
            |d, [p, x], _| d.cg_update(n, a, b, &g[0], p, x),
        )?;
        let steps = BasisStep::each_kind(0.3, 0.7, 1.1);
        for step in steps {
            run.both(
                &format!("basis_step {step:?}"),
                ["out"],
                [&h[3]],
                0,
                |c, [o], _| c.basis_step(n, step, &h[0], &h[1], Some(&h[2]), o),
                |d, [o], _| d.basis_step(n, step, &g[0], &g[1], Some(&g[2]), o),
            )?;
        }
        run.both(
            "smooth_update",
            ["s", "y"],
            [&h[2], &h[3]],
            0,
            |c, [s, y], _| c.smooth_update(n, a, &h[0], &h[1], s, y),
            |d, [s, y], _| d.smooth_update(n, a, &g[0], &g[1], s, y),
        )?;
        run.both(
            "smooth_rescale",
            ["s", "y"],
            [&h[2], &h[3]],
            0,
            |c, [s, y], _| c.smooth_rescale(n, a, &h[0], s, y),
            |d, [s, y], _| d.smooth_rescale(n, a, &g[0], s, y),
        )?;

        // Fused with sums: the vectors to the bit, the sums within their bounds.
        let (v, want, got) = run.both(
            "axpy_norms",
            ["y"],
            [&h[1]],
            2,
            |c, [y], o| c.axpy_norms(n, -a, &h[0], y, &w, o, 1),
            |d, [y], o| d.axpy_norms(n, -a, &g[0], y, &gw, o, 1),
        )?;
        let bounds = [
            sum_bound(n, abs_dot(n, &v[0], &v[0])),
            sum_bound(n, abs_wdot(n, &v[0], &w, &v[0])),
        ];
        run.bound("axpy_norms (y.y, y.W y)", &got, &want, &bounds);
        let norms_yy = got[0];
        let (_, want, got) = run.both(
            "axpy_dot",
            ["y"],
            [&h[1]],
            1,
            |c, [y], o| c.axpy_dot(n, -a, &h[0], y, o, 1),
            |d, [y], o| d.axpy_dot(n, -a, &g[0], y, o, 1),
        )?;
        run.bound("axpy_dot (y.y)", &got, &want, &bounds[..1]);
        // CG switches between the two: its r.r must not depend on which ran.
        run.bits("axpy_dot y.y = axpy_norms y.y", &got, &[norms_yy]);
        let (v, want, got) = run.both(
            "residual_norms",
            ["y"],
            [&h[1]],
            2,
            |c, [y], o| c.residual_norms(n, &h[0], y, &w, o, 1),
            |d, [y], o| d.residual_norms(n, &g[0], y, &gw, o, 1),
        )?;
        let bounds = [
            sum_bound(n, abs_dot(n, &v[0], &v[0])),
            sum_bound(n, abs_wdot(n, &v[0], &w, &v[0])),
        ];
        run.bound("residual_norms (y.y, y.W y)", &got, &want, &bounds);
        let (_, want, got) = run.both(
            "wnorm",
            [],
            [],
            1,
            |c, [], o| c.wnorm(n, &h[0], &w, o, 1),
            |d, [], o| d.wnorm(n, &g[0], &gw, o, 1),
        )?;
        let bounds = [sum_bound(n, abs_wdot(n, &h[0], &w, &h[0]))];
        run.bound("wnorm", &got, &want, &bounds);
        let (v, want, got) = run.both(
            "pipecg_update",
            ["w", "r", "z", "s", "p", "x"],
            [&h[1], &h[2], &h[3], &h[4], &h[5], &h[6]],
            PIPECG_SUMS,
            |c, [wv, r, z, s, p, x], o| {
                let vecs = PipecgVecs {
                    w: wv,
                    r,
                    z,
                    s,
                    p,
                    x,
                };
                c.pipecg_update(n, a, b, &h[0], vecs, &w, o, 1)
            },
            |d, [wv, r, z, s, p, x], o| {
                let vecs = PipecgVecs {
                    w: wv,
                    r,
                    z,
                    s,
                    p,
                    x,
                };
                d.pipecg_update(n, a, b, &g[0], vecs, &gw, o, 1)
            },
        )?;
        let bounds = [
            sum_bound(n, abs_dot(n, &v[1], &v[1])),
            sum_bound(n, abs_wdot(n, &v[1], &w, &v[1])),
            sum_bound(n, abs_dot(n, &v[0], &v[1])),
            sum_bound(n, abs_dot(n, &v[5], &v[5])),
            sum_bound(n, abs_dot(n, &v[4], &v[4])),
            sum_bound(n, abs_dot(n, &v[3], &v[3])),
            sum_bound(n, abs_dot(n, &v[2], &v[2])),
            sum_bound(n, abs_dot(n, &v[0], &v[0])),
        ];
        run.bound(
            "pipecg_update (r.r, r.W r, w.r, x.x, p.p, s.s, z.z, w.w)",
            &got,
            &want,
            &bounds,
        );
        let (v, want, got) = run.both(
            "ccg_update",
            ["r", "p", "ap", "x"],
            [&h[1], &h[2], &h[3], &h[4]],
            2,
            |c, [r, p, ap, x], o| {
                let vecs = CcgVecs { r, p, ap, x };
                c.ccg_update(n, a, b, &h[0], vecs, Some(&w), o, 1)
            },
            |d, [r, p, ap, x], o| {
                let vecs = CcgVecs { r, p, ap, x };
                d.ccg_update(n, a, b, &g[0], vecs, Some(&gw), o, 1)
            },
        )?;
        let bounds = [
            sum_bound(n, abs_dot(n, &v[0], &v[0])),
            sum_bound(n, abs_wdot(n, &v[0], &w, &v[0])),
        ];
        run.bound("ccg_update (r.r, r.W r)", &got, &want, &bounds);
        let ccg_rr = got[0];
        let (_, want, got) = run.both(
            "ccg_update without weights",
            ["r", "p", "ap", "x"],
            [&h[1], &h[2], &h[3], &h[4]],
            1,
            |c, [r, p, ap, x], o| {
                let vecs = CcgVecs { r, p, ap, x };
                c.ccg_update(n, a, b, &h[0], vecs, None, o, 1)
            },
            |d, [r, p, ap, x], o| {
                let vecs = CcgVecs { r, p, ap, x };
                d.ccg_update(n, a, b, &g[0], vecs, None, o, 1)
            },
        )?;
        run.bound(
            "ccg_update without weights (r.r)",
            &got,
            &want,
            &bounds[..1],
        );
        // C-CG switches between the two: its r.r must not depend on which ran.
        run.bits(
            "ccg_update without weights r.r = ccg_update r.r",
            &got,
            &[ccg_rr],
        );

        // Copies at offsets, fill, host-device copies, halo gather and scatter.
        let m = n.min(7);
        run.both(
            "copy (offsets)",
            ["dst"],
            [&h[1]],
            0,
            |c, [y], _| c.copy(m, &h[0], 3, y, 5),
            |d, [y], _| d.copy(m, &g[0], 3, y, 5),
        )?;
        run.both(
            "fill (offset)",
            ["dst"],
            [&h[1]],
            0,
            |c, [y], _| c.fill(m, 2.5, y, 4),
            |d, [y], _| d.fill(m, 2.5, y, 4),
        )?;
        let part: Vec<f64> = h[2][..m].to_vec();
        run.both(
            "write (offset)",
            ["dst"],
            [&h[1]],
            0,
            |c, [y], _| c.write(&part, y, 5),
            |d, [y], _| d.write(&part, y, 5),
        )?;
        let mut got = vec![0.0; m];
        run.gpu.read(&g[3], 5, &mut got).map_err(dev_err)?;
        run.bits("read (offset)", &got, &h[3][5..5 + m]);
        // Distinct indices: a prefix of a random permutation of 0..n.
        let mut perm: Vec<u32> = (0..n as u32).collect();
        let mut rng = SplitMix64::new(seed ^ 0x1d);
        for i in (1..perm.len()).rev() {
            perm.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        perm.truncate(n.min(1000));
        let ci = run.cpu.upload_index(&perm).map_err(dev_err)?;
        let gi = run.gpu.upload_index(&perm).map_err(dev_err)?;
        let packed_init = vec![-3.0; perm.len() + 2];
        let (packed, _, _) = run.both(
            "gather",
            ["out"],
            [&packed_init],
            0,
            |c, [o], _| c.gather(&h[0], &ci, o),
            |d, [o], _| d.gather(&g[0], &gi, o),
        )?;
        let gp = run.up(&packed[0])?;
        run.both(
            "scatter",
            ["out"],
            [&h[1]],
            0,
            |c, [o], _| c.scatter(&packed[0], &ci, o),
            |d, [o], _| d.scatter(&gp, &gi, o),
        )?;
        Ok(())
    }

    /// The operations on lists of vectors (Gram blocks, linear combinations) against the
    /// CPU, and their repeatability.
    fn check_lists(run: &mut Run, n: usize, seed: u64) -> Result<(), CliError> {
        let len = n + 5;
        let h: Vec<Vec<f64>> = (0..12).map(|j| random_vec(len, seed + 300 + j)).collect();
        let w: Vec<f64> = random_vec(len, seed + 399)
            .iter()
            .map(|v| v.abs() + 0.5)
            .collect();
        let g = h.iter().map(|v| run.up(v)).collect::<Result<Vec<_>, _>>()?;
        let gw = run.up(&w)?;

        // Gram blocks: full 3 x 10 (three tiles of Y), weighted or not, a 1 x 1 dot, and
        // the upper triangle of a 9-vector concatenated list with itself.
        let hx: Vec<&Vec<f64>> = h[..3].iter().collect();
        let hy: Vec<&Vec<f64>> = h[2..].iter().collect();
        let gx: Vec<&CudaVector> = g[..3].iter().collect();
        let gy: Vec<&CudaVector> = g[2..].iter().collect();
        for weighted in [false, true] {
            let k = 30;
            let hwt = weighted.then_some(&w);
            let gwt = weighted.then_some(&gw);
            let (_, want, got) = run.both(
                &format!(
                    "gram full 3 x 10{}",
                    if weighted { " weighted" } else { "" }
                ),
                [],
                [],
                k,
                |c, [], o| c.gram(n, &Refs(&hx), &Refs(&hy), GramShape::Full, hwt, o, 1),
                |d, [], o| d.gram(n, &Refs(&gx), &Refs(&gy), GramShape::Full, gwt, o, 1),
            )?;
            let bounds: Vec<f64> = hx
                .iter()
                .flat_map(|x| hy.iter().map(move |y| (*x, *y)))
                .map(|(x, y)| {
                    let abs = if weighted {
                        abs_wdot(n, x, &w, y)
                    } else {
                        abs_dot(n, x, y)
                    };
                    sum_bound(n, abs)
                })
                .collect();
            run.bound(
                &format!(
                    "gram full 3 x 10{} (values)",
                    if weighted { " weighted" } else { "" }
                ),
                &got,
                &want,
                &bounds,
            );
        }
        let (_, want, got) = run.both(
            "gram 1 x 1 (dot)",
            [],
            [],
            1,
            |c, [], o| {
                c.gram(
                    n,
                    &Refs(&[&h[0]]),
                    &Refs(&[&h[1]]),
                    GramShape::Full,
                    None,
                    o,
                    1,
                )
            },
            |d, [], o| {
                d.gram(
                    n,
                    &Refs(&[&g[0]]),
                    &Refs(&[&g[1]]),
                    GramShape::Full,
                    None,
                    o,
                    1,
                )
            },
        )?;
        run.bound(
            "gram 1 x 1 (dot) (value)",
            &got,
            &want,
            &[sum_bound(n, abs_dot(n, &h[0], &h[1]))],
        );
        let (hl, hr): (Vec<&Vec<f64>>, Vec<&Vec<f64>>) =
            (h[..4].iter().collect(), h[4..9].iter().collect());
        let (gl, gr): (Vec<&CudaVector>, Vec<&CudaVector>) =
            (g[..4].iter().collect(), g[4..9].iter().collect());
        let all: Vec<&Vec<f64>> = h[..9].iter().collect();
        for weighted in [false, true] {
            let k = 45;
            let hwt = weighted.then_some(&w);
            let gwt = weighted.then_some(&gw);
            let label = format!(
                "gram upper 9 x 9{}",
                if weighted { " weighted" } else { "" }
            );
            let (_, want, got) = run.both(
                &label,
                [],
                [],
                k,
                |c, [], o| {
                    let (l, r) = (Refs(&hl), Refs(&hr));
                    let cat = Concat(&l, &r);
                    c.gram(n, &cat, &cat, GramShape::Upper, hwt, o, 1)
                },
                |d, [], o| {
                    let (l, r) = (Refs(&gl), Refs(&gr));
                    let cat = Concat(&l, &r);
                    d.gram(n, &cat, &cat, GramShape::Upper, gwt, o, 1)
                },
            )?;
            let mut bounds = Vec::with_capacity(k);
            for i in 0..9 {
                for j in i..9 {
                    let abs = if weighted {
                        abs_wdot(n, all[i], &w, all[j])
                    } else {
                        abs_dot(n, all[i], all[j])
                    };
                    bounds.push(sum_bound(n, abs));
                }
            }
            run.bound(&format!("{label} (values)"), &got, &want, &bounds);
        }
        // Repeated reductions give the same bits.
        let mut r1 = run.gpu.zeros(30).map_err(dev_err)?;
        let mut r2 = run.gpu.zeros(30).map_err(dev_err)?;
        for r in [&mut r1, &mut r2] {
            run.gpu
                .gram(n, &Refs(&gx), &Refs(&gy), GramShape::Full, Some(&gw), r, 0)
                .map_err(dev_err)?;
        }
        let (a1, a2) = (run.get(&r1)?, run.get(&r2)?);
        run.bits("gram full 3 x 10 weighted (repeated: same bits)", &a2, &a1);

        // Linear combinations: a zero coefficient skips its (poisoned) vector.
        let coef = [0.5, 0.0, -1.5, 2.0];
        let mut poisoned = h[8].clone();
        poisoned[n.min(17).saturating_sub(1)] = f64::NAN;
        let gpois = run.up(&poisoned)?;
        let hcols = [&h[0], &poisoned, &h[2], &h[3]];
        let gcols = [&g[0], &gpois, &g[2], &g[3]];
        run.both(
            "lincomb",
            ["y"],
            [&h[4]],
            0,
            |c, [y], _| c.lincomb(n, &coef, &Refs(&hcols), y),
            |d, [y], _| d.lincomb(n, &coef, &Refs(&gcols), y),
        )?;
        let (v, want, got) = run.both(
            "lincomb_norms",
            ["y"],
            [&h[4]],
            2,
            |c, [y], o| c.lincomb_norms(n, &coef, &Refs(&hcols), y, &w, o, 1),
            |d, [y], o| d.lincomb_norms(n, &coef, &Refs(&gcols), y, &gw, o, 1),
        )?;
        let bounds = [
            sum_bound(n, abs_dot(n, &v[0], &v[0])),
            sum_bound(n, abs_wdot(n, &v[0], &w, &v[0])),
        ];
        run.bound("lincomb_norms (y.y, y.W y)", &got, &want, &bounds);

        // Block linear combination: 5 sources (one with only zero coefficients, poisoned)
        // into 10 destinations (two groups of the kernel).
        let (ns, nd) = (5, 10);
        let mut rng = SplitMix64::new(seed ^ 0xb10c);
        let bc: Vec<f64> = (0..ns * nd)
            .map(|k| {
                let v = 2.0 * rng.next_f64() - 1.0;
                if k / nd == 2 || k % 3 == 0 {
                    0.0
                } else {
                    v
                }
            })
            .collect();
        let hs = [&h[0], &h[1], &poisoned, &h[2], &h[3]];
        let gs = [&g[0], &g[1], &gpois, &g[2], &g[3]];
        let init: [&[f64]; 10] = std::array::from_fn(|j| &h[4 + j % 8][..]);
        run.both(
            "lincomb_block 5 x 10",
            ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"],
            init,
            0,
            |c, d, _| {
                let mut r: Vec<&mut Vec<f64>> = d.iter_mut().collect();
                c.lincomb_block(n, &bc, &Refs(&hs), &mut RefsMut(&mut r))
            },
            |dev, d, _| {
                let mut r: Vec<&mut CudaVector> = d.iter_mut().collect();
                dev.lincomb_block(n, &bc, &Refs(&gs), &mut RefsMut(&mut r))
            },
        )?;
        Ok(())
    }

    /// Bad operands are errors, not panics; empty vectors work.
    fn check_errors(run: &mut Run) -> Result<(), CliError> {
        let x = run.gpu.zeros(4).map_err(dev_err)?;
        let mut y = run.gpu.zeros(5).map_err(dev_err)?;
        let r = run.gpu.axpy(5, 1.0, &x, &mut y);
        run.refused("axpy past a vector's end", r);
        let idx = run.gpu.upload_index(&[0, 9]).map_err(dev_err)?;
        let mut packed = run.gpu.zeros(2).map_err(dev_err)?;
        let r = run.gpu.gather(&x, &idx, &mut packed);
        run.refused("gather with an index out of range", r);
        let r = run.gpu.scatter(&packed, &idx, &mut y);
        run.refused("scatter with an index out of range", r);
        let a = HostCsr {
            indptr: vec![0, 1],
            cols: vec![0],
            vals: vec![1.0],
            ncols: 4,
        };
        let a = run.gpu.upload_csr(a).map_err(dev_err)?;
        let r = run.gpu.spmv(&a, 2, &x, &mut y);
        run.refused("spmv of more rows than the matrix has", r);
        let r = run.gpu.basis_step(
            4,
            BasisStep::Chebyshev {
                eta: 1.0,
                zeta: 0.0,
            },
            &x,
            &x,
            None,
            &mut y,
        );
        run.refused("Chebyshev step without the previous column", r);
        let mut out = run.gpu.zeros(16).map_err(dev_err)?;
        let r = run.gpu.gram(
            4,
            &Refs(&[&x]),
            &Refs(&[&x, &x]),
            GramShape::Upper,
            None,
            &mut out,
            0,
        );
        run.refused("upper Gram block of a non-square block", r);
        let r = run.gpu.gram(
            4,
            &Refs(&[&x]),
            &Refs(&[&x]),
            GramShape::Full,
            None,
            &mut out,
            16,
        );
        run.refused("Gram results past the results vector", r);
        let bad_csr = HostCsr {
            indptr: vec![0, 1],
            cols: vec![7],
            vals: vec![1.0],
            ncols: 4,
        };
        let r = run.gpu.upload_csr(bad_csr).map(drop);
        run.refused("CSR block with a column out of range", r);
        // Empty vectors: length 0, and every operation on 0 values is a no-op.
        let e = run.gpu.zeros(0).map_err(dev_err)?;
        let mut f = run.up(&[])?;
        let ok = CudaDevice::len(&e) == 0 && CudaDevice::len(&f) == 0;
        let r = run
            .gpu
            .axpy(0, 1.0, &e, &mut f)
            .and_then(|()| run.gpu.read(&e, 0, &mut []))
            .and_then(|()| run.gpu.write(&[], &mut f, 0));
        run.record(
            "empty vectors",
            ok && r.is_ok(),
            json!({"error": r.err().map(|e| e.to_string())}),
        );
        Ok(())
    }
}
