// CancellableQueueSynchronizer (include/spindle/sync/detail/cqs.hpp).
#include <spindle/sync/detail/cqs.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/locks/detail/futex.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle::detail {

namespace {

constexpr std::uint32_t removable_word = cqs_segment_cells;  // all cells dead, no pointer, not removed

// How long a sync resume waits for its suspender before it breaks the cell.
constexpr unsigned sync_resume_spins = 256;

}  // namespace

// cqs_cell.hpp's environment: one segment of this queue.
struct cqs_base::cell_env {
    cqs_base* q;
    cqs_segment* s;
    void dead() noexcept { q->cell_dead(s); }
    static void backoff(unsigned& spins) noexcept { spindle::detail::backoff(spins); }
    static void relax() noexcept { arch::cpu_relax(); }
    static constexpr unsigned sync_spins() noexcept { return sync_resume_spins; }
    [[noreturn]] void bad_state(std::uintptr_t st) noexcept {
        fatal("cqs %p: cell in impossible state %lu", static_cast<void*>(q), static_cast<unsigned long>(st));
    }
};

// The first operation on the queue: segment 0, with both heads on it (two
// pointer counts). Under lock_, so that racing first operations build one;
// release on the heads publishes it to the acquire loads that find them set
// without taking the lock. Returns `head`'s target.
cqs_segment* cqs_base::first_segment(std::atomic<cqs_segment*>& head) noexcept {
    lock_.lock();
    if (first_ == nullptr) {
        auto* s = new cqs_segment(0, nullptr, 2);
        first_ = s;
        live_segments_.store(1, std::memory_order_relaxed);  // a statistic
        suspend_seg_.store(s, std::memory_order_release);
        resume_seg_.store(s, std::memory_order_release);
    }
    lock_.unlock();
    return head.load(std::memory_order_acquire);  // set above or by an earlier first operation
}

cqs_base::~cqs_base() {
    // The owner may destroy the queue as soon as its suspend returned, while
    // the resume that completed it is still leaving: a sync resume that left
    // its value in an empty cell sees TAKEN and only then exits its epoch, so
    // the suspender can return (and its primitive be destroyed) before that
    // exit. exit() is an operation's last access to the queue when it
    // completed a suspend without an unpark: wait for it. acquire pairs with
    // exit()'s release decrement.
    for (unsigned spins = 0;
         active_[0].load(std::memory_order_acquire) + active_[1].load(std::memory_order_acquire) != 0;)
        backoff(spins);
    // Quiescent by contract: linked segments from first_, plus limbo. An
    // unlinked segment is never reachable from first_, so nothing is freed twice.
    lock_.lock();
    cqs_segment* linked = first_;
    cqs_segment* l0 = limbo_[0];
    cqs_segment* l1 = limbo_[1];
    first_ = limbo_[0] = limbo_[1] = nullptr;
    lock_.unlock();
    for (cqs_segment* s = linked; s != nullptr;) {
        cqs_segment* n = s->next.load(std::memory_order_relaxed);  // quiescent
        delete s;
        s = n;
    }
    free_list(l0);
    free_list(l1);
}

// ---- reclamation ------------------------------------------------------------

std::uint64_t cqs_base::enter() noexcept {
    for (;;) {
        // seq_cst (all three): with the reclaimer's seq_cst check of active_
        // and store of epoch_, either the reclaimer sees our count, or we see
        // its new epoch and retry.
        std::uint64_t e = epoch_.load(std::memory_order_seq_cst);
        active_[e & 1].fetch_add(1, std::memory_order_seq_cst);
        if (epoch_.load(std::memory_order_seq_cst) == e) return e;
        active_[e & 1].fetch_sub(1, std::memory_order_release);
    }
}

void cqs_base::exit(std::uint64_t epoch) noexcept {
    // release: our reads of segments happen-before the reclaimer's seq_cst
    // (hence acquire) load that finds the count zero and frees them.
    active_[epoch & 1].fetch_sub(1, std::memory_order_release);
}

// Advances the epoch if no operation of the previous one is inside; returns
// the list retired two epochs ago (to free after unlocking), or null.
cqs_segment* cqs_base::advance_locked() noexcept {
    std::uint64_t e = epoch_.load(std::memory_order_relaxed);  // written only under lock_
    const unsigned old = static_cast<unsigned>((e + 1) & 1);   // parity of epoch e-1
    if (active_[old].load(std::memory_order_seq_cst) != 0) return nullptr;
    cqs_segment* list = limbo_[old];  // retired during e-1: no operation can still see them
    limbo_[old] = nullptr;
    epoch_.store(e + 1, std::memory_order_seq_cst);
    return list;
}

