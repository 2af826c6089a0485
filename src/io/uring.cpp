// The io_uring backend: one ring per worker, owned by the worker's thread.
//
// A fiber's operation is prepared into the ring of the worker it runs on
// (not yet submitted) and the fiber parks at once (park_now). The worker
// submits everything queued when it runs out of fibers -- one
// io_uring_enter submits the batch and sleeps for completions -- or, while
// busy, every io_poll_interval suspensions. Each completion carries its
// operation's address (user_data); reaping it stores the result and
// unparks the fiber, which then runs wherever it is made ready.
//
//   user_data   meaning
//   tag_ignore  a linked timeout's or a cancellation's own completion
//   tag_wake    the read of the wake eventfd: someone called wake()
//   uring_op*   a fiber's operation
//
// Deadlines are linked timeouts (IORING_OP_LINK_TIMEOUT, absolute, on
// CLOCK_MONOTONIC = steady_clock). A stop request cannot touch the ring
// from its thread (one issuer per ring): its callback marks the operation,
// counts a request on the engine and wakes the worker, which submits an
// IORING_OP_ASYNC_CANCEL for each marked operation in its cancellable
// list. Either way the fiber stays parked until its operation's own
// completion: the kernel has then let go of its buffer.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stop_token>
#include <vector>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/detail/timer.hpp>
#include <spindle/runtime/fiber.hpp>

#include "io_internal.hpp"
#include "timer_heap.hpp"

