// io::file on a temporary file, from fibers on 1 and 2 workers and from
// plain threads: open (O_CLOEXEC added), pwrite / pread at offsets
// (a hole reads as zeros), pwritev / preadv, fsync / fdatasync, reads at
// and past the end of the file return 0, several MiB in one call, many
// fibers writing disjoint regions at once; and the errors: a file that does
// not exist, a descriptor that is not open, a write to a read-only file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "io_support.hpp"

namespace {

using namespace spindle::test;

class IoFile : public ::testing::TestWithParam<where> {
protected:
    temp_dir dir_;
};

TEST_P(IoFile, WriteReadAtOffsets) {
    const std::string path = dir_ / "data.bin";
    run_one(GetParam(), [&] {
        auto f = io::file::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
        ASSERT_TRUE(f) << f.error().message();
        EXPECT_TRUE(f->is_open());
        EXPECT_TRUE(::fcntl(f->native_handle(), F_GETFD) & FD_CLOEXEC);

        auto w = f->pwrite("hello", 5, 0);
        ASSERT_TRUE(w) << w.error().message();
        EXPECT_EQ(*w, 5u);
        w = f->pwrite("world", 5, 1 << 20);  // leaves a hole
        ASSERT_TRUE(w);
        EXPECT_EQ(*w, 5u);

        char buf[16] = {};
        auto r = f->pread(buf, 5, 0);
        ASSERT_TRUE(r) << r.error().message();
        EXPECT_EQ(std::string(buf, *r), "hello");
        r = f->pread(buf, 5, 1 << 20);
        ASSERT_TRUE(r);
        EXPECT_EQ(std::string(buf, *r), "world");
        // The hole reads as zeros.
        std::memset(buf, 'x', sizeof buf);
        r = f->pread(buf, 16, 4096);
        ASSERT_TRUE(r);
        ASSERT_EQ(*r, 16u);
        for (char c : buf) EXPECT_EQ(c, '\0');
        // A short read at the end, then 0 at and past it.
        r = f->pread(buf, 16, (1 << 20) + 2);
        ASSERT_TRUE(r);
        EXPECT_EQ(*r, 3u);
        EXPECT_EQ(std::string(buf, 3), "rld");
        r = f->pread(buf, 16, (1 << 20) + 5);
        ASSERT_TRUE(r);
        EXPECT_EQ(*r, 0u);
        r = f->pread(buf, 16, 1 << 30);
        ASSERT_TRUE(r);
        EXPECT_EQ(*r, 0u);

        EXPECT_FALSE(f->fsync());
        EXPECT_FALSE(f->fdatasync());
        EXPECT_FALSE(f->close());
        EXPECT_FALSE(f->is_open());
    });
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, (1 << 20) + 5);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_P(IoFile, VectoredReadAndWrite) {
    const std::string path = dir_ / "vec.bin";
    run_one(GetParam(), [&] {
        auto f = io::file::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC);
        ASSERT_TRUE(f) << f.error().message();
        std::string a = "alpha", b = "", c = "gamma-delta";
        const iovec out[] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
        auto w = f->pwritev(out, 10);
        ASSERT_TRUE(w) << w.error().message();
        EXPECT_EQ(*w, 16u);
        char x[3], y[8], z[32];
        const iovec in[] = {{x, sizeof x}, {y, sizeof y}, {z, sizeof z}};
        auto r = f->preadv(in, 10);
        ASSERT_TRUE(r) << r.error().message();
        EXPECT_EQ(*r, 16u);  // a short read: the file ends
        EXPECT_EQ(std::string(x, 3), "alp");
        EXPECT_EQ(std::string(y, 8), "hagamma-");
        EXPECT_EQ(std::string(z, 5), "delta");
        r = f->preadv(in, 26);
        ASSERT_TRUE(r);
        EXPECT_EQ(*r, 0u);
    });
}

// 4 MiB written and read back in one call each (a regular file takes it
// whole), content checked.
TEST_P(IoFile, LargeTransfer) {
    const std::string path = dir_ / "large.bin";
    const std::size_t size = 4u << 20;
    const auto data = sequence(size, 3);
    run_one(GetParam(), [&] {
        auto f = io::file::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC);
        ASSERT_TRUE(f) << f.error().message();
        std::size_t off = 0;
        while (off < size) {
            auto w = f->pwrite(data.data() + off, size - off, static_cast<off_t>(off));
            ASSERT_TRUE(w) << w.error().message();
            ASSERT_GT(*w, 0u);
            off += *w;
        }
        ASSERT_FALSE(f->fdatasync());
        std::vector<std::byte> in(size + 100);
        std::size_t got = 0;
        for (;;) {
            auto r = f->pread(in.data() + got, in.size() - got, static_cast<off_t>(got));
            ASSERT_TRUE(r) << r.error().message();
            if (*r == 0) break;
            got += *r;
        }
        EXPECT_EQ(got, size);
        EXPECT_EQ(sequence_mismatch(in.data(), size, 3), size);
    });
}

