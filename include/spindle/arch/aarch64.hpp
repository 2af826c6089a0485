// spindle/arch/aarch64.hpp — the CACS context switch for AArch64 (AAPCS64).
//
// Same design as x86_64_sysv.hpp (read that header first): an inlined asm
// template that saves sp, the frame pointer (x29) and a resume address into
// the context record and declares everything else clobbered, so the compiler
// keeps across the switch only what is live.
//
//     adr  x9, 1f               resume address
//     mov  x10, sp
//     str  x10, [from, #0]      save sp
//     str  x29, [from, #8]      save fp (x29 cannot be a clobber while it is the frame pointer)
//     str  x9,  [from, #16]
//     ldr  x10, [to, #0]
//     mov  sp, x10
//     ldr  x29, [to, #8]
//     ldr  x16, [to, #16]
//     br   x16
//  1: bti  j                    (only with -mbranch-protection: BTI)
//
// `to` travels in x0 and `from` in x1 ("+r" operands pinned there), so a fresh
// context starts in entry(self = x0, from = x1). Clobbered: x2-x18, x19-x28,
// x30 (lr), all of v0-v31 (AAPCS64 makes the low halves d8-d15 callee-saved:
// a template that left v8-v15 out would let a double live in d8 leak between
// fibers), with SVE also p0-p15 and ffr (the z registers are the v registers
// widened), "cc" and "memory".
//
// Branch protection (-mbranch-protection=standard, as hardened distributions
// build): with BTI, an indirect branch must land on a `bti` of the right
// kind. The switch branches through x16, which both a `bti c` (the first
// instruction of a compiled function, or its paciasp) and a `bti j` accept,
// and its own landing point starts with `bti j`. PAC signs a return address
// with the stack pointer of its own frame; a function that switches returns
// on its own stack with that same sp, so PAC needs nothing of the switch.
//
// A fresh context enters through spindle_aarch64_context_start
// (src/arch/context.cpp), which clears x29 and x30 before it branches to the
// entry: an unwinder (backtrace(), gdb) then stops at the entry function
// instead of walking into whatever the switching code left in x30.
//
// FPCR (rounding mode, flush-to-zero) is saved and restored on every switch
// only when SPINDLE_SAVE_FP_CONTROL is 1 (config.hpp), as the x87 control
// word and MXCSR are on x86-64.
#pragma once

#include <cstddef>
#include <cstdint>

#include <spindle/arch/config.hpp>

