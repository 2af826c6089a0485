// spindle::queue_pool / spindle::stack_pool slow paths and element storage
// (include/spindle/sync/pool.hpp, include/spindle/sync/detail/pool_storage.hpp).
#include <spindle/sync/pool.hpp>

#include <spindle/arch/context.hpp>
#include <spindle/arch/fatal.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

namespace {

// How long a retrieve waits for the insert it is paired with before it
// breaks it. That insert is a few instructions away (between the put's FAA
// and its store) unless its thread was preempted.
constexpr unsigned retrieve_spins = 256;

std::size_t clamp_capacity(std::size_t capacity) noexcept {
    if (capacity == 0) return 1;
    return capacity > pool_max_capacity ? pool_max_capacity : capacity;
}

// log2 of the ring's slot count: 2 * capacity rounded up to a power of two.
unsigned ring_shift(std::size_t capacity) noexcept {
    const std::size_t n = 2 * clamp_capacity(capacity);
    unsigned s = 0;
    while ((std::size_t{1} << s) < n) ++s;
    return s;
}

}  // namespace

// ---- pool_ring ----------------------------------------------------------------

// Twice the capacity, rounded up to a power of two: with at most `capacity`
// elements stored, an insert lands on a slot whose previous lap was
// retrieved at least `capacity` retrieves ago, so it seldom waits for a
// retrieve still under way (with exactly `capacity` slots, a full pool puts
// every insert right behind a retrieve).
pool_ring::pool_ring(std::size_t capacity)
    : slots_(new slot[std::size_t{1} << ring_shift(capacity)]),
      mask_((std::uint64_t{1} << ring_shift(capacity)) - 1),
      shift_(ring_shift(capacity)) {}

void pool_ring::bad_turn(std::uint64_t t, std::uint64_t empty) const noexcept {
    fatal("%s storage %p: slot turn %llu, expected lap %llu", name, static_cast<const void*>(this),
          static_cast<unsigned long long>(t), static_cast<unsigned long long>(empty / next_lap));
}

bool pool_ring::insert_slow(slot& s, std::uint64_t empty, std::uint64_t v) noexcept {
    unsigned spins = 0;
    std::uint64_t t = s.turn.load(std::memory_order_acquire);  // as the CAS below
    for (;;) {
        if (t == empty) {
            // (L, EMPTY) -> (L, FILLING); acquire as in try_insert. Fails if
            // our retriever breaks the slot meanwhile.
            if (s.turn.compare_exchange_weak(t, empty | filling, std::memory_order_acquire,
                                             std::memory_order_acquire)) {
                s.value.store(v, std::memory_order_relaxed);
                s.turn.store(empty | full, std::memory_order_release);  // as in try_insert
                return true;
            }
            continue;
        }
        // Lap L+1 or later: our retriever broke the slot (and later laps may
        // have used it since). We fail; it counts itself again.
        if (t >= empty + next_lap) return false;
        // Lap L-1 still under way: its retrieve (which has made its FAA, see
        // pool.hpp) has not emptied the slot yet.
        if (t < empty) {
            backoff(spins);
            t = s.turn.load(std::memory_order_acquire);
            continue;
        }
        bad_turn(t, empty);  // (L, FILLING) or (L, FULL): only we write those
    }
}

bool pool_ring::retrieve_slow(slot& s, std::uint64_t empty, std::uint64_t& v) noexcept {
    unsigned spins = 0, waited = 0;
    std::uint64_t t = s.turn.load(std::memory_order_acquire);  // as in try_retrieve
    for (;;) {
        if (t == (empty | full)) {
            v = s.value.load(std::memory_order_relaxed);
            s.turn.store(empty + next_lap, std::memory_order_release);  // as in try_retrieve
            return true;
        }
        if (t == empty && waited >= retrieve_spins) {
            // (L, EMPTY) -> (L+1, EMPTY): break our insert. We publish
            // nothing (lap L+1's insert still synchronizes with lap L-1's
            // release store, through this RMW: a release sequence); acquire
            // only because the failure side, which may see FULL, needs it.
            if (s.turn.compare_exchange_strong(t, empty + next_lap, std::memory_order_acquire,
                                               std::memory_order_acquire))
                return false;
            continue;  // the insert came after all (FILLING now)
        }
        if (t > (empty | full)) bad_turn(t, empty);  // only our own retrieve ends lap L
        if (t == empty) {
            ++waited;  // our insert has not come yet
            arch::cpu_relax();
        } else {
            backoff(spins);  // (L, FILLING), or lap L-1 under way
        }
        t = s.turn.load(std::memory_order_acquire);
    }
}

