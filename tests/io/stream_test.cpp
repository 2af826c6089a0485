// io::stream and io::listener: echo over TCP on IPv4 and IPv6 loopback and
// over Unix-domain streams (a path in a temporary directory, and an
// abstract "@name"), from fibers on 1 and 2 workers and from plain threads;
// read_exact / write_all of buffers of several MiB (partial transfers on the
// way), writev and writev_all, half-close with shutdown(), set_nodelay, the
// local and peer endpoints, adopting descriptors. Contents are checked byte
// by byte.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "io_support.hpp"

namespace {

using namespace spindle::test;

enum class kind { tcp4, tcp6, unix_path, unix_abstract };

const char* kind_name(kind k) {
    switch (k) {
    case kind::tcp4: return "tcp4";
    case kind::tcp6: return "tcp6";
    case kind::unix_path: return "unix_path";
    case kind::unix_abstract: return "unix_abstract";
    }
    return "?";
}

void PrintTo(kind k, std::ostream* os) { *os << kind_name(k); }

// Where a listener of kind `k` binds (port 0: the kernel picks one).
io::endpoint bind_point(kind k, const temp_dir& dir) {
    switch (k) {
    case kind::tcp4: return io::endpoint::loopback_v4(0);
    case kind::tcp6: return io::endpoint::loopback_v6(0);
    case kind::unix_path: return io::endpoint::unix_path(dir / "echo.sock").value();
    case kind::unix_abstract: return io::endpoint::unix_path(abstract_name("echo")).value();
    }
    return {};
}

using kind_where = std::tuple<kind, where>;

class IoStream : public ::testing::TestWithParam<kind_where> {
protected:
    void SetUp() override {
        if (std::get<0>(GetParam()) == kind::tcp6 && !ipv6_loopback_available())
            GTEST_SKIP() << "::1 cannot be bound here";
    }
    kind k() const { return std::get<0>(GetParam()); }
    where w() const { return std::get<1>(GetParam()); }
    temp_dir dir_;
};

std::string kind_where_name(const ::testing::TestParamInfo<kind_where>& i) {
    return std::string(kind_name(std::get<0>(i.param))) + "_" + where_name(std::get<1>(i.param));
}

// A server echoes every byte of one connection back until the client's
// half-close, then closes; the client sends 256 KiB in messages of varied
// size, reading each back before the next, then sees end of stream.
TEST_P(IoStream, Echo) {
    auto l = io::listener::bind(bind_point(k(), dir_));
    ASSERT_TRUE(l) << l.error().message();
    const io::endpoint at = l->local_endpoint().value();
    if (k() == kind::tcp4 || k() == kind::tcp6) {
        EXPECT_NE(at.port(), 0);
    }
    constexpr std::size_t total = 256 * 1024;
    const std::vector<std::byte> data = sequence(total);
    std::atomic<std::size_t> echoed{0};
    run_together(w(), {
        [&] {  // server
            io::endpoint peer;
            auto s = l->accept(patience(), &peer);
            ASSERT_TRUE(s) << s.error().message();
            EXPECT_EQ(peer.family(), at.family());
            if (k() == kind::tcp4 || k() == kind::tcp6) {
                ASSERT_FALSE(s->set_nodelay(true));
            }
            std::byte buf[4096];
            for (;;) {
                auto n = s->read_some(buf, patience());
                ASSERT_TRUE(n) << n.error().message();
                if (*n == 0) break;
                ASSERT_FALSE(s->write_all({buf, *n}, patience()));
                echoed.fetch_add(*n);
            }
            EXPECT_FALSE(s->close());
        },
        [&] {  // client: default limits (no deadline, the fiber's own token)
            auto c = io::stream::connect(at);
            ASSERT_TRUE(c) << c.error().message();
            // Small messages each way: without TCP_NODELAY each round trip
            // may wait out a delayed ACK.
            if (k() == kind::tcp4 || k() == kind::tcp6) {
                ASSERT_FALSE(c->set_nodelay(true));
            }
            std::vector<std::byte> back(8192);
            std::size_t off = 0;
            for (std::size_t step = 1; off < total; step = step * 7 % 8191 + 1) {
                const std::size_t n = std::min(step, total - off);
                ASSERT_FALSE(c->write_all({data.data() + off, n}));
                ASSERT_FALSE(c->read_exact({back.data(), n}));
                ASSERT_EQ(sequence_mismatch(back.data(), n, off), n) << "at offset " << off;
                off += n;
            }
            ASSERT_FALSE(c->shutdown(SHUT_WR));
            std::byte b[1];
            auto eof = c->read_some(b);
            ASSERT_TRUE(eof) << eof.error().message();
            EXPECT_EQ(*eof, 0u);
        },
    });
    EXPECT_EQ(echoed.load(), total);
}

// Several MiB each way at once: write_all and read_exact are made of many
// partial transfers (the socket buffers hold far less); every byte arrives
// in order, and `sent` / `got` report the whole.
TEST_P(IoStream, LargeBuffersBothWays) {
    const std::size_t size = under_sanitizer ? 3 * 1024 * 1024 + 17 : 8 * 1024 * 1024 + 17;
    stream_pair p = connected_pair(bind_point(k(), dir_));
    const std::vector<std::byte> out_a = sequence(size, 0), out_b = sequence(size, 7);
    std::vector<std::byte> in_a(size), in_b(size);
    std::size_t sent_a = 0, sent_b = 0, got_a = 0, got_b = 0;
    run_together(w(), {
        [&] { EXPECT_FALSE(p.a.write_all(out_a.data(), size, patience(), &sent_a)); },
        [&] { EXPECT_FALSE(p.b.write_all(out_b.data(), size, patience(), &sent_b)); },
        [&] { EXPECT_FALSE(p.b.read_exact(in_b.data(), size, patience(), &got_b)); },
        [&] { EXPECT_FALSE(p.a.read_exact(in_a.data(), size, patience(), &got_a)); },
    });
    EXPECT_EQ(sent_a, size);
    EXPECT_EQ(sent_b, size);
    EXPECT_EQ(got_a, size);
    EXPECT_EQ(got_b, size);
    EXPECT_EQ(sequence_mismatch(in_b.data(), size, 0), size);
    EXPECT_EQ(sequence_mismatch(in_a.data(), size, 7), size);
}

// read_exact on a stream that ends early: io::errc::eof, `got` says how
// much came.
TEST_P(IoStream, ReadExactReportsEarlyEof) {
    stream_pair p = connected_pair(bind_point(k(), dir_));
    run_one(w(), [&] {
        const auto data = sequence(1000);
        ASSERT_FALSE(p.a.write_all(data.data(), data.size(), patience()));
        ASSERT_FALSE(p.a.shutdown(SHUT_WR));
        std::vector<std::byte> in(5000);
        std::size_t got = 12345;
        const std::error_code ec = p.b.read_exact(in.data(), in.size(), patience(), &got);
        EXPECT_EQ(ec, io::errc::eof) << ec.message();
        EXPECT_EQ(ec.category(), io::io_category());
        EXPECT_FALSE(ec.message().empty());
        EXPECT_EQ(got, 1000u);
        EXPECT_EQ(sequence_mismatch(in.data(), 1000), 1000u);
        // A read after the end keeps reporting it.
        auto n = p.b.read_some(in.data(), in.size(), patience());
        ASSERT_TRUE(n) << n.error().message();
        EXPECT_EQ(*n, 0u);
    });
}

// writev sends some prefix of the buffers in order; writev_all sends all of
// 64 buffers of 64 KiB (more than a socket buffer: several gathered sends).
TEST_P(IoStream, Writev) {
    stream_pair p = connected_pair(bind_point(k(), dir_));
    run_together(w(), {
        [&] {
            const std::string x = "ab", y = "", z = "cdefg";
            const iovec three[] = {{const_cast<char*>(x.data()), x.size()},
                                   {const_cast<char*>(y.data()), y.size()},
                                   {const_cast<char*>(z.data()), z.size()}};
            std::size_t left = 7;
            std::size_t first = 0;
            // A short gathered send is legal; the first call on an empty
            // socket buffer sends all 7 bytes in practice.
            auto n = p.a.writev(three, patience());
            ASSERT_TRUE(n) << n.error().message();
            ASSERT_GE(*n, 1u);
            ASSERT_LE(*n, left);
            first = *n;
            if (first < left) {
                const std::string all = x + y + z;
                ASSERT_FALSE(p.a.write_all(all.substr(first), patience()));
            }

            const std::size_t part = 64 * 1024, parts = 64;
            const std::vector<std::byte> data = sequence(part * parts, 7);
            std::vector<iovec> iov(parts);
            for (std::size_t i = 0; i < parts; ++i)
                iov[i] = {const_cast<std::byte*>(data.data() + i * part), part};
            ASSERT_FALSE(p.a.writev_all(iov, patience()));
            ASSERT_FALSE(p.a.shutdown(SHUT_WR));
        },
        [&] {
            char head[7];
            ASSERT_FALSE(p.b.read_exact(head, sizeof head, patience()));
            EXPECT_EQ(std::string(head, sizeof head), "abcdefg");
            std::vector<std::byte> in(64 * 64 * 1024);
            ASSERT_FALSE(p.b.read_exact(in.data(), in.size(), patience()));
            EXPECT_EQ(sequence_mismatch(in.data(), in.size(), 7), in.size());
            std::byte b;
            auto eof = p.b.read_some(&b, 1, patience());
            ASSERT_TRUE(eof);
            EXPECT_EQ(*eof, 0u);
        },
    });
}

// Half-close: after the client's shutdown(SHUT_WR) the server reads what
// was sent, then end of stream, and can still answer on its own half.
TEST_P(IoStream, HalfClose) {
    stream_pair p = connected_pair(bind_point(k(), dir_));
    run_together(w(), {
        [&] {  // client
            ASSERT_FALSE(p.a.write_all("request", patience()));
            ASSERT_FALSE(p.a.shutdown(SHUT_WR));
            // The write half is gone: writing now fails (and raises no SIGPIPE).
            auto late = p.a.write_some("x", 1, patience());
            ASSERT_FALSE(late);
            EXPECT_EQ(late.error(), std::errc::broken_pipe) << late.error().message();
            char reply[5];
            ASSERT_FALSE(p.a.read_exact(reply, sizeof reply, patience()));
            EXPECT_EQ(std::string(reply, 5), "reply");
            char b;
            auto eof = p.a.read_some(&b, 1, patience());
            ASSERT_TRUE(eof);
            EXPECT_EQ(*eof, 0u);
        },
        [&] {  // server
            std::string got;
            char buf[3];
            for (;;) {
                auto n = p.b.read_some(buf, sizeof buf, patience());
                ASSERT_TRUE(n) << n.error().message();
                if (*n == 0) break;
                got.append(buf, *n);
            }
            EXPECT_EQ(got, "request");
            ASSERT_FALSE(p.b.write_all("reply", patience()));
            EXPECT_FALSE(p.b.close());
        },
    });
}

// The four endpoints of a connection agree with each other.
TEST_P(IoStream, Endpoints) {
    auto l = io::listener::bind(bind_point(k(), dir_));
    ASSERT_TRUE(l) << l.error().message();
    const io::endpoint at = l->local_endpoint().value();
    run_one(w(), [&] {
        auto c = io::stream::connect(at, patience());
        ASSERT_TRUE(c) << c.error().message();
        io::endpoint from;
        auto s = l->accept(patience(), &from);
        ASSERT_TRUE(s) << s.error().message();
        const io::endpoint c_local = c->local_endpoint().value(), c_peer = c->peer_endpoint().value();
        const io::endpoint s_local = s->local_endpoint().value(), s_peer = s->peer_endpoint().value();
        EXPECT_EQ(c_peer.to_string(), at.to_string());
        EXPECT_EQ(s_local.to_string(), at.to_string());
        if (k() == kind::tcp4 || k() == kind::tcp6) {
            // An unnamed Unix-domain client has no address to compare.
            EXPECT_EQ(s_peer.to_string(), c_local.to_string());
            EXPECT_EQ(from.to_string(), c_local.to_string());
            EXPECT_NE(c_local.port(), 0);
            EXPECT_EQ(c_peer.port(), at.port());
        }
        EXPECT_EQ(c_local.family(), at.family());
        EXPECT_EQ(from.family(), at.family());
    });
}

// Sockets come non-blocking and close-on-exec, accepted ones too.
TEST_P(IoStream, DescriptorFlags) {
    stream_pair p = connected_pair(bind_point(k(), dir_));
    for (const io::stream* s : {&p.a, &p.b}) {
        const int fd = s->native_handle();
        ASSERT_GE(fd, 0);
        EXPECT_TRUE(::fcntl(fd, F_GETFL) & O_NONBLOCK);
        EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC);
    }
}

