//! The shared SPD test matrices (`../shared/matrices` beside the workspace) and the facts
//! their README records (size, condition estimate, scipy's Jacobi-PCG iteration count), used
//! as independent references.

use std::path::{Path, PathBuf};

/// One matrix of the README's tables.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixInfo {
    /// Short name, e.g. `nos5`.
    pub name: String,
    /// Path of the file (`.mtx` or `.mtx.gz`).
    pub path: PathBuf,
    /// Rows.
    pub n: usize,
    /// Condition number estimate.
    pub kappa: f64,
    /// scipy `cg(A, b, rtol=1e-8, M=diag(A)^-1)` iterations with `b = A * ones`.
    pub jacobi_pcg_iterations: usize,
}

/// The folder of shared matrices, when present (`<workspace>/../shared/matrices`).
pub fn shared_dir() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let dir = root.join("shared/matrices");
    dir.join("README.md").is_file().then_some(dir)
}

/// Parse the README's tables. Rows that do not parse are skipped.
pub fn catalogue(dir: &Path) -> Vec<MatrixInfo> {
    let Ok(text) = std::fs::read_to_string(dir.join("README.md")) else {
        return Vec::new();
    };
    text.lines().filter_map(|l| parse_row(dir, l)).collect()
}

fn parse_row(dir: &Path, line: &str) -> Option<MatrixInfo> {
    if !line.starts_with("| ") || !line.contains(".mtx") {
        return None;
    }
    let cells: Vec<&str> = line
        .trim()
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect();
    if cells.len() < 10 {
        return None;
    }
    let kappa_text = cells[7].split("κ ≈ ").nth(1)?;
    let kappa = kappa_text.split_whitespace().next()?.parse().ok()?;
    Some(MatrixInfo {
        name: cells[0].to_string(),
        path: dir.join(cells[1].trim_matches('`')),
        n: cells[4].parse().ok()?,
        kappa,
        jacobi_pcg_iterations: cells[9].parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_readme_row() {
        let row = "| nos5 | `nos5.mtx` | HB/nos5 | a:b @ `c` | 468 | 5172 | symmetric (lower) | SPD: CHOLMOD LL^T ok; λmin ≈ 5.29e+01, κ ≈ 1.10e+04 | 406 | 216 | 9.30e-09 | 0.08 MB |";
        let m = parse_row(Path::new("/m"), row).unwrap();
        assert_eq!(m.name, "nos5");
        assert_eq!(m.n, 468);
        assert_eq!(m.kappa, 1.10e4);
        assert_eq!(m.jacobi_pcg_iterations, 216);
        assert_eq!(m.path, Path::new("/m/nos5.mtx"));
    }
}
