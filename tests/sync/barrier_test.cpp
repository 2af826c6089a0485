// spindle::barrier: phases over 1, 2, 4 and 8 workers with fiber and thread
// parties mixed (the completion function runs once per phase, after every
// arrival and before anyone is released); split arrive / wait; arrive(n);
// arrive_and_drop; old tokens; destruction while the completer still
// resumes; misuse aborts in debug builds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/barrier.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"

namespace {

using namespace spindle::test;

#if SPINDLE_TSAN || SPINDLE_ASAN
constexpr int kFiberParties = 60;
constexpr int kPhases = 30;
#else
constexpr int kFiberParties = 200;
constexpr int kPhases = 100;
#endif

class BarrierStress : public ::testing::TestWithParam<unsigned> {};

// Each party writes its slot for the phase (plain ints), arrives, and after
// its wait reads the completion count; the completion function checks that
// every slot holds this phase (every arrival came before it) and bumps the
// count (plain int: it runs alone).
TEST_P(BarrierStress, PhasesAndCompletionFunction) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    constexpr int kThreadParties = 2;
    constexpr int kParties = kFiberParties + kThreadParties;
    std::vector<int> slots(kParties, -1);
    int completions = 0;
    int bad_completions = 0;
    std::atomic<int> bad{0};
    auto on_phase = [&]() noexcept {
        for (int s : slots)
            if (s != completions) ++bad_completions;
        ++completions;
    };
    spindle::barrier sync(kParties, on_phase);
    auto party = [&](int i) {
        for (int p = 0; p < kPhases; ++p) {
            slots[static_cast<std::size_t>(i)] = p;
            if ((i + p) % 3 == 0) {
                auto token = sync.arrive();
                if ((i + p) % 2 == 0) this_fiber::yield();
                sync.wait(std::move(token));
            } else {
                sync.arrive_and_wait();
            }
            if (completions != p + 1) bad.fetch_add(1);  // released only after the completion step
            if ((i * 7 + p) % 11 == 0) this_fiber::yield();
        }
    };
    run_crowd(sched, {.fibers = kFiberParties, .threads = kThreadParties, .first_thread = kFiberParties}, party);
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(bad_completions, 0);
    EXPECT_EQ(completions, kPhases);
}

// Parties leave one by one with arrive_and_drop; the others go on with
// fewer parties per phase.
TEST_P(BarrierStress, PartiesDropOut) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    constexpr int kParties = 16;
    std::atomic<int> completions{0};
    spindle::barrier sync(kParties, [&]() noexcept { completions.fetch_add(1, std::memory_order_relaxed); });
    std::atomic<int> bad{0};
    std::vector<fiber> fs;
    std::vector<std::thread> ts;
    auto party = [&](int i) {
        // Party i takes part in phases 0 .. i, and drops in phase i.
        for (int p = 0; p < i; ++p) {
            sync.arrive_and_wait();
            if (completions.load() < p + 1) bad.fetch_add(1);
        }
        sync.arrive_and_drop();
    };
    for (int i = 0; i < kParties; ++i) {
        if (i % 4 == 3) ts.emplace_back([&party, i] { party(i); });
        else fs.push_back(sched.spawn([&party, i] { party(i); }));
    }
    for (auto& f : fs) f.join();
    for (auto& t : ts) t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(completions.load(), kParties);  // phases 0 .. 15, the last with one party
}

