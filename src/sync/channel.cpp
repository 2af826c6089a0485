// spindle::channel slow paths (include/spindle/sync/channel.hpp).
#include <spindle/sync/channel.hpp>

#include <limits>
#include <new>

#include <spindle/arch/context.hpp>
#include <spindle/arch/fatal.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

namespace {

// The element buffer: capacity slots of ops.size bytes, or null (capacity 0,
// or a capacity the constructor then rejects).
std::byte* allocate_storage(std::size_t capacity, std::size_t max_capacity, const channel_elem_ops& ops) {
    if (capacity == 0 || capacity > max_capacity) return nullptr;
    if (capacity > std::numeric_limits<std::size_t>::max() / ops.size) throw std::bad_array_new_length();
    return static_cast<std::byte*>(::operator new(capacity * ops.size, std::align_val_t{ops.align}));
}

}  // namespace

channel_core::channel_core(std::size_t capacity, const channel_elem_ops& ops, handoff policy)
    : capacity_(capacity),
      ops_(&ops),
      storage_(allocate_storage(capacity, max_capacity, ops)),
      policy_(policy),
      receivers_(cqs_cancellation::smart, cqs_resumption::async,
                 cqs_hooks<unit>{&on_cancellation, &complete_refused_resume, &return_value, this}) {
    if (capacity > max_capacity) {
#if SPINDLE_DEBUG_CHECKS
        fatal("spindle::channel %p: capacity %zu above max_capacity() = %zu", static_cast<void*>(this), capacity,
              max_capacity);
#else
        throw std::length_error("spindle::channel: capacity above max_capacity()");
#endif
    }
}

channel_core::~channel_core() {
    lock_.lock();
    const bool closed = closed_;
    std::int64_t senders = 0;
    for (wait_node* n = sendq_.front(); n != nullptr; n = n->next) ++senders;
    lock_.unlock();
    // A caller woken by close() may destroy the channel while close() still
    // wakes others. acquire pairs with close()'s final release store: after
    // it, close() touches nothing.
    if (closed) {
        while (!close_done_.load(std::memory_order_acquire)) this_fiber::yield();
    }
    // A receiver may destroy it while the send that published its element
    // still wakes a receiver or settles (publish_work). Whoever destroys it
    // took lock_ after that send's publish (directly, or through the
    // operation that completed its own), so it sees the send counted.
    // acquire pairs with publish_work()'s final release decrement.
    while (busy_.load(std::memory_order_acquire) != 0) this_fiber::yield();
#if SPINDLE_DEBUG_CHECKS
    // relaxed (both): quiescent by contract; a waiter still counted is the
    // misuse. A receiver is counted in items_ before it reaches the queue:
    // take the larger of the two counts.
    std::int64_t receivers = debug_receivers_.load(std::memory_order_relaxed);
    const std::int64_t c = count_of(items_.load(std::memory_order_relaxed));
    if (!closed && -c > receivers) receivers = -c;
    if (receivers + senders != 0)
        fatal("spindle::channel %p destroyed with %lld waiters", static_cast<void*>(this),
              static_cast<long long>(receivers + senders));
#else
    (void)senders;
#endif
    lock_.lock();
    for (; size_ != 0; --size_) {
        ops_->destroy(slot(head_));
        if (++head_ == capacity_) head_ = 0;
    }
    lock_.unlock();
    if (storage_ != nullptr) ::operator delete(storage_, std::align_val_t{ops_->align});
}

void channel_core::bad_state(const char* what) const noexcept {
    fatal("spindle::channel %p: %s", static_cast<const void*>(this), what);
}

std::size_t channel_core::size() const noexcept {
    lock_.lock();
    const std::size_t n = size_;
    lock_.unlock();
    return n;
}

// ---- permits --------------------------------------------------------------

void channel_core::publish_work(std::int64_t w) noexcept {
    SPINDLE_RACE_POINT(this, race_point::channel_publish_matched);
    if (w < -1) wake_receiver();  // count < 0: receivers counted
    if (has_pending(w)) settle();
    // (busy): b -> b - 1, our last access to the channel. release pairs with
    // the destructor's acquire load.
    busy_.fetch_sub(1, std::memory_order_release);
}

