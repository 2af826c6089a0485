// spindle/locks/detail/test_and_set_lock.hpp — the one-word spin locks,
// with or without a test before the test-and-set.
//
//     spindle::basic_tas_lock<Wait>  = test_and_set_lock<Wait, tas_policy>
//     spindle::basic_ttas_lock<Wait> = test_and_set_lock<Wait, ttas_policy>
//
// tas_lock.hpp and ttas_lock.hpp describe the two algorithms, their lock
// word and their contract; this is their code. Both keep one 32-bit word
// (the futex word of the park variants):
//
//     spin:  0 free | 1 held
//     park:  0 free | 1 held, nobody sleeps | 2 held, a waiter may sleep
//
// and differ only in how a waiter goes at it, which the policy says:
//
//   Test::test_first   false (tas_lock): a waiter tries to take the word at
//                      every step -- with a swap when it spins, a CAS 0 -> 1
//                      when it may park.
//                      true (ttas_lock): a waiter reads the word until it
//                      looks free, then CASes 0 -> 1; after a lost CAS it
//                      waits Test::backoff_min cpu_relax steps, doubling
//                      after each loss up to Test::backoff_max, before it
//                      reads again.
//   Test::spin_name, Test::park_name   the `name` of the two variants.
//
// The park variants, once they have spun Wait::spin_steps steps, sleep the
// same way: Drepper's mutex ("Futexes Are Tricky"): swap in 2, sleep while
// the swap returns non-zero; unlock swaps in 0 and wakes one sleeper if it
// took out a 2.
#pragma once

#include <atomic>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle::detail {

template <class Wait, class Test>
class SPINDLE_CAPABILITY("mutex") test_and_set_lock {
public:
    static constexpr const char* name = Wait::parks ? Test::park_name : Test::spin_name;
    static constexpr bool is_fifo = false;
    static constexpr bool parks = Wait::parks;

    constexpr test_and_set_lock() noexcept = default;
    test_and_set_lock(const test_and_set_lock&) = delete;
    test_and_set_lock& operator=(const test_and_set_lock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        annotate::pre_lock(this);
        if (!take()) [[unlikely]]
            lock_slow();
        annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        annotate::pre_try_lock(this);
        // relaxed: the test half -- a held lock fails without writing its
        // line; take() is the acquire.
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
            // (word): 1 -> 0, or 2 -> 0 and wake one. release pairs with the
            // acquire of take() or of sleep()'s exchange, as above.
            const std::uint32_t old = word_.exchange(unlocked, std::memory_order_release);
            if (old == locked_sleepers) [[unlikely]]
                futex_wake(&word_, 1);
            else if (SPINDLE_DEBUG_CHECKS && old == unlocked)
                misuse();
        }
        annotate::post_unlock(this);
    }

private:
    friend struct lock_probe;
    using annotate = tsan_lock_annotations;

    static constexpr std::uint32_t unlocked = 0;
    static constexpr std::uint32_t locked = 1;
    static constexpr std::uint32_t locked_sleepers = 2;  // park variant only

    // One attempt. acquire pairs with unlock's release store/exchange.
    bool take() noexcept {
        if constexpr (!Test::test_first && !Wait::parks) {
            // tas_lock: (word): x -> 1; ours if x was 0.
            return word_.exchange(locked, std::memory_order_acquire) == unlocked;
        } else {
            // (word): 0 -> 1. A CAS, not a swap: a swap would turn a park
            // variant's 2 into a 1, and the holder's unlock would not wake
            // the sleepers.
            std::uint32_t expected = unlocked;
            return word_.compare_exchange_strong(expected, locked, std::memory_order_acquire,
                                                 std::memory_order_relaxed);
        }
    }

    SPINDLE_COLD void lock_slow() noexcept {
        if constexpr (Test::test_first) {
            test_and_back_off();
        } else if constexpr (!Wait::parks) {
            unsigned steps = 0;
            do spin_step<Wait>(steps);
            while (!take());
        } else {
            for (unsigned i = 0; i < Wait::spin_steps; ++i) {
                arch::cpu_relax();
                if (take()) return;
            }
            sleep();
        }
    }

    // ttas_lock's wait: read until free, CAS, back off after a lost race;
    // the park variant sleeps once it has spent Wait::spin_steps steps.
    void test_and_back_off() noexcept {
        unsigned delay = Test::backoff_min;
        unsigned spent = 0;  // cpu_relax steps so far
        for (;;) {
            // Test: read-only while held. relaxed: take() is the acquire.
            while (word_.load(std::memory_order_relaxed) != unlocked) {
                if constexpr (Wait::parks) {
                    arch::cpu_relax();
                    if (++spent >= Wait::spin_steps) return sleep();
                } else {
                    spin_step<Wait>(spent);
                }
            }
            if (take()) return;
            // Lost the race for this unlock: back off before reading again.
            for (unsigned i = 0; i < delay; ++i) arch::cpu_relax();
            if constexpr (Wait::parks) {
                spent += delay;
                if (spent >= Wait::spin_steps) return sleep();
            }
            delay = delay < Test::backoff_max / 2 ? delay * 2 : Test::backoff_max;
        }
    }

    // Park variant: (word): x -> 2, ours if x was 0 (then marked 2: our
    // unlock may wake nobody -- one spare syscall). acquire pairs with
    // unlock's release exchange. The futex returns at once if the word is
    // no longer 2 (an unlock came in between): no lost wake-up.
    void sleep() noexcept {
        while (word_.exchange(locked_sleepers, std::memory_order_acquire) != unlocked)
            futex_wait(&word_, locked_sleepers);
    }

    [[noreturn]] SPINDLE_COLD void misuse() const noexcept {
        lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    std::atomic<std::uint32_t> word_{unlocked};
};

}  // namespace spindle::detail
