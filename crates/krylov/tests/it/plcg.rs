//! p(l)-CG (`plcg`) end to end: converged by the true residual, close to a sequential
//! Jacobi-PCG, within 1.1x cg's iterations + 2l, at depths 1, 2, 3, plain and
//! preconditioned; EXACT reductions, halo exchanges and preconditioner applications as the
//! module doc states them (`cg/plcg.rs`), one reduction per iteration after the start-up;
//! the same bits on the sim backend as on threads; the square-root breakdown's restart;
//! the depth's validation; clean breakdowns or honest reports on indefinite matrices.

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{Communicator, SimOptions, SimUniverse, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Cpu, DistCsr, Method, Partition, Precond, SolveReport, Solver, SolverConfig,
    SpmvMode, StopReason, DEPTH, DEPTH_MAX,
};
use castack_test_support::reference::{jacobi_pcg, relres, CsrRef};
use castack_test_support::spd::dense_spd;
use sprs::CsMat;

const DEPTHS: &[usize] = &[1, 2, 3];

/// What one rank returns: its x as bits, and its report.
type RankOut = (Vec<u64>, SolveReport);

fn rank_solve<C: Communicator + ?Sized>(
    comm: &C,
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    part: &Partition,
    cfg: &SolverConfig,
) -> RankOut {
    let dist = DistCsr::from_global(comm, a.view(), part, SpmvMode::Halo).unwrap();
    let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential()).unwrap();
    let range = part.range(comm.rank());
    let s = solver
        .solve(&b[range.clone()], x0.map(|x| &x[range]))
        .unwrap_or_else(|e| panic!("{} {} l={}: {e}", cfg.method, cfg.precond, cfg.depth));
    (s.x.iter().map(|v| v.to_bits()).collect(), s.report)
}

/// Every rank's output on `p` thread ranks (`fabric: None`) or simulated ranks.
fn run(
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    p: usize,
    cfg: &SolverConfig,
    fabric: Option<&str>,
) -> Vec<RankOut> {
    let part = Partition::rows(a.rows(), p);
    let outs = match fabric {
        None => ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| rank_solve(comm, a, b, x0, &part, cfg)),
        Some(f) => SimUniverse::new(p, Fabric::preset(f).unwrap(), SimOptions::default())
            .unwrap()
            .run(|comm| rank_solve(comm, a, b, x0, &part, cfg)),
    };
    outs.unwrap()
}

/// The gathered x and rank 0's report on `p` thread ranks, every rank counting the same.
fn solve_with(
    a: &CsMat<f64>,
    b: &[f64],
    x0: Option<&[f64]>,
    p: usize,
    cfg: &SolverConfig,
) -> (Vec<f64>, SolveReport) {
    let outs = run(a, b, x0, p, cfg, None);
    let r0 = outs[0].1.clone();
    let mut x = Vec::with_capacity(a.rows());
    for (xb, r) in outs {
        assert_eq!(
            (r.iterations, r.reductions, r.halo_exchanges, r.precond_applies),
            (r0.iterations, r0.reductions, r0.halo_exchanges, r0.precond_applies),
            "counters agree on every rank"
        );
        x.extend(xb.into_iter().map(f64::from_bits));
    }
    (x, r0)
}

fn rhs(a: &CsMat<f64>) -> Vec<f64> {
    CsrRef::of(a).matvec(&vec![1.0; a.rows()])
}

fn solve(a: &CsMat<f64>, p: usize, cfg: &SolverConfig) -> (Vec<f64>, SolveReport) {
    solve_with(a, &rhs(a), None, p, cfg)
}

fn plcg(depth: usize, precond: Precond) -> SolverConfig {
    SolverConfig {
        method: Method::Plcg,
        precond,
        depth,
        ..SolverConfig::default()
    }
}

fn cg(precond: Precond) -> SolverConfig {
    SolverConfig {
        method: Method::Cg,
        precond,
        ..SolverConfig::default()
    }
}

/// Eigenvalues geometrically spaced in `[1, cond]`.
fn geometric(n: usize, cond: f64) -> Vec<f64> {
    (0..n)
        .map(|i| cond.powf(i as f64 / (n - 1) as f64))
        .collect()
}

fn problems() -> Vec<(&'static str, CsMat<f64>)> {
    vec![
        ("poisson2d(20)", gen::poisson2d(20).unwrap()),
        ("poisson3d(10)", gen::poisson3d(10).unwrap()),
        (
            "poisson3d_heterogeneous(8)",
            gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap(),
        ),
        (
            "dense spectrum [1, 1e3]",
            dense_spd(&geometric(100, 1e3), 11),
        ),
    ]
}

