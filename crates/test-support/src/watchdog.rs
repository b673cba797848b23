//! A watchdog for tests whose failure mode is a hang (ranks that never release each other):
//! past the limit the test process exits with status 3 and says what hung, instead of
//! stalling the whole test run.

use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// A universe run longer than this is a hang.
pub const HANG: Duration = Duration::from_secs(60);

/// Run `f`; if it has not returned within [`HANG`], print `what` and exit the process with
/// status 3.
pub fn watchdog<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let (done, finished) = mpsc::channel::<()>();
    let what = what.to_string();
    let dog = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(HANG) {
            let _ = writeln!(std::io::stderr(), "{what}: did not finish within {HANG:?}");
            std::process::exit(3);
        }
    });
    let out = f();
    drop(done);
    let _ = dog.join();
    out
}
