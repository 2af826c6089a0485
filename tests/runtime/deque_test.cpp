// The Chase-Lev deque under the scheduler (runtime/detail/deque.hpp): order
// for the owner and for thieves, growth (also from a ring that has wrapped),
// empty pops and steals that leave it usable, the owner's pop racing thieves
// for the last element (exactly one gets it), no element lost or taken twice
// with thieves racing the owner, each thief's steals in push order, and a
// growth that runs out of memory; the owner's peek at its next pop.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // arch::cpu_relax
#include <spindle/runtime/detail/deque.hpp>

namespace {

using spindle::detail::ws_deque;

int* item(std::uintptr_t i) { return reinterpret_cast<int*>(i); }
std::uintptr_t id(int* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(Deque, OwnerPopsNewestThievesTakeOldest) {
    ws_deque<int> d(4);
    for (std::uintptr_t i = 1; i <= 10; ++i) d.push(item(i));  // grows 4 -> 8 -> 16
    EXPECT_EQ(id(d.steal()), 1u);
    EXPECT_EQ(id(d.steal()), 2u);
    EXPECT_EQ(id(d.pop()), 10u);
    EXPECT_EQ(id(d.pop()), 9u);
    for (std::uintptr_t i = 3; i <= 8; ++i) EXPECT_EQ(id(d.steal()), i);
    EXPECT_EQ(d.pop(), nullptr);
    EXPECT_EQ(d.steal(), nullptr);
    EXPECT_FALSE(d.maybe_nonempty());
    EXPECT_TRUE(d.empty_seq_cst());
}

// The owner's peek names what its next pop takes, across a growth and a
// wrapped ring, and nothing once thieves have emptied it.
TEST(Deque, PeekHintNamesTheNextPop) {
    ws_deque<int> d(4);
    EXPECT_EQ(d.peek_hint(), nullptr);
    for (std::uintptr_t i = 1; i <= 3; ++i) d.push(item(i));
    EXPECT_EQ(id(d.steal()), 1u);
    EXPECT_EQ(id(d.steal()), 2u);
    for (std::uintptr_t i = 4; i <= 9; ++i) d.push(item(i));  // wraps, then grows
    for (std::uintptr_t i = 9; i >= 4; --i) {
        EXPECT_EQ(id(d.peek_hint()), i);
        EXPECT_EQ(id(d.pop()), i);
    }
    EXPECT_EQ(id(d.peek_hint()), 3u);
    EXPECT_EQ(id(d.steal()), 3u);
    EXPECT_EQ(d.peek_hint(), nullptr);
    EXPECT_EQ(d.pop(), nullptr);
    EXPECT_EQ(d.peek_hint(), nullptr);
}

// The ring wraps before it grows: elements live in slots t..b-1 mod the
// capacity, and the growth must copy them in order from there.
TEST(Deque, GrowthFromAWrappedRingKeepsTheOrder) {
    ws_deque<int> d(4);
    for (std::uintptr_t i = 1; i <= 3; ++i) d.push(item(i));
    EXPECT_EQ(id(d.steal()), 1u);
    EXPECT_EQ(id(d.steal()), 2u);  // top = 2: slots 0 and 1 are free
    for (std::uintptr_t i = 4; i <= 6; ++i) d.push(item(i));  // 5 and 6 wrap to slots 0 and 1
    d.push(item(7));  // 5 elements in 4 slots: grows, copying 3..6 from the wrapped ring
    for (std::uintptr_t i = 8; i <= 20; ++i) d.push(item(i));  // and grows again
    for (std::uintptr_t i = 3; i <= 10; ++i) EXPECT_EQ(id(d.steal()), i);
    for (std::uintptr_t i = 20; i >= 11; --i) EXPECT_EQ(id(d.pop()), i);
    EXPECT_EQ(d.pop(), nullptr);
    EXPECT_EQ(d.steal(), nullptr);
}

// A pop of an empty deque moves bottom down and back: it must leave the
// deque as it was, however often it happens, and so must an empty steal.
TEST(Deque, EmptyPopsAndStealsLeaveItUsable) {
    ws_deque<int> d(2);
    for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(d.pop(), nullptr);
        EXPECT_EQ(d.steal(), nullptr);
    }
    EXPECT_FALSE(d.maybe_nonempty());
    EXPECT_TRUE(d.empty_seq_cst());
    d.push(item(1));
    EXPECT_TRUE(d.maybe_nonempty());
    EXPECT_FALSE(d.empty_seq_cst());
    EXPECT_EQ(id(d.steal()), 1u);
    EXPECT_EQ(d.pop(), nullptr);  // top has passed bottom's old value
    d.push(item(2));
    d.push(item(3));
    EXPECT_EQ(id(d.pop()), 3u);
    EXPECT_EQ(id(d.pop()), 2u);  // the last one, taken by the owner's CAS
    EXPECT_EQ(d.pop(), nullptr);
    EXPECT_EQ(d.steal(), nullptr);
    d.push(item(4));
    EXPECT_EQ(id(d.steal()), 4u);
    EXPECT_TRUE(d.empty_seq_cst());
}

// The one element of the deque, wanted at once by the owner's pop and two
// thieves, round after round: exactly one of them gets it, and the deque is
// empty afterwards. The thieves spin ready for the round's start; the owner
// starts it and pops, by turns: at once; after a pause that grows each time
// the owner wins and shrinks each time a thief does, so that it settles
// where the pop meets the steals (however long a pause instruction or a
// cache line's trip takes on the machine); or only after both thieves have
// tried, when one of them must have got it. (How the first two kinds of
// round come out is the machine's business; the counts go to the log.)
TEST(Deque, LastElementGoesToExactlyOneTaker) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr std::uintptr_t kRounds = 1'500;
#else
    constexpr std::uintptr_t kRounds = 15'000;
#endif
    constexpr int kThieves = 2;
    ws_deque<int> d(2);
    // `ready` and `arrived` are bumped by each thief (release: pairs with
    // the owner's acquire loads; a thief's slot in `took` is written before
    // it arrives). The owner stores the round number after its push
    // (release: pairs with the thieves' acquire load; they steal after it).
    std::atomic<std::uintptr_t> round{0};
    std::atomic<int> ready{0}, arrived{0};
    std::atomic<std::uintptr_t> took[kThieves] = {};
    // Spins, yielding now and then: the three threads may share two CPUs.
    auto spin_until = [](auto pred) {
        for (unsigned i = 1; !pred(); ++i) {
            if (i % 256 == 0) std::this_thread::yield();
            else spindle::arch::cpu_relax();
        }
    };
    std::vector<std::thread> thieves;
    for (int t = 0; t < kThieves; ++t)
        thieves.emplace_back([&, t] {
            for (std::uintptr_t r = 1; r <= kRounds; ++r) {
                ready.fetch_add(1, std::memory_order_release);
                spin_until([&] { return round.load(std::memory_order_acquire) == r; });
                took[t].store(id(d.steal()), std::memory_order_relaxed);
                arrived.fetch_add(1, std::memory_order_release);
            }
        });
    std::size_t wrong = 0, owner_won = 0, thief_won = 0, thief_won_when_late = 0;
    std::uintptr_t pause = 0;  // the second kind's, in pause instructions
    for (std::uintptr_t r = 1; r <= kRounds; ++r) {
        const int all = kThieves * static_cast<int>(r);
        d.push(item(r));
        spin_until([&] { return ready.load(std::memory_order_acquire) == all; });
        round.store(r, std::memory_order_release);
        const int kind = static_cast<int>(r % 3);
        if (kind == 1) {  // about when the thieves steal
            for (std::uintptr_t k = 0; k < pause; ++k) spindle::arch::cpu_relax();
        } else if (kind == 2) {  // after both tried
            spin_until([&] { return arrived.load(std::memory_order_acquire) == all; });
        }
        const std::uintptr_t mine = id(d.pop());
        spin_until([&] { return arrived.load(std::memory_order_acquire) == all; });
        int takers = mine == r;
        for (auto& x : took) {
            const std::uintptr_t v = x.load(std::memory_order_relaxed);
            takers += v == r;
            wrong += v != r && v != 0;  // never another round's element
        }
        wrong += mine != r && mine != 0;
        wrong += takers != 1;
        if (takers == 1) ++(mine == r ? owner_won : thief_won);
        if (kind == 2 && takers == 1 && mine != r) ++thief_won_when_late;
        if (kind == 1) pause = mine == r ? std::min<std::uintptr_t>(pause + 1, 4096) : pause - (pause > 0);
        wrong += d.pop() != nullptr;
        wrong += d.steal() != nullptr;
    }
    for (auto& t : thieves) t.join();
    std::printf("%zu rounds: the owner took the last element %zu times, a thief %zu times (pause %zu)\n",
                static_cast<std::size_t>(kRounds), owner_won, thief_won, static_cast<std::size_t>(pause));
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(owner_won + thief_won, static_cast<std::size_t>(kRounds));
    EXPECT_EQ(thief_won_when_late, static_cast<std::size_t>(kRounds / 3));  // the owner came after both
}

