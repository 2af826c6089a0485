// spindle/sync/detail/pool_storage.hpp — where a blocking pool keeps the
// elements nobody is waiting for: a bounded ring (queue_pool, FIFO) and a
// bounded stack (stack_pool, LIFO), both over 64-bit words. The pool itself
// (sync/pool.hpp) is the CQS paper's (§4.4): a size word decides, with one
// fetch-and-add, whether an element goes to a waiter through the cqs or into
// this storage, and whether a taker takes from this storage or waits.
//
// The storage never decides whether an element exists: the pool's size word
// did. A retrieve comes only after a put has counted an element, so it
// expects one -- but the put that counted it may still be on its way to the
// storage (between its fetch-and-add and its insert). A retrieve that finds
// nothing waits a little, then *breaks* the insert it was paired with: both
// fail, and both go back to the size word (the paper's BROKEN slots and
// failure nodes). Contract of the two operations:
//
//   try_insert(v)    | true: v is stored. false: a retriever gave up on this
//                    | insert; the caller counts its element again (put from
//                    | the top).
//   try_retrieve(v)  | true: v is one stored element. false: the element it
//                    | was promised had not arrived in time; its insert will
//                    | fail; the caller counts itself again (take from the top).
//
// Both may also wait (spin, then yield the thread) for an operation that is
// already under way -- one that has made its fetch-and-add on the pool's
// size word and runs without blocking -- never for one that has not begun.
// (Proof sketch in pool.hpp, "Storage".) Neither parks: a fiber never
// switches inside them.
//
// Capacity. Both hold at most `capacity` elements, the bound the pool's
// contract puts on its size word (put() beyond it is undefined, and aborts in
// debug builds). Neither allocates after construction.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <spindle/arch/config.hpp>

namespace spindle::detail {

// The largest capacity either storage supports (node indices are 31 bits).
inline constexpr std::size_t pool_max_capacity = (std::size_t{1} << 31) - 2;

// ---- FIFO: a ring of slots, each a small turn machine -----------------------
//
// Two fetch-and-add indices, like the paper's infinite array (and its
// Kotlin version): the i-th insert and the i-th retrieve meet in slot
// i mod R, on lap i / R. R is twice the capacity, rounded up to a power of
// two, so that an insert's slot was emptied (lap L-1 retrieved) at least
// `capacity` retrieves earlier: an insert waits for it only if that retrieve
// has been stalled (its thread preempted) for that long. Each slot:
//
//     turn (uint64):   bits 2..63 lap L | bits 0..1 phase
//                      phase 0 EMPTY    waiting for the insert of lap L
//                            1 FILLING  that insert is writing `value`
//                            2 FULL     `value` waits for the retrieve of lap L
//     value (uint64):  the element while FULL
//
//     insert  (lap L):  (L, EMPTY) --CAS--> (L, FILLING) --store--> (L, FULL)
//                       finds (L+1, *) or later: broken by its retriever, fails
//                       finds (L-1, *): lap L-1 still under way: waits
//     retrieve (lap L): (L, FULL) --store--> (L+1, EMPTY)           took it
//                       (L, EMPTY), no insert in a bounded spin:
//                       (L, EMPTY) --CAS--> (L+1, EMPTY)            broke it, fails
//                       (L, FILLING) or (L-1, *): under way: waits
//
// Only lap L's two operations ever write a slot in lap L, so FILLING and FULL
// need no CAS; the one race is insert vs break on (L, EMPTY).
//
// Progress: like any bounded ring (Vyukov's MPMC queue, say), not
// lock-free: an operation whose thread is preempted between its index FAA
// and its store holds its slot, and the operations of the next lap on that
// slot wait (spinning, then yielding the thread) until it runs again.
class pool_ring {
public:
    static constexpr const char* name = "spindle::queue_pool";

    explicit pool_ring(std::size_t capacity);
    pool_ring(const pool_ring&) = delete;
    pool_ring& operator=(const pool_ring&) = delete;

    bool try_insert(std::uint64_t v) noexcept {
        // relaxed: an index carries no data; the slot's turn orders the value.
        const std::uint64_t i = insert_idx_.fetch_add(1, std::memory_order_relaxed);
        slot& s = slots_[i & mask_];
        const std::uint64_t empty = turn_of(i);
        std::uint64_t t = empty;
        // (lap, phase): (L, EMPTY) -> (L, FILLING). acquire pairs with the
        // release store of lap L-1's retriever (its read of `value` comes
        // before our write) or with the construction.
        if (s.turn.compare_exchange_strong(t, empty | filling, std::memory_order_acquire,
                                           std::memory_order_relaxed)) [[likely]] {
            s.value.store(v, std::memory_order_relaxed);  // published by the release below
            // (L, FILLING) -> (L, FULL). release pairs with the retriever's acquire load.
            s.turn.store(empty | full, std::memory_order_release);
            return true;
        }
        return insert_slow(s, empty, v);
    }

