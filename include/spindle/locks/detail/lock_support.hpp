// spindle/locks/detail/lock_support.hpp — what every thread lock of locks/
// shares: ThreadSanitizer annotations, the misuse report, the per-thread
// exit hook, and the test probe.
//
// TSan annotations. Each lock() / try_lock() / unlock() is bracketed by
// __tsan_mutex_pre_* / __tsan_mutex_post_* on the lock's address. TSan then
// knows the lock as a mutex: unlock -> next lock is a happens-before edge,
// lock-order inversions and unlocks of unlocked locks are reported -- and it
// ignores the memory accesses and atomics made between pre and post (the
// lock's own words, the queue nodes, the Grant words), which it could not
// pair correctly itself (a CLH waiter's acquire load pairs with a store its
// predecessor made to a node the waiter never names). The annotations
// compile to nothing without TSan.
//
// Thread exit. MCS and CLH threads cache queue nodes, and a hemlock_overlap
// thread may leave its Grant word full when it returns from unlock(); both
// must be dealt with before the thread's TLS goes away. run_at_thread_exit
// registers a function to run in the exiting thread, from a pthread key
// destructor: those run after the thread's C++ thread_local destructors
// (which may lock), and no C++ object needs constructing for it, so the TLS
// stays trivially destructible and initial-exec. After that destructor has
// run, lock_thread().exiting is true: the thread's caches are off and an
// overlap unlock waits for its successor itself, so a lock taken by a later
// destructor (another library's key) leaves nothing behind either.
// Registration costs one pthread_setspecific, once per thread, on a slow
// path. The main thread's hooks do not run at exit() (nothing is freed
// then).
#pragma once

#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/arch/fatal.hpp>

#if SPINDLE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace spindle::detail {

// Tests (tests/locks/) define it to read a FIFO lock's arrival word.
struct lock_probe;

// "spindle: <type> <address>: <what>", then abort (arch/fatal.hpp).
[[noreturn]] SPINDLE_COLD inline void lock_misuse(const char* type, const void* lock, const char* what) noexcept {
    fatal("%s %p: %s", type, lock, what);
}

// A thread_local of locks/, reached through an opaque copy of its address in
// ASan/UBSan builds. GCC 12 with -fsanitize=null can miscompile the null
// check of a TLS variable's address: the check's branch reuses the flags of
// the ASan shadow compare before it, and "finds" null (seen in
// basic_hemlock::try_lock inlined into std::scoped_lock). The empty asm makes
// the address an unknown value, which gets a real test. Other builds: the
// variable itself.
template <class T>
SPINDLE_ALWAYS_INLINE T& tls(T& v) noexcept {
#if SPINDLE_ASAN
    T* p = &v;
    __asm__("" : "+r"(p));
    return *p;
#else
    return v;
#endif
}

// ---- TSan ---------------------------------------------------------------------

// The real annotations (nothing unless built with -fsanitize=thread).
struct tsan_lock_annotations {
#if SPINDLE_TSAN
    static void* m(const void* lock) noexcept { return const_cast<void*>(lock); }
    static void pre_lock(const void* l) noexcept { __tsan_mutex_pre_lock(m(l), 0); }
    static void post_lock(const void* l) noexcept { __tsan_mutex_post_lock(m(l), 0, 0); }
    static void pre_try_lock(const void* l) noexcept { __tsan_mutex_pre_lock(m(l), __tsan_mutex_try_lock); }
    static void post_try_lock(const void* l, bool ok) noexcept {
        __tsan_mutex_post_lock(m(l), __tsan_mutex_try_lock | (ok ? 0u : __tsan_mutex_try_lock_failed), 0);
    }
    static void pre_unlock(const void* l) noexcept { (void)__tsan_mutex_pre_unlock(m(l), 0); }
    static void post_unlock(const void* l) noexcept { __tsan_mutex_post_unlock(m(l), 0); }
#else
    static void pre_lock(const void*) noexcept {}
    static void post_lock(const void*) noexcept {}
    static void pre_try_lock(const void*) noexcept {}
    static void post_try_lock(const void*, bool) noexcept {}
    static void pre_unlock(const void*) noexcept {}
    static void post_unlock(const void*) noexcept {}
#endif
};

// For code that runs under a model scheduler instead of TSan's eyes.
struct no_lock_annotations {
    static void pre_lock(const void*) noexcept {}
    static void post_lock(const void*) noexcept {}
    static void pre_try_lock(const void*) noexcept {}
    static void post_try_lock(const void*, bool) noexcept {}
    static void pre_unlock(const void*) noexcept {}
    static void post_unlock(const void*) noexcept {}
};

// ---- thread exit -------------------------------------------------------------------

using thread_exit_fn = void (*)() noexcept;

struct lock_thread_state {
    bool registered;   // our pthread key holds a value for this thread: the hooks will run
    bool exiting;      // the hooks ran: this thread is ending; caches off
    std::uint8_t hook_count;
    thread_exit_fn hooks[8];
};

// Zero-initialized, trivially destructible: usable from any thread, at any
// time, including from other libraries' TLS destructors.
inline constinit thread_local lock_thread_state tl_lock_thread SPINDLE_INITIAL_EXEC_TLS{};

inline lock_thread_state& lock_thread() noexcept { return tls(tl_lock_thread); }

// Run `fn` in this thread when it exits (once, however often registered).
// False when it will not: the thread is exiting already, or no pthread key
// could be had (then lock_thread().exiting is set for good: the thread works
// without caches, correct but slower). On false the caller does now what
// `fn` would have done.
SPINDLE_COLD bool run_at_thread_exit(thread_exit_fn fn) noexcept;

}  // namespace spindle::detail
