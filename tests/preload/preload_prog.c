/* tests/preload/preload_prog.c — an ordinary C program that uses every
 * pthread call libspindle_preload.so interposes, run under LD_PRELOAD with
 * each SPINDLE_LOCK value (tests/preload/CMakeLists.txt).
 *
 *   preload_prog              all the checks below; exit 0 when they pass
 *   preload_prog bad-env      SPINDLE_LOCK / SPINDLE_STATS misuse: spawns
 *                             itself with bad values, expects a non-zero
 *                             exit and a message naming the valid values
 *   preload_prog stats        spawns itself with SPINDLE_STATS=1 on a
 *                             contended workload, expects the report
 *   preload_prog preinit      (spawned by test_preinit) checks the lock
 *                             chosen by a lock in a .preinit_array function
 *
 * PRELOAD_PROG_ONLY=test_x runs only that part of the checks (to repeat one);
 * PRELOAD_PROG_HANG_S=N sets the hang detectors' limit (below).
 *
 * It must run interposed: it asks the library through a weak symbol, and
 * checks that a held mutex's lock word is where the library puts it.
 * Nothing here asserts how long anything takes; a deadline is only checked
 * to have passed when ETIMEDOUT comes back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

/* preload_early.c: what its constructor saw, before ours ran. */
extern pthread_mutex_t early_mutex;
extern int early_lock_word_used, early_glibc_word_used, early_results_ok, early_thread_started;
extern pthread_mutex_t early_counter_mutex;
extern long early_counter, early_expected;
void early_join(void);

/* The library's own functions: null when it is not loaded. */
extern const char* spindle_preload_lock_name(void) __attribute__((weak));
/* Its test hook: the thread that forked calls hook(where, mutex) in each
 * pthread_mutex_unlock of the child's single-threaded mode; where 0: before
 * the handshake with other threads, 1: inside a reset. */
extern void spindle_preload_test_reset_hook(void (*hook)(int where, const void* m)) __attribute__((weak));

/* The GLIBC_2.2.5 versions, which binaries linked against old glibc use. */
int old_mutex_trylock(pthread_mutex_t*);
int old_cond_init(pthread_cond_t*, const pthread_condattr_t*);
int old_cond_destroy(pthread_cond_t*);
int old_cond_signal(pthread_cond_t*);
int old_cond_broadcast(pthread_cond_t*);
int old_cond_wait(pthread_cond_t*, pthread_mutex_t*);
int old_cond_timedwait(pthread_cond_t*, pthread_mutex_t*, const struct timespec*);
__asm__(".symver old_mutex_trylock, pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver old_cond_init, pthread_cond_init@GLIBC_2.2.5");
__asm__(".symver old_cond_destroy, pthread_cond_destroy@GLIBC_2.2.5");
__asm__(".symver old_cond_signal, pthread_cond_signal@GLIBC_2.2.5");
__asm__(".symver old_cond_broadcast, pthread_cond_broadcast@GLIBC_2.2.5");
__asm__(".symver old_cond_wait, pthread_cond_wait@GLIBC_2.2.5");
__asm__(".symver old_cond_timedwait, pthread_cond_timedwait@GLIBC_2.2.5");

static const char* g_lock = "hemlock_park"; /* the SPINDLE_LOCK value under test (unset: the default) */
static int g_ours;                      /* 1: spindle's locks, 0: pthread (glibc's) */
static int g_threads;                   /* more than the CPUs */
static long g_iters;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "preload_prog [%s] %s:%d: CHECK(%s) failed\n", g_lock, __FILE__, \
                    __LINE__, #cond);                                                    \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define CHECK_EQ(a, b)                                                                     \
    do {                                                                                   \
        long long va_ = (long long)(a), vb_ = (long long)(b);                              \
        if (va_ != vb_) {                                                                  \
            fprintf(stderr, "preload_prog [%s] %s:%d: %s == %lld, expected %s == %lld\n", \
                    g_lock, __FILE__, __LINE__, #a, va_, #b, vb_);                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void start(pthread_t* t, void* (*fn)(void*), void* arg) {
    CHECK_EQ(pthread_create(t, NULL, fn, arg), 0);
}
static void* join(pthread_t t) {
    void* r;
    CHECK_EQ(pthread_join(t, &r), 0);
    return r;
}

static struct timespec in_ms(clockid_t c, long ms) {
    struct timespec ts;
    clock_gettime(c, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}
static int passed(clockid_t c, const struct timespec* d) {
    struct timespec now;
    clock_gettime(c, &now);
    return now.tv_sec > d->tv_sec || (now.tv_sec == d->tv_sec && now.tv_nsec >= d->tv_nsec);
}
static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Hang detection. A test that would wait for ever without a fix waits at
 * most g_hang_s seconds (PRELOAD_PROG_HANG_S; default 60, far beyond what a
 * loaded machine needs) and then fails with a message, so that a hang shows
 * up as a failed check rather than a stuck test run. A forked child arms
 * alarm(g_hang_s) and wait_child() reports its SIGALRM as a hang. */
static int g_hang_s = 60;
static void child_deadline(void) { alarm((unsigned)g_hang_s); }
static void wait_child(pid_t pid, const char* what) {
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
        fprintf(stderr, "preload_prog [%s]: %s: the child hung (no exit within %d s)\n", g_lock, what,
                g_hang_s);
        exit(1);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "preload_prog [%s]: %s: the child failed\n", g_lock, what);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

/* A lock word is where the library says: a held mutex of ours has __lock
 * (offset 0) zero and a non-zero lock in bytes 24..39 (all-zero bytes are
 * an unlocked lock); glibc's has __lock non-zero. */
static int lock_room_zero(const void* m, size_t offset) {
    const unsigned char* b = (const unsigned char*)m + offset;
    for (int i = 0; i < 16; ++i)
        if (b[i]) return 0;
    return 1;
}
static void check_layout_held(pthread_mutex_t* m) {
    if (g_ours) {
        CHECK_EQ(m->__data.__lock, 0);
        CHECK(!lock_room_zero(m, 24));
    } else {
        CHECK(m->__data.__lock != 0);
    }
}

/* ------------------------------------------------------------------------ */
/* A first lock before libc has set up the environment: a program's
 * .preinit_array functions run before every library constructor, libc's
 * included, and `environ` is still null there. With PRELOAD_PROG_PREINIT=1
 * in its environment this program locks a mutex from one, so that the
 * library chooses its table there (test_preinit). */
static int g_preinit_locked; /* 1: locked in preinit, environ null; 2: environ set */
static void preinit_lock(int argc, char** argv, char** envp) {
    (void)argc;
    (void)argv;
    int wanted = 0;
    for (char** e = envp; e != NULL && *e != NULL; ++e)
        if (strcmp(*e, "PRELOAD_PROG_PREINIT=1") == 0) wanted = 1;
    if (!wanted) return;
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    if (pthread_mutex_lock(&m) != 0 || pthread_mutex_unlock(&m) != 0) return;
    g_preinit_locked = environ == NULL ? 1 : 2;
}
__attribute__((section(".preinit_array"), used)) static void (*g_preinit)(int, char**, char**) = preinit_lock;

/* ------------------------------------------------------------------------ */
/* Interposition. */

static void test_interposed(void) {
    CHECK(spindle_preload_lock_name != NULL); /* the library is loaded */
    CHECK(strcmp(spindle_preload_lock_name(), g_lock) == 0);
    /* Locks taken by another library's constructor, before ours ran, went
     * through us already. */
    CHECK_EQ(early_results_ok, 1);
    CHECK_EQ(early_lock_word_used, g_ours);
    CHECK_EQ(early_glibc_word_used, !g_ours);
    /* The thread it started contended with it across our constructor. */
    CHECK_EQ(early_thread_started, 1);
    early_join();
    CHECK_EQ(pthread_mutex_lock(&early_counter_mutex), 0);
    CHECK_EQ(early_counter, early_expected);
    CHECK_EQ(pthread_mutex_unlock(&early_counter_mutex), 0);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    CHECK_EQ(pthread_mutex_lock(&m), 0);
    check_layout_held(&m);
    /* The GLIBC_2.2.5 trylock is interposed too: glibc's would look at
     * __lock, see 0 under our locks, and take the mutex. */
    CHECK_EQ(old_mutex_trylock(&m), EBUSY);
    CHECK_EQ(pthread_mutex_unlock(&m), 0);
    CHECK_EQ(old_mutex_trylock(&m), 0);
    CHECK_EQ(pthread_mutex_unlock(&m), 0);
}

/* ------------------------------------------------------------------------ */
/* Mutex kinds. */

struct other_args {
    pthread_mutex_t* m;
    int (*op)(pthread_mutex_t*);
};
static void* other_op(void* p) {
    struct other_args* a = p;
    return (void*)(intptr_t)a->op(a->m);
}
/* op(m) from another thread. */
static int in_other_thread(int (*op)(pthread_mutex_t*), pthread_mutex_t* m) {
    struct other_args a = {m, op};
    pthread_t t;
    start(&t, other_op, &a);
    return (int)(intptr_t)join(t);
}

static void check_normal(pthread_mutex_t* m) {
    CHECK_EQ(pthread_mutex_lock(m), 0);
    CHECK_EQ(pthread_mutex_trylock(m), EBUSY);
    CHECK_EQ(in_other_thread(pthread_mutex_trylock, m), EBUSY);
    CHECK_EQ(pthread_mutex_destroy(m), EBUSY);
    CHECK_EQ(pthread_mutex_unlock(m), 0);
    CHECK_EQ(in_other_thread(pthread_mutex_trylock, m), 0);  /* and leaves it locked... */
    CHECK_EQ(pthread_mutex_trylock(m), EBUSY);
}

static void check_recursive(pthread_mutex_t* m) {
    CHECK_EQ(pthread_mutex_lock(m), 0);
    CHECK_EQ(pthread_mutex_lock(m), 0);
    CHECK_EQ(pthread_mutex_trylock(m), 0);
    struct timespec past = {0, 0};
    CHECK_EQ(pthread_mutex_timedlock(m, &past), 0); /* depth 4 */
    CHECK_EQ(in_other_thread(pthread_mutex_trylock, m), EBUSY);
    CHECK_EQ(in_other_thread(pthread_mutex_unlock, m), EPERM);
    for (int i = 0; i < 4; ++i) CHECK_EQ(pthread_mutex_unlock(m), 0);
    CHECK_EQ(pthread_mutex_unlock(m), EPERM);
    CHECK_EQ(in_other_thread(pthread_mutex_trylock, m), 0); /* locked by an exited thread now */
    CHECK_EQ(pthread_mutex_trylock(m), EBUSY);
}

static void check_errorcheck(pthread_mutex_t* m) {
    CHECK_EQ(pthread_mutex_unlock(m), EPERM); /* not locked */
    CHECK_EQ(pthread_mutex_lock(m), 0);
    CHECK_EQ(pthread_mutex_lock(m), EDEADLK);
    CHECK_EQ(pthread_mutex_trylock(m), EBUSY);
    struct timespec soon = in_ms(CLOCK_REALTIME, 10);
    CHECK_EQ(pthread_mutex_timedlock(m, &soon), EDEADLK);
    CHECK_EQ(in_other_thread(pthread_mutex_unlock, m), EPERM);
    CHECK_EQ(pthread_mutex_unlock(m), 0);
    CHECK_EQ(pthread_mutex_unlock(m), EPERM);
    CHECK_EQ(pthread_mutex_destroy(m), 0);
}

static void init_kind(pthread_mutex_t* m, int type) {
    pthread_mutexattr_t a;
    CHECK_EQ(pthread_mutexattr_init(&a), 0);
    CHECK_EQ(pthread_mutexattr_settype(&a, type), 0);
    CHECK_EQ(pthread_mutex_init(m, &a), 0);
    CHECK_EQ(pthread_mutexattr_destroy(&a), 0);
}

static void test_mutex_kinds(void) {
    pthread_mutex_t m;
    init_kind(&m, PTHREAD_MUTEX_NORMAL);
    check_normal(&m);
    pthread_mutex_t s = PTHREAD_MUTEX_INITIALIZER;
    check_normal(&s);
    pthread_mutex_t ad = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
    check_normal(&ad);
    CHECK_EQ(pthread_mutex_init(&m, NULL), 0);
    check_normal(&m);

    init_kind(&m, PTHREAD_MUTEX_RECURSIVE);
    check_recursive(&m);
    pthread_mutex_t r = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    check_recursive(&r);

    init_kind(&m, PTHREAD_MUTEX_ERRORCHECK);
    check_errorcheck(&m);
    pthread_mutex_t e = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    check_errorcheck(&e);
}

/* Robust, priority-inheritance and process-shared mutexes are glibc's. */
static pthread_mutex_t g_robust;
static void* die_holding(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_robust), 0);
    return NULL; /* exits holding it */
}

static void test_glibc_kinds(void) {
    pthread_mutexattr_t a;
    CHECK_EQ(pthread_mutexattr_init(&a), 0);
    CHECK_EQ(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
    CHECK_EQ(pthread_mutex_init(&g_robust, &a), 0);
    CHECK_EQ(pthread_mutexattr_destroy(&a), 0);
    pthread_t t;
    start(&t, die_holding, NULL);
    join(t);
    CHECK_EQ(pthread_mutex_lock(&g_robust), EOWNERDEAD);
    CHECK(g_robust.__data.__lock != 0); /* glibc's lock word: the owner's tid */
    CHECK_EQ(pthread_mutex_consistent(&g_robust), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_robust), 0);
    CHECK_EQ(pthread_mutex_lock(&g_robust), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_robust), 0);
    CHECK_EQ(pthread_mutex_destroy(&g_robust), 0);

    pthread_mutex_t pi;
    CHECK_EQ(pthread_mutexattr_init(&a), 0);
    CHECK_EQ(pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT), 0);
    CHECK_EQ(pthread_mutex_init(&pi, &a), 0);
    CHECK_EQ(pthread_mutexattr_destroy(&a), 0);
    CHECK_EQ(pthread_mutex_lock(&pi), 0);
    CHECK_EQ(pi.__data.__lock, gettid()); /* a PI futex holds the owner's tid */
    CHECK_EQ(in_other_thread(pthread_mutex_trylock, &pi), EBUSY);
    struct timespec past = {0, 0};
    CHECK_EQ(pthread_mutex_unlock(&pi), 0);
    CHECK_EQ(pthread_mutex_timedlock(&pi, &past), 0);
    CHECK_EQ(pthread_mutex_unlock(&pi), 0);
    CHECK_EQ(pthread_mutex_destroy(&pi), 0);

    /* Process-shared: a mutex in shared memory, locked from a child. */
    pthread_mutex_t* sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    CHECK_EQ(pthread_mutexattr_init(&a), 0);
    CHECK_EQ(pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    CHECK_EQ(pthread_mutex_init(sh, &a), 0);
    CHECK_EQ(pthread_mutexattr_destroy(&a), 0);
    CHECK_EQ(pthread_mutex_lock(sh), 0);
    CHECK(sh->__data.__lock != 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int r = pthread_mutex_lock(sh); /* waits for the parent */
        if (r == 0) r = pthread_mutex_unlock(sh);
        _exit(r == 0 ? 0 : 1);
    }
    sleep_ms(20);
    CHECK_EQ(pthread_mutex_unlock(sh), 0);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(pthread_mutex_destroy(sh), 0);
    munmap(sh, sizeof *sh);
}

