// spindle::kv::store (apps/kv/store.hpp): every put mode and its statuses,
// cas, append/prepend, incr/decr as memcached 1.6.18 answers them, and
// total_items as it counts them; expiry, touch and gat on an injected
// clock (relative and absolute times), flush_all now and delayed, with
// and without cas; the size and memory limits; eviction (oldest first,
// only as much as needed, dead items before live ones, the active bit's
// second chance); fibers and threads mixing every operation; misuse aborts
// in debug builds.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/scheduler.hpp>

#include "store.hpp"

namespace {

namespace kv = spindle::kv;
using kv::delta_status;
using kv::mode;
using kv::put_status;

constexpr std::time_t kOrigin = 1'700'000'000;  // the injected clock's Unix time at 0

// A clock the test moves by hand.
struct manual_clock {
    std::shared_ptr<std::atomic<std::uint32_t>> t = std::make_shared<std::atomic<std::uint32_t>>(0);
    kv::clock_source source() const {
        auto p = t;
        return {[p] { return p->load(); }, kOrigin};
    }
    void advance(std::uint32_t s) const { t->fetch_add(s); }
};

struct got {
    std::string value;
    std::uint32_t flags = 0;
    std::uint64_t cas = 0;
};

std::optional<got> get(kv::store& s, std::string_view key) {
    std::optional<got> r;
    s.get(key, [&](const kv::item_info& i, std::string_view v) { r = got{std::string(v), i.flags, i.cas}; });
    return r;
}

std::optional<std::string> value(kv::store& s, std::string_view key) {
    auto g = get(s, key);
    if (!g) return std::nullopt;
    return g->value;
}

// prefix + decimal i (not "k" + std::to_string(i): GCC 12 warns, wrongly,
// about the operator+ that inlines).
std::string name(const char* prefix, long i) {
    std::string s(prefix);
    s += std::to_string(i);
    return s;
}

std::size_t charge(std::string_view key, std::string_view value) { return kv::item_overhead + key.size() + value.size(); }

// ---- put modes ------------------------------------------------------------

TEST(KvStore, SetAddReplaceFollowMemcached) {
    kv::store s;
    EXPECT_EQ(s.put(mode::replace, "k", 1, 0, "r"), put_status::not_stored);
    EXPECT_FALSE(get(s, "k"));
    EXPECT_EQ(s.put(mode::add, "k", 2, 0, "a"), put_status::stored);
    EXPECT_EQ(s.put(mode::add, "k", 3, 0, "b"), put_status::not_stored);
    auto g = get(s, "k");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->value, "a");
    EXPECT_EQ(g->flags, 2u);
    EXPECT_EQ(s.put(mode::replace, "k", 4, 0, "replaced"), put_status::stored);
    g = get(s, "k");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->value, "replaced");
    EXPECT_EQ(g->flags, 4u);
    EXPECT_EQ(s.put(mode::set, "k", 0xffffffffu, 0, ""), put_status::stored);
    g = get(s, "k");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->value, "");
    EXPECT_EQ(g->flags, 0xffffffffu);
    EXPECT_TRUE(s.remove("k"));
    EXPECT_FALSE(s.remove("k"));
    EXPECT_FALSE(get(s, "k"));
    EXPECT_EQ(s.put(mode::add, "k", 0, 0, "again"), put_status::stored);
    EXPECT_EQ(value(s, "k"), "again");
    auto st = s.stats();
    EXPECT_EQ(st.curr_items, 1u);
    EXPECT_EQ(st.total_items, 4u);  // add, replace, set, add; the refused ones do not count
    EXPECT_EQ(st.bytes, charge("k", "again"));
}

TEST(KvStore, KeysWithEveryByteAndLengthAreDistinct) {
    kv::store s({.shards = 4});
    std::vector<std::string> keys;
    for (std::size_t n = 1; n <= kv::key_max; n += 7) keys.emplace_back(n, 'x');
    keys.emplace_back(kv::key_max, 'x');
    keys.emplace_back("a\0b", 3);
    keys.emplace_back("a\0c", 3);
    for (int c = 1; c < 256; c += 3) keys.emplace_back(1, static_cast<char>(c));
    for (std::size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(s.put(mode::set, keys[i], static_cast<std::uint32_t>(i), 0, std::to_string(i)), put_status::stored);
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
        auto g = get(s, keys[i]);
        ASSERT_TRUE(g) << i;
        EXPECT_EQ(g->value, std::to_string(i));
        EXPECT_EQ(g->flags, i);
    }
    EXPECT_EQ(s.stats().curr_items, keys.size());
}

TEST(KvStore, AppendAndPrependKeepFlagsAndExptime) {
    manual_clock clk;
    kv::store s({}, clk.source());
    EXPECT_EQ(s.put(mode::append, "k", 1, 0, "x"), put_status::not_stored);
    EXPECT_EQ(s.put(mode::prepend, "k", 1, 0, "x"), put_status::not_stored);
    EXPECT_FALSE(get(s, "k"));
    ASSERT_EQ(s.put(mode::set, "k", 7, 100, "mid"), put_status::stored);
    const auto cas0 = get(s, "k")->cas;
    EXPECT_EQ(s.put(mode::append, "k", 9, 0, "-end"), put_status::stored);
    EXPECT_EQ(s.put(mode::prepend, "k", 9, 5, "start-"), put_status::stored);
    auto g = get(s, "k");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->value, "start-mid-end");
    EXPECT_EQ(g->flags, 7u);
    EXPECT_GT(g->cas, cas0);
    EXPECT_EQ(s.stats().bytes, charge("k", "start-mid-end"));
    clk.advance(99);
    EXPECT_TRUE(get(s, "k"));  // the prepend's exptime (5) was ignored
    clk.advance(1);
    EXPECT_FALSE(get(s, "k"));  // the set's (100) was kept
}

