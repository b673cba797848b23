//! `--backend mpi` outside an MPI build, and `native` outside MPI: one clear line, exit 2.
//! (The MPI build itself is checked under mpirun by `cargo xtask test-mpi`.)

use crate::common::krylov;

fn assert_one_line_exit_2(args: &[&str], needle: &str) {
    let out = krylov(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[cfg(not(feature = "mpi"))]
#[test]
fn backend_mpi_needs_the_feature() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let matrix = dir.path().join("p.mtx");
    let gen = krylov(&[
        "gen",
        "poisson2d",
        "--n",
        "4",
        "--output",
        &matrix.to_string_lossy(),
    ]);
    assert!(gen.status.success());
    let m = matrix.to_string_lossy();
    assert_one_line_exit_2(&["solve", &m, "--backend", "mpi"], "--features mpi");
    assert_one_line_exit_2(
        &[
            "bench",
            "collectives",
            "--op",
            "allreduce",
            "--backend",
            "mpi",
        ],
        "--features mpi",
    );
}

#[test]
fn native_needs_backend_mpi() {
    for backend in ["threads", "sim"] {
        assert_one_line_exit_2(
            &[
                "bench",
                "collectives",
                "--op",
                "allreduce",
                "--algo",
                "native",
                "--backend",
                backend,
            ],
            "--backend mpi",
        );
    }
}
