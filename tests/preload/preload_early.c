/* tests/preload/preload_early.c — a library whose constructor locks before
 * libspindle_preload.so's own constructor has run (the dynamic linker
 * initializes a program's libraries before a preloaded one), registers
 * pthread_atfork handlers from there, and starts a thread that contends
 * with it and runs on while the later constructors run. preload_prog links it and checks what
 * it saw. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

pthread_mutex_t early_mutex = PTHREAD_MUTEX_INITIALIZER;
int early_lock_word_used; /* bytes 24..39 non-zero while held: our lock */
int early_glibc_word_used; /* __lock non-zero while held: glibc's lock */
int early_results_ok;

/* A thread started here, before libspindle_preload.so's constructor, that
 * contends with this constructor's thread on one mutex and goes on while the
 * later constructors (ours among them) run. preload_prog joins it and checks
 * the count. */
enum { EARLY_ITERS = 20000 };
pthread_mutex_t early_counter_mutex = PTHREAD_MUTEX_INITIALIZER;
long early_counter; /* guarded by early_counter_mutex */
long early_expected;
int early_thread_started;
static pthread_t early_thread;

static void early_count(void) {
    for (int i = 0; i < EARLY_ITERS; ++i) {
        pthread_mutex_lock(&early_counter_mutex);
        ++early_counter;
        if (i % 512 == 0) sched_yield(); /* now and then while holding it: the other one queues */
        pthread_mutex_unlock(&early_counter_mutex);
    }
}
static void* early_worker(void* arg) {
    (void)arg;
    early_count();
    early_count();
    return NULL;
}
void early_join(void) {
    static int joined;
    if (early_thread_started && !joined) pthread_join(early_thread, NULL);
    joined = 1;
}

static void early_prepare(void) { pthread_mutex_lock(&early_mutex); }
static void early_after(void) { pthread_mutex_unlock(&early_mutex); }

__attribute__((constructor)) static void early_init(void) {
    int ok = 1;
    ok &= pthread_mutex_lock(&early_mutex) == 0;
    const unsigned char* b = (const unsigned char*)&early_mutex;
    for (int i = 24; i < 40; ++i)
        if (b[i]) early_lock_word_used = 1;
    early_glibc_word_used = early_mutex.__data.__lock != 0;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    struct timespec past = {1, 0};
    ok &= pthread_cond_timedwait(&c, &early_mutex, &past) == ETIMEDOUT;
    ok &= pthread_mutex_unlock(&early_mutex) == 0;
    pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
    ok &= pthread_rwlock_rdlock(&rw) == 0 && pthread_rwlock_tryrdlock(&rw) == 0;
    ok &= pthread_rwlock_trywrlock(&rw) == EBUSY;
    ok &= pthread_rwlock_unlock(&rw) == 0 && pthread_rwlock_unlock(&rw) == 0;
    ok &= pthread_atfork(early_prepare, early_after, early_after) == 0;
    early_results_ok = ok;
    early_thread_started = pthread_create(&early_thread, NULL, early_worker, NULL) == 0;
    early_expected = early_thread_started ? 3L * EARLY_ITERS : EARLY_ITERS;
    early_count();
}
