// apps/kv/store.cpp — spindle-kv's item store (apps/kv/store.hpp).
//
// Layout:
//
//     store::impl
//       used          global byte budget: charged bytes of linked items plus
//                     the reservations of puts under way (one atomic)
//       next_cas      the cas counter
//       oldest_live,  flush_all's state, as memcached's settings.oldest_live
//       oldest_cas    and settings.oldest_cas
//       shards[]      2^k of them; a key's shard is its hash's top k bits
//
//     shard (one per cache line or more)
//       hint          written under the lock, read without it by other
//                     shards' puts (has_expiring, clean_at, flush_dirty)
//       lock          spindle::shared_mutex: lookups shared, the rest
//                     exclusive; guards everything below
//       buckets[]     intrusive hash chains (item::hnext), indexed by the
//                     hash's low bits, doubled when count > buckets
//       head, tail    the LRU: an intrusive list, head most recently stored
//                     (or bumped), tail the next to go
//       counters      the shard's share of store_stats
//
//     item: one allocation, header then key then value
//
//      0       8       16      24      32      40   44   48   52   56 58 59
//     +-------+-------+-------+-------+-------+----+----+----+----+--+-+
//     | hnext | prev  | next  | hash  |  cas  |exp |time|flg |nval|nk|b|  key  value
//     +-------+-------+-------+-------+-------+----+----+----+----+--+-+
//
//     b: bits, active (a get since the item last left the LRU's tail) and
//     fetched (a get ever), the only field written under the shared lock.
//
// A get: the hash, the shared lock, the chain walk (hash compare, then the
// key), the sink; when the item turns out dead, the lock is dropped and
// taken exclusively to reclaim it. The LRU is not touched: the active bit
// stands for the move to the head, and eviction honours it (second chance),
// so readers never write shared list pointers.
//
// Times. Internally every time is the clock's seconds plus rel_offset (2),
// as memcached's rel_time_t: 0 is "never" for an exptime and "no flush" for
// oldest_live, and 1 means "already expired". memcached starts its clock at
// ~62 for the same reason.
//
// Room for a put. The put reserves its item's full charge in `used`
// (fetch_add) while holding its shard's lock; the item it replaces, if any,
// is freed when the put commits, so the put fits when used - old's charge
// <= memory_limit ("credit" below). Otherwise, in this order:
//   1. dead items of its own shard (a sweep of the shard, when it may hold
//      any: see needs_sweep);
//   2. dead items of every other shard (each swept under its own lock,
//      after the put dropped its own);
//   3. live items of its own shard, from the LRU's tail, skipping the item
//      being replaced (still under the put's lock);
//   4. live items of the other shards, one shard at a time (the put's lock
//      dropped), then the put starts over.
// Each step stops as soon as the put fits. A put that dropped its lock
// looks its key up again, since everything may have changed.
//
// Lock order: no thread ever holds two shard locks. A put that needs room
// from another shard lets its own go first (steps 2 and 4), and the sweeps
// and evictions elsewhere take one shard lock at a time, so there is no
// order to violate and no cycle of waiters: no deadlock. flush_all takes
// each shard's lock in turn, alone. A sink runs under a shard's lock and
// must not call the store (the header's contract).
#include "store.hpp"

#include <spindle/arch/config.hpp>
#include <spindle/arch/fatal.hpp>
#include <spindle/sync/shared_mutex.hpp>

#include <atomic>
#include <charconv>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <time.h>

namespace spindle::kv {

namespace {

constexpr std::int64_t rel_max_delta = 60 * 60 * 24 * 30;  // memcached's REALTIME_MAXDELTA
constexpr std::uint32_t rel_offset = 2;   // internal time = clock seconds + rel_offset
constexpr std::uint32_t rel_expired = 1;  // an exptime that has always passed

constexpr std::uint8_t bit_active = 1;   // got since it last left the LRU's tail
constexpr std::uint8_t bit_fetched = 2;  // got at least once

struct item {
    item* hnext;  // hash chain
    item* prev;   // LRU, towards the head (more recent)
    item* next;   // LRU, towards the tail
    std::uint64_t hash;
    std::uint64_t cas;
    std::uint32_t exptime;  // internal time; 0: never
    std::uint32_t time;     // internal time it was stored (memcached's it->time)
    std::uint32_t flags;
    std::uint32_t nvalue;
    std::uint16_t nkey;
    // Set by get (relaxed, under the shard's lock held shared, by any number
    // of readers at once, all storing the same bits); read and cleared by
    // eviction under the lock held exclusively. The lock orders them (the
    // readers' unlock_shared release, the evictor's lock acquire), so
    // relaxed is enough: the bits carry no other data.
    std::atomic<std::uint8_t> bits;

