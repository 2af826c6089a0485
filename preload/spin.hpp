// preload/spin.hpp — the locks inside a pthread_spinlock_t.
//
// pthread_spinlock_t is one int, 4 bytes: a Hemlock tail pointer or an MCS
// or CLH tail does not fit, nor does spindle::ticket_lock (two words). So a
// spinlock uses a lock that fits in 32 bits (algorithms.hpp): for the
// spinning FIFO families ticket_spin below, a ticket lock in one word; for
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

#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

// Ticket lock in one 32-bit word:
//
//     31          17 16 15 14           0
//     +-------------+--+--+--------------+
//     |    next     |P | 0|   serving    |
//     +-------------+--+--+--------------+
//
// lock takes ticket `next` (fetch_add of 1 << 17; the carry out of bit 31 is
// lost, so next wraps at 2^15) and waits until serving == its ticket. unlock
// adds 1 to serving without carrying out of bit 14. Up to 32767 waiters.
// Invariant: (next - serving) mod 2^15 == holder + waiters.
//
// P: process-shared (pthread_spin_init with PTHREAD_PROCESS_SHARED); set
// once before the lock is shared, never changed. A fork child resets a lock
// without it (child_reset) but hands a process-shared one over: its
// waiters may be live threads of other processes.
struct ticket_spin {
    static constexpr std::uint32_t next_one = 1u << 17;
    static constexpr std::uint32_t shared_bit = 1u << 16;
    static constexpr std::uint32_t serving_mask = 0x7fff;

    // The whole word; published by whatever shares the lock.
    void init(bool process_shared) noexcept {
        word_.store(process_shared ? shared_bit : 0, std::memory_order_relaxed);
    }

    void lock() noexcept {
        auto& w = word_;
        // acquire: if the ticket is served at once, pairs with the release
        // in the previous holder's unlock().
        std::uint32_t s = w.fetch_add(next_one, std::memory_order_acquire);  // (n, s) -> (n+1, s)
        std::uint32_t ticket = s >> 17;
        unsigned spins = 0;
        // acquire pairs with unlock()'s release.
        while ((s & serving_mask) != ticket) {
            spin_step(spins);
            s = w.load(std::memory_order_acquire);
        }
    }
    [[nodiscard]] bool try_lock() noexcept {
        auto& w = word_;
        // relaxed: only decides whether to try; the CAS is the acquire.
        std::uint32_t s = w.load(std::memory_order_relaxed);
        if ((s >> 17) != (s & serving_mask)) return false;  // held
        // acquire pairs with unlock()'s release. (n, n) -> (n+1, n)
        return w.compare_exchange_strong(s, s + next_one, std::memory_order_acquire,
                                         std::memory_order_relaxed);
    }
    void unlock() noexcept {
        auto& w = word_;
        // Only the holder changes `serving`; lockers change `next`
        // concurrently, hence a CAS loop instead of a store of the low half.
        // relaxed: the CAS re-reads what it replaces.
        std::uint32_t s = w.load(std::memory_order_relaxed);
        // release pairs with the acquire of the next ticket's owner.
        // (n, s) -> (n, s+1 mod 2^15); P kept
        while (!w.compare_exchange_weak(s, (s & ~serving_mask) | ((s + 1) & serving_mask),
                                        std::memory_order_release, std::memory_order_relaxed)) {
        }
    }
    // The holder's unlock in a single-threaded fork child (exports.cpp).
    // Private: every waiter is a thread that did not survive the fork, so
    // the lock is reset to free and empty instead of handed to the next
    // ticket. Process-shared: an ordinary unlock.
    void child_reset() noexcept {
        // relaxed: P was set before the lock was shared.
        if (word_.load(std::memory_order_relaxed) & shared_bit) {
            unlock();
            return;
        }
        // release pairs with the next locker's acquire, as unlock()'s.
        word_.store(0, std::memory_order_release);
    }

private:
    std::atomic<std::uint32_t> word_{0};
};

// The pthread_spin_* entry points over S, which lives in the int.
template <class S, bool Stats>
struct spin_impl {
    static_assert(sizeof(S) <= sizeof(pthread_spinlock_t) && alignof(S) <= alignof(pthread_spinlock_t),
                  "a spinlock's lock must fit in an int");

    static void* object(pthread_spinlock_t* l) noexcept { return const_cast<int*>(l); }
    static S& lock_of(pthread_spinlock_t* l) noexcept { return *at<S>(object(l), 0); }

    static int init(pthread_spinlock_t* l, int pshared) noexcept {
        if constexpr (requires(S& s) { s.child_reset(); }) {
            lock_of(l).init(pshared != PTHREAD_PROCESS_PRIVATE);
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
        if constexpr (requires(S& s) { s.child_reset(); }) {
            lock_of(l).child_reset();
        } else {
            // release pairs with the next locker's acquire, as any unlock's.
            word<std::uint32_t>(object(l), 0).store(0, std::memory_order_release);
        }
        return 0;
    }
};

}  // namespace spindle::preload
