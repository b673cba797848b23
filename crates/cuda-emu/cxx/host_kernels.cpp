// castack's CUDA kernels compiled for the host from the same source the GPU runs
// (crates/linalg/src/device/kernels.cu), plus the table the emulator finds them in by the
// PTX entry's name. build.rs writes `registry.inc` from the entries of the embedded PTX
// (kernels.ptx): an entry without a host kernel of that name fails this compile.

#include "prelude.h"

#include "kernels.cu"

namespace castack_emu {

// What the emulator knows of one kernel: its name, its parameters' sizes and which of them
// are pointers (checked against live device allocations at launch), and a trampoline that
// calls it with the parameter values copied at launch.
struct Kernel {
    const char *name;
    void (*invoke)(void *const *params);
    unsigned nparams;
    const unsigned *sizes;
    const unsigned char *pointer;
};

template <class F>
struct Traits;

template <class... A>
struct Traits<void (*)(A...)> {
    static constexpr unsigned n = sizeof...(A);
    static constexpr unsigned sizes[sizeof...(A) + 1] = {unsigned(sizeof(A))..., 0u};
    static constexpr unsigned char pointer[sizeof...(A) + 1] = {
        (unsigned char)std::is_pointer<A>::value..., (unsigned char)0};

    template <void (*F)(A...), std::size_t... I>
    CASTACK_EMU_NO_CHECK static void call(void *const *p, std::index_sequence<I...>) {
        F(*static_cast<std::remove_cv_t<A> *>(p[I])...);
    }
};

template <auto F>
CASTACK_EMU_NO_CHECK void invoke(void *const *p) {
    using T = Traits<decltype(F)>;
    T::template call<F>(p, std::make_index_sequence<T::n>{});
}

}  // namespace castack_emu

#define CASTACK_EMU_KERNEL(f)                                                                \
    {#f, &castack_emu::invoke<&f>, castack_emu::Traits<decltype(&f)>::n,                     \
     castack_emu::Traits<decltype(&f)>::sizes, castack_emu::Traits<decltype(&f)>::pointer},

extern "C" {
__attribute__((visibility("hidden"))) extern const castack_emu::Kernel castack_emu_kernels[];
__attribute__((visibility("hidden"))) extern const std::size_t castack_emu_kernel_count;

const castack_emu::Kernel castack_emu_kernels[] = {
#include "registry.inc"
};
const std::size_t castack_emu_kernel_count =
    sizeof(castack_emu_kernels) / sizeof(castack_emu_kernels[0]);
}