    char* data() noexcept { return reinterpret_cast<char*>(this + 1); }
    const char* data() const noexcept { return reinterpret_cast<const char*>(this + 1); }
    std::string_view key() const noexcept { return {data(), nkey}; }
    std::string_view value() const noexcept { return {data() + nkey, nvalue}; }
    std::size_t charge() const noexcept { return item_overhead + nkey + nvalue; }
};

// A new item, linked nowhere, with key and value (value = a + b, so that
// append and prepend need no copy in between). exptime, time and cas are
// the commit's to set.
item* make_item(std::uint64_t hash, std::string_view key, std::uint32_t flags, std::string_view a,
                std::string_view b = {}) {
    void* mem = ::operator new(sizeof(item) + key.size() + a.size() + b.size());
    item* it = new (mem) item{};
    it->hash = hash;
    it->flags = flags;
    it->nkey = static_cast<std::uint16_t>(key.size());
    it->nvalue = static_cast<std::uint32_t>(a.size() + b.size());
    char* p = it->data();
    if (!key.empty()) std::memcpy(p, key.data(), key.size());
    if (!a.empty()) std::memcpy(p + key.size(), a.data(), a.size());
    if (!b.empty()) std::memcpy(p + key.size() + a.size(), b.data(), b.size());
    return it;
}

void free_item(item* it) noexcept {
    if (!it) return;
    it->~item();
    ::operator delete(static_cast<void*>(it));
}

std::uint64_t rotl(std::uint64_t x, int r) noexcept { return (x << r) | (x >> (64 - r)); }

std::uint64_t fmix64(std::uint64_t k) noexcept {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

// MurmurHash3's 64-bit block mix over 8-byte words, and its finalizer: every
// key bit reaches every hash bit, so the top bits (the shard) and the low
// bits (the bucket) are both well spread. No allocation, no copy.
std::uint64_t hash_key(std::string_view key) noexcept {
    constexpr std::uint64_t c1 = 0x87c37b91114253d5ULL;
    constexpr std::uint64_t c2 = 0x4cf5ad432745937fULL;
    const char* p = key.data();
    std::size_t n = key.size();
    std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    auto block = [&](std::uint64_t k) {
        k *= c1;
        k = rotl(k, 31);
        k *= c2;
        h ^= k;
        h = rotl(h, 27) * 5 + 0x52dce729;
    };
    for (; n >= 8; p += 8, n -= 8) {
        std::uint64_t k;
        std::memcpy(&k, p, 8);
        block(k);
    }
    if (n) {
        std::uint64_t k = 0;
        std::memcpy(&k, p, n);
        block(k);
    }
    return fmix64(h ^ key.size());
}

bool c_isspace(char c) noexcept { return c == ' ' || (c >= '\t' && c <= '\r'); }

// The value as memcached's do_add_delta reads it: safe_strtoull() on the
// item's data, which memcached stores followed by "\r\n". So strtoull's
// rules (leading whitespace, an optional sign, decimal digits; a '-' negates
// modulo 2^64; ERANGE past 2^64 - 1) and safe_strtoull's: the digits must
// be followed by whitespace or a NUL (the end of the value is: the '\r'),
// and a result that is negative as a signed number is refused if a '-' came
// before it. Lengths are not limited: "000000000000000000000001" is 1. A
// value of nothing but whitespace is refused (memcached reads on past the
// item's "\r\n" there, into whatever memory follows).
bool parse_number(std::string_view v, std::uint64_t& out) noexcept {
    std::size_t i = 0;
    while (i < v.size() && c_isspace(v[i])) ++i;
    bool negative = false;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) {
        negative = v[i] == '-';
        ++i;
    }
    const std::size_t digits = i;
    std::uint64_t x = 0;
    bool range = false;
    for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) {
        const auto d = static_cast<std::uint64_t>(v[i] - '0');
        if (x > (std::numeric_limits<std::uint64_t>::max() - d) / 10) range = true;
        x = x * 10 + d;
    }
    if (i == digits || range) return false;
    if (i < v.size() && !c_isspace(v[i]) && v[i] != '\0') return false;
    if (negative) x = 0 - x;
    if (static_cast<std::int64_t>(x) < 0 && std::memchr(v.data(), '-', i) != nullptr) return false;
    out = x;
    return true;
}

struct alignas(spindle::arch::cache_line) shard {
    // What other shards' puts read without the lock, to decide whether this
    // shard may hold dead items (store::impl::needs_sweep). Written under the
    // lock held exclusively; relaxed everywhere: a stale read only makes a
    // put sweep a shard for nothing, or evict a live item while a dead one
    // appears elsewhere at the same moment (the guarantee is for a quiet
    // store). Its own cache line, written at most once a second or so.
    struct alignas(spindle::arch::cache_line) sweep_hint {
        std::atomic<bool> has_expiring{false};  // some item has an exptime
        std::atomic<std::uint32_t> clean_at{0};  // internal time of the last full sweep
        std::atomic<bool> flush_dirty{false};    // a flush_all since that sweep
    } hint;

