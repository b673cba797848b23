//! The command line (clap). Flags follow the project's CLI contract; settings that a
//! `--config` TOML file may also give are `Option`s here, so flags override the file and
//! defaults apply last (see `settings.rs`).

use std::path::PathBuf;
use std::str::FromStr;

use castack_collectives::bench_case::OpCase;
use castack_collectives::{AllreduceAlgo, UnknownAlgorithm};
use castack_krylov::{Basis, Method, PartitionKind, Precond, SpmvMode, K_MAX};
use castack_plan::probe::ProbeStrategy;
/// Reorderings applied before partitioning (castack-sparse's registry).
pub(crate) use castack_sparse::reorder::Reorder;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

/// Communication-avoiding CG solvers on threads, MPI or a simulated interconnect.
#[derive(Debug, Parser)]
#[command(name = "krylov", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Solve A x = b for a symmetric positive definite Matrix Market matrix.
    Solve(Box<SolveArgs>),
    /// Generate a test matrix in Matrix Market format.
    Gen(GenArgs),
    /// Solve one problem with several methods; compare iterations, communication and time.
    Compare(Box<CompareArgs>),
    /// Predict the fastest method and k for a matrix, rank counts and a fabric.
    Plan(Box<PlanArgs>),
    /// Micro-benchmarks of the communication layer.
    Bench(BenchArgs),
    /// Check every CUDA kernel against the CPU on a real GPU and measure SpMV bandwidth
    /// (JSON on stdout; needs the `cuda` feature, a driver and a GPU).
    GpuCheck(GpuCheckArgs),
    /// Measure this machine (cache sizes and bandwidths, flop rate, thread-to-thread
    /// latency) and write a fabric preset for `--backend sim` (stdout without -o).
    Calibrate(CalibrateArgs),
}

/// `krylov calibrate`.
#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Output preset (TOML); stdout without it. Written atomically.
    #[arg(short, long, value_name = "local.toml")]
    pub(crate) output: Option<PathBuf>,
    /// The preset's name.
    #[arg(long, default_value = "local")]
    pub(crate) name: String,
    /// A rough preset in about a second (working sets up to 4 MiB, memory at 16 MiB, short
    /// timed runs; under MPI messages up to 256 KiB): for a first look and for tests, not
    /// for predictions.
    #[arg(long)]
    pub(crate) quick: bool,
    /// `threads`: this process alone (the device model and thread-to-thread messages).
    /// `mpi`: one rank of `mpirun -np P` (P >= 2): every rank measures the device model at
    /// the same time, then the ranks measure the network between them (ping-pong curve,
    /// intra- and inter-node pairs, allreduce per call); rank 0 writes the preset.
    #[arg(long, value_enum, default_value = "threads")]
    pub(crate) backend: Backend,
}

/// `krylov gpu-check`.
#[derive(Debug, Args)]
pub(crate) struct GpuCheckArgs {
    /// Grid points per direction of the 3-D Poisson matrix (N^3 rows; the random irregular
    /// matrix has as many rows).
    #[arg(long, default_value_t = 128, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) n: usize,
    /// Timed repetitions of each SpMV and of the reference copy.
    #[arg(long, default_value_t = 50, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) reps: usize,
    /// Seed of the random vectors and the irregular matrix.
    #[arg(long, default_value_t = 42, allow_negative_numbers = true)]
    pub(crate) seed: u64,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = at_least::<0>)]
    pub(crate) ordinal: usize,
}

/// `krylov bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    pub(crate) kind: BenchKind,
}

/// What `krylov bench` measures.
#[derive(Debug, Subcommand)]
pub(crate) enum BenchKind {
    /// Latency and bandwidth of every collective algorithm (OSU-style rows).
    Collectives(Box<BenchCollectivesArgs>),
    /// Point-to-point half round trip between two ranks (OSU-style rows).
    Pingpong(Box<BenchPingpongArgs>),
    /// Neighbour exchange, naive vs segmented over several devices (one row per size).
    Neighbor(Box<BenchNeighborArgs>),
}

/// Endpoint memory kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum Memory {
    /// Host memory.
    Host,
    /// GPU memory (a modeled endpoint on the sim backend).
    Device,
}

