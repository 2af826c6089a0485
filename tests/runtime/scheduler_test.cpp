// The executor under every primitive: idle workers steal ready fibers, and a
// fiber's timed sleep both runs its full time and ends early on a stop
// request. (The deque and the timer service underneath are tested directly
// in deque_test.cpp and timer_test.cpp.) And a scheduler whose worker 0 is
// the thread that calls run() (options::caller_is_worker).
#include <gtest/gtest.h>

#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/detail/worker.hpp>
#include <spindle/runtime/scheduler.hpp>

#include "../support/fiber_fixtures.hpp"

namespace {

using namespace spindle::test;

TEST(Executor, IdleWorkersStealWork) {
    scheduler sched({.workers = 2});
    std::mutex seen_m;
    std::set<int> seen;
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        // All spawned on this worker; the other one must steal some.
        for (int i = 0; i < 8; ++i) {
            fs.push_back(fiber([&] {
                auto until = std::chrono::steady_clock::now() + 20ms;
                while (std::chrono::steady_clock::now() < until) {
                }
                std::lock_guard g(seen_m);
                seen.insert(this_fiber::worker_index());
            }));
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(seen.size(), 2u);
}

TEST(Executor, SleepForSleepsAndStopWakesEarly) {
    scheduler sched({.workers = 2});
    std::atomic<bool> woke_ok{false};
    fiber f = sched.spawn([&] {
        auto t0 = std::chrono::steady_clock::now();
        bool full = this_fiber::sleep_for(20ms);
        woke_ok = full && std::chrono::steady_clock::now() - t0 >= 20ms;
    });
    f.join();
    EXPECT_TRUE(woke_ok.load());
    std::atomic<bool> early{false};
    fiber g = sched.spawn([&] {
        auto t0 = std::chrono::steady_clock::now();
        bool full = this_fiber::sleep_for(10s);
        early = !full && std::chrono::steady_clock::now() - t0 < 5s &&
                this_fiber::get_stop_token().stop_requested();
    });
    std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(g.request_stop());
    g.join();
    EXPECT_TRUE(early.load());
    // Many sleepers at once, on both workers, all wake.
    std::atomic<int> woke{0};
    std::vector<fiber> fs;
    for (int i = 0; i < 200; ++i)
        fs.push_back(sched.spawn([&, i] {
            this_fiber::sleep_for(std::chrono::microseconds(100 * (i % 20)));
            woke.fetch_add(1);
        }));
    for (auto& x : fs) x.join();
    EXPECT_EQ(woke.load(), 200);
}

// The idle watch's policy (detail::io_watch), spell by spell: the window
// opens to the full watch while sleeps are short on average, halves down to
// nothing while they are long, and one short sleep among long ones does
// not reopen it.
TEST(IoWatch, OpensOnShortSleepsAndClosesOnLongOnes) {
    constexpr std::int64_t max = 100'000;  // ns
    spindle::detail::io_watch w;
    EXPECT_EQ(w.window, 0);
    w.slept(40'000, max);
    EXPECT_EQ(w.window, max);
    // Long sleeps: the average passes max, then every spell halves.
    std::vector<std::int64_t> seen;
    for (int i = 0; i < 12 && w.window != 0; ++i) {
        w.slept(2'000'000, max);
        seen.push_back(w.window);
    }
    EXPECT_EQ(seen.front(), max / 2);
    EXPECT_EQ(w.window, 0) << "never closed";
    for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_LT(seen[i], seen[i - 1]);
    // A sleep of 5 us after a send among 2 ms waits: stays closed.
    for (int i = 0; i < 20; ++i) {
        w.slept(5'000, max);
        EXPECT_EQ(w.window, 0) << "spell " << i;
        w.slept(2'000'000, max);
        EXPECT_EQ(w.window, 0) << "spell " << i;
    }
    // The load turns into ping-pong: a few short sleeps bring the average
    // down and the window back.
    int spells = 0;
    while (w.window == 0 && spells < 20) {
        w.slept(30'000, max);
        ++spells;
    }
    EXPECT_EQ(w.window, max);
    EXPECT_GT(spells, 1);
}

}  // namespace

// ---- options::caller_is_worker: worker 0 is the thread that calls run() ----

namespace {

using spindle::fiber;
using spindle::scheduler;

// Threads in this process. ThreadSanitizer starts a thread of its own at
// the process's first pthread_create; one thread started and joined first
// (settle_threads) keeps that out of a test's before-and-after counts.
void settle_threads() { std::thread([] {}).join(); }

std::size_t thread_count() {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
        (void)e;
        ++n;
    }
    return n;
}

// One worker: the fibers, detached ones and the ones they spawn included,
// run on the caller's own thread, the process starts no thread, and run()
// returns once the last of them has finished.
TEST(CallerIsWorker, OneWorkerRunsEveryFiberOnTheCallerAndStartsNoThread) {
    settle_threads();
    const std::size_t before = thread_count();
    const pid_t caller = ::gettid();
    scheduler sched({.workers = 1, .caller_is_worker = true});
    EXPECT_EQ(thread_count(), before);
    std::atomic<int> done{0};
    std::atomic<int> elsewhere{0};
    std::atomic<std::size_t> threads_inside{0};
    sched.run([&] {
        threads_inside.store(thread_count());
        for (int i = 0; i < 100; ++i)
            sched.spawn([&] {
                spindle::this_fiber::yield();
                if (::gettid() != caller) elsewhere.fetch_add(1);
                sched.spawn([&] { done.fetch_add(1); }).detach();
                done.fetch_add(1);
            }).detach();
    });
    EXPECT_EQ(done.load(), 200);  // run() waited for the detached fibers
    EXPECT_EQ(elsewhere.load(), 0);
    EXPECT_EQ(threads_inside.load(), before);
    EXPECT_EQ(sched.live_fibers(), 0u);
}

TEST(CallerIsWorker, RunRethrowsWhatTheFunctionThrew) {
    scheduler sched({.workers = 1, .caller_is_worker = true});
    EXPECT_THROW(sched.run([] { throw std::runtime_error("from the fiber"); }), std::runtime_error);
}

TEST(CallerIsWorker, RunWithNoFiberReturnsAtOnce) {
    scheduler sched({.workers = 2, .caller_is_worker = true});
    sched.run();
    EXPECT_EQ(sched.live_fibers(), 0u);
}

// Nothing runs a fiber of a one-worker caller_is_worker scheduler before
// run(): there is no thread to.
TEST(CallerIsWorker, FibersSpawnedBeforeRunWaitForIt) {
    scheduler sched({.workers = 1, .caller_is_worker = true});
    std::atomic<bool> ran{false};
    fiber f = sched.spawn([&] { ran.store(true); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(ran.load());
    sched.run();
    EXPECT_TRUE(ran.load());
    f.join();
}

// With more workers, fibers spawned from outside before run() go to the
// workers that have threads: every one of them runs (and can be joined)
// before run().
TEST(CallerIsWorker, FibersSpawnedBeforeRunGoToTheThreads) {
    scheduler sched({.workers = 3, .caller_is_worker = true});
    std::atomic<int> ran{0};
    std::vector<fiber> fs;
    for (int i = 0; i < 12; ++i) fs.push_back(sched.spawn([&] { ran.fetch_add(1); }));
    for (auto& f : fs) f.join();  // would hang for a fiber placed on worker 0
    EXPECT_EQ(ran.load(), 12);
    sched.run();
}

// Two workers: the caller and one thread of the scheduler's; the fibers
// run on those two threads only.
TEST(CallerIsWorker, TwoWorkersAreTheCallerAndOneThread) {
    settle_threads();
    const std::size_t before = thread_count();
    const pid_t caller = ::gettid();
    scheduler sched({.workers = 2, .caller_is_worker = true});
    EXPECT_EQ(thread_count(), before + 1);
    EXPECT_EQ(sched.workers(), 2u);
    std::mutex m;
    std::set<pid_t> tids;
    std::atomic<int> done{0};
    sched.run([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < 64; ++i)
            fs.push_back(sched.spawn([&] {
                for (int k = 0; k < 10; ++k) {
                    {
                        std::lock_guard g(m);
                        tids.insert(::gettid());
                    }
                    spindle::this_fiber::yield();
                }
                done.fetch_add(1);
            }));
        for (auto& f : fs) f.join();
    });
    EXPECT_EQ(done.load(), 64);
    EXPECT_LE(tids.size(), 2u);
    tids.erase(caller);
    EXPECT_LE(tids.size(), 1u);  // the other is the scheduler's thread
    EXPECT_EQ(thread_count(), before);  // run() joined it
}

TEST(CallerIsWorker, SleepForOnTheCallersWorker) {
    scheduler sched({.workers = 1, .caller_is_worker = true});
    auto t0 = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration slept{};
    sched.run([&] {
        spindle::this_fiber::sleep_for(std::chrono::milliseconds(5));
        slept = std::chrono::steady_clock::now() - t0;
    });
    EXPECT_GE(slept, std::chrono::milliseconds(5));
}

// ~scheduler() before run() runs it: the fibers finish on the destroying
// thread.
TEST(CallerIsWorker, DestructorRunsWhatRunWouldHave) {
    std::atomic<int> done{0};
    {
        scheduler sched({.workers = 1, .caller_is_worker = true});
        for (int i = 0; i < 10; ++i) sched.spawn([&] { done.fetch_add(1); }).detach();
    }
    EXPECT_EQ(done.load(), 10);
}

// The worker loop sharpens its thread's timer slack; the caller gets its
// own back.
TEST(CallerIsWorker, TheCallersTimerSlackIsRestored) {
    ASSERT_EQ(::prctl(PR_SET_TIMERSLACK, 40000UL, 0UL, 0UL, 0UL), 0);
    {
        scheduler sched({.workers = 1, .caller_is_worker = true});
        int inside = -1;
        sched.run([&] { inside = ::prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL); });
        EXPECT_NE(inside, 40000);  // io_slice is on by default
    }
    EXPECT_EQ(::prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL), 40000);
    ::prctl(PR_SET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);  // back to the default
}

TEST(CallerIsWorkerDeath, RunWithoutTheOptionAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            sched.run();
        },
        "spindle: spindle::scheduler 0x[0-9a-f]+: run\\(\\) without options::caller_is_worker");
}

TEST(CallerIsWorkerDeath, RunTwiceAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1, .caller_is_worker = true});
            sched.run();
            sched.run();
        },
        "spindle: spindle::scheduler 0x[0-9a-f]+: run\\(\\) called twice \\(the first has returned\\)");
}

TEST(CallerIsWorkerDeath, RunFromAFiberAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1, .caller_is_worker = true});
            sched.run([&] { sched.run(); });
        },
        "spindle: spindle::scheduler 0x[0-9a-f]+: run\\(\\) from fiber [0-9]+; only a plain thread");
}

TEST(CallerIsWorkerDeath, DestroyedBeforeRunFromAFiberAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler outer({.workers = 1});
            outer.spawn([] {
                scheduler inner({.workers = 1, .caller_is_worker = true});
                inner.spawn([] {}).detach();
            }).join();
        },
        "spindle: spindle::scheduler 0x[0-9a-f]+ destroyed before run\\(\\), from fiber [0-9]+");
}

TEST(CallerIsWorkerDeath, SpawnAfterRunAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1, .caller_is_worker = true});
            sched.run();
            sched.spawn([] {}).detach();
        },
        "spindle: spindle::scheduler 0x[0-9a-f]+: spawn\\(\\) after run\\(\\) returned; its workers have stopped "
        "and fiber [0-9]+ would never run");
}

}  // namespace
