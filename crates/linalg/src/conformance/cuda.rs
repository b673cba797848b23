//! The CUDA device's own part of the kit (feature `cuda`): every SpMV kernel of the
//! registry ([`SpmvKernel::ALL`]) checked as [`super::check`] checks the default one (the
//! kernels that sum rows in CSR order to the bit), then timed with device events against a
//! device-to-device copy of the SpMV's minimum traffic, in the same run.

use std::time::Instant;

use super::spmv::{check_matrix, SpmvCase};
use super::{operations, random_vec, CopyTiming, Detail, Kit, Report, SpmvTiming};
use crate::count::{Bucket, TimeBreakdown};
use crate::device::cuda::{CudaDevice, SpmvKernel, KERNEL_NAMES};
use crate::device::{Device, DeviceError, HostCsr};
use crate::LinalgError;

/// [`super::check`] for the CUDA device with every SpMV kernel of the registry, each
/// timed over `reps` calls (after one untimed call) against a device-to-device copy: the
/// report `krylov gpu-check` prints.
///
/// # Errors
/// As [`super::check`]; [`LinalgError::InvalidConfig`] for `reps == 0`.
pub fn check(
    dev: &mut CudaDevice,
    n: usize,
    seed: u64,
    reps: usize,
) -> Result<Report, LinalgError> {
    if reps == 0 {
        return Err(LinalgError::InvalidConfig(
            "conformance: reps must be at least 1".into(),
        ));
    }
    let matrices = super::matrices(n, seed)?;
    let rows = matrices[0].1.rows();
    let device = dev.gpu_name().to_string();
    let mut kit = Kit::new(dev);
    let (mut copy, mut spmv) = (Vec::new(), Vec::new());
    for (name, m) in &matrices {
        let case = SpmvCase::new(&mut kit.cpu, name, m, seed)?;
        let (reference, gbs) = time_copy(&mut kit, &case, seed, reps)?;
        copy.push(reference);
        let x = kit.up(&case.x)?;
        for kernel in SpmvKernel::ALL {
            let a = kit.dev.upload_csr_with(m.as_csr_ref(), kernel)?;
            let exact = kernel.bit_identical_to_cpu();
            check_matrix(&mut kit, &case, &kernel.name(), &a, &x, exact)?;
            spmv.extend(time_kernel(&mut kit, &case, kernel, &a, &x, reps, gbs)?);
        }
    }
    operations(&mut kit, rows, seed)?;
    Ok(Report {
        reps,
        kernels: KERNEL_NAMES.len(),
        copy,
        spmv,
        ..kit.report(device, n, rows)
    })
}

/// Minimum bytes one SpMV moves: the row offsets, the entries (value and column), `x`
/// once and `y` once.
fn spmv_bytes(m: &HostCsr) -> usize {
    8 * (m.rows() + 1) + 12 * m.vals.len() + 8 * m.ncols + 8 * m.rows()
}

/// Device time per call from events and host wall time per call.
struct Timing {
    device: f64,
    host: f64,
    /// Device time charged to other buckets (should be none).
    stray: f64,
}

/// The bandwidth reference of `case`'s SpMVs: a device-to-device copy reading and writing
/// the SpMV's minimum bytes, timed and checked for the bits; its timing and GB/s.
fn time_copy(
    kit: &mut Kit<'_, CudaDevice>,
    case: &SpmvCase<'_>,
    seed: u64,
    reps: usize,
) -> Result<(CopyTiming, f64), LinalgError> {
    let name = case.name;
    let values = (spmv_bytes(case.m) / 16).max(1);
    let src = kit.up(&random_vec(values, seed ^ 0xc0b7))?;
    let mut dst = kit.dev.zeros(values)?;
    let t = time(kit, reps, Bucket::Transfer, |g| g.copy_dtod(&src, &mut dst))?;
    check_timing(kit, &format!("{name}: device copy"), &t);
    let (got, want) = (kit.get(&dst)?, kit.get(&src)?);
    kit.bits(&format!("{name}: device copy"), &got, &want);
    let bytes = 16 * values;
    let gbs = bytes as f64 / t.device / 1e9;
    let copy = CopyTiming {
        matrix: name.to_string(),
        bytes,
        seconds: t.device,
        host_seconds: t.host,
        gbs,
    };
    Ok((copy, gbs))
}

