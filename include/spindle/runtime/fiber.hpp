// spindle/runtime/fiber.hpp — stackful fibers.
//
// A `spindle::fiber` is a thread of execution with its own stack, scheduled
// cooperatively by a spindle::scheduler (see scheduler.hpp). It is to a
// scheduler what std::thread is to the OS:
//
//     spindle::scheduler sched({.workers = 1});
//     spindle::fiber f = sched.spawn([] { ...; spindle::this_fiber::yield(); ... });
//     f.join();                       // from a fiber or from a plain thread
//
// Switching between fibers is the CACS switch (spindle/arch/): inlined at the
// switching site, it saves only the registers live there. A yield between
// fibers of one worker costs a few nanoseconds (bench/switch, "yield").
//
// Contract of the handle (like std::thread):
//
//   state of handle      | join()                 | detach()      | ~fiber()
//   ---------------------+------------------------+---------------+-------------------
//   joinable, running    | waits, then as below   | lets it run   | aborts (message)
//   joinable, finished   | returns, rethrows the  | frees it (*)  | aborts (message)
//                        | body's exception       |               |
//   not joinable         | aborts (message)       | aborts        | nothing
//   joining itself       | aborts (deadlock)      |               |
//
// (*) An exception that escaped the body of a fiber nobody joins is lost;
// spindle reports it ("detached fiber <id> ended with an exception: ...")
// and aborts where the fiber's last reference is dropped: in detach() if the
// fiber had already finished, else on its worker when it finishes. (Like
// std::thread, where it would call std::terminate.)
//
// Exception state (the caught-exception stack and uncaught count of the C++
// runtime) is saved and restored with each fiber and generator, so a fiber
// may suspend inside a catch handler.
//
// Stack: `fiber_options::stack_size` (default: the scheduler's, which is
// SPINDLE_STACK_SIZE or 128 KiB; minimum 16 KiB). Overflowing it hits a guard
// page and ends the process with a message naming the fiber.
//
// What a fiber must not do:
//   - block its worker thread for long in a system call or an OS lock (the
//     other fibers of that worker stop meanwhile);
//   - use a thread_local across a suspension: fibers migrate between
//     workers (work stealing, CES handoff), and a compiler may keep the
//     address of a thread_local -- errno included, whose __errno_location()
//     is declared const -- from before a switch. Read errno right after the
//     call that set it; use spindle::fiber_local for per-fiber state;
//   - call pthread_exit(), or run into a cancellation point after its worker
//     thread was pthread_cancel()ed: the forced unwind that both start ends
//     at the bottom of the fiber's stack, where it can neither be swallowed
//     nor passed on to the worker thread. spindle stops the program with
//     "fiber <id> called pthread_exit() or was cancelled as a thread". A
//     fiber ends by returning from its function (use its stop token to ask
//     it to); plain threads are unaffected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <new>
#include <chrono>
#include <stop_token>
#include <type_traits>
#include <utility>

#include <spindle/arch/context.hpp>
#include <spindle/memory/stack.hpp>
#include <spindle/runtime/detail/worker.hpp>

