// bench/cqs — the CQS benchmarks (docs/benchmarks.md, "CQS
// primitives (CQS paper §6)"): spindle's barrier, latch, counting semaphore
// and blocking pools, built on the CancellableQueueSynchronizer queue,
// against the standard library, pthreads, Boost.Fiber and three lock-based
// queues written for this program; and the cost of cancelling a wait behind
// a long queue.
//
// Work between operations. As in the paper (§6: "some uncontended work after
// each operation invocation — the work size is geometrically distributed
// with a fixed mean"), every actor spins a geometrically distributed number
// of iterations of an empty loop between operations. The loop is calibrated
// at start-up (ns per iteration, printed on stderr); the draws come from one
// table of 4096 precomputed values per mean, which each actor walks from its
// own offset, so drawing costs a load and every variant does the same work.
// The mean is the `work_ns` parameter (default 200 ns; --work-ns LIST).
//
// Actors, threads and workers. Each workload has a number of actors (barrier
// parties, latch count-down actors, semaphore or pool users): the `parties` or
// `threads` parameter. Thread variants run one OS thread per actor; fiber
// variants run one fiber per actor on W = min(actors, --max-workers)
// workers (default: hardware_concurrency), so more actors than CPUs means
// oversubscribed threads but not oversubscribed workers. `--threads LIST`
// (alias `--workers LIST`, or SPINDLE_BENCH_WORKERS, as in spindle_bench_ces)
// sets the actor counts.
//
// Workloads (records: suite "cqs"):
//   barrier    P parties each run: { work; arrive_and_wait() } for N phases
//              (§6.1). Metric ns_per_phase = wall time / N. Every variant
//              counts its completed phases (completion function, or the one
//              serial waiter per phase) and must count N.
//   latch      Fork-join rounds: a coordinator opens round r's start latch
//              (count 1, T actors wait on it); the T actors then share C
//              count-downs of round r's done latch, with work before each;
//              the coordinator -- the one waiter of the done latch -- waits
//              for it and opens round r + 1. Every latch is used once (all
//              2R are built before the clock starts). Metric ns_per_round.
//              The paper (§6.2) times count-downs only; the round adds the
//              waiter's wake-up and the fan-out to the next round, so that
//              the waiting path is exercised on fibers too (a count-down
//              actor that never waits would otherwise run every round
//              before the waiter gets a worker).
//   semaphore  T actors each run: { work; acquire(); work; release() }
//              (§6.3: preparation work, then work holding the permit), K
//              permits. Metric ops_per_s = acquisitions / wall time. With
//              K = 1 a plain counter incremented while holding the permit
//              checks mutual exclusion.
//   abort      Q waiters are parked on each primitive (fibers on one worker,
//              16 KiB stacks); then the waiter under test repeatedly calls
//              the wait with a stop token whose stop was already requested
//              (§6.5: "suspend and instantly abort, without parking the
//              native thread"). The stop callback runs as the wait registers
//              it, before the waiter takes its cell or node, and claims the
//              waiter; the wait then enqueues, finds itself claimed, does
//              not sleep and runs the cancellation: CQS marks its cell
//              CANCELLED (and unlinks a segment once all its cells are dead)
//              in O(1); the linear queue unlinks its node by walking from
//              the head past the Q queued ones. Param `waiter`: "thread" (an
//              OS thread) or "fiber" (a fiber on the queued waiters' worker);
//              neither parks nor makes a system call. A timed wait would measure
//              the timer (arming, firing, its latency) instead of the queue,
//              so no deadline is used.
//              Each primitive has an empty twin, timed in alternating
//              batches of up to 32 calls within the same measurement; ns per
//              call is the median over the batches (a batch that another
//              process's time slice hit is an outlier, not a share of a
//              total). Metric ns_per_op, and two computed metrics:
//              growth_from_empty (loaded / empty twin, the paired ratio of
//              each measurement; the issue's target for spindle: <= 1.5 at
//              Q = 100 000) and speedup_vs_linear_removal (linear_removal /
//              the variant, round by round; target >= 50 at Q = 10 000).
//              --quick runs linear_removal up to Q = 10 000 (an abort behind
//              100 000 waiters walks 100 000 stacks: tens of ms each).
//   memory     What a queued waiter costs (the issue's target: at most one
//              cell plus its fiber). Q = 100 000 fibers (1 worker, 16 KiB
//              stacks) park on one queue; each variant runs in its own
//              child process, so that no run reuses another's stacks.
//              rss_bytes_per_waiter: the child's RSS growth / Q, for fibers
//              parked on detail::cqs<unit> (spindle_simple) and on a
//              counting_semaphore (spindle_smart), beside the reference
//              fiber_only: Q fibers that are alive and yield in a ring
//              (the fiber alone). queue_bytes_per_waiter: the queue's own
//              memory, live segments x sizeof(cqs_segment) / Q, exact; a
//              cell is 16 bytes, and the waiter's record (cqs_wait) lives on
//              its fiber's stack.
//   hang_freedom  Does a primitive lose a wake-up? Short contended rounds,
//              repeated many times, each with a time budget, for spindle
//              (fibers and threads) and the standard library: 8 actors;
//              semaphore: 1 permit, per round each actor 8 x { acquire;
//              500 ns of work; release }; latch: per round each actor
//              arrive_and_wait()s on the round's latch (count 8); barrier:
//              per round each actor arrive_and_wait()s 4 times. Rounds
//              follow one another at once (the last actor to finish round r
//              opens r + 1 at a spinning gate, which cannot lose a wake-up),
//              500 rounds of one variant in a row, the variants interleaved
//              (A B C, B C A, ...), up to 100 000 rounds each or until the
//              primitive's time has passed: 5 s for the semaphore (its
//              libstdc++ twin has a known lost wake-up, rare enough to need
//              the rounds), 2 s each for the latch and the barrier (--full:
//              1 000 000 rounds; 30 s, 10 s, 10 s; no cycle after the
//              first starts past --time-budget: each variant gets at least
//              one batch unless a round hangs past that time). Every
//              round runs in a forked child (one child runs rounds until one
//              hangs; the next goes on from the round after it: a hung
//              thread cannot be cancelled, its process can be killed). A
//              round hangs when it makes no progress (no call entered or
//              returned) for its budget (2 s), or, on threads, for 300 ms
//              while its state shows a lost wake-up: every actor still in
//              the round is asleep inside the primitive (a thread: /proc
//              says it sleeps; a fiber: the worker it entered its call on
//              sleeps, or has run since the stall began), and the
//              primitive says it should have returned -- a free permit and
//              nobody holding one, an open latch, a phase the barrier has
//              completed (its completion function counts them). The time
//              without progress is the time the child's supervisor saw
//              pass: a look that comes late (the child was off the CPU)
//              adds 50 ms at most. The child shows its parent, in shared
//              memory, which batch and round it is in and that its
//              supervisor looks; one that neither reports nor changes for
//              the round's budget plus 10 s is killed, the rounds it had
//              finished counted and the open one counted hung. Records:
//              metric rounds_finished, reps = the rounds attempted,
//              "hung_rounds", and the reasons in the note; a variant that
//              got no round (the time went on hung rounds first) has a
//              "skipped" record.
//   pool       T actors each run: { work; e = take(); work; put(e) } (§6.4:
//              "the same benchmark as for semaphores", with elements), on a
//              pool of N elements (param pool_size), the indices 0 .. N-1.
//              Each element has a cache line of its own with an in-use flag,
//              exchanged to 1 after take and back to 0 before put (two
//              holders at once fail the run), and a plain counter bumped
//              while it is held; after the run the counters must add up to
//              the takes, and try_take must give back every element exactly
//              once and then nothing. Metric ops_per_s = takes / wall time.
//              With T <= N nobody waits for an element: the pool's
//              uncontended cost. (Fibers that never wait never give up
//              their worker: then only W of the T fibers run, the others
//              start once the run has been stopped and take nothing --
//              as in the semaphore with T <= K. The figure is still the
//              workers' throughput.) T > N measures the waiting path. There
//              spindle's pools are fair: a put hands its element to the
//              oldest waiting take, which for OS threads on separate CPUs
//              is a futex wake-up per take; mutex_cv_queue is not: a putter
//              that comes back for an element usually finds its own.
//
// Competitors, all in this one program and interleaved by the harness. The
// reference of a comparison is spindle_fiber (barrier, latch, semaphore),
// spindle_queue_pool_fiber (pool) or spindle_smart (abort); a thread-only
// competitor names spindle_thread (pool: spindle_queue_pool_thread) as its
// `baseline` (the variant its ratio is computed against) and boost_fiber
// names spindle_fiber:
//   spindle_fiber            spindle primitive, fibers on a spindle::scheduler
//   spindle_fiber_dispatch   the semaphore with handoff::dispatch on fibers:
//                            a woken acquirer waits in its worker's ready
//                            queue (the default, ces, runs it at once)
//   spindle_thread           spindle primitive, one OS thread per actor
//                            (baseline of the thread-only competitors)
//   std_barrier              std::barrier (libstdc++), threads
//   pthread                  pthread_barrier_t (glibc), threads
//   boost_fiber              boost::fibers::barrier on algo::work_stealing
//                            with W threads (round_robin at W = 1), one
//                            forked child per measurement (its scheduler
//                            registry is process-static; see ces_bench.cpp)
//   std_latch                std::latch, threads
//   std_counting_semaphore   std::counting_semaphore (libstdc++: an atomic
//                            word with futex waits; not fair), threads
//   spinlock_queue           spinlock_queue_semaphore.hpp (fair, count and
//                            FIFO under a spinlock, parks like spindle) on
//                            fibers; spinlock_queue_thread: on threads
//   spindle_simple           detail::cqs<unit> in cqs_cancellation::simple
//                            mode, used directly (abort)
//   spindle_smart            spindle::counting_semaphore: smart
//                            cancellation (abort)
//   linear_removal           linear_removal_semaphore.hpp (abort)
//   spindle_queue_pool_fiber spindle::queue_pool<uint32_t> (FIFO ring), fibers
//   spindle_stack_pool_fiber spindle::stack_pool<uint32_t> (LIFO stack), fibers
//   spindle_queue_pool_thread, spindle_stack_pool_thread: the same on threads
//                            (baseline of spindle_stack_pool_thread and of
//                            mutex_cv_queue: spindle_queue_pool_thread)
//   mutex_cv_queue           a ring under std::mutex + std::condition_variable
//                            (mutex_cv_queue below; not fair), threads
//
// Length. A barrier, latch, semaphore or pool measurement runs for about 30 ms
// (--quick) or 100 ms (--full) of wall time, not for a fixed count: actor 0
// (the latch's coordinator) reads the clock every 16 operations and names
// the phase, round or operation at which everyone stops; the metric divides
// by what was done. (A count fitted to a fast run can take seconds when the
// next one is slow, and on a shared machine the same variant can be 50x
// slower from one run to the next.) In the pool every actor reads the clock
// against a deadline set by the first to start: a fiber that never waits
// never gives up its worker, so with T <= N actor 0 may not run before the
// others stop (on one worker it never would). The abort workload times
// batches.
//
// Command line: the harness's (--out, --quick, --full, --reps, --only) and
//   --threads LIST     actor counts (alias --workers; SPINDLE_BENCH_WORKERS)
//   --max-workers N    workers of the fiber variants at most (default: CPUs)
//   --work-ns LIST     mean work between operations, ns
//   --permits LIST     semaphore permits
//   --pool-sizes LIST  pool: elements in the pool
//   --queued LIST      abort: waiters already queued
//   --abort-waiter W   abort: thread, fiber or both (default)
//   --variants LIST    only these variants
//   --hf-rounds N      hang_freedom: rounds per variant at most
//   --hf-seconds S     hang_freedom: time per primitive (checked between
//                      cycles of batches, and after a hang)
//   --hf-round-ms MS   hang_freedom: a round's budget
//   --hf-test-stall V:R  test only: in round R of each of its batches, one
//                      actor of variant V blocks forever outside the primitive
//   --hf-test-lose V:R   test only: ... one actor's first call of the round
//                      sleeps for good where it would wait (a lost wake-up)
//   --hf-test-freeze V:R test only: ... the child process stops (SIGSTOP)
// Quick defaults: barrier P in {2, 4, 8}, work 200 ns; latch T in {1, 2, 4},
// C = 64; semaphore K in {1, 4, 16} x T in {1, 2, 4, 8}; pool N in {1, 4,
// 16} x T in {1, 2, 4, 8}; abort Q in {0, 10, 100, 1000, 10000, 100000}, 11
// rounds. --full: actor counts 1, 2, 4, ... up to 4x the CPUs (barrier from
// 2), barrier work {100, 1000} ns, latch C in {64, 1024}, semaphore K and
// pool N in {1, 2, 4, 8, 16} (work 200 ns: the paper found other sizes
// alike), 11 rounds (abort 15).

