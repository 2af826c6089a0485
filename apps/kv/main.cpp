// spindle-kv: a memcached-compatible cache server (the text protocol) on
// spindle's fibers and fiber I/O. One fiber per connection; the protocol is
// apps/kv/protocol.hpp, the items apps/kv/store.hpp.
//
//   spindle-kv [-p port] [-l address] [-t workers] [-m MiB] [-c conns]
//              [-I item-size-max] [-C] [-U 0] [-v]
//
// The flags mean what memcached's do (-p 0: any free port; -l defaults to
// 127.0.0.1, not to every interface). On start it prints one line,
// "spindle-kv: listening on ADDRESS:PORT (...)", and flushes stdout.
//
// Connections past -c get "ERROR Too many open connections" and are closed,
// as memcached does. A full descriptor table (EMFILE) on accept is waited
// out: the accept fiber sleeps 10 ms and tries again.
//
// Shutdown: SIGTERM and SIGINT are blocked in every thread (before the
// scheduler starts its workers, which inherit the mask) and read from a
// signalfd by a fiber that waits on it with io::wait_readable. On either it
// asks the accept fiber to stop (its accept() returns), then every
// connection fiber (their reads and writes return operation_canceled; a
// connection in the middle of a command is cut there); ~scheduler() waits for
// them all, and the process exits 0.
#include <getopt.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include <spindle/io.hpp>
#include <spindle/runtime/scheduler.hpp>
#include <spindle/sync/mutex.hpp>

#include "protocol.hpp"
#include "store.hpp"

namespace io = spindle::io;
namespace kv = spindle::kv;

namespace {

constexpr int ex_usage = 64;  // sysexits.h EX_USAGE

void usage(FILE* f) {
    std::fprintf(f,
                 "usage: spindle-kv [options]\n"
                 "  -p, --port=<num>          TCP port to listen on (default: 11211; 0: any free port)\n"
                 "  -l, --listen=<addr>       interface to listen on (default: 127.0.0.1)\n"
                 "  -t, --threads=<num>       worker threads (default: 4)\n"
                 "  -m, --memory-limit=<num>  item memory in megabytes (default: 64)\n"
                 "  -c, --conn-limit=<num>    max simultaneous connections (default: 1024)\n"
                 "  -I, --max-item-size=<num> max item size, k/m suffixes (default: 1m)\n"
                 "  -C, --disable-cas         disable use of CAS\n"
                 "  -U, --udp-port=<num>      UDP port: only 0 (off) is supported\n"
                 "  -v, --verbose             verbose (repeat for more)\n"
                 "  -h, --help                print this help and exit\n");
}

[[noreturn]] void bad_usage(const char* fmt, const char* arg) {
    std::fprintf(stderr, "spindle-kv: ");
    std::fprintf(stderr, fmt, arg);
    std::fprintf(stderr, "\n");
    usage(stderr);
    std::exit(ex_usage);
}

// A whole decimal number in [lo, hi], or bad_usage naming the flag.
unsigned long long number(const char* flag, const char* s, unsigned long long lo, unsigned long long hi) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < lo || v > hi)
        bad_usage("bad value for %s", flag);
    return v;
}

// -I: bytes, with an optional k or m suffix, as memcached takes it.
std::size_t size_arg(const char* s) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-') bad_usage("bad value for -I: %s", s);
    if (*end == 'k' || *end == 'K') {
        v <<= 10;
        ++end;
    } else if (*end == 'm' || *end == 'M') {
        v <<= 20;
        ++end;
    }
    if (*end != '\0') bad_usage("bad value for -I: %s", s);
    if (v < 1024) bad_usage("item max size cannot be less than 1024 bytes: %s", s);
    if (v > (std::size_t{1} << 30)) bad_usage("cannot set item size limit higher than 1 gigabyte: %s", s);
    return static_cast<std::size_t>(v);
}

