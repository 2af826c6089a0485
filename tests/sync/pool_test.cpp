// spindle::queue_pool and spindle::stack_pool: FIFO and LIFO element order;
// the storages' broken inserts; elements bound concurrency over 1, 2, 4 and 8
// workers with fibers and threads mixed, and come back exactly once; FIFO
// hand-over to waiting fibers under every handoff policy, one waiter woken
// per put; cancellation storms of stop requests (and a few timeouts) that
// lose no element and no wake-up and leave the waiter queue small; std-like
// edge cases; misuse aborts in debug builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/pool.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"
#include "../support/thread_state.hpp"

namespace {

using namespace spindle::test;

// Drains `p` with try_take and checks it held exactly the elements 0..n-1,
// each once.
template <class Pool>
void expect_holds_each_once(Pool& p, std::uint32_t n) {
    std::vector<int> seen(n, 0);
    std::uint32_t got = 0;
    while (auto e = p.try_take()) {
        ASSERT_LT(*e, n);
        ++seen[*e];
        ++got;
    }
    EXPECT_EQ(got, n);
    for (std::uint32_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "element " << i;
    EXPECT_EQ(p.debug_count(), 0);
    for (std::uint32_t i = 0; i < n; ++i) p.put(i);  // back as they were
}

// Parks 100 fibers and 2 threads in take(stop_token) on an empty pool,
// stops them all with one request: each returns nullopt, and the pool's word
// is back to 0.
template <class Pool>
void expect_all_stopped(scheduler& sched, Pool& p) {
    ASSERT_EQ(p.debug_count(), 0);
    std::stop_source src;
    std::atomic<int> stopped{0};
    auto w = [&] {
        if (!p.take(src.get_token())) stopped.fetch_add(1);
    };
    std::vector<fiber> fs;
    for (int i = 0; i < 100; ++i) fs.push_back(sched.spawn(w));
    std::thread t1(w), t2(w);
    while (p.debug_count() != -102) std::this_thread::yield();
    src.request_stop();
    for (auto& f : fs) f.join();
    t1.join();
    t2.join();
    EXPECT_EQ(stopped.load(), 102);
    EXPECT_EQ(p.debug_count(), 0);
}

// ---- order ----------------------------------------------------------------------

TEST(Pool, QueuePoolIsFifo) {
    spindle::queue_pool<std::uint32_t> p(8);
    EXPECT_EQ(p.capacity(), 8u);
    for (std::uint32_t i = 0; i < 8; ++i) p.put(i);
    EXPECT_EQ(p.debug_count(), 8);
    for (std::uint32_t i = 0; i < 8; ++i) EXPECT_EQ(p.take(), i);
    // Around the ring many times (it has 8 slots): still FIFO.
    std::uint32_t next_in = 0, next_out = 0;
    for (int round = 0; round < 100; ++round) {
        for (int k = 0; k < 5; ++k) p.put(next_in++);
        for (int k = 0; k < 5; ++k) EXPECT_EQ(*p.try_take(), next_out++);
    }
    EXPECT_FALSE(p.try_take());
}

TEST(Pool, StackPoolIsLifoAndReusesTheHotElement) {
    spindle::stack_pool<std::uint32_t> p(8);
    for (std::uint32_t i = 0; i < 8; ++i) p.put(i);
    for (std::uint32_t i = 8; i-- > 0;) EXPECT_EQ(p.take(), i);
    for (std::uint32_t i = 0; i < 3; ++i) p.put(i);
    // Take, use, put back: the same element every time.
    for (int n = 0; n < 10; ++n) {
        const std::uint32_t e = p.take();
        EXPECT_EQ(e, 2u);
        p.put(e);
    }
    EXPECT_EQ(*p.try_take(), 2u);
    EXPECT_EQ(*p.try_take(), 1u);
    EXPECT_EQ(*p.try_take(), 0u);
    EXPECT_FALSE(p.try_take());
}

TEST(Pool, CarriesPointersAndSmallStructs) {
    struct handle {
        std::uint16_t shard;
        std::uint16_t gen;
        std::uint32_t index;
    };
    int objects[3] = {};
    spindle::stack_pool<int*> ptrs(3);
    for (int& o : objects) ptrs.put(&o);
    EXPECT_EQ(ptrs.take(), &objects[2]);
    spindle::queue_pool<handle> hs(2);
    hs.put({1, 2, 0xdeadbeef});
    hs.put({3, 4, 5});
    const handle h = hs.take();
    EXPECT_EQ(h.shard, 1);
    EXPECT_EQ(h.gen, 2);
    EXPECT_EQ(h.index, 0xdeadbeefu);
    static_assert(spindle::queue_pool<int>::order == spindle::pool_order::fifo);
    static_assert(spindle::stack_pool<int>::order == spindle::pool_order::lifo);
}

// ---- storage, single-threaded ------------------------------------------------------
//
// A retrieve that finds no element (its put "late") breaks the insert it is
// paired with: that insert fails, the next one succeeds. The pool never
// calls them this way on its own from one thread; here we play both sides.

TEST(PoolStorage, RingRetrieveBreaksTheLateInsert) {
    spindle::detail::pool_ring r(2);  // 4 slots
    std::uint64_t v = 0;
    EXPECT_FALSE(r.try_retrieve(v));  // index 0: nothing came; slot 0 broken for lap 0
    EXPECT_FALSE(r.try_insert(10));   // index 0: broken
    EXPECT_TRUE(r.try_insert(11));    // index 1
    EXPECT_TRUE(r.try_retrieve(v));   // index 1
    EXPECT_EQ(v, 11u);
    // Around the ring: slot 0 again on lap 1, fine after the break.
    for (std::uint64_t k = 0; k < 20; ++k) {
        EXPECT_TRUE(r.try_insert(100 + k));
        EXPECT_TRUE(r.try_retrieve(v));
        EXPECT_EQ(v, 100 + k);
    }
    // Two retrieves ahead of their inserts, then the inserts (both broken).
    EXPECT_FALSE(r.try_retrieve(v));
    EXPECT_FALSE(r.try_retrieve(v));
    EXPECT_FALSE(r.try_insert(1));
    EXPECT_FALSE(r.try_insert(2));
    EXPECT_TRUE(r.try_insert(3));
    EXPECT_TRUE(r.try_insert(4));
    EXPECT_TRUE(r.try_retrieve(v));
    EXPECT_EQ(v, 3u);
    EXPECT_TRUE(r.try_retrieve(v));
    EXPECT_EQ(v, 4u);
}

TEST(PoolStorage, StackRetrieveLeavesMarksThatInsertsConsume) {
    spindle::detail::pool_stack st(3);
    std::uint64_t v = 0;
    EXPECT_FALSE(st.try_retrieve(v));  // empty: one mark
    EXPECT_FALSE(st.try_retrieve(v));  // two marks
    EXPECT_FALSE(st.try_insert(1));    // consumes one
    EXPECT_FALSE(st.try_insert(2));    // and the other
    EXPECT_TRUE(st.try_insert(3));
    EXPECT_TRUE(st.try_insert(4));
    EXPECT_TRUE(st.try_insert(5));     // all three nodes in use
    EXPECT_TRUE(st.try_retrieve(v));
    EXPECT_EQ(v, 5u);
    EXPECT_TRUE(st.try_insert(6));     // the node came back to the free list
    for (std::uint64_t want : {6u, 4u, 3u}) {
        EXPECT_TRUE(st.try_retrieve(v));
        EXPECT_EQ(v, want);
    }
    EXPECT_FALSE(st.try_retrieve(v));  // a mark again
    EXPECT_FALSE(st.try_insert(7));
    EXPECT_TRUE(st.try_insert(8));
    EXPECT_TRUE(st.try_retrieve(v));
    EXPECT_EQ(v, 8u);
}

// ---- typed tests over both pools ------------------------------------------------

template <class Pool>
class PoolTyped : public ::testing::Test {};
using PoolTypes = ::testing::Types<spindle::queue_pool<std::uint32_t>, spindle::stack_pool<std::uint32_t>>;
struct PoolName {
    template <class T>
    static std::string GetName(int) {
        return T::order == spindle::pool_order::fifo ? "queue_pool" : "stack_pool";
    }
};
TYPED_TEST_SUITE(PoolTyped, PoolTypes, PoolName);

TYPED_TEST(PoolTyped, EdgeCases) {
    TypeParam p(2);
    EXPECT_FALSE(p.try_take());
    EXPECT_FALSE(p.try_take_for(1ms));
    EXPECT_FALSE(p.try_take_until(std::chrono::steady_clock::now() - 1s));  // past: no queueing
    EXPECT_FALSE(p.try_take_until(std::chrono::system_clock::now() + 1ms));
    std::stop_source src;
    src.request_stop();
    EXPECT_FALSE(p.take(src.get_token()));
    EXPECT_EQ(p.debug_count(), 0);  // the cancelled takes gave their decrements back
    p.put(7);
    EXPECT_EQ(*p.take(src.get_token()), 7u);  // an element wins over a stop request
    p.put(8);
    EXPECT_EQ(*p.try_take_for(0s), 8u);
    p.put(9);
    EXPECT_EQ(*p.try_take_until(std::chrono::steady_clock::now() - 1s), 9u);
    p.put(1);
    p.put(2);
    EXPECT_EQ(p.debug_count(), 2);  // full: both present
    (void)p.take();
    (void)p.take();

    // Threads time out on the futex path and leave the word as it was.
    EXPECT_EQ(count_on_threads(4, [&] { return !p.try_take_for(2ms); }), 4);
    EXPECT_EQ(p.debug_count(), 0);
    p.put(3);
    EXPECT_EQ(*p.try_take(), 3u);
}

// One worker gives a known arrival order: elements go to waiting fibers in
// it, each to the one it was put for.
TYPED_TEST(PoolTyped, FifoHandOverToFibers) {
    for (spindle::handoff policy : spindle::test::all_policies) {
        scheduler sched({.workers = 1});
        TypeParam p(64, policy);
        std::vector<std::uint32_t> arrived, got(40, 999);  // one worker
        fiber outer = sched.spawn([&] {
            std::vector<fiber> fs;
            for (std::uint32_t i = 0; i < 40; ++i) {
                fs.push_back(fiber([&, i] {
                    arrived.push_back(i);  // just before queueing: one worker, no preemption
                    got[i] = p.take();
                }));
            }
            while (arrived.size() < 40) this_fiber::yield();
            EXPECT_EQ(p.debug_count(), -40);
            // The k-th put goes to the k-th arrival.
            for (std::uint32_t k = 0; k < 40; ++k) p.put(arrived[k] + 100);
            for (auto& f : fs) f.join();
        });
        outer.join();
        for (std::uint32_t i = 0; i < 40; ++i) EXPECT_EQ(got[i], i + 100) << to_string(policy);
        EXPECT_EQ(p.debug_count(), 0);
    }
}

// Plain threads: each starts once the one before is parked in its cell (the
// kernel says it sleeps), so the arrival order is known without timing; the
// k-th put goes to the k-th of them.
TYPED_TEST(PoolTyped, FifoHandOverToThreads) {
    TypeParam p(16);
    constexpr std::uint32_t kThreads = 8;
    std::vector<std::atomic<std::uint32_t>> got(kThreads);
    std::vector<std::thread> ts;
    for (std::uint32_t t = 0; t < kThreads; ++t) {
        got[t].store(999);
        std::atomic<pid_t> tid{0};
        ts.emplace_back([&, t] {
            tid.store(this_tid());
            got[t].store(p.take());
        });
        EXPECT_TRUE(parks(tid)) << "thread " << t << " never parked";
    }
    EXPECT_EQ(p.debug_count(), -static_cast<std::int64_t>(kThreads));
    for (std::uint32_t k = 0; k < kThreads; ++k) p.put(k + 100);
    for (auto& t : ts) t.join();
    for (std::uint32_t t = 0; t < kThreads; ++t) EXPECT_EQ(got[t].load(), t + 100) << "thread " << t;
    EXPECT_EQ(p.debug_count(), 0);
}

// Threads and fibers waiting together: each put wakes exactly one of them
// and hands it its element; each element is taken once.
TYPED_TEST(PoolTyped, EachPutWakesOneWaiterWithItsElement) {
    scheduler sched({.workers = 2});
    TypeParam p(16);
    std::vector<std::atomic<int>> got(10);
    std::atomic<int> woken{0};
    auto taker = [&] {
        const std::uint32_t e = p.take();
        if (e < got.size()) got[e].fetch_add(1);
        woken.fetch_add(1);
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) ts.emplace_back(taker);
    std::vector<fiber> fs;
    for (int i = 0; i < 6; ++i) fs.push_back(sched.spawn(taker));
    while (p.debug_count() != -10) std::this_thread::yield();
    for (int k = 1; k <= 10; ++k) {
        p.put(static_cast<std::uint32_t>(k - 1));
        while (woken.load() < k) std::this_thread::yield();
        // One waiter fewer per put, once a broken synchronous resume (a
        // thread taker preempted before its cell) has been re-counted.
        EXPECT_TRUE(settles([&] { return p.debug_count() == k - 10; })) << p.debug_count() << " after put " << k;
        EXPECT_EQ(woken.load(), k);
    }
    for (auto& t : ts) t.join();
    for (auto& f : fs) f.join();
    for (auto& g : got) EXPECT_EQ(g.load(), 1);
    EXPECT_EQ(p.debug_count(), 0);
}

// A stop request for a parked fiber cancels its take; the element that
// comes later goes to the next waiter.
TYPED_TEST(PoolTyped, StoppedTakerInTheMiddleIsSkipped) {
    scheduler sched({.workers = 1});
    TypeParam p(8);
    std::vector<std::uint32_t> taken(6, 999);
    std::vector<std::stop_source> src(6);
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (std::uint32_t i = 0; i < 6; ++i) {
            fs.push_back(fiber([&, i] {
                if (auto e = p.take(src[i].get_token())) taken[i] = *e;
            }));
            this_fiber::yield();  // it queues
        }
        for (std::size_t i = 0; i < 6; i += 2) src[i].request_stop();
        for (int i = 0; i < 10; ++i) this_fiber::yield();  // the stopped ones leave
        EXPECT_EQ(p.debug_count(), -3);
        for (std::uint32_t k = 0; k < 3; ++k) p.put(k);
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(taken, (std::vector<std::uint32_t>{999, 0, 999, 1, 999, 2}));
    EXPECT_EQ(p.debug_count(), 0);
}

// ---- stress ---------------------------------------------------------------------

struct pool_case {
    unsigned workers;
    spindle::pool_order order;
};
std::vector<pool_case> pool_cases() {
    std::vector<pool_case> v;
    for (auto o : {spindle::pool_order::fifo, spindle::pool_order::lifo})
        for (unsigned w : spindle::test::stress_workers) v.push_back({w, o});
    return v;
}
std::string pool_case_name(const ::testing::TestParamInfo<pool_case>& i) {
    return std::string(i.param.order == spindle::pool_order::fifo ? "queue_pool" : "stack_pool") + "_" +
           std::to_string(i.param.workers) + "workers";
}

class PoolStress : public ::testing::TestWithParam<pool_case> {
protected:
    template <class Fn>
    void with_pool(std::size_t capacity, Fn fn) {
        if (GetParam().order == spindle::pool_order::fifo) {
            spindle::queue_pool<std::uint32_t> p(capacity);
            fn(p);
        } else {
            spindle::stack_pool<std::uint32_t> p(capacity);
            fn(p);
        }
    }
};

// Few elements, many users: an element is never held twice at once (a
// per-element flag), nothing is lost or duplicated, and at the end the pool
// holds each element exactly once.
TEST_P(PoolStress, ElementsAreHeldByOneUserAtATime) {
    const unsigned workers = GetParam().workers;
    scheduler sched(stress_options(workers));
    constexpr std::uint32_t kElements = 3;
    with_pool(kElements, [&](auto& p) {
        for (std::uint32_t i = 0; i < kElements; ++i) p.put(i);
        std::atomic<int> held[kElements] = {};
        std::atomic<int> violations{0};
        std::atomic<long long> done{0};
        constexpr int kIters = 20;
        auto use = [&](std::uint32_t e, int i, int n) {
            if (e >= kElements || held[e].fetch_add(1) != 0) violations.fetch_add(1);
            if ((i + n) % 5 == 0) this_fiber::yield();
            if (e < kElements) held[e].fetch_sub(1);
            done.fetch_add(1, std::memory_order_relaxed);
            p.put(e);
        };
        auto body = [&](int i) {
            for (int n = 0; n < kIters; ++n) {
                std::uint32_t e;
                switch ((i + n) % 3) {
                case 0: e = p.take(); break;
                case 1:
                    // A few tries, then queue.
                    try_then_block(
                        [&] {
                            auto got = p.try_take();
                            if (got) e = *got;
                            return got.has_value();
                        },
                        [&] { e = p.take(); });
                    break;
                default: e = *p.take(std::stop_token{}); break;
                }
                use(e, i, n);
            }
        };
        run_crowd(sched, {.fibers = stress_fibers, .threads = 2}, body);
        EXPECT_EQ(violations.load(), 0);
        EXPECT_EQ(done.load(), static_cast<long long>(stress_fibers + 2) * kIters);
        EXPECT_EQ(p.debug_count(), static_cast<std::int64_t>(kElements));
        expect_holds_each_once(p, kElements);
        EXPECT_LE(p.debug_queue_segments(), 3u);
    });
}

// Many elements, no waiting: puts and takes race on the storage itself
// (threads, so that the OS preempts some between a put's count and its
// insert, which makes takes break inserts). Every element comes back once.
TEST_P(PoolStress, StorageRacesLoseNothing) {
    const unsigned threads = GetParam().workers + 1;
    constexpr std::uint32_t kElements = 64;
    with_pool(kElements, [&](auto& p) {
        for (std::uint32_t i = 0; i < kElements; ++i) p.put(i);
        std::atomic<int> held[kElements] = {};
        std::atomic<int> violations{0};
#if SPINDLE_TSAN || SPINDLE_ASAN
        constexpr int kIters = 2000;
#else
        constexpr int kIters = 20000;
#endif
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                std::minstd_rand rng(t + 1);
                std::uint32_t mine[4];
                for (int n = 0; n < kIters; ++n) {
                    // Take 1 to 4 (never more than 64 / 5 threads can hold
                    // at once: takes never wait for long), then put them back.
                    const unsigned k = 1 + rng() % 4;
                    for (unsigned j = 0; j < k; ++j) {
                        mine[j] = (n & 1) ? *p.try_take_for(1h) : p.take();
                        if (mine[j] >= kElements || held[mine[j]].fetch_add(1) != 0) violations.fetch_add(1);
                    }
                    for (unsigned j = 0; j < k; ++j) {
                        if (mine[j] < kElements) held[mine[j]].fetch_sub(1);
                        p.put(mine[j]);
                    }
                }
            });
        for (auto& t : ts) t.join();
        EXPECT_EQ(violations.load(), 0);
        EXPECT_EQ(p.debug_count(), static_cast<std::int64_t>(kElements));
        expect_holds_each_once(p, kElements);
    });
}

