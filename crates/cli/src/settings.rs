//! Solve settings: a `--config` TOML file, overridden by flags, then the contract's
//! defaults; checked for unsupported combinations.

use std::path::Path;

use castack_collectives::AllreduceAlgo;
use castack_krylov::{Basis, Method, PartitionKind, Precond, SpmvMode};

use crate::args::{Backend, Device, Reorder, Rhs, SolveSettings, X0};
use crate::exit::{bad, CliError};

/// Every solve setting, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) rhs: Rhs,
    pub(crate) x0: X0,
    pub(crate) method: Method,
    pub(crate) k: usize,
    pub(crate) basis: Basis,
    pub(crate) precond: Precond,
    pub(crate) reorder: Reorder,
    pub(crate) tol: f64,
    pub(crate) atol: f64,
    pub(crate) max_iter: usize,
    pub(crate) ranks: usize,
    /// Worker threads of each rank's kernels.
    pub(crate) threads: usize,
    /// Whether `threads` was given (flag or file) rather than derived from the cores (under
    /// mpi the default is derived again from the ranks of the node, once they are known).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) threads_given: bool,
    pub(crate) partition: PartitionKind,
    pub(crate) backend: Backend,
    pub(crate) device: Device,
    pub(crate) spmv: SpmvMode,
    pub(crate) allreduce: AllreduceAlgo,
    pub(crate) history: bool,
    /// `--monitor`: a line per iteration on stderr (rank 0).
    pub(crate) monitor: bool,
    /// `--eigs`: Ritz-value estimates in the report.
    pub(crate) eigs: bool,
    /// Whether rank 0 may draw a progress bar (not a flag: `krylov solve` sets it).
    pub(crate) bar: Bar,
    pub(crate) strict: bool,
    pub(crate) mpk: bool,
    /// Periodic residual replacement (`None`: only after a missed check).
    pub(crate) replace_every: Option<usize>,
    /// Strategy of the SpMV halo and matrix-powers exchanges.
    pub(crate) exchange: castack_neighbor::Strategy,
    /// The fabric preset or TOML path of the sim backend (default peach2); `None` elsewhere.
    pub(crate) fabric: Option<String>,
}

/// The progress bar of a solve (`crate::solve::attach_monitor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bar {
    /// None (`krylov compare`, or `--monitor`).
    Off,
    /// On rank 0 when stderr is a terminal; `json`: the report goes to stdout as JSON
    /// (then no bar when stdout is a pipe or file, as `output::progress_bar` decides).
    On { json: bool },
}

/// Read a `--config` file.
pub(crate) fn read_config(path: &Path) -> Result<SolveSettings, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| bad(format!("config {}: {}", path.display(), e.message())))
}

/// The default `--threads`: each of the `ranks_here` ranks on this node gets an equal share
/// of the cores this process may run on, at least one, so that ranks and their workers never
/// outnumber the cores.
pub(crate) fn default_threads(ranks_here: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / ranks_here.max(1)).max(1)
}

/// Flags over file over defaults.
pub(crate) fn resolve(flags: SolveSettings, file: SolveSettings) -> Result<Resolved, CliError> {
    macro_rules! pick {
        ($f:ident, $default:expr) => {
            flags.$f.clone().or(file.$f.clone()).unwrap_or($default)
        };
    }
    let mut r = Resolved {
        rhs: pick!(rhs, Rhs::UnitSolution),
        x0: pick!(x0, X0::Zero),
        method: pick!(method, Method::Cg),
        k: pick!(k, 4),
        basis: pick!(basis, Basis::Chebyshev),
        precond: pick!(precond, Precond::Jacobi),
        reorder: pick!(reorder, Reorder::None),
        tol: pick!(tol, 1e-8),
        atol: pick!(atol, 0.0),
        max_iter: pick!(max_iter, 100_000),
        ranks: pick!(ranks, 1),
        threads: 1,
        threads_given: flags.threads.or(file.threads).is_some(),
        partition: pick!(partition, PartitionKind::Rows),
        backend: pick!(backend, Backend::Threads),
        device: pick!(device, Device::Cpu),
        spmv: pick!(spmv, SpmvMode::Halo),
        allreduce: pick!(allreduce, AllreduceAlgo::default()),
        history: pick!(history, false),
        monitor: pick!(monitor, false),
        eigs: pick!(eigs, false),
        bar: Bar::Off,
        strict: pick!(strict, false),
        mpk: pick!(mpk, false),
        replace_every: flags.replace_every.or(file.replace_every),
        exchange: pick!(exchange, castack_neighbor::Strategy::Naive),
        fabric: None,
    };
    let fabric = flags.fabric.or(file.fabric);
    if r.replace_every == Some(0) {
        return Err(bad("--replace-every must be at least 1 (got 0)"));
    }
    if r.ranks == 0 {
        return Err(bad("--ranks must be at least 1 (got 0)"));
    }
    if let Some(0) = flags.threads.or(file.threads) {
        return Err(bad("--threads must be at least 1 (got 0)"));
    }
    // Under mpi the ranks of this node are known once the job has started (mpi_cli.rs).
    r.threads = flags
        .threads
        .or(file.threads)
        .unwrap_or_else(|| default_threads(r.ranks));
    if r.k == 0 {
        return Err(bad("--k must be at least 1 (got 0)"));
    }
    match r.backend {
        // mpi: P and the build's feature are checked where the job starts (mpi_cli.rs).
        Backend::Threads | Backend::Mpi => {}
        // sim: the fabric is loaded and the ranks checked against its nodes in solve.rs.
        Backend::Sim => r.fabric = Some(fabric.clone().unwrap_or_else(|| "peach2".into())),
    }
    if let (Some(f), None) = (&fabric, &r.fabric) {
        return Err(bad(format!(
            "--fabric {f} applies to --backend sim only (backend is {})",
            r.backend.name()
        )));
    }
    // A real GPU is checked before anything is read (one line naming the missing driver
    // or device); under mpi every rank checks it as part of its agreed input step
    // (mpi_cli.rs); `--backend sim` models the GPU and needs none.
    if r.device == Device::Cuda && r.backend == Backend::Threads {
        crate::cuda_cli::check()?;
    }
    Ok(r)
}
