// preload/cond.hpp — pthread_cond_*: spindle::futex_cond
// (locks/futex_cond.hpp) inside the pthread_cond_t, working with the
// mutexes of this library.
//
// Why not glibc's condition variable: its wait unlocks and relocks the mutex
// with glibc's internal mutex functions, which interposition does not reach;
// it would treat our lock words as glibc's. Why a sequence counter rather
// than the shadow-mutex technique (a glibc mutex paired with each of ours,
// taken around every wait): the counter needs no extra object, no side
// table and nothing on the mutex fast path; the condition variable is the
// only thing that knows about waiting.
//
// The futex_cond sits at offset 0 (layout.hpp: seq, waiters, flags), so
// PTHREAD_COND_INITIALIZER (all zero) is a valid one. Its protocol (steps 1
// to 6, why no wake-up is lost, its two limits, and destroy waiting for the
// waiters to leave) is in locks/futex_cond.hpp; preload/README.md repeats the
// limits. What this file adds to its wait:
//
//   step 3 unlocks through the installed table (see wait()), releasing
//   every level of a recursive mutex; step 4 is a cancellation point; step
//   6 relocks with M::lock and restores the recursion depth.
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
#include <memory>

#include <spindle/locks/futex_cond.hpp>

#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

static_assert(sizeof(spindle::futex_cond) <= sizeof(pthread_cond_t) &&
              alignof(spindle::futex_cond) <= alignof(pthread_cond_t));
static_assert(spindle::futex_cond::clock_monotonic == cond_layout::clock_monotonic &&
              spindle::futex_cond::process_shared == cond_layout::process_shared);

inline spindle::futex_cond& cond_of(pthread_cond_t* c) noexcept { return *at<spindle::futex_cond>(c, 0); }

inline int cond_init(pthread_cond_t* c, const pthread_condattr_t* a) noexcept {
    std::uint32_t flags = 0;
    if (a != nullptr) {
        clockid_t clock = CLOCK_REALTIME;
        int pshared = PTHREAD_PROCESS_PRIVATE;
        pthread_condattr_getclock(a, &clock);
        pthread_condattr_getpshared(a, &pshared);
        if (clock == CLOCK_MONOTONIC) flags |= spindle::futex_cond::clock_monotonic;
        if (pshared != PTHREAD_PROCESS_PRIVATE) flags |= spindle::futex_cond::process_shared;
    }
    std::memset(static_cast<void*>(c), 0, sizeof *c);
    std::construct_at(&cond_of(c), flags);  // published by whatever shares c
    return 0;
}

// Wakes every waiter and waits until all have left (step 5).
inline int cond_destroy(pthread_cond_t* c) noexcept {
    cond_of(c).quiesce();
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
        // POSIX allows.
        spindle::futex_cond& cv = cond_of(f->c);
        if (cv.notified_since(f->seq)) cv.notify_one();
        cv.leave();  // step 5
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

        spindle::futex_cond& cv = cond_of(c);
        // Steps 1 and 2.
        std::uint32_t s = cv.enter();

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
            cv.leave();  // as in step 5
            return r;
        }

        // Step 4, cancellable: futex_cond::sleep's futex call, made by
        // cancel_wait.c.
        int w = 0;
        if (abs != nullptr && abs->tv_sec < 0) {
            w = ETIMEDOUT;  // long past (the kernel would call it EINVAL)
        } else {
            w = spindle_preload_cancellable_wait(reinterpret_cast<std::uint32_t*>(cv.seq_word()), s,
                                                 cv.futex_op(clock, abs != nullptr), abs, &on_cancel, &f);
        }
        // A timeout that raced with a signal counts as a wake-up. (A
        // relaxed look would do: only which value, not what it publishes,
        // matters here.)
        bool timed_out = w == ETIMEDOUT && !cv.notified_since(s);

        // Step 5: nothing of ours touches c after this.
        cv.leave();

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
        return wait(c, m, cond_of(c).clock(), abs);
    }
    static int clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock,
                         const struct timespec* abs) noexcept {
        if (!supported_clock(clock)) return EINVAL;
        return wait(c, m, clock, abs);
    }
};

inline int cond_signal(pthread_cond_t* c) noexcept {
    cond_of(c).notify_one();
    return 0;
}
inline int cond_broadcast(pthread_cond_t* c) noexcept {
    cond_of(c).notify_all();
    return 0;
}

}  // namespace spindle::preload
