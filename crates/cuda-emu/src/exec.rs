//! Kernel execution: every thread of a block is a fiber (a stackful coroutine, corosensei),
//! so `__syncthreads` and warp shuffles keep CUDA's semantics.
//!
//! # Order
//!
//! A launch's blocks run in an order shuffled from the launch's seed (the
//! `CASTACK_CUDA_EMU_SEED` mixed with the launch's number on its stream): an
//! order-dependent kernel gives seed-dependent results. A small launch runs on the thread
//! that executes the stream; the blocks of a large one (at least 2^15 GPU threads) are
//! taken in that order by a pool of worker threads (`CASTACK_CUDA_EMU_THREADS`, default the
//! host's parallelism), each running one block at a time. Within a block, time is cut into
//! *epochs* at barriers: in each epoch the warps run in an order shuffled from the seed and
//! the block (so a seed reproduces a run, whichever worker takes the block) and, within a
//! warp, lane 31 first and lane 0 last, each thread until it reaches `__syncthreads` (it
//! suspends) or returns. The next epoch starts when every thread of the block has arrived;
//! a thread that returned while others wait at a barrier is a fault (CUDA requires every
//! thread of the block to reach it).
//!
//! # Shuffles
//!
//! `__shfl_down_sync(mask, v, delta, width)` reads the `v` that lane `lane + delta` (in the
//! same `width`-segment, else the caller's own `v`) passed to the same shuffle: the s-th
//! shuffle of both lanes since the last barrier. A source lane is a higher lane, so it has
//! already run through the epoch, and its s-th value is in its history: this is CUDA's
//! result for converged lanes, without switching fibers at every shuffle (only
//! `shfl_down` is provided; an `xor` or `up` shuffle would need lanes to wait for lower
//! lanes and fails to compile in `cxx/prelude.h`). Errors a GPU would make undefined are
//! faults here: a lane outside `mask`, a mask naming lanes outside the block, a source lane
//! that did not reach the shuffle, lanes of one mask that made different numbers of
//! shuffles in an epoch, a width that is not a power of two up to 32.
//!
//! # Memory accesses
//!
//! Every load and store of kernel code is checked (`castack_emu_check` in `cxx/prelude.h`,
//! then [`castack_emu_access`]): allowed inside a live device allocation (the launch's
//! arguments' allocations are looked up first), the running thread's own stack, or one of
//! the kernels' `__shared__` arrays in this OS thread's copy (their exact extents come from
//! the library's symbol table: `shared_arrays`; they are poisoned at every block's
//! start). Anything else is a fault that names the kernel, the block and thread, the access
//! and what the address is (past the end of allocation #N, freed, host memory): the thread
//! stops there, before the access, and the launch is abandoned.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys::CUresult;

use crate::{fail, memory, Fail};

/// The code of a fault of a memory access.
const ILLEGAL: CUresult = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
/// The code of a fault of a barrier or shuffle (undefined behaviour on a GPU).
const FAILED: CUresult = CUresult::CUDA_ERROR_LAUNCH_FAILED;

use corosensei::stack::{Stack, StackPointer};
use corosensei::{Coroutine, CoroutineResult, Yielder};

/// A kernel's host build, as `cxx/host_kernels.cpp` registers it.
#[repr(C)]
struct CKernel {
    name: *const c_char,
    invoke: unsafe extern "C" fn(*const *mut c_void),
    nparams: u32,
    sizes: *const u32,
    pointer: *const u8,
}

extern "C" {
    static castack_emu_kernels: [CKernel; 0];
    static castack_emu_kernel_count: usize;
}

/// One host kernel.
#[derive(Debug)]
pub(crate) struct Kernel {
    /// Its `extern "C"` name, the PTX entry's.
    pub(crate) name: String,
    invoke: unsafe extern "C" fn(*const *mut c_void),
    /// Size in bytes of each parameter.
    pub(crate) sizes: Vec<usize>,
    /// Whether each parameter is a pointer.
    pub(crate) pointer: Vec<bool>,
}

/// Every host kernel.
pub(crate) fn kernels() -> &'static [Kernel] {
    static K: OnceLock<Vec<Kernel>> = OnceLock::new();
    K.get_or_init(|| {
        check_layout();
        // SAFETY: the table and its count are defined together in host_kernels.cpp; each
        // entry's arrays hold `nparams` values and its name is a static C string.
        unsafe {
            let table =
                std::slice::from_raw_parts(castack_emu_kernels.as_ptr(), castack_emu_kernel_count);
            table
                .iter()
                .map(|k| {
                    let n = k.nparams as usize;
                    Kernel {
                        name: CStr::from_ptr(k.name).to_string_lossy().into_owned(),
                        invoke: k.invoke,
                        sizes: std::slice::from_raw_parts(k.sizes, n)
                            .iter()
                            .map(|&s| s as usize)
                            .collect(),
                        pointer: std::slice::from_raw_parts(k.pointer, n)
                            .iter()
                            .map(|&p| p != 0)
                            .collect(),
                    }
                })
                .collect()
        }
    })
}

/// The launch limits of an H200 (CUDA C++ Programming Guide, compute capability 9.0):
/// grid x up to 2^31 - 1, y and z up to 65535; blocks up to 1024 threads, 1024 x 1024 x 64;
/// 48 KiB of shared memory per block without opting in.
pub(crate) const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65_535, 65_535];
/// Most threads per block, and per block dimension.
pub(crate) const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];
/// Most threads per block.
pub(crate) const MAX_THREADS: u32 = 1024;
/// Shared memory per block without opting in.
pub(crate) const MAX_SHARED: u32 = 48 * 1024;

