// bench/locks — the thread-lock benchmarks (docs/benchmarks.md,
// "Thread locks (Hemlock paper §5, TCLocks paper §6)"): spindle's spin and
// spin-then-park locks against pthread_mutex_t and std::mutex, on OS threads.
//
// Contention model (mutexbench, oversubscribed). T threads share one lock.
// Each loops { lock; critical section; unlock; non-critical section } until
// told to stop:
//   critical section      writes `cs_lines` shared cache lines (one counter
//                         each, plain increments: the lock is what keeps them
//                         exact, and the run checks they are). cs_lines = 0
//                         is an empty section (a compiler barrier only). The
//                         lines travel with the lock from holder to holder, as
//                         the data a real lock protects does.
//   non-critical section  thread-local busy work, uniform in [0, 2 * ncs_ns)
//                         ns (a calibrated empty loop; the draw is a
//                         per-thread splitmix64). ncs_ns = 0: none.
// cs_lines = 0 with ncs_ns = 0 is the Hemlock paper's maximum contention:
// with T >= 2 the lock is wanted again the moment it is released. A FIFO
// lock (ticket, the queue locks, Hemlock) then hands over on every
// operation, and the figure is the cost of moving the lock word and the
// successor's flag between CPUs; an unfair one (tas, ttas, tclock's fast
// path, pthread) lets the releasing thread take it straight back, so its
// figure is closer to its uncontended cost. With a critical and a
// non-critical section the lock is contended part of the time and the lines
// it protects move with it. With one thread nothing is contended: the figure
// is the uncontended lock + unlock latency (plus the sections).
//
// Preemption. A FIFO spin lock whose next owner has lost its CPU stops every
// thread behind it until that thread runs again (a time slice, milliseconds),
// so with more threads than CPUs -- oversubscribed, by design, or 2 threads
// on 2 CPUs that other processes are also using -- pure spinning collapses
// to a few thousand operations per second. Spin-then-park locks and the
// unfair ones do not. On a shared machine, read the contended figures of the
// FIFO spin locks with that in mind: a round in which another process took a
// CPU shows up as a collapse of those locks only.
//
// Placement. The lock lives alone on its own 128-byte block (two cache lines:
// the adjacent-line prefetcher pairs them), as does each shared line, each
// thread's operation counter and the stop flag, so no variant is helped or
// hurt by false sharing the others do not see.
//
// Timing. A measurement starts the T threads behind a gate, lets them run for
// a warm-up, then reads every thread's operation counter, sleeps for the
// window, and reads them again: ops = the difference, over the window's
// clock time. Each thread publishes its count after every operation (a
// relaxed store to its own line, which stays in its cache: no clock read or
// shared write per operation) and checks the stop flag after every operation
// (a load of a line only the main thread writes, once). So 1-thread latency
// resolves to about a nanosecond (it is taken over the thread's own CPU time
// in the window, CLOCK_THREAD_CPUTIME_ID, so that time another process took
// from its CPU does not count as latency), and a lock that collapses -- a FIFO spin
// lock whose next owner is preempted -- still ends on time: the window is
// fixed, the figure is what was done in it, and the threads then only have
// to finish the operation they are in (a run that has not stopped within
// `stop_cap` fails rather than hang). Contended figures are over wall time;
// beside each comparison the program prints the CPU time its threads got in
// the windows, as a share of min(T, CPUs) CPUs: below 100%, other processes
// (or an unlucky placement of two threads on one CPU) were in the way.
//
// Workloads (records: suite "locks"):
//   mutexbench      T in {1, 2} (--quick) or 1, 2, 4, 8, 16, ... (--full;
//                   --threads LIST), sections (cs_lines, ncs_ns) in {(0, 0),
//                   (2, 200)} (quick; and at T = 2 also (4, 0), (16, 0)
//                   and (16, 200), for the TCLock target) or more (full;
//                   --sections LIST).
//                   Metric: T = 1: ns_per_op (uncontended latency); T >= 2:
//                   ops_per_s (throughput of all threads together).
//                   Reference: hemlock.
//   oversubscribed  the same with 4x as many threads as CPUs (8 on 2 CPUs;
//                   --oversubscribed-threads N); ops_per_s. Spin-then-park
//                   locks against pure spinning and pthread (the reference).
//                   A pure spin lock's figure can drop to a few hundred ops
//                   per second: that collapse is what this measures.
//   space           bytes of each lock and of the per-thread state it needs
//                   (Hemlock paper, Table 1), from sizeof of the types.
//   leveldb         LevelDB readrandom (leveldb_driver.cpp), one process per
//                   measurement, under LD_PRELOAD=libspindle_preload.so with
//                   SPINDLE_LOCK=<lock>, or under plain glibc (the
//                   reference); ops_per_s (T = 1: Gets per second of the
//                   reader's CPU time, see leveldb_measure). T in {1, 2} (quick) or {1, 2, 4,
//                   8} (full; --leveldb-threads LIST). Skipped with a message
//                   when the preload library or the driver is not built.
//                   The database is filled once per run, in a directory
//                   beside --out (harness::make_scratch_dir: removed at the
//                   end and before a restart after a hang).
//   preload_spin    pthread_spin_lock/unlock of a plain program (this one,
//                   run as a child: --spin-child), T threads on one
//                   spinlock, each loop { lock; one shared line + 1; unlock },
//                   under plain glibc (the reference) and under
//                   LD_PRELOAD=libspindle_preload.so with each SPINDLE_LOCK
//                   value; one process per measurement, interleaved round
//                   by round. T in {1, 2, 4} x the CPUs (--spin-threads
//                   LIST); ops_per_s. The targets print the ratio of the
//                   medians to glibc's (and the median of the per-round
//                   ratios): the park families and the default promise
//                   glibc's rate when threads outnumber CPUs.
//
// Competitors, all in this one program and interleaved by the harness:
// every lock of the spindle lock library, named as its type without the
// namespace and a trailing "_lock" -- hemlock (the reference of mutexbench
// and space), hemlock_naive, hemlock_overlap, hemlock_aho, mcs, clh, ticket,
// tas, ttas, and their spin-then-park twins (hemlock_park, ...,
// ttas_park) -- tclock and tclock_blocking (TCLocks: a contended section
// runs on the combiner's thread; the loop's sections touch only the shared
// lines, which is what delegation is for), `pthread` (pthread_mutex_t,
// default attributes: glibc's futex mutex; the reference of oversubscribed)
// and `std_mutex` (std::mutex: the same mutex behind libstdc++'s inline
// wrapper).
//
// Command line: the harness's (--out, --quick, --full, --reps, --only) and
//   --threads LIST                 mutexbench thread counts
//   --sections LIST                mutexbench/oversubscribed sections, each
//                                  CS_LINES:NCS_NS (e.g. 0:0,2:200)
//   --oversubscribed-threads N     default 4x the CPUs
//   --window-ms N                  one measurement's window (default: quick
//                                  30 ms, oversubscribed 50 ms; full 3x)
//   --locks LIST                   only these variants (any workload)
//   --leveldb-threads LIST         leveldb thread counts
//   --leveldb-seconds S            one leveldb measurement's window (default 0.2 quick, 1 full)
//   --preload PATH                 libspindle_preload.so (default: SPINDLE_PRELOAD_LIB,
//                                  else the one this build made)
//   --preload-locks LIST           the SPINDLE_LOCK values to measure
//                                  (default: every one the library has)
//   --leveldb-driver PATH          default: next to this program
//   --spin-threads LIST            preload_spin thread counts
// At the end the targets are printed on stderr with the ratios this
// run measured (medians of per-round ratios: the harness measures every
// variant once per round).

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>
#include <spindle/locks/locks.hpp>
#include <spindle/locks/tclock.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/harness.hpp"
#include "../harness/options.hpp"
#include "../harness/work.hpp"

extern char** environ;

