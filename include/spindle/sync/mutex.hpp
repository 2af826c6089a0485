// spindle/sync/mutex.hpp — a task-aware, FIFO mutex with CES handoff.
//
//     spindle::mutex m;                          // handoff::ces
//     spindle::mutex d(spindle::handoff::dispatch);
//     { std::lock_guard g(m); ... }
//
// Callable from fibers (the fiber suspends; its worker runs other fibers) and
// from plain OS threads (the thread sleeps on a futex), mixed freely.
//
// Meets Lockable and TimedLockable: lock, try_lock, try_lock_for,
// try_lock_until, unlock; plus lock(std::stop_token), which returns false if
// stop was requested before the lock was handed over. A fiber's plain lock()
// does not observe its own stop token: a Lockable lock() cannot fail.
//
// Fairness: FIFO handoff. An uncontended lock is one CAS. Once a caller has
// queued, an unlock hands the mutex directly to the oldest waiter — the
// mutex never becomes free in between, so nobody overtakes a chosen waiter.
// (try_lock may still take a mutex that nobody waits for.)
//
// Handoff policy (runtime/handoff.hpp) is a constructor argument rather than a
// template parameter: one `spindle::mutex` type works with one
// condition_variable and std::unique_lock, containers may mix policies, and
// the policy is read only on the contended path, next to a context switch,
// where a predictable branch costs nothing measurable.
//
// Lock word and queue (the CES paper's final design, §5.1):
//
//     state_:  0 free | 1 held, no waiters | 2 held, waiters queued
//     qlock_:  test-and-set spinlock guarding the waiter queue and the
//              1 <-> 2 transitions made by the slow paths
//     queue:   intrusive FIFO of waiter records living on the waiters' stacks
//
// Transitions (the code tags each step with its own):
//
//     lock         0 -> 1                   CAS; fails on 1 or 2: lock slow
//     lock slow    0 -> 1, or 1|2 -> 2 and enqueue          under qlock_
//     unlock       1 -> 0                   CAS; fails on 2: unlock slow
//     unlock slow  under qlock_: a waiter queued: hand the mutex to the
//                  oldest (2 -> 1 if it was the last, else 2 stays); none
//                  left (all cancelled, 2 -> 1): let qlock_ go, then
//                  1 -> 0 by CAS as the fast path -- which fails only if a
//                  locker queued meanwhile (1 -> 2): start over
//     cancel       dequeue; the queue emptied: 2 -> 1       under qlock_
//
// The last access. Once the mutex is free, another caller may lock it,
// unlock it and destroy it (POSIX allows destroying an unlocked mutex; an
// object that holds one may be freed by whoever drops the last reference
// to it) while the unlock that freed it has not returned. So the step that
// frees the mutex, 1 -> 0, is always the unlocking caller's last access to
// it: the slow unlock never frees it under qlock_ (that would leave the
// spinlock's release to a freed object), and a handoff keeps the mutex
// held by the chosen waiter, which stays parked until the unlocker's last
// touch of the mutex is behind it.
//
// Debug builds (SPINDLE_DEBUG_CHECKS) abort with a message naming the mutex
// when it is unlocked by a caller that does not hold it, locked again by the
// caller that holds it (which would wait for itself forever), or destroyed
// while held or waited on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/handoff.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle {

class condition_variable;
struct mutex_access;

class SPINDLE_CAPABILITY("mutex") mutex {
public:
    constexpr explicit mutex(handoff policy = handoff::ces) noexcept : policy_(policy) {}
    ~mutex();
    mutex(const mutex&) = delete;
    mutex& operator=(const mutex&) = delete;

    void lock() SPINDLE_ACQUIRE() {
        std::uint32_t expected = 0;
        // acquire pairs with the release in unlock() / the handoff.
        if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                            std::memory_order_relaxed)) [[unlikely]]
            lock_slow();
        note_owner();
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        std::uint32_t expected = 0;
        // acquire: as in lock().
        if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
            note_owner();
            return true;
        }
        return false;
    }

    void unlock() SPINDLE_RELEASE() {
        check_owner();
        forget_owner();
        std::uint32_t expected = 1;
        // release pairs with the acquire CAS of the next locker.
        if (!state_.compare_exchange_strong(expected, 0, std::memory_order_release,
                                            std::memory_order_relaxed)) [[unlikely]]
            unlock_slow();
    }

    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) SPINDLE_TRY_ACQUIRE(true) {
        return try_lock_until(std::chrono::steady_clock::now() +
                              std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) SPINDLE_TRY_ACQUIRE(true) {
        if (try_lock()) return true;
        if (!lock_wait(detail::to_steady_deadline(t), nullptr)) return false;
        note_owner();
        return true;
    }

    // Lock unless stop is requested on `st` first; true when acquired.
    [[nodiscard]] bool lock(std::stop_token st) SPINDLE_TRY_ACQUIRE(true) {
        if (try_lock()) return true;
        if (!lock_wait(detail::no_deadline, &st)) return false;
        note_owner();
        return true;
    }

    [[nodiscard]] handoff policy() const noexcept { return policy_; }

private:
    friend class condition_variable;
    friend struct condition_variable_access;
    friend struct mutex_access;

    SPINDLE_NOINLINE void lock_slow();
    SPINDLE_NOINLINE void unlock_slow();
    // Takes qlock_: the next owner (granted, still parked), or null once the
    // mutex is freed -- by a releasing CAS that is hand_over's last access.
    detail::wait_node* hand_over() noexcept;
    bool lock_wait(std::chrono::steady_clock::time_point deadline, std::stop_token* st);
    // For condition_variable: release the mutex (held by the caller) and
    // park on `self.w` in one step. Returns when unparked, or at once if the
    // unlock handed the mutex to `self` itself (a notify moved it here).
    void unlock_and_park(detail::wait_node& self);
    // Under qlock_: take the mutex if free (true), else mark waiters
    // queued (state 1 -> 2) so the holder's unlock looks at the queue.
    static bool take_or_mark(std::atomic<std::uint32_t>& state) noexcept;

#if SPINDLE_DEBUG_CHECKS
    void note_owner() noexcept { owner_.store(detail::caller_identity(), std::memory_order_relaxed); }
    // Before every release: the next holder writes its own identity after
    // the release that hands it the mutex, so until then nobody is the owner.
    void forget_owner() noexcept { owner_.store(nullptr, std::memory_order_relaxed); }
    void check_owner() noexcept;      // held, and by the caller (unlock, a condition variable's wait)
    void check_not_owner() noexcept;  // a lock that must wait: not by the holder
#else
    void note_owner() noexcept {}
    void forget_owner() noexcept {}
    void check_owner() noexcept {}
    void check_not_owner() noexcept {}
#endif

    std::atomic<std::uint32_t> state_{0};  // 0 free, 1 held, 2 held + waiters
    handoff policy_;
    detail::spinlock qlock_;
    detail::wait_list queue_;  // guarded by qlock_
#if SPINDLE_DEBUG_CHECKS
    // Who holds it: a fiber's control block or a thread's marker, or null.
    // Relaxed: written by each new holder, cleared by every release; read
    // by unlock (must be the caller) and by a lock that must wait (must not
    // be): a caller only ever finds its own identity there while it holds
    // the mutex.
    std::atomic<const void*> owner_{nullptr};
#endif
};

}  // namespace spindle
