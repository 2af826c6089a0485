// spindle/sync/event.hpp — a manual- or auto-reset event on the CQS queue
// (Koval, Khalanskiy, Alistarh, PLDI 2023: the manual one is its count-down
// latch (§4.2) made reusable, the automatic one its semaphore (§4.3) capped
// at one permit; smart cancellation as in §3.2).
//
//     spindle::event ready(spindle::event_reset::manual);
//     ... producer: publish(); ready.set();
//     ... consumers: ready.wait();  or  if (ready.wait_for(5ms)) ...
//     ready.reset();                              // closed again
//
//     spindle::event work(spindle::event_reset::automatic);
//     ... producer: push(job); work.set();        // wakes one consumer
//     ... consumer: while (work.wait(stop)) drain();
//
// What it is. A flag that waiters block on until it is set.
//   manual     set() releases every waiter and leaves the event set (later
//              waits pass at once) until reset(). A reusable latch.
//   automatic  set() releases exactly one waiter -- the one waiting longest --
//              or, if none waits, leaves the event set until one wait() takes
//              it (which resets it). A binary semaphore whose release on a
//              released semaphore does nothing.
// Callable from fibers (the fiber suspends; its worker runs other fibers)
// and from plain OS threads (the thread sleeps on a futex), mixed freely.
// The kind is a constructor argument (as Win32's CreateEvent and .NET's
// EventResetMode): one type for both, so a container of events can mix them.
//
// Interface: set, reset, is_set, try_wait, wait, wait_for, wait_until and
// wait(stop_token); the timed and stoppable waits return true if the wait
// was released by a set(), false if it timed out or was stopped first.
// try_wait() never blocks: manual, it is is_set(); automatic, it takes the
// signal if there is one.
//
// ---- manual reset -------------------------------------------------------------
//
// One word and a detail::cqs (smart cancellation, asynchronous resumption):
//
//     word_ (uint64):  bits 32..63 generation g | bit 31 SET | bits 0..30 waiters n counted in g
//
//     wait():   SET: return.  (g, 0, n) -> (g, 0, n+1), then suspend
//     set():    (g, 0, n) -> (g, 1, 0), then n resumes
//     reset():  (g, 1, 0) -> (g+1, 0, 0)
//
// Each wake-up token carries the generation it was issued for. A woken
// waiter of generation g returns if the token's generation is g or later
// (every generation before the current one was set), without looking at the
// event again. The tokens are interchangeable: set() issues exactly as many
// as it counted waiters, and a token a waiter receives need not be "its
// own". A token of an earlier generation means: a waiter of that generation
// registered before it was set but reached the queue only after reset() and
// newer waiters, whose cells came first. The newer waiter checks the word:
// if its own generation has been set meanwhile it returns; otherwise it
// passes the token on (resumes the next cell) and waits again. The token
// moves forward cell by cell and reaches the late waiter; this is rare and
// costs a few wake-ups, never a lost one.
//
// Cancellation (smart, the count-down latch's rule applied per generation):
// the queue's on_cancellation hook gets the cancelled waiter's registration
// (its generation g) and decides on the word, atomically against set():
//   g not set:  (g, 0, n) -> (g, 0, n-1); no set() will count it and no token
//               will come for it: CANCELLED (resumes skip the cell). The wait
//               returns false.
//   g was set:  set() counted it and issued a token for it: REFUSE. The token
//               that reaches the cell is dropped (tokens are interchangeable),
//               and the wait returns true (the event was set while it waited).
// So every token issued is taken by a cell that is not CANCELLED: once the
// waiters are gone no token is left behind in the queue, and the queue's
// segments are freed.
//
// ---- automatic reset ----------------------------------------------------------
//
// One signed word and a detail::cqs (smart cancellation, synchronous
// resumption), counting_semaphore's algorithm with the count capped at 1:
//
//     word_ (int64):   1  set, nobody waiting
//                      0  not set, nobody waiting
//                     -k  not set, k waiters counted
//
//     wait():   FAA(-1) = s;  s = 1: took the signal;  s <= 0: suspend
//     set():    s = 1: nothing;  else CAS s -> s + 1;  s < 0: resume the oldest waiter
//     reset():  CAS 1 -> 0
//
// Cancellation as in counting_semaphore: the waiter gives its decrement
// back; s < 0: CANCELLED. s >= 0: a set() counted it and its signal is on
// the way: REFUSE, and the signal goes back to the word (s -> 1 if it was 0;
// if a later set() had already set it, the two signals merge, as two set()
// calls with nobody waiting do). Synchronous resumption keeps try_wait()
// exact: a signal never sits in a cell for a waiter that counted itself but
// has not parked; if that waiter is slow, set() breaks the cell, puts the
// signal back into the word, and the waiter counts itself again.
//
// ---- races between set(), reset() and waits ------------------------------------
//
// Every operation takes effect at one atomic step on word_: set() at the
// step that sets it, reset() at the step that clears it, a wait at its
// registration (manual) or decrement (automatic), or at the load that finds
// the event set.
//   - manual: a set() releases every wait registered before it, even if a
//     reset() follows at once (a "pulse" releases exactly those); a wait
//     registered after the reset() waits for the next set(). A wait that is
//     still looking at the word while the pulse happens may or may not be
//     released by it. A timed or stopped wait that was released before its
//     cancellation took effect returns true, even if reset() came since.
//   - automatic: reset() clears a stored signal; a signal already handed to
//     a waiter stays handed (that wait returns true). Two set() calls with
//     nobody waiting leave one signal.
//   - is_set() and try_wait() are snapshots: a set() or reset() may follow
//     at once.
//
// Fairness: FIFO. Automatic: each set() wakes the oldest waiter, and a
// waiter never loses the signal to a newcomer or to try_wait() (the word is
// < 0 while anyone waits). Manual: set() releases them all, waking them in
// the order they reached the queue.
//
// Handoff (runtime/handoff.hpp): a constructor argument, `ces` by default.
// Automatic: set() from a fiber switches straight to the parked fiber it
// wakes (with ces or inline_resume). Manual: set() wakes all but the last
// waiter with dispatch and the last with the policy (the CES paper's rule
// for a release of many, §5.2).
//
// Contract, manual:
//
//   operation          | not set                              | set
//   -------------------+--------------------------------------+------------------
//   set()              | sets it; releases every waiter       | nothing
//   reset()            | nothing                              | clears it
//   is_set()           | false                                | true
//   try_wait()         | false                                | true (stays set)
//   wait()             | waits for a set()                    | returns
//   wait_until(t)      | true when set, false at t            | true
//   wait(stop_token)   | true when set, false on stop         | true
//
// Contract, automatic:
//
//   operation          | not set                              | set
//   -------------------+--------------------------------------+------------------
//   set()              | wakes the oldest waiter, or sets it  | nothing
//   reset()            | nothing                              | clears it
//   is_set()           | false                                | true
//   try_wait()         | false                                | true, clears it
//   wait()             | waits for a set() that picks it      | returns, clears it
//   wait_until(t)      | true when picked, false at t         | true, clears it
//   wait(stop_token)   | true when picked, false on stop      | true, clears it
//
// Destruction: a caller whose wait returned may destroy the event at once,
// even while the set() that released it is still waking others: the
// destructor waits (yields) until every set() has left the object. Every
// other wait must have returned.
//
// Size: the word, a busy count and a cqs (a few cache lines).
// Not for: waiting on a condition over shared data that several parties
// change (use a mutex and condition_variable); counting many signals (use
// counting_semaphore: an automatic event keeps at most one).
//
// Undefined (aborts with a message naming the event in debug builds,
// SPINDLE_DEBUG_CHECKS): destroying the event while a wait is registered and
// not released; more than 2^31 - 1 waiters at once (manual). Undefined, not
// checked: destroying it while any other operation runs; a manual waiter
// that sleeps through 2^32 set/reset cycles (generations wrap).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/sync/detail/cqs.hpp>
#include <spindle/sync/detail/wait_queue.hpp>
#include <spindle/runtime/handoff.hpp>