/// `krylov bench collectives`.
#[derive(Debug, Args)]
pub(crate) struct BenchCollectivesArgs {
    /// The operation.
    #[arg(long, value_parser = operation())]
    pub(crate) op: OpCase,
    /// Algorithm name, `all`, or `native` (the MPI library's own collective; --backend mpi).
    #[arg(long, default_value = "all")]
    pub(crate) algo: String,
    /// Rank counts [default: 2; mpi: the job's size, which --ranks may only repeat].
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) ranks: Option<Vec<usize>>,
    /// Backend.
    #[arg(long, value_enum, default_value = "threads")]
    pub(crate) backend: Backend,
    /// Fabric preset or TOML path (sim backend).
    #[arg(long)]
    pub(crate) fabric: Option<String>,
    /// Endpoint memory.
    #[arg(long, value_enum, default_value = "host")]
    pub(crate) memory: Memory,
    /// Rank-to-node mapping on the sim backend: identity (rank r on node r) or bit_reversal
    /// (rank r on node bit-reverse(r): recursive doubling's large late steps on neighbouring
    /// nodes). Applies to --backend sim only (with --price-only too); any other value than
    /// identity is an error on threads and mpi, where ranks are not placed on modeled nodes.
    #[arg(long, default_value = "identity")]
    pub(crate) mapping: String,
    /// Sizes in bytes per rank buffer: a list `8,64,1K` or a range `MIN..MAX` of powers of two.
    #[arg(long, default_value = "8..4M", allow_negative_numbers = true)]
    pub(crate) sizes: String,
    /// Timed iterations per size [default: 100; sim: 1, it is deterministic].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) iters: Option<usize>,
    /// Untimed warm-up iterations per size [default: 10; sim: 0].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<0>)]
    pub(crate) warmup: Option<usize>,
    /// Root of rooted operations.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = at_least::<0>)]
    pub(crate) root: usize,
    /// Check every result on every rank against a sequential reference (exit 1 on a mismatch).
    #[arg(long)]
    pub(crate) verify: bool,
    /// Price the schedule without data or threads (sim backend).
    #[arg(long)]
    pub(crate) price_only: bool,
    /// One JSON object per row on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// CSV rows on stdout.
    #[arg(long)]
    pub(crate) csv: bool,
    /// Write a log-log latency plot.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) budget: crate::budget::MemBudgetArg,
}

/// A clap parser for a whole number of at least `MIN`. With `allow_negative_numbers` on
/// the flag, `-1` reaches it (instead of clap's advice to write `-- -1`, which does not
/// work) and gets a message saying what the flag accepts. Real-valued flags take
/// `allow_hyphen_values` instead: clap's lexer does not see `-1e-3` as a number.
pub(crate) fn at_least<const MIN: usize>(s: &str) -> Result<usize, String> {
    let min = i128::try_from(MIN).unwrap_or(i128::MAX);
    match s.trim().parse::<i128>() {
        Ok(v) if v >= min => {
            usize::try_from(v).map_err(|_| format!("must be at most {}", usize::MAX))
        }
        Ok(v) => Err(format!("must be at least {MIN} (got {v})")),
        Err(_) => Err(format!("must be a whole number, at least {MIN}")),
    }
}

/// A clap parser for a registry enum: lists the registry's names in `--help` and in errors.
fn registry<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: FromStr<Err = UnknownAlgorithm> + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names).try_map(|s| s.parse::<T>())
}

/// The clap parser of `bench collectives --op`: the operations of [`OpCase::ALL`], each
/// listed with its description in `--help`; an unknown name's error lists the valid ones.
pub(crate) fn operation() -> impl TypedValueParser<Value = OpCase> {
    let values = OpCase::ALL
        .iter()
        .map(|op| PossibleValue::new(op.name()).help(op.description()));
    PossibleValuesParser::new(values).try_map(|s| s.parse::<OpCase>())
}

fn names<T: Copy + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
) -> &'static [&'static str] {
    // Leaked once per flag at start-up: registries are small and the process is short-lived.
    Box::leak(
        all.iter()
            .map(|&t| name(t))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

/// Execution backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[value(rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub(crate) enum Backend {
    /// Ranks as OS threads of this process.
    Threads,
    /// MPI processes (rsmpi; feature `mpi`): the ranks read the matrix file together, each
    /// keeping only its rows.
    Mpi,
    /// Threads with a simulated interconnect's clock.
    Sim,
}

impl Backend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Threads => "threads",
            Backend::Mpi => "mpi",
            Backend::Sim => "sim",
        }
    }
}

/// Compute devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[value(rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub(crate) enum Device {
    /// CPU kernels (rayon).
    Cpu,
    /// CUDA kernels (cudarc; feature `cuda`); with `--backend sim`, the CPU kernels priced
    /// by the fabric's GPU model (no feature, no GPU needed).
    Cuda,
}

impl Device {
    /// snake_case name, as the report prints it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// The right-hand side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rhs {
    /// b = A * ones: the exact solution is all ones.
    UnitSolution,
    /// b = ones.
    Ones,
    /// Seeded uniform values in [-1, 1).
    Random(u64),
    /// A Matrix Market vector file.
    File(PathBuf),
}

