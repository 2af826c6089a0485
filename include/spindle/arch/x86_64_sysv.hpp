// spindle/arch/x86_64_sysv.hpp — the CACS context switch for x86-64, SysV ABI.
//
// Context-aware context switching (Li, Du, Hsu: "Stackful Coroutine Made
// Fast", §3.1). A classic switch is an assembly *function* that saves every
// callee-saved register (rbx, rbp, r12-r15, plus x87 CW and MXCSR) because it
// cannot know which of them its caller uses. CACS instead *inlines* a tiny
// asm template at every switching site and declares every register clobbered.
// The compiler then spills, around that one site, exactly the values that are
// live across it — often none — and the indirect jump sits at the call site,
// where the branch predictor can learn its target.
//
// What the template does (7 instructions):
//
//     lea   1f(%rip), %rax      resume address of *this* side
//     mov   %rsp, 0x00(from)    save stack pointer
//     mov   %rbp, 0x08(from)    save frame pointer (cannot be a clobber, see below)
//     mov   %rax, 0x10(from)    save resume address
//     mov   0x00(to), %rsp      load the other side
//     mov   0x08(to), %rbp
//     jmp   *0x10(to)           go
//  1:                           ...someone jumped back here
//     endbr64                   (only in -fcf-protection builds: see below)
//
// Choices and why:
//
//  * The resume address and rbp go into the context record, not onto the
//    stack. Pushing inside inline asm would overwrite the 128-byte red zone
//    below rsp, which the compiler may be using in a leaf function; writing to
//    the record needs no red-zone workaround and no pop on the way back.
//  * rbp is saved explicitly: while it is the frame pointer (-O0,
//    -fno-omit-frame-pointer) GCC and Clang refuse it in a clobber list.
//  * `from` and `to` are passed as read-write operands pinned to rsi and rdi.
//    "+S"/"+D" tell the compiler both registers come back changed (they do:
//    they hold the values of whoever switched back to us), so every
//    general-purpose register is covered. A fresh context therefore starts in
//    its entry function with rdi = its own context and rsi = the context it
//    came from — the SysV argument registers — so the entry is a plain
//    `void entry(context* self, context* from)`.
//  * Clobbered: every other GPR, xmm0-15 (xmm16-31 and k0-k7 with AVX-512,
//    tmm0-7 with AMX under Clang),
//    the x87/MMX stack, "cc" and "memory". Without "memory" the compiler could
//    keep a global in a register across the switch; without the vector
//    clobbers an inlined switch could carry a double in xmm1 from one fiber
//    to another. tests/arch/switch_clobber_test.cpp checks each class.
//  * x87 control word and MXCSR are not saved unless SPINDLE_SAVE_FP_CONTROL
//    is 1 (see config.hpp). A fiber that changes the rounding mode and then
//    switches leaks it to the next fiber otherwise.
//  * `jmp` rather than `ret`: a `ret` would be predicted by the return stack
//    buffer, which is always wrong after a stack switch (paper, footnote 2).
//  * Control-flow protection (-fcf-protection, as hardened distributions
//    build). Indirect branch tracking (IBT): the landing point of the `jmp`
//    starts with `endbr64` when the build asks for IBT (__CET__ bit 0); a
//    fresh context lands on its entry function, which the compiler starts
//    with one. Shadow stacks (SHSTK): a `ret` after a switch would pop the
//    return address of the *other* context from the one per-thread shadow
//    stack, so spindle does not support them. Its library is compiled with
//    -fcf-protection=branch (CMakeLists.txt), so its objects' ELF property
//    note claims IBT but not SHSTK; the linker ANDs the notes of every
//    object, and the loader never enables a shadow stack for a program that
//    links spindle (tests/arch/cf_protection_check.cmake reads the note).
#pragma once

#include <cstddef>
#include <cstdint>

#include <spindle/arch/config.hpp>

