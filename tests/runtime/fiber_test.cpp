// Fibers and the scheduler: spawn, yield order, join (from threads and from
// fibers, before and after the fiber finished), detach, ids, exceptions,
// cross-scheduler joins, idle CPU, misuse deaths, and values living across
// yields.
#include <gtest/gtest.h>

#include <pthread.h>

#include <algorithm>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/scheduler.hpp>

#include "../support/overflow.hpp"

namespace {

using spindle::fiber;
using spindle::scheduler;
namespace this_fiber = spindle::this_fiber;

TEST(Fiber, SpawnAndJoinFromThread) {
    scheduler sched({.workers = 1});
    int x = 0;
    fiber f = sched.spawn([&] { x = 42; });
    EXPECT_TRUE(f.joinable());
    f.join();
    EXPECT_FALSE(f.joinable());
    EXPECT_EQ(x, 42);
}

TEST(Fiber, YieldIsRoundRobinOnOneWorker) {
    scheduler sched({.workers = 1});
    std::vector<int> order;
    std::atomic<bool> go{false};
    fiber outer = sched.spawn([&] {
        // Spawned from a fiber: all three land on this worker's deque, and
        // start newest first (the owner pops its deque LIFO).
        std::vector<fiber> fs;
        for (int id = 0; id < 3; ++id) {
            fs.push_back(fiber([&order, id] {
                for (int r = 0; r < 3; ++r) {
                    order.push_back(id);
                    this_fiber::yield();
                }
            }));
        }
        for (auto& f : fs) f.join();
        go = true;
    });
    outer.join();
    EXPECT_TRUE(go);
    // Round-robin: once all three run, each round repeats the first one.
    ASSERT_EQ(order.size(), 9u);
    std::vector<int> first(order.begin(), order.begin() + 3);
    std::vector<int> sorted = first;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2}));
    for (std::size_t i = 3; i < order.size(); ++i) EXPECT_EQ(order[i], first[i % 3]) << "at " << i;
}

TEST(Fiber, YieldFromPlainThreadIsHarmless) {
    this_fiber::yield();
    EXPECT_FALSE(this_fiber::is_fiber());
    EXPECT_EQ(this_fiber::get_id(), fiber::id());
}

TEST(Fiber, IdsAreUniqueAndVisibleInside) {
    scheduler sched({.workers = 1});
    std::vector<fiber> fs;
    std::vector<std::uint64_t> seen(50);
    for (int i = 0; i < 50; ++i)
        fs.push_back(sched.spawn([&seen, i] { seen[i] = this_fiber::get_id().value(); }));
    std::vector<std::uint64_t> ids;
    for (auto& f : fs) ids.push_back(f.get_id().value());
    for (auto& f : fs) f.join();
    for (int i = 0; i < 50; ++i) {
        EXPECT_NE(ids[i], 0u);
        EXPECT_EQ(seen[i], ids[i]);
        for (int j = 0; j < i; ++j) EXPECT_NE(ids[i], ids[j]);
    }
}

TEST(Fiber, ExceptionPropagatesToJoin) {
    scheduler sched({.workers = 1});
    fiber f = sched.spawn([] { throw std::runtime_error("boom"); });
    try {
        f.join();
        FAIL() << "join() did not rethrow";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "boom");
    }
    EXPECT_FALSE(f.joinable());
}

TEST(Fiber, JoinFromFiberBeforeAndAfterFinish) {
    scheduler sched({.workers = 1});
    std::vector<int> log;
    fiber main = sched.spawn([&] {
        fiber slow([&] {
            for (int i = 0; i < 5; ++i) this_fiber::yield();
            log.push_back(1);
        });
        fiber quick([&] { log.push_back(2); });
        slow.join();  // blocks this fiber; quick finishes meanwhile
        log.push_back(3);
        quick.join();  // already finished: returns at once
        log.push_back(4);
    });
    main.join();
    EXPECT_EQ(log, (std::vector<int>{2, 1, 3, 4}));
}

TEST(Fiber, JoinAcrossSchedulers) {
    scheduler a({.workers = 1});
    scheduler b({.workers = 1});
    std::atomic<int> step{0};
    fiber target = a.spawn([&] {
        while (step.load() == 0) this_fiber::yield();  // until b's fiber waits
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        step = 2;
    });
    fiber joiner = b.spawn([&] {
        step = 1;
        target.join();  // a fiber of b waits for a fiber of a
        EXPECT_EQ(step.load(), 2);
        step = 3;
    });
    joiner.join();
    EXPECT_EQ(step.load(), 3);
}

