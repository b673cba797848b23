//! Files written by the CLI: always to a temporary file in the target's folder, then
//! renamed, so an interrupted run never leaves a half-written result.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Context;

/// Write `path` atomically with `write`.
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".krylov-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    {
        let mut w = BufWriter::new(tmp.as_file());
        write(&mut w).with_context(|| format!("cannot write {}", path.display()))?;
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    publish_permissions(tmp.as_file())
        .with_context(|| format!("cannot write {}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
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
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
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
