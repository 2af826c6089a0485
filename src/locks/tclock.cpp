// src/locks/tclock.cpp — the slow paths of tclock, tclock_blocking and
// tclock_shared: ephemeral stacks, the waiter queue, combining, nesting,
// out-of-order release and the hand-back of tclock_may_block().
//
// The design is in include/spindle/locks/tclock.hpp. This file has five parts:
//
//   1. raw system calls and the per-thread record (ephemeral stack, frames);
//   2. gates: how each lock kind is taken, released and put in combining mode;
//   3. the core, one instantiation per gate: lock_slow, the ephemeral entry
//      (queue, head, combining loop), unlock_slow, the waiter-to-waiter jump;
//   4. out-of-order release and tclock_may_block;
//   5. the reader slow path of tclock_shared, misuse reports.
//
// Names used below. A *request* is one contended lock() call: its qnode sits
// at the top of a fresh frame of the calling thread's ephemeral stack, and
// its *main* context (where lock() was called) waits in a lock_landing in
// lock_slow's frame. A *combine frame* (tc_frame) lives on a combiner's
// ephemeral stack while it runs other requests' sections; the thread's record
// keeps a stack of them (innermost first), because a section run by a
// combiner may itself queue for, or combine, another lock.
//
// Invariants:
//   (I1) a request's main stack is used by at most one thread at a time: its
//        own thread until it switched to the ephemeral stack, then the
//        combiner from the switch into its landing until the switch out at
//        its unlock, then its own thread again after "done";
//   (I2) a combiner runs request r only if r is not the queue's tail (a
//        successor has queued behind it), so that successor can always take
//        the head role: a combiner never resets the tail;
//   (I3) while a thread's top combine frame f exists, the code running on
//        that thread (outside its ephemeral stack) is f->curr's section, or
//        code that section called;
//   (I4) exactly one request is owed a "done" at any time in a batch:
//        f->to_notify; it is told once its context is saved, by the next
//        landing or by the loop.
#include <spindle/locks/tclock.hpp>
#include <spindle/locks/tclock_shared.hpp>

#include <spindle/arch/context.hpp>
#include <spindle/memory/detail/guarded_mapping.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/locks/detail/park_gate.hpp>  // park_gate_handoff_after_ns, park_gate_now_ns

#include <linux/futex.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#if SPINDLE_ASAN
#include <sanitizer/asan_interface.h>
#endif
#if SPINDLE_TSAN
#include <sanitizer/tsan_interface.h>
#include <vector>
#endif

namespace spindle::detail {

// Request states (tc_qnode::state).
enum : std::uint32_t {
    q_waiting = 0,     // queued, nothing decided
    q_head = 1,        // you are the queue head: take the gate yourself
    q_processing = 2,  // tclock_blocking: a combiner runs your section; do not sleep
    q_done = 3,        // your section ran (or was handed back): resume at `resume`
    q_parked = 4,      // tclock_blocking: the waiter sleeps on `state`
};

struct tc_frame;
struct thread_record;

// Whose thread a section's code runs as (thread pointer adoption, section 6
// below): the thread pointer (FS base) it had when it was saved, and the
// record of the thread that pointer belongs to.
struct tc_identity {
    std::uintptr_t fs = 0;
    thread_record* rec = nullptr;
};

// Where a request's main context waits at lock(), in lock_slow's frame on the
// requesting stack. `runner` is written by the combiner that switches in.
struct lock_landing {
    arch::context ctx;
    tc_frame* runner = nullptr;
    tc_identity ident;  // of the code that called lock()
};

// Where a section's context waits after its unlock() (or in
// tclock_may_block), on the section's own stack; err0/err_end carry errno.
struct unlock_landing {
    arch::context ctx;
    int err0 = 0;     // the requester's errno at lock()
    int err_end = 0;  // the running thread's errno when the section ended
    tc_identity ident;  // of the section
};

struct tc_qnode {
    std::atomic<tc_qnode*> next{nullptr};
    std::atomic<std::uint32_t> state{q_waiting};
    bool was_parked = false;  // combiner only: the waiter slept when we marked it processing
    tc_kind kind = tc_kind::spin;
    tc_word* lock = nullptr;
    thread_record* rec = nullptr;     // the thread whose ephemeral stack holds this node
    tc_qnode* prev_eph = nullptr;     // that thread's previous live frame
    tc_frame* outer = nullptr;        // combine frame whose section made this request (nesting)
    lock_landing* main = nullptr;
    unlock_landing* resume = nullptr; // written by whoever ran the section, before "done"
    int err0 = 0;
    arch::context eph;                // the ephemeral frame's own context
};

struct tc_frame {
    tc_word* lock = nullptr;
    tc_kind kind = tc_kind::spin;
    tc_qnode* self = nullptr;       // the combiner's own request
    tc_qnode* curr = nullptr;       // the request whose section runs now
    tc_qnode* to_notify = nullptr;  // (I4)
    tc_qnode* next_head = nullptr;  // set when the batch ends normally
    tc_frame* outer_frame = nullptr;
    unsigned count = 0;
    bool handback = false;          // curr gave its section back to its own thread
    arch::context loop;             // the combining loop, suspended while sections run
};

namespace {

// ---------------------------------------------------------------------------
// 1. Raw system calls and the per-thread record

// A waiting thread must not write its errno: a section run for it may be
// writing that errno through an address computed before lock(). The futex
// and yield calls of detail/futex.hpp (futex_wait, futex_wake,
// sched_yield_now) use the system call instruction, not libc's syscall()
// (which sets errno on failure: a futex wait often fails with EAGAIN).

// One waiting step: PAUSE for a while, then give the CPU away each time (on
// an oversubscribed machine the thread we wait for may need our CPU).
inline void wait_step(unsigned& spins) noexcept {
    if (spins < 128) {
        ++spins;
        arch::cpu_relax();
    } else {
        sched_yield_now();
    }
}
// The same for a waiter that sleeps after a number of steps: `spins` keeps
// counting past 128, for the caller to compare with its park threshold.
inline void counted_wait_step(unsigned& spins) noexcept {
    if (++spins < 128) arch::cpu_relax();
    else sched_yield_now();
}

constexpr std::size_t eph_stack_size = 256 * 1024;  // usable bytes of each ephemeral stack
constexpr std::size_t eph_min_room = 64 * 1024;     // free below every frame: a signal handler's room
constexpr std::size_t eph_gap = 512;                // between a suspended frame's sp and the next frame
constexpr unsigned park_after = 192;                // tclock_blocking: waiting steps before a waiter sleeps
constexpr unsigned head_park_after = 256;           // tclock_blocking: the same for the queue head
#if SPINDLE_TSAN
// TSan keeps a shadow call stack per fiber; an ephemeral frame is left
// without returning, so each use leaves one entry behind. Fresh fibers every
// so many uses keep that stack short.
constexpr unsigned tsan_fiber_uses = 1024;
#endif

std::uintptr_t align_down(std::uintptr_t v, std::uintptr_t a) noexcept { return v & ~(a - 1); }

// Rare events, for tests (relaxed: counts, not synchronization).
std::atomic<std::uint64_t> g_ooo_finishes{0};
std::atomic<std::uint64_t> g_handbacks{0};
std::atomic<std::uint64_t> g_handoffs{0};

// A thread's ephemeral stack: a guarded mapping (memory/detail/
// guarded_mapping.hpp, the fiber stacks' own: the lowest page the guard, the
// rest usable); mapped on the thread's first contended lock() and unmapped
// when the thread exits. Not a stack of the fiber stack pool
// (memory/stack.hpp): the TCLocks live in spindle_locks, which has no
// runtime and goes into the preload library, so nothing here may install
// the fiber runtime's SIGSEGV handler or sigaltstack. The cost: an overflow
// of an ephemeral stack (only waiting code and signal handlers run there,
// with eph_min_room free below every frame) is a plain SIGSEGV at the guard
// page, without the fiber runtime's message.
struct eph_stack {
    std::byte* base = nullptr;  // the mapping, guard page first
    std::size_t map_size = 0;
    explicit operator bool() const noexcept { return base != nullptr; }
    std::byte* top() const noexcept { return base + map_size; }
    std::byte* bottom() const noexcept { return base + page_size(); }  // end of the guard

