//! The embedder's monitor (`Solver::set_monitor`, `Solver::set_progress`) and the Ritz-value
//! estimates of `SolverConfig::eigs`, against independent references: the solve's own
//! `history`, and operators with a known spectrum.

use std::sync::{Arc, Mutex};

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Basis, Cpu, DistCsr, KrylovError, Method, Partition, Precond, SolveReport, Solver,
    SolverConfig, SpmvMode,
};
use castack_test_support::reference::CsrRef;
use sprs::{CsMat, TriMat};

/// (iteration, relative residual) calls one rank's monitor received.
type Calls = Vec<(usize, f64)>;

#[derive(Clone, Copy, PartialEq)]
enum Hook {
    None,
    /// `set_monitor` on every rank.
    Monitor,
    /// `set_progress` on rank 0 only.
    Progress,
}

/// Solve `a x = b` on `p` thread ranks with `hook`: rank 0's report and every rank's calls.
fn run(
    a: &CsMat<f64>,
    b: &[f64],
    p: usize,
    cfg: &SolverConfig,
    hook: Hook,
) -> Result<(SolveReport, Vec<Calls>), KrylovError> {
    let part = Partition::rows(a.rows(), p);
    let out = ThreadUniverse::new(p)?.run(|comm| {
        let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
        let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
        let calls = Arc::new(Mutex::new(Calls::new()));
        let sink = Arc::clone(&calls);
        let record = move |i: usize, r: f64| sink.lock().unwrap().push((i, r));
        match hook {
            Hook::None => {}
            Hook::Monitor => solver.set_monitor(record),
            Hook::Progress if comm.rank() == 0 => solver.set_progress(record),
            Hook::Progress => {}
        }
        let sol = solver.solve(&b[part.range(comm.rank())], None)?;
        let calls = calls.lock().unwrap().clone();
        Ok::<_, KrylovError>((sol.report, calls))
    })?;
    let mut report = None;
    let mut calls = Vec::new();
    for o in out {
        let (r, c) = o?;
        report.get_or_insert(r);
        calls.push(c);
    }
    Ok((report.expect("one rank"), calls))
}

fn cfg(method: Method) -> SolverConfig {
    SolverConfig {
        method,
        k: 4,
        ..SolverConfig::default()
    }
}

/// Whether the method's history has one entry per outer step (the block methods) rather
/// than per CG-equivalent iteration.
fn history_per_outer_step(m: Method) -> bool {
    matches!(m, Method::Cbcg | Method::Cbcgr)
}

#[test]
fn the_monitor_sees_each_iterations_history_value_on_every_rank_and_changes_nothing() {
    // Unequal weights (Jacobi on a varying diagonal): cg's skipped original-norm sums
    // would show as lower bounds.
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
    for &method in Method::ALL {
        let with_history = SolverConfig {
            history: true,
            ..cfg(method)
        };
        let (h, _) = run(&a, &b, 3, &with_history, Hook::None).unwrap();
        let (plain, _) = run(&a, &b, 3, &cfg(method), Hook::None).unwrap();
        let (m, calls) = run(&a, &b, 3, &cfg(method), Hook::Monitor).unwrap();
        let name = method.name();
        assert!(m.converged, "{name}");
        assert_eq!(m.history, None, "{name}: the monitor records no history");
        // The monitor changes neither iterates nor counts (those of computing the sums,
        // as with history).
        for r in [&h, &plain] {
            assert_eq!(m.iterations, r.iterations, "{name}");
            assert_eq!(m.equivalent_iterations, r.equivalent_iterations, "{name}");
            assert_eq!(m.relres_true.to_bits(), r.relres_true.to_bits(), "{name}");
        }
        assert_eq!(m.reductions, h.reductions, "{name}");
        assert_eq!(m.halo_exchanges, h.halo_exchanges, "{name}");
        // Every rank sees the same calls.
        for c in &calls[1..] {
            assert_eq!(c, &calls[0], "{name}: ranks disagree");
        }
        let calls = &calls[0];
        let hist = h.history.as_deref().unwrap();
        assert!(!calls.is_empty(), "{name}");
        // Iterations count CG-equivalent iterations, increasing, ending where the solve did.
        assert!(
            calls.windows(2).all(|w| w[0].0 < w[1].0),
            "{name}: {calls:?}"
        );
        assert_eq!(
            calls.last().unwrap().0,
            m.equivalent_iterations,
            "{name}: {calls:?}"
        );
        for (idx, &(it, rel)) in calls.iter().enumerate() {
            let want = if history_per_outer_step(method) {
                hist[idx]
            } else {
                hist[it - 1]
            };
            assert_eq!(rel.to_bits(), want.to_bits(), "{name} call {idx}: it {it}");
        }
        if method.is_s_step() {
            // One call per outer step (cacg: per outer step that took inner iterations).
            assert!(calls.len() <= m.iterations, "{name}");
            assert!(calls.len() * 2 <= m.equivalent_iterations, "{name}");
        } else {
            assert_eq!(calls.len(), m.iterations, "{name}");
            assert!(
                calls.iter().enumerate().all(|(i, c)| c.0 == i + 1),
                "{name}"
            );
        }
    }
}

