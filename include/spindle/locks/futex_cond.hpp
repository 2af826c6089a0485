// spindle/locks/futex_cond.hpp — a futex condition variable with a sequence
// number, for any lock of locks/.
//
//     spindle::hemlock m;
//     spindle::futex_cond cv;
//     m.lock();
//     while (!ready) cv.wait(m);      // any Lockable: unlock(), lock()
//     m.unlock();
//     ...
//     cv.notify_one();                // or notify_all(); with or without m
//
// The condition variable is the only thing that knows about waiting: no
// extra object, no side table, nothing on the lock's fast path. It works
// with every lock here because wait() only calls the lock's unlock() and
// lock().
//
//     seq      +1 on every notify that finds waiters; waiters sleep on it
//     waiters  threads registered and not yet left
//     flags    clock_monotonic (the clock of a deadline-less caller's
//              choice: preload/'s timedwait reads it) and process_shared
//              (the futex is then not private); set at construction
//
// wait(l), with l held:
//   1. waiters += 1                        } while still holding l, so a
//   2. s = seq                             } notifier holding l sees both
//   3. l.unlock()
//   4. futex_wait(&seq, s)                 returns at once if seq != s
//   5. waiters -= 1, the last access to the condition variable
//   6. l.lock()
// notify_one: if waiters != 0 { seq += 1; futex_wake(&seq, 1) }
// notify_all: if waiters != 0 { seq += 1; futex_wake(&seq, all) }
//
// No lost wake-up: the waiter reads seq before it releases l (2 before 3).
// A notifier that holds l either ran before step 1 (then the waiter was not
// yet waiting) or after step 3: then it increments seq after the waiter read
// it, and the kernel's check-and-sleep in step 4 is atomic with respect to
// the wake -- the waiter either sees seq changed or is asleep and is woken.
// Spurious wake-ups happen (a wake-one can hit a waiter that arrived after
// the notify; the earlier one then returns from step 4 because seq moved).
// Two limits: a wake-one reaches the kernel's first sleeper of highest
// priority, so with real-time priorities a later, higher-priority waiter can
// take a notify meant for an earlier one; and a waiter that sleeps through
// exactly 2^32 notifies would miss its wake-up.
//
// notify_all wakes every waiter, which then contend for the lock (thundering
// herd): the queue locks have no futex word a waiter could be requeued onto.
//
// quiesce() wakes all and waits until every waiter has left step 5, so the
// "notify_all, then destroy and free" pattern never frees memory a waiter
// still touches (pthread_cond_destroy is this).
//
// The steps are public too (enter, leave, seq_word, futex_op): preload/
// composes its own wait from them (cancellation, recursive mutexes).
//
// Contract:
//
//     call              l        result
//     wait(l)           held     returns with l held (woken, maybe spuriously)
//     wait_until(l,..)  held     true: woken; false: the deadline passed;
//                                l held either way
//     notify_*          either   wakes waiters registered before it
//     wait(l), l not held by the caller: undefined (l's unlock() decides:
//     the debug builds of most locks abort, naming the lock).
//
// Space: 12 bytes, 4-aligned; all-zero is a valid condition variable on
// CLOCK_REALTIME, private; trivially destructible. Undefined: copying or
// moving (deleted); destroying it while a thread waits (quiesce() first).
#pragma once

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

#include <spindle/arch/config.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/timed_wait.hpp>

#include <linux/futex.h>

namespace spindle {

class futex_cond {
public:
    static constexpr std::uint32_t clock_monotonic = 1;  // deadlines on CLOCK_MONOTONIC
    static constexpr std::uint32_t process_shared = 2;   // a shared (not private) futex

    constexpr futex_cond() noexcept = default;
    explicit constexpr futex_cond(std::uint32_t flags) noexcept : flags_(flags) {}
    futex_cond(const futex_cond&) = delete;
    futex_cond& operator=(const futex_cond&) = delete;

    std::uint32_t flags() const noexcept { return flags_; }
    clockid_t clock() const noexcept { return (flags_ & clock_monotonic) ? CLOCK_MONOTONIC : CLOCK_REALTIME; }

    void notify_one() noexcept { wake(false); }
    void notify_all() noexcept { wake(true); }

    template <class Lock>
    void wait(Lock& l) noexcept SPINDLE_REQUIRES(l) {
        const std::uint32_t s = enter();  // steps 1 and 2
        l.unlock();                       // step 3
        (void)sleep(s, CLOCK_REALTIME, nullptr);  // step 4
        leave();                          // step 5
        l.lock();                         // step 6
    }

