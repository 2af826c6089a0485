// The thread locks of locks/, every one of them (spin and park variants):
// the layout contract preload/ relies on (all-zero is unlocked, <= 16
// bytes, <= 8-aligned, trivially destructible, noexcept), mutual exclusion
// with more threads than CPUs, try_lock mixed in, several locks held at once
// and released in any order, FIFO admission where promised, the std guards,
// misuse deaths in debug builds, locks taken during thread exit, and the
// MCS/CLH node pool losing no node to exiting threads.
//
// Nothing here measures time: a slow or loaded machine makes the tests
// slower, never failing. "Queued" is observed on the lock's arrival word
// (detail::lock_probe below), never guessed from a sleep.
#include <gtest/gtest.h>

// These tests take and release locks across lambdas and on purpose wrongly
// (death tests): Clang's static lock analysis cannot follow that, so it is
// off for this file (it checks the library itself).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <pthread.h>
#include <sched.h>

#include <spindle/locks/locks.hpp>

#include "../support/lock_probe.hpp"

namespace {

using spindle::detail::lock_probe;

// ---- the contract, at compile time -------------------------------------------------

template <class L>
constexpr bool meets_layout_contract() {
    static_assert(sizeof(L) <= 16, "the pthread_mutex_t contract: at most 16 bytes");
    static_assert(alignof(L) <= 8, "the pthread_mutex_t contract: at most 8-aligned");
    static_assert(sizeof(L) <= sizeof(pthread_mutex_t) && alignof(L) <= alignof(pthread_mutex_t));
    static_assert(std::is_trivially_destructible_v<L>);
    static_assert(std::is_nothrow_default_constructible_v<L>);
    static_assert(noexcept(std::declval<L&>().lock()) && noexcept(std::declval<L&>().unlock()) &&
                  noexcept(std::declval<L&>().try_lock()));
    static_assert(!std::is_copy_constructible_v<L> && !std::is_copy_assignable_v<L>);
    return true;
}

template <class... Ls>
constexpr bool all_meet_layout_contract() {
    return (meets_layout_contract<Ls>() && ...);
}

#define SPINDLE_ALL_LOCKS                                                                                 \
    spindle::tas_lock, spindle::tas_park_lock, spindle::ttas_lock, spindle::ttas_park_lock,             \
        spindle::ticket_lock, spindle::ticket_park_lock, spindle::compact_ticket_lock, spindle::mcs_lock, \
        spindle::mcs_park_lock,                                                                         \
        spindle::clh_lock, spindle::clh_park_lock, spindle::hemlock, spindle::hemlock_park,             \
        spindle::hemlock_naive, spindle::hemlock_naive_park, spindle::hemlock_overlap,                  \
        spindle::hemlock_overlap_park, spindle::hemlock_aho, spindle::hemlock_aho_park

static_assert(all_meet_layout_contract<SPINDLE_ALL_LOCKS>());

// A zero-initialized global of every type: the constructors are constexpr.
template <class L>
constinit L g_static_lock;

// ---- test parameters ----------------------------------------------------------------

// The CPUs this process may run on (its affinity mask, not the machine's).
[[maybe_unused]] int usable_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return 2;
    return CPU_COUNT(&set);
}

// More threads than CPUs, on purpose: 8, or twice the usable CPUs where
// there are more than 4 (at most 32). Sanitizers make every operation slower
// and TSan tracks each thread, so they get fewer.
#if SPINDLE_TSAN
const int kThreads = 4;
constexpr int kIters = 150;
#elif SPINDLE_ASAN || !defined(__OPTIMIZE__)
const int kThreads = std::clamp(2 * usable_cpus(), 8, 32);
constexpr int kIters = 200;
#else
const int kThreads = std::clamp(2 * usable_cpus(), 8, 32);
constexpr int kIters = 1000;
#endif

// Starts n threads running f(index) together, and joins them.
template <class F>
void run_threads(int n, F f) {
    std::atomic<int> ready{0};
    std::vector<std::thread> ts;
    ts.reserve(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t)
        ts.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < n) std::this_thread::yield();
            f(t);
        });
    for (auto& t : ts) t.join();
}

template <class L>
class LockTest : public ::testing::Test {};