#[test]
fn a_progress_callback_on_one_rank_sees_lower_bounds_and_changes_no_count() {
    let a = gen::poisson3d_heterogeneous(8, 1e3, 1).unwrap();
    let b = CsrRef::of(&a).matvec(&vec![1.0; a.rows()]);
    let with_history = SolverConfig {
        history: true,
        ..cfg(Method::Cg)
    };
    let (h, _) = run(&a, &b, 3, &with_history, Hook::None).unwrap();
    let (plain, _) = run(&a, &b, 3, &cfg(Method::Cg), Hook::None).unwrap();
    let (p, calls) = run(&a, &b, 3, &cfg(Method::Cg), Hook::Progress).unwrap();
    // Only rank 0 set it, and the ranks' reductions still matched.
    assert!(calls[1].is_empty() && calls[2].is_empty());
    assert_eq!(p.reductions, plain.reductions);
    assert_eq!(p.halo_exchanges, plain.halo_exchanges);
    assert_eq!(p.iterations, plain.iterations);
    let hist = h.history.as_deref().unwrap();
    assert_eq!(calls[0].len(), hist.len());
    let mut below = 0;
    for (&(it, v), &want) in calls[0].iter().zip(hist) {
        assert!(v <= want * (1.0 + 1e-12), "iteration {it}: {v} > {want}");
        below += usize::from(v < want * (1.0 - 1e-3));
    }
    // Far from the target cg left the sum out and reported its floor; at the end the sum.
    assert!(below > 0, "no lower bound seen: the test would not tell");
    assert_eq!(
        calls[0].last().unwrap().1.to_bits(),
        hist.last().unwrap().to_bits()
    );
}

/// `diag(values)`.
fn diagonal(values: &[f64]) -> CsMat<f64> {
    let n = values.len();
    let mut t = TriMat::new((n, n));
    for (i, &v) in values.iter().enumerate() {
        t.add_triplet(i, i, v);
    }
    t.to_csr()
}

/// `D^1/2 T D^1/2` with `T = tridiag(-1/2, 1, -1/2)` of order `n` and `D = diag(1..n)^2`:
/// Jacobi scaling (diagonal `D`) turns it into exactly `T`, whose eigenvalues are
/// `1 - cos(j pi / (n + 1))`, `j = 1..n`.
fn scaled_laplacian(n: usize) -> CsMat<f64> {
    let d = |i: usize| ((i + 1) * (i + 1)) as f64;
    let mut t = TriMat::new((n, n));
    for i in 0..n {
        t.add_triplet(i, i, d(i));
        if i + 1 < n {
            let v = -0.5 * (d(i) * d(i + 1)).sqrt();
            t.add_triplet(i, i + 1, v);
            t.add_triplet(i + 1, i, v);
        }
    }
    t.to_csr()
}

