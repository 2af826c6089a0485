// preload/rwlock.hpp — pthread_rwlock_*: a reader-writer lock whose writers
// queue on the chosen spindle lock.
//
// Readers share; writers exclude everybody. Writers first take the writers'
// lock L (the SPINDLE_LOCK algorithm, so writers are ordered the way that
// algorithm orders them: FIFO for Hemlock, MCS, CLH and ticket), then deal
// with the readers through one 32-bit state word:
//
//     31                               2   1        0
//     +---------------------------------+--------+--------+
//     |           readers               | PARKED | WRITER |
//     +---------------------------------+--------+--------+
//
//     readers  how many threads hold a read lock (30 bits; EAGAIN when full)
//     WRITER   a writer holds the lock, or — writer-preferring only — has
//              claimed it and waits for the readers to leave
//     PARKED   at least one thread sleeps on the word (futex): whoever
//              changes what sleepers wait for clears PARKED and wakes them all
//
// Invariants: WRITER is set only by the holder of L. In a reader-preferring
// lock, WRITER implies readers == 0.
//
// Preference (pthread_rwlockattr_setkind_np, kept in __flags at offset 48):
//
//     PTHREAD_RWLOCK_PREFER_READER_NP (default) and PREFER_WRITER_NP (which
//     glibc treats the same way): a reader enters whenever no writer holds
//     the lock, so a thread may take read locks recursively; writers may
//     starve under a steady stream of readers — as in glibc.
//     PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP (and its static
//     initializer): a writer sets WRITER as soon as it holds L, which stops
//     new readers; it then waits for the readers inside to leave. A thread
//     that re-takes a read lock while a writer waits deadlocks, as POSIX
//     allows for this kind.
//
// Waiting: a reader or writer spins briefly on the word, then sets PARKED and
// sleeps on it. Wake-ups wake every sleeper (a writer leaving must let all
// readers in; a sleeping writer and sleeping readers share the word): a
// reader-heavy lock pays a thundering herd when a writer leaves, which is the
// point of a reader-writer lock anyway.
//
// Ownership: the writer's thread_id() is kept in __writers (offset 4); unlock
// uses it to tell a write unlock from a read unlock, and wrlock/rdlock by the
// writer itself return EDEADLK (trywrlock/tryrdlock: EBUSY), as glibc does.
//
// Process-shared rwlocks are glibc's (its init sets __shared; routed).
//
// Under SPINDLE_LOCK=tclock and tclock_blocking the rwlock is not this one
// but spindle::tclock_shared (rwlock_tclock_impl at the end of this file).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <spindle/locks/tclock_shared.hpp>

#include "delegation.hpp"
#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

namespace rw {
inline constexpr std::uint32_t writer = 1;  // WRITER
inline constexpr std::uint32_t parked = 2;  // PARKED
inline constexpr std::uint32_t reader = 4;  // one reader
inline constexpr std::uint32_t readers_mask = ~(writer | parked);
inline constexpr unsigned spin_limit = 100;  // polls of the word before sleeping
}  // namespace rw

// What does not depend on the lock algorithm (shared with the fork-child
// table in exports.cpp).
struct rwlock_common {
    static std::atomic_ref<std::uint32_t> state_of(pthread_rwlock_t* rw) noexcept {
        return word<std::uint32_t>(rw, rwlock_layout::state);
    }
    static std::atomic<std::uint32_t>* futex_of(pthread_rwlock_t* rw) noexcept {
        // The kernel only needs the address of the 32-bit word.
        return at<std::atomic<std::uint32_t>>(rw, rwlock_layout::state);
    }
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
    static bool i_am_writer(pthread_rwlock_t* rw) noexcept {
        std::uint32_t self = thread_id_if_any();
        // relaxed: equals self only if this thread stored it and has not
        // cleared it since (its own earlier writes).
        return self != 0 && owner_of(rw).load(std::memory_order_relaxed) == self;
    }

    // Sleeps until the state may have changed from `seen` (which failed the
    // caller's test). false: the deadline passed.
    static bool park(pthread_rwlock_t* rw, std::uint32_t seen, clockid_t c,
                     const struct timespec* abs) noexcept {
        auto st = state_of(rw);
        if (!(seen & rw::parked)) {
            // relaxed: PARKED only asks the next changer to wake us; the
            // futex call re-reads the word atomically with going to sleep,
            // so a change after this CAS makes it return at once.
            if (!st.compare_exchange_strong(seen, seen | rw::parked, std::memory_order_relaxed))
                return true;  // changed already: look again
            seen |= rw::parked;
        }
        return futex_wait_until(futex_of(rw), seen, c, abs) != ETIMEDOUT;
    }