    // false: no memory. errno is left as it was.
    bool map() noexcept {
        const std::size_t page = page_size();
        const std::size_t size = page + (eph_stack_size + page - 1) / page * page;
        const guarded_mapping m = map_guarded(size);
        if (m.base == nullptr) return false;
        base = m.base;
        map_size = size;
        return true;
    }
    void unmap() noexcept {
        if (base != nullptr) {
#if SPINDLE_ASAN
            // Frames that ran here may still be poisoned in ASan's shadow,
            // which outlives the mapping: whatever the kernel maps here next
            // must not inherit it (as unmap_stack in memory/stack.cpp).
            __asan_unpoison_memory_region(bottom(), map_size - page_size());
#endif
            ::munmap(base, map_size);
        }
        base = nullptr;
        map_size = 0;
    }
};

}  // namespace

struct thread_record {
    eph_stack stack{};
    // Thread pointer adoption (section 6): this thread's own FS base (0 until
    // its first contended lock()), and, while a combiner runs a section as
    // this thread, that combiner's record. Written and read by the thread
    // that runs the section (relaxed; handed from combiner to combiner
    // through the queue's acquire/release chain); this thread itself waits
    // meanwhile and reads it again only after its "done".
    std::uintptr_t own_fs = 0;
    std::atomic<thread_record*> adopted_by{nullptr};
    bool no_stack = false;       // mapping failed once: this thread takes locks by spinning
    tc_qnode* eph_top = nullptr; // innermost live ephemeral frame
    tc_frame* frames = nullptr;  // innermost combine frame (I3)
    unsigned depth = 0;          // live ephemeral frames
#if SPINDLE_TSAN
    struct fiber_slot {
        void* fiber = nullptr;
        unsigned uses = 0;
    };
    std::vector<fiber_slot> fibers;  // one per depth
#endif

    thread_record() = default;
    thread_record(const thread_record&) = delete;
    thread_record& operator=(const thread_record&) = delete;
    // The stack is unmapped at thread exit by a pthread key's destructor
    // (unmap_at_exit), not here: without sanitizers the record is trivially
    // destructible, so no C++ thread-exit hook is registered (in the preload
    // library, libstdc++'s would pull its exception globals in).
#if SPINDLE_TSAN
    ~thread_record() {
        for (fiber_slot& f : fibers)
            if (f.fiber != nullptr) __tsan_destroy_fiber(f.fiber);
    }
#endif

    // Maps the stack, and arranges for it to be unmapped when the thread
    // exits (if no pthread key can be had, it stays mapped). false: no memory.
    bool map_stack() noexcept {
        if (!stack.map()) return false;
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, [] { g_stack_key_ok = pthread_key_create(&g_stack_key, &unmap_at_exit) == 0; });
        if (g_stack_key_ok) pthread_setspecific(g_stack_key, this);
        return true;
    }
    // A pthread key destructor: runs at thread exit, after the C++
    // thread_local destructors, when no lock() of the thread is in progress.
    // The main thread's runs never (exit() keeps the mapping until the end).
    static void unmap_at_exit(void* r) noexcept { static_cast<thread_record*>(r)->stack.unmap(); }
    static inline pthread_key_t g_stack_key{};
    static inline bool g_stack_key_ok = false;  // written once, under pthread_once

