// detail::cqs: the CQS paper's mutexes built on it (Listing 3, simple
// cancellation; Listing 5, smart cancellation; and a smart mutex with
// synchronous resumption and an exact try_lock), run by fibers over 1, 2 and
// 4 workers and by plain threads mixed; FIFO order; cancellation storms by
// timeouts and stop tokens (no permit or wake-up lost); sync-mode try
// semantics; elimination; removal and reclamation of cancelled segments.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/detail/cqs.hpp>

#include "../support/fiber_fixtures.hpp"

namespace {

using namespace spindle::test;
using spindle::detail::cqs;
using spindle::detail::cqs_cancellation;
using spindle::detail::cqs_hooks;
using spindle::detail::cqs_resumption;
using spindle::detail::cqs_status;
using spindle::detail::no_deadline;

struct unit {};

enum class kind { simple, smart, smart_sync };

const char* to_string(kind k) {
    switch (k) {
    case kind::simple: return "simple";
    case kind::smart: return "smart";
    case kind::smart_sync: return "smart_sync";
    }
    return "?";
}

// The paper's mutex (Listing 3) on cqs. state: 1 unlocked; w <= 0 locked with
// -w waiters. simple: Listing 3 with simple cancellation (unlock retries past
// cancelled waiters); smart: Listing 5's hooks; smart_sync: smart, plus
// synchronous resumption so try_lock is exact, and lock retries a broken
// rendezvous.
class cqs_mutex {
public:
    explicit cqs_mutex(kind k, spindle::handoff policy = spindle::handoff::dispatch)
        : kind_(k),
          policy_(policy),
          q_(k == kind::simple ? cqs_cancellation::simple : cqs_cancellation::smart,
             k == kind::smart_sync ? cqs_resumption::sync : cqs_resumption::async,
             cqs_hooks<unit>{&on_cancellation, &complete_refused_resume, &return_value, this}) {}

    bool lock(std::chrono::steady_clock::time_point deadline = no_deadline, std::stop_token* st = nullptr) {
        for (;;) {
            // acq_rel: acquires the previous holder's critical section.
            if (state_.fetch_sub(1, std::memory_order_acq_rel) > 0) return true;
            auto r = q_.suspend(deadline, st);
            if (r.status == cqs_status::resumed) return true;
            if (r.status == cqs_status::cancelled) return false;
            // broken (sync mode): our unlocker gave up; try again
        }
    }
    bool try_lock() {
        std::int64_t s = state_.load(std::memory_order_relaxed);
        while (s > 0)
            if (state_.compare_exchange_weak(s, s - 1, std::memory_order_acquire, std::memory_order_relaxed))
                return true;
        return false;
    }
    void unlock() {
        for (;;) {
            if (state_.fetch_add(1, std::memory_order_acq_rel) >= 0) return;
            if (q_.resume(unit{}, policy_)) return;
            // simple: the waiter was cancelled; sync: no rendezvous. The
            // increment above balanced its decrement: go again.
        }
    }

