// Scheduler, workers and the fiber life cycle. See
// include/spindle/runtime/detail/worker.hpp for the data structures and their
// invariants.
#include <spindle/runtime/scheduler.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/tclock.hpp>  // tclock_may_block

namespace spindle::detail {

// current_worker()'s variable (worker.hpp): reached only through
// SPINDLE_FRESH_TLS_ADDRESS, never by this name.
__thread worker* tl_worker_storage SPINDLE_TLS_NAME("spindle_tl_worker")
    __attribute__((tls_model("initial-exec"), used)) = nullptr;

void run_worker_thread(worker* w);
void destroy_fiber_locals(fiber_ctx* c) noexcept;  // src/runtime/fiber_local.cpp
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
    // Workers parked or about to park (see worker::parked). seq_cst: the
    // Dekker pair with a notifier's publish of work.
    alignas(arch::cache_line) std::atomic<unsigned> sleepers{0};
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

// Wake `w` if it is parked: claim it (parked true -> false), so two
// notifiers never both pay for a futex_wake of one worker.
bool claim_and_wake(worker* w) noexcept {
    // seq_cst load: the second half of the Dekker pair with park_worker()
    // (it stores parked, then re-checks the queues; we published work, then
    // read parked).
    if (!w->parked.load(std::memory_order_seq_cst)) return false;
    bool expected = true;
    if (!w->parked.compare_exchange_strong(expected, false, std::memory_order_seq_cst,
                                           std::memory_order_relaxed))
        return false;
    w->epoch.fetch_add(1, std::memory_order_seq_cst);  // futex key change, pairs with park_worker's load
    futex_wake(&w->epoch, 1);
    return true;
}

// Work became stealable: wake one parked worker, if any. Call right after
// the seq_cst publish of the work.
void notify_sleeper(scheduler_state* s, worker* self) noexcept {
    if (s->sleepers.load(std::memory_order_seq_cst) == 0) return;  // pairs with park_worker's RMW
    std::size_t n = s->workers.size();
    std::size_t start = self != nullptr ? self->index + 1 : 0;
    for (std::size_t i = 0; i < n; ++i) {
        worker* w = s->workers[(start + i) % n].get();
        if (w != self && claim_and_wake(w)) return;
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
    // scheduler may then be destroyed, while we are still in claim_and_wake()
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
        // drain_inject), and the publish half of the Dekker in claim_and_wake.
    } while (!w->inject_head.compare_exchange_weak(head, f, std::memory_order_seq_cst,
                                                   std::memory_order_relaxed));
    claim_and_wake(w);
    // release: our last use of *w happens-before the destructor's acquire load.
    s->wakes_in_flight.fetch_sub(1, std::memory_order_release);
}

// `f` is about to run on `w`: `w` becomes its home. A pinned fiber's home
// never changes (debug builds check every path that runs one).
SPINDLE_ALWAYS_INLINE void settle(worker* w, fiber_ctx* f) noexcept {
#if SPINDLE_DEBUG_CHECKS
    if (f->pinned && f->home != w)
        fatal("pinned fiber %llu was about to run on worker %u instead of its own worker %u",
              static_cast<unsigned long long>(f->id), w->index, f->home->index);
#endif
    f->home = w;
}

// A ready pinned fiber joins its worker's pinned list (owner only).
void pinned_push(worker* w, fiber_ctx* f) noexcept {
    f->pinned_next = nullptr;
    if (w->pinned_tail != nullptr) w->pinned_tail->pinned_next = f; else w->pinned_head = f;
    w->pinned_tail = f;
}

fiber_ctx* pinned_pop(worker* w) noexcept {
    fiber_ctx* f = w->pinned_head;
    if (f != nullptr) {
        w->pinned_head = f->pinned_next;
        if (w->pinned_head == nullptr) w->pinned_tail = nullptr;
        f->pinned_next = nullptr;
    }
    return f;
}

// The next ready fiber of this worker's own queues: pinned ones first (they
// have nowhere else to run), then the deque, newest first -- except every
// 8th pick, which takes the oldest (the thieves' end). Newest-first alone
// can starve: under a steady stream of wake-ups (say, thousands of timed
// waits expiring) a fiber readied earlier, perhaps holding a permit or a
// lock handed to it, would stay at the bottom for as long as the stream
// lasts. With the oldest taken every 8th pick, a fiber with k fibers ahead
// of it runs within about 8k picks.
fiber_ctx* pop_ready(worker* w) noexcept {
    if (w->pinned_head != nullptr) [[unlikely]]
        return pinned_pop(w);
    if ((++w->deque_picks & 7) == 0) {
        if (fiber_ctx* f = w->deque.steal()) return f;  // the owner may steal from itself
    }
    return w->deque.pop();
}

// Make `f` ready on this thread's worker `w`, where idle workers may steal it
// (unless it is pinned here).
void push_local(worker* w, fiber_ctx* f) noexcept {
    w->yield_check = 1;
    if (f->pinned) [[unlikely]] {
        pinned_push(w, f);  // f->home == w: callers send pinned fibers home
        return;
    }
    w->deque.push(f);  // its seq_cst store of bottom publishes f
    notify_sleeper(w->sched, w);
}

bool should_stop(scheduler_state* s) noexcept {
    // seq_cst pairs with the seq_cst store of `stopping` in ~scheduler and the
    // decrement in finish_fiber(): if the last fiber finishes before
    // `stopping` is set, this load of `live` sees 0; if after, the finisher
    // sees `stopping` and wakes every worker.
    return s->stopping.load(std::memory_order_seq_cst) &&
           s->live.load(std::memory_order_seq_cst) == 0;
}

std::uint64_t next_random(worker* w) noexcept {
    // xorshift64*: victim selection only.
    std::uint64_t x = w->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

// The inject list -> the deque (oldest first, so the owner's LIFO pop runs
// the newest and thieves take the oldest).
void drain_inject(worker* w) noexcept {
    // A relaxed look first: the exchange below costs an atomic RMW.
    if (w->inject_head.load(std::memory_order_relaxed) == nullptr) return;
    // acquire pairs with the seq_cst CAS in inject_push().
    fiber_ctx* list = w->inject_head.exchange(nullptr, std::memory_order_acquire);
    if (list == nullptr) return;
    fiber_ctx* fifo = nullptr;  // the list is LIFO; reverse it
    while (list != nullptr) {
        fiber_ctx* n = list->inject_next;
        list->inject_next = fifo;
        fifo = list;
        list = n;
    }
    bool stealable = false;
    while (fifo != nullptr) {
        fiber_ctx* n = fifo->inject_next;
        fifo->inject_next = nullptr;
        if (fifo->pinned) {
            pinned_push(w, fifo);
        } else {
            w->deque.push(fifo);
            stealable = true;
        }
        fifo = n;
    }
    w->yield_check = 1;
    if (stealable) notify_sleeper(w->sched, w);
}

fiber_ctx* steal_one(worker* w) noexcept {
    scheduler_state* s = w->sched;
    std::size_t n = s->workers.size();
    if (n < 2) return nullptr;
    std::size_t start = static_cast<std::size_t>(next_random(w) % n);
    for (std::size_t i = 0; i < n; ++i) {
        worker* v = s->workers[(start + i) % n].get();
        if (v == w) continue;
        for (int attempt = 0; attempt < 4; ++attempt) {
            if (!v->deque.maybe_nonempty()) break;
            if (fiber_ctx* f = v->deque.steal()) return f;
        }
    }
    return nullptr;
}

// Something for the worker loop to run: its inject list, its deque, then
// the other workers' deques.
fiber_ctx* find_work(worker* w) noexcept {
    drain_inject(w);
    if (fiber_ctx* f = pop_ready(w)) return f;
    return steal_one(w);
}

bool any_work_seq_cst(worker* w) noexcept {
    // seq_cst loads: the re-check half of park_worker's Dekker pair with a
    // publisher's seq_cst push (inject CAS, deque bottom store).
    if (w->inject_head.load(std::memory_order_seq_cst) != nullptr) return true;
    for (auto& v : w->sched->workers)
        if (!v->deque.empty_seq_cst()) return true;
    return false;
}

void park_worker(worker* w) noexcept {
    scheduler_state* s = w->sched;
    // The epoch is read before announcing ourselves: a wake after this
    // point changes it, and futex_wait then returns at once.
    std::uint32_t key = w->epoch.load(std::memory_order_seq_cst);
    // seq_cst store: before the count, so a notifier that sees the count
    // also sees parked (claim_and_wake's load).
    w->parked.store(true, std::memory_order_seq_cst);
    // seq_cst RMW then seq_cst re-check of the queues: the Dekker pair with
    // a publisher's seq_cst push then notify_sleeper()'s load of sleepers.
    s->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!any_work_seq_cst(w) && !should_stop(s)) futex_wait(&w->epoch, key);
    // Claimed by a notifier (parked already false) or not: either way we
    // are awake and will look for work.
    // relaxed: only we and claimers write it, and a stale true costs a
    // claimer one futex_wake on an awake worker.
    w->parked.store(false, std::memory_order_relaxed);
    // seq_cst: a notifier that still counts us finds no parked worker and
    // returns; we are awake and about to search the queues ourselves.
    s->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

// `self` (w->current) leaves the ring: it blocks or finishes. Choose who
// runs next on this worker and put it in self's place; null: the loop.
// Order: the fiber an inline resume suspended for self; the deque (newest
// first, its data is warm), except every 16th pick, which prefers the ring
// so yielders are not starved by a stream of wake-ups; the ring; whatever
// other threads injected.
fiber_ctx* take_over(worker* w, fiber_ctx* self) noexcept {
    // Fibers other threads woke for us wait in the inject list: move them to
    // the deque now, so a busy worker does not leave them behind.
    drain_inject(w);
    fiber_ctx* n = self->resumer;
    if (n != nullptr) {
        self->resumer = nullptr;
    } else {
        bool ring_first = self->next != self && (++w->picks & 15) == 0;
        if (!ring_first) n = pop_ready(w);
        else w->yield_check = 1;  // the queues wait: the next yield looks again
        if (n == nullptr) {
            if (self->next != self) {
                n = self->next;
                ring_unlink(self);
                w->current = n;
                return n;
            }
            n = pop_ready(w);
            if (n == nullptr) {
                w->current = nullptr;
                return nullptr;
            }
        }
    }
    settle(w, n);
    ring_replace(self, n);
    w->current = n;
    return n;
}

void release_finished(void* arg) noexcept {
    auto* c = static_cast<fiber_ctx*>(arg);
    arch::annotate_destroy_context(&c->ctx);
    release_fiber(c);
}

void finish_park(void* arg) noexcept {
    auto* wt = static_cast<waiter*>(arg);
    fiber_ctx* f = wt->fiber;  // read first: once parked, wt may be gone
    // acq_rel pairs with unpark()'s exchange: whoever comes second acts.
    if (wt->state.exchange(park_parked, std::memory_order_acq_rel) == park_notified) make_ready(f);
}

void push_handed_off(void* arg) noexcept {
    worker* w = current_worker();
    push_local(w, static_cast<fiber_ctx*>(arg));
}

// Suspend the running fiber; `p` runs on this worker once its context is
// saved.
SPINDLE_SWITCH_FN void suspend_current(worker* w, post_action p) noexcept {
    fiber_ctx* self = w->current;
    fiber_ctx* n = take_over(w, self);
    w->post = p;
    arch::switch_to(&self->ctx, n != nullptr ? &n->ctx : &w->loop_ctx);
    run_post(current_worker());
}

}  // namespace

void run_post_slow(worker* w) noexcept {
    post_action p = w->post;
    w->post = post_action{};
    p.fn(p.arg);
}

void run_worker_thread(worker* w) {
    install_overflow_handler();
    defer_stack_pool_trim();
    set_current_worker(w);
    w->rng = 0x9E3779B97F4A7C15ULL * (w->index + 1);
    for (;;) {
        run_post(w);
        fiber_ctx* f = find_work(w);
        if (f == nullptr && !should_stop(w->sched)) {
            // Spin a little before paying for a futex sleep and wake: work
            // handed off by a CES unlock often arrives within microseconds.
            for (int i = 0; i < 64 && f == nullptr; ++i) {
                for (int k = 0; k < 32; ++k) arch::cpu_relax();
                f = find_work(w);
            }
        }
        if (f != nullptr) {
            settle(w, f);
            f->next = f->prev = f;
            w->current = f;
            arch::switch_to(&w->loop_ctx, &f->ctx);
            continue;
        }
        if (should_stop(w->sched)) break;
        // Idle: give back what a burst of fiber ends left in our stack pool,
        // a batch at a time, looking for work in between.
        if (trim_stack_pool(stack_pool_trim_batch) != 0) continue;
        park_worker(w);
    }
    set_current_worker(nullptr);
}

namespace {

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
    finish_fiber(c);
}

void yield_slow(worker* w) noexcept {
    w->yield_check = 0;
    drain_inject(w);
    fiber_ctx* self = w->current;
    fiber_ctx* n = self->resumer;
    if (n != nullptr) {
        self->resumer = nullptr;
    } else if ((++w->picks & 15) != 0 || self->next == self) {
        n = pop_ready(w);
    } else {
        // The ring's turn: what waits in the pinned list or the deque must
        // be looked at again by the next yield.
        w->yield_check = 1;
    }
    if (n != nullptr) {
        // Runs next; self stays in the ring and runs after the ring's others.
        settle(w, n);
        ring_insert_after(self, n);
        w->yield_check = 1;  // the deque may hold more
    } else {
        n = self->next;
        if (n == self) return;
    }
    w->current = n;
    arch::switch_to(&self->ctx, &n->ctx);
    run_post(current_worker());
}

void make_ready(fiber_ctx* f) noexcept {
    worker* w = current_worker();
    if (w != nullptr && f->home != nullptr && w->sched == f->home->sched && (!f->pinned || f->home == w))
        push_local(w, f);
    else
        inject_push(f->home, f);
}

namespace {
// Could this worker run nothing but its current fiber right now? Its ring,
// pinned list and inject list are empty, it owes no inline_resume resumer
// its place, and no deque (its own included) holds a fiber. Relaxed looks:
// a guess that only decides whether to spin a little longer.
bool nothing_else_to_run(worker* w) noexcept {
    fiber_ctx* self = w->current;
    if (self->next != self || self->resumer != nullptr || w->pinned_head != nullptr) return false;
    if (w->inject_head.load(std::memory_order_relaxed) != nullptr) return false;
    for (auto& v : w->sched->workers)
        if (v->deque.maybe_nonempty()) return false;
    return true;
}

// A fiber's spin before it suspends (see fiber_park_spins): true if unparked.
bool fiber_park_spin(worker* w, waiter* wt) noexcept {
    for (unsigned i = 0; i < fiber_park_spins; ++i) {
        if ((i & 15) == 0 && !nothing_else_to_run(w)) return false;
        // acquire pairs with unpark's exchange (the waker's writes).
        if (wt->state.load(std::memory_order_acquire) == park_notified) return true;
        arch::cpu_relax();
    }
    return false;
}
}  // namespace

bool spin_before_queue(bool (*done)(const void* arg) noexcept, const void* arg,
                       std::chrono::steady_clock::time_point deadline) noexcept {
    worker* w = current_worker();
    const bool timed = deadline != std::chrono::steady_clock::time_point::max();
    if (w != nullptr && w->current != nullptr) {
        // A fiber: only while its worker has nothing else to run, and not
        // past the deadline (looked at with the queues, every 16 steps).
        for (unsigned i = 0; i < fiber_park_spins; ++i) {
            if ((i & 15) == 0 && (!nothing_else_to_run(w) || (timed && std::chrono::steady_clock::now() >= deadline)))
                return done(arg);
            if (done(arg)) return true;
            arch::cpu_relax();
        }
        return done(arg);
    }
    for (unsigned i = 0; i < queue_spins; ++i) {
        if (done(arg)) return true;
        arch::cpu_relax();
    }
    tclock_may_block();  // as in thread_park_spin: no yield inside a delegated section
    for (unsigned i = 0; i < queue_yields; ++i) {
        if (done(arg)) return true;
        if (timed && std::chrono::steady_clock::now() >= deadline) return false;
        sched_yield_now();
    }
    return done(arg);
}

void park(waiter* wt) noexcept {
    if (wt->fiber != nullptr) {
        worker* w = current_worker();
        // Still empty: an unpark that comes now only stores notified, and
        // nobody switches into us (can_switch_into wants parked).
        if (fiber_park_spin(w, wt)) return;
        suspend_current(w, post_action{&finish_park, wt});
        return;
    }
    // (thread_park_spin has moved a delegated TCLock section home.)
    if (thread_park_spin(wt)) return;
    std::uint32_t s = park_empty;
    // empty -> parked: from here on an unpark must futex_wake us. A no-op
    // if we were notified meanwhile, or had announced parked before (a timed
    // wait that timed out, then parks for the unpark it raced with).
    // acq_rel/acquire pairs with unpark's exchange.
    wt->state.compare_exchange_strong(s, park_parked, std::memory_order_acq_rel, std::memory_order_acquire);
    // acquire pairs with unpark's exchange.
    while (wt->state.load(std::memory_order_acquire) != park_notified) futex_wait(&wt->state, park_parked);
}

bool thread_park_spin(waiter* wt, std::chrono::steady_clock::time_point deadline) noexcept {
    for (unsigned i = 0; i < thread_park_spins; ++i) {
        // acquire pairs with unpark's exchange.
        if (wt->state.load(std::memory_order_acquire) == park_notified) return true;
        arch::cpu_relax();
    }
    // A thread about to yield and then sleep inside a TCLock critical
    // section that a combiner runs for it: move the section back to its own
    // thread first (tclock.hpp, "Blocking inside a critical section"), so
    // that the combiner's thread and the batch behind it neither yield nor
    // sleep with it. The waiter record names no thread (a futex word on this
    // stack), so the wait may go on on either. One TLS load when not
    // delegated.
    tclock_may_block();
    // A timed wait checks its deadline before each yield, so it overshoots
    // by at most one yield: ~0.4 us on an idle CPU, but as long as the
    // threads it lets run when the CPU is oversubscribed.
    const bool timed = deadline != std::chrono::steady_clock::time_point::max();
    for (unsigned i = 0;; ++i) {
        // acquire pairs with unpark's exchange.
        if (wt->state.load(std::memory_order_acquire) == park_notified) return true;
        if (i == thread_park_yields || (timed && std::chrono::steady_clock::now() >= deadline)) return false;
        sched_yield_now();  // oversubscribed: let the thread that will wake us run
    }
}

void unpark(waiter* wt) noexcept {
    fiber_ctx* f = wt->fiber;  // read first: once woken, wt may be gone
    if (f != nullptr) {
        // acq_rel pairs with finish_park(): whoever comes second acts.
        if (wt->state.exchange(park_notified, std::memory_order_acq_rel) == park_parked) make_ready(f);
        return;
    }
    // acq_rel: release pairs with park's acquire loads, acquire with its
    // empty -> parked CAS. Only a thread that announced it sleeps (parked)
    // needs the system call; one still spinning sees the store. The waiter
    // may return and free `wt` as soon as it sees the store; a futex_wake on
    // a stale address then wakes nobody, which is harmless.
    if (wt->state.exchange(park_notified, std::memory_order_acq_rel) == park_parked) futex_wake(&wt->state, 1);
}

namespace {
// Dispatch (CES paper Fig. 3): the waiter goes back to the ready queue of the
// worker it blocked on, as a notified OS thread or a Boost.Fiber waiter
// would, and the waker carries on.
void unpark_home(waiter* wt) noexcept {
    fiber_ctx* f = wt->fiber;
    // acq_rel pairs with finish_park(), as in unpark().
    if (wt->state.exchange(park_notified, std::memory_order_acq_rel) != park_parked) return;
    // Parked, so f->home is the worker it parked on (a fiber that parked has
    // run, so it has one). Not read before the exchange: a waiter that has
    // not parked yet may be running, and settle() writes its home.
    worker* w = current_worker();
    if (w == f->home) push_local(w, f); else inject_push(f->home, f);
}
}  // namespace

namespace {
// May the fiber running on `w` switch straight into waiter `wt` (CES or
// inline handoff)? It needs: a fiber waiter of the waker's scheduler, a waker
// that is a fiber, a waiter allowed to run here (not pinned elsewhere), and a
// waiter whose context is saved (parked).
bool can_switch_into(worker* w, waiter* wt, handoff policy) noexcept {
    fiber_ctx* f = wt->fiber;
    if (policy == handoff::dispatch || f == nullptr || w == nullptr || w->current == nullptr) return false;
    // Parked first: acquire pairs with finish_park()'s exchange, so f's
    // context is saved and f->home is the one it parked with. Only after it:
    // a waiter that has not parked yet may be running elsewhere, where
    // settle() writes f->home. While it is parked nobody but us (its one
    // unparker) can make it run, so f->home stays put.
    if (wt->state.load(std::memory_order_acquire) != park_parked) return false;
    return f->home != nullptr && f->home->sched == w->sched && (!f->pinned || f->home == w);
}

// The running fiber of `w` gives its place to the parked waiter `wt`
// (can_switch_into said yes): `wt` is woken, its fiber becomes current.
// Returns the fiber that gave way; the caller sets w->post and switches.
fiber_ctx* give_way_to(worker* w, waiter* wt) noexcept {
    // We dequeued it and it is parked: nobody else will touch it.
    wt->state.store(park_notified, std::memory_order_relaxed);
    fiber_ctx* f = wt->fiber;
    fiber_ctx* self = w->current;
    settle(w, f);
    ring_replace(self, f);
    w->current = f;
    return self;
}

// Wake without switching: dispatch sends a fiber home, anything else is a
// plain unpark.
void unpark_no_switch(waiter* wt, handoff policy) noexcept {
    if (policy == handoff::dispatch && wt->fiber != nullptr)
        unpark_home(wt);  // reads the home only once the fiber is known parked
    else
        unpark(wt);
}
}  // namespace

void unpark_and_park(waiter* wt, handoff policy, waiter* self_wt) noexcept {
    worker* w = current_worker();
    if (self_wt->fiber == nullptr || !can_switch_into(w, wt, policy) ||
        w->current->resumer != nullptr) {
        // (A fiber with a resumer must give the worker back to it.)
        unpark_no_switch(wt, policy);
        park(self_wt);
        return;
    }
    // inline and ces agree here: we suspend anyway, so the waiter runs now.
    fiber_ctx* f = wt->fiber;
    fiber_ctx* self = give_way_to(w, wt);
    w->post = post_action{&finish_park, self_wt};
    arch::switch_to(&self->ctx, &f->ctx);
    run_post(current_worker());
}

void unpark_with(waiter* wt, handoff policy) noexcept {
    worker* w = current_worker();
    if (!can_switch_into(w, wt, policy)) {
        unpark_no_switch(wt, policy);
        return;
    }
    fiber_ctx* f = wt->fiber;  // read first: once woken, wt may be gone
    fiber_ctx* self = give_way_to(w, wt);
    if (policy == handoff::ces) {
        // CES (Fig. 6): we go to the executor — stealable once our context is
        // saved — and the waiter runs here, now. A fiber that an inline
        // resume suspended for us was to run when we next suspend: that is
        // now, so it becomes ready here (it must not follow us to a thief).
        // It may itself carry the fiber that inline-resumed *it*, and so on
        // (a chain of inline handoffs): the whole chain becomes ready, each
        // link on its own. Pushed with its link still set, a link would be
        // stolen with the rest of the chain behind it, and a thief would run
        // a pinned fiber of this worker when that link next suspends. The
        // deepest link is pushed first, so the owner's newest-first pops run
        // them in the order the chain would have.
        fiber_ctx* chain = nullptr;  // the chain reversed, through `resumer`
        for (fiber_ctx* r = std::exchange(self->resumer, nullptr); r != nullptr;) {
            fiber_ctx* next = r->resumer;
            r->resumer = chain;
            chain = r;
            r = next;
        }
        while (chain != nullptr) {
            fiber_ctx* next = std::exchange(chain->resumer, nullptr);
            push_local(w, chain);
            chain = next;
        }
        w->post = post_action{&push_handed_off, self};
    } else {
        // inline_resume (Fig. 2): we continue when f next suspends.
        f->resumer = self;
        w->yield_check = 1;  // f's yield must go back to us
    }
    arch::switch_to(&self->ctx, &f->ctx);
    run_post(current_worker());
}

void yield_thread() noexcept { std::this_thread::yield(); }

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

std::uint64_t next_fiber_id() noexcept {
    return g_fiber_ids.fetch_add(1, std::memory_order_relaxed) + 1;  // a counter, orders nothing
}

void bad_worker_index(int index, unsigned workers) {
    throw std::invalid_argument("spindle: fiber_options::worker " + std::to_string(index) +
                                " is not a worker of this scheduler (it has " + std::to_string(workers) +
                                "; valid: 0.." + std::to_string(workers - 1) + " or -1)");
}

unsigned worker_count(scheduler_state* s) noexcept { return static_cast<unsigned>(s->workers.size()); }

void submit_new_fiber(scheduler_state* s, fiber_ctx* c, int on_worker) noexcept {
    // Before the fiber is published, so its own decrement cannot come first.
    s->live.fetch_add(1, std::memory_order_seq_cst);
    worker* w = current_worker();
    if (on_worker < 0 && w != nullptr && w->sched == s && w->current != nullptr) {
        c->home = w;
        push_local(w, c);
        return;
    }
    unsigned i = on_worker >= 0 ? static_cast<unsigned>(on_worker)
                                : s->next_worker.fetch_add(1, std::memory_order_relaxed) %  // a placement hint
                                      static_cast<unsigned>(s->workers.size());
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
    // seq_cst pairs with should_stop()'s loads and finish_fiber's decrement.
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
