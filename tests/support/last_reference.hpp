// "The last reference unlocks and frees": what the tests of that rule share.
//
// The rule (POSIX's for mutexes; glibc bug 13690 is the classic slip): once
// a primitive's releasing step is done, another party may take the
// primitive, drop the last reference to the object that holds it and
// delete that object while the releasing call has not returned yet. So the
// releasing step must be the call's last access to the primitive. Two kinds
// of test check it, under ASan:
//
//   * deterministic (last_reference_scenario below): the debug builds' race
//     points (spindle/sync/detail/race_point.hpp) stop the releasing party
//     H right after its releasing step -- and, where the slip needs a waiter
//     to give up first, at the point where H has just counted it. There a
//     race_script runs what the other party W does: W's wait is cancelled
//     (a stop request: the cancellation a timeout makes, at a chosen
//     moment), W takes the primitive if it can, drops the last reference and
//     deletes the object; only then does H go on. An access after the
//     release is then a heap-use-after-free on every run. Nothing waits for
//     time to pass, so a slow machine cannot fail these tests (a party that
//     never gets somewhere fails them after 30 s: that is a hang). Release
//     and TSan builds have no race points: they skip.
//   * stress (run_chain below): fibers on 1-8 workers and plain threads
//     pass through a chain of heap objects with timed waits of a few
//     microseconds racing the releases; whoever drops an object's last
//     reference deletes it right after its own release returned. Any
//     build: it finds what nobody thought of a point for, now and then.
//
// Why race points rather than a delay injected after the release: a delay
// makes the window only likelier, by an amount that depends on the machine,
// and it would slow every run; a point makes the interleaving happen every
// time, costs nothing when no test has installed a script, and does not
// exist in release builds.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <random>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

#include <spindle/sync/detail/race_point.hpp>
#include <spindle/sync/latch.hpp>

#include "fiber_fixtures.hpp"
#include "thread_state.hpp"

namespace spindle::test {

using spindle::detail::race_point;

inline constexpr bool race_points_enabled = SPINDLE_DEBUG_CHECKS != 0;

#if SPINDLE_DEBUG_CHECKS

// While alive, runs `step(point)` each time a slow path of `target` (the
// primitive's address; a wrapper's first member shares it) reaches a race
// point, on the releasing party's thread -- a fiber's worker is held
// meanwhile, so whatever a step waits for must run on plain threads or on
// other workers. One script at a time.
class race_script {
public:
    using step_fn = std::function<void(race_point)>;

    race_script(const void* target, step_fn step) : target_(target), step_(std::move(step)) {
        current().store(this);
        spindle::detail::set_race_hook(&on_point);
    }
    ~race_script() {
        spindle::detail::set_race_hook(nullptr);
        current().store(nullptr);
    }
    race_script(const race_script&) = delete;
    race_script& operator=(const race_script&) = delete;

private:
    static std::atomic<race_script*>& current() {
        static std::atomic<race_script*> s{nullptr};
        return s;
    }
    static void on_point(const void* primitive, race_point point) noexcept {
        race_script* s = current().load();
        if (s != nullptr && s->target_ == primitive) s->step_(point);
    }

