//! The driver's state: devices and their primary contexts, streams with their queues,
//! events and modules, handles, sticky errors and the counters.
//!
//! # Asynchrony
//!
//! Work queued on a stream (launches, copies, memsets, event records, asynchronous frees)
//! runs when the host synchronises on it: `cuStreamSynchronize`, `cuEventSynchronize` on an
//! event recorded in it, `cuCtxSynchronize`, a synchronous copy, `cuMemFree` (destroying
//! a stream or its context runs its work too, but for copies to the host, which no
//! synchronisation can observe any more). Not before: a copy to the host lands at the next synchronisation, also from
//! pageable memory, where the real driver would return only after the copy (the emulator
//! holds the program to the synchronisation it needs with pinned memory). A copy from the
//! host is staged when it is queued, as the driver does for pageable memory. The thread
//! that synchronises runs the work, so streams of different ranks run on their own
//! threads, independently. A query (`cuEventQuery`, `cuStreamQuery`) runs nothing; a
//! program that polls one event or stream 10,000 times without synchronising gets its
//! work run, as a GPU would have run it eventually.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

use cudarc::driver::sys::CUresult;

use crate::exec::{self, Launch};
use crate::{fail, memory, memory_mut, Fail};

/// Handle kinds, in the top bits of a handle (handles are opaque pointers to the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Context = 1,
    Stream = 2,
    Event = 3,
    Module = 4,
    Function = 5,
}

const KIND_SHIFT: u32 = 48;

pub(crate) fn handle(kind: Kind, id: usize) -> usize {
    ((kind as usize) << KIND_SHIFT) | id
}

/// Queries of one event or stream in a row after which its work runs.
const PROGRESS_QUERIES: u32 = 10_000;

/// What the process has done through the driver (see `castack_emu_stats`).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) launches: AtomicU64,
    pub(crate) blocking_calls: AtomicU64,
    pub(crate) htod_bytes: AtomicU64,
    pub(crate) htod_copies: AtomicU64,
    pub(crate) dtoh_bytes: AtomicU64,
    pub(crate) dtoh_copies: AtomicU64,
    pub(crate) dtod_bytes: AtomicU64,
    pub(crate) allocations: AtomicU64,
    pub(crate) frees: AtomicU64,
    pub(crate) threads_run: AtomicU64,
}

pub(crate) static COUNTERS: Counters = Counters {
    launches: AtomicU64::new(0),
    blocking_calls: AtomicU64::new(0),
    htod_bytes: AtomicU64::new(0),
    htod_copies: AtomicU64::new(0),
    dtoh_bytes: AtomicU64::new(0),
    dtoh_copies: AtomicU64::new(0),
    dtod_bytes: AtomicU64::new(0),
    allocations: AtomicU64::new(0),
    frees: AtomicU64::new(0),
    threads_run: AtomicU64::new(0),
};

pub(crate) fn count(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// One unit of queued work.
#[derive(Debug)]
pub(crate) enum Op {
    Launch(Box<Launch>),
    HtoD {
        dst: usize,
        data: Vec<u8>,
    },
    DtoH {
        dst: usize,
        src: usize,
        len: usize,
    },
    DtoD {
        dst: usize,
        src: usize,
        len: usize,
    },
    Memset {
        dst: usize,
        value: u32,
        elem: usize,
        count: usize,
    },
    /// Completes `event` (if this is still its last record) at the time it runs.
    Record {
        event: Arc<Event>,
    },
    /// Waits until `stream` has run its work up to `seq` (an event's record).
    Wait {
        stream: Weak<Stream>,
        seq: u64,
    },
    Free {
        ptr: usize,
    },
}

/// A context (the primary context of a device).
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) handle: usize,
    pub(crate) device: i32,
    /// The first error of asynchronous work: every later call in the context returns it.
    sticky: Mutex<Option<Fail>>,
    pub(crate) null_stream: Arc<Stream>,
    streams: Mutex<Vec<Weak<Stream>>>,
}

impl Context {
    /// `Err` with the sticky error, if any.
    pub(crate) fn check(&self) -> Result<(), Fail> {
        match &*lock(&self.sticky) {
            Some(f) => Err(f.clone()),
            None => Ok(()),
        }
    }

    fn set_sticky(&self, f: &Fail) {
        let mut s = lock(&self.sticky);
        if s.is_none() {
            *s = Some(f.clone());
        }
    }

    /// Every live stream of the context, the null stream first.
    fn streams(&self) -> Vec<Arc<Stream>> {
        let mut v = vec![self.null_stream.clone()];
        let mut list = lock(&self.streams);
        list.retain(|w| w.strong_count() > 0);
        v.extend(list.iter().filter_map(Weak::upgrade));
        v
    }

