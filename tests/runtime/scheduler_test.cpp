// The executor under every primitive: idle workers steal ready fibers, and a
// fiber's timed sleep both runs its full time and ends early on a stop
// request. (The deque and the timer service underneath are tested directly
// in deque_test.cpp and timer_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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