// Thousands of takes cancelled by stop requests (and a few by timeouts)
// while others take and put. Elements are checked out and in by index: none
// is ever held twice, none is lost. Afterwards the pool holds each element
// once, the waiter queue is back to a few segments, and a fresh waiter gets
// the next put.
TEST_P(PoolStress, CancellationStormLosesNoElementAndNoWakeUp) {
    const unsigned workers = GetParam().workers;
    scheduler sched(stress_options(workers));
    constexpr std::uint32_t kElements = 2;
    with_pool(kElements, [&](auto& p) {
        for (std::uint32_t i = 0; i < kElements; ++i) p.put(i);
        std::atomic<int> held[kElements] = {};
        std::atomic<int> violations{0};
        std::atomic<long long> successes{0}, failures{0};
        constexpr int kIters = 10;
        stop_slots sources;
        std::atomic<bool> finished{false};
        auto use = [&](std::uint32_t e, std::minstd_rand& rng) {
            successes.fetch_add(1, std::memory_order_relaxed);
            if (e >= kElements || held[e].fetch_add(1) != 0) violations.fetch_add(1);
            if (rng() % 4 == 0) this_fiber::yield();
            if (rng() % 16 == 0) std::this_thread::sleep_for(20us);
            if (e < kElements) held[e].fetch_sub(1);
            p.put(e);
        };
        auto body = [&](int i) {
            std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + 1u);
            for (int n = 0; n < kIters; ++n) {
                std::optional<std::uint32_t> got;
                // Mostly stop tokens; a timed wait only now and then (each
                // one arms and disarms a timer on the timer thread).
                const int kind = (i + n) % 16;
                if (kind == 0) got = p.take();
                else if (kind == 1 && i % 8 == 0) got = p.try_take_for(std::chrono::microseconds(rng() % 300));
                else if (kind == 2) got = p.try_take();
                else got = p.take(sources.token(static_cast<std::size_t>(i)));
                if (!got) {
                    failures.fetch_add(1, std::memory_order_relaxed);
                    continue;
                }
                use(*got, rng);
            }
        };
        std::thread stopper([&] {
            while (!finished.load()) sources.stop_one_round(10us);
        });
        std::thread hog([&] {
            // Takes both elements at once now and then (the others queue up),
            // then puts them back one by one.
            std::minstd_rand rng(5);
            for (int n = 0; n < 40 && !finished.load(); ++n) {
                const std::uint32_t a = p.take(), b = p.take();
                if (a == b) violations.fetch_add(1);
                std::this_thread::sleep_for(300us);
                p.put(a);
                p.put(b);
                std::this_thread::sleep_for(100us);
            }
        });
        run_crowd(sched, {.fibers = stress_fibers, .threads = 3, .first_thread = 2}, body);
        finished.store(true);
        hog.join();
        stopper.join();
        EXPECT_EQ(violations.load(), 0);
        std::printf("    [%u workers: %lld taken, %lld cancelled]\n", workers, successes.load(), failures.load());
        // No element lost or duplicated.
        EXPECT_EQ(p.debug_count(), static_cast<std::int64_t>(kElements));
        expect_holds_each_once(p, kElements);
        EXPECT_LE(p.debug_queue_segments(), 3u);
        // Whatever the storm's timing did: waiters parked on the empty pool
        // are all cancelled by one stop request, and give their counts back.
        for (std::uint32_t i = 0; i < kElements; ++i) (void)p.take();
        expect_all_stopped(sched, p);
        // No wake-up lost: fresh waiters get the next puts.
        std::atomic<bool> got{false};
        std::thread w([&] {
            (void)p.take();
            got.store(true);
        });
        fiber fw = sched.spawn([&] { EXPECT_TRUE(p.take(std::stop_token{})); });
        while (p.debug_count() != -2) std::this_thread::yield();
        p.put(0);
        p.put(1);
        w.join();
        fw.join();
        EXPECT_TRUE(got.load());
        EXPECT_EQ(p.debug_count(), 0);
    });
}

