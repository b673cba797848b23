//! The one place where solver communication is issued, counted and timed.
//!
//! Every global reduction a solver performs goes through [`SolverComm::allreduce_sum`] or
//! the split-phase pair [`SolverComm::begin`] ... [`SolverComm::finish`] (PETSc's
//! `VecDotBegin` ... `VecDotEnd`: fused and overlapped reductions are one mechanism), and
//! every exchange of SpMV input goes through [`SolverComm::halo`] (called by
//! [`crate::DistCsr::spmv`]), so the counters of the `SolveReport` (castack-krylov) are exact by
//! construction. Counting follows the project's rules: `reductions` are those issued from
//! the start of the iteration loop to its end (final true-residual checks included);
//! reductions before the loop (initial norms, scaling, estimates) go to `setup_reductions`;
//! several quantities in one message count once. `halo_exchanges` counts exchanges of SpMV
//! input, one per message round whatever its depth or number of vectors.
//!
//! A split-phase reduction counts once, in the phase current at [`SolverComm::begin`]. Its
//! time is charged to `allreduce` only where the rank spends it in the reduction: posting
//! in `begin` and waiting in `finish`; work done in between is charged to its own bucket
//! (the CLI contract: an overlapped reduction counts only where a rank waits for it).
//!
//! # Measured or modeled time
//!
//! Every time charged here is a difference of two readings of [`SolverComm::now`], the ONE
//! clock of a solve: the communicator's modeled clock where it has one
//! (`Communicator::model_clock`, the `sim` backend), else host time since the `SolverComm`
//! was made. Each reading first drains the [`WorkMeter`] ([`crate::device::work`]: bytes,
//! flops, launches and host-device copies of every device operation [`crate::Ops`] ran since
//! the last reading) into
//! `Communicator::model_compute`, which advances a modeled clock by the fabric's device model
//! and does nothing on measured backends. So on `sim` a bucket receives the modeled compute
//! of the kernels run inside its interval, `halo` the clock advance across an exchange and
//! `allreduce` the advance across a reduction (for a split-phase one: in `begin` and in the
//! wait of `finish`, where the priced completion lies beyond the rank's clock); work run
//! outside any interval lands in the solve's `other`. The solvers need no per-backend code.

use std::time::Instant;

use castack_collectives::{AllreduceAlgo, Communicator, Op, PersistentCollective};
use serde::{Deserialize, Serialize};

use crate::device::work::WorkMeter;
use crate::LinalgError;

/// Where time goes, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBreakdown {
    /// Local sparse matrix-vector products.
    pub spmv: f64,
    /// Local vector operations (dots, updates).
    pub blas: f64,
    /// Global reductions (time a rank waits in them).
    pub allreduce: f64,
    /// Exchanges of SpMV input (halo or allgather).
    pub halo: f64,
    /// Host-device copies (halo staging and reduction results of a GPU rank; 0 where
    /// vectors live in host memory).
    #[serde(default)]
    pub transfer: f64,
    /// Local work of the preconditioner `M^-1` of `bjacobi_ic0`, `chebyshev` or an
    /// embedder's (`castack_krylov::Preconditioner`): its triangular solves, SpMVs and vector
    /// operations. Its exchanges and reductions stay in `halo` and `allreduce` (and in the
    /// counters): the buckets add up. 0 without such a preconditioner.
    #[serde(default)]
    pub precond: f64,
    /// Everything else.
    pub other: f64,
}

impl TimeBreakdown {
    /// The sum of every bucket but `other`.
    pub fn accounted(&self) -> f64 {
        self.spmv + self.blas + self.allreduce + self.halo + self.transfer + self.precond
    }

    /// `self + o`, bucket by bucket.
    pub fn plus(&self, o: &TimeBreakdown) -> TimeBreakdown {
        TimeBreakdown {
            spmv: self.spmv + o.spmv,
            blas: self.blas + o.blas,
            allreduce: self.allreduce + o.allreduce,
            halo: self.halo + o.halo,
            transfer: self.transfer + o.transfer,
            precond: self.precond + o.precond,
            other: self.other + o.other,
        }
    }
}

/// What a time measurement is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// Local SpMV.
    Spmv,
    /// Local vector operations.
    Blas,
    /// Global reductions.
    Allreduce,
    /// Halo exchange.
    Halo,
    /// Host-device copies.
    Transfer,
    /// Local work of the preconditioner (see [`TimeBreakdown::precond`]).
    Precond,
}