// Waits cancelled by stop requests and timeouts while phases go on: a
// cancelled party's arrival stands (its phase completes without it
// waiting), it waits again on the same token and finds the phase over, no
// plain wait is left hanging (every wake-up reached someone), the waiter
// count ends at zero and the queue keeps no segment for the cancelled ones.
TEST_P(BarrierStress, CancellationStormLosesNoWakeUp) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    constexpr int kThreadParties = 3;
    constexpr int kParties = kFiberParties / 2 + kThreadParties;
    std::atomic<int> completions{0};
    spindle::barrier sync(kParties, [&]() noexcept { completions.fetch_add(1, std::memory_order_relaxed); });
    stop_slots sources;
    std::atomic<bool> stopping{false};
    std::atomic<long long> cancelled{0}, refused_or_released{0}, bad{0};
    auto party = [&](int i) {
        std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 3u);
        for (int p = 0; p < kPhases; ++p) {
            auto token = sync.arrive();
            bool done;
            switch (rng() % 4) {
            case 0:
                sync.wait(std::move(token));
                done = true;
                break;
            case 1:
                done = sync.wait_for(token, std::chrono::microseconds(rng() % 200));
                break;
            default:
                done = sync.wait(token, sources.token(static_cast<std::size_t>(i)));
                break;
            }
            (done ? refused_or_released : cancelled).fetch_add(1, std::memory_order_relaxed);
            if (!done) {
                // The arrival stands; the token is still good.
                sync.wait(std::move(token));
            }
            if (completions.load() < p + 1) bad.fetch_add(1);  // released only after the phase completed
        }
    };
    std::thread stopper([&] {
        while (!stopping.load()) sources.stop_one_round(std::chrono::microseconds(20));
    });
    run_crowd(sched, {.fibers = kParties - kThreadParties, .threads = kThreadParties}, party);
    stopping.store(true);
    stopper.join();
    std::printf("    [%u workers: %lld waits cancelled, %lld ended with the phase]\n", workers, cancelled.load(),
                refused_or_released.load());
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(completions.load(), kPhases);
    EXPECT_LE(sync.debug_queue_segments(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Workers, BarrierStress, ::testing::ValuesIn(spindle::test::stress_workers), workers_name);

// Stops racing the completion of a phase: some land after complete()
// counted their waiter and before its resume reached the cell, which the
// hook then refuses (the wait returns true: the phase was over). Rounds
// until that has happened; no round may lose a wake-up or leave one behind.
TEST(Barrier, StopsRacingACompletionAreRefused) {
    scheduler sched({.workers = 2});
    constexpr int kFibers = 48, kThreads = 2, kWaiters = kFibers + kThreads;
    spindle::barrier<> sync(kWaiters + 1);
    int round = 0;
    std::atomic<int> bad{0};
    for (; round < 300 && sync.debug_refused_waits() == 0; ++round) {
        std::vector<std::stop_source> src(kWaiters);
        std::atomic<int> arrived{0};
        auto party = [&](int i) {
            auto token = sync.arrive();
            arrived.fetch_add(1);
            if (!sync.wait(token, src[static_cast<std::size_t>(i)].get_token())) {
                sync.wait(std::move(token));  // the arrival stands; wait for the phase to end
            }
            if (!sync.try_wait(token)) bad.fetch_add(1);
        };
        std::vector<fiber> fs;
        for (int i = 0; i < kFibers; ++i) fs.push_back(sched.spawn([&, i] { party(i); }));
        std::vector<std::thread> ts;
        for (int i = kFibers; i < kWaiters; ++i) ts.emplace_back([&, i] { party(i); });
        while (arrived.load() < kWaiters) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // let them queue (either way is fine)
        std::thread stopper([&] {
            for (int i = kWaiters - 1; i >= 0; --i) src[static_cast<std::size_t>(i)].request_stop();
        });
        sync.arrive_and_wait();  // the last arrival completes the phase
        stopper.join();
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
    }
    std::printf("    [%d rounds, %llu waits refused]\n", round,
                static_cast<unsigned long long>(sync.debug_refused_waits()));
    EXPECT_EQ(bad.load(), 0);
    EXPECT_GT(sync.debug_refused_waits(), 0u);
    EXPECT_LE(sync.debug_queue_segments(), 3u);
}

// A timed wait that times out returns false; the arrival stands, so the
// phase completes when the other party arrives, and the same token then
// reports it over.
TEST(Barrier, TimedWaitTimesOutAndTheArrivalStands) {
    int completions = 0;
    spindle::barrier sync(2, [&]() noexcept { ++completions; });
    auto token = sync.arrive();
    EXPECT_FALSE(sync.try_wait(token));
    EXPECT_FALSE(sync.wait_for(token, std::chrono::milliseconds(5)));
    EXPECT_FALSE(sync.wait_until(token, std::chrono::steady_clock::now() - std::chrono::seconds(1)));
    std::thread other([&] { sync.arrive_and_wait(); });  // completes phase 0 at once
    other.join();
    EXPECT_EQ(completions, 1);
    EXPECT_TRUE(sync.try_wait(token));
    EXPECT_TRUE(sync.wait_for(token, std::chrono::milliseconds(0)));
    sync.wait(std::move(token));
    EXPECT_LE(sync.debug_queue_segments(), 2u);
}

// A fiber and a thread each stopped while waiting return false; the phase
// then completes with their arrivals counted, and a late stop after the
// release does not undo a successful wait.
TEST(Barrier, StoppedWaitsReturnFalseAndTheArrivalsStand) {
    scheduler sched({.workers = 2});
    int completions = 0;
    spindle::barrier sync(3, [&]() noexcept { ++completions; });
    std::stop_source fiber_stop, thread_stop;
    std::atomic<int> results{0};
    std::atomic<int> waiting{0};
    fiber f = sched.spawn([&] {
        auto token = sync.arrive();
        waiting.fetch_add(1);
        if (!sync.wait(token, fiber_stop.get_token())) results.fetch_add(1);
        sync.wait(std::move(token));
    });
    std::thread t([&] {
        auto token = sync.arrive();
        waiting.fetch_add(1);
        if (!sync.wait(token, thread_stop.get_token())) results.fetch_add(10);
        sync.wait(std::move(token));
    });
    while (waiting.load() < 2) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    fiber_stop.request_stop();
    thread_stop.request_stop();
    while (results.load() != 11) std::this_thread::yield();
    EXPECT_EQ(completions, 0);
    sync.arrive_and_wait();  // the third arrival completes the phase
    f.join();
    t.join();
    EXPECT_EQ(completions, 1);
    // A stop token that is already stopped still sees a phase that is over.
    auto token = sync.arrive();
    std::thread a([&] { sync.arrive_and_wait(); });
    std::thread b([&] { sync.arrive_and_wait(); });
    a.join();
    b.join();
    EXPECT_TRUE(sync.wait(token, fiber_stop.get_token()));
    EXPECT_EQ(completions, 2);
}

TEST(Barrier, ArriveManyAndOldTokens) {
    static_assert(spindle::barrier<>::max() >= 0x7fffffff);
    int completions = 0;
    spindle::barrier sync(4, [&]() noexcept { ++completions; });
    auto first = sync.arrive(3);  // three of the four arrivals
    EXPECT_EQ(completions, 0);
    std::thread t([&] { sync.arrive_and_wait(); });  // the fourth completes the phase
    sync.wait(std::move(first));
    t.join();
    EXPECT_EQ(completions, 1);
    // The next phase: a token of it, then its completion, then a late wait.
    auto a = sync.arrive(2);
    auto b = sync.arrive(2);  // completes phase 1 here, in this thread
    EXPECT_EQ(completions, 2);
    sync.wait(std::move(a));  // over: returns at once
    sync.wait(std::move(b));
    // A barrier of one: every arrival completes a phase.
    spindle::barrier<> one(1);
    for (int i = 0; i < 5; ++i) one.arrive_and_wait();
}

// A waiter of phase p that is slow to reach the queue while the others go
// on to p + 1: wake-ups taken by the wrong waiter are passed on.
TEST(Barrier, SplitArriveWaitAcrossPhasesWithThreads) {
    constexpr int kParties = 4;
    std::atomic<int> completions{0};
    spindle::barrier sync(kParties, [&]() noexcept { completions.fetch_add(1); });
    std::vector<std::thread> ts;
    std::atomic<int> bad{0};
    for (int t = 0; t < kParties; ++t)
        ts.emplace_back([&, t] {
            for (int p = 0; p < 200; ++p) {
                auto token = sync.arrive();
                if ((t + p) % 3 == 0) std::this_thread::yield();
                sync.wait(std::move(token));
                if (completions.load() < p + 1) bad.fetch_add(1);
            }
        });
    for (auto& th : ts) th.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(completions.load(), 200);
}

// The completing party leaves with arrive_and_drop while the other's wait
// returns and destroys the barrier (ASan checks the completer is done).
TEST(Barrier, DestroyedWhileTheCompleterStillResumes) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kTimes = 200;
#else
    constexpr int kTimes = 2000;
#endif
    scheduler sched({.workers = 2});
    for (int n = 0; n < kTimes; ++n) {
        auto* b = new spindle::barrier<>(2);
        fiber w = sched.spawn([b] {
            b->arrive_and_wait();
            delete b;
        });
        if (n % 2 == 0) std::this_thread::yield();
        b->arrive_and_drop();  // may be the completer, still resuming while w deletes
        w.join();
    }
}

