// The spindle echo server of bench/io: one fiber per connection on
// spindle's I/O layer, the backend chosen by SPINDLE_IO (uring or epoll).
//
//   spindle_io_server PORT WORKERS
//
// Stream echo, as every server of the suite: whatever arrives goes back.
// main()'s thread is worker 0 (caller_is_worker), as the C loops and a
// current-thread tokio runtime run on theirs: one worker, one thread.
#include <cstdio>
#include <cstdlib>

#include <spindle/io.hpp>
#include <spindle/runtime/scheduler.hpp>

namespace io = spindle::io;

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: spindle_io_server PORT WORKERS\n");
        return 2;
    }
    auto port = static_cast<std::uint16_t>(std::atoi(argv[1]));
    unsigned workers = static_cast<unsigned>(std::atoi(argv[2]));
    spindle::scheduler sched({.workers = workers, .caller_is_worker = true});
    auto l = io::listener::bind(io::endpoint::loopback_v4(port), {.backlog = 4096});
    if (!l) {
        std::fprintf(stderr, "spindle_io_server: port %u: %s\n", unsigned{port}, l.error().message().c_str());
        return 1;
    }
    sched.run([&] {
        for (;;) {
            auto s = l->accept();
            if (!s) {
                if (s.error() == std::errc::too_many_files_open) {
                    spindle::this_fiber::sleep_for(std::chrono::milliseconds(1));
                    continue;
                }
                return;
            }
            sched.spawn([s = std::move(*s)]() mutable {
                (void)s.set_nodelay(true);
                char buf[4096];
                for (;;) {
                    auto n = s.read_some(buf, sizeof buf);
                    if (!n || *n == 0 || s.write_all(buf, *n)) return;
                }
            }, {.stack_size = 16 * 1024}).detach();
        }
    });
    return 0;
}
