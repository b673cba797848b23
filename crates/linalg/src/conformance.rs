//! The device conformance kit: every operation of a [`Device`] against the reference
//! [`Cpu`], on the same random inputs.
//!
//! [`check`] runs every operation of the trait on the device under test and on
//! `Cpu::sequential()` and records one [`Check`] per comparison:
//!
//! - the same bits for the elementwise operations (`axpy`, `xpay`, `scale`, `mul`, `div`,
//!   `representable`, the CG, C-CG and pipelined-CG updates, basis steps, smoothing, linear
//!   combinations, copies, fills, halo gather and scatter, host-device copies at offsets);
//! - within the rigorous rounding bound `64 m eps sum |terms|` of two differently ordered
//!   sums of `m` terms ([`sum_bound`]) for every reduction (the fused norms, Gram blocks
//!   full and upper, weighted or not, the fused SpMV dot product, the true residual's
//!   norms in `residual_bound`) and for SpMV rows, which a device may sum in any order;
//! - `residual_bound`'s bound on the residual's rounding error against its formula
//!   evaluated here, independently of any device;
//! - the untouched values: vector tails past `n`, the rows past an SpMV row prefix, the
//!   result slots around `out[at..]`; reductions that repeat give the same bits; bad
//!   lengths and indices are errors, not panics; empty vectors work.
//!
//! The matrices are a generated 3-D Poisson matrix (`n^3` rows) and a random irregular
//! matrix of as many rows ([`HostCsr::random_irregular`]); the vectors come from the
//! SplitMix64 streams of `seed`. With feature `cuda`, `cuda::check` adds what only the
//! CUDA device has: every SpMV kernel of its registry, checked as above (the kernels that
//! sum rows in CSR order to the bit) and timed with device events against a
//! device-to-device copy. `krylov gpu-check` prints its [`Report`] as JSON.
//!
//! A check that fails is a record in the report ([`Report::all_ok`] false), not an error;
//! the kit returns an error only when it cannot run: a grid size it cannot build, or a
//! device call that fails ([`LinalgError::Device`]).
//!
//! ```
//! use castack_linalg::conformance;
//! use castack_linalg::Cpu;
//!
//! // The CPU kernels on three threads against the sequential reference: deterministic
//! // reductions make them agree on every check.
//! let report = conformance::check(&mut Cpu::with_threads(3)?, 6, 42)?;
//! assert!(report.all_ok, "{:?}", report.failed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde::Serialize;

use crate::device::{Cpu, Device, DeviceError, HostCsr};
use crate::gen::{poisson3d, SplitMix64};
use crate::LinalgError;

/// `Kit::both` with ONE closure for both devices: `$body` is compiled once against the
/// reference `Cpu` and once against the device under test, so each check states its
/// operation once. The closure takes the device, the operands (`Operands`), the updated
/// vectors and the results vector.
macro_rules! both {
    ($kit:expr, $what:expr, $vecs:expr, $results:expr, $ops:expr,
     |$d:ident, $o:tt, $v:pat_param, $r:tt| $body:expr) => {
        $kit.both(
            $what,
            $vecs,
            $results,
            $ops,
            |$d, $o, $v, $r| $body,
            |$d, $o, $v, $r| $body,
        )
    };
}

#[cfg(feature = "cuda")]
pub mod cuda;
mod errors;
mod lists;
mod spmv;
mod vector;

/// Version of the report's JSON layout (what `scripts/gpu_suite.py` and the xtasks read).
pub const SCHEMA_VERSION: u32 = 2;

/// The outcome of a conformance run; serializes to the JSON object `krylov gpu-check`
/// prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The device checked: [`Device::name`], or the GPU's name.
    pub device: String,
    /// Grid points per direction of the Poisson matrix.
    pub n: usize,
    /// Rows of each matrix (`n^3`), and the length of the vector operations.
    pub rows: usize,
    /// Timed calls per measurement (0: nothing timed).
    pub reps: usize,
    /// Kernels the device compiled (CUDA: every kernel of its module; 0 where the device
    /// has no registry, as in [`check`]).
    pub kernels: usize,
    /// Whether every check passed.
    pub all_ok: bool,
    /// Checks recorded.
    pub checks_run: usize,
    /// The checks that failed, as they appear in `checks`.
    pub failed: Vec<Check>,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
    /// The device-to-device copies timed as the bandwidth reference (one per matrix).
    pub copy: Vec<CopyTiming>,
    /// The SpMV timings (per matrix, kernel and operation).
    pub spmv: Vec<SpmvTiming>,
}

