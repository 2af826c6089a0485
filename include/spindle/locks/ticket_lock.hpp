// spindle/locks/ticket_lock.hpp — the ticket lock, its spin-then-park twin,
// and its one-word form.
//
//     spindle::ticket_lock l;          // spins
//     spindle::ticket_park_lock p;     // a futex gate in front of a parking ticket queue
//     spindle::compact_ticket_lock c;  // spins; 4 bytes (fits a pthread_spinlock_t)
//     { std::lock_guard g(l); ... }
//
// A bakery (Reed and Kanodia, CACM 1979; Mellor-Crummey and Scott, ACM TOCS
// 1991): lock() takes the next ticket with a fetch-and-add and waits until
// the "now serving" counter shows it; unlock() advances "now serving" (only
// the holder writes it). Uncontended: one fetch-and-add and a load to lock,
// a load and a store to unlock -- the shortest paths of all the locks here.
// Every waiter watches the one serving word, so each unlock invalidates it
// in every waiter's cache: handover slows down as waiters are added (global
// spinning; the Hemlock paper's Figure 2).
//
// One template, basic_ticket_lock<Wait, Annotate, Ticket>, for every form;
// Ticket says how wide the counters are and so where they live
// (detail::ticket_words below):
//
//     Ticket          words                            waiters   lock, unlock
//     std::uint32_t   next, serving: two 32-bit words  2^32 - 1  fetch_add; store
//     std::uint16_t   one 32-bit word: two 15-bit      32767     fetch_add; CAS loop
//                     counters and a mark bit
//
// Fairness: FIFO, by ticket: threads enter in the order their fetch-and-add
// on `next` landed. try_lock() never overtakes a waiter (it succeeds only
// when nobody holds or waits).
//
// Space (the Hemlock paper's Table 1, in bytes): lock 8 (ticket_park_lock:
// 16 -- the 12-byte parking queue and the gate word; compact_ticket_lock:
// 4), per thread 0, per held lock 0, per waiter 0; no initialization
// (all-zero is unlocked), trivially destructible.
//
// Lock words, Ticket = std::uint32_t:
//
//     +----------------+----------------+--------------------+
//     | next (32)      | serving (32)   | sleepers (32)      |  <- park variant only
//     +----------------+----------------+--------------------+
//
//     free:    next == serving
//     held:    next - serving = 1 + the number of waiters (mod 2^32)
//     ticket t is let in when serving == t.
//
// Lock word, Ticket = std::uint16_t (one 32-bit word, so lockers and the
// holder write the same word):
//
//     31          17 16 15 14           0
//     +-------------+--+--+--------------+
//     |    next     |M | 0|   serving    |
//     +-------------+--+--+--------------+
//
//     lock takes ticket `next` (fetch_add of 1 << 17; the carry out of bit
//     31 is lost, so next wraps at 2^15) and waits until serving == its
//     ticket; unlock adds 1 to serving without carrying out of bit 14 (a CAS
//     loop: lockers change `next` meanwhile). Invariant: (next - serving)
//     mod 2^15 == holder + waiters.
//     M: the mark, one bit the lock keeps for its user and never reads
//     (set_mark(), marked(); preload/ marks a process-shared
//     pthread_spinlock_t with it). reset() empties the lock, keeping M.
//
// ticket_park_lock is not this lock alone: it is the gate of
// detail/park_gate.hpp in front of basic_ticket_lock<park_wait>, which orders
// the waiters (a running thread may overtake them; see there why). The
// parking queue's waiters spin park_wait::spin_steps steps, then count
// themselves in `sleepers` and sleep on the futex of `serving` with
// FUTEX_WAIT_BITSET, bit (ticket mod 32); an unlock that sees sleepers != 0
// wakes bit (new serving mod 32) only: normally just the next ticket's
// holder, not the whole queue. The sleeper's increment of `sleepers` and its
// read of `serving`, and the unlock's store to `serving` and its read of
// `sleepers`, are seq_cst (a Dekker pair): either the unlock sees the
// sleeper or the sleeper sees the new `serving` (and the futex returns at
// once if `serving` changed since it was read). No lost wake-up. Only the
// 32-bit form parks (the one-word form has no room for `sleepers`).
//
// Contract (every form):
//
//     state \ call     lock()              try_lock()    unlock()              reset() (3)
//     free             held by caller      true, held    invalid (1)           free
//     held by caller   deadlock (2)        false         free / next ticket in free, empty
//     held by another  waits (FIFO)        false         invalid (2)           invalid (2)
//
//     (1) aborts with "spindle::ticket_lock at <address>: unlock() of a
//         lock that is not locked" in debug builds (SPINDLE_DEBUG_CHECKS);
//         undefined otherwise (it would let a future ticket in early).
//     (2) undefined; not detected (the words name no owner).
//     (3) the one-word form only: for a lock whose waiters are known to be
//         gone (a fork child: they were the parent's other threads); a
//         waiter still there would wait for ever.
//
// Undefined: the uses marked above; copying or moving a lock (deleted);
// destroying a held lock; more waiters at once than the table above allows;
// set_mark() on a lock another thread may use.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/detail/park_gate.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle {

namespace detail {

template <class Ticket>
struct ticket_words;

// Ticket = std::uint32_t: `next` and `serving`, a word each.
template <>
struct ticket_words<std::uint32_t> {
    static constexpr const char* spin_name = "spindle::ticket_lock";

    // Takes a ticket; returns it. (next): t -> t + 1. relaxed: handing out
    // tickets orders nothing; the acquire is on `serving`.
    std::uint32_t take() noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }
    // The ticket let in now.
    std::uint32_t serving(std::memory_order order) const noexcept { return serving_.load(order); }
    [[nodiscard]] bool try_take() noexcept {
        // acquire pairs with advance()'s release store of s.
        std::uint32_t s = serving_.load(std::memory_order_acquire);
        // (next): s -> s + 1, only if nobody holds or waits (next == serving).
        // If next is still s, serving is still s too (it advances only while
        // next is ahead of it, and next never comes back), so ticket s is
        // let in at once. relaxed: the acquire was the load above.
        return next_.compare_exchange_strong(s, s + 1, std::memory_order_relaxed,
                                             std::memory_order_relaxed);
    }
    // A misuse check of the holder's (relaxed: not synchronization).
    bool looks_free() const noexcept {
        return next_.load(std::memory_order_relaxed) == serving_.load(std::memory_order_relaxed);
    }
    // The holder lets ticket serving + 1 in. (serving): s -> s + 1; `order`
    // (release, or the park variant's seq_cst) pairs with the acquire load
    // of the waiter holding ticket s + 1. Returns s + 1.
    std::uint32_t advance(std::memory_order order) noexcept {
        // relaxed: only the holder writes serving.
        const std::uint32_t s = serving_.load(std::memory_order_relaxed);
        serving_.store(s + 1, order);
        return s + 1;
    }
    const std::atomic<std::uint32_t>& arrival_word() const noexcept { return next_; }

    std::atomic<std::uint32_t> next_{0};     // the next ticket to hand out
    std::atomic<std::uint32_t> serving_{0};  // the ticket let in; the park variant's futex word
};

// Ticket = std::uint16_t: both counters and the mark in one word (see the
// header).
template <>
struct ticket_words<std::uint16_t> {
    static constexpr const char* spin_name = "spindle::compact_ticket_lock";
    static constexpr std::uint32_t next_one = 1u << 17;
    static constexpr std::uint32_t mark_bit = 1u << 16;
    static constexpr std::uint32_t serving_mask = 0x7fff;

    static constexpr std::uint32_t next_of(std::uint32_t w) noexcept { return w >> 17; }

    // (next): t -> t + 1 mod 2^15. relaxed: as the two-word take(); the
    // acquire is the caller's load of `serving`.
    std::uint32_t take() noexcept { return next_of(word_.fetch_add(next_one, std::memory_order_relaxed)); }
    std::uint32_t serving(std::memory_order order) const noexcept { return word_.load(order) & serving_mask; }
    [[nodiscard]] bool try_take() noexcept {
        // relaxed: only decides whether to try; the CAS is the acquire.
        std::uint32_t w = word_.load(std::memory_order_relaxed);
        if (next_of(w) != (w & serving_mask)) return false;  // held
        // acquire pairs with advance()'s release. (n, n) -> (n+1, n)
        return word_.compare_exchange_strong(w, w + next_one, std::memory_order_acquire,
                                             std::memory_order_relaxed);
    }
    bool looks_free() const noexcept {
        const std::uint32_t w = word_.load(std::memory_order_relaxed);  // as the two-word one
        return next_of(w) == (w & serving_mask);
    }
    std::uint32_t advance(std::memory_order order) noexcept {
        // Only the holder changes `serving`; lockers change `next`
        // concurrently, hence a CAS loop instead of a store of the low half.
        // relaxed: the CAS re-reads what it replaces.
        std::uint32_t w = word_.load(std::memory_order_relaxed);
        // `order` (release) pairs with the acquire of the next ticket's
        // owner. (n, s) -> (n, s+1 mod 2^15); M kept
        while (!word_.compare_exchange_weak(w, (w & ~serving_mask) | ((w + 1) & serving_mask), order,
                                            std::memory_order_relaxed)) {
        }
        return (w + 1) & serving_mask;
    }
    const std::atomic<std::uint32_t>& arrival_word() const noexcept { return word_; }

    std::atomic<std::uint32_t> word_{0};
};

}  // namespace detail

// Annotate: detail::tsan_lock_annotations for the lock types;
// detail::no_lock_annotations for the waiting line of ticket_park_lock
// (detail/park_gate.hpp), whose gate makes them.
// Ticket: std::uint32_t or std::uint16_t (see the header).
template <class Wait, class Annotate = detail::tsan_lock_annotations, class Ticket = std::uint32_t>
class SPINDLE_CAPABILITY("mutex") basic_ticket_lock {
    static_assert(std::is_same_v<Ticket, std::uint32_t> || std::is_same_v<Ticket, std::uint16_t>,
                  "basic_ticket_lock: Ticket is std::uint32_t or std::uint16_t");
    static_assert(!Wait::parks || std::is_same_v<Ticket, std::uint32_t>,
                  "basic_ticket_lock: only the two-word form parks");
    using words = detail::ticket_words<Ticket>;

public:
    static constexpr const char* name = Wait::parks ? "spindle::ticket_park_lock" : words::spin_name;
    static constexpr bool is_fifo = true;
    static constexpr bool parks = Wait::parks;

