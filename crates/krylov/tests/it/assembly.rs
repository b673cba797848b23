//! Distributed assembly (issue #27): `DistCsr::from_local_rows` and
//! `MatrixPowers::from_local_rows` from each rank's own rows against their `from_global_with`
//! builds, bit for bit.

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{
    sparse::gen, Basis, Cpu, DistCsr, KrylovError, LocalRows, MatrixPowers, Method, Partition,
    Solution, Solver, SolverConfig, SpmvMode,
};
use castack_neighbor::Strategy;
use sprs::CsMat;

/// Every rank's solution entries and report, each way, with the partition `part`.
type Run = (Vec<u64>, u64, u64, u64, usize);

fn solve(
    comm: &dyn Communicator,
    dist: DistCsr,
    b: &[f64],
    method: Method,
) -> Result<Run, KrylovError> {
    let cfg = SolverConfig {
        method,
        k: 3,
        ..SolverConfig::default()
    };
    let mut s = Solver::new(comm, dist, cfg, Cpu::sequential())?;
    Ok(run_of(&s.solve(b, None)?))
}

/// A converged solve's solution bits and counts.
fn run_of(sol: &Solution) -> Run {
    let r = &sol.report;
    assert!(r.converged, "{r:?}");
    (
        sol.x.iter().map(|v| v.to_bits()).collect(),
        r.relres_true.to_bits(),
        r.reductions,
        r.halo_exchanges,
        r.iterations,
    )
}

fn compare(a: &CsMat<f64>, part: &Partition, mode: SpmvMode, exchange: Strategy) {
    let n = a.rows();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64 / 7.0).collect();
    let p = part.ranks();
    for method in [Method::Cg, Method::Pipecg, Method::Cbcgr] {
        let got = ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| -> Result<(Run, Run), KrylovError> {
                let range = part.range(comm.rank());
                let bl = &b[range.clone()];
                let global = DistCsr::from_global_with(comm, a.view(), part, mode, exchange)?;
                // This rank's rows alone, in global columns, as an application holds them.
                let ip = a.indptr();
                let ip = ip.raw_storage();
                let (lo, hi) = (ip[range.start], ip[range.end]);
                let rows = LocalRows {
                    indptr: &ip[range.start..=range.end],
                    cols: &a.indices()[lo..hi],
                    vals: &a.data()[lo..hi],
                };
                let (local, lpart) = DistCsr::from_local_rows(comm, rows, mode, exchange)?;
                assert_eq!(&lpart, part);
                assert_eq!(
                    (local.n(), local.nnz(), local.n_local(), local.row_start()),
                    (
                        global.n(),
                        global.nnz(),
                        global.n_local(),
                        global.row_start()
                    )
                );
                assert_eq!(local.ghosts(), global.ghosts());
                assert_eq!(local.local_csr(), global.local_csr());
                Ok((
                    solve(comm, global, bl, method)?,
                    solve(comm, local, bl, method)?,
                ))
            })
            .unwrap();
        for (rank, r) in got.into_iter().enumerate() {
            let (g, l) = r.unwrap();
            assert_eq!(g, l, "{method:?} {mode:?} rank {rank} of {p}");
        }
    }
}

#[test]
fn local_rows_assemble_the_block_from_global_builds_bit_for_bit() {
    let a = gen::poisson3d_heterogeneous(6, 1e3, 7).unwrap();
    let n = a.rows();
    for p in 1..=4 {
        let by_nnz = Partition::nnz(a.indptr().raw_storage(), p);
        for part in [Partition::rows(n, p), by_nnz] {
            compare(&a, &part, SpmvMode::Halo, Strategy::Naive);
        }
    }
    // An uneven distribution of the application's own, a rank without rows included, the
    // allgather SpMV and the segmented exchange.
    let part = Partition::from_counts([100, 0, 50, n - 150]);
    compare(
        &a,
        &part,
        SpmvMode::Halo,
        Strategy::Segmented { devices: 2 },
    );
    compare(&a, &part, SpmvMode::Allgather, Strategy::Naive);
}

