//! `cargo xtask test-gpu`: the GPU checks, where a GPU is present; `--prepare DIR`: a
//! self-contained folder of them for a GPU machine without Rust.
//!
//! With `nvidia-smi` on the machine it runs the `cuda`-feature tests of the packages that
//! declare the feature (their driver-present paths: device open, refusal of unported
//! solves, a small `gpu-check`), builds the release binary with `--features cuda` and runs
//! `krylov gpu-check --n N`, whose JSON report (kernel agreement with the CPU, SpMV and copy
//! bandwidth) it prints. Without `nvidia-smi` it says it skipped and succeeds.
//!
//! `--prepare DIR` builds here (no GPU needed) what a GPU machine with only Python and the
//! NVIDIA driver needs to run the checks: the stripped `krylov` binary and cuda test
//! executables, the shared matrices, `scripts/gpu_suite.py` (the checks) and
//! `scripts/cupy_cg.py`, and `run.sh PART`. DIR must be a folder of the repository that git
//! ignores (under `target/`), so it travels to the GPU machine as a carried path; the
//! command prints the lines to run there. The folder must stay under 60 MiB (the carry
//! limit is 64 MiB).

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use crate::flags::Flags;
use crate::workspace::{self, cargo, root, timed};

pub(crate) const USAGE: &str = "\
usage: cargo xtask test-gpu [--n N]
       cargo xtask test-gpu --prepare [DIR] [--n N]

Where `nvidia-smi` runs: cargo test --features cuda for the packages declaring `cuda`, then
cargo build --release -p castack-cli --features cuda and target/release/krylov gpu-check --n N
(exit 1 when a kernel disagrees with the CPU). Elsewhere: prints that it skipped, exit 0.

--prepare builds here, without a GPU, the folder DIR (default target/gpu-check; it must be in
the repository and ignored by git) for a GPU machine without Rust: krylov and the cuda test
executables (release, stripped), ../shared/matrices, gpu_suite.py, cupy_cg.py and run.sh.
There, in the repository root with DIR carried: bash DIR/run.sh unit|small|p128|p256-gpu|p256-cpu
(one 10-minute command each; writes $OUT/gpu_suite_PART.json, exit 0 when every check passed).
It prints the folder's size (at most 60 MiB) and the commands.

  --n N          grid points per direction of the gpu-check Poisson matrix (default 128)
  --prepare DIR  build the GPU check folder DIR instead of running the checks";

/// Where `--prepare` without a folder puts it, relative to the workspace root.
const DEFAULT_DIR: &str = "target/gpu-check";

/// The folder may not grow past this (the device machine's carry limit is 64 MiB).
const MAX_BYTES: u64 = 60 << 20;

/// The file that marks a folder as made by `--prepare`, so it may be replaced.
const MARKER: &str = ".castack-gpu-check";

/// The parts of `run.sh`, in the order `all` runs them, with a rough duration on an H100
/// machine with 16 cores (estimated from runs of the CPU side on 2 cores here).
const PARTS: [(&str, &str); 5] = [
    ("unit", "1-3 min"),
    ("small", "2-4 min"),
    ("p128", "2-3 min"),
    ("p256-gpu", "3-5 min"),
    ("p256-cpu", "4-8 min"),
];

/// Flags of `cargo xtask test-gpu`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    n: usize,
    /// `--prepare DIR`: build the GPU check folder instead of running the checks.
    prepare: Option<PathBuf>,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        // A bare `--prepare` (last, or followed by another flag) means the default folder.
        let mut args = args.to_vec();
        if let Some(i) = args.iter().position(|a| a == "--prepare") {
            if args.get(i + 1).is_none_or(|v| v.starts_with("--")) {
                args.insert(i + 1, DEFAULT_DIR.to_string());
            }
        }
        let mut flags = Flags::new(&args);
        let mut n = 128;
        if let Some(v) = flags.value("--n")? {
            n = v
                .parse()
                .with_context(|| format!("--n: not a positive integer: `{v}`"))?;
            if n == 0 {
                bail!("--n must be at least 1");
            }
        }
        let prepare = match flags.value("--prepare")? {
            Some(v) if v.is_empty() => bail!("--prepare: empty folder name"),
            Some(v) => Some(PathBuf::from(v)),
            None => None,
        };
        flags.finish()?;
        Ok(Args { n, prepare })
    }
}

