// spindle::shared_mutex: readers share and writers exclude over worker counts
// and policies, fibers and threads mixed; fair FIFO phases (no writer starved
// by readers, no reader by writers, nobody overtakes a chosen waiter);
// cancellation by timeouts and stop tokens at any point (no lost wake-up, no
// stuck lock); the CES handoff rules of the CES paper §5.2; misuse.
//
// The policy tests run on one worker, or on two with the waiters' worker kept
// busy in a known way, so that what they check follows from the algorithm
// and not from timing.
#include <gtest/gtest.h>

// These tests take and release locks across lambdas, inside EXPECT_ macros
// and on purpose wrongly (death tests): Clang's static lock analysis cannot
// follow that, so it is off for this file (it checks the library itself).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <set>
#include <vector>

#include <spindle/sync/shared_mutex.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"

namespace {

using namespace spindle::test;
using spindle::shared_mutex;

#if SPINDLE_TSAN || SPINDLE_ASAN
constexpr int kStormFibers = 100;
#else
constexpr int kStormFibers = 300;
#endif

using Param = spindle::test::workers_and_policy;

std::vector<Param> params_1_2_4() {
    std::vector<Param> v;
    for (unsigned w : {1u, 2u, 4u})
        for (handoff p : all_policies) v.push_back({w, p});
    return v;
}

// Wait, from a fiber, until someone is queued on `m` (try_lock_shared fails
// only while a writer holds it or anyone waits). The caller holds it shared,
// so the nested try_lock_shared never makes it the last reader.
void yield_until_queued(shared_mutex& m) {
    while (m.try_lock_shared()) {
        m.unlock_shared();
        this_fiber::yield();
    }
}

// Yield often enough that every ready fiber of a one-worker scheduler has run
// until it blocks.
void settle() {
    for (int i = 0; i < 40; ++i) this_fiber::yield();
}

// Everyone currently inside, for the exclusion checks.
struct occupancy {
    std::atomic<int> readers{0}, writers{0}, violations{0};

