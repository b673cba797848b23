//! Solvers on the `sim` backend: the same iterates as on threads, and modeled times that
//! are deterministic, add up, and agree with the device model and the fabric's allreduce
//! price computed independently here.

use castack_collectives::fabric_sim::{Fabric, MemoryKind};
use castack_collectives::{
    AllreduceAlgo, Communicator, Datatype, Op, Reduction, SimOptions, SimUniverse, ThreadUniverse,
};
use castack_krylov::{
    sparse::gen, Cpu, DistCsr, MatrixPowers, Method, Partition, Precond, SolveReport, Solver,
    SolverConfig, SpmvMode,
};
use sprs::{CsMat, TriMat};

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
) -> RankOut {
    let dist = DistCsr::from_global(comm, a.view(), part, SpmvMode::Halo).unwrap();
    let mut solver = if cfg.mpk {
        let mpk = MatrixPowers::from_global(comm, a.view(), part, cfg.k).unwrap();
        Solver::with_mpk(comm, dist, mpk, cfg.clone(), Cpu::sequential()).unwrap()
    } else {
        Solver::new(comm, dist, cfg.clone(), Cpu::sequential()).unwrap()
    };
    let s = solver.solve(&b[part.range(comm.rank())], None).unwrap();
    let history = bits(s.report.history.as_deref().unwrap_or(&[]));
    (bits(&s.x), history, s.report)
}

/// Every rank's output on `p` thread ranks (`fabric: None`) or simulated ranks.
fn run(
    a: &CsMat<f64>,
    b: &[f64],
    p: usize,
    cfg: &SolverConfig,
    fabric: Option<&str>,
) -> Vec<RankOut> {
    let part = Partition::rows(a.rows(), p);
    let outs = match fabric {
        None => ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| rank_solve(comm, a, b, &part, cfg)),
        Some(f) => SimUniverse::new(p, Fabric::preset(f).unwrap(), SimOptions::default())
            .unwrap()
            .run(|comm| rank_solve(comm, a, b, &part, cfg)),
    };
    outs.unwrap()
}

fn poisson() -> (CsMat<f64>, Vec<f64>) {
    let a = gen::poisson3d(6).unwrap();
    let b = (0..a.rows())
        .map(|i| ((i * 37) % 11) as f64 - 5.0)
        .collect();
    (a, b)
}

/// Every method, the s-step ones also through the matrix powers kernel.
fn configs() -> Vec<SolverConfig> {
    let mut out = Vec::new();
    for &method in Method::ALL {
        let cfg = SolverConfig {
            method,
            history: true,
            ..SolverConfig::default()
        };
        if method.is_s_step() {
            out.push(SolverConfig {
                mpk: true,
                ..cfg.clone()
            });
        }
        out.push(cfg);
    }
    out
}

fn sum(r: &SolveReport) -> f64 {
    let t = &r.time_breakdown;
    t.spmv + t.blas + t.allreduce + t.halo + t.other
}

#[test]
fn sim_iterates_are_bit_identical_to_threads_and_times_add_up() {
    let (a, b) = poisson();
    for cfg in configs() {
        for p in [1, 3, 4] {
            let what = format!("{} mpk={} p={p}", cfg.method, cfg.mpk);
            let threads = run(&a, &b, p, &cfg, None);
            let sim = run(&a, &b, p, &cfg, Some("peach2"));
            assert!(sim[0].2.converged, "{what}");
            for (t, s) in threads.iter().zip(&sim) {
                assert_eq!(t.0, s.0, "{what}: x");
                assert_eq!(t.1, s.1, "{what}: history");
                let (tr, sr) = (&t.2, &s.2);
                assert_eq!(tr.iterations, sr.iterations, "{what}");
                assert_eq!(tr.relres_true.to_bits(), sr.relres_true.to_bits(), "{what}");
                assert_eq!(tr.reductions, sr.reductions, "{what}");
                assert_eq!(tr.halo_exchanges, sr.halo_exchanges, "{what}");
                assert!(!tr.modeled && sr.modeled, "{what}");
                // The breakdown sums to time_s (`other` is not clamped: the buckets are
                // disjoint intervals of one clock).
                let tb = &sr.time_breakdown;
                for v in [tb.spmv, tb.blas, tb.allreduce, tb.halo, tb.other] {
                    assert!(v >= 0.0, "{what}: {tb:?}");
                }
                assert!(
                    (sum(sr) - sr.time_s).abs() <= 1e-12 * sr.time_s,
                    "{what}: {tb:?} vs {}",
                    sr.time_s
                );
                assert!(tb.spmv > 0.0 && tb.blas > 0.0, "{what}: {tb:?}");
                if p > 1 {
                    assert!(tb.allreduce > 0.0 && tb.halo > 0.0, "{what}: {tb:?}");
                }
            }
        }
    }
}