void cqs_base::free_list(cqs_segment* list) noexcept {
    std::size_t n = 0;
    while (list != nullptr) {
        cqs_segment* next = list->limbo_next;
        delete list;
        list = next;
        ++n;
    }
    if (n != 0) live_segments_.fetch_sub(n, std::memory_order_relaxed);  // a statistic
}

void cqs_base::reclaim() noexcept {
    lock_.lock();
    cqs_segment* a = advance_locked();
    cqs_segment* b = advance_locked();
    lock_.unlock();
    free_list(a);
    free_list(b);
}

// ---- segment list -----------------------------------------------------------

bool cqs_base::try_inc_pointers(cqs_segment* s) noexcept {
    std::uint32_t v = s->dead_and_pointers.load(std::memory_order_relaxed);
    do {
        if (v & cqs_segment::removed_bit) return false;  // unlinked: no head may point here
        // One word holds the REMOVED bit and this count: the CAS decides
        // which of try_remove and us came first (acq_rel, as dec_pointers).
    } while (!s->dead_and_pointers.compare_exchange_weak(v, v + cqs_segment::pointer_unit,
                                                         std::memory_order_acq_rel, std::memory_order_relaxed));
    return true;
}

// `v`: the segment's word right after our seq_cst RMW of it. All cells dead,
// no head on it, and not the tail: unlink it. seq_cst load of next: the
// second half of the Dekker pair described in dec_pointers.
void cqs_base::remove_if_dead(cqs_segment* s, std::uint32_t v) noexcept {
    if (v == removable_word && s->next.load(std::memory_order_seq_cst) != nullptr) try_remove(s);
}

void cqs_base::dec_pointers(cqs_segment* s) noexcept {
    // seq_cst: whoever makes the word removable sees the other parties' cell
    // writes before the segment is unlinked; and (the RMW, then the load of
    // next in remove_if_dead) it is the Dekker pair with an
    // appender's seq_cst CAS of next and load of this word (find_segment).
    // With weaker orders both could read the old value, and an all-dead
    // segment would stay linked for good.
    remove_if_dead(s, s->dead_and_pointers.fetch_sub(cqs_segment::pointer_unit, std::memory_order_seq_cst) -
                          cqs_segment::pointer_unit);
}

void cqs_base::cell_dead(cqs_segment* s) noexcept {
    remove_if_dead(s, s->dead_and_pointers.fetch_add(1, std::memory_order_seq_cst) + 1);  // seq_cst: as dec_pointers
}

// Unlinks `s` if it is still removable. Callers are inside an epoch, so `s`
// (even if someone else unlinked it meanwhile) is not freed under us.
void cqs_base::try_remove(cqs_segment* s) noexcept {
    lock_.lock();
    std::uint32_t v = s->dead_and_pointers.load(std::memory_order_acquire);
    cqs_segment* next = s->next.load(std::memory_order_acquire);
    // (dead, pointers, removed): (N, 0, 0) -> (N, 0, 1). Fails if a head took
    // a pointer meanwhile; then its dec_pointers tries again.
    if (v != removable_word || next == nullptr ||
        !s->dead_and_pointers.compare_exchange_strong(v, v | cqs_segment::removed_bit, std::memory_order_acq_rel,
                                                      std::memory_order_relaxed)) {
        lock_.unlock();
        return;
    }
    // Under lock_, prev and next are linked (unlinking is serialized), and
    // next is not the segment being appended to (s was not the tail).
    cqs_segment* prev = s->prev.load(std::memory_order_relaxed);
    // release: a walker that reads prev->next sees a fully built successor
    // (next's fields were published when it was appended).
    if (prev != nullptr) prev->next.store(next, std::memory_order_release);
    else first_ = next;
    next->prev.store(prev, std::memory_order_relaxed);
    // Retire into the current epoch's limbo; try to free older ones.
    std::uint64_t e = epoch_.load(std::memory_order_relaxed);  // written only under lock_
    s->limbo_next = limbo_[e & 1];
    limbo_[e & 1] = s;
    cqs_segment* to_free = advance_locked();
    lock_.unlock();
    free_list(to_free);
}

