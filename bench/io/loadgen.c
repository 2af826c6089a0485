// bench/io/loadgen.c — the io suite's load generator (bench/io/io_bench.cpp):
// ping-pong clients of a stream echo server, in one io_uring loop of its
// own (liburing; nothing of spindle's), on one CPU.
//
//   loadgen --port P --conns C --size S --seconds D --warmup W
//           [--cpu N] [--hold] [--idle]
//
// Ping-pong: each of the C connections sends an S-byte message, waits until
// S bytes have come back, records the round trip, and sends again. The
// send and the recv go to the kernel as one linked pair (MSG_WAITALL both:
// the kernel retries a short one itself), and every pair a batch of
// completions prepares goes in the one io_uring_submit_and_wait that waits
// for the next batch: with many connections, one system call serves many
// round trips, which keeps the generator cheaper than any server. A short
// send or recv all the same (the link is then broken) is finished one
// operation at a time. The clock is read once per batch: a round trip runs
// from the batch that prepared its send to the batch that saw its reply.
//
// Output (stdout), one line each: "start" when the measured window opens
// (after W seconds of warm-up), then, D seconds later,
//   end rtt_per_s=X rtts=N p50_us=X p99_us=X p999_us=X cpu_s=X wall_s=X
//       cpu_share=X saturated=0|1 total_rtts=N
// cpu_share: the generator's own CPU time (getrusage) over the window's
// wall time; saturated=1 when it is 0.9 or more: the generator, not the
// server, may then have been the limit. total_rtts counts the warm-up too.
// --hold: then wait for stdin to close before closing the connections (the
// driver reads the server's CPU time while they are still open). Latency
// percentiles come from a log-linear histogram: 128 buckets per power of
// two of nanoseconds, under 1% apart.
//
// Every reply must equal its message (the first 8 bytes of each message
// are a count, so that no two are alike): an echo that differs ends the
// generator with status 1, naming the connection.
//
// --idle: connect C connections (500 at a time, each batch pinged once so
// that the server has accepted and served every connection before the
// next), print "ready conns=C", wait for stdin to close, and exit.
//
// Connections close with SO_LINGER 0 (a reset): thousands of them per run
// would otherwise leave as many ports in TIME_WAIT.
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { sub_bits = 7, sub = 1 << sub_bits, max_exp = 48, idle_batch = 500 };

struct conn {
    int fd;
    int send_busy, recv_busy;  // an operation of that kind is in flight
    unsigned sent, rcvd;       // of the current message
    uint64_t t0;               // the batch that prepared its first send
    char* out;
    char* in;
};

static struct io_uring ring;
static struct conn* conns;
static int n_conns, active_conns;
static unsigned size;
static uint64_t hist[(max_exp + 1) * sub];
static uint64_t measured, total;
static int recording;
static int verify;  // each reply is checked against its message (not --idle)

static void die(const char* what, int err) {
    fprintf(stderr, "loadgen: %s: %s\n", what, strerror(err));
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// The histogram: values below `sub` exactly; above, 128 buckets per
// power of two.
static unsigned bucket(uint64_t v) {
    if (v < sub) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);  // >= sub_bits
    if (e > max_exp) return (max_exp - sub_bits + 1) * sub + sub - 1;
    return (e - sub_bits + 1) * sub + (unsigned)((v >> (e - sub_bits)) & (sub - 1));
}

static double bucket_mid(unsigned i) {  // the middle of bucket i's range, ns
    if (i < sub) return i;
    unsigned e = i / sub + sub_bits - 1, s = i % sub;
    double lo = (double)((uint64_t)(sub + s) << (e - sub_bits));
    return lo + (double)((uint64_t)1 << (e - sub_bits)) / 2;
}

static double percentile_us(double q) {
    uint64_t want = (uint64_t)(q * (double)measured), seen = 0;
    if (want >= measured) want = measured - 1;
    for (unsigned i = 0; i < sizeof hist / sizeof hist[0]; ++i)
        if ((seen += hist[i]) > want) return bucket_mid(i) / 1e3;
    return 0;
}

static struct io_uring_sqe* sqe_of(void) {
    struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe == NULL) {
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
}

