// spindle::condition_variable_any: a bounded queue over spindle::cqs_mutex,
// std::mutex and spindle::mutex with fibers and threads mixed, over worker
// counts; FIFO notification; timeouts and stop tokens, alone and in a
// storm (no lost wake-up, every wait returns holding the lock); a
// std::shared_lock as the lock; misuse.
#include <gtest/gtest.h>

// Locks taken and released through std::unique_lock and across lambdas:
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
#include <shared_mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include <spindle/sync/condition_variable_any.hpp>
#include <spindle/sync/cqs_mutex.hpp>
#include <spindle/sync/mutex.hpp>

#include "../support/cv_storm.hpp"
#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"

namespace {

using namespace spindle::test;
using namespace std::chrono_literals;
using spindle::condition_variable_any;

enum class lock_kind { cqs_mutex, std_mutex, spindle_mutex };

// Runs f.operator()<M>() with the mutex type of `kind`.
template <class F>
void with_mutex(lock_kind kind, F&& f) {
    switch (kind) {
    case lock_kind::cqs_mutex: f.template operator()<spindle::cqs_mutex>(); break;
    case lock_kind::std_mutex: f.template operator()<std::mutex>(); break;
    case lock_kind::spindle_mutex: f.template operator()<spindle::mutex>(); break;
    }
}

struct any_param {
    lock_kind kind;
    unsigned workers;
};
std::vector<any_param> any_params() {
    std::vector<any_param> v;
    for (auto k : {lock_kind::cqs_mutex, lock_kind::std_mutex, lock_kind::spindle_mutex})
        for (unsigned w : stress_workers) v.push_back({k, w});
    return v;
}
std::string any_name(const ::testing::TestParamInfo<any_param>& i) {
    const char* k = i.param.kind == lock_kind::cqs_mutex   ? "cqs_mutex"
                    : i.param.kind == lock_kind::std_mutex ? "std_mutex"
                                                           : "spindle_mutex";
    return std::string(k) + "_" + std::to_string(i.param.workers) + "workers";
}

class CondVarAnyStress : public ::testing::TestWithParam<any_param> {};

// A bounded queue: producers wait for room, consumers for items, half the
// notifies under the lock and half after it.
TEST_P(CondVarAnyStress, BoundedQueueLosesNothing) {
    const auto [kind, workers] = GetParam();
    with_mutex(kind, [&]<class M>() {
        scheduler sched(stress_options(workers));
        M m;
        condition_variable_any not_full, not_empty;
        std::deque<long long> q;  // guarded by m
        constexpr std::size_t kCapacity = 4;
        constexpr int kItems = 500, kFiberProducers = 6, kFiberConsumers = 6;
        constexpr int kProducers = kFiberProducers + 1;  // and one thread
        int producers_left = kProducers;                 // guarded by m
        std::atomic<long long> sum{0}, count{0};
        auto produce = [&](int p) {
            for (int i = 0; i < kItems; ++i) {
                const long long v = static_cast<long long>(p) * kItems + i + 1;
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
        auto consume = [&] {
            for (;;) {
                std::unique_lock lk(m);
                not_empty.wait(lk, [&] { return !q.empty() || producers_left == 0; });
                if (q.empty()) return;
                const long long v = q.front();
                q.pop_front();
                lk.unlock();
                not_full.notify_one();
                sum.fetch_add(v, std::memory_order_relaxed);
                count.fetch_add(1, std::memory_order_relaxed);
            }
        };
        std::vector<fiber> fs;
        for (int c = 0; c < kFiberConsumers; ++c) fs.push_back(sched.spawn(consume));
        for (int p = 0; p < kFiberProducers; ++p) fs.push_back(sched.spawn([&, p] { produce(p); }));
        std::thread tc(consume), tp([&] { produce(kFiberProducers); });
        for (auto& f : fs) f.join();
        tc.join();
        tp.join();
        const long long n = static_cast<long long>(kProducers) * kItems;
        EXPECT_EQ(count.load(), n);
        EXPECT_EQ(sum.load(), n * (n + 1) / 2);
    });
}

// The cancellation storm of tests/support/cv_storm.hpp, over each lock:
// every kind of wait, fibers and threads mixed, timeouts and stop requests;
// no ticket taken twice, no notification lost, every wait returns holding
// the lock.
TEST_P(CondVarAnyStress, CancellationStormLosesNoWakeUp) {
    const auto [kind, workers] = GetParam();
    with_mutex(kind, [&]<class M>() {
        scheduler sched(stress_options(workers));
        M m;
        condition_variable_any cv;
        (void)run_cv_cancellation_storm(sched, m, cv,
                                        {.fibers = 48, .threads = 3, .takes = 6, .consumer_seed = 9, .producer_seed = 13});
    });
}

INSTANTIATE_TEST_SUITE_P(LocksAndWorkers, CondVarAnyStress, ::testing::ValuesIn(any_params()), any_name);

// One worker gives a known queueing order: notify_one wakes the oldest.
TEST(CondVarAny, NotifyOneWakesTheOldest) {
    scheduler sched({.workers = 1});
    spindle::cqs_mutex m;
    condition_variable_any cv;
    std::vector<int> order;  // guarded by m
    int go = 0;              // guarded by m
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 5; ++i) {
            fs.push_back(fiber([&, i] {
                std::unique_lock lk(m);
                cv.wait(lk, [&] { return go > i; });
                order.push_back(i);
            }));
            this_fiber::yield();  // it queues
        }
        for (int i = 0; i < 5; ++i) {
            {
                std::lock_guard g(m);
                ++go;
            }
            cv.notify_one();
            for (int k = 0; k < 5; ++k) this_fiber::yield();
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

// Timed out and stopped waits return holding the lock and leave nothing
// queued; a later notify then wakes nobody stale.
TEST(CondVarAny, TimeoutAndStopReturnHoldingTheLock) {
    scheduler sched({.workers = 2});
    std::mutex m;
    condition_variable_any cv;
    {
        std::unique_lock lk(m);
        EXPECT_EQ(cv.wait_for(lk, 2ms), std::cv_status::timeout);
        EXPECT_TRUE(lk.owns_lock());
        EXPECT_FALSE(cv.wait_until(lk, std::chrono::steady_clock::now() + 1ms, [] { return false; }));
        EXPECT_TRUE(lk.owns_lock());
    }
    std::stop_source src;
    std::atomic<int> result{-1};
    std::atomic<bool> waiting{false};
    fiber f = sched.spawn([&] {
        std::unique_lock lk(m);
        waiting.store(true);
        result.store(cv.wait(lk, src.get_token(), [] { return false; }) ? 1 : 0);
        if (!lk.owns_lock()) result.store(2);
    });
    while (!waiting.load()) std::this_thread::yield();
    std::this_thread::sleep_for(2ms);
    src.request_stop();
    f.join();
    EXPECT_EQ(result.load(), 0);
    cv.notify_all();  // nobody left: a no-op
}

// A std::shared_lock is a lock too: readers wait on a condition over data
// a writer changes under the exclusive lock.
TEST(CondVarAny, WorksWithASharedLock) {
    std::shared_mutex rw;
    condition_variable_any cv;
    int value = 0;  // guarded by rw
    std::vector<std::thread> readers;
    std::atomic<int> seen{0};
    for (int i = 0; i < 3; ++i)
        readers.emplace_back([&] {
            std::shared_lock lk(rw);
            cv.wait(lk, [&] { return value == 42; });
            seen.fetch_add(1);
        });
    std::this_thread::sleep_for(2ms);
    {
        std::unique_lock lk(rw);
        value = 42;
    }
    cv.notify_all();
    for (auto& t : readers) t.join();
    EXPECT_EQ(seen.load(), 3);
}

#if SPINDLE_DEBUG_CHECKS
TEST(CondVarAnyDeathTest, DestroyingWithWaitersAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            auto* cv = new condition_variable_any;
            std::mutex m;
            std::atomic<bool> waiting{false};
            std::thread t([&] {
                std::unique_lock lk(m);
                waiting.store(true);
                cv->wait(lk);
            });
            while (!waiting.load()) std::this_thread::yield();
            std::this_thread::sleep_for(20ms);
            delete cv;
            t.join();
        },
        "spindle::condition_variable_any 0x[0-9a-f]+ destroyed while fibers or threads wait on it");
}
#endif

}  // namespace

// ---- the last reference unlocks and frees ----------------------------------
//
// (tests/support/last_reference.hpp.) As condition_variable's test, with a
// cqs_mutex: each party arrives under the lock, waits (timed, a few
// microseconds) for the others or not, notifies, drops its reference and
// unlocks; the last one deletes the object right after its unlock returns.

namespace {

struct cv_any_object : counted_object<cv_any_object> {
    explicit cv_any_object(int n) : refs(n), parties(n) {}
    spindle::cqs_mutex m;
    condition_variable_any cv;
    int refs;         // guarded by m
    const int parties;
    int arrived = 0;  // guarded by m
};

class CondVarAnyLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(CondVarAnyLastReferenceStress, TimedWaitsRaceTheLastUnlock) {
    const unsigned workers = GetParam();
    run_chain<cv_any_object>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                             [](cv_any_object& o, std::minstd_rand& rng) {
                                 linger(rng);
                                 std::unique_lock lk(o.m);
                                 if (++o.arrived == o.parties) o.cv.notify_all();
                                 else if (rng() % 2 == 0)
                                     (void)o.cv.wait_for(lk, short_timeout(rng),
                                                         [&] { return o.arrived == o.parties; });
                                 linger(rng);
                                 const bool last = --o.refs == 0;
                                 if (rng() % 2 == 0) o.cv.notify_one();
                                 lk.unlock();
                                 if (last) delete &o;
                             });
}

INSTANTIATE_TEST_SUITE_P(Workers, CondVarAnyLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
