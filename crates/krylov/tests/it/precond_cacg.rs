//! CA-CG with a preconditioner applied in its loop (`cacg` with `bjacobi_ic0` and
//! `chebyshev`): convergence on the true residual against an independent reference
//! solution, CG-equivalent iterations against preconditioned CG's and Jacobi's,
//! bit-identical iterates on the threads and sim backends, and the documented counts of
//! reductions, halo exchanges and applications of `M^-1`.

use std::path::PathBuf;

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{Communicator, SimOptions, SimUniverse, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Basis, Cpu, DistCsr, KrylovError, Method, Partition, Precond, SolveReport, Solver,
    SolverConfig, SpmvMode,
};
use castack_test_support::reference::{jacobi_pcg, relres, CsrRef};
use sprs::CsMat;

/// What one rank returns: its x and history as bits, and its report.
type RankOut = (Vec<u64>, Vec<u64>, SolveReport);

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn rank_solve<C: Communicator + ?Sized>(
    comm: &C,
    a: &CsMat<f64>,
    b: &[f64],
    part: &Partition,
    cfg: &SolverConfig,
) -> Result<(Vec<f64>, SolveReport), KrylovError> {
    let dist = DistCsr::from_global(comm, a.view(), part, SpmvMode::Halo)?;
    let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
    let s = solver.solve(&b[part.range(comm.rank())], None)?;
    Ok((s.x, s.report))
}

fn rank_out<C: Communicator + ?Sized>(
    comm: &C,
    a: &CsMat<f64>,
    b: &[f64],
    part: &Partition,
    cfg: &SolverConfig,
) -> RankOut {
    let (x, rep) = rank_solve(comm, a, b, part, cfg).unwrap();
    let h = bits(rep.history.as_deref().unwrap_or(&[]));
    (bits(&x), h, rep)
}

/// Every rank's (x, history, report) on `p` thread ranks (`sim: false`) or simulated ranks.
fn run(a: &CsMat<f64>, b: &[f64], p: usize, cfg: &SolverConfig, sim: bool) -> Vec<RankOut> {
    let part = Partition::rows(a.rows(), p);
    if sim {
        SimUniverse::new(p, Fabric::preset("peach2").unwrap(), SimOptions::default())
            .unwrap()
            .run(|comm| rank_out(comm, a, b, &part, cfg))
            .unwrap()
    } else {
        ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| rank_out(comm, a, b, &part, cfg))
            .unwrap()
    }
}

/// Solve on `p` thread ranks: the gathered x and rank 0's report (every rank's counters
/// must agree).
fn solve(a: &CsMat<f64>, b: &[f64], p: usize, cfg: &SolverConfig) -> (Vec<f64>, SolveReport) {
    let part = Partition::rows(a.rows(), p);
    let out = ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| rank_solve(comm, a, b, &part, cfg))
        .unwrap();
    let mut x = Vec::with_capacity(a.rows());
    let mut report: Option<SolveReport> = None;
    for s in out {
        let (xs, rep) = s.unwrap_or_else(|e| panic!("{} {cfg:?}: {e}", cfg.method));
        x.extend_from_slice(&xs);
        if let Some(r) = &report {
            assert_eq!(
                (
                    r.iterations,
                    r.reductions,
                    r.halo_exchanges,
                    r.precond_applies
                ),
                (
                    rep.iterations,
                    rep.reductions,
                    rep.halo_exchanges,
                    rep.precond_applies
                ),
                "ranks disagree"
            );
        }
        report.get_or_insert(rep);
    }
    (x, report.expect("at least one rank"))
}

fn rhs_ones(a: &CsMat<f64>) -> Vec<f64> {
    CsrRef::of(a).matvec(&vec![1.0; a.rows()])
}

fn cfg(method: Method, precond: Precond, basis: Basis, k: usize, tol: f64) -> SolverConfig {
    SolverConfig {
        method,
        precond,
        basis,
        k,
        tol,
        max_iter: 20_000,
        ..SolverConfig::default()
    }
}

