// What the tests that run fibers share (tests/sync, tests/runtime): the
// names they use, the size of a stress test, running one body on fibers and
// threads at once, stop sources for cancellation storms, a waiter that tries
// a few times before it blocks, waiting for a word to settle, timed waits on
// plain threads, and the death tests' destruction of a primitive somebody
// waits on.
//
// A test file says `using namespace spindle::test;` inside its anonymous
// namespace; that brings in fiber, handoff, scheduler, this_fiber and the
// chrono literals along with what follows.
#pragma once

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/scheduler.hpp>

#include "params.hpp"

namespace spindle::test {

using namespace std::chrono_literals;
using spindle::fiber;
using spindle::handoff;
using spindle::scheduler;
namespace this_fiber = spindle::this_fiber;

// Fibers a stress test spawns. Sanitizers: every fiber costs much more.
#if SPINDLE_TSAN || SPINDLE_ASAN
inline constexpr int stress_fibers = 300;
#else
inline constexpr int stress_fibers = 2000;
#endif

// A stress test's scheduler: `workers` workers, and stacks small enough for
// thousands of fibers.
inline scheduler::options stress_options(unsigned workers) {
    return {.workers = workers, .stack_size = 32 * 1024};
}

// Who runs a body: body(i) on `fibers` fibers (i = 0 .. fibers - 1), and
// body(first_thread + t) on `threads` plain threads (t = 0 .. threads - 1).
struct crowd {
    int fibers;
    int threads;
    int first_thread = 0;
};

// A crowd under way; join() waits for the fibers, then the threads.
struct running_crowd {
    std::vector<fiber> fibers;
    std::vector<std::thread> threads;

    void join() {
        for (auto& f : fibers) f.join();
        for (auto& t : threads) t.join();
    }
};

// Spawns the crowd's fibers on `sched`, then starts its threads; `body`
// must outlive them.
template <class Body>
running_crowd start_crowd(scheduler& sched, crowd c, Body& body) {
    running_crowd r;
    r.fibers.reserve(static_cast<std::size_t>(c.fibers));
    for (int i = 0; i < c.fibers; ++i) r.fibers.push_back(sched.spawn([&body, i] { body(i); }));
    for (int t = 0; t < c.threads; ++t)
        r.threads.emplace_back([&body, n = c.first_thread + t] { body(n); });
    return r;
}

// start_crowd, then join: returns when every fiber and thread has returned.
template <class Body>
void run_crowd(scheduler& sched, crowd c, Body& body) {
    start_crowd(sched, c, body).join();
}

// Tries `try_once` (true: got in) up to nine times, yielding in between,
// then calls `block`: under FIFO a spinner gets in only when nobody is
// queued, so it must queue in the end.
template <class Try, class Block>
void try_then_block(Try try_once, Block block) {
    for (int k = 0;; ++k) {
        if (try_once()) return;
        if (k == 8) {
            block();
            return;
        }
        this_fiber::yield();
    }
}

// Waits (yielding, on a plain thread) until `pred()` holds, or 30 s pass;
// returns pred(). For a word that is exact only once the operations in
// flight are over: a plain-thread waiter preempted between counting itself
// and reaching its cell lets a synchronous resume break that cell, and the
// word is off by one until the waiter counts itself again. A test checks
// the settled value: EXPECT_TRUE(settles([&] { return w.debug_count() == -6; })).
template <class Pred>
bool settles(Pred pred) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!pred()) {
        if (std::chrono::steady_clock::now() > give_up) return false;
        std::this_thread::yield();
    }
    return true;
}

// Runs `attempt` on `n` plain threads at once (a timed wait that should run
// out on the futex path, say); returns how many of them it returned true on.
template <class Attempt>
int count_on_threads(int n, Attempt attempt) {
    std::atomic<int> yes{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i)
        ts.emplace_back([&] {
            if (attempt()) yes.fetch_add(1);
        });
    for (auto& th : ts) th.join();
    return yes.load();
}

// For a death test: deletes `p` while a detached thread is blocked in
// wait(*p) -- once queued(*p) says it is queued.
template <class T, class Wait, class Queued>
void destroy_while_waited_on(T* p, Wait wait, Queued queued) {
    std::thread([p, wait] { wait(*p); }).detach();
    while (!queued(*p)) std::this_thread::yield();
    delete p;
}

// Whether thread `tid` of this process sleeps in futex() now, from
// /proc/self/task/<tid>/syscall; nullopt where that file cannot be read.
inline std::optional<bool> sleeps_in_futex(pid_t tid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(tid));
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) return std::nullopt;
    long nr = -2;
    const int got = std::fscanf(f, "%ld", &nr);  // "running" reads as no number
    std::fclose(f);
    return got == 1 && nr == SYS_futex;
}

// The same where the waiter cannot be seen queued from outside: deletes `p`
// once the waiting thread sleeps in futex() (a plain thread's wait counts
// itself before it parks there), and `settle` after that. A loaded machine
// may take long to get there, which only delays the test; where /proc does
// not show system calls, `settle` is all it waits.
template <class T, class Wait>
void destroy_while_waited_on(T* p, Wait wait, std::chrono::milliseconds settle) {
    std::atomic<pid_t> tid{0};
    std::thread([p, wait, &tid] {
        tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
        wait(*p);
    }).detach();
    while (tid.load() == 0) std::this_thread::yield();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
        const std::optional<bool> s = sleeps_in_futex(tid.load());
        if (!s.has_value() || *s) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(settle);
    delete p;
}

// Stop sources for a storm: a waiter borrows the token of one slot; the
// stopper stops each slot in turn and puts a fresh source in its place (a
// stop_source cannot be un-stopped), so waiters that come later can wait
// again until the stopper comes round.
class stop_slots {
public:
    static constexpr std::size_t size = 64;
    std::stop_token token(std::size_t i) {
        std::lock_guard<std::mutex> g(m_[i % size]);
        return src_[i % size].get_token();
    }
    void stop_one_round(std::chrono::microseconds gap) {
        for (std::size_t i = 0; i < size; ++i) {
            std::this_thread::sleep_for(gap);
            std::stop_source old;
            {
                std::lock_guard<std::mutex> g(m_[i]);
                std::swap(old, src_[i]);
            }
            old.request_stop();  // outside the lock: it runs the waiters' callbacks
        }
    }

private:
    std::mutex m_[size];
    std::stop_source src_[size];
};

}  // namespace spindle::test
