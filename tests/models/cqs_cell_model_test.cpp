// An exhaustive model of one CQS cell's life cycle (the paper's Figures 2 and
// 4), run over the real transitions of include/spindle/sync/detail/cqs_cell.hpp
// with atomics that hand control to a deterministic scheduler at every access
// (model_scheduler.hpp).
//
// Each run starts up to three model threads on one cell:
//   S  suspend: take the cell (or the value left there, or find it BROKEN);
//      if it waits, announce its cell in the claim word; if cancelled
//      before it announced, run the cancellation handler (CANCELLED or
//      REFUSE, as `mark` says) at once; else park until unparked, then read
//      the claim.
//   R  resume(42) on the same cell.
//   C  a timeout or stop request for S's wait: claim it; if S had announced
//      its cell, run the handler for it; then unpark S.
// and explores the interleavings of their atomic accesses by depth-first
// search over the scheduler's choices (replaying the prefix each run),
// bounded by the number of preemptions: at most 5 in optimized builds (about
// 156,000 runs, under a second since the model threads are contexts on one
// OS thread), 2 under the sanitizers and in debug builds, whose runtimes make
// the search slow (context bounding: protocol bugs rarely need more than 2).
// SPINDLE_MODEL_PREEMPTIONS=-1 explores every interleaving (about 2.3
// million runs, 12 s in a release build; it passes). Only
// one model thread runs at a time, so the model is sequentially consistent:
// it checks the protocol (the paper's own assumption), not memory orders
// (the sanitizer builds of cqs_test do that).
//
// Checked at the end of every run, for every mode (simple / smart with
// on_cancellation true / smart with false) x (async / sync):
//   * the value is neither lost nor duplicated: S got it, or R failed, or it
//     was delegated to S's handler (resumed again, or completed as refused),
//     or R was refused — exactly one;
//   * the cell is counted dead exactly once (segment removal depends on it);
//   * a waiter that parked is unparked exactly once, and never touched after
//     its suspend returned (its record lives on its stack);
//   * nobody is left blocked (no lost wake-up), and the cell ends in a final state.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <spindle/arch/config.hpp>  // SPINDLE_ASAN, SPINDLE_TSAN
#include <spindle/sync/detail/cqs_cell.hpp>

#include "model_scheduler.hpp"

