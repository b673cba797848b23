//! The s-step methods (`cbcg`, `cbcgr`) and their building blocks: bases, spectral
//! estimates, convergence sweeps with exact communication counts, a dense SPD reference
//! and a deliberate breakdown.

use castack_collectives::{AllreduceAlgo, Communicator, ThreadUniverse};
use castack_krylov::{cg_lanczos, power_lmax};
use castack_krylov::{
    sparse::gen, Basis, Cpu, DistCsr, DistVec, KrylovError, Method, Ops, Partition, SolveReport,
    Solver, SolverConfig, SpmvMode,
};
use castack_krylov::{Chebyshev, SStepBasis};
use castack_test_support::reference::{jacobi_pcg, relres, CsrRef};
use castack_test_support::spd::{dense_spd, hash_vec};
use sprs::{CsMat, TriMat};

const S_STEP: [Method; 2] = [Method::Cbcg, Method::Cbcgr];

/// Solve `a x = a * ones` on `p` thread ranks; the gathered x and rank 0's report.
fn solve(
    a: &CsMat<f64>,
    b: &[f64],
    p: usize,
    cfg: &SolverConfig,
) -> Result<(Vec<f64>, SolveReport), KrylovError> {
    let part = Partition::rows(a.rows(), p);
    let out = ThreadUniverse::new(p)?.run(|comm| {
        let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
        let range = part.range(comm.rank());
        let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
        solver.solve(&b[range], None)
    })?;
    let mut x = Vec::with_capacity(a.rows());
    let mut report = None;
    for s in out {
        let s = s?;
        x.extend_from_slice(&s.x);
        report.get_or_insert(s.report);
    }
    Ok((x, report.expect("at least one rank")))
}

fn rhs_ones(a: &CsMat<f64>) -> Vec<f64> {
    CsrRef::of(a).matvec(&vec![1.0; a.rows()])
}

fn scaled(a: &CsMat<f64>, c: f64) -> CsMat<f64> {
    a.map(|v| v * c)
}

/// On `p` ranks: build `basis` of size `k` from a pseudo-random start vector of `a` and
/// return, per rank, the largest `|A s_j - (S T)_j| / |A s_j|` over j, and the largest
/// mismatch between the returned images and a fresh SpMV.
fn basis_residual(a: &CsMat<f64>, p: usize, basis: &SStepBasis, k: usize) -> (f64, f64) {
    let part = Partition::rows(a.rows(), p);
    let out = ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| -> Result<(f64, f64), KrylovError> {
            let mut dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let mut ops = Ops::new(
                comm,
                AllreduceAlgo::default(),
                Cpu::sequential(),
                dist.n_local(),
            )?;
            let mut s: Vec<DistVec> = (0..=k).map(|_| dist.new_vec()).collect();
            let mut a_s: Vec<DistVec> = (0..k).map(|_| dist.new_vec()).collect();
            let n = dist.n_local();
            s[0].local_mut()
                .copy_from_slice(&hash_vec(dist.row_start(), n, 7));
            let before = ops.counters().setup_halo_exchanges;
            basis.build(&mut dist, &mut ops, k, &mut s, &mut a_s)?;
            assert_eq!(ops.counters().setup_halo_exchanges - before, k as u64);
            assert_eq!(ops.counters().setup_reductions, 0);
            let mut t = vec![0.0; (k + 1) * k];
            basis.change_of_basis(k, &mut t);
            let mut y = dist.new_vec();
            let mut sums = vec![0.0; 3 * k];
            for j in 0..k {
                dist.spmv(&mut ops, &mut s[j], &mut y)?;
                for i in 0..n {
                    let st: f64 = (0..=k).map(|l| s[l].local()[i] * t[l * k + j]).sum();
                    let ay = y.local()[i];
                    sums[3 * j] += (ay - st).powi(2);
                    sums[3 * j + 1] += ay * ay;
                    sums[3 * j + 2] += (ay - a_s[j].local()[i]).powi(2);
                }
            }
            ops.allreduce_host(&mut sums)?;
            let (mut e, mut e2) = (0.0f64, 0.0f64);
            for j in 0..k {
                e = e.max((sums[3 * j] / sums[3 * j + 1]).sqrt());
                e2 = e2.max((sums[3 * j + 2] / sums[3 * j + 1]).sqrt());
            }
            Ok((e, e2))
        })
        .unwrap();
    out.into_iter()
        .map(Result::unwrap)
        .fold((0.0, 0.0), |a, b| (a.0.max(b.0), a.1.max(b.1)))
}

