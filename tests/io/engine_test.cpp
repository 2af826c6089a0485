// The runtime side of the I/O layer: sleeping, and the deadlines of the
// sync primitives' timed waits, on a worker's own timer heap, a
// worker whose fibers never suspend still moving I/O, and a
// worker that watches its ring before it sleeps (scheduler::options::io_spin).
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <spindle/io.hpp>
#include <spindle/runtime/scheduler.hpp>
#include <spindle/runtime/detail/timer.hpp>
#include <spindle/sync/condition_variable.hpp>
#include <spindle/sync/counting_semaphore.hpp>
#include <spindle/sync/event.hpp>
#include <spindle/sync/mutex.hpp>

#include "io_support.hpp"

namespace {

namespace io = spindle::io;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

using spindle::test::make_engines;

TEST(IoEngine, SleepsEndNoEarlierThanAskedInDeadlineOrder) {
    spindle::scheduler s({.workers = 1});
    make_engines(s);
    std::vector<int> order;
    std::vector<spindle::fiber> fs;
    // Spawned in reverse order of their deadlines, all measured from one
    // start (a fiber that starts late on a loaded machine must not move its
    // own deadline): they must end in deadline order.
    const auto t0 = steady::now();
    for (int i = 4; i >= 0; --i)
        fs.push_back(s.spawn([&, i] {
            const auto t = t0 + std::chrono::milliseconds(20 + 20 * i);
            EXPECT_TRUE(spindle::this_fiber::sleep_until(t));
            EXPECT_GE(steady::now(), t);
            order.push_back(i);  // one worker: no race
        }));
    for (auto& f : fs) f.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(IoEngine, ManySleepersOnOneWorkerAllWake) {
    spindle::scheduler s({.workers = 2});
    make_engines(s);
    std::atomic<int> woke{0};
    std::vector<spindle::fiber> fs;
    for (int i = 0; i < 2000; ++i)
        fs.push_back(s.spawn([&, i] {
            for (int r = 0; r < 3; ++r) EXPECT_TRUE(spindle::this_fiber::sleep_for(std::chrono::microseconds(i % 200)));
            ++woke;
        }));
    for (auto& f : fs) f.join();
    EXPECT_EQ(woke.load(), 2000);
}

TEST(IoEngine, StopEndsASleepOnTheEngine) {
    spindle::scheduler s({.workers = 2});
    make_engines(s);
    for (int round = 0; round < 20; ++round) {
        std::atomic<bool> started{false};
        bool slept = true;
        auto f = s.spawn([&] {
            started = true;
            slept = spindle::this_fiber::sleep_for(1h);
        });
        while (!started) std::this_thread::yield();
        if (round % 2 == 0) std::this_thread::sleep_for(1ms);  // asleep for sure, or racing the sleep
        f.request_stop();
        f.join();
        EXPECT_FALSE(slept);
    }
}

TEST(IoEngine, TimedWaitsTimeOutOnTheWorkersHeap) {
    spindle::scheduler s({.workers = 1});
    make_engines(s);
    spindle::counting_semaphore<> sem(0);
    spindle::mutex m;
    spindle::condition_variable cv;
    spindle::mutex cvm;  // cv's (one mutex per condition variable at a time)
    std::atomic<bool> held{false};
    std::atomic<bool> release_m{false};
    auto holder = s.spawn([&] {
        m.lock();
        held = true;
        while (!release_m) spindle::this_fiber::sleep_for(1ms);
        m.unlock();
    });
    while (!held) std::this_thread::yield();
    std::vector<spindle::fiber> fs;
    std::atomic<int> done{0};
    // Deadlines in the reverse order of the spawns, and three primitives.
    for (int i = 0; i < 30; ++i)
        fs.push_back(s.spawn([&, i] {
            const auto d = std::chrono::microseconds(3000 - 50 * i);
            const auto t0 = steady::now();
            switch (i % 3) {
            case 0: EXPECT_FALSE(sem.try_acquire_for(d)); break;
            case 1: EXPECT_FALSE(m.try_lock_for(d)); break;
            case 2: {
                std::unique_lock lk(cvm);
                EXPECT_EQ(cv.wait_for(lk, d), spindle::cv_status::timeout);
                break;
            }
            }
            EXPECT_GE(steady::now() - t0, d);
            ++done;
        }));
    for (auto& f : fs) f.join();
    EXPECT_EQ(done.load(), 30);
    release_m = true;
    holder.join();
}

// A timed wait's deadline goes to the worker's heap, on either backend, not
// to the timer thread (whose earliest deadline stays "none").
TEST(IoEngine, ATimedWaitOnTheHeapLeavesTheTimerThreadAlone) {
    spindle::scheduler s({.workers = 1});
    make_engines(s);
    spindle::counting_semaphore<> sem(0);
    std::atomic<bool> waiting{false};
    auto f = s.spawn([&] {
        waiting = true;
        EXPECT_TRUE(sem.try_acquire_for(1h));
    });
    while (!waiting) std::this_thread::yield();
    std::this_thread::sleep_for(2ms);  // parked by now, or about to be: either way the deadline is armed
    EXPECT_EQ(spindle::detail::timer_earliest(), steady::time_point::max());
    sem.release();
    f.join();
}

// The same for a sleep and for a socket read with a deadline: on io_uring
// the read's deadline is a timeout linked to it in the ring, on epoll a
// deadline on the worker's heap. The read gets its byte, the sleep ends at
// its stop request, and neither went through the timer thread.
TEST(IoEngine, SleepsAndReadDeadlinesLeaveTheTimerThreadAlone) {
    spindle::scheduler s({.workers = 1});
    make_engines(s);
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    io::stream a(sv[0]), b(sv[1]);
    std::atomic<int> waiting{0};
    bool slept = true;
    auto sleeper = s.spawn([&] {
        waiting.fetch_add(1);
        slept = spindle::this_fiber::sleep_for(1h);
    });
    char got = 0;
    auto reader = s.spawn([&] {
        waiting.fetch_add(1);
        auto n = b.read_some(&got, 1, io::timeout(1h));
        ASSERT_TRUE(n);
        EXPECT_EQ(*n, 1u);
    });
    while (waiting.load() < 2) std::this_thread::yield();
    std::this_thread::sleep_for(2ms);  // both parked by now, or about to be: their deadlines are armed
    EXPECT_EQ(spindle::detail::timer_earliest(), steady::time_point::max());
    ASSERT_FALSE(a.write_all("x", 1));
    reader.join();
    EXPECT_EQ(got, 'x');
    sleeper.request_stop();
    sleeper.join();
    EXPECT_FALSE(slept);
}

// Deadlines that pass on the heap: each read times out, no earlier than
// asked, and the socket still works afterwards.
TEST(IoEngine, ReadDeadlinesOnTheHeapTimeOut) {
    spindle::scheduler s({.workers = 2});
    make_engines(s);
    std::vector<spindle::fiber> fs;
    for (int i = 0; i < 4; ++i)
        fs.push_back(s.spawn([&, i] {
            int p[2];
            ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, p), 0);
            io::stream x(p[0]), y(p[1]);
            for (int r = 0; r < 5; ++r) {
                const auto t0 = steady::now();
                char c = 0;
                auto n = y.read_some(&c, 1, io::timeout(std::chrono::milliseconds(2 + i)));
                ASSERT_FALSE(n);
                EXPECT_EQ(n.error(), std::errc::timed_out);
                EXPECT_GE(steady::now() - t0, std::chrono::milliseconds(2 + i));
            }
            ASSERT_FALSE(x.write_all("y", 1));
            char c = 0;
            auto n = y.read_some(&c, 1, io::timeout(1h));
            ASSERT_TRUE(n);
            EXPECT_EQ(c, 'y');
        }));
    for (auto& f : fs) f.join();
}

