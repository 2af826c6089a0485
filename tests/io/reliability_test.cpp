// The I/O layer where servers get hurt: a peer that resets the connection
// while a read or a write waits (ECONNRESET / EPIPE, and never SIGPIPE);
// readers and writers cancelled over and over, by deadlines and by stop
// requests (a stop_source's, the fiber's own) while data flows, losing and
// duplicating nothing and never writing a buffer after the call returned;
// close() of a socket other fibers and threads wait on; accept() meeting
// EMFILE and recovering; more operations in flight than a ring has entries;
// fibers that move between workers while their I/O is with the kernel;
// connect/close cycles that leak no descriptor; deadlines that expire, never
// early.
//
// No outcome here depends on timing. A sleep only makes an interleaving
// likely (a reader that really waits when it is cancelled); whichever way
// it falls, the assertions hold.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../support/thread_state.hpp"
#include "io_support.hpp"

namespace {

using namespace spindle::test;

class IoReliability : public ::testing::TestWithParam<where> {};

// Sets SO_LINGER {on, 0}: close() then sends RST instead of FIN.
void linger_zero(const io::stream& s) {
    const linger lg{1, 0};
    ASSERT_EQ(::setsockopt(s.native_handle(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
}

void expect_sigpipe_untouched() {
    struct sigaction sa {};
    ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &sa), 0);
    EXPECT_TRUE(sa.sa_handler == SIG_DFL && !(sa.sa_flags & SA_SIGINFO))
        << "the I/O layer must not change the program's SIGPIPE disposition";
}

// Waits until `s` has unread bytes (the other side is mid-transfer).
void wait_for_incoming(io::stream& s) { ASSERT_FALSE(io::wait_readable(s.native_handle(), patience())); }

// ---- a peer resets the connection ------------------------------------------------

// The reader waits in read_exact for 1 MiB; the peer sends 1000 bytes, then
// resets. The read ends with ECONNRESET; what it got is the sequence's start.
TEST_P(IoReliability, PeerResetMidRead) {
    expect_sigpipe_untouched();
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    std::atomic<bool> reading{false};
    run_together(GetParam(), {
        [&] {
            std::vector<std::byte> in(1 << 20);
            std::size_t got = 0;
            reading.store(true);
            const std::error_code ec = p.a.read_exact(in.data(), in.size(), patience(), &got);
            EXPECT_EQ(ec, std::errc::connection_reset) << ec.message();
            EXPECT_LE(got, 1000u);
            EXPECT_EQ(sequence_mismatch(in.data(), got), got);
            // The stream is dead: the next read fails or reports its end.
            auto again = p.a.read_some(in.data(), in.size(), patience());
            EXPECT_TRUE(!again || *again == 0);
        },
        [&] {
            while (!reading.load()) this_fiber::yield();
            const auto data = sequence(1000);
            ASSERT_FALSE(p.b.write_all(data.data(), data.size(), patience()));
            this_fiber::sleep_for(10ms);
            linger_zero(p.b);
            EXPECT_FALSE(p.b.close());
        },
    });
    expect_sigpipe_untouched();
}

// The writer waits in write_all for a peer that reads nothing; the peer
// resets. The write ends with ECONNRESET or EPIPE, reports fewer bytes
// sent than asked, and the process gets no SIGPIPE (the default action
// would kill it: nothing here ignores the signal). Writing again fails too.
TEST_P(IoReliability, PeerResetMidWrite) {
    expect_sigpipe_untouched();
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    const std::size_t size = 32 << 20;
    const std::vector<std::byte> out(size, std::byte{0x5a});
    run_together(GetParam(), {
        [&] {
            std::size_t sent = 0;
            const std::error_code ec = p.a.write_all(out.data(), size, patience(), &sent);
            EXPECT_TRUE(ec == std::errc::connection_reset || ec == std::errc::broken_pipe) << ec.message();
            EXPECT_LT(sent, size);
            auto again = p.a.write_some(out.data(), 4096, patience());
            ASSERT_FALSE(again);
            EXPECT_TRUE(again.error() == std::errc::broken_pipe || again.error() == std::errc::connection_reset)
                << again.error().message();
        },
        [&] {
            wait_for_incoming(p.b);
            this_fiber::sleep_for(10ms);  // let the writer fill both buffers and wait
            linger_zero(p.b);
            EXPECT_FALSE(p.b.close());
        },
    });
    expect_sigpipe_untouched();
}

// A write to a peer that is gone (closed, reset) fails at once, no signal.
TEST_P(IoReliability, WriteAfterPeerClosedNoSigpipe) {
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    stream_pair u = socket_pair();
    run_one(GetParam(), [&] {
        linger_zero(p.b);
        ASSERT_FALSE(p.b.close());
        ASSERT_FALSE(u.b.close());
        std::vector<std::byte> out(1 << 20);
        for (io::stream* s : {&p.a, &u.a}) {
            std::error_code ec;
            for (int i = 0; i < 4 && !ec; ++i) ec = s->write_all(out.data(), out.size(), patience());
            EXPECT_TRUE(ec == std::errc::broken_pipe || ec == std::errc::connection_reset) << ec.message();
        }
    });
    expect_sigpipe_untouched();
}

// ---- cancellation while data flows -------------------------------------------------

// A reader's buffers: each call reads into one of `ring` buffers of `size`
// bytes followed by a guard of `guard`. Right after a call returns its
// bytes are taken and the whole buffer is filled with the canary; the
// buffer is checked still to hold only the canary when its turn comes again
// and at the end: a kernel write into it after the call returned (a
// cancelled operation completing late) shows there.
class canary_buffers {
public:
    static constexpr std::byte canary{0xEE};
    canary_buffers(std::size_t ring, std::size_t size, std::size_t guard)
        : size_(size), stride_(size + guard), mem_(ring * stride_, canary), ring_(ring) {}

    // The next buffer, after checking that nothing wrote it since it was
    // last given back.
    std::byte* next() {
        cur_ = (cur_ + 1) % ring_;
        std::byte* b = mem_.data() + cur_ * stride_;
        const std::size_t bad = first_not_canary(b, stride_);
        EXPECT_EQ(bad, stride_) << "buffer " << cur_ << " written at byte " << bad << " after its call returned";
        return b;
    }
    // The call on the current buffer returned `n` bytes: bytes past n (the
    // guard included) must be untouched; append the n bytes to `out`, then
    // fill the buffer with the canary again.
    void returned(std::size_t n, std::vector<std::byte>& out) {
        std::byte* b = mem_.data() + cur_ * stride_;
        const std::size_t bad = first_not_canary(b + n, stride_ - n);
        EXPECT_EQ(bad, stride_ - n) << "a call that returned " << n << " bytes wrote byte " << n + bad;
        out.insert(out.end(), b, b + n);
        std::fill(b, b + stride_, canary);
    }
    void check_all() {
        for (std::size_t i = 0; i < ring_; ++i) {
            const std::size_t bad = first_not_canary(mem_.data() + i * stride_, stride_);
            EXPECT_EQ(bad, stride_) << "buffer " << i << " written after its call returned";
        }
    }
    [[nodiscard]] std::size_t size() const { return size_; }

private:
    static std::size_t first_not_canary(const std::byte* p, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i)
            if (p[i] != canary) return i;
        return n;
    }
    std::size_t size_, stride_;
    std::vector<std::byte> mem_;
    std::size_t ring_;
    std::size_t cur_ = 0;
};

struct cancel_counts {
    std::atomic<int> data{0}, timed_out{0}, canceled{0}, own_token{0};
};

void record(const cancel_counts& c) {
    ::testing::Test::RecordProperty("data", c.data.load());
    ::testing::Test::RecordProperty("timed_out", c.timed_out.load());
    ::testing::Test::RecordProperty("canceled", c.canceled.load());
}

// One writer streams the numbered sequence in chunks of random size,
// pausing now and then so that readers often wait. Readers run one after
// another, each cancelled in its turn: by a short or already-past deadline,
// by a stop request from a stopper that keeps requesting (stop_slots), or
// -- from fibers -- by fiber::request_stop on a fiber made for that one
// read. What all readers got, concatenated, is exactly the sequence.
TEST_P(IoReliability, CancelledReadersLoseNothing) {
    const where w = GetParam();
    const std::size_t total = under_sanitizer ? (512u << 10) : (2u << 20);
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    std::vector<std::byte> got;
    got.reserve(total);
    canary_buffers bufs(8, 4096, 64);
    cancel_counts counts;
    stop_slots slots;
    std::atomic<bool> done{false};
    // The stopper is a plain thread: it sleeps between requests.
    std::thread stopper([&] {
        while (!done.load()) slots.stop_one_round(std::chrono::microseconds(5));
    });
    run_together(w, {
        [&] {  // writer
            std::mt19937 rng(1);
            const auto data = sequence(total);
            std::size_t off = 0;
            for (int k = 0; off < total; ++k) {
                const std::size_t n = std::min<std::size_t>(rng() % 8192 + 1, total - off);
                ASSERT_FALSE(p.a.write_all(data.data() + off, n, patience()));
                off += n;
                if (k % 8 == 0) this_fiber::sleep_for(std::chrono::microseconds(rng() % 500));
                else if (k % 2 == 0) this_fiber::yield();
            }
            ASSERT_FALSE(p.a.shutdown(SHUT_WR));
        },
        [&] {  // readers, one at a time
            std::mt19937 rng(2);
            for (int i = 0;; ++i) {
                std::byte* b = bufs.next();
                io::result<std::size_t> r = std::errc::invalid_argument;
                const int mode = static_cast<int>(rng() % 4);
                if (mode == 0) {
                    r = p.b.read_some(b, bufs.size(), io::timeout(std::chrono::microseconds(rng() % 300)));
                } else if (mode == 1) {
                    r = p.b.read_some(b, bufs.size(), io::until(std::chrono::steady_clock::now()));
                } else if (mode == 2 || w == where::threads) {
                    // The stopper comes round within microseconds: the
                    // patience deadline only turns a lost wake-up into a
                    // failure (timed_out is not an outcome of this mode).
                    r = p.b.read_some(b, bufs.size(), io::timeout(60s, slots.token(static_cast<std::size_t>(i))));
                    if (!r) {
                        ASSERT_NE(r.error(), std::errc::timed_out) << "a stop request did not end read " << i;
                    }
                } else {
                    // A fiber of its own for this read, stopped by its
                    // handle (the default stop token is the fiber's own).
                    spindle::fiber f([&] { r = p.b.read_some(b, bufs.size(), patience()); });
                    for (unsigned y = rng() % 4; y > 0; --y) this_fiber::yield();
                    f.request_stop();
                    f.join();
                    if (!r) {
                        ASSERT_NE(r.error(), std::errc::timed_out) << "request_stop did not end read " << i;
                    }
                    counts.own_token.fetch_add(1);
                }
                if (r) {
                    if (*r == 0) {
                        bufs.returned(0, got);
                        break;
                    }
                    ASSERT_LE(*r, bufs.size());
                    counts.data.fetch_add(1);
                    bufs.returned(*r, got);
                } else {
                    if (r.error() == std::errc::timed_out) {
                        counts.timed_out.fetch_add(1);
                    } else {
                        ASSERT_EQ(r.error(), std::errc::operation_canceled) << r.error().message();
                        counts.canceled.fetch_add(1);
                    }
                    bufs.returned(0, got);  // a call that failed transferred nothing
                }
            }
            done.store(true);
        },
    });
    done.store(true);
    stopper.join();
    bufs.check_all();
    record(counts);
    ASSERT_EQ(got.size(), total) << "bytes lost or duplicated";
    EXPECT_EQ(sequence_mismatch(got.data(), got.size()), total);
    std::printf("[ reads    ] %d with data, %d timed out, %d cancelled (%d by the fiber's own token)\n",
                counts.data.load(), counts.timed_out.load(), counts.canceled.load(), counts.own_token.load());
}

// The same from the writing side: the reader drains slowly through small
// buffers, so writes wait; each write is cancelled by a deadline or a stop
// request, and what it reports sent (write_some's count, write_all's
// `sent`) is where the next one continues. The reader gets exactly the
// sequence: nothing sent twice, nothing skipped.
TEST_P(IoReliability, CancelledWritersDuplicateNothing) {
    const where w = GetParam();
    const std::size_t total = under_sanitizer ? (256u << 10) : (1u << 20);
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    // A small send buffer so that writes wait often (the receive buffer
    // stays: a window below a segment would stall on TCP's persist timer);
    // no Nagle, so that small writes do not wait out delayed ACKs.
    const int small = 16384;
    ASSERT_EQ(::setsockopt(p.a.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    ASSERT_FALSE(p.a.set_nodelay(true));
    ASSERT_FALSE(p.b.set_nodelay(true));
    cancel_counts counts;
    stop_slots slots;
    std::atomic<bool> done{false};
    std::vector<std::byte> got;
    got.reserve(total);
    std::thread stopper([&] {
        while (!done.load()) slots.stop_one_round(std::chrono::microseconds(5));
    });
    run_together(w, {
        [&] {  // writer, cancelled over and over
            std::mt19937 rng(3);
            const auto data = sequence(total);
            std::size_t off = 0;
            for (int i = 0; off < total; ++i) {
                const std::size_t n = std::min<std::size_t>(rng() % 65536 + 1, total - off);
                const int mode = static_cast<int>(rng() % 3);
                io::limits l = mode == 0   ? io::timeout(std::chrono::microseconds(rng() % 300))
                               : mode == 1 ? io::limits{.stop = slots.token(static_cast<std::size_t>(i))}
                                           : io::until(std::chrono::steady_clock::now());
                if (i % 2 == 0) {
                    auto r = p.a.write_some(data.data() + off, n, std::move(l));
                    if (r) {
                        ASSERT_GE(*r, 1u);
                        ASSERT_LE(*r, n);
                        off += *r;
                        counts.data.fetch_add(1);
                        continue;
                    }
                    if (r.error() == std::errc::timed_out) counts.timed_out.fetch_add(1);
                    else {
                        ASSERT_EQ(r.error(), std::errc::operation_canceled) << r.error().message();
                        counts.canceled.fetch_add(1);
                    }
                } else {
                    std::size_t sent = 0;
                    const std::error_code ec = p.a.write_all(data.data() + off, n, std::move(l), &sent);
                    ASSERT_LE(sent, n);
                    off += sent;
                    if (!ec) {
                        ASSERT_EQ(sent, n);
                        counts.data.fetch_add(1);
                    } else if (ec == std::errc::timed_out) {
                        counts.timed_out.fetch_add(1);
                    } else {
                        ASSERT_EQ(ec, std::errc::operation_canceled) << ec.message();
                        counts.canceled.fetch_add(1);
                    }
                }
            }
            ASSERT_FALSE(p.a.shutdown(SHUT_WR));
        },
        [&] {  // slow reader
            std::mt19937 rng(4);
            std::vector<std::byte> buf(1024);
            for (int k = 0;; ++k) {
                auto n = p.b.read_some(buf.data(), rng() % buf.size() + 1, patience());
                ASSERT_TRUE(n) << n.error().message();
                if (*n == 0) break;
                got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
                if (k % 4 == 0) this_fiber::sleep_for(std::chrono::microseconds(200));
            }
            done.store(true);
        },
    });
    done.store(true);
    stopper.join();
    record(counts);
    ASSERT_EQ(got.size(), total) << "bytes lost or duplicated";
    EXPECT_EQ(sequence_mismatch(got.data(), got.size()), total);
    std::printf("[ writes   ] %d whole, %d timed out, %d cancelled\n", counts.data.load(), counts.timed_out.load(),
                counts.canceled.load());
}

// ---- close() of a socket others wait on -------------------------------------------

// On one worker: fibers wait in read_some, in write_all (to a full socket)
// and in accept; another fiber closes the three sockets. Each close()
// returns (having waited for the calls to leave), and each call ends with an
// error or end of stream. On one worker a fiber that published "about to
// wait" has parked by the time the closer runs again.
TEST(IoClose, WakesWaitingFibers) {
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    stream_pair q = connected_pair(io::endpoint::loopback_v4(0));
    auto l = io::listener::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(l);
    std::atomic<int> waiting{0}, ended{0};
    run_together(where::one_worker, {
        [&] {
            std::byte b[64];
            waiting.fetch_add(1);
            auto r = p.a.read_some(b, sizeof b);  // no deadline: only close() ends it
            EXPECT_TRUE(!r || *r == 0);
            ended.fetch_add(1);
        },
        [&] {
            std::vector<std::byte> out(64 << 20);
            waiting.fetch_add(1);
            const std::error_code ec = q.a.write_all(out.data(), out.size());  // q.b never reads
            EXPECT_TRUE(ec);
            ended.fetch_add(1);
        },
        [&] {
            waiting.fetch_add(1);
            auto s = l->accept();
            EXPECT_FALSE(s);
            ended.fetch_add(1);
        },
        [&] {
            while (waiting.load() != 3) this_fiber::yield();
            for (int i = 0; i < 10; ++i) this_fiber::yield();
            EXPECT_EQ(ended.load(), 0);
            EXPECT_FALSE(p.a.close());
            EXPECT_FALSE(q.a.close());
            EXPECT_FALSE(l->close());
            EXPECT_FALSE(p.a.is_open());
            EXPECT_FALSE(l->is_open());
        },
    });
    EXPECT_EQ(ended.load(), 3);
    // Closing again is harmless.
    (void)p.a.close();
    EXPECT_FALSE(p.a.is_open());
}

// The same with plain threads waiting (in poll); the closer starts once
// the kernel shows the waiter asleep.
TEST(IoClose, WakesWaitingThreads) {
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    auto l = io::listener::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(l);
    std::atomic<pid_t> reader{0}, acceptor{0};
    std::atomic<int> ended{0};
    std::thread t1([&] {
        reader.store(this_tid());
        std::byte b[64];
        auto r = p.a.read_some(b, sizeof b);
        EXPECT_TRUE(!r || *r == 0);
        ended.fetch_add(1);
    });
    std::thread t2([&] {
        acceptor.store(this_tid());
        EXPECT_FALSE(l->accept());
        ended.fetch_add(1);
    });
    ASSERT_TRUE(parks(reader));
    ASSERT_TRUE(parks(acceptor));
    EXPECT_EQ(ended.load(), 0);
    EXPECT_FALSE(p.a.close());
    EXPECT_FALSE(l->close());
    t1.join();
    t2.join();
    EXPECT_EQ(ended.load(), 2);
}

// A fiber waits in read_some on 2 workers while a plain thread closes the
// socket, many times over: the read always ends, close always returns. The
// reader is pinned, and a second fiber pinned to its worker says when the
// reader has given the worker up (parked in its read).
TEST(IoClose, FromAnotherThreadManyTimes) {
    scheduler sched({.workers = 2});
    const int rounds = under_sanitizer ? 100 : 500;
    for (int i = 0; i < rounds; ++i) {
        stream_pair p = socket_pair();
        std::atomic<bool> started{false}, parked{false};
        const spindle::fiber_options on{.worker = i % 2, .pinned = true};
        fiber f = sched.spawn(
            [&] {
                started.store(true);
                std::byte b[16];
                auto r = p.a.read_some(b, sizeof b);
                EXPECT_TRUE(!r || *r == 0);
            },
            on);
        fiber marker = sched.spawn(
            [&] {
                while (!started.load()) this_fiber::yield();
                this_fiber::yield();
                parked.store(true);
            },
            on);
        while (!parked.load()) std::this_thread::yield();
        EXPECT_FALSE(p.a.close());
        f.join();
        marker.join();
    }
}

// ---- EMFILE from accept ----------------------------------------------------------

// The highest open descriptor of this process.
int highest_fd() {
    int highest = -1;
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) return 1023;
    while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') highest = std::max(highest, std::atoi(e->d_name));
    ::closedir(d);
    return highest;
}

// With the descriptor table full, accept() fails with EMFILE (the pending
// connection stays queued), the listener keeps working, and once
// descriptors are free the same connections are accepted and served. The
// soft RLIMIT_NOFILE is lowered to just above what is open so that filling
// the table takes few descriptors; it is restored before the test ends.
// The scheduler and each worker's I/O state exist before the table fills.
TEST_P(IoReliability, AcceptEmfileRecovers) {
    const where w = GetParam();
    auto l = io::listener::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(l);
    const io::endpoint at = l->local_endpoint().value();
    // Connections wait in the backlog; their client ends are open already.
    std::vector<io::stream> clients;
    for (int i = 0; i < 3; ++i) clients.push_back(io::stream::connect(at, patience()).value());

    std::unique_ptr<scheduler> sched;
    const unsigned workers = w == where::one_worker ? 1u : 2u;
    auto empty = io::listener::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(empty);
    if (w != where::threads) {
        sched = std::make_unique<scheduler>(scheduler::options{.workers = workers});
        make_engines(*sched);
    } else {
        EXPECT_EQ(empty->accept(io::timeout(1ms)).error(), std::errc::timed_out);
    }

    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
    // A plain thread's server starts before the table fills (a sanitizer's
    // thread start may need a descriptor) and waits for `go`.
    std::atomic<bool> go{false};
    std::function<void()> serve;
    std::thread server_thread;
    if (!sched) {
        server_thread = std::thread([&] {
            while (!go.load()) std::this_thread::sleep_for(100us);
            serve();
        });
    }

    rlimit low = old;
    low.rlim_cur = static_cast<rlim_t>(highest_fd() + 16);
    EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);  // else the fill just takes longer
    std::vector<int> fillers;
    auto release_fillers = [&](std::size_t n) {
        for (std::size_t i = 0; i < n && !fillers.empty(); ++i) {
            ::close(fillers.back());
            fillers.pop_back();
        }
    };
    for (;;) {
        const int fd = ::fcntl(0, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            EXPECT_EQ(errno, EMFILE);
            break;
        }
        fillers.push_back(fd);
    }
    serve = [&] {
        auto s = l->accept(patience());
        ASSERT_FALSE(s) << "accepted with a full descriptor table";
        EXPECT_EQ(s.error(), std::errc::too_many_files_open) << s.error().message();
        auto s2 = l->accept(patience());
        ASSERT_FALSE(s2);
        EXPECT_EQ(s2.error(), std::errc::too_many_files_open) << s2.error().message();
        release_fillers(2);
        for (int i = 0; i < 2; ++i) {
            auto ok = l->accept(patience());
            ASSERT_TRUE(ok) << ok.error().message();
            ASSERT_FALSE(ok->write_all("served", patience()));
        }
        release_fillers(fillers.size());
        auto last = l->accept(patience());
        ASSERT_TRUE(last) << last.error().message();
        ASSERT_FALSE(last->write_all("served", patience()));
    };
    if (sched) {
        sched->spawn(serve).join();
    } else {
        go.store(true);
        server_thread.join();
    }
    release_fillers(fillers.size());
    EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
    sched.reset();
    for (auto& c : clients) {
        char b[6];
        ASSERT_FALSE(c.read_exact(b, sizeof b, patience()));
        EXPECT_EQ(std::string(b, 6), "served");
    }
}

// ---- many operations in flight ---------------------------------------------------

// 2000 fibers (1000 under sanitizers) each wait on a read of their own
// socket at once -- more than any ring has entries -- then a thread writes
// one byte to every peer: every read completes with its own byte.
void many_in_flight(unsigned workers) {
    const int n = under_sanitizer ? 1000 : 2000;
    rlimit rl{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
    const rlim_t need = static_cast<rlim_t>(2 * n + 256);
    if (rl.rlim_cur < need) {
        if (rl.rlim_max < need) GTEST_SKIP() << "RLIMIT_NOFILE is below " << need;
        rl.rlim_cur = need;
        ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    std::vector<stream_pair> pairs;
    pairs.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) pairs.push_back(socket_pair());
    scheduler sched(stress_options(workers));
    std::atomic<int> entered{0}, right{0};
    std::vector<fiber> fs;
    fs.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
        fs.push_back(sched.spawn([&, i] {
            std::byte b{};
            entered.fetch_add(1);
            auto r = pairs[static_cast<std::size_t>(i)].a.read_some(&b, 1, patience());
            if (r && *r == 1 && b == sequence_byte(static_cast<std::uint64_t>(i))) right.fetch_add(1);
        }));
    while (entered.load() != n) std::this_thread::yield();
    std::this_thread::sleep_for(20ms);  // most of them parked by now; either way is correct
    for (int i = 0; i < n; ++i) {
        const std::byte b = sequence_byte(static_cast<std::uint64_t>(i));
        ASSERT_EQ(::write(pairs[static_cast<std::size_t>(i)].b.native_handle(), &b, 1), 1);
    }
    for (auto& f : fs) f.join();
    EXPECT_EQ(right.load(), n);
}

TEST(IoInFlight, TwoThousandReadsOneWorker) { many_in_flight(1); }
TEST(IoInFlight, TwoThousandReadsTwoWorkers) { many_in_flight(2); }

// ---- fibers moving between workers mid-operation ----------------------------------

// 2 workers: clients exchange messages with echo fibers; a pinned fiber
// keeps worker 0 busy yielding, so a client woken there is often stolen by
// worker 1 between its submission and its completion. Every reply is right,
// whichever worker the client resumes on.
TEST(IoMigration, RepliesRightAcrossWorkers) {
    scheduler sched({.workers = 2});
    constexpr int clients = 8;
    const int iters = under_sanitizer ? 300 : 3000;
    std::vector<stream_pair> pairs;
    for (int i = 0; i < clients; ++i) pairs.push_back(socket_pair());
    std::atomic<bool> done{false};
    std::atomic<int> migrated{0}, finished{0}, completed{0};
    std::vector<fiber> fs;
    fs.push_back(sched.spawn(
        [&] {
            // Mostly yields; parks now and then so that its worker reaps
            // I/O even if yield() alone does not (IoLiveness below).
            for (unsigned k = 0; !done.load(); ++k) {
                if (k % 16 == 0) this_fiber::sleep_for(1us);
                else this_fiber::yield();
            }
        },
        {.worker = 0, .pinned = true}));
    for (int c = 0; c < clients; ++c) {
        fs.push_back(sched.spawn([&, c] {  // echo
            io::stream& s = pairs[static_cast<std::size_t>(c)].b;
            std::byte buf[256];
            for (;;) {
                auto n = s.read_some(buf, patience());
                ASSERT_TRUE(n) << n.error().message();
                if (*n == 0) return;
                ASSERT_FALSE(s.write_all({buf, *n}, patience()));
            }
        }));
        fs.push_back(sched.spawn(
            [&, c] {  // client
                io::stream& s = pairs[static_cast<std::size_t>(c)].a;
                // Counted on every way out, a failed assertion's too: the
                // busy fiber runs until all clients are gone.
                struct leave {
                    std::atomic<int>& finished;
                    std::atomic<bool>& done;
                    ~leave() {
                        if (finished.fetch_add(1) + 1 == clients) done.store(true);
                    }
                } on_exit{finished, done};
                std::byte back[200];
                for (int i = 0; i < iters; ++i) {
                    const std::size_t len = static_cast<std::size_t>(i % 200 + 1);
                    const auto msg = sequence(len, static_cast<std::uint64_t>(i + c));
                    const int before = this_fiber::worker_index();
                    ASSERT_FALSE(s.write_all(msg.data(), len, patience()));
                    ASSERT_FALSE(s.read_exact(back, len, patience()));
                    if (this_fiber::worker_index() != before) migrated.fetch_add(1);
                    ASSERT_EQ(sequence_mismatch(back, len, static_cast<std::uint64_t>(i + c)), len);
                }
                ASSERT_FALSE(s.shutdown(SHUT_WR));
                completed.fetch_add(1);
            },
            {.worker = c % 2}));
    }
    for (auto& f : fs) f.join();
    EXPECT_EQ(completed.load(), clients);
    ::testing::Test::RecordProperty("migrations", migrated.load());
    std::printf("[ migrate  ] %d of %d round trips resumed on another worker\n", migrated.load(), clients * iters);
}

// ---- a yielding fiber does not starve I/O ------------------------------------------

// One worker: a fiber waits in read_some while another fiber of the same
// worker yields in a loop until the read is done. A thread writes the byte
// once the reader waits. The reader's completion must reach it while the
// other fiber keeps yielding -- the worker has to look at its I/O now and
// then even though a fiber is always ready. The yielder gives up after
// 10 s (then the test fails instead of hanging).
TEST(IoLiveness, YieldingFiberDoesNotStarveIo) {
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE(round);
        stream_pair p = socket_pair();
        scheduler sched({.workers = 1});
        std::atomic<bool> reading{false}, read_done{false};
        bool saw_read_done = false;
        fiber reader = sched.spawn([&] {
            std::byte b{};
            reading.store(true);
            auto r = p.a.read_some(&b, 1, round == 0 ? io::limits{} : patience());
            EXPECT_TRUE(r && *r == 1);
            read_done.store(true);
        });
        fiber yielder = sched.spawn([&] {
            while (!reading.load()) this_fiber::yield();
            const auto give_up = std::chrono::steady_clock::now() + 10s;
            while (!read_done.load() && std::chrono::steady_clock::now() < give_up) this_fiber::yield();
            saw_read_done = read_done.load();
        });
        while (!reading.load()) std::this_thread::yield();
        std::this_thread::sleep_for(1ms);  // likely parked in its read; correct either way
        const std::byte one{1};
        ASSERT_EQ(::write(p.b.native_handle(), &one, 1), 1);
        yielder.join();
        reader.join();
        ASSERT_TRUE(saw_read_done) << "a fiber yielding in a loop kept its worker from completing another fiber's read";
    }
}

// ---- connect/close cycles leak nothing --------------------------------------------

// Connect, accept, exchange a byte, close both ends: many times over, on a
// Unix-domain listener (no TIME_WAIT to run out of ports) and on TCP
// (closed with RST for the same reason). The count of open descriptors is
// the same before and after.
void cycles(const io::endpoint& bind_at, int n, bool tcp) {
    auto l = io::listener::bind(bind_at);
    ASSERT_TRUE(l) << l.error().message();
    const io::endpoint at = l->local_endpoint().value();
    scheduler sched({.workers = 1});
    // Warm up: the backend's own descriptors exist before the first count.
    sched.spawn([&] {
        auto c = io::stream::connect(at, patience());
        ASSERT_TRUE(c);
        ASSERT_TRUE(l->accept(patience()));
    }).join();
    const int before = count_fds();
    std::atomic<int> ok{0};
    sched.spawn([&] {
        for (int i = 0; i < n; ++i) {
            auto c = io::stream::connect(at, patience());
            ASSERT_TRUE(c) << "cycle " << i << ": " << c.error().message();
            auto s = l->accept(patience());
            ASSERT_TRUE(s) << "cycle " << i << ": " << s.error().message();
            const char x = static_cast<char>(i);
            ASSERT_FALSE(c->write_all({&x, 1}, patience()));
            char y = 0;
            ASSERT_FALSE(s->read_exact(&y, 1, patience()));
            ASSERT_EQ(y, x);
            if (tcp) linger_zero(*c);
            if (i % 2 == 0) {
                ASSERT_FALSE(c->close());
            }  // else: the destructor closes it
            ok.fetch_add(1);
        }
    }).join();
    EXPECT_EQ(ok.load(), n);
    EXPECT_EQ(count_fds(), before) << "descriptors leaked over " << n << " cycles";
}

TEST(IoCycles, UnixConnectClose) {
    temp_dir dir;
    cycles(io::endpoint::unix_path(dir / "cycles.sock").value(), under_sanitizer ? 20000 : 100000, false);
}

TEST(IoCycles, TcpConnectClose) {
    cycles(io::endpoint::loopback_v4(0), under_sanitizer ? 3000 : 10000, true);
}

// ---- deadlines ----------------------------------------------------------------------

// accept, read_some, read_exact and write_all with a deadline that passes:
// timed_out, never before the deadline; what read_exact got and what
// write_all sent before that are reported, and the peer sees exactly the
// bytes write_all reports.
TEST_P(IoReliability, DeadlinesExpireNotEarly) {
    auto l = io::listener::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(l);
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    std::size_t sent = 0;
    run_one(GetParam(), [&] {
        using clock = std::chrono::steady_clock;
        auto t0 = clock::now();
        auto a = l->accept(io::timeout(40ms));
        ASSERT_FALSE(a);
        EXPECT_EQ(a.error(), std::errc::timed_out) << a.error().message();
        EXPECT_GE(clock::now() - t0, 40ms);

        std::byte b[16];
        t0 = clock::now();
        auto r = p.a.read_some(b, io::timeout(30ms));
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error(), std::errc::timed_out) << r.error().message();
        EXPECT_GE(clock::now() - t0, 30ms);

        ASSERT_FALSE(p.b.write_all("abc", patience()));
        std::size_t got = 0;
        t0 = clock::now();
        const auto deadline = t0 + 30ms;
        const std::error_code ec = p.a.read_exact(b, sizeof b, io::until(deadline), &got);
        EXPECT_EQ(ec, std::errc::timed_out) << ec.message();
        EXPECT_GE(clock::now(), deadline);
        EXPECT_EQ(got, 3u);
        EXPECT_EQ(std::string(reinterpret_cast<char*>(b), 3), "abc");

        // Nobody reads p.b: write_all fills the buffers, then times out.
        std::vector<std::byte> out = sequence(32 << 20);
        t0 = clock::now();
        const std::error_code wec = p.a.write_all(out.data(), out.size(), io::timeout(50ms), &sent);
        EXPECT_EQ(wec, std::errc::timed_out) << wec.message();
        EXPECT_GE(clock::now() - t0, 50ms);
        EXPECT_GT(sent, 0u);
        EXPECT_LT(sent, out.size());
        ASSERT_FALSE(p.a.shutdown(SHUT_WR));
    });
    // The peer gets exactly `sent` bytes, in order.
    std::vector<std::byte> in(sent + 1);
    std::size_t got = 0;
    const std::error_code ec = p.b.read_exact(in.data(), in.size(), patience(), &got);
    EXPECT_EQ(ec, io::errc::eof) << ec.message();
    EXPECT_EQ(got, sent);
    EXPECT_EQ(sequence_mismatch(in.data(), got), got);
}

