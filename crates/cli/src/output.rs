//! Files written by the CLI (`--output`, `--report`, `--plot`, `gen -o`): where the target
//! is a regular file (or a symlink to one, or nothing yet), to a temporary file in the
//! target's folder, then renamed, so an interrupted run never leaves a half-written result
//! (a symlink is kept: its target is replaced); a run ended by SIGINT, SIGTERM or SIGHUP
//! removes its temporary file first. A character device or a FIFO is written
//! straight through and never replaced (`--output /dev/stdout`, a pipe to another program).
//! A directory, block device or socket is refused before anything is written.
//!
//! Exit codes: a target that cannot be written to at all (refused kind, missing folder, no
//! permission) is bad input (2); a failure while the bytes are written or committed (a
//! full disk, `/dev/full`, an I/O error) is a failed run (1).

use std::fs::Metadata;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::exit::{bad, CliError};

/// How a path is written, from what is there now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Write a temporary file beside `0` and rename it over `0`: a regular file, a path
    /// that does not exist yet or a dangling symlink (the link itself is replaced, as a new
    /// file would be), or the final target of a symlink to a regular file.
    Replace(PathBuf),
    /// Open the path for writing and write into it: a character device or FIFO.
    Through,
}

/// Whether the run has a file to write ([`target`] accepted one): a closed stdout then
/// does not end it ([`stdout_line`]).
static FILES_PENDING: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader has gone while files were pending: later lines are dropped.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// What `path` is and how it may be written; refuses (exit 2, one line) a directory, block
/// device, socket or anything else that is not a file to write. Every output file passes
/// here before the run, so a closed stdout no longer ends a run that has one to write.
pub(crate) fn target(path: &Path) -> Result<Target, CliError> {
    let t = target_kind(path)?;
    FILES_PENDING.store(true, Ordering::Relaxed);
    Ok(t)
}

fn target_kind(path: &Path) -> Result<Target, CliError> {
    let cannot = |e: std::io::Error| bad(format!("cannot write {}: {e}", path.display()));
    let here = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Target::Replace(path.to_path_buf()))
        }
        Err(e) => return Err(cannot(e)),
    };
    let meta = if here.file_type().is_symlink() {
        match std::fs::metadata(path) {
            Ok(m) => m,
            // Dangling: created as a new path would be.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Target::Replace(path.to_path_buf()))
            }
            Err(e) => return Err(cannot(e)),
        }
    } else {
        here.clone()
    };
    match kind(&meta) {
        Kind::File if here.file_type().is_symlink() => {
            // Replace the file at the end of the link chain, beside itself.
            Ok(Target::Replace(
                std::fs::canonicalize(path).map_err(cannot)?,
            ))
        }
        Kind::File => Ok(Target::Replace(path.to_path_buf())),
        Kind::Stream => Ok(Target::Through),
        Kind::Refused(what) => Err(bad(format!(
            "cannot write {}: it is {what}",
            path.display()
        ))),
    }
}

/// Write `path` with `write`: by temporary file and rename, or straight through (see
/// [`target`]).
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> Result<(), CliError> {
    match target(path)? {
        Target::Replace(file) => write_replacing(path, &file, write),
        Target::Through => write_through(path, write),
    }
}

/// Write `file` (the path named `shown` on the command line, or the file a link names) by
/// a temporary file beside it and a rename.
fn write_replacing(
    shown: &Path,
    file: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> Result<(), CliError> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // The signal watcher first, and the file made and listed under the list's lock: a
    // signal's cleanup (which takes the lock) sees every temporary file that exists.
    watch_signals();
    let mut list = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
    let tmp = tempfile::Builder::new()
        .prefix(".krylov-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| {
            // The OS's reason, without the hidden temporary name `tempfile` adds.
            // (`tempfile` appends ` at path "..."` to the OS's message; its error keeps no
            // other handle on the original.)
            let text = e.to_string();
            let why = text.split(" at path \"").next().unwrap_or(&text);
            bad(format!(
                "cannot write {}: cannot create a file in {}: {why}",
                shown.display(),
                dir.display()
            ))
        })?;
    list.push(tmp.path().to_path_buf());
    drop(list);
    let _pending = Pending(tmp.path().to_path_buf());
    let failed =
        |e: anyhow::Error| CliError::failed(e.context(format!("cannot write {}", shown.display())));
    {
        let mut w = BufWriter::new(tmp.as_file());
        write(&mut w).map_err(failed)?;
        w.flush().map_err(|e| failed(e.into()))?;
    }
    publish_permissions(tmp.as_file()).map_err(|e| failed(e.into()))?;
    tmp.persist(file).map_err(|e| failed(e.error.into()))?;
    Ok(())
}

