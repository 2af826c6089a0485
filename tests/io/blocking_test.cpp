// spindle::blocking(fn): fn's value comes back (a move-only one too), its
// exception is rethrown in the caller, void works; from a fiber fn runs on
// another thread while the fiber's worker runs other fibers (shown by a
// call that can only finish once another fiber of the same single worker
// has run); 100 fibers blocking at once on 1 worker all finish, at most 64
// of the calls running at once; from a plain thread fn runs inline on that
// thread.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <spindle/io/blocking.hpp>

#include "../support/thread_state.hpp"
#include "io_support.hpp"

namespace {

using namespace spindle::test;

// Spins (sleeping briefly) until pred() holds or 30 s pass; true if it did.
// The bound only turns a hang into a failure.
template <class Pred>
bool within_30s(Pred pred) {
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > give_up) return false;
        std::this_thread::sleep_for(100us);
    }
    return true;
}

TEST(Blocking, ReturnsValues) {
    scheduler sched({.workers = 1});
    sched.spawn([] {
        EXPECT_EQ(spindle::blocking([] { return 42; }), 42);
        EXPECT_EQ(spindle::blocking([] { return std::string(1000, 'q'); }), std::string(1000, 'q'));
        std::unique_ptr<int> p = spindle::blocking([] { return std::make_unique<int>(7); });
        ASSERT_TRUE(p);
        EXPECT_EQ(*p, 7);
        int x = 1;
        int* px = spindle::blocking([&] { return &x; });
        EXPECT_EQ(px, &x);
    }).join();
}

TEST(Blocking, PropagatesExceptions) {
    scheduler sched({.workers = 2});
    sched.spawn([] {
        try {
            spindle::blocking([]() -> int { throw std::runtime_error("from the pool"); });
            ADD_FAILURE() << "no exception";
        } catch (const std::runtime_error& e) {
            EXPECT_STREQ(e.what(), "from the pool");
        }
        EXPECT_THROW(spindle::blocking([] { throw 5; }), int);
        // The fiber goes on normally afterwards.
        EXPECT_EQ(spindle::blocking([] { return 1; }), 1);
    }).join();
}

TEST(Blocking, VoidFunctions) {
    scheduler sched({.workers = 1});
    int side = 0;  // plain: written by fn before blocking() returns
    sched.spawn([&] {
        spindle::blocking([&] { side = 5; });
        EXPECT_EQ(side, 5);
    }).join();
    EXPECT_EQ(side, 5);
}

// From a fiber, fn runs on some other thread than the fiber's worker; from
// a plain thread, on that thread.
TEST(Blocking, WhereFnRuns) {
    scheduler sched({.workers = 1});
    sched.spawn([] {
        const pid_t worker = this_tid();
        const pid_t ran = spindle::blocking([] { return this_tid(); });
        EXPECT_NE(ran, worker);
        EXPECT_FALSE(spindle::blocking([] { return spindle::this_fiber::is_fiber(); }));
    }).join();
    const pid_t me = this_tid();
    EXPECT_EQ(spindle::blocking([] { return this_tid(); }), me);
    std::thread([] {
        const pid_t t = this_tid();
        EXPECT_EQ(spindle::blocking([] { return this_tid(); }), t);
    }).join();
}

// The worker runs other fibers while one is in blocking(): on 1 worker, fn
// waits until another fiber of that worker has counted to 100. If the
// worker were held, the counter would never move and fn would give up.
TEST(Blocking, WorkerRunsOthersMeanwhile) {
    scheduler sched({.workers = 1});
    std::atomic<int> counter{0};
    std::atomic<bool> done{false};
    fiber counting = sched.spawn([&] {
        while (!done.load()) {
            counter.fetch_add(1);
            this_fiber::yield();
        }
    });
    fiber blocked = sched.spawn([&] {
        const int start = counter.load();
        const bool saw = spindle::blocking([&] { return within_30s([&] { return counter.load() >= start + 100; }); });
        EXPECT_TRUE(saw) << "the worker did not run the other fiber while this one was in blocking()";
        done.store(true);
    });
    blocked.join();
    counting.join();
}

