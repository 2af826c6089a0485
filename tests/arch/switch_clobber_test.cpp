// Would catch a missing clobber in the CACS switch.
//
// The switch is an inlined asm template; the compiler keeps across it only
// the registers the template does not list as clobbered. If a register were
// missing from the list, the compiler could keep a live value in it across
// the switch, and the context we switched to would destroy it.
//
// So: keep many integer and floating-point values live across a switch (more
// than fit in the callee-saved registers), switch to a context that writes
// garbage into every general-purpose and vector register right before it
// switches back, and check every value. The checks between two switches make
// no call: a call would clobber the caller-saved registers itself (every xmm
// register, under SysV), and the compiler would keep nothing there for the
// switch to lose. A shared variable changed on the other side checks the
// "memory" clobber; the generator's switch (runtime/generator.hpp, one
// record, a word in rax) is checked both ways too. This file is built at
// -O0, -O2 and -O3 by both compilers: the register allocator decides
// differently at each. scripts/clobber-mutations.sh removes one clobber at a
// time from the switch and checks that this test then fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include <spindle/arch/context.hpp>
#include <spindle/memory/stack.hpp>
#include <spindle/runtime/generator.hpp>

namespace {

using spindle::arch::context;
using spindle::arch::raw_context;

context g_main;
context g_other;
int g_shared = 0;   // checks the "memory" clobber
int* g_escaped = nullptr;
volatile std::uint64_t g_seed = 0x9e3779b97f4a7c15ull;
volatile double g_dseed = 1.25;

// Garbage into every register a switch may hand back changed, callee-saved
// ones included. A macro, written at the switch site: a function would
// restore the callee-saved registers on its way out. Its clobber list is
// spelled out rather than taken from the switch's, so that
// scripts/clobber-mutations.sh can shorten the switch's alone.
#if defined(__x86_64__)
#if defined(__AVX512F__)
#define CLOBBER_TEST_AVX512_FILL                                                                   \
    "vmovdqa64 %%zmm0, %%zmm16\n\t vmovdqa64 %%zmm0, %%zmm17\n\t vmovdqa64 %%zmm0, %%zmm18\n\t"    \
    "vmovdqa64 %%zmm0, %%zmm19\n\t vmovdqa64 %%zmm0, %%zmm20\n\t vmovdqa64 %%zmm0, %%zmm21\n\t"    \
    "vmovdqa64 %%zmm0, %%zmm22\n\t vmovdqa64 %%zmm0, %%zmm23\n\t vmovdqa64 %%zmm0, %%zmm24\n\t"    \
    "vmovdqa64 %%zmm0, %%zmm25\n\t vmovdqa64 %%zmm0, %%zmm26\n\t vmovdqa64 %%zmm0, %%zmm27\n\t"    \
    "vmovdqa64 %%zmm0, %%zmm28\n\t vmovdqa64 %%zmm0, %%zmm29\n\t vmovdqa64 %%zmm0, %%zmm30\n\t"    \
    "vmovdqa64 %%zmm0, %%zmm31\n\t kxnorw %%k0, %%k0, %%k1\n\t kmovw %%k1, %%k2\n\t"               \
    "kmovw %%k1, %%k3\n\t kmovw %%k1, %%k4\n\t kmovw %%k1, %%k5\n\t kmovw %%k1, %%k6\n\t"          \
    "kmovw %%k1, %%k7\n\t"
#define CLOBBER_TEST_AVX512_REGS                                                                   \
    , "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25",   \
        "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "k1", "k2", "k3", "k4", "k5", "k6", \
        "k7"
#else
#define CLOBBER_TEST_AVX512_FILL ""
#define CLOBBER_TEST_AVX512_REGS
#endif
#define SCRAMBLE_REGISTERS()                                                                       \
    __asm__ volatile(                                                                              \
        "movabsq $0xdeadbeefcafebabe, %%rax\n\t"                                                   \
        "movq %%rax, %%rbx\n\t movq %%rax, %%rcx\n\t movq %%rax, %%rdx\n\t"                         \
        "movq %%rax, %%rsi\n\t movq %%rax, %%rdi\n\t movq %%rax, %%r8\n\t"                          \
        "movq %%rax, %%r9\n\t movq %%rax, %%r10\n\t movq %%rax, %%r11\n\t"                          \
        "movq %%rax, %%r12\n\t movq %%rax, %%r13\n\t movq %%rax, %%r14\n\t movq %%rax, %%r15\n\t"   \
        "movq %%rax, %%xmm0\n\t pshufd $0, %%xmm0, %%xmm0\n\t"                                      \
        "movdqa %%xmm0, %%xmm1\n\t movdqa %%xmm0, %%xmm2\n\t movdqa %%xmm0, %%xmm3\n\t"            \
        "movdqa %%xmm0, %%xmm4\n\t movdqa %%xmm0, %%xmm5\n\t movdqa %%xmm0, %%xmm6\n\t"            \
        "movdqa %%xmm0, %%xmm7\n\t movdqa %%xmm0, %%xmm8\n\t movdqa %%xmm0, %%xmm9\n\t"            \
        "movdqa %%xmm0, %%xmm10\n\t movdqa %%xmm0, %%xmm11\n\t movdqa %%xmm0, %%xmm12\n\t"         \
        "movdqa %%xmm0, %%xmm13\n\t movdqa %%xmm0, %%xmm14\n\t movdqa %%xmm0, %%xmm15\n\t"         \
        CLOBBER_TEST_AVX512_FILL                                                                   \
        :                                                                                          \
        :                                                                                          \
        : "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", \
          "r15", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",    \
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15" CLOBBER_TEST_AVX512_REGS, "cc",      \
          "memory")
#elif defined(__aarch64__)
#define SCRAMBLE_REGISTERS()                                                                       \
    __asm__ volatile(                                                                              \
        "movz x9, #0xbeef\n\t"                                                                     \
        "movk x9, #0xdead, lsl #16\n\t"                                                            \
        "mov x0, x9\n\t mov x1, x9\n\t mov x2, x9\n\t mov x3, x9\n\t"                              \
        "mov x4, x9\n\t mov x5, x9\n\t mov x6, x9\n\t mov x7, x9\n\t"                              \
        "mov x8, x9\n\t mov x10, x9\n\t mov x11, x9\n\t mov x12, x9\n\t"                           \
        "mov x13, x9\n\t mov x14, x9\n\t mov x15, x9\n\t mov x16, x9\n\t mov x17, x9\n\t"          \
        "mov x19, x9\n\t mov x20, x9\n\t mov x21, x9\n\t mov x22, x9\n\t mov x23, x9\n\t"          \
        "mov x24, x9\n\t mov x25, x9\n\t mov x26, x9\n\t mov x27, x9\n\t mov x28, x9\n\t"          \
        "dup v0.2d, x9\n\t dup v1.2d, x9\n\t dup v2.2d, x9\n\t dup v3.2d, x9\n\t"                  \
        "dup v4.2d, x9\n\t dup v5.2d, x9\n\t dup v6.2d, x9\n\t dup v7.2d, x9\n\t"                  \
        "dup v8.2d, x9\n\t dup v9.2d, x9\n\t dup v10.2d, x9\n\t dup v11.2d, x9\n\t"                \
        "dup v12.2d, x9\n\t dup v13.2d, x9\n\t dup v14.2d, x9\n\t dup v15.2d, x9\n\t"              \
        "dup v16.2d, x9\n\t dup v17.2d, x9\n\t dup v18.2d, x9\n\t dup v19.2d, x9\n\t"              \
        "dup v20.2d, x9\n\t dup v21.2d, x9\n\t dup v22.2d, x9\n\t dup v23.2d, x9\n\t"              \
        "dup v24.2d, x9\n\t dup v25.2d, x9\n\t dup v26.2d, x9\n\t dup v27.2d, x9\n\t"              \
        "dup v28.2d, x9\n\t dup v29.2d, x9\n\t dup v30.2d, x9\n\t dup v31.2d, x9\n\t"              \
        :                                                                                          \
        :                                                                                          \
        : "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",  \
          "x14", "x15", "x16", "x17", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",       \
          "x27", "x28", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11",   \
          "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23",       \
          "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory")
#endif

[[noreturn]] void other_entry(raw_context* self, raw_context*) noexcept {
    spindle::arch::context_started(spindle::arch::context_of(self));
    for (;;) {
        g_shared += 1;
        if (g_escaped != nullptr) *g_escaped += 100;
        SCRAMBLE_REGISTERS();
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

// The comparisons add up mismatches without a call (see the top of the file);
// one EXPECT at the end reports them.
#define COUNT_MISMATCH(bad, value, expected) (bad) += ((value) != (expected)) ? 1u : 0u

// The generator tests' live set: eight integers and four doubles made from
// the seeds `s` and `d`, declared and checked by macros so that they stay in
// the test's own frame (a helper function would take them out of the
// registers under test).
#define DECLARE_GENERATOR_LIVE_SET(s, d)                                                             \
    std::uint64_t a0 = (s) * 3, a1 = (s) ^ 0x55, a2 = (s) + 7, a3 = (s) * 11, a4 = (s) >> 3,          \
                  a5 = (s) << 5, a6 = ~(s), a7 = (s) * (s);                                           \
    double x0 = (d) * 2, x1 = (d) + 1, x2 = (d) * (d), x3 = (d) / 3
#define COUNT_GENERATOR_LIVE_SET(bad, t, e) \
    do {                                    \
        COUNT_MISMATCH(bad, a0, (t) * 3);   \
        COUNT_MISMATCH(bad, a1, (t) ^ 0x55); \
        COUNT_MISMATCH(bad, a2, (t) + 7);   \
        COUNT_MISMATCH(bad, a3, (t) * 11);  \
        COUNT_MISMATCH(bad, a4, (t) >> 3);  \
        COUNT_MISMATCH(bad, a5, (t) << 5);  \
        COUNT_MISMATCH(bad, a6, ~(t));      \
        COUNT_MISMATCH(bad, a7, (t) * (t)); \
        COUNT_MISMATCH(bad, x0, (e) * 2);   \
        COUNT_MISMATCH(bad, x1, (e) + 1);   \
        COUNT_MISMATCH(bad, x2, (e) * (e)); \
        COUNT_MISMATCH(bad, x3, (e) / 3);   \
    } while (0)

TEST_F(SwitchClobber, IntegersLiveAcrossSwitchSurvive) {
    // 14 scalars, more than the 6 callee-saved GPRs, plus an array: some live
    // in caller-saved registers or on the stack at every optimization level.
    std::uint64_t s = g_seed;
    std::uint64_t v[24];
    std::uint64_t a0 = s * 3, a1 = s ^ 0x55, a2 = s + 7, a3 = s * 11, a4 = s >> 3, a5 = s << 5,
                  a6 = ~s, a7 = s * s, a8 = s + 0x1234, a9 = s ^ 0xffff0000, a10 = s * 13,
                  a11 = s + 99, a12 = s * 29, a13 = s ^ 0x0f0f;
    for (int i = 0; i < 24; ++i) v[i] = s * static_cast<std::uint64_t>(i + 1) + 17;
    unsigned bad = 0;
    for (int round = 0; round < 3; ++round) {
        spindle::arch::switch_to(&g_main, &g_other);
        const std::uint64_t t = g_seed;
        COUNT_MISMATCH(bad, a0, t * 3);
        COUNT_MISMATCH(bad, a1, t ^ 0x55);
        COUNT_MISMATCH(bad, a2, t + 7);
        COUNT_MISMATCH(bad, a3, t * 11);
        COUNT_MISMATCH(bad, a4, t >> 3);
        COUNT_MISMATCH(bad, a5, t << 5);
        COUNT_MISMATCH(bad, a6, ~t);
        COUNT_MISMATCH(bad, a7, t * t);
        COUNT_MISMATCH(bad, a8, t + 0x1234);
        COUNT_MISMATCH(bad, a9, t ^ 0xffff0000);
        COUNT_MISMATCH(bad, a10, t * 13);
        COUNT_MISMATCH(bad, a11, t + 99);
        COUNT_MISMATCH(bad, a12, t * 29);
        COUNT_MISMATCH(bad, a13, t ^ 0x0f0f);
        for (int i = 0; i < 24; ++i) COUNT_MISMATCH(bad, v[i], t * static_cast<std::uint64_t>(i + 1) + 17);
    }
    EXPECT_EQ(bad, 0u);
}

TEST_F(SwitchClobber, DoublesLiveAcrossSwitchSurvive) {
    // 18 doubles: more than the 16 vector registers, all of which the
    // compiler may use across a switch that failed to list one.
    double d = g_dseed;
    double x0 = d * 2, x1 = d + 1, x2 = d * d, x3 = d / 3, x4 = d - 7, x5 = d * 5.5, x6 = d + 0.25,
           x7 = d * 9, x8 = d - 0.5, x9 = d * 1.5, x10 = d + 11, x11 = d * 13, x12 = d / 7,
           x13 = d + 3, x14 = d * 17, x15 = d - 2, x16 = d * 19, x17 = d + 23;
    unsigned bad = 0;
    for (int round = 0; round < 3; ++round) {
        spindle::arch::switch_to(&g_main, &g_other);
        const double t = g_dseed;
        COUNT_MISMATCH(bad, x0, t * 2);
        COUNT_MISMATCH(bad, x1, t + 1);
        COUNT_MISMATCH(bad, x2, t * t);
        COUNT_MISMATCH(bad, x3, t / 3);
        COUNT_MISMATCH(bad, x4, t - 7);
        COUNT_MISMATCH(bad, x5, t * 5.5);
        COUNT_MISMATCH(bad, x6, t + 0.25);
        COUNT_MISMATCH(bad, x7, t * 9);
        COUNT_MISMATCH(bad, x8, t - 0.5);
        COUNT_MISMATCH(bad, x9, t * 1.5);
        COUNT_MISMATCH(bad, x10, t + 11);
        COUNT_MISMATCH(bad, x11, t * 13);
        COUNT_MISMATCH(bad, x12, t / 7);
        COUNT_MISMATCH(bad, x13, t + 3);
        COUNT_MISMATCH(bad, x14, t * 17);
        COUNT_MISMATCH(bad, x15, t - 2);
        COUNT_MISMATCH(bad, x16, t * 19);
        COUNT_MISMATCH(bad, x17, t + 23);
    }
    EXPECT_EQ(bad, 0u);
}

TEST_F(SwitchClobber, VectorsLiveAcrossSwitchSurvive) {
    // Arrays the vectorizer keeps in vector registers at -O3.
    alignas(64) float in[32];
    for (int i = 0; i < 32; ++i) in[i] = static_cast<float>(g_dseed) * static_cast<float>(i);
    float acc[32];
    for (int i = 0; i < 32; ++i) acc[i] = in[i] * 2.0f + 1.0f;
    spindle::arch::switch_to(&g_main, &g_other);
    for (int i = 0; i < 32; ++i) acc[i] += in[i];
    unsigned bad = 0;
    const float t = static_cast<float>(g_dseed);
    for (int i = 0; i < 32; ++i) COUNT_MISMATCH(bad, acc[i], t * static_cast<float>(i) * 3.0f + 1.0f);
    EXPECT_EQ(bad, 0u);
}

TEST_F(SwitchClobber, MemoryChangedOnTheOtherSideIsReloaded) {
    g_shared = 1;
    int local = 5;
    g_escaped = &local;
    int before = g_shared;
    spindle::arch::switch_to(&g_main, &g_other);
    // Without the "memory" clobber the compiler could reuse the values it
    // loaded before the switch. Each is read here, into a local, right after
    // the switch: EXPECT_EQ takes its operands by reference, and a
    // comparison GoogleTest makes out of line would read the memory itself
    // and see the change whatever the clobbers say.
    int shared = g_shared;
    int seen = local;
    EXPECT_EQ(shared, before + 1);
    EXPECT_EQ(seen, 105);
    spindle::arch::switch_to(&g_main, &g_other);
    shared = g_shared;
    seen = local;
    EXPECT_EQ(shared, before + 2);
    EXPECT_EQ(seen, 205);
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

// The generator's switch (arch::switch_shared, both directions). A resume and
// a yield may each call a slow path (exception state) around the switch, so
// the compiler keeps nothing in caller-saved registers across them: these
// catch a missing callee-saved clobber, the plain switch above the rest.
TEST_F(SwitchClobber, ConsumerValuesSurviveAGeneratorResume) {
    spindle::generator<int> g([](auto& y) {
        for (int i = 0;; ++i) {
            SCRAMBLE_REGISTERS();
            y(i);
        }
    });
    std::uint64_t s = g_seed;
    double d = g_dseed;
    DECLARE_GENERATOR_LIVE_SET(s, d);
    unsigned bad = 0;
    for (int round = 0; round < 3; ++round) {
        if (!g.next()) ++bad;
        const std::uint64_t t = g_seed;
        const double e = g_dseed;
        COUNT_GENERATOR_LIVE_SET(bad, t, e);
        COUNT_MISMATCH(bad, g.value(), round);
    }
    EXPECT_EQ(bad, 0u);
}

TEST_F(SwitchClobber, BodyValuesSurviveAYield) {
    unsigned bad = 0;
    spindle::generator<int> g([&bad](auto& y) {
        std::uint64_t s = g_seed;
        double d = g_dseed;
        DECLARE_GENERATOR_LIVE_SET(s, d);
        unsigned mine = 0;
        for (int round = 0; round < 3; ++round) {
            y(round);
            const std::uint64_t t = g_seed;
            const double e = g_dseed;
            COUNT_GENERATOR_LIVE_SET(mine, t, e);
        }
        bad = mine;
    });
    for (int round = 0; round < 4; ++round) {
        SCRAMBLE_REGISTERS();
        (void)g.next();
    }
    EXPECT_EQ(g.done(), true);
    EXPECT_EQ(bad, 0u);
}

}  // namespace
