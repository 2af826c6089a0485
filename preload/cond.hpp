// preload/cond.hpp — pthread_cond_*: a futex condition variable with a
// sequence number, working with the mutexes of this library.
//
// Why not glibc's condition variable: its wait unlocks and relocks the mutex
// with glibc's internal mutex functions, which interposition does not reach;
// it would treat our lock words as glibc's. Why a sequence counter rather
// than the shadow-mutex technique (a glibc mutex paired with each of ours,
// taken around every wait): the counter needs no extra object, no side
// table and nothing on the mutex fast path; the condition variable is the
// only thing that knows about waiting.
//
//     seq      (offset 0)  +1 on every signal or broadcast that finds waiters
//     waiters  (offset 4)  threads registered and not yet left
//     flags    (offset 8)  clock (CLOCK_MONOTONIC via pthread_condattr_setclock)
//                          and process-shared (the futex is then not private)
//
// wait(c, m), with m held:
//   1. waiters += 1                        } while still holding m, so a
//   2. s = seq                             } signaller holding m sees both
//   3. unlock m (through the installed table: see step 3 in wait())
//   4. futex_wait(&seq, s)                 returns at once if seq != s
//   5. (seq still read for the timeout case) waiters -= 1, the last access to c
//   6. lock m
// signal: if waiters != 0 { seq += 1; futex_wake(&seq, 1) }
// broadcast: if waiters != 0 { seq += 1; futex_wake(&seq, all) }
//
// No lost wake-up: the waiter reads seq before it releases m (2 before 3).
// A signaller that holds m either ran before step 1 (then the waiter was not
// yet waiting) or after step 3: then it increments seq after the waiter read
// it, and the kernel's check-and-sleep in step 4 is atomic with respect to
// the wake — the waiter either sees seq changed or is asleep and is woken.
// Spurious wake-ups happen (a wake-one can hit a waiter that arrived after
// the signal, the earlier one then returns from step 4 because seq moved),
// as POSIX allows. Two limits, both documented in preload/README.md: a wake-one
// reaches the kernel's first sleeper of highest priority, so with real-time
// priorities a later, higher-priority waiter can take a signal meant for an
// earlier one; and a waiter that sleeps through exactly 2^32 signals would
// miss its wake-up.
//
// broadcast wakes every waiter, which then contend for the mutex (thundering
// herd): the queue locks have no futex word a waiter could be requeued onto.
//
// destroy waits until every waiter has left step 5 (after waking all), so
// the common "broadcast, then destroy and free" pattern never frees memory a
// waiter still touches.
//
// Cancellation: wait, timedwait and clockwait are cancellation points. The
// futex sleep runs with asynchronous cancellation enabled (cancel_wait.c,
// the same technique glibc 2.36 uses for its cancellable system calls); a
// cancelled waiter leaves (step 5) and relocks m (step 6) before the
// thread's cleanup handlers run, as POSIX requires. A cancelled waiter that
// sees seq moved since step 2 may have been the one a signal woke: it
// signals once more before it leaves, so that the signal is not lost with
// it (at worst a spurious wake-up of another waiter).
//
// Recursive mutexes: wait releases all levels of a recursive mutex held by
// the caller and restores the depth after relocking. Errorcheck: waiting on
// a mutex the caller does not hold returns EPERM. Robust (glibc's) mutexes:
// EOWNERDEAD from the relock is returned.
//
// TCLocks: a wait called from a section that a combiner runs first moves
// back to its own thread (M::own_thread, delegation.hpp); the relock in
// step 6 may be delegated again, like any lock().
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

inline std::atomic<std::uint32_t>* cond_seq(pthread_cond_t* c) noexcept {
    return at<std::atomic<std::uint32_t>>(c, cond_layout::seq);
}
inline std::atomic_ref<std::uint32_t> cond_waiters(pthread_cond_t* c) noexcept {
    return word<std::uint32_t>(c, cond_layout::waiters);
}
inline std::uint32_t cond_flags(pthread_cond_t* c) noexcept {
    // relaxed: written by pthread_cond_init before sharing.
    return word<std::uint32_t>(c, cond_layout::flags).load(std::memory_order_relaxed);
}

