// The thread-locals of include/spindle/arch/context.hpp. They are reached
// only through SPINDLE_FRESH_TLS_ADDRESS (arch/tls.hpp), by these assembler
// names; C++ code never names them, so no compiler-computed address of them
// can outlive a switch.
#include <spindle/arch/context.hpp>

#include <atomic>

// The setting this library was built with (arch/config.hpp): programs
// compiled with the other one fail to link, naming it.
extern "C" const char SPINDLE_CONFIG_TAG = 0;

namespace spindle::arch::detail {

__thread const eh_state* tl_eh_globals SPINDLE_TLS_NAME("spindle_tl_eh_globals")
    __attribute__((tls_model("initial-exec"), used)) = &eh_lookup_pending;

// Defined in every build, so that a sanitizer build of a program links
// against a library built without one (it is then never read).
__thread context* asan_switch_from SPINDLE_TLS_NAME("spindle_asan_switch_from")
    __attribute__((tls_model("initial-exec"), used)) = nullptr;

namespace {
// Set once by the memory layer before any context exists (relaxed: the
// setter's thread publishes its first stack, and with it every context, by
// the hand-overs that let another thread switch to it).
std::atomic<void (*)() noexcept> g_first_switch_hook{nullptr};
}  // namespace

void set_first_switch_hook(void (*hook)() noexcept) noexcept {
    g_first_switch_hook.store(hook, std::memory_order_relaxed);
}

eh_state* eh_globals_first_lookup() noexcept {
    if (auto* hook = g_first_switch_hook.load(std::memory_order_relaxed)) hook();
    const eh_state** slot = eh_globals_slot();
    const auto* g = reinterpret_cast<const eh_state*>(abi::__cxa_get_globals());
    *slot = g;
    return const_cast<eh_state*>(g);
}

}  // namespace spindle::arch::detail

#if defined(__aarch64__)
// spindle_aarch64_context_start (arch/aarch64.hpp): the first landing point of
// a fresh context. The switch branched here through x16 with x0 = the new
// context, x1 = the one it left and x29 = the entry (make_context put it in
// the fp slot). It clears x29 and x30 so that the frame chain and the
// unwinder stop at the entry function (whose CFI says its return address is
// x30 at entry: 0 ends the walk), and branches to the entry through x16,
// which the entry's `bti c` (or paciasp) accepts. Its own landing pad is
// `bti jc` (hint #38), a NOP without BTI.
__asm__(
    ".text\n"
    ".p2align 2\n"
    ".globl spindle_aarch64_context_start\n"
    ".type spindle_aarch64_context_start, %function\n"
    "spindle_aarch64_context_start:\n"
    "    .cfi_startproc\n"
    "    .cfi_undefined x30\n"
    "    hint #38\n"
    "    mov x16, x29\n"
    "    mov x29, xzr\n"
    "    mov x30, xzr\n"
    "    br x16\n"
    "    .cfi_endproc\n"
    ".size spindle_aarch64_context_start, .-spindle_aarch64_context_start\n");
#endif