/// Whether communication is counted as setup or as part of the iteration loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the iteration loop.
    Setup,
    /// Inside the iteration loop (final checks included).
    Loop,
}

/// Communication counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Global reductions issued in the loop.
    pub reductions: u64,
    /// Global reductions issued in setup.
    pub setup_reductions: u64,
    /// SpMV-input exchanges in the loop.
    pub halo_exchanges: u64,
    /// SpMV-input exchanges in setup.
    pub setup_halo_exchanges: u64,
    /// Values this rank contributed to reductions (loop and setup).
    pub reduced_values: u64,
    /// Values this rank sent in SpMV-input exchanges (loop and setup).
    pub halo_values_sent: u64,
}

/// Largest number of values reduced in one message that gets a cached persistent plan
/// (CBCGR at k = 12 fuses 248 values; longer reductions happen only in setup).
const MAX_PLANNED: usize = 256;

/// A split-phase reduction in flight, from [`SolverComm::begin`]; hand it to
/// [`SolverComm::finish`]. Dropping it unfinished is a bug (debug builds assert it).
#[must_use = "a pending reduction must be finished"]
#[derive(Debug)]
pub struct Pending {
    len: usize,
    /// The lane (of the split-phase plans of this length) it is in flight on.
    lane: usize,
    done: bool,
}

impl Pending {
    /// Number of values being reduced.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no values are being reduced.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        debug_assert!(
            self.done || std::thread::panicking(),
            "a pending reduction of {} values was dropped without finish",
            self.len
        );
    }
}

/// A persistent plan for split-phase reductions of one length and the buffer it works in
/// (which must stay untouched between start and finish).
struct SplitSlot {
    plan: PersistentCollective,
    buf: Vec<f64>,
}

/// A solver's view of its communicator: counted, timed reductions and halo bookkeeping.
pub struct SolverComm<'c, C: Communicator + ?Sized> {
    comm: &'c C,
    algo: AllreduceAlgo,
    plans: Vec<Option<PersistentCollective>>,
    /// Split-phase plans, by length, each length's lanes (grown on demand by
    /// `prepare_split` and `prepare_split_lanes`): one reduction in flight per lane.
    split: Vec<Vec<SplitSlot>>,
    phase: Phase,
    counters: Counters,
    times: TimeBreakdown,
    /// Work of the device operations since the last clock reading (see the module doc).
    meter: WorkMeter,
    /// Origin of measured time.
    origin: Instant,
    /// Where local work (SpMV, vector operations) is charged while it is set
    /// ([`SolverComm::bucket`]): [`Bucket::Precond`] inside a preconditioner application,
    /// [`Bucket::Spmv`] inside an embedder's operator.
    local: Option<Bucket>,
}

impl<'c, C: Communicator + ?Sized> SolverComm<'c, C> {
    /// Wrap `comm`; reductions use `algo`, which must guarantee bit-identical results on
    /// every rank (solvers branch on them).
    pub fn new(comm: &'c C, algo: AllreduceAlgo) -> Result<Self, LinalgError> {
        if !algo.bit_identical() {
            return Err(LinalgError::InvalidConfig(format!(
                "allreduce '{algo}' does not give bit-identical results on all ranks; solvers need one that does"
            )));
        }
        Ok(Self {
            comm,
            algo,
            plans: (0..=MAX_PLANNED).map(|_| None).collect(),
            split: Vec::new(),
            phase: Phase::Setup,
            counters: Counters::default(),
            times: TimeBreakdown::default(),
            meter: WorkMeter::default(),
            origin: Instant::now(),
            local: None,
        })
    }

    /// The meter whose work every clock reading charges to the communicator's model
    /// (module doc); [`crate::Ops`] adds every device operation's work to it.
    pub fn meter(&self) -> &WorkMeter {
        &self.meter
    }

    /// Whether times are modeled (the communicator has a modeled clock) rather than
    /// measured.
    pub fn modeled(&self) -> bool {
        self.comm.model_clock().is_some()
    }

    /// The clock of the solve, in seconds from an arbitrary origin: charge the kernels'
    /// work since the last reading to the communicator's model, then read its modeled clock,
    /// or host time where it has none. Does not allocate.
    pub fn now(&self) -> f64 {
        let w = self.meter.take();
        if w != castack_collectives::ComputeWork::default() {
            self.comm.model_compute(w);
        }
        self.comm
            .model_clock()
            .unwrap_or_else(|| self.origin.elapsed().as_secs_f64())
    }

