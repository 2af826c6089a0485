/* preload/cancel_wait.c — the futex sleep of pthread_cond_wait as a
 * cancellation point.
 *
 * C, because pthread_cleanup_push in C without -fexceptions registers the
 * handler with glibc's own unwinding buffers (sigsetjmp +
 * __pthread_register_cancel): no C++ personality routine, no exception
 * tables, nothing of libstdc++ or libgcc_s in our library is involved. The
 * C++ frames above this one are compiled with -fno-exceptions, so the
 * forced unwind of a cancellation passes through them (they have unwind
 * tables and no cleanups).
 *
 * The sleep itself runs with asynchronous cancellation enabled, as glibc
 * 2.36 runs its own cancellable system calls: a pthread_cancel() that
 * arrives while we sleep acts at once, one that was pending acts when the
 * type is switched. If the thread is cancelled anywhere between the two
 * pthread_setcanceltype calls, `cleanup` runs first (it leaves the condition
 * variable and relocks the mutex), then the thread's own handlers.
 */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((visibility("hidden"))) int spindle_preload_cancellable_wait(
    uint32_t* word, uint32_t expected, int op, const struct timespec* abs,
    void (*cleanup)(void*), void* arg) {
    volatile int err = 0; /* volatile: set after the setjmp of pthread_cleanup_push */
    const int caller_errno = errno; /* syscall() sets errno on failure (a timeout, EAGAIN); */
    int oldtype;                    /* pthread_cond_*wait return their error, and leave errno */
    pthread_cleanup_push(cleanup, arg);
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &oldtype);
    if (syscall(SYS_futex, word, op, expected, abs, NULL, FUTEX_BITSET_MATCH_ANY) != 0)
        err = errno;
    pthread_setcanceltype(oldtype, &oldtype);
    pthread_cleanup_pop(0);
    errno = caller_errno;
    return err;
}