// Few elements, more threads than elements: the pool is empty most of the
// time, so takes count themselves against elements whose puts are still on
// their way (and break their inserts when those puts are preempted), and
// puts hand elements to waiting takers (and break the cells of takers not
// yet parked).
TEST_P(PoolStress, NearlyEmptyPoolLosesNothing) {
    const unsigned threads = GetParam().workers + 2;
    constexpr std::uint32_t kElements = 2;
    with_pool(kElements, [&](auto& p) {
        for (std::uint32_t i = 0; i < kElements; ++i) p.put(i);
        std::atomic<int> held[kElements] = {};
        std::atomic<int> violations{0};
#if SPINDLE_TSAN || SPINDLE_ASAN
        constexpr int kIters = 1000;
#else
        constexpr int kIters = 10000;
#endif
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                for (int n = 0; n < kIters; ++n) {
                    std::uint32_t e;
                    if ((n + t) % 2 == 0) {
                        e = p.take();
                    } else {
                        std::optional<std::uint32_t> got;
                        while (!(got = p.try_take())) std::this_thread::yield();
                        e = *got;
                    }
                    if (e >= kElements || held[e].fetch_add(1) != 0) violations.fetch_add(1);
                    if (e < kElements) held[e].fetch_sub(1);
                    p.put(e);
                }
            });
        for (auto& t : ts) t.join();
        EXPECT_EQ(violations.load(), 0);
        EXPECT_EQ(p.debug_count(), static_cast<std::int64_t>(kElements));
        expect_holds_each_once(p, kElements);
    });
}