    constexpr basic_ticket_lock() noexcept = default;
    basic_ticket_lock(const basic_ticket_lock&) = delete;
    basic_ticket_lock& operator=(const basic_ticket_lock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        annotate::pre_lock(this);
        const std::uint32_t t = words_.take();
        // acquire pairs with unlock's release of t: the previous critical
        // section happens before ours.
        if (words_.serving(std::memory_order_acquire) != t) [[unlikely]]
            wait_turn(t);
        annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        annotate::pre_try_lock(this);
        const bool ok = words_.try_take();
        annotate::post_try_lock(this, ok);
        return ok;
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        annotate::pre_unlock(this);
        if (SPINDLE_DEBUG_CHECKS && words_.looks_free()) misuse();
        if constexpr (!Wait::parks) {
            // release pairs with the acquire load of the next ticket's holder.
            words_.advance(std::memory_order_release);
        } else {
            // seq_cst: the Dekker pair with wait_turn (see the header).
            const std::uint32_t s = words_.advance(std::memory_order_seq_cst);
            if (words_.sleepers_.load(std::memory_order_seq_cst) != 0) [[unlikely]]
                detail::futex_wake_bitset(&words_.serving_, INT_MAX, ticket_bit(s));
        }
        annotate::post_unlock(this);
    }

    // ---- the one-word form's mark and reset (see the header)

    // Sets or clears the mark and empties the lock; before the lock is
    // shared (relaxed: published by whatever shares it).
    void set_mark(bool on) noexcept {
        static_assert(std::is_same_v<Ticket, std::uint16_t>, "only the one-word form has a mark");
        words_.word_.store(on ? words::mark_bit : 0, std::memory_order_relaxed);
    }
    bool marked() const noexcept {
        static_assert(std::is_same_v<Ticket, std::uint16_t>, "only the one-word form has a mark");
        // relaxed: set before the lock was shared, never changed after.
        return (words_.word_.load(std::memory_order_relaxed) & words::mark_bit) != 0;
    }
    // The holder's release when every waiter is gone: free and empty, the
    // mark kept, instead of handed to the next ticket.
    void reset() noexcept SPINDLE_RELEASE() {
        static_assert(std::is_same_v<Ticket, std::uint16_t>, "only the one-word form resets");
        annotate::pre_unlock(this);
        const std::uint32_t mark = marked() ? words::mark_bit : 0;
        // release pairs with the next locker's acquire, as unlock's.
        words_.word_.store(mark, std::memory_order_release);
        annotate::post_unlock(this);
    }

private:
    friend struct detail::lock_probe;
    using annotate = Annotate;

    static constexpr std::uint32_t ticket_bit(std::uint32_t t) noexcept { return 1u << (t % 32); }

    SPINDLE_COLD void wait_turn(std::uint32_t t) noexcept {
        if constexpr (!Wait::parks) {
            // acquire: as in lock().
            unsigned steps = 0;
            do detail::spin_step<Wait>(steps);
            while (words_.serving(std::memory_order_acquire) != t);
        } else {
            for (unsigned i = 0; i < Wait::spin_steps; ++i) {
                arch::cpu_relax();
                if (words_.serving(std::memory_order_acquire) == t) return;
            }
            // seq_cst: the Dekker pair with unlock (see the header).
            words_.sleepers_.fetch_add(1, std::memory_order_seq_cst);
            for (;;) {
                const std::uint32_t s = words_.serving(std::memory_order_seq_cst);
                if (s == t) break;
                detail::futex_wait_bitset(&words_.serving_, s, ticket_bit(t));
            }
            // relaxed: we hold the lock; the count only tells unlocks
            // whether to look for sleepers.
            words_.sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
    }

    [[noreturn]] SPINDLE_COLD void misuse() const noexcept {
        detail::lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    // The park variant adds `sleepers`: waiters that may sleep (counted
    // before they read `serving` for the last time, uncounted once they are
    // in).
    struct parking_words : words {
        std::atomic<std::uint32_t> sleepers_{0};
    };
    std::conditional_t<Wait::parks, parking_words, words> words_{};
};

using ticket_lock = basic_ticket_lock<spin_wait>;
// The spin-then-park twin: a futex gate in front of a parking ticket queue
// (detail/park_gate.hpp: it may let a running thread overtake the queue).
using ticket_park_lock = detail::park_gate<basic_ticket_lock<park_wait, detail::no_lock_annotations>>;
// The one-word form: 4 bytes, up to 32767 waiters, and a mark bit.
using compact_ticket_lock = basic_ticket_lock<spin_wait, detail::tsan_lock_annotations, std::uint16_t>;

}  // namespace spindle
