//! Inputs that ask for absurd resources (issue 25): each is refused with one line and exit
//! 2 before anything of that size is allocated, against the memory budget (`--mem-budget`,
//! `KRYLOV_MEM_BUDGET`, half the physical memory) or the solver's k limit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Runs `krylov args` in `dir` with `KRYLOV_MEM_BUDGET` set to `budget` (removed for
/// `None`, so the test never inherits one).
fn krylov(dir: &Path, args: &[&str], budget: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_krylov"));
    cmd.args(args).current_dir(dir);
    match budget {
        Some(b) => cmd.env("KRYLOV_MEM_BUDGET", b),
        None => cmd.env_remove("KRYLOV_MEM_BUDGET"),
    };
    cmd.output().expect("the krylov binary runs")
}

/// Exit 2, one line on stderr containing every needle, nothing on stdout, no panic.
fn assert_refused(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "'{needle}' not in: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `krylov gen poisson2d --n 20` in `dir` (400 rows, 1920 entries).
fn p20(dir: &Path) -> PathBuf {
    assert_ok(&krylov(
        dir,
        &["gen", "poisson2d", "--n", "20", "-o", "p20.mtx"],
        None,
    ));
    dir.join("p20.mtx")
}

#[test]
fn solve_k_outside_one_to_k_max_is_refused_before_anything_is_read() {
    let dir = tempfile::tempdir().unwrap();
    p20(dir.path());
    let within = format!("1..={}", castack_krylov::K_MAX);
    // 2^32 aborted allocating the s-step bases; 1000 ran for minutes.
    for k in ["4294967296", "1000", "21", "0"] {
        let start = Instant::now();
        let out = krylov(
            dir.path(),
            &["solve", "p20.mtx", "--method", "cacg", "--k", k],
            None,
        );
        if k == "0" {
            // Refused when the flags are parsed (a whole number, at least 1).
            assert_refused(&out, &["--k", "at least 1"]);
        } else {
            assert_refused(&out, &["--k must be within", &within, k]);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "k = {k}");
    }
    // compare's items go through the same check.
    let out = krylov(
        dir.path(),
        &["compare", "p20.mtx", "--methods", "cg,cacg:1000"],
        None,
    );
    assert_refused(&out, &["--k must be within", &within]);
    // The limit itself solves.
    let k = castack_krylov::K_MAX.to_string();
    let out = krylov(
        dir.path(),
        &["solve", "p20.mtx", "--method", "cacg", "--k", &k, "--json"],
        None,
    );
    assert_ok(&out);
}

/// The 79-byte file: 3e9 rows declared, 3 entries.
const HUGE_ROWS: &str =
    "%%MatrixMarket matrix coordinate real general\n3000000000 3 3\n1 1 1\n2 2 1\n3 3 1\n";

#[test]
fn a_matrix_declaring_3e9_rows_is_refused_without_allocating_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("huge.mtx"), HUGE_ROWS).unwrap();
    let sym = HUGE_ROWS
        .replace("general", "symmetric")
        .replace("3000000000 3 3", "3000000000 3000000000 3");
    std::fs::write(dir.path().join("huge_sym.mtx"), sym).unwrap();
    // Under a 4 GiB budget the reader refuses the 24 GB row pointer at the size line.
    let out = krylov(dir.path(), &["solve", "huge.mtx"], Some("4G"));
    assert_refused(
        &out,
        &[
            "huge.mtx:2: a 3000000000 x 3 matrix of 3 entries needs 22.4 GiB, over the memory budget of 4.0 GiB",
            "--mem-budget",
        ],
    );
    // Within a budget that would hold it, a solve still refuses it before the CSR is
    // built: an SPD matrix has a diagonal entry in every row.
    let out = krylov(
        dir.path(),
        &["solve", "huge_sym.mtx", "--mem-budget", "100G"],
        None,
    );
    assert_refused(
        &out,
        &["declares 3000000000 rows but stores only 3 entries"],
    );
    // With the default budget, whatever this machine's memory: one of the two, quickly.
    let start = Instant::now();
    let out = krylov(dir.path(), &["solve", "huge_sym.mtx"], None);
    assert_refused(&out, &["huge_sym.mtx"]);
    assert!(start.elapsed() < Duration::from_secs(10));
    // plan reads the same way.
    let out = krylov(
        dir.path(),
        &["plan", "huge_sym.mtx", "--ranks", "4", "--fabric", "fx100"],
        None,
    );
    assert_refused(&out, &["huge_sym.mtx"]);
}

#[test]
fn declared_entries_beyond_the_file_size_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("short.mtx"),
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 100000000\n1 1 1\n2 2 1\n3 3 1\n",
    )
    .unwrap();
    let out = krylov(dir.path(), &["solve", "short.mtx"], None);
    assert_refused(
        &out,
        &["short.mtx:2: size line declares 100000000 entries but the"],
    );
}