/// An input file's path: `-` is standard input (`/dev/stdin`), anything else the path as
/// given (`./-` for a file named `-`).
pub(crate) fn input_path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(if s == "-" { "/dev/stdin" } else { s }))
}

impl FromStr for Rhs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "unit_solution" => Rhs::UnitSolution,
            "ones" => Rhs::Ones,
            "random" => Rhs::Random(1),
            _ => match s.strip_prefix("random:") {
                Some(seed) => Rhs::Random(
                    seed.parse()
                        .map_err(|_| format!("seed '{seed}' is not a non-negative integer"))?,
                ),
                None if s.is_empty() => return Err("empty value".into()),
                None => Rhs::File(input_path(s)?),
            },
        })
    }
}

impl<'de> Deserialize<'de> for Rhs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The initial guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum X0 {
    /// x0 = 0.
    Zero,
    /// A Matrix Market vector file.
    File(PathBuf),
}

impl FromStr for X0 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "zero" => Ok(X0::Zero),
            "" => Err("empty value".into()),
            _ => Ok(X0::File(input_path(s)?)),
        }
    }
}

impl<'de> Deserialize<'de> for X0 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Settings of `krylov solve` that a `--config` file may also give.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) struct SolveSettings {
    /// Right-hand side: unit_solution (b = A*ones: the exact solution is all ones, which
    /// the report's error_vs_ones measures against), ones, random[:SEED], or a .mtx vector
    /// (- reads standard input) [default: unit_solution].
    #[arg(long, value_name = "unit_solution|ones|random[:SEED]|FILE.mtx")]
    pub(crate) rhs: Option<Rhs>,
    /// Initial guess: zero or a .mtx vector (- reads standard input) [default: zero].
    #[arg(long, value_name = "zero|FILE.mtx")]
    pub(crate) x0: Option<X0>,
    /// Solver method [default: cg].
    #[arg(long, value_parser = registry::<Method>(names(Method::ALL, Method::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) method: Option<Method>,
    /// Block size / s of s-step methods, within 1..=K_MAX [default: 4].
    #[arg(long, help = k_help(), allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) k: Option<usize>,
    /// Basis of s-step methods [default: chebyshev].
    #[arg(long, value_parser = registry::<Basis>(names(Basis::ALL, Basis::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) basis: Option<Basis>,
    /// Pipeline depth of plcg, within 1..=8: reductions in flight, each hidden behind the
    /// next L SpMVs [default: 1].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>, value_name = "L")]
    pub(crate) depth: Option<usize>,
    /// Use the matrix powers kernel (s-step methods).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, value_name = "BOOL")]
    #[serde(default)]
    pub(crate) mpk: Option<bool>,
    /// Preconditioner [default: jacobi]. jacobi scales the system symmetrically; bjacobi_ic0
    /// (block Jacobi, one IC(0) block per rank, host devices only) and chebyshev (a
    /// polynomial of degree --precond-degree: that many SpMVs per application, no
    /// reduction, every device) are applied to the scaled system in every iteration.
    #[arg(long, value_parser = registry::<Precond>(names(Precond::ALL, Precond::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) precond: Option<Precond>,
    /// Degree of --precond chebyshev, within 1..=64 [default: 3].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>, value_name = "D")]
    pub(crate) precond_degree: Option<usize>,
    /// Symmetric reordering before partitioning [default: none]. Under --backend mpi, rcm
    /// needs the global graph: every rank then reads the whole matrix file.
    #[arg(long, value_parser = registry::<Reorder>(names(Reorder::ALL, Reorder::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) reorder: Option<Reorder>,
    /// Relative tolerance on the true residual of the original system, a finite number >= 0
    /// [default: 1e-8].
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) tol: Option<f64>,
    /// Absolute tolerance on the true residual, a finite number >= 0 [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) atol: Option<f64>,
    /// Maximum CG-equivalent iterations (0: report the initial guess) [default: 100000].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<0>)]
    pub(crate) max_iter: Option<usize>,
    /// Replace the recurrence residual by the true residual every N CG-equivalent
    /// iterations (counted in `residual_replacements`) [default: only after a missed
    /// convergence check].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) replace_every: Option<usize>,
    /// Replace the residual automatically where its estimated gap to the true residual
    /// grows past sqrt(eps) ||r|| (pipecg, as PETSc's pipecgrr; other methods ignore it);
    /// `--auto-replace=false` turns it off [default: true].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, value_name = "BOOL")]
    #[serde(default)]
    pub(crate) auto_replace: Option<bool>,
    /// Number of ranks [default: 1; threads and sim: at most 4096 thread ranks per process].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) ranks: Option<usize>,
    /// Worker threads of EACH rank's local kernels, each rank with its own pool [default:
    /// max(1, cores / ranks on this node)].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) threads: Option<usize>,
    /// Strategy of the SpMV halo and matrix-powers exchanges (`segmented`: the gcd
    /// segmentation over 4 devices per node) [default: naive].
    #[arg(long, value_parser = registry::<castack_neighbor::Strategy>(names(castack_neighbor::Strategy::ALL, castack_neighbor::Strategy::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) exchange: Option<castack_neighbor::Strategy>,
    /// Row partition [default: rows].
    #[arg(long, value_parser = registry::<PartitionKind>(names(PartitionKind::ALL, PartitionKind::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) partition: Option<PartitionKind>,
    /// Backend [default: threads].
    #[arg(long, value_enum)]
    pub(crate) backend: Option<Backend>,
    /// Fabric preset name or TOML path (sim backend) [default: peach2].
    #[arg(long)]
    pub(crate) fabric: Option<String>,
    /// Compute device [default: cpu].
    #[arg(long, value_enum)]
    pub(crate) device: Option<Device>,
    /// SpMV input exchange [default: halo].
    #[arg(long, value_parser = registry::<SpmvMode>(names(SpmvMode::ALL, SpmvMode::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) spmv: Option<SpmvMode>,
    /// Allreduce algorithm [default: recursive_doubling, bit-identical on all ranks].
    #[arg(long, value_parser = registry::<AllreduceAlgo>(names(AllreduceAlgo::ALL, AllreduceAlgo::name)))]
    #[serde(default, deserialize_with = "de_from_str")]
    pub(crate) allreduce: Option<AllreduceAlgo>,
    /// Record the residual history in the report.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, value_name = "BOOL")]
    #[serde(default)]
    pub(crate) history: Option<bool>,
    /// Print the relative recurrence residual ||r||/||b|| of the ORIGINAL system on stderr
    /// after every iteration (each outer step of cbcg, cbcgr, cacg; numbered in
    /// CG-equivalent iterations) and the true one at the end, from rank 0, as PETSc's
    /// -ksp_monitor (replaces the progress bar shown on a terminal).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, value_name = "BOOL")]
    #[serde(default)]
    pub(crate) monitor: Option<bool>,
    /// Estimate lambda_min, lambda_max and the condition number of the operator iterated
    /// on (S A S with Jacobi, A with --precond none) from the CG coefficients (Ritz values,
    /// as PETSc's -ksp_compute_eigenvalues); report field `eigs`. Methods cg, ccg, pipecg,
    /// prcg, pipeprcg, groppcg, plcg, cacg (cbcg, cbcgr: exit 2).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, value_name = "BOOL")]
    #[serde(default)]
    pub(crate) eigs: Option<bool>,
    /// Exit with code 1 when the solve does not converge.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true, value_name = "BOOL")]
    #[serde(default)]
    pub(crate) strict: Option<bool>,
    /// The memory budget (see `crate::budget`; a config file may give it as a string).
    #[arg(long, value_name = "SIZE", help = crate::budget::help())]
    #[serde(default)]
    pub(crate) mem_budget: Option<crate::budget::Size>,
}

