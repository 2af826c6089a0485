/* An unmodified pthread program: four threads add to one counter under a
 * pthread mutex. Built as usual; run it with spindle's locks underneath:
 *
 *   LD_PRELOAD=build/release/preload/libspindle_preload.so SPINDLE_STATS=1 \
 *       build/release/examples/example_preload_counter
 *
 * SPINDLE_LOCK picks the lock (default hemlock_park; `mcs_park`, `tclock`,
 * `pthread` for glibc's own, ...); SPINDLE_STATS=1 prints, at exit, how the
 * program's locks were used. */
#include <pthread.h>
#include <stdio.h>

enum { threads = 4, rounds = 100000 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long counter; /* guarded by lock */

static void* work(void* arg) {
    (void)arg;
    for (int i = 0; i < rounds; ++i) {
        pthread_mutex_lock(&lock);
        ++counter;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(void) {
    pthread_t t[threads];
    for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
    printf("counter %ld of %d\n", counter, threads * rounds);
    fflush(stdout); /* before the statistics printed at exit */
    return counter == (long)threads * rounds ? 0 : 1;
}
