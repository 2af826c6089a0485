// apps/kv/protocol.cpp — the text protocol's state machine (protocol.hpp has
// the table of behaviours this implements).
#include "protocol.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spindle/runtime/fiber.hpp>

namespace spindle::kv {

namespace {

// A number token as strtoull/strtol read it: an optional sign, then digits
// only, the magnitude at most `limit` (beyond it: ERANGE, false).
bool sign_and_digits(std::string_view t, bool& neg, std::uint64_t& v, std::uint64_t limit) noexcept {
    std::size_t i = 0;
    neg = false;
    if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
        neg = t[0] == '-';
        i = 1;
    }
    if (i == t.size()) return false;
    v = 0;
    for (; i < t.size(); ++i) {
        auto d = static_cast<unsigned>(static_cast<unsigned char>(t[i]) - '0');
        if (d > 9 || v > (limit - d) / 10) return false;
        v = v * 10 + d;
    }
    return true;
}

// The numbers of a command line, as memcached's safe_strto* read them:
// strtoull/strtol over the whole token ("+5" is 5). A '-' before an
// unsigned number is refused unless the value it wraps to is still below
// 2^63 (so "-0" passes, as with strtoull).
bool parse_u64(std::string_view t, std::uint64_t& out) noexcept {
    bool neg;
    std::uint64_t v;
    if (!sign_and_digits(t, neg, v, UINT64_MAX)) return false;
    if (neg) {
        v = 0 - v;
        if (static_cast<std::int64_t>(v) < 0) return false;
    }
    out = v;
    return true;
}

// strtol into memcached's int32_t: a long that fits 64 bits, then cut to
// 32 (memcached stores it through an int32_t; exptime 99999999999 becomes
// a time in 2008).
bool parse_i32(std::string_view t, std::int32_t& out) noexcept {
    bool neg;
    std::uint64_t v;
    if (!sign_and_digits(t, neg, v, std::uint64_t{INT64_MAX} + 1)) return false;
    if (!neg && v > std::uint64_t{INT64_MAX}) return false;  // ERANGE
    std::uint64_t bits = neg ? 0 - v : v;
    out = static_cast<std::int32_t>(static_cast<std::uint32_t>(bits));
    return true;
}

// safe_strtoul into a uint32_t: an unsigned long, cut to 32 bits.
bool parse_u32(std::string_view t, std::uint32_t& out) noexcept {
    std::uint64_t v;
    if (!parse_u64(t, v)) return false;
    out = static_cast<std::uint32_t>(v);
    return true;
}

// The index of the first ' ' at or after i in line, or line.size(). memchr
// scans a word at a time where a byte loop would take one compare per byte,
// and keys are the longest tokens a request has.
std::size_t token_end(std::string_view line, std::size_t i) noexcept {
    const void* sp = std::memchr(line.data() + i, ' ', line.size() - i);
    return sp ? static_cast<std::size_t>(static_cast<const char*>(sp) - line.data()) : line.size();
}

// Splits `line` on runs of ' ' into at most tok.size() tokens; returns how
// many, or tok.size() + 1 if there are more. A token with no slot left is
// not scanned: its start is enough to say there are more.
std::size_t tokenize(std::string_view line, std::span<std::string_view> tok) noexcept {
    std::size_t n = 0;
    std::size_t i = 0;
    const std::size_t len = line.size();
    for (;;) {
        while (i < len && line[i] == ' ') ++i;
        if (i == len) return n;
        if (n == tok.size()) return n + 1;
        std::size_t b = i;
        i = token_end(line, i);
        tok[n++] = line.substr(b, i - b);
    }
}

// Writes v in decimal at p (at most 20 bytes); returns the length.
std::size_t format_u64(char* p, std::uint64_t v) noexcept {
    char t[20];
    std::size_t n = 0;
    do {
        t[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (std::size_t i = 0; i < n; ++i) p[i] = t[n - 1 - i];
    return n;
}

void append_number(std::string& out, std::uint64_t v) {
    char tmp[24];
    auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    out.append(tmp, static_cast<std::size_t>(r.ptr - tmp));
}

void stat(std::string& out, std::string_view name, std::uint64_t v) {
    out.append("STAT ");
    out.append(name);
    out.push_back(' ');
    append_number(out, v);
    out.append("\r\n");
}

void stat(std::string& out, std::string_view name, std::string_view v) {
    out.append("STAT ");
    out.append(name);
    out.push_back(' ');
    out.append(v);
    out.append("\r\n");
}

void stat_time(std::string& out, std::string_view name, const timeval& tv) {
    char tmp[48];
    int n = std::snprintf(tmp, sizeof tmp, "%ld.%06ld", static_cast<long>(tv.tv_sec), static_cast<long>(tv.tv_usec));
    stat(out, name, std::string_view(tmp, static_cast<std::size_t>(n)));
}

constexpr std::string_view counter_names[server_context::counter_count] = {
    "cmd_get",       "cmd_set",       "cmd_flush",   "cmd_touch",       "get_hits",        "get_misses",
    "get_expired",   "get_flushed",   "delete_misses", "delete_hits",   "incr_misses",     "incr_hits",
    "decr_misses",   "decr_hits",     "cas_misses",  "cas_hits",        "cas_badval",      "touch_hits",
    "touch_misses",  "store_too_large", "store_no_memory", "bytes_read", "bytes_written",
};

constexpr std::string_view bad_format = "CLIENT_ERROR bad command line format";
constexpr std::string_view bad_exptime = "CLIENT_ERROR invalid exptime argument";

// delete's legacy hold time, as memcached 1.6.18 still reads it: "delete k
// 0", "delete k noreply" and "delete k 0 noreply" pass, anything else in
// those slots gets the usage line. `tok` is the whole line (2 to 4 tokens).
std::string_view delete_hold(std::span<const std::string_view> tok, bool noreply) noexcept {
    if (tok.size() == 2) return {};
    bool hold_is_zero = tok[2] == "0";
    bool valid = (tok.size() == 3 && (hold_is_zero || noreply)) || (tok.size() == 4 && hold_is_zero && noreply);
    return valid ? std::string_view{} : "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]";
}

}  // namespace

// ---------------------------------------------------------------------------
// server_context

server_context::server_context(store& items, server_settings settings)
    : items_(items),
      settings_(std::move(settings)),
      nshards_(std::max(1u, settings_.threads) + 1),
      shards_(new shard[nshards_]),
      started_(items.unix_now()) {
    verbosity_.store(settings_.verbosity, std::memory_order_relaxed);
}

server_context::~server_context() = default;

void server_context::flush(counts& c) noexcept {
    // A worker's fibers add to its own shard, so the lines stay in that
    // worker's cache; relaxed fetch_add (pairs with nothing: totals() sums
    // relaxed loads, a snapshot as loose as memcached's per-thread stats)
    // keeps it right when two schedulers' workers share an index, and for
    // the plain threads' shard.
    int w = this_fiber::worker_index();
    shard& s = shards_[w >= 0 && static_cast<unsigned>(w) < nshards_ - 1 ? static_cast<unsigned>(w) : nshards_ - 1];
    for (unsigned i = 0; i < counter_count; ++i) {
        if (c[i] != 0) {
            s.v[i].fetch_add(c[i], std::memory_order_relaxed);
            c[i] = 0;
        }
    }
}

server_context::counts server_context::totals() const noexcept {
    counts t{};
    for (unsigned s = 0; s < nshards_; ++s)
        for (unsigned i = 0; i < counter_count; ++i) t[i] += shards_[s].v[i].load(std::memory_order_relaxed);
    for (unsigned i = 0; i < counter_count; ++i) t[i] -= reset_base_[i].load(std::memory_order_relaxed);
    return t;
}

void server_context::reset_counters() noexcept {
    counts t = totals();
    for (unsigned i = 0; i < counter_count; ++i)
        reset_base_[i].store(reset_base_[i].load(std::memory_order_relaxed) + t[i], std::memory_order_relaxed);
    total_connections_.store(0, std::memory_order_relaxed);
    rejected_connections_.store(0, std::memory_order_relaxed);
}

void server_context::connection_opened() noexcept {
    curr_connections_.fetch_add(1, std::memory_order_relaxed);
    total_connections_.fetch_add(1, std::memory_order_relaxed);
}
void server_context::connection_closed() noexcept { curr_connections_.fetch_sub(1, std::memory_order_relaxed); }
void server_context::connection_rejected() noexcept { rejected_connections_.fetch_add(1, std::memory_order_relaxed); }
void server_context::connection_parked() noexcept {
    parked_connections_.fetch_add(1, std::memory_order_relaxed);
    total_parks_.fetch_add(1, std::memory_order_relaxed);
}
void server_context::connection_woke() noexcept { parked_connections_.fetch_sub(1, std::memory_order_relaxed); }
std::uint64_t server_context::curr_connections() const noexcept {
    return curr_connections_.load(std::memory_order_relaxed);
}

void server_context::append_stats(std::string& out) const {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    counts c = totals();
    store_stats ss = items_.stats();
    stat(out, "pid", static_cast<std::uint64_t>(::getpid()));
    stat(out, "uptime", items_.now());
    stat(out, "time", static_cast<std::uint64_t>(items_.unix_now()));
    stat(out, "version", version_string);
    stat(out, "pointer_size", std::uint64_t{sizeof(void*) * 8});
    stat_time(out, "rusage_user", ru.ru_utime);
    stat_time(out, "rusage_system", ru.ru_stime);
    stat(out, "max_connections", settings_.max_connections);
    stat(out, "curr_connections", curr_connections_.load(std::memory_order_relaxed));
    stat(out, "total_connections", total_connections_.load(std::memory_order_relaxed));
    stat(out, "rejected_connections", rejected_connections_.load(std::memory_order_relaxed));
    stat(out, "parked_connections", parked_connections_.load(std::memory_order_relaxed));  // spindle-kv's own
    stat(out, "total_parks", total_parks_.load(std::memory_order_relaxed));                // spindle-kv's own
    for (unsigned i = 0; i < counter_count; ++i) {
        if (i == bytes_read) stat(out, "auth_cmds", std::uint64_t{0}), stat(out, "auth_errors", std::uint64_t{0});
        stat(out, counter_names[i], c[i]);
    }
    stat(out, "limit_maxbytes", ss.limit_maxbytes);
    stat(out, "threads", settings_.threads);
    stat(out, "bytes", ss.bytes);
    stat(out, "curr_items", ss.curr_items);
    stat(out, "total_items", ss.total_items);
    stat(out, "expired_unfetched", ss.expired_unfetched);
    stat(out, "evicted_unfetched", ss.evicted_unfetched);
    stat(out, "evictions", ss.evictions);
    stat(out, "reclaimed", ss.reclaimed);
    out.append("END\r\n");
}

void server_context::append_settings(std::string& out) const {
    store_stats ss = items_.stats();
    stat(out, "maxbytes", ss.limit_maxbytes);
    stat(out, "maxconns", settings_.max_connections);
    stat(out, "tcpport", settings_.port);
    stat(out, "udpport", std::uint64_t{0});
    stat(out, "inter", settings_.interface);
    stat(out, "verbosity", static_cast<std::uint64_t>(verbosity_.load(std::memory_order_relaxed)));
    stat(out, "evictions", "on");
    stat(out, "num_threads", settings_.threads);
    stat(out, "cas_enabled", settings_.use_cas ? "yes" : "no");
    stat(out, "binding_protocol", "ascii");
    stat(out, "item_size_max", settings_.item_size_max);
    out.append("END\r\n");
}

// ---------------------------------------------------------------------------
// session

session::session(server_context& ctx)
    : ctx_(ctx), cap_(initial_buffer), first_cap_(initial_buffer), own_first_(new char[initial_buffer]) {
    buf_ = first_ = own_first_.get();
}

session::session(server_context& ctx, std::span<char> first)
    : ctx_(ctx), buf_(first.data()), cap_(first.size()), first_(first.data()), first_cap_(first.size()) {
    if (first.size() < initial_buffer) {
        std::fprintf(stderr, "spindle-kv: session %p: a first buffer of %zu bytes, under initial_buffer (%zu)\n",
                     static_cast<void*>(this), first.size(), initial_buffer);
        std::abort();
    }
}

session::~session() = default;

void session::compact(std::size_t want) {
    std::size_t avail = end_ - start_;
    if (want <= cap_) {
        if (avail != 0) std::memmove(buf_, buf_ + start_, avail);
    } else {
        std::size_t cap = std::max(want, cap_ * 2);
        std::unique_ptr<char[]> nb(new char[cap]);
        if (avail != 0) std::memcpy(nb.get(), buf_ + start_, avail);
        grown_ = std::move(nb);  // (frees an earlier grown one)
        buf_ = grown_.get();
        cap_ = cap;
    }
    start_ = 0;
    end_ = avail;
}

std::span<char> session::read_space() {
    constexpr std::size_t min_room = 512;
    std::size_t avail = end_ - start_;
    // The bytes from start_ the buffer must hold: a value's whole data block
    // (so that it arrives with one read per socket chunk, never moved), or
    // the partial line and some room.
    std::size_t want = state_ == state::value ? std::max(value_len_ + 2, avail + 1) : avail + min_room;
    if (start_ + want > cap_) compact(want);
    return {buf_ + end_, cap_ - end_};
}

action session::received(std::size_t n) {
    end_ += n;
    count(server_context::bytes_read, n);
    std::size_t before = out_.size();
    action a = process();
    count(server_context::bytes_written, out_.size() - before);
    ctx_.flush(counts_);
    return a;
}

action session::feed(std::string_view in) {
    action a = action::more;
    while (!in.empty() && a == action::more) {
        auto room = read_space();
        std::size_t n = std::min(room.size(), in.size());
        std::memcpy(room.data(), in.data(), n);
        in.remove_prefix(n);
        a = received(n);
    }
    return a;
}

void session::output_written() {
    if (out_.capacity() > 64 * 1024)
        std::string().swap(out_);  // a big multiget's buffer goes back
    else
        out_.clear();
}

bool session::key_command(std::span<const std::string_view> tok, std::size_t n, std::size_t least, std::size_t most,
                          std::string_view (*check)(std::span<const std::string_view>, bool)) {
    if (n < least || n > most) {
        reply("ERROR");
        return false;
    }
    if (n > least) noreply_ = tok[n - 1] == "noreply";
    if (check) {
        std::string_view refused = check(tok.first(n), noreply_);
        if (!refused.empty()) {
            reply(refused);
            return false;
        }
    }
    if (tok[1].size() > key_max) {
        reply(bad_format);
        return false;
    }
    return true;
}

void session::reply(std::string_view s) {
    if (noreply_) return;
    out_.append(s);
    out_.append("\r\n");
}

action session::process() {
    for (;;) {
        switch (state_) {
        case state::closed:
            return action::close;
        case state::swallow: {
            std::size_t n = std::min(swallow_, end_ - start_);
            start_ += n;
            swallow_ -= n;
            if (swallow_ != 0) goto need_more;
            state_ = state::line;
            continue;
        }
        case state::value:
            if (end_ - start_ < value_len_ + 2) goto need_more;
            finish_value();
            continue;
        case state::line: {
            const char* b = buf_ + start_;
            std::size_t avail = end_ - start_;
            const auto* nl = static_cast<const char*>(std::memchr(b + scanned_, '\n', avail - scanned_));
            if (nl == nullptr) {
                scanned_ = avail;
                if (avail > line_max) {
                    // memcached: only a multiget may be this long
                    std::size_t sp = 0;
                    while (sp < avail && b[sp] == ' ') ++sp;
                    std::string_view rest(b + sp, avail - sp);
                    bool get = sp <= 100 && (rest.starts_with("get ") || rest.starts_with("gets "));
                    if (!get || avail > get_line_max) {
                        state_ = state::closed;
                        return action::close;
                    }
                }
                goto need_more;
            }
            std::size_t len = static_cast<std::size_t>(nl - b);
            start_ += len + 1;
            scanned_ = 0;
            if (len != 0 && b[len - 1] == '\r') --len;
            if (!dispatch(std::string_view(b, len))) {
                state_ = state::closed;
                return action::close;
            }
            continue;
        }
        }
    }
need_more:
    if (start_ == end_) {
        start_ = end_ = 0;
        if (cap_ > 4 * first_cap_ && state_ != state::value) {  // a big value or line is done: give it back
            buf_ = first_;
            cap_ = first_cap_;
            grown_.reset();
        }
    }
    return action::more;
}

bool session::dispatch(std::string_view line) {
    noreply_ = false;
    std::array<std::string_view, 8> tok;
    // The command word alone first: the get family takes any number of keys.
    std::size_t n = tokenize(line, std::span(tok.data(), 1));
    if (n == 0) {
        reply("ERROR");
        return true;
    }
    std::string_view cmd = tok[0];
    std::size_t after_cmd = static_cast<std::size_t>(cmd.data() + cmd.size() - line.data());
    if (cmd == "get" || cmd == "gets") {
        if (tokenize(line.substr(after_cmd), std::span(tok.data(), 1)) == 0) {
            reply("ERROR");
            return true;
        }
        cmd_get(line, after_cmd, cmd.size() == 4, false, 0);
        return true;
    }
    if (cmd == "gat" || cmd == "gats") {
        std::size_t m = tokenize(line.substr(after_cmd), std::span(tok.data() + 1, 1));
        if (m == 0) {
            reply("ERROR");
            return true;
        }
        std::int32_t exptime;
        if (!parse_i32(tok[1], exptime)) {
            reply(bad_exptime);
            return true;
        }
        cmd_get(line, static_cast<std::size_t>(tok[1].data() + tok[1].size() - line.data()), cmd.size() == 4, true,
                exptime);
        return true;
    }
    if (cmd == "quit") return false;
    if (cmd == "version") {
        out_.append("VERSION ");
        out_.append(version_string);
        out_.append("\r\n");
        return true;
    }
    if (cmd == "shutdown") {
        reply("ERROR: shutdown not enabled");
        return true;
    }

    n = tokenize(line, tok);  // n > tok.size(): more tokens than any command takes
    auto set_noreply = [&] { noreply_ = tok[n - 1] == "noreply"; };
    store& items = ctx_.items();

    if (cmd == "set" || cmd == "add" || cmd == "replace" || cmd == "append" || cmd == "prepend") {
        if (!key_command(tok, n, 5, 6)) return true;
        mode m = cmd == "set"       ? mode::set
                 : cmd == "add"     ? mode::add
                 : cmd == "replace" ? mode::replace
                 : cmd == "append"  ? mode::append
                                    : mode::prepend;
        cmd_store(std::span(tok.data(), n), m);
        return true;
    }
    if (cmd == "cas") {
        if (!key_command(tok, n, 6, 7)) return true;
        cmd_store(std::span(tok.data(), n), mode::cas);
        return true;
    }
    if (cmd == "delete") {
        if (!key_command(tok, n, 2, 4, delete_hold)) return true;
        if (items.remove(tok[1])) {
            count(server_context::delete_hits);
            reply("DELETED");
        } else {
            count(server_context::delete_misses);
            reply("NOT_FOUND");
        }
        return true;
    }
    if (cmd == "incr" || cmd == "decr") {
        if (!key_command(tok, n, 3, 4)) return true;
        std::uint64_t delta;
        if (!parse_u64(tok[2], delta)) {
            reply("CLIENT_ERROR invalid numeric delta argument");
            return true;
        }
        bool incr = cmd[0] == 'i';
        std::uint64_t result = 0;
        switch (items.delta(tok[1], incr, delta, result)) {
        case delta_status::ok: {
            count(incr ? server_context::incr_hits : server_context::decr_hits);
            if (!noreply_) {
                append_number(out_, result);
                out_.append("\r\n");
            }
            break;
        }
        case delta_status::not_found:
            count(incr ? server_context::incr_misses : server_context::decr_misses);
            reply("NOT_FOUND");
            break;
        case delta_status::non_numeric:
            reply("CLIENT_ERROR cannot increment or decrement non-numeric value");
            break;
        default:  // a store whose delta can run out of room (no_memory): memcached's EOM answer
            reply("SERVER_ERROR out of memory");
            break;
        }
        return true;
    }
    if (cmd == "touch") {
        if (!key_command(tok, n, 3, 4)) return true;
        std::int32_t exptime;
        if (!parse_i32(tok[2], exptime)) {
            reply(bad_exptime);
            return true;
        }
        count(server_context::cmd_touch);
        if (items.touch(tok[1], exptime)) {
            count(server_context::touch_hits);
            reply("TOUCHED");
        } else {
            count(server_context::touch_misses);
            reply("NOT_FOUND");
        }
        return true;
    }
    if (cmd == "flush_all") {
        if (n > 3) {
            reply("ERROR");
            return true;
        }
        set_noreply();
        std::int32_t delay = 0;
        if (n != (noreply_ ? 2u : 1u) && !parse_i32(tok[1], delay)) {
            reply(bad_exptime);
            return true;
        }
        count(server_context::cmd_flush);
        items.flush_all(delay);
        reply("OK");
        return true;
    }
    if (cmd == "stats") {
        if (n == 1) {
            ctx_.flush(counts_);  // this session's own commands so far count
            ctx_.append_stats(out_);
        } else if (n == 2 && tok[1] == "reset") {
            ctx_.flush(counts_);
            ctx_.reset_counters();
            reply("RESET");
        } else if (n == 2 && tok[1] == "settings") {
            ctx_.append_settings(out_);
        } else if (n == 2 && tok[1] == "detail") {
            reply("CLIENT_ERROR usage: stats detail on|off|dump");
        } else if (n == 2 && (tok[1] == "items" || tok[1] == "slabs")) {
            out_.append("END\r\n");
        } else {
            reply("ERROR");
        }
        return true;
    }
    if (cmd == "verbosity") {
        if (n != 2 && n != 3) {
            reply("ERROR");
            return true;
        }
        set_noreply();
        std::uint32_t level;
        if (!parse_u32(tok[1], level)) {
            reply(bad_format);
            return true;
        }
        ctx_.verbosity().store(static_cast<int>(std::min<std::uint32_t>(level, 2)), std::memory_order_relaxed);
        reply("OK");
        return true;
    }
    reply("ERROR");
    return true;
}

void session::cmd_get(std::string_view line, std::size_t pos, bool cas, bool touch, std::int64_t exptime) {
    std::size_t mark = out_.size();
    store& items = ctx_.items();
    std::string_view key;
    auto sink = [&](const item_info& info, std::string_view value) {
        // " <flags> <bytes>[ <cas>]\r\n"; one reserve, then the copies
        char tail[3 * 21 + 2];
        std::size_t tl = 0;
        tail[tl++] = ' ';
        tl += format_u64(tail + tl, info.flags);
        tail[tl++] = ' ';
        tl += format_u64(tail + tl, value.size());
        if (cas) {
            tail[tl++] = ' ';
            tl += format_u64(tail + tl, info.cas);
        }
        tail[tl++] = '\r';
        tail[tl++] = '\n';
        out_.reserve(out_.size() + 6 + key.size() + tl + value.size() + 2);
        out_.append("VALUE ", 6);
        out_.append(key);
        out_.append(tail, tl);
        out_.append(value);
        out_.append("\r\n", 2);
    };
    const std::size_t len = line.size();
    for (;;) {
        while (pos < len && line[pos] == ' ') ++pos;
        if (pos == len) break;
        std::size_t b = pos;
        pos = token_end(line, pos);
        key = line.substr(b, pos - b);
        if (key.size() > key_max) {
            out_.resize(mark);  // this command's VALUEs are not sent
            reply(bad_format);
            return;
        }
        count(server_context::cmd_get);
        if (touch) {
            count(server_context::cmd_touch);
            bool hit = items.get_and_touch(key, exptime, sink);
            count(hit ? server_context::touch_hits : server_context::touch_misses);
        } else {
            bool hit = items.get(key, sink);
            count(hit ? server_context::get_hits : server_context::get_misses);
        }
    }
    out_.append("END\r\n");
}

void session::cmd_store(std::span<std::string_view> tok, mode m) {
    std::string_view key = tok[1];  // key_command checked its length
    std::uint32_t flags;
    std::int32_t exptime;
    std::int32_t vlen;
    std::uint64_t cas_unique = 0;
    if (!parse_u32(tok[2], flags) || !parse_i32(tok[3], exptime) || !parse_i32(tok[4], vlen) ||
        (m == mode::cas && !parse_u64(tok[5], cas_unique)) || vlen < 0 || vlen > INT_MAX - 2) {
        reply(bad_format);
        return;
    }
    auto len = static_cast<std::size_t>(vlen);
    if (key.size() + len > ctx_.settings().item_size_max) {
        // Swallowed as it arrives, never buffered; a set also loses the old
        // item, so a reader never sees the value that the set replaced.
        count(server_context::store_too_large);
        if (m == mode::set) ctx_.items().remove(key);
        reply("SERVER_ERROR object too large for cache");
        swallow_ = len + 2;
        state_ = state::swallow;
        return;
    }
    std::memcpy(key_, key.data(), key.size());
    key_len_ = static_cast<std::uint8_t>(key.size());
    mode_ = m;
    flags_ = flags;
    exptime_ = exptime;
    cas_unique_ = cas_unique;
    value_len_ = len;
    state_ = state::value;
}

void session::finish_value() {
    const char* v = buf_ + start_;
    start_ += value_len_ + 2;
    state_ = state::line;
    count(server_context::cmd_set);
    if (v[value_len_] != '\r' || v[value_len_ + 1] != '\n') {
        reply("CLIENT_ERROR bad data chunk");
        return;
    }
    std::string_view key(key_, key_len_);
    switch (ctx_.items().put(mode_, key, flags_, exptime_, std::string_view(v, value_len_), cas_unique_)) {
    case put_status::stored:
        if (mode_ == mode::cas) count(server_context::cas_hits);
        reply("STORED");
        break;
    case put_status::not_stored:
        reply("NOT_STORED");
        break;
    case put_status::exists:
        count(server_context::cas_badval);
        reply("EXISTS");
        break;
    case put_status::not_found:
        count(server_context::cas_misses);
        reply("NOT_FOUND");
        break;
    case put_status::too_large:
        count(server_context::store_too_large);
        reply("SERVER_ERROR object too large for cache");
        break;
    case put_status::no_memory:
        count(server_context::store_no_memory);
        reply("SERVER_ERROR out of memory storing object");
        break;
    }
}

}  // namespace spindle::kv
