//! Where the CLI's writers put their bytes (DESIGN.md "Errors and input"): a regular file,
//! or a symlink to one, is replaced by rename (the symlink kept); a FIFO or character
//! device is written straight through and stays what it was; a directory, block device or
//! socket is refused with one line and exit 2. Every special file is made in a temp folder
//! (never under /dev).

#![cfg(target_os = "linux")]

use std::fs;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::krylov_in as krylov;

/// A small SPD matrix `p.mtx` in `dir`.
fn matrix(dir: &Path) {
    let out = krylov(&["gen", "poisson2d", "--n", "4", "-o", "p.mtx"], dir);
    assert!(out.status.success(), "{}", stderr(&out));
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One line on stderr naming `needle`, nothing on stdout, no panic.
fn assert_one_line(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(err.trim_end().lines().count(), 1, "stderr: {err}");
    assert!(err.contains(needle), "'{needle}' not in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `mkfifo path` (the command, so the tests need no libc binding).
fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(ok.success(), "mkfifo {}", path.display());
}

/// `mknod path KIND MAJOR MINOR`; false where this user may not make device nodes.
fn mknod(path: &Path, kind: &str, major: u32, minor: u32) -> bool {
    Command::new("mknod")
        .arg(path)
        .args([kind, &major.to_string(), &minor.to_string()])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `krylov args` in `dir` while a reader thread drains the FIFO `fifo`; returns the
/// run and what the reader got. The test holds a read-write descriptor of the FIFO while
/// the reader opens it and the binary runs (on Linux that never blocks), so the reader
/// neither waits for a writer that never comes nor sees end-of-file before the binary is
/// done: a binary that replaced the FIFO instead of writing into it leaves it empty.
fn run_into_fifo(dir: &Path, fifo: &Path, args: &[&str]) -> (Output, String) {
    let holder = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fifo)
        .unwrap();
    // The read end is opened here, while `holder` keeps a writer: opened in the reader
    // thread, it raced with a quick command (`gen`) and `drop(holder)` under load, and an
    // open with no writer left blocks forever.
    let mut rd = fs::File::open(fifo).unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        rd.read_to_string(&mut text).unwrap();
        text
    });
    let out = krylov(args, dir);
    drop(holder);
    (out, reader.join().unwrap())
}

fn is_fifo(p: &Path) -> bool {
    fs::symlink_metadata(p).unwrap().file_type().is_fifo()
}

#[test]
fn fifos_are_written_straight_through_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    let x = d.join("x.fifo");
    mkfifo(&x);
    let (out, text) = run_into_fifo(d, &x, &["solve", "p.mtx", "--output", "x.fifo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.starts_with("%%MatrixMarket matrix array real general"),
        "solution through the FIFO: {text:?}"
    );
    assert_eq!(text.lines().count(), 2 + 16, "{text}");
    assert!(is_fifo(&x), "--output replaced the FIFO");

    let r = d.join("r.fifo");
    mkfifo(&r);
    let (out, text) = run_into_fifo(d, &r, &["solve", "p.mtx", "--report", "r.fifo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&text).expect("a JSON report");
    assert_eq!(report["converged"], true);
    assert!(is_fifo(&r), "--report replaced the FIFO");

    let g = d.join("g.fifo");
    mkfifo(&g);
    let (out, text) = run_into_fifo(d, &g, &["gen", "poisson2d", "--n", "3", "-o", "g.fifo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.starts_with("%%MatrixMarket matrix coordinate real symmetric"));
    assert!(is_fifo(&g), "gen -o replaced the FIFO");

    let s = d.join("plot.fifo");
    mkfifo(&s);
    let args = [
        "bench",
        "collectives",
        "--op",
        "allreduce",
        "--backend",
        "sim",
        "--price-only",
        "--ranks",
        "4",
        "--sizes",
        "8..64",
        "--plot",
        "plot.fifo",
    ];
    let (out, text) = run_into_fifo(d, &s, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("<svg") && text.trim_end().ends_with("</svg>"));
    assert!(is_fifo(&s), "--plot replaced the FIFO");
}

#[test]
fn character_devices_are_written_through_and_a_full_one_fails_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    // A null and a full device node of our own (Linux's mem devices 1:3 and 1:7). Making
    // device nodes needs root (as here and in CI); elsewhere this test checks nothing more
    // than the matrix it wrote, and the FIFO test covers writing straight through.
    if !(mknod(&d.join("null"), "c", 1, 3) && mknod(&d.join("full"), "c", 1, 7)) {
        eprintln!("not allowed to make device nodes: character-device checks skipped");
        return;
    }
    let out = krylov(
        &["solve", "p.mtx", "--output", "null", "--report", "null"],
        d,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = krylov(&["solve", "p.mtx", "--output", "full"], d);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_one_line(&out, "full");
    assert!(stderr(&out).contains("No space left"), "{}", stderr(&out));
    for dev in ["null", "full"] {
        let ft = fs::symlink_metadata(d.join(dev)).unwrap().file_type();
        assert!(ft.is_char_device(), "{dev} was replaced by {ft:?}");
    }
    // Nothing left beside them: writing through makes no temporary file.
    let names: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".krylov-")),
        "{names:?}"
    );
}

#[test]
fn a_symlink_to_a_file_keeps_the_link_and_replaces_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    fs::create_dir(d.join("results")).unwrap();
    fs::write(d.join("results/x.mtx"), "old\n").unwrap();
    std::os::unix::fs::symlink("results/x.mtx", d.join("x.mtx")).unwrap();
    // A chain of two links ends at the same file.
    std::os::unix::fs::symlink("x.mtx", d.join("y.mtx")).unwrap();
    let out = krylov(&["solve", "p.mtx", "--output", "y.mtx"], d);
    assert!(out.status.success(), "{}", stderr(&out));
    for link in ["x.mtx", "y.mtx"] {
        let ft = fs::symlink_metadata(d.join(link)).unwrap().file_type();
        assert!(ft.is_symlink(), "{link} was replaced by {ft:?}");
    }
    let text = fs::read_to_string(d.join("results/x.mtx")).unwrap();
    assert!(text.starts_with("%%MatrixMarket matrix array"), "{text}");
    // No temporary file left beside the link or the target.
    for folder in [d.to_path_buf(), d.join("results")] {
        for e in fs::read_dir(folder).unwrap() {
            let name = e.unwrap().file_name();
            assert!(!name.to_string_lossy().starts_with(".krylov-"), "{name:?}");
        }
    }

    // A dangling link is created as a new path: the link itself becomes the result file.
    std::os::unix::fs::symlink("nowhere/r.json", d.join("r.json")).unwrap();
    let out = krylov(&["solve", "p.mtx", "--report", "r.json"], d);
    assert!(out.status.success(), "{}", stderr(&out));
    let meta = fs::symlink_metadata(d.join("r.json")).unwrap();
    assert!(meta.file_type().is_file());
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(d.join("r.json")).unwrap()).unwrap();
    assert_eq!(report["converged"], true);
}

