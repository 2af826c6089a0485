// spindle/runtime/detail/worker.hpp — fiber control blocks, workers, run
// queues, parking. Internal: use spindle/runtime/fiber.hpp and scheduler.hpp.
//
// Picture of one worker:
//
//        inject_head (MPSC: other threads push fibers they made ready)
//            |
//            v
//       [f7]->[f6]->null
//
//        deque (Chase–Lev: the owner pushes/pops the bottom, idle workers
//        steal the top). Fibers made ready here — spawned, woken, handed off
//        by a CES unlock — wait here, where an idle worker can take them.
//
//       current
//          |
//          v
//    +--> [f1] <-> [f2] <-> [f3] --+     ready ring: circular, doubly linked,
//    +-----------------------------+     owner thread only: the running fiber
//                                        and those that yielded
//
//       loop_ctx: the worker thread's own stack, running the worker loop:
//       entered when there is nothing to run; drains, steals, parks.
//
// The running fiber is *in* the ring, at `current`. So:
//   yield       current = current->next, switch          O(1), no relinking
//   block       unlink current, switch to the next        O(1)
// A fiber taken from the deque (or stolen) joins the ring when it runs.
// Pinned fibers (fiber_options::pinned) that become ready wait in the
// owner-only pinned list instead of the deque, so no thief can take them.
// Choosing the next fiber at a block or a yield prefers the deque (most
// recently readied first: its data is warm); a yield with an empty deque and
// inject list is the Photon fast path of the CACS paper (Fig. 11).
//
// Post-switch actions. A fiber that suspends must not be made visible to
// other workers (queued, stolen, woken) before its registers are saved, and
// they are saved only by the switch itself. So the suspending side leaves
// `post` on its worker and whoever lands next on that worker — a fiber
// returning from a switch, a fiber starting, or the loop — runs it first
// (run_post). Every landing site calls run_post.
//
// Parking (waiter, park, unpark, the handoff decision): runtime/detail/park.hpp.
//
// Fibers migrate: a fiber may resume on another worker (stealing, CES). Code
// that runs after a switch re-reads current_worker(), which reads the thread
// pointer afresh (arch/tls.hpp): never keep a worker*, or the address of any
// thread-local, across a switch.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stop_token>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>
#include <spindle/arch/tls.hpp>
#include <spindle/memory/stack.hpp>
#include <spindle/runtime/detail/deque.hpp>
#include <spindle/runtime/detail/park.hpp>

namespace spindle {
class scheduler;
}