impl SolveSettings {
    /// Whether these settings give the solver setting `key` (a field of
    /// `castack_krylov::SolverConfig`, the name [`castack_krylov::InvalidSetting`] carries).
    pub(crate) fn gives(&self, key: &str) -> bool {
        match key {
            "method" => self.method.is_some(),
            "k" => self.k.is_some(),
            "depth" => self.depth.is_some(),
            "basis" => self.basis.is_some(),
            "precond" => self.precond.is_some(),
            "precond_degree" => self.precond_degree.is_some(),
            "tol" => self.tol.is_some(),
            "atol" => self.atol.is_some(),
            "max_iter" => self.max_iter.is_some(),
            "allreduce" => self.allreduce.is_some(),
            "history" => self.history.is_some(),
            "eigs" => self.eigs.is_some(),
            "mpk" => self.mpk.is_some(),
            "auto_replace" => self.auto_replace.is_some(),
            "exchange" => self.exchange.is_some(),
            "replace_every" => self.replace_every.is_some(),
            _ => false,
        }
    }
}

/// `--k`'s help of solve and compare, with the solver's limit ([`K_MAX`]).
fn k_help() -> String {
    format!("Block size / s of s-step methods, within 1..={K_MAX} [default: 4]")
}

/// `krylov plan --k`'s help, with the solver's limit ([`K_MAX`]).
fn plan_k_help() -> String {
    format!(
        "Block sizes / s of the s-step methods: MIN..MAX (every integer) or K, within 1..={K_MAX}"
    )
}

fn de_from_str<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