    // A new frame below every live one; null when there is no ephemeral
    // stack or no room for a frame plus eph_min_room.
    tc_qnode* push(void (*entry)(arch::raw_context*, arch::raw_context*)) noexcept {
        if (!stack) {
            if (no_stack) return nullptr;
            if (!map_stack()) {
                no_stack = true;
                return nullptr;
            }
        }
        std::byte* const bottom = stack.bottom();
        std::byte* top = stack.top();
        auto* here = static_cast<std::byte*>(__builtin_frame_address(0));
        const bool on_eph = here >= bottom && here < stack.top();
        if (eph_top != nullptr) {
            // The innermost frame is either a combiner suspended in its loop
            // (its lowest address is the loop's saved sp), or a waiter that
            // is running: then we can only be in a signal handler on the
            // ephemeral stack itself, below `here`.
            top = reinterpret_cast<std::byte*>(eph_top);
            if (frames != nullptr && frames->self == eph_top)
                top = std::min(top, static_cast<std::byte*>(frames->loop.regs.sp));
            else if (!on_eph)
                return nullptr;
        }
        if (on_eph) top = std::min(top, here);
        auto t = reinterpret_cast<std::uintptr_t>(top) - eph_gap;
        t = align_down(t - sizeof(tc_qnode), 64);
        if (t < reinterpret_cast<std::uintptr_t>(bottom) + eph_min_room) return nullptr;
        auto* q = reinterpret_cast<tc_qnode*>(t);
#if SPINDLE_ASAN
        // Frames left without returning leave their redzones poisoned.
        __asan_unpoison_memory_region(bottom, static_cast<std::size_t>(reinterpret_cast<std::byte*>(q + 1) - bottom));
#endif
        ::new (static_cast<void*>(q)) tc_qnode{};
        std::byte* const run_top = reinterpret_cast<std::byte*>(q) - 64;
        arch::make_context(&q->eph.regs, run_top, entry);
#if SPINDLE_ASAN
        q->eph.stack_bottom = bottom;
        q->eph.stack_size = static_cast<std::size_t>(run_top - bottom);
        q->eph.fake_stack = nullptr;
#endif
#if SPINDLE_TSAN
        if (fibers.size() <= depth) fibers.resize(depth + 1);
        fiber_slot& fs = fibers[depth];
        if (fs.fiber != nullptr && ++fs.uses >= tsan_fiber_uses) {
            __tsan_destroy_fiber(fs.fiber);  // not running: its last frame is gone
            fs.fiber = nullptr;
        }
        if (fs.fiber == nullptr) {
            fs.fiber = __tsan_create_fiber(0);
            fs.uses = 0;
        }
        q->eph.tsan_fiber = fs.fiber;
#endif
        q->rec = this;
        q->prev_eph = eph_top;
        eph_top = q;
        ++depth;
        return q;
    }

    void pop(tc_qnode* q) noexcept {
        eph_top = q->prev_eph;
        --depth;
    }
};

