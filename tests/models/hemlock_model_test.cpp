// A model of the Hemlock Grant handshake: the real code of
// include/spindle/locks/hemlock.hpp -- all four variants (naive, CTR,
// overlap, AHO), spinning and parking -- run by two or three model threads
// under the deterministic scheduler of model_scheduler.hpp, with atomics that
// hand control to the scheduler at every access, a model futex, and each
// model thread's own Grant cell. The reachable states are explored, within a
// bound on preemptions (see Search below).
//
// Scenarios (L0, L1 locks; each lock()..unlock() is a critical section with a
// scheduling point inside):
//   two_rounds      T0, T1: L0 twice each
//   three_threads   T0, T1, T2: L0 once each
//   relock          T0: L0 twice; T1, T2: L0 once. T0 may lock again before
//                   its successor acknowledged its handover: the case of
//                   Listing 3's line 6 (overlap), whose omission lets a third
//                   thread take T0's stale Grant for its own handover.
//   multi_wait_a    T0: L0, L1, release L0 then L1; T1: L0; T2: L1. When T1
//                   and T2 both queue behind T0 they poll T0's one Grant for
//                   different locks (the paper's multi-waiting, §2.2).
//   multi_wait_b    the same, T0 releasing L1 first.
//   both_nested     T0, T1: L0 then L1, released in opposite orders.
//
// Checked at the end of every run:
//   * mutual exclusion: nobody found another thread in a critical section;
//   * FIFO: each lock admitted threads in the order of their swaps on its
//     tail (the model atomic logs them);
//   * no lost handover and no lost wake-up: every thread finished -- the
//     scheduler reports a deadlock when all live threads wait (a spin loop
//     waits until a word it read changes; a futex sleep until a wake);
//   * Grant ends empty: every thread's Grant word is 0 (flags included)
//     after its last operation -- for overlap, after the wait a thread's exit
//     makes (drain_own_grant) -- and every tail is null.
//
// The parking variants run with a wait policy that spins one step before it
// sleeps, so that both the spinning and the sleeping paths are explored; and
// once more with the split unlock of the park twins (unlock_deferred(), a
// scheduling point, finish(): the wake-up and the wait for the
// acknowledgement after the gate let the lock go).
//
// Search: depth-first over the scheduler's choices with state caching (a run
// stops at a state an earlier run reached; model_scheduler.hpp), bounded by
// the number of preemptions: 3 in optimized builds without sanitizers (the
// 48 explorations: about 1,000,000 runs, 5-10 s), 2 under ASan and in debug
// builds (about 93,000 runs), 1 under TSan (about 4,800). Environment:
// SPINDLE_MODEL_PREEMPTIONS overrides the bound (-1: unbounded, every
// reachable state), SPINDLE_MODEL_SCENARIO runs one scenario,
// SPINDLE_MODEL_CACHE=0 turns state caching off (then the search is over
// interleavings). The unbounded search and its cost: the note at the end of
// this file.
//
// Checked to catch real mistakes: each of these changes to hemlock.hpp fails
// the bounded search -- a handover that does not wake the sleepers, an
// acknowledgement that drops s or does not wake a sleeping owner, CTR/naive
// not waiting for the acknowledgement, AHO not retracting its speculative
// grant, overlap without Listing 3's line 6.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <spindle/arch/config.hpp>  // SPINDLE_ASAN, SPINDLE_TSAN
#include <spindle/locks/hemlock.hpp>

#include "../support/lock_probe.hpp"
#include "model_scheduler.hpp"

// The model threads lock and unlock as their programs say, which Clang's
// static lock analysis cannot follow: off for this file.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wthread-safety-analysis"
#endif