/* ------------------------------------------------------------------------ */
/* Timed locks. */

static pthread_mutex_t g_held = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_hold_state; /* 1: holder has the lock, 2: release it */
static void* hold_until_told(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_held), 0);
    atomic_store(&g_hold_state, 1);
    while (atomic_load(&g_hold_state) != 2) sleep_ms(1);
    CHECK_EQ(pthread_mutex_unlock(&g_held), 0);
    return NULL;
}

static void test_timed(void) {
    struct timespec past = {1, 0}, bad = {0, 1000000000L}, neg = {-1, 0};
    /* Free: locked whatever the deadline, even a malformed one. */
    CHECK_EQ(pthread_mutex_timedlock(&g_held, &past), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_held), 0);
    CHECK_EQ(pthread_mutex_clocklock(&g_held, CLOCK_MONOTONIC, &past), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_held), 0);
    CHECK_EQ(pthread_mutex_clocklock(&g_held, CLOCK_PROCESS_CPUTIME_ID, &past), EINVAL);

    atomic_store(&g_hold_state, 0);
    pthread_t t;
    start(&t, hold_until_told, NULL);
    while (atomic_load(&g_hold_state) != 1) sleep_ms(1);
    CHECK_EQ(pthread_mutex_timedlock(&g_held, &past), ETIMEDOUT);
    CHECK_EQ(pthread_mutex_timedlock(&g_held, &neg), ETIMEDOUT);
    CHECK_EQ(pthread_mutex_timedlock(&g_held, &bad), EINVAL);
    struct timespec d = in_ms(CLOCK_REALTIME, 30);
    CHECK_EQ(pthread_mutex_timedlock(&g_held, &d), ETIMEDOUT);
    CHECK(passed(CLOCK_REALTIME, &d));
    d = in_ms(CLOCK_MONOTONIC, 30);
    CHECK_EQ(pthread_mutex_clocklock(&g_held, CLOCK_MONOTONIC, &d), ETIMEDOUT);
    CHECK(passed(CLOCK_MONOTONIC, &d));
    /* A future deadline and a release before it. */
    atomic_store(&g_hold_state, 2);
    d = in_ms(CLOCK_MONOTONIC, 600000);
    CHECK_EQ(pthread_mutex_clocklock(&g_held, CLOCK_MONOTONIC, &d), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_held), 0);
    join(t);
}

/* ------------------------------------------------------------------------ */
/* Mutual exclusion under oversubscription: an exact count. */

struct stress {
    pthread_mutex_t* m;
    long iters;
    long counter; /* not atomic: the mutex protects it */
    int mode;     /* 0 lock, 1 trylock loop, 2 timedlock, 3 recursive twice */
};
static void* stress_worker(void* p) {
    struct stress* s = p;
    for (long i = 0; i < s->iters; ++i) {
        switch (s->mode) {
            case 0: CHECK_EQ(pthread_mutex_lock(s->m), 0); break;
            case 1:
                while (pthread_mutex_trylock(s->m) != 0) sched_yield();
                break;
            case 2: {
                struct timespec d = in_ms(CLOCK_REALTIME, 600000);
                CHECK_EQ(pthread_mutex_timedlock(s->m, &d), 0);
                break;
            }
            case 3:
                CHECK_EQ(pthread_mutex_lock(s->m), 0);
                CHECK_EQ(pthread_mutex_lock(s->m), 0);
                break;
        }
        long v = s->counter;
        if ((i & 63) == 0) sched_yield(); /* invite preemption inside */
        s->counter = v + 1;
        CHECK_EQ(pthread_mutex_unlock(s->m), 0);
        if (s->mode == 3) CHECK_EQ(pthread_mutex_unlock(s->m), 0);
    }
    return NULL;
}

static void run_stress(pthread_mutex_t* m, int mode, long iters) {
    struct stress s = {m, iters, 0, mode};
    pthread_t t[64];
    for (int i = 0; i < g_threads; ++i) start(&t[i], stress_worker, &s);
    for (int i = 0; i < g_threads; ++i) join(t[i]);
    CHECK_EQ(s.counter, (long)g_threads * iters);
}

static void test_stress(void) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    run_stress(&m, 0, g_iters);
    run_stress(&m, 1, g_iters / 4);
    run_stress(&m, 2, g_iters / 4);
    pthread_mutex_t r = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    run_stress(&r, 3, g_iters / 4);
}

/* ------------------------------------------------------------------------ */
/* Condition variables. */

#define RING 4
struct queue {
    pthread_mutex_t m;
    pthread_cond_t not_empty, not_full;
    long items[RING];
    int head, count;
    int old_abi; /* use the GLIBC_2.2.5 functions */
};
static int q_wait(struct queue* q, pthread_cond_t* c) {
    return q->old_abi ? old_cond_wait(c, &q->m) : pthread_cond_wait(c, &q->m);
}
static int q_signal(struct queue* q, pthread_cond_t* c) {
    return q->old_abi ? old_cond_signal(c) : pthread_cond_signal(c);
}
static void* producer(void* p) {
    struct queue* q = p;
    for (long i = 1; i <= g_iters; ++i) {
        CHECK_EQ(pthread_mutex_lock(&q->m), 0);
        while (q->count == RING) CHECK_EQ(q_wait(q, &q->not_full), 0);
        q->items[(q->head + q->count++) % RING] = i;
        CHECK_EQ(q_signal(q, &q->not_empty), 0);
        CHECK_EQ(pthread_mutex_unlock(&q->m), 0);
    }
    return NULL;
}
static void* consumer(void* p) {
    struct queue* q = p;
    long sum = 0;
    for (long i = 1; i <= g_iters; ++i) {
        CHECK_EQ(pthread_mutex_lock(&q->m), 0);
        while (q->count == 0) CHECK_EQ(q_wait(q, &q->not_empty), 0);
        long v = q->items[q->head];
        q->head = (q->head + 1) % RING;
        q->count--;
        CHECK_EQ(v, i); /* one producer: FIFO order */
        sum += v;
        CHECK_EQ(q_signal(q, &q->not_full), 0);
        CHECK_EQ(pthread_mutex_unlock(&q->m), 0);
    }
    return (void*)sum;
}
static void producer_consumer(int old_abi) {
    struct queue q = {.m = PTHREAD_MUTEX_INITIALIZER, .old_abi = old_abi};
    if (old_abi) {
        CHECK_EQ(old_cond_init(&q.not_empty, NULL), 0);
        memset(&q.not_full, 0, sizeof q.not_full); /* the old static initializer */
    } else {
        q.not_empty = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
        CHECK_EQ(pthread_cond_init(&q.not_full, NULL), 0);
    }
    pthread_t p, c;
    start(&p, producer, &q);
    start(&c, consumer, &q);
    join(p);
    CHECK_EQ((long)join(c), g_iters * (g_iters + 1) / 2);
    if (old_abi) {
        CHECK_EQ(old_cond_destroy(&q.not_empty), 0);
        CHECK_EQ(old_cond_destroy(&q.not_full), 0);
    } else {
        CHECK_EQ(pthread_cond_destroy(&q.not_empty), 0);
        CHECK_EQ(pthread_cond_destroy(&q.not_full), 0);
    }
}

struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    int open, waiting, passed;
};
static void* wait_gate(void* p) {
    struct gate* g = p;
    CHECK_EQ(pthread_mutex_lock(&g->m), 0);
    g->waiting++;
    while (!g->open) CHECK_EQ(pthread_cond_wait(&g->c, &g->m), 0);
    g->passed++;
    CHECK_EQ(pthread_mutex_unlock(&g->m), 0);
    return NULL;
}

static pthread_mutex_t g_cancel_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cancel_c = PTHREAD_COND_INITIALIZER;
static atomic_int g_cancel_waiting, g_cleanup_ran;
static void cancel_cleanup(void* p) {
    (void)p;
    /* POSIX: the mutex is held again when cleanup handlers run. */
    CHECK_EQ(pthread_mutex_trylock(&g_cancel_m), EBUSY);
    atomic_store(&g_cleanup_ran, 1);
    CHECK_EQ(pthread_mutex_unlock(&g_cancel_m), 0);
}
static void* wait_forever(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_cancel_m), 0);
    pthread_cleanup_push(cancel_cleanup, NULL);
    atomic_store(&g_cancel_waiting, 1);
    for (;;) pthread_cond_wait(&g_cancel_c, &g_cancel_m);
    pthread_cleanup_pop(1);
    return NULL;
}

static void test_cond(void) {
    producer_consumer(0);
    producer_consumer(1);

    /* Broadcast wakes every waiter; destroy right after is safe. */
    struct gate* g = calloc(1, sizeof *g);
    CHECK_EQ(pthread_mutex_init(&g->m, NULL), 0);
    CHECK_EQ(pthread_cond_init(&g->c, NULL), 0);
    pthread_t t[64];
    for (int i = 0; i < g_threads; ++i) start(&t[i], wait_gate, g);
    for (;;) {
        CHECK_EQ(pthread_mutex_lock(&g->m), 0);
        int w = g->waiting;
        CHECK_EQ(pthread_mutex_unlock(&g->m), 0);
        if (w == g_threads) break;
        sleep_ms(1);
    }
    CHECK_EQ(pthread_mutex_lock(&g->m), 0);
    g->open = 1;
    CHECK_EQ(pthread_cond_broadcast(&g->c), 0);
    CHECK_EQ(pthread_mutex_unlock(&g->m), 0);
    for (int i = 0; i < g_threads; ++i) join(t[i]);
    CHECK_EQ(g->passed, g_threads);
    CHECK_EQ(pthread_cond_destroy(&g->c), 0);
    CHECK_EQ(pthread_mutex_destroy(&g->m), 0);
    free(g);

    /* Timed waits: the mutex is held again on every return. */
    pthread_mutex_t m = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    struct timespec past = {1, 0}, bad = {0, -1};
    CHECK_EQ(pthread_cond_wait(&c, &m), EPERM); /* errorcheck, not held */
    CHECK_EQ(pthread_mutex_lock(&m), 0);
    CHECK_EQ(pthread_cond_timedwait(&c, &m, &past), ETIMEDOUT);
    CHECK_EQ(pthread_cond_timedwait(&c, &m, &bad), EINVAL);
    struct timespec d = in_ms(CLOCK_REALTIME, 20);
    CHECK_EQ(pthread_cond_timedwait(&c, &m, &d), ETIMEDOUT);
    CHECK(passed(CLOCK_REALTIME, &d));
    d = in_ms(CLOCK_MONOTONIC, 20);
    CHECK_EQ(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d), ETIMEDOUT);
    CHECK(passed(CLOCK_MONOTONIC, &d));
    CHECK_EQ(pthread_cond_clockwait(&c, &m, CLOCK_THREAD_CPUTIME_ID, &d), EINVAL);
    CHECK_EQ(pthread_mutex_unlock(&m), 0); /* errorcheck: proves we held it */

    /* A monotonic condition variable (pthread_condattr_setclock). */
    pthread_condattr_t ca;
    CHECK_EQ(pthread_condattr_init(&ca), 0);
    CHECK_EQ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC), 0);
    CHECK_EQ(pthread_cond_init(&c, &ca), 0);
    CHECK_EQ(pthread_condattr_destroy(&ca), 0);
    CHECK_EQ(pthread_mutex_lock(&m), 0);
    d = in_ms(CLOCK_MONOTONIC, 20);
    CHECK_EQ(pthread_cond_timedwait(&c, &m, &d), ETIMEDOUT);
    CHECK(passed(CLOCK_MONOTONIC, &d));
    CHECK_EQ(pthread_mutex_unlock(&m), 0);
    CHECK_EQ(pthread_cond_destroy(&c), 0);

    /* The old ABI's timed wait. */
    pthread_cond_t oc;
    memset(&oc, 0, sizeof oc);
    CHECK_EQ(pthread_mutex_lock(&m), 0);
    CHECK_EQ(old_cond_timedwait(&oc, &m, &past), ETIMEDOUT);
    CHECK_EQ(old_cond_broadcast(&oc), 0);
    CHECK_EQ(pthread_mutex_unlock(&m), 0);
    CHECK_EQ(old_cond_destroy(&oc), 0);

    /* A recursive mutex held twice: wait releases both levels, and the
     * depth is back afterwards. */
    pthread_mutex_t r = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    c = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    CHECK_EQ(pthread_mutex_lock(&r), 0);
    CHECK_EQ(pthread_mutex_lock(&r), 0);
    if (g_ours) { /* glibc's wait releases one level only */
        d = in_ms(CLOCK_REALTIME, 10);
        CHECK_EQ(pthread_cond_timedwait(&c, &r, &d), ETIMEDOUT);
        CHECK_EQ(in_other_thread(pthread_mutex_trylock, &r), EBUSY);
    }
    CHECK_EQ(pthread_mutex_unlock(&r), 0);
    CHECK_EQ(pthread_mutex_unlock(&r), 0);
    CHECK_EQ(pthread_mutex_unlock(&r), EPERM);

    /* Cancellation of a waiter: it wakes, relocks, runs its handler. */
    pthread_t w;
    start(&w, wait_forever, NULL);
    while (!atomic_load(&g_cancel_waiting)) sleep_ms(1);
    CHECK_EQ(pthread_mutex_lock(&g_cancel_m), 0); /* it is in the wait: m was released */
    CHECK_EQ(pthread_mutex_unlock(&g_cancel_m), 0);
    CHECK_EQ(pthread_cancel(w), 0);
    CHECK(join(w) == PTHREAD_CANCELED);
    CHECK_EQ(atomic_load(&g_cleanup_ran), 1);
    CHECK_EQ(pthread_mutex_trylock(&g_cancel_m), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_cancel_m), 0);
}