namespace spindle::io::detail {

namespace {

constexpr std::uint64_t tag_ignore = 0;
constexpr std::uint64_t tag_wake = 1;
constexpr unsigned ring_entries = 256;
constexpr unsigned cq_entries = 4096;

struct uring_op final : cancel_target {
    waiter wt;
    struct uring_engine* engine = nullptr;  // the ring it went to (engines live as long as the scheduler)
    int res = 0;
    // Set by a stop callback on any thread (release), read by the owner
    // when it looks for cancellations and by the fiber after it wakes
    // (acquire).
    std::atomic<bool> stop_requested{false};
    // Owner worker only:
    bool cancel_sent = false;
    bool listed = false;  // in the engine's cancellable list
    uring_op* next = nullptr;
    uring_op* prev = nullptr;
    __kernel_timespec ts{};  // the linked timeout's deadline (read at submission)
};

struct uring_engine : spindle::detail::io_engine {
    io_uring ring{};
    int wake_fd = -1;
    std::uint64_t wake_buf = 0;
    bool wake_armed = false;
    unsigned in_flight = 0;  // fiber operations submitted or queued, not reaped
    uring_op* cancellable = nullptr;  // operations with a stop token (owner only)
    // Stop requests not yet looked at: any thread increments (release,
    // after marking its operation); the owner exchanges it to 0 (acquire)
    // and then sees every marked operation.
    std::atomic<std::uint32_t> cancel_requests{0};
    // Sleeping fibers (this_fiber::sleep_until) and the deadlines of timed
    // waits (owner only; timer_heap.hpp). block() sleeps no longer than the
    // earliest: one wake-up for a burst of equal deadlines, where one
    // kernel timeout per sleep cost 12x more CPU (see op_sleep).
    timer_heap timers;
    // reap()'s waiters to unpark, in completion order (owner only;
    // capacity cq_entries, reserved at creation: reap never allocates).
    std::vector<waiter*> reaped;
};

// Makes room for n SQEs (submitting what is queued if need be).
void reserve(uring_engine* e, unsigned n) noexcept;

void arm_wake(uring_engine* e) noexcept {
    reserve(e, 1);
    io_uring_sqe* s = io_uring_get_sqe(&e->ring);
    io_uring_prep_read(s, e->wake_fd, &e->wake_buf, sizeof e->wake_buf, 0);
    io_uring_sqe_set_data64(s, tag_wake);
    e->wake_armed = true;
}

void list_remove(uring_engine* e, uring_op* o) noexcept {
    if (o->prev != nullptr) o->prev->next = o->next; else e->cancellable = o->next;
    if (o->next != nullptr) o->next->prev = o->prev;
    o->listed = false;
}

// Unparks what reap() collected, last completion first: the worker's
// deque runs newest first, so the fibers then run in completion order.
// Pushed in completion order they ran last-first: a connection whose reply
// completed early in a round waited for the whole round behind the later
// ones, and the next round's order reversed again -- a p99 at 1000
// connections of 2.3x the p50, where an event loop that serves its events
// in order has 1.6x.
void unpark_reaped(uring_engine* e) noexcept {
    for (std::size_t i = e->reaped.size(); i-- > 0;) {
        // unpark reads the fiber's control block (make_ready: its home and
        // whether it is pinned, on its second line); with many connections
        // that is a cache miss, so start the next one's load now.
        // reaped[i - 1] is still parked (its waiter's line came in with
        // reap), and a prefetch never faults.
        if (i > 0)
            __builtin_prefetch(reinterpret_cast<const char*>(e->reaped[i - 1]->fiber) + spindle::arch::cache_line, 1);
        spindle::detail::unpark(e->reaped[i]);  // its operation may be gone from here on
    }
    e->reaped.clear();
}

// Deliver completions (owner only).
void reap(uring_engine* e) noexcept {
    // Each operation lives on its parked fiber's stack: with many
    // connections a cache miss apiece. Start the load of the operation two
    // completions ahead (user_data is its address, or a tag, and a prefetch
    // of any address is harmless).
    const unsigned mask = e->ring.cq.ring_mask;
    auto ahead = [&](unsigned h) noexcept {
        std::uint64_t ud = e->ring.cq.cqes[io_uring_cqe_index(&e->ring, h, mask)].user_data;
        if (ud > tag_wake) __builtin_prefetch(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(ud)), 1);
    };
    const unsigned ready = io_uring_cq_ready(&e->ring);  // (acquire load of the tail, as the loop's)
    unsigned head = *e->ring.cq.khead;  // (only this thread moves the head)
    if (ready > 1) ahead(head + 1);
    unsigned n = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&e->ring, head, cqe) {
        if (n + 2 < ready) ahead(head + 2);
        ++n;
        std::uint64_t ud = cqe->user_data;
        if (ud == tag_ignore) continue;
        if (ud == tag_wake) {
            e->wake_armed = false;
            continue;
        }
        auto* o = reinterpret_cast<uring_op*>(static_cast<std::uintptr_t>(ud));
        o->res = cqe->res;
        if (o->listed) list_remove(e, o);
        --e->in_flight;
        if (e->reaped.size() == e->reaped.capacity()) unpark_reaped(e);  // (more than a full CQ: overflow)
        e->reaped.push_back(&o->wt);
    }
    io_uring_cq_advance(&e->ring, n);
    unpark_reaped(e);
    if (!e->wake_armed) arm_wake(e);
}

void reserve(uring_engine* e, unsigned n) noexcept {
    while (io_uring_sq_space_left(&e->ring) < n) {
        int r = io_uring_submit(&e->ring);
        if (r == -EBUSY || r == -EAGAIN) {
            // Completions must be taken first (the kernel holds an overflow).
            io_uring_get_events(&e->ring);
            reap(e);
        } else if (r < 0 && r != -EINTR) {
            spindle::detail::fatal("io_uring ring %p: submit failed: %s", static_cast<void*>(&e->ring),
                                   std::strerror(-r));
        }
    }
}

