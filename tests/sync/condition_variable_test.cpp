// spindle::condition_variable: producer/consumer stress over worker counts
// and policies with fibers and threads mixed, FIFO notification through wait
// morphing, notify with the mutex free, timeouts and stop tokens (no lost
// wake-up, no leaked waiter), misuse.
#include <gtest/gtest.h>

// Locks taken and released across lambdas and through std::unique_lock:
// Clang's static lock analysis cannot follow that (it checks the library).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/condition_variable.hpp>
#include <spindle/sync/mutex.hpp>

#include "../support/cv_storm.hpp"
#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"

namespace {

using namespace spindle::test;
using spindle::condition_variable;

#if SPINDLE_TSAN || SPINDLE_ASAN
constexpr int kItemsPerProducer = 300;
#else
constexpr int kItemsPerProducer = 3000;
#endif

using StressParam = spindle::test::workers_and_policy;

class CondVarStress : public ::testing::TestWithParam<StressParam> {};

// A bounded queue: producers wait for room, consumers for items. Half the
// notifies happen under the lock (morphing onto a held mutex), half after
// it (the mutex may be free: the waiter gets it at once).
TEST_P(CondVarStress, BoundedQueueLosesNothing) {
    const auto [workers, policy] = GetParam();
    scheduler sched(stress_options(workers));
    spindle::mutex m(policy);
    condition_variable not_full, not_empty;
    std::deque<long long> q;  // guarded by m
    constexpr std::size_t kCapacity = 4;
    constexpr int kFiberProducers = 12, kFiberConsumers = 12, kThreadProducers = 1, kThreadConsumers = 1;
    constexpr int kProducers = kFiberProducers + kThreadProducers;
    int producers_left = kProducers;  // guarded by m
    std::atomic<long long> consumed_sum{0}, consumed_count{0};

    auto produce = [&](int p) {
        for (int i = 0; i < kItemsPerProducer; ++i) {
            long long v = static_cast<long long>(p) * kItemsPerProducer + i + 1;
            std::unique_lock lk(m);
            not_full.wait(lk, [&] { return q.size() < kCapacity; });
            q.push_back(v);
            if (i % 2 == 0) {
                not_empty.notify_one();
                lk.unlock();
            } else {
                lk.unlock();
                not_empty.notify_one();
            }
        }
        std::lock_guard g(m);
        if (--producers_left == 0) not_empty.notify_all();
    };
    auto consume = [&](int c) {
        for (;;) {
            std::unique_lock lk(m);
            not_empty.wait(lk, [&] { return !q.empty() || producers_left == 0; });
            if (q.empty()) return;
            long long v = q.front();
            q.pop_front();
            if (c % 2 == 0) {
                not_full.notify_one();
                lk.unlock();
            } else {
                lk.unlock();
                not_full.notify_one();
            }
            consumed_sum.fetch_add(v, std::memory_order_relaxed);
            consumed_count.fetch_add(1, std::memory_order_relaxed);
        }
    };
    std::vector<fiber> fs;
    for (int c = 0; c < kFiberConsumers; ++c) fs.push_back(sched.spawn([&, c] { consume(c); }));
    for (int p = 0; p < kFiberProducers; ++p) fs.push_back(sched.spawn([&, p] { produce(p); }));
    std::vector<std::thread> ts;
    for (int c = 0; c < kThreadConsumers; ++c) ts.emplace_back([&, c] { consume(kFiberConsumers + c); });
    for (int p = 0; p < kThreadProducers; ++p) ts.emplace_back([&, p] { produce(kFiberProducers + p); });
    for (auto& f : fs) f.join();
    for (auto& t : ts) t.join();
    const long long n = static_cast<long long>(kProducers) * kItemsPerProducer;
    EXPECT_EQ(consumed_count.load(), n);
    EXPECT_EQ(consumed_sum.load(), n * (n + 1) / 2);
    EXPECT_TRUE(q.empty());
}

// The cancellation storm of tests/support/cv_storm.hpp: every kind of wait,
// fibers and threads mixed, timeouts and stop requests; no ticket taken
// twice, no notification lost, every wait returns holding the lock.
TEST_P(CondVarStress, CancellationStormLosesNoWakeUp) {
    const auto [workers, policy] = GetParam();
    scheduler sched(stress_options(workers));
    spindle::mutex m(policy);
    condition_variable cv;
    const auto c = run_cv_cancellation_storm(
        sched, m, cv, {.fibers = 64, .threads = 3, .takes = 8, .consumer_seed = 7, .producer_seed = 11});
    std::printf("    [%u workers, %s: %lld taken, %lld waits cancelled]\n", workers, to_string(policy), c.taken,
                c.cancelled);
}

INSTANTIATE_TEST_SUITE_P(WorkersAndPolicies, CondVarStress,
                         ::testing::ValuesIn(spindle::test::workers_and_policies()),
                         spindle::test::workers_and_policy_name);

class CondVarPolicy : public ::testing::TestWithParam<handoff> {};

// notify_all under the lock moves every waiter onto the mutex queue in the
// order they waited; they then get the mutex one by one, in that order.
TEST_P(CondVarPolicy, NotifyAllUnderTheLockKeepsFifoOrder) {
    scheduler sched({.workers = 1});
    spindle::mutex m(GetParam());
    condition_variable cv;
    bool go = false;
    std::vector<int> waited, woke;  // one worker, and m
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 20; ++i) {
            fs.push_back(fiber([&, i] {
                std::unique_lock lk(m);
                waited.push_back(i);
                cv.wait(lk, [&] { return go; });
                EXPECT_TRUE(lk.owns_lock());
                woke.push_back(i);
            }));
        }
        while (waited.size() < 20) this_fiber::yield();
        {
            std::lock_guard g(m);
            go = true;
            cv.notify_all();
            // Nobody gets past wait() while we hold the mutex.
            for (int k = 0; k < 10; ++k) this_fiber::yield();
            EXPECT_TRUE(woke.empty());
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(woke, waited);
}

// notify with the mutex free: the waiter is handed the mutex and returns
// from wait() holding it (the notifier sees it taken before the waiter lets
// go); each notify_one wakes exactly one waiter, the oldest.
TEST_P(CondVarPolicy, NotifyWithTheMutexFreeHandsItOver) {
    scheduler sched({.workers = 2});
    spindle::mutex m(GetParam());
    condition_variable cv;
    constexpr int kWaiters = 8;
    int ready = 0;                 // guarded by m
    std::vector<int> queued;       // guarded by m: the order they waited in
    std::atomic<int> woke{0}, ack{0}, done{0};
    std::vector<int> woke_order(kWaiters, -1);
    std::vector<fiber> fs;
    for (int i = 0; i < kWaiters; ++i) {
        fs.push_back(sched.spawn([&, i] {
            std::unique_lock lk(m);
            ++ready;
            queued.push_back(i);
            cv.wait(lk);  // no predicate: each notify_one wakes exactly one
            int me = woke.fetch_add(1);
            woke_order[static_cast<std::size_t>(me)] = i;
            while (ack.load() <= me) this_fiber::yield();  // keep holding m until checked
            lk.unlock();
            done.fetch_add(1);
        }));
    }
    for (;;) {
        std::lock_guard g(m);
        if (ready == kWaiters) break;
    }
    int held_by_waiter = 0;
    for (int i = 0; i < kWaiters; ++i) {
        while (done.load() < i) std::this_thread::sleep_for(50us);
        // The mutex is free now (every waiter is on the cv queue or done).
        cv.notify_one();
        while (woke.load() < i + 1) std::this_thread::sleep_for(50us);
        if (m.try_lock()) {
            m.unlock();  // wrong: the woken waiter should hold it
        } else {
            ++held_by_waiter;
        }
        ack.fetch_add(1);
    }
    for (auto& f : fs) f.join();
    EXPECT_EQ(held_by_waiter, kWaiters);
    EXPECT_EQ(woke.load(), kWaiters);
    EXPECT_EQ(woke_order, queued);
}

TEST_P(CondVarPolicy, WaitForTimesOutHoldingTheLockAndLeavesNoWaiter) {
    scheduler sched({.workers = 2});
    spindle::mutex m(GetParam());
    condition_variable cv;
    auto check = [&] {
        std::unique_lock lk(m);
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(cv.wait_for(lk, 20ms), std::cv_status::timeout);
        EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
        EXPECT_TRUE(lk.owns_lock());
        EXPECT_FALSE(cv.wait_for(lk, 1ms, [] { return false; }));
        EXPECT_TRUE(cv.wait_until(lk, std::chrono::system_clock::now() + 1ms, [] { return true; }));
    };
    sched.spawn(check).join();
    check();  // a plain thread
    // Nobody is left queued: a notify now reaches a fresh waiter only.
    bool flag = false;
    fiber f = sched.spawn([&] {
        std::unique_lock lk(m);
        EXPECT_TRUE(cv.wait_for(lk, 10s, [&] { return flag; }));
    });
    std::this_thread::sleep_for(5ms);
    {
        std::lock_guard g(m);
        flag = true;
        cv.notify_one();
    }
    f.join();
    // ~condition_variable checks, in debug builds, that nobody is queued.
}

// Consumers with short timeouts race with notifies (a timeout firing as a
// notify takes the same waiter): every token is consumed exactly once,
// consumers without a timeout are still woken at the end, and every wait
// returns holding the mutex. Under ASan a double unpark of a waiter whose
// node is gone, and in debug builds a node left queued (checked by
// ~condition_variable), would end the test.
TEST_P(CondVarPolicy, TimeoutsRacingWithNotifiesLoseNothing) {
    scheduler sched({.workers = 2});
    spindle::mutex m(GetParam());
    condition_variable cv;
    int tokens = 0;  // guarded by m
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kTokens = 1000;
#else
    constexpr int kTokens = 5000;
#endif
    constexpr int kConsumers = 16;
    std::atomic<int> taken{0};
    std::vector<fiber> fs;
    for (int c = 0; c < kConsumers; ++c) {
        fs.push_back(sched.spawn([&, c] {
            for (;;) {
                std::unique_lock lk(m);
                if (c % 2 == 0) {
                    while (!cv.wait_for(lk, std::chrono::microseconds(50 + c * 10), [&] { return tokens != 0; })) {
                        if (taken.load() == kTokens) return;
                    }
                } else {
                    cv.wait(lk, [&] { return tokens != 0 || taken.load() == kTokens; });
                }
                if (tokens == 0) return;  // all taken
                --tokens;
                if (taken.fetch_add(1) + 1 == kTokens) cv.notify_all();
            }
        }));
    }
    for (int i = 0; i < kTokens; ++i) {
        std::lock_guard g(m);
        ++tokens;
        cv.notify_one();
    }
    for (auto& f : fs) f.join();
    EXPECT_EQ(taken.load(), kTokens);
}

TEST_P(CondVarPolicy, StopTokenEndsAWait) {
    scheduler sched({.workers = 2});
    spindle::mutex m(GetParam());
    condition_variable cv;
    std::stop_source src;
    std::atomic<int> waiting{0};
    auto waiter = [&] {
        std::unique_lock lk(m);
        waiting.fetch_add(1);
        EXPECT_FALSE(cv.wait(lk, src.get_token(), [] { return false; }));
        EXPECT_TRUE(lk.owns_lock());
        EXPECT_FALSE(cv.wait_for(lk, src.get_token(), 10s, [] { return false; }));  // already stopped
    };
    std::vector<fiber> fs;
    for (int i = 0; i < 4; ++i) fs.push_back(sched.spawn(waiter));
    std::thread t(waiter);
    while (waiting.load() < 5) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(5ms);
    src.request_stop();
    for (auto& f : fs) f.join();
    t.join();
    // A fiber's own stop token, through this_fiber::get_stop_token().
    fiber f = sched.spawn([&] {
        std::unique_lock lk(m);
        EXPECT_FALSE(cv.wait(lk, this_fiber::get_stop_token(), [] { return false; }));
    });
    std::this_thread::sleep_for(5ms);
    f.request_stop();
    f.join();
}

INSTANTIATE_TEST_SUITE_P(Policies, CondVarPolicy, ::testing::ValuesIn(spindle::test::all_policies),
                         spindle::test::policy_name);

#if SPINDLE_DEBUG_CHECKS
using CondVarDeathTest = ::testing::Test;

TEST(CondVarDeathTest, MisuseAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::mutex m;
            condition_variable cv;
            std::unique_lock lk(m, std::defer_lock);
            cv.wait(lk);
        },
        "spindle::condition_variable 0x[0-9a-f]+: wait\\(\\) with a lock that does not own its mutex");
    EXPECT_DEATH(
        {
            auto* m = new spindle::mutex;
            auto* cv = new condition_variable;
            std::thread([=] {
                std::unique_lock lk(*m);
                cv->wait(lk);
            }).detach();
            std::this_thread::sleep_for(50ms);
            std::lock_guard g(*m);  // the waiter has released it: it waits
            delete cv;
        },
        "spindle::condition_variable 0x[0-9a-f]+ destroyed while fibers or threads wait on it");
    EXPECT_DEATH(
        {
            spindle::mutex m1;
            spindle::mutex m2;
            condition_variable cv;
            std::thread([&] {
                std::unique_lock lk(m1);
                cv.wait(lk);
            }).detach();
            std::this_thread::sleep_for(50ms);
            std::unique_lock lk(m2);
            cv.wait(lk);
        },
        "spindle::condition_variable 0x[0-9a-f]+: waits with two different mutexes");
}
#endif

}  // namespace