// A deadline already past with data waiting: the call may take the data or
// time out, but never both lose it. Here: whatever it returns plus what a
// patient read gets afterwards is the whole message.
TEST_P(IoReliability, PastDeadlineLosesNothing) {
    stream_pair p = socket_pair();
    run_one(GetParam(), [&] {
        ASSERT_FALSE(p.b.write_all("0123456789", patience()));
        std::string got;
        char buf[10];
        auto r = p.a.read_some(buf, sizeof buf, io::until(std::chrono::steady_clock::now() - 1s));
        if (r) got.append(buf, *r);
        else EXPECT_EQ(r.error(), std::errc::timed_out) << r.error().message();
        while (got.size() < 10) {
            auto m = p.a.read_some(buf, sizeof buf, patience());
            ASSERT_TRUE(m && *m > 0);
            got.append(buf, *m);
        }
        EXPECT_EQ(got, "0123456789");
    });
}

// ---- stop requests -----------------------------------------------------------------

// A fiber waiting in read_some or accept with default limits is stopped by
// fiber::request_stop(): operation_canceled. The socket stays usable.
TEST(IoStop, FibersOwnToken) {
    for (where w : fiber_places) {
        SCOPED_TRACE(where_name(w));
        stream_pair p = socket_pair();
        auto l = io::listener::bind(io::endpoint::loopback_v4(0));
        ASSERT_TRUE(l);
        scheduler sched({.workers = w == where::one_worker ? 1u : 2u});
        std::atomic<int> waiting{0};
        fiber reader = sched.spawn([&] {
            std::byte b[8];
            waiting.fetch_add(1);
            auto r = p.a.read_some(b, sizeof b);
            ASSERT_FALSE(r);
            EXPECT_EQ(r.error(), std::errc::operation_canceled) << r.error().message();
        });
        fiber acceptor = sched.spawn([&] {
            waiting.fetch_add(1);
            auto s = l->accept();
            ASSERT_FALSE(s);
            EXPECT_EQ(s.error(), std::errc::operation_canceled) << s.error().message();
        });
        while (waiting.load() != 2) std::this_thread::yield();
        std::this_thread::sleep_for(5ms);  // likely parked; correct either way
        EXPECT_TRUE(reader.request_stop());
        EXPECT_TRUE(acceptor.request_stop());
        reader.join();
        acceptor.join();
        // Still usable: a new read gets what comes.
        sched.spawn([&] {
            ASSERT_FALSE(p.b.write_all("ok", patience()));
            char b[2];
            ASSERT_FALSE(p.a.read_exact(b, 2, patience()));
            EXPECT_EQ(std::string(b, 2), "ok");
        }).join();
    }
}

