// The switch built with SPINDLE_SAVE_FP_CONTROL=1 (this file defines it, see
// tests/CMakeLists.txt) carries each side's floating-point control state:
// the rounding mode that one context sets is not the one another context
// sees, and each finds its own again when it is switched back to. (Without
// the option the state is shared, as x86_64_sysv.hpp and config.hpp say.)
#include <gtest/gtest.h>

#include <cfenv>

#include <spindle/arch/context.hpp>
#include <spindle/memory/stack.hpp>

static_assert(SPINDLE_SAVE_FP_CONTROL == 1, "build this test with -DSPINDLE_SAVE_FP_CONTROL=1");

namespace {

using spindle::arch::context;
using spindle::arch::raw_context;

context g_main;
context g_other;
int g_other_saw_own_mode = 0;  // rounds in which the other side found its mode kept

[[noreturn]] void other_entry(raw_context* self, raw_context*) noexcept {
    spindle::arch::context_started(spindle::arch::context_of(self));
    std::fesetround(FE_TOWARDZERO);
    for (;;) {
        spindle::arch::switch_to(&g_other, &g_main);
        if (std::fegetround() == FE_TOWARDZERO) ++g_other_saw_own_mode;
    }
}

TEST(SwitchFpControl, EachContextKeepsItsRoundingMode) {
    spindle::detail::stack_region stack = spindle::detail::acquire_stack(spindle::min_stack_size);
    spindle::arch::make_context(&g_other.regs, stack.top, &other_entry);
    spindle::arch::annotate_new_context(&g_other, stack.top - stack.usable, stack.usable);
    ASSERT_EQ(std::fesetround(FE_UPWARD), 0);
    for (int round = 0; round < 3; ++round) {
        spindle::arch::switch_to(&g_main, &g_other);
        EXPECT_EQ(std::fegetround(), FE_UPWARD) << "round " << round;
    }
    EXPECT_EQ(g_other_saw_own_mode, 2);  // resumed twice after its first switch
    std::fesetround(FE_TONEAREST);
    // The other context loops forever; it is simply abandoned.
    spindle::arch::annotate_destroy_context(&g_other);
    spindle::detail::release_stack(stack);
}

}  // namespace
