// spindle::condition_variable_any (include/spindle/sync/condition_variable_any.hpp).
//
// A waiter's node goes through (cv = this condition variable's qlock_):
//
//   [queued] --notify (cv)--> [taken], unparked: notified
//       +--timeout/stop (cv)--> [cancelled], unparked
//
// `on_cv` (guarded by cv) says whether the node is still on the queue; a
// timeout or stop request acts only then. Whoever takes the node off the
// queue unparks it, so exactly one unpark happens.
#include <spindle/sync/condition_variable_any.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>
#include <spindle/sync/detail/cv_queue.hpp>

namespace spindle {

using detail::fatal;

struct condition_variable_any_access {
    // A timeout or stop request (wait_node::cancel).
    static void cancel(detail::wait_node* wn) noexcept {
        auto* n = static_cast<detail::cv_node*>(wn);
        auto* cv = static_cast<condition_variable_any*>(n->owner);
        detail::cancel_queued(cv->qlock_, cv->queue_, n);
    }
};

condition_variable_any::~condition_variable_any() {
#if SPINDLE_DEBUG_CHECKS
    if (!queue_.empty())
        fatal("spindle::condition_variable_any %p destroyed while fibers or threads wait on it",
              static_cast<void*>(this));
#endif
}

bool condition_variable_any::park_released(std::chrono::steady_clock::time_point deadline, std::stop_token* st,
                                           void (*unlock)(void*) noexcept, void* lock) {
    detail::cv_node n;
    n.w.fiber = detail::running_fiber();
    n.cancel = &condition_variable_any_access::cancel;
    n.owner = this;
    {
        detail::wait_guard guard(n, deadline, st);
        qlock_.lock();
        // relaxed: qlock_, which cancel takes too, orders it with the store
        // in request_cancel.
        if (n.cancel_requested.load(std::memory_order_relaxed)) {
            // Timed out or stopped before we queued.
            qlock_.unlock();
            unlock(lock);
            return false;
        }
        queue_.push_back(&n);
        n.on_cv = true;
        qlock_.unlock();
        // Queued before the lock goes: a notify that follows finds us.
        unlock(lock);
        guard.wait();
        // ~guard: the timer and stop callback are done with n after this.
    }
    // cancelled was written under qlock_ before the unpark that woke us.
    return !n.cancelled;
}

void condition_variable_any::notify(bool all) noexcept {
    detail::wait_list taken = detail::take_notified(qlock_, queue_, all);
    // Dispatch: the woken waiter must take the lock, which the notifier
    // usually still holds; running it now would only block it again.
    while (detail::wait_node* wn = taken.pop_front()) detail::unpark(&wn->w);
}

}  // namespace spindle
