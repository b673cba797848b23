//! `cargo xtask fuzz`: seeded mutations of Matrix Market files, TOML configs and flags run
//! against the release `krylov` binary (CI: the dev-profile binary, see [`Args::ci`]), each case classified against the CLI contract
//! (../shared/CLI.md: one clear error line, exit 2 bad input, 1 failed run, never a panic or
//! an abort) and every convergence claim checked against an independently recomputed
//! residual.
//!
//! Why in xtask: the contract is about the binary as users run it (a process, its exit
//! status, its stderr, its files), under the limits a machine imposes, so the cases run the
//! binary itself, each in a folder of its own under a 4 GiB address-space limit (an
//! allocation beyond it aborts), a 256 MiB file-size limit and a hang limit (60 s; the
//! process group is killed). A case is a pure function of `(seed, index)` (SplitMix64 in
//! `fuzz/rng.rs`), so a failing case is reproduced from its number, and its folder under
//! `target/fuzz/<class>/case-N/` holds `cmd.sh` (the command line and limits), the input
//! files, what was mutated, its stdout and stderr.
//!
//! Parts: `case.rs` builds a case from the corpus (seed matrices from `krylov gen`, small
//! shared matrices and hand-made edge cases; `configs/fabrics/*.toml`; solve TOML configs; the
//! flag values the binary's `-h` lists), `mutate.rs` mutates text, `child.rs` runs a case,
//! `verdict.rs` classifies it, `residual.rs` recomputes `||b - A x|| / ||b||`.

mod case;
mod child;
mod mutate;
mod residual;
mod rng;
mod verdict;

use crate::flags::Flags;
use crate::workspace::{self, cargo, Metadata};
use anyhow::{bail, Context, Result};
use case::{Corpus, Input, Values};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use verdict::{Class, Verdict, CLASSES};

pub(crate) const USAGE: &str = "\
usage: cargo xtask fuzz [--minutes N] [--seed S] [--jobs J] [--cases N] [--hang-s S]
                        [--keep K] [--binary PATH | --dev]

Builds `krylov` in release (or the dev profile: --dev), then runs generated cases against it until N minutes have passed
(or N cases ran): solve, compare, plan, gen and bench command lines with mutated Matrix
Market files (byte flips, deleted, duplicated, swapped and inserted lines, numbers replaced
by 0, -1, 1e308, 1e-320, nan, inf, 2^32, 2^63, size lines declaring huge dimensions, fields
swapped, truncation), mutated fabric and solve TOML files, right-hand sides scaled by 1e300
or 1e-300, special paths (a FIFO, a directory, /dev/null, /dev/full) and flag values from
the CLI contract with extremes mixed in (--ranks, --k, --tol, --max-iter, ...); and edge
cases: schedules of thousands of ranks priced under the memory limit, tolerances below
attainable accuracy, b, x0, diagonals and duplicates outside the double range, and --plot
with stdout closed (its reader gone before the run prints). Each case runs
in its own folder and process group under a 4 GiB address-space limit and a 256 MiB
file-size limit, and is classified:
  ok             exit 0, or exit 1/2 with one clean `error: ...` line on stderr
  panic          exit 101 or `panicked` on stderr
  abort          killed by a signal (SIGABRT: an allocation over the limit; SIGSEGV, ...)
  hang           no exit within the hang limit (the process group is killed)
  bad_exit       any other exit code
  unclean_error  exit 1/2 without one clean error line
  bad_output     exit 0 but --json is not the contract's JSON, gen wrote no readable matrix,
                 or a --plot was not written with stdout closed
  misdiagnosed   an error that blames the matrix (not SPD) for a value outside the double
                 range (a breakdown on inf or NaN)
  false_success  a solve (or compare row) claims convergence while the report's
                 relres_true, or ||b - A x|| / ||b|| recomputed here from the matrix, the
                 right-hand side and the --output solution, is above the tolerance
