// spindle/runtime/fiber_local.hpp — a variable with one instance per fiber.
//
//     spindle::fiber_local<request_ctx> ctx;            // default-constructed
//     spindle::fiber_local<int> depth([] { return 0; }); // or from a factory
//     ctx->user = "alice";   // the calling fiber's instance, made on first use
//
// The fiber analogue of thread_local: fibers migrate between workers (work
// stealing, CES handoff), so a thread_local read before a suspension may be
// another thread's after it. A fiber_local follows the fiber.
//
// Contract:
//   - get() / * / -> return the calling fiber's instance, constructing it on
//     first use (the factory if one was given, else T{}). From a plain
//     thread they return that thread's instance (destroyed at thread exit).
//   - A fiber's instances are destroyed, newest first, on the fiber itself
//     right after its body returns (or throws), before join() returns.
//   - reset() destroys the calling fiber's instance now; the next get()
//     makes a new one. has_value() tells whether it exists.
//   - Destroying the fiber_local object does not destroy the instances: each
//     lives until its fiber ends. Keys are never reused, so an instance can
//     never be mistaken for another fiber_local's.
//   - Lookup is a linear scan of the fiber's own small table (no locks, no
//     atomics): meant for a handful of fiber_locals per fiber.
//   - Like thread_local, a factory or constructor must not get() the
//     fiber_local it is initializing (endless recursion), and a destructor
//     that re-creates its own instance keeps its fiber from ending.
//   - On a plain thread that outlives many fiber_local objects, their
//     instances stay in its table until the thread exits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace spindle {

namespace detail {

struct local_entry {
    std::uint64_t key;
    void* value;
    void (*destroy)(void*) noexcept;
};

// One fiber's (or thread's) instances, in creation order.
struct local_table {
    std::vector<local_entry> entries;
    local_table() = default;
    local_table(const local_table&) = delete;
    local_table& operator=(const local_table&) = delete;
    ~local_table() { clear(); }
    // Destroy every instance, newest first. A destructor may touch other
    // fiber_locals (even create one): we loop until the table stays empty.
    void clear() noexcept;
    void* find(std::uint64_t key) const noexcept {
        for (const local_entry& e : entries)
            if (e.key == key) return e.value;
        return nullptr;
    }
    void erase(std::uint64_t key) noexcept;
};

std::uint64_t next_local_key() noexcept;
// The calling fiber's table (made on first use), or the calling thread's.
local_table& current_local_table();
local_table* current_local_table_if_any() noexcept;

}  // namespace detail

template <class T>
class fiber_local {
public:
    fiber_local() : key_(detail::next_local_key()) {}
    template <class Factory>
        requires std::is_invocable_r_v<T, Factory&>
    explicit fiber_local(Factory init) : key_(detail::next_local_key()), init_(std::move(init)) {}
    fiber_local(const fiber_local&) = delete;
    fiber_local& operator=(const fiber_local&) = delete;

    T& get() {
        detail::local_table& t = detail::current_local_table();
        if (void* p = t.find(key_)) return *static_cast<T*>(p);
        std::unique_ptr<T> v = init_ ? std::make_unique<T>(init_()) : std::make_unique<T>();
        t.entries.reserve(t.entries.size() + 1);  // so the push below cannot throw
        T* raw = v.release();
        t.entries.push_back(detail::local_entry{key_, raw, [](void* p) noexcept { delete static_cast<T*>(p); }});
        return *raw;
    }
    T& operator*() { return get(); }
    T* operator->() { return &get(); }

    [[nodiscard]] bool has_value() const noexcept {
        const detail::local_table* t = detail::current_local_table_if_any();
        return t != nullptr && t->find(key_) != nullptr;
    }
    void reset() noexcept {
        if (detail::local_table* t = detail::current_local_table_if_any()) t->erase(key_);
    }

private:
    std::uint64_t key_;
    std::function<T()> init_;
};

}  // namespace spindle
