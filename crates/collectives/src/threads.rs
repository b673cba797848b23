//! The `threads` backend: P ranks as OS threads of one process.
//!
//! Ranks are real threads (never rayon tasks: a blocking wait inside a rayon pool deadlocks
//! once ranks outnumber its workers). A send copies the bytes into a recycled message buffer
//! and appends it to the destination's mailbox; a receive waits for the first message from
//! the matching source and tag. Waiting spins briefly, then parks on a condition variable,
//! so runs with more ranks than cores stay fast. A panic on one rank sets a shared abort flag
//! that every waiting rank observes, so the others return [`CommError::PeerFailed`] instead of
//! hanging, and [`ThreadUniverse::run`] reports the first panic. Likewise a rank whose
//! closure has returned (say, with an error the others did not see) can send nothing more,
//! so a wait for a message from it fails with [`CommError::PeerExited`] instead of hanging.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::comm::{check_rank, Communicator, RecvRequest, SendRequest, Tag, COLLECTIVE_TAG_BASE};
use crate::CommError;

/// Busy-wait rounds (each a CPU spin hint) before a waiting rank starts yielding.
const SPINS: u32 = 256;
/// Rounds of yielding the CPU before a waiting rank parks on its condition variable.
const YIELDS: u32 = 64;
/// Longest park before re-checking the abort flag.
const PARK: Duration = Duration::from_millis(20);

struct Message {
    from: usize,
    tag: Tag,
    data: Vec<u8>,
    /// What a modeling backend attaches to the message (the `sim` backend: the sender's
    /// modeled post time); `None` on `threads`.
    stamp: Option<f64>,
}

#[derive(Default)]
struct Mailbox {
    queue: Mutex<Vec<Message>>,
    arrived: Condvar,
    /// Messages ever pushed: a waiter spins on this without taking the lock.
    arrivals: AtomicU64,
    /// Ranks parked on `arrived`; a sender signals only when this is non-zero (changed
    /// under the queue lock by the waiter, so no wake-up is lost).
    sleepers: AtomicUsize,
}