struct lock_names {
    template <class L>
    static std::string GetName(int) {
        std::string n = L::name;
        return n.substr(n.find("::") + 2);
    }
};

using all_locks = ::testing::Types<SPINDLE_ALL_LOCKS>;
TYPED_TEST_SUITE(LockTest, all_locks, lock_names);

// ---- basic behaviour ----------------------------------------------------------------

TYPED_TEST(LockTest, TryLockReflectsState) {
    TypeParam l;
    ASSERT_TRUE(l.try_lock());
    EXPECT_FALSE(l.try_lock());
    bool other = true;
    std::thread([&] { other = l.try_lock(); }).join();
    EXPECT_FALSE(other);
    l.unlock();
    std::thread([&] {
        other = l.try_lock();
        if (other) l.unlock();
    }).join();
    EXPECT_TRUE(other);
    l.lock();
    l.unlock();
}

// The preload/ contract: a zeroed pthread_mutex_t, never constructed, is an
// unlocked lock -- for this thread and for others.
TYPED_TEST(LockTest, ZeroedMutexStorageIsUnlocked) {
    pthread_mutex_t storage = PTHREAD_MUTEX_INITIALIZER;
    static const unsigned char zeros[sizeof(pthread_mutex_t)] = {};
    ASSERT_EQ(std::memcmp(&storage, zeros, sizeof storage), 0) << "PTHREAD_MUTEX_INITIALIZER is all-zero on glibc";
    auto& l = *std::launder(reinterpret_cast<TypeParam*>(&storage));
    ASSERT_TRUE(l.try_lock());
    EXPECT_FALSE(l.try_lock());
    l.unlock();

    alignas(8) unsigned char raw[16];
    std::memset(raw, 0, sizeof raw);
    auto& z = *std::launder(reinterpret_cast<TypeParam*>(raw));
    long counter = 0;
    run_threads(2, [&](int) {
        for (int i = 0; i < kIters; ++i) {
            z.lock();
            ++counter;
            z.unlock();
        }
    });
    EXPECT_EQ(counter, 2L * kIters);
    ASSERT_TRUE(z.try_lock());
    z.unlock();
}

TYPED_TEST(LockTest, ConstinitGlobalWorks) {
    auto& l = g_static_lock<TypeParam>;
    l.lock();
    EXPECT_FALSE(l.try_lock());
    l.unlock();
    ASSERT_TRUE(l.try_lock());
    l.unlock();
}

TYPED_TEST(LockTest, StdGuards) {
    TypeParam a, b;
    {
        std::lock_guard g(a);
        EXPECT_FALSE(a.try_lock());
    }
    {
        std::scoped_lock g(a, b);  // std::lock's try-and-back-off over two of them
        EXPECT_FALSE(a.try_lock());
        EXPECT_FALSE(b.try_lock());
    }
    {
        std::unique_lock u(a, std::try_to_lock);
        EXPECT_TRUE(u.owns_lock());
        std::unique_lock v(a, std::try_to_lock);
        EXPECT_FALSE(v.owns_lock());
        u.unlock();
        u.lock();
    }
    std::scoped_lock g(a, g_static_lock<spindle::hemlock>);  // two different lock types
}

// ---- stress ----------------------------------------------------------------------------

// A plain counter under the lock must come out exact, and nobody may find
// another thread inside. The holder yields now and then so that waiters pile
// up behind it (threads outnumber CPUs).
TYPED_TEST(LockTest, MutualExclusion) {
    TypeParam l;
    long counter = 0;
    int inside = 0;
    std::atomic<int> overlaps{0};
    run_threads(kThreads, [&](int) {
        for (int i = 0; i < kIters; ++i) {
            std::lock_guard g(l);
            if (++inside != 1) overlaps.fetch_add(1);
            ++counter;
            if (i % 64 == 0) std::this_thread::yield();
            --inside;
        }
    });
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_EQ(counter, long{kThreads} * kIters);
}