// spindle first: Boost.Fiber defines a function-like macro cpu_relax() that
// would mangle spindle::arch::cpu_relax() if its header came later.
#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/scheduler.hpp>
#include <spindle/sync/barrier.hpp>
#include <spindle/sync/counting_semaphore.hpp>
#include <spindle/sync/detail/cqs.hpp>
#include <spindle/sync/latch.hpp>
#include <spindle/sync/pool.hpp>

#include "linear_removal_semaphore.hpp"
#include "spinlock_queue_semaphore.hpp"

#include <boost/fiber/algo/round_robin.hpp>
#include <boost/fiber/algo/work_stealing.hpp>
#include <boost/fiber/barrier.hpp>
#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/fiber.hpp>
#include <boost/fiber/fixedsize_stack.hpp>
#include <boost/fiber/mutex.hpp>
#include <boost/fiber/operations.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <semaphore>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/harness.hpp"
#include "../harness/options.hpp"
#include "../harness/runners.hpp"
#include "../harness/work.hpp"

namespace bf = boost::fibers;
using spindle::bench::boost_run;
using spindle::bench::fail;
using spindle::bench::harness;
using spindle::bench::in_child;
using spindle::bench::metric;
using spindle::bench::now_ns;
using spindle::bench::params;
using spindle::bench::parse_numbers;
using spindle::bench::rss_bytes;
using spindle::bench::spin;
using spindle::bench::spindle_run;
using spindle::bench::threads_run;
using spindle::bench::summary;
using spindle::bench::variant;

namespace {

constexpr std::size_t fiber_stack_bytes = 64 * 1024;  // barrier, latch, semaphore fibers (spindle and Boost)
constexpr std::size_t queued_stack_bytes = 16 * 1024;  // abort's parked waiters: the smallest spindle allows

// ---------------------------------------------------------------------------
// Options

struct run_options {
    std::vector<unsigned> actors;   // --threads / --workers; empty: the mode's default
    unsigned max_workers = 0;       // 0: hardware_concurrency
    std::vector<unsigned> work_ns;  // empty: the mode's default
    std::vector<unsigned> permits;  // empty: the mode's default
    std::vector<unsigned> queued;   // empty: the mode's default
    std::vector<unsigned> pool_sizes;  // empty: the mode's default
    long hf_rounds = 0;             // hang_freedom: rounds per variant at most; 0: the mode's default
    double hf_seconds = 0;          // hang_freedom: time per primitive; 0: the mode's default
    double hf_round_ms = 0;         // hang_freedom: a round's budget; 0: the default
    std::string hf_test_stall;      // hang_freedom, test only: "VARIANT:ROUND"
    std::string hf_test_lose;       // ... the same
    std::string hf_test_freeze;     // ... the same
};

spindle::bench::variant_filter g_variants;  // --variants
unsigned g_cpus = 1;
double g_target_ns = 30e6;  // one measurement's length
std::string g_abort_waiter = "both";  // --abort-waiter thread|fiber|both

bool variant_wanted(const std::string& name) { return g_variants.wants(name); }

std::vector<variant> selected(std::vector<variant> vs) { return g_variants.selected(std::move(vs)); }

// ---------------------------------------------------------------------------
// Work between operations: an empty loop (spin) of a geometrically
// distributed number of iterations.

double g_spin_ns = 1.0;  // measured cost of one iteration

using rng = spindle::bench::splitmix64;

constexpr std::size_t work_table_size = 4096;  // a power of two
static_assert((work_table_size & (work_table_size - 1)) == 0);

// Geometric draws with mean `mean_ns` worth of spin() iterations.
struct work_table {
    unsigned mean_ns = 0;
    double actual_mean_ns = 0;  // what the table's draws average to
    std::vector<std::uint32_t> iters;
};

const work_table& work_for(unsigned mean_ns) {
    static std::map<unsigned, work_table> tables;
    auto it = tables.find(mean_ns);
    if (it != tables.end()) return it->second;
    work_table t;
    t.mean_ns = mean_ns;
    t.iters.assign(work_table_size, 0);
    const double mean_iters = mean_ns / g_spin_ns;
    if (mean_iters > 0) {
        // Geometric on {0, 1, 2, ...} with mean m: success probability
        // p = 1 / (m + 1); a draw is floor(ln U / ln(1 - p)).
        const double p = 1.0 / (mean_iters + 1.0);
        rng r{0xC0FFEEull + mean_ns};
        double sum = 0;
        for (auto& v : t.iters) {
            double k = std::floor(std::log(r.unit_open()) / std::log1p(-p));
            v = static_cast<std::uint32_t>(std::min(k, 1e9));
            sum += v;
        }
        t.actual_mean_ns = sum / work_table_size * g_spin_ns;
    }
    return tables.emplace(mean_ns, std::move(t)).first->second;
}

// One actor's walk through a table.
class work_stream {
public:
    work_stream(const work_table& t, unsigned actor) noexcept : t_(t.iters.data()), i_(actor * 1021u) {}
    void operator()() noexcept { spin(t_[i_++ & (work_table_size - 1)]); }

private:
    const std::uint32_t* t_;
    unsigned i_;
};

// The runners of this program's measure functions: n actors as fibers on
// `workers` spindle workers, or as n OS threads.
struct fiber_runner {
    unsigned workers;
    template <class Body>
    double operator()(int n, Body& body) const {
        return spindle_run(workers, n, body, fiber_stack_bytes);
    }
};
struct thread_runner {
    template <class Body>
    double operator()(int n, Body& body) const {
        return threads_run(static_cast<unsigned>(n), n, body);
    }
};

// A sweep's list from the command line, else the mode's default.
std::vector<unsigned> given_or(const std::vector<unsigned>& given, std::vector<unsigned> otherwise) {
    return given.empty() ? otherwise : given;
}

// The default sweep of permit counts and pool sizes.
std::vector<unsigned> size_sweep(const harness& h) {
    return h.quick() ? std::vector<unsigned>{1, 4, 16} : std::vector<unsigned>{1, 2, 4, 8, 16};
}

// The actor counts of a sweep: --threads, else `quick` in quick mode, else
// from..4x the CPUs, doubling.
std::vector<unsigned> actor_counts(const harness& h, const run_options& o, std::vector<unsigned> quick,
                                   unsigned from) {
    if (!o.actors.empty()) return o.actors;
    if (h.quick()) return quick;
    std::vector<unsigned> v;
    for (unsigned t = from; t <= 4 * g_cpus; t *= 2) v.push_back(t);
    return v;
}

// How long a measurement runs. Every measurement runs for about g_target_ns
// rather than for a fixed count: actor 0 (the latch's coordinator) looks at
// the clock every few operations and, once its own start + g_target_ns has
// passed, tells the others to stop at a common point. The metric divides by
// what was done. On a shared machine a fixed count does not work: the same
// variant can run 50x slower from one measurement to the next (Boost.Fiber's
// work-stealing threads spin while idle, and lose their CPU to other
// processes), and a count fitted to a fast run then takes seconds.
constexpr long clock_check_every = 16;  // operations between actor 0's clock reads

unsigned fiber_workers(int actors, const run_options& o) {
    unsigned cap = o.max_workers > 0 ? o.max_workers : g_cpus;
    return std::max(1u, std::min(static_cast<unsigned>(actors), cap));
}

// Notes say the same for every point of a sweep, so a report prints each once.
// fibers_note("party", "parties", o): "one fiber per party on min(parties, 2)
// spindle workers, 64 KiB stacks".
std::string fibers_note(const char* per, const char* count_param, const run_options& o) {
    const unsigned cap = o.max_workers > 0 ? o.max_workers : g_cpus;
    return std::string("one fiber per ") + per + " on min(" + count_param + ", " + std::to_string(cap) +
           ") spindle workers, 64 KiB stacks";
}

std::string threads_note(const char* per) { return std::string("one OS thread per ") + per; }

std::string work_note(const work_table& w) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "; work between operations: geometric, mean %u ns (table mean %.0f ns)",
                  w.mean_ns, w.actual_mean_ns);
    return buf;
}

// ---------------------------------------------------------------------------
// barrier

struct phase_counter {
    long* n;
    void operator()() noexcept { ++*n; }  // runs once per phase, ordered by the barrier
};

struct barrier_setup {
    int parties;
    unsigned workers;
    const work_table* work;
};

// One party: { work; arrive and wait } until the phase party 0 names as the
// last. Party 0 stores that phase's index before it arrives at it; the
// others read it after the phase completes, which the barrier orders after
// the store (relaxed is enough). Returns the phases done (the same for all).
template <class ArriveAndWait>
long barrier_party(int k, const barrier_setup& c, std::atomic<long>& last, ArriveAndWait arrive_and_wait) {
    work_stream ws(*c.work, static_cast<unsigned>(k));
    const double deadline = k == 0 ? now_ns() + g_target_ns : 0;
    for (long i = 0;; ++i) {
        ws();
        if (k == 0 && i % clock_check_every == 0 && now_ns() >= deadline) last.store(i, std::memory_order_relaxed);
        arrive_and_wait();
        if (i >= last.load(std::memory_order_relaxed)) return i + 1;
    }
}

// {wall ns, phases} of one measurement of `Barrier`, whose arrive_and_wait
// is `aw(b)`, on the runner `run`.
struct barrier_result {
    double ns;
    long phases;
};

void check_phases(const char* who, long counted, long want) {
    if (counted != want) fail("barrier/%s: %ld phases completed, expected %ld", who, counted, want);
}

template <class Run, class Wait>
barrier_result barrier_measure(const barrier_setup& c, Run run, Wait wait_one, const char* who) {
    std::atomic<long> last{std::numeric_limits<long>::max()};
    std::vector<long> done(static_cast<std::size_t>(c.parties), 0);
    auto body = [&](int k) { done[static_cast<std::size_t>(k)] = barrier_party(k, c, last, [&] { wait_one(); }); };
    double ns = run(c.parties, body);
    for (long d : done)
        if (d != done[0]) fail("barrier/%s: parties disagree on the phases done (%ld, %ld)", who, d, done[0]);
    return {ns, done[0]};
}

double barrier_spindle(const barrier_setup& c, bool fibers) {
    long completions = 0;
    spindle::barrier<phase_counter> b(c.parties, phase_counter{&completions});
    const fiber_runner on_fibers{c.workers};
    const thread_runner on_threads;
    const char* who = fibers ? "spindle_fiber" : "spindle_thread";
    auto wait = [&] { b.arrive_and_wait(); };
    barrier_result r = fibers ? barrier_measure(c, on_fibers, wait, who) : barrier_measure(c, on_threads, wait, who);
    check_phases(who, completions, r.phases);
    return r.ns / static_cast<double>(r.phases);
}

double barrier_std(const barrier_setup& c) {
    long completions = 0;
    std::barrier<phase_counter> b(c.parties, phase_counter{&completions});
    const thread_runner on_threads;
    barrier_result r = barrier_measure(c, on_threads, [&] { b.arrive_and_wait(); }, "std_barrier");
    check_phases("std_barrier", completions, r.phases);
    return r.ns / static_cast<double>(r.phases);
}

double barrier_pthread(const barrier_setup& c) {
    pthread_barrier_t b;
    if (pthread_barrier_init(&b, nullptr, static_cast<unsigned>(c.parties)) != 0) fail("pthread_barrier_init failed");
    std::atomic<long> serial{0};
    const thread_runner on_threads;
    barrier_result r = barrier_measure(
        c, on_threads,
        [&] {
            if (pthread_barrier_wait(&b) == PTHREAD_BARRIER_SERIAL_THREAD)
                serial.fetch_add(1, std::memory_order_relaxed);  // a count, read after the joins
        },
        "pthread");
    pthread_barrier_destroy(&b);
    check_phases("pthread", serial.load(std::memory_order_relaxed), r.phases);
    return r.ns / static_cast<double>(r.phases);
}