/* A waiter cancelled as it is signalled must not take the signal with it
 * (POSIX: a cancelled waiter that was signalled passes the signal on).
 * Waiters A, then B, sleep; the main thread adds a token, signals once and
 * cancels A at once. Either A returned from its wait with the token before
 * the cancellation acted on it, or B must be woken and take it. A round in
 * which neither happens within the hang limit fails. */
enum { CANCEL_SIGNAL_ROUNDS = 40 };
static pthread_mutex_t g_cs_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cs_c = PTHREAD_COND_INITIALIZER;
static int g_cs_tokens, g_cs_waiting, g_cs_quit; /* guarded by g_cs_m */
static atomic_int g_cs_taken;
static void cs_unlock(void* m) { CHECK_EQ(pthread_mutex_unlock(m), 0); }
static void* cs_waiter(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_cs_m), 0);
    pthread_cleanup_push(cs_unlock, &g_cs_m);
    g_cs_waiting++;
    while (g_cs_tokens == 0 && !g_cs_quit) CHECK_EQ(pthread_cond_wait(&g_cs_c, &g_cs_m), 0);
    if (g_cs_tokens > 0) {
        g_cs_tokens--;
        atomic_fetch_add(&g_cs_taken, 1);
    }
    pthread_cleanup_pop(1);
    return NULL;
}
static void cs_await_waiting(int n) {
    for (;;) {
        CHECK_EQ(pthread_mutex_lock(&g_cs_m), 0);
        int w = g_cs_waiting;
        CHECK_EQ(pthread_mutex_unlock(&g_cs_m), 0);
        if (w >= n) return; /* it registered and released the mutex: it is in the wait */
        sleep_ms(1);
    }
}
static void test_cond_cancel_signalled(void) {
    int cancelled = 0;
    for (int round = 0; round < CANCEL_SIGNAL_ROUNDS; ++round) {
        g_cs_tokens = g_cs_waiting = g_cs_quit = 0;
        atomic_store(&g_cs_taken, 0);
        pthread_t a, b;
        start(&a, cs_waiter, NULL);
        cs_await_waiting(1);
        sleep_ms(1); /* A likely asleep first; the test holds either way */
        start(&b, cs_waiter, NULL);
        cs_await_waiting(2);
        sleep_ms(1);
        CHECK_EQ(pthread_mutex_lock(&g_cs_m), 0);
        g_cs_tokens = 1;
        CHECK_EQ(pthread_cond_signal(&g_cs_c), 0);
        CHECK_EQ(pthread_cancel(a), 0);
        CHECK_EQ(pthread_mutex_unlock(&g_cs_m), 0);
        if (join(a) == PTHREAD_CANCELED) cancelled++;
        /* The token is taken, by A or by B. */
        struct timespec d = in_ms(CLOCK_MONOTONIC, 1000L * g_hang_s);
        while (atomic_load(&g_cs_taken) == 0) {
            if (passed(CLOCK_MONOTONIC, &d)) {
                fprintf(stderr,
                        "preload_prog [%s]: round %d: the waiter cancelled as it was signalled took the "
                        "signal with it; the other was not woken in %d s\n",
                        g_lock, round, g_hang_s);
                exit(1);
            }
            sleep_ms(1);
        }
        CHECK_EQ(pthread_mutex_lock(&g_cs_m), 0);
        g_cs_quit = 1;
        CHECK_EQ(pthread_cond_broadcast(&g_cs_c), 0);
        CHECK_EQ(pthread_mutex_unlock(&g_cs_m), 0);
        join(b);
        CHECK_EQ(atomic_load(&g_cs_taken), 1);
        CHECK_EQ(g_cs_tokens, 0);
    }
    fprintf(stderr, "preload_prog [%s]: test_cond_cancel_signalled: A cancelled in %d of %d rounds\n", g_lock,
            cancelled, CANCEL_SIGNAL_ROUNDS);
}

/* ------------------------------------------------------------------------ */
/* Reader-writer locks. */

static pthread_rwlock_t g_rw = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int g_readers_in;
static void* reader_meets_reader(void* p) {
    int n = (int)(intptr_t)p;
    CHECK_EQ(pthread_rwlock_rdlock(&g_rw), 0);
    atomic_fetch_add(&g_readers_in, 1);
    /* Everybody holds the read lock at once, or this never ends. */
    while (atomic_load(&g_readers_in) < n) sched_yield();
    CHECK_EQ(pthread_rwlock_unlock(&g_rw), 0);
    return NULL;
}
static int try_rd(pthread_rwlock_t* l) { return pthread_rwlock_tryrdlock(l); }
static int try_wr(pthread_rwlock_t* l) { return pthread_rwlock_trywrlock(l); }
struct rw_args {
    pthread_rwlock_t* l;
    int (*op)(pthread_rwlock_t*);
};
static void* rw_other(void* p) {
    struct rw_args* a = p;
    int r = a->op(a->l);
    if (r == 0) CHECK_EQ(pthread_rwlock_unlock(a->l), 0);
    return (void*)(intptr_t)r;
}
static int rw_in_other_thread(int (*op)(pthread_rwlock_t*), pthread_rwlock_t* l) {
    struct rw_args a = {l, op};
    pthread_t t;
    start(&t, rw_other, &a);
    return (int)(intptr_t)join(t);
}

struct rw_data {
    pthread_rwlock_t l;
    long a, b; /* equal whenever the lock is not write-held */
    long writes;
};
static void* rw_worker(void* p) {
    struct rw_data* d = p;
    for (long i = 0; i < g_iters / 4; ++i) {
        if (i % 4 == 0) {
            CHECK_EQ(pthread_rwlock_wrlock(&d->l), 0);
            d->a++;
            if ((i & 31) == 0) sched_yield();
            d->b++;
            d->writes++;
            CHECK_EQ(pthread_rwlock_unlock(&d->l), 0);
        } else {
            CHECK_EQ(pthread_rwlock_rdlock(&d->l), 0);
            long a = d->a;
            if ((i & 31) == 1) sched_yield();
            CHECK_EQ(d->b, a);
            CHECK_EQ(pthread_rwlock_unlock(&d->l), 0);
        }
    }
    return NULL;
}

static pthread_rwlock_t g_wpref = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static void* writer(void* p) {
    pthread_rwlock_t* l = p;
    CHECK_EQ(pthread_rwlock_wrlock(l), 0);
    CHECK_EQ(pthread_rwlock_unlock(l), 0);
    return NULL;
}

static void test_rwlock(void) {
    /* Readers share: a second reader gets in while one holds it... */
    CHECK_EQ(pthread_rwlock_rdlock(&g_rw), 0);
    CHECK_EQ(rw_in_other_thread(try_rd, &g_rw), 0);
    CHECK_EQ(rw_in_other_thread(try_wr, &g_rw), EBUSY);
    struct timespec past = {1, 0}, bad = {0, 1000000000L};
    CHECK_EQ(pthread_rwlock_timedwrlock(&g_rw, &past), ETIMEDOUT);
    CHECK_EQ(pthread_rwlock_timedwrlock(&g_rw, &bad), EINVAL);
    CHECK_EQ(pthread_rwlock_rdlock(&g_rw), 0); /* recursive read, default kind */
    CHECK_EQ(pthread_rwlock_unlock(&g_rw), 0);
    CHECK_EQ(pthread_rwlock_unlock(&g_rw), 0);
    /* ... and all of them hold it at the same time. */
    int n = g_threads;
    pthread_t t[64];
    atomic_store(&g_readers_in, 0);
    for (int i = 0; i < n; ++i) start(&t[i], reader_meets_reader, (void*)(intptr_t)n);
    for (int i = 0; i < n; ++i) join(t[i]);

    /* A writer excludes everybody. */
    CHECK_EQ(pthread_rwlock_wrlock(&g_rw), 0);
    CHECK_EQ(pthread_rwlock_wrlock(&g_rw), EDEADLK);
    CHECK_EQ(pthread_rwlock_rdlock(&g_rw), EDEADLK);
    CHECK_EQ(rw_in_other_thread(try_rd, &g_rw), EBUSY);
    CHECK_EQ(rw_in_other_thread(try_wr, &g_rw), EBUSY);
    CHECK_EQ(pthread_rwlock_unlock(&g_rw), 0);
    CHECK_EQ(pthread_rwlock_trywrlock(&g_rw), 0);
    CHECK_EQ(pthread_rwlock_unlock(&g_rw), 0);

    /* Timed and clocked acquisitions against a writer in another thread. */
    pthread_rwlock_t l;
    pthread_rwlockattr_t a;
    CHECK_EQ(pthread_rwlockattr_init(&a), 0);
    CHECK_EQ(pthread_rwlock_init(&l, &a), 0);
    CHECK_EQ(pthread_rwlockattr_destroy(&a), 0);
    CHECK_EQ(pthread_rwlock_wrlock(&l), 0);
    struct timespec d = in_ms(CLOCK_REALTIME, 20);
    CHECK_EQ(rw_in_other_thread(try_rd, &l), EBUSY);
    CHECK_EQ(pthread_rwlock_unlock(&l), 0);
    CHECK_EQ(pthread_rwlock_timedrdlock(&l, &d), 0);
    CHECK_EQ(pthread_rwlock_unlock(&l), 0);
    d = in_ms(CLOCK_MONOTONIC, 20);
    CHECK_EQ(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &d), 0);
    CHECK_EQ(pthread_rwlock_unlock(&l), 0);
    CHECK_EQ(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &d), 0);
    CHECK_EQ(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &past), ETIMEDOUT);
    d = in_ms(CLOCK_MONOTONIC, 20);
    CHECK_EQ(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &d), ETIMEDOUT);
    CHECK(passed(CLOCK_MONOTONIC, &d));
    CHECK_EQ(pthread_rwlock_clockwrlock(&l, CLOCK_PROCESS_CPUTIME_ID, &d), EINVAL);
    CHECK_EQ(pthread_rwlock_unlock(&l), 0);
    CHECK_EQ(pthread_rwlock_destroy(&l), 0);

    /* Writers and readers together: writers exclusive, counts exact. */
    struct rw_data* rd = calloc(1, sizeof *rd);
    CHECK_EQ(pthread_rwlock_init(&rd->l, NULL), 0);
    for (int i = 0; i < g_threads; ++i) start(&t[i], rw_worker, rd);
    for (int i = 0; i < g_threads; ++i) join(t[i]);
    CHECK_EQ(rd->a, rd->writes);
    CHECK_EQ(rd->b, rd->writes);
    CHECK_EQ(rd->writes, (long)g_threads * ((g_iters / 4 + 3) / 4));
    CHECK_EQ(pthread_rwlock_destroy(&rd->l), 0);
    free(rd);

    /* Writer-preferring: once a writer waits, new readers wait too. */
    CHECK_EQ(pthread_rwlock_rdlock(&g_wpref), 0);
    pthread_t w;
    start(&w, writer, &g_wpref);
    for (;;) { /* until the writer has announced itself */
        int r = rw_in_other_thread(try_rd, &g_wpref);
        if (r == EBUSY) break;
        CHECK_EQ(r, 0);
        sleep_ms(1);
    }
    CHECK_EQ(pthread_rwlock_unlock(&g_wpref), 0);
    join(w);

    /* Process-shared: glibc's. */
    CHECK_EQ(pthread_rwlockattr_init(&a), 0);
    CHECK_EQ(pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    CHECK_EQ(pthread_rwlock_init(&l, &a), 0);
    CHECK_EQ(pthread_rwlockattr_destroy(&a), 0);
    CHECK_EQ(pthread_rwlock_rdlock(&l), 0);
    CHECK_EQ(pthread_rwlock_tryrdlock(&l), 0);
    CHECK_EQ(pthread_rwlock_trywrlock(&l), EBUSY);
    CHECK_EQ(pthread_rwlock_unlock(&l), 0);
    CHECK_EQ(pthread_rwlock_unlock(&l), 0);
    CHECK_EQ(pthread_rwlock_wrlock(&l), 0);
    CHECK_EQ(pthread_rwlock_unlock(&l), 0);
    CHECK_EQ(pthread_rwlock_destroy(&l), 0);
}

/* ------------------------------------------------------------------------ */
/* Spinlocks. */

static pthread_spinlock_t g_spin;
static long g_spin_count;
static void* spin_worker(void* p) {
    (void)p;
    for (long i = 0; i < g_iters / 4; ++i) {
        if (i & 1)
            CHECK_EQ(pthread_spin_lock(&g_spin), 0);
        else
            while (pthread_spin_trylock(&g_spin) != 0) sched_yield();
        long v = g_spin_count;
        g_spin_count = v + 1;
        CHECK_EQ(pthread_spin_unlock(&g_spin), 0);
    }
    return NULL;
}

static void test_spin(void) {
    CHECK_EQ(pthread_spin_init(&g_spin, PTHREAD_PROCESS_PRIVATE), 0);
    CHECK_EQ(pthread_spin_lock(&g_spin), 0);
    CHECK_EQ(pthread_spin_trylock(&g_spin), EBUSY);
    CHECK_EQ(pthread_spin_unlock(&g_spin), 0);
    CHECK_EQ(pthread_spin_trylock(&g_spin), 0);
    CHECK_EQ(pthread_spin_unlock(&g_spin), 0);
    pthread_t t[64];
    for (int i = 0; i < g_threads; ++i) start(&t[i], spin_worker, NULL);
    for (int i = 0; i < g_threads; ++i) join(t[i]);
    CHECK_EQ(g_spin_count, (long)g_threads * (g_iters / 4));
    CHECK_EQ(pthread_spin_destroy(&g_spin), 0);
}

/* ------------------------------------------------------------------------ */
/* Process-shared objects: a child process waits, the parent wakes it. */

