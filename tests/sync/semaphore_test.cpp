// spindle::counting_semaphore: permits bound concurrency over 1, 2, 4 and 8
// workers with fibers and threads mixed; FIFO hand-over; release(n) wakes n;
// a cancellation storm of timeouts and stop requests that loses no permit
// and no wake-up; std-like edge cases; misuse aborts in debug builds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/counting_semaphore.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"
#include "../support/thread_state.hpp"

namespace {

using namespace spindle::test;

class SemaphoreStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(SemaphoreStress, PermitsBoundConcurrencyWithFibersAndThreads) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    constexpr int kPermits = 3;
    spindle::counting_semaphore<kPermits> sem(kPermits);
    std::atomic<int> inside{0}, violations{0};
    std::atomic<long long> done{0};
    constexpr int kIters = 20;
    auto body = [&](int i) {
        for (int n = 0; n < kIters; ++n) {
            switch ((i + n) % 3) {
            case 0: sem.acquire(); break;
            case 1:
                // A few tries, then queue: under FIFO a spinner gets a
                // permit only when nobody is queued.
                try_then_block([&] { return sem.try_acquire(); }, [&] { sem.acquire(); });
                break;
            default:
                while (!sem.try_acquire_for(200us)) {
                }
                break;
            }
            if (inside.fetch_add(1) + 1 > kPermits) violations.fetch_add(1);
            if ((i + n) % 5 == 0) this_fiber::yield();
            inside.fetch_sub(1);
            done.fetch_add(1, std::memory_order_relaxed);
            sem.release();
        }
    };
    run_crowd(sched, {.fibers = stress_fibers, .threads = 2}, body);
    EXPECT_EQ(violations.load(), 0);
    EXPECT_EQ(done.load(), static_cast<long long>(stress_fibers + 2) * kIters);
    EXPECT_EQ(sem.debug_count(), kPermits);
    for (int k = 0; k < kPermits; ++k) EXPECT_TRUE(sem.try_acquire());
    EXPECT_FALSE(sem.try_acquire());
    sem.release(kPermits);
}

// Thousands of acquires with short timeouts and stop requests while others
// acquire and release (a hog takes two permits at a time and gives them back
// with release(2)). Afterwards the permit word is exact, exactly max() can be
// taken, and a fresh waiter is woken by a fresh release.
TEST_P(SemaphoreStress, CancellationStormLosesNoPermitAndNoWakeUp) {
    const unsigned workers = GetParam();
    scheduler sched(stress_options(workers));
    constexpr int kPermits = 2;
    spindle::counting_semaphore<kPermits> sem(kPermits);
    std::atomic<int> inside{0}, violations{0};
    std::atomic<long long> successes{0}, failures{0};
    constexpr int kIters = 10;
    constexpr int kStoppable = 64;
    std::vector<std::stop_source> sources(kStoppable);
    std::atomic<bool> finished{false};
    auto critical = [&](std::minstd_rand& rng, int permits) {
        successes.fetch_add(1, std::memory_order_relaxed);
        if (inside.fetch_add(permits) + permits > kPermits) violations.fetch_add(1);
        if (rng() % 4 == 0) this_fiber::yield();
        if (rng() % 16 == 0) std::this_thread::sleep_for(20us);
        inside.fetch_sub(permits);
    };
    auto body = [&](int i) {
        std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 1u);
        for (int n = 0; n < kIters; ++n) {
            bool got;
            switch ((i + n) % 4) {
            case 0:
                sem.acquire();
                got = true;
                break;
            case 1: got = sem.acquire(sources[static_cast<std::size_t>(i) % kStoppable].get_token()); break;
            case 2: got = sem.try_acquire_for(std::chrono::microseconds(rng() % 300)); break;
            default:
                got = sem.try_acquire_until(std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 300));
                break;
            }
            if (!got) {
                failures.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            critical(rng, 1);
            sem.release();
        }
    };
    std::thread stopper([&] {
        for (int round = 0; round < 8 && !finished.load(); ++round)
            for (auto& s : sources) {
                std::this_thread::sleep_for(20us);
                s.request_stop();
            }
    });
    std::thread hog([&] {
        std::minstd_rand rng(5);
        for (int n = 0; n < 40 && !finished.load(); ++n) {
            sem.acquire();
            sem.acquire();
            critical(rng, 2);
            std::this_thread::sleep_for(300us);
            sem.release(2);  // may wake two waiters
            std::this_thread::sleep_for(100us);
        }
    });
    run_crowd(sched, {.fibers = stress_fibers, .threads = 3, .first_thread = 2}, body);
    finished.store(true);
    hog.join();
    stopper.join();
    EXPECT_EQ(violations.load(), 0);
    EXPECT_GT(failures.load(), 0);  // the storm did cancel
    std::printf("    [%u workers: %lld acquired, %lld cancelled]\n", workers, successes.load(), failures.load());
    // No permit lost or duplicated.
    EXPECT_EQ(sem.debug_count(), kPermits);
    for (int k = 0; k < kPermits; ++k) EXPECT_TRUE(sem.try_acquire());
    EXPECT_FALSE(sem.try_acquire());
    // No wake-up lost: a fresh waiter gets the next release.
    std::atomic<bool> got{false};
    std::thread w([&] {
        sem.acquire();
        got.store(true);
    });
    fiber fw = sched.spawn([&] { EXPECT_TRUE(sem.acquire(std::stop_token{})); });
    while (sem.debug_count() != -2) std::this_thread::yield();
    sem.release(2);
    w.join();
    fw.join();
    EXPECT_TRUE(got.load());
    EXPECT_EQ(sem.debug_count(), 0);
    sem.release(kPermits);
    EXPECT_EQ(sem.debug_count(), kPermits);
    EXPECT_LE(sem.debug_queue_segments(), 3u);  // nothing kept for the cancelled waiters
}

