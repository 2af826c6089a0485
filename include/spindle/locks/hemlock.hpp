// spindle/locks/hemlock.hpp — Hemlock: a compact, FIFO, context-free queue
// lock with one word per lock and one word per thread.
//
//     spindle::hemlock l;           // Listing 2 (CTR): the default
//     spindle::hemlock_park p;      // a futex gate in front of a parking Hemlock queue
//     { std::lock_guard g(l); ... }
//
// Dice and Kogan, "Hemlock: Compact and Scalable Mutual Exclusion", SPAA
// 2021 (docs/papers.md, "Hemlock"). Like CLH, a locker
// swaps itself into the lock's tail and waits on its predecessor; but there
// are no queue nodes. Each thread owns one Grant word (alone on its cache
// line, in TLS). To hand the lock over, the holder writes the lock's
// *address* into its own Grant; the successor, which polls its
// predecessor's Grant for exactly that address, takes it and clears the
// Grant back to empty, which acknowledges the handover; the old holder
// waits for that acknowledgement before its Grant can carry anything else.
// Uncontended: one swap to lock, one CAS to unlock, nothing else touched.
// Context-free: unlock() needs nothing from lock() (the Grant word is the
// caller's, the lock word is the tail), so it fits a pthread_mutex_t as is.
//
// Variants (the paper's listings; basic_hemlock<hemlock_variant, Wait>):
//
//   hemlock          ctr: Listing 2. Waiters poll the Grant with CAS(L -> 0)
//                    and the unlocker waits for the acknowledgement with
//                    fetch_add(0): "coherence traffic reduction" -- the line
//                    comes to the poller already writable, so taking the
//                    lock and acknowledging is one coherence transaction,
//                    not two (§2.1). Slower than naive where one Grant has
//                    many pollers (multi-waiting, §5.6).
//   hemlock_naive    Listing 1: polls with loads, acknowledges with a store.
//   hemlock_overlap  Appendix A, Listing 3: unlock() hands over and returns
//                    at once; the wait for the acknowledgement moves to the
//                    next lock() of the same lock or the next contended
//                    unlock(), overlapping it with the successor's critical
//                    section. The thread's exit waits for its last
//                    acknowledgement (detail::run_at_thread_exit).
//   hemlock_aho      Appendix B, Listing 4, "aggressive hand-over": unlock()
//                    writes the Grant *before* it looks at the tail, so a
//                    waiter is let in one CAS earlier; CTR polling. NOT FOR
//                    LOCKS WHOSE MEMORY THE NEXT HOLDER MAY FREE: the
//                    unlocker still CASes the tail after the successor may
//                    have locked, unlocked and freed the lock (the paper's
//                    reference-count example), so use it for static,
//                    type-stable or otherwise reclaimed-later locks only --
//                    never inside a pthread_mutex_t.
//
// and each has a park twin (hemlock_park, hemlock_naive_park,
// hemlock_overlap_park, hemlock_aho_park): the gate of detail/park_gate.hpp
// in front of basic_hemlock<V, park_wait> -- the variant with the paper's
// Appendix C waiting on the Grant word itself, described below -- which
// orders the waiters, while a running thread may overtake them (see there
// why: with more threads than CPUs a strict FIFO handover waits for a
// wake-up each time). 16 bytes: the tail and the gate word.
//
// Multi-waiting. A thread that holds several contended locks has one
// successor per lock, all polling its single Grant; each waits for its own
// lock's address to appear, so the handover stays unambiguous (§2.2). Those
// pollers share a line (local spinning holds only while threads hold one
// contended lock at a time); with CTR their CASes make it bounce.
//
// Fairness: FIFO, in the order the swaps on the tail landed (Theorem 8 of
// the paper). try_lock() succeeds only on a free lock, never overtaking a
// waiter.
//
// Space (the Hemlock paper's Table 1): lock 8 bytes (one word), per thread
// one Grant word on its own 64-byte line (one line per variant the thread
// uses; initial-exec TLS), per held lock 0, per waiter 0; no initialization
// (all-zero is unlocked), trivially destructible.
//
// Lock word and Grant word:
//
//     lock:    +--------------------------------------+
//              | tail: the last arrival's Grant cell  |   null: free
//              +--------------------------------------+
//     thread:  +--------------------------------------+--------------------+
//              | grant: lock address | s | o          | (rest of the line) |
//              +--------------------------------------+--------------------+
//                                     bit 1  bit 0
//
//     grant = 0          empty: nothing handed over, or acknowledged
//     grant = L          L handed to this thread's successor in L's queue,
//                        not acknowledged yet
//     o (owner_sleeps)   park variants: the Grant's thread sleeps until the
//                        address is cleared (set by it; cleared by the
//                        acknowledgement, which then wakes it)
//     s (waiters_sleep)  park variants: a successor may sleep on this word
//                        (set by successors; cleared by the owner's next
//                        handover, which then wakes them all; kept by
//                        acknowledgements)
//     Locks are at least 8-aligned, so bits 0 and 1 of an address are free.
//
//     Transitions, tagged in the code as "// (tail, grant): ...":
//       lock, free:        (0, -) -> (me, -)
//       lock, queued:      (t, -) -> (me, -), then wait for pred.grant == L
//       take over (ack):   pred.grant: L|s?|o? -> s?   (wake pred if o)
//       unlock, alone:     (me, 0) -> (0, 0)
//       unlock, handover:  (t, 0) -> (t, L), then wait for (t, 0)
//       park handover:     my.grant: s? -> L           (wake all if s)
//
// Parking (basic_hemlock<V, park_wait>, the park twins' queue). A waiter spins Wait::spin_steps steps, then sets s in its
// predecessor's Grant and sleeps on that word's futex (the low 32 bits of
// the Grant word, which hold both flag bits). Only a handover writes an
// address into a Grant, it always takes s out, and it wakes everybody on the
// word when it did (the one being let in and any multi-waiters, who set s
// again). An unlocker waiting for its acknowledgement sets o and sleeps; the
// acknowledgement clears o and wakes the word. Each sleep compares the full
// flag pattern, and every transition that must wake a sleeper changes a
// flag bit, so the futex's 32-bit compare sees every such change: no lost
// wake-up. The unlock fast path is the same CAS as the spin variant: no
// syscall unless somebody sleeps. An acknowledging waiter's wake names only
// the address: its predecessor may have seen the acknowledgement already
// and exited; a stray wake on a reused address is a spurious one.
//
// Contract (every variant):
//
//     state \ call     lock()              try_lock()    unlock()
//     free             held by caller      true, held    invalid (1)
//     held by caller   invalid (2)         false         free / next in queue
//     held by another  waits (FIFO)        false         invalid (3)
//
//     (1) aborts with "spindle::hemlock at <address>: unlock() of a lock
//         that is not locked" in debug builds (SPINDLE_DEBUG_CHECKS);
//         otherwise the caller waits forever for an acknowledgement (the
//         paper, §2: "easy to identify and debug").
//     (2) aborts with "...: lock() of a lock the calling thread holds" in
//         debug builds; deadlocks otherwise.
//     (3) undefined, not detected. In particular a Hemlock must be unlocked
//         by the thread that locked it: the handover goes through the
//         unlocking thread's Grant.
//
// Undefined: the uses marked above; copying or moving a lock (deleted);
// destroying a held lock; a thread that exits while it holds a lock.
//
// Templates: `Env` supplies the atomics, the caller's Grant, the spin step
// and the futex, so that tests/models/hemlock_model_test.cpp runs this code
// under a deterministic scheduler (docs/contributing.md). The default is the
// real thing (detail::hemlock_thread_env).
#pragma once