namespace spindle {

enum class event_reset : unsigned char {
    manual,     // set() releases every waiter; the event stays set until reset()
    automatic,  // set() releases one waiter; a wait that takes the signal resets it
};

constexpr const char* to_string(event_reset r) noexcept {
    return r == event_reset::manual ? "manual" : "automatic";
}

class event {
public:
    constexpr explicit event(event_reset reset, bool initially_set = false, handoff policy = handoff::ces) noexcept
        : word_(reset == event_reset::manual ? (initially_set ? set_bit : 0) : (initially_set ? 1 : 0)),
          manual_(reset == event_reset::manual),
          policy_(policy),
          q_(detail::cqs_cancellation::smart,
             reset == event_reset::manual ? detail::cqs_resumption::async : detail::cqs_resumption::sync,
             detail::cqs_hooks<std::uint64_t>{&on_cancellation, &complete_refused_resume, &return_value, this}) {}
    ~event();
    event(const event&) = delete;
    event& operator=(const event&) = delete;

    void set() noexcept;
    void reset() noexcept;

    [[nodiscard]] bool is_set() const noexcept {
        // acquire pairs with set()'s release: a caller that sees the event
        // set sees what the setter did before.
        const std::uint64_t w = word_.load(std::memory_order_acquire);
        return manual_ ? (w & set_bit) != 0 : static_cast<std::int64_t>(w) > 0;
    }

    [[nodiscard]] bool try_wait() noexcept {
        if (manual_) return is_set();
        std::uint64_t expected = 1;
        // (word): 1 -> 0. acquire pairs with set()'s release CAS (through
        // the release sequence of RMWs on the word).
        return word_.compare_exchange_strong(expected, 0, std::memory_order_acquire, std::memory_order_relaxed);
    }

