// Sockets (include/spindle/io/socket.hpp): each call is an op_spec run by
// perform() (io_internal.hpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include <spindle/arch/config.hpp>
#include <spindle/io/socket.hpp>
#include <spindle/locks/detail/futex.hpp>  // raw_syscall6
#include <spindle/io/wait.hpp>
#include <spindle/runtime/fiber.hpp>

#include "io_internal.hpp"

namespace spindle::io {

using detail::neg_errno;
using detail::op_spec;
using detail::perform;

namespace {

using detail::count_or_error;
using detail::err;
std::error_code last_error() noexcept { return {errno, std::system_category()}; }

// ---- the operations -------------------------------------------------------

// The non-blocking calls below go to the kernel with the system call
// instruction itself (raw_syscall6, locks/detail/futex.hpp: the kernel's
// result, >= 0 or -errno), not through libc's recv, send, sendmsg, recvmsg
// and accept4. In a process with more than one thread, which every spindle
// process is (its workers), glibc brackets each of those with
// __pthread_enable/disable_asynccancel to make it a cancellation point: a
// lock cmpxchg apiece, four per echo round trip (callgrind of the echo
// server on epoll: 980 user-space instructions per round trip with them,
// 894 through libc's syscall(2), 852 this way). These calls never block
// (MSG_DONTWAIT; every socket spindle holds is non-blocking, adopted ones
// made so), so a pthread_cancel has no wait of theirs to end; the waits
// are poll(2) and epoll_wait, which stay libc's. Under a sanitizer they
// stay libc's too: its interceptors check the buffers and
// (ThreadSanitizer) order the descriptor's users.
#if SPINDLE_ASAN || SPINDLE_TSAN
int nb_recv(int fd, void* buf, std::size_t len, int flags) { return neg_errno(::recv(fd, buf, len, flags)); }
int nb_send(int fd, const void* buf, std::size_t len, int flags) { return neg_errno(::send(fd, buf, len, flags)); }
int nb_sendmsg(int fd, const msghdr* m, int flags) { return neg_errno(::sendmsg(fd, m, flags)); }
int nb_recvmsg(int fd, msghdr* m, int flags) { return neg_errno(::recvmsg(fd, m, flags)); }
int nb_accept4(int fd, sockaddr* a, socklen_t* len, int flags) { return neg_errno(::accept4(fd, a, len, flags)); }
#else
using spindle::detail::raw_syscall6;
long arg(const void* p) noexcept { return reinterpret_cast<long>(p); }
int nb_recv(int fd, void* buf, std::size_t len, int flags) {
    return static_cast<int>(raw_syscall6(SYS_recvfrom, fd, arg(buf), static_cast<long>(len), flags, 0, 0));
}
int nb_send(int fd, const void* buf, std::size_t len, int flags) {
    return static_cast<int>(raw_syscall6(SYS_sendto, fd, arg(buf), static_cast<long>(len), flags, 0, 0));
}
int nb_sendmsg(int fd, const msghdr* m, int flags) {
    return static_cast<int>(raw_syscall6(SYS_sendmsg, fd, arg(m), flags, 0, 0, 0));
}
int nb_recvmsg(int fd, msghdr* m, int flags) {
    return static_cast<int>(raw_syscall6(SYS_recvmsg, fd, arg(m), flags, 0, 0, 0));
}
int nb_accept4(int fd, sockaddr* a, socklen_t* len, int flags) {
    return static_cast<int>(raw_syscall6(SYS_accept4, fd, arg(a), arg(len), flags, 0, 0));
}
#endif

int sys_recv(op_spec& o) { return nb_recv(o.fd, o.buf, o.len, MSG_DONTWAIT); }
SPINDLE_IO_URING_FORM(prep_recv, { io_uring_prep_recv(s, o.fd, o.buf, o.len, 0); })

int sys_send(op_spec& o) { return nb_send(o.fd, o.buf, o.len, MSG_DONTWAIT | MSG_NOSIGNAL); }
SPINDLE_IO_URING_FORM(prep_send, { io_uring_prep_send(s, o.fd, o.buf, o.len, MSG_NOSIGNAL); })

int sys_sendmsg(op_spec& o) { return nb_sendmsg(o.fd, o.msg, MSG_DONTWAIT | MSG_NOSIGNAL); }
SPINDLE_IO_URING_FORM(prep_sendmsg, { io_uring_prep_sendmsg(s, o.fd, o.msg, MSG_NOSIGNAL); })

int sys_recvmsg(op_spec& o) { return nb_recvmsg(o.fd, o.msg, MSG_DONTWAIT); }
SPINDLE_IO_URING_FORM(prep_recvmsg, { io_uring_prep_recvmsg(s, o.fd, o.msg, 0); })

int sys_accept(op_spec& o) { return nb_accept4(o.fd, o.addr, o.addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC); }
SPINDLE_IO_URING_FORM(prep_accept, {
    io_uring_prep_accept(s, o.fd, o.addr, o.addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
})

// connect: the first try starts it (EINPROGRESS -> EAGAIN: wait for
// writability); the next ones read its outcome (SO_ERROR).
int sys_connect(op_spec& o) {
    if (o.flags == 0) {
        o.flags = 1;
        int r = ::connect(o.fd, o.addr, *o.addrlen);
        if (r == 0) return 0;
        return errno == EINPROGRESS || errno == EAGAIN ? -EAGAIN : -errno;
    }
    pollfd p{o.fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 0) return -EAGAIN;
    int e = 0;
    socklen_t len = sizeof e;
    if (::getsockopt(o.fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0) return -errno;
    return e == 0 ? 0 : -e;
}
SPINDLE_IO_URING_FORM(prep_connect, { io_uring_prep_connect(s, o.fd, o.addr, *o.addrlen); })

int new_socket(int family, int type) noexcept {
    return neg_errno(::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

void make_nonblocking(int fd) noexcept {
    int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK) == 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

result<endpoint> name_of(int fd, bool peer) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    auto* sa = reinterpret_cast<sockaddr*>(&ss);
    if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) < 0) return last_error();
    return endpoint::from_native(sa, len);
}

}  // namespace

// ---- endpoint --------------------------------------------------------------

endpoint::endpoint() noexcept = default;

result<endpoint> endpoint::ipv4(std::string_view address, std::uint16_t port) {
    std::string a(address);
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    if (::inet_pton(AF_INET, a.c_str(), &in.sin_addr) != 1) return std::errc::invalid_argument;
    return from_native(reinterpret_cast<sockaddr*>(&in), sizeof in);
}

result<endpoint> endpoint::ipv6(std::string_view address, std::uint16_t port) {
    std::string a(address);
    sockaddr_in6 in{};
    in.sin6_family = AF_INET6;
    in.sin6_port = htons(port);
    if (::inet_pton(AF_INET6, a.c_str(), &in.sin6_addr) != 1) return std::errc::invalid_argument;
    return from_native(reinterpret_cast<sockaddr*>(&in), sizeof in);
}

result<endpoint> endpoint::unix_path(std::string_view path) {
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof un.sun_path) return std::errc::invalid_argument;
    std::memcpy(un.sun_path, path.data(), path.size());
    if (path[0] == '@') un.sun_path[0] = '\0';  // abstract namespace
    auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (path[0] == '@' ? 0 : 1));
    return from_native(reinterpret_cast<sockaddr*>(&un), len);
}

