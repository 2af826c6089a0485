// spindle/arch/tls.hpp — thread-locals that stay right across a migration.
//
// A fiber can suspend on one thread and resume on another (work stealing, a
// CES handoff). Compilers assume the opposite: within a function the thread
// pointer (%fs base on x86-64, tpidr_el0 on AArch64) is a constant, so the
// address of a thread_local may be computed once and reused after any call or
// asm statement, "memory" clobber or not -- the clobber makes the compiler
// reload a thread-local's *value*, not recompute its *address*. Seen in
// practice (GCC 12 and Clang 16/19, x86-64 and AArch64): the thread pointer
// or &tl_worker kept in a callee-saved register or a stack slot across the
// switch, and an inlined this_fiber::yield() whose %fs:0 read was hoisted out
// of the user's loop. After a migration such code reads and writes the
// variables of the thread the fiber *left*, which is running something else.
//
// So every thread-local that code running on a fiber reads after a switch --
// the worker of this thread, the C++ runtime's exception state pointer, the
// sanitizer bookkeeping -- is reached only through SPINDLE_FRESH_TLS_ADDRESS:
// an `asm volatile` that reads the thread pointer and adds the variable's
// offset, both here and now. A volatile asm is never merged with another,
// never hoisted out of a loop and never moved across another volatile asm
// (the switch is one), so each use reads the thread pointer of the thread it
// runs on. The variable itself is declared with an assembler name
// (SPINDLE_TLS_NAME) so the asm can name it, and with the initial-exec model,
// whose offset is a link-time constant (read from the GOT, or folded into an
// immediate by the linker in an executable).
//
// Loads and stores then go through the returned pointer as ordinary C++
// accesses: the compiler treats it as unknown memory, so a store followed by
// a load through two such pointers stays in order, and the switch's "memory"
// clobber orders both with the switch.
//
// tests/arch/tls_codegen_check.cmake compiles the runtime, the sync layer and
// a probe of every inline fast path a user loop can contain, and fails if
// the compiler itself touched the thread pointer anywhere in them: only these
// asm statements may.
//
// Cost: an address is three instructions (x86-64: mov %fs:0; add
// off(%rip)), a value read two on x86-64 (SPINDLE_FRESH_TLS_LOAD: mov
// off(%rip); mov %fs:(reg)) and four on AArch64, against one or two for a
// compiler-generated initial-exec access.
#pragma once

#include <spindle/arch/config.hpp>

// The assembler name given to a thread-local reached through
// SPINDLE_FRESH_TLS_ADDRESS (a plain C identifier, not mangled).
#define SPINDLE_TLS_NAME(sym) __asm__(sym)

#if defined(__x86_64__)
// addq: the linker may turn the GOT load into an immediate in an executable
// (initial-exec -> local-exec relaxation). "# spindle:tls" marks our own
// thread-pointer reads for the code-generation check.
#define SPINDLE_FRESH_TLS_ADDRESS(T, sym)                                                          \
    ([]() noexcept -> T* {                                                                          \
        T* spindle_tls_p_;                                                                          \
        __asm__ volatile("movq %%fs:0, %0  # spindle:tls\n\t"                                       \
                         "addq " sym "@gottpoff(%%rip), %0"                                         \
                         : "=r"(spindle_tls_p_));                                                   \
        return spindle_tls_p_;                                                                      \
    }())
// The value of a pointer-sized thread-local, loaded in one segment-relative
// access: `movq off, %r; movq %fs:(%r), %r`, two instructions and one
// dependent load fewer than an address followed by a load (the linker turns
// the first into an immediate in an executable). It is on the path of every
// this_fiber::yield(), twice: with it a 10-fiber yield ring costs what it
// did before fresh reads, 1.54 ns a switch against 1.95 ns with the address
// form (bench/switch, yield). Not used for the exception state: the switch's
// fast test reads it, and there the address form measured faster. "memory":
// the load is ordered with every store before it, such as
// set_current_worker()'s through the address.
#define SPINDLE_FRESH_TLS_LOAD(T, sym)                                                             \
    ([]() noexcept -> T {                                                                           \
        static_assert(sizeof(T) == 8, "SPINDLE_FRESH_TLS_LOAD: pointer-sized thread-locals only");  \
        T spindle_tls_v_;                                                                           \
        __asm__ volatile("movq " sym "@gottpoff(%%rip), %0\n\t"                                     \
                         "movq %%fs:(%0), %0  # spindle:tls"                                        \
                         : "=r"(spindle_tls_v_)                                                     \
                         :                                                                          \
                         : "memory");                                                               \
        return spindle_tls_v_;                                                                      \
    }())
#elif defined(__aarch64__)
#define SPINDLE_FRESH_TLS_ADDRESS(T, sym)                                                          \
    ([]() noexcept -> T* {                                                                          \
        T* spindle_tls_p_;                                                                          \
        unsigned long spindle_tls_off_;                                                             \
        __asm__ volatile("mrs %0, tpidr_el0  // spindle:tls\n\t"                                    \
                         "adrp %1, :gottprel:" sym "\n\t"                                           \
                         "ldr %1, [%1, #:gottprel_lo12:" sym "]\n\t"                                \
                         "add %0, %0, %1"                                                           \
                         : "=r"(spindle_tls_p_), "=&r"(spindle_tls_off_));                          \
        return spindle_tls_p_;                                                                      \
    }())
// (AArch64 has no segment-relative load: the address, then a load.)
#define SPINDLE_FRESH_TLS_LOAD(T, sym) (*SPINDLE_FRESH_TLS_ADDRESS(T, sym))
#else
#error "spindle: no thread-pointer access for this architecture (x86-64 and AArch64 are supported)"
#endif
