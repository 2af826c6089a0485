// spindle/sync/barrier.hpp — a reusable barrier with a completion function,
// on the CQS queue (Koval, Khalanskiy, Alistarh, PLDI 2023, §4.1, extended to
// phases, split arrive/wait and dropping parties as std::barrier has them).
//
//     spindle::barrier sync(n, [&]() noexcept { ++generation; });
//     for (...) { step(); sync.arrive_and_wait(); }
//     auto token = sync.arrive(); other_work(); sync.wait(std::move(token));
//
// Interface: std::barrier's (arrive(n), wait(arrival_token&&),
// arrive_and_wait, arrive_and_drop, max), plus try_wait(token), and
// wait_for / wait_until / wait(token, stop_token), which return true once
// the token's phase is over and false if the wait timed out or was stopped
// first. Callable from fibers and plain OS threads, mixed. Each phase, the
// last party to arrive runs the completion function once, before anyone
// waiting on that phase is released.
//
// Cancellation is ignored by the barrier, as the paper argues (§4.1): a
// timed-out or stopped wait returns, but its party's arrival stands -- it
// has reached the barrier point and does not hold up the others, and the
// phase completes as if it still waited. (Undoing an arrival would need all
// of a phase's waiters to be resumed atomically, which no queue can do.) The
// token stays valid: a later wait on it returns once its phase is over. A
// party whose wait was cancelled must not arrive again before its phase is
// over (wait on the token again, or see try_wait true): as with
// std::barrier, a party arrives once per phase.
//
// Algorithm. Two words and a detail::cqs (smart cancellation, asynchronous
// resumption):
//
//     arrivals_ (uint64):  bits 32..63 phase p | bits 0..31 arrivals still expected in p
//     waiters_  (uint64):  bits 32..63 phase q | bits 0..31 waiters registered for q
//     expected_ (int32):   parties of the phases to come (arrive_and_drop lowers it)
//
//     arrive(n):  FAA(arrivals_, -n) = (p, r); token = p; r == n: last, complete(p)
//     complete(p): completion(); arrivals_ := (p + 1, expected_);
//                  XCHG(waiters_, (p + 1, 0)) = (p, w); w resumes
//     wait(p):    watch waiters_ a little (detail::spin_before_queue): p over: return;
//                 (q, w) = waiters_; q after p: return (phase over);
//                 q == p: CAS (p, w) -> (p, w + 1), then suspend;
//                 q before p: the completer of q is between its two stores: yield, retry
//
// The exchange is the paper's DONE bit with a phase number for a bit: it
// closes registration for p and opens it for p + 1 in one step, so w counts
// exactly the waiters of p. Their resumes may reach the queue before a slow
// waiter of p does (the value waits in its cell: asynchronous resumption).
//
// A cancelled wait (smart cancellation; the queue's hook gets the waiter's
// registration) settles on waiters_, atomically against complete():
//   p not over:  (p, w) -> (p, w - 1); complete() will not count it and no
//                resume will come for it: CANCELLED, resumes skip the cell.
//                The wait returns false.
//   p over:      complete() counted it and a resume is on its way: REFUSE,
//                that resume is dropped, and the wait returns true.
// So every resume lands on a live or a refusing waiter, and nothing is left
// in the queue once the waiters are gone.
// A waiter that finds its phase not over after a resume took a wake-up meant
// for such a slow waiter of an earlier phase: it passes it on (resume) and
// waits again. (That takes a waiter of p stalled between its registration
// and the queue while the other parties finish p and queue for p + 1: rare;
// the path is there for correctness, not speed.)
//
// Contract:
//
//   operation              | result
//   -----------------------+----------------------------------------------------
//   arrive(n)              | n arrivals in the current phase; the last runs the
//                          | completion and releases the phase; returns its token
//   wait(token)            | returns once the token's phase is over (at once if it is)
//   try_wait(token)        | whether the token's phase is over; never blocks
//   wait_until(token, t)   | true once the phase is over, false at t (arrival stands;
//                          | arrive again only once the phase is over)
//   wait_for(token, d)     | wait_until(token, now + d)
//   wait(token, stop)      | true once the phase is over, false on stop (arrival stands)
//   arrive_and_wait()      | wait(arrive())
//   arrive_and_drop()      | one fewer party from the next phase on; arrive(1)
//
// Destruction: a party whose wait returned may destroy the barrier at once,
// while the last arriver still resumes the others: the destructor waits
// (yields) until every completing party has left the object (there may be
// two: a phase's waiters can leave before its completer resumes them -- by
// their watch, a timeout or a stop -- and complete the next phase).
//
// Phases are counted modulo 2^32 (a token is compared by signed distance);
// max() is 2^31 - 1 parties.
//
// Undefined (aborts with a message naming the barrier in debug builds,
// SPINDLE_DEBUG_CHECKS): an expected count outside [0, max()]; arrive(n) with
// n <= 0 or past the arrivals still expected; arrive_and_drop with no party
// left; destroying the barrier while someone waits. Not checked: waiting
// twice on one token, or on a token of another barrier.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stop_token>
#include <type_traits>
#include <utility>

