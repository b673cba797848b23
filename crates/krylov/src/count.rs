//! The one place where solver communication is issued, counted and timed.
//!
//! Every global reduction a solver performs goes through [`SolverComm::allreduce_sum`], and
//! every exchange of SpMV input goes through [`SolverComm::halo`] (called by
//! [`crate::DistCsr::spmv`]), so the counters of the [`crate::SolveReport`] are exact by
//! construction. Counting follows the project's rules: `reductions` are those issued from
//! the start of the iteration loop to its end (final true-residual checks included);
//! reductions before the loop (initial norms, scaling, estimates) go to `setup_reductions`;
//! several quantities in one message count once. `halo_exchanges` counts exchanges of SpMV
//! input, one per message round whatever its depth or number of vectors.

use std::time::Instant;

use castack_collectives::{AllreduceAlgo, Communicator, Op, PersistentCollective};
use serde::{Deserialize, Serialize};

use crate::KrylovError;

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
    /// Everything else.
    pub other: f64,
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

/// Largest number of values reduced in one message that gets a cached persistent plan.
const MAX_PLANNED: usize = 64;

/// A solver's view of its communicator: counted, timed reductions and halo bookkeeping.
pub struct SolverComm<'c, C: Communicator + ?Sized> {
    comm: &'c C,
    algo: AllreduceAlgo,
    plans: Vec<Option<PersistentCollective>>,
    phase: Phase,
    counters: Counters,
    times: TimeBreakdown,
}

impl<'c, C: Communicator + ?Sized> SolverComm<'c, C> {
    /// Wrap `comm`; reductions use `algo`, which must guarantee bit-identical results on
    /// every rank (solvers branch on them).
    pub fn new(comm: &'c C, algo: AllreduceAlgo) -> Result<Self, KrylovError> {
        if !algo.bit_identical() {
            return Err(KrylovError::InvalidConfig(format!(
                "allreduce '{algo}' does not give bit-identical results on all ranks; solvers need one that does"
            )));
        }
        Ok(Self {
            comm,
            algo,
            plans: (0..=MAX_PLANNED).map(|_| None).collect(),
            phase: Phase::Setup,
            counters: Counters::default(),
            times: TimeBreakdown::default(),
        })
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
    pub fn allreduce_sum(&mut self, vals: &mut [f64]) -> Result<(), KrylovError> {
        let t = Instant::now();
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
        self.times.allreduce += t.elapsed().as_secs_f64();
        Ok(())
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

    /// Charge `secs` to `bucket`.
    pub fn charge(&mut self, bucket: Bucket, secs: f64) {
        match bucket {
            Bucket::Spmv => self.times.spmv += secs,
            Bucket::Blas => self.times.blas += secs,
            Bucket::Allreduce => self.times.allreduce += secs,
            Bucket::Halo => self.times.halo += secs,
        }
    }

    /// Run `f` and charge its wall time to `bucket`.
    pub fn timed<R>(&mut self, bucket: Bucket, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.charge(bucket, t.elapsed().as_secs_f64());
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
