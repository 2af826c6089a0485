// fiber_options::worker and ::pinned: a pinned fiber never leaves its worker
// (not by stealing, not by a CES handoff, not by a wake from another
// worker or thread), while unpinned fibers around it migrate freely.
#include <gtest/gtest.h>

#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <spindle/runtime/detail/worker.hpp>
#include <spindle/sync/condition_variable.hpp>
#include <spindle/sync/mutex.hpp>

#include "../support/fiber_fixtures.hpp"

namespace {

using namespace spindle::test;

class Pinning : public ::testing::TestWithParam<handoff> {};

TEST_P(Pinning, PinnedFibersStayOnTheirWorker) {
    constexpr unsigned kWorkers = 4;
    scheduler sched({.workers = kWorkers, .stack_size = 32 * 1024});
    spindle::mutex m(GetParam());
    spindle::condition_variable cv;
    long long counter = 0;  // guarded by m
    std::atomic<int> moved{0}, migrations_of_unpinned{0};
    constexpr int kIters = 300;
    auto pinned_body = [&](int expect) {
        for (int k = 0; k < kIters; ++k) {
            if (this_fiber::worker_index() != expect) moved.fetch_add(1);
            {
                std::unique_lock lk(m);  // contended: CES handoffs to and from us
                ++counter;
                if (k % 16 == 0) cv.notify_all();
            }
            if (this_fiber::worker_index() != expect) moved.fetch_add(1);
            if (k % 3 == 0) this_fiber::yield();
            if (k % 50 == 0) this_fiber::sleep_for(100us);  // woken by the timer thread
        }
    };
    auto free_body = [&] {
        int start = this_fiber::worker_index();
        for (int k = 0; k < kIters; ++k) {
            {
                std::unique_lock lk(m);
                ++counter;
                if (k % 32 == 0) cv.wait_for(lk, 50us);
            }
            if (k % 5 == 0) this_fiber::yield();
        }
        if (this_fiber::worker_index() != start) migrations_of_unpinned.fetch_add(1);
    };
    std::vector<fiber> fs;
    for (int i = 0; i < 32; ++i) {
        int w = i % static_cast<int>(kWorkers);
        fs.push_back(sched.spawn([&, w] { pinned_body(w); }, {.worker = w, .pinned = true}));
        fs.push_back(sched.spawn(free_body));
    }
    // Fibers spawned pinned by a fiber, on the spawner's own worker.
    fs.push_back(sched.spawn([&] {
        int me = this_fiber::worker_index();
        std::vector<fiber> kids;
        for (int i = 0; i < 8; ++i) kids.push_back(fiber([&, me] { pinned_body(me); }, {.pinned = true}));
        for (auto& k : kids) k.join();
    }, {.pinned = true}));
    for (auto& f : fs) f.join();
    EXPECT_EQ(moved.load(), 0);
    EXPECT_EQ(counter, (32LL + 32 + 8) * kIters);
    // Not asserted (scheduling-dependent), but shows the test exercises
    // migration around the pinned fibers.
    std::printf("unpinned fibers that migrated: %d of 32\n", migrations_of_unpinned.load());
}

INSTANTIATE_TEST_SUITE_P(Policies, Pinning, ::testing::ValuesIn(spindle::test::all_policies),
                         spindle::test::policy_name);

TEST(Pinning, ThreadWakesAPinnedFiberOnItsWorker) {
    scheduler sched({.workers = 2});
    spindle::mutex m;
    std::atomic<int> wrong{0};
    m.lock();  // held by this thread: the fibers queue behind it
    std::vector<fiber> fs;
    for (int i = 0; i < 6; ++i) {
        int w = i % 2;
        fs.push_back(sched.spawn([&, w] {
            m.lock();
            if (this_fiber::worker_index() != w) wrong.fetch_add(1);
            m.unlock();
        }, {.worker = w, .pinned = true}));
    }
    std::this_thread::sleep_for(10ms);
    m.unlock();
    for (auto& f : fs) f.join();
    EXPECT_EQ(wrong.load(), 0);
}

// Mixed policies: pinned A inline-resumes B (B->resumer = A); B then does a
// CES handoff, goes to the executor and may be stolen. A must still run on
// its own worker when B next suspends or ends.
TEST(Pinning, InlineResumerOfAFiberThatHandsOffStaysHome) {
    for (int rep = 0; rep < 3; ++rep) {
        scheduler sched({.workers = 2});
        spindle::mutex mi(handoff::inline_resume);
        spindle::mutex mc(handoff::ces);
        std::atomic<bool> a_has_mi{false}, b_has_mc{false}, b_waiting{false}, c_waiting{false};
        std::atomic<int> a_after{-2};
        fiber a = sched.spawn([&] {
            mi.lock();
            a_has_mi = true;
            while (!b_waiting || !c_waiting) this_fiber::sleep_for(1ms);
            this_fiber::sleep_for(20ms);   // B is parked on mi, C on mc
            mi.unlock();                   // inline: B runs here, nested
            a_after = this_fiber::worker_index();
        }, {.worker = 0, .pinned = true});
        fiber b = sched.spawn([&] {
            while (!a_has_mi) this_fiber::sleep_for(1ms);
            mc.lock();
            b_has_mc = true;
            b_waiting = true;
            mi.lock();
            mi.unlock();
            mc.unlock();  // ces: C runs here; B goes to the executor
        }, {.worker = 1});
        fiber c = sched.spawn([&] {
            while (!b_has_mc) this_fiber::sleep_for(1ms);
            c_waiting = true;
            mc.lock();
            auto t0 = std::chrono::steady_clock::now();
            while (std::chrono::steady_clock::now() - t0 < 30ms) {}  // keep this worker: B gets stolen
            mc.unlock();
        }, {.worker = 1});
        a.join();
        b.join();
        c.join();
        EXPECT_EQ(a_after.load(), 0) << "repetition " << rep;
    }
}

// A chain two deep: pinned P inline-resumes R (R->resumer = P), R
// inline-resumes T (T->resumer = R), T hands off with CES. T's resumer R
// becomes ready where a thief may take it -- still carrying P as its own
// resumer, to run when R next suspends or ends. A thief that runs R then ran
// P on its own worker. Built on the park API directly, so that each step
// switches (a handoff switches only into a waiter that has parked).
TEST(Pinning, PinnedFiberDeepInAnInlineChainStaysHome) {
    using spindle::detail::waiter;
    constexpr int kRounds = 20;
    int p_moved = 0, rounds_run = 0;
    for (int round = 0; round < kRounds; ++round) {
        scheduler sched({.workers = 2});
        waiter wr, wt, ws;
        std::atomic<int> p_after{-1};
        auto parked = [](const waiter& w) {
            return w.state.load(std::memory_order_acquire) == spindle::detail::park_parked;
        };
        auto park_here = [](waiter& w) {
            w.fiber = spindle::detail::running_fiber();
            spindle::detail::park(&w);
        };
        // S: woken by T's CES handoff; keeps worker 0 busy so the other
        // worker steals what the handoff made ready.
        fiber s = sched.spawn([&] {
            park_here(ws);
            auto t0 = std::chrono::steady_clock::now();
            while (std::chrono::steady_clock::now() - t0 < 20ms) {}
        }, {.worker = 0});
        fiber t = sched.spawn([&] {
            park_here(wt);
            spindle::detail::unpark_with(&ws, handoff::ces);
        }, {.worker = 0});
        fiber r = sched.spawn([&] {
            park_here(wr);
            spindle::detail::unpark_with(&wt, handoff::inline_resume);
        }, {.worker = 0});
        fiber p = sched.spawn([&] {
            while (!parked(wr) || !parked(wt) || !parked(ws)) this_fiber::sleep_for(100us);
            spindle::detail::unpark_with(&wr, handoff::inline_resume);
            p_after = this_fiber::worker_index();
        }, {.worker = 0, .pinned = true});
        p.join();
        r.join();
        t.join();
        s.join();
        ++rounds_run;
        if (p_after.load() != 0) ++p_moved;
    }
    EXPECT_EQ(rounds_run, kRounds);
    EXPECT_EQ(p_moved, 0);
}

// A ready pinned fiber must get its turn among fibers that only yield
// (nobody else can run it: no thief may take it).
TEST(Pinning, ReadyPinnedFiberIsNotStarvedByYielders) {
    scheduler sched({.workers = 2});
    std::atomic<bool> b_started{false}, done{false};
    int starved = 0;
    fiber b = sched.spawn([&] {
        b_started = true;
        while (!done) this_fiber::yield();
    }, {.worker = 0, .pinned = true});
    fiber a = sched.spawn([&] {
        while (!b_started) this_fiber::yield();
        for (int attempt = 0; attempt < 40; ++attempt) {
            std::atomic<bool> ran{false};
            fiber c([&] { ran = true; }, {.pinned = true});  // ready on this worker
            // A few dozen yields suffice; a starved fiber never runs.
            for (int spins = 0; !ran && spins < 100000; ++spins) this_fiber::yield();
            if (!ran) ++starved;
            c.join();
        }
        done = true;
    }, {.worker = 0, .pinned = true});
    a.join();
    b.join();
    EXPECT_EQ(starved, 0);
}

TEST(Pinning, BadWorkerIndexThrows) {
    scheduler sched({.workers = 2});
    EXPECT_THROW((void)sched.spawn([] {}, {.worker = 2}), std::invalid_argument);
    EXPECT_THROW((void)sched.spawn([] {}, {.worker = -2}), std::invalid_argument);
    fiber ok = sched.spawn([] { EXPECT_EQ(this_fiber::worker_index(), 1); }, {.worker = 1, .pinned = true});
    ok.join();
}

}  // namespace