#[test]
fn directories_sockets_and_block_devices_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    fs::create_dir(d.join("sub")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
    let mut refused = vec![("sub", "a directory"), ("sock", "a socket")];
    // A block device node of our own (loop device 7:0; never opened) where allowed.
    if mknod(&d.join("blk"), "b", 7, 0) {
        refused.push(("blk", "a block device"));
    }
    for (target, what) in refused {
        for flag in ["--output", "--report"] {
            let out = krylov(&["solve", "p.mtx", flag, target], d);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{flag} {target}: {}",
                stderr(&out)
            );
            assert_one_line(&out, what);
            assert!(stderr(&out).contains(target), "{}", stderr(&out));
            assert!(out.stdout.is_empty(), "refused before the solve");
        }
        let out = krylov(&["gen", "poisson2d", "--n", "3", "-o", target], d);
        assert_eq!(
            out.status.code(),
            Some(2),
            "gen -o {target}: {}",
            stderr(&out)
        );
        assert_one_line(&out, what);
        let ft = fs::symlink_metadata(d.join(target)).unwrap().file_type();
        assert!(!ft.is_file(), "{target} was replaced by a regular file");
    }
    // A link to a directory is refused too, and stays a link.
    std::os::unix::fs::symlink("sub", d.join("to-sub")).unwrap();
    let out = krylov(&["solve", "p.mtx", "--output", "to-sub"], d);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_one_line(&out, "a directory");
    assert!(fs::symlink_metadata(d.join("to-sub"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_missing_folder_is_bad_input_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    let out = krylov(&["solve", "p.mtx", "--output", "no/such/x.mtx"], d);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_one_line(&out, "no/such");
}

/// `gen -o NAME.gz` writes gzip, which `solve` reads back (it wrote plain text under a
/// `.gz` name, which the readers then refused).
#[test]
fn gen_writes_gzip_under_a_gz_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = krylov(&["gen", "poisson2d", "--n", "6", "-o", "p.mtx.gz"], d);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = fs::read(d.join("p.mtx.gz")).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "not gzip");
    let out = krylov(&["solve", "p.mtx.gz", "--json"], d);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["n"].as_u64(), report["converged"].as_bool()),
        (Some(36), Some(true))
    );
}

/// The hidden temporary files `krylov` writes through (`.krylov-*.tmp`) in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".krylov-"))
        .collect()
}

#[test]
fn a_signal_during_a_write_leaves_no_temporary_file() {
    // Issue 47, item 7: an interrupted `gen` left its hidden temporary file behind.
    for (sig, name) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // 3.4 M rows, about 0.4 GB of text: seconds of writing, caught while it writes.
        let mut child = Command::new(env!("CARGO_BIN_EXE_krylov"))
            .args(["gen", "poisson3d", "--n", "150", "-o", "big.mtx"])
            .current_dir(d)
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while temporaries(d).is_empty() && start.elapsed().as_secs() < 60 {
            assert!(
                child.try_wait().unwrap().is_none(),
                "{name}: ended before writing"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!temporaries(d).is_empty(), "{name}: no temporary file seen");
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: `kill` on the pid of a child this test owns and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "{name}");
        let status = child.wait().unwrap();
        assert!(!status.success(), "{name}: {status}");
        assert_eq!(temporaries(d), Vec::<String>::new(), "{name}");
        assert!(
            !d.join("big.mtx").exists(),
            "{name}: no half-written result"
        );
    }
}

#[test]
fn an_output_that_cannot_be_created_is_bad_input_named_without_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    matrix(d);
    // Every way a target cannot be created at all is exit 2 (README, docs/guide.md);
    // the line names the path asked for, not the hidden temporary beside it.
    for args in [
        vec!["solve", "p.mtx", "--output", "missing/x.mtx"],
        vec!["solve", "p.mtx", "--report", "missing/r.json"],
        vec!["gen", "poisson2d", "--n", "4", "-o", "missing/p.mtx"],
        vec!["solve", "p.mtx", "--output", "."],
    ] {
        let out = krylov(&args, d);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("cannot write"), "{args:?}: {err}");
        assert!(!err.contains(".krylov-"), "{args:?}: {err}");
    }
}