endpoint endpoint::loopback_v4(std::uint16_t port) noexcept { return *ipv4("127.0.0.1", port); }
endpoint endpoint::loopback_v6(std::uint16_t port) noexcept { return *ipv6("::1", port); }
endpoint endpoint::any_v4(std::uint16_t port) noexcept { return *ipv4("0.0.0.0", port); }
endpoint endpoint::any_v6(std::uint16_t port) noexcept { return *ipv6("::", port); }

endpoint endpoint::from_native(const sockaddr* sa, socklen_t len) noexcept {
    endpoint e;
    if (len > sizeof e.storage_) len = sizeof e.storage_;
    std::memcpy(&e.storage_, sa, len);
    e.len_ = len;
    return e;
}

std::uint16_t endpoint::port() const noexcept {
    if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
    if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
    return 0;
}

std::string endpoint::to_string() const {
    // snprintf into a local buffer: GCC 12 at -O3 warns falsely (-Wrestrict)
    // about chains of std::string appends here.
    char addr[INET6_ADDRSTRLEN] = {};
    char out[160] = "?";
    if (family() == AF_INET) {
        ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, addr, sizeof addr);
        std::snprintf(out, sizeof out, "%s:%u", addr, unsigned{port()});
    } else if (family() == AF_INET6) {
        ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, addr, sizeof addr);
        std::snprintf(out, sizeof out, "[%s]:%u", addr, unsigned{port()});
    } else if (family() == AF_UNIX) {
        const auto* un = reinterpret_cast<const sockaddr_un*>(&storage_);
        std::size_t n = len_ > offsetof(sockaddr_un, sun_path) ? len_ - offsetof(sockaddr_un, sun_path) : 0;
        if (n != 0 && un->sun_path[0] == '\0')
            std::snprintf(out, sizeof out, "unix:@%.*s", static_cast<int>(n - 1), un->sun_path + 1);
        else
            std::snprintf(out, sizeof out, "unix:%.*s", static_cast<int>(::strnlen(un->sun_path, n)), un->sun_path);
    }
    return out;
}

