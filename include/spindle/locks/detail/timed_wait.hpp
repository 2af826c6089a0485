// spindle/locks/detail/timed_wait.hpp — deadlines for the thread locks:
// futex sleeps until an absolute time, and the polling wait of a timed
// acquisition (basic_rw_lock's timed operations, and preload/'s
// pthread_*_timedlock / clocklock).
//
// Deadlines are absolute timespecs on CLOCK_REALTIME or CLOCK_MONOTONIC (the
// two clocks pthread_*_clock* accept), null where a caller has none; the
// caller has checked tv_nsec (a negative tv_sec is a deadline long past).
#pragma once

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/arch/config.hpp>
#include <spindle/locks/detail/futex.hpp>  // raw_futex, raw_syscall6

#include <linux/futex.h>
#include <sys/syscall.h>

namespace spindle::detail {

// now >= abs on clock c.
inline bool deadline_passed(clockid_t c, const struct timespec* abs) noexcept {
    struct timespec now;
    clock_gettime(c, &now);
    return now.tv_sec > abs->tv_sec || (now.tv_sec == abs->tv_sec && now.tv_nsec >= abs->tv_nsec);
}

// Sleeps on *word while it holds `expected`, until woken or until abs (null:
// no deadline) on clock c. Returns 0 (woken, perhaps spuriously), EAGAIN
// (*word != expected already), EINTR (a signal) or ETIMEDOUT.
// shared: the word may be waited on from another process.
inline int futex_wait_until(std::atomic<std::uint32_t>* word, std::uint32_t expected, clockid_t c,
                            const struct timespec* abs, bool shared = false) noexcept {
    int op = FUTEX_WAIT_BITSET;
    if (!shared) op |= FUTEX_PRIVATE_FLAG;
    if (abs != nullptr) {
        if (abs->tv_sec < 0) return ETIMEDOUT;  // the kernel calls that EINVAL
        if (c == CLOCK_REALTIME) op |= FUTEX_CLOCK_REALTIME;
    }
    // The instruction, not syscall(): the caller's errno stays as it was
    // (detail/futex.hpp).
    const long r = raw_futex(word, op, expected, abs, FUTEX_BITSET_MATCH_ANY);
    return r == 0 ? 0 : static_cast<int>(-r);
}

inline void futex_wake_all(std::atomic<std::uint32_t>* word, bool shared = false) noexcept {
    raw_futex(word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, 0);
}

inline void futex_wake_one(std::atomic<std::uint32_t>* word, bool shared = false) noexcept {
    raw_futex(word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1, nullptr, 0);
}

// The timed lock of a lock that cannot leave its queue.
//
// Hemlock, MCS and CLH waiters join a FIFO queue with one atomic swap and
// their successors then wait on them: a waiter that gave up at its deadline
// would strand its successor (Hemlock's successor polls the leaver's Grant
// word; MCS's and CLH's successors poll the leaver's node). None of the
// queue locks is abortable, so a timed locker stays out of the queue and
// polls try_lock: spin a little, then yield, then sleep with exponential
// backoff from 1 us to 1 ms, never past the deadline, reading the clock
// after each failed attempt.
//
// What that costs: a timed locker is not FIFO — under sustained contention
// the queued lockers keep the lock busy and a timed locker may only get it
// at a gap, or time out; it notices a free lock up to 1 ms late. What it
// keeps: the deadline (returns ETIMEDOUT within a sleep quantum of it), and
// no cost at all to the untimed lock and unlock paths.
template <class TryLock>
bool poll_until(TryLock&& try_lock, clockid_t c, const struct timespec* abs) noexcept {
    constexpr unsigned spin_tries = 64, yield_tries = 16;
    constexpr long first_sleep_ns = 1'000, max_sleep_ns = 1'000'000;
    long sleep_ns = first_sleep_ns;
    for (unsigned i = 0;; ++i) {
        if (try_lock()) return true;
        if (deadline_passed(c, abs)) return false;
        if (i < spin_tries) {
            arch::cpu_relax();
        } else if (i < spin_tries + yield_tries) {
            sched_yield_now();
        } else {
            struct timespec now, rel;
            clock_gettime(c, &now);
            long left_s = abs->tv_sec - now.tv_sec;  // > 1: far; no overflow below
            long left_ns = left_s > 1 ? max_sleep_ns
                                      : abs->tv_nsec - now.tv_nsec + left_s * 1'000'000'000L;
            long ns = sleep_ns < left_ns ? sleep_ns : left_ns;
            if (ns > 0) {
                rel.tv_sec = 0;
                rel.tv_nsec = ns;
                // The instruction: no errno (EINTR), and not a nanosleep
                // that a preloaded library (preload/ itself) interposes.
                raw_syscall6(SYS_nanosleep, reinterpret_cast<long>(&rel), 0, 0, 0, 0, 0);
            }
            if (sleep_ns < max_sleep_ns) sleep_ns *= 2;
        }
    }
}

// poll_until's attempt for a lock L. (Not a lambda: the thread-safety
// attribute has no place on one in every compiler.)
template <class L>
struct try_lock_of {
    L& lock;
    bool operator()() const noexcept SPINDLE_NO_TSA { return lock.try_lock(); }
};

}  // namespace spindle::detail
