// An echo server: one fiber per connection on spindle's I/O layer.
//
//   example_echo_server [port] [workers]     (port 0: any free port)
//
// It prints the address it listens on, then serves until killed. A full
// descriptor table (EMFILE) is reported and retried, never fatal. main()'s
// own thread is worker 0 (caller_is_worker), as in an event loop: with one
// worker the server is a single thread.
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <spindle/io.hpp>
#include <spindle/runtime/scheduler.hpp>

namespace io = spindle::io;

int main(int argc, char** argv) {
    auto port = static_cast<std::uint16_t>(argc > 1 ? std::atoi(argv[1]) : 7000);
    unsigned workers = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 1;
    spindle::scheduler sched({.workers = workers, .caller_is_worker = true});
    auto l = io::listener::bind(io::endpoint::loopback_v4(port));
    if (!l) {
        std::fprintf(stderr, "echo_server: cannot listen on port %u: %s\n", unsigned{port}, l.error().message().c_str());
        return 1;
    }
    std::printf("echo_server: listening on %s (%s, %u workers)\n", l->local_endpoint()->to_string().c_str(),
                io::backend_name(io::current_backend()), sched.workers());
    std::fflush(stdout);
    sched.run([&] {  // returns when every fiber has finished
        for (;;) {
            auto s = l->accept();
            if (!s) {
                if (s.error() == std::errc::too_many_files_open) {
                    std::fprintf(stderr, "echo_server: accept: %s; retrying\n", s.error().message().c_str());
                    spindle::this_fiber::sleep_for(std::chrono::milliseconds(10));
                    continue;
                }
                std::fprintf(stderr, "echo_server: accept: %s\n", s.error().message().c_str());
                return;
            }
            sched.spawn([s = std::move(*s)]() mutable {
                (void)s.set_nodelay(true);
                char buf[16384];
                for (;;) {
                    auto n = s.read_some(buf, sizeof buf);
                    if (!n || *n == 0) return;  // error or end of stream
                    if (s.write_all(buf, *n)) return;
                }
            }).detach();
        }
    });
    return 0;
}
