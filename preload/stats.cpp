// preload/stats.cpp — SPINDLE_STATS=1: per-lock counts, printed at exit.
//
// Only the measuring tables (impl<..., true>) call in here, so with
// statistics off none of this runs and the side table is never allocated.
//
// Side table: an open-addressing hash table of 16384 cache-line slots
// (1 MiB of lazily touched anonymous memory), keyed by (object address,
// kind), filled lock-free: a slot is claimed with one CAS of its key and its
// counters are relaxed fetch_adds. Objects beyond what fits within 64 probes
// are counted together as "other". A mutex destroyed and another created at
// the same address share a slot, as in lockstat.
//
// A fork child starts from zero (stats_forget, from the child handler): its
// report, printed at its exit under its own pid, counts its own locks only,
// not the parent's counts that fork() copied.
//
// The report goes to a copy of stderr taken when statistics start: programs
// such as xz and GNU coreutils close stderr at exit (to catch write errors)
// before library destructors run.
//
// An acquisition counts as contended when the lock was not free on the first
// try; its wait is the time from that failed try to the acquisition
// (CLOCK_MONOTONIC). Timed-out attempts are not counted.
#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdarg>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unistd.h>

#include "internal.hpp"

namespace spindle::preload {

namespace {

struct alignas(64) slot {
    std::atomic<std::uint64_t> key;  // (address << 3) | kind; 0: free
    std::atomic<std::uint64_t> acquisitions;
    std::atomic<std::uint64_t> contended;
    std::atomic<std::uint64_t> wait_ns;
};

constexpr unsigned slot_bits = 14;
constexpr std::size_t slot_count = std::size_t{1} << slot_bits;
constexpr unsigned max_probes = 64;
constexpr unsigned report_top = 10;

std::atomic<slot*> g_slots{nullptr};
std::atomic<int> g_report_fd{STDERR_FILENO};
slot g_other;  // what did not fit

std::uint64_t key_of(const void* object, object_kind kind) noexcept {
    return (reinterpret_cast<std::uintptr_t>(object) << 3) | static_cast<std::uint64_t>(kind);
}

const char* kind_name(std::uint64_t key) noexcept {
    switch (static_cast<object_kind>(key & 7)) {
        case object_kind::mutex: return "mutex";
        case object_kind::rwlock_read: return "rwlock-rd";
        case object_kind::rwlock_write: return "rwlock-wr";
        case object_kind::spin: return "spinlock";
    }
    return "?";
}

slot* find(std::uint64_t key) noexcept {
    // acquire pairs with the release in stats_start: the mapping is ready.
    slot* slots = g_slots.load(std::memory_order_acquire);
    if (slots == nullptr) return &g_other;
    std::size_t i = static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - slot_bits));
    for (unsigned probe = 0; probe < max_probes; ++probe, i = (i + 1) & (slot_count - 1)) {
        slot& s = slots[i];
        // relaxed: the key is the only thing a claim publishes; counters
        // start at zero (fresh anonymous memory) and are only added to.
        std::uint64_t k = s.key.load(std::memory_order_relaxed);
        if (k == key) return &s;
        if (k == 0) {
            if (s.key.compare_exchange_strong(k, key, std::memory_order_relaxed) || k == key)
                return &s;
        }
    }
    return &g_other;
}

__attribute__((format(printf, 4, 5))) void append(char* buf, std::size_t size, std::size_t* used,
                                                  const char* fmt, ...) noexcept {
    if (*used >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = std::vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n > 0) *used += static_cast<std::size_t>(n);
    if (*used >= size) *used = size - 1;
}

void flush(char* buf, std::size_t* used) noexcept {
    // relaxed: set before the release that published the side table, which
    // the report's acquire load saw.
    int fd = g_report_fd.load(std::memory_order_relaxed);
    const char* p = buf;
    std::size_t left = *used;
    while (left > 0) {
        ssize_t w = ::write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        left -= static_cast<std::size_t>(w);
    }
    *used = 0;
}

// "12.345 ms" style.
void format_time(char* out, std::size_t size, double ns) noexcept {
    if (ns >= 1e9)
        std::snprintf(out, size, "%.3f s", ns / 1e9);
    else if (ns >= 1e6)
        std::snprintf(out, size, "%.3f ms", ns / 1e6);
    else if (ns >= 1e3)
        std::snprintf(out, size, "%.3f us", ns / 1e3);
    else
        std::snprintf(out, size, "%.0f ns", ns);
}

}  // namespace