void process_cancels(uring_engine* e) noexcept {
    // relaxed look first; acquire exchange pairs with the callbacks' release
    // increments, so every operation marked before them is seen marked.
    if (e->cancel_requests.load(std::memory_order_relaxed) == 0) return;
    e->cancel_requests.exchange(0, std::memory_order_acquire);
    for (uring_op* o = e->cancellable; o != nullptr;) {
        if (o->cancel_sent || !o->stop_requested.load(std::memory_order_acquire)) {
            o = o->next;
            continue;
        }
        if (io_uring_sq_space_left(&e->ring) == 0) {
            // Making room may reap, and a reaped operation's fiber may run
            // on another worker at once: o and its neighbours may be gone.
            // Start over; what was sent is marked cancel_sent.
            reserve(e, 1);
            o = e->cancellable;
            continue;
        }
        io_uring_sqe* s = io_uring_get_sqe(&e->ring);
        io_uring_prep_cancel64(s, reinterpret_cast<std::uintptr_t>(o), 0);
        io_uring_sqe_set_data64(s, tag_ignore);
        o->cancel_sent = true;
        o = o->next;
    }
    e->timers.wake_stopped();
}

uring_engine* as_uring(spindle::detail::io_engine* e) noexcept { return static_cast<uring_engine*>(e); }

void op_wake(spindle::detail::io_engine* e) noexcept {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(as_uring(e)->wake_fd, &one, sizeof one);
}

void op_block(spindle::detail::io_engine* base) noexcept {
    uring_engine* e = as_uring(base);
    process_cancels(e);
    if (!e->wake_armed) arm_wake(e);
    int r;
    if (e->timers.empty()) {
        r = io_uring_submit_and_wait(&e->ring, 1);
    } else {
        auto left = e->timers.earliest() - steady::now();
        if (left <= steady::duration::zero()) return;  // the loop fires it
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        __kernel_timespec ts{ns / 1000000000, ns % 1000000000};
        io_uring_cqe* cqe = nullptr;
        r = io_uring_submit_and_wait_timeout(&e->ring, &cqe, 1, &ts, nullptr);
    }
    (void)r;  // -EINTR, -EBUSY, -ETIME: the loop looks again
}

void op_poll(spindle::detail::io_engine* base, bool may_enter) noexcept {
    uring_engine* e = as_uring(base);
    process_cancels(e);
    if (may_enter && (io_uring_sq_ready(&e->ring) != 0 || io_uring_cq_has_overflow(&e->ring) ||
                      (IO_URING_READ_ONCE(*e->ring.sq.kflags) & IORING_SQ_TASKRUN) != 0))
        io_uring_submit_and_get_events(&e->ring);
    if (io_uring_cq_ready(&e->ring) != 0) reap(e);
    e->timers.fire();
}

bool op_busy(spindle::detail::io_engine* base) noexcept {
    uring_engine* e = as_uring(base);
    return e->in_flight != 0 || !e->timers.empty();  // operations, or sleepers to fire
}

void op_destroy(spindle::detail::io_engine* base) noexcept {
    uring_engine* e = as_uring(base);
    // No fiber is left, so neither is a timed wait: what remains of theirs
    // was cancelled.
    e->timers.sweep();
    io_uring_queue_exit(&e->ring);
    ::close(e->wake_fd);
    delete e;
}

bool op_sleep(spindle::detail::io_engine*, time_point t) noexcept;

void op_add_timer(spindle::detail::io_engine* base, spindle::detail::local_timer* lt) noexcept {
    as_uring(base)->timers.add(lt);
}

bool op_flush(spindle::detail::io_engine* base, time_point horizon) noexcept {
    uring_engine* e = as_uring(base);
    if (e->in_flight == 0) return false;
    if (e->timers.due_before(horizon)) return false;
    process_cancels(e);
    if (!e->wake_armed) arm_wake(e);
    if (io_uring_sq_ready(&e->ring) != 0) io_uring_submit(&e->ring);
    return true;
}