// ---- pool_stack ---------------------------------------------------------------

pool_stack::pool_stack(std::size_t capacity) : nodes_(new node[clamp_capacity(capacity)]) {
    const std::size_t n = clamp_capacity(capacity);
    // Every node free, linked 0 -> 1 -> ... -> n-1. relaxed: published by
    // the pool's construction.
    for (std::size_t i = 0; i + 1 < n; ++i) nodes_[i].next.store(static_cast<std::uint32_t>(i + 2), std::memory_order_relaxed);
    free_.store(pack(0, 1), std::memory_order_relaxed);
}

bool pool_stack::insert_slow(std::uint64_t v, std::uint32_t n) noexcept {
    unsigned spins = 0;
    std::uint64_t h = top_.load(std::memory_order_relaxed);  // as in try_insert
    for (;;) {
        if (marked(h)) {
            // (t, 2^31|k) -> (t+1, k > 1 ? 2^31|k-1 : 0): consume a failure
            // mark; our element goes back to the size word. relaxed: we
            // publish nothing, and the RMW keeps top_'s release sequence.
            const std::uint32_t k = field(h) & ~marks_bit;
            if (top_.compare_exchange_weak(h, pack(tag(h) + 1, k > 1 ? (marks_bit | (k - 1)) : 0),
                                           std::memory_order_relaxed, std::memory_order_relaxed)) {
                if (n != no_node) free_node(n);
                return false;
            }
            continue;
        }
        if (n == no_node) {
            n = try_alloc();
            if (n == no_node) {
                // Every node is in use: by stored elements, by puts under
                // way, and -- since we may put (pool.hpp, "Storage") -- by at
                // least one take under way that will free one or leave a mark.
                backoff(spins);
                h = top_.load(std::memory_order_relaxed);
                continue;
            }
            nodes_[n].value.store(v, std::memory_order_relaxed);  // as in try_insert
        }
        nodes_[n].next.store(field(h), std::memory_order_relaxed);
        // (t, top) -> (t+1, n+1); release as in try_insert.
        if (top_.compare_exchange_weak(h, pack(tag(h) + 1, n + 1), std::memory_order_release,
                                       std::memory_order_relaxed))
            return true;
    }
}

bool pool_stack::retrieve_slow(std::uint64_t& v) noexcept {
    unsigned waited = 0;
    std::uint64_t h = top_.load(std::memory_order_acquire);  // as in try_retrieve
    for (;;) {
        if (has_node(h)) {
            const std::uint32_t n = field(h) - 1;
            const std::uint32_t next = nodes_[n].next.load(std::memory_order_relaxed);  // as in try_retrieve
            if (top_.compare_exchange_weak(h, pack(tag(h) + 1, next), std::memory_order_acquire,
                                           std::memory_order_acquire)) {
                v = nodes_[n].value.load(std::memory_order_relaxed);
                free_node(n);
                return true;
            }
            continue;
        }
        // Empty (or marked): the put we were counted against is under way.
        if (waited < retrieve_spins) {
            ++waited;
            arch::cpu_relax();
            h = top_.load(std::memory_order_acquire);
            continue;
        }
        // (t, 0 or 2^31|k) -> (t+1, 2^31|k+1): leave a failure mark; the
        // next insert fails and its put counts its element again. We
        // publish nothing (as insert_slow's consume); acquire for the failure
        // side, which may find a pushed node to pop.
        const std::uint32_t k = marked(h) ? (field(h) & ~marks_bit) : 0;
        if (top_.compare_exchange_weak(h, pack(tag(h) + 1, marks_bit | (k + 1)), std::memory_order_acquire,
                                       std::memory_order_acquire))
            return false;
    }
}

// ---- pool_core ----------------------------------------------------------------

template <class Storage>
pool_core<Storage>::pool_core(std::size_t capacity, handoff policy)
    : capacity_(static_cast<std::int64_t>(clamp_capacity(capacity))),
      policy_(policy),
      storage_(capacity),
      q_(cqs_cancellation::smart, cqs_resumption::sync,
         cqs_hooks<std::uint64_t>{&on_cancellation, &complete_refused_resume, &return_value, this}) {
#if SPINDLE_DEBUG_CHECKS
    if (capacity == 0 || capacity > pool_max_capacity)
        fatal("%s %p: capacity %zu outside [1, %zu]", Storage::name, static_cast<void*>(this), capacity,
              pool_max_capacity);
#endif
}