INSTANTIATE_TEST_SUITE_P(All, IoStream,
                         ::testing::Combine(::testing::Values(kind::tcp4, kind::tcp6, kind::unix_path,
                                                              kind::unix_abstract),
                                            ::testing::ValuesIn(all_places)),
                         kind_where_name);
// The same on a worker that is the test's own thread.
INSTANTIATE_TEST_SUITE_P(Caller, IoStream,
                         ::testing::Combine(::testing::Values(kind::tcp4, kind::unix_path),
                                            ::testing::Values(where::caller)),
                         kind_where_name);

// ---- not parameterized -----------------------------------------------------------

int tcp_nodelay(int fd) {
    int v = -1;
    socklen_t len = sizeof v;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len) != 0) return -1;
    return v;
}

TEST(IoStreamTcp, SetNodelay) {
    stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
    EXPECT_FALSE(p.a.set_nodelay(true));
    EXPECT_NE(tcp_nodelay(p.a.native_handle()), 0);
    EXPECT_FALSE(p.a.set_nodelay(false));
    EXPECT_EQ(tcp_nodelay(p.a.native_handle()), 0);
    io::stream closed;
    EXPECT_TRUE(closed.set_nodelay(true));
}

// A listener's port is reused across a restart (SO_REUSEADDR by default),
// even with a connection of the first one lingering in TIME_WAIT.
TEST(IoStreamTcp, ListenerRebindsItsPort) {
    io::endpoint at;
    {
        stream_pair p = connected_pair(io::endpoint::loopback_v4(0));
        at = p.b.local_endpoint().value();
        EXPECT_FALSE(p.b.close());  // the server closes first: its side waits in TIME_WAIT
        char b;
        EXPECT_EQ(p.a.read_some(&b, 1, patience()).value(), 0u);
    }
    auto again = io::listener::bind(at);
    EXPECT_TRUE(again) << again.error().message();
}