TEST(KvStore, CasStoresOnlyOnTheCurrentValue) {
    kv::store s;
    EXPECT_EQ(s.put(mode::cas, "k", 0, 0, "v", 1), put_status::not_found);
    ASSERT_EQ(s.put(mode::set, "k", 1, 0, "v1"), put_status::stored);
    const auto c1 = get(s, "k")->cas;
    EXPECT_NE(c1, 0u);
    EXPECT_EQ(s.put(mode::cas, "k", 2, 0, "v2", c1 + 1), put_status::exists);
    EXPECT_EQ(s.put(mode::cas, "k", 2, 0, "v2", 0), put_status::exists);  // memcached: 0 never matches
    EXPECT_EQ(value(s, "k"), "v1");
    EXPECT_EQ(s.put(mode::cas, "k", 2, 0, "v2", c1), put_status::stored);
    auto g = get(s, "k");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->value, "v2");
    EXPECT_EQ(g->flags, 2u);
    EXPECT_GT(g->cas, c1);
    EXPECT_EQ(s.put(mode::cas, "k", 3, 0, "v3", c1), put_status::exists);  // the old cas is spent
    // Every store of any key takes a new, larger cas.
    std::uint64_t last = g->cas;
    for (int i = 0; i < 100; ++i) {
        const std::string key = name("c", i % 7);
        ASSERT_EQ(s.put(mode::set, key, 0, 0, "x"), put_status::stored);
        const auto c = get(s, key)->cas;
        EXPECT_GT(c, last);
        last = c;
    }
    // A touch keeps the cas; an append takes a new one.
    EXPECT_TRUE(s.touch("c0", 1000));
    const auto before = get(s, "c0")->cas;
    EXPECT_TRUE(s.touch("c0", 0));
    EXPECT_EQ(get(s, "c0")->cas, before);
    ASSERT_EQ(s.put(mode::append, "c0", 0, 0, "y"), put_status::stored);
    EXPECT_GT(get(s, "c0")->cas, before);
}

TEST(KvStore, WithoutCasEveryCasIsZeroAndCasCommandsExist) {
    kv::store s({.use_cas = false});
    ASSERT_EQ(s.put(mode::set, "k", 0, 0, "v"), put_status::stored);
    EXPECT_EQ(get(s, "k")->cas, 0u);
    // memcached 1.6.18 -C: EXISTS on a live item whatever the cas, even 0.
    EXPECT_EQ(s.put(mode::cas, "k", 0, 0, "w", 0), put_status::exists);
    EXPECT_EQ(s.put(mode::cas, "k", 0, 0, "w", 5), put_status::exists);
    EXPECT_EQ(s.put(mode::cas, "missing", 0, 0, "w", 5), put_status::not_found);
    EXPECT_EQ(value(s, "k"), "v");
    std::uint64_t r = 0;
    ASSERT_EQ(s.put(mode::set, "n", 0, 0, "1"), put_status::stored);
    EXPECT_EQ(s.delta("n", true, 1, r), delta_status::ok);
    EXPECT_EQ(get(s, "n")->cas, 0u);
}

// ---- limits -----------------------------------------------------------------

TEST(KvStore, TooLargeCountsKeyAndValue) {
    kv::store s({.item_size_max = 100});
    const std::string fits(99, 'v'), over(100, 'v');
    EXPECT_EQ(s.put(mode::set, "k", 0, 0, fits), put_status::stored);  // 1 + 99
    EXPECT_EQ(s.put(mode::add, "k", 0, 0, over), put_status::too_large);
    EXPECT_EQ(s.put(mode::replace, "k", 0, 0, over), put_status::too_large);
    EXPECT_EQ(s.put(mode::cas, "k", 0, 0, over, 1), put_status::too_large);
    EXPECT_EQ(value(s, "k"), fits);  // only a set drops the old item
    EXPECT_EQ(s.put(mode::set, "k", 0, 0, over), put_status::too_large);
    EXPECT_FALSE(get(s, "k"));
    // append/prepend: the data alone too large is too_large; the grown item
    // too large is not_stored (memcached's allocation of it fails).
    ASSERT_EQ(s.put(mode::set, "a", 0, 0, std::string(60, 'a')), put_status::stored);
    EXPECT_EQ(s.put(mode::append, "a", 0, 0, over), put_status::too_large);
    EXPECT_EQ(s.put(mode::append, "a", 0, 0, std::string(40, 'b')), put_status::not_stored);
    EXPECT_EQ(s.put(mode::prepend, "a", 0, 0, std::string(40, 'b')), put_status::not_stored);
    EXPECT_EQ(s.put(mode::append, "a", 0, 0, std::string(39, 'b')), put_status::stored);
    EXPECT_EQ(value(s, "a"), std::string(60, 'a') + std::string(39, 'b'));
}

TEST(KvStore, AnItemLargerThanMemoryIsOutOfMemory) {
    kv::store s({.memory_limit = 1000, .shards = 4});
    const std::string big(1000, 'v');
    ASSERT_EQ(s.put(mode::set, "k", 0, 0, "small"), put_status::stored);
    EXPECT_EQ(s.put(mode::add, "k", 0, 0, big), put_status::no_memory);
    EXPECT_EQ(value(s, "k"), "small");
    EXPECT_EQ(s.put(mode::set, "k", 0, 0, big), put_status::no_memory);
    EXPECT_FALSE(get(s, "k"));  // as memcached: no stale value after a failed set
    const std::string exact(1000 - kv::item_overhead - 1, 'v');
    EXPECT_EQ(s.put(mode::set, "k", 0, 0, exact), put_status::stored);
    EXPECT_EQ(s.stats().bytes, 1000u);
    ASSERT_EQ(s.put(mode::set, "n", 0, 0, "9"), put_status::stored);  // evicts k
    EXPECT_FALSE(get(s, "k"));
    EXPECT_EQ(s.stats().evictions, 1u);
}

// ---- incr / decr --------------------------------------------------------------

struct delta_case {
    const char* before;
    bool incr;
    std::uint64_t by;
    delta_status status;
    std::uint64_t result;
    const char* after;  // the value a get then returns
};