// The first linked segment with id >= `id`, appending segments as needed.
cqs_segment* cqs_base::find_segment(cqs_segment* start, std::uint64_t id) noexcept {
    cqs_segment* cur = start;
    // acquire on the REMOVED bit: pairs with try_remove's CAS, so cur->next
    // read after it is the one unlinking left (or later).
    while (cur->id < id || (cur->dead_and_pointers.load(std::memory_order_acquire) & cqs_segment::removed_bit)) {
        // acquire pairs with the append CAS / unlink store: the successor is built.
        cqs_segment* next = cur->next.load(std::memory_order_acquire);
        if (next != nullptr) {
            cur = next;
            continue;
        }
        // cur is the tail, hence never removed: append.
        auto* fresh = new cqs_segment(cur->id + 1, cur, 0);
        cqs_segment* expected = nullptr;
        // seq_cst: release publishes `fresh`, acquire (on failure too) sees
        // the winner's, and with the load below it is the Dekker pair with
        // cell_dead/dec_pointers (RMW of the word, then load of next).
        if (cur->next.compare_exchange_strong(expected, fresh, std::memory_order_seq_cst,
                                              std::memory_order_acquire)) {
            live_segments_.fetch_add(1, std::memory_order_relaxed);  // a statistic
            // cur just stopped being the tail: it may be removable now.
            if (cur->dead_and_pointers.load(std::memory_order_seq_cst) == removable_word) try_remove(cur);
            cur = fresh;
        } else {
            delete fresh;
            cur = expected;
        }
    }
    return cur;
}

// Moves `head` forward to `to` (never back). false: `to` was unlinked first.
bool cqs_base::move_forward(std::atomic<cqs_segment*>& head, cqs_segment* to) noexcept {
    for (;;) {
        cqs_segment* cur = head.load(std::memory_order_acquire);  // pairs with the CAS below
        if (cur->id >= to->id) return true;
        if (!try_inc_pointers(to)) return false;
        if (head.compare_exchange_strong(cur, to, std::memory_order_acq_rel, std::memory_order_acquire)) {
            dec_pointers(cur);
            return true;
        }
        dec_pointers(to);
    }
}

cqs_segment* cqs_base::find_and_move(std::atomic<cqs_segment*>& head, cqs_segment* start,
                                     std::uint64_t id) noexcept {
    for (;;) {
        cqs_segment* s = find_segment(start, id);
        if (move_forward(head, s)) return s;
    }
}

// ---- suspend ------------------------------------------------------------------

// wait_node::cancel for a timer or stop request: claim the waiter. If its
// record is in its cell, run the cancellation handler here and now, then
// unpark it; if not yet, unpark it and it runs the handler itself.
void cqs_base::cancel_request(wait_node* n) noexcept {
    auto* w = static_cast<cqs_wait*>(n->owner);
    switch (cqs_ops::claim_for_cancel(w)) {
    case cqs_ops::cancel_claim::lost:
        return;
    case cqs_ops::cancel_claim::early:
        break;
    case cqs_ops::cancel_claim::late:
        // The waiter is parked (or about to park) and cannot return before
        // our unpark, so the queue and its record are alive; so is the cell
        // (not dead until the handler marks it), hence its segment.
        w->q->cancel_cell(w->seg, *w->cell, w);
        break;
    }
    unpark(&n->w);  // last touch of the record: the waiter may return now
}

cqs_base::raw_result cqs_base::suspend_raw(std::chrono::steady_clock::time_point deadline, std::stop_token* st,
                                           std::uint64_t tag) noexcept {
    cqs_wait w;
    w.tag = tag;
    w.node.w.fiber = running_fiber();
    w.node.cancel = &cqs_base::cancel_request;
    w.node.owner = &w;
    // Armed before the cell is taken: a timeout or stop that fires early
    // claims the waiter, and the park below returns at once. If the cell
    // step then finds a value (took) or BROKEN, that early claim's unpark
    // has no park to match: harmless (w.node.w serves this one wait only,
    // and a fiber's notified state or a thread's futex wake is simply
    // dropped), and an exception to "one unpark per park" -- as is an early
    // claim that announce_placed reports (we run the handler unparked).
    wait_guard guard(w.node, deadline, st);

    std::uint64_t e = enter();
    // Read the head before the FAA: it cannot be past our segment yet.
    cqs_segment* start = suspend_seg_.load(std::memory_order_acquire);
    if (start == nullptr) [[unlikely]]
        start = first_segment(suspend_seg_);
    std::uint64_t i = suspend_idx_.fetch_add(1, std::memory_order_relaxed);  // see suspend_idx_
    // Our cell is alive (we have not touched it), so our segment is linked.
    cqs_segment* s = find_and_move(suspend_seg_, start, i / cqs_segment_cells);
#if SPINDLE_DEBUG_CHECKS
    if (s->id != i / cqs_segment_cells) fatal("cqs %p: suspend's segment was removed", static_cast<void*>(this));
#endif
    cqs_cell_slot& c = s->cells[i % cqs_segment_cells];

    cell_env env{this, s};
    std::uint64_t v = 0;
    switch (cqs_ops::suspend_cell(c, &w, resumption_ == cqs_resumption::sync, env, v)) {
    case cqs_ops::suspend_outcome::placed: {
        exit(e);
        w.q = this;
        w.seg = s;
        w.cell = &c;
        if (cqs_ops::announce_placed(&w) == cqs_claim::cancelled_early) {
            // A request came before we announced: its handler is ours to run,
            // now (parking for its unpark would send us through a ready
            // queue first). Its unpark then has no park to match, as after
            // an early claim above; ~wait_guard waits for it to finish.
            cancel_cell(s, c, &w);
            return {cqs_status::cancelled, 0};
        }
        guard.wait();
        // acquire pairs with the winner's claim CAS; w.value is ordered by
        // the unpark that woke us.
        const std::uint32_t claim = w.claim.load(std::memory_order_acquire);
        if (claim == cqs_claim::resumed) return {cqs_status::resumed, w.value};
        // cancelled: our canceller ran the handler before it unparked us.
        return {cqs_status::cancelled, 0};
    }
    case cqs_ops::suspend_outcome::took:
        exit(e);
        return {cqs_status::resumed, v};
    case cqs_ops::suspend_outcome::broken:
        break;
    }
    exit(e);
    return {cqs_status::broken, 0};
}

