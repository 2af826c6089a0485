// spindle::cqs_mutex where it differs from spindle::mutex: its misuse
// messages, and its unlock as the release of a one-permit semaphore racing a
// waiter's cancellation. (What the two mutexes share -- mutual exclusion,
// FIFO handoff, timeouts, stop tokens, the last reference's unlock under
// stress -- runs for both in mutex_test.cpp.)
#include <gtest/gtest.h>

// These tests take and release locks across lambdas and on purpose wrongly
// (death tests): Clang's static lock analysis cannot follow that, so it is
// off for this file (it checks the library itself).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <chrono>
#include <stop_token>
#include <thread>
#include <utility>

#include <spindle/sync/cqs_mutex.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"

namespace {

using namespace spindle::test;

#if SPINDLE_DEBUG_CHECKS
using MutexDeathTest = ::testing::Test;

// A relock by the holder would wait for itself: from a thread and from a
// fiber, a plain lock and a cancellable one.
TEST(MutexDeathTest, CqsMutexRelockByTheHolderAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::cqs_mutex m;
            m.lock();
            m.lock();
        },
        "spindle::cqs_mutex 0x[0-9a-f]+: lock\\(\\) by the caller that holds it");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            spindle::cqs_mutex m;
            sched.spawn([&] {
                     m.lock();
                     (void)m.lock(std::stop_token{});
                 })
                .join();
        },
        "spindle::cqs_mutex 0x[0-9a-f]+: lock\\(\\) by the caller that holds it");
}

TEST(MutexDeathTest, CqsMutexMisuseAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::cqs_mutex m;
            m.unlock();
        },
        "spindle::cqs_mutex 0x[0-9a-f]+: unlock\\(\\) of a mutex that is not locked");
    EXPECT_DEATH(
        {
            spindle::cqs_mutex m;
            m.lock();
            std::thread([&] { m.unlock(); }).join();
        },
        "spindle::cqs_mutex 0x[0-9a-f]+: unlock\\(\\) by a caller that does not hold it");
    EXPECT_DEATH(
        {
            auto* m = new spindle::cqs_mutex;
            m->lock();
            delete m;
        },
        "spindle::cqs_mutex 0x[0-9a-f]+ destroyed while held");
    EXPECT_DEATH(
        {
            auto* m = new spindle::cqs_mutex;
            m->lock();
            std::thread([m] { m->lock(); }).detach();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            delete m;
        },
        "spindle::cqs_mutex 0x[0-9a-f]+ destroyed while (held|held and waited on)");
}

// A second unlock() by the previous holder, after its first unlock handed
// the mutex to a waiter that has not run yet: the caller does not hold it.
TEST(MutexDeathTest, CqsMutexDoubleUnlockDuringHandoffAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::scheduler sched({.workers = 1});
            spindle::cqs_mutex m(spindle::handoff::dispatch);
            spindle::fiber outer = sched.spawn([&] {
                m.lock();
                spindle::fiber w([&] {
                    m.lock();
                    m.unlock();
                });
                spindle::this_fiber::yield();  // w queues
                m.unlock();                     // hands m to w, which has not run
                m.unlock();                     // misuse: we no longer hold it
                w.join();
            });
            outer.join();
        },
        "spindle::cqs_mutex 0x[0-9a-f]+: unlock\\(\\) by a caller that does not hold it");
}
#endif

// ---- the last reference unlocks and frees ----------------------------------
//
// (tests/support/last_reference.hpp.) An object holds a cqs_mutex and a
// count of references to itself, guarded by the mutex; whoever drops the
// last reference deletes the object right after its unlock returns.

using spindle::test::party_kind;
using spindle::test::race_point;

using cqs_mutex_object = spindle::test::mutex_object<spindle::cqs_mutex>;

class CqsMutexLastReference : public ::testing::TestWithParam<party_kind> {};

// cqs_mutex is a semaphore with one permit: H unlocks to W, who waits; W is
// cancelled right after H's FAA counted it, and tries to lock, drop the
// last reference and delete the object before H hands the mutex over.
TEST_P(CqsMutexLastReference, UnlockMatchedToACancelledWaiterIsDoneFirst) {
    if (!spindle::test::race_points_enabled) GTEST_SKIP() << "race points exist only with SPINDLE_DEBUG_CHECKS";
    using spindle::test::last_reference_scenario;
    last_reference_scenario<cqs_mutex_object>(GetParam(), race_point::semaphore_release_matched,
                                              race_point::semaphore_release_matched);
    last_reference_scenario<cqs_mutex_object>(GetParam(), race_point::semaphore_release_matched,
                                              race_point::semaphore_release_matched, {.block_after_holder = true});
}

INSTANTIATE_TEST_SUITE_P(Holders, CqsMutexLastReference,
                         ::testing::Values(party_kind::fiber, party_kind::thread), spindle::test::party_name);

}  // namespace
