// Scheduler, workers and the fiber life cycle. See
// include/spindle/runtime/detail/worker.hpp for the data structures and their
// invariants.
#include <spindle/runtime/scheduler.hpp>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spindle/locks/detail/futex.hpp>

namespace spindle::detail {

__thread worker* tl_worker __attribute__((tls_model("initial-exec"))) = nullptr;

void run_worker_thread(worker* w);
void wake_all_workers(scheduler_state* s) noexcept;

struct scheduler_state {
    std::vector<std::unique_ptr<worker>> workers;
    std::vector<std::thread> threads;
    std::size_t stack_size = default_stack_size;
    // Fibers spawned and not finished. Incremented before a fiber is
    // published, decremented by the fiber as it finishes. seq_cst with
    // `stopping`: see should_stop().
    std::atomic<std::size_t> live{0};
    std::atomic<bool> stopping{false};
    std::atomic<unsigned> next_worker{0};  // round-robin placement; relaxed, a hint
    // Threads inside inject_push() for one of our workers (see there).
    std::atomic<unsigned> wakes_in_flight{0};
};

void fatal(const char* fmt, ...) noexcept {
    std::va_list ap;
    va_start(ap, fmt);
    std::fputs("spindle: ", stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    std::fflush(stderr);
    std::abort();
}

namespace {

std::atomic<std::uint64_t> g_fiber_ids{0};

// Tell `w` there is work, waking it if it parked (eventcount notify side).
// Call right after publishing work with a seq_cst operation on inject_head.
void notify_worker(worker* w) noexcept {
    // Dekker with park_worker(): it does parked.exchange(true) then loads
    // inject_head; we published to inject_head then load `parked`. All four
    // are seq_cst, so in their single total order one of the two loads comes
    // after the other side's write: either we see `parked` and wake it, or
    // its re-check sees our work and it does not sleep. (RMWs and seq_cst
    // loads rather than fences: ThreadSanitizer does not model fences.)
    if (w->parked.load(std::memory_order_seq_cst)) {
        w->epoch.fetch_add(1, std::memory_order_seq_cst);
        futex_wake(&w->epoch, 1);
    }
}

}  // namespace

void wake_all_workers(scheduler_state* s) noexcept {
    for (auto& w : s->workers) {
        // Unconditional: this happens once, at shutdown.
        w->epoch.fetch_add(1, std::memory_order_seq_cst);
        futex_wake(&w->epoch, 1);
    }
}

namespace {

void inject_push(worker* w, fiber_ctx* f) noexcept {
    // Once `f` is on the list its worker may run it to the end, and its
    // scheduler may then be destroyed, while we are still in notify_worker()
    // below. `wakes_in_flight` keeps ~scheduler from freeing the workers until
    // we are done with them. Incremented before the push, so the destructor
    // (which runs after `f` finished, hence after the push) sees it.
    scheduler_state* s = w->sched;
    s->wakes_in_flight.fetch_add(1, std::memory_order_seq_cst);
    fiber_ctx* head = w->inject_head.load(std::memory_order_relaxed);
    do {
        f->inject_next = head;
        // seq_cst: release for the drain (the fiber's saved context and all
        // its waker wrote are visible to the acquire exchange in
        // drain_inject), and the publish half of the Dekker in notify_worker.
    } while (!w->inject_head.compare_exchange_weak(head, f, std::memory_order_seq_cst,
                                                   std::memory_order_relaxed));
    notify_worker(w);
    // release: our last use of *w happens-before the destructor's acquire load.
    s->wakes_in_flight.fetch_sub(1, std::memory_order_release);
}

bool should_stop(scheduler_state* s) noexcept {
    // seq_cst pairs with the seq_cst store of `stopping` in ~scheduler and the
    // decrement in finish_fiber(): if the last fiber finishes before
    // `stopping` is set, this load of `live` sees 0; if after, the finisher
    // sees `stopping` and wakes every worker.
    return s->stopping.load(std::memory_order_seq_cst) &&
           s->live.load(std::memory_order_seq_cst) == 0;
}

void park_worker(worker* w) noexcept {
    // The epoch is read before announcing ourselves: a notify after this
    // point changes it, and futex_wait then returns at once.
    std::uint32_t key = w->epoch.load(std::memory_order_seq_cst);
    w->parked.exchange(true, std::memory_order_seq_cst);  // pairs with notify_worker()
    if (w->inject_head.load(std::memory_order_seq_cst) == nullptr && !should_stop(w->sched))
        futex_wait(&w->epoch, key);
    w->parked.store(false, std::memory_order_relaxed);
}

void release_exited(worker* w) noexcept {
    fiber_ctx* c = w->exited;
    w->exited = nullptr;
    arch::annotate_destroy_context(&c->ctx);
    release_fiber(c);
}

}  // namespace

void run_worker_thread(worker* w) {
    install_overflow_handler();
    tl_worker = w;
    for (;;) {
        if (w->exited != nullptr) release_exited(w);
        if (w->current == nullptr && w->idle_ring != nullptr) {
            w->current = w->idle_ring;
            w->idle_ring = nullptr;
        }
        if (w->current != nullptr) {
            arch::switch_to(&w->loop_ctx, &w->current->ctx);
            continue;
        }
        if (w->inject_head.load(std::memory_order_relaxed) != nullptr) {
            drain_inject(w);
            continue;
        }
        if (should_stop(w->sched)) break;
        park_worker(w);
    }
    tl_worker = nullptr;
}

namespace {

// The last act of every fiber: publish completion, leave the ring, and let
// the worker loop free the stack we are standing on.
[[noreturn]] void finish_fiber(fiber_ctx* c) noexcept {
    worker* w = tl_worker;
    scheduler_state* s = w->sched;
    // acq_rel: release publishes `error`; acquire sees the joiner's waiter.
    void* j = c->join_state.exchange(join_done, std::memory_order_acq_rel);
    if (j != nullptr) wake(static_cast<waiter*>(j));
    if (s->live.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        s->stopping.load(std::memory_order_seq_cst))
        wake_all_workers(s);

    fiber_ctx* nxt = c->next;
    if (nxt == c) {
        w->current = nullptr;
    } else {
        ring_unlink(c);
        w->current = nxt;
    }
    w->exited = c;
    arch::switch_final(&c->ctx, &w->loop_ctx);
}

}  // namespace

void fiber_entry(arch::raw_context* self, arch::raw_context*) noexcept {
    auto* c = reinterpret_cast<fiber_ctx*>(self);
    arch::context_started(&c->ctx);
    try {
        c->invoke(c->callable);
    } catch (...) {
        c->error = std::current_exception();
    }
    c->destroy(c->callable);
    c->callable = nullptr;
    finish_fiber(c);
}

void drain_inject(worker* w) noexcept {
    // acquire pairs with the release CAS in inject_push().
    fiber_ctx* list = w->inject_head.exchange(nullptr, std::memory_order_acquire);
    fiber_ctx* fifo = nullptr;  // the list is LIFO; reverse it
    while (list != nullptr) {
        fiber_ctx* n = list->inject_next;
        list->inject_next = fifo;
        fifo = list;
        list = n;
    }
    while (fifo != nullptr) {
        fiber_ctx* n = fifo->inject_next;
        fifo->inject_next = nullptr;
        make_ready_local(w, fifo);
        fifo = n;
    }
}

void block_current(worker* w) noexcept {
    fiber_ctx* self = w->current;
    fiber_ctx* nxt = self->next;
    if (nxt == self) {
        w->current = nullptr;
        arch::switch_to(&self->ctx, &w->loop_ctx);
    } else {
        ring_unlink(self);
        w->current = nxt;
        arch::switch_to(&self->ctx, &nxt->ctx);
    }
}

void wake_fiber(fiber_ctx* f) noexcept {
    worker* w = tl_worker;
    if (w == f->home)
        make_ready_local(w, f);
    else
        inject_push(f->home, f);
}

void wake(waiter* wt) noexcept {
    if (wt->fiber != nullptr) {
        wake_fiber(wt->fiber);
    } else {
        // release pairs with the acquire load in park_waiter(). The waiter may
        // return and free `wt` as soon as it sees 1; a futex_wake on a stale
        // address then wakes nobody, which is harmless.
        wt->signaled.store(1, std::memory_order_release);
        futex_wake(&wt->signaled, 1);
    }
}

void park_waiter(waiter* wt) noexcept {
    if (wt->fiber != nullptr) {
        // One wake-up per published waiter; fibers see no spurious ones.
        block_current(tl_worker);
        return;
    }
    while (wt->signaled.load(std::memory_order_acquire) == 0) futex_wait(&wt->signaled, 0);
}

void yield_thread() noexcept { std::this_thread::yield(); }

scheduler_state* current_scheduler_state() noexcept {
    worker* w = tl_worker;
    return w ? w->sched : nullptr;
}

scheduler_state* default_scheduler_state() {
    static scheduler s;  // destroyed at exit: waits for its fibers
    return s.state_;
}

std::size_t resolve_stack_size(scheduler_state* s, std::size_t requested) noexcept {
    return requested != 0 ? requested : s->stack_size;
}

std::uint64_t next_fiber_id() noexcept {
    return g_fiber_ids.fetch_add(1, std::memory_order_relaxed) + 1;  // a counter, orders nothing
}

void submit_new_fiber(scheduler_state* s, fiber_ctx* c) noexcept {
    // Before the fiber is published, so its own decrement cannot come first.
    s->live.fetch_add(1, std::memory_order_seq_cst);
    worker* w = tl_worker;
    if (w != nullptr && w->sched == s) {
        c->home = w;
        make_ready_local(w, c);
        return;
    }
    unsigned i = s->next_worker.fetch_add(1, std::memory_order_relaxed) %
                 static_cast<unsigned>(s->workers.size());
    c->home = s->workers[i].get();
    inject_push(c->home, c);
}

void release_fiber(fiber_ctx* c) noexcept {
    // acq_rel: whoever frees must see all writes of the other owner.
    if (c->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        if (c->error) {
            // join() takes the exception out before it lets go; one still
            // here at the end was never received: the fiber was detached.
            try {
                std::rethrow_exception(c->error);
            } catch (const std::exception& e) {
                fatal("detached fiber %llu ended with an exception: %s",
                      static_cast<unsigned long long>(c->id), e.what());
            } catch (...) {
                fatal("detached fiber %llu ended with an exception",
                      static_cast<unsigned long long>(c->id));
            }
        }
        stack_region st = c->stack;
        c->~fiber_ctx();
        release_stack(st);
    }
}

}  // namespace spindle::detail

namespace spindle {

using detail::fatal;

std::ostream& operator<<(std::ostream& os, fiber::id i) {
    if (i.value() == 0) return os << "fiber::id(none)";
    return os << i.value();
}

void fiber::join() {
    detail::fiber_ctx* c = ctx_;
    if (c == nullptr)
        fatal("join() on a fiber handle that is not joinable (never started, already joined or "
              "detached)");
    if (c == detail::running_fiber())
        fatal("fiber %llu called join() on itself; it would wait forever",
              static_cast<unsigned long long>(c->id));
    if (c->join_state.load(std::memory_order_acquire) != detail::join_done) {
        detail::waiter wt;
        wt.fiber = detail::running_fiber();
        void* expected = nullptr;
        // acq_rel: release publishes the waiter to the finisher; acquire (on
        // failure too) sees the fiber's result if it finished first.
        if (c->join_state.compare_exchange_strong(expected, &wt, std::memory_order_acq_rel,
                                                  std::memory_order_acquire)) {
            detail::park_waiter(&wt);
        } else if (expected != detail::join_done) {
            fatal("fiber %llu is joined from two places at once",
                  static_cast<unsigned long long>(c->id));
        }
    }
    std::exception_ptr err = std::move(c->error);
    ctx_ = nullptr;
    detail::release_fiber(c);
    if (err) std::rethrow_exception(err);
}

void fiber::detach() {
    detail::fiber_ctx* c = ctx_;
    if (c == nullptr)
        fatal("detach() on a fiber handle that is not joinable (never started, already joined or "
              "detached)");
    ctx_ = nullptr;
    detail::release_fiber(c);
}

void fiber::abandon_joinable(const char* what) const noexcept {
    fatal("fiber %llu: its joinable handle was %s; call join() or detach() first",
          static_cast<unsigned long long>(ctx_->id), what);
}

scheduler::scheduler(options opts) : state_(new detail::scheduler_state) {
    std::unique_ptr<detail::scheduler_state> s(state_);
    unsigned n = opts.workers != 0 ? opts.workers : std::thread::hardware_concurrency();
    if (n == 0) n = 1;
    s->stack_size = opts.stack_size != 0 ? opts.stack_size : detail::default_stack_size_from_env();
    if (s->stack_size < min_stack_size)
        throw std::invalid_argument("spindle::scheduler: stack_size " + std::to_string(s->stack_size) +
                                    " is below the minimum of " + std::to_string(min_stack_size) +
                                    " bytes");
    detail::install_overflow_handler();
    for (unsigned i = 0; i < n; ++i) {
        auto w = std::make_unique<detail::worker>();
        w->sched = state_;
        w->index = i;
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
    state_->stopping.store(true, std::memory_order_seq_cst);
    detail::wake_all_workers(state_);
    for (auto& t : state_->threads) t.join();
    // A thread that woke one of our fibers may still be finishing its notify.
    while (state_->wakes_in_flight.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    delete state_;
}

unsigned scheduler::workers() const noexcept { return static_cast<unsigned>(state_->workers.size()); }
std::size_t scheduler::default_stack_size() const noexcept { return state_->stack_size; }
std::size_t scheduler::live_fibers() const noexcept {
    return state_->live.load(std::memory_order_relaxed);  // a snapshot for callers, orders nothing
}

}  // namespace spindle
