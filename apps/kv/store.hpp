// apps/kv/store.hpp — the item store of spindle-kv: a memory-bounded,
// sharded hash table with memcached's item semantics and LRU eviction.
//
//     spindle::kv::store s({.memory_limit = 64u << 20});
//     s.put(kv::mode::set, "k", /*flags*/ 0, /*exptime*/ 0, "value");
//     s.get("k", [&](const kv::item_info& i, std::string_view v) { ... });
//
// Callable from fibers and from plain threads: every shard is guarded by a
// spindle::shared_mutex (CES handoff), readers shared, writers exclusive.
// No call does I/O or waits for anything but a shard's lock; a sink passed
// to get() runs with that lock held shared and must not block or re-enter
// the store.
//
// Semantics follow memcached 1.6 (doc/protocol.txt and its source where they
// differ), as a memcached client sees them:
//
//   call        | outcome
//   ------------+-------------------------------------------------------------
//   put set     | stored (replaces any live item)
//   put add     | stored if no live item, else not_stored (and, as memcached
//               | does, the existing item is bumped in the LRU)
//   put replace | stored if a live item, else not_stored
//   put append, | the live item's value grows by `value`; flags and exptime
//     prepend   | of the old item are kept (the arguments are ignored);
//               | not_stored if no live item, or if the grown item would
//               | exceed item_size_max (memcached's allocation fails there)
//   put cas     | stored if a live item whose cas is `cas_unique`; exists if
//               | a live item with another cas, and always with a
//               | cas_unique of 0 or with use_cas = false (memcached 1.6.18
//               | with -C answers EXISTS to every cas on a live item);
//               | not_found if none
//   any put     | too_large if key + value exceed item_size_max; no_memory
//               | if the item is larger than memory_limit or nothing can be
//               | evicted to make room. A set that fails either way also
//               | deletes the old item, as memcached does. A put whose
//               | exptime is already past is stored and dead at once.
//   get         | calls sink(info, value) for a live item, returns true
//   touch       | a live item gets a new exptime; false if none (its cas
//               | stays; an exptime in the past removes it)
//   get_and_touch | both, in one lock hold (gat/gats): the sink sees the
//               | item even when the new exptime has already passed
//   remove      | true if a live item was removed
//   delta       | incr/decr of a decimal value that fits 64 bits: incr wraps
//               | at 2^64, decr stops at 0. The value is read as memcached
//               | 1.6.18's safe_strtoull reads it: leading whitespace, an
//               | optional sign, digits (any number of them, while the value
//               | is at most 2^64 - 1), then the end, whitespace or a NUL
//               | ("5 abc" is 5); a '-' is refused when the result is
//               | negative as a signed number. When the new number has no
//               | more digits than the old value had bytes, it is written
//               | in place, padded with spaces to the old length, with a new
//               | cas: "100" decr 95 reads "5  ", "005" incr 1 reads "6  "
//               | (as memcached). Longer: a new item of just the digits
//               | ("99" incr 1 is "100"). not_found; non_numeric;
//               | no_memory when the longer item finds no room
//   flush_all   | memcached's flush_all [delay]: with cas, the flush takes
//               | effect at now + delay - 1 (a delay <= 0: now - 1) and
//               | kills every item stored at or before that second; an
//               | immediate one also kills every item with an older cas, so
//               | items stored later in the same second survive. Without
//               | cas (use_cas = false) it takes effect at now + delay (or
//               | now) and kills items stored in that second too, even after
//               | the flush. delay is an exptime: over 30 days, a Unix time
//
// Every stored item gets a new cas value from one counter (strictly
// increasing, never 0), as memcached does unless run with -C; with
// use_cas = false every item's cas is 0, and a cas command behaves as
// memcached -C's does: EXISTS on a live item, NOT_FOUND otherwise. One key's
// successive items get increasing values (the cas is taken under the
// shard's lock, when the item is linked).
//
// Expiry times come as the client sent them (protocol.txt "Expiration
// times"): 0 never; a negative number: already expired; up to 30 days
// (2,592,000 s): seconds from now; larger: an absolute Unix time. A dead
// item (expired or flushed) is never returned and is reclaimed lazily: when
// found by a lookup, and, before anything live is evicted, by a sweep of
// every shard that may hold dead items (one that holds items with an
// exptime and was not swept since the clock last moved, or one not swept
// since a flush_all took effect).
//
// Memory: every item is charged its key, value and a fixed per-item
// overhead (item_overhead, below) against one global budget, memory_limit.
// A put that would exceed the budget first frees dead items, then evicts
// live items in least-recently-used order (approximate: each shard keeps its
// own LRU; a get marks an item active without taking the lock exclusively,
// and eviction gives an active item a second chance, as memcached's
// segmented LRU does). Eviction starts at the shard being written and moves
// on to other shards until enough is free, so no item is ever evicted while
// the live items plus the new one fit within memory_limit (exactly so when
// no other put runs at the same time; concurrent puts may each evict for
// the others' reservations).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string_view>

