//! The `krylov` binary built with `--features mpi`, checked end to end under mpirun (part of
//! `cargo xtask test-mpi`), at every rank count P of `--np`:
//!
//! - `solve --backend mpi` on a generated 2-D Poisson matrix with CBCGR (k = 6) gives the
//!   iteration count, true residual and solution file (`--output`, 17 significant digits) of
//!   `--backend threads --ranks P` exactly, and prints one JSON line (rank 0 only): the file
//!   read in byte ranges by all ranks, the same with `--partition nnz --rhs random:3`, the
//!   file compressed (streamed by rank 0), in general storage with its lines shuffled and
//!   `--partition nnz` (symmetry checked across ranks, rows moved to their nnz-balanced
//!   owners), and with `--reorder rcm` (every rank reads it whole);
//! - a file with a malformed entry is exit 2 and the whole-file reader's one line, its line
//!   number included, whichever rank's byte range holds it;
//! - bad input ends every rank with exit code 2 and one `error:` line, never a hang: a
//!   missing matrix (every rank fails) and an unwritable `--report` (rank 0 alone fails,
//!   after the solve);
//! - `bench collectives --backend mpi --algo all --verify` passes for every operation, with a
//!   `native` row (the MPI library's own collective), at root P-1;
//! - `bench neighbor --backend mpi` with the N whose rank layout is P (N = P - 1 all to all,
//!   or the ring of 3 for N = 2): one JSON row per strategy and size from rank 0 only, the
//!   sizes in order, measured (`modeled: false`), `effective_gbs = N * bytes / time`; and at
//!   a P that does not fit `--neighbors 6` (27 ranks), exit 2 with one line naming
//!   `mpirun -np 27`;
//! - `bench pingpong --backend mpi` at P = 2 in both modes: one row per size (8 B and 1 MiB),
//!   `min <= avg <= max`, bandwidth = bytes / avg; `--hops` (sim only) and any P other than 2
//!   exit 2 with one line;
//! - `calibrate --backend mpi --quick -o FILE`: at P = 1 exit 2 with one line naming
//!   `mpirun -np P`; at P >= 2 rank 0 writes a preset whose every number is finite and not
//!   negative, whose network figures carry their provenance (`measured here`, the date, the
//!   `mpirun -np P` command), which prices a simulated solve at P ranks
//!   (`solve --backend sim --fabric FILE --ranks P`), and nothing on stdout.

use crate::mpi_test::{mpirun, output_with_timeout, Args};
use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The operations of `krylov bench collectives`.
const OPS: [&str; 8] = [
    "bcast",
    "scatter",
    "gather",
    "reduce",
    "allgather",
    "allreduce",
    "barrier",
    "alltoall",
];

