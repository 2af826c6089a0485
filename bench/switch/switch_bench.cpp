// bench/switch — the CACS benchmarks (docs/benchmarks.md,
// "Fibers and switching"): yield, sum, hanoi, write_fully, plus the memory
// cost of many live fibers.
//
// Competitors, all in this one program and interleaved by the harness:
//   spindle          spindle::fiber / spindle::generator (the real scheduler)
//   boost_context    boost::context::fiber (Debian libboost-context-dev),
//                    with the same round-robin scheduling or generator shape
//   cxx20_stackless  C++20 coroutines written in stackless.hpp
//   callback         plain recursion + callback (hanoi), the floor
//   empty_loop       the loop of the yield workload without the yield
//
// One CPU. Every workload here runs on one thread at a time: spindle's on
// its scheduler's one worker, the competitors on the main thread. Left to
// itself, the kernel starts the worker on the CPU the main thread is not
// on (one migration in a whole run, perf stat showed), so spindle and its
// competitors were measured on different CPUs -- whose speeds on a shared
// VM need not match at the same moment. On 2 CPUs, unpinned, write_fully's
// spindle time was bimodal per repetition (31-32 or 41-50 ns; Boost.Context
// on the main thread mostly 35-37) and the ratio to Boost.Context ranged
// 0.82-1.53 over 10 runs; pinned, 6 runs gave 1.04-1.14. So main() pins the
// process -- and the threads it starts -- to the CPU it is running on.
#include <sched.h>

#include <boost/context/fiber.hpp>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/generator.hpp>
#include <spindle/runtime/scheduler.hpp>

#include "../harness/harness.hpp"
#include "stackless.hpp"

namespace ctx = boost::context;
using spindle::bench::do_not_optimize;
using spindle::bench::harness;
using spindle::bench::metric;
using spindle::bench::now_ns;
using spindle::bench::params;
using spindle::bench::rss_bytes;
using spindle::bench::variant;