#include <atomic>
#include <type_traits>
#include <bit>
#include <climits>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/detail/park_gate.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle {

enum class hemlock_variant {
    naive,    // Listing 1
    ctr,      // Listing 2: coherence traffic reduction (the default)
    overlap,  // Appendix A, Listing 3
    aho,      // Appendix B, Listing 4: aggressive hand-over (see the header: not for freeable locks)
};

namespace detail {

// Grant word flag bits (park variants only; spin variants never set them).
inline constexpr std::uintptr_t grant_owner_sleeps = 1;   // o
inline constexpr std::uintptr_t grant_waiters_sleep = 2;  // s
inline constexpr std::uintptr_t grant_flags = grant_owner_sleeps | grant_waiters_sleep;

constexpr std::uintptr_t grant_lock_of(std::uintptr_t g) noexcept { return g & ~grant_flags; }

// A thread's Grant word, alone on its cache line. `Word` is
// std::atomic<std::uintptr_t>, or a model's atomic.
template <class Word>
struct alignas(arch::cache_line) hemlock_grant {
    Word word{0};
};

// CTR's read of a Grant word (Listing 2 line 15): fetch_add(0), a read done
// as an atomic read-modify-write so that the line comes to the unlocker in
// the exclusive state, ready for the successor's acknowledgement to find.
// Clang lowers an idempotent RMW on x86-64 to `mfence; mov` (LLVM's
// lowerIdempotentRMWIntoFencedLoad), a plain read that brings the line in
// shared: the traffic CTR exists to avoid. So on x86-64 it is a `lock xadd`
// of 0 in asm, on every compiler (a locked instruction is a full barrier, so
// at least acquire). ThreadSanitizer cannot see into asm: its builds keep the
// fetch_add, as do models' atomics and other architectures (GCC and Clang
// keep an RMW there). tests/locks/hemlock_ctr_codegen.cmake checks the code.
template <class Word>
SPINDLE_ALWAYS_INLINE std::uintptr_t ctr_read_acquire(Word& w) noexcept {
#if defined(__x86_64__) && !SPINDLE_TSAN
    if constexpr (std::is_same_v<Word, std::atomic<std::uintptr_t>>) {
        static_assert(sizeof(Word) == sizeof(std::uintptr_t) && std::atomic<std::uintptr_t>::is_always_lock_free);
        std::uintptr_t v = 0;
        __asm__ volatile("lock xaddq %0, %1" : "+r"(v), "+m"(*reinterpret_cast<std::uintptr_t*>(&w)) : : "memory");
        return v;
    }
#endif
    return w.fetch_add(0, std::memory_order_acquire);
}

// The futex half of a Grant word: its low 32 bits, which hold both flags.
inline std::atomic<std::uint32_t>* grant_futex(std::atomic<std::uintptr_t>& w) noexcept {
    static_assert(sizeof(std::atomic<std::uintptr_t>) == 8 && std::endian::native == std::endian::little,
                  "the Grant futex is the low half of a little-endian 64-bit word");
    return reinterpret_cast<std::atomic<std::uint32_t>*>(&w);
}

// The real environment: std::atomic, this thread's Grant for this variant
// (one per instantiation, so variants with different Grant protocols never
// share a word), cpu_relax, the futex, TSan annotations.
template <hemlock_variant V, class Wait>
struct hemlock_thread_env {
    template <class T>
    using atomic = std::atomic<T>;
    using grant = hemlock_grant<std::atomic<std::uintptr_t>>;
    using annotate = tsan_lock_annotations;

