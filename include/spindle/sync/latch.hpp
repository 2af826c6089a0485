// spindle/sync/latch.hpp — a single-use count-down latch on the CQS queue
// (Koval, Khalanskiy, Alistarh, PLDI 2023, §4.2, with smart cancellation).
//
//     spindle::latch done(n);
//     ... each of n workers: done.count_down();
//     done.wait();                              // or wait_for / wait(stop_token)
//
// Interface: std::latch's (count_down(n), try_wait, wait, arrive_and_wait(n),
// max) plus wait_for / wait_until, which return true if the count reached
// zero in time, and wait(stop_token), which returns true if it reached zero
// before stop was requested. Callable from fibers and plain OS threads, mixed.
//
// Algorithm (the paper's Listing 8). Two words and a detail::cqs:
//
//     count_   (int64):   operations still to come; the latch is open at <= 0
//     waiters_ (uint64):  bit 63 DONE | bits 0..62 waiters counted
//
//     count_down(n): FAA(count_, -n) = c; c > 0 and c - n <= 0: open()
//     open():        CAS(waiters_, w, w | DONE); then w resumes
//     wait():        count_ <= 0: return
//                    FAA(waiters_, +1) = w; DONE in w: return; else suspend
//
// DONE forbids further suspensions: a waiter that registered before it was
// set is counted in w and gets one of the w resumes (or, if it came to the
// queue late, finds the resume's value left in its cell: asynchronous
// resumption); a waiter that registers after it returns at once.
//
// Cancellation (smart, the paper's onCancellation): the cancelled waiter
// takes itself off the count, FAA(waiters_, -1) = w. No DONE in w: open()
// will not count it, its cell becomes CANCELLED and resumes skip it. DONE in
// w: open() counted it and a resume is on its way: the cell becomes REFUSE
// and that resume is dropped. Either way open() does work only for live
// waiters, not for the cancelled ones.
//
// Contract:
//
//   operation           | count > 0                   | count <= 0 (open)
//   --------------------+-----------------------------+------------------
//   count_down(n)       | count - n; opens at <= 0    | invalid
//   try_wait()          | false                       | true
//   wait()              | waits until open            | returns
//   wait_until(t)       | true when open, false at t  | true
//   wait(stop_token)    | true when open, false on stop (unless open by then) | true
//   arrive_and_wait(n)  | count_down(n), then wait()  | invalid
//
// Destruction: a caller whose wait returned may destroy the latch at once,
// even while the count_down that opened it is still resuming others: the
// destructor waits (yields) until that count_down has left the object.
//
// Memory: two words, a flag and a cqs (a few cache lines). For a latch that
// only OS threads wait on and nobody cancels, std::latch is smaller.
//
// Undefined (aborts with a message naming the latch in debug builds,
// SPINDLE_DEBUG_CHECKS): a negative expected count; count_down(n) with n < 0
// or past the remaining count; destroying the latch while someone waits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/sync/detail/cqs.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle {

class latch {
public:
    static constexpr std::ptrdiff_t max() noexcept { return std::numeric_limits<std::ptrdiff_t>::max(); }

    constexpr explicit latch(std::ptrdiff_t expected) noexcept
        : count_(expected),
          opened_(expected <= 0),
          q_(detail::cqs_cancellation::smart, detail::cqs_resumption::async,
             detail::cqs_hooks<unit>{&on_cancellation, &complete_refused_resume, &return_value, this}) {
#if SPINDLE_DEBUG_CHECKS
        if (expected < 0) bad_expected(expected);
#endif
    }
    ~latch();
    latch(const latch&) = delete;
    latch& operator=(const latch&) = delete;

    void count_down(std::ptrdiff_t n = 1) noexcept {
#if SPINDLE_DEBUG_CHECKS
        if (n < 0) bad_count_down(n, 0);
#endif
        // (count): c -> c - n. acq_rel: release so that waiters which see the
        // latch open see what every counter did before; acquire so that the
        // one that opens it carries the earlier count_downs along to the
        // waiters it resumes.
        const std::int64_t c = count_.fetch_sub(n, std::memory_order_acq_rel);
#if SPINDLE_DEBUG_CHECKS
        if (n > c) bad_count_down(n, c);
#endif
        if (c > 0 && c - n <= 0) [[unlikely]]
            open();
    }

    [[nodiscard]] bool try_wait() const noexcept {
        // acquire pairs with the count_downs' acq_rel FAAs: the value that
        // reads <= 0 was written by the last of a chain of RMWs, which is in
        // the release sequence of every earlier one.
        return count_.load(std::memory_order_acquire) <= 0;
    }

    void wait() const noexcept {
        if (try_wait()) return;
        (void)wait_slow(detail::no_deadline, nullptr);
    }

    // Wait until open unless stop is requested on `st` first; true when open.
    [[nodiscard]] bool wait(std::stop_token st) const noexcept {
        if (try_wait()) return true;
        return wait_slow(detail::no_deadline, &st);
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool wait_until(const std::chrono::time_point<Clock, Duration>& t) const {
        if (try_wait()) return true;
        const auto deadline = detail::to_steady_deadline(t);
        if (std::chrono::steady_clock::now() >= deadline) return try_wait();
        return wait_slow(deadline, nullptr);
    }

    template <class Rep, class Period>
    [[nodiscard]] bool wait_for(const std::chrono::duration<Rep, Period>& d) const {
        return wait_until(std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    void arrive_and_wait(std::ptrdiff_t n = 1) noexcept {
        count_down(n);
        wait();
    }

    // Test and debug: frees the waiter queue's retired segments, then counts
    // those still allocated.
    [[nodiscard]] std::size_t debug_queue_segments() noexcept {
        q_.reclaim();
        return q_.live_segments();
    }

private:
    struct unit {};

    static constexpr std::uint64_t done_bit = std::uint64_t{1} << 63;  // open(): no more suspensions
    static constexpr std::uint64_t waiters_mask = done_bit - 1;        // waiters counted

    SPINDLE_NOINLINE void open() noexcept;
    SPINDLE_NOINLINE bool wait_slow(std::chrono::steady_clock::time_point deadline, std::stop_token* st) const noexcept;
    [[noreturn]] SPINDLE_COLD void bad_count_down(std::ptrdiff_t n, std::int64_t c) const noexcept;
    [[noreturn]] SPINDLE_COLD void bad_expected(std::ptrdiff_t expected) const noexcept;
    static bool on_cancellation(void* self, std::uint64_t tag) noexcept;
    static void complete_refused_resume(void* self, unit) noexcept;
    static void return_value(void* self, unit) noexcept;

    alignas(arch::cache_line) std::atomic<std::int64_t> count_;
    mutable std::atomic<std::uint64_t> waiters_{0};  // see the header essay
    // Set by the count_down that opened the latch as its last access to it
    // (release); the destructor waits for it (acquire). True from the start
    // for a latch of 0.
    std::atomic<bool> opened_;
    mutable detail::cqs<unit> q_;
};

}  // namespace spindle