// ---- the last reference unlocks and frees ----------------------------------
//
// (tests/support/last_reference.hpp.) An object holds a mutex, a condition
// variable and a count of references guarded by the mutex. Each party
// arrives under the mutex, waits (timed, a few microseconds) for all to
// have arrived or not, notifies some or all, drops its reference and
// unlocks; the last one deletes the object -- mutex, condition variable
// and all -- right after its unlock returns, while timeouts race the
// notifies, the wait morphing and the handoffs.

namespace {

struct cv_object : counted_object<cv_object> {
    explicit cv_object(int n) : refs(n), parties(n) {}
    spindle::mutex m;
    condition_variable cv;
    int refs;         // guarded by m
    const int parties;
    int arrived = 0;  // guarded by m
};

class CondVarLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(CondVarLastReferenceStress, TimedWaitsRaceTheLastUnlock) {
    const unsigned workers = GetParam();
    run_chain<cv_object>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                         [](cv_object& o, std::minstd_rand& rng) {
                             linger(rng);
                             std::unique_lock lk(o.m);
                             if (++o.arrived == o.parties) o.cv.notify_all();
                             else if (rng() % 2 == 0)
                                 (void)o.cv.wait_for(lk, short_timeout(rng), [&] { return o.arrived == o.parties; });
                             linger(rng);
                             const bool last = --o.refs == 0;
                             if (rng() % 2 == 0) o.cv.notify_one();
                             lk.unlock();
                             if (last) delete &o;
                         });
}

INSTANTIATE_TEST_SUITE_P(Workers, CondVarLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
