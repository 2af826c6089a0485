// spindle/locks/detail/node_queue_lock.hpp — a queue lock whose unlock needs
// the holder's node (MCS, CLH), made Lockable: the lock keeps that node.
//
//     spindle::basic_mcs_lock<Wait> = node_queue_lock<mcs_queue<Wait>>
//     spindle::basic_clh_lock<Wait> = node_queue_lock<clh_queue<Wait>>
//
// Queue: the algorithm -- `tail_`, lock() returning the caller's node,
// try_lock() returning it or null, unlock(node); no TSan annotations (made
// here). The holder's node is stored after the queue let us in and read by
// our own unlock (the Hemlock paper, Table 1: the second word of MCS/CLH).
//
//     +-------------------------+-------------------------+
//     | queue: tail (node*)     | holder (node*)          |
//     +-------------------------+-------------------------+
#pragma once

#include <atomic>

#include <spindle/arch/config.hpp>
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/detail/queue_node.hpp>

namespace spindle::detail {

template <class Queue>
class SPINDLE_CAPABILITY("mutex") node_queue_lock {
public:
    static constexpr const char* name = Queue::name;
    static constexpr bool is_fifo = true;
    static constexpr bool parks = Queue::parks;

    constexpr node_queue_lock() noexcept = default;
    node_queue_lock(const node_queue_lock&) = delete;
    node_queue_lock& operator=(const node_queue_lock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        annotate::pre_lock(this);
        queue_node* n = queue_.lock();
        // (holder): 0 -> n. relaxed: read by our own unlock, after the
        // queue's acquire let us in.
        holder_.store(n, std::memory_order_relaxed);
        annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        annotate::pre_try_lock(this);
        queue_node* n = queue_.try_lock();
        if (n != nullptr) holder_.store(n, std::memory_order_relaxed);  // relaxed: as in lock()
        annotate::post_try_lock(this, n != nullptr);
        return n != nullptr;
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        annotate::pre_unlock(this);
        // relaxed: we wrote it in lock() (the holder's own earlier store).
        queue_node* n = holder_.load(std::memory_order_relaxed);
        if (SPINDLE_DEBUG_CHECKS && n == nullptr) misuse();
        // (holder): n -> 0. relaxed: the release in queue_.unlock() orders
        // it before the next holder's store.
        holder_.store(nullptr, std::memory_order_relaxed);
        queue_.unlock(n);
        annotate::post_unlock(this);
    }

private:
    friend struct lock_probe;
    using annotate = tsan_lock_annotations;

    [[noreturn]] SPINDLE_COLD void misuse() const noexcept {
        lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    Queue queue_;                               // the algorithm; its tail null: free
    std::atomic<queue_node*> holder_{nullptr};  // the holder's node
};

}  // namespace spindle::detail
