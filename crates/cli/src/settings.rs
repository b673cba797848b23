//! Solve settings: a `--config` TOML file, overridden by flags, then the contract's
//! defaults; checked for unsupported combinations.

use std::path::Path;

use castack_collectives::fabric_sim::MemBudget;
use castack_krylov::{InvalidSetting, PartitionKind, SolverConfig, SpmvMode};

use crate::args::{Backend, Device, Reorder, Rhs, SolveSettings, X0};
use crate::exit::{bad, CliError};

/// Every solve setting, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The solver's settings: [`SolverConfig::default`], then the config file's, then the
    /// flags' (`solver_config`), checked by [`SolverConfig::check`].
    pub(crate) solver: SolverConfig,
    pub(crate) rhs: Rhs,
    pub(crate) x0: X0,
    pub(crate) reorder: Reorder,
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
    /// `--monitor`: a line per iteration on stderr (rank 0).
    pub(crate) monitor: bool,
    /// Whether rank 0 may draw a progress bar (not a flag: `krylov solve` sets it).
    pub(crate) bar: Bar,
    pub(crate) strict: bool,
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

/// The CLI's own numeric settings that mean nothing outside their range (0 ranks or
/// threads, more threads than [`MAX_THREADS`]), named as `origin` gives them; the solver's
/// are [`SolverConfig::check`]'s (`solver_config`).
fn check_values(s: &SolveSettings, origin: Origin<'_>) -> Result<(), CliError> {
    for (key, value) in [("ranks", s.ranks), ("threads", s.threads)] {
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
    Ok(())
}

/// The solver's settings of `flags` over `file` (read from `path`) over
/// [`SolverConfig::default`], the one default set; a refused setting names the flag or
/// config key that gave it (neither: the default's key, refused only in combination).
fn solver_config(
    flags: &SolveSettings,
    file: &SolveSettings,
    path: Option<&Path>,
) -> Result<SolverConfig, CliError> {
    let mut cfg = SolverConfig::default();
    for s in [file, flags] {
        macro_rules! set {
            ($($key:ident),*) => {$(
                if let Some(v) = s.$key.clone() {
                    cfg.$key = v;
                }
            )*};
        }
        set!(
            method,
            k,
            depth,
            basis,
            precond,
            precond_degree,
            tol,
            atol,
            max_iter,
            allreduce
        );
        set!(history, eigs, mpk, auto_replace, exchange);
        if s.replace_every.is_some() {
            cfg.replace_every = s.replace_every;
        }
    }
    cfg.check().map_err(|InvalidSetting { key, problem }| {
        let name = if flags.gives(key) {
            Origin::Flags.name(key)
        } else if let (true, Some(path)) = (file.gives(key), path) {
            Origin::Config(path).name(key)
        } else {
            key.to_string()
        };
        bad(format!("{name} {problem}"))
    })?;
    Ok(cfg)
}

/// The default `--threads`: each of the `ranks_here` ranks on this node gets an equal share
/// of the cores this process may run on, at least one, so that ranks and their workers never
/// outnumber the cores.
pub(crate) fn default_threads(ranks_here: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / ranks_here.max(1)).max(1)
}

