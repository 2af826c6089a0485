// The shared cold paths of locks/ (include/spindle/locks/detail/lock_support.hpp).
#include <spindle/locks/detail/lock_support.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include <pthread.h>

#include <spindle/locks/detail/futex.hpp>  // backoff

namespace spindle::detail {

namespace {

// The one key whose destructor runs a thread's hooks. Made on first need:
// key_none -> key_making (one thread calls pthread_key_create) -> key_ready
// or key_failed.
constexpr int key_none = 0, key_making = 1, key_ready = 2, key_failed = 3;
constinit std::atomic<int> g_key_state{key_none};
pthread_key_t g_key;  // written once before key_ready is published

void on_thread_exit(void*) noexcept {
    lock_thread_state& t = tls(tl_lock_thread);
    t.exiting = true;  // from here on nothing registers: later locks clean up after themselves
    t.registered = false;
    while (t.hook_count > 0) t.hooks[--t.hook_count]();
}

bool have_key() noexcept {
    // acquire pairs with the release store of key_ready: g_key is written.
    int s = g_key_state.load(std::memory_order_acquire);
    if (s == key_none &&
        g_key_state.compare_exchange_strong(s, key_making, std::memory_order_acquire, std::memory_order_acquire)) {
        const bool ok = pthread_key_create(&g_key, &on_thread_exit) == 0;
        g_key_state.store(ok ? key_ready : key_failed, std::memory_order_release);
        return ok;
    }
    unsigned spins = 0;
    while ((s = g_key_state.load(std::memory_order_acquire)) == key_making) backoff(spins);
    return s == key_ready;
}

}  // namespace

bool run_at_thread_exit(thread_exit_fn fn) noexcept {
    lock_thread_state& t = tls(tl_lock_thread);
    if (t.exiting) return false;
    for (unsigned i = 0; i < t.hook_count; ++i)
        if (t.hooks[i] == fn) return true;
    if (t.hook_count == sizeof(t.hooks) / sizeof(t.hooks[0]))
        lock_misuse("spindle::detail::run_at_thread_exit", &t, "more thread-exit hooks than slots");
    if (!t.registered) {
        // A non-null value makes the key's destructor run for this thread.
        if (!have_key() || pthread_setspecific(g_key, &t) != 0) {
            t.exiting = true;  // no hook: no caches either, for good
            return false;
        }
        t.registered = true;
    }
    t.hooks[t.hook_count++] = fn;
    return true;
}

}  // namespace spindle::detail