/// Size and alignment of a fiber's stack region: a guard page at the bottom, the fiber's
/// [`Header`] at the top, the stack in between. The alignment lets kernel callbacks find
/// the running fiber's header from the address of any local variable, without TLS.
const REGION: usize = 128 * 1024;
/// Shuffle values a fiber keeps in its header per epoch (more spill to the heap).
const HIST: usize = 96;
const MAGIC: u64 = 0x6361_7374_6163_6b21;
const WARP: usize = 32;

/// A queued kernel launch, its parameters copied when it was queued.
#[derive(Debug)]
pub(crate) struct Launch {
    /// The kernel.
    pub(crate) kernel: &'static Kernel,
    /// Grid and block dimensions.
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    /// Parameter values, each starting at a multiple of 8 bytes (`offsets`, in words).
    pub(crate) words: Vec<u64>,
    pub(crate) offsets: Vec<usize>,
    /// Seed of the block and warp orders.
    pub(crate) seed: u64,
    /// The launch's number on its stream (1 for the first), for messages.
    pub(crate) number: u64,
}

impl Launch {
    /// The value of pointer parameter `i` (8 bytes).
    pub(crate) fn pointer_arg(&self, i: usize) -> usize {
        self.words[self.offsets[i]] as usize
    }
}

/// SplitMix64 (Steele, Lea, Flood, OOPSLA 2014): the block and warp orders. Kept here
/// rather than taken from a crate: six lines, and the orders must not change with a
/// dependency's version.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the bias of the modulo is irrelevant here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Why a fiber gave control back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    /// The thread reached `__syncthreads`.
    Barrier,
    /// The thread returned from the kernel; the fiber waits for its next thread.
    Done,
    /// The thread stopped on a fault (it is abandoned).
    Fault,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    AtBarrier,
    Done,
}

/// CUDA's index vector.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Dim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

fn unlinear(i: u64, d: [u32; 3]) -> Dim3 {
    let (dx, dy) = (u64::from(d[0]), u64::from(d[1]));
    Dim3 {
        x: (i % dx) as u32,
        y: (i / dx % dy) as u32,
        z: (i / (dx * dy)) as u32,
    }
}

/// What a fiber knows of the thread it runs, at the top of its stack region: the mirror of
/// `struct castack_emu_fiber` in `cxx/prelude.h` (checked by [`check_layout`]).
#[repr(C)]
struct Header {
    magic: u64,
    exec: *mut Exec,
    /// The thread's linear index in its block.
    t: u64,
    tid: Dim3,
    lane: u32,
    yielder: *const Yielder<(), Signal>,
    nshfl: *mut u32,
    hist: *mut u64,
    full_warp: u64,
    bid: Dim3,
    bdim: Dim3,
    gdim: Dim3,
    pad1: u32,
    ranges: *const [u64; 2],
    nranges: *const u64,
    shared: *const [u64; 2],
    nshared: u64,
}

const HEADER_BYTES: usize = 256;

extern "C" {
    fn castack_emu_layout(which: u64) -> u64;
}

/// The C++ side sees the same header layout (else the process stops with a message).
pub(crate) fn check_layout() {
    let want = [
        std::mem::size_of::<Header>(),
        REGION,
        HEADER_BYTES,
        HIST,
        std::mem::offset_of!(Header, ranges),
        std::mem::offset_of!(Header, nshared),
        std::mem::offset_of!(Header, full_warp),
    ];
    for (i, &w) in want.iter().enumerate() {
        // SAFETY: a pure function of the C++ side.
        let got = unsafe { castack_emu_layout(i as u64) } as usize;
        if got != w || std::mem::size_of::<Header>() > HEADER_BYTES {
            eprintln!(
                "castack-cuda-emu: fiber header layout {i} differs between cxx/prelude.h                  ({got}) and src/exec.rs ({w})"
            );
            std::process::abort();
        }
    }
}

/// A fiber's stack region ([`REGION`] bytes, aligned to [`REGION`]).
#[derive(Debug)]
struct FiberStack {
    region: usize,
}

impl FiberStack {
    fn new() -> Result<FiberStack, String> {
        // Map twice the size and keep the aligned half.
        // SAFETY: an anonymous private mapping, then unmapping its unaligned ends.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * REGION,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return Err(format!(
                    "could not map a fiber stack: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let start = p as usize;
            let region = (start + REGION - 1) & !(REGION - 1);
            if region > start {
                libc::munmap(start as *mut c_void, region - start);
            }
            let end = start + 2 * REGION;
            if end > region + REGION {
                libc::munmap((region + REGION) as *mut c_void, end - region - REGION);
            }
            // The guard page.
            libc::mprotect(region as *mut c_void, memory::PAGE, libc::PROT_NONE);
            let h = (region + REGION - HEADER_BYTES) as *mut Header;
            h.write(Header {
                magic: MAGIC,
                exec: std::ptr::null_mut(),
                t: 0,
                tid: Dim3::default(),
                lane: 0,
                yielder: std::ptr::null(),
                nshfl: std::ptr::null_mut(),
                hist: std::ptr::null_mut(),
                full_warp: 0,
                bid: Dim3::default(),
                bdim: Dim3::default(),
                gdim: Dim3::default(),
                pad1: 0,
                ranges: std::ptr::null(),
                nranges: std::ptr::null(),
                shared: std::ptr::null(),
                nshared: 0,
            });
            Ok(FiberStack { region })
        }
    }

    fn header(&self) -> *mut Header {
        (self.region + REGION - HEADER_BYTES) as *mut Header
    }
}

