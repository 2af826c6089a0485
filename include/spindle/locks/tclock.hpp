// spindle/locks/tclock.hpp — TCLocks: transparent delegation locks for threads.
//
//     spindle::tclock m;                 // TCLock-SP: waiters spin (and yield)
//     spindle::tclock_blocking b;        // TCLock-B: waiters spin, then sleep
//     { std::lock_guard g(m); ... }      // ordinary lock/unlock: no lambdas
//
// Gupta et al., "Ship your Critical Section, Not Your Data: Enabling
// Transparent Delegation with TCLocks", OSDI '23. A contended critical
// section does not move the lock's data to the waiter's CPU: the waiter
// parks its *execution context* and the current lock holder (the combiner)
// runs the waiter's critical section on its own CPU by switching onto the
// waiter's stack, then switches back. The data stays in one cache; only one
// or two cache lines of context move per section.
//
// Algorithm (paper §3.2, with §3.6.1 and §4.1):
//
//   * Fast path: a test-and-set on `state` (0 -> locked). The section runs
//     where it was called, like any spinlock.
//   * Slow path (out of line): the caller's context is saved (the CACS switch
//     of arch/context.hpp: the compiler spills only what is live) and the
//     thread switches to its *ephemeral stack*: a per-thread mapping of
//     256 KiB with a PROT_NONE guard page below it, mapped with mmap on the
//     first contended lock() and unmapped when the thread exits (not a fiber
//     stack: the TCLocks are part of spindle_locks, with no runtime, and go
//     into the preload library). There it joins an MCS queue. Its own
//     stack is not touched again until its section is done, so a combiner may
//     use it, and a signal delivered to the waiting thread runs on the
//     ephemeral stack (at least 64 KiB are free below every frame; a handler
//     that needs more hits the guard page: a plain SIGSEGV, with no message).
//   * The queue head acquires the TAS gate. Alone, or with one successor, it
//     hands the head role on and runs its own section. With two or more
//     successors it becomes the combiner: `state` goes to `combining` (the
//     fast path is closed), and for each waiter w that has a successor, up to
//     tclock_batch_limit waiters, it switches to w's saved context. w's code
//     returns from lock() on the combiner's thread, runs its section, and its
//     unlock() (seeing `combining`) saves w's context again and switches
//     directly into the next waiter (waiter to waiter, §3.6.1), whose landing
//     tells w it is done; the stack top of the next waiter is prefetched
//     before the jump. When the batch ends the combiner passes the head role
//     to the first waiter it did not run, and runs its own section.
//   * A waiter told "done" switches from its ephemeral stack straight to the
//     point after its unlock(): its section has run; it never runs it again.
//
// Lock word (detail/tclock_word.hpp):
//
//     state: 0 free | 1 locked | 2 combining | +4 released out of order
//            | +8 (tclock_blocking) the queue head sleeps on `state`
//            | +16 handoff: the head has waited 1 ms | +32 given to it
//     tail:  last queued waiter, or null
//
//     fast lock       (state)    0 -> 1                    CAS, acquire
//     fast unlock     (state)    1 -> 0                    store, release
//     head takes      (state)    0 -> 1                    CAS, acquire
//     head asks       (state)    1 -> 1|16                 CAS (after 1 ms)
//     release, asked  (state)    1|16 -> 1|32              CAS, release
//     head takes it   (state)    1|32 -> 1                 CAS, acquire
//     combining       (state)    1 -> 2 -> 1               plain stores by the holder
//     combined unlock (state)    2 stays 2: switch back to the combiner
//
// Size 16 bytes, all-zero = unlocked, constexpr constructor, no destructor.
// Not strictly fair: the fast path may overtake queued waiters, but only for
// 1 ms: a queue head that has waited that long closes the fast path and is
// handed the gate at the next release (tclock.cpp, "Bounded overtaking").
// The queue itself is FIFO and a combiner runs at most tclock_batch_limit
// sections before it passes the role on. Use spindle::mutex for fibers, and hemlock or mcs when
// critical sections need their own thread (see "What a delegated critical
// section observes").
//
// Contract:
//
//     state \ op     lock()              try_lock()   unlock()
//     free           takes it            true         invalid (*)
//     held           waits / delegated   false        releases (**)
//
//   (*)  aborts with "spindle: tclock <addr>: unlock of an unlocked lock" when
//        SPINDLE_DEBUG_CHECKS is on; undefined otherwise.
//   (**) by the code that locked it, on whatever thread that code runs.
//
// What a delegated critical section observes. A section run by a combiner
// executes on the combiner's *kernel thread*, with the waiter's stack and
// registers, and -- where the CPU and kernel let user space write the thread
// pointer (x86-64 FSGSBASE, Linux 5.9+; not in sanitizer builds; see
// tclock_adopt_thread_pointer() below) -- with the *waiter's thread
// pointer*: the combiner adopts it for the section and takes its own back
// when the section's context leaves. Then the section's thread_local
// variables, errno, pthread_self(), C++ exception state and everything
// glibc keeps behind the thread pointer (malloc's thread cache, stdio lock
// owners, the thread id glibc caches) are the waiter's own, exactly as if the
// section ran on its thread; what stays the combiner's is what the kernel
// keeps per thread: gettid() (a system call), the signal mask, signal
// delivery (a signal sent to the waiter's pthread_t from inside the section
// -- pthread_kill(pthread_self()) included -- goes to the combiner's kernel
// thread, and a handler that runs during the section sees the waiter's
// thread_local variables), scheduling, CPU time. A signal sent to the
// *waiting* thread meanwhile runs its handler at once on the ephemeral stack
// (as the TCLocks paper has it), *beside* the section's code -- and with
// adoption, in the same errno and thread_local variables: a handler that
// saves and restores errno can undo a write the section makes in between,
// and one that writes errno or thread_local variables without restoring
// them changes the section's. Holding the waiter's signals until its
// section is over would avoid that, but deadlocks programs that stop their
// threads with signals and wait for every one to answer (garbage
// collectors) whenever the thread that stops the world holds a lock with
// two waiters. Programs whose threads take signals while they wait for a
// TCLock and whose handlers touch errno or thread-locals set
// SPINDLE_TCLOCK_ADOPT=0. Without adoption
// (elsewhere, or SPINDLE_TCLOCK_ADOPT=0):
//
//   * errno: spindle carries it both ways. The section starts with the errno
//     value the waiter had at lock(), and the value it ends with is the
//     waiter's errno after unlock(); the combiner's own errno is restored
//     before it runs its own section. This holds whether the compiler
//     reloads errno's address inside the section (libc calls always do; they
//     write the combiner's errno) or reuses an address computed before
//     lock(): __errno_location is declared `const`, so -O2 code may do that,
//     and then a write in the section lands directly in the waiter's errno
//     (the waiting thread does not touch its errno: it waits with raw
//     system calls -- a signal handler that runs on it meanwhile may, as
//     with adoption above). At unlock the waiter keeps what was written directly
//     into its errno if anything was, else takes the combiner's final value.
//     Limit: *inside* one section, code that mixes both (a libc call that
//     fails, then a read of errno through an address cached before lock())
//     reads the waiter's copy, not the value the libc call set; and a section
//     that stores, through a cached address, the very value the waiter had
//     at lock() after a libc call changed errno ends with the libc value.
//     Read errno inside a section right after the call that set it, or call
//     tclock_may_block() first.
//   * thread_local variables, pthread_self(), gettid(), the signal mask,
//     CPU time accounting, locale, the floating-point environment (MXCSR and
//     x87 control word are not switched): the *combiner's*. A section must
//     not rely on them; if it must, it calls tclock_may_block() first.
//     Thread-local addresses computed before lock() and reused inside the
//     section (the compiler may do it) point at the waiter's variables, which
//     is harmless only because the waiter's thread does not run meanwhile
//     (but for a signal handler on it, as above).
//     pthread_self() is declared `const` too: inside a section it returns
//     the combiner's thread, or the waiter's if the compiler reused a call
//     made before lock() (both GCC 12 and Clang 19 do at -O2). Which one is
//     not something a program can rely on.
//   * C++ exceptions: the in-flight exception state (__cxa_eh_globals)
//     travels with the context, so try/catch inside a section works.
//   * Locks: a section may take other tclocks (nested combining) and release
//     them in any order; other locks are taken by the running thread (a
//     pthread mutex records the combiner as owner: release it in the same
//     section, as with any lock).
//
// Blocking inside a critical section. A delegated section that sleeps
// (futex, read(2), a condition variable wait) sleeps on the combiner's
// thread: the combiner and every waiter behind it wait with it, and a
// condition variable that registers a per-thread record would register the
// combiner's. Call spindle::tclock_may_block() before such a wait: if the
// running section was delegated it moves back to its own thread (the lock
// stays held; the combiner ends its batch and queues for the lock again), and
// from then on until its unlock() the section runs where it was called. It
// costs nothing when the section is not delegated. Detected without the call:
//   * a wait that releases the tclock first (unlock(); wait; lock() — the
//     standard condition-variable shape) ends the delegated section at the
//     unlock() and sleeps on the waiter's own thread;
//   * a thread that sleeps in any spindle::sync primitive (mutex,
//     semaphore, condition variable, latch, barrier, event, channel, pool):
//     their thread-parking path calls tclock_may_block() before it sleeps;
//   * in the LD_PRELOAD library: pthread_cond_wait and friends, every call
//     whose result depends on the calling thread (recursive and errorcheck
//     mutexes, rwlock writers, fork; preload/delegation.hpp), and the
//     common sleeping calls of libc (nanosleep, poll, read, sem_wait,
//     pthread_join...; preload/blocking.cpp).
// Not detected: other blocking calls (a raw futex or system call, another
// library's lock, and outside the preload library any libc call); a section
// that sleeps in one without the call stalls the batch for as long as it
// sleeps (the lock stays correct). A section moved back, by the call or by
// the detection, keeps what it holds: a lock that records its owner's
// thread (a recursive or errorcheck pthread mutex, flockfile, spindle::mutex
// in debug builds) taken inside the delegated part names the combiner and is
// then released from the waiter's thread -- take such locks after
// tclock_may_block(), or outside the tclock's section.
//
// Nesting and out-of-order release (§4.1). A delegated section may take
// another tclock. If that lock is contended, the *combiner's* thread queues
// for it on a new frame of its own ephemeral stack, below the frames it is
// using; nesting depth is limited only by that stack (256 KiB, a few hundred
// levels), and beyond that the lock is taken by spinning on its gate
// without delegation, which is always correct. A section combined for lock B
// that releases an outer lock A before B marks A `ooo`; A's combiner applies
// the release when the section's context comes back to it (after B's
// unlock), so locks are released in the reverse order of their acquisition.
// A section that takes A again before that (hand-over-hand code that comes
// back to A while it holds B) would wait for itself: its lock() of A first
// moves the section home, as tclock_may_block() does, which applies the
// deferred release on the way, and then queues for A like any thread.
//
// Undefined uses: unlock of a lock not held by the calling code; lock() of a
// tclock the calling code already holds; calling lock() from a signal handler
// or from an ephemeral stack's waiting code; pthread_exit or longjmp out of a
// critical section; destroying a lock that is held or waited for; a
// critical section that runs on a fiber (fibers use spindle::mutex).
//
// Not done (yet): the NUMA policy of §3.6.3 (one node here).
#pragma once

