// preload/real.cpp — finding glibc's own functions.
//
// Looked up one by one, on first use, from whichever thread needs it: no
// constructor has to have run (another library's constructor may lock before
// ours), and no thread ever waits for another's lookup (two threads racing
// look up the same address and store the same value).
//
// dlsym and dlvsym may themselves lock (with an interposed malloc, through
// our own functions: older glibc versions allocate inside dlsym). A thread
// that re-enters a lookup it is already inside gets a stand-in that needs no
// lookup: glibc's C11 mtx_* and cnd_* functions, which the dynamic linker
// bound when it loaded us and which run glibc's own mutex and condition
// variable code on the same object layout (mtx_t and cnd_t are
// pthread_mutex_t and pthread_cond_t). Only a lookup nested in a lookup, in
// the same thread, ever takes that path. The functions without a C11
// counterpart stop the process with a message if they are needed there.
#include <dlfcn.h>
#include <threads.h>

#include <cerrno>

#include "internal.hpp"

namespace spindle::preload {

namespace {

struct symbol {
    const char* name;
    const char* version;  // null: the default version (dlsym)
};

// Indexed by real_fn.
constexpr symbol symbols[] = {
    {"pthread_mutex_init", nullptr},
    {"pthread_mutex_destroy", nullptr},
    {"pthread_mutex_lock", nullptr},
    {"pthread_mutex_trylock", nullptr},
    {"pthread_mutex_timedlock", nullptr},
    {"pthread_mutex_clocklock", nullptr},
    {"pthread_mutex_unlock", nullptr},

    {"pthread_rwlock_init", nullptr},
    {"pthread_rwlock_destroy", nullptr},
    {"pthread_rwlock_rdlock", nullptr},
    {"pthread_rwlock_tryrdlock", nullptr},
    {"pthread_rwlock_timedrdlock", nullptr},
    {"pthread_rwlock_clockrdlock", nullptr},
    {"pthread_rwlock_wrlock", nullptr},
    {"pthread_rwlock_trywrlock", nullptr},
    {"pthread_rwlock_timedwrlock", nullptr},
    {"pthread_rwlock_clockwrlock", nullptr},
    {"pthread_rwlock_unlock", nullptr},

    {"pthread_spin_init", nullptr},
    {"pthread_spin_destroy", nullptr},
    {"pthread_spin_lock", nullptr},
    {"pthread_spin_trylock", nullptr},
    {"pthread_spin_unlock", nullptr},

    {"pthread_cond_init", nullptr},
    {"pthread_cond_destroy", nullptr},
    {"pthread_cond_signal", nullptr},
    {"pthread_cond_broadcast", nullptr},
    {"pthread_cond_wait", nullptr},
    {"pthread_cond_timedwait", nullptr},
    {"pthread_cond_clockwait", nullptr},

    {"pthread_cond_init", "GLIBC_2.2.5"},
    {"pthread_cond_destroy", "GLIBC_2.2.5"},
    {"pthread_cond_signal", "GLIBC_2.2.5"},
    {"pthread_cond_broadcast", "GLIBC_2.2.5"},
    {"pthread_cond_wait", "GLIBC_2.2.5"},
    {"pthread_cond_timedwait", "GLIBC_2.2.5"},

    {"pthread_create", nullptr},
    {"thrd_create", nullptr},
    {"__register_atfork", nullptr},

    {"nanosleep", nullptr},
    {"clock_nanosleep", nullptr},
    {"usleep", nullptr},
    {"sleep", nullptr},
    {"pause", nullptr},
    {"poll", nullptr},
    {"ppoll", nullptr},
    {"select", nullptr},
    {"pselect", nullptr},
    {"epoll_wait", nullptr},
    {"epoll_pwait", nullptr},
    {"sem_wait", nullptr},
    {"sem_timedwait", nullptr},
    {"sem_clockwait", nullptr},
    {"pthread_join", nullptr},
    {"waitpid", nullptr},
    {"sigwait", nullptr},
    {"sigtimedwait", nullptr},
    {"sigwaitinfo", nullptr},
    {"read", nullptr},
    {"readv", nullptr},
    {"recv", nullptr},
    {"recvfrom", nullptr},
    {"recvmsg", nullptr},
    {"accept", nullptr},
    {"accept4", nullptr},
    {"connect", nullptr},
    {"__read_chk", nullptr},
    {"__recv_chk", nullptr},
    {"__recvfrom_chk", nullptr},
    {"__poll_chk", nullptr},
    {"__ppoll_chk", nullptr},
};
static_assert(sizeof symbols / sizeof symbols[0] == static_cast<unsigned>(real_fn::count));

// thrd_* result -> errno value.
int from_thrd(int r) noexcept {
    switch (r) {
        case thrd_success: return 0;
        case thrd_busy: return EBUSY;
        case thrd_timedout: return ETIMEDOUT;
        case thrd_nomem: return ENOMEM;
        default: return EINVAL;
    }
}

mtx_t* as_mtx(pthread_mutex_t* m) noexcept { return reinterpret_cast<mtx_t*>(m); }
cnd_t* as_cnd(pthread_cond_t* c) noexcept { return reinterpret_cast<cnd_t*>(c); }

int nested_mutex_lock(pthread_mutex_t* m) noexcept { return from_thrd(mtx_lock(as_mtx(m))); }
int nested_mutex_trylock(pthread_mutex_t* m) noexcept { return from_thrd(mtx_trylock(as_mtx(m))); }
int nested_mutex_unlock(pthread_mutex_t* m) noexcept { return from_thrd(mtx_unlock(as_mtx(m))); }
int nested_mutex_timedlock(pthread_mutex_t* m, const struct timespec* abs) noexcept {
    return from_thrd(mtx_timedlock(as_mtx(m), abs));
}
int nested_cond_signal(pthread_cond_t* c) noexcept { return from_thrd(cnd_signal(as_cnd(c))); }
int nested_cond_broadcast(pthread_cond_t* c) noexcept { return from_thrd(cnd_broadcast(as_cnd(c))); }
int nested_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) noexcept {
    return from_thrd(cnd_wait(as_cnd(c), as_mtx(m)));
}
int nested_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* abs) noexcept {
    return from_thrd(cnd_timedwait(as_cnd(c), as_mtx(m), abs));
}