double barrier_boost(const barrier_setup& c) {
    std::vector<double> v = in_child("boost_fiber", [&] {
        bf::barrier b(static_cast<std::size_t>(c.parties));
        std::atomic<long> serial{0};
        auto on_boost = [w = c.workers](int n, auto& body) { return boost_run(w, n, body, fiber_stack_bytes); };
        barrier_result r = barrier_measure(
            c, on_boost,
            [&] {
                if (b.wait()) serial.fetch_add(1, std::memory_order_relaxed);  // a count, read after the run
            },
            "boost_fiber");
        check_phases("boost_fiber", serial.load(std::memory_order_relaxed), r.phases);
        return std::vector<double>{r.ns / static_cast<double>(r.phases)};
    });
    if (v.size() != 1) fail("boost_fiber: child sent %zu values", v.size());
    return v[0];
}

void bench_barrier(harness& h, const run_options& o) {
    const std::vector<unsigned> ps = actor_counts(h, o, {2, 4, 8}, 2);
    const std::vector<unsigned> works =
        given_or(o.work_ns, h.quick() ? std::vector<unsigned>{200} : std::vector<unsigned>{100, 1000});
    for (unsigned work : works) {
        const work_table& wt = work_for(work);
        for (unsigned p : ps) {
            if (p < 2) continue;  // one party never waits
            barrier_setup c{static_cast<int>(p), fiber_workers(static_cast<int>(p), o), &wt};
            std::vector<variant> vs;
            vs.push_back(variant("spindle_fiber", [c] { return barrier_spindle(c, true); }, true,
                                 "spindle::barrier; " + fibers_note("party", "parties", o) + work_note(wt)));
            vs.push_back(variant("spindle_thread", [c] { return barrier_spindle(c, false); }, false,
                                 "spindle::barrier; " + threads_note("party")));
            vs.push_back(variant("std_barrier", [c] { return barrier_std(c); }, false,
                                 "std::barrier (libstdc++); " + threads_note("party"), "spindle_thread"));
            vs.push_back(variant("pthread", [c] { return barrier_pthread(c); }, false,
                                 "pthread_barrier_t (glibc); " + threads_note("party"), "spindle_thread"));
            vs.push_back(variant(
                "boost_fiber", [c] { return barrier_boost(c); }, false,
                "boost::fibers::barrier; one fiber per party on algo::work_stealing over as many threads as "
                "spindle_fiber has workers (algo::round_robin when that is 1), 64 KiB fixedsize stacks; one forked "
                "child per measurement",
                "spindle_fiber"));
            vs = selected(std::move(vs));
            if (vs.empty()) continue;
            h.compare("barrier", {{"parties", static_cast<int>(p)}, {"work_ns", work}}, {"ns_per_phase", false}, vs);
        }
    }
}

// ---------------------------------------------------------------------------
// latch

struct latch_setup {
    int actors;  // count-down actors; the coordinator comes on top
    int count;   // count-downs per round
    unsigned workers;
    const work_table* work;
};

// Latches are used once, so a measurement builds them all before the clock
// starts: as many rounds as `rounds_cap`, which each variant keeps at four
// times what its previous measurement did (the deadline normally ends the
// run first).
constexpr long latch_first_cap = 4096;
constexpr long latch_max_cap = 1L << 20;

// One measurement of fork-join rounds with latches of type L (make(n) builds
// one of count n) on the runner `run`; ns per round. Updates rounds_cap.
template <class L, class Make, class Run>
double latch_rounds(const latch_setup& c, long& rounds_cap, Make make, Run run, const char* who) {
    const long cap = rounds_cap;
    std::vector<std::unique_ptr<L>> start, done;
    start.reserve(static_cast<std::size_t>(cap));
    done.reserve(static_cast<std::size_t>(cap));
    for (long r = 0; r < cap; ++r) {
        start.push_back(make(1));
        done.push_back(make(c.count));
    }
    // The coordinator stores the last round's index before it opens that
    // round's start latch; the actors read it after that latch opened.
    std::atomic<long> last{std::numeric_limits<long>::max()};
    long rounds = 0;
    auto body = [&](int k) {
        if (k == c.actors) {  // the coordinator: the one waiter of each done latch
            const double deadline = now_ns() + g_target_ns;
            for (long r = 0;; ++r) {
                const bool final_round = r + 1 == cap || now_ns() >= deadline;
                if (final_round) last.store(r, std::memory_order_relaxed);
                start[static_cast<std::size_t>(r)]->count_down();
                done[static_cast<std::size_t>(r)]->wait();
                if (!done[static_cast<std::size_t>(r)]->try_wait()) fail("latch/%s: wait() returned on a closed latch", who);
                if (final_round) {
                    rounds = r + 1;  // read after the joins
                    return;
                }
            }
        }
        work_stream ws(*c.work, static_cast<unsigned>(k));
        for (long r = 0;; ++r) {
            start[static_cast<std::size_t>(r)]->wait();
            L& d = *done[static_cast<std::size_t>(r)];
            for (int j = k; j < c.count; j += c.actors) {
                ws();
                d.count_down();
            }
            if (r >= last.load(std::memory_order_relaxed)) return;
        }
    };
    double ns = run(c.actors + 1, body);
    if (rounds < 1) fail("latch/%s: the coordinator did not finish", who);
    rounds_cap = std::clamp(4 * rounds, 64L, latch_max_cap);
    return ns / static_cast<double>(rounds);
}

void bench_latch(harness& h, const run_options& o) {
    const std::vector<unsigned> ts = actor_counts(h, o, {1, 2, 4}, 1);
    const std::vector<unsigned> works = given_or(o.work_ns, {200});
    std::vector<int> counts = h.quick() ? std::vector<int>{64} : std::vector<int>{64, 1024};
    for (unsigned work : works)
        for (int count : counts)
            for (unsigned t : ts) {
                const work_table& wt = work_for(work);
                latch_setup c{static_cast<int>(t), count, fiber_workers(static_cast<int>(t), o), &wt};
                auto spindle_make = [](std::ptrdiff_t n) { return std::make_unique<spindle::latch>(n); };
                auto std_make = [](std::ptrdiff_t n) { return std::make_unique<std::latch>(n); };
                const fiber_runner on_fibers{c.workers};
                const thread_runner on_threads;
                // Each variant's rounds cap, kept between its measurements.
                auto cap = [] { return std::make_shared<long>(latch_first_cap); };
                const std::string shape = "threads = count-down actors; ";
                std::vector<variant> vs;
                vs.push_back(variant(
                    "spindle_fiber",
                    [=, n = cap()] {
                        return latch_rounds<spindle::latch>(c, *n, spindle_make, on_fibers, "spindle_fiber");
                    },
                    true,
                    "spindle::latch; " + shape + fibers_note("actor and one for the coordinator", "threads", o) +
                        work_note(wt)));
                vs.push_back(variant(
                    "spindle_thread",
                    [=, n = cap()] {
                        return latch_rounds<spindle::latch>(c, *n, spindle_make, on_threads, "spindle_thread");
                    },
                    false, "spindle::latch; " + shape + threads_note("actor") + ", plus the coordinator's"));
                vs.push_back(variant(
                    "std_latch",
                    [=, n = cap()] { return latch_rounds<std::latch>(c, *n, std_make, on_threads, "std_latch"); },
                    false, "std::latch (libstdc++); " + shape + threads_note("actor") + ", plus the coordinator's",
                    "spindle_thread"));
                vs = selected(std::move(vs));
                if (vs.empty()) continue;
                h.compare("latch", {{"threads", t}, {"count", count}, {"work_ns", work}}, {"ns_per_round", false},
                          vs);
            }
}

// ---------------------------------------------------------------------------
// semaphore

struct sem_setup {
    int actors;
    int permits;
    unsigned workers;
    const work_table* work;
};

// A measurement's end, set by the first actor to start (now + g_target_ns);
// every actor reads the clock against it.
struct shared_deadline {
    std::atomic<double> at{0};  // 0 until the first actor starts
    double join() noexcept {
        const double mine = now_ns() + g_target_ns;
        double end = 0;  // on failure: the deadline set first
        // relaxed: one RMW decides the value; it orders nothing else.
        if (at.compare_exchange_strong(end, mine, std::memory_order_relaxed)) end = mine;
        return end;
    }
};

// One measurement: every actor runs { work; acquire; work; release } until
// one of them, past the deadline, raises `stop` (relaxed: it only ends the
// loop; the joins order the counts). Every actor watches the clock, against
// the deadline the first to start set: with permits >= actors a fiber never
// waits and never yields, so actor 0 alone might never run. Returns
// acquisitions per second.
template <class Sem, class Run>
double sem_run(const sem_setup& c, Sem& s, Run run, const char* who) {
    long inside = 0;  // K = 1 only: a lost update means mutual exclusion failed
    const bool exclusive = c.permits == 1;
    std::atomic<bool> stop{false};
    shared_deadline deadline;
    std::vector<long> ops(static_cast<std::size_t>(c.actors), 0);
    auto body = [&](int k) {
        work_stream ws(*c.work, static_cast<unsigned>(k));
        const double end = deadline.join();
        long n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            ws();
            s.acquire();
            if (exclusive) ++inside;
            ws();
            s.release();
            ++n;
            if (n % clock_check_every == 0 && now_ns() >= end) stop.store(true, std::memory_order_relaxed);
        }
        ops[static_cast<std::size_t>(k)] = n;
    };
    double ns = run(c.actors, body);
    long total = 0;
    for (long n : ops) total += n;
    if (exclusive && inside != total)
        fail("semaphore/%s: %ld acquisitions counted under one permit, expected %ld", who, inside, total);
    return static_cast<double>(total) / (ns * 1e-9);
}

void bench_semaphore(harness& h, const run_options& o) {
    const std::vector<unsigned> ts = actor_counts(h, o, {1, 2, 4, 8}, 1);
    const std::vector<unsigned> ks = given_or(o.permits, size_sweep(h));
    const std::vector<unsigned> works = given_or(o.work_ns, {200});
    for (unsigned work : works)
        for (unsigned k : ks)
            for (unsigned t : ts) {
                const work_table& wt = work_for(work);
                sem_setup c{static_cast<int>(t), static_cast<int>(k), fiber_workers(static_cast<int>(t), o), &wt};
                const fiber_runner on_fibers{c.workers};
                const thread_runner on_threads;
                std::vector<variant> vs;
                vs.push_back(variant(
                    "spindle_fiber",
                    [=] {
                        spindle::counting_semaphore<> s(k);
                        return sem_run(c, s, on_fibers, "spindle_fiber");
                    },
                    true, "spindle::counting_semaphore; " + fibers_note("acquirer", "threads", o) + work_note(wt)));
                vs.push_back(variant(
                    "spindle_fiber_dispatch",
                    [=] {
                        spindle::counting_semaphore<> s(k, spindle::handoff::dispatch);
                        return sem_run(c, s, on_fibers, "spindle_fiber_dispatch");
                    },
                    false,
                    "spindle::counting_semaphore with handoff::dispatch (a woken acquirer goes back to the "
                    "ready queue of its own worker; the releaser carries on); " +
                        fibers_note("acquirer", "threads", o),
                    "spindle_fiber"));
                vs.push_back(variant(
                    "spindle_thread",
                    [=] {
                        spindle::counting_semaphore<> s(k);
                        return sem_run(c, s, on_threads, "spindle_thread");
                    },
                    false, "spindle::counting_semaphore; " + threads_note("acquirer")));
                vs.push_back(variant(
                    "std_counting_semaphore",
                    [=] {
                        std::counting_semaphore<> s(k);
                        return sem_run(c, s, on_threads, "std_counting_semaphore");
                    },
                    false,
                    "std::counting_semaphore (libstdc++: atomic word, futex wait, not fair); " +
                        threads_note("acquirer"),
                    "spindle_thread"));
                vs.push_back(variant(
                    "spinlock_queue",
                    [=] {
                        spindle::bench::spinlock_queue_semaphore s(k);
                        return sem_run(c, s, on_fibers, "spinlock_queue");
                    },
                    false,
                    "fair semaphore, count + intrusive FIFO under a spinlock, same parking "
                    "(spinlock_queue_semaphore.hpp); " +
                        fibers_note("acquirer", "threads", o),
                    "spindle_fiber"));
                vs.push_back(variant(
                    "spinlock_queue_thread",
                    [=] {
                        spindle::bench::spinlock_queue_semaphore s(k);
                        return sem_run(c, s, on_threads, "spinlock_queue_thread");
                    },
                    false, "the spinlock-queue semaphore; " + threads_note("acquirer"), "spindle_thread"));
                vs = selected(std::move(vs));
                if (vs.empty()) continue;
                h.compare("semaphore", {{"permits", k}, {"threads", t}, {"work_ns", work}}, {"ops_per_s", true},
                          vs);
            }
}

