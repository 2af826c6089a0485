// spindle/memory/stack.hpp — fiber and generator stacks.
//
// Every fiber and every generator runs on a stack that spindle maps itself.
// This layer hands those stacks out, takes them back, pools them per thread,
// and turns a stack overflow into a message that names the fiber instead of a
// silent segfault.
//
// Layout of one stack mapping, low to high addresses:
//
//     map_base                                                  map_base + map_size
//     | guard |            usable stack             |top| gap  |
//     | page  | <- grows down from top ------------ |   |<2 KiB|
//     |<---- 1 page + round_up(size, page) + 1 headroom page --->|
//
//   * The mapping is MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK:
//     no commit charge, and pages are only backed once touched, so a fiber
//     that never goes deep costs a page or two of RAM whatever its size.
//
//   * Guard page. The lowest page faults on any access. We install it with
//     madvise(MADV_GUARD_INSTALL) (Linux >= 6.13), which marks the page in the
//     page tables and leaves the mapping one VMA. Only when the kernel refuses
//     that advice (EINVAL) do we fall back to mprotect(PROT_NONE), which splits
//     the mapping into two VMAs. Why it matters: 100 000 stacks with mprotect
//     guards need 200 000 VMAs, above the default vm.max_map_count of 65 530,
//     and mmap then fails with ENOMEM; with guard regions a process holds
//     100 000 live 16 KiB stacks without touching any sysctl. Which method
//     works is remembered after the first stack (stack_guard_method()); that
//     first guard region is checked to really fault (qemu-user accepts the
//     advice and ignores it).
//
//   * Randomized start. `top` is the end of the mapping minus a random offset
//     in [0, 2048), in 64-byte steps, drawn from a cheap per-thread xorshift.
//     Stacks that all start at the same page offset put their hottest frames
//     into the same L1 sets: the CACS paper ("Stackful Coroutine Made Fast")
//     measured L1 miss rates of 13-16 % from exactly these cache-set
//     collisions. The extra headroom page pays for the offset, so a caller
//     always gets at least `size + 2048` usable bytes.
//
//   * Pooling. release_stack() puts the stack into the calling thread's pool
//     (at most stack_pool_capacity stacks; when it is full, the stack pooled
//     longest ago is unmapped to make room, so a burst of one size cannot
//     lock other sizes out of the pool for good), and
//     acquire_stack() takes the most recently released stack of the same
//     mapping size, so the top pages are usually still in cache and RAM. A
//     thread's pool is unmapped when the thread exits; a release that happens
//     after that (from a later thread_local destructor) unmaps directly.
//     Worker threads defer unmapping (defer_stack_pool_trim): a munmap of a
//     used stack is a TLB shootdown IPI to every CPU running the process
//     (~8 us in a VM, and it stalls the other workers), so a burst of fiber
//     ends (a joiner releasing thousands of stacks) pools them beyond the
//     capacity, up to stack_pool_surplus_max process-wide, and the worker
//     unmaps the surplus, oldest first, when it runs out of work.
//
//   * Returning memory. A pooled stack that once went deep would keep its deep
//     pages forever. On release, a stack whose usable size exceeds
//     stack_hot_window asks the kernel (one mincore() on one page) whether the
//     page just below its hot window is resident; if it is, everything below
//     the hot window is dropped with madvise(MADV_DONTNEED). The question is
//     asked on a stack's first release and then every
//     stack_residency_check_period-th, so a short-lived fiber or generator
//     does not pay a system call each time.
//
//   * Overflow detection. Each stack owns a slot in a process-wide registry
//     that a SIGSEGV handler reads without locks: {guard base, guard size,
//     usable size, owner kind, owner id}. The registry is a table of chunks
//     that are allocated on demand and never freed, so the handler can walk it
//     at any moment. The handler runs on a per-thread sigaltstack (a faulting
//     fiber has no stack left to run it on) and, when the fault hit a guard
//     page, prints which fiber or generator overflowed and how to raise its
//     stack, with write(2) only, then aborts. Any other SIGSEGV goes to the
//     handler that was installed before ours, or to the default action.
//     The exact rules are at install_overflow_handler().
//
// Thread-safety: acquire_stack, release_stack, set_stack_owner and
// install_overflow_handler may be called from any thread at any time; a stack
// may be released on a different thread from the one that acquired it.
//
// Undefined uses:
//   * releasing a stack twice, or using one (running on it, writing to it)
//     after it was released;
//   * releasing the stack the calling code is running on (switch away first);
//   * passing set_stack_owner a region that is not currently acquired;
//   * calling any of this from a signal handler (only the SIGSEGV handler's
//     own lock-free read of the registry is async-signal-safe).
//
// Limits of the overflow check (it is a diagnostic, not a guarantee):
//   * a frame larger than the guard page can jump over it into another
//     mapping that happens to be writable, and corrupt it silently; when it
//     lands in unmapped memory within stack_overflow_sp_below of the guard,
//     the stack-pointer rule below still catches it;
//   * a program that installs its own SIGSEGV handler *after* ours replaces
//     ours; ours only chains to handlers installed before it.
//
// Environment: SPINDLE_STACK_SIZE sets the default usable size of fibers
// (default_stack_size_from_env()); a malformed value stops the program with a
// message and exit status 2, it is never ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include <spindle/memory/detail/guarded_mapping.hpp>