    spindle::shared_mutex lock;
    // ---- guarded by `lock` ----
    std::unique_ptr<item*[]> buckets;
    std::size_t mask = 0;  // buckets - 1
    std::size_t count = 0;
    std::size_t expiring = 0;  // items with exptime != 0
    item* head = nullptr;      // LRU: most recently stored
    item* tail = nullptr;      // LRU: next to evict
    std::uint64_t bytes = 0;
    std::uint64_t total_items = 0;
    std::uint64_t evictions = 0;
    std::uint64_t reclaimed = 0;
    std::uint64_t expired_unfetched = 0;
    std::uint64_t evicted_unfetched = 0;
};

}  // namespace

struct store::impl {
    store_config cfg;
    clock_source clock;
    bool default_clock = false;
    timespec mono_origin{};
    unsigned shard_bits = 0;
    std::unique_ptr<shard[]> shards;

    // Charged bytes of every linked item plus the reservations of the puts
    // under way. Pairs with nothing: a byte count, no data is published
    // through it (the items are, by the shard locks). Relaxed.
    std::atomic<std::uint64_t> used{0};
    // The last cas handed out. fetch_add is one RMW on one atomic, so the
    // values are unique and follow its modification order whatever the
    // memory order; the item that carries one is published by its shard's
    // lock. And a cas is taken under the shard's lock at commit, so one
    // key's successive items get increasing values. Relaxed.
    std::atomic<std::uint64_t> next_cas{0};
    // flush_all's state. flush_all stores oldest_cas (relaxed) and then
    // oldest_live (release); dead() loads oldest_live (acquire) and then
    // oldest_cas, so it never pairs a new oldest_live with an older
    // oldest_cas than the one stored with it.
    std::atomic<std::uint32_t> oldest_live{0};
    std::atomic<std::uint64_t> oldest_cas{0};

    impl(store_config c, clock_source k) : cfg(c), clock(std::move(k)) {
        if (cfg.shards == 0) cfg.shards = 1;
        while ((1u << shard_bits) < cfg.shards && shard_bits < 16) ++shard_bits;
        cfg.shards = 1u << shard_bits;
        shards = std::make_unique<shard[]>(cfg.shards);
        for (unsigned i = 0; i < cfg.shards; ++i) {
            shards[i].buckets = std::make_unique<item*[]>(16);
            shards[i].mask = 15;
        }
        if (!clock.now) {
            default_clock = true;
            ::clock_gettime(CLOCK_MONOTONIC_COARSE, &mono_origin);
            clock.origin_unix = ::time(nullptr);
        }
    }

    ~impl() {
        for (unsigned i = 0; i < cfg.shards; ++i) {
            for (item* it = shards[i].head; it;) {
                item* next = it->next;
                free_item(it);
                it = next;
            }
        }
    }

    // ---- time ----

    std::uint32_t clock_now() const {
        if (!default_clock) return clock.now();
        timespec ts;
        ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        auto s = ts.tv_sec - mono_origin.tv_sec;
        if (ts.tv_nsec < mono_origin.tv_nsec) --s;
        return static_cast<std::uint32_t>(s);
    }
    std::uint32_t rel_now() const { return clock_now() + rel_offset; }