/// `krylov solve`.
#[derive(Debug, Args)]
pub(crate) struct SolveArgs {
    /// Matrix Market file (.mtx or .mtx.gz), symmetric positive definite; - reads standard
    /// input (uncompressed).
    #[arg(value_parser = input_path)]
    pub(crate) matrix: PathBuf,
    #[command(flatten)]
    pub(crate) settings: SolveSettings,
    /// Write the solution as a Matrix Market array.
    #[arg(long, value_name = "x.mtx")]
    pub(crate) output: Option<PathBuf>,
    /// Write the JSON report to a file.
    #[arg(long, value_name = "report.json")]
    pub(crate) report: Option<PathBuf>,
    /// Print the JSON report (one object) on stdout and nothing else.
    #[arg(long)]
    pub(crate) json: bool,
    /// Read settings from a TOML file (flags override it; - reads standard input). Paths
    /// inside it are relative to the working directory, as on the command line.
    #[arg(long, value_name = "solve.toml", value_parser = input_path)]
    pub(crate) config: Option<PathBuf>,
}

/// `krylov compare`.
#[derive(Debug, Args)]
// The items are the methods: `--method` is refused (compare.rs), so not offered.
#[command(mut_arg("method", |a| a.hide(true)))]
pub(crate) struct CompareArgs {
    /// Matrix Market file (.mtx or .mtx.gz), symmetric positive definite; - reads standard
    /// input (uncompressed).
    #[arg(value_parser = input_path)]
    pub(crate) matrix: PathBuf,
    /// Comma-separated items NAME[:K][:BASIS][:mpk], e.g. cg,cacg:8:chebyshev (rows are
    /// labelled cg, cacg(k=8,chebyshev); --k, --basis and --mpk apply to the s-step items
    /// that do not set them)
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) methods: Vec<MethodItem>,
    #[command(flatten)]
    pub(crate) settings: SolveSettings,
    /// Read settings from a TOML file (flags override it; - reads standard input). Paths
    /// inside it are relative to the working directory, as on the command line.
    #[arg(long, value_name = "solve.toml", value_parser = input_path)]
    pub(crate) config: Option<PathBuf>,
    /// One JSON object per item on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write an SVG plot of relative residual vs CG-equivalent iteration.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
}

/// `krylov plan`.
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Matrix Market file (.mtx or .mtx.gz), symmetric positive definite; - reads standard
    /// input (uncompressed).
    #[arg(value_parser = input_path)]
    pub(crate) matrix: PathBuf,
    /// Rank counts to plan for, e.g. 16,128 (one rank per node of the fabric).
    #[arg(long, value_delimiter = ',', required = true, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) ranks: Vec<usize>,
    /// Fabric preset name or TOML path (its [compute.host] is the device model, or with
    /// --device cuda its [compute.gpu]). On a preset with several devices per node
    /// ([intra_node], e.g. dgx-h100) ranks sit one per device.
    #[arg(long, value_name = "NAME|PATH")]
    pub(crate) fabric: String,
    /// Device the ranks compute on: cpu prices the fabric's [compute.host]; cuda its GPU
    /// model ([compute.gpu]) with the host-device staging of every exchange and reduction,
    /// as `solve --backend sim --device cuda` charges it (no GPU needed).
    #[arg(long, value_enum, default_value = "cpu")]
    pub(crate) device: Device,
    /// Take the device model ([compute] section) from this preset or preset file instead
    /// (e.g. one `krylov calibrate -o FILE` wrote of this machine).
    #[arg(long, value_name = "NAME|PATH")]
    pub(crate) device_model: Option<String>,
    /// Comma-separated NAME[:BASIS] items [default: every method, chebyshev basis].
    #[arg(long, value_delimiter = ',')]
    pub(crate) methods: Option<Vec<PlanMethod>>,
    /// Block sizes / s of the s-step methods: MIN..MAX (every integer) or K, within 1..=K_MAX.
    #[arg(long, default_value = "2..8", value_name = "MIN..MAX", help = plan_k_help())]
    pub(crate) k: KRange,
    /// Relative tolerance on the true residual, within (0, 1).
    // A string default: clap would print 1e-12 as 0.000000000001.
    #[arg(long, default_value = "1e-12", allow_hyphen_values = true)]
    pub(crate) tol: f64,
    /// Preconditioner of the instrumented runs: the scalings none and jacobi (the cost
    /// model does not price the loop preconditioners bjacobi_ic0 and chebyshev yet).
    #[arg(long, default_value = "jacobi", value_parser = registry::<Precond>(names(Precond::SCALINGS, Precond::name)))]
    pub(crate) precond: Precond,
    /// Leave out the matrix powers variants of the s-step methods.
    #[arg(long)]
    pub(crate) no_mpk: bool,
    /// Thread ranks of the instrumented runs that measure iteration counts (1 to 64: they
    /// run on this machine's cores).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) probe_ranks: usize,
    /// Cap on CG-equivalent iterations per instrumented run (capped runs are extrapolated;
    /// at least 1).
    #[arg(long, default_value_t = 20_000, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) probe_max_iter: usize,
    /// Work limit of each pricing run, in flow rate updates of the fabric model (about
    /// 2 M a second; the default is at most about 4 s): a communication whose pricing
    /// passes it is not priced, and its candidates are reported "not priced" (deep ghost
    /// zones at thousands of ranks on fabrics whose DMA queues start a message at every
    /// end). Raise it to price them, at the cost of time. Pricing takes no shortcut: every
    /// message of every rank is priced by the full fluid model.
    #[arg(long, default_value_t = castack_plan::DEFAULT_PRICE_LIMIT as usize, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) price_limit: usize,
    /// How the instrumented runs find iterations: `tracked` runs cg to the tolerance and
    /// every other candidate a short window compared with it; `full` runs each to the
    /// tolerance.
    #[arg(long, default_value = "tracked", value_parser = registry::<ProbeStrategy>(names(ProbeStrategy::ALL, ProbeStrategy::name)))]
    pub(crate) probe: ProbeStrategy,
    /// Folder keeping instrumented runs across plans [default: $XDG_CACHE_HOME/castack/probes,
    /// else $HOME/.cache/castack/probes].
    #[arg(long, value_name = "DIR", conflicts_with = "no_probe_cache")]
    pub(crate) probe_cache: Option<PathBuf>,
    /// Neither read nor keep instrumented runs across plans.
    #[arg(long)]
    pub(crate) no_probe_cache: bool,
    /// One JSON object per (ranks, candidate) on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write an SVG plot of predicted time vs P (log-log), one line per candidate.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) budget: crate::budget::MemBudgetArg,
}

