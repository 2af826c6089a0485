// spindle/sync/detail/cqs.hpp — CancellableQueueSynchronizer: a fair,
// abortable FIFO of waiters on a linked list of cell segments (Koval,
// Khalanskiy, Alistarh, "CQS: A Formally-Verified Framework for Fair and
// Abortable Synchronization", PLDI 2023, §2–§4).
//
// What it is. A logically infinite array of cells and two counters:
//
//     suspend_idx_ --FAA--> i : suspend() waits in cells[i]
//     resume_idx_  --FAA--> j : resume(v) completes cells[j]
//
// The array is a list of segments of `cqs_segment_cells` cells, found from two
// head pointers (suspend_seg_, resume_seg_). A primitive keeps its own state
// word (a permit count, say) and calls suspend() when it must wait and
// resume(v) when it must wake the oldest waiter; resume may come *before* the
// matching suspend (it leaves `v` in the cell: elimination). The primitive
// must guarantee that every resume(v) has a matching suspend that will come
// (the paper's contract); cqs never looks at the primitive's state.
//
// T: trivially copyable, default constructible, at most 8 bytes (permits,
// pointers for pools and channels). Values travel as 64-bit words.
//
// Waiters are spindle waiters (a fiber or an OS thread), parked with
// detail::park. A wait may carry a deadline and a std::stop_token; a timer or
// stop callback that fires races with resume(v) for the waiter, and exactly
// one of them wins it (the `claim` word of cqs_wait below).
//
// Cell life cycle (the paper's Figures 2 and 4; S suspend, R resume, C the
// cancellation handler, which the timer or stop callback that cancelled the
// waiter runs before it unparks the waiter, or the waiter itself when the
// request came before its record was in the cell: cqs_claim). The
// transitions live in cqs_cell.hpp, templates over the atomics, which
// tests/models/cqs_cell_model_test.cpp runs under a model checker:
//
//     EMPTY --S: CAS node--> WAITER --R: CAS--> RESUMING --R wins claim--> RESUMED
//       |                      |                   |
//       |                      |                   +--claim lost, simple--> WAITER (R fails)
//       |                      |                   +--claim lost, smart---> VALUE (delegated)
//       |                      +--C: on_cancellation() true---> CANCELLED
//       |                      +--C: on_cancellation() false--> REFUSE --R--> (complete_refused_resume)
//       +--R: CAS value--> VALUE --S (async): TAKEN
//                            |----S (sync): CAS TAKEN
//                            +----R (sync, no rendezvous in bounded time): CAS BROKEN --S--> (suspend fails)
//     VALUE (delegated) --C--> CANCELLED, then C calls resume(value)
//                       --C--> REFUSE,    then C calls complete_refused_resume(value)
//
// RESUMING is a short-lived lock on the cell held by the one resumer that
// found a waiter: while it is there, the cancellation handler spins, so the
// waiter cannot return and free its record (which lives on its stack).
//
// Modes (constructor arguments, fixed for the queue's life):
//   cqs_cancellation::simple  resume(v) on a cancelled waiter fails (returns
//                             false); the primitive decides what to do.
//   cqs_cancellation::smart   a cancelled waiter first asks the primitive
//                             (on_cancellation()); resume skips CANCELLED cells
//                             and never fails in async mode; a REFUSE cell makes
//                             it call complete_refused_resume(v).
//   cqs_resumption::async     resume(v) may leave v in an empty cell.
//   cqs_resumption::sync      resume(v) must rendezvous with its suspend within
//                             a bounded spin, else marks the cell BROKEN and
//                             fails; the suspend that comes later fails too
//                             (status broken) and the primitive retries. No
//                             value waits in the queue for a suspend to come,
//                             so try_* operations on the primitive's state
//                             are exact -- except for a moment in smart mode:
//                             a value delegated to a waiter being cancelled
//                             sits in its cell until the handler, already
//                             running, takes it (microseconds: the canceller
//                             runs the handler itself). A delegated value
//                             whose sync resume fails goes back through
//                             return_value(v).
//
// Segment removal (O(1)). Each segment counts its dead cells (cells no
// operation will touch logically again) and the head pointers that point at
// it, in one word:
//
//     dead_and_pointers:  bit 31 REMOVED | bits 8..30 head pointers | bits 0..7 dead cells
//
// A segment with every cell dead, no head pointer and a successor (never the
// tail) is unlinked from its neighbours: cancelled-out segments and fully used
// ones alike. Unlinking takes `lock_` (a spinlock held for a few stores, once
// per segment) — readers never take it; the paper's lock-free unlink is a
// possible refinement. A resumer whose segment is gone lands on a later one:
// its cells were all cancelled, so it fails (simple) or skips them (smart).
//
// Memory reclamation: epoch-based, per queue, no thread registration (fibers
// migrate between threads, so state is per queue, not per thread):
//
//     epoch_        only advanced under lock_
//     active_[2]    operations inside the queue, by epoch parity
//     limbo_[2]     unlinked segments, by the parity of the epoch they left in
//
// Every operation brackets its non-blocking part (segment walk, cell
// transitions) with enter()/exit(); no fiber switch, park or user hook runs in
// between. A waiter parked in a cell holds no epoch: its segment cannot be
// unlinked while its cell is alive. Unlinking retires the segment into
// limbo_[epoch & 1] and advances the epoch if no operation of the previous
// epoch is still inside; an advance frees the list retired two epochs ago.
//
// Memory, worst case: the segments holding at least one live cell (parked
// waiter, REFUSE awaiting its resume, value awaiting its suspend), plus the
// ones the two heads and the tail point at, plus limbo. Limbo is what was
// unlinked since the oldest operation still inside the queue began: with
// operations taking bounded steps it is a few segments; a thread preempted
// inside an operation holds back the removals made meanwhile (the usual EBR
// caveat). Quiescent limbo is freed by the next removal, by reclaim(), or by
// the destructor. A segment is sizeof(cqs_segment) (~300 bytes, 16 cells).
//
// Costs and gaps (a first version): every operation pays two RMWs on the
// shared epoch counters besides its FAA; the whole algorithm is out of line
// in src/sync/cqs.cpp (no inline fast path yet); unlinking serializes on
// lock_ (see above). Not for a primitive whose waiters need no
// FIFO and no cancellation: a plain futex word is cheaper.
//
// Allocation: segments are allocated by the operations (the first one by
// the queue's first suspend or resume, so that building a queue allocates
// nothing and can be constexpr), which are noexcept: running out of memory
// there ends the program (std::terminate), not in a std::bad_alloc.
//
// Undefined: destroying the queue while an operation runs or a waiter is
// parked; a resume(v) without a suspend that will eventually come; smart mode
// without on_cancellation and complete_refused_resume hooks; smart+sync mode
// without return_value.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stop_token>
#include <type_traits>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/detail/park.hpp>
#include <spindle/runtime/handoff.hpp>
#include <spindle/sync/detail/cqs_cell.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle::detail {

