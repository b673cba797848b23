//! `krylov solve`: read, distribute, solve on thread ranks, report.

use std::ops::Range;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use castack_collectives::{AllreduceAlgo, Collectives, Communicator, Op, SimMemory, SimOptions};
use castack_krylov::{check_solve_budget, read_matrix_market_dist, LocalMatrix};
use castack_krylov::{
    Cpu, Device as SolverDevice, DistCsr, KrylovError, LinalgError, LocalRows, MatrixPowers,
    MemBudget, Method, Partition, PartitionKind, SolveReport, Solver, SolverConfig, SpmvMode,
    StopReason,
};
use castack_sparse::check::{check_spd_storage, check_symmetric};
use castack_sparse::gen::SplitMix64;
use castack_sparse::io::{
    read_matrix_market_path_within, read_vector_part_path_within, write_array, MtxError,
};
use castack_sparse::reorder::{
    permute_symmetric, permute_vec, unpermute_vec, Permutation, Reorder,
};
use sprs::CsMat;

use crate::args::{Backend, Device, Rhs, SolveArgs, X0};
use crate::budget::over;
use crate::cuda_cli::{check, on_gpu, OnDevice};
use crate::exit::{bad, run_error, CliError};
use crate::fabric::load_fabric;
use crate::launch::{agree, check_ranks, Agreed, Job, Ranks};
use crate::output::{out, progress_bar, write_atomic};
use crate::settings::{default_threads, read_config, resolve, Bar, Resolved};

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
    let a = read_spd_csr(matrix, s.mem_budget)?;
    let n = a.rows();
    let indptr = a.indptr();
    let rows = LocalRows {
        indptr: indptr.raw_storage(),
        cols: a.indices(),
        vals: a.data(),
    };
    let b = rhs(rows, 0..n, n, &s.rhs, s.mem_budget)?;
    let x0 = match &s.x0 {
        X0::Zero => None,
        X0::File(p) => Some(read_part(p, 0..n, n, "--x0", s.mem_budget)?),
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

/// This rank's rows of a problem read by all the ranks together (`--backend mpi` on a plain
/// file, no reordering: [`castack_krylov::read_matrix_market_dist`]): no rank holds
/// the global matrix.
pub(crate) struct LocalProblem {
    /// The matrix file, for messages.
    pub(crate) name: String,
    /// This rank's rows and the partition.
    pub(crate) m: LocalMatrix,
    /// This rank's entries of the right-hand side.
    pub(crate) b: Vec<f64>,
    /// This rank's entries of the initial guess.
    pub(crate) x0: Option<Vec<f64>>,
    /// Seconds spent reading and checking (this rank's).
    pub(crate) read_s: f64,
}

/// The system the ranks solve, as they hold it.
enum Input<'p> {
    /// The global system, which every rank slices (in the numbering the solve sees:
    /// reordered or not).
    Global {
        problem: &'p Problem,
        reordered: Option<Reordered>,
    },
    /// Each rank's own rows only.
    Local(LocalProblem),
}

/// What every rank needs before it solves: the system in the numbering the solve sees
/// (reordered or not), its row partition over `s.ranks` ranks, the solver configuration and
/// the worker threads of each rank's kernels. The same on every backend, so a threads run and an MPI run with
/// the same settings solve the same partitioned system.
pub(crate) struct Prepared<'p> {
    input: Input<'p>,
    pub(crate) part: Partition,
    cfg: SolverConfig,
    spmv: SpmvMode,
    /// Worker threads of each rank's CPU kernels (each rank starts a pool of its own).
    threads: usize,
    /// The device each rank solves on.
    device: RankDevice,
    /// Seconds spent reordering.
    reorder_s: f64,
    /// `--monitor`: every rank sets the solver's monitor, rank 0 prints.
    monitor: bool,
    /// The progress bar rank 0 may draw.
    bar: Bar,
}

/// The device a rank solves on, from `--device` and `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RankDevice {
    /// The CPU kernels (`--device cpu`).
    Cpu,
    /// The CPU kernels standing in for a modeled GPU (`--backend sim --device cuda`): the
    /// same bits as `Cpu`, priced by the fabric's `[compute.gpu]` model with its host link.
    ModeledGpu,
    /// A real GPU (`--device cuda` on threads or mpi; feature `cuda`).
    Cuda,
}