    void enter_write() {
        if (writers.fetch_add(1) != 0 || readers.load() != 0) violations.fetch_add(1);
    }
    void leave_write() {
        if (readers.load() != 0) violations.fetch_add(1);
        writers.fetch_sub(1);
    }
    void enter_read() {
        readers.fetch_add(1);
        if (writers.load() != 0) violations.fetch_add(1);
    }
    void leave_read() {
        if (writers.load() != 0) violations.fetch_add(1);
        readers.fetch_sub(1);
    }
};

// Nobody holds it and nobody waits: both fast paths work.
void expect_free(shared_mutex& m) {
    EXPECT_TRUE(m.try_lock());
    m.unlock();
    EXPECT_TRUE(m.try_lock_shared());
    EXPECT_TRUE(m.try_lock_shared());
    m.unlock_shared();
    m.unlock_shared();
    EXPECT_TRUE(m.try_lock());
    m.unlock();
}

// ---------------------------------------------------------------------------
// Exclusion under stress.

class SharedMutexStress : public ::testing::TestWithParam<Param> {};

TEST_P(SharedMutexStress, ReadersSeeNoWriterAndWritersAreExclusive) {
    const auto [workers, policy] = GetParam();
    scheduler sched(stress_options(workers));
    shared_mutex m(policy);
    occupancy occ;
    long long counter = 0;  // guarded by m; non-atomic on purpose
    std::atomic<long long> writes{0}, reads{0};
    constexpr int kIters = 20;
    auto body = [&](int i) {
        for (int k = 0; k < kIters; ++k) {
            const bool write = (i + k) % 4 == 0;  // a quarter of the sections write
            const bool try_first = (i * 7 + k) % 5 == 0;
            if (write) {
                if (!(try_first && m.try_lock())) m.lock();
                occ.enter_write();
                long long c = counter;
                if ((i + k) % 7 == 0) this_fiber::yield();  // a switch inside the section
                counter = c + 1;
                occ.leave_write();
                writes.fetch_add(1, std::memory_order_relaxed);
                m.unlock();
            } else {
                if (!(try_first && m.try_lock_shared())) m.lock_shared();
                occ.enter_read();
                long long c = counter;  // a data race (TSan) if a writer were inside
                if ((i + k) % 5 == 0) this_fiber::yield();
                if (counter != c) occ.violations.fetch_add(1);
                occ.leave_read();
                reads.fetch_add(1, std::memory_order_relaxed);
                m.unlock_shared();
            }
            if ((i + k) % 3 == 0) this_fiber::yield();
        }
    };
    // Two plain threads compete as well: they park on the futex.
    run_crowd(sched, {.fibers = stress_fibers, .threads = 2, .first_thread = 1}, body);
    EXPECT_EQ(occ.violations.load(), 0);
    EXPECT_EQ(counter, writes.load());
    EXPECT_EQ(writes.load() + reads.load(), static_cast<long long>(stress_fibers + 2) * kIters);
    expect_free(m);
}

INSTANTIATE_TEST_SUITE_P(WorkersAndPolicies, SharedMutexStress, ::testing::ValuesIn(params_1_2_4()),
                         spindle::test::workers_and_policy_name);

// ---------------------------------------------------------------------------
// Fairness and FIFO phases (one worker: the order of arrival is the order of
// spawning).

class SharedMutexPolicy : public ::testing::TestWithParam<handoff> {};

TEST_P(SharedMutexPolicy, ReadersShare) {
    scheduler sched({.workers = 1});
    shared_mutex m(GetParam());
    int inside = 0, most = 0;  // one worker: no data race
    sched.spawn([&] {
             std::vector<fiber> fs;
             for (int i = 0; i < 10; ++i)
                 fs.push_back(fiber([&] {
                     m.lock_shared();
                     most = std::max(most, ++inside);
                     settle();  // everyone else gets in meanwhile
                     --inside;
                     m.unlock_shared();
                 }));
             for (auto& f : fs) f.join();
         })
        .join();
    EXPECT_EQ(most, 10);
    expect_free(m);
}

TEST_P(SharedMutexPolicy, WriterIsNotStarvedByAStreamOfReaders) {
    scheduler sched({.workers = 1});
    shared_mutex m(GetParam());
    std::vector<int> order;  // -1 the writer, i >= 0 the late readers
    sched.spawn([&] {
             m.lock_shared();  // an early reader holds it
             fiber w([&] {
                 m.lock();
                 order.push_back(-1);
                 m.unlock();
             });
             yield_until_queued(m);
             // Readers keep arriving while the lock is held shared: each
             // one queues behind the writer instead of joining the holders.
             std::vector<fiber> rs;
             for (int i = 0; i < 10; ++i) {
                 rs.push_back(fiber([&, i] {
                     m.lock_shared();
                     order.push_back(i);
                     m.unlock_shared();
                 }));
                 settle();
                 EXPECT_FALSE(m.try_lock_shared());
             }
             EXPECT_TRUE(order.empty());
             m.unlock_shared();
             w.join();
             for (auto& r : rs) r.join();
         })
        .join();
    ASSERT_EQ(order.size(), 11u);
    EXPECT_EQ(order.front(), -1);  // the readers then enter as one phase, in any order
    expect_free(m);
}

// Arrivals R0 R1 W2 R3 R4 W5 R6 while a writer holds it: phases
// {R0 R1} {W2} {R3 R4} {W5} {R6}, each reader phase entered as one.
TEST_P(SharedMutexPolicy, PhasesFollowArrivalOrder) {
    scheduler sched({.workers = 1});
    shared_mutex m(GetParam());
    const bool is_writer[] = {false, false, true, false, false, true, false};
    constexpr int n = 7;
    std::vector<int> events;  // +id+1 entered, -(id+1) left; one worker: no data race
    int readers_in = 0, writers_in = 0, bad = 0;
    sched.spawn([&] {
             m.lock();
             std::vector<fiber> fs;
             for (int i = 0; i < n; ++i) {
                 fs.push_back(fiber([&, i] {
                     if (is_writer[i]) {
                         m.lock();
                         if (writers_in++ != 0 || readers_in != 0) ++bad;
                     } else {
                         m.lock_shared();
                         if (writers_in != 0) ++bad;
                         ++readers_in;
                     }
                     events.push_back(i + 1);
                     settle();  // let the rest of a reader phase in
                     events.push_back(-(i + 1));
                     if (is_writer[i]) {
                         --writers_in;
                         m.unlock();
                     } else {
                         --readers_in;
                         m.unlock_shared();
                     }
                 }));
                 settle();  // queued, in this order
             }
             EXPECT_TRUE(events.empty());
             m.unlock();
             for (auto& f : fs) f.join();
         })
        .join();
    EXPECT_EQ(bad, 0);
    std::vector<int> entered;
    for (int e : events)
        if (e > 0) entered.push_back(e - 1);
    ASSERT_EQ(entered.size(), static_cast<std::size_t>(n));
    // Within a reader phase any order; the phases in arrival order.
    std::sort(entered.begin(), entered.begin() + 2);
    std::sort(entered.begin() + 3, entered.begin() + 5);
    EXPECT_EQ(entered, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
    // Both readers of a phase were inside together: R1 entered before R0 left.
    auto pos = [&](int e) { return std::find(events.begin(), events.end(), e) - events.begin(); };
    EXPECT_LT(pos(2), pos(-1));
    EXPECT_LT(pos(1), pos(-2));
    EXPECT_LT(pos(5), pos(-4));
    // And nobody of the next phase before the previous one left.
    EXPECT_LT(pos(-1), pos(3));
    EXPECT_LT(pos(-2), pos(3));
    EXPECT_LT(pos(-3), pos(4));
    EXPECT_LT(pos(-6), pos(7));
    expect_free(m);
}

TEST_P(SharedMutexPolicy, NobodyOvertakesChosenWaiters) {
    scheduler sched({.workers = 1});
    shared_mutex m(GetParam());
    bool overtook = false;
    sched.spawn([&] {
             // A writer chosen by the last reader.
             m.lock_shared();
             bool done = false;
             fiber w([&] {
                 m.lock();
                 done = true;
                 m.unlock();
             });
             yield_until_queued(m);
             m.unlock_shared();
             if (!done) {
                 if (m.try_lock_shared()) {
                     overtook = true;
                     m.unlock_shared();
                 }
                 if (m.try_lock()) {
                     overtook = true;
                     m.unlock();
                 }
             }
             w.join();
             // Readers chosen by a writer's unlock.
             m.lock();
             int in = 0;
             std::vector<fiber> rs;
             for (int i = 0; i < 3; ++i)
                 rs.push_back(fiber([&] {
                     m.lock_shared();
                     ++in;
                     m.unlock_shared();
                 }));
             settle();
             m.unlock();
             if (in < 3 && m.try_lock()) {
                 overtook = true;
                 m.unlock();
             }
             for (auto& r : rs) r.join();
             EXPECT_EQ(in, 3);
         })
        .join();
    EXPECT_FALSE(overtook);
    expect_free(m);
}

// ---------------------------------------------------------------------------
// The CES rules (§5.2), one worker: who has run when the unlock returns.

TEST_P(SharedMutexPolicy, LastReaderResumesTheWriter) {
    const handoff policy = GetParam();
    scheduler sched({.workers = 1});
    shared_mutex m(policy);
    bool writer_in = false, before_return = false;
    sched.spawn([&] {
             m.lock_shared();
             fiber other_reader([&] {
                 m.lock_shared();
                 settle();
                 m.unlock_shared();  // not the last: nobody woken
             });
             this_fiber::yield();
             fiber w([&] {
                 m.lock();
                 writer_in = true;
                 m.unlock();
             });
             yield_until_queued(m);
             other_reader.join();
             EXPECT_FALSE(writer_in);
             m.unlock_shared();  // the last reader
             before_return = writer_in;
             w.join();
         })
        .join();
    // ces switches to the writer (the unlocker goes to the ready queue);
    // inline_resume runs it nested; dispatch makes it ready and carries on.
    EXPECT_EQ(before_return, policy != handoff::dispatch);
    EXPECT_TRUE(writer_in);
    expect_free(m);
}

TEST_P(SharedMutexPolicy, WriterUnlockResumesTheOldestReaderAndDispatchesTheRest) {
    const handoff policy = GetParam();
    scheduler sched({.workers = 1});
    shared_mutex m(policy);
    std::vector<int> entered;       // reader ids, in the order they got in
    std::vector<int> entered_early;  // those in before unlock() returned
    bool later_writer_in = false;
    sched.spawn([&] {
             m.lock();
             std::vector<fiber> rs;
             for (int i = 0; i < 3; ++i) {
                 rs.push_back(fiber([&, i] {
                     m.lock_shared();
                     entered.push_back(i);
                     m.unlock_shared();
                 }));
                 settle();
             }
             fiber w([&] {
                 m.lock();
                 later_writer_in = true;
                 m.unlock();
             });
             settle();
             m.unlock();
             entered_early = entered;
             for (auto& r : rs) r.join();
             w.join();
         })
        .join();
    ASSERT_EQ(entered.size(), 3u);
    if (policy == handoff::dispatch) {
        // All three were made ready at once: which runs first is the
        // scheduler's pick (its deque is LIFO, but every 8th pick takes the
        // oldest, and the worker's idle loop counts picks too).
        EXPECT_EQ(std::set<int>(entered.begin(), entered.end()), (std::set<int>{0, 1, 2}));
        EXPECT_TRUE(entered_early.empty());
    } else {
        EXPECT_EQ(entered.front(), 0);  // the oldest is the one resumed with the policy
        ASSERT_FALSE(entered_early.empty());
        EXPECT_EQ(entered_early.front(), 0);
    }
    EXPECT_TRUE(later_writer_in);
    expect_free(m);
}

TEST_P(SharedMutexPolicy, WriterUnlockResumesTheNextWriter) {
    const handoff policy = GetParam();
    scheduler sched({.workers = 1});
    shared_mutex m(policy);
    bool second_in = false, before_return = false;
    sched.spawn([&] {
             m.lock();
             fiber w([&] {
                 m.lock();
                 second_in = true;
                 m.unlock();
             });
             settle();
             m.unlock();
             before_return = second_in;
             w.join();
         })
        .join();
    EXPECT_EQ(before_return, policy != handoff::dispatch);
    expect_free(m);
}

// Two workers. The waiters block on worker `other`, the unlocker runs on
// worker `mine`; a fiber pinned to `other` and spawned after they queued
// runs only once they have parked, so the handoff finds them parked. ces and
// inline_resume then run the one waiter they resume on the unlocker's
// worker (CES: "combine" the critical sections on one worker, "exchange"
// the unlocker to the executor). inline_resume also holds the unlocker back
// until that waiter suspends; with ces the idle worker `other` may steal the
// unlocker at once, so whether the waiter got in before the unlock returned
// is a race there, and not checked.
class SharedMutexSwitch : public ::testing::TestWithParam<handoff> {};

TEST_P(SharedMutexSwitch, WriterResumedByTheLastReaderRunsOnTheUnlockersWorker) {
    const handoff policy = GetParam();
    scheduler sched({.workers = 2});
    shared_mutex m(policy);
    std::atomic<int> writer_worker{-1}, unlocker_worker{-1};
    std::atomic<bool> writer_in{false}, before_return{false};
    sched.spawn([&] {
             m.lock_shared();
             const int mine = this_fiber::worker_index();
             const int other = 1 - mine;
             fiber w(
                 [&] {
                     m.lock();
                     writer_worker = this_fiber::worker_index();
                     writer_in = true;
                     m.unlock();
                 },
                 {.worker = other});
             yield_until_queued(m);
             std::atomic<bool> parked{false};
             fiber p([&] { parked = true; }, {.worker = other, .pinned = true});
             while (!parked) this_fiber::yield();
             unlocker_worker = this_fiber::worker_index();
             m.unlock_shared();
             before_return = writer_in.load();
             w.join();
             p.join();
         })
        .join();
    if (policy == handoff::inline_resume) {
        EXPECT_TRUE(before_return.load());
    }
    EXPECT_EQ(writer_worker.load(), unlocker_worker.load());
    expect_free(m);
}

TEST_P(SharedMutexSwitch, OldestReaderResumedByTheWriterRunsOnTheUnlockersWorker) {
    const handoff policy = GetParam();
    scheduler sched({.workers = 2});
    shared_mutex m(policy);
    std::atomic<int> arrived{0}, first_worker{-1}, unlocker_worker{-1}, in{0};
    std::atomic<bool> first_in{false}, before_return{false};
    sched.spawn([&] {
             m.lock();
             const int mine = this_fiber::worker_index();
             const int other = 1 - mine;
             std::vector<fiber> rs;
             for (int i = 0; i < 3; ++i) {
                 rs.push_back(fiber(
                     [&] {
                         const int me = arrived.fetch_add(1);
                         m.lock_shared();
                         if (me == 0) {
                             first_worker = this_fiber::worker_index();
                             first_in = true;
                         }
                         in.fetch_add(1);
                         m.unlock_shared();
                     },
                     {.worker = other}));
                 // The next one runs on `other` only after this one parked.
                 while (arrived.load() != i + 1) this_fiber::yield();
             }
             std::atomic<bool> parked{false};
             fiber p([&] { parked = true; }, {.worker = other, .pinned = true});
             while (!parked) this_fiber::yield();
             unlocker_worker = this_fiber::worker_index();
             m.unlock();
             before_return = first_in.load();
             for (auto& r : rs) r.join();
             p.join();
         })
        .join();
    if (policy == handoff::inline_resume) {
        EXPECT_TRUE(before_return.load());
    }
    EXPECT_EQ(first_worker.load(), unlocker_worker.load());
    EXPECT_EQ(in.load(), 3);
    expect_free(m);
}

INSTANTIATE_TEST_SUITE_P(SwitchingPolicies, SharedMutexSwitch,
                         ::testing::Values(handoff::inline_resume, handoff::ces), spindle::test::policy_name);

// ---------------------------------------------------------------------------
// Cancellation.

// A writer at the front, readers behind it, the lock held shared: when the
// writer gives up, the readers must get in at once, next to the holder.
TEST_P(SharedMutexPolicy, CancelledWriterAtTheFrontAdmitsTheReadersBehindIt) {
    for (bool by_timeout : {false, true}) {
        scheduler sched({.workers = 1});
        shared_mutex m(GetParam());
        int readers_in = 0;
        bool writer_got = true;
        sched.spawn([&] {
                 m.lock_shared();
                 std::stop_source stop;
                 fiber w([&] {
                     writer_got = by_timeout ? m.try_lock_for(20ms) : m.lock(stop.get_token());
                     if (writer_got) m.unlock();
                 });
                 yield_until_queued(m);
                 std::vector<fiber> rs;
                 for (int i = 0; i < 3; ++i)
                     rs.push_back(fiber([&] {
                         m.lock_shared();
                         ++readers_in;
                         m.unlock_shared();
                     }));
                 settle();
                 // Queued behind the writer (unless its 20 ms ran out already).
                 if (!by_timeout) {
                     EXPECT_EQ(readers_in, 0);
                 }
                 if (!by_timeout) stop.request_stop();
                 // Still holding it shared: they come in beside us.
                 while (readers_in < 3) this_fiber::yield();
                 m.unlock_shared();
                 w.join();
                 for (auto& r : rs) r.join();
             })
            .join();
        EXPECT_FALSE(writer_got);
        EXPECT_EQ(readers_in, 3);
        expect_free(m);
    }
}

// A cancelled writer at the front while a writer holds it: the readers behind
// it get in at the holder's unlock, and the fast paths reopen afterwards.
TEST_P(SharedMutexPolicy, CancelledWaitersLeaveNoTrace) {
    scheduler sched({.workers = 1});
    shared_mutex m(GetParam());
    std::vector<int> order;
    int results[3] = {-1, -1, -1};
    sched.spawn([&] {
             m.lock();
             std::stop_source s0, s2;
             fiber w0([&] { results[0] = m.lock(s0.get_token()); });
             settle();
             fiber r1([&] {
                 m.lock_shared();
                 order.push_back(1);
                 m.unlock_shared();
             });
             settle();
             fiber r2([&] {
                 results[2] = m.lock_shared(s2.get_token());
                 if (results[2]) m.unlock_shared();
             });
             settle();
             fiber w3([&] {
                 m.lock();
                 order.push_back(3);
                 m.unlock();
             });
             settle();
             s0.request_stop();  // the writer at the front
             s2.request_stop();  // a reader in the middle
             settle();
             EXPECT_TRUE(order.empty());  // still held exclusively
             m.unlock();
             w0.join();
             r1.join();
             r2.join();
             w3.join();
             // The last waiter gives up: the fast paths must reopen.
             m.lock_shared();
             fiber w4([&] { results[1] = m.try_lock_for(1ms); });
             w4.join();
             m.unlock_shared();
         })
        .join();
    EXPECT_EQ(results[0], 0);
    EXPECT_EQ(results[2], 0);
    EXPECT_EQ(results[1], 0);
    EXPECT_EQ(order, (std::vector<int>{1, 3}));
    expect_free(m);
}

TEST_P(SharedMutexPolicy, AlreadyStoppedOrExpiredFailsWithoutQueueing) {
    scheduler sched({.workers = 1});
    shared_mutex m(GetParam());
    std::stop_source done;
    done.request_stop();
    int got = -1;
    m.lock();  // this thread holds it
    sched.spawn([&] {
             got = m.lock(done.get_token()) + 2 * m.lock_shared(done.get_token()) +
                   4 * m.try_lock_shared_until(std::chrono::steady_clock::now() - 1s) +
                   8 * m.try_lock_for(0ms);
         })
        .join();
    EXPECT_EQ(got, 0);
    m.unlock();
    expect_free(m);
}

TEST_P(SharedMutexPolicy, ThreadsWaitTimeOutAndStop) {
    shared_mutex m(GetParam());
    m.lock();
    bool got = true;
    std::thread([&] { got = m.try_lock_shared_for(5ms); }).join();
    EXPECT_FALSE(got);
    std::thread([&] { got = m.try_lock_for(5ms); }).join();
    EXPECT_FALSE(got);
    std::stop_source src;
    std::atomic<bool> started{false};
    std::thread t([&] {
        started = true;
        got = m.lock_shared(src.get_token());
    });
    while (!started) std::this_thread::yield();
    src.request_stop();  // before or after it queued: either way it gives up
    t.join();
    EXPECT_FALSE(got);
    m.unlock();
    // Handoffs between threads and fibers, both ways.
    scheduler sched({.workers = 2});
    m.lock_shared();
    std::atomic<int> stage{0};
    fiber w = sched.spawn([&] {
        m.lock();  // granted by this thread's unlock_shared
        stage = 1;
        while (stage != 2) this_fiber::yield();
        m.unlock();  // grants the thread below
    });
    std::thread r([&] {
        while (stage != 1) std::this_thread::yield();
        stage = 2;
        m.lock_shared();
        stage = 3;
        m.unlock_shared();
    });
    std::this_thread::sleep_for(1ms);  // not needed for correctness: usually lets w queue first
    m.unlock_shared();
    w.join();
    r.join();
    EXPECT_EQ(stage.load(), 3);
    expect_free(m);
}

INSTANTIATE_TEST_SUITE_P(Policies, SharedMutexPolicy, ::testing::ValuesIn(all_policies), spindle::test::policy_name);

// Many fibers and two threads loop over every way to lock, with stop requests
// fired at random from a third thread and short timed waits racing handoffs.
// Nothing may hang, exclusion must hold, and the mutex must end free.
class SharedMutexStorm : public ::testing::TestWithParam<Param> {};

TEST_P(SharedMutexStorm, CancellationStormLosesNoWakeUp) {
    const auto [workers, policy] = GetParam();
    scheduler sched(stress_options(workers));
    shared_mutex m(policy);
    occupancy occ;
    long long counter = 0;  // guarded by m
    std::atomic<long long> writes{0}, got{0}, gave_up{0};
    constexpr int kIters = 30;
    constexpr int kSlots = 64;
    std::mutex slots_m;  // guards slots; held only to copy a stop_source
    std::vector<std::stop_source> slots(kSlots);
    std::atomic<bool> stop_chaos{false};
    auto body = [&](int i) {
        std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 1);
        for (int k = 0; k < kIters; ++k) {
            const bool write = rng() % 3 == 0;
            bool ok = false;
            switch (rng() % 4) {
            case 0:  // stop token, possibly stopped by the chaos thread
            case 1: {
                std::stop_source src;
                {
                    std::lock_guard g(slots_m);
                    slots[static_cast<std::size_t>(i) % kSlots] = src;
                }
                ok = write ? m.lock(src.get_token()) : m.lock_shared(src.get_token());
                break;
            }
            case 2: {  // a short timed wait
                auto d = std::chrono::microseconds(rng() % 100);
                ok = write ? m.try_lock_for(d) : m.try_lock_shared_for(d);
                break;
            }
            default:  // plain
                if (write) m.lock(); else m.lock_shared();
                ok = true;
                break;
            }
            if (!ok) {
                gave_up.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            got.fetch_add(1, std::memory_order_relaxed);
            if (write) {
                occ.enter_write();
                ++counter;
                if (rng() % 4 == 0) this_fiber::yield();
                occ.leave_write();
                writes.fetch_add(1, std::memory_order_relaxed);
                m.unlock();
            } else {
                occ.enter_read();
                long long c = counter;
                if (rng() % 4 == 0) this_fiber::yield();
                if (c != counter) occ.violations.fetch_add(1);
                occ.leave_read();
                m.unlock_shared();
            }
        }
    };
    std::thread chaos([&] {
        std::minstd_rand rng(42);
        while (!stop_chaos.load()) {
            std::stop_source s;
            {
                std::lock_guard g(slots_m);
                s = slots[rng() % kSlots];
            }
            s.request_stop();
            std::this_thread::sleep_for(10us);  // leave the cores to the lockers
        }
    });
    run_crowd(sched, {.fibers = kStormFibers, .threads = 2, .first_thread = kStormFibers}, body);
    stop_chaos = true;
    chaos.join();
    EXPECT_EQ(occ.violations.load(), 0);
    EXPECT_EQ(counter, writes.load());
    EXPECT_EQ(got.load() + gave_up.load(), static_cast<long long>(kStormFibers + 2) * kIters);
    EXPECT_GT(got.load(), 0);
    std::printf("storm: %lld acquisitions, %lld gave up\n", static_cast<long long>(got.load()),
                static_cast<long long>(gave_up.load()));
    expect_free(m);
}

INSTANTIATE_TEST_SUITE_P(WorkersAndPolicies, SharedMutexStorm, ::testing::ValuesIn(params_1_2_4()),
                         spindle::test::workers_and_policy_name);

// Works with the standard lock adaptors.
TEST(SharedMutex, StandardGuards) {
    shared_mutex m;
    {
        std::shared_lock r1(m);
        std::shared_lock r2(m, std::try_to_lock);
        EXPECT_TRUE(r2.owns_lock());
        std::unique_lock w(m, std::try_to_lock);
        EXPECT_FALSE(w.owns_lock());
    }
    {
        std::unique_lock w(m, 1ms);
        EXPECT_TRUE(w.owns_lock());
        std::shared_lock r(m, std::try_to_lock);
        EXPECT_FALSE(r.owns_lock());
    }
    EXPECT_EQ(m.policy(), handoff::ces);
    expect_free(m);
}

#if SPINDLE_DEBUG_CHECKS
TEST(SharedMutexDeathTest, RelockByTheExclusiveHolderAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::shared_mutex m;
            m.lock();
            m.lock();
        },
        "spindle::shared_mutex 0x[0-9a-f]+: lock\\(\\) by the caller that holds it exclusively");
    EXPECT_DEATH(
        {
            spindle::shared_mutex m;
            m.lock();
            m.lock_shared();
        },
        "spindle::shared_mutex 0x[0-9a-f]+: lock_shared\\(\\) by the caller that holds it exclusively");
}

