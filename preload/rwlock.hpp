// preload/rwlock.hpp — pthread_rwlock_*: spindle::basic_rw_lock
// (locks/rw_lock.hpp) whose writers queue on the chosen spindle lock.
//
// The rwlock is a basic_rw_lock<L> at offset 0 of the pthread_rwlock_t (L:
// the SPINDLE_LOCK algorithm, so writers are ordered the way that algorithm
// orders them: FIFO for Hemlock, MCS, CLH and ticket). Its readers count
// themselves in the state word at offset 0, its writers take L right after
// it (offset 8, or 4 for a 4-byte L); all-zero is unlocked, as
// PTHREAD_RWLOCK_INITIALIZER is.
//
// Preference (pthread_rwlockattr_setkind_np, kept in __flags at offset 48),
// passed to every writer operation:
//
//     PTHREAD_RWLOCK_PREFER_READER_NP (default) and PREFER_WRITER_NP (which
//     glibc treats the same way): rw_preference::readers -- a reader enters
//     whenever no writer holds the lock, so a thread may take read locks
//     recursively; writers may starve under a steady stream of readers, as
//     in glibc.
//     PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP (and its static
//     initializer): rw_preference::writers -- a writer stops new readers as
//     soon as it holds L, then waits for the readers inside to leave. A
//     thread that re-takes a read lock while a writer waits deadlocks, as
//     POSIX allows for this kind.
//
// Ownership: the writer's thread_id() is kept in __cur_writer (offset 24);
// unlock uses it to tell a write unlock from a read unlock, and
// wrlock/rdlock by the writer itself return EDEADLK (trywrlock/tryrdlock:
// EBUSY), as glibc does.
//
// Process-shared rwlocks are glibc's (its init sets __shared; routed).
//
// Under SPINDLE_LOCK=tclock and tclock_blocking the rwlock is not this one
// but spindle::tclock_shared (rwlock_tclock_impl at the end of this file).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <spindle/locks/rw_lock.hpp>
#include <spindle/locks/tclock_shared.hpp>

#include "delegation.hpp"
#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

// What does not depend on the lock algorithm.
struct rwlock_common {
    static std::atomic_ref<std::uint32_t> owner_of(pthread_rwlock_t* rw) noexcept {
        return word<std::uint32_t>(rw, rwlock_layout::owner);
    }
    static bool routed(pthread_rwlock_t* rw) noexcept {
        // relaxed: written by glibc's pthread_rwlock_init before sharing.
        return word<int>(rw, rwlock_layout::shared).load(std::memory_order_relaxed) != 0;
    }
    static bool prefers_writers(pthread_rwlock_t* rw) noexcept {
        // relaxed: written at init (or by the static initializer).
        return word<std::uint32_t>(rw, rwlock_layout::flags).load(std::memory_order_relaxed) ==
               PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
    }
    static rw_preference preference(pthread_rwlock_t* rw) noexcept {
        return prefers_writers(rw) ? rw_preference::writers : rw_preference::readers;
    }
    static bool i_am_writer(pthread_rwlock_t* rw) noexcept {
        std::uint32_t self = thread_id_if_any();
        // relaxed: equals self only if this thread stored it and has not
        // cleared it since (its own earlier writes).
        return self != 0 && owner_of(rw).load(std::memory_order_relaxed) == self;
    }
};

template <class L, bool Stats>
struct rwlock_impl : rwlock_common {
    using RW = spindle::basic_rw_lock<L>;
    static_assert(sizeof(RW) <= rwlock_layout::owner && alignof(RW) <= alignof(pthread_rwlock_t),
                  "the rwlock must fit in the 24 bytes before __cur_writer");

    static RW& rw_of(pthread_rwlock_t* rw) noexcept { return *at<RW>(rw, rwlock_layout::state); }