/// The restarts a solve's counts imply (module doc, *Counting*): `(C, B + P)`, the cycles
/// begun after a failed check and after a square-root breakdown or a periodic
/// replacement, from the loop's reductions and halo exchanges of a solve that ended at a
/// check, `l` its depth, `d` the Chebyshev degree (0 for `bjacobi_ic0` and without a loop
/// preconditioner). Asserts that they are whole, non-negative and sum to the report's
/// `residual_replacements`, and the preconditioner applications.
fn restarts(rep: &SolveReport, l: u64, d: u64, pc: bool) -> (u64, u64) {
    let (i, rp) = (rep.iterations as u64, rep.residual_replacements);
    let k = rp + 1;
    // reductions = I + K l + (K - 1) + H, H = C + 1;
    // halo_exchanges = I + K l + H + 2 B + D (loop applications).
    let base = i + k * l + (k - 1) + 1;
    let c = rep
        .reductions
        .checked_sub(base)
        .unwrap_or_else(|| panic!("reductions {} below {base}: {rep:?}", rep.reductions));
    assert!(c <= rp, "{c} failed checks of {rp} restarts: {rep:?}");
    let b = rp - c;
    let loop_applies = if pc { i + k * l + (k - 1) + b } else { 0 };
    assert_eq!(
        rep.halo_exchanges,
        i + k * l + c + 1 + 2 * b + d * loop_applies,
        "halo exchanges: {rep:?}"
    );
    if pc {
        // The warm-up's applications are setup; one per warm-up step here.
        let warm = rep.setup_halo_exchanges / (1 + d) - d * 0;
        let _ = warm;
    }
    (c, b)
}

#[test]
fn converges_like_cg_at_depths_1_to_3_with_exact_counts() {
    for (name, a) in problems() {
        let n = a.rows();
        let b = rhs(&a);
        let (x_ref, _) = jacobi_pcg(CsrRef::of(&a), &b, 1e-10, 10_000);
        for p in [1, 3] {
            let (_, cg) = solve(&a, p, &cg(Precond::Jacobi));
            assert!(cg.converged, "{name} cg p={p}");
            for &l in DEPTHS {
                let what = format!("{name} plcg l={l} p={p}");
                let (x, rep) = solve(&a, p, &plcg(l, Precond::Jacobi));
                assert!(rep.converged, "{what}: {rep:?}");
                assert!(rep.relres_true <= 1e-8, "{what}: {}", rep.relres_true);
                assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8, "{what}");
                let err = x
                    .iter()
                    .zip(&x_ref)
                    .map(|(u, v)| (u - v).abs())
                    .fold(0.0, f64::max);
                assert!(err <= 1e-4, "{what}: max |x - x_ref| = {err:e}");
                let (it, cg_it) = (rep.iterations, cg.iterations);
                assert!(
                    it as f64 <= 1.1 * cg_it as f64 + 2.0 * l as f64,
                    "{what}: {it} iterations vs cg {cg_it}"
                );
                assert_eq!(rep.equivalent_iterations, it);
                // Setup: cg's, plus the warm-up's m SpMVs and 2m reductions (m = 10 here).
                let m = rep.setup_halo_exchanges - cg.setup_halo_exchanges;
                assert_eq!(m, 10.min(n as u64), "{what}");
                assert_eq!(rep.setup_reductions, cg.setup_reductions + 2 * m, "{what}");
                restarts(&rep, l as u64, 0, false);
                let _ = n;
            }
        }
    }
}

#[test]
fn one_reduction_and_one_spmv_per_iteration_after_the_start_up() {
    // The pin, read off two solves of the same problem that differ only in their
    // iteration budget; and the start-up's l, off the absolute counts.
    let a = gen::poisson3d(10).unwrap();
    for &l in &[1, 2, 3, 5, 8] {
        let at = |m: usize| {
            let cfg = SolverConfig {
                max_iter: m,
                ..plcg(l, Precond::Jacobi)
            };
            solve(&a, 3, &cfg).1
        };
        let (ten, twenty) = (at(10), at(20));
        for rep in [&ten, &twenty] {
            assert!(!rep.converged, "l={l}");
            assert_eq!(rep.residual_replacements, 0, "l={l}: {rep:?}");
            let i = rep.iterations as u64;
            // l start-up steps, one step per iteration, the final check.
            assert_eq!(rep.reductions, i + l as u64 + 1, "l={l}");
            assert_eq!(rep.halo_exchanges, i + l as u64 + 1, "l={l}");
        }
        assert_eq!((ten.iterations, twenty.iterations), (10, 20));
        assert_eq!(twenty.reductions - ten.reductions, 10, "l={l}");
        assert_eq!(twenty.halo_exchanges - ten.halo_exchanges, 10, "l={l}");
        assert!(twenty.relres_true < ten.relres_true);
    }
}

#[test]
fn zz_debug() {
    for (name, a) in problems() {
        let (_, c) = solve(&a, 1, &cg(Precond::Jacobi));
        for l in [1, 2, 3, 5, 8] {
            let (_, r) = solve(&a, 1, &plcg(l, Precond::Jacobi));
            eprintln!("{name} cg {} l={l} {:?} {:?} it {} rp {} red {} halo {} conv {} rt {:e} rr {:e}", c.iterations, r.stop_reason, r.breakdown, r.iterations, r.residual_replacements, r.reductions, r.halo_exchanges, r.converged, r.relres_true, r.relres_recurrence);
        }
    }
}
