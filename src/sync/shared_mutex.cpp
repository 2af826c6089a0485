// spindle::shared_mutex slow paths (include/spindle/sync/shared_mutex.hpp).
// The lock word, its transitions (tagged below as in the header's table) and
// the invariants I1-I3 are drawn in the header.
#include <spindle/sync/shared_mutex.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle {

using detail::fatal;
using detail::wait_node;

static_assert(sizeof(void*) != 8 || sizeof(shared_mutex) == (SPINDLE_DEBUG_CHECKS ? 32 : 24),
              "the size the header promises");

namespace {

// A queued reader or writer. Lives on the waiter's stack.
struct rw_node : wait_node {
    bool writer = false;
};

bool is_writer(const wait_node* n) noexcept { return static_cast<const rw_node*>(n)->writer; }

}  // namespace

struct shared_mutex_access {
    // A timeout or stop request for a queued locker (wait_node::cancel).
    // Removing it may unblock the waiters behind it (I3): a cancelled writer
    // at the front of readers while the lock is held shared lets them in,
    // and a last waiter gone reopens the fast paths -- except in H, which
    // its last reader closes (grant(false) leaves it alone). The waker here
    // may be a timer or a stop requester, not a fiber that should give its
    // worker away: everyone is woken with a plain unpark. Our waiter is
    // parked until our unpark, so the shared_mutex outlives this.
    static void cancel(wait_node* n) noexcept {
        auto* m = static_cast<shared_mutex*>(n->owner);
        m->qlock_.lock();
        if (!n->queued) {  // granted already, or never queued
            m->qlock_.unlock();
            return;
        }
        m->queue_.remove(n);
        wait_node* granted = m->grant(false);
        m->qlock_.unlock();
        detail::unpark(&n->w);
        while (granted != nullptr) {
            wait_node* next = granted->next;  // read first: once woken, it may be gone
            detail::unpark(&granted->w);
            granted = next;
        }
    }
};

shared_mutex::~shared_mutex() {
#if SPINDLE_DEBUG_CHECKS
    const std::uint32_t s = state_.load(std::memory_order_relaxed);  // a misuse check, not synchronization
    if (s != 0) {
        const char* how = (s & writer_bit) != 0 ? "held exclusively" : (s & reader_mask) != 0 ? "held shared" : "";
        fatal("spindle::shared_mutex %p destroyed while %s%s%s", static_cast<void*>(this), how,
              (s & queued_bit) != 0 && *how != '\0' ? " and " : "", (s & queued_bit) != 0 ? "waited on" : "");
    }
#endif
}

#if SPINDLE_DEBUG_CHECKS
void shared_mutex::check_unlock() noexcept {
    // relaxed: a misuse check, not synchronization; a correct caller wrote
    // W and owner_ itself.
    if ((state_.load(std::memory_order_relaxed) & writer_bit) == 0)
        fatal("spindle::shared_mutex %p: unlock() of a shared_mutex that is not locked exclusively",
              static_cast<void*>(this));
    if (owner_.load(std::memory_order_relaxed) != detail::caller_identity())
        fatal("spindle::shared_mutex %p: unlock() by a caller that does not hold it", static_cast<void*>(this));
    // Before the release: the next exclusive holder writes its own identity
    // after it; until then nobody is the owner.
    owner_.store(nullptr, std::memory_order_relaxed);
}

void shared_mutex::check_not_owner(bool writer) noexcept {
    // relaxed: only the exclusive holder ever finds itself here (check_unlock
    // forgets the owner before every release), and it reads its own store.
    if (owner_.load(std::memory_order_relaxed) == detail::caller_identity())
        fatal("spindle::shared_mutex %p: %s by the caller that holds it exclusively (it would wait for itself "
              "forever)",
              static_cast<void*>(this), writer ? "lock()" : "lock_shared()");
}

void shared_mutex::check_unlock_shared() noexcept {
    // relaxed: a misuse check; a correct caller's own increment is counted.
    if ((state_.load(std::memory_order_relaxed) & reader_mask) == 0)
        fatal("spindle::shared_mutex %p: unlock_shared() with no readers", static_cast<void*>(this));
}
#endif

void shared_mutex::lock_slow() {
    if (!lock_wait(true, detail::no_deadline, nullptr))
        fatal("spindle::shared_mutex %p: an uncancellable lock() was cancelled", static_cast<void*>(this));
}

void shared_mutex::lock_shared_slow() {
    if (!lock_wait(false, detail::no_deadline, nullptr))
        fatal("spindle::shared_mutex %p: an uncancellable lock_shared() was cancelled", static_cast<void*>(this));
}