namespace spindle::arch {

// The part of an execution context the switch reads and writes. A context is
// *suspended* when these three words describe where it stopped; it is
// *running* while they are stale.
struct raw_context {
    void* sp = nullptr;  // 0x00 stack pointer at the switch
    void* fp = nullptr;  // 0x08 rbp at the switch
    void* pc = nullptr;  // 0x10 where to continue
};
static_assert(offsetof(raw_context, sp) == 0x00, "asm reads sp at 0x00");
static_assert(offsetof(raw_context, fp) == 0x08, "asm reads fp at 0x08");
static_assert(offsetof(raw_context, pc) == 0x10, "asm reads pc at 0x10");

// AMX tiles: Clang allocates tmm0-7 to __tile1024i values, so with AMX
// enabled they are clobbered too (the ABI leaves them to the caller). GCC
// names tiles only by number in its intrinsics and never keeps a value in
// one across an asm statement; it also rejects the names.
#if defined(__AMX_TILE__) && defined(__clang__)
#define SPINDLE_X86_TILE_CLOBBERS , "tmm0", "tmm1", "tmm2", "tmm3", "tmm4", "tmm5", "tmm6", "tmm7"
#else
#define SPINDLE_X86_TILE_CLOBBERS
#endif

#if defined(__AVX512F__)
#define SPINDLE_X86_VEC_CLOBBERS                                                                   \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",       \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",  \
        "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30",  \
        "xmm31", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"
#else
#define SPINDLE_X86_VEC_CLOBBERS                                                                   \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",       \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
#endif

// The landing point of a switch: `endbr64` where IBT is asked for.
#if defined(__CET__) && (__CET__ & 1)
#define SPINDLE_X86_LANDING "endbr64\n\t"
#else
#define SPINDLE_X86_LANDING ""
#endif

// Everything but rax, rsi and rdi (operands or clobbers, per template), rsp
// and rbp (saved explicitly).
#define SPINDLE_X86_SWITCH_CLOBBERS_BASE                                                           \
    "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",                     \
        SPINDLE_X86_VEC_CLOBBERS, "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)",     \
        "st(7)", "mm0", "mm1", "mm2", "mm3", "mm4", "mm5", "mm6", "mm7", "cc", "memory"           \
        SPINDLE_X86_TILE_CLOBBERS
#define SPINDLE_X86_SWITCH_CLOBBERS "rax", SPINDLE_X86_SWITCH_CLOBBERS_BASE

// x87 control word and MXCSR, carried across a switch only when
// SPINDLE_SAVE_FP_CONTROL is 1 (otherwise both functions are empty).
struct fp_control {
#if SPINDLE_SAVE_FP_CONTROL
    unsigned int mxcsr;
    unsigned short fpucw;
    static SPINDLE_ALWAYS_INLINE fp_control save() noexcept {
        fp_control c;
        __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(c.mxcsr), "=m"(c.fpucw));
        return c;
    }
    SPINDLE_ALWAYS_INLINE void restore() const noexcept {
        __asm__ volatile("ldmxcsr %0\n\tfldcw %1" : : "m"(mxcsr), "m"(fpucw));
    }
#else
    static SPINDLE_ALWAYS_INLINE fp_control save() noexcept { return {}; }
    SPINDLE_ALWAYS_INLINE void restore() const noexcept {}
#endif
};

// Suspend the running context into `from` and continue `to`. Returns when
// some other context switches back to `from`.
SPINDLE_ALWAYS_INLINE void raw_switch(raw_context* from, raw_context* to) noexcept {
    [[maybe_unused]] const fp_control fpc = fp_control::save();
    __asm__ volatile(
        "leaq 1f(%%rip), %%rax\n\t"
        "movq %%rsp, 0x00(%[f])\n\t"
        "movq %%rbp, 0x08(%[f])\n\t"
        "movq %%rax, 0x10(%[f])\n\t"
        "movq 0x00(%[t]), %%rsp\n\t"
        "movq 0x08(%[t]), %%rbp\n\t"
        "jmpq *0x10(%[t])\n"
        "1:\n\t" SPINDLE_X86_LANDING
        : [f] "+S"(from), [t] "+D"(to)
        :
        : SPINDLE_X86_SWITCH_CLOBBERS);
    fpc.restore();
}