Failing cases are saved under target/fuzz/<class>/case-N/ (cmd.sh reruns it under the same
limits; inputs, stdout, stderr, what was mutated), at most K per distinct signature; a table
of classes and distinct failures is printed and written to target/fuzz/summary.txt. Exits 1
when any case failed. A case depends only on (seed, N): `--cases` and `--minutes` only decide
how many run.

  --minutes N    time for starting cases (default 2; fractions allowed); a case running at
                 the end finishes, so a run takes at most N minutes plus the hang limit
  --seed S       run seed (default 20251125)
  --jobs J       cases run at once (default 2)
  --cases N      stop after N cases (default: no limit)
  --hang-s S     the hang limit in seconds (default 60)
  --keep K       reproducers kept per distinct failure (default 3)
  --binary PATH  fuzz this krylov binary instead of building target/release/krylov
  --dev          fuzz target/debug/krylov as `cargo test --workspace --no-run` builds it (the
                 dev profile: optimised at level 2, overflow checks and debug assertions on;
                 free after the tests; what CI fuzzes)";

/// The default seed (also CI's).
const DEFAULT_SEED: u64 = 20_251_125;
/// Cases of CI's run: a fixed count, so CI fuzzes the same cases on any host that starts
/// them within the minute (CI's own ran 1500 in 62 s).
const CI_CASES: u64 = 1200;
/// `RLIMIT_AS` of a case.
const MEMORY_LIMIT: u64 = 4 << 30;
/// `RLIMIT_FSIZE` of a case.
const FILE_LIMIT: u64 = 256 << 20;

/// Flags of `cargo xtask fuzz`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Args {
    minutes: f64,
    seed: u64,
    jobs: usize,
    cases: Option<u64>,
    hang_s: f64,
    keep: usize,
    binary: Option<PathBuf>,
    /// Build and fuzz the dev-profile binary instead of the release one.
    dev: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            minutes: 2.0,
            seed: DEFAULT_SEED,
            jobs: 2,
            cases: None,
            hang_s: 60.0,
            keep: 3,
            binary: None,
            dev: false,
        }
    }
}

impl Args {
    /// CI's run: the default seed's first [`CI_CASES`] cases (the same cases on every
    /// host that starts them within a minute: about 50 s on CI's two cores), so with a
    /// case that hangs at the end the step stays within two minutes of fuzzing.
    ///
    /// It fuzzes the dev-profile binary, which the test step has already built (opt-level
    /// 2, see the workspace's `[profile.dev]`): no release build of its own (128 s of CI's
    /// 163 s fuzz step before; the step took 104 s with `cargo build -p castack-cli`, 67 s
    /// of it rebuilding for that package's feature set), and overflow checks and debug assertions on, as `cargo
    /// fuzz` builds by default, so an arithmetic overflow an input provokes is a panic
    /// here rather than a silent wrap. The 1200 cases took 41 s here against 34 s in
    /// release (one run each, 2 cores, load 0.4).
    pub(crate) fn ci() -> Args {
        Args {
            minutes: 1.0,
            cases: Some(CI_CASES),
            dev: true,
            ..Args::default()
        }
    }

    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let mut a = Args::default();
        if let Some(v) = flags.value("--minutes")? {
            a.minutes = v
                .parse()
                .with_context(|| format!("--minutes: not a number: `{v}`"))?;
            if !(a.minutes.is_finite() && a.minutes > 0.0) {
                bail!("--minutes must be a positive number, got `{v}`");
            }
        }
        if let Some(v) = flags.value("--seed")? {
            a.seed = v
                .parse()
                .with_context(|| format!("--seed: not a non-negative integer: `{v}`"))?;
        }
        if let Some(v) = flags.value("--jobs")? {
            a.jobs = v
                .parse()
                .with_context(|| format!("--jobs: not a count: `{v}`"))?;
            if a.jobs == 0 {
                bail!("--jobs must be at least 1");
            }
        }
        if let Some(v) = flags.value("--cases")? {
            let n: u64 = v
                .parse()
                .with_context(|| format!("--cases: not a count: `{v}`"))?;
            if n == 0 {
                bail!("--cases must be at least 1");
            }
            a.cases = Some(n);
        }
        if let Some(v) = flags.value("--hang-s")? {
            a.hang_s = v
                .parse()
                .with_context(|| format!("--hang-s: not a number: `{v}`"))?;
            if !(a.hang_s.is_finite() && a.hang_s > 0.0) {
                bail!("--hang-s must be a positive number, got `{v}`");
            }
        }
        if let Some(v) = flags.value("--keep")? {
            a.keep = v
                .parse()
                .with_context(|| format!("--keep: not a count: `{v}`"))?;
        }
        a.binary = flags.value("--binary")?.map(PathBuf::from);
        a.dev = flags.switch("--dev");
        flags.finish()?;
        if a.dev && a.binary.is_some() {
            bail!("--dev builds the binary it fuzzes: give --binary PATH or --dev, not both");
        }
        Ok(a)
    }
}