bool op_poll_wanted(spindle::detail::io_engine* base) noexcept {
    uring_engine* e = as_uring(base);
    // With DEFER_TASKRUN a finished operation first shows as
    // IORING_SQ_TASKRUN and becomes a CQE only in the next io_uring_enter
    // (with COOP_TASKRUN, at the next entry into the kernel). Queued
    // submissions count too: a reap re-arms the wake descriptor's read and
    // find_work queues cancels, and until they are submitted no wake-up
    // or cancel can complete.
    return io_uring_cq_ready(&e->ring) != 0 || io_uring_cq_has_overflow(&e->ring) ||
           (IO_URING_READ_ONCE(*e->ring.sq.kflags) & IORING_SQ_TASKRUN) != 0 || io_uring_sq_ready(&e->ring) != 0;
}

const spindle::detail::io_engine_ops uring_ops = {&op_wake,    &op_block,   &op_poll,  &op_busy,
                                                  &op_destroy, &op_sleep,   &op_flush, &op_poll_wanted,
                                                  nullptr,     &op_add_timer};

uring_engine* engine_of(worker* w) noexcept {
    // relaxed: only this thread (the owner) stores it.
    auto* cur = w->io.load(std::memory_order_relaxed);
    if (cur != nullptr) return as_uring(cur);
    auto* e = new uring_engine;
    e->ops = &uring_ops;
    // Completions run as task work on the owner thread. By default the
    // kernel interrupts the thread for each (an IPI when it runs user code);
    // deferred (6.1+) or cooperative (5.19+) task running lets it go on and
    // do the work at its next io_uring_enter, which the loop makes anyway:
    // 128k -> 230k requests/s in examples/http_server under wrk, 2 CPUs.
    // IORING_SQ_TASKRUN then says when work waits (op_poll).
    constexpr unsigned tries[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
        0,
    };
    int r = -EINVAL;
    for (unsigned flags : tries) {
        io_uring_params p{};
        p.flags = IORING_SETUP_CQSIZE | flags;
        p.cq_entries = cq_entries;
        r = io_uring_queue_init_params(ring_entries, &e->ring, &p);
        if (r != -EINVAL) break;
    }
    if (r < 0) spindle::detail::fatal("worker %u: io_uring_setup failed: %s", w->index, std::strerror(-r));
    e->reaped.reserve(cq_entries);
    e->wake_fd = ::eventfd(0, EFD_CLOEXEC);
    if (e->wake_fd < 0) spindle::detail::fatal("worker %u: eventfd failed: %s", w->index, std::strerror(errno));
    arm_wake(e);
    // release pairs with wake_worker()'s acquire load (run_queues.hpp).
    w->io.store(e, std::memory_order_release);
    return e;
}

__kernel_timespec to_timespec(time_point t) noexcept {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    if (ns < 0) ns = 0;
    return {ns / 1000000000, ns % 1000000000};
}

void prep_poll(io_uring_sqe* s, op_spec& op) noexcept {
    io_uring_prep_poll_add(s, op.fd, static_cast<unsigned>(op.poll_events));
}

// The park of an operation with a stop token of the call's own, out of
// line: the usual one (the fiber's own token) keeps the stop callback off
// its frame, the stack lines that every resume touches (epoll.cpp,
// park_limited).
SPINDLE_NOINLINE void park_with_callback(uring_op& o, const std::stop_token& stop) noexcept {
    auto request = [&o]() noexcept { o.request(&o); };
    std::stop_callback<decltype(request)> cb(stop, request);
    spindle::detail::park_now(&o.wt);
}  // (~stop_callback waits for a request running on another thread)