struct shared {
    pthread_spinlock_t spin;
    pthread_mutex_t m; /* process-shared: glibc's */
    pthread_cond_t c;  /* process-shared: ours, on a shared futex */
    int flag, spun;
};

static void test_process_shared(void) {
    struct shared* sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    CHECK_EQ(pthread_spin_init(&sh->spin, PTHREAD_PROCESS_SHARED), 0);
    pthread_mutexattr_t ma;
    CHECK_EQ(pthread_mutexattr_init(&ma), 0);
    CHECK_EQ(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    CHECK_EQ(pthread_mutex_init(&sh->m, &ma), 0);
    CHECK_EQ(pthread_mutexattr_destroy(&ma), 0);
    pthread_condattr_t ca;
    CHECK_EQ(pthread_condattr_init(&ca), 0);
    CHECK_EQ(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    CHECK_EQ(pthread_cond_init(&sh->c, &ca), 0);
    CHECK_EQ(pthread_condattr_destroy(&ca), 0);

    CHECK_EQ(pthread_spin_lock(&sh->spin), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int ok = pthread_spin_lock(&sh->spin) == 0; /* waits for the parent */
        sh->spun = 1;
        ok &= pthread_spin_unlock(&sh->spin) == 0;
        ok &= pthread_mutex_lock(&sh->m) == 0;
        while (ok && !sh->flag) ok &= pthread_cond_wait(&sh->c, &sh->m) == 0;
        ok &= pthread_mutex_unlock(&sh->m) == 0;
        _exit(ok ? 0 : 1);
    }
    sleep_ms(20); /* likely spinning by now */
    CHECK_EQ(sh->spun, 0);
    CHECK_EQ(pthread_spin_unlock(&sh->spin), 0);
    sleep_ms(20); /* likely waiting on the condition variable by now */
    CHECK_EQ(pthread_mutex_lock(&sh->m), 0);
    sh->flag = 1;
    CHECK_EQ(pthread_cond_signal(&sh->c), 0);
    CHECK_EQ(pthread_mutex_unlock(&sh->m), 0);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK_EQ(sh->spun, 1);
    CHECK_EQ(pthread_cond_destroy(&sh->c), 0);
    CHECK_EQ(pthread_mutex_destroy(&sh->m), 0);
    CHECK_EQ(pthread_spin_destroy(&sh->spin), 0);
    munmap(sh, sizeof *sh);
}

/* A process-shared spinlock in fork children: one child holds it and
 * another, a live process, queues behind it. The holder's unlock runs in
 * the library's single-threaded fork-child mode, which resets a private
 * lock (its waiters did not survive the fork); a process-shared one must
 * be handed over, or the waiter's ticket is never served. */
struct shared_spin {
    pthread_spinlock_t l;
    atomic_int held;
};
/* Whether a spinlock's waiter changes its word: the ticket lock of the
 * spinning FIFO values; tas_lock and ttas_lock waiters only read it or
 * swap in the value it holds (glibc's as well). */
static int spin_waiters_show(void) {
    static const char* const fifo[] = {"hemlock", "hemlock_naive", "hemlock_overlap", "mcs", "clh", "ticket"};
    for (size_t i = 0; i < sizeof fifo / sizeof fifo[0]; ++i)
        if (strcmp(g_lock, fifo[i]) == 0) return 1;
    return 0;
}
static void test_fork_shared_spin(void) {
    struct shared_spin* sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    CHECK_EQ(pthread_spin_init(&sh->l, PTHREAD_PROCESS_SHARED), 0);
    const volatile int* word = &sh->l;
    pid_t holder = fork();
    CHECK(holder >= 0);
    if (holder == 0) {
        child_deadline();
        int ok = pthread_spin_lock(&sh->l) == 0;
        const int alone = __atomic_load_n(word, __ATOMIC_RELAXED);
        atomic_store(&sh->held, 1);
        /* Until the other child has taken its ticket (the test holds
         * either way; only whether it reaches the window depends on it). */
        if (spin_waiters_show())
            while (__atomic_load_n(word, __ATOMIC_RELAXED) == alone) sleep_ms(1);
        else
            sleep_ms(20);
        ok &= pthread_spin_unlock(&sh->l) == 0;
        _exit(ok ? 0 : 1);
    }
    pid_t waiter = fork();
    CHECK(waiter >= 0);
    if (waiter == 0) {
        child_deadline();
        while (!atomic_load(&sh->held)) sleep_ms(1);
        int ok = pthread_spin_lock(&sh->l) == 0; /* behind the holder */
        ok &= pthread_spin_unlock(&sh->l) == 0;
        _exit(ok ? 0 : 1);
    }
    wait_child(holder, "a process-shared spinlock: the fork child that held it");
    wait_child(waiter, "a process-shared spinlock: the fork child queued behind another");
    CHECK_EQ(pthread_spin_trylock(&sh->l), 0);
    CHECK_EQ(pthread_spin_unlock(&sh->l), 0);
    CHECK_EQ(pthread_spin_destroy(&sh->l), 0);
    munmap(sh, sizeof *sh);
}

/* A process-shared condition variable destroyed in a fork child while a
 * waiter in another process has been woken but has not left yet (POSIX
 * allows destroying it right after the broadcast). The library's fork-child
 * mode forgets a private one's waiters (they did not survive the fork); a
 * process-shared one's are live processes, and destroy must wait for them
 * to leave as it does elsewhere -- else the late waiter's leaving would
 * wrap the count it had zeroed, and it would touch memory its destroyer
 * may reuse. The waiter is stopped (SIGSTOP) inside its wait, so the
 * destroy cannot return until it is let go; whether the test sees a wrong
 * early return depends on how soon it looks, never whether it passes. */
struct shared_cond {
    pthread_mutex_t m;
    pthread_cond_t c;
    atomic_int ready, go, destroying;
};
static void test_fork_shared_cond_destroy(void) {
    struct shared_cond* sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    CHECK_EQ(pthread_mutexattr_init(&ma), 0);
    CHECK_EQ(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    CHECK_EQ(pthread_mutex_init(&sh->m, &ma), 0);
    CHECK_EQ(pthread_condattr_init(&ca), 0);
    CHECK_EQ(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    CHECK_EQ(pthread_cond_init(&sh->c, &ca), 0);
    pid_t waiter = fork();
    CHECK(waiter >= 0);
    if (waiter == 0) {
        child_deadline();
        int ok = pthread_mutex_lock(&sh->m) == 0;
        atomic_store(&sh->ready, 1);
        while (ok && !atomic_load(&sh->go)) ok = pthread_cond_wait(&sh->c, &sh->m) == 0;
        ok &= pthread_mutex_unlock(&sh->m) == 0;
        _exit(ok ? 0 : 1);
    }
    while (!atomic_load(&sh->ready)) sleep_ms(1);
    /* Once we get the mutex, the waiter is inside its wait (registered). */
    CHECK_EQ(pthread_mutex_lock(&sh->m), 0);
    CHECK_EQ(pthread_mutex_unlock(&sh->m), 0);
    CHECK_EQ(kill(waiter, SIGSTOP), 0);
    int status;
    CHECK_EQ(waitpid(waiter, &status, WUNTRACED), waiter);
    CHECK(WIFSTOPPED(status));
    pid_t destroyer = fork();
    CHECK(destroyer >= 0);
    if (destroyer == 0) {
        child_deadline();
        int ok = pthread_mutex_lock(&sh->m) == 0;
        atomic_store(&sh->go, 1);
        ok &= pthread_cond_broadcast(&sh->c) == 0;
        ok &= pthread_mutex_unlock(&sh->m) == 0;
        atomic_store(&sh->destroying, 1);
        ok &= pthread_cond_destroy(&sh->c) == 0; /* waits for the stopped waiter */
        _exit(ok ? 0 : 1);
    }
    while (!atomic_load(&sh->destroying)) sleep_ms(1);
    for (int i = 0; i < 100; ++i) {
        pid_t r = waitpid(destroyer, &status, WNOHANG);
        CHECK(r >= 0);
        if (r == destroyer) {
            fprintf(stderr, "preload_prog [%s]: a fork child's pthread_cond_destroy of a "
                            "process-shared condition variable returned while its woken waiter, "
                            "another process, had not left\n", g_lock);
            exit(1);
        }
        sleep_ms(2);
    }
    CHECK_EQ(kill(waiter, SIGCONT), 0);
    wait_child(destroyer, "a fork child destroying a process-shared condition variable");
    wait_child(waiter, "a process-shared condition variable's waiter in another process");
    CHECK_EQ(pthread_condattr_destroy(&ca), 0);
    CHECK_EQ(pthread_mutexattr_destroy(&ma), 0);
    CHECK_EQ(pthread_mutex_destroy(&sh->m), 0);
    munmap(sh, sizeof *sh);
}

/* ------------------------------------------------------------------------ */
/* fork() in a multi-threaded process. */

static pthread_mutex_t g_busy = PTHREAD_MUTEX_INITIALIZER;    /* hammered by others */
static pthread_mutex_t g_quiet = PTHREAD_MUTEX_INITIALIZER;   /* nobody holds it */
static pthread_mutex_t g_mine = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP; /* the forker holds it */
static pthread_mutex_t g_checked = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP; /* the forker holds it */
static pthread_mutex_t g_queued = PTHREAD_MUTEX_INITIALIZER;  /* held by the forker, waited on */
static pthread_mutex_t g_atfork = PTHREAD_MUTEX_INITIALIZER;  /* the pthread_atfork pattern */
static pthread_rwlock_t g_fork_rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t g_fork_spin;
static atomic_int g_stop;
static long g_busy_count;

static void* hammer(void* p) {
    (void)p;
    while (!atomic_load(&g_stop)) {
        CHECK_EQ(pthread_mutex_lock(&g_busy), 0);
        g_busy_count++;
        CHECK_EQ(pthread_mutex_unlock(&g_busy), 0);
        CHECK_EQ(pthread_mutex_lock(&g_atfork), 0);
        CHECK_EQ(pthread_mutex_unlock(&g_atfork), 0);
        CHECK_EQ(pthread_mutex_lock(&early_mutex), 0); /* its atfork handlers lock it too */
        CHECK_EQ(pthread_mutex_unlock(&early_mutex), 0);
    }
    return NULL;
}
static void* wait_queued(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_queued), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_queued), 0);
    return NULL;
}
static void* child_thread(void* p) {
    pthread_mutex_t* m = p;
    CHECK_EQ(pthread_mutex_lock(m), 0);
    CHECK_EQ(pthread_mutex_unlock(m), 0);
    return NULL;
}
static void prepare(void) { CHECK_EQ(pthread_mutex_lock(&g_atfork), 0); }
static void after(void) { CHECK_EQ(pthread_mutex_unlock(&g_atfork), 0); }

static void test_fork(void) {
    CHECK_EQ(pthread_atfork(prepare, after, after), 0);
    CHECK_EQ(pthread_spin_init(&g_fork_spin, PTHREAD_PROCESS_PRIVATE), 0);
    atomic_store(&g_stop, 0);
    pthread_t h[2], q;
    for (int i = 0; i < 2; ++i) start(&h[i], hammer, NULL);
    CHECK_EQ(pthread_mutex_lock(&g_queued), 0);
    start(&q, wait_queued, NULL);
    sleep_ms(20); /* likely queued on g_queued by now; the test holds either way */
    CHECK_EQ(pthread_mutex_lock(&g_mine), 0);
    CHECK_EQ(pthread_mutex_lock(&g_checked), 0);
    CHECK_EQ(pthread_rwlock_wrlock(&g_fork_rw), 0);
    CHECK_EQ(pthread_spin_lock(&g_fork_spin), 0);

    for (int round = 0; round < 3; ++round) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* The child: one thread, ours. */
            CHECK_EQ(pthread_mutex_lock(&g_quiet), 0);
            CHECK_EQ(pthread_mutex_unlock(&g_quiet), 0);
            if (g_ours) {
                /* Still this thread's. (glibc identifies owners by kernel
                 * tid, which the child's thread does not share with its
                 * parent: there the child cannot unlock them.) */
                CHECK_EQ(pthread_mutex_lock(&g_mine), 0); /* depth 2 */
                CHECK_EQ(pthread_mutex_unlock(&g_mine), 0);
                CHECK_EQ(pthread_mutex_unlock(&g_mine), 0);
                CHECK_EQ(pthread_mutex_unlock(&g_mine), EPERM);
                CHECK_EQ(pthread_mutex_unlock(&g_checked), 0);
            }
            CHECK_EQ(pthread_mutex_unlock(&g_queued), 0); /* its waiter is gone */
            CHECK_EQ(pthread_mutex_lock(&g_queued), 0);
            CHECK_EQ(pthread_mutex_unlock(&g_queued), 0);
            CHECK_EQ(pthread_mutex_lock(&g_atfork), 0); /* released by the child handler */
            CHECK_EQ(pthread_mutex_unlock(&g_atfork), 0);
            CHECK_EQ(pthread_mutex_lock(&early_mutex), 0); /* and by the early library's */
            CHECK_EQ(pthread_mutex_unlock(&early_mutex), 0);
            if (g_ours) { /* glibc: a write lock is its holder's tid's */
                CHECK_EQ(pthread_rwlock_unlock(&g_fork_rw), 0);
                CHECK_EQ(pthread_rwlock_wrlock(&g_fork_rw), 0);
                CHECK_EQ(pthread_rwlock_unlock(&g_fork_rw), 0);
            }
            CHECK_EQ(pthread_spin_unlock(&g_fork_spin), 0);
            CHECK_EQ(pthread_spin_lock(&g_fork_spin), 0);
            CHECK_EQ(pthread_spin_unlock(&g_fork_spin), 0);
            /* Threads again, and the locks work between them. */
            pthread_t c[2];
            for (int i = 0; i < 2; ++i) start(&c[i], child_thread, &g_queued);
            CHECK_EQ(pthread_mutex_lock(&g_queued), 0);
            CHECK_EQ(pthread_mutex_unlock(&g_queued), 0);
            for (int i = 0; i < 2; ++i) join(c[i]);
            _exit(0);
        }
        int status;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_EQ(pthread_spin_unlock(&g_fork_spin), 0);
    CHECK_EQ(pthread_rwlock_unlock(&g_fork_rw), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_checked), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_mine), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_queued), 0);
    join(q);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; ++i) join(h[i]);
}

