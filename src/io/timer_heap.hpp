// A worker's own timers, kept by its I/O engine (io_uring and epoll alike):
// fibers sleeping in this_fiber::sleep_until and the deadlines of timed
// waits on the sync primitives (local_timer, runtime/detail/timer.hpp).
//
// A binary min-heap by deadline, touched only by the worker that owns the
// engine. The worker fires every expired entry at once when it looks at
// its engine, and sleeps in the engine no longer than the earliest: one
// wake-up for a burst of equal deadlines and local unparks, where the timer
// thread costs a cross-thread unpark per fiber and a kernel timeout per
// sleep a timer and a completion each (uring.cpp, op_sleep, has the
// figures).
//
// The one thing another thread does: a stop request on a sleeper marks it
// (sleeper::stop) and counts a request on the engine (stop_requests),
// then wakes the engine; the owner then finds the marked sleepers
// (wake_stopped) and unparks them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <spindle/runtime/detail/timer.hpp>
#include <spindle/runtime/detail/worker.hpp>

namespace spindle::io::detail {

// A fiber in sleep_on.
struct sleeper : spindle::detail::heap_timer {
    spindle::detail::waiter wt;
    // Set by a stop callback on any thread (release, before it counts a
    // request in stop_requests); read by the owner (acquire) in
    // wake_stopped.
    std::atomic<bool> stop{false};
};

class timer_heap {
public:
    using time_point = std::chrono::steady_clock::time_point;

    [[nodiscard]] bool empty() const noexcept { return v_.empty(); }
    // The earliest deadline; the heap must not be empty.
    [[nodiscard]] time_point earliest() const noexcept { return v_.front()->t; }
    // Is a deadline due before `horizon`, here or on the timer thread (where
    // a wait whose worker had no engine yet, or no memory for a heap entry,
    // put its own)? The engines' watches end at such a wake-up, so they do
    // not start one (flush).
    [[nodiscard]] bool due_before(time_point horizon) const noexcept;

    void push(spindle::detail::heap_timer* h) noexcept;
    void remove(spindle::detail::heap_timer* h) noexcept;
    // A timed wait's deadline. A timed wait that ends before its deadline
    // (the usual case) leaves a cancelled local_timer here until then; at
    // sweep_at entries this first sweeps them out, so they stay at most
    // about as many as the live ones.
    void add(spindle::detail::local_timer* lt) noexcept;
    // Wakes every sleeper whose time has come, fires every such deadline.
    void fire() noexcept;
    // Drops the cancelled deadlines.
    void sweep() noexcept;
    // Takes out and wakes the sleepers a stop request marked: call after an
    // acquire read of the engine's stop_requests that found some.
    void wake_stopped() noexcept;

private:
    void set(std::size_t i, spindle::detail::heap_timer* h) noexcept;
    void up(std::size_t i) noexcept;
    void down(std::size_t i) noexcept;

    std::vector<spindle::detail::heap_timer*> v_;
    std::vector<spindle::detail::heap_timer*> due_;  // fire()'s expired entries, emptied before it returns
    std::size_t sweep_at_ = 64;
};

// The calling fiber, on worker `w` whose engine `e` keeps `heap`, sleeps
// until t or a stop request on its own token: false for the stop. A
// request on another thread marks the sleeper, counts itself in
// `stop_requests` (release: pairs with the owner's acquire exchange before
// wake_stopped) and calls wake(e).
bool sleep_on(timer_heap& heap, spindle::detail::worker* w, std::chrono::steady_clock::time_point t,
              std::atomic<std::uint32_t>& stop_requests, void (*wake)(spindle::detail::io_engine*) noexcept,
              spindle::detail::io_engine* e) noexcept;

}  // namespace spindle::io::detail
