// io::wait_readable / io::wait_writable, the way a foreign library's
// non-blocking descriptor is driven: a reader loops read() -> EAGAIN ->
// wait_readable on a non-blocking pipe while a writer feeds it in bursts,
// and a writer loops write() -> EAGAIN -> wait_writable on a full pipe
// while a reader drains it; every byte arrives in order. Also: a hang-up
// counts as readable, deadlines (timed_out, not before the deadline), stop
// requests, and the descriptor left unregistered (the caller may close it
// and wait again on a new one with the same number). From fibers on 1 and 2
// workers and from plain threads.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "io_support.hpp"

namespace {

using namespace spindle::test;

struct pipe_fds {
    int r = -1, w = -1;
    pipe_fds() {
        int p[2];
        if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) throw std::system_error(errno, std::system_category(), "pipe2");
        r = p[0];
        w = p[1];
    }
    ~pipe_fds() {
        if (r >= 0) ::close(r);
        if (w >= 0) ::close(w);
    }
    pipe_fds(const pipe_fds&) = delete;
    pipe_fds& operator=(const pipe_fds&) = delete;
};

class IoWait : public ::testing::TestWithParam<where> {};

// Bytes the pump tests move (several times a pipe's 64 KiB).
std::size_t pump_total() { return under_sanitizer ? (1u << 20) : (4u << 20); }

// The reader waits; the writer writes bursts straight into the pipe
// (non-blocking, waiting for room as it must) and pauses between them.
TEST_P(IoWait, ReadLoopOnPipe) {
    pipe_fds p;
    const std::size_t total = pump_total();
    std::vector<std::byte> got;
    got.reserve(total);
    std::atomic<int> waits{0};
    run_together(GetParam(), {
        [&] {  // reader: non-blocking read loop
            std::byte buf[3000];
            for (;;) {
                const ssize_t n = ::read(p.r, buf, sizeof buf);
                if (n > 0) {
                    got.insert(got.end(), buf, buf + n);
                    continue;
                }
                if (n == 0) break;
                ASSERT_EQ(errno, EAGAIN);
                ASSERT_FALSE(io::wait_readable(p.r, patience()));
                waits.fetch_add(1);
            }
        },
        [&] {  // writer
            const auto data = sequence(total);
            std::size_t off = 0;
            for (int k = 0; off < total; ++k) {
                const ssize_t n = ::write(p.w, data.data() + off, std::min<std::size_t>(5000, total - off));
                if (n > 0) {
                    off += static_cast<std::size_t>(n);
                    if (k % 16 == 0) this_fiber::sleep_for(100us);
                    continue;
                }
                ASSERT_EQ(errno, EAGAIN);
                ASSERT_FALSE(io::wait_writable(p.w, patience()));
            }
            ::close(p.w);  // the reader sees the hang-up as readable, then 0
            p.w = -1;
        },
    });
    ASSERT_EQ(got.size(), total);
    EXPECT_EQ(sequence_mismatch(got.data(), total), total);
    EXPECT_GT(waits.load(), 0) << "the writer pauses with the pipe empty: the reader must have waited";
}

// The writer fills the pipe and waits for room; the reader drains slowly.
TEST_P(IoWait, WriteLoopOnFullPipe) {
    pipe_fds p;
    const std::size_t total = pump_total();
    std::vector<std::byte> got;
    got.reserve(total);
    std::atomic<int> waits{0};
    run_together(GetParam(), {
        [&] {  // writer: non-blocking write loop
            const auto data = sequence(total, 11);
            std::size_t off = 0;
            while (off < total) {
                const ssize_t n = ::write(p.w, data.data() + off, total - off);
                if (n > 0) {
                    off += static_cast<std::size_t>(n);
                    continue;
                }
                ASSERT_EQ(errno, EAGAIN);
                ASSERT_FALSE(io::wait_writable(p.w, patience()));
                waits.fetch_add(1);
            }
            ::close(p.w);
            p.w = -1;
        },
        [&] {  // reader
            std::byte buf[8192];
            for (int k = 0;; ++k) {
                const ssize_t n = ::read(p.r, buf, sizeof buf);
                if (n > 0) {
                    got.insert(got.end(), buf, buf + n);
                    if (k % 32 == 0) this_fiber::sleep_for(100us);
                    continue;
                }
                if (n == 0) break;
                ASSERT_EQ(errno, EAGAIN);
                ASSERT_FALSE(io::wait_readable(p.r, patience()));
            }
        },
    });
    ASSERT_EQ(got.size(), total);
    EXPECT_EQ(sequence_mismatch(got.data(), total, 11), total);
    EXPECT_GT(waits.load(), 0) << "a write of everything at once fills the pipe: the writer must have waited";
}

