// spindle/locks/detail/futex.hpp — the two futex calls spindle parks with.
//
// Private futexes only (FUTEX_*_PRIVATE): every word spindle waits on lives in
// one process. futex_wait returns on a wake, a signal, a spurious wake-up, or
// at once when *addr != expected; callers always re-check their condition.
#pragma once

#include <atomic>
#include <cstdint>

#include <cerrno>
#include <ctime>

#include <spindle/arch/context.hpp>  // cpu_relax

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace spindle::detail {

// The system call instruction itself, not libc's syscall(): that one sets
// errno on failure, and a futex wait fails with EAGAIN (the word changed) or
// EINTR in normal use. Locking leaves errno as it found it, as glibc's
// pthread_mutex_* do -- a program may take a mutex between a failed call and
// its read of errno (to log it, say) -- and a TCLock waiter must not write
// an errno that a section run for it may be writing (tclock.cpp). Returns
// the kernel's result: >= 0, or -errno.
inline long raw_syscall6(long nr, long a, long b, long c, long d, long e, long f) noexcept {
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
#else
    const int saved = errno;
    long r = ::syscall(nr, a, b, c, d, e, f);
    if (r == -1) r = -errno;
    errno = saved;
    return r;
#endif
}

inline long raw_futex(std::atomic<std::uint32_t>* addr, int op, std::uint32_t val, const struct timespec* ts,
                      std::uint32_t val3) noexcept {
    return raw_syscall6(SYS_futex, reinterpret_cast<long>(addr), op, static_cast<long>(val),
                        reinterpret_cast<long>(ts), 0, static_cast<long>(val3));
}

inline void futex_wait(std::atomic<std::uint32_t>* addr, std::uint32_t expected) noexcept {
    raw_futex(addr, FUTEX_WAIT_PRIVATE, expected, nullptr, 0);
}

// The same with a relative timeout (null: none).
inline void futex_wait_for(std::atomic<std::uint32_t>* addr, std::uint32_t expected,
                           const struct timespec* rel) noexcept {
    raw_futex(addr, FUTEX_WAIT_PRIVATE, expected, rel, 0);
}

inline void sched_yield_now() noexcept { raw_syscall6(SYS_sched_yield, 0, 0, 0, 0, 0, 0); }

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
    raw_futex(addr, FUTEX_WAKE_PRIVATE, static_cast<std::uint32_t>(count), nullptr, 0);
}

// FUTEX_WAIT_BITSET / FUTEX_WAKE_BITSET: a wake reaches only the sleepers
// whose bitset shares a bit with the waker's (ticket_park_lock keys them by
// ticket, so an unlock wakes the next ticket's holder and not the whole
// queue). `bitset` must not be 0.
inline void futex_wait_bitset(std::atomic<std::uint32_t>* addr, std::uint32_t expected,
                              std::uint32_t bitset) noexcept {
    raw_futex(addr, FUTEX_WAIT_BITSET_PRIVATE, expected, nullptr, bitset);
}

inline void futex_wake_bitset(std::atomic<std::uint32_t>* addr, int count, std::uint32_t bitset) noexcept {
    raw_futex(addr, FUTEX_WAKE_BITSET_PRIVATE, static_cast<std::uint32_t>(count), nullptr, bitset);
}

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "a futex word must be a plain 32-bit integer");

}  // namespace spindle::detail
