// spindle/runtime/detail/debug_layout.hpp — where a debugger finds the
// fibers. Internal.
//
// A debugger looking at a stopped process (tools/gdb/spindle.py: "info
// fibers", "fiber bt") can find a running fiber as some worker's `current`,
// but a suspended one is referenced only from a ready queue, a primitive's
// wait queue or a `fiber` handle. Every fiber, though, owns a stack, and
// every stack has a slot in the overflow registry (src/memory/stack.cpp),
// which records its mapping, its usable size and, from create_fiber to
// release_stack, that a fiber owns it and that fiber's id. The control block
// sits at a fixed place below the stack's top (create_fiber):
//
//     slot: guard_base, usable, owner_kind == fiber, owner_id
//     top   = guard_base + page + usable
//     fiber = (top - sizeof(fiber_ctx)) & ~(alignof(fiber_ctx) - 1)
//     check: fiber->id == owner_id
//
// So the debugger walks the registry and nothing is added to a spawn: the
// owner is recorded there anyway (for the overflow message). park() records
// the waiter a fiber parks on (fiber_ctx::parked_on), which tells parked
// from ready; two plain stores on a path that switches anyway.
//
// The two extern "C" objects below describe all of it with plain integers
// and addresses fixed at compile time, so the debugger needs no debug
// information for spindle's types: spindle_debug_stacks (src/memory/
// stack.cpp) the registry, spindle_debug_layout (src/runtime/
// debug_layout.cpp) the fiber and worker fields. The state is read with the
// process stopped; a thread stopped in the middle of a switch or a queue
// operation may leave a fiber between two states.
//
// Changing a field: bump `version` if its meaning changes, add new ones at
// the end, and change the formats in tools/gdb/spindle.py (static_asserts
// in the .cpp files name the sizes it unpacks).
#pragma once

#include <cstdint>

#include <spindle/arch/context.hpp>

extern "C" {

struct spindle_debug_stacks_t;  // src/memory/stack.cpp
extern const spindle_debug_stacks_t spindle_debug_stacks;

struct spindle_debug_layout_t {
    std::uint32_t version;           // 1
    std::uint32_t size;              // sizeof this struct
    const spindle_debug_stacks_t* stacks;
    // fiber_ctx (runtime/detail/worker.hpp)
    std::uint32_t fiber_size;        // sizeof
    std::uint32_t fiber_align;       // alignof
    std::uint32_t fiber_id;          // uint64
    std::uint32_t fiber_sp;          // ctx.regs.sp: the saved stack pointer
    std::uint32_t fiber_fp;          // ctx.regs.fp
    std::uint32_t fiber_pc;          // ctx.regs.pc
    std::uint32_t fiber_home;        // worker*
    std::uint32_t fiber_resumer;     // fiber_ctx*
    std::uint32_t fiber_join_state;  // void*; join_done_value once finished
    std::uint32_t fiber_parked_on;   // waiter*
    std::uint32_t fiber_pinned;      // bool
    // worker
    std::uint32_t worker_current;    // fiber_ctx*
    std::uint32_t worker_index;      // unsigned
    // waiter
    std::uint32_t waiter_state;      // uint32
    std::uint32_t park_parked_value;
    std::uint32_t park_notified_value;
    std::uint64_t join_done_value;   // detail::join_done
    // Where a fiber that never ran starts: its saved pc until it first runs.
    void (*fiber_entry)(spindle::arch::raw_context*, spindle::arch::raw_context*) noexcept;
};

extern const spindle_debug_layout_t spindle_debug_layout;

}  // extern "C"
