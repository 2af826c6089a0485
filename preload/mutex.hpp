// preload/mutex.hpp — pthread_mutex_* on a spindle lock living inside the
// caller's pthread_mutex_t.
//
// The lock L (one of include/spindle/locks/, chosen by SPINDLE_LOCK) sits in
// the 16 bytes at offset 24; __kind at 16 keeps glibc's meaning, so
// PTHREAD_MUTEX_INITIALIZER and the *_INITIALIZER_NP macros give valid
// unlocked mutexes of their kind without any call of ours. No side table.
//
// Contract (m: a mutex of ours; "self": the calling thread):
//
//     kind        lock              trylock    unlock by      relock by
//                                              a non-holder   the holder
//     normal      L::lock()         EBUSY      undefined (*)  deadlock
//     adaptive    as normal
//     recursive   depth + 1         depth + 1  EPERM          depth + 1
//                 (EAGAIN at 2^32-1)
//     errorcheck  L::lock()         EBUSY      EPERM          EDEADLK
//     robust, PI, PP, process-shared: glibc's, untouched (route_bits)
//
// (*) glibc happens to tolerate a normal mutex unlocked by another thread
//     (or unlocked twice); the queue locks do not (Hemlock's unlock hands
//     over through the unlocker's own Grant word). POSIX leaves it undefined.
//
// timedlock / clocklock: the deadline is kept, the lock taken by polling
// try_lock (see poll_until in wait.hpp for why a timed locker cannot queue).
// A mutex that can be locked at once is locked whatever the deadline; only
// then is the timespec checked (EINVAL), as glibc does; an unsupported
// clock is EINVAL at once.
//
// destroy: EBUSY if the mutex is held (tried with try_lock), else 0.
//
// TCLocks (SPINDLE_LOCK=tclock, tclock_blocking): a normal or adaptive
// mutex's critical section may run on a combiner's thread. Recursive and
// errorcheck mutexes, which compare owners, and the mutexes routed to glibc
// (which records the running thread) first move a delegated caller back to
// its own thread, and a recursive or errorcheck mutex's section runs on the
// thread that locked it (own_thread, delegation.hpp).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "delegation.hpp"
#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

// What does not depend on the lock algorithm (shared with the fork-child
// table in exports.cpp).
struct mutex_common {
    static std::atomic_ref<std::uint32_t> owner_of(pthread_mutex_t* m) noexcept {
        return word<std::uint32_t>(m, mutex_layout::owner);
    }
    // The recursion depth; read and written by the holder only, under the lock.
    static std::uint32_t& depth_of(pthread_mutex_t* m) noexcept {
        return *at<std::uint32_t>(m, mutex_layout::count);
    }

    // Unlock bookkeeping of a recursive or errorcheck mutex (type): checks
    // that the caller holds m and drops one level. true: the lock itself
    // must now be released; false: *result is unlock's answer (EPERM, or 0
    // for a recursive mutex still held).
    static bool drop(pthread_mutex_t* m, int type, int* result) noexcept {
        std::uint32_t self = thread_id_if_any();
        // relaxed: equal only if this thread stored it (take) and has not
        // cleared it since; both are its own earlier writes.
        if (self == 0 || owner_of(m).load(std::memory_order_relaxed) != self) {
            *result = EPERM;
            return false;
        }
        if (type == PTHREAD_MUTEX_RECURSIVE && --depth_of(m) != 0) {
            *result = 0;
            return false;
        }
        // relaxed: ordered before the release of the lock that follows.
        owner_of(m).store(0, std::memory_order_relaxed);
        return true;
    }
};

template <class L, bool Stats>
struct mutex_impl : mutex_common {
    static_assert(fits_lock_room<L>, "the lock must fit in 16 bytes of pthread_mutex_t");

    static L& lock_of(pthread_mutex_t* m) noexcept { return *at<L>(m, mutex_layout::lock); }

    // See delegation.hpp: before anything that depends on the calling thread.
    static void own_thread() noexcept { preload::own_thread<L>(); }

    // L::lock(), measured when Stats.
    static void acquire(pthread_mutex_t* m) noexcept SPINDLE_NO_TSA {
        L& l = lock_of(m);
        if constexpr (!Stats) {
            l.lock();
        } else if (l.try_lock()) {
            stats_record(m, object_kind::mutex, false, 0);
        } else {
            std::uint64_t t0 = now_ns();
            l.lock();
            stats_record(m, object_kind::mutex, true, now_ns() - t0);
        }
    }