void channel_core::wake_receiver() noexcept {
    // The oldest counted receiver gets the permit just published (or, if it
    // has not reached its cell yet, finds it there: async resumption).
    if (!receivers_.resume(unit{}, policy_)) bad_state("a smart asynchronous resume failed");
}

// Takes one free permit back, for a sender withdrawing its element.
bool channel_core::try_take_permit_locked() noexcept {
    // relaxed: the CAS re-reads it.
    std::int64_t w = items_.load(std::memory_order_relaxed);
    while (!is_closed(w) && w > 0) {
        // (items): w -> w - permit, only while a permit is free. relaxed: the
        // withdrawing sender reads nothing another thread published (its
        // element is its own), and the RMW keeps the release sequence.
        if (items_.compare_exchange_weak(w, w - permit, std::memory_order_relaxed, std::memory_order_relaxed))
            return true;
    }
    return false;
}

// A canceller's decision, in one step on items_: take a free permit back
// (true), or -- none free -- make sure the pending flag is set (false), so
// that the next publish or refusal sees it in the very value its FAA
// returns. One word: no permit published after our look can slip by unseen.
bool channel_core::take_permit_or_flag_locked() noexcept {
    // relaxed (load and CAS): as in try_take_permit_locked.
    std::int64_t w = items_.load(std::memory_order_relaxed);
    for (;;) {
        if (!is_closed(w) && w > 0) {
            // (items): w -> w - permit.
            if (items_.compare_exchange_weak(w, w - permit, std::memory_order_relaxed, std::memory_order_relaxed))
                return true;
        } else if (has_pending(w)) {
            return false;  // set already (another request is pending)
        } else {
            // (items, pending): (w, 0) -> (w - 1, 1).
            if (items_.compare_exchange_weak(w, w - pending_flag, std::memory_order_relaxed,
                                             std::memory_order_relaxed))
                return false;
        }
    }
}

// ---- receive ----------------------------------------------------------------

channel_status channel_core::receive_slow(void* result, std::chrono::steady_clock::time_point deadline,
                                          std::stop_token* st, channel_status on_cancel) noexcept {
    // Our decrement left no free permit: we are counted as a waiter.
#if SPINDLE_DEBUG_CHECKS
    debug_receivers_.fetch_add(1, std::memory_order_relaxed);
#endif
    const auto r = receivers_.suspend(deadline, st);
#if SPINDLE_DEBUG_CHECKS
    debug_receivers_.fetch_sub(1, std::memory_order_relaxed);  // a debug count; orders nothing
#endif
    switch (r.status) {
    case cqs_status::resumed:
        // A send published a permit for us (its push under lock_, its FAA,
        // then its resume: the cqs orders the resume before our wake-up), or
        // close() woke us: take() drains what is left.
        return take(result);
    case cqs_status::cancelled:
        // on_cancellation gave our decrement back (and, if a send had counted
        // us already, left its permit in the word).
        return on_cancel;
    case cqs_status::broken:
        break;
    }
    bad_state("a suspension broke in asynchronous mode");
}

// take() with lock_ held, when the ring is empty or a sender waits.
channel_status channel_core::take_slow(void* result) noexcept {
    channel_sender* granted = nullptr;
    if (size_ != 0) {
        pop_locked(result);
        // A sender waits (so the ring was full): its element takes the room
        // we just made, at the tail, in its turn. Its send is done.
        if (wait_node* n = sendq_.pop_front()) {
            granted = static_cast<channel_sender*>(n->owner);
            push_locked(granted->elem);
        }
    } else if (wait_node* n = sendq_.pop_front()) {
        // Capacity 0: take the element straight from the oldest sender.
        granted = static_cast<channel_sender*>(n->owner);
        ops_->take(result, granted->elem);
    } else {
        // Nothing stored: our permit came from a word closed meanwhile (a
        // drain took the element, or close() withdrew its sender).
        if (!closed_) bad_state("a receiver holds a permit but storage is empty");
        lock_.unlock();
        return channel_status::closed;
    }
    if (granted->pending) pend_unlink_locked(granted);  // its cancel came too late
    granted->outcome = channel_status::ok;
    const handoff policy = policy_;
    lock_.unlock();  // release: the move above happens before the sender returns
    finish_sender(granted, policy);
    return channel_status::ok;
}

