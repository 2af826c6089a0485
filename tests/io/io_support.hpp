// What the I/O tests share (tests/io): where a test body runs (fibers of a
// scheduler with 1 or 2 workers, or plain threads), a temporary directory,
// connected pairs of every stream kind, the count of open descriptors, the
// numbered byte sequence the loss tests stream, and a patience deadline
// that turns a hang into a failure.
//
// Every test of spindle_io_tests runs twice under ctest: on the default
// backend (io_uring where the kernel allows it) and with SPINDLE_IO=epoll
// (tests/CMakeLists.txt). A test that needs to know which reads
// io::current_backend().
#pragma once

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <spindle/arch/config.hpp>
#include <spindle/io.hpp>
#include <spindle/runtime/detail/worker.hpp>
#include <spindle/runtime/scheduler.hpp>

#include "../support/fiber_fixtures.hpp"

namespace spindle::test {

namespace io = spindle::io;

// Sanitizer builds: every system call and fiber switch costs much more, so
// the long loops run shorter there.
inline constexpr bool under_sanitizer = SPINDLE_ASAN || SPINDLE_TSAN;

// A deadline for calls that should finish soon: a bug that makes one wait
// forever fails the test instead of hanging ctest. Never a timing check.
inline io::limits patience() { return io::timeout(std::chrono::seconds(60)); }

// Gives every worker of `s` its I/O engine (its ring, or its epoll set), so
// that sleeps and deadlines go to the engine's timers and no later call
// needs a descriptor for one: each worker reads, with short deadlines,
// until a read has reached its engine. (On epoll a read whose deadline
// passed before it could wait, as on a loaded machine one may, returns
// without reaching it; so does one that succeeds at once.)
inline void make_engines(spindle::scheduler& s) {
    int p[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, p), 0);
    io::stream a(p[0]), b(p[1]);
    for (unsigned w = 0; w < s.workers(); ++w)
        s.spawn(
             [&] {
                 // relaxed: this worker's own store (its engine), read on its thread
                 auto has_engine = [] {
                     return spindle::detail::current_worker()->io.load(std::memory_order_relaxed) != nullptr;
                 };
                 for (auto t = std::chrono::milliseconds(1); !has_engine(); t *= 2) {
                     char c = 0;
                     auto n = b.read_some(&c, 1, io::timeout(t));
                     ASSERT_FALSE(n);
                     EXPECT_EQ(n.error(), std::errc::timed_out);
                 }
             },
             {.worker = static_cast<int>(w), .pinned = true})
            .join();
}

// Where a test's bodies run.
// caller: fibers of a one-worker scheduler whose worker is the test's own
// thread (scheduler::options::caller_is_worker).
enum class where { one_worker, two_workers, threads, caller };

inline const char* where_name(where w) {
    switch (w) {
    case where::one_worker: return "fibers_1worker";
    case where::two_workers: return "fibers_2workers";
    case where::threads: return "threads";
    case where::caller: return "fibers_caller";
    }
    return "?";
}
inline std::string where_param_name(const ::testing::TestParamInfo<where>& i) { return where_name(i.param); }
// How gtest prints a `where` (test listings, failures).
inline void PrintTo(where w, std::ostream* os) { *os << where_name(w); }
inline const where all_places[] = {where::one_worker, where::two_workers, where::threads};
inline const where fiber_places[] = {where::one_worker, where::two_workers};

// Runs every body at once -- as fibers of one scheduler (1 or 2 workers),
// or each on its own plain thread -- and returns when all have returned.
inline void run_together(where w, std::vector<std::function<void()>> bodies) {
    if (w == where::threads) {
        std::vector<std::thread> ts;
        for (auto& b : bodies) ts.emplace_back(b);
        for (auto& t : ts) t.join();
        return;
    }
    scheduler sched({.workers = w == where::two_workers ? 2u : 1u, .caller_is_worker = w == where::caller});
    std::vector<fiber> fs;
    for (auto& b : bodies) fs.push_back(sched.spawn(b));
    if (w == where::caller) sched.run();
    for (auto& f : fs) f.join();
}

// One body, where `w` says.
inline void run_one(where w, std::function<void()> body) { run_together(w, {std::move(body)}); }

// A fresh directory under $TMPDIR (or /tmp), removed with what it holds.
class temp_dir {
public:
    temp_dir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/spindle-io-XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) throw std::system_error(errno, std::system_category(), "mkdtemp");
        path_ = tmpl;
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    [[nodiscard]] const std::string& path() const { return path_; }
    [[nodiscard]] std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

// A unique abstract Unix-domain name ("@..."), so parallel runs never meet.
inline std::string abstract_name(const char* what) {
    static std::atomic<int> n{0};
    return "@spindle-io-test-" + std::to_string(::getpid()) + "-" + what + "-" + std::to_string(n.fetch_add(1));
}

// Open descriptors of this process (/proc/self/fd; the directory's own
// descriptor not counted).
inline int count_fds() {
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) return -1;
    int n = 0;
    while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') ++n;
    ::closedir(d);
    return n - 1;
}

// Whether this host can bind ::1 (containers without IPv6 cannot).
inline bool ipv6_loopback_available() {
    const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

// A connected stream pair: `a` connected to a listener at `at`, `b` the
// accepted end. Connecting needs no concurrent accept (the kernel completes
// it into the backlog), so this works from a fiber or a plain thread.
struct stream_pair {
    io::stream a, b;
};
inline stream_pair connected_pair(const io::endpoint& at) {
    io::listener l = io::listener::bind(at).value();
    io::stream a = io::stream::connect(l.local_endpoint().value(), patience()).value();
    io::stream b = l.accept(patience()).value();
    return {std::move(a), std::move(b)};
}
// A Unix-domain stream pair from socketpair(2), adopted by io::stream.
inline stream_pair socket_pair() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        throw std::system_error(errno, std::system_category(), "socketpair");
    return {io::stream(sv[0]), io::stream(sv[1])};
}

// The numbered byte sequence: byte i of a stream is sequence_byte(i). A
// period of 251 (prime) so that a chunk lost or repeated at any power-of-two
// boundary shows.
inline std::byte sequence_byte(std::uint64_t i) noexcept { return static_cast<std::byte>(i % 251); }
inline std::vector<std::byte> sequence(std::size_t n, std::uint64_t from = 0) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = sequence_byte(from + i);
    return v;
}
// The first index at which `got` departs from the sequence starting at
// `from`, or got.size() if it does not.
inline std::size_t sequence_mismatch(const std::byte* got, std::size_t n, std::uint64_t from = 0) {
    for (std::size_t i = 0; i < n; ++i)
        if (got[i] != sequence_byte(from + i)) return i;
    return n;
}

// std::errc of an error_code of the system category, for EXPECT_EQ.
inline std::error_code errc_code(std::errc e) { return std::make_error_code(e); }

}  // namespace spindle::test
