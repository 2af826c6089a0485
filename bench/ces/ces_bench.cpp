// bench/ces — the CES benchmarks (docs/benchmarks.md, "Task-aware
// mutex and friends (CES paper §6)"): what the handoff policy of a mutex does
// to throughput, to the time a lock stays held with nobody inside it, and to
// where critical sections run.
//
// Workloads (records: suite "ces"):
//   mutex          The paper's Fig. 8 task loop: T tasks (5000) each run I
//                  iterations of { p = random prime in (9000, 10000]; lock;
//                  map.insert(p, p) into one shared std::map; unlock;
//                  factors(p) }, factors(p) being a sieve of Eratosthenes up
//                  to p and a trial division (~10-15 µs, parallel work).
//                  Short critical section, long parallel part: the cost of a
//                  handoff (queuing delay, collapse onto one worker) is what
//                  separates the variants. Metric ops_per_s = T*I / wall time.
//   cs-length      The same with L ns of busy work (a steady_clock spin)
//                  inside the lock, L in {0, 250, 1000, 2500, 7500} (Fig. 10):
//                  the longer the critical section, the smaller the share of
//                  the handoff in the critical path.
//   rw             The same task loop on a fair reader-writer mutex (Fig. 11):
//                  each iteration draws p and, with probability 1/d, takes the
//                  lock exclusively and inserts (p, p) (a writer), else takes
//                  it shared and looks p up (a reader); then factors(p).
//                  writer_pct = 100/d in {50, 25, 12.5, 6.25}. A writer's
//                  unlock hands over to one waiter inline (ces) and dispatches
//                  the other readers of the next phase, so the fewer writers,
//                  the smaller the share of handoffs without queuing delay.
//                  Metric ops_per_s = T*I / wall time. --quick: W = 2 only,
//                  3 measured rounds.
//   queuing-delay  The mutex loop, instrumented (§6.5, Fig. 15): for every
//                  acquisition that had to wait (try_lock failed, then lock()),
//                  the time from the previous owner's unlock() (a timestamp it
//                  wrote inside its critical section just before unlocking)
//                  to the moment the waiter's lock() returned; and the length
//                  of every critical section. Medians per measurement:
//                  delay_median_ns next to cs_median_ns. Dispatch parks the
//                  woken waiter in a ready queue behind parallel work while
//                  the lock stays held; CES switches to it at once.
//   locality       1000 tasks, 4 resources (a spindle::mutex guarding a small
//                  array each); each iteration locks a random resource (a 2 us
//                  critical section), records this_fiber::worker_index(),
//                  unlocks, then does the parallel work (CES paper §5.4).
//                  Metric handoff_same_worker_fraction: of the critical
//                  sections entered after waiting, the share that ran on the
//                  worker where the resource's previous section ran. CES runs
//                  contended sections back to back on one worker; dispatch
//                  sends the waiter back to the worker it blocked on.
//
// Competitors, all in this one program and interleaved by the harness:
//   spindle_ces       spindle::mutex(handoff::ces) on a spindle::scheduler
//                     with W workers (the reference for ratios)
//   spindle_dispatch  spindle::mutex(handoff::dispatch), same scheduler
//   spindle_inline    spindle::mutex(handoff::inline_resume), same scheduler
//   spindle_cqs_ces   spindle::cqs_mutex(handoff::ces): the same interface on the
//                     CQS queue (mutex and cs-length workloads)
//   boost_fiber       boost::fibers::mutex on Boost.Fiber's algo::work_stealing
//                     with W threads, the main thread being one of them.
//                     Boost 1.74's work_stealing keeps its registry in statics
//                     (a barrier sized by the first pool, an id counter that
//                     only grows), so a process can build exactly one pool:
//                     every boost_fiber measurement runs in a forked child
//                     that builds the pool, times the run, verifies it, joins
//                     its threads and sends the numbers back over a pipe. At
//                     W=1 it uses algo::round_robin instead: a one-thread
//                     work_stealing spins forever trying to steal from itself
//                     once its queue runs empty.
//   std_mutex         std::mutex with W OS threads; thread k runs tasks k,
//                     k+W, k+2W, ... one after another (same total work).
// For rw the spindle variants use spindle::shared_mutex with the same
// policies, std_shared_mutex is std::shared_mutex on W OS threads as
// std_mutex (glibc's rwlock: readers preferred, not FIFO), and there is no
// boost_fiber: Boost.Fiber has no shared mutex.
//
// Every variant runs the same task body (a template over the mutex type),
// with the same per-task random sequence (seeded from the task index), and
// verifies its result: every insertion counted under the lock, the map holds
// exactly the primes drawn. A wrong result ends the program with status 1.
//
// Worker counts: --quick W in {1, 2}; --full W = 1..hardware_concurrency.
// `--workers 1,2,4,8,16` (or SPINDLE_BENCH_WORKERS=1,2,4) overrides the list
// and `--iterations N` the per-task iterations of every workload (the paper
// uses 1000; --full defaults to 100, locality 200, so that the W=1 points
// stay affordable). locality skips W=1, where the answer is trivially 1.
// `--variants spindle_dispatch,std_mutex` runs only those variants.

