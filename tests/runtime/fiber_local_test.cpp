// spindle::fiber_local: one instance per fiber, kept across suspensions and
// migrations, destroyed when the fiber ends (before join returns); plain
// threads get their own.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/fiber_local.hpp>
#include <spindle/runtime/scheduler.hpp>

namespace {

using spindle::fiber;
using spindle::fiber_local;
using spindle::scheduler;
namespace this_fiber = spindle::this_fiber;

struct counted {
    static inline std::atomic<int> live{0};
    int value = 0;
    counted() { live.fetch_add(1); }
    explicit counted(int v) : value(v) { live.fetch_add(1); }
    counted(const counted& o) : value(o.value) { live.fetch_add(1); }
    ~counted() { live.fetch_sub(1); }
};

TEST(FiberLocal, EachFiberHasItsOwnAcrossSwitchesAndMigration) {
    scheduler sched({.workers = 4, .stack_size = 32 * 1024});
    fiber_local<counted> local;
    fiber_local<std::string> name([] { return std::string("unnamed"); });
    std::atomic<int> wrong{0};
    std::vector<fiber> fs;
    for (int i = 0; i < 200; ++i) {
        fs.push_back(sched.spawn([&, i] {
            if (local.has_value()) wrong.fetch_add(1);
            if (*name != "unnamed") wrong.fetch_add(1);
            local->value = i;
            *name = "fiber " + std::to_string(i);
            for (int k = 0; k < 50; ++k) {
                this_fiber::yield();  // other fibers, other workers: stealing moves us
                if (local->value != i || *name != "fiber " + std::to_string(i)) wrong.fetch_add(1);
            }
        }));
    }
    for (auto& f : fs) f.join();
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(counted::live.load(), 0);  // destroyed as each fiber ended
}

TEST(FiberLocal, DestroyedBeforeJoinReturnsAndResetMakesANewOne) {
    scheduler sched({.workers = 1});
    fiber_local<counted> local([] { return counted(7); });
    fiber f = sched.spawn([&] {
        EXPECT_EQ(local->value, 7);
        local->value = 8;
        local.reset();
        EXPECT_FALSE(local.has_value());
        EXPECT_EQ(local->value, 7);
        EXPECT_EQ(counted::live.load(), 1);
    });
    f.join();
    EXPECT_EQ(counted::live.load(), 0);
}

TEST(FiberLocal, DestructorMayUseOtherFiberLocalsAndSuspend) {
    scheduler sched({.workers = 2});
    static fiber_local<counted> other;
    static std::atomic<int> seen{0};
    struct uses_other {
        ~uses_other() {
            spindle::this_fiber::sleep_for(std::chrono::milliseconds(1));  // suspends during teardown
            seen.fetch_add(other->value + 1);  // creates `other` during teardown
        }
    };
    fiber_local<uses_other> local;
    sched.spawn([&] { (void)*local; }).join();
    EXPECT_EQ(seen.load(), 1);
    EXPECT_EQ(counted::live.load(), 0);  // the instance made during teardown is gone too
}

TEST(FiberLocal, PlainThreadsHaveTheirOwn) {
    fiber_local<int> local;
    *local = 5;
    std::thread([&] {
        EXPECT_EQ(*local, 0);
        *local = 6;
    }).join();
    EXPECT_EQ(*local, 5);
    scheduler sched({.workers = 1});
    sched.spawn([&] { EXPECT_EQ(*local, 0); }).join();
}

}  // namespace