    // Clears PARKED (if set in `old`) already done by the caller's RMW; wakes.
    static void wake(pthread_rwlock_t* rw, std::uint32_t old) noexcept {
        if (old & rw::parked) futex_wake_all(futex_of(rw));
    }

    // In a single-threaded fork child (exports.cpp): a write lock is reset,
    // not handed to a writer that did not survive the fork.
    static int child_unlock(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) return real<real_fn::rwlock_unlock, int(pthread_rwlock_t*)>()(rw);
        if (!i_am_writer(rw)) {
            read_unlock(rw);
            return 0;
        }
        release_write(rw);
        zero_lock_room(rw, rwlock_layout::lock);
        return 0;
    }

    // ---- readers

    // One attempt; EBUSY if a writer holds or claims the lock.
    static int try_read(pthread_rwlock_t* rw) noexcept {
        auto st = state_of(rw);
        std::uint32_t s = st.load(std::memory_order_relaxed);
        for (;;) {
            if (s & rw::writer) return EBUSY;
            if ((s & rw::readers_mask) == rw::readers_mask) return EAGAIN;
            // acquire pairs with the release in write_unlock(): the reader
            // sees what the last writer wrote. (r, p, 0) -> (r+1, p, 0)
            if (st.compare_exchange_weak(s, s + rw::reader, std::memory_order_acquire,
                                         std::memory_order_relaxed))
                return 0;
        }
    }

    static void read_unlock(pthread_rwlock_t* rw) noexcept {
        auto st = state_of(rw);
        std::uint32_t s = st.load(std::memory_order_relaxed);
        std::uint32_t n;
        do {
            n = s - rw::reader;
            // The last reader out wakes the sleepers (a writer waits for
            // readers == 0). (1, p, w) -> (0, 0, w); (r, p, w) -> (r-1, p, w)
            if ((n & rw::readers_mask) == 0) n &= ~rw::parked;
            // release pairs with the writer's acquire when it sees no reader.
        } while (!st.compare_exchange_weak(s, n, std::memory_order_release,
                                           std::memory_order_relaxed));
        if ((n & rw::readers_mask) == 0) wake(rw, s);
    }

    // The writer's release of the state word (before it releases L).
    static void release_write(pthread_rwlock_t* rw) noexcept {
        owner_of(rw).store(0, std::memory_order_relaxed);  // before the release below
        // release pairs with the acquire of the next reader's or writer's
        // CAS. WRITER is cleared before L is passed on: the next writer's
        // claim must find it clear. (r, p, 1) -> (r, 0, 0)
        std::uint32_t old = state_of(rw).fetch_and(~(rw::writer | rw::parked),
                                                   std::memory_order_release);
        wake(rw, old);
    }
};

template <class L, bool Stats>
struct rwlock_impl : rwlock_common {
    static_assert(fits_lock_room<L>, "the lock must fit in 16 bytes of pthread_rwlock_t");

    static L& lock_of(pthread_rwlock_t* rw) noexcept { return *at<L>(rw, rwlock_layout::lock); }

    // abs: null, or a valid deadline on clock c.
    static int read_lock(pthread_rwlock_t* rw, clockid_t c, const struct timespec* abs) noexcept {
        if (i_am_writer(rw)) return EDEADLK;
        int r = try_read(rw);
        if (r != EBUSY) {
            if constexpr (Stats)
                if (r == 0) stats_record(rw, object_kind::rwlock_read, false, 0);
            return r;
        }
        std::uint64_t t0 = Stats ? now_ns() : 0;
        auto st = state_of(rw);
        unsigned spins = 0;
        for (;;) {
            r = try_read(rw);
            if (r != EBUSY) break;
            std::uint32_t s = st.load(std::memory_order_relaxed);
            if (!(s & rw::writer)) continue;
            if (spins < rw::spin_limit) {
                ++spins;
                arch::cpu_relax();
            } else if (!park(rw, s, c, abs)) {
                r = ETIMEDOUT;
                break;
            }
        }
        if constexpr (Stats)
            if (r == 0) stats_record(rw, object_kind::rwlock_read, true, now_ns() - t0);
        return r;
    }

    // ---- writers