#[test]
fn every_basis_satisfies_its_change_of_basis_relation() {
    let a = scaled(&gen::poisson2d(7).unwrap(), 0.25);
    let est = ThreadUniverse::new(1)
        .unwrap()
        .run(|comm| {
            let part = Partition::rows(a.rows(), 1);
            let mut dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let mut ops = Ops::new(
                comm,
                AllreduceAlgo::default(),
                Cpu::sequential(),
                dist.n_local(),
            )?;
            let mut r = dist.new_vec();
            r.local_mut().copy_from_slice(&hash_vec(0, a.rows(), 3));
            cg_lanczos(&mut dist, &mut ops, &r, 10, "test")
        })
        .unwrap()
        .pop()
        .unwrap()
        .unwrap();
    for &kind in Basis::ALL {
        let basis = SStepBasis::from_estimate(kind, &est).unwrap();
        assert_eq!(basis.kind(), kind);
        for p in [1, 3] {
            for k in [1, 4, 8] {
                let (e, e2) = basis_residual(&a, p, &basis, k);
                assert!(e <= 1e-13, "{kind} p={p} k={k}: A S = S T off by {e:e}");
                assert!(e2 == 0.0, "{kind} p={p} k={k}: images off by {e2:e}");
            }
        }
    }
}

#[test]
fn chebyshev_basis_is_the_explicit_chebyshev_polynomial() {
    // Diagonal matrix: s_j[i] = T_j(eta d_i - zeta) s_0[i] exactly, T_j(x) = cos(j acos x).
    let n = 40;
    let (lmin, lmax) = (0.1, 3.0);
    let d: Vec<f64> = (0..n)
        .map(|i| lmin + (lmax - lmin) * i as f64 / (n - 1) as f64)
        .collect();
    let mut tri = TriMat::new((n, n));
    for (i, v) in d.iter().enumerate() {
        tri.add_triplet(i, i, *v);
    }
    let a: CsMat<f64> = tri.to_csr();
    let cheb = Chebyshev::new(lmin, lmax).unwrap();
    let (eta, zeta) = cheb.map();
    assert!((eta - 2.0 / 2.9).abs() < 1e-15 && (zeta - 3.1 / 2.9).abs() < 1e-15);
    let basis = SStepBasis::Chebyshev(cheb);
    let k = 10;
    let got = ThreadUniverse::new(2)
        .unwrap()
        .run(|comm| -> Result<Vec<Vec<f64>>, KrylovError> {
            let part = Partition::rows(n, 2);
            let mut dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let mut ops = Ops::new(
                comm,
                AllreduceAlgo::default(),
                Cpu::sequential(),
                dist.n_local(),
            )?;
            let mut s: Vec<DistVec> = (0..=k).map(|_| dist.new_vec()).collect();
            let mut a_s: Vec<DistVec> = (0..k).map(|_| dist.new_vec()).collect();
            s[0].local_mut().fill(1.0);
            basis.build(&mut dist, &mut ops, k, &mut s, &mut a_s)?;
            Ok(s.iter().map(|v| v.local().to_vec()).collect())
        })
        .unwrap();
    let mut cols = vec![Vec::new(); k + 1];
    for r in got {
        for (j, c) in r.unwrap().into_iter().enumerate() {
            cols[j].extend(c);
        }
    }
    for (j, col) in cols.iter().enumerate() {
        for (i, v) in col.iter().enumerate() {
            let x: f64 = eta * d[i] - zeta;
            let want = (j as f64 * x.clamp(-1.0, 1.0).acos()).cos();
            assert!((v - want).abs() <= 1e-12, "T_{j}({x}) = {want}, basis {v}");
        }
    }
}