/// The folder of shared matrices: beside the workspace, or `CASTACK_SHARED_MATRICES`.
fn matrix_dir() -> Option<PathBuf> {
    castack_test_support::matrices::shared_dir().or_else(|| {
        std::env::var_os("CASTACK_SHARED_MATRICES")
            .map(PathBuf::from)
            .filter(|d| d.join("README.md").is_file())
    })
}

/// Heterogeneous SPD test matrices with their tolerance: a generated variable-coefficient
/// diffusion problem (contrast 1e4) always, and bcsstk15, 1138_bus and nos7 from the
/// shared set when present. nos7 at 1e-7: 1e-8 is its attainable accuracy (the
/// solution preconditioned cg reports converged at 1e-8 measures 1.4e-8 to 1.7e-8 when
/// the residual is recomputed here, and unpreconditioned cacg with Jacobi stagnates at
/// 1.3e-8 with the Chebyshev basis on one rank), so there every method hovers. At 1e-7 the
/// bound on a check's rounding error (3.3e-7 relative: b = A 1 is small beside |A| |x|)
/// exceeds the tolerance too, so every method stops `stagnated` at its first check whose
/// computed residual meets it (`crate::at_tolerance`; the exact residual of cg's x with
/// `bjacobi_ic0` on one rank is 3.7e-8, but no double evaluation certifies it).
fn matrices() -> Vec<(String, CsMat<f64>, f64)> {
    let mut mats = vec![(
        "heterogeneous(10, 1e4)".to_string(),
        gen::poisson3d_heterogeneous(10, 1e4, 7).unwrap(),
        1e-8,
    )];
    match matrix_dir() {
        Some(dir) => {
            for (name, tol) in [("bcsstk15", 1e-8), ("1138_bus", 1e-8), ("nos7", 1e-7)] {
                let m = castack_krylov::sparse::io::read_matrix_market_path(
                    &dir.join(format!("{name}.mtx")),
                )
                .and_then(|m| m.to_csr_full());
                let m = m.unwrap_or_else(|e| panic!("{name}: {e}"));
                mats.push((name.to_string(), m, tol));
            }
        }
        None => eprintln!("shared matrices absent: precond_cacg on the generated matrix only"),
    }
    mats
}

/// The rounding level of a computed relative residual `||b - A x|| / ||b||`: each entry of
/// `A x` carries an error up to `nnz_row eps (|A| |x|)_i`.
fn rounding_floor(a: &CsMat<f64>, b: &[f64], x: &[f64]) -> f64 {
    let mut sq = 0.0;
    let mut width = 0;
    for row in a.outer_iterator() {
        width = width.max(row.nnz());
        let v: f64 = row.iter().map(|(j, v)| (v * x[j]).abs()).sum();
        sq += v * v;
    }
    let bn: f64 = b.iter().map(|v| v * v).sum::<f64>().sqrt();
    width as f64 * f64::EPSILON * sq.sqrt() / bn
}

/// `||x - y|| / ||y||`.
fn rel_diff(x: &[f64], y: &[f64]) -> f64 {
    let d: f64 = x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum();
    let n: f64 = y.iter().map(|b| b * b).sum();
    (d / n).sqrt()
}