namespace spindle::detail {

struct worker;
struct scheduler_state;

// A worker's I/O engine (src/io: an io_uring ring or an epoll set), created
// by the worker's own thread the first time a fiber on it does I/O. The
// runtime sees only these calls:
//   wake     any thread: end the owner's block() (claim_and_wake, shutdown),
//            and show in poll_wanted() while the owner watches
//   block    owner, idle: submit what is queued and sleep until a
//            completion, an event or a wake()
//   poll     owner: make ready the fibers whose operations completed;
//            `may_enter` allows a system call to look (epoll_wait with no
//            timeout); false only reads what is already known
//   busy     owner: operations queued or in flight, so the loop sleeps in
//            block() at once instead of spinning
//   destroy  after the worker thread ended
//   sleep    the running fiber sleeps until a time, on the engine's own
//            timers (this_fiber::sleep_until); false if stopped first.
//            Null where the engine has none (epoll: the timer thread)
//   flush    owner, idle: submit what is queued without waiting, before
//            the worker watches the engine (scheduler::options::io_spin).
//            False when a watch would be wasted: no operation in flight
//            (only sleepers, whose deadlines block() sleeps until), or a
//            sleeper due before `horizon` (its wake-up would end the
//            watch, which would only burn the time until then)
//   poll_wanted
//            owner: whether a poll that may enter the kernel has work to
//            do -- completions to reap, task work that makes them, or
//            submissions queued since (the wake descriptor's read re-armed
//            by a reap, a cancel) -- read from memory the kernel shares,
//            with no system call
//            flush and poll_wanted are both set or both null (null: the
//            engine cannot be watched)
//   help     another worker of the scheduler: deliver what waits in
//            `peer`, a worker's engine of the same kind, making its fibers
//            ready on the caller; true if any. Safe at the same time as the
//            owner's own poll or block. While a worker thread is preempted
//            (more threads than CPUs) or stuck in a long computation, the
//            fibers whose events wait in its engine would otherwise wait
//            for it (help_stalled_peer). Null where only the owner can
//            reap (io_uring: a completion is the submitting thread's task
//            work)
//   add_timer
//            owner: keep a timed wait's deadline (see the field)
struct io_engine;
struct local_timer;
struct io_engine_ops {
    void (*wake)(io_engine*) noexcept;
    void (*block)(io_engine*) noexcept;
    void (*poll)(io_engine*, bool may_enter) noexcept;
    bool (*busy)(io_engine*) noexcept;
    void (*destroy)(io_engine*) noexcept;
    bool (*sleep)(io_engine*, std::chrono::steady_clock::time_point) noexcept;
    bool (*flush)(io_engine*, std::chrono::steady_clock::time_point horizon) noexcept;
    bool (*poll_wanted)(io_engine*) noexcept;
    bool (*help)(io_engine* peer) noexcept;
    // Puts a timed wait's deadline on the owner's timer heap (timer.hpp,
    // local_timer). Null: the engine keeps no timers.
    void (*add_timer)(io_engine*, local_timer*) noexcept;
};
struct io_engine {
    const io_engine_ops* ops;
};

// How long a worker whose fibers all wait for I/O watches its engine before
// it sleeps (scheduler::options::io_spin, `max` below), learned from its idle
// spells. A spell runs from running out of fibers to finding one, across
// any wake-up that found nothing. The worker first submits and looks once
// (what completes as it is submitted, a send with room, ends the spell
// there and says nothing about waits), then watches for `window` ns; a
// spell the watch ends leaves the window as it is. With a sleeping fiber
// due within `max` no spell starts: the sleeper's wake-up would end it,
// and a watch would only burn the time until then. A spell that ended in a
// sleep is reported to slept(): while such spells are short on average, no
// longer than `max`, a watch that long would have caught them, so the
// window becomes `max`; while they are longer it halves, down to nothing
// within a few spells, so a lightly loaded worker soon sleeps at once
// again. The average (the newest spell weighs 1/4), not the last spell,
// decides, so one short sleep among long ones does not bring the watch
// back.
struct io_watch {
    std::int64_t window = 0;   // ns the next watch lasts, 0..max
    std::int64_t gap_avg = 0;  // ns, over the spells that ended in a sleep

    void slept(std::int64_t gap, std::int64_t max) noexcept {
        gap_avg += (gap - gap_avg) / 4;
        if (gap_avg <= max) window = max;
        else if ((window /= 2) < 1000) window = 0;  // under 1 us: not worth a look
    }
};

// Sentinel stored in fiber_ctx::join_state once the fiber finished.
inline void* const join_done = reinterpret_cast<void*>(std::uintptr_t{1});

// A post-switch action (see above).
struct post_action {
    void (*fn)(void*) = nullptr;
    void* arg = nullptr;
};

// See fiber_ctx::relay.
struct stop_relay {
    void (*destroy)(stop_relay* self) noexcept;
};

// A fiber's control block. It lives at the top of the fiber's own stack, so a
// spawn costs one pooled stack and no heap allocation. Aligned to a cache
// line so that the fields a switch and a wait touch (the saved registers,
// the ready ring's links, the relay word) share its first line.
struct alignas(arch::cache_line) fiber_ctx {
    arch::context ctx;           // saved registers while suspended; first member
    fiber_ctx* next = nullptr;   // ready ring, owner worker only
    fiber_ctx* prev = nullptr;
    // The stop relay's word (src/io/stop_relay.cpp draws it): the target of
    // the cancellable wait in progress and two flags. Each wait of the
    // fiber fetch_ors its target in and fetch_ands it out; the relay's one
    // stop callback fetch_ors the flags in (acq_rel, all of them: each
    // read-modify-write pairs with the others). Here, beside the fields
    // every switch touches, rather than in the relay's own allocation: in
    // a server with a thousand fibers that allocation is cold at every
    // wait, a cache miss before the wait and another after it.
    std::atomic<std::uintptr_t> stop_word{0};
    // Carries stop requests on its own token (`stop`, below) to whatever the
    // fiber waits for, through stop_word, with one std::stop_callback for the
    // fiber's life instead of one per wait: the I/O layer makes it the first
    // time the fiber waits cancellably (src/io/stop_relay.cpp); it is
    // destroyed, through its own function, as the body returns. Touched only
    // by the fiber itself.
    struct stop_relay* relay = nullptr;
    fiber_ctx* inject_next = nullptr;  // link in a worker's inject list
    // The fiber an inline_resume handoff suspended to run this one: it runs
    // again when this one next suspends. Owner worker only.
    fiber_ctx* resumer = nullptr;
    worker* home = nullptr;      // the worker that last ran it (remote wakes go there)
    // Link in its worker's pinned list (owner worker only).
    fiber_ctx* pinned_next = nullptr;
    std::uint64_t id = 0;        // 1, 2, 3, ... per process
    // Never leaves `home` (fiber_options::pinned): not stolen, not moved by
    // a CES handoff, woken through its home worker. Set before the fiber is
    // published, then read-only.
    bool pinned = false;
    // Its fiber_local values (runtime/fiber_local.hpp); created on first use,
    // destroyed as the body returns. Touched only by the fiber itself.
    struct local_table* locals = nullptr;
    // The waiter it is parked on while inside park(); null otherwise.
    // Written by the fiber itself, read only by a debugger with the process
    // stopped (debug_layout.hpp), so a plain field.
    waiter* parked_on = nullptr;

