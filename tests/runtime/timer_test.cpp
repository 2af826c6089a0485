// The timer service under sleep_for and every timed wait of a fiber
// (runtime/detail/timer.hpp, src/runtime/timer.cpp), driven directly:
// deadline order, equal deadlines in arming order, cancelling the head or an
// entry behind it, re-arming, a cancel that meets a running action, a new
// earliest deadline that must wake the sleeping service, and many entries
// from many threads, each fired once and never early.
//
// No test waits for time to pass. The service runs one action at a time on
// its one thread: a gate (an entry whose action holds that thread until the
// test opens it) lets a test arm entries that are all due when the gate
// opens, so the order in which the service fires them is the order it
// keeps, with nothing else racing. Whether the service thread or a
// canceller sleeps is asked of the kernel (tests/support/thread_state.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/detail/timer.hpp>

#include "../support/thread_state.hpp"

namespace {

using spindle::detail::timer_add;
using spindle::detail::timer_cancel;
using spindle::detail::timer_entry;
using clock_type = std::chrono::steady_clock;

// Spins (yielding) until pred() holds or 30 s pass; true if it held. The
// bound only turns a hang into a failure.
bool eventually(const std::function<bool()>& pred) {
    const auto give_up = clock_type::now() + std::chrono::seconds(30);
    while (!pred()) {
        if (clock_type::now() > give_up) return false;
        std::this_thread::yield();
    }
    return true;
}

// Holds the service thread in its action until opened (or destroyed).
struct gate {
    timer_entry e;
    std::atomic<bool> entered{false};  // store release: pairs with the test's acquire load
    std::atomic<bool> open{false};     // store release: pairs with the action's acquire load
    std::atomic<pid_t> tid{0};         // the service thread, for parks()

    gate() {
        e.deadline = clock_type::now();
        e.fn = [](void* a) noexcept {
            auto* g = static_cast<gate*>(a);
            g->tid.store(spindle::test::this_tid(), std::memory_order_relaxed);  // published by `entered`
            g->entered.store(true, std::memory_order_release);
            while (!g->open.load(std::memory_order_acquire)) std::this_thread::yield();
        };
        e.arg = this;
        timer_add(&e);
    }
    // True once the service thread runs the gate's action.
    bool closed() { return eventually([&] { return entered.load(std::memory_order_acquire); }); }
    void release() { open.store(true, std::memory_order_release); }
    ~gate() {
        release();
        timer_cancel(&e);  // waits for the action to return: `e` may go then
    }
};

// Entries whose actions note the order they fired in and when.
struct probes {
    struct probe {
        timer_entry e;
        probes* owner = nullptr;
        int id = 0;
        std::atomic<int> fired{0};  // written by the service thread; read after `count`
        clock_type::time_point fired_at{};
    };

    explicit probes(int n) : p(static_cast<std::size_t>(n)) {
        for (int i = 0; i < n; ++i) {
            probe& x = p[static_cast<std::size_t>(i)];
            x.owner = this;
            x.id = i;
            x.e.arg = &x;
            x.e.fn = [](void* a) noexcept {
                auto* x = static_cast<probe*>(a);
                x->fired_at = clock_type::now();
                x->fired.fetch_add(1, std::memory_order_relaxed);  // published by `count`
                x->owner->order.push_back(x->id);  // one action at a time, all on the service thread
                // release: pairs with the test's acquire load; `order`,
                // `fired` and `fired_at` written before are visible then.
                x->owner->count.fetch_add(1, std::memory_order_release);
            };
        }
    }
    ~probes() {
        for (auto& x : p) timer_cancel(&x.e);  // whatever a failed test left armed
    }
    probe& operator[](int i) { return p[static_cast<std::size_t>(i)]; }
    void arm(int i, clock_type::time_point deadline) {
        (*this)[i].e.deadline = deadline;
        timer_add(&(*this)[i].e);
    }
    // Waits until n actions ran in all.
    bool fired(int n) { return eventually([&] { return count.load(std::memory_order_acquire) >= n; }); }

