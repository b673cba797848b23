//! The `sim` backend: data moves exactly as on [`crate::threads`] (so results are checkable),
//! while every rank carries a virtual clock priced by `castack-fabric-sim` (DESIGN.md "Core
//! ideas" 1).
//!
//! # Modeled time
//!
//! - **Collectives** (and neighbour exchanges): the schedule interpreter calls
//!   [`Communicator::model_enter`] before a rank's first put and
//!   [`Communicator::model_leave`] after its last arrival. Entering deposits the rank's part
//!   of the schedule (as data-free [`PriceStep`]s) and its clock in a table keyed by the
//!   call's tag; when the last rank has entered, the WHOLE schedule is priced once by
//!   [`Fabric::price_schedule`] from every rank's entry clock (routes, PIO/DMA, chaining,
//!   contention between the call's transfers), and each rank's completion is stored.
//!   Leaving waits for that price and sets `clock = max(clock, completion)`. A nonblocking
//!   call is entered when started and left when finished, so compute charged in between
//!   overlaps it.
//! - **Calls in flight together** share the fabric (DESIGN.md: a pipelined CG allreduce
//!   shares links with the halo exchange). The table keeps every priced call until every
//!   rank has left it. When a call B becomes fully entered, it is priced in ONE run of
//!   [`Fabric::price_concurrent`] together with the kept calls that overlap it in modeled
//!   time: those entered before B by every rank (program order) whose latest completion is
//!   after B's earliest entry, closed under overlap (a call overlapping a member joins, and
//!   the earliest entry of the set moves to its own), each from its own entry clocks, in
//!   program order. B's completions are those of the joint run. A kept call that every rank
//!   was still inside when it entered B has been read by no rank, so its completions are
//!   updated: each becomes the later of its previous value and the joint run's (later only:
//!   a partner it was priced with earlier may have been dropped since). A call some rank
//!   left before entering B is background: it loads the links of the joint run but keeps
//!   the completions already published (that rank has used its time). A call alone in
//!   modeled time is priced by [`Fabric::price_schedule`] exactly as before.
//! - **Determinism of the overlap rule.** Leaving a call waits not only for its price but
//!   also until every call this rank entered while inside it (and is still inside) is
//!   priced, i.e. entered by every rank. Hence no rank reads a completion that a later call
//!   could still update, and which calls are kept, updatable or background when B is
//!   priced depends only on program order: a call is still kept iff some rank entered B
//!   before leaving it, updatable iff every rank did. Calls are priced in program order
//!   (every call is entered by every rank in the same order, as its tag is drawn in that
//!   order), and the overlap test reads only modeled clocks, so a run repeats to the bit.
//!   The price of that rule: a rank that enters B, then finishes A, then does something
//!   another rank needs before entering B (a point-to-point message) would wait forever;
//!   the solvers and exchanges nest or chain their calls, so they never do. Such a program
//!   gets [`CommError::Deadlock`] on both ranks rather than hanging: that wait counts for
//!   the threads machinery's deadlock check as a model wait, woken by every pricing.
//! - **Approximation.** Calls already left by every rank are dropped even if their
//!   transfers would still be in flight in modeled time when a later call starts (a rank
//!   that leaves early does not wait for the others' parts); each joint run restarts every
//!   member from its entry clocks, so a call's share of the links is recomputed with the
//!   partners still kept, and the DMA devices of the k-th call of a run start their
//!   round-robin at device k (module docs of `castack_fabric_sim::schedule`).
//! - **Point-to-point** messages outside schedules are priced one by one with the two-sided
//!   protocol over puts ([`Fabric::price_two_sided`]): the sender's post time travels with
//!   the message, the receive's post time is the receiver's clock at
//!   [`Communicator::irecv`], and the receive completes at `max(receiver clock, arrival)`.
//!   Sends are buffered (as on every backend): they do not move the sender's clock.
//! - **Compute** between calls advances the clock by the fabric's device model
//!   ([`Communicator::model_compute`], [`Fabric::compute_time`]) for the universe's memory
//!   kind (host: the CPU; gpu: the GPU), never by host wall time.
//!
//! Modeled time therefore depends only on each rank's program and the fabric, not on how the
//! host schedules threads: runs repeat to the bit.
//!
//! ```
//! use castack_collectives::sim::{SimOptions, SimUniverse};
//! use castack_collectives::{Collectives, Communicator, ComputeWork};
//! use castack_fabric_sim::Fabric;
//!
//! let universe = SimUniverse::new(4, Fabric::preset("peach2")?, SimOptions::default())?;
//! let out = universe.run(|comm| {
//!     let mut x = [comm.rank() as f64];
//!     comm.model_compute(ComputeWork { bytes: 8_000_000, ..ComputeWork::default() });
//!     comm.allreduce_sum(&mut x)?;
//!     Ok::<_, castack_collectives::CommError>((x[0], comm.model_clock()))
//! })?;
//! for r in out {
//!     let (sum, clock) = r?;
//!     assert_eq!(sum, 6.0);
//!     // 8 MB at the host's modeled bandwidth, then a few microseconds of allreduce.
//!     let t = clock.expect("sim has a clock");
//!     assert!(t > 8e6 / 59.7e9 && t < 8e6 / 59.7e9 + 50e-6);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use castack_fabric_sim::{
    ComputeCost, Endpoint, Fabric, FabricError, LocalWork as PriceWork, Mechanism, MemoryKind,
    Placement, PricePut, PriceSchedule, PriceStep, SimTime, TwoSidedMessage,
};