INSTANTIATE_TEST_SUITE_P(Cases, PoolStress, ::testing::ValuesIn(pool_cases()), pool_case_name);

// Stop requests that land while puts hand elements over: each cancelled
// taker either gets nothing and the element goes on, or gets it; none is
// lost, and the waiter queue's cancelled segments are freed.
TYPED_TEST(PoolTyped, StoppedTakersRaceWithPuts) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kTakers = 400;
#else
    constexpr int kTakers = 4000;
#endif
    scheduler sched(stress_options(2));
    TypeParam p(kTakers);
    std::vector<std::stop_source> src(kTakers);
    std::atomic<int> took{0}, stopped{0};
    std::atomic<std::uint64_t> sum{0};
    std::vector<fiber> fs;
    for (int i = 0; i < kTakers; ++i)
        fs.push_back(sched.spawn([&, i] {
            if (auto e = p.take(src[static_cast<std::size_t>(i)].get_token())) {
                took.fetch_add(1);
                sum.fetch_add(*e);
            } else {
                stopped.fetch_add(1);
            }
        }));
    while (p.debug_count() > -kTakers / 2) std::this_thread::yield();
    // Half the takers are stopped while as many elements are put.
    std::thread stopper([&] {
        for (int i = 0; i < kTakers; i += 2) src[static_cast<std::size_t>(i)].request_stop();
    });
    std::uint64_t put_sum = 0;
    for (std::uint32_t k = 0; k < static_cast<std::uint32_t>(kTakers / 2); ++k) {
        p.put(k);
        put_sum += k;
    }
    stopper.join();
    // The rest: stop them all; the elements not taken stay in the pool.
    for (auto& s : src) s.request_stop();
    for (auto& f : fs) f.join();
    EXPECT_EQ(took.load() + stopped.load(), kTakers);
    std::uint64_t left_sum = 0;
    int left = 0;
    while (auto e = p.try_take()) {
        left_sum += *e;
        ++left;
    }
    EXPECT_EQ(took.load() + left, kTakers / 2);  // every element taken or still there
    EXPECT_EQ(sum.load() + left_sum, put_sum);   // and each exactly once
    EXPECT_EQ(p.debug_count(), 0);
    EXPECT_LE(p.debug_queue_segments(), 3u);
}