enum class cqs_cancellation : std::uint8_t { simple, smart };
enum class cqs_resumption : std::uint8_t { async, sync };

inline constexpr unsigned cqs_segment_cells = 16;

struct cqs_cell_slot {
    // The cell state above. Transitions are CASes or exchanges; the one that
    // publishes a waiter or a value is release, the one that reads it acquire.
    std::atomic<std::uintptr_t> state{cqs_cell::empty};
    // The value while state is `value`; written before the release that
    // publishes the state, read after the acquire that sees it.
    std::atomic<std::uint64_t> value{0};
};

struct cqs_segment {
    cqs_segment(std::uint64_t segment_id, cqs_segment* before, std::uint32_t heads) noexcept
        : id(segment_id), prev(before), dead_and_pointers(heads * pointer_unit) {}

    static constexpr std::uint32_t pointer_unit = 1u << 8;     // one head pointer
    static constexpr std::uint32_t dead_mask = pointer_unit - 1;  // dead cell count
    static constexpr std::uint32_t removed_bit = 1u << 31;     // unlinked; no head may point here
    static_assert(cqs_segment_cells <= dead_mask, "dead cell count must fit below the pointer bits");

    const std::uint64_t id;  // cells id*N .. id*N+N-1
    // Successor; null only at the tail. Set once by a CAS (acq_rel: publishes
    // the new segment), then changed only by unlinking under lock_.
    std::atomic<cqs_segment*> next{nullptr};
    // Predecessor; null at the oldest segment. Set before publication,
    // then changed only under lock_ (relaxed: lock_ orders the accesses).
    std::atomic<cqs_segment*> prev;
    std::atomic<std::uint32_t> dead_and_pointers;  // see the header essay
    cqs_segment* limbo_next = nullptr;             // link in limbo_, under lock_
    cqs_cell_slot cells[cqs_segment_cells];
};
static_assert(sizeof(cqs_cell_slot) == 16, "a cell is a state word and a value word");
static_assert(sizeof(cqs_segment) <= 40 + sizeof(cqs_cell_slot) * cqs_segment_cells, "segment header grew");