impl Drop for FiberStack {
    fn drop(&mut self) {
        // SAFETY: the region mapped by `new`, no longer used by a fiber.
        unsafe { libc::munmap(self.region as *mut c_void, REGION) };
    }
}

// SAFETY: the region has a guard page at the bottom (`limit`), more than MIN_STACK_SIZE
// usable bytes, and both ends are 64-byte aligned.
unsafe impl Stack for FiberStack {
    fn base(&self) -> StackPointer {
        StackPointer::new(self.region + REGION - HEADER_BYTES).expect("non-null")
    }

    fn limit(&self) -> StackPointer {
        StackPointer::new(self.region).expect("non-null")
    }
}

type Fiber = Coroutine<(), Signal, (), FiberStack>;

/// The header of the fiber running this code (kernel callbacks only run on fibers).
#[inline(always)]
fn header() -> *mut Header {
    let marker = 0u8;
    let sp = std::hint::black_box(&marker) as *const u8 as usize;
    let h = ((sp & !(REGION - 1)) + REGION - HEADER_BYTES) as *mut Header;
    // SAFETY: on a fiber this is its header; the magic catches a call from elsewhere.
    if unsafe { (*h).magic } != MAGIC {
        eprintln!("castack-cuda-emu: a kernel callback ran outside a kernel thread");
        std::process::abort();
    }
    h
}

fn fiber_body(y: &Yielder<(), Signal>) {
    let h = header();
    // SAFETY: this fiber's header; the scheduler set `exec` before resuming it.
    unsafe { (*h).yielder = y };
    loop {
        // SAFETY: as above; `params` holds one pointer per kernel parameter.
        unsafe {
            let ex = (*h).exec;
            ((*(*ex).launch).kernel.invoke)((*ex).params);
        }
        y.suspend(Signal::Done);
    }
}

/// A fiber and its header (at the top of its stack, which never moves).
struct Slot {
    co: Fiber,
    header: *mut Header,
}

fn new_fiber(stack: FiberStack) -> Slot {
    let header = stack.header();
    Slot {
        co: Coroutine::with_stack(stack, |y, ()| fiber_body(y)),
        header,
    }
}

/// What a launch shares between the workers that run its blocks.
struct Shared<'a> {
    launch: &'a Launch,
    params: Vec<*mut c_void>,
    /// The allocations of the pointer arguments, as (start, end).
    ranges: Vec<[u64; 2]>,
    order: Order,
    /// The next index into `order` to run.
    next: AtomicU64,
    /// Set by the first fault: the other workers stop.
    stop: AtomicBool,
}

// SAFETY: `params` points into the launch's copied parameter words, which the kernels only
// read; everything else is Sync.
unsafe impl Sync for Shared<'_> {}

/// The order blocks run in: a shuffled list, or an affine permutation of a large grid.
enum Order {
    List(Vec<u64>),
    Affine { a: u64, c: u64, n: u64 },
}

impl Order {
    fn new(n: u64, rng: &mut Rng) -> Order {
        if n <= 1 << 16 {
            let mut order: Vec<u64> = (0..n).collect();
            rng.shuffle(&mut order);
            Order::List(order)
        } else {
            // b -> (a b + c) mod n with gcd(a, n) = 1.
            let mut a = rng.below(n - 1) + 1;
            while gcd(a, n) != 1 {
                a = rng.below(n - 1) + 1;
            }
            Order::Affine {
                a,
                c: rng.below(n),
                n,
            }
        }
    }

    fn len(&self) -> u64 {
        match self {
            Order::List(v) => v.len() as u64,
            Order::Affine { n, .. } => *n,
        }
    }

    fn get(&self, i: u64) -> u64 {
        match self {
            Order::List(v) => v[i as usize],
            Order::Affine { a, c, n } => {
                ((u128::from(*a) * u128::from(i) + u128::from(*c)) % u128::from(*n)) as u64
            }
        }
    }
}

/// The state of one worker of a launch (an OS thread running its blocks one at a time).
struct Exec {
    launch: *const Launch,
    params: *const *mut c_void,
    bid: Dim3,
    nthreads: usize,
    /// Header of each thread's fiber (thread t runs on fiber t of this OS thread).
    headers: Vec<*mut Header>,
    state: Vec<State>,
    /// Shuffles each thread made since the last barrier.
    nshfl: Vec<u32>,
    /// The first [`HIST`] values each thread passed to them, at
    /// `(warp * HIST + s) * 32 + lane` (a warp's s-th values side by side).
    hist: Vec<u64>,
    /// Shuffle values past the first [`HIST`] of each thread in this epoch.
    spill: Vec<Vec<u64>>,
    /// Union of the masks of each warp's shuffles that took the slow path in this epoch.
    warp_mask: Vec<u32>,
    /// Live allocations the launch touched, as (start, end): the first `nranges`.
    ranges: [[u64; 2]; MAX_RANGES],
    nranges: u64,
    /// This OS thread's `__shared__` arrays, as (start, end).
    shared: Vec<[u64; 2]>,
    fault: Option<Fail>,
}

/// Allocations a worker remembers for the fast access check (more are looked up).
const MAX_RANGES: usize = 32;

/// Launches with fewer GPU threads than this run on the synchronising thread alone.
const PARALLEL_THREADS: u64 = 1 << 15;