    // In a single-threaded fork child (exports.cpp): a write lock is reset,
    // not handed to a writer that did not survive the fork.
    static int child_unlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        if (routed(rw)) return real<real_fn::rwlock_unlock, int(pthread_rwlock_t*)>()(rw);
        if (!i_am_writer(rw)) {
            rw_of(rw).unlock_shared();
            return 0;
        }
        owner_of(rw).store(0, std::memory_order_relaxed);  // the only thread
        rw_of(rw).reset_exclusive();
        return 0;
    }

    // ---- readers

    static int try_read(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        int r = static_cast<int>(rw_of(rw).try_read());
        if constexpr (Stats)
            if (r == 0) stats_record(rw, object_kind::rwlock_read, false, 0);
        return r;
    }

    // abs: null, or a valid deadline on clock c.
    static int read_lock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept
        SPINDLE_NO_TSA {
        if (i_am_writer(rw)) return EDEADLK;
        int r = static_cast<int>(rw_of(rw).try_read());
        if (r != EBUSY) {
            if constexpr (Stats)
                if (r == 0) stats_record(rw, object_kind::rwlock_read, false, 0);
            return r;
        }
        std::uint64_t t0 = Stats ? now_ns() : 0;
        r = static_cast<int>(rw_of(rw).read_until(c, abs));
        if constexpr (Stats)
            if (r == 0) stats_record(rw, object_kind::rwlock_read, true, now_ns() - t0);
        return r;
    }

    // ---- writers

    // abs: null, or a valid deadline on clock c.
    static int write_lock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept
        SPINDLE_NO_TSA {
        std::uint32_t self = thread_id();
        if (owner_of(rw).load(std::memory_order_relaxed) == self) return EDEADLK;  // see i_am_writer
        std::uint64_t t0 = Stats ? now_ns() : 0;
        bool waited = false;
        int r = static_cast<int>(rw_of(rw).write_until(preference(rw), c, abs, &waited));
        if (r != 0) return r;
        // relaxed: see i_am_writer; ordered before the release in unlock.
        owner_of(rw).store(self, std::memory_order_relaxed);
        if constexpr (Stats)
            stats_record(rw, object_kind::rwlock_write, waited, waited ? now_ns() - t0 : 0);
        return 0;
    }

    // ---- the pthread entry points

    static int init(pthread_rwlock_t* rw, const pthread_rwlockattr_t* a) noexcept {
        int kind = PTHREAD_RWLOCK_PREFER_READER_NP;
        if (a != nullptr) {
            int pshared = PTHREAD_PROCESS_PRIVATE;
            pthread_rwlockattr_getpshared(a, &pshared);
            pthread_rwlockattr_getkind_np(a, &kind);
            if (pshared != PTHREAD_PROCESS_PRIVATE) {
                int r = real<real_fn::rwlock_init,
                             int(pthread_rwlock_t*, const pthread_rwlockattr_t*)>()(rw, a);
                if (r == 0 && !routed(rw))
                    fatal("glibc initialized a process-shared rwlock without the __shared mark "
                          "this library expects; run without LD_PRELOAD");
                return r;
            }
        }
        std::memset(static_cast<void*>(rw), 0, sizeof *rw);
        word<std::uint32_t>(rw, rwlock_layout::flags)
            .store(static_cast<std::uint32_t>(kind), std::memory_order_relaxed);  // before sharing
        return 0;
    }

    static int destroy(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) return real<real_fn::rwlock_destroy, int(pthread_rwlock_t*)>()(rw);
        return 0;  // as glibc: no EBUSY check
    }

    static int rdlock(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) return real<real_fn::rwlock_rdlock, int(pthread_rwlock_t*)>()(rw);
        return read_lock(rw, CLOCK_REALTIME, nullptr);
    }
    static int tryrdlock(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) return real<real_fn::rwlock_tryrdlock, int(pthread_rwlock_t*)>()(rw);
        return try_read(rw);
    }
    static int timedrdlock(pthread_rwlock_t* rw, const struct timespec* abs) noexcept {
        if (routed(rw))
            return real<real_fn::rwlock_timedrdlock,
                        int(pthread_rwlock_t*, const struct timespec*)>()(rw, abs);
        if (!valid_timespec(abs)) return EINVAL;  // glibc checks before trying
        return read_lock(rw, CLOCK_REALTIME, abs);
    }
    static int clockrdlock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept {
        if (routed(rw))
            return real<real_fn::rwlock_clockrdlock,
                        int(pthread_rwlock_t*, clockid_t, const struct timespec*)>()(rw, c, abs);
        if (!supported_clock(c) || !valid_timespec(abs)) return EINVAL;
        return read_lock(rw, c, abs);
    }
    static int wrlock(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) return real<real_fn::rwlock_wrlock, int(pthread_rwlock_t*)>()(rw);
        return write_lock(rw, CLOCK_REALTIME, nullptr);
    }
    static int trywrlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        if (routed(rw)) return real<real_fn::rwlock_trywrlock, int(pthread_rwlock_t*)>()(rw);
        if (rw_of(rw).try_write(preference(rw)) != rw_status::acquired) return EBUSY;
        owner_of(rw).store(thread_id(), std::memory_order_relaxed);  // as in write_lock
        if constexpr (Stats) stats_record(rw, object_kind::rwlock_write, false, 0);
        return 0;
    }
    static int timedwrlock(pthread_rwlock_t* rw, const struct timespec* abs) noexcept {
        if (routed(rw))
            return real<real_fn::rwlock_timedwrlock,
                        int(pthread_rwlock_t*, const struct timespec*)>()(rw, abs);
        if (!valid_timespec(abs)) return EINVAL;
        return write_lock(rw, CLOCK_REALTIME, abs);
    }
    static int clockwrlock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept {
        if (routed(rw))
            return real<real_fn::rwlock_clockwrlock,
                        int(pthread_rwlock_t*, clockid_t, const struct timespec*)>()(rw, c, abs);
        if (!supported_clock(c) || !valid_timespec(abs)) return EINVAL;
        return write_lock(rw, c, abs);
    }
    static int unlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        if (routed(rw)) return real<real_fn::rwlock_unlock, int(pthread_rwlock_t*)>()(rw);
        if (i_am_writer(rw)) {
            // relaxed: ordered before the release of the unlock below.
            owner_of(rw).store(0, std::memory_order_relaxed);
            rw_of(rw).unlock();
        } else {
            rw_of(rw).unlock_shared();
        }
        return 0;
    }
};

