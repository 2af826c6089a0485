// spindle::basic_rw_lock (locks/rw_lock.hpp) over several writer locks: the
// layout preload/ relies on (all-zero unlocked, at most 24 bytes), what
// try_read / try_write answer in each state, both writer preferences,
// deadlines that have already passed, the fork child's reset, and reader /
// writer exclusion with more threads than CPUs.
//
// Nothing here measures time: "a writer waits" is observed on the state the
// lock shows (try_read answers busy once a writer-preferring writer claimed
// it), never guessed from a sleep; the deadlines are in the past.
#include <gtest/gtest.h>

// Locks taken and released across lambdas: the static analysis cannot
// follow them (tests/locks/thread_safety_test.cpp checks the annotations).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

#include <atomic>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <spindle/locks/locks.hpp>
#include <spindle/locks/rw_lock.hpp>

namespace {

using spindle::rw_preference;
using spindle::rw_status;

template <class RW>
constexpr bool meets_layout() {
    static_assert(sizeof(RW) <= 24 && alignof(RW) <= 8, "preload/: the 24 bytes before __cur_writer");
    static_assert(std::is_trivially_destructible_v<RW>);
    static_assert(std::is_nothrow_default_constructible_v<RW>);
    static_assert(!std::is_copy_constructible_v<RW>);
    return true;
}

template <class W>
class RwLockTest : public ::testing::Test {};

using writer_locks = ::testing::Types<spindle::ttas_lock, spindle::compact_ticket_lock, spindle::ticket_lock,
                                      spindle::mcs_park_lock, spindle::hemlock, spindle::hemlock_park>;

struct writer_names {
    template <class W>
    static std::string GetName(int) {
        std::string n = W::name;
        return n.substr(n.find("::") + 2);
    }
};

TYPED_TEST_SUITE(RwLockTest, writer_locks, writer_names);

timespec past_deadline(clockid_t c) {
    timespec ts;
    clock_gettime(c, &ts);
    ts.tv_sec -= 1;
    return ts;
}

TYPED_TEST(RwLockTest, ZeroedStorageIsUnlocked) {
    using RW = spindle::basic_rw_lock<TypeParam>;
    static_assert(meets_layout<RW>());
    alignas(RW) unsigned char storage[sizeof(RW)];
    std::memset(storage, 0, sizeof storage);
    RW& rw = *std::launder(reinterpret_cast<RW*>(storage));
    ASSERT_TRUE(rw.try_lock());
    rw.unlock();
    ASSERT_TRUE(rw.try_lock_shared());
    EXPECT_EQ(rw.readers(), 1u);
    rw.unlock_shared();
}

TYPED_TEST(RwLockTest, TryAnswersFollowTheState) {
    spindle::basic_rw_lock<TypeParam> rw;
    // free
    EXPECT_EQ(rw.try_read(), rw_status::acquired);
    EXPECT_EQ(rw.try_read(), rw_status::acquired);  // readers share
    EXPECT_EQ(rw.readers(), 2u);
    // read-held: no writer, of either preference; the readers stay in
    EXPECT_EQ(rw.try_write(rw_preference::readers), rw_status::busy);
    EXPECT_EQ(rw.try_write(rw_preference::writers), rw_status::busy);
    EXPECT_EQ(rw.readers(), 2u);
    // a failed writer-preferring attempt gave its claim up: readers still enter
    EXPECT_EQ(rw.try_read(), rw_status::acquired);
    rw.unlock_shared();
    rw.unlock_shared();
    rw.unlock_shared();
    EXPECT_EQ(rw.readers(), 0u);
    // write-held: nobody else
    EXPECT_EQ(rw.try_write(rw_preference::writers), rw_status::acquired);
    EXPECT_EQ(rw.try_read(), rw_status::busy);
    EXPECT_EQ(rw.try_write(rw_preference::readers), rw_status::busy);
    EXPECT_FALSE(rw.try_lock_shared());
    EXPECT_FALSE(rw.try_lock());
    rw.unlock();
    // free again
    EXPECT_TRUE(rw.try_lock());
    rw.unlock();
}

TYPED_TEST(RwLockTest, StdGuards) {
    spindle::basic_rw_lock<TypeParam> rw;
    {
        std::shared_lock r1(rw);
        std::shared_lock r2(rw);
        EXPECT_EQ(rw.readers(), 2u);
        EXPECT_FALSE(rw.try_lock());
    }
    {
        std::unique_lock w(rw);
        EXPECT_FALSE(rw.try_lock_shared());
    }
    EXPECT_TRUE(rw.try_lock());
    rw.unlock();
}

TYPED_TEST(RwLockTest, PassedDeadlinesTimeOutAndLeaveTheStateAlone) {
    spindle::basic_rw_lock<TypeParam> rw;
    for (clockid_t c : {CLOCK_REALTIME, CLOCK_MONOTONIC}) {
        const timespec past = past_deadline(c);
        // free: a deadline does not matter when nothing waits
        ASSERT_EQ(rw.read_until(c, &past), rw_status::acquired);
        // read-held: a writer of either preference times out, readers stay
        EXPECT_EQ(rw.write_until(rw_preference::readers, c, &past), rw_status::timed_out);
        bool waited = false;
        EXPECT_EQ(rw.write_until(rw_preference::writers, c, &past, &waited), rw_status::timed_out);
        EXPECT_TRUE(waited);
        EXPECT_EQ(rw.try_read(), rw_status::acquired);
        rw.unlock_shared();
        rw.unlock_shared();
        // write-held: a reader times out
        ASSERT_EQ(rw.write_until(rw_preference::readers, c, &past, &waited), rw_status::acquired);
        EXPECT_FALSE(waited);
        EXPECT_EQ(rw.read_until(c, &past), rw_status::timed_out);
        EXPECT_EQ(rw.write_until(rw_preference::writers, c, &past), rw_status::timed_out);
        rw.unlock();
        EXPECT_TRUE(rw.try_lock());
        rw.unlock();
    }
}

// A writer preferring writers stops new readers as soon as it holds the
// writers' lock, then waits for the reader inside.
TYPED_TEST(RwLockTest, WriterPreferringWriterStopsNewReaders) {
    spindle::basic_rw_lock<TypeParam> rw;
    ASSERT_EQ(rw.try_read(), rw_status::acquired);
    std::atomic<bool> in{false};
    std::thread w([&] {
        ASSERT_EQ(rw.write_until(rw_preference::writers, CLOCK_REALTIME, nullptr), rw_status::acquired);
        in.store(true);
        rw.unlock();
    });
    // Until the writer claims the lock, new readers get in (and leave).
    for (;;) {
        const rw_status r = rw.try_read();
        if (r == rw_status::busy) break;
        ASSERT_EQ(r, rw_status::acquired);
        rw.unlock_shared();
        std::this_thread::yield();
    }
    EXPECT_FALSE(in.load());  // our read lock keeps it out
    EXPECT_EQ(rw.readers(), 1u);
    rw.unlock_shared();  // the last reader leaves: the writer goes in
    w.join();
    EXPECT_TRUE(in.load());
    EXPECT_TRUE(rw.try_lock_shared());
    rw.unlock_shared();
}

// A reader-preferring writer that waits lets readers in: a thread holding a
// read lock may take another.
TYPED_TEST(RwLockTest, ReaderPreferringWriterLetsReadersIn) {
    spindle::basic_rw_lock<TypeParam> rw;
    rw.lock_shared();
    std::atomic<bool> started{false}, in{false};
    std::thread w([&] {
        started.store(true);
        rw.lock();
        in.store(true);
        rw.unlock();
    });
    while (!started.load()) std::this_thread::yield();
    for (int i = 0; i < 100; ++i) {  // whether or not the writer waits yet
        ASSERT_EQ(rw.try_read(), rw_status::acquired);
        rw.unlock_shared();
    }
    EXPECT_FALSE(in.load());
    rw.unlock_shared();
    w.join();
    EXPECT_TRUE(in.load());
}

// The fork child's release of a write lock: free and empty afterwards.
TYPED_TEST(RwLockTest, ResetExclusiveFreesTheLock) {
    spindle::basic_rw_lock<TypeParam> rw;
    rw.lock();
    rw.reset_exclusive();
    EXPECT_EQ(rw.try_read(), rw_status::acquired);
    rw.unlock_shared();
    EXPECT_TRUE(rw.try_lock());
    rw.unlock();
}

// Readers share, writers exclude everybody: counted in the sections.
TYPED_TEST(RwLockTest, ReadersAndWritersExclude) {
    spindle::basic_rw_lock<TypeParam> rw;
#if SPINDLE_TSAN
    constexpr int kThreads = 4, kIters = 200;
#else
    constexpr int kThreads = 8, kIters = 2000;
#endif
    std::atomic<int> readers_in{0}, writers_in{0};
    std::atomic<int> bad{0}, max_readers{0};
    long a = 0, b = 0;  // written by writers only, a == b outside their sections
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            const auto pref = (t % 2) ? rw_preference::writers : rw_preference::readers;
            for (int i = 0; i < kIters; ++i) {
                if ((i + t) % 4 == 0) {
                    if (i % 3 == 0) {
                        while (rw.try_write(pref) != rw_status::acquired) std::this_thread::yield();
                    } else {
                        ASSERT_EQ(rw.write_until(pref, CLOCK_MONOTONIC, nullptr), rw_status::acquired);
                    }
                    if (writers_in.fetch_add(1) != 0 || readers_in.load() != 0) bad.fetch_add(1);
                    ++a;
                    ++b;
                    writers_in.fetch_sub(1);
                    rw.unlock();
                } else {
                    if (i % 5 == 0) {
                        while (!rw.try_lock_shared()) std::this_thread::yield();
                    } else {
                        rw.lock_shared();
                    }
                    const int n = readers_in.fetch_add(1) + 1;
                    int m = max_readers.load();
                    while (n > m && !max_readers.compare_exchange_weak(m, n)) {
                    }
                    if (writers_in.load() != 0 || a != b) bad.fetch_add(1);
                    readers_in.fetch_sub(1);
                    rw.unlock_shared();
                }
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(bad.load(), 0);
    long writes = 0;
    for (int t = 0; t < kThreads; ++t)
        for (int i = 0; i < kIters; ++i) writes += ((i + t) % 4 == 0);
    EXPECT_EQ(a, writes);
    EXPECT_EQ(b, writes);
    EXPECT_EQ(rw.readers(), 0u);
    EXPECT_TRUE(rw.try_lock());
    rw.unlock();
}

TEST(RwLock, UnlockSharedOfUnheldLockAborts) {
#if SPINDLE_DEBUG_CHECKS
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            spindle::rw_lock rw;
            rw.unlock_shared();
        },
        "spindle::rw_lock 0x[0-9a-f]+: unlock_shared\\(\\) of a lock not held shared");
#else
    GTEST_SKIP() << "misuse checks are off in this build";
#endif
}

}  // namespace
