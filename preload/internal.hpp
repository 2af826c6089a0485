// preload/internal.hpp — what the parts of libspindle_preload.so share.
//
// The library replaces glibc's pthread mutex, rwlock, spinlock and condition
// variable entry points (exports.cpp). Every entry point calls through one
// table of function pointers, `api`, chosen once per process:
//
//     exported pthread_mutex_lock(m) --> current()->mutex_lock(m)
//                                          |
//            bootstrap table (before the first call: reads SPINDLE_LOCK,
//            SPINDLE_STATS, publishes the chosen table, forwards)
//            impl<algorithm, stats off>::table   one per SPINDLE_LOCK value
//            impl<algorithm, stats on>::table    the same, measuring
//            passthrough table                   SPINDLE_LOCK=pthread
//            fork-child table                    see exports.cpp
//
// So the stats-off fast path pays one well-predicted indirect call and no
// test of a flag: which algorithm, whether statistics are on and whether the
// library is initialized are all decided by which table is installed.
//
// Object layouts (glibc x86-64; the offsets are ABI, frozen by the static
// initializers, and checked by static_asserts in layout.hpp):
//
//   pthread_mutex_t (40 bytes)          ours                  glibc's meaning
//     0  int      __lock                unused (0)
//     4  unsigned __count               recursion depth       same
//     8  int      __owner               owner's thread_id()   same (a kernel tid)
//    12  unsigned __nusers              unused (0)
//    16  int      __kind                mutex kind            same, kept: the
//                                                             *_INITIALIZER_NP
//                                                             macros set it
//    20  short    __spins, __elision    unused (0)
//    24  list     (2 pointers)          the lock, <= 16 bytes
//
//   A mutex made robust, priority-inheritance, priority-protect or
//   process-shared is initialized by glibc and stays glibc's: glibc marks
//   those kinds with bits of __kind (mutex_layout::route_bits in
//   layout.hpp), and every entry point hands such a mutex to glibc untouched.
//
//   pthread_rwlock_t (56 bytes): see rwlock.hpp.   pthread_cond_t (48
//   bytes): see cond.hpp.   pthread_spinlock_t (int): see spin.hpp.
#pragma once

#include <pthread.h>
#include <threads.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/arch/fatal.hpp>

#define SPINDLE_PRELOAD_EXPORT __attribute__((visibility("default")))

namespace spindle::preload {

// ---------------------------------------------------------------------------
// The dispatch table.

struct api {
    int (*mutex_init)(pthread_mutex_t*, const pthread_mutexattr_t*);
    int (*mutex_destroy)(pthread_mutex_t*);
    int (*mutex_lock)(pthread_mutex_t*);
    int (*mutex_trylock)(pthread_mutex_t*);
    int (*mutex_timedlock)(pthread_mutex_t*, const struct timespec*);
    int (*mutex_clocklock)(pthread_mutex_t*, clockid_t, const struct timespec*);
    int (*mutex_unlock)(pthread_mutex_t*);

    int (*rwlock_init)(pthread_rwlock_t*, const pthread_rwlockattr_t*);
    int (*rwlock_destroy)(pthread_rwlock_t*);
    int (*rwlock_rdlock)(pthread_rwlock_t*);
    int (*rwlock_tryrdlock)(pthread_rwlock_t*);
    int (*rwlock_timedrdlock)(pthread_rwlock_t*, const struct timespec*);
    int (*rwlock_clockrdlock)(pthread_rwlock_t*, clockid_t, const struct timespec*);
    int (*rwlock_wrlock)(pthread_rwlock_t*);
    int (*rwlock_trywrlock)(pthread_rwlock_t*);
    int (*rwlock_timedwrlock)(pthread_rwlock_t*, const struct timespec*);
    int (*rwlock_clockwrlock)(pthread_rwlock_t*, clockid_t, const struct timespec*);
    int (*rwlock_unlock)(pthread_rwlock_t*);

    int (*spin_init)(pthread_spinlock_t*, int);
    int (*spin_destroy)(pthread_spinlock_t*);
    int (*spin_lock)(pthread_spinlock_t*);
    int (*spin_trylock)(pthread_spinlock_t*);
    int (*spin_unlock)(pthread_spinlock_t*);