    // With L held: take the state for writing. wait == false: one attempt.
    // false: busy (no wait) or the deadline passed; the caller releases L.
    // *waited: the state was not free at once (statistics).
    static bool claim(pthread_rwlock_t* rw, bool wait, clockid_t c, const struct timespec* abs,
                      bool* waited) noexcept {
        auto st = state_of(rw);
        unsigned spins = 0;
        if (prefers_writers(rw)) {
            // Stop new readers now, then wait for those inside to leave.
            // acquire pairs with the release of the readers' read_unlock().
            // (r, p, 0) -> (r, p, 1)
            std::uint32_t s = st.fetch_or(rw::writer, std::memory_order_acquire) | rw::writer;
            while ((s & rw::readers_mask) != 0) {
                *waited = true;
                if (wait && spins < rw::spin_limit) {
                    ++spins;
                    arch::cpu_relax();
                } else if (!wait || !park(rw, s, c, abs)) {
                    // Give the claim up and let the readers it stopped in.
                    // relaxed: nothing was written under the claim.
                    // (r, p, 1) -> (r, 0, 0)
                    std::uint32_t old =
                        st.fetch_and(~(rw::writer | rw::parked), std::memory_order_relaxed);
                    wake(rw, old);
                    return false;
                }
                s = st.load(std::memory_order_acquire);  // as the fetch_or above
            }
            return true;
        }
        std::uint32_t s = st.load(std::memory_order_relaxed);
        for (;;) {
            if ((s & ~rw::parked) == 0) {
                // acquire pairs with the readers' release in read_unlock()
                // and the last writer's in write_unlock(). (0, p, 0) -> (0, p, 1)
                if (st.compare_exchange_weak(s, s | rw::writer, std::memory_order_acquire,
                                             std::memory_order_relaxed))
                    return true;
                continue;
            }
            *waited = true;
            if (!wait) return false;
            if (spins < rw::spin_limit) {
                ++spins;
                arch::cpu_relax();
            } else if (!park(rw, s, c, abs)) {
                return false;
            }
            s = st.load(std::memory_order_relaxed);
        }
    }

    // abs: null, or a valid deadline on clock c.
    static int write_lock(pthread_rwlock_t* rw, clockid_t c,
                          const struct timespec* abs) noexcept SPINDLE_NO_TSA {
        std::uint32_t self = thread_id();
        if (owner_of(rw).load(std::memory_order_relaxed) == self) return EDEADLK;  // see i_am_writer
        L& l = lock_of(rw);
        std::uint64_t t0 = Stats ? now_ns() : 0;
        bool waited = false;
        if (!l.try_lock()) {
            waited = true;
            if (abs == nullptr)
                l.lock();
            else if (!poll_until(try_lock_of<L>{l}, c, abs))
                return ETIMEDOUT;
        }
        if (!claim(rw, true, c, abs, &waited)) {
            l.unlock();
            return ETIMEDOUT;
        }
        // relaxed: see i_am_writer; ordered before our release in write_unlock.
        owner_of(rw).store(self, std::memory_order_relaxed);
        if constexpr (Stats)
            stats_record(rw, object_kind::rwlock_write, waited, waited ? now_ns() - t0 : 0);
        return 0;
    }

    static void write_unlock(pthread_rwlock_t* rw) noexcept SPINDLE_NO_TSA {
        release_write(rw);
        lock_of(rw).unlock();
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
        int r = try_read(rw);
        if constexpr (Stats)
            if (r == 0) stats_record(rw, object_kind::rwlock_read, false, 0);
        return r;
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
        L& l = lock_of(rw);
        if (!l.try_lock()) return EBUSY;
        bool waited = false;
        if (!claim(rw, false, CLOCK_REALTIME, nullptr, &waited)) {
            l.unlock();
            return EBUSY;
        }
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
    static int unlock(pthread_rwlock_t* rw) noexcept {
        if (routed(rw)) return real<real_fn::rwlock_unlock, int(pthread_rwlock_t*)>()(rw);
        if (i_am_writer(rw))
            write_unlock(rw);
        else
            read_unlock(rw);
        return 0;
    }
};

// ---------------------------------------------------------------------------
// SPINDLE_LOCK=tclock, tclock_blocking: spindle::tclock_shared (TCLock-RW).
//
// The whole rwlock is a tclock_shared in the 16 bytes at offset 8 (it fits:
// 16 bytes, 8-aligned, all-zero is unlocked, static_assert below); the state
// word at offset 0 stays 0 and __writers (offset 4) keeps the writer's
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
// is), and clears __writers before a write unlock. Identity is needed for
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
