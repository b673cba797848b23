// The CUDA names `kernels.cu` uses, for its host build inside the emulated driver
// (castack-cuda-emu). Exactly the set ../shared/GPU-EMULATION.md lists; a kernel that
// uses anything else fails to compile here, which is the point: the emulator runs only
// what it models.
//
// Thread and block indices, barriers and warp shuffles are answered from the running
// fiber's header (below) and the emulator's scheduler (src/exec.rs). Per-block shared
// memory is per OS thread (`static thread_local`): an OS thread runs one block at a time,
// so the block that runs owns it (it is poisoned at every block's start). Every load and
// store of kernel code is instrumented (`-fsanitize=kernel-address` with outline checks):
// `__asan_{load,store}N_noabort` below check each access, allowing it only inside a live
// device allocation, the running thread's own stack or one of this thread's `__shared__`
// arrays (the common cases here, the rest in src/exec.rs).

#ifndef CASTACK_EMU_PRELUDE_H
#define CASTACK_EMU_PRELUDE_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

// CUDA's index vector (threadIdx is a uint3, blockDim a dim3: the same three fields).
struct dim3 {
    unsigned int x, y, z;
};

// Layout shared with src/exec.rs (checked at load: `castack_emu_layout`). Every kernel
// thread runs on a fiber whose stack region is CASTACK_EMU_REGION bytes, aligned to its
// size, with this header in its top CASTACK_EMU_HEADER_BYTES: the running thread finds it
// from its own stack address, with no TLS and no call into the emulator.
#define CASTACK_EMU_REGION (128u * 1024u)
#define CASTACK_EMU_HEADER_BYTES 256u
// Shuffle values kept per thread and epoch in the fast path.
#define CASTACK_EMU_HIST 96u
#define CASTACK_EMU_MAGIC 0x6361737461636b21ull

struct castack_emu_fiber {
    uint64_t magic;
    void *exec;
    uint64_t t;           // linear thread index in the block
    dim3 tid;
    uint32_t lane;
    const void *yielder;
    uint32_t *nshfl;      // this thread's shuffle count since the last barrier (lane + d's
                          // is nshfl[d])
    uint64_t *hist;       // this warp's shuffle values: the s-th of lane l at hist[s * 32 + l]
    uint64_t full_warp;   // whether all 32 lanes of the warp are in the block
    dim3 bid, bdim, gdim;
    uint32_t pad1;
    const uint64_t *ranges;  // live allocations the launch touched: (start, end) pairs
    const uint64_t *nranges;
    const uint64_t *shared;  // this OS thread's __shared__ arrays: (start, end) pairs
    uint64_t nshared;
};

extern "C" {
// Slow paths and scheduling (src/exec.rs).
void castack_emu_syncthreads(void);
uint64_t castack_emu_shfl_down(unsigned mask, uint64_t bits, unsigned delta, int width);
void castack_emu_access(uintptr_t addr, size_t size, int write);
}

#define CASTACK_EMU_NO_SAN __attribute__((no_sanitize_address))
#define CASTACK_EMU_NO_CHECK __attribute__((no_sanitize_address, visibility("hidden")))
#define CASTACK_EMU_FAST CASTACK_EMU_NO_CHECK __attribute__((noinline))

static inline CASTACK_EMU_NO_SAN castack_emu_fiber *castack_emu_self(void) {
    const uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    return (castack_emu_fiber *)((sp & ~(uintptr_t)(CASTACK_EMU_REGION - 1)) +
                                 CASTACK_EMU_REGION - CASTACK_EMU_HEADER_BYTES);
}

extern "C" {
CASTACK_EMU_FAST uint64_t castack_emu_layout(uint64_t which) {
    switch (which) {
    case 0: return sizeof(castack_emu_fiber);
    case 1: return CASTACK_EMU_REGION;
    case 2: return CASTACK_EMU_HEADER_BYTES;
    case 3: return CASTACK_EMU_HIST;
    case 4: return offsetof(castack_emu_fiber, ranges);
    case 6: return offsetof(castack_emu_fiber, full_warp);
    case 5: return offsetof(castack_emu_fiber, nshared);
    default: return 0;
    }
}
CASTACK_EMU_FAST dim3 castack_emu_thread_idx(void) { return castack_emu_self()->tid; }
CASTACK_EMU_FAST dim3 castack_emu_block_idx(void) { return castack_emu_self()->bid; }
CASTACK_EMU_FAST dim3 castack_emu_block_dim(void) { return castack_emu_self()->bdim; }
CASTACK_EMU_FAST dim3 castack_emu_grid_dim(void) { return castack_emu_self()->gdim; }
}

