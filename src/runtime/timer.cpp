// The timer service (include/spindle/runtime/detail/timer.hpp) and the fiber
// calls built on it: sleep_until, stop tokens.
#include <spindle/runtime/detail/timer.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/scheduler.hpp>

namespace spindle::detail {

namespace {

class timer_service {
public:
    void add(timer_entry* e) {
        std::unique_lock lk(m_);
        if (!started_) {
            // First use starts the thread. It is never joined: the service
            // lives until the process exits (see instance()).
            std::thread([this] { run(); }).detach();
            started_ = true;
        }
        e->seq = ++seq_;
        e->state = 1;
        auto it = q_.insert(key(e)).first;
        if (it == q_.begin()) {
            publish_earliest();
            cv_.notify_one();  // a new earliest deadline
        }
    }

    void cancel(timer_entry* e) noexcept {
        std::unique_lock lk(m_);
        if (e->state == 1) {
            q_.erase(key(e));
            publish_earliest();
            e->state = 0;
            return;
        }
        while (e->state == 2) done_cv_.wait(lk);
    }

    static timer_service& instance() {
        // Deliberately leaked: fibers of a scheduler destroyed during static
        // destruction may still be cancelling timers.
        static timer_service* s = new timer_service;
        return *s;
    }

    std::chrono::steady_clock::time_point earliest() const noexcept {
        return std::chrono::steady_clock::time_point(
            std::chrono::steady_clock::duration(earliest_.load(std::memory_order_relaxed)));
    }

private:
    // Under m_: the first deadline into earliest_.
    void publish_earliest() noexcept {
        auto t = q_.empty() ? std::chrono::steady_clock::time_point::max() : std::get<0>(*q_.begin());
        earliest_.store(t.time_since_epoch().count(), std::memory_order_relaxed);
    }

    using key_t = std::tuple<std::chrono::steady_clock::time_point, std::uint64_t, timer_entry*>;
    static key_t key(timer_entry* e) noexcept { return {e->deadline, e->seq, e}; }

    void run() {
        std::unique_lock lk(m_);
        for (;;) {
            if (q_.empty()) {
                cv_.wait(lk);
                continue;
            }
            auto now = std::chrono::steady_clock::now();
            auto first = std::get<0>(*q_.begin());
            if (first > now) {
                cv_.wait_until(lk, first);
                continue;
            }
            timer_entry* e = std::get<2>(*q_.begin());
            q_.erase(q_.begin());
            publish_earliest();
            e->state = 2;
            lk.unlock();
            e->fn(e->arg);  // outside the mutex: it may take a primitive's lock
            lk.lock();
            e->state = 0;
            done_cv_.notify_all();
        }
    }

