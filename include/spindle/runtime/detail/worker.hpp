// spindle/runtime/detail/worker.hpp — fiber control blocks, workers, the
// ready ring. Internal: use spindle/runtime/fiber.hpp and scheduler.hpp.
//
// Picture of one worker:
//
//        inject_head (MPSC, any thread pushes; owner drains)
//            |
//            v
//       [f7]->[f6]->null          fibers woken or spawned from other threads
//
//       current
//          |
//          v
//    +--> [f1] <-> [f2] <-> [f3] <-> [f4] --+     ready ring: circular, doubly
//    +--------------------------------------+     linked, owner thread only
//
//       loop_ctx: the worker thread's own stack, running worker::run(). Entered
//       only when the ring is empty or a fiber finished.
//
// The running fiber is *in* the ring, at `current`. So:
//   yield           current = current->next, switch            O(1), no relinking
//   block           unlink current, switch to its successor     O(1)
//   make ready      insert before current (runs after every     O(1)
//                   fiber already ready: round-robin, FIFO)
// This is Photon's run queue, and what lets this_fiber::yield() be a handful
// of instructions plus the CACS switch (the CACS paper, Fig. 11).
//
// Invariants:
//   * The ring and `current` are touched only by the worker's own thread.
//   * A fiber is in exactly one of: the ring, some worker's inject list, a
//     waiter record (blocked), or finished.
//   * A fiber woken from another thread is pushed onto its *home* worker's
//     inject list. The home worker is the one that ran it when it blocked; it
//     is still busy running that fiber until the fiber's context is saved, and
//     it drains its inject list only at yield points and in its loop, never
//     between a fiber's "publish that I wait" and "switch away". So a woken
//     fiber is never resumed before it finished suspending.
//     (The multi-worker executor with stealing keeps this rule: stealing
//     takes only fibers that are already suspended.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>
#include <spindle/memory/stack.hpp>

namespace spindle {
class scheduler;
}

namespace spindle::detail {

struct worker;
struct scheduler_state;

// Sentinel stored in fiber_ctx::join_state once the fiber finished.
inline void* const join_done = reinterpret_cast<void*>(std::uintptr_t{1});

// Someone waiting for an event (today: a join). Lives on the waiter's stack.
struct waiter {
    struct fiber_ctx* fiber = nullptr;  // the waiting fiber, or null for an OS thread
    // Thread waiters sleep on this futex word: 0 waiting, 1 woken.
    // store(1, release) in wake() pairs with the acquire load in park().
    std::atomic<std::uint32_t> signaled{0};
};

// A fiber's control block. It lives at the top of the fiber's own stack, so a
// spawn costs one pooled stack and no heap allocation.
struct fiber_ctx {
    arch::context ctx;           // saved registers while suspended; first member
    fiber_ctx* next = nullptr;   // ready ring, owner worker only
    fiber_ctx* prev = nullptr;
    fiber_ctx* inject_next = nullptr;  // link in a worker's inject list
    worker* home = nullptr;      // the worker this fiber runs on
    std::uint64_t id = 0;        // 1, 2, 3, ... per process

    // Lifetime: one reference for the running body, one for the `fiber`
    // handle. The last one to drop it returns the stack. acq_rel on the
    // decrement: the dropper that frees must see every write of the other.
    std::atomic<std::uint32_t> refs{2};
    // null: running, nobody joining; join_done: finished; else the joiner's
    // waiter*. The finishing fiber exchanges in join_done (acq_rel); the joiner
    // CASes null -> waiter (acq_rel). Whoever comes second sees the other.
    std::atomic<void*> join_state{nullptr};
    std::exception_ptr error;    // written by the body before join_done is published

    void (*invoke)(void* callable) = nullptr;   // runs the body
    void (*destroy)(void* callable) = nullptr;  // destroys the stored callable
    void* callable = nullptr;
    bool callable_on_heap = false;
    stack_region stack;
};
static_assert(offsetof(fiber_ctx, ctx) == 0, "entry code casts the context to its fiber");

struct alignas(arch::cache_line) worker {
    // --- owner-thread state, read on every yield -------------------------
    fiber_ctx* current = nullptr;  // running fiber; null while the loop runs
    // MPSC list of fibers made ready by other threads. Push: seq_cst CAS
    // (its release half pairs with the acquire exchange in drain). A relaxed
    // load is enough to *notice* work: the drain re-reads it with acquire.
    std::atomic<fiber_ctx*> inject_head{nullptr};
    fiber_ctx* idle_ring = nullptr;  // ring being built while the loop runs
    fiber_ctx* exited = nullptr;     // finished fiber the loop must release
    arch::context loop_ctx;          // the worker thread's own stack
    scheduler_state* sched = nullptr;
    unsigned index = 0;

    // --- parking (eventcount) ---------------------------------------------
    // The worker reads `epoch`, sets `parked` (seq_cst exchange), re-checks
    // for work and futex-waits on `epoch`. A notifier publishes work (seq_cst
    // CAS), then bumps `epoch` and wakes if it sees `parked` (seq_cst load).
    // Their single total order makes at least one side see the other: no
    // lost wake-up, and no syscall while the worker is busy.
    alignas(arch::cache_line) std::atomic<std::uint32_t> epoch{0};
    std::atomic<bool> parked{false};
};

// The worker whose thread this is; null on other threads. initial-exec: one
// %fs-relative load, no TLS wrapper call. (A migrating fiber must re-read it
// after every switch; fibers do not migrate yet.)
extern __thread worker* tl_worker __attribute__((tls_model("initial-exec")));

// ---- ready ring (owner thread only) ---------------------------------------

SPINDLE_ALWAYS_INLINE void ring_insert_before(fiber_ctx* pos, fiber_ctx* f) noexcept {
    f->next = pos;
    f->prev = pos->prev;
    pos->prev->next = f;
    pos->prev = f;
}

SPINDLE_ALWAYS_INLINE void ring_unlink(fiber_ctx* f) noexcept {
    f->prev->next = f->next;
    f->next->prev = f->prev;
}

// Make `f` runnable on `w`, which must be this thread's worker.
SPINDLE_ALWAYS_INLINE void make_ready_local(worker* w, fiber_ctx* f) noexcept {
    if (w->current != nullptr) {
        ring_insert_before(w->current, f);
    } else if (w->idle_ring != nullptr) {
        ring_insert_before(w->idle_ring, f);
    } else {
        f->next = f->prev = f;
        w->idle_ring = f;
    }
}

// Out of line (src/runtime/scheduler.cpp).
void drain_inject(worker* w) noexcept;             // inject list -> ring
SPINDLE_SWITCH_FN void block_current(worker* w) noexcept;  // suspend the running fiber
void wake(waiter* wt) noexcept;                     // wake a fiber or thread waiter
void wake_fiber(fiber_ctx* f) noexcept;             // make a blocked fiber ready
void park_waiter(waiter* wt) noexcept;              // the caller waits until woken
void yield_thread() noexcept;                       // this_fiber::yield() off a fiber

}  // namespace spindle::detail