// ---- send -------------------------------------------------------------------

channel_status channel_core::send_slow(void* elem, std::chrono::steady_clock::time_point deadline,
                                       std::stop_token* st, channel_status on_cancel) noexcept {
    channel_sender s;
    s.node.w.fiber = running_fiber();
    s.node.cancel = &cancel_send;
    s.node.owner = &s;
    s.elem = elem;
    s.ch = this;
    s.on_cancel = on_cancel;
    // Armed before we queue: a timeout or stop request that fires early sets
    // cancel_requested, which we check under lock_ before queueing.
    wait_guard guard(s.node, deadline, st);
    lock_.lock();
    if (closed_) {
        lock_.unlock();
        return channel_status::closed;
    }
    if (size_ < capacity_) {  // room appeared meanwhile
        // Our timer or stop callback is armed and may fire until the guard
        // goes. Once our element is published a receiver may take it and
        // destroy the channel, so no canceller may reach lock_ after that:
        // close our claim first, as finish_sender does. Lost: a canceller
        // holds the claim and is on its way to lock_; then the send ends as
        // cancelled, its element never published, once the canceller is
        // done with the channel.
        if (!close_claim(&s)) {
            lock_.unlock();
            await_canceller(&s);
            return on_cancel;
        }
        push_locked(elem);
        const std::int64_t w = publish_locked();
        lock_.unlock();
        if (has_work(w)) publish_work(w);
        return channel_status::ok;
    }
    // relaxed: lock_, which cancel_send takes too, orders it with the store
    // in request_cancel.
    if (s.node.cancel_requested.load(std::memory_order_relaxed)) {
        lock_.unlock();
        return on_cancel;
    }
    sendq_.push_back(&s.node);
    const std::int64_t w = publish_locked();  // our element is in storage now: its permit
    lock_.unlock();
    if (has_work(w)) publish_work(w);
    return wait_as_sender(s, &guard);
}

channel_status channel_core::try_send(void* elem) noexcept {
    lock_.lock();
    if (closed_) {
        lock_.unlock();
        return channel_status::closed;
    }
    if (size_ < capacity_) {
        push_locked(elem);
        const std::int64_t w = publish_locked();
        lock_.unlock();
        if (has_work(w)) publish_work(w);
        return channel_status::ok;
    }
    // No room. Only a waiting receiver can take it now. relaxed: a hint; if
    // the receiver is gone by the time we publish, settle() withdraws us.
    if (items_.load(std::memory_order_relaxed) >= -1) {  // count >= 0: none counted
        lock_.unlock();
        return channel_status::full;
    }
    // Queue as a sender whose cancel is pending from the start: our element
    // goes to the receiver our permit wakes, or comes back (full) as soon as
    // a permit is free -- which our own publish checks, the flag being set.
    channel_sender s;
    s.node.w.fiber = running_fiber();
    s.node.owner = &s;
    s.elem = elem;
    s.ch = this;
    s.try_mode = true;
    sendq_.push_back(&s.node);
    if (pend_head_ == nullptr) {
        // (items, pending): (w, 0) -> (w - 1, 1). relaxed: lock_ orders the
        // flag with the list; publishers read it in their FAA's value.
        items_.fetch_sub(pending_flag, std::memory_order_relaxed);
    }
    pend_link_locked(&s);
    const std::int64_t w = publish_locked();  // has work: our own flag is set
    lock_.unlock();
    if (has_work(w)) publish_work(w);
    return wait_as_sender(s, nullptr);
}

