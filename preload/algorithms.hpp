// preload/algorithms.hpp — the SPINDLE_LOCK values and what each one uses.
//
//     SPINDLE_LOCK          pthread_mutex_t, rwlock writers   pthread_spinlock_t
//     hemlock               spindle::hemlock (Listing 2)      ticket_spin
//     hemlock_naive         spindle::hemlock_naive            ticket_spin
//     hemlock_overlap       spindle::hemlock_overlap          ticket_spin
//     mcs                   spindle::mcs_lock                 ticket_spin
//     clh                   spindle::clh_lock                 ticket_spin
//     ticket                spindle::ticket_lock              ticket_spin
//     tas                   spindle::tas_lock                 spindle::tas_lock
//     ttas                  spindle::ttas_lock                spindle::ttas_lock
//     <each of those>_park  its spin-then-futex twin          tas_park: spindle::tas_lock;
//                           (hemlock_park, mcs_park_lock...)  the others: spindle::ttas_lock
//                           hemlock_park is the default
//     tclock                spindle::tclock (TCLock-SP)        spindle::ttas_lock
//     tclock_blocking       spindle::tclock_blocking (TCLock-B) spindle::ttas_lock
//       (also accepted as tclock-blocking)
//     pthread               glibc's own functions, untouched
//
// rwlocks: for every value but the TCLocks, readers count themselves in one
// word and writers queue on the lock of the table (rwlock.hpp); under tclock
// and tclock_blocking the rwlock is spindle::tclock_shared (TCLock-RW),
// writers combined, whichever of the two was chosen.
//
// The TCLocks delegate: a contended critical section may run on the thread
// of the lock's current holder. Where this library depends on the calling
// thread it first moves such a section back (delegation.hpp); what a
// program's own code observes is in tclock.hpp and preload/README.md. Their
// spinlock is ttas_lock, the nearest 4-byte relative of their
// test-and-set gate.
//
// pthread_spinlock_t is 4 bytes: only the 32-bit locks fit, so the spinning
// FIFO families use ticket_spin (spin.hpp), the FIFO lock that fits. And a
// spinlock never sleeps, in the park families too: the park twins sleep on
// private futexes, and a spinlock may be process-shared with nothing in its
// one word to say so (a sleeper in another process would never be woken).
//
// The park families' spinlock is ttas_lock, not ticket_spin: they are for
// more threads than CPUs, and there a FIFO spinlock hands the lock to a
// waiter that is likely preempted while every thread behind it spins
// (bench/locks preload_spin, 2-8 threads on 2 CPUs: ticket_spin 0.006-0.03x
// glibc's pthread_spin_lock, 0.12-0.34 M lock/unlock per second). A thread
// that is running takes a free ttas_lock, as with glibc's spinlock, which
// is not fair either; what the park twins add for mutexes -- bounded
// unfairness through a handoff -- needs a sleeping waiter, which a
// spinlock does not have.
//
// Not offered: hemlock_aho. Its unlock still writes the lock word after the
// successor may have taken, released and freed the lock (locks/hemlock.hpp),
// and a pthread_mutex_t is freed by whoever holds it last.
//
// The default, hemlock_park: an unmodified program was written for glibc's
// mutex, which sleeps, and nothing tells us how many threads it runs or
// whether it blocks while holding a mutex. A pure spinning FIFO lock is
// right only when every waiter has a CPU of its own: with more threads than
// CPUs a lock handed to a preempted waiter stalls everyone behind it (LevelDB
// readrandom, 8 threads on 2 CPUs: hemlock 0.04x glibc, mcs 0.01x). The park
// twin costs the same as the spinning lock uncontended and with a CPU per
// thread (bench/locks: uncontended lock + unlock and LevelDB at 1 and 2
// threads within noise of hemlock), and holds glibc's rate oversubscribed.
//
// before_fork: what the thread that forks must settle first. hemlock_overlap
// returns from a contended unlock before its successor acknowledged the
// handover; in a fork child that successor does not exist, and the Grant
// word would stay full for ever. So the prepare handler drains it. The
// TCLocks: a fork() called from a critical section that a combiner runs
// would copy the combiner's thread into the child (and the child would go
// on as the combiner once the section ends); the prepare handler moves the
// section back to its own thread first (tclock_before_fork).
#pragma once

#include <spindle/locks/locks.hpp>
#include <spindle/locks/tclock.hpp>

#include "delegation.hpp"
#include "spin.hpp"

namespace spindle::preload {

#define SPINDLE_PRELOAD_ALGORITHM(id, lock_type, spin_type, before_fork_fn) \
    struct id {                                                             \
        static constexpr const char name[] = #id;                           \
        using lock = lock_type;                                             \
        using spin = spin_type;                                             \
        static constexpr void (*before_fork)() noexcept = before_fork_fn;   \
    };

SPINDLE_PRELOAD_ALGORITHM(hemlock, spindle::hemlock, ticket_spin, nullptr)
SPINDLE_PRELOAD_ALGORITHM(hemlock_park, spindle::hemlock_park, spindle::ttas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(hemlock_naive, spindle::hemlock_naive, ticket_spin, nullptr)
SPINDLE_PRELOAD_ALGORITHM(hemlock_naive_park, spindle::hemlock_naive_park, spindle::ttas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(hemlock_overlap, spindle::hemlock_overlap, ticket_spin,
                          &spindle::hemlock_overlap::drain_own_grant)
SPINDLE_PRELOAD_ALGORITHM(hemlock_overlap_park, spindle::hemlock_overlap_park, spindle::ttas_lock,
                          &spindle::hemlock_overlap_park::drain_own_grant)
SPINDLE_PRELOAD_ALGORITHM(mcs, spindle::mcs_lock, ticket_spin, nullptr)
SPINDLE_PRELOAD_ALGORITHM(mcs_park, spindle::mcs_park_lock, spindle::ttas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(clh, spindle::clh_lock, ticket_spin, nullptr)
SPINDLE_PRELOAD_ALGORITHM(clh_park, spindle::clh_park_lock, spindle::ttas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(ticket, spindle::ticket_lock, ticket_spin, nullptr)
SPINDLE_PRELOAD_ALGORITHM(ticket_park, spindle::ticket_park_lock, spindle::ttas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(tas, spindle::tas_lock, spindle::tas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(tas_park, spindle::tas_park_lock, spindle::tas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(ttas, spindle::ttas_lock, spindle::ttas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(ttas_park, spindle::ttas_park_lock, spindle::ttas_lock, nullptr)
SPINDLE_PRELOAD_ALGORITHM(tclock, spindle::tclock, spindle::ttas_lock, &tclock_before_fork)
SPINDLE_PRELOAD_ALGORITHM(tclock_blocking, spindle::tclock_blocking, spindle::ttas_lock,
                          &tclock_before_fork)

#undef SPINDLE_PRELOAD_ALGORITHM

// X(algorithm) for each, in the order the error message lists them.
#define SPINDLE_PRELOAD_ALGORITHMS(X)                                                      \
    X(hemlock) X(hemlock_park) X(hemlock_naive) X(hemlock_naive_park) X(hemlock_overlap)   \
    X(hemlock_overlap_park) X(mcs) X(mcs_park) X(clh) X(clh_park) X(ticket) X(ticket_park) \
    X(tas) X(tas_park) X(ttas) X(ttas_park) X(tclock) X(tclock_blocking)

// Other spellings SPINDLE_LOCK accepts: {alias, value}. The issue that asked
// for TCLock-B wrote tclock-blocking.
inline constexpr const char* algorithm_aliases[][2] = {{"tclock-blocking", "tclock_blocking"}};

}  // namespace spindle::preload
