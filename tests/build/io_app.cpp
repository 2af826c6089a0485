// The fiber I/O layer as a package user links it (tests/build/
// consumer_check.cmake): a fiber echoes through a Unix socket pair.
// Prints "io echo ok <backend>" on success.
#include <sys/socket.h>

#include <cstdio>
#include <cstring>

#include <spindle/io.hpp>
#include <spindle/runtime/scheduler.hpp>

int main() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    spindle::io::stream a(sv[0]), b(sv[1]);
    bool ok = false;
    {
        spindle::scheduler sched({.workers = 1});
        sched.spawn([&] {
            char buf[6] = {};
            ok = !a.write_all("hello", 5) && !b.read_exact(buf, 5) && std::strcmp(buf, "hello") == 0 &&
                 spindle::blocking([] { return 42; }) == 42;
        }).join();
    }
    std::printf("io echo %s %s\n", ok ? "ok" : "FAILED", spindle::io::backend_name(spindle::io::current_backend()));
    return ok ? 0 : 1;
}
