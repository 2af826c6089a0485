// The text protocol (apps/kv/protocol.hpp) against the bytes memcached
// 1.6.18 answers: every expected reply below was taken from the real
// server (memcached -U 0 -t 1 -B ascii) with the same input.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <spindle/runtime/scheduler.hpp>

#include "protocol.hpp"
#include "store.hpp"

namespace kv = spindle::kv;
using namespace std::string_literals;

namespace {

class Protocol : public ::testing::Test {
protected:
    std::uint32_t now_ = 1000;
    kv::store items_{{.memory_limit = 16u << 20}, {.now = [this] { return now_; }, .origin_unix = 1'700'000'000}};
    kv::server_context ctx_{items_, {.threads = 2}};
    kv::session s_{ctx_};
    kv::action last_ = kv::action::more;

    // Feeds `in` in one piece; returns what the session answered.
    std::string run(std::string_view in) { return run(s_, in); }
    std::string run(kv::session& s, std::string_view in) {
        last_ = s.feed(in);
        std::string out(s.output());
        s.output_written();
        return out;
    }
    // The same, one byte per read.
    std::string run_bytewise(kv::session& s, std::string_view in) {
        std::string out;
        for (char c : in) {
            last_ = s.feed(std::string_view(&c, 1));
            out += s.output();
            s.output_written();
            if (last_ == kv::action::close) break;
        }
        return out;
    }
    std::map<std::string, std::string> stats() {
        std::map<std::string, std::string> m;
        std::string out = run("stats\r\n");
        std::size_t pos = 0;
        while (out.compare(pos, 5, "STAT ") == 0) {
            std::size_t sp = out.find(' ', pos + 5);
            std::size_t eol = out.find("\r\n", sp);
            m[out.substr(pos + 5, sp - pos - 5)] = out.substr(sp + 1, eol - sp - 1);
            pos = eol + 2;
        }
        EXPECT_EQ(out.substr(pos), "END\r\n");
        return m;
    }
};

TEST_F(Protocol, UnknownCommandsAndEmptyLinesAnswerError) {
    EXPECT_EQ(run("foo\r\n"), "ERROR\r\n");
    EXPECT_EQ(run("\r\n"), "ERROR\r\n");
    EXPECT_EQ(run("\n"), "ERROR\r\n");
    EXPECT_EQ(run("GET a\r\n"), "ERROR\r\n");   // case-sensitive
    EXPECT_EQ(run("get\ta\r\n"), "ERROR\r\n");  // a tab is no separator
    EXPECT_EQ(run("\x01\x02\x03\xff\xfe\r\n"), "ERROR\r\n");
    EXPECT_EQ(run("mn\r\n"), "ERROR\r\n");  // no meta commands
    EXPECT_EQ(run("shutdown\r\n"), "ERROR: shutdown not enabled\r\n");
    EXPECT_EQ(last_, kv::action::more);
}

TEST_F(Protocol, SetGetGetsAndOneBufferForAPipeline) {
    EXPECT_EQ(run("set p 0 0 1\r\n1\r\nget p\r\nget p p\r\n"),
              "STORED\r\nVALUE p 0 1\r\n1\r\nEND\r\nVALUE p 0 1\r\n1\r\nVALUE p 0 1\r\n1\r\nEND\r\n");
    std::string gets = run("gets p\r\n");
    ASSERT_TRUE(gets.starts_with("VALUE p 0 1 ")) << gets;
    std::string cas = gets.substr(12, gets.find("\r\n") - 12);
    EXPECT_EQ(gets, "VALUE p 0 1 " + cas + "\r\n1\r\nEND\r\n");
    EXPECT_EQ(run("cas p 3 0 2 " + cas + "\r\nab\r\ncas p 3 0 2 " + cas + "\r\ncd\r\ngets nope\r\n"),
              "STORED\r\nEXISTS\r\nEND\r\n");
    EXPECT_EQ(run("cas nope 0 0 1 1\r\ny\r\n"), "NOT_FOUND\r\n");
    EXPECT_EQ(run("set z 0 0 0\r\n\r\nget z\r\n"), "STORED\r\nVALUE z 0 0\r\n\r\nEND\r\n");
    // Spaces: leading, repeated and trailing are separators; \r alone is not.
    EXPECT_EQ(run("set  ms  0  0  1\r\nx\r\n   get ms \r\n"), "STORED\r\nVALUE ms 0 1\r\nx\r\nEND\r\n");
    EXPECT_EQ(run("get p\rget p\r\n"), "VALUE p 3 2\r\nab\r\nEND\r\n");
    // Forty keys, more than memcached's 24 tokens.
    std::string many = "get";
    for (int i = 0; i < 40; ++i) many += " k" + std::to_string(i);
    EXPECT_EQ(run(many + " p\r\n"), "VALUE p 3 2\r\nab\r\nEND\r\n");
}

TEST_F(Protocol, StorageModes) {
    EXPECT_EQ(run("append nope 0 0 1\r\nx\r\nset a 7 0 1\r\nx\r\nappend a 0 0 2\r\nyz\r\nprepend a 0 0 1\r\nw\r\n"
                  "get a\r\n"),
              "NOT_STORED\r\nSTORED\r\nSTORED\r\nSTORED\r\nVALUE a 7 4\r\nwxyz\r\nEND\r\n");
    EXPECT_EQ(run("add ar 0 0 1\r\nx\r\nadd ar 0 0 1\r\nx\r\nreplace ar 0 0 1\r\ny\r\nreplace nope 0 0 1\r\ny\r\n"),
              "STORED\r\nNOT_STORED\r\nSTORED\r\nNOT_STORED\r\n");
    EXPECT_EQ(run("set e 0 -1 1\r\nx\r\nget e\r\n"), "STORED\r\nEND\r\n");  // negative exptime: gone at once
}

TEST_F(Protocol, WrongTokenCountsAnswerErrorAndTheDataLineIsACommand) {
    EXPECT_EQ(run("set k 0 0 1 noreply x\r\nv\r\nget k\r\n"), "ERROR\r\nERROR\r\nEND\r\n");
    std::string thirty = "set";
    for (int i = 0; i < 30; ++i) thirty += " a";
    EXPECT_EQ(run(thirty + "\r\nget k\r\n"), "ERROR\r\nEND\r\n");
    EXPECT_EQ(run("set k 0 0\r\n"), "ERROR\r\n");
    EXPECT_EQ(run("get\r\nget \r\ngets\r\ngat\r\n"), "ERROR\r\nERROR\r\nERROR\r\nERROR\r\n");
    EXPECT_EQ(run("gat 100\r\n"), "END\r\n");
    EXPECT_EQ(run("incr n\r\ntouch t\r\ntouch t 10 x y\r\n"), "ERROR\r\nERROR\r\nERROR\r\n");
    EXPECT_EQ(run("cas c 0 0 1\r\ny\r\n"), "ERROR\r\nERROR\r\n");
    EXPECT_EQ(run("set n 0 0 1\r\n1\r\nincr n 1 x\r\nincr n 1 noreply x\r\n"), "STORED\r\n2\r\nERROR\r\n");
}

TEST_F(Protocol, BadDataChunkConsumesBytesPlusTwoAndGoesOn) {
    EXPECT_EQ(run("set k 0 0 3\r\nabcde\r\nget k\r\n"), "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n");
    EXPECT_EQ(run("set k 0 0 3\r\nabcdefghij\r\nget k\r\n"), "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n");
    EXPECT_EQ(run("set k 0 0 3\r\nab\r\nget k\r\n"), "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
    EXPECT_EQ(run("set a 0 0 1\nx\nget a\n"), "CLIENT_ERROR bad data chunk\r\nERROR\r\n");  // data needs \r\n
    EXPECT_EQ(run("set k 0 0 1 noreply\r\nxyz\r\nget k\r\n"), "ERROR\r\nEND\r\n");
}

TEST_F(Protocol, BadNumbersOnTheCommandLine) {
    EXPECT_EQ(run("set k 0 0 -1\r\nget k\r\n"), "CLIENT_ERROR bad command line format\r\nEND\r\n");
    EXPECT_EQ(run("set k 0 0 abc\r\nget k\r\n"), "CLIENT_ERROR bad command line format\r\nEND\r\n");
    EXPECT_EQ(run("set k abc 0 1\r\nx\r\nget k\r\n"), "CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n");
    EXPECT_EQ(run("set k -1 0 1\r\nx\r\nget k\r\n"), "CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n");
    EXPECT_EQ(run("set k 0 abc 1\r\nx\r\n"), "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    EXPECT_EQ(run("set k 0 0 abc noreply\r\nget k\r\n"), "END\r\n");
    // As strtoul/strtol read them: flags wrap at 2^32, '+' is allowed.
    EXPECT_EQ(run("set k 4294967296 0 1\r\nx\r\nget k\r\n"), "STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n");
    EXPECT_EQ(run("set f 4294967295 0 1\r\nx\r\nget f\r\n"), "STORED\r\nVALUE f 4294967295 1\r\nx\r\nEND\r\n");
    EXPECT_EQ(run("set f +5 0 +1\r\nx\r\nget f\r\n"), "STORED\r\nVALUE f 5 1\r\nx\r\nEND\r\n");
    EXPECT_EQ(run("cas c 0 0 1 abc\r\ny\r\n"), "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    EXPECT_EQ(run("cas c 0 0 1 -1\r\ny\r\n"), "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    EXPECT_EQ(run("cas c 0 0 1 18446744073709551616\r\ny\r\n"), "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    EXPECT_EQ(run("cas c 0 0 1 18446744073709551615\r\ny\r\n"), "NOT_FOUND\r\n");
}

TEST_F(Protocol, TooLargeIsSwallowedWithoutBuffering) {
    EXPECT_EQ(run("set big 0 0 1\r\nx\r\n"), "STORED\r\n");
    std::string head = "set big 0 0 2000000\r\n";
    EXPECT_EQ(run(head), "SERVER_ERROR object too large for cache\r\n");
    // The data goes by in reads no larger than the idle buffer.
    std::string chunk(100000, 'x');
    for (int i = 0; i < 20; ++i) {
        EXPECT_LE(s_.read_space().size(), kv::session::initial_buffer);
        EXPECT_EQ(run(chunk), "");
    }
    EXPECT_EQ(run("\r\nget big\r\n"), "END\r\n");  // a set loses the old item
    // The two bytes after the data are swallowed whatever they are.
    EXPECT_EQ(run("set big 0 0 2000000\r\n" + std::string(2000002, 'y') + "get big\r\n"),
              "SERVER_ERROR object too large for cache\r\nEND\r\n");
    EXPECT_EQ(run("set big 0 0 2000000 noreply\r\n" + std::string(2000002, 'y') + "get big\r\n"), "END\r\n");
    // append keeps the old item.
    EXPECT_EQ(run("set a 0 0 1\r\nx\r\nappend a 0 0 2000000\r\n" + std::string(2000000, 'z') + "\r\nget a\r\n"),
              "STORED\r\nSERVER_ERROR object too large for cache\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    EXPECT_EQ(stats()["store_too_large"], "4");
}

TEST_F(Protocol, ValuesSplitAcrossReadsAndTheBufferShrinksBack) {
    std::string value(300000, 'v');
    for (std::size_t i = 0; i < value.size(); i += 7) value[i] = static_cast<char>('a' + i % 26);
    std::string in = "set big 1 0 " + std::to_string(value.size()) + "\r\n" + value + "\r\n";
    std::string out;
    for (std::size_t i = 0; i < in.size(); i += 1000) {
        last_ = s_.feed(std::string_view(in).substr(i, 1000));
        out += s_.output();
        s_.output_written();
    }
    EXPECT_EQ(out, "STORED\r\n");
    EXPECT_EQ(run("get big\r\n"), "VALUE big 1 300000\r\n" + value + "\r\nEND\r\n");
    EXPECT_LE(s_.read_space().size(), kv::session::initial_buffer);
}

// A session on a buffer the server gives it (one page with the session in
// it, apps/kv/main.cpp) reads there, grows out of it for a big value, and
// comes back to it afterwards; between_commands() says when nothing is held.
TEST_F(Protocol, AGivenFirstBufferIsUsedAndReturnedTo) {
    std::vector<char> page(3000);
    kv::session s(ctx_, std::span<char>(page));
    auto inside = [&](std::span<char> room) {
        return room.data() >= page.data() && room.data() + room.size() <= page.data() + page.size();
    };
    EXPECT_TRUE(s.between_commands());
    EXPECT_TRUE(inside(s.read_space()));
    EXPECT_EQ(run(s, "set a 0 0 1\r\nx\r\nget a\r\n"), "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    EXPECT_TRUE(s.between_commands());

    s.feed("get a");  // half a line
    EXPECT_FALSE(s.between_commands());
    EXPECT_EQ(run(s, "\r\n"), "VALUE a 0 1\r\nx\r\nEND\r\n");
    EXPECT_TRUE(s.between_commands());

    std::string value(100000, 'v');
    s.feed("set big 0 0 100000\r\n" + value.substr(0, 50000));  // half a value: it needs more room
    EXPECT_FALSE(s.between_commands());
    EXPECT_FALSE(inside(s.read_space()));
    EXPECT_EQ(run(s, value.substr(50000) + "\r\n"), "STORED\r\n");
    EXPECT_TRUE(s.between_commands());
    EXPECT_TRUE(inside(s.read_space()));  // the grown buffer went back
    EXPECT_EQ(run(s, "get big\r\n"), "VALUE big 0 100000\r\n" + value + "\r\nEND\r\n");

    s.feed("version\r\n");  // an answer not yet written out
    EXPECT_FALSE(s.between_commands());
    s.output_written();
    EXPECT_TRUE(s.between_commands());
}

TEST_F(Protocol, AFirstBufferBelowInitialBufferAborts) {
    std::vector<char> small(kv::session::initial_buffer - 1);
    EXPECT_DEATH(kv::session(ctx_, std::span<char>(small)), "under initial_buffer");
}

TEST_F(Protocol, KeysOver250Bytes) {
    std::string k250(250, 'a'), k251(251, 'a');
    EXPECT_EQ(run("get " + k251 + "\r\n"), "CLIENT_ERROR bad command line format\r\n");
    EXPECT_EQ(run("get " + k250 + "\r\n"), "END\r\n");
    EXPECT_EQ(run("set " + k251 + " 0 0 1\r\nx\r\n"), "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    EXPECT_EQ(run("set " + k251 + " 0 0 1 noreply\r\nx\r\n"), "ERROR\r\n");
    EXPECT_EQ(run("delete " + k251 + "\r\nincr " + k251 + " 1\r\ntouch " + k251 + " 1\r\ngat 1 " + k251 + "\r\n"),
              "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"
              "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n");
    EXPECT_EQ(run("set " + k250 + " 0 0 1\r\nx\r\nget " + k250 + "\r\n"),
              "STORED\r\nVALUE " + k250 + " 0 1\r\nx\r\nEND\r\n");
    // The values found before the long key are not sent.
    EXPECT_EQ(run("set p 0 0 1\r\n1\r\n"), "STORED\r\n");
    EXPECT_EQ(run("get p " + k251 + " p\r\n"), "CLIENT_ERROR bad command line format\r\n");
    EXPECT_EQ(run("get p p\r\nget " + k251 + "\r\n"),
              "VALUE p 0 1\r\n1\r\nVALUE p 0 1\r\n1\r\nEND\r\nCLIENT_ERROR bad command line format\r\n");
}

TEST_F(Protocol, IncrDecr) {
    EXPECT_EQ(run("set n 0 0 3\r\nabc\r\nincr n 1\r\n"),
              "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    EXPECT_EQ(run("incr nomiss 1\r\ndecr nomiss 1\r\n"), "NOT_FOUND\r\nNOT_FOUND\r\n");
    EXPECT_EQ(run("set n 0 0 1\r\n1\r\nincr n abc\r\nincr n -1\r\nincr n 18446744073709551616\r\n"),
              "STORED\r\nCLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid numeric delta argument\r\n"
              "CLIENT_ERROR invalid numeric delta argument\r\n");
    EXPECT_EQ(run("set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nget n\r\nincr n 18446744073709551615\r\n"),
              "STORED\r\n15\r\n0\r\nVALUE n 0 2\r\n0 \r\nEND\r\n18446744073709551615\r\n");
    EXPECT_EQ(run("set n 0 0 3\r\n100\r\ndecr n 95\r\nget n\r\n"), "STORED\r\n5\r\nVALUE n 0 3\r\n5  \r\nEND\r\n");
    EXPECT_EQ(run("set n 0 0 1\r\n1\r\nincr n +5\r\nincr n 05\r\n"), "STORED\r\n6\r\n11\r\n");
    EXPECT_EQ(run("set n 0 0 1\r\n1\r\nincr n 1 noreply\r\nget n\r\n"), "STORED\r\nVALUE n 0 1\r\n2\r\nEND\r\n");
    EXPECT_EQ(run("set n 0 0 1\r\nx\r\nincr n 1 noreply\r\nincr n x noreply\r\nincr zz 1 noreply\r\n"), "STORED\r\n");
}

TEST_F(Protocol, DeleteWithTheLegacyHoldTime) {
    EXPECT_EQ(run("set d 0 0 1\r\nx\r\ndelete d 0\r\ndelete d 0\r\ndelete d 1\r\ndelete d 0 noreply\r\n"
                  "delete d noreply\r\ndelete d x y z\r\n"),
              "STORED\r\nDELETED\r\nNOT_FOUND\r\n"
              "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\nERROR\r\n");
    EXPECT_EQ(run("set d 0 0 1\r\nx\r\ndelete d\r\ndelete d\r\n"), "STORED\r\nDELETED\r\nNOT_FOUND\r\n");
}

TEST_F(Protocol, TouchAndGat) {
    EXPECT_EQ(run("set t 0 0 1\r\nx\r\ntouch t 10\r\ntouch nope 10\r\ntouch t abc\r\ntouch t 10 noreply\r\n"),
              "STORED\r\nTOUCHED\r\nNOT_FOUND\r\nCLIENT_ERROR invalid exptime argument\r\n");
    EXPECT_EQ(run("set t 5 0 1\r\nx\r\ngat 100 t nope\r\ngat t\r\ngat abc t\r\n"),
              "STORED\r\nVALUE t 5 1\r\nx\r\nEND\r\nCLIENT_ERROR invalid exptime argument\r\n"
              "CLIENT_ERROR invalid exptime argument\r\n");
    std::string gats = run("gats 100 t\r\n");
    EXPECT_TRUE(gats.starts_with("VALUE t 5 1 ") && gats.ends_with("\r\nx\r\nEND\r\n")) << gats;
    // The touch took: 100 s from now the item is gone, not before.
    now_ += 99;
    EXPECT_EQ(run("get t\r\n"), "VALUE t 5 1\r\nx\r\nEND\r\n");
    now_ += 2;
    EXPECT_EQ(run("get t\r\n"), "END\r\n");
}

TEST_F(Protocol, NoreplySuppressesEveryReply) {
    EXPECT_EQ(run("set nr 0 0 1 noreply\r\nx\r\nadd nr 0 0 1 noreply\r\nx\r\nget nr\r\n"),
              "VALUE nr 0 1\r\nx\r\nEND\r\n");
    EXPECT_EQ(run("get nr noreply\r\n"), "VALUE nr 0 1\r\nx\r\nEND\r\n");  // a key, for get
    EXPECT_EQ(run("cas nr 0 0 1 1 noreply\r\ny\r\nverbosity noreply\r\nflush_all abc noreply\r\n"), "");
    EXPECT_EQ(run("set x 0 0 1 whatever\r\nx\r\n"), "STORED\r\n");  // another word there is ignored
}

TEST_F(Protocol, FlushAllVersionVerbosity) {
    EXPECT_EQ(run("flush_all\r\nflush_all 0\r\nflush_all noreply\r\nflush_all 10 noreply\r\nflush_all abc\r\n"
                  "flush_all -1\r\nflush_all 1 2 3\r\nflush_all 0\r\n"),
              "OK\r\nOK\r\nCLIENT_ERROR invalid exptime argument\r\nOK\r\nERROR\r\nOK\r\n");
    EXPECT_EQ(run("version\r\nversion x\r\n"), "VERSION 1.6.18-spindle-kv\r\nVERSION 1.6.18-spindle-kv\r\n");
    EXPECT_EQ(run("verbosity\r\nverbosity 1\r\nverbosity 1 noreply\r\nverbosity abc\r\nverbosity 1 2 3\r\n"),
              "ERROR\r\nOK\r\nCLIENT_ERROR bad command line format\r\nERROR\r\n");
}

TEST_F(Protocol, FlushAllKillsWhatWasStoredBefore) {
    EXPECT_EQ(run("set a 0 0 1\r\nx\r\n"), "STORED\r\n");
    now_ += 5;
    EXPECT_EQ(run("flush_all\r\nget a\r\n"), "OK\r\nEND\r\n");
    now_ += 5;
    EXPECT_EQ(run("set a 0 0 1\r\ny\r\nflush_all 10\r\nget a\r\n"), "STORED\r\nOK\r\nVALUE a 0 1\r\ny\r\nEND\r\n");
    now_ += 11;
    EXPECT_EQ(run("get a\r\n"), "END\r\n");
}

TEST_F(Protocol, QuitClosesWithoutReply) {
    EXPECT_EQ(run("quit\r\nversion\r\n"), "");
    EXPECT_EQ(last_, kv::action::close);
    kv::session s2(ctx_);
    EXPECT_EQ(run(s2, "version\r\n quit now\r\n"), "VERSION 1.6.18-spindle-kv\r\n");
    EXPECT_EQ(last_, kv::action::close);
}

TEST_F(Protocol, LongLinesCloseUnlessAMultiget) {
    EXPECT_EQ(run(std::string(kv::session::line_max + 1, 'x')), "");
    EXPECT_EQ(last_, kv::action::close);
    kv::session s2(ctx_);
    EXPECT_EQ(run(s2, std::string(kv::session::line_max, 'x')), "");  // at the limit: still waits for \n
    EXPECT_EQ(last_, kv::action::more);
    EXPECT_EQ(run(s2, "\r\n"), "ERROR\r\n");
    kv::session s4(ctx_);  // memcached answers a 3000-byte line that comes at once
    EXPECT_EQ(run(s4, std::string(3000, 'x') + "\r\n"), "ERROR\r\n");
    EXPECT_EQ(last_, kv::action::more);
    // A multiget may be longer: 3000 bytes of one key, then the \n.
    kv::session s3(ctx_);
    EXPECT_EQ(run(s3, "get " + std::string(3000, 'a')), "");
    EXPECT_EQ(last_, kv::action::more);
    EXPECT_EQ(run(s3, "\r\n"), "CLIENT_ERROR bad command line format\r\n");
    std::string keys = "  gets";
    while (keys.size() < 100000) keys += " key" + std::to_string(keys.size());
    EXPECT_EQ(run_bytewise(s3, keys + "\r\n"), "END\r\n");
    EXPECT_EQ(last_, kv::action::more);
    // ... up to get_line_max.
    EXPECT_EQ(run(s3, "get " + std::string(kv::session::get_line_max, 'a')), "");
    EXPECT_EQ(last_, kv::action::close);
}

TEST_F(Protocol, BinaryProtocolBytesAreAnAsciiLine) {
    std::string header("\x80\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
                       24);
    EXPECT_EQ(run(header), "");
    EXPECT_EQ(last_, kv::action::more);
    kv::session s2(ctx_);
    EXPECT_EQ(run(s2, "\x80get a\r\n"), "ERROR\r\n");
    kv::session s3(ctx_);
    EXPECT_EQ(run(s3, "version\r\n\x80get a\r\n"), "VERSION 1.6.18-spindle-kv\r\nERROR\r\n");
    EXPECT_EQ(run(s3, "get a\0b\r\n"s), "END\r\n");  // a \0 is a key byte
}

TEST_F(Protocol, StatsSubcommands) {
    EXPECT_EQ(run("stats foo\r\nstats x y\r\nstats detail\r\n"),
              "ERROR\r\nERROR\r\nCLIENT_ERROR usage: stats detail on|off|dump\r\n");
    EXPECT_EQ(run("stats items\r\nstats slabs\r\n"), "END\r\nEND\r\n");
    std::string settings = run("stats settings\r\n");
    EXPECT_NE(settings.find("STAT item_size_max 1048576\r\n"), std::string::npos) << settings;
    EXPECT_NE(settings.find("STAT cas_enabled yes\r\n"), std::string::npos) << settings;
    EXPECT_TRUE(settings.ends_with("END\r\n"));
}

TEST_F(Protocol, StatsCountWhatHappened) {
    run("set a 0 0 1\r\n1\r\nget a b\r\ngets a\r\ndelete b\r\nincr a 1\r\ndecr b 1\r\ntouch a 0\r\ntouch b 0\r\n"
        "cas a 0 0 1 1\r\nx\r\ncas b 0 0 1 1\r\nx\r\nflush_all\r\n");
    auto m = stats();
    for (const char* name :
         {"pid", "uptime", "time", "version", "pointer_size", "rusage_user", "rusage_system", "curr_connections",
          "total_connections", "cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses",
          "get_expired", "get_flushed", "delete_misses", "delete_hits", "incr_misses", "incr_hits", "decr_misses",
          "decr_hits", "cas_misses", "cas_hits", "cas_badval", "touch_hits", "touch_misses", "bytes_read",
          "bytes_written", "limit_maxbytes", "threads", "curr_items", "total_items", "bytes", "evictions",
          "reclaimed"})
        EXPECT_TRUE(m.contains(name)) << name;
    EXPECT_EQ(m["cmd_get"], "3");
    EXPECT_EQ(m["get_hits"], "2");
    EXPECT_EQ(m["get_misses"], "1");
    EXPECT_EQ(m["cmd_set"], "3");
    EXPECT_EQ(m["cmd_flush"], "1");
    EXPECT_EQ(m["cmd_touch"], "2");
    EXPECT_EQ(m["touch_hits"], "1");
    EXPECT_EQ(m["touch_misses"], "1");
    EXPECT_EQ(m["delete_misses"], "1");
    EXPECT_EQ(m["incr_hits"], "1");
    EXPECT_EQ(m["decr_misses"], "1");
    EXPECT_EQ(m["cas_badval"], "1");
    EXPECT_EQ(m["cas_misses"], "1");
    EXPECT_EQ(m["threads"], "2");
    EXPECT_EQ(m["time"], "1700001000");
    EXPECT_EQ(m["limit_maxbytes"], std::to_string(16u << 20));
    EXPECT_EQ(m["version"], "1.6.18-spindle-kv");
    EXPECT_NE(m["bytes_read"], "0");
    EXPECT_EQ(run("stats reset\r\n"), "RESET\r\n");
    m = stats();
    EXPECT_EQ(m["cmd_get"], "0");
    EXPECT_EQ(m["cas_badval"], "0");
}

// Any split of the input into reads gives the same replies.
TEST_F(Protocol, OneByteReadsAnswerTheSame) {
    std::string script =
        "set a 5 0 3\r\nabc\r\nget a b a\r\nset k 0 0 3\r\nabcde\r\nincr a 1\r\nset n 0 0 2\r\n10\r\nincr n 7\r\n"
        "set big 0 0 2000000\r\n" + std::string(2000002, 'q') +
        "get n\r\ndelete a 0\r\ntouch n 0 noreply\r\nappend n 0 0 1\r\n!\r\nget n big\r\nversion\r\n";
    kv::session whole(ctx_);
    std::string a = run(whole, script);
    run("flush_all\r\n");
    now_ += 3;
    kv::session bytes(ctx_);
    std::string b = run_bytewise(bytes, script);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a,
              "STORED\r\nVALUE a 5 3\r\nabc\r\nVALUE a 5 3\r\nabc\r\nEND\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\n"
              "CLIENT_ERROR cannot increment or decrement non-numeric value\r\nSTORED\r\n17\r\n"
              "SERVER_ERROR object too large for cache\r\nVALUE n 0 2\r\n17\r\nEND\r\nDELETED\r\nSTORED\r\n"
              "VALUE n 0 3\r\n17!\r\nEND\r\nVERSION 1.6.18-spindle-kv\r\n");
}

TEST_F(Protocol, APeerThatLeavesMidValueStoresNothing) {
    {
        kv::session gone(ctx_);
        EXPECT_EQ(run(gone, "set v 0 0 10\r\nabc"), "");
    }
    EXPECT_EQ(run("get v\r\n"), "END\r\n");
}

// Sessions on fibers of several workers: their counts, kept per worker,
// add up.
TEST_F(Protocol, CountersSumOverWorkers) {
    EXPECT_EQ(run("set a 0 0 1\r\n1\r\n"), "STORED\r\n");
    {
        spindle::scheduler sched({.workers = 2});
        std::vector<spindle::fiber> fs;
        for (int f = 0; f < 8; ++f)
            fs.push_back(sched.spawn([&] {
                kv::session s(ctx_);
                for (int i = 0; i < 500; ++i) {
                    s.feed("get a b\r\n");
                    EXPECT_EQ(s.output(), "VALUE a 0 1\r\n1\r\nEND\r\n");
                    s.output_written();
                    spindle::this_fiber::yield();
                }
            }));
        for (auto& f : fs) f.join();
    }
    auto m = stats();
    EXPECT_EQ(m["cmd_get"], "8000");
    EXPECT_EQ(m["get_hits"], "4000");
    EXPECT_EQ(m["get_misses"], "4000");
    EXPECT_EQ(m["bytes_read"], std::to_string(8 * 500 * 9 + 16 + 7));  // + the set, + this "stats\r\n"
}

}  // namespace
