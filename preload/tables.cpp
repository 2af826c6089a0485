// preload/tables.cpp — one dispatch table per SPINDLE_LOCK value and
// statistics setting, and the passthrough table.
#include <cstring>
#include <type_traits>

#include "algorithms.hpp"
#include "cond.hpp"
#include "internal.hpp"
#include "mutex.hpp"
#include "rwlock.hpp"
#include "spin.hpp"

namespace spindle::preload {

namespace {

template <class Algo, bool Stats>
struct impl {
    using M = mutex_impl<typename Algo::lock, Stats>;
    // The TCLocks' rwlock is tclock_shared (rwlock.hpp).
    using R = std::conditional_t<delegates<typename Algo::lock>, rwlock_tclock_impl<Stats>,
                                 rwlock_impl<typename Algo::lock, Stats>>;
    using S = spin_impl<typename Algo::spin, Stats>;
    using C = cond_impl<M>;

    static constexpr api table = {
        &M::init,         &M::destroy,        &M::lock,           &M::trylock,
        &M::timedlock,    &M::clocklock,      &M::unlock,

        &R::init,         &R::destroy,        &R::rdlock,         &R::tryrdlock,
        &R::timedrdlock,  &R::clockrdlock,    &R::wrlock,         &R::trywrlock,
        &R::timedwrlock,  &R::clockwrlock,    &R::unlock,

        &S::init,         &S::destroy,        &S::lock,           &S::trylock,
        &S::unlock,

        &cond_init,       &cond_destroy,      &cond_signal,       &cond_broadcast,
        &C::wait_forever, &C::timedwait,      &C::clockwait,

        &old_cond_init,   &old_cond_destroy,  &old_cond_signal,   &old_cond_broadcast,
        &old_cond_wait,   &old_cond_timedwait,

        Algo::before_fork, &R::child_unlock,   &S::child_unlock,
        Algo::name,       Stats,              true,
        delegates<typename Algo::lock>,
    };
};

// Forwards to glibc's function F.
template <real_fn F, class Fn>
struct fwd;
template <real_fn F, class R, class... A>
struct fwd<F, R(A...)> {
    static R call(A... a) noexcept { return real<F, R(A...)>()(a...); }
};

using mutex_fn = int(pthread_mutex_t*);
using rwlock_fn = int(pthread_rwlock_t*);
using rwlock_timed_fn = int(pthread_rwlock_t*, const struct timespec*);
using rwlock_clock_fn = int(pthread_rwlock_t*, clockid_t, const struct timespec*);
using spin_fn = int(pthread_spinlock_t*);
using cond_fn = int(pthread_cond_t*);
using cond_init_fn = int(pthread_cond_t*, const pthread_condattr_t*);
using cond_wait_fn = int(pthread_cond_t*, pthread_mutex_t*);
using cond_timed_fn = int(pthread_cond_t*, pthread_mutex_t*, const struct timespec*);

struct entry {
    const char* name;
    const api* plain;
    const api* measuring;
};

#define SPINDLE_PRELOAD_ENTRY(algo) {algo::name, &impl<algo, false>::table, &impl<algo, true>::table},
constexpr entry entries[] = {SPINDLE_PRELOAD_ALGORITHMS(SPINDLE_PRELOAD_ENTRY)};
#undef SPINDLE_PRELOAD_ENTRY

constexpr const char passthrough_name[] = "pthread";

}  // namespace

const api passthrough_table = {
    &fwd<real_fn::mutex_init, int(pthread_mutex_t*, const pthread_mutexattr_t*)>::call,
    &fwd<real_fn::mutex_destroy, mutex_fn>::call,
    &fwd<real_fn::mutex_lock, mutex_fn>::call,
    &fwd<real_fn::mutex_trylock, mutex_fn>::call,
    &fwd<real_fn::mutex_timedlock, int(pthread_mutex_t*, const struct timespec*)>::call,
    &fwd<real_fn::mutex_clocklock, int(pthread_mutex_t*, clockid_t, const struct timespec*)>::call,
    &fwd<real_fn::mutex_unlock, mutex_fn>::call,

    &fwd<real_fn::rwlock_init, int(pthread_rwlock_t*, const pthread_rwlockattr_t*)>::call,
    &fwd<real_fn::rwlock_destroy, rwlock_fn>::call,
    &fwd<real_fn::rwlock_rdlock, rwlock_fn>::call,
    &fwd<real_fn::rwlock_tryrdlock, rwlock_fn>::call,
    &fwd<real_fn::rwlock_timedrdlock, rwlock_timed_fn>::call,
    &fwd<real_fn::rwlock_clockrdlock, rwlock_clock_fn>::call,
    &fwd<real_fn::rwlock_wrlock, rwlock_fn>::call,
    &fwd<real_fn::rwlock_trywrlock, rwlock_fn>::call,
    &fwd<real_fn::rwlock_timedwrlock, rwlock_timed_fn>::call,
    &fwd<real_fn::rwlock_clockwrlock, rwlock_clock_fn>::call,
    &fwd<real_fn::rwlock_unlock, rwlock_fn>::call,

    &fwd<real_fn::spin_init, int(pthread_spinlock_t*, int)>::call,
    &fwd<real_fn::spin_destroy, spin_fn>::call,
    &fwd<real_fn::spin_lock, spin_fn>::call,
    &fwd<real_fn::spin_trylock, spin_fn>::call,
    &fwd<real_fn::spin_unlock, spin_fn>::call,

    &fwd<real_fn::cond_init, cond_init_fn>::call,
    &fwd<real_fn::cond_destroy, cond_fn>::call,
    &fwd<real_fn::cond_signal, cond_fn>::call,
    &fwd<real_fn::cond_broadcast, cond_fn>::call,
    &fwd<real_fn::cond_wait, cond_wait_fn>::call,
    &fwd<real_fn::cond_timedwait, cond_timed_fn>::call,
    &fwd<real_fn::cond_clockwait,
         int(pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*)>::call,

    &fwd<real_fn::old_cond_init, cond_init_fn>::call,
    &fwd<real_fn::old_cond_destroy, cond_fn>::call,
    &fwd<real_fn::old_cond_signal, cond_fn>::call,
    &fwd<real_fn::old_cond_broadcast, cond_fn>::call,
    &fwd<real_fn::old_cond_wait, cond_wait_fn>::call,
    &fwd<real_fn::old_cond_timedwait, cond_timed_fn>::call,

    nullptr,
    nullptr,
    nullptr,
    passthrough_name,
    false,
    false,
    false,
};

const api* find_table(const char* name, std::size_t len, bool stats) noexcept {
    if (len == sizeof passthrough_name - 1 && std::memcmp(name, passthrough_name, len) == 0)
        return &passthrough_table;
    for (const auto& a : algorithm_aliases)
        if (std::strlen(a[0]) == len && std::memcmp(a[0], name, len) == 0) {
            name = a[1];
            len = std::strlen(name);
        }
    for (const entry& e : entries)
        if (std::strlen(e.name) == len && std::memcmp(e.name, name, len) == 0)
            return stats ? e.measuring : e.plain;
    return nullptr;
}

void list_algorithms(char* buf, std::size_t size) noexcept {
    std::size_t used = 0;
    auto add = [&](const char* s) noexcept {
        std::size_t n = std::strlen(s);
        if (used != 0 && used + 2 < size) {
            std::memcpy(buf + used, ", ", 2);
            used += 2;
        }
        if (used + n < size) {
            std::memcpy(buf + used, s, n);
            used += n;
        }
    };
    for (const entry& e : entries) add(e.name);
    add(passthrough_name);
    // The aliases on a line of their own: scripts read the first line.
    for (const auto& a : algorithm_aliases) {
        for (const char* part : {"\n(", a[0], " is also accepted, for ", a[1], ")"}) {
            const std::size_t n = std::strlen(part);
            if (used + n < size) {
                std::memcpy(buf + used, part, n);
                used += n;
            }
        }
    }
    buf[used < size ? used : size - 1] = '\0';
}

}  // namespace spindle::preload
