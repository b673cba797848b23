//! Distributed assembly (issue #27): `DistCsr::from_local_rows` from each rank's own rows
//! against `DistCsr::from_global_with`, bit for bit.

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{
    gen, Cpu, DistCsr, KrylovError, LocalRows, Method, Partition, Solver, SolverConfig, SpmvMode,
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
    let sol = s.solve(b, None)?;
    let r = sol.report;
    assert!(r.converged, "{r:?}");
    Ok((
        sol.x.iter().map(|v| v.to_bits()).collect(),
        r.relres_true.to_bits(),
        r.reductions,
        r.halo_exchanges,
        r.iterations,
    ))
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
