// spindle/io/blocking.hpp — spindle::blocking(fn): run a call that can only
// block (getaddrinfo, a library's blocking call, a cold disk read on the
// epoll backend) without holding a worker.
//
//     addrinfo* ai = nullptr;
//     int rc = spindle::blocking([&] { return getaddrinfo(host, "80", &hints, &ai); });
//
// From a fiber, fn runs on a small elastic pool of threads while the fiber
// parks; the fiber's worker runs other fibers meanwhile. The pool starts a
// thread when none is idle (up to 64), and a thread idle for 10 s exits.
// With 64 calls running the next one waits for a thread. From a plain
// thread, fn simply runs on it. fn's result, or its exception, comes back
// to the caller. fn must not use fiber-only calls (it runs on a plain
// thread) and cannot be cancelled once started.
#pragma once

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include <spindle/runtime/detail/park.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle {

namespace detail {
struct blocking_job {
    void (*run)(blocking_job*) noexcept = nullptr;
    blocking_job* next = nullptr;  // pool queue link (under the pool's mutex)
    waiter done;                   // the parked fiber; unparked once run returned
};
// Runs job->run on a pool thread and parks the calling fiber until it has.
void run_blocking(blocking_job* job) noexcept;
}  // namespace detail

template <class Fn>
std::invoke_result_t<Fn&> blocking(Fn&& fn) {
    using R = std::invoke_result_t<Fn&>;
    if (!this_fiber::is_fiber()) return fn();
    struct job : detail::blocking_job {
        Fn* fn;
        std::exception_ptr error;
        std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> value{};
    } j;
    j.fn = &fn;
    j.run = [](detail::blocking_job* b) noexcept {
        auto* self = static_cast<job*>(b);
        try {
            if constexpr (std::is_void_v<R>) {
                (*self->fn)();
            } else {
                self->value.emplace((*self->fn)());
            }
        } catch (...) {
            self->error = std::current_exception();
        }
    };
    detail::run_blocking(&j);
    if (j.error) std::rethrow_exception(j.error);
    if constexpr (!std::is_void_v<R>) return std::move(*j.value);
}

}  // namespace spindle