// Each row checked against memcached 1.6.18 (a socket script: set, then
// incr/decr, then get).
TEST(KvStore, IncrDecrAnswerAsMemcached) {
    const delta_case cases[] = {
        {"100", false, 95, delta_status::ok, 5, "5  "},  // shorter: in place, space padded
        {"005", true, 1, delta_status::ok, 6, "6  "},
        {"99", true, 1, delta_status::ok, 100, "100"},   // longer: a new item
        {"5", false, 9, delta_status::ok, 0, "0"},       // decr stops at 0
        {"18446744073709551615", true, 1, delta_status::ok, 0, "0                   "},  // incr wraps
        {"18446744073709551615", true, 2, delta_status::ok, 1, "1                   "},
        {"18446744073709551614", false, 0, delta_status::ok, 18446744073709551614ull, "18446744073709551614"},
        {"000000000000000000000001", true, 1, delta_status::ok, 2, "2                       "},
        {"5 abc", true, 1, delta_status::ok, 6, "6    "},  // digits then whitespace: the rest ignored
        {" 7 ", true, 1, delta_status::ok, 8, "8  "},
        {"+7", true, 1, delta_status::ok, 8, "8 "},
        {"7\t", true, 1, delta_status::ok, 8, "8 "},
        {"-0", true, 1, delta_status::ok, 1, "1 "},
        {"-18446744073709551615", true, 1, delta_status::ok, 2, "2                    "},  // strtoull's '-'
        {"0", true, 18446744073709551615ull, delta_status::ok, 18446744073709551615ull, "18446744073709551615"},
        {"18446744073709551616", true, 1, delta_status::non_numeric, 0, "18446744073709551616"},
        {"99999999999999999999", true, 1, delta_status::non_numeric, 0, "99999999999999999999"},
        {"-5", true, 1, delta_status::non_numeric, 0, "-5"},
        {"7x", true, 1, delta_status::non_numeric, 0, "7x"},
        {"", true, 1, delta_status::non_numeric, 0, ""},
        {"   ", true, 1, delta_status::non_numeric, 0, "   "},
        {"x", false, 1, delta_status::non_numeric, 0, "x"},
        {"0x10", true, 1, delta_status::non_numeric, 0, "0x10"},
    };
    kv::store s;
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string("value '") + c.before + (c.incr ? "' incr " : "' decr ") + std::to_string(c.by));
        ASSERT_EQ(s.put(mode::set, "n", 42, 0, c.before), put_status::stored);
        const auto cas0 = get(s, "n")->cas;
        std::uint64_t r = 12345;
        EXPECT_EQ(s.delta("n", c.incr, c.by, r), c.status);
        auto g = get(s, "n");
        ASSERT_TRUE(g);
        EXPECT_EQ(g->value, c.after);
        EXPECT_EQ(g->flags, 42u);
        if (c.status == delta_status::ok) {
            EXPECT_EQ(r, c.result);
            EXPECT_GT(g->cas, cas0);
        } else {
            EXPECT_EQ(g->cas, cas0);
        }
        EXPECT_EQ(s.stats().bytes, charge("n", c.after));
    }
    // A value with a NUL after the digits: strtoull stops there.
    ASSERT_EQ(s.put(mode::set, "n", 0, 0, std::string_view("7\0" "8", 3)), put_status::stored);
    std::uint64_t r = 0;
    EXPECT_EQ(s.delta("n", true, 1, r), delta_status::ok);
    EXPECT_EQ(r, 8u);
    EXPECT_EQ(value(s, "n"), "8  ");
    EXPECT_EQ(s.delta("missing", true, 1, r), delta_status::not_found);
}

TEST(KvStore, IncrKeepsTheExptime) {
    manual_clock clk;
    kv::store s({}, clk.source());
    ASSERT_EQ(s.put(mode::set, "n", 0, 10, "9"), put_status::stored);
    std::uint64_t r = 0;
    clk.advance(5);
    ASSERT_EQ(s.delta("n", true, 1, r), delta_status::ok);  // a new, longer item
    EXPECT_EQ(value(s, "n"), "10");
    clk.advance(4);
    EXPECT_TRUE(get(s, "n"));
    clk.advance(1);
    EXPECT_FALSE(get(s, "n"));
    EXPECT_EQ(s.delta("n", true, 1, r), delta_status::not_found);
}