// ---------------------------------------------------------------------------
// SPINDLE_LOCK=tclock, tclock_blocking: spindle::tclock_shared (TCLock-RW).
//
// The whole rwlock is a tclock_shared in the 16 bytes at offset 8 (it fits:
// 16 bytes, 8-aligned, all-zero is unlocked, static_assert below); the state
// word at offset 0 stays 0 and __cur_writer (offset 24) keeps the writer's
// thread_id(). Writers queue and are combined: a writer's section may run on
// a combiner's thread. Readers never delegate.
//
//     kind (attribute or initializer)    readers use
//     PREFER_READER_NP (the default)     lock_shared_reentrant: a reader
//     and PREFER_WRITER_NP               enters unless a writer is inside,
//                                        so a thread may take read locks
//                                        recursively (POSIX); writers may
//                                        starve, as under glibc
//     PREFER_WRITER_NONRECURSIVE_NP      lock_shared: once a writer queues,
//                                        new readers wait behind it (a
//                                        recursive read lock may deadlock,
//                                        as this kind allows)
//
// Ownership without thread identity where possible: unlock asks the lock
// whether it is held exclusively (a writer is inside only when no reader
// is), and clears __cur_writer before a write unlock. Identity is needed for
// EDEADLK only: wrlock and trywrlock first move a delegated caller back to
// its own thread (own_thread, delegation.hpp) so that the id recorded is
// the caller's; rdlock does the same when a writer holds the lock (it
// waits then anyway). Timed acquisitions poll try_lock/try_lock_shared
// (wait.hpp). EAGAIN: when 65535 readers are counted (tclock_shared's
// limit), read from a snapshot before entering. Process-shared: glibc's.
template <bool Stats>
struct rwlock_tclock_impl : rwlock_common {
    using L = spindle::tclock_shared;
    static_assert(fits_lock_room<L>, "tclock_shared must fit in 16 bytes of pthread_rwlock_t");
    static constexpr std::uint32_t max_readers = 0xffff;

    static L& lock_of(pthread_rwlock_t* rw) noexcept { return *at<L>(rw, rwlock_layout::lock); }

    // The owner check of rdlock/wrlock is a delegated writer's too.
    static void own_thread() noexcept { preload::own_thread<spindle::tclock>(); }

    struct try_read_of {
        L& lock;
        bool reentrant;
        bool operator()() const noexcept SPINDLE_NO_TSA {
            return reentrant ? lock.try_lock_shared_reentrant() : lock.try_lock_shared();
        }
    };

    // abs: null, or a valid deadline on clock c.
    static int read_lock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept
        SPINDLE_NO_TSA {
        // relaxed: see i_am_writer; nonzero: a writer holds it, maybe us.
        if (owner_of(rw).load(std::memory_order_relaxed) != 0) {
            own_thread();
            if (i_am_writer(rw)) return EDEADLK;
        }
        L& l = lock_of(rw);
        if (l.readers() >= max_readers) return EAGAIN;
        const try_read_of attempt{l, !prefers_writers(rw)};
        if (attempt()) {
            if constexpr (Stats) stats_record(rw, object_kind::rwlock_read, false, 0);
            return 0;
        }
        std::uint64_t t0 = Stats ? now_ns() : 0;
        if (abs != nullptr) {
            if (!poll_until(attempt, c, abs)) return ETIMEDOUT;
        } else if (attempt.reentrant) {
            l.lock_shared_reentrant();
        } else {
            l.lock_shared();
        }
        if constexpr (Stats) stats_record(rw, object_kind::rwlock_read, true, now_ns() - t0);
        return 0;
    }