    int (*cond_init)(pthread_cond_t*, const pthread_condattr_t*);
    int (*cond_destroy)(pthread_cond_t*);
    int (*cond_signal)(pthread_cond_t*);
    int (*cond_broadcast)(pthread_cond_t*);
    int (*cond_wait)(pthread_cond_t*, pthread_mutex_t*);
    int (*cond_timedwait)(pthread_cond_t*, pthread_mutex_t*, const struct timespec*);
    int (*cond_clockwait)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*);

    // The GLIBC_2.2.5 condition variable ABI (binaries linked before glibc
    // 2.3.2): the object holds a pointer to a current-ABI condition variable.
    int (*old_cond_init)(pthread_cond_t*, const pthread_condattr_t*);
    int (*old_cond_destroy)(pthread_cond_t*);
    int (*old_cond_signal)(pthread_cond_t*);
    int (*old_cond_broadcast)(pthread_cond_t*);
    int (*old_cond_wait)(pthread_cond_t*, pthread_mutex_t*);
    int (*old_cond_timedwait)(pthread_cond_t*, pthread_mutex_t*, const struct timespec*);

    // Run by the thread that forks, before the fork (algorithms.hpp); null: none.
    void (*before_fork)() noexcept;
    // pthread_rwlock_unlock in a single-threaded fork child (exports.cpp).
    int (*rwlock_child_unlock)(pthread_rwlock_t*);
    // pthread_spin_unlock in a single-threaded fork child (spin.hpp).
    int (*spin_child_unlock)(pthread_spinlock_t*);

    const char* name;  // the SPINDLE_LOCK value
    bool stats;        // a measuring table
    bool ours;         // false: passthrough to glibc
    bool delegates;    // a TCLock: a section may run on another thread (delegation.hpp)
};

// The installed table. Starts as the bootstrap table, is replaced once by the
// chosen one (and, in a fork child, by the child table until the child
// creates a thread).
extern std::atomic<const api*> g_api;

// acquire pairs with the release that installs a table (exports.cpp): the
// table itself is constant, but a bootstrap forward must also see what the
// installer initialized before it (the statistics table).
inline const api* current() noexcept { return g_api.load(std::memory_order_acquire); }

// Reads SPINDLE_LOCK / SPINDLE_STATS and installs the table they name (once;
// callers racing here compute the same table). A bad value ends the process
// with a message on stderr and exit status 2.
const api* initialize() noexcept;

// The passthrough table (SPINDLE_LOCK=pthread), and the lookup of a table by
// its SPINDLE_LOCK name (tables.cpp). null: no such algorithm.
extern const api passthrough_table;
const api* find_table(const char* name, std::size_t len, bool stats) noexcept;
// Writes the valid SPINDLE_LOCK values, separated by ", ", into buf, then
// the other accepted spellings (algorithm_aliases), each on a line of its own.
void list_algorithms(char* buf, std::size_t size) noexcept;

// The old-ABI condition variable functions, shared by every table of ours.
int old_cond_init(pthread_cond_t*, const pthread_condattr_t*) noexcept;
int old_cond_destroy(pthread_cond_t*) noexcept;
int old_cond_signal(pthread_cond_t*) noexcept;
int old_cond_broadcast(pthread_cond_t*) noexcept;
int old_cond_wait(pthread_cond_t*, pthread_mutex_t*) noexcept;
int old_cond_timedwait(pthread_cond_t*, pthread_mutex_t*, const struct timespec*) noexcept;

// ---------------------------------------------------------------------------
// Messages and fatal errors. Both write with write(2): no stdio, no locks,
// no allocation, usable from any state the library can be in. A fatal
// error is spindle's one fatal() (arch/fatal.hpp): "spindle: <message>".

void write_stderr(const char* s) noexcept;
using spindle::detail::fatal;

// ---------------------------------------------------------------------------
// Thread identity for recursive and errorcheck mutexes and rwlock writers.
//
// A small number handed out on first use, kept in initial-exec TLS. Not the
// kernel tid: the thread that calls fork() keeps its identity in the child
// (its TLS is copied), so the locks it held stay held by it there.

extern std::atomic<std::uint32_t> g_next_thread_id;
extern constinit thread_local std::uint32_t t_thread_id __attribute__((tls_model("initial-exec")));

inline std::uint32_t thread_id() noexcept {
    std::uint32_t id = t_thread_id;
    if (id == 0) [[unlikely]] {
        // relaxed: only uniqueness matters, which the RMW gives; 0 is never
        // handed out (it means "no owner").
        do
            id = g_next_thread_id.fetch_add(1, std::memory_order_relaxed) + 1;
        while (id == 0);
        t_thread_id = id;
    }
    return id;
}