// Waits until a receiver took our element (ok), a cancel or settle()
// withdrew it, or close() did (closed). The outcome was written under lock_
// before the unpark that ends the wait. Touches nothing of the channel.
channel_status channel_core::wait_as_sender(channel_sender& s, wait_guard* guard) noexcept {
    if (guard != nullptr) guard->wait();
    else park(&s.node.w);
    return s.outcome;
}

// Ends a queued sender's wait (we took it out of sendq_ under lock_, which
// is released now): close its claim, or wait for the canceller that won it
// to finish with the channel, then wake it. After this the sender may
// return -- and its caller, or ours, destroy the channel.
void channel_core::finish_sender(channel_sender* s, handoff policy) noexcept {
    if (!close_claim(s)) await_canceller(s);
    unpark_with(&s->node.w, policy);
}

// claim: waiting -> done. acq_rel pairs with the canceller's CAS
// (cancel_send): exactly one wins. True if we did.
bool channel_core::close_claim(channel_sender* s) noexcept {
    std::uint32_t c = channel_claim::waiting;
    return s->claim.compare_exchange_strong(c, channel_claim::done, std::memory_order_acq_rel,
                                            std::memory_order_acquire);
}

// The canceller won the claim: wait until it is done with the channel.
// acquire pairs with its release store of cancel_done, after its last
// touch of the channel.
void channel_core::await_canceller(channel_sender* s) noexcept {
    unsigned spins = 0;
    while (s->claim.load(std::memory_order_acquire) != channel_claim::cancel_done) backoff(spins);
}

void channel_core::pend_link_locked(channel_sender* s) noexcept {
    s->pending = true;
    s->pend_next = nullptr;
    s->pend_prev = pend_tail_;
    if (pend_tail_ != nullptr) pend_tail_->pend_next = s;
    else pend_head_ = s;
    pend_tail_ = s;
}

void channel_core::pend_unlink_locked(channel_sender* s) noexcept {
    if (s->pend_prev != nullptr) s->pend_prev->pend_next = s->pend_next;
    else pend_head_ = s->pend_next;
    if (s->pend_next != nullptr) s->pend_next->pend_prev = s->pend_prev;
    else pend_tail_ = s->pend_prev;
    s->pend_prev = s->pend_next = nullptr;
    s->pending = false;
    if (pend_head_ == nullptr) {
        // (items, pending): (w, 1) -> (w + 1, 0). relaxed: as where it is set.
        items_.fetch_add(pending_flag, std::memory_order_relaxed);
    }
}

// Takes a queued sender's element back out of storage (its permit was
// taken back, or the channel closed).
void channel_core::withdraw_locked(channel_sender* s, channel_status outcome) noexcept {
    sendq_.remove(&s->node);
    if (s->pending) pend_unlink_locked(s);
    s->outcome = outcome;
}

// wait_node::cancel for a timeout or stop request of a sender (possibly
// before it queued: then it sees cancel_requested under lock_ itself).
void channel_core::cancel_send(wait_node* n) noexcept {
    auto* s = static_cast<channel_sender*>(n->owner);
    std::uint32_t c = channel_claim::waiting;
    // claim: waiting -> cancelling. Lost: its send is completing (or another
    // request came first); the channel may be gone, do not touch it.
    if (!s->claim.compare_exchange_strong(c, channel_claim::cancelling, std::memory_order_acq_rel,
                                          std::memory_order_relaxed))
        return;
    channel_core* ch = s->ch;
    bool withdrawn = false;
    ch->lock_.lock();
    if (n->queued) {
        if (ch->take_permit_or_flag_locked()) {
            ch->withdraw_locked(s, s->on_cancel);
            withdrawn = true;
        } else {
            // Every element in storage is promised to a receiver already
            // woken: ours will be taken and the send completes with ok --
            // unless a permit comes back first, whose FAA then sees the flag
            // and settles us.
            ch->pend_link_locked(s);
        }
    }
    ch->lock_.unlock();
    // release: our last touch of the channel happens before whoever
    // completes this sender unparks it (finish_sender's acquire).
    s->claim.store(channel_claim::cancel_done, std::memory_order_release);
    if (withdrawn) unpark(&n->w);  // completed by us: the claim is ours
}