    // abs: a deadline on clock c (CLOCK_REALTIME or CLOCK_MONOTONIC; tv_nsec
    // in [0, 1e9)). false: it passed before a notify came.
    template <class Lock>
    [[nodiscard]] bool wait_until(Lock& l, clockid_t c, const struct timespec& abs) noexcept SPINDLE_REQUIRES(l) {
        const std::uint32_t s = enter();
        l.unlock();
        const int w = sleep(s, c, &abs);
        // A timeout that raced with a notify counts as a wake-up. relaxed:
        // only which value, not what it publishes, matters here.
        const bool timed_out = w == ETIMEDOUT && seq_.load(std::memory_order_relaxed) == s;
        leave();
        l.lock();
        return !timed_out;
    }

    // Wakes every waiter and waits until all have left (step 5).
    void quiesce() noexcept {
        // acquire pairs with the release in leave() (a waiter's last access).
        if (waiters_.load(std::memory_order_acquire) == 0) return;
        seq_.fetch_add(1, std::memory_order_seq_cst);  // as in wake()
        detail::futex_wake_all(&seq_, shared());
        unsigned spins = 0;
        while (waiters_.load(std::memory_order_acquire) != 0) detail::backoff(spins);  // as above
    }

    // ---- the steps of wait, for a caller that composes its own

    // Steps 1 and 2, with the lock held: registers; returns seq.
    std::uint32_t enter() noexcept {
        // seq_cst, with the seq_cst load in wake(): a notifier that does not
        // hold the lock but learned by other means that a waiter has
        // registered sees it. (One holding the lock is ordered by the lock.)
        waiters_.fetch_add(1, std::memory_order_seq_cst);
        // seq_cst: pairs with the notifier's increment.
        return seq_.load(std::memory_order_seq_cst);
    }
    // Step 4: sleeps while seq == s, until woken or abs (null: none) on
    // clock c. 0 (woken, maybe spuriously), EAGAIN (seq moved already),
    // EINTR or ETIMEDOUT.
    int sleep(std::uint32_t s, clockid_t c, const struct timespec* abs) noexcept {
        return detail::futex_wait_until(&seq_, s, c, abs, shared());
    }
    // Step 5: the last access of a waiter. release pairs with quiesce()'s
    // acquire: nothing of the waiter's touches the condition variable after.
    void leave() noexcept { waiters_.fetch_sub(1, std::memory_order_release); }
    // Whether a notify came since step 2 read s. acquire pairs with the
    // notifier's seq_cst increment.
    bool notified_since(std::uint32_t s) const noexcept { return seq_.load(std::memory_order_acquire) != s; }
    // The futex word and the FUTEX_WAIT_BITSET operation step 4 uses, for a
    // caller with its own sleep (deadline on clock c, if any).
    std::atomic<std::uint32_t>* seq_word() noexcept { return &seq_; }
    int futex_op(clockid_t c, bool has_deadline) const noexcept {
        int op = FUTEX_WAIT_BITSET;
        if (!shared()) op |= FUTEX_PRIVATE_FLAG;
        if (has_deadline && c == CLOCK_REALTIME) op |= FUTEX_CLOCK_REALTIME;
        return op;
    }
    // In a single-threaded fork child: the registered waiters were threads
    // that did not survive the fork. Private condition variables only (a
    // shared one's waiters may be live processes). relaxed: no live thread
    // uses it.
    void forget_waiters() noexcept { waiters_.store(0, std::memory_order_relaxed); }

private:
    bool shared() const noexcept { return (flags_ & process_shared) != 0; }

    void wake(bool all) noexcept {
        // seq_cst: see enter().
        if (waiters_.load(std::memory_order_seq_cst) == 0) return;
        // seq_cst: pairs with the waiter's read of seq (step 2); the futex
        // call below then wakes any waiter that read the old value.
        seq_.fetch_add(1, std::memory_order_seq_cst);
        if (all)
            detail::futex_wake_all(&seq_, shared());
        else
            detail::futex_wake_one(&seq_, shared());
    }

    std::atomic<std::uint32_t> seq_{0};      // bumped by every notify that finds waiters; the futex word
    std::atomic<std::uint32_t> waiters_{0};  // registered, not yet left
    std::uint32_t flags_ = 0;                // clock_monotonic | process_shared; constant
};

}  // namespace spindle