namespace {

thread_local thread_record tl_record;

// The record and errno of the thread running *now*. Out of line with an
// empty asm so that no caller can reuse a result across a context switch
// (a switch may move the caller to another thread; __errno_location is
// `const`, and a plain TLS address may be kept in a register).
SPINDLE_NOINLINE thread_record* identity_record() noexcept {
    thread_record* r = &tl_record;
    __asm__ volatile("" : "+r"(r));
    return r;
}
// The record of the thread running now: the identity's, unless a combiner
// runs a section as that identity (thread pointer adoption).
SPINDLE_NOINLINE thread_record* this_record() noexcept {
    thread_record* r = identity_record();
    if (thread_record* a = r->adopted_by.load(std::memory_order_relaxed)) [[unlikely]]
        return a;
    return r;
}
SPINDLE_NOINLINE int* errno_loc() noexcept {
    int* p = &errno;
    __asm__ volatile("" : "+r"(p));
    return p;
}

// ---------------------------------------------------------------------------
// Thread pointer adoption (x86-64 with FSGSBASE, Linux 5.9+; not in
// sanitizer builds, whose runtimes keep their per-thread state behind the
// thread pointer). A combiner that switches into a waiter's section also
// loads the waiter's thread pointer (wrfsbase), and loads its own back when
// the section's context leaves it; so a delegated section's thread_local
// variables, errno, pthread_self() and C++ exception state are its own
// thread's (the waiting thread runs only the ephemeral frame's code meanwhile,
// which touches none of them -- but a signal handler that runs on the
// waiting thread meanwhile shares them with the section: see tclock.hpp).
// The kernel thread stays the combiner's: gettid(), the signal mask and
// signal delivery, CPU time, scheduling.
//
// Each saved section context records its identity (tc_identity: its thread
// pointer and that thread's record), and every switch into a context loads
// its identity's pointer first (enter_identity). tclock's own code needs the
// *running* thread's record (its ephemeral stack and combine frames): while
// a combiner runs a section as thread T, T's record (what thread_local
// finds now) points at the combiner's (adopted_by), which this_record()
// follows; the section's context clears it when it leaves (leave_identity),
// before T can be told "done". The exception state is then not swapped by
// the switches: each thread's own globals are the state of the sections
// that run as that thread.
#if defined(__x86_64__) && !SPINDLE_ASAN && !SPINDLE_TSAN
constexpr bool can_adopt = true;
SPINDLE_ALWAYS_INLINE std::uintptr_t read_fs() noexcept {
    std::uintptr_t v;
    __asm__ volatile("rdfsbase %0" : "=r"(v));
    return v;
}
SPINDLE_ALWAYS_INLINE void write_fs(std::uintptr_t v) noexcept { __asm__ volatile("wrfsbase %0" : : "r"(v) : "memory"); }
#else
constexpr bool can_adopt = false;
SPINDLE_ALWAYS_INLINE std::uintptr_t read_fs() noexcept { return 0; }
SPINDLE_ALWAYS_INLINE void write_fs(std::uintptr_t) noexcept {}
#endif

// The kernel lets user space use rdfsbase/wrfsbase (AT_HWCAP2 bit 1,
// HWCAP2_FSGSBASE). errno is left as it was.
bool fsgsbase_usable() noexcept {
    if constexpr (!can_adopt) {
        return false;
    } else {
        int* const e = errno_loc();
        const int saved = *e;
        const bool ok = (::getauxval(AT_HWCAP2) & (1UL << 1)) != 0;
        *e = saved;
        return ok;
    }
}

// -1 not decided yet, then 0 (off) or 1 (on). Relaxed: a setting, chosen
// before threads contend (tclock_adopt_thread_pointer's contract).
std::atomic<int> g_adopt{-1};

// The default: on where it can be, unless SPINDLE_TCLOCK_ADOPT=0. Any value
// but 0 and 1 stops the program with a message.
SPINDLE_COLD int adopt_default() noexcept {
    const char* e = ::getenv("SPINDLE_TCLOCK_ADOPT");
    bool want = true;
    if (e != nullptr && e[0] != '\0') {
        if (e[0] == '0' && e[1] == '\0') {
            want = false;
        } else if (!(e[0] == '1' && e[1] == '\0')) {
            fatal("SPINDLE_TCLOCK_ADOPT=%.64s is not valid; valid values: 0 (a delegated section runs as the "
                  "combiner's thread), 1 (as its own, the default where the CPU allows)",
                  e);
        }
    }
    return want && fsgsbase_usable() ? 1 : 0;
}

// Where the CPU cannot adopt (AArch64 here) this is still read once, so that
// a bad SPINDLE_TCLOCK_ADOPT is reported there too, never ignored.
SPINDLE_ALWAYS_INLINE bool adopting() noexcept {
    int v = g_adopt.load(std::memory_order_relaxed);
    if (v < 0) [[unlikely]] {
        int expected = -1;
        v = adopt_default();
        if (!g_adopt.compare_exchange_strong(expected, v, std::memory_order_relaxed)) v = expected;
    }
    return can_adopt && v == 1;
}

SPINDLE_ALWAYS_INLINE tc_identity current_identity() noexcept { return {read_fs(), identity_record()}; }

// Before `me`'s thread switches into a context that runs as `to`.
SPINDLE_ALWAYS_INLINE void enter_identity(thread_record* me, const tc_identity& to) noexcept {
    if (to.rec == nullptr) [[unlikely]] {  // saved while adoption was off: run as ourselves
        write_fs(me->own_fs);
        return;
    }
    if (to.rec != me) to.rec->adopted_by.store(me, std::memory_order_relaxed);
    write_fs(to.fs);
}
// When `me`'s thread is about to save the context it runs, and so stops
// running code as that context's identity: returns the identity to resume
// it as. (adopted_by: relaxed, see thread_record.)
SPINDLE_ALWAYS_INLINE tc_identity leave_identity(thread_record* me) noexcept {
    const tc_identity ident = current_identity();
    if (ident.rec != me && ident.rec != nullptr) ident.rec->adopted_by.store(nullptr, std::memory_order_relaxed);
    return ident;
}
// Back to `me`'s own thread pointer, before switching into its own code.
SPINDLE_ALWAYS_INLINE void enter_own(thread_record* me) noexcept { write_fs(me->own_fs); }

// Switch away from `from`; `dead`: it will never be resumed (an ephemeral
// frame being dropped). With adoption the exception state stays where it is
// (see above), and there are no sanitizers to tell.
SPINDLE_ALWAYS_INLINE void switch_from(arch::context* from, arch::context* to, bool dead) noexcept {
    if (adopting()) {
        arch::raw_switch(&from->regs, &to->regs);
        if (dead) __builtin_unreachable();
        return;
    }
    if (dead)
        arch::switch_final(from, to);
    else
        arch::switch_to(from, to);
}

// ---------------------------------------------------------------------------
// 2. Gates

// Bounded overtaking (tclock, tclock_blocking). The fast path lets a running
// thread take a free gate ahead of the queue head, which is what keeps the
// lock fast when the head is not running. But it is unbounded: three threads
// that relock back to back (and yield while holding) kept the head of a
// TCLock-SP out for 10 seconds on 2 CPUs. So, as in park_gate.hpp (and
// Linux's mutex, parking_lot): a head that has waited park_gate_handoff_after_ns
// (1 ms) sets `handoff` on the held gate. That closes the fast path (it CASes
// from 0 only), and the release sees it and passes the gate to the head
// still held (locked|given); the head takes it with a CAS, because a thread
// with no ephemeral stack waits here too and two may see `given`.
//
//     head asks       (state)  locked[|sleeper] -> +handoff          CAS, relaxed
//     release, asked  (state)  locked|handoff[|sleeper] -> locked|given  CAS, release
//     head takes it   (state)  locked|given -> locked                CAS, acquire
//
// The inline unlocks release only an exact `locked` (tclock_blocking: plus
// `sleeper`); a handoff bit set between their load and their store is lost
// and set again by the head at its next look: a lost request, never a lost
// lock or wake-up. Only waiters set it, and a combiner holds the gate as the
// queue head, so while combining only a stack-less waiter could set it, and
// begin/end_combining's stores drop it then (the next release is the
// combiner's own, after its batch).

// Whether a head that started waiting at `since` (0: not yet) and sees
// state `s` should ask for the gate now.
inline bool handoff_due(std::uint32_t s, std::int64_t since) noexcept {
    return since != 0 && (s & tc_handoff) == 0 &&
           park_gate_now_ns() - since > park_gate_handoff_after_ns.load(std::memory_order_relaxed);
}

// The head's request for the gate, once it has waited long enough.
inline void ask_handoff(tc_word* w, std::uint32_t s, std::int64_t& since) noexcept {
    if (since == 0) {
        since = park_gate_now_ns();
        return;
    }
    if (!handoff_due(s, since)) return;
    // (state): s -> s|handoff. relaxed: a request; the release CAS that
    // answers it is what orders the sections.
    (void)w->state.compare_exchange_strong(s, s | tc_handoff, std::memory_order_relaxed, std::memory_order_relaxed);
}

struct gate_spin {
    static constexpr tc_kind kind = tc_kind::spin;
    static constexpr bool parks = false;
    [[maybe_unused]] static constexpr const char* name = "tclock";

