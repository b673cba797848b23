//! The workspace as xtask sees it: its root, a `cargo` command, and the parts of
//! `cargo metadata` the commands need (packages, their features and example/test targets).

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The workspace root: the parent of this package's folder.
pub(crate) fn root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// A `cargo` command (the one in `$CARGO` when set, as under `cargo xtask`) run in the root.
/// The environment (`CARGO_TERM_COLOR`, `RUSTFLAGS`, `CI`, ...) is inherited.
pub(crate) fn cargo<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(root());
    cmd
}

/// The command as a shell-like line, for messages (`cargo` instead of its full path).
pub(crate) fn describe(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program());
    let program = if program.file_stem().is_some_and(|s| s == "cargo") {
        "cargo".to_string()
    } else {
        program.display().to_string()
    };
    let mut line = program;
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Runs `cmd` with inherited stdio and fails unless it exits with status 0.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let line = describe(cmd);
    eprintln!("$ {line}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs `body` as a named step: a start line, then `== name: 12.3 s` whatever the outcome.
pub(crate) fn timed<T>(name: &str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    eprintln!("--> {name}");
    let start = Instant::now();
    let result = body();
    let status = if result.is_ok() { "" } else { " (FAILED)" };
    eprintln!("== {name}: {:.1} s{status}", start.elapsed().as_secs_f64());
    result.with_context(|| format!("step `{name}` failed"))
}

/// The workspace packages and target directory from `cargo metadata --no-deps`.
#[derive(Debug)]
pub(crate) struct Metadata {
    pub(crate) packages: Vec<Package>,
    pub(crate) target_directory: PathBuf,
}

/// One workspace package.
#[derive(Debug)]
pub(crate) struct Package {
    pub(crate) name: String,
    /// The `[features]` table: feature name -> what it enables.
    pub(crate) features: BTreeMap<String, Vec<String>>,
    pub(crate) targets: Vec<Target>,
}

/// One target (lib, bin, example, test, bench) of a package.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) kinds: Vec<String>,
    pub(crate) required_features: Vec<String>,
}

impl Metadata {
    /// Runs `cargo metadata --format-version 1 --no-deps` and parses its output.
    pub(crate) fn load() -> Result<Metadata> {
        let mut cmd = cargo(["metadata", "--format-version", "1", "--no-deps"]);
        let out = cmd.output().context("could not run `cargo metadata`")?;
        if !out.status.success() {
            bail!(
                "`cargo metadata` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8(out.stdout).context("`cargo metadata` printed non-UTF-8")?;
        Metadata::parse(&text)
    }

    pub(crate) fn parse(json: &str) -> Result<Metadata> {
        let v: Value = serde_json::from_str(json).context("`cargo metadata` output is not JSON")?;
        let target_directory = v["target_directory"]
            .as_str()
            .context("`cargo metadata`: no target_directory")?
            .into();
        let packages = v["packages"]
            .as_array()
            .context("`cargo metadata`: no packages")?
            .iter()
            .map(Package::parse)
            .collect::<Result<_>>()?;
        Ok(Metadata {
            packages,
            target_directory,
        })
    }

    /// The packages whose `[features]` table declares `feature`.
    pub(crate) fn declaring(&self, feature: &str) -> Vec<&Package> {
        self.packages
            .iter()
            .filter(|p| p.features.contains_key(feature))
            .collect()
    }
}

impl Package {
    fn parse(v: &Value) -> Result<Package> {
        let name = v["name"]
            .as_str()
            .context("`cargo metadata`: package without name")?
            .to_string();
        let features = match v["features"].as_object() {
            Some(map) => map
                .iter()
                .map(|(k, list)| (k.clone(), strings(list)))
                .collect(),
            None => BTreeMap::new(),
        };
        let targets = v["targets"]
            .as_array()
            .with_context(|| format!("`cargo metadata`: package {name} has no targets"))?
            .iter()
            .map(|t| Target {
                name: t["name"].as_str().unwrap_or_default().to_string(),
                kinds: strings(&t["kind"]),
                required_features: strings(&t["required-features"]),
            })
            .collect();
        Ok(Package {
            name,
            features,
            targets,
        })
    }

    /// The package's features enabled when no `--features` flag is given: `default` and
    /// everything it enables in this package, transitively (`dep:` and `crate/feature`
    /// entries name other packages and are left out).
    pub(crate) fn default_features(&self) -> BTreeSet<String> {
        let mut enabled = BTreeSet::new();
        let mut todo = vec!["default".to_string()];
        while let Some(f) = todo.pop() {
            if !self.features.contains_key(&f) || !enabled.insert(f.clone()) {
                continue;
            }
            for item in &self.features[&f] {
                if !item.contains(':') && !item.contains('/') {
                    todo.push(item.clone());
                }
            }
        }
        enabled
    }

    /// Targets of the given kind (`example`, `test`, ...).
    pub(crate) fn targets_of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Target> {
        self.targets
            .iter()
            .filter(move |t| t.kinds.iter().any(|k| k == kind))
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A trimmed `cargo metadata` answer: one package with `mpi` and `cuda` features, an
    /// ordinary example, an MPI example and an MPI test; one package with neither feature.
    pub(crate) const SAMPLE: &str = r#"{
      "target_directory": "/ws/target",
      "packages": [
        { "name": "castack-collectives",
          "features": { "default": ["fast"], "fast": ["dep:bytemuck"], "mpi": ["dep:mpi"],
                        "cuda": [] },
          "targets": [
            { "kind": ["lib"], "name": "castack_collectives" },
            { "kind": ["example"], "name": "allreduce" },
            { "kind": ["example"], "name": "mpi_allreduce", "required-features": ["mpi"] },
            { "kind": ["test"], "name": "mpi_sweep", "required-features": ["mpi"] },
            { "kind": ["example"], "name": "fast_demo", "required-features": ["fast"] }
          ] },
        { "name": "castack-fabric-sim", "features": {},
          "targets": [ { "kind": ["lib"], "name": "castack_fabric_sim" } ] }
      ]
    }"#;

    #[test]
    fn parses_packages_features_and_targets() {
        let m = Metadata::parse(SAMPLE).unwrap();
        assert_eq!(m.target_directory, Path::new("/ws/target"));
        assert_eq!(m.packages.len(), 2);
        let names: Vec<_> = m.declaring("mpi").iter().map(|p| &p.name).collect();
        assert_eq!(names, ["castack-collectives"]);
        assert!(m.declaring("hdf5").is_empty());
        let examples: Vec<_> = m.packages[0]
            .targets_of_kind("example")
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(examples, ["allreduce", "mpi_allreduce", "fast_demo"]);
        assert_eq!(m.packages[0].targets[2].required_features, ["mpi"]);
    }

    #[test]
    fn default_feature_closure() {
        let m = Metadata::parse(SAMPLE).unwrap();
        let d = m.packages[0].default_features();
        assert_eq!(d.into_iter().collect::<Vec<_>>(), ["default", "fast"]);
        assert!(m.packages[1].default_features().is_empty());
    }

    #[test]
    fn describe_shows_cargo_and_args() {
        let cmd = cargo(["fmt", "--all"]);
        let line = describe(&cmd);
        assert!(line.ends_with("fmt --all"), "{line}");
    }
}
