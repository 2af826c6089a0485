// spindle/sync/detail/wait_queue.hpp — the waiter queue behind the sync
// primitives: a test-and-set spinlock and an intrusive FIFO of wait nodes.
//
// This is the CES paper's final design (§5.1). It is the one internal
// interface the primitives use to queue, hand over and cancel, so the CQS
// queue can replace it locally.
//
// Wait-node life cycle (all transitions under the primitive's spinlock,
// except `cancel_requested`):
//
//     [new] --enqueue--> [queued] --dequeue by a waker--> [granted]
//        ^                  |
//        |                  +--cancel (timeout / stop)--> [cancelled]
//        |
//     cancel_requested set before enqueue: the waiter sees it under the
//     spinlock and does not enqueue (a timeout or stop that fired early is
//     never lost).
//
// Whoever takes a node out of the queue (waker or canceller) unparks it,
// exactly once. A node lives on its waiter's stack; the waiter returns only
// after it was unparked and every timer or stop callback that could touch
// the node has finished.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <type_traits>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/detail/timer.hpp>
#include <spindle/runtime/detail/park.hpp>
#include <spindle/sync/detail/race_point.hpp>

namespace spindle::detail {

// Test-and-test-and-set spinlock for short internal critical sections.
//
//   locked_: false free | true held
//
// exchange(true, acquire) takes it, store(false, release) frees it: the
// release pairs with the next taker's acquire.
class SPINDLE_CAPABILITY("spinlock") spinlock {
public:
    constexpr spinlock() noexcept = default;
    void lock() noexcept SPINDLE_ACQUIRE() {
        if (locked_.exchange(true, std::memory_order_acquire)) [[unlikely]]
            lock_contended();  // returns holding it
    }
    bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
    }
    void unlock() noexcept SPINDLE_RELEASE() { locked_.store(false, std::memory_order_release); }

private:
    SPINDLE_NOINLINE void lock_contended() noexcept;  // spins on a plain load, backs off
    std::atomic<bool> locked_{false};
};

struct wait_node;
using cancel_fn = void (*)(wait_node*) noexcept;

// One waiter in one primitive's queue.
struct wait_node {
    waiter w;                        // who to wake, and how (fiber or thread)
    wait_node* next = nullptr;       // queue links, guarded by the primitive's spinlock
    wait_node* prev = nullptr;
    bool queued = false;             // guarded by the primitive's spinlock
    bool granted = false;            // set by the waker under the spinlock, read after unpark
    // Set by a timeout or stop request before it looks for the node in the
    // queue. The spinlock orders it with the waiter's check before enqueueing.
    std::atomic<bool> cancel_requested{false};
    // How a timeout or stop request takes this node out of its queue.
    cancel_fn cancel = nullptr;
    void* owner = nullptr;           // the primitive, for `cancel`
};

// Intrusive FIFO. Not synchronized: callers hold the primitive's spinlock.
class wait_list {
public:
    constexpr wait_list() noexcept = default;
    [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
    [[nodiscard]] wait_node* front() const noexcept { return head_; }
    void push_back(wait_node* n) noexcept {
        n->next = nullptr;
        n->prev = tail_;
        if (tail_ != nullptr) tail_->next = n; else head_ = n;
        tail_ = n;
        n->queued = true;
    }
    wait_node* pop_front() noexcept {
        wait_node* n = head_;
        if (n != nullptr) remove(n);
        return n;
    }
    void remove(wait_node* n) noexcept {
        if (n->prev != nullptr) n->prev->next = n->next; else head_ = n->next;
        if (n->next != nullptr) n->next->prev = n->prev; else tail_ = n->prev;
        n->next = n->prev = nullptr;
        n->queued = false;
    }

private:
    wait_node* head_ = nullptr;
    wait_node* tail_ = nullptr;
};

// Deadlines are steady_clock time points; time_point::max() means none.
inline constexpr std::chrono::steady_clock::time_point no_deadline = std::chrono::steady_clock::time_point::max();

template <class Clock, class Duration>
std::chrono::steady_clock::time_point to_steady_deadline(const std::chrono::time_point<Clock, Duration>& t) {
    if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>) {
        return std::chrono::time_point_cast<std::chrono::steady_clock::duration>(t);
    } else {
        // Other clocks: convert the remaining time once (as libstdc++ does).
        return std::chrono::steady_clock::now() +
               std::chrono::ceil<std::chrono::steady_clock::duration>(t - Clock::now());
    }
}

// Identifies the caller for debug ownership checks: the running fiber, or
// this thread.
const void* caller_identity() noexcept;

// A timeout or stop request for `n`: mark it, then let its primitive take it
// out of the queue (and unpark it) if it is there.
void request_cancel(wait_node* n) noexcept;

// One wait on one node, with its optional deadline and stop token.
//
//     wait_node n{...};
//     wait_guard g(n, deadline, st);     // arm the timer and stop callback
//     { lock; if (n.cancel_requested) give up; else enqueue; unlock; }
//     g.wait();                          // until unparked (granted or cancelled)
//     // ~wait_guard: disarm; returns once neither source can touch n
//
// Arming before the enqueue is what makes an early timeout or stop request
// impossible to lose: it sets cancel_requested, which the enqueue checks
// under the primitive's lock.
class wait_guard {
public:
    wait_guard(wait_node& n, std::chrono::steady_clock::time_point deadline, std::stop_token* st);
    ~wait_guard();
    wait_guard(const wait_guard&) = delete;
    wait_guard& operator=(const wait_guard&) = delete;
    void wait() noexcept;

private:
    struct stop_fn {
        wait_node* n;
        void operator()() const noexcept { request_cancel(n); }
    };
    static void on_timer(void* arg) noexcept { request_cancel(static_cast<wait_node*>(arg)); }

    wait_node& n_;
    std::chrono::steady_clock::time_point deadline_;
    timer_entry timer_;
    bool timer_armed_ = false;
    local_timer* local_ = nullptr;  // the deadline on the worker's own heap, else timer_
    std::optional<std::stop_callback<stop_fn>> stop_;
};

}  // namespace spindle::detail
