// spindle/locks/detail/futex.hpp — the two futex calls spindle parks with.
//
// Private futexes only (FUTEX_*_PRIVATE): every word spindle waits on lives in
// one process. futex_wait returns on a wake, a signal, a spurious wake-up, or
// at once when *addr != expected; callers always re-check their condition.
#pragma once

#include <atomic>
#include <cstdint>

#include <ctime>

#include <spindle/arch/context.hpp>  // cpu_relax

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace spindle::detail {

inline void futex_wait(std::atomic<std::uint32_t>* addr, std::uint32_t expected) noexcept {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected,
              nullptr, nullptr, 0);
}

// The same with a relative timeout (null: none).
inline void futex_wait_for(std::atomic<std::uint32_t>* addr, std::uint32_t expected,
                           const struct timespec* rel) noexcept {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, rel,
              nullptr, 0);
}

inline void sched_yield_now() noexcept { ::syscall(SYS_sched_yield); }

// One step of waiting for an operation another thread has under way (a
// transient state it will leave in a few instructions): spin, and now and
// then give the CPU up -- past 128 steps its thread was probably preempted.
// Never a fiber switch: the caller may itself be part of an operation that
// must stay under way.
inline void backoff(unsigned& spins) noexcept {
    if (++spins < 128) {
        arch::cpu_relax();
    } else {
        sched_yield_now();
        spins = 0;
    }
}

inline void futex_wake(std::atomic<std::uint32_t>* addr, int count) noexcept {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), FUTEX_WAKE_PRIVATE, count, nullptr,
              nullptr, 0);
}

// FUTEX_WAIT_BITSET / FUTEX_WAKE_BITSET: a wake reaches only the sleepers
// whose bitset shares a bit with the waker's (ticket_park_lock keys them by
// ticket, so an unlock wakes the next ticket's holder and not the whole
// queue). `bitset` must not be 0.
inline void futex_wait_bitset(std::atomic<std::uint32_t>* addr, std::uint32_t expected,
                              std::uint32_t bitset) noexcept {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), FUTEX_WAIT_BITSET_PRIVATE, expected,
              nullptr, nullptr, bitset);
}

inline void futex_wake_bitset(std::atomic<std::uint32_t>* addr, int count, std::uint32_t bitset) noexcept {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), FUTEX_WAKE_BITSET_PRIVATE, count, nullptr,
              nullptr, bitset);
}

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "a futex word must be a plain 32-bit integer");

}  // namespace spindle::detail
