// The program tests/tools/gdb_fibers_check.cmake runs under gdb with
// tools/gdb/spindle.py. It sets up fibers in every state `info fibers`
// reports, then calls gdb_fibers_stop_here(), where gdb stops it:
//
//   fiber            state     worker  waits in
//   parked_mutex x2  parked    any     spindle::mutex (held by main), from gdb_fibers_park_on_mutex
//   parked_event     parked    any     spindle::event (never set), from gdb_fibers_wait_on_event
//   finished         finished  any     (its handle not yet joined)
//   spinner x2       running   0 and 1 (each spins, pinned, until released)
//   not started x2   ready     0       (pinned to worker 0, which its spinner keeps busy)
//
// Every step waits for the state it needs by finding the fibers through
// spindle_debug_layout, as the script does: no sleeps, no timing.
// Run outside gdb it checks the same states itself and exits 0.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <unistd.h>

#include <spindle/runtime/detail/debug_layout.hpp>
#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/scheduler.hpp>
#include <spindle/sync/event.hpp>
#include <spindle/sync/mutex.hpp>

extern "C" {
// The stack registry's half of the layout (src/memory/stack.cpp).
struct spindle_debug_stacks_t {
    std::uint32_t version, size;
    const void* chunks;
    const void* bound;
    std::uint32_t slots_per_chunk, slot_size, slot_guard_base, slot_usable, slot_owner_id, slot_owner_kind;
    std::uint32_t owner_fiber, owner_generator;
};

// Read by the gdb check: the ids of fibers whose backtraces it asks for.
volatile std::uint64_t gdb_fibers_mutex_waiter = 0;
volatile std::uint64_t gdb_fibers_event_waiter = 0;

// gdb stops here (a breakpoint).
__attribute__((noinline)) void gdb_fibers_stop_here() { __asm__ volatile("" ::: "memory"); }
}

namespace {

const spindle_debug_layout_t& lay = spindle_debug_layout;

template <class T>
T field(std::uintptr_t base, std::uint32_t off) {
    return __atomic_load_n(reinterpret_cast<const T*>(base + off), __ATOMIC_ACQUIRE);
}

struct census {
    int total = 0, parked = 0, finished = 0, running = 0;
};

// The fibers by state, found as tools/gdb/spindle.py finds them (through
// the stack registry: debug_layout.hpp), read racily but atomically word by
// word: only the states this program waits for, which hold once reached.
census count() {
    census c;
    const spindle_debug_stacks_t& st = *lay.stacks;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto bound = __atomic_load_n(static_cast<const std::uint32_t*>(st.bound), __ATOMIC_ACQUIRE);
    for (std::uint32_t i = 0; i < bound; ++i) {
        auto chunk = field<std::uintptr_t>(reinterpret_cast<std::uintptr_t>(st.chunks),
                                           (i / st.slots_per_chunk) * sizeof(void*));
        if (chunk == 0) continue;
        std::uintptr_t slot = chunk + (i % st.slots_per_chunk) * st.slot_size;
        if (field<std::uint8_t>(slot, st.slot_owner_kind) != st.owner_fiber) continue;
        auto guard_base = field<std::uintptr_t>(slot, st.slot_guard_base);
        if (guard_base == 0) continue;
        std::uintptr_t top = guard_base + page + field<std::uintptr_t>(slot, st.slot_usable);
        std::uintptr_t f = (top - lay.fiber_size) & ~std::uintptr_t{lay.fiber_align - 1};
        if (field<std::uint64_t>(f, lay.fiber_id) != field<std::uint64_t>(slot, st.slot_owner_id)) continue;
        ++c.total;
        auto home = field<std::uintptr_t>(f, lay.fiber_home);
        auto waiter = field<std::uintptr_t>(f, lay.fiber_parked_on);
        if (field<std::uintptr_t>(f, lay.fiber_join_state) == lay.join_done_value)
            ++c.finished;
        else if (home != 0 && field<std::uintptr_t>(home, lay.worker_current) == f)
            ++c.running;
        else if (waiter != 0 && field<std::uint32_t>(waiter, lay.waiter_state) == lay.park_parked_value)
            ++c.parked;
    }
    return c;
}

template <class Pred>
void wait_until(Pred p) {
    while (!p(count())) std::this_thread::yield();
}

// Distinctive frames for the backtraces the check looks for.
__attribute__((noinline)) void gdb_fibers_park_on_mutex(spindle::mutex& m) {
    m.lock();
    m.unlock();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void gdb_fibers_wait_on_event(spindle::event& e) {
    e.wait();
    __asm__ volatile("" ::: "memory");
}

}  // namespace

int main() {
    if (lay.version != 1 || lay.stacks->version != 1) {
        std::fprintf(stderr, "gdb_fibers_target: debug layout versions %u and %u, expected 1\n", lay.version,
                     lay.stacks->version);
        return 1;
    }
    spindle::scheduler sched({.workers = 2});
    spindle::mutex m;
    spindle::event ev(spindle::event_reset::manual);
    std::atomic<int> spinning{0};
    std::atomic<bool> release{false};
    std::vector<spindle::fiber> fs;

    m.lock();
    for (int i = 0; i < 2; ++i) fs.push_back(sched.spawn([&] { gdb_fibers_park_on_mutex(m); }));
    gdb_fibers_mutex_waiter = fs.back().get_id().value();
    fs.push_back(sched.spawn([&] { gdb_fibers_wait_on_event(ev); }));
    gdb_fibers_event_waiter = fs.back().get_id().value();
    wait_until([](census c) { return c.parked == 3; });

    fs.push_back(sched.spawn([] {}));
    wait_until([](census c) { return c.finished == 1; });

    for (int w = 0; w < 2; ++w)
        fs.push_back(sched.spawn(
            [&] {
                spinning.fetch_add(1);
                while (!release.load()) std::this_thread::yield();  // keeps its worker: no fiber yield
            },
            {.worker = w, .pinned = true}));
    wait_until([&](census c) { return c.running == 2 && spinning.load() == 2; });

    for (int i = 0; i < 2; ++i) fs.push_back(sched.spawn([] {}, {.worker = 0, .pinned = true}));

    census c = count();
    if (c.total != 8 || c.parked != 3 || c.finished != 1 || c.running != 2) {
        std::fprintf(stderr, "gdb_fibers_target: found %d fibers (%d parked, %d finished, %d running), "
                     "expected 8 (3, 1, 2)\n", c.total, c.parked, c.finished, c.running);
        m.unlock();  // the thread-safety analysis wants it held on no path out
        return 1;
    }
    gdb_fibers_stop_here();

    release = true;
    ev.set();
    m.unlock();
    for (auto& f : fs) f.join();
    // Each stack's owner is cleared as it is released, which for the last
    // reference dropped on a worker comes just after the join returns.
    wait_until([](census c) { return c.total == 0; });
    std::puts("gdb_fibers_target: ok");
    return 0;
}