/// One comparison of the device with the reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// What was checked, e.g. `axpy (y)` or `poisson3d: spmv csr_vector_t4`.
    pub check: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was measured.
    #[serde(flatten)]
    pub detail: Detail,
}

/// What a [`Check`] measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Detail {
    /// Values compared with the reference's.
    Compared(Comparison),
    /// The error an operation returned, if any (operations that must fail, and must not).
    Outcome {
        /// The error's message; `None` when the operation succeeded.
        error: Option<String>,
    },
    /// Device-event time against the host's wall time, per call.
    Timing {
        /// Device time per call, from events.
        device_seconds: f64,
        /// Host wall time per call (brackets the device time).
        host_seconds: f64,
        /// Device time charged to other buckets than the one timed (should be none).
        other_buckets_seconds: f64,
    },
}

/// How values were compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "compare")]
pub enum Comparison {
    /// Bit for bit.
    #[serde(rename = "bits")]
    Bits {
        /// Values compared.
        values: usize,
        /// Values whose bits differ.
        differing: usize,
        /// The first of them.
        first_differing: Option<usize>,
    },
    /// `|got - want| <= bound`, value for value.
    #[serde(rename = "rounding bound")]
    RoundingBound {
        /// Values compared.
        values: usize,
        /// The largest `|got - want| / bound` (infinite for NaN).
        worst_error_over_bound: f64,
    },
}

/// A timed device-to-device copy, the bandwidth reference of one matrix's SpMVs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CopyTiming {
    /// The matrix whose SpMV traffic the copy moves.
    pub matrix: String,
    /// Bytes read plus bytes written.
    pub bytes: usize,
    /// Device time per copy.
    pub seconds: f64,
    /// Host wall time per copy.
    pub host_seconds: f64,
    /// Effective bandwidth, `bytes / seconds / 1e9`.
    pub gbs: f64,
}

/// A timed SpMV (or fused SpMV and dot product) of one kernel on one matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpmvTiming {
    /// The matrix.
    pub matrix: String,
    /// Its rows.
    pub rows: usize,
    /// Its entries.
    pub nnz: usize,
    /// The kernel's name.
    pub kernel: String,
    /// `spmv` or `spmv_dot`.
    pub op: &'static str,
    /// Whether the device picks this kernel for this matrix by default.
    pub default: bool,
    /// Device time per call.
    pub seconds: f64,
    /// Host wall time per call.
    pub host_seconds: f64,
    /// The SpMV's minimum traffic: row offsets, entries, `x` once and `y` once.
    pub bytes: usize,
    /// Effective bandwidth, `bytes / seconds / 1e9`.
    pub gbs: f64,
    /// The reference copy's bandwidth.
    pub copy_gbs: f64,
    /// `gbs / copy_gbs`.
    pub fraction_of_copy: f64,
}

/// Checks every operation of `dev` against the reference [`Cpu`] on a Poisson matrix of
/// `n^3` rows, a random irregular matrix of as many rows and vectors of that length, from
/// the random streams of `seed` (see the module documentation). SpMV rows are held to
/// the rounding bound, since the trait lets a device sum a row in any order. Nothing is
/// timed: the report's `reps`, `kernels`, `copy` and `spmv` are empty.
///
/// # Errors
/// [`LinalgError::InvalidConfig`] for `n == 0` or a grid too large to build,
/// [`LinalgError::TooLarge`] past 32-bit columns, [`LinalgError::Device`] when an operation
/// that must succeed fails on either device.
pub fn check<D: Device>(dev: &mut D, n: usize, seed: u64) -> Result<Report, LinalgError> {
    let matrices = matrices(n, seed)?;
    let rows = matrices[0].1.rows();
    let kernel = dev.name();
    let mut kit = Kit::new(dev);
    for (name, m) in &matrices {
        let case = spmv::SpmvCase::new(&mut kit.cpu, name, m, seed)?;
        let a = kit.dev.upload_csr(m.clone())?;
        let x = kit.up(&case.x)?;
        spmv::check_matrix(&mut kit, &case, kernel, &a, &x, false)?;
    }
    operations(&mut kit, rows, seed)?;
    Ok(kit.report(kernel.to_string(), n, rows))
}