TEST(IoEngine, GrantedTimedWaitsAcrossWorkersLeaveNothingBehind) {
    // Two fibers hand a token back and forth with hour-long deadlines: every
    // wait is granted (often by the other worker, the waiter then resuming
    // there), so every deadline is cancelled, from whichever thread the
    // waiter is on by then, and swept out of the heap long before it is due.
    // The scheduler's end must not wait for them.
    const auto t0 = steady::now();
    {
        spindle::scheduler s({.workers = 2});
        make_engines(s);
        spindle::counting_semaphore<> ping(0), pong(0);
        constexpr int rounds = 20000;
        auto a = s.spawn([&] {
            for (int r = 0; r < rounds; ++r) {
                ping.release();
                EXPECT_TRUE(pong.try_acquire_for(1h));
            }
        });
        auto b = s.spawn([&] {
            for (int r = 0; r < rounds; ++r) {
                EXPECT_TRUE(ping.try_acquire_for(1h));
                pong.release();
            }
        });
        a.join();
        b.join();
    }
    EXPECT_LT(steady::now() - t0, 10min);  // (an hour-long deadline kept it alive otherwise)
}

// Deadlines due just as permits arrive: each wait either took a permit or
// timed out, never both, never neither. A fiber that only yields keeps the
// worker polling its engine from inside yields and suspensions, so
// deadlines fire there too, where a handoff made by a cancellation (the
// semaphore's cancelled waiter passing a permit on) must not switch fibers.
void race_timeouts(unsigned workers) {
    spindle::scheduler s({.workers = workers});
    make_engines(s);
    spindle::counting_semaphore<> sem(0);
    constexpr int waiters = 8, rounds = 300;
    std::atomic<int> took{0};
    std::atomic<bool> stop{false};
    int released = 0;
    auto releaser = s.spawn(
        [&] {
            while (!stop) {
                sem.release();
                ++released;
                spindle::this_fiber::sleep_for(std::chrono::microseconds(20));
            }
        },
        {.worker = static_cast<int>(workers - 1), .pinned = true});
    auto yielder = s.spawn([&] {
        while (!stop) spindle::this_fiber::yield();
    }, {.worker = 0, .pinned = true});
    std::vector<spindle::fiber> fs;
    for (int i = 0; i < waiters; ++i)
        fs.push_back(s.spawn(
            [&, i] {
                for (int r = 0; r < rounds; ++r)
                    if (sem.try_acquire_for(std::chrono::microseconds(10 + (r + i) % 40))) ++took;
            },
            {.worker = 0}));
    for (auto& f : fs) f.join();
    stop = true;
    releaser.join();
    yielder.join();
    int left = 0;
    while (sem.try_acquire()) ++left;
    EXPECT_EQ(took.load() + left, released);
}