template <class Storage>
pool_core<Storage>::~pool_core() {
#if SPINDLE_DEBUG_CHECKS
    // relaxed: quiescent by contract; a negative word means counted takers.
    const std::int64_t s = size_.load(std::memory_order_relaxed);
    if (s < 0)
        fatal("%s %p destroyed with %lld waiting takers", Storage::name, static_cast<void*>(this),
              static_cast<long long>(-s));
#endif
}

template <class Storage>
void pool_core<Storage>::bad_put(std::int64_t s) const noexcept {
    fatal("%s %p: put() beyond capacity %lld (it held %lld elements)", Storage::name,
          static_cast<const void*>(this), static_cast<long long>(capacity_), static_cast<long long>(s));
}

// `s`: the word before our increment. Either s < 0 (a taker is counted: hand
// v over) or s >= 0 and the insert just failed.
template <class Storage>
void pool_core<Storage>::put_slow(std::int64_t s, std::uint64_t v, handoff policy) noexcept {
    for (;;) {
        // Hand v to the oldest waiter. Sync resumption: fails (BROKEN) if
        // that taker did not reach its cell in time; it will count itself
        // again.
        if (s < 0 && q_.resume(v, policy)) return;
        // The resume or the insert failed: its partner counts itself again,
        // and we count our element again. (size): s -> s + 1, relaxed as in put().
        s = size_.fetch_add(1, std::memory_order_relaxed);
#if SPINDLE_DEBUG_CHECKS
        if (s >= capacity_) bad_put(s);
#endif
        if (s >= 0 && storage_.try_insert(v)) return;
    }
}

// `s`: the word before our decrement. Either s <= 0 (we are counted as
// waiting: suspend) or s > 0 and the retrieve just failed.
template <class Storage>
bool pool_core<Storage>::take_slow(std::int64_t s, std::uint64_t& v, std::chrono::steady_clock::time_point deadline,
                                   std::stop_token* st) noexcept {
    for (;;) {
        if (s <= 0) {
            auto r = q_.suspend(deadline, st);
            switch (r.status) {
            case cqs_status::resumed:
                // A put handed its element to us; the cqs orders its resume
                // (and what the putter did before) before our wake-up.
                v = r.value;
                return true;
            case cqs_status::cancelled:
                // on_cancellation gave our decrement back; any element on its
                // way to us goes to the storage or to the next taker.
                return false;
            case cqs_status::broken:
                break;  // the put meant for us counted its element again
            }
        }
        // (size): s -> s - 1, relaxed as in take().
        s = size_.fetch_sub(1, std::memory_order_relaxed);
        if (s > 0 && storage_.try_retrieve(v)) return true;
    }
}

// Smart cancellation (paper Listing 5, elements for permits). The cancelled
// taker gives back its decrement, (size) s -> s + 1. s < 0: others are still
// counted; resumes skip our cell (CANCELLED). s >= 0: a put counted us and
// its element is coming to our cell: refuse it (REFUSE); our increment has
// counted that element in the storage, where complete_refused_resume puts it.
// relaxed: the word carries no data (see put()).
template <class Storage>
bool pool_core<Storage>::on_cancellation(void* self, std::uint64_t) noexcept {
    auto* p = static_cast<pool_core*>(self);
    return p->size_.fetch_add(1, std::memory_order_relaxed) < 0;
}

// The refused element, already counted by on_cancellation: store it. If a
// retriever broke that insert, it counts itself again and the element goes
// round once more (put from the top, dispatching any waiter it wakes: we run
// on the cancelled taker, which should not give up its worker for this).
template <class Storage>
void pool_core<Storage>::complete_refused_resume(void* self, std::uint64_t v) noexcept {
    auto* p = static_cast<pool_core*>(self);
    if (!p->storage_.try_insert(v)) p->put_slow(0, v, handoff::dispatch);
}

// Smart + sync: an element delegated to a cancelled taker could not be
// handed to the next one (BROKEN). It is an element nobody has: put it.
template <class Storage>
void pool_core<Storage>::return_value(void* self, std::uint64_t v) noexcept {
    auto* p = static_cast<pool_core*>(self);
    // (size): s -> s + 1, relaxed as in put().
    const std::int64_t s = p->size_.fetch_add(1, std::memory_order_relaxed);
    if (s >= 0 && p->storage_.try_insert(v)) return;
    p->put_slow(s, v, handoff::dispatch);
}

template class pool_core<pool_ring>;
template class pool_core<pool_stack>;

}  // namespace spindle::detail