/// The temporary files being written now: a signal that ends the run removes them
/// ([`watch_signals`]); a run that ends otherwise removes its own (`tempfile`'s drop).
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A temporary file listed in [`PENDING`]: taken off the list when dropped.
struct Pending(PathBuf);

impl Drop for Pending {
    fn drop(&mut self) {
        let mut list = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
        list.retain(|p| *p != self.0);
    }
}

/// On the first temporary file: a thread that waits for SIGINT, SIGTERM or SIGHUP, then
/// removes every [`PENDING`] file and ends the process as the signal's default action
/// would (a killed run leaves no hidden `.krylov-*.tmp` behind). `signal-hook` keeps the
/// handler itself async-signal-safe: the work happens on this ordinary thread.
fn watch_signals() {
    static WATCHING: OnceLock<()> = OnceLock::new();
    WATCHING.get_or_init(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        let watch = move || {
            if let Some(sig) = signals.forever().next() {
                let list = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
                for path in list.iter() {
                    let _ = std::fs::remove_file(path);
                }
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        };
        // Without the thread a signal kills the run as before (the file stays behind).
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(watch);
    });
}

/// Write into the character device or FIFO `path` as it is (no temporary file, no rename;
/// opening a FIFO waits for its reader).
fn write_through(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> Result<(), CliError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| bad(format!("cannot write {}: {e}", path.display())))?;
    let failed =
        |e: anyhow::Error| CliError::failed(e.context(format!("cannot write {}", path.display())));
    let mut w = BufWriter::new(file);
    write(&mut w).map_err(failed)?;
    w.flush().map_err(|e| failed(e.into()))?;
    Ok(())
}

/// What a path (after following links) is, for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A regular file: replaced by rename.
    File,
    /// A character device or FIFO: written straight through.
    Stream,
    /// Not written: "a directory", "a block device", "a socket", ...
    Refused(&'static str),
}

#[cfg(unix)]
fn kind(meta: &Metadata) -> Kind {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        Kind::File
    } else if t.is_char_device() || t.is_fifo() {
        Kind::Stream
    } else if t.is_dir() {
        Kind::Refused("a directory")
    } else if t.is_block_device() {
        Kind::Refused("a block device")
    } else if t.is_socket() {
        Kind::Refused("a socket")
    } else {
        Kind::Refused("neither a file nor a character device or FIFO")
    }
}

/// Elsewhere only files and directories are told apart.
#[cfg(not(unix))]
fn kind(meta: &Metadata) -> Kind {
    if meta.is_file() {
        Kind::File
    } else if meta.is_dir() {
        Kind::Refused("a directory")
    } else {
        Kind::Refused("neither a file nor a character device or FIFO")
    }
}

/// Units of work from which a long command gets a progress bar.
const PROGRESS_MIN_UNITS: usize = 8;

/// A progress bar on stderr over `units` units of work (named `what`): hidden (drawing
/// nothing) unless `leader` (the printing rank), the work is long, stderr is a terminal,
/// and machine-readable rows (`rows_machine`: `--json`/`--csv`) do not go to a pipe or file
/// (their consumer reads stdout; the bar never writes there). Print rows on the same
/// terminal through [`indicatif::ProgressBar::suspend`], so a table is not garbled.
pub(crate) fn progress_bar(
    leader: bool,
    units: usize,
    what: &str,
    rows_machine: bool,
) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let rows_to_a_pipe = rows_machine && !std::io::stdout().is_terminal();
    let show =
        leader && units >= PROGRESS_MIN_UNITS && std::io::stderr().is_terminal() && !rows_to_a_pipe;
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(units as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    let template = format!("{{bar:30}} {{pos}}/{{len}} {what}, eta {{eta}} {{msg}}");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

/// Temporary files are created private (0600); a result file is an ordinary file (0644).
#[cfg(unix)]
fn publish_permissions(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))
}

/// Elsewhere the temporary file's default permissions are those of a new file already.
#[cfg(not(unix))]
fn publish_permissions(_file: &std::fs::File) -> std::io::Result<()> {
    Ok(())
}

/// Print one line on stdout. A reader that went away (`krylov ... | head`) ends the
/// program quietly with success, as Unix tools do; any other write error is a failure.
pub(crate) fn stdout_line(line: &str) {
    use std::io::Write;
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            // The reader is gone (`| head -1`): stop at once, unless files are still to
            // be written (`--plot`, `--output`, `--report`), which the run then finishes
            // without printing more.
            if !FILES_PENDING.load(Ordering::Relaxed) {
                std::process::exit(0);
            }
            STDOUT_GONE.store(true, Ordering::Relaxed);
            return;
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`stdout_line`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::stdout_line(&format!($($arg)*))
    };
}
pub(crate) use out;
