// The shared waiting machinery of the sync primitives
// (include/spindle/sync/detail/wait_queue.hpp).
#include <spindle/sync/detail/wait_queue.hpp>

#include <cerrno>
#include <ctime>

#include <spindle/locks/detail/futex.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

void spinlock::lock_contended() noexcept {
    unsigned spins = 0;
    do {
        // Wait on a plain load (no cache-line ping-pong), then retry.
        while (locked_.load(std::memory_order_relaxed)) {
            if (++spins < 256) {
                arch::cpu_relax();
            } else {
                // The holder was probably preempted (more threads than cores).
                sched_yield_now();
                spins = 0;
            }
        }
    } while (locked_.exchange(true, std::memory_order_acquire));
}

// A plain thread's identity: the address of its instance of this byte,
// reached as every thread-local of the runtime is (arch/tls.hpp).
__thread char tl_thread_marker SPINDLE_TLS_NAME("spindle_tl_thread_marker")
    __attribute__((tls_model("initial-exec"), used));

const void* caller_identity() noexcept {
    fiber_ctx* f = running_fiber();
    return f != nullptr ? static_cast<const void*>(f)
                        : static_cast<const void*>(SPINDLE_FRESH_TLS_ADDRESS(char, "spindle_tl_thread_marker"));
}

#if SPINDLE_DEBUG_CHECKS
namespace {
// The installed hook (race_point.hpp). relaxed: a test installs it before
// it starts the parties whose slow paths call it, and removes it after
// joining them; thread creation and joins order the rest.
std::atomic<race_hook> g_race_hook{nullptr};
}  // namespace

void set_race_hook(race_hook hook) noexcept { g_race_hook.store(hook, std::memory_order_relaxed); }

void race_point_reached(const void* primitive, race_point point) noexcept {
    if (race_hook h = g_race_hook.load(std::memory_order_relaxed)) [[unlikely]]
        h(primitive, point);
}
#endif

void request_cancel(wait_node* n) noexcept {
    // relaxed: the primitive's spinlock, taken by n->cancel and by the
    // waiter's enqueue, orders this store with the waiter's check.
    n->cancel_requested.store(true, std::memory_order_relaxed);
    n->cancel(n);
}

wait_guard::wait_guard(wait_node& n, std::chrono::steady_clock::time_point deadline, std::stop_token* st)
    : n_(n), deadline_(deadline) {
    if (st != nullptr && st->stop_possible()) stop_.emplace(*st, stop_fn{&n});
    // A fiber's deadline is a timer: on its worker's own heap where the
    // worker keeps one (one with an I/O engine), else the timer thread's.
    // A thread sleeps on its futex with a timeout instead (see wait()).
    if (n.w.fiber != nullptr && deadline != no_deadline) {
        local_ = local_timer_add(deadline, &wait_guard::on_timer, &n);
        if (local_ == nullptr) {
            timer_.deadline = deadline;
            timer_.fn = &wait_guard::on_timer;
            timer_.arg = &n;
            timer_add(&timer_);
            timer_armed_ = true;
        }
    }
}

wait_guard::~wait_guard() {
    // Each waits for an action that is running right now, so after this the
    // node is ours alone.
    if (local_ != nullptr) local_timer_cancel(local_);
    if (timer_armed_) timer_cancel(&timer_);
    stop_.reset();
}

void wait_guard::wait() noexcept {
    if (n_.w.fiber != nullptr || deadline_ == no_deadline) {
        park(&n_.w);
        return;
    }
    // A thread with a deadline: spin a little, as park() does, then
    // futex_wait with a relative timeout; when it expires, cancel ourselves,
    // then wait for whichever unpark won.
    if (thread_park_spin(&n_.w, deadline_)) return;  // (and not on a combiner's thread)
    std::uint32_t s = park_empty;
    // empty -> parked: unpark must futex_wake us now (see park()). acq_rel
    // pairs with unpark's exchange; on failure we were notified.
    if (!n_.w.state.compare_exchange_strong(s, park_parked, std::memory_order_acq_rel, std::memory_order_acquire))
        return;
    for (;;) {
        // acquire pairs with unpark's exchange.
        if (n_.w.state.load(std::memory_order_acquire) == park_notified) return;
        auto now = std::chrono::steady_clock::now();
        if (now >= deadline_) break;
        auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_ - now);
        timespec ts{static_cast<time_t>(left.count() / 1000000000),
                    static_cast<long>(left.count() % 1000000000)};
        futex_wait_for(&n_.w.state, park_parked, &ts);
    }
    request_cancel(&n_);
    park(&n_.w);  // returns at once if our cancel (or a grant) unparked us
}

}  // namespace spindle::detail
