// spindle/runtime/detail/deque.hpp — Chase–Lev work-stealing deque.
//
// One owner pushes and pops at the bottom (LIFO, no atomic RMW except when
// racing a thief for the last element); any thread steals from the top
// (FIFO, one CAS). Chase & Lev, "Dynamic circular work-stealing deque"
// (SPAA 2005), with the memory orders of Lê, Pop, Cohen & Zappa Nardelli,
// "Correct and efficient work-stealing for weak memory models" (PPoPP 2013),
// expressed with seq_cst operations instead of their two seq_cst fences:
// ThreadSanitizer does not model stand-alone fences, and on x86-64 the pop's
// seq_cst store (an xchg) costs what the fence (an mfence) would.
//
//        top (thieves CAS it up)                bottom (owner only writes)
//         |                                      |
//         v                                      v
//   ... [ t ][t+1][t+2] ...               [b-1][ b ) ...      slots mod capacity
//
// Elements live in [top, bottom). The buffer grows by doubling when full;
// the owner copies [top, bottom) into the new buffer and keeps the old one
// until the deque is destroyed, so a thief still reading the old buffer reads
// a valid (identical) element. Memory: at most 2x the largest size reached.
//
// push() is called from the scheduler's noexcept paths (a wake-up, a CES
// handoff): a growth that cannot get memory cannot be reported to anyone who
// could act on it, and the fiber it carries cannot be dropped. So it stops
// the program with a message naming the cause ("out of memory growing a
// worker's run queue from N to 2N fibers") rather than letting
// std::bad_alloc reach a noexcept frame and terminate without one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include <spindle/arch/config.hpp>
#include <spindle/arch/fatal.hpp>

namespace spindle::detail {

template <class T>
class ws_deque {
    static_assert(sizeof(T*) == sizeof(void*));

    struct buffer {
        explicit buffer(std::size_t cap) : mask(cap - 1), slots(new std::atomic<T*>[cap]) {}
        std::size_t mask;
        std::unique_ptr<std::atomic<T*>[]> slots;
        std::atomic<T*>& at(std::int64_t i) noexcept { return slots[static_cast<std::size_t>(i) & mask]; }
    };

public:
    explicit ws_deque(std::size_t initial_capacity = 256) {
        std::size_t cap = 1;
        while (cap < initial_capacity) cap <<= 1;
        buffers_.push_back(std::make_unique<buffer>(cap));
        buf_.store(buffers_.back().get(), std::memory_order_relaxed);  // published with the deque itself
    }
    ws_deque(const ws_deque&) = delete;
    ws_deque& operator=(const ws_deque&) = delete;

    // Owner only. Out of memory for a growth: stops the program (see above).
    void push(T* x) noexcept {
        std::int64_t b = bottom_.load(std::memory_order_relaxed);
        // acquire pairs with a thief's CAS of top: we do not overwrite a slot
        // before the thief that took it has read it.
        std::int64_t t = top_.load(std::memory_order_acquire);
        buffer* a = buf_.load(std::memory_order_relaxed);
        if (b - t > static_cast<std::int64_t>(a->mask)) a = grow(a, t, b);
        a->at(b).store(x, std::memory_order_relaxed);
        // Pairs with the thief's seq_cst load of bottom: the element and
        // everything written before the push are visible to the thief.
        // seq_cst rather than release: it is also the publish half of the
        // scheduler's Dekker pair with a parking worker (notify_sleeper).
        bottom_.store(b + 1, std::memory_order_seq_cst);
    }