// ---------------------------------------------------------------------------
// abort

struct unit {};

// The three queues of the abort workload, each with no waiter or with Q.
struct abort_queues {
    spindle::detail::cqs<unit> simple{spindle::detail::cqs_cancellation::simple};
    spindle::counting_semaphore<> smart{0};
    spindle::bench::linear_removal_semaphore linear{0};
};

enum class abort_kind { simple, smart, linear };

// Q waiters parked on each queue of `loaded`, fibers on one worker; `empty`
// has the same queues with nobody waiting, measured alongside in the same
// rounds so that background load cancels out of the growth ratio.
class abort_rig {
public:
    // with_linear: queue waiters on the linear queue too.
    abort_rig(long q, bool with_linear)
        : q_(q),
          with_linear_(with_linear && variant_wanted("linear_removal")),
          sched_(spindle::scheduler::options{.workers = 1, .stack_size = queued_stack_bytes}) {
        stop_.request_stop();
        waiters_.reserve(static_cast<std::size_t>(3 * q));
        for (long i = 0; i < q; ++i) {
            if (variant_wanted("spindle_simple"))
                waiters_.push_back(sched_.spawn([this] {
                    queued_.fetch_add(1, std::memory_order_relaxed);
                    auto r = loaded_.simple.suspend();
                    if (r.status != spindle::detail::cqs_status::resumed) fail("abort: a queued cqs waiter was not resumed");
                }));
            if (variant_wanted("spindle_smart"))
                waiters_.push_back(sched_.spawn([this] {
                    queued_.fetch_add(1, std::memory_order_relaxed);
                    loaded_.smart.acquire();
                }));
            if (with_linear_)
                waiters_.push_back(sched_.spawn([this] {
                    queued_.fetch_add(1, std::memory_order_relaxed);
                    loaded_.linear.acquire();
                }));
        }
        // Every waiter counts itself just before it waits; on one worker the
        // last one to count runs on until it parks, so a fiber spawned after
        // the count is complete runs after every waiter has parked.
        const long want = static_cast<long>(waiters_.size());
        while (queued_.load(std::memory_order_relaxed) != want) std::this_thread::sleep_for(std::chrono::microseconds(200));
        sched_.spawn([] {}).join();
        if (variant_wanted("spindle_smart") && loaded_.smart.debug_count() != -q)
            fail("abort: counting_semaphore counts %lld waiters, expected %ld",
                 static_cast<long long>(-loaded_.smart.debug_count()), q);
    }

    ~abort_rig() {
        const bool simple = variant_wanted("spindle_simple"), smart = variant_wanted("spindle_smart"),
                   linear = with_linear_;
        for (long i = 0; i < q_; ++i) {
            if (simple && !loaded_.simple.resume(unit{})) fail("abort: resume of a queued cqs waiter failed");
            if (linear) loaded_.linear.release();
        }
        if (smart) loaded_.smart.release(q_);
        for (auto& f : waiters_) f.join();
    }
    abort_rig(const abort_rig&) = delete;
    abort_rig& operator=(const abort_rig&) = delete;

    // One suspend + cancellation (see the header essay), on the loaded
    // queue or its empty twin.
    void abort_once(abort_kind k, bool loaded) {
        abort_queues& a = loaded ? loaded_ : empty_;
        switch (k) {
        case abort_kind::simple: {
            std::stop_token st = stop_.get_token();
            auto r = a.simple.suspend(spindle::detail::no_deadline, &st);
            if (r.status != spindle::detail::cqs_status::cancelled)
                fail("abort/spindle_simple: a stopped wait was not cancelled");
            break;
        }
        case abort_kind::smart:
            if (a.smart.acquire(stop_.get_token())) fail("abort/spindle_smart: a stopped acquire got a permit");
            break;
        case abort_kind::linear:
            if (a.linear.acquire(stop_.get_token())) fail("abort/linear_removal: a stopped acquire got a permit");
            break;
        }
    }

    // Run fn() on this thread, or in a fiber on the waiters' worker.
    template <class Fn>
    auto on_waiter(bool in_fiber, Fn fn) -> decltype(fn()) {
        if (!in_fiber) return fn();
        decltype(fn()) r{};
        sched_.spawn([&] { r = fn(); }).join();
        return r;
    }

private:
    long q_;
    bool with_linear_;
    spindle::scheduler sched_;
    abort_queues loaded_;
    abort_queues empty_;
    std::stop_source stop_;
    std::atomic<long> queued_{0};
    std::vector<spindle::fiber> waiters_;
};

// Time `kind` on the loaded queue and on the empty one, alternating batches
// of 1, 2, 4, ... 32 calls, until a third of the measurement target has
// passed: {median ns per call loaded, median ns per call empty} over the
// batches. Alternating at this grain puts the same background load on
// both; the median, not the total, drops the batches during which another
// process had the CPU (on a shared machine a few milliseconds of someone
// else's time slice would otherwise land on whichever batch it hit).
std::pair<double, double> time_aborts(abort_rig& rig, abort_kind kind) {
    const double target = g_target_ns / 3;
    std::vector<double> loaded, empty;
    long n = 1;
    const double t0 = now_ns();
    do {
        const double a = now_ns();
        for (long i = 0; i < n; ++i) rig.abort_once(kind, true);
        const double b = now_ns();
        for (long i = 0; i < n; ++i) rig.abort_once(kind, false);
        const double c = now_ns();
        loaded.push_back((b - a) / static_cast<double>(n));
        empty.push_back((c - b) / static_cast<double>(n));
        n = std::min(2 * n, 32L);
    } while (now_ns() - t0 < target);
    return {harness::summarize("", loaded).median, harness::summarize("", empty).median};
}

void bench_abort(harness& h, const run_options& o) {
    std::vector<unsigned> qs = given_or(o.queued, {0, 10, 100, 1000, 10000, 100000});
    std::sort(qs.begin(), qs.end());
    std::vector<const char*> waiters;
    if (g_abort_waiter != "fiber") waiters.push_back("thread");
    if (g_abort_waiter != "thread") waiters.push_back("fiber");
    const std::string queued_note = "; the queued waiters are parked fibers on 1 worker, 16 KiB stacks";
    const int reps = h.reps(11, 15);  // cheap points: more rounds against noise
    const char* names[] = {"spindle_simple", "spindle_smart", "linear_removal"};
    const abort_kind kinds[] = {abort_kind::simple, abort_kind::smart, abort_kind::linear};
    const std::string what[] = {
        "detail::cqs<unit>(cqs_cancellation::simple), suspend(no_deadline, &stop_token)",
        "spindle::counting_semaphore (smart cancellation), acquire(stop_token)",
        "linear_removal_semaphore.hpp: singly linked FIFO under a spinlock, a cancelled node is unlinked by a "
        "scan from the head; acquire(stop_token)",
    };
    // Medians per (waiter, variant) and queue length, for the target lines.
    std::map<std::string, std::vector<std::pair<unsigned, double>>> medians;
    // --quick measures the linear queue up to 10 000 waiters only: beyond, one
    // of its aborts walks 100 000 stacks (tens of ms), and its waiters add a
    // third to the set-up time of the longest queue.
    const unsigned linear_max = h.quick() ? 10000 : ~0u;
    for (unsigned q : qs) {
        const bool with_linear = q <= linear_max;
        double t0 = now_ns();
        abort_rig rig(q, with_linear);
        std::fprintf(stderr, "  (abort: %u waiters queued on each primitive in %.0f ms)\n", q, (now_ns() - t0) / 1e6);
        for (const char* waiter : waiters) {
            const bool from_fiber = std::string(waiter) == "fiber";
            const std::string how =
                from_fiber ? "; the waiter under test is a fiber on the queued waiters' worker, its stop requested "
                             "before it calls: it enqueues, finds itself claimed and runs the cancellation itself, "
                             "without parking"
                           : "; the waiter under test is an OS thread, its stop requested before it calls: it "
                             "enqueues, finds itself claimed and runs the cancellation itself, without sleeping "
                             "or a system call";
            // Per variant, loaded / empty of every measurement, the warm-up first.
            std::map<std::string, std::vector<double>> growth;
            std::vector<variant> vs;
            for (int i = 0; i < 3; ++i) {
                const std::string name = names[i];
                const abort_kind kind = kinds[i];
                if (kind == abort_kind::linear && !with_linear) continue;
                vs.push_back(variant(
                    name,
                    [&rig, &growth, name, kind, from_fiber] {
                        auto [loaded, empty] = rig.on_waiter(from_fiber, [&] { return time_aborts(rig, kind); });
                        growth[name].push_back(loaded / empty);
                        return loaded;
                    },
                    kind == abort_kind::smart, what[i] + how + queued_note));
            }
            vs = selected(std::move(vs));
            if (vs.empty()) continue;
            const params ps{{"queued", q}, {"waiter", waiter}};
            auto res = h.compare("abort", ps, {"ns_per_op", false}, vs, reps);
            std::map<std::string, const summary*> at_q;
            for (auto& s : res) {
                medians[std::string(waiter) + " " + s.variant].emplace_back(q, s.median);
                at_q[s.variant] = &s;
            }
            // Growth: the same rounds' loaded/empty ratios, warm-up dropped.
            // A variant that was not measured gets a status record (an
            // empty summary: report() names why).
            for (const char* name : names) {
                auto g = growth.find(name);
                auto s = at_q.find(name);
                const bool unmeasured = s != at_q.end() && !s->second->measured();
                if (!unmeasured && (g == growth.end() || g->second.size() < 2)) continue;
                std::vector<double> ratios;
                if (!unmeasured) ratios.assign(g->second.begin() + 1, g->second.end());
                h.report("abort", ps, {"growth_from_empty", false}, harness::summarize(name, ratios),
                         std::string(name) == "spindle_smart",
                         "ns per abort with the queue loaded / on an empty twin of the same primitive, timed in "
                         "alternating batches within each measurement (median of the measurements' ratios); "
                         "target for spindle: <= 1.5 at queued=100000");
            }
            // Speed-up over the linear queue: ratios within each round.
            auto lin = at_q.find("linear_removal");
            if (lin == at_q.end()) continue;
            for (const char* name : {"spindle_simple", "spindle_smart"}) {
                auto it = at_q.find(name);
                if (it == at_q.end()) continue;
                std::vector<double> ratios;
                if (lin->second->measured() && it->second->measured()) {
                    const std::vector<double>& a = lin->second->samples;
                    const std::vector<double>& b = it->second->samples;
                    for (std::size_t r = 0; r < a.size() && r < b.size(); ++r) ratios.push_back(a[r] / b[r]);
                }
                h.report("abort", ps, {"speedup_vs_linear_removal", true}, harness::summarize(name, ratios),
                         std::string(name) == "spindle_smart",
                         "linear_removal's ns per abort / this variant's, round by round (the harness measures "
                         "every variant once per round); target: >= 50 at queued=10000");
            }
        }
    }
    // The issue's targets, spelled out on stderr.
    auto median_at = [&](const std::string& key, unsigned q) -> double {
        auto it = medians.find(key);
        if (it == medians.end()) return 0;
        for (auto& [qq, m] : it->second)
            if (qq == q) return m;
        return 0;
    };
    for (const char* waiter : waiters)
        for (const char* name : {"spindle_simple", "spindle_smart"}) {
            const std::string key = std::string(waiter) + " " + name;
            const double lo = median_at(key, qs.front()), hi = median_at(key, qs.back());
            const double lin = median_at(std::string(waiter) + " linear_removal", 10000);
            const double at10k = median_at(key, 10000);
            if (lo > 0 && hi > 0 && qs.back() != qs.front())
                std::fprintf(stderr, "  abort target (%s waiter), %s: median at queued=%u / at queued=%u = %.2f (<= 1.5)\n",
                             waiter, name, qs.back(), qs.front(), hi / lo);
            if (lin > 0 && at10k > 0)
                std::fprintf(stderr, "  abort target (%s waiter), %s: linear_removal / %s at queued=10000 = %.0f (>= 50)\n",
                             waiter, name, name, lin / at10k);
        }
}

