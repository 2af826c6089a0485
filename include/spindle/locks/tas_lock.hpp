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
//
// The code is detail::test_and_set_lock (detail/test_and_set_lock.hpp),
// shared with ttas_lock; tas_policy below is what makes it this lock.
#pragma once

#include <spindle/locks/detail/test_and_set_lock.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle {

namespace detail {

// Swap at every step, no test before it, no backoff.
struct tas_policy {
    static constexpr const char* spin_name = "spindle::tas_lock";
    static constexpr const char* park_name = "spindle::tas_park_lock";
    static constexpr bool test_first = false;
};

}  // namespace detail

template <class Wait>
using basic_tas_lock = detail::test_and_set_lock<Wait, detail::tas_policy>;

using tas_lock = basic_tas_lock<spin_wait>;
using tas_park_lock = basic_tas_lock<park_wait>;

}  // namespace spindle