/// Hand-made seed matrices: the smallest system, an indefinite one, a singular one, a zero
/// on the diagonal, entries near the ends of f64, pattern and integer storage, a general file.
const HAND_MATRICES: &[(&str, &str)] = &[
    ("one", "%%MatrixMarket matrix coordinate real symmetric\n1 1 1\n1 1 4.0\n"),
    (
        "indefinite",
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 1\n2 1 2\n2 2 1\n",
    ),
    (
        "singular_neumann",
        "%%MatrixMarket matrix coordinate real symmetric\n4 4 7\n1 1 1\n2 1 -1\n2 2 2\n3 2 -1\n3 3 2\n4 3 -1\n4 4 1\n",
    ),
    (
        "zero_diagonal",
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n2 2 0\n3 3 1\n",
    ),
    (
        "extreme_scales",
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1e300\n2 2 1e-300\n3 3 1\n",
    ),
    (
        "pattern",
        "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n1 1\n2 2\n3 3\n",
    ),
    (
        "integer_general",
        "%%MatrixMarket matrix coordinate integer general\n3 3 7\n1 1 4\n1 2 -1\n2 1 -1\n2 2 4\n2 3 -1\n3 2 -1\n3 3 4\n",
    ),
];

/// Solve TOML configs (`krylov solve --config`).
const CONFIGS: &[(&str, &str)] = &[
    (
        "cacg",
        "method = \"cacg\"\nk = 8\nbasis = \"newton\"\ntol = 1e-10\nmax_iter = 2000\nranks = 3\n",
    ),
    (
        "pipecg_sim",
        "method = \"pipecg\"\nbackend = \"sim\"\nfabric = \"ib-qdr\"\nranks = 4\nprecond = \"none\"\n",
    ),
    (
        "cbcgr_mpk",
        "method = \"cbcgr\"\nk = 4\nmpk = true\nrhs = \"random:5\"\nreorder = \"rcm\"\npartition = \"nnz\"\nstrict = true\n",
    ),
    (
        "cg_replace",
        "method = \"cg\"\nreplace_every = 5\natol = 1e-12\nhistory = true\nspmv = \"allgather\"\nallreduce = \"ring\"\n",
    ),
];

/// Seeds `krylov gen` makes: (file, arguments).
const GENERATED: &[(&str, &[&str])] = &[
    ("poisson2d_4", &["gen", "poisson2d", "--n", "4"]),
    ("poisson2d_12", &["gen", "poisson2d", "--n", "12"]),
    ("poisson3d_3", &["gen", "poisson3d", "--n", "3"]),
    (
        "poisson3d_5_het",
        &[
            "gen",
            "poisson3d",
            "--n",
            "5",
            "--heterogeneous",
            "--contrast",
            "1e6",
            "--seed",
            "3",
        ],
    ),
];

/// Shared matrices at most this large (bytes) join the corpus.
const SHARED_MAX_BYTES: u64 = 48 << 10;