// ---------------------------------------------------------------------------
// pool

// One element's state, on its own cache line (a pooled resource has its own
// memory): `in_use` is exchanged to 1 by the actor that took the element
// and back to 0 before it puts it, so two holders at once are caught;
// `uses` is a plain counter bumped while the element is held, so a lost
// update also shows a broken exclusion.
struct alignas(spindle::arch::cache_line) pool_element {
    std::atomic<std::uint32_t> in_use{0};
    long uses = 0;
};

// The thread competitor: a ring of the pool's size under a std::mutex, with
// a std::condition_variable for takers that find it empty (what a blocking
// queue without a lock-free path looks like: Java's ArrayBlockingQueue is
// the same shape; std::mutex is not fair, so neither is this). put()
// notifies after unlocking, and only when someone waits.
class mutex_cv_queue {
public:
    explicit mutex_cv_queue(std::size_t capacity) : ring_(capacity) {}

    void put(std::uint32_t x) {
        bool wake = false;
        {
            std::lock_guard<std::mutex> lk(m_);
            if (count_ == ring_.size()) fail("pool/mutex_cv_queue: put into a full queue");
            ring_[(head_ + count_) % ring_.size()] = x;
            ++count_;
            wake = waiting_ > 0;
        }
        if (wake) cv_.notify_one();
    }

    std::uint32_t take() {
        std::unique_lock<std::mutex> lk(m_);
        while (count_ == 0) {
            ++waiting_;
            cv_.wait(lk);
            --waiting_;
        }
        return pop();
    }

    std::optional<std::uint32_t> try_take() {
        std::lock_guard<std::mutex> lk(m_);
        if (count_ == 0) return std::nullopt;
        return pop();
    }

private:
    std::uint32_t pop() {
        std::uint32_t x = ring_[head_];
        head_ = (head_ + 1) % ring_.size();
        --count_;
        return x;
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::vector<std::uint32_t> ring_;
    std::size_t head_ = 0, count_ = 0;
    int waiting_ = 0;
};

struct pool_setup {
    int actors;
    int size;  // elements in the pool
    unsigned workers;
    const work_table* work;
};

// One measurement: the pool holds elements 0 .. size-1; every actor runs
// { work; e = take(); work holding e; put(e) } until one of them, past the
// deadline, raises `stop` (relaxed: it only ends the loop; the joins order
// the counts). Then the pool must give back every element exactly once.
// Returns takes per second.
template <class Pool, class Run>
double pool_run(const pool_setup& c, Pool& p, Run run, const char* who) {
    const auto n_elems = static_cast<std::uint32_t>(c.size);
    std::vector<pool_element> elems(n_elems);
    for (std::uint32_t e = 0; e < n_elems; ++e) p.put(e);
    std::atomic<bool> stop{false};
    shared_deadline deadline;
    std::vector<long> ops(static_cast<std::size_t>(c.actors), 0);
    auto body = [&](int k) {
        work_stream ws(*c.work, static_cast<unsigned>(k));
        const double end = deadline.join();
        long n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            ws();
            const std::uint32_t e = p.take();
            if (e >= n_elems) fail("pool/%s: took element %u of a pool of %u", who, e, n_elems);
            pool_element& el = elems[e];
            // relaxed: the pool orders a put before the take that gets its
            // element; these exchanges only have to see each other, which
            // read-modify-writes of one word always do.
            if (el.in_use.exchange(1, std::memory_order_relaxed) != 0)
                fail("pool/%s: element %u taken while another actor holds it", who, e);
            ++el.uses;
            ws();
            if (el.in_use.exchange(0, std::memory_order_relaxed) != 1)
                fail("pool/%s: element %u released by its holder was not marked in use", who, e);
            p.put(e);
            ++n;
            if (n % clock_check_every == 0 && now_ns() >= end) stop.store(true, std::memory_order_relaxed);
        }
        ops[static_cast<std::size_t>(k)] = n;
    };
    const double ns = run(c.actors, body);
    long total = 0;
    for (long n : ops) total += n;
    long uses = 0;
    for (auto& el : elems) uses += el.uses;
    if (uses != total) fail("pool/%s: %ld uses counted on the elements, expected %ld takes", who, uses, total);
    // Every take was matched by a put: the pool holds each element once.
    std::vector<bool> back(n_elems, false);
    for (std::uint32_t i = 0; i < n_elems; ++i) {
        std::optional<std::uint32_t> e = p.try_take();
        if (!e) fail("pool/%s: %u of %u elements came back after the run", who, i, n_elems);
        if (*e >= n_elems || back[*e]) fail("pool/%s: element %u came back twice or is foreign", who, *e);
        if (elems[*e].in_use.load(std::memory_order_relaxed) != 0) fail("pool/%s: element %u still marked in use", who, *e);
        back[*e] = true;
    }
    if (p.try_take()) fail("pool/%s: more than %u elements came back", who, n_elems);
    return static_cast<double>(total) / (ns * 1e-9);
}

void bench_pool(harness& h, const run_options& o) {
    const std::vector<unsigned> ts = actor_counts(h, o, {1, 2, 4, 8}, 1);
    const std::vector<unsigned> sizes = given_or(o.pool_sizes, size_sweep(h));
    const std::vector<unsigned> works = given_or(o.work_ns, {200});
    for (unsigned work : works)
        for (unsigned size : sizes)
            for (unsigned t : ts) {
                const work_table& wt = work_for(work);
                pool_setup c{static_cast<int>(t), static_cast<int>(size), fiber_workers(static_cast<int>(t), o), &wt};
                const fiber_runner on_fibers{c.workers};
                const thread_runner on_threads;
                const std::string elems = "; elements: indices 0 .. pool_size-1, each with its own cache line";
                std::vector<variant> vs;
                vs.push_back(variant(
                    "spindle_queue_pool_fiber",
                    [=] {
                        spindle::queue_pool<std::uint32_t> p(size);
                        return pool_run(c, p, on_fibers, "spindle_queue_pool_fiber");
                    },
                    true,
                    "spindle::queue_pool<uint32_t> (FIFO ring, handoff::ces); " +
                        fibers_note("taker", "threads", o) + work_note(wt) + elems));
                vs.push_back(variant(
                    "spindle_stack_pool_fiber",
                    [=] {
                        spindle::stack_pool<std::uint32_t> p(size);
                        return pool_run(c, p, on_fibers, "spindle_stack_pool_fiber");
                    },
                    false, "spindle::stack_pool<uint32_t> (LIFO Treiber stack, handoff::ces); " +
                               fibers_note("taker", "threads", o)));
                vs.push_back(variant(
                    "spindle_queue_pool_thread",
                    [=] {
                        spindle::queue_pool<std::uint32_t> p(size);
                        return pool_run(c, p, on_threads, "spindle_queue_pool_thread");
                    },
                    false, "spindle::queue_pool<uint32_t>; " + threads_note("taker")));
                vs.push_back(variant(
                    "spindle_stack_pool_thread",
                    [=] {
                        spindle::stack_pool<std::uint32_t> p(size);
                        return pool_run(c, p, on_threads, "spindle_stack_pool_thread");
                    },
                    false, "spindle::stack_pool<uint32_t>; " + threads_note("taker"),
                    "spindle_queue_pool_thread"));
                vs.push_back(variant(
                    "mutex_cv_queue",
                    [=] {
                        mutex_cv_queue p(size);
                        return pool_run(c, p, on_threads, "mutex_cv_queue");
                    },
                    false,
                    "a ring under std::mutex with a std::condition_variable for empty takes (written in this "
                    "program; not fair); " +
                        threads_note("taker"),
                    "spindle_queue_pool_thread"));
                vs = selected(std::move(vs));
                if (vs.empty()) continue;
                h.compare("pool", {{"pool_size", size}, {"threads", t}, {"work_ns", work}}, {"ops_per_s", true},
                          vs);
            }
}

// ---------------------------------------------------------------------------
// hang_freedom (see the header essay)

constexpr int hf_actors = 8;            // actors of every round
constexpr int hf_sem_ops = 8;           // semaphore: acquire + release per actor per round
constexpr int hf_barrier_phases = 4;    // barrier: phases per round
constexpr double hf_sem_cs_ns = 500;    // semaphore: work while holding the permit
constexpr long hf_batch_rounds = 500;   // rounds of one variant in a row (one harness-like "measurement")
constexpr double hf_stall_ms = 300;     // no progress this long, and the state shows a lost wake-up: hung
constexpr double hf_poll_ms = 2;        // the supervisor's look at the actors
// A look that comes late (its process was off the CPU, on a loaded
// machine) adds at most this to the time without progress: what counts is
// time the watcher saw pass, not time nobody ran.
constexpr double hf_late_credit_ms = 50;
constexpr double hf_parent_poll_ms = 100;      // the parent's look at a child
constexpr double hf_silent_margin_ms = 10000;  // a child silent and still this much past the round's budget: killed

// The calling thread's id, cached (gettid is a system call).
__attribute__((noinline)) pid_t hf_tid() {
    thread_local const pid_t tid = gettid();
    return tid;
}

// One actor's state, on a cache line of its own; the actor writes it
// (relaxed: the supervisor reads it only after it has stopped changing for
// hf_stall_ms), the supervisor reads it.
struct alignas(spindle::arch::cache_line) hf_actor {
    std::atomic<long> entered{0};      // blocking calls entered (acquire, wait, arrive_and_wait)
    std::atomic<long> returned{0};     // ... and returned from: entered - returned == 1 inside one
    std::atomic<long> rounds_done{0};  // the batch's rounds it has finished
    std::atomic<long> round{-1};       // the round it is in
    std::atomic<int> holds{0};         // semaphore: 1 while it holds the permit
    std::atomic<pid_t> tid{0};         // the OS thread it entered its last call on (a fiber: its worker)
    bool on_fiber = false;

    // Before blocking call number e.
    void enter(long e) {
        tid.store(hf_tid(), std::memory_order_relaxed);
        entered.store(e, std::memory_order_relaxed);
    }
};

// --hf-test-lose: the caller sleeps for good, as in a call whose wake-up
// was lost: a fiber parks (on a latch nobody opens), a thread blocks.
[[noreturn]] void hf_sleep_forever(bool on_fiber) {
    if (on_fiber) {
        spindle::latch never(1);
        never.wait();
    } else {
        std::mutex m;
        std::condition_variable cv;
        std::unique_lock<std::mutex> lk(m);
        cv.wait(lk, [] { return false; });
    }
    std::abort();
}

// Thread `tid` of this process as /proc has it: its scheduling state ('S'
// sleeping, e.g. in a futex wait; 'R' running or runnable; '?' unknown) and
// the CPU time it has had, in clock ticks.
struct hf_thread_stat {
    char state = '?';
    unsigned long cpu_ticks = 0;
};
hf_thread_stat hf_stat_of(pid_t tid) {
    hf_thread_stat st;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) return st;
    char buf[512];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* p = std::strrchr(buf, ')');  // after "pid (comm)"
    if (p == nullptr || p[1] != ' ' || p[2] == '\0') return st;
    st.state = p[2];
    // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
    unsigned long utime = 0, stime = 0;
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) == 2)
        st.cpu_ticks = utime + stime;
    return st;
}

// The rounds of one batch of one variant: the primitive's objects, actor k's
// part of round r, and what the supervisor can tell about a stalled round.
class hf_batch {
public:
    virtual ~hf_batch() = default;
    // `lose` (--hf-test-lose): the actor's first call of the round loses
    // its wake-up on purpose (hf_sleep_forever where the call would wait).
    virtual void round(int k, long r, hf_actor& a, bool lose) = 0;
    // With every actor that has not finished round r inside the blocking
    // call and asleep: whether the primitive's own state says it should
    // have returned -- a lost wake-up; "" if not. May change the state (the
    // child ends after a hang).
    virtual std::string lost_wakeup(std::vector<hf_actor>& actors, long r, int inside) = 0;
    // "acquire()", "wait()", "arrive_and_wait()".
    virtual const char* call() const = 0;
};

