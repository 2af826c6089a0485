// The scheduler object: its workers and their threads, the default
// scheduler, shutdown. The worker loop is in worker_loop.cpp, park and the
// handoff decision in handoff.cpp, the fiber life cycle in fiber.cpp.
#include <spindle/runtime/scheduler.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/memory/stack.hpp>

#include <sys/prctl.h>

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
    s->owner = this;
    s->caller_is_worker = opts.caller_is_worker;
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
        for (unsigned i = opts.caller_is_worker ? 1 : 0; i < n; ++i)
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

namespace detail {
namespace {

// After the workers' threads have left: wait for the wakes still in
// flight, then destroy the engines (a wake may use one until
// wakes_in_flight is 0). An epoll engine forgets its sockets'
// registrations as it goes, so a socket that outlives it registers afresh
// with whichever worker waits on it next.
void retire_engines(scheduler_state* s) noexcept {
    // acquire pairs with inject_push's release decrement.
    while (s->wakes_in_flight.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    for (auto& w : s->workers)
        // acq_rel: acquire pairs with the engine's publication (engine_of);
        // no thread reads w->io any more.
        if (io_engine* e = w->io.exchange(nullptr, std::memory_order_acq_rel)) e->ops->destroy(e);
}

}  // namespace
}  // namespace detail

void scheduler::run() {
    detail::scheduler_state* s = state_;
    if (!s->caller_is_worker)
        fatal("spindle::scheduler %p: run() without options::caller_is_worker; its workers are its own threads, "
              "and ~scheduler() waits for the fibers",
              static_cast<const void*>(this));
    if (detail::current_worker() != nullptr)
        fatal("spindle::scheduler %p: run() from fiber %llu; only a plain thread can become a worker",
              static_cast<const void*>(this), static_cast<unsigned long long>(detail::running_fiber()->id));
    // What the worker loop would install, first: past the exchange below
    // nothing may throw (the fibers waiting for worker 0 would wait forever).
    detail::install_overflow_handler();
    // acq_rel: a second run() sees the first's phase, whichever thread it is on.
    if (int was = s->run_phase.exchange(1, std::memory_order_acq_rel); was != 0)
        fatal("spindle::scheduler %p: run() called twice (the first has %s); a scheduler runs once",
              static_cast<const void*>(this), was == 1 ? "not returned yet" : "returned");
    // From here the workers stop once no fiber is left, as in ~scheduler.
    // seq_cst pairs with should_stop()'s loads and finish_fiber's decrement.
    s->stopping.store(true, std::memory_order_seq_cst);
    detail::wake_all_workers(s);  // nothing left at all: the others stop now
    // The worker loop sets this thread's timer slack (io_slice); it is the
    // caller's again afterwards.
    const int slack = ::prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
    detail::run_worker_thread(s->workers[0].get());
    if (slack > 0) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0UL, 0UL, 0UL);
    detail::end_stack_pool_deferral();  // the surplus a worker keeps goes now
    for (auto& t : s->threads) t.join();
    s->threads.clear();
    // Now, not at ~scheduler: the sockets still open (a listener the
    // caller holds) must not stay tied to engines no thread runs.
    detail::retire_engines(s);
    s->run_phase.store(2, std::memory_order_relaxed);  // read by spawn() only to report misuse
}

scheduler::~scheduler() {
    if (detail::current_scheduler_state() == state_)
        fatal("scheduler destroyed from its own fiber %llu; it would wait for itself forever",
              static_cast<unsigned long long>(detail::running_fiber()->id));
    // relaxed: this thread's own run() stored it, or no thread did.
    if (state_->caller_is_worker && state_->run_phase.load(std::memory_order_relaxed) == 0) {
        if (detail::current_worker() != nullptr)
            fatal("spindle::scheduler %p destroyed before run(), from fiber %llu: with caller_is_worker the "
                  "destroying thread becomes worker 0 and runs the fibers; call run(), or destroy it, from a "
                  "plain thread",
                  static_cast<const void*>(this), static_cast<unsigned long long>(detail::running_fiber()->id));
        run();
    }
    // seq_cst pairs with should_stop()'s loads and finish_fiber's decrement.
    state_->stopping.store(true, std::memory_order_seq_cst);
    detail::wake_all_workers(state_);
    for (auto& t : state_->threads) t.join();
    // A thread that woke one of our fibers may still be finishing its notify;
    // the engines go after it.
    detail::retire_engines(state_);
    delete state_;
}

unsigned scheduler::workers() const noexcept { return static_cast<unsigned>(state_->workers.size()); }
std::size_t scheduler::default_stack_size() const noexcept { return state_->stack_size; }
std::size_t scheduler::live_fibers() const noexcept {
    return state_->live.load(std::memory_order_relaxed);  // a snapshot for callers, orders nothing
}

}  // namespace spindle
