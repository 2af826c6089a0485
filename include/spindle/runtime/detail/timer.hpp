// spindle/runtime/detail/timer.hpp — the timer service behind sleep_for and
// every timed wait of a fiber.
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

#include <chrono>
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
// The earliest armed deadline (time_point::max() with none), without the
// service's mutex: a hint, possibly a moment stale, for a worker deciding
// whether to watch its I/O engine before it sleeps (a fiber due to wake
// within the watch would only make the watch burn the time until then).
std::chrono::steady_clock::time_point timer_earliest() noexcept;

}  // namespace spindle::detail