/// cacg with bjacobi_ic0 and chebyshev (s = 4, Chebyshev and monomial bases, 1 and 3
/// ranks) on heterogeneous matrices: converged on the true residual (recomputed here),
/// the solution close to an independent reference (Jacobi-PCG of `test-support` to
/// 1e-12), CG-equivalent iterations within 1.1 x preconditioned cg's + s and below those
/// of cacg with Jacobi alone. The figures go to stderr.
#[test]
fn preconditioned_cacg_converges_like_preconditioned_cg() {
    let s = 4;
    for (name, a, tol) in matrices() {
        let b = rhs_ones(&a);
        let (x_ref, _) = jacobi_pcg(CsrRef::of(&a), &b, 1e-12, 100_000);
        for p in [1, 3] {
            for basis in [Basis::Chebyshev, Basis::Monomial] {
                let jac = cfg(Method::Cacg, Precond::Jacobi, basis, s, tol);
                let (_, jr) = solve(&a, &b, p, &jac);
                for pc in [Precond::BjacobiIc0, Precond::Chebyshev] {
                    let (xcg, cg) = solve(&a, &b, p, &cfg(Method::Cg, pc, basis, 1, tol));
                    assert!(crate::at_tolerance(&cg), "{name} cg {pc} p={p}: {cg:?}");
                    let what = format!("{name} cacg {pc} {basis} s={s} p={p}");
                    let (x, rep) = solve(&a, &b, p, &cfg(Method::Cacg, pc, basis, s, tol));
                    let true_res = relres(CsrRef::of(&a), &b, &x);
                    let floor = rounding_floor(&a, &b, &x);
                    let cg_res = relres(CsrRef::of(&a), &b, &xcg);
                    let err = rel_diff(&x, &x_ref);
                    eprintln!(
                        "{what}: {} equivalent ({} outer, {} replacements, {} applies) vs cg {} vs cacg jacobi {}; true {true_res:.2e} (cg {cg_res:.2e}, rounding floor {floor:.1e}), error vs reference {err:.2e}",
                        rep.equivalent_iterations,
                        rep.iterations,
                        rep.residual_replacements,
                        rep.precond_applies,
                        cg.iterations,
                        jr.equivalent_iterations
                    );
                    assert!(crate::at_tolerance(&rep), "{what}: {rep:?}");
                    assert_eq!(rep.precond, pc.name(), "{what}");
                    // Every outer step applied M^-1 2s - 1 times (no fallback of s), and
                    // the warm-up m - 1 times (m = 10 for the Chebyshev basis) after z0.
                    let m: u64 = if basis == Basis::Monomial { 0 } else { 10 };
                    assert_eq!(
                        rep.precond_applies,
                        1 + m.saturating_sub(1)
                            + (2 * s as u64 - 1) * rep.iterations as u64
                            + rep.residual_replacements,
                        "{what}: {rep:?}"
                    );
                    assert!(rep.relres_true <= tol, "{what}: {}", rep.relres_true);
                    // Recomputed here, up to the rounding of the product itself (a bound:
                    // nos7's entries span 1e-2 to 6e6, its floor is 3.6e-7).
                    assert!(true_res <= tol * 1.01 + floor, "{what}: {true_res}");
                    // The reference solves to 1e-12; both errors are within the condition
                    // number times the tolerance of the exact solution, far tighter here.
                    assert!(err <= 1e-4, "{what}: {err}");
                    let bound = 1.1 * cg.iterations as f64 + s as f64;
                    assert!(
                        rep.equivalent_iterations as f64 <= bound,
                        "{what}: {} CG-equivalent vs preconditioned cg {}",
                        rep.equivalent_iterations,
                        cg.iterations
                    );
                    assert!(
                        rep.equivalent_iterations < jr.equivalent_iterations,
                        "{what}: {} vs jacobi {}",
                        rep.equivalent_iterations,
                        jr.equivalent_iterations
                    );
                }
            }
        }
    }
}

/// The same iterates to the bit on the threads and sim backends at the same rank count
/// (x, history, counters).
#[test]
fn preconditioned_cacg_is_bit_identical_on_threads_and_sim() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 3).unwrap();
    let b: Vec<f64> = (0..a.rows())
        .map(|i| ((i * 37) % 11) as f64 - 5.0)
        .collect();
    for pc in [Precond::BjacobiIc0, Precond::Chebyshev] {
        for basis in [Basis::Chebyshev, Basis::Newton, Basis::Monomial] {
            for p in [1, 3] {
                let what = format!("cacg {pc} {basis} p={p}");
                let c = SolverConfig {
                    history: true,
                    ..cfg(Method::Cacg, pc, basis, 4, 1e-8)
                };
                let threads = run(&a, &b, p, &c, false);
                let sim = run(&a, &b, p, &c, true);
                assert!(threads[0].2.converged, "{what}: {:?}", threads[0].2);
                for (t, s) in threads.iter().zip(&sim) {
                    assert_eq!(t.0, s.0, "{what}: x");
                    assert_eq!(t.1, s.1, "{what}: history");
                    let (tr, sr) = (&t.2, &s.2);
                    assert_eq!(tr.iterations, sr.iterations, "{what}");
                    assert_eq!(tr.equivalent_iterations, sr.equivalent_iterations);
                    assert_eq!(tr.relres_true.to_bits(), sr.relres_true.to_bits(), "{what}");
                    assert_eq!(tr.reductions, sr.reductions, "{what}");
                    assert_eq!(tr.halo_exchanges, sr.halo_exchanges, "{what}");
                    assert_eq!(tr.precond_applies, sr.precond_applies, "{what}");
                    assert!(!tr.modeled && sr.modeled, "{what}");
                }
            }
        }
    }
}