// Queue `op` on the calling fiber's worker's ring and park until its
// completion.
int submit_and_park(op_spec& op, void (*prep)(io_uring_sqe*, op_spec&), time_point deadline,
                    const std::stop_token* stop) noexcept {
    worker* w = fiber_worker();
    uring_engine* e = engine_of(w);
    const bool timed = deadline != time_point::max();
    if (timed && steady::now() >= deadline) return -ETIMEDOUT;
    uring_op o;
    o.wt.fiber = w->current;
    reserve(e, timed ? 2 : 1);  // a linked pair must go in one submission
    io_uring_sqe* s = io_uring_get_sqe(&e->ring);
    prep(s, op);
    io_uring_sqe_set_data(s, &o);
    if (timed) {
        s->flags |= IOSQE_IO_LINK;
        o.ts = to_timespec(deadline);
        io_uring_sqe* t = io_uring_get_sqe(&e->ring);
        io_uring_prep_link_timeout(t, &o.ts, IORING_TIMEOUT_ABS);
        io_uring_sqe_set_data64(t, tag_ignore);
    }
    ++e->in_flight;
    w->yield_check = 1;  // yields look at the engine while this is in flight (yield_slow)
    o.engine = e;
    o.request = [](cancel_target* t) noexcept {
        auto* op = static_cast<uring_op*>(t);
        op->stop_requested.store(true, std::memory_order_release);  // before the count: see cancel_requests
        op->engine->cancel_requests.fetch_add(1, std::memory_order_release);
        op_wake(op->engine);
    };
    if (stop == nullptr || stop->stop_possible()) {
        o.next = e->cancellable;
        if (o.next != nullptr) o.next->prev = &o;
        e->cancellable = &o;
        o.listed = true;
    }
    // (We may run on another worker after the park: neither w nor e is ours
    // any more; the owner unlinked o before it unparked us.)
    if (stop == nullptr) {
        own_stop own(&o);  // (its destructor waits for a request running on another thread)
        spindle::detail::park_now(&o.wt);
    } else if (stop->stop_possible()) {
        park_with_callback(o, *stop);
    } else {
        spindle::detail::park_now(&o.wt);
    }
    if (o.res == -ECANCELED || o.res == -EINTR) {
        if (o.stop_requested.load(std::memory_order_acquire)) return -ECANCELED;
        if (timed) return -ETIMEDOUT;
    }
    return o.res;
}

// this_fiber::sleep_until on the worker's own heap (see uring_engine::
// timers), woken early by the fiber's stop token. Process CPU per sleep of
// 50 us, 1 worker, the three in one program (bench/io's sleep workload
// measures the first and the last; the middle one is how an earlier version
// slept):
//                           timer thread   one IORING_OP_TIMEOUT   heap
//   1000 fibers at once     0.35-0.52 us   3.9-4.2 us              0.22-0.25 us
//   10 fibers               5.8-6.0 us     2.3 us                  2.0-2.1 us
// A kernel timeout per sleep costs a timer and a completion each; the
// timer thread one wake-up per burst but a cross-thread unpark per fiber;
// the heap one wake-up per burst and local unparks.
bool op_sleep(spindle::detail::io_engine*, time_point t) noexcept {
    worker* w = fiber_worker();
    uring_engine* e = engine_of(w);
    return sleep_on(e->timers, w, t, e->cancel_requests, &op_wake, e);
}

// Readiness on the ring (a poll) for an operation that said EAGAIN; out
// of line, so that its copy of the operation stays off the usual frame.
SPINDLE_NOINLINE int wait_ready(const op_spec& op, time_point deadline, const std::stop_token* stop) noexcept {
    op_spec p = op;
    p.poll_events = op.write ? POLLOUT : POLLIN;
    return submit_and_park(p, &prep_poll, deadline, stop);
}

}  // namespace

int uring_perform(worker*, op_spec& op, time_point deadline, const std::stop_token* stop) noexcept {
    for (;;) {
        int r = submit_and_park(op, op.prep, deadline, stop);
        // Kernels that honour O_NONBLOCK on sockets answer EAGAIN instead of
        // waiting: wait for readiness on the ring, then try again.
        if (r != -EAGAIN || !op.can_wait) return r;
        r = wait_ready(op, deadline, stop);
        if (r < 0) return r;
    }
}

}  // namespace spindle::io::detail
