// spindle/sync/shared_mutex.hpp — a fair, task-aware reader-writer mutex
// with CES handoff.
//
//     spindle::shared_mutex m;                          // handoff::ces
//     spindle::shared_mutex d(spindle::handoff::dispatch);
//     { std::shared_lock g(m); ... read ... }
//     { std::unique_lock g(m); ... write ... }
//
// Callable from fibers (the fiber suspends; its worker runs other fibers) and
// from plain OS threads (the thread sleeps on a futex), mixed freely.
//
// Meets SharedTimedMutex: lock, try_lock, try_lock_for, try_lock_until,
// unlock, lock_shared, try_lock_shared, try_lock_shared_for,
// try_lock_shared_until, unlock_shared; plus lock(std::stop_token) and
// lock_shared(std::stop_token), which return false if stop was requested
// before the lock was handed over. As with spindle::mutex, a fiber's plain
// lock() does not observe its own stop token.
//
// Fairness: one FIFO of readers and writers, served in phases. A reader that
// arrives while anyone waits (in particular a writer) queues behind, so a
// stream of readers cannot starve a writer; a writer's unlock admits the
// readers queued right behind it, all at once, before the writer queued
// after them, so writers cannot starve readers either. The lock is handed
// over, never freed in between: once a caller has queued, nobody overtakes
// the waiters chosen by an unlock (try_lock and try_lock_shared fail while
// anyone waits). Uncontended lock_shared and unlock_shared are one RMW each
// (a CAS and a fetch_sub), lock and unlock one CAS each.
//
// Handoff (CES paper §5.2, "Reader-Writer Mutex"), with the policy given to
// the constructor as for spindle::mutex (runtime/handoff.hpp):
//
//   unlocker               | next in the queue      | who is woken, and how
//   -----------------------+------------------------+------------------------------
//   unlock_shared, not the | anything               | nobody; the caller continues
//     last reader          |                        |
//   unlock_shared, the     | a writer               | the writer, with the policy: ces
//     last reader          |                        | switches to it on this worker,
//                          |                        | the unlocker goes to the executor
//   unlock (writer)        | a writer               | that writer, with the policy
//   unlock (writer)        | k >= 1 readers, up to  | the oldest of them with the
//                          | the next writer        | policy (ces: inline, on this
//                          |                        | worker); the other k-1 are
//                          |                        | dispatched first (made ready on
//                          |                        | the worker each blocked on)
//   either                 | nobody                 | nobody; the lock becomes free
//
// So with ces at least one waiter per handoff suffers no queuing delay, and
// consecutive writers' critical sections run back to back on one worker. The
// policies differ only in how that one waiter is woken; the other readers of
// a batch are always dispatched (inline_resume would otherwise run a whole
// batch nested on one worker, one reader after another).
//
// Lock word (32 bits) and queue:
//
//      31                                  2    1    0
//     +-------------------------------------+----+----+
//     |          readers (30 bits)          | Q  | W  |
//     +-------------------------------------+----+----+
//
//     W        held exclusively (then readers == 0)
//     Q        waiters queued: closes every fast path, so that newcomers
//              queue behind them (FIFO phases)
//     readers  how many hold it shared
//     qlock_:  test-and-set spinlock guarding the queue and every change of
//              Q; taken only on contended paths
//     queue:   intrusive FIFO of readers and writers, each waiter's record on
//              its own stack
//
// Written (readers, Q, W). The fast paths, without qlock_:
//
//     lock_shared     (r, 0, 0) -> (r+1, 0, 0)   CAS; fails on Q or W
//     unlock_shared   (r, q, 0) -> (r-1, q, 0)   fetch_sub; (1, 1, 0): the
//                                                last reader with waiters
//                                                opens H (below) and goes
//                                                on to last reader slow
//     lock            (0, 0, 0) -> (0, 0, 1)     CAS
//     unlock          (0, 0, 1) -> (0, 0, 0)     CAS; fails on Q: unlock slow
//
// The slow paths, under qlock_:
//
//     lock slow       Q clear and compatible: take it as the fast path
//                     would; else (r, q, w) -> (r, 1, w) and enqueue
//     unlock slow     a waiter queued: (0, 1, 1) -> (0, 1, 0), then grant();
//                     none left (they cancelled; Q is clear again): let
//                     qlock_ go, then (0, 0, 1) -> (0, 0, 0) by CAS as the
//                     fast path -- which fails only if a locker set Q
//                     meanwhile: start over
//     last reader     closes H: a waiter queued: grant(); none left (they
//       slow          cancelled): (0, 1, 0) -> (1, 0, 0), a reader again;
//                     let qlock_ go, then unlock_shared's fetch_sub once
//                     more -- which opens H again only if a locker queued
//                     meanwhile: start over
//     grant()         front is a writer and (0, 1, 0): -> (0, q', 1)
//                     front is k readers and W clear: (r, 1, 0) -> (r+k, q', 0)
//                     queue empty: (r, 1, w) -> (r, 0, w)
//                     (q' = whether anyone is left in the queue); in H, only
//                     for the last reader
//     cancel          remove the waiter, then grant() (which leaves H alone)
//
// H, the handover window: the word is (0, 1, 0) and qlock_ is free. Only
// the last reader's fetch_sub opens it (an exclusive unlock makes (0, 1, 0)
// under qlock_ and grants at once), and only that reader closes it: a
// cancel or a lock slow path that finds H leaves the word as it is -- a
// cancel may even leave the queue empty with Q set -- so nobody can take
// the lock, let alone destroy the shared_mutex, before that reader is done
// with it.
//
// Invariants, whenever qlock_ is free:
//   I1  W implies readers == 0.
//   I2  Q == the queue is not empty -- except in H, where the queue may be
//       empty (its waiters cancelled while the last reader came).
//   I3  If the queue is not empty its front cannot be granted (the holders
//       are incompatible with it) -- except in H.
// I3 is why every queue change ends in grant(): an enqueue at the back
// cannot make the front grantable, but a cancellation can (a cancelled
// writer at the front, readers behind it, the lock held shared: they are
// admitted at once).
//
// The last access. Once the lock is free, another caller may take it,
// release it and destroy the shared_mutex (an object that holds one may be
// freed by whoever drops the last reference to it) while the call that let
// it go has not returned. So the step that lets the lock go is that call's
// last access to it: an unlock that finds nobody to hand the lock to gives
// qlock_ back while it still holds the lock, and lets it go with the fast
// path's own RMW; the last reader keeps the lock unavailable (H) until it
// has handed it over; and a handoff leaves the lock held by granted
// waiters, the first of which stays parked until the unlocker's last touch
// of the shared_mutex is behind it.
//
// Every change of the word is an RMW (no plain stores), so each release
// heads a release sequence that every later acquire of the word reads from.
//
// Why the spinlock queue and not the CQS (sync/detail/cqs.hpp): CES decides
// at the unlock *which kind* of waiter comes next and wakes a batch of
// readers at once. With one FIFO under a spinlock that is a look at the
// front; a cancelled waiter is unlinked in O(1) and whatever it unblocked
// is granted in the same critical section, so no wake-up is ever in flight
// for a waiter that has gone. A CQS reader-writer lock (the CQS paper's full
// version; kotlinx.coroutines' ReadWriteMutex on SegmentQueueSynchronizer)
// needs two queues, readers and writers, plus counters of waiting and active
// readers in the word: it cannot order readers and writers by arrival, and
// its cancellation protocol has to repair those counters. The uncontended
// paths never touch the queue, so the spinlock costs nothing there; the CES
// paper's own implementation made the same choice (§5.1).
//
// Contract:
//
//   operation             | free          | held shared (r)        | held exclusively
//   ----------------------+---------------+------------------------+------------------------
//   lock()                | takes it      | queues                 | queues
//   try_lock()            | true          | false                  | false
//   try_lock_until(t)     | true          | queues; false at t     | queues; false at t
//   lock(stop_token)      | true          | queues; false on stop  | queues; false on stop
//   unlock()              | invalid       | invalid                | hands over or frees
//   lock_shared()         | takes it      | takes it; queues if    | queues
//                         |               | anyone waits           |
//   try_lock_shared()     | true          | true unless anyone     | false
//                         |               | waits                  |
//   try_lock_shared_until | true          | as lock_shared; false  | queues; false at t
//     (t)                 |               | at t                   |
//   lock_shared(stop)     | true          | as lock_shared; false  | queues; false on stop
//                         |               | on stop                |
//   unlock_shared()       | invalid       | r-1; the last one      | invalid
//                         |               | hands over             |
//   ~shared_mutex()       | ok            | invalid                | invalid
//
//   invalid: undefined; aborts with a message naming the shared_mutex in
//   debug builds (SPINDLE_DEBUG_CHECKS): unlock() when not held exclusively
//   or by a caller that does not hold it, unlock_shared() with no readers,
//   lock() or lock_shared() by the caller that holds it exclusively (a
//   wait for itself), destruction while held or waited on. Undefined, not
//   checked: unlock_shared() by a caller that does not hold it shared while
//   others do (readers are counted, not recorded), lock() or a queued
//   lock_shared() by a caller that holds it shared (may deadlock), destroying
//   it while an operation runs.
//
// Size: a word, the policy, a spinlock and two pointers: 24 bytes on 64-bit
// targets (32 with debug checks). Not for: data read far more often than written by many
// cores at once -- every reader writes the one word, so readers still
// share a cache line (a per-core reader count scales better); nor for
// threads only, where std::shared_mutex has no fiber bookkeeping (but no
// fairness guarantee either: glibc's rwlock prefers readers).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/handoff.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle {

struct shared_mutex_access;

class SPINDLE_CAPABILITY("shared_mutex") shared_mutex {
public:
    constexpr explicit shared_mutex(handoff policy = handoff::ces) noexcept : policy_(policy) {}
    ~shared_mutex();
    shared_mutex(const shared_mutex&) = delete;
    shared_mutex& operator=(const shared_mutex&) = delete;

    // ---- exclusive ---------------------------------------------------------

    void lock() SPINDLE_ACQUIRE() {
        std::uint32_t expected = 0;
        // (readers, Q, W): (0, 0, 0) -> (0, 0, 1). acquire pairs with the
        // release RMW of the previous unlock / last unlock_shared.
        if (!state_.compare_exchange_strong(expected, writer_bit, std::memory_order_acquire,
                                            std::memory_order_relaxed)) [[unlikely]]
            lock_slow();
        note_owner();
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        std::uint32_t expected = 0;
        // (0, 0, 0) -> (0, 0, 1); acquire as in lock().
        if (state_.compare_exchange_strong(expected, writer_bit, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
            note_owner();
            return true;
        }
        return false;
    }

    void unlock() SPINDLE_RELEASE() {
        check_unlock();
        std::uint32_t expected = writer_bit;
        // (0, 0, 1) -> (0, 0, 0). release pairs with the acquire of the next
        // locker, shared or exclusive. Fails when Q is set: unlock_slow.
        if (!state_.compare_exchange_strong(expected, 0, std::memory_order_release,
                                            std::memory_order_relaxed)) [[unlikely]]
            unlock_slow();
    }

    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) SPINDLE_TRY_ACQUIRE(true) {
        return try_lock_until(std::chrono::steady_clock::now() +
                              std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t)
        SPINDLE_TRY_ACQUIRE(true) {
        if (try_lock()) return true;
        if (!lock_wait(true, detail::to_steady_deadline(t), nullptr)) return false;
        note_owner();
        return true;
    }

    // Lock exclusively unless stop is requested on `st` first; true when
    // acquired.
    [[nodiscard]] bool lock(std::stop_token st) SPINDLE_TRY_ACQUIRE(true) {
        if (try_lock()) return true;
        if (!lock_wait(true, detail::no_deadline, &st)) return false;
        note_owner();
        return true;
    }

    // ---- shared ------------------------------------------------------------

    void lock_shared() SPINDLE_ACQUIRE_SHARED() {
        if (!try_lock_shared()) [[unlikely]]
            lock_shared_slow();
    }

    [[nodiscard]] bool try_lock_shared() noexcept SPINDLE_TRY_ACQUIRE_SHARED(true) {
        // relaxed: the CAS below re-reads it.
        std::uint32_t s = state_.load(std::memory_order_relaxed);
        while ((s & (writer_bit | queued_bit)) == 0) {
            // (r, 0, 0) -> (r+1, 0, 0). acquire pairs with the release RMW
            // of the last unlock() (through the word's release sequence).
            if (state_.compare_exchange_weak(s, s + one_reader, std::memory_order_acquire,
                                             std::memory_order_relaxed))
                return true;
        }
        return false;
    }

    void unlock_shared() SPINDLE_RELEASE_SHARED() {
        check_unlock_shared();
        // (r, q, 0) -> (r-1, q, 0). release pairs with the acquire of the
        // writer that gets the lock next (its fast CAS, or grant()'s CAS).
        const std::uint32_t s = state_.fetch_sub(one_reader, std::memory_order_release);
        if (s == (one_reader | queued_bit)) [[unlikely]]
            unlock_shared_slow();  // the last reader, and someone waits
    }

    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d)
        SPINDLE_TRY_ACQUIRE_SHARED(true) {
        return try_lock_shared_until(std::chrono::steady_clock::now() +
                                     std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t)
        SPINDLE_TRY_ACQUIRE_SHARED(true) {
        if (try_lock_shared()) return true;
        return lock_wait(false, detail::to_steady_deadline(t), nullptr);
    }

    // Lock shared unless stop is requested on `st` first; true when acquired.
    [[nodiscard]] bool lock_shared(std::stop_token st) SPINDLE_TRY_ACQUIRE_SHARED(true) {
        if (try_lock_shared()) return true;
        return lock_wait(false, detail::no_deadline, &st);
    }

    [[nodiscard]] handoff policy() const noexcept { return policy_; }

private:
    friend struct shared_mutex_access;

    static constexpr std::uint32_t writer_bit = 1u << 0;  // W: held exclusively
    static constexpr std::uint32_t queued_bit = 1u << 1;  // Q: the queue is not empty
    static constexpr std::uint32_t one_reader = 1u << 2;  // readers count from bit 2
    static constexpr std::uint32_t reader_mask = ~(writer_bit | queued_bit);
    static_assert((writer_bit | queued_bit) < one_reader, "flags below the reader count");
    static_assert(reader_mask / one_reader == (1u << 30) - 1, "30 bits of readers");

    SPINDLE_NOINLINE void lock_slow();
    SPINDLE_NOINLINE void lock_shared_slow();
    SPINDLE_NOINLINE void unlock_slow();
    SPINDLE_NOINLINE void unlock_shared_slow();
    // Queue (unless it can be taken at once) and wait: true when granted,
    // false when the deadline passed or stop was requested first.
    bool lock_wait(bool writer, std::chrono::steady_clock::time_point deadline, std::stop_token* st);
    // Under qlock_: take the lock if nobody waits (Q clear) and the holders
    // allow it, else set Q (the caller enqueues).
    bool take_or_mark(bool writer) noexcept SPINDLE_REQUIRES(qlock_);
    // Under qlock_: grant the front of the queue whatever the word allows
    // now. Returns the granted waiters (granted = true, out of the queue)
    // as a list linked through wait_node::next, oldest first; the caller
    // wakes them after releasing qlock_. `handover`: the caller is the last
    // reader closing H, or an exclusive unlock that made (0, 1, 0) itself;
    // anyone else leaves (0, 1, 0) alone.
    detail::wait_node* grant(bool handover) noexcept SPINDLE_REQUIRES(qlock_);
    // Wake granted waiters: every one but the first is dispatched, then the
    // first is woken with `policy` (ces may switch to it right here).
    static void wake(detail::wait_node* granted, handoff policy) noexcept;

#if SPINDLE_DEBUG_CHECKS
    void note_owner() noexcept { owner_.store(detail::caller_identity(), std::memory_order_relaxed); }
    void check_unlock() noexcept;  // held exclusively, by the caller; then forgets the owner
    void check_unlock_shared() noexcept;
    void check_not_owner(bool writer) noexcept;  // a lock that must wait: not by the exclusive holder
#else
    void note_owner() noexcept {}
    void check_unlock() noexcept {}
    void check_unlock_shared() noexcept {}
    void check_not_owner(bool) noexcept {}
#endif

    std::atomic<std::uint32_t> state_{0};  // the lock word drawn above
    handoff policy_;
    detail::spinlock qlock_;
    detail::wait_list queue_ SPINDLE_GUARDED_BY(qlock_);
#if SPINDLE_DEBUG_CHECKS
    // The exclusive holder: a fiber's control block or a thread's marker,
    // or null. Relaxed: written by each new exclusive holder, cleared by its
    // unlock; read by unlock (must be the caller) and by a lock that must
    // wait (must not be): a caller only ever finds its own identity there
    // while it holds the mutex exclusively. Readers are counted, not recorded.
    std::atomic<const void*> owner_{nullptr};
#endif
};

}  // namespace spindle