/// Whether `nvidia-smi` runs successfully (a driver and a GPU are present).
fn gpu_present() -> bool {
    Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .is_ok_and(|o| o.status.success())
}

pub(crate) fn run(args: &Args) -> Result<()> {
    match &args.prepare {
        Some(dir) => prepare(dir, args.n),
        None => run_here(args.n),
    }
}

/// The checks on this machine, where it has a GPU.
fn run_here(n: usize) -> Result<()> {
    if !gpu_present() {
        eprintln!("== test-gpu: skipped (nvidia-smi not found or failed: no GPU on this machine)");
        return Ok(());
    }
    let metadata = workspace::Metadata::load()?;
    let cuda = metadata.declaring("cuda");
    if cuda.is_empty() {
        bail!("no workspace package declares feature `cuda`");
    }
    timed("cuda tests", || {
        for package in &cuda {
            workspace::run(&mut cargo([
                "test",
                "-p",
                &package.name,
                "--features",
                "cuda",
            ]))?;
        }
        Ok(())
    })?;
    timed("gpu-check", || {
        workspace::run(&mut cargo([
            "build",
            "--release",
            "-p",
            "castack-cli",
            "--features",
            "cuda",
        ]))?;
        let bin = root().join("target/release/krylov");
        workspace::run(Command::new(bin).args(["gpu-check", "--n", &n.to_string()]))
    })
}

/// One executable `--prepare` builds: the cargo command and which artifact of its output.
struct Build {
    /// Its name in the folder.
    dest: &'static str,
    args: &'static [&'static str],
    artifact: Artifact,
}

/// What selects one `compiler-artifact` record of cargo's JSON messages.
#[derive(Debug, Clone, Copy)]
struct Artifact {
    kind: &'static str,
    name: &'static str,
    /// Built as a test harness (`profile.test`).
    test: bool,
}

const BUILDS: [Build; 4] = [
    Build {
        dest: "krylov",
        args: &[
            "build",
            "--release",
            "-p",
            "castack-cli",
            "--features",
            "cuda",
        ],
        artifact: Artifact {
            kind: "bin",
            name: "krylov",
            test: false,
        },
    },
    Build {
        dest: "tests/linalg-lib",
        args: &[
            "test",
            "--release",
            "--no-run",
            "--features",
            "cuda",
            "-p",
            "castack-linalg",
            "--lib",
        ],
        artifact: Artifact {
            kind: "lib",
            name: "castack_linalg",
            test: true,
        },
    },
    Build {
        dest: "tests/krylov-lib",
        args: &[
            "test",
            "--release",
            "--no-run",
            "--features",
            "cuda",
            "-p",
            "castack-krylov",
            "--lib",
        ],
        artifact: Artifact {
            kind: "lib",
            name: "castack_krylov",
            test: true,
        },
    },
    Build {
        dest: "tests/cli-device",
        args: &[
            "test",
            "--release",
            "--no-run",
            "--features",
            "cuda",
            "-p",
            "castack-cli",
            "--test",
            "device",
        ],
        artifact: Artifact {
            kind: "test",
            name: "device",
            test: true,
        },
    },
];

