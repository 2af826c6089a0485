// io::datagram: UDP over IPv4 loopback and Unix-domain datagram pairs (a
// path in a temporary directory, and abstract names): send_to /
// receive_from in both directions with the sender's address reported,
// datagram boundaries kept, truncation as recvfrom, a receiver that waits
// before anything is sent, deadlines and stop requests on receive, from
// fibers on 1 and 2 workers and from plain threads.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

#include "io_support.hpp"

namespace {

using namespace spindle::test;

class IoDatagram : public ::testing::TestWithParam<where> {};

// A ping-pong of 200 datagrams of varied sizes between a bound receiver and
// a sender: each one arrives whole, as one, with the sender's address, and
// the answer goes back to that address. Loopback UDP drops nothing while
// the receiver keeps up, and here it answers each before the next comes.
void ping_pong(where w, io::datagram& server, io::datagram& client, const io::endpoint& server_at) {
    constexpr int rounds = 200;
    run_together(w, {
        [&] {
            std::vector<std::byte> buf(2048);
            for (int i = 0; i < rounds; ++i) {
                io::endpoint from;
                auto n = server.receive_from(buf.data(), buf.size(), &from, patience());
                ASSERT_TRUE(n) << n.error().message();
                const std::size_t want = static_cast<std::size_t>(i * 37 % 1500 + 1);
                ASSERT_EQ(*n, want) << "datagram " << i;
                ASSERT_EQ(sequence_mismatch(buf.data(), *n, static_cast<std::uint64_t>(i)), *n);
                auto m = server.send_to(buf.data(), *n, from, patience());
                ASSERT_TRUE(m) << m.error().message();
                EXPECT_EQ(*m, *n);
            }
        },
        [&] {
            std::vector<std::byte> back(2048);
            for (int i = 0; i < rounds; ++i) {
                const std::size_t len = static_cast<std::size_t>(i * 37 % 1500 + 1);
                const auto msg = sequence(len, static_cast<std::uint64_t>(i));
                auto m = client.send_to(msg.data(), len, server_at, patience());
                ASSERT_TRUE(m) << m.error().message();
                ASSERT_EQ(*m, len);
                io::endpoint from;
                auto n = client.receive_from(back.data(), back.size(), &from, patience());
                ASSERT_TRUE(n) << n.error().message();
                ASSERT_EQ(*n, len);
                ASSERT_EQ(std::memcmp(back.data(), msg.data(), len), 0);
                EXPECT_EQ(from.to_string(), server_at.to_string());
            }
        },
    });
}

TEST_P(IoDatagram, UdpV4) {
    auto server = io::datagram::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(server) << server.error().message();
    const io::endpoint at = server->local_endpoint().value();
    EXPECT_NE(at.port(), 0);
    auto client = io::datagram::open(AF_INET);
    ASSERT_TRUE(client) << client.error().message();
    ping_pong(GetParam(), *server, *client, at);
    // The client got an address by sending; the server saw that one.
    EXPECT_NE(client->local_endpoint().value().port(), 0);
}

TEST_P(IoDatagram, UnixPathPair) {
    temp_dir dir;
    auto server = io::datagram::bind(io::endpoint::unix_path(dir / "server.sock").value());
    ASSERT_TRUE(server) << server.error().message();
    // A Unix-domain client must be bound to be answered.
    auto client = io::datagram::bind(io::endpoint::unix_path(dir / "client.sock").value());
    ASSERT_TRUE(client) << client.error().message();
    EXPECT_EQ(client->local_endpoint().value().to_string(), "unix:" + (dir / "client.sock"));
    ping_pong(GetParam(), *server, *client, server->local_endpoint().value());
}

TEST_P(IoDatagram, UnixAbstractPair) {
    auto server = io::datagram::bind(io::endpoint::unix_path(abstract_name("dgram-s")).value());
    ASSERT_TRUE(server) << server.error().message();
    auto client = io::datagram::bind(io::endpoint::unix_path(abstract_name("dgram-c")).value());
    ASSERT_TRUE(client) << client.error().message();
    ping_pong(GetParam(), *server, *client, server->local_endpoint().value());
}

// recvfrom truncates a datagram longer than the buffer; the rest is gone,
// the next datagram is whole.
TEST_P(IoDatagram, TruncatesLikeRecvfrom) {
    auto a = io::datagram::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(a);
    auto b = io::datagram::open(AF_INET);
    ASSERT_TRUE(b);
    const io::endpoint at = a->local_endpoint().value();
    run_one(GetParam(), [&] {
        const auto big = sequence(100);
        ASSERT_EQ(b->send_to(big.data(), big.size(), at, patience()).value(), 100u);
        ASSERT_EQ(b->send_to("next", 4, at, patience()).value(), 4u);
        std::byte small[10];
        auto n = a->receive_from(small, sizeof small, nullptr, patience());
        ASSERT_TRUE(n) << n.error().message();
        EXPECT_EQ(*n, 10u);
        EXPECT_EQ(sequence_mismatch(small, 10), 10u);
        char four[16];
        auto m = a->receive_from(four, sizeof four, nullptr, patience());
        ASSERT_TRUE(m);
        EXPECT_EQ(std::string(four, *m), "next");
    });
}

// A receiver that waits (parked, or blocked in poll) before anything is
// sent gets the datagram; an empty datagram arrives as 0 bytes.
TEST_P(IoDatagram, ReceiverWaitsFirst) {
    auto a = io::datagram::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(a);
    auto b = io::datagram::open(AF_INET);
    ASSERT_TRUE(b);
    const io::endpoint at = a->local_endpoint().value();
    std::atomic<bool> receiving{false};
    run_together(GetParam(), {
        [&] {
            char buf[8];
            receiving.store(true);
            auto n = a->receive_from(buf, sizeof buf, nullptr, patience());
            ASSERT_TRUE(n) << n.error().message();
            EXPECT_EQ(*n, 0u);
            receiving.store(true);
            n = a->receive_from(buf, sizeof buf, nullptr, patience());
            ASSERT_TRUE(n) << n.error().message();
            EXPECT_EQ(std::string(buf, *n), "late");
        },
        [&] {
            // Waits by sleeping, not yielding: the receiver's second call
            // comes after its first completed, and a worker that only sees
            // yields may not look at its I/O (IoLiveness).
            while (!receiving.exchange(false)) this_fiber::sleep_for(100us);
            this_fiber::sleep_for(5ms);
            ASSERT_EQ(b->send_to("", 0, at, patience()).value(), 0u);
            while (!receiving.exchange(false)) this_fiber::sleep_for(100us);
            this_fiber::sleep_for(5ms);
            ASSERT_EQ(b->send_to("late", 4, at, patience()).value(), 4u);
        },
    });
}

// receive_from with a deadline that passes: timed_out, not before the
// deadline; with a stop request: operation_canceled.
TEST_P(IoDatagram, ReceiveDeadlineAndStop) {
    auto a = io::datagram::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(a);
    run_one(GetParam(), [&] {
        char buf[8];
        const auto t0 = std::chrono::steady_clock::now();
        auto n = a->receive_from(buf, sizeof buf, nullptr, io::timeout(30ms));
        ASSERT_FALSE(n);
        EXPECT_EQ(n.error(), std::errc::timed_out) << n.error().message();
        EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);

        std::stop_source src;
        src.request_stop();
        auto s = a->receive_from(buf, sizeof buf, nullptr, io::limits{.stop = src.get_token()});
        ASSERT_FALSE(s);
        EXPECT_EQ(s.error(), std::errc::operation_canceled) << s.error().message();
    });
}

INSTANTIATE_TEST_SUITE_P(All, IoDatagram, ::testing::ValuesIn(all_places), where_param_name);

TEST(IoDatagramErrors, SendToNobodyUnix) {
    temp_dir dir;
    auto a = io::datagram::open(AF_UNIX);
    ASSERT_TRUE(a) << a.error().message();
    auto n = a->send_to("x", 1, io::endpoint::unix_path(dir / "nobody").value(), patience());
    ASSERT_FALSE(n);
    EXPECT_EQ(n.error(), std::errc::no_such_file_or_directory) << n.error().message();
    auto bogus = io::datagram::open(12345);
    EXPECT_FALSE(bogus);
}

}  // namespace