// The cancellation handler (paper Listing 6, right), run by the canceller
// before it unparks the waiter, or by the waiter (cancelled_early). The
// cell holds the waiter's record, or VALUE if a resumer delegated its value
// to it, or RESUMING for a moment.
void cqs_base::cancel_cell(cqs_segment* s, cqs_cell_slot& c, cqs_wait* w) noexcept {
    bool mark = true;  // simple mode: always CANCELLED
    if (cancellation_ == cqs_cancellation::smart) mark = hooks_.on_cancellation(hooks_.self, w->tag);
    std::uint64_t e = enter();
    cell_env env{this, s};
    std::uint64_t v = 0;
    const bool delegated = cqs_ops::cancel_cell(c, w, mark, env, v);
    exit(e);  // s may be freed from here on
    if (!delegated) return;
    if (mark) {
        // The delegated resume goes on to the next waiter (Listing 6, line 52).
        // Dispatch: a cancelled waiter passing a value on does not give up its worker.
        if (!resume_raw(v, handoff::dispatch))
            hooks_.return_value(hooks_.self, v);  // only sync mode fails here
    } else {
        hooks_.complete_refused_resume(hooks_.self, v);
    }
}

// ---- resume -------------------------------------------------------------------

bool cqs_base::resume_raw(std::uint64_t v, handoff policy) noexcept {
    for (;;) {
        std::uint64_t e = enter();
        // Read the head before the FAA: it cannot be past our segment yet.
        cqs_segment* start = resume_seg_.load(std::memory_order_acquire);
        if (start == nullptr) [[unlikely]]
            start = first_segment(resume_seg_);
        std::uint64_t i = resume_idx_.fetch_add(1, std::memory_order_relaxed);  // see resume_idx_
        const std::uint64_t id = i / cqs_segment_cells;
        cqs_segment* s = find_and_move(resume_seg_, start, id);
        if (s->id != id) {
            // Our segment was removed: all its cells were cancelled. Read s
            // before leaving the epoch: after exit() it may be freed.
            const std::uint64_t skip_to = s->id * cqs_segment_cells;
            exit(e);
            if (cancellation_ == cqs_cancellation::simple) return false;
            // Smart: skip the removed cells at once (if nobody moved on meanwhile).
            std::uint64_t expected = i + 1;
            resume_idx_.compare_exchange_strong(expected, skip_to, std::memory_order_relaxed);
            continue;
        }
        cqs_wait* wake = nullptr;
        cell_env env{this, s};
        auto r = cqs_ops::resume_cell(s->cells[i % cqs_segment_cells], v, resumption_ == cqs_resumption::sync,
                                      cancellation_ == cqs_cancellation::smart, env, wake);
        exit(e);
        switch (r) {
        case cqs_ops::resume_outcome::done:
            // The waiter cannot leave before this unpark, so `wake` is alive.
            // (resume_cell held the cell RESUMING only across a CAS and two
            // stores: it must never switch fibers there, or a cancelled
            // waiter's handler spinning on the same worker would hang.)
            if (wake != nullptr) unpark_with(&wake->node.w, policy);
            return true;
        case cqs_ops::resume_outcome::failed:
            return false;
        case cqs_ops::resume_outcome::skip:
            continue;  // smart: a cancelled cell; take the next one
        case cqs_ops::resume_outcome::refused:
            hooks_.complete_refused_resume(hooks_.self, v);
            return true;
        }
    }
}

}  // namespace spindle::detail
