// An echo client: `connections` fibers each send `messages` numbered
// messages to an echo server and check that every byte comes back.
//
//   example_echo_client port [connections] [messages] [size]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <vector>

#include <spindle/io.hpp>
#include <spindle/runtime/scheduler.hpp>

namespace io = spindle::io;

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: example_echo_client port [connections] [messages] [size]\n");
        return 2;
    }
    auto port = static_cast<std::uint16_t>(std::atoi(argv[1]));
    int connections = argc > 2 ? std::atoi(argv[2]) : 16;
    int messages = argc > 3 ? std::atoi(argv[3]) : 1000;
    std::size_t size = argc > 4 ? static_cast<std::size_t>(std::atoi(argv[4])) : 64;
    std::atomic<long> round_trips{0};
    std::atomic<int> failures{0};
    {
        spindle::scheduler sched({.workers = 2});
        std::vector<spindle::fiber> fibers;
        for (int c = 0; c < connections; ++c) {
            fibers.push_back(sched.spawn([&, c] {
                auto s = io::stream::connect(io::endpoint::loopback_v4(port), io::timeout(std::chrono::seconds(10)));
                if (!s) {
                    std::fprintf(stderr, "echo_client: connect: %s\n", s.error().message().c_str());
                    ++failures;
                    return;
                }
                (void)s->set_nodelay(true);
                std::vector<char> out(size), in(size);
                for (int m = 0; m < messages; ++m) {
                    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>(c * 31 + m * 7 + static_cast<int>(i));
                    if (auto ec = s->write_all(out.data(), size)) {
                        std::fprintf(stderr, "echo_client: write: %s\n", ec.message().c_str());
                        ++failures;
                        return;
                    }
                    if (auto ec = s->read_exact(in.data(), size, io::timeout(std::chrono::seconds(10)))) {
                        std::fprintf(stderr, "echo_client: read: %s\n", ec.message().c_str());
                        ++failures;
                        return;
                    }
                    if (std::memcmp(in.data(), out.data(), size) != 0) {
                        std::fprintf(stderr, "echo_client: connection %d message %d came back changed\n", c, m);
                        ++failures;
                        return;
                    }
                    ++round_trips;
                }
            }));
        }
        for (auto& f : fibers) f.join();
    }
    std::printf("echo_client: %ld round trips of %zu bytes over %d connections, %s\n", round_trips.load(), size,
                connections, failures.load() == 0 ? "all echoed correctly" : "with FAILURES");
    return failures.load() == 0 ? 0 : 1;
}
