// spindle::event, manual and automatic: set() releases every waiter (manual)
// or exactly one, oldest first (automatic), with fibers and threads mixed
// over 1, 2, 4 and 8 workers; many set/reset generations with waiters
// arriving throughout lose no wake-up; cancellation storms of stop requests
// (and a few timeouts) lose no wake-up and no signal and leave the waiter
// queue small; no wait is released without a set(); destruction right after
// a wait returns; std-like edge cases; misuse aborts in debug builds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/event.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"

namespace {

using namespace spindle::test;
using spindle::event;
using spindle::event_reset;

// Parks 100 fibers and 2 threads in wait(stop_token) on an event that is
// not set, stops them all with one request: each returns false, and
// nothing stays counted.
void expect_all_stopped(scheduler& sched, event& ev) {
    ASSERT_FALSE(ev.is_set());
    ASSERT_EQ(ev.debug_waiters(), 0);
    std::stop_source src;
    std::atomic<int> stopped{0};
    auto w = [&] {
        if (!ev.wait(src.get_token())) stopped.fetch_add(1);
    };
    std::vector<fiber> fs;
    for (int i = 0; i < 100; ++i) fs.push_back(sched.spawn(w));
    std::thread t1(w), t2(w);
    while (ev.debug_waiters() != 102) std::this_thread::yield();
    src.request_stop();
    for (auto& f : fs) f.join();
    t1.join();
    t2.join();
    EXPECT_EQ(stopped.load(), 102);
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_FALSE(ev.is_set());
}

// ---- manual ---------------------------------------------------------------------

class EventStress : public ::testing::TestWithParam<unsigned> {};

// Rounds on one event: waiters (every kind of wait, fibers and threads) see
// what the setter wrote before set(); reset() closes it for the next round.
TEST_P(EventStress, ManualSetReleasesEveryWaiter) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    event ev(event_reset::manual);
    constexpr int kRounds = 4;
    const int waiters = stress_fibers / 4;
    int payload = 0;  // plain: ordered by set() -> wait()
    for (int round = 0; round < kRounds; ++round) {
        std::atomic<int> bad{0}, returned{0};
        auto check = [&] {
            if (payload != round + 1) bad.fetch_add(1);
            returned.fetch_add(1);
        };
        std::vector<fiber> fs;
        std::vector<std::thread> ts;
        for (int i = 0; i < waiters; ++i)
            fs.push_back(sched.spawn([&, i] {
                switch (i % 3) {
                case 0: ev.wait(); break;
                case 1: EXPECT_TRUE(ev.wait_for(1h)); break;
                default: EXPECT_TRUE(ev.wait(std::stop_token{})); break;
                }
                check();
            }));
        for (int t = 0; t < 2; ++t) ts.emplace_back([&] {
            ev.wait();
            check();
        });
        while (ev.debug_waiters() < waiters / 2) std::this_thread::yield();
        payload = round + 1;
        ev.set();
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
        EXPECT_EQ(bad.load(), 0);
        EXPECT_EQ(returned.load(), waiters + 2);
        EXPECT_TRUE(ev.is_set());
        EXPECT_TRUE(ev.try_wait());
        ev.wait();  // passes at once
        ev.reset();
        EXPECT_FALSE(ev.is_set());
        EXPECT_FALSE(ev.try_wait());
    }
    EXPECT_LE(ev.debug_queue_segments(), 3u);
}