    std::atomic<std::int64_t> state_{1};
    kind kind_;
    spindle::handoff policy_;
    cqs<unit> q_;

private:
    static bool on_cancellation(void* self, std::uint64_t) noexcept {
        auto* m = static_cast<cqs_mutex*>(self);
        // Listing 5: give the waiter's decrement back. s < 0: still locked,
        // skip the cell; s == 0: now unlocked, refuse the coming resume.
        return m->state_.fetch_add(1, std::memory_order_acq_rel) < 0;
    }
    static void complete_refused_resume(void*, unit) noexcept {}  // the increment above unlocked it
    static void return_value(void* self, unit) noexcept { static_cast<cqs_mutex*>(self)->unlock(); }
};

struct Param {
    unsigned workers;
    kind k;
    spindle::handoff policy;
};

std::vector<Param> params() {
    std::vector<Param> v;
    for (unsigned w : {1u, 2u, 4u})
        for (kind k : {kind::simple, kind::smart, kind::smart_sync})
            for (auto p : {spindle::handoff::dispatch, spindle::handoff::ces}) v.push_back({w, k, p});
    return v;
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
    return std::string(to_string(i.param.k)) + "_" + spindle::to_string(i.param.policy) + "_" +
           std::to_string(i.param.workers) + "workers";
}

class CqsMutex : public ::testing::TestWithParam<Param> {};

TEST_P(CqsMutex, MutualExclusionWithFibersAndThreads) {
    const auto [workers, k, policy] = GetParam();
    scheduler sched(stress_options(workers));
    cqs_mutex m(k, policy);
    long long counter = 0;  // guarded by m; non-atomic on purpose
    int inside = 0;
    std::atomic<int> violations{0};
    constexpr int kIters = 20;
    auto body = [&](int i) {
        for (int n = 0; n < kIters; ++n) {
            ASSERT_TRUE(m.lock());
            if (++inside != 1) violations.fetch_add(1);
            long long c = counter;
            if ((i + n) % 7 == 0) this_fiber::yield();
            counter = c + 1;
            --inside;
            m.unlock();
            if ((i + n) % 3 == 0) this_fiber::yield();
        }
    };
    run_crowd(sched, {.fibers = stress_fibers, .threads = 2}, body);
    EXPECT_EQ(violations.load(), 0);
    EXPECT_EQ(counter, static_cast<long long>(stress_fibers + 2) * kIters);
    EXPECT_EQ(m.state_.load(), 1);
    EXPECT_TRUE(m.try_lock());
    m.unlock();
    m.q_.reclaim();
    EXPECT_LE(m.q_.live_segments(), 3u);  // everything consumed: heads and tail only
}

// Thousands of lock attempts with short timeouts and stop requests while
// others lock and unlock: every success is counted inside the critical
// section, and at the end the mutex is free with nobody queued.
TEST_P(CqsMutex, CancellationStorm) {
    const auto [workers, k, policy] = GetParam();
    scheduler sched(stress_options(workers));
    cqs_mutex m(k, policy);
    long long counter = 0;  // guarded by m
    int inside = 0;
    std::atomic<long long> successes{0}, failures{0};
    std::atomic<int> violations{0};
    constexpr int kIters = 10;
    // Stop sources fired by a separate thread while their owners wait.
    constexpr int kStoppable = 64;
    std::vector<std::stop_source> sources(kStoppable);
    std::atomic<bool> stopper_done{false};
    auto body = [&](int i) {
        std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 1u);
        for (int n = 0; n < kIters; ++n) {
            bool got;
            switch ((i + n) % 4) {
            case 0: got = m.lock(); break;
            case 1: {
                std::stop_token tok = sources[static_cast<std::size_t>(i) % kStoppable].get_token();
                got = m.lock(no_deadline, &tok);
                break;
            }
            default:
                got = m.lock(std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 300));
                break;
            }
            if (!got) {
                failures.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            successes.fetch_add(1, std::memory_order_relaxed);
            if (++inside != 1) violations.fetch_add(1);
            long long c = counter;
            if (rng() % 4 == 0) this_fiber::yield();
            if (rng() % 16 == 0) std::this_thread::sleep_for(20us);
            counter = c + 1;
            --inside;
            m.unlock();
        }
    };
    std::thread stopper([&] {
        // Fire the sources one by one; renew them so later waits can be stopped too.
        for (int round = 0; round < 8 && !stopper_done.load(); ++round) {
            for (int s = 0; s < kStoppable; ++s) {
                std::this_thread::sleep_for(20us);
                sources[static_cast<std::size_t>(s)].request_stop();
            }
        }
    });
    // A hog holds the mutex for long stretches, so that queues build up and
    // short deadlines expire while waiters are parked.
    std::atomic<bool> hog_done{false};
    std::thread hog([&] {
        for (int n = 0; n < 40 && !hog_done.load(); ++n) {
            ASSERT_TRUE(m.lock());
            successes.fetch_add(1, std::memory_order_relaxed);
            if (++inside != 1) violations.fetch_add(1);
            long long c = counter;
            std::this_thread::sleep_for(300us);
            counter = c + 1;
            --inside;
            m.unlock();
            std::this_thread::sleep_for(100us);
        }
    });
    // Threads wait with deadlines too (the futex timed path).
    run_crowd(sched, {.fibers = stress_fibers, .threads = 3, .first_thread = 2}, body);
    hog_done.store(true);
    hog.join();
    stopper_done.store(true);
    stopper.join();
    EXPECT_EQ(violations.load(), 0);
    EXPECT_GT(failures.load(), 0);  // the storm did cancel
    EXPECT_EQ(counter, successes.load());
    const long long hog_rounds = counter - (static_cast<long long>(stress_fibers + 3) * kIters - failures.load());
    EXPECT_GE(hog_rounds, 1);
    EXPECT_LE(hog_rounds, 40);
    std::printf("    [%s, %u workers: %lld acquired, %lld cancelled]\n", to_string(k), workers, successes.load(),
                failures.load());
    // No permit lost, none duplicated: free, and exactly one can take it.
    EXPECT_EQ(m.state_.load(), 1);
    EXPECT_TRUE(m.try_lock());
    EXPECT_FALSE(m.try_lock());
    m.unlock();
    // No wake-up lost: a fresh waiter gets it from a fresh holder.
    ASSERT_TRUE(m.lock());
    std::thread w([&] {
        EXPECT_TRUE(m.lock());
        m.unlock();
    });
    std::this_thread::sleep_for(2ms);
    m.unlock();
    w.join();
    EXPECT_EQ(m.state_.load(), 1);
    m.q_.reclaim();
    EXPECT_LE(m.q_.live_segments(), 3u);
}

