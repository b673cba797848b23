//! Loop preconditioners (`bjacobi_ic0`, `chebyshev`, an embedder's) end to end: exactness
//! where the preconditioner is the inverse, fewer iterations than Jacobi on heterogeneous
//! matrices, the counts the module docs give, the same bits on threads and sim, and the
//! refusals (GPU model with IC(0), matrix powers kernel).

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{Communicator, SimOptions, SimUniverse, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Cpu, DistCsr, DistVec, KrylovError, LinearOperator, Method, Ops, Partition,
    Precond, Preconditioner, SolveReport, Solver, SolverConfig, SpmvMode,
};
use castack_test_support::reference::{relres, CsrRef};
use sprs::{CsMat, TriMat};

/// The methods with a preconditioned form.
const METHODS: &[Method] = &[
    Method::Cg,
    Method::Ccg,
    Method::Pipecg,
    Method::Cbcg,
    Method::Cbcgr,
    Method::Cacg,
];

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

/// The gathered x and rank 0's report on `p` thread ranks, or simulated ones on `fabric`.
fn solve(
    a: &CsMat<f64>,
    b: &[f64],
    p: usize,
    cfg: &SolverConfig,
    fabric: Option<&str>,
) -> Result<(Vec<f64>, SolveReport), KrylovError> {
    let part = Partition::rows(a.rows(), p);
    let outs = match fabric {
        None => ThreadUniverse::new(p)?.run(|comm| rank_solve(comm, a, b, &part, cfg))?,
        Some(f) => SimUniverse::new(p, Fabric::preset(f).unwrap(), SimOptions::default())
            .unwrap()
            .run(|comm| rank_solve(comm, a, b, &part, cfg))
            .unwrap(),
    };
    let mut x = Vec::new();
    let mut report = None;
    for o in outs {
        let (xr, r) = o?;
        x.extend(xr);
        report.get_or_insert(r);
    }
    Ok((x, report.unwrap()))
}

fn cfg(method: Method, precond: Precond) -> SolverConfig {
    SolverConfig {
        method,
        precond,
        tol: 1e-9,
        ..SolverConfig::default()
    }
}

fn ones_rhs(a: &CsMat<f64>) -> Vec<f64> {
    CsrRef::of(a).matvec(&vec![1.0; a.rows()])
}

fn tridiagonal(n: usize) -> CsMat<f64> {
    let mut t = TriMat::new((n, n));
    for i in 0..n {
        t.add_triplet(i, i, 2.0 + (i % 7) as f64);
        if i + 1 < n {
            t.add_triplet(i, i + 1, -1.0 - (i % 3) as f64 * 0.3);
            t.add_triplet(i + 1, i, -1.0 - (i % 3) as f64 * 0.3);
        }
    }
    t.to_csr()
}

/// On one rank a tridiagonal matrix's IC(0) is its exact Cholesky factor, so `M = A` and
/// every preconditioned method is exact after one (outer) step, then the check.
#[test]
fn ic0_of_a_tridiagonal_matrix_is_exact_and_cg_takes_one_step() {
    let a = tridiagonal(200);
    let b = ones_rhs(&a);
    for &method in METHODS {
        let (x, r) = solve(&a, &b, 1, &cfg(method, Precond::BjacobiIc0), None).unwrap();
        assert!(r.converged, "{method}");
        // cg-like methods: one iteration; s-step methods: within one block of k steps
        // (their basis of `M^-1 A = I` is one vector repeated: cacg's adaptive s takes it
        // one column at a time).
        let most = if method.is_s_step() { r.k.unwrap() } else { 1 };
        assert!(r.equivalent_iterations <= most, "{method}: {r:?}");
        assert_eq!(r.precond_shift, Some(0.0));
        assert!(x.iter().all(|v| (v - 1.0).abs() < 1e-10), "{method}");
    }
}

