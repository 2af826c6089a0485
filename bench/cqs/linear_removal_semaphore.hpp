// bench/cqs/linear_removal_semaphore.hpp — the competitor of the `abort`
// workload: a fair semaphore whose cancelled waiters leave the queue by a
// scan from its head.
//
// What it is. A permit count and a singly linked FIFO of waiter nodes (on
// the waiters' stacks) under one detail::spinlock, the shape of a
// std::list/std::deque queue under a mutex or of Java's
// AbstractQueuedSynchronizer, whose cancellation the CQS paper (§6.5,
// Fig. 9) measured growing linearly with the queue. Removing a cancelled
// node needs its predecessor, and a singly linked queue finds it by walking
// from the head: a waiter that gives up behind Q others pays O(Q) pointer
// chases across Q stacks, inside the lock. (spindle's own wait_list is
// doubly linked and removes in O(1); this one is the linear baseline on
// purpose.)
//
// Waiting is the same as in counting_semaphore's queue: the waiter parks
// with detail::park (a fiber suspends, a thread sleeps on its futex); a
// stop request claims the waiter with a CAS on `claim` and unparks it; a
// release claims the oldest waiter the same way, so exactly one of them
// wins. A stop already requested when acquire() is called claims the waiter
// at once, and park returns without sleeping (the wake-up was already
// delivered): the call then costs enqueue + the cancellation's removal,
// which is the operation the `abort` workload times.
//
//     acquire(st):  lock; count_ > 0: count_ - 1, unlock, true
//                   else push_back(node), unlock;
//                   stop callback: claim waiting -> cancelled, unpark
//                   park; claim == granted: true
//                   cancelled: lock; scan from head_ for node; unlink; unlock; false
//     release():    lock; pop nodes from the head until one is claimed
//                   waiting -> granted (unlock, unpark it); none: count_ + 1
//
// A node a release pops after its stop request won is simply dropped: its
// waiter's scan does not find it (the whole queue is walked, once, in that
// race only).
//
// Bench-local: not part of the library.
//
// Undefined: release() beyond the permits ever acquired; destroying it while
// someone waits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stop_token>

#include <spindle/runtime/fiber.hpp>
#include <spindle/sync/detail/wait_queue.hpp>
#include <spindle/runtime/handoff.hpp>

namespace spindle::bench {

class linear_removal_semaphore {
public:
    explicit linear_removal_semaphore(std::ptrdiff_t desired) noexcept : count_(desired) {}
    linear_removal_semaphore(const linear_removal_semaphore&) = delete;
    linear_removal_semaphore& operator=(const linear_removal_semaphore&) = delete;

    void acquire() noexcept { (void)acquire(std::stop_token{}); }

    // true with a permit; false if stop was requested on `st` first.
    [[nodiscard]] bool acquire(std::stop_token st) noexcept {
        lock_.lock();
        if (count_ > 0) {
            --count_;
            lock_.unlock();
            return true;
        }
        node n;
        n.w.fiber = detail::running_fiber();
        if (tail_ != nullptr) tail_->next = &n; else head_ = &n;
        tail_ = &n;
        lock_.unlock();
        {
            // With stop already requested this runs the claim right here.
            std::stop_callback<stop_fn> on_stop(st, stop_fn{&n});
            detail::park(&n.w);
        }  // the callback has finished (or will never run): n is ours alone
        // acquire pairs with the winner's claim CAS.
        if (n.claim.load(std::memory_order_acquire) == claim_granted) return true;
        lock_.lock();
        unlink(&n);
        lock_.unlock();
        return false;
    }

    void release() noexcept {
        lock_.lock();
        while (node* h = head_) {
            head_ = h->next;
            if (head_ == nullptr) tail_ = nullptr;
            h->next = nullptr;
            std::uint32_t expected = claim_waiting;
            // claim: waiting -> granted. acq_rel pairs with the stop
            // callback's CAS: exactly one wins, and only the winner unparks.
            if (h->claim.compare_exchange_strong(expected, claim_granted, std::memory_order_acq_rel,
                                                 std::memory_order_acquire)) {
                lock_.unlock();  // h cannot leave before our unpark
                detail::unpark_with(&h->w, handoff::dispatch);
                return;
            }
            // Cancelled: its waiter will not find it; drop it and go on.
        }
        ++count_;
        lock_.unlock();
    }

private:
    static constexpr std::uint32_t claim_waiting = 0;
    static constexpr std::uint32_t claim_granted = 1;    // a release handed it a permit
    static constexpr std::uint32_t claim_cancelled = 2;  // a stop request won

    struct node {
        detail::waiter w;
        std::atomic<std::uint32_t> claim{claim_waiting};
        node* next = nullptr;  // guarded by lock_
    };

    struct stop_fn {
        node* n;
        void operator()() const noexcept {
            std::uint32_t expected = claim_waiting;
            // claim: waiting -> cancelled, racing release()'s CAS (see there).
            if (n->claim.compare_exchange_strong(expected, claim_cancelled, std::memory_order_acq_rel,
                                                 std::memory_order_acquire))
                detail::unpark(&n->w);
        }
    };

    // The linear step: find n's predecessor by walking from the head.
    void unlink(node* n) noexcept SPINDLE_REQUIRES(lock_) {
        node* prev = nullptr;
        node* p = head_;
        while (p != nullptr && p != n) {
            prev = p;
            p = p->next;
        }
        if (p == nullptr) return;  // a release popped it after our stop won
        if (prev != nullptr) prev->next = n->next; else head_ = n->next;
        if (tail_ == n) tail_ = prev;
        n->next = nullptr;
    }

    detail::spinlock lock_;
    std::ptrdiff_t count_ SPINDLE_GUARDED_BY(lock_);
    node* head_ SPINDLE_GUARDED_BY(lock_) = nullptr;
    node* tail_ SPINDLE_GUARDED_BY(lock_) = nullptr;
};

}  // namespace spindle::bench
