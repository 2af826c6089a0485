// spindle/io/result.hpp — what every I/O call returns, and the limits every
// call takes (a deadline and a stop token).
//
// Results, not exceptions. A server meets a reset peer, an end of stream or a
// timeout every second; they are outcomes, not exceptional. So every call
// returns std::error_code (calls with nothing else to say) or result<T> (a
// value or an error_code). result<T>::value() throws std::system_error for
// code that prefers exceptions, so both styles read well:
//
//     auto n = s.read_some(buf);            // n.error() == std::errc::timed_out, ...
//     std::size_t m = s.read_some(buf).value();   // throws on error
//
// Errors are the system's (std::system_category(), errno values), plus:
//   std::errc::timed_out           the call's deadline passed
//   std::errc::operation_canceled  stop was requested on the call's stop token
//   io::errc::eof                  read_exact: the stream ended first
// (std::expected would do; it is C++23 and spindle is C++20.)
#pragma once

#include <chrono>
#include <stop_token>
#include <system_error>
#include <type_traits>
#include <utility>

namespace spindle::io {

enum class errc {
    eof = 1,  // the stream ended before the call had all it asked for
};

const std::error_category& io_category() noexcept;
inline std::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), io_category()};
}

}  // namespace spindle::io

template <>
struct std::is_error_code_enum<spindle::io::errc> : std::true_type {};

namespace spindle::io {

template <class T>
class [[nodiscard]] result {
public:
    result(T value) : value_(std::move(value)) {}  // NOLINT: implicit, as std::expected
    result(std::error_code ec) : error_(ec) {}     // NOLINT
    result(std::errc e) : error_(std::make_error_code(e)) {}  // NOLINT

    [[nodiscard]] bool has_value() const noexcept { return !error_; }
    explicit operator bool() const noexcept { return !error_; }
    [[nodiscard]] std::error_code error() const noexcept { return error_; }

    // The value; throws std::system_error if there is none.
    T& value() & { check(); return value_; }
    T&& value() && { check(); return std::move(value_); }
    const T& value() const& { check(); return value_; }
    T& operator*() & noexcept { return value_; }
    T&& operator*() && noexcept { return std::move(value_); }
    const T& operator*() const& noexcept { return value_; }
    T* operator->() noexcept { return &value_; }
    const T* operator->() const noexcept { return &value_; }

private:
    void check() const {
        if (error_) throw std::system_error(error_);
    }
    T value_{};
    std::error_code error_;
};

// What bounds a call: a deadline, and a stop token. A default stop token
// (one that cannot stop) means "the calling fiber's own" (this_fiber::
// get_stop_token(), which fiber::request_stop() requests). On expiry the
// call returns std::errc::timed_out, on a stop request
// std::errc::operation_canceled; either way, before it returns the kernel
// has let go of the call's buffer and nothing was transferred that the
// call does not report.
struct limits {
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    std::stop_token stop{};
};

// limits that expire `d` from now.
template <class Rep, class Period>
limits timeout(std::chrono::duration<Rep, Period> d, std::stop_token stop = {}) {
    return limits{std::chrono::steady_clock::now() + std::chrono::ceil<std::chrono::steady_clock::duration>(d),
                  std::move(stop)};
}
inline limits until(std::chrono::steady_clock::time_point t, std::stop_token stop = {}) {
    return limits{t, std::move(stop)};
}

// The backend the process uses, chosen once, at the first I/O call:
// io_uring, unless the kernel refuses it (EPERM, ENOSYS: containers often
// do) or SPINDLE_IO=epoll says otherwise. SPINDLE_IO=uring where io_uring is
// unavailable, or any other value, stops the program with a message.
enum class backend { io_uring, epoll };
backend current_backend();
const char* backend_name(backend b) noexcept;
// Whether this build of spindle::io has the backend: epoll always; io_uring
// where liburing was found at build time (CMake option
// SPINDLE_WITH_IO_URING, on by default). Without it the process uses epoll,
// and SPINDLE_IO=uring stops the program with a message.
bool backend_built(backend b) noexcept;

}  // namespace spindle::io