INSTANTIATE_TEST_SUITE_P(WorkersAndModes, CqsMutex, ::testing::ValuesIn(params()), param_name);

TEST(Cqs, FifoOrder) {
    for (kind k : {kind::simple, kind::smart, kind::smart_sync}) {
        scheduler sched({.workers = 1});  // one worker gives a known arrival order
        cqs_mutex m(k);
        std::vector<int> arrived, acquired;  // one worker, and m
        fiber outer = sched.spawn([&] {
            ASSERT_TRUE(m.lock());
            std::vector<fiber> fs;
            for (int i = 0; i < 40; ++i) {
                fs.push_back(fiber([&, i] {
                    arrived.push_back(i);  // just before queueing: one worker, no preemption
                    EXPECT_TRUE(m.lock());
                    acquired.push_back(i);
                    m.unlock();
                }));
            }
            while (arrived.size() < 40) this_fiber::yield();
            m.unlock();
            for (auto& f : fs) f.join();
        });
        outer.join();
        EXPECT_EQ(acquired, arrived) << to_string(k);
    }
}

// Waiters that time out in the middle of the queue are skipped; FIFO among
// the others holds.
TEST(Cqs, CancelledWaitersInTheMiddleAreSkipped) {
    for (kind k : {kind::simple, kind::smart, kind::smart_sync}) {
        scheduler sched({.workers = 1});
        cqs_mutex m(k);
        std::vector<int> acquired;
        std::vector<std::stop_source> src(10);
        fiber outer = sched.spawn([&] {
            ASSERT_TRUE(m.lock());
            std::vector<fiber> fs;
            for (int i = 0; i < 10; ++i) {
                fs.push_back(fiber([&, i] {
                    std::stop_token t = src[static_cast<std::size_t>(i)].get_token();
                    if (m.lock(no_deadline, &t)) {
                        acquired.push_back(i);
                        m.unlock();
                    }
                }));
                this_fiber::yield();  // it queues
            }
            for (int i = 0; i < 10; i += 2) src[static_cast<std::size_t>(i)].request_stop();
            for (int i = 0; i < 10; ++i) this_fiber::yield();  // the cancelled ones leave
            m.unlock();
            for (auto& f : fs) f.join();
        });
        outer.join();
        EXPECT_EQ(acquired, (std::vector<int>{1, 3, 5, 7, 9})) << to_string(k);
        EXPECT_EQ(m.state_.load(), 1) << to_string(k);
    }
}

// Threads with deadlines time out on the futex path while a fiber holds.
TEST(Cqs, ThreadsTimeOutAndStateIsRestored) {
    for (kind k : {kind::simple, kind::smart, kind::smart_sync}) {
        cqs_mutex m(k);
        ASSERT_TRUE(m.lock());
        std::vector<std::thread> ts;
        std::atomic<int> timed_out{0};
        for (int t = 0; t < 4; ++t)
            ts.emplace_back([&] {
                if (!m.lock(std::chrono::steady_clock::now() + 2ms)) timed_out.fetch_add(1);
            });
        for (auto& t : ts) t.join();
        EXPECT_EQ(timed_out.load(), 4) << to_string(k);
        m.unlock();
        EXPECT_EQ(m.state_.load(), 1) << to_string(k);
        EXPECT_TRUE(m.try_lock());
        m.unlock();
    }
}