using spindle::bench::harness;
using spindle::bench::metric;
using spindle::bench::now_ns;
using spindle::bench::param;
using spindle::bench::params;
using spindle::bench::parse_names;
using spindle::bench::parse_numbers;
using spindle::bench::spin;
using spindle::bench::summary;
using spindle::bench::variant;

namespace {

void remove_tmp_dir();

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "spindle_bench_locks: ");
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    std::fflush(nullptr);
    remove_tmp_dir();
    std::_Exit(1);
}

// Two cache lines: the adjacent-line prefetcher fetches 128-byte pairs, so a
// neighbour within 128 bytes would still share traffic.
constexpr std::size_t block = 2 * spindle::arch::cache_line;

unsigned g_cpus = 1;  // hardware_concurrency

// A run that has not stopped this long after its window ended fails.
constexpr double stop_cap_ns = 30e9;

// ---------------------------------------------------------------------------
// The locks

// pthread_mutex_t with default attributes, as a BasicLockable.
class pthread_lock {
public:
    pthread_lock() = default;
    pthread_lock(const pthread_lock&) = delete;
    pthread_lock& operator=(const pthread_lock&) = delete;
    ~pthread_lock() { pthread_mutex_destroy(&m_); }
    void lock() { pthread_mutex_lock(&m_); }
    void unlock() { pthread_mutex_unlock(&m_); }

private:
    pthread_mutex_t m_ = PTHREAD_MUTEX_INITIALIZER;
};

// How a lock waits, for the oversubscribed comparison and the notes.
enum class waits { spin, spin_then_park, os };

const char* waits_name(waits w) {
    switch (w) {
        case waits::spin: return "pure spinning";
        case waits::spin_then_park: return "spin, then park";
        case waits::os: return "OS mutex";
    }
    return "?";
}

// ---------------------------------------------------------------------------
// Space

// What a lock costs in memory, as the Hemlock paper's Table 1 counts it:
// the lock itself, the state every thread that uses it keeps (whether or not
// it holds anything), and what each held lock and each waiting thread adds.
// All from sizeof of the types the lock headers name for that state.
struct space_row {
    std::size_t lock = 0, per_thread = 0, per_held_lock = 0, per_waiter = 0;
    std::string note;
};

template <class Lock>
struct space_of {
    static space_row get() { return {sizeof(Lock), 0, 0, 0, "no state outside the lock"}; }
};

template <>
struct space_of<pthread_lock> {
    static space_row get() {
        return {sizeof(pthread_mutex_t), 0, 0, 0,
                "pthread_mutex_t (glibc: a futex word, owner, count, kind, spins; waiters sleep in the kernel)"};
    }
};
template <>
struct space_of<std::mutex> {
    static space_row get() { return {sizeof(std::mutex), 0, 0, 0, "std::mutex: a pthread_mutex_t (libstdc++)"}; }
};

// Hemlock: one Grant word per thread, alone on its cache line (per variant
// the thread uses); nothing per held lock or waiter.
template <spindle::hemlock_variant V, class Wait, class Env>
struct space_of<spindle::basic_hemlock<V, Wait, Env>> {
    static space_row get() {
        return {sizeof(spindle::basic_hemlock<V, Wait, Env>), sizeof(typename Env::grant), 0, 0,
                "per thread: its Grant word, alone on a cache line (thread-local, one per Hemlock variant used)"};
    }
};

// MCS and CLH: a queue node per held lock and per waiter, from a per-thread
// cache (its head and counts always; up to node_cache_limit nodes in it).
inline std::string node_note() {
    return "per held lock and per waiter: one queue node; per thread: its node cache's head (plus up to " +
           std::to_string(spindle::detail::node_cache_limit) + " cached nodes, " +
           std::to_string(spindle::detail::node_cache_limit * sizeof(spindle::detail::queue_node)) +
           " bytes, once it has used them)";
}
template <class Wait>
struct space_of<spindle::detail::mcs_queue<Wait>> {
    static space_row get() {
        return {sizeof(spindle::detail::mcs_queue<Wait>), sizeof(spindle::detail::node_cache),
                sizeof(spindle::detail::queue_node), sizeof(spindle::detail::queue_node), node_note()};
    }
};
template <class Wait>
struct space_of<spindle::detail::clh_queue<Wait>> {
    static space_row get() {
        space_row r = space_of<spindle::detail::mcs_queue<Wait>>::get();
        r.lock = sizeof(spindle::detail::clh_queue<Wait>);
        return r;
    }
};

// A lock built around a queue (MCS/CLH with their holder word, every park
// twin's gate): its own size, and what its queue needs beside it.
template <class Lock, class Queue>
space_row around_queue() {
    space_row r = space_of<Queue>::get();
    r.lock = sizeof(Lock);
    return r;
}
template <class Queue>
struct space_of<spindle::detail::node_queue_lock<Queue>> {
    static space_row get() { return around_queue<spindle::detail::node_queue_lock<Queue>, Queue>(); }
};
template <class Queue>
struct space_of<spindle::detail::park_gate<Queue>> {
    static space_row get() { return around_queue<spindle::detail::park_gate<Queue>, Queue>(); }
};

// TCLocks: nothing static per thread that the header names; a thread's
// first contended lock() maps its ephemeral stack, on which it waits (its
// queue entry and saved context live there).
inline std::string tclock_note() {
    return "per thread: a 256 KiB ephemeral stack with a guard page, mapped on its first contended lock() "
           "(tclock.hpp; not counted here: not a sizeof); a waiter's queue entry and context live on it";
}
template <>
struct space_of<spindle::tclock> {
    static space_row get() { return {sizeof(spindle::tclock), 0, 0, 0, tclock_note()}; }
};
template <>
struct space_of<spindle::tclock_blocking> {
    static space_row get() { return {sizeof(spindle::tclock_blocking), 0, 0, 0, tclock_note()}; }
};

// ---------------------------------------------------------------------------
// Busy work: spin() (harness/work.hpp)

double g_spin_ns = 1.0;  // one iteration of spin()

using splitmix = spindle::bench::splitmix64;

// ---------------------------------------------------------------------------
// One measurement

struct section {
    unsigned cs_lines = 0;  // shared lines written inside the lock
    unsigned ncs_ns = 0;    // mean non-critical busy time
};

struct setup {
    unsigned threads = 1;
    section sec;
    double warmup_ns = 5e6;
    double window_ns = 40e6;
    bool latency = false;  // ns_per_op (true) or ops_per_s
};

struct alignas(block) shared_line {
    std::uint64_t n = 0;  // guarded by the lock under test
};
// A thread's operation count: stored by its thread alone (relaxed), read by
// the main thread for its value alone (relaxed); pairs with nothing.
struct alignas(block) op_counter {
    std::atomic<std::uint64_t> ops{0};
};
// The start gate (release store by the main thread, acquire loads by the
// threads) or the stop flag (relaxed both ways: it only ends the loops).
struct alignas(block) flag {
    std::atomic<bool> on{false};
};
template <class Lock>
struct alignas(block) lock_home {
    Lock lock;
};

struct run_result {
    std::uint64_t ops = 0;
    double window_ns = 0;
    double cpu_share = 0;  // CPU time the threads got in the window / what min(T, CPUs) CPUs give
};

// The CPU shares of the measurements since the last take_cpu_shares(): the
// harness calls the measure functions, this collects what they saw beside
// their figure. Only where every thread is always runnable -- one thread, or
// a lock whose waiters spin -- does a share below 1 mean that something else
// had the CPU (a waiter that sleeps in a parking lock, pthread or std::mutex
// uses no CPU by design).
std::vector<double> g_cpu_shares;
double g_last_cpu_share = 0;  // of the last measurement

std::vector<double> take_cpu_shares() {
    std::vector<double> v;
    v.swap(g_cpu_shares);
    return v;
}

