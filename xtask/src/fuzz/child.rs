//! Running one `krylov` case: in its own folder and process group, stdin closed, stdout and
//! stderr into files, under an address-space limit (an allocation beyond it fails, which Rust
//! turns into an abort) and a file-size limit (so a runaway writer cannot fill the disk), and
//! killed with its whole process group when it has not exited within the hang limit.

use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The limits every case runs under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `RLIMIT_AS` in bytes.
    pub(crate) memory: u64,
    /// `RLIMIT_FSIZE` in bytes.
    pub(crate) file: u64,
    /// No exit within this time is a hang.
    pub(crate) hang: Duration,
}

/// How a case's process ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Ending {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// It ran past the hang limit and was killed, having used this much CPU time (seconds,
    /// all threads; `None` where /proc does not say): near the limit times its threads means
    /// busy, near zero means blocked or starved by a loaded machine.
    TimedOut(Option<f64>),
}

/// A finished case: how it ended, its output and its wall time.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) ending: Ending,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) seconds: f64,
}

/// A FIFO in the case folder and the bytes a feeder thread writes into it once the case opens
/// it for reading.
pub(crate) struct Feed {
    pub(crate) path: PathBuf,
    pub(crate) bytes: Vec<u8>,
}

/// Runs `program args` in `dir` under `limits`; stdout and stderr go to `dir/stdout.txt`
/// and `dir/stderr.txt`, or with `stdout_closed` stdout is a pipe whose reader is closed as
/// soon as the case starts (what it prints is lost, as under `| head -0`).
pub(crate) fn run(
    program: &Path,
    args: &[String],
    dir: &Path,
    limits: Limits,
    feeds: Vec<Feed>,
    stdout_closed: bool,
) -> Result<Finished> {
    let out_path = dir.join("stdout.txt");
    let err_path = dir.join("stderr.txt");
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        // A panic's backtrace names the workspace function that reached it (the verdict's
        // signature), which a panic inside the standard library does not.
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE")
        // `krylov plan` keeps its probes under the case's folder, not the user's home.
        .env("XDG_CACHE_HOME", dir.join("xdg-cache"))
        .stdin(Stdio::null())
        .stdout(if stdout_closed {
            File::create(&out_path).context("creating stdout.txt")?;
            Stdio::piped()
        } else {
            File::create(&out_path)
                .context("creating stdout.txt")?
                .into()
        })
        .stderr(File::create(&err_path).context("creating stderr.txt")?)
        .process_group(0);
    let (memory, file) = (limits.memory, limits.file);
    // SAFETY: between fork and exec the closure only calls setrlimit, which is
    // async-signal-safe, on values captured by copy; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            set_limit(libc::RLIMIT_AS, memory)?;
            set_limit(libc::RLIMIT_FSIZE, file)?;
            set_limit(libc::RLIMIT_CORE, 0)
        });
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start {}", program.display()))?;
    // The reader of a closed stdout goes before the case can print.
    drop(child.stdout.take());
    let pid = child.id() as libc::pid_t;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeders: Vec<_> = feeds
        .into_iter()
        .map(|feed| {
            let done = done.clone();
            std::thread::spawn(move || feed_fifo(&feed, &done))
        })
        .collect();
    let mut pause = Duration::from_millis(2);
    let ending = loop {
        if let Some(status) = child.try_wait().context("waiting for a case")? {
            break match (status.code(), status.signal()) {
                (Some(code), _) => Ending::Exited(code),
                (None, Some(signal)) => Ending::Signaled(signal),
                (None, None) => Ending::Signaled(0),
            };
        }
        if start.elapsed() >= limits.hang {
            let cpu = cpu_seconds(pid);
            kill_group(pid);
            child.wait().context("reaping a killed case")?;
            break Ending::TimedOut(cpu);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    let seconds = start.elapsed().as_secs_f64();
    // Anything the case left behind in its group goes too (krylov starts no processes today).
    kill_group(pid);
    done.store(true, std::sync::atomic::Ordering::Release);
    for f in feeders {
        let _ = f.join();
    }
    Ok(Finished {
        ending,
        stdout: std::fs::read(&out_path).context("reading stdout.txt")?,
        stderr: std::fs::read(&err_path).context("reading stderr.txt")?,
        seconds,
    })
}

/// User plus system CPU time of process `pid` (all its threads) from `/proc/PID/stat`.
fn cpu_seconds(pid: libc::pid_t) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

fn set_limit(resource: libc::__rlimit_resource_t, bytes: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: a plain system call on a valid pointer to a local.
    if unsafe { libc::setrlimit(resource, &lim) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn kill_group(pid: libc::pid_t) {
    // SAFETY: signals the process group this module created (pgid = the child's pid);
    // ESRCH (already gone) is fine.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// Makes the case folder's own `dev-null` (1, 3) and `dev-full` (1, 7) character devices,
/// the targets of the cases' device outputs. Where device nodes cannot be made (not root),
/// those outputs become ordinary new files, which is harmless.
pub(crate) fn make_devices(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    for (name, minor) in [("dev-null", 3), ("dev-full", 7)] {
        let Ok(c) = std::ffi::CString::new(dir.join(name).as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: a valid NUL-terminated path; mknod only creates the node.
        unsafe {
            libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, minor));
        }
    }
}

/// Makes a FIFO at `path`.
pub(crate) fn make_fifo(path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).context("FIFO path")?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("mkfifo {}", path.display()));
    }
    Ok(())
}

