// spindle/sync/pool.hpp — fair, cancellable blocking pools on the CQS queue
// (Koval, Khalanskiy, Alistarh, PLDI 2023, §4.4: "Blocking Pools", the
// queue-based and the stack-based pool; smart cancellation as in §3.2 and
// synchronous resumption as in the semaphore).
//
//     spindle::stack_pool<connection*> conns(8);   // holds at most 8
//     for (auto* c : opened) conns.put(c);
//     connection* c = conns.take();                 // waits while none is free
//     ... use c ...; conns.put(c);
//     if (auto c = conns.try_take_for(5ms)) { ...; conns.put(*c); }
//     if (auto c = conns.take(stop_token)) { ...; conns.put(*c); }
//
//     spindle::queue_pool<std::uint32_t> slots(64); // indices into a table
//
// What it is. A set of elements that callers take out, use and put back:
// connections, buffers, slot indices. take() waits while the pool is empty;
// put() hands its element to the oldest waiting take(), or stores it.
// Callable from fibers (the fiber suspends; its worker runs other fibers) and
// from plain OS threads (the thread sleeps on a futex), mixed freely.
//
// Two orders for the stored elements, one type each (same interface):
//
//   queue_pool<T>  FIFO: elements come back out in the order they went in, so
//                  use spreads over all of them. Storage: a ring with two
//                  fetch-and-add indices -- the paper's infinite array, made
//                  bounded (detail/pool_storage.hpp). Scales best: a put and a
//                  take contend on different words.
//   stack_pool<T>  LIFO: take() returns the element put most recently, the
//                  one whose memory is still in cache; the rest stay cold.
//                  Storage: a Treiber stack
//                  of nodes from a fixed array -- the paper's stack, with
//                  tagged indices instead of a garbage collector.
//
// Either is basic_pool<T, pool_order>; pick with the alias.
//
// T: what the cqs carries -- trivially copyable, default constructible, at
// most 8 bytes: a pointer, a handle, an index. (An element travels as one
// 64-bit word through the storage or through a cqs cell. For anything bigger
// pool pointers or indices into your own array.)
//
// Capacity. Fixed at construction: the most elements the pool holds at once.
// For a pool of N resources pass N. Storage is allocated once -- queue_pool:
// 16 bytes a slot, 2N rounded up to a power of two slots; stack_pool: 16
// bytes an element -- and put() and take() never allocate, except the cqs's
// segments while takers wait.
//
// Algorithm (the paper's pools: its semaphore with elements for permits).
// One signed size word, the storage, and a detail::cqs of waiting takers:
//
//     size_ (int64):   s > 0   s elements counted (in the storage, or being put there)
//                      s = 0   none, nobody waiting
//                      s < 0   none, -s takers counted as waiting
//
//     put(x):   FAA(size_, +1) = s;  s < 0:  resume(x): hand x to the oldest waiter
//                                    s >= 0: insert x into the storage
//     take():   FAA(size_, -1) = s;  s > 0:  retrieve an element from the storage
//                                    s <= 0: suspend in the cqs until a put hands one over
//
// Either step may fail and then goes back to the size word ("from the top"):
// an insert whose retriever gave up on it (storage: BROKEN) and a
// synchronous resume that found nobody in its cell (cqs: BROKEN) count
// their element again; a retrieve that found its element not yet arrived
// and a suspension that was broken count their taker again. Each failure
// comes in a pair (an insert with its retrieve, a resume with its suspend),
// so the word stays exact.
//
// Storage (detail/pool_storage.hpp). Because the size word counted the
// element first, storage never has to say "empty": it only has to meet a
// put that is on its way. Let P be the count of FAAs that went up from
// s >= 0 (each makes one insert attempt) and Q the count that went down from
// s > 0 (each makes one retrieve attempt); then max(s, 0) = P - Q, which the
// contract keeps <= capacity. An insert waits only for the retrieve of the
// lap before in its slot (ring), or for a free node (stack). With
// P - Q <= capacity, that retrieve (ring), or one that will free a node or
// leave a failure mark (stack), has already made its FAA and is under way --
// and it never blocks -- so every wait inside the storage is for an operation
// that is running. A retrieve waits for its paired insert only a bounded
// spin, then breaks it. (Running
// is not the same as making progress: a thread preempted in the middle of
// an operation delays the few that wait on it until it runs again; a fiber
// never switches there.)
//
// Fairness: FIFO for takers. Once one waits, s <= 0: every put hands its
// element to the oldest waiter, and newcomers (and try_take) cannot overtake
// it -- except a taker that has counted itself but does not reach its cell
// within the putter's short spin (synchronous resumption, below): it finds
// its cell BROKEN and queues again at the tail. Elements: FIFO (queue_pool) or LIFO (stack_pool) among those stored,
// as a heuristic -- not linearizable when puts and takes race (the paper's
// pools are "bags with a preference"; so are these).
//
// Cancellation (a timeout or stop request) is the paper's smart mode: the
// cancelled taker gives its decrement back, FAA(size_, +1) = s.
//   s < 0:  others still wait; our cell becomes CANCELLED, resumes skip it
//           in O(1).
//   s >= 0: a put has counted us and its element is on the way to our cell:
//           the cell becomes REFUSE; when the element arrives the queue gives
//           it back (complete_refused_resume) and it is inserted into the
//           storage -- our increment has already counted it there.
// An element handed to a waiter that is being cancelled at that moment is
// passed on by the queue to the next waiter, or put back (return_value).
// So a cancelled take never loses an element: it is in the storage, with a
// waiter, or on its way to one of them.
//
// Resumption is synchronous (as in counting_semaphore): a put never leaves
// an element in a cqs cell for a taker that has counted itself but not yet
// parked. If that taker does not reach its cell within a short spin, the put
// breaks the cell and counts its element again (into the storage, where
// try_take sees it); the taker counts itself again. So try_take() is exact up
// to operations in flight: it fails only if every counted element is still
// being put (its put has not returned), or, as in the paper, for the moment
// an element delegated to a waiter being cancelled sits in its cell.
//
// Handoff (runtime/handoff.hpp): a constructor argument, `ces` by default. With
// ces (or inline_resume) a put() from a fiber that finds a parked fiber
// waiting switches straight to it: the taker runs at once with the element,
// on this worker, and the putter continues on another when one is free.
//
// Contract (s: the size word):
//
//   operation            | s > 0                      | s <= 0
//   ---------------------+----------------------------+------------------------------------------
//   put(x)               | stores x                   | hands x to the oldest waiter (s < 0), else stores it
//   take()               | an element (FIFO or LIFO)  | queues; returns with a handed-over element
//   try_take()           | an element                 | nullopt (never queues)
//   try_take_until(t)    | an element                 | queues; the element, or nullopt at t
//   take(stop_token)     | an element                 | queues; the element, or nullopt on stop
//   put(x), s = capacity | invalid: aborts in debug builds
//
// A cancelled take that returns nullopt leaves the pool as if it never came.
//
// Size: the size word, two storage indices or heads (one cache line each),
// the storage (see Capacity), and a cqs (a few cache lines).
// Not for: elements bigger than a word (pool their pointers); an unbounded
// producer/consumer queue (a channel is the tool: put() here never waits,
// so nothing pushes back on producers).
//
// Undefined (aborts with a message naming the pool in debug builds,
// SPINDLE_DEBUG_CHECKS): a capacity of 0 or above pool_max_capacity; put()
// when the pool already holds `capacity` elements; destroying the pool
// while a take waits. Undefined, not checked: destroying it while an
// operation runs -- including a put() whose element a take() already
// returned (the put may still be leaving the queue, as with
// counting_semaphore); in release builds, put() beyond capacity may spin
// until a take makes room.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stop_token>
#include <type_traits>

