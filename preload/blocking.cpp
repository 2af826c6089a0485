// preload/blocking.cpp — blocking calls made inside a delegated critical
// section go back to their own thread first.
//
// Under SPINDLE_LOCK=tclock and tclock_blocking a contended critical section
// may run on the lock holder's thread (the combiner; locks/tclock.hpp). A
// section that sleeps there -- in nanosleep, poll, a read from a pipe or
// socket, a semaphore, a join -- would make the combiner's thread, and every
// waiter of its batch, sleep with it. So the library interposes the common
// sleeping calls of libc and, before forwarding each to glibc, calls
// tclock_may_block(): a section that runs delegated moves back to the
// thread that called lock() (the lock stays held, the combiner's batch ends)
// and sleeps there. Anywhere else -- no delegation, or another SPINDLE_LOCK
// value -- the check is one thread-local load.
//
//     sleeping     nanosleep, clock_nanosleep, usleep, sleep, pause
//     waiting      poll, ppoll, select, pselect, epoll_wait, epoll_pwait,
//                  sem_wait, sem_timedwait, sem_clockwait, pthread_join,
//                  waitpid, sigwait, sigtimedwait, sigwaitinfo
//     I/O          read, readv, recv, recvfrom, recvmsg, accept, accept4,
//                  connect, and the _FORTIFY_SOURCE entry points __read_chk,
//                  __recv_chk, __recvfrom_chk, __poll_chk, __ppoll_chk
//
// Signal handlers. These functions are async-signal-safe, and a handler may
// call them. glibc's functions are looked up in the library's constructor,
// so a handler does not reach dlsym (unless it runs before the
// constructor). But a handler that interrupts a delegated section on the
// combiner's thread, and calls one of them, moves the section -- with the
// handler's frame on it -- back to the waiting thread: the signal then stays
// blocked on the combiner's thread. Under SPINDLE_LOCK=tclock*, a handler
// that may interrupt a critical section should not call them.
//
// Calls glibc makes to these from inside itself (fread -> read) do not come
// through here (they bind inside libc), nor do raw system calls: such a
// section still sleeps on the combiner (tclock.hpp, "Blocking inside a
// critical section"). Each wrapper only adds the check: the arguments, the
// result, errno and cancellation are glibc's.
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <spindle/locks/tclock.hpp>

#include "internal.hpp"

using spindle::preload::real;
using spindle::preload::real_fn;

