//! The `threads` backend: P ranks as OS threads of one process.
//!
//! Ranks are real threads (never rayon tasks: a blocking wait inside a rayon pool deadlocks
//! once ranks outnumber its workers), at most [`MAX_THREAD_RANKS`] of them. Each ordered
//! pair of ranks that talks has its own channel (`threads/channel.rs`), created by the
//! pair's first send or receive (`threads/table.rs`: memory follows the pairs that talk,
//! not P x P, and a rank finds a channel it used before with one check): a send writes a
//! small payload straight into a slot of the destination's ring (longer ones into a
//! recycled buffer) and publishes it with one atomic store, so a message costs one
//! cache-line transfer and no lock; a receive polls the one
//! channel its source writes, hands a matching small payload to the caller straight from
//! the slot, and sets aside messages with other tags for later receives. The software's
//! share of a message is benched apart (`threads_software` in the collectives benches: a
//! send and its receive to self, about 40 ns on this project's shared machines); between two
//! cores the cache-line transfer comes on top.
//! Waiting spins, then yields, then parks on the rank's condition variable, for how long
//! depending on whether every computing thread can have a core of its own (`WaitPolicy`;
//! a rank computes on its own thread or, with [`ThreadUniverse::with_threads_per_rank`], on
//! the workers of a pool of its own): with at least `ranks x threads` cores a waiting rank
//! polls for up to a scheduler time slice before parking, as MPI libraries do; with fewer
//! (tests run 17 ranks on 2 cores) it parks soon, giving its core to the threads it waits
//! for. Where the cores are taken by another process (a busy login node or CI runner), a
//! rank whose wait outlasts a short spin and whose thread the scheduler has preempted
//! lately parks at once (`threads/load.rs`): its peer may be the thread descheduled. A park lasts 20 ms, each further park of the same wait twice the one before up to
//! 160 ms, and a rank's exit wakes only the ranks parked on it, so thousands of parked
//! ranks on a few cores leave the cores to the ranks that run. A panic
//! on one rank sets a shared abort flag that every waiting rank observes, so the others
//! return [`CommError::PeerFailed`] instead of hanging, and [`ThreadUniverse::run`] reports
//! the first panic. Likewise a rank whose closure has returned (say, with an error the
//! others did not see) can send nothing more, so a wait for a message from it fails with
//! [`CommError::PeerExited`] instead of hanging. And when every rank still running is
//! parked in a receive that nothing published can match (ranks that called collectives in
//! different orders, a receive without a send), or in a backend's model wait nothing has
//! woken (`sim`), none can ever be released: the first wait to time out sees it and every
//! waiting rank returns [`CommError::Deadlock`] naming its own wait
//! (`Shared::check_deadlock`; it runs only when a wait times out, so it costs the message
//! path nothing).

mod channel;
mod load;
mod table;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use self::channel::{Channel, Message, Payload};
use self::load::LoadSense;
use self::table::{ChannelTable, PeerCache};
use crate::comm::{check_rank, Communicator, RecvRequest, SendRequest, Tag, COLLECTIVE_TAG_BASE};
use crate::CommError;

/// The most ranks a [`ThreadUniverse`] or [`crate::SimUniverse`] runs: larger universes
/// are refused with [`CommError::TooManyThreadRanks`].
///
/// Each rank is an OS thread with its own stack (2 MiB of address space, the pages it
/// touches resident), parker and buffer pool, and the shared channel table holds
/// `P x P / 64` block pointers (4 MiB at this cap) before any pair talks. Past a few
/// thousand ranks a machine's thread limit (`/proc/sys/kernel/threads-max`, the user's
/// process limit) and the scheduler, not the model, decide whether and how fast a run
/// goes, so the cap turns a request for more into a clear error instead of an abort
/// part-way through starting threads. 4096 covers the largest machines this project models
/// rank by rank (a 16 x 16 x 16 torus); `krylov plan` and `SimUniverse::price` price
/// larger rank counts without threads.
pub const MAX_THREAD_RANKS: usize = 4096;

