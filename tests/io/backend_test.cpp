// The backend: io::current_backend() is what SPINDLE_IO asked for
// (ctest runs this binary once with SPINDLE_IO unset and once with
// SPINDLE_IO=epoll), io_uring by default where the kernel allows it, the
// same answer from every thread and fiber; backend_name() names both; and
// SPINDLE_IO set to anything else stops the program with a message naming
// the variable.
#include <gtest/gtest.h>

#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io_support.hpp"

namespace {

using namespace spindle::test;

// Whether this kernel lets the process set up an io_uring (containers
// often refuse it: ENOSYS, EPERM).
bool kernel_allows_io_uring() {
#ifdef __NR_io_uring_setup
    io_uring_params p;
    std::memset(&p, 0, sizeof p);
    const long fd = ::syscall(__NR_io_uring_setup, 4, &p);
    if (fd < 0) return false;
    ::close(static_cast<int>(fd));
    return true;
#else
    return false;
#endif
}

TEST(IoBackend, IsWhatSpindleIoAsks) {
    const char* env = std::getenv("SPINDLE_IO");
    const std::string asked = env != nullptr ? env : "";
    const io::backend b = io::current_backend();
    if (asked == "epoll") {
        EXPECT_EQ(b, io::backend::epoll) << "SPINDLE_IO=epoll";
    } else if (asked == "uring" || asked == "io_uring") {
        EXPECT_EQ(b, io::backend::io_uring) << "SPINDLE_IO=" << asked;
    } else {
        ASSERT_TRUE(asked.empty()) << "unexpected SPINDLE_IO=" << asked;
        if (!io::backend_built(io::backend::io_uring)) {
            EXPECT_EQ(b, io::backend::epoll) << "built without io_uring: epoll";
        } else if (kernel_allows_io_uring()) {
            EXPECT_EQ(b, io::backend::io_uring) << "io_uring is the default where the kernel allows it";
        } else {
            EXPECT_EQ(b, io::backend::epoll) << "the kernel refuses io_uring: epoll";
        }
    }
    std::printf("[ backend  ] %s (SPINDLE_IO=%s)\n", io::backend_name(b), asked.c_str());
}

TEST(IoBackend, SameEverywhere) {
    const io::backend b = io::current_backend();
    std::atomic<int> same{0};
    run_together(where::two_workers, {
        [&] { same.fetch_add(io::current_backend() == b); },
        [&] { same.fetch_add(io::current_backend() == b); },
    });
    std::thread([&] { same.fetch_add(io::current_backend() == b); }).join();
    EXPECT_EQ(same.load(), 3);
    EXPECT_EQ(io::current_backend(), b);
}

TEST(IoBackend, EpollIsAlwaysBuilt) {
    EXPECT_TRUE(io::backend_built(io::backend::epoll));
    std::printf("[ built    ] io_uring %s\n", io::backend_built(io::backend::io_uring) ? "yes" : "no");
}

TEST(IoBackend, Names) {
    const char* u = io::backend_name(io::backend::io_uring);
    const char* e = io::backend_name(io::backend::epoll);
    ASSERT_NE(u, nullptr);
    ASSERT_NE(e, nullptr);
    EXPECT_NE(std::string(u).find("uring"), std::string::npos) << u;
    EXPECT_EQ(std::string(e), "epoll");
}

// The backend is chosen at the first I/O call of a process: the death
// test's child (a fresh process: "threadsafe" style re-runs the binary)
// sets SPINDLE_IO=bogus first, then makes that call.
TEST(IoBackendDeathTest, BogusSpindleIoAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            ::setenv("SPINDLE_IO", "bogus", 1);
            (void)io::current_backend();
        },
        "SPINDLE_IO");
    // Also when the first call is a socket's.
    EXPECT_DEATH(
        {
            ::setenv("SPINDLE_IO", "bogus", 1);
            scheduler sched({.workers = 1});
            sched.spawn([] {
                auto d = io::datagram::bind(io::endpoint::loopback_v4(0));
                char b;
                (void)d->receive_from(&b, 1, nullptr, io::timeout(1ms));
            }).join();
        },
        "SPINDLE_IO");
}

// A build without the io_uring backend refuses SPINDLE_IO=uring, saying why.
TEST(IoBackendDeathTest, UringAskedOfABuildWithoutItAborts) {
    if (io::backend_built(io::backend::io_uring)) GTEST_SKIP() << "this build has the io_uring backend";
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            ::setenv("SPINDLE_IO", "uring", 1);
            (void)io::current_backend();
        },
        "SPINDLE_IO=uring: this build of spindle::io has no io_uring backend");
}

}  // namespace