    bool try_retrieve(std::uint64_t& v) noexcept {
        const std::uint64_t j = retrieve_idx_.fetch_add(1, std::memory_order_relaxed);  // as insert_idx_
        slot& s = slots_[j & mask_];
        const std::uint64_t empty = turn_of(j);
        // acquire pairs with the insert's release store of FULL.
        if (s.turn.load(std::memory_order_acquire) == (empty | full)) [[likely]] {
            v = s.value.load(std::memory_order_relaxed);  // ordered by the acquire above
            // (L, FULL) -> (L+1, EMPTY). release pairs with lap L+1's insert CAS.
            s.turn.store(empty + next_lap, std::memory_order_release);
            return true;
        }
        return retrieve_slow(s, empty, v);
    }

    [[nodiscard]] std::size_t slots() const noexcept { return mask_ + 1; }

private:
    static constexpr std::uint64_t filling = 1;   // phase bits
    static constexpr std::uint64_t full = 2;
    static constexpr std::uint64_t phase_mask = 3;
    static constexpr std::uint64_t next_lap = 4;  // one lap in `turn`

    struct slot {
        std::atomic<std::uint64_t> turn{0};   // (0, EMPTY): lap 0 waits for its insert
        std::atomic<std::uint64_t> value{0};
    };
    static_assert(sizeof(slot) == 16, "a slot is a turn word and a value word");

    // (lap of index i, EMPTY). Laps run to 2^62 before the turn wraps.
    std::uint64_t turn_of(std::uint64_t i) const noexcept { return (i >> shift_) * next_lap; }

    SPINDLE_NOINLINE bool insert_slow(slot& s, std::uint64_t empty, std::uint64_t v) noexcept;
    SPINDLE_NOINLINE bool retrieve_slow(slot& s, std::uint64_t empty, std::uint64_t& v) noexcept;
    [[noreturn]] SPINDLE_COLD void bad_turn(std::uint64_t t, std::uint64_t empty) const noexcept;

    const std::unique_ptr<slot[]> slots_;
    const std::uint64_t mask_;   // R - 1
    const unsigned shift_;       // log2(R)
    // Each index on its own line: putters and takers contend on different words.
    alignas(arch::cache_line) std::atomic<std::uint64_t> insert_idx_{0};
    alignas(arch::cache_line) std::atomic<std::uint64_t> retrieve_idx_{0};
};

// ---- LIFO: a Treiber stack of nodes from a fixed array ----------------------
//
// `capacity` nodes, never freed, linked by 31-bit indices; two stacks of
// them: the elements (top_) and the free nodes (free_). Each head word:
//
//     top_  (uint64):  bits 32..63 tag | bits 0..31 field
//                      field 0               empty
//                      field 1 .. 2^31-1     node index + 1 (an element)
//                      field 2^31 | k        k >= 1 failure marks (on an empty stack)
//     free_ (uint64):  bits 32..63 tag | bits 0..31 node index + 1, 0 none
//
// Every successful CAS on a head adds one to its tag, so a pop that read a
// node's `next` and was overtaken (the node popped, reused and pushed
// again) fails its CAS instead of installing a stale `next` (ABA). A tag
// repeats after 2^32 changes of its head; a pop would have to be stalled
// across exactly that many.
//
// Failure marks are the paper's failure nodes as a count: a retrieve that
// finds no element in a bounded spin adds a mark and fails; an insert that
// finds a mark removes it and fails. Marks sit only on an empty stack (an
// insert removes a mark rather than pushing over it; a retrieve adds one only
// when there is no element), so one word holds either elements or marks.
//
//     insert:    (t, top) --CAS--> (t+1, n+1) with node n.next = top    pushed
//                (t, 2^31|k) --CAS--> (t+1, k > 1 ? 2^31|k-1 : 0)       consumed a mark, fails
//     retrieve:  (t, n+1) --CAS--> (t+1, n.next)                        popped
//                (t, 0 or 2^31|k), after a bounded spin:
//                (t, ...) --CAS--> (t+1, 2^31|k+1)                      marked, fails
class pool_stack {
public:
    static constexpr const char* name = "spindle::stack_pool";

    explicit pool_stack(std::size_t capacity);
    pool_stack(const pool_stack&) = delete;
    pool_stack& operator=(const pool_stack&) = delete;