/// The rigorous bound on the difference of two sums of `m` terms, in any orders, whose
/// absolute values add up to `abs`: each is within `(m - 1) eps/2 abs` of the exact sum to
/// first order; `64 m eps abs` leaves room for the second-order terms.
pub fn sum_bound(m: usize, abs: f64) -> f64 {
    64.0 * m.max(1) as f64 * f64::EPSILON * abs + f64::MIN_POSITIVE
}

/// The two matrices every SpMV check runs on: the 3-D Poisson matrix of `n^3` rows and a
/// random irregular one of as many rows (rows of up to 64 entries).
fn matrices(n: usize, seed: u64) -> Result<[(&'static str, HostCsr); 2], LinalgError> {
    let bad = |e: crate::gen::GenError| LinalgError::InvalidConfig(format!("conformance: {e}"));
    let poisson = poisson3d(n).map_err(bad)?;
    let poisson =
        HostCsr::from_csmat(&poisson).ok_or(LinalgError::TooLarge { n: poisson.cols() })?;
    let rows = poisson.rows();
    let irregular = HostCsr::random_irregular(rows, rows, 64, seed);
    Ok([("poisson3d", poisson), ("random_irregular", irregular)])
}

/// The operations besides SpMV, on vectors of `n` values: single vectors, lists of
/// vectors, and the operands that must be refused.
fn operations<D: Device>(kit: &mut Kit<'_, D>, n: usize, seed: u64) -> Result<(), LinalgError> {
    vector::check(kit, n, seed)?;
    lists::check(kit, n, seed)?;
    errors::check(kit)
}

/// `n` values uniform in `[-1, 1)` from the SplitMix64 stream `seed`.
fn random_vec(n: usize, seed: u64) -> Vec<f64> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| 2.0 * r.next_f64() - 1.0).collect()
}

/// `sum |a_k b_k|` over the first `n` values.
fn abs_dot(n: usize, a: &[f64], b: &[f64]) -> f64 {
    a[..n].iter().zip(&b[..n]).map(|(x, y)| (x * y).abs()).sum()
}

/// `sum |a_k w_k b_k|` over the first `n` values.
fn abs_wdot(n: usize, a: &[f64], w: &[f64], b: &[f64]) -> f64 {
    (0..n).map(|k| (a[k] * w[k] * b[k]).abs()).sum()
}

/// Operands of a family of checks, on one device: vectors and positive weights.
struct Operands<V> {
    /// The vectors, read by the operations and copied as the starting values of the
    /// vectors they update.
    v: Vec<V>,
    /// Positive weights (the `w` of the weighted norms and Gram blocks).
    w: V,
}

impl Operands<Vec<f64>> {
    /// `count` random vectors of `len` values (streams `seed..seed + count`) and weights
    /// `|u| + floor` (stream `weight_seed`).
    fn random(count: u64, len: usize, seed: u64, weight_seed: u64, floor: f64) -> Self {
        Self {
            v: (0..count).map(|j| random_vec(len, seed + j)).collect(),
            w: random_vec(len, weight_seed)
                .iter()
                .map(|u| u.abs() + floor)
                .collect(),
        }
    }
}

/// The same operands on the reference (`cpu`, which are also the host values) and on the
/// device under test.
struct Both<D: Device> {
    cpu: Operands<Vec<f64>>,
    dev: Operands<D::Vector>,
}

/// What [`Kit::both`] returns: the reference's updated vectors and results, and the
/// device's results.
struct Ran<const K: usize> {
    vecs: [Vec<f64>; K],
    want: Vec<f64>,
    got: Vec<f64>,
}

/// The device under test, the reference, and the checks so far.
struct Kit<'d, D: Device> {
    dev: &'d mut D,
    cpu: Cpu,
    checks: Vec<Check>,
}

impl<'d, D: Device> Kit<'d, D> {
    fn new(dev: &'d mut D) -> Self {
        Self {
            dev,
            cpu: Cpu::sequential(),
            checks: Vec::new(),
        }
    }