    static inline constinit thread_local grant tl_grant SPINDLE_INITIAL_EXEC_TLS{};
    static inline constinit thread_local bool tl_drain_registered SPINDLE_INITIAL_EXEC_TLS = false;

    static grant& self() noexcept { return tls(tl_grant); }
    // One step of a wait; counts it in `steps` (spin_wait yields now and then).
    static void relax(unsigned& steps) noexcept {
        if constexpr (Wait::parks) {
            ++steps;
            arch::cpu_relax();
        } else {
            spin_step<Wait>(steps);
        }
    }
    static void sleep(std::atomic<std::uintptr_t>& w, std::uintptr_t expected) noexcept {
        futex_wait(grant_futex(w), static_cast<std::uint32_t>(expected));
    }
    static void wake_all(std::atomic<std::uintptr_t>& w) noexcept { futex_wake(grant_futex(w), INT_MAX); }
    // Overlap: make `drain` run when this thread exits; false if it will
    // not (the thread is exiting): then the caller drains at once.
    static bool drain_at_exit(thread_exit_fn drain) noexcept {
        bool& registered = tls(tl_drain_registered);
        if (registered) [[likely]]
            return !lock_thread().exiting;
        registered = run_at_thread_exit(drain);
        return registered;
    }
};

// The environment of a Hemlock that is the waiting line of a park twin
// (detail/park_gate.hpp): the same Grant words, no TSan annotations (the
// gate makes them).
template <hemlock_variant V, class Wait>
struct hemlock_queue_env : hemlock_thread_env<V, Wait> {
    using annotate = no_lock_annotations;
};

}  // namespace detail