impl RankDevice {
    fn of(s: &Resolved) -> Self {
        match (s.device, s.backend) {
            (Device::Cpu, _) => RankDevice::Cpu,
            (Device::Cuda, Backend::Sim) => RankDevice::ModeledGpu,
            (Device::Cuda, Backend::Threads | Backend::Mpi) => RankDevice::Cuda,
        }
    }
}

impl Prepared<'_> {
    /// Seconds spent reading the input.
    fn read_s(&self) -> f64 {
        match &self.input {
            Input::Global { problem, .. } => problem.read_s,
            Input::Local(l) => l.read_s,
        }
    }
}

/// Reorder, partition over `s.ranks` ranks and configure the solver.
pub(crate) fn prepare<'p>(problem: &'p Problem, s: &Resolved) -> Result<Prepared<'p>, CliError> {
    // Reorder before partitioning; the solve sees only the reordered system.
    let t = Instant::now();
    let reordered = s
        .reorder
        .permutation(problem.a.view())
        .map(|perm| Reordered::new(problem, perm));
    let reorder_s = t.elapsed().as_secs_f64();
    let a = match &reordered {
        Some(r) => &r.a,
        None => &problem.a,
    };
    // The configuration and the budget (per-rank row pointers included) first: the
    // partition holds a row offset per rank, made only once the budget admits the ranks.
    let cfg = checked_config(&problem.name, (a.rows(), a.nnz()), s)?;
    let part = match s.partition {
        PartitionKind::Rows => Partition::rows(a.rows(), s.ranks),
        PartitionKind::Nnz => Partition::nnz(a.indptr().raw_storage(), s.ranks),
    };
    Ok(Prepared {
        input: Input::Global { problem, reordered },
        part,
        cfg,
        spmv: s.spmv,
        threads: s.threads,
        device: RankDevice::of(s),
        reorder_s,
        monitor: s.monitor,
        bar: s.bar,
    })
}

/// Configure the solver for this rank's rows of a problem read by all the ranks together.
pub(crate) fn prepare_local(
    local: LocalProblem,
    s: &Resolved,
) -> Result<Prepared<'static>, CliError> {
    let cfg = checked_config(&local.name, (local.m.part.n(), local.m.nnz), s)?;
    Ok(Prepared {
        part: local.m.part.clone(),
        input: Input::Local(local),
        cfg,
        spmv: s.spmv,
        threads: s.threads,
        device: RankDevice::of(s),
        reorder_s: 0.0,
        monitor: s.monitor,
        bar: s.bar,
    })
}

/// The solver configuration of the settings `s`, checked: its values, then what the ranks
/// would build for the matrix `name` of `n` rows and `nnz` entries against the memory
/// budget, before any of them starts (a reordering keeps the matrix's size and entries).
pub(crate) fn checked_config(
    name: &str,
    (n, nnz): (usize, usize),
    s: &Resolved,
) -> Result<SolverConfig, CliError> {
    // The settings were checked as they were resolved (`settings::resolve`).
    let cfg = s.solver.clone();
    check_solve_budget(n, nnz, s.ranks, &cfg, s.mem_budget)
        .map_err(|e| over(format!("{name}: {e}")))?;
    Ok(cfg)
}

/// One rank's solve on any backend and device: builds its block of the distributed matrix
/// and solves; returns its rows of the solution, its report and its set-up seconds.
/// `local_rank` is the rank's index among the ranks of its node (which GPU it opens).
pub(crate) fn solve_rank<C: Communicator + ?Sized>(
    comm: &C,
    prep: &Prepared<'_>,
    local_rank: usize,
) -> Result<(Vec<f64>, SolveReport, f64), KrylovError> {
    // Each rank's kernels run on a pool of its own, started on the rank's thread.
    let cpu = || Cpu::with_threads(prep.threads);
    match prep.device {
        RankDevice::Cpu => solve_on(comm, prep, cpu()?),
        RankDevice::ModeledGpu => solve_on(comm, prep, cpu()?.modeling_gpu()),
        RankDevice::Cuda => on_gpu(local_rank, SolveOn { comm, prep }),
    }
}

/// One rank's solve, to run on whichever device [`on_gpu`] opens.
struct SolveOn<'a, 'p, C: ?Sized> {
    comm: &'a C,
    prep: &'a Prepared<'p>,
}

impl<C: Communicator + ?Sized> OnDevice for SolveOn<'_, '_, C> {
    type Out = (Vec<f64>, SolveReport, f64);