    static bool try_acquire(pthread_mutex_t* m) noexcept SPINDLE_NO_TSA {
        if (!lock_of(m).try_lock()) return false;
        if constexpr (Stats) stats_record(m, object_kind::mutex, false, 0);
        return true;
    }

    // L::lock() with a deadline; false: timed out. EINVAL through *err.
    static bool acquire_until(pthread_mutex_t* m, clockid_t c, const struct timespec* abs,
                              int* err) noexcept SPINDLE_NO_TSA {
        L& l = lock_of(m);
        if (try_acquire(m)) return true;
        if (!valid_timespec(abs)) {
            *err = EINVAL;
            return false;
        }
        std::uint64_t t0 = Stats ? now_ns() : 0;
        if (!poll_until(try_lock_of<L>{l}, c, abs)) {
            *err = ETIMEDOUT;
            return false;
        }
        if constexpr (Stats) stats_record(m, object_kind::mutex, true, now_ns() - t0);
        return true;
    }

    static void release(pthread_mutex_t* m) noexcept SPINDLE_NO_TSA { lock_of(m).unlock(); }

    // ---- the pthread entry points

    static int init(pthread_mutex_t* m, const pthread_mutexattr_t* a) noexcept {
        int type = PTHREAD_MUTEX_NORMAL;
        if (a != nullptr) {
            int robust = PTHREAD_MUTEX_STALLED, protocol = PTHREAD_PRIO_NONE,
                pshared = PTHREAD_PROCESS_PRIVATE;
            pthread_mutexattr_getrobust(a, &robust);
            pthread_mutexattr_getprotocol(a, &protocol);
            pthread_mutexattr_getpshared(a, &pshared);
            pthread_mutexattr_gettype(a, &type);
            if (robust != PTHREAD_MUTEX_STALLED || protocol != PTHREAD_PRIO_NONE ||
                pshared != PTHREAD_PROCESS_PRIVATE) {
                // glibc's kind of mutex: glibc initializes it, and its
                // __kind flags route every later call to glibc.
                int r = real<real_fn::mutex_init, int(pthread_mutex_t*, const pthread_mutexattr_t*)>()(
                    m, a);
                if (r == 0 && (mutex_kind(m) & mutex_layout::route_bits) == 0)
                    fatal("glibc initialized a robust, priority or process-shared mutex without "
                          "the __kind flags this library expects; run without LD_PRELOAD");
                return r;
            }
        }
        std::memset(static_cast<void*>(m), 0, sizeof *m);
        word<int>(m, mutex_layout::kind).store(type & mutex_layout::type_mask,
                                              std::memory_order_relaxed);  // published by whatever shares m
        return 0;
    }

    static int destroy(pthread_mutex_t* m) noexcept SPINDLE_NO_TSA {
        int k = mutex_kind(m);
        if (k & mutex_layout::route_bits)
            return real<real_fn::mutex_destroy, int(pthread_mutex_t*)>()(m);
        if (!lock_of(m).try_lock()) return EBUSY;
        lock_of(m).unlock();
        return 0;
    }

    static int lock(pthread_mutex_t* m) noexcept {
        if (mutex_kind(m) == PTHREAD_MUTEX_NORMAL) [[likely]] {
            acquire(m);
            return 0;
        }
        return lock_kinded(m);
    }

    static int unlock(pthread_mutex_t* m) noexcept {
        if (mutex_kind(m) == PTHREAD_MUTEX_NORMAL) [[likely]] {
            release(m);
            return 0;
        }
        return unlock_kinded(m);
    }

    static int trylock(pthread_mutex_t* m) noexcept {
        int k = mutex_kind(m);
        if (k & mutex_layout::route_bits) {
            own_thread();
            return real<real_fn::mutex_trylock, int(pthread_mutex_t*)>()(m);
        }
        const int type = k & mutex_layout::type_mask;
        if (type == PTHREAD_MUTEX_RECURSIVE || type == PTHREAD_MUTEX_ERRORCHECK) own_thread();
        if (type == PTHREAD_MUTEX_RECURSIVE) {
            std::uint32_t self = thread_id();
            if (owner_of(m).load(std::memory_order_relaxed) == self) return deepen(m);
            if (!try_acquire(m)) return EBUSY;
            take(m, self);
            return 0;
        }
        if (!try_acquire(m)) return EBUSY;  // errorcheck held by self: EBUSY too
        if (type == PTHREAD_MUTEX_ERRORCHECK) take(m, thread_id());
        return 0;
    }