/// Flags over file (read from `path`) over defaults.
pub(crate) fn resolve(
    flags: SolveSettings,
    file: SolveSettings,
    path: Option<&Path>,
) -> Result<Resolved, CliError> {
    // The file's CLI values were checked as it was read (`read_config`); the solver's are
    // checked here, once, on what the solve will use.
    check_values(&flags, Origin::Flags)?;
    let solver = solver_config(&flags, &file, path)?;
    macro_rules! pick {
        ($f:ident, $default:expr) => {
            flags.$f.clone().or(file.$f.clone()).unwrap_or($default)
        };
    }
    let mut r = Resolved {
        solver,
        rhs: pick!(rhs, Rhs::UnitSolution),
        x0: pick!(x0, X0::Zero),
        reorder: pick!(reorder, Reorder::None),
        ranks: pick!(ranks, 1),
        threads: 1,
        threads_given: flags.threads.or(file.threads).is_some(),
        partition: pick!(partition, PartitionKind::Rows),
        backend: pick!(backend, Backend::Threads),
        device: pick!(device, Device::Cpu),
        spmv: pick!(spmv, SpmvMode::Halo),
        monitor: pick!(monitor, false),
        bar: Bar::Off,
        strict: pick!(strict, false),
        fabric: None,
        mem_budget: crate::budget::resolve(flags.mem_budget.or(file.mem_budget))?,
    };
    let fabric = flags.fabric.or(file.fabric);
    // Under mpi the ranks of this node are known once the job has started (mpi_cli.rs).
    r.threads = flags
        .threads
        .or(file.threads)
        .unwrap_or_else(|| default_threads(r.ranks));
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// `--help` of `solve` and `compare` states the solver defaults `SolverConfig::default()`
    /// has: the help's `[default: X]` of every solver flag, against the one default set.
    #[test]
    fn help_shows_the_solver_defaults() {
        let d = SolverConfig::default();
        let want = [
            ("method", d.method.name().to_string()),
            ("k", d.k.to_string()),
            ("depth", d.depth.to_string()),
            ("basis", d.basis.name().to_string()),
            ("precond", d.precond.name().to_string()),
            ("precond-degree", d.precond_degree.to_string()),
            ("tol", format!("{:e}", d.tol)),
            ("atol", d.atol.to_string()),
            ("max-iter", d.max_iter.to_string()),
            ("auto-replace", d.auto_replace.to_string()),
            ("exchange", d.exchange.name().to_string()),
            ("allreduce", d.allreduce.name().to_string()),
        ];
        let mut cli = crate::args::Cli::command();
        for sub in ["solve", "compare"] {
            let cmd = cli.find_subcommand_mut(sub).expect("subcommand");
            for (flag, value) in &want {
                if sub == "compare" && *flag == "method" {
                    continue; // compare takes its methods from --methods
                }
                let arg = cmd
                    .get_arguments()
                    .find(|a| a.get_long() == Some(flag))
                    .unwrap_or_else(|| panic!("{sub} has no --{flag}"));
                let help = arg
                    .get_long_help()
                    .or(arg.get_help())
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                let shown = help
                    .split("[default: ")
                    .nth(1)
                    .and_then(|t| t.split([']', ',']).next())
                    .unwrap_or_else(|| panic!("{sub} --{flag}: no default in {help:?}"));
                assert_eq!(shown, value, "{sub} --{flag}: help says {shown}");
            }
        }
    }

    /// `--rhs` and `--x0` state the defaults `resolve` picks (issue 47: the default
    /// right-hand side was not in `--help`), and `-` is standard input.
    #[test]
    fn help_shows_the_problem_defaults_and_stdin() {
        use crate::args::{Rhs, X0};
        let s = resolve(SolveSettings::default(), SolveSettings::default(), None).unwrap();
        let mut cli = crate::args::Cli::command();
        let cmd = cli.find_subcommand_mut("solve").expect("solve");
        let help = |flag: &str| {
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(flag));
            arg.and_then(|a| a.get_long_help().or(a.get_help()))
                .map(|h| h.to_string())
                .unwrap_or_default()
        };
        assert_eq!(s.rhs, Rhs::UnitSolution);
        assert!(
            help("rhs").contains("[default: unit_solution]"),
            "{}",
            help("rhs")
        );
        assert_eq!(s.x0, X0::Zero);
        assert!(help("x0").contains("[default: zero]"), "{}", help("x0"));
        let stdin = std::path::PathBuf::from("/dev/stdin");
        assert_eq!("-".parse::<Rhs>(), Ok(Rhs::File(stdin.clone())));
        assert_eq!("-".parse::<X0>(), Ok(X0::File(stdin)));
        assert_eq!(
            "./-".parse::<X0>(),
            Ok(X0::File(std::path::PathBuf::from("./-")))
        );
    }
}
