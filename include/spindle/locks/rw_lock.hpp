// spindle/locks/rw_lock.hpp — a reader-writer lock whose writers queue on
// any lock of locks/.
//
//     spindle::rw_lock rw;                        // writers on hemlock_park
//     spindle::basic_rw_lock<spindle::mcs_lock> m;  // writers on an MCS queue
//     { std::shared_lock r(rw); ... }             // readers share
//     { std::lock_guard w(rw); ... }              // writers exclude everybody
//
// Writers first take the writers' lock W (so writers are ordered the way W
// orders them: FIFO for Hemlock, MCS, CLH and ticket), then deal with the
// readers through one 32-bit state word:
//
//     31                               2   1        0
//     +---------------------------------+--------+--------+
//     |           readers               | PARKED | WRITER |
//     +---------------------------------+--------+--------+
//
//     readers  how many threads hold a read lock (30 bits; full: rw_status::full)
//     WRITER   a writer holds the lock, or -- writer-preferring only -- has
//              claimed it and waits for the readers to leave
//     PARKED   at least one thread sleeps on the word (futex): whoever
//              changes what sleepers wait for clears PARKED and wakes them all
//
// Invariants: WRITER is set only by the holder of W. In a lock whose writers
// all prefer readers, WRITER implies readers == 0.
//
// Preference, chosen by each writer (rw_preference; lock() and try_lock()
// prefer readers):
//
//     readers  a reader enters whenever no writer holds the lock, so a thread
//              may take read locks recursively; writers may starve under a
//              steady stream of readers (glibc's default rwlock too).
//     writers  a writer sets WRITER as soon as it holds W, which stops new
//              readers; it then waits for the readers inside to leave. A
//              thread that re-takes a read lock while a writer waits
//              deadlocks.
//
// Waiting: a reader or writer spins briefly (spin_limit polls) on the word,
// then sets PARKED and sleeps on it (a private futex). Wake-ups wake every
// sleeper (a writer leaving must let all readers in; a sleeping writer and
// sleeping readers share the word): a reader-heavy lock pays a thundering
// herd when a writer leaves, which is the point of a reader-writer lock
// anyway. A writer waits for W as W waits; a writer with a deadline polls
// W's try_lock (detail/timed_wait.hpp, poll_until: W may be a queue lock,
// which a waiter cannot leave).
//
// Space: the state word, then W at its own alignment: 8 bytes for a 4-byte W,
// 24 for a 16-byte one; all-zero is unlocked; trivially destructible.
// preload/ puts one at the start of a pthread_rwlock_t.
//
// Contract (the full interface; the Lockable and SharedLockable names are
// the same operations without a deadline, readers preferred):
//
//     state \ call       read_until /    try_read   write_until /   try_write  unlock()/
//                        lock_shared                lock                       unlock_shared()
//     free               read-held       acquired   write-held      acquired   invalid (1)
//     read-held (others) read-held (+1)  acquired   waits (2)       busy       --
//     write-held         waits (2)       busy       waits (2)       busy       --
//     held by caller     (3)             (3)        deadlock (4)    busy       releases its hold
//     readers full       full            full       --              --         --
//
//     (1) unlock_shared() of a lock no reader holds aborts with
//         "spindle::rw_lock at <address>: unlock_shared() of a lock not
//         held shared" in debug builds (SPINDLE_DEBUG_CHECKS); the writers'
//         lock checks unlock() as it checks its own; undefined otherwise.
//     (2) until the deadline, if one was given: then timed_out.
//     (3) read-held by the caller: acquired again, unless a writer
//         preferring writers waits (then it deadlocks); write-held by the
//         caller: deadlock (try_read: busy).
//     (4) undefined; not detected (the lock names no owner: preload/ keeps
//         the writer's identity beside it and answers EDEADLK).
//
// Undefined: the uses marked above; copying or moving (deleted); destroying
// a held lock; calling it from a signal handler.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <memory>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/detail/timed_wait.hpp>
#include <spindle/locks/hemlock.hpp>

namespace spindle {

// Why an acquisition did or did not take the lock. The values are the errno
// codes pthread_rwlock_* answer for them.
enum class rw_status : int { acquired = 0, busy = EBUSY, full = EAGAIN, timed_out = ETIMEDOUT };

// Whom a writer lets go first (see the header).
enum class rw_preference : bool { readers, writers };

// Writers: a lock of locks/ (Lockable; all-zero unlocked).
template <class Writers>
class SPINDLE_CAPABILITY("mutex") basic_rw_lock {
public:
    static constexpr const char* name = "spindle::rw_lock";
    static constexpr std::uint32_t max_readers = (~std::uint32_t{0}) >> 2;  // 2^30 - 1
    static constexpr unsigned spin_limit = 100;  // polls of the word before sleeping