namespace {

// ---------------------------------------------------------------------------
// Boost.Context round-robin ring: the same scheduling as spindle's worker (a
// FIFO of ready fibers; yield moves the caller to the back and switches to
// the front), built the idiomatic way with resume_with.
struct boost_ring {
    std::deque<ctx::fiber> ready;
    ctx::fiber main;
};
boost_ring* g_ring = nullptr;

void boost_yield() {
    if (g_ring->ready.empty()) return;
    ctx::fiber next = std::move(g_ring->ready.front());
    g_ring->ready.pop_front();
    std::move(next).resume_with([](ctx::fiber&& me) {
        g_ring->ready.push_back(std::move(me));
        return ctx::fiber{};
    });
}

// Runs `n` fibers of `body` round-robin until all return.
template <class Body>
void boost_run_ring(int n, Body body) {
    boost_ring ring;
    g_ring = &ring;
    for (int i = 0; i < n; ++i) {
        ring.ready.emplace_back([body, i](ctx::fiber&&) mutable {
            body(i);
            // Done: continue with the next ready fiber, or back to main.
            if (!g_ring->ready.empty()) {
                ctx::fiber next = std::move(g_ring->ready.front());
                g_ring->ready.pop_front();
                return next;
            }
            return std::move(g_ring->main);
        });
    }
    ctx::fiber first = std::move(ring.ready.front());
    ring.ready.pop_front();
    std::move(first).resume_with([](ctx::fiber&& m) {
        g_ring->main = std::move(m);
        return ctx::fiber{};
    });
    g_ring = nullptr;
}

// Runs `n` spindle fibers of `body` on a one-worker scheduler; returns the
// wall time from the moment all are ready until all finished.
template <class Body>
double spindle_run_ring(spindle::scheduler& sched, int n, Body body) {
    double t = 0;
    sched.spawn([&] {
        std::vector<spindle::fiber> fs;
        fs.reserve(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) fs.push_back(spindle::fiber([&body, i] { body(i); }));
        double t0 = now_ns();
        for (auto& f : fs) f.join();  // the joiner leaves the ring: n fibers run
        t = now_ns() - t0;
    }).join();
    return t;
}

// ---------------------------------------------------------------------------
// yield: 10 fibers, one worker, each yields `per` times.

// The function-call competitor (docs/benchmarks.md: "callback"): one call of
// a function the compiler may not inline, per step of the same round-robin
// over 10 tasks -- what a yield would cost if a switch were a plain call and
// return. The memory clobber keeps the counters in memory, as a fiber's live
// state is across a switch.
__attribute__((noinline)) void callback_step(long& n) {
    ++n;
    __asm__ volatile("" ::: "memory");
}

void bench_yield(harness& h) {
    const int fibers = 10;
    const long per = h.quick() ? 1'000'000 : 10'000'000;
    const double total = static_cast<double>(fibers) * static_cast<double>(per);
    spindle::scheduler sched({.workers = 1});

    // The loop around a yield without the yield. The empty asm clobbers what
    // the switch clobbers, so the loop counter is spilled and reloaded just
    // as around a real switch (the CACS paper's method, §4.4).
    auto empty_loop = [&] {
        double t0 = now_ns();
        for (long i = 0; i < per * fibers; ++i) {
#if defined(__x86_64__)
            __asm__ volatile("" ::: SPINDLE_X86_SWITCH_CLOBBERS, "rsi", "rdi");
#else
            __asm__ volatile("" ::: "memory");
#endif
        }
        return (now_ns() - t0) / total;
    };
    auto spindle_v = [&] {
        return spindle_run_ring(sched, fibers, [per](int) {
                   for (long i = 0; i < per; ++i) spindle::this_fiber::yield();
               }) /
               total;
    };
    auto boost_v = [&] {
        double t0 = now_ns();
        boost_run_ring(fibers, [per](int) {
            for (long i = 0; i < per; ++i) boost_yield();
        });
        return (now_ns() - t0) / total;
    };
    auto callback_v = [&] {
        long counts[fibers] = {};
        double t0 = now_ns();
        for (long i = 0; i < per; ++i)
            for (int k = 0; k < fibers; ++k) callback_step(counts[k]);
        const double t = now_ns() - t0;
        for (long c : counts)
            if (c != per) {
                std::fprintf(stderr, "yield/callback: a task counted %ld steps, expected %ld\n", c, per);
                std::exit(1);
            }
        return t / total;
    };
    auto res = h.compare("yield", {{"fibers", fibers}, {"workers", 1}}, {"ns_per_op_raw", false},
                         {{"spindle", spindle_v},
                          {"boost_context", boost_v},
                          {"callback", callback_v},
                          {"empty_loop", empty_loop}});
    // Net cost per yield (per call): each sample minus the median empty-loop cost.
    double empty = res[3].median;
    std::string note = "empty-loop cost subtracted: " + std::to_string(empty) + " ns";
    for (int i = 0; i < 3; ++i) {
        std::vector<double> net;
        for (double s : res[static_cast<std::size_t>(i)].samples) net.push_back(s - empty);
        h.report("yield", {{"fibers", fibers}, {"workers", 1}}, {"ns_per_op", false},
                 harness::summarize(res[static_cast<std::size_t>(i)].variant, net), false, note);
    }
}

// ---------------------------------------------------------------------------
// sum: a generator yields N..1, the consumer sums.
__attribute__((noinline)) bench_stackless::generator<std::uint64_t> stackless_seq(std::uint64_t count) {
    for (; count != 0; --count) co_yield count;
}

void bench_sum(harness& h) {
    const std::uint64_t n = h.quick() ? 20'000'000 : 100'000'000;
    const std::uint64_t want = n * (n + 1) / 2;
    auto check = [want](std::uint64_t s) {
        if (s != want) {
            std::fprintf(stderr, "sum: wrong result %llu\n", static_cast<unsigned long long>(s));
            std::exit(1);
        }
    };
    auto spindle_v = [&] {
        double t0 = now_ns();
        std::uint64_t sum = 0;
        spindle::generator<std::uint64_t> g([n](auto& y) {
            for (std::uint64_t c = n; c != 0; --c) y(c);
        });
        for (std::uint64_t v : g) sum += v;
        double t = now_ns() - t0;
        check(sum);
        return t / static_cast<double>(n);
    };
    auto stackless_v = [&] {
        double t0 = now_ns();
        std::uint64_t sum = 0;
        for (std::uint64_t v : stackless_seq(n)) sum += v;
        double t = now_ns() - t0;
        check(sum);
        return t / static_cast<double>(n);
    };
    auto boost_v = [&] {
        double t0 = now_ns();
        std::uint64_t sum = 0, value = 0;
        bool done = false;
        ctx::fiber gen([&](ctx::fiber&& sink) {
            for (std::uint64_t c = n; c != 0; --c) {
                value = c;
                sink = std::move(sink).resume();
            }
            done = true;
            return std::move(sink);
        });
        for (;;) {
            gen = std::move(gen).resume();
            if (done) break;
            sum += value;
        }
        double t = now_ns() - t0;
        check(sum);
        return t / static_cast<double>(n);
    };
    h.compare("sum", {{"values", static_cast<long long>(n)}}, {"ns_per_op", false},
              {{"spindle", spindle_v}, {"cxx20_stackless", stackless_v}, {"boost_context", boost_v}});
}

// ---------------------------------------------------------------------------
// hanoi: every move of Tower of Hanoi(n) is yielded by a recursive generator.
using move_t = std::uint32_t;
inline move_t encode(int n, int from, int to) {
    return static_cast<move_t>(n) | static_cast<move_t>(from) << 8 | static_cast<move_t>(to) << 16;
}

template <class Cb>
__attribute__((noinline)) void hanoi_cb(int n, int from, int to, int via, Cb& cb) {
    if (n == 0) return;
    hanoi_cb(n - 1, from, via, to, cb);
    cb(encode(n, from, to));
    hanoi_cb(n - 1, via, to, from, cb);
}

void hanoi_spindle(spindle::generator<move_t>::yielder& y, int n, int from, int to, int via) {
    if (n == 0) return;
    hanoi_spindle(y, n - 1, from, via, to);
    y(encode(n, from, to));
    hanoi_spindle(y, n - 1, via, to, from);
}

struct boost_gen_state {
    ctx::fiber sink;
    move_t value = 0;
};
void hanoi_boost(boost_gen_state& s, int n, int from, int to, int via) {
    if (n == 0) return;
    hanoi_boost(s, n - 1, from, via, to);
    s.value = encode(n, from, to);
    s.sink = std::move(s.sink).resume();
    hanoi_boost(s, n - 1, via, to, from);
}

bench_stackless::generator<move_t> hanoi_stackless(int n, int from, int to, int via) {
    if (n == 0) co_return;
    for (move_t m : hanoi_stackless(n - 1, from, via, to)) co_yield m;
    co_yield encode(n, from, to);
    for (move_t m : hanoi_stackless(n - 1, via, to, from)) co_yield m;
}

void bench_hanoi(harness& h) {
    const int max_disks = 20;
    for (int disks = 1; disks <= max_disks; ++disks) {
        const double moves = static_cast<double>((1u << disks) - 1);
        // Repeat small puzzles so every measurement covers >= 2^16 moves.
        const int rounds = disks >= 16 ? 1 : (1 << (16 - disks));
        const double per = moves * rounds;
        std::uint64_t check_sum = 0;
        {
            auto cb = [&](move_t m) { check_sum += m; };
            hanoi_cb(disks, 0, 2, 1, cb);
        }
        auto verify = [&](std::uint64_t s, const char* who) {
            if (s != check_sum * static_cast<std::uint64_t>(rounds)) {
                std::fprintf(stderr, "hanoi(%d): %s produced wrong moves\n", disks, who);
                std::exit(1);
            }
        };
        auto callback_v = [&] {
            std::uint64_t sum = 0;
            auto cb = [&sum](move_t m) { sum += m; };
            double t0 = now_ns();
            for (int r = 0; r < rounds; ++r) hanoi_cb(disks, 0, 2, 1, cb);
            double t = now_ns() - t0;
            verify(sum, "callback");
            return t / per;
        };
        auto spindle_v = [&] {
            std::uint64_t sum = 0;
            double t0 = now_ns();
            for (int r = 0; r < rounds; ++r) {
                spindle::generator<move_t> g(
                    [disks](spindle::generator<move_t>::yielder& y) { hanoi_spindle(y, disks, 0, 2, 1); });
                for (move_t m : g) sum += m;
            }
            double t = now_ns() - t0;
            verify(sum, "spindle");
            return t / per;
        };
        auto boost_v = [&] {
            std::uint64_t sum = 0;
            double t0 = now_ns();
            for (int r = 0; r < rounds; ++r) {
                boost_gen_state st;
                bool done = false;
                ctx::fiber gen([&](ctx::fiber&& sink) {
                    st.sink = std::move(sink);
                    hanoi_boost(st, disks, 0, 2, 1);
                    done = true;
                    return std::move(st.sink);
                });
                for (;;) {
                    gen = std::move(gen).resume();
                    if (done) break;
                    sum += st.value;
                }
            }
            double t = now_ns() - t0;
            verify(sum, "boost_context");
            return t / per;
        };
        auto stackless_v = [&] {
            std::uint64_t sum = 0;
            double t0 = now_ns();
            for (int r = 0; r < rounds; ++r)
                for (move_t m : hanoi_stackless(disks, 0, 2, 1)) sum += m;
            double t = now_ns() - t0;
            verify(sum, "cxx20_stackless");
            return t / per;
        };
        int reps = h.reps(disks >= 18 ? 3 : 5, 7);
        auto res = h.compare("hanoi", {{"disks", disks}}, {"ns_per_op", false},
                             {{"spindle", spindle_v},
                              {"boost_context", boost_v},
                              {"cxx20_stackless", stackless_v},
                              {"callback", callback_v}},
                             reps);
        // The paper's view: time normalized to plain recursion + callback.
        double base = res[3].median;
        for (std::size_t i = 0; i < 3; ++i) {
            std::vector<double> norm;
            for (double s : res[i].samples) norm.push_back(s / base);
            h.report("hanoi", {{"disks", disks}}, {"time_vs_callback", false},
                     harness::summarize(res[i].variant, norm));
        }
    }
}

// ---------------------------------------------------------------------------
// write_fully: 10 connections each send `bytes` in 800-byte chunks; each
// send_some() is preceded by wait_for_ready(), which only lets the other
// tasks run. send_some copies the chunk into a per-connection 800-byte
// "socket buffer" from an 8 KiB source, cyclically (all L1-resident, so the
// copy costs the same for every variant and the scheduling cost shows).
constexpr std::size_t chunk = 800;
constexpr std::size_t source_size = 8 * 1024;

struct connection {
    alignas(64) unsigned char sink[chunk];
    std::uint64_t sent = 0;
};
std::vector<unsigned char> g_source(source_size + chunk, 7);

inline std::size_t copy_chunk(connection& c, std::size_t offset) {
    std::memcpy(c.sink, g_source.data() + (offset % source_size), chunk);
    do_not_optimize(c.sink[0]);
    c.sent += chunk;
    return chunk;
}

template <class Wait>
__attribute__((noinline)) std::size_t send_some(connection& c, std::size_t offset, Wait& wait) {
    wait();
    return copy_chunk(c, offset);
}

template <class Wait>
__attribute__((noinline)) void write_fully(connection& c, std::size_t bytes, Wait& wait) {
    std::size_t done = 0;
    while (done < bytes) done += send_some(c, done, wait);
}

bench_stackless::task<std::size_t> send_some_stackless(connection& c, std::size_t offset,
                                                       bench_stackless::rr_scheduler& s) {
    co_await bench_stackless::wait_for_ready{&s};
    co_return copy_chunk(c, offset);
}

bench_stackless::task<std::size_t> write_fully_stackless(connection& c, std::size_t bytes,
                                                         bench_stackless::rr_scheduler& s) {
    std::size_t done = 0;
    while (done < bytes) done += co_await send_some_stackless(c, done, s);
    co_return done;
}

void bench_write_fully(harness& h) {
    const int conns = 10;
    const std::size_t bytes = std::size_t{100} << 20;  // 100 MiB per connection
    const double chunks = static_cast<double>(conns) * static_cast<double>((bytes + chunk - 1) / chunk);
    spindle::scheduler sched({.workers = 1});
    auto verify = [&](std::vector<connection>& cs, const char* who) {
        for (auto& c : cs)
            if (c.sent < bytes) {
                std::fprintf(stderr, "write_fully: %s sent too little\n", who);
                std::exit(1);
            }
    };
    auto spindle_v = [&] {
        std::vector<connection> cs(conns);
        auto wait = [] { spindle::this_fiber::yield(); };
        double t = spindle_run_ring(sched, conns, [&](int i) { write_fully(cs[static_cast<std::size_t>(i)], bytes, wait); });
        verify(cs, "spindle");
        return t / chunks;
    };
    auto boost_v = [&] {
        std::vector<connection> cs(conns);
        auto wait = [] { boost_yield(); };
        double t0 = now_ns();
        boost_run_ring(conns, [&](int i) { write_fully(cs[static_cast<std::size_t>(i)], bytes, wait); });
        double t = now_ns() - t0;
        verify(cs, "boost_context");
        return t / chunks;
    };
    auto stackless_v = [&] {
        std::vector<connection> cs(conns);
        bench_stackless::rr_scheduler s;
        std::vector<bench_stackless::task<std::size_t>> tasks;
        for (int i = 0; i < conns; ++i) tasks.push_back(write_fully_stackless(cs[static_cast<std::size_t>(i)], bytes, s));
        double t0 = now_ns();
        for (auto& t : tasks) s.ready.push_back(t.get());
        s.run();
        double t = now_ns() - t0;
        verify(cs, "cxx20_stackless");
        return t / chunks;
    };
    h.compare("write_fully", {{"fibers", conns}, {"chunk_bytes", static_cast<long long>(chunk)}},
              {"ns_per_op", false},
              {{"spindle", spindle_v}, {"boost_context", boost_v}, {"cxx20_stackless", stackless_v}},
              h.reps(3, 7));
}

// ---------------------------------------------------------------------------
// memory: resident memory of many live fibers with small stacks.
void bench_memory(harness& h) {
    const int fibers = 100'000;
    const std::size_t stack = 16 * 1024;
    long before = rss_bytes();
    double t0 = now_ns();
    long during = 0;
    std::string failed;
    {
        spindle::scheduler sched({.workers = 1, .stack_size = stack});
        std::atomic<int> started{0};
        std::atomic<bool> release{false};
        std::vector<spindle::fiber> fs;
        fs.reserve(fibers);
        try {
            for (int i = 0; i < fibers; ++i)
                fs.push_back(sched.spawn([&] {
                    started.fetch_add(1, std::memory_order_relaxed);
                    while (!release.load(std::memory_order_relaxed)) spindle::this_fiber::yield();
                }));
        } catch (const std::system_error& e) {
            // Out of mappings: where the kernel has no guard regions
            // (MADV_GUARD_INSTALL, Linux 6.13), each stack is two mappings
            // and 100 000 of them pass the default vm.max_map_count.
            failed = e.what();
        }
        const int n = static_cast<int>(fs.size());
        while (started.load() < n) usleep(1000);
        during = rss_bytes();
        release = true;
        for (auto& f : fs) f.join();
    }
    if (!failed.empty()) {
        std::fprintf(stderr,
                     "switch/memory: not measured: spawning %d fibers failed (%s); the kernel's map limit is "
                     "probably too low for one mapping per stack and guard: sysctl -w vm.max_map_count=262144\n",
                     fibers, failed.c_str());
        return;
    }
    double secs = (now_ns() - t0) * 1e-9;
    double total = static_cast<double>(during - before);
    std::string note = "100000 fibers alive at once, each has run and yields in a ring; RSS delta " +
                       std::to_string(static_cast<long>(total / (1 << 20))) + " MiB (target < 2048 MiB); " +
                       "spawn+run+join of all took " + std::to_string(secs) + " s";
    h.report("memory", {{"fibers", fibers}, {"stack_bytes", static_cast<long long>(stack)}},
             {"rss_bytes_per_fiber", false}, harness::summarize("spindle", {total / fibers}), false, note);
    h.report("memory", {{"fibers", fibers}, {"stack_bytes", static_cast<long long>(stack)}},
             {"rss_mib_total", false}, harness::summarize("spindle", {total / (1 << 20)}));
}

}  // namespace

// See "One CPU" above. A failure only loses the pinning: say so, go on.
void pin_to_this_cpu() {
    const int cpu = ::sched_getcpu();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0) CPU_SET(cpu, &set);
    if (cpu < 0 || ::sched_setaffinity(0, sizeof set, &set) != 0) {
        std::fprintf(stderr, "switch: could not pin to one CPU (%s); spindle and its competitors may run on "
                             "different CPUs\n",
                     std::strerror(errno));
        return;
    }
    std::fprintf(stderr, "switch: every workload runs on CPU %d (spindle's worker and the competitors alike)\n", cpu);
}

int main(int argc, char** argv) {
    harness h(argc, argv, "switch");
    pin_to_this_cpu();
    if (h.wants("yield")) bench_yield(h);
    if (h.wants("sum")) bench_sum(h);
    if (h.wants("hanoi")) bench_hanoi(h);
    if (h.wants("write_fully")) bench_write_fully(h);
    if (h.wants("memory")) bench_memory(h);
    return 0;
}
