// bench/harness/runners.hpp — what the fiber benchmarks (bench/ces,
// bench/cqs) share: fail() (fail.hpp), and the runners that run body(k) for k in [0, n)
// as n fibers on spindle, n fibers on Boost.Fiber, or on OS threads, and
// return the wall time in ns from the start of the first to the end of the
// last. Building and tearing down the executor is not timed.
#pragma once

#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/scheduler.hpp>

#include <boost/fiber/algo/round_robin.hpp>
#include <boost/fiber/algo/work_stealing.hpp>
#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/fiber.hpp>
#include <boost/fiber/fixedsize_stack.hpp>
#include <boost/fiber/mutex.hpp>
#include <boost/fiber/operations.hpp>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fail.hpp"
#include "harness.hpp"

namespace spindle::bench {

inline constexpr std::size_t runner_stack_bytes = 64 * 1024;  // every fiber, spindle and Boost
inline constexpr int child_timeout_s = 600;                    // a hung boost_fiber child is killed (SIGALRM)

// spindle: a root fiber spawns the actors (on its worker; idle workers steal
// them) and joins them, like Boost's main fiber below.
template <class Body>
double spindle_run(unsigned workers, int n, Body& body, std::size_t stack_bytes = runner_stack_bytes) {
    spindle::scheduler sched(spindle::scheduler::options{.workers = workers, .stack_size = stack_bytes});
    double t0 = now_ns();
    sched.spawn([&body, n] {
             std::vector<spindle::fiber> fs;
             fs.reserve(static_cast<std::size_t>(n));
             for (int k = 0; k < n; ++k) fs.push_back(spindle::fiber([&body, k] { body(k); }));
             for (auto& f : fs) f.join();
         })
        .join();
    return now_ns() - t0;
}

// Boost.Fiber: the calling thread and workers-1 helper threads each install
// work_stealing(workers) (round_robin when workers == 1: a one-thread
// work_stealing spins forever trying to steal from itself); the main fiber
// creates the actors (they land in its queue, the helpers steal them) and
// waits for a fiber-aware count to reach zero; the helpers' main fibers wait
// for the same count, then their threads end and are joined. Call only in a
// forked child (see in_child).
template <class Body>
double boost_run(unsigned workers, int n, Body& body, std::size_t stack_bytes = runner_stack_bytes) {
    namespace bf = boost::fibers;
    bf::mutex done_m;
    bf::condition_variable done_cv;
    int remaining = n;
    auto wait_done = [&] {
        std::unique_lock<bf::mutex> lk(done_m);
        done_cv.wait(lk, [&] { return remaining == 0; });
    };
    std::vector<std::thread> helpers;
    for (unsigned k = 1; k < workers; ++k)
        helpers.emplace_back([&] {
            bf::use_scheduling_algorithm<bf::algo::work_stealing>(workers);
            wait_done();
        });
    // work_stealing's constructor waits on a barrier until all `workers`
    // threads have registered, so no fiber starts before the pool is whole.
    if (workers == 1)
        bf::use_scheduling_algorithm<bf::algo::round_robin>();
    else
        bf::use_scheduling_algorithm<bf::algo::work_stealing>(workers);
    double t0 = now_ns();
    for (int k = 0; k < n; ++k)
        bf::fiber(std::allocator_arg, bf::fixedsize_stack(stack_bytes), [&, k] {
            body(k);
            std::unique_lock<bf::mutex> lk(done_m);
            if (--remaining == 0) done_cv.notify_all();
        }).detach();
    wait_done();
    double elapsed = now_ns() - t0;
    for (auto& h : helpers) h.join();
    return elapsed;
}

// OS threads: `threads` of them, thread t runs actors t, t+T, ... in turn
// (threads == n: one actor each); created first, released together at a
// gate (acquire/release: the gate orders nothing the bodies need, but it is
// the usual pairing).
template <class Body>
double threads_run(unsigned threads, int n, Body& body) {
    std::atomic<bool> go{false};
    std::vector<std::thread> ts;
    ts.reserve(threads);
    for (unsigned t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            for (int k = static_cast<int>(t); k < n; k += static_cast<int>(threads)) body(k);
        });
    double t0 = now_ns();
    go.store(true, std::memory_order_release);
    for (auto& t : ts) t.join();
    return now_ns() - t0;
}

// Run fn() (returning std::vector<double>) in a forked child and return what
// it returned. The child ends with _exit: Boost's process-static scheduler
// registry is never torn down, and the parent never touches Boost.Fiber.
// The harness's watchdog knows the child (watch_child) and kills it if the
// measurement hangs; a child that outlives child_timeout_s (SIGALRM) makes
// the measurement hung. The child also dies with the thread that forked it
// (PR_SET_PDEATHSIG): a program killed whole leaves no child behind.
template <class Fn>
std::vector<double> in_child(const char* what, Fn fn) {
    int fds[2];
    if (pipe(fds) != 0) fail("%s: pipe: %s", what, std::strerror(errno));
    // Decided here, read in the child: both are the harness's, test only.
    const bool hang = test_hang_children();
    const double limit_s = child_limit_s(child_timeout_s);
    const pid_t parent = getpid();
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) fail("%s: fork: %s", what, std::strerror(errno));
    if (pid > 0) watch_child(pid);
    if (pid == 0) {
        close(fds[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(3);  // the parent ended before the prctl
        alarm(static_cast<unsigned>(std::ceil(limit_s)));
        if (hang)
            for (;;) pause();  // --test-hang-child
        std::vector<double> v = fn();
        const char* p = reinterpret_cast<const char*>(v.data());
        std::size_t left = v.size() * sizeof(double);
        while (left > 0) {
            ssize_t k = write(fds[1], p, left);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) _exit(3);
            p += k;
            left -= static_cast<std::size_t>(k);
        }
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    std::vector<char> bytes;
    char buf[4096];
    for (;;) {
        ssize_t k = read(fds[0], buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        bytes.insert(bytes.end(), buf, buf + k);
    }
    close(fds[0]);
    int status = 0;
    if (!reap_child(pid, status)) fail("%s: waitpid: %s", what, std::strerror(errno));
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) after_child_killed();  // the watchdog's kill?
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        measurement_hung(std::string(what) + ": its child process did not finish within " + param::number(limit_s) +
                         " s");
    if (WIFSIGNALED(status)) fail("%s: child killed by signal %d", what, WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("%s: child failed with status %d", what, WEXITSTATUS(status));
    std::vector<double> v(bytes.size() / sizeof(double));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
    return v;
}

}  // namespace spindle::bench
