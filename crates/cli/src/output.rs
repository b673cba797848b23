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
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
