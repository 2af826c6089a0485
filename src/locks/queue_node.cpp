// The MCS/CLH node pool (include/spindle/locks/detail/queue_node.hpp): the
// cold halves of a thread's node cache and the process-wide lock-free stack
// behind it.
#include <spindle/locks/detail/queue_node.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include <sys/mman.h>

#include <spindle/locks/detail/lock_support.hpp>

namespace spindle::detail {

namespace {

constexpr std::size_t chunk_bytes = 16 * 1024;
constexpr std::uint32_t nodes_per_chunk = chunk_bytes / sizeof(queue_node);  // 256
constexpr std::uint32_t max_chunks = 16384;  // 4 Mi nodes, 256 MiB: far past any real demand

// Chunk c holds the nodes with indices c * nodes_per_chunk + 1 ... + nodes_per_chunk.
// An entry is written before any of its nodes enters the pool; a popper
// reads it after an acquire load of the pool head that shows one of those
// indices, so the release CAS that pushed it (or a chain of push/pop pairs
// back to it) orders the write before the read: relaxed is enough.
constinit std::atomic<queue_node*> g_chunks[max_chunks] = {};
constinit std::atomic<std::uint32_t> g_chunk_count{0};
constinit std::atomic<std::size_t> g_carved{0};  // statistics only: relaxed
constinit std::atomic<std::size_t> g_pooled{0};  // statistics only: relaxed

// The pool stack's head: (tag << 32) | index of the top node (0: empty). The
// tag changes on every successful CAS, so a popper that read a top node, lost
// it to another thread and sees the same index on top again fails its CAS
// (ABA) unless 2^32 pushes and pops passed meanwhile.
constinit std::atomic<std::uint64_t> g_head{0};

constexpr std::uint32_t head_index(std::uint64_t h) noexcept { return static_cast<std::uint32_t>(h); }
constexpr std::uint64_t next_head(std::uint64_t h, std::uint32_t index) noexcept {
    return ((h >> 32) + 1) << 32 | index;
}

queue_node* node_at(std::uint32_t index) noexcept {
    const std::uint32_t i = index - 1;
    return g_chunks[i / nodes_per_chunk].load(std::memory_order_relaxed) + i % nodes_per_chunk;
}

// Push first..last (linked by free_next, `count` nodes) onto the pool.
void pool_push(queue_node* first, queue_node* last, std::uint32_t count) noexcept {
    for (queue_node* n = first; n != last; n = n->free_next)
        n->pool_next.store(n->free_next->index, std::memory_order_relaxed);
    std::uint64_t h = g_head.load(std::memory_order_relaxed);
    do {
        last->pool_next.store(head_index(h), std::memory_order_relaxed);
        // release pairs with pool_pop's acquire: the links above and all our
        // earlier writes to these nodes happen before the popper uses them.
    } while (!g_head.compare_exchange_weak(h, next_head(h, first->index), std::memory_order_release,
                                           std::memory_order_relaxed));
    g_pooled.fetch_add(count, std::memory_order_relaxed);
}

queue_node* pool_pop() noexcept {
    // acquire pairs with pool_push's release (see there).
    std::uint64_t h = g_head.load(std::memory_order_acquire);
    for (;;) {
        const std::uint32_t top = head_index(h);
        if (top == 0) return nullptr;
        queue_node* n = node_at(top);
        // Possibly stale (another thread popped n meanwhile): then the CAS
        // fails on the tag. Nodes are never unmapped, so the read is safe.
        const std::uint32_t below = n->pool_next.load(std::memory_order_relaxed);
        if (g_head.compare_exchange_weak(h, next_head(h, below), std::memory_order_acquire,
                                         std::memory_order_acquire)) {
            g_pooled.fetch_sub(1, std::memory_order_relaxed);
            return n;
        }
    }
}

// A fresh chunk, its nodes linked by free_next, first returned.
queue_node* carve_chunk() noexcept {
    const std::uint32_t c = g_chunk_count.fetch_add(1, std::memory_order_relaxed);
    if (c >= max_chunks) lock_misuse("spindle::detail node pool", &g_head, "more than 4 Mi MCS/CLH queue nodes in use");
    void* mem = ::mmap(nullptr, chunk_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) lock_misuse("spindle::detail node pool", &g_head, "mmap of a queue node chunk failed");
    auto* nodes = static_cast<queue_node*>(mem);
    for (std::uint32_t i = 0; i < nodes_per_chunk; ++i) {
        queue_node* n = new (nodes + i) queue_node;
        n->index = c * nodes_per_chunk + i + 1;
        n->free_next = i + 1 < nodes_per_chunk ? nodes + i + 1 : nullptr;
    }
    g_chunks[c].store(nodes, std::memory_order_relaxed);  // published by the push of its nodes (see g_chunks)
    g_carved.fetch_add(nodes_per_chunk, std::memory_order_relaxed);
    return nodes;
}

// The thread-exit hook: the whole cache back to the pool.
void flush_node_cache() noexcept {
    node_cache& c = tls(tl_node_cache);
    if (c.head != nullptr) {
        queue_node* last = c.head;
        while (last->free_next != nullptr) last = last->free_next;
        pool_push(c.head, last, c.count);
    }
    c.head = nullptr;
    c.count = 0;
    c.limit = 0;  // exiting: every later give_node spills at once
}

// Makes sure the cache is returned when the thread exits; false if it will
// not be (the thread is exiting): then cache nothing.
bool cache_allowed() noexcept {
    node_cache& c = tls(tl_node_cache);
    if (c.limit != 0) return true;
    if (!run_at_thread_exit(&flush_node_cache)) return false;
    c.limit = node_cache_limit;
    return true;
}

}  // namespace

queue_node* queue_node_at(std::uint32_t index) noexcept { return node_at(index); }

queue_node* node_cache_refill() noexcept {
    node_cache& c = tls(tl_node_cache);  // empty: take_node found no head
    const bool cache = cache_allowed();
    queue_node* n = pool_pop();
    if (n == nullptr) {
        // Pool empty: a whole chunk. The caller gets the first node, the
        // cache a batch, the pool the rest.
        n = carve_chunk();
        queue_node* rest = n->free_next;
        if (cache) {
            queue_node* last = rest;
            for (std::uint32_t i = 1; i < node_refill_batch; ++i) last = last->free_next;
            c.head = rest;
            c.count = node_refill_batch;
            rest = last->free_next;
            last->free_next = nullptr;
        }
        queue_node* last = rest;
        std::uint32_t count = 1;
        while (last->free_next != nullptr) {
            last = last->free_next;
            ++count;
        }
        pool_push(rest, last, count);
        return n;
    }
    if (cache) {
        for (std::uint32_t i = 1; i < node_refill_batch; ++i) {
            queue_node* m = pool_pop();
            if (m == nullptr) break;
            m->free_next = c.head;
            c.head = m;
            ++c.count;
        }
    }
    return n;
}

void node_cache_spill() noexcept {
    node_cache& c = tls(tl_node_cache);  // count > limit
    std::uint32_t keep = 0;
    if (cache_allowed()) {
        if (c.count <= c.limit) return;  // the first push of a thread: the limit was 0
        keep = node_cache_limit / 2;
    }
    // Keep the `keep` most recent (warm) nodes, give the rest back.
    queue_node* first = c.head;
    queue_node* kept_last = nullptr;
    for (std::uint32_t i = 0; i < keep; ++i) {
        kept_last = first;
        first = first->free_next;
    }
    queue_node* last = first;
    while (last->free_next != nullptr) last = last->free_next;
    pool_push(first, last, c.count - keep);
    if (kept_last != nullptr) kept_last->free_next = nullptr;
    else c.head = nullptr;
    c.count = keep;
}

queue_node_stats queue_node_pool_stats() noexcept {
    return {g_carved.load(std::memory_order_relaxed), g_pooled.load(std::memory_order_relaxed)};
}

}  // namespace spindle::detail