/// Writes `feed.bytes` into the FIFO once a reader has opened it; gives up when the case has
/// ended (`done`) without opening it. Write errors (the reader went away) end the feed.
fn feed_fifo(feed: &Feed, done: &std::sync::atomic::AtomicBool) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    loop {
        // Non-blocking open for writing fails (ENXIO) until a reader has the FIFO open.
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&feed.path);
        match opened {
            Ok(file) => {
                // Back to blocking writes: the reader takes the bytes at its own pace.
                let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
                // SAFETY: fcntl on a descriptor this function owns.
                unsafe {
                    let flags = libc::fcntl(fd, libc::F_GETFL);
                    libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
                }
                let mut file = file;
                let _ = file.write_all(&feed.bytes);
                return;
            }
            Err(_) if done.load(std::sync::atomic::Ordering::Acquire) => return,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(hang_ms: u64) -> Limits {
        Limits {
            memory: 1 << 30,
            file: 1 << 20,
            hang: Duration::from_millis(hang_ms),
        }
    }

    fn sh(script: &str, hang_ms: u64, feeds: Vec<Feed>, dir: &Path) -> Finished {
        let args = vec!["-c".to_string(), script.to_string()];
        run(
            Path::new("/bin/sh"),
            &args,
            dir,
            limits(hang_ms),
            feeds,
            false,
        )
        .unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-fuzz-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn exit_codes_signals_and_output() {
        let dir = scratch("exit");
        let f = sh("echo out; echo err >&2; exit 3", 10_000, vec![], &dir);
        assert_eq!(f.ending, Ending::Exited(3));
        assert_eq!(
            (&f.stdout[..], &f.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
        let f = sh("kill -SEGV $$", 10_000, vec![], &dir);
        assert_eq!(f.ending, Ending::Signaled(libc::SIGSEGV));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_hang_is_killed_with_its_group() {
        let dir = scratch("hang");
        // A grandchild in the same group would keep the pipe-less case alive: both go.
        let f = sh("sleep 30 & sleep 30", 300, vec![], &dir);
        let Ending::TimedOut(cpu) = f.ending else {
            panic!("{:?}", f.ending)
        };
        assert!(
            cpu.is_some_and(|c| c < 0.25),
            "a sleeping case used {cpu:?} s of CPU"
        );
        assert!(f.seconds < 10.0, "{}", f.seconds);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_busy_hang_reports_its_cpu_time() {
        let dir = scratch("busy");
        let f = sh("while :; do :; done", 1500, vec![], &dir);
        let Ending::TimedOut(cpu) = f.ending else {
            panic!("{:?}", f.ending)
        };
        // A loaded machine may give the loop little of its 1.5 s, never none.
        assert!(cpu.is_some_and(|c| c > 0.0 && c <= 1.6), "{cpu:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn limits_apply_to_the_child() {
        let dir = scratch("limits");
        let f = sh("ulimit -v; ulimit -f", 10_000, vec![], &dir);
        let text = String::from_utf8(f.stdout).unwrap();
        // ulimit -v is in KiB, ulimit -f in 512-byte blocks.
        assert_eq!(
            text,
            format!("{}\n{}\n", (1u64 << 30) / 1024, (1u64 << 20) / 512)
        );
        let f = sh("head -c 2000000 /dev/zero > big", 10_000, vec![], &dir);
        assert_ne!(f.ending, Ending::Exited(0), "file-size limit not applied");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fifo_feeds_reach_the_reader() {
        let dir = scratch("fifo");
        make_fifo(&dir.join("in")).unwrap();
        let feed = Feed {
            path: dir.join("in"),
            bytes: b"through the fifo\n".to_vec(),
        };
        let f = sh("cat in", 10_000, vec![feed], &dir);
        assert_eq!(f.ending, Ending::Exited(0));
        assert_eq!(f.stdout, b"through the fifo\n");
        // A case that never opens its FIFO still ends, and so does the feeder.
        make_fifo(&dir.join("unused")).unwrap();
        let feed = Feed {
            path: dir.join("unused"),
            bytes: vec![1; 10],
        };
        assert_eq!(
            sh("true", 10_000, vec![feed], &dir).ending,
            Ending::Exited(0)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