/// `spmv` and `spmv_dot` of `kernel`'s upload `a`, timed (each checked for sane event
/// timing) against the reference copy's `copy_gbs`.
fn time_kernel(
    kit: &mut Kit<'_, CudaDevice>,
    case: &SpmvCase<'_>,
    kernel: SpmvKernel,
    a: &<CudaDevice as Device>::Matrix,
    x: &<CudaDevice as Device>::Vector,
    reps: usize,
    copy_gbs: f64,
) -> Result<[SpmvTiming; 2], LinalgError> {
    let (name, m) = (case.name, case.m);
    let (rows, nnz) = (m.rows(), m.vals.len());
    let mut y = kit.dev.zeros(rows)?;
    let mut res = kit.dev.zeros(3)?;
    let t = time(kit, reps, Bucket::Spmv, |g| g.spmv(a, rows, x, &mut y))?;
    check_timing(kit, &format!("{name}: spmv {}", kernel.name()), &t);
    let td = time(kit, reps, Bucket::Spmv, |g| {
        g.spmv_dot(a, x, &mut y, &mut res, 1)
    })?;
    check_timing(kit, &format!("{name}: spmv_dot {}", kernel.name()), &td);
    let bytes = spmv_bytes(m);
    let entry = |op, t: &Timing| {
        let gbs = bytes as f64 / t.device / 1e9;
        SpmvTiming {
            matrix: name.to_string(),
            rows,
            nnz,
            kernel: kernel.name(),
            op,
            default: kernel == SpmvKernel::auto(rows, nnz),
            seconds: t.device,
            host_seconds: t.host,
            bytes,
            gbs,
            copy_gbs,
            fraction_of_copy: gbs / copy_gbs,
        }
    };
    Ok([entry("spmv", &t), entry("spmv_dot", &td)])
}

/// Times `reps` calls of `op`, each bracketed by device events charged to `bucket`, after
/// one untimed call.
fn time(
    kit: &mut Kit<'_, CudaDevice>,
    reps: usize,
    bucket: Bucket,
    mut op: impl FnMut(&mut CudaDevice) -> Result<(), DeviceError>,
) -> Result<Timing, LinalgError> {
    let g = &mut *kit.dev;
    op(g)?;
    g.synchronize()?;
    g.take_event_times()?;
    let t = Instant::now();
    for _ in 0..reps {
        g.event_begin(bucket)?;
        op(g)?;
        g.event_end()?;
    }
    g.synchronize()?;
    let host = t.elapsed().as_secs_f64();
    let ev = g.take_event_times()?;
    let device = in_bucket(&ev, bucket);
    Ok(Timing {
        device: device / reps as f64,
        host: host / reps as f64,
        stray: ev.accounted() - device,
    })
}

/// Event timing is positive, charged to its bucket only, and within the host's wall time
/// (which brackets it) up to clock slack.
fn check_timing(kit: &mut Kit<'_, CudaDevice>, what: &str, t: &Timing) {
    let ok = t.device > 0.0 && t.stray == 0.0 && t.device <= 1.05 * t.host + 1e-5;
    let detail = Detail::Timing {
        device_seconds: t.device,
        host_seconds: t.host,
        other_buckets_seconds: t.stray,
    };
    kit.record(&format!("event timing: {what}"), ok, detail);
}

/// The time of `t` charged to `b`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cuda::driver_present;

    /// Where a driver answers (a GPU, or the emulator of `cargo xtask test-gpu-emu`), the
    /// CUDA device passes every check, with every kernel timed against the copy; without
    /// one there is nothing to run (`no_driver_is_an_error_not_a_panic` covers that case).
    #[test]
    fn cuda_device_passes_the_kit_with_every_kernel_timed() {
        let mut dev = match CudaDevice::new(0) {
            Ok(dev) => dev,
            Err(DeviceError::NoDriver | DeviceError::NoDevice { .. }) if !driver_present() => {
                return
            }
            Err(e) => panic!("a driver answers but the device does not open: {e}"),
        };
        let err = check(&mut dev, 4, 1, 0).unwrap_err();
        assert!(matches!(err, LinalgError::InvalidConfig(_)), "{err}");
        let report = check(&mut dev, 9, 42, 2).unwrap();
        assert!(report.all_ok, "{:#?}", report.failed);
        assert_eq!((report.reps, report.kernels), (2, KERNEL_NAMES.len()));
        assert_eq!(report.copy.len(), 2);
        assert_eq!(report.spmv.len(), 2 * 2 * SpmvKernel::ALL.len());
        let defaults = report.spmv.iter().filter(|t| t.default).count();
        assert_eq!(
            defaults,
            2 * 2,
            "one default kernel per matrix and operation"
        );
    }
}
