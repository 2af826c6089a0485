// spindle/sync/barrier.hpp — a reusable barrier with a completion function,
// on the CQS queue (Koval, Khalanskiy, Alistarh, PLDI 2023, §4.1, extended to
// phases, split arrive/wait and dropping parties as std::barrier has them).
//
//     spindle::barrier sync(n, [&]() noexcept { ++generation; });
//     for (...) { step(); sync.arrive_and_wait(); }
//     auto token = sync.arrive(); other_work(); sync.wait(std::move(token));
//
// Interface: std::barrier's (arrive(n), wait(arrival_token&&),
// arrive_and_wait, arrive_and_drop, max). Callable from fibers and plain OS
// threads, mixed. Each phase, the last party to arrive runs the completion
// function once, before anyone waiting on that phase is released.
//
// Waits are not cancellable: no timeout, no stop token. The paper's argument
// (§4.1): releasing a phase would have to resume all its waiters atomically,
// which no queue can do, so a cancelled waiter could only break the barrier;
// a party that has arrived has done its part and should not hold up others.
//
// Algorithm. Two words and a detail::cqs (simple mode, asynchronous
// resumption; nobody is ever cancelled):
//
//     arrivals_ (uint64):  bits 32..63 phase p | bits 0..31 arrivals still expected in p
//     waiters_  (uint64):  bits 32..63 phase q | bits 0..31 waiters registered for q
//     expected_ (int32):   parties of the phases to come (arrive_and_drop lowers it)
//
//     arrive(n):  FAA(arrivals_, -n) = (p, r); token = p; r == n: last, complete(p)
//     complete(p): completion(); arrivals_ := (p + 1, expected_);
//                  XCHG(waiters_, (p + 1, 0)) = (p, w); w resumes
//     wait(p):    (q, w) = waiters_; q after p: return (phase over);
//                 q == p: CAS (p, w) -> (p, w + 1), then suspend;
//                 q before p: the completer of q is between its two stores: yield, retry
//
// The exchange is the paper's DONE bit with a phase number for a bit: it
// closes registration for p and opens it for p + 1 in one step, so w counts
// exactly the waiters of p. Their resumes may reach the queue before a slow
// waiter of p does (the value waits in its cell: asynchronous resumption).
// A waiter that finds its phase not over after a resume took a wake-up meant
// for such a slow waiter of an earlier phase: it passes it on (resume) and
// waits again. (That takes a waiter of p stalled between its registration
// and the queue while the other parties finish p and queue for p + 1: rare;
// the path is there for correctness, not speed.)
//
// Contract:
//
//   operation         | result
//   ------------------+---------------------------------------------------------
//   arrive(n)         | n arrivals in the current phase; the last runs the
//                     | completion and releases the phase; returns its token
//   wait(token)       | returns once the token's phase is over (at once if it is)
//   arrive_and_wait() | wait(arrive())
//   arrive_and_drop() | one fewer party from the next phase on; arrive(1)
//
// Destruction: a party whose wait returned may destroy the barrier at once,
// while the last arriver still resumes the others: the destructor waits
// (yields) until the completing party has left the object.
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
#include <cstddef>
#include <cstdint>
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

    explicit barrier_core(std::ptrdiff_t expected);
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
    // Returns once `phase` is over.
    void wait(std::uint32_t phase) noexcept;
    // One fewer party from the next phase on (the caller then arrives once).
    void drop() noexcept;

private:
    struct unit {};

    static constexpr unsigned phase_shift = 32;
    static constexpr std::uint64_t count_mask = (std::uint64_t{1} << phase_shift) - 1;

    [[noreturn]] SPINDLE_COLD void bad_arrive(std::ptrdiff_t n, std::uint32_t remaining) const noexcept;
    static bool phase_over(std::uint64_t word, std::uint32_t phase) noexcept {
        return static_cast<std::int32_t>(static_cast<std::uint32_t>(word >> phase_shift) - phase) > 0;
    }

    alignas(arch::cache_line) std::atomic<std::uint64_t> arrivals_;  // see the header essay
    std::atomic<std::int32_t> expected_;
    alignas(arch::cache_line) std::atomic<std::uint64_t> waiters_{0};
    // True while a completing party releases a phase (from before its
    // exchange of waiters_ to after its last resume); the destructor waits
    // for false.
    std::atomic<bool> completing_{false};
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

    explicit barrier(std::ptrdiff_t expected, CompletionFunction f = CompletionFunction())
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

    void wait(arrival_token&& token) const noexcept { core_.wait(token.phase_); }

    void arrive_and_wait() noexcept { wait(arrive()); }

    void arrive_and_drop() noexcept {
        core_.drop();
        (void)arrive();
    }

private:
    mutable detail::barrier_core core_;
    [[no_unique_address]] CompletionFunction completion_;
};

}  // namespace spindle
