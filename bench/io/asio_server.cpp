// bench/io/asio_server.cpp — the io suite's Boost.Asio competitor
// (bench/io/io_bench.cpp): a stream echo server on C++20 coroutines
// (co_spawn, use_awaitable), one coroutine per connection.
// Usage: asio_server PORT WORKERS.
//
// WORKERS threads, each running its own io_context with its own
// SO_REUSEPORT acceptor: Asio's fastest multi-core shape (one io_context
// shared by several threads makes them contend for its lock), and with
// WORKERS = 1 a single thread, as the other single-loop servers. The
// io_context is told it is single-threaded (concurrency hint 1), which
// drops its internal locking.
// <utility> first: Boost 1.74's awaitable.hpp uses std::exchange without it.
// Its configuration finds C++20 coroutines under GCC only; under Clang with
// libstdc++ they are there all the same (C++20's <coroutine>).
#include <coroutine>
#include <utility>
#ifndef BOOST_ASIO_HAS_CO_AWAIT
#define BOOST_ASIO_HAS_CO_AWAIT 1
#endif
#ifndef BOOST_ASIO_HAS_STD_COROUTINE
#define BOOST_ASIO_HAS_STD_COROUTINE 1
#endif

#include <boost/asio.hpp>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

asio::awaitable<void> echo(tcp::socket s) {
    char buf[16384];
    try {
        for (;;) {
            const std::size_t n = co_await s.async_read_some(asio::buffer(buf), asio::use_awaitable);
            co_await asio::async_write(s, asio::buffer(buf, n), asio::use_awaitable);
        }
    } catch (const std::exception&) {
        // the peer closed or reset the connection: it ends
    }
}

asio::awaitable<void> listen(tcp::acceptor& a) {
    for (;;) {
        tcp::socket s = co_await a.async_accept(asio::use_awaitable);
        s.set_option(tcp::no_delay(true));
        asio::co_spawn(a.get_executor(), echo(std::move(s)), asio::detached);
    }
}

void run(unsigned short port, bool reuseport) {
    asio::io_context io(1);
    tcp::acceptor a(io);
    const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
    a.open(ep.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    if (reuseport) a.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true));
    a.bind(ep);
    a.listen(4096);
    asio::co_spawn(io, listen(a), asio::detached);
    io.run();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || std::atoi(argv[1]) <= 0 || std::atoi(argv[2]) < 1) {
        std::fprintf(stderr, "usage: asio_server PORT WORKERS\n");
        return 2;
    }
    const auto port = static_cast<unsigned short>(std::atoi(argv[1]));
    const int workers = std::atoi(argv[2]);
    std::vector<std::thread> ts;
    for (int w = 1; w < workers; ++w) ts.emplace_back([=] { run(port, true); });
    run(port, workers > 1);
    for (auto& t : ts) t.join();
}
