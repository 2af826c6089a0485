// spindle/locks/locks.hpp — every thread lock of locks/.
//
// Thread-level mutual exclusion that needs no spindle runtime: usable from
// any thread, and (the contract preload/ builds on) placeable inside a
// caller's pthread_mutex_t. Every type below:
//
//   * meets Lockable: lock(), [[nodiscard]] try_lock(), unlock(), all
//     noexcept, so std::lock_guard, std::scoped_lock and std::unique_lock
//     work; carries Clang capability annotations and, under TSan, mutex
//     annotations;
//   * is unlocked as all-zero bytes, with a constexpr default constructor
//     (a zeroed pthread_mutex_t, a zero-initialized global);
//   * is at most 16 bytes, aligned to at most 8, trivially destructible;
//   * keeps its per-thread state (Hemlock's Grant words, MCS/CLH node
//     caches) in trivially destructible initial-exec TLS, usable from any
//     thread -- the main thread, and threads running other libraries' TLS
//     destructors at exit -- and cleaned up at thread exit through a pthread
//     key (locks/detail/lock_support.hpp); no malloc anywhere;
//   * aborts with a message naming the type and the address on an unlock of
//     an unlocked lock in debug builds (SPINDLE_DEBUG_CHECKS).
//
//     type                    algorithm                     bytes  fair  waits
//     tas_lock                test-and-set                   4     no    spin
//     ttas_lock               test-and-test-and-set+backoff  4     no    spin
//     ticket_lock             ticket                         8     FIFO  spin (global)
//     compact_ticket_lock     ticket, one word               4     FIFO  spin (global)
//     mcs_lock                MCS queue                     16     FIFO  spin (local)
//     clh_lock                CLH queue, no dummy node      16     FIFO  spin (local)
//     hemlock                 Hemlock, CTR (Listing 2)       8     FIFO  spin (local*)
//     hemlock_naive           Hemlock, Listing 1             8     FIFO  spin (local*)
//     hemlock_overlap         Hemlock, Appendix A            8     FIFO  spin (local*)
//     hemlock_aho             Hemlock, Appendix B (**)       8     FIFO  spin (local*)
//
//   and a *_park twin of each (tas_park_lock, ttas_park_lock,
//   ticket_park_lock, mcs_park_lock, clh_park_lock, hemlock_park,
//   hemlock_naive_park, hemlock_overlap_park, hemlock_aho_park) that spins
//   briefly and then sleeps on a futex (locks/wait_policy.hpp). The FIFO
//   families' twins are a futex gate a running thread may take, in front of
//   the FIFO algorithm, which orders the waiters (locks/detail/park_gate.hpp:
//   16 bytes each; waiters are admitted in queue order among themselves,
//   `barges` says others may overtake them, a waiter that waited 1 ms is
//   handed the lock). A strict FIFO handover with sleeping waiters runs at
//   the pace of wake-ups: 500x slower than glibc with 8 threads on 2 CPUs.
//
//   (*)  unless a thread holds several contended locks (multi-waiting).
//   (**) not for a lock its next holder may free (pthread_mutex_t included).
//
// Beside them, for any of these (their own headers; not in this one, and
// not bound by the 16-byte contract): basic_rw_lock<W> (locks/rw_lock.hpp),
// a reader-writer lock whose writers queue on W; futex_cond
// (locks/futex_cond.hpp), a condition variable that waits with any of them.
//
// Each type also has `name` (e.g. "spindle::mcs_park_lock"), `is_fifo` and
// `parks` (the gated twins also `barges`). The out-of-line parts (node pool, thread-exit hook, misuse
// report) are the CMake target spindle::locks, position-independent so a
// shared library can link it.
#pragma once

#include <spindle/locks/clh_lock.hpp>
#include <spindle/locks/hemlock.hpp>
#include <spindle/locks/mcs_lock.hpp>
#include <spindle/locks/tas_lock.hpp>
#include <spindle/locks/ticket_lock.hpp>
#include <spindle/locks/ttas_lock.hpp>
#include <spindle/locks/wait_policy.hpp>