INSTANTIATE_TEST_SUITE_P(Workers, SemaphoreStress, ::testing::ValuesIn(spindle::test::stress_workers), workers_name);

// One worker gives a known arrival order: permits go to waiters in it.
TEST(Semaphore, FifoHandOverToFibers) {
    scheduler sched({.workers = 1});
    spindle::counting_semaphore<> sem(0);
    std::vector<int> arrived, acquired;  // one worker
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 40; ++i) {
            fs.push_back(fiber([&, i] {
                arrived.push_back(i);  // just before queueing: one worker, no preemption
                sem.acquire();
                acquired.push_back(i);
            }));
        }
        while (arrived.size() < 40) this_fiber::yield();
        for (std::size_t k = 1; k <= 40; ++k) {
            sem.release();
            while (acquired.size() < k) this_fiber::yield();
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(acquired, arrived);
    EXPECT_EQ(sem.debug_count(), 0);
}

// Threads: each starts once the one before is parked in its cell (the
// kernel says it sleeps), so arrival order is known without timing.
TEST(Semaphore, FifoHandOverToThreads) {
    spindle::counting_semaphore<> sem(0);
    std::vector<int> order;
    std::atomic<int> gate{0};
    std::vector<std::thread> ts;
    constexpr int kThreads = 8;
    for (int t = 0; t < kThreads; ++t) {
        std::atomic<pid_t> tid{0};
        ts.emplace_back([&, t] {
            tid.store(this_tid());
            sem.acquire();
            // Each is released one at a time below: no lock needed.
            order.push_back(t);
            gate.fetch_add(1);
        });
        EXPECT_TRUE(parks(tid)) << "thread " << t << " never parked";
        EXPECT_EQ(sem.debug_count(), -(t + 1));
    }
    for (int k = 1; k <= kThreads; ++k) {
        sem.release();
        while (gate.load() < k) std::this_thread::yield();
    }
    for (auto& t : ts) t.join();
    std::vector<int> expected;
    for (int t = 0; t < kThreads; ++t) expected.push_back(t);
    EXPECT_EQ(order, expected);
}

// release(n) wakes exactly n of more queued waiters.
TEST(Semaphore, ReleaseNWakesN) {
    for (unsigned workers : {1u, 4u}) {
        scheduler sched({.workers = workers});
        spindle::counting_semaphore<> sem(0);
        std::atomic<int> got{0};
        std::vector<fiber> fs;
        for (int i = 0; i < 6; ++i) fs.push_back(sched.spawn([&] {
            sem.acquire();
            got.fetch_add(1);
        }));
        std::vector<std::thread> ts;
        for (int i = 0; i < 4; ++i) ts.emplace_back([&] {
            sem.acquire();
            got.fetch_add(1);
        });
        while (sem.debug_count() != -10) std::this_thread::yield();
        sem.release(4);
        while (got.load() < 4) std::this_thread::yield();
        std::this_thread::sleep_for(5ms);
        EXPECT_EQ(got.load(), 4);
        EXPECT_TRUE(settles([&] { return sem.debug_count() == -6; })) << sem.debug_count();  // see settles()
        sem.release(7);  // six waiters, one permit left over
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
        EXPECT_EQ(got.load(), 10);
        EXPECT_EQ(sem.debug_count(), 1);
    }
}

