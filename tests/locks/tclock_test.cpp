// TCLocks (tclock, tclock_blocking, tclock_shared): mutual exclusion under
// oversubscription, delegation (a queued section runs on the combiner's
// thread), nesting and out-of-order release, errno in both directions, a
// signal to a waiter whose section is delegated, tclock_may_block and a
// condition-variable wait inside a delegated section, readers in parallel,
// misuse.
//
// The delegation tests build their queue deterministically: the test thread
// holds the lock, starts threads one at a time and waits until each has
// queued (the queue's tail changes), then releases. With requests B, C, D
// queued in that order, B becomes the head and combiner and runs C's section
// on its thread (C has a successor), and D becomes the next head.
#include <gtest/gtest.h>

// These tests take and release locks across lambdas and out of order on
// purpose: Clang's static lock analysis cannot follow that, so it is off for
// this file (it checks the library itself).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <atomic>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <spindle/arch/context.hpp>
#include <spindle/locks/detail/park_gate.hpp>
#include <spindle/locks/tclock.hpp>
#include <spindle/locks/tclock_shared.hpp>
#include <spindle/memory/detail/guarded_mapping.hpp>
#include <spindle/sync/counting_semaphore.hpp>

namespace {

using spindle::tclock;
using spindle::tclock_blocking;
using spindle::tclock_shared;

#if SPINDLE_TSAN || SPINDLE_ASAN
constexpr int stress_iters = 3000;
#else
constexpr int stress_iters = 10000;
#endif
constexpr int stress_threads = 8;  // > the 2 CPUs of a small machine: the OS must interleave

long tid() { return ::syscall(SYS_gettid); }

// Whether kernel thread `t` of this process is in a futex system call on an
// address in [lo, hi) (/proc/self/task/<t>/syscall: "number arg1 ...").
bool in_futex_on(long t, std::uintptr_t lo, std::uintptr_t hi) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", t);
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) return false;
    long nr = -1;
    unsigned long a0 = 0;
    const int n = std::fscanf(f, "%ld %lx", &nr, &a0);
    std::fclose(f);
    return n == 2 && nr == SYS_futex && a0 >= lo && a0 < hi;
}