    // abs: null, or a valid deadline on clock c.
    static int write_lock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept
        SPINDLE_NO_TSA {
        own_thread();
        std::uint32_t self = thread_id();
        if (owner_of(rw).load(std::memory_order_relaxed) == self) return EDEADLK;  // see i_am_writer
        L& l = lock_of(rw);
        std::uint64_t t0 = Stats ? now_ns() : 0;
        bool waited = false;
        if (!l.try_lock()) {
            waited = true;
            if (abs == nullptr)
                l.lock();  // may return on a combiner's thread: `self` is ours
            else if (!poll_until(try_lock_of<L>{l}, c, abs))
                return ETIMEDOUT;
        }
        // relaxed: see i_am_writer; ordered before our release in unlock.
        owner_of(rw).store(self, std::memory_order_relaxed);
        if constexpr (Stats)
            stats_record(rw, object_kind::rwlock_write, waited, waited ? now_ns() - t0 : 0);
        return 0;
    }

    // ---- the pthread entry points (init and destroy: rwlock_impl's)

    static int init(pthread_rwlock_t* rw, const pthread_rwlockattr_t* a) noexcept {
        return rwlock_impl<L, Stats>::init(rw, a);
    }
    static int destroy(pthread_rwlock_t* rw) noexcept { return rwlock_impl<L, Stats>::destroy(rw); }

    static int rdlock(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_rdlock, int(pthread_rwlock_t*)>()(rw);
        }
        return read_lock(rw, CLOCK_REALTIME, nullptr);
    }
    static int tryrdlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_tryrdlock, int(pthread_rwlock_t*)>()(rw);
        }
        L& l = lock_of(rw);
        if (l.readers() >= max_readers) return EAGAIN;
        if (!try_read_of{l, !prefers_writers(rw)}()) return EBUSY;  // the writer itself too, as glibc
        if constexpr (Stats) stats_record(rw, object_kind::rwlock_read, false, 0);
        return 0;
    }
    static int timedrdlock(pthread_rwlock_t* rw, const struct timespec* abs) noexcept {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_timedrdlock,
                        int(pthread_rwlock_t*, const struct timespec*)>()(rw, abs);
        }
        if (!valid_timespec(abs)) return EINVAL;  // glibc checks before trying
        return read_lock(rw, CLOCK_REALTIME, abs);
    }
    static int clockrdlock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_clockrdlock,
                        int(pthread_rwlock_t*, clockid_t, const struct timespec*)>()(rw, c, abs);
        }
        if (!supported_clock(c) || !valid_timespec(abs)) return EINVAL;
        return read_lock(rw, c, abs);
    }
    static int wrlock(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_wrlock, int(pthread_rwlock_t*)>()(rw);
        }
        return write_lock(rw, CLOCK_REALTIME, nullptr);
    }
    static int trywrlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        own_thread();
        if (routed(rw)) return real<real_fn::rwlock_trywrlock, int(pthread_rwlock_t*)>()(rw);
        if (!lock_of(rw).try_lock()) return EBUSY;
        owner_of(rw).store(thread_id(), std::memory_order_relaxed);  // as in write_lock
        if constexpr (Stats) stats_record(rw, object_kind::rwlock_write, false, 0);
        return 0;
    }
    static int timedwrlock(pthread_rwlock_t* rw, const struct timespec* abs) noexcept {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_timedwrlock,
                        int(pthread_rwlock_t*, const struct timespec*)>()(rw, abs);
        }
        if (!valid_timespec(abs)) return EINVAL;
        return write_lock(rw, CLOCK_REALTIME, abs);
    }
    static int clockwrlock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_clockwrlock,
                        int(pthread_rwlock_t*, clockid_t, const struct timespec*)>()(rw, c, abs);
        }
        if (!supported_clock(c) || !valid_timespec(abs)) return EINVAL;
        return write_lock(rw, c, abs);
    }
    static int unlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        if (routed(rw)) {
            own_thread();
            return real<real_fn::rwlock_unlock, int(pthread_rwlock_t*)>()(rw);
        }
        L& l = lock_of(rw);
        if (l.held_exclusive()) {
            // relaxed: ordered before the release of the unlock below.
            owner_of(rw).store(0, std::memory_order_relaxed);
            l.unlock();  // ends a delegated writer's section
        } else {
            l.unlock_shared();
        }
        return 0;
    }

    // In a single-threaded fork child (exports.cpp): a write lock is reset,
    // not handed to a writer or reader that did not survive the fork (that
    // also drops readers that were waiting and counted themselves).
    static int child_unlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        if (routed(rw)) return real<real_fn::rwlock_unlock, int(pthread_rwlock_t*)>()(rw);
        L& l = lock_of(rw);
        if (!l.held_exclusive()) {
            l.unlock_shared();
            return 0;
        }
        owner_of(rw).store(0, std::memory_order_relaxed);  // the only thread
        zero_lock_room(rw, rwlock_layout::lock);
        return 0;
    }
};

}  // namespace spindle::preload