TEST(SharedMutexDeathTest, UnlockWithoutHoldingAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            shared_mutex m;
            m.unlock();
        },
        "spindle::shared_mutex 0x[0-9a-f]+: unlock\\(\\) of a shared_mutex that is not locked exclusively");
    EXPECT_DEATH(
        {
            shared_mutex m;
            m.lock_shared();
            m.unlock();
        },
        "unlock\\(\\) of a shared_mutex that is not locked exclusively");
    EXPECT_DEATH(
        {
            shared_mutex m;
            m.lock();
            std::thread([&] { m.unlock(); }).join();
        },
        "spindle::shared_mutex 0x[0-9a-f]+: unlock\\(\\) by a caller that does not hold it");
}

TEST(SharedMutexDeathTest, UnlockSharedWithNoReadersAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            shared_mutex m;
            m.unlock_shared();
        },
        "spindle::shared_mutex 0x[0-9a-f]+: unlock_shared\\(\\) with no readers");
    EXPECT_DEATH(
        {
            shared_mutex m;
            m.lock();
            m.unlock_shared();
        },
        "unlock_shared\\(\\) with no readers");
}

TEST(SharedMutexDeathTest, DestroyingAHeldOrAwaitedMutexAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            auto* m = new shared_mutex;
            m->lock();
            delete m;
        },
        "spindle::shared_mutex 0x[0-9a-f]+ destroyed while held exclusively");
    EXPECT_DEATH(
        {
            auto* m = new shared_mutex;
            m->lock_shared();
            delete m;
        },
        "spindle::shared_mutex 0x[0-9a-f]+ destroyed while held shared");
    EXPECT_DEATH(
        {
            auto* m = new shared_mutex;
            m->lock_shared();
            std::thread([m] { m->lock(); }).detach();
            while (m->try_lock_shared()) m->unlock_shared();  // until the writer queued
            delete m;
        },
        "destroyed while held shared and waited on");
}
#endif

}  // namespace

