//! The conformance kit without a GPU: the CPU kernels on other thread counts, and the CPU
//! modeling a GPU, against the sequential reference. Every check passes because the CPU's
//! reductions sum in an order fixed by the length alone (the same bits for any thread
//! count); the kit names every operation of the `Device` trait; bad sizes are errors.

use castack_linalg::conformance::{self, Report};
use castack_linalg::{Cpu, LinalgError, CPU_CHUNK};

/// Every operation of the `Device` trait that computes or moves values, as the kit's
/// labels name them.
const OPERATIONS: [&str; 29] = [
    "spmv",
    "spmv_dot",
    "residual_bound",
    "axpy",
    "xpay",
    "scale",
    "mul",
    "div",
    "representable",
    "cg_update",
    "ccg_update",
    "pipecg_update",
    "axpy_dot",
    "axpy_norms",
    "residual_norms",
    "wnorm",
    "gram",
    "lincomb",
    "lincomb_norms",
    "lincomb_block",
    "basis_step",
    "smooth_update",
    "smooth_rescale",
    "copy",
    "fill",
    "write",
    "read",
    "gather",
    "scatter",
];

fn assert_all_passed(report: &Report) {
    let failed: Vec<String> = report.failed.iter().map(|c| format!("{c:?}")).collect();
    assert!(report.all_ok, "failed checks:\n{}", failed.join("\n"));
    assert!(failed.is_empty());
    assert_eq!(report.checks_run, report.checks.len());
    assert!(report.checks.iter().all(|c| c.ok));
}

#[test]
fn cpu_kernels_on_threads_agree_with_the_sequential_reference() {
    // 26^3 = 17,576 rows: past two reduction chunks, so the pool splits every kernel.
    let n = 26;
    assert!(n * n * n >= 2 * CPU_CHUNK);
    for threads in [2, 3] {
        let mut cpu = Cpu::with_threads(threads).unwrap();
        let report = conformance::check(&mut cpu, n, 7).unwrap();
        assert_all_passed(&report);
        assert_eq!(
            (report.device.as_str(), report.n, report.rows),
            ("cpu", n, n * n * n)
        );
    }
}

#[test]
fn cpu_modeling_a_gpu_agrees_with_the_reference_at_small_sizes() {
    for n in [1, 2, 5] {
        let mut dev = Cpu::sequential().modeling_gpu();
        let report = conformance::check(&mut dev, n, 42).unwrap();
        assert_all_passed(&report);
        assert_eq!(report.device, "cuda");
        // Nothing timed without a registry.
        assert_eq!((report.reps, report.kernels), (0, 0));
        assert!(report.copy.is_empty() && report.spmv.is_empty());
    }
}

#[test]
fn the_kit_checks_every_operation_and_refuses_bad_operands() {
    let report = conformance::check(&mut Cpu::sequential(), 4, 1).unwrap();
    assert_all_passed(&report);
    for op in OPERATIONS {
        let named = |c: &&conformance::Check| {
            c.check
                .split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                .any(|w| w == op)
        };
        assert!(report.checks.iter().any(|c| named(&c)), "no check of {op}");
    }
    let refusals = report
        .checks
        .iter()
        .filter(|c| matches!(c.detail, conformance::Detail::Outcome { .. }))
        .count();
    // Nine refused operands and the empty vectors.
    assert_eq!(refusals, 10);
}

#[test]
fn the_kit_is_deterministic() {
    let run = || conformance::check(&mut Cpu::with_threads(2).unwrap(), 3, 9).unwrap();
    assert_eq!(run(), run());
}

#[test]
fn a_zero_grid_is_an_error_not_a_panic() {
    let err = conformance::check(&mut Cpu::sequential(), 0, 1).unwrap_err();
    assert!(matches!(err, LinalgError::InvalidConfig(_)), "{err}");
    assert!(err.to_string().contains("at least 1"), "{err}");
}
