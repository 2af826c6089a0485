// spindle/io/socket.hpp — sockets for fibers: TCP and Unix-domain streams,
// listeners, UDP and Unix-domain datagrams, over IPv4, IPv6 and paths.
//
//     auto l = io::listener::bind(io::endpoint::loopback_v4(8080)).value();
//     for (;;) {
//         io::stream s = l.accept().value();
//         sched.spawn([s = std::move(s)]() mutable {
//             std::byte buf[4096];
//             while (auto n = s.read_some(buf))
//                 if (*n == 0 || s.write_all({buf, *n})) break;
//         }).detach();
//     }
//
// Contract:
//   from a fiber          the fiber parks until the kernel answers; its
//                         worker runs other fibers meanwhile
//   from a plain thread   the call blocks the thread (poll(2) with the
//                         deadline and the stop token)
//   deadline, stop        see io/result.hpp: limits
//   errors                returned, never thrown (result<T>::value() throws)
//   read_some -> 0        the peer closed its side (end of stream)
//   close()               wakes fibers blocked on the socket (their calls
//                         end with an error or end of stream), waits until
//                         they have left, then closes the descriptor
//   SIGPIPE               never: writes use MSG_NOSIGNAL
//   moves                 a socket may be moved while no call is running on it
// One socket may be read by one fiber while another writes it. Two fibers
// reading it at once get the bytes in some interleaving, as with read(2).
// Sockets are created non-blocking and close-on-exec.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <spindle/io/result.hpp>

namespace spindle::io {

// A socket address: IPv4, IPv6 or a Unix-domain path.
class endpoint {
public:
    endpoint() noexcept;
    static result<endpoint> ipv4(std::string_view address, std::uint16_t port);  // "127.0.0.1"
    static result<endpoint> ipv6(std::string_view address, std::uint16_t port);  // "::1"
    static result<endpoint> unix_path(std::string_view path);  // at most 107 bytes; "@name": abstract
    static endpoint loopback_v4(std::uint16_t port) noexcept;
    static endpoint loopback_v6(std::uint16_t port) noexcept;
    static endpoint any_v4(std::uint16_t port) noexcept;
    static endpoint any_v6(std::uint16_t port) noexcept;
    static endpoint from_native(const sockaddr* sa, socklen_t len) noexcept;

    [[nodiscard]] int family() const noexcept { return storage_.ss_family; }
    [[nodiscard]] std::uint16_t port() const noexcept;  // 0 for Unix-domain
    [[nodiscard]] std::string to_string() const;        // "127.0.0.1:80", "[::1]:80", "unix:/path"
    [[nodiscard]] const sockaddr* data() const noexcept { return reinterpret_cast<const sockaddr*>(&storage_); }
    [[nodiscard]] socklen_t size() const noexcept { return len_; }

private:
    sockaddr_storage storage_{};
    socklen_t len_ = 0;
};

namespace detail {
// Construction from a descriptor spindle made non-blocking itself (no
// fcntl to check it).
struct made_nonblocking_t {};
inline constexpr made_nonblocking_t made_nonblocking{};

// A descriptor and the count of calls running on it, so close() can wake
// them and wait for them to leave before the number is reused.
class socket_handle {
public:
    socket_handle() noexcept = default;
    explicit socket_handle(int fd) noexcept : fd_(fd) {}
    socket_handle(socket_handle&& o) noexcept : fd_(o.release()) {}
    socket_handle& operator=(socket_handle&& o) noexcept;
    ~socket_handle();

    [[nodiscard]] int fd() const noexcept { return fd_; }
    [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
    int release() noexcept;          // give up ownership; -1 if none
    std::error_code close() noexcept;

    // A call's stay on the descriptor (see close()).
    struct use {
        explicit use(const socket_handle& h) noexcept;
        ~use();
        use(const use&) = delete;
        use& operator=(const use&) = delete;
        const socket_handle& h;
    };

private:
    int fd_ = -1;
    // Calls running on fd_. acq_rel increments/decrements; close() sets
    // closing_ (seq_cst), shuts the socket down and waits for 0 (acquire,
    // pairs with each use's release decrement).
    mutable std::atomic<std::uint32_t> users_{0};
};
}  // namespace detail

// A connected stream socket: TCP or Unix-domain.
class stream {
public:
    stream() noexcept = default;
    // Adopt a connected socket (made non-blocking here).
    explicit stream(int fd) noexcept;
    stream(int fd, detail::made_nonblocking_t) noexcept : h_(fd) {}
    stream(stream&&) noexcept = default;
    stream& operator=(stream&&) noexcept = default;
    ~stream() = default;  // closes