/// `cargo xtask test-gpu --prepare DIR`.
fn prepare(dir: &Path, n: usize) -> Result<()> {
    let root = root()
        .canonicalize()
        .context("cannot resolve the workspace root")?;
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    let dir = resolve(&cwd, dir)?;
    let rel = inside(&root, &dir)?.to_path_buf();
    check_ignored(&root, &rel)?;
    check_replaceable(&dir)?;
    let shared = root.join("../shared/matrices");
    if !shared.join("README.md").is_file() {
        bail!(
            "{} not found: the GPU checks need the shared matrices and their README",
            shared.display()
        );
    }

    // Build first: a failed build leaves an earlier folder as it was.
    let mut built = Vec::new();
    for b in &BUILDS {
        let exe = timed(&format!("build {}", b.dest), || build(b))?;
        built.push((b, exe));
    }

    timed(&format!("assemble {}", rel.display()), || {
        fresh_dir(&dir)?;
        std::fs::create_dir_all(dir.join("tests"))?;
        for (b, exe) in &built {
            copy_stripped(exe, &dir.join(b.dest))?;
        }
        copy_matrices(&shared, &dir.join("matrices"))?;
        for script in ["gpu_suite.py", "cupy_cg.py"] {
            let from = root.join("scripts").join(script);
            std::fs::copy(&from, dir.join(script))
                .with_context(|| format!("cannot copy {}", from.display()))?;
        }
        write_executable(&dir.join("run.sh"), &run_sh(n))?;
        std::fs::write(dir.join(MARKER), "made by cargo xtask test-gpu --prepare\n")?;
        let manifest = manifest(&root, &dir, n)?;
        std::fs::write(
            dir.join("manifest.json"),
            serde_json::to_string_pretty(&manifest)? + "\n",
        )?;
        Ok(())
    })?;

    let bytes = folder_bytes(&dir)?;
    let mib = bytes as f64 / f64::from(1u32 << 20);
    if bytes > MAX_BYTES {
        bail!(
            "{} is {mib:.1} MiB, more than the {} MiB the GPU machine's carry allows (64 MiB \
             with everything): make the binaries or the matrices smaller",
            rel.display(),
            MAX_BYTES >> 20
        );
    }
    println!("{}", instructions(&rel, mib));
    Ok(())
}

/// What to run on the GPU machine.
fn instructions(rel: &Path, mib: f64) -> String {
    let d = rel.display();
    let mut s = format!(
        "== test-gpu --prepare: {d} is ready, {mib:.1} MiB (limit {} MiB)\n\
         On the GPU machine, in the repository root, with carry = [\"{d}\"], one command per \
         part (each fits one 10-minute command; p256-cpu reads what p256-gpu left in \
         {d}-work, so run it after p256-gpu on the same machine):\n",
        MAX_BYTES >> 20
    );
    for (part, time) in PARTS {
        s.push_str(&format!("  bash {d}/run.sh {part:<9} # about {time}\n"));
    }
    s.push_str(&format!(
        "Each writes $OUT/gpu_suite_PART.json ({d}/out/ without $OUT) and exits 0 only when \
         every check of the part passed; a part stops starting work after 540 s (its \
         unfinished checks fail). Flags after PART go to gpu_suite.py, e.g. `bash \
         {d}/run.sh p256-cpu --methods cacg,cbcg,cbcgr` reruns the part of p256-cpu a \
         budget cut. `bash {d}/run.sh all` runs every part in order (longer than one \
         command)."
    ));
    s
}

/// `path` as an absolute path (relative to `cwd`) without `.` or `..`, its existing part
/// resolved through symbolic links.
fn resolve(cwd: &Path, path: &Path) -> Result<PathBuf> {
    let lexical = normalize(&cwd.join(path));
    // Canonicalize the longest existing ancestor, keep the rest as written.
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        let Some(parent) = existing.parent() else {
            break;
        };
        rest.push(existing.file_name().unwrap_or_default().to_owned());
        existing = parent;
    }
    let mut out = existing
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", existing.display()))?;
    out.extend(rest.iter().rev());
    Ok(out)
}

/// Removes `.` and resolves `..` lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `dir` relative to `root`; an error when it is outside the repository or the root itself.
fn inside<'a>(root: &Path, dir: &'a Path) -> Result<&'a Path> {
    match dir.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => {
            bail!("--prepare: the folder cannot be the repository root; use e.g. {DEFAULT_DIR}")
        }
        Ok(rel) => Ok(rel),
        Err(_) => bail!(
            "--prepare: {} is outside the repository {}; it must be a folder of the repository \
             that git ignores, e.g. {DEFAULT_DIR}",
            dir.display(),
            root.display()
        ),
    }
}

