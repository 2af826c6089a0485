// tests/memory/stack_test.cpp — stacks: layout, randomization, pooling,
// madvise release, overflow messages, SPINDLE_STACK_SIZE.
//
// Death tests run in the "threadsafe" style (the child re-executes the test
// binary), so each child starts with a fresh process: its own SIGSEGV handler,
// its own once-read SPINDLE_STACK_SIZE.
#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>
#include <spindle/memory/stack.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace {

using spindle::min_stack_size;
using spindle::detail::acquire_stack;
using spindle::detail::release_stack;
using spindle::detail::set_stack_owner;
using spindle::detail::stack_owner;
using spindle::detail::stack_region;

std::size_t page() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// The page that holds `p` (mincore wants page-aligned addresses).
void* page_of(const void* p) {
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) & ~(page() - 1));
}

// Whether the page holding `p` is mapped at all (mincore: ENOMEM when not).
// Under ThreadSanitizer the runtime maps memory from a background thread, so
// an address we just unmapped may already be mapped again by it: there
// "unmapped" cannot be observed reliably and the checks below are skipped.
#if SPINDLE_TSAN
#define SKIP_UNMAP_CHECK_UNDER_TSAN() GTEST_SKIP() << "TSan's runtime may remap a freed address at once"
#else
#define SKIP_UNMAP_CHECK_UNDER_TSAN() (void)0
#endif

bool is_mapped(const void* p) {
    unsigned char v = 0;
    if (::mincore(page_of(p), page(), &v) == 0) return true;
    EXPECT_EQ(errno, ENOMEM);
    return false;
}

// Whether the page holding `p` is in RAM.
bool is_resident(const void* p) {
    unsigned char v = 0;
    const int rc = ::mincore(page_of(p), page(), &v);
    EXPECT_EQ(rc, 0) << std::strerror(errno);
    return rc == 0 && (v & 1) != 0;
}

// A stderr matcher for death tests, from a predicate.
class predicate_matcher : public testing::MatcherInterface<const std::string&> {
public:
    predicate_matcher(std::function<bool(const std::string&)> pred, std::string what)
        : pred_(std::move(pred)), what_(std::move(what)) {}
    bool MatchAndExplain(const std::string& s, testing::MatchResultListener*) const override { return pred_(s); }
    void DescribeTo(std::ostream* os) const override { *os << what_; }

private:
    std::function<bool(const std::string&)> pred_;
    std::string what_;
};
testing::Matcher<const std::string&> stderr_satisfies(std::function<bool(const std::string&)> pred,
                                                      std::string what) {
    return testing::MakeMatcher(new predicate_matcher(std::move(pred), std::move(what)));
}

// Contains every string of `yes` and none of `no`.
testing::Matcher<const std::string&> stderr_has(std::vector<std::string> yes, std::vector<std::string> no) {
    std::string what = "contains {";
    for (const auto& y : yes) what += "\"" + y + "\" ";
    what += "} and none of {";
    for (const auto& n : no) what += "\"" + n + "\" ";
    what += "}";
    return stderr_satisfies(
        [yes, no](const std::string& s) {
            for (const auto& y : yes)
                if (s.find(y) == std::string::npos) return false;
            for (const auto& n : no)
                if (s.find(n) != std::string::npos) return false;
            return true;
        },
        what);
}

// ---------------------------------------------------------------------------
// Running code on a stack (death tests only: nothing switches back).

spindle::arch::context g_main_ctx;
spindle::arch::context g_fiber_ctx;
void (*g_fiber_body)() = nullptr;

void fiber_entry(spindle::arch::raw_context* self, spindle::arch::raw_context*) {
    spindle::arch::context_started(spindle::arch::context_of(self));
    g_fiber_body();
    std::abort();  // the bodies never return
}

