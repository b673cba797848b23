//! `--backend mpi` (feature `mpi`): this process is one rank of an `mpirun -np P` job.
//!
//! - **Ranks.** P is the size of `MPI_COMM_WORLD`; `--ranks` must be absent or equal to it
//!   (else exit 2). The binary initializes MPI once (`mpi::initialize`) and runs the solver,
//!   unchanged, over [`MpiComm`], our `Communicator` on a duplicate of the world.
//! - **Reading the matrix.** The ranks read a plain Matrix Market file together
//!   ([`castack_krylov::dist::read_matrix_market_dist`]): each parses a line-aligned byte
//!   range, sends each entry to the rank owning its row, and keeps its rows only, so no rank
//!   ever holds more than about its share. The rows and the partition are bit for bit those
//!   of `--backend threads --ranks P` (duplicates summed in file order), and an error in the
//!   file is the whole-file reader's, `file:line` included, agreed by every rank (one line,
//!   exit 2). Each rank reads the vector files (`--rhs`, `--x0`) through, keeping its
//!   entries. With the same partition and a bit-identical reduction algorithm the iterates
//!   are bit for bit those of the threads backend.
//!   A `.gz` file (or a pipe) has no byte ranges: rank 0 reads it and sends the entries on
//!   in batches. Fallback (documented in the README and `--help`): `--reorder rcm` needs
//!   the global graph, so with it every rank reads the whole file, checks it, and sets up
//!   only its own block (`DistCsr::from_global`), holding the global matrix while it sets
//!   up.
//! - **Output.** Rank 0 gathers the solution and alone writes `--output`, `--report`, the
//!   JSON line or the human summary; the report is rank 0's, with the slowest rank's set-up
//!   time, as on threads. Benchmark rows are likewise printed by rank 0 only.
//! - **Benchmarks.** `bench collectives`, `bench neighbor` and `bench pingpong` run their
//!   one measurement code, generic over the communicator, on [`MpiComm`]; P must suit the
//!   benchmark (`neighbor`: its layout's rank count; `pingpong`: 2), else exit 2 on every
//!   rank with one line naming the P needed.
//! - **Failures** never leave a rank waiting, and print one line `error: ...`; every rank
//!   exits with the code (2 bad input, 1 failed run) and `mpirun` adds its own note.
//!   - Inputs (flags, files) are checked by every rank on its own; the job then agrees with
//!     one allreduce, so a bad input seen by one rank or by all ends every rank normally,
//!     and only the lowest failing rank prints. Benchmark flag errors likewise.
//!   - Writing the results is rank 0's alone; the job then agrees on its outcome the same
//!     way.
//!   - A failure inside the solve or a benchmark (where the other ranks may be blocked in a
//!     collective) prints `error: rank R of P: ...` and calls `MPI_Abort` with the code.
//!     Rank 0 does so at once; other ranks first wait half a second, so that when every
//!     rank meets the same failure rank 0's abort ends the job and it is printed once.
//!     (Aborting only while the other ranks are alive: Open MPI 4.1's `mpirun` can crash
//!     when `MPI_Abort` comes after the other ranks have finalized.)

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use castack_collectives::bench_case::OpCase;
use castack_collectives::mpi::{MpiComm, NativeCollective, NativeOp};
use castack_collectives::schedule::{Datatype, Reduction};
use castack_collectives::{AllreduceAlgo, Collectives, Communicator, Op};
use mpi::environment::Universe;
use mpi::topology::Communicator as MpiTopology;

use castack_neighbor::grid::ProcessGrid;

use crate::args::X0;
use crate::args::{BenchCollectivesArgs, Device, SolveArgs};
use crate::bench::{rank_times, rank_times_with, row, BenchAlgo, Case, Run};
use crate::bench_neighbor::{BenchNeighborArgs, Case as NeighborCase};
use crate::exit::{bad, CliError};
use crate::pingpong::{BenchPingpongArgs, Mode as PingMode};
use crate::settings::Resolved;
use crate::solve::{
    emit, finish, load, prepare, prepare_local, read_part, rhs, solve_error, solve_rank,
    LocalProblem,
};
use crate::table::Row;
use castack_krylov::dist::read_matrix_market_dist;
use castack_krylov::KrylovError;
use castack_sparse::reorder::Reorder;

