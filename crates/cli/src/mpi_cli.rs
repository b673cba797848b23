//! `--backend mpi` (feature `mpi`): this process is one rank of an `mpirun -np P` job.
//!
//! This file is the job itself ([`Job`]: start MPI, this rank's communicator, its place on
//! its node, `MPI_Abort`, the MPI library's own collectives); `launch` runs the
//! subcommands on it and agrees on their outcomes, `solve` reads and solves on it. What the
//! backend promises:
//!
//! - **Ranks.** P is the size of `MPI_COMM_WORLD`; `--ranks` must be absent or equal to it
//!   (else exit 2). The binary initializes MPI once (`mpi::initialize`) and runs the solver,
//!   unchanged, over [`MpiComm`], our `Communicator` on a duplicate of the world.
//! - **Reading the matrix.** The ranks read a plain Matrix Market file together
//!   ([`castack_krylov::read_matrix_market_dist`]): each parses a line-aligned byte
//!   range, sends each entry to the rank owning its row, and keeps its rows only, so no rank
//!   ever holds more than about its share. The rows and the partition are bit for bit those
//!   of `--backend threads --ranks P` (duplicates summed in file order), and an error in the
//!   file is the whole-file reader's, `file:line` included, agreed by every rank (one line,
//!   exit 2). Each rank reads the vector files (`--rhs`, `--x0`) through, keeping its
//!   entries. With the same partition and a bit-identical reduction algorithm the iterates
//!   are bit for bit those of the threads backend.
//!   A `.gz` file (or a pipe) has no byte ranges: rank 0 reads it and sends the entries on
//!   in batches. Fallback (documented in docs/mpi.md and `--help`): `--reorder rcm` needs
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

use std::time::Duration;

use castack_collectives::bench_case::OpCase;
use castack_collectives::mpi::{MpiComm, NativeCollective, NativeOp};
use castack_collectives::schedule::{Datatype, Reduction};
use castack_collectives::{CommError, Communicator, Op};
use mpi::collective::Root;
use mpi::environment::Universe;
use mpi::topology::Communicator as MpiTopology;

use crate::exit::CliError;

/// This process's part of the MPI job.
pub(crate) struct Job {
    // Dropped in this order: our communicator before MPI is finalized with the universe.
    comm: MpiComm,
    /// This rank's index among the ranks of its node (`MPI_COMM_TYPE_SHARED`): which GPU
    /// `--device cuda` opens.
    local_rank: usize,
    /// How many ranks of this job share this node (the default `--threads` divides its
    /// cores among them).
    local_size: usize,
    /// The world rank of this node's first rank (local rank 0): ranks with the same value
    /// share a node (`MPI_COMM_TYPE_SHARED`).
    node_leader: usize,
    _universe: Universe,
}

impl Job {
    /// Initialize MPI (once per process) and join the job.
    pub(crate) fn start() -> Result<Self, CliError> {
        let universe = mpi::initialize()
            .ok_or_else(|| CliError::failed(anyhow::anyhow!("MPI was already initialized")))?;
        let world = universe.world();
        let comm = MpiComm::new(&world);
        let node = MpiTopology::split_shared(&world, MpiTopology::rank(&world));
        let local_rank = usize::try_from(MpiTopology::rank(&node)).unwrap_or(0);
        let local_size = usize::try_from(MpiTopology::size(&node)).unwrap_or(1);
        // The node's first rank tells every rank of the node its world rank.
        let mut leader = MpiTopology::rank(&world);
        node.process_at_rank(0).broadcast_into(&mut leader);
        let node_leader = usize::try_from(leader).unwrap_or(0);
        Ok(Self {
            comm,
            local_rank,
            local_size,
            node_leader,
            _universe: universe,
        })
    }

    /// This rank's communicator ([`MpiComm`] on a duplicate of the world).
    pub(crate) fn comm(&self) -> &dyn Communicator {
        &self.comm
    }

    /// This rank's index among the ranks of its node.
    pub(crate) fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// How many ranks of this job share this node.
    pub(crate) fn local_size(&self) -> usize {
        self.local_size
    }

    /// The world rank of the first rank on this rank's node: equal for ranks that share
    /// memory.
    pub(crate) fn node_leader(&self) -> usize {
        self.node_leader
    }

    /// Print `e` on one line and abort the whole job with its exit code.
    pub(crate) fn fail(&self, e: CliError) -> ! {
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

    /// Run `f` with the MPI library's own collective for `op` (sums over f64, `root` for
    /// the rooted ones) on buffers of `bytes` per rank: `f` gets the communicator and the
    /// call that executes the collective on this rank's buffer.
    pub(crate) fn with_native<R>(
        &self,
        op: OpCase,
        root: usize,
        bytes: usize,
        f: impl FnOnce(
            &dyn Communicator,
            &mut dyn FnMut(&mut [u8]) -> Result<(), CommError>,
        ) -> Result<R, CommError>,
    ) -> Result<R, CommError> {
        let comm = &self.comm;
        let mut native = NativeCollective::new(comm, native_op(op, root), bytes)?;
        f(comm, &mut |buf| native.execute_bytes(comm, buf))
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
