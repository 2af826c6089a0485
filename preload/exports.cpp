// preload/exports.cpp — the interposed pthread entry points, start-up, fork.
//
// Symbol versions. A program binds to a versioned name (objdump -T shows
// which): glibc 2.34 moved the libpthread functions into libc under the new
// default version GLIBC_2.34 and kept their old versions, and the condition
// variable has had two ABIs since 2.3.2. We export each function under the
// default version programs built today bind to (libspindle_preload.map) and
// under its older versions (.symver aliases below), so old binaries are
// interposed too:
//
//   pthread_mutex_{init,destroy,lock,unlock}    GLIBC_2.2.5 (default)
//   pthread_mutex_{trylock,timedlock}           GLIBC_2.34, GLIBC_2.2.5
//   pthread_mutex_clocklock                     GLIBC_2.34, GLIBC_2.30
//   pthread_rwlock_* (clock* aside)             GLIBC_2.34, GLIBC_2.2.5
//   pthread_rwlock_clock{rd,wr}lock             GLIBC_2.34, GLIBC_2.30
//   pthread_spin_*                              GLIBC_2.34, GLIBC_2.2.5
//   pthread_cond_{init,destroy,signal,broadcast,wait,timedwait}
//                                               GLIBC_2.3.2; GLIBC_2.2.5 is the
//                                               old ABI (api::old_cond_*)
//   pthread_cond_clockwait                      GLIBC_2.34, GLIBC_2.30
//   pthread_create                              GLIBC_2.34, GLIBC_2.2.5  } fork
//   thrd_create                                 GLIBC_2.34, GLIBC_2.28   } child
//   __register_atfork                           GLIBC_2.3.2              } mode
//
// Fork. The thread that forks keeps everything it had: its TLS (Hemlock's
// Grant word, node free lists, our thread id) is copied, so locks it holds
// stay held by it in the child. Locks no thread held are unlocked in the
// child. But a lock the forking thread holds may have waiters queued behind
// it that do not exist in the child; its normal unlock would hand the lock
// to such a ghost (Hemlock would even wait for the ghost's acknowledgement
// forever) — and the standard pthread_atfork pattern (prepare: lock
// everything; child: unlock everything) does exactly that. So in the child,
// until it creates a thread, the forking thread's unlock does not hand a
// lock no other thread uses over: it writes the all-zero "unlocked" state
// (the fork-child table below). Other threads:
//
//   * one the program creates: pthread_create / thrd_create are interposed
//     for this only, and leave the mode before the thread exists (by a
//     handshake with the resets, below, when a thread other than the one
//     that forked calls them); from then on an unlock hands over, so a
//     lock still held with ghosts queued behind it is handed to a ghost;
//   * one glibc starts by itself, without those functions (timer_create and
//     mq_notify with SIGEV_THREAD, POSIX AIO, getaddrinfo_a): nothing tells
//     us it exists until it calls one of our functions. Such a thread does
//     not end the mode. Every entry of the fork-child table is a wrapper
//     (child_entry) that lets the thread that forked through, and makes any
//     other thread announce the objects its call uses; the thread that
//     forked resets only an object no such call has announced (a handshake
//     per object, begin_reset), so a lock is never reset under a live
//     waiter, and is still reset under the ghosts.
//
// (glibc's __libc_single_threaded is no help here: glibc does not set it
// back to true in a fork child, so in the child of a multi-threaded parent
// it reads false from the start.) Our child handler must run before other
// libraries' child handlers: handlers run in registration order, so we
// interpose __register_atfork (what pthread_atfork calls) and register ours
// before the first other one.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <spindle/locks/tclock.hpp>

#include "cond.hpp"
#include "internal.hpp"
#include "layout.hpp"
#include "mutex.hpp"
#include "rwlock.hpp"

extern "C" void* __dso_handle;