void run_on_stack(const stack_region& s, void (*body)()) {
    g_fiber_body = body;
    spindle::arch::make_context(&g_fiber_ctx.regs, s.top, &fiber_entry);
    spindle::arch::annotate_new_context(&g_fiber_ctx, s.top - s.usable, s.usable);
    spindle::arch::switch_to(&g_main_ctx, &g_fiber_ctx);
}

// Unbounded recursion: the volatile frame cannot be optimized away, and the
// use of it after the call rules out a tail call.
volatile int g_depth_limit = INT_MAX;
SPINDLE_NOINLINE int recurse(int depth) {
    volatile char frame[512];
    frame[0] = static_cast<char>(depth);
    if (depth >= g_depth_limit) return frame[0];
    return recurse(depth + 1) + frame[0];
}
void overflow_body() { std::printf("%d\n", recurse(0)); }

// A plain null-pointer write. volatile: the compiler cannot see it is null
// (and turn the store into a trap); no_sanitize: UBSan would report it before
// it faults, and the fault is what these tests are about.
int* volatile g_null = nullptr;
__attribute__((no_sanitize("undefined"))) void null_write_body() { *g_null = 1; }

// ---------------------------------------------------------------------------
// Layout

TEST(Stack, RoundTripLayout) {
    for (std::size_t size : {min_stack_size, min_stack_size + 1, std::size_t{64 * 1024} - 100,
                             spindle::default_stack_size, std::size_t{1024 * 1024}}) {
        SCOPED_TRACE(size);
        stack_region s = acquire_stack(size);
        ASSERT_TRUE(s);
        EXPECT_GE(s.usable, size + 2048);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.top) % 64, 0u);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.map_base) % page(), 0u);
        EXPECT_EQ(s.map_size % page(), 0u);
        // top lies in the random window at the end of the mapping.
        EXPECT_LE(s.top, s.map_base + s.map_size);
        EXPECT_GT(s.top, s.map_base + s.map_size - spindle::detail::stack_start_jitter);
        // The usable range starts right at the end of the one guard page.
        EXPECT_EQ(s.top - s.usable, s.map_base + page());
        // All of it is writable.
        std::memset(s.top - s.usable, 0xab, s.usable);
        EXPECT_EQ(static_cast<unsigned char>(s.top[-1]), 0xab);
        EXPECT_EQ(static_cast<unsigned char>((s.top - s.usable)[0]), 0xab);
        release_stack(s);
        EXPECT_FALSE(s);
    }
}

TEST(Stack, GuardMethodIsKnownAfterFirstStack) {
    stack_region s = acquire_stack(min_stack_size);
    EXPECT_NE(spindle::detail::stack_guard_method(), spindle::detail::guard_method::unknown);
    release_stack(s);
}

TEST(Stack, BelowMinimumThrowsWithMessage) {
    try {
        (void)acquire_stack(100);
        FAIL() << "acquire_stack(100) did not throw";
    } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(), "spindle: stack size 100 is below the minimum of 16384 bytes");
    }
    EXPECT_THROW((void)acquire_stack(min_stack_size - 1), std::invalid_argument);
    stack_region s = acquire_stack(min_stack_size);  // the minimum itself is fine
    EXPECT_TRUE(s);
    release_stack(s);
}

TEST(Stack, ImpossibleSizeThrowsSystemErrorNamingErrno) {
    try {
        (void)acquire_stack(SIZE_MAX / 2);
        FAIL() << "a 2^63-byte stack was mapped";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), ENOMEM);
        const std::string what = e.what();
        EXPECT_NE(what.find("ENOMEM"), std::string::npos) << what;
        EXPECT_NE(what.find("vm.max_map_count"), std::string::npos) << what;
        EXPECT_NE(what.find("smaller"), std::string::npos) << what;
    }
}

TEST(Stack, StartIsRandomized) {
    std::vector<stack_region> held;
    std::set<std::uintptr_t> offsets;
    for (int i = 0; i < 64; ++i) {
        held.push_back(acquire_stack(min_stack_size));
        offsets.insert(reinterpret_cast<std::uintptr_t>(held.back().top) % 4096);
    }
    EXPECT_GE(offsets.size(), 8u);
    for (auto& s : held) release_stack(s);
}

