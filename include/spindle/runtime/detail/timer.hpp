// spindle/runtime/detail/timer.hpp — the timers behind sleep_for and every
// timed wait of a fiber: the process-wide timer service, and (below) the
// deadlines a worker with an io_uring keeps on its own heap instead.
//
// One process-wide thread keeps the armed entries ordered by deadline (a
// std::set under a std::mutex) and sleeps on a condition variable until the
// earliest one. It runs an expired entry's action *outside* its mutex, so an
// action may take a primitive's lock and unpark a fiber. Idle, it uses no
// CPU. (Thread waiters do not use it: they sleep on a futex with a timeout.)
//
// Entry states (guarded by the service mutex):
//   idle --timer_add--> armed --deadline--> firing --action returned--> idle
//                         |
//                         +--timer_cancel--> idle
// timer_cancel of a firing entry waits until the action returned, so after
// timer_cancel the entry (usually on a fiber's stack) may go away.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace spindle::detail {

struct timer_entry {
    std::chrono::steady_clock::time_point deadline{};
    void (*fn)(void*) noexcept = nullptr;
    void* arg = nullptr;
    std::uint64_t seq = 0;  // service-private: orders equal deadlines
    int state = 0;          // service-private: 0 idle, 1 armed, 2 firing
};

void timer_add(timer_entry* e);             // arm; fires once at e->deadline
void timer_cancel(timer_entry* e) noexcept;  // disarm, or wait for a firing action
// ---- deadlines on the worker's own heap --------------------------------------
//
// A worker whose I/O engine keeps timers (io_uring, epoll) keeps its fibers'
// deadlines in a binary min-heap of its own and fires them when it looks at
// the engine, which it does anyway: no trip through the timer thread, whose
// std::set and mutex every worker shares, and whose condition variable is
// signalled whenever an entry becomes the earliest.
//
// heap_timer is what that heap holds (owner-only fields): a sleeping
// fiber (this_fiber::sleep_until, owner-only from end to end) or a
// local_timer, the deadline of a primitive's timed wait. That one is
// armed on the waiting fiber's worker, but the wait may end (a grant) and
// the fiber move on to another worker before the deadline, so its cancel
// comes from any thread. The timer is heap memory, handed between the two
// sides by its state word:
//
//   armed --local_timer_cancel (any thread)--> cancelled: the owner frees it
//     |                                         when it next meets it
//     +--the owner, at the deadline--> firing --fn returned--> fired:
//                                      the canceller waits for fired, then
//                                      frees it
struct heap_timer {
    std::chrono::steady_clock::time_point t{};
    std::size_t idx = 0;       // its place in the heap
    bool is_local_timer = false;  // else the engine's own kind (a sleeper)
};

struct local_timer : heap_timer {
    void (*fn)(void*) noexcept = nullptr;
    void* arg = nullptr;
    // The state word above. The canceller's armed -> cancelled CAS
    // (acq_rel) pairs with the owner's acquire CAS or load that finds
    // `cancelled` before it frees the timer; the owner's release store of
    // `fired` pairs with the canceller's acquire load before it frees it.
    std::atomic<std::uint32_t> state{0};
    static constexpr std::uint32_t armed = 0, cancelled = 1, firing = 2, fired = 3;
};

// Arms fn(arg) at t on the calling fiber's worker's heap. Null where there
// is none (not on a fiber, a worker without an engine that keeps timers,
// out of memory): use timer_add.
local_timer* local_timer_add(std::chrono::steady_clock::time_point t, void (*fn)(void*) noexcept,
                             void* arg) noexcept;
// Disarms it, or waits for its running fn; it is gone afterwards. Any thread.
void local_timer_cancel(local_timer* lt) noexcept;
// For the heap's owner, with lt out of the heap at its deadline: runs fn
// unless cancelled; frees a cancelled one.
void local_timer_fire(local_timer* lt) noexcept;
// For the heap's owner, sweeping: true (and lt freed) if it was cancelled;
// the owner then drops it from the heap.
bool local_timer_reclaim(local_timer* lt) noexcept;

// The earliest armed deadline (time_point::max() with none), without the
// service's mutex: a hint, possibly a moment stale, for a worker deciding
// whether to watch its I/O engine before it sleeps (a fiber due to wake
// within the watch would only make the watch burn the time until then).
std::chrono::steady_clock::time_point timer_earliest() noexcept;

}  // namespace spindle::detail
