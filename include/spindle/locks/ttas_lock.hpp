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
//
// The code is detail::test_and_set_lock (detail/test_and_set_lock.hpp),
// shared with tas_lock; ttas_policy below is what makes it this lock.
#pragma once

#include <spindle/locks/detail/test_and_set_lock.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle {

namespace detail {

// Test before the test-and-set, with bounded exponential backoff.
struct ttas_policy {
    static constexpr const char* spin_name = "spindle::ttas_lock";
    static constexpr const char* park_name = "spindle::ttas_park_lock";
    static constexpr bool test_first = true;
    // cpu_relax steps between a lost race and the next read: doubling from
    // backoff_min after each loss, at most backoff_max (a few microseconds).
    static constexpr unsigned backoff_min = 4;
    static constexpr unsigned backoff_max = 1024;
};

}  // namespace detail

template <class Wait>
using basic_ttas_lock = detail::test_and_set_lock<Wait, detail::ttas_policy>;

using ttas_lock = basic_ttas_lock<spin_wait>;
using ttas_park_lock = basic_ttas_lock<park_wait>;

}  // namespace spindle