// The identity if this thread has one, else 0 (a thread that never took a
// kinded mutex or a write lock cannot be their owner).
inline std::uint32_t thread_id_if_any() noexcept { return t_thread_id; }

// ---------------------------------------------------------------------------
// glibc's own functions, looked up on first use (real.cpp).

enum class real_fn : unsigned {
    mutex_init, mutex_destroy, mutex_lock, mutex_trylock, mutex_timedlock, mutex_clocklock,
    mutex_unlock,
    rwlock_init, rwlock_destroy, rwlock_rdlock, rwlock_tryrdlock, rwlock_timedrdlock,
    rwlock_clockrdlock, rwlock_wrlock, rwlock_trywrlock, rwlock_timedwrlock, rwlock_clockwrlock,
    rwlock_unlock,
    spin_init, spin_destroy, spin_lock, spin_trylock, spin_unlock,
    cond_init, cond_destroy, cond_signal, cond_broadcast, cond_wait, cond_timedwait,
    cond_clockwait,
    old_cond_init, old_cond_destroy, old_cond_signal, old_cond_broadcast, old_cond_wait,
    old_cond_timedwait,
    pthread_create, thrd_create, register_atfork,
    // blocking.cpp: named as the functions themselves
    nanosleep, clock_nanosleep, usleep, sleep, pause, poll, ppoll, select, pselect, epoll_wait, epoll_pwait, sem_wait, sem_timedwait, sem_clockwait, pthread_join, waitpid, sigwait, sigtimedwait, sigwaitinfo, read, readv, recv, recvfrom, recvmsg, accept, accept4, connect, __read_chk, __recv_chk, __recvfrom_chk, __poll_chk, __ppoll_chk,
    count
};

// The address of glibc's function, resolved with dlsym(RTLD_NEXT) /
// dlvsym(RTLD_NEXT) the first time it is needed (resolve_real, real.cpp).
// While a thread is inside that lookup, a nested request from the same
// thread (dlsym may lock) gets a stand-in that needs no lookup where there is
// one; otherwise the process stops with a message.
extern std::atomic<void*> g_real_addresses[static_cast<unsigned>(real_fn::count)];
void* resolve_real(real_fn f) noexcept;

template <real_fn F, class Fn>
inline Fn* real() noexcept {
    // acquire pairs with resolve_real's release store (the address came
    // from the dynamic linker; acquire keeps the reasoning simple and is a
    // plain load on x86).
    void* p = g_real_addresses[static_cast<unsigned>(F)].load(std::memory_order_acquire);
    if (p == nullptr) [[unlikely]]
        p = resolve_real(F);
    return reinterpret_cast<Fn*>(p);
}

// ---------------------------------------------------------------------------
// Statistics (SPINDLE_STATS=1; stats.cpp). Only the measuring tables call
// these.

enum class object_kind : std::uint8_t { mutex = 1, rwlock_read, rwlock_write, spin };

// Allocates the side table. false: no memory (statistics stay off).
bool stats_start() noexcept;
void stats_record(const void* object, object_kind kind, bool contended,
                  std::uint64_t wait_ns) noexcept;
// Prints the report on stderr (library destructor).
void stats_report() noexcept;
// Zeroes every count: in a fork child, from the child handler, while the
// child has one thread (the child reports its own locks, not the parent's).
void stats_forget() noexcept;
// The monotonic clock in nanoseconds.
std::uint64_t now_ns() noexcept;

// ---------------------------------------------------------------------------
// Fork (exports.cpp): a condition variable wait of this thread is being
// cancelled; in a fork child, withdraws what its calls under way announced.
// Nothing (one thread-local load) anywhere else.
void child_calls_cancelled() noexcept;

// ---------------------------------------------------------------------------
// A condition variable wait that is a cancellation point (cancel_wait.c).
// Sleeps on the futex word like FUTEX_WAIT_BITSET with `op`; if the thread is
// cancelled while it sleeps, runs cleanup(arg) before the thread's own
// cleanup handlers. Returns 0 or an errno value (EAGAIN, EINTR, ETIMEDOUT).
extern "C" int spindle_preload_cancellable_wait(std::uint32_t* word, std::uint32_t expected,
                                                int op, const struct timespec* abs,
                                                void (*cleanup)(void*), void* arg);

}  // namespace spindle::preload