/// The workers that run the blocks of large launches (`CASTACK_CUDA_EMU_THREADS`, default
/// the host's parallelism); `None` with one.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = std::env::var("CASTACK_CUDA_EMU_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        (n > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(|i| format!("castack-cuda-emu-{i}"))
                    .build()
                    .ok()
            })
            .flatten()
    })
    .as_ref()
}

thread_local! {
    /// This OS thread's fibers, reused by every launch it runs.
    static FIBERS: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

/// Offsets and sizes in this library's TLS block of the kernels' `__shared__` arrays, read
/// from its ELF symbol table: they are the TLS symbols of C++ function-local statics (names
/// `_ZZ...`), which in kernel code only `__shared__` declares. Empty when the symbol table
/// cannot be read (every shared access is then reported; the library is never stripped).
fn shared_arrays() -> &'static [(u64, u64)] {
    static ARRAYS: OnceLock<Vec<(u64, u64)>> = OnceLock::new();
    ARRAYS.get_or_init(|| {
        use object::{Object, ObjectSymbol, SymbolKind};
        let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
        // SAFETY: dladdr fills `info` for an address inside a loaded object.
        let found = unsafe {
            libc::dladdr(
                shared_arrays as *const () as *const c_void,
                info.as_mut_ptr(),
            )
        };
        // SAFETY: dladdr succeeded (non-zero), so dli_fname is a NUL-terminated path.
        let path = (found != 0)
            .then(|| unsafe { CStr::from_ptr(info.assume_init().dli_fname) })
            .map(|c| std::path::PathBuf::from(c.to_string_lossy().into_owned()));
        let arrays: Vec<(u64, u64)> = path
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|data| {
                let file = object::File::parse(&*data).ok()?;
                Some(
                    file.symbols()
                        .filter(|s| {
                            s.kind() == SymbolKind::Tls
                                && s.name().is_ok_and(|n| n.starts_with("_ZZ"))
                        })
                        .map(|s| (s.address(), s.size()))
                        .collect(),
                )
            })
            .unwrap_or_default();
        if arrays.is_empty() {
            eprintln!(
                "castack-cuda-emu: the kernels' __shared__ arrays were not found in the \
                 library's symbol table: every shared-memory access will be reported"
            );
        }
        arrays
    })
}

/// This OS thread's `__shared__` arrays, as (start, end): the offsets of [`shared_arrays`]
/// in this thread's copy of the library's TLS block (found with `dl_iterate_phdr`).
fn shared_ranges() -> Vec<[u64; 2]> {
    thread_local! {
        static RANGES: RefCell<Option<Vec<[u64; 2]>>> = const { RefCell::new(None) };
    }
    if let Some(r) = RANGES.with(|r| r.borrow().clone()) {
        return r;
    }
    struct Find {
        marker: usize,
        base: Option<usize>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: called by dl_iterate_phdr with a valid info and our `Find`.
        unsafe {
            let f = &mut *(data as *mut Find);
            let info = &*info;
            let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum));
            let base = info.dlpi_addr as usize;
            let ours = phdrs.iter().any(|p| {
                p.p_type == libc::PT_LOAD
                    && f.marker >= base + p.p_vaddr as usize
                    && f.marker < base + (p.p_vaddr + p.p_memsz) as usize
            });
            if !ours {
                return 0;
            }
            let data = info.dlpi_tls_data as usize;
            if data != 0 {
                f.base = Some(data);
            }
            1
        }
    }
    // Touch this library's TLS so that this thread's block is allocated.
    RANGES.with(|r| drop(r.borrow()));
    let mut f = Find {
        marker: shared_ranges as *const () as usize,
        base: None,
    };
    // SAFETY: `visit` only reads what dl_iterate_phdr hands it.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut f as *mut Find as *mut c_void) };
    let ranges: Vec<[u64; 2]> = match f.base {
        Some(base) => shared_arrays()
            .iter()
            .map(|&(off, len)| [base as u64 + off, base as u64 + off + len])
            .collect(),
        None => {
            eprintln!(
                "castack-cuda-emu: this thread's TLS block was not found: every shared-memory \
                 access will be reported"
            );
            Vec::new()
        }
    };
    RANGES.with(|r| *r.borrow_mut() = Some(ranges.clone()));
    ranges
}

/// Run `launch` to completion; `Err` describes the first fault (`CUDA_ERROR_ILLEGAL_ADDRESS`
/// for a memory access, `CUDA_ERROR_LAUNCH_FAILED` for a barrier or shuffle a GPU would
/// leave undefined). A panic of the scheduler (an emulator bug) stops the process: fibers
/// left inside a kernel must never be resumed by the next launch.
pub(crate) fn run(launch: &Launch) -> Result<(), Fail> {
    let start = std::time::Instant::now();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_launch(launch)))
        .unwrap_or_else(|_| {
            eprintln!("castack-cuda-emu: internal error while running a kernel: stopping");
            std::process::abort()
        });
    profile::record(launch, start.elapsed());
    r
}