    // memcached's realtime(): an exptime as the client sent it, to internal
    // time. Negative: expired (memcached turns it into REALTIME_MAXDELTA + 1,
    // an absolute time long past). Absolute times at or before the origin
    // are expired too; past the end of internal time, the end.
    std::uint32_t realtime(std::int64_t exptime, std::uint32_t now) const noexcept {
        constexpr std::int64_t end = std::numeric_limits<std::uint32_t>::max();
        if (exptime == 0) return 0;
        if (exptime < 0) return rel_expired;
        std::int64_t r;
        if (exptime > rel_max_delta) {
            r = exptime - static_cast<std::int64_t>(clock.origin_unix) + rel_offset;
            if (r <= rel_expired) return rel_expired;
        } else {
            r = static_cast<std::int64_t>(now) + exptime;
        }
        return static_cast<std::uint32_t>(r > end ? end : r);
    }

    // memcached's do_item_get checks: expired, or flushed (item_is_flushed).
    bool dead(const item& it, std::uint32_t now) const noexcept {
        if (it.exptime != 0 && it.exptime <= now) return true;
        const std::uint32_t ol = oldest_live.load(std::memory_order_acquire);  // pairs with flush_all's release
        if (ol == 0 || ol > now) return false;
        if (it.time <= ol) return true;
        const std::uint64_t oc = oldest_cas.load(std::memory_order_relaxed);  // ordered by the acquire above
        return oc != 0 && it.cas != 0 && it.cas < oc;
    }

    // ---- one shard, its lock held ----

    shard& shard_of(std::uint64_t h) noexcept { return shards[shard_index(h)]; }
    std::size_t shard_index(std::uint64_t h) const noexcept {
        return shard_bits == 0 ? 0 : static_cast<std::size_t>(h >> (64 - shard_bits));
    }

    static item* find(const shard& s, std::uint64_t h, std::string_view key) noexcept {
        for (item* it = s.buckets[h & s.mask]; it; it = it->hnext) {
            if (it->hash == h && it->nkey == key.size() && std::memcmp(it->data(), key.data(), key.size()) == 0)
                return it;
        }
        return nullptr;
    }

    void lru_unlink(shard& s, item* it) noexcept {
        (it->prev ? it->prev->next : s.head) = it->next;
        (it->next ? it->next->prev : s.tail) = it->prev;
        it->prev = it->next = nullptr;
    }
    void lru_push_head(shard& s, item* it) noexcept {
        it->prev = nullptr;
        it->next = s.head;
        (s.head ? s.head->prev : s.tail) = it;
        s.head = it;
    }
    void bump(shard& s, item* it) noexcept {
        if (s.head == it) return;
        lru_unlink(s, it);
        lru_push_head(s, it);
    }

    void count_exptime(shard& s, std::uint32_t exptime, bool add) noexcept {
        if (exptime == 0) return;
        if (add) {
            if (s.expiring++ == 0) s.hint.has_expiring.store(true, std::memory_order_relaxed);
        } else {
            if (--s.expiring == 0) s.hint.has_expiring.store(false, std::memory_order_relaxed);
        }
    }

    // Links `it`, whose charge is already in `used`.
    void link(shard& s, item* it) noexcept {
        if (s.count >= s.mask + 1) grow(s);
        item*& b = s.buckets[it->hash & s.mask];
        it->hnext = b;
        b = it;
        lru_push_head(s, it);
        ++s.count;
        s.bytes += it->charge();
        count_exptime(s, it->exptime, true);
    }

    void grow(shard& s) {
        const std::size_t n = (s.mask + 1) * 2;
        auto nb = std::make_unique<item*[]>(n);
        for (std::size_t i = 0; i <= s.mask; ++i) {
            for (item* it = s.buckets[i]; it;) {
                item* next = it->hnext;
                item*& b = nb[it->hash & (n - 1)];
                it->hnext = b;
                b = it;
                it = next;
            }
        }
        s.buckets = std::move(nb);
        s.mask = n - 1;
    }

    // Unlinks `it` and frees it, giving its charge back to the budget.
    void unlink_free(shard& s, item* it) noexcept {
        item** p = &s.buckets[it->hash & s.mask];
        while (*p != it) p = &(*p)->hnext;
        *p = it->hnext;
        lru_unlink(s, it);
        --s.count;
        s.bytes -= it->charge();
        count_exptime(s, it->exptime, false);
        used.fetch_sub(it->charge(), std::memory_order_relaxed);  // a count; see `used`
        free_item(it);
    }

