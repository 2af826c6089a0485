// spindle/io/file.hpp — files for fibers: open, positioned reads and writes
// (vectored too), fsync, close.
//
//     auto f = io::file::open("data.bin", O_RDONLY).value();
//     auto n = f.pread(buf, sizeof buf, offset);
//
// On io_uring the call goes to the ring and the fiber parks while the
// kernel works. On epoll, which cannot wait for regular files, the system
// call runs directly (a page-cache hit costs the same; a cold read holds
// the worker). From a plain thread: the system call. Short reads and writes
// are returned as they come (pread at end of file returns 0). `limits`
// as everywhere (io/result.hpp); a call already with the device finishes
// before it returns.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <span>

#include <spindle/io/result.hpp>

namespace spindle::io {

class file {
public:
    file() noexcept = default;
    explicit file(int fd) noexcept : fd_(fd) {}  // adopt
    file(file&& o) noexcept : fd_(o.release()) {}
    file& operator=(file&& o) noexcept;
    ~file();

    // open(2); O_CLOEXEC is added.
    static result<file> open(const char* path, int flags, mode_t mode = 0644, limits l = {});

    result<std::size_t> pread(void* buf, std::size_t n, off_t offset, limits l = {});
    result<std::size_t> pwrite(const void* buf, std::size_t n, off_t offset, limits l = {});
    result<std::size_t> preadv(std::span<const iovec> bufs, off_t offset, limits l = {});
    result<std::size_t> pwritev(std::span<const iovec> bufs, off_t offset, limits l = {});
    std::error_code fsync(limits l = {});
    std::error_code fdatasync(limits l = {});
    std::error_code close() noexcept;

    [[nodiscard]] int native_handle() const noexcept { return fd_; }
    [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
    int release() noexcept {
        int fd = fd_;
        fd_ = -1;
        return fd;
    }

private:
    int fd_ = -1;
};

}  // namespace spindle::io