/// The documented counts (module doc of `cacg`) on runs, with and without periodic
/// replacement: `reductions = iterations + checks`, `checks = replacements - periodic + 1`;
/// `precond_applies = 1 + (m - 1) + (2s - 1) iterations + replacements` (`m` warm-up
/// steps, 0 for the monomial basis: then the setup applies once); `halo_exchanges =
/// (2s - 1) iterations + checks + periodic + D * ((2s - 1) iterations + replacements)`
/// (`D` the Chebyshev preconditioner's degree, 0 for IC(0)); setup: `m + D (m - 1)^+`
/// exchanges and `2m` reductions more than preconditioned cg's setup (the warm-up).
#[test]
fn preconditioned_cacg_counts_match_the_documented_formulas() {
    let a = gen::poisson3d_heterogeneous(10, 1e4, 7).unwrap();
    let b = rhs_ones(&a);
    let degree = 3u64;
    let mut periodic_seen = false;
    for pc in [Precond::BjacobiIc0, Precond::Chebyshev] {
        let d = if pc == Precond::Chebyshev { degree } else { 0 };
        for basis in [Basis::Chebyshev, Basis::Monomial] {
            for (s, every) in [(4usize, None), (3, None), (4, Some(12usize))] {
                for p in [1, 3] {
                    let what = format!("cacg {pc} {basis} s={s} R={every:?} p={p}");
                    let c = SolverConfig {
                        replace_every: every,
                        precond_degree: degree as usize,
                        ..cfg(Method::Cacg, pc, basis, s, 1e-8)
                    };
                    let (_, rep) = solve(&a, &b, p, &c);
                    let (_, cg) = solve(
                        &a,
                        &b,
                        p,
                        &SolverConfig {
                            precond_degree: degree as usize,
                            ..cfg(Method::Cg, pc, basis, 1, 1e-8)
                        },
                    );
                    assert!(rep.converged, "{what}: {rep:?}");
                    let outer = rep.iterations as u64;
                    let reps = rep.residual_replacements;
                    // Periodic replacements: those not made by a check (one check ends
                    // the solve, every other one replaces).
                    let checks = rep.reductions - outer;
                    assert!(checks >= 1, "{what}: {rep:?}");
                    let periodic = reps + 1 - checks;
                    if every.is_none() {
                        assert_eq!(periodic, 0, "{what}: {rep:?}");
                    } else if periodic > 0 {
                        periodic_seen = true;
                    }
                    let m = match basis {
                        Basis::Monomial => 0,
                        _ => s.max(10) as u64,
                    };
                    let loop_applies = (2 * s as u64 - 1) * outer + reps;
                    let setup_applies = 1 + m.saturating_sub(1);
                    assert_eq!(
                        rep.precond_applies,
                        setup_applies + loop_applies,
                        "{what}: {rep:?}"
                    );
                    assert_eq!(
                        rep.halo_exchanges,
                        (2 * s as u64 - 1) * outer + checks + periodic + d * loop_applies,
                        "{what}: {rep:?}"
                    );
                    // Setup beyond preconditioned cg's (which applies M^-1 once, like
                    // cacg before its warm-up): the warm-up's m SpMVs, m - 1 applications
                    // and 2m reductions; cg's setup reduces r.z where cacg reduces
                    // ||r0||: the same count.
                    assert_eq!(
                        rep.setup_halo_exchanges,
                        cg.setup_halo_exchanges + m + d * m.saturating_sub(1),
                        "{what}: {rep:?} vs cg {cg:?}"
                    );
                    assert_eq!(
                        rep.setup_reductions,
                        cg.setup_reductions + 2 * m,
                        "{what}: {rep:?} vs cg {cg:?}"
                    );
                }
            }
        }
    }
    assert!(periodic_seen, "no run made a periodic replacement");
}