TEST(IoEngine, TimeoutsRacingGrantsKeepTheCount) {
    race_timeouts(1);
    race_timeouts(2);
}

TEST(IoEngine, AYieldingFiberStillLetsIoComplete) {
    // The receiver parks in its read; the sender writes from a plain thread
    // and the third fiber yields until the receiver has the bytes. Nothing
    // suspends on that worker, so only the yields' polling of the engine
    // lets the read complete.
    spindle::scheduler s({.workers = 1});
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    io::stream a(sv[0]);
    std::atomic<int> got{-1};
    std::atomic<bool> reading{false};
    auto rx = s.spawn([&] {
        char b[8];
        reading = true;
        auto n = a.read_some(b, sizeof b);
        got = n ? static_cast<int>(*n) : -2;
    });
    auto spin = s.spawn([&] {
        while (!reading) spindle::this_fiber::yield();
        EXPECT_EQ(::write(sv[1], "abc", 3), 3);
        while (got.load() < 0) spindle::this_fiber::yield();
    });
    rx.join();
    spin.join();
    EXPECT_EQ(got.load(), 3);
    ::close(sv[1]);
}

TEST(IoEngine, WatchOptionOutOfRangeIsRefused) {
    EXPECT_THROW(spindle::scheduler({.workers = 1, .io_spin = std::chrono::microseconds(-1)}), std::invalid_argument);
    EXPECT_THROW(spindle::scheduler({.workers = 1, .io_spin = std::chrono::microseconds::max()}), std::invalid_argument);
    spindle::scheduler ok({.workers = 1, .io_spin = std::chrono::minutes(1)});
}