    std::vector<probe> p;
    std::vector<int> order;  // the service thread's; read after `count`
    std::atomic<int> count{0};
};

TEST(Timer, FiresInDeadlineOrder) {
    constexpr int kEntries = 200;
    probes ps(kEntries);
    // Entry i is due at base + i us, all in the past; they are armed in a
    // shuffled order while the service is held.
    std::vector<int> arming(kEntries);
    std::iota(arming.begin(), arming.end(), 0);
    std::shuffle(arming.begin(), arming.end(), std::minstd_rand(7));
    const auto base = clock_type::now() - std::chrono::seconds(1);
    {
        gate g;
        ASSERT_TRUE(g.closed());
        for (int i : arming) ps.arm(i, base + std::chrono::microseconds(i));
    }
    ASSERT_TRUE(ps.fired(kEntries));
    std::vector<int> expected(kEntries);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(ps.order, expected);
}

// Equal deadlines fire in arming order (the sequence number breaks the
// tie), whatever other deadline is armed between them. Armed from the last
// entry to the first: against the order of their addresses, which the
// service's key also holds.
TEST(Timer, EqualDeadlinesFireInArmingOrder) {
    constexpr int kEntries = 100;
    probes ps(kEntries);
    const auto late = clock_type::now() - std::chrono::milliseconds(1);
    const auto early = late - std::chrono::milliseconds(1);
    {
        gate g;
        ASSERT_TRUE(g.closed());
        for (int i = kEntries - 1; i >= 0; --i) ps.arm(i, i % 2 == 0 ? late : early);
    }
    ASSERT_TRUE(ps.fired(kEntries));
    std::vector<int> expected;
    for (int i = kEntries - 1; i >= 0; --i)
        if (i % 2 == 1) expected.push_back(i);  // the early ones, in arming order
    for (int i = kEntries - 1; i >= 0; --i)
        if (i % 2 == 0) expected.push_back(i);
    EXPECT_EQ(ps.order, expected);
}

// A cancelled entry never fires, be it the head of the queue, one behind it
// or the last; the others keep their order; a cancelled or a fired entry
// may be armed again, and fires again.
TEST(Timer, CancelledEntriesNeverFireAndTheRestKeepTheirOrder) {
    constexpr int kEntries = 10;
    probes ps(kEntries);
    const auto base = clock_type::now() - std::chrono::seconds(1);
    {
        gate g;
        ASSERT_TRUE(g.closed());
        for (int i = 0; i < kEntries; ++i) ps.arm(i, base + std::chrono::microseconds(i));
        timer_cancel(&ps[5].e);  // behind the head
        timer_cancel(&ps[0].e);  // the head
        timer_cancel(&ps[9].e);  // the last
        timer_cancel(&ps[5].e);  // twice: idle now, nothing to do
    }
    ASSERT_TRUE(ps.fired(7));
    EXPECT_EQ(ps.order, (std::vector<int>{1, 2, 3, 4, 6, 7, 8}));
    for (int i : {0, 5, 9}) EXPECT_EQ(ps[i].fired.load(), 0) << "entry " << i;
    // Armed again: one that was cancelled and one that fired.
    {
        gate g;
        ASSERT_TRUE(g.closed());
        ps.arm(5, clock_type::now() - std::chrono::milliseconds(1));
        ps.arm(3, clock_type::now() - std::chrono::milliseconds(2));
    }
    ASSERT_TRUE(ps.fired(9));
    EXPECT_EQ(ps.order, (std::vector<int>{1, 2, 3, 4, 6, 7, 8, 3, 5}));
    EXPECT_EQ(ps[3].fired.load(), 2);
    EXPECT_EQ(ps[5].fired.load(), 1);
    for (int i : {0, 9}) EXPECT_EQ(ps[i].fired.load(), 0) << "entry " << i;
}

// timer_cancel of an entry whose action runs waits until the action
// returned: only then may the entry (often on a fiber's stack) go away. The
// canceller is seen asleep in the kernel while the action is held, and
// finds the action finished when its cancel returns. A cancel of an entry
// never armed returns at once.
TEST(Timer, CancelOfARunningActionWaitsForIt) {
    struct held {
        timer_entry e;
        std::atomic<bool> entered{false};   // release store: pairs with the test's acquire load
        std::atomic<bool> open{false};      // release store: pairs with the action's acquire load
        std::atomic<bool> finished{false};  // release store: pairs with the canceller's acquire load
    } h;
    h.e.deadline = clock_type::now();
    h.e.arg = &h;
    h.e.fn = [](void* a) noexcept {
        auto* h = static_cast<held*>(a);
        h->entered.store(true, std::memory_order_release);
        while (!h->open.load(std::memory_order_acquire)) std::this_thread::yield();
        h->finished.store(true, std::memory_order_release);
    };
    timer_entry never_armed;
    timer_cancel(&never_armed);  // idle: returns at once
    timer_add(&h.e);
    ASSERT_TRUE(eventually([&] { return h.entered.load(std::memory_order_acquire); }));
    std::atomic<pid_t> tid{0};
    bool finished_when_cancelled = false;
    std::thread canceller([&] {
        tid.store(spindle::test::this_tid());
        timer_cancel(&h.e);
        finished_when_cancelled = h.finished.load(std::memory_order_acquire);
    });
    const bool slept = spindle::test::parks(tid);
    h.open.store(true, std::memory_order_release);
    canceller.join();
    EXPECT_TRUE(slept) << "the canceller did not wait for the running action";
    EXPECT_TRUE(finished_when_cancelled);
}

// The service sleeps until its earliest deadline; an entry armed with an
// earlier one must wake it. Seen asleep by the kernel first, with only a
// deadline an hour away, so the new entry can fire only if arming it woke
// the service.
TEST(Timer, AnEarlierDeadlineWakesTheSleepingService) {
    probes ps(2);
    std::atomic<pid_t> service{0};
    {
        gate g;  // learns the service thread's id
        ASSERT_TRUE(g.closed());
        service.store(g.tid.load(std::memory_order_relaxed));  // published by g.entered
    }
    ps.arm(0, clock_type::now() + std::chrono::hours(1));
    ASSERT_TRUE(spindle::test::parks(service)) << "the service thread never slept";
    ps.arm(1, clock_type::now());
    ASSERT_TRUE(ps.fired(1));
    EXPECT_EQ(ps.order, std::vector<int>{1});
    timer_cancel(&ps[0].e);
    EXPECT_EQ(ps[0].fired.load(), 0);
}

// Threads arm thousands of entries due within a few milliseconds: each
// fires exactly once, and never before its deadline.
TEST(Timer, ManyEntriesFromManyThreadsFireOnceAndNeverEarly) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kPerThread = 500;
#else
    constexpr int kPerThread = 3000;
#endif
    constexpr int kThreads = 4;
    probes ps(kThreads * kPerThread);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            std::minstd_rand rng(static_cast<unsigned>(t) + 1);
            for (int k = 0; k < kPerThread; ++k)
                ps.arm(t * kPerThread + k, clock_type::now() + std::chrono::microseconds(rng() % 3000));
        });
    for (auto& t : ts) t.join();
    ASSERT_TRUE(ps.fired(kThreads * kPerThread));
    int not_once = 0, early = 0;
    for (auto& x : ps.p) {
        not_once += x.fired.load() != 1;
        early += x.fired_at < x.e.deadline;
    }
    EXPECT_EQ(not_once, 0);
    EXPECT_EQ(early, 0);
    EXPECT_EQ(ps.count.load(), kThreads * kPerThread);
}

}  // namespace