// Prepares what connection c needs next, if nothing of it is in flight.
static void advance(struct conn* c, uint64_t now, int again) {
    if (c->send_busy || c->recv_busy) return;
    if (c->rcvd == size) {  // a round trip is complete
        if (verify && memcmp(c->in, c->out, size) != 0) {
            fprintf(stderr, "loadgen: connection %d: the echo differs from the message sent\n", (int)(c - conns));
            exit(1);
        }
        ++total;
        if (recording) {
            ++measured;
            ++hist[bucket(now - c->t0)];
        }
        c->sent = c->rcvd = 0;
        if (!again) return;
    }
    if (c->sent == 0) {
        c->t0 = now;
        if (verify) memcpy(c->out, &total, size < sizeof total ? size : sizeof total);  // no two messages alike
    }
    struct io_uring_sqe* sqe;
    if (c->sent < size) {
        sqe = sqe_of();
        io_uring_prep_send(sqe, c->fd, c->out + c->sent, size - c->sent, MSG_NOSIGNAL | MSG_WAITALL);
        io_uring_sqe_set_data64(sqe, (uint64_t)(c - conns) << 1);
        c->send_busy = 1;
        if (c->sent > 0) return;  // finishing a short send: the recv after it
        sqe->flags |= IOSQE_IO_LINK;
    }
    sqe = sqe_of();
    io_uring_prep_recv(sqe, c->fd, c->in + c->rcvd, size - c->rcvd, MSG_WAITALL);
    io_uring_sqe_set_data64(sqe, (uint64_t)(c - conns) << 1 | 1);
    c->recv_busy = 1;
}

// Handles one batch of completions; returns how many.
static unsigned reap(int again) {
    struct io_uring_cqe* cqe;
    unsigned head, seen = 0;
    uint64_t now = now_ns();
    io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        struct conn* c = &conns[cqe->user_data >> 1];
        int is_recv = (int)(cqe->user_data & 1), res = cqe->res;
        if (is_recv) c->recv_busy = 0;
        else c->send_busy = 0;
        if (res == -ECANCELED && is_recv) {  // its linked send was short
        } else if (res < 0) {
            die(is_recv ? "recv" : "send", -res);
        } else if (res == 0 && is_recv) {
            fprintf(stderr, "loadgen: the server closed connection %d\n", (int)(c - conns));
            exit(1);
        } else if (is_recv) {
            c->rcvd += (unsigned)res;
        } else {
            c->sent += (unsigned)res;
        }
        advance(c, now, again);
    }
    io_uring_cq_advance(&ring, seen);
    return seen;
}

static int connect_one(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) die("socket", errno);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) die("connect", errno);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void wait_for_stdin_eof(void) {
    char b[256];
    while (read(STDIN_FILENO, b, sizeof b) > 0 || errno == EINTR) errno = 0;
}

