// preload/layout.hpp — where our words live inside glibc's pthread objects.
//
// The objects are the caller's memory, often zero-filled by a static
// initializer and never constructed by C++ code. We treat the bytes at a
// fixed offset as our lock (all-zero bytes are an unlocked lock by the
// locks' contract) and access our other words through std::atomic_ref.
// The offsets are glibc's x86-64 ABI; every one is asserted below.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

namespace spindle::preload {

#if !defined(__x86_64__) || !defined(__GLIBC__)
#error "libspindle_preload.so knows glibc's x86-64 object layouts only"
#endif

template <class T>
inline T* at(void* object, std::size_t offset) noexcept {
    return std::launder(reinterpret_cast<T*>(static_cast<unsigned char*>(object) + offset));
}

template <class T>
inline std::atomic_ref<T> word(void* object, std::size_t offset) noexcept {
    return std::atomic_ref<T>(*at<T>(object, offset));
}

// Room for a lock: 16 bytes, 8-aligned (the locks' contract: sizeof <= 16,
// alignof <= 8, all-zero bytes == unlocked).
inline constexpr std::size_t lock_room = 16;

template <class L>
inline constexpr bool fits_lock_room = sizeof(L) <= lock_room && alignof(L) <= 8;

// Unlock in a single-threaded fork child: no live thread can be queued, so
// write the all-zero unlocked state instead of handing over (the lock's
// successor may be a thread that did not survive the fork). A queue node
// the lock held is not returned to its free list (one node per such lock).
inline void zero_lock_room(void* object, std::size_t offset) noexcept {
    std::memset(static_cast<unsigned char*>(object) + offset, 0, lock_room);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // no reordering around the plain stores
}

// ---------------------------------------------------------------------------
// pthread_mutex_t (40 bytes). See internal.hpp for the table of fields.

namespace mutex_layout {
inline constexpr std::size_t count = 4;   // __count: recursion depth (holder only)
inline constexpr std::size_t owner = 8;   // __owner: holder's thread_id(), kinded mutexes
inline constexpr std::size_t kind = 16;   // __kind: PTHREAD_MUTEX_* and glibc's flags
inline constexpr std::size_t lock = 24;   // __list: the lock

// glibc's __kind flag bits for the mutexes it keeps (glibc nptl/pthreadP.h;
// ABI since the robust and PI mutexes appeared). Any of them set: the mutex
// was initialized by glibc and every operation goes to glibc.
inline constexpr int robust_bit = 16;     // PTHREAD_MUTEX_ROBUST_NORMAL_NP
inline constexpr int prio_inherit_bit = 32;
inline constexpr int prio_protect_bit = 64;
inline constexpr int pshared_bit = 128;
inline constexpr int route_bits = robust_bit | prio_inherit_bit | prio_protect_bit | pshared_bit;
inline constexpr int type_mask = 3;       // NORMAL 0, RECURSIVE 1, ERRORCHECK 2, ADAPTIVE 3

static_assert(sizeof(pthread_mutex_t) == 40);
static_assert(alignof(pthread_mutex_t) == 8);
static_assert(offsetof(__pthread_mutex_s, __count) == count);
static_assert(offsetof(__pthread_mutex_s, __owner) == owner);
static_assert(offsetof(__pthread_mutex_s, __kind) == kind);
static_assert(offsetof(__pthread_mutex_s, __list) == lock);
static_assert(lock + lock_room == sizeof(pthread_mutex_t));
static_assert(PTHREAD_MUTEX_NORMAL == 0 && PTHREAD_MUTEX_RECURSIVE == 1 &&
              PTHREAD_MUTEX_ERRORCHECK == 2 && PTHREAD_MUTEX_ADAPTIVE_NP == 3);
}  // namespace mutex_layout

inline int mutex_kind(pthread_mutex_t* m) noexcept {
    // relaxed: written by pthread_mutex_init (or a static initializer)
    // before the mutex is shared; never written again.
    return word<int>(m, mutex_layout::kind).load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// pthread_rwlock_t (56 bytes).
//
//     0  __readers        spindle::basic_rw_lock<L> (rwlock.hpp): its state
//     4  __writers          word, then the writers' lock L (at most 16
//     8  __wrphase_futex    bytes, at offset 4 or 8); under the TCLocks the
//                           state word stays 0 and a tclock_shared sits at 8
//    24  __cur_writer     the writer's thread_id() while write-locked
//    28  __shared         glibc's process-shared mark: nonzero = glibc's
//    32  __rwelision ...  unused
//    48  __flags          PTHREAD_RWLOCK_PREFER_*; kept: the
//                         WRITER_NONRECURSIVE_INITIALIZER_NP macro sets it

namespace rwlock_layout {
inline constexpr std::size_t state = 0;   // the basic_rw_lock
inline constexpr std::size_t lock = 8;    // the TCLocks' tclock_shared
inline constexpr std::size_t owner = 24;
inline constexpr std::size_t shared = 28;
inline constexpr std::size_t flags = 48;

static_assert(sizeof(pthread_rwlock_t) == 56);
static_assert(alignof(pthread_rwlock_t) == 8);
static_assert(offsetof(__pthread_rwlock_arch_t, __readers) == state);
static_assert(offsetof(__pthread_rwlock_arch_t, __wrphase_futex) == lock);
static_assert(offsetof(__pthread_rwlock_arch_t, __cur_writer) == owner);
static_assert(lock + lock_room == owner);
static_assert(offsetof(__pthread_rwlock_arch_t, __shared) == shared);
static_assert(offsetof(__pthread_rwlock_arch_t, __flags) == flags);
}  // namespace rwlock_layout

// ---------------------------------------------------------------------------
// pthread_cond_t (48 bytes; PTHREAD_COND_INITIALIZER is all zero).
//
//     0  seq      bumped by every signal and broadcast; waiters sleep on it
//     4  waiters  threads between "registered" and "left" (cond.hpp)
//     8  flags    clock_monotonic | process_shared (pthread_cond_init)

namespace cond_layout {
inline constexpr std::size_t seq = 0;
inline constexpr std::size_t waiters = 4;
inline constexpr std::size_t flags = 8;
inline constexpr std::uint32_t clock_monotonic = 1;  // pthread_condattr_setclock(MONOTONIC)
inline constexpr std::uint32_t process_shared = 2;   // pthread_condattr_setpshared(SHARED)

static_assert(sizeof(pthread_cond_t) == 48);
static_assert(alignof(pthread_cond_t) == 8);
}  // namespace cond_layout

static_assert(sizeof(pthread_spinlock_t) == 4);

}  // namespace spindle::preload