/// On heterogeneous matrices both preconditioners need fewer iterations than Jacobi (and
/// Chebyshev fewer reductions), on 1 and 3 ranks, and every solve converges on the true
/// residual, checked here independently of the report.
#[test]
fn preconditioners_cut_iterations_against_jacobi() {
    let a = gen::poisson3d_heterogeneous(10, 1e4, 3).unwrap();
    let b = ones_rhs(&a);
    for &method in METHODS {
        for p in [1, 3] {
            let (_, jac) = solve(&a, &b, p, &cfg(method, Precond::Jacobi), None).unwrap();
            assert!(jac.converged);
            for pc in [Precond::BjacobiIc0, Precond::Chebyshev] {
                let what = format!("{method} {} p={p}", pc.name());
                let (x, r) = solve(&a, &b, p, &cfg(method, pc), None).unwrap();
                assert!(r.converged, "{what}");
                assert!(relres(CsrRef::of(&a), &b, &x) <= 1e-9, "{what}");
                assert!(
                    r.equivalent_iterations * 10 < jac.equivalent_iterations * 8,
                    "{what}: {} vs jacobi {}",
                    r.equivalent_iterations,
                    jac.equivalent_iterations
                );
                assert!(r.reductions < jac.reductions, "{what}");
                assert!(r.time_breakdown.precond > 0.0, "{what}");
            }
        }
    }
}

/// cg's counts with a loop preconditioner, as `cg.rs` gives them: 2 reductions per
/// iteration plus the check, one exchange per iteration plus the check plus the
/// polynomial's `D` per application in the loop, applications = 1 + iterations (the
/// first in set-up).
#[test]
fn cg_counts_with_a_preconditioner() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 2).unwrap();
    let b = ones_rhs(&a);
    for degree in [1, 2, 5] {
        let c = SolverConfig {
            precond_degree: degree,
            ..cfg(Method::Cg, Precond::Chebyshev)
        };
        let (_, r) = solve(&a, &b, 3, &c, None).unwrap();
        assert!(r.converged && r.residual_replacements == 0);
        let it = r.iterations as u64;
        assert_eq!(r.precond_applies, it + 1);
        assert_eq!(r.precond_degree, Some(degree));
        assert_eq!(r.reductions, 2 * it + 1);
        // The first application is set-up work: its exchanges are set-up exchanges.
        assert_eq!(r.halo_exchanges, it + 1 + degree as u64 * it);
        // Set-up: the scaling exchange and the first application.
        assert_eq!(r.setup_halo_exchanges, 1 + degree as u64);
    }
    let (_, r) = solve(&a, &b, 3, &cfg(Method::Cg, Precond::BjacobiIc0), None).unwrap();
    let it = r.iterations as u64;
    assert_eq!(r.precond_applies, it + 1);
    assert_eq!((r.reductions, r.halo_exchanges), (2 * it + 1, it + 1));
    assert!(r.precond_degree.is_none() && r.precond_shift.is_some());
}

/// Threads and the simulator run the same code on the same values: the same bits.
#[test]
fn sim_and_threads_give_the_same_bits_with_preconditioners() {
    let a = gen::poisson3d_heterogeneous(6, 1e3, 4).unwrap();
    let b = ones_rhs(&a);
    for &method in METHODS {
        for pc in [Precond::BjacobiIc0, Precond::Chebyshev] {
            for p in [1, 3] {
                let c = cfg(method, pc);
                let (xt, rt) = solve(&a, &b, p, &c, None).unwrap();
                let (xs, rs) = solve(&a, &b, p, &c, Some("peach2")).unwrap();
                let what = format!("{method} {} p={p}", pc.name());
                assert_eq!(bits(&xt), bits(&xs), "{what}");
                assert_eq!(rt.iterations, rs.iterations, "{what}");
                assert_eq!(rt.relres_true.to_bits(), rs.relres_true.to_bits(), "{what}");
                assert_eq!(
                    (rt.reductions, rt.halo_exchanges, rt.precond_applies),
                    (rs.reductions, rs.halo_exchanges, rs.precond_applies),
                    "{what}"
                );
                let tb = &rs.time_breakdown;
                assert!(tb.precond > 0.0, "{what}: {tb:?}");
                let sum = tb.spmv + tb.blas + tb.allreduce + tb.halo + tb.transfer + tb.precond;
                assert!((sum + tb.other - rs.time_s).abs() <= 1e-12 * rs.time_s);
            }
        }
    }
}

/// A matrix whose IC(0) breaks down (SPD, not an H-matrix): the factorization is shifted,
/// the report says by how much, and the solve still converges.
#[test]
fn a_failing_ic0_is_shifted_and_reported() {
    let dense = [
        [1.0, 0.6, 0.0, 0.6],
        [0.6, 1.0, 0.6, 0.0],
        [0.0, 0.6, 1.0, -0.6],
        [0.6, 0.0, -0.6, 1.0],
    ];
    let mut t = TriMat::new((4, 4));
    for (i, row) in dense.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            if v != 0.0 {
                t.add_triplet(i, j, v);
            }
        }
    }
    let a: CsMat<f64> = t.to_csr();
    let b = ones_rhs(&a);
    let (x, r) = solve(&a, &b, 1, &cfg(Method::Cg, Precond::BjacobiIc0), None).unwrap();
    assert!(r.converged);
    let shift = r.precond_shift.unwrap();
    assert!((1e-3..=2.0).contains(&shift), "{shift}");
    assert!(x.iter().all(|v| (v - 1.0).abs() < 1e-8));
}