    // Lifetime: one reference for the running body, one for the `fiber`
    // handle. The last one to drop it returns the stack. acq_rel on the
    // decrement: the dropper that frees must see every write of the other.
    std::atomic<std::uint32_t> refs{2};
    // null: running, nobody joining; join_done: finished; else the joiner's
    // waiter*. The finishing fiber exchanges in join_done (acq_rel); the joiner
    // CASes null -> waiter (acq_rel). Whoever comes second sees the other.
    std::atomic<void*> join_state{nullptr};
    std::exception_ptr error;    // written by the body before join_done is published
    std::stop_source stop;       // fiber::request_stop(), this_fiber::get_stop_token()

    void (*invoke)(void* callable) = nullptr;   // runs the body
    void (*destroy)(void* callable) = nullptr;  // destroys the stored callable
    void* callable = nullptr;
    bool callable_on_heap = false;
    stack_region stack;
};
static_assert(offsetof(fiber_ctx, ctx) == 0, "entry code casts the context to its fiber");
#if !SPINDLE_ASAN && !SPINDLE_TSAN
static_assert(offsetof(fiber_ctx, stop_word) < arch::cache_line, "the relay word shares the first line");
#endif

struct alignas(arch::cache_line) worker {
    // --- owner-thread state, read on every yield -------------------------
    fiber_ctx* current = nullptr;  // running fiber; null while the loop runs
    // MPSC list of fibers made ready by other threads. Push: seq_cst CAS
    // (its release half pairs with the acquire exchange in drain). A relaxed
    // load is enough to *notice* work: the drain re-reads it with acquire.
    std::atomic<fiber_ctx*> inject_head{nullptr};
    // Nonzero sends this_fiber::yield() to its slow path: set when the owner
    // pushed to its deque or ran an inline resume, or queued I/O (the slow
    // path then looks at the engine); cleared by the slow path.
    std::uint32_t yield_check = 0;
    std::uint32_t picks = 0;        // counts deque picks, for fairness to the ring
    std::uint32_t deque_picks = 0;  // every 8th takes the deque's oldest (pop_ready)
    // Nonzero while the owner runs a timed wait's deadline action
    // (local_timer_fire), which may hand a primitive to a waiter: that
    // handoff must not switch fibers (can_switch_into), for the action may
    // run inside a suspension or a yield, as the timer thread's never did.
    std::uint32_t no_switch = 0;
    // Ready pinned fibers (FIFO, owner only): they never enter the deque,
    // where a thief could take them.
    fiber_ctx* pinned_head = nullptr;
    fiber_ctx* pinned_tail = nullptr;
    post_action post;               // see "Post-switch actions"
    arch::context loop_ctx;          // the worker thread's own stack
    scheduler_state* sched = nullptr;
    unsigned index = 0;
    std::uint64_t rng = 0;           // victim selection, owner only

    ws_deque<fiber_ctx> deque;

    // --- parking (eventcount) ---------------------------------------------
    // A worker with nothing to do sets `parked` (seq_cst), counts itself in
    // the scheduler's `sleepers` (seq_cst RMW), re-checks every queue, and
    // futex-waits on `epoch`. A notifier publishes work (seq_cst), then
    // loads `sleepers` (seq_cst); if nonzero it claims a parked worker by
    // CASing its `parked` true -> false and bumps and wakes its `epoch`.
    // Their single total order makes at least one side see the other: no
    // lost wake-up, and no syscall while every worker is busy.
    alignas(arch::cache_line) std::atomic<std::uint32_t> epoch{0};
    std::atomic<bool> parked{false};