/// Fails unless git ignores `rel` (a path relative to `root`; it need not exist).
fn check_ignored(root: &Path, rel: &Path) -> Result<()> {
    let out = Command::new("git")
        .args(["check-ignore", "-q", "--no-index", "--"])
        .arg(rel)
        .current_dir(root)
        .output()
        .context("could not run `git check-ignore`")?;
    match out.status.code() {
        Some(0) => Ok(()),
        Some(1) => bail!(
            "--prepare: {} is not ignored by git: the folder would show up as untracked files \
             and travel with every copy of the working tree; use a folder under target/, e.g. \
             {DEFAULT_DIR}",
            rel.display()
        ),
        _ => bail!(
            "`git check-ignore {}` failed ({}): {}",
            rel.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

/// Runs one build with `--message-format=json-render-diagnostics` (diagnostics and
/// progress on stderr) and returns the executable of its artifact.
fn build(b: &Build) -> Result<PathBuf> {
    let mut cmd = cargo(b.args);
    cmd.arg("--message-format=json-render-diagnostics");
    let line = workspace::describe(&cmd);
    eprintln!("$ {line}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("could not start `{line}`"))?;
    let mut messages = String::new();
    if let Some(stdout) = child.stdout.take() {
        for l in BufReader::new(stdout).lines() {
            messages.push_str(&l?);
            messages.push('\n');
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    let exes = executables(&messages, b.artifact);
    match exes.as_slice() {
        [exe] => Ok(exe.clone()),
        [] => bail!("`{line}` reported no executable for {:?}", b.artifact),
        more => bail!(
            "`{line}` reported {} executables for {:?}: {more:?}",
            more.len(),
            b.artifact
        ),
    }
}

/// The distinct executables of the `compiler-artifact` records matching `want` among
/// cargo's JSON message lines (other lines ignored).
fn executables(messages: &str, want: Artifact) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = messages
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| m["target"]["name"] == want.name)
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == want.kind))
        })
        .filter(|m| m["profile"]["test"].as_bool().unwrap_or(false) == want.test)
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Fails unless `dir` is absent, empty, or a folder an earlier `--prepare` made (it holds
/// the marker file), so that replacing it loses nothing else.
fn check_replaceable(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        bail!("--prepare: {} exists and is not a folder", dir.display());
    }
    let empty = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .next()
        .is_none();
    if !empty && !dir.join(MARKER).is_file() {
        bail!(
            "--prepare: {} exists and was not made by `cargo xtask test-gpu --prepare`; \
             remove it or choose another folder",
            dir.display()
        );
    }
    Ok(())
}

/// Empties `dir` for a new folder: creates it, or replaces one [`check_replaceable`] allows.
fn fresh_dir(dir: &Path) -> Result<()> {
    check_replaceable(dir)?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// Copies `exe` to `dest` and strips it (`strip`, from binutils).
fn copy_stripped(exe: &Path, dest: &Path) -> Result<()> {
    std::fs::copy(exe, dest)
        .with_context(|| format!("cannot copy {} to {}", exe.display(), dest.display()))?;
    workspace::run(Command::new("strip").arg(dest))
        .context("stripping failed: install binutils (`strip`)")
}

/// The matrices (`.mtx`, `.mtx.gz`) and README.md of the shared folder.
fn copy_matrices(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    let mut count = 0;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let wanted = name == "README.md" || name.ends_with(".mtx") || name.ends_with(".mtx.gz");
        if wanted && path.is_file() {
            std::fs::copy(&path, to.join(&*name))
                .with_context(|| format!("cannot copy {}", path.display()))?;
            count += usize::from(name != "README.md");
        }
    }
    if count == 0 {
        bail!("no .mtx or .mtx.gz files in {}", from.display());
    }
    Ok(())
}

fn write_executable(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The folder's driver script: `bash run.sh PART [gpu_suite.py flags]`.
fn run_sh(n: usize) -> String {
    let parts: Vec<&str> = PARTS.iter().map(|(p, _)| *p).collect();
    let all = parts.join(" ");
    let one = parts.join("|");
    format!(
        r#"#!/usr/bin/env bash
# The GPU checks of castack, made by `cargo xtask test-gpu --prepare` (see manifest.json).
#
#   bash run.sh PART [gpu_suite.py flags, e.g. --budget-s 0]
#
# PART: {one} (each fits one 10-minute command on an
# H100 machine with 16 cores; p256-cpu after p256-gpu on the same machine), p256 (both p256
# halves), all (every part in order). Each part writes $OUT/gpu_suite_PART.json when OUT is
# set, else out/gpu_suite_PART.json here, and prints one line per check. Exit 0 only when
# every check of every part run passed. Needs python3 (and numpy, scipy, CuPy for p256-gpu's
# CuPy comparison) and the NVIDIA driver; no Rust.
set -u
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
part="${{1:-}}"
case "$part" in
  {one}) parts="$part" ;;
  p256) parts="p256-gpu p256-cpu" ;;
  all) parts="{all}" ;;
  *) echo "usage: bash $0 {one}|p256|all [gpu_suite.py flags]" >&2; exit 2 ;;