#if SPINDLE_DEBUG_CHECKS
TEST(PoolDeathTest, PutBeyondCapacityAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::queue_pool<int> p(2);
            p.put(1);
            p.put(2);
            p.put(3);
        },
        "spindle::queue_pool 0x[0-9a-f]+: put\\(\\) beyond capacity 2 \\(it held 2 elements\\)");
    EXPECT_DEATH(
        {
            spindle::stack_pool<int> p(1);
            p.put(1);
            p.put(2);
        },
        "spindle::stack_pool 0x[0-9a-f]+: put\\(\\) beyond capacity 1");
}

TEST(PoolDeathTest, ZeroCapacityAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH({ spindle::stack_pool<int> p(0); }, "spindle::stack_pool 0x[0-9a-f]+: capacity 0 outside \\[1, ");
}

TEST(PoolDeathTest, DestroyingWithWaitersAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(destroy_while_waited_on(
                     new spindle::queue_pool<int>(4), [](auto& p) { (void)p.take(); },
                     [](auto& p) { return p.debug_count() == -1; }),
        "spindle::queue_pool 0x[0-9a-f]+ destroyed with 1 waiting takers");
}
#endif

}  // namespace

// ---- the last reference puts and frees -------------------------------------
//
// (tests/support/last_reference.hpp.) A pool of one element used as a lock,
// guarding a count of references to the object: timed takes of a few
// microseconds, retried, race the put() that hands the element to a waiting
// taker; the last party deletes the pool right after its put() returns.

namespace {

template <class Pool>
struct pool_lock : counted_object<pool_lock<Pool>> {
    explicit pool_lock(int n) : refs(n) { p.put(1); }
    Pool p{1};
    int refs;  // guarded by holding the element
};

template <class Pool>
void run_pool_chain(unsigned workers) {
    using obj = pool_lock<Pool>;
    run_chain<obj>(workers, chain_fibers, chain_threads, chain_rounds(workers), [](obj& o, std::minstd_rand& rng) {
        linger(rng);
        std::optional<std::uint32_t> e;
        while (!(e = o.p.try_take_for(short_timeout(rng)))) {
        }
        EXPECT_EQ(*e, 1u);
        linger(rng);
        const bool last = --o.refs == 0;
        o.p.put(*e);
        if (last) delete &o;
    });
}

class PoolLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

TEST_P(PoolLastReferenceStress, TimedTakesRaceTheLastPut) {
    run_pool_chain<spindle::queue_pool<std::uint32_t>>(GetParam());
    run_pool_chain<spindle::stack_pool<std::uint32_t>>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Workers, PoolLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