namespace spindle::kv {

struct store_config {
    std::size_t memory_limit = std::size_t{64} << 20;  // -m, in bytes
    std::size_t item_size_max = std::size_t{1} << 20;  // -I: key + value
    unsigned shards = 64;                              // a power of two
    bool use_cas = true;                               // false: -C
};

// Bytes charged per item beyond its key and value (the header, the hash
// link and the allocator's rounding, roughly); stats "bytes" counts it.
inline constexpr std::size_t item_overhead = 64;

inline constexpr std::size_t key_max = 250;  // protocol.txt: 250 bytes

enum class mode : std::uint8_t { set, add, replace, append, prepend, cas };

enum class put_status : std::uint8_t {
    stored,      // STORED
    not_stored,  // NOT_STORED
    exists,      // EXISTS (cas mismatch)
    not_found,   // NOT_FOUND (cas on a missing item)
    too_large,   // SERVER_ERROR object too large for cache
    no_memory,   // SERVER_ERROR out of memory storing object
};

// no_memory: SERVER_ERROR out of memory (the number grew longer and no room
// could be made for it).
enum class delta_status : std::uint8_t { ok, not_found, non_numeric, no_memory };

struct item_info {
    std::uint32_t flags;
    std::uint64_t cas;
};

// The store's notion of now: seconds since some origin. Tests pass their own
// to move time forward; the default reads CLOCK_MONOTONIC_COARSE (whole
// seconds since construction) and maps absolute Unix times through
// CLOCK_REALTIME at construction, as memcached's process_started does.
struct clock_source {
    std::function<std::uint32_t()> now;  // seconds since the store's origin
    std::time_t origin_unix = 0;         // Unix time of now() == 0
};

struct store_stats {
    std::uint64_t curr_items = 0;   // live items (dead ones not yet reclaimed count too, as in memcached)
    // Items stored since start, as memcached 1.6.18 counts them (every item
    // it links): each stored put, and each incr whose number outgrew its
    // old value's bytes (a new item); not an incr or decr written in place,
    // a touch, a gat, a remove or a refused put.
    std::uint64_t total_items = 0;
    std::uint64_t bytes = 0;        // charged bytes of current items
    std::uint64_t evictions = 0;    // live items evicted for room
    std::uint64_t reclaimed = 0;    // dead items freed (on lookup, or to make room)
    std::uint64_t expired_unfetched = 0;
    std::uint64_t evicted_unfetched = 0;
    std::uint64_t limit_maxbytes = 0;
};

class store {
public:
    explicit store(store_config cfg = {}, clock_source clock = {});
    ~store();
    store(const store&) = delete;
    store& operator=(const store&) = delete;

    // Stores `value` under `key` as `m` says (table above). `exptime` as the
    // client sent it. `cas_unique` is read only by mode::cas. Precondition:
    // 0 < key.size() <= key_max (the protocol layer checks and answers
    // CLIENT_ERROR; debug builds abort naming the store).
    put_status put(mode m, std::string_view key, std::uint32_t flags, std::int64_t exptime, std::string_view value,
                   std::uint64_t cas_unique = 0);

    // Calls sink(info, value) with the shard's lock held shared, if `key`
    // is live; then returns true. The sink must not block or call the store.
    template <class Sink>
    bool get(std::string_view key, Sink&& sink) {
        return lookup(key, nullptr, &call_sink<Sink>, &sink);
    }

    // gat/gats: sets the exptime of a live item and calls the sink with it.
    template <class Sink>
    bool get_and_touch(std::string_view key, std::int64_t exptime, Sink&& sink) {
        return lookup(key, &exptime, &call_sink<Sink>, &sink);
    }

    bool touch(std::string_view key, std::int64_t exptime);
    bool remove(std::string_view key);

    // incr (`incr` true) or decr by `delta`; on ok, `result` is the new value.
    delta_status delta(std::string_view key, bool incr, std::uint64_t delta, std::uint64_t& result);

    // flush_all [delay]: delay as an exptime (0: now).
    void flush_all(std::int64_t delay = 0);

    store_stats stats() const;

    // The store's clock, for the protocol layer's "time" and "uptime" stats.
    std::uint32_t now() const;
    std::time_t unix_now() const;

private:
    using sink_fn = void (*)(void* ctx, const item_info& info, std::string_view value);
    template <class Sink>
    static void call_sink(void* ctx, const item_info& info, std::string_view value) {
        (*static_cast<std::remove_reference_t<Sink>*>(ctx))(info, value);
    }
    // touch_exptime null: a plain get.
    bool lookup(std::string_view key, const std::int64_t* touch_exptime, sink_fn fn, void* ctx);

    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace spindle::kv