// Pulses (set(); reset();) back to back while waiters loop on wait(): every
// generation's waiters must be released, including those that registered
// before a set() but reach the queue after newer generations' waiters. A
// lost wake-up leaves a waiter short of its waits: the pulses go on until
// every waiter has finished, so the test hangs.
TEST_P(EventStress, ManualPulsesLoseNoWakeUp) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    event ev(event_reset::manual);
    constexpr int kWaits = 12;
    std::atomic<int> finished{0};
    std::atomic<long long> pulses{0};
    auto body = [&](int i) {
        for (int n = 0; n < kWaits; ++n) {
            const long long p = pulses.load();
            switch ((i + n) % 3) {
            case 0: ev.wait(); break;
            case 1: EXPECT_TRUE(ev.wait(std::stop_token{})); break;
            default: EXPECT_TRUE(ev.wait_for(1h)); break;
            }
            // Once per pulse: wait for its reset() before waiting again.
            while (pulses.load() == p) this_fiber::yield();
        }
        finished.fetch_add(1);
    };
    const int n = stress_fibers / 4;
    auto everyone = start_crowd(sched, {.fibers = n, .threads = 3}, body);
    while (finished.load() < n + 3) {
        // Let about half of those still running register (or 200us pass).
        const auto until = std::chrono::steady_clock::now() + 200us;
        while (ev.debug_waiters() < (n + 3 - finished.load()) / 2 && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
        ev.set();
        if (pulses.load() % 3 == 0) std::this_thread::yield();
        ev.reset();
        pulses.fetch_add(1);
    }
    everyone.join();
    std::printf("    [%u workers: %lld pulses]\n", workers, pulses.load());
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_LE(ev.debug_queue_segments(), 3u);
    // No stray wake-up left in the queue: a fresh generation's waiter is
    // not released before the next set().
    EXPECT_FALSE(ev.wait_for(3ms));
    fiber f = sched.spawn([&] { EXPECT_FALSE(ev.wait_for(3ms)); });
    f.join();
}

// Thousands of manual waits cancelled by stop requests (and a few by
// timeouts) while pulses (set(); reset();) and plain waits go on. Every
// wait returns (the plain ones only by a set(), so none was lost); nothing
// is left registered; and afterwards no wait is released without a set()
// (the wake-ups meant for waiters cancelled after their release were all
// absorbed).
TEST_P(EventStress, ManualCancellationStormLosesNoWakeUp) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    event ev(event_reset::manual);
    stop_slots sources;
    constexpr int kWaits = 10;
    std::atomic<int> finished{0};
    std::atomic<bool> stopping{false};
    std::atomic<long long> pulses{0}, released{0}, cancelled{0};
    auto body = [&](int i) {
        std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 1u);
        for (int n = 0; n < kWaits; ++n) {
            const long long p = pulses.load();
            bool ok;
            const int kind = static_cast<int>(rng() % 16);
            if (kind == 0) {
                ev.wait();
                ok = true;
            } else if (kind == 1 && i % 8 == 0) {
                ok = ev.wait_for(std::chrono::microseconds(rng() % 300));
            } else {
                ok = ev.wait(sources.token(static_cast<std::size_t>(i)));
            }
            (ok ? released : cancelled).fetch_add(1, std::memory_order_relaxed);
            // Once per pulse (a cancelled wait may go again at once).
            while (ok && pulses.load() == p) this_fiber::yield();
        }
        finished.fetch_add(1);
    };
    std::thread stopper([&] {
        while (!stopping.load()) sources.stop_one_round(10us);
    });
    const int n = stress_fibers / 2;
    auto everyone = start_crowd(sched, {.fibers = n, .threads = 3}, body);
    while (finished.load() < n + 3) {
        std::this_thread::sleep_for(300us);
        ev.set();
        if (pulses.load() % 2 == 0) std::this_thread::yield();
        ev.reset();
        pulses.fetch_add(1);
    }
    everyone.join();
    stopping.store(true);
    stopper.join();
    std::printf("    [%u workers: %lld released, %lld cancelled, %lld pulses]\n", workers, released.load(),
                cancelled.load(), pulses.load());
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_LE(ev.debug_queue_segments(), 3u);
    // Whatever the storm's timing did: waiters of a new generation are all
    // cancelled by one stop request, and leave the count.
    ev.reset();
    expect_all_stopped(sched, ev);
    // No wait is released without a set().
    std::vector<fiber> late;
    for (int i = 0; i < 8; ++i) late.push_back(sched.spawn([&] { EXPECT_FALSE(ev.wait_for(3ms)); }));
    EXPECT_FALSE(ev.wait_for(3ms));
    for (auto& f : late) f.join();
    // And a set() still releases fresh waiters of both kinds.
    std::thread w([&] { ev.wait(); });
    fiber fw = sched.spawn([&] { EXPECT_TRUE(ev.wait(std::stop_token{})); });
    while (ev.debug_waiters() != 2) std::this_thread::yield();
    ev.set();
    w.join();
    fw.join();
}

// ---- automatic ------------------------------------------------------------------

