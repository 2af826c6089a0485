// wait_readable / wait_writable (include/spindle/io/wait.hpp).
#include <poll.h>

#include <cerrno>

#include <spindle/io/wait.hpp>

#include "io_internal.hpp"

namespace spindle::io {

namespace {

using detail::op_spec;

// Ready now? (the non-blocking attempt of a readiness wait)
int sys_poll(op_spec& o) {
    pollfd p{o.fd, o.poll_events, 0};
    int n = ::poll(&p, 1, 0);
    if (n < 0) return -errno;
    if (n == 0) return -EAGAIN;
    return (p.revents & POLLNVAL) != 0 ? -EBADF : 0;
}
SPINDLE_IO_URING_FORM(prep_poll, {
    io_uring_prep_poll_add(s, o.fd, static_cast<unsigned>(o.poll_events));
})

std::error_code wait_for(int fd, bool write, const limits& l) {
    op_spec o;
    o.fd = fd;
    o.write = write;
    o.owned = false;  // not ours: re-arm its registration each time (epoll.cpp)
    o.poll_events = write ? POLLOUT : POLLIN;
    o.sys = &sys_poll;
    o.prep = prep_poll;
    int r = detail::perform(o, l);
    if (r < 0) return {-r, std::system_category()};
    return {};  // (a poll's result is the revents mask: ready)
}

}  // namespace

std::error_code wait_readable(int fd, limits l) { return wait_for(fd, false, l); }
std::error_code wait_writable(int fd, limits l) { return wait_for(fd, true, l); }

}  // namespace spindle::io