#include <atomic>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/locks/detail/tclock_word.hpp>

namespace spindle {

// Most sections a combiner runs for others before passing the role on.
inline constexpr unsigned tclock_batch_limit = 256;

// Called inside a critical section before anything that may block or that
// needs the calling thread's identity. If the running section was delegated
// to a combiner, moves it back to the thread that called lock() (for every
// enclosing delegation) and returns true; otherwise returns false at once.
bool tclock_may_block() noexcept;

// True if the calling code runs as a delegated section on a combiner's thread.
bool tclock_delegated() noexcept;

// Thread pointer adoption ("What a delegated critical section observes"):
// whether a combiner runs each section with the thread pointer of the thread
// that called lock(). On by default where the CPU and kernel let user space
// write it (x86-64 FSGSBASE, Linux 5.9+), except in sanitizer builds, and
// unless the environment says SPINDLE_TCLOCK_ADOPT=0 (read at the first
// contended lock; a value other than 0 or 1 stops the program with a
// message).
bool tclock_adopts_thread_pointer() noexcept;
// Turns it on (where it can be) or off, process-wide; returns whether it is
// on now. Call it while no tclock is contended (at start-up, say): a section
// delegated across the change would run with the wrong thread pointer.
bool tclock_adopt_thread_pointer(bool on) noexcept;

class SPINDLE_CAPABILITY("mutex") tclock {
public:
    constexpr tclock() noexcept = default;
    tclock(const tclock&) = delete;
    tclock& operator=(const tclock&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        std::uint32_t expected = 0;
        // (state): 0 -> locked. Acquire pairs with the release of the unlock
        // (or the combiner's last store) that freed the lock.
        if (!w_.state.compare_exchange_strong(expected, detail::tc_locked, std::memory_order_acquire,
                                              std::memory_order_relaxed)) [[unlikely]]
            detail::tc_lock_slow(&w_, detail::tc_kind::spin);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        std::uint32_t expected = 0;
        return w_.state.compare_exchange_strong(expected, detail::tc_locked, std::memory_order_acquire,
                                                std::memory_order_relaxed);
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        // Relaxed: only the holder changes a held TCLock-SP's state, but for
        // the queue head's handoff request (which sends us to the slow path;
        // one set between this load and the store is dropped and made
        // again: tclock.cpp, "Bounded overtaking").
        if (w_.state.load(std::memory_order_relaxed) == detail::tc_locked) [[likely]] {
            // (state): locked -> 0. Release pairs with the next fast-path or
            // queue-head CAS.
            w_.state.store(0, std::memory_order_release);
            return;
        }
        detail::tc_unlock_slow(&w_, detail::tc_kind::spin);  // combining, or misuse
    }

private:
    detail::tc_word w_;
};
static_assert(sizeof(tclock) == 16);

class SPINDLE_CAPABILITY("mutex") tclock_blocking {
public:
    constexpr tclock_blocking() noexcept = default;
    tclock_blocking(const tclock_blocking&) = delete;
    tclock_blocking& operator=(const tclock_blocking&) = delete;