namespace {

using namespace spindle::test::model;
using spindle::hemlock_variant;

// ---- the model environment for basic_hemlock ------------------------------------

// Swaps on pointer-typed atomics (the locks' tails) are logged: the order in
// which threads arrived at each lock.
struct arrival {
    const void* tail;
    int tid;
};
std::vector<arrival> g_arrivals;  // this run's; touched only by the running model thread

template <class T>
class logged_atomic : public model_atomic<T> {
public:
    using model_atomic<T>::model_atomic;
    T exchange(T v, std::memory_order m = std::memory_order_seq_cst) {
        const T old = model_atomic<T>::exchange(v, m);
        if constexpr (std::is_pointer_v<T>) g_arrivals.push_back({this, cur_tid});
        return old;
    }
};

using model_word = logged_atomic<std::uintptr_t>;
using model_grant = spindle::detail::hemlock_grant<model_word>;

std::vector<model_grant>* g_grants = nullptr;  // this run's, one per model thread

struct model_env {
    template <class T>
    using atomic = logged_atomic<T>;
    using grant = model_grant;
    using annotate = spindle::detail::no_lock_annotations;

    static grant& self() noexcept { return (*g_grants)[static_cast<std::size_t>(cur_tid)]; }
    static void relax(unsigned& steps) noexcept {
        ++steps;
        cur_sched->spin_wait();
    }
    static void sleep(model_word& w, std::uintptr_t expected) noexcept {
        cur_sched->futex_wait(&w, [&] { return w.peek() == expected; });
    }
    static void wake_all(model_word& w) noexcept { cur_sched->futex_wake(&w); }
    // Overlap: the model threads drain their Grant at their end themselves.
    static bool drain_at_exit(spindle::detail::thread_exit_fn) noexcept { return true; }
};

// Spins one step, then parks: reaches the sleeping paths in few steps.
struct model_park_wait {
    static constexpr bool parks = true;
    static constexpr unsigned spin_steps = 1;
};

// ---- scenarios --------------------------------------------------------------------------

enum class op_kind { lock, unlock };
struct op {
    op_kind kind;
    int lock;
};
using program = std::vector<op>;  // one model thread's operations; a critical section after each lock

struct scenario {
    const char* name;
    std::vector<program> threads;
};

op L(int l) { return {op_kind::lock, l}; }
op U(int l) { return {op_kind::unlock, l}; }

const std::vector<scenario>& scenarios() {
    static const std::vector<scenario> all = {
        {"two_rounds", {{L(0), U(0), L(0), U(0)}, {L(0), U(0), L(0), U(0)}}},
        {"three_threads", {{L(0), U(0)}, {L(0), U(0)}, {L(0), U(0)}}},
        {"relock", {{L(0), U(0), L(0), U(0)}, {L(0), U(0)}, {L(0), U(0)}}},
        {"multi_wait_a", {{L(0), L(1), U(0), U(1)}, {L(0), U(0)}, {L(1), U(1)}}},
        {"multi_wait_b", {{L(0), L(1), U(1), U(0)}, {L(0), U(0)}, {L(1), U(1)}}},
        {"both_nested", {{L(0), L(1), U(0), U(1)}, {L(0), L(1), U(1), U(0)}}},
    };
    return all;
}

// Explores every interleaving (within the bound) of `sc` on
// basic_hemlock<V, Wait, model_env>; the number of runs, or -1 with `err`.
// Split: unlock the way the park twins' gate does (detail/park_gate.hpp):
// unlock_deferred(), a scheduling point (where the gate is released and
// others run), then finish() -- the wake-up and the wait for the
// acknowledgement after the lock was let go.
template <hemlock_variant V, class Wait, bool Split = false>
long explore(const scenario& sc, int max_preemptions, bool cache, std::string& err) {
    using lock_type = spindle::basic_hemlock<V, Wait, model_env>;
    constexpr int kLocks = 2;
    constexpr int kMaxThreads = 3;
    const int n = static_cast<int>(sc.threads.size());
    // The same addresses in every run (state caching hashes them).
    static lock_type locks[kLocks];
    static std::vector<model_grant> grants(kMaxThreads);
    explorer ex;
    std::unordered_set<std::uint64_t> visited;
    long runs = 0;
    do {
        ex.restart();
        ++runs;
        g_arrivals.clear();
        for (auto& l : locks) {
            std::destroy_at(&l);
            std::construct_at(&l);
        }
        for (auto& g : grants) {
            std::destroy_at(&g);
            std::construct_at(&g);
        }
        g_grants = &grants;
        int inside[kLocks] = {};
        int overlaps = 0;
        std::vector<int> entries[kLocks];  // admission order per lock
        model_sched sched(ex, max_preemptions);
        if (cache) {
            sched.cache_states(&visited, [&] {
                std::uint64_t h = static_cast<std::uint64_t>(overlaps);
                for (int l = 0; l < kLocks; ++l) {
                    h = model_sched::mix(h ^ reinterpret_cast<std::uintptr_t>(
                                                 spindle::detail::lock_probe::arrival_word(locks[l]).peek()));
                    h = model_sched::mix(h ^ static_cast<std::uint64_t>(inside[l]));
                    for (int t : entries[l]) h = model_sched::mix(h ^ static_cast<std::uint64_t>(t));
                }
                for (int t = 0; t < n; ++t) h = model_sched::mix(h ^ grants[static_cast<std::size_t>(t)].word.peek());
                for (const arrival& a : g_arrivals)
                    h = model_sched::mix(h ^ reinterpret_cast<std::uintptr_t>(a.tail) ^ static_cast<std::uint64_t>(a.tid));
                return h;
            });
        }
        std::vector<std::function<void()>> bodies;
        for (int t = 0; t < n; ++t) {
            bodies.push_back([&, t] {
                for (const op& o : sc.threads[static_cast<std::size_t>(t)]) {
                    if (o.kind == op_kind::lock) {
                        locks[o.lock].lock();
                        entries[o.lock].push_back(t);
                        if (++inside[o.lock] != 1) ++overlaps;
                        cur_sched->step();  // others run while we hold it
                        --inside[o.lock];
                    } else if constexpr (Split) {
                        const auto later = locks[o.lock].unlock_deferred();
                        cur_sched->step();
                        later.finish();
                    } else {
                        locks[o.lock].unlock();
                    }
                }
                // What a thread's exit runs (overlap only: the others wait
                // for the acknowledgement inside unlock()).
                if constexpr (V == hemlock_variant::overlap) lock_type::drain_own_grant();
            });
        }
        const bool finished = sched.run(std::move(bodies));
        auto fail = [&](const std::string& what) {
            err = std::string(sc.name) + ": " + what + " (choices " + ex.trace() + ")";
            return -1L;
        };
        if (!finished)
            return fail(sched.livelock() ? "livelock: no progress in " + std::to_string(model_sched::max_steps) + " steps"
                                         : "deadlock: a handover or a wake-up was lost");
        if (ex.diverged()) return fail("the replay diverged");
        if (overlaps != 0) return fail("two threads in a critical section");
        if (sched.pruned()) continue;  // a state explored before: its ends were checked there
        for (int l = 0; l < kLocks; ++l) {
            std::vector<int> arrived;
            for (const arrival& a : g_arrivals)
                if (a.tail == static_cast<const void*>(&locks[l])) arrived.push_back(a.tid);
            if (arrived != entries[l]) return fail("lock " + std::to_string(l) + " did not admit in arrival order");
        }
        for (int t = 0; t < n; ++t)
            if (grants[static_cast<std::size_t>(t)].word.peek() != 0)
                return fail("thread " + std::to_string(t) + "'s Grant did not end empty");
        for (int l = 0; l < kLocks; ++l)
            if (spindle::detail::lock_probe::arrival_word(locks[l]).peek() != nullptr)
                return fail("lock " + std::to_string(l) + " did not end free");
    } while (ex.next());
    return runs;
}

// Preemption bound: SPINDLE_MODEL_PREEMPTIONS overrides (-1: unbounded);
// the default is 3 in optimized builds without sanitizers, 2 under ASan and
// in debug builds, 1 under TSan (whose fiber switches cost the most).
int preemption_bound() {
    const char* e = std::getenv("SPINDLE_MODEL_PREEMPTIONS");
    if (e != nullptr) return std::atoi(e);
#if SPINDLE_TSAN
    return 1;
#elif SPINDLE_ASAN || !defined(__OPTIMIZE__)
    return 2;
#else
    return 3;
#endif
}

// State caching (model_scheduler.hpp): on unless SPINDLE_MODEL_CACHE=0.
bool cache_states() {
    const char* e = std::getenv("SPINDLE_MODEL_CACHE");
    return e == nullptr || std::atoi(e) != 0;
}

template <hemlock_variant V, class Wait, bool Split = false>
void explore_all(const char* variant) {
    const int bound = preemption_bound();
    const char* only = std::getenv("SPINDLE_MODEL_SCENARIO");  // run one scenario (a long unbounded search)
    long total = 0;
    for (const scenario& sc : scenarios()) {
        if (only != nullptr && std::string(only) != sc.name) continue;
        std::string err;
        const long runs = explore<V, Wait, Split>(sc, bound, cache_states(), err);
        ASSERT_GE(runs, 1) << variant << ", " << err;
        total += runs;
        std::printf("    [%s, %s, preemption bound %d: %ld interleavings]\n", variant, sc.name, bound, runs);
    }
    if (only == nullptr) {
        EXPECT_GT(total, 10);
    }
}

TEST(HemlockModel, Naive) { explore_all<hemlock_variant::naive, spindle::spin_wait>("naive"); }
TEST(HemlockModel, Ctr) { explore_all<hemlock_variant::ctr, spindle::spin_wait>("ctr"); }
TEST(HemlockModel, Overlap) { explore_all<hemlock_variant::overlap, spindle::spin_wait>("overlap"); }
TEST(HemlockModel, Aho) { explore_all<hemlock_variant::aho, spindle::spin_wait>("aho"); }
TEST(HemlockModel, NaivePark) { explore_all<hemlock_variant::naive, model_park_wait>("naive park"); }
TEST(HemlockModel, CtrPark) { explore_all<hemlock_variant::ctr, model_park_wait>("ctr park"); }
TEST(HemlockModel, OverlapPark) { explore_all<hemlock_variant::overlap, model_park_wait>("overlap park"); }
TEST(HemlockModel, AhoPark) { explore_all<hemlock_variant::aho, model_park_wait>("aho park"); }
TEST(HemlockModel, NaiveParkSplitUnlock) {
    explore_all<hemlock_variant::naive, model_park_wait, true>("naive park, split unlock");
}
TEST(HemlockModel, CtrParkSplitUnlock) {
    explore_all<hemlock_variant::ctr, model_park_wait, true>("ctr park, split unlock");
}
TEST(HemlockModel, OverlapParkSplitUnlock) {
    explore_all<hemlock_variant::overlap, model_park_wait, true>("overlap park, split unlock");
}
TEST(HemlockModel, AhoParkSplitUnlock) {
    explore_all<hemlock_variant::aho, model_park_wait, true>("aho park, split unlock");
}

}  // namespace

// Unbounded search (SPINDLE_MODEL_PREEMPTIONS=-1, release build, this
// 2-CPU machine while other builds ran), per test, all six scenarios:
//   Naive 2.8 s, Ctr 2.3 s, Overlap 148 s (niced), Aho 50 s -- all pass.
// The park twins, the same way: CtrPark 164 s, CtrParkSplitUnlock 357 s
// (the unlock of hemlock_park, the preload library's default lock),
// NaivePark 952 s (niced, beside other work) -- all pass. The other park
// twins have run under the default bound only.
