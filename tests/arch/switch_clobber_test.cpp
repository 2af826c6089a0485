// Would catch a missing clobber in the CACS switch.
//
// The switch is an inlined asm template; the compiler keeps across it only
// the registers the template does not list as clobbered. If a register were
// missing from the list, the compiler could keep a live value in it across
// the switch, and the context we switched to would destroy it.
//
// So: keep many integer and floating-point values live across a switch (more
// than fit in the callee-saved registers), switch to a context that writes
// garbage into every general-purpose and vector register it may touch, switch
// back, and check every value. A shared variable changed on the other side
// checks the "memory" clobber. This file is built at -O0, -O2 and -O3 (and
// -march=native, for AVX-512 registers where the CPU has them) by both
// compilers: the register allocator decides differently at each level.
#if defined(SPINDLE_NO_GTEST)
#include "mini_gtest.hpp"
#else
#include <gtest/gtest.h>
#endif

#include <cstdint>
#include <cstring>

#include <spindle/arch/context.hpp>
#include <spindle/memory/stack.hpp>

namespace {

using spindle::arch::context;
using spindle::arch::raw_context;

context g_main;
context g_other;
int g_shared = 0;   // checks the "memory" clobber
int* g_escaped = nullptr;
volatile std::uint64_t g_seed = 0x9e3779b97f4a7c15ull;
volatile double g_dseed = 1.25;

// Fill every register the ABI lets a callee change, and the callee-saved
// ones too (the switch must cover those as well), with a pattern.
__attribute__((noinline)) void scramble_registers() {
#if defined(__x86_64__)
    __asm__ volatile(
        "movabsq $0xdeadbeefcafebabe, %%rax\n\t"
        "movq %%rax, %%rbx\n\t"
        "movq %%rax, %%rcx\n\t"
        "movq %%rax, %%rdx\n\t"
        "movq %%rax, %%rsi\n\t"
        "movq %%rax, %%rdi\n\t"
        "movq %%rax, %%r8\n\t"
        "movq %%rax, %%r9\n\t"
        "movq %%rax, %%r10\n\t"
        "movq %%rax, %%r11\n\t"
        "movq %%rax, %%r12\n\t"
        "movq %%rax, %%r13\n\t"
        "movq %%rax, %%r14\n\t"
        "movq %%rax, %%r15\n\t"
        "movq %%rax, %%xmm0\n\t"
        "pshufd $0, %%xmm0, %%xmm0\n\t"
        "movdqa %%xmm0, %%xmm1\n\t"
        "movdqa %%xmm0, %%xmm2\n\t"
        "movdqa %%xmm0, %%xmm3\n\t"
        "movdqa %%xmm0, %%xmm4\n\t"
        "movdqa %%xmm0, %%xmm5\n\t"
        "movdqa %%xmm0, %%xmm6\n\t"
        "movdqa %%xmm0, %%xmm7\n\t"
        "movdqa %%xmm0, %%xmm8\n\t"
        "movdqa %%xmm0, %%xmm9\n\t"
        "movdqa %%xmm0, %%xmm10\n\t"
        "movdqa %%xmm0, %%xmm11\n\t"
        "movdqa %%xmm0, %%xmm12\n\t"
        "movdqa %%xmm0, %%xmm13\n\t"
        "movdqa %%xmm0, %%xmm14\n\t"
        "movdqa %%xmm0, %%xmm15\n\t"
#if defined(__AVX512F__)
        "vmovdqa64 %%zmm0, %%zmm16\n\t"
        "vmovdqa64 %%zmm0, %%zmm17\n\t"
        "vmovdqa64 %%zmm0, %%zmm18\n\t"
        "vmovdqa64 %%zmm0, %%zmm19\n\t"
        "vmovdqa64 %%zmm0, %%zmm20\n\t"
        "vmovdqa64 %%zmm0, %%zmm21\n\t"
        "vmovdqa64 %%zmm0, %%zmm22\n\t"
        "vmovdqa64 %%zmm0, %%zmm23\n\t"
        "vmovdqa64 %%zmm0, %%zmm24\n\t"
        "vmovdqa64 %%zmm0, %%zmm25\n\t"
        "vmovdqa64 %%zmm0, %%zmm26\n\t"
        "vmovdqa64 %%zmm0, %%zmm27\n\t"
        "vmovdqa64 %%zmm0, %%zmm28\n\t"
        "vmovdqa64 %%zmm0, %%zmm29\n\t"
        "vmovdqa64 %%zmm0, %%zmm30\n\t"
        "vmovdqa64 %%zmm0, %%zmm31\n\t"
        "kxnorw %%k0, %%k0, %%k1\n\t"
        "kmovw %%k1, %%k2\n\t"
        "kmovw %%k1, %%k3\n\t"
        "kmovw %%k1, %%k4\n\t"
        "kmovw %%k1, %%k5\n\t"
        "kmovw %%k1, %%k6\n\t"
        "kmovw %%k1, %%k7\n\t"
#endif
        :
        :
        : SPINDLE_X86_SWITCH_CLOBBERS, "rsi", "rdi");
#elif defined(__aarch64__)
    __asm__ volatile(
        "movz x9, #0xbeef\n\t"
        "movk x9, #0xdead, lsl #16\n\t"
        "mov x0, x9\n\t mov x1, x9\n\t mov x2, x9\n\t mov x3, x9\n\t"
        "mov x4, x9\n\t mov x5, x9\n\t mov x6, x9\n\t mov x7, x9\n\t"
        "mov x8, x9\n\t mov x10, x9\n\t mov x11, x9\n\t mov x12, x9\n\t"
        "mov x13, x9\n\t mov x14, x9\n\t mov x15, x9\n\t mov x16, x9\n\t mov x17, x9\n\t"
        "mov x19, x9\n\t mov x20, x9\n\t mov x21, x9\n\t mov x22, x9\n\t mov x23, x9\n\t"
        "mov x24, x9\n\t mov x25, x9\n\t mov x26, x9\n\t mov x27, x9\n\t mov x28, x9\n\t"
        "dup v0.2d, x9\n\t dup v1.2d, x9\n\t dup v2.2d, x9\n\t dup v3.2d, x9\n\t"
        "dup v4.2d, x9\n\t dup v5.2d, x9\n\t dup v6.2d, x9\n\t dup v7.2d, x9\n\t"
        "dup v8.2d, x9\n\t dup v9.2d, x9\n\t dup v10.2d, x9\n\t dup v11.2d, x9\n\t"
        "dup v12.2d, x9\n\t dup v13.2d, x9\n\t dup v14.2d, x9\n\t dup v15.2d, x9\n\t"
        "dup v16.2d, x9\n\t dup v17.2d, x9\n\t dup v18.2d, x9\n\t dup v19.2d, x9\n\t"
        "dup v20.2d, x9\n\t dup v21.2d, x9\n\t dup v22.2d, x9\n\t dup v23.2d, x9\n\t"
        "dup v24.2d, x9\n\t dup v25.2d, x9\n\t dup v26.2d, x9\n\t dup v27.2d, x9\n\t"
        "dup v28.2d, x9\n\t dup v29.2d, x9\n\t dup v30.2d, x9\n\t dup v31.2d, x9\n\t"
        :
        :
        : "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
          "x14", "x15", "x16", "x17", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
          "x27", "x28", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11",
          "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23",
          "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory");
#endif
}

[[noreturn]] void other_entry(raw_context* self, raw_context*) noexcept {
    spindle::arch::context_started(spindle::arch::context_of(self));
    for (;;) {
        scramble_registers();
        g_shared += 1;
        if (g_escaped != nullptr) *g_escaped += 100;
        scramble_registers();
        spindle::arch::switch_to(&g_other, &g_main);
    }
}

class SwitchClobber : public ::testing::Test {
protected:
    void SetUp() override {
        stack_ = spindle::detail::acquire_stack(spindle::min_stack_size);
        spindle::arch::make_context(&g_other.regs, stack_.top, &other_entry);
        spindle::arch::annotate_new_context(&g_other, stack_.top - stack_.usable, stack_.usable);
    }
    void TearDown() override {
        // The other context loops forever; it is simply abandoned.
        spindle::arch::annotate_destroy_context(&g_other);
        spindle::detail::release_stack(stack_);
    }
    spindle::detail::stack_region stack_;
};

TEST_F(SwitchClobber, IntegersLiveAcrossSwitchSurvive) {
    // 24 values: more than the 6 callee-saved GPRs, so some live in
    // caller-saved registers or on the stack at every optimization level.
    std::uint64_t s = g_seed;
    std::uint64_t v[24];
    std::uint64_t a0 = s * 3, a1 = s ^ 0x55, a2 = s + 7, a3 = s * 11, a4 = s >> 3, a5 = s << 5,
                  a6 = ~s, a7 = s * s, a8 = s + 0x1234, a9 = s ^ 0xffff0000, a10 = s * 13,
                  a11 = s + 99;
    for (int i = 0; i < 24; ++i) v[i] = s * static_cast<std::uint64_t>(i + 1) + 17;
    for (int round = 0; round < 3; ++round) {
        spindle::arch::switch_to(&g_main, &g_other);
        std::uint64_t t = g_seed;
        EXPECT_EQ(a0, t * 3);
        EXPECT_EQ(a1, t ^ 0x55);
        EXPECT_EQ(a2, t + 7);
        EXPECT_EQ(a3, t * 11);
        EXPECT_EQ(a4, t >> 3);
        EXPECT_EQ(a5, t << 5);
        EXPECT_EQ(a6, ~t);
        EXPECT_EQ(a7, t * t);
        EXPECT_EQ(a8, t + 0x1234);
        EXPECT_EQ(a9, t ^ 0xffff0000);
        EXPECT_EQ(a10, t * 13);
        EXPECT_EQ(a11, t + 99);
        for (int i = 0; i < 24; ++i) EXPECT_EQ(v[i], t * static_cast<std::uint64_t>(i + 1) + 17);
    }
}

TEST_F(SwitchClobber, DoublesLiveAcrossSwitchSurvive) {
    double d = g_dseed;
    double x0 = d * 2, x1 = d + 1, x2 = d * d, x3 = d / 3, x4 = d - 7, x5 = d * 5.5, x6 = d + 0.25,
           x7 = d * 9, x8 = d - 0.5, x9 = d * 1.5, x10 = d + 11, x11 = d * 13, x12 = d / 7,
           x13 = d + 3, x14 = d * 17, x15 = d - 2, x16 = d * 19, x17 = d + 23;
    for (int round = 0; round < 3; ++round) {
        spindle::arch::switch_to(&g_main, &g_other);
        double t = g_dseed;
        EXPECT_EQ(x0, t * 2);
        EXPECT_EQ(x1, t + 1);
        EXPECT_EQ(x2, t * t);
        EXPECT_EQ(x3, t / 3);
        EXPECT_EQ(x4, t - 7);
        EXPECT_EQ(x5, t * 5.5);
        EXPECT_EQ(x6, t + 0.25);
        EXPECT_EQ(x7, t * 9);
        EXPECT_EQ(x8, t - 0.5);
        EXPECT_EQ(x9, t * 1.5);
        EXPECT_EQ(x10, t + 11);
        EXPECT_EQ(x11, t * 13);
        EXPECT_EQ(x12, t / 7);
        EXPECT_EQ(x13, t + 3);
        EXPECT_EQ(x14, t * 17);
        EXPECT_EQ(x15, t - 2);
        EXPECT_EQ(x16, t * 19);
        EXPECT_EQ(x17, t + 23);
    }
}

TEST_F(SwitchClobber, VectorsLiveAcrossSwitchSurvive) {
    // Arrays the vectorizer keeps in vector registers at -O3.
    alignas(64) float in[32];
    for (int i = 0; i < 32; ++i) in[i] = static_cast<float>(g_dseed) * static_cast<float>(i);
    float acc[32];
    for (int i = 0; i < 32; ++i) acc[i] = in[i] * 2.0f + 1.0f;
    spindle::arch::switch_to(&g_main, &g_other);
    for (int i = 0; i < 32; ++i) acc[i] += in[i];
    for (int i = 0; i < 32; ++i)
        EXPECT_EQ(acc[i], static_cast<float>(g_dseed) * static_cast<float>(i) * 3.0f + 1.0f) << i;
}

TEST_F(SwitchClobber, MemoryChangedOnTheOtherSideIsReloaded) {
    g_shared = 1;
    int local = 5;
    g_escaped = &local;
    int before = g_shared;
    spindle::arch::switch_to(&g_main, &g_other);
    // Without the "memory" clobber the compiler could reuse the values it
    // loaded before the switch.
    EXPECT_EQ(g_shared, before + 1);
    EXPECT_EQ(local, 105);
    spindle::arch::switch_to(&g_main, &g_other);
    EXPECT_EQ(g_shared, before + 2);
    EXPECT_EQ(local, 205);
    g_escaped = nullptr;
}

TEST_F(SwitchClobber, ManySwitchesKeepTheStackAligned) {
    // The other side calls non-inlined functions after every landing; a
    // misaligned stack would crash SSE spills (movaps) there at -O0.
    std::uint64_t sum = 0;
    for (int i = 0; i < 1000; ++i) {
        spindle::arch::switch_to(&g_main, &g_other);
        sum += static_cast<std::uint64_t>(i);
    }
    EXPECT_EQ(sum, 999u * 1000u / 2u);
}

}  // namespace