// Elimination: a resume that comes first leaves its value in the cell.
TEST(Cqs, ResumeBeforeSuspendLeavesTheValue) {
    cqs<std::uint64_t> q;
    EXPECT_TRUE(q.resume(42));
    EXPECT_TRUE(q.resume(43));
    auto a = q.suspend();
    auto b = q.suspend();
    EXPECT_EQ(a.status, cqs_status::resumed);
    EXPECT_EQ(a.value, 42u);
    EXPECT_EQ(b.status, cqs_status::resumed);
    EXPECT_EQ(b.value, 43u);
}

// Pointers travel through the queue to parked threads in order.
TEST(Cqs, PassesPointersToParkedWaitersInOrder) {
    cqs<int*> q;
    int xs[3] = {1, 2, 3};
    std::vector<int> got(3);
    std::atomic<int> ready{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t) {
        ts.emplace_back([&, t] {
            ready.fetch_add(1);
            auto r = q.suspend();
            EXPECT_EQ(r.status, cqs_status::resumed);
            got[static_cast<std::size_t>(t)] = *r.value;
        });
        while (ready.load() != t + 1) std::this_thread::yield();
        std::this_thread::sleep_for(1ms);  // it took its cell
    }
    for (int& x : xs) EXPECT_TRUE(q.resume(&x));
    for (auto& t : ts) t.join();
    EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
}

// Synchronous resumption: no value is ever left in the queue. A resume with
// no suspender fails (BROKEN), and so does the suspend that comes later.
TEST(Cqs, SyncResumeWithoutSuspenderBreaksTheCell) {
    cqs<unit> q(cqs_cancellation::simple, cqs_resumption::sync);
    EXPECT_FALSE(q.resume(unit{}));
    EXPECT_EQ(q.suspend().status, cqs_status::broken);
    // A rendezvous: both sides retry broken cells in step.
    std::thread t([&] {
        while (q.suspend().status == cqs_status::broken) {
        }
    });
    while (!q.resume(unit{})) {
    }
    t.join();
}

// The point of sync mode: an unlock racing a locker that has announced
// itself (decremented state) but not reached the queue. Async leaves the
// permit in the cell, so try_lock fails on a free mutex; sync hands the
// permit back to the state word, so try_lock takes it.
TEST(Cqs, SyncResumptionKeepsTryLockExact) {
    {
        cqs_mutex m(kind::smart);
        ASSERT_TRUE(m.lock());
        m.state_.fetch_sub(1);  // a locker announced itself, then stalled
        m.unlock();             // leaves the permit in the cell
        EXPECT_FALSE(m.try_lock());
        EXPECT_EQ(m.q_.suspend().status, cqs_status::resumed);  // the stalled locker gets it
        m.unlock();
        EXPECT_EQ(m.state_.load(), 1);
    }
    {
        cqs_mutex m(kind::smart_sync);
        ASSERT_TRUE(m.lock());
        m.state_.fetch_sub(1);  // a locker announced itself, then stalled
        m.unlock();             // no rendezvous: BROKEN, the permit goes back to state
        EXPECT_EQ(m.state_.load(), 1);
        EXPECT_TRUE(m.try_lock());
        // The stalled locker arrives: its cell is broken, it retries and waits.
        std::atomic<bool> got{false};
        std::thread t([&] {
            auto r = m.q_.suspend();
            EXPECT_EQ(r.status, cqs_status::broken);
            EXPECT_TRUE(m.lock());
            got.store(true);
            m.unlock();
        });
        std::this_thread::sleep_for(5ms);
        EXPECT_FALSE(got.load());
        m.unlock();
        t.join();
        EXPECT_TRUE(got.load());
        EXPECT_EQ(m.state_.load(), 1);
    }
}