fn run_launch(launch: &Launch) -> Result<(), Fail> {
    let k = launch.kernel;
    let nthreads = launch.block.iter().map(|&d| d as usize).product::<usize>();
    let nblocks = launch.grid.iter().map(|&d| u64::from(d)).product::<u64>();
    // Pointer arguments must still be live when the launch runs (a free queued before it
    // would have released them).
    let mut ranges = Vec::new();
    {
        let mem = crate::memory();
        for i in (0..k.sizes.len()).filter(|&i| k.pointer[i]) {
            let p = launch.pointer_arg(i);
            if p == 0 {
                continue;
            }
            match mem.live_range(p, 1) {
                Some((lo, hi)) => ranges.push([lo as u64, hi as u64]),
                None => {
                    return Err(fail(
                        ILLEGAL,
                        format!(
                            "kernel `{}` (launch #{} of its stream): argument {i} (a pointer) \
                             {} when the launch runs",
                            k.name,
                            launch.number,
                            mem.describe_pointer(p)
                        ),
                    ))
                }
            }
        }
    }
    ranges.truncate(MAX_RANGES);
    let mut words = launch.words.clone();
    let params: Vec<*mut c_void> = launch
        .offsets
        .iter()
        .map(|&o| words[o..].as_mut_ptr() as *mut c_void)
        .collect();
    let shared = Shared {
        launch,
        params,
        ranges,
        order: Order::new(nblocks, &mut Rng(launch.seed)),
        next: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let threads = nblocks.saturating_mul(nthreads as u64);
    let result = match pool().filter(|_| threads >= PARALLEL_THREADS && nblocks > 1) {
        Some(pool) => {
            let results = pool.broadcast(|_| work(&shared));
            results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
        }
        None => work(&shared),
    };
    drop(shared);
    drop(words);
    result
}

/// Run blocks of `shared`'s launch on this OS thread until none is left (or a worker
/// faulted).
fn work(shared: &Shared<'_>) -> Result<(), Fail> {
    let launch = shared.launch;
    let nthreads = launch.block.iter().map(|&d| d as usize).product::<usize>();
    let headers: Vec<*mut Header> = FIBERS.with(|f| -> Result<_, Fail> {
        let mut fibers = f.borrow_mut();
        while fibers.len() < nthreads {
            fibers.push(new_fiber(
                FiberStack::new().map_err(|e| fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, e))?,
            ));
        }
        Ok(fibers[..nthreads].iter().map(|slot| slot.header).collect())
    })?;
    let mut ranges = [[0u64; 2]; MAX_RANGES];
    ranges[..shared.ranges.len()].copy_from_slice(&shared.ranges);
    let nwarps = nthreads.div_ceil(WARP);
    let mut ex = Box::new(Exec {
        launch,
        params: shared.params.as_ptr(),
        bid: Dim3::default(),
        nthreads,
        headers,
        state: vec![State::Done; nthreads],
        nshfl: vec![0; nthreads],
        hist: vec![0; nwarps * HIST * WARP],
        spill: vec![Vec::new(); nthreads],
        warp_mask: vec![0; nwarps],
        ranges,
        nranges: shared.ranges.len() as u64,
        shared: shared_ranges(),
        fault: None,
    });
    // Every fiber points at this worker's state.
    let exp: *mut Exec = &mut *ex;
    let (grid, block) = (launch.grid, launch.block);
    with(exp, |e| {
        for t in 0..nthreads {
            // SAFETY: fiber t's header; fiber t is idle.
            let h = unsafe { &mut *e.headers[t] };
            let w = t / WARP;
            h.exec = exp;
            h.t = t as u64;
            h.tid = unlinear(t as u64, block);
            h.lane = (t % WARP) as u32;
            h.nshfl = &mut e.nshfl[t];
            h.hist = e.hist[w * HIST * WARP..].as_mut_ptr();
            h.full_warp = u64::from((w + 1) * WARP <= nthreads);
            h.bdim = Dim3 {
                x: block[0],
                y: block[1],
                z: block[2],
            };
            h.gdim = Dim3 {
                x: grid[0],
                y: grid[1],
                z: grid[2],
            };
            h.ranges = e.ranges.as_ptr();
            h.nranges = &e.nranges;
            h.shared = e.shared.as_ptr();
            h.nshared = e.shared.len() as u64;
        }
    });
    let n = shared.order.len();
    let result = loop {
        if shared.stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break Ok(());
        }
        let b = shared.order.get(i);
        with(exp, |e| e.bid = unlinear(b, grid));
        // The warp order of a block depends on the seed and the block only (not on which
        // worker runs it): a seed reproduces a run.
        let mut warp_rng = Rng(launch.seed ^ 0x6a09_e667_f3bc_c908 ^ b.wrapping_mul(0x9e37_79b9));
        if let Err(e) = run_block(exp, &mut warp_rng) {
            shared.stop.store(true, Ordering::Relaxed);
            break Err(e);
        }
    };
    drop(ex);
    result
}

/// `f` on the Exec, in a scope that spans no resume.
fn with<R>(ex: *mut Exec, f: impl FnOnce(&mut Exec) -> R) -> R {
    // SAFETY: the Exec outlives the launch; kernel code touches it only while this thread
    // is inside `resume`, and callers never hold the reference across one.
    f(unsafe { &mut *ex })
}

