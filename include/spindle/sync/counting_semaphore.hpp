// spindle/sync/counting_semaphore.hpp — a fair, cancellable counting
// semaphore on the CQS queue (Koval, Khalanskiy, Alistarh, PLDI 2023, §4.3,
// with the smart cancellation of §3.2 and synchronous resumption).
//
//     spindle::counting_semaphore<8> slots(8);   // handoff::ces
//     spindle::counting_semaphore<8> d(8, spindle::handoff::dispatch);
//     slots.acquire(); ...; slots.release();
//     if (slots.try_acquire_for(5ms)) { ...; slots.release(); }
//     if (slots.acquire(stop_token)) { ...; slots.release(); }
//     spindle::binary_semaphore ready(0);
//
// Interface: std::counting_semaphore's (max, acquire, try_acquire,
// try_acquire_for, try_acquire_until, release(n)) plus acquire(stop_token),
// which returns false if stop was requested before a permit was handed over.
// Callable from fibers (the fiber suspends; its worker runs other fibers) and
// from plain OS threads (the thread sleeps on a futex), mixed freely.
//
// Handoff (runtime/handoff.hpp; a constructor argument, as for spindle::mutex).
// A release(n) by a fiber that finds waiters wakes n-1 of them with
// `dispatch` and the last with the semaphore's policy: with `ces` (the
// default) the releaser goes to the executor and its worker switches
// straight to that waiter, so a handed-over permit is used at once instead
// of waiting in a ready queue (the CES paper's queuing delay: with thousands
// of ready fibers that delay, not the critical section, bounds throughput).
//
// Algorithm (the paper's semaphore: its mutex with K permits). One signed
// permit word and a detail::cqs of waiters:
//
//     count_ (int64):   c > 0   c permits free, nobody queued
//                       c = 0   no permit free, nobody queued
//                       c < 0   no permit free, -c acquirers counted as waiting
//
//     acquire:  FAA(count_, -1) = c;  c > 0: took a permit
//                                     c <= 0: suspend in the cqs for one
//     release(n): FAA(count_, +n) = c; c < 0: resume min(n, -c) waiters,
//                                      each with one permit
//
// Fairness: FIFO. Once anyone waits, c <= 0 and newcomers queue behind; a
// release hands its permit to the oldest waiter, never to the word, so no
// newcomer overtakes (a try_acquire cannot take a permit while c <= 0) --
// with one exception, from synchronous resumption (below): an acquirer that
// has decremented the word but does not reach its cell within the
// releaser's short spin (a preempted thread, a fiber held up arming its
// timer) finds its cell BROKEN and queues again at the tail.
//
// Cancellation (a timeout or stop request) is the paper's smart mode
// (Listing 5), with one change: the cancelled waiter gives its decrement
// back only while others are still counted, CAS(count_, c, c + 1) while
// c < 0: its cell becomes CANCELLED and resumes skip it in O(1). c >= 0: a
// release has already counted this waiter and its resume is on the way:
// the cell becomes REFUSE and the word is left alone. The permit is still
// that release's, and it gives it back itself when its resume reaches the
// refused cell (complete_refused_resume: FAA(count_, +1), handed on if
// someone is counted by then), as its last access to the semaphore. (The
// paper's waiter puts it back in the word with its own increment; another
// party could then take it, finish with the semaphore and destroy it while
// the release is still on its way to the cell.)
//
// The last access. Every release's last access to the semaphore is the
// step that makes a permit available: its FAA when nobody is counted, the
// resume that hands the permit to a counted waiter (which cannot leave
// before the resume is done; see cqs.hpp), or complete_refused_resume's
// FAA. Until then the permit is nobody else's, so nobody can end a use of
// the semaphore that needs it and destroy the semaphore meanwhile.
//
// Resumption is synchronous, so that try_acquire is exact: a release never
// leaves a permit waiting in the queue for an acquirer that has decremented
// but not yet parked. If that acquirer does not reach its cell within a
// short spin, the release breaks the cell and puts its permit back in the
// word (and hands it on if someone waits); the acquirer finds BROKEN and
// announces itself again. Two transients remain: a permit delegated to a
// waiter that is being cancelled sits in its cell until that waiter's
// handler passes it on (from the queue, see cqs.hpp), and a permit refused
// by a cancelled waiter is out of the word until its release's resume
// reaches the refused cell (a few steps, unless that release's thread is
// preempted).
//
// Contract:
//
//   operation            | c > 0           | c <= 0
//   ---------------------+-----------------+---------------------------------------
//   acquire()            | c-1, returns    | queues; returns with a handed-over permit
//   try_acquire()        | c-1, true       | false (never queues)
//   try_acquire_until(t) | c-1, true       | queues; true with a permit, false at t
//   acquire(stop_token)  | c-1, true       | queues; true with a permit, false on stop
//   release(n)           | c+n             | c+n; wakes min(n, -c) oldest waiters
//
// Size: a word, a few fields and a cqs (a few cache lines). Not for a
// semaphore touched only by threads that never cancel and need no FIFO:
// std::counting_semaphore (a futex word) is smaller.
//
// Undefined (aborts with a message naming the semaphore in debug builds,
// SPINDLE_DEBUG_CHECKS): release(n) with n < 0 or past max() free permits;
// a desired count outside [0, max()]; destroying the semaphore while
// someone waits. Undefined, not checked: destroying it while an operation
// runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/handoff.hpp>
#include <spindle/sync/detail/cqs.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle {

namespace detail {

// The non-template part of counting_semaphore (slow paths in
// src/sync/counting_semaphore.cpp); `max` only feeds the debug checks.
class semaphore_core {
public:
    constexpr semaphore_core(std::ptrdiff_t desired, std::ptrdiff_t max, handoff policy) noexcept
        : count_(desired),
          max_(max),
          policy_(policy),
          q_(cqs_cancellation::smart, cqs_resumption::sync,
             cqs_hooks<unit>{&on_cancellation, &complete_refused_resume, &return_value, this}) {
#if SPINDLE_DEBUG_CHECKS
        if (desired < 0 || desired > max) bad_initial_count(desired, max);
#endif
    }
    ~semaphore_core();
    semaphore_core(const semaphore_core&) = delete;
    semaphore_core& operator=(const semaphore_core&) = delete;

    [[nodiscard]] bool try_acquire() noexcept {
        // relaxed: the CAS below re-reads it.
        std::int64_t c = count_.load(std::memory_order_relaxed);
        while (c > 0) {
            // (count): c -> c - 1, only while a permit is free. acquire pairs
            // with release()'s release FAA (through the release sequence of
            // RMWs on count_).
            if (count_.compare_exchange_weak(c, c - 1, std::memory_order_acquire, std::memory_order_relaxed))
                return true;
        }
        return false;
    }

    // true with a permit; false if the deadline passed or stop was
    // requested first.
    bool acquire(std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept {
        // (count): c -> c - 1. acquire pairs with release()'s release FAA.
        if (count_.fetch_sub(1, std::memory_order_acquire) > 0) [[likely]]
            return true;
        return acquire_slow(deadline, st);
    }

    void release(std::ptrdiff_t n) noexcept {
#if SPINDLE_DEBUG_CHECKS
        if (n < 0) bad_release(n, 0);
        // Read before the FAA: once the permit is in the word an acquirer
        // may take it and destroy the semaphore.
        const std::int64_t max = max_;
#endif
        // (count): c -> c + n. release pairs with the acquire of whoever
        // takes one of these permits from the word (or, through the cqs, of
        // the waiter we hand one to).
        const std::int64_t c = count_.fetch_add(n, std::memory_order_release);
#if SPINDLE_DEBUG_CHECKS
        if (c + n > max) bad_release(n, c);
#endif
        if (c < 0) [[unlikely]]
            release_slow(c, n);
    }

    // Test and debug: the permit word (negative: waiters counted).
    [[nodiscard]] std::int64_t count() const noexcept {
        return count_.load(std::memory_order_relaxed);  // a snapshot
    }
    // Test and debug: frees the waiter queue's retired segments, then counts
    // those still allocated.
    [[nodiscard]] std::size_t queue_segments() noexcept {
        q_.reclaim();
        return q_.live_segments();
    }

private:
    struct unit {};

    SPINDLE_NOINLINE bool acquire_slow(std::chrono::steady_clock::time_point deadline,
                                       std::stop_token* st) noexcept;
    SPINDLE_NOINLINE void release_slow(std::int64_t c, std::ptrdiff_t n) noexcept;
    void hand_over(handoff policy) noexcept;
    [[noreturn]] SPINDLE_COLD void bad_release(std::ptrdiff_t n, std::int64_t c) noexcept;
    [[noreturn]] SPINDLE_COLD void bad_initial_count(std::ptrdiff_t desired, std::ptrdiff_t max) noexcept;
    static bool on_cancellation(void* self, std::uint64_t tag) noexcept;
    static void complete_refused_resume(void* self, unit) noexcept;
    static void return_value(void* self, unit) noexcept;

    // See the header essay. Every change is an RMW, so a release FAA heads a
    // release sequence that any later acquirer's acquire RMW reads from.
    alignas(arch::cache_line) std::atomic<std::int64_t> count_;
    const std::int64_t max_;
    const handoff policy_;
    cqs<unit> q_;
};

}  // namespace detail

template <std::ptrdiff_t LeastMaxValue = std::numeric_limits<std::int32_t>::max()>
class counting_semaphore {
    static_assert(LeastMaxValue >= 0, "a semaphore's maximum cannot be negative");
    static_assert(LeastMaxValue < std::numeric_limits<std::int64_t>::max() / 2,
                  "the permit word must hold max() plus the waiters");

public:
    static constexpr std::ptrdiff_t max() noexcept { return LeastMaxValue; }

    constexpr explicit counting_semaphore(std::ptrdiff_t desired, handoff policy = handoff::ces) noexcept
        : core_(desired, LeastMaxValue, policy) {}
    counting_semaphore(const counting_semaphore&) = delete;
    counting_semaphore& operator=(const counting_semaphore&) = delete;

    void release(std::ptrdiff_t update = 1) noexcept { core_.release(update); }

    void acquire() noexcept { (void)core_.acquire(detail::no_deadline, nullptr); }

    // Acquire unless stop is requested on `st` first; true when acquired.
    [[nodiscard]] bool acquire(std::stop_token st) noexcept { return core_.acquire(detail::no_deadline, &st); }

    [[nodiscard]] bool try_acquire() noexcept { return core_.try_acquire(); }

    template <class Rep, class Period>
    [[nodiscard]] bool try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
        return try_acquire_until(std::chrono::steady_clock::now() +
                                 std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& t) {
        const auto deadline = detail::to_steady_deadline(t);
        // Past the deadline: do not queue (and be cancelled at once).
        if (std::chrono::steady_clock::now() >= deadline) return core_.try_acquire();
        return core_.acquire(deadline, nullptr);
    }

    // Test and debug: the permit word (negative: waiters counted).
    [[nodiscard]] std::int64_t debug_count() const noexcept { return core_.count(); }
    // Test and debug: segments of the waiter queue still allocated.
    [[nodiscard]] std::size_t debug_queue_segments() noexcept { return core_.queue_segments(); }

private:
    detail::semaphore_core core_;
};

using binary_semaphore = counting_semaphore<1>;

}  // namespace spindle
