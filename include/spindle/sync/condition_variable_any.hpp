// spindle/sync/condition_variable_any.hpp — a condition variable for any
// lock: spindle::cqs_mutex, std::mutex, a std::shared_lock, your own.
//
//     spindle::cqs_mutex m;
//     spindle::condition_variable_any cv;
//     std::unique_lock lk(m);
//     cv.wait(lk, [&] { return ready; });
//
// Works from fibers and plain OS threads, mixed, with any BasicLockable
// `Lock` (lock() and unlock()), as std::condition_variable_any. The
// interface is std::condition_variable_any's: wait, wait_for, wait_until,
// each with and without a predicate, and the stop_token overloads wait /
// wait_for / wait_until (lock, stop_token, pred). Spurious wake-ups do not
// happen, but callers should still use a predicate.
//
// Why a second condition variable. spindle::condition_variable morphs a
// notified waiter straight onto spindle::mutex's queue (CES paper §5.2):
// it must know the mutex's queue. With any other lock a notified waiter is
// woken (dispatch: it goes to a ready queue, or its thread is unparked) and
// takes the lock again itself, as std::condition_variable_any's waiters
// do; prefer spindle::condition_variable with spindle::mutex.
//
// Algorithm. An intrusive FIFO of waiters under a spinlock (the one
// sync/detail/wait_queue.hpp gives every CES primitive):
//
//   wait:    queue ourselves (under qlock_), lk.unlock(), park; then
//            lk.lock() again -- timed out, stopped or notified
//   notify:  take the oldest waiter (notify_one) or all of them (under
//            qlock_), then unpark each
//   cancel:  (a timeout or stop request) takes the waiter off the queue if
//            it is still there, and unparks it; one that a notify took
//            first counts as notified
//
// A waiter is queued before it lets the lock go, so a notify made after
// the waiter's unlock (under the lock or not) always finds it: no wake-up is
// lost between the unlock and the park.
//
// Contract:
//
//   operation                  | result
//   ---------------------------+-------------------------------------------------
//   wait(lk)                   | lk held by the caller; returns holding it, notified
//   wait_until(lk, t)          | no_timeout if notified, timeout at t; holding lk
//   wait(lk, stop, pred)       | pred() once it holds or stop is requested; holding lk
//   notify_one() / notify_all()| wakes the oldest waiter / every waiter; no-op if none
//
// Fairness: notified in FIFO order; a woken waiter then competes for the
// lock as the lock's own rules say.
//
// Undefined (aborts with a message naming the condition variable in debug
// builds, SPINDLE_DEBUG_CHECKS): destroying it while someone waits. Not
// checked: waiting with a lock the caller does not hold (the unlock is the
// lock's business). If relocking throws, std::terminate is called, as the
// standard says for std::condition_variable_any.
#pragma once

#include <chrono>
#include <condition_variable>  // std::cv_status
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle {

struct condition_variable_any_access;

class condition_variable_any {
public:
    constexpr condition_variable_any() noexcept = default;
    ~condition_variable_any();
    condition_variable_any(const condition_variable_any&) = delete;
    condition_variable_any& operator=(const condition_variable_any&) = delete;

    void notify_one() noexcept { notify(false); }
    void notify_all() noexcept { notify(true); }

    template <class Lock>
    void wait(Lock& lk) {
        (void)wait_impl(lk, detail::no_deadline, nullptr);
    }

    template <class Lock, class Pred>
    void wait(Lock& lk, Pred pred) {
        while (!pred()) wait(lk);
    }

    template <class Lock, class Clock, class Duration>
    std::cv_status wait_until(Lock& lk, const std::chrono::time_point<Clock, Duration>& t) {
        return wait_impl(lk, detail::to_steady_deadline(t), nullptr) ? std::cv_status::no_timeout
                                                                     : std::cv_status::timeout;
    }

    template <class Lock, class Clock, class Duration, class Pred>
    bool wait_until(Lock& lk, const std::chrono::time_point<Clock, Duration>& t, Pred pred) {
        const auto deadline = detail::to_steady_deadline(t);
        while (!pred())
            if (!wait_impl(lk, deadline, nullptr)) return pred();
        return true;
    }

    template <class Lock, class Rep, class Period>
    std::cv_status wait_for(Lock& lk, const std::chrono::duration<Rep, Period>& d) {
        return wait_until(lk, deadline_after(d));
    }

    template <class Lock, class Rep, class Period, class Pred>
    bool wait_for(Lock& lk, const std::chrono::duration<Rep, Period>& d, Pred pred) {
        return wait_until(lk, deadline_after(d), std::move(pred));
    }

    // Wait until pred() holds or stop is requested; return pred().
    template <class Lock, class Pred>
    bool wait(Lock& lk, std::stop_token st, Pred pred) {
        while (!pred()) {
            if (st.stop_requested()) return pred();
            (void)wait_impl(lk, detail::no_deadline, &st);
        }
        return true;
    }

    template <class Lock, class Clock, class Duration, class Pred>
    bool wait_until(Lock& lk, std::stop_token st, const std::chrono::time_point<Clock, Duration>& t, Pred pred) {
        const auto deadline = detail::to_steady_deadline(t);
        while (!pred()) {
            if (st.stop_requested() || std::chrono::steady_clock::now() >= deadline) return pred();
            (void)wait_impl(lk, deadline, &st);
        }
        return true;
    }

    template <class Lock, class Rep, class Period, class Pred>
    bool wait_for(Lock& lk, std::stop_token st, const std::chrono::duration<Rep, Period>& d, Pred pred) {
        return wait_until(lk, std::move(st), deadline_after(d), std::move(pred));
    }

private:
    friend struct condition_variable_any_access;

    template <class Rep, class Period>
    static std::chrono::steady_clock::time_point deadline_after(const std::chrono::duration<Rep, Period>& d) {
        return std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d);
    }

    // One wait; true if notified, false if it timed out or was stopped.
    // Returns holding the lock either way.
    template <class Lock>
    bool wait_impl(Lock& lk, std::chrono::steady_clock::time_point deadline, std::stop_token* st) {
        const bool notified =
            park_released(deadline, st, [](void* l) noexcept { static_cast<Lock*>(l)->unlock(); }, &lk);
        relock(lk);
        return notified;
    }
    // Every wait returns holding the lock: a relock that throws terminates.
    template <class Lock>
    static void relock(Lock& lk) noexcept {
        lk.lock();
    }

    // Queues the caller, calls unlock(lock), parks until notified (true) or
    // timed out / stopped (false). Does not take the lock back. (A wait
    // cancelled before it queued still unlocks, and the caller relocks.)
    bool park_released(std::chrono::steady_clock::time_point deadline, std::stop_token* st,
                       void (*unlock)(void*) noexcept, void* lock);
    void notify(bool all) noexcept;

    detail::spinlock qlock_;
    detail::wait_list queue_;  // guarded by qlock_
};

}  // namespace spindle