namespace spindle {

struct fiber_options {
    // Usable stack bytes; 0 takes the scheduler's default.
    std::size_t stack_size = 0;
    // The worker (0 .. workers-1) whose queue it starts in; -1: the
    // spawning fiber's worker when spawned from a fiber of the same
    // scheduler, else the workers in turn. Unless pinned, an idle worker
    // may steal it before it first runs. An index out of range throws
    // std::invalid_argument.
    int worker = -1;
    // Keep it on the worker it starts on for its whole life: it is never
    // stolen, a CES handoff never moves it (a handoff to it from another
    // worker becomes a wake-up on its own worker), and thread_locals and
    // this_fiber::worker_index() stay those of that worker.
    bool pinned = false;
};

namespace detail {

// Scheduler internals the templates below need (src/runtime/scheduler.cpp and
// fiber.cpp).
scheduler_state* current_scheduler_state() noexcept;  // of the calling fiber, or null
scheduler_state* default_scheduler_state();           // process-wide, made on first use
std::size_t resolve_stack_size(scheduler_state* s, std::size_t requested) noexcept;
std::uint64_t next_fiber_id() noexcept;
void submit_new_fiber(scheduler_state* s, fiber_ctx* c, int on_worker) noexcept;
unsigned worker_count(scheduler_state* s) noexcept;
[[noreturn]] void bad_worker_index(int index, unsigned workers);
void release_fiber(fiber_ctx* c) noexcept;  // drop one reference
[[noreturn]] void fiber_entry(arch::raw_context* self, arch::raw_context* from) noexcept;
inline fiber_ctx* running_fiber() noexcept {
    worker* w = current_worker();
    return w ? w->current : nullptr;
}

// Callables up to this size are stored on the fiber's own stack, just below
// its control block; larger ones go to the heap.
inline constexpr std::size_t inline_callable_max = 1024;

template <class Fn>
fiber_ctx* create_fiber(Fn&& fn, std::size_t stack_size) {
    using F = std::decay_t<Fn>;
    stack_region st = acquire_stack(stack_size);
    // Carve the control block off the (randomized) top of the stack.
    auto top = reinterpret_cast<std::uintptr_t>(st.top);
    top = (top - sizeof(fiber_ctx)) & ~(std::uintptr_t{alignof(fiber_ctx)} - 1);
    auto* c = ::new (reinterpret_cast<void*>(top)) fiber_ctx{};
    c->stack = st;
    constexpr bool inline_fn = sizeof(F) <= inline_callable_max && alignof(F) <= 64;
    try {
        if constexpr (inline_fn) {
            top = (top - sizeof(F)) & ~(std::uintptr_t{alignof(F) < 16 ? 16 : alignof(F)} - 1);
            c->callable = ::new (reinterpret_cast<void*>(top)) F(std::forward<Fn>(fn));
            c->destroy = [](void* p) { static_cast<F*>(p)->~F(); };
        } else {
            c->callable = new F(std::forward<Fn>(fn));
            c->callable_on_heap = true;
            c->destroy = [](void* p) { delete static_cast<F*>(p); };
        }
    } catch (...) {
        c->~fiber_ctx();
        release_stack(st);
        throw;
    }
    c->invoke = [](void* p) { std::invoke(*static_cast<F*>(p)); };
    c->id = next_fiber_id();
    set_stack_owner(st, stack_owner::fiber, c->id);
    void* stack_top = reinterpret_cast<void*>(top & ~std::uintptr_t{15});
    arch::make_context(&c->ctx.regs, stack_top, &fiber_entry);
    std::byte* bottom = st.top - st.usable;
    arch::annotate_new_context(&c->ctx, bottom,
                               static_cast<std::size_t>(static_cast<std::byte*>(stack_top) - bottom));
    return c;
}

}  // namespace detail

class fiber {
public:
    // Identifies a fiber; a default-constructed id names no fiber. Ids are
    // never reused within a process.
    class id {
    public:
        constexpr id() noexcept = default;
        constexpr explicit id(std::uint64_t v) noexcept : value_(v) {}
        constexpr std::uint64_t value() const noexcept { return value_; }
        friend constexpr bool operator==(id, id) noexcept = default;
        friend constexpr auto operator<=>(id, id) noexcept = default;
        friend std::ostream& operator<<(std::ostream& os, id i);

    private:
        std::uint64_t value_ = 0;
    };

    fiber() noexcept = default;

    // Start `fn` on the calling fiber's scheduler, or, from a plain thread,
    // on the process-wide default scheduler.
    template <class Fn>
        requires(!std::is_same_v<std::remove_cvref_t<Fn>, fiber> && std::is_invocable_v<std::decay_t<Fn>&>)
    explicit fiber(Fn&& fn, fiber_options opts = {}) {
        detail::scheduler_state* s = detail::current_scheduler_state();
        if (s == nullptr) s = detail::default_scheduler_state();
        start(s, std::forward<Fn>(fn), opts);
    }

    fiber(fiber&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)) {}
    fiber& operator=(fiber&& o) noexcept {
        if (this != &o) {
            if (joinable()) abandon_joinable("move-assigned over");
            ctx_ = std::exchange(o.ctx_, nullptr);
        }
        return *this;
    }
    fiber(const fiber&) = delete;
    fiber& operator=(const fiber&) = delete;
    ~fiber() {
        if (joinable()) abandon_joinable("destroyed");
    }