inline int cond_init(pthread_cond_t* c, const pthread_condattr_t* a) noexcept {
    std::uint32_t flags = 0;
    if (a != nullptr) {
        clockid_t clock = CLOCK_REALTIME;
        int pshared = PTHREAD_PROCESS_PRIVATE;
        pthread_condattr_getclock(a, &clock);
        pthread_condattr_getpshared(a, &pshared);
        if (clock == CLOCK_MONOTONIC) flags |= cond_layout::clock_monotonic;
        if (pshared != PTHREAD_PROCESS_PRIVATE) flags |= cond_layout::process_shared;
    }
    std::memset(static_cast<void*>(c), 0, sizeof *c);
    word<std::uint32_t>(c, cond_layout::flags).store(flags, std::memory_order_relaxed);  // before sharing
    return 0;
}

// Wakes one or all waiters, if there are any.
inline int cond_wake(pthread_cond_t* c, bool all) noexcept {
    // seq_cst, with the seq_cst increment in wait step 1: a signaller that
    // does not hold the mutex but learned by other means that a waiter has
    // registered sees it. (One holding the mutex is ordered by the mutex.)
    if (cond_waiters(c).load(std::memory_order_seq_cst) == 0) return 0;
    bool shared = (cond_flags(c) & cond_layout::process_shared) != 0;
    // seq_cst: pairs with the waiter's read of seq (step 2); the futex
    // call below then wakes any waiter that read the old value.
    cond_seq(c)->fetch_add(1, std::memory_order_seq_cst);
    if (all)
        futex_wake_all(cond_seq(c), shared);
    else
        futex_wake_one(cond_seq(c), shared);
    return 0;
}

// Wakes every waiter and waits until all have left (step 5).
inline int cond_destroy(pthread_cond_t* c) noexcept {
    // acquire pairs with the release in step 5 (a waiter's last access).
    if (cond_waiters(c).load(std::memory_order_acquire) == 0) return 0;
    bool shared = (cond_flags(c) & cond_layout::process_shared) != 0;
    cond_seq(c)->fetch_add(1, std::memory_order_seq_cst);  // as in cond_wake
    futex_wake_all(cond_seq(c), shared);
    unsigned spins = 0;
    while (cond_waiters(c).load(std::memory_order_acquire) != 0) spin_step(spins);  // as above
    return 0;
}

// M: the mutex_impl of the installed algorithm.
template <class M>
struct cond_impl {
    // What a cancelled waiter needs to leave and relock (steps 5 and 6).
    struct frame {
        pthread_cond_t* c;
        pthread_mutex_t* m;
        std::uint32_t depth;  // recursion depth to restore, 0: not recursive
        std::uint32_t seq;    // seq as read in step 2
    };

    static void relock(pthread_mutex_t* m, std::uint32_t depth, int* err) noexcept {
        int r = M::lock(m);
        if (r != 0) *err = r;
        if (depth > 1) M::depth_of(m) = depth;
    }

    static void on_cancel(void* arg) noexcept {
        auto* f = static_cast<frame*>(arg);
        // A signal since step 2 may have woken this waiter (a wake-one goes
        // to the first sleeper), which will not return to act on it: pass
        // it on, before leaving (POSIX: a cancelled waiter must not consume
        // a signal while other waiters are blocked). If the signal woke
        // another waiter instead, this is one spurious wake-up more, which
        // POSIX allows. acquire pairs with the signaller's seq_cst
        // increment (cond_wake).
        if (cond_seq(f->c)->load(std::memory_order_acquire) != f->seq) cond_wake(f->c, false);
        cond_waiters(f->c).fetch_sub(1, std::memory_order_release);  // as in wait
        int ignored = 0;
        relock(f->m, f->depth, &ignored);
        // The unwinding goes on to the thread's cleanup handlers and its
        // end: on the cancelled thread, not on a combiner that ran the relock.
        M::own_thread();
        // In a fork child, the calls it unwinds withdraw their announcements
        // (exports.cpp, "Fork"); after the relock, which they cover.
        child_calls_cancelled();
    }