// Whether /proc shows what system call a thread is in, in this ABI's numbers
// (not everywhere: some sandboxes and security modules hide it, and under an
// emulator such as qemu-user it shows the host's calls). A helper thread
// sleeps in a futex wait on a word of ours; we look for exactly that for up
// to two seconds. The tests that wait on in_futex_on() skip without it
// rather than wait forever.
bool syscalls_visible() {
    static const bool visible = [] {
        std::atomic<std::uint32_t> word{0};
        std::atomic<long> helper{0};
        std::thread t([&] {
            helper.store(tid());
            while (word.load() == 0)
                ::syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
        });
        while (helper.load() == 0) std::this_thread::yield();
        const auto lo = reinterpret_cast<std::uintptr_t>(&word);
        bool seen = false;
        for (int i = 0; i < 2000 && !seen; ++i) {
            seen = in_futex_on(helper.load(), lo, lo + sizeof word);
            if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        word.store(1);
        ::syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
        t.join();
        return seen;
    }();
    return visible;
}

// pthread_self() is declared `const`: code that calls it before lock() and
// inside the section may get the first answer twice. Out of line, opaque.
[[gnu::noinline]] pthread_t running_thread() {
    pthread_t t = ::pthread_self();
    __asm__ volatile("" : "+r"(t));
    return t;
}

// A thread_local value, read through an address computed now (not one the
// compiler kept from before lock()): the running thread pointer's.
thread_local int tl_mark = 0;
[[gnu::noinline]] int read_mark() {
    int* p = &tl_mark;
    __asm__ volatile("" : "+r"(p));
    return *p;
}

template <class L>
const void* tail_of(const L& m) {
    return spindle::detail::tc_tail(reinterpret_cast<const spindle::detail::tc_word*>(&m));
}

// Holds `m`, starts fn(0..n-1) one thread at a time, each after the previous
// one queued on `m`, then releases `m` and joins. fn(i) must begin with a
// contended m.lock().
template <class L>
void queued(L& m, int n, const std::function<void(int)>& fn, const std::function<void()>& before_release = {}) {
    m.lock();
    std::vector<std::thread> ts;
    const void* last = tail_of(m);
    for (int i = 0; i < n; ++i) {
        ts.emplace_back([&fn, i] { fn(i); });
        while (tail_of(m) == last) std::this_thread::yield();
        last = tail_of(m);
    }
    if (before_release) before_release();
    m.unlock();
    for (auto& t : ts) t.join();
}

// A counter spread over 8 cache lines, written non-atomically.
struct alignas(64) shared_lines {
    struct alignas(64) line {
        std::uint64_t v = 0;
    };
    line l[8];
    void bump() {
        for (auto& x : l) ++x.v;
    }
    bool consistent(std::uint64_t expect) const {
        for (auto& x : l)
            if (x.v != expect) return false;
        return true;
    }
};

template <class L>
class TClockTyped : public ::testing::Test {};
using lock_types = ::testing::Types<tclock, tclock_blocking, tclock_shared>;
TYPED_TEST_SUITE(TClockTyped, lock_types);

TEST(TClockLayout, SixteenBytesZeroIsUnlockedConstexpr) {
    static_assert(sizeof(tclock) == 16 && sizeof(tclock_blocking) == 16 && sizeof(tclock_shared) == 16);
    static_assert(std::is_trivially_destructible_v<tclock>);
    static constinit tclock g;
    g.lock();
    g.unlock();
    // All-zero bytes are an unlocked lock (the preload library relies on it).
    alignas(16) unsigned char bytes[16] = {};
    auto* m = new (bytes) tclock;  // the constructor writes zeros over zeros
    EXPECT_TRUE(m->try_lock());
    EXPECT_FALSE(m->try_lock());
    m->unlock();
}

// A combiner runs at most tclock_batch_limit sections, then hands the queue
// head on. queued() lines up limit + 8 threads behind the held lock, in
// order: thread 0 becomes the head and combines; without the limit it would
// run every queued section but the tail's. Deterministic: the queue order is
// fixed before the release, and each section records the kernel thread it
// ran on.
TYPED_TEST(TClockTyped, CombinerStopsAtTheBatchLimit) {
    TypeParam m;
    constexpr int n = static_cast<int>(spindle::tclock_batch_limit) + 8;
    std::vector<long> own(n), ran_on(n);
    int sections = 0;  // written under the lock
    queued(m, n, [&](int i) {
        own[i] = tid();
        m.lock();
        ran_on[i] = tid();
        ++sections;
        m.unlock();
    });
    EXPECT_EQ(sections, n);
    int by_first = 0;  // sections of other threads that thread 0 ran
    for (int i = 1; i < n; ++i)
        if (ran_on[i] == own[0]) ++by_first;
    EXPECT_GE(by_first, 1) << "thread 0 combined nothing";
    EXPECT_LE(by_first, static_cast<int>(spindle::tclock_batch_limit));
    int after_limit_elsewhere = 0;
    for (int i = static_cast<int>(spindle::tclock_batch_limit) + 1; i < n; ++i)
        if (ran_on[i] != own[0]) ++after_limit_elsewhere;
    EXPECT_GE(after_limit_elsewhere, 1) << "the first batch did not stop at the limit";
    std::printf("    thread 0 ran %d of the %d queued sections behind it\n", by_first, n - 1);
}

TYPED_TEST(TClockTyped, MutualExclusionOversubscribed) {
    TypeParam m;
    shared_lines data;
    std::atomic<int> ready{0};
    std::atomic<std::uint64_t> delegated{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < stress_threads; ++t)
        ts.emplace_back([&] {
            const long me = tid();
            std::uint64_t mine = 0;
            ready.fetch_add(1);
            while (ready.load() < stress_threads) std::this_thread::yield();
            for (int i = 0; i < stress_iters; ++i) {
                m.lock();
                data.bump();
                // Now and then the holder gives its CPU away inside the
                // section: everybody else queues behind it, and the next
                // head combines a long batch.
                if (i % 16 == 0) std::this_thread::yield();
                // The kernel thread is the combiner's when the section was
                // delegated (pthread_self() may be ours: adoption).
                if (tid() != me) ++mine;
                m.unlock();
                if (i % 64 == 0) std::this_thread::yield();
            }
            delegated.fetch_add(mine);
        });
    for (auto& t : ts) t.join();
    EXPECT_TRUE(data.consistent(std::uint64_t{stress_threads} * stress_iters));
    // Scheduling decides how many sections were delegated; reported, not asserted.
    ::testing::Test::RecordProperty("delegated_sections", static_cast<int>(delegated.load()));
    std::printf("    %llu of %d sections delegated\n", static_cast<unsigned long long>(delegated.load()),
                stress_threads * stress_iters);
}

// The fast path lets a running thread overtake the queue, but a queued
// waiter must still get in. Three threads relock the lock back to back and
// give their CPU away while they hold it (so the queue head, on an
// oversubscribed machine, rarely runs at the instant the gate is free), while
// the main thread needs the lock a few times. Without a bound on overtaking
// the head could wait for seconds (it did: 10 s on 2 CPUs); the head that has
// waited 1 ms is now handed the gate. The test would hang, not fail, if a
// waiter starved; there is no time limit in it.
TYPED_TEST(TClockTyped, BargingDoesNotStarveAQueuedWaiter) {
    TypeParam m;
    std::atomic<bool> stop{false};
    std::atomic<long> relocks{0};
    long counter = 0;  // written under the lock
    std::vector<std::thread> hogs;
    for (int h = 0; h < 3; ++h)
        hogs.emplace_back([&] {
            while (!stop.load(std::memory_order_relaxed)) {
                m.lock();
                ++counter;
                std::this_thread::yield();
                m.unlock();
                relocks.fetch_add(1, std::memory_order_relaxed);
            }
        });
    while (relocks.load(std::memory_order_relaxed) < 1000) std::this_thread::yield();
    for (int i = 0; i < 20; ++i) {
        m.lock();
        ++counter;
        m.unlock();
    }
    stop.store(true);
    for (auto& h : hogs) h.join();
    EXPECT_EQ(counter, relocks.load() + 20);
}

// The handoff itself, step by step (the delay set to 0, so the head asks at
// its first chance): the main thread holds the lock; a waiter becomes the
// queue head and asks for the gate (`handoff` shows in the state; the
// sleeping head of tclock_blocking asks after one spurious FUTEX_WAKE). The
// next release must pass the gate to it, so the main thread's immediate
// relock cannot overtake it: when that relock returns, the waiter has run.
template <class L>
class TClockHandoff : public ::testing::Test {};
using exclusive_types = ::testing::Types<tclock, tclock_blocking>;
TYPED_TEST_SUITE(TClockHandoff, exclusive_types);

TYPED_TEST(TClockHandoff, ReleaseHandsTheGateToAHeadThatAsked) {
    namespace d = spindle::detail;
    struct restore {
        std::int64_t old = d::park_gate_handoff_after_ns.load();
        ~restore() { d::park_gate_handoff_after_ns.store(old); }
    } r;
    d::park_gate_handoff_after_ns.store(0);
    TypeParam m;
    auto& state = reinterpret_cast<d::tc_word*>(&m)->state;
    const std::uint64_t before = d::tc_read_counters().handoffs;
    std::vector<int> order;  // written under the lock
    m.lock();
    std::thread waiter([&] {
        m.lock();
        order.push_back(1);
        m.unlock();
    });
    for (;;) {
        const std::uint32_t s = state.load();
        if (s & d::tc_handoff) break;
        // A sleeping head asks only when it wakes and finds the gate held.
        if (s & d::tc_sleeper) ::syscall(SYS_futex, &state, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
        std::this_thread::yield();
    }
    m.unlock();  // passes the gate to the waiter
    m.lock();    // queues behind it
    order.push_back(0);
    m.unlock();
    waiter.join();
    EXPECT_EQ(order, (std::vector<int>{1, 0}));
    // At least ours: the main thread, queued behind the waiter, is the next
    // head and may ask for (and get) one of its own, the delay being 0.
    EXPECT_GE(d::tc_read_counters().handoffs, before + 1);
}

TYPED_TEST(TClockTyped, TryLockMixedWithLock) {
    TypeParam m;
    std::uint64_t n = 0;
    std::atomic<std::uint64_t> expect{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
            for (int i = 0; i < stress_iters / 2; ++i) {
                if (t % 2 == 0) {
                    m.lock();
                    ++n;
                    m.unlock();
                    expect.fetch_add(1, std::memory_order_relaxed);
                } else if (m.try_lock()) {
                    ++n;
                    m.unlock();
                    expect.fetch_add(1, std::memory_order_relaxed);
                }
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(n, expect.load());
}

TYPED_TEST(TClockTyped, QueuedSectionRunsOnCombinersThread) {
    TypeParam m;
    long own[4] = {}, inside[4] = {}, after[4] = {};
    int order[4] = {}, seq = 0;  // guarded by m
    queued(m, 4, [&](int i) {
        own[i] = tid();
        m.lock();
        inside[i] = tid();
        order[i] = seq++;
        m.unlock();
        after[i] = tid();
    });
    // B=0 combines C=1 and D=2 (each has a successor), then runs its own
    // section; E=3 is the next head.
    EXPECT_EQ(inside[0], own[0]);
    EXPECT_EQ(inside[1], own[0]);
    EXPECT_EQ(inside[2], own[0]);
    EXPECT_EQ(inside[3], own[3]);
    EXPECT_EQ(order[1], 0);
    EXPECT_EQ(order[2], 1);
    EXPECT_EQ(order[0], 2);
    EXPECT_EQ(order[3], 3);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], own[i]) << i;
}

TYPED_TEST(TClockTyped, ExceptionInsideDelegatedSection) {
    TypeParam m;
    int caught[3] = {};
    long inside[3] = {}, own[3] = {};
    queued(m, 3, [&](int i) {
        own[i] = tid();
        m.lock();
        inside[i] = tid();
        try {
            throw std::runtime_error("x");
        } catch (const std::exception& e) {
            caught[i] = std::uncaught_exceptions() == 0 && e.what()[0] == 'x';
        }
        m.unlock();
    });
    EXPECT_EQ(inside[1], own[0]);  // delegated
    for (int i = 0; i < 3; ++i) EXPECT_EQ(caught[i], 1) << i;
}

TYPED_TEST(TClockTyped, CombinerInsideItsOwnHandler) {
    // Thread 0 takes the lock from inside a catch handler, on a fresh thread,
    // so its first context switch (into the sections it combines) happens
    // with an exception caught and its exception state not looked up yet
    // (arch::detail::eh_lookup_pending). The delegated sections must see no
    // exception, and thread 0 its own one afterwards.
    TypeParam m;
    int clean[3] = {};
    bool own_after = false;
    long inside[3] = {}, own[3] = {};
    queued(m, 3, [&](int i) {
        own[i] = tid();
        if (i != 0) {
            m.lock();
            inside[i] = tid();
            clean[i] = std::current_exception() == nullptr && std::uncaught_exceptions() == 0;
            m.unlock();
            return;
        }
        try {
            throw std::logic_error("combiner");
        } catch (...) {
            m.lock();
            inside[0] = tid();
            clean[0] = 1;
            m.unlock();
            try {
                throw;
            } catch (const std::logic_error& e) {
                own_after = std::string(e.what()) == "combiner";
            }
        }
    });
    EXPECT_EQ(inside[1], own[0]);  // delegated
    for (int i = 0; i < 3; ++i) EXPECT_EQ(clean[i], 1) << i;
    EXPECT_TRUE(own_after);
    EXPECT_EQ(std::current_exception(), nullptr);
}

// --- errno ------------------------------------------------------------------

// errno is carried by every TCLock (tclock_shared's writers included), with
// the thread pointer adopted or not (the suite also runs with
// SPINDLE_TCLOCK_ADOPT=0): the section starts with the errno its own thread
// had at lock(), its own thread's errno after unlock() is what the section
// ended with, and a combiner's errno is its own again when its own section
// runs. Each test builds its queue with queued(), so thread 1's section is
// delegated to thread 0 every time (checked first).
template <class L>
class TClockErrno : public ::testing::Test {};
TYPED_TEST_SUITE(TClockErrno, lock_types);

// The errno of the thread pointer that runs now, through an address computed
// now (not one the compiler kept from before lock(): __errno_location is
// `const`).
[[gnu::noinline]] int running_errno() {
    int* p = &errno;
    __asm__ volatile("" : "+r"(p));
    return *p;
}
// errno's address, computed now and kept: written through inside a section,
// it is the errno of the thread that called lock(), whoever runs the section.
[[gnu::noinline]] int* errno_address() {
    int* p = &errno;
    __asm__ volatile("" : "+r"(p));
    return p;
}

// errno is read before lock() and written inside the section in the same
// function: at -O2/-O3 the compiler may compute its address once (it is
// `const`), so the write may go straight to the waiter's errno.
template <class L>
[[gnu::noinline]] int cs_sets_errno_direct(L& m, int v, long* inside) {
    const int before = errno;
    m.lock();
    *inside = tid();
    errno = v;
    m.unlock();
    return before;
}
// The same through an address certainly computed before lock().
template <class L>
[[gnu::noinline]] void cs_sets_errno_cached(L& m, int v, long* inside) {
    int* const e = errno_address();
    m.lock();
    *inside = tid();
    *e = v;
    m.unlock();
}
// A libc call inside the section sets the running (combiner's) errno.
template <class L>
[[gnu::noinline]] void cs_sets_errno_libc(L& m, long* inside) {
    m.lock();
    *inside = tid();
    (void)::close(-1);  // EBADF
    m.unlock();
}
// The section reads errno: it must see the value its own thread had. With
// `fail`, it then makes a libc call fail (EBADF in the running errno).
template <class L>
[[gnu::noinline]] int cs_reads_errno(L& m, long* inside, bool fail = false) {
    m.lock();
    *inside = tid();
    const int seen = errno;
    if (fail) (void)::close(-1);
    m.unlock();
    return seen;
}

TYPED_TEST(TClockErrno, DirectWriteInDelegatedSectionReachesWaiter) {
    for (int round = 0; round < 20; ++round) {
        TypeParam m;
        long own[3] = {}, inside[3] = {};
        int after[3] = {};
        queued(m, 3, [&](int i) {
            own[i] = tid();
            errno = 0;
            cs_sets_errno_direct(m, 1000 + i, &inside[i]);
            after[i] = errno;
        });
        ASSERT_EQ(inside[1], own[0]);  // C's section was delegated to B
        for (int i = 0; i < 3; ++i) EXPECT_EQ(after[i], 1000 + i) << i;
    }
}

TYPED_TEST(TClockErrno, CachedAddressWriteInDelegatedSectionReachesWaiter) {
    TypeParam m;
    long own[3] = {}, inside[3] = {};
    int after[3] = {};
    queued(m, 3, [&](int i) {
        own[i] = tid();
        errno = 0;
        cs_sets_errno_cached(m, 2000 + i, &inside[i]);
        after[i] = running_errno();
    });
    ASSERT_EQ(inside[1], own[0]);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(after[i], 2000 + i) << i;
}

TYPED_TEST(TClockErrno, LibcErrnoInDelegatedSectionReachesWaiter) {
    TypeParam m;
    long own[3] = {}, inside[3] = {};
    int after[3] = {};
    queued(m, 3, [&](int i) {
        own[i] = tid();
        errno = 0;
        cs_sets_errno_libc(m, &inside[i]);
        after[i] = errno;
    });
    ASSERT_EQ(inside[1], own[0]);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(after[i], EBADF) << i;
}

// B (thread 0) combines C's section, which fails a libc call: without
// adoption that EBADF lands in B's kernel thread's errno. B's own section
// must still start with B's value, and B keeps it; C and D end with EBADF.
TYPED_TEST(TClockErrno, SectionSeesWaitersErrnoAndCombinerKeepsItsOwn) {
    TypeParam m;
    long own[3] = {}, inside[3] = {};
    int seen[3] = {}, after[3] = {};
    queued(m, 3, [&](int i) {
        own[i] = tid();
        errno = 500 + i;  // B (the combiner) has 500, C 501
        seen[i] = cs_reads_errno(m, &inside[i], i != 0);
        after[i] = errno;
    });
    ASSERT_EQ(inside[1], own[0]);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(seen[i], 500 + i) << i;
    EXPECT_EQ(after[0], 500);
    EXPECT_EQ(after[1], EBADF);
    EXPECT_EQ(after[2], EBADF);
}

// The hand-back path: C's section, delegated to B, writes errno (through an
// address kept from before lock(), or by a failing libc call on B's thread)
// and then moves home with tclock_may_block(). At home, and after its
// unlock(), C's errno is what the section wrote; B's own section still
// starts and ends with B's errno; D's is untouched.
TYPED_TEST(TClockErrno, CarriedAcrossTheHandBack) {
    for (const bool libc : {false, true}) {
        SCOPED_TRACE(libc ? "libc call" : "cached address");
        TypeParam m;
        long own[3] = {}, inside[3] = {}, home[3] = {};
        int seen_in[3] = {}, seen_home[3] = {}, after[3] = {};
        bool moved[3] = {};
        queued(m, 3, [&](int i) {
            own[i] = tid();
            errno = 500 + i;
            int* const e = errno_address();
            m.lock();
            inside[i] = tid();
            seen_in[i] = running_errno();
            if (i == 1) {
                if (libc)
                    (void)::close(-1);  // EBADF
                else
                    *e = 601;
            }
            moved[i] = spindle::tclock_may_block();
            home[i] = tid();
            seen_home[i] = running_errno();
            m.unlock();
            after[i] = running_errno();
        });
        ASSERT_EQ(inside[1], own[0]);
        ASSERT_TRUE(moved[1]);
        EXPECT_EQ(home[1], own[1]);
        const int c_end = libc ? EBADF : 601;
        for (int i = 0; i < 3; ++i) EXPECT_EQ(seen_in[i], 500 + i) << i;
        EXPECT_EQ(seen_home[1], c_end);
        EXPECT_EQ(after[1], c_end);
        EXPECT_EQ(seen_home[0], 500);
        EXPECT_EQ(after[0], 500);
        EXPECT_EQ(seen_home[2], 502);
        EXPECT_EQ(after[2], 502);
    }
}

TYPED_TEST(TClockErrno, StressEveryWaiterGetsItsOwnValue) {
    TypeParam m;
    std::atomic<int> bad{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < stress_threads; ++t)
        ts.emplace_back([&, t] {
            long dummy;
            for (int i = 0; i < stress_iters / 4; ++i) {
                const int v = t * 100000 + i;
                errno = v - 1;
                cs_sets_errno_direct(m, v, &dummy);
                if (errno != v) bad.fetch_add(1);
                errno = v;
                if (cs_reads_errno(m, &dummy) != v) bad.fetch_add(1);
                cs_sets_errno_libc(m, &dummy);
                if (errno != EBADF) bad.fetch_add(1);
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(bad.load(), 0);
}

// --- thread pointer adoption -------------------------------------------------

// Runs body(on) with thread pointer adoption off (on = false), then on where
// the CPU, kernel and build allow it; restores the setting afterwards.
void in_both_adoption_modes(const std::function<void(bool)>& body) {
    struct restore {
        bool was = spindle::tclock_adopts_thread_pointer();
        ~restore() { spindle::tclock_adopt_thread_pointer(was); }
    } r;
    for (bool adopt : {false, true}) {
        const bool on = spindle::tclock_adopt_thread_pointer(adopt);
        if (adopt && !on) {
            std::printf("    thread pointer adoption is not available here (CPU, kernel or sanitizer build)\n");
            continue;
        }
        EXPECT_EQ(on, adopt);
        body(on);
    }
}

// queued(): thread 0 becomes the queue head and combines thread 1's
// section (thread 2 is the tail, which no combiner runs).
// Thread 1's section runs on thread 0's kernel thread either way; with the
// thread pointer adopted it runs *as* thread 1: pthread_self() and its
// thread_local variables are thread 1's. Without, they are thread 0's.
TEST(TClockIdentity, DelegatedSectionRunsAsItsOwnThread) {
    in_both_adoption_modes([&](bool on) {
        tclock m;
        long own[3] = {}, inside[3] = {};
        pthread_t self[3] = {}, seen[3] = {};
        int mark_in[3] = {}, mark_after[3] = {};
        bool delegated[3] = {};
        queued(m, 3, [&](int i) {
            tl_mark = 100 + i;
            own[i] = tid();
            self[i] = ::pthread_self();
            m.lock();
            inside[i] = tid();
            seen[i] = running_thread();
            mark_in[i] = read_mark();
            delegated[i] = spindle::tclock_delegated();
            m.unlock();
            mark_after[i] = read_mark();
        });
        ASSERT_EQ(inside[1], own[0]) << "thread 1's section was not delegated to thread 0";
        EXPECT_TRUE(delegated[1]);
        EXPECT_FALSE(delegated[0]);
        EXPECT_FALSE(delegated[2]);
        if (on) {
            EXPECT_TRUE(::pthread_equal(seen[1], self[1]));
            EXPECT_EQ(mark_in[1], 101);
        } else {
            EXPECT_TRUE(::pthread_equal(seen[1], self[0]));
            EXPECT_EQ(mark_in[1], 100);
        }
        EXPECT_EQ(mark_in[0], 100);
        EXPECT_EQ(mark_in[2], 102);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(mark_after[i], 100 + i) << i;
    });
}

// --- signals ----------------------------------------------------------------

std::atomic<int> g_sig_count{0};
std::atomic<std::uintptr_t> g_sig_sp{0};
// A handler as POSIX asks for: it may write errno, and restores it.
[[maybe_unused]] void on_usr1(int) {
    const int saved = errno;
    volatile char probe = 0;
    g_sig_sp.store(reinterpret_cast<std::uintptr_t>(&probe), std::memory_order_relaxed);
    errno = 99;
    errno = saved;
    // Release pairs with the section's acquire loads: g_sig_sp is then visible.
    g_sig_count.fetch_add(1, std::memory_order_release);
}

// A signal sent to a thread whose section a combiner runs: its handler runs
// at once, on the waiter's ephemeral stack (not its own stack, which the
// section is using), while the section waits for it on the combiner. In both
// thread pointer modes the section's stack and errno are intact afterwards
// (with adoption the handler shares the section's errno: one that restores
// it, as this one does, leaves it as it was while the section does not
// write it meanwhile; tclock.hpp).
TEST(TClockSignal, SignalToAWaiterWhoseSectionIsDelegated) {
#if SPINDLE_TSAN
    GTEST_SKIP() << "TSan delivers a signal only when the thread enters an intercepted call; a waiter "
                    "waits with raw system calls, so the handler would run only after the wait";
#else
    in_both_adoption_modes([&](bool on) {
        SCOPED_TRACE(on ? "adoption on" : "adoption off");
        struct sigaction sa {}, old{};
        sa.sa_handler = &on_usr1;  // no SA_ONSTACK: the handler runs on the current stack
        sigemptyset(&sa.sa_mask);
        ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
        g_sig_count.store(0);
        tclock m;
        long own[3] = {}, inside[3] = {};
        std::uintptr_t main_lo = 0, main_hi = 0;
        bool intact = false;
        int ran_during = -1, errno_in = -1;
        queued(m, 3, [&](int i) {
            own[i] = tid();
            const pthread_t me = ::pthread_self();
            if (i == 1) {
                pthread_attr_t a;
                void* lo;
                std::size_t sz;
                ::pthread_getattr_np(me, &a);
                ::pthread_attr_getstack(&a, &lo, &sz);
                ::pthread_attr_destroy(&a);
                main_lo = reinterpret_cast<std::uintptr_t>(lo);
                main_hi = main_lo + sz;
            }
            volatile std::uint64_t canary[32];
            for (int k = 0; k < 32; ++k) canary[k] = 0x5eed0000u + k;
            m.lock();
            inside[i] = tid();
            if (i == 1) {
                // Running on B's thread: signal C's own thread, which waits on
                // its ephemeral stack. By kernel thread id: with the thread
                // pointer adopted, pthread_kill() of our own pthread_t signals
                // the running (kernel) thread, B.
                errno = 7;
                ::syscall(SYS_tgkill, ::getpid(), own[1], SIGUSR1);
                // Acquire pairs with the handler's release increment.
                while (g_sig_count.load(std::memory_order_acquire) == 0) std::this_thread::yield();
                ran_during = g_sig_count.load(std::memory_order_acquire);
                errno_in = errno;
            }
            m.unlock();
            if (i == 1) {
                bool ok = true;
                for (int k = 0; k < 32; ++k) ok = ok && canary[k] == 0x5eed0000u + k;
                intact = ok;
            }
        });
        ::sigaction(SIGUSR1, &old, nullptr);
        ASSERT_EQ(inside[1], own[0]);
        EXPECT_EQ(ran_during, 1);
        EXPECT_EQ(errno_in, 7) << "the handler on the waiting thread left the section's errno changed";
        EXPECT_EQ(g_sig_count.load(), 1);
        const std::uintptr_t sp = g_sig_sp.load();
        EXPECT_FALSE(sp >= main_lo && sp < main_hi) << "the handler ran on the waiter's own stack";
        EXPECT_TRUE(intact);
    });
#endif
}

// --- the ephemeral stack ------------------------------------------------------

// One line of /proc/self/maps: [lo, hi) and its permissions ("rw-p").
struct mapping {
    std::uintptr_t lo = 0, hi = 0;
    char perms[5] = {};
};
// The mapping that holds `a`, and the one that ends where it begins (if any).
bool mapping_of(std::uintptr_t a, mapping* at, mapping* below) {
    std::FILE* f = std::fopen("/proc/self/maps", "r");
    if (f == nullptr) return false;
    std::vector<mapping> all;
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
        mapping m;
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line, "%lx-%lx %4s", &lo, &hi, m.perms) == 3) {
            m.lo = lo;
            m.hi = hi;
            all.push_back(m);
        }
    }
    std::fclose(f);
    bool found = false;
    *below = mapping{};
    for (const mapping& m : all)
        if (a >= m.lo && a < m.hi) {
            *at = m;
            found = true;
        }
    if (!found) return false;
    for (const mapping& m : all)
        if (m.hi == at->lo) *below = m;
    return true;
}

// Whether the page at `p` faults on access: the kernel, asked to copy a byte
// from it into a pipe, answers EFAULT (a guard region leaves no trace in
// /proc/self/maps).
bool page_faults(std::uintptr_t p) {
    int fds[2];
    if (::pipe(fds) != 0) return false;
    const ssize_t n = ::write(fds[1], reinterpret_cast<const void*>(p), 1);
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return n < 0 && err == EFAULT;
}

// The start of the usable part of the guarded mapping (memory/detail/
// guarded_mapping.hpp) that holds `a`, found in `at`: the end of its guard
// page, which is a PROT_NONE mapping right below (mprotect) or, where the
// process makes guard regions, the highest page below `a` that faults
// (`at` may then be merged with a neighbour). 0: no guard found.
std::uintptr_t usable_start(std::uintptr_t a, const mapping& at, const mapping& below) {
    const std::uintptr_t page = spindle::detail::page_size();
    if (spindle::detail::guard_method_in_use() == spindle::detail::guard_method::guard_region) {
        for (std::uintptr_t p = a & ~(page - 1); p >= at.lo && p != 0; p -= page)
            if (page_faults(p)) return p + page;
        return 0;
    }
    return below.hi == at.lo && std::string(below.perms, 3) == "---" ? at.lo : 0;
}

// [lo, hi) of the calling thread's own stack.
void own_stack(std::uintptr_t* lo, std::uintptr_t* hi) {
    pthread_attr_t a;
    void* p = nullptr;
    std::size_t sz = 0;
    ::pthread_getattr_np(::pthread_self(), &a);
    ::pthread_attr_getstack(&a, &p, &sz);
    ::pthread_attr_destroy(&a);
    *lo = reinterpret_cast<std::uintptr_t>(p);
    *hi = *lo + sz;
}

// A queued request lives at the top of a frame of its thread's ephemeral
// stack, so the lock's tail, while one waiter waits, is an address on that
// stack. Read /proc/self/maps then (the waiter waits, so the stack is mapped):
// the address is in a read-write mapping that is not the thread's own stack,
// at least the 64 KiB a frame leaves free above the stack's usable start and
// at most the stack's 256 KiB; and right below that start is the guard page
// (usable_start). Deterministic: the waiter cannot get
// the lock before this thread releases it.
TEST(TClockEphemeralStack, GuardPageRightBelowIt) {
    tclock m;
    m.lock();
    std::uintptr_t own_lo = 0, own_hi = 0;
    std::atomic<bool> known{false};
    std::thread w([&] {
        own_stack(&own_lo, &own_hi);
        known.store(true);
        m.lock();
        m.unlock();
    });
    while (!known.load() || tail_of(m) == nullptr) std::this_thread::yield();
    const auto q = reinterpret_cast<std::uintptr_t>(tail_of(m));
    mapping at, below;
    const bool found = mapping_of(q, &at, &below);
    const std::uintptr_t start = found ? usable_start(q, at, below) : 0;  // while it is mapped
    m.unlock();
    w.join();
    ASSERT_TRUE(found);
    EXPECT_FALSE(q >= own_lo && q < own_hi) << "the request is on the waiter's own stack";
    EXPECT_STREQ(at.perms, "rw-p");
    ASSERT_NE(start, 0u) << "no guard page below the ephemeral stack";
    EXPECT_GE(q - start, std::uintptr_t{64} * 1024);
    EXPECT_LE(q - start, std::uintptr_t{256} * 1024);
}

std::atomic<int> g_big_count{0};
std::atomic<int> g_big_ok{0};
std::atomic<std::uintptr_t> g_big_lo{0};
// A handler that needs 32 KiB of stack (alloca: on the stack in every build),
// all of it written and read back.
[[maybe_unused]] void on_usr2_big(int) {
    constexpr std::size_t n = 32 * 1024;
    auto* buf = static_cast<volatile unsigned char*>(__builtin_alloca(n));
    for (std::size_t k = 0; k < n; ++k) buf[k] = static_cast<unsigned char>(k * 7 + 1);
    bool ok = true;
    for (std::size_t k = 0; k < n; ++k) ok = ok && buf[k] == static_cast<unsigned char>(k * 7 + 1);
    g_big_lo.store(reinterpret_cast<std::uintptr_t>(buf), std::memory_order_relaxed);
    g_big_ok.store(ok ? 1 : 0, std::memory_order_relaxed);
    // Release pairs with the test's acquire load: g_big_lo and g_big_ok are set.
    g_big_count.fetch_add(1, std::memory_order_release);
}

// The header promises at least 64 KiB free below every frame of the
// ephemeral stack for a signal handler. A waiter alone in the queue (the
// head, which holds no signals: no combiner can run its section) waits for
// the gate on its ephemeral stack; a signal sent to it runs a handler that
// uses 32 KiB there. The handler's buffer must lie in the same mapping as
// the waiter's request, above the guard page, off its own stack, and read
// back intact. Deterministic: this thread holds the lock until the handler
// has run.
TEST(TClockSignal, HandlerNeeding32KiBRunsOnTheEphemeralStack) {
#if SPINDLE_TSAN
    GTEST_SKIP() << "TSan delivers a signal only when the thread enters an intercepted call; a waiter "
                    "waits with raw system calls, so the handler would run only after the wait";
#else
    struct sigaction sa {}, old{};
    sa.sa_handler = &on_usr2_big;  // no SA_ONSTACK: the handler runs on the current stack
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(::sigaction(SIGUSR2, &sa, &old), 0);
    g_big_count.store(0);
    tclock m;
    m.lock();
    std::uintptr_t own_lo = 0, own_hi = 0;
    std::atomic<long> w_tid{0};
    std::thread w([&] {
        own_stack(&own_lo, &own_hi);
        w_tid.store(tid());
        m.lock();
        m.unlock();
    });
    while (w_tid.load() == 0 || tail_of(m) == nullptr) std::this_thread::yield();
    const auto q = reinterpret_cast<std::uintptr_t>(tail_of(m));
    ::syscall(SYS_tgkill, ::getpid(), w_tid.load(), SIGUSR2);
    // Acquire pairs with the handler's release increment.
    while (g_big_count.load(std::memory_order_acquire) == 0) std::this_thread::yield();
    const std::uintptr_t lo = g_big_lo.load(std::memory_order_relaxed);
    mapping at, below, at_q, below_q;
    const bool found = mapping_of(lo, &at, &below) && mapping_of(q, &at_q, &below_q);
    const std::uintptr_t start = found ? usable_start(lo, at, below) : 0;  // while it is mapped
    m.unlock();
    w.join();
    ::sigaction(SIGUSR2, &old, nullptr);
    EXPECT_EQ(g_big_count.load(), 1);
    EXPECT_EQ(g_big_ok.load(), 1);
    ASSERT_TRUE(found);
    EXPECT_FALSE(lo >= own_lo && lo < own_hi) << "the handler ran on the waiter's own stack";
    EXPECT_EQ(at.lo, at_q.lo) << "the handler's buffer is not on the waiter's ephemeral stack";
    EXPECT_GE(q - lo, std::uintptr_t{32} * 1024);
    EXPECT_NE(start, 0u) << "no guard page below the ephemeral stack";
#endif
}

// --- nesting and out-of-order release ----------------------------------------

// Two combiners for one section. This thread holds l2 while three threads
// queue on l1 (queued()): B first, then C, then one more, so B combines and
// runs C's l1 section. Before l1 is released X queues on l2; once C's
// section (on B) has queued on l2 behind X, Y queues behind it and h
// releases l2, so X combines and runs the rest of C's section. `c_section`
// is C's section once it holds l1; the others lock and unlock l1. Each
// thread sets its errno before its lock() (thread i of l1: 500 + i, X: 900,
// Y: 901) and records the running errno inside its section and after it
// (for C: after c_section returns).
struct two_combiners {
    long own[3] = {}, in1[3] = {}, x_own = 0, y_own = 0, in_x = 0, in_y = 0;
    int err_in1[3] = {}, err_after[3] = {}, x_err_in = 0, x_err_after = 0, y_err_in = 0, y_err_after = 0;
};
template <class L>
two_combiners run_across_two_combiners(L& l1, L& l2, const std::function<void()>& c_section) {
    two_combiners r;
    std::thread x, y, h;
    l2.lock();
    queued(l1, 3, [&](int i) {
        r.own[i] = tid();
        errno = 500 + i;
        l1.lock();
        r.in1[i] = tid();
        r.err_in1[i] = running_errno();
        if (i == 1) {
            c_section();
            r.err_after[1] = running_errno();
            return;
        }
        l1.unlock();
        r.err_after[i] = running_errno();
    }, [&] {
        // X and Y: one plain l2 section each, recording where it ran and errno.
        auto l2_section = [&l2](long& own, long& in, int& err_in, int& err_after, int err0) {
            own = tid();
            errno = err0;
            l2.lock();
            in = tid();
            err_in = running_errno();
            l2.unlock();
            err_after = running_errno();
        };
        const void* t = tail_of(l2);
        x = std::thread([&r, l2_section] { l2_section(r.x_own, r.in_x, r.x_err_in, r.x_err_after, 900); });
        while (tail_of(l2) == t) std::this_thread::yield();
        h = std::thread([&, l2_section, tx = tail_of(l2)] {
            while (tail_of(l2) == tx) std::this_thread::yield();
            const void* tb = tail_of(l2);
            y = std::thread([&r, l2_section] { l2_section(r.y_own, r.in_y, r.y_err_in, r.y_err_after, 901); });
            while (tail_of(l2) == tb) std::this_thread::yield();
            l2.unlock();
        });
    });
    h.join();
    x.join();
    y.join();
    return r;
}

TEST(TClockNested, OutOfOrderReleaseAcrossTwoCombiners) {
    tclock l1, l2;
    const auto before = spindle::detail::tc_read_counters();
    long in2 = 0, after_c = 0;
    const two_combiners r = run_across_two_combiners(l1, l2, [&] {
        // C's section of l1, on B's thread: l2 is contended, so B queues for
        // it on C's behalf and X (l2's combiner) runs what follows.
        l2.lock();
        in2 = tid();
        l1.unlock();  // out of order: l1's combiner is B, not X
        l2.unlock();
        after_c = tid();
    });
    EXPECT_EQ(r.in1[1], r.own[0]);  // C's l1 section ran on B
    EXPECT_EQ(in2, r.x_own);        // its l2 part ran on X
    EXPECT_EQ(r.in_x, r.x_own);
    EXPECT_EQ(r.in_y, r.y_own);
    EXPECT_EQ(after_c, r.own[1]);   // and C continued on its own thread
    const auto now = spindle::detail::tc_read_counters();
    EXPECT_EQ(now.ooo_finishes - before.ooo_finishes, 1u);
}

// C's section releases l1 out of order -- the release waits for the section
// to come back to B -- and then takes l1 again while it still holds l2.
// With any mutex that is fine: l1 was released. Here the lock() must first
// move the section home (applying the deferred release on the way); before
// it did, the section queued on l1 behind B, which waited for the section:
// a deadlock.
template <class L>
void relock_after_out_of_order_release() {
    L l1, l2;
    const auto before = spindle::detail::tc_read_counters();
    long in2 = 0, relocked = 0, after_c = 0;
    int count1 = 0;
    const two_combiners r = run_across_two_combiners(l1, l2, [&] {
        ++count1;
        l2.lock();  // contended: X runs what follows
        in2 = tid();
        l1.unlock();  // out of order: l1's combiner is B, not X
        l1.lock();    // again, still holding l2
        relocked = tid();
        ++count1;
        l1.unlock();
        l2.unlock();
        after_c = tid();
    });
    EXPECT_EQ(r.in1[1], r.own[0]);  // C's l1 section ran on B
    EXPECT_EQ(in2, r.x_own);        // its l2 part ran on X
    EXPECT_EQ(relocked, r.own[1]);  // moved home before it took l1 again
    EXPECT_EQ(after_c, r.own[1]);
    EXPECT_EQ(count1, 2);
    const auto now = spindle::detail::tc_read_counters();
    EXPECT_EQ(now.ooo_finishes - before.ooo_finishes, 1u);
    EXPECT_GE(now.handbacks - before.handbacks, 1u);  // X gave the section back; B finished it (ooo)
}

TYPED_TEST(TClockTyped, RelockAfterOutOfOrderReleaseMovesTheSectionHome) {
    relock_after_out_of_order_release<TypeParam>();
}

// errno over an out-of-order release: C's section starts on B (l1's
// combiner), takes the contended l2 (X runs the rest of it), writes errno
// (through an address it computed on B, or by a failing libc call on X),
// releases l1 out of order and then l2. B applies l1's release (ooo_finish)
// and C's errno must still end as the section wrote it; B's, X's, D's and
// Y's own sections start and end with their own errno. Both variants of the
// section leave errno changed; `keep` leaves it as C had it at lock().
TYPED_TEST(TClockErrno, CarriedThroughAnOutOfOrderRelease) {
    enum { cached, libc, keep };
    for (const int how : {cached, libc, keep}) {
        SCOPED_TRACE(how == cached ? "cached address" : how == libc ? "libc call" : "errno unchanged");
        TypeParam l1, l2;
        const auto before = spindle::detail::tc_read_counters();
        long in2 = 0;
        int err_in2 = 0;
        const two_combiners r = run_across_two_combiners(l1, l2, [&] {
            int* const e = errno_address();  // on B; with adoption, C's errno
            l2.lock();
            in2 = tid();
            err_in2 = running_errno();
            if (how == cached) *e = 777;
            if (how == libc) (void)::close(-1);  // EBADF
            l1.unlock();  // out of order: l1's combiner is B, not X
            l2.unlock();
        });
        ASSERT_EQ(r.in1[1], r.own[0]);  // C's l1 section ran on B
        ASSERT_EQ(in2, r.x_own);        // its l2 part ran on X
        EXPECT_EQ(spindle::detail::tc_read_counters().ooo_finishes - before.ooo_finishes, 1u);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(r.err_in1[i], 500 + i) << i;
        EXPECT_EQ(err_in2, 501);
        EXPECT_EQ(r.err_after[1], how == cached ? 777 : how == libc ? EBADF : 501);
        EXPECT_EQ(r.err_after[0], 500);
        EXPECT_EQ(r.err_after[2], 502);
        EXPECT_EQ(r.x_err_in, 900);
        EXPECT_EQ(r.x_err_after, 900);
        EXPECT_EQ(r.y_err_in, 901);
        EXPECT_EQ(r.y_err_after, 901);
    }
}

template <class L>
void nested_stress(int depth, bool reverse_release, int iters) {
    const auto before = spindle::detail::tc_read_counters();
    const bool adopting = spindle::tclock_adopts_thread_pointer();
    std::atomic<long> wrong_identity{0};
    std::vector<L> locks(static_cast<std::size_t>(depth));
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(depth), 0);
    std::vector<std::thread> ts;
    for (int t = 0; t < stress_threads; ++t)
        ts.emplace_back([&, t] {
            tl_mark = 1000 + t;
            for (int i = 0; i < iters; ++i) {
                // Each thread takes a window of the chain, always in order.
                const int first = (t + i) % 3 == 0 ? 0 : 1;
                for (int k = first; k < depth; ++k) {
                    locks[static_cast<std::size_t>(k)].lock();
                    ++counts[static_cast<std::size_t>(k)];
                    // With the thread pointer adopted, every section -- run
                    // by whichever combiner, nested, released out of order
                    // -- sees its own thread's thread_local variables.
                    if (adopting && read_mark() != 1000 + t) wrong_identity.fetch_add(1, std::memory_order_relaxed);
                }
                if (i % 8 == 0) std::this_thread::yield();  // holder descheduled: queues grow
                if (reverse_release) {
                    for (int k = depth - 1; k >= first; --k) locks[static_cast<std::size_t>(k)].unlock();
                } else {
                    for (int k = first; k < depth; ++k) locks[static_cast<std::size_t>(k)].unlock();
                }
            }
        });
    for (auto& t : ts) t.join();
    std::uint64_t expect_first = 0;
    for (int t = 0; t < stress_threads; ++t)
        for (int i = 0; i < iters; ++i) expect_first += (t + i) % 3 == 0 ? 1 : 0;
    EXPECT_EQ(counts[0], expect_first);
    for (int k = 1; k < depth; ++k)
        EXPECT_EQ(counts[static_cast<std::size_t>(k)], std::uint64_t{stress_threads} * iters) << k;
    EXPECT_EQ(wrong_identity.load(), 0);
    std::printf("    depth %d: %llu out-of-order releases applied by combiners\n", depth,
                static_cast<unsigned long long>(spindle::detail::tc_read_counters().ooo_finishes - before.ooo_finishes));
}

TYPED_TEST(TClockTyped, NestedInOrderRelease) { nested_stress<TypeParam>(4, true, stress_iters / 10); }
TYPED_TEST(TClockTyped, NestedOutOfOrderRelease) { nested_stress<TypeParam>(4, false, stress_iters / 10); }
TEST(TClockNested, DeepChainBothOrders) {
    nested_stress<tclock>(48, true, stress_iters / 100);
    nested_stress<tclock>(48, false, stress_iters / 100);
}

// Nesting deeper than the ephemeral stack holds. One thread, B, combines a
// chain of sections each of which takes the next lock: S_k's section of
// lock k runs on B and takes lock k+1, which this thread holds, so B queues
// for it on a new frame of its own ephemeral stack, below the frames of its
// outer combines; then S_{k+1} and T_{k+1} queue behind it and this thread
// releases lock k+1, so B combines S_{k+1}'s section, and so on. Each level
// costs B one more frame, until there is no room for a frame plus the 64 KiB
// kept free: then lock() takes the gate without a request, on B's thread.
// This thread tells the two apart while it still holds the lock: a request
// shows in the lock's tail; the fallback leaves the tail null and sleeps in
// a futex wait on the lock word (tclock_blocking's gate; B's thread enters
// that wait only after any tail exchange of its own). Every section checks
// mutual exclusion; every lock must count each of its sections once, and the
// chain must unwind. Deterministic: each level waits for a queue state.
TEST(TClockNested, DeeperThanTheEphemeralStackTakesTheGateItself) {
    if (!syscalls_visible()) GTEST_SKIP() << "/proc/self/task/<tid>/syscall does not show this ABI's system calls here";
    using L = tclock_blocking;
    constexpr int cap = 1024;  // levels; 256 KiB hold a few hundred frames
    std::vector<L> locks(cap + 1);
    std::vector<int> count(cap + 1, 0);  // count[k]: guarded by locks[k]
    std::vector<std::atomic<int>> inside(cap + 1);
    std::atomic<int> violations{0};
    auto enter = [&](int k) {
        if (inside[static_cast<std::size_t>(k)].fetch_add(1) != 0) violations.fetch_add(1);
        ++count[static_cast<std::size_t>(k)];
    };
    auto leave = [&](int k) { inside[static_cast<std::size_t>(k)].fetch_sub(1); };
    std::vector<long> s_in(cap + 1, 0), nested_in(cap + 1, 0);
    std::atomic<long> b_tid{0};
    std::vector<std::thread> ts;
    ts.reserve(2 * cap + 2);
    auto start_queued = [&](int k, std::function<void()> fn) {
        const void* t = tail_of(locks[static_cast<std::size_t>(k)]);
        ts.emplace_back(std::move(fn));
        while (tail_of(locks[static_cast<std::size_t>(k)]) == t) std::this_thread::yield();
    };
    auto s_thread = [&](int k) {
        return [&, k] {
            L& mine = locks[static_cast<std::size_t>(k)];
            L& next = locks[static_cast<std::size_t>(k) + 1];
            mine.lock();
            enter(k);
            s_in[static_cast<std::size_t>(k)] = tid();
            next.lock();  // on B: a new frame, or the gate itself
            enter(k + 1);
            nested_in[static_cast<std::size_t>(k) + 1] = tid();
            leave(k + 1);
            next.unlock();
            leave(k);
            mine.unlock();
        };
    };
    auto t_thread = [&](int k) {
        return [&, k] {
            L& mine = locks[static_cast<std::size_t>(k)];
            mine.lock();
            enter(k);
            leave(k);
            mine.unlock();
        };
    };
    locks[0].lock();
    enter(0);
    start_queued(0, [&] {
        b_tid.store(tid());
        locks[0].lock();
        enter(0);
        leave(0);
        locks[0].unlock();
    });
    start_queued(0, s_thread(0));
    start_queued(0, t_thread(0));
    int k = 0;
    int fallback = -1;
    for (;;) {
        L& next = locks[static_cast<std::size_t>(k) + 1];
        next.lock();
        enter(k + 1);
        leave(k);
        locks[static_cast<std::size_t>(k)].unlock();  // B combines S_k, whose section takes `next`
        ++k;
        auto& word = reinterpret_cast<spindle::detail::tc_word*>(&next)->state;
        const auto w = reinterpret_cast<std::uintptr_t>(&word);
        bool queued_here = false;
        for (;;) {
            if (tail_of(next) != nullptr) {
                queued_here = true;
                break;
            }
            if (in_futex_on(b_tid.load(), w, w + sizeof word) && tail_of(next) == nullptr) break;
            if (inside[static_cast<std::size_t>(k)].load() > 1) break;  // entered while we hold it
            std::this_thread::yield();
        }
        if (!queued_here) {
            fallback = k;
            break;
        }
        if (k == cap) break;  // never ran out of room: fails below
        start_queued(k, s_thread(k));
        start_queued(k, t_thread(k));
    }
    leave(k);
    locks[static_cast<std::size_t>(k)].unlock();
    for (auto& t : ts) t.join();
    std::printf("    the fallback came at nesting depth %d\n", fallback);
    ASSERT_GT(fallback, 0) << "every one of " << cap << " levels got a frame";
    EXPECT_GE(fallback, 16) << "the ephemeral stack held too few frames";
    EXPECT_EQ(violations.load(), 0);
    for (int j = 0; j < fallback; ++j) {
        EXPECT_EQ(s_in[static_cast<std::size_t>(j)], b_tid.load()) << j;  // combined by B, nested
        EXPECT_EQ(count[static_cast<std::size_t>(j)], 4) << j;            // this thread, B or S_{j-1}, S_j, T_j
    }
    EXPECT_EQ(nested_in[static_cast<std::size_t>(fallback)], b_tid.load());
    EXPECT_EQ(count[static_cast<std::size_t>(fallback)], 2);  // this thread, then B's fallback
}

// --- a waiter that sleeps (tclock_blocking, tclock_shared's writers) -----------

template <class L>
class TClockParking : public ::testing::Test {};
using parking_types = ::testing::Types<tclock_blocking, tclock_shared>;
TYPED_TEST_SUITE(TClockParking, parking_types);

// The parked -> processing -> done cycle, forced. This thread holds the
// lock while B, C and D queue; then it waits until C's thread is in a futex
// wait on its own request (its state word is in the request's first cache
// line, which the lock's tail pointed at right after C queued). A waiter
// sleeps there only after it moved its request to `parked`, and only a
// combiner changes it from there, so when the lock is released B's
// mark_processing finds C parked, runs C's section (C sleeps on), and its
// notify must wake C with "done": the test completes only if it does.
TYPED_TEST(TClockParking, SleepingWaiterIsCombinedAndWoken) {
    if (!syscalls_visible()) GTEST_SKIP() << "/proc/self/task/<tid>/syscall does not show this ABI's system calls here";
    TypeParam m;
    long own[3] = {}, inside[3] = {}, after[3] = {};
    bool delegated[3] = {};
    int order[3] = {}, seq = 0;  // guarded by m
    std::atomic<long> tids[3] = {};
    const void* node[3] = {};
    std::vector<std::thread> ts;
    m.lock();
    for (int i = 0; i < 3; ++i) {
        const void* last = tail_of(m);
        ts.emplace_back([&, i] {
            own[i] = tid();
            tids[i].store(own[i]);
            m.lock();
            inside[i] = tid();
            delegated[i] = spindle::tclock_delegated();
            order[i] = seq++;
            m.unlock();
            after[i] = tid();
        });
        while (tail_of(m) == last) std::this_thread::yield();
        node[i] = tail_of(m);
    }
    const auto c = reinterpret_cast<std::uintptr_t>(node[1]);
    while (!in_futex_on(tids[1].load(), c, c + 64)) std::this_thread::yield();
    m.unlock();
    for (auto& t : ts) t.join();
    EXPECT_EQ(inside[1], own[0]) << "C's section was not combined by B";
    EXPECT_TRUE(delegated[1]);
    EXPECT_EQ(inside[0], own[0]);
    EXPECT_EQ(inside[2], own[2]);
    EXPECT_EQ(order[1], 0);
    EXPECT_EQ(order[0], 1);
    EXPECT_EQ(order[2], 2);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(after[i], own[i]) << i;
}

// --- sections that block -------------------------------------------------------

// A minimal condition variable over a futex, in the shape a pthread_cond_wait
// over a tclock takes: announce, release, sleep, re-take.
struct test_cond {
    std::atomic<std::uint32_t> seq{0};
    template <class L>
    void wait(L& m, bool hand_back) {
        if (hand_back) spindle::tclock_may_block();
        const std::uint32_t s = seq.load(std::memory_order_acquire);
        m.unlock();
        ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seq), FUTEX_WAIT_PRIVATE, s, nullptr, nullptr, 0);
        m.lock();
    }
    void notify_all() {
        seq.fetch_add(1, std::memory_order_release);
        ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seq), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
    }
};

