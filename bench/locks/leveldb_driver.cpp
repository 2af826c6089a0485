// bench/locks/leveldb_driver.cpp — LevelDB `readrandom` for the locks suite
// (docs/benchmarks.md, "Thread locks", workload `leveldb`).
//
// A plain glibc program linked against Debian's libleveldb and nothing of
// spindle's: the lock under test is chosen from outside, by running it under
// LD_PRELOAD=libspindle_preload.so with SPINDLE_LOCK=<lock>, which replaces
// the pthread_mutex_* calls LevelDB makes (its port::Mutex is a std::mutex,
// i.e. pthread_mutex_lock/unlock). spindle_bench_locks runs this program
// once per measurement, interleaving the locks round by round.
//
// What it measures. The database is filled once (`--fill`): `entries` keys
// "%016u" in order, values of `value_bytes` pseudo-random bytes, then one
// full compaction so that no background work is left. A read run opens it
// with a block cache large enough to hold all of it, starts T threads that
// each loop { pick a key uniformly at random; DB::Get }, lets them warm the
// cache for `--warmup-ms`, and counts the Gets completed in the next
// `--seconds` (each thread publishes its count after every Get; the main
// thread reads the counts at the window's two ends, so the time the threads
// need to notice the stop flag is not measured). Every Get must find its key.
//
// Where the locks are. Each Get takes the DB mutex twice (to reference the
// current version and memtables, and to drop the references), plus the mutex
// of one shard of the table cache and one shard of the block cache per block
// read: short critical sections, taken very often, so T threads on T CPUs
// contend on them the way a real read-mostly server does.
//
// Usage:
//   spindle_leveldb_driver --db DIR --fill [--entries N] [--value-bytes B]
//   spindle_leveldb_driver --db DIR [--threads T] [--seconds S] [--warmup-ms W]
//   spindle_leveldb_driver [--threads T] ...   (temporary database: fill, read, remove)
//   spindle_leveldb_driver --probe
// Output (stdout), one line per read run:
//   readrandom threads=T entries=N seconds=S gets=G ops_per_s=X cpu_share=C ops_per_cpu_s=Y
//              mutex_from=FILE lock=NAME
// where C is the CPU time the readers got in the window over what
// min(T, CPUs) CPUs give (below 1: they waited, slept in a lock, or another
// process had the CPU), Y the Gets per second of the readers' CPU time, FILE is the shared object pthread_mutex_lock resolved to in this
// process (libc.so.6, or libspindle_preload.so when the preload took effect)
// and NAME the lock the preload library installed (its
// spindle_preload_lock_name(); "glibc" without the library), so that a
// caller can tell a measurement of glibc from one of spindle, and one lock
// from another. `--probe` prints only `mutex_from=FILE lock=NAME` after one
// pthread_mutex_lock, without a database.
// Exit status: 0 on success, 1 on a LevelDB error or a missing key, 2 on a
// usage error. With SPINDLE_BENCH_TEST_HANG in its environment (the
// harness's --test-hang-child, test only) it blocks forever instead, as a
// lock that never returns would leave it.

#include <leveldb/cache.h>
#include <leveldb/db.h>
#include <leveldb/options.h>
#include <leveldb/write_batch.h>

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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include "../harness/work.hpp"

namespace {

[[noreturn]] __attribute__((format(printf, 2, 3))) void die(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "spindle_leveldb_driver: ");
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    std::exit(code);
}

struct options {
    std::string db;  // empty: a temporary database, removed at the end
    bool fill = false;
    bool probe = false;
    unsigned entries = 100'000;
    unsigned value_bytes = 100;
    unsigned threads = 1;
    double seconds = 1.0;
    unsigned warmup_ms = 100;
};

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// splitmix64: a fast per-thread generator, the same on every platform.
using rng = spindle::bench::splitmix64;

void make_key(char (&buf)[17], unsigned k) { std::snprintf(buf, sizeof buf, "%016u", k); }

// A block cache that holds the whole database (~entries * (16 + value) bytes
// plus block overhead), so that reads measure the locks and the lookups,
// not the file system.
std::size_t cache_bytes(const options& o) {
    return std::max<std::size_t>(8u << 20, static_cast<std::size_t>(o.entries) * (o.value_bytes + 64) * 2);
}