bool shared_mutex::take_or_mark(bool writer) noexcept {
    // relaxed: the CASes below re-read it.
    std::uint32_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
        // Q: waiters queued (I2) -- FIFO, behind them -- or H, where the
        // last reader hands the lock over: behind whoever it grants.
        if ((s & queued_bit) != 0) return false;
        // Q clear, so the queue is empty (I2): only the holders decide.
        const bool compatible = writer ? s == 0 : (s & writer_bit) == 0;
        if (compatible) {
            // (0, 0, 0) -> (0, 0, 1) or (r, 0, 0) -> (r+1, 0, 0), as the
            // fast paths; acquire pairs with the release RMW of the unlock
            // that made it compatible.
            if (state_.compare_exchange_weak(s, writer ? writer_bit : s + one_reader, std::memory_order_acquire,
                                             std::memory_order_relaxed))
                return true;
        } else {
            // (r, 0, w) -> (r, 1, w): closes the fast paths, and sends the
            // holders' unlock to the slow path (the writer's CAS fails, the
            // last reader sees Q). relaxed: qlock_ orders it with those slow
            // paths; a racing fast unlock makes the CAS fail and we look
            // again.
            if (state_.compare_exchange_weak(s, s | queued_bit, std::memory_order_relaxed,
                                             std::memory_order_relaxed))
                return false;
        }
    }
}

bool shared_mutex::lock_wait(bool writer, std::chrono::steady_clock::time_point deadline,
                             std::stop_token* st) {
    check_not_owner(writer);
    rw_node n;
    n.writer = writer;
    n.w.fiber = detail::running_fiber();
    n.cancel = &shared_mutex_access::cancel;
    n.owner = this;
    detail::wait_guard guard(n, deadline, st);
    qlock_.lock();
    if (take_or_mark(writer)) {
        qlock_.unlock();
        return true;
    }
    // relaxed: qlock_, which cancel takes too, orders it with the store in
    // request_cancel.
    if (n.cancel_requested.load(std::memory_order_relaxed)) {
        // Timed out or stopped before we queued. We may have set Q with
        // nobody queued: grant() on the empty queue clears it, (r, 1, w) ->
        // (r, 0, w), restoring I2 -- unless the word is H, which its last
        // reader closes. It grants nobody: the queue is empty.
        if (queue_.empty()) (void)grant(false);
        qlock_.unlock();
        return false;
    }
    queue_.push_back(&n);  // at the back: the front stays as it was (I3)
    qlock_.unlock();
    guard.wait();
    // granted was written under qlock_ before the unpark that woke us (the
    // unpark's release pairs with park's acquire).
    return n.granted;
}

wait_node* shared_mutex::grant(bool handover) noexcept {
    wait_node* front = queue_.front();
    // acquire: see the CAS below; the load only starts the loop.
    std::uint32_t s = state_.load(std::memory_order_acquire);
    // Who would be granted: the writer at the front, or the run of readers
    // at the front, up to the next writer (FIFO phases). The queue cannot
    // change under qlock_; the word can, by fetch_subs of readers -- one of
    // which may open H while we look.
    std::uint32_t k = 1;
    wait_node* after = front != nullptr ? front->next : nullptr;  // the first waiter left behind
    if (front != nullptr && !is_writer(front))
        for (; after != nullptr && !is_writer(after); after = after->next) ++k;
    const std::uint32_t q = after != nullptr ? queued_bit : 0;
    for (;;) {
        // H: the last reader's to close, once it has qlock_. Granting or
        // reopening here would let the lock go while that reader has yet
        // to touch the shared_mutex. (Every step below is a CAS, so a
        // reader that opens H meanwhile makes it fail and we look again.)
        if (s == queued_bit && !handover) return nullptr;
        std::uint32_t next;
        if (front == nullptr) {
            // (r, 1, w) -> (r, 0, w): nobody waits any more, reopen the fast
            // paths (I2). relaxed (both): it reopens the fast paths, which
            // acquire from the holders' releases, not from us; on failure we
            // only look again.
            if ((s & queued_bit) == 0) return nullptr;
            if (state_.compare_exchange_weak(s, s & ~queued_bit, std::memory_order_relaxed,
                                             std::memory_order_relaxed))
                return nullptr;
            continue;
        }
        if (is_writer(front)) {
            // (0, 1, 0) -> (0, q', 1). Anything else: the holders' unlocks
            // will come here again.
            if (s != queued_bit) return nullptr;
            next = writer_bit | q;
        } else {
            // (r, 1, 0) -> (r+k, q', 0); r > 0 when a cancelled writer had
            // stood between the holders and these readers.
            if ((s & writer_bit) != 0) return nullptr;
            next = (s & reader_mask) + k * one_reader + q;
        }
        // acquire pairs with the release RMW of the unlock that let them in
        // (the last reader's fetch_sub heads a release sequence through
        // every earlier reader's): their critical sections happen before
        // the granted waiters', which learn of it through unpark (release)
        // and park (acquire). On failure a reader left; look again.
        if (state_.compare_exchange_weak(s, next, std::memory_order_acquire, std::memory_order_acquire)) break;
    }
    // Take them out of the queue, oldest first, chained through next.
    wait_node* head = nullptr;
    wait_node* tail = nullptr;
    for (std::uint32_t i = 0; i < k; ++i) {
        wait_node* n = queue_.pop_front();
        n->granted = true;  // read by the waiter after its unpark
        if (tail != nullptr) tail->next = n; else head = n;
        tail = n;
    }
    return head;
}

