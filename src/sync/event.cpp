// spindle::event slow paths (include/spindle/sync/event.hpp).
#include <spindle/sync/event.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle {

using detail::fatal;

namespace {

// Wake-ups a manual waiter passes on before it gives its thread up once: it
// is waiting for a late waiter of an earlier generation to reach the queue
// (see the header essay), which runs without blocking unless preempted.
constexpr unsigned passes_before_yield = 64;

}  // namespace

event::~event() {
    // A waiter may destroy the event as soon as its wait returns, while the
    // set() that released it still wakes others. acquire pairs with set()'s
    // final release decrement: after it, that set() touches nothing.
    while (busy_.load(std::memory_order_acquire) != 0) this_fiber::yield();
#if SPINDLE_DEBUG_CHECKS
    // relaxed: quiescent now.
    const std::int64_t n = debug_waiters();
    if (n != 0)
        fatal("spindle::event %p (%s) destroyed with %lld waiters", static_cast<void*>(this),
              to_string(reset_mode()), static_cast<long long>(n));
#endif
}

std::int64_t event::debug_waiters() const noexcept {
    const std::uint64_t w = word_.load(std::memory_order_relaxed);  // a snapshot
    if (manual_) return (w & set_bit) != 0 ? 0 : static_cast<std::int64_t>(w & count_mask);
    const auto s = static_cast<std::int64_t>(w);
    return s < 0 ? -s : 0;
}

void event::too_many_waiters() const noexcept {
    fatal("spindle::event %p (manual): more than %llu waiters at once", static_cast<const void*>(this),
          static_cast<unsigned long long>(count_mask));
}

void event::set() noexcept {
    // Counted before our step on the word, which is release: whoever that
    // step releases (or a later acquire of the word) sees the count, so its
    // destructor waits for us. relaxed: ordered by that release.
    busy_.fetch_add(1, std::memory_order_relaxed);
    if (manual_)
        set_manual();
    else
        set_automatic();
    // Last access to *this (see the destructor). release pairs with its acquire.
    busy_.fetch_sub(1, std::memory_order_release);
}

void event::reset() noexcept {
    // relaxed (both kinds): reset publishes nothing. A waiter that must see
    // what came before the next set() gets it from that set()'s release.
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    if (manual_) {
        while (w & set_bit) {
            // (g, 1, 0) -> (g+1, 0, 0): a new generation. No waiter is counted
            // while SET (registration needs it clear).
            if (word_.compare_exchange_weak(w, (w & gen_mask) + (std::uint64_t{1} << gen_shift),
                                            std::memory_order_relaxed, std::memory_order_relaxed))
                return;
        }
        return;
    }
    while (static_cast<std::int64_t>(w) > 0) {
        // (word): 1 -> 0. A signal already handed to a waiter is not in the word.
        if (word_.compare_exchange_weak(w, 0, std::memory_order_relaxed, std::memory_order_relaxed)) return;
    }
}

// ---- manual reset -------------------------------------------------------------

void event::set_manual() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);  // the CAS re-reads it
    for (;;) {
        // (g, 0, n) -> (g, 1, 0); or, already set, (g, 1, 0) unchanged.
        // release pairs with the acquire of waiters that see SET (and of
        // woken waiters that check it); the unchanged case still makes this
        // set() one that a later waiter synchronizes with.
        const std::uint64_t next = (w & set_bit) ? w : ((w & gen_mask) | set_bit);
        if (word_.compare_exchange_weak(w, next, std::memory_order_release, std::memory_order_relaxed)) break;
    }
    if (w & set_bit) return;
    // One wake-up token of generation g per waiter counted in it. The cqs
    // skips cancelled cells; a token may land on a newer generation's waiter
    // first (see the essay): that one passes it on.
    const std::uint64_t n = w & count_mask, token = w & gen_mask;
    for (std::uint64_t i = 0; i < n; ++i) q_.resume(token, i + 1 == n ? policy_ : handoff::dispatch);
}

bool event::wait_manual(std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept {
    std::uint64_t w = word_.load(std::memory_order_acquire);  // acquire: we may return on SET
    for (;;) {
        if (w & set_bit) return true;
#if SPINDLE_DEBUG_CHECKS
        if ((w & count_mask) == count_mask) too_many_waiters();
#endif
        // (g, 0, n) -> (g, 0, n + 1). Registering publishes nothing; acquire
        // for the failure side, as the load above.
        if (word_.compare_exchange_weak(w, w + 1, std::memory_order_acquire, std::memory_order_acquire)) break;
    }
    manual_wait me{w & gen_mask};
    unsigned passes = 0;
    for (;;) {
        auto r = q_.suspend(deadline, st, reinterpret_cast<std::uintptr_t>(&me));
        // Cancelled: on_cancellation either took our registration back (the
        // wait failed) or found our generation set and refused its token
        // (the event was set while we waited). It ran before our wake-up, or
        // on this very waiter: me.refused is ordered before this read.
        if (r.status == detail::cqs_status::cancelled) return me.refused;
        if (r.status == detail::cqs_status::broken)
            fatal("spindle::event %p (manual): a suspension broke in asynchronous mode", static_cast<void*>(this));
        // A wake-up token of our generation or a later one: g was set. The
        // setter's release CAS comes before its resume, which the cqs orders
        // before our wake-up. We do not touch the event again.
        if (token_covers(r.value, me.gen)) return true;
        // A token of an earlier generation, for a late waiter of it. acquire
        // pairs with set()'s release CAS: ours may have been set meanwhile
        // (then we keep the token: ours, issued by that set(), goes to a
        // cell further on, where the late waiter will find it).
        if (released(word_.load(std::memory_order_acquire), me.gen)) return true;
        // Not ours: pass it on to the next cell and wait again, still
        // counted in g. The late waiter is between its registration and its
        // cell, which runs without blocking unless it is preempted.
        q_.resume(r.value, handoff::dispatch);
        if (++passes % passes_before_yield == 0) detail::sched_yield_now();
    }
}

// ---- automatic reset ----------------------------------------------------------

void event::set_automatic() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);  // the CAS re-reads it
    for (;;) {
        // (word): s -> s + 1 below 1; 1 unchanged (already set: the signals
        // merge). release pairs with the acquire of the wait that takes the
        // signal (from the word, or, woken, through the cqs).
        const std::uint64_t next = static_cast<std::int64_t>(w) > 0 ? w : w + 1;
        if (word_.compare_exchange_weak(w, next, std::memory_order_release, std::memory_order_relaxed)) break;
    }
    if (static_cast<std::int64_t>(w) < 0) hand_over(policy_);
}