#[test]
fn lanczos_estimates_lmax_of_scaled_poisson2d() {
    let n = 20;
    let a = scaled(&gen::poisson2d(n).unwrap(), 0.25); // Jacobi scaling: diagonal 4
    let t = n as f64 * std::f64::consts::PI / (2.0 * (n + 1) as f64);
    let lmax = 8.0 * t.sin().powi(2) / 4.0;
    let b = rhs_ones(&a);
    for p in [1, 3] {
        let part = Partition::rows(a.rows(), p);
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| -> Result<_, KrylovError> {
                let mut dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
                let mut ops = Ops::new(
                    comm,
                    AllreduceAlgo::default(),
                    Cpu::sequential(),
                    dist.n_local(),
                )?;
                let mut r = dist.new_vec();
                r.local_mut().copy_from_slice(&b[part.range(comm.rank())]);
                let est = cg_lanczos(&mut dist, &mut ops, &r, 10, "test")?;
                let c = ops.counters();
                let est20 = cg_lanczos(&mut dist, &mut ops, &r, 20, "test")?;
                let pw = power_lmax(&mut dist, &mut ops, &r, 60)?;
                Ok((est, c, est20, pw))
            })
            .unwrap();
        for o in out {
            let (est, c, est20, pw) = o.unwrap();
            assert_eq!(est.steps, 10);
            assert_eq!((c.setup_reductions, c.setup_halo_exchanges), (20, 10));
            // The start vector A * ones has small high-frequency components: 10 steps
            // (the solvers' warm-up) are within 6%; 20 steps within 2% (the top of this
            // spectrum is clustered). The Chebyshev interval is [0, max Ritz], no safety
            // factor on the upper end (eig.rs).
            let rel = (lmax - est.lmax_ritz()) / lmax;
            assert!(
                (0.0..0.06).contains(&rel),
                "Ritz {} vs {lmax}",
                est.lmax_ritz()
            );
            let rel20 = (lmax - est20.lmax_ritz()) / lmax;
            assert!(
                (0.0..0.02).contains(&rel20),
                "Ritz {} vs {lmax}",
                est20.lmax_ritz()
            );
            assert_eq!(est.interval(), (0.0, est.lmax_ritz()));
            assert!(
                pw <= lmax * (1.0 + 1e-12) && pw >= 0.9 * lmax,
                "power {pw} vs {lmax}"
            );
        }
    }
}

fn cfg(method: Method, basis: Basis, k: usize, tol: f64) -> SolverConfig {
    SolverConfig {
        method,
        basis,
        k,
        tol,
        ..SolverConfig::default()
    }
}

/// The documented loop counts of a solve without block-size fallback.
fn check_counts(rep: &SolverReportView) {
    let (outer, k, repl) = (rep.outer, rep.k, rep.replacements);
    // Every replacement is a true residual (1 SpMV) plus `A Q` recomputed (k SpMVs); the
    // final check is one more true residual (cbcgr recomputes `A Q` there too, in the same
    // fused refresh). cbcg: 1 reduction per true residual; cbcgr: 1 per refresh plus the
    // first Gram matrix.
    let (halo, reductions) = match rep.method {
        Method::Cbcg => (k * (outer + 1) + 1 + (k + 1) * repl, 2 * outer + 1 + repl),
        _ => (k * (outer + 1) + (k + 1) * (repl + 1), outer + 2 + repl),
    };
    assert_eq!(rep.halo, halo, "{rep:?}");
    assert_eq!(rep.reductions, reductions, "{rep:?}");
}

/// A block-method run (`method`, block size `k`, tolerance `tol`) on `a x = b`: converged by
/// the reported and the recomputed true residual (or, at a tolerance within the rounding
/// floor of the residual's evaluation, stopped at a check whose computed residual met it:
/// [`crate::at_tolerance`]), within `bound` CG-equivalent iterations
/// when given, and, without a block-size fallback, with the documented exact counts.
fn assert_block_run(
    what: &str,
    (a, b, x): (&CsMat<f64>, &[f64], &[f64]),
    rep: &SolveReport,
    (method, k, tol): (Method, usize, f64),
    bound: Option<f64>,
) {
    assert!(
        crate::at_tolerance(rep) && rep.relres_true <= tol,
        "{what}: {rep:?}"
    );
    assert!(relres(CsrRef::of(a), b, x) <= tol * 1.01, "{what}");
    if let Some(bound) = bound {
        assert!(rep.equivalent_iterations as f64 <= bound, "{what}: {rep:?}");
    }
    if rep.equivalent_iterations == rep.iterations * k {
        check_counts(&SolverReportView {
            method,
            outer: rep.iterations as u64,
            k: k as u64,
            replacements: rep.residual_replacements,
            halo: rep.halo_exchanges,
            reductions: rep.reductions,
        });
    }
}