// ---------------------------------------------------------------------------
// Pool

// Pools are per thread; a fresh thread starts with an empty one, whatever the
// tests before left in the main thread's pool.
void on_fresh_thread(const std::function<void()>& fn) { std::thread(fn).join(); }

TEST(Stack, PoolReusesOnSameThread) {
    on_fresh_thread([] {
        stack_region a = acquire_stack(64 * 1024);
        std::byte* const base = a.map_base;
        release_stack(a);
        stack_region other = acquire_stack(256 * 1024);  // another size does not take it
        EXPECT_NE(other.map_base, base);
        stack_region b = acquire_stack(64 * 1024);
        EXPECT_EQ(b.map_base, base);
        EXPECT_GE(b.usable, 64 * 1024 + 2048u);
        release_stack(b);
        release_stack(other);
    });
}

TEST(Stack, PoolKeepsAtMostCapacityAndUnmapsTheOldest) {
    on_fresh_thread([] {
        constexpr std::size_t n = spindle::detail::stack_pool_capacity + 1;
        std::vector<stack_region> held;
        for (std::size_t i = 0; i < n; ++i) held.push_back(acquire_stack(min_stack_size));
        [[maybe_unused]] std::byte* const first = held.front().map_base;
        std::set<std::byte*> pooled;
        for (std::size_t i = 1; i < n; ++i) pooled.insert(held[i].map_base);
        for (auto& s : held) release_stack(s);
#if !SPINDLE_TSAN  // see SKIP_UNMAP_CHECK_UNDER_TSAN
        EXPECT_FALSE(is_mapped(first)) << "the stack pooled first must be evicted and unmapped";
#endif
        std::set<std::byte*> reused;
        for (std::size_t i = 1; i < n; ++i) {
            stack_region s = acquire_stack(min_stack_size);
            reused.insert(s.map_base);
            held[i] = s;
        }
        EXPECT_EQ(reused, pooled);
        for (auto& s : held) release_stack(s);
    });
}

// Worker threads defer: a burst of releases beyond the capacity stays
// pooled (no munmap on the release path) until trim_stack_pool, which
// unmaps the oldest surplus first and never goes below the capacity.
TEST(Stack, DeferringThreadPoolsABurstAndTrimsItLater) {
    on_fresh_thread([] {
        using spindle::detail::stack_pool_capacity;
        using spindle::detail::trim_stack_pool;
        EXPECT_EQ(trim_stack_pool(16), 0u);  // not deferring: nothing to do
        spindle::detail::defer_stack_pool_trim();
        constexpr std::size_t surplus = 40;
        constexpr std::size_t n = stack_pool_capacity + surplus;
        std::vector<stack_region> held;
        for (std::size_t i = 0; i < n; ++i) held.push_back(acquire_stack(min_stack_size));
        std::vector<std::byte*> bases;
        for (auto& s : held) bases.push_back(s.map_base);
        for (auto& s : held) release_stack(s);
        for (std::byte* b : bases) EXPECT_TRUE(is_mapped(b)) << "a deferring thread unmapped on release";
        EXPECT_EQ(trim_stack_pool(16), 16u);
        EXPECT_EQ(trim_stack_pool(1000), surplus - 16);
        EXPECT_EQ(trim_stack_pool(1000), 0u);  // down to the capacity
#if !SPINDLE_TSAN  // see SKIP_UNMAP_CHECK_UNDER_TSAN
        for (std::size_t i = 0; i < surplus; ++i) EXPECT_FALSE(is_mapped(bases[i])) << "oldest first";
#endif
        for (std::size_t i = surplus; i < n; ++i) EXPECT_TRUE(is_mapped(bases[i]));
    });
}