    static bool held(std::uint32_t s) noexcept { return s != 0; }
    static bool combining(std::uint32_t s) noexcept { return (s & tc_combining) != 0; }
    static bool try_take(tc_word* w) noexcept {
        std::uint32_t e = 0;
        // (state): 0 -> locked. Acquire pairs with the release that freed it.
        return w->state.compare_exchange_strong(e, tc_locked, std::memory_order_acquire, std::memory_order_relaxed);
    }
    // (state): locked|given -> locked. Acquire pairs with release()'s CAS
    // that passed the gate on.
    static bool take_given(tc_word* w) noexcept {
        std::uint32_t e = tc_locked | tc_given;
        return w->state.compare_exchange_strong(e, tc_locked, std::memory_order_acquire, std::memory_order_relaxed);
    }
    // The queue head (or a thread without an ephemeral stack) takes the gate.
    static void acquire_head(tc_word* w) noexcept {
        unsigned spins = 0;
        std::int64_t since = 0;
        for (;;) {
            // Relaxed read: only a hint before the CAS, which synchronizes.
            const std::uint32_t s = w->state.load(std::memory_order_relaxed);
            if (s == 0) {
                if (try_take(w)) return;
            } else if ((s & tc_given) != 0) {
                if (take_given(w)) return;
            } else if (spins >= 128) {
                ask_handoff(w, s, since);  // in the yielding phase: a clock read per yield
            }
            wait_step(spins);
        }
    }
    // (state): held -> 0, or -> locked|given if the head asked (see above).
    // Release pairs with the CAS of the next taker (fast path, try_take or
    // take_given).
    static void release(tc_word* w) noexcept {
        std::uint32_t s = w->state.load(std::memory_order_relaxed);
        for (;;) {
            const std::uint32_t to = (s & tc_handoff) != 0 ? (tc_locked | tc_given) : 0;
            if (w->state.compare_exchange_weak(s, to, std::memory_order_release, std::memory_order_relaxed)) {
                if (to != 0) g_handoffs.fetch_add(1, std::memory_order_relaxed);
                // Every sleeper (tclock_blocking): the head, and a stack-less
                // waiter if one sleeps too; the one that finds the gate its
                // own takes it, the others sleep again.
                if ((s & tc_sleeper) != 0) futex_wake(&w->state, INT_MAX);
                return;
            }
        }
    }
    // (state): locked -> combining -> locked. Plain stores by the holder:
    // nobody else writes a held state but a waiter's handoff request (see
    // above; dropped here). Relaxed: the only readers that act on it are the
    // sections we run, which we switch to after the store (the switch orders
    // it), or threads that reach them through the queue's acquire/release
    // chain.
    static void begin_combining(tc_word* w) noexcept { w->state.store(tc_combining, std::memory_order_relaxed); }
    static void end_combining(tc_word* w) noexcept { w->state.store(tc_locked, std::memory_order_relaxed); }
    // The ooo bit is set by the section (on whatever thread runs it) and read
    // by the combiner after that section's context came back to it through a
    // "done" (release/acquire): relaxed is enough.
    static void mark_ooo(tc_word* w) noexcept { w->state.fetch_or(tc_ooo, std::memory_order_relaxed); }
    // Relaxed: read by the section that set it (or on a path ordered after
    // it by the chain of delegation that runs that section).
    static bool ooo_marked(tc_word* w) noexcept { return (w->state.load(std::memory_order_relaxed) & tc_ooo) != 0; }
    static bool take_ooo(tc_word* w) noexcept {
        if (!ooo_marked(w)) return false;
        w->state.fetch_and(~tc_ooo, std::memory_order_relaxed);
        return true;
    }
};

struct gate_blocking : gate_spin {
    static constexpr tc_kind kind = tc_kind::blocking;
    static constexpr bool parks = true;
    [[maybe_unused]] static constexpr const char* name = "tclock_blocking";