    constexpr basic_rw_lock() noexcept = default;
    basic_rw_lock(const basic_rw_lock&) = delete;
    basic_rw_lock& operator=(const basic_rw_lock&) = delete;

    // ---- Lockable and SharedLockable (std::shared_mutex's names)

    void lock() noexcept SPINDLE_ACQUIRE() { (void)write_until(rw_preference::readers, CLOCK_REALTIME, nullptr); }
    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        return try_write(rw_preference::readers) == rw_status::acquired;
    }
    void unlock() noexcept SPINDLE_RELEASE() SPINDLE_NO_TSA {
        release_state();
        writers_.unlock();
    }

    // Waits while the readers are full (2^30 - 1 of them), too.
    void lock_shared() noexcept SPINDLE_ACQUIRE_SHARED() {
        while (read_until(CLOCK_REALTIME, nullptr) != rw_status::acquired) detail::sched_yield_now();
    }
    [[nodiscard]] bool try_lock_shared() noexcept SPINDLE_TRY_ACQUIRE_SHARED(true) {
        return try_read() == rw_status::acquired;
    }
    void unlock_shared() noexcept SPINDLE_RELEASE_SHARED() {
        std::uint32_t s = state_.load(std::memory_order_relaxed);
        if (SPINDLE_DEBUG_CHECKS && (s & readers_mask) == 0) misuse("unlock_shared() of a lock not held shared");
        std::uint32_t n;
        do {
            n = s - reader;
            // The last reader out wakes the sleepers (a writer waits for
            // readers == 0). (1, p, w) -> (0, 0, w); (r, p, w) -> (r-1, p, w)
            if ((n & readers_mask) == 0) n &= ~parked;
            // release pairs with the writer's acquire when it sees no reader.
        } while (!state_.compare_exchange_weak(s, n, std::memory_order_release, std::memory_order_relaxed));
        if ((n & readers_mask) == 0) wake(s);
    }

    // ---- the full interface (the thread-safety analysis does not follow
    // a status: annotate the caller)

    // One attempt to read: acquired, busy (a writer holds or claims the
    // lock) or full.
    [[nodiscard]] rw_status try_read() noexcept SPINDLE_NO_TSA {
        std::uint32_t s = state_.load(std::memory_order_relaxed);
        for (;;) {
            if (s & writer) return rw_status::busy;
            if ((s & readers_mask) == readers_mask) return rw_status::full;
            // acquire pairs with the release in release_state(): the reader
            // sees what the last writer wrote. (r, p, 0) -> (r+1, p, 0)
            if (state_.compare_exchange_weak(s, s + reader, std::memory_order_acquire, std::memory_order_relaxed))
                return rw_status::acquired;
        }
    }

    // Reads, waiting until abs on clock c (null: no deadline): acquired,
    // full or timed_out.
    [[nodiscard]] rw_status read_until(clockid_t c, const struct timespec* abs) noexcept SPINDLE_NO_TSA {
        unsigned spins = 0;
        for (;;) {
            const rw_status r = try_read();
            if (r != rw_status::busy) return r;
            const std::uint32_t s = state_.load(std::memory_order_relaxed);
            if (!(s & writer)) continue;
            if (spins < spin_limit) {
                ++spins;
                arch::cpu_relax();
            } else if (!park(s, c, abs)) {
                return rw_status::timed_out;
            }
        }
    }

    // One attempt to write: acquired or busy.
    [[nodiscard]] rw_status try_write(rw_preference p) noexcept SPINDLE_NO_TSA {
        if (!writers_.try_lock()) return rw_status::busy;
        bool waited = false;
        if (!claim(p, false, CLOCK_REALTIME, nullptr, &waited)) {
            writers_.unlock();
            return rw_status::busy;
        }
        return rw_status::acquired;
    }

    // Writes, waiting until abs on clock c (null: no deadline): acquired or
    // timed_out. *waited (if given): whether the lock was not free at once.
    [[nodiscard]] rw_status write_until(rw_preference p, clockid_t c, const struct timespec* abs,
                                        bool* waited = nullptr) noexcept SPINDLE_NO_TSA {
        bool w = false;
        if (!writers_.try_lock()) {
            w = true;
            if (abs == nullptr) {
                writers_.lock();
            } else if (!detail::poll_until(detail::try_lock_of<Writers>{writers_}, c, abs)) {
                if (waited != nullptr) *waited = w;
                return rw_status::timed_out;
            }
        }
        const bool ok = claim(p, true, c, abs, &w);
        if (!ok) writers_.unlock();
        if (waited != nullptr) *waited = w;
        return ok ? rw_status::acquired : rw_status::timed_out;
    }