/// Run one block (`bid` of the Exec) to completion on fibers 0..n of this thread.
fn run_block(ex: *mut Exec, rng: &mut Rng) -> Result<(), Fail> {
    let n = with(ex, |e| {
        // A block's shared memory holds nothing it did not write.
        for &[lo, hi] in &e.shared {
            // SAFETY: this thread's own `__shared__` array; no kernel code runs now.
            unsafe { std::ptr::write_bytes(lo as *mut u8, memory::POISON, (hi - lo) as usize) };
        }
        for t in 0..e.nthreads {
            // SAFETY: fiber t's header; fiber t is idle (between threads).
            unsafe { (*e.headers[t]).bid = e.bid };
            e.state[t] = State::Ready;
            e.nshfl[t] = 0;
        }
        e.nthreads
    });
    let nwarps = n.div_ceil(WARP);
    let mut warps: Vec<usize> = (0..nwarps).collect();
    FIBERS.with(|f| {
        let mut fibers = f.borrow_mut();
        let outcome = loop {
            rng.shuffle(&mut warps);
            let mut fault = false;
            'epoch: for &w in &warps {
                for t in (w * WARP..((w + 1) * WARP).min(n)).rev() {
                    if with(ex, |e| e.state[t]) != State::Ready {
                        continue;
                    }
                    match fibers[t].co.resume(()) {
                        CoroutineResult::Yield(Signal::Barrier) => {
                            with(ex, |e| e.state[t] = State::AtBarrier)
                        }
                        CoroutineResult::Yield(Signal::Done) => {
                            with(ex, |e| e.state[t] = State::Done)
                        }
                        CoroutineResult::Yield(Signal::Fault) | CoroutineResult::Return(()) => {
                            with(ex, |e| e.state[t] = State::Ready);
                            fault = true;
                            break 'epoch;
                        }
                    }
                }
            }
            if fault {
                break Err(with(ex, |e| e.fault.take())
                    .unwrap_or_else(|| fail(FAILED, "a kernel thread stopped")));
            }
            if let Err(e) = with(ex, |e| check_epoch(e)) {
                break Err(e);
            }
            if let Err(e) = with(ex, |e| check_barrier(e)) {
                break Err(e);
            }
            let waiting = with(ex, |e| {
                let mut waiting = false;
                for t in 0..n {
                    if e.state[t] == State::AtBarrier {
                        e.state[t] = State::Ready;
                        waiting = true;
                    }
                    e.nshfl[t] = 0;
                    e.spill[t].clear();
                }
                e.warp_mask.iter_mut().for_each(|m| *m = 0);
                waiting
            });
            if !waiting {
                break Ok(());
            }
        };
        if outcome.is_err() {
            // Fibers left inside the kernel (at a barrier, or the one that faulted) are
            // reset without unwinding (kernel frames own nothing) and made anew.
            for t in 0..n {
                if with(ex, |e| e.state[t]) != State::Done && fibers[t].co.started() {
                    let mut old = std::mem::replace(&mut fibers[t], placeholder()).co;
                    // SAFETY: the fiber's frames are kernel code and this module's
                    // callbacks, which hold nothing that needs dropping.
                    unsafe { old.force_reset() };
                    let spare = std::mem::replace(&mut fibers[t], new_fiber(old.into_stack()));
                    // The placeholder never ran: keep its stack for the next one.
                    let mut spare = spare.co;
                    // SAFETY: never started, so nothing is on its stack.
                    unsafe { spare.force_reset() };
                    SPARE.with(|s| *s.borrow_mut() = Some(spare.into_stack()));
                }
            }
        }
        outcome
    })
}

thread_local! {
    static SPARE: RefCell<Option<FiberStack>> = const { RefCell::new(None) };
}

/// A fiber that never runs, to stand in while one is being replaced.
fn placeholder() -> Slot {
    let stack = SPARE
        .with(|s| s.borrow_mut().take())
        .map_or_else(FiberStack::new, Ok)
        .unwrap_or_else(|e| {
            eprintln!("castack-cuda-emu: {e}");
            std::process::abort()
        });
    new_fiber(stack)
}

/// Where the running thread is, for messages.
fn whereabouts(h: *mut Header) -> String {
    // SAFETY: called from kernel callbacks on a fiber whose exec is live.
    unsafe {
        let e = &*(*h).exec;
        let l = &*e.launch;
        let (b, t) = ((*h).bid, (*h).tid);
        format!(
            "kernel `{}` (launch #{} of its stream, grid ({}, {}, {}), block ({}, {}, {})), \
             block ({}, {}, {}) thread ({}, {}, {})",
            l.kernel.name,
            l.number,
            l.grid[0],
            l.grid[1],
            l.grid[2],
            l.block[0],
            l.block[1],
            l.block[2],
            b.x,
            b.y,
            b.z,
            t.x,
            t.y,
            t.z
        )
    }
}

/// Record `why` (with `code`) and stop the running thread for good (the launch is
/// abandoned).
fn fault(h: *mut Header, code: CUresult, why: String) -> ! {
    // SAFETY: the running fiber's header and its live exec.
    let y = unsafe {
        let e = &mut *(*h).exec;
        if e.fault.is_none() {
            e.fault = Some(fail(code, why));
        } else {
            drop(why);
        }
        (*h).yielder
    };
    loop {
        // SAFETY: the running fiber's yielder.
        unsafe { (*y).suspend(Signal::Fault) };
    }
}

/// After an epoch: no thread returned while others wait at a barrier (a GPU hangs or
/// misbehaves: `__syncthreads` must be reached by every thread of the block).
fn check_barrier(e: &Exec) -> Result<(), Fail> {
    let waiting = e.state.iter().position(|&s| s == State::AtBarrier);
    let returned = e.state.iter().position(|&s| s == State::Done);
    if let (Some(w), Some(r)) = (waiting, returned) {
        // SAFETY: the launch outlives its Exec.
        let l = unsafe { &*e.launch };
        let (block, b) = (l.block, e.bid);
        let (tw, tr) = (unlinear(w as u64, block), unlinear(r as u64, block));
        return Err(fail(
            FAILED,
            format!(
                "kernel `{}` (launch #{} of its stream), block ({}, {}, {}): thread ({}, {}, \
                 {}) waits at __syncthreads while thread ({}, {}, {}) has returned without \
                 reaching it (every thread of a block must reach each barrier)",
                l.kernel.name, l.number, b.x, b.y, b.z, tw.x, tw.y, tw.z, tr.x, tr.y, tr.z
            ),
        ));
    }
    Ok(())
}

