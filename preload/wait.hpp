// preload/wait.hpp — the checks of the timed pthread operations' arguments;
// the deadlines, futex sleeps and polling wait themselves are the locks'
// (locks/detail/timed_wait.hpp).
#pragma once

#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

#include <atomic>

#include <spindle/locks/detail/futex.hpp>  // backoff
#include <spindle/locks/detail/timed_wait.hpp>

namespace spindle::preload {

inline bool valid_timespec(const struct timespec* ts) noexcept {
    return ts->tv_nsec >= 0 && ts->tv_nsec < 1'000'000'000;
}

// The clocks pthread_*_clock* accept (the same two glibc accepts).
inline bool supported_clock(clockid_t c) noexcept {
    return c == CLOCK_REALTIME || c == CLOCK_MONOTONIC;
}

using spindle::detail::deadline_passed;
using spindle::detail::futex_wait_until;
using spindle::detail::futex_wake_all;
using spindle::detail::futex_wake_one;
using spindle::detail::poll_until;
using spindle::detail::try_lock_of;

// One step of a spin-wait for another thread's short operation: pause, and
// every 128 steps give the CPU up (on an oversubscribed machine the thread we
// wait for may be the one that is not running): detail/futex.hpp's backoff.
inline void spin_step(unsigned& spins) noexcept { spindle::detail::backoff(spins); }

}  // namespace spindle::preload