pub(crate) fn run(args: &Args) -> Result<()> {
    let metadata = Metadata::load()?;
    let binary = match &args.binary {
        // Cases run in folders of their own: the path must not be relative.
        Some(b) => std::fs::canonicalize(b).with_context(|| format!("--binary {}", b.display()))?,
        // The binary `cargo test --workspace` builds for the CLI's integration tests: with
        // the workspace's feature unification, so after the test step this is a no-op
        // (`cargo build -p castack-cli` unifies features over that package alone and
        // rebuilt five crates: 67 s of CI's fuzz step).
        None if args.dev => {
            workspace::run(&mut cargo(["test", "--workspace", "--no-run"]))?;
            metadata.target_directory.join("debug").join("krylov")
        }
        None => {
            workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
            metadata.target_directory.join("release").join("krylov")
        }
    };
    let out = metadata.target_directory.join("fuzz");
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    std::fs::create_dir_all(out.join("work"))?;
    let corpus = load_corpus(&binary, &out.join("seeds"))?;
    eprintln!(
        "fuzz: {} seed matrices, {} fabric files, {} configs; seed {}, {} job(s), {} min, hang limit {} s",
        corpus.matrices.len(),
        corpus.fabrics.len(),
        corpus.configs.len(),
        args.seed,
        args.jobs,
        args.minutes,
        args.hang_s
    );
    let limits = child::Limits {
        memory: MEMORY_LIMIT,
        file: FILE_LIMIT,
        hang: Duration::from_secs_f64(args.hang_s),
    };
    let fuzz = Fuzz {
        args,
        corpus: &corpus,
        binary: &binary,
        out: &out,
        limits,
        next: AtomicU64::new(0),
        tally: Mutex::new(Tally::default()),
    };
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.minutes * 60.0);
    let errors: Vec<anyhow::Error> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..args.jobs)
            .map(|_| s.spawn(|| fuzz.worker(deadline)))
            .collect();
        workers
            .into_iter()
            .filter_map(|w| match w.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(anyhow::anyhow!("a fuzz worker panicked")),
            })
            .collect()
    });
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(out.join("work"));
    let tally = fuzz.tally.into_inner().unwrap_or_else(|e| e.into_inner());
    let summary = tally.summary(args, start.elapsed().as_secs_f64(), &binary);
    println!("{summary}");
    std::fs::write(out.join("summary.txt"), &summary)?;
    let failed = tally.failures();
    if failed > 0 {
        bail!(
            "fuzz: {failed} failing case(s) in {} distinct failure(s); reproducers under {}",
            tally.distinct_failures(),
            out.display()
        );
    }
    Ok(())
}

/// Builds the corpus: the binary's flag values, generated, hand-made and shared matrices,
/// fabric files and configs.
fn load_corpus(binary: &Path, seeds: &Path) -> Result<Corpus> {
    std::fs::create_dir_all(seeds)?;
    let mut values = Values::default();
    for command in [
        "solve",
        "bench collectives",
        "bench pingpong",
        "bench neighbor",
    ] {
        let mut argv: Vec<&str> = command.split(' ').collect();
        argv.push("-h");
        let out = Command::new(binary)
            .args(&argv)
            .output()
            .with_context(|| format!("could not run {}", binary.display()))?;
        if !out.status.success() {
            bail!("`krylov {command} -h` failed ({})", out.status);
        }
        values.add_help(command, &String::from_utf8_lossy(&out.stdout));
    }
    for (command, flag) in case::NEEDED {
        if values
            .0
            .get(&format!("{command} {flag}"))
            .is_none_or(Vec::is_empty)
        {
            bail!("`krylov {command} -h` lists no possible values for {flag}");
        }
    }
    let mut matrices = Vec::new();
    for (name, argv) in GENERATED {
        let path = seeds.join(format!("{name}.mtx"));
        let status = Command::new(binary)
            .args(*argv)
            .arg("-o")
            .arg(&path)
            .status()
            .with_context(|| format!("could not run {}", binary.display()))?;
        if !status.success() {
            bail!("`krylov {}` failed ({status})", argv.join(" "));
        }
        matrices.push(matrix_input(name, std::fs::read(&path)?)?);
    }
    for (name, text) in HAND_MATRICES {
        matrices.push(matrix_input(name, text.as_bytes().to_vec())?);
    }
    let shared = workspace::root().join("../shared/matrices");
    for path in sorted_files(&shared, "mtx")? {
        if std::fs::metadata(&path)?.len() <= SHARED_MAX_BYTES {
            let name = path.file_stem().unwrap_or_default().to_string_lossy();
            matrices.push(matrix_input(&name, std::fs::read(&path)?)?);
        }
    }
    let mut fabrics = Vec::new();
    let mut presets = Vec::new();
    for path in sorted_files(&workspace::root().join("configs/fabrics"), "toml")? {
        let name = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        fabrics.push(Input {
            name: format!("{name}.toml"),
            bytes: std::fs::read(&path)?,
            rows: 0,
        });
        presets.push(name);
    }
    if presets.is_empty() {
        bail!("no fabric presets under configs/fabrics");
    }
    let configs = CONFIGS
        .iter()
        .map(|(name, text)| Input {
            name: format!("{name}.toml"),
            bytes: text.as_bytes().to_vec(),
            rows: 0,
        })
        .collect();
    Ok(Corpus {
        matrices,
        fabrics,
        presets,
        configs,
        values,
    })
}