    /// Run all queued work of the context.
    pub(crate) fn drain_all(&self) -> Result<(), Fail> {
        for s in self.streams() {
            s.drain()?;
        }
        self.check()
    }

    /// Run the queued work of a context being destroyed ([`Stream::drain_unobserved`]).
    pub(crate) fn drain_unobserved(&self) {
        for s in self.streams() {
            let _ = s.drain_unobserved();
        }
    }
}

/// Signalled whenever a stream has run more work (waiters across streams sleep on it).
static PROGRESS: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

fn notify_progress() {
    let _g = lock(&PROGRESS.0);
    PROGRESS.1.notify_all();
}

/// A stream: a queue of work, run in order by the thread that synchronises. Every op gets
/// a sequence number when it is queued; `done` is the number of the last one that ran.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) handle: usize,
    pub(crate) ctx: Weak<Context>,
    queue: Mutex<VecDeque<(u64, Op)>>,
    /// The number of the last op queued.
    pushed: AtomicU64,
    /// The number of the last op run (or dropped after an error).
    done: AtomicU64,
    /// Held while running work, so a stream's work never runs on two threads at once.
    running: Mutex<()>,
    queries: AtomicU32,
    /// Launches queued on this stream (their seeds and numbers in messages).
    pub(crate) launches: AtomicU64,
}

impl Stream {
    fn new(handle: usize, ctx: Weak<Context>) -> Stream {
        Stream {
            handle,
            ctx,
            queue: Mutex::new(VecDeque::new()),
            pushed: AtomicU64::new(0),
            done: AtomicU64::new(0),
            running: Mutex::new(()),
            queries: AtomicU32::new(0),
            launches: AtomicU64::new(0),
        }
    }

    pub(crate) fn context(&self) -> Result<Arc<Context>, Fail> {
        self.ctx.upgrade().ok_or_else(|| {
            fail(
                CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED,
                format!("stream {:#x}: its context was destroyed", self.handle),
            )
        })
    }

    /// Queue `op`; its sequence number.
    pub(crate) fn push(&self, op: Op) -> u64 {
        self.queries.store(0, Ordering::Relaxed);
        let mut q = lock(&self.queue);
        let seq = self.pushed.load(Ordering::Relaxed) + 1;
        self.pushed.store(seq, Ordering::Release);
        q.push_back((seq, op));
        seq
    }

    /// Whether every queued op has run.
    pub(crate) fn is_idle(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.pushed.load(Ordering::Acquire)
    }

    /// Whether the op numbered `seq` has run.
    pub(crate) fn reached(&self, seq: u64) -> bool {
        self.done.load(Ordering::Acquire) >= seq
    }

    /// Run everything queued so far. The first error becomes the context's sticky error
    /// and the rest of the queue is dropped.
    pub(crate) fn drain(&self) -> Result<(), Fail> {
        self.run_to(self.pushed.load(Ordering::Acquire), true)
    }

    /// Run the queued work of a stream or context being destroyed: as [`Stream::drain`],
    /// but copies to the host are dropped (no host synchronisation can see them any more,
    /// and their buffers may be gone).
    pub(crate) fn drain_unobserved(&self) -> Result<(), Fail> {
        self.run_to(self.pushed.load(Ordering::Acquire), false)
    }

    /// Run the work up to op `target`. When another thread is running this stream, wait
    /// for it instead (never holding two streams' run locks while waiting for one: waits
    /// across streams cannot deadlock unless the program's own dependencies are circular).
    pub(crate) fn run_to(&self, target: u64, to_host: bool) -> Result<(), Fail> {
        loop {
            if self.reached(target) {
                return Ok(());
            }
            match self.running.try_lock() {
                Ok(guard) => {
                    let r = self.run_ops(target, to_host);
                    drop(guard);
                    notify_progress();
                    return r;
                }
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    drop(p.into_inner());
                    self.running.clear_poison();
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    let g = lock(&PROGRESS.0);
                    if !self.reached(target) {
                        let _ = PROGRESS
                            .1
                            .wait_timeout(g, std::time::Duration::from_millis(5));
                    }
                }
            }
        }
    }

    fn run_ops(&self, target: u64, to_host: bool) -> Result<(), Fail> {
        loop {
            if self.reached(target) {
                return Ok(());
            }
            let Some((seq, op)) = lock(&self.queue).pop_front() else {
                return Ok(());
            };
            let result = if !to_host && matches!(op, Op::DtoH { .. }) {
                Ok(())
            } else {
                run_op(op)
            };
            match result {
                Ok(()) => {
                    self.done.store(seq, Ordering::Release);
                    notify_progress();
                }
                Err(f) => {
                    if let Some(c) = self.ctx.upgrade() {
                        c.set_sticky(&f);
                    }
                    let mut q = lock(&self.queue);
                    q.clear();
                    self.done
                        .store(self.pushed.load(Ordering::Acquire), Ordering::Release);
                    drop(q);
                    notify_progress();
                    return Err(f);
                }
            }
        }
    }

    /// A query: whether the stream is idle (after [`PROGRESS_QUERIES`] queries in a row,
    /// its work runs first).
    pub(crate) fn query(&self) -> Result<bool, Fail> {
        if self.is_idle() {
            return Ok(true);
        }
        if self.queries.fetch_add(1, Ordering::Relaxed) + 1 >= PROGRESS_QUERIES {
            self.drain()?;
            return Ok(true);
        }
        Ok(false)
    }
}

