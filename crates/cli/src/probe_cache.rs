//! `krylov plan`'s probe cache: a folder of JSON files, one per instrumented run
//! ([`castack_plan::probe::ProbeStore`]), named by the run's key id and holding the
//! key's full description, which a lookup checks (a hash collision or a stale file is a
//! miss). Each file is written as the CLI writes its outputs (`output::write_atomic`: a
//! temporary file in the folder, then a rename), so a reader never sees half of one and
//! concurrent plans at worst both run the same probe. Floats are written and read back
//! exactly (serde_json's `float_roundtrip`), so a stored probe gives the rows a fresh
//! one gives.
//!
//! Default folder: `$XDG_CACHE_HOME/castack/probes`, else `$HOME/.cache/castack/probes`
//! (none when neither is set: nothing is kept). A folder that cannot be created or written
//! costs only the reuse: the plan goes on, with one warning on stderr.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use castack_plan::probe::{ProbeKey, ProbeStore, StoredProbe};

/// Probes kept under `dir`.
pub(crate) struct FolderStore {
    dir: PathBuf,
    warned: AtomicBool,
}

impl FolderStore {
    /// The store in `dir` (created when the first probe is kept).
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            warned: AtomicBool::new(false),
        }
    }

    /// The default folder (module doc), if the environment names one.
    pub(crate) fn default_dir() -> Option<PathBuf> {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache")))
            .map(|base| base.join("castack").join("probes"))
    }

    fn path(&self, key: &ProbeKey) -> PathBuf {
        self.dir.join(format!("{}.json", key.id()))
    }

    fn write(&self, key: &ProbeKey, entry: &StoredProbe) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        crate::output::write_atomic(&self.path(key), |w| {
            serde_json::to_writer(w, entry)?;
            Ok(())
        })
        .map_err(|e| e.message())
    }
}

impl ProbeStore for FolderStore {
    fn load(&self, key: &ProbeKey) -> Option<StoredProbe> {
        let text = std::fs::read(self.path(key)).ok()?;
        serde_json::from_slice::<StoredProbe>(&text)
            .ok()
            .filter(|e| e.key == key.describe())
    }

    fn store(&self, key: &ProbeKey, entry: &StoredProbe) {
        if let Err(e) = self.write(key, entry) {
            if !self.warned.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "warning: cannot keep instrumented runs in {}: {e} (the plan goes on)",
                    self.dir.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use castack_krylov::{Method, Precond};
    use castack_plan::probe::{Probe, ProbeMode, ProbeSource};

    fn key(k: usize) -> ProbeKey {
        ProbeKey {
            matrix: 7,
            method: Method::Cacg,
            k,
            basis: "chebyshev",
            tol: 1e-8,
            precond: Precond::Jacobi,
            ranks: 2,
            max_eq_iters: 100,
            mode: ProbeMode::Window,
        }
    }

    #[test]
    fn a_kept_probe_is_found_under_its_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = FolderStore::new(dir.path().join("a").join("b"));
        let entry = StoredProbe {
            key: key(4).describe(),
            probe: Some(Probe {
                eq_iters: 12.5,
                source: ProbeSource::Tracked,
                lag: Some(1.01),
                ran_eq_iters: 8,
                outer_iters: 2,
                reductions: 3,
                halo_exchanges: 9,
                setup_reductions: 4,
                setup_halo_exchanges: 5,
            }),
            history: Some(vec![0.5, 0.25]),
        };
        assert!(store.load(&key(4)).is_none());
        store.store(&key(4), &entry);
        assert_eq!(store.load(&key(4)), Some(entry.clone()));
        assert!(store.load(&key(5)).is_none());
        // A file whose recorded key differs (a collision, or edited) is a miss.
        let other = StoredProbe {
            key: key(5).describe(),
            ..entry
        };
        std::fs::write(store.path(&key(4)), serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(store.load(&key(4)).is_none());
        // So is a file that is not JSON.
        std::fs::write(store.path(&key(4)), b"{").unwrap();
        assert!(store.load(&key(4)).is_none());
    }

    #[test]
    fn a_folder_that_cannot_be_made_loses_only_the_reuse() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let store = FolderStore::new(file.join("probes"));
        let entry = StoredProbe {
            key: key(2).describe(),
            probe: None,
            history: None,
        };
        store.store(&key(2), &entry);
        assert!(store.load(&key(2)).is_none());
        assert!(store.warned.load(Ordering::Relaxed));
    }
}
