// spindle/locks/detail/park_gate.hpp — the spin-then-park twins of the FIFO
// locks: a futex gate that a running thread may take, in front of the FIFO
// algorithm, which orders the threads that have to wait.
//
//     spindle::mcs_park_lock    = park_gate<mcs_queue<park_wait>>
//     spindle::clh_park_lock    = park_gate<clh_queue<park_wait>>
//     spindle::ticket_park_lock = park_gate<basic_ticket_lock<park_wait, ...>>
//     spindle::hemlock_park     = park_gate<basic_hemlock<ctr, park_wait, ...>>
//     (and hemlock_naive_park, hemlock_overlap_park, hemlock_aho_park)
//
// Why not the FIFO algorithm with a futex under each waiter. A FIFO lock
// hands the lock to the next thread in line. With more threads than CPUs
// (the case parking is for) that thread is usually asleep or preempted, so
// every handover waits for a wake-up and a context switch -- 10-20 us here
// -- while the lock sits unused: 8 threads on 2 CPUs measured 0.002x the
// throughput of glibc's mutex for every FIFO park twin (bench/locks,
// oversubscribed). glibc, Linux's kernel mutex, WebKit's WTF::Lock and Rust's
// parking_lot all avoid it the same way: a thread that is *running* when the
// lock is free takes it (barging), and sleepers are woken to compete, not
// handed the lock. This is that design, with the FIFO algorithm kept where
// it helps:
//
//   * lock(): one CAS of the gate word from free to held. That is the whole
//     uncontended path (unlock: a CAS back), the same as tas_park_lock.
//   * If the gate is held, the thread spins park_wait::spin_steps steps on
//     it, then joins the FIFO algorithm's queue (an MCS/CLH node, a ticket,
//     a Hemlock Grant). Only the thread at the head
//     of the queue -- the one that holds the inner FIFO lock -- competes for
//     the gate: it spins park_wait::spin_steps steps, then sleeps on the gate
//     word. The others wait in the queue, spinning and then sleeping on
//     their own node / ticket / Grant as the FIFO algorithm says. So at most
//     one waiter ever sleeps on the gate (one FUTEX_WAKE per contended
//     unlock, never a thundering herd), and waiters are served in their
//     queue order among themselves.
//   * The head that takes the gate keeps the inner FIFO lock through its
//     critical section (queue_held) and releases it at the start of its
//     unlock(), just before the gate: the next waiter becomes the head
//     then. So no head spins on the gate while a queued thread holds the
//     lock. With MCS and CLH the wake-up of that next waiter, if it sleeps
//     (a system call), is made after the gate's release: queue nodes are
//     never unmapped, so a late wake is safe (unlock_deferred, wake_node). (Releasing the inner lock at the end of lock() instead measured
//     0.43-0.68x glibc on bench/locks oversubscribed with 2 written lines
//     and 200 ns outside the section. The inner lock cannot be released
//     *after* the gate: by then the next holder may have freed the lock.)
//   * Bounded unfairness: a running thread may take the gate ahead of the
//     head (that is what makes it fast), but a head that has waited for more
//     than handoff_after_ns (1 ms) sets `handoff`. The next unlock then does
//     not free the gate: it passes it, still held, to the head (`given`) and
//     wakes it; nobody can barge while that is under way. So every waiter
//     gets in: it waits for those ahead of it in the queue, each of which
//     waits at most about 1 ms plus one critical section for the gate
//     (Linux's mutex and parking_lot bound their unfairness the same way).
//
// Fairness, then: waiters are admitted in arrival (queue) order among
// themselves -- `is_fifo` stays true, and tests/locks checks that order --
// but a thread that arrives while the gate is free, or at the moment it is
// released, may overtake them (`barges`), and so may try_lock(). The spin
// twins (mcs_lock, ...) are the papers' algorithms, strictly FIFO.
//
// Lock word (32 bits, the futex; beside the queue's own words):
//
//     held (1)     the lock is held
//     sleeps (2)   the queue head may sleep on the gate: unlock wakes it
//     handoff (4)  the head has waited > 1 ms: unlock passes the gate to it
//     given (8)    unlock passed the gate to the head: it holds the lock
//     queue_held (16)  the holder came through the queue and holds the
//                  inner lock: its unlock releases it, then the gate
//
//     fast lock      0 -> held                       CAS, acquire
//     unlock         held[|sleeps|queue_held] -> 0   CAS, release (+ wake,
//                                                    + release the queue)
//     unlock         held|handoff[|sleeps] -> held|given   CAS, release + wake
//     head takes     0 -> held|queue_held            CAS, acquire
//     head sleeps    held[|..] -> held|sleeps[|..]   CAS, then FUTEX_WAIT
//     head starving  held[|..] -> held|handoff|sleeps  CAS
//     head given     held|given -> held|queue_held   store (the head owns it)
//
// Only the head sets sleeps and handoff (there is one head at a time: it
// holds the inner FIFO lock, so there is none while queue_held is set --
// except the new one, between its predecessor's release of the queue and
// of the gate: that unlock reads the word again in between), only an
// unlock sets given, and while given is set the gate is held, so no
// CAS from 0 can succeed: a plain store clears it.
//
// Size: 16 bytes for each: the gate word, and the queue's words -- for MCS
// and CLH the tail alone, with the holder's node kept as its 32-bit pool
// index (queue_node::index) in the gate's other 4 bytes. All-zero =
// unlocked.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <type_traits>
#include <utility>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/detail/queue_node.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle::detail {