namespace spindle::preload {

// ---------------------------------------------------------------------------
// Messages.

void write_stderr(const char* s) noexcept {
    std::size_t n = std::strlen(s);
    while (n > 0) {
        ssize_t w = ::write(STDERR_FILENO, s, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return;
        }
        s += w;
        n -= static_cast<std::size_t>(w);
    }
}

std::atomic<std::uint32_t> g_next_thread_id{0};
constinit thread_local std::uint32_t t_thread_id __attribute__((tls_model("initial-exec"))) = 0;

namespace {

// ---------------------------------------------------------------------------
// The bootstrap table: initialize, then forward to the table installed.

template <auto Member>
struct boot;
template <class R, class... A, R (*api::*Member)(A...)>
struct boot<Member> {
    static R call(A... a) noexcept { return (initialize()->*Member)(a...); }
};

constexpr const char bootstrap_name[] = "(starting)";

constexpr api bootstrap_table = {
    &boot<&api::mutex_init>::call,        &boot<&api::mutex_destroy>::call,
    &boot<&api::mutex_lock>::call,        &boot<&api::mutex_trylock>::call,
    &boot<&api::mutex_timedlock>::call,   &boot<&api::mutex_clocklock>::call,
    &boot<&api::mutex_unlock>::call,

    &boot<&api::rwlock_init>::call,       &boot<&api::rwlock_destroy>::call,
    &boot<&api::rwlock_rdlock>::call,     &boot<&api::rwlock_tryrdlock>::call,
    &boot<&api::rwlock_timedrdlock>::call, &boot<&api::rwlock_clockrdlock>::call,
    &boot<&api::rwlock_wrlock>::call,     &boot<&api::rwlock_trywrlock>::call,
    &boot<&api::rwlock_timedwrlock>::call, &boot<&api::rwlock_clockwrlock>::call,
    &boot<&api::rwlock_unlock>::call,

    &boot<&api::spin_init>::call,         &boot<&api::spin_destroy>::call,
    &boot<&api::spin_lock>::call,         &boot<&api::spin_trylock>::call,
    &boot<&api::spin_unlock>::call,

    &boot<&api::cond_init>::call,         &boot<&api::cond_destroy>::call,
    &boot<&api::cond_signal>::call,       &boot<&api::cond_broadcast>::call,
    &boot<&api::cond_wait>::call,         &boot<&api::cond_timedwait>::call,
    &boot<&api::cond_clockwait>::call,

    &boot<&api::old_cond_init>::call,     &boot<&api::old_cond_destroy>::call,
    &boot<&api::old_cond_signal>::call,   &boot<&api::old_cond_broadcast>::call,
    &boot<&api::old_cond_wait>::call,     &boot<&api::old_cond_timedwait>::call,

    nullptr, nullptr, nullptr,
    bootstrap_name, false, false, false,
};

// ---------------------------------------------------------------------------
// Environment.
//
// The table is chosen at the first call of any entry point: normally our
// constructor, after libc's constructor has set up `environ`. But a
// program's .preinit_array functions, and whatever they call, run before
// every library constructor, libc's included: `environ` is still null
// there, and getenv() finds nothing. Then the variables are read from
// /proc/self/environ instead: the environment the process was started
// with, which is what `environ` is about to point to. Where that cannot be
// read either (no /proc mounted), the default is used for the moment, and
// our constructor reads the variables again once `environ` is set: if they
// name another table, or a bad value, it stops the program (exit status 2,
// a message). A value is never silently ignored.

// The variables the library reads at start; null: unset.
struct environment {
    const char* stats = nullptr;  // SPINDLE_STATS
    const char* adopt = nullptr;  // SPINDLE_TCLOCK_ADOPT
    const char* lock = nullptr;   // SPINDLE_LOCK
};

environment from_getenv() noexcept {
    return {getenv("SPINDLE_STATS"), getenv("SPINDLE_TCLOCK_ADOPT"), getenv("SPINDLE_LOCK")};
}

// Values read from /proc/self/environ. A value longer than the room is
// kept cut short: no valid value is that long, and it is reported as read.
struct environment_copy {
    static constexpr std::size_t room = 256;
    char stats[room], adopt[room], lock[room];
};

// Fills e from /proc/self/environ (the first definition of each name, as
// getenv finds). false: it cannot be read. Raw system calls: read() is
// interposed by this library (blocking.cpp), and errno stays untouched.
bool from_proc_environ(environment& e, environment_copy& copy) noexcept {
    using spindle::detail::raw_syscall6;
    const long fd = raw_syscall6(SYS_openat, AT_FDCWD, reinterpret_cast<long>("/proc/self/environ"),
                                 O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0) return false;
    struct wanted {
        const char* prefix;
        std::size_t len;
        char* out;
        const char** slot;
    } names[] = {{"SPINDLE_STATS=", 14, copy.stats, &e.stats},
                 {"SPINDLE_TCLOCK_ADOPT=", 21, copy.adopt, &e.adopt},
                 {"SPINDLE_LOCK=", 13, copy.lock, &e.lock}};
    // The current entry's first bytes: enough for a name and a value.
    char entry[32 + environment_copy::room];
    std::size_t used = 0;  // bytes of the entry seen (entry[] holds the first sizeof entry)
    auto finish_entry = [&]() noexcept {
        const std::size_t kept = used < sizeof entry ? used : sizeof entry;
        for (wanted& w : names) {
            if (*w.slot != nullptr || kept < w.len || std::memcmp(entry, w.prefix, w.len) != 0) continue;
            std::size_t n = kept - w.len;
            if (n > environment_copy::room - 1) n = environment_copy::room - 1;
            std::memcpy(w.out, entry + w.len, n);
            w.out[n] = '\0';
            *w.slot = w.out;
        }
        used = 0;
    };
    bool ok = true;
    char buf[1024];
    for (;;) {
        const long n = raw_syscall6(SYS_read, fd, reinterpret_cast<long>(buf), sizeof buf, 0, 0, 0);
        if (n == -EINTR) continue;
        if (n < 0) {
            ok = false;
            break;
        }
        if (n == 0) break;
        for (long i = 0; i < n; ++i) {
            if (buf[i] == '\0') {
                finish_entry();
            } else {
                if (used < sizeof entry) entry[used] = buf[i];
                ++used;
            }
        }
    }
    if (ok && used != 0) finish_entry();  // a last entry without its terminator
    raw_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
    return ok;
}

// Set when the table was chosen without reading the variables (no environ,
// no /proc/self/environ); checked by our constructor. relaxed: written before
// the release that installs the table, read by the constructor after its
// own initialize() (acquire in current()).
std::atomic<bool> g_environment_unread{false};

[[noreturn]] void bad_environment(const char* variable, const char* value,
                                  const char* valid) noexcept {
    write_stderr("spindle: ");
    write_stderr(variable);
    write_stderr("=");
    write_stderr(value);
    write_stderr(" is not valid; valid values: ");
    write_stderr(valid);
    write_stderr("\n");
    _exit(2);
}

// The table e names (a bad value ends the process); with start_stats, the
// statistics are started if asked for (and the messages about them written).
const api* table_from(const environment& e, bool start_stats) noexcept {
    bool stats = false;
    const char* s = e.stats;
    if (s != nullptr && s[0] != '\0') {
        if (std::strcmp(s, "1") == 0)
            stats = true;
        else if (std::strcmp(s, "0") != 0)
            bad_environment("SPINDLE_STATS", s, "0 (off, the default), 1 (print lock statistics at exit)");
    }
    // Read by the TCLocks themselves (tclock.hpp) at their first contended
    // lock; checked here too, so that a bad value stops the program at start.
    const char* adopt = e.adopt;
    if (adopt != nullptr && adopt[0] != '\0' && std::strcmp(adopt, "0") != 0 && std::strcmp(adopt, "1") != 0)
        bad_environment("SPINDLE_TCLOCK_ADOPT", adopt,
                        "0 (a delegated critical section runs as the combiner's thread), 1 (as its own "
                        "thread where the CPU allows; the default)");
    const char* name = e.lock;
    // Unset: hemlock_park. It costs what hemlock costs while threads have
    // CPUs of their own, and does not collapse when they do not (see
    // algorithms.hpp, "The default").
    if (name == nullptr || name[0] == '\0') name = "hemlock_park";
    const api* t = find_table(name, std::strlen(name), stats);
    if (t == nullptr) {
        char valid[512];
        list_algorithms(valid, sizeof valid);
        bad_environment("SPINDLE_LOCK", name, valid);
    }
    if (!start_stats) return t;
    if (stats && t->ours && !stats_start()) {
        write_stderr("spindle: SPINDLE_STATS=1: no memory for the statistics; running without\n");
        t = find_table(name, std::strlen(name), false);
    }
    if (stats && !t->ours)
        write_stderr("spindle: SPINDLE_STATS=1 measures spindle's locks only; SPINDLE_LOCK=pthread "
                     "passes every call to glibc unmeasured\n");
    return t;
}

const api* table_from_environment() noexcept {
    if (environ != nullptr) return table_from(from_getenv(), true);
    environment e;
    environment_copy copy;
    if (!from_proc_environ(e, copy)) {
        e = {};
        g_environment_unread.store(true, std::memory_order_relaxed);
    }
    return table_from(e, true);
}

// Our constructor, once libc's has set `environ`: if the table was chosen
// without the variables, they must name that same table.
void check_unread_environment() noexcept {
    if (!g_environment_unread.load(std::memory_order_relaxed) || environ == nullptr) return;
    const api* installed = current();
    const api* wanted = table_from(from_getenv(), false);  // a bad value ends the process here
    if (wanted == installed) return;
    write_stderr("spindle: the program locked before libc had set up its environment, and "
                 "/proc/self/environ could not be read, so the default lock (hemlock_park) was "
                 "installed without statistics; the environment asks for SPINDLE_LOCK=");
    write_stderr(wanted->name);
    write_stderr(wanted->stats ? " and SPINDLE_STATS=1" : "");
    write_stderr(", which cannot take effect now (mount /proc, or unset the variables)\n");
    _exit(2);
}

// ---------------------------------------------------------------------------
// Fork.
//
// Child mode (see the header): the installed table is g_child_table, whose
// every function is child_entry<member>. The thread that forked (t_forked)
// runs g_child_ops: the parent's table with the resetting functions below.
// Any other thread -- one glibc started -- runs the parent's table, but
// first announces the objects its call will use (announce), and withdraws
// them when the call returns.
//
// A reset and such a call are ordered per object by a handshake (Dekker's,
// over seq_cst words):
//
//     thread that forked (begin_reset(x))    other thread (announce(x))
//     g_resetting[depth] = x                 g_announced[i] = x
//     x in g_announced[]?  yes: undo, and    wait while x is in g_resetting[]
//       unlock as the parent does            use x with the parent's table
//     no: reset x; g_resetting[depth] = 0    g_announced[i] = 0
//
// In the single total order of the seq_cst operations, either the reset
// sees the announcement (and hands over as usual: the other thread may be
// queued on x by now) or the other thread sees the reset and waits until
// it is over before it touches x. So no live thread is ever queued on a
// lock while it is reset, and an object no live thread uses is still reset
// when the thread that forked unlocks it, whatever other threads do
// meanwhile: a lock it held at the fork with waiters of the parent queued
// behind it is not handed to those ghosts.
//
// Child mode ends when a thread is created (before_thread_create): the
// creator sets g_child_mode_over, waits until no reset is under way and
// installs the parent's table, which the new thread then uses without
// announcing anything. A reset checks g_child_mode_over after publishing
// itself (the same handshake), so none begins after that. From then on an
// unlock hands over; a lock the thread that forked still holds with ghosts
// queued behind it is handed to a ghost (preload/README.md). The same happens when
// the announcements run out (more than max_announced objects in use by
// glibc's threads at once, a condition variable wait using two).
//
// A thread other than the one that forked that uses a lock the thread that
// forked holds with ghosts queued behind it waits behind the ghosts: the
// unlock sees its announcement and hands over, to the first ghost.

api g_child_ops;                         // child mode's functions; written by the child handler only
api g_child_table;                       // the installed table in child mode: child_entry wrappers
const api* g_child_parent = nullptr;     // the table child mode returns to; child handler only
std::atomic<const api*> g_parent_table{nullptr};  // non-null: child mode
std::atomic<bool> g_atfork_registered{false};
std::atomic<bool> g_child_mode_over{false};       // a thread is being created: no reset may begin

// The resets under way: entry d is the object of the reset at nesting
// depth d of the thread that forked (a signal handler may unlock inside an
// unlock), or null. Only that thread writes them; t_reset_depth is how many
// of its entries are in use (on any other thread: 0).
constexpr unsigned max_resets = 4;
std::atomic<const void*> g_resetting[max_resets];
constinit thread_local unsigned t_reset_depth __attribute__((tls_model("initial-exec"))) = 0;

// The objects the calls of other threads are using, one entry each; null:
// free. g_announcing is at least the number of entries in use (0: the reset
// skips the scan); t_announced (bit i: g_announced[i]) and t_announcing are
// a thread's own share, for a cancelled wait (child_calls_cancelled) and a
// fork from a signal handler (atfork_child).
constexpr unsigned max_announced = 64;
std::atomic<const void*> g_announced[max_announced];
std::atomic<unsigned> g_announcing{0};
constinit thread_local std::uint64_t t_announced __attribute__((tls_model("initial-exec"))) = 0;
constinit thread_local unsigned t_announcing __attribute__((tls_model("initial-exec"))) = 0;

// A thread waiting for a reset to end sleeps on g_reset_seq, which end_reset
// advances (and wakes) while g_reset_waiters is not 0. t_reset_waiting: the
// thread's own share of g_reset_waiters (atfork_child).
std::atomic<std::uint32_t> g_reset_seq{0};
std::atomic<std::uint32_t> g_reset_waiters{0};
constinit thread_local unsigned t_reset_waiting __attribute__((tls_model("initial-exec"))) = 0;

// The thread that forked, in a fork child: set by the child handler; a
// thread created afterwards starts with false (its TLS is the initial image).
constinit thread_local bool t_forked __attribute__((tls_model("initial-exec"))) = false;

// A signal handler on this thread runs after the statements before, and
// before those after (a thread's own state, which its handlers read).
inline void handler_fence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

// Leaves child mode: installs the parent table. release, the stores, and
// acquire, the load: a thread that sees child mode over (null) sees what
// the leaving thread saw, resets included (end_child_mode). A process that
// never forked never writes g_parent_table (every thread reads null).
void leave_child_mode() noexcept {
    const api* parent = g_parent_table.load(std::memory_order_acquire);
    if (parent == nullptr) [[likely]]
        return;
    g_api.store(parent, std::memory_order_release);  // pairs with current()
    g_parent_table.store(nullptr, std::memory_order_release);
}

// Whether a reset of x or y (x null: of anything) is under way. seq_cst:
// the handshake, with begin_reset's store (an acquire too: a reset that has
// ended is seen with its stores, as end_reset's release store of null or a
// later store of the same thread is read).
bool resetting(const void* x, const void* y) noexcept {
    for (const auto& e : g_resetting) {
        const void* r = e.load(std::memory_order_seq_cst);
        if (r != nullptr && (x == nullptr || r == x || r == y)) return true;
    }
    return false;
}

// Waits until no reset of x or y (x null: of anything) is under way. A
// reset is a few stores: spin a little, then sleep until one ends.
void wait_for_resets(const void* x, const void* y) noexcept {
    unsigned spins = 0;
    while (resetting(x, y)) {
        if (++spins < 64) {
            arch::cpu_relax();
            continue;
        }
        t_reset_waiting += 1;
        handler_fence();
        // seq_cst, the increment and the loads after it: with end_reset's
        // store of null and its load of g_reset_waiters (Dekker's again):
        // either end_reset sees this waiter and advances g_reset_seq after
        // the value read here, or the check below sees the reset over.
        g_reset_waiters.fetch_add(1, std::memory_order_seq_cst);
        const std::uint32_t seq = g_reset_seq.load(std::memory_order_seq_cst);
        if (resetting(x, y)) spindle::detail::futex_wait(&g_reset_seq, seq);
        g_reset_waiters.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a count, read only as above
        handler_fence();
        t_reset_waiting -= 1;
    }
}

// Whether a call of another thread has announced x. seq_cst: the handshake
// (with announce's).
bool announced(const void* x) noexcept {
    if (g_announcing.load(std::memory_order_seq_cst) == 0) return false;
    for (const auto& e : g_announced)
        if (e.load(std::memory_order_seq_cst) == x) return true;
    return false;
}

void end_reset() noexcept;

// The thread that forked is about to reset x. false: another thread uses x,
// or child mode is ending; unlock as the parent does instead (no end_reset).
bool begin_reset(const void* x) noexcept {
    const unsigned d = t_reset_depth;
    // Four resets nested in signal handlers: the fifth hands over.
    if (d == max_resets) return false;
    t_reset_depth = d + 1;
    handler_fence();  // a handler interrupting from here on uses entry d + 1
    // seq_cst, the store and the loads (announced too): the handshake,
    // with announce's and end_child_mode's.
    g_resetting[d].store(x, std::memory_order_seq_cst);
    if (!g_child_mode_over.load(std::memory_order_seq_cst) && !announced(x)) return true;
    end_reset();
    return false;
}

void end_reset() noexcept {
    const unsigned d = t_reset_depth - 1;
    // release: the reset's plain stores happen before a waiting thread's
    // first look at the lock (resetting()'s loads). seq_cst: with the load
    // of g_reset_waiters below (see wait_for_resets).
    g_resetting[d].store(nullptr, std::memory_order_seq_cst);
    handler_fence();
    t_reset_depth = d;
    if (g_reset_waiters.load(std::memory_order_seq_cst) != 0) {
        // seq_cst: read by wait_for_resets' load, and compared by the
        // kernel in its futex wait.
        g_reset_seq.fetch_add(1, std::memory_order_seq_cst);
        futex_wake_all(&g_reset_seq);
    }
}

// Ends child mode, from a thread other than the one that forked: no reset
// begins after the store, and the ones under way end before the parent's
// table is installed (a thread that then uses it announces nothing).
void end_child_mode() noexcept {
    // seq_cst: the handshake, with begin_reset's store and load.
    g_child_mode_over.store(true, std::memory_order_seq_cst);
    wait_for_resets(nullptr, nullptr);
    leave_child_mode();
}

// Before any thread creates a thread (pthread_create, thrd_create): child
// mode ends. The thread that forked has no reset under way (it is here, not
// in an unlock; pthread_create is not async-signal-safe, so not in a
// handler that interrupted one either) and leaves at once.
void before_thread_create() noexcept {
    if (g_parent_table.load(std::memory_order_acquire) == nullptr) [[likely]]  // as in leave_child_mode
        return;
    if (g_child_parent->delegates) spindle::tclock_may_block();  // t_forked: the caller's own (child_entry)
    if (!t_forked) {
        end_child_mode();
        return;
    }
    // seq_cst: as in end_child_mode.
    g_child_mode_over.store(true, std::memory_order_seq_cst);
    leave_child_mode();
}

// A call's announcement: the entries of g_announced it holds.
struct announcement {
    int entry[2] = {-1, -1};
    unsigned count = 0;
};

void withdraw(announcement& a) noexcept {
    for (int i : a.entry) {
        if (i < 0) continue;
        // release pairs with a reset's load of the entry (announced): what
        // the call did to the object happens before the object's reset.
        g_announced[i].store(nullptr, std::memory_order_release);
        handler_fence();
        t_announced &= ~(std::uint64_t{1} << i);
    }
    // release: as above, for a reset that reads the count only.
    g_announcing.fetch_sub(a.count, std::memory_order_release);
    handler_fence();
    t_announcing -= a.count;
}

// Takes a free entry of g_announced for x; -1: none free.
int claim_entry(const void* x) noexcept {
    for (unsigned i = 0; i < max_announced; ++i) {
        // relaxed: only picks a candidate; the CAS decides.
        if (g_announced[i].load(std::memory_order_relaxed) != nullptr) continue;
        const std::uint64_t bit = std::uint64_t{1} << i;
        t_announced |= bit;  // first: a fork from a handler keeps the entry (atfork_child)
        handler_fence();
        const void* expected = nullptr;
        // seq_cst: the handshake, with begin_reset's store and loads.
        if (g_announced[i].compare_exchange_strong(expected, x, std::memory_order_seq_cst,
                                                   std::memory_order_relaxed))
            return static_cast<int>(i);
        handler_fence();
        t_announced &= ~bit;
    }
    return -1;
}

// Announces x and y (y may be null) for a call of a thread other than the
// one that forked, then waits until no reset of either is under way. false:
// no entry was free; nothing is announced.
bool announce(const void* x, const void* y, announcement& a) noexcept {
    a.count = y != nullptr ? 2 : 1;
    t_announcing += a.count;  // first: as in claim_entry
    handler_fence();
    // seq_cst: the handshake, with begin_reset's store and its load of the
    // count (announced).
    g_announcing.fetch_add(a.count, std::memory_order_seq_cst);
    a.entry[0] = claim_entry(x);
    if (a.entry[0] >= 0 && y != nullptr) a.entry[1] = claim_entry(y);
    if (a.entry[0] < 0 || (y != nullptr && a.entry[1] < 0)) {
        withdraw(a);
        return false;
    }
    wait_for_resets(x, y);
    return true;
}

// The objects of a call: its first argument, and the mutex of a condition
// variable wait (the only calls with a mutex second).
template <class First, class... Rest>
const void* first_object(First p, Rest...) noexcept {
    return const_cast<const void*>(static_cast<const volatile void*>(p));  // a spinlock is volatile
}
template <class Second, class... Rest>
const void* mutex_of_wait(Second s, Rest...) noexcept {
    if constexpr (std::is_same_v<Second, pthread_mutex_t*>)
        return s;
    else
        return nullptr;
}
template <class First, class... Rest>
const void* wait_mutex(First, Rest... rest) noexcept {
    if constexpr (sizeof...(Rest) > 0)
        return mutex_of_wait(rest...);
    else
        return nullptr;
}

// The entry `Member` of the fork-child table; Delegates: the parent's table
// is a TCLock's.
template <auto Member, bool Delegates>
struct child_entry;
template <class R, class... A, R (*api::*Member)(A...), bool Delegates>
struct child_entry<Member, Delegates> {
    static R call(A... a) noexcept {
        // A TCLock's section that runs delegated sees the combiner's
        // thread-locals without thread pointer adoption (delegation.hpp):
        // back to the caller's own thread first, whose t_forked this is.
        if constexpr (Delegates) spindle::tclock_may_block();
        if (!t_forked) [[unlikely]]
            return announced_call(a...);
        return (g_child_ops.*Member)(a...);
    }