    std::mutex m_;
    std::condition_variable cv_;       // the earliest deadline changed
    std::condition_variable done_cv_;  // a firing action returned
    std::set<key_t> q_;
    std::uint64_t seq_ = 0;
    bool started_ = false;
    // q_'s first deadline (steady_clock ticks), stored under m_ and read
    // without it (timer_earliest): relaxed, a hint that orders nothing; a
    // stale value costs a watch that was not needed or one that was
    // skipped, never a lost wake-up.
    std::atomic<std::chrono::steady_clock::rep> earliest_{std::chrono::steady_clock::time_point::max().time_since_epoch().count()};
};

}  // namespace

void timer_add(timer_entry* e) { timer_service::instance().add(e); }
void timer_cancel(timer_entry* e) noexcept { timer_service::instance().cancel(e); }
std::chrono::steady_clock::time_point timer_earliest() noexcept { return timer_service::instance().earliest(); }

local_timer* local_timer_add(std::chrono::steady_clock::time_point t, void (*fn)(void*) noexcept,
                             void* arg) noexcept {
    worker* w = current_worker();
    if (w == nullptr || w->current == nullptr) return nullptr;
    // relaxed: the worker's own store (engine_of), and this is its thread.
    io_engine* e = w->io.load(std::memory_order_relaxed);
    if (e == nullptr || e->ops->add_timer == nullptr) return nullptr;
    auto* lt = new (std::nothrow) local_timer;
    if (lt == nullptr) return nullptr;
    lt->t = t;
    lt->is_local_timer = true;
    lt->fn = fn;
    lt->arg = arg;
    e->ops->add_timer(e, lt);
    w->yield_check = 1;  // a fiber that yields in a loop still lets the heap fire (yield_slow)
    return lt;
}

void local_timer_cancel(local_timer* lt) noexcept {
    std::uint32_t s = local_timer::armed;
    // armed -> cancelled: the owner frees it (acq_rel: see local_timer::state).
    if (lt->state.compare_exchange_strong(s, local_timer::cancelled, std::memory_order_acq_rel,
                                          std::memory_order_acquire))
        return;
    // Firing on its worker's thread, which is not ours (a fiber that runs
    // there cannot be running here): wait for fn to return. acquire pairs
    // with local_timer_fire's release store.
    for (int spins = 0; lt->state.load(std::memory_order_acquire) != local_timer::fired; ++spins) {
        if (spins < 64) arch::cpu_relax();
        else std::this_thread::yield();  // that thread may be preempted
    }
    delete lt;
}

void local_timer_fire(local_timer* lt) noexcept {
    std::uint32_t s = local_timer::armed;
    // armed -> firing; finding `cancelled` (acquire: the canceller's CAS
    // was its last touch), the timer is ours to free.
    if (!lt->state.compare_exchange_strong(s, local_timer::firing, std::memory_order_acquire,
                                           std::memory_order_acquire)) {
        delete lt;
        return;
    }
    // fn runs where the owner looks at its engine: in its loop, or inside a
    // fiber's suspension or yield (poll_io). A handoff it makes (a
    // cancelled waiter's smart cancellation resuming the next one) must
    // only make the waiter ready, never switch into it from there.
    worker* w = current_worker();
    ++w->no_switch;
    lt->fn(lt->arg);
    --w->no_switch;
    // release: fn's effects and our last touch, before the canceller frees it.
    lt->state.store(local_timer::fired, std::memory_order_release);
}

bool local_timer_reclaim(local_timer* lt) noexcept {
    // acquire: as in local_timer_fire.
    if (lt->state.load(std::memory_order_acquire) != local_timer::cancelled) return false;
    delete lt;
    return true;
}

}  // namespace spindle::detail

namespace spindle::this_fiber {

namespace {
struct sleep_state {
    detail::waiter w;
    // The timer and a stop request race to wake the sleeper: the first to
    // exchange this unparks it (acq_rel: orders nothing else, picks a winner).
    std::atomic<bool> claimed{false};
    void wake() noexcept {
        if (!claimed.exchange(true, std::memory_order_acq_rel)) detail::unpark(&w);
    }
};
struct sleep_stop {
    sleep_state* s;
    void operator()() const noexcept { s->wake(); }
};
}  // namespace

bool sleep_until_steady(std::chrono::steady_clock::time_point t) noexcept {
    detail::fiber_ctx* self = detail::running_fiber();
    if (self == nullptr) {
        std::this_thread::sleep_until(t);
        return true;
    }
    if (t <= std::chrono::steady_clock::now()) {
        yield();
        return !self->stop.stop_requested();
    }
    // A worker with an I/O engine that keeps timers (both do) sleeps the
    // fiber there: no trip through the timer thread and back (relaxed: the
    // worker's own store).
    detail::worker* w = detail::current_worker();
    if (detail::io_engine* e = w->io.load(std::memory_order_relaxed); e != nullptr && e->ops->sleep != nullptr)
        return e->ops->sleep(e, t);
    sleep_state st;
    st.w.fiber = self;
    detail::timer_entry te;
    te.deadline = t;
    te.fn = [](void* a) noexcept { static_cast<sleep_state*>(a)->wake(); };
    te.arg = &st;
    bool stopped = false;
    {
        std::stop_callback<sleep_stop> cb(self->stop.get_token(), sleep_stop{&st});
        detail::timer_add(&te);
        detail::park(&st.w);
        // Disarm both before `st` goes away: each waits for a running action.
        detail::timer_cancel(&te);
        stopped = self->stop.stop_requested();
    }
    return !stopped;
}

std::stop_token get_stop_token() noexcept {
    detail::fiber_ctx* self = detail::running_fiber();
    return self != nullptr ? self->stop.get_token() : std::stop_token{};
}

int worker_index() noexcept {
    detail::worker* w = detail::current_worker();
    return w != nullptr && w->current != nullptr ? static_cast<int>(w->index) : -1;
}

}  // namespace spindle::this_fiber

namespace spindle {

bool fiber::request_stop() noexcept { return ctx_ != nullptr && ctx_->stop.request_stop(); }

std::stop_source fiber::get_stop_source() const noexcept {
    return ctx_ != nullptr ? ctx_->stop : std::stop_source(std::nostopstate);
}

}  // namespace spindle