/// First park of a wait before re-checking the channel and the abort flag. It also bounds
/// what a wake-up lost to a race could cost (see [`RankCore::park`]).
const PARK: Duration = Duration::from_millis(20);

/// Longest park: each further park of one wait lasts twice the one before, up to this, so
/// thousands of ranks parked for a long time (a large universe on few cores, where the
/// others take turns) do not wake 50 times a second each to find nothing.
const PARK_MAX: Duration = Duration::from_millis(160);

/// How long a rank about to park keeps checking its channel after announcing that it
/// parks (see [`RankCore::park`]).
const PARK_GRACE: Duration = Duration::from_micros(20);

/// How long a waiting rank spins and yields before it parks.
///
/// The spin phase adapts per rank: a wait that ends while spinning doubles the rank's spin
/// budget (up to `spins`), a wait that has to yield halves it (down to [`MIN_SPINS`]). So
/// when the scheduler puts two ranks on one core (a loaded machine), each stops burning the
/// core its peer needs after a few waits, and the budget grows back once messages arrive
/// while spinning again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitPolicy {
    /// Most busy-wait rounds (each a CPU spin hint) before yielding.
    spins: u32,
    /// Rounds of yielding the CPU before parking.
    yields: u32,
    /// Spin rounds after which a wait asks whether the machine is loaded
    /// (`threads/load.rs`) and, if so, parks at once instead of spinning or yielding on
    /// (at the end of a shorter spin budget); `None`: never (ranks already share cores).
    check: Option<u32>,
}

impl WaitPolicy {
    /// Every rank has a core: spin up to about 3.7 ms (2^17 spin hints of about 28 ns on
    /// this project's machines: longer than a scheduler time slice, so a peer preempted by
    /// another process is waited for without giving this core away), then yield a little,
    /// then park. This is what MPI libraries do when not oversubscribed (poll, never yield).
    /// Measured with a CPU hog beside 2 ranks, 8-byte allreduce average: 0.7-1.6 us with
    /// this policy against 2.5-23 us when spinning 30 us and then yielding for a
    /// millisecond (a yield hands the core to the hog for a whole slice), and Open MPI's
    /// 2.8-3.1 us. The adaptive budget (see the type's docs) brings the spin down when the
    /// scheduler puts both ranks on one core. But a solve's waits are not all short: where
    /// another process takes the cores, a wait of more than `check` rounds (about 60 us)
    /// whose thread was preempted lately parks at once (`cargo xtask busy` measures it).
    const DEDICATED: Self = Self {
        spins: 1 << 17,
        yields: 64,
        check: Some(1 << 11),
    };
    /// More ranks than cores: the rank waited for may need this core, so give it up soon.
    const SHARED: Self = Self {
        spins: 256,
        yields: 64,
        check: None,
    };

    /// The policy for `ranks` ranks, each computing on `threads` threads (its own, or the
    /// workers of its own pool while it waits for them), on this machine's available cores:
    /// a rank may spin only when every computing thread of every rank has a core.
    fn for_ranks(ranks: usize, threads: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if ranks.saturating_mul(threads.max(1)) <= cores {
            Self::DEDICATED
        } else {
            Self::SHARED
        }
    }
}

/// The fewest spin rounds an adaptive spin budget falls to (about 2 us).
const MIN_SPINS: u32 = 64;

/// Where a rank parks when it has waited long enough.
#[repr(align(128))]
#[derive(Default)]
struct Parker {
    lock: Mutex<()>,
    wake: Condvar,
    /// Waits in progress on `wake`; a sender signals only when this is non-zero.
    sleepers: AtomicUsize,
    /// The source of the receive this rank parks in, or [`MODEL_WAIT`] (read by the
    /// deadlock check).
    source: AtomicUsize,
    /// Set when what a rank in a model wait waits for may have happened (see
    /// [`Shared::model_wake_all`]).
    model_woken: AtomicBool,
}

/// [`Parker::source`] of a rank waiting for its backend's model (the `sim` backend's
/// pricing of a call), not in a receive.
const MODEL_WAIT: usize = usize::MAX;

