// spindle/locks/mcs_lock.hpp — the MCS queue lock, and its spin-then-park
// twin.
//
//     spindle::mcs_lock l;          // spins
//     spindle::mcs_park_lock p;     // a futex gate in front of a parking MCS queue
//     { std::lock_guard g(l); ... }
//
// mcs_park_lock is the gate of detail/park_gate.hpp in front of
// detail::mcs_queue<park_wait> (this algorithm without the holder word,
// whose waiters spin briefly and then sleep on their node): the queue
// orders the waiters, and a running thread may overtake them (see there
// why: with more threads than CPUs a strict FIFO handover waits for a
// wake-up each time). 16 bytes: the tail, the gate word and the holder's node index. What follows
// is the FIFO lock, mcs_lock, and the queue both share.
//
// Mellor-Crummey and Scott, ACM TOCS 1991. A locker swaps its queue node
// into the lock's tail; if there was a predecessor it links itself behind
// it and spins on a flag in its *own* node, so each waiter spins on a cache
// line of its own (local spinning) and an unlock invalidates exactly one
// waiter's line. unlock() hands the lock to the node linked behind its own,
// or, with no successor, CASes the tail from its node back to null. A
// successor that has swapped the tail but not linked itself yet makes the
// unlock wait for the link (the one wait in an unlock here; it yields the
// CPU if the linker was preempted).
//
// Context: the lock keeps its holder's node (`holder`), so unlock() needs
// no argument -- the usual way to give MCS a Lockable interface (the
// Hemlock paper, Table 1: 2 words). Nodes come from a per-thread cache (see
// detail/queue_node.hpp): a thread can hold any number of MCS locks and
// release them in any order. Uncontended: a node popped from the cache, a
// swap and a store to lock; a load, a CAS and a push to unlock.
//
// Fairness: FIFO, in the order the swaps on `tail` landed. try_lock()
// succeeds only on a free lock, so it never overtakes a waiter.
//
// Space (the Hemlock paper's Table 1; E = one 64-byte queue node): lock 16
// bytes, per held lock E, per waiter E, per thread a cache of up to 16 E
// (allocated on first use, returned to a process-wide pool at thread exit);
// no initialization (all-zero is unlocked; no dummy node), trivially
// destructible.
//
// Lock words:
//
//     +-------------------------+-------------------------+
//     | tail (queue_node*)      | holder (queue_node*)    |
//     +-------------------------+-------------------------+
//
//     (tail, holder):  (0, 0)  free
//                      (n, n)  held by n's thread, nobody waiting
//                      (t, n)  held by n's thread, t the last waiter
//     (holder is written by the new holder just after it is let in, and
//     cleared by it at the start of unlock: briefly (t, 0) in between.)
//
//     node->state:  node_waiting (1) -> node_granted (0): the predecessor's
//                   unlock let this node's thread in. park variant:
//                   node_waiting -> node_sleeping (2) by the waiter before it
//                   sleeps; the unlock swaps node_granted in and wakes it
//                   only if it took out node_sleeping.
//
// Contract (both variants):
//
//     state \ call     lock()              try_lock()    unlock()
//     free             held by caller      true, held    invalid (1)
//     held by caller   deadlock (2)        false         free / next in queue
//     held by another  waits (FIFO)        false         invalid (2)
//
//     (1) aborts with "spindle::mcs_lock at <address>: unlock() of a lock
//         that is not locked" in debug builds (SPINDLE_DEBUG_CHECKS);
//         undefined otherwise.
//     (2) undefined; not detected.
//
// Undefined: the uses marked above; copying or moving a lock (deleted);
// destroying a held lock; a thread that exits holding a lock (its node stays
// in the lock and is recycled by whoever unlocks it -- but see (2)).
#pragma once

#include <atomic>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/lock_support.hpp>
#include <spindle/locks/detail/node_queue_lock.hpp>
#include <spindle/locks/detail/park_gate.hpp>
#include <spindle/locks/detail/queue_node.hpp>
#include <spindle/locks/wait_policy.hpp>

