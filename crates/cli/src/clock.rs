//! The benchmarks' clock: per timed iteration, a backend's modeled clock where it has one
//! (`sim`), else this process's wall clock read from the CPU's time-stamp counter.
//!
//! The wall clock is [`quanta::Clock`]: one read costs about 12 ns on this project's
//! machines (a KVM guest with an invariant TSC), against 43-70 ns for
//! `std::time::Instant::now` (a `clock_gettime` through the vDSO). A timed iteration reads
//! the clock twice, and an 8-byte allreduce between two threads takes a few hundred
//! nanoseconds, so the cheaper read keeps the benchmark's own cost out of the figure (for
//! every backend alike: `--backend mpi` runs the same code). Where the time-stamp counter is
//! not usable, `quanta` falls back to the operating system's monotonic clock.

use castack_collectives::Communicator;

/// Seconds since this clock was made: the communicator's modeled clock where the backend has
/// one, else wall time.
pub(crate) struct BenchClock<'a, C: ?Sized> {
    comm: &'a C,
    wall: quanta::Clock,
    epoch: u64,
}

impl<'a, C: Communicator + ?Sized> BenchClock<'a, C> {
    /// A clock for `comm`'s rank, started now.
    pub(crate) fn new(comm: &'a C) -> Self {
        let wall = quanta::Clock::new();
        let epoch = wall.raw();
        Self { comm, wall, epoch }
    }

    /// The current time in seconds.
    #[inline]
    pub(crate) fn now(&self) -> f64 {
        self.comm
            .model_clock()
            .unwrap_or_else(|| self.wall.delta_as_nanos(self.epoch, self.wall.raw()) as f64 * 1e-9)
    }
}
