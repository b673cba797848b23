//! What the modules share: running a closure on thread ranks under a deadlock watchdog.

use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use castack_collectives::{CommError, ThreadComm, ThreadUniverse};

/// A whole universe run longer than this is a deadlock (a put without its arrival).
pub(crate) const DEADLOCK: Duration = Duration::from_secs(60);

/// Run `f` on `p` thread ranks and return each rank's result, failing the test on any error
/// and ending the process when the ranks deadlock, so a broken schedule fails instead of
/// hanging the suite.
pub(crate) fn run_ranks<R: Send>(
    p: usize,
    f: impl Fn(&ThreadComm) -> Result<R, CommError> + Sync,
) -> Vec<R> {
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(DEADLOCK) {
            // Straight to stderr: the harness's output capture dies with the process.
            let _ = writeln!(
                std::io::stderr(),
                "p={p}: the ranks did not finish within {DEADLOCK:?}: deadlocked schedule?"
            );
            std::process::exit(3);
        }
    });
    let results = ThreadUniverse::new(p).and_then(|u| u.run(f));
    drop(done);
    let _ = watchdog.join();
    match results {
        Ok(per_rank) => per_rank
            .into_iter()
            .enumerate()
            .map(|(r, x)| x.unwrap_or_else(|e| panic!("p={p} rank {r}: {e}")))
            .collect(),
        Err(e) => panic!("p={p}: {e}"),
    }
}