TEST(IoEngine, SliceOptionOutOfRangeIsRefused) {
    EXPECT_THROW(spindle::scheduler({.workers = 1, .io_slice = std::chrono::microseconds(-1)}), std::invalid_argument);
    EXPECT_THROW(spindle::scheduler({.workers = 1, .io_slice = std::chrono::hours(1)}), std::invalid_argument);
    spindle::scheduler ok({.workers = 1, .io_slice = std::chrono::minutes(1)});
}

// Workers that never run out of fibers (pairs echoing bytes over socket
// pairs, more pairs than workers) reach the busy worker's periodic look
// at their engines, where a run longer than io_slice pauses if some thread
// waits for a CPU: with 1 us, at every look. `spinners` threads that only
// compute, one more than there are CPUs, make sure some thread always
// waits. Every byte comes back in order either way.
void busy_pairs(std::chrono::microseconds io_slice, bool spinners = false) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> spin;
    if (spinners) {
        const int n = ::get_nprocs() + 1;
        for (int i = 0; i < n; ++i)
            spin.emplace_back([&stop] {
                // relaxed: a flag that orders nothing; set once at the end.
                while (!stop.load(std::memory_order_relaxed)) {
                }
            });
    }
    struct join_spinners {
        std::atomic<bool>& stop;
        std::vector<std::thread>& spin;
        ~join_spinners() {
            stop.store(true, std::memory_order_relaxed);
            for (auto& t : spin) t.join();
        }
    } joiner{stop, spin};
    spindle::scheduler s({.workers = 2, .io_slice = io_slice});
    constexpr int pairs = 16, rounds = 2000;
    std::vector<std::unique_ptr<io::stream>> ends;
    for (int p = 0; p < pairs; ++p) {
        int sv[2];
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        ends.push_back(std::make_unique<io::stream>(sv[0]));
        ends.push_back(std::make_unique<io::stream>(sv[1]));
    }
    std::vector<spindle::fiber> fibers;
    std::atomic<int> done{0};
    for (int p = 0; p < pairs; ++p) {
        io::stream& a = *ends[2 * p];
        io::stream& b = *ends[2 * p + 1];
        fibers.push_back(s.spawn([&b] {
            for (int i = 0; i < rounds; ++i) {
                char c = 0;
                ASSERT_FALSE(b.read_exact(&c, 1));
                ASSERT_FALSE(b.write_all(&c, 1));
            }
        }));
        fibers.push_back(s.spawn([&a, &done, p] {
            for (int i = 0; i < rounds; ++i) {
                char c = static_cast<char>(p + i), back = 0;
                ASSERT_FALSE(a.write_all(&c, 1));
                ASSERT_FALSE(a.read_exact(&back, 1));
                ASSERT_EQ(back, c) << "pair " << p << " round " << i;
            }
            done.fetch_add(1);
        }));
    }
    for (auto& f : fibers) f.join();
    EXPECT_EQ(done.load(), pairs);
}

TEST(IoEngine, BusyWorkersCheckingAtEveryLookLoseNothing) { busy_pairs(std::chrono::microseconds(1)); }

TEST(IoEngine, BusyWorkersPausingAtEveryLookBesideSpinnersLoseNothing) {
    busy_pairs(std::chrono::microseconds(1), true);
}

TEST(IoEngine, BusyWorkersThatNeverPauseLoseNothing) { busy_pairs(std::chrono::microseconds(0)); }