/* ------------------------------------------------------------------------ */
/* Thread identity inside contended critical sections. Under SPINDLE_LOCK=
 * tclock and tclock_blocking a contended section of a normal mutex may run
 * on another thread (the combiner); what the library decides by thread
 * identity must still be the caller's: recursive and errorcheck ownership,
 * rwlock writers' EDEADLK, condition variable waits, fork(); and a section
 * that makes a blocking call (nanosleep, poll, read) makes it on its own
 * thread. Under the other locks these are plain POSIX checks under
 * contention. */

/* pthread_self() is declared const: called through a volatile pointer, the
 * compiler cannot reuse a value from before lock(). */
static pthread_t (*volatile g_self)(void) = pthread_self;

static pthread_mutex_t g_sect = PTHREAD_MUTEX_INITIALIZER; /* normal: contended */
static pthread_mutex_t g_sect_rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t g_sect_chk = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_rwlock_t g_sect_rw = PTHREAD_RWLOCK_INITIALIZER;
static long g_sect_count, g_rec_count, g_chk_count, g_rw_count;
static atomic_long g_elsewhere; /* sections seen on another thread (statistics only) */

static void* identity_worker(void* p) {
    (void)p;
    pthread_t me = pthread_self();
    long my_tid = syscall(SYS_gettid);
    for (long i = 0; i < g_iters / 2; ++i) {
        CHECK_EQ(pthread_mutex_lock(&g_sect), 0);
        if (syscall(SYS_gettid) != my_tid) atomic_fetch_add(&g_elsewhere, 1);
        g_sect_count++;
        switch (i % 8) {
            case 0: /* recursive, inside the (maybe delegated) section */
                CHECK_EQ(pthread_mutex_lock(&g_sect_rec), 0);
                CHECK(pthread_equal(g_self(), me)); /* its section runs on its thread */
                CHECK_EQ(pthread_mutex_lock(&g_sect_rec), 0);
                CHECK_EQ(pthread_mutex_trylock(&g_sect_rec), 0);
                g_rec_count++;
                for (int k = 0; k < 3; ++k) CHECK_EQ(pthread_mutex_unlock(&g_sect_rec), 0);
                break;
            case 1: /* errorcheck: EDEADLK and EPERM are the caller's */
                CHECK_EQ(pthread_mutex_lock(&g_sect_chk), 0);
                CHECK_EQ(pthread_mutex_lock(&g_sect_chk), EDEADLK);
                g_chk_count++;
                CHECK_EQ(pthread_mutex_unlock(&g_sect_chk), 0);
                CHECK_EQ(pthread_mutex_unlock(&g_sect_chk), EPERM);
                break;
            case 2: /* a write lock taken inside, kept past the unlock below */
                CHECK_EQ(pthread_rwlock_wrlock(&g_sect_rw), 0);
                CHECK_EQ(pthread_rwlock_rdlock(&g_sect_rw), EDEADLK);
                CHECK_EQ(pthread_rwlock_wrlock(&g_sect_rw), EDEADLK);
                break;
            case 3: /* recursive taken inside, released after the section */
                CHECK_EQ(pthread_mutex_lock(&g_sect_rec), 0);
                break;
            case 4: /* plain sections keep waiters queued: combining goes on */
                sched_yield();
                break;
            case 5: { /* a sleeping call: made on our own thread (blocking.cpp) */
                struct timespec ts = {0, 1000};
                CHECK_EQ(nanosleep(&ts, NULL), 0);
                CHECK(pthread_equal(g_self(), me));
                break;
            }
            case 6: { /* a wait for I/O: the same */
                int fds[2];
                CHECK_EQ(pipe(fds), 0);
                char c = 'x';
                CHECK_EQ(write(fds[1], &c, 1), 1);
                CHECK_EQ(poll(&(struct pollfd){.fd = fds[0], .events = POLLIN}, 1, -1), 1);
                CHECK(pthread_equal(g_self(), me));
                CHECK_EQ(read(fds[0], &c, 1), 1);
                CHECK(pthread_equal(g_self(), me));
                close(fds[0]);
                close(fds[1]);
                break;
            }
            default: break;
        }
        CHECK_EQ(pthread_mutex_unlock(&g_sect), 0);
        if (i % 8 == 2) {
            g_rw_count++;
            CHECK_EQ(pthread_rwlock_wrlock(&g_sect_rw), EDEADLK); /* still ours */
            CHECK_EQ(pthread_rwlock_unlock(&g_sect_rw), 0);
        } else if (i % 8 == 3) {
            CHECK_EQ(pthread_mutex_lock(&g_sect_rec), 0); /* depth 2: still ours */
            g_rec_count++;
            CHECK_EQ(pthread_mutex_unlock(&g_sect_rec), 0);
            CHECK_EQ(pthread_mutex_unlock(&g_sect_rec), 0);
        }
    }
    return NULL;
}

static void test_identity(void) {
    pthread_t t[64];
    g_sect_count = g_rec_count = g_chk_count = g_rw_count = 0;
    atomic_store(&g_elsewhere, 0);
    for (int i = 0; i < g_threads; ++i) start(&t[i], identity_worker, NULL);
    for (int i = 0; i < g_threads; ++i) join(t[i]);
    long per = g_iters / 2;
    CHECK_EQ(g_sect_count, (long)g_threads * per);
    /* case k of i % 8 comes (per - k + 7) / 8 times */
    CHECK_EQ(g_rec_count, (long)g_threads * ((per + 7) / 8 + (per + 4) / 8)); /* cases 0 and 3 */
    CHECK_EQ(g_chk_count, (long)g_threads * ((per + 6) / 8));
    CHECK_EQ(g_rw_count, (long)g_threads * ((per + 5) / 8));
    CHECK_EQ(pthread_mutex_trylock(&g_sect_rec), 0); /* nobody kept a level */
    CHECK_EQ(pthread_mutex_unlock(&g_sect_rec), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_sect_rec), EPERM);
    printf("preload_prog [%s]: %ld of %ld contended sections ran on another thread\n", g_lock,
           (long)atomic_load(&g_elsewhere), g_sect_count);
}

/* Delegation made certain, for the TCLocks: the main thread holds g_dlg and
 * lets three threads queue behind it, one after another (each arrival
 * changes the queue's tail pointer, bytes 32..39 of the mutex: the TCLock
 * word sits in bytes 24..39, its tail at offset 8). When main releases it,
 * the first becomes the head with two successors behind it, so it combines:
 * it runs the second one's section on its own thread (the third, the tail,
 * is never run by a combiner). That section checks what it must see of its
 * own thread: identity moves back (recursive mutex, errorcheck, a sleeping
 * call) and errno comes back to it. */
static pthread_mutex_t g_dlg = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_dlg_rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t g_dlg_chk = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static atomic_int g_dlg_delegated[3]; /* the section of thread k started on another (kernel) thread */
static atomic_int g_dlg_as_self[3];   /* ... and ran as thread k: pthread_self() and a thread-local */
static _Thread_local int g_dlg_mark;
static int read_dlg_mark(void) { return g_dlg_mark; }
static int (*volatile g_read_dlg_mark)(void) = read_dlg_mark; /* a fresh thread-local address */
static long kernel_tid(void) { return syscall(SYS_gettid); }
/* errno through a fresh __errno_location() call each time: a compiler may
 * keep errno's address from a call made on another thread (before a move
 * home, or inside a delegated section), which this test does not test. */
static int* (*volatile g_errno_at)(void) = __errno_location;
static void* delegated_section(void* p) {
    int k = (int)(intptr_t)p;
    pthread_t me = pthread_self();
    long my_tid = kernel_tid();
    g_dlg_mark = 100 + k;
    CHECK_EQ(pthread_mutex_lock(&g_dlg), 0);
    atomic_store(&g_dlg_delegated[k], kernel_tid() != my_tid);
    atomic_store(&g_dlg_as_self[k], pthread_equal(g_self(), me) && g_read_dlg_mark() == 100 + k);
    *g_errno_at() = 1000 + k; /* errno is the requester's: it must read this back below */
    CHECK_EQ(pthread_mutex_lock(&g_dlg_chk), 0);
    CHECK_EQ(pthread_mutex_lock(&g_dlg_chk), EDEADLK);
    CHECK(pthread_equal(g_self(), me)); /* the errorcheck mutex moved the section home */
    CHECK_EQ(pthread_mutex_unlock(&g_dlg_chk), 0);
    CHECK_EQ(pthread_mutex_lock(&g_dlg_rec), 0);
    CHECK_EQ(pthread_mutex_lock(&g_dlg_rec), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_dlg_rec), 0);
    struct timespec ts = {0, 1000};
    CHECK_EQ(nanosleep(&ts, NULL), 0);
    *g_errno_at() = 2000 + k;
    CHECK_EQ(pthread_mutex_unlock(&g_dlg), 0);
    CHECK_EQ(*g_errno_at(), 2000 + k);
    CHECK_EQ(pthread_mutex_unlock(&g_dlg_rec), 0); /* the last level: still ours */
    return NULL;
}
static int adopts_thread_pointer(void) {
#if defined(__x86_64__)
    const char* e = getenv("SPINDLE_TCLOCK_ADOPT");
    if (e != NULL && strcmp(e, "0") == 0) return 0;
    return (getauxval(AT_HWCAP2) & 2) != 0; /* HWCAP2_FSGSBASE */
#else
    return 0;
#endif
}
static uint64_t dlg_tail(void) {
    return __atomic_load_n((const uint64_t*)(const void*)((const unsigned char*)&g_dlg + 32), __ATOMIC_ACQUIRE);
}
/* Main holds g_dlg while threads 0, 1 and 2 queue on it, in that order,
 * each running fn((k | mode << 8)); then releases it and joins them. */
static void queue_three(void* (*fn)(void*), int mode) {
    int tclock = strncmp(g_lock, "tclock", 6) == 0;
    pthread_t t[3];
    CHECK_EQ(pthread_mutex_lock(&g_dlg), 0);
    for (int k = 0; k < 3; ++k) {
        uint64_t before = tclock ? dlg_tail() : 0;
        atomic_store(&g_dlg_delegated[k], -1);
        start(&t[k], fn, (void*)(intptr_t)(k | mode << 8));
        if (tclock) { /* until it queued: the tail names it */
            while (dlg_tail() == before) sched_yield();
        } else {
            sleep_ms(5); /* only the order matters to the others, and nothing is checked of it */
        }
    }
    CHECK_EQ(pthread_mutex_unlock(&g_dlg), 0);
    for (int k = 0; k < 3; ++k) join(t[k]);
}

/* requeued: a section of the batch gives the mutex up and takes it again
 * (a condition wait), queueing behind the third thread, which is then no
 * longer the tail and may itself be run by the combiner. */
static void check_delegated_second(int requeued) {
    if (strncmp(g_lock, "tclock", 6) == 0) {
        CHECK_EQ(atomic_load(&g_dlg_delegated[0]), 0); /* the head, then the combiner */
        CHECK_EQ(atomic_load(&g_dlg_delegated[1]), 1); /* run by the combiner */
        if (!requeued) CHECK_EQ(atomic_load(&g_dlg_delegated[2]), 0); /* the tail: the next head */
        else CHECK(atomic_load(&g_dlg_delegated[2]) == 0 || atomic_load(&g_dlg_delegated[2]) == 1);
    } else {
        for (int k = 0; k < 3; ++k) CHECK_EQ(atomic_load(&g_dlg_delegated[k]), 0);
    }
}

static void test_delegation(void) {
    queue_three(delegated_section, 0);
    check_delegated_second(0);
    if (strncmp(g_lock, "tclock", 6) == 0) {
        /* Run by the combiner, as itself where the combiner adopts the
         * waiter's thread pointer (x86-64 with FSGSBASE, unless
         * SPINDLE_TCLOCK_ADOPT=0), as the combiner otherwise. */
        CHECK_EQ(atomic_load(&g_dlg_as_self[1]), adopts_thread_pointer());
        CHECK_EQ(atomic_load(&g_dlg_as_self[0]), 1);
        CHECK_EQ(atomic_load(&g_dlg_as_self[2]), 1);
    } else {
        for (int k = 0; k < 3; ++k) CHECK_EQ(atomic_load(&g_dlg_as_self[k]), 1);
    }
}

/* A delegated section that blocks first thing: a sleeping call (mode 0) or
 * a condition wait on the very mutex it holds (mode 1). Under the TCLocks the
 * library moves the section back to its own thread before it sleeps, so the
 * combiner and the batch behind it do not sleep with it; the wait times out
 * with the mutex held again, and errno comes home with the section. */
static pthread_cond_t g_dlg_cv = PTHREAD_COND_INITIALIZER;
static atomic_int g_dlg_home_after[3]; /* after the blocking call, the section ran on its own thread */
static void* blocking_section(void* p) {
    int k = (int)(intptr_t)p & 0xff, mode = (int)(intptr_t)p >> 8;
    long my_tid = kernel_tid();
    CHECK_EQ(pthread_mutex_lock(&g_dlg), 0);
    atomic_store(&g_dlg_delegated[k], kernel_tid() != my_tid);
    *g_errno_at() = 3000 + k;
    if (mode == 0) {
        struct timespec ts = {0, 1000};
        CHECK_EQ(nanosleep(&ts, NULL), 0);
    } else {
        struct timespec dl;
        CHECK_EQ(clock_gettime(CLOCK_REALTIME, &dl), 0);
        dl.tv_nsec += 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec += 1;
            dl.tv_nsec -= 1000000000;
        }
        CHECK_EQ(pthread_cond_timedwait(&g_dlg_cv, &g_dlg, &dl), ETIMEDOUT);
    }
    atomic_store(&g_dlg_home_after[k], kernel_tid() == my_tid);
    CHECK_EQ(*g_errno_at(), 3000 + k);
    CHECK_EQ(pthread_mutex_unlock(&g_dlg), 0);
    return NULL;
}

static void test_delegated_blocking(void) {
    for (int mode = 0; mode < 2; ++mode) {
        for (int k = 0; k < 3; ++k) atomic_store(&g_dlg_home_after[k], -1);
        queue_three(blocking_section, mode);
        check_delegated_second(mode == 1);
        for (int k = 0; k < 3; ++k) CHECK_EQ(atomic_load(&g_dlg_home_after[k]), 1);
    }
}