// A waiter's record, on its stack for one suspend(). `claim` decides
// between a resume and a timeout or stop request (cqs_claim in cqs_cell.hpp).
class cqs_base;
struct alignas(16) cqs_wait {
    wait_node node;                          // waiter, and the hook wait_guard's timer/stop call
    std::atomic<std::uint32_t> claim{cqs_claim::waiting};
    std::uint64_t value = 0;                 // written by the winning resumer before its unpark
    // The primitive's word for this wait (suspend's `tag`), handed to its
    // on_cancellation hook: what the waiter registered as, say, so the hook
    // can decide CANCELLED or REFUSE for this waiter. Written before the
    // record is published (the cell CAS), constant afterwards.
    std::uint64_t tag = 0;
    // Where the record waits, for a canceller that runs the handler: set
    // before announce_placed's release CAS, read after the canceller's
    // acquire of `placed`.
    cqs_base* q = nullptr;
    cqs_segment* seg = nullptr;
    cqs_cell_slot* cell = nullptr;
};
static_assert(alignof(cqs_wait) > cqs_cell::last_state, "a waiter's address must not look like a cell state");

enum class cqs_status : std::uint8_t {
    resumed,    // got a value from resume(v)
    cancelled,  // the deadline passed or stop was requested first; the cell is cancelled
    broken,     // sync mode: the matching resume gave up; retry the primitive's operation
};

// Hooks with the value as its 64-bit word (cqs<T> adapts typed hooks).
struct cqs_raw_hooks {
    bool (*on_cancellation)(void* self, std::uint64_t tag) noexcept = nullptr;
    void (*complete_refused_resume)(void* self, std::uint64_t v) noexcept = nullptr;
    void (*return_value)(void* self, std::uint64_t v) noexcept = nullptr;
    void* self = nullptr;
};

// The algorithm over 64-bit words (src/sync/cqs.cpp).
class cqs_base {
public:
    struct raw_result {
        cqs_status status;
        std::uint64_t value;
    };

    // constexpr: a queue allocates nothing until its first suspend or resume
    // (first_segment), so the primitives on it can be constinit globals.
    constexpr cqs_base(cqs_cancellation c, cqs_resumption r, cqs_raw_hooks h) noexcept
        : cancellation_(c), resumption_(r), hooks_(h) {}
    ~cqs_base();
    cqs_base(const cqs_base&) = delete;
    cqs_base& operator=(const cqs_base&) = delete;

    raw_result suspend_raw(std::chrono::steady_clock::time_point deadline, std::stop_token* st,
                           std::uint64_t tag) noexcept;
    // policy: how a woken fiber runs.
    bool resume_raw(std::uint64_t v, handoff policy) noexcept;

    // Frees unlinked segments whose grace period is over (while an
    // operation is inside the queue it can advance the epoch at most once
    // and may free nothing). Cheap; call it when quiet.
    void reclaim() noexcept;