double thread_cpu_ns(clockid_t c) {
    timespec ts{};
    if (clock_gettime(c, &ts) != 0) return 0;
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// The critical and non-critical sections, on one thread. Kept apart from the
// lock calls so that every lock type runs the same instructions between them.
struct thread_work {
    shared_line* lines;
    unsigned cs_lines;
    std::uint32_t ncs_range;  // spin() iterations: uniform in [0, ncs_range)
    splitmix rng;

    void critical() noexcept {
        for (unsigned i = 0; i < cs_lines; ++i) ++lines[i].n;
        __asm__ volatile("" ::: "memory");  // the section is not moved out of the lock, nor merged with the next
    }
    void non_critical() noexcept {
        if (ncs_range != 0) spin(rng.below(ncs_range));
    }
};

// T threads run the loop on one Lock for a warm-up and a window; returns what
// they did in the window. Fails if the shared lines do not add up.
template <class Lock>
run_result run_lock(const setup& s, const char* who) {
    auto home = std::make_unique<lock_home<Lock>>();
    Lock& lock = home->lock;
    const unsigned n_lines = std::max(1u, s.sec.cs_lines);
    auto lines = std::make_unique<shared_line[]>(n_lines);
    auto counts = std::make_unique<op_counter[]>(s.threads);
    auto go = std::make_unique<flag>();
    auto stop = std::make_unique<flag>();
    // ready: the threads at the gate, a count only (relaxed both ways).
    // running: release decrements by the threads, the stop wait's acquire.
    std::atomic<unsigned> ready{0}, running{s.threads};
    const auto ncs_range = static_cast<std::uint32_t>(2.0 * s.sec.ncs_ns / g_spin_ns);

    std::vector<std::thread> ts;
    ts.reserve(s.threads);
    for (unsigned t = 0; t < s.threads; ++t)
        ts.emplace_back([&, t] {
            thread_work w{lines.get(), s.sec.cs_lines, ncs_range, splitmix{0x9E3779B97F4A7C15ull * (t + 1)}};
            std::atomic<std::uint64_t>& mine = counts[t].ops;
            ready.fetch_add(1, std::memory_order_relaxed);  // a count; pairs with nothing
            // acquire: pairs with the gate's release (orders nothing the loop
            // needs beyond what the thread's creation did; the usual pairing).
            while (!go->on.load(std::memory_order_acquire)) std::this_thread::yield();
            std::uint64_t n = 0;
            // relaxed: `stop` only ends the loop; `mine` is read by the main
            // thread for its value alone; join() orders the shared lines.
            while (!stop->on.load(std::memory_order_relaxed)) {
                lock.lock();
                w.critical();
                lock.unlock();
                w.non_critical();
                mine.store(++n, std::memory_order_relaxed);
            }
            running.fetch_sub(1, std::memory_order_release);  // pairs with the stop wait's acquire
        });
    auto total = [&] {
        std::uint64_t sum = 0;
        for (unsigned t = 0; t < s.threads; ++t) sum += counts[t].ops.load(std::memory_order_relaxed);  // op_counter
        return sum;
    };
    while (ready.load(std::memory_order_relaxed) != s.threads) std::this_thread::yield();  // a count, as above
    go->on.store(true, std::memory_order_release);  // pairs with the threads' acquire at the gate
    std::this_thread::sleep_for(std::chrono::duration<double, std::nano>(s.warmup_ns));
    // Each thread's CPU clock: how much of the window the threads really ran
    // (another process on a CPU, or two threads on one, shows up here).
    std::vector<clockid_t> clocks(s.threads);
    for (unsigned t = 0; t < s.threads; ++t)
        if (pthread_getcpuclockid(ts[t].native_handle(), &clocks[t]) != 0) fail("%s: pthread_getcpuclockid", who);
    auto cpu_total = [&] {
        double sum = 0;
        for (clockid_t c : clocks) sum += thread_cpu_ns(c);
        return sum;
    };
    const double t0 = now_ns();
    const std::uint64_t c0 = total();
    const double cpu0 = cpu_total();
    std::this_thread::sleep_for(std::chrono::duration<double, std::nano>(s.window_ns));
    const double cpu1 = cpu_total();
    const std::uint64_t c1 = total();
    const double t1 = now_ns();
    stop->on.store(true, std::memory_order_relaxed);  // only ends the loops (see the threads' load)
    const double stop_at = now_ns();
    while (running.load(std::memory_order_acquire) != 0) {  // pairs with the threads' release decrement
        if (now_ns() - stop_at > stop_cap_ns)
            fail("%s: %u of %u threads still running %.0f s after the stop (a lost wake-up?)", who,
                 running.load(std::memory_order_relaxed), s.threads, stop_cap_ns / 1e9);  // for the message
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (auto& th : ts) th.join();
    if (s.sec.cs_lines > 0) {
        const std::uint64_t all = total();
        for (unsigned i = 0; i < s.sec.cs_lines; ++i)
            if (lines[i].n != all)
                fail("%s: shared line %u counted %llu operations, the threads %llu: the lock let two threads in", who,
                     i, static_cast<unsigned long long>(lines[i].n), static_cast<unsigned long long>(all));
    }
    return {c1 - c0, t1 - t0, (cpu1 - cpu0) / (std::min(s.threads, g_cpus) * (t1 - t0))};
    // (one thread: cpu_share * window_ns is its CPU time in the window)
}

template <class Lock>
double measure_lock(const setup& s, const char* who) {
    const run_result r = run_lock<Lock>(s, who);
    g_last_cpu_share = r.cpu_share;
    if (s.latency) {
        // Over the thread's own CPU time: a share of the CPU that another
        // process took is not lock latency. No operation at all (the thread
        // never ran): one operation took at least the window.
        if (r.ops == 0) return r.window_ns;
        return r.cpu_share * r.window_ns / static_cast<double>(r.ops);
    }
    return static_cast<double>(r.ops) * 1e9 / r.window_ns;
}

// ---------------------------------------------------------------------------
// The competitors

struct lock_entry {
    std::string name;
    waits how;
    double (*measure)(const setup&, const char*);
    space_row (*space)();
    std::string note;
};

template <class Lock>
lock_entry entry(std::string name, waits how, std::string note) {
    return {std::move(name), how, &measure_lock<Lock>, &space_of<Lock>::get, std::move(note)};
}

// A TCLock measured with thread pointer adoption turned off for the
// measurement (its threads are started and joined inside it, so nothing is
// delegated across the change): what the adoption costs, in the same run.
template <class Lock>
double measure_without_adoption(const setup& s, const char* who) {
    const bool was = spindle::tclock_adopts_thread_pointer();
    spindle::tclock_adopt_thread_pointer(false);
    const double r = measure_lock<Lock>(s, who);
    spindle::tclock_adopt_thread_pointer(was);
    return r;
}

// A lock of the library: its variant name is its type's name without the
// namespace and a trailing "_lock" (spindle::mcs_park_lock -> mcs_park).
template <class Lock>
lock_entry library_lock() {
    std::string name = Lock::name;
    if (name.rfind("spindle::", 0) == 0) name.erase(0, 9);
    if (name.size() > 5 && name.compare(name.size() - 5, 5, "_lock") == 0) name.erase(name.size() - 5);
    const std::string note = std::string(Lock::name) + ", " + std::to_string(sizeof(Lock)) + " bytes, " +
                             (Lock::is_fifo ? "FIFO" : "not fair");
    return entry<Lock>(name, Lock::parks ? waits::spin_then_park : waits::spin, note);
}

// Every competitor, the reference first.
std::vector<lock_entry> all_locks() {
    std::vector<lock_entry> v;
    v.push_back(library_lock<spindle::hemlock>());
    v.push_back(library_lock<spindle::hemlock_naive>());
    v.push_back(library_lock<spindle::hemlock_overlap>());
    v.push_back(library_lock<spindle::hemlock_aho>());
    v.push_back(library_lock<spindle::mcs_lock>());
    v.push_back(library_lock<spindle::clh_lock>());
    v.push_back(library_lock<spindle::ticket_lock>());
    v.push_back(library_lock<spindle::tas_lock>());
    v.push_back(library_lock<spindle::ttas_lock>());
    v.push_back(library_lock<spindle::hemlock_park>());
    v.push_back(library_lock<spindle::hemlock_naive_park>());
    v.push_back(library_lock<spindle::hemlock_overlap_park>());
    v.push_back(library_lock<spindle::hemlock_aho_park>());
    v.push_back(library_lock<spindle::mcs_park_lock>());
    v.push_back(library_lock<spindle::clh_park_lock>());
    v.push_back(library_lock<spindle::ticket_park_lock>());
    v.push_back(library_lock<spindle::tas_park_lock>());
    v.push_back(library_lock<spindle::ttas_park_lock>());
    v.push_back(entry<spindle::tclock>("tclock", waits::spin,
                                       "spindle::tclock (TCLock-SP: waiters spin and yield; contended sections "
                                       "are run by a combiner), 16 bytes, not fair"));
    v.push_back(entry<spindle::tclock_blocking>(
        "tclock_blocking", waits::spin_then_park,
        "spindle::tclock_blocking (TCLock-B: waiters spin, then sleep), 16 bytes, not fair"));
    if (spindle::tclock_adopts_thread_pointer())
        v.push_back({"tclock_no_adopt", waits::spin, &measure_without_adoption<spindle::tclock>,
                     &space_of<spindle::tclock>::get,
                     "spindle::tclock with thread pointer adoption off: a delegated section runs as the "
                     "combiner's thread (tclock, where the CPU allows: as its own)"});
    v.push_back(entry<pthread_lock>("pthread", waits::os, "pthread_mutex_t, default attributes (glibc)"));
    v.push_back(entry<std::mutex>("std_mutex", waits::os, "std::mutex (libstdc++ over the glibc mutex)"));
    return v;
}

std::string g_reference = "hemlock";

// ---------------------------------------------------------------------------
// Options

struct run_options {
    std::vector<unsigned> threads;
    std::vector<section> sections;
    unsigned oversub_threads = 0;  // 0: 4x the CPUs
    double window_ms = 0;          // 0: the mode's default
    std::vector<std::string> locks;
    std::vector<unsigned> leveldb_threads;
    double leveldb_seconds = 0;  // 0: the mode's default
    std::string preload;
    std::string driver;
    std::vector<std::string> preload_locks;  // SPINDLE_LOCK values; empty: all
    std::vector<unsigned> spin_threads;      // preload_spin; empty: 1, 2, 4 x the CPUs
};

bool lock_wanted(const run_options& o, const std::string& name) {
    return o.locks.empty() || std::find(o.locks.begin(), o.locks.end(), name) != o.locks.end();
}

std::string section_note(const section& sec) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "critical section: %u shared line(s) written; non-critical: %s; lock on its own %zu-byte block",
                  sec.cs_lines,
                  sec.ncs_ns ? ("uniform 0-" + std::to_string(2 * sec.ncs_ns) + " ns busy loop").c_str() : "none",
                  block);
    return buf;
}