#if SPINDLE_DEBUG_CHECKS
TEST(BarrierDeathTest, ArrivingPastTheExpectedCountAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::barrier<> b(2);
            (void)b.arrive(3);
        },
        "spindle::barrier 0x[0-9a-f]+: arrive\\(3\\) past the 2 arrivals still expected");
}

TEST(BarrierDeathTest, BadCountsAndDropsAbort) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH({ spindle::barrier<> b(-1); },
                 "spindle::barrier 0x[0-9a-f]+: expected count -1 outside \\[0, max\\(\\) = 2147483647\\]");
    EXPECT_DEATH(
        {
            spindle::barrier<> b(2);
            (void)b.arrive(0);
        },
        "spindle::barrier 0x[0-9a-f]+: arrive\\(0\\): the update must be positive");
    EXPECT_DEATH(
        {
            spindle::barrier<> b(1);
            b.arrive_and_drop();  // phase 0 completes; from phase 1 on there is nobody
            b.arrive_and_drop();
        },
        "spindle::barrier 0x[0-9a-f]+: arrive_and_drop\\(\\) with no party left");
}

TEST(BarrierDeathTest, DestroyingWithWaitersAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        destroy_while_waited_on(
            new spindle::barrier<>(2), [](auto& b) { b.arrive_and_wait(); }, 20ms),
        "spindle::barrier 0x[0-9a-f]+ destroyed with 1 waiters");
}
#endif

}  // namespace

