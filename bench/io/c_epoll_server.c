// bench/io/c_epoll_server.c — the io suite's lower bound for an epoll
// runtime (bench/io/io_bench.cpp): a stream echo server in one epoll loop
// per worker, nothing else. Usage: c_epoll_server PORT WORKERS.
//
// The idiom: level-triggered, nonblocking sockets, and the echo written
// straight from the read, in the same wake-up: a ping-pong peer waits for
// the reply, so the write nearly always goes through at once and costs no
// EPOLLOUT registration. Only what a full socket buffer refuses is kept
// (heap, per connection); the connection then waits for EPOLLOUT and reads
// nothing until it is written. Level-triggered costs one epoll_wait per
// batch of ready connections, as edge-triggered does, without the extra
// read() to EAGAIN that edge-triggered needs per wake-up.
//
// WORKERS > 1: one thread per worker, each with its own SO_REUSEPORT
// listening socket and its own loop (the kernel spreads the connections).
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { buf_size = 65536, max_events = 256 };

struct conn {
    int fd;
    char* pending;  // what the socket refused, or NULL
    size_t off, len;
};

static int port;

static void die(const char* what) {
    fprintf(stderr, "c_epoll_server: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int listener(int reuseport) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) die("SO_REUSEPORT");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0) die("bind");
    if (listen(fd, 4096) != 0) die("listen");
    return fd;
}

static void drop(int ep, struct conn* c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->pending);
    free(c);
}

// Writes [p, p + n) to c; keeps what the socket refuses. 0: c was dropped.
static int echo(int ep, struct conn* c, const char* p, size_t n) {
    while (n > 0) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) break;
        if (k <= 0) return drop(ep, c), 0;
        p += k, n -= (size_t)k;
    }
    if (n == 0) return 1;
    c->pending = malloc(n);
    if (c->pending == NULL) die("malloc");
    memcpy(c->pending, p, n);
    c->off = 0, c->len = n;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    return 1;
}

static void* worker(void* arg) {
    int lfd = listener(arg != NULL);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    static struct conn accept_tag;  // data.ptr of the listening socket
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &accept_tag}, evs[max_events];
    char* buf = malloc(buf_size);
    if (ep < 0 || buf == NULL || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0) die("epoll");
    for (;;) {
        int n = epoll_wait(ep, evs, max_events, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("epoll_wait");
        for (int i = 0; i < n; ++i) {
            struct conn* c = evs[i].data.ptr;
            if (c == &accept_tag) {
                int fd, one = 1;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    c = calloc(1, sizeof *c);
                    if (c == NULL) die("calloc");
                    c->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev) != 0) die("epoll_ctl");
                }
                continue;
            }
            if (c->pending != NULL) {  // EPOLLOUT (or an error): write the rest first
                ssize_t k = send(c->fd, c->pending + c->off, c->len - c->off, MSG_NOSIGNAL);
                if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (k <= 0) { drop(ep, c); continue; }
                if ((c->off += (size_t)k) < c->len) continue;
                free(c->pending);
                c->pending = NULL;
                struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &cev);
                continue;
            }
            ssize_t k = recv(c->fd, buf, buf_size, 0);
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (k <= 0) { drop(ep, c); continue; }
            echo(ep, c, buf, (size_t)k);
        }
    }
    return NULL;
}

int main(int argc, char** argv) {
    if (argc != 3 || (port = atoi(argv[1])) <= 0 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: c_epoll_server PORT WORKERS\n");
        return 2;
    }
    int workers = atoi(argv[2]);
    for (int w = 1; w < workers; ++w) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, &port) != 0) die("pthread_create");
    }
    worker(workers > 1 ? &port : NULL);
    return 0;
}
