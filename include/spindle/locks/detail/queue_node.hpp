// spindle/locks/detail/queue_node.hpp — the queue elements of MCS and CLH,
// and where they come from.
//
// A thread may hold and wait for any number of MCS or CLH locks at once and
// release them in any order, so it needs one node per lock it holds or waits
// for -- not one per thread. Nodes come from a per-thread cache (a LIFO
// free list in trivially destructible, initial-exec TLS: a lock() pops one
// with two loads and a store, an unlock() pushes one back) backed by a
// process-wide pool.
//
// Lifetime. Nodes are type-stable: carved out of 16 KiB mmap chunks, never
// unmapped, never freed, only recycled. That settles the reader-after-free
// questions both algorithms raise:
//
//   * a CLH thread inherits its predecessor's node and leaves its own to its
//     successor, so the node a thread gives back is rarely the one it took,
//     and its previous owner (possibly an exited thread) may still be
//     issuing the futex wake that goes with the handoff;
//   * a park-variant unlock writes its successor's word and then wakes it:
//     by then the successor may have run, unlocked and recycled the node.
//
// A late wake on a recycled node can only wake whoever sleeps on it now, and
// every sleeper re-checks its word (the futex contract). No malloc: a lock
// inside malloc's own pthread mutex (LD_PRELOAD under jemalloc, say) must not
// call back into malloc.
//
// The pool is a lock-free stack (Treiber) of node indices with a 32-bit ABA
// tag in one 64-bit word, so it takes no lock that a fork() could leave held
// in the child, or that an atfork handler locking its own mutexes could
// deadlock on.
//
// Bounds. A thread's cache holds at most node_cache_limit nodes; past that,
// half go back to the pool (a CLH thread that keeps inheriting nodes and
// keeps releasing its own uncontended would otherwise hoard them). An
// exiting thread returns its whole cache (detail::run_at_thread_exit). The
// pool hands out pooled nodes before it carves new ones, so the nodes ever
// carved stay within the peak number in use (held, waited for, cached) plus
// a chunk per thread that found the pool empty at the same moment. The main
// thread's cache is not returned at exit().
//
// A node (one cache line, so each waiter spins on a line of its own):
//
//     +-------------+-------------+-------------+-------------+-------------+-----
//     | next  (8)   | state (4)   | index (4)   | free_next(8)| pool_next(4)| pad
//     +-------------+-------------+-------------+-------------+-------------+-----
//
//     next       MCS: the successor's node, written by the successor
//     state      node_granted (0) | node_waiting (1) | node_sleeping (2)
//                MCS: the waiter's own node; CLH: the node its successor
//                watches. node_sleeping only in park variants: the watcher
//                sleeps on this word's futex, so whoever writes node_granted
//                must wake it.
//     index      the node's pool name (1-based), fixed when carved
//     free_next  the link in the cache of the thread that holds the node
//     pool_next  the link in the pool stack (an index; 0 ends it)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/lock_support.hpp>  // tls()
#include <spindle/locks/wait_policy.hpp>