// ---- the last reference frees ----------------------------------------------
//
// (tests/support/last_reference.hpp.) A party whose wait returned may
// destroy the barrier at once, even while the last arriver still runs the
// completion or resumes the others.

namespace {

// One phase per object. Every party arrives once; every other one (and the
// first) then waits on its token with timed waits of a few microseconds,
// retried, and holds a reference; the rest leave right after arriving. The
// last waiter deletes the barrier as soon as its wait returned.
struct barrier_object : counted_object<barrier_object> {
    struct on_completion {
        barrier_object* self;
        void operator()() noexcept { self->completions.fetch_add(1, std::memory_order_relaxed); }
    };
    explicit barrier_object(int n) : b(n, on_completion{this}), waiters((n + 1) / 2) {}
    // The completion ran once, before any waiter was released.
    ~barrier_object() { EXPECT_EQ(completions.load(std::memory_order_relaxed), 1); }
    std::atomic<int> completions{0};
    spindle::barrier<on_completion> b;
    std::atomic<int> waiters;
    std::atomic<int> turn{0};
};

class BarrierLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(BarrierLastReferenceStress, TimedWaitsRaceTheCompletingArrival) {
    const unsigned workers = GetParam();
    run_chain<barrier_object>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                              [](barrier_object& o, std::minstd_rand& rng) {
                                  const bool waits = o.turn.fetch_add(1) % 2 == 0;
                                  linger(rng);
                                  auto token = o.b.arrive();
                                  if (!waits) return;
                                  while (!o.b.wait_for(token, short_timeout(rng))) {
                                  }
                                  if (o.waiters.fetch_sub(1) == 1) delete &o;
                              });
}

INSTANTIATE_TEST_SUITE_P(Workers, BarrierLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