    fn run<D: SolverDevice>(self, dev: D) -> Result<Self::Out, KrylovError> {
        solve_on(self.comm, self.prep, dev)
    }
}

/// One rank's solve on `dev`: the same code for every device (the solver moves the scaled
/// matrix to the device once); set-up seconds include that move.
fn solve_on<C: Communicator + ?Sized, D: SolverDevice>(
    comm: &C,
    prep: &Prepared<'_>,
    dev: D,
) -> Result<(Vec<f64>, SolveReport, f64), KrylovError> {
    let (part, cfg) = (&prep.part, &prep.cfg);
    let t = Instant::now();
    let range = part.range(comm.rank());
    // This rank's block (and with the matrix powers kernel, its ghost zones of depth k, one
    // exchange per basis) and its entries of b and x0.
    let (dist, mpk, b, x0) = match &prep.input {
        Input::Global { problem, reordered } => {
            let (a, b, x0) = match reordered {
                Some(r) => (&r.a, &r.b, &r.x0),
                None => (&problem.a, &problem.b, &problem.x0),
            };
            let dist = DistCsr::from_global_with(comm, a.view(), part, prep.spmv, cfg.exchange)?;
            let mpk = cfg
                .mpk
                .then(|| MatrixPowers::from_global_with(comm, a.view(), part, cfg.k, cfg.exchange))
                .transpose()?;
            let x0 = x0.as_ref().map(|x| &x[range.clone()]);
            (dist, mpk, &b[range], x0)
        }
        Input::Local(l) => {
            let rows = l.m.rows();
            let (dist, _) = DistCsr::from_local_rows(comm, rows, prep.spmv, cfg.exchange)?;
            let mpk = cfg
                .mpk
                .then(|| MatrixPowers::from_local_rows(comm, rows, part, cfg.k, cfg.exchange))
                .transpose()?;
            (dist, mpk, &l.b[..], l.x0.as_deref())
        }
    };
    let mut solver = match mpk {
        Some(mpk) => Solver::with_mpk(comm, dist, mpk, cfg.clone(), dev)?,
        None => Solver::new(comm, dist, cfg.clone(), dev)?,
    };
    let setup = t.elapsed().as_secs_f64();
    let bar = attach_monitor(&mut solver, prep, comm.rank() == 0);
    let sol = solver.solve(b, x0);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let sol = sol?;
    Ok((sol.x, sol.report, setup))
}

/// Progress-bar units: per mille of the way from relres 1 to `--tol` on a log scale.
const PROGRESS_UNITS: usize = 1000;

/// `--monitor`: set the solver's monitor on every rank (collective: cg then computes
/// the exact original-norm residual in every iteration on all ranks), printing on `lead`.
/// Otherwise, where the settings allow a bar and `lead`'s stderr is a terminal, a
/// progress callback on `lead` alone (it changes nothing in the solve) drawing
/// `log(relres) / log(tol)`; the bar is returned to be cleared after the solve.
fn attach_monitor<C: Communicator + ?Sized, D: SolverDevice>(
    solver: &mut Solver<'_, C, D>,
    prep: &Prepared<'_>,
    lead: bool,
) -> Option<indicatif::ProgressBar> {
    if prep.monitor {
        solver.set_monitor(move |it, rel| {
            if lead {
                monitor_line(it, "recurrence", rel, "");
            }
        });
        return None;
    }
    let Bar::On { json } = prep.bar else {
        return None;
    };
    let tol = prep.cfg.tol;
    if !(tol > 0.0 && tol < 1.0) {
        return None;
    }
    let bar = progress_bar(lead, PROGRESS_UNITS, "to --tol (log)", json);
    if bar.is_hidden() {
        return None;
    }
    let draw = bar.clone();
    let mut shown = 0;
    solver.set_progress(move |it, rel| {
        let done = if rel > 0.0 { rel.ln() / tol.ln() } else { 1.0 };
        let pos = (done.clamp(0.0, 1.0) * PROGRESS_UNITS as f64) as u64;
        // The bar never goes back (cg may report a lower bound far from the target).
        if pos > shown {
            shown = pos;
            draw.set_position(pos);
            draw.set_message(format!("(iteration {it}, relres {rel:.2e})"));
        }
    });
    Some(bar)
}