// spindle_block_<name>: the check, then glibc's function. The default
// version is given with .symver as in exports.cpp.
#define SPINDLE_PRELOAD_BLOCKING(ret, name, params, args, version)                      \
    extern "C" SPINDLE_PRELOAD_EXPORT ret spindle_block_##name params {                 \
        spindle::tclock_may_block();                                                    \
        return real<real_fn::name, decltype(::name)>() args;                            \
    }                                                                                   \
    __asm__(".symver spindle_block_" #name ", " #name "@@" version);
// An older version of the same function (an alias; its real function is
// the default one: these kept their signature across versions).
#define SPINDLE_PRELOAD_BLOCKING_OLDER(name, version)                                         \
    extern "C" SPINDLE_PRELOAD_EXPORT decltype(spindle_block_##name) spindle_block_old_##name \
        __attribute__((alias("spindle_block_" #name)));                                       \
    __asm__(".symver spindle_block_old_" #name ", " #name "@" version);

using ts_t = const struct timespec;

SPINDLE_PRELOAD_BLOCKING(int, nanosleep, (ts_t* req, struct timespec* rem), (req, rem), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, clock_nanosleep, (clockid_t c, int flags, ts_t* req, struct timespec* rem),
                         (c, flags, req, rem), "GLIBC_2.17")
SPINDLE_PRELOAD_BLOCKING(int, usleep, (useconds_t us), (us), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(unsigned, sleep, (unsigned s), (s), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, pause, (void), (), "GLIBC_2.2.5")

SPINDLE_PRELOAD_BLOCKING(int, poll, (struct pollfd* f, nfds_t n, int ms), (f, n, ms), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, ppoll, (struct pollfd* f, nfds_t n, ts_t* t, const sigset_t* s), (f, n, t, s),
                         "GLIBC_2.4")
SPINDLE_PRELOAD_BLOCKING(int, select, (int n, fd_set* r, fd_set* w, fd_set* e, struct timeval* t),
                         (n, r, w, e, t), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, pselect, (int n, fd_set* r, fd_set* w, fd_set* e, ts_t* t, const sigset_t* s),
                         (n, r, w, e, t, s), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, epoll_wait, (int fd, struct epoll_event* ev, int n, int ms), (fd, ev, n, ms),
                         "GLIBC_2.3.2")
SPINDLE_PRELOAD_BLOCKING(int, epoll_pwait, (int fd, struct epoll_event* ev, int n, int ms, const sigset_t* s),
                         (fd, ev, n, ms, s), "GLIBC_2.6")
SPINDLE_PRELOAD_BLOCKING(int, sem_wait, (sem_t * s), (s), "GLIBC_2.34")
SPINDLE_PRELOAD_BLOCKING_OLDER(sem_wait, "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, sem_timedwait, (sem_t * s, ts_t* t), (s, t), "GLIBC_2.34")
SPINDLE_PRELOAD_BLOCKING_OLDER(sem_timedwait, "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, sem_clockwait, (sem_t * s, clockid_t c, ts_t* t), (s, c, t), "GLIBC_2.34")
SPINDLE_PRELOAD_BLOCKING_OLDER(sem_clockwait, "GLIBC_2.30")
SPINDLE_PRELOAD_BLOCKING(int, pthread_join, (pthread_t t, void** r), (t, r), "GLIBC_2.34")
SPINDLE_PRELOAD_BLOCKING_OLDER(pthread_join, "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(pid_t, waitpid, (pid_t p, int* st, int o), (p, st, o), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, sigwait, (const sigset_t* s, int* sig), (s, sig), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, sigtimedwait, (const sigset_t* s, siginfo_t* i, ts_t* t), (s, i, t),
                         "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, sigwaitinfo, (const sigset_t* s, siginfo_t* i), (s, i), "GLIBC_2.2.5")

SPINDLE_PRELOAD_BLOCKING(ssize_t, read, (int fd, void* b, size_t n), (fd, b, n), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(ssize_t, readv, (int fd, const struct iovec* v, int n), (fd, v, n), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(ssize_t, recv, (int fd, void* b, size_t n, int f), (fd, b, n, f), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(ssize_t, recvfrom, (int fd, void* b, size_t n, int f, struct sockaddr* a, socklen_t* l),
                         (fd, b, n, f, a, l), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(ssize_t, recvmsg, (int fd, struct msghdr* m, int f), (fd, m, f), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, accept, (int fd, struct sockaddr* a, socklen_t* l), (fd, a, l), "GLIBC_2.2.5")
SPINDLE_PRELOAD_BLOCKING(int, accept4, (int fd, struct sockaddr* a, socklen_t* l, int f), (fd, a, l, f),
                         "GLIBC_2.10")
SPINDLE_PRELOAD_BLOCKING(int, connect, (int fd, const struct sockaddr* a, socklen_t l), (fd, a, l),
                         "GLIBC_2.2.5")

// _FORTIFY_SOURCE: what a program built with it calls instead.
extern "C" {
ssize_t __read_chk(int fd, void* b, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void* b, size_t n, size_t buflen, int f);
ssize_t __recvfrom_chk(int fd, void* b, size_t n, size_t buflen, int f, struct sockaddr* a, socklen_t* l);
int __poll_chk(struct pollfd* f, nfds_t n, int ms, size_t flen);
int __ppoll_chk(struct pollfd* f, nfds_t n, const struct timespec* t, const sigset_t* s, size_t flen);
}
SPINDLE_PRELOAD_BLOCKING(ssize_t, __read_chk, (int fd, void* b, size_t n, size_t bl), (fd, b, n, bl), "GLIBC_2.4")
SPINDLE_PRELOAD_BLOCKING(ssize_t, __recv_chk, (int fd, void* b, size_t n, size_t bl, int f), (fd, b, n, bl, f),
                         "GLIBC_2.4")
SPINDLE_PRELOAD_BLOCKING(ssize_t, __recvfrom_chk,
                         (int fd, void* b, size_t n, size_t bl, int f, struct sockaddr* a, socklen_t* l),
                         (fd, b, n, bl, f, a, l), "GLIBC_2.4")
SPINDLE_PRELOAD_BLOCKING(int, __poll_chk, (struct pollfd* f, nfds_t n, int ms, size_t fl), (f, n, ms, fl),
                         "GLIBC_2.16")
SPINDLE_PRELOAD_BLOCKING(int, __ppoll_chk, (struct pollfd* f, nfds_t n, ts_t* t, const sigset_t* s, size_t fl),
                         (f, n, t, s, fl), "GLIBC_2.16")
SPINDLE_PRELOAD_BLOCKING_OLDER(clock_nanosleep, "GLIBC_2.2.5")

namespace {

// Look glibc's functions up now, at load time, rather than on first use:
// a signal handler's first read() or waitpid() then finds them resolved.
__attribute__((constructor)) void resolve_blocking_calls() noexcept {
    for (unsigned f = static_cast<unsigned>(real_fn::nanosleep); f < static_cast<unsigned>(real_fn::count); ++f)
        // relaxed: only skips a lookup already made (resolve_real stores
        // with release; real() reads with acquire).
        if (spindle::preload::g_real_addresses[f].load(std::memory_order_relaxed) == nullptr)
            (void)spindle::preload::resolve_real(static_cast<real_fn>(f));
}

}  // namespace