// Adopting descriptors: a socketpair(2) becomes two streams that work from
// fibers, and release() hands a descriptor back without closing it.
TEST(IoStreamAdopt, SocketpairAndRelease) {
    for (where w : all_places) {
        SCOPED_TRACE(where_name(w));
        stream_pair p = socket_pair();
        EXPECT_TRUE(::fcntl(p.a.native_handle(), F_GETFL) & O_NONBLOCK) << "adopting makes it non-blocking";
        run_together(w, {
            [&] { EXPECT_FALSE(p.a.write_all("adopted", patience())); },
            [&] {
                char b[7];
                EXPECT_FALSE(p.b.read_exact(b, sizeof b, patience()));
                EXPECT_EQ(std::string(b, 7), "adopted");
            },
        });
        const int fd = p.a.release();
        EXPECT_FALSE(p.a.is_open());
        EXPECT_EQ(p.a.native_handle(), -1);
        EXPECT_EQ(::fcntl(fd, F_GETFD) >= 0, true) << "release() must not close";
        io::stream again(fd);
        EXPECT_EQ(again.native_handle(), fd);
    }
}

// A listener adopted from a socket listened on outside.
TEST(IoStreamAdopt, Listener) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    const io::endpoint any = io::endpoint::loopback_v4(0);
    ASSERT_EQ(::bind(fd, any.data(), any.size()), 0);
    ASSERT_EQ(::listen(fd, 16), 0);
    io::listener l(fd);
    const io::endpoint at = l.local_endpoint().value();
    run_together(where::one_worker, {
        [&] {
            auto s = l.accept(patience());
            ASSERT_TRUE(s) << s.error().message();
            EXPECT_FALSE(s->write_all("hi", patience()));
        },
        [&] {
            auto c = io::stream::connect(at, patience());
            ASSERT_TRUE(c) << c.error().message();
            char b[2];
            EXPECT_FALSE(c->read_exact(b, 2, patience()));
            EXPECT_EQ(std::string(b, 2), "hi");
        },
    });
}