std::uint64_t now_ns() noexcept {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

bool stats_start() noexcept {
    if (g_slots.load(std::memory_order_acquire) != nullptr) return true;  // as in find
    void* p = mmap(nullptr, slot_count * sizeof(slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 100);  // see the header; -1: stderr itself
    if (fd >= 0) g_report_fd.store(fd, std::memory_order_relaxed);  // published by the CAS below
    slot* expected = nullptr;
    // release pairs with the acquire in find(); a racing initializer's
    // mapping loses and is returned.
    if (!g_slots.compare_exchange_strong(expected, static_cast<slot*>(p),
                                         std::memory_order_release, std::memory_order_acquire)) {
        munmap(p, slot_count * sizeof(slot));
        if (fd >= 0 && g_report_fd.load(std::memory_order_relaxed) != fd) ::close(fd);
    }
    return true;
}

void stats_forget() noexcept {
    slot* slots = g_slots.load(std::memory_order_acquire);  // as in find
    if (slots != nullptr) {
        // The side table is private anonymous memory: MADV_DONTNEED gives
        // the child fresh zero pages in place (and drops the copies fork
        // would make as the child writes).
        if (madvise(slots, slot_count * sizeof(slot), MADV_DONTNEED) != 0)
            std::memset(static_cast<void*>(slots), 0, slot_count * sizeof(slot));
    }
    // relaxed: the child has one thread (see the header of stats_forget).
    g_other.acquisitions.store(0, std::memory_order_relaxed);
    g_other.contended.store(0, std::memory_order_relaxed);
    g_other.wait_ns.store(0, std::memory_order_relaxed);
}

void stats_record(const void* object, object_kind kind, bool contended,
                  std::uint64_t wait_ns) noexcept {
    slot* s = find(key_of(object, kind));
    // relaxed: counters, read once at exit.
    s->acquisitions.fetch_add(1, std::memory_order_relaxed);
    if (contended) {
        s->contended.fetch_add(1, std::memory_order_relaxed);
        s->wait_ns.fetch_add(wait_ns, std::memory_order_relaxed);
    }
}

void stats_report() noexcept {
    slot* slots = g_slots.load(std::memory_order_acquire);  // as in find
    if (slots == nullptr) return;
    // relaxed everywhere below: statistics; threads still running at exit
    // may add a few counts while we read.
    const slot* top[report_top] = {};
    std::uint64_t objects = 0, acquisitions = 0, contended = 0, wait_ns = 0;
    // The most contended first: by total wait, then by contended count.
    auto ahead = [](const slot* a, const slot* b) noexcept {
        std::uint64_t wa = a->wait_ns.load(std::memory_order_relaxed);
        std::uint64_t wb = b->wait_ns.load(std::memory_order_relaxed);
        if (wa != wb) return wa > wb;
        return a->contended.load(std::memory_order_relaxed) > b->contended.load(std::memory_order_relaxed);
    };
    auto consider = [&](const slot* s) noexcept {
        std::uint64_t a = s->acquisitions.load(std::memory_order_relaxed);
        if (a == 0) return;
        ++objects;
        acquisitions += a;
        contended += s->contended.load(std::memory_order_relaxed);
        wait_ns += s->wait_ns.load(std::memory_order_relaxed);
        if (s->contended.load(std::memory_order_relaxed) == 0) return;
        // Insert into the top list, kept sorted.
        unsigned pos = report_top;
        while (pos > 0 && (top[pos - 1] == nullptr || ahead(s, top[pos - 1]))) --pos;
        if (pos >= report_top) return;
        for (unsigned j = report_top - 1; j > pos; --j) top[j] = top[j - 1];
        top[pos] = s;
    };
    for (std::size_t i = 0; i < slot_count; ++i)
        if (slots[i].key.load(std::memory_order_relaxed) != 0) consider(&slots[i]);
    consider(&g_other);

    if (objects == 0) return;  // e.g. a process that only ran exec

    char buf[1024];
    std::size_t used = 0;
    char t1[32], t2[32];
    format_time(t1, sizeof t1, static_cast<double>(wait_ns));
    append(buf, sizeof buf, &used, "spindle: lock statistics, pid %d, SPINDLE_LOCK=%s\n",
           static_cast<int>(getpid()), current()->name);
    append(buf, sizeof buf, &used,
           "spindle: %" PRIu64 " locks, %" PRIu64 " acquisitions, %.2f%% contended, %s waited\n",
           objects, acquisitions,
           acquisitions ? 100.0 * static_cast<double>(contended) / static_cast<double>(acquisitions)
                        : 0.0,
           t1);
    flush(buf, &used);
    if (top[0] == nullptr) {
        append(buf, sizeof buf, &used, "spindle: no lock was contended\n");
        flush(buf, &used);
        return;
    }
    append(buf, sizeof buf, &used, "spindle: %14s %12s %8s %14s %12s  %-10s %s\n", "acquisitions",
           "contended", "share", "wait total", "wait avg", "kind", "lock");
    flush(buf, &used);
    for (const slot* s : top) {
        if (s == nullptr) break;
        std::uint64_t a = s->acquisitions.load(std::memory_order_relaxed);
        std::uint64_t c = s->contended.load(std::memory_order_relaxed);
        std::uint64_t w = s->wait_ns.load(std::memory_order_relaxed);
        format_time(t1, sizeof t1, static_cast<double>(w));
        format_time(t2, sizeof t2, c ? static_cast<double>(w) / static_cast<double>(c) : 0.0);
        std::uint64_t key = s->key.load(std::memory_order_relaxed);
        char where[32];
        if (s == &g_other)
            std::snprintf(where, sizeof where, "(others)");
        else
            std::snprintf(where, sizeof where, "%#" PRIx64, key >> 3);
        append(buf, sizeof buf, &used, "spindle: %14" PRIu64 " %12" PRIu64 " %7.2f%% %14s %12s  %-10s %s\n",
               a, c, 100.0 * static_cast<double>(c) / static_cast<double>(a), t1, t2,
               s == &g_other ? "-" : kind_name(key), where);
        flush(buf, &used);
    }
}

}  // namespace spindle::preload
