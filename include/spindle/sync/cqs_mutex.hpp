// spindle/sync/cqs_mutex.hpp — a task-aware, FIFO, abortable mutex on the
// CQS queue: the CQS paper's mutex (Koval, Khalanskiy, Alistarh, PLDI 2023,
// §4.1: a semaphore with one permit) with the CES handoff.
//
//     spindle::cqs_mutex m;                          // handoff::ces
//     spindle::cqs_mutex d(spindle::handoff::dispatch);
//     { std::lock_guard g(m); ... }
//     if (m.try_lock_for(1ms)) { ...; m.unlock(); }
//
// The same interface as spindle::mutex (Lockable, TimedLockable,
// lock(std::stop_token), a handoff policy as constructor argument), from
// fibers and plain threads mixed. The two differ in their waiter queue:
//
//   spindle::mutex      an intrusive FIFO under a spinlock (the CES paper's
//                       design). A cancelled waiter unlinks itself under the
//                       lock; wait morphing (condition_variable) moves a
//                       notified waiter straight into this queue.
//   spindle::cqs_mutex  the CQS queue: lock(), unlock() and cancellation
//                       take no lock on the waiter queue (unlinking a
//                       cancelled-out segment takes the queue's spinlock, once
//                       per segment; a timed wait of a fiber arms the timer
//                       service), O(1) cancellation with smart cancellation;
//                       no condition_variable support (a notified waiter
//                       cannot be placed in a CQS cell on its own behalf).
//
// Lock word (detail::semaphore_core with one permit):
//
//     count:   1 free | 0 held, nobody queued | -k held, k lockers counted as waiting
//
//     lock:    FAA(count, -1) = c;  c = 1: ours; c <= 0: wait in the cqs
//     unlock:  FAA(count, +1) = c;  c < 0: hand the mutex to the oldest waiter
//
// Fairness: FIFO handoff. Once anyone waits, an unlock hands the mutex to
// the oldest waiter, so no newcomer overtakes -- with one exception, from
// synchronous resumption: a locker that has decremented the word but does
// not reach its cell within the unlocker's short spin (a preempted thread,
// a fiber held up arming its timer) finds its cell BROKEN; the mutex is put
// back in the word, where a try_lock may take it, and that locker queues
// again at the tail. try_lock never takes a mutex that was handed to a
// waiter.
//
// Debug builds (SPINDLE_DEBUG_CHECKS) abort with a message naming the mutex
// when it is unlocked by a caller that does not hold it or that is not
// locked, locked again by the caller that holds it (which would wait for
// itself forever), or destroyed while held or waited on.
#pragma once

#include <atomic>
#include <chrono>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/sync/counting_semaphore.hpp>
#include <spindle/runtime/handoff.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle {

class SPINDLE_CAPABILITY("mutex") cqs_mutex {
public:
    constexpr explicit cqs_mutex(handoff policy = handoff::ces) noexcept : core_(1, 1, policy), policy_(policy) {}
    ~cqs_mutex();
    cqs_mutex(const cqs_mutex&) = delete;
    cqs_mutex& operator=(const cqs_mutex&) = delete;

    void lock() SPINDLE_ACQUIRE() {
        check_not_owner();
        (void)core_.acquire(detail::no_deadline, nullptr);
        note_owner();
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        if (!core_.try_acquire()) return false;
        note_owner();
        return true;
    }

    void unlock() SPINDLE_RELEASE() {
        check_owner();  // and forget the owner: the next holder may not have run yet
        core_.release(1);
    }

    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) SPINDLE_TRY_ACQUIRE(true) {
        return try_lock_until(std::chrono::steady_clock::now() +
                              std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) SPINDLE_TRY_ACQUIRE(true) {
        if (try_lock()) return true;
        const auto deadline = detail::to_steady_deadline(t);
        if (std::chrono::steady_clock::now() >= deadline) return false;
        check_not_owner();
        if (!core_.acquire(deadline, nullptr)) return false;
        note_owner();
        return true;
    }

    // Lock unless stop is requested on `st` first; true when acquired.
    [[nodiscard]] bool lock(std::stop_token st) SPINDLE_TRY_ACQUIRE(true) {
        check_not_owner();
        if (!core_.acquire(detail::no_deadline, &st)) return false;
        note_owner();
        return true;
    }

    [[nodiscard]] handoff policy() const noexcept { return policy_; }

    // Test and debug: segments of the waiter queue still allocated.
    [[nodiscard]] std::size_t debug_queue_segments() noexcept { return core_.queue_segments(); }

private:
#if SPINDLE_DEBUG_CHECKS
    void note_owner() noexcept { owner_.store(detail::caller_identity(), std::memory_order_relaxed); }
    void check_owner() noexcept;      // unlock(): held, and by the caller; then forgets the owner
    void check_not_owner() noexcept;  // a lock that may wait: not by the holder
#else
    void note_owner() noexcept {}
    void check_owner() noexcept {}
    void check_not_owner() noexcept {}
#endif

    detail::semaphore_core core_;
    const handoff policy_;
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