TEST(Stack, ThreadExitUnmapsItsPoolAndCrossThreadRelease) {
    stack_region s = acquire_stack(min_stack_size);  // acquired here...
    std::byte* const base = s.map_base;
    std::thread([&] { release_stack(s); }).join();  // ...pooled there, unmapped at its exit
    EXPECT_FALSE(s);
    SKIP_UNMAP_CHECK_UNDER_TSAN();
    EXPECT_FALSE(is_mapped(base));
}

struct late_releaser {
    stack_region s;
    ~late_releaser() { release_stack(s); }
};

TEST(Stack, ReleaseAfterPoolDestroyedUnmapsDirectly) {
    std::byte* base = nullptr;
    std::thread([&] {
        // Constructed before the pool, so destroyed after it.
        thread_local late_releaser holder;
        holder.s = acquire_stack(min_stack_size);
        base = holder.s.map_base;
    }).join();
    ASSERT_NE(base, nullptr);
    SKIP_UNMAP_CHECK_UNDER_TSAN();
    EXPECT_FALSE(is_mapped(base));
}

TEST(Stack, HundredThousandLiveSmallStacks) {
#if SPINDLE_TSAN
    // TSan's mmap interceptor writes shadow for every byte mapped: 100 000
    // stacks take about 30 s there. The VMA count does not depend on TSan and
    // is checked at full size by the other builds; here the registry and the
    // pool still see thousands of stacks come and go.
    constexpr std::size_t count = 10'000;
    std::printf("ThreadSanitizer build: %zu stacks instead of 100000\n", count);
#else
    constexpr std::size_t count = 100'000;
#endif
    if (spindle::detail::stack_guard_method() == spindle::detail::guard_method::mprotect) {
        long max_map_count = 0;
        std::ifstream("/proc/sys/vm/max_map_count") >> max_map_count;
        if (max_map_count < static_cast<long>(2 * count + 10'000))
            GTEST_SKIP() << "guard regions are unavailable here (Linux < 6.13, or an emulator such as qemu-user "
                            "that ignores MADV_GUARD_INSTALL), so each stack needs 2 VMAs, and vm.max_map_count is "
                         << max_map_count << " < " << 2 * count + 10'000;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<stack_region> held;
    held.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        held.push_back(acquire_stack(min_stack_size));
        held.back().top[-1] = std::byte{1};  // touch the top page
    }
    std::vector<std::byte*> bases;
    bases.reserve(count);
    for (const auto& s : held) bases.push_back(s.map_base);
    std::sort(bases.begin(), bases.end());
    EXPECT_EQ(std::adjacent_find(bases.begin(), bases.end()), bases.end()) << "two live stacks share a mapping";
    for (auto& s : held) release_stack(s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%zu stacks: %.3f s (guard method %d: 1 = MADV_GUARD_INSTALL, 2 = mprotect)\n", count, seconds,
                static_cast<int>(spindle::detail::stack_guard_method()));
    // No time limit here: tests must not fail because the machine is slow or
    // busy (the cost of many live fibers is measured by bench/switch).
}

TEST(Stack, ReleaseDropsDeepPagesOfADeepStack) {
    on_fresh_thread([] {
        constexpr std::size_t size = 256 * 1024;
        stack_region s = acquire_stack(size);
        std::byte* const base = s.map_base;
        std::byte* const end = s.map_base + s.map_size;
        std::memset(s.top - s.usable, 1, s.usable);  // went all the way down
        std::byte* const guard_end = s.top - s.usable;
        ASSERT_TRUE(is_resident(guard_end));
        release_stack(s);
        stack_region again = acquire_stack(size);
        ASSERT_EQ(again.map_base, base);
        // Everything more than the hot window (plus the random gap) below the end
        // of the mapping is cold, whatever `top` was.
        std::byte* const cold_end = end - spindle::detail::stack_hot_window - page();
        for (std::byte* p = guard_end; p < cold_end; p += page())
            EXPECT_FALSE(is_resident(p)) << "page at offset " << (p - base) << " is still resident";
        // The hot part stays.
        EXPECT_TRUE(is_resident(end - page()));
        EXPECT_TRUE(is_resident(end - spindle::detail::stack_hot_window + page()));
        release_stack(again);
    });
}

TEST(Stack, DeepUseIsDroppedWithinTheResidencyCheckPeriod) {
    // The residency check runs on the first release of a stack and then every
    // stack_residency_check_period-th: deep pages of a later deep use survive
    // at most that many releases.
    on_fresh_thread([] {
        constexpr std::size_t size = 256 * 1024;
        constexpr unsigned period = spindle::detail::stack_residency_check_period;
        stack_region s = acquire_stack(size);
        std::byte* const base = s.map_base;
        release_stack(s);  // release 1: checked, shallow
        s = acquire_stack(size);
        ASSERT_EQ(s.map_base, base);
        std::byte* const guard_end = s.map_base + page();
        std::memset(guard_end, 1, s.usable);
        release_stack(s);  // release 2: not checked
        s = acquire_stack(size);
        EXPECT_TRUE(is_resident(guard_end)) << "release 2 should not have paid for a check";
        release_stack(s);  // release 3
        for (unsigned k = 4; k <= period + 1; ++k) {
            s = acquire_stack(size);
            release_stack(s);  // releases 4 .. period + 1 (the last one is checked)
        }
        s = acquire_stack(size);
        ASSERT_EQ(s.map_base, base);
        EXPECT_FALSE(is_resident(guard_end));
        release_stack(s);
    });
}

TEST(Stack, ReleaseKeepsPagesOfAShallowStack) {
    on_fresh_thread([] {
        constexpr std::size_t size = 256 * 1024;
        stack_region s = acquire_stack(size);
        std::byte* const base = s.map_base;
        std::memset(s.top - 8 * 1024, 1, 8 * 1024);  // shallow use
        std::byte* const touched = s.top - 4 * 1024;
        release_stack(s);
        stack_region again = acquire_stack(size);
        ASSERT_EQ(again.map_base, base);
        EXPECT_TRUE(is_resident(touched));
        release_stack(again);
    });
}

// ---------------------------------------------------------------------------
// Overflow reporting

TEST(StackDeathTest, FiberOverflowNamesTheFiber) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            stack_region s = acquire_stack(min_stack_size);
            set_stack_owner(s, stack_owner::fiber, 4242);
            run_on_stack(s, &overflow_body);
        },
        "spindle: fiber 4242 overflowed its [0-9]+-byte stack; raise it with "
        "spindle::fiber_options::stack_size or spindle::scheduler::options::stack_size");
}