// Smart cancellation: REFUSE. The holder's unlock has incremented state and
// is about to resume the only waiter, which cancels: on_cancellation sees the
// mutex unlocked and refuses the coming resume.
TEST(Cqs, SmartCancellationRefusesTheResumeOfTheLastWaiter) {
    struct counts {
        std::atomic<std::int64_t> state{0};
        std::atomic<int> refused{0};
        std::uint64_t tag = 0;  // the tag on_cancellation saw
    } c;
    cqs_hooks<unit> h{
        [](void* self, std::uint64_t tag) noexcept {
            auto* k = static_cast<counts*>(self);
            k->tag = tag;
            return k->state.fetch_add(1) < 0;
        },
        [](void* self, unit) noexcept { static_cast<counts*>(self)->refused.fetch_add(1); },
        [](void*, unit) noexcept {},
        &c,
    };
    cqs<unit> q(cqs_cancellation::smart, cqs_resumption::async, h);
    // Waiter: state 0 -> -1, suspend, cancelled by an already-stopped token
    // after the "unlock" below brought state back to 0.
    c.state.fetch_sub(1);
    c.state.fetch_add(1);  // the unlock's increment (it will resume later)
    std::stop_source src;
    src.request_stop();
    std::stop_token tok = src.get_token();
    EXPECT_EQ(q.suspend(no_deadline, &tok, 0xfeedf00d).status, cqs_status::cancelled);
    EXPECT_EQ(c.tag, 0xfeedf00du);  // the waiter's own word reached the hook
    EXPECT_EQ(c.state.load(), 1);  // on_cancellation made it unlocked: refuse
    EXPECT_TRUE(q.resume(unit{}));  // the unlock's resume is refused
    EXPECT_EQ(c.refused.load(), 1);
}

// Removal: segments whose cells are all cancelled are unlinked and freed,
// and resumes land past them.
TEST(Cqs, FullyCancelledSegmentsAreRemoved) {
    for (auto mode : {cqs_cancellation::simple, cqs_cancellation::smart}) {
        cqs_hooks<std::uint64_t> h{[](void*, std::uint64_t) noexcept { return true; }, [](void*, std::uint64_t) noexcept {},
                                   [](void*, std::uint64_t) noexcept {}, nullptr};
        cqs<std::uint64_t> q(mode, cqs_resumption::async, h);
        std::stop_source src;
        src.request_stop();
        std::stop_token tok = src.get_token();
        constexpr unsigned kCells = spindle::detail::cqs_segment_cells * 200;
        std::size_t peak = 0;
        for (unsigned i = 0; i < kCells; ++i) {
            EXPECT_EQ(q.suspend(no_deadline, &tok).status, cqs_status::cancelled);
            peak = std::max(peak, q.live_segments());
        }
        EXPECT_LE(peak, 5u);  // first (resume head), tail, limbo
        q.reclaim();
        EXPECT_LE(q.live_segments(), 2u);
        if (mode == cqs_cancellation::simple) {
            EXPECT_FALSE(q.resume(1));  // the first cell was cancelled
        } else {
            // Smart: skips the 3200 cancelled cells (removed segments in O(1)
            // each) and leaves the value for the next suspend.
            EXPECT_TRUE(q.resume(7));
            auto r = q.suspend();
            EXPECT_EQ(r.status, cqs_status::resumed);
            EXPECT_EQ(r.value, 7u);
        }
    }
}

// Parked fibers spread over many segments, then all stopped: every segment
// but the heads' and the tail goes away.
TEST(Cqs, ParkedThenCancelledSegmentsAreFreed) {
    for (unsigned workers : {1u, 2u, 4u}) {
        scheduler sched(stress_options(workers));
        cqs<unit> q;
        constexpr int kWaiters = 800;
        std::vector<std::stop_source> src(kWaiters);
        std::atomic<int> cancelled{0};
        std::vector<fiber> fs;
        for (int i = 0; i < kWaiters; ++i)
            fs.push_back(sched.spawn([&, i] {
                std::stop_token t = src[static_cast<std::size_t>(i)].get_token();
                if (q.suspend(no_deadline, &t).status == cqs_status::cancelled) cancelled.fetch_add(1);
            }));
        while (q.live_segments() < kWaiters / spindle::detail::cqs_segment_cells) std::this_thread::yield();
        EXPECT_GE(q.live_segments(), static_cast<std::size_t>(kWaiters / spindle::detail::cqs_segment_cells));
        for (auto& s : src) s.request_stop();
        for (auto& f : fs) f.join();
        EXPECT_EQ(cancelled.load(), kWaiters);
        q.reclaim();
        EXPECT_LE(q.live_segments(), 3u) << workers << " workers";
    }
}

}  // namespace