#[test]
fn the_budget_rejects_a_modest_matrix_when_small_and_accepts_it_by_default() {
    let dir = tempfile::tempdir().unwrap();
    p20(dir.path());
    let solve = ["solve", "p20.mtx", "--json"];
    // The reader's estimate of p20 (triplets and CSR) is about 100 KiB.
    fn with<'a>(solve: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [solve, extra].concat()
    }
    let out = krylov(dir.path(), &with(&solve, &["--mem-budget", "64K"]), None);
    assert_refused(
        &out,
        &[
            "p20.mtx:3: a 400 x 400 matrix of 1160 entries needs",
            "over the memory budget of 64.0 KiB",
        ],
    );
    let out = krylov(dir.path(), &solve, Some("64K"));
    assert_refused(&out, &["over the memory budget of 64.0 KiB"]);
    // The flag wins over the environment; the default accepts it.
    assert_ok(&krylov(
        dir.path(),
        &with(&solve, &["--mem-budget", "1G"]),
        Some("64K"),
    ));
    assert_ok(&krylov(dir.path(), &solve, None));
    // A config file may set it too.
    std::fs::write(dir.path().join("s.toml"), "mem_budget = \"64K\"\n").unwrap();
    let out = krylov(dir.path(), &with(&solve, &["--config", "s.toml"]), None);
    assert_refused(&out, &["over the memory budget of 64.0 KiB"]);
    // Past the reader, the solve's own workspace: cacg's 20-column bases do not fit 200
    // KiB, cg's vectors do.
    let out = krylov(
        dir.path(),
        &with(
            &solve,
            &["--mem-budget", "200K", "--method", "cacg", "--k", "20"],
        ),
        None,
    );
    assert_refused(
        &out,
        &[
            "solving with cacg (k = 20) on 1 rank(s) for 400 rows",
            "200.0 KiB",
        ],
    );
    assert_ok(&krylov(
        dir.path(),
        &with(&solve, &["--mem-budget", "200K"]),
        None,
    ));
    // Bad budgets are bad input.
    let out = krylov(dir.path(), &with(&solve, &["--mem-budget", "0"]), None);
    assert_refused(&out, &["at least 1 byte"]);
    let out = krylov(dir.path(), &solve, Some("lots"));
    assert_refused(&out, &["KRYLOV_MEM_BUDGET: 'lots' is not a size"]);
}

/// A preset's TOML with `from` replaced by `to`, written to `dir/name`.
fn fabric_file(dir: &Path, preset: &str, name: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../configs/fabrics/{preset}.toml")),
    )
    .unwrap();
    assert!(text.contains(from), "{preset} has no `{from}`");
    std::fs::write(dir.join(name), text.replace(from, to)).unwrap();
    name.to_owned()
}

#[test]
fn fabric_tomls_of_absurd_size_are_refused_before_they_are_built() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let torus2xn = fabric_file(
        d,
        "peach2",
        "wide.toml",
        "columns = 8",
        "columns = 100000000",
    );
    let torus = fabric_file(
        d,
        "tofu-fx10",
        "cube.toml",
        "dims = [16, 16, 16]",
        "dims = [1000, 1000, 1000]",
    );
    for (file, nodes) in [(&torus2xn, "200000000"), (&torus, "1000000000")] {
        for args in [
            vec!["bench", "pingpong", "--backend", "sim", "--fabric", file],
            vec![
                "bench",
                "collectives",
                "--op",
                "allreduce",
                "--backend",
                "sim",
                "--fabric",
                file,
                "--sizes",
                "8",
            ],
        ] {
            let start = Instant::now();
            let out = krylov(d, &args, Some("4G"));
            assert_refused(
                &out,
                &[
                    &format!("--fabric {file}: fabric config"),
                    &format!("the fabric of {nodes} nodes needs"),
                    "over the memory budget of 4.0 GiB",
                ],
            );
            assert!(start.elapsed() < Duration::from_secs(10), "{args:?}");
        }
    }
    let p = p20(d);
    let out = krylov(
        d,
        &[
            "solve",
            p.to_str().unwrap(),
            "--backend",
            "sim",
            "--fabric",
            &torus2xn,
        ],
        Some("4G"),
    );
    assert_refused(&out, &["the fabric of 200000000 nodes needs"]);
}