// A permit was published or put back while cancels were pending: withdraw
// as many pending senders (oldest first) as there are free permits.
void channel_core::settle() noexcept {
    channel_sender* wake = nullptr;
    lock_.lock();
    while (pend_head_ != nullptr && try_take_permit_locked()) {
        channel_sender* s = pend_head_;
        withdraw_locked(s, s->try_mode ? channel_status::full : s->on_cancel);
        s->wake_next = wake;
        wake = s;
    }
    lock_.unlock();
    while (wake != nullptr) {
        channel_sender* next = wake->wake_next;  // read before the wake: it may return at once
        finish_sender(wake, handoff::dispatch);
        wake = next;
    }
}

// ---- receivers' cancellation (smart, the paper's Listing 5) ----------------

// (items): w -> w + permit. count < 0 before: other receivers are still
// counted; our cell becomes CANCELLED and resumes skip it. count >= 0: a
// send counted us and its resume is on the way (or close() did): REFUSE it;
// our increment put its permit back in the word, where the next receiver --
// or a pending cancel, flagged in the same word -- finds it. relaxed: we
// publish nothing, and the RMW keeps items_'s release sequence unbroken.
// Runs in the canceller (timer or request_stop() caller) or in the receiver:
// it must not block, and does not (settle() holds lock_ for a few steps and
// wakes with dispatch).
bool channel_core::on_cancellation(void* self, std::uint64_t) noexcept {
    auto* ch = static_cast<channel_core*>(self);
    const std::int64_t w = ch->items_.fetch_add(permit, std::memory_order_relaxed);
    if (is_closed(w)) return false;
    if (w < -1) return true;  // count < 0
    if (has_pending(w)) ch->settle();
    return false;
}

// The refused resume's permit is in the word already (on_cancellation's
// increment): nothing to do. Giving it back again would count it twice.
void channel_core::complete_refused_resume(void*, unit) noexcept {}

// Only smart + sync queues return values; the receivers' queue is async.
void channel_core::return_value(void* self, unit) noexcept {
    static_cast<channel_core*>(self)->bad_state("a value came back from an asynchronous queue");
}

// ---- close ------------------------------------------------------------------

bool channel_core::close() noexcept {
    channel_sender* wake = nullptr;
    lock_.lock();
    if (closed_) {
        lock_.unlock();
        return false;
    }
    closed_ = true;
    // Every queued sender gets closed and keeps its element. Their permits
    // stay in the word, which no longer counts: receivers drain by take().
    while (wait_node* n = sendq_.pop_front()) {
        auto* s = static_cast<channel_sender*>(n->owner);
        if (s->pending) pend_unlink_locked(s);
        s->outcome = channel_status::closed;
        s->wake_next = wake;
        wake = s;
    }
    lock_.unlock();
    // (items): w -> w + 2^62. acq_rel: release for whoever sees the closed
    // word (closed(), a receiver's acquire FAA); acquire so that the resumes
    // below carry what earlier sends published.
    const std::int64_t c = count_of(items_.fetch_add(closed_offset, std::memory_order_acq_rel));
    // -c receivers are counted: exactly -c resumes. Each lands on a live
    // receiver (it take()s what is left), on a cell a receiver has yet to
    // reach (left there), or on one cancelled after this FAA (refused).
    // Dispatch: close() wakes many and should not give its worker away.
    for (std::int64_t k = 0; k < -c; ++k) {
        if (!receivers_.resume(unit{}, handoff::dispatch)) bad_state("a smart asynchronous resume failed");
    }
    while (wake != nullptr) {
        channel_sender* next = wake->wake_next;  // read before the wake: it may return at once
        finish_sender(wake, handoff::dispatch);
        wake = next;
    }
    // Last access to *this: see the destructor.
    close_done_.store(true, std::memory_order_release);
    return true;
}

}  // namespace spindle::detail