TEST(StackDeathTest, GeneratorOverflowNamesTheGenerator) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            stack_region s = acquire_stack(min_stack_size);
            set_stack_owner(s, stack_owner::generator, 77);
            run_on_stack(s, &overflow_body);
        },
        "spindle: generator 77 overflowed its [0-9]+-byte stack; raise it with the stack_size argument "
        "of spindle::generator");
}

TEST(StackDeathTest, OverflowMessageIsExact) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    // The message gives the size that was asked for, not the usable size
    // (larger, and random: page rounding and the randomized start).
    auto exact = [](const std::string& err) {
        const std::string expected = "spindle: fiber 1 overflowed its 16384-byte stack; raise it with "
                                     "spindle::fiber_options::stack_size or spindle::scheduler::options::stack_size "
                                     "(SPINDLE_STACK_SIZE=<bytes> for the default)\n";
        return err.find(expected) != std::string::npos;
    };
    EXPECT_DEATH(
        {
            stack_region s = acquire_stack(min_stack_size);
            set_stack_owner(s, stack_owner::fiber, 1);
            run_on_stack(s, &overflow_body);
        },
        stderr_satisfies(exact, "the exact overflow message, with the requested size"));
}

TEST(StackDeathTest, OwnerlessOverflowNamesTheAddress) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            stack_region s = acquire_stack(min_stack_size);
            run_on_stack(s, &overflow_body);
        },
        "spindle: stack at 0x[0-9a-f]+ overflowed its [0-9]+-byte stack");
}

