//! CG end to end on the threads backend against an independent sequential Jacobi-PCG.

use castack_collectives::{AllreduceAlgo, Communicator, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Cpu, DistCsr, KrylovError, Partition, Precond, SolveReport, Solver, SolverConfig,
    SpmvMode,
};
use castack_test_support::reference::{jacobi_pcg, relres, CsrRef};
use sprs::CsMat;

/// Solve `a x = a * ones` on `p` thread ranks; returns the gathered x and rank 0's report.
fn solve(
    a: &CsMat<f64>,
    p: usize,
    mode: SpmvMode,
    cfg: &SolverConfig,
) -> Result<(Vec<f64>, SolveReport), KrylovError> {
    let n = a.rows();
    let b = CsrRef::of(a).matvec(&vec![1.0; n]);
    let part = Partition::rows(n, p);
    let out = ThreadUniverse::new(p)?.run(|comm| {
        let dist = DistCsr::from_global(comm, a.view(), &part, mode)?;
        let range = part.range(comm.rank());
        let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
        solver.solve(&b[range], None)
    })?;
    let mut x = Vec::with_capacity(n);
    let mut report = None;
    for s in out {
        let s = s?;
        x.extend_from_slice(&s.x);
        if report.is_none() {
            report = Some(s.report);
        }
    }
    Ok((x, report.expect("at least one rank")))
}

#[test]
fn cg_matches_reference_pcg_on_poisson_for_any_rank_count() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let n = a.rows();
    let b = CsrRef::of(&a).matvec(&vec![1.0; n]);
    let (_, ref_iters) = jacobi_pcg(CsrRef::of(&a), &b, 1e-8, 10_000);
    let cfg = SolverConfig::default();
    for p in [1, 2, 3, 4, 5, 7, 8, 16, 17] {
        for &mode in SpmvMode::ALL {
            let (x, rep) = solve(&a, p, mode, &cfg).unwrap();
            assert!(rep.converged, "p={p} {mode}");
            assert!(rep.relres_true <= 1e-8, "p={p}: {}", rep.relres_true);
            assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8);
            assert!(
                rep.iterations.abs_diff(ref_iters) <= 1,
                "p={p} {mode}: {} vs reference {ref_iters}",
                rep.iterations
            );
            // 2 reductions per iteration plus the final true-residual check.
            assert_eq!(rep.reductions, 2 * rep.iterations as u64 + 1);
            assert_eq!(rep.halo_exchanges, rep.iterations as u64 + 1);
            assert_eq!(rep.residual_replacements, 0);
        }
    }
}

#[test]
fn results_do_not_depend_on_the_rank_count_bitwise_iterations() {
    let a = gen::poisson2d(30).unwrap();
    let cfg = SolverConfig::default();
    let (_, r1) = solve(&a, 1, SpmvMode::Halo, &cfg).unwrap();
    for p in [2, 3, 7] {
        let (_, rp) = solve(&a, p, SpmvMode::Halo, &cfg).unwrap();
        assert_eq!(rp.iterations, r1.iterations);
    }
}

#[test]
fn unpreconditioned_and_more_ranks_than_rows() {
    let a = gen::poisson2d(2).unwrap(); // 4 rows
    let cfg = SolverConfig {
        precond: Precond::None,
        ..SolverConfig::default()
    };
    let (x, rep) = solve(&a, 7, SpmvMode::Halo, &cfg).unwrap();
    assert!(rep.converged);
    assert!(x.iter().all(|v| (v - 1.0).abs() < 1e-10));
}

#[test]
fn max_iter_reports_non_convergence_honestly() {
    let a = gen::poisson3d(10).unwrap();
    let cfg = SolverConfig {
        max_iter: 5,
        ..SolverConfig::default()
    };
    let (_, rep) = solve(&a, 3, SpmvMode::Halo, &cfg).unwrap();
    assert!(!rep.converged);
    assert_eq!(rep.iterations, 5);
    assert!(rep.relres_true > 1e-8);
}

