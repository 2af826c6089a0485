// Files (include/spindle/io/file.hpp): on io_uring through the ring, on
// epoll and from plain threads as direct system calls (can_wait = false).
#include <unistd.h>

#include <cerrno>
#include <climits>

#include <spindle/io/file.hpp>

#include "io_internal.hpp"

namespace spindle::io {

using detail::neg_errno;
using detail::op_spec;

namespace {

using detail::count_or_error;
using detail::err;

int sys_pread(op_spec& o) { return neg_errno(::pread(o.fd, o.buf, o.len, o.off)); }
SPINDLE_IO_URING_FORM(prep_pread, {
    io_uring_prep_read(s, o.fd, o.buf, static_cast<unsigned>(o.len), static_cast<__u64>(o.off));
})
// A cached read: preadv2 with RWF_NOWAIT fails with EAGAIN rather than wait
// for the device.
int nowait_pread(op_spec& o) {
    iovec v{o.buf, o.len};
    return neg_errno(::preadv2(o.fd, &v, 1, o.off, RWF_NOWAIT));
}
int nowait_preadv(op_spec& o) { return neg_errno(::preadv2(o.fd, o.iov, o.iovcnt, o.off, RWF_NOWAIT)); }
int sys_pwrite(op_spec& o) { return neg_errno(::pwrite(o.fd, o.buf, o.len, o.off)); }
SPINDLE_IO_URING_FORM(prep_pwrite, {
    io_uring_prep_write(s, o.fd, o.buf, static_cast<unsigned>(o.len), static_cast<__u64>(o.off));
})
int sys_preadv(op_spec& o) { return neg_errno(::preadv(o.fd, o.iov, o.iovcnt, o.off)); }
SPINDLE_IO_URING_FORM(prep_preadv, {
    io_uring_prep_readv(s, o.fd, o.iov, static_cast<unsigned>(o.iovcnt), static_cast<__u64>(o.off));
})
int sys_pwritev(op_spec& o) { return neg_errno(::pwritev(o.fd, o.iov, o.iovcnt, o.off)); }
SPINDLE_IO_URING_FORM(prep_pwritev, {
    io_uring_prep_writev(s, o.fd, o.iov, static_cast<unsigned>(o.iovcnt), static_cast<__u64>(o.off));
})
int sys_fsync(op_spec& o) { return neg_errno(o.flags != 0 ? ::fdatasync(o.fd) : ::fsync(o.fd)); }
SPINDLE_IO_URING_FORM(prep_fsync, {
    io_uring_prep_fsync(s, o.fd, o.flags != 0 ? IORING_FSYNC_DATASYNC : 0);
})

// A transfer's length fits the ring's 32-bit field (and read(2)'s limit).
constexpr std::size_t max_transfer = 0x7ffff000;

result<std::size_t> run(int fd, int (*sys)(op_spec&), void (*prep)(io_uring_sqe*, op_spec&), void* buf,
                        std::size_t n, off_t off, const limits& l, int (*nowait)(op_spec&) = nullptr) {
    op_spec o;
    o.nowait = nowait;
    o.fd = fd;
    o.can_wait = false;
    o.sys = sys;
    o.prep = prep;
    o.buf = buf;
    o.len = std::min(n, max_transfer);
    o.off = off;
    return count_or_error(detail::perform(o, l));
}

result<std::size_t> run_v(int fd, int (*sys)(op_spec&), void (*prep)(io_uring_sqe*, op_spec&),
                          std::span<const iovec> bufs, off_t off, const limits& l,
                          int (*nowait)(op_spec&) = nullptr) {
    op_spec o;
    o.nowait = nowait;
    o.fd = fd;
    o.can_wait = false;
    o.sys = sys;
    o.prep = prep;
    o.iov = bufs.data();
    o.iovcnt = static_cast<int>(std::min<std::size_t>(bufs.size(), IOV_MAX));
    o.off = off;
    return count_or_error(detail::perform(o, l));
}

}  // namespace

file& file::operator=(file&& o) noexcept {
    if (this != &o) {
        close();
        fd_ = o.release();
    }
    return *this;
}

file::~file() { close(); }

result<file> file::open(const char* path, int flags, mode_t mode, limits l) {
    if (detail::effective_stop(l).stop_requested()) return std::errc::operation_canceled;
    int fd = ::open(path, flags | O_CLOEXEC, mode);
    if (fd < 0) return std::error_code(errno, std::system_category());
    return file(fd);
}

// (Each positioned call refuses a negative offset, as pread(2) does:
// io_uring and preadv2 would read at the file position for -1.)
result<std::size_t> file::pread(void* buf, std::size_t n, off_t offset, limits l) {
    if (offset < 0) return std::errc::invalid_argument;
    return run(fd_, &sys_pread, prep_pread, buf, n, offset, l, &nowait_pread);
}
result<std::size_t> file::pwrite(const void* buf, std::size_t n, off_t offset, limits l) {
    if (offset < 0) return std::errc::invalid_argument;
    return run(fd_, &sys_pwrite, prep_pwrite, const_cast<void*>(buf), n, offset, l);
}
result<std::size_t> file::preadv(std::span<const iovec> bufs, off_t offset, limits l) {
    if (offset < 0) return std::errc::invalid_argument;
    return run_v(fd_, &sys_preadv, prep_preadv, bufs, offset, l, &nowait_preadv);
}
result<std::size_t> file::pwritev(std::span<const iovec> bufs, off_t offset, limits l) {
    if (offset < 0) return std::errc::invalid_argument;
    return run_v(fd_, &sys_pwritev, prep_pwritev, bufs, offset, l);
}

std::error_code file::fsync(limits l) {
    op_spec o;
    o.fd = fd_;
    o.can_wait = false;
    o.sys = &sys_fsync;
    o.prep = prep_fsync;
    int r = detail::perform(o, l);
    return r < 0 ? err(r) : std::error_code{};
}

std::error_code file::fdatasync(limits l) {
    op_spec o;
    o.fd = fd_;
    o.can_wait = false;
    o.sys = &sys_fsync;
    o.prep = prep_fsync;
    o.flags = 1;
    int r = detail::perform(o, l);
    return r < 0 ? err(r) : std::error_code{};
}

std::error_code file::close() noexcept {
    int fd = release();
    if (fd < 0) return {};
    if (::close(fd) < 0 && errno != EINTR) return {errno, std::system_category()};
    return {};
}

}  // namespace spindle::io