// An automatic event set at start is a lock: wait() to enter, set() to
// leave. A non-atomic counter comes out exact; one signal is left at the end.
TEST_P(EventStress, AutomaticEventPassesOneSignalAtATime) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    event ev(event_reset::automatic, true);
    long long counter = 0;  // plain: guarded by the signal
    std::atomic<int> inside{0}, violations{0};
    constexpr int kIters = 20;
    auto body = [&](int i) {
        for (int n = 0; n < kIters; ++n) {
            switch ((i + n) % 3) {
            case 0: ev.wait(); break;
            case 1: try_then_block([&] { return ev.try_wait(); }, [&] { ev.wait(); }); break;
            default: EXPECT_TRUE(ev.wait(std::stop_token{})); break;
            }
            if (inside.fetch_add(1) != 0) violations.fetch_add(1);
            ++counter;
            if ((i + n) % 5 == 0) this_fiber::yield();
            inside.fetch_sub(1);
            ev.set();
        }
    };
    run_crowd(sched, {.fibers = stress_fibers, .threads = 2}, body);
    EXPECT_EQ(violations.load(), 0);
    EXPECT_EQ(counter, static_cast<long long>(stress_fibers + 2) * kIters);
    EXPECT_TRUE(ev.is_set());
    EXPECT_TRUE(ev.try_wait());
    EXPECT_FALSE(ev.try_wait());
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_LE(ev.debug_queue_segments(), 3u);
}

// The same lock, with most waits cancelled by stop requests (a few by
// timeouts) and a second party setting it spuriously now and then, which
// at most merges with the signal. Afterwards exactly one signal is left and
// fresh waiters are woken by fresh set() calls.
TEST_P(EventStress, AutomaticCancellationStormLosesNoSignal) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    event ev(event_reset::automatic, true);
    stop_slots sources;
    std::atomic<int> inside{0}, violations{0};
    std::atomic<long long> entered{0}, cancelled{0};
    std::atomic<bool> finished{false};
    constexpr int kIters = 10;
    auto body = [&](int i) {
        std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 1u);
        for (int n = 0; n < kIters; ++n) {
            bool ok;
            const int kind = (i + n) % 16;
            if (kind == 0) {
                ev.wait();
                ok = true;
            } else if (kind == 1 && i % 8 == 0) {
                ok = ev.wait_for(std::chrono::microseconds(rng() % 300));
            } else if (kind == 2) {
                ok = ev.try_wait();
            } else {
                ok = ev.wait(sources.token(static_cast<std::size_t>(i)));
            }
            if (!ok) {
                cancelled.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            entered.fetch_add(1, std::memory_order_relaxed);
            if (inside.fetch_add(1) != 0) violations.fetch_add(1);
            if (rng() % 4 == 0) this_fiber::yield();
            if (rng() % 16 == 0) std::this_thread::sleep_for(20us);
            inside.fetch_sub(1);
            ev.set();
        }
    };
    std::thread stopper([&] {
        while (!finished.load()) sources.stop_one_round(10us);
    });
    run_crowd(sched, {.fibers = stress_fibers, .threads = 3, .first_thread = 2}, body);
    finished.store(true);
    stopper.join();
    std::printf("    [%u workers: %lld entered, %lld cancelled]\n", workers, entered.load(), cancelled.load());
    EXPECT_EQ(violations.load(), 0);
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_TRUE(ev.try_wait());  // the signal is back, once
    EXPECT_FALSE(ev.try_wait());
    EXPECT_LE(ev.debug_queue_segments(), 3u);
    // Whatever the storm's timing did: waiters are all cancelled by one stop
    // request and give their counts back.
    expect_all_stopped(sched, ev);
    std::atomic<bool> got{false};
    std::thread w([&] {
        ev.wait();
        got.store(true);
    });
    fiber fw = sched.spawn([&] { EXPECT_TRUE(ev.wait(std::stop_token{})); });
    while (ev.debug_waiters() != 2) std::this_thread::yield();
    ev.set();
    ev.set();
    w.join();
    fw.join();
    EXPECT_TRUE(got.load());
    EXPECT_FALSE(ev.is_set());
}

INSTANTIATE_TEST_SUITE_P(Workers, EventStress, ::testing::ValuesIn(spindle::test::stress_workers), workers_name);

