// spindle::barrier slow paths (include/spindle/sync/barrier.hpp).
#include <spindle/sync/barrier.hpp>

#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

barrier_core::barrier_core(std::ptrdiff_t expected)
    : arrivals_(static_cast<std::uint64_t>(expected) & count_mask),
      expected_(static_cast<std::int32_t>(expected)),
      q_(cqs_cancellation::simple, cqs_resumption::async) {
#if SPINDLE_DEBUG_CHECKS
    if (expected < 0 || expected > max_expected)
        fatal("spindle::barrier %p: expected count %td outside [0, max() = %td]", static_cast<void*>(this), expected,
              max_expected);
#endif
}

barrier_core::~barrier_core() {
    // A party may destroy the barrier as soon as its wait returns, while the
    // completing party still resumes the others. acquire pairs with
    // complete()'s final release store.
    while (completing_.load(std::memory_order_acquire)) this_fiber::yield();
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
    // relaxed: ordered before the exchange below, whose release carries it
    // to anyone who sees the new phase (and so might destroy the barrier).
    completing_.store(true, std::memory_order_relaxed);
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
    completing_.store(false, std::memory_order_release);
}

void barrier_core::wait(std::uint32_t phase) noexcept {
    struct watch {
        const barrier_core* b;
        std::uint32_t phase;
        // acquire: pairs with complete()'s exchange (the completion step).
        static bool over(const void* arg) noexcept {
            auto* x = static_cast<const watch*>(arg);
            return phase_over(x->b->waiters_.load(std::memory_order_acquire), x->phase);
        }
    } const wt{this, phase};
    if (spin_before_queue(&watch::over, &wt)) return;
    // acquire (here and on the CAS): pairs with complete()'s exchange when
    // we see a later phase.
    std::uint64_t w = waiters_.load(std::memory_order_acquire);
    for (;;) {
        if (phase_over(w, phase)) return;
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
    for (;;) {
        // No deadline, no stop token: only resumed.
        (void)q_.suspend();
        // acquire: our resume came after the exchange that ended our phase
        // (program order in complete(); the cqs orders resume and wake-up).
        if (phase_over(waiters_.load(std::memory_order_acquire), phase)) return;
        // A wake-up of an earlier phase, meant for a waiter that registered
        // but has not reached the queue yet: pass it on, wait again.
        q_.resume(unit{});
        this_fiber::yield();
    }
}

}  // namespace spindle::detail
