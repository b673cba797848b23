//! Distributed assembly: every rank builds ONLY its own rows (no rank ever holds the global
//! matrix), hands them to `DistCsr::from_local_rows` with global column indices, and solves.
//! The operator is the 2-D five-point Laplacian on an `m x m` grid with a variable
//! coefficient, its rows split unevenly (rank r owns `m * (r + 1)` grid rows, the last rank
//! the rest), as an application with its own domain decomposition would. The right-hand
//! side is made from a known solution, rank by rank from its own rows; the example asserts
//! the solution, once with CG and once with the communication-avoiding cbcgr through the
//! matrix powers kernel, whose depth-k ghost zone `MatrixPowers::from_local_rows` fetches
//! from the neighbouring ranks (again no global matrix). Thread ranks here; an MPI
//! communicator implements the same trait.
//!
//! Run: `cargo run -p castack-krylov --example assemble_local`

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{
    Cpu, DistCsr, LocalRows, MatrixPowers, Method, Solver, SolverConfig, SpmvMode,
};
use castack_neighbor::Strategy;

/// Grid points per side.
const M: usize = 60;

/// This rank's rows `first..first + count` of the operator: CSR offsets, GLOBAL columns
/// (increasing in each row) and values. Coefficient `k(x, y) = 1 + x + 2 y` at cell faces.
fn my_rows(first: usize, count: usize) -> (Vec<usize>, Vec<usize>, Vec<f64>) {
    let h = 1.0 / (M + 1) as f64;
    let k = |i: f64, j: f64| 1.0 + i * h + 2.0 * j * h;
    let (mut indptr, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new());
    for row in first..first + count {
        let (i, j) = ((row % M) as f64 + 1.0, (row / M) as f64 + 1.0);
        let (w, e, s, n) = (k(i - 0.5, j), k(i + 0.5, j), k(i, j - 0.5), k(i, j + 0.5));
        let mut push = |c: usize, v: f64| {
            cols.push(c);
            vals.push(v / (h * h));
        };
        if row >= M {
            push(row - M, -s);
        }
        if row % M > 0 {
            push(row - 1, -w);
        }
        push(row, w + e + s + n);
        if row % M + 1 < M {
            push(row + 1, -e);
        }
        if row + M < M * M {
            push(row + M, -n);
        }
        indptr.push(cols.len());
    }
    (indptr, cols, vals)
}

/// The known solution at a global row.
fn exact(row: usize) -> f64 {
    let (x, y) = ((row % M) as f64 / M as f64, (row / M) as f64 / M as f64);
    1.0 + x * y
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ranks = 3;
    let results = ThreadUniverse::new(ranks)?.run(|comm| -> Result<f64, String> {
        let r = comm.rank();
        // This rank's own share: m (r + 1) grid rows, the last rank the rest.
        let first: usize = (0..r).map(|q| M * (q + 1)).sum();
        let count = if r + 1 == ranks {
            M * M - first
        } else {
            M * (r + 1)
        };
        let (indptr, cols, vals) = my_rows(first, count);
        // b = A u from this rank's rows alone (their columns reach the neighbours' rows).
        let b: Vec<f64> = indptr
            .windows(2)
            .map(|w| (w[0]..w[1]).map(|e| vals[e] * exact(cols[e])).sum())
            .collect();
        let rows = LocalRows {
            indptr: &indptr,
            cols: &cols,
            vals: &vals,
        };
        let (a, part) = DistCsr::from_local_rows(comm, rows, SpmvMode::Halo, Strategy::Naive)
            .map_err(|e| e.to_string())?;
        assert_eq!(part.range(r), first..first + count);
        assert_eq!(a.n(), M * M);
        // The ghost zone of depth 4 for the matrix powers kernel, from the same rows.
        let k = 4;
        let mpk = MatrixPowers::from_local_rows(comm, rows, &part, k, Strategy::Naive)
            .map_err(|e| e.to_string())?;
        let cfg = SolverConfig {
            tol: 1e-10,
            ..SolverConfig::default()
        };
        let mut solver =
            Solver::new(comm, a, cfg.clone(), Cpu::sequential()).map_err(|e| e.to_string())?;
        let cg = solver.solve(&b, None).map_err(|e| e.to_string())?;
        // A solver owns its matrix: assemble it again from the same rows for the second.
        let (a, _) = DistCsr::from_local_rows(comm, rows, SpmvMode::Halo, Strategy::Naive)
            .map_err(|e| e.to_string())?;
        let ca_cfg = SolverConfig {
            method: Method::Cbcgr,
            k,
            mpk: true,
            ..cfg
        };
        let mut solver =
            Solver::with_mpk(comm, a, mpk, ca_cfg, Cpu::sequential()).map_err(|e| e.to_string())?;
        let ca = solver.solve(&b, None).map_err(|e| e.to_string())?;
        let mut worst: f64 = 0.0;
        for sol in [&cg, &ca] {
            assert!(sol.report.converged, "{:?}", sol.report.stop_reason);
            // The largest error of this rank's entries.
            for (i, v) in sol.x.iter().enumerate() {
                worst = worst.max((v - exact(first + i)).abs());
            }
        }
        // One exchange of depth k per block of k steps: far fewer than CG's one per step.
        assert!(
            ca.report.halo_exchanges < cg.report.halo_exchanges,
            "cbcgr {} vs cg {} halo exchanges",
            ca.report.halo_exchanges,
            cg.report.halo_exchanges
        );
        if r == 0 {
            println!(
                "cg: {} iterations, {} halo exchanges; cbcgr(k={k}, mpk): {} CG-equivalent \
                 iterations, {} halo exchanges",
                cg.report.iterations,
                cg.report.halo_exchanges,
                ca.report.equivalent_iterations,
                ca.report.halo_exchanges
            );
        }
        Ok(worst)
    })?;
    let err = results
        .into_iter()
        .collect::<Result<Vec<f64>, String>>()?
        .into_iter()
        .fold(0.0, f64::max);
    println!("{M}x{M} grid assembled rank by rank on {ranks} ranks: max |x - u| = {err:.2e}");
    assert!(err < 1e-6, "max error {err:e}");
    Ok(())
}
