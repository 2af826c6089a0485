// spindle/arch/context.hpp — execution contexts and the annotated switch.
//
// `arch::context` is what fibers, generators and worker loops keep to be
// resumed later: the three words the ABI-specific `raw_switch` saves (see
// x86_64_sysv.hpp / aarch64.hpp), plus, in sanitizer builds only, what ASan
// and TSan must be told on every switch.
//
// Three operations:
//
//   switch_to(from, to)     suspend into `from`, continue `to`; returns when
//                           someone switches back to `from`.
//   switch_final(from, to)  the same for a context that will never run again
//                           (a finished fiber): ASan drops its fake stack.
//   context_started(self)   first statement of every context entry function.
//
// In builds without sanitizers all three are the bare `raw_switch`: the
// annotations compile away.
//
// Sanitizer protocol. ASan must know the bounds of the stack being switched
// to (`__sanitizer_start_switch_fiber`) and must be told, once there, that the
// switch completed (`__sanitizer_finish_switch_fiber`), which also reports the
// bounds of the stack we came from. We store those bounds into the context we
// came from, so a context whose stack we never allocated (a thread's own
// stack, or a fiber that was running inside a generator when it switched)
// always carries the bounds it really had when it last ran. TSan gets
// `__tsan_switch_to_fiber` before each switch; the TSan fiber of the running
// context is read back with `__tsan_get_current_fiber` for the same reason.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cxxabi.h>

#include <spindle/arch/config.hpp>
#include <spindle/arch/tls.hpp>

#if defined(__x86_64__)
#include <spindle/arch/x86_64_sysv.hpp>
#elif defined(__aarch64__)
#include <spindle/arch/aarch64.hpp>
#else
#error "spindle: no context switch for this architecture (x86-64 and AArch64 are supported)"
#endif

#if SPINDLE_ASAN
#include <sanitizer/asan_interface.h>
#endif
#if SPINDLE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace spindle::arch {

// The C++ runtime's per-thread exception state (Itanium ABI
// __cxa_eh_globals: the stack of caught exceptions and the uncaught count).
// It belongs to a thread of execution, so it travels with each context: a
// fiber that switches inside a catch handler must not pop or rethrow another
// fiber's exception.
//
// SPINDLE_SWITCH_EH_STATE=0 turns that off (swap_eh_state does nothing). The
// preload library builds so: its libstdc++ is a private static copy whose
// state is not the program's, and reading it would cost __tls_get_addr.
#ifndef SPINDLE_SWITCH_EH_STATE
#define SPINDLE_SWITCH_EH_STATE 1
#endif
struct eh_state {
    void* caught = nullptr;
    std::uintptr_t uncaught = 0;  // an unsigned int and padding in the ABI struct
};
static_assert(sizeof(eh_state) == 2 * sizeof(void*), "__cxa_eh_globals is two words here");

struct context {
    raw_context regs;  // read and written by the asm; must stay first
    eh_state eh;       // this context's exception state while it is suspended; zero while it runs
#if SPINDLE_ASAN
    const void* stack_bottom = nullptr;  // lowest address of the stack this context runs on
    std::size_t stack_size = 0;
    void* fake_stack = nullptr;  // ASan's fake stack of this context while suspended
#endif
#if SPINDLE_TSAN
    void* tsan_fiber = nullptr;  // TSan's fiber object to switch to when resuming this context
    void* tsan_owned = nullptr;  // the one annotate_new_context made (tsan_fiber may differ while
                                 // the context runs a generator's body)
#endif
};
static_assert(offsetof(context, regs) == 0, "the switch reads the registers at offset 0");

