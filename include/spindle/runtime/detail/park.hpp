// spindle/runtime/detail/park.hpp — the park API: how a sync primitive
// waits and wakes, and the one place a handoff policy (runtime/handoff.hpp)
// reaches the runtime. Internal. This is all a primitive in sync/ needs from
// the runtime: a waiter to queue, park() to sleep on it, and unpark() /
// unpark_with() / unpark_and_park() for whoever takes it out of the queue.
// No worker, run queue or context switch is visible here; they are in
// runtime/detail/worker.hpp, and the implementation, with the switch
// decision, is src/runtime/handoff.cpp.
//
// Parking protocol (waiter::state), the fiber analogue of a futex:
//   park():   suspend, then (post-switch) state.exchange(parked); if a wake
//             came first (notified), make the fiber ready again at once.
//   unpark(): state.exchange(notified); if it was parked, make the fiber
//             ready. Exactly one unpark per park: the caller of unpark is
//             whoever took the waiter out of its queue.
// A CES handoff or an inline resume switches into a waiter only when it sees
// it parked (its context saved); otherwise it falls back to unpark().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include <spindle/runtime/handoff.hpp>

namespace spindle::detail {

struct fiber_ctx;

// waiter::state values.
inline constexpr std::uint32_t park_empty = 0;     // waiting, not yet (known to be) suspended
inline constexpr std::uint32_t park_parked = 1;    // a fiber's context is saved; unpark makes it ready.
                                                   // A thread sleeps (or is about to) on the futex;
                                                   // unpark must futex_wake it
inline constexpr std::uint32_t park_notified = 2;  // woken

// Someone who waits: a fiber or an OS thread. Lives on the waiter's stack.
struct waiter {
    fiber_ctx* fiber = nullptr;  // the waiting fiber, or null for an OS thread
    // park_* above. Fibers: exchanged by park's post-switch action and by
    // unpark (acq_rel, so the unparker's writes are seen by the woken side).
    // Threads: the futex word; park spins, then CASes empty -> parked and
    // sleeps; unpark exchanges in notified and futex_wakes only a parked
    // thread (acq_rel both ways).
    std::atomic<std::uint32_t> state{park_empty};
};

void park(waiter* wt) noexcept;                         // wait until unparked
// park() for a fiber, without the spin before it suspends: for a wait that
// needs its worker to go on to end (an I/O operation, submitted when the
// worker next looks at its engine).
void park_now(waiter* wt) noexcept;
// A thread's spin before it sleeps (thread_park_spins, handoff.cpp): true if
// unparked.
// It gives up by `deadline` at the latest (give or take one yield). Before
// it yields it moves a delegated TCLock section home (tclock_may_block).
bool thread_park_spin(waiter* wt,
                      std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) noexcept;
// The watch before a broadcast wait queues (queue_spins, handoff.cpp): true once
// done(arg) said so, false if the wait must queue. A thread yields only
// before `deadline`.
bool spin_before_queue(bool (*done)(const void* arg) noexcept, const void* arg,
                       std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) noexcept;
void unpark(waiter* wt) noexcept;                       // wake it (dispatch)
// Wake `wt` with a handoff policy: switches into a parked fiber waiter when
// the policy and the caller allow it, else unparks.
void unpark_with(waiter* wt, handoff policy) noexcept;
// Wake `wt` with `policy` and park `self` in one step: where a switch is
// allowed, the caller's worker goes straight to the waiter and the caller
// parks (a contended unlock by a fiber about to wait, as in a condition
// variable's wait). Otherwise unpark(wt), then park(self).
void unpark_and_park(waiter* wt, handoff policy, waiter* self) noexcept;

}  // namespace spindle::detail
