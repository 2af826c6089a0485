// spindle/sync/detail/cqs_cell.hpp — the cell transitions of the CQS paper
// (Figures 2 and 4), as templates over the cell, the waiter record and an
// environment, so that the same code runs in cqs (std::atomic) and under the
// deterministic scheduler of tests/models/cqs_cell_model_test.cpp (atomics that
// yield to the model at every access).
//
// The life cycle is drawn in cqs.hpp. Requirements:
//
//   Cell:  state (atomic<uintptr_t>: a cqs_cell constant, or a Wait*),
//          value (atomic<uint64_t>)
//   Wait:  claim (atomic<uint32_t>: cqs_claim below),
//          value (uint64_t, plain: written by the winning resumer before its
//          unpark, read by the waiter after it)
//   Env:   dead()              the cell will not be touched logically again:
//                              count it (segment removal)
//          backoff(unsigned&)  wait a little for a transient RESUMING
//          relax()             one step of a sync resume's spin
//          sync_spins()        how many steps a sync resume waits
//          bad_state(uintptr_t) [[noreturn]] report an impossible state
//
// Every function makes one operation's part of the cell's life; who calls
// which, and what is done with the outcome (parking, unparking, hooks), is
// cqs.cpp's business.
#pragma once

#include <atomic>
#include <cstdint>

