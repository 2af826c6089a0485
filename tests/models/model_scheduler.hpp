// A deterministic scheduler for model tests: the real code of a protocol
// runs on a few model threads, with atomics that hand control to the
// scheduler at every access, and the interleavings are explored by
// depth-first search over the scheduler's choices (replaying the prefix
// each run), bounded by the number of preemptions (CHESS-style context
// bounding). Only one model thread runs at a time, so the model is
// sequentially consistent: it checks protocols, not memory orders (the
// sanitizer builds of the stress tests do that).
//
// Used by cqs_cell_model_test.cpp (the CQS cell life cycle) and
// hemlock_model_test.cpp (the Hemlock Grant handshake).
//
//   explorer       the depth-first enumeration of choice sequences
//   model_sched    runs the bodies of one run; step() is a scheduling point;
//                  park/unpark and wait_done block on model events;
//                  spin_wait() blocks a spinning thread until some model
//                  atomic changes value; futex_wait/futex_wake model a
//                  futex (a word's compare and the sleep are one step).
//   model_atomic   the std::atomic subset the protocols use; every access
//                  is a scheduling point.
//
// Model threads are execution contexts on the calling OS thread, switched
// with spindle's own annotated context switch (arch/context.hpp, which tells
// ASan and TSan about every switch; a TSan fiber switch orders what one
// model thread did before it with what the next does after). A scheduling
// point is one switch of a few nanoseconds, so a run costs microseconds and
// the explored counts do not depend on the machine's load. A run that ends
// in a deadlock abandons its blocked model threads where they are (their
// stacks are reused, never unwound).
//
// State caching (optional: cache_states()). The code under test is
// deterministic, so a model thread's local state is fixed by the values its
// model atomic operations returned; the state of a run at a scheduling point
// is then the test's shared data (a hash the test supplies: its atomics'
// values, its logs), each thread's history (the results, and the scheduling
// points it passed: its position) and scheduling state,
// the preemptions spent and who is running. A run that reaches a state an
// earlier run already reached (past the prefix it replays) stops there: that
// state's futures are explored from its first visit. This turns the search
// from interleavings into reachable states, which is what makes the
// unbounded search of the Hemlock model feasible. Objects whose addresses
// enter the hashes must sit at the same addresses in every run.
//
// Spinning. A spin loop re-reads shared words until they change; while none
// of the words an iteration accessed has changed value since, the next
// iteration would read the same values and decide the same (the code is
// deterministic). So spin_wait() does not let the thread run again until one
// of them changes: every spin loop of the real code terminates in the model,
// and a lost handover shows up as all threads blocked -- reported as a
// deadlock.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <spindle/arch/config.hpp>
#include <spindle/arch/context.hpp>

#if SPINDLE_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace spindle::test::model {

// Depth-first enumeration of choice sequences.
class explorer {
public:
    int choose(int options) {
        if (depth_ < path_.size()) {
            if (path_[depth_].second != options) diverged_ = true;  // the replay must be deterministic
            return path_[depth_++].first;
        }
        path_.push_back({0, options});
        ++depth_;
        return 0;
    }
    bool next() {  // the next unexplored sequence; false when done
        while (!path_.empty() && path_.back().first + 1 >= path_.back().second) path_.pop_back();
        if (path_.empty()) return false;
        ++path_.back().first;
        depth_ = 0;
        return true;
    }
    void restart() { depth_ = 0; }
    bool diverged() const { return diverged_; }
    bool replaying() const { return depth_ < path_.size(); }
    std::string trace() const {
        std::string s;
        for (auto& [c, n] : path_) s += std::to_string(c) + "/" + std::to_string(n) + " ";
        return s;
    }

private:
    std::vector<std::pair<int, int>> path_;  // (choice, number of options)
    std::size_t depth_ = 0;
    bool diverged_ = false;
};

class model_sched;
// The scheduler of the run in progress, and the index of the running model
// thread (-1 outside the bodies).
inline model_sched* cur_sched = nullptr;
inline int cur_tid = -1;

class model_sched {
public:
    model_sched(explorer& ex, int max_preemptions) : ex_(ex), max_preemptions_(max_preemptions) {}
    model_sched(const model_sched&) = delete;
    model_sched& operator=(const model_sched&) = delete;

    // Turns state caching on for this run (see the header): `visited` holds
    // the states of every earlier run of this exploration; `shared_state`
    // hashes the test's shared data.
    void cache_states(std::unordered_set<std::uint64_t>* visited, std::function<std::uint64_t()> shared_state) {
        visited_ = visited;
        shared_state_ = std::move(shared_state);
    }
    // This run stopped at a state explored before (run() returned true).
    bool pruned() const { return pruned_; }
    // This run passed max_steps scheduling points without finishing
    // (run() returned false): a livelock -- somebody waits without
    // blocking, in a loop no spin_wait() or futex breaks.
    bool livelock() const { return livelock_; }
    static constexpr long max_steps = 100000;