#include <spindle/arch/config.hpp>
#include <spindle/sync/detail/cqs.hpp>
#include <spindle/sync/detail/pool_storage.hpp>
#include <spindle/sync/detail/wait_queue.hpp>
#include <spindle/runtime/handoff.hpp>

namespace spindle {

enum class pool_order : unsigned char {
    fifo,  // queue_pool: elements come out in the order they went in
    lifo,  // stack_pool: the element put last comes out first
};

namespace detail {

// The pool over 64-bit words; Storage is pool_ring or pool_stack. Slow paths
// in src/sync/pool.cpp, instantiated there for both storages.
template <class Storage>
class pool_core {
public:
    pool_core(std::size_t capacity, handoff policy);
    ~pool_core();
    pool_core(const pool_core&) = delete;
    pool_core& operator=(const pool_core&) = delete;

    void put(std::uint64_t v) noexcept {
        // (size): s -> s + 1. relaxed: the word carries no data; the element
        // (and what its putter wrote before) travels by the storage slot's
        // release/acquire or by the cqs's resume-to-wake-up ordering.
        const std::int64_t s = size_.fetch_add(1, std::memory_order_relaxed);
#if SPINDLE_DEBUG_CHECKS
        if (s >= capacity_) bad_put(s);
#endif
        if (s >= 0 && storage_.try_insert(v)) [[likely]]
            return;
        put_slow(s, v, policy_);
    }

    [[nodiscard]] bool try_take(std::uint64_t& v) noexcept {
        // relaxed: the CAS re-reads it; the element comes by the storage.
        std::int64_t s = size_.load(std::memory_order_relaxed);
        for (;;) {
            if (s <= 0) return false;
            // (size): s -> s - 1, only while an element is counted.
            if (!size_.compare_exchange_weak(s, s - 1, std::memory_order_relaxed, std::memory_order_relaxed))
                continue;
            if (storage_.try_retrieve(v)) [[likely]]
                return true;
            // We broke the insert of a put still under way; it counts its
            // element again. Look again (there may be others).
            s = size_.load(std::memory_order_relaxed);
        }
    }