TYPED_TEST(TClockTyped, MayBlockGivesTheSectionBack) {
    TypeParam m;
    const auto before = spindle::detail::tc_read_counters();
    long own[3] = {}, inside[3] = {}, after_hb[3] = {};
    bool moved[3] = {};
    int counter = 0;
    queued(m, 3, [&](int i) {
        own[i] = tid();
        m.lock();
        inside[i] = tid();
        moved[i] = spindle::tclock_may_block();
        after_hb[i] = tid();
        ++counter;
        m.unlock();
    });
    EXPECT_EQ(inside[1], own[0]);
    EXPECT_TRUE(moved[1]);
    EXPECT_FALSE(moved[0]);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(after_hb[i], own[i]) << i;
    EXPECT_EQ(counter, 3);
    EXPECT_GE(spindle::detail::tc_read_counters().handbacks - before.handbacks, 1u);
}

// A delegated section that blocks on one of spindle's own primitives (a
// counting_semaphore with no permit, acquired by a plain thread) is detected
// without tclock_may_block: the thread-parking path gives the section back
// to its own thread before it sleeps, so the combiner and the rest of the
// batch go on. Section 1 runs on section 0's thread (the combiner) and
// blocks; the releaser lets it in only once the handback happened (or,
// should detection be missing, after a long while: then the checks fail).
TYPED_TEST(TClockTyped, BlockingOnASpindlePrimitiveGivesTheSectionBack) {
    TypeParam m;
    spindle::counting_semaphore<> sem(0);
    const auto before = spindle::detail::tc_read_counters();
    long own[3] = {}, inside[3] = {}, after_wait[3] = {};
    int counter = 0;
    std::thread releaser([&] {
        for (long i = 0; i < 2'000'000 && spindle::detail::tc_read_counters().handbacks == before.handbacks; ++i)
            std::this_thread::yield();
        sem.release();
    });
    queued(m, 3, [&](int i) {
        own[i] = tid();
        m.lock();
        inside[i] = tid();
        if (i == 1) sem.acquire();
        after_wait[i] = tid();
        ++counter;
        m.unlock();
    });
    releaser.join();
    EXPECT_EQ(inside[1], own[0]) << "section 1 was not delegated: the test proves nothing";
    EXPECT_EQ(after_wait[1], own[1]) << "the blocked section stayed on the combiner's thread";
    EXPECT_GE(spindle::detail::tc_read_counters().handbacks - before.handbacks, 1u);
    EXPECT_EQ(counter, 3);
}