    void reclaim(shard& s, item* it) noexcept {
        ++s.reclaimed;
        if (!(it->bits.load(std::memory_order_relaxed) & bit_fetched)) ++s.expired_unfetched;
        unlink_free(s, it);
    }

    void evict(shard& s, item* it) noexcept {
        ++s.evictions;
        if (!(it->bits.load(std::memory_order_relaxed) & bit_fetched)) ++s.evicted_unfetched;
        unlink_free(s, it);
    }

    // The live item under `key`, reclaiming a dead one. Lock held exclusively.
    item* find_live(shard& s, std::uint64_t h, std::string_view key, std::uint32_t now) noexcept {
        item* it = find(s, h, key);
        if (it && dead(*it, now)) {
            reclaim(s, it);
            return nullptr;
        }
        return it;
    }

    // ---- room ----

    bool fits(std::size_t credit) const noexcept {
        return used.load(std::memory_order_relaxed) <= cfg.memory_limit + credit;  // a count; see `used`
    }

    // Whether `s` may hold dead items: it holds items with an exptime and
    // was last swept before `now` (they can only have died as the clock
    // moved), or a flush_all is in effect and the shard was last swept
    // before it took effect or before it was issued. Items that are dead
    // when stored or touched are never linked or are unlinked at once, so
    // nothing else makes a dead item. Exact under the lock; a hint without.
    bool needs_sweep(const shard& s, std::uint32_t now) const noexcept {
        const std::uint32_t at = s.hint.clean_at.load(std::memory_order_relaxed);  // see sweep_hint
        if (at < now && s.hint.has_expiring.load(std::memory_order_relaxed)) return true;
        const std::uint32_t ol = oldest_live.load(std::memory_order_acquire);  // pairs with flush_all's release
        if (ol == 0 || ol > now) return false;
        return at < ol || s.hint.flush_dirty.load(std::memory_order_relaxed);
    }

    // Reclaims every dead item of `s`. Lock held exclusively.
    void sweep(shard& s, std::uint32_t now) noexcept {
        for (item* it = s.tail; it;) {
            item* prev = it->prev;
            if (dead(*it, now)) reclaim(s, it);
            it = prev;
        }
        if (s.hint.clean_at.load(std::memory_order_relaxed) < now) s.hint.clean_at.store(now, std::memory_order_relaxed);
        s.hint.flush_dirty.store(false, std::memory_order_relaxed);
    }

    bool others_may_hold_dead(std::size_t own, std::uint32_t now) const noexcept {
        for (std::size_t i = 0; i < cfg.shards; ++i) {
            if (i != own && needs_sweep(shards[i], now)) return true;
        }
        return false;
    }

    // Frees items of `s` from the LRU's tail until the put fits: dead ones
    // reclaimed, active ones moved to the head with the bit cleared (their
    // second chance; the head itself has nowhere to go), others evicted.
    // Never `pinned` (the item a put replaces). True if anything was freed.
    // Lock held exclusively.
    bool evict_live(shard& s, const item* pinned, std::size_t credit, std::uint32_t now) noexcept {
        bool freed = false;
        for (item* it = s.tail; it && !fits(credit);) {
            item* prev = it->prev;
            if (it == pinned) {
            } else if (dead(*it, now)) {
                reclaim(s, it);
                freed = true;
            } else if ((it->bits.load(std::memory_order_relaxed) & bit_active) && it != s.head) {
                it->bits.store(it->bits.load(std::memory_order_relaxed) & ~bit_active, std::memory_order_relaxed);
                bump(s, it);
            } else {
                evict(s, it);
                freed = true;
            }
            it = prev;
        }
        return freed;
    }

    enum class room { fits, retry, none };

    // Makes the put under way in shard `own` fit (the order in the file's
    // head). `g` holds own's lock exclusively; on `retry` and `none` it has
    // been released (`retry`: something was freed elsewhere, look the key up
    // again; `none`: nothing left to free).
    room make_room(std::size_t own, std::unique_lock<spindle::shared_mutex>& g, const item* pinned,
                   std::size_t credit, std::uint32_t now) {
        shard& s = shards[own];
        if (fits(credit)) return room::fits;
        if (needs_sweep(s, now)) sweep(s, now);
        if (fits(credit)) return room::fits;
        if (others_may_hold_dead(own, now)) {
            g.unlock();
            for (std::size_t i = 1; i < cfg.shards && !fits(credit); ++i) {
                shard& t = shards[(own + i) & (cfg.shards - 1)];
                if (!needs_sweep(t, now)) continue;
                std::unique_lock tg(t.lock);
                if (needs_sweep(t, now)) sweep(t, now);
            }
            return room::retry;
        }
        evict_live(s, pinned, credit, now);
        if (fits(credit)) return room::fits;
        g.unlock();
        bool freed = false;
        for (std::size_t i = 1; i < cfg.shards && !fits(credit); ++i) {
            shard& t = shards[(own + i) & (cfg.shards - 1)];
            std::unique_lock tg(t.lock);
            freed |= evict_live(t, nullptr, credit, now);
        }
        return freed || fits(credit) ? room::retry : room::none;
    }