// lock() and unlock() leave errno alone, as glibc's pthread_mutex_* do: a
// program may take a mutex between a failed call and its read of errno. The
// futex calls of the park variants fail with EAGAIN in normal use (the word
// changed before the wait); libc's syscall() would store that in errno.
// Threads outnumber CPUs and holders yield, so waiters sleep and wake.
TYPED_TEST(LockTest, ErrnoIsLeftAlone) {
    TypeParam l;
    long counter = 0;
    std::atomic<int> changed{0};
    run_threads(kThreads, [&](int t) {
        const int mine = 1000 + t;
        for (int i = 0; i < kIters / 4; ++i) {
            errno = mine;
            l.lock();
            if (errno != mine) changed.fetch_add(1, std::memory_order_relaxed);
            ++counter;
            if (i % 16 == 0) std::this_thread::yield();
            errno = mine;
            l.unlock();
            if (errno != mine) changed.fetch_add(1, std::memory_order_relaxed);
        }
    });
    EXPECT_EQ(changed.load(), 0);
    EXPECT_EQ(counter, long{kThreads} * (kIters / 4));
}

TYPED_TEST(LockTest, TryLockMixedWithLock) {
    TypeParam l;
    long counter = 0;
    std::atomic<long> entries{0};
    run_threads(kThreads, [&](int t) {
        for (int i = 0; i < kIters; ++i) {
            if ((i + t) % 3 == 0) {
                if (!l.try_lock()) continue;
            } else {
                l.lock();
            }
            ++counter;
            l.unlock();
            entries.fetch_add(1, std::memory_order_relaxed);
        }
    });
    EXPECT_EQ(counter, entries.load());
    EXPECT_GE(counter, long{kThreads} * (kIters * 2 / 3));
}

// Each thread takes a random subset of the locks (in index order: no
// deadlock), and releases them in a random order. Every lock's counter must
// come out exact. Hemlock: a thread holding several contended locks has a
// successor for each polling its one Grant (multi-waiting). MCS/CLH: a node
// per held lock, returned out of order.
TYPED_TEST(LockTest, SeveralLocksReleasedInAnyOrder) {
    constexpr int kLocks = 5;
    TypeParam locks[kLocks];
    long counters[kLocks] = {};
    std::atomic<long> taken[kLocks] = {};
    run_threads(kThreads, [&](int t) {
        std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
        std::vector<int> held;
        for (int i = 0; i < kIters; ++i) {
            held.clear();
            for (int k = 0; k < kLocks; ++k)
                if (rng() % 2 == 0 || (i % 16 == 0 && t == 0)) held.push_back(k);  // thread 0: now and then all of them
            for (int k : held) {
                if (i % 5 == 0) {
                    while (!locks[k].try_lock()) std::this_thread::yield();
                } else {
                    locks[k].lock();
                }
            }
            for (int k : held) {
                ++counters[k];
                taken[k].fetch_add(1, std::memory_order_relaxed);
            }
            if (i % 32 == 0) std::this_thread::yield();  // others queue behind the held locks
            std::shuffle(held.begin(), held.end(), rng);
            for (int k : held) locks[k].unlock();
        }
    });
    for (int k = 0; k < kLocks; ++k) EXPECT_EQ(counters[k], taken[k].load()) << "lock " << k;
}

// One thread holds many locks at once; each has a waiter queued behind it.
// Released in an order that is neither lock order nor its reverse.
TYPED_TEST(LockTest, OneThreadHoldsManyContendedLocks) {
    constexpr int kLocks = 6;
    TypeParam locks[kLocks];
    int done[kLocks] = {};
    for (auto& l : locks) l.lock();
    std::vector<std::thread> waiters;
    for (int k = 0; k < kLocks; ++k) {
        [[maybe_unused]] std::uintptr_t before = 0;
        if constexpr (TypeParam::is_fifo) before = lock_probe::arrivals(locks[k]);
        waiters.emplace_back([&, k] {
            locks[k].lock();
            ++done[k];
            locks[k].unlock();
        });
        // FIFO locks: wait until it is queued, so that all six wait at once.
        if constexpr (TypeParam::is_fifo)
            while (lock_probe::arrivals(locks[k]) == before) std::this_thread::yield();
    }
    std::this_thread::yield();
    for (int k : {3, 0, 5, 1, 4, 2}) locks[k].unlock();
    for (auto& w : waiters) w.join();
    for (int k = 0; k < kLocks; ++k) EXPECT_EQ(done[k], 1);
    for (auto& l : locks) {
        ASSERT_TRUE(l.try_lock());
        l.unlock();
    }
}