    // A thread other than the one that forked.
    SPINDLE_NOINLINE static R announced_call(A... a) noexcept {
        const void* x = first_object(a...);
        const void* y = wait_mutex(a...);
        // A wait's cancellation point, before anything is announced (a
        // cancelled wait withdraws in child_calls_cancelled).
        if (y != nullptr) pthread_testcancel();
        announcement an;
        if (!announce(x, y, an)) [[unlikely]] {
            end_child_mode();
            return (g_child_parent->*Member)(a...);
        }
        // g_child_parent: written by the child handler before this thread
        // was created (thread creation orders it).
        R r = (g_child_parent->*Member)(a...);
        if constexpr (Delegates) spindle::tclock_may_block();  // t_announced is the caller's own, as above
        withdraw(an);
        return r;
    }
};

// The fork-child table, but for what the child handler copies from the
// parent's.
template <bool Delegates>
struct child_wrappers {
    template <auto Member>
    static constexpr auto e = &child_entry<Member, Delegates>::call;

    static constexpr api table = {
        e<&api::mutex_init>,         e<&api::mutex_destroy>,       e<&api::mutex_lock>,
        e<&api::mutex_trylock>,      e<&api::mutex_timedlock>,     e<&api::mutex_clocklock>,
        e<&api::mutex_unlock>,

        e<&api::rwlock_init>,        e<&api::rwlock_destroy>,      e<&api::rwlock_rdlock>,
        e<&api::rwlock_tryrdlock>,   e<&api::rwlock_timedrdlock>,  e<&api::rwlock_clockrdlock>,
        e<&api::rwlock_wrlock>,      e<&api::rwlock_trywrlock>,    e<&api::rwlock_timedwrlock>,
        e<&api::rwlock_clockwrlock>, e<&api::rwlock_unlock>,

        e<&api::spin_init>,          e<&api::spin_destroy>,        e<&api::spin_lock>,
        e<&api::spin_trylock>,       e<&api::spin_unlock>,

        e<&api::cond_init>,          e<&api::cond_destroy>,        e<&api::cond_signal>,
        e<&api::cond_broadcast>,     e<&api::cond_wait>,           e<&api::cond_timedwait>,
        e<&api::cond_clockwait>,

        e<&api::old_cond_init>,      e<&api::old_cond_destroy>,    e<&api::old_cond_signal>,
        e<&api::old_cond_broadcast>, e<&api::old_cond_wait>,       e<&api::old_cond_timedwait>,

        nullptr, nullptr, nullptr,  // before_fork, the child unlocks, name, stats: the parent's (atfork_child)
        nullptr, false, true, Delegates,
    };
};

// The tests' hook (spindle_preload_test_reset_hook); null: none. relaxed:
// set by the test before it forks, read by the child handler on the same
// thread.
std::atomic<void (*)(int, const void*)> g_test_reset_hook{nullptr};

// The resetting functions of child mode (g_child_ops), run by the thread
// that forked only.

// Hooked: the tests' variant, installed by the child handler only when a
// hook is set (so the hook costs the untested library nothing): calls the
// hook with 0 before the handshake, and with 1 inside a reset (between
// begin_reset and end_reset), each time with the mutex.
template <bool Hooked>
int child_mutex_unlock(pthread_mutex_t* m) noexcept {
    int k = mutex_kind(m);
    if (k & mutex_layout::route_bits) return real<real_fn::mutex_unlock, int(pthread_mutex_t*)>()(m);
    if constexpr (Hooked) g_test_reset_hook.load(std::memory_order_relaxed)(0, m);
    if (!begin_reset(m)) return g_child_parent->mutex_unlock(m);
    if constexpr (Hooked) g_test_reset_hook.load(std::memory_order_relaxed)(1, m);
    int type = k & mutex_layout::type_mask;
    int result = 0;
    if ((type == PTHREAD_MUTEX_RECURSIVE || type == PTHREAD_MUTEX_ERRORCHECK) &&
        !mutex_common::drop(m, type, &result)) {
        end_reset();
        return result;
    }
    zero_lock_room(m, mutex_layout::lock);
    end_reset();
    return 0;
}

int child_rwlock_unlock(pthread_rwlock_t* l) noexcept {
    if (!begin_reset(l)) return g_child_parent->rwlock_unlock(l);
    int r = g_child_parent->rwlock_child_unlock(l);
    end_reset();
    return r;
}

int child_spin_unlock(pthread_spinlock_t* l) noexcept {
    if (!begin_reset(const_cast<int*>(l))) return g_child_parent->spin_unlock(l);
    // Reset, unless process-shared (spin.hpp: its waiters may be live).
    int r = g_child_parent->spin_child_unlock(l);
    end_reset();
    return r;
}

int child_cond_destroy(pthread_cond_t* c) noexcept {
    // A process-shared one's registered waiters may be live processes (the
    // parent's threads among them): destroy waits for them to leave, as
    // anywhere else; forgetting them would let a late leaver wrap the count.
    if ((cond_of(c).flags() & spindle::futex_cond::process_shared) != 0) return g_child_parent->cond_destroy(c);
    if (!begin_reset(c)) return g_child_parent->cond_destroy(c);
    // Registered waiters can only be threads that did not survive the fork.
    // No live thread uses c (begin_reset).
    cond_of(c).forget_waiters();
    end_reset();
    return 0;
}

}  // namespace

// A condition variable wait cancelled: the unwinding passes through this
// thread's calls under way (their frames have no cleanups), so their
// announcements are withdrawn here, after the wait's relock.
void child_calls_cancelled() noexcept {
    if (t_announcing == 0) [[likely]]
        return;
    for (unsigned i = 0; i < max_announced; ++i)
        if (t_announced & (std::uint64_t{1} << i))
            g_announced[i].store(nullptr, std::memory_order_release);  // as in withdraw
    t_announced = 0;
    handler_fence();
    g_announcing.fetch_sub(t_announcing, std::memory_order_release);  // as in withdraw
    handler_fence();
    t_announcing = 0;
}

namespace {

// The last prepare handler to run (ours is registered first): nothing of
// ours will lock between here and the fork.
void atfork_prepare() noexcept {
    const api* t = current();
    if (t->before_fork != nullptr) t->before_fork();
}

void atfork_child() noexcept {
    // The child has one thread: plain reads and writes of our globals here
    // race with nothing (relaxed atomics below for the same reason).
    const api* t = current();
    if (!t->ours) return;  // glibc's locks, or nothing locked by us yet
    const api* parent = g_parent_table.load(std::memory_order_relaxed);
    if (parent == nullptr) parent = t;  // else: a fork from a child in child mode
    if (parent->stats) stats_forget();  // the child counts, and reports, its own locks only
    g_child_parent = parent;
    g_child_ops = *parent;
    g_child_ops.mutex_unlock = g_test_reset_hook.load(std::memory_order_relaxed) != nullptr
                                   ? &child_mutex_unlock<true>
                                   : &child_mutex_unlock<false>;
    g_child_ops.rwlock_unlock = &child_rwlock_unlock;
    g_child_ops.spin_unlock = &child_spin_unlock;
    g_child_ops.cond_destroy = &child_cond_destroy;
    g_child_table = parent->delegates ? child_wrappers<true>::table : child_wrappers<false>::table;
    g_child_table.before_fork = parent->before_fork;
    g_child_table.rwlock_child_unlock = parent->rwlock_child_unlock;
    g_child_table.spin_child_unlock = parent->spin_child_unlock;
    g_child_table.name = parent->name;
    g_child_table.stats = parent->stats;
    // Resets under way: only the thread that forked resets. If that thread
    // is the one forking again (from a signal handler that interrupted a
    // reset), the entries are its own and it ends those resets here too
    // (end_reset): kept. Any other thread has none (t_reset_depth 0), and
    // the threads that did are not in this child.
    if (!t_forked)
        for (auto& e : g_resetting) e.store(nullptr, std::memory_order_relaxed);
    // Announcements, and waits for a reset: the forking thread's own (a
    // handler that interrupted one of its calls) stay until that call
    // withdraws them; the other threads are gone.
    for (unsigned i = 0; i < max_announced; ++i)
        if ((t_announced & (std::uint64_t{1} << i)) == 0)
            g_announced[i].store(nullptr, std::memory_order_relaxed);
    g_announcing.store(t_announcing, std::memory_order_relaxed);
    g_reset_waiters.store(t_reset_waiting, std::memory_order_relaxed);
    t_forked = true;
    g_child_mode_over.store(false, std::memory_order_relaxed);
    g_parent_table.store(parent, std::memory_order_relaxed);
    g_api.store(&g_child_table, std::memory_order_release);  // pairs with current()
}

void register_own_atfork() noexcept {
    // relaxed: the flag only makes registration happen once.
    if (g_atfork_registered.exchange(true, std::memory_order_relaxed)) return;
    using reg_fn = int(void (*)(), void (*)(), void (*)(), void*);
    real<real_fn::register_atfork, reg_fn>()(&atfork_prepare, nullptr, &atfork_child, &__dso_handle);
}

// ---------------------------------------------------------------------------
// The old condition variable ABI: the object holds a pointer to one of ours.

std::atomic_ref<pthread_cond_t*> old_cond_slot(pthread_cond_t* c) noexcept {
    return word<pthread_cond_t*>(c, 0);
}

pthread_cond_t* old_cond_inner(pthread_cond_t* c) noexcept {
    // acquire pairs with the release of the CAS below: the inner object is
    // initialized before its address is seen.
    pthread_cond_t* p = old_cond_slot(c).load(std::memory_order_acquire);
    if (p != nullptr) return p;
    // All-zero: PTHREAD_COND_INITIALIZER, as the old object itself was.
    auto* fresh = static_cast<pthread_cond_t*>(std::calloc(1, sizeof(pthread_cond_t)));
    if (fresh == nullptr) return nullptr;
    if (!old_cond_slot(c).compare_exchange_strong(p, fresh, std::memory_order_acq_rel,
                                                  std::memory_order_acquire)) {
        std::free(fresh);  // another thread's object won
        return p;
    }
    return fresh;
}

}  // namespace

std::atomic<const api*> g_api{&bootstrap_table};

const api* initialize() noexcept {
    const api* t = current();
    if (t != &bootstrap_table) [[likely]]
        return t;
    const api* chosen = table_from_environment();
    const api* expected = &bootstrap_table;
    // release pairs with current()'s acquire (the statistics table);
    // a racing initializer installed the same table.
    g_api.compare_exchange_strong(expected, chosen, std::memory_order_release,
                                  std::memory_order_relaxed);
    if (chosen->ours) register_own_atfork();
    return current();
}

int old_cond_init(pthread_cond_t* c, const pthread_condattr_t* a) noexcept {
    auto* fresh = static_cast<pthread_cond_t*>(std::calloc(1, sizeof(pthread_cond_t)));
    if (fresh == nullptr) return ENOMEM;
    current()->cond_init(fresh, a);
    old_cond_slot(c).store(fresh, std::memory_order_release);  // pairs with old_cond_inner
    return 0;
}

int old_cond_destroy(pthread_cond_t* c) noexcept {
    pthread_cond_t* p = old_cond_slot(c).load(std::memory_order_acquire);  // as in old_cond_inner
    if (p == nullptr) return 0;
    int r = current()->cond_destroy(p);
    // relaxed: nobody may use a condition variable being destroyed.
    old_cond_slot(c).store(nullptr, std::memory_order_relaxed);
    std::free(p);
    return r;
}

int old_cond_signal(pthread_cond_t* c) noexcept {
    pthread_cond_t* p = old_cond_inner(c);
    return p ? current()->cond_signal(p) : ENOMEM;
}
int old_cond_broadcast(pthread_cond_t* c) noexcept {
    pthread_cond_t* p = old_cond_inner(c);
    return p ? current()->cond_broadcast(p) : ENOMEM;
}
int old_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) noexcept {
    pthread_cond_t* p = old_cond_inner(c);
    return p ? current()->cond_wait(p, m) : ENOMEM;
}
int old_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* abs) noexcept {
    pthread_cond_t* p = old_cond_inner(c);
    return p ? current()->cond_timedwait(p, m, abs) : ENOMEM;
}