namespace {

namespace sd = spindle::detail;

using namespace spindle::test::model;  // explorer, model_sched, model_atomic, cur_sched

struct model_cell {
    model_atomic<std::uintptr_t> state{sd::cqs_cell::empty};
    model_atomic<std::uint64_t> value{0};
};

// The waiter's record. `value` is a plain field in cqs; here a proxy that
// checks the record is still alive when the resumer writes it.
struct alignas(16) model_wait {
    struct checked_value {
        model_wait* self;
        checked_value& operator=(std::uint64_t v) {
            if (self->gone) g_use_after_return.fetch_add(1);
            v_ = v;
            return *this;
        }
        std::uint64_t v_ = 0;
    };
    model_wait() { claim.guard = &gone; }
    model_atomic<std::uint32_t> claim{sd::cqs_claim::waiting};
    checked_value value{this};
    bool unparked = false;  // the park flag, under the scheduler's lock
    int unparks = 0;        // likewise
    bool gone = false;      // its suspend returned
};

struct model_env {
    int dead_count = 0;
    // cqs_cell.hpp's Env
    void dead() { ++dead_count; }
    void backoff(unsigned&) { cur_sched->step(/*yielding=*/true); }
    void relax() {}
    static constexpr unsigned sync_spins() { return 2; }
    [[noreturn]] void bad_state(std::uintptr_t st) {
        std::fprintf(stderr, "model: impossible cell state %lu\n", static_cast<unsigned long>(st));
        std::abort();
    }
};

// ---- the scenarios ------------------------------------------------------------------

enum class cancel_kind { simple, smart_mark, smart_refuse };

struct scenario {
    cancel_kind ck;
    bool sync;
    bool with_resume;
    bool with_cancel;
};

std::string describe(const scenario& sc) {
    std::string s = sc.ck == cancel_kind::simple ? "simple" : sc.ck == cancel_kind::smart_mark ? "smart/mark" : "smart/refuse";
    s += sc.sync ? " sync" : " async";
    s += sc.with_resume ? " +R" : "";
    s += sc.with_cancel ? " +C" : "";
    return s;
}

// Explores every interleaving of `sc`; returns the number of runs, or -1
// with `err` set on the first violation.
long explore(const scenario& sc, int max_preemptions, std::string& err) {
    using sd::cqs_ops::resume_outcome;
    using sd::cqs_ops::suspend_outcome;
    const bool smart = sc.ck != cancel_kind::simple;
    const bool mark = sc.ck != cancel_kind::smart_refuse;
    explorer ex;
    long runs = 0;
    do {
        ex.restart();
        ++runs;
        g_use_after_return.store(0);
        model_cell cell;
        model_wait w;
        model_env env;
        model_sched sched(ex, max_preemptions);
        enum class s_end { none, got, cancelled, broken } s_res = s_end::none;
        std::uint64_t s_val = 0;
        bool placed = false;
        int redelivered = 0, refused_completed = 0, bad_value = 0, late_unpark = 0, bad_claim = 0;
        resume_outcome r_res{};
        int tid_c = -1;
        // The cancellation handler, run by S or by C: the cell step, then
        // pass on a delegated value (counted here).
        auto handler = [&] {
            std::uint64_t dv = 0;
            if (sd::cqs_ops::cancel_cell(cell, &w, mark, env, dv)) {
                if (dv != 42) ++bad_value;
                if (mark) ++redelivered; else ++refused_completed;
            }
        };
        std::vector<std::function<void()>> bodies;
        bodies.push_back([&] {  // S
            std::uint64_t v = 0;
            switch (sd::cqs_ops::suspend_cell(cell, &w, sc.sync, env, v)) {
            case suspend_outcome::placed: {
                placed = true;
                if (sd::cqs_ops::announce_placed(&w) == sd::cqs_claim::cancelled_early) {
                    handler();  // without parking: C's unpark has no park to match
                    s_res = s_end::cancelled;
                    break;
                }
                cur_sched->park(&w.unparked);
                const std::uint32_t claim = w.claim.load();
                if (claim == sd::cqs_claim::resumed) {
                    s_res = s_end::got;
                    s_val = w.value.v_;
                } else {
                    if (claim != sd::cqs_claim::cancelled) ++bad_claim;
                    s_res = s_end::cancelled;
                }
                break;
            }
            case suspend_outcome::took:
                s_res = s_end::got;
                s_val = v;
                break;
            case suspend_outcome::broken:
                s_res = s_end::broken;
                break;
            }
            if (tid_c >= 0) cur_sched->wait_done(tid_c);  // ~wait_guard waits for a firing timer/stop
            w.gone = true;
        });
        if (sc.with_resume) {
            bodies.push_back([&] {  // R
                model_wait* wake = nullptr;
                r_res = sd::cqs_ops::resume_cell(cell, 42, sc.sync, smart, env, wake);
                if (wake != nullptr) {
                    if (wake->gone) ++late_unpark;
                    ++wake->unparks;
                    cur_sched->unpark(&wake->unparked, 0);
                }
            });
        }
        if (sc.with_cancel) {
            tid_c = static_cast<int>(bodies.size());
            bodies.push_back([&] {  // C
                const auto how = sd::cqs_ops::claim_for_cancel(&w);
                if (how != sd::cqs_ops::cancel_claim::lost) {
                    if (how == sd::cqs_ops::cancel_claim::late) handler();
                    if (w.gone) ++late_unpark;
                    ++w.unparks;
                    cur_sched->unpark(&w.unparked, 0);
                }
            });
        }
        const bool finished = sched.run(std::move(bodies));
        auto fail = [&](const char* what) {
            err = describe(sc) + ": " + what + " (choices " + ex.trace() + ")";
            return -1L;
        };
        if (!finished) return fail("deadlock: a waiter was never woken");
        if (ex.diverged()) return fail("the replay diverged");
        if (g_use_after_return.load() != 0 || late_unpark != 0) return fail("waiter record used after its suspend returned");
        if (bad_value != 0 || (s_res == s_end::got && s_val != 42)) return fail("wrong value");
        if (bad_claim != 0) return fail("a woken waiter found an impossible claim");
        if (placed && w.unparks != 1) return fail("a parked waiter was not unparked exactly once");
        const std::uintptr_t fin = cell.state.peek();
        if (sc.with_resume) {
            const int homes = (s_res == s_end::got) + (r_res == resume_outcome::failed) +
                              (r_res == resume_outcome::skip) + (r_res == resume_outcome::refused) + redelivered +
                              refused_completed;
            if (homes != 1) return fail("the value was lost or duplicated");
            if (env.dead_count != 1) return fail("the cell was not counted dead exactly once");
            if (fin != sd::cqs_cell::taken && fin != sd::cqs_cell::resumed && fin != sd::cqs_cell::cancelled &&
                fin != sd::cqs_cell::refused && fin != sd::cqs_cell::broken)
                return fail("the cell did not end in a final state");
            if (s_res == s_end::broken && r_res != resume_outcome::failed) return fail("broken suspend, successful resume");
            if (!sc.with_cancel && s_res == s_end::cancelled) return fail("cancelled without a cancel request");
        } else {
            if (s_res != s_end::cancelled) return fail("without a resume, the waiter must end cancelled");
            if (env.dead_count != (mark ? 1 : 0)) return fail("dead count of a lone cancelled cell");
            if (fin != (mark ? sd::cqs_cell::cancelled : sd::cqs_cell::refused)) return fail("lone cancelled cell state");
        }
    } while (ex.next());
    return runs;
}

// Preemption bound: SPINDLE_MODEL_PREEMPTIONS overrides (-1: unbounded);
// the default is 5 in optimized builds without sanitizers, else 2.
int preemption_bound() {
    const char* e = std::getenv("SPINDLE_MODEL_PREEMPTIONS");
    if (e != nullptr) return std::atoi(e);
#if SPINDLE_ASAN || SPINDLE_TSAN || !defined(__OPTIMIZE__)
    return 2;
#else
    return 5;
#endif
}

TEST(CqsCellModel, InterleavingsOfSuspendResumeCancel) {
    const int bound = preemption_bound();
    std::printf("    [preemption bound %d]\n", bound);
    long total = 0;
    for (auto ck : {cancel_kind::simple, cancel_kind::smart_mark, cancel_kind::smart_refuse})
        for (bool sync : {false, true})
            for (auto [r, c] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
                scenario sc{ck, sync, r, c};
                std::string err;
                long runs = explore(sc, bound, err);
                ASSERT_GE(runs, 1) << err;
                total += runs;
                std::printf("    [%s: %ld interleavings]\n", describe(sc).c_str(), runs);
            }
    EXPECT_GT(total, 100);
}

}  // namespace