    // The writer's release when every other thread is gone (a fork child:
    // they were the parent's): free and empty, the writers' lock not handed
    // to a waiter that no longer exists. A queue node W held is not returned
    // to its free list.
    void reset_exclusive() noexcept SPINDLE_RELEASE() SPINDLE_NO_TSA {
        release_state();
        // To ThreadSanitizer this is W's unlock by its holder (every lock of
        // locks/ annotates at its own address): unannotated, TSan went on
        // taking this thread for W's holder, and reported a "double lock"
        // when another thread later locked a lock at this address.
        detail::tsan_lock_annotations::pre_unlock(&writers_);
        std::construct_at(&writers_);  // all-zero: unlocked and empty
        detail::tsan_lock_annotations::post_unlock(&writers_);
    }

    // How many threads hold it shared now (relaxed: an observation).
    std::uint32_t readers() const noexcept { return (state_.load(std::memory_order_relaxed) & readers_mask) >> 2; }

private:
    static constexpr std::uint32_t writer = 1;  // WRITER
    static constexpr std::uint32_t parked = 2;  // PARKED
    static constexpr std::uint32_t reader = 4;  // one reader
    static constexpr std::uint32_t readers_mask = ~(writer | parked);

    // Sleeps until the state may have changed from `seen` (which failed the
    // caller's test). false: the deadline passed.
    bool park(std::uint32_t seen, clockid_t c, const struct timespec* abs) noexcept {
        if (!(seen & parked)) {
            // relaxed: PARKED only asks the next changer to wake us; the
            // futex call re-reads the word atomically with going to sleep,
            // so a change after this CAS makes it return at once.
            if (!state_.compare_exchange_strong(seen, seen | parked, std::memory_order_relaxed)) return true;
            seen |= parked;
        }
        return detail::futex_wait_until(&state_, seen, c, abs) != ETIMEDOUT;
    }

    // Wakes the sleepers if `old` (the word an RMW that cleared PARKED
    // replaced) had PARKED.
    void wake(std::uint32_t old) noexcept {
        if (old & parked) detail::futex_wake_all(&state_);
    }

    // With W held: take the state for writing. wait == false: one attempt.
    // false: busy (no wait) or the deadline passed; the caller releases W.
    // *waited: set when the state was not free at once.
    bool claim(rw_preference p, bool wait, clockid_t c, const struct timespec* abs, bool* waited) noexcept {
        unsigned spins = 0;
        if (p == rw_preference::writers) {
            // Stop new readers now, then wait for those inside to leave.
            // acquire pairs with the release of the readers' unlock_shared().
            // (r, p, 0) -> (r, p, 1)
            std::uint32_t s = state_.fetch_or(writer, std::memory_order_acquire) | writer;
            while ((s & readers_mask) != 0) {
                *waited = true;
                if (wait && spins < spin_limit) {
                    ++spins;
                    arch::cpu_relax();
                } else if (!wait || !park(s, c, abs)) {
                    // Give the claim up and let the readers it stopped in.
                    // relaxed: nothing was written under the claim.
                    // (r, p, 1) -> (r, 0, 0)
                    wake(state_.fetch_and(~(writer | parked), std::memory_order_relaxed));
                    return false;
                }
                s = state_.load(std::memory_order_acquire);  // as the fetch_or above
            }
            return true;
        }
        std::uint32_t s = state_.load(std::memory_order_relaxed);
        for (;;) {
            if ((s & ~parked) == 0) {
                // acquire pairs with the readers' release in unlock_shared()
                // and the last writer's in release_state(). (0, p, 0) -> (0, p, 1)
                if (state_.compare_exchange_weak(s, s | writer, std::memory_order_acquire, std::memory_order_relaxed))
                    return true;
                continue;
            }
            *waited = true;
            if (!wait) return false;
            if (spins < spin_limit) {
                ++spins;
                arch::cpu_relax();
            } else if (!park(s, c, abs)) {
                return false;
            }
            s = state_.load(std::memory_order_relaxed);
        }
    }

    // The writer's release of the state word (before it releases W).
    void release_state() noexcept {
        // release pairs with the acquire of the next reader's or writer's
        // CAS. WRITER is cleared before W is passed on: the next writer's
        // claim must find it clear. (r, p, 1) -> (r, 0, 0)
        wake(state_.fetch_and(~(writer | parked), std::memory_order_release));
    }

    [[noreturn]] SPINDLE_COLD void misuse(const char* what) const noexcept { detail::lock_misuse(name, this, what); }

    std::atomic<std::uint32_t> state_{0};  // readers | PARKED | WRITER; the futex word
    Writers writers_{};                    // W
};

// Writers on hemlock_park: FIFO among the writers that wait, spin then sleep
// (preload/'s default lock).
using rw_lock = basic_rw_lock<hemlock_park>;

}  // namespace spindle
