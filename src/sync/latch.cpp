// spindle::latch slow paths (include/spindle/sync/latch.hpp).
#include <spindle/sync/latch.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle {

using detail::fatal;

void latch::bad_expected(std::ptrdiff_t expected) const noexcept {
    fatal("spindle::latch %p: negative expected count %td", static_cast<const void*>(this), expected);
}

latch::~latch() {
    // A waiter may destroy the latch as soon as its wait returns, while the
    // count_down that opened it still resumes the others. acquire pairs
    // with open()'s final release store: after it, open() touches nothing.
    if (count_.load(std::memory_order_acquire) <= 0) {
        while (!opened_.load(std::memory_order_acquire)) this_fiber::yield();
    }
#if SPINDLE_DEBUG_CHECKS
    // relaxed: quiescent now. Not open and someone counted: a parked waiter.
    const std::uint64_t w = waiters_.load(std::memory_order_relaxed);
    if ((w & done_bit) == 0 && (w & waiters_mask) != 0)
        fatal("spindle::latch %p destroyed with %llu waiters", static_cast<const void*>(this),
              static_cast<unsigned long long>(w & waiters_mask));
#endif
}

void latch::bad_count_down(std::ptrdiff_t n, std::int64_t c) const noexcept {
    if (n < 0) fatal("spindle::latch %p: count_down(%td) of a negative count", static_cast<const void*>(this), n);
    fatal("spindle::latch %p: count_down(%td) past the remaining count %lld", static_cast<const void*>(this), n,
          static_cast<long long>(c));
}

// Run once, by the count_down that took the count to zero.
void latch::open() noexcept {
    // relaxed: the CAS re-reads it.
    std::uint64_t w = waiters_.load(std::memory_order_relaxed);
    for (;;) {
        // (done, waiters): (0, w) -> (1, w). release pairs with a late
        // waiter's acquire FAA that sees DONE: it returns knowing the count
        // is zero. Fails when a waiter registers or cancels meanwhile.
        if (waiters_.compare_exchange_weak(w, w | done_bit, std::memory_order_release, std::memory_order_relaxed))
            break;
    }
    // Exactly w resumes: each lands on a live waiter (woken), on a cell a
    // waiter has yet to reach (left there, asynchronous resumption), or on a
    // waiter cancelled after DONE (refused). Cells of waiters cancelled
    // before DONE are skipped (they are not in w).
    for (std::uint64_t i = 0; i < (w & waiters_mask); ++i) q_.resume(unit{});
    // Last access to *this: see the destructor.
    opened_.store(true, std::memory_order_release);
}

bool latch::wait_slow(std::chrono::steady_clock::time_point deadline, std::stop_token* st) const noexcept {
    if (detail::spin_before_queue([](const void* l) noexcept { return static_cast<const latch*>(l)->try_wait(); },
                                  this, deadline))
        return true;
    // (done, waiters): (d, w) -> (d, w + 1). acquire pairs with open()'s
    // release CAS when we see DONE.
    const std::uint64_t w = waiters_.fetch_add(1, std::memory_order_acquire);
    if (w & done_bit) return true;
    auto r = q_.suspend(deadline, st);
    switch (r.status) {
    case detail::cqs_status::resumed:
        // Our resume follows the opening count_down's acq_rel FAA in its
        // program order; the cqs orders it before our wake-up.
        return true;
    case detail::cqs_status::cancelled:
        // Timed out or stopped. The latch may have opened meanwhile.
        return try_wait();
    case detail::cqs_status::broken:
        break;
    }
    fatal("spindle::latch %p: a suspension broke in asynchronous mode", static_cast<const void*>(this));
}

// The paper's onCancellation: (done, waiters): (d, w) -> (d, w - 1).
// No DONE: open() will not count us, the cell becomes CANCELLED. DONE: open()
// counted us and a resume is on its way: REFUSE it.
// relaxed: it publishes nothing; a cancelled waiter that reports success
// re-reads count_ with acquire (try_wait).
bool latch::on_cancellation(void* self, std::uint64_t) noexcept {
    auto* l = static_cast<latch*>(self);
    return (l->waiters_.fetch_sub(1, std::memory_order_relaxed) & done_bit) == 0;
}

// A resume of a waiter that cancelled after DONE: nothing to hand back.
void latch::complete_refused_resume(void*, unit) noexcept {}

// Only smart + sync queues return values; the latch's queue is async.
void latch::return_value(void* self, unit) noexcept {
    fatal("spindle::latch %p: a value came back from an asynchronous queue", self);
}

}  // namespace spindle