    void adjust_reservation(std::size_t& reserved, std::size_t want) noexcept {
        // A count; see `used`.
        if (want > reserved) used.fetch_add(want - reserved, std::memory_order_relaxed);
        else if (want < reserved) used.fetch_sub(reserved - want, std::memory_order_relaxed);
        reserved = want;
    }

    // The way out of put() and delta() that links nothing: the reservation
    // goes back to the budget and the item built for it (null if none) is
    // freed. Returns `st`, for `return d.give_up(...)`.
    template <class Status>
    Status give_up(std::size_t& reserved, item* fresh, Status st) noexcept {
        adjust_reservation(reserved, 0);
        free_item(fresh);
        return st;
    }

    std::uint64_t new_cas() noexcept {
        // Relaxed: see next_cas.
        return cfg.use_cas ? next_cas.fetch_add(1, std::memory_order_relaxed) + 1 : 0;
    }

    // Links `fresh` (reserved in `used`) in place of `old` (may be null).
    // Returns false when fresh was dead on arrival and has been dropped.
    bool commit(shard& s, item* old, item* fresh, std::uint32_t exptime, std::uint32_t now) noexcept {
        fresh->exptime = exptime;
        fresh->time = now;
        fresh->cas = new_cas();
        fresh->bits.store(0, std::memory_order_relaxed);  // not yet visible to anyone
        if (old) unlink_free(s, old);
        if (dead(*fresh, now)) {
            used.fetch_sub(fresh->charge(), std::memory_order_relaxed);  // a count; see `used`
            free_item(fresh);
            return false;
        }
        link(s, fresh);
        return true;
    }

    // Removes a live `key` if there is one (set's failure paths).
    bool remove(std::string_view key) {
        const std::uint64_t h = hash_key(key);
        shard& s = shard_of(h);
        const std::uint32_t now = rel_now();
        std::unique_lock g(s.lock);
        item* it = find_live(s, h, key, now);
        if (!it) return false;
        unlink_free(s, it);
        return true;
    }
};

namespace {

void check_key(const void* store, const char* what, std::string_view key) noexcept {
#if SPINDLE_DEBUG_CHECKS
    if (key.empty() || key.size() > key_max)
        spindle::detail::fatal("spindle::kv::store %p: %s() with a key of %zu bytes (a key has 1 to %zu)", store,
                               what, key.size(), key_max);
#else
    (void)store;
    (void)what;
    (void)key;
#endif
}

}  // namespace

store::store(store_config cfg, clock_source clock) : impl_(std::make_unique<impl>(cfg, std::move(clock))) {}

store::~store() = default;

