//! How an MPI application embeds the solvers at scale: it initializes MPI itself, builds ONLY
//! its own rows of the operator (no process ever holds the global matrix), hands them to
//! `DistCsr::from_local_rows` over `MpiComm`, and solves with CG and with cbcgr through the
//! matrix powers kernel. It then writes the same operator to a Matrix Market file (each
//! rank its rows, in turn) and reads it back with `read_matrix_market_dist`, every rank
//! parsing its byte range: the rows it gets are its own, bit for bit. Every result is
//! asserted; a wrong one aborts the job with a non-zero status.
//!
//! Run with `mpirun -np 4 target/debug/examples/mpi_assemble` after
//! `cargo build -p castack-krylov --features mpi --example mpi_assemble`
//! (`cargo xtask test-mpi` runs it at 1..4 ranks).

use std::io::Write;

use castack_collectives::mpi::MpiComm;
use castack_collectives::{Collectives, Communicator, Op};
use castack_krylov::read_matrix_market_dist;
use castack_krylov::{
    Cpu, DistCsr, LocalRows, MatrixPowers, MemBudget, Method, PartitionKind, Solver, SolverConfig,
    SpmvMode,
};
use castack_neighbor::Strategy;

/// Grid points per side of the 2-D five-point operator.
const M: usize = 40;

/// Rows `first..first + count` of the operator with coefficient `1 + x + 2 y`: CSR offsets,
/// global columns (increasing), values.
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

fn check(ok: bool, what: &str, comm: &MpiComm) {
    if !ok {
        eprintln!("mpi_assemble: rank {}: {what}", comm.rank());
        comm.abort(1);
    }
}

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("mpi_assemble: MPI was already initialized");
        std::process::exit(1);
    };
    let world = universe.world();
    let comm = MpiComm::new(&world);
    let (r, p) = (comm.rank(), comm.size());
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("mpi_assemble: rank {r}: {e}");
        comm.abort(1)
    };
    // The application's own split: rows in blocks of whole grid lines, uneven on purpose.
    let weights: Vec<usize> = (0..p).map(|q| q + 1).collect();
    let total: usize = weights.iter().sum();
    let lines = |q: usize| M * weights[..q].iter().sum::<usize>() / total;
    let (first, last) = (
        M * lines(r),
        if r + 1 == p { M * M } else { M * lines(r + 1) },
    );
    let (indptr, cols, vals) = my_rows(first, last - first);
    let b: Vec<f64> = indptr
        .windows(2)
        .map(|w| (w[0]..w[1]).map(|e| vals[e] * exact(cols[e])).sum())
        .collect();
    let rows = LocalRows {
        indptr: &indptr,
        cols: &cols,
        vals: &vals,
    };

    // CG, then cbcgr with the matrix powers kernel (depth-k ghost zone from the same rows).
    let cfg = SolverConfig {
        tol: 1e-10,
        ..SolverConfig::default()
    };
    let k = 4;
    let mut worst: f64 = 0.0;
    let mut exchanges = Vec::new();
    for method in [Method::Cg, Method::Cbcgr] {
        let (a, part) = DistCsr::from_local_rows(&comm, rows, SpmvMode::Halo, Strategy::Naive)
            .unwrap_or_else(|e| fail(&e));
        check(part.range(r) == (first..last), "partition", &comm);
        let mut solver = if method == Method::Cg {
            Solver::new(&comm, a, cfg.clone(), Cpu::sequential())
        } else {
            let mpk = MatrixPowers::from_local_rows(&comm, rows, &part, k, Strategy::Naive)
                .unwrap_or_else(|e| fail(&e));
            let ca = SolverConfig {
                method,
                k,
                mpk: true,
                ..cfg.clone()
            };
            Solver::with_mpk(&comm, a, mpk, ca, Cpu::sequential())
        }
        .unwrap_or_else(|e| fail(&e));
        let sol = solver.solve(&b, None).unwrap_or_else(|e| fail(&e));
        check(sol.report.converged, "did not converge", &comm);
        for (i, v) in sol.x.iter().enumerate() {
            worst = worst.max((v - exact(first + i)).abs());
        }
        exchanges.push(sol.report.halo_exchanges);
    }
    let mut err = [worst];
    comm.allreduce_f64_with(&mut err, Op::Max, Default::default())
        .unwrap_or_else(|e| fail(&e));
    check(err[0] < 1e-6, &format!("max error {:e}", err[0]), &comm);
    check(
        exchanges[1] < exchanges[0],
        "cbcgr exchanged no less than cg",
        &comm,
    );

    // The same operator as a file, written rank by rank in turn, then read in parallel: each
    // rank parses its byte range and gets the rows an even split gives it.
    let dir = std::env::temp_dir();
    let mut name = [0.0];
    if r == 0 {
        name[0] = f64::from(std::process::id());
    }
    comm.bcast_f64(0, &mut name).unwrap_or_else(|e| fail(&e));
    let path = dir.join(format!("castack-mpi-assemble-{}.mtx", name[0] as u64));
    let nnz = {
        let mut n = [cols.len() as i64];
        comm.allreduce_i64(&mut n, Op::Sum)
            .unwrap_or_else(|e| fail(&e));
        n[0]
    };
    if r == 0 {
        // A fresh file (a leftover of the same name would corrupt the read-back).
        std::fs::write(&path, b"").unwrap_or_else(|e| fail(&e));
    }
    comm.barrier().unwrap_or_else(|e| fail(&e));
    for q in 0..p {
        if q == r {
            let mut text = String::new();
            if r == 0 {
                text.push_str(&format!(
                    "%%MatrixMarket matrix coordinate real general\n{} {} {nnz}\n",
                    M * M,
                    M * M
                ));
            }
            for i in 0..last - first {
                for e in indptr[i]..indptr[i + 1] {
                    text.push_str(&format!(
                        "{} {} {:e}\n",
                        first + i + 1,
                        cols[e] + 1,
                        vals[e]
                    ));
                }
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path);
            file.and_then(|mut f| f.write_all(text.as_bytes()))
                .unwrap_or_else(|e| fail(&e));
        }
        comm.barrier().unwrap_or_else(|e| fail(&e));
    }
    let read = read_matrix_market_dist(&comm, &path, PartitionKind::Rows, MemBudget::unlimited())
        .unwrap_or_else(|e| fail(&e));
    let mine = read.part.range(r);
    let (want_ptr, want_cols, want_vals) = my_rows(mine.start, mine.len());
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    check(
        read.indptr == want_ptr && read.cols == want_cols && bits(&read.vals) == bits(&want_vals),
        "rows read back differ from the rows built",
        &comm,
    );
    comm.barrier().unwrap_or_else(|e| fail(&e));
    if r == 0 {
        let _ = std::fs::remove_file(&path);
        println!(
            "mpi_assemble: {p} rank(s), max error {:.2e}; halo exchanges cg {} cbcgr(k={k}, mpk) {}; {} rows read back in parallel",
            err[0], exchanges[0], exchanges[1], M * M
        );
    }
}