fn eig_cases() -> Vec<SolverConfig> {
    let mut out: Vec<SolverConfig> = [Method::Cg, Method::Ccg, Method::Pipecg]
        .into_iter()
        .map(cfg)
        .collect();
    for basis in [Basis::Monomial, Basis::Chebyshev] {
        out.push(SolverConfig {
            basis,
            ..cfg(Method::Cacg)
        });
    }
    for c in &mut out {
        c.eigs = true;
    }
    out
}

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs()
}

#[test]
fn eigs_of_a_diagonal_matrix_are_its_extreme_entries_unscaled_and_one_scaled() {
    let values: Vec<f64> = (1..=100).map(f64::from).collect();
    let a = diagonal(&values);
    let b = vec![1.0; 100];
    for base in eig_cases() {
        let name = format!("{}:{}", base.method.name(), base.basis.name());
        let none = SolverConfig {
            precond: Precond::None,
            ..base.clone()
        };
        for p in [1, 3] {
            let (r, _) = run(&a, &b, p, &none, Hook::None).unwrap();
            assert!(r.converged, "{name}");
            let e = r.eigs.unwrap_or_else(|| panic!("{name}: no eigs"));
            assert!(close(e.lambda_min, 1.0, 1e-6), "{name} p={p}: {e:?}");
            assert!(close(e.lambda_max, 100.0, 1e-6), "{name} p={p}: {e:?}");
            assert!(close(e.condition, 100.0, 1e-5), "{name} p={p}: {e:?}");
            assert!(e.steps >= 2 && e.steps <= r.equivalent_iterations, "{e:?}");
        }
        // Jacobi makes the operator the identity: every Ritz value is 1. (Not cacg: its
        // r'^T G r' rounds below zero at the exact solution after one step, a breakdown.)
        if base.method == Method::Cacg {
            continue;
        }
        let (r, _) = run(&a, &b, 2, &base, Hook::None).unwrap();
        let e = r.eigs.unwrap();
        assert!(close(e.lambda_min, 1.0, 1e-12), "{name}: {e:?}");
        assert!(close(e.lambda_max, 1.0, 1e-12), "{name}: {e:?}");
    }
}

#[test]
fn eigs_are_those_of_the_jacobi_scaled_operator() {
    // Large enough that CG converges before its Krylov space is exhausted.
    let n = 400;
    let a = scaled_laplacian(n);
    let mut rng = gen::SplitMix64::new(7);
    let b: Vec<f64> = (0..n).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
    let c = (std::f64::consts::PI / (n + 1) as f64).cos();
    let (lmin, lmax) = (1.0 - c, 1.0 + c);
    for base in eig_cases() {
        let name = format!("{}:{}", base.method.name(), base.basis.name());
        let (r, _) = run(&a, &b, 2, &base, Hook::None).unwrap();
        assert!(r.converged, "{name}");
        let e = r.eigs.unwrap();
        assert!(close(e.lambda_min, lmin, 1e-4), "{name}: {e:?} vs {lmin}");
        assert!(close(e.lambda_max, lmax, 1e-6), "{name}: {e:?} vs {lmax}");
        assert!(close(e.condition, lmax / lmin, 1e-4), "{name}: {e:?}");
    }
}

#[test]
fn eigs_are_null_unless_asked_and_refused_by_the_block_methods() {
    let a = gen::poisson2d(8).unwrap();
    let b = vec![1.0; a.rows()];
    let (r, _) = run(&a, &b, 1, &cfg(Method::Cg), Hook::None).unwrap();
    assert_eq!(r.eigs, None);
    for method in [Method::Cbcg, Method::Cbcgr] {
        let c = SolverConfig {
            eigs: true,
            ..cfg(method)
        };
        match run(&a, &b, 1, &c, Hook::None) {
            Err(KrylovError::InvalidConfig(m)) => {
                assert!(m.contains("eigs") && m.contains(method.name()), "{m}")
            }
            other => panic!("{}: {other:?}", method.name()),
        }
    }
}
