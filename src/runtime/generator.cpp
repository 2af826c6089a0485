// Out-of-line parts of spindle::generator (include/spindle/runtime/generator.hpp).
#include <spindle/runtime/generator.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace spindle::detail {

namespace {
std::atomic<std::uint64_t> g_generator_ids{0};
}

std::uint64_t next_generator_id() noexcept {
    return g_generator_ids.fetch_add(1, std::memory_order_relaxed) + 1;  // a counter, orders nothing
}

void generator_entry(arch::raw_context* self, arch::raw_context*) noexcept {
    auto* f = reinterpret_cast<generator_frame_base*>(self);
    arch::context_started(&f->self);
    f->started = true;
    try {
        f->invoke(f);
    } catch (const generator_unwind&) {
        // ~generator asked for it: the body's locals are destroyed.
    } catch (...) {
        f->error = std::current_exception();
        // A forced unwind (pthread_exit() or a thread cancellation inside the
        // body): it cannot be swallowed, nor carried to the consumer's stack
        // (see fiber_entry).
        if (!f->error)
            fatal("generator %llu body called pthread_exit() or was cancelled as a thread: a generator's body "
                  "ends by returning, and its thread must not be cancelled while it runs",
                  static_cast<unsigned long long>(f->id));
    }
    f->status |= gen_done;
    if constexpr (gen_resume_after_done_ok) {
        // The context stays: every later resume lands here and comes straight
        // back, and the consumer sees `done` again. The stack goes with the
        // frame (release_generator_frame).
        for (;;) {
            f = gen_eh_leave(f);
            std::uintptr_t word = 0;
            f = gen_yield(f, word);
        }
    } else {
        f = gen_eh_leave(f);
        arch::switch_shared_final<gen_self_off, gen_caller_off>(f, 0);
    }
}

generator_frame_base* gen_eh_enter_slow(generator_frame_base* f) noexcept {
    arch::eh_state* g = arch::detail::eh_globals();
    // The consumer is inside a handler (or this thread's state was not
    // looked up yet): park its state; the body starts from a clear one, and
    // installs its own where it lands if it has one (gen_land_slow).
    f->caller.eh = *g;
    *g = arch::eh_state{};
    f->status = static_cast<std::uint8_t>(f->status | gen_eh_swapped);
    return f;
}

generator_frame_base* gen_land_slow(generator_frame_base* f) {
    if ((f->status & gen_body_eh) != 0) {
        // The body yielded inside a handler: the thread's state is clear here
        // (the consumer's was parked by the resume, or was clear): give the
        // body back its own.
        *arch::detail::eh_globals() = f->self.eh;
        f->self.eh = arch::eh_state{};
        f->status = static_cast<std::uint8_t>(f->status & ~gen_body_eh);
    }
    if ((f->status & gen_unwinding) != 0) throw generator_unwind{};
    return f;
}

generator_frame_base* gen_eh_leave_slow(generator_frame_base* f) noexcept {
    arch::eh_state* g = arch::detail::eh_globals();
    // Park the body's state (it may be yielding inside a handler) and give
    // the consumer back its own: parked by the resume, or zero if none was.
    const arch::eh_state body = *g;
    f->self.eh = body;
    *g = f->caller.eh;
    f->caller.eh = arch::eh_state{};
    f->status = static_cast<std::uint8_t>((f->status & ~(gen_eh_swapped | gen_body_eh)) |
                                          (eh_state_busy(body) ? gen_body_eh : 0));
    return f;
}

void release_generator_frame(generator_frame_base* f) noexcept {
    stack_region st = f->stack;
    arch::annotate_destroy_context(&f->self);
    f->destroy(f);
    release_stack(st);
}

}  // namespace spindle::detail