// One worker gives a known arrival order: each set() wakes the oldest waiter.
TEST(Event, AutomaticWakesOldestFirst) {
    for (spindle::handoff policy : spindle::test::all_policies) {
        scheduler sched({.workers = 1});
        event ev(event_reset::automatic, false, policy);
        std::vector<int> arrived, woken;  // one worker
        fiber outer = sched.spawn([&] {
            std::vector<fiber> fs;
            for (int i = 0; i < 40; ++i)
                fs.push_back(fiber([&, i] {
                    arrived.push_back(i);
                    ev.wait();
                    woken.push_back(i);
                }));
            while (arrived.size() < 40) this_fiber::yield();
            EXPECT_EQ(ev.debug_waiters(), 40);
            for (std::size_t k = 1; k <= 40; ++k) {
                ev.set();
                while (woken.size() < k) this_fiber::yield();
            }
            for (auto& f : fs) f.join();
        });
        outer.join();
        EXPECT_EQ(woken, arrived) << to_string(policy);
        EXPECT_FALSE(ev.is_set());
    }
}

// set() wakes exactly one of several waiters; with none waiting it leaves
// one signal, however many times it is called.
TEST(Event, AutomaticSetWakesExactlyOne) {
    for (unsigned workers : {1u, 4u}) {
        scheduler sched({.workers = workers});
        event ev(event_reset::automatic);
        std::atomic<int> woken{0};
        std::vector<fiber> fs;
        for (int i = 0; i < 6; ++i) fs.push_back(sched.spawn([&] {
            ev.wait();
            woken.fetch_add(1);
        }));
        std::vector<std::thread> ts;
        for (int i = 0; i < 4; ++i) ts.emplace_back([&] {
            ev.wait();
            woken.fetch_add(1);
        });
        while (ev.debug_waiters() != 10) std::this_thread::yield();
        ev.set();
        while (woken.load() < 1) std::this_thread::yield();
        std::this_thread::sleep_for(5ms);
        EXPECT_EQ(woken.load(), 1);
        EXPECT_TRUE(settles([&] { return ev.debug_waiters() == 9; })) << ev.debug_waiters();  // see settles()
        for (int k = 2; k <= 10; ++k) {
            ev.set();
            while (woken.load() < k) std::this_thread::yield();
        }
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
        EXPECT_FALSE(ev.is_set());
        ev.set();
        ev.set();
        ev.set();
        EXPECT_TRUE(ev.try_wait());
        EXPECT_FALSE(ev.try_wait());
    }
}

// Two automatic events, a fiber and a thread taking turns: a lost signal
// hangs the test.
TEST(Event, AutomaticPingPongBetweenFiberAndThread) {
    for (spindle::handoff policy : spindle::test::all_policies) {
        scheduler sched({.workers = 2});
        event ping(event_reset::automatic, false, policy), pong(event_reset::automatic, false, policy);
        int ball = 0;  // plain: passed by the events
        constexpr int kRounds = 2000;
        fiber f = sched.spawn([&] {
            for (int i = 0; i < kRounds; ++i) {
                ping.wait();
                EXPECT_EQ(ball, 2 * i + 1);
                ++ball;
                pong.set();
            }
        });
        for (int i = 0; i < kRounds; ++i) {
            ++ball;
            ping.set();
            pong.wait();
            EXPECT_EQ(ball, 2 * i + 2);
        }
        f.join();
        EXPECT_FALSE(ping.is_set());
        EXPECT_FALSE(pong.is_set());
    }
}

// A stopped waiter in the middle of the queue: the next set() skips it.
TEST(Event, AutomaticStoppedWaiterInTheMiddleIsSkipped) {
    scheduler sched({.workers = 1});
    event ev(event_reset::automatic);
    std::vector<int> woken;
    std::vector<std::stop_source> src(6);
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 6; ++i) {
            fs.push_back(fiber([&, i] {
                if (ev.wait(src[static_cast<std::size_t>(i)].get_token())) woken.push_back(i);
            }));
            this_fiber::yield();  // it queues
        }
        for (int i = 0; i < 6; i += 2) src[static_cast<std::size_t>(i)].request_stop();
        for (int i = 0; i < 10; ++i) this_fiber::yield();  // the stopped ones leave
        EXPECT_EQ(ev.debug_waiters(), 3);
        for (std::size_t k = 1; k <= 3; ++k) {
            ev.set();
            while (woken.size() < k) this_fiber::yield();
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(woken, (std::vector<int>{1, 3, 5}));
    EXPECT_FALSE(ev.is_set());
}