#[test]
fn modeled_times_repeat_to_the_bit() {
    let (a, b) = poisson();
    for cfg in configs() {
        let first = run(&a, &b, 4, &cfg, Some("ib-qdr"));
        let second = run(&a, &b, 4, &cfg, Some("ib-qdr"));
        for (x, y) in first.iter().zip(&second) {
            let (rx, ry) = (&x.2, &y.2);
            assert_eq!(rx.time_s.to_bits(), ry.time_s.to_bits(), "{}", cfg.method);
            let (tx, ty) = (&rx.time_breakdown, &ry.time_breakdown);
            for (u, v) in [
                (tx.spmv, ty.spmv),
                (tx.blas, ty.blas),
                (tx.allreduce, ty.allreduce),
                (tx.halo, ty.halo),
                (tx.other, ty.other),
            ] {
                assert_eq!(u.to_bits(), v.to_bits(), "{}: {tx:?} {ty:?}", cfg.method);
            }
        }
    }
}

/// Roofline of the host device model, from the fabric's numbers.
fn host_time(fabric: &Fabric, bytes: f64, flops: f64) -> f64 {
    let d = fabric.device_model(MemoryKind::Host).unwrap();
    d.launch_us * 1e-6 + (bytes / (d.mem_bandwidth_gbs * 1e9)).max(flops / (d.gflops * 1e9))
}

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs()
}

#[test]
fn one_rank_cg_time_is_the_device_model_of_the_work_counted_by_hand() {
    let a = gen::poisson3d(8).unwrap();
    let (n, nnz) = (a.rows() as f64, a.nnz() as f64);
    let b: Vec<f64> = (0..a.rows()).map(|i| 1.0 + (i % 3) as f64).collect();
    // `history` makes every iteration compute the original-norm sum (cg.rs): the work
    // counted here. The default leaves it out far from the target (checked below).
    let cfg = SolverConfig {
        history: true,
        ..SolverConfig::default()
    };
    let out = run(&a, &b, 1, &cfg, Some("peach2"));
    let r = &out[0].2;
    assert!(r.converged && r.residual_replacements == 0, "{r:?}");
    let fabric = Fabric::preset("peach2").unwrap();
    // One SpMV: values and column indices (8 + 4 bytes per entry), row pointers (n + 1),
    // y written and x read once (8 bytes each per row); 2 flops per entry (the loop's SpMV
    // also forms p.q on the fly: 2 flops per row more, still memory-bound).
    let spmv = host_time(&fabric, 12.0 * nnz + 8.0 * (n + 1.0) + 16.0 * n, 2.0 * nnz);
    // The final check: the SpMV fused with b - A x, its sums and the bound on its
    // rounding error (`residual_bound`): the SpMV's traffic plus b and the weights, 1
    // flop per entry more (|a_ij x_j| summed) and 12 per row.
    let check = host_time(
        &fabric,
        12.0 * nnz + 8.0 * (n + 1.0) + 32.0 * n,
        3.0 * nnz + 12.0 * n,
    );
    // One iteration: the fused r update with r.r and r.W r (3 reads, 1 write), then
    // x += a p with p = r + b p in one pass (3 reads, 2 writes); the last iteration updates
    // x alone (2 reads, 1 write): each a separate memory-bound pass.
    let fused = host_time(&fabric, 32.0 * n, 7.0 * n);
    let blas_iter = fused + host_time(&fabric, 40.0 * n, 4.0 * n);
    let blas_last = fused + host_time(&fabric, 24.0 * n, 2.0 * n);
    let copy = host_time(&fabric, 16.0 * n, 0.0);
    // Once: b in (a copy), b̂ = S b (2 reads, 1 write), r = b̂ and p = r (copies), r.r and
    // r.W r (2 reads each), the final check's x̂ made what the caller receives (2 reads,
    // 1 write), x = S x̂ and x out (a product and a copy).
    let blas_once = 4.0 * copy
        + 2.0 * host_time(&fabric, 24.0 * n, n)
        + host_time(&fabric, 24.0 * n, 2.0 * n)
        + host_time(&fabric, 16.0 * n, 2.0 * n)
        + host_time(&fabric, 16.0 * n, 3.0 * n);
    let it = r.iterations as f64;
    let t = &r.time_breakdown;
    // SpMVs: one per iteration and the final check's.
    assert_eq!(r.halo_exchanges, r.iterations as u64 + 1);
    assert!(
        close(t.spmv, it * spmv + check, 1e-9),
        "{} vs {}",
        t.spmv,
        it * spmv + check
    );
    let blas = (it - 1.0) * blas_iter + blas_last + blas_once;
    assert!(close(t.blas, blas, 1e-9), "{} vs {blas}", t.blas);
    // One rank: no messages, reductions and exchanges cost nothing; no host-device copies.
    assert!(
        t.allreduce.abs() < 1e-15 && t.halo.abs() < 1e-15 && t.transfer == 0.0,
        "{t:?}"
    );
    // `other`: ||b||^2 on the host, where b is.
    let other = host_time(&fabric, 8.0 * n, 2.0 * n);
    assert!(close(t.other, other, 1e-9), "{} vs {other}", t.other);
    assert!(close(r.time_s, it * spmv + check + blas + other, 1e-9));

    // The default: the same iterations and SpMVs; each iteration far from the target
    // updates r with r.r alone (2 reads, 1 write) instead of the fused pass with the
    // weighted norm, so the vector work lies between all and none of them doing so.
    let d = &run(&a, &b, 1, &SolverConfig::default(), Some("peach2"))[0].2;
    assert_eq!((d.iterations, d.reductions), (r.iterations, r.reductions));
    assert!(close(d.time_breakdown.spmv, t.spmv, 1e-12));
    let saved = fused - host_time(&fabric, 24.0 * n, 4.0 * n);
    let db = d.time_breakdown.blas;
    assert!(db < blas - 0.5 * saved, "{db} vs {blas}: no sum left out");
    assert!(
        db >= blas - (it - 1.0) * saved * (1.0 + 1e-9),
        "{db} vs {blas}"
    );
}