// The same switch for two contexts that live in one record at offsets
// `FromOff` and `ToOff` from `shared` (a generator's frame holds its own
// context and its resumer's). Both sides pass the record's address in rdi,
// so after the switch `shared` is in a register again with no reload from
// memory, and one machine word travels in rax from the switching side to the
// resumed side (a generator's yielded value): the CACS paper's in-register
// hand-over (§3.2). A fresh context entered this way starts as
// entry(shared, <rsi: garbage>). `word` is what the other side passed when it
// switched back to us.
//
// `Send`: whether this side passes `word` (a yield does; a resume only
// receives, so the compiler need not load anything into rax before it).
template <std::size_t FromOff, std::size_t ToOff, bool Send = true>
SPINDLE_ALWAYS_INLINE void raw_switch_shared(void*& shared, std::uintptr_t& word) noexcept {
    [[maybe_unused]] const fp_control fpc = fp_control::save();
#define SPINDLE_X86_SWITCH_SHARED_ASM                                                              \
    "leaq 1f(%%rip), %%rcx\n\t"                                                                    \
    "movq %%rsp, %c[fo](%[s])\n\t"                                                                 \
    "movq %%rbp, %c[fo]+8(%[s])\n\t"                                                               \
    "movq %%rcx, %c[fo]+16(%[s])\n\t"                                                              \
    "movq %c[to](%[s]), %%rsp\n\t"                                                                 \
    "movq %c[to]+8(%[s]), %%rbp\n\t"                                                               \
    "jmpq *%c[to]+16(%[s])\n\t"                                                                    \
    /* The landing point starts a 16-byte block: it is where every value */                    \
    /* of a generator loop arrives, and where it sat in a block moved     */                    \
    /* bench/switch sum by 5-10%. The padding follows an unconditional    */                    \
    /* jump: never executed.                                              */                    \
    ".p2align 4\n"                                                                              \
    "1:\n\t" SPINDLE_X86_LANDING
    if constexpr (Send) {
        __asm__ volatile(SPINDLE_X86_SWITCH_SHARED_ASM
                         : [s] "+D"(shared), "+a"(word)
                         : [fo] "i"(FromOff), [to] "i"(ToOff)
                         : SPINDLE_X86_SWITCH_CLOBBERS_BASE, "rsi");
    } else {
        __asm__ volatile(SPINDLE_X86_SWITCH_SHARED_ASM
                         : [s] "+D"(shared), "=a"(word)
                         : [fo] "i"(FromOff), [to] "i"(ToOff)
                         : SPINDLE_X86_SWITCH_CLOBBERS_BASE, "rsi");
    }
#undef SPINDLE_X86_SWITCH_SHARED_ASM
    fpc.restore();
}

// Prepare `ctx` so that the first switch to it calls entry(ctx, from) on the
// stack whose highest usable address is `stack_top`. `entry` must never
// return: its last act is a switch away.
inline void make_context(raw_context* ctx, void* stack_top,
                         void (*entry)(raw_context* self, raw_context* from)) noexcept {
    auto top = reinterpret_cast<std::uintptr_t>(stack_top) & ~std::uintptr_t{15};
    // At a function's first instruction the ABI wants (rsp + 8) % 16 == 0, as
    // if a `call` had pushed a return address. We push a null one: debuggers
    // and unwinders stop there.
    top -= 8;
    *reinterpret_cast<void**>(top) = nullptr;
    ctx->sp = reinterpret_cast<void*>(top);
    ctx->fp = nullptr;  // ends the frame-pointer chain
    ctx->pc = reinterpret_cast<void*>(entry);
}

// The name of this ABI, for reports.
inline constexpr const char* abi_name = "x86-64 SysV";

// Spin-wait hint.
SPINDLE_ALWAYS_INLINE void cpu_relax() noexcept { __builtin_ia32_pause(); }

}  // namespace spindle::arch
