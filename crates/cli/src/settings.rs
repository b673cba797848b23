//! Solve settings: a `--config` TOML file, overridden by flags, then the contract's
//! defaults; checked for unsupported combinations.

use std::path::Path;

use castack_collectives::fabric_sim::MemBudget;
use castack_collectives::AllreduceAlgo;
use castack_krylov::{Basis, Method, PartitionKind, Precond, SpmvMode, K_MAX};

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
    pub(crate) precond_degree: usize,
    pub(crate) reorder: Reorder,
    pub(crate) tol: f64,
    pub(crate) atol: f64,
    pub(crate) max_iter: usize,
    pub(crate) ranks: usize,
    /// Worker threads of each rank's kernels.
    pub(crate) threads: usize,
    /// Whether `threads` was given (flag or file) rather than derived from the cores (under
    /// mpi the default is derived again from the ranks of the node, once they are known).
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
    /// Automatic residual replacement (pipecg).
    pub(crate) auto_replace: bool,
    /// Strategy of the SpMV halo and matrix-powers exchanges.
    pub(crate) exchange: castack_neighbor::Strategy,
    /// The fabric preset or TOML path of the sim backend (default peach2); `None` elsewhere.
    pub(crate) fabric: Option<String>,
    /// The memory budget (`--mem-budget`, the config file, `KRYLOV_MEM_BUDGET`, half the
    /// physical memory: `crate::budget`).
    pub(crate) mem_budget: MemBudget,
}

/// The progress bar of a solve (drawn by `solve` on rank 0).
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
    let file: SolveSettings = toml::from_str(&text)
        .map_err(|e| bad(format!("config {}: {}", path.display(), e.message())))?;
    check_values(&file, Origin::Config(path))?;
    Ok(file)
}

/// Where a setting came from, to name it in a message: `--max-iter` on the command line,
/// `max_iter` in a config file (with the file).
#[derive(Debug, Clone, Copy)]
enum Origin<'a> {
    Flags,
    Config(&'a Path),
}

impl Origin<'_> {
    /// "`--replace-every`" or "config solve.toml: `replace_every`" for the TOML key `key`.
    fn name(self, key: &str) -> String {
        match self {
            Origin::Flags => format!("--{}", key.replace('_', "-")),
            Origin::Config(path) => format!("config {}: {key}", path.display()),
        }
    }
}

/// The most worker threads a rank's kernel pool may start: far above any node's cores
/// (more only oversubscribe them), far below what exhausts the process's threads
/// (`--threads 4294967296` spawned threads without bound).
pub(crate) const MAX_THREADS: usize = 1024;

/// The numeric settings that mean nothing outside their range (0 ranks, threads, k or
/// replacement period; a negative or non-finite tolerance), named as `origin` gives them.
fn check_values(s: &SolveSettings, origin: Origin<'_>) -> Result<(), CliError> {
    let counts = [
        ("ranks", s.ranks),
        ("threads", s.threads),
        ("k", s.k),
        ("replace_every", s.replace_every),
    ];
    for (key, value) in counts {
        if value == Some(0) {
            return Err(bad(format!(
                "{} must be at least 1 (got 0)",
                origin.name(key)
            )));
        }
    }
    if let Some(t) = s.threads.filter(|&t| t > MAX_THREADS) {
        return Err(bad(format!(
            "{} must be at most {MAX_THREADS} worker threads per rank (got {t})",
            origin.name("threads")
        )));
    }
    for (key, value) in [("tol", s.tol), ("atol", s.atol)] {
        if let Some(v) = value.filter(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(bad(format!(
                "{} must be a finite number >= 0 (got {v})",
                origin.name(key)
            )));
        }
    }
    Ok(())
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
    // The file's values were checked as it was read (`read_config`).
    check_values(&flags, Origin::Flags)?;
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
        precond_degree: pick!(precond_degree, castack_krylov::PRECOND_DEGREE),
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
        auto_replace: pick!(auto_replace, true),
        exchange: pick!(exchange, castack_neighbor::Strategy::Naive),
        fabric: None,
        mem_budget: crate::budget::resolve(flags.mem_budget.or(file.mem_budget))?,
    };
    let fabric = flags.fabric.or(file.fabric);
    // Under mpi the ranks of this node are known once the job has started (mpi_cli.rs).
    r.threads = flags
        .threads
        .or(file.threads)
        .unwrap_or_else(|| default_threads(r.ranks));
    // Before anything is read or allocated: the s-step workspace grows with k.
    if r.k == 0 || r.k > K_MAX {
        return Err(bad(format!("--k must be within 1..={K_MAX} (got {})", r.k)));
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
