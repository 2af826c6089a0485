// The Chase-Lev deque under the scheduler (runtime/detail/deque.hpp): order
// for the owner and for thieves, growth, no element lost or taken twice with
// thieves racing the owner, and a growth that runs out of memory.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <spindle/arch/config.hpp>
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