pub(crate) struct Shared {
    size: usize,
    /// The channel of each ordered pair of ranks that has talked (created on first use).
    channels: ChannelTable,
    parkers: Vec<Parker>,
    /// Recycled message buffers (payloads longer than a slot), one pool per sending rank.
    pools: Vec<Mutex<Vec<Vec<u8>>>>,
    wait: WaitPolicy,
    /// Set when every waiting rank must give up: a rank panicked, or (with `deadlock`) every
    /// running rank waits for a message no rank has sent.
    aborted: AtomicBool,
    deadlock: AtomicBool,
    /// Ranks parked in a receive (see [`Shared::check_deadlock`]).
    parked: AtomicUsize,
    /// Parks ended so far: a deadlock check that sees it change saw a rank move.
    unparks: AtomicU64,
    /// Ranks whose closure has not returned (a count of the `exited` flags still false).
    running: AtomicUsize,
    /// Set when a rank's closure has returned (or its thread could not start): a wait for
    /// a message from it that is not already queued can never complete.
    exited: Vec<AtomicBool>,
    first_panic: Mutex<Option<(usize, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another rank panicked while holding it; the data (queues
    // of whole messages) is still consistent, and the abort flag reports the failure.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn new(size: usize, threads: usize) -> Self {
        Self {
            size,
            channels: ChannelTable::new(size),
            parkers: (0..size).map(|_| Parker::default()).collect(),
            pools: (0..size).map(|_| Mutex::new(Vec::new())).collect(),
            wait: WaitPolicy::for_ranks(size, threads),
            aborted: AtomicBool::new(false),
            deadlock: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            unparks: AtomicU64::new(0),
            running: AtomicUsize::new(size),
            exited: (0..size).map(|_| AtomicBool::new(false)).collect(),
            first_panic: Mutex::new(None),
        }
    }

    /// The channel from `from` to `to`, created if the pair has not talked yet.
    fn channel(&self, from: usize, to: usize) -> &Arc<Channel> {
        self.channels.get_or_create(from, to)
    }

    /// Whether a rank has panicked (every wait must give up).
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Whether `rank`'s closure has returned (or its thread never started).
    pub(crate) fn has_exited(&self, rank: usize) -> bool {
        self.exited[rank].load(Ordering::SeqCst)
    }

    /// The error of a rank that stops waiting for `(peer, tag)` because the universe was
    /// aborted: a deadlock, or another rank's failure.
    pub(crate) fn stop_error(&self, rank: usize, peer: usize, tag: Tag) -> CommError {
        if self.deadlock.load(Ordering::SeqCst) {
            CommError::Deadlock { rank, peer, tag }
        } else {
            CommError::PeerFailed { rank }
        }
    }

    /// Whether the universe was aborted as a deadlock.
    pub(crate) fn is_deadlocked(&self) -> bool {
        self.deadlock.load(Ordering::SeqCst)
    }

    /// `rank` starts waiting (with the backend's lock held, after finding its condition
    /// false) for something only another rank's progress can bring about, outside a
    /// receive: the `sim` backend's wait for a call to be priced. It counts as parked for
    /// the deadlock check until [`Shared::model_wait_end`], unless a
    /// [`Shared::model_wake_all`] comes first.
    pub(crate) fn model_wait_begin(&self, rank: usize) {
        let parker = &self.parkers[rank];
        parker.model_woken.store(false, Ordering::SeqCst);
        parker.source.store(MODEL_WAIT, Ordering::SeqCst);
        self.parked.fetch_add(1, Ordering::SeqCst);
    }

    /// The end of a [`Shared::model_wait_begin`] wait.
    pub(crate) fn model_wait_end(&self) {
        self.parked.fetch_sub(1, Ordering::SeqCst);
        self.unparks.fetch_add(1, Ordering::SeqCst);
    }

    /// What ranks in model waits wait for may have happened (called, with the backend's
    /// lock held, before signalling them): none of them counts as stuck until it has
    /// looked again.
    pub(crate) fn model_wake_all(&self) {
        for p in &self.parkers {
            p.model_woken.store(true, Ordering::SeqCst);
        }
    }

    /// Called by a waiting rank whose wait timed out: if every running rank is parked in a
    /// receive whose source has published nothing for it, or in a model wait nothing has
    /// woken, none can ever be released (only running ranks send or enter calls, and a
    /// parked rank does neither), so abort the universe as a deadlock and wake everyone.
    ///
    /// Exact, not a heuristic: every message a rank sent was published before it parked
    /// (the announcement is a sequentially consistent increment of `parked`, which this
    /// check reads), so the channels read here show it; and the check gives up if any park
    /// ended while it ran (`unparks`), so no rank moved in between. A model wait is woken
    /// (under the backend's lock, before its waiters can look) by whatever might satisfy
    /// it, so one that is not woken is stuck.
    pub(crate) fn check_deadlock(&self) {
        let unparks = self.unparks.load(Ordering::SeqCst);
        let running = self.running.load(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) != running {
            return;
        }
        for (rank, parker) in self.parkers.iter().enumerate() {
            if self.has_exited(rank) {
                continue;
            }
            let ready = match parker.source.load(Ordering::SeqCst) {
                MODEL_WAIT => parker.model_woken.load(Ordering::SeqCst),
                // A pair without a channel has sent nothing.
                source => {
                    source >= self.size
                        || self.channels.get(source, rank).is_some_and(Channel::ready)
                }
            };
            if ready {
                return;
            }
        }
        if self.unparks.load(Ordering::SeqCst) != unparks
            || self.parked.load(Ordering::SeqCst) != running
        {
            return;
        }
        self.deadlock.store(true, Ordering::SeqCst);
        self.aborted.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn wake_all(&self) {
        for p in &self.parkers {
            let _guard = lock(&p.lock);
            p.wake.notify_all();
        }
    }

    /// `rank`'s closure has returned (or its thread could not start): wake the ranks
    /// parked in a receive from it (their wait fails unless the message is already there).
    /// Only those: waking every parked rank on every exit made a universe of P ranks that
    /// finish one by one wake P x P times.
    ///
    /// A rank that announces a park on `rank` (its `source`, then a read of `exited`, both
    /// sequentially consistent, under its parker's lock) either sees the flag or is seen
    /// here and signalled once it waits.
    fn exit(&self, rank: usize) {
        if self.exited[rank].swap(true, Ordering::SeqCst) {
            return;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        for p in &self.parkers {
            if p.sleepers.load(Ordering::SeqCst) > 0 && p.source.load(Ordering::SeqCst) == rank {
                let _guard = lock(&p.lock);
                p.wake.notify_all();
            }
        }
    }

    fn abort(&self, rank: usize, message: String) {
        {
            let mut first = lock(&self.first_panic);
            if first.is_none() {
                *first = Some((rank, message));
            }
        }
        self.aborted.store(true, Ordering::SeqCst);
        self.wake_all();
    }
}

/// A set of `size` thread ranks.
#[derive(Debug, Clone, Copy)]
pub struct ThreadUniverse {
    size: usize,
    threads: usize,
}

impl ThreadUniverse {
    /// A universe of `size` ranks, each computing on one thread; `size` must be at least 1
    /// and at most [`MAX_THREAD_RANKS`].
    ///
    /// # Errors
    /// [`CommError::NoRanks`] for 0 ranks, [`CommError::TooManyThreadRanks`] for more than
    /// [`MAX_THREAD_RANKS`].
    pub fn new(size: usize) -> Result<Self, CommError> {
        check_thread_ranks(size)?;
        Ok(Self { size, threads: 1 })
    }

    /// The same universe with ranks that compute on `threads` threads each (a rank whose
    /// kernels run on a pool of its own): a waiting rank spins only while `size * threads`
    /// fits the machine's cores, and otherwise soon gives its core to the threads that
    /// compute.
    pub fn with_threads_per_rank(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Run `f` on every rank, each on its own OS thread, and return the results in rank
    /// order. If any rank panics, the others are released from their waits and the first
    /// panic is returned as [`CommError::RankPanicked`].
    pub fn run<R, F>(&self, f: F) -> Result<Vec<R>, CommError>
    where
        R: Send,
        F: Fn(&ThreadComm) -> R + Sync,
    {
        run_ranks(self.size, self.threads, &|core| ThreadComm { core }, f)
    }
}

/// Whether a universe of `size` thread ranks may be created: at least one, at most
/// [`MAX_THREAD_RANKS`].
pub(crate) fn check_thread_ranks(size: usize) -> Result<(), CommError> {
    if size == 0 {
        return Err(CommError::NoRanks);
    }
    if size > MAX_THREAD_RANKS {
        return Err(CommError::TooManyThreadRanks {
            ranks: size,
            max: MAX_THREAD_RANKS,
        });
    }
    Ok(())
}

/// Run `f` on `size` ranks, each on its own OS thread with the communicator `make` builds
/// from the rank's [`RankCore`] (the machinery the `threads` and `sim` backends share:
/// mailboxes, abort on panic, exit tracking), and return the results in rank order. If any
/// rank panics, the others are released from their waits and the first panic is returned
/// as [`CommError::RankPanicked`].
pub(crate) fn run_ranks<C, R, F>(
    size: usize,
    threads: usize,
    make: &(dyn Fn(RankCore) -> C + Sync),
    f: F,
) -> Result<Vec<R>, CommError>
where
    R: Send,
    F: Fn(&C) -> R + Sync,
{
    check_thread_ranks(size)?;
    let shared = Arc::new(Shared::new(size, threads));
    let f = &f;
    let results: Vec<Option<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let shared_rank = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name(format!("rank-{rank}"))
                    .spawn_scoped(scope, move || {
                        let shared = shared_rank;
                        let comm = make(RankCore::new(rank, Arc::clone(&shared)));
                        let out = match catch_unwind(AssertUnwindSafe(|| f(&comm))) {
                            Ok(r) => Some(r),
                            Err(payload) => {
                                shared.abort(rank, panic_message(payload.as_ref()));
                                None
                            }
                        };
                        shared.exit(rank);
                        out
                    });
                if let Err(e) = &spawned {
                    // The ranks already running must not wait for this one forever.
                    shared.abort(rank, format!("its thread could not be started: {e}"));
                    shared.exit(rank);
                }
                spawned
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().ok().flatten(),
                Err(_) => None,
            })
            .collect()
    });
    if let Some((rank, message)) = lock(&shared.first_panic).take() {
        return Err(CommError::RankPanicked { rank, message });
    }
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| {
            r.ok_or(CommError::RankPanicked {
                rank,
                message: "the rank's thread could not be started".into(),
            })
        })
        .collect()
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Consumes a received message's bytes and the stamp its sender attached.
pub(crate) type StampedDeliver<'a> = dyn FnMut(&[u8], Option<f64>) -> Result<(), CommError> + 'a;