/// `CU_EVENT_DISABLE_TIMING`.
pub(crate) const EVENT_DISABLE_TIMING: u32 = 0x2;

/// An event: complete once the work queued before its last record has run.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) handle: usize,
    pub(crate) ctx: Weak<Context>,
    /// Created without `CU_EVENT_DISABLE_TIMING`.
    pub(crate) timing: bool,
    state: Mutex<EventState>,
}

#[derive(Debug, Default)]
struct EventState {
    /// The stream of the last record and that record's sequence number there.
    last: Option<(Weak<Stream>, u64)>,
    at: Option<Instant>,
    queries: u32,
}

impl Event {
    pub(crate) fn record(self: &Arc<Self>, stream: &Arc<Stream>) {
        // Hold the state while queueing, so the record op never runs before `last` names it.
        let mut st = lock(&self.state);
        let seq = stream.push(Op::Record {
            event: self.clone(),
        });
        st.last = Some((Arc::downgrade(stream), seq));
        st.at = None;
        st.queries = 0;
    }

    /// The stream and number of the last record (`None`: never recorded).
    pub(crate) fn last_record(&self) -> Option<(Weak<Stream>, u64)> {
        lock(&self.state).last.clone()
    }

    /// Whether the event is complete (never recorded, or its stream gone: complete).
    fn complete(&self) -> bool {
        match self.last_record() {
            None => true,
            Some((w, seq)) => w.upgrade().is_none_or(|s| s.reached(seq)),
        }
    }

    /// Run the work before the event's last record (a synchronisation).
    pub(crate) fn synchronize(&self) -> Result<(), Fail> {
        if let Some((w, seq)) = self.last_record() {
            if let Some(s) = w.upgrade() {
                s.run_to(seq, true)?;
            }
        }
        Ok(())
    }

    /// A query (see [`Stream::query`]).
    pub(crate) fn query(&self) -> Result<bool, Fail> {
        if self.complete() {
            return Ok(true);
        }
        let polled = {
            let mut s = lock(&self.state);
            s.queries += 1;
            s.queries >= PROGRESS_QUERIES
        };
        if polled {
            self.synchronize()?;
            return Ok(self.complete());
        }
        Ok(false)
    }

    /// When the last record ran, once it has.
    pub(crate) fn time(&self) -> Option<Instant> {
        if self.complete() {
            lock(&self.state).at
        } else {
            None
        }
    }

    pub(crate) fn recorded(&self) -> bool {
        lock(&self.state).last.is_some()
    }
}

/// A loaded module: its entries and their host kernels.
#[derive(Debug)]
pub(crate) struct Module {
    pub(crate) ctx: Weak<Context>,
    /// PTX entry name -> host kernel index.
    pub(crate) entries: HashMap<String, usize>,
    pub(crate) functions: Mutex<HashMap<String, usize>>,
}

/// A function handle: a module's entry.
#[derive(Debug)]
pub(crate) struct Function {
    pub(crate) module: Weak<Module>,
    pub(crate) kernel: usize,
}

/// Every handle, by kind.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    pub(crate) next: usize,
    pub(crate) contexts: HashMap<usize, Arc<Context>>,
    pub(crate) streams: HashMap<usize, Arc<Stream>>,
    pub(crate) events: HashMap<usize, Arc<Event>>,
    pub(crate) modules: HashMap<usize, Arc<Module>>,
    pub(crate) functions: HashMap<usize, Arc<Function>>,
    /// Primary context of each device and its retain count.
    pub(crate) primary: Vec<Option<(usize, u32)>>,
}