namespace spindle {

namespace detail {

// The MCS queue itself: the tail word, lock() returning the caller's node,
// unlock(node). No TSan annotations (the lock types around it make them).
// basic_mcs_lock keeps the holder's node beside it; mcs_park_lock's gate
// (detail/park_gate.hpp) keeps its 32-bit index.
template <class Wait>
class mcs_queue {
public:
    static constexpr const char* name = Wait::parks ? "spindle::mcs_park_lock" : "spindle::mcs_lock";
    static constexpr bool parks = Wait::parks;

    constexpr mcs_queue() noexcept = default;
    mcs_queue(const mcs_queue&) = delete;
    mcs_queue& operator=(const mcs_queue&) = delete;

    queue_node* lock() noexcept {
        queue_node* n = fresh_node();
        // (tail): p -> n. release: n's fields above are written before a
        // successor that swaps after us links into n->next or reads it.
        // acquire pairs with the release CAS of an unlock that emptied the
        // queue (p == null: its critical section happens before ours), and
        // with p's owner's release swap (p's fields are set before we write
        // p->next).
        queue_node* p = tail_.exchange(n, std::memory_order_acq_rel);
        if (p != nullptr) [[unlikely]]
            wait_behind(p, n);
        return n;
    }

    // The tail CAS of a try_lock: only on an empty queue. Null if it was not.
    queue_node* try_lock() noexcept { return enqueue_if_empty(tail_, &fresh_node); }

    void unlock(queue_node* n) noexcept { wake_node(unlock_deferred(n)); }

    // unlock(n), but the wake of a sleeping successor (park variant) is left
    // to the caller: it returns that successor's node for wake_node(), or
    // null (park_gate.hpp wakes it after releasing its gate).
    queue_node* unlock_deferred(queue_node* n) noexcept {
        // acquire pairs with the successor's release store of the link: its
        // node's fields are set before we write its state.
        queue_node* succ = n->next.load(std::memory_order_acquire);
        if (succ == nullptr) [[likely]] {
            queue_node* expected = n;
            // (tail): n -> 0. release pairs with the acquire swap/CAS of the
            // next locker, who finds the queue empty.
            if (tail_.compare_exchange_strong(expected, nullptr, std::memory_order_release,
                                              std::memory_order_relaxed)) [[likely]] {
                give_node(n);
                return nullptr;
            }
            succ = await_link(n);
        }
        queue_node* to_wake = grant_node<Wait>(succ);
        // Nobody reads n any more: the successor wrote n->next and spins on
        // its own node.
        give_node(n);
        return to_wake;
    }

private:
    friend struct lock_probe;
    using node = queue_node;

    static node* fresh_node() noexcept {
        node* n = take_node();
        // relaxed: published by the release half of the swap/CAS on tail.
        n->next.store(nullptr, std::memory_order_relaxed);
        n->state.store(node_waiting, std::memory_order_relaxed);
        return n;
    }

    SPINDLE_COLD static void wait_behind(node* p, node* n) noexcept {
        // (p->next): 0 -> n. release pairs with the acquire load of p->next
        // in p's owner's unlock: n's fields are set before it writes n->state.
        p->next.store(n, std::memory_order_release);
        await_granted<Wait>(n);  // our own node
    }

    // A successor swapped the tail after us but has not linked itself yet:
    // it is between its swap and its store to n->next, a few instructions
    // unless it was preempted there (then backoff yields the CPU to it).
    SPINDLE_COLD static node* await_link(node* n) noexcept {
        unsigned spins = 0;
        node* succ;
        // acquire: as the load of n->next in unlock().
        while ((succ = n->next.load(std::memory_order_acquire)) == nullptr) backoff(spins);
        return succ;
    }

    std::atomic<queue_node*> tail_{nullptr};  // the last node in the queue; null: free
};

}  // namespace detail

// The lock of the papers: the queue and its holder's node.
template <class Wait>
using basic_mcs_lock = detail::node_queue_lock<detail::mcs_queue<Wait>>;

using mcs_lock = basic_mcs_lock<spin_wait>;
// The spin-then-park twin: a futex gate in front of the MCS queue
// (detail/park_gate.hpp: it may let a running thread overtake the queue).
using mcs_park_lock = detail::park_gate<detail::mcs_queue<park_wait>>;

}  // namespace spindle