    // Test and debug: segments allocated and not yet freed (linked ones plus
    // limbo).
    [[nodiscard]] std::size_t live_segments() const noexcept {
        return live_segments_.load(std::memory_order_relaxed);  // a statistic
    }

private:
    struct cell_env;  // cqs_cell.hpp's Env over one segment
    friend struct cell_env;

    std::uint64_t enter() noexcept;
    void exit(std::uint64_t epoch) noexcept;
    SPINDLE_COLD cqs_segment* first_segment(std::atomic<cqs_segment*>& head) noexcept;
    cqs_segment* find_segment(cqs_segment* start, std::uint64_t id) noexcept;
    bool move_forward(std::atomic<cqs_segment*>& head, cqs_segment* to) noexcept;
    cqs_segment* find_and_move(std::atomic<cqs_segment*>& head, cqs_segment* start, std::uint64_t id) noexcept;
    static bool try_inc_pointers(cqs_segment* s) noexcept;
    void dec_pointers(cqs_segment* s) noexcept;
    void cell_dead(cqs_segment* s) noexcept;
    void remove_if_dead(cqs_segment* s, std::uint32_t v) noexcept;
    SPINDLE_COLD void try_remove(cqs_segment* s) noexcept;
    cqs_segment* advance_locked() noexcept SPINDLE_REQUIRES(lock_);
    void free_list(cqs_segment* list) noexcept;
    void cancel_cell(cqs_segment* s, cqs_cell_slot& c, cqs_wait* w) noexcept;
    static void cancel_request(wait_node* n) noexcept;

    const cqs_cancellation cancellation_;
    const cqs_resumption resumption_;
    const cqs_raw_hooks hooks_;

    // FAA counters, each on its own line: suspenders and resumers contend on
    // different words. relaxed: an index carries no data; the cell CASes
    // order everything that matters.
    // The heads are null until the first operation allocates segment 0 for
    // both (first_segment, under lock_); they never become null again.
    alignas(arch::cache_line) std::atomic<std::uint64_t> suspend_idx_{0};
    std::atomic<cqs_segment*> suspend_seg_{nullptr};  // holds a pointer count on its target
    alignas(arch::cache_line) std::atomic<std::uint64_t> resume_idx_{0};
    std::atomic<cqs_segment*> resume_seg_{nullptr};   // holds a pointer count on its target

    // Reclamation (see the essay). seq_cst on enter's increment and epoch
    // re-check and on the reclaimer's check and advance: their single order
    // makes a reader either be counted or see the new epoch.
    alignas(arch::cache_line) std::atomic<std::uint64_t> epoch_{0};
    std::atomic<std::uint64_t> active_[2] = {};
    spinlock lock_;
    cqs_segment* first_ SPINDLE_GUARDED_BY(lock_) = nullptr;     // oldest linked segment
    cqs_segment* limbo_[2] SPINDLE_GUARDED_BY(lock_) = {nullptr, nullptr};
    std::atomic<std::size_t> live_segments_{0};
};

// Hooks a primitive supplies (smart mode), called outside the queue's
// internal sections, on the thread or fiber that runs the operation -- or,
// for a cancellation, in the timer or stop callback that cancels the waiter
// (the timer thread, or whoever calls request_stop()). So a hook must not
// block and must not assume it runs in the waiter:
//   on_cancellation(owner, tag)        a waiter was cancelled: undo its effect
//                                      on the primitive's state; true: the cell
//                                      becomes CANCELLED (resume skips it),
//                                      false: REFUSE (the coming resume is refused).
//                                      `tag`: the word that waiter gave suspend()
//                                      (0 unless the primitive passes one).
//   complete_refused_resume(owner, v)  a refused resume's value: give it back.
//   return_value(owner, v)             smart+sync: a delegated value could not be
//                                      handed over; put it back (e.g. release()).
template <class T>
struct cqs_hooks {
    bool (*on_cancellation)(void* owner, std::uint64_t tag) noexcept = nullptr;
    void (*complete_refused_resume)(void* owner, T v) noexcept = nullptr;
    void (*return_value)(void* owner, T v) noexcept = nullptr;
    void* owner = nullptr;
};

