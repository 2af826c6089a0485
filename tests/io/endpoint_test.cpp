// io::endpoint: parsing IPv4, IPv6 and Unix-domain addresses (paths and
// abstract "@name"s), the loopback and wildcard makers, to_string, port and
// family, the round trip through from_native, and the errors of addresses
// that are not addresses; and the errors sockets give for endpoints that
// cannot be bound or reached. No fibers here: an endpoint is plain data.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>

#include "io_support.hpp"

namespace {

using namespace spindle::test;

TEST(IoEndpoint, Ipv4ParsesAndPrints) {
    auto e = io::endpoint::ipv4("127.0.0.1", 8080);
    ASSERT_TRUE(e) << e.error().message();
    EXPECT_EQ(e->family(), AF_INET);
    EXPECT_EQ(e->port(), 8080);
    EXPECT_EQ(e->to_string(), "127.0.0.1:8080");
    ASSERT_EQ(e->size(), sizeof(sockaddr_in));
    const auto* sin = reinterpret_cast<const sockaddr_in*>(e->data());
    EXPECT_EQ(ntohs(sin->sin_port), 8080);
    EXPECT_EQ(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);

    auto z = io::endpoint::ipv4("10.1.2.3", 0);
    ASSERT_TRUE(z);
    EXPECT_EQ(z->to_string(), "10.1.2.3:0");
    EXPECT_EQ(io::endpoint::ipv4("255.255.255.255", 65535)->to_string(), "255.255.255.255:65535");
}

TEST(IoEndpoint, Ipv6ParsesAndPrints) {
    auto e = io::endpoint::ipv6("::1", 443);
    ASSERT_TRUE(e) << e.error().message();
    EXPECT_EQ(e->family(), AF_INET6);
    EXPECT_EQ(e->port(), 443);
    EXPECT_EQ(e->to_string(), "[::1]:443");
    ASSERT_EQ(e->size(), sizeof(sockaddr_in6));
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(e->data());
    EXPECT_EQ(ntohs(sin6->sin6_port), 443);
    EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));

    auto f = io::endpoint::ipv6("fe80::1:2", 7);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->to_string(), "[fe80::1:2]:7");
}

TEST(IoEndpoint, MakersGiveLoopbackAndWildcard) {
    EXPECT_EQ(io::endpoint::loopback_v4(5).to_string(), "127.0.0.1:5");
    EXPECT_EQ(io::endpoint::loopback_v6(6).to_string(), "[::1]:6");
    EXPECT_EQ(io::endpoint::any_v4(7).to_string(), "0.0.0.0:7");
    EXPECT_EQ(io::endpoint::any_v6(8).to_string(), "[::]:8");
    EXPECT_EQ(io::endpoint::loopback_v4(5).family(), AF_INET);
    EXPECT_EQ(io::endpoint::any_v6(8).family(), AF_INET6);
    EXPECT_EQ(io::endpoint::any_v6(8).port(), 8);
}

TEST(IoEndpoint, DefaultIsEmpty) {
    io::endpoint e;
    EXPECT_EQ(e.family(), AF_UNSPEC);
    EXPECT_EQ(e.port(), 0);
}

TEST(IoEndpoint, UnixPath) {
    auto e = io::endpoint::unix_path("/tmp/some.sock");
    ASSERT_TRUE(e) << e.error().message();
    EXPECT_EQ(e->family(), AF_UNIX);
    EXPECT_EQ(e->port(), 0);
    EXPECT_EQ(e->to_string(), "unix:/tmp/some.sock");
    const auto* sun = reinterpret_cast<const sockaddr_un*>(e->data());
    EXPECT_STREQ(sun->sun_path, "/tmp/some.sock");
    EXPECT_GE(e->size(), offsetof(sockaddr_un, sun_path) + std::strlen("/tmp/some.sock"));
    EXPECT_LE(e->size(), sizeof(sockaddr_un));
}

// "@name" is the abstract namespace: sun_path starts with a NUL, and the
// address length covers exactly the name (abstract names are not
// NUL-terminated; a longer length would name another socket).
TEST(IoEndpoint, UnixAbstract) {
    auto e = io::endpoint::unix_path("@spindle-abstract");
    ASSERT_TRUE(e) << e.error().message();
    EXPECT_EQ(e->family(), AF_UNIX);
    const auto* sun = reinterpret_cast<const sockaddr_un*>(e->data());
    EXPECT_EQ(sun->sun_path[0], '\0');
    EXPECT_EQ(std::string(sun->sun_path + 1, std::strlen("spindle-abstract")), "spindle-abstract");
    EXPECT_EQ(e->size(), offsetof(sockaddr_un, sun_path) + 1 + std::strlen("spindle-abstract"));
    EXPECT_NE(e->to_string().find("spindle-abstract"), std::string::npos) << e->to_string();
}

TEST(IoEndpoint, UnixPathLengthLimit) {
    const std::string ok(107, 'p');
    EXPECT_TRUE(io::endpoint::unix_path("/" + ok.substr(1)));
    const std::string too_long(108, 'p');
    auto e = io::endpoint::unix_path("/" + too_long.substr(1));
    ASSERT_FALSE(e);
    EXPECT_TRUE(e.error()) << "a 108-byte path cannot fit sun_path with its NUL";
}