/// One rank's share of the thread machinery: its index, the shared channels and flags, the
/// messages it has set aside, and its collective tag sequence. Backends built on threads
/// wrap it.
pub(crate) struct RankCore {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
    tag_seq: Cell<u64>,
    /// Spin rounds of the next wait (adapted after each wait, see [`WaitPolicy`]).
    spin_budget: Cell<u32>,
    /// Whether the scheduler preempted this rank's thread lately (`threads/load.rs`).
    load: LoadSense,
    /// Channels to the peers this rank sends to, cached (see `threads/table.rs`).
    out_cache: PeerCache,
    /// Channels from the peers this rank receives from, cached.
    in_cache: PeerCache,
    /// Messages read from a source while waiting for another tag, per source in arrival
    /// order (a map: only the sources that talk get a queue).
    set_aside: RefCell<HashMap<usize, VecDeque<Message>>>,
    /// Messages in `set_aside`: while 0, a receive looks no further there.
    aside: Cell<usize>,
}

/// One rank's communicator in a [`ThreadUniverse`].
pub struct ThreadComm {
    core: RankCore,
}

impl std::fmt::Debug for ThreadComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadComm")
            .field("rank", &self.core.rank)
            .field("size", &self.core.size)
            .finish()
    }
}

impl RankCore {
    fn new(rank: usize, shared: Arc<Shared>) -> Self {
        let (size, spins) = (shared.size, shared.wait.spins);
        Self {
            rank,
            size,
            shared,
            tag_seq: Cell::new(0),
            spin_budget: Cell::new(spins),
            load: LoadSense::default(),
            out_cache: PeerCache::new(),
            in_cache: PeerCache::new(),
            set_aside: RefCell::new(HashMap::new()),
            aside: Cell::new(0),
        }
    }