// A value of at most 8 trivially copyable bytes as the 64-bit word the queue
// (and the primitives' storage) carries, and back.
template <class T>
std::uint64_t word_encode(T v) noexcept {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));
    std::uint64_t w = 0;
    std::memcpy(&w, &v, sizeof(T));
    return w;
}
template <class T>
T word_decode(std::uint64_t w) noexcept {
    T v{};
    std::memcpy(&v, &w, sizeof(T));
    return v;
}

template <class T>
struct cqs_result {
    cqs_status status;
    T value;  // meaningful when status == resumed
};

// The typed queue. Contract of the operations:
//
//   operation        | cell found                    | result
//   -----------------+-------------------------------+-----------------------------------------
//   suspend()        | empty                         | parks; resumed(v) | cancelled
//                    | value (resume came first)     | resumed(v) at once
//                    | broken (sync)                 | broken at once
//   resume(v)        | empty, async                  | true (v left for the suspender)
//                    | empty, sync                   | true if taken in bounded time, else false
//                    | waiter                        | true (wakes it) — or, if cancelled meanwhile:
//                    |                               |   simple false; smart true (delegated)
//                    | cancelled                     | simple false; smart: next cell
//                    | refused (smart)               | true, after complete_refused_resume(v)
template <class T>
class cqs {
    static_assert(std::is_trivially_copyable_v<T> && std::is_default_constructible_v<T>,
                  "cqs carries values as raw 64-bit words");
    static_assert(sizeof(T) <= sizeof(std::uint64_t), "cqs values are at most 8 bytes for now");

public:
    constexpr explicit cqs(cqs_cancellation c = cqs_cancellation::simple, cqs_resumption r = cqs_resumption::async,
                           cqs_hooks<T> hooks = {}) noexcept
        : hooks_(hooks),
          base_(c, r, cqs_raw_hooks{&on_cancellation_raw, &refused_raw, &return_raw, this}) {}

    // Waits for a resume. deadline: steady_clock, no_deadline for none; st:
    // an optional stop token; tag: passed to on_cancellation if this wait is
    // cancelled (smart mode). A fiber suspends; a thread sleeps on a futex.
    cqs_result<T> suspend(std::chrono::steady_clock::time_point deadline = no_deadline,
                          std::stop_token* st = nullptr, std::uint64_t tag = 0) noexcept {
        auto r = base_.suspend_raw(deadline, st, tag);
        return {r.status, decode(r.value)};
    }

    // Completes the oldest suspend (see the table). A parked fiber waiter
    // is woken with `policy` (runtime/handoff.hpp): with ces or inline_resume
    // the caller, if it is a fiber, switches straight to the waiter. Call it
    // with no lock held that the waiter might need.
    bool resume(T v, handoff policy = handoff::dispatch) noexcept {
        return base_.resume_raw(encode(v), policy);
    }

    void reclaim() noexcept { base_.reclaim(); }
    [[nodiscard]] std::size_t live_segments() const noexcept { return base_.live_segments(); }

private:
    static std::uint64_t encode(T v) noexcept { return word_encode(v); }
    static T decode(std::uint64_t w) noexcept { return word_decode<T>(w); }
    static bool on_cancellation_raw(void* self, std::uint64_t tag) noexcept {
        auto* q = static_cast<cqs*>(self);
        return q->hooks_.on_cancellation(q->hooks_.owner, tag);
    }
    static void refused_raw(void* self, std::uint64_t v) noexcept {
        auto* q = static_cast<cqs*>(self);
        q->hooks_.complete_refused_resume(q->hooks_.owner, decode(v));
    }
    static void return_raw(void* self, std::uint64_t v) noexcept {
        auto* q = static_cast<cqs*>(self);
        q->hooks_.return_value(q->hooks_.owner, decode(v));
    }

    cqs_hooks<T> hooks_;
    cqs_base base_;
};

}  // namespace spindle::detail