namespace spindle::arch {

struct raw_context {
    void* sp = nullptr;  // 0x00
    void* fp = nullptr;  // 0x08 x29
    void* pc = nullptr;  // 0x10
};
static_assert(offsetof(raw_context, sp) == 0x00, "asm reads sp at 0x00");
static_assert(offsetof(raw_context, fp) == 0x08, "asm reads fp at 0x08");
static_assert(offsetof(raw_context, pc) == 0x10, "asm reads pc at 0x10");

#if defined(__ARM_FEATURE_SVE)
// The predicate registers and the first-fault register: AAPCS64 leaves them
// to the caller, so the compiler may keep a predicate live across an asm
// statement that does not name them. (Clang 19 does not know "ffr" as a
// clobber, nor allocates it.)
#if defined(__clang__)
#define SPINDLE_AARCH64_FFR_CLOBBER
#else
#define SPINDLE_AARCH64_FFR_CLOBBER , "ffr"
#endif
#define SPINDLE_AARCH64_SVE_CLOBBERS                                                               \
    , "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12", "p13", "p14", \
        "p15" SPINDLE_AARCH64_FFR_CLOBBER
#else
#define SPINDLE_AARCH64_SVE_CLOBBERS
#endif

// Everything but x0/x1 (the operands), sp and x29 (saved explicitly).
#define SPINDLE_AARCH64_SWITCH_CLOBBERS                                                            \
    "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15",      \
        "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", \
        "x30", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12",   \
        "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", \
        "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory" SPINDLE_AARCH64_SVE_CLOBBERS

// The landing point of a switch: `bti j` (hint #36) where BTI is on. A NOP
// on cores without BTI, but emitted only when the build asks for BTI.
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define SPINDLE_AARCH64_LANDING "hint #36\n\t"
#else
#define SPINDLE_AARCH64_LANDING ""
#endif

// FPCR, carried across a switch only when SPINDLE_SAVE_FP_CONTROL is 1.
struct fp_control {
#if SPINDLE_SAVE_FP_CONTROL
    std::uint64_t fpcr;
    static SPINDLE_ALWAYS_INLINE fp_control save() noexcept {
        fp_control c;
        __asm__ volatile("mrs %0, fpcr" : "=r"(c.fpcr));
        return c;
    }
    SPINDLE_ALWAYS_INLINE void restore() const noexcept { __asm__ volatile("msr fpcr, %0" : : "r"(fpcr)); }
#else
    static SPINDLE_ALWAYS_INLINE fp_control save() noexcept { return {}; }
    SPINDLE_ALWAYS_INLINE void restore() const noexcept {}
#endif
};

SPINDLE_ALWAYS_INLINE void raw_switch(raw_context* from, raw_context* to) noexcept {
    [[maybe_unused]] const fp_control fpc = fp_control::save();
    register raw_context* t __asm__("x0") = to;
    register raw_context* f __asm__("x1") = from;
    __asm__ volatile(
        "adr x9, 1f\n\t"
        "mov x10, sp\n\t"
        "str x10, [%[f], #0]\n\t"
        "str x29, [%[f], #8]\n\t"
        "str x9, [%[f], #16]\n\t"
        "ldr x10, [%[t], #0]\n\t"
        "mov sp, x10\n\t"
        "ldr x29, [%[t], #8]\n\t"
        "ldr x16, [%[t], #16]\n\t"
        "br x16\n"
        "1:\n\t" SPINDLE_AARCH64_LANDING
        : [f] "+r"(f), [t] "+r"(t)
        :
        : SPINDLE_AARCH64_SWITCH_CLOBBERS);
    fpc.restore();
}

// See raw_switch_shared in x86_64_sysv.hpp: `shared` travels in x0 and
// `word` in x1 (loaded only when this side sends it).
template <std::size_t FromOff, std::size_t ToOff, bool Send = true>
SPINDLE_ALWAYS_INLINE void raw_switch_shared(void*& shared, std::uintptr_t& word) noexcept {
    [[maybe_unused]] const fp_control fpc = fp_control::save();
    register void* s __asm__("x0") = shared;
    register std::uintptr_t w __asm__("x1");
    if constexpr (Send) w = word;
#define SPINDLE_AARCH64_SWITCH_SHARED_ASM                                                          \
        "adr x9, 1f\n\t"                                                                           \
        "mov x10, sp\n\t"                                                                          \
        "str x10, [%[s], %[fo]]\n\t"                                                               \
        "str x29, [%[s], %[fo] + 8]\n\t"                                                           \
        "str x9, [%[s], %[fo] + 16]\n\t"                                                           \
        "ldr x10, [%[s], %[to]]\n\t"                                                               \
        "mov sp, x10\n\t"                                                                          \
        "ldr x29, [%[s], %[to] + 8]\n\t"                                                           \
        "ldr x16, [%[s], %[to] + 16]\n\t"                                                          \
        "br x16\n"                                                                                  \
        "1:\n\t" SPINDLE_AARCH64_LANDING
    if constexpr (Send) {
        __asm__ volatile(SPINDLE_AARCH64_SWITCH_SHARED_ASM
                         : [s] "+r"(s), "+r"(w)
                         : [fo] "i"(FromOff), [to] "i"(ToOff)
                         : SPINDLE_AARCH64_SWITCH_CLOBBERS);
    } else {
        // Receive only: x1 is an output, never read before the switch.
        __asm__ volatile(SPINDLE_AARCH64_SWITCH_SHARED_ASM
                         : [s] "+r"(s), "=r"(w)
                         : [fo] "i"(FromOff), [to] "i"(ToOff)
                         : SPINDLE_AARCH64_SWITCH_CLOBBERS);
    }
#undef SPINDLE_AARCH64_SWITCH_SHARED_ASM
    shared = s;
    word = w;
    fpc.restore();
}

}  // namespace spindle::arch

// The first landing point of every fresh context (src/arch/context.cpp):
// moves the entry from x29 to x16, clears x29 and x30 (the end of the frame
// chain and of the unwinder's walk) and branches to the entry, with x0 and x1
// as the switch left them.
extern "C" void spindle_aarch64_context_start() noexcept;

namespace spindle::arch {

inline void make_context(raw_context* ctx, void* stack_top,
                         void (*entry)(raw_context* self, raw_context* from)) noexcept {
    // AAPCS64: sp is 16-byte aligned at all times; there is no pushed return
    // address, the link register (x30) holds it. The entry never returns.
    // The first switch loads fp into x29: it carries the entry to the
    // trampoline, which clears it.
    auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
    ctx->sp = reinterpret_cast<void*>(top);
    ctx->fp = reinterpret_cast<void*>(entry);
    ctx->pc = reinterpret_cast<void*>(&spindle_aarch64_context_start);
}

inline constexpr const char* abi_name = "AArch64 AAPCS64";

SPINDLE_ALWAYS_INLINE void cpu_relax() noexcept { __asm__ volatile("yield" ::: "memory"); }

}  // namespace spindle::arch