namespace spindle::detail {

inline constexpr std::uint32_t node_granted = 0;
inline constexpr std::uint32_t node_waiting = 1;
inline constexpr std::uint32_t node_sleeping = 2;

struct alignas(arch::cache_line) queue_node {
    std::atomic<queue_node*> next{nullptr};
    std::atomic<std::uint32_t> state{node_granted};
    std::uint32_t index = 0;
    queue_node* free_next = nullptr;  // only the thread whose cache holds the node touches it
    // Read by a popper that may lose the race for the node (the ABA tag
    // then fails its CAS): atomic, relaxed.
    std::atomic<std::uint32_t> pool_next{0};
};
static_assert(sizeof(queue_node) == arch::cache_line, "a queue node is one cache line");

struct node_cache {
    queue_node* head;
    std::uint32_t count;
    // 0 until the thread registered its exit hook (its first refill or spill
    // does); cache_limit after; 0 again once it is exiting, so that every
    // push spills straight to the pool.
    std::uint32_t limit;
};

inline constexpr std::uint32_t node_cache_limit = 16;  // cached nodes per thread, at most
inline constexpr std::uint32_t node_refill_batch = 4;  // taken from the pool at a time

inline constinit thread_local node_cache tl_node_cache SPINDLE_INITIAL_EXEC_TLS{};

// The cold halves (src/locks/queue_node.cpp).
SPINDLE_COLD queue_node* node_cache_refill() noexcept;  // the cache is empty: one node for the caller
SPINDLE_COLD void node_cache_spill() noexcept;          // count > limit

// A node for this thread's next enqueue. Its fields are whatever its last
// use left: the caller sets them.
SPINDLE_ALWAYS_INLINE queue_node* take_node() noexcept {
    node_cache& c = tls(tl_node_cache);
    queue_node* n = c.head;
    if (n != nullptr) [[likely]] {
        c.head = n->free_next;
        --c.count;
        return n;
    }
    return node_cache_refill();
}

// Give a node nobody else will read again (as a node) to this thread.
SPINDLE_ALWAYS_INLINE void give_node(queue_node* n) noexcept {
    node_cache& c = tls(tl_node_cache);
    n->free_next = c.head;
    c.head = n;
    if (++c.count > c.limit) [[unlikely]]
        node_cache_spill();
}

// ---- what MCS and CLH waiters share (mcs_lock.hpp, clh_lock.hpp) ----

// Wait until `watched` (MCS: the waiter's own node; CLH: its predecessor's)
// reads node_granted. Spin; the park variant then marks the node sleeping
// and sleeps on it. acquire pairs with the release in grant_node(): the
// predecessor's critical section happens before ours.
template <class Wait>
SPINDLE_COLD void await_granted(queue_node* watched) noexcept {
    if constexpr (!Wait::parks) {
        unsigned steps = 0;
        while (watched->state.load(std::memory_order_acquire) != node_granted) spin_step<Wait>(steps);
    } else {
        for (unsigned i = 0; i < Wait::spin_steps; ++i) {
            if (watched->state.load(std::memory_order_acquire) == node_granted) return;
            arch::cpu_relax();
        }
        std::uint32_t s = watched->state.load(std::memory_order_acquire);
        while (s != node_granted) {
            // (watched->state): waiting -> sleeping, then sleep while it
            // stays so. The CAS fails if the grant came first; the futex
            // returns at once if it came in between.
            if (s == node_waiting &&
                !watched->state.compare_exchange_strong(s, node_sleeping, std::memory_order_acquire,
                                                        std::memory_order_acquire))
                continue;
            futex_wait(&watched->state, node_sleeping);
            s = watched->state.load(std::memory_order_acquire);
        }
    }
}

// (n->state): waiting|sleeping -> granted: let n's watcher in. release
// pairs with the watcher's acquire loads in await_granted(). Park variant:
// returns n if its watcher sleeps, for the caller to wake_node() -- a park
// twin's gate does it after releasing the lock, outside the critical path
// -- and null otherwise (the spin variant always). The wake names only the
// address: by then the watcher may have run on and recycled the node
// (nodes are never unmapped; a stray wake is a spurious one).
template <class Wait>
[[nodiscard]] queue_node* grant_node(queue_node* n) noexcept {
    if constexpr (!Wait::parks) {
        n->state.store(node_granted, std::memory_order_release);
        return nullptr;
    } else {
        return n->state.exchange(node_granted, std::memory_order_release) == node_sleeping ? n : nullptr;
    }
}
inline void wake_node(queue_node* n) noexcept {
    if (n != nullptr) futex_wake(&n->state, 1);
}

// try_lock of a node queue: `fresh` (a node the caller prepared) becomes
// the tail if the queue is empty; otherwise it goes back to the cache and
// the result is null.
inline queue_node* enqueue_if_empty(std::atomic<queue_node*>& tail, queue_node* (*fresh)() noexcept) noexcept {
    // relaxed: a held lock fails without a node or a write.
    if (tail.load(std::memory_order_relaxed) != nullptr) return nullptr;
    queue_node* n = fresh();
    queue_node* expected = nullptr;
    // (tail): 0 -> n. acq_rel: as the swap of lock() (acquire: the unlock
    // that emptied the queue happens before us; release: n's fields).
    if (tail.compare_exchange_strong(expected, n, std::memory_order_acq_rel, std::memory_order_relaxed)) return n;
    give_node(n);
    return nullptr;
}

// The node whose `index` is `index` (a node this thread was handed: the
// chunk table entry it reads was written before the node was).
queue_node* queue_node_at(std::uint32_t index) noexcept;

// For tests: nodes carved since the process started, and nodes in the pool.
struct queue_node_stats {
    std::size_t carved;
    std::size_t pooled;
};
queue_node_stats queue_node_pool_stats() noexcept;

}  // namespace spindle::detail
