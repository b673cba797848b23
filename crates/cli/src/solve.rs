//! `krylov solve`: read, distribute, solve on thread ranks, report.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::check::check_symmetric;
use castack_krylov::gen::SplitMix64;
use castack_krylov::io::{read_matrix_market_path, read_vector_path, write_array};
use castack_krylov::reorder::{permute_symmetric, permute_vec, unpermute_vec, Permutation};
use castack_krylov::{
    Cpu, DistCsr, KrylovError, MatrixPowers, Partition, PartitionKind, SolveReport, Solver,
    SolverConfig,
};
use sprs::CsMat;

use crate::args::{Rhs, SolveArgs, X0};
use crate::exit::{bad, CliError};
use crate::output::{out, write_atomic};
use crate::settings::{read_config, resolve, Resolved};

/// A problem read from files: the matrix, right-hand side and initial guess.
pub(crate) struct Problem {
    /// The matrix file, for messages.
    pub(crate) name: String,
    pub(crate) a: CsMat<f64>,
    pub(crate) b: Vec<f64>,
    pub(crate) x0: Option<Vec<f64>>,
    /// Seconds spent reading and checking.
    pub(crate) read_s: f64,
}

/// Read the matrix and vectors the settings name.
pub(crate) fn load(matrix: &Path, s: &Resolved) -> Result<Problem, CliError> {
    let start = Instant::now();
    let a = load_matrix(matrix)?;
    let n = a.rows();
    let b = rhs(&a, &s.rhs)?;
    let x0 = match &s.x0 {
        X0::Zero => None,
        X0::File(p) => Some(read_len(p, n, "--x0")?),
    };
    Ok(Problem {
        name: matrix.display().to_string(),
        a,
        b,
        x0,
        read_s: start.elapsed().as_secs_f64(),
    })
}

/// A problem in a reordered numbering: `B = P A P^T`, `P b`, `P x0`.
struct Reordered {
    perm: Permutation,
    a: CsMat<f64>,
    b: Vec<f64>,
    x0: Option<Vec<f64>>,
}

impl Reordered {
    fn new(problem: &Problem, perm: Permutation) -> Self {
        Self {
            a: permute_symmetric(problem.a.view(), &perm),
            b: permute_vec(&perm, &problem.b),
            x0: problem.x0.as_ref().map(|x| permute_vec(&perm, x)),
            perm,
        }
    }
}

/// Solve `problem` with settings `s` on `s.ranks` thread ranks: the gathered solution (in
/// the problem's order, whatever `s.reorder`) and the report (rank 0's counters, the
/// slowest rank's set-up plus reading and reordering).
pub(crate) fn solve_problem(
    problem: &Problem,
    s: &Resolved,
) -> Result<(Vec<f64>, SolveReport), CliError> {
    let name = &problem.name;
    // Reorder before partitioning; the solve sees only the reordered system.
    let t = Instant::now();
    let reordered = s
        .reorder
        .permutation(problem.a.view())
        .map(|perm| Reordered::new(problem, perm));
    let reorder_s = t.elapsed().as_secs_f64();
    let (a, b, x0) = match &reordered {
        Some(r) => (&r.a, &r.b, &r.x0),
        None => (&problem.a, &problem.b, &problem.x0),
    };
    let n = a.rows();
    let part = match s.partition {
        PartitionKind::Rows => Partition::rows(n, s.ranks),
        PartitionKind::Nnz => Partition::nnz(a.indptr().raw_storage(), s.ranks),
    };
    let pool = if s.threads > 1 {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(s.threads)
            .build()
            .map_err(|e| {
                CliError::failed(anyhow::anyhow!("cannot start {} threads: {e}", s.threads))
            })?;
        Some(Arc::new(pool))
    } else {
        None
    };
    let cfg = SolverConfig {
        method: s.method,
        tol: s.tol,
        atol: s.atol,
        max_iter: s.max_iter,
        precond: s.precond,
        allreduce: s.allreduce,
        history: s.history,
        k: s.k,
        basis: s.basis,
        replace_every: None,
        mpk: s.mpk,
    };
    cfg.validate().map_err(CliError::bad)?;

    let universe = ThreadUniverse::new(s.ranks).map_err(CliError::bad)?;
    let outs = universe
        .run(
            |comm| -> Result<(Vec<f64>, SolveReport, f64), KrylovError> {
                let t = Instant::now();
                let dist = DistCsr::from_global(comm, a.view(), &part, s.spmv)?;
                let cpu = pool.clone().map_or_else(Cpu::sequential, Cpu::with_pool);
                let mut solver = if cfg.mpk {
                    // The matrix powers kernel: ghost zones of depth k, one exchange per basis.
                    let mpk = MatrixPowers::from_global(comm, a.view(), &part, cfg.k)?;
                    Solver::with_mpk(comm, dist, mpk, cfg.clone(), cpu)?
                } else {
                    Solver::new(comm, dist, cfg.clone(), cpu)?
                };
                let setup = t.elapsed().as_secs_f64();
                let range = part.range(comm.rank());
                let x0 = x0.as_ref().map(|x| &x[range.clone()]);
                let sol = solver.solve(&b[range], x0)?;
                Ok((sol.x, sol.report, setup))
            },
        )
        .map_err(|e| CliError::failed(anyhow::anyhow!("{name}: {e}")))?;

    let mut x = Vec::with_capacity(n);
    let mut report: Option<SolveReport> = None;
    let mut setup = 0.0f64;
    for out in outs {
        let (xr, rep, su) = out.map_err(|e| solve_error(name, e))?;
        x.extend_from_slice(&xr);
        setup = setup.max(su);
        report.get_or_insert(rep);
    }
    let mut report = report.ok_or_else(|| bad("no rank produced a report"))?;
    let x = match &reordered {
        Some(r) => unpermute_vec(&r.perm, &x),
        None => x,
    };
    finish_report(&mut report, s, problem.read_s + reorder_s + setup, &x);
    Ok((x, report))
}

