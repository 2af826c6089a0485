// preload/spin.hpp — the locks inside a pthread_spinlock_t.
//
// pthread_spinlock_t is one int, 4 bytes: a Hemlock tail pointer or an MCS
// or CLH tail does not fit, nor does spindle::ticket_lock (two words). So a
// spinlock uses a lock that fits in 32 bits (algorithms.hpp): for the
// spinning FIFO families ticket_spin below, the ticket lock in one word; for
// tas and tas_park spindle::tas_lock; for everything else (ttas, the park
// families, the TCLocks) spindle::ttas_lock. All keep 0 as "unlocked" and
// work between processes of ours (no addresses inside; ticket_spin marks a
// process-shared lock, which a fork child must not reset).
//
// glibc's encoding is the other way round: on x86-64 its pthread_spin_init
// writes 1, and 1 is unlocked, 0 locked (lock decrements, unlock stores 1).
// Nothing here reads a word glibc wrote: every pthread_spin_init of a
// preloaded process is ours (and the fork child's reset writes our 0). But a
// spinlock in memory shared with a process that is not preloaded is
// incompatible (preload/README.md, "Limits"): ours would see glibc's unlocked 1
// as held, glibc ours as locked.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include <spindle/locks/ticket_lock.hpp>

#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

// The spinning FIFO families' spinlock: the one-word ticket lock
// (spindle::compact_ticket_lock's algorithm, locks/ticket_lock.hpp), 15-bit
// tickets, up to 32767 waiters. Its mark bit says process-shared
// (pthread_spin_init with PTHREAD_PROCESS_SHARED; set once before the lock
// is shared, never changed): a fork child resets a lock without it
// (child_unlock) but hands a process-shared one over, since its waiters may
// be live threads of other processes. Its waiters give the CPU up every 128
// steps, as every other short wait of this library does (wait.hpp,
// spin_step), not every 1024 as spin_wait's.
struct spinlock_wait {
    static constexpr bool parks = false;
    static constexpr unsigned yield_every = 128;
};
using ticket_spin = spindle::basic_ticket_lock<spinlock_wait, spindle::detail::tsan_lock_annotations, std::uint16_t>;

// The pthread_spin_* entry points over S, which lives in the int.
template <class S, bool Stats>
struct spin_impl {
    static_assert(sizeof(S) <= sizeof(pthread_spinlock_t) && alignof(S) <= alignof(pthread_spinlock_t),
                  "a spinlock's lock must fit in an int");

    static void* object(pthread_spinlock_t* l) noexcept { return const_cast<int*>(l); }
    static S& lock_of(pthread_spinlock_t* l) noexcept { return *at<S>(object(l), 0); }

    static int init(pthread_spinlock_t* l, int pshared) noexcept {
        if constexpr (std::is_same_v<S, ticket_spin>) {
            lock_of(l).set_mark(pshared != PTHREAD_PROCESS_PRIVATE);
        } else {
            // 0 is unlocked; published by whatever shares l.
            word<std::uint32_t>(object(l), 0).store(0, std::memory_order_relaxed);
        }
        return 0;
    }
    static int destroy(pthread_spinlock_t*) noexcept { return 0; }
    static int lock(pthread_spinlock_t* l) noexcept SPINDLE_NO_TSA {
        S& s = lock_of(l);
        if constexpr (!Stats) {
            s.lock();
        } else if (s.try_lock()) {
            stats_record(object(l), object_kind::spin, false, 0);
        } else {
            std::uint64_t t0 = now_ns();
            s.lock();
            stats_record(object(l), object_kind::spin, true, now_ns() - t0);
        }
        return 0;
    }
    static int trylock(pthread_spinlock_t* l) noexcept SPINDLE_NO_TSA {
        if (!lock_of(l).try_lock()) return EBUSY;
        if constexpr (Stats) stats_record(object(l), object_kind::spin, false, 0);
        return 0;
    }
    static int unlock(pthread_spinlock_t* l) noexcept SPINDLE_NO_TSA {
        lock_of(l).unlock();
        return 0;
    }
    // pthread_spin_unlock by the holder in a single-threaded fork child
    // (exports.cpp): not handed to a waiter that did not survive the fork.
    // tas_lock and ttas_lock have no queue: 0, their unlock, is the reset.
    static int child_unlock(pthread_spinlock_t* l) noexcept SPINDLE_NO_TSA {
        if constexpr (std::is_same_v<S, ticket_spin>) {
            // Private: every waiter is a thread that did not survive the
            // fork, so the lock is reset to free and empty. Process-shared:
            // an ordinary unlock.
            S& s = lock_of(l);
            if (s.marked())
                s.unlock();
            else
                s.reset();
        } else {
            // release pairs with the next locker's acquire, as any unlock's.
            word<std::uint32_t>(object(l), 0).store(0, std::memory_order_release);
        }
        return 0;
    }
};

}  // namespace spindle::preload
