// spindle/sync/detail/cv_queue.hpp — the waiter queue steps both condition
// variables share (condition_variable, condition_variable_any): an
// intrusive FIFO of cv_nodes under the condition variable's spinlock. A
// waiter is on it until a notify takes it (on_cv false from then on) or a
// timeout or stop request cancels it; whoever takes it off unparks it (the
// notifier, possibly after moving it onto a mutex queue), so exactly one
// unpark happens.
#pragma once

#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle::detail {

struct cv_node : wait_node {
    bool on_cv = false;      // guarded by the condition variable's spinlock
    bool cancelled = false;  // set under it by a timeout or stop; read after unpark
};

// A timeout or stop request for `n`: if no notify has taken it yet, take it
// off `queue`, mark it cancelled and unpark it; else leave it to the notify.
inline void cancel_queued(spinlock& lock, wait_list& queue, cv_node* n) noexcept {
    lock.lock();
    if (!n->on_cv) {  // notified already (or never queued): the notification wins
        lock.unlock();
        return;
    }
    queue.remove(n);
    n->on_cv = false;
    n->cancelled = true;
    lock.unlock();
    unpark(&n->w);
}

// A notify: takes the oldest waiter, or all of them, off `queue`, oldest
// first. From here on a timeout or stop request leaves them alone.
inline wait_list take_notified(spinlock& lock, wait_list& queue, bool all) noexcept {
    wait_list taken;
    lock.lock();
    while (wait_node* wn = queue.pop_front()) {
        static_cast<cv_node*>(wn)->on_cv = false;
        taken.push_back(wn);
        if (!all) break;
    }
    lock.unlock();
    return taken;
}

}  // namespace spindle::detail