put_status store::put(mode m, std::string_view key, std::uint32_t flags, std::int64_t exptime,
                      std::string_view value, std::uint64_t cas_unique) {
    check_key(this, "put", key);
    impl& d = *impl_;
    if (key.size() + value.size() > d.cfg.item_size_max) {
        if (m == mode::set) d.remove(key);  // as memcached: no stale value after a failed set
        return put_status::too_large;
    }
    const std::uint64_t h = hash_key(key);
    const std::size_t si = d.shard_index(h);
    shard& s = d.shards[si];
    const bool combine = m == mode::append || m == mode::prepend;
    // set, add, replace, cas: the item is built before the lock is taken.
    item* fresh = combine ? nullptr : make_item(h, key, flags, value);
    if (fresh && fresh->charge() > d.cfg.memory_limit) {
        // memcached allocates before it looks at the old item: an item that
        // cannot fit even in an empty store is out of memory, whatever m.
        free_item(fresh);
        if (m == mode::set) d.remove(key);
        return put_status::no_memory;
    }
    std::size_t reserved = 0;
    for (;;) {
        const std::uint32_t now = d.rel_now();
        std::unique_lock g(s.lock);
        item* old = d.find_live(s, h, key, now);
        switch (m) {
        case mode::set:
            break;
        case mode::add:
            if (old) {
                d.bump(s, old);  // memcached promotes the existing item
                return d.give_up(reserved, fresh, put_status::not_stored);
            }
            break;
        case mode::replace:
        case mode::append:
        case mode::prepend:
            if (!old) return d.give_up(reserved, fresh, put_status::not_stored);
            break;
        case mode::cas:
            if (!old) return d.give_up(reserved, fresh, put_status::not_found);
            // memcached 1.6: a request cas of 0 never matches, and with -C
            // every item's cas is 0, so every cas on a live item is EXISTS.
            if (!d.cfg.use_cas || cas_unique == 0 || old->cas != cas_unique)
                return d.give_up(reserved, fresh, put_status::exists);
            break;
        }
        std::uint32_t rel_exp;
        if (combine) {
            // memcached allocates the combined item; past the size limit the
            // allocation fails and the reply is NOT_STORED.
            if (key.size() + old->nvalue + value.size() > d.cfg.item_size_max)
                return d.give_up(reserved, fresh, put_status::not_stored);
            free_item(fresh);
            fresh = m == mode::append ? make_item(h, key, old->flags, old->value(), value)
                                      : make_item(h, key, old->flags, value, old->value());
            rel_exp = old->exptime;
        } else {
            rel_exp = d.realtime(exptime, now);
        }
        if (fresh->charge() > d.cfg.memory_limit) return d.give_up(reserved, fresh, put_status::no_memory);
        d.adjust_reservation(reserved, fresh->charge());
        switch (d.make_room(si, g, old, old ? old->charge() : 0, now)) {
        case impl::room::fits:
            break;
        case impl::room::retry:
            continue;
        case impl::room::none:
            if (m == mode::set) d.remove(key);
            return d.give_up(reserved, fresh, put_status::no_memory);
        }
        d.commit(s, old, fresh, rel_exp, now);
        ++s.total_items;
        return put_status::stored;
    }
}

bool store::lookup(std::string_view key, const std::int64_t* touch_exptime, sink_fn fn, void* ctx) {
    check_key(this, touch_exptime ? "get_and_touch" : "get", key);
    impl& d = *impl_;
    const std::uint64_t h = hash_key(key);
    shard& s = d.shard_of(h);
    const std::uint32_t now = d.rel_now();
    if (!touch_exptime) {
        {
            std::shared_lock g(s.lock);
            item* it = impl::find(s, h, key);
            if (!it) return false;
            if (!d.dead(*it, now)) {
                // See item::bits. A load first: a hot item's line is not
                // written by every get.
                if (it->bits.load(std::memory_order_relaxed) != (bit_active | bit_fetched))
                    it->bits.store(bit_active | bit_fetched, std::memory_order_relaxed);
                fn(ctx, item_info{it->flags, it->cas}, it->value());
                return true;
            }
        }
        std::unique_lock g(s.lock);
        d.find_live(s, h, key, now);  // reclaims it, unless someone did first
        return false;
    }
    std::unique_lock g(s.lock);
    item* it = d.find_live(s, h, key, now);
    if (!it) return false;
    d.count_exptime(s, it->exptime, false);
    it->exptime = d.realtime(*touch_exptime, now);
    d.count_exptime(s, it->exptime, true);
    it->bits.store(bit_active | bit_fetched, std::memory_order_relaxed);  // see item::bits
    fn(ctx, item_info{it->flags, it->cas}, it->value());
    if (d.dead(*it, now)) d.unlink_free(s, it);  // gat with an exptime in the past
    return true;
}

bool store::touch(std::string_view key, std::int64_t exptime) {
    check_key(this, "touch", key);
    impl& d = *impl_;
    const std::uint64_t h = hash_key(key);
    shard& s = d.shard_of(h);
    const std::uint32_t now = d.rel_now();
    std::unique_lock g(s.lock);
    item* it = d.find_live(s, h, key, now);
    if (!it) return false;
    d.count_exptime(s, it->exptime, false);
    it->exptime = d.realtime(exptime, now);
    d.count_exptime(s, it->exptime, true);
    it->bits.store(bit_active | bit_fetched, std::memory_order_relaxed);  // see item::bits
    if (d.dead(*it, now)) d.unlink_free(s, it);
    return true;
}