// Ping-pong with a plain thread, `rounds` times, each reply after `pause`:
// every byte comes back in order whatever the worker does while idle.
void ping_pong(std::chrono::microseconds io_spin, int rounds, std::chrono::microseconds pause) {
    spindle::scheduler s({.workers = 1, .io_spin = io_spin});
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    io::stream a(sv[0]);
    std::thread echo([&, fd = sv[1]] {
        for (int i = 0; i < rounds; ++i) {
            char c;
            ASSERT_EQ(::read(fd, &c, 1), 1);
            if (pause.count() != 0) std::this_thread::sleep_for(pause);
            ASSERT_EQ(::write(fd, &c, 1), 1);
        }
    });
    s.spawn([&] {
         for (int i = 0; i < rounds; ++i) {
             char c = static_cast<char>('a' + i % 26), back = 0;
             ASSERT_FALSE(a.write_all(&c, 1));
             ASSERT_FALSE(a.read_exact(&back, 1));
             ASSERT_EQ(back, c) << "round " << i;
         }
     }).join();
    echo.join();
    ::close(sv[1]);
}

TEST(IoEngine, PingPongWithoutAWatch) { ping_pong(std::chrono::microseconds(0), 2000, {}); }

TEST(IoEngine, PingPongWithAWatchLongerThanEveryWait) {
    // Every wait ends within the watch: the worker hardly ever sleeps.
    ping_pong(std::chrono::seconds(1), 2000, {});
}

TEST(IoEngine, PingPongWithWaitsLongerThanTheWatch) {
    // Every wait outlasts the watch: the window shrinks to nothing and the
    // worker sleeps in the ring at once.
    ping_pong(std::chrono::microseconds(20), 100, std::chrono::milliseconds(1));
}

// Process CPU time (user + system) so far.
std::chrono::microseconds process_cpu() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    auto us = [](const timeval& t) { return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec); };
    return us(u.ru_utime) + us(u.ru_stime);
}

// On a fiber: sleeps 5 ms 20 times and says how long that took, in
// process CPU and in wall time.
void sleep_20_times_5ms(std::chrono::microseconds& cpu, std::chrono::microseconds& wall) {
    auto c0 = process_cpu();
    auto t0 = steady::now();
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(spindle::this_fiber::sleep_for(std::chrono::milliseconds(5)));
    wall = std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - t0);
    cpu = process_cpu() - c0;
}

// A worker that sleeps through its fiber's sleeps spends well under half
// their wall time on CPU; one that watches through them, nearly all.
void expect_not_spun(std::chrono::microseconds cpu, std::chrono::microseconds wall) {
    EXPECT_LT(cpu * 2, wall) << "the worker spun through its fiber's sleeps: " << cpu.count() << " us of CPU in "
                             << wall.count() << " us";
}

void expect_sleeps_not_watched(spindle::scheduler& s) {
    std::chrono::microseconds cpu{}, wall{};
    s.spawn([&] { sleep_20_times_5ms(cpu, wall); }).join();
    expect_not_spun(cpu, wall);
}

TEST(IoEngine, SleepersAloneAreNotWatched) {
    // A one-second watch, and a fiber that only sleeps (5 ms at a time,
    // within the watch): the worker knows when the next one ends, so it
    // must sleep until then, not spin through it.
    spindle::scheduler s({.workers = 1, .io_spin = std::chrono::seconds(1)});
    make_engines(s);
    expect_sleeps_not_watched(s);
}

// Runs `waits` (which fills cpu and wall) in a fiber beside a read in
// flight all along (a server's idle connection), then ends the read.
template <class Waits>
void beside_a_pending_read(spindle::scheduler& s, std::chrono::microseconds& cpu, std::chrono::microseconds& wall,
                           Waits waits) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    io::stream a(sv[0]);
    auto reader = s.spawn([&] {
        char c = 0;
        auto n = a.read_some(&c, 1);
        ASSERT_TRUE(n);
        EXPECT_EQ(*n, 1u);
    });
    s.spawn([&] { waits(cpu, wall); }).join();
    ASSERT_EQ(::write(sv[1], "x", 1), 1);
    reader.join();
    ::close(sv[1]);
}

TEST(IoEngine, SleepersBesideAPendingReadAreNotWatched) {
    // The same, with a read in flight: the sleeper's deadline, not the
    // read, ends each idle spell, so the worker must still sleep until it.
    spindle::scheduler s({.workers = 1, .io_spin = std::chrono::seconds(1)});
    std::chrono::microseconds cpu{}, wall{};
    beside_a_pending_read(s, cpu, wall, sleep_20_times_5ms);
    expect_not_spun(cpu, wall);
}