/// One `--monitor` line on stderr: `it`, which residual (`recurrence` or `true`), the
/// relative residual `||r|| / ||b||` of the original system and a note. A failed write to
/// stderr is ignored (the solve goes on).
fn monitor_line(it: usize, which: &str, rel: f64, note: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "{it:>5} KSP {which} residual ||r||/||b|| (original system) {rel:.6e}{note}"
    );
}

/// The gathered solution (in the reordered numbering) back in the problem's order, and the
/// report completed with the settings and the slowest rank's set-up seconds.
pub(crate) fn finish(
    prep: &Prepared<'_>,
    s: &Resolved,
    x: Vec<f64>,
    report: &mut SolveReport,
    setup: f64,
) -> Vec<f64> {
    let x = match &prep.input {
        Input::Global {
            reordered: Some(r), ..
        } => unpermute_vec(&r.perm, &x),
        _ => x,
    };
    finish_report(report, s, prep.read_s() + prep.reorder_s + setup, &x);
    x
}

/// Solve `problem` with settings `s` on `s.ranks` thread ranks, or simulated ranks on
/// `s.fabric` (`--backend sim`: modeled `time_s` and breakdown, measured `setup_s`): the
/// gathered solution (in the problem's order, whatever `s.reorder`) and the report (rank 0's
/// counters and times, the slowest rank's set-up plus reading and reordering).
pub(crate) fn solve_problem(
    problem: &Problem,
    s: &Resolved,
) -> Result<(Vec<f64>, SolveReport), CliError> {
    let name = &problem.name;
    if s.backend == Backend::Mpi {
        // `krylov solve` runs MPI jobs with `solve_mpi` before this; other callers (compare)
        // run in process only.
        return Err(bad(
            "--backend mpi is available for `krylov solve` (under mpirun) only",
        ));
    }
    let prep = prepare(problem, s)?;
    let n = problem.a.rows();
    let (ranks, fabric) = match &s.fabric {
        Some(spec) => {
            let fabric = load_fabric(Some(spec), s.mem_budget)?;
            let fabric_name = fabric.config().name.clone();
            // A modeled GPU rank stages its messages through host memory (as the real one
            // does) and computes on the preset's GPU model.
            let options = SimOptions {
                compute: (s.device == Device::Cuda).then_some(SimMemory::Gpu),
                ..SimOptions::default()
            };
            (Ranks::sim(s.ranks, fabric, options)?, Some(fabric_name))
        }
        None => (Ranks::threads(s.ranks)?, None),
    };
    let outs = ranks
        .with_threads_per_rank(s.threads)
        .run(|comm| solve_rank(comm, &prep, comm.rank()));
    let outs = outs.map_err(|e| run_error(name, e))?;

    let mut x = Vec::with_capacity(n);
    let mut report: Option<SolveReport> = None;
    let mut setup = 0.0f64;
    let mut slowest = 0.0f64;
    for out in outs {
        let (xr, rep, su) = out.map_err(|e| solve_error(name, e))?;
        x.extend_from_slice(&xr);
        setup = setup.max(su);
        slowest = slowest.max(rep.time_s);
        report.get_or_insert(rep);
    }
    let mut report = report.ok_or_else(|| bad("no rank produced a report"))?;
    if report.modeled {
        report.modeled_max_time_s = Some(slowest);
    }
    let x = finish(&prep, s, x, &mut report, setup);
    report.fabric = fabric;
    Ok((x, report))
}

/// Whether `--backend mpi` reads the matrix in parallel ([`load_local`]): with no
/// reordering, which needs the global graph. Otherwise every rank reads the whole file
/// ([`load`]), the documented fallback.
fn reads_in_parallel(s: &Resolved) -> bool {
    s.reorder == Reorder::None
}

/// Read this rank's rows of the matrix and its entries of the vectors the settings name,
/// all the ranks of `comm` together (collective): the same checks and messages as [`load`],
/// the same rows and bits as its matrix partitioned by `s.partition`, and no rank holding
/// more than its share. An error in the matrix is the same on every rank; the vectors are
/// read last, each rank on its own (every rank reads each vector file through, keeping its
/// entries), so a rank that fails there communicates no more.
fn load_local<C: Communicator + ?Sized>(
    comm: &C,
    matrix: &Path,
    s: &Resolved,
) -> Result<LocalProblem, CliError> {
    let start = Instant::now();
    let name = matrix.display().to_string();
    let m =
        read_matrix_market_dist(comm, matrix, s.partition, s.mem_budget).map_err(|e| match e {
            LinalgError::Input {
                over_budget: true, ..
            } => over(e),
            LinalgError::Input { .. } => CliError::bad(e),
            LinalgError::Comm(_) => CliError::failed(e),
            e => bad(format!("{name}: {e}")),
        })?;
    let (n, range) = (m.part.n(), m.part.range(comm.rank()));
    let b = rhs(m.rows(), range.clone(), n, &s.rhs, s.mem_budget)?;
    let x0 = match &s.x0 {
        X0::Zero => None,
        X0::File(p) => Some(read_part(p, range, n, "--x0", s.mem_budget)?),
    };
    Ok(LocalProblem {
        name,
        m,
        b,
        x0,
        read_s: start.elapsed().as_secs_f64(),
    })
}