    // Owner only: the most recently pushed element, or null.
    T* pop() noexcept {
        std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
        buffer* a = buf_.load(std::memory_order_relaxed);
        // seq_cst store then seq_cst load of top: with the thief's seq_cst
        // load of top then of bottom, one of us sees the other's claim on
        // the last element (the fence pair of Lê et al.).
        bottom_.store(b, std::memory_order_seq_cst);
        std::int64_t t = top_.load(std::memory_order_seq_cst);
        if (t > b) {  // empty
            bottom_.store(b + 1, std::memory_order_relaxed);
            return nullptr;
        }
        T* x = a->at(b).load(std::memory_order_relaxed);
        if (t == b) {
            // Last element: race the thieves for it with their CAS.
            if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst,
                                              std::memory_order_relaxed))
                x = nullptr;
            bottom_.store(b + 1, std::memory_order_relaxed);
        }
        return x;
    }

    // Any thread: the oldest element, or null (empty, or lost a race).
    T* steal() noexcept {
        std::int64_t t = top_.load(std::memory_order_seq_cst);
        std::int64_t b = bottom_.load(std::memory_order_seq_cst);  // pairs with push/pop stores
        if (t >= b) return nullptr;
        // acquire pairs with the release store in grow(); a buffer grown
        // before the push whose bottom we read is visible (that push's store
        // of bottom came after it and we read it).
        buffer* a = buf_.load(std::memory_order_acquire);
        T* x = a->at(t).load(std::memory_order_relaxed);
        // seq_cst CAS: claims slot t against other thieves and the owner's pop.
        if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed))
            return nullptr;
        return x;
    }

    // Owner only: what the next pop() will likely return, or null. A hint
    // to prefetch and never to dereference: a thief may take it at any
    // moment, and it may then run, finish and be freed. relaxed loads: a
    // guess, and nothing is read through it.
    [[nodiscard]] T* peek_hint() const noexcept {
        std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
        if (b < top_.load(std::memory_order_relaxed)) return nullptr;
        return buf_.load(std::memory_order_relaxed)->at(b).load(std::memory_order_relaxed);
    }

    // A racy size hint (exact for the owner when no thief is active).
    [[nodiscard]] bool maybe_nonempty() const noexcept {
        return bottom_.load(std::memory_order_relaxed) > top_.load(std::memory_order_relaxed);
    }
    // How many it holds: racy, exact for the owner when no thief is active.
    [[nodiscard]] std::size_t size_hint() const noexcept {
        const std::int64_t n = bottom_.load(std::memory_order_relaxed) - top_.load(std::memory_order_relaxed);
        return n > 0 ? static_cast<std::size_t>(n) : 0;
    }
    // seq_cst: the re-check of a parking worker (worker_loop.cpp, park_worker),
    // paired with push()'s seq_cst store of bottom.
    [[nodiscard]] bool empty_seq_cst() const noexcept {
        return bottom_.load(std::memory_order_seq_cst) <= top_.load(std::memory_order_seq_cst);
    }

private:
    SPINDLE_NOINLINE buffer* grow(buffer* a, std::int64_t t, std::int64_t b) noexcept {
        const std::size_t cap = (a->mask + 1) * 2;
        std::unique_ptr<buffer> nb;
        try {
            nb = std::make_unique<buffer>(cap);
            buffers_.reserve(buffers_.size() + 1);  // the push_back below cannot throw then
        } catch (const std::bad_alloc&) {
            fatal("out of memory growing a worker's run queue from %zu to %zu fibers", a->mask + 1, cap);
        }
        // relaxed copies: the new buffer is published by the release store of buf_ below.
        for (std::int64_t i = t; i < b; ++i) nb->at(i).store(a->at(i).load(std::memory_order_relaxed),
                                                            std::memory_order_relaxed);
        buffer* n = nb.get();
        buffers_.push_back(std::move(nb));  // the old buffer stays alive for late thieves
        // release pairs with the thief's acquire load of buf_.
        buf_.store(n, std::memory_order_release);
        return n;
    }

    alignas(arch::cache_line) std::atomic<std::int64_t> top_{0};     // thieves and owner CAS
    alignas(arch::cache_line) std::atomic<std::int64_t> bottom_{0};  // owner writes
    std::atomic<buffer*> buf_{nullptr};
    std::vector<std::unique_ptr<buffer>> buffers_;  // owner only; all ever used
};

}  // namespace spindle::detail