// A socket a fiber waited on during a caller_is_worker scheduler's run()
// outlives it: after run() returned, with that scheduler still alive, a
// fiber of another scheduler waits on it and sees the data that arrives
// (its registration went with the first scheduler's engine).
TEST(IoStreamCaller, ASocketOutlivesTheRunThatWaitedOnIt) {
    stream_pair p = socket_pair();
    scheduler first({.workers = 1, .caller_is_worker = true});
    first.run([&] {
        std::thread t([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            EXPECT_FALSE(p.b.write_all("x", 1));
        });
        char c = 0;
        auto n = p.a.read_some(&c, 1, patience());  // parks: data comes later
        ASSERT_TRUE(n) << n.error().message();
        EXPECT_EQ(c, 'x');
        t.join();
    });
    scheduler second({.workers = 1});
    std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_FALSE(p.b.write_all("y", 1));
    });
    second.spawn([&] {
        char c = 0;
        auto n = p.a.read_some(&c, 1, patience());
        ASSERT_TRUE(n) << n.error().message();
        EXPECT_EQ(c, 'y');
    }).join();
    t.join();
}

// result<T>::value() throws std::system_error on an error; the error
// survives a move of the result.
TEST(IoResult, ValueAndError) {
    io::result<int> ok = 5;
    EXPECT_TRUE(ok.has_value());
    EXPECT_EQ(ok.value(), 5);
    io::result<int> bad = std::errc::timed_out;
    EXPECT_FALSE(bad);
    EXPECT_EQ(bad.error(), std::errc::timed_out);
    EXPECT_THROW((void)bad.value(), std::system_error);
    io::result<std::string> moved = io::result<std::string>(std::make_error_code(std::errc::broken_pipe));
    EXPECT_EQ(moved.error(), std::errc::broken_pipe);
    const std::error_code e = io::errc::eof;
    EXPECT_EQ(e.category(), io::io_category());
    EXPECT_STRNE(io::io_category().name(), "");
}

// limits: timeout() and until() set the deadline they name.
TEST(IoResult, Limits) {
    const auto before = std::chrono::steady_clock::now();
    const io::limits l = io::timeout(std::chrono::seconds(10));
    EXPECT_GE(l.deadline, before + std::chrono::seconds(10));
    EXPECT_FALSE(l.stop.stop_possible());
    std::stop_source src;
    const io::limits m = io::until(before, src.get_token());
    EXPECT_EQ(m.deadline, before);
    EXPECT_TRUE(m.stop.stop_possible());
    const io::limits none;
    EXPECT_EQ(none.deadline, std::chrono::steady_clock::time_point::max());
}

}  // namespace
