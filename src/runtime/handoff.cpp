// Park, unpark and the handoff decision: how a fiber or a thread waits on a
// primitive of sync/ and how the one who wakes it decides who runs next
// (spindle::handoff: inline_resume, dispatch, ces; the CES paper, Figures
// 2, 3 and 6). The API is include/spindle/runtime/detail/park.hpp; a
// contended unlock reads top to bottom in its primitive's file (say
// src/sync/mutex.cpp) and this one.
#include <chrono>
#include <cstdint>
#include <utility>

#include <spindle/locks/tclock.hpp>  // tclock_may_block

#include "run_queues.hpp"

namespace spindle::detail {

// An OS thread watches for its unpark a little before it sleeps: first
// thread_park_spins cpu_relax steps (about 0.4 us on the 2-CPU EPYC we
// measure on), then up to thread_park_yields sched_yield calls (stopping at
// the wait's deadline, if it has one). Then it sleeps on the futex.
//   - The spin catches a handoff that comes at once (a semaphore passed back
//     and forth between two threads on two CPUs) at cache-miss latency.
//     Longer spinning costs the oversubscribed case: every cpu_relax step
//     there is taken from a thread that has yet to arrive or release.
//   - The yields make a wait on an otherwise idle CPU last about as long as
//     a futex sleep and its wake-up would cost (a yield returns in ~0.4 us
//     when nothing else is runnable, so ~25 us; a sleep and wake-up here cost
//     15-20 us, most of it waking an idle CPU): the usual spin-then-block
//     rule, which keeps a waiter within 2x of the better fixed choice. A wait
//     shorter than that (a latch whose count-downs take 13 us) ends without
//     a system call on the waking side.
//   - Yields, not spins, because with more threads than CPUs a spinning
//     waiter keeps the thread that is to wake it off the CPU, while a
//     yielding one gives way and is still awake, and so quick to resume,
//     when its turn comes. Counted rather than timed for the same reason: a
//     time limit would put the waiter to sleep exactly when others are
//     running, and its wake-up would then cost a futex_wake and a
//     reschedule (semaphore, 1 permit, 8 threads: 0.10-0.16 M/s with a
//     20 us limit, 0.35-0.41 M/s counted).
// bench/cqs, threads, 2 CPUs, this vs std in the same run (before: 128
// cpu_relax + 8 yields): latch with 1/2/4 actors 15k/11k/17k ns a round vs
// std 31-38k/16k/16k (before 45-50k/20k/21k); barrier with 2/4/8 parties
// 0.55k/4.3-4.5k/8.5-9.6k ns a phase vs std 1.5-2.4k/4.3k/8.1-9.2k (before
// 0.5k/9-13k/19k); semaphore with 1 permit and 2/4/8 threads 2.3/0.61/0.40
// M/s vs std 2.4/2.2/2.2 (before 2.6/0.24-0.42/0.25-0.38: the FIFO handoff
// to a thread that is not running is what remains).
inline constexpr unsigned thread_park_spins = 16;
inline constexpr unsigned thread_park_yields = 64;

// A fiber whose worker has nothing else to run -- no other ready fiber here,
// nothing to steal -- watches for its unpark for up to fiber_park_spins
// cpu_relax steps before it suspends (looking at the queues again every 16).
// Suspending would leave the worker idle anyway, and a wake-up that comes
// while the fiber is still here costs the waker one store: no ready queue,
// no steal, no migration of the fiber's stack to the waker's CPU (a CES
// waker switches only into a parked fiber). So two fibers on two workers
// pass a semaphore back and forth as two threads would.
inline constexpr unsigned fiber_park_spins = 1024;

// A wait that ends for everyone at once (a barrier's phase, a latch opening)
// first watches the primitive's own word, before it takes a place in the
// queue: an OS thread for queue_spins cpu_relax steps and queue_yields
// sched_yield calls (std::barrier's and std::latch's waits, libstdc++'s
// __atomic_spin: 12 and 4), a fiber as in fiber_park_spin. A wait that ends
// meanwhile costs its primitive nothing: no registration, no cell, no resume
// and no futex wake by whoever ends it, and nothing else for the other
// waiters to contend with. bench/cqs barrier, threads on 2 CPUs, medians of
// five runs of std::barrier's time / spindle's: 4 parties 0.95 -> 0.98, 8
// parties 0.96 -> 1.06 (the OS's context switches dominate both); longer
// watches (16, 64 yields) measured the same within the noise.
inline constexpr unsigned queue_spins = 12;

inline constexpr unsigned queue_yields = 4;

namespace {

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
    // A worker whose fibers keep each other busy never reaches its loop,
    // where I/O is submitted and reaped: now and then (poll_io_due)
    // it looks at its engine here (relaxed: the owner's own store).
    if (io_engine* e = w->io.load(std::memory_order_relaxed)) [[unlikely]] {
        if (poll_io_due(w)) poll_io(w, e, true);
    }
    fiber_ctx* n = take_over(w, self);
    w->post = p;
    arch::switch_to(&self->ctx, n != nullptr ? &n->ctx : &w->loop_ctx);
    run_post(current_worker());
}

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
        wt->fiber->parked_on = wt;  // for debuggers (debug_layout.hpp)
        suspend_current(w, post_action{&finish_park, wt});
        wt->fiber->parked_on = nullptr;
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

void park_now(waiter* wt) noexcept {
    wt->fiber->parked_on = wt;  // for debuggers (debug_layout.hpp)
    suspend_current(current_worker(), post_action{&finish_park, wt});
    wt->fiber->parked_on = nullptr;
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
    if (policy == handoff::dispatch || f == nullptr || w == nullptr || w->current == nullptr || w->no_switch != 0)
        return false;
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
    self->parked_on = self_wt;  // for debuggers (debug_layout.hpp)
    arch::switch_to(&self->ctx, &f->ctx);
    run_post(current_worker());
    self->parked_on = nullptr;
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

}  // namespace spindle::detail