fn matrix_input(name: &str, bytes: Vec<u8>) -> Result<Input> {
    let rows = residual::read_coo(&bytes)
        .with_context(|| format!("seed matrix {name} is not readable"))?
        .rows;
    Ok(Input {
        name: name.to_string(),
        bytes,
        rows,
    })
}

/// The files of `dir` ending in `.ext`, sorted; none when `dir` does not exist.
fn sorted_files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext) && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// One fuzz run's shared state.
struct Fuzz<'a> {
    args: &'a Args,
    corpus: &'a Corpus,
    binary: &'a Path,
    out: &'a Path,
    limits: child::Limits,
    next: AtomicU64,
    tally: Mutex<Tally>,
}

impl Fuzz<'_> {
    /// Takes case numbers until the deadline or the case cap.
    fn worker(&self, deadline: Instant) -> Result<()> {
        loop {
            if Instant::now() >= deadline {
                return Ok(());
            }
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if self.args.cases.is_some_and(|n| index >= n) {
                return Ok(());
            }
            self.run_case(index)?;
        }
    }

    fn run_case(&self, index: u64) -> Result<()> {
        let case = case::generate(self.corpus, self.args.seed, index);
        let name = format!("case-{index:06}");
        let dir = self.out.join("work").join(&name);
        std::fs::create_dir_all(&dir)?;
        for (file, bytes) in &case.files {
            std::fs::write(dir.join(file), bytes)?;
        }
        // The case's own character devices: outputs aimed at a device never touch the
        // machine's /dev (a writer that replaced its target would destroy it).
        child::make_devices(&dir);
        let mut feeds = Vec::new();
        for (file, bytes) in &case.fifos {
            child::make_fifo(&dir.join(file))?;
            feeds.push(child::Feed {
                path: dir.join(file),
                bytes: bytes.clone(),
            });
        }
        let run = child::run(
            self.binary,
            &case.args,
            &dir,
            self.limits,
            feeds,
            case.stdout_closed,
        )?;
        let v = verdict::classify(&case, &run, &dir, self.args.hang_s);
        let keep = {
            let mut tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
            tally.add(&case, &v, &name, run.seconds, self.args.keep)
        };
        if v.class != Class::Ok {
            eprintln!(
                "fuzz: case {index} {}: {} ({})",
                v.class.name(),
                v.detail,
                case.command
            );
        }
        if keep {
            let dest = self.out.join(v.class.name()).join(&name);
            std::fs::create_dir_all(dest.parent().unwrap_or(self.out))?;
            std::fs::rename(&dir, &dest)?;
            self.write_reproducer(&case, &v, &dest)?;
        } else {
            std::fs::remove_dir_all(&dir)?;
        }
        Ok(())
    }

    /// `cmd.sh` (reruns the case under the same limits), `verdict.txt`, `notes.txt` and the
    /// bytes of each FIFO as `NAME.fed`.
    fn write_reproducer(&self, case: &case::Case, v: &Verdict, dir: &Path) -> Result<()> {
        let mut sh = String::from("#!/bin/sh\n");
        sh.push_str(&format!(
            "# cargo xtask fuzz --seed {} case {}: {}: {}\ncd \"$(dirname \"$0\")\" || exit 1\n",
            self.args.seed,
            case.index,
            v.class.name(),
            v.detail.replace('\n', " ")
        ));
        sh.push_str(&format!(
            "ulimit -v {}\nulimit -f {}\n",
            MEMORY_LIMIT / 1024,
            FILE_LIMIT / 512
        ));
        for (file, bytes) in &case.fifos {
            std::fs::write(dir.join(format!("{file}.fed")), bytes)?;
            sh.push_str(&format!(
                "[ -p {f} ] || mkfifo {f}\ncat {f}.fed > {f} &\n",
                f = quote(file)
            ));
        }
        sh.push_str(&format!(
            "exec timeout -s KILL {} {}",
            self.args.hang_s,
            quote(&self.binary.display().to_string())
        ));
        for a in &case.args {
            sh.push(' ');
            sh.push_str(&quote(a));
        }
        if case.stdout_closed {
            // About the same: the reader goes at once (the case closed it before starting).
            sh = sh.replacen("exec timeout", "timeout", 1);
            sh.push_str(" | head -c 0");
        }
        sh.push('\n');
        let path = dir.join("cmd.sh");
        std::fs::write(&path, sh)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        std::fs::write(
            dir.join("verdict.txt"),
            format!(
                "{}\n{}\nsignature: {}\nresidual check: {:?}\n",
                v.class.name(),
                v.detail,
                v.signature,
                v.residual
            ),
        )?;
        std::fs::write(dir.join("notes.txt"), case.notes.join("\n") + "\n")?;
        Ok(())
    }
}