// Manual: stop requests for some of the waiters, then set(): the others
// are released, the stopped ones report false, nothing stays registered.
TEST(Event, ManualStoppedWaitersLeaveTheCount) {
    scheduler sched({.workers = 1});
    event ev(event_reset::manual);
    std::vector<int> result(10, -1);
    std::vector<std::stop_source> src(10);
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 10; ++i) {
            fs.push_back(fiber([&, i] {
                result[static_cast<std::size_t>(i)] = ev.wait(src[static_cast<std::size_t>(i)].get_token()) ? 1 : 0;
            }));
            this_fiber::yield();  // it queues
        }
        EXPECT_EQ(ev.debug_waiters(), 10);
        for (int i = 0; i < 10; i += 2) src[static_cast<std::size_t>(i)].request_stop();
        for (int i = 0; i < 10; ++i) this_fiber::yield();
        EXPECT_EQ(ev.debug_waiters(), 5);
        ev.set();
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(result, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
    EXPECT_EQ(ev.debug_waiters(), 0);
}

// Manual: waiters stopped right after set() released them report true
// (the event was set while they waited), and nothing they leave behind
// releases a later generation's waiter. With dispatch, set() claims every
// waiter and makes it ready; the stop requests that follow find them claimed.
TEST(Event, ManualWaitersStoppedAfterTheirReleaseReturnTrue) {
    scheduler sched({.workers = 1});
    event ev(event_reset::manual, false, spindle::handoff::dispatch);
    std::vector<int> result(8, -1);
    std::vector<std::stop_source> src(8);
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 8; ++i) {
            fs.push_back(fiber([&, i] {
                result[static_cast<std::size_t>(i)] = ev.wait(src[static_cast<std::size_t>(i)].get_token()) ? 1 : 0;
            }));
            this_fiber::yield();
        }
        EXPECT_EQ(ev.debug_waiters(), 8);
        ev.set();
        ev.reset();
        for (int i = 0; i < 8; i += 2) src[static_cast<std::size_t>(i)].request_stop();
        for (auto& f : fs) f.join();
        // A new generation: its waiter must not be released by anything left over.
        EXPECT_FALSE(ev.wait_for(2ms));
        fiber late([&] { EXPECT_FALSE(ev.wait_for(2ms)); });
        late.join();
    });
    outer.join();
    EXPECT_EQ(result, (std::vector<int>(8, 1)));
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_LE(ev.debug_queue_segments(), 2u);
}

// Manual, the regression behind the hook's waiter tag: waiters stopped
// before set() (cancelled, uncounted) and waiters released by it, over many
// pulses, leave no wake-up token behind in the queue. Before the fix a
// cancelled waiter's count was settled only when the waiter ran again, after
// the set() that counted it had sent its token to an empty cell, where it
// stayed (with its segment) until some later waiter took it.
TEST(Event, ManualStopsBeforeSetLeaveNoTokenBehind) {
    scheduler sched({.workers = 1});
    event ev(event_reset::manual);
    fiber outer = sched.spawn([&] {
        for (int round = 0; round < 200; ++round) {
            std::vector<std::stop_source> src(6);
            std::vector<int> result(6, -1);
            std::vector<fiber> fs;
            for (int i = 0; i < 6; ++i) {
                fs.push_back(fiber([&, i] {
                    result[static_cast<std::size_t>(i)] =
                        ev.wait(src[static_cast<std::size_t>(i)].get_token()) ? 1 : 0;
                }));
                this_fiber::yield();
            }
            for (int i = round % 2; i < 6; i += 2) src[static_cast<std::size_t>(i)].request_stop();
            ev.set();
            ev.reset();
            for (auto& f : fs) f.join();
            for (int i = 0; i < 6; ++i) EXPECT_EQ(result[static_cast<std::size_t>(i)], i % 2 == round % 2 ? 0 : 1);
        }
    });
    outer.join();
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_LE(ev.debug_queue_segments(), 2u);
    EXPECT_FALSE(ev.wait_for(2ms));
}