// Semaphore, one permit: per round each actor hf_sem_ops x { acquire; work;
// release }.
template <class Sem>
class hf_sem_batch final : public hf_batch {
public:
    hf_sem_batch() : iters_(static_cast<std::uint32_t>(hf_sem_cs_ns / g_spin_ns)) {}
    void round(int, long, hf_actor& a, bool lose) override {
        long e = a.entered.load(std::memory_order_relaxed);
        for (int i = 0; i < hf_sem_ops; ++i) {
            a.enter(++e);
            if (lose && i == 0) hf_sleep_forever(a.on_fiber);  // as if acquire() were never woken
            s_.acquire();
            a.returned.store(e, std::memory_order_relaxed);
            a.holds.store(1, std::memory_order_relaxed);
            spin(iters_);
            a.holds.store(0, std::memory_order_relaxed);
            s_.release();
        }
    }
    std::string lost_wakeup(std::vector<hf_actor>& actors, long, int inside) override {
        for (auto& a : actors)
            if (a.holds.load(std::memory_order_relaxed) != 0) return "";  // someone holds it: not lost
        if (!s_.try_acquire()) return "";
        char buf[160];
        std::snprintf(buf, sizeof buf, "lost wake-up: the permit was free while %d of %d actors slept in acquire()",
                      inside, static_cast<int>(actors.size()));
        return buf;
    }
    const char* call() const override { return "acquire()"; }

private:
    Sem s_{1};
    std::uint32_t iters_;
};

// Latch: per round each actor arrive_and_wait()s on the round's latch (count
// = the actors); every latch is used once, all built with the batch.
template <class Latch>
class hf_latch_batch final : public hf_batch {
public:
    hf_latch_batch(long r0, long r1, int actors) : r0_(r0) {
        for (long r = r0; r < r1; ++r) latches_.push_back(std::make_unique<Latch>(actors));
    }
    void round(int, long r, hf_actor& a, bool lose) override {
        const long e = a.entered.load(std::memory_order_relaxed) + 1;
        Latch& l = *latches_[static_cast<std::size_t>(r - r0_)];
        a.enter(e);
        if (lose) {  // counted, then as if wait() were never woken
            l.count_down();
            hf_sleep_forever(a.on_fiber);
        }
        l.arrive_and_wait();
        a.returned.store(e, std::memory_order_relaxed);
    }
    std::string lost_wakeup(std::vector<hf_actor>& actors, long r, int inside) override {
        if (!latches_[static_cast<std::size_t>(r - r0_)]->try_wait()) return "";
        char buf[160];
        std::snprintf(buf, sizeof buf, "lost wake-up: the round's latch was open while %d of %d actors slept in wait()",
                      inside, static_cast<int>(actors.size()));
        return buf;
    }
    const char* call() const override { return "wait()"; }

private:
    long r0_;
    std::vector<std::unique_ptr<Latch>> latches_;
};

// The barriers' completion function: counts the phases the barrier itself
// has completed (it runs once every party has arrived, before any is
// released), which is what the supervisor trusts -- an actor's `entered`
// is stored before its call, so it does not prove an arrival.
struct hf_phase_count {
    std::atomic<long>* completed;
    // Relaxed: read by the supervisor (lost_wakeup) after the actors have
    // been still for hf_stall_ms; a stale, smaller value can only make it
    // miss a lost wake-up, never report one that was not.
    void operator()() noexcept { completed->fetch_add(1, std::memory_order_relaxed); }
};

// Barrier: per round each actor arrive_and_wait()s hf_barrier_phases times.
template <template <class> class Barrier>
class hf_barrier_batch final : public hf_batch {
public:
    explicit hf_barrier_batch(int actors) : b_(actors, hf_phase_count{&completed_}) {}
    void round(int, long, hf_actor& a, bool lose) override {
        long e = a.entered.load(std::memory_order_relaxed);
        for (int i = 0; i < hf_barrier_phases; ++i) {
            a.enter(++e);
            if (lose && i == 0) {  // arrived, then as if the wait were never woken
                (void)b_.arrive();
                hf_sleep_forever(a.on_fiber);
            }
            b_.arrive_and_wait();
            a.returned.store(e, std::memory_order_relaxed);
        }
    }
    // An actor inside its phase q (the batch's q-th, from 1) waits for
    // nothing once the barrier has completed q phases.
    std::string lost_wakeup(std::vector<hf_actor>& actors, long, int inside) override {
        const long completed = completed_.load(std::memory_order_relaxed);
        for (auto& a : actors) {
            const long e = a.entered.load(std::memory_order_relaxed);
            if (e != a.returned.load(std::memory_order_relaxed) + 1 || e > completed) continue;
            char buf[200];
            std::snprintf(buf, sizeof buf,
                          "lost wake-up: the barrier had completed the phase while %d of %d parties slept in "
                          "arrive_and_wait()",
                          inside, static_cast<int>(actors.size()));
            return buf;
        }
        return "";
    }
    const char* call() const override { return "arrive_and_wait()"; }

private:
    std::atomic<long> completed_{0};  // before b_, which holds its address
    Barrier<hf_phase_count> b_;
};

// The batches of rounds [r0, r1) of each primitive, for hf_variant::make.
template <class Sem>
std::unique_ptr<hf_batch> hf_make_sem(long, long) {
    return std::make_unique<hf_sem_batch<Sem>>();
}
template <class Latch>
std::unique_ptr<hf_batch> hf_make_latch(long r0, long r1) {
    return std::make_unique<hf_latch_batch<Latch>>(r0, r1, hf_actors);
}
template <template <class> class Barrier>
std::unique_ptr<hf_batch> hf_make_barrier(long, long) {
    return std::make_unique<hf_barrier_batch<Barrier>>(hf_actors);
}

// One competitor of a primitive: how its batch is built and on what its
// actors run.
struct hf_variant {
    std::string name;
    bool fibers;
    std::function<std::unique_ptr<hf_batch>(long r0, long r1)> make;
    std::string what;
};

// What a child tells its parent: a step (batch) done, a round hung, or the
// time budget spent. One write of a fixed size (atomic on a pipe).
struct hf_msg {
    std::int32_t step = 0;
    std::int32_t kind = 0;  // hf_done, hf_hung or hf_out_of_time
    std::int64_t round = 0; // hf_hung: the round (batch-relative: 0 .. hf_batch_rounds-1)
    char reason[240] = {};
};
constexpr std::int32_t hf_done = 0, hf_hung = 1, hf_out_of_time = 2;

// What a child shows its parent while it runs, in memory they share (an
// anonymous shared mapping, made before the fork): where it is, and that it
// is alive. The parent reads it to tell a slow child from a stuck one, and
// to count the rounds a child it had to kill had finished.
// Orders: the parent's accesses are relaxed. Watching, it only compares
// one look's values with the next for a change, and orders nothing by
// them; counting, it reads them after it has reaped the child, and the
// child's end orders all the child wrote before it. The parent's stores
// before a fork are ordered by the fork. `open` is also the actors' gate in
// the child: its release stores pair with the actors' acquire loads (see
// hf_child); `step` and `beats` are the child's relaxed stores, read only
// by the parent as above.
struct hf_shared {
    std::atomic<long> step{0};   // the step (batch) the child is in
    std::atomic<long> open{0};   // that batch's gate: rounds < open - 1 are finished; 0 between batches
    std::atomic<long> beats{0};  // the supervisor's looks at the actors
};
static_assert(std::atomic<long>::is_always_lock_free, "hf_shared is shared between processes");

struct hf_plan {
    std::vector<hf_variant> variants;
    long batches_per_variant = 1;
    double deadline_ns = 0;  // no cycle of batches but the first starts after this
    double round_ms = 0;     // a round's budget
    std::string test_stall_variant;  // test only (--hf-test-stall, --hf-test-lose, --hf-test-freeze)
    long test_stall_round = -1;
    std::string test_lose_variant;
    long test_lose_round = -1;
    std::string test_freeze_variant;
    long test_freeze_round = -1;
};

// Step s: batch s / V of variant order[(s % V + s / V) % V] -- one batch of
// each variant per cycle, each cycle starting one variant further on.
std::size_t hf_step_variant(const hf_plan& p, long step) {
    const long v = static_cast<long>(p.variants.size());
    return static_cast<std::size_t>((step % v + step / v) % v);
}

