// The epoll backend: one epoll set per worker, owned by the worker's thread.
//
// A spindle socket is registered once, edge-triggered for both directions,
// in the epoll set of the worker where it first waits. Its readiness lives
// in a poll_desc in a process-wide table indexed by descriptor number (as
// Go's pollDesc), one word per direction:
//
//   rd / wr:   0 -- nothing known
//              1 -- ready: an edge came while nobody waited
//              waiter* -- that fiber waits for the next edge
//
// An edge (event) moves 0 -> 1, or takes the waiter out (waiter -> 0) and
// unparks it. A fiber whose system call said EAGAIN takes a pending 1
// (1 -> 0: try again at once) or puts itself in (0 -> waiter) and parks.
// A deadline (on the worker's timer heap) or a stop request takes the
// waiter out the same way (waiter -> 0): whoever takes it out unparks it,
// exactly once. Everything is a CAS on the word, so an edge that comes
// between the EAGAIN and the registration is never lost.
//
// Descriptors that are not spindle's (wait_readable/wait_writable) may be
// closed and their numbers reused behind our back, so each of their waits
// re-arms the registration (EPOLL_CTL_MOD, or ADD if the kernel forgot it).
// A spindle socket's close resets its entry (epoll_forget).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <stop_token>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/detail/timer.hpp>
#include <spindle/runtime/fiber.hpp>

#include "io_internal.hpp"
#include "timer_heap.hpp"