// ---- socket_handle ---------------------------------------------------------

namespace detail {

socket_handle& socket_handle::operator=(socket_handle&& o) noexcept {
    if (this != &o) {
        close();
        fd_ = o.release();
    }
    return *this;
}

socket_handle::~socket_handle() { close(); }

int socket_handle::release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
}

socket_handle::use::use(const socket_handle& handle) noexcept : h(handle) {
    h.users_.fetch_add(1, std::memory_order_acq_rel);  // pairs with close()'s acquire loads
}
socket_handle::use::~use() { h.users_.fetch_sub(1, std::memory_order_release); }

std::error_code socket_handle::close() noexcept {
    int fd = fd_;
    if (fd < 0) return {};
    // acquire pairs with the users' release decrements: once 0, their calls
    // are over, and their writes to the buffers with them.
    if (users_.load(std::memory_order_acquire) != 0) {
        // Calls are waiting on the socket: end them (reads see end of
        // stream, writes EPIPE, accept EINVAL) and let them leave before the
        // number can be reused.
        ::shutdown(fd, SHUT_RDWR);
        while (users_.load(std::memory_order_acquire) != 0) {
            if (this_fiber::is_fiber()) this_fiber::sleep_for(std::chrono::microseconds(50));
            else std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    fd_ = -1;
    if (chosen() == io::backend::epoll) epoll_forget(fd);
    if (::close(fd) < 0 && errno != EINTR) return last_error();
    return {};
}

}  // namespace detail

// ---- stream ----------------------------------------------------------------

stream::stream(int fd) noexcept : h_(fd) {
    if (fd >= 0) make_nonblocking(fd);
}

result<stream> stream::connect(const endpoint& to, limits l) {
    int fd = new_socket(to.family(), SOCK_STREAM);
    if (fd < 0) return err(fd);
    stream s(fd, detail::made_nonblocking);
    socklen_t len = to.size();
    op_spec o;
    o.fd = fd;
    o.write = true;
    o.sys = &sys_connect;
    o.prep = prep_connect;
    o.addr = const_cast<sockaddr*>(to.data());
    o.addrlen = &len;
    detail::socket_handle::use u(s.h_);
    int r = perform(o, l);
    if (r == -EINPROGRESS || r == -EALREADY) {
        // io_uring on a non-blocking socket may hand the attempt back: wait
        // for writability and read the outcome, as a poll loop does.
        o.flags = 1;
        o.prep = nullptr;
        if (auto ec = wait_writable(fd, l)) return ec;
        r = sys_connect(o);
        if (r == -EAGAIN) r = -ETIMEDOUT;
    }
    if (r < 0) return err(r);
    return s;
}

result<std::size_t> stream::read_some(void* buf, std::size_t n, limits l) {
    detail::socket_handle::use u(h_);
    op_spec o;
    o.fd = h_.fd();
    o.stream_read = true;
    o.sys = &sys_recv;
    o.prep = prep_recv;
    o.buf = buf;
    o.len = n;
    return count_or_error(perform(o, l));
}

std::error_code stream::read_exact(void* buf, std::size_t n, limits l, std::size_t* got) {
    std::size_t done = 0;
    std::error_code ec;
    while (done < n) {
        auto r = read_some(static_cast<char*>(buf) + done, n - done, l);
        if (!r) { ec = r.error(); break; }
        if (*r == 0) { ec = errc::eof; break; }
        done += *r;
    }
    if (got != nullptr) *got = done;
    return ec;
}

result<std::size_t> stream::write_some(const void* buf, std::size_t n, limits l) {
    detail::socket_handle::use u(h_);
    op_spec o;
    o.fd = h_.fd();
    o.write = true;
    o.sys = &sys_send;
    o.prep = prep_send;
    o.buf = const_cast<void*>(buf);
    o.len = n;
    return count_or_error(perform(o, l));
}

std::error_code stream::write_all(const void* buf, std::size_t n, limits l, std::size_t* sent) {
    std::size_t done = 0;
    std::error_code ec;
    while (done < n) {
        auto r = write_some(static_cast<const char*>(buf) + done, n - done, l);
        if (!r) { ec = r.error(); break; }
        done += *r;
    }
    if (sent != nullptr) *sent = done;
    return ec;
}

result<std::size_t> stream::writev(std::span<const iovec> bufs, limits l) {
    detail::socket_handle::use u(h_);
    op_spec o;
    o.fd = h_.fd();
    o.write = true;
    o.sys = &sys_sendmsg;
    o.prep = prep_sendmsg;
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(bufs.data());
    m.msg_iovlen = std::min<std::size_t>(bufs.size(), IOV_MAX);
    o.msg = &m;
    return count_or_error(perform(o, l));
}

std::error_code stream::writev_all(std::span<iovec> bufs, limits l) {
    std::size_t i = 0;
    while (i < bufs.size()) {
        if (bufs[i].iov_len == 0) { ++i; continue; }
        auto r = writev(bufs.subspan(i), l);
        if (!r) return r.error();
        std::size_t n = *r;
        while (n > 0 && i < bufs.size()) {
            std::size_t take = std::min(n, bufs[i].iov_len);
            bufs[i].iov_base = static_cast<char*>(bufs[i].iov_base) + take;
            bufs[i].iov_len -= take;
            n -= take;
            if (bufs[i].iov_len == 0) ++i;
        }
    }
    return {};
}

std::error_code stream::shutdown(int how) noexcept {
    if (::shutdown(h_.fd(), how) < 0) return last_error();
    return {};
}

std::error_code stream::set_nodelay(bool on) noexcept {
    int v = on ? 1 : 0;
    if (::setsockopt(h_.fd(), IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) < 0) return last_error();
    return {};
}

result<endpoint> stream::local_endpoint() const { return name_of(h_.fd(), false); }
result<endpoint> stream::peer_endpoint() const { return name_of(h_.fd(), true); }

// ---- listener --------------------------------------------------------------

listener::listener(int fd) noexcept : h_(fd) {
    if (fd >= 0) make_nonblocking(fd);
}

result<listener> listener::bind(const endpoint& at, listen_options opt) {
    int fd = new_socket(at.family(), SOCK_STREAM);
    if (fd < 0) return err(fd);
    listener l(fd, detail::made_nonblocking);
    int one = 1;
    if (at.family() != AF_UNIX) {
        if (opt.reuse_address && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
            return last_error();
        if (opt.reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
            return last_error();
    }
    if (at.family() == AF_INET6) {
        int v6 = opt.v6_only ? 1 : 0;
        if (::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6) < 0) return last_error();
    }
    if (::bind(fd, at.data(), at.size()) < 0) return last_error();
    if (::listen(fd, opt.backlog) < 0) return last_error();
    return l;
}

result<stream> listener::accept(limits l, endpoint* peer) {
    detail::socket_handle::use u(h_);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    op_spec o;
    o.fd = h_.fd();
    o.sys = &sys_accept;
    o.prep = prep_accept;
    // On io_uring, take a connection already queued with one accept4 (the
    // listener is non-blocking) before going to the ring. Through the
    // ring, each accept costs the acceptor a round: it is woken with the
    // round's other completions, and its next accept is submitted with the
    // round's next batch. A burst of 1000 connections then took one per
    // round while the accepted ones kept the rounds long; with the try
    // first, a burst is taken in one go, as a multishot accept would. An
    // empty queue costs the one failed system call.
    o.nowait = &sys_accept;
    o.addr = reinterpret_cast<sockaddr*>(&ss);
    o.addrlen = &len;
    int r = perform(o, l);
    if (r < 0) return err(r);
    if (peer != nullptr) *peer = endpoint::from_native(reinterpret_cast<sockaddr*>(&ss), len);
    return stream(r, detail::made_nonblocking);  // (accepted with SOCK_NONBLOCK)
}

result<endpoint> listener::local_endpoint() const { return name_of(h_.fd(), false); }

// ---- datagram --------------------------------------------------------------

datagram::datagram(int fd) noexcept : h_(fd) {
    if (fd >= 0) make_nonblocking(fd);
}

result<datagram> datagram::open(int family) {
    int fd = new_socket(family, SOCK_DGRAM);
    if (fd < 0) return err(fd);
    return datagram(fd, detail::made_nonblocking);
}

result<datagram> datagram::bind(const endpoint& at) {
    auto d = open(at.family());
    if (!d) return d.error();
    if (::bind(d->h_.fd(), at.data(), at.size()) < 0) return last_error();
    return d;
}

result<std::size_t> datagram::receive_from(void* buf, std::size_t n, endpoint* from, limits l) {
    detail::socket_handle::use u(h_);
    sockaddr_storage ss{};
    iovec iov{buf, n};
    op_spec o;
    o.fd = h_.fd();
    o.sys = &sys_recvmsg;
    o.prep = prep_recvmsg;
    msghdr m{};
    m.msg_name = &ss;
    m.msg_namelen = sizeof ss;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    o.msg = &m;
    int r = perform(o, l);
    if (r < 0) return err(r);
    if (from != nullptr) *from = endpoint::from_native(reinterpret_cast<sockaddr*>(&ss), m.msg_namelen);
    return static_cast<std::size_t>(r);
}

result<std::size_t> datagram::send_to(const void* buf, std::size_t n, const endpoint& to, limits l) {
    detail::socket_handle::use u(h_);
    iovec iov{const_cast<void*>(buf), n};
    op_spec o;
    o.fd = h_.fd();
    o.write = true;
    o.sys = &sys_sendmsg;
    o.prep = prep_sendmsg;
    msghdr m{};
    m.msg_name = const_cast<sockaddr*>(to.data());
    m.msg_namelen = to.size();
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    o.msg = &m;
    return count_or_error(perform(o, l));
}

result<endpoint> datagram::local_endpoint() const { return name_of(h_.fd(), false); }

}  // namespace spindle::io