    // --- I/O (see io_engine) ------------------------------------------------
    // Stored once by the owner thread (release) before it parks with it;
    // notifiers load it (acquire) after claiming `parked`, which the owner
    // stored after this, so a claimed worker's engine is always seen.
    std::atomic<io_engine*> io{nullptr};
    // What follows the owner writes at every suspension: a line of its
    // own, so that the claimers' CAS of `parked` above does not pay for it.
    alignas(arch::cache_line) std::uint32_t io_ticks = 0;  // owner: suspensions since the last poll
    std::uint32_t io_round = 0;  // owner: fibers ready after the last poll (poll_io)
    io_watch watch;  // owner
    // Progress with its engine: bumped by the owner at each poll, at each
    // suspension that checks whether a poll is due, and when it wakes from
    // its park. A peer that sees it stand still for a while, with the
    // owner awake, knows the owner's thread is preempted or stuck in a
    // long computation (help_stalled_peer). relaxed both ways: a hint that
    // orders nothing.
    std::atomic<std::uint32_t> io_steps{0};
    // Owner: the stall watch over its peers (help_stalled_peer): each
    // peer's io_steps at the last look (indexed by worker; new[]-ed by the
    // scheduler before the threads start, freed by ~worker), and when that
    // look was. A plain pointer, not a unique_ptr, which would make the
    // worker non-standard-layout for the debugger's offsetof table
    // (debug_layout.cpp).
    std::uint32_t* stall_seen = nullptr;
    std::chrono::steady_clock::time_point stall_since{};
    // Owner: when the unbroken run that options::io_slice measures began:
    // its thread woke from its park, yielded in a watch, or reached the end
    // of the last slice (checked, and paused if a thread waited; busy_look).
    std::chrono::steady_clock::time_point run_since{};

    worker() = default;
    worker(const worker&) = delete;
    worker& operator=(const worker&) = delete;
    ~worker() { delete[] stall_seen; }
};

// The worker whose thread this is; null on other threads. The variable
// (spindle_tl_worker, defined in src/runtime/worker_loop.cpp) is not declared
// to C++ at all: it is reached only through current_worker() and
// set_current_worker(), which read the thread pointer afresh at each call
// (arch/tls.hpp). Fibers migrate, so code re-reads it after every switch, and
// a compiler-computed address of a thread-local would be the address on the
// thread the fiber started on.
SPINDLE_ALWAYS_INLINE worker* current_worker() noexcept {
    return SPINDLE_FRESH_TLS_LOAD(worker*, "spindle_tl_worker");
}
// Only the worker loop's thread sets it, before and after it runs fibers.
SPINDLE_ALWAYS_INLINE void set_current_worker(worker* w) noexcept {
    *SPINDLE_FRESH_TLS_ADDRESS(worker*, "spindle_tl_worker") = w;
}

// ---- ready ring (owner thread only) ---------------------------------------

SPINDLE_ALWAYS_INLINE void ring_insert_after(fiber_ctx* pos, fiber_ctx* f) noexcept {
    f->prev = pos;
    f->next = pos->next;
    pos->next->prev = f;
    pos->next = f;
}

SPINDLE_ALWAYS_INLINE void ring_unlink(fiber_ctx* f) noexcept {
    f->prev->next = f->next;
    f->next->prev = f->prev;
}

// `f` takes `old`'s place in the ring (old was alone: f is alone).
SPINDLE_ALWAYS_INLINE void ring_replace(fiber_ctx* old, fiber_ctx* f) noexcept {
    if (old->next == old) {
        f->next = f->prev = f;
    } else {
        f->next = old->next;
        f->prev = old->prev;
        old->prev->next = f;
        old->next->prev = f;
    }
}

// Out of line (src/runtime/worker_loop.cpp).
SPINDLE_NOINLINE void run_post_slow(worker* w) noexcept;
SPINDLE_ALWAYS_INLINE void run_post(worker* w) noexcept {
    if (w->post.fn != nullptr) [[unlikely]]
        run_post_slow(w);
}
SPINDLE_SWITCH_FN void yield_slow(worker* w) noexcept;   // this_fiber::yield() with work queued
void yield_thread() noexcept;                           // this_fiber::yield() off a fiber

}  // namespace spindle::detail