TEST(IoEngine, TimedWaitsBesideAPendingReadAreNotWatched) {
    // The same with a primitive's timed wait, which no engine keeps: its
    // deadline is the timer service's, and it too must keep the watch off.
    spindle::scheduler s({.workers = 1, .io_spin = std::chrono::seconds(1)});
    std::chrono::microseconds cpu{}, wall{};
    beside_a_pending_read(s, cpu, wall, [](std::chrono::microseconds& c, std::chrono::microseconds& w) {
        spindle::event never(spindle::event_reset::manual);
        auto c0 = process_cpu();
        auto t0 = steady::now();
        for (int i = 0; i < 20; ++i) EXPECT_FALSE(never.wait_for(std::chrono::milliseconds(5)));
        w = std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - t0);
        c = process_cpu() - c0;
    });
    expect_not_spun(cpu, wall);
}

// A stalled worker: a fiber pinned to worker 0 that never suspends until
// released (as a thread the OS preempted, or a long computation), while a
// reader on worker 1 waits for a descriptor whose edges reach only worker
// 0's epoll set (a descriptor stays with the set where it first waited).
// Worker 1 must take the edge from that set itself.
struct stalled_peer {
    spindle::scheduler& s;
    int sv[2]{-1, -1};
    std::atomic<bool> got{false}, release{false}, hogging{false}, reading{false};
    spindle::fiber hog, reader, busy;

    // Worker 1's own connection: `reads` reads of a byte each, in a fiber
    // pinned there, the first of them answered after 5 ms (which opens
    // worker 1's watch window) when `reads` is 2.
    int own[2]{-1, -1};
    spindle::fiber own_reader;

    // The streams of sv[0] and own[0] (the fibers read them), members so
    // that they outlive the fibers.
    io::stream a, b;

    explicit stalled_peer(spindle::scheduler& sched) : s(sched) {
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, own), 0);
        a = io::stream(sv[0]);
        b = io::stream(own[0]);
    }
    std::atomic<bool> first_own{false};
    void start_own_reads(int reads) {
        own_reader = s.spawn([this, reads] {
            for (int i = 0; i < reads; ++i) {
                char c = 0;
                EXPECT_TRUE(b.read_some(&c, 1));
                if (i == 0) first_own = true;
            }
        }, {.worker = 1, .pinned = true});
        if (reads < 2) return;
        std::this_thread::sleep_for(5ms);
        ASSERT_EQ(::write(own[1], "y", 1), 1);
        while (!first_own) std::this_thread::sleep_for(1ms);
    }
    void end_own_reads() {
        ASSERT_EQ(::write(own[1], "y", 1), 1);
        own_reader.join();
    }
    void register_on_worker0() {
        s.spawn([&] {
             char c = 0;
             EXPECT_FALSE(a.read_some(&c, 1, io::timeout(1ms)));
         }, {.worker = 0, .pinned = true}).join();
    }
    void spawn_reader() {
        reader = s.spawn([this] {
            char c = 0;
            reading = true;
            auto n = a.read_some(&c, 1);
            ASSERT_TRUE(n);
            EXPECT_EQ(*n, 1u);
            got = true;
        }, {.worker = 1, .pinned = true});
    }
    void stall_worker0_and_write() {
        hog = s.spawn([this] {
            hogging = true;
            auto end = steady::now() + 10s;
            while (!release && steady::now() < end) {
            }
        }, {.worker = 0, .pinned = true});
        while (!hogging || !reading) std::this_thread::sleep_for(1ms);
        // The reader waits by now. (If it does not, its read finds the byte
        // at once and the test shows nothing, but does not fail.)
        std::this_thread::sleep_for(20ms);
        ASSERT_EQ(::write(sv[1], "x", 1), 1);
    }
    void expect_read_done() {
        auto end = steady::now() + 5s;
        while (!got && steady::now() < end) std::this_thread::sleep_for(1ms);
        EXPECT_TRUE(got) << "the read waited for its stalled worker";
        release = true;
        hog.join();
    }
    // A fatal failure may have ended the test early, with fibers still
    // running: end them (the hog and the busy loop by their flags, the
    // reads by their peers' end of file) and join them.
    ~stalled_peer() {
        release = true;
        got = true;
        ::shutdown(sv[1], SHUT_WR);
        ::shutdown(own[1], SHUT_WR);
        for (spindle::fiber* f : {&hog, &busy, &reader, &own_reader})
            if (f->joinable()) f->join();
        ::close(sv[1]);
        ::close(own[1]);
    }
};

