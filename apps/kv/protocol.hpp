// apps/kv/protocol.hpp — memcached's text protocol as a socket-free state
// machine: a per-connection `session` is handed the bytes a read brought and
// appends every reply they call for to one output buffer, which the
// connection writes with one call (a multiget and a pipeline of commands
// get one write, as from memcached).
//
//     kv::server_context ctx(items, {.threads = 4});
//     kv::session s(ctx);
//     for (;;) {
//         auto room = s.read_space();                 // where to read into
//         std::size_t n = read(fd, room.data(), room.size());
//         kv::action a = s.received(n);               // parse, run, reply
//         write(fd, s.output()); s.output_written();  // one write
//         if (a == kv::action::close) break;
//     }
//
// Parsing is in place: commands are split into string_view tokens inside the
// read buffer, nothing is allocated per command, and a get's value is copied
// straight from the store's sink into the output buffer. The read buffer
// starts small (initial_buffer), grows to hold a whole value when one
// arrives, and is given back once it is drained after growing; the output
// buffer likewise. An idle connection holds about initial_buffer bytes.
//
// Behaviour, established against memcached 1.6.18 (memcached -U 0 -t 1,
// ASCII only: -B ascii) with a socket script; where memcached's behaviour
// differs from its protocol.txt, memcached's behaviour is what we do.
// tests/kv/protocol_test.cpp asserts these bytes.
//
//   input                               | reply; what happens next
//   ------------------------------------+----------------------------------------------
//   a line ends at \n; a \r before it   | dropped. Tokens are split on ' ' only (runs of
//                                       | spaces are one separator, a tab is part of a
//                                       | token); commands are case-sensitive
//   unknown command, empty line,        | ERROR
//     "GET", "get\ta"                   |
//   a known command with too many or    | ERROR (nothing else is read: a set's data line
//     too few tokens ("set k 0 0",      | then arrives as a command of its own: ERROR)
//     "set k 0 0 1 x y", "get")         |
//   get/gets/gat/gats k1 k2 ...         | VALUE k f n [cas]\r\n<data>\r\n per hit, END;
//                                       | any number of keys
//   a key over 250 bytes (any command)  | CLIENT_ERROR bad command line format; a get's
//                                       | VALUEs before the key are not sent (*1); a set's
//                                       | data is not swallowed (it reads as a command)
//   set k <flags|exptime|bytes not a    | CLIENT_ERROR bad command line format; the data
//     number>, bytes < 0                |   line is not swallowed. Numbers as strtol/
//                                       |   strtoul take them: "+5" is 5, flags past
//                                       |   2^32 wrap, exptime is cut to 32 bits
//   data block not ending in \r\n       | bytes+2 bytes are consumed whatever they are;
//                                       | CLIENT_ERROR bad data chunk; nothing is stored;
//                                       | parsing goes on right after them
//   key + bytes over item_size_max      | SERVER_ERROR object too large for cache; the
//                                       | bytes+2 data bytes are swallowed unread (without
//                                       | being buffered); a set deletes the old item
//   the store has no room               | SERVER_ERROR out of memory storing object
//   cas k f e n <not a number>          | CLIENT_ERROR bad command line format
//   incr/decr on a non-number           | CLIENT_ERROR cannot increment or decrement
//                                       |   non-numeric value
//   incr/decr k <not a u64, negative>   | CLIENT_ERROR invalid numeric delta argument
//   touch/gat <bad exptime>             | CLIENT_ERROR invalid exptime argument
//   flush_all <bad delay>               | CLIENT_ERROR invalid exptime argument
//   delete k 0 / delete k 0 noreply     | accepted (the legacy hold time, 0 only);
//   delete k 1                          | CLIENT_ERROR bad command line format.  Usage:
//                                       |   delete <key> [noreply]
//   verbosity <not a number>            | CLIENT_ERROR bad command line format
//   noreply (the last token of a        | suppresses every reply of that command, the
//     storage command, incr, decr,      | CLIENT_ERRORs and SERVER_ERRORs included (as
//     delete, touch, flush_all,         | 1.6.18 does); any other word in that slot is
//     verbosity)                        | ignored. "get k noreply" gets key "noreply"
//   stats                               | the general counters (server_context::counter),
//                                       |   END
//   stats settings                      | a few settings, END
//   stats items / stats slabs           | END (no slab classes here)
//   stats detail                        | CLIENT_ERROR usage: stats detail on|off|dump
//   stats reset                         | RESET (the counters restart from 0)
//   stats <anything else>, stats a b    | ERROR
//   version                             | VERSION 1.6.18-spindle-kv
//   shutdown                            | ERROR: shutdown not enabled
//   quit [anything]                     | no reply; close
//   no \n in the first 16 KiB of a      | close, without a reply, unless the line starts
//     line                              |   with "get " or "gets " (after at most 100
//                                       |   spaces): a long multiget goes on, up to
//                                       |   get_line_max, then closes (*2)
//   a first byte 0x80 (binary protocol) | not spoken: the bytes are an ASCII line like
//                                       |   any other: ERROR once a \n arrives, close
//                                       |   after 16 KiB without one (memcached -B
//                                       |   ascii does the same; a binary client sees no
//                                       |   reply it can parse and should time out)
//   the peer leaves mid-command or      | nothing is stored; the connection's buffers
//     mid-value                         |   are freed (main.cpp ends the fiber)
//   a \0 inside a line                  | an ordinary byte (part of a key or a token)
//
// (*1) memcached 1.6.18 also drops the replies of the earlier commands of
// the same pipeline that it had not yet written ("version\r\nget <251
// bytes>\r\n" answers only the CLIENT_ERROR); we keep them: a quirk of its
// response objects that no client relies on.
//
// (*2) memcached decides after each read of up to 16 KiB (its read
// buffer): a line with no \n among more than 2048 bytes read closes, but a
// longer one that reaches it within one read ("x" * 3000 + "\r\n" sent at
// once) gets ERROR. Here the limit is that read buffer's size, whatever
// the reads: a line memcached answers, we answer; one that arrives slowly
// may grow to 16 KiB before we close, where memcached closes at 2 KiB.
//
// Counters not kept: get_expired and get_flushed stay 0 (the store does not
// say why a key missed); meta commands (mg, ms, md, ...) are unknown: ERROR.
// Counters added: parked_connections and total_parks (idle connections
// without a fiber, apps/kv/main.cpp), after rejected_connections.
//
// Threads: a session belongs to one connection and is used by one fiber (or
// thread) at a time. server_context is shared by all sessions: its counters
// are sharded per worker (see server_context::flush) and summed by stats.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "store.hpp"