namespace spindle::detail {

// Cell states; any larger value is the address of the waiting record.
namespace cqs_cell {
inline constexpr std::uintptr_t empty = 0;      // nobody came yet
inline constexpr std::uintptr_t value = 1;      // a value waits in `value` (elimination or delegation)
inline constexpr std::uintptr_t taken = 2;      // the suspender took the value
inline constexpr std::uintptr_t resumed = 3;    // the waiter was resumed
inline constexpr std::uintptr_t cancelled = 4;  // the waiter was cancelled; resume skips or fails
inline constexpr std::uintptr_t refused = 5;    // cancelled, and its resume is refused
inline constexpr std::uintptr_t broken = 6;     // sync resume gave up; suspend fails
inline constexpr std::uintptr_t resuming = 7;   // a resumer holds the waiter (transient)
inline constexpr std::uintptr_t last_state = resuming;
inline bool is_waiter(std::uintptr_t st) noexcept { return st > last_state; }
}  // namespace cqs_cell

// The waiter record's claim word: who may unpark the waiter, and who runs
// the cell's cancellation handler.
//
//     waiting --waiter: its record is in the cell--> placed
//        |                                            |
//        +--resume wins--> resumed <--resume wins-----+
//        +--timer/stop wins--> cancelled_early        +--timer/stop wins--> cancelled
//
//   cancelled_early  the request came before the waiter had announced its
//                    cell; the waiter runs the handler when it sees this
//                    (announce_placed's result), without parking.
//   cancelled        the canceller runs the handler itself, then unparks:
//                    the cell is CANCELLED (or REFUSE) before anybody waits
//                    for the waiter to be scheduled, so a resume never parks
//                    its value in the cell of a waiter that sits in a ready
//                    queue (under a storm of timeouts that wait is what
//                    throttled throughput to the scheduling latency).
//
// The winner unparks the waiter (exactly one unpark per park).
namespace cqs_claim {
inline constexpr std::uint32_t waiting = 0;
inline constexpr std::uint32_t resumed = 1;
inline constexpr std::uint32_t cancelled = 2;
inline constexpr std::uint32_t cancelled_early = 3;
inline constexpr std::uint32_t placed = 4;
}  // namespace cqs_claim

namespace cqs_ops {

enum class suspend_outcome : std::uint8_t { placed, took, broken };
enum class resume_outcome : std::uint8_t { done, failed, skip, refused };

// suspend()'s step in its cell: EMPTY -> WAITER, or take the value a resume
// left, or find the cell BROKEN. `v` is set for `took`.
template <class Cell, class Wait, class Env>
suspend_outcome suspend_cell(Cell& c, Wait* w, bool sync, Env& env, std::uint64_t& v) noexcept {
    std::uintptr_t st = cqs_cell::empty;
    // EMPTY -> WAITER. release publishes w to the resumer's acquire CAS;
    // acquire on failure sees the value a resumer left.
    if (c.state.compare_exchange_strong(st, reinterpret_cast<std::uintptr_t>(w), std::memory_order_release,
                                        std::memory_order_acquire))
        return suspend_outcome::placed;
    if (st == cqs_cell::value) {
        v = c.value.load(std::memory_order_relaxed);  // ordered by the acquire above
        if (!sync) {
            // VALUE -> TAKEN. relaxed: the resumer is gone; nobody reads it.
            c.state.store(cqs_cell::taken, std::memory_order_relaxed);
            env.dead();
            return suspend_outcome::took;
        }
        // Sync: VALUE -> TAKEN races the resumer's VALUE -> BROKEN. release:
        // the spinning resumer's acquire load learns the rendezvous happened.
        if (c.state.compare_exchange_strong(st, cqs_cell::taken, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
            env.dead();
            return suspend_outcome::took;
        }
    }
    if (st != cqs_cell::broken) env.bad_state(st);
    env.dead();  // BROKEN: both sides are done with it
    return suspend_outcome::broken;
}

// The waiter's step once its record is in the cell (suspend_cell returned
// placed): tell a canceller it may run the handler. Returns the claim word:
// `placed` (park and see), `resumed` (a resume came first: park for its
// unpark) or `cancelled_early` (a request came first: run the handler
// yourself; its unpark has no park to match).
template <class Wait>
std::uint32_t announce_placed(Wait* w) noexcept {
    std::uint32_t expected = cqs_claim::waiting;
    // claim: waiting -> placed. release publishes the record's cell fields
    // to the canceller's acq_rel CAS; acquire on failure pairs with the
    // winner's CAS.
    if (w->claim.compare_exchange_strong(expected, cqs_claim::placed, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
        return cqs_claim::placed;
    return expected;
}

enum class cancel_claim : std::uint8_t { lost, early, late };

// A timeout or stop request's step: claim the waiter. lost: a resume won;
// early: unpark it, it runs the handler; late: run the handler (the
// waiter's cell is known), then unpark it.
template <class Wait>
cancel_claim claim_for_cancel(Wait* w) noexcept {
    // acquire pairs with announce_placed's CAS (the cell fields).
    std::uint32_t cur = w->claim.load(std::memory_order_acquire);
    for (;;) {
        if (cur != cqs_claim::waiting && cur != cqs_claim::placed) return cancel_claim::lost;
        const std::uint32_t to = cur == cqs_claim::placed ? cqs_claim::cancelled : cqs_claim::cancelled_early;
        // claim: waiting -> cancelled_early | placed -> cancelled. acq_rel
        // pairs with a resumer's claim CAS (exactly one wins, and only the
        // winner unparks) and with announce_placed.
        if (w->claim.compare_exchange_strong(cur, to, std::memory_order_acq_rel, std::memory_order_acquire))
            return to == cqs_claim::cancelled ? cancel_claim::late : cancel_claim::early;
    }
}

// The resumer's claim of a waiter it holds (RESUMING): waiting|placed ->
// resumed. false: a timeout or stop request won.
template <class Wait>
bool claim_for_resume(Wait* w) noexcept {
    std::uint32_t cur = w->claim.load(std::memory_order_acquire);  // pairs with the CASes below/elsewhere
    while (cur == cqs_claim::waiting || cur == cqs_claim::placed) {
        // acq_rel pairs with the canceller's claim CAS (one winner) and
        // with announce_placed.
        if (w->claim.compare_exchange_strong(cur, cqs_claim::resumed, std::memory_order_acq_rel,
                                             std::memory_order_acquire))
            return true;
    }
    return false;
}

// resume(v)'s step in its cell. `wake` is set when a waiter was claimed: the
// caller unparks it (after leaving its epoch).
template <class Cell, class Wait, class Env>
resume_outcome resume_cell(Cell& c, std::uint64_t v, bool sync, bool smart, Env& env, Wait*& wake) noexcept {
    for (;;) {
        // acquire pairs with the suspender's release CAS (its record) and with
        // the handler's CAS (CANCELLED/REFUSE).
        std::uintptr_t st = c.state.load(std::memory_order_acquire);
        if (st == cqs_cell::empty) {
            c.value.store(v, std::memory_order_relaxed);  // published by the release CAS
            // EMPTY -> VALUE (elimination).
            if (!c.state.compare_exchange_strong(st, cqs_cell::value, std::memory_order_release,
                                                 std::memory_order_relaxed))
                continue;  // the suspender came first
            if (!sync) return resume_outcome::done;
            for (unsigned n = 0; n < env.sync_spins(); ++n) {
                // acquire pairs with the suspender's VALUE -> TAKEN.
                if (c.state.load(std::memory_order_acquire) == cqs_cell::taken) return resume_outcome::done;
                env.relax();
            }
            std::uintptr_t expected = cqs_cell::value;
            // VALUE -> BROKEN: no rendezvous; the suspender will fail.
            if (c.state.compare_exchange_strong(expected, cqs_cell::broken, std::memory_order_acq_rel,
                                                std::memory_order_acquire))
                return resume_outcome::failed;
            return resume_outcome::done;  // taken just now
        }
        if (cqs_cell::is_waiter(st)) {
            // WAITER -> RESUMING: we hold the record; its owner cannot leave
            // (the cancellation handler, whoever runs it, waits out RESUMING before
            // the waiter may return) while we look at it.
            if (!c.state.compare_exchange_strong(st, cqs_cell::resuming, std::memory_order_acquire,
                                                 std::memory_order_relaxed))
                continue;
            auto* w = reinterpret_cast<Wait*>(st);
            if (claim_for_resume(w)) {
                w->value = v;  // read by the waiter after the unpark (which orders it)
                // RESUMING -> RESUMED. relaxed: final, nobody reads it.
                c.state.store(cqs_cell::resumed, std::memory_order_relaxed);
                env.dead();
                wake = w;
                return resume_outcome::done;
            }
            // A timeout or stop request won; the handler (its canceller's or its
            // own) will find the cell again.
            if (!smart) {
                // RESUMING -> WAITER (give the cell back). release pairs with
                // the handler's acquire load.
                c.state.store(st, std::memory_order_release);
                return resume_outcome::failed;
            }
            // Smart: RESUMING -> VALUE, the handler finishes our resume.
            c.value.store(v, std::memory_order_relaxed);
            c.state.store(cqs_cell::value, std::memory_order_release);  // pairs with the handler's CAS
            return resume_outcome::done;
        }
        if (st == cqs_cell::cancelled) return smart ? resume_outcome::skip : resume_outcome::failed;
        if (st == cqs_cell::refused) {
            env.dead();  // REFUSE is final once its resume came
            return resume_outcome::refused;
        }
        env.bad_state(st);
    }
}

// The cancellation handler's step in the cell (paper Listing 6, right), run
// by the canceller (claim `cancelled`) or by the woken waiter
// (`cancelled_early`). mark: CANCELLED (true) or REFUSE (false), as the
// primitive's on_cancellation() decided (always true in simple mode).
// Returns true if a resume had delegated its value here (`v`): the caller
// resumes it again (CANCELLED) or completes it as refused (REFUSE).
template <class Cell, class Wait, class Env>
bool cancel_cell(Cell& c, Wait* w, bool mark, Env& env, std::uint64_t& v) noexcept {
    const std::uintptr_t target = mark ? cqs_cell::cancelled : cqs_cell::refused;
    std::uintptr_t old = c.state.load(std::memory_order_acquire);
    unsigned spins = 0;
    for (;;) {
        if (old == cqs_cell::resuming) {  // a resumer is deciding; it will leave WAITER or VALUE
            env.backoff(spins);
            old = c.state.load(std::memory_order_acquire);
            continue;
        }
        if (old != reinterpret_cast<std::uintptr_t>(w) && old != cqs_cell::value) env.bad_state(old);
        // WAITER|VALUE -> CANCELLED|REFUSE. acquire pairs with the resumer's
        // release store of VALUE (the delegated value).
        if (c.state.compare_exchange_weak(old, target, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    const bool delegated = old == cqs_cell::value;
    if (delegated) v = c.value.load(std::memory_order_relaxed);  // ordered by the acquire above
    // CANCELLED is final; REFUSE is final once its resume came (delegated),
    // else that resume will count it.
    if (mark || delegated) env.dead();
    return delegated;
}

}  // namespace cqs_ops
}  // namespace spindle::detail
