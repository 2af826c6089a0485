// A backtrace taken inside a fiber (or a generator's body) ends at the entry
// function of its context: the unwinder must find the end of the fiber's
// stack there rather than walk on into whatever lies above it. x86-64: the
// fresh context's stack starts with a null return address. AArch64: the
// unwinder reads the entry's return address from x30, which the switch left
// holding the switching code's last value; the trampoline every fresh
// context starts in clears it (arch/aarch64.hpp). Without that, the walk went
// past the fiber entry into garbage.
#include <gtest/gtest.h>

#include <execinfo.h>

#include <cstdint>

#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/generator.hpp>
#include <spindle/runtime/scheduler.hpp>

namespace {

struct trace {
    void* frames[64];
    int n = 0;
};

SPINDLE_NOINLINE void take(trace& t) {
    t.n = ::backtrace(t.frames, 64);
    __asm__ volatile("" ::: "memory");  // not a tail call: this frame is in the trace
}

// The last frame's return address lies inside `entry` (a few hundred bytes at
// most; 4 KiB leaves room for sanitizer builds).
bool ends_in(const trace& t, const void* entry) {
    if (t.n <= 0 || t.n >= 64) return false;
    auto last = reinterpret_cast<std::uintptr_t>(t.frames[t.n - 1]);
    auto start = reinterpret_cast<std::uintptr_t>(entry);
    return last > start && last - start < 4096;
}

TEST(Backtrace, InsideAFiberEndsAtTheFiberEntry) {
    spindle::scheduler sched({.workers = 1});
    trace t;
    sched.spawn([&] { take(t); }).join();
    EXPECT_GT(t.n, 1);
    EXPECT_LT(t.n, 64) << "the walk did not end";
    EXPECT_TRUE(ends_in(t, reinterpret_cast<const void*>(&spindle::detail::fiber_entry)))
        << "last of " << t.n << " frames: " << t.frames[t.n > 0 ? t.n - 1 : 0] << ", fiber_entry at "
        << reinterpret_cast<const void*>(&spindle::detail::fiber_entry);
}

// After the fiber has switched away and back (on another fiber's stack in
// between), the walk still ends at its entry.
TEST(Backtrace, AfterASwitchEndsAtTheFiberEntry) {
    spindle::scheduler sched({.workers = 1});
    trace t;
    spindle::fiber a = sched.spawn([&] {
        spindle::this_fiber::yield();
        take(t);
    });
    spindle::fiber b = sched.spawn([] { spindle::this_fiber::yield(); });
    a.join();
    b.join();
    EXPECT_LT(t.n, 64);
    EXPECT_TRUE(ends_in(t, reinterpret_cast<const void*>(&spindle::detail::fiber_entry)));
}

TEST(Backtrace, InsideAGeneratorBodyEndsAtTheGeneratorEntry) {
    trace t;
    spindle::generator<int> g([&](auto& y) {
        take(t);
        y(1);
    });
    ASSERT_TRUE(g.next());
    EXPECT_LT(t.n, 64);
    EXPECT_TRUE(ends_in(t, reinterpret_cast<const void*>(&spindle::detail::generator_entry)));
}

}  // namespace