    // A model atomic operation's result, for the running thread's history.
    void record(std::uint64_t x) {
        if (visited_ != nullptr) self().history = mix(self().history ^ mix(x));
    }
    static std::uint64_t mix(std::uint64_t z) {  // splitmix64's finalizer
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    // Runs the bodies to completion; false on a deadlock (all blocked).
    bool run(std::vector<std::function<void()>> bodies) {
        const std::size_t n = bodies.size();
        threads_.clear();
        threads_.resize(n);
        futex_sleepers_.clear();
        waiting_for_.clear();
        for (std::size_t t = 0; t < n; ++t) {
            model_thread& m = threads_[t];
            m.body = std::move(bodies[t]);
            m.sched = this;
            m.index = static_cast<int>(t);
            m.home = &slot_for(t);
            m.home->owner = &m;
            // A context (and TSan fiber) per run: TSan's memory grows without
            // bound when one fiber runs millions of runs.
            m.home->ctx = arch::context{};
            arch::annotate_new_context(&m.home->ctx, m.home->stack.get(), stack_bytes);
            arch::make_context(&m.home->ctx.regs, m.home->stack.get() + stack_bytes, &entry);
        }
        pruned_ = false;
        steps_ = 0;
        cur_sched = this;
        const int first = pick(-1);
        if (first >= 0) {
            cur_tid = first;
            arch::switch_to(&main_, &threads_[idx(first)].home->ctx);
        }
        cur_tid = -1;
        cur_sched = nullptr;
        for (auto& m : threads_) arch::annotate_destroy_context(&m.home->ctx);
        return !deadlock_;
    }

    // A scheduling point before the caller's next shared access.
    void step(bool yielding = false) { reschedule(yielding); }

    // A scheduling point before an access to the model atomic at `addr`,
    // which joins the words the caller's current spin-loop iteration has
    // read (see spin_wait).
    void access_point(const void* addr) {
        reschedule(false);
        std::vector<const void*>& w = self().watched;
        for (const void* a : w)
            if (a == addr) return;
        w.push_back(addr);
    }

    // ---- spinning (see the header) ----

    // A write changed the value of the model atomic at `addr`: threads that
    // read it in their current spin-loop iteration may see something new.
    void note_change(const void* addr) {
        for (auto& m : threads_) {
            if (m.watch_changed) continue;
            for (const void* a : m.watched)
                if (a == addr) {
                    m.watch_changed = true;
                    if (m.state == st::spinning) m.state = st::runnable;
                    break;
                }
        }
    }
    // One failed iteration of a spin loop: wait until a word it read has
    // changed value (at once, as a plain scheduling point, if one did
    // already). The next iteration starts here.
    void spin_wait() {
        model_thread& m = self();
        if (!m.watch_changed) m.state = st::spinning;
        reschedule(false);
        m.watched.clear();
        m.watch_changed = false;
    }

    // ---- futex ----

    // Sleeps the caller on `addr` if `unchanged()` -- evaluated together with
    // going to sleep, as the kernel compares the word under its bucket lock
    // -- until futex_wake(addr). The compare is an access: a scheduling
    // point comes first.
    template <class Unchanged>
    void futex_wait(const void* addr, Unchanged unchanged) {
        step();
        if (!unchanged()) return;
        futex_sleepers_.push_back({addr, cur_tid});
        self().state = st::blocked;
        reschedule(false);
    }
    // Wakes every sleeper on `addr`; returns how many.
    int futex_wake(const void* addr) {
        step();
        int woken = 0;
        for (auto it = futex_sleepers_.begin(); it != futex_sleepers_.end();) {
            if (it->first == addr) {
                threads_[idx(it->second)].state = st::runnable;
                it = futex_sleepers_.erase(it);
                ++woken;
            } else {
                ++it;
            }
        }
        return woken;
    }

    // ---- model events ----

    // Blocks the caller until *flag (set by unpark).
    void park(const bool* flag) {
        while (!*flag) {
            self().state = st::blocked;
            reschedule(false);
        }
    }
    void unpark(bool* flag, int tid) {
        *flag = true;
        if (threads_[idx(tid)].state == st::blocked) threads_[idx(tid)].state = st::runnable;
    }
    // Blocks the caller until model thread `tid` finished.
    void wait_done(int tid) {
        while (threads_[idx(tid)].state != st::done) {
            self().state = st::blocked;
            waiting_for_[cur_tid] = tid;
            reschedule(false);
        }
        waiting_for_.erase(cur_tid);
    }

private:
    // blocked: parked, sleeping on a futex, or waiting for a thread to
    // finish; spinning: in spin_wait(), until a change.
    enum class st { runnable, blocked, spinning, done };

    struct model_thread;

    // Where model thread t of every run runs: a stack, reused by every run,
    // and this run's context.
    struct slot {
        arch::context ctx;  // first: the entry finds its slot from its raw context
        std::unique_ptr<char[]> stack;
        model_thread* owner = nullptr;  // this run's thread
    };

    struct model_thread {
        slot* home = nullptr;
        std::function<void()> body;
        model_sched* sched = nullptr;
        int index = 0;
        st state = st::runnable;
        std::vector<const void*> watched;  // the model atomics its spin-loop iteration accessed
        bool watch_changed = false;         // one of them changed value since
        std::uint64_t history = 0;  // its operations' results (state caching)
    };

    static constexpr std::size_t stack_bytes = 256 * 1024;

    static std::size_t idx(int t) { return static_cast<std::size_t>(t); }
    model_thread& self() { return threads_[idx(cur_tid)]; }

    // Slots live as long as the process (never destroyed: a run that
    // deadlocked left its threads' frames on them).
    static slot& slot_for(std::size_t t) {
        static std::vector<std::unique_ptr<slot>> slots;
        while (slots.size() <= t) {
            auto sl = std::make_unique<slot>();
            sl->stack = std::make_unique<char[]>(stack_bytes);
            slots.push_back(std::move(sl));
        }
#if SPINDLE_ASAN
        __asan_unpoison_memory_region(slots[t]->stack.get(), stack_bytes);  // an abandoned run's redzones
#endif
        return *slots[t];
    }

    static void entry(arch::raw_context* self, arch::raw_context*) noexcept {
        slot* sl = reinterpret_cast<slot*>(arch::context_of(self));
        model_thread* m = sl->owner;
        arch::context_started(&sl->ctx);
        m->body();
        m->state = st::done;
        model_sched& s = *m->sched;
        const int next = s.seen_before(false) ? -1 : s.pick(m->index);
        cur_tid = next;
        arch::switch_final(&sl->ctx, next >= 0 ? &s.threads_[idx(next)].home->ctx : &s.main_);
    }

    // The running thread reached a scheduling point (its state says whether
    // it can go on): pick who runs next and switch to it. After a deadlock
    // the caller is abandoned: the switch to main never comes back.
    void reschedule(bool yielding) {
        const int self_tid = cur_tid;
        // State caching: the thread's position is part of its state, and two
        // scheduling points may follow each other with no operation between.
        record(0x5ced);
        if (++steps_ > max_steps) livelock_ = deadlock_ = true;
        const int next = deadlock_ || seen_before(yielding) ? -1 : pick(self_tid, yielding);
        if (next == self_tid) return;
        cur_tid = next;
        arch::switch_to(&threads_[idx(self_tid)].home->ctx, next >= 0 ? &threads_[idx(next)].home->ctx : &main_);
        cur_tid = self_tid;
    }

    // State caching: true (and the run is pruned) if this state was reached
    // before; else it is recorded. Not while the run replays its prefix
    // (those states were recorded by the run that first took it).
    // Who runs now and the preemptions spent matter only to a bounded search
    // (and to a yield, which excludes the yielder).
    bool seen_before(bool yielding) {
        if (visited_ == nullptr || ex_.replaying()) return false;
        std::uint64_t h = shared_state_();
        if (max_preemptions_ >= 0 || yielding) {
            h = mix(h ^ mix(static_cast<std::uint64_t>(cur_tid + 1) << 1 | (yielding ? 1 : 0)));
            h = mix(h ^ static_cast<std::uint64_t>(preemptions_));
        }
        for (const model_thread& m : threads_) {
            h = mix(h ^ m.history);  // (it fixes the watched words too)
            h = mix(h ^ (static_cast<std::uint64_t>(m.state) << 1 | (m.watch_changed ? 1 : 0)));
        }
        for (auto& [addr, t] : futex_sleepers_)
            h = mix(h ^ reinterpret_cast<std::uintptr_t>(addr) ^ static_cast<std::uint64_t>(t));
        for (auto& [w, t] : waiting_for_) h = mix(h ^ static_cast<std::uint64_t>(w << 8 | t));
        if (visited_->insert(h).second) return false;
        pruned_ = true;
        return true;
    }

    // The next thread to run, or -1 (all done, or deadlock_ set).
    int pick(int self, bool self_yielding = false) {
        // Threads waiting for a finished thread become runnable.
        for (auto& [w, t] : waiting_for_)
            if (threads_[idx(t)].state == st::done) threads_[idx(w)].state = st::runnable;
        std::vector<int> options;
        // Switching away from a thread that could go on is a preemption;
        // past the bound, it goes on (CHESS-style preemption bounding).
        const bool self_can_go = self >= 0 && threads_[idx(self)].state == st::runnable && !self_yielding;
        if (self_can_go && max_preemptions_ >= 0 && preemptions_ >= max_preemptions_) {
            options.push_back(self);
        } else {
            for (int t = 0; t < static_cast<int>(threads_.size()); ++t)
                if (threads_[idx(t)].state == st::runnable && !(self_yielding && t == self)) options.push_back(t);
        }
        if (options.empty() && self_yielding) options.push_back(self);  // nobody else can run
        if (options.empty()) {
            bool all_done = true;
            for (auto& m : threads_) all_done = all_done && m.state == st::done;
            if (!all_done) deadlock_ = true;
            return -1;
        }
        const int next = options.size() == 1 ? options[0]
                                             : options[idx(ex_.choose(static_cast<int>(options.size())))];
        if (self_can_go && next != self) ++preemptions_;
        return next;
    }

    explorer& ex_;
    arch::context main_{};  // the OS thread that called run()
    std::vector<model_thread> threads_;
    std::map<int, int> waiting_for_;  // blocked thread -> the thread it waits to finish
    std::vector<std::pair<const void*, int>> futex_sleepers_;  // (address, thread), in sleep order
    const int max_preemptions_;  // -1: unbounded (exhaustive)
    int preemptions_ = 0;
    bool deadlock_ = false;
    bool pruned_ = false;
    bool livelock_ = false;
    long steps_ = 0;
    std::unordered_set<std::uint64_t>* visited_ = nullptr;
    std::function<std::uint64_t()> shared_state_;
};

// Accesses through a model_atomic whose `guard` was set after its owner
// said it was gone (a use after return).
inline std::atomic<int> g_use_after_return{0};

// An atomic whose every access is a scheduling point. `guard` (optional)
// points at the owner's "gone" flag: an access after the owner returned is
// a use after return. Memory orders are accepted and ignored (the model is
// sequentially consistent); compare_exchange_weak never fails spuriously.
template <class T>
class model_atomic {
public:
    explicit model_atomic(T v = T{}) noexcept : a_(v) {}
    const bool* guard = nullptr;