// spindle first: Boost.Fiber defines a function-like macro cpu_relax() that
// would mangle spindle::arch::cpu_relax() if its header came later.
#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/scheduler.hpp>
#include <spindle/sync/cqs_mutex.hpp>
#include <spindle/sync/mutex.hpp>
#include <spindle/sync/shared_mutex.hpp>

#include <boost/fiber/algo/round_robin.hpp>
#include <boost/fiber/algo/work_stealing.hpp>
#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/fiber.hpp>
#include <boost/fiber/fixedsize_stack.hpp>
#include <boost/fiber/mutex.hpp>
#include <boost/fiber/operations.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/harness.hpp"
#include "../harness/options.hpp"
#include "../harness/runners.hpp"
#include "../harness/work.hpp"

namespace bf = boost::fibers;
using spindle::bench::boost_run;
using spindle::bench::do_not_optimize;
using spindle::bench::fail;
using spindle::bench::harness;
using spindle::bench::in_child;
using spindle::bench::metric;
using spindle::bench::now_ns;
using spindle::bench::params;
using spindle::bench::parse_numbers;
using spindle::bench::spindle_run;
using spindle::bench::threads_run;
using spindle::bench::variant;

namespace {

constexpr unsigned sieve_max = 10000;

// ---------------------------------------------------------------------------
// The task's ingredients: primes, a deterministic per-task RNG, the parallel
// work factors(p), and busy work inside the lock.

std::vector<unsigned> g_primes;  // the primes in (9000, 10000]

void init_primes() {
    std::vector<unsigned char> composite(sieve_max + 1, 0);
    for (unsigned i = 2; i * i <= sieve_max; ++i)
        if (!composite[i])
            for (unsigned j = i * i; j <= sieve_max; j += i) composite[j] = 1;
    for (unsigned p = 9001; p <= sieve_max; ++p)
        if (!composite[p]) g_primes.push_back(p);
}

struct rng : spindle::bench::splitmix64 {
    unsigned prime() { return g_primes[next() % g_primes.size()]; }
};
inline rng task_rng(int task) { return rng{{0x5EED0000ull + static_cast<std::uint64_t>(task) * 7919u}}; }

// "factors(p)": sieve of Eratosthenes up to p, then factor p by trial
// division with the primes found. The sieve is a fresh heap array, as in a
// straightforward implementation (std::vector); kept off the fiber stack so
// that 5000 tasks do not each keep 10 KB of sieve warm in their own stack:
// the workload measures the lock, not the memory footprint of stacks.
__attribute__((noinline)) unsigned factors(unsigned p) {
    if (p > sieve_max) fail("factors(%u): beyond the sieve", p);
    std::vector<unsigned char> composite(p + 1, 0);
    for (unsigned i = 2; i * i <= p; ++i)
        if (!composite[i])
            for (unsigned j = i * i; j <= p; j += i) composite[j] = 1;
    do_not_optimize(composite.data());
    unsigned n = p, count = 0;
    for (unsigned d = 2; d <= p && n > 1; ++d)
        if (!composite[d])
            while (n % d == 0) {
                n /= d;
                ++count;
            }
    return count;
}

// Busy work of `ns` nanoseconds (a steady_clock spin; overshoot is one clock
// read, ~20 ns).
inline void busy_ns(long ns) {
    if (ns <= 0) return;
    auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
    while (std::chrono::steady_clock::now() < end) {
    }
}

inline std::int64_t clock_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

double median_of(std::vector<double>& v) {
    if (v.empty()) return 0;
    std::size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
    double hi = v[mid];
    if (v.size() % 2) return hi;
    double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    return (lo + hi) / 2;
}

// How many distinct primes T tasks of I iterations draw (replays the RNGs).
std::size_t expected_keys(int tasks, int iterations) {
    static std::map<std::pair<int, int>, std::size_t> cache;
    auto it = cache.find({tasks, iterations});
    if (it != cache.end()) return it->second;
    std::vector<char> seen(sieve_max + 1, 0);
    std::size_t n = 0;
    for (int t = 0; t < tasks; ++t) {
        rng r = task_rng(t);
        for (int i = 0; i < iterations; ++i) {
            unsigned p = r.prime();
            if (!seen[p]) {
                seen[p] = 1;
                ++n;
            }
        }
    }
    cache[{tasks, iterations}] = n;
    return n;
}

// ---------------------------------------------------------------------------
// mutex / cs-length: the Fig. 8 task.

struct map_state {
    std::map<unsigned, unsigned> map;  // guarded by the mutex under test
    long long inside = 0;              // guarded: insertions made
};

template <class Mutex>
void prime_task(Mutex& m, map_state& s, int task, int iterations, long cs_ns) {
    rng r = task_rng(task);
    for (int i = 0; i < iterations; ++i) {
        unsigned p = r.prime();
        m.lock();
        s.map.insert({p, p});
        ++s.inside;  // not atomic: a lost update means mutual exclusion failed
        busy_ns(cs_ns);
        m.unlock();
        do_not_optimize(factors(p));
    }
}

void verify_map(const map_state& s, int tasks, int iterations, const char* who) {
    long long want = static_cast<long long>(tasks) * iterations;
    if (s.inside != want) fail("%s: %lld insertions counted under the lock, expected %lld", who, s.inside, want);
    std::size_t keys = expected_keys(tasks, iterations);
    if (s.map.size() != keys) fail("%s: map holds %zu keys, expected %zu", who, s.map.size(), keys);
    for (const auto& [k, v] : s.map)
        if (k != v) fail("%s: map[%u] = %u", who, k, v);
}

// One measurement of the task loop with each competitor; ops/s.
struct loop_setup {
    unsigned workers;
    int tasks;
    int iterations;
    long cs_ns;
    double ops() const { return static_cast<double>(tasks) * iterations; }
};

template <class Mutex = spindle::mutex>
double spindle_loop(const loop_setup& c, spindle::handoff policy, const char* who) {
    map_state s;
    Mutex m(policy);
    auto body = [&](int t) { prime_task(m, s, t, c.iterations, c.cs_ns); };
    double ns = spindle_run(c.workers, c.tasks, body);
    verify_map(s, c.tasks, c.iterations, who);
    return c.ops() / (ns * 1e-9);
}

double boost_loop(const loop_setup& c) {
    return in_child("boost_fiber", [&] {
        map_state s;
        bf::mutex m;
        auto body = [&](int t) { prime_task(m, s, t, c.iterations, c.cs_ns); };
        double ns = boost_run(c.workers, c.tasks, body);
        verify_map(s, c.tasks, c.iterations, "boost_fiber");
        return std::vector<double>{c.ops() / (ns * 1e-9)};
    })[0];
}

double std_loop(const loop_setup& c) {
    map_state s;
    std::mutex m;
    auto body = [&](int t) { prime_task(m, s, t, c.iterations, c.cs_ns); };
    double ns = threads_run(c.workers, c.tasks, body);
    verify_map(s, c.tasks, c.iterations, "std_mutex");
    return c.ops() / (ns * 1e-9);
}

std::string g_factors_note;  // the measured cost of the parallel work

// --variants LIST: run only the named variants (to chase one of them).
spindle::bench::variant_filter g_variants;
std::vector<variant> selected(std::vector<variant> vs) {
    vs = g_variants.selected(std::move(vs));
    if (vs.empty()) fail("--variants selects none of this workload's variants");
    return vs;
}

std::vector<variant> loop_variants(const loop_setup& c) {
    std::string w = std::to_string(c.workers);
    return {
        {"spindle_ces", [c] { return spindle_loop(c, spindle::handoff::ces, "spindle_ces"); }, true,
         "spindle::mutex(handoff::ces), spindle::scheduler with " + w + " workers, 64 KiB stacks; " + g_factors_note},
        {"spindle_dispatch", [c] { return spindle_loop(c, spindle::handoff::dispatch, "spindle_dispatch"); }, false,
         "spindle::mutex(handoff::dispatch), " + w + " workers"},
        {"spindle_inline", [c] { return spindle_loop(c, spindle::handoff::inline_resume, "spindle_inline"); }, false,
         "spindle::mutex(handoff::inline_resume), " + w + " workers"},
        {"spindle_cqs_ces",
         [c] { return spindle_loop<spindle::cqs_mutex>(c, spindle::handoff::ces, "spindle_cqs_ces"); }, false,
         "spindle::cqs_mutex(handoff::ces) (the CQS queue instead of the spinlock-guarded one), " + w + " workers"},
        {"boost_fiber", [c] { return boost_loop(c); }, false,
         std::string("boost::fibers::mutex, ") +
             (c.workers == 1 ? "algo::round_robin on the main thread (a 1-thread work_stealing spins forever)"
                             : "algo::work_stealing(" + w + "): main thread + " + std::to_string(c.workers - 1) +
                                   " threads") +
             ", fixedsize_stack 64 KiB, one forked child per measurement"},
        {"std_mutex", [c] { return std_loop(c); }, false,
         "std::mutex, " + w + " OS threads, each running tasks/" + w + " tasks in turn"},
    };
}

struct run_options {
    std::vector<unsigned> workers;  // empty: the mode's default
    int iterations = 0;             // 0: the mode's default
};

std::vector<unsigned> worker_list(const harness& h, const run_options& o) {
    if (!o.workers.empty()) return o.workers;
    if (h.quick()) return {1, 2};
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
    std::vector<unsigned> ws;
    for (unsigned w = 1; w <= n; ++w) ws.push_back(w);
    return ws;
}

int loop_iterations(const harness& h, const run_options& o) {
    if (o.iterations > 0) return o.iterations;
    return h.quick() ? 6 : 100;
}

void bench_mutex(harness& h, const run_options& o) {
    const int tasks = 5000;
    const int iterations = loop_iterations(h, o);
    for (unsigned w : worker_list(h, o)) {
        loop_setup c{w, tasks, iterations, 0};
        h.compare("mutex", {{"tasks", tasks}, {"workers", w}, {"iterations", iterations}},
                  {"ops_per_s", true}, selected(loop_variants(c)));
    }
}

void bench_cs_length(harness& h, const run_options& o) {
    const int tasks = 5000;
    const int iterations = loop_iterations(h, o);
    std::vector<unsigned> ws = o.workers;
    if (ws.empty()) ws = h.quick() ? std::vector<unsigned>{2} : worker_list(h, o);
    for (unsigned w : ws)
        for (long cs : {0L, 250L, 1000L, 2500L, 7500L}) {
            loop_setup c{w, tasks, iterations, cs};
            h.compare("cs-length",
                      {{"tasks", tasks}, {"workers", w}, {"iterations", iterations},
                       {"cs_ns", static_cast<long long>(cs)}},
                      {"ops_per_s", true}, selected(loop_variants(c)), h.reps(3, 7));
        }
}

// ---------------------------------------------------------------------------
// rw: the Fig. 8 loop on a reader-writer mutex, one writer in `writer_every`.

struct rw_state {
    std::map<unsigned, unsigned> map;  // guarded by the shared mutex under test
    long long writes = 0;              // guarded (exclusively): insertions made
    std::atomic<long long> reads{0};   // lookups made, added once per task
    std::atomic<long long> torn{0};    // lookups that found a wrong value
};

template <class SharedMutex>
void rw_task(SharedMutex& m, rw_state& s, int task, int iterations, unsigned writer_every) {
    rng r = task_rng(task);
    long long reads = 0, torn = 0;
    for (int i = 0; i < iterations; ++i) {
        unsigned p = r.prime();
        if (r.next() % writer_every == 0) {
            m.lock();
            s.map.insert({p, p});
            ++s.writes;  // not atomic: a lost update means exclusion failed
            m.unlock();
        } else {
            m.lock_shared();
            auto it = s.map.find(p);
            if (it != s.map.end() && it->second != p) ++torn;
            m.unlock_shared();
            ++reads;
        }
        do_not_optimize(factors(p));
    }
    s.reads.fetch_add(reads, std::memory_order_relaxed);  // summed after the run
    s.torn.fetch_add(torn, std::memory_order_relaxed);
}

// {writes, distinct keys written} that T tasks of I iterations make (replays
// the RNGs).
std::pair<long long, std::size_t> rw_expected(int tasks, int iterations, unsigned writer_every) {
    static std::map<std::tuple<int, int, unsigned>, std::pair<long long, std::size_t>> cache;
    auto key = std::make_tuple(tasks, iterations, writer_every);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    std::vector<char> seen(sieve_max + 1, 0);
    long long writes = 0;
    std::size_t keys = 0;
    for (int t = 0; t < tasks; ++t) {
        rng r = task_rng(t);
        for (int i = 0; i < iterations; ++i) {
            unsigned p = r.prime();
            if (r.next() % writer_every != 0) continue;
            ++writes;
            if (!seen[p]) {
                seen[p] = 1;
                ++keys;
            }
        }
    }
    return cache[key] = {writes, keys};
}

void verify_rw(const rw_state& s, int tasks, int iterations, unsigned writer_every, const char* who) {
    const auto [writes, keys] = rw_expected(tasks, iterations, writer_every);
    const long long total = static_cast<long long>(tasks) * iterations;
    if (s.writes != writes) fail("%s: %lld insertions counted under the lock, expected %lld", who, s.writes, writes);
    if (s.reads.load() != total - writes)
        fail("%s: %lld lookups, expected %lld", who, s.reads.load(), total - writes);
    if (s.torn.load() != 0) fail("%s: %lld lookups found a wrong value", who, s.torn.load());
    if (s.map.size() != keys) fail("%s: map holds %zu keys, expected %zu", who, s.map.size(), keys);
    for (const auto& [k, v] : s.map)
        if (k != v) fail("%s: map[%u] = %u", who, k, v);
}

struct rw_setup {
    unsigned workers;
    int tasks;
    int iterations;
    unsigned writer_every;  // writer share 100/writer_every %
    double ops() const { return static_cast<double>(tasks) * iterations; }
};

double spindle_rw(const rw_setup& c, spindle::handoff policy, const char* who) {
    rw_state s;
    spindle::shared_mutex m(policy);
    auto body = [&](int t) { rw_task(m, s, t, c.iterations, c.writer_every); };
    double ns = spindle_run(c.workers, c.tasks, body);
    verify_rw(s, c.tasks, c.iterations, c.writer_every, who);
    return c.ops() / (ns * 1e-9);
}

double std_rw(const rw_setup& c) {
    rw_state s;
    std::shared_mutex m;
    auto body = [&](int t) { rw_task(m, s, t, c.iterations, c.writer_every); };
    double ns = threads_run(c.workers, c.tasks, body);
    verify_rw(s, c.tasks, c.iterations, c.writer_every, "std_shared_mutex");
    return c.ops() / (ns * 1e-9);
}

std::vector<variant> rw_variants(const rw_setup& c) {
    std::string w = std::to_string(c.workers);
    return {
        {"spindle_ces", [c] { return spindle_rw(c, spindle::handoff::ces, "spindle_ces"); }, true,
         "spindle::shared_mutex(handoff::ces), spindle::scheduler with " + w + " workers, 64 KiB stacks; " +
             g_factors_note},
        {"spindle_dispatch", [c] { return spindle_rw(c, spindle::handoff::dispatch, "spindle_dispatch"); }, false,
         "spindle::shared_mutex(handoff::dispatch), " + w + " workers"},
        {"spindle_inline", [c] { return spindle_rw(c, spindle::handoff::inline_resume, "spindle_inline"); }, false,
         "spindle::shared_mutex(handoff::inline_resume), " + w + " workers"},
        {"std_shared_mutex", [c] { return std_rw(c); }, false,
         "std::shared_mutex (glibc pthread_rwlock_t, readers preferred), " + w + " OS threads, each running tasks/" +
             w + " tasks in turn"},
    };
}

void bench_rw(harness& h, const run_options& o) {
    const int tasks = 5000;
    const int iterations = loop_iterations(h, o);
    std::vector<unsigned> ws = o.workers;
    if (ws.empty()) ws = h.quick() ? std::vector<unsigned>{2} : worker_list(h, o);
    for (unsigned w : ws)
        for (unsigned every : {2u, 4u, 8u, 16u}) {  // writers 50, 25, 12.5, 6.25 %
            rw_setup c{w, tasks, iterations, every};
            h.compare("rw",
                      {{"tasks", tasks}, {"workers", w}, {"iterations", iterations},
                       {"writer_pct", 100.0 / every}},
                      {"ops_per_s", true}, selected(rw_variants(c)), h.reps(3, 7));
        }
}

// ---------------------------------------------------------------------------
// queuing-delay: the Fig. 8 loop with timestamps.

struct delay_state {
    map_state ms;
    std::int64_t last_unlock = 0;  // guarded: when the last owner unlocked
    std::vector<double> delays;    // guarded, preallocated: unlock -> waiter's lock() returns
    std::vector<double> cs;        // guarded, preallocated: critical-section lengths
    std::size_t nd = 0, nc = 0;
    delay_state(int tasks, int iterations)
        : delays(static_cast<std::size_t>(tasks) * static_cast<std::size_t>(iterations)),
          cs(static_cast<std::size_t>(tasks) * static_cast<std::size_t>(iterations)) {}
};

template <class Mutex>
void delay_task(Mutex& m, delay_state& s, int task, int iterations) {
    rng r = task_rng(task);
    for (int i = 0; i < iterations; ++i) {
        unsigned p = r.prime();
        std::int64_t acquired;
        if (m.try_lock()) {
            acquired = clock_ns();
        } else {
            std::int64_t called = clock_ns();
            m.lock();
            acquired = clock_ns();
            // Count it as a wait only if the unlock that let us in came after
            // we asked (it always does for a FIFO handoff; a lock that just
            // became free between try_lock and lock did not make us wait).
            if (s.last_unlock >= called) s.delays[s.nd++] = static_cast<double>(acquired - s.last_unlock);
        }
        s.ms.map.insert({p, p});
        ++s.ms.inside;
        std::int64_t released = clock_ns();
        s.cs[s.nc++] = static_cast<double>(released - acquired);
        s.last_unlock = released;
        m.unlock();
        do_not_optimize(factors(p));
    }
}

// {delay median, cs median, waits, acquisitions}
std::vector<double> delay_result(delay_state& s, int tasks, int iterations, const char* who) {
    verify_map(s.ms, tasks, iterations, who);
    if (s.nc != static_cast<std::size_t>(tasks) * static_cast<std::size_t>(iterations))
        fail("%s: %zu critical sections timed, expected %lld", who, s.nc,
             static_cast<long long>(tasks) * iterations);
    s.delays.resize(s.nd);
    s.cs.resize(s.nc);
    double waits = static_cast<double>(s.nd), total = static_cast<double>(s.nc);
    return {median_of(s.delays), median_of(s.cs), waits, total};
}

void bench_queuing_delay(harness& h, const run_options& o) {
    const int tasks = 5000;
    const int iterations = loop_iterations(h, o);
    std::vector<unsigned> ws = o.workers;
    if (ws.empty()) ws = h.quick() ? std::vector<unsigned>{2} : worker_list(h, o);
    for (unsigned w : ws) {
        // Per variant, the {cs median, waits, acquisitions} of every
        // measurement, the harness's discarded warm-up first.
        std::map<std::string, std::vector<std::vector<double>>> side;
        auto spindle_v = [&, w](spindle::handoff policy, const char* who) {
            delay_state s(tasks, iterations);
            spindle::mutex m(policy);
            auto body = [&](int t) { delay_task(m, s, t, iterations); };
            spindle_run(w, tasks, body);
            std::vector<double> r = delay_result(s, tasks, iterations, who);
            side[who].push_back({r[1], r[2], r[3]});
            return r[0];
        };
        auto boost_v = [&, w] {
            std::vector<double> r = in_child("boost_fiber", [&] {
                delay_state s(tasks, iterations);
                bf::mutex m;
                auto body = [&](int t) { delay_task(m, s, t, iterations); };
                boost_run(w, tasks, body);
                return delay_result(s, tasks, iterations, "boost_fiber");
            });
            if (r.size() != 4) fail("boost_fiber: child sent %zu values", r.size());
            side["boost_fiber"].push_back({r[1], r[2], r[3]});
            return r[0];
        };
        params ps{{"tasks", tasks}, {"workers", w}, {"iterations", iterations}};
        const char* what =
            "median time from the previous owner's unlock() to a waiting lock() returning, over the "
            "acquisitions that waited (try_lock failed, then lock())";
        auto res = h.compare(
            "queuing-delay", ps, {"delay_median_ns", false},
            selected({{"spindle_ces", [&] { return spindle_v(spindle::handoff::ces, "spindle_ces"); }, true, what},
                      {"spindle_dispatch", [&] { return spindle_v(spindle::handoff::dispatch, "spindle_dispatch"); },
                       false, what},
                      {"boost_fiber", boost_v, false, what}}));
        // The critical-section medians of the same runs (none for a variant
        // that hung or was skipped, or while the harness replays).
        for (std::size_t i = 0; i < res.size(); ++i) {
            if (!res[i].measured() || h.replaying()) continue;
            std::vector<std::vector<double>>& runs = side[res[i].variant];
            if (runs.size() != res[i].samples.size() + 1)
                fail("queuing-delay: %zu side samples for %zu measurements", runs.size(), res[i].samples.size());
            runs.erase(runs.begin());  // the warm-up
            std::vector<double> cs;
            double waits = 0, total = 0;
            for (auto& r : runs) {
                cs.push_back(r[0]);
                waits += r[1];
                total += r[2];
            }
            auto s = harness::summarize(res[i].variant, cs);
            char note[256];
            std::snprintf(note, sizeof note,
                          "median critical-section length (lock acquired to unlock call) in the same runs; "
                          "%.1f%% of acquisitions waited; median delay / median cs = %.1f",
                          total > 0 ? 100.0 * waits / total : 0.0, s.median > 0 ? res[i].median / s.median : 0.0);
            h.report("queuing-delay", ps, {"cs_median_ns", false}, s, res[i].variant == "spindle_ces", note);
        }
    }
}

// ---------------------------------------------------------------------------
// locality: 4 resources, which worker ran each critical section.

struct resource {
    spindle::mutex m;
    std::array<std::uint64_t, 16> data{};  // guarded by m
    std::vector<long long> by_worker;      // guarded by m: critical sections per worker
    int last_worker = -1;                  // guarded by m: where the previous section ran
    long long handoffs = 0, same = 0;      // guarded by m: waited-for acquisitions, on last_worker
    resource(spindle::handoff h, unsigned workers) : m(h), by_worker(workers, 0) {}
};

double locality_run(unsigned workers, int tasks, int iterations, spindle::handoff policy, const char* who) {
    constexpr unsigned n_res = 4;
    std::vector<std::unique_ptr<resource>> res;
    for (unsigned i = 0; i < n_res; ++i) res.push_back(std::make_unique<resource>(policy, workers));
    auto body = [&](int t) {
        rng r = task_rng(t);
        for (int i = 0; i < iterations; ++i) {
            resource& x = *res[r.next() % n_res];
            unsigned p = r.prime();
            bool waited = false;
            if (!x.m.try_lock()) {
                waited = true;
                x.m.lock();
            }
            int w = spindle::this_fiber::worker_index();
            if (w < 0 || static_cast<unsigned>(w) >= workers)
                fail("%s: worker_index() = %d with %u workers", who, w, workers);
            ++x.by_worker[static_cast<std::size_t>(w)];
            if (waited) {
                ++x.handoffs;
                if (w == x.last_worker) ++x.same;
            }
            x.last_worker = w;
            for (auto& d : x.data) d += p;
            // A 2 us section, as in the unit test of the same property:
            // with a 60 ns one, a try_lock that fails usually finds the lock
            // free again by its lock(), and there is no handoff to observe.
            busy_ns(2000);
            x.m.unlock();
            do_not_optimize(factors(p));
        }
    };
    spindle_run(workers, tasks, body);
    long long all = 0, handoffs = 0, same = 0;
    double frac = 0;
    for (auto& x : res) {
        handoffs += x->handoffs;
        same += x->same;
        long long n = 0, top = 0;
        for (long long c : x->by_worker) {
            n += c;
            top = std::max(top, c);
        }
        for (auto d : x->data)
            if (d != x->data[0]) fail("%s: a resource's array was updated unevenly", who);
        all += n;
        frac += n > 0 ? static_cast<double>(top) / static_cast<double>(n) : 1.0;
    }
    if (all != static_cast<long long>(tasks) * iterations)
        fail("%s: %lld critical sections recorded, expected %lld", who, all,
             static_cast<long long>(tasks) * iterations);
    (void)frac;  // the all-sections share: ~1/W whenever contention is low, whatever the policy
    return handoffs > 0 ? static_cast<double>(same) / static_cast<double>(handoffs) : 0.0;
}

void bench_locality(harness& h, const run_options& o) {
    const int tasks = 1000;
    const int iterations = o.iterations > 0 ? o.iterations : (h.quick() ? 25 : 200);
    std::vector<unsigned> ws;
    if (!o.workers.empty()) {
        for (unsigned w : o.workers)
            if (w >= 2) ws.push_back(w);  // one worker: trivially 1.0
    } else if (h.quick()) {
        ws = {2};
    } else {
        for (unsigned w : worker_list(h, o))
            if (w >= 2) ws.push_back(w);
    }
    const char* note =
        "of the critical sections entered after waiting (contended handoffs), the share that ran on the worker "
        "where the resource's previous critical section ran";
    for (unsigned w : ws) {
        auto v = [w, iterations](spindle::handoff p, const char* who) {
            return [=] { return locality_run(w, tasks, iterations, p, who); };
        };
        h.compare("locality", {{"tasks", tasks}, {"workers", w}, {"iterations", iterations}, {"resources", 4}},
                  {"handoff_same_worker_fraction", true},
                  selected({{"spindle_ces", v(spindle::handoff::ces, "spindle_ces"), true, note},
                            {"spindle_dispatch", v(spindle::handoff::dispatch, "spindle_dispatch"), false, note},
                            {"spindle_inline", v(spindle::handoff::inline_resume, "spindle_inline"), false, note}}));
    }
}

// ---------------------------------------------------------------------------

void calibrate_factors() {
    std::vector<double> per;
    for (int round = 0; round < 5; ++round) {
        double t0 = now_ns();
        unsigned sum = 0;
        for (unsigned p : g_primes) sum += factors(p);
        per.push_back((now_ns() - t0) / static_cast<double>(g_primes.size()));
        if (sum != g_primes.size()) fail("factors(): a prime has %u factors in all", sum);
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "parallel work factors(p), p prime in (9000, 10000], costs %.1f us here",
                  median_of(per) / 1000);
    g_factors_note = buf;
    std::fprintf(stderr, "ces: %s\n", buf);
}

// "1,2,4": a trailing comma is allowed ("1,2,").
std::vector<unsigned> parse_workers(const std::string& s) {
    if (s.empty()) fail("empty worker list");
    const std::string list = s.back() == ',' ? s.substr(0, s.size() - 1) : s;
    // A bad item's message names the list as given, its trailing comma too.
    auto bad = [&](const char* fmt, const char* what, const char* item, const char*) {
        fail(fmt, what, item, s.c_str());
    };
    return parse_numbers(list, "worker count", 1, 4096, bad);
}

// Takes this program's own arguments (--workers LIST, --iterations N,
// --variants LIST) out of argv, leaving the harness's.
run_options take_own_args(int& argc, char** argv) {
    run_options o;
    if (const char* env = std::getenv("SPINDLE_BENCH_WORKERS"); env != nullptr && *env != '\0')
        o.workers = parse_workers(env);
    spindle::bench::take_own_args(
        argc, argv,
        "spindle_bench_ces also takes: [--workers 1,2,4,...] (or SPINDLE_BENCH_WORKERS) "
        "[--iterations N] [--variants spindle_ces,boost_fiber,...]",
        fail,
        {
            {"--variants", [&](const std::string& v) { g_variants.set(v); }},
            {"--workers", [&](const std::string& v) { o.workers = parse_workers(v); }},
            {"--iterations",
             [&](const std::string& v) {
                 o.iterations = std::atoi(v.c_str());
                 if (o.iterations < 1) fail("--iterations wants a positive number");
             }},
        });
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    run_options o = take_own_args(argc, argv);
    harness h(argc, argv, "ces");
    init_primes();
    calibrate_factors();
    if (h.wants("mutex")) bench_mutex(h, o);
    if (h.wants("cs-length")) bench_cs_length(h, o);
    if (h.wants("rw")) bench_rw(h, o);
    if (h.wants("queuing-delay")) bench_queuing_delay(h, o);
    if (h.wants("locality")) bench_locality(h, o);
    return 0;
}
