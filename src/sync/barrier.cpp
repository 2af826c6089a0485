// spindle::barrier slow paths (include/spindle/sync/barrier.hpp).
#include <spindle/sync/barrier.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

void barrier_core::bad_expected(std::ptrdiff_t expected) const noexcept {
    fatal("spindle::barrier %p: expected count %td outside [0, max() = %td]", static_cast<const void*>(this),
          expected, max_expected);
}

barrier_core::~barrier_core() {
    // A party may destroy the barrier as soon as its wait returns, while a
    // completing party still resumes the others. acquire pairs with
    // complete()'s final release decrement.
    while (completing_.load(std::memory_order_acquire) != 0) this_fiber::yield();
#if SPINDLE_DEBUG_CHECKS
    // relaxed: quiescent now.
    const std::uint64_t w = waiters_.load(std::memory_order_relaxed);
    if ((w & count_mask) != 0)
        fatal("spindle::barrier %p destroyed with %llu waiters", static_cast<void*>(this),
              static_cast<unsigned long long>(w & count_mask));
#endif
}

void barrier_core::bad_arrive(std::ptrdiff_t n, std::uint32_t remaining) const noexcept {
    if (n <= 0) fatal("spindle::barrier %p: arrive(%td): the update must be positive", static_cast<const void*>(this), n);
    fatal("spindle::barrier %p: arrive(%td) past the %u arrivals still expected in this phase",
          static_cast<const void*>(this), n, remaining);
}

void barrier_core::drop() noexcept {
    // relaxed: the arrive() that follows (acq_rel) carries it to the party
    // that completes this phase, which reads expected_ for the next one.
    const std::int32_t before = expected_.fetch_sub(1, std::memory_order_relaxed);
#if SPINDLE_DEBUG_CHECKS
    if (before <= 0) fatal("spindle::barrier %p: arrive_and_drop() with no party left", static_cast<void*>(this));
#else
    (void)before;
#endif
}

void barrier_core::complete(std::uint32_t phase) noexcept {
    // relaxed: sequenced before the release store and exchange below, which
    // carry it to anyone who sees the new phase (and so might destroy the
    // barrier).
    completing_.fetch_add(1, std::memory_order_relaxed);
    const std::uint32_t next = phase + 1;
    // relaxed: every drop of this phase precedes its party's acq_rel arrive,
    // which our own arrive read (release sequence).
    const auto parties = static_cast<std::uint64_t>(expected_.load(std::memory_order_relaxed));
    // (phase, remaining): (p, 0) -> (p + 1, parties). A plain store: every
    // arrival of p is in, and nobody may arrive in p + 1 before p is over.
    // release pairs with the acq_rel FAA of the first arrivals of p + 1.
    arrivals_.store((std::uint64_t{next} << phase_shift) | parties, std::memory_order_release);
    // (phase, waiters): (p, w) -> (p + 1, 0): closes registration for p.
    // release: whoever sees p + 1 sees the completion step; acquire: the
    // registrations we count (their CASes) are ours to resume.
    const std::uint64_t w = waiters_.exchange(std::uint64_t{next} << phase_shift, std::memory_order_acq_rel);
#if SPINDLE_DEBUG_CHECKS
    if (static_cast<std::uint32_t>(w >> phase_shift) != phase)
        fatal("spindle::barrier %p: phase %u completed while waiters were at phase %u", static_cast<void*>(this),
              phase, static_cast<unsigned>(w >> phase_shift));
#endif
    for (std::uint64_t i = 0; i < (w & count_mask); ++i) q_.resume(unit{});
    // Last access to *this: see the destructor.
    completing_.fetch_sub(1, std::memory_order_release);
}

bool barrier_core::wait(std::uint32_t phase, std::chrono::steady_clock::time_point deadline,
                        std::stop_token* st) noexcept {
    struct watch {
        const barrier_core* b;
        std::uint32_t phase;
        static bool over(const void* arg) noexcept {
            auto* x = static_cast<const watch*>(arg);
            return x->b->over(x->phase);
        }
    } const wt{this, phase};
    if (spin_before_queue(&watch::over, &wt, deadline)) return true;
    // acquire (here and on the CAS): pairs with complete()'s exchange when
    // we see a later phase.
    std::uint64_t w = waiters_.load(std::memory_order_acquire);
    for (;;) {
        if (phase_over(w, phase)) return true;
        if (static_cast<std::uint32_t>(w >> phase_shift) != phase) {
            // Our phase opened in arrivals_ but not yet here: its opener is
            // between its two stores. Let it finish.
            this_fiber::yield();
            w = waiters_.load(std::memory_order_acquire);
            continue;
        }
        // (phase, waiters): (p, w) -> (p, w + 1): counted for p's release.
        if (waiters_.compare_exchange_weak(w, w + 1, std::memory_order_acquire, std::memory_order_acquire)) break;
    }
    registration me{phase};
    for (;;) {
        auto r = q_.suspend(deadline, st, reinterpret_cast<std::uintptr_t>(&me));
        // Cancelled: on_cancellation took our registration back (p not over:
        // false) or found p over and refused its resume (true). It ran
        // before our wake-up, or on this very waiter.
        if (r.status == cqs_status::cancelled) return me.refused;
        if (r.status == cqs_status::broken) fatal("spindle::barrier %p: a suspension broke in asynchronous mode",
                                                  static_cast<void*>(this));
        // acquire: our resume came after the exchange that ended our phase
        // (program order in complete(); the cqs orders resume and wake-up).
        if (over(phase)) return true;
        // A wake-up of an earlier phase, meant for a waiter that registered
        // but has not reached the queue yet: pass it on, wait again.
        q_.resume(unit{});
        this_fiber::yield();
    }
}

// The latch's rule per phase (`tag` is the waiter's registration): phase
// not over: (p, w) -> (p, w - 1), complete() will not count it, CANCELLED.
// Over: complete() counted it and a resume is on its way: REFUSE (dropped),
// and the wait reports success. acquire: the waiter then returns as
// released, after the completion step (complete()'s release exchange); our
// unpark, or the waiter's own thread, carries it on.
bool barrier_core::on_cancellation(void* self, std::uint64_t tag) noexcept {
    auto* b = static_cast<barrier_core*>(self);
    auto* me = reinterpret_cast<registration*>(static_cast<std::uintptr_t>(tag));
    std::uint64_t w = b->waiters_.load(std::memory_order_acquire);
    for (;;) {
        if (phase_over(w, me->phase)) {
            me->refused = true;  // read by the waiter after our unpark
            b->refused_.fetch_add(1, std::memory_order_relaxed);  // a statistic
            return false;
        }
        // Registered in p and p not over: the word still shows p.
        if (b->waiters_.compare_exchange_weak(w, w - 1, std::memory_order_acquire, std::memory_order_acquire))
            return true;
    }
}

// A resume of a waiter that was cancelled after its phase ended: nothing to
// give back (the wake-ups are interchangeable; the one meant for this cell,
// if another, serves the waiter it reached).
void barrier_core::complete_refused_resume(void*, unit) noexcept {}

// Only smart + sync queues return values; the barrier's queue is async.
void barrier_core::return_value(void* self, unit) noexcept {
    fatal("spindle::barrier %p: a value came back from an asynchronous queue", self);
}

}  // namespace spindle::detail
