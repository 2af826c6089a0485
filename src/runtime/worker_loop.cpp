// The worker loop: each worker thread runs fibers from its queues, steals
// when they are empty, and parks on its futex when there is nothing to
// steal either. Also a fiber's yield. The queues are in run_queues.hpp; the
// data structures in include/spindle/runtime/detail/worker.hpp.
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>

#include <spindle/runtime/detail/debug_layout.hpp>

#include "run_queues.hpp"

namespace spindle::detail {

// current_worker()'s variable (worker.hpp): reached only through
// SPINDLE_FRESH_TLS_ADDRESS, never by this name.
__thread worker* tl_worker_storage SPINDLE_TLS_NAME("spindle_tl_worker")
    __attribute__((tls_model("initial-exec"), used)) = nullptr;

// Links spindle_debug_layout, which debuggers read, into every program that
// runs fibers (a static library's member is linked only when referenced).
[[gnu::used]] const void* const keep_debug_layout = &spindle_debug_layout;

void wake_all_workers(scheduler_state* s) noexcept {
    for (auto& w : s->workers) {
        // Unconditional: this happens once, at shutdown.
        w->epoch.fetch_add(1, std::memory_order_seq_cst);
        wake_worker(w.get());
    }
}

namespace {

std::uint64_t next_random(worker* w) noexcept {
    // xorshift64*: victim selection only.
    std::uint64_t x = w->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
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
    // Completions first: they make fibers ready here. relaxed: the owner's
    // own store.
    if (io_engine* e = w->io.load(std::memory_order_relaxed)) poll_io(w, e, false);
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
    if (!any_work_seq_cst(w) && !should_stop(s)) {
        // With an I/O engine the worker sleeps in it: submitted operations
        // and wakes (wake_worker writes the engine's wake descriptor, which
        // stays armed) both end the sleep, so a wake after the re-check is
        // not lost.
        if (io_engine* e = w->io.load(std::memory_order_relaxed)) e->ops->block(e);
        else futex_wait(&w->epoch, key);
    }
    // A new unbroken run begins (busy_look; only where a slice is set and
    // the worker has an engine: no clock read per wake otherwise).
    if (s->io_slice_ns > 0 && w->io.load(std::memory_order_relaxed) != nullptr)
        w->run_since = std::chrono::steady_clock::now();
    // Claimed by a notifier (parked already false) or not: either way we
    // are awake and will look for work. Our mark moves: a peer that took
    // it while we slept would otherwise judge us stalled at its next look.
    // (Nothing orders this store before the one to `parked`; a peer that
    // sees them the other way round helps once, for nothing.)
    note_io_step(w);
    // relaxed: only we and claimers write it, and a stale true costs a
    // claimer one futex_wake on an awake worker.
    w->parked.store(false, std::memory_order_relaxed);
    // seq_cst: a notifier that still counts us finds no parked worker and
    // returns; we are awake and about to search the queues ourselves.
    s->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

// Each poll that may enter the kernel (a busy worker's periodic one, each
// look of a watch) also keeps an eye on its peers, every `stall`: a peer
// that is awake (not asleep in its engine) but whose progress mark
// (io_steps) has not moved since the last look has had its thread
// preempted or stuck in a long computation, and the fibers whose events
// wait in its engine are stranded; this worker then takes those events
// (io_engine::help), and the fibers run here. A healthy worker moves its
// mark at every suspension, microseconds apart. With two workers and a
// client on two CPUs, unpinned, p99 fell from 4.1 ms to about 0.4 ms.
// Tokio gets the same from one I/O driver that every worker polls. Every
// peer at each look (one relaxed load each), not one peer per look: with
// N workers that would leave a stalled peer up to N-1 looks unseen.
void help_stalled_peer(worker* w, io_engine* e, std::chrono::steady_clock::time_point now) noexcept {
    constexpr auto stall = std::chrono::microseconds(100);
    auto& peers = w->sched->workers;
    const auto n = static_cast<unsigned>(peers.size());
    if (n < 2) return;
    // The clock first (busy_look): the peers' marks are read once per
    // look, not at every poll of a watch, which would pull their lines
    // from their owners' caches about once a microsecond.
    const bool first = w->stall_since == std::chrono::steady_clock::time_point{};
    if (!first && now - w->stall_since < stall) return;
    w->stall_since = now;
    for (unsigned i = 0; i < n; ++i) {
        worker* v = peers[i].get();
        if (v == w) continue;
        // relaxed: hints (see io_steps).
        const std::uint32_t mark = v->io_steps.load(std::memory_order_relaxed);
        const bool stalled = !first && mark == w->stall_seen[i] && !v->parked.load(std::memory_order_relaxed);
        w->stall_seen[i] = mark;
        if (!stalled) continue;
        // acquire pairs with the owner's release store of its engine.
        io_engine* pe = v->io.load(std::memory_order_acquire);
        if (pe != nullptr && pe->ops == e->ops) e->ops->help(pe);
    }
}

// How long a busy worker pauses at the end of an io_slice when some thread
// waits for a CPU (busy_look). Unpinned beside memaslap, 10 us left most of
// the p99 tail, 20 us and 50 us removed it alike (the wake-up itself takes
// 10-30 us more on a virtual machine).
constexpr std::chrono::nanoseconds io_slice_pause{20'000};

// Whether more threads are runnable, machine-wide, than there are CPUs
// online: some thread waits for a CPU right now. The fourth field of
// /proc/loadavg is "runnable/total" at the moment of the read, not an
// average; a pread costs 1.5-2 us, once per io_slice of a busy run. Where
// /proc cannot be read, or reads as something else: false, and a run is
// never broken (as with io_slice 0).
bool cpus_wanted() noexcept {
    const load_source& src = loadavg();
    if (src.fd < 0) return false;
    char b[128];
    const ssize_t k = ::pread(src.fd, b, sizeof b - 1, 0);
    if (k <= 0) return false;
    b[k] = '\0';
    const char* p = b;
    for (int spaces = 0; spaces < 3 && *p != '\0'; ++p) spaces += *p == ' ' ? 1 : 0;
    char* end = nullptr;
    const long running = std::strtol(p, &end, 10);
    return end != p && *end == '/' && running > src.cpus;
}

}  // namespace

const load_source& loadavg() noexcept {
    // Opened once, for the process's life, by the first scheduler with an
    // io_slice (its constructor), so that a count of open descriptors
    // taken while it runs does not see it appear; fd -1 if it cannot be.
    // The CPUs online are counted at the same moment.
    static const load_source src{::open("/proc/loadavg", O_RDONLY | O_CLOEXEC), ::get_nprocs()};
    return src;
}

void busy_look(worker* w, io_engine* e) noexcept {
    using clock = std::chrono::steady_clock;
    const std::int64_t slice = w->sched->io_slice_ns;
    if (slice == 0 && e->ops->help == nullptr) return;  // no use for the clock
    auto now = clock::now();
    // A run longer than io_slice, while some thread waits for a CPU,
    // pauses for io_slice_pause: the waiting thread runs. Unpinned beside
    // memaslap (2 workers, 64 connections, 90/10 64 B), a worker and a
    // memaslap thread fed each other on both CPUs for milliseconds while
    // the other pair waited in a run queue until a scheduler tick:
    // spindle-kv's p99 was 1.5-2x memcached's, whose threads sleep in
    // epoll_wait more often; with a pause every 400 us it is about 0.5x
    // memcached's at 0.93-0.97x the ops/s it made without (docs/io.md).
    // A sleep, not sched_yield: the kernel's fair queue (EEVDF) keeps a
    // sleeper's lag for when it wakes, but moves a yielder's deadline a
    // whole time slice on, so beside threads that only compute a worker
    // that yielded every 100 us kept 0.35-0.45x of the ops/s it made
    // without (half its CPU time); pausing every 400 us, 0.8-0.9x.
    // Nobody waiting (the machine not oversubscribed): no pause.
    // The watch yields at every look and restarts the run there
    // (watch_engine).
    if (slice > 0 && now - w->run_since >= std::chrono::nanoseconds(slice)) {
        if (cpus_wanted()) {
            timespec pause{0, io_slice_pause.count()};
            ::clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, nullptr);  // EINTR: a shorter pause
            now = clock::now();
        }
        w->run_since = now;
    }
    if (e->ops->help != nullptr) help_stalled_peer(w, e, now);
}

namespace {

// A worker whose fibers all wait for I/O, before it sleeps: submit what is
// queued, then watch the engine until `until` for completions (and the
// other queues for work; each poll also looks out for a stalled peer,
// help_stalled_peer). Returns what it found, or null.
fiber_ctx* watch_engine(worker* w, io_engine* e, std::chrono::steady_clock::time_point until) noexcept {
    for (;;) {
        // The poll may enter the kernel, which a completion posted as task
        // work (DEFER_TASKRUN) needs before it shows in the queue, and
        // which submits what was queued since the watch began.
        if (e->ops->poll_wanted(e)) poll_io(w, e, true);
        if (fiber_ctx* f = find_work(w)) return f;
        // Between looks the CPU goes to any other thread that waits for
        // it here: with nothing else runnable sched_yield returns at once
        // and the watch goes on; with a client on the same CPU (workers
        // unpinned beside the program that talks to them) the client
        // runs, which is what we are waiting for. A watch that held the
        // CPU instead cost spindle-kv, 2 workers unpinned beside
        // memaslap, 15-60 % more server CPU per operation and a p99 of
        // 1.8-2.1x memcached's (1.4-1.6x with the yield; docs/benchmarks.md).
        ::sched_yield();
        const auto now = std::chrono::steady_clock::now();
        w->run_since = now;
        if (now >= until) return nullptr;
    }
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
    using clock = std::chrono::steady_clock;
    clock::time_point idle_from{};  // start of an idle spell that may adapt the watch; {} if none
    if (w->sched->io_slice_ns > 0) {
        w->run_since = clock::now();
        // The io_slice pause is 20 us; the default slack (50 us) would
        // make it 20-70. Also sharpens the worker's other timed sleeps.
        ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    }
    for (;;) {
        run_post(w);
        fiber_ctx* f = find_work(w);
        io_engine* e = w->io.load(std::memory_order_relaxed);
        if (f == nullptr && e != nullptr && e->ops->busy(e)) {
            // Operations queued or in flight: no spinning on the queues,
            // which would only hold the queued submissions back. Watch the
            // engine a while (options::io_spin) where it can be watched,
            // else sleep in it (which submits them) at once.
            // A wake-up that found nothing continues the spell (io_watch):
            // no second watch.
            // A sleeper due within io_spin: no watch, and no spell, for
            // the sleeper's wake-up would end it (flush).
            if (e->ops->flush != nullptr && w->sched->io_spin_ns > 0 && idle_from == clock::time_point{}) {
                auto now = clock::now();
                if (e->ops->flush(e, now + std::chrono::nanoseconds(w->sched->io_spin_ns))) {
                    idle_from = now;
                    f = watch_engine(w, e, now + std::chrono::nanoseconds(w->watch.window));
                    if (f != nullptr) idle_from = clock::time_point{};  // caught: the window stands
                }
            }
        } else if (f == nullptr && !should_stop(w->sched)) {
            // Spin a little before paying for a futex sleep and wake: work
            // handed off by a CES unlock often arrives within microseconds.
            for (int i = 0; i < 64 && f == nullptr; ++i) {
                for (int k = 0; k < 32; ++k) arch::cpu_relax();
                f = find_work(w);
            }
        }
        if (f != nullptr) {
            if (idle_from != clock::time_point{}) {
                auto gap = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - idle_from);
                w->watch.slept(gap.count(), w->sched->io_spin_ns);
                idle_from = clock::time_point{};
            }
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

void yield_slow(worker* w) noexcept {
    w->yield_check = 0;
    // A fiber that yields in a loop while others wait for I/O (say, for a
    // flag their completion sets) never suspends and never lets the loop
    // run: while operations are in flight every yield comes here, and
    // now and then (poll_io_due) one submits and reaps.
    if (io_engine* e = w->io.load(std::memory_order_relaxed)) [[unlikely]] {
        if (poll_io_due(w)) poll_io(w, e, true);
        if (e->ops->busy(e)) w->yield_check = 1;
    }
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

}  // namespace spindle::detail