use crate::comm::{Communicator, ComputeWork, RecvRequest, SendRequest, Tag};
use crate::schedule::{LocalWork, Step, WorkMemory};
use crate::threads::{check_thread_ranks, run_ranks, RankCore};
use crate::{CommError, RankSchedule, Schedule};

/// How often a rank waiting for a call's price re-checks for failed or exited peers.
const POLL: Duration = Duration::from_millis(5);

/// How many start times over a noise period [`SimUniverse::noise_starts`] gives.
pub const NOISE_SAMPLES: usize = 16;

/// How puts are carried on the modeled fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SimMechanism {
    /// PIO where the fabric has it and it is faster for the transfer, else DMA.
    #[default]
    Auto,
    /// CPU programmed I/O (host memory only).
    Pio,
    /// DMA engines (chained where the fabric chains).
    Dma,
}

impl SimMechanism {
    /// Every mechanism.
    pub const ALL: &'static [SimMechanism] =
        &[SimMechanism::Auto, SimMechanism::Pio, SimMechanism::Dma];

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            SimMechanism::Auto => "auto",
            SimMechanism::Pio => "pio",
            SimMechanism::Dma => "dma",
        }
    }

    /// One line for help text.
    pub fn description(self) -> &'static str {
        match self {
            SimMechanism::Auto => "PIO where faster (small host messages), else DMA",
            SimMechanism::Pio => "CPU stores to remote host memory",
            SimMechanism::Dma => "DMA engines, a step's puts chained where the fabric chains",
        }
    }

    /// The fabric's mechanism (DMA on device 0 channel 0; schedule pricing spreads a step's
    /// puts over devices and channels itself).
    pub fn mechanism(self) -> Mechanism {
        match self {
            SimMechanism::Auto => Mechanism::Auto,
            SimMechanism::Pio => Mechanism::Pio,
            SimMechanism::Dma => Mechanism::Dma {
                device: 0,
                channel: 0,
            },
        }
    }
}

crate::impl_registry!(SimMechanism, "mechanism");

/// Options of a [`SimUniverse`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimOptions {
    /// Where every rank's buffers live (host, or a modeled GPU endpoint); also which device
    /// model prices compute unless `compute` says otherwise.
    pub memory: SimMemory,
    /// Which device model prices local work (`model_compute`), when not the one of
    /// `memory`: a GPU rank that stages its messages through host memory (`krylov solve
    /// --backend sim --device cuda`) communicates from host buffers and computes on the GPU.
    pub compute: Option<SimMemory>,
    /// How puts are carried.
    pub mechanism: SimMechanism,
    /// Node of each rank; `None`: rank r on node r (one rank per node, identity mapping).
    pub nodes: Option<Vec<usize>>,
}

/// Memory kind of the ranks' buffers (a [`MemoryKind`] with a default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SimMemory {
    /// Host memory.
    #[default]
    Host,
    /// GPU memory (GPUDirect RDMA endpoints).
    Gpu,
}