/* Condition variables among several threads on one contended mutex:
 * ping-pong of a turn around a ring, and producers/consumers. */
struct ring {
    pthread_mutex_t m;
    pthread_cond_t c;
    int turn, players;
    long rounds;
};
struct player {
    struct ring* r;
    int me;
};
static void* play(void* p) {
    struct player* pl = p;
    struct ring* r = pl->r;
    for (long i = 0; i < r->rounds; ++i) {
        CHECK_EQ(pthread_mutex_lock(&r->m), 0);
        while (r->turn != pl->me) CHECK_EQ(pthread_cond_wait(&r->c, &r->m), 0);
        r->turn = (r->turn + 1) % r->players;
        CHECK_EQ(pthread_cond_broadcast(&r->c), 0);
        CHECK_EQ(pthread_mutex_unlock(&r->m), 0);
    }
    return NULL;
}

struct mpmc {
    pthread_mutex_t m;
    pthread_cond_t not_empty, not_full;
    long items[RING];
    int head, count;
    long per_producer;
    long consumed_sum, consumed_n; /* under m */
    int producers_left;
};
static void* mp_produce(void* p) {
    struct mpmc* q = p;
    for (long i = 1; i <= q->per_producer; ++i) {
        CHECK_EQ(pthread_mutex_lock(&q->m), 0);
        while (q->count == RING) {
            struct timespec d = in_ms(CLOCK_REALTIME, 600000);
            int r = (i & 1) ? pthread_cond_wait(&q->not_full, &q->m)
                            : pthread_cond_timedwait(&q->not_full, &q->m, &d);
            CHECK_EQ(r, 0);
        }
        q->items[(q->head + q->count++) % RING] = i;
        CHECK_EQ(pthread_cond_signal(&q->not_empty), 0);
        CHECK_EQ(pthread_mutex_unlock(&q->m), 0);
    }
    CHECK_EQ(pthread_mutex_lock(&q->m), 0);
    if (--q->producers_left == 0) CHECK_EQ(pthread_cond_broadcast(&q->not_empty), 0);
    CHECK_EQ(pthread_mutex_unlock(&q->m), 0);
    return NULL;
}
static void* mp_consume(void* p) {
    struct mpmc* q = p;
    CHECK_EQ(pthread_mutex_lock(&q->m), 0);
    for (;;) {
        while (q->count == 0 && q->producers_left > 0) {
            struct timespec d = in_ms(CLOCK_MONOTONIC, 600000);
            int r = (q->consumed_n & 1) ? pthread_cond_wait(&q->not_empty, &q->m)
                                        : pthread_cond_clockwait(&q->not_empty, &q->m,
                                                                 CLOCK_MONOTONIC, &d);
            CHECK_EQ(r, 0);
        }
        if (q->count == 0) break;
        q->consumed_sum += q->items[q->head];
        q->consumed_n++;
        q->head = (q->head + 1) % RING;
        q->count--;
        CHECK_EQ(pthread_cond_signal(&q->not_full), 0);
    }
    CHECK_EQ(pthread_mutex_unlock(&q->m), 0);
    return NULL;
}

static void test_cond_many(void) {
    /* Ping-pong around a ring of every thread. */
    struct ring r = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER,
                     .players = g_threads, .rounds = g_iters / 20 + 1};
    struct player pl[64];
    pthread_t t[64];
    for (int i = 0; i < g_threads; ++i) {
        pl[i] = (struct player){&r, i};
        start(&t[i], play, &pl[i]);
    }
    for (int i = 0; i < g_threads; ++i) join(t[i]);
    CHECK_EQ(r.turn, (int)((r.rounds * g_threads) % g_threads));

    /* Several producers and consumers on one queue. */
    struct mpmc* q = calloc(1, sizeof *q);
    CHECK_EQ(pthread_mutex_init(&q->m, NULL), 0);
    CHECK_EQ(pthread_cond_init(&q->not_empty, NULL), 0);
    CHECK_EQ(pthread_cond_init(&q->not_full, NULL), 0);
    int producers = g_threads / 2, consumers = g_threads - producers;
    q->per_producer = g_iters;
    q->producers_left = producers;
    for (int i = 0; i < producers; ++i) start(&t[i], mp_produce, q);
    for (int i = 0; i < consumers; ++i) start(&t[producers + i], mp_consume, q);
    for (int i = 0; i < g_threads; ++i) join(t[i]);
    CHECK_EQ(q->consumed_n, (long)producers * g_iters);
    CHECK_EQ(q->consumed_sum, (long)producers * (g_iters * (g_iters + 1) / 2));
    CHECK_EQ(pthread_cond_destroy(&q->not_empty), 0);
    CHECK_EQ(pthread_cond_destroy(&q->not_full), 0);
    CHECK_EQ(pthread_mutex_destroy(&q->m), 0);
    free(q);
}

/* A recursive read lock while a writer waits: POSIX lets a thread hold
 * several read locks of a default rwlock; the second must not wait behind
 * the writer (who waits for this very reader). */
static pthread_rwlock_t g_rd_again = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int g_rd_writer_in;
static void* rd_again_writer(void* p) {
    (void)p;
    CHECK_EQ(pthread_rwlock_wrlock(&g_rd_again), 0);
    atomic_store(&g_rd_writer_in, 1);
    CHECK_EQ(pthread_rwlock_unlock(&g_rd_again), 0);
    return NULL;
}
static void test_read_again(void) {
    atomic_store(&g_rd_writer_in, 0);
    CHECK_EQ(pthread_rwlock_rdlock(&g_rd_again), 0);
    pthread_t w;
    start(&w, rd_again_writer, NULL);
    sleep_ms(20); /* likely waiting for us by now; the test holds either way */
    CHECK_EQ(pthread_rwlock_rdlock(&g_rd_again), 0);
    CHECK_EQ(pthread_rwlock_tryrdlock(&g_rd_again), 0);
    CHECK_EQ(atomic_load(&g_rd_writer_in), 0);
    for (int i = 0; i < 3; ++i) CHECK_EQ(pthread_rwlock_unlock(&g_rd_again), 0);
    join(w);
    CHECK_EQ(atomic_load(&g_rd_writer_in), 1);
}

/* fork() from inside a contended critical section: the child is a copy of
 * the thread that called fork() (its pthread_self(), the recursive mutex
 * it holds), whichever thread ran the section in the parent. */
static pthread_mutex_t g_fsect = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_fsect_rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static atomic_int g_fsect_stop;
static void* fsect_hammer(void* p) {
    (void)p;
    while (!atomic_load(&g_fsect_stop)) {
        CHECK_EQ(pthread_mutex_lock(&g_fsect), 0);
        sched_yield();
        CHECK_EQ(pthread_mutex_unlock(&g_fsect), 0);
    }
    return NULL;
}
static void test_fork_in_section(void) {
    atomic_store(&g_fsect_stop, 0);
    pthread_t h[3];
    for (int i = 0; i < 3; ++i) start(&h[i], fsect_hammer, NULL);
    pthread_t me = pthread_self();
    CHECK_EQ(pthread_mutex_lock(&g_fsect_rec), 0);
    for (int round = 0; round < 8; ++round) {
        CHECK_EQ(pthread_mutex_lock(&g_fsect), 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            int ok = pthread_equal(g_self(), me);
            ok &= pthread_mutex_unlock(&g_fsect) == 0;
            if (g_ours) { /* glibc names owners by kernel tid (see test_fork) */
                ok &= pthread_mutex_lock(&g_fsect_rec) == 0; /* depth 2: still ours */
                ok &= pthread_mutex_unlock(&g_fsect_rec) == 0;
                ok &= pthread_mutex_unlock(&g_fsect_rec) == 0;
            }
            ok &= pthread_mutex_lock(&g_fsect) == 0;
            ok &= pthread_mutex_unlock(&g_fsect) == 0;
            _exit(ok ? 0 : 1);
        }
        CHECK_EQ(pthread_mutex_unlock(&g_fsect), 0);
        int status;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_EQ(pthread_mutex_unlock(&g_fsect_rec), 0);
    atomic_store(&g_fsect_stop, 1);
    for (int i = 0; i < 3; ++i) join(h[i]);
}

/* A condition variable wait in a fork child, on a mutex the forking thread
 * held while other threads of the parent queued for it: the wait's unlock is
 * an unlock in the child like any other, so it must not hand the mutex to a
 * waiter that did not survive the fork (the relock would then wait for
 * ever). Before each fork the parent's waiters have waited long enough, and
 * seen the mutex released and taken back under them, that a park twin's
 * queue head has likely asked for a direct handoff (after 1 ms of waiting,
 * once woken without getting in); the test holds either way. */
static pthread_mutex_t g_fcw = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_fcw_arrived, g_fcw_stop;
static void* fcw_waiter(void* p) {
    (void)p;
    atomic_fetch_add(&g_fcw_arrived, 1);
    while (!atomic_load(&g_fcw_stop)) {
        CHECK_EQ(pthread_mutex_lock(&g_fcw), 0);
        CHECK_EQ(pthread_mutex_unlock(&g_fcw), 0);
    }
    return NULL;
}
static void test_fork_cond_wait(void) {
    atomic_store(&g_fcw_stop, 0);
    pthread_t w[3];
    for (int i = 0; i < 3; ++i) start(&w[i], fcw_waiter, NULL);
    while (atomic_load(&g_fcw_arrived) < 3) sleep_ms(1);
    for (int round = 0; round < 3; ++round) {
        CHECK_EQ(pthread_mutex_lock(&g_fcw), 0);
        sleep_ms(10);
        CHECK_EQ(pthread_mutex_unlock(&g_fcw), 0);
        CHECK_EQ(pthread_mutex_lock(&g_fcw), 0);
        sleep_ms(10);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            child_deadline();
            pthread_cond_t c = PTHREAD_COND_INITIALIZER;
            struct timespec past = {1, 0};
            int ok = pthread_cond_timedwait(&c, &g_fcw, &past) == ETIMEDOUT;
            ok &= pthread_cond_clockwait(&c, &g_fcw, CLOCK_MONOTONIC, &past) == ETIMEDOUT;
            struct timespec soon = in_ms(CLOCK_REALTIME, 1);
            ok &= pthread_cond_timedwait(&c, &g_fcw, &soon) == ETIMEDOUT;
            ok &= pthread_mutex_unlock(&g_fcw) == 0;
            ok &= pthread_mutex_lock(&g_fcw) == 0;
            ok &= pthread_mutex_unlock(&g_fcw) == 0;
            _exit(ok ? 0 : 1);
        }
        CHECK_EQ(pthread_mutex_unlock(&g_fcw), 0);
        wait_child(pid, "pthread_cond_timedwait in a fork child");
    }
    atomic_store(&g_fcw_stop, 1);
    for (int i = 0; i < 3; ++i) join(w[i]);
}

/* Whether a thread queued on a mutex changes its lock bytes (24..39 for
 * ours, glibc's __lock at 0): under every value but tas and ttas, whose
 * waiters only read the word or swap in the value it already holds. */
static int waiters_show(void) { return strcmp(g_lock, "tas") != 0 && strcmp(g_lock, "ttas") != 0; }
static void lock_bytes(pthread_mutex_t* m, uint64_t out[2]) {
    const uint64_t* w = (const uint64_t*)((const unsigned char*)m + (g_ours ? 24 : 0));
    out[0] = __atomic_load_n(&w[0], __ATOMIC_RELAXED);
    out[1] = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
}
/* Waits until m's lock bytes differ from `was`, taken while one thread held
 * it alone: another thread has queued on it. At most g_hang_s seconds, and
 * where waiters do not show, a moment. Only whether a test reaches the
 * window it aims at depends on this wait, never whether it passes. */
static void await_queued(pthread_mutex_t* m, const uint64_t was[2]) {
    if (!waiters_show()) {
        sleep_ms(20);
        return;
    }
    struct timespec d = in_ms(CLOCK_MONOTONIC, 1000L * g_hang_s);
    for (;;) {
        uint64_t now[2];
        lock_bytes(m, now);
        if (now[0] != was[0] || now[1] != was[1] || passed(CLOCK_MONOTONIC, &d)) return;
        sleep_ms(1);
    }
}

/* A count that threads advance and another thread waits on, as a join:
 * count_up adds 1 and wakes the waiters; await_at_least sleeps on the
 * count's futex until it reaches `value`, and returns 0 if g_hang_s seconds
 * pass first. seq_cst (the default): the increment before the wake, and
 * the waiter's load before its sleep, which the kernel repeats. */