// An explicit stop_source stops a fiber's or a thread's read (a thread
// blocked in poll included); a token stopped beforehand fails the call at
// once; a stop requested after the call finished changes nothing.
TEST_P(IoReliability, StopSource) {
    stream_pair p = socket_pair();
    std::stop_source src;
    std::atomic<bool> waiting{false};
    run_together(GetParam(), {
        [&] {
            std::byte b[8];
            waiting.store(true);
            auto r = p.a.read_some(b, io::timeout(60s, src.get_token()));
            ASSERT_FALSE(r);
            EXPECT_EQ(r.error(), std::errc::operation_canceled) << r.error().message();

            auto again = p.a.read_some(b, io::limits{.stop = src.get_token()});
            ASSERT_FALSE(again);
            EXPECT_EQ(again.error(), std::errc::operation_canceled) << again.error().message();
        },
        [&] {
            while (!waiting.load()) this_fiber::yield();
            this_fiber::sleep_for(5ms);
            src.request_stop();
        },
    });
    run_one(GetParam(), [&] {
        std::stop_source late;
        ASSERT_FALSE(p.b.write_all("x", patience()));
        char b;
        auto r = p.a.read_some(&b, 1, io::limits{.stop = late.get_token()});
        late.request_stop();
        ASSERT_TRUE(r) << r.error().message();
        EXPECT_EQ(*r, 1u);
    });
}

INSTANTIATE_TEST_SUITE_P(All, IoReliability, ::testing::ValuesIn(all_places), where_param_name);

}  // namespace