/// `krylov gen`.
#[derive(Debug, Args)]
pub(crate) struct GenArgs {
    #[command(subcommand)]
    pub(crate) kind: GenKind,
}

/// Generated matrices.
#[derive(Debug, Subcommand)]
pub(crate) enum GenKind {
    /// 7-point Laplacian on an N^3 grid, Dirichlet boundary (optionally heterogeneous).
    Poisson3d {
        /// Grid points per direction.
        #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
        n: usize,
        /// Random two-valued conductivity with harmonic face averages.
        #[arg(long)]
        heterogeneous: bool,
        /// Conductivity of the high cells (probability 0.3), positive and finite.
        #[arg(
            long,
            requires = "heterogeneous",
            default_value_t = 1e3,
            allow_hyphen_values = true
        )]
        contrast: f64,
        /// Seed of the conductivity field.
        #[arg(
            long,
            requires = "heterogeneous",
            default_value_t = 1,
            allow_negative_numbers = true
        )]
        seed: u64,
        /// Output file (stdout without it).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        budget: crate::budget::MemBudgetArg,
    },
    /// 5-point Laplacian on an N^2 grid, Dirichlet boundary.
    Poisson2d {
        /// Grid points per direction.
        #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
        n: usize,
        /// Output file (stdout without it).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        budget: crate::budget::MemBudgetArg,
    },
}

/// Transfer mechanisms of `--mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum MechanismArg {
    /// PIO where it is faster, else DMA.
    Auto,
    /// CPU programmed I/O (host memory).
    Pio,
    /// DMA engines.
    Dma,
}

/// Message modes of `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum PingMode {
    /// One-sided puts into pre-registered buffers with a completion flag (sim; on threads
    /// and mpi, which have no one-sided path, a ping-pong of buffered sends with receives
    /// posted up front, timed as rank 0's half round trip).
    Put,
    /// Send/receive: the receiver first notifies its buffer address to the sender (sim; on
    /// threads and mpi, isend/irecv pairs, each one-way latency timed from a barrier).
    TwoSided,
}