#[derive(Debug)]
struct SolverReportView {
    method: Method,
    outer: u64,
    k: u64,
    replacements: u64,
    halo: u64,
    reductions: u64,
}

#[test]
fn cbcg_and_cbcgr_converge_with_every_basis_and_count_exactly() {
    let mats = [
        ("poisson2d(20)", gen::poisson2d(20).unwrap()),
        ("poisson3d(10)", gen::poisson3d(10).unwrap()),
        (
            "heterogeneous(8)",
            gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap(),
        ),
    ];
    let tol = 1e-8;
    for (name, a) in &mats {
        let b = rhs_ones(a);
        let (_, cg) = solve(a, &b, 1, &cfg(Method::Cg, Basis::Chebyshev, 1, tol)).unwrap();
        for method in S_STEP {
            for &basis in Basis::ALL {
                for k in [2, 4, 8] {
                    for p in [1, 3, 4] {
                        let c = cfg(method, basis, k, tol);
                        let what = format!("{method} {basis} k={k} p={p} {name}");
                        let (x, rep) =
                            solve(a, &b, p, &c).unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_eq!(rep.method, method.name());
                        assert_eq!(rep.k, Some(k));
                        assert_eq!(rep.basis.as_deref(), Some(basis.name()));
                        // Converged by the true residual, within the CG bound for
                        // Newton/Chebyshev, exact counts unless the block size fell back
                        // (monomial only).
                        let bound = (basis != Basis::Monomial)
                            .then_some(1.1 * cg.iterations as f64 + k as f64);
                        assert_block_run(&what, (a, &b, &x), &rep, (method, k, tol), bound);
                        assert!(
                            rep.equivalent_iterations == rep.iterations * k
                                || basis == Basis::Monomial,
                            "{what}: block size fell back"
                        );
                        if basis != Basis::Monomial {
                            // Warm-up: ||r0|| plus 2 per Lanczos step, after the
                            // solver set-up's diagonal check and ||b||.
                            let m = k.max(10) as u64;
                            assert_eq!(rep.setup_reductions, 2 + 1 + 2 * m, "{what}");
                        } else {
                            assert_eq!(rep.setup_reductions, 3, "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dense_spd_with_controlled_spectrum_matches_reference_pcg() {
    let n = 60;
    let lambdas: Vec<f64> = (0..n)
        .map(|i| 10f64.powf(3.0 * i as f64 / (n - 1) as f64))
        .collect();
    let a = dense_spd(&lambdas, 11);
    let b = rhs_ones(&a);
    let (xref, _) = jacobi_pcg(CsrRef::of(&a), &b, 1e-12, 10_000);
    let nref: f64 = xref.iter().map(|v| v * v).sum::<f64>().sqrt();
    for method in S_STEP {
        for &basis in Basis::ALL {
            for p in [1, 2] {
                let (x, rep) = solve(&a, &b, p, &cfg(method, basis, 4, 1e-10)).unwrap();
                assert!(
                    rep.converged && rep.relres_true <= 1e-10,
                    "{method} {basis}: {rep:?}"
                );
                let err: f64 = x
                    .iter()
                    .zip(&xref)
                    .map(|(a, b)| (a - b).powi(2))
                    .sum::<f64>()
                    .sqrt();
                assert!(
                    err <= 1e-6 * nref,
                    "{method} {basis} p={p}: |x - x_ref| = {err:e}"
                );
            }
        }
    }
}

#[test]
fn an_indefinite_matrix_is_a_clean_breakdown() {
    // Tridiagonal (-1.5, 1, -1.5): positive diagonal, eigenvalues 1 - 3 cos(.) in (-2, 4).
    let n = 50;
    let mut tri = TriMat::new((n, n));
    for i in 0..n {
        tri.add_triplet(i, i, 1.0);
        if i + 1 < n {
            tri.add_triplet(i, i + 1, -1.5);
            tri.add_triplet(i + 1, i, -1.5);
        }
    }
    let a: CsMat<f64> = tri.to_csr();
    let b = hash_vec(0, n, 5);
    for method in S_STEP {
        for &basis in Basis::ALL {
            for p in [1, 3] {
                // A breakdown is a report with the last iterate, not an error.
                let (x, rep) = solve(&a, &b, p, &cfg(method, basis, 4, 1e-8))
                    .unwrap_or_else(|e| panic!("{method} {basis} p={p}: {e}"));
                match rep.breakdown_error() {
                    Some(KrylovError::Breakdown {
                        method: m,
                        quantity,
                        ..
                    }) => {
                        assert_eq!(m, method.name());
                        // Monomial has no warm-up: the Gram matrix fails its Cholesky
                        // at every block size down to k = 1; the others stop in the
                        // spectral estimate.
                        let want = match basis {
                            Basis::Monomial => "Q^T A Q",
                            _ => "spectral estimate",
                        };
                        assert!(quantity.contains(want), "{method} {basis}: {quantity}");
                    }
                    other => panic!("{method} {basis} p={p}: expected a breakdown, got {other:?}"),
                }
                assert_eq!(rep.stop_reason, castack_krylov::StopReason::Breakdown);
                assert!(!rep.converged);
                assert_eq!(x.len(), n);
                let rel = relres(CsrRef::of(&a), &b, &x);
                assert!(rep.relres_true.is_finite());
                assert!(
                    (rel - rep.relres_true).abs() <= 1e-12 * rel.max(1.0),
                    "{method} {basis}"
                );
            }
        }
    }
}

#[test]
fn registry_lists_the_s_step_methods() {
    for m in S_STEP {
        assert!(Method::ALL.contains(&m));
        assert!(m.is_s_step());
        assert_eq!(m.name().parse::<Method>().unwrap(), m);
    }
    assert!(!Method::Cg.is_s_step());
}

#[test]
fn an_exhausted_budget_reports_non_convergence_with_exact_counts() {
    let a = gen::poisson3d(10).unwrap();
    let b = rhs_ones(&a);
    for method in S_STEP {
        for &basis in Basis::ALL {
            let k = 4;
            let c = SolverConfig {
                max_iter: 3 * k,
                ..cfg(method, basis, k, 1e-12)
            };
            let (_, rep) = solve(&a, &b, 3, &c).unwrap();
            assert!(!rep.converged, "{method} {basis}");
            assert_eq!(rep.stop_reason, castack_krylov::StopReason::MaxIterations);
            assert_eq!((rep.iterations, rep.equivalent_iterations), (3, 3 * k));
            assert!(rep.relres_true > 1e-12 && rep.relres_true < 1.0);
            check_counts(&SolverReportView {
                method,
                outer: 3,
                k: k as u64,
                replacements: rep.residual_replacements,
                halo: rep.halo_exchanges,
                reductions: rep.reductions,
            });
        }
    }
}

#[test]
fn periodic_replacement_in_cbcg_and_cbcgr_keeps_the_directions_with_exact_counts() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let b = rhs_ones(&a);
    let tol = 1e-8;
    let (_, cg) = solve(&a, &b, 1, &cfg(Method::Cg, Basis::Chebyshev, 1, tol)).unwrap();
    for method in S_STEP {
        for &basis in &[Basis::Chebyshev, Basis::Newton] {
            let k = 4;
            for every in [8, 20] {
                let c = SolverConfig {
                    replace_every: Some(every),
                    ..cfg(method, basis, k, tol)
                };
                let what = format!("{method} {basis} R={every}");
                let (x, rep) = solve(&a, &b, 3, &c).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(rep.converged && rep.relres_true <= tol, "{what}: {rep:?}");
                assert!(relres(CsrRef::of(&a), &b, &x) <= tol * 1.01, "{what}");
                // Replacing r and A Q keeps Q: still within CG's count + 10% + k (a
                // restart from r at every replacement would not be).
                let bound = 1.1 * cg.iterations as f64 + k as f64;
                assert!(rep.equivalent_iterations as f64 <= bound, "{what}: {rep:?}");
                assert_eq!(rep.equivalent_iterations, rep.iterations * k, "{what}");
                // A replacement is due once `every` CG-equivalent iterations have passed
                // since the last one (whatever caused it).
                let (eq, repl) = (rep.equivalent_iterations as u64, rep.residual_replacements);
                let window = (every + k) as u64;
                assert!(repl >= eq / window, "{what}: {repl} replacements in {eq}");
                check_counts(&SolverReportView {
                    method,
                    outer: rep.iterations as u64,
                    k: k as u64,
                    replacements: repl,
                    halo: rep.halo_exchanges,
                    reductions: rep.reductions,
                });
            }
        }
    }
}

/// Power-network matrices from the shared set (when present), where the recurrences
/// `AQ = AS - AQ B` and the updated Gram matrix drift: before the drift monitor and the
/// replacements that keep Q, cbcgr needed 1.8x CG's iterations at k = 12 on 494_bus and
/// 1.4-1.7x on 1138_bus. On bcsstk10 CG's residual dips below the tolerance inside a block
/// and is back above it at the block's end (e.g. 8.2e-9 at CG step 444, 1.3e-8 to 2.9e-8
/// at 456-480): without the block minimal-residual candidate the block methods needed
/// 1.15-1.24x CG's 444 steps at k = 8, 12. On bcsstk08 cbcg's Gram matrix `Q^T (A Q)`,
/// reduced with the drifting recurrence `A Q`, stalled the residual near 1e-7 at k = 8, 12
/// on 3 and 4 ranks (1.22-1.29x CG's 130 steps) until its drift against the updated
/// `S^T A S - W^T B` triggered a refresh. On crystm01 (CG: 14 steps) the Chebyshev basis
/// on `[0, lmax]` gave the first Gram matrix a condition number near 1e15 and 36 steps at
/// k = 12 on 3 ranks, until the warm-up's reliable smallest Ritz value set the interval.
/// Now every Chebyshev/Newton run here stays within 1.1 x CG + k, by the true residual,
/// with the documented exact counts. Not every rank count and ordering does: bcsstk08 is
/// near its attainable accuracy at 1e-8 (condition number 2.6e7), and over ranks 1-8 with
/// and without RCM (`cargo xtask sweep --ranks 1,2,3,4,5,6,7,8 --reorder none,rcm`) 11 of
/// its 192 block runs at k = 4, 8, 12 are over (168-180 against bounds of 151-162).
#[test]
fn block_methods_meet_the_cg_bound_where_the_recurrences_drift() {
    let Some(dir) = castack_test_support::matrices::shared_dir() else {
        eprintln!("shared matrices absent: block_methods_meet_the_cg_bound... skipped");
        return;
    };
    let tol = 1e-8;
    let mut replaced = 0;
    for name in ["494_bus", "1138_bus", "bcsstk10", "bcsstk08", "crystm01"] {
        let a =
            castack_krylov::sparse::io::read_matrix_market_path(&dir.join(format!("{name}.mtx")))
                .and_then(|m| m.to_csr_full())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let b = rhs_ones(&a);
        let (_, cg) = solve(&a, &b, 1, &cfg(Method::Cg, Basis::Chebyshev, 1, tol)).unwrap();
        for method in S_STEP {
            for basis in [Basis::Chebyshev, Basis::Newton] {
                for k in [8, 12] {
                    for p in [1, 3] {
                        let what = format!("{name} {method} {basis} k={k} p={p}");
                        let (x, rep) = solve(&a, &b, p, &cfg(method, basis, k, tol))
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        eprintln!(
                            "{what}: {} equivalent vs cg {} ({} replacements)",
                            rep.equivalent_iterations, cg.iterations, rep.residual_replacements
                        );
                        let bound = 1.1 * cg.iterations as f64 + k as f64;
                        assert_block_run(&what, (&a, &b, &x), &rep, (method, k, tol), Some(bound));
                        replaced += rep.residual_replacements;
                    }
                }
            }
        }
    }
    assert!(replaced > 0, "the drift monitor was never exercised");
}

/// msc04515 (condition number about 5e6) at k = 4, where rounding made the block methods'
/// residual hover between 2e-8 and 8e-8 for up to a thousand CG-equivalent iterations
/// after CG's 3414 (cbcg with the Chebyshev basis on 1 rank: 4356, over 1.1 x CG + k =
/// 3759; on 2 and 5 ranks up to 5108). With `B` from the SpMV outputs and minimal-residual
/// smoothing of the block-end iterates (`cg/smoothing.rs`) every run of the issue's
/// configuration (ranks 1, 3, 4) is within the bound, by the true residual, with the
/// documented exact counts. Also 494_bus at 1e-14, at the limit of its attainable accuracy,
/// where the smoothed iterate's check misses and the method goes on from it (a
/// replacement, counted as every other); there the bound on the check's rounding error
/// (4e-14 relative) exceeds the tolerance, so the solve ends `stagnated` at the first
/// check whose computed residual meets it (the exact residual of that x, 4.4e-15 for cbcg
/// on 1 rank, met it, but no evaluation in double precision can certify that).
#[test]
fn smoothing_ends_the_hover_near_the_tolerance() {
    let Some(dir) = castack_test_support::matrices::shared_dir() else {
        eprintln!("shared matrices absent: smoothing_ends_the_hover_near_the_tolerance skipped");
        return;
    };
    let read = |name: &str| {
        castack_krylov::sparse::io::read_matrix_market_path(&dir.join(format!("{name}.mtx")))
            .and_then(|m| m.to_csr_full())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let cases: [(&str, f64, &[usize], &[Basis]); 2] = [
        (
            "msc04515",
            1e-8,
            &[1, 3, 4],
            &[Basis::Chebyshev, Basis::Newton],
        ),
        ("494_bus", 1e-14, &[1], &[Basis::Chebyshev]),
    ];
    let k = 4;
    let mut replaced = 0;
    for (name, tol, ranks, bases) in cases {
        let a = read(name);
        let b = rhs_ones(&a);
        let (_, cg) = solve(&a, &b, 1, &cfg(Method::Cg, Basis::Chebyshev, 1, tol)).unwrap();
        for method in S_STEP {
            for &basis in bases {
                for &p in ranks {
                    let what = format!("{name} tol {tol:e} {method} {basis} k={k} p={p}");
                    let (x, rep) = solve(&a, &b, p, &cfg(method, basis, k, tol))
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    eprintln!(
                        "{what}: {} equivalent vs cg {} ({} replacements)",
                        rep.equivalent_iterations, cg.iterations, rep.residual_replacements
                    );
                    // 494_bus at 1e-14 is beyond what the bound is asked for: a tolerance
                    // at the limit of the attainable accuracy.
                    let at_limit = name == "494_bus";
                    let bound = (!at_limit).then_some(1.1 * cg.iterations as f64 + k as f64);
                    assert_block_run(&what, (&a, &b, &x), &rep, (method, k, tol), bound);
                    if at_limit {
                        replaced += rep.residual_replacements;
                    }
                }
            }
        }
    }
    assert!(replaced > 0, "no check missed at the attainable accuracy");
}

/// Generated 3-D Poisson (n = 16, 20) at 1e-12 with the Chebyshev basis at k = 12: late in
/// the solve the residual lives at the low end of the spectrum, which a basis on an
/// interval reaching beyond `lmax` resolves worse (eig.rs). With the interval's upper end
/// at 1.1 x the largest Ritz value (1.02-1.03 x lmax here) these runs took one block more
/// than the bound allows (n = 16: 72 > 1.1 x 51 + 12; n = 20: 84 > 1.1 x 64 + 12, in 8
/// of these 12 runs); at the largest Ritz value (0.93-0.94 x lmax) they end within it,
/// with the exact counts.
#[test]
fn a_chebyshev_interval_within_the_spectrum_keeps_the_block_count_near_the_tolerance() {
    let (tol, k) = (1e-12, 12);
    for n in [16, 20] {
        let a = gen::poisson3d(n).unwrap();
        let b = rhs_ones(&a);
        for p in [1, 3, 4] {
            let (_, cg) = solve(&a, &b, p, &cfg(Method::Cg, Basis::Chebyshev, 1, tol)).unwrap();
            for method in [Method::Cbcg, Method::Cbcgr] {
                let what = format!("poisson3d({n}) {method:?} chebyshev k={k} p={p}");
                let (x, rep) = solve(&a, &b, p, &cfg(method, Basis::Chebyshev, k, tol)).unwrap();
                let bound = 1.1 * cg.iterations as f64 + k as f64;
                assert_block_run(&what, (&a, &b, &x), &rep, (method, k, tol), Some(bound));
            }
        }
    }
}

/// The same problem with k = 8 for both block methods and bases on 1, 3 and 4 ranks: its
/// third block (CG-equivalent iterations 17-24) holds the last 4 directions. cbcgr with the
/// Newton basis ended that block at 1.4e-12 against the 1e-12 tolerance, rounding having
/// left part of the residual along earlier blocks; the minimal-residual candidate over the
/// block just used predicted the same, and a fourth block followed (32 CG-equivalent
/// iterations, over 1.1 x 20 + 8). Over the block and the next basis (`sstep::MR_WINDOW`)
/// it predicts 2e-14 and the solve ends after the third block, its true residual checked.
#[test]
fn the_minimal_residual_candidate_over_the_next_basis_ends_an_exhausted_krylov_space() {
    let a = gen::poisson3d(8).unwrap();
    let b = rhs_ones(&a);
    let (tol, k) = (1e-12, 8);
    for p in [1, 3, 4] {
        let (_, cg) = solve(&a, &b, p, &cfg(Method::Cg, Basis::Chebyshev, 1, tol)).unwrap();
        for method in [Method::Cbcg, Method::Cbcgr] {
            for basis in [Basis::Chebyshev, Basis::Newton] {
                let what = format!("poisson3d(8) {method:?} {basis} k={k} p={p}");
                let (x, rep) = solve(&a, &b, p, &cfg(method, basis, k, tol)).unwrap();
                let bound = 1.1 * cg.iterations as f64 + k as f64;
                assert_block_run(&what, (&a, &b, &x), &rep, (method, k, tol), Some(bound));
            }
        }
    }
}

/// Generated 3-D Poisson of order 512 at 1e-12: the residual's Krylov space has dimension
/// 20 (CG ends at step 20 with a residual near 1e-16), so cbcg's third block of 8 holds
/// only 4 new directions and its Gram matrix is singular. Halving k and restarting from r
/// took 32 CG-equivalent iterations (over 1.1 x 20 + 8); going on with the independent
/// directions (`Block::keep_independent`) ends in the third block, with the exact counts.
#[test]
fn an_exhausted_krylov_space_keeps_the_independent_directions() {
    let a = gen::poisson3d(8).unwrap();
    let b = rhs_ones(&a);
    let (tol, k) = (1e-12, 8);
    let (_, cg) = solve(&a, &b, 1, &cfg(Method::Cg, Basis::Chebyshev, 1, tol)).unwrap();
    assert!(cg.iterations <= 21, "CG: {cg:?}");
    for basis in [Basis::Chebyshev, Basis::Newton] {
        let what = format!("poisson3d(8) cbcg {basis} k={k}");
        let (x, rep) = solve(&a, &b, 1, &cfg(Method::Cbcg, basis, k, tol)).unwrap();
        let bound = 1.1 * cg.iterations as f64 + k as f64;
        assert_block_run(
            &what,
            (&a, &b, &x),
            &rep,
            (Method::Cbcg, k, tol),
            Some(bound),
        );
        assert!(rep.residual_replacements > 0, "{what}: no refresh: {rep:?}");
    }
    // k = 12: the second block's Krylov space already holds only 8 new directions, which
    // is before the last few outer steps; the Newton basis keeps them there too (a
    // well-conditioned basis that loses rank has run out of directions). With halving it
    // took 36 > 1.1 * 20 + 12; now 24.
    let k = 12;
    for method in [Method::Cbcg, Method::Cbcgr] {
        for p in [1, 3, 4] {
            let what = format!("poisson3d(8) {method:?} newton k={k} p={p}");
            let (_, cg) = solve(&a, &b, p, &cfg(Method::Cg, Basis::Newton, 1, tol)).unwrap();
            let (x, rep) = solve(&a, &b, p, &cfg(method, Basis::Newton, k, tol)).unwrap();
            let bound = 1.1 * cg.iterations as f64 + k as f64;
            assert_block_run(&what, (&a, &b, &x), &rep, (method, k, tol), Some(bound));
        }
    }
}