// ---- the last reference unlocks and frees ----------------------------------
//
// (tests/support/last_reference.hpp.) An object holds a shared_mutex and a
// count of references to itself; a party drops its reference under the
// exclusive lock (or, in the scenarios, while nobody else can drop one),
// and whoever drops the last one deletes the object right after its unlock
// returns -- while the unlock that let it in may not have returned yet.

namespace {

enum class side { exclusive, shared };

template <side Holder, side Waiter>
struct rw_object : counted_object<rw_object<Holder, Waiter>> {
    explicit rw_object(int n) : refs(n) {}
    shared_mutex m;
    std::atomic<int> refs;

    const void* primitive() const { return &m; }
    void hold() {
        if (Holder == side::exclusive) m.lock();
        else m.lock_shared();
    }
    void unhold() {
        if (Holder == side::exclusive) m.unlock();
        else m.unlock_shared();
    }
    bool enter(std::stop_token st) {
        return Waiter == side::exclusive ? m.lock(std::move(st)) : m.lock_shared(std::move(st));
    }
    bool try_enter() { return Waiter == side::exclusive ? m.try_lock() : m.try_lock_shared(); }
    void enter() {
        if (Waiter == side::exclusive) m.lock();
        else m.lock_shared();
    }
    void leave() {
        if (Waiter == side::exclusive) m.unlock();
        else m.unlock_shared();
    }
    int drop() { return refs.fetch_sub(1) - 1; }
};

class SharedMutexLastReference : public ::testing::TestWithParam<party_kind> {};

// H holds it exclusively and unlocks while W waits (exclusively, or
// shared). W is cancelled right after H's unlock saw Q set, so the unlock
// finds nobody to hand the lock to and lets it go; at that moment W takes
// it, drops the last reference and deletes the object, and only then does
// H's unlock go on.
TEST_P(SharedMutexLastReference, ExclusiveUnlockThatFreesTheLockLeavesItAlone) {
    if (!race_points_enabled) GTEST_SKIP() << "race points exist only with SPINDLE_DEBUG_CHECKS";
    last_reference_scenario<rw_object<side::exclusive, side::exclusive>>(
        GetParam(), race_point::shared_mutex_unlock_contended, race_point::shared_mutex_freed);
    last_reference_scenario<rw_object<side::exclusive, side::shared>>(
        GetParam(), race_point::shared_mutex_unlock_contended, race_point::shared_mutex_freed);
}

// H is the last reader and leaves while a writer W waits. W is cancelled
// right after H's fetch_sub, before H has looked at the queue; W then tries
// to lock, drop the last reference and delete the object before H goes on.
// The lock must not be W's before H is done with it: W gets it from H's
// handover -- or, if W queues again only once H has returned, after H found
// the queue empty and let the lock go.
TEST_P(SharedMutexLastReference, LastReaderIsDoneBeforeTheLockIsTaken) {
    if (!race_points_enabled) GTEST_SKIP() << "race points exist only with SPINDLE_DEBUG_CHECKS";
    using obj = rw_object<side::shared, side::exclusive>;
    last_reference_scenario<obj>(GetParam(), race_point::shared_mutex_last_reader,
                                 race_point::shared_mutex_last_reader);
    last_reference_scenario<obj>(GetParam(), race_point::shared_mutex_last_reader,
                                 race_point::shared_mutex_last_reader, {.block_after_holder = true});
}

INSTANTIATE_TEST_SUITE_P(Holders, SharedMutexLastReference,
                         ::testing::Values(party_kind::fiber, party_kind::thread), party_name);

class SharedMutexLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

// Each party reads each object of a chain (or not), then writes it once and
// drops its reference in that exclusive section; timed waits of a few
// microseconds, retried, race the handovers of writers and last readers.
TEST_P(SharedMutexLastReferenceStress, TimedLocksRaceTheLastUnlock) {
    using obj = rw_object<side::exclusive, side::exclusive>;
    const unsigned workers = GetParam();
    run_chain<obj>(workers, chain_fibers, chain_threads, chain_rounds(workers), [](obj& o, std::minstd_rand& rng) {
        linger(rng);
        if (rng() % 2 == 0) {
            while (!o.m.try_lock_shared_for(short_timeout(rng))) {
            }
            linger(rng);
            o.m.unlock_shared();
        }
        while (!o.m.try_lock_for(short_timeout(rng))) {
        }
        linger(rng);
        const bool last = o.refs.fetch_sub(1) == 1;
        o.m.unlock();
        if (last) delete &o;
    });
}

INSTANTIATE_TEST_SUITE_P(Workers, SharedMutexLastReferenceStress, ::testing::ValuesIn(stress_workers),
                         workers_name);

}  // namespace
