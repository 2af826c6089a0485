// spindle/locks/tas_lock.hpp — the test-and-set spin lock, and its
// spin-then-park twin.
//
//     spindle::tas_lock l;          // spins
//     spindle::tas_park_lock p;     // spins a little, then sleeps on a futex
//     { std::lock_guard g(l); ... }
//
// The simplest lock there is: lock() swaps "held" into one word until the
// swap returns "free". Every waiting iteration is a write, so waiters keep
// pulling the line away from each other and from the holder, who needs it
// to unlock (Anderson, IEEE TPDS 1990). It is here as the baseline the
// other locks are measured against; for real use prefer ttas_lock (same
// size, reads while it waits) or a FIFO lock.
//
// Fairness: none. Whoever's swap lands first after an unlock gets in; a
// waiter can starve.
//
// Space (the Hemlock paper's Table 1, in bytes): lock 4, per thread 0, per
// held lock 0, per waiter 0; no initialization (all-zero is unlocked),
// trivially destructible.
//
// Lock word (one 32-bit word; the futex word of the park variant):
//
//     tas_lock:       0 free | 1 held
//     tas_park_lock:  0 free | 1 held, nobody sleeps | 2 held, a waiter may sleep
//
// The park variant is the second mutex of Drepper's "Futexes Are Tricky":
// a waiter that is going to sleep swaps in 2 (and owns the lock if the swap
// returned 0); unlock swaps in 0 and wakes one sleeper if it took out a 2.
// While it spins, a waiter only CASes 0 -> 1, so it never erases a 2.
//
// Contract (both variants):
//
//     state \ call     lock()              try_lock()    unlock()
//     free             held by caller      true, held    invalid (1)
//     held by caller   deadlock (2)        false         free
//     held by another  waits               false         invalid (2)
//
//     (1) aborts with "spindle::tas_lock at <address>: unlock() of a lock
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
class SPINDLE_CAPABILITY("mutex") basic_tas_lock {
public:
    static constexpr const char* name = Wait::parks ? "spindle::tas_park_lock" : "spindle::tas_lock";
    static constexpr bool is_fifo = false;
    static constexpr bool parks = Wait::parks;

    constexpr basic_tas_lock() noexcept = default;
    basic_tas_lock(const basic_tas_lock&) = delete;
    basic_tas_lock& operator=(const basic_tas_lock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        annotate::pre_lock(this);
        if (!take()) [[unlikely]]
            lock_slow();
        annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        annotate::pre_try_lock(this);
        // relaxed: a held lock fails without writing its line; take() is
        // the acquire.
        const bool ok = word_.load(std::memory_order_relaxed) == unlocked && take();
        annotate::post_try_lock(this, ok);
        return ok;
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        annotate::pre_unlock(this);
        if constexpr (!Wait::parks) {
            // relaxed: a misuse check, not synchronization.
            if (SPINDLE_DEBUG_CHECKS && word_.load(std::memory_order_relaxed) == unlocked) misuse();
            // (word): 1 -> 0. release pairs with the acquire of take(): our
            // critical section happens before the next one.
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

    // One attempt. acquire pairs with unlock's release store/exchange.
    bool take() noexcept {
        if constexpr (!Wait::parks) {
            // (word): x -> 1; ours if x was 0.
            return word_.exchange(locked, std::memory_order_acquire) == unlocked;
        } else {
            // (word): 0 -> 1. A CAS, not a swap: a swap would turn a 2 into
            // a 1 and the holder's unlock would not wake the sleepers.
            std::uint32_t expected = unlocked;
            return word_.compare_exchange_strong(expected, locked, std::memory_order_acquire,
                                                 std::memory_order_relaxed);
        }
    }

    SPINDLE_COLD void lock_slow() noexcept {
        if constexpr (!Wait::parks) {
            unsigned steps = 0;
            do detail::spin_step<Wait>(steps);
            while (!take());
        } else {
            for (unsigned i = 0; i < Wait::spin_steps; ++i) {
                arch::cpu_relax();
                if (take()) return;
            }
            // (word): x -> 2; ours if x was 0 (then marked 2: our unlock
            // wakes a sleeper that may not exist -- one spare syscall).
            // acquire pairs with unlock's release exchange. The futex
            // returns at once if the word is no longer 2 (an unlock came
            // in between): no lost wake-up.
            while (word_.exchange(locked_sleepers, std::memory_order_acquire) != unlocked)
                detail::futex_wait(&word_, locked_sleepers);
        }
    }

    [[noreturn]] SPINDLE_COLD void misuse() const noexcept {
        detail::lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    std::atomic<std::uint32_t> word_{unlocked};
};

using tas_lock = basic_tas_lock<spin_wait>;
using tas_park_lock = basic_tas_lock<park_wait>;

}  // namespace spindle
