// spindle::latch: waiters (fibers and threads, over 1, 2, 4 and 8 workers)
// see every count_down's work; a cancellation storm of timeouts and stop
// requests around the opening loses no wake-up; destruction right after a
// wait while the opener still resumes; std-like edge cases; misuse aborts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/latch.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"

namespace {

using namespace spindle::test;

class LatchStress : public ::testing::TestWithParam<unsigned> {};

// Counters write their slot (plain ints) and count down; every waiter, by
// whichever wait it uses, reads all slots afterwards (TSan checks the
// happens-before edge).
TEST_P(LatchStress, WaitersSeeEveryCountDown) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    constexpr int kRounds = 4;
    constexpr int kCounterFibers = 64, kCounterThreads = 2, kArrivers = 8;
    constexpr int kSlots = kCounterFibers + kCounterThreads + kArrivers;
    const int waiters = stress_fibers / 4;
    for (int round = 0; round < kRounds; ++round) {
        spindle::latch l(kSlots);
        std::vector<int> slots(kSlots, 0);
        std::atomic<int> bad{0}, returned{0};
        auto check = [&] {
            for (int s : slots)
                if (s != round + 1) bad.fetch_add(1);
            returned.fetch_add(1);
        };
        std::vector<fiber> fs;
        std::vector<std::thread> ts;
        for (int i = 0; i < waiters; ++i) {
            fs.push_back(sched.spawn([&, i] {
                switch (i % 3) {
                case 0: l.wait(); break;
                case 1: EXPECT_TRUE(l.wait_for(1h)); break;
                default: EXPECT_TRUE(l.wait(std::stop_token{})); break;
                }
                EXPECT_TRUE(l.try_wait());
                check();
            }));
        }
        for (int t = 0; t < 2; ++t) ts.emplace_back([&] {
            l.wait();
            check();
        });
        for (int i = 0; i < kCounterFibers; ++i)
            fs.push_back(sched.spawn([&, i] {
                if (i % 4 == 0) this_fiber::yield();
                slots[static_cast<std::size_t>(i)] = round + 1;
                l.count_down();
            }));
        for (int t = 0; t < kCounterThreads; ++t)
            ts.emplace_back([&, t] {
                slots[static_cast<std::size_t>(kCounterFibers + t)] = round + 1;
                l.count_down();
            });
        for (int a = 0; a < kArrivers; ++a)
            fs.push_back(sched.spawn([&, a] {
                slots[static_cast<std::size_t>(kCounterFibers + kCounterThreads + a)] = round + 1;
                l.arrive_and_wait();
                check();
            }));
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
        EXPECT_EQ(bad.load(), 0);
        EXPECT_EQ(returned.load(), waiters + 2 + kArrivers);
        EXPECT_TRUE(l.try_wait());
        l.wait();  // a fresh waiter passes at once
    }
}

// Thousands of waits with short timeouts and stop requests while the latch
// opens in the middle of them. Every wait returns; a wait that says "open"
// saw the count at zero; the plain waits (which cannot be cancelled) all
// return, so no wake-up was lost; waits that come afterwards pass at once.
TEST_P(LatchStress, CancellationStormLosesNoWakeUp) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    for (auto open_after : {500us, 3000us}) {
        spindle::latch l(2);
        std::atomic<long long> opened_seen{0}, cancelled{0}, bad{0};
        std::atomic<bool> is_open{false};
        constexpr int kStoppable = 64;
        std::vector<std::stop_source> sources(kStoppable);
        std::atomic<bool> finished{false};
        auto body = [&](int i) {
            std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 1u);
            for (int n = 0; n < 3; ++n) {
                bool ok;
                switch ((i + n) % 4) {
                case 0:
                    l.wait();
                    ok = true;
                    break;
                case 1: ok = l.wait(sources[static_cast<std::size_t>(i) % kStoppable].get_token()); break;
                case 2: ok = l.wait_for(std::chrono::microseconds(rng() % 400)); break;
                default:
                    ok = l.wait_until(std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 400));
                    break;
                }
                if (ok) {
                    opened_seen.fetch_add(1, std::memory_order_relaxed);
                    if (!is_open.load()) bad.fetch_add(1);  // open reported before the last count_down
                } else {
                    cancelled.fetch_add(1, std::memory_order_relaxed);
                }
                if (rng() % 4 == 0) this_fiber::yield();
            }
        };
        std::thread stopper([&] {
            for (int round = 0; round < 8 && !finished.load(); ++round)
                for (auto& s : sources) {
                    std::this_thread::sleep_for(10us);
                    s.request_stop();
                }
        });
        auto everyone = start_crowd(sched, {.fibers = stress_fibers, .threads = 3, .first_thread = 1}, body);
        l.count_down();
        std::this_thread::sleep_for(open_after);
        is_open.store(true);  // before the count reaches zero: waits that return true come later
        l.count_down();
        everyone.join();
        finished.store(true);
        stopper.join();
        EXPECT_EQ(bad.load(), 0);
        EXPECT_EQ(opened_seen.load() + cancelled.load(), static_cast<long long>(stress_fibers + 3) * 3);
        EXPECT_GT(opened_seen.load(), 0);
        std::printf("    [%u workers, open after %lld us: %lld saw it open, %lld cancelled]\n", workers,
                    static_cast<long long>(open_after.count()), opened_seen.load(), cancelled.load());
        EXPECT_TRUE(l.try_wait());
        EXPECT_TRUE(l.wait_for(0s));
        fiber late = sched.spawn([&] { l.wait(); });
        late.join();
        EXPECT_LE(l.debug_queue_segments(), 3u);  // nothing kept for the cancelled waiters
    }
}