impl Handles {
    pub(crate) fn new_handle(&mut self, kind: Kind) -> usize {
        self.next += 1;
        handle(kind, self.next)
    }

    /// A new primary context for `device`.
    pub(crate) fn new_context(&mut self, device: i32) -> Arc<Context> {
        let h = self.new_handle(Kind::Context);
        let sh = self.new_handle(Kind::Stream);
        let ctx = Arc::new_cyclic(|w: &Weak<Context>| Context {
            handle: h,
            device,
            sticky: Mutex::new(None),
            null_stream: Arc::new(Stream::new(sh, w.clone())),
            streams: Mutex::new(Vec::new()),
        });
        self.contexts.insert(h, ctx.clone());
        ctx
    }

    pub(crate) fn new_stream(&mut self, ctx: &Arc<Context>) -> Arc<Stream> {
        let h = self.new_handle(Kind::Stream);
        let s = Arc::new(Stream::new(h, Arc::downgrade(ctx)));
        lock(&ctx.streams).push(Arc::downgrade(&s));
        self.streams.insert(h, s.clone());
        s
    }

    pub(crate) fn new_event(&mut self, ctx: &Arc<Context>, flags: u32) -> Arc<Event> {
        let h = self.new_handle(Kind::Event);
        let e = Arc::new(Event {
            handle: h,
            ctx: Arc::downgrade(ctx),
            timing: flags & EVENT_DISABLE_TIMING == 0,
            state: Mutex::new(EventState::default()),
        });
        self.events.insert(h, e.clone());
        e
    }

    /// Forget a context and everything made in it (its work has run).
    pub(crate) fn forget_context(&mut self, ctx: usize) {
        self.contexts.remove(&ctx);
        let of = |w: &Weak<Context>| w.upgrade().is_none_or(|c| c.handle == ctx);
        self.streams.retain(|_, s| !of(&s.ctx));
        self.events.retain(|_, e| !of(&e.ctx));
        self.modules.retain(|_, m| !of(&m.ctx));
        self.functions.retain(|_, f| f.module.strong_count() > 0);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Run one op (on the synchronising thread).
fn run_op(op: Op) -> Result<(), Fail> {
    match op {
        Op::Launch(l) => {
            let threads = l
                .grid
                .iter()
                .chain(&l.block)
                .map(|&d| u64::from(d))
                .product();
            exec::run(&l)?;
            count(&COUNTERS.threads_run, threads);
            Ok(())
        }
        Op::HtoD { dst, data } => {
            live(dst, data.len(), "copy to the device (destination)")?;
            // SAFETY: [dst, dst + len) is live device memory (checked), data a separate
            // host buffer.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len()) };
            Ok(())
        }
        Op::DtoH { dst, src, len } => {
            live(src, len, "copy to the host (source)")?;
            // SAFETY: the source is live device memory (checked); the caller promised the
            // host buffer stays valid until it synchronises.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            Ok(())
        }
        Op::DtoD { dst, src, len } => {
            live(src, len, "device-to-device copy (source)")?;
            live(dst, len, "device-to-device copy (destination)")?;
            // SAFETY: both ranges are live device memory (checked).
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            Ok(())
        }
        Op::Memset {
            dst,
            value,
            elem,
            count,
        } => {
            let len = elem * count;
            live(dst, len, "memset")?;
            // SAFETY: live device memory (checked).
            unsafe {
                if elem == 1 {
                    std::ptr::write_bytes(dst as *mut u8, value as u8, len);
                } else {
                    let p = dst as *mut u32;
                    for i in 0..count {
                        p.add(i).write_unaligned(value);
                    }
                }
            }
            Ok(())
        }
        Op::Record { event } => {
            lock(&event.state).at = Some(Instant::now());
            Ok(())
        }
        Op::Wait { stream, seq } => match stream.upgrade() {
            Some(s) => s.run_to(seq, true),
            None => Ok(()),
        },
        Op::Free { ptr } => {
            memory_mut().free(ptr).map_err(|e| {
                fail(
                    CUresult::CUDA_ERROR_INVALID_VALUE,
                    format!("cuMemFreeAsync: {e}"),
                )
            })?;
            count(&COUNTERS.frees, 1);
            Ok(())
        }
    }
}

/// `Err` unless `[addr, addr + len)` is one live allocation (when the op runs: a free
/// queued before it has released it).
fn live(addr: usize, len: usize, what: &str) -> Result<(), Fail> {
    let m = memory();
    if len == 0 || m.is_live(addr, len) {
        Ok(())
    } else {
        Err(fail(
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            format!("{what}: {}", m.describe(addr, len)),
        ))
    }
}