// The owner only pushes, from a small buffer that grows under the thieves:
// each element is stolen exactly once, and each thief's steals come in push
// order (top only moves up, and the elements were pushed in order).
TEST(Deque, ConcurrentThievesTakeEachElementOnceInPushOrder) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr std::uintptr_t kItems = 20'000;
#else
    constexpr std::uintptr_t kItems = 200'000;
#endif
    constexpr int kThieves = 3;
    ws_deque<int> d(2);
    std::vector<std::atomic<std::uint8_t>> seen(kItems + 1);
    std::atomic<bool> done{false};  // release store after the last push: pairs with the thieves' acquire load
    std::atomic<int> out_of_order{0};
    std::vector<std::thread> thieves;
    for (int t = 0; t < kThieves; ++t)
        thieves.emplace_back([&] {
            std::uintptr_t last = 0;
            auto take = [&](int* p) {
                if (p == nullptr) return;
                if (id(p) <= last) out_of_order.fetch_add(1, std::memory_order_relaxed);
                last = id(p);
                seen[id(p)].fetch_add(1, std::memory_order_relaxed);
            };
            while (!done.load(std::memory_order_acquire)) take(d.steal());
            while (d.maybe_nonempty()) take(d.steal());
        });
    for (std::uintptr_t i = 1; i <= kItems; ++i) d.push(item(i));
    done.store(true, std::memory_order_release);
    for (auto& t : thieves) t.join();
    std::size_t not_once = 0;
    for (std::uintptr_t i = 1; i <= kItems; ++i) not_once += seen[i].load(std::memory_order_relaxed) != 1;
    EXPECT_EQ(not_once, 0u);
    EXPECT_EQ(out_of_order.load(), 0);
    EXPECT_EQ(d.steal(), nullptr);
}