TEST(Fiber, DetachedFibersFinishBeforeSchedulerDies) {
    std::atomic<int> done{0};
    {
        scheduler sched({.workers = 2});
        for (int i = 0; i < 100; ++i) {
            sched.spawn([&] {
                for (int k = 0; k < 10; ++k) this_fiber::yield();
                done.fetch_add(1);
            }).detach();
        }
    }  // ~scheduler waits for all
    EXPECT_EQ(done.load(), 100);
}

TEST(Fiber, ManyFibersManyYieldsSeveralWorkers) {
    for (unsigned workers : {1u, 2u, 4u}) {
        scheduler sched({.workers = workers});
        std::atomic<long> total{0};
        std::vector<fiber> fs;
        for (int i = 0; i < 200; ++i) {
            fs.push_back(sched.spawn([&total] {
                long local = 0;
                for (int k = 0; k < 100; ++k) {
                    local += k;
                    this_fiber::yield();
                }
                total.fetch_add(local);
            }));
        }
        for (auto& f : fs) f.join();
        EXPECT_EQ(total.load(), 200L * (99 * 100 / 2)) << workers << " workers";
    }
}

TEST(Fiber, ValuesSurviveYieldsWhileOthersChurn) {
    // Each fiber keeps many values live across yields while the others run:
    // a missing clobber in the inlined switch would corrupt them.
    scheduler sched({.workers = 1});
    std::atomic<int> bad{0};
    std::vector<fiber> fs;
    for (int i = 0; i < 8; ++i) {
        fs.push_back(sched.spawn([i, &bad] {
            volatile int seed = i + 1;
            int a = seed * 3, b = seed * 5, c = seed * 7, d = seed * 11, e = seed * 13;
            double x = seed * 0.5, y = seed * 1.5, z = seed * 2.5;
            for (int r = 0; r < 100; ++r) {
                this_fiber::yield();
                int s = seed;
                if (a != s * 3 || b != s * 5 || c != s * 7 || d != s * 11 || e != s * 13 ||
                    x != s * 0.5 || y != s * 1.5 || z != s * 2.5)
                    bad.fetch_add(1);
            }
        }));
    }
    for (auto& f : fs) f.join();
    EXPECT_EQ(bad.load(), 0);
}

TEST(Fiber, SpawnFromAnotherThreadWhileRunning) {
    scheduler sched({.workers = 1});
    std::atomic<bool> stop{false};
    std::atomic<int> count{0};
    fiber spinner = sched.spawn([&] {
        while (!stop.load()) this_fiber::yield();  // keeps the worker busy in yields
    });
    std::vector<fiber> fs;
    for (int i = 0; i < 50; ++i) fs.push_back(sched.spawn([&] { count.fetch_add(1); }));
    for (auto& f : fs) f.join();  // completes although one fiber never blocks
    stop = true;
    spinner.join();
    EXPECT_EQ(count.load(), 50);
}

TEST(Fiber, IdleSchedulerUsesAlmostNoCpu) {
    scheduler sched({.workers = 2});
    sched.spawn([] {}).join();
    timespec t0{}, t1{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    double used = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    // Parked workers burn nothing; allow for sanitizer runtimes' own threads.
    EXPECT_LT(used, 0.05) << "an idle scheduler used " << used << " s of CPU in 1 s";
}

TEST(Fiber, StackSizeOptionIsHonoured) {
    scheduler sched({.workers = 1, .stack_size = 64 * 1024});
    EXPECT_EQ(sched.default_stack_size(), 64u * 1024u);
    // Use most of a 256 KiB stack: would overflow the 64 KiB default.
    fiber f = sched.spawn(
        [] {
            volatile char big[200 * 1024];
            big[0] = 1;
            big[sizeof(big) - 1] = 2;
            EXPECT_EQ(big[0] + big[sizeof(big) - 1], 3);
        },
        {.stack_size = 256 * 1024});
    f.join();
}

TEST(Fiber, TooSmallStackIsRejected) {
    EXPECT_THROW(scheduler({.workers = 1, .stack_size = 4096}), std::invalid_argument);
}

TEST(FiberDeath, DestroyingJoinableHandleAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            fiber f = sched.spawn([] {});
            fiber::id id = f.get_id();
            (void)id;
            // f goes out of scope joinable
        },
        "spindle: fiber [0-9]+: its joinable handle was destroyed; call join\\(\\) or detach\\(\\)");
}

TEST(FiberDeath, JoinTwiceAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            fiber f = sched.spawn([] {});
            f.join();
            f.join();
        },
        "spindle: join\\(\\) on fiber handle 0x[0-9a-f]+, which is not joinable");
}

TEST(FiberDeath, DetachTwiceNamesTheHandle) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            fiber f = sched.spawn([] {});
            f.detach();
            f.detach();
        },
        "spindle: detach\\(\\) on fiber handle 0x[0-9a-f]+, which is not joinable");
}