    // true with an element in `v`; false if the deadline passed or stop was
    // requested first.
    bool take(std::uint64_t& v, std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept {
        // (size): s -> s - 1. relaxed: as in put().
        const std::int64_t s = size_.fetch_sub(1, std::memory_order_relaxed);
        if (s > 0 && storage_.try_retrieve(v)) [[likely]]
            return true;
        return take_slow(s, v, deadline, st);
    }

    [[nodiscard]] std::int64_t count() const noexcept {
        return size_.load(std::memory_order_relaxed);  // a snapshot
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return static_cast<std::size_t>(capacity_); }
    [[nodiscard]] std::size_t queue_segments() noexcept {
        q_.reclaim();
        return q_.live_segments();
    }

private:
    SPINDLE_NOINLINE void put_slow(std::int64_t s, std::uint64_t v, handoff policy) noexcept;
    SPINDLE_NOINLINE bool take_slow(std::int64_t s, std::uint64_t& v,
                                    std::chrono::steady_clock::time_point deadline, std::stop_token* st) noexcept;
    [[noreturn]] SPINDLE_COLD void bad_put(std::int64_t s) const noexcept;
    static bool on_cancellation(void* self, std::uint64_t tag) noexcept;
    static void complete_refused_resume(void* self, std::uint64_t v) noexcept;
    static void return_value(void* self, std::uint64_t v) noexcept;

    // See the header essay. Every change is an RMW.
    alignas(arch::cache_line) std::atomic<std::int64_t> size_{0};
    const std::int64_t capacity_;
    const handoff policy_;
    Storage storage_;
    cqs<std::uint64_t> q_;
};

extern template class pool_core<pool_ring>;
extern template class pool_core<pool_stack>;

template <pool_order Order>
using pool_storage_for = std::conditional_t<Order == pool_order::fifo, pool_ring, pool_stack>;

}  // namespace detail

template <class T, pool_order Order>
class basic_pool {
    static_assert(std::is_trivially_copyable_v<T> && std::is_default_constructible_v<T>,
                  "a pool element travels as a raw 64-bit word: pool pointers, handles or indices");
    static_assert(sizeof(T) <= sizeof(std::uint64_t), "a pool element is at most 8 bytes");

public:
    using value_type = T;
    static constexpr pool_order order = Order;

    // An empty pool that will hold at most `capacity` elements.
    explicit basic_pool(std::size_t capacity, handoff policy = handoff::ces) : core_(capacity, policy) {}
    basic_pool(const basic_pool&) = delete;
    basic_pool& operator=(const basic_pool&) = delete;

    // Never waits (beyond a few spins for operations in flight).
    void put(T x) noexcept { core_.put(encode(x)); }

    [[nodiscard]] T take() noexcept {
        std::uint64_t w = 0;
        (void)core_.take(w, detail::no_deadline, nullptr);  // cannot fail without a deadline or token
        return decode(w);
    }

    // Take unless stop is requested on `st` first.
    [[nodiscard]] std::optional<T> take(std::stop_token st) noexcept {
        std::uint64_t w = 0;
        if (core_.take(w, detail::no_deadline, &st)) return decode(w);
        return std::nullopt;
    }

    [[nodiscard]] std::optional<T> try_take() noexcept {
        std::uint64_t w = 0;
        if (core_.try_take(w)) return decode(w);
        return std::nullopt;
    }

    template <class Rep, class Period>
    [[nodiscard]] std::optional<T> try_take_for(const std::chrono::duration<Rep, Period>& d) {
        return try_take_until(std::chrono::steady_clock::now() +
                              std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    template <class Clock, class Duration>
    [[nodiscard]] std::optional<T> try_take_until(const std::chrono::time_point<Clock, Duration>& t) {
        const auto deadline = detail::to_steady_deadline(t);
        // Past the deadline: do not queue (and be cancelled at once).
        if (std::chrono::steady_clock::now() >= deadline) return try_take();
        std::uint64_t w = 0;
        if (core_.take(w, deadline, nullptr)) return decode(w);
        return std::nullopt;
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return core_.capacity(); }

    // Test and debug: the size word (positive: elements counted; negative:
    // takers counted as waiting). A snapshot.
    [[nodiscard]] std::int64_t debug_count() const noexcept { return core_.count(); }
    // Test and debug: frees the waiter queue's retired segments, then counts
    // those still allocated.
    [[nodiscard]] std::size_t debug_queue_segments() noexcept { return core_.queue_segments(); }

private:
    static std::uint64_t encode(T v) noexcept { return detail::word_encode(v); }
    static T decode(std::uint64_t w) noexcept { return detail::word_decode<T>(w); }

    detail::pool_core<detail::pool_storage_for<Order>> core_;
};

template <class T>
using queue_pool = basic_pool<T, pool_order::fifo>;
template <class T>
using stack_pool = basic_pool<T, pool_order::lifo>;

}  // namespace spindle