/// A shell word.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// One distinct outcome.
#[derive(Debug)]
struct Seen {
    class: Class,
    count: u64,
    /// Case folders kept (the lowest-numbered case first after sorting).
    kept: Vec<String>,
    first: u64,
    detail: String,
    command_line: String,
}

/// What the run saw.
#[derive(Debug, Default)]
struct Tally {
    by_class: BTreeMap<Class, u64>,
    by_command: BTreeMap<String, u64>,
    signatures: BTreeMap<String, Seen>,
    residual_checked: u64,
    residual_unchecked: u64,
    seconds: f64,
}

impl Tally {
    /// Records a verdict; returns whether the case's folder is kept as a reproducer.
    fn add(
        &mut self,
        case: &case::Case,
        v: &Verdict,
        name: &str,
        seconds: f64,
        keep: usize,
    ) -> bool {
        *self.by_class.entry(v.class).or_default() += 1;
        *self.by_command.entry(case.command.clone()).or_default() += 1;
        self.seconds += seconds;
        match v.residual {
            verdict::Residual::Checked => self.residual_checked += 1,
            verdict::Residual::Unchecked(_) => self.residual_unchecked += 1,
            verdict::Residual::NotApplicable => {}
        }
        if v.class == Class::Ok {
            return false;
        }
        let seen = self
            .signatures
            .entry(v.signature.clone())
            .or_insert_with(|| Seen {
                class: v.class,
                count: 0,
                kept: Vec::new(),
                first: case.index,
                detail: v.detail.clone(),
                command_line: String::new(),
            });
        seen.count += 1;
        if case.index <= seen.first {
            seen.first = case.index;
            seen.detail = v.detail.clone();
            seen.command_line = std::iter::once("krylov".to_string())
                .chain(case.args.iter().map(|a| quote(a)))
                .collect::<Vec<_>>()
                .join(" ");
        }
        if seen.kept.len() < keep {
            seen.kept.push(name.to_string());
            true
        } else {
            false
        }
    }

    fn failures(&self) -> u64 {
        self.by_class
            .iter()
            .filter(|(c, _)| **c != Class::Ok)
            .map(|(_, n)| n)
            .sum()
    }

    fn distinct_failures(&self) -> usize {
        self.signatures.len()
    }

