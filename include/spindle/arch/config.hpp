// spindle/arch/config.hpp — compiler and platform switches used by every layer.
//
// Nothing here generates code. It names, in one place, the attributes and
// feature tests the rest of spindle relies on:
//
//   SPINDLE_ALWAYS_INLINE   force inlining of a switching site (CACS needs the
//                           switch inlined into its caller to let the compiler
//                           save only what is live there).
//   SPINDLE_NOINLINE, SPINDLE_COLD   slow paths out of line.
//   SPINDLE_SWITCH_FN       calling convention for out-of-line functions that
//                           switch context: `preserve_none` on Clang >= 19 for
//                           x86-64 (the CACS paper, §3.3), nothing elsewhere.
//                           A preserve_none function saves no register for its
//                           caller, so a caller keeps live only what it needs
//                           and nothing is saved twice.
//   SPINDLE_ASAN, SPINDLE_TSAN   1 when built with that sanitizer.
//   SPINDLE_CACHE_LINE      destructive interference size we pad to.
//   SPINDLE_INITIAL_EXEC_TLS  the initial-exec TLS model for a thread_local
//                           the lock layer reads on its fast paths.
#pragma once

#include <cstddef>

// Supported compilers: GCC 12 or later, Clang 19 or later (README,
// "Supported platforms"). Older ones are refused, not merely untested:
//  - Clang before 19 ignores the context switch's clobber of rbx when rbx is
//    a function's base pointer (a frame with over-aligned locals and a
//    variable-sized allocation): the frame is then addressed through the
//    other context's rbx after the switch (LLVM issue 17204, fixed in 19).
//  - GCC before 12 is untested with C++20 here.
#if defined(__clang__)
#if __clang_major__ < 19
#error "spindle needs Clang 19 or later (or GCC 12 or later): earlier Clang keeps a frame's base pointer in rbx across an asm that clobbers it, which breaks the context switch"
#endif
#elif defined(__GNUC__)
#if __GNUC__ < 12
#error "spindle needs GCC 12 or later (or Clang 19 or later)"
#endif
#else
#error "spindle needs GCC 12 or later or Clang 19 or later"
#endif

#define SPINDLE_ALWAYS_INLINE inline __attribute__((always_inline))
#define SPINDLE_NOINLINE __attribute__((noinline))
#define SPINDLE_COLD __attribute__((cold, noinline))

#if defined(__clang__) && (__clang_major__ >= 19) && defined(__x86_64__)
#define SPINDLE_HAS_PRESERVE_NONE 1
#define SPINDLE_SWITCH_FN __attribute__((preserve_none))
#else
#define SPINDLE_HAS_PRESERVE_NONE 0
#define SPINDLE_SWITCH_FN
#endif

#if defined(__SANITIZE_ADDRESS__)
#define SPINDLE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPINDLE_ASAN 1
#endif
#endif
#ifndef SPINDLE_ASAN
#define SPINDLE_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define SPINDLE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPINDLE_TSAN 1
#endif
#endif
#ifndef SPINDLE_TSAN
#define SPINDLE_TSAN 0
#endif

// The thread-locals of locks/ are reached with one thread-pointer-relative
// load even from a shared library: the initial-exec model skips
// __tls_get_addr. Such a library must be loaded at program start (linked in,
// or LD_PRELOAD), not dlopen()ed late -- which is how the pthread
// interposition library is loaded.
#define SPINDLE_INITIAL_EXEC_TLS __attribute__((tls_model("initial-exec")))

// Debug checks (misuse detection). On in debug builds, or when asked for.
#if !defined(SPINDLE_DEBUG_CHECKS)
#if !defined(NDEBUG)
#define SPINDLE_DEBUG_CHECKS 1
#else
#define SPINDLE_DEBUG_CHECKS 0
#endif
#endif

// Save and restore the floating-point control state on every switch: the
// x87 control word and MXCSR on x86-64, FPCR on AArch64. The ABIs make it
// callee-saved, but programs almost never change it, so the default switch
// does not pay for it. Build with -DSPINDLE_SAVE_FP_CONTROL=1 (CMake option
// SPINDLE_SAVE_FP_CONTROL) if a fiber changes rounding modes.
#ifndef SPINDLE_SAVE_FP_CONTROL
#define SPINDLE_SAVE_FP_CONTROL 0
#endif

namespace spindle::arch {

// 64 bytes on x86-64 and on the AArch64 parts we target. We pad to it to keep
// per-worker and per-thread hot words off each other's lines.
inline constexpr std::size_t cache_line = 64;

}  // namespace spindle::arch

// Clang thread-safety analysis (-Wthread-safety). No-ops elsewhere.
#if defined(__clang__)
#define SPINDLE_TSA(x) __attribute__((x))
#else
#define SPINDLE_TSA(x)
#endif
#define SPINDLE_CAPABILITY(x) SPINDLE_TSA(capability(x))
#define SPINDLE_SCOPED_CAPABILITY SPINDLE_TSA(scoped_lockable)
#define SPINDLE_ACQUIRE(...) SPINDLE_TSA(acquire_capability(__VA_ARGS__))
#define SPINDLE_RELEASE(...) SPINDLE_TSA(release_capability(__VA_ARGS__))
#define SPINDLE_TRY_ACQUIRE(...) SPINDLE_TSA(try_acquire_capability(__VA_ARGS__))
#define SPINDLE_ACQUIRE_SHARED(...) SPINDLE_TSA(acquire_shared_capability(__VA_ARGS__))
#define SPINDLE_RELEASE_SHARED(...) SPINDLE_TSA(release_shared_capability(__VA_ARGS__))
#define SPINDLE_TRY_ACQUIRE_SHARED(...) SPINDLE_TSA(try_acquire_shared_capability(__VA_ARGS__))
#define SPINDLE_REQUIRES(...) SPINDLE_TSA(requires_capability(__VA_ARGS__))
#define SPINDLE_REQUIRES_SHARED(...) SPINDLE_TSA(requires_shared_capability(__VA_ARGS__))
#define SPINDLE_GUARDED_BY(x) SPINDLE_TSA(guarded_by(x))
#define SPINDLE_NO_TSA SPINDLE_TSA(no_thread_safety_analysis)
