// Landing pads for control-flow protection (arch/x86_64_sysv.hpp,
// arch/aarch64.hpp). A switch ends in an indirect branch; where the build
// asks for branch protection -- -fcf-protection (x86-64 IBT) or
// -mbranch-protection=standard (AArch64 BTI) -- every place it can land must
// start with the matching instruction, or a CPU that enforces it faults:
//   x86-64 IBT    endbr64 (f3 0f 1e fa)
//   AArch64 BTI   bti j / bti jc at a switch's landing point, and the switch
//                 must branch through x16 or x17 so that an entry function's
//                 `bti c` (or paciasp) accepts it.
// The test reads the code at the addresses a suspended context will be
// resumed at. In builds without branch protection it checks only what holds
// everywhere (the AArch64 trampoline and branch register).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include <spindle/arch/context.hpp>
#include <spindle/memory/stack.hpp>
#include <spindle/runtime/fiber.hpp>

namespace {

using spindle::arch::context;
using spindle::arch::raw_context;

#if defined(__x86_64__)
constexpr bool kBranchProtection =
#if defined(__CET__) && (__CET__ & 1)
    true;
#else
    false;
#endif
bool is_landing_pad(const void* pc) {
    static constexpr unsigned char endbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
    return std::memcmp(pc, endbr64, sizeof endbr64) == 0;
}
bool is_entry_pad(const void* pc) { return is_landing_pad(pc); }
#elif defined(__aarch64__)
constexpr bool kBranchProtection =
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
    true;
#else
    false;
#endif
std::uint32_t insn_at(const void* pc) {
    std::uint32_t v;
    std::memcpy(&v, pc, sizeof v);
    return v;
}
constexpr std::uint32_t kBtiC = 0xd503245f, kBtiJ = 0xd503249f, kBtiJc = 0xd50324df, kPaciasp = 0xd503233f;
bool is_landing_pad(const void* pc) { return insn_at(pc) == kBtiJ || insn_at(pc) == kBtiJc; }
// A function's first instruction under BTI: bti c, bti jc, or paciasp (an
// implicit bti c).
bool is_entry_pad(const void* pc) {
    const std::uint32_t i = insn_at(pc);
    return i == kBtiC || i == kBtiJc || i == kPaciasp;
}
// The `br` right before a landing point: through x16 or x17?
bool br_through_x16_or_x17(const void* landing) {
    const std::uint32_t i = insn_at(static_cast<const char*>(landing) - 4);
    return i == (0xd61f0000u | (16u << 5)) || i == (0xd61f0000u | (17u << 5));
}
#endif

context g_main, g_other;
const void* g_main_landing = nullptr;

[[noreturn]] void other_entry(raw_context* self, raw_context*) noexcept {
    spindle::arch::context_started(spindle::arch::context_of(self));
    for (;;) {
        g_main_landing = g_main.regs.pc;  // where main's switch will land
        spindle::arch::switch_to(&g_other, &g_main);
    }
}

TEST(BranchProtection, SwitchLandsOnALandingPad) {
    spindle::detail::stack_region stack = spindle::detail::acquire_stack(spindle::min_stack_size);
    spindle::arch::make_context(&g_other.regs, stack.top, &other_entry);
    spindle::arch::annotate_new_context(&g_other, stack.top - stack.usable, stack.usable);
    spindle::arch::switch_to(&g_main, &g_other);
    ASSERT_NE(g_main_landing, nullptr);
    const void* other_landing = g_other.regs.pc;  // where other's switch will land
    if (kBranchProtection) {
        EXPECT_TRUE(is_landing_pad(g_main_landing));
        EXPECT_TRUE(is_landing_pad(other_landing));
    }
#if defined(__aarch64__)
    EXPECT_TRUE(br_through_x16_or_x17(g_main_landing));
    EXPECT_TRUE(br_through_x16_or_x17(other_landing));
#endif
    spindle::arch::annotate_destroy_context(&g_other);
    spindle::detail::release_stack(stack);
}

// The generator's switch (raw_switch_shared): two contexts in one record.
struct shared_pair {
    context self;    // the side started below
    context caller;  // this test's side
};
shared_pair g_pair;
const void* g_caller_landing = nullptr;
constexpr std::size_t kSelfOff = offsetof(shared_pair, self);
constexpr std::size_t kCallerOff = offsetof(shared_pair, caller);

[[noreturn]] void shared_entry(raw_context* self, raw_context*) noexcept {
    void* shared = self;  // self is the record's first member
    spindle::arch::context_started(&g_pair.self);
    for (;;) {
        g_caller_landing = g_pair.caller.regs.pc;
        std::uintptr_t word = 1;
        spindle::arch::switch_shared<kSelfOff, kCallerOff>(shared, word);
    }
}

TEST(BranchProtection, SharedSwitchLandsOnALandingPad) {
    static_assert(kSelfOff == 0, "the entry treats its context as the record");
    spindle::detail::stack_region stack = spindle::detail::acquire_stack(spindle::min_stack_size);
    spindle::arch::make_context(&g_pair.self.regs, stack.top, &shared_entry);
    spindle::arch::annotate_new_context(&g_pair.self, stack.top - stack.usable, stack.usable);
    void* shared = &g_pair;
    std::uintptr_t word = 0;
    spindle::arch::switch_shared<kCallerOff, kSelfOff, false>(shared, word);
    EXPECT_EQ(word, 1u);
    ASSERT_NE(g_caller_landing, nullptr);
    const void* self_landing = g_pair.self.regs.pc;
    if (kBranchProtection) {
        EXPECT_TRUE(is_landing_pad(g_caller_landing));
        EXPECT_TRUE(is_landing_pad(self_landing));
    }
    spindle::arch::annotate_destroy_context(&g_pair.self);
    spindle::detail::release_stack(stack);
}

// A fresh context is entered by the same indirect branch: on x86-64 at its
// entry function, on AArch64 at the trampoline that clears the frame chain.
TEST(BranchProtection, FreshContextsStartOnALandingPad) {
    alignas(16) static unsigned char stack[256];  // make_context writes at its top; never run
    raw_context fresh;
    spindle::arch::make_context(&fresh, stack + sizeof stack, &other_entry);
#if defined(__aarch64__)
    // The trampoline: bti jc whatever the build (it is assembly).
    EXPECT_EQ(insn_at(fresh.pc), kBtiJc);
    if (kBranchProtection) {
        EXPECT_TRUE(is_entry_pad(reinterpret_cast<const void*>(&other_entry)));
        EXPECT_TRUE(is_entry_pad(reinterpret_cast<const void*>(&spindle::detail::fiber_entry)));
    }
#else
    if (kBranchProtection) {
        EXPECT_TRUE(is_entry_pad(fresh.pc));
        EXPECT_TRUE(is_entry_pad(reinterpret_cast<const void*>(&spindle::detail::fiber_entry)));
    }
#endif
    if (!kBranchProtection) std::printf("built without branch protection: landing pads not required\n");
}

}  // namespace