std::unique_ptr<leveldb::DB> open_db(const options& o, leveldb::Cache* cache, bool create) {
    leveldb::Options opt;
    opt.create_if_missing = create;
    opt.error_if_exists = create;
    opt.block_cache = cache;
    leveldb::DB* db = nullptr;
    leveldb::Status st = leveldb::DB::Open(opt, o.db, &db);
    if (!st.ok()) die(1, "open %s: %s", o.db.c_str(), st.ToString().c_str());
    return std::unique_ptr<leveldb::DB>(db);
}

void fill(const options& o) {
    std::unique_ptr<leveldb::Cache> cache(leveldb::NewLRUCache(cache_bytes(o)));
    std::unique_ptr<leveldb::DB> db = open_db(o, cache.get(), true);
    rng r{0x5EED};
    std::string value(o.value_bytes, '\0');
    constexpr unsigned batch_size = 1000;
    leveldb::WriteBatch batch;
    for (unsigned k = 0; k < o.entries; ++k) {
        for (auto& c : value) c = static_cast<char>('a' + r.next() % 26);
        char key[17];
        make_key(key, k);
        batch.Put(leveldb::Slice(key, 16), value);
        if ((k + 1) % batch_size == 0 || k + 1 == o.entries) {
            leveldb::Status st = db->Write(leveldb::WriteOptions(), &batch);
            if (!st.ok()) die(1, "write: %s", st.ToString().c_str());
            batch.Clear();
        }
    }
    // Leave no memtable and no pending compaction behind: reads then find
    // every key in sorted tables, and no background thread competes with them.
    db->CompactRange(nullptr, nullptr);
}

// One thread's published count, on its own cache line.
struct alignas(128) counter {
    std::atomic<std::uint64_t> gets{0};
};

// The file that defines the pthread_mutex_lock this process calls (the one
// LevelDB's calls resolve to as well: both go through the global scope,
// where an LD_PRELOAD library comes first).
std::string mutex_provider() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&pthread_mutex_lock), &info) == 0 || info.dli_fname == nullptr)
        return "unknown";
    return std::filesystem::path(info.dli_fname).filename().string();
}

}  // namespace

// Defined by libspindle_preload.so; null when it is not loaded.
extern "C" const char* spindle_preload_lock_name(void) __attribute__((weak));

namespace {

std::string lock_name() { return spindle_preload_lock_name != nullptr ? spindle_preload_lock_name() : "glibc"; }

void probe() {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    std::printf("mutex_from=%s lock=%s\n", mutex_provider().c_str(), lock_name().c_str());
}

void readrandom(const options& o) {
    std::unique_ptr<leveldb::Cache> cache(leveldb::NewLRUCache(cache_bytes(o)));
    std::unique_ptr<leveldb::DB> db = open_db(o, cache.get(), false);
    std::vector<counter> counts(o.threads);
    std::atomic<bool> stop{false};
    std::atomic<unsigned> missing{0};
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < o.threads; ++t)
        ts.emplace_back([&, t] {
            rng r{0xC0FFEEull * (t + 1)};
            leveldb::ReadOptions ro;
            std::string value;
            std::uint64_t n = 0;
            // relaxed: `stop` only ends the loop, and the counts are read
            // for their value alone; join() orders everything else.
            while (!stop.load(std::memory_order_relaxed)) {
                char key[17];
                make_key(key, static_cast<unsigned>(r.next() % o.entries));
                leveldb::Status st = db->Get(ro, leveldb::Slice(key, 16), &value);
                if (!st.ok() || value.size() != o.value_bytes) missing.fetch_add(1, std::memory_order_relaxed);
                counts[t].gets.store(++n, std::memory_order_relaxed);
            }
        });
    auto total = [&] {
        std::uint64_t s = 0;
        for (auto& c : counts) s += c.gets.load(std::memory_order_relaxed);
        return s;
    };
    // The readers' CPU clocks: how much of the window they ran (on a shared
    // machine, less than all of it).
    std::vector<clockid_t> clocks(o.threads);
    for (unsigned t = 0; t < o.threads; ++t)
        if (pthread_getcpuclockid(ts[t].native_handle(), &clocks[t]) != 0) die(1, "pthread_getcpuclockid failed");
    auto cpu_s = [&] {
        double sum = 0;
        for (clockid_t c : clocks) {
            timespec x{};
            if (clock_gettime(c, &x) == 0) sum += static_cast<double>(x.tv_sec) + static_cast<double>(x.tv_nsec) * 1e-9;
        }
        return sum;
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(o.warmup_ms));
    const double t0 = now_s();
    const std::uint64_t g0 = total();
    const double cpu0 = cpu_s();
    std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
    const double cpu1 = cpu_s();
    const std::uint64_t g1 = total();
    const double t1 = now_s();
    const unsigned cpus = std::max(1u, std::min(o.threads, std::thread::hardware_concurrency()));
    stop.store(true, std::memory_order_relaxed);
    for (auto& t : ts) t.join();
    if (missing.load() != 0) die(1, "%u Gets did not find their key (was the database filled?)", missing.load());
    std::printf(
        "readrandom threads=%u entries=%u seconds=%.3f gets=%llu ops_per_s=%.1f cpu_share=%.3f ops_per_cpu_s=%.1f "
        "mutex_from=%s lock=%s\n",
        o.threads, o.entries, t1 - t0, static_cast<unsigned long long>(g1 - g0), static_cast<double>(g1 - g0) / (t1 - t0),
        (cpu1 - cpu0) / (cpus * (t1 - t0)), static_cast<double>(g1 - g0) / std::max(cpu1 - cpu0, 1e-9),
        mutex_provider().c_str(), lock_name().c_str());
    std::fflush(stdout);
}