/// This process's part of the MPI job.
struct Job {
    // Dropped in this order: our communicator before MPI is finalized with the universe.
    comm: MpiComm,
    /// This rank's index among the ranks of its node (`MPI_COMM_TYPE_SHARED`): which GPU
    /// `--device cuda` opens.
    local_rank: usize,
    /// How many ranks of this job share this node (the default `--threads` divides its
    /// cores among them).
    local_size: usize,
    _universe: Universe,
}

impl Job {
    fn start() -> Result<Self, CliError> {
        let universe = mpi::initialize()
            .ok_or_else(|| CliError::failed(anyhow::anyhow!("MPI was already initialized")))?;
        let world = universe.world();
        let comm = MpiComm::new(&world);
        let node = MpiTopology::split_shared(&world, MpiTopology::rank(&world));
        let local_rank = usize::try_from(MpiTopology::rank(&node)).unwrap_or(0);
        let local_size = usize::try_from(MpiTopology::size(&node)).unwrap_or(1);
        Ok(Self {
            comm,
            local_rank,
            local_size,
            _universe: universe,
        })
    }

    /// Print `e` on one line and abort the whole job with its exit code.
    fn fail(&self, e: CliError) -> ! {
        let (rank, p) = (self.comm.rank(), self.comm.size());
        if rank != 0 {
            // If rank 0 meets the same error, its abort ends this process first.
            std::thread::sleep(Duration::from_millis(500));
        }
        if p > 1 {
            eprintln!("error: rank {rank} of {p}: {}", e.message());
        } else {
            eprintln!("error: {}", e.message());
        }
        self.comm.abort(i32::from(e.code()))
    }
}

/// `--ranks` under MPI: absent, or the job's size.
fn check_ranks(given: Option<usize>, p: usize) -> Result<(), CliError> {
    match given {
        Some(r) if r != p => Err(bad(format!(
            "--ranks {r} differs from this job's {p} MPI processes (under --backend mpi, P comes from `mpirun -np P`; leave --ranks out)"
        ))),
        _ => Ok(()),
    }
}

/// What the job agreed after a step every rank did on its own (no communication).
enum Agreed<T> {
    /// Every rank succeeded.
    Go(T),
    /// Some rank failed and its line is printed: every rank exits with this code.
    Stop(ExitCode),
}

/// Agree on the outcome of a step every rank did alone: one allreduce, so no rank can be
/// left waiting. On a failure the lowest failing rank prints its error, a barrier holds the
/// others until it has (`mpirun` ends the job at the first non-zero exit), and every rank
/// stops with that rank's exit code.
fn agree<T>(job: &Job, local: Result<T, CliError>) -> Agreed<T> {
    let (comm, rank) = (&job.comm, job.comm.rank() as i64);
    let all_ok = comm.size() as i64 * 256;
    let mut key = [match &local {
        Ok(_) => all_ok,
        Err(e) => rank * 256 + i64::from(e.code()),
    }];
    let failed = |e| -> ! {
        job.fail(CliError::failed(anyhow::anyhow!(
            "agreeing on an outcome: {e}"
        )))
    };
    comm.allreduce_i64(&mut key, Op::Min)
        .unwrap_or_else(|e| failed(e));
    match local {
        Ok(v) if key[0] == all_ok => Agreed::Go(v),
        local => {
            match local {
                Err(e) if key[0] / 256 == rank => eprintln!("error: {}", e.message()),
                _ => {}
            }
            comm.barrier().unwrap_or_else(|e| failed(e));
            Agreed::Stop(ExitCode::from((key[0] % 256) as u8))
        }
    }
}

/// Whether `--backend mpi` reads the matrix in parallel ([`load_local`]): with no
/// reordering, which needs the global graph. Otherwise every rank reads the whole file
/// ([`load`]), the documented fallback.
pub(crate) fn reads_in_parallel(s: &Resolved) -> bool {
    s.reorder == Reorder::None
}