    // Sleeper protocol: the head spins, then sets `sleeper` (and, after
    // 1 ms, `handoff`) with a CAS on the value it saw and sleeps on the new
    // value. The holder's release changes the state (to 0 or locked|given)
    // and wakes if `sleeper` was set. Either the release comes before the
    // CAS (the CAS fails, the head sees the new state) or after it (the
    // release sees the bit): no lost wake-up.
    static void acquire_head(tc_word* w) noexcept {
        unsigned spins = 0;
        std::int64_t since = 0;
        for (;;) {
            std::uint32_t s = w->state.load(std::memory_order_relaxed);
            if (s == 0) {
                if (try_take(w)) return;
                continue;
            }
            if ((s & tc_given) != 0) {
                if (take_given(w)) return;
                continue;
            }
            if (spins < head_park_after) {
                counted_wait_step(spins);
                continue;
            }
            std::uint32_t want = s | tc_sleeper;
            if (handoff_due(s, since)) want |= tc_handoff;
            // (state): s -> want. relaxed: see ask_handoff().
            if (want != s &&
                !w->state.compare_exchange_weak(s, want, std::memory_order_relaxed, std::memory_order_relaxed))
                continue;
            if (since == 0) since = park_gate_now_ns();
            futex_wait(&w->state, want);
        }
    }
};

// tclock_shared's small mutex on `aux` (0 free, 1 held, 2 held + sleepers):
// serializes slow readers with the writer queue's head (§3.5 "wlock").
void aux_lock(tc_word* w) noexcept {
    std::uint32_t c = 0;
    // Acquire pairs with aux_unlock's release exchange.
    if (w->aux.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    for (unsigned i = 0; i < 64; ++i) {
        arch::cpu_relax();
        c = 0;
        if (w->aux.compare_exchange_weak(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    }
    while (w->aux.exchange(2, std::memory_order_acquire) != 0) futex_wait(&w->aux, 2);
}
void aux_unlock(tc_word* w) noexcept {
    if (w->aux.exchange(0, std::memory_order_release) == 2) futex_wake(&w->aux, 1);
}

struct gate_shared {
    static constexpr tc_kind kind = tc_kind::shared;
    static constexpr bool parks = true;
    [[maybe_unused]] static constexpr const char* name = "tclock_shared";

    static bool held(std::uint32_t s) noexcept { return (s & rw_writer_mask) != 0; }
    static bool combining(std::uint32_t s) noexcept { return (s & rw_wcombining) != 0; }
    static void acquire_head(tc_word* w) noexcept {
        aux_lock(w);
        std::uint32_t e = 0;
        // (state): 0 -> wp. Acquire pairs with the last unlock/unlock_shared.
        if (!w->state.compare_exchange_strong(e, rw_wp, std::memory_order_acquire, std::memory_order_relaxed)) {
            // (state): +ww: new readers turn back; wait for those inside and
            // for a writer that came by the fast path.
            w->state.fetch_add(rw_ww, std::memory_order_relaxed);
            unsigned spins = 0;
            for (;;) {
                std::uint32_t s = w->state.load(std::memory_order_relaxed);
                if ((s & ~rw_rsleep) == rw_ww) {
                    // (state): ww -> wp. Acquire pairs with the release of
                    // the last reader's unlock_shared (or writer's unlock).
                    if (w->state.compare_exchange_weak(s, (s & ~rw_ww) | rw_wp, std::memory_order_acquire,
                                                       std::memory_order_relaxed))
                        break;
                    continue;
                }
                wait_step(spins);
            }
        }
        aux_unlock(w);
    }
    static void release(tc_word* w) noexcept {
        const std::uint32_t old = w->state.fetch_and(~(rw_writer_mask | rw_rsleep), std::memory_order_release);
        if (old & rw_rsleep) futex_wake(&w->state, INT_MAX);
    }
    // Readers change other bits concurrently: read-modify-writes throughout.
    static void begin_combining(tc_word* w) noexcept {
        w->state.fetch_add(rw_wcombining - rw_wp, std::memory_order_relaxed);
    }
    static void end_combining(tc_word* w) noexcept {
        w->state.fetch_sub(rw_wcombining - rw_wp, std::memory_order_relaxed);
    }
    static void mark_ooo(tc_word* w) noexcept { w->state.fetch_or(rw_wooo, std::memory_order_relaxed); }
    // Relaxed: as gate_spin::ooo_marked.
    static bool ooo_marked(tc_word* w) noexcept { return (w->state.load(std::memory_order_relaxed) & rw_wooo) != 0; }
    static bool take_ooo(tc_word* w) noexcept {
        if (!ooo_marked(w)) return false;
        w->state.fetch_and(~rw_wooo, std::memory_order_relaxed);
        return true;
    }
};

template <class F>
SPINDLE_ALWAYS_INLINE void with_gate(tc_kind k, F&& f) {
    switch (k) {
        case tc_kind::spin: f(gate_spin{}); break;
        case tc_kind::blocking: f(gate_blocking{}); break;
        case tc_kind::shared: f(gate_shared{}); break;
    }
}

bool take_ooo_of(tc_frame* f) noexcept {
    bool r = false;
    with_gate(f->kind, [&](auto g) { r = decltype(g)::take_ooo(f->lock); });
    return r;
}

// The running code is about to take `w` (lock() found it held, or
// lock_shared() found a writer). If a combiner up its chain of delegation
// runs it as w's section -- it was delegated for w, then for other locks,
// and released w out of order, so w's release waits for that section to
// come back to w's combiner -- taking w again would wait for itself. Move
// the section home first: tclock_may_block() hands it back frame by frame,
// and the frame below w's applies the deferred release on the way
// (finish_done -> ooo_finish), so w is then an ordinary lock held by others
// or free. The chain: our record's innermost frame, the request it runs
// (curr), the frame that request was made from (outer), and so on; each
// link was written before the request it leads to was queued, and we run
// after that request was dequeued (acquire), so the walk reads settled
// fields. One load when not delegated.
void move_home_before_retaking(tc_word* w, const char* type) noexcept {
    const tc_frame* found = nullptr;
    for (const tc_frame* f = this_record()->frames; f != nullptr; f = f->curr->outer) {
        if (f->lock == w) {
            found = f;
            break;
        }
    }
    if (found == nullptr) return;
#if SPINDLE_DEBUG_CHECKS
    bool released = false;
    with_gate(found->kind, [&](auto g) { released = decltype(g)::ooo_marked(w); });
    if (!released) tc_misuse(w, type, "lock() by a critical section that already holds it");
#else
    (void)type;
#endif
    (void)spindle::tclock_may_block();
}

[[noreturn]] void ooo_finish(tc_qnode* q, tc_frame* of) noexcept;

// ---------------------------------------------------------------------------
// 3. The core

template <class G>
struct core {
    // Tell request q `v` (q_head or q_done). Release pairs with wait_turn's
    // acquire: q's thread then sees everything its section (run here) did,
    // and q->resume. q may be gone right after the store/exchange; only
    // futex_wake touches its address afterwards (mapped memory: at worst a
    // spurious wake-up of a later frame, which re-checks).
    static void notify(tc_qnode* q, std::uint32_t v) noexcept {
        if constexpr (G::parks) {
            const bool slept = q->was_parked;
            if (q->state.exchange(v, std::memory_order_acq_rel) == q_parked || slept) futex_wake(&q->state, 1);
        } else {
            q->state.store(v, std::memory_order_release);
        }
    }

    // tclock_blocking: q_waiting/q_parked -> q_processing, so that the waiter
    // does not go to sleep while its section runs; remember if it already slept.
    static void mark_processing(tc_qnode* q) noexcept {
        if constexpr (G::parks) {
            if (q->state.exchange(q_processing, std::memory_order_acq_rel) == q_parked) q->was_parked = true;
        }
    }

    // A queued request waits for q_head or q_done, on its ephemeral stack.
    static std::uint32_t wait_turn(tc_qnode* q) noexcept {
        unsigned spins = 0;
        for (;;) {
            // Acquire pairs with notify's release.
            const std::uint32_t s = q->state.load(std::memory_order_acquire);
            if (s == q_head || s == q_done) return s;
            if constexpr (G::parks) {
                if (s == q_waiting && spins >= park_after) {
                    std::uint32_t e = q_waiting;
                    // q_waiting -> q_parked; a combiner's exchange either
                    // comes first (the CAS fails) or sees q_parked and wakes us.
                    if (q->state.compare_exchange_strong(e, q_parked, std::memory_order_acq_rel,
                                                         std::memory_order_acquire)) {
                        while (q->state.load(std::memory_order_acquire) == q_parked) futex_wait(&q->state, q_parked);
                    }
                    continue;
                }
                counted_wait_step(spins);
            } else {
                wait_step(spins);
            }
        }
    }

    static tc_qnode* wait_next(tc_qnode* q) noexcept {
        unsigned spins = 0;
        for (;;) {
            // Acquire pairs with the successor's release store of the link:
            // its qnode fields are visible.
            if (tc_qnode* n = q->next.load(std::memory_order_acquire)) return n;
            wait_step(spins);
        }
    }

    // Whether n is the last request queued. Not the tail: a successor has
    // swapped itself in (it may not have linked itself to n yet, wait_next
    // covers that), and the tail never moves back while n is queued behind
    // a head (only a head resets it). Asking the tail rather than n->next
    // lets a request that is still linking count as a successor. Acquire
    // pairs with the tail exchange (the successor's fields).
    static bool is_tail(tc_word* w, tc_qnode* n) noexcept {
        return w->tail.load(std::memory_order_acquire) == n;
    }

    // Run request n's section: switch into its landing in lock_slow.
    static void start(tc_frame* f, tc_qnode* n, arch::context* from, bool dead) noexcept {
        f->curr = n;
        mark_processing(n);
        lock_landing* l = n->main;
        l->runner = f;
        if (adopting()) enter_identity(f->self->rec, l->ident);
        // §3.6.2: the section's hot data is the top of its stack.
        auto* sp = static_cast<const char*>(l->ctx.regs.sp);
        __builtin_prefetch(sp, 1, 3);
        __builtin_prefetch(sp + 64, 1, 3);
        __builtin_prefetch(sp + 128, 1, 3);
        __builtin_prefetch(sp + 192, 1, 3);
        switch_from(from, &l->ctx, dead);
    }

    // Request cur's section is over (its context is, or will be when we
    // switch from `from`, saved in cur->resume). Run the next one directly,
    // or go back to the loop to end the batch.
    static void end_of_section(tc_frame* f, tc_qnode* cur, arch::context* from, bool dead) noexcept {
        ++f->count;
        // (I2): cur has a successor (it may still be linking itself).
        tc_qnode* const nxt = wait_next(cur);
        f->to_notify = cur;
        if (f->count < tclock_batch_limit && !is_tail(f->lock, nxt)) {
            start(f, nxt, from, dead);
        } else {
            f->next_head = nxt;
            if (adopting()) enter_own(f->self->rec);
            switch_from(from, &f->loop, dead);
        }
    }

    [[noreturn]] static void resume_own(tc_qnode* q) noexcept {
        *errno_loc() = q->err0;  // whatever the sections we ran left in our errno
        q->rec->pop(q);
        if (adopting()) enter_identity(q->rec, q->main->ident);
        switch_from(&q->eph, &q->main->ctx, true);
        __builtin_unreachable();
    }

    [[noreturn]] static void finish_done(tc_qnode* q) noexcept {
        if (tc_frame* of = q->outer; of != nullptr && take_ooo_of(of)) ooo_finish(q, of);
        q->rec->pop(q);
        if (adopting()) enter_identity(q->rec, q->resume->ident);
        switch_from(&q->eph, &q->resume->ctx, true);
        __builtin_unreachable();
    }

    // First and only function of an ephemeral frame: phases 1-4 of §3.2.
    [[noreturn]] static void eph_entry(arch::raw_context* self, arch::raw_context*) noexcept {
        auto* q = reinterpret_cast<tc_qnode*>(reinterpret_cast<char*>(self) - offsetof(tc_qnode, eph));
        arch::context_started(&q->eph);
        tc_word* const w = q->lock;
        thread_record* const rec = q->rec;

        // Phase 1. (tail): t -> q. acq_rel: release publishes q's fields to
        // whoever links behind us or dequeues us; acquire makes prev's
        // fields ours before we link.
        if (tc_qnode* prev = w->tail.exchange(q, std::memory_order_acq_rel)) {
            // Release pairs with wait_next's acquire.
            prev->next.store(q, std::memory_order_release);
            if (wait_turn(q) == q_done) finish_done(q);
        }
        for (;;) {
            // Phase 2: we are the head.
            G::acquire_head(w);
            // Phase 3. (tail): q -> null if we are alone.
            tc_qnode* expected = q;
            if (w->tail.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel,
                                                std::memory_order_relaxed))
                resume_own(q);
            tc_qnode* const next = wait_next(q);
            if (is_tail(w, next)) {
                notify(next, q_head);
                resume_own(q);
            }
            // Phase 4: combine.
            tc_frame f;
            f.lock = w;
            f.kind = G::kind;
            f.self = q;
            f.outer_frame = rec->frames;
            rec->frames = &f;
            G::begin_combining(w);
            start(&f, next, &f.loop, false);
            // The batch is over, or f.curr gave its section back.
            rec->frames = f.outer_frame;
            G::end_combining(w);
            if (!f.handback) {
                notify(f.to_notify, q_done);
                notify(f.next_head, q_head);
                resume_own(q);
            }
            // The handed-back section keeps the lock (now `locked`); we stay
            // the queue head and take the gate again when it is released.
            tc_qnode* const hb = f.to_notify;
            // Relaxed: only we read our own link from now on (our old
            // successors are all done or handed back). (I2): hb has one.
            q->next.store(wait_next(hb), std::memory_order_relaxed);
            notify(hb, q_done);
        }
    }

    static void lock_slow(tc_word* w) noexcept {
        move_home_before_retaking(w, G::name);  // see there; errno is kept by the move
        // The caller's errno, before anything here can call into libc: the
        // first contended lock() of a thread creates its record and maps its
        // ephemeral stack, and those calls may leave errno changed.
        const int caller_errno = *errno_loc();
        thread_record* const rec = this_record();
        tc_qnode* const q = rec->push(&eph_entry);
        const bool adopt = adopting();  // decided here the first time (errno restored below)
        // Our own thread pointer, unless a combiner runs us as another
        // thread: then `rec` is that combiner's, whose own_fs is set.
        if (adopt && rec->own_fs == 0) rec->own_fs = read_fs();
        *errno_loc() = caller_errno;
        if (q == nullptr) {  // no ephemeral stack, or no room for one more frame
            G::acquire_head(w);
            return;
        }
        lock_landing land;
        q->kind = G::kind;
        q->lock = w;
        q->outer = rec->frames;  // (I3): non-null iff we run inside a combined section
        q->main = &land;
        q->err0 = caller_errno;
        if (adopt) {
            // We run as `land.ident`; the ephemeral frame runs as our thread.
            land.ident = leave_identity(rec);
            enter_own(rec);
        }
        switch_from(&land.ctx, &q->eph, false);
        // Here: either our own thread (we are the holder), or a combiner
        // about to run our section on its thread.
        if (tc_frame* f = land.runner) {
            if (tc_qnode* p = f->to_notify) {  // the section run before ours (§3.6.1)
                f->to_notify = nullptr;
                notify(p, q_done);
            }
            *errno_loc() = q->err0;  // q lives: our thread waits for "done"
        }
    }

    static void unlock_slow(tc_word* w) noexcept {
        // Relaxed: our own lock's state; only the holder (us) changes it.
        const std::uint32_t s = w->state.load(std::memory_order_relaxed);
        if (!G::held(s)) {
#if SPINDLE_DEBUG_CHECKS
            tc_misuse(w, G::name, "unlock of an unlocked lock");
#else
            return;
#endif
        }
        if (!G::combining(s)) {
            G::release(w);
            return;
        }
        thread_record* const rec = this_record();
        tc_frame* const f = rec->frames;
        if (f == nullptr || f->lock != w) {
            // Out of order: the combiner of w is up the chain of delegation
            // (§4.1). It applies the release when our context reaches it.
            G::mark_ooo(w);
            return;
        }
        tc_qnode* const cur = f->curr;
        unlock_landing ul;
        ul.err0 = cur->err0;
        ul.err_end = *errno_loc();
        cur->resume = &ul;
        if (adopting()) {
            ul.ident = leave_identity(rec);
        }
        end_of_section(f, cur, &ul.ctx, false);
        // Resumed on the requester's thread (or the thread it delegated
        // through), after "done". Keep what the section wrote into this
        // thread's errno directly; else take the value it ended with.
        int* const e = errno_loc();
        if (*e == ul.err0) *e = ul.err_end;
    }
};

// ---------------------------------------------------------------------------
// 4. Out-of-order release

// Request q (made by the section that `of` runs) came back "done", and that
// section released of's lock while another thread ran it. The section is
// over for `of` too: end it as its unlock() would have, with the context the
// last runner saved. q's frame is dropped.
[[noreturn]] void ooo_finish(tc_qnode* q, tc_frame* of) noexcept {
    g_ooo_finishes.fetch_add(1, std::memory_order_relaxed);
    tc_qnode* const cur = of->curr;
    unlock_landing* const ul = q->resume;
    // The errno the section ended with. With thread pointer adoption every
    // runner ran it as its own thread, so err_end (read by its last runner
    // at the unlock) is that thread's errno, exactly; this frame runs as our
    // own thread, whose errno is not the section's. Without, a write the
    // section made through an address computed on this thread is here.
    int* const e = errno_loc();
    const int effective = (adopting() || *e == q->err0) ? ul->err_end : *e;
    ul->err0 = cur->err0;
    ul->err_end = effective;
    cur->resume = ul;
    q->rec->pop(q);
    with_gate(of->kind, [&](auto g) { core<decltype(g)>::end_of_section(of, cur, &q->eph, true); });
    __builtin_unreachable();
}

}  // namespace

// ---------------------------------------------------------------------------
// Entry points

void tc_lock_slow(tc_word* w, tc_kind kind) noexcept {
    with_gate(kind, [&](auto g) { core<decltype(g)>::lock_slow(w); });
}

void tc_unlock_slow(tc_word* w, tc_kind kind) noexcept {
    with_gate(kind, [&](auto g) { core<decltype(g)>::unlock_slow(w); });
}

void tc_wake_sleepers(tc_word* w, tc_kind) noexcept {
    // All of them: readers (tclock_shared); the head and, rarely, a
    // stack-less waiter (tclock_blocking) -- a wake of one could leave the
    // other asleep with the bit gone. The cost is the same with one sleeper.
    futex_wake(&w->state, INT_MAX);
}

// ---------------------------------------------------------------------------
// 5. Readers of tclock_shared, misuse

void tc_lock_shared_slow(tc_word* w) noexcept {
    move_home_before_retaking(w, "tclock_shared");  // a writer section that released w out of order
    aux_lock(w);  // no writer phase starts while we hold it
    // readers += 1. Acquire: see below.
    w->state.fetch_add(rw_reader, std::memory_order_acquire);
    unsigned spins = 0;
    for (;;) {
        // Acquire pairs with the writer's release of the writer byte: its
        // section happens before ours. ww is clear: only a writer head
        // holding aux sets it, and it clears it before releasing aux.
        std::uint32_t s = w->state.load(std::memory_order_acquire);
        if ((s & rw_writer_mask) == 0) break;
        if (spins < park_after) {
            counted_wait_step(spins);
            continue;
        }
        // Same protocol as the blocking head: set rsleep on the value seen,
        // sleep on it; the writer's release clears it and wakes.
        if ((s & rw_rsleep) == 0 &&
            !w->state.compare_exchange_weak(s, s | rw_rsleep, std::memory_order_relaxed, std::memory_order_relaxed))
            continue;
        futex_wait(&w->state, s | rw_rsleep);
    }
    aux_unlock(w);
}

const void* tc_tail(const tc_word* w) noexcept { return w->tail.load(std::memory_order_acquire); }

tc_counters tc_read_counters() noexcept {
    return {g_ooo_finishes.load(std::memory_order_relaxed), g_handbacks.load(std::memory_order_relaxed),
            g_handoffs.load(std::memory_order_relaxed)};
}

}  // namespace spindle::detail

namespace spindle {

bool tclock_may_block() noexcept {
    using namespace detail;
    bool moved = false;
    for (;;) {
        thread_record* const rec = this_record();
        tc_frame* const f = rec->frames;
        if (f == nullptr) return moved;  // (I3): not running a combined section
        // Give f->curr's section back to the thread that asked for it: save
        // our context as its resume point and end f's batch.
        tc_qnode* const cur = f->curr;
        unlock_landing ul;
        ul.err0 = cur->err0;
        ul.err_end = *errno_loc();
        cur->resume = &ul;
        f->handback = true;
        f->to_notify = cur;
        g_handbacks.fetch_add(1, std::memory_order_relaxed);
        if (adopting()) {
            ul.ident = leave_identity(rec);
            enter_own(rec);
        }
        switch_from(&ul.ctx, &f->loop, false);
        int* const e = errno_loc();
        if (*e == ul.err0) *e = ul.err_end;
        moved = true;  // and again, if that thread itself runs us for someone
    }
}

bool tclock_delegated() noexcept { return detail::this_record()->frames != nullptr; }

bool tclock_adopts_thread_pointer() noexcept { return detail::adopting(); }

bool tclock_adopt_thread_pointer(bool on) noexcept {
    using namespace detail;
    const int v = (on && fsgsbase_usable()) ? 1 : 0;
    g_adopt.store(v, std::memory_order_relaxed);
    return v == 1;
}

}  // namespace spindle