TEST(IoEndpoint, BadAddressesAreErrors) {
    for (const char* bad : {"", "256.0.0.1", "1.2.3", "1.2.3.4.5", "localhost", "::1", "127.0.0.1 ", "0x7f.1"}) {
        auto e = io::endpoint::ipv4(bad, 80);
        EXPECT_FALSE(e) << "ipv4(\"" << bad << "\") parsed as " << e->to_string();
        if (!e) {
            EXPECT_TRUE(e.error());
        }
    }
    for (const char* bad : {"", ":::", "1::2::3", "gggg::1", "127.0.0.1", "12345::1"}) {
        auto e = io::endpoint::ipv6(bad, 80);
        EXPECT_FALSE(e) << "ipv6(\"" << bad << "\") parsed as " << e->to_string();
    }
}

// value() on an error throws std::system_error carrying the code.
TEST(IoEndpoint, ValueThrowsTheError) {
    auto e = io::endpoint::ipv4("not an address", 1);
    ASSERT_FALSE(e);
    try {
        (void)e.value();
        ADD_FAILURE() << "value() of an error returned";
    } catch (const std::system_error& x) {
        EXPECT_EQ(x.code(), e.error());
    }
}

TEST(IoEndpoint, FromNativeRoundTrips) {
    for (const io::endpoint& e : {io::endpoint::ipv4("192.168.1.20", 1234).value(),
                                  io::endpoint::ipv6("2001:db8::5", 4321).value(),
                                  io::endpoint::unix_path("/run/x.sock").value(),
                                  io::endpoint::unix_path("@abstract-x").value()}) {
        io::endpoint r = io::endpoint::from_native(e.data(), e.size());
        EXPECT_EQ(r.family(), e.family());
        EXPECT_EQ(r.size(), e.size());
        EXPECT_EQ(r.port(), e.port());
        EXPECT_EQ(r.to_string(), e.to_string());
        EXPECT_EQ(std::memcmp(r.data(), e.data(), e.size()), 0) << e.to_string();
    }
}

// ---- errors of sockets given endpoints they cannot use -------------------------

TEST(IoEndpoint, BindErrors) {
    // An address in use: a second listener on the first one's port.
    auto first = io::listener::bind(io::endpoint::loopback_v4(0));
    ASSERT_TRUE(first) << first.error().message();
    auto again = io::listener::bind(first->local_endpoint().value());
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error(), std::errc::address_in_use) << again.error().message();

    // An address this host does not have (TEST-NET-1, RFC 5737).
    auto foreign = io::listener::bind(io::endpoint::ipv4("192.0.2.1", 0).value());
    ASSERT_FALSE(foreign);
    EXPECT_EQ(foreign.error(), std::errc::address_not_available) << foreign.error().message();

    // A Unix path in a directory that does not exist.
    auto nodir = io::listener::bind(io::endpoint::unix_path("/nonexistent-dir-spindle/x.sock").value());
    ASSERT_FALSE(nodir);
    EXPECT_EQ(nodir.error(), std::errc::no_such_file_or_directory) << nodir.error().message();

    // No address at all.
    EXPECT_FALSE(io::listener::bind(io::endpoint{}));
    EXPECT_FALSE(io::datagram::bind(io::endpoint{}));
}

TEST(IoEndpoint, ConnectErrors) {
    // A port nobody listens on: bind a listener to learn a free port, close it.
    io::endpoint gone;
    {
        auto l = io::listener::bind(io::endpoint::loopback_v4(0));
        ASSERT_TRUE(l);
        gone = l->local_endpoint().value();
    }
    for (where w : all_places) {
        SCOPED_TRACE(where_name(w));
        run_one(w, [&] {
            auto s = io::stream::connect(gone, patience());
            ASSERT_FALSE(s);
            EXPECT_EQ(s.error(), std::errc::connection_refused) << s.error().message();

            temp_dir dir;
            auto nobody = io::stream::connect(io::endpoint::unix_path(dir / "nobody.sock").value(), patience());
            ASSERT_FALSE(nobody);
            EXPECT_EQ(nobody.error(), std::errc::no_such_file_or_directory) << nobody.error().message();

            EXPECT_FALSE(io::stream::connect(io::endpoint{}, patience()));
        });
    }
}

// Calls on a socket that is not open fail with EBADF; close() of one that
// is not open is harmless.
TEST(IoEndpoint, ClosedSocketCallsFail) {
    for (where w : all_places) {
        SCOPED_TRACE(where_name(w));
        run_one(w, [] {
            io::stream s;
            std::byte b[4];
            auto r = s.read_some(b, patience());
            ASSERT_FALSE(r);
            EXPECT_EQ(r.error(), std::errc::bad_file_descriptor) << r.error().message();
            auto wr = s.write_some(b, sizeof b, patience());
            ASSERT_FALSE(wr);
            EXPECT_EQ(wr.error(), std::errc::bad_file_descriptor) << wr.error().message();
            EXPECT_FALSE(s.local_endpoint());
            io::listener l;
            EXPECT_FALSE(l.accept(patience()));
            io::datagram d;
            EXPECT_FALSE(d.receive_from(b, sizeof b, nullptr, patience()));
            (void)s.close();
            EXPECT_FALSE(s.is_open());
        });
    }
}

}  // namespace