#[test]
fn bench_sizes_times_ranks_times_buffers_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 1 GiB per rank on 2 ranks: buffers, messages in flight and staging, 6 GiB.
    let out = krylov(
        d,
        &["bench", "collectives", "--op", "allreduce", "--sizes", "1G"],
        Some("1G"),
    );
    assert_refused(
        &out,
        &["the buffers of 2 ranks needs 6.0 GiB, over the memory budget of 1.0 GiB"],
    );
    // Gathered operations hold P blocks per rank: 1 MiB blocks on 64 ranks need 12 GiB.
    let out = krylov(
        d,
        &[
            "bench",
            "collectives",
            "--op",
            "allgather",
            "--ranks",
            "64",
            "--sizes",
            "1M",
        ],
        Some("1G"),
    );
    assert_refused(&out, &["the buffers of 64 ranks needs 12.0 GiB"]);
    // Sizes no machine holds, under the default budget.
    let out = krylov(
        d,
        &[
            "bench",
            "collectives",
            "--op",
            "bcast",
            "--sizes",
            "1048576G",
        ],
        None,
    );
    assert_refused(&out, &["the buffers of 2 ranks needs"]);
    let out = krylov(d, &["bench", "pingpong", "--sizes", "1048576G"], None);
    assert_refused(&out, &["the buffers of 2 ranks needs"]);
    // Priced schedules carry no data: the same sizes are fine there.
    let out = krylov(
        d,
        &[
            "bench",
            "collectives",
            "--op",
            "allreduce",
            "--backend",
            "sim",
            "--price-only",
            "--sizes",
            "1G",
            "--json",
        ],
        Some("1G"),
    );
    assert_ok(&out);
    // Small cases run within a small budget.
    let out = krylov(
        d,
        &[
            "bench",
            "collectives",
            "--op",
            "allreduce",
            "--sizes",
            "8",
            "--iters",
            "2",
            "--json",
        ],
        Some("1M"),
    );
    assert_ok(&out);
}

#[test]
fn bench_neighbor_with_a_thousand_neighbours_is_refused_before_any_rank_starts() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = krylov(
        dir.path(),
        &[
            "bench",
            "neighbor",
            "--neighbors",
            "1000",
            "--backend",
            "sim",
        ],
        None,
    );
    assert_refused(
        &out,
        &["the buffers of 1001 ranks exchanging with 1000 neighbours each needs"],
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    let out = krylov(
        dir.path(),
        &["bench", "neighbor", "--neighbors", "6", "--sizes", "1M"],
        Some("64M"),
    );
    assert_refused(
        &out,
        &["the buffers of 27 ranks exchanging with 6 neighbours each needs"],
    );
}

#[test]
fn gen_refuses_grids_over_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let out = krylov(dir.path(), &["gen", "poisson3d", "--n", "100000"], None);
    assert_refused(&out, &["the 3-D Poisson matrix of n = 100000 needs"]);
    let out = krylov(
        dir.path(),
        &["gen", "poisson2d", "--n", "100", "--mem-budget", "64K"],
        None,
    );
    assert_refused(&out, &["over the memory budget of 64.0 KiB"]);
}

#[test]
fn pricing_a_schedule_is_held_to_the_memory_budget() {
    // Issue 47, item 2: pricing alltoall on 2048 ranks under `ulimit -v 2 GiB` aborted
    // ("memory allocation of 163840 bytes failed", exit 134): its P^2 transfers' records
    // were outside the budget. Now one line naming the case and its size, exit 2.
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_krylov");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 2097152 && exec '{bin}' bench collectives --op alltoall --backend sim \
             --price-only --ranks 2048 --sizes 8 --fabric tofu-fx10"
        ))
        .env_remove("KRYLOV_MEM_BUDGET")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("pricing alltoall pairwise on 2048 ranks (4192256 transfers)"),
        "{err}"
    );
    assert!(err.contains("over the memory budget"), "{err}");
    // Refused before the first row, whichever case is over: allgather's ring at 1024
    // ranks (1,047,552 transfers) against 100 MiB, after recursive doubling would fit.
    let args = |budget: &str| {
        vec![
            "bench".to_string(),
            "collectives".into(),
            "--op".into(),
            "allgather".into(),
            "--backend".into(),
            "sim".into(),
            "--price-only".into(),
            "--ranks".into(),
            "64,1024".into(),
            "--sizes".into(),
            "8".into(),
            "--fabric".into(),
            "tofu-fx10".into(),
            "--mem-budget".into(),
            budget.into(),
        ]
    };
    let over = std::process::Command::new(bin)
        .args(args("100M"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&over.stderr);
    assert_eq!(over.status.code(), Some(2), "{err}");
    assert!(over.stdout.is_empty(), "no row before the refusal");
    assert!(
        err.contains("pricing allgather ring on 1024 ranks (1047552 transfers)"),
        "{err}"
    );
    // Within the budget the same cases price.
    let fits = std::process::Command::new(bin)
        .args(args("4G"))
        .output()
        .unwrap();
    assert!(
        fits.status.success(),
        "{}",
        String::from_utf8_lossy(&fits.stderr)
    );
}