static void count_up(atomic_int* count) {
    atomic_fetch_add(count, 1);
    syscall(SYS_futex, count, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
static int await_at_least(atomic_int* count, int value) {
    struct timespec d = in_ms(CLOCK_MONOTONIC, 1000L * g_hang_s);
    for (;;) {
        int seen = atomic_load(count);
        if (seen >= value) return 1;
        if (passed(CLOCK_MONOTONIC, &d)) return 0;
        /* Until the count changes from `seen` or the absolute deadline d
         * (CLOCK_MONOTONIC) passes; a signal or a spurious return only
         * goes round again. */
        syscall(SYS_futex, count, FUTEX_WAIT_BITSET_PRIVATE, seen, &d, NULL, FUTEX_BITSET_MATCH_ANY);
    }
}
/* A fork child in which glibc starts threads itself: timer_create with
 * SIGEV_THREAD runs each expiry's callback on a thread glibc creates, not
 * through pthread_create. The callback and the child's main thread contend
 * on one mutex: the callback's thread queues while the main thread holds
 * it, and the main thread's unlock must then hand it over, not reset it as
 * the library does while the child has only the thread that forked. The
 * parent forks while other threads run. */
enum { TIMER_ROUNDS = 4 };
static pthread_mutex_t g_tmr = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_tmr_arrived, g_tmr_done;
static long g_tmr_count; /* guarded by g_tmr */
static void timer_callback(union sigval v) {
    (void)v;
    count_up(&g_tmr_arrived);
    CHECK_EQ(pthread_mutex_lock(&g_tmr), 0);
    g_tmr_count++;
    CHECK_EQ(pthread_mutex_unlock(&g_tmr), 0);
    count_up(&g_tmr_done);
}
static int timer_child(void) {
    child_deadline();
    timer_t tm;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD;
    ev.sigev_notify_function = timer_callback;
    if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0) return 1;
    int ok = 1;
    for (int round = 0; ok && round < TIMER_ROUNDS; ++round) {
        ok &= pthread_mutex_lock(&g_tmr) == 0;
        uint64_t alone[2];
        lock_bytes(&g_tmr, alone);
        struct itimerspec once = {{0, 0}, {0, 1000000}};
        ok &= timer_settime(tm, 0, &once, NULL) == 0;
        ok &= await_at_least(&g_tmr_arrived, round + 1);
        await_queued(&g_tmr, alone);
        g_tmr_count++;
        ok &= pthread_mutex_unlock(&g_tmr) == 0;
        if (!await_at_least(&g_tmr_done, round + 1)) {
            fprintf(stderr, "preload_prog [%s]: timer callback %d never got the mutex\n", g_lock, round);
            ok = 0;
        }
    }
    ok &= pthread_mutex_lock(&g_tmr) == 0;
    ok &= g_tmr_count == 2 * TIMER_ROUNDS;
    ok &= pthread_mutex_unlock(&g_tmr) == 0;
    ok &= timer_delete(tm) == 0;
    return ok ? 0 : 1;
}
/* The same under stress: in the child, glibc starts 200 threads, three at
 * a time (three SIGEV_THREAD timers, each re-armed for 200 us by its
 * callback as it ends: a bounded crowd, so the spinning FIFO locks do not
 * drown in waiters on a small machine), each taking one mutex 20 times,
 * while the thread that forked takes and releases it in a loop; threads
 * keep arriving while it unlocks (and resets). Every 25th callback forks while
 * it holds the mutex, perhaps with the thread that forked queued behind
 * it: the grandchild's unlock and lock must not wait for that ghost. The
 * 150th creates a thread, ending the single-threaded mode of the child in
 * the middle of the stream. Every section must run alone, and each thread
 * must get through. */
enum { STRESS_CALLBACKS = 200, STRESS_SECTIONS = 20, STRESS_FORK_EVERY = 25, STRESS_CREATE_AT = 150,
       STRESS_LANES = 3 };
static timer_t g_ts_timers[STRESS_LANES];
static pthread_mutex_t g_ts = PTHREAD_MUTEX_INITIALIZER;
static long g_ts_count; /* guarded by g_ts */
/* g_ts_sections: the sections run, counted atomically inside each: equal
 * to g_ts_count whenever g_ts is held, whatever threads are still on their
 * way (a callback may start after timer_delete). */
static atomic_long g_ts_sections;
static atomic_int g_ts_inside, g_ts_overlaps, g_ts_done, g_ts_failed;
static void ts_section(void) {
    if (atomic_fetch_add(&g_ts_inside, 1) != 0) atomic_fetch_add(&g_ts_overlaps, 1);
    g_ts_count++;
    atomic_fetch_add(&g_ts_sections, 1);
    atomic_fetch_sub(&g_ts_inside, 1);
}
static void ts_sections(void) {
    for (int i = 0; i < STRESS_SECTIONS; ++i) {
        CHECK_EQ(pthread_mutex_lock(&g_ts), 0);
        ts_section();
        CHECK_EQ(pthread_mutex_unlock(&g_ts), 0);
    }
}
static void* ts_created(void* p) {
    (void)p;
    ts_sections();
    return NULL;
}
static void ts_fork_holding(void) {
    CHECK_EQ(pthread_mutex_lock(&g_ts), 0);
    pid_t pid = fork();
    if (pid == 0) {
        alarm((unsigned)g_hang_s);
        int ok = pthread_mutex_unlock(&g_ts) == 0;
        ok &= pthread_mutex_lock(&g_ts) == 0 && pthread_mutex_unlock(&g_ts) == 0;
        _exit(ok ? 0 : 1);
    }
    CHECK_EQ(pthread_mutex_unlock(&g_ts), 0);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "preload_prog [%s]: a grandchild forked by a timer callback %s\n", g_lock,
                pid < 0 ? "was not started" : "failed or hung");
        atomic_store(&g_ts_failed, 1);
    }
}
static atomic_int g_ts_started;
static void ts_callback(union sigval v) {
    int n = atomic_fetch_add(&g_ts_started, 1) + 1;
    ts_sections();
    if (n % STRESS_FORK_EVERY == 0) ts_fork_holding();
    if (n == STRESS_CREATE_AT) {
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, ts_created, NULL), 0);
        join(t);
    }
    if (atomic_load(&g_ts_started) < STRESS_CALLBACKS) {
        struct itimerspec once = {{0, 0}, {0, 200000}};
        if (timer_settime(g_ts_timers[v.sival_int], 0, &once, NULL) != 0) atomic_store(&g_ts_failed, 1);
    }
    count_up(&g_ts_done);
}
static int stress_child(void) {
    child_deadline();
    for (int i = 0; i < STRESS_LANES; ++i) {
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD;
        ev.sigev_notify_function = ts_callback;
        ev.sigev_value.sival_int = i;
        if (timer_create(CLOCK_MONOTONIC, &ev, &g_ts_timers[i]) != 0) return 1;
    }
    for (int i = 0; i < STRESS_LANES; ++i) {
        struct itimerspec once = {{0, 0}, {0, 200000}};
        if (timer_settime(g_ts_timers[i], 0, &once, NULL) != 0) return 1;
    }
    long mine = 0;
    int ok = 1;
    struct timespec d = in_ms(CLOCK_MONOTONIC, 1000L * g_hang_s);
    while (ok && !atomic_load(&g_ts_failed) && atomic_load(&g_ts_done) < STRESS_CALLBACKS) {
        ok &= pthread_mutex_lock(&g_ts) == 0;
        ts_section();
        ok &= pthread_mutex_unlock(&g_ts) == 0;
        ++mine;
        if ((mine & 1023) == 0 && passed(CLOCK_MONOTONIC, &d)) {
            fprintf(stderr, "preload_prog [%s]: %d of %d timer callbacks done\n", g_lock,
                    atomic_load(&g_ts_done), STRESS_CALLBACKS);
            ok = 0;
        }
    }
    for (int i = 0; i < STRESS_LANES; ++i) ok &= timer_delete(g_ts_timers[i]) == 0;
    ok &= pthread_mutex_lock(&g_ts) == 0;
    ok &= g_ts_count == atomic_load(&g_ts_sections);
    ok &= pthread_mutex_unlock(&g_ts) == 0;
    if (atomic_load(&g_ts_overlaps) != 0) {
        fprintf(stderr, "preload_prog [%s]: %d sections overlapped\n", g_lock, atomic_load(&g_ts_overlaps));
        ok = 0;
    }
    return ok && !atomic_load(&g_ts_failed) ? 0 : 1;
}
static void test_fork_glibc_threads(void) {
    atomic_store(&g_stop, 0);
    pthread_t h[2];
    for (int i = 0; i < 2; ++i) start(&h[i], hammer, NULL);
    for (int round = 0; round < 2; ++round) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(timer_child());
        wait_child(pid, "timer_create(SIGEV_THREAD) callbacks in a fork child");
    }
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(stress_child());
    wait_child(pid, "a stream of SIGEV_THREAD callbacks, forks and a thread creation in a fork child");
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; ++i) join(h[i]);
}

/* A thread that glibc started in a fork child creates a thread while the
 * thread that forked is inside pthread_mutex_unlock, before it has decided
 * whether it may reset the mutex (the library's test hook holds it there
 * until the created thread has queued on that mutex). pthread_create must
 * end the child's single-threaded mode with the same handshake as the
 * started thread's first lock would: the unlock then hands the mutex over
 * instead of resetting it under the new thread. */
static pthread_mutex_t g_fcr = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_fcr_hooked, g_fcr_paused, g_fcr_go, g_fcr_done;
static uint64_t g_fcr_bytes[2]; /* the lock bytes with the thread that forked holding it alone */
static void fcr_hook(int where, const void* m) {
    if (where != 0 || m != &g_fcr || atomic_exchange(&g_fcr_hooked, 1)) return;
    atomic_store(&g_fcr_paused, 1);
    while (!atomic_load(&g_fcr_go)) sleep_ms(1);
}
static void* fcr_locker(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_fcr), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_fcr), 0);
    count_up(&g_fcr_done);
    return NULL;
}
static void fcr_callback(union sigval v) {
    (void)v;
    while (!atomic_load(&g_fcr_paused)) sleep_ms(1);
    pthread_t t; /* this thread's first call of the library's: */
    CHECK_EQ(pthread_create(&t, NULL, fcr_locker, NULL), 0);
    CHECK_EQ(pthread_detach(t), 0);
    await_queued(&g_fcr, g_fcr_bytes);
    atomic_store(&g_fcr_go, 1);
}
static int fcr_child(void) {
    child_deadline();
    timer_t tm;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD;
    ev.sigev_notify_function = fcr_callback;
    if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0) return 1;
    int ok = pthread_mutex_lock(&g_fcr) == 0;
    lock_bytes(&g_fcr, g_fcr_bytes);
    struct itimerspec once = {{0, 0}, {0, 1000000}};
    ok &= timer_settime(tm, 0, &once, NULL) == 0;
    ok &= pthread_mutex_unlock(&g_fcr) == 0; /* held in the hook until the new thread has queued */
    if (!await_at_least(&g_fcr_done, 1)) {
        fprintf(stderr, "preload_prog [%s]: the thread created in the fork child never got the mutex\n",
                g_lock);
        ok = 0;
    }
    return ok ? 0 : 1;
}
static void test_fork_create_race(void) {
    if (!g_ours) return; /* the hook is in spindle's unlock */
    CHECK(spindle_preload_test_reset_hook != NULL);
    spindle_preload_test_reset_hook(fcr_hook);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(fcr_child());
    spindle_preload_test_reset_hook(NULL);
    wait_child(pid, "pthread_create by a glibc-started thread during an unlock in a fork child");
}

/* Ghosts: the thread that forks holds a mutex with a thread of the parent
 * queued behind it, and another thread of the parent waits on a condition
 * variable; neither exists in the child. In the child a thread glibc starts
 * uses a mutex of its own first. The unlock and the destroy of the thread
 * that forked must still treat the ghosts as gone -- reset the mutex, forget
 * the waiter -- rather than hand the mutex to a ghost or wait for one to
 * leave: only a thread that uses the same object may change that. */
static pthread_mutex_t g_gh = PTHREAD_MUTEX_INITIALIZER, g_gh_own = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_gh_cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gh_c = PTHREAD_COND_INITIALIZER;
static atomic_int g_gh_done, g_gh_wake;
static void* gh_waiter(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_gh), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_gh), 0);
    return NULL;
}
static void* gh_cond_waiter(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_lock(&g_gh_cm), 0);
    while (!atomic_load(&g_gh_wake)) CHECK_EQ(pthread_cond_wait(&g_gh_c, &g_gh_cm), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_gh_cm), 0);
    return NULL;
}
static void gh_callback(union sigval v) {
    (void)v;
    CHECK_EQ(pthread_mutex_lock(&g_gh_own), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_gh_own), 0);
    count_up(&g_gh_done);
}
/* With g_gh_cancels: as many of glibc's threads wait on a condition
 * variable first, one after the other, each cancelled in its wait. What
 * their calls announced must go with them: were it left behind, the
 * announcements would run out and end the child's single-threaded mode. */
enum { GH_CANCELS = 40 };
static int g_gh_cancels;
static pthread_mutex_t g_gh_wm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gh_wc = PTHREAD_COND_INITIALIZER;
static pthread_t g_gh_waiter;
static atomic_int g_gh_waiting, g_gh_gone;
static void gh_wait_cleanup(void* p) {
    (void)p;
    CHECK_EQ(pthread_mutex_unlock(&g_gh_wm), 0);
    count_up(&g_gh_gone);
}
static void gh_wait_callback(union sigval v) {
    (void)v;
    CHECK_EQ(pthread_mutex_lock(&g_gh_wm), 0);
    g_gh_waiter = pthread_self();
    count_up(&g_gh_waiting);
    pthread_cleanup_push(gh_wait_cleanup, NULL);
    for (;;) CHECK_EQ(pthread_cond_wait(&g_gh_wc, &g_gh_wm), 0);
    pthread_cleanup_pop(0);
}
static int gh_cancelled_waits(void) {
    timer_t tm;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD;
    ev.sigev_notify_function = gh_wait_callback;
    if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0) return 0;
    for (int i = 0; i < GH_CANCELS; ++i) {
        struct itimerspec once = {{0, 0}, {0, 1000000}};
        if (timer_settime(tm, 0, &once, NULL) != 0 || !await_at_least(&g_gh_waiting, i + 1)) return 0;
        /* The waiter released the mutex in its wait: it waits. */
        if (pthread_mutex_lock(&g_gh_wm) != 0 || pthread_mutex_unlock(&g_gh_wm) != 0) return 0;
        if (pthread_cancel(g_gh_waiter) != 0 || !await_at_least(&g_gh_gone, i + 1)) return 0;
    }
    return timer_delete(tm) == 0;
}
static int gh_child(void) {
    child_deadline();
    if (g_gh_cancels && !gh_cancelled_waits()) return 1;
    timer_t tm;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD;
    ev.sigev_notify_function = gh_callback;
    if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0) return 1;
    struct itimerspec once = {{0, 0}, {0, 1000000}};
    if (timer_settime(tm, 0, &once, NULL) != 0 || !await_at_least(&g_gh_done, 1)) return 1;
    int ok = pthread_mutex_unlock(&g_gh) == 0; /* its waiter is a ghost */
    ok &= pthread_mutex_lock(&g_gh) == 0;
    ok &= pthread_mutex_unlock(&g_gh) == 0;
    if (g_ours) ok &= pthread_cond_destroy(&g_gh_c) == 0; /* so is its waiter */
    return ok ? 0 : 1;
}
static void test_fork_ghosts(void) {
    pthread_t w, cw;
    uint64_t alone[2];
    CHECK_EQ(pthread_mutex_lock(&g_gh), 0);
    lock_bytes(&g_gh, alone);
    start(&w, gh_waiter, NULL);
    await_queued(&g_gh, alone);
    /* glibc's destroy waits for a waiter that never leaves: ours only. */
    if (g_ours) {
        start(&cw, gh_cond_waiter, NULL);
        /* registered (pthread_cond_t bytes 4..7, cond.hpp) */
        while (__atomic_load_n((unsigned*)&g_gh_c + 1, __ATOMIC_RELAXED) == 0) sleep_ms(1);
    }
    for (g_gh_cancels = 0; g_gh_cancels < 2; ++g_gh_cancels) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(gh_child());
        wait_child(pid, g_gh_cancels ? "unlock and destroy with ghosts after cancelled waits of glibc's threads"
                                     : "unlock and destroy with ghosts after a glibc-started thread's call");
    }
    CHECK_EQ(pthread_mutex_unlock(&g_gh), 0);
    join(w);
    if (g_ours) {
        CHECK_EQ(pthread_mutex_lock(&g_gh_cm), 0);
        atomic_store(&g_gh_wake, 1);
        CHECK_EQ(pthread_cond_broadcast(&g_gh_c), 0);
        CHECK_EQ(pthread_mutex_unlock(&g_gh_cm), 0);
        join(cw);
    }
}

