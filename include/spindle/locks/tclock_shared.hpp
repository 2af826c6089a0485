// spindle/locks/tclock_shared.hpp — TCLock-RW: a phase-based reader-writer
// lock whose writers are combined (Gupta et al., OSDI '23, §3.5).
//
//     spindle::tclock_shared rw;
//     { std::shared_lock r(rw); ... }    // readers run in parallel, on their own threads
//     { std::lock_guard w(rw); ... }     // writers are queued and combined like tclock
//
// Readers count themselves in one word and never delegate: a reader's
// section always runs on its own thread. Writers take the word's writer byte;
// contended writers queue (MCS, on their ephemeral stacks, as in tclock.hpp)
// and the queue head becomes a combiner that runs the queued writers'
// sections on its thread. Phases alternate: a writer phase (a combined batch)
// ends, the readers that arrived meanwhile run together, then the next
// writer phase starts. Everything tclock.hpp says about what a delegated
// section observes, nesting, out-of-order release and tclock_may_block()
// applies to writer sections.
//
// Lock word (detail/tclock_word.hpp), `state`:
//
//     [31..16 readers][9 rsleep][8 ww][7..0 writer: 1 wp | 2 combining | +4 ooo]
//
//     lock_shared      readers += 1; if (old & 0xffff) readers -= 1 and slow    acquire
//     ..._reentrant    readers += 1; if (old & 0xff) readers -= 1 and slow      acquire
//     unlock_shared    readers -= 1                                             release
//     lock (fast)      0 -> wp                                                  CAS, acquire
//     unlock           writer byte wp -> 0 (wake readers if rsleep)             release
//     queue head       takes `aux` (a small futex mutex shared with slow
//                      readers), 0 -> wp, or sets ww and waits for
//                      ww -> wp once the readers left; releases `aux`
//
// A reader that found a writer takes `aux`, counts itself, and waits (spin,
// then sleep on `state` with rsleep) for the writer byte to clear: holding
// `aux` keeps the next writer phase from starting, so a reader waits for at
// most one writer phase. Readers do not starve writers either: a queue head
// with ww set turns new readers away (the _reentrant readers excepted: they
// wait only while a writer is inside). Size 16 bytes; all-zero is unlocked.
//
// Contract: lock/try_lock/unlock as tclock; lock_shared/try_lock_shared/
// unlock_shared as std::shared_mutex; lock_shared_reentrant/
// try_lock_shared_reentrant for readers that may already hold the lock
// shared. unlock of a lock not held aborts with a message naming the lock
// when SPINDLE_DEBUG_CHECKS is on. Undefined: taking the lock shared while
// holding it (either way) in the same code, except with the _reentrant
// readers while holding it shared; more than 65535 concurrent readers;
// calling it from a signal handler.
//
// Limit: the writer queue head waits for readers by spinning and yielding
// (it does not sleep); writer waiters and readers sleep.
#pragma once

#include <atomic>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/locks/detail/tclock_word.hpp>
#include <spindle/locks/tclock.hpp>

namespace spindle {

class SPINDLE_CAPABILITY("mutex") tclock_shared {
public:
    constexpr tclock_shared() noexcept = default;
    tclock_shared(const tclock_shared&) = delete;
    tclock_shared& operator=(const tclock_shared&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        std::uint32_t expected = 0;
        // (state): 0 -> wp. Acquire pairs with the release of the last
        // reader's or writer's unlock.
        if (!w_.state.compare_exchange_strong(expected, detail::rw_wp, std::memory_order_acquire,
                                              std::memory_order_relaxed)) [[unlikely]]
            detail::tc_lock_slow(&w_, detail::tc_kind::shared);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        std::uint32_t expected = 0;
        return w_.state.compare_exchange_strong(expected, detail::rw_wp, std::memory_order_acquire,
                                                std::memory_order_relaxed);
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        // Relaxed: the writer byte is ours; readers only add and remove
        // themselves (in higher bits).
        const std::uint32_t s = w_.state.load(std::memory_order_relaxed);
        if ((s & detail::rw_writer_mask) == detail::rw_wp) [[likely]] {
            // writer byte: wp -> 0, rsleep -> 0. Release pairs with readers'
            // acquire of the word and the next writer's CAS.
            const std::uint32_t old = w_.state.fetch_and(~(detail::rw_writer_mask | detail::rw_rsleep),
                                                         std::memory_order_release);
            if (old & detail::rw_rsleep) [[unlikely]] detail::tc_wake_sleepers(&w_, detail::tc_kind::shared);
            return;
        }
        detail::tc_unlock_slow(&w_, detail::tc_kind::shared);
    }

