// spindle/locks/clh_lock.hpp — the CLH queue lock, and its spin-then-park
// twin.
//
//     spindle::clh_lock l;          // spins
//     spindle::clh_park_lock p;     // a futex gate in front of a parking CLH queue
//     { std::lock_guard g(l); ... }
//
// clh_park_lock is the gate of detail/park_gate.hpp in front of
// detail::clh_queue<park_wait> (this algorithm without the holder word,
// whose waiters spin briefly and then sleep on their node): the queue
// orders the waiters, and a running thread may overtake them (see there
// why: with more threads than CPUs a strict FIFO handover waits for a
// wake-up each time). 16 bytes: the tail, the gate word and the holder's node index. What follows
// is the FIFO lock, clh_lock, and the queue both share.
//
// Craig 1993; Magnusson, Landin and Hagersten, IPPS 1994. A locker marks its
// node "waiting", swaps it into the lock's tail and spins on its
// *predecessor's* node until that turns "granted"; the queue is implicit
// (nobody links anything), and each node is watched by one successor only
// (local spinning). The predecessor's node then belongs to the new holder,
// which caches it for its next lock(): nodes migrate between threads. An
// unlock with a successor is one store into its own node, which the
// successor inherits.
//
// Unlike the textbook CLH, a free lock here has a null tail -- no dummy
// node, so the all-zero bytes are an unlocked lock (the pthread_mutex_t
// contract of preload/) and destroying a lock leaks nothing. The price: an
// unlock first tries to CAS the tail from its own node back to null (one
// CAS when nobody waits, as in MCS; the node then stays with its thread),
// and a locker that swapped out null holds the lock at once. The lock keeps
// its holder's node (`holder`), so unlock() needs no argument (Table 1 of
// the Hemlock paper: 2 words), and a thread can hold any number of CLH
// locks, released in any order. try_lock() is a CAS of the tail from null:
// trivial here, though not for the textbook CLH.
//
// Fairness: FIFO, in the order the swaps on `tail` landed. try_lock()
// succeeds only on a free lock, so it never overtakes a waiter.
//
// Space (the Hemlock paper's Table 1; E = one 64-byte queue node): lock 16
// bytes, per held lock E, per waiter E, per thread a cache of up to 16 E
// (allocated on first use, returned to a process-wide pool at thread exit);
// no initialization and no dummy node, trivially destructible.
//
// Node lifetime (detail/queue_node.hpp): the node a waiter inherits is its
// predecessor's, whose thread may exit right after its unlock; a park
// variant's unlock may still be making the futex wake for it after the
// successor has recycled it. Nodes are type-stable (never unmapped), so
// neither is a use after free.
//
// Lock words:
//
//     +-------------------------+-------------------------+
//     | tail (queue_node*)      | holder (queue_node*)    |
//     +-------------------------+-------------------------+
//
//     (tail, holder):  (0, 0)  free
//                      (n, n)  held by n's thread, nobody waiting
//                      (t, n)  held by n's thread, t the last waiter's node
//     (holder is written by the new holder just after it is let in, and
//     cleared by it at the start of unlock: briefly (t, 0) in between.)
//
//     node->state:  node_waiting (1) while its thread waits for or holds the
//                   lock -> node_granted (0) by that thread's unlock, which
//                   lets the successor in. park variant: node_waiting ->
//                   node_sleeping (2) by the successor before it sleeps; the
//                   unlock swaps node_granted in and wakes it only if it
//                   took out node_sleeping.
//
// Contract (both variants):
//
//     state \ call     lock()              try_lock()    unlock()
//     free             held by caller      true, held    invalid (1)
//     held by caller   deadlock (2)        false         free / next in queue
//     held by another  waits (FIFO)        false         invalid (2)
//
//     (1) aborts with "spindle::clh_lock at <address>: unlock() of a lock
//         that is not locked" in debug builds (SPINDLE_DEBUG_CHECKS);
//         undefined otherwise.
//     (2) undefined; not detected.
//
// Undefined: the uses marked above; copying or moving a lock (deleted);
// destroying a held lock.
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

// The CLH queue itself: the tail word, lock() returning the caller's node,
// unlock(node). No TSan annotations (the lock types around it make them).
// basic_clh_lock keeps the holder's node beside it; clh_park_lock's gate
// (detail/park_gate.hpp) keeps its 32-bit index.
template <class Wait>
class clh_queue {
public:
    static constexpr const char* name = Wait::parks ? "spindle::clh_park_lock" : "spindle::clh_lock";
    static constexpr bool parks = Wait::parks;

    constexpr clh_queue() noexcept = default;
    clh_queue(const clh_queue&) = delete;
    clh_queue& operator=(const clh_queue&) = delete;

    queue_node* lock() noexcept {
        queue_node* n = fresh_node();
        // (tail): p -> n. release: n->state is node_waiting before our
        // successor (who swaps after us) reads it. acquire pairs with the
        // release CAS of an unlock that emptied the queue (p == null: its
        // critical section happens before ours).
        queue_node* p = tail_.exchange(n, std::memory_order_acq_rel);
        if (p != nullptr) [[unlikely]]
            wait_behind(p);
        return n;
    }

    // The tail CAS of a try_lock: only on an empty queue. Null if it was not.
    queue_node* try_lock() noexcept { return enqueue_if_empty(tail_, &fresh_node); }

    void unlock(queue_node* n) noexcept { wake_node(unlock_deferred(n)); }

    // unlock(n), but the wake of a sleeping successor (park variant) is left
    // to the caller: it returns the node to wake_node(), or null
    // (park_gate.hpp wakes it after releasing its gate).
    queue_node* unlock_deferred(queue_node* n) noexcept {
        queue_node* expected = n;
        // (tail): n -> 0 when nobody queued behind n. release pairs with the
        // acquire swap/CAS of the next locker, who finds the lock free.
        if (tail_.compare_exchange_strong(expected, nullptr, std::memory_order_release,
                                          std::memory_order_relaxed)) [[likely]] {
            give_node(n);  // nobody saw n: it stays ours
            return nullptr;
        }
        // A successor watches n: let it in. n is its now.
        return grant_node<Wait>(n);
    }

private:
    friend struct lock_probe;
    using node = queue_node;

    static node* fresh_node() noexcept {
        node* n = take_node();
        // relaxed: published by the release half of the swap/CAS on tail.
        n->state.store(node_waiting, std::memory_order_relaxed);
        return n;
    }

    // Wait for p's thread to let us in, then take p: its thread never
    // touches it again as a node (a park variant's late wake names only its
    // address).
    SPINDLE_COLD static void wait_behind(node* p) noexcept {
        await_granted<Wait>(p);  // our predecessor's node
        give_node(p);
    }

    std::atomic<queue_node*> tail_{nullptr};  // the last node in the queue; null: free
};

}  // namespace detail

// The lock of the papers: the queue and its holder's node.
template <class Wait>
using basic_clh_lock = detail::node_queue_lock<detail::clh_queue<Wait>>;

using clh_lock = basic_clh_lock<spin_wait>;
// The spin-then-park twin: a futex gate in front of the CLH queue
// (detail/park_gate.hpp: it may let a running thread overtake the queue).
using clh_park_lock = detail::park_gate<detail::clh_queue<park_wait>>;

}  // namespace spindle