#if defined(__x86_64__)
// A frame larger than the guard jumps over it: the fault is below the guard,
// the stack pointer tells us whose stack it was.
TEST(StackDeathTest, BigFrameThatJumpsTheGuardIsCaughtByStackPointer) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            // Find a stack with 64 KiB of free address space below it and
            // make that PROT_NONE, so the jump lands on a fault.
            for (int attempt = 0; attempt < 64; ++attempt) {
                stack_region s = acquire_stack(min_stack_size);
                set_stack_owner(s, stack_owner::fiber, 99);
                void* below = ::mmap(s.map_base - 65536, 65536, PROT_NONE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
                if (below != s.map_base - 65536) continue;
                const auto sp = reinterpret_cast<std::uintptr_t>(s.map_base) - 1024;
                // sp 1 KiB below the guard, then touch the new frame.
                __asm__ volatile("movq %0, %%rsp\n\tmovb $0, 8(%%rsp)\n\t" : : "r"(sp) : "memory");
            }
            std::fprintf(stderr, "no room below any stack\n");
        },
        "spindle: fiber 99 overflowed its [0-9]+-byte stack");
}
#endif

// What a sanitizer that owns SIGSEGV prints for a fault we pass on to it.
#if SPINDLE_ASAN
constexpr const char* sanitizer_segv_report = "AddressSanitizer: SEGV";
#elif SPINDLE_TSAN
constexpr const char* sanitizer_segv_report = "ThreadSanitizer: SEGV";
#endif

TEST(StackDeathTest, NullPointerOnThreadStackIsNotAnOverflow) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const std::vector<std::string> ours = {"overflowed"};
#if SPINDLE_ASAN || SPINDLE_TSAN
    // The sanitizer had SIGSEGV before us: we chain to it and it reports.
    EXPECT_DEATH(
        {
            spindle::detail::install_overflow_handler();
            null_write_body();
        },
        stderr_has({sanitizer_segv_report}, ours));
#else
    EXPECT_EXIT(
        {
            spindle::detail::install_overflow_handler();
            null_write_body();
        },
        testing::KilledBySignal(SIGSEGV), stderr_has({}, ours));
#endif
}

TEST(StackDeathTest, NullPointerOnFiberStackIsNotAnOverflow) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const std::vector<std::string> ours = {"overflowed"};
    auto body = [] {
        // Several stacks, likely adjacent, so the fiber's stack pointer is
        // near another stack's guard: that must not count.
        stack_region s{};
        for (int i = 0; i < 8; ++i) {
            s = acquire_stack(min_stack_size);
            set_stack_owner(s, stack_owner::fiber, static_cast<std::uint64_t>(i));
        }
        run_on_stack(s, &null_write_body);
    };
#if SPINDLE_ASAN || SPINDLE_TSAN
    EXPECT_DEATH(body(), stderr_has({sanitizer_segv_report}, ours));
#else
    EXPECT_EXIT(body(), testing::KilledBySignal(SIGSEGV), stderr_has({}, ours));
#endif
}

void user_segv_handler(int, siginfo_t*, void*) {
    static const char msg[] = "user handler ran\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(7);
}

TEST(StackDeathTest, ChainsToThePreviousHandler) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            struct sigaction sa{};
            sa.sa_sigaction = &user_segv_handler;
            sa.sa_flags = SA_SIGINFO;
            sigemptyset(&sa.sa_mask);
            sigaction(SIGSEGV, &sa, nullptr);
            spindle::detail::install_overflow_handler();
            struct sigaction now{};
            sigaction(SIGSEGV, nullptr, &now);
            if (now.sa_sigaction == &user_segv_handler) std::_Exit(3);  // ours is not installed
            null_write_body();
        },
        testing::ExitedWithCode(7), "user handler ran");
}

