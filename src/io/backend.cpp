// The backend choice, the error category, and perform(): one I/O call from
// a fiber or a plain thread (io_internal.hpp).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>

#include "io_internal.hpp"

namespace spindle::io {

namespace {
class category final : public std::error_category {
public:
    const char* name() const noexcept override { return "spindle.io"; }
    std::string message(int c) const override {
        return c == static_cast<int>(errc::eof) ? "end of stream" : "unknown spindle.io error";
    }
};

backend probe() noexcept {
    const char* env = std::getenv("SPINDLE_IO");
    std::string want = env != nullptr ? env : "";
    if (want != "" && want != "uring" && want != "io_uring" && want != "epoll")
        spindle::detail::fatal("SPINDLE_IO=%s: unknown I/O backend (use uring or epoll, or leave it unset "
                               "for io_uring where the kernel allows it, else epoll)", env);
    if (want == "epoll") return backend::epoll;
#if SPINDLE_IO_URING
    io_uring ring;
    int rc = io_uring_queue_init(2, &ring, 0);
    if (rc == 0) {
        io_uring_queue_exit(&ring);
        return backend::io_uring;
    }
    if (!want.empty())
        spindle::detail::fatal("SPINDLE_IO=%s: io_uring is unavailable here (io_uring_setup: %s); "
                               "use SPINDLE_IO=epoll or leave it unset", env, std::strerror(-rc));
#else
    if (!want.empty())
        spindle::detail::fatal("SPINDLE_IO=%s: this build of spindle::io has no io_uring backend (built "
                               "without liburing); use SPINDLE_IO=epoll or leave it unset", env);
#endif
    return backend::epoll;
}
}  // namespace

const std::error_category& io_category() noexcept {
    static const category c;
    return c;
}

backend current_backend() { return detail::chosen(); }

const char* backend_name(backend b) noexcept { return b == backend::io_uring ? "io_uring" : "epoll"; }

bool backend_built(backend b) noexcept { return b == backend::epoll || SPINDLE_IO_URING; }

namespace detail {

io::backend chosen() noexcept {
    static const io::backend b = probe();  // once; a thread-safe static
    return b;
}

worker* fiber_worker() noexcept {
    worker* w = spindle::detail::current_worker();
    return w != nullptr && w->current != nullptr ? w : nullptr;
}

std::stop_token effective_stop(const limits& l) noexcept {
    if (l.stop.stop_possible()) return l.stop;
    return this_fiber::is_fiber() ? this_fiber::get_stop_token() : std::stop_token{};
}

namespace {
// The eventfd a plain thread's stop callback writes (one per thread, made
// on first use, never closed: a thread that waits once likely waits again).
int thread_stop_fd() noexcept {
    static thread_local int fd = -1;
    if (fd < 0) fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fd;
}
}  // namespace

int thread_await(int fd, short events, time_point deadline, const std::stop_token& stop) noexcept {
    pollfd p[2] = {{fd, events, 0}, {-1, POLLIN, 0}};
    int sfd = -1;
    if (stop.stop_possible()) {
        sfd = thread_stop_fd();
        if (sfd < 0) return -errno;
        p[1].fd = sfd;
    }
    auto wake = [sfd]() noexcept {
        std::uint64_t one = 1;
        [[maybe_unused]] ssize_t r = ::write(sfd, &one, sizeof one);
    };
    // Constructed only where a stop is possible (it may run wake at once).
    std::optional<std::stop_callback<decltype(wake)>> cb;
    if (sfd >= 0) cb.emplace(stop, wake);
    int rc = 0;
    for (;;) {
        if (stop.stop_requested()) { rc = -ECANCELED; break; }
        int ms = -1;
        if (deadline != time_point::max()) {
            auto left = deadline - steady::now();
            if (left <= steady::duration::zero()) { rc = -ETIMEDOUT; break; }
            ms = static_cast<int>(std::min<long long>(
                std::chrono::ceil<std::chrono::milliseconds>(left).count(), 1 << 30));
        }
        int n = ::poll(p, sfd >= 0 ? 2 : 1, ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = -errno;
            break;
        }
        if (n > 0 && p[0].revents != 0) break;  // ready (or error/hang-up: the call reports it)
    }
    cb.reset();
    if (sfd >= 0) {
        std::uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(sfd, &v, sizeof v);  // drain for the next wait
    }
    return rc;
}

int perform(op_spec& op, const limits& l) noexcept {
    // (Fibers migrate: the worker is read afresh after every wait, never
    // kept across one.)
    const bool fiber = fiber_worker() != nullptr;
    // The call's own token, else on a fiber the fiber's, observed through
    // its relay (own_stop): no token is copied, no callback registered.
    const std::stop_token* stop = l.stop.stop_possible() ? &l.stop : nullptr;
    if (stop != nullptr ? stop->stop_requested() : fiber && own_stop_requested()) return -ECANCELED;
    const time_point deadline = l.deadline;
#if SPINDLE_IO_URING
    if (fiber && chosen() == io::backend::io_uring) {
        if (op.nowait != nullptr) {
            int r = op.nowait(op);
            if (r != -EAGAIN && r != -EOPNOTSUPP && r != -EINVAL) return r;
        }
        return uring_perform(fiber_worker(), op, deadline, stop);
    }
#endif
    const bool hint = fiber && op.stream_read;
    if (hint && epoll_read_would_block(op.fd)) {
        int r = epoll_await(fiber_worker(), op, deadline, stop);
        if (r < 0) return r;
    }
    for (;;) {
        int r = op.sys(op);
        if (r == -EINTR) continue;
        if (hint && r != -EAGAIN) epoll_note_read(op.fd, r > 0 && static_cast<std::size_t>(r) < op.len);
        if (r != -EAGAIN || !op.can_wait) return r;
        if (deadline != time_point::max() && steady::now() >= deadline) return -ETIMEDOUT;
        r = fiber ? epoll_await(fiber_worker(), op, deadline, stop)
                  : thread_await(op.fd, op.write ? POLLOUT : POLLIN, deadline, l.stop);
        if (r < 0) return r;
    }
}

}  // namespace detail
}  // namespace spindle::io
