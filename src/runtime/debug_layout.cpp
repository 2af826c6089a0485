// spindle_debug_layout: the fiber and worker fields a debugger reads
// (include/spindle/runtime/detail/debug_layout.hpp, tools/gdb/spindle.py).
#include <spindle/runtime/detail/debug_layout.hpp>

#include <cstddef>
#include <cstdint>

#include <spindle/runtime/detail/worker.hpp>
#include <spindle/runtime/fiber.hpp>  // fiber_entry

namespace {
namespace d = spindle::detail;
constexpr std::uint32_t regs_at = offsetof(d::fiber_ctx, ctx) + offsetof(spindle::arch::context, regs);
}  // namespace

// tools/gdb/spindle.py unpacks it with a fixed format ("<IIQ16IQQ").
static_assert(sizeof(spindle_debug_layout_t) == 96 && offsetof(spindle_debug_layout_t, join_done_value) == 80,
              "spindle_debug_layout changed: change _LAYOUT_FORMAT in tools/gdb/spindle.py too");

extern "C" __attribute__((used)) const spindle_debug_layout_t spindle_debug_layout = {
    .version = 1,
    .size = sizeof(spindle_debug_layout_t),
    .stacks = &spindle_debug_stacks,
    .fiber_size = sizeof(d::fiber_ctx),
    .fiber_align = alignof(d::fiber_ctx),
    .fiber_id = offsetof(d::fiber_ctx, id),
    .fiber_sp = regs_at + offsetof(spindle::arch::raw_context, sp),
    .fiber_fp = regs_at + offsetof(spindle::arch::raw_context, fp),
    .fiber_pc = regs_at + offsetof(spindle::arch::raw_context, pc),
    .fiber_home = offsetof(d::fiber_ctx, home),
    .fiber_resumer = offsetof(d::fiber_ctx, resumer),
    .fiber_join_state = offsetof(d::fiber_ctx, join_state),
    .fiber_parked_on = offsetof(d::fiber_ctx, parked_on),
    .fiber_pinned = offsetof(d::fiber_ctx, pinned),
    .worker_current = offsetof(d::worker, current),
    .worker_index = offsetof(d::worker, index),
    .waiter_state = offsetof(d::waiter, state),
    .park_parked_value = d::park_parked,
    .park_notified_value = d::park_notified,
    .join_done_value = 1,  // join_done's value (an address constant it cannot be read from here)
    .fiber_entry = &d::fiber_entry,
};
