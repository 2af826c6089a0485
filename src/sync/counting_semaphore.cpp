// spindle::counting_semaphore slow paths
// (include/spindle/sync/counting_semaphore.hpp).
#include <spindle/sync/counting_semaphore.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

void semaphore_core::bad_initial_count(std::ptrdiff_t desired, std::ptrdiff_t max) noexcept {
    fatal("spindle::counting_semaphore %p: initial count %td outside [0, max() = %td]", static_cast<void*>(this),
          desired, max);
}

semaphore_core::~semaphore_core() {
#if SPINDLE_DEBUG_CHECKS
    // relaxed: quiescent by contract; a negative word means counted waiters.
    const std::int64_t c = count_.load(std::memory_order_relaxed);
    if (c < 0)
        fatal("spindle::counting_semaphore %p destroyed with %lld waiters", static_cast<void*>(this),
              static_cast<long long>(-c));
#endif
}

void semaphore_core::bad_release(std::ptrdiff_t n, std::int64_t c) noexcept {
    if (n < 0) fatal("spindle::counting_semaphore %p: release(%td) of a negative count", static_cast<void*>(this), n);
    fatal("spindle::counting_semaphore %p: release(%td) beyond max() = %lld (free permits were %lld)",
          static_cast<void*>(this), n, static_cast<long long>(max_), static_cast<long long>(c < 0 ? 0 : c));
}

bool semaphore_core::acquire_slow(std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept {
    // Our decrement made c <= 0: we are counted as a waiter.
    for (;;) {
        auto r = q_.suspend(deadline, st);
        switch (r.status) {
        case cqs_status::resumed:
            // A release handed its permit to us. Its FAA (release) precedes
            // its resume in program order; the cqs orders the resume before
            // our wake-up.
            return true;
        case cqs_status::cancelled:
            // on_cancellation gave our decrement back -- or, if a release
            // had already counted us, left the word alone: that release puts
            // its permit back when its resume finds our cell refused.
            return false;
        case cqs_status::broken:
            break;
        }
        // BROKEN: the release meant for us found nobody in our cell in time;
        // it put the permit back in the word (hand_over). Announce ourselves
        // again: (count) c -> c - 1, acquire as in acquire().
        if (count_.fetch_sub(1, std::memory_order_acquire) > 0) return true;
    }
}

void semaphore_core::release_slow(std::int64_t c, std::ptrdiff_t n) noexcept {
    SPINDLE_RACE_POINT(this, race_point::semaphore_release_matched);
    // -c waiters were counted; our +n covers min(n, -c) of them, oldest
    // first. The rest of n (if any) stayed in the word.
    const std::int64_t wake = -c < n ? -c : static_cast<std::int64_t>(n);
    if (wake == 0) return;  // release(0): nothing to hand over
    // The last with our policy: under ces we may switch away here, and the
    // others should not wait for us to come back.
    for (std::int64_t i = 1; i < wake; ++i) hand_over(handoff::dispatch);
    hand_over(policy_);
}

// Our increment was matched with a counted waiter: give it the permit.
void semaphore_core::hand_over(handoff policy) noexcept {
    while (!q_.resume(unit{}, policy)) {
        // Sync resumption, no rendezvous: the cell is BROKEN and its
        // acquirer will decrement again. Put the permit back in the word,
        // (count) c -> c + 1, and hand it on if someone is counted as waiting.
        // release: as in release().
        if (count_.fetch_add(1, std::memory_order_release) >= 0) return;
    }
}

// Smart cancellation (paper Listing 5, changed as the header says). c < 0:
// others are still counted: give back our decrement, (count) c -> c + 1,
// and resumes skip our cell (CANCELLED). c >= 0: a release counted us and
// its resume is coming to our cell: refuse it (REFUSE) and leave the word
// alone -- the permit is still that release's (complete_refused_resume).
// relaxed: we publish nothing; the RMW keeps count_'s release sequence
// unbroken for whoever takes a permit from the word.
bool semaphore_core::on_cancellation(void* self, std::uint64_t) noexcept {
    auto* s = static_cast<semaphore_core*>(self);
    std::int64_t c = s->count_.load(std::memory_order_relaxed);  // the CAS re-reads it
    while (c < 0) {
        if (s->count_.compare_exchange_weak(c, c + 1, std::memory_order_relaxed, std::memory_order_relaxed))
            return true;
    }
    return false;
}

// The releaser's resume reached a refused cell (or a canceller found a
// permit delegated to its refusing waiter): the permit is a released one
// nobody got. Release it again, (count) c -> c + 1, and hand it on if
// someone is counted by now. The FAA is the release's last access to the
// semaphore unless it hands the permit on -- to a counted waiter, which
// cannot leave before it gets it. release as in release(). Dispatch: this
// may run in a timer or stop callback.
void semaphore_core::complete_refused_resume(void* self, unit) noexcept {
    auto* s = static_cast<semaphore_core*>(self);
    if (s->count_.fetch_add(1, std::memory_order_release) < 0) s->hand_over(handoff::dispatch);
}

// Smart + sync: a permit delegated to a cancelled waiter could not be handed
// to the next one (BROKEN). It is a released permit: release it again.
void semaphore_core::return_value(void* self, unit) noexcept {
    auto* s = static_cast<semaphore_core*>(self);
    // (count): c -> c + 1; release as in release().
    // Dispatch: this may run in a timer or stop callback.
    if (s->count_.fetch_add(1, std::memory_order_release) < 0) s->hand_over(handoff::dispatch);
}

}  // namespace spindle::detail
