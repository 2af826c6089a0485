// spindle::fiber_local storage (include/spindle/runtime/fiber_local.hpp).
#include <spindle/runtime/fiber_local.hpp>

#include <atomic>

#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

namespace {
std::atomic<std::uint64_t> g_local_keys{0};
thread_local local_table tl_locals;  // plain threads' instances
}  // namespace

std::uint64_t next_local_key() noexcept {
    return g_local_keys.fetch_add(1, std::memory_order_relaxed) + 1;  // a counter, orders nothing
}

void local_table::clear() noexcept {
    while (!entries.empty()) {
        local_entry e = entries.back();
        entries.pop_back();
        e.destroy(e.value);  // may add entries: the loop picks them up
    }
}

void local_table::erase(std::uint64_t key) noexcept {
    for (std::size_t i = 0; i < entries.size(); ++i) {
        if (entries[i].key == key) {
            local_entry e = entries[i];
            entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(i));
            e.destroy(e.value);
            return;
        }
    }
}

local_table& current_local_table() {
    fiber_ctx* f = running_fiber();
    if (f == nullptr) return tl_locals;
    if (f->locals == nullptr) f->locals = new local_table;
    return *f->locals;
}

local_table* current_local_table_if_any() noexcept {
    fiber_ctx* f = running_fiber();
    return f == nullptr ? &tl_locals : f->locals;
}

// Called on the fiber as its body has returned.
void destroy_fiber_locals(fiber_ctx* c) noexcept {
    c->locals->clear();  // runs on the fiber: destructors may suspend
    // A destructor that suspended may have resumed on another worker; the
    // table is still this fiber's own.
    delete c->locals;
    c->locals = nullptr;
}

}  // namespace spindle::detail