namespace detail {
// The thread-locals below are read around switches, and a switch may resume
// the code on another thread (a fiber migrates; a TCLock combiner runs a
// waiter's context). Both are defined in src/arch/context.cpp and reached
// only through SPINDLE_FRESH_TLS_ADDRESS (arch/tls.hpp), which reads the
// thread pointer at each use: an address the compiler computed before a
// switch would be the previous thread's variable.

// This thread's __cxa_eh_globals, looked up once per thread
// (spindle_tl_eh_globals). Until then it points at eh_lookup_pending, a
// state that reads "an exception is in flight": the fast test of a switch
// (eh_globals_peek) then fails, and its slow path looks the real one up
// (eh_globals). So the fast path, run on every switch, needs no null test.
inline constexpr eh_state eh_lookup_pending{nullptr, 1};
SPINDLE_ALWAYS_INLINE const eh_state** eh_globals_slot() noexcept {
    return SPINDLE_FRESH_TLS_ADDRESS(const eh_state*, "spindle_tl_eh_globals");
}
// For the fast test only: this thread's state, or eh_lookup_pending.
SPINDLE_ALWAYS_INLINE const eh_state* eh_globals_peek() noexcept { return *eh_globals_slot(); }
// The first switch of a thread looks its state up (src/arch/context.cpp):
// out of line, and it first runs the hook set by set_first_switch_hook.
SPINDLE_NOINLINE eh_state* eh_globals_first_lookup() noexcept;
// This thread's state, to read and write.
SPINDLE_ALWAYS_INLINE eh_state* eh_globals() noexcept {
    const eh_state* g = *eh_globals_slot();
    if (g == &eh_lookup_pending) [[unlikely]]
        return eh_globals_first_lookup();
    return const_cast<eh_state*>(g);
}
// What a thread must have before its first switch: the memory layer sets it
// to give the thread its alternate signal stack (memory/stack.hpp,
// install_overflow_handler), so that a context first resumed on a thread
// that never ran anything else of spindle -- a generator made elsewhere --
// can still report its stack overflow. Every switch kind (fiber, generator,
// TCLock) looks the exception state up on a thread's first switch, so this
// costs the switches nothing after that.
void set_first_switch_hook(void (*hook)() noexcept) noexcept;
#if SPINDLE_ASAN
// The context a switch on this thread started from (spindle_asan_switch_from);
// written just before the switch and read right after it lands, to record
// that context's stack bounds. Thread-local because switches on different
// threads are unrelated.
SPINDLE_ALWAYS_INLINE context** asan_switch_from_slot() noexcept {
    return SPINDLE_FRESH_TLS_ADDRESS(context*, "spindle_asan_switch_from");
}
#endif
}  // namespace detail

// Tell the sanitizers the bounds and identity of a context that has not run
// yet. `bottom`/`size` describe its whole usable stack.
inline void annotate_new_context([[maybe_unused]] context* ctx, [[maybe_unused]] void* bottom,
                                 [[maybe_unused]] std::size_t size) noexcept {
#if SPINDLE_ASAN
    ctx->stack_bottom = bottom;
    ctx->stack_size = size;
    ctx->fake_stack = nullptr;
#endif
#if SPINDLE_TSAN
    ctx->tsan_fiber = ctx->tsan_owned = __tsan_create_fiber(0);
#endif
    ctx->eh = eh_state{};
}

// Release what annotate_new_context took. Call only once the context will
// never run again and is not the running one.
inline void annotate_destroy_context([[maybe_unused]] context* ctx) noexcept {
#if SPINDLE_TSAN
    if (ctx->tsan_owned != nullptr) {
        __tsan_destroy_fiber(ctx->tsan_owned);
        ctx->tsan_owned = ctx->tsan_fiber = nullptr;
    }
#endif
}