// total_items as memcached 1.6.18 counts it, row by row: each row's
// command was sent to memcached -U 0 in this order, with a stats after
// each (a socket script). memcached counts every item it links: a stored
// put, and an incr whose number outgrows the old value's bytes (a new
// item); an incr or decr written in place, touch, gat, delete and every
// refused command link nothing.
TEST(KvStore, TotalItemsCountsWhatMemcachedCounts) {
    manual_clock clk;
    kv::store s({.item_size_max = 1024}, clk.source());
    std::uint64_t seen = 0;
    auto added = [&] {
        const std::uint64_t t = s.stats().total_items;
        const std::uint64_t d = t - seen;
        seen = t;
        return d;
    };
    std::uint64_t r = 0;
    auto cas_of = [&](std::string_view key) { return get(s, key)->cas; };

    EXPECT_EQ(s.put(mode::set, "a", 0, 0, "10"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "set";
    EXPECT_EQ(s.put(mode::set, "a", 0, 0, "10"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "set over a live item";
    EXPECT_EQ(s.put(mode::add, "a", 0, 0, "x"), put_status::not_stored);
    EXPECT_EQ(added(), 0u) << "add, refused";
    EXPECT_EQ(s.put(mode::add, "b", 0, 0, "x"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "add";
    EXPECT_EQ(s.put(mode::replace, "b", 0, 0, "y"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "replace";
    EXPECT_EQ(s.put(mode::replace, "zz", 0, 0, "y"), put_status::not_stored);
    EXPECT_EQ(added(), 0u) << "replace, refused";
    EXPECT_EQ(s.put(mode::append, "b", 0, 0, "z"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "append";
    EXPECT_EQ(s.put(mode::prepend, "b", 0, 0, "w"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "prepend";
    EXPECT_EQ(s.put(mode::append, "zz", 0, 0, "z"), put_status::not_stored);
    EXPECT_EQ(added(), 0u) << "append, refused";
    EXPECT_EQ(s.put(mode::prepend, "zz", 0, 0, "z"), put_status::not_stored);
    EXPECT_EQ(added(), 0u) << "prepend, refused";

    EXPECT_EQ(s.delta("a", true, 1, r), delta_status::ok);  // "10" -> "11"
    EXPECT_EQ(added(), 0u) << "incr in place";
    EXPECT_EQ(s.delta("a", false, 6, r), delta_status::ok);  // "11" -> "5 "
    EXPECT_EQ(added(), 0u) << "decr in place";
    EXPECT_EQ(s.delta("a", true, 95, r), delta_status::ok);  // "5 " -> "100"
    EXPECT_EQ(value(s, "a"), "100");
    EXPECT_EQ(added(), 1u) << "incr outgrowing the old value";
    EXPECT_EQ(s.delta("zz", true, 1, r), delta_status::not_found);
    EXPECT_EQ(added(), 0u) << "incr, missing";
    EXPECT_EQ(s.delta("zz", false, 1, r), delta_status::not_found);
    EXPECT_EQ(added(), 0u) << "decr, missing";
    EXPECT_EQ(s.delta("b", true, 1, r), delta_status::non_numeric);
    EXPECT_EQ(added(), 0u) << "incr, non-numeric";
    EXPECT_EQ(s.put(mode::set, "n", 0, 0, "99"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "set";
    EXPECT_EQ(s.delta("n", true, 1, r), delta_status::ok);  // "99" -> "100"
    EXPECT_EQ(added(), 1u) << "incr outgrowing the old value";
    EXPECT_EQ(s.delta("n", false, 1, r), delta_status::ok);  // "100" -> "99 "
    EXPECT_EQ(added(), 0u) << "decr in place";

    EXPECT_TRUE(s.touch("a", 100));
    EXPECT_EQ(added(), 0u) << "touch";
    EXPECT_FALSE(s.touch("zz", 100));
    EXPECT_EQ(added(), 0u) << "touch, missing";
    EXPECT_TRUE(s.get_and_touch("a", 100, [](const kv::item_info&, std::string_view) {}));
    EXPECT_EQ(added(), 0u) << "gat";

    EXPECT_EQ(s.put(mode::cas, "b", 0, 0, "c", cas_of("b")), put_status::stored);
    EXPECT_EQ(added(), 1u) << "cas";
    EXPECT_EQ(s.put(mode::cas, "b", 0, 0, "c", cas_of("b") + 1), put_status::exists);
    EXPECT_EQ(added(), 0u) << "cas, another value's";
    EXPECT_EQ(s.put(mode::cas, "zz", 0, 0, "c", 1), put_status::not_found);
    EXPECT_EQ(added(), 0u) << "cas, missing";

    EXPECT_EQ(s.put(mode::set, "d", 0, -1, "x"), put_status::stored);
    EXPECT_EQ(added(), 1u) << "set, already expired";
    EXPECT_TRUE(s.remove("a"));
    EXPECT_EQ(added(), 0u) << "delete";
    EXPECT_EQ(s.put(mode::set, "big", 0, 0, std::string(1024, 'x')), put_status::too_large);
    EXPECT_EQ(added(), 0u) << "set, too large";
    EXPECT_EQ(s.put(mode::set, "b", 0, 0, std::string(1024, 'x')), put_status::too_large);
    EXPECT_EQ(added(), 0u) << "set, too large, over a live item";
    EXPECT_EQ(s.stats().total_items, 11u);  // memcached's, after the same commands
}

// An incr that outgrows its item and finds no room links nothing.
TEST(KvStore, AnIncrWithNoRoomCountsNoItem) {
    kv::store s({.memory_limit = charge("n", "99"), .shards = 1});
    ASSERT_EQ(s.put(mode::set, "n", 0, 0, "99"), put_status::stored);
    std::uint64_t r = 0;
    EXPECT_EQ(s.delta("n", true, 1, r), delta_status::no_memory);
    EXPECT_EQ(value(s, "n"), "99");
    EXPECT_EQ(s.stats().total_items, 1u);
}

// ---- time -----------------------------------------------------------------------

TEST(KvStore, RelativeExpiry) {
    manual_clock clk;
    kv::store s({}, clk.source());
    ASSERT_EQ(s.put(mode::set, "k", 0, 10, "v"), put_status::stored);
    ASSERT_EQ(s.put(mode::set, "never", 0, 0, "v"), put_status::stored);
    ASSERT_EQ(s.put(mode::set, "max", 0, 2'592'000, "v"), put_status::stored);  // 30 days: still relative
    clk.advance(9);
    EXPECT_TRUE(get(s, "k"));
    clk.advance(1);
    EXPECT_FALSE(get(s, "k"));
    EXPECT_EQ(s.put(mode::replace, "k", 0, 0, "v"), put_status::not_stored);  // dead is absent for every mode
    EXPECT_EQ(s.put(mode::add, "k", 0, 0, "w"), put_status::stored);
    EXPECT_EQ(value(s, "k"), "w");
    clk.advance(2'592'000 - 11);
    EXPECT_TRUE(get(s, "max"));
    clk.advance(1);
    EXPECT_FALSE(get(s, "max"));
    EXPECT_TRUE(get(s, "never"));
    EXPECT_EQ(s.now(), 2'592'000u);
    EXPECT_EQ(s.unix_now(), kOrigin + 2'592'000);
}

TEST(KvStore, NegativeExptimeIsStoredAndDeadAtOnce) {
    manual_clock clk;
    kv::store s({}, clk.source());
    ASSERT_EQ(s.put(mode::set, "k", 0, 0, "old"), put_status::stored);
    EXPECT_EQ(s.put(mode::add, "k", 0, -1, "x"), put_status::not_stored);  // a live item: refused
    EXPECT_EQ(value(s, "k"), "old");
    EXPECT_EQ(s.put(mode::set, "k", 0, -1, "new"), put_status::stored);
    EXPECT_FALSE(get(s, "k"));
    EXPECT_EQ(s.put(mode::add, "k", 0, -1, "x"), put_status::stored);
    EXPECT_FALSE(get(s, "k"));
    auto st = s.stats();
    EXPECT_EQ(st.curr_items, 0u);
    EXPECT_EQ(st.bytes, 0u);
    EXPECT_EQ(st.total_items, 3u);
}

TEST(KvStore, AbsoluteExpiry) {
    manual_clock clk;
    clk.advance(100);
    kv::store s({}, clk.source());
    ASSERT_EQ(s.put(mode::set, "abs", 0, kOrigin + 150, "v"), put_status::stored);
    ASSERT_EQ(s.put(mode::set, "now", 0, kOrigin + 100, "v"), put_status::stored);  // this very second
    ASSERT_EQ(s.put(mode::set, "past", 0, kOrigin + 50, "v"), put_status::stored);
    ASSERT_EQ(s.put(mode::set, "before-origin", 0, kOrigin - 10, "v"), put_status::stored);
    ASSERT_EQ(s.put(mode::set, "2001", 0, 1'000'000'000, "v"), put_status::stored);
    ASSERT_EQ(s.put(mode::set, "31-days", 0, 2'592'001, "v"), put_status::stored);  // absolute: 1970
    EXPECT_FALSE(get(s, "now"));
    EXPECT_FALSE(get(s, "past"));
    EXPECT_FALSE(get(s, "before-origin"));
    EXPECT_FALSE(get(s, "2001"));
    EXPECT_FALSE(get(s, "31-days"));
    clk.advance(49);
    EXPECT_TRUE(get(s, "abs"));
    clk.advance(1);
    EXPECT_FALSE(get(s, "abs"));
    EXPECT_EQ(s.stats().curr_items, 0u);
}

TEST(KvStore, TouchAndGetAndTouch) {
    manual_clock clk;
    kv::store s({}, clk.source());
    EXPECT_FALSE(s.touch("k", 10));
    ASSERT_EQ(s.put(mode::set, "k", 3, 10, "v"), put_status::stored);
    clk.advance(5);
    EXPECT_TRUE(s.touch("k", 10));  // now dies at 15
    clk.advance(9);
    EXPECT_TRUE(get(s, "k"));
    got seen;
    EXPECT_TRUE(s.get_and_touch("k", 0, [&](const kv::item_info& i, std::string_view v) {
        seen = got{std::string(v), i.flags, i.cas};
    }));
    EXPECT_EQ(seen.value, "v");
    EXPECT_EQ(seen.flags, 3u);
    clk.advance(1000);
    EXPECT_TRUE(get(s, "k"));  // 0: never
    EXPECT_TRUE(s.touch("k", kOrigin + 1014 + 5));  // absolute
    clk.advance(4);
    EXPECT_TRUE(get(s, "k"));
    clk.advance(1);
    EXPECT_FALSE(get(s, "k"));
    EXPECT_FALSE(s.touch("k", 0));
    EXPECT_FALSE(s.get_and_touch("k", 0, [](const kv::item_info&, std::string_view) { ADD_FAILURE(); }));
    // gat with an exptime in the past still returns the item, then it is gone
    // (memcached: "gat -1 k" answers VALUE, the next get misses).
    ASSERT_EQ(s.put(mode::set, "g", 0, 0, "x"), put_status::stored);
    int calls = 0;
    EXPECT_TRUE(s.get_and_touch("g", -1, [&](const kv::item_info&, std::string_view v) {
        EXPECT_EQ(v, "x");
        ++calls;
    }));
    EXPECT_EQ(calls, 1);
    EXPECT_FALSE(get(s, "g"));
    ASSERT_EQ(s.put(mode::set, "t", 0, 0, "x"), put_status::stored);
    EXPECT_TRUE(s.touch("t", -1));  // TOUCHED, then gone
    EXPECT_FALSE(get(s, "t"));
    EXPECT_EQ(s.stats().curr_items, 0u);
    EXPECT_EQ(s.stats().bytes, 0u);
}

// ---- flush_all ------------------------------------------------------------------

TEST(KvStore, FlushAllNowWithCasSparesLaterItemsOfTheSameSecond) {
    manual_clock clk;
    kv::store s({}, clk.source());
    clk.advance(10);
    for (int i = 0; i < 50; ++i) ASSERT_EQ(s.put(mode::set, name("k", i), 0, 0, "v"), put_status::stored);
    s.flush_all();
    for (int i = 0; i < 50; ++i) EXPECT_FALSE(get(s, name("k", i)));
    ASSERT_EQ(s.put(mode::set, "later", 0, 0, "v"), put_status::stored);  // same second
    EXPECT_TRUE(get(s, "later"));
    clk.advance(1);
    EXPECT_TRUE(get(s, "later"));
    EXPECT_EQ(s.put(mode::add, "k0", 0, 0, "w"), put_status::stored);
    EXPECT_EQ(value(s, "k0"), "w");
    // The flushed items are reclaimed on lookup: 50, and counted.
    auto st = s.stats();
    EXPECT_EQ(st.reclaimed, 50u);
    EXPECT_EQ(st.expired_unfetched, 50u);
    EXPECT_EQ(st.curr_items, 2u);
}

TEST(KvStore, FlushAllNowWithoutCasKillsTheWholeSecond) {
    manual_clock clk;
    kv::store s({.use_cas = false}, clk.source());
    clk.advance(10);
    ASSERT_EQ(s.put(mode::set, "before", 0, 0, "v"), put_status::stored);
    s.flush_all(0);
    EXPECT_FALSE(get(s, "before"));
    // memcached -C: an item stored in the flush's second is dead too.
    EXPECT_EQ(s.put(mode::set, "same-second", 0, 0, "v"), put_status::stored);
    EXPECT_FALSE(get(s, "same-second"));
    clk.advance(1);
    ASSERT_EQ(s.put(mode::set, "next-second", 0, 0, "v"), put_status::stored);
    EXPECT_TRUE(get(s, "next-second"));
}

TEST(KvStore, FlushAllWithDelay) {
    for (bool cas : {true, false}) {
        SCOPED_TRACE(cas ? "with cas" : "without cas");
        manual_clock clk;
        kv::store s({.use_cas = cas}, clk.source());
        ASSERT_EQ(s.put(mode::set, "old", 0, 0, "v"), put_status::stored);
        s.flush_all(10);  // at clock 0
        // With cas the flush takes effect at 9 (memcached: realtime(10) - 1),
        // without at 10; it kills what was stored up to then.
        const std::uint32_t at = cas ? 9 : 10;
        clk.advance(at - 1);
        EXPECT_TRUE(get(s, "old"));
        ASSERT_EQ(s.put(mode::set, "mid", 0, 0, "v"), put_status::stored);
        EXPECT_TRUE(get(s, "mid"));
        clk.advance(1);
        EXPECT_FALSE(get(s, "old"));
        EXPECT_FALSE(get(s, "mid"));
        ASSERT_EQ(s.put(mode::set, "at", 0, 0, "v"), put_status::stored);  // stored in the flush's second
        EXPECT_FALSE(get(s, "at"));
        clk.advance(1);
        ASSERT_EQ(s.put(mode::set, "after", 0, 0, "v"), put_status::stored);
        EXPECT_TRUE(get(s, "after"));
        clk.advance(100);
        EXPECT_TRUE(get(s, "after"));
    }
}

// ---- eviction -------------------------------------------------------------------

std::string key_of(int i) { return name("key:", 1000 + i); }  // all the same length

TEST(KvStore, EvictsOldestFirstAndCountsIt) {
    const std::string v(36, 'v');
    const std::size_t each = charge(key_of(0), v);
    kv::store s({.memory_limit = 10 * each, .shards = 1});
    for (int i = 0; i < 10; ++i) ASSERT_EQ(s.put(mode::set, key_of(i), 0, 0, v), put_status::stored);
    EXPECT_EQ(s.stats().evictions, 0u);
    EXPECT_EQ(s.stats().bytes, 10 * each);
    for (int i = 10; i < 14; ++i) {
        ASSERT_EQ(s.put(mode::set, key_of(i), 0, 0, v), put_status::stored);
        EXPECT_EQ(s.stats().evictions, static_cast<std::uint64_t>(i - 9));
    }
    // (No get before this: a get would give its item a second chance.)
    for (int i = 0; i < 4; ++i) EXPECT_FALSE(get(s, key_of(i))) << i;
    for (int i = 4; i < 14; ++i) EXPECT_TRUE(get(s, key_of(i))) << i;
    auto st = s.stats();
    EXPECT_EQ(st.evictions, 4u);
    EXPECT_EQ(st.evicted_unfetched, 4u);
    EXPECT_EQ(st.curr_items, 10u);
    EXPECT_EQ(st.bytes, 10 * each);
    EXPECT_EQ(st.limit_maxbytes, 10 * each);
}

TEST(KvStore, ReplacingAnItemInAFullStoreEvictsNothing) {
    const std::string v(36, 'v');
    const std::size_t each = charge(key_of(0), v);
    kv::store s({.memory_limit = 10 * each, .shards = 4});
    for (int i = 0; i < 10; ++i) ASSERT_EQ(s.put(mode::set, key_of(i), 0, 0, v), put_status::stored);
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 10; ++i) {
            ASSERT_EQ(s.put(mode::set, key_of(i), 0, 0, std::string(36, static_cast<char>('a' + round))),
                      put_status::stored);
        }
    }
    std::uint64_t r = 0;
    ASSERT_EQ(s.put(mode::set, key_of(0), 0, 0, std::string(34, ' ') + "10"), put_status::stored);
    EXPECT_EQ(s.delta(key_of(0), false, 3, r), delta_status::ok);  // in place
    EXPECT_EQ(s.stats().evictions, 0u);
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(get(s, key_of(i)));
    EXPECT_EQ(s.stats().bytes, 10 * each);
}

// A working set that fits memory_limit loses nothing, across all shards; a
// larger one evicts exactly as many items as it must.
TEST(KvStore, EvictionLosesNoKeyThatFits) {
    const std::string v(100, 'v');
    const std::size_t each = charge(key_of(0), v);
    constexpr int kFit = 2000;
    kv::store s({.memory_limit = kFit * each, .shards = 64});
    for (int i = 0; i < kFit; ++i) ASSERT_EQ(s.put(mode::set, key_of(i), 0, 0, v), put_status::stored);
    for (int i = 0; i < kFit; ++i) ASSERT_TRUE(get(s, key_of(i))) << i;
    auto st = s.stats();
    EXPECT_EQ(st.evictions, 0u);
    EXPECT_EQ(st.curr_items, static_cast<std::uint64_t>(kFit));
    EXPECT_EQ(st.bytes, kFit * each);
    constexpr int kMore = 500;
    for (int i = kFit; i < kFit + kMore; ++i) {
        ASSERT_EQ(s.put(mode::set, key_of(i), 0, 0, v), put_status::stored);
        EXPECT_TRUE(get(s, key_of(i)));
    }
    st = s.stats();
    EXPECT_EQ(st.evictions, static_cast<std::uint64_t>(kMore));
    EXPECT_EQ(st.curr_items, static_cast<std::uint64_t>(kFit));
    EXPECT_EQ(st.bytes, kFit * each);
    int present = 0;
    for (int i = 0; i < kFit + kMore; ++i) present += get(s, key_of(i)) ? 1 : 0;
    EXPECT_EQ(present, kFit);
}

// Items of different sizes: the budget holds, and every item is either
// present in full or absent.
TEST(KvStore, MixedSizesStayWithinTheBudget) {
    kv::store s({.memory_limit = 64 * 1024, .shards = 8});
    std::mt19937 rng(7);
    for (int i = 0; i < 3000; ++i) {
        const std::string key = key_of(i % 700);
        const std::string val(rng() % 900, static_cast<char>('a' + i % 26));
        ASSERT_EQ(s.put(mode::set, key, 0, 0, val), put_status::stored);
        ASSERT_LE(s.stats().bytes, 64u * 1024);
    }
    std::uint64_t sum = 0, n = 0;
    for (int i = 0; i < 700; ++i) {
        if (auto g = get(s, key_of(i))) {
            sum += charge(key_of(i), g->value);
            ++n;
        }
    }
    EXPECT_EQ(s.stats().bytes, sum);
    EXPECT_EQ(s.stats().curr_items, n);
    EXPECT_GT(s.stats().evictions, 0u);
}

TEST(KvStore, AGetGivesASecondChance) {
    const std::string v(36, 'v');
    const std::size_t each = charge("a", v);
    kv::store s({.memory_limit = 4 * each, .shards = 1});
    for (const char* k : {"a", "b", "c", "d"}) ASSERT_EQ(s.put(mode::set, k, 0, 0, v), put_status::stored);
    ASSERT_TRUE(get(s, "a"));  // the oldest, now active
    ASSERT_EQ(s.put(mode::set, "e", 0, 0, v), put_status::stored);
    EXPECT_TRUE(get(s, "a"));  // spared (and active again)
    EXPECT_FALSE(get(s, "b"));
    auto st = s.stats();
    EXPECT_EQ(st.evictions, 1u);
    EXPECT_EQ(st.evicted_unfetched, 1u);
    // a was moved to the head when spared: c and d go before it. The get
    // just above made it active once more, so it survives one more pass.
    ASSERT_EQ(s.put(mode::set, "f", 0, 0, v), put_status::stored);
    EXPECT_FALSE(get(s, "c"));
    ASSERT_EQ(s.put(mode::set, "g", 0, 0, v), put_status::stored);
    EXPECT_FALSE(get(s, "d"));
    EXPECT_TRUE(get(s, "a"));
    EXPECT_TRUE(get(s, "e"));
    // LRU now g f e a (a and e active). h: a and e spared (to the head,
    // inactive), f evicted; i: g evicted.
    ASSERT_EQ(s.put(mode::set, "h", 0, 0, v), put_status::stored);
    EXPECT_EQ(s.stats().evictions, 4u);
    ASSERT_EQ(s.put(mode::set, "i", 0, 0, v), put_status::stored);
    EXPECT_EQ(s.stats().evictions, 5u);
    // Then, not fetched in between, a and e go in their turn.
    ASSERT_EQ(s.put(mode::set, "j", 0, 0, v), put_status::stored);
    ASSERT_EQ(s.put(mode::set, "k", 0, 0, v), put_status::stored);
    EXPECT_EQ(s.stats().evictions, 7u);
    for (const char* k : {"a", "b", "c", "d", "e", "f", "g"}) EXPECT_FALSE(get(s, k)) << k;
    for (const char* k : {"h", "i", "j", "k"}) EXPECT_TRUE(get(s, k)) << k;
}

TEST(KvStore, AddOfAnExistingKeyBumpsIt) {
    const std::string v(36, 'v');
    kv::store s({.memory_limit = 3 * charge("a", v), .shards = 1});
    for (const char* k : {"a", "b", "c"}) ASSERT_EQ(s.put(mode::set, k, 0, 0, v), put_status::stored);
    EXPECT_EQ(s.put(mode::add, "a", 0, 0, v), put_status::not_stored);  // a to the head
    ASSERT_EQ(s.put(mode::set, "d", 0, 0, v), put_status::stored);
    EXPECT_TRUE(get(s, "a"));
    EXPECT_FALSE(get(s, "b"));
}

// Dead items anywhere go before any live item is evicted: expired ones on
// one set of shards make room for new items that land on others.
TEST(KvStore, DeadItemsAreReclaimedBeforeLiveOnesAreEvicted) {
    manual_clock clk;
    const std::string v(100, 'v');
    const std::size_t each = charge(key_of(0), v);
    constexpr int kN = 1000;
    kv::store s({.memory_limit = kN * each, .shards = 64}, clk.source());
    for (int i = 0; i < kN; ++i) {
        ASSERT_EQ(s.put(mode::set, key_of(i), 0, i % 2 ? 5 : 0, v), put_status::stored);  // odd ones expire at 5
    }
    clk.advance(5);
    for (int i = kN; i < kN + kN / 2; ++i) ASSERT_EQ(s.put(mode::set, key_of(i), 0, 0, v), put_status::stored);
    auto st = s.stats();
    EXPECT_EQ(st.evictions, 0u);
    EXPECT_EQ(st.reclaimed, static_cast<std::uint64_t>(kN / 2));
    EXPECT_EQ(st.expired_unfetched, static_cast<std::uint64_t>(kN / 2));
    EXPECT_EQ(st.curr_items, static_cast<std::uint64_t>(kN));
    for (int i = 0; i < kN + kN / 2; ++i) {
        if (i < kN && i % 2) continue;
        EXPECT_TRUE(get(s, key_of(i))) << i;
    }
    // The same after a flush_all: the flushed go first, nothing live is evicted.
    s.flush_all();
    for (int i = 0; i < kN; ++i) ASSERT_EQ(s.put(mode::set, key_of(5000 + i), 0, 0, v), put_status::stored);
    st = s.stats();
    EXPECT_EQ(st.evictions, 0u);
    EXPECT_EQ(st.reclaimed, static_cast<std::uint64_t>(kN / 2 + kN));
    EXPECT_EQ(st.curr_items, static_cast<std::uint64_t>(kN));
    for (int i = 0; i < kN; ++i) EXPECT_TRUE(get(s, key_of(5000 + i))) << i;
}

// ---- concurrency ------------------------------------------------------------------

// Fibers on two workers and plain threads at once. Counters: each actor
// increments counters and remembers how often; at the end every counter
// holds the sum (so no update was lost and none applied twice). Meanwhile
// other keys see every operation; their values are one letter repeated, so
// a torn or mixed-up value shows. Memory is tight enough to evict, but the
// counters live in a store of their own that never evicts.
TEST(KvStoreStress, FibersAndThreadsMixingEveryOperation) {
#if SPINDLE_TSAN || SPINDLE_ASAN
    constexpr int kOps = 15000;
#else
    constexpr int kOps = 40000;
#endif
    constexpr int kFibers = 8, kThreads = 2, kActors = kFibers + kThreads;
    constexpr int kCounters = 16, kKeys = 300;
    kv::store counters({.shards = 4});
    kv::store s({.memory_limit = 48 * 1024, .item_size_max = 4096, .shards = 8});
    for (int c = 0; c < kCounters; ++c) {
        ASSERT_EQ(counters.put(mode::set, name("ctr", c), 0, 0, "0"), put_status::stored);
    }
    std::vector<std::vector<std::uint64_t>> added(kActors, std::vector<std::uint64_t>(kCounters, 0));
    std::atomic<int> bad{0};
    auto letter = [](int k) { return static_cast<char>('a' + k % 26); };
    auto check = [&](int k, std::string_view v) {
        for (char ch : v) {
            if (ch != letter(k)) {
                bad.fetch_add(1);
                return;
            }
        }
    };
    auto actor = [&](int id) {
        std::mt19937 rng(static_cast<unsigned>(id) * 7919u + 1);
        auto& mine = added[static_cast<std::size_t>(id)];
        for (int op = 0; op < kOps; ++op) {
            const int k = static_cast<int>(rng() % kKeys);
            const std::string key = key_of(k);
            const std::string val(1 + rng() % 300, letter(k));
            std::uint64_t r = 0;
            switch (rng() % 12) {
            case 0: {
                const int c = static_cast<int>(rng() % kCounters);
                const std::uint64_t by = 1 + rng() % 5;
                if (counters.delta(name("ctr", c), true, by, r) != delta_status::ok) bad.fetch_add(1);
                mine[static_cast<std::size_t>(c)] += by;
                break;
            }
            case 1:
            case 2:
            case 3:
                s.get(key, [&](const kv::item_info& i, std::string_view v) {
                    check(k, v);
                    if (i.flags != static_cast<std::uint32_t>(k)) bad.fetch_add(1);
                });
                break;
            case 4:
            case 5:
                if (s.put(mode::set, key, static_cast<std::uint32_t>(k), 0, val) != put_status::stored) bad.fetch_add(1);
                break;
            case 6:
                (void)s.put(mode::add, key, static_cast<std::uint32_t>(k), 0, val);
                break;
            case 7:
                (void)s.put(rng() % 2 ? mode::append : mode::prepend, key, 999, 0, val.substr(0, 20));
                break;
            case 8: {
                std::uint64_t cas = 0;
                s.get(key, [&](const kv::item_info& i, std::string_view) { cas = i.cas; });
                const auto st = s.put(mode::cas, key, static_cast<std::uint32_t>(k), 0, val, cas);
                // No item at the get: none or a newer one now (0 never matches).
                if (cas == 0 && st != put_status::not_found && st != put_status::exists) bad.fetch_add(1);
                break;
            }
            case 9:
                (void)s.remove(key);
                break;
            case 10:
                (void)s.touch(key, 0);
                (void)s.get_and_touch(key, 0, [&](const kv::item_info&, std::string_view v) { check(k, v); });
                break;
            case 11:
                (void)s.put(mode::replace, key, static_cast<std::uint32_t>(k), 0, val);
                break;
            }
        }
    };
    {
        spindle::scheduler sched({.workers = 2});
        std::vector<spindle::fiber> fs;
        for (int i = 0; i < kFibers; ++i) fs.push_back(sched.spawn([&, i] { actor(i); }));
        std::vector<std::thread> ts;
        for (int i = kFibers; i < kActors; ++i) ts.emplace_back([&, i] { actor(i); });
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
    }
    EXPECT_EQ(bad.load(), 0);
    for (int c = 0; c < kCounters; ++c) {
        std::uint64_t want = 0;
        for (const auto& a : added) want += a[static_cast<std::size_t>(c)];
        std::uint64_t have = 0;
        ASSERT_TRUE(counters.get(name("ctr", c), [&](const kv::item_info&, std::string_view v) {
            have = std::stoull(std::string(v));
        }));
        EXPECT_EQ(have, want) << "counter " << c;
    }
    EXPECT_EQ(counters.stats().evictions, 0u);
    // Quiet now: the charged bytes are exactly those of the items present.
    std::uint64_t sum = 0, n = 0;
    for (int k = 0; k < kKeys; ++k) {
        s.get(key_of(k), [&](const kv::item_info&, std::string_view v) {
            sum += charge(key_of(k), v);
            ++n;
        });
    }
    const auto st = s.stats();
    EXPECT_EQ(st.bytes, sum);
    EXPECT_EQ(st.curr_items, n);
    EXPECT_LE(st.bytes, 48u * 1024);
    EXPECT_GT(st.evictions, 0u);
    // Once the rest is gone, the whole budget holds items again without an
    // eviction: no put that gave up or started over leaked a reservation.
    for (int k = 0; k < kKeys; ++k) (void)s.remove(key_of(k));
    EXPECT_EQ(s.stats().bytes, 0u);
    const std::string v(4096 - kv::item_overhead - 8, 'z');  // charged 4096: 12 fill 48 KiB
    for (int i = 0; i < 12; ++i) ASSERT_EQ(s.put(mode::set, name("full:", 100 + i), 0, 0, v), put_status::stored);
    EXPECT_EQ(s.stats().evictions, st.evictions);
    EXPECT_EQ(s.stats().bytes, 48u * 1024);
}

// ---- misuse ------------------------------------------------------------------------

#if SPINDLE_DEBUG_CHECKS
TEST(KvStoreDeath, AnEmptyKeyAbortsNamingTheStore) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            kv::store s;
            (void)s.put(mode::set, "", 0, 0, "v");
        },
        "spindle: spindle::kv::store 0x[0-9a-f]+: put\\(\\) with a key of 0 bytes \\(a key has 1 to 250\\)");
}

TEST(KvStoreDeath, AKeyOver250BytesAbortsNamingTheStore) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            kv::store s;
            (void)s.get(std::string(251, 'k'), [](const kv::item_info&, std::string_view) {});
        },
        "spindle: spindle::kv::store 0x[0-9a-f]+: get\\(\\) with a key of 251 bytes");
}
#endif

}  // namespace
