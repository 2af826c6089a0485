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
    }
    f->done = true;
    f->running = false;
    arch::switch_shared_final<gen_self_off, gen_caller_off>(f, 0);
}

void generator_misuse(std::uint64_t id, const char* what) noexcept {
    std::fprintf(stderr, "spindle: generator %llu %s\n", static_cast<unsigned long long>(id), what);
    std::fflush(stderr);
    std::abort();
}

void release_generator_frame(generator_frame_base* f) noexcept {
    stack_region st = f->stack;
    arch::annotate_destroy_context(&f->self);
    f->destroy(f);
    release_stack(st);
}

}  // namespace spindle::detail