template <hemlock_variant V, class Wait, class Env = detail::hemlock_thread_env<V, Wait>>
class SPINDLE_CAPABILITY("mutex") basic_hemlock {
public:
    static constexpr hemlock_variant variant = V;
    static constexpr bool is_fifo = true;
    static constexpr bool parks = Wait::parks;
    static constexpr const char* name = V == hemlock_variant::naive
                                            ? (Wait::parks ? "spindle::hemlock_naive_park" : "spindle::hemlock_naive")
                                        : V == hemlock_variant::ctr
                                            ? (Wait::parks ? "spindle::hemlock_park" : "spindle::hemlock")
                                        : V == hemlock_variant::overlap
                                            ? (Wait::parks ? "spindle::hemlock_overlap_park"
                                                           : "spindle::hemlock_overlap")
                                            : (Wait::parks ? "spindle::hemlock_aho_park" : "spindle::hemlock_aho");

    using grant_type = typename Env::grant;

    constexpr basic_hemlock() noexcept = default;
    basic_hemlock(const basic_hemlock&) = delete;
    basic_hemlock& operator=(const basic_hemlock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        Env::annotate::pre_lock(this);
        grant_type& self = Env::self();
        if constexpr (V == hemlock_variant::overlap) {
            // Listing 3 line 6: our last unlock of this lock may still wait
            // for its acknowledgement; a successor queued behind us now
            // would take that stale L in our Grant for its own handover.
            // acquire pairs with the acknowledgement's release, and the
            // release half of the swap below passes it on: a successor that
            // swaps after us cannot read the stale L (it reads our Grant
            // after our swap, which is after the acknowledgement).
            if (detail::grant_lock_of(self.word.load(std::memory_order_acquire)) == address()) [[unlikely]]
                await_empty(self.word);
        }
        // (tail, grant): (t, -) -> (me, -). acquire pairs with the release
        // CAS of the unlock that left the lock free (t == null: its critical
        // section happens before ours). release: our Grant's current value
        // (empty, acknowledged) happens before a successor's first read of
        // it -- naive and overlap poll with loads, which could otherwise
        // still return the L of an older, acknowledged handover.
        grant_type* pred = tail_.exchange(&self, std::memory_order_acq_rel);
        if (pred != nullptr) [[unlikely]]
            take_over(pred, self);
        Env::annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        Env::annotate::pre_try_lock(this);
        grant_type& self = Env::self();
        bool ok = false;
        // relaxed: a held lock fails without writing its line; the CAS is
        // the acquire. (Overlap needs no Listing 3 line 6 here: while our
        // Grant still holds this lock's address, our successor has not
        // acknowledged, so it is still queued and the tail is not null.)
        if (tail_.load(std::memory_order_relaxed) == nullptr) {
            grant_type* expected = nullptr;
            // (tail): (0) -> (me). acq_rel: as the swap in lock().
            ok = tail_.compare_exchange_strong(expected, &self, std::memory_order_acq_rel,
                                               std::memory_order_relaxed);
        }
        Env::annotate::post_try_lock(this, ok);
        return ok;
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        Env::annotate::pre_unlock(this);
        if constexpr (Wait::parks) {
            // The park variants: their split unlock (below), finished at once.
            // (AHO: the wake of a successor asleep on our Grant comes after
            // the tail CAS, not before it, as in the gate's split unlock.)
            unlock_deferred().finish();
        } else if constexpr (V == hemlock_variant::aho) {
            grant_type& self = Env::self();
            // The CAS below may legitimately find null (our successor took
            // the speculative grant, and unlocked), so check before it.
            // relaxed: a misuse check.
            if (SPINDLE_DEBUG_CHECKS && tail_.load(std::memory_order_relaxed) == nullptr) misuse_unlocked();
            // Listing 4 line 15: hand over first, on speculation.
            // (tail, grant): (t, 0) -> (t, L)
            publish(self.word, address());
            grant_type* expected = &self;
            // (tail, grant): (me, L) -> (0, L). release: as in the other
            // variants. From here on the lock may be freed (see the header).
            if (tail_.compare_exchange_strong(expected, nullptr, std::memory_order_release,
                                              std::memory_order_relaxed)) [[likely]] {
                retract(self.word);  // nobody waited for it: (0, L) -> (0, 0)
            } else {
                await_empty(self.word);  // Listing 4 line 20
            }
        } else {
            grant_type& self = Env::self();
            grant_type* expected = &self;
            // (tail, grant): (me, 0) -> (0, 0). release pairs with the
            // acquire swap of the next locker, who finds the lock free.
            if (!tail_.compare_exchange_strong(expected, nullptr, std::memory_order_release,
                                               std::memory_order_relaxed)) [[unlikely]]
                hand_over(self, expected);
        }
        Env::annotate::post_unlock(this);
    }