    bool try_insert(std::uint64_t v) noexcept {
        // relaxed: the CAS below re-reads it; a push reads nothing through it.
        std::uint64_t h = top_.load(std::memory_order_relaxed);
        if (!marked(h)) [[likely]] {
            const std::uint32_t n = try_alloc();
            if (n != no_node) [[likely]] {
                nodes_[n].value.store(v, std::memory_order_relaxed);  // published by the release CAS
                nodes_[n].next.store(field(h), std::memory_order_relaxed);
                // (tag, field): (t, top) -> (t+1, n+1). release pairs with
                // the acquire CAS of the retrieve that pops n (directly or
                // through the release sequence of later CASes on top_).
                if (top_.compare_exchange_strong(h, pack(tag(h) + 1, n + 1), std::memory_order_release,
                                                 std::memory_order_relaxed))
                    return true;
                return insert_slow(v, n);
            }
        }
        return insert_slow(v, no_node);
    }

    bool try_retrieve(std::uint64_t& v) noexcept {
        // acquire: with the CAS below, pairs with the push of the node we pop.
        std::uint64_t h = top_.load(std::memory_order_acquire);
        if (has_node(h)) [[likely]] {
            const std::uint32_t n = field(h) - 1;
            // relaxed: if n was popped and pushed again since we read h, the
            // tag changed and the CAS fails; the value read is then unused.
            const std::uint32_t next = nodes_[n].next.load(std::memory_order_relaxed);
            // (tag, field): (t, n+1) -> (t+1, next). acquire pairs with the
            // push's release CAS: we read n's value after it.
            if (top_.compare_exchange_strong(h, pack(tag(h) + 1, next), std::memory_order_acquire,
                                             std::memory_order_acquire)) {
                v = nodes_[n].value.load(std::memory_order_relaxed);  // ours now; ordered by the CAS
                free_node(n);
                return true;
            }
        }
        return retrieve_slow(v);
    }

private:
    static constexpr std::uint32_t no_node = 0xffffffffu;
    static constexpr std::uint32_t marks_bit = 1u << 31;  // field: failure marks, count below

    struct node {
        // Index + 1 of the node below (0: none). Written by its pusher before
        // the release CAS that publishes the node; read (relaxed) by poppers
        // that may race with a reuse -- the tagged CAS discards such reads.
        std::atomic<std::uint32_t> next{0};
        // The element while the node is on the element stack (or held by
        // its pusher or popper).
        std::atomic<std::uint64_t> value{0};
    };
    static_assert(sizeof(node) == 16, "a node is a link and a value word");

    static std::uint64_t pack(std::uint64_t t, std::uint32_t f) noexcept { return (t << 32) | f; }
    static std::uint64_t tag(std::uint64_t h) noexcept { return h >> 32; }
    static std::uint32_t field(std::uint64_t h) noexcept { return static_cast<std::uint32_t>(h); }
    static bool marked(std::uint64_t h) noexcept { return (field(h) & marks_bit) != 0; }
    static bool has_node(std::uint64_t h) noexcept { return field(h) != 0 && !marked(h); }

    // Pops a free node, or no_node if none is free right now.
    std::uint32_t try_alloc() noexcept {
        // acquire (load and CAS) pairs with free_node()'s release CAS: the
        // previous owner's read of the value comes before our write.
        std::uint64_t f = free_.load(std::memory_order_acquire);
        while (field(f) != 0) {
            const std::uint32_t n = field(f) - 1;
            // relaxed: a stale link (n taken and freed again) fails the tagged CAS.
            const std::uint32_t next = nodes_[n].next.load(std::memory_order_relaxed);
            // (tag, top): (t, n+1) -> (t+1, next)
            if (free_.compare_exchange_weak(f, pack(tag(f) + 1, next), std::memory_order_acquire,
                                            std::memory_order_acquire))
                return n;
        }
        return no_node;
    }

    void free_node(std::uint32_t n) noexcept {
        std::uint64_t f = free_.load(std::memory_order_relaxed);  // the CAS re-reads it
        do {
            nodes_[n].next.store(field(f), std::memory_order_relaxed);  // published by the release CAS
            // (tag, top): (t, top) -> (t+1, n+1). release pairs with try_alloc's acquire.
        } while (!free_.compare_exchange_weak(f, pack(tag(f) + 1, n + 1), std::memory_order_release,
                                              std::memory_order_relaxed));
    }

    SPINDLE_NOINLINE bool insert_slow(std::uint64_t v, std::uint32_t n) noexcept;
    SPINDLE_NOINLINE bool retrieve_slow(std::uint64_t& v) noexcept;

    const std::unique_ptr<node[]> nodes_;
    // Separate lines: the element stack is the hot word; the free list is
    // touched once per put and once per take, by the same operations.
    alignas(arch::cache_line) std::atomic<std::uint64_t> top_{0};
    alignas(arch::cache_line) std::atomic<std::uint64_t> free_{0};
};

}  // namespace spindle::detail