    /// The report of the checks recorded, with nothing timed.
    fn report(self, device: String, n: usize, rows: usize) -> Report {
        let failed: Vec<Check> = self.checks.iter().filter(|c| !c.ok).cloned().collect();
        Report {
            schema_version: SCHEMA_VERSION,
            device,
            n,
            rows,
            reps: 0,
            kernels: 0,
            all_ok: failed.is_empty(),
            checks_run: self.checks.len(),
            failed,
            checks: self.checks,
            copy: Vec::new(),
            spmv: Vec::new(),
        }
    }

    fn up(&mut self, h: &[f64]) -> Result<D::Vector, LinalgError> {
        Ok(self.dev.upload(h)?)
    }

    fn get(&mut self, v: &D::Vector) -> Result<Vec<f64>, LinalgError> {
        let mut h = vec![0.0; D::len(v)];
        self.dev.read(v, 0, &mut h)?;
        Ok(h)
    }

    /// `host` on the device too.
    fn upload(&mut self, host: Operands<Vec<f64>>) -> Result<Both<D>, LinalgError> {
        let v = host
            .v
            .iter()
            .map(|h| self.up(h))
            .collect::<Result<_, _>>()?;
        let w = self.up(&host.w)?;
        Ok(Both {
            cpu: host,
            dev: Operands { v, w },
        })
    }

    fn record(&mut self, check: &str, ok: bool, detail: Detail) {
        self.checks.push(Check {
            check: check.to_string(),
            ok,
            detail,
        });
    }

    /// The same bits, value for value.
    fn bits(&mut self, check: &str, got: &[f64], want: &[f64]) {
        let same = |(a, b): (&f64, &f64)| a.to_bits() == b.to_bits();
        let first_differing = got.iter().zip(want).position(|p| !same(p));
        let differing = got.iter().zip(want).filter(|&p| !same(p)).count();
        let ok = differing == 0 && got.len() == want.len();
        let values = want.len();
        let detail = Comparison::Bits {
            values,
            differing,
            first_differing,
        };
        self.record(check, ok, Detail::Compared(detail));
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
        let detail = Comparison::RoundingBound {
            values: want.len(),
            worst_error_over_bound: worst,
        };
        self.record(check, ok, Detail::Compared(detail));
    }

    /// An operation that must fail with a device error, not succeed or panic.
    fn refused(&mut self, check: &str, r: Result<(), DeviceError>) {
        let error = r.as_ref().err().map(ToString::to_string);
        self.record(check, r.is_err(), Detail::Outcome { error });
    }