    /// Call `f` with the channel from this rank to `dest` (created on first use).
    #[inline]
    fn with_out<R>(&self, dest: usize, f: impl FnOnce(&Channel) -> R) -> R {
        let shared = &*self.shared;
        self.out_cache
            .with(dest, || Arc::clone(shared.channel(self.rank, dest)), f)
    }

    /// Call `f` with the channel from `source` to this rank (created on first use).
    #[inline]
    fn with_in<R>(&self, source: usize, f: impl FnOnce(&Channel) -> R) -> R {
        let shared = &*self.shared;
        self.in_cache
            .with(source, || Arc::clone(shared.channel(source, self.rank)), f)
    }

    /// How many ordered pairs of ranks of the whole universe have a channel so far: those
    /// that have sent or posted a receive to one another (channels are created on first
    /// use).
    pub(crate) fn channels_created(&self) -> usize {
        self.shared.channels.created()
    }

    /// This rank's index.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The state every rank shares.
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Post a buffered send of `data` to `dest`, carrying `stamp` to the receiver.
    pub(crate) fn send_stamped(
        &self,
        dest: usize,
        tag: Tag,
        data: &[u8],
        stamp: Option<f64>,
    ) -> Result<SendRequest, CommError> {
        check_rank(dest, self.size)?;
        let shared = &*self.shared;
        if shared.aborted.load(Ordering::Relaxed) {
            return Err(CommError::PeerFailed { rank: self.rank });
        }
        self.with_out(dest, |channel| {
            channel.send(tag, data, stamp, || {
                lock(&shared.pools[self.rank]).pop().unwrap_or_default()
            });
        });
        // No fence between publishing and this load: a fence would wait for the message's
        // cache line to leave this core, doubling the latency. A receiver that announced
        // it parks just as this load read zero still sees the message: see `park`.
        let parker = &shared.parkers[dest];
        if parker.sleepers.load(Ordering::Relaxed) > 0 {
            let _guard = lock(&parker.lock);
            parker.wake.notify_all();
        }
        Ok(SendRequest::new(dest))
    }