// Stops racing a set(): some land after set() counted their waiter and
// before its token reached the cell, which the hook then refuses (the wait
// returns true). Rounds until that has happened; every round must leave no
// token behind, so that a later waiter is not released without a set().
// Most runs need a few rounds; a loaded machine has needed 300 and more
// (a round takes about 1.5 ms), so the bound is far above that.
TEST(Event, ManualStopsRacingASetAreRefused) {
    scheduler sched({.workers = 2});
    event ev(event_reset::manual);
    constexpr int kFibers = 48, kThreads = 2, kWaiters = kFibers + kThreads;
    int round = 0;
    for (; round < 5000 && ev.debug_refused_waits() == 0; ++round) {
        std::vector<std::stop_source> src(kWaiters);
        std::atomic<int> returned{0};
        auto wait_one = [&](int i) {
            (void)ev.wait(src[static_cast<std::size_t>(i)].get_token());
            returned.fetch_add(1);
        };
        std::vector<fiber> fs;
        for (int i = 0; i < kFibers; ++i) fs.push_back(sched.spawn([&, i] { wait_one(i); }));
        std::vector<std::thread> ts;
        for (int i = kFibers; i < kWaiters; ++i) ts.emplace_back([&, i] { wait_one(i); });
        while (ev.debug_waiters() < kWaiters) std::this_thread::yield();
        std::thread stopper([&] {
            for (int i = kWaiters - 1; i >= 0; --i) src[static_cast<std::size_t>(i)].request_stop();
        });
        ev.set();
        stopper.join();
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
        EXPECT_EQ(returned.load(), kWaiters);
        ev.reset();
    }
    std::printf("    [%d rounds, %llu waits refused]\n", round,
                static_cast<unsigned long long>(ev.debug_refused_waits()));
    EXPECT_GT(ev.debug_refused_waits(), 0u);
    EXPECT_EQ(ev.debug_waiters(), 0);
    EXPECT_LE(ev.debug_queue_segments(), 3u);
    EXPECT_FALSE(ev.wait_for(2ms));  // nothing left to release a new generation's waiter
}

// A waiter destroys the event as soon as its wait returns, while the set()
// that released it may still be inside (ASan checks).
TEST(Event, DestroyedRightAfterTheWaitReturns) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kTimes = 100;
#else
    constexpr int kTimes = 1000;
#endif
    scheduler sched({.workers = 2});
    for (event_reset kind : {event_reset::manual, event_reset::automatic}) {
        for (int n = 0; n < kTimes; ++n) {
            auto* ev = new event(kind);
            // Manual, every third time: three waiters, so set() has several
            // to wake; the last one back deletes.
            const int waiters = kind == event_reset::manual && n % 3 == 0 ? 3 : 1;
            std::atomic<int> left{waiters};
            std::vector<fiber> ws;
            for (int i = 0; i < waiters; ++i)
                ws.push_back(sched.spawn([ev, &left] {
                    ev->wait();
                    if (left.fetch_sub(1) == 1) delete ev;
                }));
            if (n % 2 == 0) std::this_thread::yield();
            ev->set();  // may still be inside while the last waiter deletes
            for (auto& w : ws) w.join();
        }
    }
}