    /// Runs one operation on both devices from the same `K` starting vectors (`vecs`:
    /// their names and values) and the same results vector (`results + 2` zeros; the
    /// operation writes `out[1..1 + results]`), with the operands `ops`: checks every
    /// updated vector for the reference's bits (tails included) and the result slots
    /// around `out[1..]` for zeros. Prefer `both!`, which writes the operation once.
    #[allow(clippy::type_complexity)]
    fn both<const K: usize>(
        &mut self,
        what: &str,
        (names, init): ([&str; K], [&[f64]; K]),
        results: usize,
        ops: &Both<D>,
        cpu: impl FnOnce(
            &mut Cpu,
            &Operands<Vec<f64>>,
            &mut [Vec<f64>; K],
            &mut Vec<f64>,
        ) -> Result<(), DeviceError>,
        dev: impl FnOnce(
            &mut D,
            &Operands<D::Vector>,
            &mut [D::Vector; K],
            &mut D::Vector,
        ) -> Result<(), DeviceError>,
    ) -> Result<Ran<K>, LinalgError> {
        let mut hv: [Vec<f64>; K] = init.map(<[f64]>::to_vec);
        let mut hout = vec![0.0; results + 2];
        cpu(&mut self.cpu, &ops.cpu, &mut hv, &mut hout)?;
        let uploaded = init
            .iter()
            .map(|h| self.up(h))
            .collect::<Result<Vec<_>, _>>()?;
        let mut dv: [D::Vector; K] = uploaded
            .try_into()
            .map_err(|_| LinalgError::InvalidConfig(format!("conformance: {what}: {K} vectors")))?;
        let mut dout = self.dev.zeros(results + 2)?;
        dev(self.dev, &ops.dev, &mut dv, &mut dout)?;
        for (k, name) in names.iter().enumerate() {
            let got = self.get(&dv[k])?;
            self.bits(&format!("{what} ({name})"), &got, &hv[k]);
        }
        let got_out = self.get(&dout)?;
        if results > 0 {
            let edges = [got_out[0], got_out[results + 1]];
            self.bits(
                &format!("{what} (slots around the results)"),
                &edges,
                &[0.0; 2],
            );
        }
        Ok(Ran {
            vecs: hv,
            want: hout[1..=results].to_vec(),
            got: got_out[1..=results].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_differing_bit_fails_its_check_and_names_the_value() {
        let mut cpu = Cpu::sequential();
        let mut kit = Kit::new(&mut cpu);
        kit.bits("same", &[1.0, -0.0], &[1.0, -0.0]);
        kit.bits("sign of zero", &[1.0, 0.0], &[1.0, -0.0]);
        let report = kit.report("cpu".into(), 1, 1);
        assert!(!report.all_ok);
        assert_eq!(report.checks_run, 2);
        assert_eq!(report.failed.len(), 1);
        let want = Detail::Compared(Comparison::Bits {
            values: 2,
            differing: 1,
            first_differing: Some(1),
        });
        assert_eq!(report.failed[0].detail, want);
    }

    #[test]
    fn a_bound_fails_past_it_and_on_nan() {
        let mut cpu = Cpu::sequential();
        let mut kit = Kit::new(&mut cpu);
        kit.bound("within", &[1.0 + 1e-15], &[1.0], &[sum_bound(2, 1.0)]);
        kit.bound("past", &[1.0 + 1e-10], &[1.0], &[sum_bound(2, 1.0)]);
        kit.bound("nan", &[f64::NAN], &[1.0], &[1.0]);
        let ok: Vec<bool> = kit.checks.iter().map(|c| c.ok).collect();
        assert_eq!(ok, [true, false, false]);
    }

    #[test]
    fn an_operation_that_succeeds_fails_a_refusal_check() {
        let mut cpu = Cpu::sequential();
        let mut kit = Kit::new(&mut cpu);
        kit.refused("no error", Ok(()));
        kit.refused("an error", Err(DeviceError::InvalidCsr("x".into())));
        let report = kit.report("cpu".into(), 1, 1);
        assert_eq!(report.failed.len(), 1);
        assert_eq!(report.failed[0].detail, Detail::Outcome { error: None });
    }

    #[test]
    fn the_report_serializes_to_the_gpu_check_layout() {
        let mut cpu = Cpu::sequential();
        let mut kit = Kit::new(&mut cpu);
        kit.bits("b", &[1.0], &[1.0]);
        kit.bound("r", &[1.0], &[1.0], &[1.0]);
        kit.refused("e", Err(DeviceError::InvalidCsr("x".into())));
        let detail = Detail::Timing {
            device_seconds: 1.0,
            host_seconds: 2.0,
            other_buckets_seconds: 0.0,
        };
        kit.record("t", true, detail);
        let v = serde_json::to_value(kit.report("cpu".into(), 2, 8)).unwrap();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            v.as_object().unwrap().keys().cloned().collect()
        };
        let top = "all_ok checks checks_run copy device failed kernels n reps rows \
                   schema_version spmv";
        assert_eq!(keys(&v), top.split_whitespace().collect::<Vec<_>>());
        assert_eq!(v["schema_version"], 2);
        let checks = &v["checks"];
        let want = [
            "check compare differing first_differing ok values",
            "check compare ok values worst_error_over_bound",
            "check error ok",
            "check device_seconds host_seconds ok other_buckets_seconds",
        ];
        for (c, want) in checks.as_array().unwrap().iter().zip(want) {
            assert_eq!(keys(c), want.split_whitespace().collect::<Vec<_>>());
        }
        assert_eq!(checks[0]["compare"], "bits");
        assert_eq!(checks[0]["first_differing"], serde_json::Value::Null);
        assert_eq!(checks[1]["compare"], "rounding bound");
        assert_eq!(checks[2]["error"], "invalid CSR block: x");
    }
}