    // The park variants' unlock, split for the park twins
    // (detail/park_gate.hpp); their unlock() is unlock_deferred().finish().
    // Everything that touches this lock -- the tail CAS, and the address
    // published in our Grant -- happens here, while the gate is still held;
    // the futex wake of a successor asleep on our Grant and the
    // wait for its acknowledgement touch only our Grant, and are left to
    // finish(), which the gate calls after its release. So the gate is not
    // held across a wake-up (CTR and naive: a successor asleep behind a
    // held gate kept the whole lock busy for one wake-up latency per
    // handover: 0.6-0.7x pthread, bench/locks oversubscribed 2:200), while
    // unlock() still returns only once the Grant is empty (overlap: as in
    // Listing 3).
    struct deferred_unlock {
        typename Env::template atomic<std::uintptr_t>* grant = nullptr;  // ours
        bool wake = false;   // a successor (or a multi-waiter) sleeps on our Grant
        bool await = false;  // wait for the acknowledgement
        void finish() const noexcept {
            if (wake) Env::wake_all(*grant);
            if (await) await_empty(*grant);
        }
    };
    deferred_unlock unlock_deferred() noexcept
        requires(Wait::parks)
    {
        grant_type& self = Env::self();
        deferred_unlock d{&self.word};
        grant_type* expected = &self;
        if constexpr (V == hemlock_variant::aho) {
            // relaxed: a misuse check (as in unlock()).
            if (SPINDLE_DEBUG_CHECKS && tail_.load(std::memory_order_relaxed) == nullptr) misuse_unlocked();
            d.wake = publish_quiet(self.word, address());  // Listing 4 line 15
            // (tail, grant): (me, L) -> (0, L). release: as in unlock().
            if (tail_.compare_exchange_strong(expected, nullptr, std::memory_order_release,
                                              std::memory_order_relaxed))
                retract(self.word);
            else
                d.await = true;  // Listing 4 line 20
            return d;
        }
        // (tail, grant): (me, 0) -> (0, 0). release: as in unlock().
        if (tail_.compare_exchange_strong(expected, nullptr, std::memory_order_release, std::memory_order_relaxed))
            [[likely]]
            return d;
        if (SPINDLE_DEBUG_CHECKS && expected == nullptr) misuse_unlocked();
        if constexpr (V == hemlock_variant::overlap) {
            // As hand_over(): an earlier handover must be acknowledged first.
            // acquire: as in await_empty().
            if (detail::grant_lock_of(self.word.load(std::memory_order_acquire)) != 0) await_empty(self.word);
            d.wake = publish_quiet(self.word, address());
            d.await = !Env::drain_at_exit(&basic_hemlock::drain_own_grant);
        } else {
            d.wake = publish_quiet(self.word, address());
            d.await = true;
        }
        return d;
    }

    // Overlap: what a thread's exit runs (detail::run_at_thread_exit) --
    // wait for the acknowledgement of our last handover, so no successor
    // reads our Grant after our TLS is gone.
    static void drain_own_grant() noexcept {
        auto& w = Env::self().word;
        // acquire: as in await_empty().
        if (detail::grant_lock_of(w.load(std::memory_order_acquire)) != 0) await_empty(w);
    }

private:
    friend struct detail::lock_probe;
    using word_type = typename Env::template atomic<std::uintptr_t>;

    std::uintptr_t address() const noexcept { return reinterpret_cast<std::uintptr_t>(this); }

    // ---- the unlock side ------------------------------------------------------