/// `krylov solve --backend mpi` on this rank of `job` (inside [`crate::launch::mpi`], which
/// agrees on the outcome).
fn solve_mpi(
    job: &Job,
    args: &SolveArgs,
    mut s: Resolved,
    ranks_given: Option<usize>,
) -> Result<ExitCode, CliError> {
    let comm = job.comm();
    let p = comm.size();
    // 1. Inputs: every rank reads and checks them alone, then the job agrees (a bad file or
    //    flag ends every rank normally, with one line).
    if !s.threads_given {
        s.threads = default_threads(job.local_size());
    }
    let checked = check_ranks(ranks_given, p).and_then(|()| {
        s.ranks = p;
        if s.device == Device::Cuda {
            check()?;
        }
        Ok(())
    });
    if let Agreed::Stop(code) = agree(job, checked) {
        return Ok(code);
    }
    // Without a reordering the ranks read the file together, each keeping its rows (a .gz
    // or a pipe streamed by rank 0); with one, every rank reads the whole file.
    let problem;
    let name = args.matrix.display().to_string();
    let prepared = if reads_in_parallel(&s) {
        let local = load_local(comm, &args.matrix, &s);
        agree(job, local.and_then(|local| prepare_local(local, &s)))
    } else {
        problem = match agree(job, load(&args.matrix, &s)) {
            Agreed::Go(problem) => problem,
            Agreed::Stop(code) => return Ok(code),
        };
        agree(job, prepare(&problem, &s))
    };
    let prep = match prepared {
        Agreed::Go(prep) => prep,
        Agreed::Stop(code) => return Ok(code),
    };
    let name = &name;
    // 2. The solve and the gathers communicate: a failure seen by some ranks only would
    //    leave the others waiting in a collective, so it aborts the job.
    let (mine, mut report, setup) = solve_rank(comm, &prep, job.local_rank())
        .unwrap_or_else(|e| job.fail(solve_error(name, e)));
    let comm_failed = |e| -> ! { job.fail(CliError::failed(anyhow::anyhow!("{name}: {e}"))) };
    let counts: Vec<usize> = (0..p).map(|r| prep.part.range(r).len()).collect();
    let mut x = vec![0.0; counts.iter().sum()];
    comm.allgatherv_f64(&mine, &counts, &mut x)
        .unwrap_or_else(|e| comm_failed(e));
    let mut slowest = [setup];
    comm.allreduce_f64_with(&mut slowest, Op::Max, AllreduceAlgo::default())
        .unwrap_or_else(|e| comm_failed(e));
    // 3. Rank 0 writes the results (an unwritable --report is seen by rank 0 alone); the
    //    job agrees on how that went.
    if comm.rank() == 0 {
        let x = finish(&prep, &s, x, &mut report, slowest[0]);
        emit(args, &s, name, &x, &report)
    } else {
        Ok(ExitCode::SUCCESS)
    }
}

/// Run `krylov solve`.
pub(crate) fn run(args: Box<SolveArgs>) -> Result<ExitCode, CliError> {
    let args = *args;
    let file = match &args.config {
        Some(p) => read_config(p)?,
        None => Default::default(),
    };
    // Under MPI, `--ranks` must be absent or equal to the job's size.
    let ranks_given = args.settings.ranks.or(file.ranks);
    let mut s = resolve(args.settings.clone(), file, args.config.as_deref())?;
    if !s.monitor {
        s.bar = Bar::On { json: args.json };
    }
    if s.backend == Backend::Mpi {
        return crate::launch::mpi(|job| solve_mpi(job, &args, s, ranks_given));
    }
    // An output that cannot be written is refused before the solve.
    for path in args.output.iter().chain(&args.report) {
        crate::output::target(path)?;
    }
    let problem = load(&args.matrix, &s)?;
    let (x, report) = solve_problem(&problem, &s)?;
    emit(&args, &s, &problem.name, &x, &report)
}

