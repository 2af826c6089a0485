// spindle::condition_variable (include/spindle/sync/condition_variable.hpp).
//
// A waiter's node goes through (cv = this condition variable's qlock_,
// m = the mutex's qlock_):
//
//   wait:   [on cv queue] --notify (cv, then m)--> [on mutex queue] --unlock--> granted, unparked
//                 |                 \--mutex free--> granted now, unparked
//                 +--timeout/stop (cv)--> [cancelled], unparked; relocks itself
//
// `on_cv` (guarded by cv) says whether the node is still on our queue; a
// timeout or stop request acts only then. Whoever takes the node off the
// cv queue decides its fate, so exactly one unpark happens.
#include <spindle/sync/condition_variable.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>
#include <spindle/sync/detail/cv_queue.hpp>

namespace spindle {

using detail::fatal;

namespace {
struct cv_node : detail::cv_node {
    mutex* mtx = nullptr;  // the mutex the waiter released
};
}  // namespace

struct condition_variable_access {
    // A timeout or stop request (wait_node::cancel).
    static void cancel(detail::wait_node* wn) noexcept {
        auto* n = static_cast<cv_node*>(wn);
        auto* cv = static_cast<condition_variable*>(n->owner);
        detail::cancel_queued(cv->qlock_, cv->queue_, n);
    }
};

condition_variable::~condition_variable() {
#if SPINDLE_DEBUG_CHECKS
    if (!queue_.empty())
        fatal("spindle::condition_variable %p destroyed while fibers or threads wait on it",
              static_cast<void*>(this));
#endif
}

bool condition_variable::wait_impl(std::unique_lock<mutex>& lk, std::chrono::steady_clock::time_point deadline,
                                   std::stop_token* st) {
    mutex* m = lk.mutex();
#if SPINDLE_DEBUG_CHECKS
    if (m == nullptr || !lk.owns_lock())
        fatal("spindle::condition_variable %p: wait() with a lock that does not own its mutex",
              static_cast<void*>(this));
    m->check_owner();
#endif
    cv_node n;
    n.w.fiber = detail::running_fiber();
    n.cancel = &condition_variable_access::cancel;
    n.owner = this;
    n.mtx = m;
    {
        detail::wait_guard guard(n, deadline, st);
        qlock_.lock();
#if SPINDLE_DEBUG_CHECKS
        if (!queue_.empty() && waiters_mutex_ != m)
            fatal("spindle::condition_variable %p: waits with two different mutexes (%p and %p) at once",
                  static_cast<void*>(this), static_cast<void*>(waiters_mutex_), static_cast<void*>(m));
        waiters_mutex_ = m;
#endif
        // relaxed: qlock_, which cancel takes too, orders it with the store in request_cancel.
        if (n.cancel_requested.load(std::memory_order_relaxed)) {
            // Timed out or stopped before we queued: we still hold m.
            qlock_.unlock();
            return false;
        }
        queue_.push_back(&n);
        n.on_cv = true;
        qlock_.unlock();
        // From here a notify may move us to m's queue, even before we let go.
        if (n.w.fiber != nullptr) {
            m->unlock_and_park(n);
        } else {
            // A thread: plain unlock (if a notify queued us first on the
            // mutex, the unlock unparks us), then wait with the deadline.
            m->unlock();
            guard.wait();
        }
        // ~guard: the timer and stop callback are done with n after this.
    }
    // cancelled was written under qlock_ before the unpark that woke us; a
    // notified waiter was woken by the mutex handing itself over.
    if (n.cancelled) {
        m->lock();  // uncancellable: every wait returns holding the mutex
        return false;
    }
    m->note_owner();
    return true;
}

void condition_variable::notify(bool all) noexcept {
    detail::wait_list taken = detail::take_notified(qlock_, queue_, all);
    if (taken.empty()) return;

    // Morph: each taken waiter becomes a waiter of its mutex (one mutex for
    // all of them, unless the caller broke the contract; each node names
    // its own, so even then nothing is corrupted), except that a waiter
    // finding its mutex free gets it outright and runs now. The mutexes
    // live: their waiters are blocked on them, and only we can wake them.
    detail::wait_list run_now;
    mutex* held = nullptr;  // whose qlock_ we hold
    while (detail::wait_node* wn = taken.pop_front()) {
        mutex* m = static_cast<cv_node*>(wn)->mtx;
        if (m != held) {
            if (held != nullptr) held->qlock_.unlock();
            held = m;
            m->qlock_.lock();
        }
        // Once one waiter took it, the mutex stays held (that waiter has not
        // run yet): the others see it held and are queued behind it.
        if (mutex::take_or_mark(m->state_)) {
            wn->granted = true;
            run_now.push_back(wn);
        } else {
            m->queue_.push_back(wn);
        }
    }
    held->qlock_.unlock();
    while (detail::wait_node* wn = run_now.pop_front()) {
        mutex* m = static_cast<cv_node*>(wn)->mtx;
        detail::unpark_with(&wn->w, m->policy_);
    }
}

}  // namespace spindle