TEST(Semaphore, EdgeCases) {
    static_assert(spindle::counting_semaphore<5>::max() == 5);
    static_assert(spindle::binary_semaphore::max() == 1);
    static_assert(spindle::counting_semaphore<>::max() >= 0x7fffffff);
    spindle::counting_semaphore<> zero(0);
    EXPECT_FALSE(zero.try_acquire());
    EXPECT_FALSE(zero.try_acquire_for(1ms));
    EXPECT_FALSE(zero.try_acquire_until(std::chrono::steady_clock::now() - 1s));  // past: no queueing
    EXPECT_FALSE(zero.try_acquire_until(std::chrono::system_clock::now() + 1ms));
    std::stop_source src;
    src.request_stop();
    EXPECT_FALSE(zero.acquire(src.get_token()));
    EXPECT_EQ(zero.debug_count(), 0);  // cancelled waits gave their decrements back
    zero.release();
    EXPECT_TRUE(zero.acquire(src.get_token()));  // a free permit wins over a stop request
    zero.release(0);
    EXPECT_EQ(zero.debug_count(), 0);

    spindle::binary_semaphore b(1);
    EXPECT_TRUE(b.try_acquire());
    EXPECT_FALSE(b.try_acquire());
    b.release();
    b.acquire();
    std::thread t([&] { b.release(); });  // released by another thread: allowed
    t.join();
    EXPECT_TRUE(b.try_acquire_for(1ms));
    b.release();

    // Threads time out on the futex path and leave the word as it was.
    spindle::counting_semaphore<2> two(0);
    EXPECT_EQ(count_on_threads(4, [&] { return !two.try_acquire_for(2ms); }), 4);
    EXPECT_EQ(two.debug_count(), 0);
    two.release(2);
    EXPECT_TRUE(two.try_acquire());
    EXPECT_TRUE(two.try_acquire());
}

// A stop request for a parked fiber cancels its wait; the permit that comes
// later goes to the next waiter.
TEST(Semaphore, StoppedWaiterInTheMiddleIsSkipped) {
    scheduler sched({.workers = 1});
    spindle::counting_semaphore<> sem(0);
    std::vector<int> acquired;
    std::vector<std::stop_source> src(6);
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 6; ++i) {
            fs.push_back(fiber([&, i] {
                if (sem.acquire(src[static_cast<std::size_t>(i)].get_token())) acquired.push_back(i);
            }));
            this_fiber::yield();  // it queues
        }
        for (int i = 0; i < 6; i += 2) src[static_cast<std::size_t>(i)].request_stop();
        for (int i = 0; i < 10; ++i) this_fiber::yield();  // the stopped ones leave
        EXPECT_EQ(sem.debug_count(), -3);
        for (std::size_t k = 1; k <= 3; ++k) {
            sem.release();
            while (acquired.size() < k) this_fiber::yield();
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(acquired, (std::vector<int>{1, 3, 5}));
    EXPECT_EQ(sem.debug_count(), 0);
}

// The handoff policy: with ces a releasing fiber's worker switches straight
// to the waiter it hands its permit to (the waiter runs before the releaser
// goes on); with dispatch the releaser goes on and the waiter runs later.
TEST(Semaphore, ReleaseHandsOffByPolicy) {
    for (auto policy : {spindle::handoff::ces, spindle::handoff::dispatch}) {
        SCOPED_TRACE(spindle::to_string(policy));
        scheduler sched({.workers = 1});
        spindle::counting_semaphore<> sem(0, policy);
        std::vector<const char*> order;  // one worker
        fiber outer = sched.spawn([&] {
            fiber waiter([&] {
                sem.acquire();
                order.push_back("waiter");
            });
            while (sem.debug_count() != -1) this_fiber::yield();
            sem.release();
            order.push_back("releaser");
            waiter.join();
        });
        outer.join();
        if (policy == spindle::handoff::ces)
            EXPECT_EQ(order, (std::vector<const char*>{"waiter", "releaser"}));
        else
            EXPECT_EQ(order, (std::vector<const char*>{"releaser", "waiter"}));
    }
}