// 64 fibers (or 8 threads) write disjoint 64 KiB regions of one file at
// once, then each reads its region back.
TEST_P(IoFile, ConcurrentDisjointRegions) {
    const std::string path = dir_ / "regions.bin";
    auto f = io::file::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC);
    ASSERT_TRUE(f) << f.error().message();
    const int n = GetParam() == where::threads ? 8 : 64;
    const std::size_t region = 64 * 1024;
    std::atomic<int> right{0};
    std::vector<std::function<void()>> bodies;
    for (int i = 0; i < n; ++i)
        bodies.emplace_back([&, i] {
            const auto mine = sequence(region, static_cast<std::uint64_t>(i));
            const off_t at = static_cast<off_t>(region) * i;
            auto w = f->pwrite(mine.data(), region, at);
            ASSERT_TRUE(w) << w.error().message();
            ASSERT_EQ(*w, region);
            this_fiber::yield();
            std::vector<std::byte> back(region);
            auto r = f->pread(back.data(), region, at);
            ASSERT_TRUE(r) << r.error().message();
            ASSERT_EQ(*r, region);
            if (sequence_mismatch(back.data(), region, static_cast<std::uint64_t>(i)) == region) right.fetch_add(1);
        });
    run_together(GetParam(), std::move(bodies));
    EXPECT_EQ(right.load(), n);
    EXPECT_FALSE(f->fsync());
}

TEST_P(IoFile, Errors) {
    const std::string path = dir_ / "ro.bin";
    run_one(GetParam(), [&] {
        auto missing = io::file::open((dir_ / "missing").c_str(), O_RDONLY);
        ASSERT_FALSE(missing);
        EXPECT_EQ(missing.error(), std::errc::no_such_file_or_directory) << missing.error().message();

        // Not open: EBADF from every call.
        io::file none;
        EXPECT_FALSE(none.is_open());
        char b[4];
        auto r = none.pread(b, sizeof b, 0);
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error(), std::errc::bad_file_descriptor) << r.error().message();
        auto w = none.pwrite(b, sizeof b, 0);
        ASSERT_FALSE(w);
        EXPECT_EQ(w.error(), std::errc::bad_file_descriptor) << w.error().message();
        EXPECT_EQ(none.fsync(), std::errc::bad_file_descriptor);

        // Read-only: writing fails with EBADF, reading works.
        {
            auto c = io::file::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC);
            ASSERT_TRUE(c);
            ASSERT_EQ(c->pwrite("data", 4, 0).value(), 4u);
        }
        auto ro = io::file::open(path.c_str(), O_RDONLY);
        ASSERT_TRUE(ro) << ro.error().message();
        auto bad = ro->pwrite("x", 1, 0);
        ASSERT_FALSE(bad);
        EXPECT_EQ(bad.error(), std::errc::bad_file_descriptor) << bad.error().message();
        EXPECT_EQ(ro->pread(b, 4, 0).value(), 4u);
        EXPECT_EQ(std::string(b, 4), "data");
        // A negative offset is invalid.
        auto neg = ro->pread(b, 4, -1);
        ASSERT_FALSE(neg) << "pread at offset -1 returned " << *neg
                          << " bytes: read at the file position (as io_uring and preadv2 take -1), not EINVAL";
        EXPECT_EQ(neg.error(), std::errc::invalid_argument) << neg.error().message();

        // A directory cannot be read as a file.
        auto d = io::file::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY);
        ASSERT_TRUE(d) << d.error().message();
        auto isdir = d->pread(b, 4, 0);
        ASSERT_FALSE(isdir);
        EXPECT_EQ(isdir.error(), std::errc::is_a_directory) << isdir.error().message();
    });
}

// Moving a file moves the descriptor; the moved-from one is empty; the
// destructor closes.
TEST(IoFileHandle, MoveAndDestroy) {
    temp_dir dir;
    const std::string path = dir / "m.bin";
    int fd = -1;
    {
        io::file a = io::file::open(path.c_str(), O_RDWR | O_CREAT).value();
        fd = a.native_handle();
        io::file b = std::move(a);
        EXPECT_FALSE(a.is_open());  // NOLINT: checking the moved-from state on purpose
        EXPECT_EQ(b.native_handle(), fd);
        io::file c;
        c = std::move(b);
        EXPECT_EQ(c.native_handle(), fd);
        EXPECT_GE(::fcntl(fd, F_GETFD), 0);
    }
    EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "the destructor closes";
    EXPECT_EQ(errno, EBADF);
}

INSTANTIATE_TEST_SUITE_P(All, IoFile, ::testing::ValuesIn(all_places), where_param_name);

}  // namespace
