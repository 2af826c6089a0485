// Fibers that migrate between workers at their suspensions (work stealing,
// CES handoffs) must see the thread they land on: its worker, its C++
// exception state. Compilers keep the thread pointer of the thread a
// function started on in a register across the switch unless it is read
// afresh (spindle/arch/tls.hpp); then a fiber that moved ran the old
// worker's post-switch action from another thread -- lost wake-ups, a fiber
// made ready twice, crashes. The loop of the original report,
// `m.lock(); m.unlock(); this_fiber::yield();` on 2 workers, crashed 4 runs
// in 10 built with Clang 16 and 8 in 10 on AArch64 under qemu.
//
// Each fiber checks, after every operation that may have switched:
//   - this_fiber::get_id() is its own id (the worker's `current` is us);
//   - worker_index() names the worker of the OS thread it is on (a map
//     worker -> kernel thread id, filled on first sight);
//   - counts guarded by the lock add up at the end;
//   - inside a catch handler, across switches, std::current_exception() is
//     still its own exception (the exception state pointer of the thread it
//     is on, not of the one it left).
// Run in every build (GCC, Clang, ASan, TSan) and, with more than one
// worker, on AArch64 under qemu (make aarch64).
#include <gtest/gtest.h>

#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <vector>

#include <spindle/runtime/generator.hpp>
#include <spindle/sync/counting_semaphore.hpp>
#include <spindle/sync/cqs_mutex.hpp>
#include <spindle/sync/mutex.hpp>

#include "../support/fiber_fixtures.hpp"

namespace {

using namespace spindle::test;

#if SPINDLE_TSAN || SPINDLE_ASAN
constexpr int kIters = 300;
#else
constexpr int kIters = 1500;
#endif
// A run too short for the other workers to wake may never move a fiber, and
// busy workers steal nothing: a fiber moves when another worker is idle
// while it is ready. So after kIters rounds with no move yet, the fibers go
// on, sleeping now and then (a worker whose fibers all sleep goes looking
// for work on the others), until one has moved or kMoveDeadline has passed.
constexpr auto kMoveDeadline = std::chrono::seconds(60);
// What the fibers of one test saw.
struct observations {
    std::atomic<long> wrong_fiber{0};   // get_id() named another fiber
    std::atomic<long> wrong_worker{0};  // worker_index() is another thread's worker
    std::atomic<long> migrations{0};    // worker changes seen across a switch
    std::atomic<long> tid_of_worker[16] = {};
    const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