void* nested_stand_in(real_fn f) noexcept {
    switch (f) {
        case real_fn::mutex_lock: return reinterpret_cast<void*>(&nested_mutex_lock);
        case real_fn::mutex_trylock: return reinterpret_cast<void*>(&nested_mutex_trylock);
        case real_fn::mutex_unlock: return reinterpret_cast<void*>(&nested_mutex_unlock);
        case real_fn::mutex_timedlock: return reinterpret_cast<void*>(&nested_mutex_timedlock);
        case real_fn::cond_signal: return reinterpret_cast<void*>(&nested_cond_signal);
        case real_fn::cond_broadcast: return reinterpret_cast<void*>(&nested_cond_broadcast);
        case real_fn::cond_wait: return reinterpret_cast<void*>(&nested_cond_wait);
        case real_fn::cond_timedwait: return reinterpret_cast<void*>(&nested_cond_timedwait);
        default: return nullptr;
    }
}


thread_local bool t_looking_up __attribute__((tls_model("initial-exec"))) = false;

}  // namespace

constinit std::atomic<void*> g_real_addresses[static_cast<unsigned>(real_fn::count)] = {};

void* resolve_real(real_fn f) noexcept {
    auto i = static_cast<unsigned>(f);
    const symbol& s = symbols[i];
    if (t_looking_up) {
        if (void* stand_in = nested_stand_in(f)) return stand_in;
        fatal("%s was needed while looking up glibc's functions (dlsym locked); run without LD_PRELOAD",
              s.name);
    }
    t_looking_up = true;
    void* p = s.version != nullptr ? dlvsym(RTLD_NEXT, s.name, s.version) : dlsym(RTLD_NEXT, s.name);
    t_looking_up = false;
    if (p == nullptr) {
        fatal("glibc has no %s; this library cannot forward to it", s.name);
    }
    g_real_addresses[i].store(p, std::memory_order_release);  // pairs with real()
    return p;
}

}  // namespace spindle::preload