    void wait() noexcept { (void)wait_impl(detail::no_deadline, nullptr); }

    // Wait unless stop is requested on `st` first; true when released by a set().
    [[nodiscard]] bool wait(std::stop_token st) noexcept { return wait_impl(detail::no_deadline, &st); }

    template <class Rep, class Period>
    [[nodiscard]] bool wait_for(const std::chrono::duration<Rep, Period>& d) {
        return wait_until(std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool wait_until(const std::chrono::time_point<Clock, Duration>& t) {
        const auto deadline = detail::to_steady_deadline(t);
        // Past the deadline: do not queue (and be cancelled at once).
        if (std::chrono::steady_clock::now() >= deadline) return try_wait();
        return wait_impl(deadline, nullptr);
    }

    [[nodiscard]] event_reset reset_mode() const noexcept {
        return manual_ ? event_reset::manual : event_reset::automatic;
    }
    [[nodiscard]] handoff policy() const noexcept { return policy_; }

    // Test and debug: waiters counted on the word (manual: registered in
    // the current generation and not yet released; automatic: counted as
    // waiting). A snapshot.
    [[nodiscard]] std::int64_t debug_waiters() const noexcept;
    // Test and debug: manual waits cancelled after a set() counted them
    // (REFUSE: they returned true); a statistic.
    [[nodiscard]] std::uint64_t debug_refused_waits() const noexcept {
        return refused_.load(std::memory_order_relaxed);
    }
    // Test and debug: frees the waiter queue's retired segments, then counts
    // those still allocated.
    [[nodiscard]] std::size_t debug_queue_segments() noexcept {
        q_.reclaim();
        return q_.live_segments();
    }

private:
    // Manual word (see the header essay).
    static constexpr std::uint64_t set_bit = std::uint64_t{1} << 31;      // SET
    static constexpr std::uint64_t count_mask = set_bit - 1;             // waiters counted in g
    static constexpr unsigned gen_shift = 32;                            // generation above
    static constexpr std::uint64_t gen_mask = ~std::uint64_t{0} << gen_shift;

    // Manual: has generation `gen` (a registration's high word) been set?
    // The word shows SET in it, or reset() has moved on to a later one.
    static bool released(std::uint64_t word, std::uint64_t gen) noexcept {
        return (word & gen_mask) != gen || (word & set_bit) != 0;
    }
    // Manual: is a token of generation `token` one for a waiter of `gen`,
    // i.e. not of an earlier generation? Modulo 2^32 generations.
    static bool token_covers(std::uint64_t token, std::uint64_t gen) noexcept {
        return static_cast<std::int64_t>(token - gen) >= 0;
    }
    // Manual: a waiter's registration, on its stack for its wait; its
    // address is the cqs tag that on_cancellation receives.
    struct manual_wait {
        std::uint64_t gen;     // the generation it registered in (the word's high half)
        bool refused = false;  // set by on_cancellation: g was set, the wait succeeds
    };

    bool wait_impl(std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept {
        if (manual_) {
            if (is_set()) [[likely]]
                return true;
            return wait_manual(deadline, st);
        }
        // (word): s -> s - 1. acquire pairs with set()'s release CAS.
        if (static_cast<std::int64_t>(word_.fetch_sub(1, std::memory_order_acquire)) > 0) [[likely]]
            return true;
        return wait_automatic(deadline, st);
    }

    SPINDLE_NOINLINE bool wait_manual(std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept;
    SPINDLE_NOINLINE bool wait_automatic(std::chrono::steady_clock::time_point deadline,
                                         std::stop_token* st) noexcept;
    void set_manual() noexcept;
    void set_automatic() noexcept;
    void hand_over(handoff policy) noexcept;
    [[noreturn]] SPINDLE_COLD void too_many_waiters() const noexcept;
    static bool on_cancellation(void* self, std::uint64_t tag) noexcept;
    static void complete_refused_resume(void* self, std::uint64_t token) noexcept;
    static void return_value(void* self, std::uint64_t token) noexcept;

    // The word (two layouts, one per kind: see the header essay). Every
    // change is an RMW, so a set()'s release heads a release sequence that
    // any later acquire of the word reads from.
    alignas(arch::cache_line) std::atomic<std::uint64_t> word_;
    // set() calls inside the object; the destructor waits for 0. Incremented
    // before set()'s step on the word (so whoever the set() releases sees
    // it), decremented as set()'s last access to the object (release).
    std::atomic<std::uint32_t> busy_{0};
    // Manual waits refused on cancellation (debug_refused_waits); relaxed,
    // a count that orders nothing.
    std::atomic<std::uint64_t> refused_{0};
    const bool manual_;
    const handoff policy_;
    // Wake-up tokens: manual, the generation they were issued for (as the
    // word's high half); automatic, 0.
    detail::cqs<std::uint64_t> q_;
};

}  // namespace spindle