    /// Seconds from the reading `t` of [`SolverComm::now`] to now.
    pub fn since(&self, t: f64) -> f64 {
        self.now() - t
    }

    /// The underlying communicator.
    pub fn comm(&self) -> &'c C {
        self.comm
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// Switch between setup and loop counting.
    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
    }

    /// Build the persistent plan for reductions of `len` values now (outside the loop), so
    /// the loop never allocates.
    pub fn prepare(&mut self, len: usize) {
        if len <= MAX_PLANNED && self.plans[len].is_none() {
            self.plans[len] = Some(PersistentCollective::allreduce_f64(
                self.comm,
                len,
                Op::Sum,
                self.algo,
            ));
        }
    }

    /// Sum `vals` over all ranks in ONE global reduction (counted once, whatever `len`).
    pub fn allreduce_sum(&mut self, vals: &mut [f64]) -> Result<(), LinalgError> {
        let t = self.now();
        self.prepare(vals.len());
        match self.plans.get_mut(vals.len()).and_then(Option::as_mut) {
            Some(plan) => plan.execute_f64(self.comm, vals)?,
            None => {
                let mut plan =
                    PersistentCollective::allreduce_f64(self.comm, vals.len(), Op::Sum, self.algo);
                plan.execute_f64(self.comm, vals)?;
            }
        }
        match self.phase {
            Phase::Setup => self.counters.setup_reductions += 1,
            Phase::Loop => self.counters.reductions += 1,
        }
        self.counters.reduced_values += vals.len() as u64;
        self.times.allreduce += self.since(t);
        Ok(())
    }

    /// Build the persistent plan and buffer for split-phase reductions of `len` values now
    /// (outside the loop), so [`SolverComm::begin`] and [`SolverComm::finish`] never
    /// allocate.
    pub fn prepare_split(&mut self, len: usize) {
        self.prepare_split_lanes(len, 1);
    }

    /// [`SolverComm::prepare_split`] for up to `lanes` split-phase reductions of `len`
    /// values in flight at once (a deep pipeline: one begun per iteration, each finished
    /// several iterations later), so that [`SolverComm::begin`] finds an idle lane without
    /// allocating. Lanes already built are kept.
    pub fn prepare_split_lanes(&mut self, len: usize, lanes: usize) {
        if self.split.len() <= len {
            self.split.resize_with(len + 1, Vec::new);
        }
        while self.split[len].len() < lanes {
            self.split[len].push(SplitSlot {
                plan: PersistentCollective::allreduce_f64(self.comm, len, Op::Sum, self.algo),
                buf: vec![0.0; len],
            });
        }
    }

    /// Start summing `vals` over all ranks: ONE global reduction, counted now (in the
    /// current phase), that progresses while the caller computes. The values are copied;
    /// the sums come from [`SolverComm::finish`]. As many split-phase reductions of one
    /// length may be pending at a time as it has lanes ([`SolverComm::prepare_split_lanes`];
    /// one unless prepared for more), each on the first idle lane, finished in any order;
    /// blocking reductions may run in between. Every rank begins them in the same order,
    /// so they draw the same lanes and tags everywhere.
    ///
    /// # Errors
    /// Communication errors (then nothing is pending); a reduction of a length whose every
    /// lane is pending.
    pub fn begin(&mut self, vals: &[f64]) -> Result<Pending, LinalgError> {
        let t = self.now();
        let len = vals.len();
        self.prepare_split(len);
        let comm = self.comm;
        let lanes = &mut self.split[len];
        let Some(lane) = lanes.iter().position(|s| !s.plan.in_flight()) else {
            return Err(LinalgError::InvalidConfig(format!(
                "{} split-phase reduction(s) of {len} values already pending (every prepared lane)",
                lanes.len()
            )));
        };
        let slot = &mut lanes[lane];
        slot.buf.copy_from_slice(vals);
        slot.plan.start_f64(comm, &mut slot.buf)?;
        match self.phase {
            Phase::Setup => self.counters.setup_reductions += 1,
            Phase::Loop => self.counters.reductions += 1,
        }
        self.counters.reduced_values += len as u64;
        self.times.allreduce += self.since(t);
        Ok(Pending {
            len,
            lane,
            done: false,
        })
    }

    /// Wait for the reduction started by [`SolverComm::begin`] and write the sums to
    /// `out`. Only the wait is charged to `allreduce`.
    ///
    /// # Errors
    /// Communication errors (the reduction is over either way).
    ///
    /// # Panics
    /// If `out.len()` differs from the number of values begun (a caller bug).
    #[track_caller]
    pub fn finish(&mut self, mut pending: Pending, out: &mut [f64]) -> Result<(), LinalgError> {
        pending.done = true;
        assert_eq!(
            out.len(),
            pending.len,
            "finish: output length differs from the values begun"
        );
        let t = self.now();
        let comm = self.comm;
        let slot = self.split[pending.len]
            .get_mut(pending.lane)
            .expect("a pending reduction has a lane");
        let result = slot.plan.finish_f64(comm, &mut slot.buf);
        out.copy_from_slice(&slot.buf);
        self.times.allreduce += self.since(t);
        result?;
        Ok(())
    }

    /// Record one exchange of SpMV input that sent `values_sent` values and began at the
    /// reading `t` of [`SolverComm::now`] (it ends now).
    pub fn halo_since(&mut self, values_sent: usize, t: f64) {
        let secs = self.since(t);
        self.halo(values_sent, secs);
    }

    /// Record one exchange of SpMV input that sent `values_sent` values and took `secs`.
    pub fn halo(&mut self, values_sent: usize, secs: f64) {
        match self.phase {
            Phase::Setup => self.counters.setup_halo_exchanges += 1,
            Phase::Loop => self.counters.halo_exchanges += 1,
        }
        self.counters.halo_values_sent += values_sent as u64;
        self.times.halo += secs;
    }

    /// Mark the start (`true`) or end of a preconditioner application: in between, local
    /// work is charged to [`Bucket::Precond`].
    pub fn set_in_precond(&mut self, on: bool) {
        self.local = on.then_some(Bucket::Precond);
    }

    /// The bucket local work is charged to, if set ([`SolverComm::set_local_bucket`]).
    pub fn local_bucket(&self) -> Option<Bucket> {
        self.local
    }

    /// Charge local work to `bucket` until set back (`None`); returns the setting before,
    /// for nesting (an operator applied inside a preconditioner stays `precond`).
    pub fn set_local_bucket(&mut self, bucket: Option<Bucket>) -> Option<Bucket> {
        std::mem::replace(&mut self.local, bucket)
    }

    /// The bucket local work of kind `bucket` is charged to now: the set local bucket
    /// ([`SolverComm::set_local_bucket`]) for SpMV and vector work, else `bucket`.
    pub fn bucket(&self, bucket: Bucket) -> Bucket {
        match (bucket, self.local) {
            (Bucket::Spmv | Bucket::Blas, Some(local)) => local,
            (b, _) => b,
        }
    }

    /// Charge `secs` to `bucket` (remapped by [`SolverComm::bucket`]).
    pub fn charge(&mut self, bucket: Bucket, secs: f64) {
        match self.bucket(bucket) {
            Bucket::Spmv => self.times.spmv += secs,
            Bucket::Blas => self.times.blas += secs,
            Bucket::Allreduce => self.times.allreduce += secs,
            Bucket::Halo => self.times.halo += secs,
            Bucket::Transfer => self.times.transfer += secs,
            Bucket::Precond => self.times.precond += secs,
        }
    }

    /// Charge the time from the reading `t` of [`SolverComm::now`] to now to `bucket`.
    pub fn charge_since(&mut self, bucket: Bucket, t: f64) {
        let secs = self.since(t);
        self.charge(bucket, secs);
    }

    /// Run `f` and charge its time (measured, or the modeled work of the kernels it runs)
    /// to `bucket`.
    pub fn timed<R>(&mut self, bucket: Bucket, f: impl FnOnce() -> R) -> R {
        let t = self.now();
        let r = f();
        self.charge_since(bucket, t);
        r
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The time breakdown so far (`other` is left for the caller, who knows the total).
    pub fn times(&self) -> TimeBreakdown {
        self.times
    }

    /// Reset the time breakdown (after setup, so the solve's breakdown covers the solve).
    pub fn reset_times(&mut self) {
        self.times = TimeBreakdown::default();
    }
}
