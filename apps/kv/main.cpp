// spindle-kv: a memcached-compatible cache server (the text protocol) on
// spindle's fibers and fiber I/O. A fiber serves each busy connection; one
// idle for idle_period or more parks without a fiber (struct conn below).
// The protocol is apps/kv/protocol.hpp, the items apps/kv/store.hpp.
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
// connection in the middle of a command is cut there), and closes the parked
// connections; scheduler::run() (main()'s thread is worker 0) returns once
// the fibers have finished, and the process exits 0.
#include <getopt.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <vector>
#include <string>
#include <utility>

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

// Pages for sessions: each holds one kv::session and its first read
// buffer, in mappings of their own rather than the heap. A session lives as
// long as its connection is served, so on the heap thousands of them come
// and go between the long-lived conns; when the connections park, the
// freed sessions leave holes smaller than a page among the conns, which no
// allocator can give back (2000 parked connections kept 3.4 KiB each). Here
// a returned page beyond the hot_max kept warm is given back to the kernel
// (MADV_DONTNEED) and waits, empty, for reuse; nothing is ever unmapped.
//
//   lock word: std::mutex (held for a few instructions, never across a
//   system call or a fiber switch)
//   get: lock; pop hot, else cold; unlock; none: map a chunk (outside), lock; keep the rest as cold; unlock
//   put: lock; hot below hot_max? push hot : (unlock; madvise; lock; push cold); unlock
class session_pages {
public:
    static constexpr std::size_t hot_max = 32;
    static constexpr std::size_t per_chunk = 64;

