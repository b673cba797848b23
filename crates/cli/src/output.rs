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