/// IC(0) needs triangular solves the GPU model does not have; the matrix powers kernel
/// cannot apply a preconditioner between its SpMVs: both are refused at set-up with a
/// message naming them.
#[test]
fn refusals_name_the_reason() {
    let a = gen::poisson2d(8).unwrap();
    let part = Partition::rows(a.rows(), 1);
    let out = ThreadUniverse::new(1)
        .unwrap()
        .run(|comm| {
            let d = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo).unwrap();
            let c = cfg(Method::Cg, Precond::BjacobiIc0);
            Solver::new(comm, d, c, Cpu::sequential().modeling_gpu())
                .err()
                .map(|e| e.to_string())
        })
        .unwrap();
    let e = out[0].clone().expect("refused");
    assert!(e.contains("bjacobi_ic0") && e.contains("cuda"), "{e}");
    let c = SolverConfig {
        mpk: true,
        method: Method::Cacg,
        ..cfg(Method::Cacg, Precond::Chebyshev)
    };
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("mpk") && e.contains("chebyshev"), "{e}");
    let c = SolverConfig {
        precond_degree: 0,
        ..cfg(Method::Cg, Precond::Chebyshev)
    };
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("precond_degree"));
}

/// An embedder's preconditioner: the exact inverse of a diagonal matrix (here `M^-1 = Â^-1`
/// for the unscaled `precond = none` system), applied through the device layer. CG then
/// takes one step; the report names it `user` and counts its applications.
struct DiagonalInverse {
    inv: Vec<f64>,
    r_host: Vec<f64>,
}

impl<C: Communicator + ?Sized> Preconditioner<C, Cpu> for DiagonalInverse {
    fn apply(
        &mut self,
        _a: &mut dyn LinearOperator<C, Cpu>,
        ops: &mut Ops<'_, C, Cpu>,
        r: &DistVec<Cpu>,
        z: &mut DistVec<Cpu>,
    ) -> Result<(), KrylovError> {
        let n = self.inv.len();
        ops.stage_out(
            r.raw(),
            0,
            &mut self.r_host[..n],
            castack_krylov::Bucket::Blas,
        )?;
        for (v, d) in self.r_host.iter_mut().zip(&self.inv) {
            *v *= d;
        }
        Ok(ops.stage_in(
            &self.r_host[..n],
            z.raw_mut(),
            0,
            castack_krylov::Bucket::Blas,
        )?)
    }
}

#[test]
fn an_embedders_preconditioner_is_applied_by_the_solver() {
    let n = 50;
    let mut t = TriMat::new((n, n));
    for i in 0..n {
        t.add_triplet(i, i, 1.0 + i as f64 * i as f64);
    }
    let a: CsMat<f64> = t.to_csr();
    let b = ones_rhs(&a);
    let part = Partition::rows(n, 2);
    let outs = ThreadUniverse::new(2)
        .unwrap()
        .run(|comm| {
            let d = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo).unwrap();
            let range = part.range(comm.rank());
            let inv: Vec<f64> = range
                .clone()
                .map(|i| 1.0 / (1.0 + (i * i) as f64))
                .collect();
            let c = cfg(Method::Cg, Precond::None);
            let mut s = Solver::new(comm, d, c, Cpu::sequential()).unwrap();
            let unpreconditioned = s.solve(&b[range.clone()], None).unwrap().report;
            let m = inv.len();
            s.set_preconditioner(Box::new(DiagonalInverse {
                inv,
                r_host: vec![0.0; m],
            }))
            .unwrap();
            let sol = s.solve(&b[range], None).unwrap();
            (unpreconditioned, sol)
        })
        .unwrap();
    for (plain, sol) in outs {
        assert!(plain.equivalent_iterations > 10);
        assert_eq!(sol.report.precond, "user");
        assert!(sol.report.converged);
        assert_eq!(sol.report.equivalent_iterations, 1);
        assert_eq!(sol.report.precond_applies, 2);
        assert!(sol.x.iter().all(|v| (v - 1.0).abs() < 1e-12));
    }
}