    [[nodiscard]] bool joinable() const noexcept { return ctx_ != nullptr; }
    [[nodiscard]] id get_id() const noexcept { return ctx_ ? id(ctx_->id) : id(); }

    // Wait for the fiber to finish; rethrows an exception that escaped it.
    void join();
    // Ask the fiber to stop: its stop token (this_fiber::get_stop_token())
    // reports it, and its cancellable waits end early. True if this call made
    // the request.
    bool request_stop() noexcept;
    // The fiber's stop source, to hand its token around.
    [[nodiscard]] std::stop_source get_stop_source() const noexcept;
    // Let it run on; its resources are freed when it finishes.
    void detach();

private:
    friend class scheduler;

    template <class Fn>
    void start(detail::scheduler_state* s, Fn&& fn, fiber_options opts) {
        if (opts.worker < -1 || (opts.worker >= 0 && static_cast<unsigned>(opts.worker) >= detail::worker_count(s)))
            detail::bad_worker_index(opts.worker, detail::worker_count(s));
        detail::fiber_ctx* c =
            detail::create_fiber(std::forward<Fn>(fn), detail::resolve_stack_size(s, opts.stack_size));
        c->pinned = opts.pinned;
        ctx_ = c;
        detail::submit_new_fiber(s, c, opts.worker);
    }

    [[noreturn]] SPINDLE_COLD void abandon_joinable(const char* what) const noexcept;

    detail::fiber_ctx* ctx_ = nullptr;
};

namespace this_fiber {

// Let the other ready fibers of this worker run; the caller continues after
// them (round-robin). From a thread that is not running a fiber, this is
// std::this_thread::yield().
//
// Fast path: a relaxed load to notice fibers woken from other threads, then
// `current = current->next` and the inlined CACS switch.
SPINDLE_ALWAYS_INLINE void yield() noexcept {
    detail::worker* w = detail::current_worker();
    if (w == nullptr) [[unlikely]] {
        detail::yield_thread();
        return;
    }
    if ((w->inject_head.load(std::memory_order_relaxed) != nullptr) | (w->yield_check != 0)) [[unlikely]] {
        detail::yield_slow(w);
        return;
    }
    detail::fiber_ctx* from = w->current;
    detail::fiber_ctx* to = from->next;
    if (to == from) return;
    w->current = to;
    arch::switch_to(&from->ctx, &to->ctx);
    detail::run_post(detail::current_worker());  // we may have migrated: re-read
}

// Suspend the calling fiber until `t` (or, from a plain thread, sleep).
// A fiber also wakes early when stop is requested on its own stop token
// (fiber::request_stop); then false is returned, else true.
bool sleep_until_steady(std::chrono::steady_clock::time_point t) noexcept;
template <class Clock, class Duration>
bool sleep_until(const std::chrono::time_point<Clock, Duration>& t) {
    if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>) {
        return sleep_until_steady(std::chrono::time_point_cast<std::chrono::steady_clock::duration>(t));
    } else {
        return sleep_until_steady(std::chrono::steady_clock::now() +
                                  std::chrono::ceil<std::chrono::steady_clock::duration>(t - Clock::now()));
    }
}
template <class Rep, class Period>
bool sleep_for(const std::chrono::duration<Rep, Period>& d) {
    return sleep_until_steady(std::chrono::steady_clock::now() +
                              std::chrono::ceil<std::chrono::steady_clock::duration>(d));
}

// The calling fiber's stop token (fiber::request_stop() requests it); a
// token that never stops from a plain thread.
std::stop_token get_stop_token() noexcept;

// Index (0 .. workers-1) of the worker running the calling fiber; -1 from a
// plain thread. Fibers migrate: the answer may change at any suspension.
int worker_index() noexcept;

// The running fiber's id; fiber::id() from a plain thread.
inline fiber::id get_id() noexcept {
    detail::fiber_ctx* c = detail::running_fiber();
    return c ? fiber::id(c->id) : fiber::id();
}

// True when called from a spindle fiber.
inline bool is_fiber() noexcept { return detail::running_fiber() != nullptr; }

}  // namespace this_fiber
}  // namespace spindle