namespace spindle::kv {

inline constexpr std::string_view version_string = "1.6.18-spindle-kv";

struct server_settings {
    std::size_t max_connections = 1024;  // -c
    unsigned threads = 4;                // -t (workers): stats "threads"
    int verbosity = 0;                   // -v
    std::uint16_t port = 0;              // stats settings "tcpport"
    std::string interface = "127.0.0.1"; // stats settings "inter"
    // The store's item_size_max (-I): a value whose key + data exceed it is
    // refused from its command line and swallowed, never buffered.
    std::size_t item_size_max = std::size_t{1} << 20;
    bool use_cas = true;  // -C: stats settings "cas_enabled"
};

// What every session shares: the store, the settings, the counters.
class server_context {
public:
    // The counters a session keeps (stats names them in this order).
    enum counter : unsigned {
        cmd_get, cmd_set, cmd_flush, cmd_touch,
        get_hits, get_misses, get_expired, get_flushed,
        delete_misses, delete_hits, incr_misses, incr_hits, decr_misses, decr_hits,
        cas_misses, cas_hits, cas_badval, touch_hits, touch_misses,
        store_too_large, store_no_memory, bytes_read, bytes_written,
        counter_count
    };
    using counts = std::array<std::uint64_t, counter_count>;

    server_context(store& items, server_settings settings);
    ~server_context();
    server_context(const server_context&) = delete;
    server_context& operator=(const server_context&) = delete;

    store& items() noexcept { return items_; }
    const server_settings& settings() const noexcept { return settings_; }

    // Adds a session's counts to the shard of the calling fiber's worker
    // (one shard per worker, each on its own cache lines; a plain thread
    // uses a shard of its own) and zeroes them.
    void flush(counts& c) noexcept;
    // The sums over all shards, less what stats reset took away.
    counts totals() const noexcept;
    void reset_counters() noexcept;

    // Connections, kept by the server loop (main.cpp): accepts are rare
    // next to commands, so these are plain shared atomics.
    void connection_opened() noexcept;
    void connection_closed() noexcept;
    void connection_rejected() noexcept;
    std::uint64_t curr_connections() const noexcept;
    // A connection parked without a fiber (idle), or woke from there
    // (spindle-kv's own stats: parked_connections, total_parks).
    void connection_parked() noexcept;
    void connection_woke() noexcept;

    std::atomic<int>& verbosity() noexcept { return verbosity_; }