/// `krylov bench pingpong`.
#[derive(Debug, Args)]
pub(crate) struct BenchPingpongArgs {
    /// Backend (mpi: run under `mpirun -np 2`).
    #[arg(long, value_enum, default_value = "threads")]
    pub(crate) backend: Backend,
    /// Fabric preset or TOML path (sim backend) [default: peach2].
    #[arg(long)]
    pub(crate) fabric: Option<String>,
    /// Endpoint memory (device: a modeled GPU endpoint, sim only).
    #[arg(long, value_enum, default_value = "host")]
    pub(crate) memory: Memory,
    /// Transfer mechanism (sim).
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) mechanism: MechanismArg,
    /// One-sided puts, or two-sided messages with the receive-address notification (sim; on
    /// threads both are mailbox copies; on mpi both are MPI_Isend + MPI_Mprobe/MPI_Mrecv,
    /// put timing round trips, two_sided one-way latencies from a barrier).
    #[arg(long, value_enum, default_value = "put")]
    pub(crate) mode: PingMode,
    /// Hops between the two nodes (sim only; threads and mpi have no modeled placement)
    /// [default: the nearest pair]. On a fabric of several devices per node (dgx-h100) the
    /// nearest pair is two devices of one node; with --hops, devices of two nodes where
    /// some are that far apart.
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) hops: Option<usize>,
    /// Sizes in bytes: a list `8,64,1K` or a range `MIN..MAX` of powers of two.
    #[arg(long, default_value = "8..4M", allow_negative_numbers = true)]
    pub(crate) sizes: String,
    /// Timed round trips per size [default: 1000; sim: 1, it is deterministic].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) iters: Option<usize>,
    /// Untimed warm-up round trips per size [default: 100; sim: 0].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<0>)]
    pub(crate) warmup: Option<usize>,
    /// One JSON object per row on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// CSV rows on stdout.
    #[arg(long)]
    pub(crate) csv: bool,
    #[command(flatten)]
    pub(crate) budget: crate::budget::MemBudgetArg,
}

/// `--strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum StrategyArg {
    /// Post all sends, wait all receives.
    Naive,
    /// The gcd segmentation over `--devices` devices.
    Segmented,
    /// Both, one row each.
    Both,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum ModeArg {
    /// Send/receive pairs (sim: a receive-address notification before every step).
    TwoSided,
    /// One-sided puts with per-device completion (modeled on sim; threads and mpi have no
    /// remote-memory access: the same buffered sends as two_sided, completed per step by
    /// arrival).
    Put,
}

/// `krylov bench neighbor`.
#[derive(Debug, Args)]
pub(crate) struct BenchNeighborArgs {
    /// Neighbours per rank (N).
    #[arg(long, default_value_t = 6, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) neighbors: usize,
    /// Communication devices per node (C).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) devices: usize,
    /// Strategy.
    #[arg(long, value_enum, default_value = "both")]
    pub(crate) strategy: StrategyArg,
    /// Completion mode.
    #[arg(long, value_enum, default_value = "put")]
    pub(crate) mode: ModeArg,
    /// Backend (mpi: run under `mpirun -np P` with P the rank count of the layout: 3, 9, 27
    /// for N = 2, 4, 6, else N + 1).
    #[arg(long, value_enum, default_value = "threads")]
    pub(crate) backend: Backend,
    /// Fabric preset or TOML path (sim backend) [default: tofu-fx10].
    #[arg(long)]
    pub(crate) fabric: Option<String>,
    /// Bytes per neighbour (multiples of 8): a list `8,64,1K` or a range `MIN..MAX`.
    #[arg(long, default_value = "8..8M", allow_negative_numbers = true)]
    pub(crate) sizes: String,
    /// Timed exchanges per size [default: 20; sim: 1, it is deterministic].
    #[arg(long, allow_negative_numbers = true, value_parser = at_least::<1>)]
    pub(crate) iters: Option<usize>,
    /// One JSON object per row on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// CSV rows on stdout.
    #[arg(long)]
    pub(crate) csv: bool,
    /// Write a plot of effective GB/s against message size, one line per strategy.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) budget: crate::budget::MemBudgetArg,
}

/// The method an item of `--methods` names first (`compare`'s and `plan`'s).
fn method_name(name: Option<&str>) -> Result<Method, String> {
    name.unwrap_or_default()
        .parse()
        .map_err(|e: castack_collectives::UnknownAlgorithm| e.to_string())
}

/// One item of `--methods`: `NAME[:K][:BASIS][:mpk]`; plcg's `NAME[:L]` gives its depth.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MethodItem {
    pub(crate) label: String,
    pub(crate) method: Method,
    pub(crate) k: Option<usize>,
    pub(crate) depth: Option<usize>,
    pub(crate) basis: Option<Basis>,
    pub(crate) mpk: bool,
}

/// What an item's part `part` gives: "k", "basis" or "mpk".
fn item_part(part: &str) -> &'static str {
    if part.parse::<usize>().is_ok() {
        "k"
    } else if part == "mpk" {
        "mpk"
    } else {
        "basis"
    }
}