/// Write the solution and report files the flags ask for, print the report, and map a
/// breakdown (whose report and last iterate are written all the same) or a non-converged
/// `--strict` solve to exit 1 with one line (rank 0 only under MPI).
pub(crate) fn emit(
    args: &SolveArgs,
    s: &Resolved,
    name: &str,
    x: &[f64],
    report: &SolveReport,
) -> Result<ExitCode, CliError> {
    if let Some(path) = &args.output {
        write_atomic(path, |w| Ok(write_array(w, x)?))?;
    }
    if let Some(path) = &args.report {
        write_atomic(path, |w| {
            serde_json::to_writer_pretty(&mut *w, report)?;
            Ok(writeln!(w)?)
        })?;
    }
    if s.monitor {
        let note = match (report.converged, report.stop_reason) {
            (true, _) => ", converged",
            (false, StopReason::Breakdown) => ", breakdown",
            (false, StopReason::Stagnated) => ", stagnated",
            (false, _) => ", not converged",
        };
        monitor_line(
            report.equivalent_iterations,
            "true",
            report.relres_true,
            note,
        );
    }
    if args.json {
        let line = serde_json::to_string(report).map_err(CliError::failed)?;
        out!("{line}");
    } else {
        print_human(name, report);
    }
    if let Some(e) = report.breakdown_error() {
        let overflow = first_non_finite(x);
        return Err(breakdown_failure(
            name,
            report,
            &e,
            s.x0 != X0::Zero,
            overflow,
        ));
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

/// Read a Matrix Market matrix within `budget` and check what CG needs of it: its
/// declared sizes against the file and the budget (the reader), an entry for every row's
/// diagonal before the CSR of its declared rows is allocated, then symmetry.
pub(crate) fn read_spd_csr(path: &Path, budget: MemBudget) -> Result<CsMat<f64>, CliError> {
    let name = path.display().to_string();
    let mm = read_matrix_market_path_within(path, budget).map_err(read_error)?;
    check_spd_storage(&mm).map_err(|e| bad(format!("{name}: {e}")))?;
    let a = mm.to_csr_full().map_err(CliError::bad)?;
    check_symmetric(a.view()).map_err(|e| bad(format!("{name}: {e}")))?;
    Ok(a)
}

/// A file that does not read: bad input (exit 2), with how to raise the budget when its
/// sizes are over it.
fn read_error(e: MtxError) -> CliError {
    match e {
        MtxError::OverBudget { .. } => over(e),
        _ => CliError::bad(e),
    }
}

/// Entries `range` of the vector file `path`, which must hold `n` entries.
pub(crate) fn read_part(
    path: &Path,
    range: Range<usize>,
    n: usize,
    what: &str,
    budget: MemBudget,
) -> Result<Vec<f64>, CliError> {
    let (len, v) = read_vector_part_path_within(path, range, budget).map_err(read_error)?;
    if len != n {
        return Err(bad(format!(
            "{}: {what} vector has {len} entries, the matrix has {n} rows",
            path.display(),
        )));
    }
    Ok(v)
}

/// Entries `range` of the right-hand side of an `n`-row matrix whose rows `range` are `rows`.
pub(crate) fn rhs(
    rows: LocalRows<'_>,
    range: Range<usize>,
    n: usize,
    rhs: &Rhs,
    budget: MemBudget,
) -> Result<Vec<f64>, CliError> {
    Ok(match rhs {
        Rhs::UnitSolution => {
            let (ptr, vals) = (rows.indptr, rows.vals);
            (0..range.len())
                .map(|i| vals[ptr[i] - ptr[0]..ptr[i + 1] - ptr[0]].iter().sum())
                .collect()
        }
        Rhs::Ones => vec![1.0; range.len()],
        Rhs::Random(seed) => {
            let mut rng = SplitMix64::new(*seed);
            rng.skip(range.start as u64);
            range.map(|_| 2.0 * rng.next_f64() - 1.0).collect()
        }
        Rhs::File(p) => read_part(p, range, n, "--rhs", budget)?,
    })
}

/// Map a rank's error: breakdowns (only a right-hand side whose norm is not finite: one
/// inside the iteration is a report, see [`emit`]) and communication failures are failed
/// runs (exit 1); everything else is bad input (exit 2).
pub(crate) fn solve_error(name: &str, e: KrylovError) -> CliError {
    let msg = anyhow::anyhow!("{name}: {e}");
    match e {
        KrylovError::Breakdown { .. } | KrylovError::Comm(_) => CliError::failed(msg),
        _ => CliError::bad(msg),
    }
}

/// The failed run of a solve that broke down (`e`, from its report; `x0_given`: the solve
/// started from a given x0; `overflow`: the iterate's first non-finite entry,
/// [`first_non_finite`]): one line naming the method,
/// iteration, quantity and value, and what to try ([`breakdown_remedy`]). An initial
/// residual that overflows is the input's fault: bad input (exit 2).
pub(crate) fn breakdown_failure(
    name: &str,
    report: &SolveReport,
    e: &KrylovError,
    x0_given: bool,
    overflow: Option<(usize, f64)>,
) -> CliError {
    let (remedy, input) = match out_of_range(report, x0_given, overflow) {
        Some(r) => r,
        None => (breakdown_remedy(&report.method).to_string(), false),
    };
    let msg = anyhow::anyhow!("{name}: {e}; {remedy}");
    if input {
        CliError::bad(msg)
    } else {
        CliError::failed(msg)
    }
}

/// The cause of a breakdown on a value outside the double range (infinite, or the NaN
/// of an overflow meeting an underflow or another overflow), which says nothing about
/// whether A is SPD: what to try, and whether the input itself is out of range (an x0 whose
/// residual `b - A x0` overflows). `None`: a finite value (the method's own remedies).
pub(crate) fn out_of_range(
    report: &SolveReport,
    x0_given: bool,
    overflow: Option<(usize, f64)>,
) -> Option<(String, bool)> {
    let b = report.breakdown.as_ref()?;
    if b.value.is_finite() {
        return None;
    }
    if b.iteration == 0 && x0_given && b.value.is_infinite() {
        return Some((
            "the initial residual b - A x0 overflows the double range: the given x0 is \
             too large for this system (try --x0 zero, or an x0 of the solution's magnitude)"
                .into(),
            true,
        ));
    }
    if let Some((i, v)) = overflow {
        return Some((
            format!(
                "the solution overflows the double range (entry {} of x is {v:e}): scale b \
                 down by a power of two and x back up outside double precision",
                i + 1
            ),
            false,
        ));
    }
    Some((
        "a value left the double range (an overflow, or the NaN of one meeting another or an \
         underflow), which says nothing about the matrix being SPD: the magnitudes of A, b \
         and x0 are too far apart for double precision; scale the system"
            .into(),
        false,
    ))
}

/// The first entry of `x` (0-based) that is not finite, and its value: a solution that
/// overflowed on its way out of the scaled system.
pub(crate) fn first_non_finite(x: &[f64]) -> Option<(usize, f64)> {
    x.iter().position(|v| !v.is_finite()).map(|i| (i, x[i]))
}

/// What to try after `method` (a report's method name) broke down on a finite value: the
/// one place that knows each method's remedies ([`out_of_range`] for a non-finite one).
pub(crate) fn breakdown_remedy(method: &str) -> &'static str {
    match method.parse::<Method>() {
        Ok(Method::Cg) => {
            "CG needs a symmetric positive definite matrix: a non-positive curvature in cg \
             means the matrix is indefinite or too ill-conditioned for double precision"
        }
        Ok(Method::Ccg) => {
            "try --replace-every N (e.g. 50), or --method cg (two reductions per iteration, \
             the most stable recurrence); if the matrix is not SPD no CG method applies"
        }
        Ok(Method::Pipecg) => {
            "try --replace-every N (e.g. 50; keep --auto-replace on), or a method with fewer \
             recurrences such as --method cg; if the matrix is not SPD no CG method applies"
        }
        Ok(Method::Prcg | Method::Pipeprcg) => {
            "try --method cg (the same recurrence with the step's norm reduced, not predicted), \
             or a loop preconditioner; if the matrix is not SPD no CG method applies"
        }
        Ok(Method::Groppcg) => {
            "try --method cg (p^T A p computed, not carried by recurrence), or --method prcg; \
             if the matrix is not SPD no CG method applies"
        }
        Ok(Method::Plcg) => {
            "try a smaller --depth (deep pipelines lose accuracy in rounding), or --method \
             pipecg or cg; if the matrix is not SPD no CG method applies"
        }
        Ok(Method::Cbcg | Method::Cbcgr | Method::Cacg) => {
            "try a smaller --k, --basis chebyshev or newton (better conditioned than \
             monomial), or --method cg; if the matrix is not SPD no CG method applies"
        }
        Err(_) => "try --method cg",
    }
}

fn finish_report(r: &mut SolveReport, s: &Resolved, setup_s: f64, x: &[f64]) {
    r.backend = s.backend.name().into();
    r.fabric = None;
    r.device = s.device.name().into();
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
        "{name}: n = {}, nnz = {}; {} ({} precond) on {} rank(s) ({} backend, {} device), {} thread(s)",
        r.n,
        r.nnz,
        r.method,
        r.precond,
        r.ranks,
        r.backend,
        r.device,
        r.threads
    );
    let status = match (&r.breakdown, r.converged) {
        (Some(b), _) => format!(
            "BREAKDOWN at iteration {}: {} = {:e}; the last iterate",
            b.iteration, b.quantity, b.value
        ),
        (None, true) => format!("converged in {} iterations", r.iterations),
        (None, false) => format!(
            "NOT converged ({:?}) after {} iterations",
            r.stop_reason, r.iterations
        ),
    };
    let err = r
        .error_vs_ones
        .map_or(String::new(), |e| format!(", error_vs_ones {e:.3e}"));
    out!(
        "{status}: relres_true {:.3e} (recurrence {:.3e}){err}",
        r.relres_true,
        r.relres_recurrence
    );
    if r.stop_reason == StopReason::Stagnated && r.relres_true <= r.tol {
        out!(
            "the computed relres_true {:.3e} meets the tolerance {:.1e}, but not by more than \
             the bound on its rounding error: convergence cannot be certified for the returned \
             x, the tolerance is below what double precision certifies for this system",
            r.relres_true,
            r.tol
        );
    } else if r.stop_reason == StopReason::Stagnated {
        out!(
            "the true residual stopped decreasing at relres_true {:.3e}: the tolerance {:.1e} is \
             below what double precision attains for this system with {}",
            r.relres_true,
            r.tol,
            r.method
        );
    }
    if let Some(e) = &r.eigs {
        let op = match r.precond.as_str() {
            "none" => "A",
            "jacobi" => "S A S (Jacobi-scaled)",
            "user" => "M^-1 A (the embedder's M)",
            _ => "M^-1 S A S (preconditioned, Jacobi-scaled)",
        };
        out!(
            "eigs of {op}, Ritz values from {} CG steps: lambda_min {:.6e}, lambda_max {:.6e}, condition {:.6e}",
            e.steps, e.lambda_min, e.lambda_max, e.condition
        );
    }
    let t = &r.time_breakdown;
    if r.precond_applies > 0 {
        let detail = match (r.precond_degree, r.precond_shift) {
            (Some(d), _) => format!(" of degree {d}"),
            (_, Some(a)) if a > 0.0 => format!(", IC(0) shifted by {a:e} (Manteuffel)"),
            (_, Some(_)) => ", IC(0) without shift".to_string(),
            _ => String::new(),
        };
        out!(
            "preconditioner {}{detail}: {} applications, {:.3} s",
            r.precond,
            r.precond_applies,
            t.precond
        );
    }
    out!(
        "{} reductions (+{} setup), {} halo exchanges; solve {:.3} s (spmv {:.3}, blas {:.3}, allreduce {:.3}, halo {:.3}, transfer {:.3}, precond {:.3}, other {:.3}), setup {:.3} s",
        r.reductions, r.setup_reductions, r.halo_exchanges, r.time_s, t.spmv, t.blas, t.allreduce, t.halo, t.transfer, t.precond, t.other, r.setup_s
    );
    if r.modeled {
        let us = |v: f64| v * 1e6;
        out!(
            "modeled on fabric {} (setup measured): solve {:.3} us (spmv {:.3}, blas {:.3}, allreduce {:.3}, halo {:.3}, transfer {:.3}, precond {:.3}, other {:.3})",
            r.fabric.as_deref().unwrap_or("?"),
            us(r.time_s), us(t.spmv), us(t.blas), us(t.allreduce), us(t.halo), us(t.transfer), us(t.precond), us(t.other)
        );
    }
}