    /// Post a receive (matching happens in [`RankCore::recv_stamped`]).
    #[inline]
    pub(crate) fn post_recv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError> {
        check_rank(source, self.size)?;
        Ok(RecvRequest::new(source, tag))
    }

    /// Complete a send (buffered: the data left with the message).
    #[inline]
    pub(crate) fn complete_send(&self, mut req: SendRequest) -> Result<(), CommError> {
        req.done = true;
        Ok(())
    }

    /// Hand the first message from `source` with `tag` to `deliver` if it has arrived (set
    /// aside earlier, or in the channel), setting aside messages with other tags read on
    /// the way: true once delivered, false when it has not arrived, or the error `deliver`
    /// returned. A matching message with an inline payload at the head of the ring is
    /// delivered straight from the slot ([`Channel::take_inline`]).
    ///
    /// (Results are matched where they are produced, and only an error is moved on: copying
    /// a whole `Result<(), CommError>` that the callee wrote with a narrower store stalls
    /// the store-to-load forwarding, which measurably slowed every receive.)
    fn try_deliver(
        &self,
        source: usize,
        tag: Tag,
        deliver: &mut StampedDeliver<'_>,
    ) -> Result<bool, CommError> {
        if self.aside.get() > 0 {
            let set_aside = self
                .set_aside
                .borrow_mut()
                .get_mut(&source)
                .and_then(|queue| {
                    let pos = queue.iter().position(|m| m.tag == tag)?;
                    queue.remove(pos)
                });
            if let Some(m) = set_aside {
                self.aside.set(self.aside.get() - 1);
                return self.deliver_message(source, m, deliver).map(|()| true);
            }
        }
        self.with_in(source, |channel| loop {
            match channel.take_inline(tag, |bytes, stamp| deliver(bytes, stamp)) {
                Some(Ok(())) => return Ok(true),
                Some(Err(e)) => return Err(e),
                None => {}
            }
            let Some(m) = channel.try_recv() else {
                return Ok(false);
            };
            if m.tag == tag {
                return self.deliver_message(source, m, deliver).map(|()| true);
            }
            self.set_aside
                .borrow_mut()
                .entry(source)
                .or_default()
                .push_back(m);
            self.aside.set(self.aside.get() + 1);
        })
    }