impl std::str::FromStr for MethodItem {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let method = method_name(parts.next())?;
        let mut item = MethodItem {
            label: s.to_string(),
            method,
            k: None,
            depth: None,
            basis: None,
            mpk: false,
        };
        for part in parts {
            if method == Method::Plcg {
                // plcg's one part: its pipeline depth (checked with the solve's settings).
                let depth = part
                    .parse::<usize>()
                    .map_err(|_| format!("'{part}' in '{s}' is not a depth (plcg:L)"))?;
                if item.depth.replace(depth).is_some() {
                    return Err(format!("'{s}' gives its depth twice"));
                }
                continue;
            }
            let given = if let Ok(k) = part.parse::<usize>() {
                item.k.replace(k).is_some()
            } else if part == "mpk" {
                std::mem::replace(&mut item.mpk, true)
            } else if let Ok(b) = part.parse::<Basis>() {
                item.basis.replace(b).is_some()
            } else {
                return Err(format!(
                    "'{part}' in '{s}' is not a k, a basis ({}) or 'mpk'",
                    Basis::ALL
                        .iter()
                        .map(|b| b.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            if given {
                return Err(format!("'{s}' gives its {} twice", item_part(part)));
            }
            if !method.is_s_step() {
                return Err(format!(
                    "'{s}': {} is not an s-step method, so it takes no {} (the s-step methods: {})",
                    method.name(),
                    item_part(part),
                    Method::ALL
                        .iter()
                        .filter(|m| m.is_s_step())
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Ok(item)
    }
}

/// One item of `--methods`: `NAME[:BASIS]` (k comes from `--k`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PlanMethod {
    pub(crate) method: Method,
    pub(crate) basis: Basis,
}

impl std::str::FromStr for PlanMethod {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let method = method_name(parts.next())?;
        let basis = match parts.next() {
            None => Basis::default(),
            Some(b) => b
                .parse()
                .map_err(|e: castack_collectives::UnknownAlgorithm| e.to_string())?,
        };
        if parts.next().is_some() {
            return Err(format!("'{s}': expected NAME[:BASIS]"));
        }
        Ok(PlanMethod { method, basis })
    }
}

/// `--k MIN..MAX` (every integer k) or a single `K`, within `1..=K_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KRange {
    pub(crate) min: usize,
    pub(crate) max: usize,
}

impl std::str::FromStr for KRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{s}': expected MIN..MAX or K with integers"))
        };
        let (min, max) = match s.split_once("..") {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(s)?, num(s)?),
        };
        if min == 0 || max > K_MAX || min > max {
            return Err(format!(
                "k range '{s}' is outside the allowed range 1..={K_MAX} (or MIN > MAX)"
            ));
        }
        Ok(KRange { min, max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_parse_in_any_order() {
        let it: MethodItem = "cg".parse().unwrap();
        assert_eq!(
            (it.method, it.k, it.basis, it.mpk),
            (Method::Cg, None, None, false)
        );
        let it: MethodItem = "cacg:8:monomial:mpk".parse().unwrap();
        assert_eq!(it.k, Some(8));
        assert_eq!(it.basis, Some(Basis::Monomial));
        assert!(it.mpk);
        assert!("cg:eight"
            .parse::<MethodItem>()
            .unwrap_err()
            .contains("eight"));
        assert!("nope".parse::<MethodItem>().unwrap_err().contains("nope"));
    }

    /// A part given twice, or a k, basis or mpk for a method without a basis, is refused
    /// (compare used to run `cacg:8:mpk:mpk`, `cg:8` and `cg:newton` as if they meant
    /// something).
    #[test]
    fn items_refuse_repeated_parts_and_parts_a_method_has_no_use_for() {
        for (item, says) in [
            ("cacg:8:mpk:mpk", "gives its mpk twice"),
            ("cacg:4:8", "gives its k twice"),
            ("cbcg:newton:chebyshev", "gives its basis twice"),
            ("cg:8", "cg is not an s-step method, so it takes no k"),
            ("pipecg:newton", "takes no basis"),
            ("ccg:mpk", "takes no mpk"),
        ] {
            let e = item.parse::<MethodItem>().unwrap_err();
            assert!(e.contains(says), "{item}: {e}");
        }
        assert!("cbcgr:6:newton:mpk".parse::<MethodItem>().is_ok());
    }

    #[test]
    fn k_ranges_parse_and_reject_out_of_range() {
        assert_eq!("2..8".parse::<KRange>(), Ok(KRange { min: 2, max: 8 }));
        assert_eq!("4".parse::<KRange>(), Ok(KRange { min: 4, max: 4 }));
        for bad in ["0..4", "2..21", "8..2", "x", "2..", ""] {
            assert!(bad.parse::<KRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn method_items_take_an_optional_basis() {
        let m: PlanMethod = "cbcg:newton".parse().unwrap();
        assert_eq!((m.method, m.basis), (Method::Cbcg, Basis::Newton));
        let m: PlanMethod = "cg".parse().unwrap();
        assert_eq!(m.method, Method::Cg);
        assert!("nope".parse::<PlanMethod>().is_err());
        assert!("cbcg:newton:x".parse::<PlanMethod>().is_err());
    }
}