/* fork() from a signal handler that interrupted a reset in a fork child (the
 * library's test hook raises the signal there): the grandchild's thread
 * returns from the handler into that reset and ends it. The grandchild must
 * count that reset as under way, not start from none (ending it would then
 * leave the count wrapped, and a thread glibc starts in the grandchild
 * would wait for ever for resets to end before its first lock). */
static pthread_mutex_t g_sf = PTHREAD_MUTEX_INITIALIZER, g_sf_timer = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t g_sf_grandchild;
static volatile pid_t g_sf_pid;
static atomic_int g_sf_hooked, g_sf_done;
static void sf_handler(int sig) {
    (void)sig;
    pid_t p = fork();
    if (p == 0) {
        g_sf_grandchild = 1;
        alarm((unsigned)g_hang_s);
    } else {
        g_sf_pid = p;
    }
}
static void sf_hook(int where, const void* m) {
    if (where != 1 || m != &g_sf || atomic_exchange(&g_sf_hooked, 1)) return;
    raise(SIGUSR1); /* inside the reset */
}
static void sf_callback(union sigval v) {
    (void)v;
    CHECK_EQ(pthread_mutex_lock(&g_sf_timer), 0);
    CHECK_EQ(pthread_mutex_unlock(&g_sf_timer), 0);
    count_up(&g_sf_done);
}
static int sf_grandchild(void) {
    timer_t tm;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD;
    ev.sigev_notify_function = sf_callback;
    if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0) return 1;
    struct itimerspec once = {{0, 0}, {0, 1000000}};
    if (timer_settime(tm, 0, &once, NULL) != 0) return 1;
    if (!await_at_least(&g_sf_done, 1)) {
        fprintf(stderr, "preload_prog [%s]: the grandchild's timer thread never got its mutex\n", g_lock);
        return 1;
    }
    return 0;
}
static int sf_child(void) {
    child_deadline();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sf_handler;
    if (sigaction(SIGUSR1, &sa, NULL) != 0) return 1;
    int ok = pthread_mutex_lock(&g_sf) == 0;
    ok &= pthread_mutex_unlock(&g_sf) == 0; /* the hook forks inside the reset */
    if (g_sf_grandchild) _exit(ok ? sf_grandchild() : 1);
    if (!ok || g_sf_pid <= 0) return 1;
    wait_child(g_sf_pid, "fork() from a signal handler inside a reset: the grandchild");
    return 0;
}
static void test_fork_in_reset(void) {
    if (!g_ours) return; /* the hook is in spindle's unlock */
    CHECK(spindle_preload_test_reset_hook != NULL);
    spindle_preload_test_reset_hook(sf_hook);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(sf_child());
    spindle_preload_test_reset_hook(NULL);
    wait_child(pid, "fork() from a signal handler inside a reset");
}

/* ------------------------------------------------------------------------ */
/* Modes that spawn this program again with another environment. */

/* Runs this program with `assignment` and `also` (NAME=VALUE; `also` may be
 * null) added to the environment and argument `arg`; returns its exit
 * status, its stderr in buf. */
static int spawn_self2(const char* assignment, const char* also, const char* arg, char* buf, size_t size) {
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        putenv((char*)assignment);
        if (also != NULL) putenv((char*)also);
        execl("/proc/self/exe", "preload_prog", arg, (char*)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t n;
    while ((n = read(fds[0], buf + used, size - 1 - used)) > 0) used += (size_t)n;
    buf[used] = '\0';
    close(fds[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    return WEXITSTATUS(status);
}
static int spawn_self(const char* assignment, const char* arg, char* buf, size_t size) {
    return spawn_self2(assignment, NULL, arg, buf, size);
}

static int bad_env(void) {
    char out[4096];
    int r = spawn_self("SPINDLE_LOCK=no-such-lock", "quiet", out, sizeof out);
    fprintf(stderr, "SPINDLE_LOCK=no-such-lock: exit %d, said: %s", r, out);
    CHECK(r != 0);
    CHECK(strstr(out, "SPINDLE_LOCK=no-such-lock") != NULL);
    static const char* valid[] = {
        "hemlock",    "hemlock_park",    "hemlock_naive", "hemlock_naive_park", "hemlock_overlap",
        "hemlock_overlap_park", "mcs",   "mcs_park",      "clh",                "clh_park",
        "ticket",     "ticket_park",     "tas",           "tas_park",           "ttas",
        "ttas_park",  "tclock",          "tclock_blocking", "tclock-blocking",  "pthread"};
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; ++i) CHECK(strstr(out, valid[i]) != NULL);
    r = spawn_self("SPINDLE_STATS=yes", "quiet", out, sizeof out);
    fprintf(stderr, "SPINDLE_STATS=yes: exit %d, said: %s", r, out);
    CHECK(r != 0);
    CHECK(strstr(out, "SPINDLE_STATS=yes") != NULL);
    r = spawn_self("SPINDLE_TCLOCK_ADOPT=yes", "quiet", out, sizeof out);
    fprintf(stderr, "SPINDLE_TCLOCK_ADOPT=yes: exit %d, said: %s", r, out);
    CHECK(r != 0);
    CHECK(strstr(out, "SPINDLE_TCLOCK_ADOPT=yes") != NULL);
    return 0;
}

static void* contend(void* p) {
    pthread_mutex_t* m = p;
    for (int i = 0; i < 5000; ++i) {
        CHECK_EQ(pthread_mutex_lock(m), 0);
        if ((i & 15) == 0) sched_yield();
        CHECK_EQ(pthread_mutex_unlock(m), 0);
    }
    return NULL;
}
static int contended_workload(void) {
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_t t[4];
    for (int i = 0; i < 4; ++i) start(&t[i], contend, &m);
    for (int i = 0; i < 4; ++i) join(t[i]);
    return 0;
}

/* SPINDLE_STATS=1 in a fork child: the child's report counts the child's
 * locks only, not the parent's counters copied by fork(). The contended
 * workload runs first, then a child locks one mutex of its own three times
 * and exits (its destructors print its report). */
static int contended_then_fork(void) {
    contended_workload();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        child_deadline();
        static pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;
        for (int i = 0; i < 3; ++i) {
            if (pthread_mutex_lock(&own) != 0 || pthread_mutex_unlock(&own) != 0) _exit(1);
        }
        fprintf(stderr, "stats-fork: child pid %d\n", (int)getpid());
        exit(0);
    }
    wait_child(pid, "SPINDLE_STATS=1 in a fork child");
    return 0;
}
static void test_stats_fork(void) {
    char out[16384];
    int r = spawn_self("SPINDLE_STATS=1", "contend-fork", out, sizeof out);
    int child = 0;
    const char* at = strstr(out, "stats-fork: child pid ");
    if (at != NULL) child = atoi(at + strlen("stats-fork: child pid "));
    char head[96];
    snprintf(head, sizeof head, "spindle: lock statistics, pid %d,", child);
    const char* report = strstr(out, head);
    const char* line2 = report != NULL ? strchr(report, '\n') : NULL;
    int ok = r == 0 && child > 0;
    if (g_ours)
        ok = ok && line2 != NULL && strncmp(line2 + 1, "spindle: 1 locks, 3 acquisitions,", 33) == 0;
    if (!ok) fprintf(stderr, "SPINDLE_STATS=1, fork: exit %d, said:\n%s", r, out);
    CHECK(ok);
}

static int stats(void) {
    char out[8192];
    int r = spawn_self("SPINDLE_STATS=1", "contend", out, sizeof out);
    fprintf(stderr, "SPINDLE_STATS=1: exit %d, said:\n%s", r, out);
    CHECK_EQ(r, 0);
    if (g_ours) {
        CHECK(strstr(out, "spindle: lock statistics") != NULL);
        CHECK(strstr(out, " acquisitions, ") != NULL);
        CHECK(strstr(out, "contended") != NULL);
        CHECK(strstr(out, "mutex") != NULL);
    } else {
        CHECK(strstr(out, "measures spindle's locks only") != NULL);
    }
    return 0;
}

/* The program's first lock in a .preinit_array function (see
 * preinit_lock): SPINDLE_LOCK and SPINDLE_STATS are honoured there too,
 * and a bad value is still reported. */
static int preinit_check(void) {
    CHECK_EQ(g_preinit_locked, 1);
    CHECK(strcmp(spindle_preload_lock_name(), g_lock) == 0);
    return 0;
}
static void test_preinit(void) {
    char out[8192];
    int r = spawn_self2("PRELOAD_PROG_PREINIT=1", NULL, "preinit", out, sizeof out);
    if (r != 0) fprintf(stderr, "preinit: exit %d, said: %s", r, out);
    CHECK_EQ(r, 0);
    r = spawn_self2("PRELOAD_PROG_PREINIT=1", "SPINDLE_LOCK=no-such-lock", "quiet", out, sizeof out);
    if (r == 0 || strstr(out, "SPINDLE_LOCK=no-such-lock") == NULL)
        fprintf(stderr, "preinit, SPINDLE_LOCK=no-such-lock: exit %d, said: %s", r, out);
    CHECK(r != 0);
    CHECK(strstr(out, "SPINDLE_LOCK=no-such-lock") != NULL);
    r = spawn_self2("PRELOAD_PROG_PREINIT=1", "SPINDLE_STATS=yes", "quiet", out, sizeof out);
    if (r == 0 || strstr(out, "SPINDLE_STATS=yes") == NULL)
        fprintf(stderr, "preinit, SPINDLE_STATS=yes: exit %d, said: %s", r, out);
    CHECK(r != 0);
    CHECK(strstr(out, "SPINDLE_STATS=yes") != NULL);
    r = spawn_self2("PRELOAD_PROG_PREINIT=1", "SPINDLE_STATS=1", "contend", out, sizeof out);
    const char* expected = g_ours ? "spindle: lock statistics" : "measures spindle's locks only";
    if (r != 0 || strstr(out, expected) == NULL)
        fprintf(stderr, "preinit, SPINDLE_STATS=1: exit %d, said: %s", r, out);
    CHECK_EQ(r, 0);
    CHECK(strstr(out, expected) != NULL);
}

int main(int argc, char** argv) {
    const char* env = getenv("SPINDLE_LOCK");
    if (env != NULL && env[0] != '\0') g_lock = env;
    if (strcmp(g_lock, "tclock-blocking") == 0) g_lock = "tclock_blocking"; /* the same lock */
    g_ours = strcmp(g_lock, "pthread") != 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    g_threads = cpus < 2 ? 4 : (int)(2 * cpus + 1);
    if (g_threads > 64) g_threads = 64;
    g_iters = 4000;
    const char* iters = getenv("PRELOAD_PROG_ITERS");
    if (iters != NULL) g_iters = atol(iters);
    const char* hang = getenv("PRELOAD_PROG_HANG_S");
    if (hang != NULL && atoi(hang) > 0) g_hang_s = atoi(hang);

    const char* mode = argc > 1 ? argv[1] : "all";
    early_join(); /* the early library's thread, whatever the mode (checked in test_interposed) */
    if (strcmp(mode, "quiet") == 0) return 0;
    if (strcmp(mode, "contend") == 0) return contended_workload();
    if (strcmp(mode, "contend-fork") == 0) return contended_then_fork();
    if (strcmp(mode, "preinit") == 0) return preinit_check();
    test_interposed();
    if (strcmp(mode, "bad-env") == 0) return bad_env();
    if (strcmp(mode, "stats") == 0) return stats();

    /* Each part's wall time goes to stderr: a part that runs long on a
     * loaded machine shows up in the log (nothing here checks a time). */
    const char* only = getenv("PRELOAD_PROG_ONLY"); /* one part, by name (repeating one check) */
#define PART(f)                                                                                  \
    do {                                                                                         \
        if (only != NULL && strcmp(only, #f) != 0) break;                                       \
        struct timespec t0_, t1_;                                                                \
        clock_gettime(CLOCK_MONOTONIC, &t0_);                                                    \
        f();                                                                                     \
        clock_gettime(CLOCK_MONOTONIC, &t1_);                                                    \
        fprintf(stderr, "preload_prog [%s]: %-22s %8.1f ms\n", g_lock, #f,                      \
                (double)(t1_.tv_sec - t0_.tv_sec) * 1e3 + (double)(t1_.tv_nsec - t0_.tv_nsec) / 1e6); \
    } while (0)
    PART(test_mutex_kinds);
    PART(test_glibc_kinds);
    PART(test_timed);
    PART(test_cond);
    PART(test_cond_cancel_signalled);
    PART(test_rwlock);
    PART(test_spin);
    PART(test_process_shared);
    PART(test_fork_shared_spin);
    PART(test_fork_shared_cond_destroy);
    PART(test_fork);
    PART(test_stress);
    PART(test_identity);
    PART(test_delegation);
    PART(test_delegated_blocking);
    PART(test_cond_many);
    PART(test_read_again);
    PART(test_fork_in_section);
    PART(test_fork_cond_wait);
    PART(test_fork_glibc_threads);
    PART(test_fork_create_race);
    PART(test_fork_in_reset);
    PART(test_fork_ghosts);
    PART(test_preinit);
    PART(test_stats_fork);
#undef PART
    printf("preload_prog [%s]: %d threads, %ld iterations: all checks passed\n", g_lock, g_threads,
           g_iters);
    return 0;
}