/// A scratch folder removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs every check; returns the number of mpirun launches.
pub(crate) fn run(krylov: &Path, args: &Args) -> Result<usize> {
    let dir =
        Scratch(std::env::temp_dir().join(format!("castack-test-mpi-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).with_context(|| format!("creating {}", dir.0.display()))?;
    let matrix = dir.0.join("poisson2d.mtx");
    let gen = output_with_timeout(
        Command::new(krylov)
            .args(["gen", "poisson2d", "--n", "20", "--output"])
            .arg(&matrix),
        args.timeout(),
    )?;
    ensure!(
        gen.status.success(),
        "krylov gen failed: {}",
        text(&gen.stderr)
    );
    let plain = std::fs::read(&matrix)?;
    let gz = dir.0.join("poisson2d.mtx.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, &plain)?;
    std::fs::write(&gz, enc.finish()?)?;
    // A malformed entry two thirds of the way in (line numbers are 1-based).
    let text = String::from_utf8_lossy(&plain);
    let mut lines: Vec<&str> = text.lines().collect();
    let bad_line = 2 * lines.len() / 3;
    lines[bad_line - 1] = "3 2 1.0e";
    let bad = dir.0.join("bad.mtx");
    std::fs::write(&bad, lines.join("\n"))?;
    let bad_message = format!("error: {}:{bad_line}: invalid value '1.0e'", bad.display());
    let general = dir.0.join("general.mtx");
    std::fs::write(&general, general_shuffled(&text))?;

    let mut launches = 0;
    for &np in args.np() {
        for (file, extra) in [
            (&matrix, &[][..]),
            (&matrix, &["--partition", "nnz", "--rhs", "random:3"][..]),
            (&gz, &[][..]),
            (&general, &["--partition", "nnz"][..]),
            (&matrix, &["--reorder", "rcm"][..]),
            (&matrix, &["--precond", "bjacobi_ic0"][..]),
            (
                &general,
                &["--precond", "chebyshev", "--partition", "nnz"][..],
            ),
        ] {
            solve_matches_threads(krylov, (file, extra), &dir.0, np, args)?;
            launches += 2;
        }
        bad_input_one_line(krylov, &matrix, &dir.0, np, args)?;
        bad_file_line(krylov, &bad, &bad_message, np, args)?;
        launches += 4;
        for op in OPS {
            bench_verifies(krylov, op, np, args)?;
            launches += 1;
        }
        launches += neighbor_checks(krylov, np, args)?;
        launches += pingpong_checks(krylov, np, args)?;
        launches += calibrate_checks(krylov, &matrix, &dir.0, np, args)?;
        eprintln!("   ok: krylov under mpirun with {np} rank(s)");
    }
    Ok(launches)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

fn json(out: &Output, what: &str) -> Result<Value> {
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    ensure!(
        stdout.lines().count() == 1,
        "{what}: expected one JSON line on stdout (rank 0 only), got:\n{stdout}"
    );
    serde_json::from_str(&stdout).with_context(|| format!("{what}: not JSON: {stdout}"))
}

fn solve_matches_threads(
    krylov: &Path,
    (matrix, extra): (&Path, &[&str]),
    dir: &Path,
    np: usize,
    args: &Args,
) -> Result<()> {
    let common = [
        "solve", "--method", "cbcgr", "--k", "6", "--json", "--output",
    ];
    let x_threads = dir.join(format!("x-threads-{np}.mtx"));
    let x_mpi = dir.join(format!("x-mpi-{np}.mtx"));
    let threads = output_with_timeout(
        Command::new(krylov)
            .args(common)
            .arg(&x_threads)
            .arg(matrix)
            .args(extra)
            .args(["--backend", "threads", "--ranks", &np.to_string()]),
        args.timeout(),
    )?;
    let mpi = output_with_timeout(
        mpirun(np)
            .arg(krylov)
            .args(common)
            .arg(&x_mpi)
            .arg(matrix)
            .args(extra)
            .args(["--backend", "mpi"]),
        args.timeout(),
    )?;
    let (t, m) = (json(&threads, "threads solve")?, json(&mpi, "mpi solve")?);
    ensure!(m["backend"] == "mpi" && m["ranks"] == np, "mpi report: {m}");
    ensure!(m["converged"] == true, "mpi solve did not converge: {m}");
    for field in [
        "iterations",
        "relres_true",
        "relres_recurrence",
        "reductions",
        "halo_exchanges",
        "precond_applies",
        "precond_shift",
    ] {
        ensure!(
            t[field] == m[field],
            "{np} rank(s), {} {extra:?}: {field} is {} on threads, {} on mpi",
            matrix.display(),
            t[field],
            m[field]
        );
    }
    let (xt, xm) = (std::fs::read(&x_threads)?, std::fs::read(&x_mpi)?);
    ensure!(
        !xt.is_empty() && xt == xm,
        "{np} rank(s), {} {extra:?}: the solutions written by threads and mpi differ",
        matrix.display()
    );
    Ok(())
}

/// The symmetric-storage file `text` in general storage (both triangles), its entry lines
/// in a seeded shuffled order: every rank's byte range then holds entries of every rank's
/// rows, and the read checks symmetry across ranks.
fn general_shuffled(text: &str) -> String {
    let mut lines = text.lines().filter(|l| !l.starts_with('%'));
    let size = lines.next().unwrap_or("0 0 0");
    let mut entries: Vec<String> = Vec::new();
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let [r, c, v] = f[..] {
            entries.push(format!("{r} {c} {v}"));
            if r != c {
                entries.push(format!("{c} {r} {v}"));
            }
        }
    }
    // A fixed linear congruential shuffle (Fisher-Yates).
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for k in (1..entries.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        entries.swap(k, ((state >> 33) % (k as u64 + 1)) as usize);
    }
    let (n, _) = size.split_once(' ').unwrap_or(("0", ""));
    format!(
        "%%MatrixMarket matrix coordinate real general\n{n} {n} {}\n{}\n",
        entries.len(),
        entries.join("\n")
    )
}

/// A malformed matrix file: exit 2 and exactly the line `want` (the whole-file reader's
/// message) on stderr from the job, whichever rank's byte range holds the bad line.
fn bad_file_line(krylov: &Path, bad: &Path, want: &str, np: usize, args: &Args) -> Result<()> {
    let out = output_with_timeout(
        mpirun(np)
            .arg(krylov)
            .arg("solve")
            .arg(bad)
            .args(["--backend", "mpi", "--json"]),
        args.timeout(),
    )?;
    let stderr = text(&out.stderr);
    let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    if out.status.code() != Some(2) || ours != [want] {
        bail!(
            "{np} rank(s), a malformed file: expected exit code 2 and the one line `{want}`, got {} and:\n{stderr}",
            out.status
        );
    }
    Ok(())
}

fn bad_input_one_line(
    krylov: &Path,
    matrix: &Path,
    dir: &Path,
    np: usize,
    args: &Args,
) -> Result<()> {
    let missing = dir.join("no-such-matrix.mtx");
    let unwritable = dir.join("no-such-dir").join("report.json");
    let cases: [(&str, Vec<&std::ffi::OsStr>); 2] = [
        ("a missing matrix", vec![missing.as_os_str()]),
        (
            "an unwritable --report (rank 0 alone fails)",
            vec![
                matrix.as_os_str(),
                "--report".as_ref(),
                unwritable.as_os_str(),
            ],
        ),
    ];
    for (what, extra) in cases {
        let out = output_with_timeout(
            mpirun(np)
                .arg(krylov)
                .arg("solve")
                .args(extra)
                .args(["--backend", "mpi", "--json"]),
            args.timeout(),
        )?;
        let stderr = text(&out.stderr);
        let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        if out.status.code() != Some(2) || ours.len() != 1 {
            bail!(
                "{np} rank(s), {what}: expected exit code 2 and one `error:` line, got {} and:\n{stderr}",
                out.status
            );
        }
    }
    Ok(())
}

fn bench_verifies(krylov: &Path, op: &str, np: usize, args: &Args) -> Result<()> {
    let root = (np - 1).to_string();
    let out = output_with_timeout(
        mpirun(np).arg(krylov).args([
            "bench",
            "collectives",
            "--backend",
            "mpi",
            "--op",
            op,
            "--algo",
            "all",
            "--verify",
            "--sizes",
            "8,4K",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--root",
            &root,
            "--json",
        ]),
        args.timeout(),
    )?;
    ensure!(
        out.status.success(),
        "bench {op} at {np} rank(s) failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    let rows: Vec<Value> = text(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("bench {op}: rows are not JSON"))?;
    ensure!(
        rows.iter().any(|r| r["algo"] == "native") && rows.iter().any(|r| r["algo"] != "native"),
        "bench {op}: expected registry rows and a native row, got {rows:?}"
    );
    for r in &rows {
        ensure!(
            r["verified"] == true && r["backend"] == "mpi" && r["ranks"] == np,
            "bench {op} at {np} rank(s): {r}"
        );
    }
    Ok(())
}

/// JSON rows of a successful run, checked to come from one rank (as many lines as rows).
fn rows(out: &Output, what: &str) -> Result<Vec<Value>> {
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("{what}: not JSON: {l}")))
        .collect()
}

/// A run that must end every rank with exit code 2 and print one `error:` line containing
/// `needle`, and no rows.
/// `calibrate --backend mpi` at `np` ranks (module doc); returns the launches.
fn calibrate_checks(
    krylov: &Path,
    matrix: &Path,
    dir: &Path,
    np: usize,
    args: &Args,
) -> Result<usize> {
    let preset = dir.join(format!("calibrated-{np}.toml"));
    let out = output_with_timeout(
        mpirun(np)
            .arg(krylov)
            .args(["calibrate", "--backend", "mpi", "--quick", "-o"])
            .arg(&preset),
        args.timeout(),
    )?;
    let what = format!("calibrate --backend mpi at {np} rank(s)");
    if np < 2 {
        exits_2_one_line(&out, &what, "mpirun -np P")?;
        return Ok(1);
    }
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    ensure!(
        out.stdout.is_empty(),
        "{what}: expected nothing on stdout, got:\n{}",
        text(&out.stdout)
    );
    let toml = std::fs::read_to_string(&preset)
        .with_context(|| format!("{what}: reading {}", preset.display()))?;
    check_calibrated(&toml, np).with_context(|| format!("{what}: {}", preset.display()))?;
    // The preset loads and prices a solve at np simulated ranks.
    let sim = output_with_timeout(
        Command::new(krylov)
            .arg("solve")
            .arg(matrix)
            .args(["--backend", "sim", "--fabric"])
            .arg(&preset)
            .args(["--ranks", &np.to_string(), "--json"]),
        args.timeout(),
    )?;
    let row = json(
        &sim,
        &format!("solve --backend sim --fabric {}", preset.display()),
    )?;
    ensure!(
        row["converged"] == true && positive(&row["time_s"]).is_some() && row["modeled"] == true,
        "{what}: the simulated solve on the preset: {row}"
    );
    Ok(1)
}

/// A preset from `mpirun -np np krylov calibrate --backend mpi`: every `key = number` is
/// finite and not negative, the network's rates and start costs positive, and the network
/// part (before `[compute.host]`) names its measurement beside its values.
fn check_calibrated(toml: &str, np: usize) -> Result<()> {
    let mut section = String::new();
    let mut seen = Vec::new();
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if line.starts_with('#') {
            continue;
        }
        let (key, value) = (key.trim(), value.trim());
        if value.starts_with('"') || value == "true" || value == "false" {
            continue;
        }
        let v: f64 = value
            .parse()
            .with_context(|| format!("`{line}` is not a number"))?;
        ensure!(v.is_finite() && v >= 0.0, "`{line}` ({section})");
        let name = format!("{section}.{key}");
        if matches!(
            name.as_str(),
            "ports.bandwidth_gbs"
                | "dma.start_us"
                | "pio.start_us"
                | "pio.bandwidth_gbs"
                | "memory.host.read_gbs"
                | "compute.host.mem_bandwidth_gbs"
                | "compute.host.gflops"
        ) {
            ensure!(v > 0.0, "`{line}` ({section}) must be positive");
        }
        seen.push(name);
    }
    for needed in [
        "ports.bandwidth_gbs",
        "dma.start_us",
        "topology.nodes",
        "compute.host.mem_bandwidth_gbs",
    ] {
        ensure!(
            seen.iter().any(|s| s == needed),
            "no {needed} in the preset"
        );
    }
    let network = toml.split("[compute.host]").next().unwrap_or_default();
    let command = format!("mpirun -np {np} ");
    let traced = network
        .lines()
        .filter(|l| l.starts_with('#') && l.contains("measured here") && l.contains(&command))
        .count();
    ensure!(
        traced >= 4,
        "expected the network's values traced (`measured here ... by `{command}...`) beside them, found {traced} such comments"
    );
    ensure!(
        toml.contains(&format!("nodes = {}", np.max(2))),
        "expected a topology of {np} nodes"
    );
    Ok(())
}

fn exits_2_one_line(out: &Output, what: &str, needle: &str) -> Result<()> {
    let stderr = text(&out.stderr);
    let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    ensure!(
        out.status.code() == Some(2) && ours.len() == 1 && ours[0].contains(needle),
        "{what}: expected exit code 2 and one `error:` line with `{needle}`, got {} and:\n{stderr}",
        out.status
    );
    ensure!(
        out.stdout.is_empty(),
        "{what}: expected no rows, got:\n{}",
        text(&out.stdout)
    );
    Ok(())
}

/// `x` is a finite positive number.
fn positive(x: &Value) -> Option<f64> {
    x.as_f64().filter(|v| v.is_finite() && *v > 0.0)
}

/// `a` and `b` agree to a relative 1e-9.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// The `--neighbors` N whose rank layout in `krylov bench neighbor` has exactly `np` ranks
/// (CLI.md: N in {2, 4, 6} is a periodic grid of 3^(N/2) ranks, any other N is N + 1 ranks
/// all to all), if any.
fn neighbors_for(np: usize) -> Option<usize> {
    match np {
        3 => Some(2),
        9 => Some(4),
        27 => Some(6),
        _ if np >= 2 && ![2, 4, 6].contains(&(np - 1)) => Some(np - 1),
        _ => None,
    }
}

/// `bench neighbor --backend mpi` at `np` ranks; returns the number of mpirun launches.
fn neighbor_checks(krylov: &Path, np: usize, args: &Args) -> Result<usize> {
    let mut launches = 0;
    if let Some(n) = neighbors_for(np) {
        let what = format!("bench neighbor --neighbors {n} at {np} rank(s)");
        let out = output_with_timeout(
            mpirun(np).arg(krylov).args([
                "bench",
                "neighbor",
                "--backend",
                "mpi",
                "--neighbors",
                &n.to_string(),
                "--devices",
                "2",
                "--strategy",
                "both",
                "--sizes",
                "8,4K",
                "--iters",
                "3",
                "--json",
            ]),
            args.timeout(),
        )?;
        launches += 1;
        let rows = rows(&out, &what)?;
        let expected = [
            ("naive", 8),
            ("naive", 4096),
            ("segmented", 8),
            ("segmented", 4096),
        ];
        ensure!(
            rows.len() == expected.len(),
            "{what}: expected {} rows from rank 0 alone, got {}:\n{}",
            expected.len(),
            rows.len(),
            text(&out.stdout)
        );
        for (r, (strategy, bytes)) in rows.iter().zip(expected) {
            ensure!(
                r["strategy"] == strategy
                    && r["bytes"] == bytes
                    && r["neighbors"] == n
                    && r["devices"] == 2
                    && r["mode"] == "put"
                    && r["backend"] == "mpi"
                    && r["ranks"] == np
                    && r["modeled"] == false
                    && r["analytic_us"].is_null(),
                "{what}: expected a {strategy} row of {bytes} bytes, got {r}"
            );
            let (Some(time_us), Some(gbs)) =
                (positive(&r["time_us"]), positive(&r["effective_gbs"]))
            else {
                bail!("{what}: time_us and effective_gbs must be positive: {r}");
            };
            ensure!(
                close(gbs, (n * bytes) as f64 / (time_us * 1e-6) / 1e9),
                "{what}: effective_gbs {gbs} is not N * bytes / time ({n} * {bytes} B in {time_us} us)"
            );
        }
    }
    if np != 27 {
        let out = output_with_timeout(
            mpirun(np).arg(krylov).args([
                "bench",
                "neighbor",
                "--backend",
                "mpi",
                "--neighbors",
                "6",
                "--sizes",
                "8",
            ]),
            args.timeout(),
        )?;
        launches += 1;
        exits_2_one_line(
            &out,
            &format!("bench neighbor --neighbors 6 at {np} rank(s)"),
            "mpirun -np 27",
        )?;
    }
    Ok(launches)
}

/// `bench pingpong --backend mpi` at `np` ranks; returns the number of mpirun launches.
fn pingpong_checks(krylov: &Path, np: usize, args: &Args) -> Result<usize> {
    let pingpong = |extra: &[&str]| {
        output_with_timeout(
            mpirun(np)
                .arg(krylov)
                .args(["bench", "pingpong", "--backend", "mpi", "--json"])
                .args(extra),
            args.timeout(),
        )
    };
    if np != 2 {
        let out = pingpong(&["--sizes", "8"])?;
        exits_2_one_line(
            &out,
            &format!("bench pingpong at {np} rank(s)"),
            "mpirun -np 2",
        )?;
        return Ok(1);
    }
    let out = pingpong(&["--sizes", "8", "--hops", "1"])?;
    exits_2_one_line(&out, "bench pingpong --hops 1 on mpi", "--backend sim only")?;
    for mode in ["put", "two_sided"] {
        let what = format!("bench pingpong --mode {mode}");
        let out = pingpong(&[
            "--mode", mode, "--sizes", "8,1M", "--iters", "20", "--warmup", "2",
        ])?;
        let rows = rows(&out, &what)?;
        let sizes = [8usize, 1 << 20];
        ensure!(
            rows.len() == sizes.len(),
            "{what}: expected {} rows from rank 0 alone, got {}:\n{}",
            sizes.len(),
            rows.len(),
            text(&out.stdout)
        );
        for (r, bytes) in rows.iter().zip(sizes) {
            ensure!(
                r["op"] == "pingpong"
                    && r["algo"] == "mpi_isend"
                    && r["backend"] == "mpi"
                    && r["ranks"] == 2
                    && r["bytes"] == bytes
                    && r["memory"] == "host"
                    && r["modeled"] == false
                    && r["fabric"].is_null(),
                "{what}: expected a row of {bytes} bytes, got {r}"
            );
            let (Some(min), Some(avg), Some(max), Some(bw)) = (
                positive(&r["min_us"]),
                positive(&r["avg_us"]),
                positive(&r["max_us"]),
                positive(&r["bandwidth_gbs"]),
            ) else {
                bail!("{what}: times and bandwidth must be positive: {r}");
            };
            ensure!(
                min <= avg && avg <= max,
                "{what}: expected min <= avg <= max: {r}"
            );
            ensure!(
                close(bw, bytes as f64 / (avg * 1e-6) / 1e9),
                "{what}: bandwidth_gbs {bw} is not bytes / avg ({bytes} B in {avg} us)"
            );
        }
    }
    Ok(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rank count of `krylov bench neighbor`'s layout for N neighbours, as CLI.md states it.
    fn layout_ranks(n: usize) -> usize {
        if [2, 4, 6].contains(&n) {
            3usize.pow(n as u32 / 2)
        } else {
            n + 1
        }
    }

    #[test]
    fn neighbors_for_picks_a_layout_of_exactly_np_ranks() {
        for np in 1..=40 {
            let fits: Vec<usize> = (1..=40).filter(|&n| layout_ranks(n) == np).collect();
            match neighbors_for(np) {
                Some(n) => assert!(
                    fits.contains(&n),
                    "np {np}: N {n} has {} ranks",
                    layout_ranks(n)
                ),
                None => assert!(fits.is_empty(), "np {np}: {fits:?} fit but none was picked"),
            }
        }
        assert_eq!(neighbors_for(27), Some(6));
        assert_eq!(neighbors_for(1), None);
    }
}