// Loads and stores of the emulator's own state from kernel code, which the instrumentation
// must not check (x86-64: as inline assembly, which it does not see; elsewhere through the
// non-inlined functions below, which are not instrumented).
#if defined(__x86_64__)
template <class T>
static inline __attribute__((always_inline)) T castack_emu_ld(const T *p) {
    T v;
    __asm__ volatile("mov %1, %0" : "=r"(v) : "m"(*p));
    return v;
}
template <class T>
static inline __attribute__((always_inline)) void castack_emu_st(T *p, T v) {
    __asm__ volatile("mov %1, %0" : "=m"(*p) : "r"(v));
}
#define CASTACK_EMU_SHFL_INLINE static inline __attribute__((always_inline))
#else
template <class T>
static inline CASTACK_EMU_NO_SAN T castack_emu_ld(const T *p) {
    return *p;
}
template <class T>
static inline CASTACK_EMU_NO_SAN void castack_emu_st(T *p, T v) {
    *p = v;
}
#define CASTACK_EMU_SHFL_INLINE CASTACK_EMU_FAST
#endif

// The common shuffle (full mask, a full warp, fewer than HIST shuffles this epoch, the
// source lane has made this shuffle) inline; everything else, faults included, in Rust.
CASTACK_EMU_SHFL_INLINE uint64_t castack_emu_shfl_fast(unsigned mask, uint64_t bits,
                                                        unsigned delta, int width) {
    castack_emu_fiber *f = castack_emu_self();
    uint32_t *np = castack_emu_ld(&f->nshfl);
    const uint32_t s = castack_emu_ld(np);
    if (mask != 0xffffffffu || (unsigned)(width - 1) >= 32u || (width & (width - 1)) != 0 ||
        s >= CASTACK_EMU_HIST || !castack_emu_ld(&f->full_warp) || delta >= 32)
        return castack_emu_shfl_down(mask, bits, delta, width);
    const uint32_t lane = castack_emu_ld(&f->lane), src = lane + delta;
    const uint32_t seg_end = (lane & ~(uint32_t)(width - 1)) + (uint32_t)width;
    if (src < seg_end && castack_emu_ld(np + delta) <= s)
        return castack_emu_shfl_down(mask, bits, delta, width);  // diverged: a fault
    castack_emu_st(np, s + 1);
    uint64_t *row = castack_emu_ld(&f->hist) + (uint64_t)s * 32;
    castack_emu_st(row + lane, bits);
    return src < seg_end ? castack_emu_ld(row + src) : bits;
}

// One access: the thread's own stack, an allocation the launch touched, or shared memory
// here; everything else in Rust (a lookup, or a fault).
static inline __attribute__((always_inline)) CASTACK_EMU_NO_SAN void castack_emu_check(uintptr_t a, size_t n,
                                                                                   int write) {
    const uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    const uintptr_t e = a + n;
    if (e > a && ((a ^ sp) < CASTACK_EMU_REGION) && (((e - 1) ^ sp) < CASTACK_EMU_REGION))
        return;
    const castack_emu_fiber *f = castack_emu_self();
    const uint64_t k = *f->nranges;
    for (uint64_t i = 0; i < k; ++i)
        if (a >= f->ranges[2 * i] && e <= f->ranges[2 * i + 1] && e > a) return;
    const uint64_t m = f->nshared;
    for (uint64_t i = 0; i < m; ++i)
        if (a >= f->shared[2 * i] && e <= f->shared[2 * i + 1] && e > a) return;
    castack_emu_access(a, n, write);
}

#define threadIdx (castack_emu_thread_idx())
#define blockIdx (castack_emu_block_idx())
#define blockDim (castack_emu_block_dim())
#define gridDim (castack_emu_grid_dim())

#define __global__ __attribute__((visibility("hidden")))
#define __device__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static thread_local
// __restrict__ is a GCC keyword already.

static inline void __syncthreads(void) { castack_emu_syncthreads(); }

// Shuffles of 64-bit values (the kernels shuffle doubles only; other types fail to compile).
static inline double __shfl_down_sync(unsigned mask, double v, unsigned delta, int width = 32) {
    uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    b = castack_emu_shfl_fast(mask, b, delta, width);
    std::memcpy(&v, &b, sizeof v);
    return v;
}

// Read-only data cache load: a plain (checked) load here.
template <class T>
static inline T __ldg(const T *p) {
    return *p;
}

// Device built-ins on int.
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

// The instrumentation's entry points (hidden: they never clash with a real ASan runtime in
// the host process), not instrumented themselves.
#define CASTACK_EMU_ACCESS(n)                                                                \
    extern "C" CASTACK_EMU_NO_CHECK void __asan_load##n##_noabort(uintptr_t a) {           \
        castack_emu_check(a, n, 0);                                                          \
    }                                                                                        \
    extern "C" CASTACK_EMU_NO_CHECK void __asan_store##n##_noabort(uintptr_t a) {          \
        castack_emu_check(a, n, 1);                                                          \
    }
CASTACK_EMU_ACCESS(1)
CASTACK_EMU_ACCESS(2)
CASTACK_EMU_ACCESS(4)
CASTACK_EMU_ACCESS(8)
CASTACK_EMU_ACCESS(16)
extern "C" CASTACK_EMU_NO_CHECK void __asan_loadN_noabort(uintptr_t a, size_t n) {
    castack_emu_check(a, n, 0);
}
extern "C" CASTACK_EMU_NO_CHECK void __asan_storeN_noabort(uintptr_t a, size_t n) {
    castack_emu_check(a, n, 1);
}
extern "C" CASTACK_EMU_NO_CHECK void __asan_handle_no_return(void) {}

#endif