namespace {

__attribute__((constructor(101))) void on_load() noexcept {
    initialize();
    check_unread_environment();
}

__attribute__((destructor(101))) void on_unload() noexcept {
    if (current()->stats) stats_report();
}

}  // namespace

}  // namespace spindle::preload

// ---------------------------------------------------------------------------
// The entry points.
//
// Defined under names of our own and given their exported names and
// versions with .symver (name@@VERSION: the default a program built today
// binds to; name@VERSION: an older one). A version script entry cannot do
// it: ld drops the default version of a name that also has a .symver'd
// older one.

using spindle::preload::current;

// spindle_entry_<name>(params): calls the installed table's `member`.
#define SPINDLE_PRELOAD_ENTRY(name, member, params, args) \
    extern "C" SPINDLE_PRELOAD_EXPORT int spindle_entry_##name params noexcept { \
        return current()->member args;                                          \
    }
// The default version, and optionally an older one (an alias).
#define SPINDLE_PRELOAD_VERSION(name, version) \
    __asm__(".symver spindle_entry_" #name ", " #name "@@" version);
#define SPINDLE_PRELOAD_OLDER(name, version)                                             \
    extern "C" SPINDLE_PRELOAD_EXPORT decltype(spindle_entry_##name) spindle_older_##name \
        __attribute__((alias("spindle_entry_" #name)));                                  \
    __asm__(".symver spindle_older_" #name ", " #name "@" version);

using mutex_t = pthread_mutex_t;
using rwlock_t = pthread_rwlock_t;
using spin_t = pthread_spinlock_t;
using cond_t = pthread_cond_t;
using ts_t = const struct timespec;

SPINDLE_PRELOAD_ENTRY(pthread_mutex_init, mutex_init, (mutex_t* m, const pthread_mutexattr_t* a), (m, a))
SPINDLE_PRELOAD_ENTRY(pthread_mutex_destroy, mutex_destroy, (mutex_t* m), (m))
SPINDLE_PRELOAD_ENTRY(pthread_mutex_lock, mutex_lock, (mutex_t* m), (m))
SPINDLE_PRELOAD_ENTRY(pthread_mutex_trylock, mutex_trylock, (mutex_t* m), (m))
SPINDLE_PRELOAD_ENTRY(pthread_mutex_timedlock, mutex_timedlock, (mutex_t* m, ts_t* t), (m, t))
SPINDLE_PRELOAD_ENTRY(pthread_mutex_clocklock, mutex_clocklock, (mutex_t* m, clockid_t c, ts_t* t), (m, c, t))
SPINDLE_PRELOAD_ENTRY(pthread_mutex_unlock, mutex_unlock, (mutex_t* m), (m))

SPINDLE_PRELOAD_ENTRY(pthread_rwlock_init, rwlock_init, (rwlock_t* l, const pthread_rwlockattr_t* a), (l, a))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_destroy, rwlock_destroy, (rwlock_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_rdlock, rwlock_rdlock, (rwlock_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_tryrdlock, rwlock_tryrdlock, (rwlock_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_timedrdlock, rwlock_timedrdlock, (rwlock_t* l, ts_t* t), (l, t))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_clockrdlock, rwlock_clockrdlock, (rwlock_t* l, clockid_t c, ts_t* t), (l, c, t))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_wrlock, rwlock_wrlock, (rwlock_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_trywrlock, rwlock_trywrlock, (rwlock_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_timedwrlock, rwlock_timedwrlock, (rwlock_t* l, ts_t* t), (l, t))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_clockwrlock, rwlock_clockwrlock, (rwlock_t* l, clockid_t c, ts_t* t), (l, c, t))
SPINDLE_PRELOAD_ENTRY(pthread_rwlock_unlock, rwlock_unlock, (rwlock_t* l), (l))

SPINDLE_PRELOAD_ENTRY(pthread_spin_init, spin_init, (spin_t* l, int pshared), (l, pshared))
SPINDLE_PRELOAD_ENTRY(pthread_spin_destroy, spin_destroy, (spin_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_spin_lock, spin_lock, (spin_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_spin_trylock, spin_trylock, (spin_t* l), (l))
SPINDLE_PRELOAD_ENTRY(pthread_spin_unlock, spin_unlock, (spin_t* l), (l))

SPINDLE_PRELOAD_ENTRY(pthread_cond_init, cond_init, (cond_t* c, const pthread_condattr_t* a), (c, a))
SPINDLE_PRELOAD_ENTRY(pthread_cond_destroy, cond_destroy, (cond_t* c), (c))
SPINDLE_PRELOAD_ENTRY(pthread_cond_signal, cond_signal, (cond_t* c), (c))
SPINDLE_PRELOAD_ENTRY(pthread_cond_broadcast, cond_broadcast, (cond_t* c), (c))
SPINDLE_PRELOAD_ENTRY(pthread_cond_wait, cond_wait, (cond_t* c, mutex_t* m), (c, m))
SPINDLE_PRELOAD_ENTRY(pthread_cond_timedwait, cond_timedwait, (cond_t* c, mutex_t* m, ts_t* t), (c, m, t))
SPINDLE_PRELOAD_ENTRY(pthread_cond_clockwait, cond_clockwait, (cond_t* c, mutex_t* m, clockid_t k, ts_t* t), (c, m, k, t))

// The GLIBC_2.2.5 condition variable ABI: other functions, same names.
SPINDLE_PRELOAD_ENTRY(old_pthread_cond_init, old_cond_init, (cond_t* c, const pthread_condattr_t* a), (c, a))
SPINDLE_PRELOAD_ENTRY(old_pthread_cond_destroy, old_cond_destroy, (cond_t* c), (c))
SPINDLE_PRELOAD_ENTRY(old_pthread_cond_signal, old_cond_signal, (cond_t* c), (c))
SPINDLE_PRELOAD_ENTRY(old_pthread_cond_broadcast, old_cond_broadcast, (cond_t* c), (c))
SPINDLE_PRELOAD_ENTRY(old_pthread_cond_wait, old_cond_wait, (cond_t* c, mutex_t* m), (c, m))
SPINDLE_PRELOAD_ENTRY(old_pthread_cond_timedwait, old_cond_timedwait, (cond_t* c, mutex_t* m, ts_t* t), (c, m, t))

extern "C" {

// Thread creation ends the fork child's single-threaded mode.
SPINDLE_PRELOAD_EXPORT int spindle_entry_pthread_create(pthread_t* t, const pthread_attr_t* a,
                                                        void* (*start)(void*), void* arg) noexcept {
    spindle::preload::before_thread_create();
    using fn = int(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
    return spindle::preload::real<spindle::preload::real_fn::pthread_create, fn>()(t, a, start, arg);
}
SPINDLE_PRELOAD_EXPORT int spindle_entry_thrd_create(thrd_t* t, thrd_start_t start, void* arg) noexcept {
    spindle::preload::before_thread_create();
    using fn = int(thrd_t*, thrd_start_t, void*);
    return spindle::preload::real<spindle::preload::real_fn::thrd_create, fn>()(t, start, arg);
}

// Every pthread_atfork() comes here: ours is registered first.
SPINDLE_PRELOAD_EXPORT int spindle_entry___register_atfork(void (*prepare)(), void (*parent)(),
                                                           void (*child)(), void* dso) noexcept {
    spindle::preload::register_own_atfork();
    using fn = int(void (*)(), void (*)(), void (*)(), void*);
    return spindle::preload::real<spindle::preload::real_fn::register_atfork, fn>()(prepare, parent,
                                                                                    child, dso);
}

// For programs and tests that want to know whether, and how, they are
// interposed: declare it weak and test its address.
SPINDLE_PRELOAD_EXPORT const char* spindle_preload_lock_name(void) noexcept {
    return spindle::preload::initialize()->name;
}
SPINDLE_PRELOAD_EXPORT int spindle_preload_stats_enabled(void) noexcept {
    return spindle::preload::initialize()->stats ? 1 : 0;
}

// For tests/preload only: from the next fork on, the thread that forked
// calls hook(where, mutex) in each pthread_mutex_unlock of the child's
// single-threaded mode, where 0: before the handshake with other threads,
// 1: inside a reset (exports.cpp, "Fork"). Null: none.
SPINDLE_PRELOAD_EXPORT void spindle_preload_test_reset_hook(void (*hook)(int, const void*)) noexcept {
    spindle::preload::g_test_reset_hook.store(hook, std::memory_order_relaxed);
}

}  // extern "C"

SPINDLE_PRELOAD_VERSION(pthread_mutex_init, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_mutex_destroy, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_mutex_lock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_mutex_trylock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_mutex_trylock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_mutex_timedlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_mutex_timedlock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_mutex_clocklock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_mutex_clocklock, "GLIBC_2.30")
SPINDLE_PRELOAD_VERSION(pthread_mutex_unlock, "GLIBC_2.2.5")

SPINDLE_PRELOAD_VERSION(pthread_rwlock_init, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_init, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_destroy, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_destroy, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_rdlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_rdlock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_tryrdlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_tryrdlock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_timedrdlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_timedrdlock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_clockrdlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_clockrdlock, "GLIBC_2.30")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_wrlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_wrlock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_trywrlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_trywrlock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_timedwrlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_timedwrlock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_clockwrlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_clockwrlock, "GLIBC_2.30")
SPINDLE_PRELOAD_VERSION(pthread_rwlock_unlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_rwlock_unlock, "GLIBC_2.2.5")

SPINDLE_PRELOAD_VERSION(pthread_spin_init, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_spin_init, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_spin_destroy, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_spin_destroy, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_spin_lock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_spin_lock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_spin_trylock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_spin_trylock, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(pthread_spin_unlock, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_spin_unlock, "GLIBC_2.2.5")

SPINDLE_PRELOAD_VERSION(pthread_cond_init, "GLIBC_2.3.2")
SPINDLE_PRELOAD_VERSION(pthread_cond_destroy, "GLIBC_2.3.2")
SPINDLE_PRELOAD_VERSION(pthread_cond_signal, "GLIBC_2.3.2")
SPINDLE_PRELOAD_VERSION(pthread_cond_broadcast, "GLIBC_2.3.2")
SPINDLE_PRELOAD_VERSION(pthread_cond_wait, "GLIBC_2.3.2")
SPINDLE_PRELOAD_VERSION(pthread_cond_timedwait, "GLIBC_2.3.2")
SPINDLE_PRELOAD_VERSION(pthread_cond_clockwait, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_cond_clockwait, "GLIBC_2.30")
__asm__(".symver spindle_entry_old_pthread_cond_init, pthread_cond_init@GLIBC_2.2.5");
__asm__(".symver spindle_entry_old_pthread_cond_destroy, pthread_cond_destroy@GLIBC_2.2.5");
__asm__(".symver spindle_entry_old_pthread_cond_signal, pthread_cond_signal@GLIBC_2.2.5");
__asm__(".symver spindle_entry_old_pthread_cond_broadcast, pthread_cond_broadcast@GLIBC_2.2.5");
__asm__(".symver spindle_entry_old_pthread_cond_wait, pthread_cond_wait@GLIBC_2.2.5");
__asm__(".symver spindle_entry_old_pthread_cond_timedwait, pthread_cond_timedwait@GLIBC_2.2.5");

SPINDLE_PRELOAD_VERSION(pthread_create, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(pthread_create, "GLIBC_2.2.5")
SPINDLE_PRELOAD_VERSION(thrd_create, "GLIBC_2.34")
SPINDLE_PRELOAD_OLDER(thrd_create, "GLIBC_2.28")
SPINDLE_PRELOAD_VERSION(__register_atfork, "GLIBC_2.3.2")
