// preload/delegation.hpp — the TCLocks behind pthread objects
// (SPINDLE_LOCK=tclock and tclock_blocking), and where the library keeps a
// critical section on its own thread.
//
// A TCLock may run a contended critical section on another thread: the
// current holder (the combiner) switches onto the waiter's stack and runs
// its code up to its unlock (locks/tclock.hpp, "What a delegated critical
// section observes"). errno is carried both ways by the lock. What the
// section's code sees of *thread identity* is the combiner's: initial-exec
// TLS, pthread_self(), gettid(), the signal mask, cancellation state. This
// library itself depends on identity in a few places; each calls
// own_thread<L>() first, which moves a delegated section back to the thread
// that called lock() (tclock_may_block(); the lock stays held, the
// combiner's batch ends) and does nothing when nothing was delegated:
//
//   * recursive and errorcheck mutexes record and compare the owner's
//     thread_id() (mutex.hpp): own_thread before every operation on them,
//     and right after lock() has taken one, so a section of such a mutex
//     always runs on the locking thread (they are queued and handed over
//     like the others, but never combined);
//   * glibc's own mutexes (robust, priority, process-shared; routed to
//     glibc) record the kernel tid and the robust list of the running
//     thread: own_thread before every call to glibc;
//   * rwlock writers (rwlock.hpp, rwlock_tclock_impl) record their
//     thread_id() for EDEADLK: own_thread before wrlock, and before rdlock
//     when a writer holds the lock;
//   * pthread_cond_wait / timedwait / clockwait (cond.hpp): own_thread first:
//     the cancellation point, the futex sleep and the recursive-mutex owner
//     check must be the waiter's own (a wait run on the combiner would stall
//     its whole batch and sleep on the wrong thread); a cancelled waiter
//     relocks and moves back before the unwinding goes on;
//   * fork() (exports.cpp, the prepare handler): own_thread, so the child is
//     a copy of the thread that called fork(), not of a combiner running its
//     section;
//   * the common sleeping calls of libc (blocking.cpp: nanosleep, poll,
//     read, sem_wait, pthread_join, ...), so that a section that sleeps does
//     not put the combiner and its batch to sleep with it.
//
// Where the combiner adopts the waiter's thread pointer (x86-64 FSGSBASE,
// unless SPINDLE_TCLOCK_ADOPT=0; tclock.hpp), the identity a section sees is
// its own thread's but for what the kernel keeps (gettid(), signals), and
// the moves above are then only needed for the kernel's part (sleeping
// calls, robust/PI mutexes, fork); they are made either way. Without it,
// what stays the combiner's, and is documented rather than fixed (preload/README.md,
// "Limits"): the program's own use of identity inside a critical section
// (pthread_self(), gettid(), its own thread_local variables); glibc's
// per-thread state used inside one: malloc's thread cache and arena are the
// combiner's (legal: both are the running thread's to use, the combiner's
// own code is suspended in lock() and not inside malloc), stdio's and the
// dynamic loader's recursive locks taken *and kept past the unlock* would be
// owned by the combiner; pthread_exit() or a cancellation acted upon inside
// a delegated section would end the combiner's thread; the C++ exception
// state of a C++ program is not carried (the library's own libstdc++ is a
// private static copy).
#pragma once

#include <spindle/arch/config.hpp>
#include <spindle/locks/tclock.hpp>

namespace spindle::preload {

// Whether lock type L may run a critical section on another thread.
template <class L>
inline constexpr bool delegates = false;
template <>
inline constexpr bool delegates<spindle::tclock> = true;
template <>
inline constexpr bool delegates<spindle::tclock_blocking> = true;

// Moves a critical section that runs delegated back to the thread that
// called lock(); nothing when L does not delegate, or nothing was delegated.
template <class L>
SPINDLE_ALWAYS_INLINE void own_thread() noexcept {
    if constexpr (delegates<L>) spindle::tclock_may_block();
}

// The before_fork of the TCLock algorithms (algorithms.hpp): the fork
// happens on the thread that called fork().
inline void tclock_before_fork() noexcept { spindle::tclock_may_block(); }

}  // namespace spindle::preload