#[test]
fn periodic_replacement_keeps_cg_converging_and_costs_one_spmv_and_no_reduction() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let n = a.rows();
    let b = CsrRef::of(&a).matvec(&vec![1.0; n]);
    let base = SolverConfig::default();
    let (_, plain) = solve(&a, 3, SpmvMode::Halo, &base).unwrap();
    for every in [7, 25] {
        let cfg = SolverConfig {
            replace_every: Some(every),
            ..base.clone()
        };
        let (x, rep) = solve(&a, 3, SpmvMode::Halo, &cfg).unwrap();
        assert!(
            rep.converged && rep.relres_true <= 1e-8,
            "R={every}: {rep:?}"
        );
        assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-8, "R={every}");
        // p is kept: the iteration is (nearly) unchanged.
        assert!(
            rep.iterations.abs_diff(plain.iterations) <= 2,
            "R={every}: {} vs {}",
            rep.iterations,
            plain.iterations
        );
        // Iterations R, 2R, ... compute r = b - A x (one SpMV) inside their own r.r
        // reduction; no convergence check failed here.
        let it = rep.iterations as u64;
        let repl = rep.residual_replacements;
        assert!(repl > 0, "R={every}: no replacement exercised");
        assert_eq!(repl, it / every as u64, "R={every}");
        assert_eq!(rep.reductions, 2 * it + 1, "R={every}");
        assert_eq!(
            rep.halo_exchanges - plain.halo_exchanges,
            it + repl - plain.iterations as u64,
            "R={every}"
        );
    }
}

/// The original-norm sum is left out far from the target (cg.rs): the solve is the same,
/// bit for bit and count for count, as one that computes it in every iteration (`history`
/// asks for it), also when the residual plunges to the target in one iteration (its sum
/// then rides in the check's reduction).
#[test]
fn skipping_the_weighted_norm_far_from_the_target_changes_nothing_but_bytes() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    // The ring allreduce at 2 and 3 ranks sums a value in an order set by its place and the
    // message's length: the skipped sums keep both.
    for (p, allreduce) in [
        (1, AllreduceAlgo::default()),
        (3, AllreduceAlgo::default()),
        (2, AllreduceAlgo::Ring),
        (3, AllreduceAlgo::Ring),
    ] {
        let skip = SolverConfig {
            allreduce,
            ..SolverConfig::default()
        };
        let every = SolverConfig {
            history: true,
            ..skip.clone()
        };
        let (x, rep) = solve(&a, p, SpmvMode::Halo, &skip).unwrap();
        let (xe, repe) = solve(&a, p, SpmvMode::Halo, &every).unwrap();
        assert!(rep.converged);
        assert_eq!(rep.iterations, repe.iterations);
        assert_eq!(rep.relres_true.to_bits(), repe.relres_true.to_bits());
        assert_eq!(
            rep.relres_recurrence.to_bits(),
            repe.relres_recurrence.to_bits()
        );
        assert!(x.iter().zip(&xe).all(|(u, v)| u.to_bits() == v.to_bits()));
        assert_eq!(rep.reductions, repe.reductions);
    }
    // Two distinct eigenvalues, no preconditioning: CG is exact in two iterations, so r.r
    // collapses in the second one, far below the floor the first left.
    let n = 40;
    let mut tri = sprs::TriMat::new((n, n));
    for i in 0..n {
        tri.add_triplet(i, i, if i % 2 == 0 { 1.0 } else { 3.0 });
    }
    let d: CsMat<f64> = tri.to_csr();
    let none = |history| SolverConfig {
        precond: Precond::None,
        history,
        ..SolverConfig::default()
    };
    let (x, rep) = solve(&d, 2, SpmvMode::Halo, &none(false)).unwrap();
    let (xe, repe) = solve(&d, 2, SpmvMode::Halo, &none(true)).unwrap();
    assert!(rep.converged && rep.iterations == 2, "{rep:?}");
    assert_eq!(rep.iterations, repe.iterations);
    assert!(x.iter().zip(&xe).all(|(u, v)| u.to_bits() == v.to_bits()));
    assert_eq!(
        rep.relres_recurrence.to_bits(),
        repe.relres_recurrence.to_bits()
    );
    // Both iterations skipped the sum (the second left r.r below its floor's reach); the
    // check's reduction carried it: 2 per iteration plus the check, as computing it.
    assert_eq!(repe.reductions, 2 * 2 + 1);
    assert_eq!(
        (rep.reductions, rep.halo_exchanges),
        (repe.reductions, repe.halo_exchanges)
    );
}
