// spindle/locks/ttas_lock.hpp — test-and-test-and-set with bounded
// exponential backoff, and its spin-then-park twin.
//
//     spindle::ttas_lock l;          // spins
//     spindle::ttas_park_lock p;     // spins a little, then sleeps on a futex
//     { std::lock_guard g(l); ... }
//
// A waiter reads the word until it looks free (reads hit its own cached
// copy of the line, so waiting costs no coherence traffic until the unlock
// writes), and only then tries to take it with one CAS. When it loses that
// race -- everybody saw the same unlock -- it waits a little before it reads
// again, twice as long after each loss up to a bound (Anderson, IEEE TPDS
// 1990; Mellor-Crummey and Scott, ACM TOCS 1991), which spreads the next
// stampede out. Uncontended: one CAS to lock, one store to unlock.
//
// Fairness: none; a waiter can starve, and backoff favours whoever arrives
// fresh over whoever has been backing off. Prefer a FIFO lock where waiting
// time must be bounded.
//
// Space (the Hemlock paper's Table 1, in bytes): lock 4, per thread 0, per
// held lock 0, per waiter 0; no initialization (all-zero is unlocked),
// trivially destructible.
//
// Lock word (one 32-bit word; the futex word of the park variant):
//
//     ttas_lock:       0 free | 1 held
//     ttas_park_lock:  0 free | 1 held, nobody sleeps | 2 held, a waiter may sleep
//
// The park variant spins as above for about park_wait::spin_steps
// cpu_relax steps, then sleeps as tas_park_lock does (Drepper's mutex: swap
// in 2, sleep while the swap returns non-zero; unlock swaps in 0 and wakes
// one if it took out a 2).
//
// Contract (both variants):
//
//     state \ call     lock()              try_lock()    unlock()
//     free             held by caller      true, held    invalid (1)
//     held by caller   deadlock (2)        false         free
//     held by another  waits               false         invalid (2)
//
//     (1) aborts with "spindle::ttas_lock at <address>: unlock() of a lock
//         that is not locked" in debug builds (SPINDLE_DEBUG_CHECKS);
//         undefined otherwise.
//     (2) undefined; not detected (the word names no owner).
//
// Undefined: the uses marked above; copying or moving a lock (deleted);
// destroying a held lock.
#pragma once

#include <atomic>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle {

template <class Wait>
class SPINDLE_CAPABILITY("mutex") basic_ttas_lock {
public:
    static constexpr const char* name = Wait::parks ? "spindle::ttas_park_lock" : "spindle::ttas_lock";
    static constexpr bool is_fifo = false;
    static constexpr bool parks = Wait::parks;

    // cpu_relax steps between a lost race and the next read: doubling from
    // backoff_min after each loss, at most backoff_max (a few microseconds).
    static constexpr unsigned backoff_min = 4;
    static constexpr unsigned backoff_max = 1024;

    constexpr basic_ttas_lock() noexcept = default;
    basic_ttas_lock(const basic_ttas_lock&) = delete;
    basic_ttas_lock& operator=(const basic_ttas_lock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        annotate::pre_lock(this);
        if (!take()) [[unlikely]]
            lock_slow();
        annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        annotate::pre_try_lock(this);
        // relaxed: the test half; take() is the acquire.
        const bool ok = word_.load(std::memory_order_relaxed) == unlocked && take();
        annotate::post_try_lock(this, ok);
        return ok;
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        annotate::pre_unlock(this);
        if constexpr (!Wait::parks) {
            // relaxed: a misuse check, not synchronization.
            if (SPINDLE_DEBUG_CHECKS && word_.load(std::memory_order_relaxed) == unlocked) misuse();
            // (word): 1 -> 0. release pairs with take()'s acquire CAS.
            word_.store(unlocked, std::memory_order_release);
        } else {
            // (word): 1 -> 0, or 2 -> 0 and wake one. release: as above.
            const std::uint32_t old = word_.exchange(unlocked, std::memory_order_release);
            if (old == locked_sleepers) [[unlikely]]
                detail::futex_wake(&word_, 1);
            else if (SPINDLE_DEBUG_CHECKS && old == unlocked)
                misuse();
        }
        annotate::post_unlock(this);
    }

private:
    friend struct detail::lock_probe;
    using annotate = detail::tsan_lock_annotations;

    static constexpr std::uint32_t unlocked = 0;
    static constexpr std::uint32_t locked = 1;
    static constexpr std::uint32_t locked_sleepers = 2;  // park variant only

    // (word): 0 -> 1. acquire pairs with unlock's release. A CAS, not a
    // swap: a swap would turn a park variant's 2 into a 1, and the holder's
    // unlock would not wake the sleepers.
    bool take() noexcept {
        std::uint32_t expected = unlocked;
        return word_.compare_exchange_strong(expected, locked, std::memory_order_acquire,
                                             std::memory_order_relaxed);
    }

    SPINDLE_COLD void lock_slow() noexcept {
        unsigned delay = backoff_min;
        unsigned spent = 0;  // cpu_relax steps so far
        for (;;) {
            // Test: read-only while held. relaxed: take() is the acquire.
            while (word_.load(std::memory_order_relaxed) != unlocked) {
                if constexpr (Wait::parks) {
                    arch::cpu_relax();
                    if (++spent >= Wait::spin_steps) return sleep();
                } else {
                    detail::spin_step<Wait>(spent);
                }
            }
            if (take()) return;
            // Lost the race for this unlock: back off before reading again.
            for (unsigned i = 0; i < delay; ++i) arch::cpu_relax();
            if constexpr (Wait::parks) {
                spent += delay;
                if (spent >= Wait::spin_steps) return sleep();
            }
            delay = delay < backoff_max / 2 ? delay * 2 : backoff_max;
        }
    }

    // Park variant: (word): x -> 2, ours if x was 0 (marked 2: our unlock
    // may wake nobody -- one spare syscall). acquire pairs with unlock's
    // release exchange. The futex returns at once if the word is no longer
    // 2 (an unlock came in between): no lost wake-up.
    void sleep() noexcept {
        while (word_.exchange(locked_sleepers, std::memory_order_acquire) != unlocked)
            detail::futex_wait(&word_, locked_sleepers);
    }

    [[noreturn]] SPINDLE_COLD void misuse() const noexcept {
        detail::lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    std::atomic<std::uint32_t> word_{unlocked};
};

using ttas_lock = basic_ttas_lock<spin_wait>;
using ttas_park_lock = basic_ttas_lock<park_wait>;

}  // namespace spindle
