// spindle/locks/ticket_lock.hpp — the ticket lock, and its spin-then-park
// twin.
//
//     spindle::ticket_lock l;          // spins
//     spindle::ticket_park_lock p;     // a futex gate in front of a parking ticket queue
//     { std::lock_guard g(l); ... }
//
// A bakery (Reed and Kanodia, CACM 1979; Mellor-Crummey and Scott, ACM TOCS
// 1991): lock() takes the next ticket with a fetch-and-add and waits until
// the "now serving" counter shows it; unlock() advances "now serving" with
// a plain store (only the holder writes it). Uncontended: one fetch-and-add
// and a load to lock, a load and a store to unlock -- the shortest paths of
// all the locks here. Every waiter watches the one serving word, so each
// unlock invalidates it in every waiter's cache: handover slows down as
// waiters are added (global spinning; the Hemlock paper's Figure 2).
//
// Fairness: FIFO, by ticket: threads enter in the order their fetch-and-add
// on `next` landed. try_lock() never overtakes a waiter (it succeeds only
// when nobody holds or waits).
//
// Space (the Hemlock paper's Table 1, in bytes): lock 8 (ticket_park_lock:
// 16 -- the 12-byte parking queue and the gate word), per thread 0, per held lock 0, per waiter 0; no initialization
// (all-zero is unlocked), trivially destructible.
//
// Lock words:
//
//     +----------------+----------------+--------------------+
//     | next (32)      | serving (32)   | sleepers (32)      |  <- park variant only
//     +----------------+----------------+--------------------+
//
//     free:    next == serving
//     held:    next - serving = 1 + the number of waiters (mod 2^32)
//     ticket t is let in when serving == t.
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
// once if `serving` changed since it was read). No lost wake-up.
//
// Contract (both variants):
//
//     state \ call     lock()              try_lock()    unlock()
//     free             held by caller      true, held    invalid (1)
//     held by caller   deadlock (2)        false         free / next ticket in
//     held by another  waits (FIFO)        false         invalid (2)
//
//     (1) aborts with "spindle::ticket_lock at <address>: unlock() of a
//         lock that is not locked" in debug builds (SPINDLE_DEBUG_CHECKS);
//         undefined otherwise (it would let a future ticket in early).
//     (2) undefined; not detected (the words name no owner).
//
// Undefined: the uses marked above; copying or moving a lock (deleted);
// destroying a held lock; 2^32 threads waiting at once.
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
struct no_sleepers {};  // the spin variant's missing third word
}  // namespace detail

// Annotate: detail::tsan_lock_annotations for the lock types;
// detail::no_lock_annotations for the waiting line of ticket_park_lock
// (detail/park_gate.hpp), whose gate makes them.
template <class Wait, class Annotate = detail::tsan_lock_annotations>
class SPINDLE_CAPABILITY("mutex") basic_ticket_lock {
public:
    static constexpr const char* name = Wait::parks ? "spindle::ticket_park_lock" : "spindle::ticket_lock";
    static constexpr bool is_fifo = true;
    static constexpr bool parks = Wait::parks;

    constexpr basic_ticket_lock() noexcept = default;
    basic_ticket_lock(const basic_ticket_lock&) = delete;
    basic_ticket_lock& operator=(const basic_ticket_lock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        annotate::pre_lock(this);
        // (next): t -> t + 1. relaxed: handing out tickets orders nothing;
        // the acquire is on `serving`.
        const std::uint32_t t = next_.fetch_add(1, std::memory_order_relaxed);
        // acquire pairs with unlock's release store of t: the previous
        // critical section happens before ours.
        if (serving_.load(std::memory_order_acquire) != t) [[unlikely]]
            wait_turn(t);
        annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        annotate::pre_try_lock(this);
        // acquire pairs with unlock's release store of s.
        std::uint32_t s = serving_.load(std::memory_order_acquire);
        // (next): s -> s + 1, only if nobody holds or waits (next == serving).
        // If next is still s, serving is still s too (it advances only while
        // next is ahead of it, and next never comes back), so ticket s is
        // let in at once. relaxed: the acquire was the load above.
        const bool ok = next_.compare_exchange_strong(s, s + 1, std::memory_order_relaxed,
                                                      std::memory_order_relaxed);
        annotate::post_try_lock(this, ok);
        return ok;
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        annotate::pre_unlock(this);
        // relaxed: only the holder writes serving.
        const std::uint32_t s = serving_.load(std::memory_order_relaxed);
        // relaxed: a misuse check, not synchronization.
        if (SPINDLE_DEBUG_CHECKS && next_.load(std::memory_order_relaxed) == s) misuse();
        if constexpr (!Wait::parks) {
            // (serving): s -> s + 1. release pairs with the acquire load of
            // the waiter holding ticket s + 1.
            serving_.store(s + 1, std::memory_order_release);
        } else {
            // seq_cst: the Dekker pair with wait_turn (see the header).
            serving_.store(s + 1, std::memory_order_seq_cst);
            if (sleepers_.load(std::memory_order_seq_cst) != 0) [[unlikely]]
                detail::futex_wake_bitset(&serving_, INT_MAX, ticket_bit(s + 1));
        }
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
            while (serving_.load(std::memory_order_acquire) != t);
        } else {
            for (unsigned i = 0; i < Wait::spin_steps; ++i) {
                arch::cpu_relax();
                if (serving_.load(std::memory_order_acquire) == t) return;
            }
            // seq_cst: the Dekker pair with unlock (see the header).
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            for (;;) {
                const std::uint32_t s = serving_.load(std::memory_order_seq_cst);
                if (s == t) break;
                detail::futex_wait_bitset(&serving_, s, ticket_bit(t));
            }
            // relaxed: we hold the lock; the count only tells unlocks
            // whether to look for sleepers.
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
    }

    [[noreturn]] SPINDLE_COLD void misuse() const noexcept {
        detail::lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    std::atomic<std::uint32_t> next_{0};     // the next ticket to hand out
    std::atomic<std::uint32_t> serving_{0};  // the ticket let in; the park variant's futex word
    // Park variant: waiters that may sleep (counted before they read `serving`
    // for the last time, uncounted once they are in).
    [[no_unique_address]] std::conditional_t<Wait::parks, std::atomic<std::uint32_t>, detail::no_sleepers>
        sleepers_{};
};

using ticket_lock = basic_ticket_lock<spin_wait>;
// The spin-then-park twin: a futex gate in front of a parking ticket queue
// (detail/park_gate.hpp: it may let a running thread overtake the queue).
using ticket_park_lock = detail::park_gate<basic_ticket_lock<park_wait, detail::no_lock_annotations>>;

}  // namespace spindle