/// After an epoch: the lanes of every shuffle mask made as many shuffles.
fn check_epoch(e: &Exec) -> Result<(), Fail> {
    for (w, &slow) in e.warp_mask.iter().enumerate() {
        // Shuffles of the fast path use the full mask of a full warp.
        let any = (0..WARP).any(|l| e.nshfl.get(w * WARP + l).is_some_and(|&c| c > 0));
        let mask = if slow == 0 && any && (w + 1) * WARP <= e.nthreads {
            u32::MAX
        } else {
            slow
        };
        if mask == 0 {
            continue;
        }
        // SAFETY: the launch outlives its Exec.
        let l = unsafe { &*e.launch };
        let missing =
            (0..WARP).find(|&lane| mask & (1 << lane) != 0 && w * WARP + lane >= e.nthreads);
        if let Some(lane) = missing {
            return Err(fail(
                FAILED,
                format!(
                    "kernel `{}` (launch #{} of its stream), block ({}, {}, {}) warp {w}: \
                     __shfl_down_sync with mask {mask:#010x} names lane {lane}, which is not \
                     in the block ({} threads)",
                    l.kernel.name, l.number, e.bid.x, e.bid.y, e.bid.z, e.nthreads
                ),
            ));
        }
        let lanes: Vec<usize> = (0..WARP).filter(|l| mask & (1 << l) != 0).collect();
        let count = |l: usize| e.nshfl.get(w * WARP + l).map_or(0, |&c| c as usize);
        let first = count(lanes[0]);
        if let Some(&odd) = lanes.iter().find(|&&l| count(l) != first) {
            return Err(fail(
                FAILED,
                format!(
                    "kernel `{}` (launch #{} of its stream), block ({}, {}, {}) warp {w}: \
                     divergent __shfl_down_sync: lane {} made {} shuffles and lane {odd} made \
                     {} before the same barrier (mask {mask:#010x})",
                    l.kernel.name,
                    l.number,
                    e.bid.x,
                    e.bid.y,
                    e.bid.z,
                    lanes[0],
                    first,
                    count(odd)
                ),
            ));
        }
    }
    Ok(())
}

/// `__syncthreads()`: suspend until the block's next epoch.
#[no_mangle]
pub extern "C" fn castack_emu_syncthreads() {
    // SAFETY: the running fiber's yielder, set when it started.
    unsafe { (*(*header()).yielder).suspend(Signal::Barrier) };
}

/// `__shfl_down_sync(mask, bits, delta, width)` on 64 bits (see the module docs).
#[no_mangle]
pub extern "C" fn castack_emu_shfl_down(mask: u32, bits: u64, delta: u32, width: i32) -> u64 {
    let h = header();
    // SAFETY: the running fiber's header and its live exec; no other reference to either
    // is live while kernel code runs.
    let (t, s, nthreads) = unsafe {
        let e = &mut *(*h).exec;
        let t = (*h).t as usize;
        let s = e.nshfl[t] as usize;
        e.nshfl[t] += 1;
        let w = t / WARP;
        if s < HIST {
            e.hist[(w * HIST + s) * WARP + t % WARP] = bits;
        } else {
            let spill = &mut e.spill[t];
            spill.resize(s - HIST, 0);
            spill.push(bits);
        }
        e.warp_mask[w] |= mask;
        (t, s, e.nthreads)
    };
    let st = t / WARP * WARP;
    let lane = t % WARP;
    if mask & (1 << lane) == 0 {
        fault(
            h,
            FAILED,
            format!(
                "{}: __shfl_down_sync with mask {mask:#010x}, which leaves out the calling \
                 lane {lane}",
                whereabouts(h)
            ),
        );
    }
    if !(1..=32).contains(&width) || width & (width - 1) != 0 {
        fault(
            h,
            FAILED,
            format!(
                "{}: __shfl_down_sync width {width} (a power of two up to 32)",
                whereabouts(h)
            ),
        );
    }
    let width = width as usize;
    let src = lane + delta as usize;
    if delta as usize >= WARP || src >= (lane & !(width - 1)) + width {
        return bits;
    }
    let st = st + src;
    if mask & (1 << src) == 0 || st >= nthreads {
        fault(
            h,
            FAILED,
            format!(
                "{}: __shfl_down_sync (shuffle {s} since the last barrier) reads lane {src}, \
                 which is not in mask {mask:#010x} or not in the block",
                whereabouts(h)
            ),
        );
    }
    // SAFETY: the running fiber's live exec.
    let (made, value) = unsafe {
        let e = &*(*h).exec;
        let made = e.nshfl[st] as usize;
        let v = if s >= made {
            None
        } else if s < HIST {
            Some(e.hist[(st / WARP * HIST + s) * WARP + src])
        } else {
            e.spill[st].get(s - HIST).copied()
        };
        (made, v)
    };
    match value {
        Some(v) => v,
        None => fault(
            h,
            FAILED,
            format!(
                "{}: divergent __shfl_down_sync: this lane ({lane}) is at shuffle {s} since \
                 the last barrier, source lane {src} made only {made} before reaching the \
                 barrier or returning",
                whereabouts(h)
            ),
        ),
    }
}