// A head that has waited this long for the gate asks for a direct handoff.
// A variable so that tests can make every head that slept ask (0); read
// relaxed, on the sleeping path only.
inline constinit std::atomic<std::int64_t> park_gate_handoff_after_ns{1'000'000};
// Handoffs made so far, by every park twin of the process (relaxed: a
// statistic; one increment per handoff, at most about one per lock per ms).
inline constinit std::atomic<std::uint64_t> park_gate_handoffs{0};

inline std::int64_t park_gate_now_ns() noexcept {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Queue: the waiting line -- a lock type whose lock()/unlock() make no TSan
// annotations (the gate makes them, around the whole operation). Either
// lock() returns void and unlock() takes nothing (ticket, Hemlock), or
// lock() returns a token that unlock(token) takes (an MCS / CLH node).
template <class Queue>
class SPINDLE_CAPABILITY("mutex") park_gate {
public:
    static constexpr const char* name = Queue::name;
    static constexpr bool is_fifo = true;  // among queued waiters; see barges
    static constexpr bool barges = true;   // a running thread may take a free lock ahead of them
    static constexpr bool parks = true;

    constexpr park_gate() noexcept = default;
    park_gate(const park_gate&) = delete;
    park_gate& operator=(const park_gate&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        annotate::pre_lock(this);
        if (!take()) [[unlikely]]
            lock_slow();
        annotate::post_lock(this);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        annotate::pre_try_lock(this);
        // relaxed: a held lock fails without writing its line; take() is the
        // acquire.
        const bool ok = word_.load(std::memory_order_relaxed) == 0 && take();
        annotate::post_try_lock(this, ok);
        return ok;
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        annotate::pre_unlock(this);
        std::uint32_t expected = held;
        // (word): held -> 0. release pairs with the acquire CAS of the next
        // taker (take(), or the head in lock_slow()).
        if (!word_.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed))
            [[unlikely]]
            unlock_slow(expected);
        annotate::post_unlock(this);
    }

    // hemlock_overlap_park: settle this thread's Grant (preload's fork
    // handler; see basic_hemlock::drain_own_grant).
    static void drain_own_grant() noexcept
        requires requires { Queue::drain_own_grant(); }
    {
        Queue::drain_own_grant();
    }

private:
    friend struct lock_probe;
    using annotate = tsan_lock_annotations;

    static constexpr std::uint32_t held = 1;
    static constexpr std::uint32_t sleeps = 2;
    static constexpr std::uint32_t handoff = 4;
    static constexpr std::uint32_t given = 8;
    static constexpr std::uint32_t queue_held = 16;
    static constexpr bool has_token = !std::is_void_v<decltype(std::declval<Queue&>().lock())>;
    struct no_token {};

    // (word): 0 -> held (the queue head: held|queue_held). acquire pairs
    // with unlock's release CAS.
    bool take(std::uint32_t as = held) noexcept {
        std::uint32_t expected = 0;
        return word_.compare_exchange_strong(expected, as, std::memory_order_acquire, std::memory_order_relaxed);
    }

    // The inner lock is taken here and released in unlock_slow(), across
    // calls: beyond what the static analysis follows (SPINDLE_NO_TSA).
    SPINDLE_COLD void lock_slow() noexcept SPINDLE_NO_TSA {
        // First spin a little on the gate itself, as tas_park_lock does: a
        // critical section usually ends within a few microseconds, and a
        // running thread that takes the gate then never queues. Joining the
        // queue at once made every such thread wait behind the sleeping
        // ones (bench/locks oversubscribed, 2 lines + 200 ns: MCS, CLH and
        // ticket twins 0.55-0.60x pthread; with the spin, 1.03-1.04x).
        for (unsigned i = 0; i < park_wait::spin_steps; ++i) {
            // relaxed: a look before the CAS (take() is the acquire).
            if (word_.load(std::memory_order_relaxed) == 0 && take()) return;
            arch::cpu_relax();
        }
        // Join the line. When the inner lock is ours we are the head: the
        // only waiter that competes for the gate. We keep the inner lock
        // while we hold the gate (queue_held), and let the next waiter
        // become the head in unlock(): no head spins on the gate while we
        // hold it.
        if constexpr (std::is_void_v<decltype(queue_.lock())>) {
            queue_.lock();
            await_gate();
        } else {
            queue_node* n = queue_.lock();
            await_gate();
            // relaxed: read by our own unlock.
            holder_.store(n->index, std::memory_order_relaxed);
        }
    }

    // The head's wait for the gate: spin, then sleep on the word; after
    // handoff_after_ns, ask for the gate to be handed over.
    void await_gate() noexcept {
        std::int64_t since = 0;  // when we first slept (0: not yet)
        for (;;) {
            for (unsigned i = 0; i < park_wait::spin_steps; ++i) {
                // relaxed: a look before the CAS, so that the head does not
                // take the line from the holder at every step.
                const std::uint32_t w = word_.load(std::memory_order_relaxed);
                if (w == 0) {
                    if (take(held | queue_held)) return;
                } else if (w & given) {
                    break;  // handled below
                }
                arch::cpu_relax();
            }
            // relaxed: the CAS below (or take()) is what acts on it.
            std::uint32_t w = word_.load(std::memory_order_relaxed);
            for (;;) {
                if (w == 0) {
                    if (take(held | queue_held)) return;
                    w = word_.load(std::memory_order_relaxed);
                    continue;
                }
                if (w & given) {
                    // The unlocker passed us the gate. acquire pairs with its
                    // release CAS (held|handoff -> held|given); nobody else
                    // writes the word until we do, so this reads that value.
                    (void)word_.load(std::memory_order_acquire);
                    // (word): held|given -> held|queue_held. relaxed: while
                    // given is set the gate is held and only its holder (we)
                    // writes.
                    word_.store(held | queue_held, std::memory_order_relaxed);
                    return;
                }
                std::uint32_t want = w | sleeps;
                if (since != 0 && (w & handoff) == 0 &&
                    park_gate_now_ns() - since > park_gate_handoff_after_ns.load(std::memory_order_relaxed))
                    want |= handoff;
                if (want != w &&
                    !word_.compare_exchange_weak(w, want, std::memory_order_relaxed, std::memory_order_relaxed))
                    continue;  // w reloaded
                // Sleep while the word still reads `want`: an unlock changes
                // it (to 0 or to given), so the futex returns at once if one
                // came in between. No lost wake-up.
                if (since == 0) since = park_gate_now_ns();
                futex_wait(&word_, want);
                break;  // spin a little again: the wake usually means free
            }
        }
    }

    // What the queue leaves to do after the gate's release, and only touches
    // memory that outlives the lock: a node to wake (MCS, CLH), the Grant to
    // wake and wait on (Hemlock); nothing (ticket).
    struct wake_later {
        queue_node* n = nullptr;
        void finish() const noexcept {
            if (n != nullptr) wake_node(n);
        }
    };
    struct nothing_later {
        void finish() const noexcept {}
    };
    static auto later_type() noexcept {
        if constexpr (requires(Queue& q) { q.unlock_deferred(); })
            return decltype(std::declval<Queue&>().unlock_deferred()){};
        else if constexpr (has_token)
            return wake_later{};
        else
            return nothing_later{};
    }
    using later = decltype(later_type());

    // Releases the inner lock, leaving what may wait for later.
    later release_queue() noexcept SPINDLE_NO_TSA {
        if constexpr (requires(Queue& q) { q.unlock_deferred(); }) {
            return queue_.unlock_deferred();
        } else if constexpr (has_token) {
            queue_node* n = queue_node_at(holder_.load(std::memory_order_relaxed));  // relaxed: ours
            if constexpr (requires { queue_.unlock_deferred(n); }) {
                return wake_later{queue_.unlock_deferred(n)};
            } else {
                queue_.unlock(n);
                return wake_later{};
            }
        } else {
            queue_.unlock();
            return nothing_later{};
        }
    }

    SPINDLE_COLD void unlock_slow(std::uint32_t w) noexcept SPINDLE_NO_TSA {
        later after_release{};
        if (w & queue_held) {
            // Our lock() came through the queue: let the next waiter become
            // the head now, *before* the gate is free. After the release of
            // the gate this lock's memory may be gone: the next holder may
            // take it, release it and free it (a pthread_mutex_t is freed by
            // whoever holds it last), so nothing here touches the queue, or
            // reads the word, after the release below; only a futex wake may
            // name the word, and a wake on reused memory is a spurious one.
            // The wake-up of a sleeping next waiter, a system call, and
            // (Hemlock) the wait for its acknowledgement are made after the
            // gate's release where the queue allows it (queue nodes are never
            // unmapped; a Grant is this thread's).
            after_release = release_queue();
            // The new head may have set sleeps (or, after 1 ms, handoff)
            // since: look again. relaxed: the CAS below acts on it.
            w = word_.load(std::memory_order_relaxed);
        }
        for (;;) {
            if (SPINDLE_DEBUG_CHECKS && (w & held) == 0) misuse();
            if (w & handoff) {
                // (word): held|handoff[|sleeps|queue_held] -> held|given.
                // release pairs with the head's acquire load of held|given:
                // our section happens before its. The head may not be asleep
                // yet (it set handoff, then sleeps on that value): the wake,
                // or the changed word, gets it either way.
                if (word_.compare_exchange_weak(w, held | given, std::memory_order_release,
                                                std::memory_order_relaxed)) {
                    park_gate_handoffs.fetch_add(1, std::memory_order_relaxed);
                    futex_wake(&word_, 1);
                    after_release.finish();
                    return;
                }
            } else {
                // (word): held[|sleeps|queue_held] -> 0. release: as in
                // unlock().
                if (word_.compare_exchange_weak(w, 0, std::memory_order_release, std::memory_order_relaxed)) {
                    if (w & sleeps) futex_wake(&word_, 1);
                    after_release.finish();
                    return;
                }
            }
        }
    }

    [[noreturn]] SPINDLE_COLD void misuse() const noexcept {
        lock_misuse(name, this, "unlock() of a lock that is not locked");
    }

    std::atomic<std::uint32_t> word_{0};  // the gate: held | sleeps | handoff | given | queue_held
    // MCS/CLH: the index of the holder's queue node while it holds the
    // queue (queue_node::index; 4 bytes, so the twin stays 16 bytes).
    [[no_unique_address]] std::conditional_t<has_token, std::atomic<std::uint32_t>, no_token> holder_{};
    Queue queue_;  // the waiting line
};

}  // namespace spindle::detail