#include <spindle/arch/config.hpp>
#include <spindle/sync/detail/cqs.hpp>

namespace spindle {

namespace detail {

struct barrier_no_completion {
    void operator()() noexcept {}
};

// The non-template part of barrier (src/sync/barrier.cpp).
class barrier_core {
public:
    static constexpr std::ptrdiff_t max_expected = 0x7fffffff;

    struct arrival {
        std::uint32_t phase;
        bool last;  // this arrival completed the phase: run the completion, then complete()
    };

    constexpr explicit barrier_core(std::ptrdiff_t expected) noexcept
        : arrivals_(static_cast<std::uint64_t>(expected) & count_mask),
          expected_(static_cast<std::int32_t>(expected)),
          q_(cqs_cancellation::smart, cqs_resumption::async,
             cqs_hooks<unit>{&on_cancellation, &complete_refused_resume, &return_value, this}) {
#if SPINDLE_DEBUG_CHECKS
        if (expected < 0 || expected > max_expected) bad_expected(expected);
#endif
    }
    ~barrier_core();
    barrier_core(const barrier_core&) = delete;
    barrier_core& operator=(const barrier_core&) = delete;

    arrival arrive(std::ptrdiff_t n) noexcept {
#if SPINDLE_DEBUG_CHECKS
        if (n <= 0) bad_arrive(n, 0);
#endif
        // (phase, remaining): (p, r) -> (p, r - n); no borrow into the phase
        // while n <= r. acq_rel: release so that the completer sees what
        // every party did before arriving; acquire so that the last one
        // does (through the release sequence of RMWs on this word).
        const std::uint64_t old = arrivals_.fetch_sub(static_cast<std::uint64_t>(n), std::memory_order_acq_rel);
        const auto remaining = static_cast<std::uint32_t>(old & count_mask);
#if SPINDLE_DEBUG_CHECKS
        if (static_cast<std::uint64_t>(n) > remaining) bad_arrive(n, remaining);
#endif
        return {static_cast<std::uint32_t>(old >> phase_shift), remaining == static_cast<std::uint64_t>(n)};
    }