bool store::remove(std::string_view key) {
    check_key(this, "remove", key);
    return impl_->remove(key);
}

delta_status store::delta(std::string_view key, bool incr, std::uint64_t delta, std::uint64_t& result) {
    check_key(this, "delta", key);
    impl& d = *impl_;
    const std::uint64_t h = hash_key(key);
    const std::size_t si = d.shard_index(h);
    shard& s = d.shards[si];
    std::size_t reserved = 0;
    item* fresh = nullptr;
    for (;;) {
        const std::uint32_t now = d.rel_now();
        std::unique_lock g(s.lock);
        item* old = d.find_live(s, h, key, now);
        if (!old) return d.give_up(reserved, fresh, delta_status::not_found);
        std::uint64_t v;
        if (!parse_number(old->value(), v)) return d.give_up(reserved, fresh, delta_status::non_numeric);
        if (incr) v += delta;  // wraps at 2^64, as memcached's
        else v = delta > v ? 0 : v - delta;
        char buf[24];
        const auto n = static_cast<std::size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf);
        if (n <= old->nvalue) {
            // memcached rewrites the item in place, padded with spaces to
            // its old length, with a new cas. Nobody reads it: the lock is
            // held exclusively.
            char* p = old->data() + old->nkey;
            std::memcpy(p, buf, n);
            std::memset(p + n, ' ', old->nvalue - n);
            old->cas = d.new_cas();
            old->time = now;
            d.bump(s, old);
            result = v;
            return d.give_up(reserved, fresh, delta_status::ok);
        }
        // Longer than before: a new item of exactly the digits.
        free_item(fresh);
        fresh = make_item(h, key, old->flags, std::string_view(buf, n));
        if (fresh->charge() > d.cfg.memory_limit) return d.give_up(reserved, fresh, delta_status::no_memory);
        d.adjust_reservation(reserved, fresh->charge());
        switch (d.make_room(si, g, old, old->charge(), now)) {
        case impl::room::fits:
            break;
        case impl::room::retry:
            continue;
        case impl::room::none:
            return d.give_up(reserved, fresh, delta_status::no_memory);
        }
        d.commit(s, old, fresh, old->exptime, now);
        ++s.total_items;  // a new item, as memcached's item_replace counts it
        result = v;
        return delta_status::ok;
    }
}

void store::flush_all(std::int64_t delay) {
    impl& d = *impl_;
    const std::uint32_t now = d.rel_now();
    // memcached's process_flush_all_command: the flush takes effect at
    // oldest_live; with cas it is one second earlier, and an immediate one
    // also kills every item with a cas below the next one, so that items
    // stored later in the same second survive (without cas they do not).
    const std::uint32_t new_oldest = delay > 0 ? d.realtime(delay, now) : now;
    std::uint32_t ol;
    if (d.cfg.use_cas) {
        ol = new_oldest - 1;
        if (ol <= now) d.oldest_cas.store(d.new_cas(), std::memory_order_relaxed);  // ordered by the release below
    } else {
        ol = new_oldest;
    }
    d.oldest_live.store(ol, std::memory_order_release);  // pairs with dead()'s and needs_sweep()'s acquire
    // Every shard must be swept again before its live items are evicted
    // (needs_sweep). One lock at a time: a sweep under way finishes first
    // and then sees the flag set.
    for (unsigned i = 0; i < d.cfg.shards; ++i) {
        std::unique_lock g(d.shards[i].lock);
        d.shards[i].hint.flush_dirty.store(true, std::memory_order_relaxed);  // see sweep_hint
    }
}

store_stats store::stats() const {
    const impl& d = *impl_;
    store_stats st;
    for (unsigned i = 0; i < d.cfg.shards; ++i) {
        shard& s = d.shards[i];
        std::shared_lock g(s.lock);
        st.curr_items += s.count;
        st.total_items += s.total_items;
        st.bytes += s.bytes;
        st.evictions += s.evictions;
        st.reclaimed += s.reclaimed;
        st.expired_unfetched += s.expired_unfetched;
        st.evicted_unfetched += s.evicted_unfetched;
    }
    st.limit_maxbytes = d.cfg.memory_limit;
    return st;
}

std::uint32_t store::now() const { return impl_->clock_now(); }

std::time_t store::unix_now() const { return impl_->clock.origin_unix + static_cast<std::time_t>(impl_->clock_now()); }

}  // namespace spindle::kv