unsigned parse_unsigned(const char* s, const char* what, unsigned lo) {
    char* end = nullptr;
    unsigned long v = std::strtoul(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > 100'000'000) die(2, "bad %s '%s'", what, s);
    return static_cast<unsigned>(v);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) die(2, "missing value after %s", a.c_str());
            return argv[++i];
        };
        if (a == "--db") o.db = value();
        else if (a == "--fill") o.fill = true;
        else if (a == "--probe") o.probe = true;
        else if (a == "--entries") o.entries = parse_unsigned(value(), "entry count", 1);
        else if (a == "--value-bytes") o.value_bytes = parse_unsigned(value(), "value size", 1);
        else if (a == "--threads") o.threads = parse_unsigned(value(), "thread count", 1);
        else if (a == "--warmup-ms") o.warmup_ms = parse_unsigned(value(), "warm-up", 0);
        else if (a == "--seconds") {
            const char* s = value();
            char* end = nullptr;
            o.seconds = std::strtod(s, &end);
            if (*end != '\0' || !(o.seconds > 0 && o.seconds <= 3600)) die(2, "bad duration '%s'", s);
        } else if (a == "--help" || a == "-h") {
            std::printf(
                "usage: spindle_leveldb_driver --db DIR --fill [--entries N] [--value-bytes B]\n"
                "       spindle_leveldb_driver --db DIR [--threads T] [--seconds S] [--warmup-ms W]\n"
                "       spindle_leveldb_driver [--threads T] ...  (temporary database)\n"
                "       spindle_leveldb_driver --probe  (which pthread_mutex_lock, which lock)\n"
                "Run under LD_PRELOAD=.../libspindle_preload.so SPINDLE_LOCK=<lock> to choose the lock.\n");
            std::exit(0);
        } else {
            die(2, "unknown argument '%s' (try --help)", a.c_str());
        }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    if (std::getenv("SPINDLE_BENCH_TEST_HANG") != nullptr)
        for (;;) pause();
    options o = parse(argc, argv);
    if (o.probe) {
        probe();
        return 0;
    }
    if (!o.db.empty()) {
        if (o.fill) fill(o);
        else readrandom(o);
        return 0;
    }
    // No --db: a database of our own for this one run.
    std::string tmpl = (std::filesystem::temp_directory_path() / "spindle-leveldb-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) die(1, "mkdtemp %s: %s", tmpl.c_str(), std::strerror(errno));
    o.db = tmpl + "/db";
    fill(o);
    readrandom(o);
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
    return 0;
}