// In the child: runs the steps from `step` (from round `first` of its
// batch) and reports each to `fd`; _exits after a hang, at the time budget
// or at the end. Every round of a batch runs on the actors of the batch;
// between rounds, a spinning gate (it cannot lose a wake-up; it lives in
// `sh`, where the parent sees it): the last actor to finish round r opens
// round r + 1.
[[noreturn]] void hf_child(const hf_plan& p, long step, long first, int fd, hf_shared& sh) {
    auto send = [fd](const hf_msg& m) {
        if (write(fd, &m, sizeof m) != static_cast<ssize_t>(sizeof m)) _exit(3);
    };
    const long steps = p.batches_per_variant * static_cast<long>(p.variants.size());
    for (; step < steps; ++step, first = 0) {
        // The first cycle always starts: how soon a child gets to run on a
        // loaded machine must not decide whether a variant has rounds.
        if (step > 0 && step % static_cast<long>(p.variants.size()) == 0 && first == 0 &&
            now_ns() > p.deadline_ns) {
            hf_msg m;
            m.step = static_cast<std::int32_t>(step);
            m.kind = hf_out_of_time;
            send(m);
            _exit(0);
        }
        const hf_variant& v = p.variants[hf_step_variant(p, step)];
        const long r0 = first, r1 = hf_batch_rounds;
        sh.open.store(0, std::memory_order_relaxed);  // relaxed: no actor runs yet; the parent: hf_shared
        sh.step.store(step, std::memory_order_relaxed);
        std::unique_ptr<hf_batch> batch = v.make(r0, r1);
        std::vector<hf_actor> actors(hf_actors);
        for (auto& a : actors) a.on_fiber = v.fibers;
        std::atomic<long>& open = sh.open;  // round r may start once open > r
        open.store(r0 + 1, std::memory_order_release);
        std::atomic<long> finished{0};   // actor-rounds finished in this child
        const bool stall_here = v.name == p.test_stall_variant;
        const bool lose_here = v.name == p.test_lose_variant;
        const bool freeze_here = v.name == p.test_freeze_variant;
        auto body = [&](int k) {
            hf_actor& a = actors[static_cast<std::size_t>(k)];
            if (!v.fibers) a.tid.store(hf_tid(), std::memory_order_relaxed);
            for (long r = r0; r < r1; ++r) {
                while (open.load(std::memory_order_acquire) <= r) {
                    if (v.fibers) spindle::this_fiber::yield();
                    else std::this_thread::yield();
                }
                a.round.store(r, std::memory_order_relaxed);
                if (k == 0 && freeze_here && r == p.test_freeze_round)  // --hf-test-freeze: the child stops
                    kill(getpid(), SIGSTOP);
                if (k == 0 && stall_here && r == p.test_stall_round) {  // --hf-test-stall: never returns
                    std::mutex m;
                    std::condition_variable cv;
                    std::unique_lock<std::mutex> lk(m);
                    cv.wait(lk, [] { return false; });
                }
                batch->round(k, r, a, k == 0 && lose_here && r == p.test_lose_round);
                a.rounds_done.store(r - r0 + 1, std::memory_order_relaxed);
                if (finished.fetch_add(1, std::memory_order_acq_rel) + 1 == (r - r0 + 1) * hf_actors)
                    open.store(r + 2, std::memory_order_release);
            }
        };
        std::atomic<bool> batch_over{false};
        const unsigned workers = std::max(1u, std::min(static_cast<unsigned>(hf_actors), g_cpus));
        std::thread runner([&] {
            if (v.fibers) spindle_run(workers, hf_actors, body, fiber_stack_bytes);
            else threads_run(hf_actors, hf_actors, body);
            batch_over.store(true, std::memory_order_release);
        });
        // Supervise: progress is any change of the actors' counters. The
        // time without it counts what this thread saw pass: a look that
        // comes late adds hf_late_credit_ms at most, so a child that was off
        // the CPU as a whole is not judged on the time nobody ran.
        auto progress = [&] {
            long sum = open.load(std::memory_order_relaxed);
            for (auto& a : actors)
                sum += a.entered.load(std::memory_order_relaxed) + a.returned.load(std::memory_order_relaxed) +
                       a.rounds_done.load(std::memory_order_relaxed);
            return sum;
        };
        long last = progress();
        double stalled_ns = 0, last_look = now_ns();
        std::vector<unsigned long> cpu_at_stall(hf_actors, 0);  // each actor's thread's CPU time then
        while (!batch_over.load(std::memory_order_acquire)) {
            std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(hf_poll_ms * 1000)));
            sh.beats.fetch_add(1, std::memory_order_relaxed);  // relaxed: a sign of life (hf_shared)
            const double t = now_ns();
            const double gap = t - last_look;
            last_look = t;
            const long now_progress = progress();
            if (now_progress != last) {
                last = now_progress;
                stalled_ns = 0;
                continue;
            }
            if (stalled_ns == 0)
                for (std::size_t k = 0; k < actors.size(); ++k)
                    cpu_at_stall[k] = hf_stat_of(actors[k].tid.load(std::memory_order_relaxed)).cpu_ticks;
            stalled_ns += std::min(gap, hf_late_credit_ms * 1e6);
            // Threads are looked at after hf_stall_ms: /proc shows whether
            // they sleep. Fibers only after the round's budget: a fiber
            // woken but waiting for a worker that another process has
            // taken off its CPU looks, from here, like one asleep.
            const double stalled_ms = stalled_ns / 1e6;
            if (stalled_ms < (v.fibers ? p.round_ms : hf_stall_ms)) continue;
            // Stalled: the round that is open and not finished.
            const long r = open.load(std::memory_order_acquire) - 1;
            int inside = 0, asleep = 0, unfinished = 0;
            for (std::size_t k = 0; k < actors.size(); ++k) {
                hf_actor& a = actors[k];
                if (a.rounds_done.load(std::memory_order_relaxed) > r - r0) continue;
                ++unfinished;
                if (a.entered.load(std::memory_order_relaxed) != a.returned.load(std::memory_order_relaxed) + 1)
                    continue;
                ++inside;
                // Asleep: a thread sleeping in the kernel. A fiber is parked
                // when the worker it entered on sleeps, or has run since the
                // stall began (it would have run this fiber, were it still
                // there and runnable); a worker that is runnable and has not
                // run may hold the fiber short of its call.
                const hf_thread_stat st = hf_stat_of(a.tid.load(std::memory_order_relaxed));
                if (st.state == 'S' || (v.fibers && st.cpu_ticks > cpu_at_stall[k])) ++asleep;
            }
            std::string why;
            // A lost wake-up only where every actor still in the round
            // waits in the primitive asleep: then nobody is left to wake
            // them.
            if (unfinished > 0 && inside == unfinished && asleep == inside) why = batch->lost_wakeup(actors, r, inside);
            if (why.empty() && stalled_ms < p.round_ms) continue;
            if (why.empty()) {
                char buf[200];
                std::snprintf(buf, sizeof buf, "no progress within the round's budget: %d of %d actors had not "
                              "finished the round, %d of them inside %s, %d asleep", unfinished, hf_actors, inside,
                              batch->call(), asleep);
                why = buf;
            }
            hf_msg m;
            m.step = static_cast<std::int32_t>(step);
            m.kind = hf_hung;
            m.round = r;
            std::snprintf(m.reason, sizeof m.reason, "%s", why.c_str());
            send(m);
            _exit(0);  // the hung actors go with the process
        }
        runner.join();
        hf_msg m;
        m.step = static_cast<std::int32_t>(step);
        m.kind = hf_done;
        send(m);
    }
    _exit(0);
}

// Per variant: rounds attempted, finished, hung, and why (reason -> count).
struct hf_tally {
    long attempted = 0, finished = 0, hung = 0;
    std::map<std::string, int> reasons;
};

// Runs the plan in children: one runs the steps until a round hangs, the
// next goes on from the round after it. The parent never runs a round.
std::vector<hf_tally> hf_run(const hf_plan& p) {
    std::vector<hf_tally> tally(p.variants.size());
    const long steps = p.batches_per_variant * static_cast<long>(p.variants.size());
    long step = 0, first = 0;
    // A child whose supervisor is stuck (not its actors: the supervisor
    // reports those) shows no change in `sh` -- no look, no round -- for
    // this long: it is killed, and the rounds it had finished are counted.
    const double silent_ms = p.round_ms + hf_silent_margin_ms;
    void* mem = mmap(nullptr, sizeof(hf_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) fail("hang_freedom: mmap: %s", std::strerror(errno));
    hf_shared& sh = *new (mem) hf_shared;
    bool stop = false;
    while (step < steps && !stop) {
        int fds[2];
        if (pipe(fds) != 0) fail("hang_freedom: pipe: %s", std::strerror(errno));
        sh.step.store(step, std::memory_order_relaxed);  // relaxed: the fork orders them for the child
        sh.open.store(0, std::memory_order_relaxed);
        const pid_t parent = getpid();
        std::fflush(nullptr);
        const pid_t pid = fork();
        if (pid < 0) fail("hang_freedom: fork: %s", std::strerror(errno));
        if (pid == 0) {
            close(fds[0]);
            prctl(PR_SET_PDEATHSIG, SIGKILL);  // a program killed whole leaves no child behind
            if (getppid() != parent) _exit(3);
            hf_child(p, step, first, fds[1], sh);
        }
        spindle::bench::watch_child(pid);
        close(fds[1]);
        bool restart = false, reaped = false;
        // A message from the child: account for it.
        auto take = [&](const hf_msg& m) {
            hf_tally& t = tally[hf_step_variant(p, m.step)];
            if (m.kind == hf_out_of_time) {
                stop = true;
            } else if (m.kind == hf_done) {
                t.attempted += hf_batch_rounds - first;
                t.finished += hf_batch_rounds - first;
                step = m.step + 1;
                first = 0;
                stop = step >= steps;
            } else {
                t.attempted += m.round - first + 1;
                t.finished += m.round - first;
                ++t.hung;
                ++t.reasons[m.reason];
                first = m.round + 1;
                step = m.step;
                if (first >= hf_batch_rounds) {
                    ++step;
                    first = 0;
                }
                restart = true;
                // A budget spent on hangs ends the run here, not at the cycle's end.
                if (now_ns() > p.deadline_ns) stop = true;
            }
        };
        auto read_msg = [&](hf_msg& m) {
            ssize_t n;
            while ((n = read(fds[0], &m, sizeof m)) < 0 && errno == EINTR) {
            }
            return n == static_cast<ssize_t>(sizeof m);
        };
        auto looks = [&] {
            return std::array<long, 3>{sh.step.load(std::memory_order_relaxed), sh.open.load(std::memory_order_relaxed),
                                       sh.beats.load(std::memory_order_relaxed)};
        };
        std::array<long, 3> last = looks();
        double silent_ns = 0, last_look = now_ns();
        while (!restart && !stop) {
            pollfd pfd{fds[0], POLLIN, 0};
            const int k = poll(&pfd, 1, static_cast<int>(hf_parent_poll_ms));
            if (k < 0 && errno != EINTR) fail("hang_freedom: poll: %s", std::strerror(errno));
            if (k < 0) continue;
            if (k > 0) {
                hf_msg m;
                if (!read_msg(m)) {  // the child ended without a word
                    stop = step >= steps;
                    if (!stop) {
                        int status = 0;
                        reaped = spindle::bench::reap_child(pid, status);
                        fail("hang_freedom: a child ended unexpectedly (status %d) at step %ld", status, step);
                    }
                    break;
                }
                take(m);
                last = looks();
                silent_ns = 0;
                continue;
            }
            // No word: has it moved since the last look? (A late look adds
            // twice the poll at most, as in the child.)
            const double t = now_ns();
            const double gap = t - last_look;
            last_look = t;
            if (const std::array<long, 3> now = looks(); now != last) {
                last = now;
                silent_ns = 0;
                continue;
            }
            silent_ns += std::min(gap, 2 * hf_parent_poll_ms * 1e6);
            if (silent_ns < silent_ms * 1e6) continue;
            // Silent and still: kill it. A word it sent at the last moment
            // is taken as usual; otherwise its batch is counted from `sh`
            // (stable now): the rounds before the open one finished, the
            // open one hung.
            kill(pid, SIGKILL);
            int status = 0;
            reaped = spindle::bench::reap_child(pid, status);
            hf_msg m;
            if (read_msg(m)) {
                take(m);
            } else {
                const long s_open = sh.open.load(std::memory_order_relaxed);
                const long open = sh.step.load(std::memory_order_relaxed) == step && s_open > first ? s_open : first + 1;
                hf_tally& tl = tally[hf_step_variant(p, step)];
                tl.attempted += open - first;
                tl.finished += open - 1 - first;
                ++tl.hung;
                char why[160];
                std::snprintf(why, sizeof why,
                              "its child process made no progress and sent no word for %.0f s (killed)",
                              silent_ms / 1000);
                ++tl.reasons[why];
                first = open;
                if (first >= hf_batch_rounds) {
                    ++step;
                    first = 0;
                }
                if (now_ns() > p.deadline_ns) stop = true;
            }
            restart = true;
        }
        close(fds[0]);
        if (!reaped) {
            kill(pid, SIGKILL);  // a hung child's actors, or a finished child: either way
            int status = 0;
            (void)spindle::bench::reap_child(pid, status);
        }
    }
    munmap(mem, sizeof(hf_shared));
    return tally;
}

void bench_hang_freedom(harness& h, const run_options& o) {
    const long max_rounds = o.hf_rounds > 0 ? o.hf_rounds : (h.quick() ? 100000 : 1000000);
    // Per primitive, unless --hf-seconds: see the header essay.
    auto seconds_for = [&](double quick, double full) {
        return o.hf_seconds > 0 ? o.hf_seconds : h.quick() ? quick : full;
    };
    const double round_ms = o.hf_round_ms > 0 ? o.hf_round_ms : 2000;
    auto test_spec = [](const std::string& spec, const char* option, std::string& variant, long& round) {
        if (spec.empty()) return;
        const std::size_t colon = spec.rfind(':');
        if (colon == std::string::npos) fail("%s wants VARIANT:ROUND", option);
        variant = spec.substr(0, colon);
        round = std::atol(spec.c_str() + colon + 1);
    };
    hf_plan test;  // the test-only fields
    test_spec(o.hf_test_stall, "--hf-test-stall", test.test_stall_variant, test.test_stall_round);
    test_spec(o.hf_test_lose, "--hf-test-lose", test.test_lose_variant, test.test_lose_round);
    test_spec(o.hf_test_freeze, "--hf-test-freeze", test.test_freeze_variant, test.test_freeze_round);
    const unsigned workers = std::max(1u, std::min(static_cast<unsigned>(hf_actors), g_cpus));
    const std::string on_fibers = "one fiber per actor on " + std::to_string(workers) + " spindle workers";
    const std::string on_threads = "one OS thread per actor";
    struct primitive {
        const char* name;
        params ps;
        std::vector<hf_variant> variants;
        const char* std_bug;  // a known lost wake-up of the std variant, named where one is seen
        double seconds;       // time for its rounds
    };
    std::vector<primitive> prims;
    using spindle_sem = spindle::counting_semaphore<>;
    prims.push_back({"semaphore",
                     {{"primitive", "semaphore"}, {"actors", hf_actors}, {"permits", 1}, {"ops_per_round", hf_sem_ops}},
                     {{"spindle_fiber", true, hf_make_sem<spindle_sem>, "spindle::counting_semaphore; " + on_fibers},
                      {"spindle_thread", false, hf_make_sem<spindle_sem>, "spindle::counting_semaphore; " + on_threads},
                      {"std_counting_semaphore", false, hf_make_sem<std::counting_semaphore<>>,
                       "std::counting_semaphore (libstdc++); " + on_threads}},
                     "libstdc++'s std::counting_semaphore has a known lost wake-up (GCC PR 98033, PR 104928)",
                     seconds_for(5, 30)});
    prims.push_back({"latch",
                     {{"primitive", "latch"}, {"actors", hf_actors}},
                     {{"spindle_fiber", true, hf_make_latch<spindle::latch>, "spindle::latch; " + on_fibers},
                      {"spindle_thread", false, hf_make_latch<spindle::latch>, "spindle::latch; " + on_threads},
                      {"std_latch", false, hf_make_latch<std::latch>, "std::latch (libstdc++); " + on_threads}},
                     nullptr, seconds_for(2, 10)});
    prims.push_back({"barrier",
                     {{"primitive", "barrier"}, {"actors", hf_actors}, {"phases_per_round", hf_barrier_phases}},
                     {{"spindle_fiber", true, hf_make_barrier<spindle::barrier>, "spindle::barrier; " + on_fibers},
                      {"spindle_thread", false, hf_make_barrier<spindle::barrier>, "spindle::barrier; " + on_threads},
                      {"std_barrier", false, hf_make_barrier<std::barrier>,
                       "std::barrier (libstdc++); " + on_threads}},
                     nullptr, seconds_for(2, 10)});
    const metric rounds_metric{"rounds_finished", true};
    for (primitive& prim : prims) {
        hf_plan plan = test;
        for (auto& v : prim.variants)
            if (variant_wanted(v.name)) plan.variants.push_back(v);
        if (plan.variants.empty()) continue;
        if (h.over_time_budget()) {  // --time-budget: none of its rounds
            for (const hf_variant& v : plan.variants)
                h.report_status("hang_freedom", prim.ps, rounds_metric, v.name, "skipped", h.budget_reason(), v.what);
            continue;
        }
        plan.batches_per_variant = std::max(1L, (max_rounds + hf_batch_rounds - 1) / hf_batch_rounds);
        plan.deadline_ns = std::min(now_ns() + prim.seconds * 1e9, h.time_budget_end_ns());
        plan.round_ms = round_ms;
        const double t0 = now_ns();
        const std::vector<hf_tally> tally = hf_run(plan);
        std::fprintf(stderr, "  (hang_freedom: %s in %.1f s)\n", prim.name, (now_ns() - t0) / 1e9);
        for (std::size_t i = 0; i < plan.variants.size(); ++i) {
            const hf_variant& v = plan.variants[i];
            const hf_tally& t = tally[i];
            if (t.attempted == 0) {  // the time ran out (on hung rounds) before its turn
                h.report_status("hang_freedom", prim.ps, rounds_metric, v.name, "skipped",
                                now_ns() > h.time_budget_end_ns()
                                    ? h.budget_reason()
                                    : "not run: the " + std::string(prim.name) + "'s " + spindle::bench::param::number(prim.seconds) +
                                          " s were spent before its first round",
                                v.what);
                continue;
            }
            std::string note = v.what;
            bool lost = false;
            for (const auto& [why, count] : t.reasons) {
                note += "; " + std::to_string(count) + (count == 1 ? " round hung: " : " rounds hung: ") + why;
                lost = lost || why.rfind("lost wake-up", 0) == 0;
            }
            if (lost && prim.std_bug != nullptr && v.name.rfind("std_", 0) == 0)
                note += std::string("; ") + prim.std_bug;
            h.report_rounds("hang_freedom", prim.ps, v.name, t.attempted, t.finished, t.hung, round_ms, false, note);
        }
    }
}

// ---------------------------------------------------------------------------
// Command line

std::vector<unsigned> parse_list(const std::string& s, const char* what, unsigned lo) {
    return parse_numbers(s, what, lo, 10'000'000, fail);
}

// Takes this program's own arguments out of argv, leaving the harness's.
run_options take_own_args(int& argc, char** argv) {
    run_options o;
    if (const char* env = std::getenv("SPINDLE_BENCH_WORKERS"); env != nullptr && *env != '\0')
        o.actors = parse_list(env, "thread count", 1);
    spindle::bench::take_own_args(
        argc, argv,
        "spindle_bench_cqs also takes: [--threads 1,2,4,...] (alias --workers, or "
        "SPINDLE_BENCH_WORKERS) [--max-workers N] [--work-ns 100,1000] [--permits 1,4,16] "
        "[--queued 0,100,10000] [--pool-sizes 1,4,16] [--variants spindle_fiber,std_barrier,...] "
        "[--hf-rounds N] [--hf-seconds S] [--hf-round-ms MS] [--hf-test-stall VARIANT:ROUND] "
        "[--hf-test-lose VARIANT:ROUND] [--hf-test-freeze VARIANT:ROUND]",
        fail,
        {
            {"--threads", [&](const std::string& v) { o.actors = parse_list(v, "thread count", 1); }},
            {"--workers", [&](const std::string& v) { o.actors = parse_list(v, "thread count", 1); }},
            {"--max-workers", [&](const std::string& v) { o.max_workers = parse_list(v, "worker count", 1).front(); }},
            {"--work-ns", [&](const std::string& v) { o.work_ns = parse_list(v, "work mean", 0); }},
            {"--permits", [&](const std::string& v) { o.permits = parse_list(v, "permit count", 1); }},
            {"--pool-sizes", [&](const std::string& v) { o.pool_sizes = parse_list(v, "pool size", 1); }},
            {"--queued", [&](const std::string& v) { o.queued = parse_list(v, "queue length", 0); }},
            {"--abort-waiter",
             [&](const std::string& v) {
                 g_abort_waiter = v;
                 if (g_abort_waiter != "thread" && g_abort_waiter != "fiber" && g_abort_waiter != "both")
                     fail("--abort-waiter wants thread, fiber or both, not '%s'", g_abort_waiter.c_str());
             }},
            {"--variants", [&](const std::string& v) { g_variants.set(v); }},
            {"--hf-rounds", [&](const std::string& v) { o.hf_rounds = parse_list(v, "round count", 1).front(); }},
            {"--hf-seconds", [&](const std::string& v) { o.hf_seconds = parse_list(v, "seconds", 1).front(); }},
            {"--hf-round-ms", [&](const std::string& v) { o.hf_round_ms = parse_list(v, "round budget", 10).front(); }},
            {"--hf-test-stall", [&](const std::string& v) { o.hf_test_stall = v; }},
            {"--hf-test-lose", [&](const std::string& v) { o.hf_test_lose = v; }},
            {"--hf-test-freeze", [&](const std::string& v) { o.hf_test_freeze = v; }},
        });
    return o;
}

}  // namespace