// ---- FIFO --------------------------------------------------------------------------------

// The lock is held; threads arrive one at a time, each started only once
// the previous one is visibly queued (the arrival word moved); then the lock
// is released. They must get in in arrival order.
TYPED_TEST(LockTest, FifoAdmission) {
    if constexpr (!TypeParam::is_fifo) {
        GTEST_SKIP() << TypeParam::name << " does not promise FIFO";
    } else {
        constexpr int kWaiters = 6;
        for (int round = 0; round < 3; ++round) {
            TypeParam l;
            std::vector<int> order;
            l.lock();
            std::vector<std::thread> ts;
            for (int k = 0; k < kWaiters; ++k) {
                const std::uintptr_t before = lock_probe::arrivals(l);
                ts.emplace_back([&, k] {
                    l.lock();
                    order.push_back(k);
                    l.unlock();
                });
                while (lock_probe::arrivals(l) == before) std::this_thread::yield();
            }
            l.unlock();
            for (auto& t : ts) t.join();
            std::vector<int> expected(kWaiters);
            for (int k = 0; k < kWaiters; ++k) expected[static_cast<std::size_t>(k)] = k;
            EXPECT_EQ(order, expected) << "round " << round;
        }
    }
}

// The park twins let a running thread overtake the queue (barging), but a
// queued waiter must still get in: two threads relock the lock back to back
// without pause, while waiters queue one after another and each must be let
// in (the gate hands the lock to a head that has waited for 1 ms). The test
// would hang, not fail, if a waiter starved; there is no time limit in it.
TYPED_TEST(LockTest, BargingDoesNotStarveQueuedWaiters) {
    if constexpr (!requires { TypeParam::barges; }) {
        GTEST_SKIP() << TypeParam::name << " has no park gate";
    } else {
        TypeParam l;
        std::atomic<bool> stop{false};
        std::atomic<long> relocks{0};
        long counter = 0;
        std::vector<std::thread> hogs;
        for (int h = 0; h < 2; ++h)
            hogs.emplace_back([&] {
                while (!stop.load(std::memory_order_relaxed)) {
                    l.lock();
                    ++counter;
                    l.unlock();
                    relocks.fetch_add(1, std::memory_order_relaxed);
                }
            });
        // Let the hogs run first, so the waiters find the lock contended.
        while (relocks.load(std::memory_order_relaxed) < 1000) std::this_thread::yield();
        constexpr int kWaiters = 4;
        int admitted = 0;
        std::vector<std::thread> waiters;
        for (int k = 0; k < kWaiters; ++k)
            waiters.emplace_back([&] {
                for (int i = 0; i < 3; ++i) {
                    l.lock();
                    ++admitted;
                    ++counter;
                    l.unlock();
                }
            });
        for (auto& w : waiters) w.join();
        stop.store(true);
        for (auto& h : hogs) h.join();
        EXPECT_EQ(admitted, kWaiters * 3);
        EXPECT_EQ(counter, relocks.load() + kWaiters * 3);
    }
}

// The handoff itself, step by step (the handoff delay set to 0, so a head
// that has slept once asks for it): the main thread holds the lock; a
// waiter becomes the queue head and sleeps on the gate (its `sleeps` bit
// shows). The main thread then wakes it without releasing the lock (a
// spurious wake-up, a FUTEX_WAKE on the gate word): the head finds the gate
// held, asks for the handoff and sleeps again (`handoff` shows). The next
// unlock must pass the gate to it, so the main thread's immediate relock
// cannot overtake it: when that relock returns, the waiter has run.
TYPED_TEST(LockTest, ParkGateHandsTheLockToAStarvingHead) {
    if constexpr (!requires { TypeParam::barges; }) {
        GTEST_SKIP() << TypeParam::name << " has no park gate";
    } else {
        struct restore {
            std::int64_t old = spindle::detail::park_gate_handoff_after_ns.load();
            ~restore() { spindle::detail::park_gate_handoff_after_ns.store(old); }
        } r;
        spindle::detail::park_gate_handoff_after_ns.store(0);
        TypeParam l;
        std::vector<int> order;  // written under the lock
        l.lock();
        std::thread waiter([&] {
            l.lock();
            order.push_back(1);
            l.unlock();
        });
        while ((lock_probe::gate(l) & lock_probe::gate_sleeps) == 0) std::this_thread::yield();
        while ((lock_probe::gate(l) & lock_probe::gate_handoff) == 0) {
            spindle::detail::futex_wake(lock_probe::gate_word(l), 1);
            std::this_thread::yield();
        }
        const std::uint64_t before = spindle::detail::park_gate_handoffs.load();
        l.unlock();
        l.lock();
        EXPECT_EQ(order, std::vector<int>{1}) << "the relock overtook a head that had asked for the handoff";
        EXPECT_EQ(spindle::detail::park_gate_handoffs.load(), before + 1);
        l.unlock();
        waiter.join();
    }
}

