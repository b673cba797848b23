//! Where a subcommand's ranks run, and the one place that picks it: `--backend threads`
//! (thread ranks in this process, each with its own pool of kernel threads), `--backend
//! sim` (thread ranks on a simulated fabric, timed by modeled clocks) or `--backend mpi`
//! (this process is one rank of an `mpirun -np P` job, [`Job`]). `solve`, `compare`
//! (through `solve`), `bench collectives`, `bench neighbor` and `bench pingpong` hand the
//! ranks one closure over `&dyn Communicator` ([`Ranks::run`]); under MPI they run inside
//! [`mpi`], which starts the job and agrees on its outcome ([`agree`]), and a failure
//! inside a collective ends the job with [`Job::fail`] (print one line, `MPI_Abort`).
//! See `mpi_cli.rs` for what `--backend mpi` promises.

use std::process::ExitCode;

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{
    Collectives, CommError, Communicator, Op, SimOptions, SimUniverse, ThreadUniverse,
};

use crate::exit::{bad, CliError};
pub(crate) use crate::mpi_cli::Job;

/// The ranks of a run.
pub(crate) enum Ranks<'j> {
    /// Thread ranks in this process (wall time).
    Threads(ThreadUniverse),
    /// Thread ranks on a simulated fabric (modeled time).
    Sim(SimUniverse),
    /// This process is one rank of an MPI job.
    Mpi(&'j Job),
}

impl Ranks<'_> {
    /// `p` thread ranks.
    pub(crate) fn threads(p: usize) -> Result<Self, CliError> {
        Ok(Ranks::Threads(
            ThreadUniverse::new(p).map_err(CliError::bad)?,
        ))
    }

    /// `p` simulated ranks on `fabric`.
    pub(crate) fn sim(p: usize, fabric: Fabric, options: SimOptions) -> Result<Self, CliError> {
        Ok(Ranks::Sim(
            SimUniverse::new(p, fabric, options).map_err(CliError::bad)?,
        ))
    }

    /// Each in-process rank's kernels on a pool of `threads` threads (an MPI rank sets its
    /// own).
    pub(crate) fn with_threads_per_rank(self, threads: usize) -> Self {
        match self {
            Ranks::Threads(u) => Ranks::Threads(u.with_threads_per_rank(threads)),
            Ranks::Sim(u) => Ranks::Sim(u.with_threads_per_rank(threads)),
            mpi => mpi,
        }
    }

    /// The simulated universe, on `--backend sim`.
    pub(crate) fn sim_universe(&self) -> Option<&SimUniverse> {
        match self {
            Ranks::Sim(u) => Some(u),
            _ => None,
        }
    }

    /// Run `f` on every rank: every rank's result in rank order in process, this rank's
    /// alone under MPI.
    pub(crate) fn run<R: Send>(
        &self,
        f: impl Fn(&dyn Communicator) -> R + Sync,
    ) -> Result<Vec<R>, CommError> {
        match self {
            Ranks::Threads(u) => u.run(|comm| f(comm)),
            Ranks::Sim(u) => u.run(|comm| f(comm)),
            Ranks::Mpi(job) => Ok(vec![f(job.comm())]),
        }
    }
}

/// Run a subcommand as this process's rank of an MPI job: start the job, run `body` on it,
/// and agree on the outcome. Every rank reaches the end (a failure inside a collective
/// aborts there); an error seen by some ranks only (a rank-0 write, a flag) is printed once
/// and every rank exits with its code.
pub(crate) fn mpi(
    body: impl FnOnce(&Job) -> Result<ExitCode, CliError>,
) -> Result<ExitCode, CliError> {
    let job = Job::start()?;
    let outcome = body(&job);
    match agree(&job, outcome) {
        Agreed::Go(code) | Agreed::Stop(code) => Ok(code),
    }
}

/// What the job agreed after a step every rank did on its own (no communication).
pub(crate) enum Agreed<T> {
    /// Every rank succeeded.
    Go(T),
    /// Some rank failed and its line is printed: every rank exits with this code.
    Stop(ExitCode),
}

/// Agree on the outcome of a step every rank did alone: one allreduce, so no rank can be
/// left waiting. On a failure the lowest failing rank prints its error, a barrier holds the
/// others until it has (`mpirun` ends the job at the first non-zero exit), and every rank
/// stops with that rank's exit code.
pub(crate) fn agree<T>(job: &Job, local: Result<T, CliError>) -> Agreed<T> {
    let comm = job.comm();
    let rank = comm.rank() as i64;
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

/// `--ranks` under MPI: absent, or the job's size.
pub(crate) fn check_ranks(given: Option<usize>, p: usize) -> Result<(), CliError> {
    match given {
        Some(r) if r != p => Err(bad(format!(
            "--ranks {r} differs from this job's {p} MPI processes (under --backend mpi, P comes from `mpirun -np P`; leave --ranks out)"
        ))),
        _ => Ok(()),
    }
}

/// The rank counts a benchmark runs under MPI: the job's size (`--ranks` may only repeat
/// it).
pub(crate) fn job_ranks(job: &Job, given: Option<&[usize]>) -> Result<Vec<usize>, CliError> {
    let p = job.comm().size();
    match given {
        None => Ok(vec![p]),
        Some([r]) => check_ranks(Some(*r), p).map(|()| vec![p]),
        Some(list) => Err(bad(format!(
            "--ranks {list:?}: under --backend mpi the only rank count is this job's {p} (from `mpirun -np P`)"
        ))),
    }
}