    static int timedlock(pthread_mutex_t* m, const struct timespec* abs) noexcept {
        if (mutex_kind(m) & mutex_layout::route_bits) {
            own_thread();
            return real<real_fn::mutex_timedlock, int(pthread_mutex_t*, const struct timespec*)>()(
                m, abs);
        }
        return lock_until(m, CLOCK_REALTIME, abs);
    }

    static int clocklock(pthread_mutex_t* m, clockid_t c, const struct timespec* abs) noexcept {
        if (mutex_kind(m) & mutex_layout::route_bits) {
            own_thread();
            return real<real_fn::mutex_clocklock,
                        int(pthread_mutex_t*, clockid_t, const struct timespec*)>()(m, c, abs);
        }
        if (!supported_clock(c)) return EINVAL;
        return lock_until(m, c, abs);
    }

    // ---- kinds other than normal

    // The holder relocks a recursive mutex.
    static int deepen(pthread_mutex_t* m) noexcept {
        std::uint32_t& depth = depth_of(m);
        if (depth == UINT32_MAX) return EAGAIN;
        ++depth;
        return 0;
    }

    // Just acquired a recursive or errorcheck mutex.
    static void take(pthread_mutex_t* m, std::uint32_t self) noexcept {
        depth_of(m) = 1;
        // relaxed: other threads read owner only to compare it with their
        // own id, which it never equals; the next holder's lock acquire
        // orders this store before its own.
        owner_of(m).store(self, std::memory_order_relaxed);
    }

    SPINDLE_NOINLINE static int lock_kinded(pthread_mutex_t* m) noexcept {
        int k = mutex_kind(m);
        if (k & mutex_layout::route_bits) {
            own_thread();
            return real<real_fn::mutex_lock, int(pthread_mutex_t*)>()(m);
        }
        switch (k & mutex_layout::type_mask) {
            case PTHREAD_MUTEX_RECURSIVE: {
                own_thread();
                std::uint32_t self = thread_id();
                // relaxed: equal only if this thread stored it (take) and
                // has not cleared it since (unlock_kinded); both are its own
                // earlier writes.
                if (owner_of(m).load(std::memory_order_relaxed) == self) return deepen(m);
                acquire(m);
                own_thread();  // the section runs where lock() was called
                take(m, self);
                return 0;
            }
            case PTHREAD_MUTEX_ERRORCHECK: {
                own_thread();
                std::uint32_t self = thread_id();
                if (owner_of(m).load(std::memory_order_relaxed) == self) return EDEADLK;  // as above
                acquire(m);
                own_thread();
                take(m, self);
                return 0;
            }
            default:  // adaptive: a normal mutex here
                acquire(m);
                return 0;
        }
    }

    SPINDLE_NOINLINE static int unlock_kinded(pthread_mutex_t* m) noexcept {
        int k = mutex_kind(m);
        int type = k & mutex_layout::type_mask;
        if ((k & mutex_layout::route_bits) || type == PTHREAD_MUTEX_RECURSIVE ||
            type == PTHREAD_MUTEX_ERRORCHECK)
            own_thread();
        if (k & mutex_layout::route_bits)
            return real<real_fn::mutex_unlock, int(pthread_mutex_t*)>()(m);
        int result = 0;
        if ((type == PTHREAD_MUTEX_RECURSIVE || type == PTHREAD_MUTEX_ERRORCHECK) &&
            !drop(m, type, &result))
            return result;
        release(m);
        return 0;
    }

    static int lock_until(pthread_mutex_t* m, clockid_t c, const struct timespec* abs) noexcept {
        int type = mutex_kind(m) & mutex_layout::type_mask;
        std::uint32_t self = 0;
        if (type == PTHREAD_MUTEX_RECURSIVE || type == PTHREAD_MUTEX_ERRORCHECK) {
            own_thread();
            self = thread_id();
            if (owner_of(m).load(std::memory_order_relaxed) == self)  // as in lock_kinded
                return type == PTHREAD_MUTEX_RECURSIVE ? deepen(m) : EDEADLK;
        }
        int err = 0;
        if (!acquire_until(m, c, abs, &err)) return err;
        if (self != 0) take(m, self);
        return 0;
    }
};

}  // namespace spindle::preload