// Exception state: park ours in `from`, install the one `to` left. The state
// of the running context lives in the thread's globals and its own `eh` field
// is kept zero, so when neither side has an exception in flight (nearly
// always) this is four loads and no store: no chain of stores and reloads
// through the globals from one switch to the next.
SPINDLE_ALWAYS_INLINE void swap_eh_state([[maybe_unused]] context* from, [[maybe_unused]] context* to,
                                         [[maybe_unused]] bool from_finished) noexcept {
#if SPINDLE_SWITCH_EH_STATE
    const eh_state* peek = detail::eh_globals_peek();
    const eh_state next = to->eh;
    if ((reinterpret_cast<std::uintptr_t>(peek->caught) | peek->uncaught |
         reinterpret_cast<std::uintptr_t>(next.caught) | next.uncaught) != 0) [[unlikely]] {
        // Re-read: `peek` may have been eh_lookup_pending.
        eh_state* g = detail::eh_globals();
        if (!from_finished) from->eh = *g;
        *g = next;
        to->eh = eh_state{};
    }
#endif
}

// The sanitizer half of a switch (nothing in other builds).
SPINDLE_ALWAYS_INLINE void annotate_switch([[maybe_unused]] context* from,
                                           [[maybe_unused]] context* to,
                                           [[maybe_unused]] bool from_finished) noexcept {
#if SPINDLE_ASAN
    *detail::asan_switch_from_slot() = from;
    __sanitizer_start_switch_fiber(from_finished ? nullptr : &from->fake_stack, to->stack_bottom,
                                   to->stack_size);
#endif
#if SPINDLE_TSAN
    if (!from_finished) from->tsan_fiber = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
}

SPINDLE_ALWAYS_INLINE void before_switch(context* from, context* to, bool from_finished) noexcept {
    swap_eh_state(from, to, from_finished);
    annotate_switch(from, to, from_finished);
}

// Runs in `self` right after a switch into it landed.
SPINDLE_ALWAYS_INLINE void context_started([[maybe_unused]] context* self) noexcept {
#if SPINDLE_ASAN
    context* prev = *detail::asan_switch_from_slot();
    __sanitizer_finish_switch_fiber(self->fake_stack, &prev->stack_bottom, &prev->stack_size);
#endif
}

SPINDLE_ALWAYS_INLINE void switch_to(context* from, context* to) noexcept {
    before_switch(from, to, false);
    raw_switch(&from->regs, &to->regs);
    context_started(from);
}

[[noreturn]] SPINDLE_ALWAYS_INLINE void switch_final(context* from, context* to) noexcept {
    before_switch(from, to, true);
    raw_switch(&from->regs, &to->regs);
    __builtin_unreachable();
}

// switch_to for two contexts held in one record (see raw_switch_shared):
// `shared` is the record, the contexts sit at FromOff and ToOff in it, and
// `word` carries one machine word to the other side. Unlike switch_to these
// leave the exception state alone: their one user, the generator, nests its
// switches like calls and keeps that state with a cheaper protocol of its own
// (runtime/generator.hpp).
// Send: whether `word` goes out (else it only comes back; see raw_switch_shared).
template <std::size_t FromOff, std::size_t ToOff, bool Send = true>
SPINDLE_ALWAYS_INLINE void switch_shared(void*& shared, std::uintptr_t& word) noexcept {
    annotate_switch(reinterpret_cast<context*>(static_cast<char*>(shared) + FromOff),
                    reinterpret_cast<context*>(static_cast<char*>(shared) + ToOff), false);
    raw_switch_shared<FromOff, ToOff, Send>(shared, word);
    context_started(reinterpret_cast<context*>(static_cast<char*>(shared) + FromOff));
}

template <std::size_t FromOff, std::size_t ToOff>
[[noreturn]] SPINDLE_ALWAYS_INLINE void switch_shared_final(void* shared, std::uintptr_t word) noexcept {
    annotate_switch(reinterpret_cast<context*>(static_cast<char*>(shared) + FromOff),
                    reinterpret_cast<context*>(static_cast<char*>(shared) + ToOff), true);
    raw_switch_shared<FromOff, ToOff>(shared, word);
    __builtin_unreachable();
}

// Entry functions receive raw contexts; the record is the first member.
SPINDLE_ALWAYS_INLINE context* context_of(raw_context* r) noexcept {
    return reinterpret_cast<context*>(r);
}

}  // namespace spindle::arch
