// The fiber life cycle: a new fiber is placed on a worker, its body runs
// (fiber_entry), it finishes (finish_fiber) and its stack is returned when
// the last of the body and the handle lets go (release_fiber); join() and
// detach() on the handle.
#include <atomic>
#include <cstdint>
#include <exception>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>

#include <spindle/arch/fatal.hpp>

#include "run_queues.hpp"

namespace spindle::detail {

void destroy_fiber_locals(fiber_ctx* c) noexcept;  // src/runtime/fiber_local.cpp

namespace {

std::atomic<std::uint64_t> g_fiber_ids{0};

void release_finished(void* arg) noexcept {
    auto* c = static_cast<fiber_ctx*>(arg);
    arch::annotate_destroy_context(&c->ctx);
    release_fiber(c);
}

// The last act of every fiber: publish completion, leave the ring, and let
// whoever runs next on this worker free the stack we are standing on.
[[noreturn]] void finish_fiber(fiber_ctx* c) noexcept {
    worker* w = current_worker();
    scheduler_state* s = w->sched;
    // acq_rel: release publishes `error`; acquire sees the joiner's waiter.
    void* j = c->join_state.exchange(join_done, std::memory_order_acq_rel);
    if (j != nullptr) unpark(static_cast<waiter*>(j));
    fiber_ctx* n = take_over(w, c);
    w->post = post_action{&release_finished, c};
    // After the decrement ~scheduler may proceed; the post action above runs
    // before this worker looks at `stopping` again (run_post comes first in
    // the loop and at every landing site).
    if (s->live.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        s->stopping.load(std::memory_order_seq_cst))
        wake_all_workers(s);
    arch::switch_final(&c->ctx, n != nullptr ? &n->ctx : &w->loop_ctx);
}

}  // namespace

void fiber_entry(arch::raw_context* self, arch::raw_context*) noexcept {
    auto* c = reinterpret_cast<fiber_ctx*>(self);
    arch::context_started(&c->ctx);
    run_post(current_worker());
    try {
        c->invoke(c->callable);
    } catch (...) {
        c->error = std::current_exception();
        // Nothing the C++ runtime can hold: a forced unwind (pthread_exit()
        // or a thread cancellation acting inside the fiber; foreign
        // exceptions look the same). Its unwinding ends at the bottom of this
        // stack, not at the worker thread's start, and it cannot be
        // swallowed (glibc aborts, "exception not rethrown") nor carried to
        // the worker's own stack: say so (fiber.hpp, "What a fiber must not
        // do"). (Not `catch (abi::__forced_unwind&)`: it binds a reference to
        // no object, which UBSan reports.)
        if (!c->error)
            fatal("fiber %llu called pthread_exit() or was cancelled as a thread (pthread_cancel of its worker "
                  "thread): a fiber ends by returning from its function, and a worker thread must not be "
                  "cancelled",
                  static_cast<unsigned long long>(c->id));
    }
    c->destroy(c->callable);
    c->callable = nullptr;
    if (c->locals != nullptr) destroy_fiber_locals(c);
    if (c->relay != nullptr) {
        c->relay->destroy(c->relay);
        c->relay = nullptr;
    }
    finish_fiber(c);
}

std::uint64_t next_fiber_id() noexcept {
    return g_fiber_ids.fetch_add(1, std::memory_order_relaxed) + 1;  // a counter, orders nothing
}

void bad_worker_index(int index, unsigned workers) {
    throw std::invalid_argument("spindle: fiber_options::worker " + std::to_string(index) +
                                " is not a worker of this scheduler (it has " + std::to_string(workers) +
                                "; valid: 0.." + std::to_string(workers - 1) + " or -1)");
}

void submit_new_fiber(scheduler_state* s, fiber_ctx* c, int on_worker) noexcept {
    // relaxed: a misuse check (see run_phase), not synchronization.
    if (s->caller_is_worker && s->run_phase.load(std::memory_order_relaxed) == 2) [[unlikely]]
        fatal("spindle::scheduler %p: spawn() after run() returned; its workers have stopped and fiber %llu "
              "would never run",
              s->owner, static_cast<unsigned long long>(c->id));
    // Before the fiber is published, so its own decrement cannot come first.
    s->live.fetch_add(1, std::memory_order_seq_cst);
    worker* w = current_worker();
    if (on_worker < 0 && w != nullptr && w->sched == s && w->current != nullptr) {
        c->home = w;
        push_local(w, c);
        return;
    }
    const auto n = static_cast<unsigned>(s->workers.size());
    unsigned i = on_worker >= 0 ? static_cast<unsigned>(on_worker)
                                : s->next_worker.fetch_add(1, std::memory_order_relaxed) % n;  // a placement hint
    // Worker 0 of a caller_is_worker scheduler has no thread before run(),
    // and nobody steals from an inject list: place the fiber where a
    // thread runs (relaxed: a placement hint; a fiber placed on worker 0
    // as run() begins runs there).
    if (on_worker < 0 && i == 0 && n > 1 && s->caller_is_worker && s->run_phase.load(std::memory_order_relaxed) == 0)
        i = 1 + s->next_worker.load(std::memory_order_relaxed) % (n - 1);
    c->home = s->workers[i].get();
    if (w == c->home && w->current != nullptr)
        push_local(w, c);
    else
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
        fatal("join() on fiber handle %p, which is not joinable (never started, already joined or "
              "detached)",
              static_cast<const void*>(this));
    if (c == detail::running_fiber())
        fatal("fiber %llu called join() on itself; it would wait forever",
              static_cast<unsigned long long>(c->id));
    // acquire pairs with the finisher's acq_rel exchange of join_done.
    if (c->join_state.load(std::memory_order_acquire) != detail::join_done) {
        detail::waiter wt;
        wt.fiber = detail::running_fiber();
        void* expected = nullptr;
        // acq_rel: release publishes the waiter to the finisher; acquire (on
        // failure too) sees the fiber's result if it finished first.
        if (c->join_state.compare_exchange_strong(expected, &wt, std::memory_order_acq_rel,
                                                  std::memory_order_acquire)) {
            detail::park(&wt);
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
        fatal("detach() on fiber handle %p, which is not joinable (never started, already joined or "
              "detached)",
              static_cast<const void*>(this));
    ctx_ = nullptr;
    detail::release_fiber(c);
}

void fiber::abandon_joinable(const char* what) const noexcept {
    fatal("fiber %llu: its joinable handle was %s; call join() or detach() first",
          static_cast<unsigned long long>(ctx_->id), what);
}

}  // namespace spindle