    // After anything that may have switched: are we who and where we think?
    void check(fiber::id me, int& last_worker) {
        if (this_fiber::get_id() != me) wrong_fiber.fetch_add(1, std::memory_order_relaxed);
        const int w = this_fiber::worker_index();
        const long tid = static_cast<long>(::syscall(SYS_gettid));  // a system call: never cached
        if (w < 0 || w >= 16) {
            wrong_worker.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        long expected = 0;
        if (!tid_of_worker[w].compare_exchange_strong(expected, tid, std::memory_order_relaxed) &&
            expected != tid)
            wrong_worker.fetch_add(1, std::memory_order_relaxed);
        if (last_worker >= 0 && w != last_worker) migrations.fetch_add(1, std::memory_order_relaxed);
        last_worker = w;
    }

    // Go on with round k? At least kIters rounds, then until a fiber has
    // migrated (with one worker: never), or the deadline.
    bool more(int k, unsigned workers) const {
        if (k < kIters) return true;
        if (workers < 2 || migrations.load(std::memory_order_relaxed) != 0) return false;
        if (std::chrono::steady_clock::now() - start > kMoveDeadline) return false;
        if (k % 16 == 0) this_fiber::sleep_for(std::chrono::microseconds(200));
        return true;
    }

    void expect_clean(unsigned workers) {
        EXPECT_EQ(wrong_fiber.load(), 0);
        EXPECT_EQ(wrong_worker.load(), 0);
        // With several workers the fibers move (the rounds went on until
        // they did, or a minute passed; otherwise this test would not test
        // migration).
        if (workers > 1) {
            EXPECT_GT(migrations.load(), 0);
        }
    }
};

class Migration : public ::testing::TestWithParam<workers_and_policy> {
protected:
    unsigned workers() const { return GetParam().workers; }
    handoff policy() const { return GetParam().policy; }
    int fibers() const { return 4 * static_cast<int>(workers()); }
};

// The report's loop, with the yield inlined into this loop.
TEST_P(Migration, LockUnlockYieldLoop) {
    scheduler sched(stress_options(workers()));
    spindle::mutex m(policy());
    long counter = 0;  // guarded by m
    std::atomic<long> rounds{0};
    observations obs;
    std::vector<fiber> fs;
    for (int i = 0; i < fibers(); ++i)
        fs.push_back(sched.spawn([&] {
            const fiber::id me = this_fiber::get_id();
            int last = this_fiber::worker_index();  // a move before the first check counts too
            int k = 0;
            for (; obs.more(k, workers()); ++k) {
                m.lock();
                ++counter;
                m.unlock();
                this_fiber::yield();
                obs.check(me, last);
            }
            rounds.fetch_add(k);
        }));
    for (auto& f : fs) f.join();
    EXPECT_EQ(counter, rounds.load());
    obs.expect_clean(workers());
}

// The CQS primitives' paths (resume of a cell, synchronous handoff), and a
// semaphore that lets two fibers in at once.
TEST_P(Migration, CqsMutexAndSemaphoreLoop) {
    scheduler sched(stress_options(workers()));
    spindle::cqs_mutex m(policy());
    spindle::counting_semaphore<> sem(2, policy());
    std::atomic<int> inside{0};
    std::atomic<int> over{0};
    long counter = 0;  // guarded by m
    std::atomic<long> rounds{0};
    observations obs;
    std::vector<fiber> fs;
    for (int i = 0; i < fibers(); ++i)
        fs.push_back(sched.spawn([&] {
            const fiber::id me = this_fiber::get_id();
            int last = this_fiber::worker_index();  // a move before the first check counts too
            int k = 0;
            for (; obs.more(k, workers()); ++k) {
                sem.acquire();
                if (inside.fetch_add(1) >= 2) over.fetch_add(1);
                this_fiber::yield();
                obs.check(me, last);
                inside.fetch_sub(1);
                sem.release();
                m.lock();
                ++counter;
                m.unlock();
                obs.check(me, last);
            }
            rounds.fetch_add(k);
        }));
    for (auto& f : fs) f.join();
    EXPECT_EQ(counter, rounds.load());
    EXPECT_EQ(over.load(), 0);
    obs.expect_clean(workers());
}

struct tagged_error {
    std::uint64_t id;
};

// A fiber that switches inside a catch handler keeps its own exception: the
// state is parked and installed through the thread's exception-state
// pointer, which must be the one of the thread the fiber is on at the time.
// A generator resumed from the migrating fiber switches too.
TEST_P(Migration, CaughtExceptionAndGeneratorSurviveMigration) {
    scheduler sched(stress_options(workers()));
    spindle::mutex m(policy());
    long counter = 0;  // guarded by m
    std::atomic<long> wrong_exception{0}, wrong_values{0}, rounds{0};
    observations obs;
    std::vector<fiber> fs;
    for (int i = 0; i < fibers(); ++i)
        fs.push_back(sched.spawn([&] {
            const fiber::id me = this_fiber::get_id();
            int last = this_fiber::worker_index();  // a move before the first check counts too
            spindle::generator<long> g([](auto& y) {
                for (long v = 0;; ++v) y(v);
            }, 32 * 1024);
            long expect = 0;
            int r = 0;
            for (; obs.more(r * 10, workers()); ++r) {
                try {
                    throw tagged_error{me.value()};
                } catch (const tagged_error&) {
                    for (int k = 0; k < 10; ++k) {
                        m.lock();
                        ++counter;
                        m.unlock();
                        this_fiber::yield();
                        obs.check(me, last);
                        if (!g.next() || g.value() != expect++) wrong_values.fetch_add(1);
                        try {
                            std::rethrow_exception(std::current_exception());
                        } catch (const tagged_error& e) {
                            if (e.id != me.value()) wrong_exception.fetch_add(1);
                        } catch (...) {
                            wrong_exception.fetch_add(1);
                        }
                    }
                }
                if (std::current_exception() != nullptr) wrong_exception.fetch_add(1);
            }
            rounds.fetch_add(r * 10);
        }));
    for (auto& f : fs) f.join();
    EXPECT_EQ(counter, rounds.load());
    EXPECT_EQ(wrong_exception.load(), 0);
    EXPECT_EQ(wrong_values.load(), 0);
    obs.expect_clean(workers());
}

std::vector<workers_and_policy> migrating_params() {
    std::vector<workers_and_policy> v;
    for (unsigned w : {2u, 4u, 8u})
        for (handoff p : all_policies) v.push_back({w, p});
    return v;
}

INSTANTIATE_TEST_SUITE_P(Workers, Migration, ::testing::ValuesIn(migrating_params()), workers_and_policy_name);

}  // namespace
