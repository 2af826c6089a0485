// The scheduler object: its workers and their threads, the default
// scheduler, shutdown. The worker loop is in worker_loop.cpp, park and the
// handoff decision in handoff.cpp, the fiber life cycle in fiber.cpp.
#include <spindle/runtime/scheduler.hpp>

#include <spindle/arch/fatal.hpp>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "run_queues.hpp"

namespace spindle::detail {

scheduler_state* current_scheduler_state() noexcept {
    worker* w = current_worker();
    return w ? w->sched : nullptr;
}

scheduler_state* default_scheduler_state() {
    static scheduler s;  // destroyed at exit: waits for its fibers
    return s.state_;
}

std::size_t resolve_stack_size(scheduler_state* s, std::size_t requested) noexcept {
    return requested != 0 ? requested : s->stack_size;
}

unsigned worker_count(scheduler_state* s) noexcept { return static_cast<unsigned>(s->workers.size()); }

}  // namespace spindle::detail

namespace spindle {

using detail::fatal;

scheduler::scheduler(options opts) : state_(new detail::scheduler_state) {
    std::unique_ptr<detail::scheduler_state> s(state_);
    unsigned n = opts.workers != 0 ? opts.workers : std::thread::hardware_concurrency();
    if (n == 0) n = 1;
    s->stack_size = opts.stack_size != 0 ? opts.stack_size : detail::default_stack_size_from_env();
    if (s->stack_size < min_stack_size)
        throw std::invalid_argument("spindle::scheduler: stack_size " + std::to_string(s->stack_size) +
                                    " is below the minimum of " + std::to_string(min_stack_size) +
                                    " bytes");
    // io_spin and io_slice: 0 us .. 1 min, kept in nanoseconds.
    auto io_ns = [](const char* name, std::chrono::microseconds v) -> std::int64_t {
        if (v.count() < 0 || v > std::chrono::minutes(1))
            throw std::invalid_argument(std::string("spindle::scheduler: ") + name + " " + std::to_string(v.count()) +
                                        " us is outside 0 us .. 1 min");
        return std::chrono::duration_cast<std::chrono::nanoseconds>(v).count();
    };
    s->io_spin_ns = io_ns("io_spin", opts.io_spin);
    s->io_slice_ns = io_ns("io_slice", opts.io_slice);
    if (s->io_slice_ns > 0) (void)detail::loadavg();
    detail::install_overflow_handler();
    for (unsigned i = 0; i < n; ++i) {
        auto w = std::make_unique<detail::worker>();
        w->sched = state_;
        w->index = i;
        w->stall_seen = new std::uint32_t[n]();  // help_stalled_peer; freed by ~worker
        s->workers.push_back(std::move(w));
    }
    try {
        for (unsigned i = 0; i < n; ++i)
            s->threads.emplace_back(detail::run_worker_thread, s->workers[i].get());
    } catch (...) {
        // Stop the workers already started (they have no fibers) and report.
        // seq_cst store pairs with should_stop()'s load, as in ~scheduler.
        s->stopping.store(true, std::memory_order_seq_cst);
        detail::wake_all_workers(state_);
        for (auto& t : s->threads) t.join();
        throw;
    }
    s.release();
}

scheduler::~scheduler() {
    if (detail::current_scheduler_state() == state_)
        fatal("scheduler destroyed from its own fiber %llu; it would wait for itself forever",
              static_cast<unsigned long long>(detail::running_fiber()->id));
    // seq_cst pairs with should_stop()'s loads and finish_fiber's decrement.
    state_->stopping.store(true, std::memory_order_seq_cst);
    detail::wake_all_workers(state_);
    for (auto& t : state_->threads) t.join();
    // A thread that woke one of our fibers may still be finishing its notify.
    while (state_->wakes_in_flight.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    // Their engines last: a wake may use one until wakes_in_flight is 0.
    for (auto& w : state_->workers)
        if (detail::io_engine* e = w->io.load(std::memory_order_acquire)) e->ops->destroy(e);
    delete state_;
}

unsigned scheduler::workers() const noexcept { return static_cast<unsigned>(state_->workers.size()); }
std::size_t scheduler::default_stack_size() const noexcept { return state_->stack_size; }
std::size_t scheduler::live_fibers() const noexcept {
    return state_->live.load(std::memory_order_relaxed);  // a snapshot for callers, orders nothing
}

}  // namespace spindle
