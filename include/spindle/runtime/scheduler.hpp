// spindle/runtime/scheduler.hpp — the executor that runs fibers.
//
// A scheduler owns `workers` OS threads. Each worker runs fibers from its
// ready ring and its Chase–Lev deque (see detail/worker.hpp for the
// picture), switching directly from fiber to fiber; a worker with nothing to
// run steals from the others' deques, spins briefly, then parks on a futex
// event count: an idle scheduler uses no CPU.
//
//     spindle::scheduler sched({.workers = 1});
//     auto f = sched.spawn([] { work(); });
//     f.join();
//     // ~scheduler() waits for every fiber, detached ones included.
//
// Placement: a fiber spawned from a fiber of this scheduler goes to the
// spawner's deque (newest first; idle workers steal the oldest); one spawned
// from outside goes to the workers' inject lists in turn. Fibers migrate: by
// stealing, and by a CES handoff (runtime/handoff.hpp), which moves a mutex
// waiter to the unlocker's worker. A fiber woken by another thread goes back
// to the worker it last ran on.
//
// Or, like an event loop's run(), on the thread that calls it
// (options::caller_is_worker): that thread is worker 0, and a one-worker
// scheduler starts no thread of its own.
//
//     spindle::scheduler sched({.workers = 1, .caller_is_worker = true});
//     sched.run([] { serve(); });  // returns when every fiber has finished
//
// Contract:
//   spawn() from any thread or fiber          starts a fiber, returns its handle
//   ~scheduler() from outside its fibers      waits for all fibers, joins workers
//   ~scheduler() from one of its own fibers   aborts with a message (deadlock)
//   a fiber that never finishes               makes ~scheduler() wait forever
//   caller_is_worker:
//     run() from a plain thread, once         runs worker 0 there until every
//                                             fiber has finished, then stops
//                                             the other workers and closes
//                                             the I/O engines
//     ~scheduler() before run()               runs it (the fibers finish)
//     run() again, from a fiber, or without   aborts with a message naming
//       caller_is_worker; spawn() after run();  the scheduler
//       ~scheduler() before run() from a fiber
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

#include <spindle/runtime/fiber.hpp>

namespace spindle {

class scheduler {
public:
    struct options {
        // Worker threads; 0 means one per CPU (std::thread::hardware_concurrency).
        unsigned workers = 0;
        // Default usable stack size of its fibers; 0 means SPINDLE_STACK_SIZE
        // from the environment, or 128 KiB. At least 16 KiB.
        std::size_t stack_size = 0;
        // How long a worker whose fibers all wait for I/O keeps watching
        // its I/O engine for completions before it sleeps in the
        // kernel. A sleep and wake-up costs a context switch and, on a
        // virtual machine, often tens of microseconds of wake-up latency;
        // a request that arrives while the worker watches is served at
        // once. Adaptive: a worker stops watching while its idle gaps turn
        // out longer than this, and watches again once they are short.
        // Zero: sleep at once; at most one minute. A worker with a
        // sleeping fiber or a timed wait due within io_spin does not watch
        // (that wake-up would end the watch anyway). On io_uring a look
        // reads the ring's memory; on epoll it is an epoll_wait with no
        // timeout. Between looks the worker yields its CPU (sched_yield,
        // a system call that returns at once when no other thread waits
        // for that CPU); all of it is still cheaper than a sleep and
        // wake-up.
        std::chrono::microseconds io_spin{100};
        // How long a worker with I/O runs without a break before it
        // pauses, briefly, if some thread waits for a CPU. A busy worker
        // rarely sleeps: its clients' next requests are always there.
        // Where it shares CPUs with other threads -- two workers unpinned
        // beside the program that talks to them -- the kernel would let it
        // run until its time slice ends, milliseconds, while a thread its
        // own clients need waits; that was most of spindle-kv's p99 beside
        // memaslap. At the end of such a run the worker reads how many
        // threads are runnable machine-wide (1.5-2 us); more than the CPUs
        // online, it sleeps 20 us. A sleep keeps its place in the kernel's
        // fair queue, where sched_yield would give up a whole time slice.
        // Nobody waiting (the machine not oversubscribed, as on a server
        // pinned to its own CPUs): no pause. Beside threads that only
        // compute each pause lets one run its slice out; spindle-kv made
        // 0.8-0.9x the ops/s it made with no pauses there, about what
        // memcached makes (docs/io.md has the measurements). Checked at a
        // busy worker's periodic poll of its engine, so a run can exceed
        // it by one poll interval. Zero: never pause; at most one minute.
        // Non-zero also sets the worker threads' timer slack to 1 us.
        std::chrono::microseconds io_slice{400};
        // Worker 0 is the thread that calls run() (or ~scheduler()), and
        // the scheduler starts workers - 1 threads. Fibers spawned from
        // outside before run() go to those threads (with one worker, or
        // fiber_options::worker = 0, they wait for run()). With one worker
        // the process needs no thread beyond its own, as with an event
        // loop run on main(); the kernel then takes no reference on a file
        // for each socket call (fdget), which it must where threads share
        // the descriptor table. (A sleep before the worker's first I/O
        // call starts the process's timer thread, and spindle::blocking
        // its pool's threads, as anywhere.)
        bool caller_is_worker = false;
    };

    scheduler() : scheduler(options{}) {}
    explicit scheduler(options opts);
    ~scheduler();
    scheduler(const scheduler&) = delete;
    scheduler& operator=(const scheduler&) = delete;

    template <class Fn>
        requires std::is_invocable_v<std::decay_t<Fn>&>
    [[nodiscard]] fiber spawn(Fn&& fn, fiber_options opts = {}) {
        fiber f;
        f.start(state_, std::forward<Fn>(fn), opts);
        return f;
    }

    // With options::caller_is_worker: the calling thread (a plain thread,
    // not a fiber) becomes worker 0 and runs fibers until every fiber of
    // this scheduler has finished; then the other workers exit and run()
    // returns. Once per scheduler; spawn() after it aborts.
    void run();
    // spawn(fn), run(), then that fiber's join(): rethrows what fn threw.
    template <class Fn>
        requires std::is_invocable_v<std::decay_t<Fn>&>
    void run(Fn&& fn) {
        fiber f = spawn(std::forward<Fn>(fn));
        run();
        f.join();
    }

    // Number of workers (with caller_is_worker, worker 0 is run()'s caller).
    [[nodiscard]] unsigned workers() const noexcept;
    // Usable stack bytes a fiber gets when its options do not say.
    [[nodiscard]] std::size_t default_stack_size() const noexcept;
    // Fibers spawned and not yet finished.
    [[nodiscard]] std::size_t live_fibers() const noexcept;

private:
    friend detail::scheduler_state* detail::default_scheduler_state();
    detail::scheduler_state* state_;
};

}  // namespace spindle
