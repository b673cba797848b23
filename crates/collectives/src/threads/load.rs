//! Whether the machine is oversubscribed, as a waiting rank's own thread sees it: the
//! scheduler preempted the thread (an involuntary context switch) within the last
//! [`WINDOW`].
//!
//! A rank that waits for a message spins while every computing thread has a core of its
//! own (`WaitPolicy::DEDICATED`), since its peer is then running and the message comes
//! within microseconds. Another busy process breaks that assumption: with more runnable
//! threads than cores the peer is the one descheduled as often as not, and a rank that
//! spins (or yields, which hands its core to whatever else runs for a whole time slice)
//! keeps it from running: two thread ranks with one busy process beside them on two cores
//! ran a CG iteration 8 to 16 times slower than one rank did. Preemptions of the rank's own
//! thread are the cheapest sign of it that needs no other process's cooperation: on an
//! idle machine they are rare (kernel threads, a few a second), on a loaded one every
//! thread is preempted once per time slice. A wait consults it only after a short spin
//! (`WaitPolicy::check`), so a message that comes within that costs one check of a counter
//! at most.
//!
//! Why our own: the count is one `getrusage(RUSAGE_THREAD)` call (Linux); no crate offers
//! the thread's involuntary switches as a load signal. Elsewhere nothing is sensed, and
//! waits behave as on an idle machine.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long a preemption of the rank's thread counts as a sign of load: longer than a
/// scheduler time slice (a few milliseconds), so a loaded machine stays "loaded" between
/// preemptions, and short enough that an idle machine's rare ones fade at once.
pub(super) const WINDOW: Duration = Duration::from_millis(50);

/// A rank's view of the machine's load (its thread's preemptions).
#[derive(Debug, Default)]
pub(super) struct LoadSense {
    /// The thread's involuntary context switches at the last reading.
    switches: Cell<Option<i64>>,
    /// When a reading last found them grown.
    preempted: Cell<Option<Instant>>,
}

impl LoadSense {
    /// Whether the thread was preempted within the last [`WINDOW`] (as far as the readings
    /// show: each call reads the count once).
    pub(super) fn loaded(&self) -> bool {
        let Some(now) = involuntary_switches() else {
            return false;
        };
        if self
            .switches
            .replace(Some(now))
            .is_some_and(|before| now > before)
        {
            self.preempted.set(Some(Instant::now()));
        }
        self.preempted.get().is_some_and(|t| t.elapsed() < WINDOW)
    }
}

/// The calling thread's involuntary context switches so far.
#[cfg(target_os = "linux")]
fn involuntary_switches() -> Option<i64> {
    // SAFETY: `getrusage` writes the struct it is given and nothing else; a zeroed
    // `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD asks for the calling thread's counts.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } == 0;
    ok.then_some(usage.ru_nivcsw as i64)
}

/// Not sensed off Linux: waits behave as on an idle machine.
#[cfg(not(target_os = "linux"))]
fn involuntary_switches() -> Option<i64> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Pin the calling thread to the first CPU it may run on; false where it cannot.
    fn pin_to_first_cpu() -> bool {
        // SAFETY: plain C structs and calls on the calling thread's own affinity.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
                return false;
            }
            let Some(cpu) = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set))
            else {
                return false;
            };
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) == 0
        }
    }

    /// A thread sharing its core with a busy thread is preempted within a few time slices
    /// and says so; the verdict fades after the window.
    #[test]
    fn a_thread_sharing_its_core_with_a_busy_one_sees_load() {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = std::thread::spawn(move || {
            let stop2 = Arc::clone(&stop);
            let busy = std::thread::spawn(move || {
                let pinned = pin_to_first_cpu();
                while pinned && !stop2.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                pinned
            });
            let pinned = pin_to_first_cpu();
            let sense = LoadSense::default();
            sense.loaded();
            let start = Instant::now();
            let mut seen = false;
            while pinned && !seen && start.elapsed() < Duration::from_secs(5) {
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(1) {
                    std::hint::spin_loop();
                }
                seen = sense.loaded();
            }
            stop.store(true, Ordering::Relaxed);
            let busy_pinned = busy.join().expect("busy thread");
            // Stale: a preemption older than the window no longer counts.
            sense.preempted.set(Instant::now().checked_sub(WINDOW * 2));
            sense.switches.set(Some(i64::MAX));
            let faded = !sense.loaded();
            (pinned && busy_pinned, seen, faded)
        });
        let (pinned, seen, faded) = handle.join().expect("test thread");
        if !pinned {
            eprintln!("cannot pin threads here: the preemption check was not run");
            return;
        }
        assert!(
            seen,
            "no preemption seen in 5 s of sharing one core with a busy thread"
        );
        assert!(faded);
    }
}