    // Somebody queued behind us (tail was `seen`, not us). Spinning variants
    // (the park variants' version is in unlock_deferred()).
    SPINDLE_COLD void hand_over(grant_type& self, grant_type* seen) noexcept
        requires(!Wait::parks)
    {
        if (SPINDLE_DEBUG_CHECKS && seen == nullptr) misuse_unlocked();
        if constexpr (V == hemlock_variant::overlap) {
            // Listing 3 line 16: our Grant may still carry an earlier
            // handover (of another lock): wait for its acknowledgement.
            // acquire: as in await_empty().
            if (detail::grant_lock_of(self.word.load(std::memory_order_acquire)) != 0) await_empty(self.word);
            publish(self.word, address());  // (tail, grant): (t, 0) -> (t, L)
            // Listing 3 ends here; the acknowledgement is awaited by our
            // next lock() of this lock or contended unlock(), or our exit.
            if (!Env::drain_at_exit(&basic_hemlock::drain_own_grant)) await_empty(self.word);
        } else {
            publish(self.word, address());  // (tail, grant): (t, 0) -> (t, L)
            await_empty(self.word);         // ... until the successor's (t, L) -> (t, 0)
        }
    }

    // (grant): empty -> L. release pairs with the successor's acquire
    // load/CAS that finds L: our critical section happens before its.
    // (A park variant's acknowledgement and s-setting CASes in between are
    // read-modify-writes, so they continue this release sequence.)
    // Spinning variants; the park variants' version is publish_quiet().
    static void publish(word_type& g, std::uintptr_t lock) noexcept
        requires(!Wait::parks)
    {
        g.store(lock, std::memory_order_release);
    }
    // Park variants: publish() as an exchange, whose old value says whether
    // a wake is owed (true: the caller wakes, now or after the gate's
    // release). The old value can only be 0 or s: take s out and wake them
    // all -- the one being let in, and multi-waiters, who set s again.
    static bool publish_quiet(word_type& g, std::uintptr_t lock) noexcept
        requires(Wait::parks)
    {
        return (g.exchange(lock, std::memory_order_release) & detail::grant_waiters_sleep) != 0;
    }

    // AHO, nobody took the speculative grant: (grant): L -> empty. relaxed:
    // nobody is waiting for L on our Grant (our tail CAS proved that nobody
    // had queued, and whoever queues now finds a free lock and never reads
    // our Grant), so this orders nothing.
    static void retract(word_type& g) noexcept {
        if constexpr (!Wait::parks) g.store(0, std::memory_order_relaxed);
        else g.fetch_and(detail::grant_waiters_sleep, std::memory_order_relaxed);  // keep s for the multi-waiters
    }

    // Wait until our Grant is acknowledged (its address cleared). acquire
    // pairs with the acknowledgement's release: the successor's last touch
    // of our Grant happens before we reuse it -- or exit and free it.
    static void await_empty(word_type& g) noexcept {
        unsigned steps = 0;
        std::uintptr_t v;
        for (;;) {
            if constexpr (V == hemlock_variant::ctr || V == hemlock_variant::aho)
                v = detail::ctr_read_acquire(g);  // CTR: Listing 2 line 15; acquire or stronger
            else
                v = g.load(std::memory_order_acquire);  // Listing 1 line 21
            if (detail::grant_lock_of(v) == 0) return;
            if constexpr (Wait::parks) {
                if (steps >= Wait::spin_steps) break;
            }
            Env::relax(steps);
        }
        if constexpr (Wait::parks) {
            for (;;) {
                if (detail::grant_lock_of(v) == 0) return;
                // (grant): L|s? -> L|s?|o, then sleep while it stays so. The
                // acknowledgement clears o and wakes us; if it comes first
                // the CAS fails, if it comes in between the futex returns.
                if ((v & detail::grant_owner_sleeps) == 0) {
                    if (!g.compare_exchange_weak(v, v | detail::grant_owner_sleeps, std::memory_order_acquire,
                                                 std::memory_order_acquire))
                        continue;
                    v |= detail::grant_owner_sleeps;
                }
                Env::sleep(g, v);
                v = g.load(std::memory_order_acquire);  // acquire: as above
            }
        }
    }

    // ---- the lock side --------------------------------------------------------