    void lock() noexcept SPINDLE_ACQUIRE() {
        std::uint32_t expected = 0;
        if (!w_.state.compare_exchange_strong(expected, detail::tc_locked, std::memory_order_acquire,
                                              std::memory_order_relaxed)) [[unlikely]]
            detail::tc_lock_slow(&w_, detail::tc_kind::blocking);
    }

    [[nodiscard]] bool try_lock() noexcept SPINDLE_TRY_ACQUIRE(true) {
        std::uint32_t expected = 0;
        return w_.state.compare_exchange_strong(expected, detail::tc_locked, std::memory_order_acquire,
                                                std::memory_order_relaxed);
    }

    void unlock() noexcept SPINDLE_RELEASE() {
        // Relaxed: a read of our own state; only the queue head's sleeper
        // and handoff bits may change under us, and the exchange below reads
        // them again (a handoff request it drops is made again; tclock.cpp,
        // "Bounded overtaking").
        const std::uint32_t s = w_.state.load(std::memory_order_relaxed);
        if ((s & ~detail::tc_sleeper) == detail::tc_locked) [[likely]] {
            // (state): locked[+sleeper] -> 0. Release pairs with the next
            // CAS that takes the lock; the exchange also reads a sleeper bit
            // the queue head set with its CAS (sleeper protocol in tclock.cpp).
            if (w_.state.exchange(0, std::memory_order_release) & detail::tc_sleeper) [[unlikely]]
                detail::tc_wake_sleepers(&w_, detail::tc_kind::blocking);
            return;
        }
        detail::tc_unlock_slow(&w_, detail::tc_kind::blocking);
    }

private:
    detail::tc_word w_;
};
static_assert(sizeof(tclock_blocking) == 16);

}  // namespace spindle