    // Appends the "stats" reply (the STAT lines and END).
    void append_stats(std::string& out) const;
    void append_settings(std::string& out) const;

private:
    struct alignas(64) shard {
        std::array<std::atomic<std::uint64_t>, counter_count> v{};
    };
    store& items_;
    server_settings settings_;
    unsigned nshards_;
    std::unique_ptr<shard[]> shards_;  // workers + 1 (the last: plain threads)
    // stats reset: the sums at the last reset, subtracted by totals().
    // Relaxed stores and loads: a reset racing a reset or a stats may mix
    // the two, as memcached's own unlocked reset does; nothing else reads them.
    std::array<std::atomic<std::uint64_t>, counter_count> reset_base_{};
    // Connection counts: relaxed, read only for stats (and -c, which
    // counts its own increments: connection_opened's fetch_add result).
    std::atomic<std::uint64_t> curr_connections_{0};
    std::atomic<std::uint64_t> total_connections_{0};
    std::atomic<std::uint64_t> rejected_connections_{0};
    std::atomic<std::uint64_t> parked_connections_{0};
    std::atomic<std::uint64_t> total_parks_{0};
    std::atomic<int> verbosity_{0};  // relaxed: a setting, read by nothing that needs order
    std::time_t started_;            // unix time at construction (stats uptime)
};

enum class action : std::uint8_t {
    more,   // read more and call received() again
    close,  // write the output, then close the connection
};

class session {
public:
    static constexpr std::size_t initial_buffer = 2048 + 512;  // holds most lines
    static constexpr std::size_t line_max = 16384;             // memcached's read buffer, before a \n (*2)
    static constexpr std::size_t get_line_max = std::size_t{1} << 20;

    explicit session(server_context& ctx);
    // Reads into `first` (at least initial_buffer bytes, the caller's, and
    // outliving the session) until a value or line needs more, and again
    // after: a server can place a session and its buffer in one page of
    // its own (apps/kv/main.cpp does, so that idle connections leave no
    // holes in the heap).
    session(server_context& ctx, std::span<char> first);
    ~session();
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // Room to read into: at least one byte, as much as the command being
    // read needs (a value's whole data block) or a few KiB.
    std::span<char> read_space();
    // `n` bytes were read into read_space(): parse and run every complete
    // command among the buffered bytes, appending the replies to output().
    action received(std::size_t n);

    // Copies `in` through read_space()/received() (tests; any split).
    action feed(std::string_view in);

    std::string_view output() const noexcept { return out_; }
    // The output was written: clear it (and give a grown buffer back).
    void output_written();

    // Nothing is buffered or half done: no partial line, no value or
    // swallow in progress, no output. A session in this state carries no
    // protocol state across commands, so a server may drop it while the
    // connection is idle and start a fresh one when bytes arrive.
    bool between_commands() const noexcept { return state_ == state::line && start_ == end_ && out_.empty(); }

    // The session's counts not yet flushed to the server (tests).
    const server_context::counts& pending_counts() const noexcept { return counts_; }

private:
    enum class state : std::uint8_t { line, value, swallow, closed };

    action process();
    // One command line (without its \n or \r). Returns false to close.
    bool dispatch(std::string_view line);
    // What every command on one key checks first, in memcached's order:
    // the line's `n` tokens (tok.size() + 1: more than tok holds) number
    // `least` to `most`, else ERROR; a line longer than `least` has its
    // noreply slot last (noreply_ is set if it reads "noreply"); `check`,
    // if given, may refuse the other tokens with a reply of its own
    // (delete's hold time); the key, tok[1], has at most key_max bytes,
    // else CLIENT_ERROR bad command line format. False: the command was
    // refused and answered.
    bool key_command(std::span<const std::string_view> tok, std::size_t n, std::size_t least, std::size_t most,
                     std::string_view (*check)(std::span<const std::string_view> tok, bool noreply) = nullptr);
    void cmd_get(std::string_view line, std::size_t key_start, bool cas, bool touch, std::int64_t exptime);
    void cmd_store(std::span<std::string_view> tok, mode m);
    void finish_value();
    void reply(std::string_view s);
    void count(server_context::counter c, std::uint64_t n = 1) { counts_[c] += n; }
    void compact(std::size_t need);

    server_context& ctx_;
    char* buf_;                          // the read buffer: first_ or grown_
    std::size_t cap_;
    char* first_;                        // the buffer it starts with and returns to
    std::size_t first_cap_;
    std::unique_ptr<char[]> own_first_;  // first_, unless the server gave it
    std::unique_ptr<char[]> grown_;      // a bigger buffer for a big value or line
    std::size_t start_ = 0;  // first unparsed byte
    std::size_t end_ = 0;    // one past the last byte read
    std::size_t scanned_ = 0;  // bytes from start_ known to hold no \n
    std::string out_;
    server_context::counts counts_{};
    state state_ = state::line;
    bool noreply_ = false;

    // The storage command whose data block is being read (state::value).
    mode mode_ = mode::set;
    std::uint32_t flags_ = 0;
    std::int64_t exptime_ = 0;
    std::uint64_t cas_unique_ = 0;
    std::size_t value_len_ = 0;  // without the \r\n
    std::size_t swallow_ = 0;    // state::swallow: bytes still to drop
    std::uint8_t key_len_ = 0;
    char key_[key_max];
};

}  // namespace spindle::kv
