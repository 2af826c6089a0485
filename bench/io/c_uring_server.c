// bench/io/c_uring_server.c — the io suite's reference (bench/io/io_bench.cpp):
// a stream echo server in one io_uring loop per worker, nothing else.
// Usage: c_uring_server PORT WORKERS.
//
// One multishot accept; per connection one operation in flight at a time:
// a recv into the connection's buffer, then a send of what came (again for
// the rest, if the send was short), then the next recv. Completions are
// handled in batches: every SQE the batch prepares goes to the kernel in
// the one io_uring_submit_and_wait that also waits for the next batch. The
// ring is single-issuer with deferred task work where the kernel offers it
// (6.1+): completions run in that call, not in interrupts of the loop.
//
// WORKERS > 1: one thread per worker, each with its own SO_REUSEPORT
// listening socket and its own ring.
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { buf_size = 16384, ring_entries = 4096 };

struct conn {
    int fd;
    int sending;         // the operation in flight: 1 send, 0 recv
    unsigned off, len;   // the send: [off, len) of buf is still to go
    char buf[buf_size];  // touched only as far as data comes
};

static int port;

static void die(const char* what, int err) {
    fprintf(stderr, "c_uring_server: %s: %s\n", what, strerror(err));
    exit(1);
}

static struct io_uring_sqe* sqe_of(struct io_uring* ring) {
    struct io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (sqe == NULL) {  // the queue is full: hand it over and take a fresh one
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}

static void post_recv(struct io_uring* ring, struct conn* c) {
    struct io_uring_sqe* sqe = sqe_of(ring);
    c->sending = 0;
    io_uring_prep_recv(sqe, c->fd, c->buf, buf_size, 0);
    io_uring_sqe_set_data(sqe, c);
}

static void post_send(struct io_uring* ring, struct conn* c) {
    struct io_uring_sqe* sqe = sqe_of(ring);
    c->sending = 1;
    io_uring_prep_send(sqe, c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
    io_uring_sqe_set_data(sqe, c);
}

static void post_accept(struct io_uring* ring, int lfd) {
    io_uring_prep_multishot_accept(sqe_of(ring), lfd, NULL, NULL, SOCK_CLOEXEC);  // user data 0
}

static void* worker(void* arg) {
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (lfd < 0) die("socket", errno);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (arg != NULL && setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) die("SO_REUSEPORT", errno);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(lfd, (struct sockaddr*)&a, sizeof a) != 0) die("bind", errno);
    if (listen(lfd, 4096) != 0) die("listen", errno);

    struct io_uring ring;
    struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN};
    int r = io_uring_queue_init_params(ring_entries, &ring, &p);
    if (r == -EINVAL) {  // a kernel before 6.1
        memset(&p, 0, sizeof p);
        r = io_uring_queue_init_params(ring_entries, &ring, &p);
    }
    if (r < 0) die("io_uring_queue_init", -r);
    post_accept(&ring, lfd);
    for (;;) {
        r = io_uring_submit_and_wait(&ring, 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) die("io_uring_submit_and_wait", -r);
        struct io_uring_cqe* cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            struct conn* c = io_uring_cqe_get_data(cqe);
            if (c == NULL) {  // the accept
                if (cqe->res >= 0) {
                    if ((c = malloc(sizeof *c)) == NULL) die("malloc", ENOMEM);
                    c->fd = cqe->res;
                    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    post_recv(&ring, c);
                }
                if (!(cqe->flags & IORING_CQE_F_MORE)) post_accept(&ring, lfd);  // multishot ended
                continue;
            }
            if (cqe->res <= 0) {  // peer closed, or an error: the connection ends
                close(c->fd);
                free(c);
                continue;
            }
            if (!c->sending) {
                c->off = 0;
                c->len = (unsigned)cqe->res;
                post_send(&ring, c);
            } else if ((c->off += (unsigned)cqe->res) < c->len) {
                post_send(&ring, c);
            } else {
                post_recv(&ring, c);
            }
        }
        io_uring_cq_advance(&ring, seen);
    }
    return NULL;
}

int main(int argc, char** argv) {
    if (argc != 3 || (port = atoi(argv[1])) <= 0 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: c_uring_server PORT WORKERS\n");
        return 2;
    }
    int workers = atoi(argv[2]);
    for (int w = 1; w < workers; ++w) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, &port) != 0) die("pthread_create", errno);
    }
    worker(workers > 1 ? &port : NULL);
    return 0;
}
