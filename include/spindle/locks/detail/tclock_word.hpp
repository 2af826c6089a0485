// spindle/locks/detail/tclock_word.hpp — the 16-byte word shared by the three
// TCLocks (tclock, tclock_blocking, tclock_shared) and their out-of-line slow
// paths (src/locks/tclock.cpp). The algorithm is described in
// spindle/locks/tclock.hpp; this file only names the bits.
//
//     offset 0   state   uint32   the gate: who may run a critical section
//     offset 4   aux     uint32   tclock_shared: its reader/writer-head mutex
//                                 (0 free, 1 held, 2 held + sleepers); else 0
//     offset 8   tail    qnode*   MCS queue of contended writers/lockers
//
// state, tclock and tclock_blocking:
//
//     bit 0  locked      held by a section that runs on its own thread
//     bit 1  combining   held by a combiner that runs queued sections
//     bit 2  ooo         (with combining) the combined section released the
//                        lock out of order; the release is applied when the
//                        section gives its thread back (tclock.hpp, "Nesting")
//     bit 3  sleeper     tclock_blocking: the queue head sleeps on `state`
//     bit 4  handoff     (with locked) the queue head has waited 1 ms: the
//                        fast path is closed, the release passes the gate on
//     bit 5  given       (with locked) passed to the head, not yet taken
//
// state, tclock_shared:
//
//     bits 0-7   writer byte: 1 writer present (wp), 2 combining, 4 ooo
//     bit 8      ww: the writer queue's head waits for readers to leave
//     bit 9      a reader sleeps on `state` waiting for the writer byte to clear
//     bits 16-31 number of readers (in or entering their sections)
//
// All zero is a free lock with an empty queue: zero-initialized storage
// (inside a pthread_mutex_t, a static) is a valid unlocked lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <spindle/arch/config.hpp>
#include <spindle/arch/fatal.hpp>

namespace spindle::detail {

struct tc_qnode;  // lives on a waiter's ephemeral stack (src/locks/tclock.cpp)

struct tc_word {
    std::atomic<std::uint32_t> state{0};
    std::atomic<std::uint32_t> aux{0};
    std::atomic<tc_qnode*> tail{nullptr};
};
static_assert(sizeof(tc_word) == 16, "a TCLock fits in 16 bytes (bytes 24..39 of a pthread_mutex_t)");

enum class tc_kind : std::uint8_t { spin = 0, blocking = 1, shared = 2 };

inline constexpr std::uint32_t tc_locked = 1;
inline constexpr std::uint32_t tc_combining = 2;
inline constexpr std::uint32_t tc_ooo = 4;
inline constexpr std::uint32_t tc_sleeper = 8;
inline constexpr std::uint32_t tc_handoff = 16;
inline constexpr std::uint32_t tc_given = 32;

inline constexpr std::uint32_t rw_wp = 1;            // writer present
inline constexpr std::uint32_t rw_wcombining = 2;    // writers combined
inline constexpr std::uint32_t rw_wooo = 4;          // combined writer released out of order
inline constexpr std::uint32_t rw_writer_mask = 0xff;
inline constexpr std::uint32_t rw_ww = 0x100;        // writer waiting for readers
inline constexpr std::uint32_t rw_rsleep = 0x200;    // a reader sleeps on the word
inline constexpr std::uint32_t rw_reader = 1u << 16; // one reader
inline constexpr std::uint32_t rw_block_readers = 0xffff;  // any of these set: readers take the slow path

// Out of line (src/locks/tclock.cpp).
SPINDLE_COLD void tc_lock_slow(tc_word* w, tc_kind kind) noexcept;
SPINDLE_COLD void tc_unlock_slow(tc_word* w, tc_kind kind) noexcept;
SPINDLE_COLD void tc_lock_shared_slow(tc_word* w) noexcept;
SPINDLE_COLD void tc_wake_sleepers(tc_word* w, tc_kind kind) noexcept;
// For tests and diagnostics: the last queued request of `w` (an opaque
// identity: it changes each time a request queues), and counters of rare
// events.
const void* tc_tail(const tc_word* w) noexcept;
struct tc_counters {
    std::uint64_t ooo_finishes;  // out-of-order releases applied by a combiner
    std::uint64_t handbacks;     // sections given back by tclock_may_block
    std::uint64_t handoffs;      // gates passed to a queue head that waited 1 ms
};
tc_counters tc_read_counters() noexcept;

// "spindle: <type> <address>: <what>", then abort (arch/fatal.hpp).
[[noreturn]] SPINDLE_COLD inline void tc_misuse(const void* lock, const char* type, const char* what) noexcept {
    fatal("%s %p: %s", type, lock, what);
}

}  // namespace spindle::detail