    void lock_shared() noexcept SPINDLE_ACQUIRE_SHARED() {
        // readers += 1. Acquire pairs with a writer's release of the writer byte.
        const std::uint32_t old = w_.state.fetch_add(detail::rw_reader, std::memory_order_acquire);
        if ((old & detail::rw_block_readers) == 0) [[likely]] return;
        // Relaxed: we never entered; the slow path synchronizes again.
        w_.state.fetch_sub(detail::rw_reader, std::memory_order_relaxed);
        detail::tc_lock_shared_slow(&w_);
    }

    [[nodiscard]] bool try_lock_shared() noexcept SPINDLE_TRY_ACQUIRE_SHARED(true) {
        const std::uint32_t old = w_.state.fetch_add(detail::rw_reader, std::memory_order_acquire);
        if ((old & detail::rw_block_readers) == 0) return true;
        w_.state.fetch_sub(detail::rw_reader, std::memory_order_relaxed);
        return false;
    }

    // For a reader that may already hold the lock shared (a recursive read
    // lock, which POSIX allows for pthread_rwlock_t): enters whenever no
    // writer holds the lock, also while a queued writer waits for the readers
    // to leave (the plain lock_shared waits behind that writer, which would
    // never come if the reader itself is one of those it waits for). Writers
    // may starve under a steady stream of these readers, as under glibc's
    // default reader preference. Safe because a writer holds the lock only
    // once no reader is inside: a reader that holds it never sees a writer.
    void lock_shared_reentrant() noexcept SPINDLE_ACQUIRE_SHARED() {
        // readers += 1. Acquire as lock_shared.
        const std::uint32_t old = w_.state.fetch_add(detail::rw_reader, std::memory_order_acquire);
        if ((old & detail::rw_writer_mask) == 0) [[likely]] return;
        // Relaxed: we never entered; the slow path synchronizes again. It
        // waits for this writer phase to end; we hold no read lock (a
        // writer is inside), so that wait ends.
        w_.state.fetch_sub(detail::rw_reader, std::memory_order_relaxed);
        detail::tc_lock_shared_slow(&w_);
    }

    [[nodiscard]] bool try_lock_shared_reentrant() noexcept SPINDLE_TRY_ACQUIRE_SHARED(true) {
        const std::uint32_t old = w_.state.fetch_add(detail::rw_reader, std::memory_order_acquire);
        if ((old & detail::rw_writer_mask) == 0) return true;
        w_.state.fetch_sub(detail::rw_reader, std::memory_order_relaxed);
        return false;
    }

    // For the holder: true if it holds the lock exclusively, false if shared
    // (a writer is inside only when no reader is, so the answer cannot change
    // under a holder). Relaxed: a holder reads what it or its entry made true.
    [[nodiscard]] bool held_exclusive() const noexcept {
        return (w_.state.load(std::memory_order_relaxed) & detail::rw_writer_mask) != 0;
    }

    // Readers counted now (inside, or entering and about to leave again).
    // Relaxed: a snapshot, for limits and diagnostics.
    [[nodiscard]] std::uint32_t readers() const noexcept {
        return w_.state.load(std::memory_order_relaxed) / detail::rw_reader;
    }

    void unlock_shared() noexcept SPINDLE_RELEASE_SHARED() {
        // readers -= 1. Release pairs with the writer head's acquire CAS
        // ww -> wp (or the fast 0 -> wp).
        const std::uint32_t old = w_.state.fetch_sub(detail::rw_reader, std::memory_order_release);
#if SPINDLE_DEBUG_CHECKS
        if (old < detail::rw_reader) [[unlikely]]
            detail::tc_misuse(this, "tclock_shared", "unlock_shared of a lock no reader holds");
#else
        (void)old;
#endif
    }

private:
    detail::tc_word w_;
};
static_assert(sizeof(tclock_shared) == 16);

}  // namespace spindle