void shared_mutex::wake(wait_node* granted, handoff policy) noexcept {
    if (granted == nullptr) return;
    // The rest of a batch of readers first: dispatched, each to the worker
    // it blocked on. The first stays parked until we wake it below, so the
    // list stays ours to walk.
    for (wait_node* n = granted->next; n != nullptr;) {
        wait_node* next = n->next;  // read first: once woken, n may be gone
        detail::unpark_with(&n->w, handoff::dispatch);
        n = next;
    }
    // The one that enters without queuing delay (ces: switched to on this
    // worker, while we go to the executor).
    detail::unpark_with(&granted->w, policy);
}

// unlock()'s CAS found Q set: hand the lock over, or -- every waiter
// having cancelled since -- let it go with a releasing CAS that is our last
// access to the shared_mutex.
void shared_mutex::unlock_slow() {
    for (;;) {
        SPINDLE_RACE_POINT(this, detail::race_point::shared_mutex_unlock_contended);
        qlock_.lock();
        if (!queue_.empty()) {
            // (0, 1, 1) -> (0, 1, 0), which grant() turns over to the front
            // at once (we hold qlock_: this is not H). release pairs with the
            // acquire of whoever takes it next (grant()'s CAS).
            state_.fetch_and(~writer_bit, std::memory_order_release);
            wait_node* granted = grant(true);  // from (0, 1, 0): never empty
            qlock_.unlock();
            // The granted hold the lock, and the first of them stays parked
            // until wake()'s last step: policy_ is still ours to read.
            wake(granted, policy_);
            return;
        }
        // The waiters that set Q have cancelled (the last one's grant()
        // cleared it, I2): (0, 0, 1). We still hold the lock, so nobody can
        // take it or destroy it: give qlock_ back first.
        qlock_.unlock();
        std::uint32_t expected = writer_bit;
        // (0, 0, 1) -> (0, 0, 0), as unlock(): the release, and our last
        // access. release pairs with the next locker's acquire. Fails only
        // if a locker set Q since we let qlock_ go: hand the lock to it.
        if (state_.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed)) {
            SPINDLE_RACE_POINT(this, detail::race_point::shared_mutex_freed);
            return;
        }
    }
}

// unlock_shared()'s fetch_sub took (1, 1, 0) to (0, 1, 0): we opened H and
// close it. Nobody else takes the lock or moves the word meanwhile (cancel
// and lock slow leave H alone), so the shared_mutex stays alive until we
// let the lock go -- as our last access to it.
void shared_mutex::unlock_shared_slow() {
    for (;;) {
        SPINDLE_RACE_POINT(this, detail::race_point::shared_mutex_last_reader);
        qlock_.lock();
        if (!queue_.empty()) {
            // From (0, 1, 0) the front is always granted: -> (0, q', 1) or
            // (k, q', 0).
            wait_node* granted = grant(true);
            qlock_.unlock();
            // As in unlock_slow: the first granted waiter keeps the lock
            // held until wake()'s last step.
            wake(granted, policy_);
            return;
        }
        // Every waiter cancelled while we came (each cancel left H to us).
        // (0, 1, 0) -> (1, 0, 0): we hold it shared again, which keeps the
        // lock (and so the shared_mutex) ours while we give qlock_ back.
        // relaxed: nobody else writes the word in H; our release below
        // carries our critical section.
        state_.fetch_add(one_reader - queued_bit, std::memory_order_relaxed);
        qlock_.unlock();
        // (r, q, 0) -> (r-1, q, 0), as unlock_shared(): the release, and our
        // last access -- unless it finds (1, 1, 0) again (a locker queued
        // since): we opened H again; start over.
        if (state_.fetch_sub(one_reader, std::memory_order_release) != (one_reader | queued_bit)) {
            SPINDLE_RACE_POINT(this, detail::race_point::shared_mutex_freed);
            return;
        }
    }
}

}  // namespace spindle