TEST(IoEngine, ABusyWorkerTakesTheEventsOfAStalledPeer) {
    if (io::current_backend() != io::backend::epoll) GTEST_SKIP() << "io_uring: only the submitting thread reaps";
    // Worker 1 is busy (a fiber yields) with a read of its own in flight,
    // so it polls its set now and then, and sees worker 0's progress stand
    // still.
    spindle::scheduler s({.workers = 2});
    stalled_peer t(s);
    ASSERT_NO_FATAL_FAILURE(t.register_on_worker0());
    ASSERT_NO_FATAL_FAILURE(t.start_own_reads(1));
    t.spawn_reader();
    t.busy = s.spawn([&] {
        auto end = steady::now() + 10s;
        while (!t.got && steady::now() < end) spindle::this_fiber::yield();
    }, {.worker = 1, .pinned = true});
    ASSERT_NO_FATAL_FAILURE(t.stall_worker0_and_write());
    t.expect_read_done();
    t.reader.join();
    t.busy.join();
    t.end_own_reads();
}

TEST(IoEngine, AnIdleWorkerTakesTheEventsOfAStalledPeer) {
    if (io::current_backend() != io::backend::epoll) GTEST_SKIP() << "io_uring: only the submitting thread reaps";
    // Worker 1 has nothing to run but a read of its own in flight: it
    // watches its set (a long io_spin; its first read, answered after a few
    // milliseconds, opens the window), and each look also sees worker 0's
    // progress stand still.
    spindle::scheduler s({.workers = 2, .io_spin = std::chrono::seconds(10)});
    stalled_peer t(s);
    ASSERT_NO_FATAL_FAILURE(t.register_on_worker0());
    ASSERT_NO_FATAL_FAILURE(t.start_own_reads(2));
    t.spawn_reader();
    ASSERT_NO_FATAL_FAILURE(t.stall_worker0_and_write());
    t.expect_read_done();
    t.reader.join();
    t.end_own_reads();
}

TEST(IoEngine, AStopEndsAReadWhileTheWorkerWatches) {
    // A ten-second watch and a read nobody answers: the stop request from
    // another thread must end the read at once (the watch sees the engine's
    // wake-up and submits the cancel), not when the watch gives up. Round
    // 0's read, a sleep of milliseconds, opens the window; the later
    // rounds read while the worker watches.
    spindle::scheduler s({.workers = 1, .io_spin = std::chrono::seconds(10)});
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    io::stream a(sv[0]);
    for (int round = 0; round < 3; ++round) {
        std::stop_source stop;
        std::atomic<bool> reading{false};
        auto rx = s.spawn([&] {
            char c = 0;
            EXPECT_FALSE(a.write_all("x", 1));
            reading = true;
            auto n = a.read_some(&c, 1, {.stop = stop.get_token()});
            ASSERT_FALSE(n);
            EXPECT_EQ(n.error(), std::errc::operation_canceled) << n.error().message();
        });
        while (!reading) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        auto t0 = steady::now();
        stop.request_stop();
        rx.join();
        EXPECT_LT(steady::now() - t0, std::chrono::seconds(5)) << "the cancel waited for the watch to end";
        char drain;
        ASSERT_EQ(::read(sv[1], &drain, 1), 1);
    }
    ::close(sv[1]);
}

}  // namespace
