// spindle::futex_cond (locks/futex_cond.hpp) with several locks of locks/:
// no lost wake-up in a long ping-pong, notify_all reaching every waiter, a
// passed deadline returning false with the lock held, quiesce() waiting for
// the waiters to leave, and the all-zero state.
//
// Nothing here measures time: every wait has a predicate, and the only
// deadlines are in the past.
#include <gtest/gtest.h>

// Locks taken and released across lambdas: the static analysis cannot
// follow them (tests/locks/thread_safety_test.cpp checks the annotations).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <atomic>
#include <cstring>
#include <ctime>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <spindle/locks/futex_cond.hpp>
#include <spindle/locks/locks.hpp>

namespace {

static_assert(sizeof(spindle::futex_cond) <= 48, "fits a pthread_cond_t");
static_assert(std::is_trivially_destructible_v<spindle::futex_cond>);

template <class L>
class FutexCondTest : public ::testing::Test {};

using cond_locks = ::testing::Types<spindle::ttas_park_lock, spindle::compact_ticket_lock, spindle::mcs_lock,
                                    spindle::hemlock_park>;

struct lock_names {
    template <class L>
    static std::string GetName(int) {
        std::string n = L::name;
        return n.substr(n.find("::") + 2);
    }
};

TYPED_TEST_SUITE(FutexCondTest, cond_locks, lock_names);

// Two threads hand a turn back and forth many times: a lost wake-up would
// hang the test (ctest's timeout), a wrong one breaks the turn order.
TYPED_TEST(FutexCondTest, PingPongLosesNoWakeUp) {
    TypeParam m;
    spindle::futex_cond cv;
#if SPINDLE_TSAN
    constexpr int kRounds = 300;
#else
    constexpr int kRounds = 3000;
#endif
    int turn = 0;  // guarded by m: even -> ping's, odd -> pong's
    int bad = 0;
    auto player = [&](int parity) {
        for (int i = 0; i < kRounds; ++i) {
            m.lock();
            while (turn % 2 != parity) cv.wait(m);
            if (turn != 2 * i + parity) ++bad;
            ++turn;
            m.unlock();
            cv.notify_one();
        }
    };
    std::thread pong(player, 1);
    player(0);
    pong.join();
    EXPECT_EQ(turn, 2 * kRounds);
    EXPECT_EQ(bad, 0);
}

TYPED_TEST(FutexCondTest, NotifyAllReachesEveryWaiter) {
    TypeParam m;
    spindle::futex_cond cv;
    constexpr int kWaiters = 6;
    int generation = 0;  // guarded by m
    int registered = 0;  // guarded by m: waiters about to wait on generation 0
    std::atomic<int> woken{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kWaiters; ++t)
        ts.emplace_back([&] {
            m.lock();
            ++registered;
            while (generation == 0) cv.wait(m);
            m.unlock();
            woken.fetch_add(1);
        });
    for (;;) {  // every waiter has registered (it may not sleep yet: no matter)
        m.lock();
        const bool all = registered == kWaiters;
        m.unlock();
        if (all) break;
        std::this_thread::yield();
    }
    m.lock();
    generation = 1;
    m.unlock();
    cv.notify_all();
    for (auto& t : ts) t.join();
    EXPECT_EQ(woken.load(), kWaiters);
}

TYPED_TEST(FutexCondTest, PassedDeadlineReturnsFalseWithTheLockHeld) {
    TypeParam m;
    spindle::futex_cond cv;
    for (clockid_t c : {CLOCK_REALTIME, CLOCK_MONOTONIC}) {
        timespec past;
        clock_gettime(c, &past);
        past.tv_sec -= 1;
        m.lock();
        EXPECT_FALSE(cv.wait_until(m, c, past));
        EXPECT_FALSE(m.try_lock());  // still ours
        m.unlock();
        EXPECT_TRUE(m.try_lock());
        m.unlock();
    }
}

// quiesce() returns only once every waiter has left the condition variable
// (steps 5 of their waits), so that it may be freed.
TYPED_TEST(FutexCondTest, QuiesceWaitsForTheWaitersToLeave) {
    TypeParam m;
    auto* cv = new spindle::futex_cond;
    cv->quiesce();  // nobody waits: returns at once
    constexpr int kWaiters = 4;
    bool done = false;   // guarded by m
    int registered = 0;  // guarded by m
    std::vector<std::thread> ts;
    for (int t = 0; t < kWaiters; ++t)
        ts.emplace_back([&] {
            m.lock();
            ++registered;
            while (!done) cv->wait(m);
            m.unlock();
        });
    for (;;) {
        m.lock();
        const bool all = registered == kWaiters;
        m.unlock();
        if (all) break;
        std::this_thread::yield();
    }
    m.lock();
    done = true;  // no notify: quiesce wakes them
    m.unlock();
    cv->quiesce();
    delete cv;  // ASan: no waiter touches it after this
    for (auto& t : ts) t.join();
}

TEST(FutexCond, ZeroedAndFlaggedStates) {
    alignas(spindle::futex_cond) unsigned char storage[sizeof(spindle::futex_cond)];
    std::memset(storage, 0, sizeof storage);
    auto& zero = *std::launder(reinterpret_cast<spindle::futex_cond*>(storage));
    EXPECT_EQ(zero.flags(), 0u);
    EXPECT_EQ(zero.clock(), CLOCK_REALTIME);
    zero.notify_one();  // no waiter: nothing happens
    zero.notify_all();
    zero.quiesce();
    spindle::futex_cond mono(spindle::futex_cond::clock_monotonic);
    EXPECT_EQ(mono.clock(), CLOCK_MONOTONIC);
    EXPECT_EQ(mono.futex_op(CLOCK_MONOTONIC, true) & FUTEX_CLOCK_REALTIME, 0);
    EXPECT_NE(mono.futex_op(CLOCK_MONOTONIC, true) & FUTEX_PRIVATE_FLAG, 0);
    spindle::futex_cond shared(spindle::futex_cond::process_shared);
    EXPECT_EQ(shared.futex_op(CLOCK_REALTIME, false) & FUTEX_PRIVATE_FLAG, 0);
    EXPECT_NE(shared.futex_op(CLOCK_REALTIME, true) & FUTEX_CLOCK_REALTIME, 0);
}

}  // namespace