    static result<stream> connect(const endpoint& to, limits l = {});

    // Some bytes (1..n), 0 at end of stream.
    result<std::size_t> read_some(void* buf, std::size_t n, limits l = {});
    result<std::size_t> read_some(std::span<std::byte> buf, limits l = {}) {
        return read_some(buf.data(), buf.size(), std::move(l));
    }
    // Exactly n bytes, or an error (io::errc::eof if the stream ended first;
    // `got`, if given, says how many arrived either way).
    std::error_code read_exact(void* buf, std::size_t n, limits l = {}, std::size_t* got = nullptr);
    std::error_code read_exact(std::span<std::byte> buf, limits l = {}) {
        return read_exact(buf.data(), buf.size(), std::move(l));
    }
    // Some bytes (1..n) sent.
    result<std::size_t> write_some(const void* buf, std::size_t n, limits l = {});
    // All n bytes, or an error (`sent`, if given, says how many went out).
    std::error_code write_all(const void* buf, std::size_t n, limits l = {}, std::size_t* sent = nullptr);
    std::error_code write_all(std::span<const std::byte> buf, limits l = {}) {
        return write_all(buf.data(), buf.size(), std::move(l));
    }
    std::error_code write_all(std::string_view s, limits l = {}) {
        return write_all(s.data(), s.size(), std::move(l));
    }
    // One gathered send: some bytes of the buffers, in order (at most IOV_MAX).
    result<std::size_t> writev(std::span<const iovec> bufs, limits l = {});
    // Every byte of the buffers (the array is consumed: it is updated as
    // parts go out).
    std::error_code writev_all(std::span<iovec> bufs, limits l = {});

    std::error_code shutdown(int how = SHUT_WR) noexcept;
    std::error_code close() noexcept { return h_.close(); }
    std::error_code set_nodelay(bool on) noexcept;  // TCP_NODELAY (TCP only)
    [[nodiscard]] result<endpoint> local_endpoint() const;
    [[nodiscard]] result<endpoint> peer_endpoint() const;
    [[nodiscard]] int native_handle() const noexcept { return h_.fd(); }
    [[nodiscard]] bool is_open() const noexcept { return h_.is_open(); }
    int release() noexcept { return h_.release(); }

private:
    detail::socket_handle h_;
};

struct listen_options {
    int backlog = 1024;
    bool reuse_address = true;  // SO_REUSEADDR (IP)
    bool reuse_port = false;    // SO_REUSEPORT (IP): one listener per worker, the kernel balances
    bool v6_only = false;       // IPV6_V6ONLY (IPv6)
};

// A listening stream socket.
class listener {
public:
    listener() noexcept = default;
    explicit listener(int fd) noexcept;  // adopt a listening socket
    listener(int fd, detail::made_nonblocking_t) noexcept : h_(fd) {}
    listener(listener&&) noexcept = default;
    listener& operator=(listener&&) noexcept = default;

    static result<listener> bind(const endpoint& at, listen_options o = {});
    // The next connection (non-blocking, close-on-exec). `peer`, if given,
    // receives its address.
    result<stream> accept(limits l = {}, endpoint* peer = nullptr);

    std::error_code close() noexcept { return h_.close(); }
    [[nodiscard]] result<endpoint> local_endpoint() const;
    [[nodiscard]] int native_handle() const noexcept { return h_.fd(); }
    [[nodiscard]] bool is_open() const noexcept { return h_.is_open(); }
    int release() noexcept { return h_.release(); }

private:
    detail::socket_handle h_;
};

// A datagram socket: UDP or Unix-domain.
class datagram {
public:
    datagram() noexcept = default;
    explicit datagram(int fd) noexcept;
    datagram(int fd, detail::made_nonblocking_t) noexcept : h_(fd) {}
    datagram(datagram&&) noexcept = default;
    datagram& operator=(datagram&&) noexcept = default;

    static result<datagram> bind(const endpoint& at);
    static result<datagram> open(int family);  // unbound: AF_INET, AF_INET6, AF_UNIX

    // One datagram (truncated to n bytes, as recvfrom does).
    result<std::size_t> receive_from(void* buf, std::size_t n, endpoint* from = nullptr, limits l = {});
    result<std::size_t> send_to(const void* buf, std::size_t n, const endpoint& to, limits l = {});

    std::error_code close() noexcept { return h_.close(); }
    [[nodiscard]] result<endpoint> local_endpoint() const;
    [[nodiscard]] int native_handle() const noexcept { return h_.fd(); }
    [[nodiscard]] bool is_open() const noexcept { return h_.is_open(); }

private:
    detail::socket_handle h_;
};

}  // namespace spindle::io
