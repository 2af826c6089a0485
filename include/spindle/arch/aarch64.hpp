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
//     ldr  x9,  [to, #16]
//     br   x9
//  1:
//
// `to` travels in x0 and `from` in x1 ("+r" operands pinned there), so a fresh
// context starts in entry(self = x0, from = x1). Clobbered: x2-x18, x19-x28,
// x30 (lr), all of v0-v31 (AAPCS64 makes the low halves d8-d15 callee-saved:
// a template that left v8-v15 out would let a double live in d8 leak between
// fibers), "cc" and "memory". FPCR is not saved (see SPINDLE_SAVE_FP_CONTROL
// in config.hpp; this port does not implement it yet).
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

// Everything but x0/x1 (the operands), sp and x29 (saved explicitly).
#define SPINDLE_AARCH64_SWITCH_CLOBBERS                                                            \
    "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15",      \
        "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", \
        "x30", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12",   \
        "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", \
        "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory"

SPINDLE_ALWAYS_INLINE void raw_switch(raw_context* from, raw_context* to) noexcept {
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
        "ldr x9, [%[t], #16]\n\t"
        "br x9\n"
        "1:\n\t"
        : [f] "+r"(f), [t] "+r"(t)
        :
        : SPINDLE_AARCH64_SWITCH_CLOBBERS);
}

// See raw_switch_shared in x86_64_sysv.hpp: `shared` travels in x0 and
// `word` in x1 (loaded only when this side sends it).
template <std::size_t FromOff, std::size_t ToOff, bool Send = true>
SPINDLE_ALWAYS_INLINE void raw_switch_shared(void*& shared, std::uintptr_t& word) noexcept {
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
        "ldr x9, [%[s], %[to] + 16]\n\t"                                                           \
        "br x9\n"                                                                                   \
        "1:\n\t"
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
}

inline void make_context(raw_context* ctx, void* stack_top,
                         void (*entry)(raw_context* self, raw_context* from)) noexcept {
    // AAPCS64: sp is 16-byte aligned at all times; there is no pushed return
    // address, the link register (x30) holds it. The entry never returns.
    auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
    ctx->sp = reinterpret_cast<void*>(top);
    ctx->fp = nullptr;
    ctx->pc = reinterpret_cast<void*>(entry);
}

inline constexpr const char* abi_name = "AArch64 AAPCS64";

SPINDLE_ALWAYS_INLINE void cpu_relax() noexcept { __asm__ volatile("yield" ::: "memory"); }

}  // namespace spindle::arch