// Our increment was matched with a counted waiter: give it the signal.
void event::hand_over(handoff policy) noexcept {
    while (!q_.resume(0, policy)) {
        // Sync resumption, no rendezvous: the cell is BROKEN and its waiter
        // will count itself again. Put the signal back, (word) s -> s + 1
        // below 1 (release as in set_automatic), and hand it on if someone
        // is still counted.
        std::uint64_t w = word_.load(std::memory_order_relaxed);
        for (;;) {
            if (static_cast<std::int64_t>(w) > 0) return;  // set meanwhile: merged
            if (word_.compare_exchange_weak(w, w + 1, std::memory_order_release, std::memory_order_relaxed)) break;
        }
        if (static_cast<std::int64_t>(w) >= 0) return;
    }
}

bool event::wait_automatic(std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept {
    // Our decrement made the word <= 0: we are counted as waiting.
    for (;;) {
        auto r = q_.suspend(deadline, st);
        switch (r.status) {
        case detail::cqs_status::resumed:
            // A set() handed its signal to us; the cqs orders its resume (and
            // its release CAS before it) before our wake-up.
            return true;
        case detail::cqs_status::cancelled:
            // on_cancellation gave our decrement back (and, if a set() had
            // counted us, its signal to the word).
            return false;
        case detail::cqs_status::broken:
            break;
        }
        // BROKEN: the set() meant for us found nobody in our cell in time
        // and put its signal back. Count ourselves again: (word) s -> s - 1,
        // acquire as in wait_impl.
        if (static_cast<std::int64_t>(word_.fetch_sub(1, std::memory_order_acquire)) > 0) return true;
    }
}

// ---- cqs hooks ------------------------------------------------------------------

// Manual (the latch's rule, per generation; `tag` is the waiter's
// manual_wait): our generation not set: take our registration back,
// (g, 0, n) -> (g, 0, n - 1); no set() will count us, CANCELLED. Set: a
// set() counted us and issued a token for us: REFUSE (the token that reaches
// our cell is dropped) and the wait reports success. acquire: the waiter
// then returns as released, after what preceded that set() (set()'s release
// CAS); our unpark, or our own thread, carries it to the waiter.
// Automatic (counting_semaphore's rule, capped): give our decrement back.
// s < 0: others are counted, CANCELLED. s >= 0: a set() counted us and its
// signal is coming to our cell: REFUSE it and put the signal into the word
// (0 -> 1; at 1 a later set() already set it, and the two merge).
// relaxed: the signal's release sequence on the word goes on through our RMW.
bool event::on_cancellation(void* self, std::uint64_t tag) noexcept {
    auto* e = static_cast<event*>(self);
    if (e->manual_) {
        auto* me = reinterpret_cast<manual_wait*>(static_cast<std::uintptr_t>(tag));
        std::uint64_t w = e->word_.load(std::memory_order_acquire);
        for (;;) {
            if (released(w, me->gen)) {
                me->refused = true;  // read by the waiter after our unpark
                e->refused_.fetch_add(1, std::memory_order_relaxed);  // a statistic
                return false;
            }
            if (e->word_.compare_exchange_weak(w, w - 1, std::memory_order_acquire, std::memory_order_acquire))
                return true;
        }
    }
    std::uint64_t w = e->word_.load(std::memory_order_relaxed);
    for (;;) {
        const auto s = static_cast<std::int64_t>(w);
        if (s > 0) return false;
        if (e->word_.compare_exchange_weak(w, w + 1, std::memory_order_relaxed, std::memory_order_relaxed))
            return s < 0;
    }
}

// Manual: the token counted for the refusing waiter, which returned as
// released; tokens are interchangeable (any token covers the waiters of its
// generation and earlier ones), so whichever one reached the cell is dropped,
// and the one meant for this cell, if different, serves the waiter it
// reached. Automatic: the refused signal is in the word already
// (on_cancellation). Nothing to do in either case.
void event::complete_refused_resume(void*, std::uint64_t) noexcept {}

// Automatic (smart + sync): a signal delegated to a cancelled waiter could
// not be handed to the next one (BROKEN). Signal again, as set() would.
// Manual: its queue is asynchronous and never returns values.
void event::return_value(void* self, std::uint64_t) noexcept {
    auto* e = static_cast<event*>(self);
    if (e->manual_) fatal("spindle::event %p (manual): a value came back from an asynchronous queue", self);
    std::uint64_t w = e->word_.load(std::memory_order_relaxed);
    for (;;) {
        if (static_cast<std::int64_t>(w) > 0) return;  // merged with a later set()
        // release as in set_automatic.
        if (e->word_.compare_exchange_weak(w, w + 1, std::memory_order_release, std::memory_order_relaxed)) break;
    }
    // We run on the cancelled waiter: dispatch rather than give its worker away.
    if (static_cast<std::int64_t>(w) < 0) e->hand_over(handoff::dispatch);
}

}  // namespace spindle
