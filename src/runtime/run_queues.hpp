// The executor's run queues: what the worker loop (worker_loop.cpp), the
// park and handoff code (handoff.cpp) and the fiber life cycle (fiber.cpp)
// share. Internal to src/runtime. The data structures and their invariants
// are drawn in include/spindle/runtime/detail/worker.hpp.
//
// Everything here is inline, as it was when the three files were one: the
// hot paths (a yield, a park, a CES unlock) inline these, and splitting the
// file must not add calls to them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <spindle/arch/fatal.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/detail/worker.hpp>

namespace spindle::detail {

struct scheduler_state {
    std::vector<std::unique_ptr<worker>> workers;
    std::vector<std::thread> threads;  // workers[0]'s thread is the caller's where caller_is_worker
    const void* owner = nullptr;  // the scheduler object, for messages
    bool caller_is_worker = false;  // options::caller_is_worker; written before the workers start
    // caller_is_worker: 0 before run(), 1 in it, 2 after. Its exchange
    // makes two run() calls see each other; spawn() reads it relaxed, to
    // catch a spawn after run() (a misuse, not a protocol: a spawn racing
    // the end of run() is caught or not).
    std::atomic<int> run_phase{0};
    std::size_t stack_size = default_stack_size;
    std::int64_t io_spin_ns = 0;  // options::io_spin; written before the workers start
    std::int64_t io_slice_ns = 0;  // options::io_slice; likewise
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

void wake_all_workers(scheduler_state* s) noexcept;

// A busy worker with an I/O engine submits and reaps every this many fiber
// suspensions or yields (Tokio's scheduler polls its driver every 61 tasks;
// Go's sysmon every 10 ms), or once per round (poll_io_due). A worker that
// runs out of fibers does it at once.
inline constexpr std::uint32_t io_poll_interval = 64;

// The owner's progress mark (worker::io_steps). relaxed load and store,
// not a read-modify-write: only the owner writes it; peers read a hint.
inline void note_io_step(worker* w) noexcept {
    w->io_steps.store(w->io_steps.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// At each poll that may enter the kernel (worker_loop.cpp): pause after a
// long unbroken run while a thread waits for a CPU (options::io_slice),
// and take the events of a peer whose thread has stopped
// (help_stalled_peer).
void busy_look(worker* w, io_engine* e) noexcept;
// /proc/loadavg, which busy_look reads, and the CPUs online it compares
// the runnable count with (worker_loop.cpp).
struct load_source {
    int fd;    // -1 where /proc/loadavg cannot be opened
    int cpus;  // get_nprocs()
};
const load_source& loadavg() noexcept;

// Poll the engine (make the completed fibers ready; with may_enter, also
// submit and collect what the kernel holds) and note how many fibers are
// ready after it: the round the next periodic poll waits for. Only a poll
// that may enter restarts the count: the loop's own polls do not enter
// (find_work), and a worker that never runs out of work -- say, a fiber
// that yields and sleeps a microsecond by turns -- would otherwise never
// reach a poll that does, and never see a completion the kernel holds back
// for its next io_uring_enter (DEFER_TASKRUN).
inline void poll_io(worker* w, io_engine* e, bool may_enter) noexcept {
    e->ops->poll(e, may_enter);
    note_io_step(w);
    if (may_enter) {
        w->io_ticks = 0;
        busy_look(w, e);
    }
    w->io_round = static_cast<std::uint32_t>(std::min<std::size_t>(w->deque.size_hint(), UINT32_MAX));
}

// A suspension or yield of a busy worker: is the periodic poll due? Every
// io_poll_interval of them, but not before the fibers made ready by the last
// poll have had their turn. The deque runs newest first: completions reaped
// mid-round would go on top and overtake the rest of the round, again and
// again -- with 1000 connections on one worker, a p99.9 round trip of
// 400 ms against a p50 of 0.2 ms. Waiting a round (each fiber of it
// suspends about once) serves every connection once per round, as an event
// loop that handles all its completions before it polls again does.
inline bool poll_io_due(worker* w) noexcept {
    note_io_step(w);
    return ++w->io_ticks >= std::max(io_poll_interval, w->io_round);
}

// Wake a worker that sleeps, or is about to: on its futex, or in its I/O
// engine's block().
inline void wake_worker(worker* w) noexcept {
    // acquire pairs with the owner's release store of the engine, made
    // before it ever parked with it.
    if (io_engine* e = w->io.load(std::memory_order_acquire)) e->ops->wake(e);
    else futex_wake(&w->epoch, 1);
}
void run_worker_thread(worker* w);

// Wake `w` if it is parked: claim it (parked true -> false), so two
// notifiers never both pay for a futex_wake of one worker.
inline bool claim_and_wake(worker* w) noexcept {
    // seq_cst load: the second half of the Dekker pair with park_worker()
    // (it stores parked, then re-checks the queues; we published work, then
    // read parked).
    if (!w->parked.load(std::memory_order_seq_cst)) return false;
    bool expected = true;
    if (!w->parked.compare_exchange_strong(expected, false, std::memory_order_seq_cst,
                                           std::memory_order_relaxed))
        return false;
    w->epoch.fetch_add(1, std::memory_order_seq_cst);  // futex key change, pairs with park_worker's load
    wake_worker(w);
    return true;
}

// Work became stealable: wake one parked worker, if any. Call right after
// the seq_cst publish of the work.
inline void notify_sleeper(scheduler_state* s, worker* self) noexcept {
    if (s->sleepers.load(std::memory_order_seq_cst) == 0) return;  // pairs with park_worker's RMW
    std::size_t n = s->workers.size();
    std::size_t start = self != nullptr ? self->index + 1 : 0;
    for (std::size_t i = 0; i < n; ++i) {
        worker* w = s->workers[(start + i) % n].get();
        if (w != self && claim_and_wake(w)) return;
    }
}

inline void inject_push(worker* w, fiber_ctx* f) noexcept {
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
inline void pinned_push(worker* w, fiber_ctx* f) noexcept {
    f->pinned_next = nullptr;
    if (w->pinned_tail != nullptr) w->pinned_tail->pinned_next = f; else w->pinned_head = f;
    w->pinned_tail = f;
}

inline fiber_ctx* pinned_pop(worker* w) noexcept {
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
inline fiber_ctx* pop_ready(worker* w) noexcept {
    if (w->pinned_head != nullptr) [[unlikely]]
        return pinned_pop(w);
    if ((++w->deque_picks & 7) == 0) {
        if (fiber_ctx* f = w->deque.steal()) return f;  // the owner may steal from itself
    }
    return w->deque.pop();
}

// Make `f` ready on this thread's worker `w`, where idle workers may steal it
// (unless it is pinned here).
inline void push_local(worker* w, fiber_ctx* f) noexcept {
    w->yield_check = 1;
    if (f->pinned) [[unlikely]] {
        pinned_push(w, f);  // f->home == w: callers send pinned fibers home
        return;
    }
    w->deque.push(f);  // its seq_cst store of bottom publishes f
    notify_sleeper(w->sched, w);
}

inline bool should_stop(scheduler_state* s) noexcept {
    // seq_cst pairs with the seq_cst store of `stopping` in ~scheduler and the
    // decrement in finish_fiber(): if the last fiber finishes before
    // `stopping` is set, this load of `live` sees 0; if after, the finisher
    // sees `stopping` and wakes every worker.
    return s->stopping.load(std::memory_order_seq_cst) &&
           s->live.load(std::memory_order_seq_cst) == 0;
}

// The inject list -> the deque (oldest first, so the owner's LIFO pop runs
// the newest and thieves take the oldest).
inline void drain_inject(worker* w) noexcept {
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

// `self` (w->current) leaves the ring: it blocks or finishes. Choose who
// runs next on this worker and put it in self's place; null: the loop.
// Order: the fiber an inline resume suspended for self; the deque (newest
// first, its data is warm), except every 16th pick, which prefers the ring
// so yielders are not starved by a stream of wake-ups; the ring; whatever
// other threads injected.
inline fiber_ctx* take_over(worker* w, fiber_ctx* self) noexcept {
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
    // The fiber to run after n, most likely: with many fibers its control
    // block is cold by now (the switch into it reads its saved context and
    // exception state on the first line, settle writes its home on the
    // second). Start both loads while n runs. Only prefetched: it may be
    // stolen and gone before this worker comes back.
    if (const fiber_ctx* m = w->deque.peek_hint()) {
        __builtin_prefetch(m, 1);
        __builtin_prefetch(reinterpret_cast<const char*>(m) + arch::cache_line, 1);
    }
    return n;
}

inline void make_ready(fiber_ctx* f) noexcept {
    worker* w = current_worker();
    if (w != nullptr && f->home != nullptr && w->sched == f->home->sched && (!f->pinned || f->home == w))
        push_local(w, f);
    else
        inject_push(f->home, f);
}


}  // namespace spindle::detail
