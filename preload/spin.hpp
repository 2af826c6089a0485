// preload/spin.hpp — the locks inside a pthread_spinlock_t.
//
// pthread_spinlock_t is one int, 4 bytes: a Hemlock tail pointer or an MCS
// or CLH tail (8 bytes and more) does not fit. So the spinlocks use the lock
// of the chosen family that fits in 32 bits:
//
//     SPINDLE_LOCK          pthread_spin_*
//     tas*                  tas_spin: one word, 0 free / 1 held; exchange
//     ttas*                 ttas_spin: the same, reads until free first
//     everything else       ticket_spin: FIFO, like the queue locks
//     pthread               glibc's
//
// All three keep 0 as "unlocked" (glibc's pthread_spin_init writes 0 too) and
// work between processes (no addresses inside), so process-shared spinlocks
// need nothing special. Waiters pause, and give the CPU up every 128 pauses
// (spin_step): a pure spin on an oversubscribed machine burns the time slice
// the holder — or, for ticket_spin, the next ticket's owner — needs.
#pragma once

#include <atomic>
#include <cstdint>

#include "internal.hpp"
#include "layout.hpp"
#include "wait.hpp"

namespace spindle::preload {

struct tas_spin {
    // word: 0 free | 1 held
    static void lock(std::atomic_ref<std::uint32_t> w) noexcept {
        unsigned spins = 0;
        // acquire pairs with the release store in unlock().
        while (w.exchange(1, std::memory_order_acquire) != 0) spin_step(spins);
    }
    static bool try_lock(std::atomic_ref<std::uint32_t> w) noexcept {
        return w.exchange(1, std::memory_order_acquire) == 0;  // acquire: as in lock()
    }
    static void unlock(std::atomic_ref<std::uint32_t> w) noexcept {
        w.store(0, std::memory_order_release);  // (1) -> (0); pairs with lock()'s acquire
    }
};

struct ttas_spin {
    static void lock(std::atomic_ref<std::uint32_t> w) noexcept {
        unsigned spins = 0;
        for (;;) {
            // relaxed: only a hint that the exchange may succeed; the
            // exchange's acquire pairs with unlock()'s release.
            if (w.load(std::memory_order_relaxed) == 0 &&
                w.exchange(1, std::memory_order_acquire) == 0)
                return;
            spin_step(spins);
        }
    }
    static bool try_lock(std::atomic_ref<std::uint32_t> w) noexcept {
        return w.load(std::memory_order_relaxed) == 0 &&
               w.exchange(1, std::memory_order_acquire) == 0;  // as in lock()
    }
    static void unlock(std::atomic_ref<std::uint32_t> w) noexcept {
        w.store(0, std::memory_order_release);  // pairs with lock()'s acquire
    }
};

// Ticket lock in one 32-bit word:
//
//     31            16 15             0
//     +---------------+---------------+
//     |     next      |    serving    |
//     +---------------+---------------+
//
// lock takes ticket `next` (fetch_add of 1 << 16; the carry out of bit 31 is
// lost, so next wraps at 2^16) and waits until serving == its ticket. unlock
// adds 1 to serving without carrying into next. Up to 65535 waiters.
// Invariant: (next - serving) mod 2^16 == holder + waiters.
struct ticket_spin {
    static constexpr std::uint32_t next_one = 1u << 16;
    static constexpr std::uint32_t serving_mask = 0xffff;

    static void lock(std::atomic_ref<std::uint32_t> w) noexcept {
        // acquire: if the ticket is served at once, pairs with the release
        // in the previous holder's unlock().
        std::uint32_t s = w.fetch_add(next_one, std::memory_order_acquire);  // (n, s) -> (n+1, s)
        std::uint32_t ticket = s >> 16;
        unsigned spins = 0;
        // acquire pairs with unlock()'s release.
        while ((s & serving_mask) != ticket) {
            spin_step(spins);
            s = w.load(std::memory_order_acquire);
        }
    }
    static bool try_lock(std::atomic_ref<std::uint32_t> w) noexcept {
        std::uint32_t s = w.load(std::memory_order_relaxed);
        if ((s >> 16) != (s & serving_mask)) return false;  // held
        // acquire pairs with unlock()'s release. (n, n) -> (n+1, n)
        return w.compare_exchange_strong(s, s + next_one, std::memory_order_acquire,
                                         std::memory_order_relaxed);
    }
    static void unlock(std::atomic_ref<std::uint32_t> w) noexcept {
        // Only the holder changes `serving`; lockers change `next`
        // concurrently, hence a CAS loop instead of a 16-bit store.
        std::uint32_t s = w.load(std::memory_order_relaxed);
        // release pairs with the acquire of the next ticket's owner.
        // (n, s) -> (n, s+1 mod 2^16)
        while (!w.compare_exchange_weak(s, (s & ~serving_mask) | ((s + 1) & serving_mask),
                                        std::memory_order_release, std::memory_order_relaxed)) {
        }
    }
};

// The pthread_spin_* entry points over one of the three.
template <class S, bool Stats>
struct spin_impl {
    static std::atomic_ref<std::uint32_t> word_of(pthread_spinlock_t* l) noexcept {
        return word<std::uint32_t>(const_cast<int*>(l), 0);
    }
    static int init(pthread_spinlock_t* l, int /*pshared: nothing to do*/) noexcept {
        word_of(l).store(0, std::memory_order_relaxed);  // published by whatever shares l
        return 0;
    }
    static int destroy(pthread_spinlock_t*) noexcept { return 0; }
    static int lock(pthread_spinlock_t* l) noexcept {
        if constexpr (!Stats) {
            S::lock(word_of(l));
        } else if (S::try_lock(word_of(l))) {
            stats_record(const_cast<int*>(l), object_kind::spin, false, 0);
        } else {
            std::uint64_t t0 = now_ns();
            S::lock(word_of(l));
            stats_record(const_cast<int*>(l), object_kind::spin, true, now_ns() - t0);
        }
        return 0;
    }
    static int trylock(pthread_spinlock_t* l) noexcept {
        if (!S::try_lock(word_of(l))) return EBUSY;
        if constexpr (Stats) stats_record(const_cast<int*>(l), object_kind::spin, false, 0);
        return 0;
    }
    static int unlock(pthread_spinlock_t* l) noexcept {
        S::unlock(word_of(l));
        return 0;
    }
};

}  // namespace spindle::preload