TEST(Event, EdgeCases) {
    event m(event_reset::manual);
    EXPECT_EQ(m.reset_mode(), event_reset::manual);
    EXPECT_EQ(m.policy(), spindle::handoff::ces);
    EXPECT_FALSE(m.is_set());
    EXPECT_FALSE(m.try_wait());
    EXPECT_FALSE(m.wait_for(1ms));
    EXPECT_FALSE(m.wait_for(0s));
    EXPECT_FALSE(m.wait_until(std::chrono::steady_clock::now() - 1s));
    EXPECT_FALSE(m.wait_until(std::chrono::system_clock::now() + 1ms));
    std::stop_source src;
    src.request_stop();
    EXPECT_FALSE(m.wait(src.get_token()));
    EXPECT_EQ(m.debug_waiters(), 0);  // cancelled waits left the count
    m.reset();                        // not set: nothing
    m.set();
    m.set();  // already set: nothing
    EXPECT_TRUE(m.is_set());
    EXPECT_TRUE(m.try_wait());
    EXPECT_TRUE(m.try_wait());  // manual: stays set
    m.wait();
    EXPECT_TRUE(m.wait_for(0s));
    EXPECT_TRUE(m.wait(src.get_token()));  // set wins over a stop request
    m.reset();
    EXPECT_FALSE(m.is_set());

    event initially(event_reset::manual, true);
    EXPECT_TRUE(initially.is_set());
    initially.wait();

    event a(event_reset::automatic);
    EXPECT_EQ(a.reset_mode(), event_reset::automatic);
    EXPECT_FALSE(a.try_wait());
    EXPECT_FALSE(a.wait_for(1ms));
    EXPECT_FALSE(a.wait(src.get_token()));
    EXPECT_EQ(a.debug_waiters(), 0);
    a.set();
    a.set();  // merges: one signal
    EXPECT_TRUE(a.is_set());
    EXPECT_TRUE(a.wait(src.get_token()));  // a signal wins over a stop request
    EXPECT_FALSE(a.is_set());              // taken
    a.set();
    a.reset();
    EXPECT_FALSE(a.try_wait());
    a.set();
    EXPECT_TRUE(a.wait_until(std::chrono::steady_clock::now() - 1s));  // past, but set: taken
    a.set();
    EXPECT_TRUE(a.wait_for(0s));
    EXPECT_FALSE(a.is_set());

    event initially_signalled(event_reset::automatic, true);
    initially_signalled.wait();
    EXPECT_FALSE(initially_signalled.is_set());

    // Threads time out on the futex path and leave the word as it was.
    for (event* e : {&m, &a}) {
        EXPECT_EQ(count_on_threads(4, [&] { return !e->wait_for(2ms); }), 4);
        EXPECT_EQ(e->debug_waiters(), 0);
        EXPECT_FALSE(e->is_set());
    }
    EXPECT_STREQ(spindle::to_string(event_reset::manual), "manual");
    EXPECT_STREQ(spindle::to_string(event_reset::automatic), "automatic");
}

#if SPINDLE_DEBUG_CHECKS
TEST(EventDeathTest, DestroyingWithWaitersAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(destroy_while_waited_on(
                     new event(event_reset::manual), [](auto& e) { e.wait(); },
                     [](auto& e) { return e.debug_waiters() == 1; }),
        "spindle::event 0x[0-9a-f]+ \\(manual\\) destroyed with 1 waiters");
    EXPECT_DEATH(
        {
            auto* e = new event(event_reset::automatic);
            std::thread([e] { e->wait(); }).detach();
            std::thread([e] { e->wait(); }).detach();
            while (e->debug_waiters() != 2) std::this_thread::yield();
            delete e;
        },
        "spindle::event 0x[0-9a-f]+ \\(automatic\\) destroyed with 2 waiters");
}
#endif

}  // namespace

// ---- the last reference frees ----------------------------------------------
//
// (tests/support/last_reference.hpp.) A caller whose wait returned may
// destroy the event at once, even while the set() that released it is
// still inside.

namespace {

// An automatic event used as a lock (set: free), guarding a count of
// references to the object: timed waits of a few microseconds, retried,
// race the set() that hands the signal over; the last party deletes the
// object right after its set() returns.
struct event_lock : counted_object<event_lock> {
    explicit event_lock(int n) : refs(n) {}
    event ev{event_reset::automatic, true};
    int refs;  // guarded by the signal
};

// A manual event as a door: the first party to reach the object opens it
// and leaves (no reference); the others wait for it with timed waits,
// retried, and hold a reference each. The last of them deletes the object
// as soon as its wait returned, while set() may still be waking the rest.
struct event_door : counted_object<event_door> {
    explicit event_door(int n) : waiters(n - 1) {}
    event ev{event_reset::manual};
    std::atomic<int> waiters;
    std::atomic<int> turn{0};
};

class EventLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(EventLastReferenceStress, TimedWaitsRaceTheLastSet) {
    const unsigned workers = GetParam();
    run_chain<event_lock>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                          [](event_lock& o, std::minstd_rand& rng) {
                              linger(rng);
                              while (!o.ev.wait_for(short_timeout(rng))) {
                              }
                              linger(rng);
                              const bool last = --o.refs == 0;
                              o.ev.set();
                              if (last) delete &o;
                          });
    run_chain<event_door>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                          [](event_door& o, std::minstd_rand& rng) {
                              if (o.turn.fetch_add(1) == 0) {
                                  linger(rng);
                                  o.ev.set();
                                  return;
                              }
                              while (!o.ev.wait_for(short_timeout(rng))) {
                              }
                              if (o.waiters.fetch_sub(1) == 1) delete &o;
                          });
}

INSTANTIATE_TEST_SUITE_P(Workers, EventLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