// Every element comes out exactly once, whoever takes it, while the deque
// grows under the thieves.
TEST(Deque, ThievesAndOwnerTakeEachElementOnce) {
    constexpr std::uintptr_t kItems = 200'000;
    ws_deque<int> d(2);
    std::vector<std::atomic<std::uint8_t>> seen(kItems + 1);
    std::atomic<bool> done{false};
    auto take = [&](int* p) {
        if (p != nullptr) seen[id(p)].fetch_add(1, std::memory_order_relaxed);
    };
    std::vector<std::thread> thieves;
    for (int t = 0; t < 3; ++t)
        thieves.emplace_back([&] {
            while (!done.load(std::memory_order_acquire)) take(d.steal());
            while (int* p = d.steal()) take(p);
        });
    for (std::uintptr_t i = 1; i <= kItems; ++i) {
        d.push(item(i));
        if (i % 3 == 0) take(d.pop());
    }
    while (d.maybe_nonempty()) take(d.pop());
    done.store(true, std::memory_order_release);
    for (auto& t : thieves) t.join();
    std::size_t missing = 0, twice = 0;
    for (std::uintptr_t i = 1; i <= kItems; ++i) {
        const auto n = seen[i].load(std::memory_order_relaxed);
        missing += n == 0;
        twice += n > 1;
    }
    EXPECT_EQ(missing, 0u);
    EXPECT_EQ(twice, 0u);
}

#if !SPINDLE_ASAN && !SPINDLE_TSAN  // both reserve far more address space than the limit below
// A growth that cannot get memory stops the program with the cause, instead
// of letting std::bad_alloc reach the scheduler's noexcept paths (which would
// terminate without a word).
TEST(DequeDeathTest, GrowthOutOfMemoryNamesTheCause) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            rlimit lim{};
            getrlimit(RLIMIT_AS, &lim);
            lim.rlim_cur = 1ull << 30;  // 1 GiB of address space
            setrlimit(RLIMIT_AS, &lim);
            ws_deque<int> d(1);
            for (std::uintptr_t i = 1; i < (1ull << 28); ++i) d.push(item(i));  // needs 2+ GiB
        },
        "spindle: out of memory growing a worker's run queue from [0-9]+ to [0-9]+ fibers");
}
#endif

}  // namespace