namespace spindle::io::detail {

namespace {

struct epoll_engine;

struct poll_desc {
    // See the file comment. acq_rel CASes everywhere: a waiter's
    // registration pairs with the event's take-out, and the event's 1 with
    // the waiter's take of it.
    std::atomic<std::uintptr_t> rd{0};
    std::atomic<std::uintptr_t> wr{0};
    // The engine it is registered with; null: not registered. CAS null ->
    // engine (acq_rel) by the first waiter, who then adds it.
    std::atomic<epoll_engine*> reg{nullptr};
    // The last stream read took less than it asked for (or found nothing):
    // the socket's receive queue was empty then, so until the next edge
    // (rd 1) a read would only say EAGAIN. Tokio's "clear readiness on a
    // short read". A hint with one rule: set only after a read, cleared by
    // epoll_forget; read and written relaxed (the edge's CAS on rd orders
    // what matters).
    std::atomic<bool> rd_drained{false};
    // The peer closed its side, or the socket failed (an EPOLLRDHUP, EPOLLHUP
    // or EPOLLERR event came): sticky until epoll_forget. After the edge
    // that said so no other comes, so a drained read must not wait for one:
    // the next read returns the end of stream or the error at once.
    // (Tokio keeps READ_CLOSED apart from READABLE for the same reason.)
    // Stored before the edge's CAS on rd (which releases it); read after
    // an acquire load of rd (epoll_read_would_block). A reader that misses
    // it has not seen that edge's CAS, so the edge is still to wake it.
    std::atomic<bool> rd_closed{false};
};

constexpr std::uintptr_t desc_ready = 1;

// The table: chunks of 4096 entries, made on first use, never freed.
constexpr int chunk_bits = 12;
constexpr int chunk_size = 1 << chunk_bits;
constexpr int max_chunks = 1 << 12;  // 16 M descriptors
std::atomic<poll_desc*> chunks[max_chunks];

// Chunk c, made now (out of line: once per 4096 descriptors).
SPINDLE_NOINLINE poll_desc* make_chunk(int c) noexcept {
    poll_desc* chunk = nullptr;
    auto* fresh = new poll_desc[chunk_size];
    // acq_rel: publishes the fresh chunk to desc_of's acquire load; acquire
    // on failure: the chunk another thread published first.
    if (chunks[c].compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
        return fresh;
    delete[] fresh;
    return chunk;
}

// (Inline: every stream read on epoll looks a descriptor up two or three
// times.)
inline poll_desc* desc_of(int fd) noexcept {
    int c = fd >> chunk_bits;
    if (fd < 0 || c >= max_chunks) return nullptr;
    // acquire pairs with make_chunk's CAS, which published the chunk.
    poll_desc* chunk = chunks[c].load(std::memory_order_acquire);
    if (chunk == nullptr) chunk = make_chunk(c);
    return &chunk[fd & (chunk_size - 1)];
}

struct epoll_engine : spindle::detail::io_engine {
    int epfd = -1;
    int wake_fd = -1;
    // Fibers parked on descriptors registered here, wherever they run (a
    // hint for busy(): relaxed).
    std::atomic<int> waiting{0};
    epoll_event events[256];
    // events[next, n): what the last epoll_wait returned and deliver()
    // has not yet delivered (it takes them from the end).
    int n = 0;
    int next = 0;
    // Sleeping fibers and the deadlines of timed waits, the epoll waits'
    // own included (owner only; timer_heap.hpp): block() waits no longer
    // than the earliest.
    timer_heap timers;
    // Stop requests on sleepers not yet looked at: any thread increments
    // (release, after marking its sleeper); the owner exchanges it to 0
    // (acquire) and then sees every marked sleeper (look_at_timers).
    std::atomic<std::uint32_t> stop_requests{0};
};

epoll_engine* as_epoll(spindle::detail::io_engine* e) noexcept { return static_cast<epoll_engine*>(e); }

// An edge on one direction's word.
void edge(std::atomic<std::uintptr_t>& a) noexcept {
    std::uintptr_t v = a.load(std::memory_order_acquire);
    for (;;) {
        if (v == desc_ready) return;
        std::uintptr_t to = v == 0 ? desc_ready : 0;
        if (a.compare_exchange_weak(v, to, std::memory_order_acq_rel, std::memory_order_acquire)) {
            if (v != 0) spindle::detail::unpark(reinterpret_cast<waiter*>(v));
            return;
        }
    }
}

// One descriptor's event: its edges. Any thread (the set's owner, or a
// worker helping it): every edge is a CAS on the descriptor's words.
void deliver_one(const epoll_event& ev) noexcept {
    auto* d = static_cast<poll_desc*>(ev.data.ptr);
    if ((ev.events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0 && !d->rd_closed.load(std::memory_order_relaxed))
        d->rd_closed.store(true, std::memory_order_relaxed);
    if (ev.events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) edge(d->rd);
    if (ev.events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) edge(d->wr);
}

// Last event first: the worker's deque runs newest first, so the woken
// fibers then run in the order the kernel reported their descriptors (see
// unpark_reaped in uring.cpp for what the other order does to the tail).
void deliver(epoll_engine* e) noexcept {
    while (e->next < e->n) {
        epoll_event& ev = e->events[--e->n];
        if (ev.data.ptr == nullptr) continue;  // the wake eventfd
        deliver_one(ev);
    }
}

// Waits for events until `timeout` (null: no limit). epoll_pwait2 (Linux
// 5.11) takes nanoseconds; where it is missing, epoll_wait's milliseconds,
// rounded up so that a timer is never looked at before it is due.
void wait_events(epoll_engine* e, const timespec* timeout) noexcept {
    deliver(e);  // (nothing left, normally)
    // relaxed: a hint shared by the workers, orders nothing; a worker that
    // has not seen it yet makes one more failing call. EPERM: a seccomp
    // filter that does not know the call.
    static std::atomic<bool> no_pwait2{false};
    int r = -1;
    if (!no_pwait2.load(std::memory_order_relaxed)) {
        r = ::epoll_pwait2(e->epfd, e->events, 256, timeout, nullptr);
        if (r < 0 && (errno == ENOSYS || errno == EPERM)) no_pwait2.store(true, std::memory_order_relaxed);
    }
    if (no_pwait2.load(std::memory_order_relaxed)) {
        int ms = -1;
        if (timeout != nullptr)
            ms = static_cast<int>(std::min<long long>(timeout->tv_sec * 1000LL + (timeout->tv_nsec + 999999) / 1000000,
                                                      24LL * 3600 * 1000));
        r = ::epoll_wait(e->epfd, e->events, 256, ms);
    }
    e->n = r > 0 ? r : 0;
    e->next = 0;
}

// Wakes the sleepers a stop request marked, then fires what is due.
void look_at_timers(epoll_engine* e) noexcept {
    // relaxed look first; the acquire exchange pairs with the requests'
    // release increments, so every sleeper marked before them is seen.
    if (e->stop_requests.load(std::memory_order_relaxed) != 0) {
        e->stop_requests.exchange(0, std::memory_order_acquire);
        e->timers.wake_stopped();
    }
    e->timers.fire();
}

void op_wake(spindle::detail::io_engine* e) noexcept {
    // Edge-triggered and never read: every write is a new edge.
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(as_epoll(e)->wake_fd, &one, sizeof one);
}

void op_block(spindle::detail::io_engine* base) noexcept {
    epoll_engine* e = as_epoll(base);
    if (e->next < e->n) return;  // events to deliver first
    if (e->stop_requests.load(std::memory_order_relaxed) != 0) return;  // the loop's poll takes them
    if (e->timers.empty()) {
        wait_events(e, nullptr);
        return;
    }
    auto left = e->timers.earliest() - steady::now();
    if (left <= steady::duration::zero()) return;  // the loop fires it
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    wait_events(e, &ts);
}

void op_poll(spindle::detail::io_engine* base, bool may_enter) noexcept {
    epoll_engine* e = as_epoll(base);
    if (e->next == e->n && may_enter && e->waiting.load(std::memory_order_relaxed) != 0) {
        constexpr timespec zero{0, 0};
        wait_events(e, &zero);
    }
    deliver(e);
    look_at_timers(e);
}

bool op_busy(spindle::detail::io_engine* base) noexcept {
    epoll_engine* e = as_epoll(base);
    return e->waiting.load(std::memory_order_relaxed) != 0 || !e->timers.empty();  // fibers, or timers to fire
}

void op_destroy(spindle::detail::io_engine* base) noexcept {
    epoll_engine* e = as_epoll(base);
    // Forget every registration with this set: a later scheduler's worker
    // must register those descriptors with its own.
    for (int c = 0; c < max_chunks; ++c) {
        poll_desc* chunk = chunks[c].load(std::memory_order_acquire);
        if (chunk == nullptr) continue;
        for (int i = 0; i < chunk_size; ++i) {
            epoll_engine* expect = e;
            chunk[i].reg.compare_exchange_strong(expect, nullptr, std::memory_order_acq_rel);
        }
    }
    // No fiber is left, so neither is a timed wait: what remains of theirs
    // was cancelled.
    e->timers.sweep();
    ::close(e->epfd);
    ::close(e->wake_fd);
    delete e;
}

void op_add_timer(spindle::detail::io_engine* base, spindle::detail::local_timer* lt) noexcept {
    as_epoll(base)->timers.add(lt);
}

epoll_engine* engine_of(worker* w) noexcept;

// this_fiber::sleep_until on the worker's own heap, as on io_uring
// (uring.cpp, op_sleep, has the figures against the timer thread).
bool op_sleep(spindle::detail::io_engine*, time_point t) noexcept {
    worker* w = fiber_worker();
    epoll_engine* e = engine_of(w);
    return sleep_on(e->timers, w, t, e->stop_requests, &op_wake, e);
}

// The watch before a sleep (worker_loop.cpp, options::io_spin): only
// while fibers wait on descriptors here, and not while a timer is due
// within the watch, ours or the timer service's (its wake-up would end the
// watch, which would only have burnt the time until then). There is
// nothing queued to submit.
bool op_flush(spindle::detail::io_engine* base, time_point horizon) noexcept {
    epoll_engine* e = as_epoll(base);
    return e->waiting.load(std::memory_order_relaxed) != 0 && !e->timers.due_before(horizon);
}

// epoll has no memory to read that says an event came: every look during
// the watch is an epoll_wait with no timeout, still far cheaper than a
// sleep and a wake-up; and the window closes by itself on a worker whose
// spells end in sleeps anyway (io_watch).
bool op_poll_wanted(spindle::detail::io_engine*) noexcept { return true; }

// A watching worker looks into a peer's set (io_engine::help): an epoll
// set may be waited on by any thread, and each edge goes to one of them.
// The fibers it wakes become ready on the helper (unpark from a worker
// pushes to that worker). The peer's wake descriptor is the one thing not
// ours to take: its edge is passed on with a new write, so the peer still
// sees every wake-up meant for it.
bool op_help(spindle::detail::io_engine* peer) noexcept {
    epoll_engine* p = as_epoll(peer);
    if (p->waiting.load(std::memory_order_relaxed) == 0) return false;  // relaxed: a hint
    epoll_event evs[64];
    int r = ::epoll_wait(p->epfd, evs, 64, 0);
    // The peer's wake-up first: a notifier that claimed it will not write
    // again, so it must not wait behind our deliveries.
    for (int i = 0; i < r; ++i)
        if (evs[i].data.ptr == nullptr) op_wake(p);
    bool woke = false;
    for (int i = r; i-- > 0;) {  // last first, as deliver()
        if (evs[i].data.ptr == nullptr) continue;
        deliver_one(evs[i]);
        woke = true;
    }
    return woke;
}

const spindle::detail::io_engine_ops epoll_ops = {&op_wake,    &op_block, &op_poll,  &op_busy,
                                                  &op_destroy, &op_sleep, &op_flush, &op_poll_wanted,
                                                  &op_help,    &op_add_timer};

epoll_engine* engine_of(worker* w) noexcept {
    auto* cur = w->io.load(std::memory_order_relaxed);  // relaxed: only the owner stores it
    if (cur != nullptr) return as_epoll(cur);
    auto* e = new epoll_engine;
    e->ops = &epoll_ops;
    e->epfd = ::epoll_create1(EPOLL_CLOEXEC);
    e->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->epfd < 0 || e->wake_fd < 0)
        spindle::detail::fatal("worker %u: epoll set: %s", w->index, std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.ptr = nullptr;
    if (::epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->wake_fd, &ev) < 0)
        spindle::detail::fatal("worker %u: epoll set: %s", w->index, std::strerror(errno));
    // release pairs with wake_worker()'s acquire load (run_queues.hpp).
    w->io.store(e, std::memory_order_release);
    return e;
}

// Register fd with e; 0, or -errno (-EPERM: a regular file, always ready).
int add(epoll_engine* e, int fd, poll_desc* d, int op) noexcept {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = d;
    return ::epoll_ctl(e->epfd, op, fd, &ev) < 0 ? -errno : 0;
}

// Make sure fd's edges reach some engine (see the file comment).
int ensure_registered(epoll_engine* e, int fd, poll_desc* d, bool owned) noexcept {
    epoll_engine* reg = d->reg.load(std::memory_order_acquire);
    if (reg != nullptr) {
        if (owned) return 0;
        int r = add(reg, fd, d, EPOLL_CTL_MOD);  // re-arm (a new edge if ready)
        if (r != -ENOENT) return r;
        // The kernel forgot it: the number was closed (and maybe reused).
        d->reg.compare_exchange_strong(reg, nullptr, std::memory_order_acq_rel);
        reg = nullptr;
    }
    if (!d->reg.compare_exchange_strong(reg, e, std::memory_order_acq_rel, std::memory_order_acquire))
        return 0;  // another fiber registered it meanwhile
    int r = add(e, fd, d, EPOLL_CTL_ADD);
    if (r == -EEXIST) r = add(e, fd, d, EPOLL_CTL_MOD);
    if (r < 0) d->reg.store(nullptr, std::memory_order_release);
    return r;
}

struct fd_wait final : cancel_target {
    waiter wt;
    std::atomic<std::uintptr_t>* word = nullptr;
    // Why it was taken out by someone other than an edge: 0 none,
    // ETIMEDOUT, ECANCELED. Written only by whoever took it out, before
    // its unpark (whose release the wake-up acquires).
    std::atomic<int> reason{0};
};

// Deadline or stop: take the waiter out if it is still in.
void take_out(fd_wait* fw, int why) noexcept {
    std::uintptr_t me = reinterpret_cast<std::uintptr_t>(&fw->wt);
    std::uintptr_t v = me;
    if (fw->word->compare_exchange_strong(v, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        fw->reason.store(why, std::memory_order_relaxed);  // published by unpark's release
        spindle::detail::unpark(&fw->wt);
    }
}

// The wait with a deadline or a token of the call's own, out of line: the
// usual wait (neither; the fiber's own token) keeps their timer and stop
// callback off its frame. Each parked fiber's stack is what its resume
// touches, and with many connections those lines are cold (epoll_await's
// own frame in the echo server: 272 bytes before, 160 now).
SPINDLE_NOINLINE void park_limited(fd_wait& fw, time_point deadline, const std::stop_token* stop) noexcept {
    // The deadline: on this worker's heap, else (out of memory) the timer
    // thread's.
    constexpr auto on_deadline = [](void* a) noexcept { take_out(static_cast<fd_wait*>(a), ETIMEDOUT); };
    spindle::detail::local_timer* local = nullptr;
    spindle::detail::timer_entry t;
    bool thread_timer = false;
    if (deadline != time_point::max()) {
        local = spindle::detail::local_timer_add(deadline, on_deadline, &fw);
        if (local == nullptr) {
            t.deadline = deadline;
            t.fn = on_deadline;
            t.arg = &fw;
            spindle::detail::timer_add(&t);
            thread_timer = true;
        }
    }
    auto request = [&fw]() noexcept { fw.request(&fw); };
    std::optional<std::stop_callback<decltype(request)>> cb;
    std::optional<own_stop> own;
    if (stop == nullptr) own.emplace(&fw); else if (stop->stop_possible()) cb.emplace(*stop, request);
    spindle::detail::park_now(&fw.wt);
    cb.reset();  // wait for a request running on another thread
    own.reset();
    if (local != nullptr) spindle::detail::local_timer_cancel(local);  // (waits for a running action)
    if (thread_timer) spindle::detail::timer_cancel(&t);
}

}  // namespace

int epoll_await(worker* w, const op_spec& op, time_point deadline, const std::stop_token* stop) noexcept {
    poll_desc* d = desc_of(op.fd);
    if (d == nullptr) return -EBADF;
    epoll_engine* e = engine_of(w);
    int r = ensure_registered(e, op.fd, d, op.owned);
    if (r == -EPERM) return 0;  // cannot be polled (a regular file): always ready
    if (r < 0) return r;
    fd_wait fw;
    fw.wt.fiber = w->current;
    fw.word = op.write ? &d->wr : &d->rd;
    std::uintptr_t v = 0;
    std::uintptr_t me = reinterpret_cast<std::uintptr_t>(&fw.wt);
    if (!fw.word->compare_exchange_strong(v, me, std::memory_order_acq_rel, std::memory_order_acquire)) {
        if (v == desc_ready) {
            // An edge came since the last try: take it and try again.
            fw.word->compare_exchange_strong(v, 0, std::memory_order_acq_rel, std::memory_order_relaxed);
            return 0;
        }
        // Another fiber waits for this direction already (two readers of
        // one socket): let it have the edge; look again a little later.
        this_fiber::sleep_for(std::chrono::microseconds(100));
        return 0;
    }
    epoll_engine* reg = d->reg.load(std::memory_order_acquire);
    if (reg != nullptr) reg->waiting.fetch_add(1, std::memory_order_relaxed);
    w->yield_check = 1;  // yields look at the engine meanwhile (yield_slow)
    fw.request = [](cancel_target* t) noexcept { take_out(static_cast<fd_wait*>(t), ECANCELED); };
    if (deadline == time_point::max() && stop == nullptr) {
        own_stop own(&fw);  // (its destructor waits for a request running on another thread)
        spindle::detail::park_now(&fw.wt);
    } else {
        park_limited(fw, deadline, stop);
    }
    if (reg != nullptr) reg->waiting.fetch_sub(1, std::memory_order_relaxed);
    return -fw.reason.load(std::memory_order_acquire);
}

bool epoll_read_would_block(int fd) noexcept {
    poll_desc* d = desc_of(fd);
    // Registered (edges reach an engine), drained since, no edge since, and
    // not closed (no edge will come after the one that said so). rd first,
    // acquire: an rd of 0 that a waking edge wrote carries the rd_closed
    // stored before it.
    return d != nullptr && d->rd_drained.load(std::memory_order_relaxed) &&
           d->reg.load(std::memory_order_acquire) != nullptr && d->rd.load(std::memory_order_acquire) == 0 &&
           !d->rd_closed.load(std::memory_order_relaxed);
}

void epoll_note_read(int fd, bool drained) noexcept {
    if (poll_desc* d = desc_of(fd); d != nullptr && d->rd_drained.load(std::memory_order_relaxed) != drained)
        d->rd_drained.store(drained, std::memory_order_relaxed);
}

void epoll_forget(int fd) noexcept {
    poll_desc* d = desc_of(fd);
    if (d == nullptr) return;
    d->rd_drained.store(false, std::memory_order_relaxed);
    d->rd_closed.store(false, std::memory_order_relaxed);
    d->reg.store(nullptr, std::memory_order_release);
    d->rd.store(0, std::memory_order_release);
    d->wr.store(0, std::memory_order_release);
}

}  // namespace spindle::io::detail