template <class L>
void cond_queue(bool hand_back) {
    L m;
    test_cond nonempty;
    std::vector<int> items;  // guarded by m
    long sum = 0;            // guarded by m
    int taken = 0;           // guarded by m
    constexpr int producers = 2, consumers = 6, per_producer = 300;
    std::vector<std::thread> ts;
    for (int c = 0; c < consumers; ++c)
        ts.emplace_back([&] {
            m.lock();
            for (;;) {
                while (items.empty() && taken < producers * per_producer) nonempty.wait(m, hand_back);
                if (taken == producers * per_producer) break;
                sum += items.back();
                items.pop_back();
                ++taken;
                if (taken == producers * per_producer) nonempty.notify_all();
            }
            m.unlock();
        });
    for (int p = 0; p < producers; ++p)
        ts.emplace_back([&] {
            for (int i = 1; i <= per_producer; ++i) {
                m.lock();
                items.push_back(i);
                m.unlock();
                nonempty.notify_all();
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(taken, producers * per_producer);
    EXPECT_EQ(sum, long{producers} * per_producer * (per_producer + 1) / 2);
}

TYPED_TEST(TClockTyped, ConditionWaitWithMayBlock) { cond_queue<TypeParam>(true); }
TYPED_TEST(TClockTyped, ConditionWaitReleasingFirst) { cond_queue<TypeParam>(false); }

// --- tclock_shared --------------------------------------------------------------

TEST(TClockShared, ReadersRunInParallel) {
    tclock_shared rw;
    constexpr int readers = 4;
    std::atomic<int> inside{0};
    std::atomic<int> max_inside{0};
    std::vector<std::thread> ts;
    for (int r = 0; r < readers; ++r)
        ts.emplace_back([&] {
            rw.lock_shared();
            const int n = inside.fetch_add(1) + 1;
            int m = max_inside.load();
            while (n > m && !max_inside.compare_exchange_weak(m, n)) {}
            // Leave only once every reader is inside at the same time: this
            // can only finish if readers hold the lock together.
            while (max_inside.load() < readers) std::this_thread::yield();
            inside.fetch_sub(1);
            rw.unlock_shared();
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(max_inside.load(), readers);
}

TEST(TClockShared, WritersExcludeReadersAndEachOther) {
    tclock_shared rw;
    std::atomic<int> readers_in{0};
    std::atomic<int> writers_in{0};
    std::atomic<int> violations{0};
    shared_lines data;
    std::atomic<std::uint64_t> writes{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < stress_threads; ++t)
        ts.emplace_back([&, t] {
            for (int i = 0; i < stress_iters / 4; ++i) {
                if ((i + t) % 4 == 0) {
                    rw.lock_shared();
                    readers_in.fetch_add(1);
                    if (writers_in.load() != 0) violations.fetch_add(1);
                    const std::uint64_t v = data.l[0].v;
                    for (auto& x : data.l)
                        if (x.v != v) violations.fetch_add(1);
                    readers_in.fetch_sub(1);
                    rw.unlock_shared();
                } else {
                    rw.lock();
                    if (writers_in.fetch_add(1) != 0 || readers_in.load() != 0) violations.fetch_add(1);
                    data.bump();
                    writers_in.fetch_sub(1);
                    rw.unlock();
                    writes.fetch_add(1);
                }
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(violations.load(), 0);
    EXPECT_TRUE(data.consistent(writes.load()));
}

TEST(TClockShared, TryVariants) {
    tclock_shared rw;
    EXPECT_TRUE(rw.try_lock_shared());
    EXPECT_TRUE(rw.try_lock_shared());
    EXPECT_FALSE(rw.try_lock());
    rw.unlock_shared();
    rw.unlock_shared();
    EXPECT_TRUE(rw.try_lock());
    EXPECT_FALSE(rw.try_lock_shared());
    rw.unlock();
}

TEST(TClockShared, HeldExclusiveAndReaders) {
    tclock_shared rw;
    EXPECT_EQ(rw.readers(), 0u);
    rw.lock();
    EXPECT_TRUE(rw.held_exclusive());
    rw.unlock();
    rw.lock_shared();
    rw.lock_shared_reentrant();
    EXPECT_FALSE(rw.held_exclusive());
    EXPECT_EQ(rw.readers(), 2u);
    EXPECT_FALSE(rw.try_lock());
    rw.unlock_shared();
    rw.unlock_shared();
    EXPECT_TRUE(rw.try_lock());
    EXPECT_FALSE(rw.try_lock_shared_reentrant());  // a writer is inside
    rw.unlock();
}

// A reader that holds the lock takes it again while a writer waits for the
// readers to leave: the plain lock_shared would wait behind that writer (which
// waits for this reader); the reentrant one gets in.
TEST(TClockShared, ReentrantReaderEntersPastAWaitingWriter) {
    tclock_shared rw;
    rw.lock_shared();
    std::atomic<bool> wrote{false};
    std::thread writer([&] {
        rw.lock();
        wrote.store(true);
        rw.unlock();
    });
    // The plain try fails once the writer announced itself (ww).
    while (rw.try_lock_shared()) {
        rw.unlock_shared();
        std::this_thread::yield();
    }
    EXPECT_FALSE(wrote.load());
    rw.lock_shared_reentrant();
    EXPECT_TRUE(rw.try_lock_shared_reentrant());
    EXPECT_FALSE(wrote.load());
    rw.unlock_shared();
    rw.unlock_shared();
    rw.unlock_shared();
    writer.join();
    EXPECT_TRUE(wrote.load());
}

TEST(TClockShared, ReentrantReadersWithWritersExclude) {
    tclock_shared rw;
    std::atomic<int> readers_in{0};
    std::atomic<int> writers_in{0};
    std::atomic<int> violations{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < stress_threads; ++t)
        ts.emplace_back([&, t] {
            for (int i = 0; i < stress_iters / 8; ++i) {
                if ((i + t) % 3 != 0) {
                    rw.lock_shared_reentrant();
                    rw.lock_shared_reentrant();  // recursive, as POSIX readers may
                    readers_in.fetch_add(1);
                    if (writers_in.load() != 0) violations.fetch_add(1);
                    readers_in.fetch_sub(1);
                    rw.unlock_shared();
                    rw.unlock_shared();
                } else {
                    rw.lock();
                    if (writers_in.fetch_add(1) != 0 || readers_in.load() != 0) violations.fetch_add(1);
                    writers_in.fetch_sub(1);
                    rw.unlock();
                }
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(violations.load(), 0);
}

// --- misuse -----------------------------------------------------------------------

TEST(TClockMisuseDeathTest, UnlockOfUnlockedLockNamesTheLock) {
#if SPINDLE_DEBUG_CHECKS
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            tclock m;
            m.unlock();
        },
        "spindle: tclock 0x[0-9a-f]+: unlock of an unlocked lock");
    EXPECT_DEATH(
        {
            tclock_blocking m;
            m.unlock();
        },
        "spindle: tclock_blocking 0x[0-9a-f]+: unlock of an unlocked lock");
    EXPECT_DEATH(
        {
            tclock_shared m;
            m.unlock();
        },
        "spindle: tclock_shared 0x[0-9a-f]+: unlock of an unlocked lock");
#else
    GTEST_SKIP() << "misuse checks are off in this build (SPINDLE_DEBUG_CHECKS=0)";
#endif
}

// A delegated section that takes the lock it is delegated for (and has not
// released) would wait for itself; debug builds say so instead.
TEST(TClockMisuseDeathTest, DelegatedSectionRelockingItsLockNamesTheLock) {
#if SPINDLE_DEBUG_CHECKS
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            tclock m;
            queued(m, 3, [&](int i) {
                m.lock();
                if (i == 1) m.lock();  // runs on thread 0, the combiner
                m.unlock();
            });
        },
        "spindle: tclock 0x[0-9a-f]+: lock\\(\\) by a critical section that already holds it");
#else
    GTEST_SKIP() << "misuse checks are off in this build (SPINDLE_DEBUG_CHECKS=0)";
#endif
}

}  // namespace