    fn summary(&self, args: &Args, wall: f64, binary: &Path) -> String {
        let total: u64 = self.by_class.values().sum();
        let mut s = format!(
            "fuzz summary: {total} cases in {wall:.0} s (seed {}, {} job(s), binary {}); mean case {:.2} s\n",
            args.seed,
            args.jobs,
            binary.display(),
            self.seconds / total.max(1) as f64
        );
        let commands: Vec<String> = self
            .by_command
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        s.push_str(&format!("cases per command: {}\n", commands.join(", ")));
        s.push_str(&format!(
            "convergence claims recomputed independently: {} (unchecked: {})\n\n",
            self.residual_checked, self.residual_unchecked
        ));
        s.push_str(&format!(
            "{:<15} {:>7} {:>9}\n",
            "class", "cases", "distinct"
        ));
        for class in CLASSES {
            let n = self.by_class.get(&class).copied().unwrap_or(0);
            let distinct = self
                .signatures
                .values()
                .filter(|v| v.class == class)
                .count();
            let distinct = if class == Class::Ok {
                "-".to_string()
            } else {
                distinct.to_string()
            };
            s.push_str(&format!("{:<15} {n:>7} {distinct:>9}\n", class.name()));
        }
        let mut seen: Vec<(&String, &Seen)> = self.signatures.iter().collect();
        seen.sort_by_key(|(sig, v)| (v.class, std::cmp::Reverse(v.count), sig.to_string()));
        if !seen.is_empty() {
            s.push_str("\ndistinct failures (count, first case, detail, command):\n");
        }
        for (sig, v) in seen {
            let mut kept = v.kept.clone();
            kept.sort();
            s.push_str(&format!(
                "\n[{}] x{} {sig}\n  first: case {} ({})\n  {}\n  {}\n",
                v.class.name(),
                v.count,
                v.first,
                kept.iter()
                    .map(|k| format!("target/fuzz/{}/{k}", v.class.name()))
                    .collect::<Vec<_>>()
                    .join(", "),
                v.detail,
                v.command_line
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_flags() {
        assert_eq!(Args::parse(&[]).unwrap(), Args::default());
        let a = Args::parse(&strings(&[
            "--minutes",
            "0.5",
            "--seed",
            "9",
            "--jobs",
            "3",
            "--cases",
            "10",
            "--hang-s",
            "5",
            "--keep",
            "1",
            "--binary",
            "/k",
        ]))
        .unwrap();
        assert_eq!(a.minutes, 0.5);
        assert_eq!((a.seed, a.jobs, a.cases, a.keep), (9, 3, Some(10), 1));
        assert_eq!(a.hang_s, 5.0);
        assert_eq!(a.binary.as_deref(), Some(Path::new("/k")));
        for bad in [
            &["--minutes", "0"][..],
            &["--minutes", "nan"],
            &["--jobs", "0"],
            &["--cases", "0"],
            &["--seed", "-1"],
            &["--hang-s", "-3"],
            &["--fast"],
            &["--dev", "--binary", "/k"],
        ] {
            assert!(Args::parse(&strings(bad)).is_err(), "{bad:?}");
        }
        assert!(Args::parse(&strings(&["--dev"])).unwrap().dev);
        assert!(!Args::default().dev);
        assert_eq!(Args::ci().seed, DEFAULT_SEED);
        assert!(Args::ci().dev && Args::ci().binary.is_none());
        assert!(Args::ci().minutes + Args::ci().hang_s / 60.0 <= 2.0);
    }

    #[test]
    fn hand_matrices_and_configs_are_well_formed() {
        for (name, text) in HAND_MATRICES {
            assert!(
                matrix_input(name, text.as_bytes().to_vec()).is_ok(),
                "{name}"
            );
        }
        for (name, text) in CONFIGS {
            assert!(text.ends_with('\n') && text.contains("method"), "{name}");
        }
    }

    #[test]
    fn quoting_round_trips_through_sh() {
        let words = ["plain", "with space", "it's", "", "$HOME", "a\"b"];
        let line = words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ");
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("for w in {line}; do printf '[%s]' \"$w\"; done"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "[plain][with space][it's][][$HOME][a\"b]"
        );
    }

    #[test]
    fn tally_keeps_k_per_signature_and_counts_failures() {
        let corpus = case::tests::corpus();
        let case = case::generate(&corpus, 1, 0);
        let v = |class: Class, sig: &str| Verdict {
            class,
            detail: "d".into(),
            signature: sig.into(),
            residual: verdict::Residual::NotApplicable,
        };
        let mut t = Tally::default();
        assert!(!t.add(&case, &v(Class::Ok, "ok"), "case-0", 0.1, 2));
        assert!(t.add(&case, &v(Class::Panic, "p"), "case-1", 0.1, 2));
        assert!(t.add(&case, &v(Class::Panic, "p"), "case-2", 0.1, 2));
        assert!(!t.add(&case, &v(Class::Panic, "p"), "case-3", 0.1, 2));
        assert!(t.add(&case, &v(Class::Hang, "h"), "case-4", 0.1, 2));
        assert_eq!((t.failures(), t.distinct_failures()), (4, 2));
        let s = t.summary(&Args::default(), 1.0, Path::new("/k"));
        assert!(s.contains("[panic] x3 p"), "{s}");
        assert!(
            s.contains("target/fuzz/panic/case-1, target/fuzz/panic/case-2"),
            "{s}"
        );
    }
}
