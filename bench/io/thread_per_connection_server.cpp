// bench/io/thread_per_connection_server.cpp — the io suite's thread-per-
// connection competitor (bench/io/io_bench.cpp): a stream echo server with
// blocking sockets and one OS thread per connection, the model fibers
// replace. Usage: thread_per_connection_server PORT WORKERS (WORKERS is
// accepted and ignored: the kernel schedules the threads).
//
// Each connection's thread gets a 64 KiB stack: it needs a few hundred
// bytes, and 10 000 default 8 MiB stacks, though only reserved, would
// take 80 GiB of address space for nothing.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "thread_per_connection_server: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

void* serve(void* arg) {
    const int fd = static_cast<int>(reinterpret_cast<long>(arg));
    char buf[16384];
    for (;;) {
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        const char* p = buf;
        ssize_t left = n;
        while (left > 0) {
            const ssize_t k = send(fd, p, static_cast<std::size_t>(left), MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) goto done;
            p += k;
            left -= k;
        }
    }
done:
    close(fd);
    return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || std::atoi(argv[1]) <= 0 || std::atoi(argv[2]) < 1) {
        std::fprintf(stderr, "usage: thread_per_connection_server PORT WORKERS\n");
        return 2;
    }
    const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (lfd < 0) die("socket");
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::atoi(argv[1])));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind");
    if (listen(lfd, 4096) != 0) die("listen");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (;;) {
        const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            die("accept4");
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        if (pthread_create(&t, &attr, serve, reinterpret_cast<void*>(static_cast<long>(fd))) != 0) die("pthread_create");
    }
}
