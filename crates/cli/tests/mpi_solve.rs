//! Multi-process reproducibility test (`harness = false`, feature `mpi`), launched by
//! `cargo xtask test-mpi` under `mpirun -np 1..4`: every CG-family method (and the matrix
//! powers variant of CBCGR) solved over `MpiComm` with P processes gives bit for bit the
//! solution, iteration count and true residual of the same solve on `ThreadUniverse` with P
//! thread ranks (same row partition, the default bit-identical allreduce). Every rank runs
//! the threads reference in-process and compares it with the gathered MPI solution; a
//! mismatch aborts the job with a non-zero status.

use castack_collectives::mpi::MpiComm;
use castack_collectives::{Collectives, Communicator, ThreadUniverse};
use castack_krylov::sparse::gen;
use castack_krylov::{
    Cpu, DistCsr, KrylovError, MatrixPowers, Method, Partition, SolveReport, Solver, SolverConfig,
    SpmvMode,
};
use sprs::CsMat;

/// One rank's solve on any backend: its rows of x and the report.
fn solve<C: Communicator + ?Sized>(
    comm: &C,
    a: &CsMat<f64>,
    part: &Partition,
    cfg: &SolverConfig,
) -> Result<(Vec<f64>, SolveReport), KrylovError> {
    let dist = DistCsr::from_global(comm, a.view(), part, SpmvMode::Halo)?;
    let mut solver = if cfg.mpk {
        let mpk = MatrixPowers::from_global(comm, a.view(), part, cfg.k)?;
        Solver::with_mpk(comm, dist, mpk, cfg.clone(), Cpu::sequential())?
    } else {
        Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?
    };
    let range = part.range(comm.rank());
    // A right-hand side whose entries differ (so rounding differences would show).
    let b: Vec<f64> = range.map(|i| 1.0 + (i as f64 * 0.37).sin()).collect();
    let sol = solver.solve(&b, None)?;
    Ok((sol.x, sol.report))
}

fn check(comm: &MpiComm, a: &CsMat<f64>, cfg: &SolverConfig, label: &str) -> Result<(), String> {
    let p = comm.size();
    let part = Partition::rows(a.rows(), p);
    let (mine, report) = solve(comm, a, &part, cfg).map_err(|e| format!("mpi solve: {e}"))?;
    let counts: Vec<usize> = (0..p).map(|r| part.range(r).len()).collect();
    let mut x = vec![0.0; a.rows()];
    comm.allgatherv_f64(&mine, &counts, &mut x)
        .map_err(|e| format!("gather: {e}"))?;

    let threads = ThreadUniverse::new(p)
        .map_err(|e| e.to_string())?
        .run(|c| solve(c, a, &part, cfg))
        .map_err(|e| e.to_string())?;
    let mut x_threads = Vec::with_capacity(a.rows());
    let mut report_threads = None;
    for r in threads {
        let (xr, rep) = r.map_err(|e| format!("threads solve: {e}"))?;
        x_threads.extend(xr);
        report_threads.get_or_insert(rep);
    }
    let rt = report_threads.ok_or("no threads report")?;
    if !report.converged {
        return Err(format!(
            "{label}: did not converge ({:?})",
            report.stop_reason
        ));
    }
    if report.iterations != rt.iterations
        || report.relres_true.to_bits() != rt.relres_true.to_bits()
    {
        return Err(format!(
            "{label}: mpi {} iterations, relres_true {:e}; threads {} iterations, {:e}",
            report.iterations, report.relres_true, rt.iterations, rt.relres_true
        ));
    }
    if let Some(i) = (0..x.len()).find(|&i| x[i].to_bits() != x_threads[i].to_bits()) {
        return Err(format!(
            "{label}: x[{i}] = {:e} on mpi, {:e} on threads",
            x[i], x_threads[i]
        ));
    }
    Ok(())
}

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("mpi_solve: MPI was already initialized");
        std::process::exit(1);
    };
    let comm = MpiComm::new(&universe.world());
    let (rank, p) = (comm.rank(), comm.size());
    let a = match gen::poisson2d(24) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mpi_solve: {e}");
            comm.abort(1)
        }
    };
    let mut cases: Vec<(String, SolverConfig)> = Method::ALL
        .iter()
        .map(|&method| {
            let cfg = SolverConfig {
                method,
                k: 6,
                ..SolverConfig::default()
            };
            (method.name().to_string(), cfg)
        })
        .collect();
    cases.push((
        "cbcgr:6:mpk".into(),
        SolverConfig {
            method: Method::Cbcgr,
            k: 6,
            mpk: true,
            ..SolverConfig::default()
        },
    ));
    for (label, cfg) in &cases {
        if let Err(msg) = check(&comm, &a, cfg, label) {
            eprintln!("mpi_solve: FAILED on rank {rank} of {p}: {msg}");
            comm.abort(1);
        }
        if rank == 0 {
            println!("ok: {label}: mpi and threads bit-identical on {p} rank(s)");
        }
    }
}