// A previous handler is called as the kernel would have called it: with its
// sa_mask added to the blocked signals, SIGSEGV blocked unless SA_NODEFER,
// and SIGSEGV reset to the default first with SA_RESETHAND.
void flag_checking_segv_handler(int, siginfo_t*, void*) {
    sigset_t now;
    ::pthread_sigmask(SIG_SETMASK, nullptr, &now);
    struct sigaction disp{};
    ::sigaction(SIGSEGV, nullptr, &disp);
    int code = 0;
    if (sigismember(&now, SIGUSR1) != 1) code |= 1;  // its sa_mask
    if (sigismember(&now, SIGSEGV) != 0) code |= 2;  // SA_NODEFER: SIGSEGV not blocked
    if (disp.sa_handler != SIG_DFL) code |= 4;        // SA_RESETHAND
    ::_exit(code == 0 ? 9 : 20 + code);
}

TEST(StackDeathTest, ChainingHonoursThePreviousHandlersFlags) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            struct sigaction sa{};
            sa.sa_sigaction = &flag_checking_segv_handler;
            sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESETHAND;
            sigemptyset(&sa.sa_mask);
            sigaddset(&sa.sa_mask, SIGUSR1);
            sigaction(SIGSEGV, &sa, nullptr);
            spindle::detail::install_overflow_handler();
            null_write_body();
        },
        testing::ExitedWithCode(9), "");
}

// A thread whose own alternate signal stack is too small for the handler
// gets spindle's instead: else its overflow report could itself overflow,
// and the process die without a word.
TEST(StackDeathTest, TooSmallThreadAltStackIsReplaced) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            std::thread([] {
                // The smallest stack the kernel accepts, right above a
                // PROT_NONE page: a handler that needs more faults at once.
                const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
                std::size_t size = ::getauxval(AT_MINSIGSTKSZ);
                if (size < 2048) size = 2048;
                const std::size_t map = page + ((size + page - 1) / page) * page;
                auto* base = static_cast<char*>(
                    ::mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
                if (base == MAP_FAILED || ::mprotect(base, page, PROT_NONE) != 0) std::_Exit(2);
                stack_t ss{};
                ss.ss_size = size;
                ss.ss_sp = base + map - size;
                if (::sigaltstack(&ss, nullptr) != 0) std::_Exit(3);
                stack_region s = acquire_stack(min_stack_size);
                set_stack_owner(s, stack_owner::fiber, 77);
                stack_t now{};
                ::sigaltstack(nullptr, &now);
                if (now.ss_size < spindle::detail::altstack_min_size) std::_Exit(4);  // kept the tiny one
                run_on_stack(s, &overflow_body);
            }).join();
        },
        "spindle: fiber 77 overflowed");
}

TEST(Stack, InstallOverflowHandlerGivesThreadsAnAltStack) {
    std::thread([] {
        stack_t before{};
        ASSERT_EQ(::sigaltstack(nullptr, &before), 0);
        spindle::detail::install_overflow_handler();
        spindle::detail::install_overflow_handler();  // idempotent
        stack_t after{};
        ASSERT_EQ(::sigaltstack(nullptr, &after), 0);
        EXPECT_EQ(after.ss_flags & SS_DISABLE, 0);
        if ((before.ss_flags & SS_DISABLE) == 0 && before.ss_size >= spindle::detail::altstack_min_size) {
            EXPECT_EQ(after.ss_sp, before.ss_sp);  // kept the thread's own (ASan gives threads one)
        } else {
            EXPECT_GE(after.ss_size, spindle::detail::altstack_min_size);  // ours (a smaller one is replaced)
        }
    }).join();
}

// ---------------------------------------------------------------------------
// SPINDLE_STACK_SIZE