// A stop request cancels a parked waiter completely before request_stop()
// returns: the canceller runs the cancellation handler itself, so the
// waiter's decrement is given back (and a release could not park its
// permit in the cancelled waiter's cell) even while the waiter has not run.
TEST(Semaphore, StopRequestSettlesTheWordBeforeTheWaiterRuns) {
    scheduler sched({.workers = 1});
    spindle::counting_semaphore<> sem(0);
    std::stop_source src;
    std::atomic<bool> parked{false}, blocked_worker{false}, release_worker{false};
    std::atomic<int> result{-1};
    fiber waiter = sched.spawn([&] { result.store(sem.acquire(src.get_token()) ? 1 : 0); });
    // The waiter runs from its decrement to its park without yielding: once
    // a second fiber on the same worker runs, it is parked.
    fiber marker = sched.spawn([&] {
        while (sem.debug_count() != -1) this_fiber::yield();
        parked.store(true);
        // Hold the only worker so the woken waiter cannot run yet.
        blocked_worker.store(true);
        while (!release_worker.load()) std::this_thread::yield();
    });
    while (!blocked_worker.load()) std::this_thread::yield();
    ASSERT_TRUE(parked.load());
    src.request_stop();
    EXPECT_EQ(sem.debug_count(), 0);  // settled by the canceller
    EXPECT_EQ(result.load(), -1);     // the waiter has not run yet
    sem.release();                    // the permit goes to the word, not to the cancelled cell
    EXPECT_EQ(sem.debug_count(), 1);
    release_worker.store(true);
    marker.join();
    waiter.join();
    EXPECT_EQ(result.load(), 0);
    EXPECT_TRUE(sem.try_acquire());
}

#if SPINDLE_DEBUG_CHECKS
TEST(SemaphoreDeathTest, ReleaseBeyondMaxAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::binary_semaphore b(1);
            b.release();
        },
        "spindle::counting_semaphore 0x[0-9a-f]+: release\\(1\\) beyond max\\(\\) = 1");
    EXPECT_DEATH(
        {
            spindle::counting_semaphore<4> s(2);
            s.release(3);
        },
        "release\\(3\\) beyond max\\(\\) = 4");
}

TEST(SemaphoreDeathTest, NegativeReleaseAndBadInitialCountAbort) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::counting_semaphore<4> s(2);
            s.release(-1);
        },
        "spindle::counting_semaphore 0x[0-9a-f]+: release\\(-1\\) of a negative count");
    EXPECT_DEATH({ spindle::counting_semaphore<4> s(5); },
                 "spindle::counting_semaphore 0x[0-9a-f]+: initial count 5 outside \\[0, max\\(\\) = 4\\]");
    EXPECT_DEATH({ spindle::counting_semaphore<4> s(-1); },
                 "spindle::counting_semaphore 0x[0-9a-f]+: initial count -1 outside");
}

TEST(SemaphoreDeathTest, DestroyingWithWaitersAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(destroy_while_waited_on(
                     new spindle::counting_semaphore<>(0), [](auto& s) { s.acquire(); },
                     [](auto& s) { return s.debug_count() == -1; }),
        "spindle::counting_semaphore 0x[0-9a-f]+ destroyed with 1 waiters");
}
#endif

}  // namespace

namespace {

// release(0) is a no-op (std: 0 <= update), also while waiters are counted:
// it must not hand a permit it does not have to the oldest waiter.
TEST(Semaphore, ReleaseOfZeroWakesNobody) {
    for (auto policy : {spindle::handoff::ces, spindle::handoff::dispatch}) {
        SCOPED_TRACE(spindle::to_string(policy));
        spindle::counting_semaphore<> sem(0, policy);
        std::atomic<bool> got{false};
        std::thread waiter([&] {
            sem.acquire();
            got.store(true);
        });
        while (sem.debug_count() != -1) std::this_thread::yield();
        sem.release(0);
        std::this_thread::sleep_for(50ms);
        EXPECT_FALSE(got.load()) << "release(0) woke a waiter";
        EXPECT_EQ(sem.debug_count(), -1);
        sem.release();
        waiter.join();
        EXPECT_TRUE(got.load());
        EXPECT_EQ(sem.debug_count(), 0) << "a permit was made out of nothing";
    }
}

}  // namespace

