// bench/cqs/spinlock_queue_semaphore.hpp — the lock-based competitor of the
// `semaphore` workload: a fair counting semaphore whose permit count and
// waiter queue sit under one spinlock.
//
// What it is. The textbook fair semaphore, built from spindle's own pre-CQS
// waiting machinery (sync/detail/wait_queue.hpp, the CES paper's design): a
// detail::spinlock, a permit count and an intrusive doubly linked FIFO of
// wait nodes that live on the waiters' stacks. Waiters park with
// detail::park, the mechanism counting_semaphore's queue uses too: a fiber
// suspends (its worker runs other fibers), an OS thread sleeps on a futex;
// a release wakes the oldest waiter with handoff::dispatch, as
// counting_semaphore's release does. So the two semaphores differ only in
// the queue: FAA-indexed cells (CQS) against a list under a lock — the
// comparison of the CQS paper's §6.3, where the lock-based queue is Java's
// AbstractQueuedSynchronizer.
//
//     count_ (guarded by lock_):  permits free; > 0 only while queue_ is empty
//
//     acquire:  lock; count_ > 0: count_ - 1, unlock
//                     else: push_back(self), unlock, park until granted
//     release:  lock; a waiter: pop it, granted, unlock, unpark it
//                     none:     count_ + 1, unlock
//
// Fair (FIFO): a released permit goes to the oldest waiter directly, never
// back to the count while someone waits, so no newcomer overtakes. Every
// operation takes the spinlock, uncontended ones too: one exchange and one
// release store, about what the CQS semaphore's FAA costs; under contention
// the lock serializes acquirers and releasers, which is what the workload
// is there to show.
//
// Not cancellable (no timeout, no stop token): the workload never cancels.
// Bench-local: not part of the library.
//
// Undefined: release() beyond the permits ever acquired; destroying it while
// someone waits.
#pragma once

#include <cstddef>

#include <spindle/runtime/fiber.hpp>
#include <spindle/sync/detail/wait_queue.hpp>
#include <spindle/runtime/handoff.hpp>

namespace spindle::bench {

class spinlock_queue_semaphore {
public:
    explicit spinlock_queue_semaphore(std::ptrdiff_t desired) noexcept : count_(desired) {}
    spinlock_queue_semaphore(const spinlock_queue_semaphore&) = delete;
    spinlock_queue_semaphore& operator=(const spinlock_queue_semaphore&) = delete;

    void acquire() noexcept {
        lock_.lock();
        if (count_ > 0) {
            --count_;
            lock_.unlock();
            return;
        }
        detail::wait_node n;
        n.w.fiber = detail::running_fiber();
        queue_.push_back(&n);
        lock_.unlock();
        // Returns once release() popped us: it handed us its permit
        // (n.granted, written under lock_ before the unpark that wakes us).
        detail::park(&n.w);
    }

    [[nodiscard]] bool try_acquire() noexcept {
        lock_.lock();
        const bool took = count_ > 0;
        if (took) --count_;
        lock_.unlock();
        return took;
    }

    void release(std::ptrdiff_t update = 1) noexcept {
        for (; update > 0; --update) {
            lock_.lock();
            detail::wait_node* n = queue_.pop_front();
            if (n == nullptr) {
                count_ += update;
                lock_.unlock();
                return;
            }
            n->granted = true;
            // Unlock first: the woken waiter needs nothing from lock_. It
            // cannot return (and free n) before this unpark.
            lock_.unlock();
            detail::unpark_with(&n->w, handoff::dispatch);
        }
    }

private:
    detail::spinlock lock_;
    std::ptrdiff_t count_ SPINDLE_GUARDED_BY(lock_);
    detail::wait_list queue_ SPINDLE_GUARDED_BY(lock_);
};

}  // namespace spindle::bench