esac
shift
out="${{OUT:-$here/out}}"
mkdir -p "$out"
status=0
for p in $parts; do
  python3 "$here/gpu_suite.py" "$p" --dir "$here" --out "$out/gpu_suite_$p.json" \
    --gpu-check-n {n} "$@" || status=1
done
exit $status
"#
    )
}

/// `manifest.json`: what was built from which commit, and the folder's files.
fn manifest(root: &Path, dir: &Path, n: usize) -> Result<Value> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"]);
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut files = serde_json::Map::new();
    for (path, bytes) in files_in(dir)? {
        let rel = path.strip_prefix(dir).unwrap_or(&path);
        files.insert(rel.display().to_string(), bytes.into());
    }
    let builds: serde_json::Map<String, Value> = BUILDS
        .iter()
        .map(|b| {
            (
                b.dest.to_string(),
                format!("cargo {}", b.args.join(" ")).into(),
            )
        })
        .collect();
    Ok(json!({
        "schema_version": 1,
        "build_id": format!("{}{}-{created}", commit.as_deref().unwrap_or("unknown"),
            if dirty == Some(true) { "-dirty" } else { "" }),
        "git_commit": commit,
        "git_dirty": dirty,
        "created_unix": created,
        "gpu_check_n": n,
        "builds": builds,
        "files": files,
    }))
}