// The last holder may free the lock as soon as its unlock() returns (a
// reference count dropped to zero under the lock; a pthread_mutex_t in the
// preload library is freed this way): no unlock may touch the lock's memory
// after the release that lets the next holder in -- only a futex wake may
// name it. The freed memory is scribbled over first, and ASan reports any
// access to it. Not for hemlock_aho, whose header says so.
TYPED_TEST(LockTest, LastHolderMayFreeTheLock) {
    if constexpr (std::is_same_v<TypeParam, spindle::hemlock_aho>) {
        GTEST_SKIP() << TypeParam::name << " may touch the lock after the next holder has it";
    } else {
        constexpr int kThreads = 4;
        // Two busy threads make preemption inside unlock() likely (the
        // window in which a late access would happen).
        std::atomic<bool> stop{false};
        std::vector<std::thread> busy;
        for (int b = 0; b < 2; ++b)
            busy.emplace_back([&] {
                while (!stop.load(std::memory_order_relaxed)) spindle::arch::cpu_relax();
            });
        for (int round = 0; round < 500; ++round) {
            struct object {
                TypeParam lock;
                int refs = kThreads;
            };
            auto* o = new object;
            std::vector<std::thread> ts;
            for (int t = 0; t < kThreads; ++t)
                ts.emplace_back([o] {
                    o->lock.lock();
                    const bool last = --o->refs == 0;
                    o->lock.unlock();
                    if (last) {
                        std::memset(static_cast<void*>(o), 0xa5, sizeof *o);
                        delete o;
                    }
                });
            for (auto& t : ts) t.join();
        }
        stop.store(true);
        for (auto& b : busy) b.join();
    }
}

// ---- misuse (debug builds) --------------------------------------------------------------

TYPED_TEST(LockTest, UnlockOfUnlockedLockAborts) {
#if SPINDLE_DEBUG_CHECKS
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const std::string pattern =
        std::string(TypeParam::name) + " 0x[0-9a-f]+: unlock\\(\\) of a lock that is not locked";
    EXPECT_DEATH(
        {
            TypeParam l;
            l.unlock();
        },
        pattern);
    EXPECT_DEATH(
        {
            TypeParam l;
            l.lock();
            l.unlock();
            l.unlock();
        },
        pattern);
#else
    GTEST_SKIP() << "misuse checks are off in this build";
#endif
}

template <class L>
class HemlockTest : public ::testing::Test {};
using hemlocks = ::testing::Types<spindle::hemlock, spindle::hemlock_park, spindle::hemlock_naive,
                                  spindle::hemlock_naive_park, spindle::hemlock_overlap,
                                  spindle::hemlock_overlap_park, spindle::hemlock_aho, spindle::hemlock_aho_park>;
TYPED_TEST_SUITE(HemlockTest, hemlocks, lock_names);

// The park twins' gate names no holder: there a relock is undetected (a
// deadlock), as for tas_park_lock.
TYPED_TEST(HemlockTest, RelockByHolderAborts) {
    if constexpr (TypeParam::parks) {
        GTEST_SKIP() << TypeParam::name << " does not detect a relock";
        return;
    }
#if SPINDLE_DEBUG_CHECKS
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            TypeParam l;
            l.lock();
            l.lock();
        },
        std::string(TypeParam::name) + " 0x[0-9a-f]+: lock\\(\\) of a lock the calling thread holds");
#else
    GTEST_SKIP() << "misuse checks are off in this build";
#endif
}