    // abs: null (no deadline) or a deadline on clock `clock`.
    static int wait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock,
                    const struct timespec* abs) noexcept {
        if (abs != nullptr && !valid_timespec(abs)) return EINVAL;
        // A TCLock's section waits on its own thread (delegation.hpp):
        // the cancellation point and the sleep are that thread's.
        M::own_thread();
        pthread_testcancel();  // a cancellation point even if it would not sleep

        std::uint32_t flags = cond_flags(c);
        // Step 1. seq_cst: see cond_wake.
        cond_waiters(c).fetch_add(1, std::memory_order_seq_cst);
        // Step 2. seq_cst: pairs with the signaller's increment.
        std::uint32_t s = cond_seq(c)->load(std::memory_order_seq_cst);

        // Step 3, releasing every level of a recursive mutex we hold.
        frame f{c, m, 0, s};
        int kind = mutex_kind(m);
        if ((kind & mutex_layout::route_bits) == 0 &&
            (kind & mutex_layout::type_mask) == PTHREAD_MUTEX_RECURSIVE &&
            thread_id_if_any() != 0 &&
            // relaxed: equal only to our own earlier store (mutex_impl::take).
            M::owner_of(m).load(std::memory_order_relaxed) == thread_id_if_any()) {
            f.depth = M::depth_of(m);
            M::depth_of(m) = 1;
        }
        // Through the installed table, not M::unlock: in a fork child's
        // single-threaded mode the table's unlock resets the lock instead of
        // handing it to a waiter that did not survive the fork (exports.cpp,
        // "Fork"); M::unlock would hand it over, and the relock in step 6
        // would then wait for that ghost for ever.
        int r = current()->mutex_unlock(m);
        if (r != 0) {  // EPERM: not the holder
            if (f.depth > 1) M::depth_of(m) = f.depth;
            cond_waiters(c).fetch_sub(1, std::memory_order_release);  // as in step 5
            return r;
        }

        // Step 4.
        int op = FUTEX_WAIT_BITSET;
        if (!(flags & cond_layout::process_shared)) op |= FUTEX_PRIVATE_FLAG;
        int w = 0;
        if (abs != nullptr && abs->tv_sec < 0) {
            w = ETIMEDOUT;  // long past (the kernel would call it EINVAL)
        } else {
            if (abs != nullptr && clock == CLOCK_REALTIME) op |= FUTEX_CLOCK_REALTIME;
            w = spindle_preload_cancellable_wait(reinterpret_cast<std::uint32_t*>(cond_seq(c)), s,
                                                 op, abs, &on_cancel, &f);
        }
        // A timeout that raced with a signal counts as a wake-up. relaxed:
        // only which value, not what it publishes, matters here.
        bool timed_out = w == ETIMEDOUT && cond_seq(c)->load(std::memory_order_relaxed) == s;

        // Step 5. release pairs with cond_destroy's acquire: nothing of ours
        // touches c after this.
        cond_waiters(c).fetch_sub(1, std::memory_order_release);

        // Step 6.
        int err = 0;
        relock(m, f.depth, &err);
        if (err != 0) return err;  // e.g. EOWNERDEAD from a robust mutex
        return timed_out ? ETIMEDOUT : 0;
    }

    static int wait_forever(pthread_cond_t* c, pthread_mutex_t* m) noexcept {
        return wait(c, m, CLOCK_REALTIME, nullptr);
    }
    static int timedwait(pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* abs) noexcept {
        clockid_t clock =
            (cond_flags(c) & cond_layout::clock_monotonic) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
        return wait(c, m, clock, abs);
    }
    static int clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock,
                         const struct timespec* abs) noexcept {
        if (!supported_clock(clock)) return EINVAL;
        return wait(c, m, clock, abs);
    }
};

inline int cond_signal(pthread_cond_t* c) noexcept { return cond_wake(c, false); }
inline int cond_broadcast(pthread_cond_t* c) noexcept { return cond_wake(c, true); }

}  // namespace spindle::preload
