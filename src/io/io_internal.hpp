// Internal to src/io: how one I/O call runs.
//
// Every call is an op_spec: its system call in non-blocking form (sys) and
// its io_uring form (prep). perform() runs it:
//
//   plain thread   sys(); on EAGAIN poll(2) the descriptor (deadline, stop
//                  token through an eventfd), then sys() again
//   io_uring       prep() into the worker's ring; the fiber parks until the
//                  completion (uring.cpp)
//   epoll          sys(); on EAGAIN wait for the descriptor's readiness
//                  edge (epoll.cpp), then sys() again. Operations that
//                  cannot wait (files) run their system call directly.
//
// Results are int: >= 0 a count, < 0 a negated errno; -ETIMEDOUT for a
// passed deadline and -ECANCELED for a stop request.
#pragma once

#ifndef SPINDLE_IO_URING
#define SPINDLE_IO_URING 1
#endif
#if SPINDLE_IO_URING
#include <liburing.h>
#else
struct io_uring_sqe;
#endif
#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stop_token>

#include <spindle/io/result.hpp>
#include <spindle/runtime/detail/worker.hpp>

namespace spindle::io::detail {

using spindle::detail::waiter;
using spindle::detail::worker;
using steady = std::chrono::steady_clock;
using time_point = steady::time_point;

struct op_spec {
    int fd = -1;
    bool write = false;      // waits for writability (else readability)
    bool can_wait = true;    // readiness applies (sockets, pipes); false: files
    bool owned = true;       // a spindle socket (its close resets its epoll state)
    bool stream_read = false;  // a stream socket's read: a short one means drained (epoll)
    int (*sys)(op_spec&) = nullptr;                 // non-blocking attempt
    void (*prep)(io_uring_sqe*, op_spec&) = nullptr;  // the io_uring form
    // io_uring only: a first try that cannot block (a file read with
    // RWF_NOWAIT: a page-cache hit costs a system call, not a ring round
    // trip); -EAGAIN sends the operation to the ring.
    int (*nowait)(op_spec&) = nullptr;
    // Arguments, as the operation needs them.
    void* buf = nullptr;
    std::size_t len = 0;
    off_t off = 0;
    int flags = 0;
    const iovec* iov = nullptr;
    int iovcnt = 0;
    sockaddr* addr = nullptr;
    socklen_t* addrlen = nullptr;
    msghdr* msg = nullptr;  // the caller's: it outlives the call, and most calls have none
    short poll_events = 0;
};

// An operation's io_uring form, `void name(io_uring_sqe* s, op_spec& o)`
// with the given body. In a build without the io_uring backend
// (SPINDLE_IO_URING 0: no liburing) it is a null pointer instead, never
// called: chosen() is never io_uring there.
#if SPINDLE_IO_URING
#define SPINDLE_IO_URING_FORM(name, ...) \
    [[maybe_unused]] void name([[maybe_unused]] io_uring_sqe* s, [[maybe_unused]] op_spec& o) __VA_ARGS__
#else
#define SPINDLE_IO_URING_FORM(name, ...) [[maybe_unused]] constexpr std::nullptr_t name = nullptr;
#endif

// The backend, chosen once (backend.cpp).
io::backend chosen() noexcept;

// The calling fiber's worker; null on a plain thread.
worker* fiber_worker() noexcept;

int perform(op_spec& op, const limits& l) noexcept;

// The stop token a call observes: its own, or the calling fiber's.
std::stop_token effective_stop(const limits& l) noexcept;

// A wait that a stop request can end (an io_uring operation, an epoll
// wait): request() may run on any thread, at most a few times, while the
// wait is armed (own_stop, or a std::stop_callback); it must be idempotent.
struct cancel_target {
    void (*request)(cancel_target* self) noexcept;
};

// A fiber's wait observing the fiber's own stop token (stop_relay.cpp):
// armed for the object's life, with one stop callback per fiber instead of
// one per wait. If stop was requested already, the constructor requests
// the target at once. The destructor waits for a request running on
// another thread. Fibers only.
class own_stop {
public:
    explicit own_stop(cancel_target* target);
    ~own_stop();
    own_stop(const own_stop&) = delete;
    own_stop& operator=(const own_stop&) = delete;

private:
    std::atomic<std::uintptr_t>* word_;  // the fiber's stop_word
};

// Has the running fiber's own stop been requested? (No token copied.)
bool own_stop_requested() noexcept;

// Per backend, for fibers. `stop`: the call's own token, or null for the
// fiber's (own_stop).
int uring_perform(worker* w, op_spec& op, time_point deadline, const std::stop_token* stop) noexcept;
int epoll_await(worker* w, const op_spec& op, time_point deadline, const std::stop_token* stop) noexcept;
// A spindle socket closes: forget its epoll state (epoll.cpp).
void epoll_forget(int fd) noexcept;
// Stream reads on epoll: would a read find nothing (drained by the last
// one, no edge since)? Then the fiber waits first and skips a system call
// that could only say EAGAIN. And what the last read found.
bool epoll_read_would_block(int fd) noexcept;
void epoll_note_read(int fd, bool drained) noexcept;
// A plain thread waits for `events` on fd (backend.cpp).
int thread_await(int fd, short events, time_point deadline, const std::stop_token& stop) noexcept;

inline int neg_errno(long r) noexcept { return r < 0 ? -errno : static_cast<int>(r); }

// perform()'s result as the public API returns it.
inline std::error_code err(int negated) noexcept { return {-negated, std::system_category()}; }
inline result<std::size_t> count_or_error(int r) {
    if (r < 0) return err(r);
    return static_cast<std::size_t>(r);
}

}  // namespace spindle::io::detail