    const void* target_;
    step_fn step_;
};

#endif

// A stage counter that the parties of a deterministic test advance.
class stages {
public:
    void reach(int s) { at_.store(s); }
    [[nodiscard]] int now() const { return at_.load(); }
    // Spins (yielding the thread) until stage `s`. Every stage is reached by
    // a party that is running, however slowly: 30 s without it is a hang,
    // reported as a failure.
    bool wait_for(int s) const {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (at_.load() < s) {
            if (std::chrono::steady_clock::now() > give_up) {
                ADD_FAILURE() << "stage " << s << " never came (at " << at_.load() << ")";
                return false;
            }
            std::this_thread::yield();
        }
        return true;
    }
    // As wait_for, but gives up quietly after `d`: for a stage that a
    // correct primitive holds back until the waiting party goes on (a
    // destructor that waits for the release to leave the object).
    bool wait_at_most(int s, std::chrono::milliseconds d) const {
        const auto give_up = std::chrono::steady_clock::now() + d;
        while (at_.load() < s) {
            if (std::chrono::steady_clock::now() > give_up) return false;
            std::this_thread::yield();
        }
        return true;
    }

private:
    std::atomic<int> at_{0};
};

// Counts the live objects of type T (a base of the tests' objects): each
// must be deleted exactly once (ASan reports a second delete; this, a
// missing one).
template <class T>
struct counted_object {
    static inline std::atomic<int> alive{0};
    counted_object() { alive.fetch_add(1); }
    ~counted_object() { alive.fetch_sub(1); }
    counted_object(const counted_object&) = delete;
    counted_object& operator=(const counted_object&) = delete;
};

enum class party_kind { fiber, thread };
inline const char* to_string(party_kind k) { return k == party_kind::fiber ? "fiber" : "thread"; }

// Runs `body` on a fiber of a one-worker scheduler, or on a plain thread,
// and waits for it.
template <class Body>
void run_as(party_kind k, Body body) {
    if (k == party_kind::fiber) {
        scheduler sched({.workers = 1});
        sched.spawn(body).join();
    } else {
        std::thread(body).join();
    }
}

// The deterministic scenario. Obj is a heap object holding one primitive
// and a count of references to itself, with:
//
//   Obj(int refs)                     refs references
//   const void* primitive()           what the race points name
//   void hold()                       H: take the primitive (blocking)
//   void unhold()                     H: release it
//   bool enter(std::stop_token)       W: take it, or false once stopped
//   bool try_enter()                  W: take it if that needs no waiting
//   void enter()                      W: take it (blocking)
//   void leave()                      W: release it
//   int drop()                        drop one reference (under the
//                                     primitive); the references left
//
// H holds the primitive; W (a plain thread) waits for it with a stop token
// until H sees W's thread asleep in the kernel (queued). H drops its
// reference and releases. At `cancel_at`, W's wait is cancelled. At
// `retry_at` (which may be the same point), W takes the primitive if it can
// without waiting, drops the last reference, releases it and deletes the
// object, and H goes on only after that -- or after W found it could not
// take it yet (a correct primitive still owes W its turn: W then waits for
// it, at once or -- `block_after_holder` -- only once H's release has
// returned, which sends a correct primitive down the path where its
// releaser finds nobody left to hand it to).
// `delete_waits`: the object's destructor waits for a release still inside
// it (as event, latch, barrier and channel do); then H waits for W's delete
// at most a moment, since a correct destructor holds it back until H goes
// on.
//
// Without the rule, ASan reports H's access to the deleted primitive after
// `retry_at`. With it, the object is deleted once, by W, whether W got in
// at the point or only after H went on.
struct scenario_options {
    bool block_after_holder = false;
    bool delete_waits = false;
};

template <class Obj>
void last_reference_scenario(party_kind holder, race_point cancel_at, race_point retry_at,
                             scenario_options opt = {}) {
#if SPINDLE_DEBUG_CHECKS
    // Stages: 1 H holds; 3 W may retry; 4 W retried (got: it is deleting);
    // 5 W deleted.
    auto* obj = new Obj(2);
    std::stop_source stop;
    stages st;
    std::atomic<pid_t> wtid{0};
    std::atomic<bool> got{false}, holder_done{false};
    bool cancelled = false, retried = false;  // the script's, on H's thread
    {
        race_script script(obj->primitive(), [&](race_point p) {
            if (p == cancel_at && !cancelled) {
                cancelled = true;
                stop.request_stop();  // runs W's cancellation here, on H's thread
            }
            if (p == retry_at && cancelled && !retried) {
                retried = true;
                st.reach(3);
                st.wait_for(4);
                if (got.load()) {
                    if (opt.delete_waits) (void)st.wait_at_most(5, std::chrono::milliseconds(200));
                    else st.wait_for(5);
                }
            }
        });
        std::thread w([&] {
            wtid.store(this_tid());
            st.wait_for(1);
            const bool early = obj->enter(stop.get_token());
            EXPECT_FALSE(early) << "W was not cancelled: the scenario did not happen";
            if (early) {
                got.store(true);
            } else {
                st.wait_for(3);
                if (obj->try_enter()) {
                    got.store(true);
                } else {
                    st.reach(4);
                    if (opt.block_after_holder)
                        while (!holder_done.load()) std::this_thread::yield();
                    obj->enter();
                }
            }
            const bool last = obj->drop() == 0;
            obj->leave();
            if (got.load()) st.reach(4);
            EXPECT_TRUE(last);
            if (last) delete obj;
            st.reach(5);
        });
        run_as(holder, [&] {
            obj->hold();
            st.reach(1);
            EXPECT_TRUE(parks(wtid)) << "W never queued";
            const bool last = obj->drop() == 0;
            obj->unhold();
            if (last) delete obj;
            if (!retried && st.now() < 3) st.reach(3);  // no retry point came: let W go on
            holder_done.store(true);
        });
        w.join();
    }
    EXPECT_TRUE(cancelled);
    EXPECT_TRUE(retried);
    EXPECT_EQ(Obj::alive.load(), 0);
#else
    (void)holder, (void)cancel_at, (void)retry_at, (void)opt;
#endif
}

// The stress chain. `rounds` objects, each made as Obj(parties) (one
// reference per party); `fibers` fibers on `workers` workers and `threads`
// plain threads each pass through objects 0, 1, ... in turn:
// pass(obj, rng) takes the primitive (timed waits that may time out),
// drops its reference, releases, and deletes the object if that reference
// was the last -- so every object is deleted once, by whoever was last, and
// the others may still be inside their releases.
template <class Obj, class Pass>
void run_chain(unsigned workers, int fibers, int threads, int rounds, Pass pass) {
    const int parties = fibers + threads;
    std::vector<Obj*> objs;
    objs.reserve(static_cast<std::size_t>(rounds));
    for (int i = 0; i < rounds; ++i) objs.push_back(new Obj(parties));
    // Each object's parties meet at a gate first, so that they contend for
    // it together instead of passing one after another. A latch, not a
    // spin: with more workers and threads than CPUs, parties spinning at
    // the next gate would starve the ones still at work.
    std::deque<spindle::latch> gates;
    for (int i = 0; i < rounds; ++i) gates.emplace_back(parties);
    {
        scheduler sched(stress_options(workers));
        auto body = [&](int who) {
            std::minstd_rand rng(static_cast<unsigned>(who) * 2654435761u + 17u);
            for (std::size_t i = 0; i < objs.size(); ++i) {
                gates[i].arrive_and_wait();
                pass(*objs[i], rng);
            }
        };
        run_crowd(sched, {.fibers = fibers, .threads = threads}, body);
    }
    EXPECT_EQ(Obj::alive.load(), 0);
}

// A short timeout for the stress chains: 0-31 us, so that many waits time
// out right as the primitive is being handed to them.
inline std::chrono::microseconds short_timeout(std::minstd_rand& rng) {
    return std::chrono::microseconds(rng() % 32);
}

// Yields 0-2 times (a plain thread yields its CPU): inside a critical
// section, so that the others queue behind it and time out there; before
// one, so that the parties of a chain meet at each object.
inline void linger(std::minstd_rand& rng) {
    for (unsigned k = rng() % 3; k != 0; --k) this_fiber::yield();
}

// Stress sizes: sanitizers make every operation much slower, and more
// workers than CPUs make each round of a chain slower (its parties meet at
// a gate, spinning), so fewer rounds the more workers.
#if SPINDLE_TSAN || SPINDLE_ASAN
inline constexpr int chain_fibers = 12;
inline int chain_rounds(unsigned workers) { return 80 / static_cast<int>(workers) + 8; }
#else
inline constexpr int chain_fibers = 16;
inline int chain_rounds(unsigned workers) { return 240 / static_cast<int>(workers) + 16; }
#endif
inline constexpr int chain_threads = 2;

inline std::string party_name(const ::testing::TestParamInfo<party_kind>& i) { return to_string(i.param); }

// The object of the mutex scenarios (spindle::mutex, cqs_mutex: anything
// with lock(), try_lock(), lock(stop_token) and unlock()): a mutex and a
// count of references to itself, guarded by it.
template <class M>
struct mutex_object : counted_object<mutex_object<M>> {
    explicit mutex_object(int n) : refs(n) {}
    M m;
    int refs;  // guarded by m

    const void* primitive() const { return &m; }
    void hold() { m.lock(); }
    void unhold() { m.unlock(); }
    bool enter(std::stop_token st) { return m.lock(std::move(st)); }
    bool try_enter() { return m.try_lock(); }
    void enter() { m.lock(); }
    void leave() { m.unlock(); }
    int drop() { return --refs; }
};

}  // namespace spindle::test