// Medians of per-round ratios a/b of two variants of one comparison.
std::optional<double> round_ratio(const std::vector<summary>& ss, const std::string& a, const std::string& b) {
    const summary *sa = nullptr, *sb = nullptr;
    for (auto& s : ss) {
        if (s.variant == a) sa = &s;
        if (s.variant == b) sb = &s;
    }
    if (!sa || !sb) return std::nullopt;
    std::vector<double> r;
    for (std::size_t i = 0; i < sa->samples.size() && i < sb->samples.size(); ++i)
        if (sb->samples[i] > 0) r.push_back(sa->samples[i] / sb->samples[i]);
    if (r.empty()) return std::nullopt;
    return harness::summarize("", r).median;
}

// What the target lines need, kept from the comparisons.
struct results {
    std::map<std::string, std::vector<summary>> by_key;  // "mutexbench t=1 0:0" -> summaries
};

std::map<unsigned, std::vector<summary>> g_leveldb_results;  // threads -> summaries

std::string key(const std::string& workload, unsigned threads, const section& sec) {
    return workload + " t=" + std::to_string(threads) + " " + std::to_string(sec.cs_lines) + ":" +
           std::to_string(sec.ncs_ns);
}

// ---------------------------------------------------------------------------
// mutexbench and oversubscribed

// Per comparison: the median and lowest CPU share its spinning measurements saw,
// printed under its line, and kept for the target lines.
std::map<std::string, std::pair<double, double>> g_share_by_key;  // key -> (median, min)

void note_cpu_share(const std::string& workload, unsigned threads, const section& sec, std::vector<double> v) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    const double med = harness::summarize("", v).median, lo = v.front();
    g_share_by_key[key(workload, threads, sec)] = {med, lo};
    std::fprintf(stderr,
                 "    CPU time the threads got: %.0f%% of %u CPU(s) (median over the measurements where they never "
                 "sleep; lowest %.0f%%)%s\n",
                 100 * med, std::min(threads, g_cpus), 100 * lo,
                 lo < 0.9 ? " -- something else had a CPU in some measurements" : "");
}

void bench_mutex(harness& h, const run_options& o, results& res, const std::string& workload) {
    const bool oversub = workload == "oversubscribed";
    std::vector<unsigned> ts;
    if (oversub) {
        ts = {o.oversub_threads ? o.oversub_threads : 4 * g_cpus};
    } else if (!o.threads.empty()) {
        ts = o.threads;
    } else if (h.quick()) {
        ts = {1, 2};
    } else {
        for (unsigned t = 1; t <= std::max(16u, 4 * g_cpus); t *= 2) ts.push_back(t);
    }
    std::vector<section> secs = o.sections;
    if (secs.empty()) {
        if (h.quick()) secs = {{0, 0}, {2, 200}};
        else secs = {{0, 0}, {1, 200}, {4, 200}, {16, 200}};
    }
    std::vector<std::pair<section, unsigned>> runs;  // (section, threads), in order
    for (const section& sec : secs)
        for (unsigned t : ts) runs.push_back({sec, t});
    // The TCLock target (2 threads, sections that write 4-16 lines: tclock >=
    // mcs) also in the quick suite, where the sections above write fewer.
    if (h.quick() && !oversub && o.sections.empty() && o.threads.empty())
        for (section sec : {section{4, 0}, section{16, 0}, section{16, 200}}) runs.push_back({sec, 2});
    double window_ms = o.window_ms > 0 ? o.window_ms : (oversub ? 50 : 30) * (h.full() ? 3 : 1);
    const std::string reference = oversub ? std::string("pthread") : g_reference;
    for (const auto& [sec, t] : runs) {
        setup s;
        s.threads = t;
        s.sec = sec;
        s.window_ns = window_ms * 1e6;
        s.warmup_ns = oversub ? 10e6 : 5e6;
        s.latency = t == 1;
        std::vector<variant> vs;
        for (const lock_entry& e : all_locks()) {
            if (!lock_wanted(o, e.name)) continue;
            const bool ref = e.name == reference;
            std::string note = e.note + "; waits: " + waits_name(e.how);
            if (ref) note += "; " + section_note(sec);
            const std::string who = workload + "/" + e.name;
            auto fn = e.measure;
            const bool always_runnable = t == 1 || e.how == waits::spin;
            vs.push_back(variant(
                e.name,
                [s, fn, who, always_runnable] {
                    const double v = fn(s, who.c_str());
                    if (always_runnable) g_cpu_shares.push_back(g_last_cpu_share);
                    return v;
                },
                ref, note));
        }
        if (vs.empty()) continue;
        params ps{{"threads", t}, {"cs_lines", sec.cs_lines}, {"ncs_ns", sec.ncs_ns}};
        if (oversub) ps.push_back({"cpus", g_cpus});
        const metric m = s.latency ? metric{"ns_per_op", false} : metric{"ops_per_s", true};
        (void)take_cpu_shares();
        res.by_key[key(workload, t, sec)] = h.compare(workload, ps, m, vs, h.reps(5, 9));
        note_cpu_share(workload, t, sec, take_cpu_shares());
    }
}

