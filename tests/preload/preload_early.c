/* tests/preload/preload_early.c — a library whose constructor locks before
 * libspindle_preload.so's own constructor has run (the dynamic linker
 * initializes a program's libraries before a preloaded one), and registers
 * pthread_atfork handlers from there. preload_prog links it and checks what
 * it saw. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

pthread_mutex_t early_mutex = PTHREAD_MUTEX_INITIALIZER;
int early_lock_word_used; /* bytes 24..39 non-zero while held: our lock */
int early_glibc_word_used; /* __lock non-zero while held: glibc's lock */
int early_results_ok;

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
}