/// Run `krylov solve`.
pub(crate) fn run(args: Box<SolveArgs>) -> Result<ExitCode, CliError> {
    let args = *args;
    let file = match &args.config {
        Some(p) => read_config(p)?,
        None => Default::default(),
    };
    let s = resolve(args.settings, file)?;
    let problem = load(&args.matrix, &s)?;
    let name = &problem.name;
    let (x, report) = solve_problem(&problem, &s)?;

    if let Some(path) = &args.output {
        write_atomic(path, |w| Ok(write_array(w, &x)?)).map_err(CliError::bad)?;
    }
    if let Some(path) = &args.report {
        write_atomic(path, |w| {
            serde_json::to_writer_pretty(&mut *w, &report)?;
            Ok(writeln!(w)?)
        })
        .map_err(CliError::bad)?;
    }
    if args.json {
        let line = serde_json::to_string(&report).map_err(CliError::failed)?;
        out!("{line}");
    } else {
        print_human(name, &report);
    }
    if s.strict && !report.converged {
        return Err(CliError::failed(anyhow::anyhow!(
            "{name}: {} did not converge in {} iterations (relres_true {:.3e}, tol {:.1e})",
            report.method,
            report.equivalent_iterations,
            report.relres_true,
            report.tol
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// Read a Matrix Market matrix and check what CG needs of it.
fn load_matrix(path: &Path) -> Result<CsMat<f64>, CliError> {
    let name = path.display().to_string();
    let mm = read_matrix_market_path(path).map_err(CliError::bad)?;
    let a = mm.to_csr_full().map_err(CliError::bad)?;
    check_symmetric(a.view()).map_err(|e| bad(format!("{name}: {e}")))?;
    Ok(a)
}

fn read_len(path: &Path, n: usize, what: &str) -> Result<Vec<f64>, CliError> {
    let v = read_vector_path(path).map_err(CliError::bad)?;
    if v.len() != n {
        return Err(bad(format!(
            "{}: {what} vector has {} entries, the matrix has {n} rows",
            path.display(),
            v.len()
        )));
    }
    Ok(v)
}

fn rhs(a: &CsMat<f64>, rhs: &Rhs) -> Result<Vec<f64>, CliError> {
    let n = a.rows();
    Ok(match rhs {
        Rhs::UnitSolution => {
            let indptr = a.indptr();
            let indptr = indptr.raw_storage();
            (0..n)
                .map(|i| a.data()[indptr[i]..indptr[i + 1]].iter().sum())
                .collect()
        }
        Rhs::Ones => vec![1.0; n],
        Rhs::Random(seed) => {
            let mut rng = SplitMix64::new(*seed);
            (0..n).map(|_| 2.0 * rng.next_f64() - 1.0).collect()
        }
        Rhs::File(p) => read_len(p, n, "--rhs")?,
    })
}

/// Map a rank's error: breakdowns and communication failures are failed runs (exit 1);
/// everything else is bad input (exit 2).
fn solve_error(name: &str, e: KrylovError) -> CliError {
    let msg = anyhow::anyhow!("{name}: {e}");
    match e {
        KrylovError::Breakdown { .. } | KrylovError::Comm(_) => CliError::failed(msg),
        _ => CliError::bad(msg),
    }
}

fn finish_report(r: &mut SolveReport, s: &Resolved, setup_s: f64, x: &[f64]) {
    r.backend = s.backend.name().into();
    r.fabric = None;
    r.device = "cpu".into();
    r.threads = s.threads;
    r.partition = s.partition.name().into();
    r.reorder = s.reorder.name().into();
    r.setup_s = setup_s;
    r.error_vs_ones = match s.rhs {
        Rhs::UnitSolution => Some(x.iter().map(|v| (v - 1.0).abs()).fold(0.0, f64::max)),
        _ => None,
    };
}

fn print_human(name: &str, r: &SolveReport) {
    out!(
        "{name}: n = {}, nnz = {}; {} ({} precond) on {} rank(s) ({} backend), {} thread(s)",
        r.n,
        r.nnz,
        r.method,
        r.precond,
        r.ranks,
        r.backend,
        r.threads
    );
    let status = if r.converged {
        format!("converged in {} iterations", r.iterations)
    } else {
        format!(
            "NOT converged ({:?}) after {} iterations",
            r.stop_reason, r.iterations
        )
    };
    let err = r
        .error_vs_ones
        .map_or(String::new(), |e| format!(", error_vs_ones {e:.3e}"));
    out!(
        "{status}: relres_true {:.3e} (recurrence {:.3e}){err}",
        r.relres_true,
        r.relres_recurrence
    );
    let t = &r.time_breakdown;
    out!(
        "{} reductions (+{} setup), {} halo exchanges; solve {:.3} s (spmv {:.3}, blas {:.3}, allreduce {:.3}, halo {:.3}, other {:.3}), setup {:.3} s",
        r.reductions, r.setup_reductions, r.halo_exchanges, r.time_s, t.spmv, t.blas, t.allreduce, t.halo, t.other, r.setup_s
    );
}