    // After the completion function of phase p ran: open p + 1, release p.
    void complete(std::uint32_t phase) noexcept;
    // Returns true once `phase` is over, false if the deadline passed or
    // stop was requested on *st first (the arrival stands either way).
    bool wait(std::uint32_t phase, std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept;
    // Test and debug: waits cancelled after their phase was over (they
    // returned true); a statistic.
    [[nodiscard]] std::uint64_t debug_refused_waits() const noexcept {
        return refused_.load(std::memory_order_relaxed);
    }
    // Test and debug: frees the queue's retired segments, then counts those
    // still allocated.
    [[nodiscard]] std::size_t debug_queue_segments() noexcept {
        q_.reclaim();
        return q_.live_segments();
    }
    // Whether `phase` is over.
    [[nodiscard]] bool over(std::uint32_t phase) const noexcept {
        // acquire: pairs with complete()'s exchange (the completion step).
        return phase_over(waiters_.load(std::memory_order_acquire), phase);
    }
    // One fewer party from the next phase on (the caller then arrives once).
    void drop() noexcept;

private:
    struct unit {};
    // A registered waiter, on its stack for its wait; its address is the
    // cqs tag on_cancellation receives.
    struct registration {
        std::uint32_t phase;   // the phase it waits for
        bool refused = false;  // set by on_cancellation: the phase was over (the wait succeeds)
    };

    static constexpr unsigned phase_shift = 32;
    static constexpr std::uint64_t count_mask = (std::uint64_t{1} << phase_shift) - 1;

    [[noreturn]] SPINDLE_COLD void bad_arrive(std::ptrdiff_t n, std::uint32_t remaining) const noexcept;
    [[noreturn]] SPINDLE_COLD void bad_expected(std::ptrdiff_t expected) const noexcept;
    static bool on_cancellation(void* self, std::uint64_t tag) noexcept;
    static void complete_refused_resume(void* self, unit) noexcept;
    static void return_value(void* self, unit) noexcept;
    static bool phase_over(std::uint64_t word, std::uint32_t phase) noexcept {
        return static_cast<std::int32_t>(static_cast<std::uint32_t>(word >> phase_shift) - phase) > 0;
    }

    alignas(arch::cache_line) std::atomic<std::uint64_t> arrivals_;  // see the header essay
    std::atomic<std::int32_t> expected_;
    alignas(arch::cache_line) std::atomic<std::uint64_t> waiters_{0};
    // Completing parties still inside complete() (from before the stores
    // that open the next phase to after their last resume); the destructor
    // waits for 0. A count, not a flag: complete(p + 1) can overlap a slow
    // complete(p) -- p's waiters may leave by a timeout or stop (REFUSE) or
    // by their own watch before p's completer resumes them, and arrive again.
    std::atomic<std::uint32_t> completing_{0};
    // Waits cancelled after their phase was over (REFUSE: they returned
    // true); relaxed, a statistic (debug_refused_waits).
    std::atomic<std::uint64_t> refused_{0};
    cqs<unit> q_;
};

}  // namespace detail

template <class CompletionFunction = detail::barrier_no_completion>
class barrier {
    static_assert(std::is_nothrow_invocable_v<CompletionFunction&>,
                  "the completion function must be invocable as an lvalue and noexcept (as for std::barrier)");
    static_assert(std::is_nothrow_destructible_v<CompletionFunction>);

public:
    // The phase an arrive() counted in; wait() on it returns once that phase
    // is over. Move-only in spirit: wait consumes it.
    class arrival_token {
    public:
        arrival_token(arrival_token&&) noexcept = default;
        arrival_token& operator=(arrival_token&&) noexcept = default;

    private:
        friend class barrier;
        explicit arrival_token(std::uint32_t phase) noexcept : phase_(phase) {}
        std::uint32_t phase_;
    };

    static constexpr std::ptrdiff_t max() noexcept { return detail::barrier_core::max_expected; }

    constexpr explicit barrier(std::ptrdiff_t expected, CompletionFunction f = CompletionFunction())
        : core_(expected), completion_(std::move(f)) {}
    barrier(const barrier&) = delete;
    barrier& operator=(const barrier&) = delete;

    [[nodiscard]] arrival_token arrive(std::ptrdiff_t update = 1) noexcept {
        const auto a = core_.arrive(update);
        if (a.last) {
            completion_();  // the completion step, before anyone of this phase is released
            core_.complete(a.phase);
        }
        return arrival_token(a.phase);
    }

    void wait(arrival_token&& token) const noexcept { (void)core_.wait(token.phase_, detail::no_deadline, nullptr); }

    // Whether the token's phase is over; never blocks.
    [[nodiscard]] bool try_wait(const arrival_token& token) const noexcept { return core_.over(token.phase_); }

    // Until the token's phase is over (true) or stop is requested (false;
    // the arrival stands, and the token may be waited on again).
    [[nodiscard]] bool wait(const arrival_token& token, std::stop_token st) const noexcept {
        if (core_.over(token.phase_)) return true;
        return core_.wait(token.phase_, detail::no_deadline, &st);
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool wait_until(const arrival_token& token, const std::chrono::time_point<Clock, Duration>& t) const {
        if (core_.over(token.phase_)) return true;
        const auto deadline = detail::to_steady_deadline(t);
        if (std::chrono::steady_clock::now() >= deadline) return core_.over(token.phase_);
        return core_.wait(token.phase_, deadline, nullptr);
    }

    template <class Rep, class Period>
    [[nodiscard]] bool wait_for(const arrival_token& token, const std::chrono::duration<Rep, Period>& d) const {
        return wait_until(token,
                          std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    void arrive_and_wait() noexcept { wait(arrive()); }

    void arrive_and_drop() noexcept {
        core_.drop();
        (void)arrive();
    }

    // Test and debug: segments of the waiter queue still allocated, and
    // waits cancelled after their phase was over (they returned true).
    [[nodiscard]] std::size_t debug_queue_segments() noexcept { return core_.debug_queue_segments(); }
    [[nodiscard]] std::uint64_t debug_refused_waits() const noexcept { return core_.debug_refused_waits(); }

private:
    mutable detail::barrier_core core_;
    [[no_unique_address]] CompletionFunction completion_;
};

}  // namespace spindle