// 100 fibers on 1 worker each sleep 10 ms inside blocking(): all finish,
// each gets its own result, another fiber of the worker kept counting
// while they were away, and no more than 64 calls ran at once.
TEST(Blocking, HundredFibersOneWorker) {
    scheduler sched({.workers = 1});
    constexpr int n = 100;
    std::atomic<int> inside{0}, most{0}, finished{0}, counter{0};
    std::atomic<bool> done{false};
    std::atomic<int> counted_while_away{0};
    fiber counting = sched.spawn([&] {
        while (!done.load()) {
            counter.fetch_add(1);
            this_fiber::yield();
        }
    });
    std::vector<fiber> fs;
    for (int i = 0; i < n; ++i)
        fs.push_back(sched.spawn([&, i] {
            const int r = spindle::blocking([&, i] {
                const int now = inside.fetch_add(1) + 1;
                int m = most.load();
                while (now > m && !most.compare_exchange_weak(m, now)) {
                }
                const int c0 = counter.load();
                std::this_thread::sleep_for(10ms);
                if (counter.load() != c0) counted_while_away.fetch_add(1);
                inside.fetch_sub(1);
                return i * 3;
            });
            EXPECT_EQ(r, i * 3);
            finished.fetch_add(1);
        }));
    for (auto& f : fs) f.join();
    done.store(true);
    counting.join();
    EXPECT_EQ(finished.load(), n);
    EXPECT_LE(most.load(), 64) << "more blocking() calls ran at once than the pool has threads";
    EXPECT_GE(most.load(), 1);
    // The calls that found the counter still after 10 ms are not an error
    // in themselves (the counting fiber may have been between yields); that
    // none saw it move would mean the worker was held.
    EXPECT_GT(counted_while_away.load(), 0);
    std::printf("[ blocking ] at most %d at once; %d of %d saw the worker run on\n", most.load(),
                counted_while_away.load(), n);
}

// The pool grows while calls run: 10 calls from fibers of one worker each
// wait inside fn until all 10 are inside at once, which only a pool that
// started a thread for each can bring about. First one call, and a pause
// in which its thread goes idle: ten calls that find one idle thread must
// not all queue for it.
TEST(Blocking, CallsRunConcurrently) {
    scheduler sched({.workers = 1});
    sched.spawn([] { spindle::blocking([] {}); }).join();
    std::this_thread::sleep_for(20ms);  // the pool thread likely idle now; correct either way
    constexpr int n = 10;
    std::atomic<int> inside{0}, together{0};
    std::atomic<bool> gave_up{false};  // the first to give up lets the rest go
    std::vector<fiber> fs;
    for (int i = 0; i < n; ++i)
        fs.push_back(sched.spawn([&] {
            const bool all = spindle::blocking([&] {
                inside.fetch_add(1);
                if (within_30s([&] { return inside.load() == n || gave_up.load(); }) && inside.load() == n)
                    return true;
                gave_up.store(true);
                return false;
            });
            if (all) together.fetch_add(1);
        }));
    for (auto& f : fs) f.join();
    EXPECT_EQ(together.load(), n) << "blocking() calls did not run at the same time";
}

// Calls from fibers on 2 workers and from plain threads at once.
TEST(Blocking, MixedCallers) {
    scheduler sched({.workers = 2});
    std::atomic<int> sum{0};
    std::vector<fiber> fs;
    for (int i = 0; i < 50; ++i)
        fs.push_back(sched.spawn([&, i] { sum.fetch_add(spindle::blocking([i] { return i; })); }));
    std::vector<std::thread> ts;
    for (int i = 50; i < 54; ++i)
        ts.emplace_back([&, i] { sum.fetch_add(spindle::blocking([i] { return i; })); });
    for (auto& f : fs) f.join();
    for (auto& t : ts) t.join();
    EXPECT_EQ(sum.load(), 53 * 54 / 2);
}

}  // namespace