    // Wait for `pred` to hand this lock over, then acknowledge.
    SPINDLE_COLD void take_over(grant_type* pred, grant_type& self) noexcept {
        // Lemma 4 of the paper: the swap never returns our own Grant, unless
        // we hold the lock already.
        if (SPINDLE_DEBUG_CHECKS && pred == &self)
            detail::lock_misuse(name, this, "lock() of a lock the calling thread holds");
        word_type& g = pred->word;
        const std::uintptr_t mine = address();
        if constexpr (!Wait::parks) {
            if constexpr (V == hemlock_variant::naive || V == hemlock_variant::overlap) {
                // Listing 1 lines 11-12. acquire pairs with publish()'s
                // release: the predecessor's critical section happens before
                // ours.
                unsigned steps = 0;
                while (g.load(std::memory_order_acquire) != mine) Env::relax(steps);
                // (pred.grant): L -> 0, the acknowledgement. release pairs
                // with await_empty()'s acquire: we are done with pred's
                // Grant before it is reused or freed.
                g.store(0, std::memory_order_release);
            } else {
                // Listing 2 line 9: poll with CAS, so the line arrives
                // writable. (pred.grant): L -> 0. acq_rel: both of the
                // above.
                std::uintptr_t expected = mine;
                unsigned steps = 0;
                while (!g.compare_exchange_weak(expected, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
                    expected = mine;
                    Env::relax(steps);
                }
            }
        } else {
            std::uintptr_t v;
            for (unsigned steps = 0;;) {
                if constexpr (V == hemlock_variant::ctr || V == hemlock_variant::aho) {
                    v = mine;  // CTR poll; a flagged L falls through to acknowledge() below
                    if (g.compare_exchange_weak(v, 0, std::memory_order_acq_rel, std::memory_order_acquire)) return;
                } else {
                    v = g.load(std::memory_order_acquire);  // acquire: as for the spin variants
                }
                if (detail::grant_lock_of(v) == mine) {
                    if (acknowledge(g, v)) return;
                    continue;
                }
                if (steps >= Wait::spin_steps) break;
                Env::relax(steps);
            }
            for (;;) {
                if (detail::grant_lock_of(v) == mine) {
                    if (acknowledge(g, v)) return;
                    continue;  // v reloaded by the failed CAS
                }
                // (pred.grant): X -> X|s, then sleep while it stays so. Only
                // a handover can put L there, it takes s out, and it wakes
                // the word when it does. acquire: on failure v may be our L
                // (as for the loads above); the success needs none.
                if ((v & detail::grant_waiters_sleep) == 0) {
                    if (!g.compare_exchange_weak(v, v | detail::grant_waiters_sleep, std::memory_order_acquire,
                                                 std::memory_order_acquire))
                        continue;
                    v |= detail::grant_waiters_sleep;
                }
                Env::sleep(g, v);
                v = g.load(std::memory_order_acquire);
            }
        }
    }

    // Park variants: (pred.grant): L|s?|o? -> s?, the acknowledgement; s
    // stays for the other sleepers on the word. acq_rel: the acquire and
    // release of the spin variants' take-over. False (v reloaded) if the
    // word changed under us.
    static bool acknowledge(word_type& g, std::uintptr_t& v) noexcept {
        if (!g.compare_exchange_strong(v, v & detail::grant_waiters_sleep, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
            return false;
        // The wake names only the address: the predecessor may already have
        // seen the acknowledgement and gone on, even exited.
        if (v & detail::grant_owner_sleeps) Env::wake_all(g);
        return true;
    }

    [[noreturn]] SPINDLE_COLD void misuse_unlocked() const noexcept {
        detail::lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    // The last arrival's Grant; null: free.
    typename Env::template atomic<grant_type*> tail_{nullptr};
};

using hemlock = basic_hemlock<hemlock_variant::ctr, spin_wait>;
// The spin-then-park twins: a futex gate in front of a parking Hemlock queue
// (detail/park_gate.hpp: it may let a running thread overtake the queue).
namespace detail {
template <hemlock_variant V>
using hemlock_park_gate = park_gate<basic_hemlock<V, park_wait, hemlock_queue_env<V, park_wait>>>;
}  // namespace detail
using hemlock_park = detail::hemlock_park_gate<hemlock_variant::ctr>;
using hemlock_naive = basic_hemlock<hemlock_variant::naive, spin_wait>;
using hemlock_naive_park = detail::hemlock_park_gate<hemlock_variant::naive>;
using hemlock_overlap = basic_hemlock<hemlock_variant::overlap, spin_wait>;
using hemlock_overlap_park = detail::hemlock_park_gate<hemlock_variant::overlap>;
using hemlock_aho = basic_hemlock<hemlock_variant::aho, spin_wait>;
using hemlock_aho_park = detail::hemlock_park_gate<hemlock_variant::aho>;

}  // namespace spindle