TEST(StackSize, Parse) {
    using spindle::detail::parse_stack_size;
    EXPECT_EQ(parse_stack_size("65536"), 65536u);
    EXPECT_EQ(parse_stack_size("64K"), 65536u);
    EXPECT_EQ(parse_stack_size("64k"), 65536u);
    EXPECT_EQ(parse_stack_size("1M"), 1024u * 1024u);
    EXPECT_EQ(parse_stack_size("16384"), 16384u);
    EXPECT_EQ(parse_stack_size("16K"), 16384u);
    EXPECT_EQ(parse_stack_size("abc"), std::nullopt);
    EXPECT_EQ(parse_stack_size("100"), std::nullopt);  // below the minimum
    EXPECT_EQ(parse_stack_size("16383"), std::nullopt);
    EXPECT_EQ(parse_stack_size("15K"), std::nullopt);
    EXPECT_EQ(parse_stack_size(""), std::nullopt);
    EXPECT_EQ(parse_stack_size(nullptr), std::nullopt);
    EXPECT_EQ(parse_stack_size("64KB"), std::nullopt);
    EXPECT_EQ(parse_stack_size("64 K"), std::nullopt);
    EXPECT_EQ(parse_stack_size(" 65536"), std::nullopt);
    EXPECT_EQ(parse_stack_size("-65536"), std::nullopt);
    EXPECT_EQ(parse_stack_size("+65536"), std::nullopt);
    EXPECT_EQ(parse_stack_size("1G"), std::nullopt);
    EXPECT_EQ(parse_stack_size("99999999999999999999999"), std::nullopt);  // overflows size_t
    EXPECT_EQ(parse_stack_size("17592186044416M"), std::nullopt);          // 2^44 MiB = 2^64
}

TEST(StackSizeDeathTest, BadEnvironmentValueExitsWithCode2) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            ::setenv("SPINDLE_STACK_SIZE", "12abc", 1);
            (void)spindle::detail::default_stack_size_from_env();
            std::_Exit(0);
        },
        testing::ExitedWithCode(2),
        "spindle: SPINDLE_STACK_SIZE='12abc' is not a valid stack size \\(bytes, or with K/M suffix; at "
        "least 16384\\)");
    EXPECT_EXIT(
        {
            ::setenv("SPINDLE_STACK_SIZE", "100", 1);
            (void)spindle::detail::default_stack_size_from_env();
            std::_Exit(0);
        },
        testing::ExitedWithCode(2), "spindle: SPINDLE_STACK_SIZE='100' is not a valid stack size");
}

// A malformed value stops the program at its first stack, even when that
// stack's size is given and the default is never read.
TEST(StackSizeDeathTest, BadEnvironmentValueStopsTheFirstStackOfAnySize) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            ::setenv("SPINDLE_STACK_SIZE", "12x", 1);
            stack_region s = acquire_stack(64 * 1024);
            release_stack(s);
            std::_Exit(0);
        },
        testing::ExitedWithCode(2), "spindle: SPINDLE_STACK_SIZE='12x' is not a valid stack size");
}

TEST(StackSizeDeathTest, GoodEnvironmentValueIsUsed) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            ::setenv("SPINDLE_STACK_SIZE", "256K", 1);
            const bool ok = spindle::detail::default_stack_size_from_env() == 256 * 1024;
            ::setenv("SPINDLE_STACK_SIZE", "1M", 1);  // read once: no effect now
            std::_Exit(ok && spindle::detail::default_stack_size_from_env() == 256 * 1024 ? 0 : 1);
        },
        testing::ExitedWithCode(0), "");
    EXPECT_EXIT(
        {
            ::unsetenv("SPINDLE_STACK_SIZE");
            std::_Exit(spindle::detail::default_stack_size_from_env() == spindle::default_stack_size ? 0 : 1);
        },
        testing::ExitedWithCode(0), "");
}

}  // namespace