static void close_all(void) {
    struct linger l = {1, 0};
    for (int i = 0; i < active_conns; ++i) setsockopt(conns[i].fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    for (int i = 0; i < active_conns; ++i) close(conns[i].fd);
}

int main(int argc, char** argv) {
    int port = 0, cpu = -1, hold = 0, idle = 0;
    double seconds = 1, warmup = 0.2;
    for (int i = 1; i < argc; ++i) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(a, "--hold") == 0) hold = 1;
        else if (strcmp(a, "--idle") == 0) idle = 1;
        else if (strcmp(a, "--port") == 0) port = atoi(v), ++i;
        else if (strcmp(a, "--conns") == 0) n_conns = atoi(v), ++i;
        else if (strcmp(a, "--size") == 0) size = (unsigned)atoi(v), ++i;
        else if (strcmp(a, "--seconds") == 0) seconds = atof(v), ++i;
        else if (strcmp(a, "--warmup") == 0) warmup = atof(v), ++i;
        else if (strcmp(a, "--cpu") == 0) cpu = atoi(v), ++i;
        else port = 0, i = argc;
    }
    if (port <= 0 || n_conns <= 0 || size == 0 || size > (1u << 20) || !(seconds > 0) || warmup < 0) {
        fprintf(stderr, "usage: loadgen --port P --conns C --size S --seconds D --warmup W [--cpu N] [--hold] "
                        "[--idle]\n");
        return 2;
    }
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity", errno);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    // Completions as deferred task work, run at the generator's own next
    // io_uring_enter. With the default mode each completion for a generator
    // that is running user code costs the *server* a reschedule IPI (its
    // send's loopback delivery kicks the generator's task), and how many a
    // server pays depends on how its sends happen to interleave with the
    // generator: with the C io_uring server 0.045 IPIs per round trip,
    // with spindle's 0.2, ~2 us of server CPU per round trip on this VM.
    // A client on another machine costs a server none of that.
    struct io_uring_params params = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN};
    int r = io_uring_queue_init_params(4096, &ring, &params);
    if (r == -EINVAL) {  // before Linux 6.1: cooperative, else plain
        memset(&params, 0, sizeof params);
        params.flags = IORING_SETUP_COOP_TASKRUN;
        r = io_uring_queue_init_params(4096, &ring, &params);
        if (r == -EINVAL) r = io_uring_queue_init(4096, &ring, 0);
    }
    if (r < 0) die("io_uring_queue_init", -r);
    conns = calloc((size_t)n_conns, sizeof *conns);
    char* bufs = malloc((size_t)size * 2 * (size_t)(idle ? 1 : n_conns));
    if (conns == NULL || bufs == NULL) die("malloc", ENOMEM);
    for (size_t i = 0; i < (size_t)size * 2 * (size_t)(idle ? 1 : n_conns); ++i) bufs[i] = (char)('a' + i % 23);
    verify = !idle;
    for (int i = 0; i < n_conns; ++i) {  // --idle: all share one pair of buffers
        conns[i].out = bufs + (idle ? 0 : (size_t)i * 2 * size);
        conns[i].in = conns[i].out + size;
    }

    if (idle) {
        while (active_conns < n_conns) {
            int from = active_conns;
            while (active_conns < n_conns && active_conns - from < idle_batch)
                conns[active_conns++].fd = connect_one(port);
            uint64_t now = now_ns(), want = total + (uint64_t)(active_conns - from);
            for (int i = from; i < active_conns; ++i) advance(&conns[i], now, 1);
            while (total < want) {
                if ((r = io_uring_submit_and_wait(&ring, 1)) < 0 && r != -EINTR) die("io_uring_submit_and_wait", -r);
                reap(0);
            }
        }
        printf("ready conns=%d\n", active_conns);
        fflush(stdout);
        wait_for_stdin_eof();
        close_all();
        return 0;
    }

    for (; active_conns < n_conns; ++active_conns) conns[active_conns].fd = connect_one(port);
    uint64_t t = now_ns(), start = t + (uint64_t)(warmup * 1e9), end = start + (uint64_t)(seconds * 1e9);
    for (int i = 0; i < n_conns; ++i) advance(&conns[i], t, 1);
    double cpu0 = 0;
    for (;;) {
        if ((r = io_uring_submit_and_wait(&ring, 1)) < 0 && r != -EINTR) die("io_uring_submit_and_wait", -r);
        reap(1);
        t = now_ns();
        if (!recording && t >= start) {
            printf("start\n");
            fflush(stdout);
            recording = 1;
            start = now_ns();  // after the write: the driver reads the server's CPU time when it sees it
            end = start + (uint64_t)(seconds * 1e9);
            cpu0 = cpu_s();
        } else if (recording && t >= end) {
            break;
        }
    }
    const double wall = (double)(t - start) * 1e-9, used = cpu_s() - cpu0, share = used / wall;
    if (measured == 0) {
        fprintf(stderr, "loadgen: no round trip finished in %.3f s\n", wall);
        return 1;
    }
    printf("end rtt_per_s=%.1f rtts=%llu p50_us=%.3f p99_us=%.3f p999_us=%.3f cpu_s=%.4f wall_s=%.4f "
           "cpu_share=%.3f saturated=%d total_rtts=%llu\n",
           (double)measured / wall, (unsigned long long)measured, percentile_us(0.5), percentile_us(0.99),
           percentile_us(0.999), used, wall, share, share >= 0.9, (unsigned long long)total);
    fflush(stdout);
    if (hold) wait_for_stdin_eof();
    close_all();
    return 0;
}
