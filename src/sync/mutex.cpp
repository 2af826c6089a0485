// spindle::mutex slow paths (include/spindle/sync/mutex.hpp).
#include <spindle/sync/mutex.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle {

using detail::fatal;

struct mutex_access {
    // A timeout or stop request for a queued locker (wait_node::cancel).
    static void cancel(detail::wait_node* n) noexcept {
        auto* m = static_cast<mutex*>(n->owner);
        m->qlock_.lock();
        if (!n->queued) {  // granted already, or never queued
            m->qlock_.unlock();
            return;
        }
        m->queue_.remove(n);
        if (m->queue_.empty()) {
            // Still held (by someone else), nobody waits: 2 -> 1, so the
            // holder's unlock takes the fast path.
            m->state_.store(1, std::memory_order_relaxed);
        }
        m->qlock_.unlock();
        detail::unpark(&n->w);
    }
};

mutex::~mutex() {
#if SPINDLE_DEBUG_CHECKS
    std::uint32_t s = state_.load(std::memory_order_relaxed);  // a misuse check, not synchronization
    if (s != 0)
        fatal("spindle::mutex %p destroyed while %s", static_cast<void*>(this),
              s == 1 ? "held" : "held and waited on");
#endif
}

#if SPINDLE_DEBUG_CHECKS
void mutex::check_owner() noexcept {
    // relaxed: a misuse check, not synchronization; a correct caller wrote
    // owner_ itself.
    if (state_.load(std::memory_order_relaxed) == 0)
        fatal("spindle::mutex %p: unlock() of a mutex that is not locked", static_cast<void*>(this));
    if (owner_.load(std::memory_order_relaxed) != detail::caller_identity())
        fatal("spindle::mutex %p: unlock() by a caller that does not hold it", static_cast<void*>(this));
}

void mutex::check_not_owner() noexcept {
    // relaxed: only the holder ever finds itself here (every release forgets
    // the owner first), and it reads its own store.
    if (owner_.load(std::memory_order_relaxed) == detail::caller_identity())
        fatal("spindle::mutex %p: lock() by the caller that holds it (it would wait for itself forever)",
              static_cast<void*>(this));
}
#endif

void mutex::lock_slow() {
    if (!lock_wait(detail::no_deadline, nullptr))
        fatal("spindle::mutex %p: an uncancellable lock() was cancelled", static_cast<void*>(this));
}

bool mutex::take_or_mark(std::atomic<std::uint32_t>& state) noexcept {
    std::uint32_t s = state.load(std::memory_order_relaxed);
    for (;;) {
        if (s == 0) {
            // acquire pairs with the release in unlock()/unlock_slow().
            if (state.compare_exchange_weak(s, 1, std::memory_order_acquire, std::memory_order_relaxed))
                return true;
        } else if (s == 1) {
            // relaxed: qlock_ orders it with the unlocker's slow path; a
            // racing fast-path unlock makes the CAS fail and we retry.
            if (state.compare_exchange_weak(s, 2, std::memory_order_relaxed, std::memory_order_relaxed))
                return false;
        } else {
            return false;
        }
    }
}

bool mutex::lock_wait(std::chrono::steady_clock::time_point deadline, std::stop_token* st) {
    check_not_owner();
    detail::wait_node n;
    n.w.fiber = detail::running_fiber();
    n.cancel = &mutex_access::cancel;
    n.owner = this;
    detail::wait_guard guard(n, deadline, st);
    qlock_.lock();
    if (take_or_mark(state_)) {
        qlock_.unlock();
        return true;
    }
    // relaxed: qlock_, which cancel takes too, orders it with the store in request_cancel.
    if (n.cancel_requested.load(std::memory_order_relaxed)) {
        // Timed out or stopped before we queued. We may have set 2 with
        // nobody queued: put it back.
        if (queue_.empty()) state_.store(1, std::memory_order_relaxed);
        qlock_.unlock();
        return false;
    }
    queue_.push_back(&n);
    qlock_.unlock();
    guard.wait();
    // granted was written under qlock_ before the unpark that woke us.
    return n.granted;
}

// The contended half of an unlock, after its CAS found state 2: hand the
// mutex to the oldest waiter (returned, granted, still parked: its wake-up
// is the caller's), or -- every waiter having cancelled since -- free it
// (null), with a releasing CAS that is our last access to the mutex.
detail::wait_node* mutex::hand_over() noexcept {
    for (;;) {
        SPINDLE_RACE_POINT(this, detail::race_point::mutex_unlock_contended);
        qlock_.lock();
        if (detail::wait_node* n = queue_.pop_front()) {
            // Handoff: the mutex stays held, now by n; nobody can overtake it.
            // (state) 2 -> 1 if n was the last waiter, else 2 stays. relaxed:
            // qlock_ orders it with the slow paths; a fast path reads 1 or 2
            // alike (held).
            if (queue_.empty()) state_.store(1, std::memory_order_relaxed);
            n->granted = true;
            // release: our critical section happens-before n's. n holds the
            // mutex and stays parked until the caller unparks it, so nobody
            // can destroy the mutex before that: the caller may still read
            // policy_.
            qlock_.unlock();
            return n;
        }
        // Every waiter that made it 2 has cancelled meanwhile (cancel: 2 -> 1
        // under qlock_). We still hold the mutex (1), so nobody can take it,
        // let alone destroy it: give qlock_ back first.
        qlock_.unlock();
        std::uint32_t expected = 1;
        // (state) 1 -> 0, as the fast path: the release, and our last access.
        // release pairs with the next locker's acquire. Fails only if a
        // locker queued since we let qlock_ go (1 -> 2): hand it to that one.
        if (state_.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed)) {
            SPINDLE_RACE_POINT(this, detail::race_point::mutex_unlock_freed);
            return nullptr;
        }
    }
}

void mutex::unlock_slow() {
    // n holds the mutex and is parked: policy_ is still ours to read.
    if (detail::wait_node* n = hand_over()) detail::unpark_with(&n->w, policy_);
}

void mutex::unlock_and_park(detail::wait_node& self) {
    forget_owner();  // a release, as unlock()'s
    std::uint32_t expected = 1;
    // (state) 1 -> 0. release pairs with the acquire CAS of the next locker.
    // From here we touch only our own node (the park below).
    if (state_.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed)) {
        detail::park(&self.w);
        return;
    }
    detail::wait_node* n = hand_over();
    if (n == nullptr) {
        detail::park(&self.w);
        return;
    }
    if (n == &self) return;  // a notify queued us here, and we were first: ours again
    // n holds the mutex and is parked: policy_ is still ours to read.
    detail::unpark_and_park(&n->w, policy_, &self.w);
}

}  // namespace spindle