// Already ready: returns at once. Hang-up and error count as ready.
TEST_P(IoWait, ReadyAndHangUp) {
    run_one(GetParam(), [] {
        pipe_fds p;
        EXPECT_FALSE(io::wait_writable(p.w, patience()));
        ASSERT_EQ(::write(p.w, "x", 1), 1);
        EXPECT_FALSE(io::wait_readable(p.r, patience()));
        char c;
        ASSERT_EQ(::read(p.r, &c, 1), 1);
        ::close(p.w);
        p.w = -1;
        EXPECT_FALSE(io::wait_readable(p.r, patience())) << "a hang-up is readable";

        pipe_fds q;
        ::close(q.r);
        q.r = -1;
        EXPECT_FALSE(io::wait_writable(q.w, patience())) << "an error pending is writable";
    });
}

// Deadlines on an empty and on a full pipe: timed_out, not before.
TEST_P(IoWait, Deadlines) {
    run_one(GetParam(), [] {
        using clock = std::chrono::steady_clock;
        pipe_fds p;
        auto t0 = clock::now();
        EXPECT_EQ(io::wait_readable(p.r, io::timeout(30ms)), std::errc::timed_out);
        EXPECT_GE(clock::now() - t0, 30ms);

        std::vector<char> fill(1 << 16);
        while (::write(p.w, fill.data(), fill.size()) > 0) {
        }
        ASSERT_EQ(errno, EAGAIN);
        t0 = clock::now();
        EXPECT_EQ(io::wait_writable(p.w, io::timeout(30ms)), std::errc::timed_out);
        EXPECT_GE(clock::now() - t0, 30ms);
        // A deadline already past on a descriptor that is not ready.
        EXPECT_EQ(io::wait_writable(p.w, io::until(clock::now() - 1s)), std::errc::timed_out);
    });
}

// A stop request ends a wait: operation_canceled.
TEST_P(IoWait, StopRequest) {
    pipe_fds p;
    std::stop_source src;
    std::atomic<bool> waiting{false};
    run_together(GetParam(), {
        [&] {
            waiting.store(true);
            EXPECT_EQ(io::wait_readable(p.r, io::limits{.stop = src.get_token()}), std::errc::operation_canceled);
        },
        [&] {
            while (!waiting.load()) this_fiber::yield();
            this_fiber::sleep_for(5ms);
            src.request_stop();
        },
    });
}

// The descriptor stays the caller's: after a wait it can be closed and its
// number reused by a new pipe, and waits on the new one work (an epoll
// registration left behind would make them wrong or fail). Many rounds.
TEST_P(IoWait, NothingLeftRegistered) {
    run_one(GetParam(), [] {
        for (int i = 0; i < 200; ++i) {
            pipe_fds p;
            if (i % 2 == 0) {
                EXPECT_EQ(io::wait_readable(p.r, io::until(std::chrono::steady_clock::now())), std::errc::timed_out);
            }
            ASSERT_EQ(::write(p.w, "y", 1), 1);
            ASSERT_FALSE(io::wait_readable(p.r, patience())) << "round " << i;
            char c;
            ASSERT_EQ(::read(p.r, &c, 1), 1);
            EXPECT_EQ(io::wait_readable(p.r, io::timeout(1ms)), std::errc::timed_out) << "round " << i;
        }
    });
}

INSTANTIATE_TEST_SUITE_P(All, IoWait, ::testing::ValuesIn(all_places), where_param_name);
INSTANTIATE_TEST_SUITE_P(Caller, IoWait, ::testing::Values(where::caller), where_param_name);

}  // namespace