// ---------------------------------------------------------------------------
// space

void bench_space(harness& h, const run_options& o) {
    const metric bytes{"bytes", false};
    const char* parts[] = {"lock", "per_thread", "per_held_lock", "per_waiter"};
    for (int part = 0; part < 4; ++part) {
        std::vector<std::string> notes_given;  // a family's note once, on its first lock
        for (const lock_entry& e : all_locks()) {
            if (!lock_wanted(o, e.name)) continue;
            const space_row r = e.space();
            const std::size_t v =
                part == 0 ? r.lock : part == 1 ? r.per_thread : part == 2 ? r.per_held_lock : r.per_waiter;
            std::string note;
            if (part == 0 && std::find(notes_given.begin(), notes_given.end(), r.note) == notes_given.end()) {
                notes_given.push_back(r.note);
                note = r.note;
            }
            h.report("space", {{"part", parts[part]}}, bytes, harness::summarize(e.name, {static_cast<double>(v)}),
                     e.name == g_reference, note);
        }
    }
}

// ---------------------------------------------------------------------------
// leveldb

// The SPINDLE_LOCK values to try when the library does not list its own
// (see preload_values).
const std::vector<std::string> candidate_preload_locks = {
    "hemlock",      "mcs",      "clh",      "ticket",      "tas",      "ttas",      "pthread",
    "hemlock_park", "mcs_park", "clh_park", "ticket_park", "tas_park", "ttas_park",
    "tclock",       "tclock_blocking",
};

std::string g_tmp_dir;  // the filled database's directory, removed at exit