    T load(std::memory_order = std::memory_order_seq_cst) {
        point();
        return result(1, a_.load());
    }
    void store(T v, std::memory_order = std::memory_order_seq_cst) {
        point();
        changed(a_.exchange(v) != v);
        result(2, v);
    }
    T exchange(T v, std::memory_order = std::memory_order_seq_cst) {
        point();
        const T old = a_.exchange(v);
        changed(old != v);
        return result(3, old);
    }
    bool compare_exchange_strong(T& expected, T desired, std::memory_order = std::memory_order_seq_cst,
                                 std::memory_order = std::memory_order_seq_cst) {
        point();
        const T e = expected;
        const bool ok = a_.compare_exchange_strong(expected, desired);
        changed(ok && e != desired);
        result(ok ? 4 : 5, expected);
        return ok;
    }
    bool compare_exchange_weak(T& expected, T desired, std::memory_order m1 = std::memory_order_seq_cst,
                               std::memory_order m2 = std::memory_order_seq_cst) {
        return compare_exchange_strong(expected, desired, m1, m2);
    }
    T fetch_add(T d, std::memory_order = std::memory_order_seq_cst) {
        point();
        const T old = a_.fetch_add(d);
        changed(d != T{});
        return result(6, old);
    }
    T fetch_and(T m, std::memory_order = std::memory_order_seq_cst) {
        point();
        const T old = a_.fetch_and(m);
        changed((old & m) != old);
        return result(7, old);
    }
    T peek() const { return a_.load(); }  // no scheduling point: outside the model, or for a futex compare

private:
    void point() {
        cur_sched->access_point(this);
        if (guard != nullptr && *guard) g_use_after_return.fetch_add(1);
    }
    void changed(bool c) {
        if (c) cur_sched->note_change(this);
    }
    // Into the running thread's history (state caching): which atomic, which
    // operation, what it returned.
    T result(std::uint64_t op, T v) {
        std::uint64_t bits = 0;
        if constexpr (std::is_pointer_v<T>)
            bits = reinterpret_cast<std::uintptr_t>(v);
        else
            bits = static_cast<std::uint64_t>(v);
        cur_sched->record(model_sched::mix(reinterpret_cast<std::uintptr_t>(this) ^ op << 56) ^ bits);
        return v;
    }
    std::atomic<T> a_;
};

}  // namespace spindle::test::model