// A real fiber overflows its stack: the message names it and the size it was
// spawned with.
TEST(FiberDeath, StackOverflowNamesTheFiberAndItsSize) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            fiber f = sched.spawn([] { std::printf("%d\n", spindle::test::dig(0)); }, {.stack_size = 16 * 1024});
            f.join();
        },
        "spindle: fiber [0-9]+ overflowed its 16384-byte stack; raise it with spindle::fiber_options::stack_size "
        "or spindle::scheduler::options::stack_size \\(SPINDLE_STACK_SIZE=<bytes> for the default\\)");
}

TEST(FiberDeath, DetachedFiberEndingWithExceptionAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            sched.spawn([] { throw std::runtime_error("lost"); }).detach();
        },
        "spindle: detached fiber [0-9]+ ended with an exception: lost");
}

// pthread_exit() and thread cancellation unwind with a forced unwind that
// must not be swallowed, and that cannot reach the worker thread's start from
// the fiber's stack: spindle stops the program naming the fiber (before, the
// fiber's catch-all swallowed it and glibc aborted: "exception not
// rethrown").
TEST(FiberDeath, PthreadExitInsideAFiberNamesTheFiber) {
#if SPINDLE_TSAN
    // ThreadSanitizer's own pthread_exit interceptor CHECK-fails when called
    // on a stack that is not the thread's (it compares its per-thread state
    // with the fiber's): the process dies inside the sanitizer before the
    // forced unwind that spindle reports can start.
    GTEST_SKIP() << "ThreadSanitizer aborts in pthread_exit on a fiber stack";
#endif
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            sched.spawn([] { ::pthread_exit(nullptr); }).join();
        },
        "spindle: fiber [0-9]+ called pthread_exit\\(\\) or was cancelled as a thread");
}

TEST(FiberDeath, CancellationOfTheWorkerInsideAFiberNamesTheFiber) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler sched({.workers = 1});
            sched.spawn([] {
                ::pthread_cancel(::pthread_self());
                ::pthread_testcancel();  // a cancellation point
            }).join();
        },
        "spindle: fiber [0-9]+ called pthread_exit\\(\\) or was cancelled as a thread");
}

// On a plain thread nothing changes: a thread blocked on a spindle::mutex can
// still be ended by pthread_exit from a cleanup it runs before (the forced
// unwind passes through no spindle frame).
TEST(Fiber, PthreadExitOfAPlainThreadIsUntouched) {
    std::atomic<bool> unwound{false};
    std::thread t([&] {
        struct mark {
            std::atomic<bool>& u;
            ~mark() { u = true; }
        } m{unwound};
        ::pthread_exit(nullptr);
    });
    t.join();
    EXPECT_TRUE(unwound.load());
}

TEST(FiberDeath, SchedulerDestroyedFromItsOwnFiberAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            auto* sched = new scheduler({.workers = 1});
            sched->spawn([sched] { delete sched; }).join();
        },
        "spindle: scheduler destroyed from its own fiber [0-9]+");
}

}  // namespace

namespace {

TEST(Fiber, SwitchingInsideCatchHandlersKeepsEachFibersException) {
    // Each fiber's caught-exception stack travels with it: a rethrow inside
    // a handler after a yield rethrows that fiber's own exception.
    scheduler sched({.workers = 1});
    std::string got_a, got_b;
    auto body = [](const char* mine, std::string& got) {
        return [mine, &got] {
            try {
                throw std::runtime_error(mine);
            } catch (const std::exception&) {
                spindle::this_fiber::yield();  // the other fiber enters its handler meanwhile
                try {
                    throw;
                } catch (const std::exception& again) {
                    got = again.what();
                }
            }
            EXPECT_EQ(std::current_exception(), nullptr);
        };
    };
    fiber a = sched.spawn(body("A", got_a));
    fiber b = sched.spawn(body("B", got_b));
    a.join();
    b.join();
    EXPECT_EQ(got_a, "A");
    EXPECT_EQ(got_b, "B");
}

TEST(Fiber, WakingAFiberOfASchedulerThatIsDestroyedRightAfter) {
    // A fiber of `outer` joins a fiber of `inner`; `outer` is destroyed as
    // soon as its fiber returns. The waker (inner's worker) must not touch
    // outer's workers after that.
    scheduler inner({.workers = 1});
    for (int round = 0; round < 200; ++round) {
        auto outer = std::make_unique<scheduler>(scheduler::options{.workers = 1});
        fiber target = inner.spawn([] { spindle::this_fiber::yield(); });
        outer->spawn([&target] { target.join(); }).join();
        outer.reset();
    }
    SUCCEED();
}

}  // namespace