INSTANTIATE_TEST_SUITE_P(Workers, LatchStress, ::testing::ValuesIn(spindle::test::stress_workers), workers_name);

// Cancelled waits before the opening take themselves off the count; the
// opening resumes only the live ones, and those all get through.
TEST(Latch, StoppedWaitersBeforeOpeningAreSkipped) {
    scheduler sched({.workers = 1});
    spindle::latch l(1);
    std::vector<std::stop_source> src(10);
    std::vector<int> result(10, -1);
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 10; ++i) {
            fs.push_back(fiber([&, i] {
                result[static_cast<std::size_t>(i)] = l.wait(src[static_cast<std::size_t>(i)].get_token()) ? 1 : 0;
            }));
            this_fiber::yield();  // it queues
        }
        for (int i = 0; i < 10; i += 2) src[static_cast<std::size_t>(i)].request_stop();
        for (int i = 0; i < 10; ++i) this_fiber::yield();
        l.count_down();
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(result, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
}

// A waiter destroys the latch as soon as its wait returns, while the
// count_down that opened it may still be in open() (ASan checks).
TEST(Latch, DestroyedRightAfterTheWaitReturns) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kTimes = 200;
#else
    constexpr int kTimes = 2000;
#endif
    scheduler sched({.workers = 2});
    for (int n = 0; n < kTimes; ++n) {
        auto* l = new spindle::latch(1);
        fiber w = sched.spawn([l] {
            l->wait();
            delete l;
        });
        if (n % 2 == 0) std::this_thread::yield();
        l->count_down();  // may still be inside while the waiter deletes
        w.join();
    }
}

TEST(Latch, EdgeCases) {
    static_assert(spindle::latch::max() > 0);
    spindle::latch zero(0);
    EXPECT_TRUE(zero.try_wait());
    zero.wait();
    EXPECT_TRUE(zero.wait_for(0s));
    EXPECT_TRUE(zero.wait(std::stop_token{}));

    spindle::latch l(3);
    EXPECT_FALSE(l.try_wait());
    EXPECT_FALSE(l.wait_for(1ms));
    EXPECT_FALSE(l.wait_until(std::chrono::steady_clock::now() - 1s));
    EXPECT_FALSE(l.wait_until(std::chrono::system_clock::now() + 1ms));
    std::stop_source src;
    src.request_stop();
    EXPECT_FALSE(l.wait(src.get_token()));
    l.count_down(2);
    EXPECT_FALSE(l.try_wait());
    l.count_down(0);
    EXPECT_FALSE(l.try_wait());
    std::thread t([&] { l.arrive_and_wait(); });
    t.join();
    EXPECT_TRUE(l.try_wait());
    EXPECT_TRUE(l.wait(src.get_token()));  // open wins over a stop request

    // arrive_and_wait(n) by several threads opens it for all of them.
    spindle::latch group(6);
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; ++i) ts.emplace_back([&] { group.arrive_and_wait(2); });
    for (auto& th : ts) th.join();
    EXPECT_TRUE(group.try_wait());

    // Threads time out on the futex path; the latch still opens for others.
    spindle::latch gate(1);
    EXPECT_EQ(count_on_threads(4, [&] { return !gate.wait_for(2ms); }), 4);
    std::thread w([&] { gate.wait(); });
    std::this_thread::sleep_for(1ms);
    gate.count_down();
    w.join();
}

#if SPINDLE_DEBUG_CHECKS
TEST(LatchDeathTest, CountDownPastZeroAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::latch l(1);
            l.count_down(2);
        },
        "spindle::latch 0x[0-9a-f]+: count_down\\(2\\) past the remaining count 1");
}

TEST(LatchDeathTest, NegativeCountsAbort) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH({ spindle::latch l(-1); }, "spindle::latch 0x[0-9a-f]+: negative expected count -1");
    EXPECT_DEATH(
        {
            spindle::latch l(2);
            l.count_down(-1);
        },
        "spindle::latch 0x[0-9a-f]+: count_down\\(-1\\) of a negative count");
}

TEST(LatchDeathTest, DestroyingWithWaitersAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(destroy_while_waited_on(new spindle::latch(1), [](auto& l) { l.wait(); }, 20ms),
        "spindle::latch 0x[0-9a-f]+ destroyed with 1 waiters");
}
#endif

}  // namespace

// ---- the last reference frees ----------------------------------------------
//
// (tests/support/last_reference.hpp.) A caller whose wait returned may
// destroy the latch at once, even while the count_down that opened it is
// still resuming others.

namespace {

// Every party counts down once. Every other one (and the first) then waits
// with timed waits of a few microseconds, retried, and holds a reference;
// the rest leave right after their count_down. The last waiter deletes the
// latch as soon as its wait returned.
struct latch_object : counted_object<latch_object> {
    explicit latch_object(int n) : l(n), waiters((n + 1) / 2) {}
    spindle::latch l;
    std::atomic<int> waiters;
    std::atomic<int> turn{0};
};

class LatchLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(LatchLastReferenceStress, TimedWaitsRaceTheOpeningCountDown) {
    const unsigned workers = GetParam();
    run_chain<latch_object>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                            [](latch_object& o, std::minstd_rand& rng) {
                                const bool waits = o.turn.fetch_add(1) % 2 == 0;
                                linger(rng);
                                o.l.count_down();
                                if (!waits) return;
                                while (!o.l.wait_for(short_timeout(rng))) {
                                }
                                if (o.waiters.fetch_sub(1) == 1) delete &o;
                            });
}

INSTANTIATE_TEST_SUITE_P(Workers, LatchLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