/// Read this rank's rows of the matrix and its entries of the vectors the settings name,
/// all the ranks of `comm` together (collective): the same checks and messages as [`load`],
/// the same rows and bits as its matrix partitioned by `s.partition`, and no rank holding
/// more than its share. An error in the matrix is the same on every rank; the vectors are
/// read last, each rank on its own (every rank reads each vector file through, keeping its
/// entries), so a rank that fails there communicates no more.
pub(crate) fn load_local<C: Communicator + ?Sized>(
    comm: &C,
    matrix: &Path,
    s: &Resolved,
) -> Result<LocalProblem, CliError> {
    let start = Instant::now();
    let name = matrix.display().to_string();
    let m =
        read_matrix_market_dist(comm, matrix, s.partition, s.mem_budget).map_err(|e| match e {
            KrylovError::Input {
                over_budget: true, ..
            } => crate::budget::over(e),
            KrylovError::Input { .. } => CliError::bad(e),
            KrylovError::Comm(_) => CliError::failed(e),
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

/// `krylov solve --backend mpi` on this rank.
pub(crate) fn solve(
    args: &SolveArgs,
    mut s: Resolved,
    ranks_given: Option<usize>,
) -> Result<ExitCode, CliError> {
    let job = Job::start()?;
    let comm = &job.comm;
    let p = comm.size();
    // 1. Inputs: every rank reads and checks them alone, then the job agrees (a bad file or
    //    flag ends every rank normally, with one line).
    if !s.threads_given {
        s.threads = crate::settings::default_threads(job.local_size);
    }
    let checked = check_ranks(ranks_given, p).and_then(|()| {
        s.ranks = p;
        if s.device == Device::Cuda {
            crate::cuda_cli::check()?;
        }
        Ok(())
    });
    if let Agreed::Stop(code) = agree(&job, checked) {
        return Ok(code);
    }
    // Without a reordering the ranks read the file together, each keeping its rows (a .gz
    // or a pipe streamed by rank 0); with one, every rank reads the whole file.
    let problem;
    let name = args.matrix.display().to_string();
    let prepared = if reads_in_parallel(&s) {
        let local = load_local(comm, &args.matrix, &s);
        agree(&job, local.and_then(|local| prepare_local(local, &s)))
    } else {
        problem = match agree(&job, load(&args.matrix, &s)) {
            Agreed::Go(problem) => problem,
            Agreed::Stop(code) => return Ok(code),
        };
        agree(&job, prepare(&problem, &s))
    };
    let prep = match prepared {
        Agreed::Go(prep) => prep,
        Agreed::Stop(code) => return Ok(code),
    };
    let name = &name;
    // 2. The solve and the gathers communicate: a failure seen by some ranks only would
    //    leave the others waiting in a collective, so it aborts the job.
    let (mine, mut report, setup) =
        solve_rank(comm, &prep, job.local_rank).unwrap_or_else(|e| job.fail(solve_error(name, e)));
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
    let outcome = if comm.rank() == 0 {
        let x = finish(&prep, &s, x, &mut report, slowest[0]);
        emit(args, &s, name, &x, &report)
    } else {
        Ok(ExitCode::SUCCESS)
    };
    match agree(&job, outcome) {
        Agreed::Go(code) | Agreed::Stop(code) => Ok(code),
    }
}

/// `krylov bench collectives --backend mpi` on this rank.
pub(crate) fn bench(args: BenchCollectivesArgs) -> Result<ExitCode, CliError> {
    on_job(|bench| crate::bench::run_on(args, Some(bench)))
}

/// `krylov bench neighbor --backend mpi` on this rank.
pub(crate) fn bench_neighbor(args: BenchNeighborArgs) -> Result<ExitCode, CliError> {
    on_job(|bench| crate::bench_neighbor::run_on(args, Some(bench)))
}

/// `krylov bench pingpong --backend mpi` on this rank.
pub(crate) fn bench_pingpong(args: BenchPingpongArgs) -> Result<ExitCode, CliError> {
    on_job(|bench| crate::pingpong::run_on(args, Some(bench)))
}

/// Start this rank's job and run a benchmark on it. Every rank reaches the end (a failed
/// measurement aborts inside); flag errors (including a job size the benchmark cannot use)
/// and a failed `--verify` are the same on every rank, a `--plot` error is rank 0's alone:
/// the job agrees on the outcome, so one line is printed and every rank exits with its code.
fn on_job(run: impl FnOnce(&MpiBench) -> Result<ExitCode, CliError>) -> Result<ExitCode, CliError> {
    let bench = MpiBench { job: Job::start()? };
    let outcome = run(&bench);
    match agree(&bench.job, outcome) {
        Agreed::Go(code) | Agreed::Stop(code) => Ok(code),
    }
}

/// This rank's MPI job, as the `bench` commands run it.
pub(crate) struct MpiBench {
    job: Job,
}

impl MpiBench {
    /// The job's size (P of `mpirun -np P`).
    pub(crate) fn size(&self) -> usize {
        self.job.comm.size()
    }

    /// One `bench neighbor` case on the job (every rank calls it with the same case): the
    /// slowest rank's seconds per exchange, the same on every rank. A failure aborts the job.
    pub(crate) fn neighbor_case(&self, grid: Option<&ProcessGrid>, case: NeighborCase) -> f64 {
        crate::bench_neighbor::case_time(&self.job.comm, grid, case).unwrap_or_else(|e| {
            self.job
                .fail(CliError::failed(anyhow::anyhow!("bench neighbor: {e}")))
        })
    }

    /// One `bench pingpong` size on the job (both ranks call it): rank 0's half round trips
    /// in seconds, none on rank 1. A failure aborts the job.
    pub(crate) fn pingpong(
        &self,
        bytes: usize,
        iters: usize,
        warmup: usize,
        mode: PingMode,
    ) -> Vec<f64> {
        crate::pingpong::ping(&self.job.comm, bytes, iters, warmup, mode).unwrap_or_else(|e| {
            self.job
                .fail(CliError::failed(anyhow::anyhow!("pingpong: {e}")))
        })
    }

    /// The rank counts to run: the job's size (`--ranks` may only repeat it).
    pub(crate) fn ranks(&self, given: Option<&[usize]>) -> Result<Vec<usize>, CliError> {
        let p = self.job.comm.size();
        match given {
            None => Ok(vec![p]),
            Some([r]) => check_ranks(Some(*r), p).map(|()| vec![p]),
            Some(list) => Err(bad(format!(
                "--ranks {list:?}: under --backend mpi the only rank count is this job's {p} (from `mpirun -np P`)"
            ))),
        }
    }

    /// This process's rank.
    pub(crate) fn rank(&self) -> usize {
        self.job.comm.rank()
    }

    /// Time one case on the job (every rank calls it with the same case); a communication
    /// failure aborts the job. `--verify` is agreed: the row is verified when every rank's
    /// result matched its reference.
    pub(crate) fn measure(&self, case: Case, run: &Run<'_>) -> Result<Row, CliError> {
        let comm = &self.job.comm;
        let Case { op, algo, p, bytes } = case;
        let failed = |e| -> ! {
            self.job.fail(CliError::failed(anyhow::anyhow!(
                "{op:?} {}: {e}",
                algo.name()
            )))
        };
        let measured = match algo {
            BenchAlgo::Native => {
                let mut native = NativeCollective::new(comm, native_op(op, run.root), bytes)
                    .unwrap_or_else(|e| failed(e));
                rank_times_with(comm, (op, p, bytes), run, &mut |buf| {
                    native.execute_bytes(comm, buf)
                })
            }
            BenchAlgo::Schedule(a) => rank_times(comm, (a, p, bytes), run),
        };
        let (slowest, ok) = measured.unwrap_or_else(|e| failed(e));
        let mut all_ok = [i64::from(ok)];
        comm.allreduce_i64(&mut all_ok, Op::Min)
            .unwrap_or_else(|e| failed(e));
        let mut row = row(case, &slowest, run, run.verify.then_some(all_ok[0] == 1));
        row.backend = "mpi";
        Ok(row)
    }
}

/// The MPI library's own collective for a benchmarked operation (sums over f64).
fn native_op(op: OpCase, root: usize) -> NativeOp {
    let reduction = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    match op {
        OpCase::Bcast => NativeOp::Bcast { root },
        OpCase::Scatter => NativeOp::Scatter { root },
        OpCase::Gather => NativeOp::Gather { root },
        OpCase::Reduce => NativeOp::Reduce { root, reduction },
        OpCase::Allgather => NativeOp::Allgather,
        OpCase::Allreduce => NativeOp::Allreduce { reduction },
        OpCase::Alltoall => NativeOp::Alltoall,
        OpCase::Barrier => NativeOp::Barrier,
    }
}
