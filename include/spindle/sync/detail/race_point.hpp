// spindle/sync/detail/race_point.hpp — debug builds only: named points in
// the primitives' slow paths where a test may stop the caller and run the
// parties it races with before letting it go on.
//
// Why. A primitive is released by one step -- the store or RMW after which
// another party may take it, finish with it and destroy the object that
// holds it (POSIX allows destroying an unlocked mutex at once; "the last
// reference unlocks and frees") -- and that step must be the releasing
// call's last access to the primitive. An access after it is a window of a
// few instructions: a stress test walks through it once in millions of
// runs, if ever. At a race point a test (tests/support/last_reference.hpp)
// holds the caller there, lets the other parties run -- cancel a waiter,
// lock, unlock, drop the last reference, delete -- and only then lets the
// caller go on; an access to the primitive after the point becomes a
// heap-use-after-free that AddressSanitizer reports on every run.
//
//     SPINDLE_RACE_POINT(this, race_point::mutex_unlock_freed);
//
// The first argument only identifies the primitive (a test acts on the one
// it watches); nothing dereferences it, so a point may follow the release.
//
// Cost: in builds with SPINDLE_DEBUG_CHECKS, a relaxed load of one global
// pointer where a slow path passes a point; otherwise nothing (the macro
// expands to no code, and nothing of this header is compiled in).
#pragma once

#include <spindle/arch/config.hpp>

namespace spindle::detail {

enum class race_point : unsigned char {
    // spindle::mutex: an unlock found waiters queued (state 2), before it
    // looks at the queue.
    mutex_unlock_contended,
    // spindle::mutex: a contended unlock found nobody left to hand the
    // mutex to, and freed it.
    mutex_unlock_freed,
    // spindle::shared_mutex: an exclusive unlock found Q set, before it
    // looks at the queue.
    shared_mutex_unlock_contended,
    // spindle::shared_mutex: the last reader's fetch_sub found waiters
    // queued, (1, 1, 0) -> (0, 1, 0), before it hands the lock over.
    shared_mutex_last_reader,
    // spindle::shared_mutex: a slow unlock (exclusive, or the last shared
    // one) found nobody to hand the lock to, and let it go.
    shared_mutex_freed,
    // detail::semaphore_core (counting_semaphore, cqs_mutex): a release's
    // FAA found acquirers counted as waiting, before it hands permits over.
    semaphore_release_matched,
    // detail::channel_core: a publish's FAA found receivers counted as
    // waiting or a sender's cancel pending, before it serves them.
    channel_publish_matched,
};

#if SPINDLE_DEBUG_CHECKS

// Called at every race point while installed; null (the default): nothing.
// `primitive` identifies the primitive only (it may be gone).
using race_hook = void (*)(const void* primitive, race_point point) noexcept;

// Installs `hook` (null to remove it). For tests; not synchronized with
// calls already under way.
void set_race_hook(race_hook hook) noexcept;

// The point itself: calls the hook if one is installed.
void race_point_reached(const void* primitive, race_point point) noexcept;

#define SPINDLE_RACE_POINT(primitive, point) ::spindle::detail::race_point_reached(primitive, point)

#else

#define SPINDLE_RACE_POINT(primitive, point) ((void)0)

#endif

}  // namespace spindle::detail