impl SimMemory {
    /// The fabric's memory kind.
    pub fn kind(self) -> MemoryKind {
        match self {
            SimMemory::Host => MemoryKind::Host,
            SimMemory::Gpu => MemoryKind::Gpu,
        }
    }
}

/// What can go wrong setting up a simulated universe.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// Zero ranks requested.
    #[error("a simulated universe needs at least one rank (got 0)")]
    NoRanks,
    /// More ranks than the fabric has nodes (one rank per node).
    #[error("{ranks} ranks do not fit on fabric `{fabric}`, which has {nodes} nodes (one rank per node; per device where a node holds several)")]
    TooManyRanks {
        /// Ranks requested.
        ranks: usize,
        /// Nodes of the fabric.
        nodes: usize,
        /// The fabric's name.
        fabric: String,
    },
    /// A placement that is not one distinct node per rank.
    #[error("placement: {0}")]
    Placement(String),
    /// An option the fabric cannot honour (PIO on GPU memory, GPU memory on a fabric
    /// without GPUs, ...).
    #[error("fabric `{fabric}`: {reason}")]
    Unsupported {
        /// The fabric's name.
        fabric: String,
        /// What is not possible.
        reason: String,
    },
    /// The fabric model rejected a schedule.
    #[error("pricing: {0}")]
    Fabric(#[from] FabricError),
    /// A rank failed while running.
    #[error(transparent)]
    Comm(#[from] CommError),
}

/// A set of simulated ranks on a modeled fabric: threads that move real data, with virtual
/// clocks.
#[derive(Debug, Clone)]
pub struct SimUniverse {
    fabric: Arc<Fabric>,
    placement: Placement,
    mechanism: Mechanism,
    compute: MemoryKind,
    /// Threads each rank computes on (see [`SimUniverse::with_threads_per_rank`]).
    threads: usize,
}

impl SimUniverse {
    /// A universe of `size` ranks on `fabric`. Any size the fabric holds is accepted, for
    /// [`SimUniverse::price`]; [`SimUniverse::run`] starts a thread per rank, so it refuses
    /// more than [`crate::threads::MAX_THREAD_RANKS`].
    ///
    /// # Errors
    /// [`SimError::NoRanks`], [`SimError::TooManyRanks`] (one rank per node),
    /// [`SimError::Placement`] when `options.nodes` is not `size` distinct nodes of the
    /// fabric, [`SimError::Unsupported`] for GPU memory on a fabric without GPUs, GPU compute
    /// on a fabric without a GPU device model, or PIO with GPU memory or on a fabric
    /// without PIO.
    pub fn new(size: usize, fabric: Fabric, options: SimOptions) -> Result<Self, SimError> {
        if size == 0 {
            return Err(SimError::NoRanks);
        }
        let name = fabric.config().name.clone();
        let unsupported = |reason: &str| SimError::Unsupported {
            fabric: name.clone(),
            reason: reason.to_string(),
        };
        let nodes = match options.nodes {
            None => {
                if size > fabric.nodes() {
                    return Err(SimError::TooManyRanks {
                        ranks: size,
                        nodes: fabric.nodes(),
                        fabric: name,
                    });
                }
                (0..size).collect()
            }
            Some(nodes) => {
                if nodes.len() != size {
                    return Err(SimError::Placement(format!(
                        "{} nodes given for {size} ranks",
                        nodes.len()
                    )));
                }
                if let Some(n) = nodes.iter().find(|&&n| n >= fabric.nodes()) {
                    return Err(SimError::Placement(format!(
                        "node {n} is not a node of fabric `{name}` ({} nodes)",
                        fabric.nodes()
                    )));
                }
                let mut sorted = nodes.clone();
                sorted.sort_unstable();
                if sorted.windows(2).any(|w| w[0] == w[1]) {
                    return Err(SimError::Placement(
                        "two ranks on one node (one rank per node)".into(),
                    ));
                }
                nodes
            }
        };
        let memory = options.memory.kind();
        if memory == MemoryKind::Gpu && fabric.config().memory.gpu.is_none() {
            return Err(unsupported("GPU memory endpoints: the fabric has no GPU"));
        }
        if options.mechanism == SimMechanism::Pio {
            if fabric.config().pio.is_none() {
                return Err(unsupported("the fabric has no PIO"));
            }
            if memory == MemoryKind::Gpu {
                return Err(unsupported("PIO moves host memory only (use dma or auto)"));
            }
        }
        let compute = options.compute.map_or(memory, SimMemory::kind);
        if compute == MemoryKind::Gpu && fabric.device_model(MemoryKind::Gpu).is_none() {
            return Err(unsupported(
                "no GPU device model ([compute.gpu]) to price GPU compute",
            ));
        }
        Ok(Self {
            fabric: Arc::new(fabric),
            placement: Placement { nodes, memory },
            mechanism: options.mechanism.mechanism(),
            compute,
            threads: 1,
        })
    }

    /// The same universe with ranks that compute on `threads` threads each: as
    /// [`crate::ThreadUniverse::with_threads_per_rank`], it decides how long a waiting
    /// rank's thread may spin on this machine (wall time only; modeled times do not
    /// change).
    pub fn with_threads_per_rank(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.placement.nodes.len()
    }

    /// The fabric.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// Rank-to-node placement and memory kind.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Run `f` on every rank, each on its own OS thread, every clock starting at 0, and
    /// return the results in rank order. Panics and early exits release the other ranks as
    /// on [`crate::ThreadUniverse::run`].
    ///
    /// # Errors
    /// [`CommError::TooManyThreadRanks`] for a universe of more than
    /// [`crate::threads::MAX_THREAD_RANKS`] ranks (it can still [`SimUniverse::price`]);
    /// [`CommError::RankPanicked`] for the first rank that panicked.
    pub fn run<R, F>(&self, f: F) -> Result<Vec<R>, CommError>
    where
        R: Send,
        F: Fn(&SimComm) -> R + Sync,
    {
        check_thread_ranks(self.size())?;
        let model = Arc::new(Model {
            fabric: Arc::clone(&self.fabric),
            placement: self.placement.clone(),
            mechanism: self.mechanism,
            compute: self.compute,
            calls: Mutex::new(HashMap::new()),
            priced: Condvar::new(),
        });
        run_ranks(
            self.size(),
            self.threads,
            &|core| SimComm {
                core,
                model: Arc::clone(&model),
                clock: Cell::new(0.0),
                entered: RefCell::new(Vec::new()),
                seq: Cell::new(0),
                posts: RefCell::new(Vec::new()),
                pending: RefCell::new(None),
            },
            f,
        )
    }

    /// Price a whole schedule alone, without data or threads, every rank entering at time
    /// 0: each rank's completion time (seconds). This is what one blocking call of the
    /// schedule costs on this universe, for rank counts too large to run with threads.
    ///
    /// # Errors
    /// [`SimError::Placement`] when the schedule's rank count is not the universe's;
    /// [`SimError::Fabric`] when the fabric rejects it.
    pub fn price(&self, sched: &Schedule) -> Result<Vec<SimTime>, SimError> {
        let mut done = self.price_concurrent(&[sched], 0.0)?;
        Ok(done.pop().unwrap_or_default())
    }

    /// The start times at which a call is priced to see the fabric's noise: [`NOISE_SAMPLES`]
    /// spread evenly over the detour period (which ranks a call meets in a detour depends on
    /// when it runs, and a program's calls run at every phase); without `[noise]`, time 0
    /// alone.
    pub fn noise_starts(&self) -> Vec<SimTime> {
        match &self.fabric.config().noise {
            None => vec![0.0],
            Some(n) => (0..NOISE_SAMPLES)
                .map(|j| n.period_us * 1e-6 * j as f64 / NOISE_SAMPLES as f64)
                .collect(),
        }
    }

    /// Price several schedules in flight together, every rank entering each at time
    /// `start` (which matters only where the fabric models noise: its detours are fixed in
    /// time), in one engine run ([`Fabric::price_concurrent`]: their transfers share the
    /// fabric): `result[i][r]` is rank r's finish time of `scheds[i]`. With one schedule
    /// and `start` 0 this is [`SimUniverse::price`].
    ///
    /// # Errors
    /// [`SimError::Placement`] when a schedule's size is not the universe's; the pricing
    /// errors of [`Fabric::price_concurrent`].
    pub fn price_concurrent(
        &self,
        scheds: &[&Schedule],
        start: SimTime,
    ) -> Result<Vec<Vec<SimTime>>, SimError> {
        self.price_concurrent_within(scheds, start, u64::MAX)
    }

    /// [`SimUniverse::price_concurrent`] with a work limit: the run gives up with
    /// [`FabricError::WorkLimit`] (in [`SimError::Fabric`]) after `max_updates` flow rate
    /// updates ([`Fabric::price_concurrent_within`]).
    ///
    /// # Errors
    /// As [`SimUniverse::price_concurrent`], and the work limit.
    pub fn price_concurrent_within(
        &self,
        scheds: &[&Schedule],
        start: SimTime,
        max_updates: u64,
    ) -> Result<Vec<Vec<SimTime>>, SimError> {
        if let Some(s) = scheds.iter().find(|s| s.size() != self.size()) {
            return Err(SimError::Placement(format!(
                "a schedule of {} ranks on a universe of {}",
                s.size(),
                self.size()
            )));
        }
        let start = vec![start; self.size()];
        let shapes: Vec<PriceSchedule> = scheds
            .iter()
            .map(|s| price_schedule(s, self.placement.memory))
            .collect();
        let calls: Vec<(&PriceSchedule, &[SimTime])> =
            shapes.iter().map(|s| (s, &start[..])).collect();
        Ok(self.fabric.price_concurrent_within(
            &calls,
            &self.placement,
            self.mechanism,
            max_updates,
        )?)
    }
}

/// The data-free shape of one rank's schedule: per step its puts (destination, bytes), the
/// sources of its arrivals, where they land and its local work ([`Step::local`], memories
/// resolved against `buffers`, the memory the ranks' buffers live in). Local copies and
/// reductions on arrival are not priced; steps that need them priced say so in
/// [`Step::local`].
pub fn price_steps(sched: &RankSchedule, buffers: MemoryKind) -> Vec<PriceStep> {
    let mem = |m: WorkMemory| match m {
        WorkMemory::Buffer => buffers,
        WorkMemory::Host => MemoryKind::Host,
    };
    sched
        .steps
        .iter()
        .map(|s: &Step| PriceStep {
            puts: s
                .puts
                .iter()
                .map(|p| PricePut {
                    to: p.to,
                    bytes: p.src.len() as u64,
                })
                .collect(),
            waits_for: s.arrivals.iter().map(|a| a.from).collect(),
            arrival_memory: (mem(s.arrivals_in) != buffers).then(|| mem(s.arrivals_in)),
            local: s
                .local
                .iter()
                .filter_map(|w| match *w {
                    LocalWork::Compute {
                        on,
                        bytes,
                        flops,
                        launches,
                    } => Some(PriceWork::Compute {
                        memory: mem(on),
                        // A step's reduction on message buffers: no working set given, so
                        // priced at memory bandwidth as before the cache levels.
                        cost: ComputeCost {
                            bytes,
                            flops,
                            launches,
                            ..ComputeCost::default()
                        },
                    }),
                    LocalWork::Copy { from, to, bytes } => {
                        (mem(from) != mem(to)).then(|| PriceWork::Copy {
                            from: mem(from),
                            to: mem(to),
                            bytes,
                        })
                    }
                })
                .collect(),
        })
        .collect()
}

/// The data-free shape of a whole schedule ([`price_steps`] of every rank).
pub fn price_schedule(sched: &Schedule, buffers: MemoryKind) -> PriceSchedule {
    PriceSchedule {
        ranks: sched
            .ranks
            .iter()
            .map(|r| price_steps(r, buffers))
            .collect(),
    }
}

/// One call in the pricing table: what each rank deposited, and the price once all have.
struct Call {
    /// Each rank's steps, deposited at entry; taken into `sched` once every rank entered.
    steps: Vec<Vec<PriceStep>>,
    /// Which ranks entered (a second entry is an error).
    has: Vec<bool>,
    entry: Vec<SimTime>,
    /// Each rank's entry index (its count of earlier entries): program order.
    seq: Vec<u64>,
    entered: usize,
    /// Per call a rank was inside (entered, not left) when it entered this one: how many
    /// ranks were.
    inside: HashMap<Tag, usize>,
    /// The whole data-free schedule, once priced (kept to load the links of later calls).
    sched: Option<PriceSchedule>,
    done: Option<Result<Vec<SimTime>, String>>,
    left: usize,
}

impl Call {
    /// Whether every rank entered `self` before `other` in its program.
    fn precedes(&self, other: &Call) -> bool {
        self.seq.iter().zip(&other.seq).all(|(a, b)| a < b)
    }

    /// The latest priced completion, if priced without error.
    fn latest(&self) -> Option<SimTime> {
        match &self.done {
            Some(Ok(d)) => Some(d.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            _ => None,
        }
    }

    fn earliest_entry(&self) -> SimTime {
        self.entry.iter().copied().fold(f64::INFINITY, f64::min)
    }
}

/// Price call `tag`, just fully entered, together with the calls still in flight that
/// overlap it in modeled time (the rule is in the module docs), and publish its
/// completions (and the updated completions of the earlier calls every rank is still
/// inside).
fn price_call(model: &Model, calls: &mut HashMap<Tag, Call>, tag: Tag) {
    let p = model.placement.nodes.len();
    let Some(call) = calls.get_mut(&tag) else {
        return;
    };
    let sched = PriceSchedule {
        ranks: call.steps.iter_mut().map(std::mem::take).collect(),
    };
    let call = &calls[&tag];
    // Candidates: priced calls entered before this one by every rank. The set overlapping
    // it is closed under overlap: a call overlapping a member joins (with its earliest
    // entry), so a recomputed earlier call keeps the load of its own overlapping partners.
    let mut cands: Vec<(&Call, Tag, SimTime)> = calls
        .iter()
        .filter(|&(&t, c)| t != tag && c.sched.is_some() && c.precedes(call))
        .filter_map(|(&t, c)| c.latest().map(|l| (c, t, l)))
        .collect();
    cands.sort_by(|a, b| a.0.seq.cmp(&b.0.seq).then(a.1.cmp(&b.1)));
    let mut joint = vec![false; cands.len()];
    let mut earliest = call.earliest_entry();
    loop {
        let mut grown = false;
        for (j, (c, _, latest)) in cands.iter().enumerate() {
            if !joint[j] && *latest > earliest {
                joint[j] = true;
                earliest = earliest.min(c.earliest_entry());
                grown = true;
            }
        }
        if !grown {
            break;
        }
    }
    let members: Vec<(&Call, Tag)> = cands
        .iter()
        .zip(&joint)
        .filter(|(_, &j)| j)
        .map(|((c, t, _), _)| (*c, *t))
        .collect();
    let (fabric, placement, mechanism) = (&model.fabric, &model.placement, model.mechanism);
    let mut updates: Vec<(Tag, Vec<SimTime>)> = Vec::new();
    let done = if members.is_empty() {
        fabric
            .price_schedule(&sched, placement, &call.entry, mechanism)
            .map_err(|e| e.to_string())
    } else {
        let mut runs: Vec<(&PriceSchedule, &[SimTime])> = members
            .iter()
            .filter_map(|(c, _)| c.sched.as_ref().map(|s| (s, c.entry.as_slice())))
            .collect();
        runs.push((&sched, &call.entry));
        match fabric.price_concurrent(&runs, placement, mechanism) {
            Ok(mut out) => {
                let own = out.pop().unwrap_or_default();
                for ((c, t), d) in members.iter().zip(out) {
                    // Every rank is still inside it (so none has read its completion).
                    if call.inside.get(t) == Some(&p) {
                        debug_assert_eq!(c.left, 0, "updating a call a rank has left");
                        updates.push((*t, d));
                    }
                }
                Ok(own)
            }
            // Report the call's own error where it has one alone.
            Err(e) => match fabric.price_schedule(&sched, placement, &call.entry, mechanism) {
                Err(own) => Err(own.to_string()),
                Ok(_) => Err(e.to_string()),
            },
        }
    };
    for (t, d) in updates {
        if let Some(Some(Ok(old))) = calls.get_mut(&t).map(|c| c.done.as_mut()) {
            for (o, n) in old.iter_mut().zip(d) {
                *o = o.max(n);
            }
        }
    }
    if let Some(call) = calls.get_mut(&tag) {
        call.done = Some(done);
        call.sched = Some(sched);
    }
}

struct Model {
    fabric: Arc<Fabric>,
    placement: Placement,
    mechanism: Mechanism,
    /// The device model that prices local work.
    compute: MemoryKind,
    calls: Mutex<HashMap<Tag, Call>>,
    priced: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Poisoned only when a rank panicked holding it; the abort flag reports that.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One rank's communicator in a [`SimUniverse`].
pub struct SimComm {
    core: RankCore,
    model: Arc<Model>,
    clock: Cell<SimTime>,
    /// Tags of the calls this rank is inside, in entry order: their messages are priced
    /// with the call.
    entered: RefCell<Vec<Tag>>,
    /// How many calls this rank has entered (its program order of calls).
    seq: Cell<u64>,
    /// Posted point-to-point receives: (source, tag, clock at irecv), in post order.
    posts: RefCell<Vec<(usize, Tag, SimTime)>>,
    /// A modeling error from a hook that cannot return one ([`Communicator::model_compute`]),
    /// reported by the next call that can.
    pending: RefCell<Option<CommError>>,
}

impl std::fmt::Debug for SimComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimComm")
            .field("rank", &self.core.rank())
            .field("size", &self.core.size())
            .field("clock", &self.clock.get())
            .finish()
    }
}

fn model_error(e: impl std::fmt::Display) -> CommError {
    CommError::InvalidArgument(format!("sim: {e}"))
}

impl SimComm {
    /// This rank's modeled clock (seconds).
    pub fn clock(&self) -> SimTime {
        self.clock.get()
    }

    /// The modeled fabric.
    pub fn fabric(&self) -> &Fabric {
        &self.model.fabric
    }

    /// The node this rank runs on.
    pub fn node(&self) -> usize {
        self.model.placement.nodes[self.core.rank()]
    }

    fn endpoint(&self, rank: usize) -> Endpoint {
        Endpoint {
            node: self.model.placement.nodes[rank],
            memory: self.model.placement.memory,
        }
    }

    fn take_pending(&self) -> Result<(), CommError> {
        match self.pending.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn inside(&self, tag: Tag) -> bool {
        self.entered.borrow().contains(&tag)
    }
}

impl Communicator for SimComm {
    fn rank(&self) -> usize {
        self.core.rank()
    }

    fn size(&self) -> usize {
        self.core.size()
    }

    fn isend(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<SendRequest, CommError> {
        let stamp = (!self.inside(tag)).then(|| self.clock.get());
        self.core.send_stamped(dest, tag, data, stamp)
    }

    fn irecv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError> {
        let req = self.core.post_recv(source, tag)?;
        if !self.inside(tag) {
            self.posts
                .borrow_mut()
                .push((source, tag, self.clock.get()));
        }
        Ok(req)
    }

    fn wait_send(&self, req: SendRequest) -> Result<(), CommError> {
        self.core.complete_send(req)
    }

    fn wait_recv_with(
        &self,
        req: RecvRequest,
        deliver: &mut dyn FnMut(&[u8]) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        let (source, tag) = (req.source(), req.tag());
        let mut priced = None;
        self.core.recv_stamped(req, &mut |data, stamp| {
            priced = stamp.map(|s| (s, data.len() as u64));
            deliver(data)
        })?;
        if let Some((send_posted, bytes)) = priced {
            // The earliest posted receive from this source and tag matches (FIFO).
            let recv_posted = {
                let mut posts = self.posts.borrow_mut();
                match posts.iter().position(|p| p.0 == source && p.1 == tag) {
                    Some(i) => posts.remove(i).2,
                    None => self.clock.get(),
                }
            };
            let m = TwoSidedMessage {
                src: self.endpoint(source),
                dst: self.endpoint(self.core.rank()),
                bytes,
                mechanism: self.model.mechanism,
                send_posted,
                recv_posted,
            };
            let t = self.model.fabric.price_two_sided(&m).map_err(model_error)?;
            self.clock.set(self.clock.get().max(t.arrival));
        }
        Ok(())
    }

    fn next_collective_tag(&self) -> Tag {
        self.core.next_tag()
    }

    fn model_enter(&self, tag: Tag, sched: &RankSchedule) -> Result<(), CommError> {
        self.take_pending()?;
        let (rank, p) = (self.core.rank(), self.core.size());
        let steps = price_steps(sched, self.model.placement.memory);
        let seq = self.seq.get();
        {
            let mut calls = lock(&self.model.calls);
            let call = calls.entry(tag).or_insert_with(|| Call {
                steps: vec![Vec::new(); p],
                has: vec![false; p],
                entry: vec![0.0; p],
                seq: vec![0; p],
                entered: 0,
                inside: HashMap::new(),
                sched: None,
                done: None,
                left: 0,
            });
            if call.has[rank] {
                return Err(model_error(format!(
                    "rank {rank} entered the call with tag {tag:#x} twice"
                )));
            }
            call.has[rank] = true;
            call.steps[rank] = steps;
            call.entry[rank] = self.clock.get();
            call.seq[rank] = seq;
            for &t in self.entered.borrow().iter() {
                *call.inside.entry(t).or_insert(0) += 1;
            }
            call.entered += 1;
            if call.entered == p {
                price_call(&self.model, &mut calls, tag);
                self.core.shared().model_wake_all();
                self.model.priced.notify_all();
            }
        }
        self.seq.set(seq + 1);
        self.entered.borrow_mut().push(tag);
        Ok(())
    }

    fn model_leave(&self, tag: Tag) -> Result<(), CommError> {
        // The calls this rank entered while inside this one, and is still inside: they may
        // update this call's completions, so leaving waits until they are priced.
        let later: Vec<Tag> = {
            let mut entered = self.entered.borrow_mut();
            match entered.iter().position(|&t| t == tag) {
                Some(i) => {
                    entered.remove(i);
                    entered[i..].to_vec()
                }
                None => {
                    return Err(model_error(format!(
                        "left the call with tag {tag:#x} without entering it"
                    )))
                }
            }
        };
        let (rank, p) = (self.core.rank(), self.core.size());
        let shared = self.core.shared();
        let mut calls = lock(&self.model.calls);
        let done = loop {
            let call = calls
                .get(&tag)
                .ok_or_else(|| model_error(format!("no call with tag {tag:#x}")))?;
            // The first call still unpriced (its tag and record), if any.
            let pending = std::iter::once(&tag)
                .chain(&later)
                .find_map(|t| Some((*t, calls.get(t).filter(|c| c.done.is_none())?)));
            let Some((waits_for, c)) = pending else {
                let t = match &call.done {
                    Some(Ok(d)) => Ok(d[rank]),
                    Some(Err(e)) => Err(model_error(e)),
                    None => Err(model_error(format!("call {tag:#x} is not priced"))),
                };
                if let Some(call) = calls.get_mut(&tag) {
                    call.left += 1;
                    if call.left == p {
                        calls.remove(&tag);
                    }
                }
                break t?;
            };
            if shared.is_aborted() {
                // A rank that has not entered the call waited for.
                let peer = (0..p).find(|&r| !c.has[r]).unwrap_or(rank);
                return Err(shared.stop_error(rank, peer, waits_for));
            }
            if let Some(peer) = (0..p).find(|&r| !c.has[r] && shared.has_exited(r)) {
                return Err(CommError::PeerExited { rank, peer });
            }
            // Waiting here is not a receive: it counts for the deadlock check as a model
            // wait, woken by every pricing (`model_enter`).
            shared.model_wait_begin(rank);
            let (guard, waited) = self
                .model
                .priced
                .wait_timeout(calls, POLL)
                .unwrap_or_else(|e| e.into_inner());
            calls = guard;
            shared.model_wait_end();
            if waited.timed_out() {
                shared.check_deadlock();
                if shared.is_deadlocked() {
                    self.model.priced.notify_all();
                }
            }
        };
        drop(calls);
        self.clock.set(self.clock.get().max(done));
        self.take_pending()
    }

    fn model_compute(&self, work: ComputeWork) {
        let cost = ComputeCost {
            bytes: work.bytes,
            flops: work.flops,
            launches: work.launches,
            spmv_bytes: work.spmv_bytes,
            working_set: work.working_set,
            chain: work.chain,
        };
        let fabric = &self.model.fabric;
        let priced = fabric.work_time(
            self.model.compute,
            cost,
            work.transfers,
            work.transfer_bytes,
        );
        match priced {
            Ok(t) => self.clock.set(self.clock.get() + t),
            Err(e) => {
                let mut pending = self.pending.borrow_mut();
                if pending.is_none() {
                    *pending = Some(model_error(e));
                }
            }
        }
    }

    fn model_clock(&self) -> Option<f64> {
        Some(self.clock.get())
    }
}