void remove_tmp_dir() {
    if (g_tmp_dir.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(g_tmp_dir, ec);
    g_tmp_dir.clear();
}

std::string exe_dir() {
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string(".") : p.parent_path().string();
}

struct child_output {
    std::string out, err;
    int status = 0;  // exit status; 128 + N for signal N
};

// Runs the driver with `args`; `lock` empty: plain glibc, else under the
// preload library with SPINDLE_LOCK=lock. The environment is ours without
// LD_PRELOAD and SPINDLE_LOCK, plus those two where asked. Its stdout is
// returned; its stderr too when `keep_stderr` (else it goes to ours). A
// driver that has not finished within `limit_s` is killed; within a
// measurement the variant is then recorded as hung (measurement_hung),
// elsewhere (the fill, the probes) the run fails.
child_output run_driver(const std::string& driver, const std::vector<std::string>& args, const std::string& preload,
                        const std::string& lock, double limit_s, bool keep_stderr = false) {
    std::vector<std::string> env_store;
    for (char** e = environ; *e != nullptr; ++e)
        if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0 && std::strncmp(*e, "SPINDLE_LOCK=", 13) != 0)
            env_store.emplace_back(*e);
    if (!lock.empty()) {
        env_store.push_back("LD_PRELOAD=" + preload);
        env_store.push_back("SPINDLE_LOCK=" + lock);
    }
    if (spindle::bench::test_hang_children()) env_store.push_back("SPINDLE_BENCH_TEST_HANG=1");
    limit_s = spindle::bench::child_limit_s(limit_s);
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_store{driver};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argvp;
    for (auto& a : argv_store) argvp.push_back(a.data());
    argvp.push_back(nullptr);

    int out_fds[2], err_fds[2] = {-1, -1};
    if (pipe2(out_fds, O_CLOEXEC) != 0 || (keep_stderr && pipe2(err_fds, O_CLOEXEC) != 0))
        fail("leveldb: pipe: %s", std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fds[1], STDOUT_FILENO);
    if (keep_stderr) posix_spawn_file_actions_adddup2(&fa, err_fds[1], STDERR_FILENO);
    pid_t pid = 0;
    std::fflush(nullptr);
    const int err = posix_spawn(&pid, driver.c_str(), &fa, nullptr, argvp.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(out_fds[1]);
    if (keep_stderr) close(err_fds[1]);
    if (err != 0) fail("leveldb: cannot run %s: %s", driver.c_str(), std::strerror(err));
    spindle::bench::watch_child(pid);  // killed by the harness's watchdog if the measurement hangs
    child_output r;
    pollfd pfds[2] = {{out_fds[0], POLLIN, 0}, {err_fds[0], POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_fds = keep_stderr ? 2 : 1;
    const double deadline = now_ns() + limit_s * 1e9;
    while (open_fds > 0) {
        const double left_ms = (deadline - now_ns()) / 1e6;
        if (left_ms <= 0) {
            kill(pid, SIGKILL);
            int ignored = 0;
            (void)spindle::bench::reap_child(pid, ignored);
            char why[512];
            std::snprintf(why, sizeof why, "leveldb: %s %s did not finish within %.0f s (%s)", driver.c_str(),
                          args.empty() ? "" : args.front().c_str(), limit_s,
                          lock.empty() ? "glibc" : ("SPINDLE_LOCK=" + lock).c_str());
            spindle::bench::measurement_hung(why);  // or fails the run, outside a measurement
        }
        const int k = poll(pfds, keep_stderr ? 2 : 1, static_cast<int>(std::min(left_ms, 1000.0)) + 1);
        if (k < 0 && errno != EINTR) fail("leveldb: poll: %s", std::strerror(errno));
        if (k <= 0) continue;
        for (int i = 0; i < 2; ++i) {
            if (pfds[i].fd < 0 || pfds[i].revents == 0) continue;
            char buf[4096];
            const ssize_t n = read(pfds[i].fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close(pfds[i].fd);
                pfds[i].fd = -1;
                --open_fds;
                continue;
            }
            sinks[i]->append(buf, static_cast<std::size_t>(n));
        }
    }
    int status = 0;
    if (!spindle::bench::reap_child(pid, status)) fail("leveldb: waitpid: %s", std::strerror(errno));
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) spindle::bench::after_child_killed();  // the watchdog's?
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

// The driver's run, which must have succeeded.
std::string driver_ok(const child_output& r, const std::string& what) {
    if (r.status != 0)
        fail("leveldb: the driver failed (%s %d) %s", r.status >= 128 ? "signal" : "status",
             r.status >= 128 ? r.status - 128 : r.status, what.c_str());
    return r.out;
}

// `field=value` from a driver's output line.
std::string field(const std::string& out, const std::string& name) {
    const std::size_t at = out.find(name + "=");
    if (at == std::string::npos) fail("leveldb: no %s= in the driver's output '%s'", name.c_str(), out.c_str());
    const std::size_t from = at + name.size() + 1;
    const std::size_t end = out.find_first_of(" \n", from);
    return out.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

// One measurement: ops/s of the driver under `lock` (empty: glibc), checked
// to have used that lock. With one reader (`per_cpu_second`), Gets per
// second of its CPU time: a lone reader never waits for a lock, so all the
// time it did not run was taken by other processes, and on a shared machine
// that share varies from one process to the next far more than the locks
// differ.
double leveldb_measure(const std::string& driver, const std::vector<std::string>& args, const std::string& preload,
                       const std::string& lock, double limit_s, bool per_cpu_second) {
    const std::string what = lock.empty() ? "under glibc" : "under SPINDLE_LOCK=" + lock + " LD_PRELOAD=" + preload;
    const std::string out = driver_ok(run_driver(driver, args, preload, lock, limit_s), what);
    const std::string from = field(out, "mutex_from"), used = field(out, "lock");
    if (lock.empty() ? from.find("spindle") != std::string::npos || used != "glibc"
                     : from.find("spindle_preload") == std::string::npos || used != lock)
        fail("leveldb: %s, pthread_mutex_lock came from %s and the lock was %s", what.c_str(), from.c_str(),
             used.c_str());
    g_cpu_shares.push_back(std::strtod(field(out, "cpu_share").c_str(), nullptr));
    return std::strtod(field(out, per_cpu_second ? "ops_per_cpu_s" : "ops_per_s").c_str(), nullptr);
}

// The SPINDLE_LOCK values the library offers: it names them when given one
// it does not know ("... is not valid; valid values: hemlock, mcs, ..."); if
// that message cannot be read, the candidates it accepts (one probe each).
std::vector<std::string> preload_values(const std::string& driver, const std::string& preload) {
    const child_output bad = run_driver(driver, {"--probe"}, preload, "spindle-bench-no-such-lock", 30, true);
    const std::string tag = "valid values: ";
    const std::size_t at = bad.err.find(tag);
    std::vector<std::string> v;
    if (bad.status != 0 && at != std::string::npos) {
        std::string list = bad.err.substr(at + tag.size());
        list = list.substr(0, list.find('\n'));
        for (std::string& name : parse_names(list)) {
            const std::size_t b = name.find_first_not_of(' '), e = name.find_last_not_of(' ');
            if (b != std::string::npos) v.push_back(name.substr(b, e - b + 1));
        }
    }
    if (!v.empty()) return v;
    std::fprintf(stderr, "locks/leveldb: the preload library did not list its locks; probing the usual names\n");
    for (const std::string& l : candidate_preload_locks) {
        const child_output r = run_driver(driver, {"--probe"}, preload, l, 30, true);
        if (r.status == 0 && r.out.find("lock=" + l) != std::string::npos) v.push_back(l);
    }
    return v;
}

// libspindle_preload.so: --preload, SPINDLE_PRELOAD_LIB, else the one this
// build made.
std::string preload_library(const run_options& o) {
#ifdef SPINDLE_BENCH_PRELOAD_LIBRARY
    const std::string built = SPINDLE_BENCH_PRELOAD_LIBRARY;
#else
    const std::string built = exe_dir() + "/../preload/libspindle_preload.so";
#endif
    std::string preload = o.preload.empty() ? built : o.preload;
    std::error_code ec;
    if (auto c = std::filesystem::weakly_canonical(preload, ec); !ec) preload = c.string();
    return preload;
}

void bench_leveldb(harness& h, const run_options& o) {
    const std::string driver = o.driver.empty() ? exe_dir() + "/spindle_leveldb_driver" : o.driver;
    if (access(driver.c_str(), X_OK) != 0) {
        std::fprintf(stderr,
                     "locks/leveldb: SKIPPED: no LevelDB driver at %s (it is built when libleveldb-dev is "
                     "installed: scripts/deps.sh bench)\n",
                     driver.c_str());
        return;
    }
    const std::string preload = preload_library(o);
    const bool have_preload = access(preload.c_str(), R_OK) == 0;
    std::vector<std::string> locks;
    if (!have_preload) {
        std::fprintf(stderr,
                     "locks/leveldb: SKIPPED the spindle locks: no preload library at %s (build preload/, or name it "
                     "with --preload PATH or SPINDLE_PRELOAD_LIB); measuring glibc alone\n",
                     preload.c_str());
    } else {
        for (const std::string& l : o.preload_locks.empty() ? preload_values(driver, preload) : o.preload_locks)
            if (lock_wanted(o, l == "pthread" ? "preload_pthread" : l)) locks.push_back(l);
        std::string list;
        for (auto& l : locks) list += (list.empty() ? "" : ", ") + l;
        std::fprintf(stderr, "locks/leveldb: SPINDLE_LOCK values: %s\n", list.c_str());
    }

    // Beside --out, where tools/bench.py removes it whatever happens to this
    // program; the harness removes it before a restart.
    g_tmp_dir = h.make_scratch_dir("leveldb");
    if (g_tmp_dir.empty()) fail("leveldb: cannot make a directory for the database: %s", std::strerror(errno));
    const std::string db = g_tmp_dir + "/db";
    const unsigned entries = h.quick() ? 100'000 : 1'000'000;
    const double t_fill = now_ns();
    driver_ok(run_driver(driver, {"--db", db, "--fill", "--entries", std::to_string(entries)}, "", "", 600),
              "filling the database");
    std::fprintf(stderr, "locks/leveldb: filled %u entries in %.1f s\n", entries, (now_ns() - t_fill) / 1e9);

    std::vector<unsigned> ts = o.leveldb_threads;
    if (ts.empty()) ts = h.quick() ? std::vector<unsigned>{1, 2} : std::vector<unsigned>{1, 2, 4, 8};
    const double seconds = o.leveldb_seconds > 0 ? o.leveldb_seconds : (h.quick() ? 0.2 : 1.0);
    const unsigned warmup_ms = h.quick() ? 40 : 200;
    const std::string common = "LevelDB " + std::to_string(entries) +
                               " entries (16-byte keys, 100-byte values), readrandom for " +
                               param::number(seconds) + " s after " + std::to_string(warmup_ms) +
                               " ms of warm-up, block cache holding the whole database; one driver process per "
                               "measurement";
    for (unsigned t : ts) {
        const std::vector<std::string> args{"--db",        db,
                                            "--threads",   std::to_string(t),
                                            "--seconds",   param::number(seconds),
                                            "--warmup-ms", std::to_string(warmup_ms),
                                            "--entries",   std::to_string(entries)};
        const double limit_s = 60 + 4 * seconds;
        std::vector<variant> vs;
        vs.push_back(variant(
            "glibc", [=] { return leveldb_measure(driver, args, preload, "", limit_s, t == 1); }, true,
            "plain glibc pthread mutexes (no LD_PRELOAD); " + common +
                (t == 1 ? "; one reader: Gets per second of its own CPU time (what other processes took is not "
                          "counted)"
                        : "") +
                (have_preload ? "" : "; the preload library was not built: spindle's locks not measured")));
        for (const std::string& l : locks)
            vs.push_back(variant(
                l == "pthread" ? "preload_pthread" : l,
                [=] { return leveldb_measure(driver, args, preload, l, limit_s, t == 1); }, false,
                "LD_PRELOAD=libspindle_preload.so SPINDLE_LOCK=" + l +
                    (l == "pthread" ? " (pass-through to glibc: the interposition's own cost)" : "")));
        (void)take_cpu_shares();
        g_leveldb_results[t] = h.compare("leveldb", {{"threads", t}}, {"ops_per_s", true}, vs, h.reps(5, 7));
        std::vector<double> shares = take_cpu_shares();
        std::sort(shares.begin(), shares.end());
        if (!shares.empty())
            std::fprintf(stderr, "    CPU time the readers got: %.0f%% of %u CPU(s) (median; lowest %.0f%%)\n",
                         100 * harness::summarize("", shares).median, std::min(t, g_cpus), 100 * shares.front());
    }
    h.remove_scratch_dir(g_tmp_dir);
    g_tmp_dir.clear();
}

// ---------------------------------------------------------------------------
// preload_spin

std::map<unsigned, std::vector<summary>> g_spin_results;  // threads -> summaries

// One measurement: ops/s of `spindle_bench_locks --spin-child` under `lock`
// (empty: glibc), checked to have used that lock.
double spin_measure(const std::string& self, const std::vector<std::string>& args, const std::string& preload,
                    const std::string& lock) {
    const std::string what = lock.empty() ? "under glibc" : "under SPINDLE_LOCK=" + lock + " LD_PRELOAD=" + preload;
    const std::string out = driver_ok(run_driver(self, args, preload, lock, 60), what);
    const std::string from = field(out, "spin_from"), used = field(out, "lock");
    if (lock.empty() ? from.find("spindle") != std::string::npos || used != "glibc"
                     : from.find("spindle_preload") == std::string::npos || used != lock)
        fail("preload_spin: %s, pthread_spin_lock came from %s and the lock was %s", what.c_str(), from.c_str(),
             used.c_str());
    return std::strtod(field(out, "ops_per_s").c_str(), nullptr);
}

void bench_preload_spin(harness& h, const run_options& o) {
    const std::string self = exe_dir() + "/spindle_bench_locks";
    const std::string preload = preload_library(o);
    if (access(preload.c_str(), R_OK) != 0) {
        std::fprintf(stderr,
                     "locks/preload_spin: SKIPPED: no preload library at %s (build preload/, or name it with "
                     "--preload PATH or SPINDLE_PRELOAD_LIB)\n",
                     preload.c_str());
        return;
    }
    std::vector<std::string> locks;
    for (const std::string& l : o.preload_locks.empty() ? preload_values(self, preload) : o.preload_locks)
        if (lock_wanted(o, l == "pthread" ? "preload_pthread" : l)) locks.push_back(l);
    std::vector<unsigned> ts = o.spin_threads;
    if (ts.empty()) ts = {g_cpus, 2 * g_cpus, 4 * g_cpus};
    const unsigned window_ms = static_cast<unsigned>(o.window_ms > 0 ? o.window_ms : (h.quick() ? 100 : 300));
    const std::string common = "pthread_spin_lock; one shared line + 1; pthread_spin_unlock, in a loop, on one "
                               "pthread_spinlock_t; " +
                               std::to_string(window_ms) + " ms after 20 ms of warm-up; one process per measurement";
    for (unsigned t : ts) {
        const std::vector<std::string> args{"--spin-child", std::to_string(t), std::to_string(window_ms), "20"};
        std::vector<variant> vs;
        vs.push_back(variant(
            "glibc", [=] { return spin_measure(self, args, preload, ""); }, true,
            "plain glibc pthread_spin_* (no LD_PRELOAD); " + common));
        for (const std::string& l : locks)
            vs.push_back(variant(
                l == "pthread" ? "preload_pthread" : l, [=] { return spin_measure(self, args, preload, l); }, false,
                "LD_PRELOAD=libspindle_preload.so SPINDLE_LOCK=" + l +
                    (l == "pthread" ? " (pass-through to glibc: the interposition's own cost)" : "")));
        g_spin_results[t] = h.compare("preload_spin", {{"threads", t}, {"cpus", g_cpus}}, {"ops_per_s", true}, vs,
                                      h.reps(5, 7));
    }
}

// ---------------------------------------------------------------------------
// The targets

enum class goal { above, at_least, at_most, none };

// One line: the median of per-round ratios a / b of one comparison, against
// the goal. Says so when either was not measured.
void target_line(const std::vector<summary>* ss, const std::string& a, const std::string& b, goal g, double bound) {
    std::optional<double> r;
    if (ss != nullptr) r = round_ratio(*ss, a, b);
    if (!r) {
        std::fprintf(stderr, "    %s / %s: not measured\n", a.c_str(), b.c_str());
        return;
    }
    if (g == goal::none) {
        std::fprintf(stderr, "    %s / %s = %.3g\n", a.c_str(), b.c_str(), *r);
        return;
    }
    const bool met = g == goal::above ? *r > bound : g == goal::at_least ? *r >= bound : *r <= bound;
    std::fprintf(stderr, "    %s / %s = %.3g (target %s %.2g): %s\n", a.c_str(), b.c_str(), *r,
                 g == goal::above ? ">" : g == goal::at_least ? ">=" : "<=", bound, met ? "met" : "MISSED");
}

const std::vector<summary>* find(const results& res, const std::string& k) {
    auto it = res.by_key.find(k);
    return it == res.by_key.end() ? nullptr : &it->second;
}

// "; CPU time the threads got: 93%, lowest 50%" for a comparison, if known.
std::string share_text(const std::string& k) {
    auto it = g_share_by_key.find(k);
    if (it == g_share_by_key.end()) return "";
    char buf[96];
    std::snprintf(buf, sizeof buf, "; CPU time the threads got: %.0f%%, lowest %.0f%%", 100 * it->second.first,
                  100 * it->second.second);
    return buf;
}

void print_targets(const results& res, const run_options& o) {
    std::fprintf(stderr, "locks targets (medians of the per-round ratios of this run):\n");
    const section empty{0, 0};
    const std::string ref = g_reference;
    if (const auto* ss = find(res, key("mutexbench", 1, empty))) {
        std::fprintf(stderr, "  uncontended, 1 thread, empty sections (ns per lock + unlock; X / %s > 1: %s faster%s):\n",
                     ref.c_str(), ref.c_str(), share_text(key("mutexbench", 1, empty)).c_str());
        for (const char* other : {"pthread", "std_mutex", "mcs", "clh"})
            if (other != ref) target_line(ss, other, ref, goal::above, 1.0);
        target_line(ss, ref, "ticket", goal::at_most, 2.2);
        for (const char* other : {"tas", "ttas"}) target_line(ss, other, ref, goal::none, 0);
    }
    if (const auto* ss = find(res, key("mutexbench", 2, empty))) {
        std::fprintf(stderr, "  2 threads, empty sections (ops/s; %s / X >= 1: %s at least as fast%s):\n", ref.c_str(),
                     ref.c_str(), share_text(key("mutexbench", 2, empty)).c_str());
        for (const char* other : {"mcs", "clh"}) target_line(ss, ref, other, goal::at_least, 1.0);
        for (const char* other : {"pthread", "std_mutex", "tas", "ttas", "ticket"})
            if (other != ref) target_line(ss, ref, other, goal::none, 0);
    }
    // TCLocks (tclock >= mcs with sections writing 4-16 lines). With 2 threads
    // there is at most one waiter, and a combiner needs two: what keeps the
    // lines in one cache there is the unfair TAS fast path.
    for (const auto& [k, ss] : res.by_key) {
        unsigned lines = 0, ncs = 0;
        if (std::sscanf(k.c_str(), "mutexbench t=2 %u:%u", &lines, &ncs) != 2 || lines < 4 || lines > 16) continue;
        std::fprintf(stderr, "  2 threads, sections writing %u lines, %u ns outside (ops/s; X / mcs%s):\n", lines, ncs,
                     share_text(k).c_str());
        target_line(&ss, "tclock", "mcs", goal::at_least, 1.0);
        for (const char* other : {"tclock_blocking", "hemlock", "pthread"}) target_line(&ss, other, "mcs", goal::none, 0);
    }
    for (const auto& [k, ss] : res.by_key) {
        if (k.rfind("oversubscribed", 0) != 0) continue;
        std::fprintf(stderr, "  %s (ops/s; X / pthread%s):\n", k.c_str(), share_text(k).c_str());
        for (const lock_entry& e : all_locks()) {
            if (e.how == waits::os || !lock_wanted(o, e.name)) continue;
            if (e.how == waits::spin_then_park) target_line(&ss, e.name, "pthread", goal::at_least, 0.8);
        }
        for (const lock_entry& e : all_locks()) {
            if (e.how != waits::spin || !lock_wanted(o, e.name)) continue;
            target_line(&ss, e.name, "pthread", goal::none, 0);
        }
    }
    if (!g_spin_results.empty()) {
        std::fprintf(stderr,
                     "  preload_spin, pthread_spin_* on %u CPU(s) (ops/s; X / glibc: the ratio of the medians, "
                     "then the median of the per-round ratios; the park values and tclock_blocking promise "
                     "glibc's rate):\n",
                     g_cpus);
        for (const auto& [t, ss] : g_spin_results) {
            std::fprintf(stderr, "   threads=%u:\n", t);
            const summary* ref = nullptr;
            for (const summary& s : ss)
                if (s.variant == "glibc") ref = &s;
            for (const summary& s : ss) {
                if (ref == nullptr || &s == ref || !(ref->median > 0)) continue;
                const bool parks = s.variant == "tclock_blocking" ||
                                   (s.variant.size() > 5 && s.variant.compare(s.variant.size() - 5, 5, "_park") == 0);
                const double r = s.median / ref->median;
                const std::optional<double> per_round = round_ratio(ss, s.variant, "glibc");
                std::fprintf(stderr, "    %s / glibc = %.3g (per round %.3g; %.3g vs %.3g M/s)%s\n",
                             s.variant.c_str(), r, per_round.value_or(0), s.median / 1e6, ref->median / 1e6,
                             !parks ? "" : r >= 0.8 ? " (target >= 0.8): met" : " (target >= 0.8): MISSED");
            }
        }
    }
    if (!g_leveldb_results.empty()) {
        std::fprintf(stderr, "  leveldb readrandom (ops/s; X / glibc):\n");
        for (const auto& [t, ss] : g_leveldb_results) {
            std::fprintf(stderr, "   threads=%u:%s\n", t, ss.size() < 2 ? " no spindle lock measured" : "");
            for (const summary& s : ss)
                if (s.variant != "glibc")
                    target_line(&ss, s.variant, "glibc", t <= 2 ? goal::at_least : goal::none, 0.9);
        }
    }
}

// ---------------------------------------------------------------------------
// Command line

std::vector<unsigned> parse_list(const std::string& s, const char* what, unsigned lo) {
    return parse_numbers(s, what, lo, 100'000, fail);
}

double parse_positive(const std::string& s, const char* what) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(v > 0 && v < 1e6)) fail("bad %s '%s'", what, s.c_str());
    return v;
}

// Takes this program's own arguments out of argv, leaving the harness's.
run_options take_own_args(int& argc, char** argv) {
    run_options o;
    if (const char* env = std::getenv("SPINDLE_PRELOAD_LIB"); env != nullptr) o.preload = env;
    spindle::bench::take_own_args(
        argc, argv,
        "spindle_bench_locks also takes: [--threads 1,2,4] [--sections 0:0,2:200] "
        "[--oversubscribed-threads N] [--window-ms N] [--locks hemlock,mcs,pthread,...] "
        "[--leveldb-threads 1,2] [--leveldb-seconds S] [--preload PATH] "
        "[--preload-locks hemlock,mcs,...] [--leveldb-driver PATH] [--spin-threads 2,4,8]",
        fail,
        {
            {"--threads", [&](const std::string& v) { o.threads = parse_list(v, "thread count", 1); }},
            {"--sections",
             [&](const std::string& v) {
                 for (const std::string& item : parse_names(v)) {
                     const std::size_t colon = item.find(':');
                     if (colon == std::string::npos) fail("bad section '%s' (want CS_LINES:NCS_NS)", item.c_str());
                     section sec;
                     sec.cs_lines = parse_list(item.substr(0, colon), "cs_lines", 0).front();
                     sec.ncs_ns = parse_list(item.substr(colon + 1), "ncs_ns", 0).front();
                     o.sections.push_back(sec);
                 }
             }},
            {"--oversubscribed-threads",
             [&](const std::string& v) { o.oversub_threads = parse_list(v, "thread count", 1).front(); }},
            {"--window-ms", [&](const std::string& v) { o.window_ms = parse_positive(v, "window"); }},
            {"--locks", [&](const std::string& v) { o.locks = parse_names(v); }},
            {"--leveldb-threads", [&](const std::string& v) { o.leveldb_threads = parse_list(v, "thread count", 1); }},
            {"--leveldb-seconds", [&](const std::string& v) { o.leveldb_seconds = parse_positive(v, "duration"); }},
            {"--preload", [&](const std::string& v) { o.preload = v; }},
            {"--preload-locks", [&](const std::string& v) { o.preload_locks = parse_names(v); }},
            {"--leveldb-driver", [&](const std::string& v) { o.driver = v; }},
            {"--spin-threads", [&](const std::string& v) { o.spin_threads = parse_list(v, "thread count", 1); }},
        });
    return o;
}

// ---------------------------------------------------------------------------
// preload_spin's child

// The child side: `--spin-child T WINDOW_MS WARMUP_MS` runs the loop and
// prints "preload_spin threads=T ops=N ops_per_s=X spin_from=FILE lock=NAME"
// (FILE: the object pthread_spin_lock resolved to; NAME: the preload
// library's lock, "glibc" without it). `--probe` prints only the last two.
// The spinlock and the shared line each sit alone on a 128-byte block.
extern "C" const char* spindle_preload_lock_name() __attribute__((weak));

int spin_child(int argc, char** argv) {
    if (std::getenv("SPINDLE_BENCH_TEST_HANG") != nullptr)  // the harness's --test-hang-child
        for (;;) pause();
    Dl_info info{};
    void* fn = dlsym(RTLD_DEFAULT, "pthread_spin_lock");
    const char* from = fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "?";
    const char* lock = spindle_preload_lock_name != nullptr ? spindle_preload_lock_name() : "glibc";
    if (std::strcmp(argv[1], "--probe") == 0) {
        std::printf("spin_from=%s lock=%s\n", from, lock);
        return 0;
    }
    if (argc != 5) fail("usage: spindle_bench_locks --spin-child THREADS WINDOW_MS WARMUP_MS");
    const unsigned threads = parse_list(argv[2], "thread count", 1).front();
    const double window_ns = parse_positive(argv[3], "window") * 1e6;
    const double warmup_ns = parse_positive(argv[4], "warm-up") * 1e6;
    struct alignas(block) spin_home {
        pthread_spinlock_t l;
    };
    auto home = std::make_unique<spin_home>();
    auto line = std::make_unique<shared_line>();
    auto counts = std::make_unique<op_counter[]>(threads);
    auto go = std::make_unique<flag>();
    auto stop = std::make_unique<flag>();
    if (pthread_spin_init(&home->l, PTHREAD_PROCESS_PRIVATE) != 0) fail("pthread_spin_init");
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            std::atomic<std::uint64_t>& mine = counts[t].ops;
            // acquire: pairs with the gate's release (the usual pairing).
            while (!go->on.load(std::memory_order_acquire)) std::this_thread::yield();
            std::uint64_t n = 0;
            // relaxed: as in run_lock.
            while (!stop->on.load(std::memory_order_relaxed)) {
                pthread_spin_lock(&home->l);
                ++line->n;
                __asm__ volatile("" ::: "memory");
                pthread_spin_unlock(&home->l);
                mine.store(++n, std::memory_order_relaxed);
            }
        });
    auto total = [&] {
        std::uint64_t sum = 0;
        for (unsigned t = 0; t < threads; ++t) sum += counts[t].ops.load(std::memory_order_relaxed);  // op_counter
        return sum;
    };
    go->on.store(true, std::memory_order_release);  // pairs with the threads' acquire at the gate
    std::this_thread::sleep_for(std::chrono::duration<double, std::nano>(warmup_ns));
    const double t0 = now_ns();
    const std::uint64_t c0 = total();
    std::this_thread::sleep_for(std::chrono::duration<double, std::nano>(window_ns));
    const std::uint64_t c1 = total();
    const double t1 = now_ns();
    stop->on.store(true, std::memory_order_relaxed);  // only ends the loops; join() orders the line
    for (auto& th : ts) th.join();
    if (line->n != total()) fail("--spin-child: the spinlock let two threads in (%llu != %llu)",
                                 static_cast<unsigned long long>(line->n), static_cast<unsigned long long>(total()));
    pthread_spin_destroy(&home->l);
    std::printf("preload_spin threads=%u ops=%llu ops_per_s=%.0f spin_from=%s lock=%s\n", threads,
                static_cast<unsigned long long>(c1 - c0), static_cast<double>(c1 - c0) * 1e9 / (t1 - t0), from, lock);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && (std::strcmp(argv[1], "--spin-child") == 0 || std::strcmp(argv[1], "--probe") == 0))
        return spin_child(argc, argv);
    run_options o = take_own_args(argc, argv);
    harness h(argc, argv, "locks");
    g_cpus = std::max(1u, std::thread::hardware_concurrency());
    g_spin_ns = spindle::bench::calibrate_spin(h, "locks");
    results res;
    if (h.wants("mutexbench")) bench_mutex(h, o, res, "mutexbench");
    if (h.wants("oversubscribed")) bench_mutex(h, o, res, "oversubscribed");
    if (h.wants("space")) bench_space(h, o);
    if (h.wants("leveldb")) bench_leveldb(h, o);
    if (h.wants("preload_spin")) bench_preload_spin(h, o);
    print_targets(res, o);
    return 0;
}