// The connection fibers, so that shutdown can ask each to stop. Guarded by
// `lock`: the accept fiber adds under it, a connection removes itself under
// it, shutdown sets `stopping` and requests every stop under it.
//
//   lock word: spindle::mutex (fibers park on it)
//   accept:   lock; if stopping -> close the new stream; else add; unlock
//   leave:    lock; erase own id; unlock
//   shutdown: lock; stopping = true; request_stop() on each; unlock
struct connections {
    spindle::mutex lock;
    bool stopping = false;
    std::uint64_t next_id = 0;
    std::unordered_map<std::uint64_t, std::stop_source> live;
};

void serve(io::stream s, kv::server_context& ctx) {
    (void)s.set_nodelay(true);
    kv::session sess(ctx);
    for (;;) {
        auto room = sess.read_space();
        auto n = s.read_some(room.data(), room.size());
        if (!n || *n == 0) return;  // end of stream, reset, or shutdown: nothing half-read is stored
        kv::action a = sess.received(*n);
        if (!sess.output().empty()) {
            if (s.write_all(sess.output())) return;
            sess.output_written();
        }
        if (a == kv::action::close) return;
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::uint16_t port = 11211;
    std::string address = "127.0.0.1";
    unsigned threads = 4;
    std::size_t memory_mib = 64;
    std::size_t max_conns = 1024;
    std::size_t item_max = std::size_t{1} << 20;
    bool use_cas = true;
    int verbose = 0;

    static const option longopts[] = {
        {"port", required_argument, nullptr, 'p'},          {"listen", required_argument, nullptr, 'l'},
        {"threads", required_argument, nullptr, 't'},       {"memory-limit", required_argument, nullptr, 'm'},
        {"conn-limit", required_argument, nullptr, 'c'},    {"max-item-size", required_argument, nullptr, 'I'},
        {"disable-cas", no_argument, nullptr, 'C'},         {"udp-port", required_argument, nullptr, 'U'},
        {"verbose", no_argument, nullptr, 'v'},             {"help", no_argument, nullptr, 'h'},
        {nullptr, 0, nullptr, 0},
    };
    opterr = 0;
    int c;
    while ((c = ::getopt_long(argc, argv, ":p:l:t:m:c:I:CU:vh", longopts, nullptr)) != -1) {
        switch (c) {
        case 'p': port = static_cast<std::uint16_t>(number("-p", optarg, 0, 65535)); break;
        case 'l': address = optarg; break;
        case 't': threads = static_cast<unsigned>(number("-t", optarg, 1, 1024)); break;
        case 'm': memory_mib = static_cast<std::size_t>(number("-m", optarg, 1, std::size_t{1} << 30)); break;
        case 'c': max_conns = static_cast<std::size_t>(number("-c", optarg, 1, std::size_t{1} << 24)); break;
        case 'I': item_max = size_arg(optarg); break;
        case 'C': use_cas = false; break;
        case 'U':
            if (number("-U", optarg, 0, 65535) != 0) bad_usage("UDP is not supported: -U %s (use -U 0)", optarg);
            break;
        case 'v': ++verbose; break;
        case 'h': usage(stdout); return 0;
        case ':': bad_usage("option requires an argument: %s", argv[optind - 1]);
        default: bad_usage("invalid option: %s", argv[optind - 1]);
        }
    }
    if (optind < argc) bad_usage("unexpected argument: %s", argv[optind]);
    if (item_max > memory_mib * (std::size_t{1} << 20) / 2)
        bad_usage("cannot set item size limit higher than 1/2 of memory max (-I %s)", std::to_string(item_max).c_str());

    auto at = address.find(':') != std::string::npos ? io::endpoint::ipv6(address, port) : io::endpoint::ipv4(address, port);
    if (!at) bad_usage("bad address for -l: %s", address.c_str());

    // Room for -c connections and a few descriptors of our own, as
    // memcached makes it: the soft limit raised toward the hard one. Short
    // of that, accept sees EMFILE and waits (below); -v says so here.
    if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        const rlim_t want = static_cast<rlim_t>(max_conns) + 64;
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
            if (::setrlimit(RLIMIT_NOFILE, &rl) != 0 || (verbose && rl.rlim_cur < want))
                std::fprintf(stderr, "spindle-kv: only %llu descriptors for -c %zu connections\n",
                             static_cast<unsigned long long>(rl.rlim_cur), max_conns);
        }
    }

    // Before any thread starts: every thread inherits the blocked signals,
    // so SIGTERM/SIGINT reach only the signalfd.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (int e = ::pthread_sigmask(SIG_BLOCK, &sigs, nullptr); e != 0) {
        std::fprintf(stderr, "spindle-kv: pthread_sigmask: %s\n", std::strerror(e));
        return 1;
    }
    int sfd = ::signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        std::fprintf(stderr, "spindle-kv: signalfd: %s\n", std::strerror(errno));
        return 1;
    }

    auto l = io::listener::bind(*at);
    if (!l) {
        std::fprintf(stderr, "spindle-kv: cannot listen on %s port %u: %s\n", address.c_str(), unsigned{port},
                     l.error().message().c_str());
        ::close(sfd);
        return 1;
    }
    port = l->local_endpoint()->port();  // -p 0: the one the kernel chose
    kv::store items({.memory_limit = memory_mib << 20, .item_size_max = item_max, .use_cas = use_cas});
    kv::server_context ctx(items, {.max_connections = max_conns,
                                   .threads = threads,
                                   .verbosity = verbose,
                                   .port = port,
                                   .interface = address,
                                   .item_size_max = item_max,
                                   .use_cas = use_cas});
    connections conns;
    int rc = 0;
    {
        spindle::scheduler sched({.workers = threads});
        std::printf("spindle-kv: listening on %s (%s, %u workers, %zu MiB, -c %zu)\n",
                    l->local_endpoint()->to_string().c_str(), io::backend_name(io::current_backend()), sched.workers(),
                    memory_mib, max_conns);
        std::fflush(stdout);

        spindle::fiber acceptor = sched.spawn([&] {
            for (;;) {
                auto s = l->accept();
                if (!s) {
                    if (s.error() == std::errc::operation_canceled) return;  // shutdown
                    if (s.error() == std::errc::too_many_files_open || s.error() == std::errc::too_many_files_open_in_system) {
                        if (verbose) std::fprintf(stderr, "spindle-kv: accept: %s; retrying\n", s.error().message().c_str());
                        if (!spindle::this_fiber::sleep_for(std::chrono::milliseconds(10))) return;
                        continue;
                    }
                    std::fprintf(stderr, "spindle-kv: accept: %s\n", s.error().message().c_str());
                    rc = 1;
                    return;
                }
                if (ctx.curr_connections() >= max_conns) {
                    // memcached's answer; the write is small enough for the
                    // socket buffer, so it never waits.
                    (void)s->write_all(std::string_view("ERROR Too many open connections\r\n"));
                    ctx.connection_rejected();
                    continue;  // ~stream closes it
                }
                std::lock_guard g(conns.lock);
                if (conns.stopping) return;
                std::uint64_t id = conns.next_id++;
                ctx.connection_opened();
                spindle::fiber f = sched.spawn([&, id, s = std::move(*s)]() mutable {
                    serve(std::move(s), ctx);
                    ctx.connection_closed();
                    std::lock_guard g2(conns.lock);
                    conns.live.erase(id);
                });
                conns.live.emplace(id, f.get_stop_source());
                f.detach();
            }
        });

        std::stop_source accept_stop = acceptor.get_stop_source();
        spindle::fiber signals = sched.spawn([&] {
            for (;;) {
                if (io::wait_readable(sfd)) return;  // stop requested: the acceptor ended on its own
                signalfd_siginfo si;
                if (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) break;
            }
            accept_stop.request_stop();
            std::lock_guard g(conns.lock);
            conns.stopping = true;
            for (auto& [id, src] : conns.live) src.request_stop();
        });

        acceptor.join();
        signals.request_stop();
        signals.join();
        {
            // An acceptor that failed leaves connections running: stop them.
            std::lock_guard g(conns.lock);
            conns.stopping = true;
            for (auto& [id, src] : conns.live) src.request_stop();
        }
        // ~scheduler() waits for the connection fibers to leave.
    }
    ::close(sfd);
    if (verbose) std::fprintf(stderr, "spindle-kv: stopped\n");
    return rc;
}