/// The slow path of an access check (`castack_emu_check` in `cxx/prelude.h` allowed the
/// running thread's stack, the allocations the launch touched and shared memory): a live
/// allocation is remembered for the launch, anything else stops the thread with a fault.
#[no_mangle]
pub extern "C" fn castack_emu_access(addr: usize, size: usize, write: i32) {
    let h = header();
    let end = addr.wrapping_add(size);
    // SAFETY: the running fiber's exec; nothing else references it while kernel code runs.
    let e = unsafe { &mut *(*h).exec };
    let mem = crate::memory();
    if end >= addr {
        if let Some((lo, hi)) = mem.live_range(addr, size) {
            drop(mem);
            // The newest first; with the list full, it replaces the last.
            let k = (e.nranges as usize).min(MAX_RANGES - 1);
            e.ranges.copy_within(0..k, 1);
            e.ranges[0] = [lo as u64, hi as u64];
            e.nranges = (k + 1) as u64;
            return;
        }
    }
    let what = mem.describe(addr, size);
    drop(mem);
    // Near one of this thread's `__shared__` arrays: say so (a shared-memory overrun).
    let near = e
        .shared
        .iter()
        .map(|&[lo, hi]| (lo as usize, hi as usize))
        .filter_map(|(lo, hi)| {
            if addr >= hi && addr - hi < memory::PAGE {
                Some((
                    addr - hi,
                    format!("{} bytes past the end", addr - hi),
                    hi - lo,
                ))
            } else if addr < lo && lo - addr < memory::PAGE {
                Some((
                    lo - addr,
                    format!("{} bytes before the start", lo - addr),
                    hi - lo,
                ))
            } else if addr >= lo && addr < hi {
                Some((0, format!("runs {} bytes past the end", end - hi), hi - lo))
            } else {
                None
            }
        })
        .min_by_key(|n| n.0);
    let what = match near {
        Some((_, place, len)) => {
            format!("{size} bytes at {addr:#x}: {place} of a __shared__ array of {len} bytes")
        }
        None => what,
    };
    let mut msg = whereabouts(h);
    let _ = write!(
        msg,
        ": illegal {} of {what}",
        if write != 0 { "store" } else { "load" }
    );
    fault(h, ILLEGAL, msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ptx_entry_has_a_host_kernel_of_the_same_shape() {
        let ptx = include_str!("../../linalg/src/device/kernels.ptx");
        let entries = crate::ptx::entries(ptx).expect("parse");
        for e in entries {
            let k = kernels()
                .iter()
                .find(|k| k.name == e.name)
                .unwrap_or_else(|| panic!("no host kernel {}", e.name));
            assert_eq!(k.sizes, e.params, "{}", e.name);
        }
        let axpy = kernels().iter().find(|k| k.name == "axpy").expect("axpy");
        assert_eq!(axpy.pointer, vec![false, false, true, true]);
    }

    #[test]
    fn the_shared_arrays_are_found_with_their_sizes() {
        // block_sums<K> holds K x 8 doubles for K = 1, 2, 8 and 16.
        let mut sizes: Vec<u64> = shared_arrays().iter().map(|&(_, len)| len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![64, 128, 512, 1024]);
        let ranges = shared_ranges();
        assert_eq!(ranges.len(), 4);
        for [lo, hi] in ranges {
            assert!(hi > lo);
            // This thread's own storage: writable.
            // SAFETY: the range is this thread's copy of a `__shared__` array.
            unsafe { std::ptr::write_bytes(lo as *mut u8, 0, (hi - lo) as usize) };
        }
    }

    #[test]
    fn the_block_order_is_a_permutation() {
        let mut r = Rng(7);
        let mut v: Vec<u32> = (0..100).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort_unstable();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        assert_ne!(v, s);
        assert_eq!(gcd(12, 18), 6);
    }
}

/// `CASTACK_CUDA_EMU_PROFILE=1`: host time per kernel, printed on stderr at exit.
mod profile {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, Once};
    use std::time::Duration;

    use super::Launch;

    static TABLE: Mutex<BTreeMap<String, (u64, u64, Duration)>> = Mutex::new(BTreeMap::new());

    fn enabled() -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| {
            let on = std::env::var("CASTACK_CUDA_EMU_PROFILE").as_deref() == Ok("1");
            if on {
                static AT_EXIT: Once = Once::new();
                extern "C" fn print() {
                    let t = crate::driver::lock(&TABLE);
                    let total: f64 = t.values().map(|v| v.2.as_secs_f64()).sum();
                    eprintln!("castack-cuda-emu profile: kernel, launches, GPU threads, host s");
                    let mut rows: Vec<_> = t.iter().collect();
                    rows.sort_by_key(|r| std::cmp::Reverse(r.1 .2));
                    for (k, (n, th, d)) in rows {
                        eprintln!("  {k:<18} {n:>8} {th:>14} {:>9.3}", d.as_secs_f64());
                    }
                    eprintln!("  total {total:.3} s");
                }
                // SAFETY: registers a plain function to run at exit.
                AT_EXIT.call_once(|| unsafe {
                    libc::atexit(print);
                });
            }
            on
        })
    }

    pub(super) fn record(l: &Launch, d: Duration) {
        if !enabled() {
            return;
        }
        let threads: u64 = l
            .grid
            .iter()
            .chain(&l.block)
            .map(|&x| u64::from(x))
            .product();
        let mut t = crate::driver::lock(&TABLE);
        let e = t.entry(l.kernel.name.clone()).or_default();
        e.0 += 1;
        e.1 += threads;
        e.2 += d;
    }
}
