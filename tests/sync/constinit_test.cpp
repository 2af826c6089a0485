// The primitives as constinit globals: their constructors are constexpr (a
// lock type can be a zero-initialized global, as the project's design asks;
// the CQS queue allocates its first segment at its first wait, not when
// built), so a global is usable from other globals' constructors and from
// threads that start before main. The compile-time check is the constinit
// itself; the test then makes sure a queue set up that way works.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <spindle/sync/barrier.hpp>
#include <spindle/sync/counting_semaphore.hpp>
#include <spindle/sync/cqs_mutex.hpp>
#include <spindle/sync/event.hpp>
#include <spindle/sync/latch.hpp>
#include <spindle/sync/mutex.hpp>

namespace {

constinit spindle::cqs_mutex g_cqs_mutex;
constinit spindle::mutex g_mutex;
constinit spindle::counting_semaphore<4> g_semaphore(0);
constinit spindle::latch g_latch(1);
constinit spindle::barrier<> g_barrier(2);
constinit spindle::event g_event(spindle::event_reset::manual);

// Each one is used; the semaphore certainly with a queued waiter, so that
// its queue's first segment is allocated by that wait.
TEST(Constinit, GlobalsWaitAndWake) {
    EXPECT_EQ(g_semaphore.debug_queue_segments(), 0u);  // nothing allocated yet
    std::atomic<int> done{0};
    std::thread t([&] {
        g_semaphore.acquire();
        g_cqs_mutex.lock();
        g_cqs_mutex.unlock();
        g_mutex.lock();
        g_mutex.unlock();
        g_latch.wait();
        g_barrier.arrive_and_wait();
        g_event.wait();
        done.store(1);
    });
    // It waits: its suspend allocates the queue's first segment.
    while (g_semaphore.debug_queue_segments() == 0) std::this_thread::yield();
    g_semaphore.release();
    g_latch.count_down();
    g_barrier.arrive_and_wait();
    g_event.set();
    t.join();
    EXPECT_EQ(done.load(), 1);
    EXPECT_LE(g_semaphore.debug_queue_segments(), 2u);
}

}  // namespace