/// Every regular file under `dir` with its size, sorted by path.
fn files_in(dir: &Path) -> Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in
            std::fs::read_dir(&d).with_context(|| format!("cannot read {}", d.display()))?
        {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                todo.push(entry.path());
            } else {
                out.push((entry.path(), meta.len()));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn folder_bytes(dir: &Path) -> Result<u64> {
    Ok(files_in(dir)?.iter().map(|(_, b)| b).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn parses_n() {
        let args = |n| Args { n, prepare: None };
        assert_eq!(Args::parse(&s(&[])).unwrap(), args(128));
        assert_eq!(Args::parse(&s(&["--n", "64"])).unwrap(), args(64));
        assert!(Args::parse(&s(&["--n", "0"])).is_err());
        assert!(Args::parse(&s(&["--m", "1"])).is_err());
    }

    #[test]
    fn parses_prepare() {
        let prep = |n, d: &str| Args {
            n,
            prepare: Some(PathBuf::from(d)),
        };
        let p = |v: &[&str]| Args::parse(&s(v)).unwrap();
        assert_eq!(p(&["--prepare", "target/x"]), prep(128, "target/x"));
        assert_eq!(
            p(&["--prepare=target/x", "--n", "32"]),
            prep(32, "target/x")
        );
        assert_eq!(p(&["--n", "32", "--prepare", "t/y"]), prep(32, "t/y"));
        // Bare: the default folder.
        assert_eq!(p(&["--prepare"]), prep(128, DEFAULT_DIR));
        assert_eq!(p(&["--prepare", "--n", "16"]), prep(16, DEFAULT_DIR));
        assert!(Args::parse(&s(&["--prepare", "a", "b"])).is_err());
        assert!(Args::parse(&s(&["--prepare="])).is_err());
        assert!(Args::parse(&s(&["--prepare", "a", "--n", "0"])).is_err());
    }

    #[test]
    fn the_folder_must_be_inside_the_repository() {
        let ws = Path::new("/ws");
        assert_eq!(
            inside(ws, Path::new("/ws/target/gpu-check")).unwrap(),
            Path::new("target/gpu-check")
        );
        let err = inside(ws, Path::new("/tmp/gpu")).unwrap_err().to_string();
        assert!(err.contains("outside the repository"), "{err}");
        assert!(inside(ws, Path::new("/ws")).is_err());
        assert!(inside(ws, Path::new("/wsx/target")).is_err());
        assert_eq!(
            normalize(Path::new("/ws/./target/../target/g")),
            Path::new("/ws/target/g")
        );
        // `..` out of the repository is seen through.
        let cwd = root().canonicalize().unwrap();
        let out = resolve(&cwd, Path::new("target/../../elsewhere")).unwrap();
        assert!(inside(&cwd, &out).is_err());
        let ok = resolve(&cwd.join("xtask"), Path::new("../target/gpu-check")).unwrap();
        assert_eq!(inside(&cwd, &ok).unwrap(), Path::new("target/gpu-check"));
    }

    #[test]
    fn the_folder_must_be_ignored_by_git() {
        let root = root().canonicalize().unwrap();
        if !root.join(".git").exists() {
            eprintln!("skipping: {} is not a git checkout", root.display());
            return;
        }
        check_ignored(&root, Path::new(DEFAULT_DIR)).unwrap();
        let err = check_ignored(&root, Path::new("xtask/gpu-check"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not ignored by git"), "{err}");
    }

    #[test]
    fn replaces_only_a_folder_it_made() {
        let base = std::env::temp_dir().join(format!("xtask-gpu-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("g");
        check_replaceable(&dir).unwrap(); // absent
        std::fs::create_dir_all(&dir).unwrap();
        check_replaceable(&dir).unwrap(); // empty
        std::fs::write(dir.join("keep.txt"), "x").unwrap();
        let err = check_replaceable(&dir).unwrap_err().to_string();
        assert!(err.contains("was not made by"), "{err}");
        std::fs::write(dir.join(MARKER), "").unwrap();
        fresh_dir(&dir).unwrap();
        assert!(dir.is_dir() && !dir.join("keep.txt").exists());
        let file = base.join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(check_replaceable(&file).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn finds_test_and_bin_executables() {
        let messages = r#"{"reason":"compiler-artifact","target":{"name":"castack_krylov","kind":["lib"]},"profile":{"test":false},"executable":null}
not json
{"reason":"compiler-artifact","target":{"name":"castack_krylov","kind":["lib"]},"profile":{"test":true},"executable":"/t/release/deps/castack_krylov-1"}
{"reason":"compiler-artifact","target":{"name":"castack_linalg","kind":["lib"]},"profile":{"test":true},"executable":"/t/release/deps/castack_linalg-3"}
{"reason":"compiler-artifact","target":{"name":"device","kind":["test"]},"profile":{"test":true},"executable":"/t/release/deps/device-2"}
{"reason":"compiler-artifact","target":{"name":"krylov","kind":["bin"]},"profile":{"test":false},"executable":"/t/release/krylov"}
{"reason":"build-finished","success":true}"#;
        for b in &BUILDS {
            let want = match b.dest {
                "krylov" => "/t/release/krylov",
                "tests/krylov-lib" => "/t/release/deps/castack_krylov-1",
                "tests/linalg-lib" => "/t/release/deps/castack_linalg-3",
                _ => "/t/release/deps/device-2",
            };
            assert_eq!(executables(messages, b.artifact), [PathBuf::from(want)]);
        }
    }

    #[test]
    fn run_sh_lists_every_part() {
        let text = run_sh(96);
        for (part, _) in PARTS {
            assert!(text.contains(part), "{part}");
            assert!(instructions(Path::new("target/g"), 1.0).contains(&format!("run.sh {part}")));
        }
        assert!(text.contains("--gpu-check-n 96"));
        assert!(text.contains(r#"${OUT:-$here/out}"#));
    }

    /// The pure-Python parts of `scripts/gpu_suite.py` (README condition-number table,
    /// iteration rule, timeouts): well under a second, python3 only.
    #[test]
    fn gpu_suite_self_test() {
        let script = root().join("scripts/gpu_suite.py");
        let out = match Command::new("python3")
            .arg("-S")
            .arg(&script)
            .arg("--self-test")
            .output()
        {
            Ok(out) => out,
            Err(e) => {
                eprintln!("skipping: python3 does not run ({e})");
                return;
            }
        };
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