// Overlap leaves its Grant full when unlock() returns; a thread that exits
// right after a contended unlock must wait for its successor's
// acknowledgement (the thread-exit hook) before its Grant goes away.
TYPED_TEST(HemlockTest, ThreadExitsRightAfterContendedUnlock) {
    for (int round = 0; round < 20; ++round) {
        TypeParam l;
        std::atomic<bool> holding{false};
        int value = 0;
        std::thread holder([&] {
            l.lock();
            const std::uintptr_t mine = lock_probe::arrivals(l);
            holding.store(true);
            while (lock_probe::arrivals(l) == mine) std::this_thread::yield();  // the waiter has queued
            value = 1;
            l.unlock();  // contended: overlap returns before the acknowledgement...
        });  // ... and the thread exits at once
        while (!holding.load()) std::this_thread::yield();
        std::thread waiter([&] {
            l.lock();
            EXPECT_EQ(value, 1);
            l.unlock();
        });
        holder.join();
        waiter.join();
    }
}

// ---- thread exit ----------------------------------------------------------------------------

spindle::mcs_lock g_exit_mcs;
spindle::clh_park_lock g_exit_clh;
spindle::hemlock_overlap g_exit_overlap;
spindle::hemlock g_exit_hemlock;

void lock_everything_once() {
    g_exit_mcs.lock();
    g_exit_clh.lock();
    g_exit_overlap.lock();
    g_exit_hemlock.lock();
    g_exit_overlap.unlock();
    g_exit_mcs.unlock();
    g_exit_hemlock.unlock();
    g_exit_clh.unlock();
}

struct locks_in_destructor {
    ~locks_in_destructor() { lock_everything_once(); }
};

// Other libraries' TLS destructors and pthread key destructors may lock,
// before and after the locks' own exit hook has run; then the MCS/CLH node
// pool must still account for every node: all nodes are in the pool or in
// the (main) thread's cache once the other threads have exited.
TEST(LockThreadExit, LocksTakenDuringThreadExitLeaveNoNodeBehind) {
    lock_everything_once();  // the locks' own pthread key exists from here on
    pthread_key_t later_key;  // created after it: its destructor runs after the locks' hook
    ASSERT_EQ(pthread_key_create(&later_key, [](void*) { lock_everything_once(); }), 0);
    run_threads(kThreads, [&](int t) {
        static thread_local locks_in_destructor tls_user;
        (void)&tls_user;
        pthread_setspecific(later_key, &later_key);
        for (int i = 0; i < kIters / 4; ++i) {
            if ((i + t) % 4 == 0) std::this_thread::yield();
            lock_everything_once();
        }
    });
    pthread_key_delete(later_key);
    const auto s = spindle::detail::queue_node_pool_stats();
    EXPECT_EQ(s.carved - s.pooled, spindle::detail::tl_node_cache.count)
        << "carved " << s.carved << ", pooled " << s.pooled;
}

// Threads come and go, each holding several MCS/CLH locks and inheriting CLH
// nodes from the others; nodes must come back to the pool when they exit, so
// that the next threads reuse them instead of carving new ones.
TEST(LockThreadExit, ShortLivedThreadsReturnTheirNodes) {
    spindle::clh_lock clh[3];
    spindle::mcs_park_lock mcs[3];
    auto work = [&](int t) {
        for (int i = 0; i < 50; ++i) {
            for (auto& l : clh) l.lock();
            for (auto& l : mcs) l.lock();
            if ((i + t) % 8 == 0) std::this_thread::yield();
            for (int k : {1, 0, 2}) mcs[k].unlock();
            for (int k : {2, 0, 1}) clh[k].unlock();
        }
    };
    run_threads(4, work);  // warm the pool
    const std::size_t carved_before = spindle::detail::queue_node_pool_stats().carved;
    for (int round = 0; round < 40; ++round) run_threads(4, work);
    const auto s = spindle::detail::queue_node_pool_stats();
    EXPECT_EQ(s.carved - s.pooled, spindle::detail::tl_node_cache.count);
    // 160 threads have come and gone; leaking only their caches would have
    // needed thousands of nodes. One more chunk may be carved when several
    // threads find the pool empty at once.
    EXPECT_LE(s.carved - carved_before, 2 * 256u) << "carved " << s.carved << " (before: " << carved_before << ")";
}

}  // namespace
