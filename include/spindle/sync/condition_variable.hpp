// spindle/sync/condition_variable.hpp — a condition variable for
// spindle::mutex, with CES wait morphing.
//
//     spindle::mutex m;
//     spindle::condition_variable cv;
//     std::unique_lock lk(m);
//     cv.wait(lk, [&] { return ready; });
//
// Works from fibers and plain OS threads, mixed. The interface is
// std::condition_variable's plus the stop_token overloads of
// std::condition_variable_any: wait, wait_for, wait_until, each with and
// without a predicate, and wait / wait_for / wait_until (lock, stop_token,
// pred). Spurious wake-ups do not happen, but callers should still use a
// predicate, as with any condition variable.
//
// Wait morphing (CES paper §5.2). notify_one/notify_all take waiters off
// this queue and, without waking them, look at the mutex:
//   - held (the usual case: notify under the lock): the waiters join the
//     mutex's FIFO queue; each wakes only when the mutex is handed to it.
//   - free: the first waiter gets the mutex now and runs at once, under the
//     mutex's handoff policy (with `ces`, on the notifier's worker while the
//     notifier goes to the executor); the rest join the mutex queue.
// So a notified waiter never wakes just to block on the mutex again, and
// notify_all does not stampede.
//
// A waiter releases the mutex and suspends in one step: a contended unlock
// switches straight to the mutex's next waiter.
//
// Cancellation (a timeout or a stop request) takes effect only while the
// waiter is still on this queue. Once a notify has moved it onto the mutex
// queue it has been notified; it then waits for the mutex uninterrupted and
// returns no_timeout / the predicate's value, as a notified waiter would.
// Every wait returns holding the mutex, timed out or not.
//
// Queue: the same spinlock-protected intrusive FIFO as the mutex
// (sync/detail/wait_queue.hpp); waiters are notified in FIFO order.
//
// Debug builds (SPINDLE_DEBUG_CHECKS) abort with a message naming the
// condition variable when it is destroyed with waiters, when wait is called
// with a lock that does not own its mutex, and when two waits use different
// mutexes at once.
#pragma once

#include <chrono>
#include <condition_variable>  // std::cv_status
#include <mutex>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/sync/detail/wait_queue.hpp>
#include <spindle/sync/mutex.hpp>

namespace spindle {

using std::cv_status;

struct condition_variable_access;

class condition_variable {
public:
    constexpr condition_variable() noexcept = default;
    ~condition_variable();
    condition_variable(const condition_variable&) = delete;
    condition_variable& operator=(const condition_variable&) = delete;

    void notify_one() noexcept { notify(false); }
    void notify_all() noexcept { notify(true); }

    void wait(std::unique_lock<mutex>& lk) { (void)wait_impl(lk, detail::no_deadline, nullptr); }

    template <class Pred>
    void wait(std::unique_lock<mutex>& lk, Pred pred) {
        while (!pred()) wait(lk);
    }

    template <class Clock, class Duration>
    cv_status wait_until(std::unique_lock<mutex>& lk, const std::chrono::time_point<Clock, Duration>& t) {
        return wait_impl(lk, detail::to_steady_deadline(t), nullptr) ? cv_status::no_timeout : cv_status::timeout;
    }

    template <class Clock, class Duration, class Pred>
    bool wait_until(std::unique_lock<mutex>& lk, const std::chrono::time_point<Clock, Duration>& t, Pred pred) {
        auto deadline = detail::to_steady_deadline(t);
        while (!pred())
            if (!wait_impl(lk, deadline, nullptr)) return pred();
        return true;
    }

    template <class Rep, class Period>
    cv_status wait_for(std::unique_lock<mutex>& lk, const std::chrono::duration<Rep, Period>& d) {
        return wait_until(lk, deadline_after(d));
    }

    template <class Rep, class Period, class Pred>
    bool wait_for(std::unique_lock<mutex>& lk, const std::chrono::duration<Rep, Period>& d, Pred pred) {
        return wait_until(lk, deadline_after(d), std::move(pred));
    }

    // Stop-token overloads (as std::condition_variable_any): wait until
    // pred() holds or stop is requested; return pred().
    template <class Pred>
    bool wait(std::unique_lock<mutex>& lk, std::stop_token st, Pred pred) {
        while (!pred()) {
            if (st.stop_requested()) return pred();
            (void)wait_impl(lk, detail::no_deadline, &st);
        }
        return true;
    }

    template <class Clock, class Duration, class Pred>
    bool wait_until(std::unique_lock<mutex>& lk, std::stop_token st,
                    const std::chrono::time_point<Clock, Duration>& t, Pred pred) {
        auto deadline = detail::to_steady_deadline(t);
        while (!pred()) {
            if (st.stop_requested() || std::chrono::steady_clock::now() >= deadline) return pred();
            (void)wait_impl(lk, deadline, &st);
        }
        return true;
    }

    template <class Rep, class Period, class Pred>
    bool wait_for(std::unique_lock<mutex>& lk, std::stop_token st, const std::chrono::duration<Rep, Period>& d,
                  Pred pred) {
        return wait_until(lk, std::move(st), deadline_after(d), std::move(pred));
    }

private:
    friend struct condition_variable_access;

    template <class Rep, class Period>
    static std::chrono::steady_clock::time_point deadline_after(const std::chrono::duration<Rep, Period>& d) {
        return std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d);
    }

    // One wait; true if notified, false if it timed out or was stopped.
    // Returns holding the mutex either way. (The lock analysis cannot see
    // that a notify hands the mutex back to us: it is off here.)
    bool wait_impl(std::unique_lock<mutex>& lk, std::chrono::steady_clock::time_point deadline,
                   std::stop_token* st) SPINDLE_NO_TSA;
    void notify(bool all) noexcept SPINDLE_NO_TSA;  // hand-over-hand over the waiters' mutexes

    detail::spinlock qlock_;
    detail::wait_list queue_;  // guarded by qlock_
#if SPINDLE_DEBUG_CHECKS
    mutex* waiters_mutex_ = nullptr;  // the mutex of the current waiters; guarded by qlock_
#endif
};

}  // namespace spindle