    /// Hand `msg` (from `source`) to `deliver`; a buffer goes back to the sender's pool.
    fn deliver_message(
        &self,
        source: usize,
        msg: Message,
        deliver: &mut StampedDeliver<'_>,
    ) -> Result<(), CommError> {
        let result = deliver(msg.payload.bytes(), msg.stamp);
        if let Payload::Heap(buf) = msg.payload {
            lock(&self.shared.pools[source]).push(buf);
        }
        result
    }

    /// Block until the next message from the request's source and tag has arrived and hand
    /// its bytes and stamp to `deliver`.
    pub(crate) fn recv_stamped(
        &self,
        mut req: RecvRequest,
        deliver: &mut StampedDeliver<'_>,
    ) -> Result<(), CommError> {
        req.done = true;
        let (source, tag) = (req.source, req.tag);
        let shared = &*self.shared;
        let (wait, budget) = (shared.wait, self.spin_budget.get());
        // This wait's spin and yield rounds: the budget, cut short on a loaded machine.
        let (mut spins, mut yields) = (budget, wait.yields);
        let check_at = wait.check.map(|c| c.min(budget));
        let mut rounds = 0u32;
        let mut park_for = PARK;
        loop {
            if self.try_deliver(source, tag, deliver)? {
                break;
            }
            if shared.aborted.load(Ordering::Relaxed) {
                return Err(shared.stop_error(self.rank, source, tag));
            }
            if shared.exited[source].load(Ordering::SeqCst) {
                // Everything the source ever sent was published before it exited.
                if self.try_deliver(source, tag, deliver)? {
                    break;
                }
                return Err(CommError::PeerExited {
                    rank: self.rank,
                    peer: source,
                });
            }
            rounds = rounds.saturating_add(1);
            if Some(rounds) == check_at && self.load.loaded() {
                // Another process takes the cores: the peer may be the thread descheduled,
                // and spinning or yielding here keeps it from running. Park.
                (spins, yields) = (rounds, 0);
            }
            if rounds < spins {
                std::hint::spin_loop();
                continue;
            }
            if rounds < spins.saturating_add(yields) {
                std::thread::yield_now();
                continue;
            }
            self.park(source, park_for);
            park_for = (park_for * 2).min(PARK_MAX);
        }
        self.spin_budget.set(if rounds < spins {
            budget.saturating_mul(2).min(wait.spins)
        } else {
            (budget / 2).max(MIN_SPINS.min(wait.spins))
        });
        Ok(())
    }