namespace spindle {

// Usable bytes a fiber gets when nobody says otherwise (SPINDLE_STACK_SIZE
// overrides it for the scheduler's default).
inline constexpr std::size_t default_stack_size = 128 * 1024;
// Smallest stack acquire_stack accepts. Below this a signal frame (up to ~11
// KiB with AMX state) plus a few ordinary frames no longer fit, and a fiber
// would overflow in code it cannot see (the dynamic linker, printf).
inline constexpr std::size_t min_stack_size = 16 * 1024;
static_assert(min_stack_size <= default_stack_size);

namespace detail {

// Who runs on a stack; only used to word the overflow message.
enum class stack_owner : std::uint8_t { none = 0, fiber = 1, generator = 2 };

// One stack. Layout of its mapping, low to high addresses:
//   [guard page(s)][ usable stack ... ][top][random gap][headroom end]
//
// Invariants while acquired (what acquire_stack guarantees):
//   map_base is page aligned, map_size is a multiple of the page size;
//   map_base + guard page <= top - usable, i.e. the usable range
//     [top - usable, top) starts right at the end of the guard;
//   top % stack_top_alignment == 0;
//   map_base + map_size - stack_start_jitter < top <= map_base + map_size;
//   usable >= requested size + stack_start_jitter.
struct stack_region {
    std::byte* map_base = nullptr;  // start of the mapping (the guard page is here)
    std::size_t map_size = 0;       // whole mapping, guard included
    std::byte* top = nullptr;       // highest usable address (exclusive), 64-byte aligned, randomized
    std::size_t usable = 0;         // bytes from the end of the guard to `top`; ALWAYS >= requested size + 2048
    std::uint32_t slot = 0;         // index in the overflow registry
    explicit operator bool() const noexcept { return map_base != nullptr; }
};

// Width of the random window below the end of the mapping where `top` lands,
// and the step inside it. 2048 / 64 = 32 distinct starting cache sets; the
// window stays inside the one headroom page even with 4 KiB pages.
inline constexpr std::size_t stack_start_jitter = 2048;
inline constexpr std::size_t stack_top_alignment = 64;
static_assert(stack_start_jitter % stack_top_alignment == 0);
static_assert(stack_start_jitter <= 4096, "the random gap must fit in the headroom page");

// Stacks kept per thread for reuse; beyond it the oldest is unmapped. 64 covers a
// worker's burst of short fibers without parking much memory: 64 pooled 128
// KiB stacks are 8 MiB of address space and, thanks to the madvise release,
// usually a few hundred KiB of RAM.
inline constexpr std::size_t stack_pool_capacity = 64;
// Worker threads (defer_stack_pool_trim) may pool more than that during a
// burst of fiber ends and unmap the surplus when they go idle; this bounds
// the surplus summed over all threads (each pooled stack is one mapping, so
// this also bounds what the pools add to vm.max_map_count usage).
inline constexpr std::size_t stack_pool_surplus_max = 8192;
// How many surplus stacks an idle worker unmaps before it looks for work again.
inline constexpr std::size_t stack_pool_trim_batch = 16;

// A pooled stack keeps at most this much (below `top`) resident; deeper pages
// are returned to the kernel on release when the stack went below it.
inline constexpr std::size_t stack_hot_window = 64 * 1024;
// How often (in releases of one stack) release_stack asks the kernel whether
// the stack went below its hot window: the first release and every 32nd.
inline constexpr unsigned stack_residency_check_period = 32;

// SIGSEGV classification windows (see install_overflow_handler).
inline constexpr std::size_t stack_overflow_sp_below = 64 * 1024;  // sp up to this far below a guard
inline constexpr std::size_t stack_overflow_sp_above = 256;        // or this far above its end

// Each thread's alternate signal stack (installed if the thread has none).
inline constexpr std::size_t altstack_min_size = 64 * 1024;

// How guard pages are made in this process (decided by the first guarded
// mapping: memory/detail/guarded_mapping.hpp, guard_method).
guard_method stack_guard_method() noexcept;

// Take a stack of at least `size` usable bytes from this thread's pool (or mmap a new one).
// size < min_stack_size -> throws std::invalid_argument whose what() says
//   "spindle: stack size <N> is below the minimum of 16384 bytes".
// mmap/guard failure -> throws std::system_error (or bad_alloc) with a message naming the errno
//   and, for ENOMEM, suggesting vm.max_map_count / smaller stacks.
// Also calls install_overflow_handler(), so every thread that owns a stack has
// a sigaltstack and the process has the SIGSEGV handler.
stack_region acquire_stack(std::size_t size);

// Return it to this thread's pool (may be a different thread from the one that acquired it).
// The pool keeps at most stack_pool_capacity stacks; beyond that the oldest pooled one is unmapped.
// Deep pages are dropped first (see "Returning memory" above). Leaves `s` empty.
// Releasing an empty region does nothing.
void release_stack(stack_region& s) noexcept;

// For the calling thread from now on: a release into a full pool keeps the
// stack (within stack_pool_surplus_max) instead of unmapping the oldest one
// at once; trim_stack_pool() unmaps that surplus later. Worker threads call
// it at start and trim when they have nothing to run: unmapping a stack
// costs a TLB shootdown that also stalls the other workers.
void defer_stack_pool_trim() noexcept;
// Unmaps up to `max_unmaps` of the oldest stacks this thread pooled beyond
// stack_pool_capacity; returns how many. 0 on threads that do not defer.
std::size_t trim_stack_pool(std::size_t max_unmaps) noexcept;
// Unmaps all of that surplus, and the calling thread no longer defers: for
// a thread that was a worker for a while (scheduler::run()).
void end_stack_pool_deferral() noexcept;

// Record who runs on this stack, for the overflow message. Two relaxed atomic
// stores into the registry slot: the handler that reads them runs on the
// thread that runs on the stack, which is ordered after this call.
void set_stack_owner(const stack_region& s, stack_owner kind, std::uint64_t id) noexcept;

// Install (once per process, idempotent, thread-safe) the SIGSEGV handler, and
// (once per thread) a sigaltstack of at least altstack_min_size (or four of
// the kernel's minimum signal frames, if more) for the calling thread if it
// has none or a smaller one; that sigaltstack is freed when the thread exits.
// acquire_stack() calls both, so any thread that ever acquires a stack is
// covered. Worker threads also call it when they start, and so does the
// first context switch of any thread (a generator made on one thread and
// resumed on another that never called into spindle).
//
// The handler (SA_SIGINFO | SA_ONSTACK) calls a fault a guard hit when, for
// some registered stack S,
//   (a) the faulting address lies in S's guard page, or
//   (b) the stack pointer at the fault lies in
//       [S.guard - stack_overflow_sp_below, S.guard_end + stack_overflow_sp_above),
//       is not inside the usable range of another registered stack, and the
//       faulting address lies between that stack pointer (less one page: a
//       push or the red zone) and S's guard end: a frame bigger than the guard
//       jumped over it and touched memory below.
// The extra conditions in (b) keep an unrelated fault (say, a null pointer)
// in a fiber whose stack happens to sit just below another stack's guard, or
// in a thread whose stack does, from being reported as an overflow.
// On a hit it writes, with write(2) only,
//   "spindle: fiber <id> overflowed its <usable>-byte stack; raise it with ..."
// (or the generator / ownerless variant), resets SIGABRT to its default and
// aborts. Otherwise it calls the previously installed handler as the kernel
// would have (its sa_mask, SA_NODEFER, SA_RESETHAND honoured), or, if that was
// SIG_DFL or SIG_IGN, restores SIG_DFL and returns so the fault happens again
// and kills the process with SIGSEGV as it would have without spindle.
//
// Under AddressSanitizer the handler installed before ours is ASan's, so a
// fault that is not a guard hit still gets ASan's report.
void install_overflow_handler();

// Parses a SPINDLE_STACK_SIZE value: decimal bytes, optionally followed by K
// or M (binary: 1024, 1024 * 1024; either case). Returns nullopt for anything
// else (empty, signs, spaces, other suffixes, overflow) and for sizes below
// min_stack_size.
std::optional<std::size_t> parse_stack_size(const char* text) noexcept;

// The default usable stack size of fibers: SPINDLE_STACK_SIZE when set, else
// default_stack_size. The variable is read once per process. When it is set
// but parse_stack_size rejects it, prints
//   spindle: SPINDLE_STACK_SIZE='<value>' is not a valid stack size (bytes, or with K/M suffix; at least 16384)
// to stderr and calls exit(2).
std::size_t default_stack_size_from_env();

}  // namespace detail
}  // namespace spindle