#[test]
fn malformed_local_rows_fail_on_every_rank_with_the_offender_named() {
    let a = gen::poisson2d(6).unwrap();
    let part = Partition::rows(a.rows(), 3);
    let ip = a.indptr();
    let ip = ip.raw_storage();
    for fault in ["unsorted", "out_of_range", "short"] {
        let res = ThreadUniverse::new(3)
            .unwrap()
            .run(|comm| {
                let range = part.range(comm.rank());
                let (lo, hi) = (ip[range.start], ip[range.end]);
                let mut cols = a.indices()[lo..hi].to_vec();
                let mut vals = a.data()[lo..hi].to_vec();
                if comm.rank() == 1 {
                    match fault {
                        "unsorted" => cols.swap(0, 1),
                        "out_of_range" => *cols.last_mut().unwrap() = 1_000_000,
                        _ => {
                            vals.pop();
                        }
                    }
                }
                let rows = LocalRows {
                    indptr: &ip[range.start..=range.end],
                    cols: &cols,
                    vals: &vals,
                };
                DistCsr::from_local_rows(comm, rows, SpmvMode::Halo, Strategy::Naive)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .unwrap();
        for (rank, r) in res.into_iter().enumerate() {
            let e = r.expect_err(fault);
            if rank == 1 {
                assert!(e.contains("local rows of rank 1"), "{fault}: {e}");
            } else {
                assert!(e.contains("1 other rank(s)"), "{fault}: {e}");
            }
        }
    }
}

/// This rank's rows of `a` (offsets `ip`) under `part`, in global columns.
fn rows_of<'a>(a: &'a CsMat<f64>, ip: &'a [usize], part: &Partition, rank: usize) -> LocalRows<'a> {
    let range = part.range(rank);
    let (lo, hi) = (ip[range.start], ip[range.end]);
    LocalRows {
        indptr: &ip[range.start..=range.end],
        cols: &a.indices()[lo..hi],
        vals: &a.data()[lo..hi],
    }
}

/// An s-step solve through the matrix powers kernel `mpk`.
fn solve_mpk(
    comm: &dyn Communicator,
    dist: DistCsr,
    mpk: MatrixPowers,
    b: &[f64],
    method: Method,
    k: usize,
) -> Result<(Run, u64), KrylovError> {
    let cfg = SolverConfig {
        method,
        k,
        basis: Basis::Chebyshev,
        mpk: true,
        ..SolverConfig::default()
    };
    let mut s = Solver::with_mpk(comm, dist, mpk, cfg, Cpu::sequential())?;
    let sol = s.solve(b, None)?;
    Ok((run_of(&sol), sol.report.redundant_flops))
}

/// The matrix powers plan from each rank's own rows equals the one from the global matrix:
/// the same ghost zone (global indices level by level, send volumes, redundant flops) and
/// the same cbcgr and cacg solves, bit for bit, on 1 to 4 ranks, by rows and by nnz, with
/// an uneven distribution holding an empty rank, depths 1 to 4.
#[test]
fn matrix_powers_from_local_rows_equals_the_global_build_bit_for_bit() {
    let a = gen::poisson3d_heterogeneous(6, 1e3, 7).unwrap();
    let n = a.rows();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64 / 5.0).collect();
    let mut parts = Vec::new();
    for p in 1..=4 {
        parts.push(Partition::rows(n, p));
        parts.push(Partition::nnz(a.indptr().raw_storage(), p));
    }
    parts.push(Partition::from_counts([100, 0, 50, n - 150]));
    let ip = a.indptr();
    let ip = ip.raw_storage();
    for part in &parts {
        for (method, k) in [(Method::Cbcgr, 3), (Method::Cacg, 4), (Method::Cbcgr, 1)] {
            let got = ThreadUniverse::new(part.ranks())
                .unwrap()
                .run(|comm| -> Result<_, KrylovError> {
                    let me = comm.rank();
                    let bl = &b[part.range(me)];
                    let rows = rows_of(&a, ip, part, me);
                    let g =
                        MatrixPowers::from_global_with(comm, a.view(), part, k, Strategy::Naive)?;
                    let l = MatrixPowers::from_local_rows(comm, rows, part, k, Strategy::Naive)?;
                    assert_eq!(l.globals(), g.globals(), "rank {me}");
                    assert_eq!(l.level_sizes(), g.level_sizes(), "rank {me}");
                    assert_eq!(
                        (l.send_values(), l.pair_send_values()),
                        (g.send_values(), g.pair_send_values())
                    );
                    assert_eq!(
                        l.redundant_flops_per_build(k),
                        g.redundant_flops_per_build(k)
                    );
                    let (dl, _) =
                        DistCsr::from_local_rows(comm, rows, SpmvMode::Halo, Strategy::Naive)?;
                    let dg = DistCsr::from_global(comm, a.view(), part, SpmvMode::Halo)?;
                    Ok((
                        solve_mpk(comm, dg, g, bl, method, k)?,
                        solve_mpk(comm, dl, l, bl, method, k)?,
                    ))
                })
                .unwrap();
            for (rank, r) in got.into_iter().enumerate() {
                let (g, l) = r.unwrap();
                assert_eq!(g, l, "{method:?} k={k} rank {rank} of {}", part.ranks());
            }
        }
    }
}

/// Malformed input to `MatrixPowers::from_local_rows` fails on every rank, never leaving a
/// rank waiting: a bad depth, a partition of another rank count, rows that do not match
/// the partition, unsorted columns.
#[test]
fn matrix_powers_from_malformed_local_rows_fails_on_every_rank() {
    let a = gen::poisson2d(6).unwrap();
    let part = Partition::rows(a.rows(), 3);
    let ip = a.indptr();
    let ip = ip.raw_storage();
    let one_part = Partition::rows(a.rows(), 1);
    for fault in ["depth", "parts", "count", "unsorted"] {
        let res = ThreadUniverse::new(3)
            .unwrap()
            .run(|comm| {
                let me = comm.rank();
                let mut rows = rows_of(&a, ip, &part, me);
                let mut cols = rows.cols.to_vec();
                let mut k = 3;
                let mut p = &part;
                if me == 1 {
                    match fault {
                        "depth" => k = 0,
                        // A partition of another rank count (its range for rank 1 does
                        // not exist).
                        "parts" => p = &one_part,
                        "count" => rows.indptr = &rows.indptr[..rows.indptr.len() - 1],
                        _ => cols.swap(0, 1),
                    }
                }
                if fault == "count" && me == 1 {
                    let hi = rows.indptr.last().unwrap() - rows.indptr[0];
                    cols.truncate(hi);
                    rows.vals = &rows.vals[..hi];
                }
                rows.cols = &cols;
                MatrixPowers::from_local_rows(comm, rows, p, k, Strategy::Naive)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .unwrap();
        for (rank, r) in res.into_iter().enumerate() {
            let e = r.expect_err(fault);
            if rank == 1 {
                assert!(e.contains("local rows of rank 1"), "{fault}: {e}");
            } else {
                assert!(e.contains("1 other rank(s)"), "{fault}: {e}");
            }
        }
    }
}