    static std::size_t page() noexcept {
        static const std::size_t p = std::max<std::size_t>(4096, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
        return p;
    }

    // A page, or nullptr when no memory is left.
    void* get() {
        {
            std::lock_guard g(m_);
            if (void* p = pop(hot_); p != nullptr) return p;
            if (void* p = pop(cold_); p != nullptr) return p;
        }
        void* chunk = ::mmap(nullptr, page() * per_chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (chunk == MAP_FAILED) return nullptr;
        auto* base = static_cast<std::byte*>(chunk);
        std::lock_guard g(m_);
        total_ += per_chunk;
        // Room for every page in either list, so that put() never allocates.
        hot_.reserve(hot_max);
        cold_.reserve(total_);
        for (std::size_t i = 1; i < per_chunk; ++i) cold_.push_back(base + i * page());
        return base;
    }

    void put(void* p) noexcept {
        {
            std::lock_guard g(m_);
            if (hot_.size() < hot_max) {
                hot_.push_back(p);
                return;
            }
        }
        ::madvise(p, page(), MADV_DONTNEED);
        std::lock_guard g(m_);
        cold_.push_back(p);  // within the capacity get() reserved
    }

private:
    static void* pop(std::vector<void*>& v) noexcept {
        if (v.empty()) return nullptr;
        void* p = v.back();
        v.pop_back();
        return p;
    }
    std::mutex m_;
    std::vector<void*> hot_, cold_;
    std::size_t total_ = 0;  // pages mapped
};

session_pages g_pages;  // outlives every session

struct session_deleter {
    void operator()(kv::session* s) const noexcept {
        s->~session();
        g_pages.put(s);
    }
};
using session_ptr = std::unique_ptr<kv::session, session_deleter>;

// A session at the start of a page, its first read buffer after it.
session_ptr make_session(kv::server_context& ctx) {
    constexpr std::size_t at = (sizeof(kv::session) + 63) & ~std::size_t{63};
    static_assert(at + kv::session::initial_buffer <= 4096, "a session and its first buffer fit in a page");
    void* p = g_pages.get();
    if (p == nullptr) throw std::bad_alloc();
    auto* bytes = static_cast<char*>(p);
    return session_ptr(new (p) kv::session(ctx, std::span<char>(bytes + at, session_pages::page() - at)));
}


// How long a connection may go without a request before its fiber leaves
// it. The sweeper looks every idle_period; a served connection that read
// nothing between two looks is asked to park (so after one to two periods).
// A park and the wake-up after it cost a few microseconds (a cancelled read,
// an epoll_ctl, a fiber start): noise for a connection quiet this long.
constexpr auto idle_period = std::chrono::milliseconds(100);

// One client connection. It is either served -- a fiber reads, runs and
// answers its commands -- or parked: it waits in the idle set (an epoll
// instance, one-shot) with no fiber, no stack and no buffers, and the
// watcher fiber gives it a new fiber when bytes (or a hang-up) arrive. So
// an idle connection holds this struct, and a busy one a fiber besides.
struct conn {
    explicit conn(io::stream st) : s(std::move(st)) {}
    io::stream s;
    // The protocol state while served; kept across a hand-over (a stop
    // request that lands between the lines of one command).
    session_ptr sess;
    // Set by the serving fiber after each read that got bytes, cleared by
    // the sweeper. Relaxed: a hint; a wrong guess costs a park or a
    // hand-over, never a byte.
    std::atomic<bool> active{true};
    // Guarded by server::lock:
    bool served = true;
    bool in_idle_set = false;  // added to the epoll instance (later arms are MODs)
    std::stop_source fiber_stop{std::nostopstate};  // the serving fiber's (served only)
    conn* prev = nullptr;
    conn* next = nullptr;
};

// What a serving fiber leaves its connection for.
enum class outcome {
    close,      // the peer left, sent quit or a fatal line, or shutdown
    park,       // asked to stop between commands: wait in the idle set
    hand_over,  // asked to stop mid-command: a new fiber goes on with it
};

// Writes all of `out`. A sweeper's stop request can land while a reply goes
// out (nothing was read for a period, the reply is large and the peer
// slow): the reply is then finished under the server's own token, which only
// shutdown requests; the next read sees the request.
bool write_out(io::stream& s, std::string_view out, const std::stop_token& shutdown) {
    std::size_t sent = 0;
    std::error_code e = s.write_all(out.data(), out.size(), {}, &sent);
    if (e == std::errc::operation_canceled && !shutdown.stop_requested())
        e = s.write_all(out.data() + sent, out.size() - sent, {.stop = shutdown});
    return !e;
}

outcome serve(conn& c, kv::server_context& ctx, const std::stop_token& shutdown) {
    if (!c.sess) c.sess = make_session(ctx);
    kv::session& sess = *c.sess;
    for (;;) {
        auto room = sess.read_space();
        auto n = c.s.read_some(room.data(), room.size());
        if (!n) {
            // A stop request takes nothing: the read transferred no byte.
            if (n.error() != std::errc::operation_canceled || shutdown.stop_requested()) return outcome::close;
            return sess.between_commands() ? outcome::park : outcome::hand_over;
        }
        if (*n == 0) return outcome::close;  // end of stream: nothing half-read is stored
        c.active.store(true, std::memory_order_relaxed);  // read by the sweeper's exchange
        kv::action a = sess.received(*n);
        if (!sess.output().empty()) {
            if (!write_out(c.s, sess.output(), shutdown)) return outcome::close;
            sess.output_written();
        }
        if (a == kv::action::close) return outcome::close;
    }
}

// The connections, served and parked, and the fibers that move them.
//
//   lock word: spindle::mutex (fibers park on it); guards stopping, the
//   list, and each conn's served / in_idle_set / fiber_stop / links
//   accept:    lock; stopping? close the stream : link, start its fiber; unlock
//   park:      lock; stopping? close : served = false, arm it in the idle set; unlock
//   wake:      lock; stopping? skip (shutdown freed it) : served = true, start a fiber; unlock
//   hand over: lock; stopping? close : start a successor fiber; unlock
//   close:     lock; unlink, delete (closing the socket takes it out of the idle set); unlock
//   sweep:     lock; each served one that read nothing since the last look: request its fiber's stop; unlock
//   shutdown:  lock; stopping = true; request each served fiber's stop; close each parked one; unlock
// After park, hand over or close returns true, the fiber that called it
// does not touch the conn again: another fiber may own it already.
struct server {
    explicit server(kv::server_context& cx) : ctx(cx) {
        idle_fd = ::epoll_create1(EPOLL_CLOEXEC);
        if (idle_fd < 0) {
            std::fprintf(stderr, "spindle-kv: epoll_create1: %s\n", std::strerror(errno));
            std::exit(1);
        }
    }
    ~server() {
        for (conn* c = head; c != nullptr;) delete std::exchange(c, c->next);  // none left after shutdown
        ::close(idle_fd);
    }
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    spindle::scheduler* sched = nullptr;  // set once, before the first add()
    kv::server_context& ctx;
    std::stop_source shutdown_src;  // requested first thing in shutdown()
    int idle_fd = -1;

    spindle::mutex lock;
    bool stopping = false;
    conn* head = nullptr;

    // Takes a new connection; false after shutdown (the stream is closed).
    bool add(io::stream s) {
        (void)s.set_nodelay(true);  // replies go out at once, as memcached's do
        std::lock_guard g(lock);
        if (stopping) return false;
        auto* c = new conn(std::move(s));
        c->next = head;
        if (head != nullptr) head->prev = c;
        head = c;
        ctx.connection_opened();
        start(c);
        return true;
    }

    void shutdown() {
        shutdown_src.request_stop();
        std::lock_guard g(lock);
        stopping = true;
        for (conn* c = head; c != nullptr;) {
            conn* next = c->next;
            if (c->served) {
                c->fiber_stop.request_stop();
            } else {
                ctx.connection_woke();  // (to close)
                unlink_and_delete(c);
            }
            c = next;
        }
    }

    // The watcher: gives each connection whose bytes arrive while parked a
    // fiber. Ends at shutdown (stop request).
    void watch() {
        for (;;) {
            if (std::error_code e = io::wait_readable(idle_fd)) {
                if (e == std::errc::operation_canceled) return;  // shutdown
                // Anything else (EINTR, ENOMEM) must not strand the parked
                // connections: say so and wait again.
                std::fprintf(stderr, "spindle-kv: waiting for idle connections: %s\n", e.message().c_str());
                if (!spindle::this_fiber::sleep_for(std::chrono::milliseconds(10))) return;
                continue;
            }
            epoll_event evs[64];
            int n = ::epoll_wait(idle_fd, evs, 64, 0);
            std::lock_guard g(lock);
            if (stopping) return;
            for (int i = 0; i < n; ++i) {
                auto* c = static_cast<conn*>(evs[i].data.ptr);
                c->served = true;
                ctx.connection_woke();
                c->active.store(true, std::memory_order_relaxed);  // a whole period before the next park
                start(c);
            }
        }
    }

    // The sweeper: asks each served connection that read nothing for a
    // period to park. Ends at shutdown (stop request).
    void sweep() {
        while (spindle::this_fiber::sleep_for(idle_period)) {
            std::size_t asked = 0;
            std::lock_guard g(lock);
            for (conn* c = head; c != nullptr; c = c->next) {
                if (c->served && !c->active.exchange(false, std::memory_order_relaxed)) {
                    c->fiber_stop.request_stop();
                    ++asked;
                }
            }
            if (asked != 0 && ctx.verbosity().load(std::memory_order_relaxed) >= 2)
                std::fprintf(stderr, "spindle-kv: asked %zu idle connections to park\n", asked);
        }
    }

private:
    // A serving fiber's whole life (see outcome).
    void run(conn* c) {
        switch (serve(*c, ctx, shutdown_src.get_token())) {
        case outcome::park:
            c->sess.reset();  // its buffers go back now
            if (park(c)) return;
            break;
        case outcome::hand_over:
            if (hand_over(c)) return;
            break;
        case outcome::close:
            break;
        }
        std::lock_guard g(lock);
        unlink_and_delete(c);
    }

    // Under lock.
    void start(conn* c) {
        spindle::fiber f = sched->spawn([this, c] { run(c); });
        c->fiber_stop = f.get_stop_source();
        f.detach();
    }

    bool park(conn* c) {
        std::lock_guard g(lock);
        if (stopping) return false;
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
        ev.data.ptr = c;
        if (::epoll_ctl(idle_fd, c->in_idle_set ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->s.native_handle(), &ev) != 0) {
            // (ENOSPC past max_user_watches, ENOMEM): the connection stays
            // served, by a new fiber (this one's stop was requested).
            if (ctx.verbosity().load(std::memory_order_relaxed) >= 1)
                std::fprintf(stderr, "spindle-kv: epoll_ctl: %s; the connection keeps a fiber\n", std::strerror(errno));
            start(c);
            return true;
        }
        c->in_idle_set = true;
        c->served = false;
        ctx.connection_parked();
        c->fiber_stop = std::stop_source(std::nostopstate);
        return true;
    }

    bool hand_over(conn* c) {
        std::lock_guard g(lock);
        if (stopping) return false;
        start(c);
        return true;
    }

    // Under lock.
    void unlink_and_delete(conn* c) {
        if (c->prev != nullptr) c->prev->next = c->next; else head = c->next;
        if (c->next != nullptr) c->next->prev = c->prev;
        delete c;
        ctx.connection_closed();
    }
};

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
    int rc = 0;
    {
        server srv(ctx);  // outlives the scheduler, whose run() waits for the connections' fibers
        // main()'s thread is worker 0: with -t 1 the server is one thread.
        spindle::scheduler sched({.workers = threads, .caller_is_worker = true});
        srv.sched = &sched;
        std::printf("spindle-kv: listening on %s (%s, %u workers, %zu MiB, -c %zu)\n",
                    l->local_endpoint()->to_string().c_str(), io::backend_name(io::current_backend()), sched.workers(),
                    memory_mib, max_conns);
        std::fflush(stdout);

        // The start-up fiber, on this thread; run() returns when it and
        // the connections' fibers have finished.
        sched.run([&] {
            spindle::fiber acceptor = sched.spawn([&] {
                for (;;) {
                    auto s = l->accept();
                    if (!s) {
                        if (s.error() == std::errc::operation_canceled) return;  // shutdown
                        if (s.error() == std::errc::too_many_files_open ||
                            s.error() == std::errc::too_many_files_open_in_system) {
                            if (verbose)
                                std::fprintf(stderr, "spindle-kv: accept: %s; retrying\n", s.error().message().c_str());
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
                    if (!srv.add(std::move(*s))) return;
                }
            });
            spindle::fiber watcher = sched.spawn([&] { srv.watch(); });
            spindle::fiber sweeper = sched.spawn([&] { srv.sweep(); });

            std::stop_source accept_stop = acceptor.get_stop_source();
            spindle::fiber signals = sched.spawn([&] {
                for (;;) {
                    if (io::wait_readable(sfd)) return;  // stop requested: the acceptor ended on its own
                    signalfd_siginfo si;
                    if (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) break;
                }
                accept_stop.request_stop();
                srv.shutdown();
            });

            acceptor.join();
            signals.request_stop();
            signals.join();
            srv.shutdown();  // (again, harmlessly, after a signal; an acceptor that failed leaves connections running)
            watcher.request_stop();
            sweeper.request_stop();
            watcher.join();
            sweeper.join();
        });
    }
    ::close(sfd);
    if (verbose) std::fprintf(stderr, "spindle-kv: stopped\n");
    return rc;
}