pub(crate) struct Shared {
    mailboxes: Vec<Mailbox>,
    /// Recycled message buffers, one pool per sending rank.
    pools: Vec<Mutex<Vec<Vec<u8>>>>,
    aborted: AtomicBool,
    /// Set when a rank's closure has returned (or its thread could not start): a wait for
    /// a message from it that is not already queued can never complete.
    exited: Vec<AtomicBool>,
    first_panic: Mutex<Option<(usize, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another rank panicked while holding it; the data (a queue
    // of whole messages) is still consistent, and the abort flag reports the failure.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Whether a rank has panicked (every wait must give up).
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Whether `rank`'s closure has returned (or its thread never started).
    pub(crate) fn has_exited(&self, rank: usize) -> bool {
        self.exited[rank].load(Ordering::SeqCst)
    }

    fn wake_all(&self) {
        for mb in &self.mailboxes {
            let _guard = lock(&mb.queue);
            mb.arrived.notify_all();
        }
    }

    fn exit(&self, rank: usize) {
        self.exited[rank].store(true, Ordering::SeqCst);
        self.wake_all();
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
}

impl ThreadUniverse {
    /// A universe of `size` ranks; `size` must be at least 1.
    pub fn new(size: usize) -> Result<Self, CommError> {
        if size == 0 {
            return Err(CommError::NoRanks);
        }
        Ok(Self { size })
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
        run_ranks(self.size, &|core| ThreadComm { core }, f)
    }
}

/// Run `f` on `size` ranks, each on its own OS thread with the communicator `make` builds
/// from the rank's [`RankCore`] (the machinery the `threads` and `sim` backends share:
/// mailboxes, abort on panic, exit tracking), and return the results in rank order. If any
/// rank panics, the others are released from their waits and the first panic is returned
/// as [`CommError::RankPanicked`].
pub(crate) fn run_ranks<C, R, F>(
    size: usize,
    make: &(dyn Fn(RankCore) -> C + Sync),
    f: F,
) -> Result<Vec<R>, CommError>
where
    R: Send,
    F: Fn(&C) -> R + Sync,
{
    let shared = Arc::new(Shared {
        mailboxes: (0..size).map(|_| Mailbox::default()).collect(),
        pools: (0..size).map(|_| Mutex::new(Vec::new())).collect(),
        aborted: AtomicBool::new(false),
        exited: (0..size).map(|_| AtomicBool::new(false)).collect(),
        first_panic: Mutex::new(None),
    });
    let f = &f;
    let results: Vec<Option<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let shared_rank = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name(format!("rank-{rank}"))
                    .spawn_scoped(scope, move || {
                        let shared = shared_rank;
                        let comm = make(RankCore {
                            rank,
                            size: shared.mailboxes.len(),
                            shared: Arc::clone(&shared),
                            tag_seq: Cell::new(0),
                        });
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

/// One rank's share of the thread machinery: its index, the shared mailboxes and flags, and
/// its collective tag sequence. Backends built on threads wrap it.
pub(crate) struct RankCore {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
    tag_seq: Cell<u64>,
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

    fn take_message(&self, source: usize, tag: Tag) -> Option<Message> {
        let mb = &self.shared.mailboxes[self.rank];
        let mut q = lock(&mb.queue);
        let pos = q.iter().position(|m| m.from == source && m.tag == tag)?;
        Some(q.remove(pos))
    }
}

impl RankCore {
    /// Post a buffered send of `data` to `dest`, carrying `stamp` to the receiver.
    pub(crate) fn send_stamped(
        &self,
        dest: usize,
        tag: Tag,
        data: &[u8],
        stamp: Option<f64>,
    ) -> Result<SendRequest, CommError> {
        check_rank(dest, self.size)?;
        if self.shared.aborted.load(Ordering::Relaxed) {
            return Err(CommError::PeerFailed { rank: self.rank });
        }
        let mut buf = lock(&self.shared.pools[self.rank])
            .pop()
            .unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        let mb = &self.shared.mailboxes[dest];
        lock(&mb.queue).push(Message {
            from: self.rank,
            tag,
            data: buf,
            stamp,
        });
        mb.arrivals.fetch_add(1, Ordering::SeqCst);
        if mb.sleepers.load(Ordering::SeqCst) > 0 {
            mb.arrived.notify_all();
        }
        Ok(SendRequest::new(dest))
    }

    /// Post a receive (matching happens in [`RankCore::recv_stamped`]).
    pub(crate) fn post_recv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError> {
        check_rank(source, self.size)?;
        Ok(RecvRequest::new(source, tag))
    }

    /// Complete a send (buffered: the data left with the message).
    pub(crate) fn complete_send(&self, mut req: SendRequest) -> Result<(), CommError> {
        req.done = true;
        Ok(())
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
        let mb = &self.shared.mailboxes[self.rank];
        let mut rounds = 0u32;
        let mut seen = u64::MAX;
        let msg = loop {
            // Look into the queue only when something new has arrived.
            let now = mb.arrivals.load(Ordering::SeqCst);
            if now != seen {
                seen = now;
                if let Some(m) = self.take_message(source, tag) {
                    break m;
                }
            }
            if self.shared.aborted.load(Ordering::SeqCst) {
                return Err(CommError::PeerFailed { rank: self.rank });
            }
            if self.shared.exited[source].load(Ordering::SeqCst) {
                // Everything the source ever sent was queued before it exited.
                if let Some(m) = self.take_message(source, tag) {
                    break m;
                }
                return Err(CommError::PeerExited {
                    rank: self.rank,
                    peer: source,
                });
            }
            rounds += 1;
            if rounds < SPINS {
                std::hint::spin_loop();
                continue;
            }
            if rounds < SPINS + YIELDS {
                std::thread::yield_now();
                continue;
            }
            let q = lock(&mb.queue);
            if !q.iter().any(|m| m.from == source && m.tag == tag)
                && !self.shared.aborted.load(Ordering::SeqCst)
                && !self.shared.exited[source].load(Ordering::SeqCst)
            {
                mb.sleepers.fetch_add(1, Ordering::SeqCst);
                let (q, _) = mb
                    .arrived
                    .wait_timeout(q, PARK)
                    .unwrap_or_else(|e| e.into_inner());
                mb.sleepers.fetch_sub(1, Ordering::SeqCst);
                drop(q);
            }
            seen = u64::MAX;
        };
        let result = deliver(&msg.data, msg.stamp);
        lock(&self.shared.pools[source]).push(msg.data);
        result
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

    fn isend(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<SendRequest, CommError> {
        self.core.send_stamped(dest, tag, data, None)
    }

    fn irecv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError> {
        self.core.post_recv(source, tag)
    }

    fn wait_send(&self, req: SendRequest) -> Result<(), CommError> {
        self.core.complete_send(req)
    }

    fn wait_recv_with(
        &self,
        req: RecvRequest,
        deliver: &mut dyn FnMut(&[u8]) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        self.core.recv_stamped(req, &mut |data, _| deliver(data))
    }

    fn next_collective_tag(&self) -> Tag {
        self.core.next_tag()
    }
}