/// A diagonal matrix with `distinct` eigenvalues, `m` rows per rank: every rank does the
/// same work and exchanges nothing, so all enter every reduction at the same time.
fn diagonal(p: usize, m: usize, distinct: usize) -> CsMat<f64> {
    let n = p * m;
    let mut t = TriMat::new((n, n));
    for i in 0..n {
        t.add_triplet(i, i, 1.0 + ((i * 7) % distinct) as f64);
    }
    t.to_csr()
}

#[test]
fn allreduce_bucket_is_the_fabric_price_times_the_reductions() {
    let p = 4;
    let a = diagonal(p, 64, 9);
    let b: Vec<f64> = (0..a.rows()).map(|i| 1.0 + (i % 5) as f64).collect();
    // `history`: every iteration reduces [r.r, ||r||_w^2] (cg.rs), the count below.
    let cfg = SolverConfig {
        precond: Precond::None,
        history: true,
        ..SolverConfig::default()
    };
    for fabric in ["peach2", "ib-qdr"] {
        let out = run(&a, &b, p, &cfg, Some(fabric));
        let universe =
            SimUniverse::new(p, Fabric::preset(fabric).unwrap(), SimOptions::default()).unwrap();
        let red = Reduction {
            op: Op::Sum,
            datatype: Datatype::F64,
        };
        let price = |values: usize| {
            let sched = AllreduceAlgo::default().schedule(p, 8 * values, red);
            universe.price(&sched).unwrap()
        };
        let (one, two, four) = (price(1), price(2), price(4));
        for (rank, o) in out.iter().enumerate() {
            let r = &o.2;
            assert!(r.converged && r.iterations > 3, "{r:?}");
            // cg: ||b|| (4 values: three scaled sums and the nonzero count, solver.rs) and
            // the initial norms (2) before the loop; per iteration
            // p.Ap (1) and [r.r, ||r||_w^2] (2); per true-residual check 4 (its third place
            // that of an undecided recurrence sum, the fourth the bound on its rounding
            // error, cg.rs).
            let it = r.iterations as u64;
            let checks = r.reductions - 2 * it;
            assert_eq!(r.setup_reductions, 2);
            let want = four[rank]
                + it as f64 * one[rank]
                + (1 + it) as f64 * two[rank]
                + checks as f64 * four[rank];
            let got = r.time_breakdown.allreduce;
            assert!(
                close(got, want, 1e-6),
                "{fabric} rank {rank}: allreduce {got:e} s, priced {want:e} s"
            );
        }
    }
}