namespace {

// The one-shot notification pattern: the acquirer destroys the semaphore as
// soon as acquire() returns, while the release() that handed it the permit
// may still be inside the queue (sync resumption: a release that reached the
// cell first spins there until the acquirer takes the permit, then leaves
// its epoch). std::binary_semaphore users (and spindle::latch, explicitly)
// expect this to be safe.
TEST(Semaphore, DestroyedRightAfterAcquireReturns) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kRounds = 10000;  // sanitizers: each round costs much more
#else
    constexpr int kRounds = 100000;  // the window is a few instructions: a hit is rare per round
#endif
    std::atomic<spindle::counting_semaphore<1>*> cur{nullptr};
    std::atomic<int> round{0};
    std::atomic<bool> stop_noise{false};
    std::vector<std::thread> noise;
    for (int i = 0; i < 2; ++i)
        noise.emplace_back([&] {
            while (!stop_noise.load(std::memory_order_relaxed)) std::this_thread::yield();
        });
    std::thread releaser([&] {
        for (int r = 0; r < kRounds; ++r) {
            spindle::counting_semaphore<1>* s;
            while ((s = cur.load(std::memory_order_acquire)) == nullptr) {
            }
            cur.store(nullptr, std::memory_order_relaxed);
            round.store(r + 1, std::memory_order_release);
            // Release once the acquirer is counted: it is on its way to its
            // cell, and the release may reach the cell first.
            if ((r & 1) != 0)
                while (s->debug_count() != -1) {
                }
            s->release();  // may still be inside when the acquirer deletes it
        }
    });
    for (int r = 0; r < kRounds; ++r) {
        auto* s = new spindle::counting_semaphore<1>(0);
        cur.store(s, std::memory_order_release);
        while (round.load(std::memory_order_acquire) != r + 1) {
        }
        s->acquire();
        delete s;
    }
    releaser.join();
    stop_noise.store(true);
    for (auto& t : noise) t.join();
}

}  // namespace

// ---- the last reference releases and frees ---------------------------------
//
// (tests/support/last_reference.hpp.) An object holds a semaphore used as a
// lock (one permit) or as a gate of a few permits, and a count of
// references to itself; whoever drops the last one deletes the object once
// its own release returned -- while the release that let it in may not
// have returned yet.

namespace {

struct sem_object : counted_object<sem_object> {
    explicit sem_object(int n) : refs(n) {}
    spindle::binary_semaphore sem{1};
    int refs;  // guarded by sem

    const void* primitive() const { return &sem; }  // its core, which the race points name
    void hold() { sem.acquire(); }
    void unhold() { sem.release(); }
    bool enter(std::stop_token st) { return sem.acquire(std::move(st)); }
    bool try_enter() { return sem.try_acquire(); }
    void enter() { sem.acquire(); }
    void leave() { sem.release(); }
    int drop() { return --refs; }
};

class SemaphoreLastReference : public ::testing::TestWithParam<party_kind> {};

// H releases the permit to W, who waits for it. Right after H's FAA has
// counted W (and before H hands the permit over), W is cancelled; W then
// tries to take a permit, drop the last reference, release and delete the
// object before H goes on. The permit is H's to hand over until H is done
// with the semaphore: W gets it from H's refused resume -- or from the word,
// if W asks again only once H has returned.
TEST_P(SemaphoreLastReference, ReleaseMatchedToACancelledWaiterIsDoneBeforeThePermitIsFree) {
    if (!race_points_enabled) GTEST_SKIP() << "race points exist only with SPINDLE_DEBUG_CHECKS";
    last_reference_scenario<sem_object>(GetParam(), race_point::semaphore_release_matched,
                                        race_point::semaphore_release_matched);
    last_reference_scenario<sem_object>(GetParam(), race_point::semaphore_release_matched,
                                        race_point::semaphore_release_matched, {.block_after_holder = true});
}

INSTANTIATE_TEST_SUITE_P(Holders, SemaphoreLastReference,
                         ::testing::Values(party_kind::fiber, party_kind::thread), party_name);

// Three permits. Each party takes one (timed waits of a few microseconds,
// retried, or acquire(stop_token) with a token nobody stops), drops its
// reference, and releases; the last one takes the other two permits as
// well -- so every other release has let its permit go -- gives all three
// back and deletes the object.
struct gate_object : counted_object<gate_object> {
    static constexpr int permits = 3;
    explicit gate_object(int n) : refs(n) {}
    spindle::counting_semaphore<permits> sem{permits};
    std::atomic<int> refs;
};

void take_one(gate_object& o, std::minstd_rand& rng) {
    if (rng() % 4 == 0) {
        std::stop_source never;
        EXPECT_TRUE(o.sem.acquire(never.get_token()));
        return;
    }
    while (!o.sem.try_acquire_for(short_timeout(rng))) {
    }
}

class SemaphoreLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(SemaphoreLastReferenceStress, TimedAcquiresRaceTheLastRelease) {
    const unsigned workers = GetParam();
    run_chain<gate_object>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                           [](gate_object& o, std::minstd_rand& rng) {
                               linger(rng);
                               take_one(o, rng);
                               linger(rng);
                               if (o.refs.fetch_sub(1) != 1) {
                                   o.sem.release();
                                   return;
                               }
                               for (int k = 1; k < gate_object::permits; ++k) take_one(o, rng);
                               o.sem.release(gate_object::permits);
                               delete &o;
                           });
}

INSTANTIATE_TEST_SUITE_P(Workers, SemaphoreLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