// ---------------------------------------------------------------------------
// memory: bytes per queued waiter (see the header essay).

enum class memory_kind { fiber_only, simple, smart };

// In a child: {RSS growth in bytes, live segments of the queue} with q fibers
// parked (or, for fiber_only, alive and yielding).
std::vector<double> waiter_memory(memory_kind kind, long q) {
    const long before = rss_bytes();
    long during = 0;
    std::size_t segments = 0;
    spindle::detail::cqs<unit> simple{spindle::detail::cqs_cancellation::simple};
    spindle::counting_semaphore<> smart{0};
    {
        spindle::scheduler sched({.workers = 1, .stack_size = queued_stack_bytes});
        std::atomic<long> started{0};  // a count, polled until complete
        std::atomic<bool> release{false};  // fiber_only's stop flag; the join orders what follows
        std::vector<spindle::fiber> fs;
        fs.reserve(static_cast<std::size_t>(q));
        for (long i = 0; i < q; ++i)
            fs.push_back(sched.spawn([&] {
                started.fetch_add(1, std::memory_order_relaxed);
                switch (kind) {
                case memory_kind::fiber_only:
                    while (!release.load(std::memory_order_relaxed)) spindle::this_fiber::yield();
                    break;
                case memory_kind::simple:
                    if (simple.suspend().status != spindle::detail::cqs_status::resumed)
                        fail("memory: a queued cqs waiter was not resumed");
                    break;
                case memory_kind::smart: smart.acquire(); break;
                }
            }));
        while (started.load(std::memory_order_relaxed) != q) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        // On one worker the last fiber to count runs on until it parks: a
        // fiber spawned now runs after every waiter has parked.
        sched.spawn([] {}).join();
        during = rss_bytes();
        segments = kind == memory_kind::simple ? simple.live_segments() : 0;
        if (kind == memory_kind::smart && smart.debug_count() != -q)
            fail("memory: counting_semaphore counts %lld waiters, expected %ld",
                 static_cast<long long>(-smart.debug_count()), q);
        release.store(true, std::memory_order_relaxed);
        if (kind == memory_kind::simple)
            for (long i = 0; i < q; ++i)
                if (!simple.resume(unit{})) fail("memory: resume of a queued cqs waiter failed");
        if (kind == memory_kind::smart) smart.release(q);
        for (auto& f : fs) f.join();
    }
    return {static_cast<double>(during - before), static_cast<double>(segments)};
}

void bench_memory(harness& h) {
    const long q = 100000;
    const int reps = h.reps(3, 5);
    const char* names[] = {"fiber_only", "spindle_simple", "spindle_smart"};
    const memory_kind kinds[] = {memory_kind::fiber_only, memory_kind::simple, memory_kind::smart};
    std::vector<double> rss[3], queue_bytes;
    for (int r = 0; r < reps; ++r)  // interleaved: one child per variant per round
        for (int i = 0; i < 3; ++i) {
            std::vector<double> v = in_child("memory", [&] { return waiter_memory(kinds[i], q); });
            if (v.size() != 2) fail("memory: the child for %s returned no result", names[i]);
            rss[i].push_back(v[0] / static_cast<double>(q));
            if (kinds[i] == memory_kind::simple)
                queue_bytes.push_back(v[1] * sizeof(spindle::detail::cqs_segment) / static_cast<double>(q));
        }
    const params ps{{"queued", static_cast<long long>(q)}, {"stack_bytes", static_cast<long long>(queued_stack_bytes)}};
    const std::string notes[] = {
        "the reference: Q fibers alive, each has run and yields in a ring (the fiber alone, no queue)",
        "Q fibers parked in detail::cqs<unit>::suspend(); RSS growth of the child / Q",
        "Q fibers parked in counting_semaphore::acquire(); RSS growth of the child / Q",
    };
    for (int i = 0; i < 3; ++i)
        h.report("memory", ps, {"rss_bytes_per_waiter", false}, harness::summarize(names[i], rss[i]), i == 0, notes[i]);
    const summary qb = harness::summarize("spindle_simple", queue_bytes);
    h.report("memory", ps, {"queue_bytes_per_waiter", false}, qb, true,
             "live segments x sizeof(cqs_segment) / Q with Q fibers parked (" +
                 std::to_string(sizeof(spindle::detail::cqs_segment)) + "-byte segments of " +
                 std::to_string(spindle::detail::cqs_segment_cells) + " cells; a cell is " +
                 std::to_string(sizeof(spindle::detail::cqs_cell_slot)) + " bytes)");
    const double fiber = harness::summarize("", rss[0]).median, parked = harness::summarize("", rss[2]).median;
    std::fprintf(stderr,
                 "  target (memory): a queued waiter <= one cell + its fiber: queue %.1f bytes per waiter (cell %zu), "
                 "RSS per parked waiter %.0f bytes vs %.0f for the fiber alone (%.3fx)\n",
                 qb.median, sizeof(spindle::detail::cqs_cell_slot), parked, fiber, fiber > 0 ? parked / fiber : 0.0);
}

int main(int argc, char** argv) {
    run_options o = take_own_args(argc, argv);
    harness h(argc, argv, "cqs");
    g_cpus = std::max(1u, std::thread::hardware_concurrency());
    g_target_ns = h.quick() ? 30e6 : 100e6;
    g_spin_ns = spindle::bench::calibrate_spin(h, "cqs");
    // First, so that a suite cut short by its time budget still has it;
    // not again when the program restarts after a hang (see harness.hpp).
    if (h.wants("hang_freedom") && !h.replaying()) bench_hang_freedom(h, o);
    if (h.wants("barrier")) bench_barrier(h, o);
    if (h.wants("latch")) bench_latch(h, o);
    if (h.wants("semaphore")) bench_semaphore(h, o);
    if (h.wants("abort")) bench_abort(h, o);
    if (h.wants("pool")) bench_pool(h, o);
    if (h.wants("memory")) bench_memory(h);
    return 0;
}