    /// Park until a sender signals (or `timeout` passes, from [`PARK`] doubling up to
    /// [`PARK_MAX`] within one wait), unless a message from `source` has already arrived or
    /// the wait must end. A park that times out with nothing from
    /// `source` checks for a deadlock ([`Shared::check_deadlock`]).
    ///
    /// Senders do not fence between publishing a message and reading `sleepers` (see
    /// [`RankCore::send_stamped`]), so a sender may read zero while its message is still on
    /// its way out of its core's store buffer, and not signal. That message was published
    /// before this rank's announcement became visible, and a store buffer drains within
    /// well under a microsecond (and on any interrupt or context switch), so it shows in
    /// the channel within [`PARK_GRACE`] of the announcement, which this rank keeps
    /// checking. Should it not, the park ends after `timeout` anyway.
    fn park(&self, source: usize, timeout: Duration) {
        let shared = &*self.shared;
        let parker = &shared.parkers[self.rank];
        let channel = Arc::clone(shared.channel(source, self.rank));
        let must_end = || {
            shared.aborted.load(Ordering::SeqCst) || shared.exited[source].load(Ordering::SeqCst)
        };
        let guard = lock(&parker.lock);
        parker.sleepers.fetch_add(1, Ordering::SeqCst);
        parker.source.store(source, Ordering::SeqCst);
        shared.parked.fetch_add(1, Ordering::SeqCst);
        let announced = std::time::Instant::now();
        let mut ready = channel.ready() || must_end();
        while !ready && announced.elapsed() < PARK_GRACE {
            std::hint::spin_loop();
            ready = channel.ready();
        }
        if !ready {
            let (guard, waited) = parker
                .wake
                .wait_timeout(guard, timeout)
                .unwrap_or_else(|e| e.into_inner());
            drop(guard);
            if waited.timed_out() && !channel.ready() {
                shared.check_deadlock();
            }
        }
        // In this order: a deadlock check that counted this rank parked sees the end of
        // its park before the rank can receive or send anything.
        shared.parked.fetch_sub(1, Ordering::SeqCst);
        shared.unparks.fetch_add(1, Ordering::SeqCst);
        parker.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// The next tag of this rank's collective sequence.
    pub(crate) fn next_tag(&self) -> Tag {
        let t = self.tag_seq.get();
        self.tag_seq.set(t.wrapping_add(1));
        COLLECTIVE_TAG_BASE | (t & (COLLECTIVE_TAG_BASE - 1))
    }
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.core.rank
    }

    fn size(&self) -> usize {
        self.core.size
    }

    #[inline]
    fn isend(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<SendRequest, CommError> {
        self.core.send_stamped(dest, tag, data, None)
    }

    #[inline]
    fn irecv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError> {
        self.core.post_recv(source, tag)
    }

    #[inline]
    fn wait_send(&self, req: SendRequest) -> Result<(), CommError> {
        self.core.complete_send(req)
    }

    #[inline]
    fn wait_recv_with(
        &self,
        req: RecvRequest,
        deliver: &mut dyn FnMut(&[u8]) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        self.core.recv_stamped(req, &mut |data, _| deliver(data))
    }

    #[inline]
    fn next_collective_tag(&self) -> Tag {
        self.core.next_tag()
    }
}

impl ThreadComm {
    /// How many ordered pairs of ranks of this universe have a channel so far: channels are
    /// created by the first send or receive between a pair, so this counts the pairs that
    /// have talked (a receive posted to a rank counts), whatever the universe's size. For
    /// tests and diagnostics of a universe's memory.
    pub fn channels_created(&self) -> usize {
        self.core.channels_created()
    }
}

#[cfg(test)]
mod tests {
    use super::WaitPolicy;

    #[test]
    fn ranks_spin_only_when_every_computing_thread_has_a_core() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(WaitPolicy::for_ranks(1, 1), WaitPolicy::DEDICATED);
        assert_eq!(WaitPolicy::for_ranks(cores, 1), WaitPolicy::DEDICATED);
        assert_eq!(WaitPolicy::for_ranks(1, cores), WaitPolicy::DEDICATED);
        assert_eq!(WaitPolicy::for_ranks(cores + 1, 1), WaitPolicy::SHARED);
        // Two ranks with a pool of `cores` workers each: the workers need every core.
        assert_eq!(WaitPolicy::for_ranks(2, cores), WaitPolicy::SHARED);
        // Zero threads counts as one (a rank always computes on its own thread).
        assert_eq!(WaitPolicy::for_ranks(cores, 0), WaitPolicy::DEDICATED);
    }
}
